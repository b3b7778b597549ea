/* think.c — classifications, misfiled entries, patterns, and with an LLM
 * summaries, digests and merge suggestions, added to insights.json (see
 * think.h). */
#include "kb/think.h"

#include <ctype.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "kb/analyze.h"
#include "kb/classify.h"
#include "kb/llm.h"

kb_think_opts kb_think_defaults(void) {
    return (kb_think_opts){.misfiled = 0.8f, .summarize_min_words = 60, .max_labels = 24};
}

static int count_words(const char *s) {
    int n = 0;
    bool in = false;
    for (; s && *s; s++) {
        bool w = !isspace((unsigned char)*s);
        if (w && !in) n++;
        in = w;
    }
    return n;
}

typedef struct topic_ref { const char *name; size_t row; } topic_ref;
typedef struct tslot { const char *name; uint64_t h; int id; } tslot;   /* topic names' hash table */
static int cmp_topic_ref(const void *a, const void *b) {
    const topic_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->row < y->row ? -1 : x->row > y->row);
}

/* The state of one run: live entries with vectors, their topics. */
typedef struct think {
    kb_log log;
    size_t *idx;          /* rows -> log.e */
    float *vec;           /* rows x dim */
    size_t n;
    int dim;
    int *topic;           /* row -> topic index */
    char **topics;        /* distinct names (pointers into log entries) */
    int *topic_count;
    int n_topics;
    kb_llm_cache cache;
    char cache_path[4096];
    const kb_think_opts *o;
    kb_think_stats *st;
} think;

static void think_free(think *t) {
    kb_log_free(&t->log);
    free(t->idx); free(t->vec); free(t->topic); free(t->topics); free(t->topic_count);
    kb_llm_cache_free(&t->cache);
}

static const kb_entry *ent(const think *t, size_t row) { return &t->log.e[t->idx[row]]; }

/* Save the LLM cache when it changed (after every batch: a killed pass keeps its work). */
static hx_status save_cache(think *t, hx_error *e) {
    if (!t->o->llm || !t->cache.dirty) return HX_OK;
    hx_status st = kb_llm_cache_save(&t->cache, t->cache_path, kb_llm_fingerprint(t->o->llm), e);
    if (!st) t->cache.dirty = false;
    return st;
}

/* Run the model on prompts[0..n) in batches, storing each answer under keys[i]. */
static hx_status ask_batch(think *t, char **prompts, const uint64_t (*keys)[2], uint32_t kind, int n, int max_tokens,
                           const char *what, hx_error *e) {
    const int B = 64;
    for (int b0 = 0; b0 < n; b0 += B) {
        int nb = n - b0 < B ? n - b0 : B;
        char **out = calloc((size_t)nb, sizeof *out);
        if (!out) return hx_err(e, HX_ERR_NOMEM, "think: out of memory");
        hx_status st = kb_llm_generate(t->o->llm, (const char *const *)prompts + b0, nb, max_tokens, true, out, NULL,
                                       NULL, e);
        for (int i = 0; i < nb && !st; i++)
            st = kb_llm_cache_put(&t->cache, kind, keys[b0 + i][0], keys[b0 + i][1], out[i] ? out[i] : "", e);
        for (int i = 0; i < nb; i++) free(out[i]);
        free(out);
        if (st) return st;
        t->st->llm_asked += (size_t)nb;
        if ((st = save_cache(t, e))) return st;
        if (t->o->progress) fprintf(stderr, "llm: %s %d/%d\n", what, b0 + nb, n);
    }
    return HX_OK;
}

/* Live entries that have a vector in the cache are the rows (the entries the
 * pass compared); their vectors are copied only when need_vec (the centroids
 * are over embeddings, not words). */
typedef struct load_job {
    kb_log_split split;      /* data.log in parts */
    char cache_path[4096];
    const kb_embedder *em;
    bool need_vec;
    kb_cache c;
} load_job;

/* data.log's parts and the embedding cache, read at once on the pool: task
 * 0 the cache, tasks 1.. the log's parts */
static void load_part(void *ctx, int64_t task, int thread) {
    (void)thread;
    load_job *j = ctx;
    if (task > 0) kb_log_split_read(&j->split, (int)task - 1);
    else if (j->need_vec) kb_cache_load(&j->c, j->cache_path, j->em);
    else kb_cache_load_index(&j->c, j->cache_path, j->em);
}

static hx_status load(think *t, const char *dir, kb_embedder *em, bool need_vec, hx_pool *pool, hx_error *e) {
    load_job *lj = calloc(1, sizeof *lj);
    if (!lj) return hx_err(e, HX_ERR_NOMEM, "think: out of memory");
    lj->em = em;
    lj->need_vec = need_vec;
    char p[4096];
    snprintf(p, sizeof p, "%s/data.log", dir);
    snprintf(lj->cache_path, sizeof lj->cache_path, "%s/embeddings.bin", dir);
    /* quiet: the pass before reported malformed lines; they are only counted */
    hx_status st = kb_log_split_begin(&lj->split, p, hx_pool_threads(pool), UINT64_MAX, e);
    if (st) { free(lj); return st; }
    hx_pool_run(pool, 1 + lj->split.parts, load_part, lj);
    kb_cache c = lj->c;
    st = kb_log_split_end(&lj->split, &t->log, e);
    free(lj);
    if (st) { kb_cache_free(&c); return st; }
    size_t live = kb_log_live(&t->log);
    t->dim = em->dim;
    t->idx = malloc((live + 1) * sizeof *t->idx);
    t->vec = need_vec ? malloc((live + 1) * (size_t)t->dim * sizeof *t->vec) : NULL;
    t->topic = malloc((live + 1) * sizeof *t->topic);
    if (!t->idx || (need_vec && !t->vec) || !t->topic) { kb_cache_free(&c); return hx_err(e, HX_ERR_NOMEM, "think: out of memory"); }
    size_t j = 0;
    for (size_t i = 0; i < t->log.n; i++) {
        const kb_entry *en = &t->log.e[i];
        if (en->deleted) continue;
        while (j < c.n && c.offset[j] < en->offset) j++;
        if (j < c.n && c.offset[j] == en->offset && (c.hash[j] == en->hash || c.hash[j] == 0)) {
            t->idx[t->n] = i;
            if (need_vec)
                memcpy(t->vec + t->n * (size_t)t->dim, c.vec + j * (size_t)c.dim, sizeof(float) * (size_t)t->dim);
            t->n++;
        }
    }
    kb_cache_free(&c);
    /* topics: numbered in first-seen order through a hash table (O(n) string
     * hashes), then renumbered in name order (a sort of the distinct names
     * only): topic k is the k-th name in strcmp order, as it always was */
    size_t cap = 16;
    while (cap < 2 * (t->n + 1)) cap *= 2;
    tslot *tab = calloc(cap, sizeof *tab);
    int *first = malloc((t->n + 1) * sizeof *first), *rank = malloc((t->n + 1) * sizeof *rank);
    topic_ref *r = malloc((t->n + 1) * sizeof *r);
    t->topics = malloc((t->n + 1) * sizeof *t->topics);
    t->topic_count = calloc(t->n + 1, sizeof *t->topic_count);
    if (!tab || !first || !rank || !r || !t->topics || !t->topic_count) {
        free(tab); free(first); free(rank); free(r);
        return hx_err(e, HX_ERR_NOMEM, "think: out of memory");
    }
    int nd = 0;
    for (size_t i = 0; i < t->n; i++) {
        const char *name = ent(t, i)->topic ? ent(t, i)->topic : "";
        uint64_t h = hx_fnv1a_str(name, HX_FNV_INIT);
        size_t q = (size_t)(h * 0x9e3779b97f4a7c15ull >> 32) & (cap - 1);
        while (tab[q].name && (tab[q].h != h || strcmp(tab[q].name, name))) q = (q + 1) & (cap - 1);
        if (!tab[q].name) { tab[q] = (tslot){name, h, nd}; r[nd] = (topic_ref){name, (size_t)nd}; nd++; }
        first[i] = tab[q].id;
    }
    qsort(r, (size_t)nd, sizeof *r, cmp_topic_ref);   /* distinct names: no ties */
    for (int k = 0; k < nd; k++) { rank[r[k].row] = k; t->topics[k] = (char *)r[k].name; }
    t->n_topics = nd;
    for (size_t i = 0; i < t->n; i++) {
        t->topic[i] = rank[first[i]];
        t->topic_count[t->topic[i]]++;
    }
    free(tab); free(first); free(rank); free(r);
    return HX_OK;
}

