/* dot_avx2.c — AVX2/FMA/F16C dot kernels (compiled with -mavx2 -mfma -mf16c;
 * only called after cpu.c has checked the CPU and OS).
 *
 * Shape of every quantized kernel: unpack weight levels to bytes, multiply
 * with the int8 activations by _mm256_maddubs_epi16 (u8 x s8 -> pairs of
 * int16), widen pairs to int32 with _mm256_madd_epi16 (by ones, or by the
 * sub-block scales for K-quants), convert to float once per block and FMA
 * with the block's combined scale into float accumulators. The horizontal sum
 * happens once at the end. Legacy formats do two blocks per iteration into
 * two accumulators to hide FMA latency.
 *
 * maddubs needs an unsigned left operand: signed weights use the sign trick
 * |w| * (x * sign(w)), valid because activations are in [-127, 127]
 * (hx_quantize_row never produces -128). */
#include "quant/dot.h"
#include "quant/quant_formats.h"

#include <immintrin.h>

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

/* broadcast f16(*pa) * f16(*pb): each scale is read with a 4-byte load (the
 * f16 and the 2 bytes after it, which every block has) straight into vcvtph2ps */
static inline __m256 scale2(const void *pa, const void *pb) {
    const __m128 fa = _mm_cvtph_ps(_mm_loadu_si32(pa)), fb = _mm_cvtph_ps(_mm_loadu_si32(pb));
    return _mm256_broadcastss_ps(_mm_mul_ss(fa, fb));
}

static inline __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

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

/* ------------------------------------------------------------- float rows */

void hx_dot_f32_avx2(int64_t n, float *out, const void *w, const void *x) {
    const float *a = w, *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++) s += a[i] * b[i];
    *out = s;
}

void hx_dot_f16_avx2(int64_t n, float *out, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    int64_t i = 0;
#define LDH(o) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + (o))))
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(LDH(0), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(LDH(8), _mm256_loadu_ps(b + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(LDH(16), _mm256_loadu_ps(b + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(LDH(24), _mm256_loadu_ps(b + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(LDH(0), _mm256_loadu_ps(b + i), acc0);
#undef LDH
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++) s += f16(a[i]) * b[i];
    *out = s;
}

void hx_dot_bf16_avx2(int64_t n, float *out, const void *w, const void *x) {
    const uint16_t *a = w;
    const float *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t i = 0;
#define LDB(o) _mm256_castsi256_ps(_mm256_slli_epi32( \
        _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(a + i + (o)))), 16))
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(LDB(0), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(LDB(8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(LDB(0), _mm256_loadu_ps(b + i), acc0);
#undef LDB
    float s = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += hx_bf16_to_fp32(a[i]) * b[i];
    *out = s;
}

/* ----------------------------------------------------------- legacy quants */

static inline __m256 q4_0_block(const block_q4_0 *a, const block_q8_0 *b, __m256 acc) {
    const __m256 d = scale2(&a->d, &b->d);
    /* sum (q-8)*x = sum q*x - sum 8*x, pairwise in int16 (no sign trick needed) */
    const __m256i x = loadu256(b->qs);
    const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(unpack_nibbles(a->qs), x),
                                         _mm256_maddubs_epi16(_mm256_set1_epi8(8), x));
    const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
    return _mm256_fmadd_ps(d, s, acc);
}

void hx_dot_q4_0_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    const int64_t nb = n / QK4_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = q4_0_block(a + i, b + i, acc0);
        acc1 = q4_0_block(a + i + 1, b + i + 1, acc1);
    }
    if (i < nb) acc0 = q4_0_block(a + i, b + i, acc0);
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* Q4_1: d*dx*sum(q*qx) + m*s; the m*s part is accumulated as a scalar */
static inline __m256 q4_1_block(const block_q4_1 *a, const block_q8_1 *b, __m256 acc, float *summs) {
    *summs += f16(a->m) * f16(b->s);
    const __m256 d = _mm256_set1_ps(f16(a->d) * f16(b->d));
    return _mm256_fmadd_ps(d, mul_sum_u8_ps(unpack_nibbles(a->qs), loadu256(b->qs)), acc);
}

void hx_dot_q4_1_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    const int64_t nb = n / QK4_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = q4_1_block(a + i, b + i, acc0, &s0);
        acc1 = q4_1_block(a + i + 1, b + i + 1, acc1, &s1);
    }
    if (i < nb) acc0 = q4_1_block(a + i, b + i, acc0, &s0);
    *out = hsum_ps(_mm256_add_ps(acc0, acc1)) + s0 + s1;
}

/* Q5_0: nibble | 0xF0 where the high bit is clear == (nibble + 16h) - 16 as int8 */
static inline __m256 q5_0_block(const block_q5_0 *a, const block_q8_0 *b, __m256 acc) {
    const __m256 d = scale2(&a->d, &b->d);
    const __m256i hi = _mm256_andnot_si256(bytes_from_bits(a->qh), _mm256_set1_epi8((char)0xF0));
    const __m256i q = _mm256_or_si256(unpack_nibbles(a->qs), hi);
    return _mm256_fmadd_ps(d, mul_sum_i8_ps(q, loadu256(b->qs)), acc);
}

void hx_dot_q5_0_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    const int64_t nb = n / QK4_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = q5_0_block(a + i, b + i, acc0);
        acc1 = q5_0_block(a + i + 1, b + i + 1, acc1);
    }
    if (i < nb) acc0 = q5_0_block(a + i, b + i, acc0);
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

