/* serve.h — helix-bg serve: an OpenAI-compatible HTTP server on libhelix.
 *
 * Three kinds of thread share one srv (all cross-thread state under srv.mu):
 *
 *   HTTP (libmicrohttpd's polling thread, http.c): reads requests, checks
 *     auth and limits, parses the OpenAI JSON (oai.c), tokenizes (an hx_model
 *     is read-only and may be used from any thread), and hands a srv_req to
 *     the scheduler. Answers cheap routes (/health, /v1/models, /metrics,
 *     /tokenize) itself. A waiting connection is suspended; the scheduler
 *     resumes it when bytes are ready.
 *   scheduler (sched.c): owns the hx_context. Every step it admits queued
 *     requests into free sequence slots (the slot whose cached tokens share
 *     the longest prefix with the prompt), builds one hx_batch of every
 *     running decode plus a chunk of pending prefill, runs hx_decode, samples,
 *     detokenizes and appends SSE chunks or the final body to each request.
 *   embedder (sched.c): owns the BERT hx_embedder for /v1/embeddings.
 *
 * With --kb (kb.c) the HTTP thread also searches the knowledge base: for
 * /v1/kb/search, and for chat requests carrying "kb", whose prompt it grounds
 * in the retrieved entries before the scheduler sees them. The index and the
 * KB's embedder live in srv_kb under a mutex of their own (never srv.mu), so
 * a search never waits for a decode step nor a step for a search; the
 * scheduler never touches them: the entries a request cites are copied into
 * the request (kb_refs) while the lock is held.
 *
 * A srv_req is reference counted: one ref for the HTTP side (dropped when
 * libmicrohttpd says the request is over), one for whichever worker holds it.
 */
#ifndef HX_SERVE_H
#define HX_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "helix.h"
#include "jsongram.h"
#include "util.h"

struct MHD_Connection;
struct MHD_Daemon;

/* ---- configuration (cmd_serve.c fills it from flags) ---- */
typedef struct srv_config {
    const char *host;          /* "127.0.0.1" */
    int port;                  /* 8080; 0: any free port (the log line says which) */
    const char *model_path;    /* -m */
    const char *alias;         /* --alias: the model id clients use; default the file's base name */
    const char *embed_path;    /* -e: BERT model for /v1/embeddings */
    const char *embed_alias;
    char **api_keys;           /* accepted Bearer tokens; none: no auth */
    int n_api_keys;
    const char *cors_origin;   /* NULL: no CORS headers */
    int n_ctx;                 /* -c: KV positions in all (0: library default) */
    int n_ctx_seq;             /* --ctx-seq: most positions of one request (paged pool; 0: library default) */
    int n_parallel;            /* --parallel: sequence slots */
    int n_threads;             /* -t */
    int n_batch;               /* most tokens per hx_decode */
    int prefill_chunk;         /* prompt tokens per step over all prefilling slots (while others decode) */
    double step_target_s;      /* ... fewer when a step would take longer than this */
    hx_device device;
    int tensor_parallel;          /* -tp N: GPUs sharing every layer (1: one) */
    bool split_layer;          /* -sm layer: the -tp N GPUs hold contiguous layers each instead */
    int layer_split;           /* --layer-split N: as -tp N -sm layer (0 or 1: none) */
    size_t max_body;           /* bytes; larger bodies get 413 */
    int max_tokens;            /* ceiling on generated tokens per request (0: the context) */
    int max_prompt;            /* ceiling on prompt tokens (0: the context) */
    int max_queue;             /* requests waiting for a slot; more get 503 */
    bool no_queue;             /* 429 when no slot is free instead of queueing */
    double timeout_s;          /* a request's whole life, queue included */
    int idle_timeout_s;        /* an idle connection is closed after this (slow clients) */
    int max_connections;
    double shutdown_s;         /* SIGTERM: in-flight requests get this long */
    bool decoder_embeddings;   /* mean-pooled hidden states of the chat model on /v1/embeddings */
    const char *kb_dir;        /* --kb: the knowledge base for /v1/kb/search and "kb" chats (NULL: none) */
    const char *kb_embed_path; /* --kb-embed-model: the BERT model the KB was embedded with (NULL: lexical-384) */
    long kb_max_embed;         /* entries missing from the KB's cache embedded per (re)open; the rest: unindexed */
    int verbose;
    char **lora_name, **lora_path; /* --lora NAME=FILE (repeatable): the adapters a request may name */
    int n_lora;
    const char *ssl_cert;      /* --ssl-cert: PEM certificate (chain, the server's first); NULL: plain HTTP */
    const char *ssl_key;       /* --ssl-key: its unencrypted PEM private key (given with ssl_cert or not at all) */
} srv_config;

