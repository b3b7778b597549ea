/* helix_kb.h — the knowledge-base engine behind helix-bg, on libhelix: the
 * data.log reader, embedders, the embedding cache, insights (near-duplicates,
 * cross-links, topic overlaps), incremental passes, classification, patterns,
 * the KB's local LLM, search and grounded answers. The daemon and the CLI's KB
 * commands use only this header and helix.h.
 *
 * Conventions as in helix.h: errors as hx_status values with an hx_error
 * message; objects freed by their *_free; one thread at a time per object. */
#ifndef HELIX_KB_H
#define HELIX_KB_H

#include <stdio.h>
#include "helix.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Files written atomically: a fresh O_EXCL|O_NOFOLLOW temp file beside path,
 * fsync, rename. */
hx_status hx_write_file_atomic(const char *path, const void *buf, size_t n, hx_error *e);

/* ======================================================================== */
/* from kb.h */
/* kb.h — the knowledge base: data.log reader, embedders, embedding cache,
 * insight engine and report (formats in ../shared/design.md).
 *
 * data.log: UTF-8 JSON Lines, append-only. An entry's id is the byte offset of
 * its line. {"delete": off} retires an entry. A last line without '\n' is a
 * write in progress and is not read. Malformed lines are reported and skipped.
 *
 * embeddings.bin v3 (little-endian), written atomically:
 *   "HXEC" | version u32 = 3 | count u32 | dim u32 | fp_len u32 | fingerprint[fp_len]
 *   count x { offset u64 | text_hash u64 | f32[dim] } | checksum u64 (kb_sum64 of all before)
 * v2 is the same with FNV-1a (byte-wise) as the checksum: read, never written
 * (at 100k entries FNV-1a over the 155 MB took longer than an incremental pass).
 * v1 ("HXEC" | 1 | count u32 | dim u32 | count x {offset u32 | f32[dim]}) is read too.
 *
 * insights.state (little-endian, written atomically after the cache): what an
 * incremental pass needs from the last one, bound to the cache by its checksum.
 *   "HXKS" | version u32 = 1 | cache checksum u64 | cache count u64
 *   | data.log: read_to u64 | st_dev u64 | st_ino u64 | head u64 | tail u64 | malformed u64
 *     (head/tail: FNV-1a of the first and of the last min(4096, read_to) bytes before read_to)
 *   | thresholds f32 x 4 (dup, link_low, link_high, topic) | max_dups, max_links, max_overlaps i32
 *   | n_topics u32 | n_topics x { len u32 | bytes } | cache count x topic id u32
 *   | n_deleted u64 | n_deleted x offset u64 (entries deleted earlier, increasing)
 *   | 3 kept lists (near-duplicates, cross-links, overlaps of single-entry topics), each
 *     n u32 | has_cut u32 | cut pair | n x pair, a pair = { a u64 | b u64 | sim f32 }
 *   | checksum u64 (FNV-1a of all before) */



typedef struct kb_entry {
    uint64_t offset;      /* id */
    char *topic, *title, *text;
    uint64_t hash;        /* FNV-1a of the embedded text */
    bool deleted;
} kb_entry;

typedef struct kb_log {
    kb_entry *e;
    size_t n, cap;
    uint64_t read_to;     /* bytes consumed (end of the last complete line) */
    size_t n_malformed;
    uint64_t quiet_below;  /* malformed lines before this offset were reported already: count, don't print */
    /* incremental reads: entries read by earlier passes (not in e), increasing
     * offsets, so a delete can name them. prior_deleted are retired already. */
    const uint64_t *prior_live, *prior_deleted;
    size_t n_prior_live, n_prior_deleted;
    uint64_t *del;        /* out: prior_live offsets this read deleted (in log order, may repeat) */
    size_t n_del, del_cap;
    /* range reads (one MPI rank's share, src/kb/mpi.c): read_end > 0 stops the
     * read there (a line start); a delete naming an offset below defer_below
     * that this read holds no entry for is not judged but listed in deferred
     * as (the delete line's offset, the offset it names) pairs, for the
     * caller to resolve against the reads of the earlier bytes. */
    uint64_t read_end, defer_below;
    uint64_t *deferred;   /* out: 2 x n_deferred */
    size_t n_deferred, deferred_cap;
} kb_log;

