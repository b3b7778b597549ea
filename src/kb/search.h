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
#ifndef HX_KB_SEARCH_H
#define HX_KB_SEARCH_H

#include "kb/kb.h"

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
 * embedder fails with HX_ERR_ARG and a message naming both fingerprints.
 * max_embed_new < 0: embed every entry the cache lacks. */
hx_status kb_index_open(const char *dir, kb_embedder *em, long max_embed_new, kb_index *ix, hx_error *e);
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

#endif
