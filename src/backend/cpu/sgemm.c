/* sgemm.c — packing, blocking and threading of the f32 products (sgemm.h);
 * the scalar kernel and helpers; dispatch to sgemm_avx2.c. */
#include "backend/cpu/sgemm.h"
#include "backend/cpu/sgemm_impl.h"
#include "quant/quant.h"

#include <math.h>
#include <string.h>

#define NR HX_SGEMM_NR
#define MR HX_SGEMM_MR

size_t hx_sgemm_packed_size(int64_t rows, int64_t cols) {
    return (size_t)((rows + NR - 1) / NR) * NR * (size_t)cols;
}

static bool use_avx2(void) { return hx_isa_current() >= HX_ISA_AVX2; }

void hx_sgemm_pack_nt(const float *W, int64_t ldw, int64_t rows, int64_t cols, float *dst) {
    if (use_avx2()) { hx_sgemm_pack_nt_avx2(W, ldw, rows, cols, dst); return; }
    for (int64_t p = 0; p < (rows + NR - 1) / NR; p++) {
        float *d = dst + (size_t)p * NR * (size_t)cols;
        for (int j = 0; j < NR; j++) {
            int64_t r = p * NR + j;
            if (r < rows) {
                const float *w = W + (size_t)r * (size_t)ldw;
                for (int64_t k = 0; k < cols; k++) d[k * NR + j] = w[k];
            } else {
                for (int64_t k = 0; k < cols; k++) d[k * NR + j] = 0.0f;
            }
        }
    }
}

void hx_sgemm_pack_nn(const float *B, int64_t ldb, int64_t rows, int64_t cols, float *dst) {
    for (int64_t p = 0; p < (rows + NR - 1) / NR; p++) {
        float *d = dst + (size_t)p * NR * (size_t)cols;
        int64_t r0 = p * NR, nr = rows - r0 < NR ? rows - r0 : NR;
        for (int64_t k = 0; k < cols; k++) {
            const float *b = B + (size_t)k * (size_t)ldb + r0;
            float *o = d + k * NR;
            memcpy(o, b, (size_t)nr * sizeof(float));
            for (int64_t j = nr; j < NR; j++) o[j] = 0.0f;
        }
    }
}

/* ---- scalar kernel and helpers (the reference for the AVX2 ones) ---- */

float hx_gelu_ref(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

static void tile_scalar(int mr, int64_t K, const float *A, int64_t lda, const float *B, float *C, int64_t ldc,
                        int acc) {
    float c[MR][NR];
    memset(c, 0, sizeof c);
    for (int64_t k = 0; k < K; k++) {
        const float *b = B + k * NR;
        for (int i = 0; i < mr; i++) {
            float a = A[(size_t)i * (size_t)lda + (size_t)k];
            for (int j = 0; j < NR; j++) c[i][j] += a * b[j];
        }
    }
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < NR; j++) C[(size_t)i * (size_t)ldc + j] = (acc ? C[(size_t)i * (size_t)ldc + j] : 0.0f) + c[i][j];
}

static void epi_scalar(float *C, int64_t ldc, int mr, int nr, const float *bias, int gelu) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float *c = &C[(size_t)i * (size_t)ldc + j];
            float v = *c + (bias ? bias[j] : 0.0f);
            *c = gelu ? hx_gelu_ref(v) : v;
        }
}

void hx_gelu_f32(float *x, int64_t n) {
    if (use_avx2()) { hx_gelu_avx2(x, n); return; }
    for (int64_t i = 0; i < n; i++) x[i] = hx_gelu_ref(x[i]);
}

void hx_softmax_f32(float *x, int n, float scale) {
    if (use_avx2()) { hx_softmax_avx2(x, n, scale); return; }
    float mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) { x[i] *= scale; if (x[i] > mx) mx = x[i]; }
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    for (int i = 0; i < n; i++) x[i] /= sum;
}

void hx_layernorm_f32(float *x, int n, const float *w, const float *b, float eps) {
    if (use_avx2()) { hx_layernorm_avx2(x, n, w, b, eps); return; }
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= n;
    float inv = (float)(1.0 / sqrt(var + eps));
    for (int i = 0; i < n; i++) x[i] = ((float)(x[i] - mean)) * inv * w[i] + b[i];
}

/* ---- the blocked driver ---- */

typedef void (*tile_fn)(int mr, int64_t K, const float *A, int64_t lda, const float *B, float *C, int64_t ldc, int acc);
typedef void (*epi_fn)(float *C, int64_t ldc, int mr, int nr, const float *bias, int gelu);

typedef struct sg_job {
    tile_fn tile;
    epi_fn epi;
    int64_t n, rows, cols, ldx, ldy;
    const float *X, *Wp, *bias;
    float *Y;
    unsigned flags;
    int64_t mc, nc, kc;      /* block sizes: X rows, output columns (a multiple of NR), k slice */
    int64_t n_mb;            /* X row blocks */
} sg_job;

