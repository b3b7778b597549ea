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

/* The G query heads of one kv head against cnt cache rows (the i-th at row
 * (r0 + i) mod rows of kc, walked by hx_kv_next):
 * s[g * lds + first + i] = hx_dot_f16_avx2(hd, row, q + g * hd) bit for bit: per (head, row) the same 4 accumulators over steps of 32, the
 * same reduction; each row's f16 -> f32 conversions are shared by the G heads. */
static inline float reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 r = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}
void hx_attn_scores_f16_avx2(int hd, int G, const float *q, const hx_kv_rows *kc, int r0, int rows, int cnt,
                             float *s, size_t lds) {
    hx_kv_walk w = {0};
    for (int i = 0; i < cnt; i++) {
        const uint16_t *k = hx_kv_next(kc, &w, i, r0, rows);
        int g = 0;
        for (; g + 2 <= G; g += 2) { /* two heads: 8 accumulators + 4 converted key vectors */
            const float *qa = q + (size_t)g * hd, *qb = qa + hd;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            for (int d = 0; d < hd; d += 32) {
                const __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d)));
                const __m256 k1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d + 8)));
                const __m256 k2 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d + 16)));
                const __m256 k3 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d + 24)));
                a0 = _mm256_fmadd_ps(k0, _mm256_loadu_ps(qa + d), a0);
                a1 = _mm256_fmadd_ps(k1, _mm256_loadu_ps(qa + d + 8), a1);
                a2 = _mm256_fmadd_ps(k2, _mm256_loadu_ps(qa + d + 16), a2);
                a3 = _mm256_fmadd_ps(k3, _mm256_loadu_ps(qa + d + 24), a3);
                b0 = _mm256_fmadd_ps(k0, _mm256_loadu_ps(qb + d), b0);
                b1 = _mm256_fmadd_ps(k1, _mm256_loadu_ps(qb + d + 8), b1);
                b2 = _mm256_fmadd_ps(k2, _mm256_loadu_ps(qb + d + 16), b2);
                b3 = _mm256_fmadd_ps(k3, _mm256_loadu_ps(qb + d + 24), b3);
            }
            s[(size_t)g * lds + i] = reduce4(a0, a1, a2, a3);
            s[(size_t)(g + 1) * lds + i] = reduce4(b0, b1, b2, b3);
        }
        if (g < G) {
            const float *qa = q + (size_t)g * hd;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int d = 0; d < hd; d += 32) {
                a0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d))), _mm256_loadu_ps(qa + d), a0);
                a1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d + 8))),
                                     _mm256_loadu_ps(qa + d + 8), a1);
                a2 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d + 16))),
                                     _mm256_loadu_ps(qa + d + 16), a2);
                a3 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + d + 24))),
                                     _mm256_loadu_ps(qa + d + 24), a3);
            }
            s[(size_t)g * lds + i] = reduce4(a0, a1, a2, a3);
        }
    }
}

/* out[g * hd + d] = sum over i in order of (s[g * lds + i] * inv[g]) * f32(v_i[d]),
 * starting from 0, each step a multiply then an add: the bits of hx_f32_axpy_f16_avx2
 * called row by row with w = s * inv. 32 dimensions of every head stay in registers
 * while the rows stream by, and each row's conversion is shared by the G heads. */
void hx_attn_values_f16_avx2(int hd, int G, const float *s, size_t lds, const float *inv, const hx_kv_rows *vc,
                             int r0, int rows, int cnt, float *out) {
    for (int d = 0; d < hd; d += 32)
        for (int g0 = 0; g0 < G; g0 += 2) {
            const int two = g0 + 1 < G;
            const float *sa = s + (size_t)g0 * lds, *sb = two ? sa + lds : sa;
            const float ia = inv[g0], ib = two ? inv[g0 + 1] : inv[g0];
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
            hx_kv_walk w = {0};
            for (int i = 0; i < cnt; i++) {
                const uint16_t *v = hx_kv_next(vc, &w, i, r0, rows) + d;
                const __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)v));
                const __m256 v1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + 8)));
                const __m256 v2 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + 16)));
                const __m256 v3 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + 24)));
                const __m256 wa = _mm256_set1_ps(sa[i] * ia), wb = _mm256_set1_ps(sb[i] * ib);
                a0 = _mm256_add_ps(a0, _mm256_mul_ps(wa, v0));
                a1 = _mm256_add_ps(a1, _mm256_mul_ps(wa, v1));
                a2 = _mm256_add_ps(a2, _mm256_mul_ps(wa, v2));
                a3 = _mm256_add_ps(a3, _mm256_mul_ps(wa, v3));
                b0 = _mm256_add_ps(b0, _mm256_mul_ps(wb, v0));
                b1 = _mm256_add_ps(b1, _mm256_mul_ps(wb, v1));
                b2 = _mm256_add_ps(b2, _mm256_mul_ps(wb, v2));
                b3 = _mm256_add_ps(b3, _mm256_mul_ps(wb, v3));
            }
            float *oa = out + (size_t)g0 * hd + d;
            _mm256_storeu_ps(oa, a0); _mm256_storeu_ps(oa + 8, a1);
            _mm256_storeu_ps(oa + 16, a2); _mm256_storeu_ps(oa + 24, a3);
            if (two) {
                float *ob = oa + hd;
                _mm256_storeu_ps(ob, b0); _mm256_storeu_ps(ob + 8, b1);
                _mm256_storeu_ps(ob + 16, b2); _mm256_storeu_ps(ob + 24, b3);
            }
        }
}
