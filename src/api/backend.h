/* backend.h — what a public hx_context needs of a backend (CPU, CUDA): one
 * function table per backend. The API layer (src/api/context.c) checks every
 * argument, keeps each sequence's length and tokens, and pieces batches into
 * ubatches of at most n_ubatch tokens; a backend only runs what it is given.
 *
 * KV layout, one of two:
 *  - slots: the cache is split into n_seq slots of n_ctx_seq positions each
 *    (llama-server's --parallel split). Sequence s lives in slot s; a
 *    sliding-window layer keeps a ring of hx_kv_layer_rows(cfg, l, n_ctx_seq,
 *    n_ubatch) rows per slot, as a single-sequence context always did.
 *  - pages (a backend with kv_map, asked for with kv_page > 0): every layer
 *    without a ring holds one pool of kv_pages pages of kv_page positions;
 *    position t of sequence s lives in page table[s][t / kv_page], the table
 *    set by the API layer through kv_map before a forward writes there. The
 *    API layer (api/context.c) owns the free list; n_ctx_seq is then only the
 *    most one sequence may hold. Ring layers keep their slots. */
#ifndef HX_API_BACKEND_H
#define HX_API_BACKEND_H

#include "helix.h"
#include "model/model.h"

/* One internal forward: n tokens (n <= n_ubatch), possibly of several
 * sequences. For each sequence present, its tokens are at consecutive
 * positions in batch order, and the first of them is at the sequence's current
 * length or below (a lower position overwrites from there: the backend's own
 * length for that sequence becomes pos). out[i] >= 0: write token i's logits
 * to logits + out[i] * n_vocab (and, when hidden != NULL, its final-normed
 * hidden state to hidden + out[i] * n_embd); -1: no output for token i. */
typedef struct hx_ubatch {
    int n;
    const int32_t *token;
    const int32_t *pos;
    const int32_t *seq;
    const int32_t *out;
    int n_out;           /* number of i with out[i] >= 0 (rows of logits) */
    /* Only for a backend with logits_get/logits_argmax: the logits rows stay
     * on the device (the host buffer is not written) until logits_get asks
     * for one; hidden states are still written. */
    bool defer_logits;
    /* Pipeline parts (api/pipe.c; NULL in every other use): embd_in (n,
     * n_embd) f32 is the residual stream entering the model's first layer in
     * place of the token embedding (token ids are still given and valid);
     * embd_out (n, n_embd) f32 receives the residual stream after the last
     * layer for every token, and then nothing else is written (no final norm,
     * logits or hidden states: out and n_out are only checked). */
    const float *embd_in;
    float *embd_out;
} hx_ubatch;

/* Developer options (tools and tests only: helix_dev.h), never read from the
 * environment by the library. */
typedef struct hx_backend_dev {
    const char *dump_dir;          /* per-layer dumps of sequence 0 (format: backend/cpu/forward.c) */
    const int *dump_positions;     /* NULL: all */
    int n_dump_positions;
    const void *cuda;              /* const hx_cuda_dev_opts * (backend/cuda/dev_opts.h), NULL: production */
    bool split_one_gpu;            /* layer_split: every part on gpu_index (tests of the split on one GPU) */
} hx_backend_dev;

typedef struct hx_backend_params {
    int n_seq;            /* sequence slots */
    int n_ctx_seq;        /* positions per slot (with pages: the most one sequence holds) */
    int n_ubatch;         /* most tokens per forward */
    int n_threads;        /* CPU threads, 0 = all */
    bool kv_f32;          /* CPU only */
    bool exact;           /* CPU: plain f32; false = llama.cpp's rounding (ggml_compat) */
    int gpu_index;        /* CUDA ordinal (the first, with tp > 1) */
    int tp;               /* tensor parallelism: GPUs gpu_index.. that share every layer (hx_backend_cuda_tp);
                             0 or 1: one */
    int layer_split;      /* pipeline: contiguous layer ranges on layer_split child contexts (api/pipe.c),
                             on GPUs gpu_index.. with CUDA; 0 or 1: none */
    hx_progress_fn progress; /* weight upload (CUDA), fraction 0..1; may be NULL; false cancels
                                (ctx_new then fails with HX_ERR_CANCELLED) */
    void *progress_user;
    hx_backend_dev dev;
    int kv_page;          /* positions per KV page, a power of two; 0: slots (see KV layout above) */
    int kv_pages;         /* pages in the pool (kv_page > 0) */
} hx_backend_params;

