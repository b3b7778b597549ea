/* ctx_compare.h — two contexts of the same model run side by side through the
 * public API (test_tp_cuda: one GPU against tensor parallelism;
 * test_pipe_cuda: against the layer split): logits of a batch, their largest
 * difference, and the sequence checks both tests make. Include after
 * test_util.h. */
#ifndef HX_TEST_CTX_COMPARE_H
#define HX_TEST_CTX_COMPARE_H

#include <unistd.h>

#include "helix.h"

/* Logits of every token of a batch (n rows of V; zero for tokens that do not
 * ask), or NULL on failure. */
static inline float *t_batch_logits(hx_context *c, const hx_batch *b, int V) {
    hx_error e = {0};
    if (hx_decode(c, b, &e)) { fprintf(stderr, "decode: %s\n", e.msg); return NULL; }
    float *out = calloc((size_t)b->n_tokens * V, sizeof(float));
    for (int i = 0; i < b->n_tokens && out; i++) {
        const float *l = b->logits[i] ? hx_get_logits(c, i) : NULL;
        if (l) memcpy(out + (size_t)i * V, l, sizeof(float) * V);
    }
    return out;
}

/* max |a - b| over count floats, relative to max |a| (a NaN: infinity). */
static inline double t_rel_diff(const float *a, const float *b, size_t count) {
    double d = 0, s = 1e-30;
    for (size_t i = 0; i < count; i++) {
        double x = fabs((double)a[i] - b[i]);
        if (x > d || x != x) d = x != x ? INFINITY : x;
        if (fabs(a[i]) > s) s = fabs(a[i]);
    }
    return d / s;
}

/* The best id of a row of logits and its lead over the second (*gap). */
static inline int t_argmax2(const float *l, int V, float *gap) {
    int b = 0, s = -1;
    for (int i = 1; i < V; i++)
        if (l[i] > l[b]) { s = b; b = i; }
        else if (s < 0 || l[i] > l[s]) s = i;
    *gap = s >= 0 ? l[b] - l[s] : INFINITY;
    return b;
}

/* Sequences 1 and 2 of both contexts (empty) in the same batches: prefills
 * of 20 and 13 tokens of prompt (at least 20), then 7 decode steps of both;
 * each round's logits within tol of `one`'s. Returns the largest difference. */
static inline double t_two_sequences(const char *what, hx_context *one, hx_context *other, const int32_t *prompt,
                                     int n_prompt, int V, double tol) {
    hx_batch b = hx_batch_init(64);
    double worst = 0;
    for (int i = 0; i < 20; i++) hx_batch_add(&b, prompt[i], i, 1, i == 19);
    for (int i = 0; i < 13; i++) hx_batch_add(&b, prompt[n_prompt - 1 - i], i, 2, i == 12);
    float *l1 = t_batch_logits(one, &b, V), *l2 = t_batch_logits(other, &b, V);
    for (int k = 0; k < 8 && l1 && l2; k++) {
        double d = t_rel_diff(l1, l2, (size_t)b.n_tokens * V);
        worst = d > worst ? d : worst;
        CHECKF(d <= tol, "%s: two sequences, round %d: logits differ by %.3g (bound %.3g)", what, k, d, tol);
        float g;
        int a1 = t_argmax2(l1 + (size_t)19 * V * (k == 0), V, &g); /* (any valid token will do as input) */
        free(l1);
        free(l2);
        hx_batch_clear(&b);
        hx_batch_add(&b, a1, 20 + k, 1, true);
        hx_batch_add(&b, (a1 + 7) % V, 13 + k, 2, true);
        l1 = t_batch_logits(one, &b, V);
        l2 = t_batch_logits(other, &b, V);
    }
    CHECKF(l1 && l2, "%s: two sequences: a decode failed", what);
    free(l1);
    free(l2);
    hx_batch_free(&b);
    return worst;
}

/* Sequence 1 copied to 3 on both contexts; on `other` saved, cleared and
 * loaded into 3 again; the next step's logits within tol of `one`'s. Returns
 * their difference. */
static inline double t_copy_reload(const char *what, hx_context *one, hx_context *other, int32_t token, int V,
                                   double tol) {
    hx_error e = {0};
    char path[128];
    snprintf(path, sizeof path, "/tmp/hx_test_ctx_compare_%d.seq", (int)getpid());
    int keep = hx_seq_pos(one, 1);
    CHECKF(hx_seq_copy(one, 1, 3, keep, &e) == HX_OK, "%s: %s", what, e.msg);
    CHECKF(hx_seq_copy(other, 1, 3, keep, &e) == HX_OK, "%s: %s", what, e.msg);
    CHECKF(hx_seq_save(other, 3, path, &e) == HX_OK, "%s: %s", what, e.msg);
    hx_seq_clear(other, 3);
    CHECKF(hx_seq_load(other, 3, path, &e) == HX_OK, "%s: %s", what, e.msg);
    unlink(path);
    CHECK(hx_seq_pos(other, 3) == keep);
    hx_batch b = hx_batch_init(1);
    hx_batch_add(&b, token, keep, 3, true);
    float *l1 = t_batch_logits(one, &b, V), *l2 = t_batch_logits(other, &b, V);
    double d = l1 && l2 ? t_rel_diff(l1, l2, V) : INFINITY;
    CHECKF(d <= tol, "%s: copied and reloaded sequence: logits differ by %.3g (bound %.3g)", what, d, tol);
    free(l1);
    free(l2);
    hx_batch_free(&b);
    return d;
}

#endif