/* Read data.log from log->read_to (0 = whole file) appending to log. A file
 * shorter than that is reported as HX_ERR_RANGE (rewritten: rebuild). */
hx_status kb_log_read(kb_log *log, const char *path, hx_error *e);
void kb_log_free(kb_log *log);
size_t kb_log_live(const kb_log *log);
/* The entry with id off (binary search: ids increase), or NULL. */
kb_entry *kb_log_find(const kb_log *log, uint64_t off);
/* The text to embed: title + "\n" + text, or text. Caller frees. */
char *kb_entry_text(const kb_entry *en);

/* The cache checksum (v3): four FNV-1a-style lanes over little-endian u64
 * words (8x fewer dependent multiplies than byte-wise FNV-1a, four chains in
 * flight), the tail bytes byte-wise, then the lanes and n folded with FNV-1a. */
uint64_t kb_sum64(const void *p, size_t n);

/* ---- files in the KB directory ---- */
struct stat;
/* Opens path read-only for a reader that must not block or run away: O_NONBLOCK
 * (a FIFO does not wait for a writer), O_NOFOLLOW if asked, and fstat must say
 * regular file. Returns the fd (sb filled) or -1 with e naming path and why. */
int kb_open_regular(const char *path, bool nofollow, struct stat *sb, hx_error *e);
/* Takes the KB's lock: flock(LOCK_EX|LOCK_NB) on the directory's own fd (not a
 * file that could be a planted link or be removed), then removes temp files a
 * killed writer left and notes the pid in DIR/.helix.lock (written atomically).
 * Held until kb_unlock. Fails at once, naming the holder's pid, when another
 * process (daemon or one-shot) holds it. */
hx_status kb_lock(const char *dir, int *lock_fd, hx_error *e);
void kb_unlock(int lock_fd);

/* ---- embedders ---- */
typedef struct kb_embedder {
    char name[64];
    char fingerprint[256];
    int dim;
    hx_status (*embed)(struct kb_embedder *self, const char *const *texts, int n, float *out, hx_error *e);
    void (*free)(struct kb_embedder *self);
    void *impl;
} kb_embedder;

kb_embedder *kb_lexical_new(void);                       /* "lexical-384" */
/* BERT via hx_embed, f32 on the CPU (int8 with kb_neural_set_type: on examples/kb it finds the
 * same near-duplicate and cross-link pairs as f32, but near-ties within 0.005 swap places). */
hx_status kb_neural_new(const char *model, int n_threads, kb_embedder **out, hx_error *e);
/* hx_embedder_set_type on a kb_neural_new embedder ("f32", "int8", "auto"); updates its fingerprint. */
hx_status kb_neural_set_type(kb_embedder *em, const char *type, hx_error *e);
/* hx_embedder_set_device on a kb_neural_new embedder ("cpu", "cuda", "cuda:N", "auto"); HX_ERR_ARG for
 * another embedder. The fingerprint stays: a cache embedded on one device is read on the other. */
hx_status kb_neural_set_device(kb_embedder *em, const char *device, hx_error *e);

/* ---- cache ---- */
typedef struct kb_cache {
    uint64_t *offset, *hash;
    float *vec;           /* n x dim */
    size_t n;
    int dim;
    uint64_t sum;         /* v2/v3 checksum as loaded or saved (0: none, v1) */
} kb_cache;
/* Loads path if it exists and matches (fingerprint, dim); a damaged or foreign
 * file gives an empty cache and a warning, never an error. The records an
 * appending pass wrote beside it (embeddings.add for embeddings.bin: only the
 * new vectors, naming the base's count and checksum) are appended when they
 * belong to that base, else ignored with a warning. kb_cache_save writes the
 * whole cache and drops them. */