/* One task: X rows [m0, m1) x output columns [j0, j1), all of k. */
static void sg_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const sg_job *g = ctx;
    int64_t mb = task % g->n_mb, nb = task / g->n_mb;
    int64_t m0 = mb * g->mc, m1 = m0 + g->mc < g->n ? m0 + g->mc : g->n;
    int64_t j0 = nb * g->nc, j1 = j0 + g->nc < g->rows ? j0 + g->nc : g->rows;
    const int gelu = (g->flags & HX_SGEMM_GELU) != 0;
    float tmp[MR * NR];
    for (int64_t k0 = 0; k0 < g->cols; k0 += g->kc) {
        int64_t kc = g->cols - k0 < g->kc ? g->cols - k0 : g->kc;
        int acc = k0 > 0 || (g->flags & HX_SGEMM_ACC);
        bool last = k0 + kc == g->cols;
        for (int64_t j = j0; j < j1; j += NR) {
            const float *bp = g->Wp + (size_t)(j / NR) * NR * (size_t)g->cols + (size_t)k0 * NR;
            int nr = j1 - j < NR ? (int)(j1 - j) : NR;
            for (int64_t i = m0; i < m1; i += MR) {
                int mr = m1 - i < MR ? (int)(m1 - i) : MR;
                const float *a = g->X + (size_t)i * (size_t)g->ldx + (size_t)k0;
                float *c = g->Y + (size_t)i * (size_t)g->ldy + (size_t)j;
                if (nr == NR) {
                    g->tile(mr, kc, a, g->ldx, bp, c, g->ldy, acc);
                } else {
                    g->tile(mr, kc, a, g->ldx, bp, tmp, NR, 0);
                    for (int r = 0; r < mr; r++)
                        for (int q = 0; q < nr; q++) {
                            float *y = &c[(size_t)r * (size_t)g->ldy + q];
                            *y = (acc ? *y : 0.0f) + tmp[r * NR + q];
                        }
                }
                if (last && (g->bias || gelu)) g->epi(c, g->ldy, mr, nr, g->bias ? g->bias + j : NULL, gelu);
            }
        }
    }
}

void hx_sgemm(hx_pool *pool, int64_t n, int64_t rows, int64_t cols, const float *X, int64_t ldx, const float *Wp,
              float *Y, int64_t ldy, const float *bias, unsigned flags) {
    if (n <= 0 || rows <= 0) return;
    if (cols <= 0) { /* empty sum: Y = (Y or 0) + bias, GELU */
        for (int64_t i = 0; i < n; i++) {
            float *y = Y + (size_t)i * (size_t)ldy;
            if (!(flags & HX_SGEMM_ACC)) memset(y, 0, (size_t)rows * sizeof(float));
            epi_scalar(y, ldy, 1, (int)rows, bias, (flags & HX_SGEMM_GELU) != 0);
        }
        return;
    }
    sg_job g = {.n = n, .rows = rows, .cols = cols, .ldx = ldx, .ldy = ldy, .X = X, .Wp = Wp, .bias = bias,
                .Y = Y, .flags = flags};
    if (use_avx2()) { g.tile = hx_sgemm_tile_avx2; g.epi = hx_sgemm_epi_avx2; }
    else { g.tile = tile_scalar; g.epi = epi_scalar; }
    /* k slice: a panel slice of kc x 16 floats (<= 16 KiB) stays in L1 */
    int64_t n_k = (cols + 255) / 256;
    g.kc = (cols + n_k - 1) / n_k;
    /* 96 X rows per block (16 strips of 6); panels: a block of <= ~192 KiB of packed weights */
    g.mc = 16 * MR;
    g.n_mb = (n + g.mc - 1) / g.mc;
    int64_t panels = (rows + NR - 1) / NR;
    int64_t ppb = (int64_t)(196608 / ((size_t)cols * NR * sizeof(float)));
    if (ppb < 1) ppb = 1;
    /* small products: a pool hand-off (~10-15 us) costs more than the work */
    double flops = 2.0 * (double)n * (double)rows * (double)cols;
    int nth = pool && flops >= 2e6 ? hx_pool_threads(pool) : 1;
    if (nth > 1) { /* at least ~4 tasks per thread so the threads finish together */
        int64_t want_nb = (4 * nth + g.n_mb - 1) / g.n_mb;
        if (want_nb > panels) want_nb = panels;
        if (want_nb > 1 && (panels + ppb - 1) / ppb < want_nb) ppb = (panels + want_nb - 1) / want_nb;
    }
    g.nc = ppb * NR;
    int64_t n_nb = (panels + ppb - 1) / ppb;
    hx_pool_run(nth > 1 ? pool : NULL, g.n_mb * n_nb, sg_task, &g);
}
