/* lora_mm.h — the two small f32 products of a LoRA delta (t = A x, then B t) summed in
 * the order of llama.cpp's CPU backend, so that the CPU decoder's parity mode
 * (forward.c's ggml_compat) gives llama.cpp's bits with adapters as it does without.
 *
 * Y (n, m) = X (n, k) W^T with W (m, k) row-major: Y[i][j] = sum_l W[j][l] X[i][l].
 * ggml's mul_mat takes one of two routes (llama.cpp built for AVX2 + FMA, GCC 12 -O3):
 *   tinyBLAS (llamafile sgemm; the product has 2+ columns, k % 8 == 0, m % 4 == 0):
 *     8 lanes, lane q = FMA chain over W[j][l+q] X[i][l+q] for l = 0, 8, ..; then
 *     ((q0 + q4) + (q2 + q6)) + ((q1 + q5) + (q3 + q7)).
 *   ggml_vec_dot_f32 (otherwise: decode, or a shape tinyBLAS declines):
 *     4 x 8 lanes, accumulator a over the blocks of 32 (a[j] for elements 8j..8j+7 of
 *     each block), reduced a0 + a2, a1 + a3, then their sum, then lanes
 *     ((q0 + q4) + (q1 + q5)) + ((q2 + q6) + (q3 + q7)) (two hadds); then the tail of
 *     k % 32 as GCC vectorized the scalar loop: blocks of 8, then one of 4, of rounded
 *     products added one at a time, and the last 1-3 elements fused (FMA).
 * "Columns" are the product's in llama.cpp's graph: the tokens of the ubatch, except in
 * the last layer's FFN and the output head, which see only the rows that give logits.
 * The AVX2 kernel and the scalar one (fmaf, no contraction) give the same bits. */
#ifndef HX_MODEL_LORA_MM_H
#define HX_MODEL_LORA_MM_H

#include <stdbool.h>
#include <stdint.h>

#include "helix.h"

/* Y = X W^T as above; batch: the product has 2+ columns in llama.cpp's graph (picks
 * tinyBLAS where it applies). pool may be NULL; it is used only when the work is large. */
void hx_lora_mm_ggml(hx_pool *pool, const float *W, int64_t m, int64_t k, const float *X, int64_t n, bool batch,
                     float *Y);
/* One element each way (tests, and the kernels' tails): w, x of k. */
float hx_lora_dot_tinyblas(const float *w, const float *x, int64_t k);  /* k % 8 == 0 */
float hx_lora_dot_vecdot(const float *w, const float *x, int64_t k);
/* The AVX2 kernels (lora_mm_avx2.c): rows [i0, i1) of Y, the same bits as the scalar ones. */
void hx_lora_mm_tinyblas_avx2(const float *W, int64_t m, int64_t k, const float *X, int64_t i0, int64_t i1, float *Y);
void hx_lora_mm_vecdot_avx2(const float *W, int64_t m, int64_t k, const float *X, int64_t i0, int64_t i1, float *Y);

#endif
