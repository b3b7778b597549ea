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
#ifndef HX_KB_H
#define HX_KB_H

#include "helix.h"
#include "core/pool.h"

#include <stdio.h>

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
hx_status kb_neural_new(const char *model, int n_threads, kb_embedder **out, hx_error *e); /* BERT via hx_embed */

/* ---- cache ---- */
typedef struct kb_cache {
    uint64_t *offset, *hash;
    float *vec;           /* n x dim */
    size_t n;
    int dim;
    uint64_t sum;         /* v2/v3 checksum as loaded or saved (0: none, v1) */
} kb_cache;
/* Loads path if it exists and matches (fingerprint, dim); a damaged or foreign
 * file gives an empty cache and a warning, never an error. */
void kb_cache_load(kb_cache *c, const char *path, const kb_embedder *em);
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

#endif