static inline __m256 q5_1_block(const block_q5_1 *a, const block_q8_1 *b, __m256 acc, float *summs) {
    *summs += f16(a->m) * f16(b->s);
    const __m256 d = _mm256_set1_ps(f16(a->d) * f16(b->d));
    const __m256i hi = _mm256_and_si256(bytes_from_bits(a->qh), _mm256_set1_epi8(0x10));
    const __m256i q = _mm256_or_si256(unpack_nibbles(a->qs), hi);
    return _mm256_fmadd_ps(d, mul_sum_u8_ps(q, loadu256(b->qs)), acc);
}

void hx_dot_q5_1_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    const int64_t nb = n / QK4_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float s0 = 0, s1 = 0;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = q5_1_block(a + i, b + i, acc0, &s0);
        acc1 = q5_1_block(a + i + 1, b + i + 1, acc1, &s1);
    }
    if (i < nb) acc0 = q5_1_block(a + i, b + i, acc0, &s0);
    *out = hsum_ps(_mm256_add_ps(acc0, acc1)) + s0 + s1;
}

static inline __m256 q8_0_block(const block_q8_0 *a, const block_q8_0 *b, __m256 acc) {
    const __m256 d = scale2(&a->d, &b->d);
    return _mm256_fmadd_ps(d, mul_sum_i8_ps(loadu256(a->qs), loadu256(b->qs)), acc);
}

void hx_dot_q8_0_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q8_0 *a = w;
    const block_q8_0 *b = x;
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        acc0 = q8_0_block(a + i, b + i, acc0);
        acc1 = q8_0_block(a + i + 1, b + i + 1, acc1);
    }
    if (i < nb) acc0 = q8_0_block(a + i, b + i, acc0);
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
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

void hx_dot_q4_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    __m256 acc_m = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const float d = b[i].d * f16(a[i].d), dmin = -b[i].d * f16(a[i].dmin);
        const __m128i sm8 = k4_scales_mins(a[i].scales);
        acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k4_mins_dot(sm8, b[i].bsums)), acc_m);
        /* the 8 int16 scales in both 128-bit halves */
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm8));
        const uint8_t *q4 = a[i].qs;
        const int8_t *q8 = b[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++, q4 += 32, q8 += 64) {
            const __m256i bits = loadu256(q4);
            const __m256i lo = _mm256_and_si256(bits, m4), hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
            __m256i pl = _mm256_maddubs_epi16(lo, loadu256(q8));
            __m256i ph = _mm256_maddubs_epi16(hi, loadu256(q8 + 32));
            pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16(2 * j)), pl);
            ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16(2 * j + 1)), ph);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(_mm256_add_ps(acc, acc_m));
}

