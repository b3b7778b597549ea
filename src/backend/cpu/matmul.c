/* matmul.c — matvec / matmul: quantize activations once, split weight rows
 * across the pool, call the dot kernel per row.
 *
 * Activations are quantized with hx_quantize_row_act: ggml's x86 SIMD rule for
 * Q8_0 / Q8_1 (q = round-half-even(x * 127/amax), Q8_1's s from the unrounded d)
 * and its reference rule for Q8_K, i.e. what llama.cpp's CPU backend on this
 * machine does. With it (and ggml's rounding order in the Q4_1/Q5_1/F16 dots and
 * the decoder's activation, rope and softmax steps) SmolLM2-135M-Instruct Q4_1
 * gives llama.cpp's logits within 1e-6 for 64 greedy steps (bench/RESULTS.md).
 * (hx_quantize_row's reference rule, 1/d and roundf, used to be used here; on a
 * real model it flips a rounding within a few layers.)
 *
 * Matvec is memory-bound: every weight byte is read once, so the only goals
 * are to keep both cores streaming and to make tasks big enough that the
 * pool's hand-out cost vanishes (a task = a chunk of rows, ~64 KiB of weights).
 * Matmul is compute-bound for large n: a task owns a block of weight rows that
 * stays in L1/L2 while every token of a token block uses it. Kernels: matvec
 * runs hx_get_gemm's tiles (bit-identical to the AVX2 per-row kernel), n > 1
 * hx_get_gemm_batch's (for Q8_0/Q4_0/Q5_0/Q4_K/Q6_K packed 8-row kernels,
 * 16-row for Q4_K with VNNI, bit-identical to the scalar per-row kernel); in
 * the parity mode Q4_K batches run hx_get_gemm_q4_K_ggml's packed kernels. */
#include "backend/cpu/matmul.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "quant/quant.h"

/* F16 / BF16 weights: ggml converts the activations to the weight's type
 * before the dot (vec_dot_type F16 / BF16); we keep f32 storage but round the
 * values the same way, so products and greedy choices match. */
static void act_round(int wtype, const float *x, float *dst, int64_t n) {
    if (wtype == HX_TYPE_F16)
        for (int64_t i = 0; i < n; i++) dst[i] = hx_fp16_to_fp32(hx_fp32_to_fp16(x[i]));
    else
        for (int64_t i = 0; i < n; i++) dst[i] = hx_bf16_to_fp32(hx_fp32_to_bf16(x[i]));
}


/* The quantized activations of a call live in a per-calling-thread buffer
 * that only grows (freed when the thread exits): decode calls matmul a few
 * hundred times per token, and a malloc/free pair per call (an mmap and its
 * page faults for prefill-sized batches) is avoidable. Per thread because two
 * threads may run products at once (the daemon); a call never re-enters
 * matmul on its own thread, so one buffer per thread suffices. */
typedef struct { uint8_t *p; size_t cap; } scratch;
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static void scratch_free(void *v) {
    scratch *s = v;
    free(s->p);
    free(s);
}
static void scratch_init(void) {
    if (pthread_key_create(&g_scratch_key, scratch_free) != 0) abort();
}
static uint8_t *scratch_get(size_t bytes) {
    pthread_once(&g_scratch_once, scratch_init);
    scratch *s = pthread_getspecific(g_scratch_key);
    if (!s) {
        if (!(s = calloc(1, sizeof *s))) return NULL;
        if (pthread_setspecific(g_scratch_key, s) != 0) { free(s); return NULL; }
    }
    if (s->cap < bytes) {
        size_t cap = bytes + bytes / 4; /* room for a slightly longer next batch */
        uint8_t *p = realloc(s->p, cap);
        if (!p) return NULL;
        s->p = p;
        s->cap = cap;
    }
    return s->p;
}

typedef struct q_job { int type, wtype; const float *X; uint8_t *dst; int64_t cols; size_t row_bytes; } q_job;
static void q_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    const q_job *q = ctx;
    if (q->type == HX_TYPE_F32) {
        act_round(q->wtype, q->X + (size_t)t * q->cols, (float *)(q->dst + (size_t)t * q->row_bytes), q->cols);
        return;
    }
    const float *x = q->X + (size_t)t * q->cols;
    uint8_t *dst = q->dst + (size_t)t * q->row_bytes;
    hx_quantize_row_act(q->type, x, dst, q->cols); /* ggml's x86 rule, see the header comment */
}

