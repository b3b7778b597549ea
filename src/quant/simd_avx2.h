/* simd_avx2.h — AVX2 helpers shared by the dot kernels (dot_avx2.c), the
 * tiled GEMM kernels (gemm_avx2.c), activation quantization (act_avx2.c) and
 * the f32 sgemm (backend/cpu/sgemm_avx2.c). Include only from files compiled
 * with -mavx2 -mfma -mf16c. */
#ifndef HX_QUANT_SIMD_AVX2_H
#define HX_QUANT_SIMD_AVX2_H

#include "quant/quant_formats.h"

#include <immintrin.h>

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* broadcast f16(*pa) * f16(*pb): each scale is read with a 4-byte load (the
 * f16 and the 2 bytes after it, which every block has) straight into vcvtph2ps */
static inline __m256 scale2(const void *pa, const void *pb) {
    const __m128 fa = _mm_cvtph_ps(_mm_loadu_si32(pa)), fb = _mm_cvtph_ps(_mm_loadu_si32(pb));
    return _mm256_broadcastss_ps(_mm_mul_ss(fa, fb));
}

static inline __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* 8 rows x 8 dwords -> 8 vectors of one dword position (lane = row) */
static inline void transpose8x32(const __m256i v[8], __m256i out[8]) {
    __m256i t[8], u[8];
    for (int r = 0; r < 8; r += 2) {
        t[r] = _mm256_unpacklo_epi32(v[r], v[r + 1]);
        t[r + 1] = _mm256_unpackhi_epi32(v[r], v[r + 1]);
    }
    for (int r = 0; r < 8; r += 4)
        for (int k = 0; k < 2; k++) {
            u[r + k] = _mm256_unpacklo_epi64(t[r + k], t[r + k + 2]);
            u[r + k + 2] = _mm256_unpackhi_epi64(t[r + k], t[r + k + 2]);
        }
    static const int dw_of[4] = { 0, 2, 1, 3 };
    for (int k = 0; k < 4; k++) {
        out[dw_of[k]] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x20);
        out[dw_of[k] + 4] = _mm256_permute2x128_si256(u[k], u[k + 4], 0x31);
    }
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles (elements 0-15) then high (16-31) */
static inline __m256i unpack_nibbles(const uint8_t *q) {
    /* both halves get the 16 bytes; the high half is shifted right by 4 */
    const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q));
    return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0x0F));
}

/* 32 bits -> 32 bytes, 0xFF where bit k of the word is set (byte k) */
static inline __m256i bytes_from_bits(const uint8_t *qh) {
    uint32_t x;
    memcpy(&x, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

/* sum of s8 x s8 products, as 8 floats (pairs then quads summed) */
static inline __m256 mul_sum_i8_ps(__m256i w, __m256i x) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* sum of u8 x s8 products, as 8 floats */
static inline __m256 mul_sum_u8_ps(__m256i w, __m256i x) {
    const __m256i p16 = _mm256_maddubs_epi16(w, x);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

/* ----------------------------------------------------------------- K-quants */

/* Byte shuffle that broadcasts int16 lane i of each 128-bit half to the
 * whole half (used with a register holding 8 int16 scales in both halves). */
static inline __m256i bcast16(int i) {
    return _mm256_set1_epi16((short)((2 * i) | ((2 * i + 1) << 8)));
}
/* int16 lane 2i in the low half, 2i+1 in the high half (16-element sub-blocks) */
static inline __m256i bcast16_pair(int i) {
    const short lo = (short)((4 * i) | ((4 * i + 1) << 8)), hi = (short)((4 * i + 2) | ((4 * i + 3) << 8));
    return _mm256_set_m128i(_mm_set1_epi16(hi), _mm_set1_epi16(lo));
}

/* Q4_K/Q5_K packed 6-bit scales -> 8 scale bytes then 8 min bytes, in SIMD.
 * As 32-bit words w0..w2 of the 12 bytes:
 *   scales 0-3 = w0 & 0x3f..   scales 4-7 = (w2 & 0x0f..) | ((w0 >> 2) & 0x30..)
 *   mins 0-3   = w1 & 0x3f..   mins 4-7   = ((w2 >> 4) & 0x0f..) | ((w1 >> 2) & 0x30..)
 * Reads 16 bytes: the 4 after the scales are the block's own qh/qs. */
static inline __m128i k4_scales_mins(const uint8_t *s12) {
    const __m128i v = _mm_loadu_si128((const __m128i *)s12);
    const __m128i a = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));   /* w0 w2 w1 w2 */
    const __m128i b = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));   /* w0 w0 w1 w1 */
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_set_epi32(4, 0, 0, 0)),
                                     _mm_set_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f));
    const __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_set_epi32(0x30303030, 0, 0x30303030, 0));
    return _mm_or_si128(lo, hi);
}

/* sum_j m_j * (bsum 2j + bsum 2j+1) as 8 int32 lanes: mins duplicated to
 * 16 int16 lanes, then one madd with the 16 bsums */
static inline __m256i k4_mins_dot(__m128i scales_mins, const int16_t *bsums) {
    const __m128i dup = _mm_shuffle_epi8(scales_mins, _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8));
    return _mm256_madd_epi16(_mm256_cvtepu8_epi16(dup), loadu256(bsums));
}

#endif
