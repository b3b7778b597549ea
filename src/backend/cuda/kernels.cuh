// kernels.cuh — the decoder's GPU kernels and their launchers (private to src/backend/cuda).
//
// Layouts (row-major, f32 unless said): activations (n, dim); weights as
// stored in the GGUF (rows of `cols` elements in their quant type, row_bytes
// apart); KV cache per layer (n_ctx, n_head_kv * head_dim) in f16. Kernels
// that depend on the position read it from device memory (d_pos), so a CUDA
// graph captured once replays for every decode step.
//
// Launchers that choose among kernels take the developer switches last
// (const hx_cuda_dev_opts *dv, backend/cuda/dev_opts.h); NULL is the
// production choice.
#pragma once
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include "backend/cuda/dev_opts.h"

// A weight matrix on the device: rows x cols of `type`.
struct hx_dmat {
    const uint8_t *d;
    int type;
    int cols, rows;
    size_t row_bytes;
};

// Scratch for the cuBLAS path of hx_k_linear (n >= HX_CUBLAS_MIN_N): weights
// dequantized to f16, activations converted to f16.
struct hx_gemm_scratch {
    cublasHandle_t blas;
    __half *wh; size_t wh_cap;   // elements
    __half *xh; size_t xh_cap;
};
enum { HX_CUBLAS_MIN_N = 32 };

// (cos, sin) of RoPE pair j (of hd / 2) at position p: theta = (p / rope_scale)
// * base^(-2j / hd) in double, then rounded to float. The host's rope tables
// and the kernels that go without one use this one formula.
static __host__ __device__ inline float2 hx_rope_cs(int p, int j, int hd, float base, float rope_scale) {
    double theta = ((double)p / rope_scale) * pow((double)base, -2.0 * j / hd);
    return make_float2((float)cos(theta), (float)sin(theta));
}

// The first position a query at p sees: p - window + 1 with a sliding window
// (window > 0), else 0.
static __host__ __device__ inline int hx_att_first(int p, int window) {
    return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
}

// y (n, rows) = x (n, cols) W^T (+ bias) ; accumulate: y += ... instead of y =.
// n == 1: fused dequant-matvec, warp per row; 1 < n < HX_CUBLAS_MIN_N: the same
// kernel over tiles of 8 tokens (each weight decoded once per tile); larger n:
// W dequantized to f16 + cuBLAS tensor-core GEMM (f32 accumulate).
cudaError_t hx_k_linear(cudaStream_t st, hx_gemm_scratch *gs, const hx_dmat *W, const float *x, int n, float *y,
                        const float *bias, bool accumulate, const hx_cuda_dev_opts *dv);
bool hx_k_type_supported(int type);
// Launch kernels with programmatic dependent launch from now on, on this
// thread, when allow and the current device has it (Hopper and later); *on
// (may be NULL) says which. hx_k_pdl_set switches it for this thread: a
// context sets its own choice before it enqueues anything.
cudaError_t hx_k_pdl_init(bool allow, bool *on);
void hx_k_pdl_set(bool on);
// Launches fn (arguments as for cudaLaunchKernel) with the PDL attribute when this thread has it on.
cudaError_t hx_k_launch_pdl(const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st, void **args);

// Greedy picks of up to HX_ROWS_MAX rows of V logits on the device (rows.cu):
// out[b] = the lowest index among the maxima of row rows->r[b] (hx_argmax's
// rule). The row list travels as a kernel argument: no copy before the launch.
enum { HX_ROWS_MAX = 64 };
struct hx_rows_arg { int r[HX_ROWS_MAX]; };
cudaError_t hx_k_argmax_rows(cudaStream_t st, const float *x, int V, const hx_rows_arg *rows, int n, int *out);
// out[b * k + q] = row rows->r[b]'s value at ids[b * k + q] less the row's
// log-sum-exp (f32 sums), b < n <= HX_ROWS_MAX; ids and out on the
// device, ids within 0..V-1.
cudaError_t hx_k_logprob_rows(cudaStream_t st, const float *x, int V, const hx_rows_arg *rows, int n, int k,
                              const int *ids, float *out);

