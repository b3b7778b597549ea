/* forward.h — the CPU backend: runs the decoder recipe of hx_model, keeping
 * the KV cache between calls. The public API reaches it through the function
 * table hx_backend_cpu (api/backend.h: many sequences per forward); the calls
 * below drive one sequence (slot 0) for the CLI and the tests. */
#ifndef HX_CPU_FORWARD_H
#define HX_CPU_FORWARD_H

#include "helix.h"
#include "model/model.h"
#include "core/pool.h"

typedef struct hx_cpu_ctx hx_cpu_ctx;

typedef struct hx_cpu_opts {
    int n_ctx;          /* KV cache length in tokens; 0 = min(n_ctx_train, 4096) */
    int kv_type;        /* HX_TYPE_F16 (default when 0) or HX_TYPE_F32 */
    bool kv_f32;        /* f32 KV cache (HX_TYPE_F32 is 0, so kv_type alone cannot ask for it) */
    bool ggml_compat;   /* round like llama.cpp's CPU path for token parity: activations of F16/BF16
                           weights to f16/bf16, and with the f16 cache its flash-attention order
                           (q in f16, online softmax, f16 V accumulator). Off: exact f32 math. */
    int n_threads;      /* 0 = all online CPUs */
    const char *dump_dir;     /* --dump: write per-layer activations here (NULL = off); file format in
                                 forward.c's header comment (shared with the CUDA path) */
    const int *dump_positions; int n_dump_positions; /* which positions to dump (NULL = all) */
    int n_ubatch;       /* most tokens per internal batch, 0 = 512; sliding-window layers keep
                           window + n_ubatch cache rows, and longer batches run in pieces */
    bool attn_per_head; /* (tests) the exact mode's attention by query head, not by kv head */
} hx_cpu_opts;

hx_status hx_cpu_ctx_new(const hx_model *m, const hx_cpu_opts *opts, hx_cpu_ctx **out, hx_error *e);
void hx_cpu_ctx_free(hx_cpu_ctx *c);

/* Run tokens[0..n) at positions pos..pos+n-1 (pos = number of tokens already in
 * the cache). logits: n_vocab floats for the last token, or n * n_vocab when
 * all_logits. A context overflow returns HX_ERR_RANGE with a clear message. */
hx_status hx_cpu_forward(hx_cpu_ctx *c, const int32_t *tokens, int n, int pos,
                         float *logits, bool all_logits, hx_error *e);
/* Forget cache contents from position pos on (for chat history reuse / retries).
 * Returns the number of positions kept: pos, or 0 when a sliding-window ring
 * has already overwritten the window before pos (the caller re-runs from 0). */
int hx_cpu_truncate(hx_cpu_ctx *c, int pos);
int hx_cpu_n_ctx(const hx_cpu_ctx *c);
size_t hx_cpu_kv_bytes(const hx_cpu_ctx *c); /* K and V cache bytes over all layers */
/* Whether the exact mode's attention runs by (token, kv head) with the grouped
 * AVX2 kernels (f16 cache, head size a multiple of 32; off with
 * hx_cpu_opts.attn_per_head). Both give the same bits. */
bool hx_cpu_attn_grouped(const hx_cpu_ctx *c);

#endif
