/* helix_dev.h — developer interface of libhelix, for tools and tests.
 *
 * What a program needs for generation, classification and embeddings is in
 * helix.h; this header adds what helix-bg's developer commands (synth, bench,
 * generate --dump) need and a user program does not: per-layer dumps,
 * random-weight models of real architectures, and measurement helpers. It is
 * less stable than helix.h: names may change with the tools that use them.
 * Same conventions as helix.h (errors as values, hx_free for returned
 * memory). */
#ifndef HELIX_DEV_H
#define HELIX_DEV_H

#include "helix.h"

struct hx_cuda_dev_opts; /* the CUDA switches; their fields are the backend's (src/backend/cuda/dev_opts.h) */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Contexts with developer options ---- */

typedef struct hx_dev_context_params {
    /* Per-layer activations of sequence 0 written to this folder, one file per
     * layer and tensor (the format is described in backend/cpu/forward.c and
     * read by bench/compare_dumps.py); NULL: none. */
    const char *dump_dir;
    const int *dump_positions; /* positions to dump, NULL: all */
    int n_dump_positions;
    /* The CUDA backend's measurement and experiment switches (the HX_CUDA_*
     * variables, from hx_dev_cuda_opts_from_env); NULL: the production path.
     * Ignored on the CPU. */
    const struct hx_cuda_dev_opts *cuda;
    /* A model opened with layer_split: every part on gpu_index instead of one
     * GPU each (tests of the split on a machine of one GPU). */
    bool split_one_gpu;
} hx_dev_context_params;

/* The HX_CUDA_* switches set in the environment (README, "CUDA knobs"), read
 * once: *out points to them for the rest of the process, or is NULL when none
 * is set or the build has no CUDA. A value that does not parse is HX_ERR_ARG
 * naming the variable. The library itself never reads the environment. */
hx_status hx_dev_cuda_opts_from_env(const struct hx_cuda_dev_opts **out, hx_error *e);

/* hx_context_new with developer options (dp may be NULL: as hx_context_new). */
hx_status hx_dev_context_new(hx_model *m, const hx_context_params *p, const hx_dev_context_params *dp,
                             hx_context **out, hx_error *e);

/* ---- Tokenizers alone ---- */

/* A model handle that holds only a tokenizer, read from a tokenizer.json,
 * tokenizer.model (SentencePiece) or vocab.txt (WordPiece) file, or from a
 * .gguf's tokenizer.* keys: hx_tokenize, hx_token_to_piece, hx_detokenize and
 * the hx_token_* getters work on it; hx_context_new fails with HX_ERR_ARG.
 * Release with hx_model_free. */
hx_status hx_dev_tokenizer_open(const char *path, hx_model **out, hx_error *e);

/* ---- GGUF inspection (helix-bg load-model) ---- */

/* A GGUF file's metadata (long arrays and strings summarized), tensor
 * inventory (name, type, shape, bytes), weight types by bytes and the model
 * config derived from it (or why none could be), as text or, with json, one
 * JSON object. A model helix cannot run still gets its inventory. prefault:
 * read every page while opening (the open time is reported). *out is
 * malloc'ed (hx_free). */
hx_status hx_dev_gguf_describe(const char *path, bool json, bool prefault, char **out, hx_error *e);

/* ---- Model facts for benchmarks ---- */

/* Bytes of weights one decode step reads: every tensor except the token
 * embedding (a row lookup), which counts when it doubles as the output. */
uint64_t hx_dev_model_decode_bytes(const hx_model *m);
/* How the model's contexts use several GPUs, as hx_model_open settled it
 * (tensor_parallel may have fallen back to layer_split): *tp and
 * *layer_split, each 1 when not used. */
void hx_dev_model_split(const hx_model *m, int *tp, int *layer_split);
/* The llama.cpp file-type name of general.file_type ("q4_k_m", "q8_0"), else
 * the dominant weight type in lower case. Owned by m. */
const char *hx_dev_model_mix(const hx_model *m);

/* ---- Random-weight models (helix-bg synth, bench --synth) ---- */

/* Preset names ("qwen3-0.6b", ...) and weight mixes ("f32", "q4_k_m", ...):
 * the i-th, NULL past the end. */
const char *hx_dev_synth_preset(int i);
const char *hx_dev_synth_mix(int i);

