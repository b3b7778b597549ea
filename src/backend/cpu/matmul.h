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

#endif
