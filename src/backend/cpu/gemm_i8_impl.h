/* gemm_i8_impl.h — private to gemm_i8.c and its ISA kernels. */
#ifndef HX_CPU_GEMM_I8_IMPL_H
#define HX_CPU_GEMM_I8_IMPL_H

#include "backend/cpu/gemm_i8.h"

#include <math.h>

/* Rows [m0, m1) of Y (m0 a multiple of HX_I8_MR) times panels [p0, p1) (p0, p1 even):
 * the product, bias, ACC and GELU of hx_gemm_i8. */
typedef void (*hx_i8_block_fn)(const hx_i8_act *a, const hx_i8_mat *W, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                               float *Y, int64_t ldy, const float *bias, unsigned flags);
void hx_i8_block_avx512(const hx_i8_act *a, const hx_i8_mat *W, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                        float *Y, int64_t ldy, const float *bias, unsigned flags);
void hx_i8_block_avx2(const hx_i8_act *a, const hx_i8_mat *W, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
                      float *Y, int64_t ldy, const float *bias, unsigned flags);

/* Rows [r0, r1) of X into a (per-row min and max, then hx_i8_row_params, then the levels). */
typedef void (*hx_i8_quant_fn)(const float *X, int64_t ldx, hx_i8_act *a, int64_t r0, int64_t r1);
void hx_i8_quant_avx512(const float *X, int64_t ldx, hx_i8_act *a, int64_t r0, int64_t r1);
void hx_i8_quant_avx2(const float *X, int64_t ldx, hx_i8_act *a, int64_t r0, int64_t r1);

/* A row's scale, its reciprocal and zero point from its min, max and the clip c (see gemm_i8.h).
 * Every ISA level calls this, so the levels agree bit for bit. */
static inline void hx_i8_row_params(float mn, float mx, float c, float *scale, float *inv, int32_t *zero) {
    if (mn > 0) mn = 0;
    if (mx < 0) mx = 0;
    if (mn < -c) mn = -c;
    if (mx > c) mx = c;
    float s = (mx - mn) / 255.0f;
    if (!(s > 0) || !isfinite(s)) { /* all zeros (or not finite: 0 rather than garbage) */
        *scale = 0, *inv = 0, *zero = 0;
        return;
    }
    *scale = s;
    *inv = 1.0f / s;
    long z = lrintf(-mn * *inv);
    *zero = (int32_t)(z < 0 ? 0 : z > 255 ? 255 : z);
}

/* The clip c of a row of n values from its sum of squares in 16 f32 lanes: lane i = fused
 * multiply-adds of x[k] * x[k] over k = i mod 16 in order (every level keeps these lanes, so the
 * levels agree bit for bit), added here in a fixed order. */
static inline float hx_i8_clip(const float lanes[16], int64_t n) {
    double ss = 0;
    for (int i = 0; i < 16; i++) ss += lanes[i];
    return HX_I8_CLIP * (float)sqrt(ss / (double)n);
}

/* x's remainder after its (clamped) level q: one rounding, the same at every level. */
static inline float hx_i8_rem(float x, float scale, int32_t q, int32_t zero) { return fmaf(-scale, (float)(q - zero), x); }

/* Append outlier (k, remainder) to row r's list; false when the list is full. */
static inline bool hx_i8_add_out(hx_i8_act *a, int64_t r, int64_t k, float o) {
    int32_t n = a->n_out[r];
    if (n == HX_I8_OUT_MAX) return false;
    a->out_k[r * HX_I8_OUT_MAX + n] = (int32_t)k;
    a->out_v[r * HX_I8_OUT_MAX + n] = o;
    a->n_out[r] = n + 1;
    return true;
}

/* One output: the epilogue every level uses. A token with outliers then adds fmaf(corr, sw, y),
 * corr = sum_o o * Wq[r][k_o] in the list's order, each step one fused multiply-add. */
static inline float hx_i8_out(int32_t acc, int32_t zero, int32_t wsum, float sx, float sw, float b) {
    return fmaf((float)(acc - zero * wsum), sx * sw, b);
}

#endif