typedef struct hx_dev_synth_params {
    const char *preset;      /* a name from hx_dev_synth_preset */
    const char *mix;         /* a name from hx_dev_synth_mix */
    uint64_t seed;
    int n_layer;             /* 0: the preset's */
    int n_vocab;             /* 0: the preset's; ignored with a tokenizer */
    const char *tokenizer;   /* NULL: synthetic; else a .gguf or tokenizer.json to take it from */
    int n_threads;           /* 0: all CPUs */
    bool progress;           /* per-tensor progress on stderr */
} hx_dev_synth_params;

/* Writes a GGUF with the preset's exact shapes and N(0, sigma) weights (the
 * same file for any thread count), atomically. Unknown preset or mix:
 * HX_ERR_ARG naming it. */
hx_status hx_dev_synth_write(const hx_dev_synth_params *p, const char *path, hx_error *e);

/* ---- CPU kernels (helix-bg cpu-test) ----
 * The engine's own functions where their signatures need nothing private
 * (declared again here; src/api/dev.c includes both declarations, so the
 * compiler keeps them equal), wrappers where they do. */

/* Weight types: llama.cpp's names ("Q4_K", "F16"; case-insensitive on input). */
int hx_type_from_name(const char *name);     /* -1 if unknown */
const char *hx_type_name(int type);          /* "?" for unknown */
size_t hx_row_size(int type, int64_t n);     /* bytes of n values; 0 when n is not a multiple of the block */
/* One row of n floats to `type` (byte-exact with llama-quantize); bytes written, 0 if unsupported. */
size_t hx_quantize_row(int type, const float *src, void *dst, int64_t n);
/* The kernel level the CPU dot products use now ("scalar", "avx2", "avx512", ...). */
const char *hx_dev_cpu_isa(void);
/* Kernel levels as numbers (scalar < avx2 < avx512 < avx512vnni): the current
 * one, AVX2's, a level's name; hx_dev_isa_set lowers or restores the level
 * (never above what the CPU has) for the whole process. */
int hx_dev_isa_level(void);
int hx_dev_isa_avx2_level(void);
const char *hx_dev_isa_level_name(int level);
void hx_dev_isa_set(int level);
/* The lowest level whose matvec kernels for `type` are `level`'s (the same code:
 * cpu-test does not flag such a level slower); `level` when it has its own; -1 if bad. */
int hx_isa_matvec_same_as(int type, int level);

/* hx_pool (the thread pool the kernel functions take) is in helix.h. */

/* A weight matrix as stored: rows of cols values of type, row-major. */
typedef struct hx_dev_matrix {
    int type;
    int64_t rows, cols;
    const void *data;
} hx_dev_matrix;
/* y (rows) = W x (cols) with the forward pass's kernels (x quantized once to
 * the type's dot type, as ggml does). pool may be NULL (one thread). */
hx_status hx_dev_matvec(hx_pool *pool, const hx_dev_matrix *W, const float *x, float *y, hx_error *e);
/* Y (n, rows) = X (n, cols) W^T, row-major. */
hx_status hx_dev_matmul(hx_pool *pool, const hx_dev_matrix *W, const float *X, int64_t n, float *Y, hx_error *e);
/* count (1..4) matrices of one row length and dot type on the same X in one
 * pool run (q/k/v, gate/up); Ys[m] is (n, rows of Ws[m]). */
hx_status hx_dev_matmul_multi(hx_pool *pool, int count, const hx_dev_matrix *const *Ws, const float *X, int64_t n,
                              float *const *Ys, hx_error *e);

/* ---- GPU facts for benchmarks ---- */

/* The name of CUDA device `index` into buf ("NVIDIA H100 80GB HBM3");
 * HX_ERR_UNSUPPORTED without CUDA, HX_ERR_DEVICE without a usable GPU. */
hx_status hx_dev_cuda_device_name(int index, char *buf, size_t cap, hx_error *e);
/* Device-to-device copy bandwidth in GB/s (bytes read + written), best of
 * reps copies of `bytes`: the ceiling a decode step's weight reads approach. */
hx_status hx_dev_cuda_copy_bandwidth(size_t bytes, int reps, double *gbps, hx_error *e);

#ifdef __cplusplus
}
#endif
#endif /* HELIX_DEV_H */
