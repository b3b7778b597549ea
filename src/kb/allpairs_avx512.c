/* allpairs_avx512.c — AVX512-VNNI int8 candidate tile: 4 rows x 64 columns
 * of int32 sums in 16 registers, vpdpbusd (unsigned column bytes q + 128 by
 * signed row bytes q, 4 products a lane), then each pair's upper bound
 * (allpairs.h) against its row's window, 16 pairs per compare; and the rows'
 * quantization, 16 elements a step. */
#include "kb/allpairs.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

static inline __m512i bcast4(const int8_t *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return _mm512_set1_epi32(x);
}

void kb_i8_tile_vnni(const kb_i8 *q, size_t i0, int na, size_t t, const float *lo, int32_t *acc, uint64_t *mask) {
    const int dq = q->dq, lda = 4 * dq;
    const uint8_t *B = q->bp + t * (size_t)dq * KB_TILE * 4;
    const size_t c0 = t * KB_TILE;
    __m512 sb[4], rb[4], nrb[4];
    for (int v = 0; v < 4; v++) {
        sb[v] = _mm512_loadu_ps(q->s + c0 + 16 * v);
        rb[v] = _mm512_loadu_ps(q->res + c0 + 16 * v);
        nrb[v] = _mm512_loadu_ps(q->nres + c0 + 16 * v);
    }
    for (int i = 0; i < na; i += 4) {
        /* a short last group repeats its last row (computed, not stored) */
        const int8_t *x0 = q->a + (i0 + (size_t)i) * lda;
        const int8_t *x1 = q->a + (i0 + (size_t)(i + 1 < na ? i + 1 : na - 1)) * lda;
        const int8_t *x2 = q->a + (i0 + (size_t)(i + 2 < na ? i + 2 : na - 1)) * lda;
        const int8_t *x3 = q->a + (i0 + (size_t)(i + 3 < na ? i + 3 : na - 1)) * lda;
        __m512i c00 = _mm512_setzero_si512(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00,
                c13 = c00, c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00;
        for (int k = 0; k < dq; k++) {
            const uint8_t *bk = B + (size_t)k * KB_TILE * 4;
            const __m512i b0 = _mm512_loadu_si512(bk), b1 = _mm512_loadu_si512(bk + 64),
                          b2 = _mm512_loadu_si512(bk + 128), b3 = _mm512_loadu_si512(bk + 192);
            __m512i x = bcast4(x0 + 4 * k);
            c00 = _mm512_dpbusd_epi32(c00, b0, x); c01 = _mm512_dpbusd_epi32(c01, b1, x);
            c02 = _mm512_dpbusd_epi32(c02, b2, x); c03 = _mm512_dpbusd_epi32(c03, b3, x);
            x = bcast4(x1 + 4 * k);
            c10 = _mm512_dpbusd_epi32(c10, b0, x); c11 = _mm512_dpbusd_epi32(c11, b1, x);
            c12 = _mm512_dpbusd_epi32(c12, b2, x); c13 = _mm512_dpbusd_epi32(c13, b3, x);
            x = bcast4(x2 + 4 * k);
            c20 = _mm512_dpbusd_epi32(c20, b0, x); c21 = _mm512_dpbusd_epi32(c21, b1, x);
            c22 = _mm512_dpbusd_epi32(c22, b2, x); c23 = _mm512_dpbusd_epi32(c23, b3, x);
            x = bcast4(x3 + 4 * k);
            c30 = _mm512_dpbusd_epi32(c30, b0, x); c31 = _mm512_dpbusd_epi32(c31, b1, x);
            c32 = _mm512_dpbusd_epi32(c32, b2, x); c33 = _mm512_dpbusd_epi32(c33, b3, x);
        }
        const __m512i c[4][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23}, {c30, c31, c32, c33}};
        for (int r = 0; r < 4 && i + r < na; r++) {
            const size_t a = i0 + (size_t)(i + r);
            const __m512i corr = _mm512_set1_epi32(q->corr[a]);
            const __m512 sa = _mm512_set1_ps(q->s[a]), na_ = _mm512_set1_ps(q->nrm[a]), ra = _mm512_set1_ps(q->res[a]),
                         l = _mm512_set1_ps(lo[i + r]);
            uint64_t m = 0;
            for (int v = 0; v < 4; v++) {
                _mm512_storeu_si512(acc + (size_t)(i + r) * KB_TILE + 16 * v, c[r][v]);
                const __m512 d = _mm512_cvtepi32_ps(_mm512_sub_epi32(c[r][v], corr));
                const __m512 err = _mm512_fmadd_ps(na_, rb[v], _mm512_mul_ps(ra, nrb[v]));
                const __m512 ub = _mm512_fmadd_ps(d, _mm512_mul_ps(sa, sb[v]), err);
                m |= (uint64_t)_mm512_cmp_ps_mask(ub, l, _CMP_GE_OQ) << (16 * v);
            }
            mask[i + r] = m;
        }
    }
}

