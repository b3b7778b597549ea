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
#include "backend/cuda/dev_opts.h"
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
 * a greedy decode step is one CUDA graph launch plus a 4-byte copy back.
 *
 * A context holds n_seq sequence slots of n_ctx positions each. The public
 * API drives it through the function table hx_backend_cuda (api/backend.h):
 * batches that mix sequences, per-sequence keep / copy / state. The
 * hx_cuda_forward / decode / truncate functions below are the same context
 * used as one sequence (slot 0), for the tools that predate the table. */
typedef struct hx_cuda_ctx hx_cuda_ctx;

typedef struct hx_cuda_opts {
    int device;              /* CUDA ordinal; -1 = 0 */
    int n_ctx;               /* KV positions per sequence; 0 = min(n_ctx_train, 4096) */
    bool no_graph;           /* launch decode kernels one by one instead of replaying a graph */
    const char *dump_dir;    /* per-layer dumps of sequence 0, same format as the CPU path (forward.c); NULL: none */
    const int *dump_positions; int n_dump_positions;
    int n_ubatch;            /* most tokens per internal batch, 0 = 512; sliding-window layers keep
                                window + n_ubatch cache rows (as on the CPU) */
    int n_seq;               /* sequence slots, 0 = 1 */
    const hx_cuda_dev_opts *dev; /* developer switches (dev_opts.h), NULL: production; copied */
    /* Tensor parallelism (tp.cu): this context is rank tp_rank of tp_size and
     * holds that share of every layer (model/shard.h); tp_comm carries the
     * collectives. tp_size 0 or 1: the whole model. */
    int tp_size, tp_rank;
    const struct hx_tp_comm *tp_comm;
    bool tp_mute;            /* a follower rank: no logits or hidden states copied to the host */
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
 * past the kept positions); hx_cuda_finish waits for it. dev->no_ahead turns
 * the lookahead off. (hx_backend_cuda.decode_greedy: the same for any sequence.) */
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
/* Batches in flight: submit stages the batch in slot's pinned buffers, queues
 * the copies, the forward and the copy of its n_seq pooled rows (pooling 1 or
 * 2) back, and returns without waiting; wait blocks until that slot's batch is
 * done and points *rows at its n_seq x n_embd floats (valid until the slot is
 * submitted again). Submitting to a slot still in flight waits for it first.
 * hx_cuda_bert_encode uses slot 0. */
#define HX_CUDA_BERT_SLOTS 3
hx_status hx_cuda_bert_submit(hx_cuda_bert *b, int slot, const int32_t *ids, const int *lens, int n_seq,
                              int pooling, bool normalize, hx_error *e);
hx_status hx_cuda_bert_wait(hx_cuda_bert *b, int slot, const float **rows, hx_error *e);

/* Whether one-token decode steps of this context run every layer in the
 * persistent kernel (backend/cuda/mega.h); when not, *why (if why is not NULL)
 * says why (also logged at info level when the context is made). */
bool hx_cuda_persistent(const hx_cuda_ctx *c, const char **why);

/* Whether the GPU kernels handle weights of this type. */
bool hx_cuda_type_supported(int type);

/* The self-checks and device measurements (hx_cuda_*_check,
 * hx_cuda_copy_bandwidth, hx_cuda_dev_opts_from_env) are declared in
 * checks/checks.h, included at the end of this header for the tools that
 * found them here; they are defined in helix_cuda_checks, which only tools and
 * tests link. */

#ifdef __cplusplus
}
#endif
#include "backend/cuda/checks/checks.h"
#endif
