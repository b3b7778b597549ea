/* classify.c — nearest topic centroid over embeddings or TF-IDF rows (see
 * classify.h). */
#include "kb/classify.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

kb_classify_opts kb_classify_defaults(void) {
    return (kb_classify_opts){.temperature = 0.05f, .min_members = 3, .max_topics = 512};
}

/* ---- TF-IDF rows ---- */

void kb_tfidf_free(kb_tfidf *x) {
    free(x->start); free(x->feat); free(x->w);
    memset(x, 0, sizeof *x);
}

/* The word reader's byte classes, from the C library's ctype at call time
 * (a word is a run of alphanumerics, '_' and non-ASCII bytes, lowercased):
 * lower[c] is c lowercased for a word byte, 0 for a separator (no word byte
 * lowercases to 0). */
typedef struct word_table { unsigned char lower[256]; } word_table;

static void word_table_init(word_table *t) {
    for (int c = 0; c < 256; c++)
        t->lower[c] = isalnum(c) || c == '_' || c >= 0x80 ? (unsigned char)tolower(c) : 0;
}

/* Appends the FNV-1a hashes of s's lowercased words to h; returns the new count. */
static size_t word_hashes(const word_table *t, const char *s, uint64_t *h, size_t m) {
    for (const unsigned char *p = (const unsigned char *)s; p && *p;) {
        while (*p && !t->lower[*p]) p++;
        if (!*p) break;
        uint64_t v = HX_FNV_INIT;
        for (unsigned char c; (c = t->lower[*p]); p++) v = hx_fnv1a_byte(v, c);
        h[m++] = v;
    }
    return m;
}

static int u64_cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void sort_u64(uint64_t *h, size_t n) {
    if (n > 96) { qsort(h, n, sizeof *h, u64_cmp); return; }
    for (size_t i = 1; i < n; i++) {   /* a note's few dozen words: insertion sort */
        uint64_t v = h[i];
        size_t j = i;
        for (; j > 0 && h[j - 1] > v; j--) h[j] = h[j - 1];
        h[j] = v;
    }
}

/* Rows are read in chunks of TF_CHUNK, each chunk into its own buffer: a
 * row's words hashed, sorted and counted in place, so the buffer holds the
 * chunk's (hash, tf) pairs row after row, packed. */
enum { TF_CHUNK = 512 };

typedef struct tf_chunk {
    uint64_t *h;      /* distinct word hashes, each row's ascending */
    uint32_t *tf;     /* their counts in the row */
    size_t nnz;
    bool nomem;
} tf_chunk;

typedef struct tf_job {
    const char *const *title, *const *text;
    size_t n;
    word_table wt;
    tf_chunk *ch;     /* (n + TF_CHUNK - 1) / TF_CHUNK */
    size_t *cnt;      /* n: distinct words of row i */
    /* the weights pass */
    const kb_tfidf *x;
    const uint32_t *id;      /* vocabulary slot -> feature (rank of its hash) */
    const double *idf;       /* feature -> ln((1 + n) / (1 + df)) + 1 */
    float *w;                /* nnz: tf on entry, the weight on return */
    uint32_t *feat;          /* nnz: slot on entry, the feature on return */
} tf_job;

static void tf_read_chunk(void *ctx, int64_t c, int thread) {
    (void)thread;
    tf_job *j = ctx;
    size_t r0 = (size_t)c * TF_CHUNK, r1 = r0 + TF_CHUNK < j->n ? r0 + TF_CHUNK : j->n, cap = 0;
    /* a string of L bytes holds at most L / 2 + 1 words */
    for (size_t i = r0; i < r1; i++) {
        const char *ti = j->title ? j->title[i] : NULL, *tx = j->text ? j->text[i] : NULL;
        size_t need = (ti ? strlen(ti) : 0) / 2 + (tx ? strlen(tx) : 0) / 2 + 2;
        if (need > cap) cap = need;   /* the most any one row needs: rows are packed as read */
    }
    tf_chunk *ch = &j->ch[c];
    size_t room = cap * 2 + 1024, m = 0;
    ch->h = malloc(sizeof *ch->h * room);
    ch->tf = malloc(sizeof *ch->tf * room);
    if (!ch->h || !ch->tf) { ch->nomem = true; return; }
    for (size_t i = r0; i < r1; i++) {
        const char *ti = j->title ? j->title[i] : NULL, *tx = j->text ? j->text[i] : NULL;
        size_t need = (ti ? strlen(ti) : 0) / 2 + (tx ? strlen(tx) : 0) / 2 + 2;
        if (m + need > room) {
            room = (m + need) * 2;
            uint64_t *h = realloc(ch->h, sizeof *h * room);
            if (h) ch->h = h;
            uint32_t *tf = h ? realloc(ch->tf, sizeof *tf * room) : NULL;
            if (tf) ch->tf = tf;
            if (!h || !tf) { ch->nomem = true; return; }
        }
        size_t s = m;
        m = word_hashes(&j->wt, ti, ch->h, m);
        m = word_hashes(&j->wt, tx, ch->h, m);
        sort_u64(ch->h + s, m - s);
        size_t k = s;
        for (size_t q = s; q < m;) {
            size_t r = q;
            while (r < m && ch->h[r] == ch->h[q]) r++;
            ch->h[k] = ch->h[q];
            ch->tf[k++] = (uint32_t)(r - q);
            q = r;
        }
        j->cnt[i] = k - s;
        m = k;
    }
    ch->nnz = m;
}