/* The probabilities of a cached classification ("p0,p1,..."): false when
 * absent or not nl numbers. */
static bool parse_probs(const char *v, float *pr, int nl) {
    if (!v) return false;
    int k = 0;
    for (const char *q = v; k < nl && *q; k++) {
        char *end;
        pr[k] = strtof(q, &end);
        if (end == q) return false;
        q = *end == ',' ? end + 1 : end;
    }
    return k == nl;
}

typedef struct rank { int topic, count; } rank;
static int rank_desc(const void *a, const void *b) {
    const rank *x = a, *y = b;
    return x->count != y->count ? y->count - x->count : x->topic - y->topic;
}

/* The topics offered to the LLM as labels: the largest, those with at least
 * two entries, at most max_labels (and cap). Returns how many (label j is
 * topic label_topic[j]); fewer than 2: nothing to choose between. */
static int llm_labels(const think *t, int *label_topic, int cap) {
    rank *rk = malloc(sizeof *rk * (size_t)(t->n_topics + 1));
    if (!rk) return 0;
    for (int i = 0; i < t->n_topics; i++) rk[i] = (rank){i, t->topic_count[i]};
    qsort(rk, (size_t)t->n_topics, sizeof *rk, rank_desc);
    int nl = 0, max_l = t->o->max_labels > 0 && t->o->max_labels < cap ? t->o->max_labels : (cap < 24 ? cap : 24);
    for (int i = 0; i < t->n_topics && nl < max_l && rk[i].count >= 2; i++) label_topic[nl++] = rk[i].topic;
    free(rk);
    return nl;
}

/* Keys of the label set's own records in llm.bin (KB_LLM_CLASS, a = these,
 * b = the label set's hash): entry records use entry offsets, never these. */
#define KEY_ABOUT UINT64_MAX          /* the lines about each label, '\n'-joined */
#define KEY_CONTENT_FREE (UINT64_MAX - 1)   /* the answer for a content-free note */
#define ABOUT_TITLES 2                /* titles of central notes shown per label */

/* With o->llm_label_examples, the line about each label: the titles of
 * its ABOUT_TITLES most central entries (closest to their own topic's
 * leave-one-out centroid), so the model reads what this KB files under a
 * name, not only the name. Chosen once per
 * label set and kept in llm.bin: the prompt, and so every cached answer, stays
 * the same as entries come and go (a deleted example still describes its
 * topic). Returns the '\n'-joined lines (malloc'ed), NULL when out of memory. */
static char *label_about(const think *t, const float *central, const int *label_topic, int nl) {
    size_t cap = 256, n = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    for (int j = 0; j < nl; j++) {
        size_t best[ABOUT_TITLES];
        int nb = 0;
        /* insertion into a short list, best first */
        for (size_t i = 0; i < t->n; i++) {
            if (t->topic[i] != label_topic[j] || !ent(t, i)->title || !ent(t, i)->title[0]) continue;
            int k;
            if (nb < ABOUT_TITLES) k = nb++;
            else if (central[i] <= central[best[ABOUT_TITLES - 1]]) continue;
            else k = ABOUT_TITLES - 1;
            while (k > 0 && central[best[k - 1]] < central[i]) { best[k] = best[k - 1]; k--; }
            best[k] = i;
        }
        for (int k = 0; k < nb; k++) {
            const char *ti = ent(t, best[k])->title;
            size_t need = n + strlen(ti) + 8;
            if (need > cap) {
                char *p = realloc(s, cap = need * 2);
                if (!p) { free(s); return NULL; }
                s = p;
            }
            if (k) { s[n++] = ';'; s[n++] = ' '; }
            s[n++] = '"';
            bool space = false;   /* whitespace (newlines included) collapsed: one line per label */
            int words = 0;        /* at most 12 words of a title: every prompt carries them */
            for (const char *q = ti; *q; q++) {
                if (isspace((unsigned char)*q)) { space = true; continue; }
                if (space && s[n - 1] != '"') {
                    if (++words >= 12) break;
                    s[n++] = ' ';
                }
                space = false;
                s[n++] = *q == '"' ? '\'' : *q;
            }
            s[n++] = '"';
        }
        if (n + 2 > cap) {
            char *p = realloc(s, cap = n * 2 + 2);
            if (!p) { free(s); return NULL; }
            s = p;
        }
        if (j + 1 < nl) s[n++] = '\n';
    }
    s[n] = 0;
    return s;
}

/* The product of the two classifiers' distributions, each raised to a weight:
 *   q_ij ∝ p_llm_ij^a * p_centroid_ij^b,   a, b >= 0,
 * with (a, b) maximizing the mean log q of the entries' own (filed) topics.
 * The centroid's probabilities are leave-one-out and the LLM never sees the
 * filed topics, so this is a likelihood on held-out answers: the weights say
 * how far each classifier is to be trusted on this KB (a useless LLM gets
 * a = 0 and the centroid's answer back), and their scale calibrates q as
 * the centroid's fitted temperature does. The objective is concave in (a, b)
 * (a log-linear model): Newton steps, halved until it improves, kept in
 * [0, 100]^2. x, y: (n, nl) log-probabilities; own[i]: the label of row i's
 * topic, -1 to leave the row out of the fit. */
