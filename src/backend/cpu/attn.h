/* attn.h — private SIMD helpers of the CPU attention (backend/cpu). */
#ifndef HX_CPU_ATTN_H
#define HX_CPU_ATTN_H

#include <stdint.h>

/* acc = f16(fma(v, s, acc)) and acc = f16(acc * s) over n halves (AVX2+F16C+FMA). */
void hx_f16_mad_avx2(int n, uint16_t *acc, const uint16_t *v, float s);
void hx_f16_scale_avx2(int n, uint16_t *acc, float s);
/* acc += w * v over n halves into f32 (mul then add, as the scalar code). */
void hx_f32_axpy_f16_avx2(int n, float *acc, const uint16_t *v, float w);
/* dst = f16(src) (round to nearest even) and dst = f32(src) over n values: the
 * bits of hx_fp32_to_fp16 / hx_fp16_to_fp32, 8 lanes at a time. */
void hx_f32_to_f16_row_avx2(int n, uint16_t *dst, const float *src);
void hx_f16_to_f32_row_avx2(int n, float *dst, const uint16_t *src);

#endif