/* w = (1 + ln tf) * idf, each row L2-normalized: the arithmetic (double, the
 * row's words in feature order, the float rounding of w before the scale) is
 * what the weights have always been, so they are the same bits. */
static void tf_weigh_chunk(void *ctx, int64_t c, int thread) {
    (void)thread;
    const tf_job *j = ctx;
    size_t r0 = (size_t)c * TF_CHUNK, r1 = r0 + TF_CHUNK < j->n ? r0 + TF_CHUNK : j->n;
    for (size_t i = r0; i < r1; i++) {
        size_t a = j->x->start[i], b = j->x->start[i + 1];
        double nn = 0;
        for (size_t k = a; k < b; k++) {
            uint32_t f = j->id[j->feat[k]];
            double tf = j->w[k];
            double w = (1.0 + log(tf)) * j->idf[f];
            j->feat[k] = f;
            j->w[k] = (float)w;
            nn += w * w;
        }
        float inv = nn > 0 ? (float)(1.0 / sqrt(nn)) : 0.0f;
        for (size_t k = a; k < b; k++) j->w[k] *= inv;
    }
}

/* The vocabulary: an open-addressing table of word hashes (the first slot
 * past the hash's home, wrapping); df 0 marks an empty slot. */
typedef struct vslot { uint64_t key; uint32_t df, id; } vslot;

static size_t vslot_home(uint64_t key, size_t mask) { return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & mask; }

