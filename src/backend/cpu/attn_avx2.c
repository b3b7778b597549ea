/* attn_avx2.c — F16C/FMA helpers for the ggml-compatible f16 attention
 * accumulator (forward.c): same rounding as the scalar code (IEEE
 * round-to-nearest-even conversions, one fused multiply-add), 8 lanes at a time.
 * Only called after a run-time AVX2+F16C check. */
#include "backend/cpu/attn.h"

#include <immintrin.h>

/* acc[d] = f16(fma(f32(v[d]), s, f32(acc[d]))) */
void hx_f16_mad_avx2(int n, uint16_t *acc, const uint16_t *v, float s) {
    __m256 vs = _mm256_set1_ps(s);
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(acc + d)));
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + d)));
        a = _mm256_fmadd_ps(x, vs, a);
        _mm_storeu_si128((__m128i *)(acc + d), _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d < n; d++) {
        float a = _cvtsh_ss(acc[d]), x = _cvtsh_ss(v[d]);
        acc[d] = _cvtss_sh(__builtin_fmaf(x, s, a), _MM_FROUND_TO_NEAREST_INT);
    }
}

/* acc[d] = f16(f32(acc[d]) * s) */
void hx_f16_scale_avx2(int n, uint16_t *acc, float s) {
    __m256 vs = _mm256_set1_ps(s);
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        __m256 a = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(acc + d)));
        _mm_storeu_si128((__m128i *)(acc + d), _mm256_cvtps_ph(_mm256_mul_ps(a, vs), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d < n; d++) acc[d] = _cvtss_sh(_cvtsh_ss(acc[d]) * s, _MM_FROUND_TO_NEAREST_INT);
}

/* acc[d] += w * f32(v[d]): a multiply then an add (no fusion), as the scalar
 * loop compiles under -std=c17 (no contraction), so results are identical. */
void hx_f32_axpy_f16_avx2(int n, float *acc, const uint16_t *v, float w) {
    __m256 vw = _mm256_set1_ps(w);
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + d)));
        _mm256_storeu_ps(acc + d, _mm256_add_ps(_mm256_loadu_ps(acc + d), _mm256_mul_ps(vw, x)));
    }
    for (; d < n; d++) acc[d] += w * _cvtsh_ss(v[d]);
}

void hx_f32_to_f16_row_avx2(int n, uint16_t *dst, const float *src) {
    int d = 0;
    for (; d + 8 <= n; d += 8)
        _mm_storeu_si128((__m128i *)(dst + d), _mm256_cvtps_ph(_mm256_loadu_ps(src + d), _MM_FROUND_TO_NEAREST_INT));
    for (; d < n; d++) dst[d] = _cvtss_sh(src[d], _MM_FROUND_TO_NEAREST_INT);
}

void hx_f16_to_f32_row_avx2(int n, float *dst, const uint16_t *src) {
    int d = 0;
    for (; d + 8 <= n; d += 8) _mm256_storeu_ps(dst + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + d))));
    for (; d < n; d++) dst[d] = _cvtsh_ss(src[d]);
}
