/* analyze.h — private to src/kb: the insight engine's parts, shared by
 * kb_analyze (one full analysis) and kb_run_pass (full or incremental).
 *
 * Pairs are ordered by similarity, then a, then b (lower first): a total
 * order, so which pairs make a top-k cut never depends on thread timing, and
 * a full and an incremental pass keep the same ones. */
#ifndef HX_KB_ANALYZE_H
#define HX_KB_ANALYZE_H

#include "kb/kb.h"

/* The best pairs found so far, sorted best first, complete down to `cut`:
 * every pair at least as good as cut is in p. Without a cut, p holds every
 * pair that passed the kind's threshold. */
typedef struct kb_klist {
    kb_pair *p;
    int n;
    bool has_cut;
    kb_pair cut;
} kb_klist;

/* The live entries of a pass, in offset order. */
typedef struct kb_rows {
    size_t n;
    int dim;
    const uint64_t *offset;  /* (n) */
    const int *topic;        /* (n) topic id */
    const float *vec;        /* (n, dim) unit rows */
    int n_topics;
    const int *count;        /* (n_topics) entries per topic */
} kb_rows;

/* How deep a kind's list is kept: deeper than reported, so deletes can eat
 * into it before a full pass is needed. */
static inline int kb_keep_depth(int k) { return k > 0 ? 2 * k + 64 : 0; }

bool kb_pair_better(const kb_pair *p, const kb_pair *q);

/* Entry pairs with at least one row in [row0, n) (row0 = 0: all pairs) into
 * dups/links (a, b = offsets) and over1 (overlaps of two single-entry topics,
 * a, b = topic ids), each the best kb_keep_depth(k) with its cut. */
hx_status kb_entry_pairs(hx_pool *pool, const kb_rows *r, size_t row0, const kb_opts *o, kb_klist *dups,
                         kb_klist *links, kb_klist *over1, hx_error *e);
/* How the CPU forms the pairs: AUTO picks; F32: f32 tiles, every pair's
 * similarity; I8: int8 candidate tiles (allpairs.h), the candidates rescored
 * with the f32 tiles' arithmetic. The lists are the same bits either way. */
typedef enum kb_pairs_mode { KB_PAIRS_AUTO, KB_PAIRS_F32, KB_PAIRS_I8 } kb_pairs_mode;
hx_status kb_entry_pairs_mode(hx_pool *pool, const kb_rows *r, size_t row0, const kb_opts *o, kb_pairs_mode mode,
                              kb_klist *dups, kb_klist *links, kb_klist *over1, hx_error *e);
/* The same lists for the pairs (a, b > a) with a in [row_lo, row_hi): one
 * MPI rank's share of a full pass (the union over a split of [0, n) is
 * kb_entry_pairs(row0 = 0); each pair's similarity is the same bits), on the
 * device o->allpairs_device and o->allpairs_gpu choose, as kb_entry_pairs.
 * *on_gpu (may be NULL): whether the GPU formed them. */
hx_status kb_entry_pairs_rows(hx_pool *pool, const kb_rows *r, size_t row_lo, size_t row_hi, const kb_opts *o,
                              kb_klist *dups, kb_klist *links, kb_klist *over1, bool *on_gpu, hx_error *e);
/* Overlaps of topic pairs with at least one topic of 2+ entries (centroids
 * accumulated once), the best kb_keep_depth(max_overlaps) with its cut. */
hx_status kb_multi_overlaps(hx_pool *pool, const kb_rows *r, const kb_opts *o, kb_klist *over, hx_error *e);
/* kept := kept with add, both complete down to their cuts: the union is
 * complete down to the better cut; at most depth pairs stay. */
hx_status kb_klist_union(kb_klist *kept, const kb_klist *add, int depth, hx_error *e);
/* The best k of l, or false when l holds fewer than k and has a cut (pairs
 * below it are unknown: the caller needs a full pass). */
bool kb_klist_fills(const kb_klist *l, int k);
void kb_klist_free(kb_klist *l);
void kb_klist_sort(kb_klist *l); /* best first, by kb_pair_better */
/* The texts of log->e[which[q]] embedded into rows at[q] of vec (n rows of
 * em->dim). Calls of many texts, so that hx_embed's pipeline (tokenizing
 * ahead of the encoder, batches by length) runs across them: at most
 * kb_embed_call_texts(em) texts and KB_EMBED_CALL_BYTES of text a call, the
 * texts built per call in one buffer; a call whose rows are consecutive
 * writes them in place, others through a buffer of at most that many bytes.
 * The vectors are those of one text at a time (the embedders give a text the
 * same bits in any batch on the CPU). progress: NULL, or a suffix for the
 * "embedding i/n" line on a terminal ("" for none), updated after each call. */
hx_status kb_embed_rows(kb_embedder *em, const kb_log *log, const size_t *which, const size_t *at, size_t n,
                        float *vec, const char *progress, hx_error *e);
/* kb_embed_rows with the call sizes given (tests: several calls on a few texts). */
hx_status kb_embed_rows_by(kb_embedder *em, const kb_log *log, const size_t *which, const size_t *at, size_t n,
                           float *vec, const char *progress, size_t max_texts, size_t max_bytes, hx_error *e);