void kb_cache_load(kb_cache *c, const char *path, const kb_embedder *em);
/* As kb_cache_load (the same checks: a cache it discards, this discards), but
 * only offsets and hashes are kept: c->vec is NULL. For a caller that needs
 * to know which entries have vectors, not the vectors (155 MB at 100,000 x
 * 384 not allocated, filled and freed). */
void kb_cache_load_index(kb_cache *c, const char *path, const kb_embedder *em);
hx_status kb_cache_save(kb_cache *c, const char *path, const kb_embedder *em, hx_error *e); /* sets c->sum */
void kb_cache_free(kb_cache *c);

/* ---- insights ---- */
typedef struct kb_pair { uint64_t a, b; float sim; int ia, ib; } kb_pair;
typedef struct kb_topic_pair { int a, b; float sim; } kb_topic_pair;
#define KB_DEFAULT_MAX_OVERLAPS 100
typedef struct kb_opts {
    float dup_threshold, link_low, link_high, topic_threshold;
    int max_dups, max_links;
    int max_overlaps;     /* topic overlaps kept (the best); 0 = KB_DEFAULT_MAX_OVERLAPS */
    bool full;            /* kb_run_pass: ignore insights.state, compare all pairs */
    hx_device allpairs_device; /* entry pairs on: HX_DEVICE_AUTO (CUDA when built in, a GPU is usable and the
                                  work is large), CPU, or CUDA (fails with the reason); the same pairs either way */
    bool allpairs_log;    /* one stderr line per entry-pairs stage: which device ran it, how long */
    int allpairs_gpu;     /* the CUDA device (ordinal) that runs them: 0 unless set; an MPI rank's own
                             GPU under one-shot --mpi (local rank % GPUs on its host) */
} kb_opts;
kb_opts kb_default_opts(const kb_embedder *em);

typedef struct kb_insights {
    kb_pair *dups, *links;
    int n_dups, n_links;
    char **topics;              /* distinct topics */
    int n_topics;
    kb_topic_pair *overlaps;
    int n_overlaps;
} kb_insights;

/* vec: n unit vectors (rows of dim) for the live entries idx[0..n).
 * Work: the n x n/2 products once (blocked, on the pool); topics found with a
 * hash map; centroids accumulated once, and only for topics with 2+ entries
 * (a single-entry topic's overlaps are scored in the entry pass). Memory
 * O(n x dim + topics x dim). */
hx_status kb_analyze(hx_pool *pool, const kb_log *log, const size_t *idx, const float *vec, size_t n, int dim,
                     const kb_opts *o, kb_insights *out, hx_error *e);
void kb_insights_free(kb_insights *in);
hx_status kb_write_report(const char *path, const kb_log *log, const kb_insights *in, size_t n_live,
                          const char *embedder, hx_error *e);
void kb_print_summary(FILE *f, const kb_log *log, const kb_insights *in, size_t n_live);

/* One pass over a KB directory: read, embed what the cache lacks, analyze,
 * write embeddings.bin, insights.state and insights.json.
 * Incremental when insights.state matches the cache, the options and data.log
 * (same file, not shorter, same first and last 4 KB before the kept offset):
 * only the bytes appended since are read, only new entries are compared with
 * all (n_new x n), and the results merge into the kept top-k lists (kept
 * deeper than reported, complete down to a cut pair); a delete drops its
 * entry's pairs. When the kept lists cannot fill the report any more (deletes
 * ate into them), or a topic falls back to one entry, the pass compares all
 * pairs instead. Either way the report equals a full pass's. */
