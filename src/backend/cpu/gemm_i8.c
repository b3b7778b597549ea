/* gemm_i8.c — int8 products (gemm_i8.h): weight packing, activation
 * quantization, the scalar kernels and the split into pool tasks. */
#include "backend/cpu/gemm_i8.h"
#include "backend/cpu/gemm_i8_impl.h"
#include "backend/cpu/sgemm.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static void *alloc64(size_t bytes) { return aligned_alloc(64, round_up((int64_t)(bytes ? bytes : 1), 64)); }

/* ---- weights ---- */

void hx_i8_mat_free(hx_i8_mat *m) {
    if (!m) return;
    free(m->w);
    free(m->scale);
    free(m->wsum);
    free(m->wt);
    memset(m, 0, sizeof *m);
}

bool hx_i8_mat_pack(const float *W, int64_t ldw, int64_t rows, int64_t cols, hx_i8_mat *m) {
    memset(m, 0, sizeof *m);
    m->rows = rows, m->cols = cols, m->cols4 = round_up(cols, 4), m->panels = round_up(rows, 32) / 16;
    int64_t R = m->panels * 16;
    m->w = alloc64((size_t)(R * m->cols4));
    m->scale = alloc64((size_t)R * sizeof(float));
    m->wsum = alloc64((size_t)R * sizeof(int32_t));
    m->wt = alloc64((size_t)(cols * R));
    if (!m->w || !m->scale || !m->wsum || !m->wt) { hx_i8_mat_free(m); return false; }
    memset(m->w, 0, (size_t)(R * m->cols4));
    memset(m->wt, 0, (size_t)(cols * R));
    for (int64_t r = 0; r < R; r++) {
        m->scale[r] = 0, m->wsum[r] = 0;
        if (r >= rows) continue;
        const float *w = W + r * ldw;
        float amax = 0;
        for (int64_t k = 0; k < cols; k++) amax = fabsf(w[k]) > amax ? fabsf(w[k]) : amax;
        if (!(amax > 0) || !isfinite(amax)) continue;
        float s = amax / 127.0f, inv = 127.0f / amax;
        int8_t *panel = m->w + (r / 16) * 16 * m->cols4;
        int32_t sum = 0;
        for (int64_t k = 0; k < cols; k++) {
            long q = lrintf(w[k] * inv);
            q = q < -127 ? -127 : q > 127 ? 127 : q;
            panel[(k / 4) * 64 + (r % 16) * 4 + k % 4] = (int8_t)q;
            m->wt[k * R + r] = (int8_t)q;
            sum += (int32_t)q;
        }
        m->scale[r] = s, m->wsum[r] = sum;
    }
    return true;
}

/* ---- activations ---- */

size_t hx_i8_act_bytes(int64_t n, int64_t cols) {
    int64_t np = round_up(n, HX_I8_MR);
    return (size_t)(round_up(np * round_up(cols, 4), 64) + round_up(np * 4, 64) * 3 +
                    round_up(np * HX_I8_OUT_MAX * 4, 64) * 2);
}

void hx_i8_act_init(hx_i8_act *a, int64_t n, int64_t cols, void *block) {
    int64_t np = round_up(n, HX_I8_MR), c4 = round_up(cols, 4);
    uint8_t *p = block;
    a->n = n, a->cols = cols, a->cols4 = c4;
    a->q = p;
    p += round_up(np * c4, 64);
    a->scale = (float *)p;
    p += round_up(np * 4, 64);
    a->zero = (int32_t *)p;
    p += round_up(np * 4, 64);
    a->n_out = (int32_t *)p;
    p += round_up(np * 4, 64);
    a->out_k = (int32_t *)p;
    p += round_up(np * HX_I8_OUT_MAX * 4, 64);
    a->out_v = (float *)p;
    /* the padding rows: zero levels, zero scale, no outliers (their outputs are never stored) */
    memset(a->q + n * c4, 0, (size_t)((np - n) * c4));
    for (int64_t r = n; r < np; r++) a->scale[r] = 0, a->zero[r] = 0, a->n_out[r] = 0;
}

static void quant_scalar(const float *X, int64_t ldx, hx_i8_act *a, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; r++) {
        const float *x = X + r * ldx;
        uint8_t *q = a->q + r * a->cols4;
        float mn = x[0], mx = x[0], inv, lanes[16] = {0};
        for (int64_t k = 0; k < a->cols; k++) {
            mn = x[k] < mn ? x[k] : mn, mx = x[k] > mx ? x[k] : mx;
            lanes[k % 16] = fmaf(x[k], x[k], lanes[k % 16]);
        }
        float c = hx_i8_clip(lanes, a->cols);
        for (int pass = 0; pass < 2; pass++, c = INFINITY) { /* pass 1: too many outliers, no clip */
            hx_i8_row_params(mn, mx, c, &a->scale[r], &inv, &a->zero[r]);
            a->n_out[r] = 0;
            bool full = false;
            for (int64_t k = 0; k < a->cols && !full; k++) {
                long v = lrintf(x[k] * inv) + a->zero[r];
                q[k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                if (v != q[k] && !pass) full = !hx_i8_add_out(a, r, k, hx_i8_rem(x[k], a->scale[r], q[k], a->zero[r]));
            }
            if (!full) break;
        }
        for (int64_t k = a->cols; k < a->cols4; k++) q[k] = 0;
    }
}

