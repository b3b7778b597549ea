/* model.h — architectures as hyper-parameters + flags, and weights bound to
 * GGUF tensors (zero-copy). One recipe covers llama / qwen2 / qwen3 / gemma3
 * decoders; bert is the encoder. Backends read hx_model and run the recipe. */
#ifndef HX_MODEL_H
#define HX_MODEL_H

#include "helix.h"
#include "gguf/gguf.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hx_arch { HX_ARCH_LLAMA, HX_ARCH_QWEN2, HX_ARCH_QWEN3, HX_ARCH_GEMMA3, HX_ARCH_BERT } hx_arch;
typedef enum hx_rope_style { HX_ROPE_NORM /* GGUF llama: adjacent pairs */, HX_ROPE_NEOX /* halves */ } hx_rope_style;
typedef enum hx_act { HX_ACT_SILU, HX_ACT_GELU_TANH, HX_ACT_GELU_ERF } hx_act;

struct hx_tok;
struct hx_hf_store;

#define HX_MAX_LAYERS 256

typedef struct hx_model_config {
    hx_arch arch;
    char arch_name[32];     /* general.architecture */
    char name[128];         /* general.name if present */
    int n_layer;
    int n_embd;             /* hidden size */
    int n_head;
    int n_head_kv;
    int head_dim;           /* key/value length per head (may differ from n_embd/n_head) */
    int n_ff;
    int n_vocab;
    int n_ctx_train;
    float rope_base;        /* global layers */
    float rope_base_swa;    /* sliding-window layers (gemma3), else = rope_base */
    float rope_scale;       /* linear scaling factor, 1 if none */
    float rope_scale_swa;   /* the same for sliding-window layers (gemma3 scales only its global layers: 1 here); <= 0: 1 */
    hx_rope_style rope_style;
    float norm_eps;
    bool norm_is_layernorm; /* bert */
    bool qkv_bias;          /* qwen2, bert */
    bool qk_norm;           /* qwen3, gemma3 */
    bool post_norms;        /* gemma3: post-attention and post-ffn norms */
    bool embd_scale;        /* gemma3: multiply embeddings by sqrt(n_embd) */
    bool norm_add_one;      /* gemma: RMSNorm weight used as (1 + w) — false for GGUF (converter bakes +1) */
    hx_act act;
    bool tied_output;       /* no output.weight: use token_embd */
    int sliding_window;     /* 0 = none */
    int swa_pattern;        /* gemma3: every swa_pattern-th layer (1-based) is global, 0 = none */
    float attn_scale;       /* multiplier for QK^T; 1/sqrt(head_dim) unless metadata says otherwise */
    float final_logit_softcap, attn_logit_softcap; /* 0 = off */
    int pooling;            /* bert: 0 none, 1 mean, 2 cls */
    bool layer_is_swa[HX_MAX_LAYERS];
} hx_model_config;

/* A weight tensor: points into the mapping. */
typedef struct hx_tensor {
    const char *name;
    int type;          /* hx_type */
    int64_t ne[4];     /* ne[0] = row length */
    const void *data;
} hx_tensor;

typedef struct hx_layer_weights {
    hx_tensor attn_norm, attn_norm_b;        /* (n_embd) */
    hx_tensor wq, wk, wv, wo;                /* wq: rows n_head*head_dim of n_embd; wo: rows n_embd of n_head*head_dim */
    hx_tensor bq, bk, bv, bo;                /* biases, data NULL when absent */
    hx_tensor q_norm, k_norm;                /* (head_dim) */
    hx_tensor attn_post_norm, attn_post_norm_b;
    hx_tensor ffn_norm, ffn_norm_b;
    hx_tensor ffn_gate, ffn_up, ffn_down;    /* gate/up: rows n_ff of n_embd; down: rows n_embd of n_ff */
    hx_tensor ffn_up_b, ffn_down_b;
    hx_tensor ffn_post_norm, ffn_post_norm_b;
} hx_layer_weights;

typedef struct hx_model {
    hx_model_config cfg;
    hx_gguf *gguf;                  /* owns the mapping */
    hx_tensor tok_embd;             /* rows n_vocab of n_embd */
    hx_tensor pos_embd, type_embd;  /* bert */
    hx_tensor embd_norm, embd_norm_b; /* bert */
    hx_tensor output_norm, output_norm_b;
    hx_tensor output;               /* = tok_embd when tied */
    hx_layer_weights *layers;       /* n_layer */
    /* a model loaded from a Hugging Face folder owns its safetensors mappings,
     * tensor names and converted tensors (norms shifted by +1, quantize-on-load)
     * here instead of gguf; gguf is NULL then */
    struct hx_hf_store *hf;
    struct hx_model_api *api;       /* hx_model_open: tokenizer, chat template, device (src/api/api.h);
                                       NULL for models loaded by hx_model_load*; freed by hx_model_free */
} hx_model;