typedef struct kb_pass_stats {
    size_t entries, live, embedded, malformed, dups, links, overlaps;
    double seconds, embed_seconds, analyze_seconds;
    bool incremental;     /* false: all pairs compared */
    size_t new_entries, deleted; /* this pass: entries read, live entries retired */
} kb_pass_stats;
/* reported_to (may be NULL): malformed lines before *reported_to are not
 * reported again; updated to the end of what this pass read. */
hx_status kb_run_pass(const char *dir, kb_embedder *em, hx_pool *pool, const kb_opts *o, bool print_summary,
                      bool progress, uint64_t *reported_to, kb_pass_stats *st, hx_error *e);

/* ======================================================================== */
/* from classify.h */
/* classify.h — which topic each entry belongs to, without an LLM: the
 * nearest topic centroid in embedding space (lexical or MiniLM vectors).
 *
 * A topic's centroid is the mean of its entries' unit vectors; an entry is
 * compared with its own topic's centroid leaving itself out (otherwise a
 * small topic always claims its members). Scores are cosines to the
 * (re-normalized) centroids; the probability of topic t is
 * softmax(cos / temperature) over the candidate topics. Candidates are the
 * topics with at least min_members entries, the largest max_topics of them,
 * so the work is O(entries x candidates x dim), never entries squared.
 * An LLM (hx_classify) replaces this when the daemon is given one. */


typedef struct kb_class {
    size_t row;           /* the entry's row in the vectors given */
    int topic;            /* its current topic (index into the topic list given) */
    int predicted;        /* the best candidate topic, -1 when there is none */
    float prob;           /* probability of `predicted` */
    float prob_current;   /* probability of its own topic (0 when that is no candidate) */
} kb_class;

typedef struct kb_classify_opts {
    float temperature;    /* default 0.05 */
    int min_members;      /* default 3 */
    int max_topics;       /* default 512 */
} kb_classify_opts;

kb_classify_opts kb_classify_defaults(void);

/* vec: n unit vectors of dim; topic[i] in 0..n_topics-1. out: n results (row
 * order). *n_candidates: how many topics took part. */
hx_status kb_classify_centroid(hx_pool *pool, const float *vec, size_t n, int dim, const int *topic, int n_topics,
                               const kb_classify_opts *o, kb_class *out, int *n_candidates, hx_error *e);

/* Indices into cls of the entries whose predicted topic differs from their own
 * with probability > threshold, most confident first; returns how many (into
 * idx, capacity n). */
size_t kb_misfiled(const kb_class *cls, size_t n, float threshold, size_t *idx);

/* ======================================================================== */
/* from search.h */
/* search.h — "where did I write about X?": ranked search over a knowledge
 * base's live entries.
 *
 * Two rankings, fused:
 *   - semantic: cosine similarity between the query's embedding and each
 *     entry's (the KB's own embedder: the one whose fingerprint the cache
 *     carries; another one is refused, since its vectors would not compare);
 *   - lexical: BM25 (k1 1.2, b 0.75) over the same text the embedder sees
 *     (title + text), words as the lexical embedder splits them, lowercased.
 * Hybrid ranking (the default) adds 1/(60 + rank) of each list (reciprocal
 * rank fusion over each list's top 1,000), because exact identifiers (error
 * codes, host names) are where embeddings alone miss.
 *
 * The index holds one unit vector per live entry: the cached one when its
 * offset and text hash match, else embedded at open (up to max_embed_new
 * entries; the rest are counted as not yet indexed and searched lexically
 * only). Memory: n x dim floats plus the postings, nothing n x n. */


typedef struct kb_posting { uint64_t term; uint32_t doc; uint32_t tf; } kb_posting;

typedef struct kb_index {
    kb_log log;
    size_t *idx;          /* n: live entries, index into log.e */
    float *vec;           /* n x dim unit vectors (rows of unindexed entries are zero) */
    bool *has_vec;        /* n */
    size_t n;
    int dim;
    size_t n_unindexed;   /* live entries with no vector (max_embed_new exceeded) */
    size_t n_embedded;    /* entries embedded at open (not in the cache) */
    uint32_t *doc_len;    /* n: words per entry */
    double avg_len;
    kb_posting *post;     /* sorted by (term, doc) */
    size_t n_post;
} kb_index;

