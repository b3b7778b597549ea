/* dot_avx512.c — AVX-512 (F/BW/VL) dot kernels for the hot formats, each in a
 * plain variant (maddubs + madd) and a VNNI variant (vpdpbusd: u8 x s8 summed
 * in fours straight into int32). Compiled with the AVX-512 flags; only called
 * after cpu.c has checked CPUID and XCR0 (ZMM + opmask state enabled).
 *
 * One zmm holds two legacy blocks (64 bytes) or 64 elements of a K-quant
 * super-block. Odd tails (one legacy block, < 16 floats) go to the AVX2
 * kernels, which every AVX-512 CPU can run. Activations must be in
 * [-127, 127] (as hx_quantize_row makes them). */
#include "quant/dot.h"
#include "quant/quant_formats.h"

#include <immintrin.h>

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }
static inline __m512i loadu512(const void *p) { return _mm512_loadu_si512(p); }
static inline __m512i load2x256(const void *a, const void *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

/* acc + sum of groups of four u8 x s8 products (int32 lanes) */
static inline __m512i dot_u8s8(__m512i acc, __m512i u, __m512i s, bool vnni) {
    if (vnni) return _mm512_dpbusd_epi32(acc, u, s);
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1)));
}

/* s8 x s8 via |w| * (x negated where w < 0) */
static inline __m512i dot_s8s8(__m512i w, __m512i x, bool vnni) {
    const __mmask64 neg = _mm512_movepi8_mask(w);
    const __m512i sx = _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x);
    return dot_u8s8(_mm512_setzero_si512(), _mm512_abs_epi8(w), sx, vnni);
}

/* lanes 0-7 = a, 8-15 = b */
static inline __m512 two_scales(float a, float b) {
    return _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(a), _mm512_set1_ps(b));
}

/* ------------------------------------------------------------- float rows */

static inline void f32_impl(int64_t n, float *out, const float *a, const float *b) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    float tail = 0;
    if (i < n) hx_dot_f32_avx2(n - i, &tail, a + i, b + i);
    *out = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + tail;
}
void hx_dot_f32_avx512(int64_t n, float *out, const void *w, const void *x) { f32_impl(n, out, w, x); }
void hx_dot_f32_avx512vnni(int64_t n, float *out, const void *w, const void *x) { f32_impl(n, out, w, x); }

static inline void f16_impl(int64_t n, float *out, const uint16_t *a, const float *b) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
#define LDH(o) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i + (o))))
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(LDH(0), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(LDH(16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(LDH(0), _mm512_loadu_ps(b + i), acc0);
#undef LDH
    float tail = 0;
    if (i < n) hx_dot_f16_avx2(n - i, &tail, a + i, b + i);
    *out = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + tail;
}
void hx_dot_f16_avx512(int64_t n, float *out, const void *w, const void *x) { f16_impl(n, out, w, x); }
void hx_dot_f16_avx512vnni(int64_t n, float *out, const void *w, const void *x) { f16_impl(n, out, w, x); }

/* ----------------------------------------------------------- legacy quants */

static inline void q8_0_impl(int64_t n, float *out, const block_q8_0 *a, const block_q8_0 *b, bool vnni) {
    const int64_t nb = n / QK8_0;
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m512 d = two_scales(f16(a[i].d) * f16(b[i].d), f16(a[i + 1].d) * f16(b[i + 1].d));
        const __m512i s = dot_s8s8(load2x256(a[i].qs, a[i + 1].qs), load2x256(b[i].qs, b[i + 1].qs), vnni);
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
    }
    float tail = 0;
    if (i < nb) hx_dot_q8_0_avx2(QK8_0, &tail, a + i, b + i);
    *out = _mm512_reduce_add_ps(acc) + tail;
}
void hx_dot_q8_0_avx512(int64_t n, float *out, const void *w, const void *x) { q8_0_impl(n, out, w, x, false); }
void hx_dot_q8_0_avx512vnni(int64_t n, float *out, const void *w, const void *x) { q8_0_impl(n, out, w, x, true); }

/* two Q4_0 blocks' nibbles -> 64 bytes in element order (lo 16, hi 16, lo 16, hi 16) */
static inline __m512i unpack2_nibbles(const uint8_t *q0, const uint8_t *q1) {
    const __m256i b0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q0));
    const __m256i b1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q1));
    const __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(b0), b1, 1);
    return _mm512_and_si512(_mm512_srlv_epi64(b, _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0)), _mm512_set1_epi8(0x0F));
}

static inline void q4_0_impl(int64_t n, float *out, const block_q4_0 *a, const block_q8_0 *b, bool vnni) {
    const int64_t nb = n / QK4_0;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        const __m512 d = two_scales(f16(a[i].d) * f16(b[i].d), f16(a[i + 1].d) * f16(b[i + 1].d));
        const __m512i x = load2x256(b[i].qs, b[i + 1].qs);
        /* sum (q-8)*x = sum q*x - sum 8*x */
        const __m512i s = _mm512_sub_epi32(dot_u8s8(_mm512_setzero_si512(), unpack2_nibbles(a[i].qs, a[i + 1].qs), x, vnni),
                                           dot_u8s8(_mm512_setzero_si512(), eight, x, vnni));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(s), acc);
    }
    float tail = 0;
    if (i < nb) hx_dot_q4_0_avx2(QK4_0, &tail, a + i, b + i);
    *out = _mm512_reduce_add_ps(acc) + tail;
}
void hx_dot_q4_0_avx512(int64_t n, float *out, const void *w, const void *x) { q4_0_impl(n, out, w, x, false); }
void hx_dot_q4_0_avx512vnni(int64_t n, float *out, const void *w, const void *x) { q4_0_impl(n, out, w, x, true); }

