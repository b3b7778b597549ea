/* dot_avx2.c — AVX2/FMA/F16C dot kernels (compiled with -mavx2 -mfma -mf16c;
 * only called after cpu.c has checked the CPU and OS).
 *
 * Shape of every quantized kernel: unpack weight levels to bytes, multiply
 * with the int8 activations by _mm256_maddubs_epi16 (u8 x s8 -> pairs of
 * int16), widen pairs to int32 with _mm256_madd_epi16 (by ones, or by the
 * sub-block scales for K-quants), convert to float once per block and FMA
 * with the block's combined scale into float accumulators. The horizontal sum
 * happens once at the end. Legacy formats do two blocks per iteration into
 * two accumulators to hide FMA latency. Q4_0, Q8_0, Q4_K and Q6_K live in
 * gemm_avx2.c: their per-row kernel is the 1x1 case of the tiled GEMM.
 *
 * maddubs needs an unsigned left operand: signed weights use the sign trick
 * |w| * (x * sign(w)), valid because activations are in [-127, 127]
 * (hx_quantize_row never produces -128). */
#include "quant/dot.h"
#include "quant/simd_avx2.h"

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
    /* ggml_vec_dot_f16's rounding order: 4 accumulators over steps of 32, reduced as
     * (a0 + a2) + (a1 + a3), then lo + hi and two horizontal adds; the n % 32 tail summed in
     * double. Flash attention's q.k and F16 weights go through here, so matching it keeps
     * real-model attention scores (and hence greedy tokens) equal to llama.cpp's. */
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
#undef LDH
    const __m256 r = _mm256_add_ps(_mm256_add_ps(acc0, acc2), _mm256_add_ps(acc1, acc3));
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(r), _mm256_extractf128_ps(r, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    double s = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    for (; i < n; i++) s += (double)(f16(a[i]) * b[i]);
    *out = (float)s;
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

/* Q4_1: d*dx*sum(q*qx) + m*s; the m*s part is accumulated as a scalar */
static inline __m256 q4_1_block(const block_q4_1 *a, const block_q8_1 *b, __m256 acc, float *summs) {
    *summs += f16(a->m) * f16(b->s);
    const __m256 d = _mm256_set1_ps(f16(a->d) * f16(b->d));
    return _mm256_fmadd_ps(d, mul_sum_u8_ps(unpack_nibbles(a->qs), loadu256(b->qs)), acc);
}

void hx_dot_q4_1_avx2(int64_t n, float *out, const void *w, const void *x) {
    /* one accumulator and one m*s sum, blocks in order: the rounding order of ggml's AVX2
     * q4_1 x q8_1 dot, so real Q4_1 models (SmolLM2 Q4_1) give llama.cpp's logits to the bit
     * more often; two interleaved accumulators moved logits by ~1e-6 rel, enough to flip Q8
     * roundings downstream. Decode is memory-bound: the longer FMA chain costs nothing. */
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    const int64_t nb = n / QK4_0;
    __m256 acc = _mm256_setzero_ps();
    float s = 0;
    for (int64_t i = 0; i < nb; i++) acc = q4_1_block(a + i, b + i, acc, &s);
    *out = hsum_ps(acc) + s;
}

/* Q5_0: nibble | 0xF0 where the high bit is clear == (nibble + 16h) - 16 as int8 */
static inline __m256 q5_0_block(const block_q5_0 *a, const block_q8_0 *b, __m256 acc) {
    const __m256 d = scale2(&a->d, &b->d);
    const __m256i hi = _mm256_andnot_si256(bytes_from_bits(a->qh), _mm256_set1_epi8((char)0xF0));
    const __m256i q = _mm256_or_si256(unpack_nibbles(a->qs), hi);
    return _mm256_fmadd_ps(d, mul_sum_i8_ps(q, loadu256(b->qs)), acc);
}

void hx_dot_q5_0_avx2(int64_t n, float *out, const void *w, const void *x) {
    /* one accumulator, blocks in order: ggml's rounding order (see hx_dot_q4_1_avx2) */
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    const int64_t nb = n / QK4_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) acc = q5_0_block(a + i, b + i, acc);
    *out = hsum_ps(acc);
}

static inline __m256 q5_1_block(const block_q5_1 *a, const block_q8_1 *b, __m256 acc, float *summs) {
    *summs += f16(a->m) * f16(b->s);
    const __m256 d = _mm256_set1_ps(f16(a->d) * f16(b->d));
    const __m256i hi = _mm256_and_si256(bytes_from_bits(a->qh), _mm256_set1_epi8(0x10));
    const __m256i q = _mm256_or_si256(unpack_nibbles(a->qs), hi);
    return _mm256_fmadd_ps(d, mul_sum_u8_ps(q, loadu256(b->qs)), acc);
}

void hx_dot_q5_1_avx2(int64_t n, float *out, const void *w, const void *x) {
    /* one accumulator, blocks in order: ggml's rounding order (see hx_dot_q4_1_avx2) */
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    const int64_t nb = n / QK4_0;
    __m256 acc = _mm256_setzero_ps();
    float s = 0;
    for (int64_t i = 0; i < nb; i++) acc = q5_1_block(a + i, b + i, acc, &s);
    *out = hsum_ps(acc) + s;
}

/* ----------------------------------------------------------------- K-quants */

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
