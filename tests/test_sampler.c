/* test_sampler.c — each stage of the sampling chain against its definition. */
#include <math.h>

#include "run/sampler.h"
#include "test_util.h"

#define V 50

static void fill(float *l, hx_rng *r) { for (int i = 0; i < V; i++) l[i] = 3.0f * hx_rng_normal(r); }

static void test_greedy_and_topk1(void) {
    hx_rng r; hx_rng_seed(&r, 1);
    float l[V];
    for (int rep = 0; rep < 20; rep++) {
        fill(l, &r);
        int32_t best = hx_argmax(l, V);
        hx_sampler_params p = hx_sampler_defaults();
        p.temp = 0;
        hx_sampler *s = hx_sampler_new(&p, V);
        CHECK(hx_sampler_sample(s, l) == best);
        hx_sampler_free(s);
        p = hx_sampler_defaults(); p.top_k = 1; p.seed = (uint64_t)rep;
        s = hx_sampler_new(&p, V);
        CHECK(hx_sampler_sample(s, l) == best);
        hx_sampler_free(s);
    }
}

/* With only temperature, draw frequencies follow softmax(l / T). */
static void test_distribution(void) {
    float l[V] = {0};
    l[3] = 1.0f; l[7] = 2.0f; l[11] = 0.5f;
    for (int i = 20; i < V; i++) l[i] = -INFINITY;
    hx_sampler_params p = {.temp = 0.7f, .top_k = 0, .top_p = 1.0f, .min_p = 0, .repeat_penalty = 1,
                           .penalty_last_n = 0, .seed = 42};
    hx_sampler *s = hx_sampler_new(&p, V);
    int n = 200000, hits[V] = {0};
    for (int i = 0; i < n; i++) hits[hx_sampler_sample(s, l)]++;
    double z = 0, pr[V];
    for (int i = 0; i < V; i++) z += exp(l[i] / p.temp);
    for (int i = 0; i < V; i++) {
        pr[i] = exp(l[i] / p.temp) / z;
        double sd = sqrt(pr[i] * (1 - pr[i]) / n);
        CHECKF(fabs(hits[i] / (double)n - pr[i]) <= 5 * sd + 1e-9, "token %d: %g vs %g", i, hits[i] / (double)n, pr[i]);
    }
    hx_sampler_free(s);
}

static void test_top_p_min_p(void) {
    /* probabilities 0.5, 0.25, 0.125, ... : top-p 0.7 keeps exactly the first two */
    float l[V];
    for (int i = 0; i < V; i++) l[i] = -(float)i * logf(2.0f);
    hx_sampler_params p = {.temp = 1.0f, .top_k = 0, .top_p = 0.7f, .min_p = 0, .repeat_penalty = 1, .seed = 3};
    hx_sampler *s = hx_sampler_new(&p, V);
    int seen[V] = {0};
    for (int i = 0; i < 20000; i++) seen[hx_sampler_sample(s, l)]++;
    CHECK(seen[0] > 0 && seen[1] > 0);
    for (int i = 2; i < V; i++) CHECKF(seen[i] == 0, "top-p let token %d through", i);
    hx_sampler_free(s);
    /* min-p 0.2 keeps tokens with p >= 0.2 * p_max: ids 0, 1, 2 (ratios 1, .5, .25) */
    p.top_p = 1.0f; p.min_p = 0.2f;
    s = hx_sampler_new(&p, V);
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 20000; i++) seen[hx_sampler_sample(s, l)]++;
    CHECK(seen[0] > 0 && seen[1] > 0 && seen[2] > 0);
    for (int i = 3; i < V; i++) CHECKF(seen[i] == 0, "min-p let token %d through", i);
    hx_sampler_free(s);
}

static void test_penalties(void) {
    float l[V] = {0};
    l[5] = 2.0f; l[6] = 1.9f; l[8] = -1.0f; l[9] = -0.9f;
    hx_sampler_params p = {.temp = 0, .repeat_penalty = 1.5f, .penalty_last_n = 4};
    hx_sampler *s = hx_sampler_new(&p, V);
    CHECK(hx_sampler_sample(s, l) == 5);
    hx_sampler_accept(s, 5);                 /* 2.0 / 1.5 = 1.33 < 1.9 */
    CHECK(hx_sampler_sample(s, l) == 6);
    hx_sampler_accept(s, 1); hx_sampler_accept(s, 2); hx_sampler_accept(s, 3);
    hx_sampler_accept(s, 4);                 /* 5 left the window of 4 */
    CHECK(hx_sampler_sample(s, l) == 5);
    hx_sampler_free(s);
    /* frequency + presence: 5 seen twice: 2.0 - 2*0.1 - 0.5 = 1.3 < 1.9 */
    p = (hx_sampler_params){.temp = 0, .repeat_penalty = 1.0f, .freq_penalty = 0.1f,
                            .presence_penalty = 0.5f, .penalty_last_n = -1};
    s = hx_sampler_new(&p, V);
    hx_sampler_accept(s, 5); hx_sampler_accept(s, 5);
    CHECK(hx_sampler_sample(s, l) == 6);
    hx_sampler_free(s);
    /* negative logits are multiplied: -0.9 * 1.5 = -1.35 < -1.0 */
    float m[V];
    for (int i = 0; i < V; i++) m[i] = -5.0f;
    m[8] = -1.0f; m[9] = -0.9f;
    p = (hx_sampler_params){.temp = 0, .repeat_penalty = 1.5f, .penalty_last_n = 8};
    s = hx_sampler_new(&p, V);
    hx_sampler_accept(s, 9);
    CHECK(hx_sampler_sample(s, m) == 8);
    hx_sampler_free(s);
}