/* ----------------------------------------------------------------- K-quants */

static inline int hsum_epi32_128(__m128i v) {
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4E));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1));
    return _mm_cvtsi128_si32(v);
}

/* Q4_K packed 6-bit scales -> 8 scale bytes then 8 min bytes (see dot_avx2.c) */
static inline __m128i k4_scales_mins(const uint8_t *s12) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t u[4];
    memcpy(u, s12, 12);
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    const uint32_t mins_lo = u[1] & kmask1;
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    u[2] = mins_lo;
    u[0] &= kmask1;
    return _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]);
}

static inline void q4_K_impl(int64_t n, float *out, const block_q4_K *a, const block_q8_K *b, bool vnni) {
    const int64_t nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0xF), shifts = _mm512_set_epi64(4, 4, 4, 4, 0, 0, 0, 0);
    __m512 acc = _mm512_setzero_ps();
    float summ = 0;
    for (int64_t i = 0; i < nb; i++) {
        const __m128i ms = k4_scales_mins(a[i].scales);
        /* mins: sum_j m_j * (bsum 2j + bsum 2j+1) */
        const __m256i bs = _mm256_loadu_si256((const __m256i *)b[i].bsums);
        const __m128i bs8 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m128i pm = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(ms, 8)), bs8);
        summ += b[i].d * f16(a[i].dmin) * (float)hsum_epi32_128(pm);
        const __m512i sc32 = _mm512_cvtepu8_epi32(ms); /* lanes 0-7: scales */
        __m512i sumi = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * j));
            const __m512i q = _mm512_and_si512(_mm512_srlv_epi64(_mm512_broadcast_i64x4(bits), shifts), m4);
            const __m512i s = dot_u8s8(_mm512_setzero_si512(), q, loadu512(b[i].qs + 64 * j), vnni);
            const __m512i idx = _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(2 * j), _mm512_set1_epi32(2 * j + 1));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(s, _mm512_permutexvar_epi32(idx, sc32)));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(b[i].d * f16(a[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    }
    *out = _mm512_reduce_add_ps(acc) - summ;
}

/* Q6_K: a zmm holds 64 elements: ql's low nibbles are elements 0-63 of a
 * 128-element half, its high nibbles elements 64-127; qh bit pairs 0..3 go
 * to quarters 0..3. The -32 offset is a second dot with 32s. */
static inline void q6_K_impl(int64_t n, float *out, const block_q6_K *a, const block_q8_K *b, bool vnni) {
    const int64_t nb = n / QK_K;
    const __m512i m4 = _mm512_set1_epi8(0xF), m3 = _mm512_set1_epi8(3), m32 = _mm512_set1_epi8(32);
    const __m512i shA = _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0), shB = _mm512_set_epi64(6, 6, 6, 6, 4, 4, 4, 4);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const __m512i sc32 = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)a[i].scales));
        __m512i sumi = _mm512_setzero_si512();
        for (int h = 0; h < 2; h++) {
            const __m512i ql = loadu512(a[i].ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a[i].qh + 32 * h)));
            const __m512i hA = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shA), m3), 4);
            const __m512i hB = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, shB), m3), 4);
            const __m512i qA = _mm512_or_si512(_mm512_and_si512(ql, m4), hA);
            const __m512i qB = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), hB);
            const __m512i xA = loadu512(b[i].qs + 128 * h), xB = loadu512(b[i].qs + 128 * h + 64);
            const __m512i sA = _mm512_sub_epi32(dot_u8s8(_mm512_setzero_si512(), qA, xA, vnni),
                                                dot_u8s8(_mm512_setzero_si512(), m32, xA, vnni));
            const __m512i sB = _mm512_sub_epi32(dot_u8s8(_mm512_setzero_si512(), qB, xB, vnni),
                                                dot_u8s8(_mm512_setzero_si512(), m32, xB, vnni));
            /* int32 lane l covers elements 4l..4l+3: sub-block 8h + l/4 (A), 8h + 4 + l/4 (B) */
            const __m512i lane = _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2);
            const __m512i iA = _mm512_add_epi32(lane, _mm512_set1_epi32(8 * h));
            const __m512i iB = _mm512_add_epi32(iA, _mm512_set1_epi32(4));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(sA, _mm512_permutexvar_epi32(iA, sc32)));
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(sB, _mm512_permutexvar_epi32(iB, sc32)));
        }
        acc = _mm512_fmadd_ps(_mm512_set1_ps(b[i].d * f16(a[i].d)), _mm512_cvtepi32_ps(sumi), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

void hx_dot_q4_K_avx512(int64_t n, float *out, const void *w, const void *x) { q4_K_impl(n, out, w, x, false); }
void hx_dot_q4_K_avx512vnni(int64_t n, float *out, const void *w, const void *x) { q4_K_impl(n, out, w, x, true); }
void hx_dot_q6_K_avx512(int64_t n, float *out, const void *w, const void *x) { q6_K_impl(n, out, w, x, false); }
void hx_dot_q6_K_avx512vnni(int64_t n, float *out, const void *w, const void *x) { q6_K_impl(n, out, w, x, true); }