static double mix_nll(const float *x, const float *y, const int *own, size_t n, int nl, double a, double b,
                      double g[2], double h[3]) {
    double f = 0, used = 0;
    if (g) g[0] = g[1] = 0;
    if (h) h[0] = h[1] = h[2] = 0;
    for (size_t i = 0; i < n; i++) {
        if (own[i] < 0) continue;
        const float *xi = x + i * (size_t)nl, *yi = y + i * (size_t)nl;
        double mx = -DBL_MAX;
        for (int j = 0; j < nl; j++) mx = fmax(mx, a * xi[j] + b * yi[j]);
        double z = 0, ex = 0, ey = 0, exx = 0, exy = 0, eyy = 0;
        for (int j = 0; j < nl; j++) {
            double p = exp(a * xi[j] + b * yi[j] - mx);
            z += p; ex += p * xi[j]; ey += p * yi[j];
            exx += p * xi[j] * xi[j]; exy += p * xi[j] * yi[j]; eyy += p * yi[j] * yi[j];
        }
        ex /= z; ey /= z; exx /= z; exy /= z; eyy /= z;
        f += mx + log(z) - (a * xi[own[i]] + b * yi[own[i]]);
        if (g) { g[0] += ex - xi[own[i]]; g[1] += ey - yi[own[i]]; }
        if (h) { h[0] += exx - ex * ex; h[1] += exy - ex * ey; h[2] += eyy - ey * ey; }
        used++;
    }
    if (used > 0) {
        f /= used;
        if (g) { g[0] /= used; g[1] /= used; }
        if (h) { h[0] /= used; h[1] /= used; h[2] /= used; }
    }
    return f;
}

static void fit_mix(const float *x, const float *y, const int *own, size_t n, int nl, double *wa, double *wb) {
    double a = 1, b = 1, g[2], h[3];
    double f = mix_nll(x, y, own, n, nl, a, b, g, h);
    for (int it = 0; it < 100; it++) {
        /* Newton direction on the convex NLL: d = -H^-1 g (a ridge keeps H invertible) */
        double h0 = h[0] + 1e-9, h2 = h[2] + 1e-9, det = h0 * h2 - h[1] * h[1];
        double da = det > 0 ? -(h2 * g[0] - h[1] * g[1]) / det : -g[0];
        double db = det > 0 ? -(h0 * g[1] - h[1] * g[0]) / det : -g[1];
        bool moved = false;
        for (double s = 1; s > 1e-6; s /= 2) {
            double na = fmin(fmax(a + s * da, 0), 100), nb = fmin(fmax(b + s * db, 0), 100);
            double nf = mix_nll(x, y, own, n, nl, na, nb, NULL, NULL);
            if (nf < f - 1e-12) {
                moved = fabs(na - a) + fabs(nb - b) > 1e-9;
                a = na; b = nb; f = nf;
                break;
            }
        }
        if (!moved) break;
        f = mix_nll(x, y, own, n, nl, a, b, g, h);
    }
    *wa = a;
    *wb = b;
}

/* LLM classification over the largest topics (labels), combined with the
 * centroid's: cls[row] updated where the LLM answers. cprob: the centroid's
 * leave-one-out probabilities of the labels (n, nl); central: each row's
 * probability of its own topic (which entries are typical of a topic). mix:
 * the fitted weights, then the mean negative log-likelihoods of the filed
 * topics under the LLM alone, the centroid alone and the combination; *about_out: the lines about the labels,
 * '\0'-separated (malloc'ed, NULL without labels). */