hx_status kb_tfidf_build(hx_pool *pool, const char *const *title, const char *const *text, size_t n, kb_tfidf *out,
                         hx_error *e) {
    memset(out, 0, sizeof *out);
    size_t n_ch = (n + TF_CHUNK - 1) / TF_CHUNK;
    tf_job j = {.title = title, .text = text, .n = n};
    word_table_init(&j.wt);
    j.ch = calloc(n_ch + 1, sizeof *j.ch);
    j.cnt = calloc(n + 1, sizeof *j.cnt);
    vslot *tab = NULL;
    uint64_t *keys = NULL;
    uint32_t *id = NULL;
    double *idf = NULL;
    out->n = n;
    out->start = calloc(n + 1, sizeof *out->start);
    if (!j.ch || !j.cnt || !out->start) goto nomem;
    /* 1. each row's distinct words and their counts (in parallel, by chunks) */
    hx_pool_run(pool, (int64_t)n_ch, tf_read_chunk, &j);
    for (size_t c = 0; c < n_ch; c++)
        if (j.ch[c].nomem) goto nomem;
    for (size_t i = 0; i < n; i++) out->start[i + 1] = out->start[i] + j.cnt[i];
    size_t nnz = out->start[n];
    out->feat = malloc(sizeof *out->feat * (nnz + 1));
    out->w = malloc(sizeof *out->w * (nnz + 1));
    /* 2. df per distinct word: rows holding it (each row's words are
     * distinct). The table doubles when half full, so it stays the size of
     * the vocabulary, not of the word count; a slot's number is final only
     * after the last doubling, so each word is noted by its hash first. */
    size_t cap = 4096;
    tab = calloc(cap, sizeof *tab);
    if (!out->feat || !out->w || !tab) goto nomem;
    size_t nv = 0, q = 0;
    for (size_t c = 0; c < n_ch; c++) {
        tf_chunk *ch = &j.ch[c];
        for (size_t k = 0; k < ch->nnz; k++, q++) {
            if (2 * (nv + 1) > cap) {
                vslot *nt = calloc(2 * cap, sizeof *nt);
                if (!nt) goto nomem;
                for (size_t s = 0; s < cap; s++) {
                    if (!tab[s].df) continue;
                    size_t d = vslot_home(tab[s].key, 2 * cap - 1);
                    while (nt[d].df) d = (d + 1) & (2 * cap - 1);
                    nt[d] = tab[s];
                }
                free(tab);
                tab = nt;
                cap *= 2;
            }
            size_t s = vslot_home(ch->h[k], cap - 1);
            while (tab[s].df && tab[s].key != ch->h[k]) s = (s + 1) & (cap - 1);
            if (!tab[s].df) { tab[s].key = ch->h[k]; nv++; }
            tab[s].df++;
            out->w[q] = (float)ch->tf[k];        /* tf, until step 4 */
        }
    }
    if (nv > UINT32_MAX || cap > UINT32_MAX) {
        for (size_t c = 0; c < n_ch; c++) { free(j.ch[c].h); free(j.ch[c].tf); }
        free(tab); free(j.ch); free(j.cnt); kb_tfidf_free(out);
        return hx_err(e, HX_ERR_ARG, "classify: %zu distinct words", nv);
    }
    /* each word's slot in the final table, from the hash it was noted by */
    q = 0;
    for (size_t c = 0; c < n_ch; c++) {
        tf_chunk *ch = &j.ch[c];
        for (size_t k = 0; k < ch->nnz; k++, q++) {
            size_t s = vslot_home(ch->h[k], cap - 1);
            while (tab[s].key != ch->h[k] || !tab[s].df) s = (s + 1) & (cap - 1);
            out->feat[q] = (uint32_t)s;          /* the slot, until step 4 */
        }
        free(ch->h); free(ch->tf);
        ch->h = NULL; ch->tf = NULL;
    }
    /* 3. features numbered in ascending hash order (the rank of the word's
     * hash): the order every sum over a row's features or over the
     * vocabulary runs in */
    keys = malloc(sizeof *keys * (nv + 1));
    id = malloc(sizeof *id * cap);
    idf = malloc(sizeof *idf * (nv + 1));
    if (!keys || !id || !idf) goto nomem;
    size_t m = 0;
    for (size_t s = 0; s < cap; s++)
        if (tab[s].df) keys[m++] = tab[s].key;
    qsort(keys, nv, sizeof *keys, u64_cmp);
    for (size_t f = 0; f < nv; f++) {
        size_t s = vslot_home(keys[f], cap - 1);
        while (tab[s].key != keys[f] || !tab[s].df) s = (s + 1) & (cap - 1);
        id[s] = (uint32_t)f;
        idf[f] = log((1.0 + (double)n) / (1.0 + (double)tab[s].df)) + 1.0;
    }
    out->n_feat = (uint32_t)nv;
    /* 4. weights, row by row (in parallel) */
    j.x = out; j.id = id; j.idf = idf; j.w = out->w; j.feat = out->feat;
    hx_pool_run(pool, (int64_t)n_ch, tf_weigh_chunk, &j);
    free(tab); free(keys); free(id); free(idf); free(j.ch); free(j.cnt);
    return HX_OK;
nomem:
    for (size_t c = 0; j.ch && c < n_ch; c++) { free(j.ch[c].h); free(j.ch[c].tf); }
    free(tab); free(keys); free(id); free(idf); free(j.ch); free(j.cnt);
    kb_tfidf_free(out);
    return hx_err(e, HX_ERR_NOMEM, "classify: out of memory");
}

/* ---- scores: leave-one-out cosines to the candidate centroids ---- */

