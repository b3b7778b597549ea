/* classify.h — declared in the public include/helix_kb.h (the KB engine is part of
 * libhelix's interface: helix-bg's KB commands use it as any program would).
 * Below: what the think stage uses beyond the public kb_classify_centroid. */
#ifndef HX_KB_CLASSIFY_H
#define HX_KB_CLASSIFY_H
#include "helix_kb.h"

/* TF-IDF vectors of a KB's entries, built from their words at classification
 * time: lowercased words as the lexical embedder reads them (runs of ASCII
 * letters, digits, '_' and non-ASCII bytes), one exact feature per distinct
 * word (a 64-bit hash: no buckets shared by unrelated words), weight
 * (1 + ln tf) * (ln((1 + n) / (1 + df)) + 1), each row L2-normalized (a row
 * without words stays zero). Sparse rows: row i is feat/w[start[i]..start[i+1]). */
typedef struct kb_tfidf {
    size_t n;
    size_t *start;      /* n + 1 */
    uint32_t *feat;     /* 0..n_feat-1 */
    float *w;
    uint32_t n_feat;
} kb_tfidf;

/* title[i] may be NULL (title may be NULL: no titles); text[i] may be NULL.
 * Rows are read on the pool (NULL: this thread). Work O(text bytes + words +
 * V log V) for V distinct words: the vocabulary is a hash table, sorted once. */
hx_status kb_tfidf_build(hx_pool *pool, const char *const *title, const char *const *text, size_t n, kb_tfidf *out,
                         hx_error *e);
void kb_tfidf_free(kb_tfidf *x);

/* kb_classify_centroid over dense unit vectors (vec, dim; x NULL) or TF-IDF
 * rows (x; vec NULL), with the softmax temperature fitted to the KB when
 * o->temperature <= 0: the one that maximizes the likelihood of the entries'
 * own topics under the leave-one-out scores (temperature scaling on the KB's
 * own labels, the maximum of a concave function of 1/T, searched in
 * [0.01, 1]; on a strided sample of at most 4M entry x topic scores). Fitting
 * makes --misfiled mean the same for any vector space: the cosines' scale
 * differs between embedders and TF-IDF. *temperature: the one used. */
/* Beside out (may be NULL): every row's probability of chosen topics, the
 * same leave-one-out softmax that gives out[i].prob. p (n rows, n_topic) row-
 * major: p[i * n_topic + k] is row i's probability of topic[k], 0 where that
 * topic is no candidate. For a caller that combines the centroid's answer
 * with another classifier's (think.c: with the LLM's). */
typedef struct kb_class_probs {
    const int *topic;   /* n_topic topic indices */
    int n_topic;
    float *p;           /* (n, n_topic), written */
} kb_class_probs;

hx_status kb_classify_centroid_rows(hx_pool *pool, const float *vec, int dim, const kb_tfidf *x, size_t n,
                                    const int *topic, int n_topics, const kb_classify_opts *o, kb_class *out,
                                    int *n_candidates, float *temperature, kb_class_probs *probs, hx_error *e);
#endif
