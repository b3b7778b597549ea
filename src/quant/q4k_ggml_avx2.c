/* q4k_ggml_avx2.c — Q4_K x Q8_K dots in the rounding order of llama.cpp's x86 build, which
 * repacks Q4_K weights (rows % 8 == 0) into its 8x8 layout and multiplies them with
 * ggml_gemv_q4_K_8x8_q8_K (one activation row) or ggml_gemm_q4_K_8x8_q8_K (groups of 4 rows).
 * Per output: exact integer sums, two float chains acc = fma((float)isum, d_w * d_x, acc) and
 * accm = fma((float)imin, dmin_w * d_x, accm), result acc - accm; the gemv steps once per
 * super-block, the gemm once per 64-element pair of sub-blocks. The integer part is the same
 * maddubs/madd as our tiled kernel; the order of the float steps is what matters. */
#include <immintrin.h>

#include "quant/quant.h"
#include "quant/quant_formats.h"
#include "quant/simd_avx2.h"

static inline int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

static inline float q4k_ggml(int64_t n, const void *w, const void *x, int per_pair) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    float acc = 0, accm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i sm = k4_scales_mins(a[i].scales);
        const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        uint8_t mins[16];
        _mm_storeu_si128((__m128i *)mins, sm);
        const float d = f16(a[i].d) * b[i].d, dm = f16(a[i].dmin) * b[i].d;
        int32_t isum = 0, imin = 0;
        for (int j = 0; j < 4; j++) {
            const __m256i bits = loadu256(a[i].qs + 32 * j);
            const __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            const int8_t *q8 = b[i].qs + 64 * j;
            const __m256i pl = _mm256_madd_epi16(_mm256_shuffle_epi8(sc, bcast16(2 * j)), _mm256_maddubs_epi16(lo, loadu256(q8)));
            const __m256i ph = _mm256_madd_epi16(_mm256_shuffle_epi8(sc, bcast16(2 * j + 1)), _mm256_maddubs_epi16(hi, loadu256(q8 + 32)));
            const int32_t is = hsum_i32(_mm256_add_epi32(pl, ph));
            const int32_t im = mins[8 + 2 * j] * (b[i].bsums[4 * j] + b[i].bsums[4 * j + 1]) +
                               mins[8 + 2 * j + 1] * (b[i].bsums[4 * j + 2] + b[i].bsums[4 * j + 3]);
            if (per_pair) {
                acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)is), _mm_set_ss(d), _mm_set_ss(acc)));
                accm = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)im), _mm_set_ss(dm), _mm_set_ss(accm)));
            } else {
                isum += is;
                imin += im;
            }
        }
        if (!per_pair) {
            acc = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)isum), _mm_set_ss(d), _mm_set_ss(acc)));
            accm = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss((float)imin), _mm_set_ss(dm), _mm_set_ss(accm)));
        }
    }
    return acc - accm;
}

void hx_dot_q4_K_ggml_gemv_avx2(int64_t n, float *out, const void *w, const void *x) { *out = q4k_ggml(n, w, x, 0); }
void hx_dot_q4_K_ggml_gemm_avx2(int64_t n, float *out, const void *w, const void *x) { *out = q4k_ggml(n, w, x, 1); }
