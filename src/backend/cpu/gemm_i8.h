/* gemm_i8.h — int8 matrix products for the CPU (the BERT encoder's linear
 * layers in its int8 mode).
 *
 *   Y(n, rows) = dequant( Xq(n, cols) · Wq(rows, cols)^T )  (+ Y) (+ bias) (GELU)
 *
 * Weights: symmetric int8 per output row, w[r][k] ~ sw[r] * Wq[r][k],
 * Wq in [-127, 127], sw = max|w[r]| / 127; quantized once (hx_i8_mat_pack).
 * Activations: asymmetric uint8 per token (row), x[t][k] = sx[t] * (Xq[t][k] - zx[t]) + o[t][k],
 * Xq in [0, 255]: the range [lo, hi] is mapped onto 0..255, with 0 exact, where
 * lo = max(min(x, 0), -c), hi = min(max(x, 0), c), c = HX_I8_CLIP * rms(x).
 * The values outside [lo, hi] (outliers: the residual stream of a BERT has a
 * few channels 10-30x its rms) keep their remainder o (x minus its clipped
 * level, f32) in a short list per token; other o are 0. A token with more than
 * HX_I8_OUT_MAX outliers is not clipped (lo, hi = the whole range; a level
 * that rounds past 0 or 255 there is clamped, one step off at most). Then
 *   y[t][r] = (acc[t][r] - zx[t] * wsum[r]) * (sx[t] * sw[r]) + bias[r] + sw[r] * sum_o o * Wq[r][k_o],
 *   acc[t][r] = sum_k Xq[t][k] * Wq[r][k] (int32, exact),  wsum[r] = sum_k Wq[r][k].
 *
 * Packing: cols is padded to cols4 (a multiple of 4, zeros), rows to panels of
 * 16 (an even number of them, zero rows past the end). Panel p holds rows
 * 16p..16p+15, k-group g (k = 4g..4g+3) at bytes 64g: row i's four values at
 * 4i. That is the operand order of AVX512-VNNI's vpdpbusd (u8 x s8, four
 * products summed into each int32 lane), so one 64-byte load feeds 16 rows.
 * The activations are rows of cols4 bytes; their buffer has n rounded up to
 * HX_I8_MR rows (zeros past n).
 *
 * Kernels: AVX512-VNNI (8 tokens x 32 rows per register tile) when
 * hx_isa_current() >= HX_ISA_AVX512_VNNI; else AVX2 (vpmaddwd on widened
 * values); else scalar. All levels compute the same int32 sums and the same
 * epilogue (one fused multiply-add per element), so they give the same bits. */
#ifndef HX_CPU_GEMM_I8_H
#define HX_CPU_GEMM_I8_H

#include "helix.h"
#include "core/pool.h"

#include <stdint.h>

#define HX_I8_MR 8       /* activation rows are padded to a multiple of this */
#define HX_I8_CLIP 4.0f    /* the clipping range, in rms of the token's values */
#define HX_I8_OUT_MAX 32 /* outliers kept per token */

typedef struct hx_i8_mat {
    int64_t rows, cols, cols4, panels; /* panels: even, 16 rows each */
    int8_t *w;                         /* (panels * 16, cols4) packed as above, 64-byte aligned */
    float *scale;                      /* (panels * 16) sw; 0 past rows */
    int32_t *wsum;                     /* (panels * 16) sum_k Wq */
    int8_t *wt;                        /* (cols, panels * 16) Wq transposed: the outliers' columns */
} hx_i8_mat;

/* Quantize W (rows, cols), row stride ldw, into m. False when out of memory (m is then empty). */
bool hx_i8_mat_pack(const float *W, int64_t ldw, int64_t rows, int64_t cols, hx_i8_mat *m);
void hx_i8_mat_free(hx_i8_mat *m);

typedef struct hx_i8_act {
    int64_t n, cols, cols4;
    uint8_t *q;     /* (round_up(n, HX_I8_MR), cols4) */
    float *scale;   /* (round_up(n, HX_I8_MR)) sx */
    int32_t *zero;  /* (round_up(n, HX_I8_MR)) zx */
    int32_t *n_out; /* (round_up(n, HX_I8_MR)) outliers of each token, <= HX_I8_OUT_MAX */
    int32_t *out_k; /* (round_up(n, HX_I8_MR), HX_I8_OUT_MAX) their columns, ascending */
    float *out_v;   /* (round_up(n, HX_I8_MR), HX_I8_OUT_MAX) their remainders o */
} hx_i8_act;

/* Bytes a hx_i8_act of n rows of cols needs (hx_i8_act_init carves them from one 64-byte aligned block). */
size_t hx_i8_act_bytes(int64_t n, int64_t cols);
void hx_i8_act_init(hx_i8_act *a, int64_t n, int64_t cols, void *block);
/* a = quantized X (a->n rows of a->cols, row stride ldx), rows split over the pool. */
void hx_i8_quantize(hx_pool *pool, const float *X, int64_t ldx, hx_i8_act *a);

enum {
    HX_I8_ACC = 1u,  /* Y += result (else Y = result) */
    HX_I8_GELU = 2u, /* then y = gelu_erf(y) (after the bias) */
};

/* Y (a->n x W->rows, row stride ldy) as in the header comment; bias (W->rows floats) or NULL.
 * a->cols must equal W->cols. Tasks run on pool (NULL: the calling thread). */
void hx_gemm_i8(hx_pool *pool, const hx_i8_act *a, const hx_i8_mat *W, float *Y, int64_t ldy, const float *bias,
                unsigned flags);

#endif
