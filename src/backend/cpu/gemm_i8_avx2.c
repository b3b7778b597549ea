/* gemm_i8_avx2.c — the AVX2 level of gemm_i8.h, for CPUs without VNNI.
 * vpdpbusd is emulated exactly: a panel's 64 bytes (16 rows x 4 k) are
 * widened to int16 four rows at a time, multiplied by the token's 4 bytes
 * widened the same way (vpmaddwd: two products per int32 lane, no saturation),
 * and the pair sums are folded at the end with vphaddd. Tile: 2 tokens x 16 rows. */
#include "backend/cpu/gemm_i8_impl.h"
#include "backend/cpu/sgemm.h"

#include <immintrin.h>
#include <string.h>

/* c[m][16] = the int32 sums of tokens x, x + ldx with panel w. Written out by hand (no arrays of
 * vectors) so the 8 accumulators stay in registers at -O2. */
static void tile2x16(const uint8_t *x, int64_t ldx, const int8_t *w, int64_t kg, int32_t *c) {
    __m256i a00 = _mm256_setzero_si256(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    for (int64_t g = 0; g < kg; g++) {
        const int8_t *wg = w + 64 * g;
        __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wg));
        __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wg + 16)));
        __m256i w2 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wg + 32)));
        __m256i w3 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wg + 48)));
        int32_t v0, v1;
        memcpy(&v0, x + 4 * g, 4);
        memcpy(&v1, x + ldx + 4 * g, 4);
        __m256i x0 = _mm256_cvtepu8_epi16(_mm_set1_epi32(v0)); /* x0 x1 x2 x3, four times, as int16 */
        __m256i x1 = _mm256_cvtepu8_epi16(_mm_set1_epi32(v1));
        a00 = _mm256_add_epi32(a00, _mm256_madd_epi16(w0, x0));
        a01 = _mm256_add_epi32(a01, _mm256_madd_epi16(w1, x0));
        a02 = _mm256_add_epi32(a02, _mm256_madd_epi16(w2, x0));
        a03 = _mm256_add_epi32(a03, _mm256_madd_epi16(w3, x0));
        a10 = _mm256_add_epi32(a10, _mm256_madd_epi16(w0, x1));
        a11 = _mm256_add_epi32(a11, _mm256_madd_epi16(w1, x1));
        a12 = _mm256_add_epi32(a12, _mm256_madd_epi16(w2, x1));
        a13 = _mm256_add_epi32(a13, _mm256_madd_epi16(w3, x1));
    }
    /* aq: rows 4q..4q+3, two partial sums each; hadd, then order the 64-bit quarters */
    _mm256_storeu_si256((__m256i *)c, _mm256_permute4x64_epi64(_mm256_hadd_epi32(a00, a01), 0xD8));
    _mm256_storeu_si256((__m256i *)(c + 8), _mm256_permute4x64_epi64(_mm256_hadd_epi32(a02, a03), 0xD8));
    _mm256_storeu_si256((__m256i *)(c + 16), _mm256_permute4x64_epi64(_mm256_hadd_epi32(a10, a11), 0xD8));
    _mm256_storeu_si256((__m256i *)(c + 24), _mm256_permute4x64_epi64(_mm256_hadd_epi32(a12, a13), 0xD8));
}

