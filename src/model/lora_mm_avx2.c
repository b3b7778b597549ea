/* lora_mm_avx2.c — lora_mm.h's two summation orders with AVX2 + FMA, the same bits as the
 * scalar kernels in lora_mm.c (the same lanes, the same reduction trees). */
#include <immintrin.h>

#include "model/lora_mm.h"

/* tinyBLAS's hsum: ((q0 + q4) + (q2 + q6)) + ((q1 + q5) + (q3 + q7)) */
static inline float hsum_tinyblas(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

void hx_lora_mm_tinyblas_avx2(const float *W, int64_t m, int64_t k, const float *X, int64_t i0, int64_t i1, float *Y) {
    for (int64_t i = i0; i < i1; i++) {
        const float *x = X + i * k;
        float *y = Y + i * m;
        int64_t r = 0;
        for (; r + 4 <= m; r += 4) { /* four rows share each load of x */
            const float *w = W + r * k;
            __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
            for (int64_t l = 0; l < k; l += 8) {
                __m256 xv = _mm256_loadu_ps(x + l);
                c0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + l), xv, c0);
                c1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + l), xv, c1);
                c2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + 2 * k + l), xv, c2);
                c3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + 3 * k + l), xv, c3);
            }
            y[r] = hsum_tinyblas(c0);
            y[r + 1] = hsum_tinyblas(c1);
            y[r + 2] = hsum_tinyblas(c2);
            y[r + 3] = hsum_tinyblas(c3);
        }
        for (; r < m; r++) y[r] = hx_lora_dot_tinyblas(W + r * k, x, k);
    }
}

/* ggml_vec_dot_f32's reduction of its 4 x 8 accumulators */
static inline float hsum_vecdot(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    __m128 t = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    t = _mm_hadd_ps(t, t);
    return _mm_cvtss_f32(_mm_hadd_ps(t, t));
}

void hx_lora_mm_vecdot_avx2(const float *W, int64_t m, int64_t k, const float *X, int64_t i0, int64_t i1, float *Y) {
    const int64_t np = k & ~(int64_t)31;
    for (int64_t i = i0; i < i1; i++) {
        const float *x = X + i * k;
        float *y = Y + i * m;
        for (int64_t r = 0; r < m; r++) {
            const float *w = W + r * k;
            float sum = 0.0f;
            if (np) {
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (int64_t l = 0; l < np; l += 32) {
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + l), _mm256_loadu_ps(x + l), a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + l + 8), _mm256_loadu_ps(x + l + 8), a1);
                    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + l + 16), _mm256_loadu_ps(x + l + 16), a2);
                    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + l + 24), _mm256_loadu_ps(x + l + 24), a3);
                }
                sum = hsum_vecdot(a0, a1, a2, a3);
            }
            if (np == k) { y[r] = sum; continue; }
            /* the tail: rounded products added one at a time (8-blocks, a 4-block), then FMAs */
            int64_t l = np;
            for (; l + 4 <= k; l += 4) {
                float p[4];
                _mm_storeu_ps(p, _mm_mul_ps(_mm_loadu_ps(w + l), _mm_loadu_ps(x + l)));
                sum = sum + p[0]; sum = sum + p[1]; sum = sum + p[2]; sum = sum + p[3];
            }
            for (; l < k; l++) sum = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(w[l]), _mm_set_ss(x[l]), _mm_set_ss(sum)));
            y[r] = sum;
        }
    }
}