/* Opens DIR/data.log and DIR/embeddings.bin. A cache written by another
 * embedder fails with HX_ERR_ARG and a message naming both fingerprints; one
 * written by em's BERT model in int8 (--embed-type int8) switches em to int8
 * (kb_neural_set_type), so queries are embedded as the KB was.
 * max_embed_new < 0: embed every entry the cache lacks. */
hx_status kb_index_open(const char *dir, kb_embedder *em, long max_embed_new, kb_index *ix, hx_error *e);
/* kb_index_open for a process that keeps an index open (helix-bg serve) and
 * reopens it when data.log or the cache change: a live entry the cache lacks
 * takes prev's vector when prev holds one for the same id and text, so only
 * entries new since prev count against max_embed_new. prev may be NULL; it is
 * only read (free it after). */
hx_status kb_index_reopen(const char *dir, kb_embedder *em, long max_embed_new, const kb_index *prev, kb_index *ix,
                          hx_error *e);
void kb_index_free(kb_index *ix);

typedef struct kb_search_opts {
    int k;                /* hits wanted, default 10 */
    const char *topic;    /* only this topic (case-insensitive), NULL = all */
    bool semantic_only;   /* cosine ranking alone (no BM25 fusion) */
    bool lexical_only;    /* BM25 alone */
} kb_search_opts;

typedef struct kb_hit {
    size_t entry;         /* index into ix->log.e */
    double score;         /* the fused score (or the cosine / BM25 alone) */
    float cosine;         /* -2 when the entry has no vector */
    float bm25;
    int vec_rank, lex_rank; /* 1-based; 0 = not in that list's top */
} kb_hit;

/* Up to o->k hits, best first, into hits (capacity o->k); *n_hits set. */
hx_status kb_search(const kb_index *ix, kb_embedder *em, const char *query, const kb_search_opts *o, kb_hit *hits,
                    int *n_hits, hx_error *e);

/* The query's words (lowercased, stop words dropped) for highlighting:
 * *n words of at most 63 bytes each into words[cap][64]. */
int kb_query_words(const char *query, char (*words)[64], int cap);

/* About width bytes of text around the first of the query's words (from
 * kb_query_words), cut at word boundaries (never inside a UTF-8 character),
 * newlines and tabs as spaces, "..." where cut; each query word wrapped in
 * hl_on / hl_off when both are given (NULL: plain). Caller frees; NULL when
 * out of memory. */
char *kb_snippet(const char *text, char (*words)[64], int nw, size_t width, const char *hl_on, const char *hl_off);

/* ======================================================================== */
/* from ask.h */
/* ask.h — "what do my notes say about X?": a prompt grounded in retrieved
 * entries, within a token budget, and the citations in the answer.
 *
 * The retrieved entries are numbered [1]..[n] in the prompt (short numbers are
 * what small models cite reliably); kb_ask_citations maps the numbers the
 * answer uses back to entries, and tells apart numbers that name no
 * retrieved entry. The model is told to answer only from the entries, cite
 * them in brackets, and say it does not know when they do not hold the answer. */


/* Counts the tokens of text (the model's tokenizer); < 0 on failure. */
typedef int (*kb_count_fn)(const char *text, void *user);

typedef struct kb_ask_ctx {
    char *context;        /* the entries block of the prompt (malloc'ed) */
    int n_used;           /* entries placed, best first (entries[0..n_used) of the input) */
    int n_truncated;      /* 0 or 1: the last placed entry was cut to fit */
    int tokens;           /* tokens of the block */
} kb_ask_ctx;

/* Place entries (best first) into a block of at most budget tokens: whole
 * entries while they fit, then the next one cut at a word boundary when at
 * least 32 tokens remain; the rest are left out. */