void hx_dot_q5_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0xF), m1 = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    __m256 acc_m = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const float d = b[i].d * f16(a[i].d), dmin = -b[i].d * f16(a[i].dmin);
        const __m128i sm8 = k4_scales_mins(a[i].scales);
        acc_m = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(k4_mins_dot(sm8, b[i].bsums)), acc_m);
        /* the 8 int16 scales in both 128-bit halves */
        const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm8));
        const __m256i hbits = loadu256(a[i].qh);
        const uint8_t *q5 = a[i].qs;
        const int8_t *q8 = b[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++, q5 += 32, q8 += 64) {
            const __m256i bits = loadu256(q5);
            const __m256i hl = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), m1), 4);
            const __m256i hh = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), m1), 4);
            const __m256i lo = _mm256_add_epi8(_mm256_and_si256(bits, m4), hl);
            const __m256i hi = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4), hh);
            __m256i pl = _mm256_maddubs_epi16(lo, loadu256(q8));
            __m256i ph = _mm256_maddubs_epi16(hi, loadu256(q8 + 32));
            pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16(2 * j)), pl);
            ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16(2 * j + 1)), ph);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(_mm256_add_ps(acc, acc_m));
}

/* Q6_K: levels q in [0, 63] used unsigned in maddubs; the -32 offset is
 * subtracted as 32*qx per pair (maddubs of 32s with qx). */
void hx_dot_q6_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    const int64_t nb = n / QK_K;
    const __m256i m4 = _mm256_set1_epi8(0xF), m2 = _mm256_set1_epi8(3), m32 = _mm256_set1_epi8(32);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const float d = b[i].d * f16(a[i].d);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)a[i].scales);
        const uint8_t *ql = a[i].ql, *qh = a[i].qh;
        const int8_t *q8 = b[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++, ql += 64, qh += 32, q8 += 128) {
            /* int16 scales of this half's 8 sub-blocks in both 128-bit halves */
            const __m128i s16 = _mm_cvtepi8_epi16(_mm_srli_si128(sc8, 0));
            const __m128i sh = j ? _mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)) : s16;
            const __m256i scales = _mm256_set_m128i(sh, sh);
            const __m256i b1 = loadu256(ql), b2 = loadu256(ql + 32), bh = loadu256(qh);
            const __m256i q0 = _mm256_or_si256(_mm256_and_si256(b1, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(bh, m2), 4));
            const __m256i q1 = _mm256_or_si256(_mm256_and_si256(b2, m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 2), m2), 4));
            const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 4), m2), 4));
            const __m256i q3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m4),
                                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(bh, 6), m2), 4));
            const __m256i x0 = loadu256(q8), x1 = loadu256(q8 + 32), x2 = loadu256(q8 + 64), x3 = loadu256(q8 + 96);
            __m256i p0 = _mm256_sub_epi16(_mm256_maddubs_epi16(q0, x0), _mm256_maddubs_epi16(m32, x0));
            __m256i p1 = _mm256_sub_epi16(_mm256_maddubs_epi16(q1, x1), _mm256_maddubs_epi16(m32, x1));
            __m256i p2 = _mm256_sub_epi16(_mm256_maddubs_epi16(q2, x2), _mm256_maddubs_epi16(m32, x2));
            __m256i p3 = _mm256_sub_epi16(_mm256_maddubs_epi16(q3, x3), _mm256_maddubs_epi16(m32, x3));
            p0 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16_pair(0)), p0);
            p1 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16_pair(1)), p1);
            p2 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16_pair(2)), p2);
            p3 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16_pair(3)), p3);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc);
}

void hx_dot_q2_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    const int64_t nb = n / QK_K;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(0xF);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const float d = b[i].d * f16(a[i].d), dmin = -b[i].d * f16(a[i].dmin);
        const __m128i ms = _mm_loadu_si128((const __m128i *)a[i].scales);
        const __m128i sc8 = _mm_and_si128(ms, m4), mn8 = _mm_and_si128(_mm_srli_epi16(ms, 4), m4);
        const __m256i pm = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mn8), loadu256(b[i].bsums));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(pm), acc);
        const __m256i sc16 = _mm256_cvtepu8_epi16(sc8);
        const uint8_t *q2 = a[i].qs;
        const int8_t *q8 = b[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++, q2 += 32, q8 += 128) {
            const __m128i sh = j ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16);
            const __m256i scales = _mm256_set_m128i(sh, sh);
            const __m256i bits = loadu256(q2);
            __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(bits, m3), loadu256(q8));
            __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 2), m3), loadu256(q8 + 32));
            __m256i p2 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m3), loadu256(q8 + 64));
            __m256i p3 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(bits, 6), m3), loadu256(q8 + 96));
            p0 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16_pair(0)), p0);
            p1 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16_pair(1)), p1);
            p2 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16_pair(2)), p2);
            p3 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16_pair(3)), p3);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    *out = hsum_ps(acc);
}