// Decode (n = 1) with fewer launches: `count` (<= 3) matrices of one type and
// row length read the same x, optionally RMS-normed on the fly with norm_w
// (NULL: x as is), ys[i] = W_i x (+ bias_i) (accumulate: +=). glu_act >= 0:
// count = 2 (gate, up) and ys[0] = act(gate x) * (up x), act 0 SiLU, 1 GELU-tanh.
struct hx_mv_set {
    const uint8_t *w[3]; size_t rb[3]; int rows[3]; float *y[3]; const float *bias[3];
    int count, total_rows;
};
bool hx_k_mv_fusable(const hx_dmat *const *Ws, int count);
cudaError_t hx_k_mv_fused(cudaStream_t st, int count, const hx_dmat *const *Ws, const float *x, const float *norm_w,
                          float eps, float *const *ys, const float *const *biases, bool accumulate, int glu_act,
                          const hx_cuda_dev_opts *dv);
// Decode with 8-bit activations (mvq.cu): xq/xd = blocks of 32 int8 with a
// float scale of x (RMSNorm with norm_w first, when not NULL); then the
// matrices (as hx_k_mv_fused, all of one type) dotted with dp4a. Types: Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K (hx_k_mvq_supported).
bool hx_k_mvq_supported(const hx_dmat *W);
cudaError_t hx_k_quant_q8(cudaStream_t st, const float *x, const float *norm_w, float eps, int cols, int8_t *xq,
                          float *xd);
// Also one launch for a run of Q4_K matrices followed by a run of Q6_K ones
// (hx_k_mvq_one_launch: whether Ws[0..count) go in one launch).
cudaError_t hx_k_mvq(cudaStream_t st, int count, const hx_dmat *const *Ws, const int8_t *xq, const float *xd,
                     float *const *ys, const float *const *biases, bool accumulate, int glu_act,
                     const hx_cuda_dev_opts *dv);
bool hx_k_mvq_one_launch(const hx_dmat *const *Ws, int count, const hx_cuda_dev_opts *dv);
// The sampling chain on the GPU (sample.cu): out[0] = the token, out[1] = 0,
// or out[1] = 1 when the case is left to the CPU (top-k off or > 256, too few
// candidates, too many ties). work: V floats (the penalized logits).
cudaError_t hx_k_sample(cudaStream_t st, const float *logits, float *work, int V, const int *hist, int nhist,
                        float rep, float freq, float pres, int top_k, float top_p, float min_p, float temp, float u,
                        int *out);
// out[r] = row token_ids[r] of W (dequantized) * scale, for r < n.
cudaError_t hx_k_embed(cudaStream_t st, const hx_dmat *W, const int *token_ids, int n, float *out, float scale);
// out (rows, dim) = x / rms(x) * w ; out may equal x.
cudaError_t hx_k_rmsnorm(cudaStream_t st, const float *x, const float *w, float *out, int rows, int dim, float eps);
// out = rmsnorm(x) * w, then acc += out (the post norm and residual add of gemma)
cudaError_t hx_k_rmsnorm_add(cudaStream_t st, const float *x, const float *w, float *out, float *acc, int rows, int dim,
                             float eps);
// [per-head RMSNorm with q_norm / k_norm when not NULL], then RoPE on q
// (n, nh, hd) and k (n, nkvh, hd) at positions *d_pos + i, then k and v
// (n, nkvh*hd) stored as f16 into the caches at those positions. Every cache
// argument below has `rows` rows: position t lives in row t % rows (a ring for
// sliding-window layers, rows = the context otherwise).
cudaError_t hx_k_rope_store(cudaStream_t st, float *q, float *k, const float *v, __half *kc, __half *vc, int rows,
                            const int *d_pos, int n, int nh, int nkvh, int hd, float base, float rope_scale,
                            bool neox, const float *q_norm, const float *k_norm, float eps);
// Tokens of many sequences: token i at position tpos[i] of cache slot
// tslot[i] (slot s's rows start at element s * slot_stride of kc / vc); as
// hx_k_rope_store otherwise.
cudaError_t hx_k_rope_store_tok(cudaStream_t st, float *q, float *k, const float *v, __half *kc, __half *vc, int rows,
                                size_t slot_stride, const int *tpos, const int *tslot, int n, int nh, int nkvh, int hd,
                                float base, float rope_scale, bool neox, const float *q_norm, const float *k_norm,
                                float eps);
