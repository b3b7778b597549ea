/* act_avx2.c — AVX2 activation quantizers (Q8_0, Q8_1, Q8_K), bit-identical to
 * the scalar ones in quantize.c: the same float operations in the same order
 * (x * 127/amax or x * iscale, one rounding each), round half to even (what
 * quantize.c's nearest_int does), the same f16 saturation. */
#include "quant/dot.h"
#include "quant/quant_formats.h"
#include "quant/simd_avx2.h"

#include <immintrin.h>
#include <math.h>

static inline uint16_t f16_scale(float d) {
    if (d > 65504.f) d = 65504.f;
    if (d < -65504.f) d = -65504.f;
    return hx_fp32_to_fp16(d);
}

/* 32 floats times mul, rounded half-even, clamped to [-127, 127], as int8 in order */
static inline __m256i round32(const float *x, __m256 mul) {
#define RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x), mul), RNE));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8), mul), RNE));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 16), mul), RNE));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 24), mul), RNE));
    /* packs interleave 128-bit lanes; the permute restores element order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    return _mm256_max_epi8(p, _mm256_set1_epi8(-127));
}

static inline float absmax32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8)));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 16)));
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 24)));
    return hmax_ps(m);
}

static inline int hsum_i8(__m256i q) {
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
    const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

void hx_quant_act_q8_0_avx2(const float *x, void *vy, int64_t nb) {
    block_q8_0 *y = vy;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float amax = absmax32(x);
        y[i].d = f16_scale(amax / 127.f);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        _mm256_storeu_si256((__m256i *)y[i].qs, round32(x, _mm256_set1_ps(id)));
    }
}

void hx_quant_act_q8_1_avx2(const float *x, void *vy, int64_t nb) {
    block_q8_1 *y = vy;
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float amax = absmax32(x);
        const float d = amax / 127.f;
        y[i].d = f16_scale(d);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        const __m256i q = round32(x, _mm256_set1_ps(id));
        _mm256_storeu_si256((__m256i *)y[i].qs, q);
        y[i].s = f16_scale(d * (float)hsum_i8(q));
    }
}

void hx_quant_act_q8_K_avx2(const float *x, void *vy, int64_t nb) {
    block_q8_K *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < nb; i++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        const float amax = hmax_ps(m);
        if (!(amax > 0) || !isfinite(amax)) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the first element of largest magnitude decides the sign (as the reference) */
        float max = amax;
        const __m256 va = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ));
            if (hit) { max = x[j + __builtin_ctz((unsigned)hit)]; break; }
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j += 32) {
            const __m256i q = round32(x + j, _mm256_set1_ps(iscale));
            _mm256_storeu_si256((__m256i *)(y[i].qs + j), q);
            /* bsums of the two 16-element halves */
            const __m256i s32 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
            __m128i lo = _mm256_castsi256_si128(s32), hi = _mm256_extracti128_si256(s32, 1);
            lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, 0x4E));
            lo = _mm_add_epi32(lo, _mm_shuffle_epi32(lo, 0xB1));
            hi = _mm_add_epi32(hi, _mm_shuffle_epi32(hi, 0x4E));
            hi = _mm_add_epi32(hi, _mm_shuffle_epi32(hi, 0xB1));
            y[i].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(lo);
            y[i].bsums[j / 16 + 1] = (int16_t)_mm_cvtsi128_si32(hi);
        }
        y[i].d = 1 / iscale;
    }
}

/* Q8_0 by ggml's reference rule (quantize_row_q8_0_ref, what hx_quantize_row
 * does): d = amax/127 stored as f16, id = 1/d, q = roundf(x * id) (half away
 * from zero) clamped to [-127, 127]. roundf is trunc(v) + sign(v) where
 * |v - trunc(v)| >= 0.5 (v - trunc(v) is exact), so this is bit-identical to
 * the scalar loop. */
void hx_quant_q8_0_ref_avx2(const float *x, void *vy, int64_t nb) {
    block_q8_0 *y = vy;
    const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    const __m256 lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float amax = absmax32(x);
        float d = amax / 127;
        y[i].d = f16_scale(d);
        if (d > 65504.f) d = hx_fp16_to_fp32(y[i].d);
        const __m256 id = _mm256_set1_ps(d ? 1.0f / d : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; k++) {
            const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id);
            const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), half, _CMP_GE_OQ);
            const __m256 adj = _mm256_and_ps(up, _mm256_or_ps(one, _mm256_and_ps(sign, v)));
            q[k] = _mm256_cvtps_epi32(_mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_add_ps(t, adj))));
        }
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)y[i].qs, p);
    }
}