static void test_top_k(void) {
    hx_rng r; hx_rng_seed(&r, 5);
    float l[V];
    for (int rep = 0; rep < 10; rep++) {
        fill(l, &r);
        /* the 3 largest */
        float sorted[V]; memcpy(sorted, l, sizeof l);
        for (int i = 0; i < V; i++)
            for (int j = i + 1; j < V; j++)
                if (sorted[j] > sorted[i]) { float t = sorted[i]; sorted[i] = sorted[j]; sorted[j] = t; }
        hx_sampler_params p = {.temp = 5.0f, .top_k = 3, .top_p = 1.0f, .repeat_penalty = 1, .seed = (uint64_t)rep};
        hx_sampler *s = hx_sampler_new(&p, V);
        int ok = 1, seen3 = 0;
        for (int i = 0; i < 3000; i++) {
            int32_t t = hx_sampler_sample(s, l);
            ok &= l[t] >= sorted[2];
            seen3 |= l[t] == sorted[2];
        }
        CHECK(ok);
        CHECK(seen3);
        hx_sampler_free(s);
    }
}

static void test_seed_determinism(void) {
    hx_rng r; hx_rng_seed(&r, 9);
    float l[V]; fill(l, &r);
    hx_sampler_params p = hx_sampler_defaults();
    p.seed = 1234;
    hx_sampler *a = hx_sampler_new(&p, V), *b = hx_sampler_new(&p, V);
    int same = 1;
    for (int i = 0; i < 100; i++) same &= hx_sampler_sample(a, l) == hx_sampler_sample(b, l);
    CHECK(same);
    hx_sampler_free(a); hx_sampler_free(b);
}

/* the split used by the GPU path: draw first (hx_sampler_draw), then sample
 * with that draw (hx_sampler_sample_u): the same tokens as hx_sampler_sample,
 * with penalties and history */
static void test_draw_then_sample(void) {
    hx_rng r; hx_rng_seed(&r, 10);
    float l[V];
    hx_sampler_params p = hx_sampler_defaults();
    p.seed = 77;
    p.repeat_penalty = 1.2f;
    hx_sampler *a = hx_sampler_new(&p, V), *b = hx_sampler_new(&p, V);
    int same = 1;
    for (int i = 0; i < 200; i++) {
        if (i % 20 == 0) fill(l, &r);
        int32_t ta = hx_sampler_sample(a, l);
        int32_t tb = hx_sampler_sample_u(b, l, hx_sampler_draw(b));
        same &= ta == tb;
        hx_sampler_accept(a, ta);
        hx_sampler_accept(b, tb);
    }
    const int32_t *h;
    CHECK(hx_sampler_history(b, &h) == 64 && h != NULL && hx_sampler_get_params(b)->repeat_penalty == 1.2f);
    CHECK(same);
    hx_sampler_free(a); hx_sampler_free(b);
}

/* hx_argmax (blocked, 8 lanes) against the plain scan: lengths around the
 * block and lane sizes, ties (the first index wins), NaNs (never win; x[0]
 * NaN gives 0), signed zeros, infinities. */
static int32_t argmax_plain(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void test_argmax(void) {
    hx_rng r;
    hx_rng_seed(&r, 7);
    enum { N = 2100 };
    static float x[N];
    const int lens[] = {1, 2, 7, 8, 9, 511, 512, 513, 1024, 1031, N};
    int bad = 0;
    for (int li = 0; li < (int)(sizeof lens / sizeof *lens); li++)
        for (int trial = 0; trial < 200; trial++) {
            int n = lens[li], kind = trial % 5;
            for (int i = 0; i < n; i++) {
                float v = hx_rng_normal(&r);
                if (kind == 1) v = (float)(int)(2.0f * v);           /* many ties */
                if (kind == 2 && hx_rng_uniform(&r) < 0.1f) v = NAN;   /* NaNs among them */
                if (kind == 3) v = hx_rng_uniform(&r) < 0.5f ? -0.0f : 0.0f;
                if (kind == 4 && hx_rng_uniform(&r) < 0.01f) v = hx_rng_uniform(&r) < 0.5f ? INFINITY : -INFINITY;
                x[i] = v;
            }
            if (trial % 17 == 0) x[0] = NAN;
            bad += hx_argmax(x, n) != argmax_plain(x, n);
        }
    CHECK(bad == 0);
    for (int i = 0; i < N; i++) x[i] = -INFINITY;
    CHECK(hx_argmax(x, N) == 0);
    x[N - 1] = -1.0f;
    CHECK(hx_argmax(x, N) == N - 1);
}

int main(void) {
    test_argmax();
    test_draw_then_sample();
    test_greedy_and_topk1();
    test_distribution();
    test_top_p_min_p();
    test_penalties();
    test_top_k();
    test_seed_determinism();
    return t_done("test_sampler");
}