static hx_status classify_llm(think *t, kb_class *cls, const float *central, const float *cprob,
                              const int *label_topic, int nl, double mix[5], char **about_out, hx_error *e) {
    mix[0] = 1;
    mix[1] = mix[2] = mix[3] = mix[4] = 0;
    *about_out = NULL;
    if (nl < 2) return HX_OK;
    const char *labels[256];
    for (int j = 0; j < nl; j++) labels[j] = t->topics[label_topic[j]];
    uint64_t lset = HX_FNV_INIT;
    for (int i = 0; i < nl; i++) lset = hx_fnv1a_str(labels[i], hx_fnv1a_str("\x1f", lset));
    size_t np = 0;
    char **prompts = malloc(sizeof *prompts * (t->n + 1));
    size_t *rows = malloc(sizeof *rows * (t->n + 1));
    float *probs = malloc(sizeof(float) * 64 * (size_t)nl);
    float *lx = malloc(sizeof(float) * (t->n + 1) * (size_t)nl), *ly = malloc(sizeof(float) * (t->n + 1) * (size_t)nl);
    int *own = malloc(sizeof(int) * (t->n + 1));
    char *about_text = NULL;
    const char *about[256];
    hx_status st = HX_OK;
    if (!prompts || !rows || !probs || !lx || !ly || !own) { st = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto done; }
    /* the lines about the labels: this label set's, from llm.bin, else chosen now */
    bool names = !t->o->llm_label_examples;
    const char *cached = names ? "" : kb_llm_cache_get(&t->cache, KB_LLM_CLASS, KEY_ABOUT, lset);
    about_text = names ? calloc((size_t)nl + 1, 1)   /* nl empty lines, '\0'-separated */
                 : cached ? strdup(cached) : label_about(t, central, label_topic, nl);
    if (!about_text) { st = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto done; }
    if (!cached && (st = kb_llm_cache_put(&t->cache, KB_LLM_CLASS, KEY_ABOUT, lset, about_text, e))) goto done;
    if (names) {
        for (int j = 0; j < nl; j++) about[j] = "";
    } else {
        int k = 0;
        about[k++] = about_text;
        for (char *q = about_text; *q && k <= nl; q++)
            if (*q == '\n') { *q = 0; if (k < 256) about[k] = q + 1; k++; }
        if (k != nl) { st = hx_err(e, HX_ERR_FORMAT, "think: llm.bin's topic lines do not match the topics"); goto done; }
        /* the answers depend on the labels and the lines about them */
        for (int j = 0; j < nl; j++) lset = hx_fnv1a_str(about[j], hx_fnv1a_str("\x1e", lset));
    }
    const char *const *shown = names ? NULL : about;
    /* ask about the entries the cache lacks */
    for (size_t i = 0; i < t->n; i++) {
        const kb_entry *en = ent(t, i);
        if (kb_llm_cache_get(&t->cache, KB_LLM_CLASS, en->offset, en->hash ^ lset)) continue;
        rows[np] = i;
        if (!(prompts[np++] = kb_llm_prompt_classify_about(t->o->llm, en->title, en->text, labels, shown, nl))) {
            np--;
            st = hx_err(e, HX_ERR_NOMEM, "think: cannot build a prompt");
            goto done;
        }
    }
    /* contextual calibration (Zhao et al., 2021): the label distribution for a
     * content-free note measures the model's prior for each label's tokens;
     * every answer is divided by it, so a label that small models favour
     * whatever the note says does not swallow the others. Asked once per
     * label set, kept in llm.bin with the answers. */
    if (!kb_llm_cache_get(&t->cache, KB_LLM_CLASS, KEY_CONTENT_FREE, lset)) {
        prompts[np] = kb_llm_prompt_classify_about(t->o->llm, "N/A", "N/A", labels, shown, nl);
        if (!prompts[np]) { st = hx_err(e, HX_ERR_NOMEM, "think: cannot build a prompt"); goto done; }
        rows[np++] = SIZE_MAX;
    }
    for (size_t b0 = 0; b0 < np && !st; b0 += 64) {
        int nb = np - b0 < 64 ? (int)(np - b0) : 64;
        if ((st = kb_llm_classify(t->o->llm, (const char *const *)prompts + b0, nb, labels, nl, probs, e))) break;
        for (int k = 0; k < nb && !st; k++) {
            const float *pr = probs + (size_t)k * nl;
            char val[256 * 16 + 16];
            size_t len = 0;
            for (int j = 0; j < nl; j++) len += (size_t)snprintf(val + len, sizeof val - len, "%s%.6g", j ? "," : "", pr[j]);
            if (rows[b0 + k] == SIZE_MAX) {
                st = kb_llm_cache_put(&t->cache, KB_LLM_CLASS, KEY_CONTENT_FREE, lset, val, e);
                continue;
            }
            const kb_entry *en = ent(t, rows[b0 + k]);
            st = kb_llm_cache_put(&t->cache, KB_LLM_CLASS, en->offset, en->hash ^ lset, val, e);
        }
        t->st->llm_asked += (size_t)nb;
        if (!st) st = save_cache(t, e);
        if (t->o->progress) fprintf(stderr, "llm: classified %zu/%zu\n", b0 + (size_t)nb, np);
    }
    if (st) goto done;
    float cf[256];
    if (!parse_probs(kb_llm_cache_get(&t->cache, KB_LLM_CLASS, KEY_CONTENT_FREE, lset), cf, nl))
        for (int j = 0; j < nl; j++) cf[j] = 1.0f;
    /* log-probabilities of both classifiers per row (-1 in own: no LLM answer) */
    int in_centroid[256];
    for (int j = 0; j < nl; j++) in_centroid[j] = 0;
    for (size_t i = 0; i < t->n; i++)
        for (int j = 0; j < nl; j++) in_centroid[j] |= cprob[i * (size_t)nl + j] > 0;
    int nin = 0;
    for (int j = 0; j < nl; j++) nin += in_centroid[j] != 0;
    for (size_t i = 0; i < t->n; i++) {
        const kb_entry *en = ent(t, i);
        float pr[256];
        own[i] = -1;
        if (!parse_probs(kb_llm_cache_get(&t->cache, KB_LLM_CLASS, en->offset, en->hash ^ lset), pr, nl)) continue;
        double z = 0;
        for (int j = 0; j < nl; j++) z += pr[j] / fmaxf(cf[j], 1e-30f);
        for (int j = 0; j < nl; j++) {
            /* floors keep a zero from vetoing a label outright */
            lx[i * (size_t)nl + j] = (float)log(fmax(z > 0 ? pr[j] / fmaxf(cf[j], 1e-30f) / z : 1.0 / nl, 1e-9));
            /* a label the centroid does not rank (too few members): no opinion */
            double pc = in_centroid[j] ? cprob[i * (size_t)nl + j] : 1.0 / (nin > 0 ? nin : nl);
            ly[i * (size_t)nl + j] = (float)log(fmax(pc, 1e-9));
        }
        own[i] = nl;   /* answered; the label of its topic below, or none */
        for (int j = 0; j < nl; j++) if (label_topic[j] == t->topic[i]) own[i] = j;
    }
    /* the fit reads the rows whose topic is a label */
    int *fit_own = malloc(sizeof(int) * (t->n + 1));
    if (!fit_own) { st = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto done; }
    for (size_t i = 0; i < t->n; i++) fit_own[i] = own[i] < nl ? own[i] : -1;
    if (t->o->llm_alone) { mix[0] = 1; mix[1] = 0; }
    else fit_mix(lx, ly, fit_own, t->n, nl, &mix[0], &mix[1]);
    mix[2] = mix_nll(lx, ly, fit_own, t->n, nl, 1, 0, NULL, NULL);
    mix[3] = mix_nll(lx, ly, fit_own, t->n, nl, 0, 1, NULL, NULL);
    mix[4] = mix_nll(lx, ly, fit_own, t->n, nl, mix[0], mix[1], NULL, NULL);
    free(fit_own);
    for (size_t i = 0; i < t->n; i++) {
        if (own[i] < 0) continue;
        const float *xi = lx + i * (size_t)nl, *yi = ly + i * (size_t)nl;
        double s[256], mx = -DBL_MAX, z = 0;
        for (int j = 0; j < nl; j++) { s[j] = mix[0] * xi[j] + mix[1] * yi[j]; mx = fmax(mx, s[j]); }
        for (int j = 0; j < nl; j++) z += exp(s[j] - mx);
        int best = 0;
        for (int j = 1; j < nl; j++) if (s[j] > s[best]) best = j;
        cls[i].predicted = label_topic[best];
        cls[i].prob = (float)(exp(s[best] - mx) / z);
        cls[i].prob_current = own[i] < nl ? (float)(exp(s[own[i]] - mx) / z) : 0.0f;
    }
done:
    for (size_t i = 0; prompts && i < np; i++) free(prompts[i]);
    free(prompts); free(rows); free(probs); free(lx); free(ly); free(own);
    if (st) free(about_text);
    else *about_out = about_text;
    return st;
}

/* ---- JSON text as cJSON_Print writes it ----
 * The classifications (one object per entry: 500,000 cJSON nodes at 100,000
 * entries, each number printed and read back by cJSON) are written as one
 * raw item instead, byte for byte the text cJSON_Print gave for the nodes
 * (test_kb_report checks the pieces against cJSON). */

/* the digits of v, returns the length */
static int put_u64(char *buf, uint64_t v) {
    char tmp[24];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    for (int k = 0; k < n; k++) buf[k] = tmp[n - 1 - k];
    buf[n] = 0;
    return n;
}

