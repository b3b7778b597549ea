/* fa_ggml_avx2.c — AVX2+FMA pieces of ggml's tiled flash attention (see fa_ggml.h): lanes
 * over keys for the scores and over dimensions for V, each lane a sequential fma chain, so
 * the bits equal the scalar versions. */
#include <immintrin.h>

#include "backend/cpu/expf8_avx2.h"
#include "backend/cpu/fa_ggml.h"

void hx_fa_scores64_avx2(int hd, const float *kt, const float *q, float scale, float *s) {
    __m256 a[8];
    for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
    for (int d = 0; d < hd; d++) {
        __m256 qd = _mm256_set1_ps(q[d]);
        const float *row = kt + (long)d * 64;
        for (int j = 0; j < 8; j++) a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * j), qd, a[j]);
    }
    __m256 sc = _mm256_set1_ps(scale);
    for (int j = 0; j < 8; j++) _mm256_storeu_ps(s + 8 * j, _mm256_mul_ps(a[j], sc));
}

double hx_fa_exp64_avx2(float *kq, float M) {
    double sum = 0.0;
    __m256 m = _mm256_set1_ps(M);
    for (int b = 0; b < 64; b += 8) {
        __m256 v = expf8(_mm256_sub_ps(_mm256_loadu_ps(kq + b), m));
        _mm256_storeu_ps(kq + b, v);
        __m128 h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        sum += (double)_mm_cvtss_f32(h);
    }
    return sum;
}

/* NB (<= 8) vectors of 8 dimensions from d0 on, keys outermost: NB independent fma chains
 * in flight instead of one at a time (an fma's latency is several of its issue slots);
 * each lane's chain is still k = 0..63 in order. */
static inline __attribute__((always_inline)) void vacc_chunk(const int NB, int hd, int d0, const float *v,
                                                             const float *p, float *vacc) {
    __m256 a[8];
    _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++) a[b] = _mm256_loadu_ps(vacc + d0 + 8 * b);
    for (int k = 0; k < 64; k++) {
        if (p[k] == 0.0f) continue;
        const __m256 pk = _mm256_set1_ps(p[k]);
        const float *row = v + (long)k * hd + d0;
        _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++) a[b] = _mm256_fmadd_ps(_mm256_loadu_ps(row + 8 * b), pk, a[b]);
    }
    _Pragma("GCC unroll 8") for (int b = 0; b < NB; b++) _mm256_storeu_ps(vacc + d0 + 8 * b, a[b]);
}

void hx_fa_vacc64_avx2(int hd, const float *v, const float *p, float *vacc) {
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) vacc_chunk(8, hd, d0, v, p, vacc);
    for (; d0 < hd; d0 += 8) vacc_chunk(1, hd, d0, v, p, vacc);
}
