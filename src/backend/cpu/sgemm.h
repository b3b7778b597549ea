/* sgemm.h — blocked f32 matrix products for the CPU (the BERT encoder's
 * projections and attention), plus the row helpers fused around them.
 *
 *   Y(n, rows) = X(n, cols) · W(rows, cols)^T        (+ Y) (+ bias) (GELU)
 *
 * W is packed once into panels of HX_SGEMM_NR weight rows stored k-major
 * (panel p holds W[16p .. 16p+15][k] for k = 0..cols-1, 16 floats per k, rows
 * past the end zero): a micro-kernel streams one panel (16 columns of Y) while
 * it broadcasts 6 rows of X, keeping a 6x16 tile of Y in 12 AVX2 registers.
 * The same packing from a (k, n) row-major matrix (hx_sgemm_pack_nn) serves
 * products like P·V in attention.
 *
 * Blocking: a task owns a block of X rows x a block of panels; inside it k is
 * split into slices of at most ~256 (one panel slice, 16 KiB, stays in L1
 * while every 6-row strip of the block passes over it). Tasks run on hx_pool;
 * pool NULL = the calling thread only. The AVX2+FMA kernel is used when
 * hx_isa_current() >= HX_ISA_AVX2, else a scalar one with the same blocking.
 * Summation order differs from a dot product per element (k is summed in
 * slices, 8 lanes wide inside the kernel), so results agree with a plain loop
 * to f32 rounding, not bit for bit. */
#ifndef HX_CPU_SGEMM_H
#define HX_CPU_SGEMM_H

#include "helix.h"
#include "core/pool.h"

#define HX_SGEMM_NR 16

/* Floats a packed matrix of `rows` output columns by `cols` needs. */
size_t hx_sgemm_packed_size(int64_t rows, int64_t cols);
/* Pack W (rows, cols), row stride ldw, into dst (hx_sgemm_packed_size floats, 32-byte aligned). */
void hx_sgemm_pack_nt(const float *W, int64_t ldw, int64_t rows, int64_t cols, float *dst);
/* Pack B (cols, rows) row-major, row stride ldb — i.e. W = B^T — into dst. */
void hx_sgemm_pack_nn(const float *B, int64_t ldb, int64_t rows, int64_t cols, float *dst);

enum {
    HX_SGEMM_ACC = 1u,  /* Y += X·W^T (else Y = X·W^T) */
    HX_SGEMM_GELU = 2u, /* then y = gelu_erf(y) (after the bias) */
};

/* Y (row stride ldy) = X (row stride ldx) · Wp^T, with Wp from hx_sgemm_pack_*;
 * bias (rows floats) or NULL is added, then GELU if asked. */
void hx_sgemm(hx_pool *pool, int64_t n, int64_t rows, int64_t cols, const float *X, int64_t ldx, const float *Wp,
              float *Y, int64_t ldy, const float *bias, unsigned flags);

/* ---- row helpers (AVX2 when hx_isa_current() >= HX_ISA_AVX2) ---- */
/* x = gelu_erf(x) over n */
void hx_gelu_f32(float *x, int64_t n);
/* x = softmax(x * scale) over n (n >= 1) */
void hx_softmax_f32(float *x, int n, float scale);
/* x = LayerNorm(x) * w + b over n */
void hx_layernorm_f32(float *x, int n, const float *w, const float *b, float eps);

/* The scalar references of the helpers above (tests compare against them). */
float hx_gelu_ref(float x);

#endif
