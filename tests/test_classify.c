/* test_classify.c — the nearest-centroid classifier (src/kb/classify.c): a
 * planted misfiled entry is found, leave-one-out keeps small topics honest,
 * probabilities against a direct computation, candidate limits; TF-IDF rows
 * (weights by hand, the sparse centroids give the dense path's answers) and
 * the fitted temperature (the likelihood's slope is zero there). The accuracy
 * on examples/kb is tests/kb_classify_lexical.sh's. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

/* d/dbeta of the mean NLL of the own topics at beta = 1/T, from cosines
 * computed by hand: (n, nc) */
static double slope_at(const double *cosv, const int *own, size_t n, int nc, double beta) {
    double g = 0;
    for (size_t i = 0; i < n; i++) {
        const double *c = cosv + i * (size_t)nc;
        double mx = c[0], z = 0, ez = 0;
        for (int k = 1; k < nc; k++) if (c[k] > mx) mx = c[k];
        for (int k = 0; k < nc; k++) { double p = exp(beta * (c[k] - mx)); z += p; ez += p * c[k]; }
        g += ez / z - c[own[i]];
    }
    return g / (double)n;
}


/* ---- the reference TF-IDF builder: the first one, written plainly (every
 * row's hashes sorted, the vocabulary one sorted array, df by binary search).
 * kb_tfidf_build must give its features and weights bit for bit. ---- */
static bool ref_word_byte(unsigned char c) { return isalnum(c) || c == '_' || c >= 0x80; }

static size_t ref_word_hashes(const char *s, uint64_t *h, size_t m) {
    for (const unsigned char *p = (const unsigned char *)s; p && *p;) {
        while (*p && !ref_word_byte(*p)) p++;
        if (!*p) break;
        uint64_t v = 0xcbf29ce484222325ull;
        for (; *p && ref_word_byte(*p); p++) { v ^= (unsigned char)tolower(*p); v *= 0x100000001b3ull; }
        h[m++] = v;
    }
    return m;
}

static int ref_u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void ref_tfidf(const char *const *title, const char *const *text, size_t n, kb_tfidf *out) {
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        cap += (title && title[i] ? strlen(title[i]) : 0) / 2 + (text && text[i] ? strlen(text[i]) : 0) / 2 + 2;
    uint64_t *h = malloc(sizeof *h * (cap + 1)), *vocab = malloc(sizeof *vocab * (cap + 1));
    float *tf = malloc(sizeof *tf * (cap + 1));
    uint32_t *df = calloc(cap + 1, sizeof *df);
    out->n = n;
    out->start = calloc(n + 1, sizeof *out->start);
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        size_t s = m;
        m = ref_word_hashes(title && title[i] ? title[i] : NULL, h, m);
        m = ref_word_hashes(text && text[i] ? text[i] : NULL, h, m);
        qsort(h + s, m - s, sizeof *h, ref_u64_cmp);
        size_t k = s;
        for (size_t j = s; j < m;) {
            size_t r = j;
            while (r < m && h[r] == h[j]) r++;
            h[k] = h[j];
            tf[k++] = (float)(r - j);
            j = r;
        }
        m = k;
        out->start[i + 1] = m;
    }
    memcpy(vocab, h, sizeof *h * m);
    qsort(vocab, m, sizeof *vocab, ref_u64_cmp);
    size_t nv = 0;
    for (size_t j = 0; j < m; j++) {
        if (nv == 0 || vocab[nv - 1] != vocab[j]) vocab[nv++] = vocab[j];
        df[nv - 1]++;
    }
    out->n_feat = (uint32_t)nv;
    out->feat = malloc(sizeof *out->feat * (m + 1));
    out->w = malloc(sizeof *out->w * (m + 1));
    for (size_t i = 0; i < n; i++) {
        double nn = 0;
        for (size_t j = out->start[i]; j < out->start[i + 1]; j++) {
            size_t lo = 0, hi = nv;
            while (lo < hi) { size_t mid = (lo + hi) / 2; if (vocab[mid] < h[j]) lo = mid + 1; else hi = mid; }
            double w = (1.0 + log(tf[j])) * (log((1.0 + (double)n) / (1.0 + df[lo])) + 1.0);
            out->feat[j] = (uint32_t)lo;
            out->w[j] = (float)w;
            nn += w * w;
        }
        float inv = nn > 0 ? (float)(1.0 / sqrt(nn)) : 0.0f;
        for (size_t j = out->start[i]; j < out->start[i + 1]; j++) out->w[j] *= inv;
    }
    free(h); free(vocab); free(tf); free(df);
}