/* An entry placed in a grounded prompt as [n] (n = index + 1); strings owned. */
typedef struct srv_kb_ref {
    uint64_t id;               /* the entry's id: its byte offset in data.log */
    char *title, *topic;
} srv_kb_ref;

/* ---- one request ---- */
typedef enum { REQ_CHAT, REQ_COMPLETION, REQ_EMBED } req_kind;

typedef enum {
    FIN_NONE = 0,
    FIN_STOP,       /* end of generation or a stop string */
    FIN_LENGTH,     /* max_tokens, the context or the time limit */
    FIN_CANCELLED,  /* client gone or shutdown */
    FIN_ERROR,
} fin_reason;

typedef struct srv_req {
    struct srv *owner;
    int refs;                  /* under srv.mu */
    uint64_t serial;
    req_kind kind;
    bool stream;
    bool include_usage;        /* stream_options.include_usage */
    char id[48];               /* "chatcmpl-..." */
    long created;              /* unix seconds */
    const char *model_id;      /* points into srv */

    /* generation inputs (HTTP thread fills, then read-only) */
    int32_t *prompt;           /* token ids, with BOS as the model asks */
    int n_prompt;
    int max_tokens;            /* >= 1 */
    hx_sampler_params sp;
    hx_logit_bias *bias;       /* sp.logit_bias points here */
    char **stop;               /* stop strings (valid UTF-8, non-empty) */
    int n_stop;
    int logprobs;              /* -1: off; else top_logprobs count (0..20) */
    bool json_mode;            /* response_format json_object / json_schema */
    jg_schema *schema;         /* json_schema: the top-level keys and types enforced (NULL: any object) */
    bool ignore_eog;           /* llama-server's ignore_eos: keep going (benchmarks) */
    int lora;                  /* "lora" / "adapter": 1 + index into cfg.lora_name; 0: the base model */

    /* "kb": the prompt is grounded in these entries; the answer lists those it cites */
    bool kb;
    srv_kb_ref *kb_refs;       /* (n_kb_refs) the entries in the prompt, best first */
    int n_kb_refs;
    int kb_retrieved;          /* hits the search gave (the prompt may hold fewer) */
    bool kb_truncated;         /* the last entry in the prompt was cut to the budget */
    int kb_unindexed;          /* live entries without a vector when it searched */

    /* embedding inputs */
    char **texts;
    int n_texts;
    int32_t **text_ids;        /* decoder embeddings: each text tokenized */
    int *n_text_ids;
    bool emb_base64;
    bool emb_bert;             /* the -e model (else the chat model's hidden states) */

    double t_arrive, deadline; /* hx-style seconds (util_now) */
    double t_first;            /* first token out (0: none yet) */

    /* the HTTP side (under srv.mu) */
    struct MHD_Connection *conn;
    int fd;                    /* the client's socket, polled for hang-up while suspended */
    bool suspended;            /* the connection waits for us; MHD_resume_connection wakes it */
    bool cancelled;            /* client gone: the scheduler frees the slot */
    bool http_done;            /* MHD finished with the request */

    /* output (scheduler appends under srv.mu) */
    sbuf out;                  /* stream: SSE bytes not yet sent; else the final body */
    size_t out_off;            /* bytes of out already handed to MHD */
    bool done;                 /* no more output */
    int status;                /* HTTP status of a non-stream answer */
    fin_reason fin;
    int usage_prompt, usage_cached, usage_gen;
} srv_req;