hx_status kb_ask_context(const kb_entry *const *entries, int n, int budget, kb_count_fn count, void *user,
                         kb_ask_ctx *out, hx_error *e);
void kb_ask_ctx_free(kb_ask_ctx *c);

/* The user message: instructions, the entries block and the question (malloc'ed). */
char *kb_ask_message(const kb_ask_ctx *c, const char *question);
/* The system message. */
const char *kb_ask_system(void);

/* Numbers cited in text as [n] or [n, m, ...]: cited[k] set for 1 <= n <= n_refs
 * (k = n - 1); *n_bad counts citations of numbers outside 1..n_refs. Returns
 * how many distinct entries are cited. */
int kb_ask_citations(const char *text, int n_refs, bool *cited, int *n_bad);

/* ======================================================================== */
/* from llm.h */
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
/* Tokens kb_llm_generate has produced on this handle so far (end-of-generation
 * tokens not counted): a benchmark's exact count, where retokenizing the
 * answers would not give it back. */
long long kb_llm_tokens_generated(const kb_llm *l);

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

/* ======================================================================== */
/* from think.h */
/* think.h — the stage after a pass: what a person would act on.
 *
 * Reads the KB (data.log, embeddings.bin, the insights.json the pass wrote)
 * and adds to insights.json (rewritten atomically):
 *   classifications  every live entry: {id, topic, predicted, probability, method}
 *   misfiled         entries whose predicted topic differs with probability >
 *                    misfiled (default 0.8), most confident first
 *   patterns         groups of related entries across topics (connected
 *                    components of the pass's cross-links and near-duplicates,
 *                    at least 3 entries in at least 2 topics): {members, topics,
 *                    name, description}
 * and, with an LLM (kb/llm.h):
 *   summaries        {id, summary}: one sentence for entries of more than
 *                    summarize_min_words words
 *   digests          {topic, digest}: from the topic's most central entries
 *   merge_suggestions {a, b, suggestion}: for each near-duplicate pair
 * Classification without an LLM is the nearest topic centroid (kb/classify.h),
 * refit from all entries at every call: an appended entry changes every IDF
 * weight (they count the entries) and its topic's centroid, so no earlier
 * answer is reused and the result is a from-scratch run's; with an LLM it is
 * hx_classify over the topics as labels. Every LLM answer is
 * cached in llm.bin (saved after each batch, so a killed pass keeps what it
 * finished); a later pass asks the model only about what changed. */


typedef struct kb_think_opts {
    kb_llm *llm;                 /* NULL: centroid classification and unnamed patterns only */
    float misfiled;              /* default 0.8 */
    int summarize_min_words;     /* default 60 */
    int max_labels;              /* the largest topics offered to the LLM, default 24 */
    bool progress;               /* a line per LLM batch on stderr */
    /* for measuring what each part of the LLM classifier adds (bench/kb_classify_eval.py): */
    bool llm_alone;              /* classify by the calibrated LLM alone, not combined with the centroid */
    bool llm_label_examples;     /* show the LLM the titles of each label's most central entries beside
                                    its name (better alone, worse combined: bench/RESULTS.md) */
} kb_think_opts;

kb_think_opts kb_think_defaults(void);

typedef struct kb_think_stats {
    size_t classified, misfiled, patterns, summaries, digests, merges;
    size_t llm_asked;            /* prompts the model ran this time (the rest came from llm.bin) */
    double seconds;
    /* parts of seconds: reading data.log, the embedding cache and insights.json;
     * the centroid classifier (TF-IDF rows included: tfidf_seconds); the
     * insights written (the LLM stage and patterns are the rest) */
    double load_seconds, classify_seconds, tfidf_seconds, write_seconds;
} kb_think_stats;

/* With o->progress, one stderr line "think: ..." gives the parts' seconds. */
hx_status kb_think(const char *dir, kb_embedder *em, hx_pool *pool, const kb_think_opts *o, bool print,
                   kb_think_stats *st, hx_error *e);