int kb_json_number(char buf[32], double d) {
    if (isnan(d) || isinf(d)) return snprintf(buf, 32, "null");
    /* the two kinds think writes by the 100,000, without printf: an integer
     * below 1e15 ("%1.15g" prints all its digits, as "%d" does), and k / 10^4
     * for 0 < k < 10^4 when d is exactly the double nearest it (15
     * significant digits of d are k's, the rest zeros that %g drops) */
    if (fabs(d) < 1e15 && d == floor(d) && !(d == 0 && signbit(d))) {
        if (d >= 0) return put_u64(buf, (uint64_t)d);
        buf[0] = '-';
        return 1 + put_u64(buf + 1, (uint64_t)-d);
    }
    if (d > 0 && d < 1) {
        long long k = llround(d * 10000);
        if (k > 0 && k < 10000 && (double)k / 10000 == d) {
            char *o = buf;
            *o++ = '0';
            *o++ = '.';
            for (long long p = 1000; p && k; p /= 10) { *o++ = (char)('0' + k / p); k %= p; }
            *o = 0;
            return (int)(o - buf);
        }
    }
    /* cJSON prints "%1.15g", or "%1.17g" when that does not read back as d */
    int n = snprintf(buf, 32, "%1.15g", d);
    double back = strtod(buf, NULL), mx = fmax(fabs(back), fabs(d));
    if (!(fabs(back - d) <= mx * DBL_EPSILON)) n = snprintf(buf, 32, "%1.17g", d);
    return n;
}

size_t kb_json_string(char *out, const char *s) {
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    *o++ = '"';
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        unsigned char c = *p;
        if (c == '"' || c == '\\') { *o++ = '\\'; *o++ = (char)c; }
        else if (c >= 32) *o++ = (char)c;
        else {
            *o++ = '\\';
            switch (c) {
            case '\b': *o++ = 'b'; break;
            case '\f': *o++ = 'f'; break;
            case '\n': *o++ = 'n'; break;
            case '\r': *o++ = 'r'; break;
            case '\t': *o++ = 't'; break;
            default: *o++ = 'u'; *o++ = '0'; *o++ = '0'; *o++ = hex[c >> 4]; *o++ = hex[c & 15];
            }
        }
    }
    *o++ = '"';
    *o = 0;
    return (size_t)(o - out);
}

/* The "classifications" array's text at depth 1 of the report: objects
 * {id, topic, predicted, probability} for the rows with a prediction,
 * "[]" when none. NULL when out of memory. */
static char *classifications_text(const think *t, const kb_class *cls, size_t *classified) {
    char **esc = calloc((size_t)t->n_topics + 1, sizeof *esc);   /* each topic's quoted name, once */
    size_t longest = 0;
    bool ok = esc != NULL;
    for (int k = 0; ok && k < t->n_topics; k++) {
        size_t len = strlen(t->topics[k]);
        if ((esc[k] = malloc(6 * len + 3))) {
            len = kb_json_string(esc[k], t->topics[k]);
            if (len > longest) longest = len;
        } else ok = false;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = ok ? malloc(cap) : NULL;
    *classified = 0;
    if (buf) buf[n++] = '[';
    for (size_t i = 0; buf && i < t->n; i++) {
        if (cls[i].predicted < 0) continue;
        size_t need = 2 * longest + 160;   /* the fixed text, two numbers of < 32 bytes */
        if (n + need + 2 > cap) {
            char *nb = realloc(buf, cap = 2 * cap + need);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
        }
        if (*classified) { memcpy(buf + n, ", ", 2); n += 2; }
#define PUT(str) (memcpy(buf + n, str, sizeof str - 1), n += sizeof str - 1)
        PUT("{\n\t\t\t\"id\":\t");
        n += (size_t)kb_json_number(buf + n, (double)ent(t, i)->offset);
        PUT(",\n\t\t\t\"topic\":\t");
        n += (size_t)(stpcpy(buf + n, esc[t->topic[i]]) - (buf + n));
        PUT(",\n\t\t\t\"predicted\":\t");
        n += (size_t)(stpcpy(buf + n, esc[cls[i].predicted]) - (buf + n));
        PUT(",\n\t\t\t\"probability\":\t");
        n += (size_t)kb_json_number(buf + n, round(cls[i].prob * 10000) / 10000);
        PUT("\n\t\t}");
#undef PUT
        ++*classified;
    }
    if (buf) { buf[n++] = ']'; buf[n] = 0; }
    for (int k = 0; esc && k < t->n_topics; k++) free(esc[k]);
    free(esc);
    return buf;
}

/* union-find over rows */
static size_t uf_find(size_t *p, size_t x) {
    while (p[x] != x) { p[x] = p[p[x]]; x = p[x]; }
    return x;
}

static long row_of(const think *t, uint64_t off) {
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint64_t o = ent(t, mid)->offset;
        if (o == off) return (long)mid;
        if (o < off) lo = mid + 1; else hi = mid;
    }
    return -1;
}

