/* helix.h — the public interface of libhelix.
 *
 * libhelix is a local LLM engine in plain C: GGUF models (mmap, zero-copy) and
 * Hugging Face folders, every common quant format, tokenizers, decoder LLMs
 * (llama, qwen2, qwen3, gemma3) and BERT encoders, on the CPU and (optionally)
 * CUDA. This header is the only one a program needs.
 *
 * Conventions
 *   - Every function that can fail returns an hx_status and fills the hx_error
 *     it is given (may be NULL) with a message naming the file, offset, field
 *     or argument at fault. Nothing in the library calls exit() or abort().
 *   - Objects are opaque handles made by *_open / *_new and released by the
 *     matching *_free (NULL is accepted). Strings and arrays the library
 *     returns through a `char **` / `T **` out-parameter are malloc'ed: release
 *     them with hx_free. `const` pointers returned by getters belong to the
 *     object and live as long as it (or until the next call that says so).
 *   - Threads: an hx_model is read-only after loading and may be shared by
 *     contexts on several threads. An hx_context, hx_sampler, hx_detok and
 *     hx_embedder must be used by one thread at a time. The only global state is
 *     the log level.
 *
 * A complete program (greedy text from a prompt, streamed to stdout):
 *
 *     #include <helix.h>
 *     #include <stdio.h>
 *
 *     static bool print_text(const char *text, size_t len, void *user) {
 *         (void)user; fwrite(text, 1, len, stdout); fflush(stdout); return true;
 *     }
 *
 *     int main(int argc, char **argv) {
 *         if (argc < 3) { fprintf(stderr, "usage: %s MODEL PROMPT\n", argv[0]); return 2; }
 *         hx_error err;
 *         hx_model *model = NULL;
 *         hx_context *ctx = NULL;
 *         hx_model_params mp = hx_model_default_params();
 *         if (hx_model_open(argv[1], &mp, &model, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
 *         hx_context_params cp = hx_context_default_params();
 *         if (hx_context_new(model, &cp, &ctx, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
 *         hx_generate_params gp = hx_generate_default_params();
 *         gp.prompt = argv[2];
 *         gp.max_tokens = 64;
 *         gp.on_text = print_text;
 *         hx_generate_result res;
 *         if (hx_generate(ctx, &gp, &res, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
 *         printf("\n%d tokens, %.1f tokens/s\n", res.metrics.gen_tokens, res.metrics.decode_tok_per_s);
 *         hx_generate_result_free(&res);
 *         hx_context_free(ctx);
 *         hx_model_free(model);
 *         return 0;
 *     }
 *
 * Lower level: tokenize with hx_tokenize, fill an hx_batch with tokens of one
 * or several sequences, run hx_decode, read hx_get_logits, pick tokens with an
 * hx_sampler, turn them into text with an hx_detok. See "Many sequences".
 */
#ifndef HELIX_H
#define HELIX_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HX_VERSION "0.2.0"

/* ======================================================================== */
/* Errors                                                                   */
/* ======================================================================== */

typedef enum hx_status {
    HX_OK = 0,
    HX_ERR_IO,          /* open/read/write/mmap failed */
    HX_ERR_FORMAT,      /* malformed or hostile file contents */
    HX_ERR_NOMEM,       /* allocation failed or a size overflowed */
    HX_ERR_ARG,         /* bad argument from the caller */
    HX_ERR_UNSUPPORTED, /* valid input we do not handle (yet) */
    HX_ERR_RANGE,       /* context or KV cache full, index out of range, buffer too small */
    HX_ERR_DEVICE,      /* GPU / driver problem */
    HX_ERR_CANCELLED,   /* stopped by a progress callback or a cancel flag */
    HX_ERR_KV_FULL,     /* the context's shared KV pool has no free page (hx_decode): nothing was
                           written; retry after other sequences give pages back */
} hx_status;

/* Filled by failing calls. msg is always NUL-terminated. */
typedef struct hx_error {
    hx_status status;
    char msg[512];
} hx_error;

const char *hx_status_str(hx_status s);

/* Log level: 0 quiet, 1 errors+warnings (default), 2 info, 3 debug.
 * The only global mutable state in the library. Messages go to stderr. */
void hx_set_log_level(int level);
int  hx_log_level(void);

/* Release memory the library returned through an out-parameter. */
void hx_free(void *p);

/* ======================================================================== */
/* Models                                                                   */
/* ======================================================================== */

typedef struct hx_model hx_model;