// out (n, nh, hd): token i attends to positions first..tpos[i] of its slot
// tslot[i] (q roped and those positions stored: hx_k_rope_store_tok first).
// max_ctx: the most positions a slot holds (the per-query fallback's shared memory).
cudaError_t hx_k_attention_tok(cudaStream_t st, const float *q, const __half *kc, const __half *vc, int rows,
                               size_t slot_stride, float *out, const int *tpos, const int *tslot, int n, int nh,
                               int nkvh, int hd, float scale, float softcap, int window, int max_ctx,
                               const hx_cuda_dev_opts *dv);
// Decode of many sequences with one token each (no slot twice): rope, the KV
// stores and the attention of tokens in one launch (hd 64, 128 or 256). As
// hx_k_rope_store_tok + hx_k_attention_tok, except that q and k stay unrotated
// in memory and the output goes, when xq is set, straight to mmq's 8-bit
// activations (xq, ds for np = hx_k_mmq_pad(n) tokens) instead of out.
struct hx_attn_tok_args {
    const float *q, *k, *v;       // (n, nh, hd), (n, nkvh, hd), (n, nkvh, hd), as the q/k/v matmuls wrote them
    __half *kc, *vc;              // the caches: slot s at element s * slot_stride, rows rows of nkvh * hd
    int rows; size_t slot_stride;
    const int *tpos, *tslot;      // token i: position tpos[i] in slot tslot[i]
    int n, nh, nkvh;
    float scale, softcap; int window;
    float base, rope_scale; bool neox;
    const float *q_norm, *k_norm; float eps; // per-head RMSNorm weights (qk_norm) or NULL
    const float2 *rope_tab;       // (cos, sin) per position and pair, or NULL (hx_rope_cs)
    float *out;                   // (n, nh, hd) f32, when xq is NULL
    int8_t *xq; float2 *ds; int np;
};
cudaError_t hx_k_attention_tok_rope(cudaStream_t st, const hx_attn_tok_args *a, int hd);
// Batches of tokens with 8-bit activations (mvq.cu): hx_k_quant_q8_rows
// quantizes the rows of x (n, cols) (row r at xq + r * cols, xd + r * cols /
// 32); hx_k_mvq_cols then y (n, rows) = x W^T (+ bias) (accumulate: +=), a
// tile of MVQ_COLS tokens per weight read (types: hx_k_mvq_supported).
enum { MVQ_COLS = 8 };
cudaError_t hx_k_quant_q8_rows(cudaStream_t st, const float *x, int n, int cols, int8_t *xq, float *xd);
cudaError_t hx_k_mvq_cols(cudaStream_t st, const hx_dmat *W, const int8_t *xq, const float *xd, int n, float *y,
                          const float *bias, bool accumulate);
// Batches of tokens on the int8 tensor cores (mmq.cu): hx_k_mmq_quant
// quantizes the rows of x (n, cols) (RMS-normed with norm_w first when not
// NULL) into xq (np, cols) and ds[g * np + t] = (scale, scale * sum of q) of
// group g of 32 elements of token t, np = hx_k_mmq_pad(n) (the rows past n
// repeat row n - 1: size the buffers for np); hx_k_mmq then ys[i] (n, rows_i)
// = x W_i^T (+ bias_i) (accumulate: +=) for count matrices of one type and
// width (hx_k_mmq_one_launch) in one launch, or with glu_act >= 0 (count 2,
// gate and up) ys[0] = act(x gate^T) * (x up^T + bias_1). Each weight is
// unpacked once for up to 64 tokens. dv: dv->mmq_warps (warps per block) for
// sweeps; NULL: chosen by shape.
bool hx_k_mmq_supported(const hx_dmat *W);
bool hx_k_mmq_one_launch(const hx_dmat *const *Ws, int count);
int hx_k_mmq_pad(int n);
cudaError_t hx_k_mmq_quant(cudaStream_t st, const float *x, const float *norm_w, float eps, int n, int cols,
                           int8_t *xq, float2 *ds);
cudaError_t hx_k_mmq(cudaStream_t st, int count, const hx_dmat *const *Ws, const int8_t *xq, const float2 *ds, int n,
                     float *const *ys, const float *const *biases, bool accumulate, int glu_act,
                     const hx_cuda_dev_opts *dv);