static inline __mmask16 tail16(int k, int dim) { return k + 16 <= dim ? (__mmask16)0xFFFF : (__mmask16)((1u << (dim - k)) - 1); }

/* q = v / s rounded to nearest (ties to even: any rounding gives a valid
 * bound, the residual being measured), within +-127 */
static inline __m512i quant16(__m512 x) {
    __m512i q = _mm512_cvtps_epi32(x);
    return _mm512_max_epi32(_mm512_min_epi32(q, _mm512_set1_epi32(127)), _mm512_set1_epi32(-127));
}

static float resid16(const float *v, int dim, float s) {
    const __m512 sv = _mm512_set1_ps(s), inv = _mm512_set1_ps(1.0f / s);
    __m512 acc = _mm512_setzero_ps();
    for (int k = 0; k < dim; k += 16) {
        const __m512 x = _mm512_maskz_loadu_ps(tail16(k, dim), v + k);
        const __m512 e = _mm512_fnmadd_ps(sv, _mm512_cvtepi32_ps(quant16(_mm512_mul_ps(x, inv))), x);
        acc = _mm512_fmadd_ps(e, e, acc);
    }
    return _mm512_reduce_add_ps(acc);
}

void kb_i8_row_avx512(const float *v, int dim, int8_t *qa, float *scale, int32_t *sum, double *nn, double *rr) {
    __m512 mx = _mm512_setzero_ps();
    for (int k = 0; k < dim; k += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_maskz_loadu_ps(tail16(k, dim), v + k)));
    const float m = _mm512_reduce_max_ps(mx);
    float s = m / 127.0f;
    if (m > 0) { /* the scales kb_i8_row_scalar tries */
        float best = resid16(v, dim, s);
        for (int k = 0, tried = 0; k < dim && tried < 8; k++) {
            const float mg = fabsf(v[k]), steps = floorf(mg / s);
            if (mg == 0) continue;
            tried++;
            if (steps < 1) continue;
            const float c = mg / steps, r = c >= m / 127.0f ? resid16(v, dim, c) : INFINITY;
            if (r < best) best = r, s = c;
        }
    }
    const __m512 inv = _mm512_set1_ps(m > 0 ? 1.0f / s : 0.0f);
    const __m512d sd = _mm512_set1_pd((double)s);
    __m512i su = _mm512_setzero_si512();
    __m512d n2 = _mm512_setzero_pd(), r2 = _mm512_setzero_pd();
    for (int k = 0; k < dim; k += 16) {
        const __mmask16 t = tail16(k, dim);
        const __m512 x = _mm512_maskz_loadu_ps(t, v + k);
        const __m512i q = _mm512_maskz_mov_epi32(t, quant16(_mm512_mul_ps(x, inv)));
        _mm_mask_storeu_epi8(qa + k, t, _mm512_cvtepi32_epi8(q));
        su = _mm512_add_epi32(su, q);
        for (int h = 0; h < 2; h++) { /* s q and v - s q in double: exact products */
            const __m512d qd = _mm512_cvtepi32_pd(h ? _mm512_extracti64x4_epi64(q, 1) : _mm512_castsi512_si256(q));
            const __m512d xd = _mm512_cvtps_pd(h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))
                                                 : _mm512_castps512_ps256(x));
            const __m512d d = _mm512_mul_pd(sd, qd), e = _mm512_sub_pd(xd, d);
            n2 = _mm512_fmadd_pd(d, d, n2);
            r2 = _mm512_fmadd_pd(e, e, r2);
        }
    }
    *scale = s;
    *sum = _mm512_reduce_add_epi32(su);
    *nn = _mm512_reduce_add_pd(n2);
    *rr = _mm512_reduce_add_pd(r2);
}