typedef enum hx_device {
    HX_DEVICE_AUTO = 0, /* CUDA when this build has it and a GPU is usable, else the CPU */
    HX_DEVICE_CPU,
    HX_DEVICE_CUDA,     /* fails with HX_ERR_DEVICE / HX_ERR_UNSUPPORTED and the reason instead of falling back */
} hx_device;

/* Called during loading with the fraction done (0..1); return false to cancel
 * (hx_model_open then fails with HX_ERR_CANCELLED). hx_model_open reports
 * reading the weights (one call per 16 MB); on CUDA, hx_context_new reports the
 * weight upload through the same callback. */
typedef bool (*hx_progress_fn)(float fraction, void *user);

typedef struct hx_model_params {
    hx_device device;        /* default HX_DEVICE_AUTO */
    int n_gpu_layers;        /* -1 (default): all layers on the GPU when the device is CUDA; 0: CPU.
                                There is no partial offload: 1..n_layer-1 is HX_ERR_UNSUPPORTED. */
    int gpu_index;           /* CUDA device ordinal, default 0 */
    int tensor_parallel;     /* GPUs that share every layer, from gpu_index on (tensor parallelism over NCCL:
                                each holds its part of the heads, the FFN and the vocabulary); default 1.
                                n must divide the heads, KV heads and FFN size; needs libnccl.so.2 */
    const char *quantize;    /* Hugging Face folders only: NULL (default, weights as stored), "q8_0" or
                                "q4_k_m": quantize on load */
    hx_progress_fn progress; /* NULL: none */
    void *progress_user;
    int layer_split;         /* GPUs from gpu_index on that each hold a contiguous range of the layers and their
                                KV cache (a pipeline: llama.cpp's --split-mode layer); 0 or 1 (default): none.
                                For a model too large for one GPU whose heads tensor_parallel cannot cut: the
                                parts run one after the other (N GPUs hold N times the weights; no speed-up).
                                tensor_parallel N that cannot cut the model falls back to this over N GPUs (with
                                a warning). With device HX_DEVICE_CPU the parts are CPU contexts (a test of the
                                split). Not combined with tensor_parallel or LoRA adapters. The GPUs are
                                checked by hx_context_new. */
} hx_model_params;

hx_model_params hx_model_default_params(void);

/* path: a .gguf file, or a Hugging Face folder (config.json, model.safetensors
 * or model.safetensors.index.json + shards, tokenizer.json and
 * tokenizer_config.json; llama, qwen2, qwen3, gemma3 and bert). Decoders get
 * their tokenizer and chat template from the same place. */
hx_status hx_model_open(const char *path, const hx_model_params *p, hx_model **out, hx_error *e);
void hx_model_free(hx_model *m);

/* Metadata. */
const char *hx_model_arch(const hx_model *m);        /* "llama", "qwen2", "qwen3", "gemma3", "bert" */
const char *hx_model_name(const hx_model *m);        /* general.name or the folder name; "" if none */
bool hx_model_is_encoder(const hx_model *m);         /* bert: use hx_embedder, not contexts */
int  hx_model_n_ctx_train(const hx_model *m);
int  hx_model_n_vocab(const hx_model *m);
int  hx_model_n_embd(const hx_model *m);
int  hx_model_n_layer(const hx_model *m);
int  hx_model_n_head(const hx_model *m);
int  hx_model_n_head_kv(const hx_model *m);
uint64_t hx_model_n_params(const hx_model *m);
uint64_t hx_model_size_bytes(const hx_model *m);     /* bytes of weights as stored */
const char *hx_model_type_name(const hx_model *m);   /* dominant weight type, e.g. "q4_k", "f16", "bf16" */
hx_device hx_model_device(const hx_model *m);        /* HX_DEVICE_CPU or HX_DEVICE_CUDA: where contexts run */
/* Why AUTO chose the CPU ("no CUDA device: ..."), "" when it did not fall back. */
const char *hx_model_device_note(const hx_model *m);
/* The chat template text the file carries, or NULL. */
const char *hx_model_chat_template(const hx_model *m);
/* A string that changes when the model changes (path, size, mtime, shape): for caches. */
const char *hx_model_fingerprint(const hx_model *m);

/* ======================================================================== */
/* Tokens and text                                                          */
/* ======================================================================== */