void hx_i8_block_avx2(const hx_i8_act *a, const hx_i8_mat *W, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                      float *Y, int64_t ldy, const float *bias, unsigned flags) {
    const int64_t kg = W->cols4 / 4, pstride = 16 * W->cols4;
    int32_t acc[2 * 16];
    for (int64_t t0 = m0; t0 < m1; t0 += 2) {
        const uint8_t *x = a->q + t0 * a->cols4;
        for (int64_t p = p0; p < p1; p++) {
            int64_t r0 = p * 16;
            if (r0 >= W->rows) break;
            tile2x16(x, a->cols4, W->w + p * pstride, kg, acc);
            for (int m = 0; m < 2 && t0 + m < m1; m++) {
                int64_t t = t0 + m;
                float *o = Y + t * ldy;
                for (int64_t i = 0; i < 16 && r0 + i < W->rows; i++) {
                    int64_t r = r0 + i;
                    float y = hx_i8_out(acc[16 * m + i], a->zero[t], W->wsum[r], a->scale[t], W->scale[r],
                                        bias ? bias[r] : 0.0f);
                    if (a->n_out[t]) {
                        float corr = 0;
                        for (int o = 0; o < a->n_out[t]; o++)
                            corr = fmaf(a->out_v[t * HX_I8_OUT_MAX + o],
                                        (float)W->wt[a->out_k[t * HX_I8_OUT_MAX + o] * W->panels * 16 + r], corr);
                        y = fmaf(corr, W->scale[r], y);
                    }
                    o[r] = flags & HX_I8_ACC ? o[r] + y : y;
                }
            }
        }
        if (flags & HX_I8_GELU) {
            int64_t c0 = p0 * 16, c1 = p1 * 16 < W->rows ? p1 * 16 : W->rows;
            for (int64_t t = t0; t < t0 + 2 && t < m1; t++)
                if (c1 > c0) hx_gelu_f32(Y + t * ldy + c0, c1 - c0);
        }
    }
}

static __m256i tail_mask(int64_t left) { /* lanes 0..left-1 set */
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? left : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

void hx_i8_quant_avx2(const float *X, int64_t ldx, hx_i8_act *a, int64_t r0, int64_t r1) {
    const int64_t n = a->cols;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = X + r * ldx;
        uint8_t *q = a->q + r * a->cols4;
        /* min, max, and the squares in the 16 lanes of hx_i8_clip: two ymm, k mod 16 < 8 and >= 8 */
        __m256 vmn = _mm256_set1_ps(x[0]), vmx = vmn, ss0 = _mm256_setzero_ps(), ss1 = ss0;
        for (int64_t k = 0; k < n; k += 16) {
            for (int h = 0; h < 2 && k + 8 * h < n; h++) {
                __m256i m = tail_mask(n - k - 8 * h);
                __m256 v = _mm256_maskload_ps(x + k + 8 * h, m), mf = _mm256_castsi256_ps(m);
                vmn = _mm256_blendv_ps(vmn, _mm256_min_ps(vmn, v), mf), vmx = _mm256_blendv_ps(vmx, _mm256_max_ps(vmx, v), mf);
                if (h) ss1 = _mm256_fmadd_ps(v, v, ss1);
                else ss0 = _mm256_fmadd_ps(v, v, ss0);
            }
        }
        float tmn[8], tmx[8], lanes[16];
        _mm256_storeu_ps(tmn, vmn);
        _mm256_storeu_ps(tmx, vmx);
        _mm256_storeu_ps(lanes, ss0);
        _mm256_storeu_ps(lanes + 8, ss1);
        float mn = tmn[0], mx = tmx[0], inv, c = hx_i8_clip(lanes, n);
        for (int i = 1; i < 8; i++) mn = tmn[i] < mn ? tmn[i] : mn, mx = tmx[i] > mx ? tmx[i] : mx;
        for (int pass = 0; pass < 2; pass++, c = INFINITY) { /* pass 1: too many outliers, no clip */
            hx_i8_row_params(mn, mx, c, &a->scale[r], &inv, &a->zero[r]);
            a->n_out[r] = 0;
            bool full = false;
            __m256 vi = _mm256_set1_ps(inv);
            __m256i z = _mm256_set1_epi32(a->zero[r]), lo = _mm256_setzero_si256(), hi = _mm256_set1_epi32(255);
            for (int64_t k = 0; k < n && !full; k += 8) {
                __m256i m = tail_mask(n - k);
                __m256i v = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_maskload_ps(x + k, m), vi)), z);
                __m256i vc = _mm256_min_epi32(_mm256_max_epi32(v, lo), hi);
                __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(vc), _mm256_extracti128_si256(vc, 1));
                w = _mm_packus_epi16(w, w);
                if (n - k >= 8) {
                    _mm_storel_epi64((__m128i *)(q + k), w);
                } else {
                    uint8_t tmp[16];
                    _mm_storeu_si128((__m128i *)tmp, w);
                    memcpy(q + k, tmp, (size_t)(n - k));
                }
                unsigned out = pass ? 0u : (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(
                                   _mm256_andnot_si256(_mm256_cmpeq_epi32(v, vc), m)));
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