/* Q3_K: levels l in [0,3] from qs, minus 4 where the hmask bit is clear;
 * the "minus 4" is a second maddubs with 4s, subtracted. One 32-element
 * quarter k of a 128-element half: low bits at shift 2k of the 32 qs bytes,
 * high bit k of the (pre-shifted) hmask bytes, scales 2k / 2k+1. */
static inline __m256i q3_quarter(__m256i bits, __m256i hbits, const int8_t *q8, __m256i scales, int k) {
    const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * k), _mm256_set1_epi8(3));
    const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hbits, k), _mm256_set1_epi8(1));
    const __m256i h4 = _mm256_andnot_si256(_mm256_slli_epi16(hb, 2), _mm256_set1_epi8(4));
    const __m256i xv = loadu256(q8 + 32 * k);
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(lo, xv), _mm256_maddubs_epi16(h4, xv));
    return _mm256_madd_epi16(_mm256_shuffle_epi8(scales, bcast16_pair(k)), p);
}

/* Q3_K's 16 6-bit scales (offset 32) from the 12 packed bytes, as int8:
 *   words 0-1 (sub-blocks 0-7):  low nibbles of bytes 0-7, top bits = bit pairs 0/1 of bytes 8-11
 *   words 2-3 (sub-blocks 8-15): high nibbles of bytes 0-7, top bits = bit pairs 2/3 */
static inline __m128i q3k_scales(const uint8_t *s12) {
    uint32_t w[4] = {0, 0, 0, 0};
    memcpy(w, s12, 12); /* a 16-byte load could run past the last block */
    const __m128i v = _mm_loadu_si128((const __m128i *)w);
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 1, 0)), _mm_set_epi32(4, 4, 0, 0)),
                                     _mm_set1_epi8(0x0F));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_shuffle_epi32(v, _MM_SHUFFLE(2, 2, 2, 2)), _mm_set_epi32(6, 4, 2, 0)),
                                     _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

void hx_dot_q3_K_avx2(int64_t n, float *out, const void *w, const void *x) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    const int64_t nb = n / QK_K;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const float d = b[i].d * f16(a[i].d);
        const __m256i sc16 = _mm256_cvtepi8_epi16(q3k_scales(a[i].scales));
        const __m256i s0 = _mm256_permute2x128_si256(sc16, sc16, 0x00), s1 = _mm256_permute2x128_si256(sc16, sc16, 0x11);
        const __m256i hbits = loadu256(a[i].hmask), hbits4 = _mm256_srli_epi16(hbits, 4);
        const __m256i bits0 = loadu256(a[i].qs), bits1 = loadu256(a[i].qs + 32);
        const int8_t *q8 = b[i].qs;
        __m256i sum0 = _mm256_add_epi32(q3_quarter(bits0, hbits, q8, s0, 0), q3_quarter(bits0, hbits, q8, s0, 1));
        __m256i sum1 = _mm256_add_epi32(q3_quarter(bits0, hbits, q8, s0, 2), q3_quarter(bits0, hbits, q8, s0, 3));
        sum0 = _mm256_add_epi32(sum0, _mm256_add_epi32(q3_quarter(bits1, hbits4, q8 + 128, s1, 0),
                                                       q3_quarter(bits1, hbits4, q8 + 128, s1, 1)));
        sum1 = _mm256_add_epi32(sum1, _mm256_add_epi32(q3_quarter(bits1, hbits4, q8 + 128, s1, 2),
                                                       q3_quarter(bits1, hbits4, q8 + 128, s1, 3)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(sum0, sum1)), acc);
    }
    *out = hsum_ps(acc);
}