#define KB_EMBED_CALL_BYTES ((size_t)64 << 20)
/* Texts per kb_embed_rows call for em: BERT on the CPU (about a thousand texts
 * a second on a few cores) 8192, so the progress line moves every few
 * seconds; BERT on a GPU and the lexical embedder 65536 (a call's start and
 * drain, when the GPU waits for the first batch's tokens, are paid 16 times
 * for a million entries). */
size_t kb_embed_call_texts(const kb_embedder *em);
/* Save c as kb_cache_save does, or, when its first n_kept records are the
 * cache on disk's (as loaded, unchanged) and the base file's records a
 * prefix of them, write only the records past the base to embeddings.add
 * (kb.c), atomically; a full rewrite once those pass a quarter of the base.
 * Sets c->sum to what kb_cache_load will give the pair. */
hx_status kb_cache_save_append(kb_cache *c, size_t n_kept, const char *path, const kb_embedder *em, hx_error *e);
/* Report the lists: the best max_* of each into out (topics named by names). */
hx_status kb_insights_from(const kb_klist *dups, const kb_klist *links, const kb_klist *over, const kb_opts *o,
                           char **names, int n_topics, kb_insights *out, hx_error *e);
int kb_max_overlaps(const kb_opts *o);
/* Distinct topic names in order of first appearance (a hash map: O(n)):
 * topic[i] = id of names[i]; *ids_names (malloc'd array of pointers into
 * names, caller frees the array) lists them by id. */
hx_status kb_topic_table(const char *const *names, size_t n, int *topic, char ***ids_names, int *n_topics, hx_error *e);
/* Append to log the entries whose lines start at offs[0..n) (increasing),
 * read from path: the labels a report needs after an incremental pass. An
 * offset that no longer holds an entry line is an HX_ERR_RANGE error. */
hx_status kb_log_read_at(kb_log *log, const char *path, const uint64_t *offs, size_t n, hx_error *e);

/* insights.state for a full pass computed elsewhere (the MPI pass, mpi.c),
 * as kb_run_pass writes it: data.log (log_fd and its stat, taken before the
 * read) read whole up to read_to; cur: the cache as saved (its sum set);
 * topic: (cur->n) ids into names; deleted: increasing; lists: near-duplicates,
 * cross-links, single-entry topic overlaps. */
hx_status kb_state_save_full(const char *dir, int log_fd, const struct stat *sb, const kb_cache *cur, const kb_opts *o,
                             uint64_t read_to, uint64_t malformed, char **names, int n_topics, const int *topic,
                             const uint64_t *deleted, size_t n_deleted, const kb_klist lists[3], hx_error *e);
/* The summary people read, from a report object (insights.json's fields):
 * misfiled entries first, near-duplicate clusters to merge, cross-links,
 * patterns, topic overlaps; whole titles up to a line, else cut at a word. */
#include <cjson/cJSON.h>
void kb_print_report(FILE *f, const kb_log *log, const cJSON *report, size_t n_live, int n_topics);
/* s fitted into max code points (see insights.c), into out (cap bytes). */
void kb_fit_title(const char *s, int max, char *out, size_t cap);

/* cJSON_Print's text for a number (buf: 32 bytes; returns the length) and a
 * string (quoted and escaped into out, 6 * strlen(s) + 3 bytes; returns the
 * length), byte for byte: for lists written as raw JSON text (think.c). */
int kb_json_number(char buf[32], double d);
size_t kb_json_string(char *out, const char *s);
/* A whole data.log read as parts on several threads: the file cut at line
 * starts into `parts` byte ranges (kb_line_start), each read by kb_log_read
 * as a range (read_end, defer_below: a delete of an entry in an earlier range
 * is deferred), then the ranges' entries joined in order and the deferred
 * deletes applied (a delete naming no entry is warned about as a single read
 * would). The entries, their flags and read_to are a single kb_log_read's
 * from offset 0; warnings of different ranges may come in another order.
 *   kb_log_split_begin (stats and cuts), kb_log_split_read(part) for every
 *   part (any thread, each part once), kb_log_split_end (joins into out, a
 *   fresh kb_log, and frees the split, also on error). */
typedef struct kb_log_split {
    char path[4096];
    int parts;
    uint64_t bounds[17];     /* parts + 1 line starts, bounds[parts] = the size read */
    kb_log part[16];
    hx_status st[16];
    hx_error err[16];
} kb_log_split;
hx_status kb_log_split_begin(kb_log_split *s, const char *path, int parts, uint64_t quiet_below, hx_error *e);
void kb_log_split_read(kb_log_split *s, int part);
hx_status kb_log_split_end(kb_log_split *s, kb_log *out, hx_error *e);
/* The first line start at or after p (0, or just after a '\n') in the file
 * open as fd of size bytes; size when no line starts in [p, size). */
hx_status kb_line_start(int fd, uint64_t p, uint64_t size, uint64_t *out, const char *path, hx_error *e);
#endif