enum { MM_MAX = 4 };
typedef struct mm_job {
    int count;                  /* matrices sharing the activations */
    hx_vec_dot_fn dot[MM_MAX];
    hx_gemm_fn gemm[MM_MAX];    /* tiled kernel, NULL: per-row dot */
    hx_gemm_fn gemm_main[MM_MAX]; /* tokens [0, n_main): this kernel instead (HX_MM_GGML_ORDER's Q4_K) */
    int64_t n_main[MM_MAX];
    const uint8_t *w[MM_MAX];   /* weight rows */
    size_t w_row[MM_MAX];       /* bytes per weight row */
    int64_t rows[MM_MAX];
    int64_t rpt[MM_MAX];        /* rows per task */
    int64_t task0[MM_MAX + 1];  /* first task of each matrix */
    int64_t tpt, n_tc;          /* tokens per task (a multiple of 16), token chunks per row block */
    float *y[MM_MAX];           /* (n, rows[m]) */
    const uint8_t *x;           /* activations in dot type, n rows */
    size_t x_row;
    int64_t cols, n, tok_block;
} mm_job;

/* Rows [r0, r1) of matrix m for tokens [n0, n1), token blocks outermost so a
 * row block (a few KiB) is reused from L1 across the token block. Every
 * output is one kernel call's, so how rows and tokens are split into tasks
 * does not change any bit. */
static void mm_rows(const mm_job *j, int m, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
    hx_vec_dot_fn dot = j->dot[m];
    const uint8_t *w = j->w[m];
    size_t wr = j->w_row[m];
    int64_t rows = j->rows[m];
    float *y = j->y[m];
    hx_gemm_fn gemm = j->gemm[m];
    if (gemm) {
        for (int64_t t0 = n0; t0 < n1; t0 += j->tok_block) {
            int64_t t1 = t0 + j->tok_block < n1 ? t0 + j->tok_block : n1;
            /* [t0, tm) with gemm_main, [tm, t1) with gemm */
            int64_t tm = t1 < j->n_main[m] ? t1 : t0 > j->n_main[m] ? t0 : j->n_main[m];
            if (tm > t0)
                j->gemm_main[m](j->cols, r1 - r0, tm - t0, w + (size_t)r0 * wr, wr, j->x + (size_t)t0 * j->x_row,
                                j->x_row, y + (size_t)t0 * rows + r0, (size_t)rows);
            if (t1 > tm)
                gemm(j->cols, r1 - r0, t1 - tm, w + (size_t)r0 * wr, wr, j->x + (size_t)tm * j->x_row, j->x_row,
                     y + (size_t)tm * rows + r0, (size_t)rows);
        }
        return;
    }
    if (j->n == 1) {
        for (int64_t r = r0; r < r1; r++) dot(j->cols, &y[r], w + (size_t)r * wr, j->x);
        return;
    }
    for (int64_t t0 = n0; t0 < n1; t0 += j->tok_block) {
        int64_t t1 = t0 + j->tok_block < n1 ? t0 + j->tok_block : n1;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *wrp = w + (size_t)r * wr;
            for (int64_t t = t0; t < t1; t++) dot(j->cols, &y[(size_t)t * rows + r], wrp, j->x + (size_t)t * j->x_row);
        }
    }
}

/* One task: rows [r0, r1) of one matrix for tokens [n0, n1) (all n unless
 * the rows alone give too few tasks). */
static void mm_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    int m = 0;
    while (task >= j->task0[m + 1]) m++;
    int64_t rb = (task - j->task0[m]) / j->n_tc, tc = (task - j->task0[m]) % j->n_tc;
    int64_t r0 = rb * j->rpt[m];
    int64_t r1 = r0 + j->rpt[m] < j->rows[m] ? r0 + j->rpt[m] : j->rows[m];
    int64_t n0 = tc * j->tpt, n1 = n0 + j->tpt < j->n ? n0 + j->tpt : j->n;
    mm_rows(j, m, r0, r1, n0, n1);
}

/* Activation handling of a weight type: dot type, and whether X can be used as is. */
static bool x_as_is(const hx_type_info *ti, int wtype, unsigned flags) {
    return ti->dot_type == HX_TYPE_F32 && (wtype == HX_TYPE_F32 || !(flags & HX_MM_ROUND_F16_ACT));
}

/* The job of count matrices on the same activations: kernels, the quantized
 * activations, the split into tasks; *pool becomes NULL when the work is too
 * small to share. */