/* Special tokens; -1 when the vocabulary has none. */
int32_t hx_token_bos(const hx_model *m);
int32_t hx_token_eos(const hx_model *m);
int32_t hx_token_eot(const hx_model *m);   /* end of turn (<|im_end|>, <|eot_id|>, <end_of_turn>) */
bool    hx_token_is_eog(const hx_model *m, int32_t t);   /* generation stops here (EOS, EOT, ...) */
/* Whether tokenizing adds BOS when add_special is true. */
bool    hx_model_adds_bos(const hx_model *m);

/* Text (len bytes; len < 0: NUL-terminated) -> ids[0..*n_out). add_special:
 * BOS/EOS as the model asks; parse_special: special-token text in the input
 * ("<|im_start|>") becomes its id instead of plain text. When cap is too small
 * nothing is guaranteed in ids, *n_out gets the count needed and the call
 * returns HX_ERR_RANGE. */
hx_status hx_tokenize(const hx_model *m, const char *text, ptrdiff_t len, bool add_special, bool parse_special,
                      int32_t *ids, int cap, int *n_out, hx_error *e);
/* The bytes of one token (not necessarily valid UTF-8 alone: byte tokens and
 * pieces of multi-byte characters). special: control tokens render as their
 * text ("<|im_end|>"), else as nothing. Returns the byte count, which may
 * exceed cap (then the output is cut); -1 for an id out of range. */
int hx_token_to_piece(const hx_model *m, int32_t t, char *buf, int cap, bool special);
/* Ids -> text, always valid UTF-8: bytes that never form a character become
 * U+FFFD. *out is malloc'ed (hx_free). */
hx_status hx_detokenize(const hx_model *m, const int32_t *ids, int n, bool special, char **out, hx_error *e);

/* Streaming detokenizer: push tokens one at a time, get text as soon as it is
 * complete UTF-8 (an incomplete character is held back until it completes;
 * bytes that cannot complete one become U+FFFD). */
typedef struct hx_detok hx_detok;
hx_detok *hx_detok_new(const hx_model *m, bool special);   /* NULL when out of memory */
void hx_detok_free(hx_detok *d);
/* Text released by token t (NUL-terminated, valid UTF-8, possibly ""); owned by
 * d, valid until the next call on d. */
const char *hx_detok_push(hx_detok *d, int32_t t);
/* Whatever is held back (as U+FFFD), then reset. */
const char *hx_detok_flush(hx_detok *d);

/* Chat templates. role: "system", "user" or "assistant". */
typedef struct hx_chat_message {
    const char *role;
    const char *content;
} hx_chat_message;
/* Render messages as prompt text with the model's chat template (the family
 * its tokenizer.chat_template names: ChatML, Llama 3, Gemma, Llama 2), or,
 * when the file carries none, the family of its architecture (gemma3 ->
 * Gemma, qwen2/qwen3 -> ChatML, llama with a <|eot_id|> token -> Llama 3).
 * add_assistant opens the assistant's turn. BOS is not included (tokenize
 * with add_special adds it). *out is malloc'ed (hx_free). */
hx_status hx_chat_apply(const hx_model *m, const hx_chat_message *msgs, int n, bool add_assistant, char **out,
                        hx_error *e);
/* Name of the template family hx_chat_apply uses: "chatml", "llama3", "gemma", "llama2". */
const char *hx_chat_template_name(const hx_model *m);

/* ======================================================================== */
/* Contexts: a KV cache shared by up to n_seq_max sequences                 */
/* ======================================================================== */
/* With more than one sequence (n_seq_max > 1) on the CPU, the cache is a pool
 * of n_ctx positions cut into pages of hx_context_kv_page positions; each
 * sequence takes pages as it grows, up to n_ctx_seq positions, and gives them
 * back when it is kept shorter, cleared or overwritten by a copy or a load.
 * Short and long sequences share the pool: one may hold almost all of it. A
 * decode that needs a page when none is free fails with HX_ERR_KV_FULL and
 * changes nothing. Elsewhere (one sequence, kv_slots, CUDA, tensor
 * parallelism, layer split) n_ctx is split into n_seq_max fixed slots of
 * n_ctx / n_seq_max positions. Sliding-window layers keep a small ring per
 * sequence either way. */

typedef struct hx_context hx_context;