typedef struct quant_job { const float *X; int64_t ldx; hx_i8_act *a; hx_i8_quant_fn fn; } quant_job;
enum { QUANT_ROWS = 32 };
static void quant_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    quant_job *j = ctx;
    int64_t r0 = task * QUANT_ROWS, r1 = r0 + QUANT_ROWS < j->a->n ? r0 + QUANT_ROWS : j->a->n;
    j->fn(j->X, j->ldx, j->a, r0, r1);
}

void hx_i8_quantize(hx_pool *pool, const float *X, int64_t ldx, hx_i8_act *a) {
    hx_isa isa = hx_isa_current();
    quant_job j = {X, ldx, a, isa >= HX_ISA_AVX512 ? hx_i8_quant_avx512 : isa >= HX_ISA_AVX2 ? hx_i8_quant_avx2 : quant_scalar};
    int64_t tasks = (a->n + QUANT_ROWS - 1) / QUANT_ROWS;
    hx_pool_run(tasks > 1 ? pool : NULL, tasks, quant_task, &j);
}

/* ---- the product ---- */

/* sum_o o * Wq[r][k_o] over token t's outliers (gemm_i8_impl.h's order). */
static float out_corr(const hx_i8_act *a, const hx_i8_mat *W, int64_t t, int64_t r) {
    float corr = 0;
    for (int o = 0; o < a->n_out[t]; o++)
        corr = fmaf(a->out_v[t * HX_I8_OUT_MAX + o], (float)W->wt[a->out_k[t * HX_I8_OUT_MAX + o] * W->panels * 16 + r], corr);
    return corr;
}

/* The scalar level: the reference every other level must match bit for bit. */
static void block_scalar(const hx_i8_act *a, const hx_i8_mat *W, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                         float *Y, int64_t ldy, const float *bias, unsigned flags) {
    int64_t kg = W->cols4 / 4;
    for (int64_t t = m0; t < m1; t++) {
        const uint8_t *x = a->q + t * a->cols4;
        for (int64_t r = p0 * 16; r < p1 * 16 && r < W->rows; r++) {
            const int8_t *w = W->w + (r / 16) * 16 * W->cols4 + (r % 16) * 4;
            int32_t acc = 0;
            for (int64_t g = 0; g < kg; g++)
                for (int i = 0; i < 4; i++) acc += (int32_t)x[4 * g + i] * w[64 * g + i];
            float y = hx_i8_out(acc, a->zero[t], W->wsum[r], a->scale[t], W->scale[r], bias ? bias[r] : 0.0f);
            if (a->n_out[t]) y = fmaf(out_corr(a, W, t, r), W->scale[r], y);
            float *o = Y + t * ldy + r;
            *o = flags & HX_I8_ACC ? *o + y : y;
        }
        if (flags & HX_I8_GELU) {
            int64_t r1 = p1 * 16 < W->rows ? p1 * 16 : W->rows;
            if (r1 > p0 * 16) hx_gelu_f32(Y + t * ldy + p0 * 16, r1 - p0 * 16);
        }
    }
}

enum { MB = 64, PB = 4 }; /* a task: 64 tokens x 4 panels (64 output rows) */

typedef struct gemm_job {
    const hx_i8_act *a;
    const hx_i8_mat *W;
    float *Y;
    int64_t ldy, n_pb;
    const float *bias;
    unsigned flags;
    hx_i8_block_fn fn;
} gemm_job;

static void gemm_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    gemm_job *j = ctx;
    int64_t mb = task / j->n_pb, pb = task % j->n_pb;
    int64_t m0 = mb * MB, m1 = m0 + MB < j->a->n ? m0 + MB : j->a->n;
    int64_t p0 = pb * PB, p1 = p0 + PB < j->W->panels ? p0 + PB : j->W->panels;
    j->fn(j->a, j->W, m0, m1, p0, p1, j->Y, j->ldy, j->bias, j->flags);
}

void hx_gemm_i8(hx_pool *pool, const hx_i8_act *a, const hx_i8_mat *W, float *Y, int64_t ldy, const float *bias,
                unsigned flags) {
    if (a->n <= 0 || W->rows <= 0) return;
    hx_isa isa = hx_isa_current();
    gemm_job j = {a, W, Y, ldy, (W->panels + PB - 1) / PB, bias, flags,
                  isa >= HX_ISA_AVX512_VNNI ? hx_i8_block_avx512 : isa >= HX_ISA_AVX2 ? hx_i8_block_avx2 : block_scalar};
    int64_t tasks = (a->n + MB - 1) / MB * j.n_pb;
    hx_pool_run(tasks > 1 ? pool : NULL, tasks, gemm_task, &j);
}