/* ---- scheduler statistics, under srv.mu (for /metrics) ---- */
typedef struct srv_stats {
    uint64_t requests_total, requests_ok, requests_failed, requests_cancelled, requests_rejected;
    uint64_t prompt_tokens, gen_tokens, cached_tokens, decode_steps, embeddings;
    uint64_t single_steps;     /* of decode_steps: one stream alone, hx_decode_greedy */
    int queue_depth, slots_busy, last_batch_seqs, last_batch_tokens;
    int kv_used;               /* positions held by all sequences (busy and cached) */
    int kv_pages_used;         /* paged pool: pages held (busy and cached) */
    int kv_admit_pages;        /* paged pool: pages a new request could get now (free, idle caches, less what
                                  admitted prompts still need): --no-queue decides on it */
    double tok_per_s;          /* generated tokens per second over the last seconds */
    double busy_s;             /* time spent in hx_decode */
} srv_stats;

typedef struct srv srv;

struct srv {
    srv_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t wake;       /* scheduler: new work or a cancel */
    pthread_cond_t emb_wake;   /* embedder */
    pthread_cond_t idle;       /* shutdown: a request finished */

    /* state */
    volatile int loading;      /* 1 until the model is ready */
    volatile int stopping;     /* SIGTERM: no new requests */
    volatile int quit;         /* workers exit */
    char load_error[600];

    hx_model *model;           /* NULL until loaded */
    hx_adapter **adapters;     /* cfg.n_lora, opened against model */
    char model_id[256];
    hx_embedder *emb;          /* -e */
    hx_model *emb_model;       /* -e opened as a model too, for token counts (may be NULL) */
    char emb_id[256];
    int n_ctx_seq;             /* most positions of one request (a slot's, or its share of the pool) */
    int n_ctx;                 /* KV positions in all */
    int kv_page;               /* positions per KV page; 0: fixed slots */
    int n_vocab;

    struct MHD_Daemon *httpd;
    int port;
    char *tls_cert, *tls_key;  /* PEM text of --ssl-cert / --ssl-key (tls.c), alive as long as httpd */
    size_t tls_key_n;          /* wiped on free */
    volatile int http_starting; /* mhd_log keeps libmicrohttpd's last message in http_err while 1 */
    char http_err[256];

    /* queues (under mu) */
    srv_req **queue;           /* waiting for a slot, FIFO */
    int n_queue, cap_queue;
    srv_req **emb_queue;
    int n_emb_queue, cap_emb_queue;
    int n_active;              /* requests a worker holds (queued or running) */
    int n_http_reqs;           /* connections with a request handed to a worker, not yet closed */
    uint64_t serial;

    srv_stats st;
    double t_start;

    pthread_t sched_thread, emb_thread;
    bool sched_started, emb_started;
    void *sched;               /* sched.c's private state */
    struct srv_kb *kb;         /* --kb (kb.c); NULL: none */
};

/* ---- requests (sched.c) ---- */
srv_req *req_new(srv *s, req_kind kind);
/* Drops a reference (takes srv.mu itself); frees the request at zero. */
void req_unref(srv *s, srv_req *r);
/* Hands the request to a worker. Returns 0, or an HTTP status (429, 503)
 * with *why set when it cannot be taken. Takes one ref on success. */
int srv_submit(srv *s, srv_req *r, const char **why);
/* Appends bytes to r->out and wakes a suspended connection. Caller holds srv.mu. */
void req_emit_locked(srv_req *r, const char *p, size_t n);
/* The connection is gone (MHD callback) or the request otherwise ends. */
void req_cancel(srv *s, srv_req *r);

/* Scheduler and embedder threads (sched.c). srv_sched_start after the model is loaded. */
int srv_sched_start(srv *s, hx_error *e);
void srv_sched_stop(srv *s);
/* Cancels every queued and running request (shutdown deadline). */
void srv_cancel_all(srv *s);

/* ---- HTTP (http.c) ---- */
/* Listens on cfg.host:cfg.port; HTTPS when s->tls_cert is set (srv_tls_load first). */
int srv_http_start(srv *s, hx_error *e);
void srv_http_quiesce(srv *s);
void srv_http_stop(srv *s);

/* ---- TLS (tls.c) ---- */
/* Reads cfg.ssl_cert and cfg.ssl_key into s->tls_cert / tls_key and checks
 * them (each parses, the key is the certificate's); nothing to do without
 * ssl_cert. Fails naming the file when one is missing, unreadable or not
 * what it should be, or when libmicrohttpd has no TLS. */
int srv_tls_load(srv *s, hx_error *e);
void srv_tls_free(srv *s);