/* Random notes (words from a small vocabulary with repeats, mixed case,
 * punctuation, non-ASCII bytes, empty and missing fields, and rare words
 * enough to grow the vocabulary table), more rows than one chunk of the
 * builder: its features and weights are the reference's bits. */
static void check_tfidf_reference(hx_pool *pool) {
    static const char *words[] = {"Postgres", "index", "orders", "ORDERS", "tap", "faucet", "caf\xc3\xa9", "_tmp",
                                  "x86_64", "retry-after", "DNS", "dns", "a", "the", "\xe2\x80\x94", "v2", "42"};
    enum { N = 1500, NW = (int)(sizeof words / sizeof *words) };
    hx_rng r;
    hx_rng_seed(&r, 11);
    char **ti = calloc(N, sizeof *ti), **tx = calloc(N, sizeof *tx);
    for (size_t i = 0; i < N; i++) {
        int nt = (int)(hx_rng_uniform(&r) * 4), nx = (int)(hx_rng_uniform(&r) * 120);
        if (i % 97 == 3) nx = 0;
        char *a = calloc(4 * 16 + 1, 1), *b = calloc((size_t)nx * 16 + 1, 1);
        for (int k = 0; k < nt; k++) { strcat(a, words[(int)(hx_rng_uniform(&r) * NW) % NW]); strcat(a, " "); }
        for (int k = 0; k < nx; k++) {
            if (k % 3 == 2)   /* rare words: 20,000 possible, so the vocabulary table grows several times */
                sprintf(b + strlen(b), "w%d", (int)(hx_rng_uniform(&r) * 20000));
            else
                strcat(b, words[(int)(hx_rng_uniform(&r) * NW) % NW]);
            strcat(b, k % 5 == 4 ? ", " : " ");
        }
        ti[i] = i % 31 == 5 ? (free(a), NULL) : a;
        tx[i] = i % 53 == 7 ? (free(b), NULL) : b;
    }
    kb_tfidf got, want;
    hx_error e;
    CHECK(kb_tfidf_build(pool, (const char *const *)ti, (const char *const *)tx, N, &got, &e) == HX_OK);
    ref_tfidf((const char *const *)ti, (const char *const *)tx, N, &want);
    CHECK(got.n == want.n && got.n_feat == want.n_feat && want.n_feat > 10000);
    CHECK(!memcmp(got.start, want.start, sizeof *got.start * (N + 1)));
    size_t nnz = want.start[N];
    CHECK(nnz > 0 && !memcmp(got.feat, want.feat, sizeof *got.feat * nnz));
    CHECK(!memcmp(got.w, want.w, sizeof *got.w * nnz));
    kb_tfidf_free(&got);
    kb_tfidf_free(&want);
    for (size_t i = 0; i < N; i++) { free(ti[i]); free(tx[i]); }
    free(ti); free(tx);
}