/* ---- many machines (src/kb/mpi.c) ----
 *
 * helix-bg one-shot --mpi: one full pass over a KB shared by the
 * ranks of MPI_COMM_WORLD. Built into helix-bg (not libhelix) only when CMake
 * finds MPI (HX_HAVE_MPI): these functions exist only in such a
 * program, linked with MPI.
 *
 * Work split (R ranks, n live entries):
 *   - rank 0 stats data.log and cuts it into R byte ranges at line starts;
 *     each rank reads its range; deletes naming an entry of an earlier range
 *     are exchanged (MPI_Allgatherv) and applied by the range that holds it;
 *   - each rank embeds its live entries (cached vectors reused as in a
 *     single-process pass), then the topic table (first appearance over the
 *     ranks in order), offsets, topic ids and vectors are exchanged with
 *     MPI_Allgatherv: every rank holds the n x dim vectors;
 *   - rank k compares its rows [lo_k, hi_k) with every later row, the bounds
 *     chosen so each rank forms about n^2 / 2R pairs; the kept top-k lists
 *     go to rank 0 (MPI_Gatherv), which merges them (kb_klist_union), scores
 *     the topic centroids, and alone writes embeddings.bin, insights.state
 *     and insights.json (atomically, the single-process writers).
 * The files and the summary equal a single-process full pass's exactly
 * (pair order is total; a pair's similarity is the same bits in any tile). */
typedef struct kb_mpi_stats {
    kb_pass_stats pass;       /* as kb_run_pass fills it (on rank 0) */
    int ranks;
    double read_s;            /* slowest rank: reading its range, deletes resolved */
    double embed_s;           /* slowest rank: cache lookups and embedding */
    double exchange_s;        /* topic table, offsets and vectors to every rank */
    double pairs_min_s, pairs_max_s; /* the fastest and the slowest rank's share of the pairs */
    double pairs_cpu_min_s, pairs_cpu_max_s; /* the same in CPU seconds of the rank (all its threads):
                                              * what the share costs with the machine to itself */
    double finish_s;          /* rank 0: lists merged, topic overlaps, files written */
    int pairs_gpu_ranks;      /* ranks whose share of the pairs ran on their GPU (the rest: the CPU) */
} kb_mpi_stats;

/* The message a rank's error carries when another rank failed (that rank
 * printed its own); rank 0 prints it, the others need not. */
#define KB_MPI_OTHER_RANK "another rank failed (its message is above)"

/* MPI_Init (thread level: funneled) and this process's rank, the number of
 * ranks, and its rank and rank count on this host (MPI_COMM_TYPE_SHARED). */
hx_status kb_mpi_init(int *rank, int *size, int *local_rank, int *local_size, hx_error *e);
void kb_mpi_finalize(void);
/* True on every rank when ok is true on every rank. */
bool kb_mpi_all(bool ok);
/* rank 0's ok, on every rank. */
bool kb_mpi_root_ok(bool ok);
/* A neural embedder on this host's GPU local_rank % n_gpus (CUDA builds with
 * a GPU; otherwise the CPU, unchanged). *device: "cpu" or "cuda:N". */
hx_status kb_mpi_pick_gpu(kb_embedder *em, int local_rank, char device[16], hx_error *e);

/* One full pass on every rank (same arguments everywhere; the caller holds
 * the KB lock on rank 0). Returns on every rank; stats and the summary are
 * rank 0's. On failure e names the cause on the rank where it happened and
 * reads KB_MPI_OTHER_RANK on the others. */
hx_status kb_mpi_pass(const char *dir, kb_embedder *em, hx_pool *pool, const kb_opts *o, bool print_summary,
                      bool progress, kb_mpi_stats *st, hx_error *e);

#ifdef __cplusplus
}
#endif
#endif /* HELIX_KB_H */