/* The sampling chain for decode_sample: penalties already neutral when the
 * window is off; hist: the recent tokens (ring order, only counts matter);
 * u: the uniform draw the CPU sampler made (hx_sampler_draw). */
typedef struct hx_backend_sample {
    float temp; int top_k; float top_p, min_p, repeat_penalty, freq_penalty, presence_penalty;
    const int32_t *hist;
    int n_hist;
    float u;
} hx_backend_sample;

typedef struct hx_backend {
    const char *name;     /* "cpu", "cuda" */
    hx_status (*ctx_new)(const hx_model *m, const hx_backend_params *p, void **out, hx_error *e);
    void (*ctx_free)(void *ctx);
    hx_status (*forward)(void *ctx, const hx_ubatch *ub, float *logits, float *hidden, hx_error *e);
    /* Keep the first n positions of seq (n <= its length). Returns the positions
     * kept: n, or 0 when a sliding-window ring no longer holds what position n
     * needs (hx_kv_rewind). */
    int (*seq_keep)(void *ctx, int seq, int n);
    /* Slot dst gets the first n positions of slot src (dst's length becomes n). */
    hx_status (*seq_copy)(void *ctx, int src, int dst, int n, hx_error *e);
    /* A slot's first n positions as bytes (hx_seq_save): size_t needed when buf
     * is NULL; seq_write puts them back (dst's length becomes n). */
    size_t (*seq_state_size)(void *ctx, int n);
    hx_status (*seq_read)(void *ctx, int seq, int n, void *buf, hx_error *e);
    hx_status (*seq_write)(void *ctx, int seq, int n, const void *buf, hx_error *e);
    size_t (*kv_bytes)(void *ctx);
    /* Optional fast paths (NULL when absent): one decode step of `token` at
     * `pos` of seq with the next token chosen on the device. decode_greedy may
     * run ahead (the CUDA lookahead); finish waits for anything in flight. */
    hx_status (*decode_greedy)(void *ctx, int seq, int32_t token, int pos, int32_t *next, hx_error *e);
    hx_status (*finish)(void *ctx, hx_error *e);
    size_t (*device_bytes_in_use)(void *ctx);
    /* Optional (NULL when absent): one decode step of `token` at `pos` of seq
     * with the sampling chain run on the device (hx_sampler's order and
     * draw). *picked false: these settings or this step were declined, and
     * logits (n_vocab, host) hold the step's logits for the caller's sampler. */
    hx_status (*decode_sample)(void *ctx, int seq, int32_t token, int pos, const struct hx_backend_sample *s,
                               int32_t *next, float *logits, bool *picked, hx_error *e);
    /* Optional (NULL: malloc/free): host memory for the logits rows forward
     * writes, e.g. page-locked on CUDA so the copy back runs at full speed
     * (at 128 sequences a step's logits are 78 MB for a 152k vocabulary). */
    void *(*host_alloc)(void *ctx, size_t bytes);
    void (*host_free)(void *ctx, void *p);
    /* Optional, both or neither (NULL: every forward writes its logits): after
     * a forward with defer_logits, logits_get copies output row `row` (n_vocab
     * floats) to host, and logits_argmax gives ids[j] = the argmax (the lowest
     * id among the maxima, as hx_argmax) of output rows rows[0..n) without
     * copying them. Valid until the next forward. At 128 sequences the rows
     * are 78 MB a step for a 152k vocabulary, a third of a decode step. */
    hx_status (*logits_get)(void *ctx, int row, float *host, hx_error *e);
    hx_status (*logits_argmax)(void *ctx, int n, const int *rows, int32_t *ids, hx_error *e);
    /* Optional (NULL: the API computes them on the host from logits_get's
     * rows): out[j * k + q] = the log-softmax of output row rows[j] of the
     * last forward (defer_logits) at ids[j * k + q], ids within the
     * vocabulary; n * k floats come back instead of n rows. */
    hx_status (*logits_logprob)(void *ctx, int n, const int *rows, int k, const int32_t *ids, float *out, hx_error *e);
    /* Optional (NULL: the backend has slots only): sequence seq's page table
     * entries from index page0 on become pages[0..n) (ids < kv_pages). The
     * API layer calls it for pages it hands out, before any forward or
     * seq_copy / seq_write writes positions there. */
    hx_status (*kv_map)(void *ctx, int seq, int page0, int n, const int32_t *pages, hx_error *e);
} hx_backend;