static void check_tfidf(hx_pool *pool) {
    static const char *title[] = {"Postgres index", "Vacuum tuning", "Replica lag", "Slow query plan",
                                  "Sourdough starter", "Tomato sauce", "Roast potatoes", "Pasta water",
                                  "DNS timeouts", "TLS handshake", "Packet loss", "Postgres index on orders"};
    static const char *text[] = {
        "An index on the postgres orders table made the report query fast.",
        "Autovacuum on the postgres orders table was throttled; raising the cost limit fixed bloat.",
        "Postgres replicas fell behind while the index was rebuilt.",
        "The query planner chose a sequential scan of the orders table; analyze fixed the plan.",
        "Feed the starter with rye flour and warm water twice a day before baking.",
        "Simmer the tomatoes with olive oil and salt, then stir the butter in.",
        "Parboil the potatoes, rough them up, roast them in hot fat.",
        "Salt the pasta water well and keep a cup of it for the sauce.",
        "Pods failed to resolve names: the DNS resolver dropped UDP packets under load.",
        "Clients saw TLS handshake errors: the intermediate certificate was missing.",
        "The uplink dropped packets at peak hours; the router optic was faulty.",
        "An index on created_at for the postgres orders table made the query fast."};
    enum { N = 12 };
    int topic[N] = {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 1};   /* the last one filed under cooking */
    kb_tfidf x;
    hx_error e;
    CHECK(kb_tfidf_build(pool, title, text, N, &x, &e) == HX_OK);
    CHECK(x.n == N && x.start[0] == 0 && x.n_feat > 50);
    /* "postgres": in 4 of 12 rows, twice in row 0 (title and text: tf 2), the
     * heaviest of row 0's words in 4 rows ("orders" is there once) */
    {
        double nn = 0, wp = -1;
        for (size_t k = x.start[0]; k < x.start[1]; k++) nn += (double)x.w[k] * x.w[k];
        CHECK_NEAR(nn, 1.0, 1e-5);
        /* the raw weight of a word once in row 0 and in no other row: 1 * (ln(13/2) + 1) */
        double unit = -1;
        for (size_t k = x.start[0]; k < x.start[1]; k++) {
            uint32_t f = x.feat[k];
            int df = 0;
            for (size_t i = 0; i < N; i++)
                for (size_t q = x.start[i]; q < x.start[i + 1]; q++) df += x.feat[q] == f;
            if (df == 4 && x.w[k] > wp) wp = x.w[k];
            if (df == 1) unit = x.w[k];
        }
        CHECKF(wp > 0 && unit > 0, "postgres %g, a word of row 0 alone %g", wp, unit);
        /* ratio of the two raw weights: (1 + ln 2)(ln(13/5) + 1) / (ln(13/2) + 1) */
        CHECK_NEAR(wp / unit, (1 + log(2.0)) * (log(13.0 / 5) + 1) / (log(13.0 / 2) + 1), 1e-5);
    }
    /* the sparse path equals the dense path on the same vectors, densified */
    float *dense = calloc((size_t)N * x.n_feat, sizeof *dense);
    for (size_t i = 0; i < N; i++)
        for (size_t k = x.start[i]; k < x.start[i + 1]; k++) dense[i * x.n_feat + x.feat[k]] = x.w[k];
    kb_class cs[N], cd[N];
    int ncs = 0, ncd = 0;
    float ts = 0, td = 0;
    kb_classify_opts o = kb_classify_defaults();
    o.temperature = 0.05f;
    CHECK(kb_classify_centroid_rows(pool, NULL, 0, &x, N, topic, 3, &o, cs, &ncs, &ts, NULL, &e) == HX_OK);
    /* every row's probabilities of chosen topics (order 2, 0, then a topic that is no candidate) */
    int want[3] = {2, 0, 7};
    float pw[N * 3];
    kb_class_probs cp = {want, 3, pw};
    CHECK(kb_classify_centroid_rows(pool, dense, (int)x.n_feat, NULL, N, topic, 3, &o, cd, &ncd, &td, &cp, &e) == HX_OK);
    CHECK(ncs == 3 && ncd == 3 && ts == 0.05f && td == 0.05f);
    for (size_t i = 0; i < N; i++) {
        CHECKF(cs[i].predicted == cd[i].predicted, "row %zu: sparse %d, dense %d", i, cs[i].predicted, cd[i].predicted);
        CHECK_NEAR(cs[i].prob, cd[i].prob, 1e-4);
        CHECK_NEAR(cs[i].prob_current, cd[i].prob_current, 1e-4);
        /* the same softmax as out[]: its own topic's and the best one's, 0 for no candidate, 1 in all */
        float p1 = 1 - pw[i * 3] - pw[i * 3 + 1];   /* topic 1's, the one not asked for */
        float by_topic[3] = {pw[i * 3 + 1], p1, pw[i * 3]};
        CHECK(pw[i * 3 + 2] == 0.0f);
        CHECK_NEAR(by_topic[cd[i].topic], cd[i].prob_current, 1e-5);
        CHECK_NEAR(by_topic[cd[i].predicted], cd[i].prob, 1e-5);
    }
    CHECK(cs[11].predicted == 0);   /* the postgres note filed under cooking */
    /* the fitted temperature: the NLL's slope in 1/T is zero there (by hand from the dense cosines) */
    o.temperature = 0;
    CHECK(kb_classify_centroid_rows(pool, NULL, 0, &x, N, topic, 3, &o, cs, &ncs, &ts, NULL, &e) == HX_OK);
    CHECK(ts >= 0.01f && ts <= 1.0f);
    {
        double cosv[N * 3];
        int own[N];
        for (size_t i = 0; i < N; i++) {
            own[i] = topic[i];
            for (int c = 0; c < 3; c++) {
                double d = 0, nn = 0;
                for (uint32_t f = 0; f < x.n_feat; f++) {
                    double s = 0;
                    for (size_t k = 0; k < N; k++) if (topic[k] == c && k != i) s += dense[k * x.n_feat + f];
                    d += s * dense[i * x.n_feat + f];
                    nn += s * s;
                }
                cosv[i * 3 + c] = d / sqrt(nn);
            }
        }
        double beta = 1.0 / ts;
        if (ts > 0.0101f && ts < 0.99f) {
            CHECKF(slope_at(cosv, own, N, 3, beta * 0.98) < 0 && slope_at(cosv, own, N, 3, beta * 1.02) > 0,
                   "T %g is not the likelihood's maximum", ts);
        } else {
            CHECKF(ts <= 0.0101f ? slope_at(cosv, own, N, 3, 100) <= 0 : slope_at(cosv, own, N, 3, 1) >= 0,
                   "T %g at a bound while the maximum is inside", ts);
        }
        /* the probabilities use it */
        double mx = -2, z = 0;
        for (int c = 0; c < 3; c++) if (cosv[11 * 3 + c] > mx) mx = cosv[11 * 3 + c];
        for (int c = 0; c < 3; c++) z += exp((cosv[11 * 3 + c] - mx) / ts);
        CHECK_NEAR(cs[11].prob, 1.0 / z, 1e-4);
    }
    /* neither or both kinds of rows: refused */
    CHECK(kb_classify_centroid_rows(pool, NULL, 0, NULL, N, topic, 3, &o, cs, &ncs, &ts, NULL, &e) == HX_ERR_ARG);
    CHECK(kb_classify_centroid_rows(pool, dense, (int)x.n_feat, &x, N, topic, 3, &o, cs, &ncs, &ts, NULL, &e) == HX_ERR_ARG);
    /* rows without words and without titles */
    kb_tfidf y;
    const char *blank[3] = {"", "...", NULL};
    CHECK(kb_tfidf_build(pool, NULL, blank, 3, &y, &e) == HX_OK && y.n_feat == 0 && y.start[3] == 0);
    kb_tfidf_free(&y);
    free(dense);
    kb_tfidf_free(&x);
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

    check_tfidf(pool);
    check_tfidf_reference(pool);

    hx_pool_free(pool);
    printf("classify: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
