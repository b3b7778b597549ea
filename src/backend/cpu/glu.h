/* glu.h — gated FFN activations of the CPU decoder rounded the way ggml's CPU backend rounds
 * them, so a real model's greedy tokens match llama.cpp's (forward.c's ggml_compat mode):
 *   SwiGLU: silu(g) = g / (1 + exp(-g)) with ggml's vectorized expf approximation (a
 *           Cody-Waite reduction and a degree-5 polynomial, max error ~1.5 ulp; libm expf
 *           on the last n % 8 elements of a row, as ggml's scalar tail does);
 *   GeGLU:  gelu_tanh evaluated at f16(g) and rounded to f16 (ggml's 64K-entry f16 table,
 *           1 + a*g*g as one FMA as compiled there), 0 below -10 and g itself above 10.
 * The plain f32 versions stay in forward.c for the exact (--exact) path. */
#ifndef HX_CPU_GLU_H
#define HX_CPU_GLU_H

#include <stdbool.h>

/* g[i] = act(g[i]) * u[i] over one row of n; avx2: use the AVX2+FMA kernel (same bits). */
void hx_swiglu_ggml(int n, float *g, const float *u, bool avx2);
void hx_geglu_ggml(int n, float *g, const float *u);
/* exp(x) as ggml's AVX2/AVX-512 ggml_v_expf computes it, one lane (tests). */
float hx_expf_ggml(float x);
void hx_swiglu_ggml_avx2(int n8, float *g, const float *u);  /* n8 a multiple of 8 */

#endif
