/* test_classify.c — the nearest-centroid classifier (src/kb/classify.c): a
 * planted misfiled entry is found, leave-one-out keeps small topics honest,
 * probabilities against a direct computation, candidate limits, and examples/kb
 * with the lexical embedder. */
#include "kb/classify.h"
#include "kb/kb.h"
#include "core/core.h"
#include "test_util.h"

/* Random unit vectors around a few topic directions. */
static void make(float *vec, int *topic, size_t n, int dim, int n_topics, hx_rng *r) {
    float dirs[8][32];
    for (int t = 0; t < n_topics; t++)
        for (int d = 0; d < dim; d++) dirs[t][d] = hx_rng_uniform(r) * 2 - 1;
    for (size_t i = 0; i < n; i++) {
        int t = (int)(i % (size_t)n_topics);
        topic[i] = t;
        double nn = 0;
        for (int d = 0; d < dim; d++) {
            float x = dirs[t][d] + 0.3f * (hx_rng_uniform(r) * 2 - 1);
            vec[i * dim + d] = x;
            nn += (double)x * x;
        }
        for (int d = 0; d < dim; d++) vec[i * dim + d] /= (float)sqrt(nn);
    }
}

int main(void) {
    enum { N = 60, DIM = 32, T = 4 };
    static float vec[N * DIM];
    static int topic[N];
    hx_rng r;
    hx_rng_seed(&r, 7);
    make(vec, topic, N, DIM, T, &r);
    topic[5] = 2;   /* entry 5 lies near topic 1's direction but is filed under 2 */
    hx_pool *pool = hx_pool_create(2);
    hx_error e;
    kb_class cls[N];
    int nc = 0;
    kb_classify_opts o = kb_classify_defaults();
    CHECK(kb_classify_centroid(pool, vec, N, DIM, topic, T, &o, cls, &nc, &e) == HX_OK);
    CHECK(nc == T);
    for (size_t i = 0; i < N; i++) {
        CHECK(cls[i].row == i && cls[i].topic == topic[i]);
        CHECK(cls[i].prob > 0 && cls[i].prob <= 1.0f && cls[i].prob_current <= cls[i].prob + 1e-6f);
        if (i != 5) CHECKF(cls[i].predicted == topic[i], "entry %zu: predicted %d, filed %d", i, cls[i].predicted, topic[i]);
    }
    CHECK(cls[5].predicted == 1 && cls[5].prob > 0.8f);
    size_t idx[N];
    size_t m = kb_misfiled(cls, N, 0.8f, idx);
    CHECK(m == 1 && idx[0] == 5);

    /* the probability by hand for one entry: softmax(cos / 0.05), own centroid without itself */
    {
        size_t i = 17;
        double cosv[T], mx = -2;
        for (int t = 0; t < T; t++) {
            double s[DIM] = {0}, dot = 0, nn = 0;
            for (size_t k = 0; k < N; k++)
                if (topic[k] == t && k != i)
                    for (int d = 0; d < DIM; d++) s[d] += vec[k * DIM + d];
            for (int d = 0; d < DIM; d++) { dot += s[d] * vec[i * DIM + d]; nn += s[d] * s[d]; }
            cosv[t] = dot / sqrt(nn);
            if (cosv[t] > mx) mx = cosv[t];
        }
        double z = 0;
        for (int t = 0; t < T; t++) z += exp((cosv[t] - mx) / 0.05);
        CHECK_NEAR(cls[i].prob, 1.0 / z, 1e-4);
        CHECK_NEAR(cls[i].prob_current, exp((cosv[topic[i]] - mx) / 0.05) / z, 1e-4);
    }

    /* topics below min_members are no candidates; one candidate = nothing to classify */
    int topic2[N];
    for (size_t i = 0; i < N; i++) topic2[i] = i < 58 ? 0 : (int)i - 57; /* topic 0 + two singletons */
    CHECK(kb_classify_centroid(pool, vec, N, DIM, topic2, 3, &o, cls, &nc, &e) == HX_OK);
    CHECK(nc == 0 && cls[0].predicted == -1);
    /* bad topic index */
    topic2[3] = 9;
    CHECK(kb_classify_centroid(pool, vec, N, DIM, topic2, 3, &o, cls, &nc, &e) == HX_ERR_ARG);

    /* one topic per entry (issue 22's worst case) stays linear: no candidates at all */
    static int own[N];
    for (size_t i = 0; i < N; i++) own[i] = (int)i;
    CHECK(kb_classify_centroid(pool, vec, N, DIM, own, N, &o, cls, &nc, &e) == HX_OK && nc == 0);

    hx_pool_free(pool);
    printf("classify: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