typedef struct hx_context_params {
    int n_ctx;       /* KV positions in all (the pool, or n_ctx / n_seq_max per slot);
                        0 (default): n_seq_max * min(n_ctx_train, 4096) */
    int n_seq_max;   /* sequences the cache holds at once (ids 0..n_seq_max-1), default 1 */
    int n_batch;     /* most tokens one hx_decode takes, default 2048 */
    int n_ubatch;    /* tokens per internal forward, default 512 (longer batches run in pieces) */
    int n_threads;   /* CPU threads, 0 (default): all online CPUs */
    bool kv_f32;     /* f32 KV cache (CPU only); default f16 */
    bool exact;      /* CPU: plain f32 arithmetic. Default false: round like llama.cpp's CPU path
                        (f16 activations for f16 weights, its attention order) so greedy tokens match it */
    bool embeddings; /* also keep the final hidden state (after the output norm) of tokens that ask
                        for logits: hx_get_embeddings */
    int n_ctx_seq;   /* paged: the most positions one sequence holds; 0 (default): min(n_ctx,
                        n_ctx_train). Slots: ignored (each holds n_ctx / n_seq_max) */
    bool kv_slots;   /* fixed slots even where pages are possible (default false) */
} hx_context_params;

hx_context_params hx_context_default_params(void);

/* Where the model says (hx_model_device). Fails with HX_ERR_ARG for an
 * encoder model, HX_ERR_NOMEM / HX_ERR_DEVICE when the cache does not fit. */
hx_status hx_context_new(hx_model *m, const hx_context_params *p, hx_context **out, hx_error *e);
void hx_context_free(hx_context *c);
const hx_model *hx_context_model(const hx_context *c);
int hx_context_n_ctx(const hx_context *c);       /* all sequences */
int hx_context_n_ctx_seq(const hx_context *c);   /* positions one sequence can hold */
int hx_context_n_seq_max(const hx_context *c);
size_t hx_context_kv_bytes(const hx_context *c);
/* Positions per KV page; 0 when the cache is split into fixed slots. */
int hx_context_kv_page(const hx_context *c);
/* Positions the cache can still take. Paged: free pages x page size, shared
 * by all sequences (a sequence of n positions holds n / page pages rounded
 * up, so admit new work by pages). Slots: the room left in all slots. */
int hx_context_kv_free(const hx_context *c);

/* ---- Many sequences ----
 * A batch holds tokens of one or more sequences. For each sequence its tokens
 * must be at consecutive positions, in order, the first one at a position no
 * later than the sequence's current length (hx_seq_pos): a lower position
 * drops the cache from there on, as hx_seq_keep does. Every token attends
 * only to its own sequence (and its sliding window). logits[i] != 0 asks for
 * token i's logits (and embedding). */
typedef struct hx_batch {
    int n_tokens;
    int32_t *token;
    int32_t *pos;
    int32_t *seq_id;
    int8_t  *logits;
    int capacity;    /* set by hx_batch_init */
} hx_batch;

/* Storage for up to capacity tokens; n_tokens = 0. capacity 0 on failure. */
hx_batch hx_batch_init(int capacity);
void hx_batch_free(hx_batch *b);
void hx_batch_clear(hx_batch *b);
/* Appends one token; false when the batch is full. */
bool hx_batch_add(hx_batch *b, int32_t token, int32_t pos, int32_t seq_id, bool logits);

/* Run the batch. Tokens are checked first (ids, sequence ids, positions, room
 * in each sequence's cache: HX_ERR_RANGE names the sequence; pages for every
 * new position: HX_ERR_KV_FULL); a failed call leaves the cache as it was
 * before it for every sequence. */
hx_status hx_decode(hx_context *c, const hx_batch *b, hx_error *e);
/* Logits (n_vocab floats) of batch token i of the last hx_decode, or NULL when
 * it did not ask for them (a batch whose logits array is NULL asks for its last
 * token only). Valid until the next hx_decode or sequence change. i = -1: the
 * last token that asked. */
const float *hx_get_logits(hx_context *c, int i);
/* Greedy picks without the logits: ids[j] = hx_argmax of batch token idx[j]'s
 * logits (idx[j] = -1: the last token that asked). On the GPU the rows stay on
 * the device until hx_get_logits asks for one, and this picks there, so a
 * batched greedy step copies n ids instead of n rows of n_vocab floats (at 128
 * sequences of a 152k vocabulary, 78 MB a step). HX_ERR_ARG when a token did
 * not ask for logits. */
hx_status hx_get_argmax(hx_context *c, int n, const int *idx, int32_t *ids, hx_error *e);
/* Log-probabilities without the logits: out[j * k + q] = log softmax(logits
 * of batch token idx[j])[ids[j * k + q]], for n tokens and k ids each (idx[j]
 * = -1: the last token that asked). On the GPU the softmax runs on the device,
 * as hx_get_argmax's pick does, so n * k floats come back instead of n rows
 * (sums in f32 there, in f64 on the host: the two differ in low bits).
 * HX_ERR_ARG when a token did not ask for logits, HX_ERR_RANGE for an id
 * outside the vocabulary. */
