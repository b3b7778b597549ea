/* checks.h — the CUDA backend's self-checks and device measurements, for
 * gpu-test, bench and tests only: they live in the static library
 * helix_cuda_checks, not in libhelix. Each runs one kernel (or the copy
 * engine, or cuBLAS) alone on host data with the launchers the decoder uses,
 * so gpu-test can compare it with a float64 reference on fresh random inputs.
 * Every function returns hx_status and fills hx_error. */
#ifndef HX_BACKEND_CUDA_CHECKS_H
#define HX_BACKEND_CUDA_CHECKS_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "helix.h"
#include "backend/cuda/dev_opts.h"
#ifdef __cplusplus
extern "C" {
#endif

/* The developer switches from the environment variables the tools have always
 * taken (each field of dev_opts.h names its variable), for tools that keep
 * them: *o is zeroed first, then each variable that is set fills its field.
 * HX_CUDA_SKIP and the HX_CUDA_MVQ_WPR rules stay valid for the process (the
 * environment's string; the rules in storage of this function). A value that
 * does not parse is HX_ERR_ARG naming the variable and the value. */
hx_status hx_cuda_dev_opts_from_env(hx_cuda_dev_opts *o, hx_error *e);

/* Device-to-device copy of `bytes`: GB/s counting bytes read plus written, median of reps. */
hx_status hx_cuda_copy_bandwidth(size_t bytes, int reps, double *gbps, hx_error *e);
/* cuBLAS f16 GEMM (m x n x k, f32 accumulate): TFLOP/s, median of reps. */
hx_status hx_cuda_gemm_tflops(int m, int n, int k, int reps, double *tflops, hx_error *e);
/* Y (n, rows) = X (n, cols) W^T on the GPU with the forward's kernels, W given
 * in `type` on the host (rows x row_bytes). Y is poisoned (NaN) before the run.
 * When ms is not NULL, the product is also timed: median milliseconds of reps
 * runs after warm-up, with CUDA events. q8: the paths with 8-bit activations
 * instead (x quantized on the GPU; n = 1 the dp4a matvec, n > 1 the int8
 * tensor-core kernel mmq, or the dp4a tile kernel when dev->mvq_cols_max >= n;
 * HX_ERR_UNSUPPORTED for types without them). dev: the kernel choice (NULL:
 * production). */
hx_status hx_cuda_linear_check(int type, int rows, int cols, const void *w, int n, const float *x, float *y,
                               bool q8, int reps, double *ms, const hx_cuda_dev_opts *dev, hx_error *e);

/* One decode-attention step for hx_cuda_attn_decode_check: the shape, the
 * position and the layer's attention parameters, as the decoder passes them. */
typedef struct hx_cuda_attn_case {
    int n_head, n_head_kv, head_dim;  /* n_head a multiple of n_head_kv; head_dim even */
    int pos;                          /* the token's position (< max_ctx) */
    int rows;                         /* KV cache rows: position t lives in row t % rows (a ring when rows <= pos) */
    int max_ctx;                      /* the context the launch is sized for: fixes the split count */
    int window;                       /* sliding window (positions pos-window+1..pos), 0 = all */
    float scale, softcap;             /* score = dot(q, k) * scale, then softcap * tanh(score / softcap) when > 0 */
    float rope_base, rope_scale;      /* theta = (pos / rope_scale) * base^(-2j / head_dim); rope_scale <= 0: 1 */
    bool neox;                        /* rotate pairs (j, j + head_dim/2); else (2j, 2j + 1) */
    bool rope_tab;                    /* give the kernel a host table of (cos, sin) instead of computing them */
    const float *q_norm, *k_norm;     /* head_dim RMSNorm weights each, or NULL (no q/k norm) */
    float eps;                        /* RMSNorm epsilon */
    const hx_cuda_dev_opts *dev;      /* the kernel choice (att_block, att_chunk, att_fp32, naive_attn, no_pdl);
                                         NULL: production */
} hx_cuda_attn_case;
/* The fused decode attention (norm + RoPE + KV store + attention, one launch)
 * alone on host data (gpu-test): q (n_head * head_dim), k and v (n_head_kv *
 * head_dim) of one token; kc, vc the caches as f16 bits (rows, n_head_kv,
 * head_dim), uploaded, then overwritten with the caches after the step (row
 * pos % rows then holds the rotated k and v). out (n_head * head_dim) gets the
 * attention output; xq (n_head * head_dim) and xd (n_head * head_dim / 32),
 * when not NULL (head_dim a multiple of 32), its 8-bit quantization. Outputs
 * are poisoned first (out, xd NaN, xq -128); with rope_tab only the table's
 * row pos is filled, the others are NaN. *splits (when not NULL): the grid's
 * blocks per head. HX_ERR_DEVICE also when the per-head split counters are
 * not back to zero after the step. */
hx_status hx_cuda_attn_decode_check(const hx_cuda_attn_case *c, const float *q, const float *k, const float *v,
                                    uint16_t *kc, uint16_t *vc, float *out, int8_t *xq, float *xd, int *splits,
                                    hx_error *e);
/* The prefill attention (hx_k_attention, as the forward calls it after
 * hx_k_rope_store) alone on host data (gpu-test): n queries q (n, n_head *
 * head_dim) at positions c->pos .. c->pos + n - 1 over the caches kc, vc (f16
 * bits, (rows, n_head_kv, head_dim), already holding every position the
 * queries see); out (n, n_head * head_dim) gets the attention output, poisoned
 * (NaN) first. Of *c only the shape, pos, rows, max_ctx (>= pos + n: the
 * per-query kernel's shared memory), window, scale, softcap and dev are used.
 * Same kernel choice as the forward (c->dev: att_fp32, naive_attn). */
hx_status hx_cuda_attn_prefill_check(const hx_cuda_attn_case *c, int n, const float *q, const uint16_t *kc,
                                     const uint16_t *vc, float *out, hx_error *e);

/* The sampling kernel alone on host logits[V] (the parameters of
 * hx_cuda_decode_sample, cuda.h). */
typedef struct hx_cuda_sample_params hx_cuda_sample_params;
hx_status hx_cuda_sample_check(int V, const float *logits, const hx_cuda_sample_params *p, const int32_t *hist,
                               int n_hist, float u, int32_t *next, bool *on_gpu, hx_error *e);

#ifdef __cplusplus
}
#endif
#endif
