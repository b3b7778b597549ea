/* helix.h — the public interface of libhelix.
 *
 * libhelix is a local LLM engine in plain C: GGUF models (mmap, zero-copy),
 * every common quant format, tokenizers, decoder LLMs and BERT encoders, on the
 * CPU and (optionally) CUDA. Every function that can fail returns an hx_status
 * and fills an hx_error whose message names the file, offset or field at fault.
 * Nothing in the library calls exit() or abort().
 */
#ifndef HELIX_H
#define HELIX_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HX_VERSION "0.1.0"

typedef enum hx_status {
    HX_OK = 0,
    HX_ERR_IO,          /* open/read/write/mmap failed */
    HX_ERR_FORMAT,      /* malformed or hostile file contents */
    HX_ERR_NOMEM,       /* allocation failed or a size overflowed */
    HX_ERR_ARG,         /* bad argument from the caller */
    HX_ERR_UNSUPPORTED, /* valid input we do not handle (yet) */
    HX_ERR_RANGE,       /* context overflow, index out of range */
    HX_ERR_DEVICE,      /* GPU / driver problem */
} hx_status;

/* Filled by failing calls. msg is always NUL-terminated. */
typedef struct hx_error {
    hx_status status;
    char msg[512];
} hx_error;

const char *hx_status_str(hx_status s);

/* Log level: 0 quiet, 1 errors+warnings (default), 2 info, 3 debug.
 * The only global mutable state in the library. */
void hx_set_log_level(int level);
int  hx_log_level(void);

/* ---- sentence embeddings (BERT encoders: all-MiniLM-L6-v2 and friends) ----
 * Texts are WordPiece-tokenized (truncated to max_tokens, default 256), run in
 * length-sorted batches, mean-pooled over their tokens and L2-normalized. */
typedef struct hx_embedder hx_embedder;
/* path: a BERT .gguf or a Hugging Face folder (config.json + model.safetensors
 * + vocab.txt). n_threads <= 0: all CPUs. */
hx_status hx_embedder_open(const char *path, int n_threads, hx_embedder **out, hx_error *e);
void hx_embedder_free(hx_embedder *em);
int hx_embedder_dim(const hx_embedder *em);
/* A string that changes when the model changes (for caches). */
const char *hx_embedder_fingerprint(const hx_embedder *em);
void hx_embedder_set_max_tokens(hx_embedder *em, int max_tokens);
/* Sequences per forward pass (0 = as many as fit 8192 tokens, the default). */
void hx_embedder_set_batch(hx_embedder *em, int max_seqs);
/* "cpu", "cuda" or "auto" (CUDA when this build has it and a GPU is usable).
 * "cuda" fails with HX_ERR_DEVICE / HX_ERR_UNSUPPORTED and the reason. */
hx_status hx_embedder_set_device(hx_embedder *em, const char *device, hx_error *e);
/* "cpu" or "cuda": where hx_embed runs. */
const char *hx_embedder_device(const hx_embedder *em);
/* out: n * dim floats, row i = unit vector of texts[i]. */
hx_status hx_embed(hx_embedder *em, const char *const *texts, int n, float *out, hx_error *e);

#ifdef __cplusplus
}
#endif
#endif /* HELIX_H */