/* Frees what hx_model_open attached (src/api). */
void hx_model_api_free(struct hx_model_api *a);

/* Derive the config from GGUF metadata (no tensors needed). */
hx_status hx_model_config_from_gguf(const hx_gguf *g, hx_model_config *cfg, hx_error *e);
/* Open a GGUF and bind every tensor the recipe needs, checking shapes. */
hx_status hx_model_load(const char *path, const hx_gguf_open_opts *opts, hx_model **out, hx_error *e);
void hx_model_free(hx_model *m);

/* KV cache rows for layer l: a sliding-window layer keeps a ring of
 * window + ubatch rows (position t in row t % rows) when that is below n_ctx,
 * enough for every query of a batch of at most ubatch tokens. */
int hx_kv_layer_rows(const hx_model_config *cfg, int l, int n_ctx, int ubatch);
/* True when some layer keeps a ring (kv_rows[l] < n_ctx). */
bool hx_kv_has_ring(const hx_model_config *cfg, const int *kv_rows, int n_ctx);
/* Positions a cache filled up to n_past keeps when rewound to pos (0 <= pos < n_past):
 * pos, or 0 when a ring has overwritten positions the next query needs
 * (pos-window+1 .. pos-1). */
int hx_kv_rewind(const hx_model_config *cfg, const int *kv_rows, int n_ctx, int n_past, int pos);
/* One backend forward over tokens[0..n) at positions pos.. (arguments already checked). */
typedef hx_status (*hx_batch_fn)(void *ctx, const int32_t *tokens, int n, int pos, float *logits, bool all_logits,
                                 hx_error *e);
/* batch() over pieces of at most `piece` tokens (in one call when piece <= 0 or n <= piece);
 * logits of the last token, or of every token (n * n_vocab) with all_logits. */
hx_status hx_forward_pieces(hx_batch_fn batch, void *ctx, int piece, int n_vocab, const int32_t *tokens, int n,
                            int pos, float *logits, bool all_logits, hx_error *e);
/* Options for loading a Hugging Face folder. */
typedef struct hx_hf_opts {
    int quant;   /* 0 = keep the stored F32/F16/BF16; HX_TYPE_Q8_0: matrices to Q8_0; HX_TYPE_Q4_K: llama.cpp's
                    Q4_K_M mix (Q4_K, Q6_K for the output and for attn_v / ffn_down of some layers).
                    Matrices whose rows do not split into the type's blocks fall back to Q8_0, else stay as stored. */
    bool prefault; /* read the mappings in at load (MAP_POPULATE) */
    int n_threads; /* quantize-on-load threads: 0 = all online CPUs, 1 = the calling thread */
    /* progress: called with bytes done / total while tensors are converted or read; NULL = none */
    void (*progress)(void *user, uint64_t done, uint64_t total);
    void *progress_user;
} hx_hf_opts;
/* Load a Hugging Face model folder: config.json + model.safetensors, or sharded
 * model-XXXXX-of-YYYYY.safetensors listed in model.safetensors.index.json.
 * model_type llama, qwen2, qwen3, gemma3_text (and gemma3's text_config), bert.
 * Tensors are used in place where the stored layout is the recipe's: HF's
 * rotary pairs are halves (NEOX), so llama's Q/K rows are not permuted as
 * llama.cpp's converter does; gemma's norms (1 + w) are shifted once at load
 * into owned f32 copies. opts may be NULL (defaults). */
hx_status hx_model_load_hf_ex(const char *dir, const hx_hf_opts *opts, hx_model **out, hx_error *e);
hx_status hx_model_load_hf(const char *dir, hx_model **out, hx_error *e); /* default options */
/* The folder's tokenizer: tokenizer.json (else BERT's vocab.txt, else a
 * SentencePiece tokenizer.model) with tokenizer_config.json's bos/eos tokens, add_bos_token / add_eos_token and
 * chat template (chat_template.jinja when present wins), and
 * generation_config.json's eos ids (a second one becomes the end-of-turn id).
 * *chat_template is malloc'ed (NULL when the folder carries none);
 * chat_template may be NULL. */
hx_status hx_hf_tokenizer_load(const char *dir, struct hx_tok **tok, char **chat_template, hx_error *e);
void hx_hf_store_free(struct hx_hf_store *s);
/* hx_model_load for a .gguf file, hx_model_load_hf for a directory. */
hx_status hx_model_load_any(const char *path, hx_model **out, hx_error *e);
const char *hx_arch_name(hx_arch a);

#ifdef __cplusplus
}
#endif

#endif