static hx_status mm_prepare(hx_pool **poolp, int count, const hx_tensor *const *Ws, const float *X, int64_t n,
                            float *const *Ys, unsigned flags, mm_job *out, hx_error *e) {
    hx_pool *pool = *poolp;
    if (count < 1 || count > MM_MAX) return hx_err(e, HX_ERR_ARG, "matmul: %d matrices (1..%d)", count, MM_MAX);
    mm_job j = { .count = count, .n = n };
    const hx_type_info *ti0 = NULL;
    double work = 0;
    for (int m = 0; m < count; m++) {
        const hx_tensor *W = Ws[m];
        const hx_type_info *ti = hx_type_get(W->type);
        hx_vec_dot_fn dot = ti && ti->supported ? hx_get_vec_dot(W->type, hx_isa_current()) : NULL;
        if (!dot)
            return hx_err(e, HX_ERR_UNSUPPORTED, "matmul: tensor '%s': type %s has no dot kernel",
                          W->name ? W->name : "?", hx_type_name(W->type));
        int64_t cols = W->ne[0], rows = W->ne[1];
        size_t w_row = hx_row_size(W->type, cols);
        if (!w_row || n <= 0 || rows <= 0)
            return hx_err(e, HX_ERR_ARG, "matmul: tensor '%s': bad shape %lld x %lld (n %lld)",
                          W->name ? W->name : "?", (long long)rows, (long long)cols, (long long)n);
        if (m == 0) { ti0 = ti; j.cols = cols; }
        else if (cols != j.cols || ti->dot_type != ti0->dot_type ||
                 x_as_is(ti, W->type, flags) != x_as_is(ti0, Ws[0]->type, flags) ||
                 (!x_as_is(ti, W->type, flags) && ti->dot_type == HX_TYPE_F32 && W->type != Ws[0]->type))
            return hx_err(e, HX_ERR_ARG, "matmul: tensors '%s' and '%s' cannot share activations",
                          Ws[0]->name ? Ws[0]->name : "?", W->name ? W->name : "?");
        /* the tiled kernels give the same bits as the AVX2 per-row ones, and
         * every ISA level above AVX2 the same bits as AVX2 (quant/dot.h): so
         * the parity order below holds on AVX-512 machines too */
        hx_isa isa = hx_isa_current();
        j.gemm[m] = n > 1 ? hx_get_gemm_batch(W->type, isa) : hx_get_gemm(W->type, isa);
        j.n_main[m] = 0;
        if ((flags & HX_MM_GGML_ORDER) && isa >= HX_ISA_AVX2) {
            if (W->type == HX_TYPE_Q4_K && rows % 8 == 0) {
                /* llama.cpp's repacked kernels: its gemm order for the first n - n % 4
                 * tokens, its gemv order for the rest and for matvec (row tiles) */
                dot = hx_dot_q4_K_ggml_gemv_avx2;
                j.gemm[m] = hx_get_gemm_q4_K_ggml(isa, true);
                j.gemm_main[m] = hx_get_gemm_q4_K_ggml(isa, false);
                j.n_main[m] = n - n % 4;
            } else if (n > 1 && (W->type == HX_TYPE_Q8_0 || W->type == HX_TYPE_Q5_0 || W->type == HX_TYPE_Q6_K)) {
                /* the AVX2 per-row (= ggml) order; matvec's hx_get_gemm tiles have it already */
                j.gemm[m] = hx_get_gemm_ggml(W->type, isa);
            }
        }
        j.dot[m] = dot; j.w[m] = W->data; j.w_row[m] = w_row; j.rows[m] = rows; j.y[m] = Ys[m];
        work += (double)w_row * rows * n;
    }
    j.x_row = hx_row_size(ti0->dot_type, j.cols);
    if (!j.x_row) return hx_err(e, HX_ERR_ARG, "matmul: row length %lld", (long long)j.cols);

    if (x_as_is(ti0, Ws[0]->type, flags)) {
        j.x = (const uint8_t *)X;
    } else {
        uint8_t *xq = scratch_get(j.x_row * (size_t)n);
        if (!xq) return hx_err(e, HX_ERR_NOMEM, "matmul: out of memory for %lld activation rows", (long long)n);
        q_job q = { ti0->dot_type, Ws[0]->type, X, xq, j.cols, j.x_row };
        hx_pool_run(n >= 8 && (double)j.x_row * n >= 65536.0 ? pool : NULL, n, q_task, &q);
        j.x = xq;
    }

    /* small products: a pool hand-off (~10-15 us) costs more than the work */
    if (work < 128.0 * 1024) pool = NULL;
    int nth = pool ? hx_pool_threads(pool) : 1;
    /* rows per task: ~64 KiB of weights for matvec, but at least 8 tasks per
     * thread per matrix so the threads finish together; for batches a 16 KiB
     * row block. From 128 tokens a batch's row blocks are 64 KiB, at least 2
     * per thread: every kernel call lays out its tokens' activations again
     * (the packed kernels' per-call preparation), so fewer, taller row blocks
     * do that less often, and the token split below brings the task count
     * back to 8 per thread. */
    const bool tall = n >= 128;
    const size_t target = n == 1 || tall ? 65536 : 16384;
    const int64_t per_thread = tall ? 2 : 8;
    int64_t row_tasks = 0;
    for (int m = 0; m < count; m++) {
        int64_t rpt = (int64_t)(target / j.w_row[m]);
        if (rpt < 1) rpt = 1;
        int64_t max_rpt = (j.rows[m] + per_thread * nth - 1) / (per_thread * nth);
        if (rpt > max_rpt) rpt = max_rpt > 0 ? max_rpt : 1;
        if (j.gemm[m]) /* whole tiles of 3, 4 or 8 rows (matvec), also of 16 for batches */
            rpt = n == 1 ? (rpt + 23) / 24 * 24 : (rpt + 47) / 48 * 48;
        j.rpt[m] = rpt;
        row_tasks += (j.rows[m] + rpt - 1) / rpt;
    }
    /* A batch whose row blocks give fewer than 8 tasks per thread (48-row
     * blocks of a 576- or 1024-row matrix on 16 threads) is also split over
     * tokens, in chunks of whole 16-token groups, so that the last round of
     * tasks, where some threads idle, is at most a ninth of the job. */
    j.tpt = n;
    if (n > 1 && row_tasks < 8 * nth) {
        int64_t k = (8 * nth + row_tasks - 1) / row_tasks;
        int64_t tpt = ((n + k - 1) / k + 15) / 16 * 16;
        if (tpt < n) j.tpt = tpt;
    }
    j.n_tc = (n + j.tpt - 1) / j.tpt;
    j.task0[0] = 0;
    for (int m = 0; m < count; m++) j.task0[m + 1] = j.task0[m] + (j.rows[m] + j.rpt[m] - 1) / j.rpt[m] * j.n_tc;
    /* token block: keep the quantized activations of a block in L2 (~256 KiB) */
    int64_t tb = (int64_t)(262144 / j.x_row);
    j.tok_block = tb < 1 ? 1 : tb;
    *out = j;
    *poolp = pool;
    return HX_OK;
}