/* LoRA (hx_context_set_adapters): from now on the CPU backend context applies
 * adapters[0..n) (struct hx_adapter, model/lora.h) with their user scales;
 * n = 0 removes them. It copies the list; the API layer holds a reference to
 * each adapter while it is set. Outside the table so that the CUDA table
 * (positional, C++) stays as it is; hx_cuda_set_adapters below is CUDA's. */
hx_status hx_cpu_set_adapters(void *ctx, struct hx_adapter *const *adapters, const float *scales, int n, hx_error *e);

/* Attention inspection (hx_inspect_attention, api/inspect.c): while a probe is
 * set, every CPU forward records what attention does for the tokens of
 * sequence 0 at positions 0..n_tok-1. Arrays are the caller's, zeroed; rows of
 * layer l land at index l - layer0, for layers layer0..layer0+n_layers-1.
 * Only on a context in exact mode (hx_backend_params.exact): the parity mode's
 * online softmax never forms the probabilities (HX_ERR_UNSUPPORTED). NULL
 * removes the probe; while none is set the forward pays one pointer test per
 * layer and per attention task. */
typedef struct hx_attn_probe {
    int n_tok;            /* positions recorded */
    int layer0, n_layers; /* layers recorded */
    float *probs;         /* (n_layers, n_head, n_tok, n_tok): [l][h][query pos][key pos], the weights the
                             forward multiplies V by; entries outside the causal / sliding-window mask
                             are left as they were (zero) */
    float *q, *k, *v;     /* NULL or (n_layers, n_tok, n_head | n_head_kv | n_head_kv, head_dim):
                             q and k after QK-norm and RoPE, v as projected */
    float *o;             /* NULL or (n_layers, n_tok, n_head, head_dim): probs x v per head, the
                             attention output W_o takes */
} hx_attn_probe;
hx_status hx_cpu_set_probe(void *ctx, hx_attn_probe *probe, hx_error *e);

extern const hx_backend hx_backend_cpu;
/* Layer (pipeline) split (api/pipe.c): the model's layers cut into
 * hx_backend_params.layer_split contiguous ranges, each run by a child
 * context of the named backend holding only its layers' weights and KV
 * cache; the residual stream passes from part to part through host memory.
 * The fallback for models that do not fit one GPU when tensor parallelism
 * cannot cut their heads; no fast decode paths, no LoRA adapters. */
extern const hx_backend hx_backend_pipe_cpu;
#ifdef HX_HAVE_CUDA
extern const hx_backend hx_backend_pipe_cuda;
/* Makes GPU `index` the calling thread's current device (each pipeline part
 * calls into its own GPU's context). */
hx_status hx_cuda_select(int index, hx_error *e);
#endif
#ifdef HX_HAVE_CUDA
extern const hx_backend hx_backend_cuda;
/* Tensor parallelism over tp GPUs (backend/cuda/tp.cu): the same contract,
 * every call run on every GPU's share of the model; no LoRA adapters. */
extern const hx_backend hx_backend_cuda_tp;
/* The same for a CUDA backend context (backend/cuda/forward.cu): the
 * adapters go to the device as f16 (lora.cuh); the same list with other
 * scales is applied without uploading it again. */
hx_status hx_cuda_set_adapters(void *ctx, struct hx_adapter *const *adapters, const float *scales, int n, hx_error *e);
#endif

#endif