hx_status hx_get_logprobs(hx_context *c, int n, const int *idx, int k, const int32_t *ids, float *out, hx_error *e);
/* The final hidden state (n_embd floats) of batch token i, with
 * params.embeddings; NULL otherwise. */
const float *hx_get_embeddings(hx_context *c, int i);

/* One greedy step of one sequence: `token` at its next position (hx_seq_pos),
 * *next = the argmax of the logits there (the lowest id among ties, as
 * hx_argmax). On the GPU the pick is made there and the step after it (*next
 * at the following position) is already running when this returns, so a loop
 * that feeds each *next straight back keeps the GPU busy while the host
 * handles the token (hx_generate's greedy path). Any other call that runs or
 * changes the context (hx_decode, hx_seq_*, another sequence or token here)
 * drops that step unseen: mixing this with hx_decode is always correct. No
 * logits are kept (hx_get_logits returns NULL until the next hx_decode). CPU:
 * the same as a one-token hx_decode and hx_argmax. A failed call leaves the
 * sequence as it was. */
hx_status hx_decode_greedy(hx_context *c, int seq, int32_t token, int32_t *next, hx_error *e);

/* Positions the sequence holds (the next position to decode); 0 for an invalid seq. */
int hx_seq_pos(const hx_context *c, int seq);
/* The token ids the sequence holds (hx_seq_pos of them); owned by c, valid
 * until the next call that changes the sequence. */
const int32_t *hx_seq_tokens(const hx_context *c, int seq);
/* Keep the first n positions of seq, drop the rest. Returns the positions kept:
 * n (the length when n is larger), or 0 when a sliding-window layer no longer
 * holds what position n needs (then the sequence must be decoded again from 0). */
int hx_seq_keep(hx_context *c, int seq, int n);
/* Drop everything of seq. */
void hx_seq_clear(hx_context *c, int seq);
/* dst (cleared first) gets the first n positions of src: a shared prefix
 * computed once (forking, prefix reuse). n <= hx_seq_pos(src). Paged: dst's
 * rows are a copy in pages of its own; HX_ERR_KV_FULL (nothing changed) when
 * the free pages and dst's own are too few. */
hx_status hx_seq_copy(hx_context *c, int src, int dst, int n, hx_error *e);
/* The sequence's cache and tokens to a file (written atomically) and back, for
 * this model (the file records its fingerprint) and a context with room. */
hx_status hx_seq_save(hx_context *c, int seq, const char *path, hx_error *e);
hx_status hx_seq_load(hx_context *c, int seq, const char *path, hx_error *e);

/* ---- LoRA adapters ----
 * An adapter changes the model's projections: W x becomes W x + s * B (A x)
 * with s = scale * alpha / rank (scale alone when the adapter's alpha is 0).
 * Adapted matrices: the layers' attention q/k/v/output and FFN gate/up/down,
 * the output head and the token embeddings. */
typedef struct hx_adapter hx_adapter;
/* path: a llama.cpp GGUF adapter (general.type = adapter, adapter.type = lora)
 * or a PEFT folder (adapter_config.json + adapter_model.safetensors), checked
 * against the model's shapes (HX_ERR_FORMAT names the tensor). */
hx_status hx_adapter_open(hx_model *m, const char *path, hx_adapter **out, hx_error *e);
/* Safe while contexts still apply it: they keep it until they drop it. */
void hx_adapter_free(hx_adapter *a);
int hx_adapter_n_weights(const hx_adapter *a);   /* matrices it adapts */
/* The adapters the context applies from now on, each with its own scale
 * (n = 0: none, the base model). Replaces the previous set; the base is not
 * reloaded. When the set or a scale changes, every sequence is cleared (its
 * cache was computed under the old set). Adapters must be of the context's
 * model. CPU and CUDA contexts (CUDA holds the adapters in f16 on the GPU). */
hx_status hx_context_set_adapters(hx_context *c, hx_adapter *const *adapters, const float *scales, int n, hx_error *e);
/* Writes the adapter as llama.cpp's GGUF adapter (f32 tensors; llama's Q/K
 * rows in llama.cpp's order): a PEFT folder converted. */