hx_status hx_matmul_multi(hx_pool *pool, int count, const hx_tensor *const *Ws, const float *X, int64_t n,
                          float *const *Ys, unsigned flags, hx_error *e) {
    mm_job j;
    hx_status st = mm_prepare(&pool, count, Ws, X, n, Ys, flags, &j, e);
    if (st != HX_OK) return st;
    hx_pool_run(pool, j.task0[count], mm_task, &j);
    return HX_OK;
}

/* hx_matvec_pair: a task is the same rows of both matrices, then the hook. */
typedef struct pair_job { const mm_job *j; int64_t rpt; hx_rows_fn post; void *post_ctx; } pair_job;
static void pair_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const pair_job *pj = ctx;
    int64_t rows = pj->j->rows[0], r0 = task * pj->rpt, r1 = r0 + pj->rpt < rows ? r0 + pj->rpt : rows;
    mm_rows(pj->j, 0, r0, r1, 0, 1);
    mm_rows(pj->j, 1, r0, r1, 0, 1);
    pj->post(pj->post_ctx, r0, r1);
}

hx_status hx_matvec_pair(hx_pool *pool, const hx_tensor *W0, const hx_tensor *W1, const float *x, float *y0,
                         float *y1, unsigned flags, hx_rows_fn post, void *post_ctx, hx_error *e) {
    if (W0->ne[1] != W1->ne[1])
        return hx_err(e, HX_ERR_ARG, "matvec pair: tensors '%s' and '%s' have %lld and %lld rows",
                      W0->name ? W0->name : "?", W1->name ? W1->name : "?", (long long)W0->ne[1],
                      (long long)W1->ne[1]);
    const hx_tensor *Ws[2] = { W0, W1 };
    float *Ys[2] = { y0, y1 };
    mm_job j;
    hx_status st = mm_prepare(&pool, 2, Ws, x, 1, Ys, flags, &j, e);
    if (st != HX_OK) return st;
    /* the shorter of the two matrices' task heights (both whole tiles), so a
     * task holds about as many weight bytes as a matvec task of either */
    pair_job pj = { &j, j.rpt[0] < j.rpt[1] ? j.rpt[0] : j.rpt[1], post, post_ctx };
    hx_pool_run(pool, (j.rows[0] + pj.rpt - 1) / pj.rpt, pair_task, &pj);
    return HX_OK;
}

hx_status hx_matmul_ex(hx_pool *pool, const hx_tensor *W, const float *X, int64_t n, float *Y, unsigned flags,
                       hx_error *e) {
    return hx_matmul_multi(pool, 1, &W, X, n, &Y, flags, e);
}

hx_status hx_matmul(hx_pool *pool, const hx_tensor *W, const float *X, int64_t n, float *Y, hx_error *e) {
    return hx_matmul_ex(pool, W, X, n, Y, 0, e);
}

hx_status hx_matvec(hx_pool *pool, const hx_tensor *W, const float *x, float *y, hx_error *e) {
    return hx_matmul_ex(pool, W, x, 1, y, 0, e);
}