// out (n, dim) = rows idx[0..n) of x.
cudaError_t hx_k_gather_rows(cudaStream_t st, const float *x, const int *idx, int n, int dim, float *out);
// out (n, nh, hd) = softmax(scale q k^T, causal [+window]) v over the cache.
// n > 1 at head sizes 64 and 128: tiled flash attention on tensor cores (q and
// P in f16, f32 sums; dv->att_fp32: the FP32 tiled kernel); other head
// sizes, n = 1 and dv->naive_attn: one block per query.
cudaError_t hx_k_attention(cudaStream_t st, const float *q, const __half *kc, const __half *vc, int rows, float *out,
                           const int *d_pos, int n, int nh, int nkvh, int hd, float scale, float softcap, int window,
                           int max_ctx, const hx_cuda_dev_opts *dv);
// Decode (n = 1): hx_k_rope_store + hx_k_attention in one launch (q, k, v of
// the one token; k/v also stored into the caches at *d_pos). rope_tab, when
// not NULL, holds (cos, sin) of position p, pair j at [p * hd/2 + j] for this
// base (the kernel then does no double-precision pow/cos/sin).
cudaError_t hx_k_attn_decode(cudaStream_t st, const float *q, const float *k, const float *v, __half *kc, __half *vc,
                             int rows, float *out, const int *d_pos, int nh, int nkvh, int hd, float scale, float softcap,
                             int window, int max_ctx, float base, float rope_scale, bool neox, const float *q_norm,
                             const float *k_norm, float eps, const float2 *rope_tab, float *part, unsigned *count,
                             int8_t *xq, float *xd, const hx_cuda_dev_opts *dv);
// Decode attention is split over chunks of the context (flash-decoding): one
// block per (head, chunk of 256 positions), partial results merged by the last
// block of each head. part: nh * splits * (hd + 2) floats; count: nh unsigned,
// zero before the first call (each call leaves them zero). xq/xd, when not
// NULL (and hd a multiple of 32): the output also quantized as hx_k_quant_q8
// would (for the wo matvec).
int hx_k_attn_decode_splits(int max_ctx, const hx_cuda_dev_opts *dv);
int hx_k_attn_decode_chunk(int max_ctx, const hx_cuda_dev_opts *dv); // positions per (head, split) item
// Dynamic shared memory (bytes) of one decode attention block for chunk positions.
size_t hx_k_attn_decode_smem(int hd, int chunk);
// The decode attention's arguments (one work item: attn_decode_item in decode.cuh).
struct hx_attn_args {
    const float *q, *k, *v;
    __half *kc, *vc;
    int rows;
    float *out;
    int nh, nkvh, hd;
    float scale, softcap;
    int window;
    float base, rope_scale;
    int neox;
    const float *q_norm, *k_norm;
    float eps;
    const float2 *rope_tab;
    float *part;
    unsigned *count;
    int chunk;
    int8_t *xq;
    float *xd;
};
// g = act(g) * u over count elements (act: 0 SiLU, 1 GELU-tanh)
cudaError_t hx_k_glu(cudaStream_t st, float *g, const float *u, size_t count, int act);
cudaError_t hx_k_add(cudaStream_t st, float *x, const float *o, size_t count);
cudaError_t hx_k_softcap(cudaStream_t st, float *x, size_t count, float cap);
// Argmax of x[0..n) (the first index on ties, like hx_argmax) as a 64-bit
// key in *key (zeroed by this call); hx_argmax_key_index decodes it.
// tok, pos, count: NULL, or *tok = the index and *pos += 1 on the device
// (count: a counter that must be 0, left 0).
cudaError_t hx_k_argmax(cudaStream_t st, const float *x, int n, unsigned long long *key, int *tok, int *pos,
                        unsigned *count);
static __host__ __device__ inline int hx_argmax_key_index(unsigned long long key) {
    return key ? (int)~(uint32_t)key : 0;
}
// Dynamic shared memory the attention kernel needs for max_ctx positions; sets the kernel attribute.
cudaError_t hx_k_attention_prepare(int hd, int max_ctx, size_t *smem);