hx_status hx_adapter_save(const hx_adapter *a, const char *path, hx_error *e);
/* A copy of the GGUF model base with adapters[i] (GGUF or PEFT) merged into
 * its matrices: W + scales[i] * alpha/r * B A, each adapted matrix summed in
 * f32 and requantized to its type (f32 when f32_out); the rest copied. */
hx_status hx_adapter_merge(const char *base, const char *const *adapters, const float *scales, int n, bool f32_out,
                           const char *out, hx_error *e);

/* ======================================================================== */
/* Sampling                                                                 */
/* ======================================================================== */

typedef struct hx_logit_bias {
    int32_t token;
    float bias;      /* added to the logit; -INFINITY bans the token */
} hx_logit_bias;

/* The chain, in llama.cpp's order: logit bias -> penalties (repeat, frequency,
 * presence over the last penalty_last_n tokens) -> top-k -> top-p -> min-p ->
 * temperature -> seeded draw. temp <= 0 is greedy (argmax after bias and
 * penalties; the lowest id wins ties). */
typedef struct hx_sampler_params {
    float temp;             /* <= 0: greedy */
    int   top_k;            /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float repeat_penalty;   /* 1: off */
    float freq_penalty;     /* 0: off */
    float presence_penalty; /* 0: off */
    int   penalty_last_n;   /* window of recent tokens the penalties look at; 0: off, -1: all */
    uint64_t seed;
    const hx_logit_bias *logit_bias; /* copied by hx_sampler_new */
    int n_logit_bias;
} hx_sampler_params;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, penalties off, last_n 64. */
hx_sampler_params hx_sampler_defaults(void);
/* Greedy: the defaults with temp 0. */
hx_sampler_params hx_sampler_greedy(void);

typedef struct hx_sampler hx_sampler;
/* NULL when out of memory or n_vocab <= 0. */
hx_sampler *hx_sampler_new(const hx_sampler_params *p, int n_vocab);
void hx_sampler_free(hx_sampler *s);
/* Record a token (prompt or generated) in the penalty history. */
void hx_sampler_accept(hx_sampler *s, int32_t token);
/* Forget the history and reseed. */
void hx_sampler_reset(hx_sampler *s);
/* Pick the next token from logits[n_vocab] (left unchanged). Does not accept it. */
int32_t hx_sampler_sample(hx_sampler *s, const float *logits);
/* The same with only the tokens where allowed[t] != 0 (constrained decoding);
 * -1 when none is allowed. */
int32_t hx_sampler_sample_allowed(hx_sampler *s, const float *logits, const uint8_t *allowed);
/* Plain argmax (lowest id wins ties). */
int32_t hx_argmax(const float *x, int n);

/* ======================================================================== */
/* Conveniences: generate, classify                                         */
/* ======================================================================== */

/* Measurements of one call. */
typedef struct hx_metrics {
    int prompt_tokens;        /* tokens prefilled (after reusing a cached prefix) */
    int cached_tokens;        /* prompt tokens reused from the sequence's cache */
    int gen_tokens;
    double prefill_s, decode_s;
    double prefill_tok_per_s, decode_tok_per_s;
    size_t peak_device_bytes; /* GPU memory in use at most during the call (0 on the CPU) */
} hx_metrics;

typedef enum hx_stop_reason {
    HX_STOP_EOG = 0,     /* the model ended its turn */
    HX_STOP_LENGTH,      /* max_tokens */
    HX_STOP_STRING,      /* one of the stop strings (not included in the text) */
    HX_STOP_CONTEXT,     /* the sequence's cache is full (n_ctx_seq, or no free page left in the pool) */
    HX_STOP_CANCELLED,   /* the cancel flag or on_text said stop */
} hx_stop_reason;

typedef struct hx_generate_params {
    /* the prompt: exactly one of these */
    const char *prompt;                 /* text, tokenized with BOS as the model asks, specials parsed */
    const hx_chat_message *messages;    /* rendered by hx_chat_apply with the assistant turn opened */
    int n_messages;
    const int32_t *prompt_ids;          /* exact ids, used as given */
    int n_prompt_ids;

    int seq;                 /* the context's sequence to use (default 0). Its cache is reused for the
                                longest common prefix with the new prompt (multi-turn chat). */
    int max_tokens;          /* default -1: until end of generation or of the sequence's context */
    hx_sampler_params sampling; /* default greedy */
    const char *const *stop; /* stop strings; the text before the first match is returned */
    int n_stop;
    bool ignore_eog;         /* keep going past end-of-generation tokens (benchmarks) */
    /* Streaming: called with each piece of valid UTF-8 as it is complete and
     * cannot be the start of a stop string. Return false to stop. */
    bool (*on_text)(const char *text, size_t len, void *user);
    void *user;
    /* Set to nonzero (from any thread) to stop at the next token. */
    const volatile int *cancel;
} hx_generate_params;

