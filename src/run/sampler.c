/* sampler.c — penalties, top-k, top-p, min-p, temperature, seeded draw. */
#include "run/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

typedef struct cand { int32_t id; float logit; } cand;

struct hx_sampler {
    hx_sampler_params p;
    int n_vocab;
    hx_rng rng;
    int32_t *hist;      /* ring buffer of recent tokens, capacity hist_cap */
    int hist_cap, hist_len, hist_head;
    int32_t *counts;    /* n_vocab: occurrences in the window (scratch) */
    cand *cands;        /* n_vocab scratch */
    float *work;        /* n_vocab scratch logits */
    hx_logit_bias *bias; /* p.logit_bias copied (ids outside the vocabulary dropped) */
    int n_bias;
};

hx_sampler_params hx_sampler_defaults(void) {
    return (hx_sampler_params){.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                               .repeat_penalty = 1.0f, .freq_penalty = 0.0f,
                               .presence_penalty = 0.0f, .penalty_last_n = 64, .seed = 0};
}

hx_sampler_params hx_sampler_greedy(void) {
    hx_sampler_params p = hx_sampler_defaults();
    p.temp = 0.0f;
    return p;
}

bool hx_sampler_has_bias(const hx_sampler *s) { return s->n_bias > 0; }

bool hx_sampler_penalizes(const hx_sampler_params *p) {
    return p->penalty_last_n != 0 &&
           (p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f);
}

hx_sampler *hx_sampler_new(const hx_sampler_params *p, int n_vocab) {
    if (n_vocab <= 0) return NULL;
    hx_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->hist_cap = p->penalty_last_n < 0 ? 1 << 20 : (p->penalty_last_n > 0 ? p->penalty_last_n : 1);
    s->hist = malloc((size_t)s->hist_cap * sizeof *s->hist);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    s->work = malloc((size_t)n_vocab * sizeof *s->work);
    if (!s->hist || !s->counts || !s->cands || !s->work) { hx_sampler_free(s); return NULL; }
    s->p.logit_bias = NULL;
    s->p.n_logit_bias = 0;
    if (p->logit_bias && p->n_logit_bias > 0) {
        s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
        if (!s->bias) { hx_sampler_free(s); return NULL; }
        for (int i = 0; i < p->n_logit_bias; i++)
            if (p->logit_bias[i].token >= 0 && p->logit_bias[i].token < n_vocab) s->bias[s->n_bias++] = p->logit_bias[i];
    }
    hx_rng_seed(&s->rng, p->seed);
    return s;
}

void hx_sampler_free(hx_sampler *s) {
    if (!s) return;
    free(s->hist); free(s->counts); free(s->cands); free(s->work); free(s->bias);
    free(s);
}

void hx_sampler_reset(hx_sampler *s) {
    s->hist_len = s->hist_head = 0;
    hx_rng_seed(&s->rng, s->p.seed);
}

void hx_sampler_accept(hx_sampler *s, int32_t token) {
    s->hist[s->hist_head] = token;
    s->hist_head = (s->hist_head + 1) % s->hist_cap;
    if (s->hist_len < s->hist_cap) s->hist_len++;
}

const hx_sampler_params *hx_sampler_get_params(const hx_sampler *s) { return &s->p; }
int hx_sampler_history(const hx_sampler *s, const int32_t **tokens) {
    *tokens = s->hist;
    return s->hist_len;
}
float hx_sampler_draw(hx_sampler *s) { return hx_rng_uniform(&s->rng); }

/* The plain scan `if (x[i] > x[best]) best = i` is one dependent compare per
 * element (a few ns each: 90 ms for 128 rows of a 152k vocabulary, longer than
 * the GPU's decode step). Here each block's maximum comes from 8 independent
 * lanes (no dependency chain; the compiler vectorizes it), and only a block
 * that beats the best so far is scanned for its first index. The result is
 * the plain scan's: the first index of the largest value; NaNs never win
 * (x[0] NaN: 0, as the scan gives). */
int32_t hx_argmax(const float *x, int n) {
    enum { BLK = 512, LANES = 8 };
    if (n <= 0 || x[0] != x[0]) return 0;
    int32_t best = 0;
    float bv = x[0];
    for (int b0 = 0; b0 < n; b0 += BLK) {
        int b1 = n - b0 < BLK ? n : b0 + BLK, i = b0;
        float m[LANES];
        for (int l = 0; l < LANES; l++) m[l] = bv;
        for (; i + LANES <= b1; i += LANES)
            for (int l = 0; l < LANES; l++) m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
        float bm = bv;
        for (int l = 0; l < LANES; l++) bm = m[l] > bm ? m[l] : bm;
        for (; i < b1; i++) bm = x[i] > bm ? x[i] : bm;
        if (bm > bv) {
            for (i = b0; x[i] != bm; i++) {}
            best = i;
            bv = bm;
        }
    }
    return best;
}

/* llama.cpp semantics: repeat penalty divides positive logits and multiplies
 * negative ones; frequency and presence subtract count*f and (count>0)*p. */
