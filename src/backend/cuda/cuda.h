/* cuda.h — plain C interface to the CUDA backend (issue 4).
 * Only present in the build when nvcc is found and HX_CUDA=ON (then HX_HAVE_CUDA=1).
 * Every function returns hx_status and fills hx_error; nothing aborts the host. */
#ifndef HX_BACKEND_CUDA_H
#define HX_BACKEND_CUDA_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "helix.h"
#include "model/model.h"
#ifdef __cplusplus
extern "C" {
#endif

/* One usable device, as chosen by hx_cuda_init. */
typedef struct hx_cuda_device {
    int index;                 /* CUDA device ordinal */
    char name[256];            /* e.g. "NVIDIA H100 80GB HBM3" */
    int cc_major, cc_minor;    /* compute capability */
    size_t total_mem;          /* bytes */
    int n_sm;                  /* streaming multiprocessors */
} hx_cuda_device;

/* Number of CUDA devices; 0 with HX_ERR_DEVICE and a clear message when there is
 * no device or no driver (never a crash). */
hx_status hx_cuda_device_count(int *n, hx_error *e);

/* Picks device `index` (-1: device 0), makes it current and fills *dev. */
hx_status hx_cuda_init(int index, hx_cuda_device *dev, hx_error *e);

/* ---- the decoder on the GPU ----
 * Weights are uploaded once, as stored (quantized); every matrix kernel reads
 * them quantized. Hidden state, KV cache (f16) and logits stay on the device;
 * a greedy decode step is one CUDA graph launch plus a 4-byte copy back. */
typedef struct hx_cuda_ctx hx_cuda_ctx;

typedef struct hx_cuda_opts {
    int device;              /* CUDA ordinal; -1 = 0 */
    int n_ctx;               /* KV cache length; 0 = min(n_ctx_train, 4096) */
    bool no_graph;           /* launch decode kernels one by one instead of replaying a graph */
    const char *dump_dir;    /* per-layer dumps, same format as the CPU path (forward.c); NULL = env HX_DUMP */
    const int *dump_positions; int n_dump_positions;
    int n_ubatch;            /* most tokens per internal batch, 0 = 512; sliding-window layers keep
                                window + n_ubatch cache rows (as on the CPU) */
} hx_cuda_opts;

/* Loads the model onto the device. Fails with HX_ERR_DEVICE (no GPU, too little
 * memory) or HX_ERR_UNSUPPORTED (an architecture or weight type the GPU path
 * lacks) and a message saying which. */
hx_status hx_cuda_ctx_new(const hx_model *m, const hx_cuda_opts *o, hx_cuda_ctx **out, hx_error *e);
void hx_cuda_ctx_free(hx_cuda_ctx *c);
/* Same contract as hx_cpu_forward: tokens[0..n) at positions pos..pos+n-1;
 * logits (host) gets n_vocab floats for the last token, or n * n_vocab when
 * all_logits; logits may be NULL (prefill only). */
hx_status hx_cuda_forward(hx_cuda_ctx *c, const int32_t *tokens, int n, int pos, float *logits, bool all_logits,
                          hx_error *e);
/* One decode step with greedy sampling on the GPU: runs `token` at `pos` and
 * returns the argmax of its logits in *next. Uses a CUDA graph (captured on
 * first use) unless no_graph. With the graph it also launches the step after
 * (*next at pos + 1, taken on the device) before it returns: a call with
 * exactly those arguments then only waits for it, so back-to-back greedy steps
 * keep the GPU busy. Any other call drops that step's result (its cache row is
 * past the kept positions); hx_cuda_finish waits for it. HX_CUDA_NO_AHEAD=1
 * turns the lookahead off. */
hx_status hx_cuda_decode_greedy(hx_cuda_ctx *c, int32_t token, int pos, int32_t *next, hx_error *e);
/* Waits for everything enqueued on the context's stream (a greedy lookahead
 * step included), e.g. before timing something else. */
hx_status hx_cuda_finish(hx_cuda_ctx *c, hx_error *e);
/* The sampling chain on the GPU (the parameters of run/sampler.h, passed as
 * plain values so this header needs no sampler): penalties over hist[0..n_hist)
 * -> top-k -> top-p -> min-p -> temperature -> draw with the uniform u (the
 * draw the CPU sampler would make: hx_sampler_draw). Same token as
 * hx_sampler_sample on the same logits. hx_cuda_sample_supported says whether
 * the GPU takes these parameters at all (top-k 1..256, at most 4096 recent
 * tokens, or greedy); even then a rare case (too many ties) can be declined:
 * *on_gpu = false and the step's logits are copied to `logits` for the CPU. */
typedef struct hx_cuda_sample_params {
    float temp; int top_k; float top_p, min_p, repeat_penalty, freq_penalty, presence_penalty;
} hx_cuda_sample_params;
bool hx_cuda_sample_supported(const hx_cuda_sample_params *p, int n_hist);
hx_status hx_cuda_decode_sample(hx_cuda_ctx *c, int32_t token, int pos, const hx_cuda_sample_params *p,
                                const int32_t *hist, int n_hist, float u, int32_t *next, float *logits, bool *on_gpu,
                                hx_error *e);
/* The sampling kernel alone on host logits[V] (gpu-test). */
hx_status hx_cuda_sample_check(int V, const float *logits, const hx_cuda_sample_params *p, const int32_t *hist,
                               int n_hist, float u, int32_t *next, bool *on_gpu, hx_error *e);
/* Forget the cache from pos on; returns the positions kept (0 when a
 * sliding-window ring no longer holds the window before pos). */
int hx_cuda_truncate(hx_cuda_ctx *c, int pos);
int hx_cuda_n_ctx(const hx_cuda_ctx *c);
/* Load statistics: bytes of weights uploaded and seconds taken. */
void hx_cuda_load_stats(const hx_cuda_ctx *c, size_t *bytes, double *seconds);

/* ---- the BERT encoder on the GPU (issue 6) ----
 * Same contract as hx_bert_encode (src/backend/cpu/bert.h): sequences
 * concatenated in ids, lens[i] tokens each; pooling 0 none, 1 mean, 2 CLS;
 * out gets n_seq (or sum(lens) for none) rows of n_embd floats. */
typedef struct hx_cuda_bert hx_cuda_bert;
hx_status hx_cuda_bert_new(const hx_model *m, int device, hx_cuda_bert **out, hx_error *e);
void hx_cuda_bert_free(hx_cuda_bert *b);
hx_status hx_cuda_bert_encode(hx_cuda_bert *b, const int32_t *ids, const int *lens, int n_seq, int pooling,
                              bool normalize, float *out, hx_error *e);

/* ---- measurements and kernel checks (gpu-test, tests) ---- */
/* Device-to-device copy of `bytes`: GB/s counting bytes read plus written, median of reps. */
hx_status hx_cuda_copy_bandwidth(size_t bytes, int reps, double *gbps, hx_error *e);
/* cuBLAS f16 GEMM (m x n x k, f32 accumulate): TFLOP/s, median of reps. */
hx_status hx_cuda_gemm_tflops(int m, int n, int k, int reps, double *tflops, hx_error *e);
/* Y (n, rows) = X (n, cols) W^T on the GPU with the forward's kernels, W given
 * in `type` on the host (rows x row_bytes). Y is poisoned (NaN) before the run.
 * When ms is not NULL, the product is also timed: median milliseconds of reps
 * runs after warm-up, with CUDA events. q8: the decode path with 8-bit
 * activations instead (x quantized on the GPU, dp4a kernel; n must be 1;
 * HX_ERR_UNSUPPORTED for types without it). */
hx_status hx_cuda_linear_check(int type, int rows, int cols, const void *w, int n, const float *x, float *y,
                               bool q8, int reps, double *ms, hx_error *e);
/* Whether the GPU kernels handle weights of this type. */
bool hx_cuda_type_supported(int type);

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
 * per-query kernel's shared memory), window, scale and softcap are used.
 * Same kernel choice as the forward (HX_CUDA_ATT_TC, HX_CUDA_NAIVE_ATTN). */
hx_status hx_cuda_attn_prefill_check(const hx_cuda_attn_case *c, int n, const float *q, const uint16_t *kc,
                                     const uint16_t *vc, float *out, hx_error *e);

#ifdef __cplusplus
}
#endif
#endif
