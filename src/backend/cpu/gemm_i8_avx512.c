/* gemm_i8_avx512.c — the AVX512-VNNI level of gemm_i8.h: a register tile of
 * 8 tokens x 32 output rows (16 zmm accumulators of vpdpbusd), and the
 * AVX-512 activation quantizer. */
#include "backend/cpu/gemm_i8_impl.h"
#include "backend/cpu/sgemm.h"

#include <immintrin.h>
#include <string.h>

/* c[m][32] = the int32 sums of token m (x + m * ldx) with the 32 rows of panels w0, w1:
 * per k-group, x[m]'s 4 bytes broadcast against each panel's 64 bytes. */
static inline void tile8x32(const uint8_t *x, int64_t ldx, const int8_t *w0, const int8_t *w1, int64_t kg,
                            int32_t *c) {
    __m512i acc[16];
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_si512();
    for (int64_t g = 0; g < kg; g++) {
        __m512i b0 = _mm512_load_si512((const void *)(w0 + 64 * g));
        __m512i b1 = _mm512_load_si512((const void *)(w1 + 64 * g));
        const uint8_t *xg = x + 4 * g;
#define ROW(m)                                                                                                         \
    do {                                                                                                               \
        int32_t v;                                                                                                     \
        memcpy(&v, xg + (m) * ldx, 4);                                                                                 \
        __m512i av = _mm512_set1_epi32(v);                                                                             \
        acc[2 * (m)] = _mm512_dpbusd_epi32(acc[2 * (m)], av, b0);                                                      \
        acc[2 * (m) + 1] = _mm512_dpbusd_epi32(acc[2 * (m) + 1], av, b1);                                              \
    } while (0)
        ROW(0); ROW(1); ROW(2); ROW(3); ROW(4); ROW(5); ROW(6); ROW(7);
#undef ROW
    }
    for (int i = 0; i < 16; i++) _mm512_store_si512((void *)(c + 16 * i), acc[i]);
}

void hx_i8_block_avx512(const hx_i8_act *a, const hx_i8_mat *W, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                        float *Y, int64_t ldy, const float *bias, unsigned flags) {
    const int64_t kg = W->cols4 / 4, pstride = 16 * W->cols4;
    _Alignas(64) int32_t acc[HX_I8_MR * 32]; /* (token, 32 rows) */
    for (int64_t t0 = m0; t0 < m1; t0 += HX_I8_MR) {
        const uint8_t *x = a->q + t0 * a->cols4;
        for (int64_t p = p0; p < p1; p += 2) {
            const int8_t *w0 = W->w + p * pstride;
            tile8x32(x, a->cols4, w0, w0 + pstride, kg, acc);
            for (int h = 0; h < 2; h++) {
                int64_t r = (p + h) * 16;
                if (r >= W->rows) break;
                int nv = W->rows - r < 16 ? (int)(W->rows - r) : 16;
                __mmask16 k = (__mmask16)((1u << nv) - 1);
                __m512i ws = _mm512_load_si512((const void *)(W->wsum + r));
                __m512 sw = _mm512_load_ps(W->scale + r);
                __m512 b = bias ? _mm512_maskz_loadu_ps(k, bias + r) : _mm512_setzero_ps();
                for (int m = 0; m < HX_I8_MR && t0 + m < m1; m++) {
                    int64_t t = t0 + m;
                    __m512i c = _mm512_sub_epi32(_mm512_load_si512((const void *)(acc + 32 * m + 16 * h)),
                                                 _mm512_mullo_epi32(_mm512_set1_epi32(a->zero[t]), ws));
                    __m512 y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), _mm512_mul_ps(_mm512_set1_ps(a->scale[t]), sw), b);
                    if (a->n_out[t]) { /* the outliers' remainders times their weight columns */
                        __m512 corr = _mm512_setzero_ps();
                        for (int o = 0; o < a->n_out[t]; o++) {
                            const int8_t *wc = W->wt + a->out_k[t * HX_I8_OUT_MAX + o] * W->panels * 16 + r;
                            __m512 wv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)wc)));
                            corr = _mm512_fmadd_ps(_mm512_set1_ps(a->out_v[t * HX_I8_OUT_MAX + o]), wv, corr);
                        }
                        y = _mm512_fmadd_ps(corr, sw, y);
                    }
                    float *o = Y + t * ldy + r;
                    if (flags & HX_I8_ACC) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(k, o));
                    _mm512_mask_storeu_ps(o, k, y);
                }
            }
        }
        if (flags & HX_I8_GELU) {
            int64_t c0 = p0 * 16, c1 = p1 * 16 < W->rows ? p1 * 16 : W->rows;
            for (int64_t t = t0; t < t0 + HX_I8_MR && t < m1; t++) hx_gelu_f32(Y + t * ldy + c0, c1 - c0);
        }
    }
}

void hx_i8_quant_avx512(const float *X, int64_t ldx, hx_i8_act *a, int64_t r0, int64_t r1) {
    const int64_t n = a->cols;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = X + r * ldx;
        uint8_t *q = a->q + r * a->cols4;
        __m512 vmn = _mm512_set1_ps(x[0]), vmx = vmn, vss = _mm512_setzero_ps();
        for (int64_t k = 0; k < n; k += 16) {
            __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(m, x + k);
            vmn = _mm512_mask_min_ps(vmn, m, vmn, v), vmx = _mm512_mask_max_ps(vmx, m, vmx, v);
            vss = _mm512_fmadd_ps(v, v, vss);
        }
        _Alignas(64) float lanes[16];
        _mm512_store_ps(lanes, vss);
        float c = hx_i8_clip(lanes, n), mn = _mm512_reduce_min_ps(vmn), mx = _mm512_reduce_max_ps(vmx), inv;
        for (int pass = 0; pass < 2; pass++, c = INFINITY) { /* pass 1: too many outliers, no clip */
            hx_i8_row_params(mn, mx, c, &a->scale[r], &inv, &a->zero[r]);
            a->n_out[r] = 0;
            bool full = false;
            __m512 vi = _mm512_set1_ps(inv);
            __m512i z = _mm512_set1_epi32(a->zero[r]), lo = _mm512_setzero_si512(), hi = _mm512_set1_epi32(255);
            for (int64_t k = 0; k < n && !full; k += 16) {
                __mmask16 m = n - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - k)) - 1);
                __m512i v = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), vi)), z);
                __m512i vc = _mm512_min_epi32(_mm512_max_epi32(v, lo), hi);
                _mm512_mask_cvtepi32_storeu_epi8(q + k, m, vc);
                unsigned out = pass ? 0u : _mm512_mask_cmpneq_epi32_mask(m, v, vc);
                for (; out && !full; out &= out - 1) {
                    int i = __builtin_ctz(out);
                    full = !hx_i8_add_out(a, r, k + i, hx_i8_rem(x[k + i], a->scale[r], q[k + i], a->zero[r]));
                }
            }
            if (!full) break;
        }
        for (int64_t k = n; k < a->cols4; k++) q[k] = 0;
    }
}
