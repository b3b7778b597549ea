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

/* A row's scale, its reciprocal and zero point from its min and max: [min(mn, 0), max(mx, 0)] onto 0..255.
 * Every ISA level calls this, so the levels agree bit for bit. */
static inline void hx_i8_row_params(float mn, float mx, float *scale, float *inv, int32_t *zero) {
    if (mn > 0) mn = 0;
    if (mx < 0) mx = 0;
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

/* One output: the epilogue every level uses (a single rounding in the fused multiply-add). */
static inline float hx_i8_out(int32_t acc, int32_t zero, int32_t wsum, float sx, float sw, float b) {
    return fmaf((float)(acc - zero * wsum), sx * sw, b);
}

#endif
