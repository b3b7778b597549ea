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
#ifndef HX_KB_CLASSIFY_H
#define HX_KB_CLASSIFY_H

#include "helix.h"
#include "core/pool.h"

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

#endif