hx_generate_params hx_generate_default_params(void);

typedef struct hx_generate_result {
    char *text;              /* the generated text, valid UTF-8, stop string excluded */
    int32_t *ids;            /* generated ids (n_ids), the end-of-generation token excluded */
    int n_ids;
    int32_t *prompt_ids;     /* the prompt as tokenized (n_prompt_ids) */
    int n_prompt_ids;
    hx_stop_reason stop;
    hx_metrics metrics;
} hx_generate_result;

/* Prompt -> text on one sequence of the context, streamed through on_text. On
 * the GPU greedy decoding and the sampling chain run there (only the token
 * comes back). A failure leaves *r empty (safe to free). */
hx_status hx_generate(hx_context *c, const hx_generate_params *p, hx_generate_result *r, hx_error *e);
void hx_generate_result_free(hx_generate_result *r);

/* Zero-shot classification by prefill only: for each prompt (text, already
 * formatted: apply the chat template first if the model wants one), the
 * probability of each label as the continuation, the label's tokens scored by
 * their summed log-probabilities, normalized over the labels:
 *   probs[i * n_labels + j] = exp(s_ij) / sum_k exp(s_ik),
 *   s_ij = sum_t log p(label_j token t | prompt_i, label_j tokens < t).
 * Labels are tokenized as continuation text (no BOS; a leading space is
 * kept as given). Many prompts run in one batch over the context's sequences
 * (n_seq_max of them at a time); the later tokens of a label of several
 * tokens are decoded after each prompt in its own sequence, which then goes
 * back to the prompt; the sequences' caches are cleared before and after.
 * On the GPU the softmax over the vocabulary runs there (hx_get_logprobs).
 * Shared heads are computed once: the prompts of a batch share their longest
 * common token prefix (less at least each prompt's last token), computed in
 * one sequence and copied into the others, and that sequence keeps its prompt
 * for the next batch, whose head is computed only past what the two share
 * (not with a sliding-window model, whose ring cannot go back). Put what
 * prompts have in common (template, instructions, label list) first and what
 * differs last. The results are those of each prompt alone up to rounding.
 * logprobs (may be NULL): the raw s_ij. metrics (may be NULL): prompt_tokens
 * = tokens computed (shared heads once, each prompt's tail, labels' tokens
 * after their first, and the prompt again where a sliding-window ring cannot
 * go back to its end after a label); cached_tokens = prompt tokens
 * copied from a shared head instead. Their sum is what the prompts would cost
 * one at a time (tokens classified, counted per prompt); prefill_tok_per_s =
 * prompt_tokens / prefill_s. */
hx_status hx_classify(hx_context *c, const char *const *prompts, int n_prompts, const char *const *labels,
                      int n_labels, float *probs, float *logprobs, hx_metrics *metrics, hx_error *e);

/* ======================================================================== */
/* Looking inside: attention                                                */
/* ======================================================================== */
/* hx_inspect_attention runs a prompt once through the CPU decoder in exact f32
 * (hx_context_params.exact, f32 KV cache) with a recording hook on and returns
 * every layer's attention probabilities per head: the very weights the forward
 * multiplies V by, after the causal and sliding-window masks (masked entries
 * are 0). It runs on the CPU whatever hx_model_device says (the weights stay
 * in host memory; the CUDA backend is not used), on a context of its own:
 * the base model with the LoRA adapters of hx_inspect_params (none by
 * default; a context's own adapters are not consulted), applied as an
 * hx_context applies them, so the probabilities, q/k/v/o and logits are the
 * adapted model's.
 *
 * Layout, with L = n_layer layers held (layer0 .. layer0 + L - 1), H = n_head,
 * Hkv = n_head_kv, T = n_tok, d = head_dim, row-major:
 *   probs (L, H, T, T)   probs[((l * H + h) * T + i) * T + j]: how much the
 *                        query at position i attends to the key at j (j <= i)
 *   q     (L, T, H, d)   after QK-norm and RoPE    (these four with want_qkv,
 *   k     (L, T, Hkv, d) after QK-norm and RoPE     else NULL)
 *   v     (L, T, Hkv, d)
 *   o     (L, T, H, d)   probs x v per head: what the output projection takes
 * Head h reads K/V head h / (H / Hkv) (grouped-query attention). */