static void apply_penalties(hx_sampler *s, float *l) {
    const hx_sampler_params *p = &s->p;
    if (!hx_sampler_penalizes(p) || s->hist_len == 0) return;
    for (int i = 0; i < s->hist_len; i++) {
        int32_t t = s->hist[i];
        if (t >= 0 && t < s->n_vocab) s->counts[t]++;
    }
    for (int i = 0; i < s->hist_len; i++) {
        int32_t t = s->hist[i];
        if (t < 0 || t >= s->n_vocab || s->counts[t] == 0) continue;
        int c = s->counts[t];
        s->counts[t] = 0; /* apply once per distinct token */
        if (l[t] <= 0) l[t] *= p->repeat_penalty;
        else l[t] /= p->repeat_penalty;
        l[t] -= (float)c * p->freq_penalty + p->presence_penalty;
    }
}

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* Keep the k largest candidates, sorted descending. Uses a partial selection
 * (min-heap of size k) so a 150k vocabulary does not need a full sort. */
static int top_k_select(cand *c, int n, int k) {
    if (k <= 0 || k >= n) {
        qsort(c, (size_t)n, sizeof *c, cand_desc);
        return n;
    }
    /* min-heap on (logit asc, id desc) in c[0..k) */
#define LESS(a, b) ((a).logit < (b).logit || ((a).logit == (b).logit && (a).id > (b).id))
    for (int i = k / 2 - 1; i >= 0; i--) {
        int j = i;
        for (;;) {
            int m = j, l = 2 * j + 1, r = l + 1;
            if (l < k && LESS(c[l], c[m])) m = l;
            if (r < k && LESS(c[r], c[m])) m = r;
            if (m == j) break;
            cand t = c[j]; c[j] = c[m]; c[m] = t; j = m;
        }
    }
    for (int i = k; i < n; i++) {
        if (!LESS(c[0], c[i])) continue;
        c[0] = c[i];
        int j = 0;
        for (;;) {
            int m = j, l = 2 * j + 1, r = l + 1;
            if (l < k && LESS(c[l], c[m])) m = l;
            if (r < k && LESS(c[r], c[m])) m = r;
            if (m == j) break;
            cand t = c[j]; c[j] = c[m]; c[m] = t; j = m;
        }
    }
#undef LESS
    qsort(c, (size_t)k, sizeof *c, cand_desc);
    return k;
}

/* allowed (may be NULL): only tokens with allowed[t] != 0 are candidates; -1 when none is. */
static int32_t sample_impl(hx_sampler *s, const float *logits, bool have_u, float u, const uint8_t *allowed) {
    const hx_sampler_params *p = &s->p;
    float *l = s->work;
    memcpy(l, logits, (size_t)s->n_vocab * sizeof *l);
    for (int i = 0; i < s->n_bias; i++) l[s->bias[i].token] += s->bias[i].bias;
    apply_penalties(s, l);
    if (allowed) {
        int any = 0;
        for (int i = 0; i < s->n_vocab; i++) {
            if (!allowed[i]) l[i] = -INFINITY;
            else any = 1;
        }
        if (!any) return -1;
    }
    if (p->temp <= 0.0f) {
        int32_t best = hx_argmax(l, s->n_vocab);
        return allowed && !allowed[best] ? -1 : best;
    }

    cand *c = s->cands;
    int n = 0;
    for (int i = 0; i < s->n_vocab; i++)
        if (!isnan(l[i]) && l[i] != -INFINITY) c[n++] = (cand){i, l[i]};
    if (n == 0) return 0;
    n = top_k_select(c, n, p->top_k);

    /* probabilities at temperature 1 for top-p / min-p (as llama.cpp, which
     * applies temperature last) */
    double max = c[0].logit, sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)c[i].logit - max);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += exp((double)c[i].logit - max) / sum;
            if (cum >= p->top_p) { keep = i + 1; break; }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        /* keep tokens with prob >= min_p * p_max, i.e. logit >= max + log(min_p) */
        double cut = max + log((double)p->min_p);
        int keep = 1;
        while (keep < n && c[keep].logit >= cut) keep++;
        n = keep;
    }
    /* temperature, softmax, draw */
    double total = 0;
    for (int i = 0; i < n; i++) total += exp(((double)c[i].logit - max) / p->temp);
    double r = (double)(have_u ? u : hx_rng_uniform(&s->rng)) * total, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += exp(((double)c[i].logit - max) / p->temp);
        if (r < acc) return c[i].id;
    }
    return c[n - 1].id;
}

int32_t hx_sampler_sample(hx_sampler *s, const float *logits) { return sample_impl(s, logits, false, 0.0f, NULL); }
int32_t hx_sampler_sample_u(hx_sampler *s, const float *logits, float u) {
    return sample_impl(s, logits, true, u, NULL);
}
int32_t hx_sampler_sample_allowed(hx_sampler *s, const float *logits, const uint8_t *allowed) {
    return sample_impl(s, logits, false, 0.0f, allowed);
}
