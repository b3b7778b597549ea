/* api.h — internal state behind the public handles of helix.h: what an
 * hx_model carries besides its weights (hx_model_api), and hx_context. */
#ifndef HX_API_API_H
#define HX_API_API_H

#include "api/backend.h"
#include "model/model.h"
#include "tok/chat.h"
#include "tok/tok.h"

struct hx_model_api {
    hx_tok *tok;            /* NULL when the file has no usable tokenizer */
    char *chat_template;    /* the file's template text, or NULL */
    hx_chat_kind chat_kind; /* the family hx_chat_apply renders (fallback by architecture) */
    hx_device device;       /* HX_DEVICE_CPU or HX_DEVICE_CUDA */
    int gpu_index;
    int tp;                 /* tensor parallelism: GPUs per context (1: one) */
    int layer_split;        /* pipeline parts per context (api/pipe.c; 1: none) */
    char device_note[256];
    char fingerprint[320];
    char type_name[16];
    uint64_t n_params, size_bytes;
    hx_progress_fn progress;
    void *progress_user;
};

struct hx_context {
    hx_model *m;
    const hx_backend *be;
    void *bctx;
    hx_context_params p;
    int n_seq, n_ctx_seq, n_vocab, n_embd;
    int *kv_rows;           /* per layer, for the sliding-window rewind check */
    int *seq_len;           /* positions each sequence holds */
    int32_t *seq_tok;       /* n_seq * n_ctx_seq: the ids each sequence holds */
    /* paged KV (backend.h's KV layout; page 0: slots): the pool's free pages
     * and each sequence's page table, handed to the backend by kv_map */
    int page, n_pages, max_pg, n_free;
    int32_t *free_pg;       /* n_pages: ids of the free pages, a stack of n_free */
    int32_t *seq_pg;        /* n_seq * max_pg: each sequence's pages in position order */
    int *seq_npg;           /* pages each sequence holds */
    /* outputs of the last hx_decode */
    float *logits, *hidden; /* rows of n_vocab / n_embd, one per token that asked */
    size_t out_cap;         /* rows allocated */
    int32_t *row_of;        /* n_batch: output row of batch token i, -1 none */
    int n_last, last_row;   /* batch size of the last decode; row of the last token that asked */
    bool deferred;          /* the last decode's logits rows are on the device (hx_ubatch.defer_logits) */
    uint8_t *fetched;       /* out_cap: row copied to logits since (deferred only) */
    /* scratch for ubatches and the decode checks */
    int32_t *ub_out;
    int *first_pos, *next_pos, *orig_len;
    /* LoRA adapters applied (hx_context_set_adapters), one reference each */
    struct hx_adapter **adapters;
    float *adapter_scales;
    int n_adapters;
};

/* Releases the context's adapters (adapter.c). */
void hx_api_drop_adapters(hx_context *c);
/* Tokens of a text as a malloc'ed array (hx_tokenize without the cap dance). */
hx_status hx_api_tokenize(const hx_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                          int32_t **ids, int *n, hx_error *e);
/* Appends valid UTF-8 of in[0..n) to a growing buffer; an incomplete final
 * character is left in *hold (up to 3 bytes) unless flush. Bytes that never
 * form a character become U+FFFD. */
typedef struct hx_utf8_buf { char *p; size_t n, cap; bool oom; } hx_utf8_buf;
void hx_utf8_push(hx_utf8_buf *b, unsigned char *hold, int *n_hold, const char *in, size_t n, bool flush);

#endif