typedef struct cjob {
    const float *vec;        /* dense rows (n, dim), or NULL */
    int dim;
    const kb_tfidf *x;       /* sparse rows, or NULL */
    const int *topic;
    const int *cand_of;      /* topic -> candidate index or -1 */
    const double *sum;       /* dense: (n_cand, dim) member vector sums */
    const size_t *cs_start;  /* sparse: feature f's sums are cs_c/cs_v[cs_start[f]..cs_start[f+1]) */
    const int *cs_c;
    const double *cs_v;
    const double *norm2;     /* sparse: |sum|^2 per candidate */
    const int *count;        /* n_cand members */
    int n_cand;
    const int *cand_topic;   /* candidate -> topic */
    float temp;
    size_t stride;           /* scores_only: row = task * stride */
    float *scores;           /* scores_only: (tasks, n_cand) */
    const float *cos_all;    /* (n, n_cand): every row's scores, computed for the fit; NULL: computed per row */
    kb_class *out;
    kb_class_probs *probs;   /* NULL, or the chosen topics' probabilities per row */
    const int *probs_cand;   /* probs->topic[k] -> candidate index or -1 */
    double *scratch;         /* (threads, n_cand) */
} cjob;

/* cos[c] for row i; its own topic's centroid without itself (a member alone: -1) */
static void row_scores(const cjob *j, size_t i, float *cos, double *dot) {
    int own = j->cand_of[j->topic[i]];
    if (j->x) {
        const kb_tfidf *x = j->x;
        double vv = 0;
        for (int c = 0; c < j->n_cand; c++) dot[c] = 0;
        for (size_t k = x->start[i]; k < x->start[i + 1]; k++) {
            uint32_t f = x->feat[k];
            double w = x->w[k];
            vv += w * w;
            for (size_t q = j->cs_start[f]; q < j->cs_start[f + 1]; q++) dot[j->cs_c[q]] += w * j->cs_v[q];
        }
        for (int c = 0; c < j->n_cand; c++) {
            double d = dot[c], nn = j->norm2[c];
            if (c == own) {
                if (j->count[c] <= 1) { cos[c] = -1.0f; continue; }
                nn += vv - 2 * d;   /* |S - v|^2 */
                d -= vv;            /* (S - v) . v */
            }
            cos[c] = nn > 1e-12 ? (float)(d / sqrt(nn)) : 0.0f;
        }
        return;
    }
    const float *v = j->vec + i * (size_t)j->dim;
    for (int c = 0; c < j->n_cand; c++) {
        const double *s = j->sum + (size_t)c * j->dim;
        double d = 0, nn = 0;
        bool self = c == own;
        if (self && j->count[c] <= 1) { cos[c] = -1.0f; continue; }
        for (int k = 0; k < j->dim; k++) {
            double y = s[k] - (self ? v[k] : 0.0);   /* leave the entry out of its own centroid */
            d += y * v[k];
            nn += y * y;
        }
        cos[c] = nn > 0 ? (float)(d / sqrt(nn)) : 0.0f;
    }
}

static void score_row(void *ctx, int64_t k, int thread) {
    const cjob *j = ctx;
    row_scores(j, (size_t)k * j->stride, j->scores + (size_t)k * j->n_cand, j->scratch + (size_t)thread * 2 * j->n_cand);
}

static void classify_row(void *ctx, int64_t i, int thread) {
    const cjob *j = ctx;
    double *dot = j->scratch + (size_t)thread * 2 * j->n_cand;
    const float *cos = j->cos_all ? j->cos_all + (size_t)i * j->n_cand : NULL;   /* the fit's, kept */
    if (!cos) {
        float *c = (float *)(dot + j->n_cand);
        row_scores(j, (size_t)i, c, dot);
        cos = c;
    }
    int own = j->cand_of[j->topic[i]];
    int best = 0;
    float mx = cos[0];
    for (int c = 1; c < j->n_cand; c++)
        if (cos[c] > mx) { mx = cos[c]; best = c; }
    double z = 0;
    for (int c = 0; c < j->n_cand; c++) z += exp((double)(cos[c] - mx) / j->temp);
    kb_class *o = &j->out[i];
    o->row = (size_t)i;
    o->topic = j->topic[i];
    o->predicted = j->cand_topic[best];
    o->prob = (float)(1.0 / z);
    o->prob_current = own >= 0 ? (float)(exp((double)(cos[own] - mx) / j->temp) / z) : 0.0f;
    if (j->probs) {
        float *p = j->probs->p + (size_t)i * j->probs->n_topic;
        for (int k = 0; k < j->probs->n_topic; k++) {
            int c = j->probs_cand[k];
            p[k] = c >= 0 ? (float)(exp((double)(cos[c] - mx) / j->temp) / z) : 0.0f;
        }
    }
}

