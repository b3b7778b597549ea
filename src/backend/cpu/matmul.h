/* matmul.h — multithreaded matrix-vector and matrix-matrix products over every
 * GGUF weight type, on top of the per-row dot kernels of quant/quant.h.
 *
 * Shapes: W is (rows, cols) row-major in its stored type: W->ne[0] = cols (row
 * length), W->ne[1] = rows. x is f32 (cols), y is f32 (rows). For a batch,
 * X is f32 (n, cols) row-major and Y is f32 (n, rows) row-major.
 * The activations are quantized once per call to the weight type's dot type
 * (Q8_0 / Q8_1 / Q8_K; f32 stays f32), exactly as ggml does. */
#ifndef HX_CPU_MATMUL_H
#define HX_CPU_MATMUL_H

#include "helix.h"
#include "core/pool.h"
#include "model/model.h"

/* y = W x. pool may be NULL (single thread). */
hx_status hx_matvec(hx_pool *pool, const hx_tensor *W, const float *x, float *y, hx_error *e);
/* Y[t] = W X[t] for t in [0, n). */
hx_status hx_matmul(hx_pool *pool, const hx_tensor *W, const float *X, int64_t n, float *Y, hx_error *e);

/* Flags for hx_matmul_ex. HX_MM_ROUND_F16_ACT: for F16/BF16 weights round the
 * activations to f16/bf16 first, as ggml does (its vec_dot_type), for
 * token-exact parity with llama.cpp; off = exact f32 activations. */
enum { HX_MM_ROUND_F16_ACT = 1u, HX_MM_GGML_ORDER = 2u };
/* HX_MM_GGML_ORDER (AVX2 and above): sum each output in the order llama.cpp's x86 CPU backend does,
 * for token-exact parity on real models: Q8_0/Q5_0/Q6_K batches through the tiled / per-row
 * kernels (ggml's vec_dot and llamafile order) instead of the packed ones, and Q4_K with rows
 * % 8 == 0 in the order of ggml's repacked 8x8 kernels (gemm for the first n - n % 4 tokens,
 * gemv for the rest). Slower for prefill; the default (off) is unchanged. */
hx_status hx_matmul_ex(hx_pool *pool, const hx_tensor *W, const float *X, int64_t n, float *Y, unsigned flags,
                       hx_error *e);

/* Several matrices applied to the same activations (q/k/v, gate/up) in one
 * pool run: X is quantized once and the rows of all of them are split across
 * the threads together. 1..4 matrices with the same row length and dot type;
 * Ys[m] is (n, rows of Ws[m]). HX_ERR_ARG if they cannot share X. */
hx_status hx_matmul_multi(hx_pool *pool, int count, const hx_tensor *const *Ws, const float *X, int64_t n,
                          float *const *Ys, unsigned flags, hx_error *e);

/* Gate/up with the gated activation in the same pool run: y0 = W0 x and
 * y1 = W1 x (one token, two matrices with the same rows and row length, as
 * hx_matmul_multi), a task computing rows [r0, r1) of both and then calling
 * post(post_ctx, r0, r1) on them, so an element-wise step over those rows
 * runs on the threads that made them, with no second pool run. Each output
 * row is the same kernel call as hx_matmul_multi's: the same bits. */
typedef void (*hx_rows_fn)(void *ctx, int64_t r0, int64_t r1);
hx_status hx_matvec_pair(hx_pool *pool, const hx_tensor *W0, const hx_tensor *W1, const float *x, float *y0,
                         float *y1, unsigned flags, hx_rows_fn post, void *post_ctx, hx_error *e);

#endif