/* ---- the knowledge base (kb.c) ---- */
/* Opens cfg.kb_dir with cfg.kb_embed_path's embedder (lexical-384 when NULL);
 * fails, naming both, when the KB's cache was made by another embedder. */
int srv_kb_open(srv *s, hx_error *e);
void srv_kb_free(srv *s);
/* One line for the log: entries, embedder, unindexed. */
void srv_kb_describe(srv *s, char *out, size_t cap);

typedef struct oai_err oai_err;
/* /v1/kb/search's answer object for query (k hits, topic or NULL, mode 0
 * hybrid / 1 semantic / 2 lexical); 0 or an HTTP status with err filled. */
struct cJSON;
int srv_kb_search(srv *s, const char *query, int k, const char *topic, int mode, struct cJSON **out, oai_err *err);
/* Retrieves k entries (topic or NULL) for question and places the best of
 * them, within budget tokens of s->model, into a grounded user message
 * (kb_ask_message; malloc'ed into *msg); r->kb_refs and friends are set. 0 or
 * an HTTP status with err filled. */
int srv_kb_ground(srv *s, const char *question, int k, const char *topic, int budget, srv_req *r, char **msg,
                  oai_err *err);
/* Adds "citations": [{ref, id, title, topic}] (the entries text cites among
 * r->kb_refs, in ref order) and "kb": {retrieved, in_prompt, truncated,
 * bad_citations, unindexed} to obj; counts them for /metrics. */
void srv_kb_cite(srv *s, const srv_req *r, const char *text, size_t len, struct cJSON *obj);
/* Appends the KB's Prometheus counters. */
void srv_kb_metrics(srv *s, sbuf *b);
void srv_kb_refs_free(srv_req *r);

/* ---- OpenAI JSON (oai.c) ---- */
/* An error answer: {"error":{"message","type","code"}}. Returns malloc'ed text. */
char *oai_error_json(const char *message, const char *type, const char *code);
/* The error type OpenAI uses for an HTTP status. */
const char *oai_error_type(int status);

/* Parses a request body for the route into r. On failure returns the HTTP
 * status (400, 404, 413, 501) with msg/code filled; 0 on success. Needs
 * s->model for tokenizing (NULL: parsing only, for the fuzzer). */
struct oai_err {
    char msg[400];
    const char *code;          /* "invalid_request_error" codes, e.g. "context_length_exceeded" */
};
int oai_parse_chat(srv *s, const char *body, size_t len, srv_req *r, oai_err *err);
int oai_parse_completion(srv *s, const char *body, size_t len, srv_req *r, oai_err *err);
int oai_parse_embeddings(srv *s, const char *body, size_t len, srv_req *r, oai_err *err);
/* /tokenize and /detokenize: the whole answer; *status 200 or 400. */
char *oai_tokenize(srv *s, const char *body, size_t len, int *status);
char *oai_detokenize(srv *s, const char *body, size_t len, int *status);
char *oai_models(srv *s);
char *oai_model_one(srv *s, const char *id);   /* NULL: no such model */
char *oai_metrics(srv *s);
/* POST /v1/kb/search: the whole answer; *status 200, 400 or 500. */
char *oai_kb_search(srv *s, const char *body, size_t len, int *status);

/* Response building (called by the scheduler, srv.mu not held). */
typedef struct oai_logprob {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_tok[20];
    float top_lp[20];
} oai_logprob;
/* One SSE event "data: {...}\n\n" for a stream delta (text may be "", role
 * only in the first chunk, finish NULL until the last). Appended to out. */
void oai_stream_chunk(srv *s, const srv_req *r, const char *text, size_t len, bool first, const char *finish,
                      const oai_logprob *lp, int n_lp, sbuf *out);
void oai_stream_usage(const srv_req *r, sbuf *out);
/* "kb" requests: the last event before [DONE], {"choices": [], "citations", "kb"}
 * for the whole answer text. */
void oai_stream_citations(srv *s, const srv_req *r, const char *text, size_t len, sbuf *out);
/* The whole non-stream body. */
char *oai_final_body(srv *s, const srv_req *r, const char *text, size_t len, const char *finish,
                     const oai_logprob *lp, int n_lp);
char *oai_embeddings_body(const srv_req *r, const float *vec, int n, int dim, int prompt_tokens);
const char *oai_finish_str(fin_reason f);

#endif