/* The fit's objective: the mean negative log-likelihood of the own topics
 * under softmax(beta cos), over the sample's rows with an own topic. Its
 * slope in beta is E[cos] - cos_own (increasing: the NLL is convex in beta),
 * its curvature Var[cos]. Rows are summed in fixed chunks on the pool and
 * the chunks in order, so the sums (and the fit) do not depend on the
 * number of threads. */
enum { FIT_CHUNK = 2048 };

typedef struct fit_job {
    const float *sc;     /* (m, nc) scores */
    const int *own;      /* (m) own candidate, or -1 */
    size_t m;
    int nc;
    double beta;
    double *part;        /* (chunks, 3): slope sum, curvature sum, rows used */
} fit_job;

static void fit_chunk(void *ctx, int64_t ch, int thread) {
    (void)thread;
    const fit_job *f = ctx;
    size_t r0 = (size_t)ch * FIT_CHUNK, r1 = r0 + FIT_CHUNK < f->m ? r0 + FIT_CHUNK : f->m;
    double g = 0, h = 0, used = 0;
    for (size_t r = r0; r < r1; r++) {
        if (f->own[r] < 0) continue;
        const float *c = f->sc + r * (size_t)f->nc;
        float mx = c[0];
        for (int k = 1; k < f->nc; k++) if (c[k] > mx) mx = c[k];
        double z = 0, ez = 0, ez2 = 0;
        for (int k = 0; k < f->nc; k++) {
            double p = exp(f->beta * (c[k] - mx));
            z += p; ez += p * c[k]; ez2 += p * c[k] * c[k];
        }
        double mean = ez / z;
        g += mean - c[f->own[r]];
        h += ez2 / z - mean * mean;
        used++;
    }
    f->part[3 * ch] = g; f->part[3 * ch + 1] = h; f->part[3 * ch + 2] = used;
}

/* slope and curvature of the mean NLL at beta (0 and 0 without rows) */
static void nll_slope(hx_pool *pool, fit_job *f, double beta, double *slope, double *curv) {
    size_t chunks = (f->m + FIT_CHUNK - 1) / FIT_CHUNK;
    f->beta = beta;
    hx_pool_run(pool, (int64_t)chunks, fit_chunk, f);
    double g = 0, h = 0, used = 0;
    for (size_t k = 0; k < chunks; k++) { g += f->part[3 * k]; h += f->part[3 * k + 1]; used += f->part[3 * k + 2]; }
    *slope = used ? g / used : 0;
    *curv = used ? h / used : 0;
}

typedef struct tc { int topic, count; } tc;
static int tc_desc(const void *a, const void *b) {
    const tc *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return x->topic - y->topic;
}