hx_status kb_think(const char *dir, kb_embedder *em, hx_pool *pool, const kb_think_opts *o, bool print,
                   kb_think_stats *st, hx_error *e) {
    double t0 = hx_now_s();
    memset(st, 0, sizeof *st);
    think t = {0};
    t.o = o;
    t.st = st;
    /* the built-in lexical embedder's vectors are its words hashed into 384
     * signed buckets, so unrelated notes share buckets by chance and topics
     * blur; the words themselves, TF-IDF weighted, say the same without that
     * noise. A neural embedder's vectors carry meaning the words lack: kept. */
    bool words = !strncmp(em->fingerprint, "lexical-", 8);
    hx_status s = load(&t, dir, em, !words, pool, e);
    char ipath[4096];
    snprintf(ipath, sizeof ipath, "%s/insights.json", dir);
    char *json = NULL;
    size_t jn = 0;
    cJSON *root = NULL;
    kb_class *cls = NULL;
    size_t *mis = NULL;
    float *central = NULL, *cprob = NULL;
    int label_topic[256], nl = 0;
    double mix[5] = {1, 0, 0, 0, 0};
    char *about = NULL;
    if (!s && (s = hx_read_file(ipath, &json, &jn, e)) == HX_OK && !(root = cJSON_ParseWithLength(json, jn)))
        s = hx_err(e, HX_ERR_FORMAT, "%s: not valid JSON (run a pass first)", ipath);
    st->load_seconds = hx_now_s() - t0;
    if (s) goto out;
    if (o->llm) {
        snprintf(t.cache_path, sizeof t.cache_path, "%s/llm.bin", dir);
        kb_llm_cache_load(&t.cache, t.cache_path, kb_llm_fingerprint(o->llm));
    }

    /* classification: centroids, then the LLM where it answers */
    cls = malloc(sizeof *cls * (t.n + 1));
    mis = malloc(sizeof *mis * (t.n + 1));
    int nc = 0;
    if (!cls || !mis) { s = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto out; }
    /* with an LLM, the centroid's probabilities of its labels too (combined below) */
    if (o->llm && (nl = llm_labels(&t, label_topic, 256)) >= 2 &&
        !(cprob = calloc((t.n + 1) * (size_t)nl, sizeof *cprob))) {
        s = hx_err(e, HX_ERR_NOMEM, "think: out of memory");
        goto out;
    }
    kb_class_probs cp = {label_topic, nl, cprob};
    kb_classify_opts co = kb_classify_defaults();
    co.temperature = 0;   /* fitted to the KB (classify.h) */
    float temp = 0;
    double tc = hx_now_s();
    int big = 0;   /* topics that can be candidates: fewer than two, and there is nothing to choose */
    for (int k = 0; k < t.n_topics; k++) big += t.topic_count[k] >= co.min_members;
    if (words && big < 2) {
        /* as kb_classify_centroid_rows answers then, without building the rows
         * (one topic per entry: 0.15 s of TF-IDF at 20,000 entries for nothing) */
        for (size_t i = 0; i < t.n; i++) cls[i] = (kb_class){.row = i, .topic = t.topic[i], .predicted = -1};
        temp = 0.05f;
    } else if (words) {
        const char **ti = malloc(sizeof *ti * (t.n + 1)), **tx = malloc(sizeof *tx * (t.n + 1));
        kb_tfidf x;
        if (!ti || !tx) s = hx_err(e, HX_ERR_NOMEM, "think: out of memory");
        for (size_t i = 0; i < t.n && !s; i++) { ti[i] = ent(&t, i)->title; tx[i] = ent(&t, i)->text; }
        if (!s && !(s = kb_tfidf_build(pool, ti, tx, t.n, &x, e))) {
            st->tfidf_seconds = hx_now_s() - tc;
            s = kb_classify_centroid_rows(pool, NULL, 0, &x, t.n, t.topic, t.n_topics, &co, cls, &nc, &temp, cprob ? &cp : NULL, e);
            kb_tfidf_free(&x);
        }
        free(ti); free(tx);
    } else {
        s = kb_classify_centroid_rows(pool, t.vec, t.dim, NULL, t.n, t.topic, t.n_topics, &co, cls, &nc, &temp, cprob ? &cp : NULL, e);
    }
    st->classify_seconds = hx_now_s() - tc;
    if (s) goto out;
    const char *method = "centroid";
    /* closeness of each entry to its own topic (centroid), for the digests: fixed
     * whatever the LLM says, so the digests' inputs (and cache keys) are stable */
    central = malloc(sizeof(float) * (t.n + 1));
    if (!central) { s = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto out; }
    for (size_t i = 0; i < t.n; i++) central[i] = cls[i].prob_current;
    if (o->llm) {
        if ((s = classify_llm(&t, cls, central, cprob, label_topic, nl, mix, &about, e))) goto out;
        method = "llm";   /* combined with the centroid's: llm_classifier's weights say how */
    }
    double tw = hx_now_s();
    char *ctext = classifications_text(&t, cls, &st->classified);
    cJSON *ca = ctext ? cJSON_CreateRaw(ctext) : NULL, *ma = cJSON_CreateArray();
    free(ctext);
    if (!ca || !ma) { cJSON_Delete(ca); cJSON_Delete(ma); s = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto out; }
    st->write_seconds += hx_now_s() - tw;
    cJSON_DeleteItemFromObject(root, "classifications");
    cJSON_DeleteItemFromObject(root, "misfiled");
    cJSON_AddItemToObject(root, "classifications", ca);
    cJSON_AddItemToObject(root, "misfiled", ma);
    cJSON_DeleteItemFromObject(root, "classifier");
    cJSON_AddStringToObject(root, "classifier", method);
    cJSON_DeleteItemFromObject(root, "llm_classifier");
    if (about) {
        /* what the LLM was shown about each topic, the weights of its answer and
         * the centroid's in the combination (fitted on the filed topics), and
         * each one's mean negative log-likelihood of the filed topics */
        cJSON *lc = cJSON_CreateObject(), *tl = cJSON_CreateArray();
        cJSON_AddNumberToObject(lc, "weight_llm", round(mix[0] * 1e4) / 1e4);
        cJSON_AddNumberToObject(lc, "weight_centroid", round(mix[1] * 1e4) / 1e4);
        cJSON *nll = cJSON_CreateObject();
        cJSON_AddNumberToObject(nll, "llm", round(mix[2] * 1e4) / 1e4);
        cJSON_AddNumberToObject(nll, "centroid", round(mix[3] * 1e4) / 1e4);
        cJSON_AddNumberToObject(nll, "combined", round(mix[4] * 1e4) / 1e4);
        cJSON_AddItemToObject(lc, "nll", nll);
        const char *q = about;
        for (int j = 0; j < nl; j++, q += strlen(q) + 1) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "topic", t.topics[label_topic[j]]);
            if (*q) cJSON_AddStringToObject(c, "examples", q);
            cJSON_AddItemToArray(tl, c);
        }
        cJSON_AddItemToObject(lc, "topics", tl);
        cJSON_AddItemToObject(root, "llm_classifier", lc);
    }
    cJSON_DeleteItemFromObject(root, "centroid_space");
    cJSON_DeleteItemFromObject(root, "centroid_temperature");
    if (nc > 0) {
        cJSON_AddStringToObject(root, "centroid_space", words ? "tfidf" : "embedding");
        cJSON_AddNumberToObject(root, "centroid_temperature", round(temp * 1e5) / 1e5);
    }
    size_t nm = kb_misfiled(cls, t.n, o->misfiled, mis);
    for (size_t k = 0; k < nm; k++) {
        size_t i = mis[k];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddNumberToObject(c, "id", (double)ent(&t, i)->offset);
        cJSON_AddStringToObject(c, "title", ent(&t, i)->title ? ent(&t, i)->title : "");
        cJSON_AddStringToObject(c, "topic", t.topics[t.topic[i]]);
        cJSON_AddStringToObject(c, "predicted", t.topics[cls[i].predicted]);
        cJSON_AddNumberToObject(c, "probability", round(cls[i].prob * 10000) / 10000);
        cJSON_AddItemToArray(ma, c);
    }
    st->misfiled = nm;

    /* patterns: components of the pass's links and near-duplicates */
    size_t *par = malloc(sizeof *par * (t.n + 1));
    if (!par) { s = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto out; }
    for (size_t i = 0; i < t.n; i++) par[i] = i;
    const char *edge_lists[2] = {"cross_links", "near_duplicates"};
    for (int l = 0; l < 2; l++) {
        cJSON *arr = cJSON_GetObjectItem(root, edge_lists[l]), *it;
        cJSON_ArrayForEach(it, arr) {
            cJSON *a = cJSON_GetObjectItem(it, "a"), *b = cJSON_GetObjectItem(it, "b");
            if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b)) continue;
            long ra = row_of(&t, (uint64_t)a->valuedouble), rb = row_of(&t, (uint64_t)b->valuedouble);
            if (ra < 0 || rb < 0) continue;
            par[uf_find(par, (size_t)ra)] = uf_find(par, (size_t)rb);
        }
    }
    cJSON *pa = cJSON_CreateArray();
    cJSON_DeleteItemFromObject(root, "patterns");
    cJSON_AddItemToObject(root, "patterns", pa);
    /* components in row order of their smallest member, members in row order:
     * rows bucketed by their root (a counting sort), one pass, not a scan of
     * every row per component */
    size_t *comp = malloc(sizeof *comp * (t.n + 1)), *start = calloc(t.n + 2, sizeof *start);
    char **pprompts = malloc(sizeof *pprompts * (t.n + 1));
    uint64_t (*pkeys)[2] = malloc(sizeof *pkeys * (t.n + 1));
    cJSON **pobj = malloc(sizeof *pobj * (t.n + 1));
    int npp = 0;
    if (!comp || !start || !pprompts || !pkeys || !pobj) {
        free(par); free(comp); free(start); free(pprompts); free(pkeys); free(pobj);
        s = hx_err(e, HX_ERR_NOMEM, "think: out of memory");
        goto out;
    }
    for (size_t i = 0; i < t.n; i++) par[i] = uf_find(par, i);   /* every row points at its root */
    for (size_t i = 0; i < t.n; i++) start[par[i] + 1]++;
    for (size_t i = 0; i < t.n; i++) start[i + 1] += start[i];
    for (size_t i = 0; i < t.n; i++) comp[start[par[i]]++] = i;  /* start[R] ends at the bucket's end */
    for (size_t i = t.n; i-- > 0;) start[i + 1] = start[i];       /* shift back: start[R] = first member */
    start[0] = 0;
    for (size_t r = 0; r < t.n; r++) {
        size_t R = par[r];
        const size_t *cm = comp + start[R];
        if (cm[0] != r) continue;   /* each component once, at its smallest row */
        size_t m = start[R + 1] - start[R];
        int topics_seen = 0;
        for (size_t k = 0; k < m; k++) {
            bool dup = false;
            for (size_t q = 0; q < k && !dup; q++) dup = t.topic[cm[q]] == t.topic[cm[k]];
            topics_seen += !dup;
        }
        if (m < 3 || topics_seen < 2) continue;
        cJSON *p = cJSON_CreateObject(), *mem = cJSON_AddArrayToObject(p, "members"), *tp = cJSON_AddArrayToObject(p, "topics");
        uint64_t key = HX_FNV_INIT;
        const char *titles[32];
        for (size_t k = 0; k < m; k++) {
            cJSON_AddItemToArray(mem, cJSON_CreateNumber((double)ent(&t, cm[k])->offset));
            key = hx_fnv1a_str(ent(&t, cm[k])->title, key ^ ent(&t, cm[k])->offset);
            if (k < 32) titles[k] = ent(&t, cm[k])->title;
            bool dup = false;
            for (size_t q = 0; q < k && !dup; q++) dup = t.topic[cm[q]] == t.topic[cm[k]];
            if (!dup) cJSON_AddItemToArray(tp, cJSON_CreateString(t.topics[t.topic[cm[k]]]));
        }
        cJSON_AddItemToArray(pa, p);
        st->patterns++;
        if (o->llm) {
            pkeys[npp][0] = key;
            pkeys[npp][1] = m;
            pobj[npp] = p;
            pprompts[npp] = kb_llm_cache_get(&t.cache, KB_LLM_PATTERN, key, m) ? NULL
                            : kb_llm_prompt_pattern(o->llm, titles, m < 32 ? (int)m : 32);
            npp++;
        }
    }
    free(par);
    free(comp);
    free(start);
    if (o->llm) {
        /* ask for the patterns the cache lacks (compacted), then name every one */
        int na = 0;
        char **ask = malloc(sizeof *ask * (size_t)(npp + 1));
        uint64_t (*akeys)[2] = malloc(sizeof *akeys * (size_t)(npp + 1));
        if (!ask || !akeys) s = hx_err(e, HX_ERR_NOMEM, "think: out of memory");
        for (int i = 0; i < npp && !s; i++)
            if (pprompts[i]) { ask[na] = pprompts[i]; akeys[na][0] = pkeys[i][0]; akeys[na][1] = pkeys[i][1]; na++; }
        if (!s) s = ask_batch(&t, ask, (const uint64_t(*)[2])akeys, KB_LLM_PATTERN, na, 40, "patterns", e);
        for (int i = 0; i < npp && !s; i++) {
            const char *v = kb_llm_cache_get(&t.cache, KB_LLM_PATTERN, pkeys[i][0], pkeys[i][1]);
            char name[128] = "", *desc = "";
            if (v) {
                const char *colon = strchr(v, ':');
                size_t nl = colon ? (size_t)(colon - v) : strlen(v);
                snprintf(name, sizeof name, "%.*s", (int)(nl < 127 ? nl : 127), v);
                desc = colon ? (char *)colon + 1 : "";
                while (*desc == ' ') desc++;
            }
            cJSON_AddStringToObject(pobj[i], "name", name);
            cJSON_AddStringToObject(pobj[i], "description", desc);
        }
        free(ask);
        free(akeys);
    }
    for (int i = 0; i < npp; i++) free(pprompts[i]);
    free(pprompts); free(pkeys); free(pobj);
    if (s) goto out;

    if (o->llm) {
        /* summaries of long entries */
        char **pr = malloc(sizeof *pr * (t.n + 1));
        uint64_t (*keys)[2] = malloc(sizeof *keys * (t.n + 1));
        int np = 0;
        if (!pr || !keys) { free(pr); free(keys); s = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto out; }
        int minw = o->summarize_min_words > 0 ? o->summarize_min_words : 60;
        for (size_t i = 0; i < t.n; i++) {
            const kb_entry *en = ent(&t, i);
            if (count_words(en->text) <= minw || kb_llm_cache_get(&t.cache, KB_LLM_SUMMARY, en->offset, en->hash)) continue;
            keys[np][0] = en->offset;
            keys[np][1] = en->hash;
            if ((pr[np] = kb_llm_prompt_summary(o->llm, en->title, en->text))) np++;
        }
        s = ask_batch(&t, pr, (const uint64_t(*)[2])keys, KB_LLM_SUMMARY, np, 48, "summaries", e);
        for (int i = 0; i < np; i++) free(pr[i]);
        cJSON *sa = cJSON_CreateArray();
        cJSON_DeleteItemFromObject(root, "summaries");
        cJSON_AddItemToObject(root, "summaries", sa);
        for (size_t i = 0; i < t.n && !s; i++) {
            const kb_entry *en = ent(&t, i);
            const char *v = count_words(en->text) > minw ? kb_llm_cache_get(&t.cache, KB_LLM_SUMMARY, en->offset, en->hash) : NULL;
            if (!v) continue;
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "id", (double)en->offset);
            cJSON_AddStringToObject(c, "summary", v);
            cJSON_AddItemToArray(sa, c);
            st->summaries++;
        }
        /* merge suggestions for near-duplicate pairs */
        np = 0;
        cJSON *da = cJSON_GetObjectItem(root, "near_duplicates"), *it;
        cJSON_ArrayForEach(it, da) {
            cJSON *a = cJSON_GetObjectItem(it, "a"), *b = cJSON_GetObjectItem(it, "b");
            long ra = cJSON_IsNumber(a) ? row_of(&t, (uint64_t)a->valuedouble) : -1;
            long rb = cJSON_IsNumber(b) ? row_of(&t, (uint64_t)b->valuedouble) : -1;
            if (ra < 0 || rb < 0 || (size_t)np >= t.n) continue;
            const kb_entry *ea = ent(&t, (size_t)ra), *eb = ent(&t, (size_t)rb);
            uint64_t ka = ea->offset ^ (eb->offset << 32 | eb->offset >> 32), kb = ea->hash ^ (eb->hash * 31);
            if (kb_llm_cache_get(&t.cache, KB_LLM_MERGE, ka, kb)) continue;
            keys[np][0] = ka;
            keys[np][1] = kb;
            if ((pr[np] = kb_llm_prompt_merge(o->llm, ea->title, ea->text, eb->title, eb->text))) np++;
        }
        if (!s) s = ask_batch(&t, pr, (const uint64_t(*)[2])keys, KB_LLM_MERGE, np, 60, "merge suggestions", e);
        for (int i = 0; i < np; i++) free(pr[i]);
        cJSON *ms = cJSON_CreateArray();
        cJSON_DeleteItemFromObject(root, "merge_suggestions");
        cJSON_AddItemToObject(root, "merge_suggestions", ms);
        cJSON_ArrayForEach(it, da) {
            cJSON *a = cJSON_GetObjectItem(it, "a"), *b = cJSON_GetObjectItem(it, "b");
            long ra = cJSON_IsNumber(a) ? row_of(&t, (uint64_t)a->valuedouble) : -1;
            long rb = cJSON_IsNumber(b) ? row_of(&t, (uint64_t)b->valuedouble) : -1;
            if (ra < 0 || rb < 0 || s) continue;
            const kb_entry *ea = ent(&t, (size_t)ra), *eb = ent(&t, (size_t)rb);
            const char *v = kb_llm_cache_get(&t.cache, KB_LLM_MERGE, ea->offset ^ (eb->offset << 32 | eb->offset >> 32),
                                             ea->hash ^ (eb->hash * 31));
            if (!v) continue;
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "a", (double)ea->offset);
            cJSON_AddNumberToObject(c, "b", (double)eb->offset);
            cJSON_AddStringToObject(c, "suggestion", v);
            cJSON_AddItemToArray(ms, c);
            st->merges++;
        }
        /* digests: each topic's five entries nearest its centroid */
        np = 0;
        int *dt = malloc(sizeof(int) * (size_t)(t.n_topics + 1));
        uint64_t *dkey = malloc(sizeof(uint64_t) * (size_t)(t.n_topics + 1));
        if (!dt || !dkey) { free(dt); free(dkey); free(pr); free(keys); s = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto out; }
        for (int tp = 0; tp < t.n_topics && !s; tp++) {
            if (t.topic_count[tp] < 3) continue;
            size_t best[5];
            float bsim[5];
            int nb = 0;
            for (size_t i = 0; i < t.n; i++) {
                if (t.topic[i] != tp) continue;
                float sim = central[i];   /* closeness to its own topic */
                int k;
                if (nb < 5) k = nb++;                 /* room left: append, then sift up */
                else if (sim <= bsim[4]) continue;    /* full: only a better one replaces the last */
                else k = 4;
                while (k > 0 && bsim[k - 1] < sim) { best[k] = best[k - 1]; bsim[k] = bsim[k - 1]; k--; }
                best[k] = i;
                bsim[k] = sim;
            }
            const char *ti[5], *tx[5];
            uint64_t key = HX_FNV_INIT;
            for (int k = 0; k < nb; k++) {
                ti[k] = ent(&t, best[k])->title;
                tx[k] = ent(&t, best[k])->text;
                key = hx_fnv1a_str(tx[k], key ^ ent(&t, best[k])->hash);
            }
            dt[np] = tp;
            dkey[np] = key;
            keys[np][0] = hx_fnv1a_str(t.topics[tp], HX_FNV_INIT);
            keys[np][1] = key;
            pr[np] = kb_llm_cache_get(&t.cache, KB_LLM_DIGEST, keys[np][0], key) ? NULL
                     : kb_llm_prompt_digest(o->llm, t.topics[tp], ti, tx, nb);
            np++;
        }
        int na = 0;
        for (int i = 0; i < np; i++)
            if (pr[i]) { pr[na] = pr[i]; keys[na][0] = keys[i][0]; keys[na][1] = keys[i][1]; na++; }
        if (!s) s = ask_batch(&t, pr, (const uint64_t(*)[2])keys, KB_LLM_DIGEST, na, 80, "digests", e);
        for (int i = 0; i < na; i++) free(pr[i]);
        cJSON *dg = cJSON_CreateArray();
        cJSON_DeleteItemFromObject(root, "digests");
        cJSON_AddItemToObject(root, "digests", dg);
        for (int i = 0; i < np && !s; i++) {
            const char *v = kb_llm_cache_get(&t.cache, KB_LLM_DIGEST, hx_fnv1a_str(t.topics[dt[i]], HX_FNV_INIT), dkey[i]);
            if (!v) continue;
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "topic", t.topics[dt[i]]);
            cJSON_AddStringToObject(c, "digest", v);
            cJSON_AddItemToArray(dg, c);
            st->digests++;
        }
        free(dt); free(dkey); free(pr); free(keys);
        if (s) goto out;
        cJSON_DeleteItemFromObject(root, "llm");
        cJSON_AddStringToObject(root, "llm", kb_llm_fingerprint(o->llm));
    }

    {
        tw = hx_now_s();
        char *out = cJSON_Print(root);
        if (!out) { s = hx_err(e, HX_ERR_NOMEM, "think: out of memory"); goto out; }
        s = hx_write_file_atomic(ipath, out, strlen(out), e);
        free(out);
        st->write_seconds += hx_now_s() - tw;
    }
    if (!s && print) kb_print_report(stdout, &t.log, root, t.n, t.n_topics);
out:
    st->seconds = hx_now_s() - t0;
    if (!s && o->progress)
        fprintf(stderr, "think: %zu rows, %.3f s: load %.3f s, classify %.3f s (TF-IDF rows %.3f s), write %.3f s\n",
                t.n, st->seconds, st->load_seconds, st->classify_seconds, st->tfidf_seconds, st->write_seconds);
    free(central); free(cprob); free(about);
    free(cls);
    free(mis);
    cJSON_Delete(root);
    free(json);
    think_free(&t);
    return s;
}
