/* lora_mm.c — LoRA's small f32 products in ggml's summation order (lora_mm.h says which
 * order and why): the scalar kernels, written with fmaf and plain float operations (this
 * file is compiled as ISO C, where GCC contracts nothing), and the dispatch to the AVX2
 * ones, which give the same bits. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#include "model/lora_mm.h"

#include <math.h>

#include "quant/quant.h"

float hx_lora_dot_tinyblas(const float *w, const float *x, int64_t k) {
    float q[8] = {0};
    for (int64_t l = 0; l < k; l += 8)
        for (int j = 0; j < 8; j++) q[j] = fmaf(w[l + j], x[l + j], q[j]);
    return ((q[0] + q[4]) + (q[2] + q[6])) + ((q[1] + q[5]) + (q[3] + q[7]));
}

float hx_lora_dot_vecdot(const float *w, const float *x, int64_t k) {
    float a[4][8] = {{0}};
    const int64_t np = k & ~(int64_t)31;
    for (int64_t l = 0; l < np; l += 32)
        for (int j = 0; j < 4; j++)
            for (int q = 0; q < 8; q++) a[j][q] = fmaf(w[l + 8 * j + q], x[l + 8 * j + q], a[j][q]);
    float s[8], t[4];
    for (int q = 0; q < 8; q++) s[q] = (a[0][q] + a[2][q]) + (a[1][q] + a[3][q]);
    for (int q = 0; q < 4; q++) t[q] = s[q] + s[q + 4];
    float sum = (t[0] + t[1]) + (t[2] + t[3]);
    /* the tail, as GCC vectorized `sumf += x[i]*y[i]`: blocks of 8, one of 4, then FMAs */
    int64_t i = np;
    for (; i + 8 <= k; i += 8)
        for (int q = 0; q < 8; q++) { float p = w[i + q] * x[i + q]; sum = sum + p; }
    if (i + 4 <= k) {
        for (int q = 0; q < 4; q++) { float p = w[i + q] * x[i + q]; sum = sum + p; }
        i += 4;
    }
    for (; i < k; i++) sum = fmaf(w[i], x[i], sum);
    return sum;
}

typedef struct mm_job {
    const float *W, *X;
    float *Y;
    int64_t m, k, n, per_task;
    bool tiny, avx2;
} mm_job;

static void mm_rows(const mm_job *j, int64_t i0, int64_t i1) {
    if (j->avx2) {
        (j->tiny ? hx_lora_mm_tinyblas_avx2 : hx_lora_mm_vecdot_avx2)(j->W, j->m, j->k, j->X, i0, i1, j->Y);
        return;
    }
    for (int64_t i = i0; i < i1; i++)
        for (int64_t r = 0; r < j->m; r++) {
            const float *w = j->W + r * j->k, *x = j->X + i * j->k;
            j->Y[i * j->m + r] = j->tiny ? hx_lora_dot_tinyblas(w, x, j->k) : hx_lora_dot_vecdot(w, x, j->k);
        }
}

static void mm_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const mm_job *j = ctx;
    int64_t i0 = task * j->per_task, i1 = i0 + j->per_task < j->n ? i0 + j->per_task : j->n;
    mm_rows(j, i0, i1);
}

void hx_lora_mm_ggml(hx_pool *pool, const float *W, int64_t m, int64_t k, const float *X, int64_t n, bool batch,
                     float *Y) {
    mm_job j = { W, X, Y, m, k, n, 0, batch && k % 8 == 0 && m % 4 == 0, hx_isa_current() >= HX_ISA_AVX2 };
    /* threads only where the work outweighs waking them (a prompt, not a decode step) */
    int nt = pool ? hx_pool_threads(pool) : 1;
    if (nt < 2 || n < 2 || (double)n * (double)m * (double)k < (double)(1 << 20)) {
        mm_rows(&j, 0, n);
        return;
    }
    int64_t tasks = n < 4 * nt ? n : 4 * nt;
    j.per_task = (n + tasks - 1) / tasks;
    hx_pool_run(pool, (n + j.per_task - 1) / j.per_task, mm_task, &j);
}