typedef struct hx_inspect_params {
    int layer;         /* -1 (default): every layer; else only this one (L = 1) */
    bool want_qkv;     /* also return q, k, v and o (default false) */
    int n_threads;     /* 0 (default): all online CPUs */
    hx_adapter *const *adapters; /* n_adapters LoRA adapters opened for this model, */
    const float *adapter_scales; /* each with its scale (hx_context_set_adapters' */
    int n_adapters;              /* meaning); default none */
} hx_inspect_params;

hx_inspect_params hx_inspect_default_params(void);

typedef struct hx_attention {
    int n_tok, n_layer, layer0, n_head, n_head_kv, head_dim;
    float *probs, *q, *k, *v, *o;  /* shapes above; q, k, v, o NULL without want_qkv */
    int *window;       /* (n_layer): sliding window of each held layer (the query at i sees
                          i - window + 1 .. i), 0 = full causal */
    float scale;       /* scores = scale * q . k before the softmax ... */
    float softcap;     /* ... then softcap * tanh(scores / softcap) when softcap > 0 */
    float *logits;     /* (n_vocab): the last token's logits from the same pass */
    int n_vocab;
} hx_attention;

/* ids[0..n): the prompt as token ids (BOS included when wanted: hx_tokenize
 * with add_special). Memory grows as n_layer * n_head * n^2 floats: an
 * allocation that fails or overflows is HX_ERR_NOMEM naming the size. An
 * encoder model is HX_ERR_ARG. A failure leaves *out empty (safe to free). */
hx_status hx_inspect_attention(hx_model *m, const int32_t *ids, int n, const hx_inspect_params *p,
                               hx_attention *out, hx_error *e);
void hx_attention_free(hx_attention *a);

/* ======================================================================== */
/* Threads                                                                  */
/* ======================================================================== */
/* The engine's persistent thread pool (the KB engine and developer tools take
 * one): hx_pool_run splits [0, n_tasks) into tasks handed out to the pool's
 * threads (the caller's included) and returns when all are done. One run at a
 * time per pool. n_threads <= 0: all online CPUs. */
typedef struct hx_pool hx_pool;
typedef void (*hx_pool_fn)(void *ctx, int64_t task, int thread);
hx_pool *hx_pool_create(int n_threads);   /* NULL when out of memory */
void hx_pool_free(hx_pool *p);
int hx_pool_threads(const hx_pool *p);
void hx_pool_run(hx_pool *p, int64_t n_tasks, hx_pool_fn fn, void *ctx);

/* ======================================================================== */
/* Sentence embeddings (BERT encoders: all-MiniLM-L6-v2 and friends)        */
/* ======================================================================== */
/* Texts are WordPiece-tokenized (truncated to max_tokens, default 256), run in
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
/* Sequences per forward pass (0 = as many as fit the token budget, the default:
 * 8192 tokens on the CPU, 32768 on the GPU). */
void hx_embedder_set_batch(hx_embedder *em, int max_seqs);
/* "cpu", "cuda", "cuda:N" (device N) or "auto" (CUDA when this build has it
 * and a GPU is usable). "cuda" fails with HX_ERR_DEVICE / HX_ERR_UNSUPPORTED
 * and the reason. */
hx_status hx_embedder_set_device(hx_embedder *em, const char *device, hx_error *e);
/* "cpu" or "cuda": where hx_embed runs. */
const char *hx_embedder_device(const hx_embedder *em);
/* The number type of the CPU encoder's linear layers: "f32" (the default);
 * "int8": int8 weights per output row (quantized here, once) and uint8
 * activations per token, attention, LayerNorm, GELU and pooling in f32 (on
 * all-MiniLM-L6-v2, cosine >= 0.999 to f32); fast with AVX512-VNNI, slower
 * than f32 without it; "auto": int8 where the CPU has AVX512-VNNI, else f32.
 * The fingerprint names int8. HX_ERR_ARG for another name. */
hx_status hx_embedder_set_type(hx_embedder *em, const char *type, hx_error *e);
/* "f32" or "int8": what hx_embed uses on the CPU. */
const char *hx_embedder_type(const hx_embedder *em);
/* out: n * dim floats, row i = unit vector of texts[i]. */
hx_status hx_embed(hx_embedder *em, const char *const *texts, int n, float *out, hx_error *e);

#ifdef __cplusplus
}
#endif
#endif /* HELIX_H */