hx_status kb_classify_centroid_rows(hx_pool *pool, const float *vec, int dim, const kb_tfidf *x, size_t n,
                                    const int *topic, int n_topics, const kb_classify_opts *o, kb_class *out,
                                    int *n_candidates, float *temperature, kb_class_probs *probs, hx_error *e) {
    kb_classify_opts op = o ? *o : kb_classify_defaults();
    *n_candidates = 0;
    if (temperature) *temperature = op.temperature > 0 ? op.temperature : 0.05f;
    for (size_t i = 0; i < n; i++) out[i] = (kb_class){.row = i, .topic = topic[i], .predicted = -1};
    if (probs) memset(probs->p, 0, sizeof(float) * n * (size_t)(probs->n_topic > 0 ? probs->n_topic : 0));
    if (n == 0 || n_topics <= 0) return HX_OK;
    if (!vec == !x || (x && x->n != n)) return hx_err(e, HX_ERR_ARG, "classify: give dense vectors or TF-IDF rows of n");
    tc *counts = calloc((size_t)n_topics, sizeof *counts);
    int *cand_of = malloc(sizeof(int) * (size_t)n_topics);
    if (!counts || !cand_of) { free(counts); free(cand_of); return hx_err(e, HX_ERR_NOMEM, "classify: out of memory"); }
    for (int t = 0; t < n_topics; t++) { counts[t].topic = t; cand_of[t] = -1; }
    for (size_t i = 0; i < n; i++) {
        if (topic[i] < 0 || topic[i] >= n_topics) {
            free(counts); free(cand_of);
            return hx_err(e, HX_ERR_ARG, "classify: row %zu has topic %d of %d", i, topic[i], n_topics);
        }
        counts[topic[i]].count++;
    }
    qsort(counts, (size_t)n_topics, sizeof *counts, tc_desc);
    int nc = 0;
    while (nc < n_topics && nc < op.max_topics && counts[nc].count >= op.min_members) nc++;
    if (nc < 2) { free(counts); free(cand_of); return HX_OK; }   /* nothing to choose between */
    int threads = hx_pool_threads(pool);
    int *cand_topic = malloc(sizeof(int) * (size_t)nc), *cnt = malloc(sizeof(int) * (size_t)nc), *cs_c = NULL, *own = NULL;
    double *sum = NULL, *cs_v = NULL, *norm2 = NULL;
    size_t *cs_start = NULL;
    int *touched = NULL, *probs_cand = NULL;
    float *scores = NULL;
    double *scratch = malloc(sizeof(double) * 2 * (size_t)nc * (size_t)threads);
    hx_status st = HX_OK;
    if (!cand_topic || !cnt || !scratch) goto nomem;
    for (int c = 0; c < nc; c++) { cand_topic[c] = counts[c].topic; cnt[c] = counts[c].count; cand_of[counts[c].topic] = c; }
    if (probs) {
        if (!(probs_cand = malloc(sizeof(int) * (size_t)(probs->n_topic + 1)))) goto nomem;
        for (int k = 0; k < probs->n_topic; k++) {
            int tp = probs->topic[k];
            probs_cand[k] = tp >= 0 && tp < n_topics ? cand_of[tp] : -1;
        }
    }
    if (vec) {
        if (!(sum = calloc((size_t)nc * (size_t)dim, sizeof *sum))) goto nomem;
        for (size_t i = 0; i < n; i++) {
            int c = cand_of[topic[i]];
            if (c < 0) continue;
            double *s = sum + (size_t)c * dim;
            for (int d = 0; d < dim; d++) s[d] += vec[i * (size_t)dim + d];
        }
    } else {
        /* centroid sums feature-major, sparse: for each feature, the
         * candidates whose rows hold it and their summed weight */
        size_t nnz = 0;
        for (size_t i = 0; i < n; i++) if (cand_of[topic[i]] >= 0) nnz += x->start[i + 1] - x->start[i];
        touched = malloc(sizeof *touched * (size_t)nc);
        cs_c = malloc(sizeof *cs_c * (nnz + 1));
        cs_v = malloc(sizeof *cs_v * (nnz + 1));
        cs_start = calloc((size_t)x->n_feat + 2, sizeof *cs_start);
        norm2 = calloc((size_t)nc, sizeof *norm2);
        if (!touched || !cs_c || !cs_v || !cs_start || !norm2) goto nomem;
        /* counting sort by feature: cs_start[f + 1] counts, then prefix sums */
        for (size_t i = 0; i < n; i++)
            if (cand_of[topic[i]] >= 0)
                for (size_t k = x->start[i]; k < x->start[i + 1]; k++) cs_start[x->feat[k] + 2]++;
        for (uint32_t f = 0; f < x->n_feat; f++) cs_start[f + 2] += cs_start[f + 1];
        for (size_t i = 0; i < n; i++) {   /* rows in order: each feature's entries by row */
            int c = cand_of[topic[i]];
            if (c < 0) continue;
            for (size_t k = x->start[i]; k < x->start[i + 1]; k++) {
                size_t q = cs_start[x->feat[k] + 1]++;
                cs_c[q] = c;
                cs_v[q] = x->w[k];
            }
        }
        /* cs_start[f] is now feature f's first entry; sum each run's weights
         * per candidate (all of the run read before any is written back, so
         * compacting in place is safe) */
        double *acc = scratch;   /* nc, zero between runs */
        for (int c = 0; c < nc; c++) acc[c] = 0;
        size_t wq = 0;
        for (uint32_t f = 0; f < x->n_feat; f++) {
            size_t a = cs_start[f], b = cs_start[f + 1];
            int nt = 0;
            for (size_t q = a; q < b; q++) {   /* TF-IDF weights are > 0: a sum is 0 until touched */
                if (!(cs_v[q] > 0)) continue;
                if (acc[cs_c[q]] == 0) touched[nt++] = cs_c[q];
                acc[cs_c[q]] += cs_v[q];
            }
            cs_start[f] = wq;
            for (int k = 0; k < nt; k++) {
                int c = touched[k];
                norm2[c] += acc[c] * acc[c];
                cs_c[wq] = c;
                cs_v[wq++] = acc[c];
                acc[c] = 0;
            }
        }
        cs_start[x->n_feat] = wq;
    }
    cjob j = {vec, dim, x, topic, cand_of, sum, cs_start, cs_c, cs_v, norm2, cnt, nc, cand_topic,
              op.temperature, 1, NULL, NULL, out, probs, probs_cand, scratch};
    if (op.temperature <= 0) {
        /* fit 1/T on a strided sample of rows: bisection on the NLL's slope in log beta */
        size_t stride = ((size_t)nc * n + 3999999) / 4000000;
        if (stride < 1) stride = 1;
        size_t m = (n + stride - 1) / stride;
        scores = malloc(sizeof *scores * m * (size_t)nc);
        own = malloc(sizeof *own * m);
        if (!scores || !own) goto nomem;
        j.stride = stride;
        j.scores = scores;
        hx_pool_run(pool, (int64_t)m, score_row, &j);
        size_t used = 0;
        for (size_t r = 0; r < m; r++) {
            int c = cand_of[topic[r * stride]];
            own[r] = c >= 0 && cnt[c] > 1 ? c : -1;
            used += own[r] >= 0;
        }
        /* u = ln beta in [0, ln 100] (T in [0.01, 1]): Newton steps on the
         * slope in u (its derivative is beta * curvature), kept inside the
         * bracket where the slope changes sign, bisection when a step would
         * leave it; stops when u moves less than 1e-12 (about 6 steps where
         * bisection alone took 40, each a pass over the sample's exps) */
        fit_job fj = {scores, own, m, nc, 0, NULL};
        double lo = log(1.0), hi = log(100.0), g, h;
        fj.part = malloc(sizeof *fj.part * 3 * ((m + FIT_CHUNK - 1) / FIT_CHUNK + 1));
        if (!fj.part) goto nomem;
        if (used == 0) j.temp = 0.05f;
        else if (nll_slope(pool, &fj, exp(hi), &g, &h), g <= 0) j.temp = (float)exp(-hi);
        else if (nll_slope(pool, &fj, exp(lo), &g, &h), g >= 0) j.temp = (float)exp(-lo);
        else {
            double u = (lo + hi) / 2;
            for (int it = 0; it < 60 && hi - lo > 1e-12; it++) {
                nll_slope(pool, &fj, exp(u), &g, &h);
                if (g < 0) lo = u; else hi = u;
                double d = exp(u) * h, next = d > 0 ? u - g / d : (lo + hi) / 2;
                if (!(next > lo && next < hi)) next = (lo + hi) / 2;
                bool done = fabs(next - u) < 1e-12;
                u = next;
                if (done) break;
            }
            j.temp = (float)exp(-u);
        }
        free(fj.part);
        if (stride == 1) j.cos_all = scores;   /* the sample was every row: not scored twice */
    }
    hx_pool_run(pool, (int64_t)n, classify_row, &j);
    *n_candidates = nc;
    if (temperature) *temperature = j.temp;
    goto done;
nomem:
    st = hx_err(e, HX_ERR_NOMEM, "classify: out of memory");
done:
    free(counts); free(cand_of); free(cand_topic); free(cnt); free(sum); free(scratch);
    free(touched); free(cs_c); free(cs_v); free(cs_start); free(norm2); free(scores); free(own); free(probs_cand);
    return st;
}

hx_status kb_classify_centroid(hx_pool *pool, const float *vec, size_t n, int dim, const int *topic, int n_topics,
                               const kb_classify_opts *o, kb_class *out, int *n_candidates, hx_error *e) {
    kb_classify_opts op = o ? *o : kb_classify_defaults();
    if (op.temperature <= 0) op.temperature = 0.05f;
    return kb_classify_centroid_rows(pool, vec, dim, NULL, n, topic, n_topics, &op, out, n_candidates, NULL, NULL, e);
}

static int mis_desc(const void *a, const void *b, void *ctx) {
    const kb_class *cls = ctx, *x = &cls[*(const size_t *)a], *y = &cls[*(const size_t *)b];
    if (x->prob != y->prob) return x->prob < y->prob ? 1 : -1;
    return x->row < y->row ? -1 : x->row > y->row;
}

size_t kb_misfiled(const kb_class *cls, size_t n, float threshold, size_t *idx) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (cls[i].predicted >= 0 && cls[i].predicted != cls[i].topic && cls[i].prob > threshold) idx[m++] = i;
    qsort_r(idx, m, sizeof *idx, mis_desc, (void *)cls);
    return m;
}
