/* llm.h — the knowledge base's local LLM (issue 21), on the public API.
 *
 * What it does with a decoder model:
 *   - classification: each entry against a label set (the KB's topics), by
 *     prefill only (hx_classify: the labels' summed log-probabilities after a
 *     prompt that lists them, normalized over the labels);
 *   - generation: many short greedy answers at once (one-sentence summaries,
 *     topic digests, merge suggestions, pattern names), every prompt its own
 *     sequence of one context, decoded together with hx_decode.
 * Prompts go through the model's chat template. Results are cached in
 * KB-DIR/llm.bin keyed by what they depend on (kb_llm_cache), so a pass only
 * runs the model on what it has not seen.
 *
 * llm.bin (little-endian), written atomically:
 *   "HXLC" | version u32 = 1 | fp_len u32 | fingerprint[fp_len] (model + prompt version)
 *   | count u32 | count x { kind u32 | key_a u64 | key_b u64 | len u32 | bytes[len] }
 *   | checksum u64 (FNV-1a of all before) */
#ifndef HX_KB_LLM_H
#define HX_KB_LLM_H

#include "helix.h"

/* Bump when a prompt changes: cached answers of older prompts are dropped. */
#define KB_LLM_PROMPT_VERSION 1

typedef struct kb_llm kb_llm;

typedef struct kb_llm_opts {
    const char *model;       /* .gguf or HF folder */
    hx_device device;        /* default auto */
    int n_seq;               /* sequences decoded together, default 16 */
    int n_ctx_seq;           /* positions per sequence, default 1024 */
    int n_threads;           /* CPU threads, 0 = all */
    int max_entry_words;     /* entry text cut to this many words in prompts, default 200 */
} kb_llm_opts;

kb_llm_opts kb_llm_defaults(void);
hx_status kb_llm_open(const kb_llm_opts *o, kb_llm **out, hx_error *e);
void kb_llm_free(kb_llm *l);
/* Model fingerprint + prompt version: the cache key of everything this model says. */
const char *kb_llm_fingerprint(const kb_llm *l);
const char *kb_llm_device(const kb_llm *l);   /* "cpu" or "cuda" */

/* ---- prompts (malloc'ed, chat-formatted with the assistant turn open) ---- */
char *kb_llm_prompt_classify(kb_llm *l, const char *title, const char *text, const char *const *labels, int n_labels);
char *kb_llm_prompt_summary(kb_llm *l, const char *title, const char *text);
/* A digest of a topic from its most central entries' titles and texts. */
char *kb_llm_prompt_digest(kb_llm *l, const char *topic, const char *const *titles, const char *const *texts, int n);
/* What to keep of two near-duplicate entries. */
char *kb_llm_prompt_merge(kb_llm *l, const char *title_a, const char *text_a, const char *title_b, const char *text_b);
/* A short name for a cluster of related entries (their titles). */
char *kb_llm_prompt_pattern(kb_llm *l, const char *const *titles, int n);

/* probs: n x n_labels, row i the label distribution of prompts[i]. */
hx_status kb_llm_classify(kb_llm *l, const char *const *prompts, int n, const char *const *labels, int n_labels,
                          float *probs, hx_error *e);

/* Greedy answers to n prompts, at most max_tokens each, cut at the first
 * newline when one_line, trimmed; out[i] malloc'ed (hx_free / free). progress
 * (may be NULL) is called after each finished answer. */
hx_status kb_llm_generate(kb_llm *l, const char *const *prompts, int n, int max_tokens, bool one_line, char **out,
                          void (*progress)(int done, int total, void *user), void *user, hx_error *e);

/* ---- the cache ---- */
typedef struct kb_llm_rec {
    uint32_t kind;
    uint64_t a, b;
    char *val;               /* NUL-terminated */
} kb_llm_rec;

enum { KB_LLM_CLASS = 1, KB_LLM_SUMMARY = 2, KB_LLM_DIGEST = 3, KB_LLM_MERGE = 4, KB_LLM_PATTERN = 5 };

typedef struct kb_llm_cache {
    kb_llm_rec *r;
    size_t n, cap;
    size_t *slot;            /* open-addressing index over (kind, a, b): record + 1, 0 = empty */
    size_t n_slot;           /* a power of two, at least 2n */
    bool dirty;
} kb_llm_cache;

/* Loads path when it exists and carries fingerprint; a damaged or foreign file
 * gives an empty cache and a warning, never an error. */
void kb_llm_cache_load(kb_llm_cache *c, const char *path, const char *fingerprint);
hx_status kb_llm_cache_save(const kb_llm_cache *c, const char *path, const char *fingerprint, hx_error *e);
void kb_llm_cache_free(kb_llm_cache *c);
/* The cached value or NULL. */
const char *kb_llm_cache_get(const kb_llm_cache *c, uint32_t kind, uint64_t a, uint64_t b);
/* Adds or replaces (val copied). */
hx_status kb_llm_cache_put(kb_llm_cache *c, uint32_t kind, uint64_t a, uint64_t b, const char *val, hx_error *e);

#endif
