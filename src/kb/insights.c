/* insights.c — all-pairs similarity as blocked products over unit vectors,
 * top-k per finding kind, topic overlaps; the report; one full pass.
 * Memory is O(n x dim) throughout: no n x n or topics x topics matrix. */
#include "kb/kb.h"
#include "core/core.h"
#include "kb/allpairs.h"
#include "quant/quant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define TILE KB_TILE

kb_opts kb_default_opts(const kb_embedder *em) {
    /* MiniLM's thresholds from the design; the lexical embedder's similarities
     * run lower (shared words only), calibrated on examples/kb */
    if (!strcmp(em->name, "lexical-384"))
        return (kb_opts){.dup_threshold = 0.88f, .link_low = 0.36f, .link_high = 0.88f, .topic_threshold = 0.45f,
                         .max_dups = 20, .max_links = 50, .max_overlaps = KB_DEFAULT_MAX_OVERLAPS};
    return (kb_opts){.dup_threshold = 0.92f, .link_low = 0.75f, .link_high = 0.92f, .topic_threshold = 0.6f,
                     .max_dups = 20, .max_links = 50, .max_overlaps = KB_DEFAULT_MAX_OVERLAPS};
}

/* A bounded min-heap of the best pairs. */
typedef struct topk { kb_pair *p; int n, k; } topk;

static void heap_down(kb_pair *h, int n, int i) {
    for (;;) {
        int m = i, l = 2 * i + 1, r = l + 1;
        if (l < n && h[l].sim < h[m].sim) m = l;
        if (r < n && h[r].sim < h[m].sim) m = r;
        if (m == i) return;
        kb_pair t = h[i]; h[i] = h[m]; h[m] = t; i = m;
    }
}

static void topk_push(topk *t, kb_pair p) {
    if (t->k <= 0) return;
    if (t->n < t->k) {
        int i = t->n++;
        t->p[i] = p;
        while (i > 0 && t->p[(i - 1) / 2].sim > t->p[i].sim) {
            kb_pair x = t->p[i]; t->p[i] = t->p[(i - 1) / 2]; t->p[(i - 1) / 2] = x;
            i = (i - 1) / 2;
        }
    } else if (p.sim > t->p[0].sim) {
        t->p[0] = p;
        heap_down(t->p, t->n, 0);
    }
}

/* One blocked all-pairs product: rows [0, n_rows) against columns (row, n) of
 * vec (n x dim, unit rows), a pair at a time into per-thread top-k heaps.
 * Entries mode (topic != NULL): near-duplicates, cross-links, and the overlaps
 * of two single-entry topics (their centroids are the entries themselves, so
 * the pair is scored here and the topic pass skips it). Topics mode: topic
 * centroids, overlaps only. */
typedef struct job {
    const float *vec;     /* (n, dim) */
    size_t n_rows, n;
    int dim;
    const kb_opts *o;
    const int *topic;     /* entries mode: topic id per row; NULL in topics mode */
    const uint8_t *single;/* entries mode: 1 where the row's topic has this one entry */
    const int *row_topic; /* topics mode: topic id per row */
    topk *dups, *links, *over; /* per thread */
    float *scratch;       /* per thread: TILE*TILE sims + dim*TILE transposed tile */
    void (*kernel)(const float *, int, const float *, int, float *);
} job;

static kb_pair topic_pair(int ta, int tb, float s) {
    return ta < tb ? (kb_pair){.sim = s, .ia = ta, .ib = tb} : (kb_pair){.sim = s, .ia = tb, .ib = ta};
}

/* Row tile `task` against every column tile at or after it. */
static void tile_task(void *ctx, int64_t task, int thread) {
    job *j = ctx;
    size_t i0 = (size_t)task * TILE, i1 = i0 + TILE < j->n_rows ? i0 + TILE : j->n_rows;
    const int D = j->dim;
    const kb_opts *o = j->o;
    float *sims = j->scratch + (size_t)thread * (TILE * TILE + (size_t)D * TILE);
    float *bt = sims + TILE * TILE; /* (D, TILE): the column tile transposed */
    for (size_t j0 = i0; j0 < j->n; j0 += TILE) {
        size_t j1 = j0 + TILE < j->n ? j0 + TILE : j->n;
        for (size_t b = j0; b < j0 + TILE; b++)
            for (int k = 0; k < D; k++) bt[(size_t)k * TILE + (b - j0)] = b < j1 ? j->vec[b * (size_t)D + k] : 0.0f;
        j->kernel(j->vec + i0 * (size_t)D, (int)(i1 - i0), bt, D, sims);
        if (j->topic) {
            for (size_t a = i0; a < i1; a++)
                for (size_t b = j0 > a + 1 ? j0 : a + 1; b < j1; b++) {
                    float s = sims[(a - i0) * TILE + (b - j0)];
                    if (s > o->dup_threshold) topk_push(&j->dups[thread], (kb_pair){.sim = s, .ia = (int)a, .ib = (int)b});
                    else if (s >= o->link_low && s <= o->link_high && j->topic[a] != j->topic[b])
                        topk_push(&j->links[thread], (kb_pair){.sim = s, .ia = (int)a, .ib = (int)b});
                    if (s > o->topic_threshold && j->single[a] && j->single[b])
                        topk_push(&j->over[thread], topic_pair(j->topic[a], j->topic[b], s));
                }
        } else {
            for (size_t a = i0; a < i1; a++)
                for (size_t b = j0 > a + 1 ? j0 : a + 1; b < j1; b++) {
                    float s = sims[(a - i0) * TILE + (b - j0)];
                    if (s > o->topic_threshold)
                        topk_push(&j->over[thread], topic_pair(j->row_topic[a], j->row_topic[b], s));
                }
        }
    }
}

static int pair_desc(const void *x, const void *y) {
    const kb_pair *a = x, *b = y;
    if (a->sim != b->sim) return a->sim < b->sim ? 1 : -1;
    return a->ia != b->ia ? a->ia - b->ia : a->ib - b->ib;
}

/* Merge per-thread heaps into the global best k, sorted. */
static kb_pair *merge(topk *t, int nt, int k, int *n_out) {
    topk all = {calloc((size_t)(k > 0 ? k : 1), sizeof(kb_pair)), 0, k};
    if (!all.p) { *n_out = 0; return NULL; }
    for (int i = 0; i < nt; i++)
        for (int q = 0; q < t[i].n; q++) topk_push(&all, t[i].p[q]);
    qsort(all.p, (size_t)all.n, sizeof *all.p, pair_desc);
    *n_out = all.n;
    return all.p;
}

void kb_insights_free(kb_insights *in) {
    free(in->dups); free(in->links); free(in->overlaps);
    for (int i = 0; i < in->n_topics; i++) free(in->topics[i]);
    free(in->topics);
    memset(in, 0, sizeof *in);
}

static uint64_t str_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Distinct topics in order of first appearance, through an open-addressing
 * hash map: O(n) for n entries however many topics there are. topic[i] gets
 * entry i's id, count[id] its entries. */
static hx_status topic_ids(const kb_log *log, const size_t *idx, size_t n, kb_insights *out, int *topic, int **count_out,
                           hx_error *e) {
    size_t cap = 64;
    while (cap < 2 * n) cap *= 2;
    int *slot = malloc(cap * sizeof *slot), *count = calloc(n ? n : 1, sizeof *count);
    out->topics = malloc((n ? n : 1) * sizeof *out->topics);
    if (!slot || !count || !out->topics) { free(slot); free(count); return hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); }
    memset(slot, 0xff, cap * sizeof *slot); /* -1: empty */
    for (size_t i = 0; i < n; i++) {
        const char *tp = log->e[idx[i]].topic;
        size_t h = (size_t)str_hash(tp) & (cap - 1);
        while (slot[h] >= 0 && strcmp(out->topics[slot[h]], tp)) h = (h + 1) & (cap - 1);
        if (slot[h] < 0) {
            char *name = strdup(tp);
            if (!name) { free(slot); free(count); return hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); }
            slot[h] = out->n_topics;
            out->topics[out->n_topics++] = name;
        }
        topic[i] = slot[h];
        count[slot[h]]++;
    }
    free(slot);
    *count_out = count;
    return HX_OK;
}

/* Unit centroids of the topics with two or more entries, (n_multi, dim),
 * each accumulated once in double over its own entries; row r is topic
 * multi[r]. Single-entry topics need no centroid (their entry's vector is it). */
static hx_status multi_centroids(const int *topic, const int *count, const float *vec, size_t n, int dim, int T,
                                 float **cent_out, int **multi_out, int *n_multi_out, hx_error *e) {
    int *row = malloc((size_t)(T ? T : 1) * sizeof *row), *multi = malloc((size_t)(T ? T : 1) * sizeof *multi);
    int n_multi = 0;
    if (!row || !multi) { free(row); free(multi); return hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); }
    for (int t = 0; t < T; t++) {
        row[t] = count[t] > 1 ? n_multi : -1;
        if (count[t] > 1) multi[n_multi++] = t;
    }
    double *acc = calloc((size_t)(n_multi ? n_multi : 1) * (size_t)dim, sizeof *acc);
    float *cent = malloc((size_t)(n_multi ? n_multi : 1) * (size_t)dim * sizeof *cent);
    if (!acc || !cent) { free(row); free(multi); free(acc); free(cent); return hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); }
    for (size_t i = 0; i < n; i++) {
        int r = row[topic[i]];
        if (r < 0) continue;
        double *c = acc + (size_t)r * dim;
        const float *v = vec + i * (size_t)dim;
        for (int k = 0; k < dim; k++) c[k] += v[k];
    }
    for (int r = 0; r < n_multi; r++) {
        double *c = acc + (size_t)r * dim, s = 0;
        for (int k = 0; k < dim; k++) s += c[k] * c[k];
        s = s > 0 ? 1.0 / sqrt(s) : 0;
        for (int k = 0; k < dim; k++) cent[(size_t)r * dim + k] = (float)(c[k] * s);
    }
    free(acc);
    free(row);
    *cent_out = cent;
    *multi_out = multi;
    *n_multi_out = n_multi;
    return HX_OK;
}

static topk *heaps(int nt, int k) {
    topk *t = calloc((size_t)nt, sizeof *t);
    for (int i = 0; t && i < nt; i++) {
        t[i] = (topk){calloc((size_t)(k > 0 ? k : 0) + 1, sizeof(kb_pair)), 0, k};
        if (!t[i].p) { for (int q = 0; q < i; q++) free(t[q].p); free(t); return NULL; }
    }
    return t;
}

static void heaps_free(topk *t, int nt) {
    for (int i = 0; t && i < nt; i++) free(t[i].p);
    free(t);
}

hx_status kb_analyze(hx_pool *pool, const kb_log *log, const size_t *idx, const float *vec, size_t n, int dim,
                     const kb_opts *o, kb_insights *out, hx_error *e) {
    memset(out, 0, sizeof *out);
    int nt = hx_pool_threads(pool);
    int max_over = o->max_overlaps > 0 ? o->max_overlaps : KB_DEFAULT_MAX_OVERLAPS;
    int *topic = calloc(n ? n : 1, sizeof *topic), *count = NULL, *multi = NULL, *row_topic = NULL;
    uint8_t *single = calloc(n ? n : 1, 1);
    float *cent = NULL;
    topk *dups = heaps(nt, o->max_dups), *links = heaps(nt, o->max_links), *over = heaps(nt, max_over);
    job j = {0};
    hx_status st = HX_OK;
    if (!topic || !single || !dups || !links || !over) { st = hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); goto done; }
    if ((st = topic_ids(log, idx, n, out, topic, &count, e))) goto done;
    for (size_t i = 0; i < n; i++) single[i] = count[topic[i]] == 1;
    /* the AVX2 kernel when the CPU and OS allow it and HX_ISA does not force scalar */
    j = (job){.vec = vec, .n_rows = n, .n = n, .dim = dim, .o = o, .topic = topic, .single = single, .dups = dups,
              .links = links, .over = over,
              .kernel = hx_isa_current() >= HX_ISA_AVX2 ? kb_tile_avx2 : kb_tile_scalar};
    j.scratch = malloc((size_t)nt * (TILE * TILE + (size_t)dim * TILE) * sizeof(float));
    if (!j.scratch) { st = hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); goto done; }
    hx_pool_run(pool, (int64_t)((n + TILE - 1) / TILE), tile_task, &j);
    /* topic overlaps not scored above: a topic with 2+ entries against every
     * other topic. Rows: the multi-entry centroids, then the single-entry
     * topics' vectors; only pairs with a multi row are formed (n_rows = n_multi). */
    int n_multi = 0, T = out->n_topics;
    if ((st = multi_centroids(topic, count, vec, n, dim, T, &cent, &multi, &n_multi, e))) goto done;
    if (n_multi > 0) {
        size_t n_single = (size_t)T - (size_t)n_multi;
        float *rows = realloc(cent, (size_t)T * (size_t)dim * sizeof *rows);
        row_topic = malloc((size_t)T * sizeof *row_topic);
        if (!rows || !row_topic) { st = hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); goto done; }
        cent = rows;
        memcpy(row_topic, multi, (size_t)n_multi * sizeof *row_topic);
        size_t r = (size_t)n_multi;
        for (size_t i = 0; i < n && r < (size_t)n_multi + n_single; i++)
            if (single[i]) {
                memcpy(cent + r * (size_t)dim, vec + i * (size_t)dim, (size_t)dim * sizeof *cent);
                row_topic[r++] = topic[i];
            }
        job jt = j;
        jt.vec = cent; jt.n_rows = (size_t)n_multi; jt.n = (size_t)T; jt.topic = NULL; jt.single = NULL;
        jt.row_topic = row_topic;
        hx_pool_run(pool, (int64_t)((jt.n_rows + TILE - 1) / TILE), tile_task, &jt);
    }
    out->dups = merge(dups, nt, o->max_dups, &out->n_dups);
    out->links = merge(links, nt, o->max_links, &out->n_links);
    int n_over = 0;
    kb_pair *ov = merge(over, nt, max_over, &n_over);
    out->overlaps = malloc((size_t)(n_over ? n_over : 1) * sizeof *out->overlaps);
    if (!out->dups || !out->links || !ov || !out->overlaps) { free(ov); st = hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); goto done; }
    for (int i = 0; i < n_over; i++) out->overlaps[i] = (kb_topic_pair){ov[i].ia, ov[i].ib, ov[i].sim};
    out->n_overlaps = n_over;
    free(ov);
    for (int i = 0; i < out->n_dups; i++) { out->dups[i].a = log->e[idx[out->dups[i].ia]].offset; out->dups[i].b = log->e[idx[out->dups[i].ib]].offset; }
    for (int i = 0; i < out->n_links; i++) { out->links[i].a = log->e[idx[out->links[i].ia]].offset; out->links[i].b = log->e[idx[out->links[i].ib]].offset; }
done:
    free(j.scratch);
    heaps_free(dups, nt); heaps_free(links, nt); heaps_free(over, nt);
    free(topic); free(single); free(count); free(multi); free(cent); free(row_topic);
    if (st) kb_insights_free(out);
    return st;
}

static cJSON *pair_json(const kb_log *log, const kb_pair *p) {
    const kb_entry *a = kb_log_find(log, p->a), *b = kb_log_find(log, p->b);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "a", (double)p->a);
    cJSON_AddNumberToObject(o, "b", (double)p->b);
    cJSON_AddStringToObject(o, "topic_a", a->topic);
    cJSON_AddStringToObject(o, "topic_b", b->topic);
    if (a->title) cJSON_AddStringToObject(o, "title_a", a->title);
    if (b->title) cJSON_AddStringToObject(o, "title_b", b->title);
    cJSON_AddNumberToObject(o, "similarity", round(p->sim * 10000) / 10000);
    return o;
}

hx_status kb_write_report(const char *path, const kb_log *log, const kb_insights *in, size_t n_live,
                          const char *embedder, hx_error *e) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "entries", (double)n_live);
    cJSON_AddStringToObject(r, "embedder", embedder);
    cJSON *d = cJSON_AddArrayToObject(r, "near_duplicates"), *l = cJSON_AddArrayToObject(r, "cross_links");
    cJSON *t = cJSON_AddArrayToObject(r, "topic_overlaps");
    for (int i = 0; i < in->n_dups; i++) cJSON_AddItemToArray(d, pair_json(log, &in->dups[i]));
    for (int i = 0; i < in->n_links; i++) cJSON_AddItemToArray(l, pair_json(log, &in->links[i]));
    for (int i = 0; i < in->n_overlaps; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "a", in->topics[in->overlaps[i].a]);
        cJSON_AddStringToObject(o, "b", in->topics[in->overlaps[i].b]);
        cJSON_AddNumberToObject(o, "similarity", round(in->overlaps[i].sim * 10000) / 10000);
        cJSON_AddItemToArray(t, o);
    }
    char *s = cJSON_Print(r);
    cJSON_Delete(r);
    if (!s) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    size_t n = strlen(s);
    char *withnl = malloc(n + 2);
    if (!withnl) { free(s); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
    memcpy(withnl, s, n);
    withnl[n] = '\n';
    free(s);
    hx_status st = hx_write_file_atomic(path, withnl, n + 1, e);
    free(withnl);
    return st;
}

static const char *label(const kb_entry *en) { return en->title ? en->title : en->text; }

void kb_print_summary(FILE *f, const kb_log *log, const kb_insights *in, size_t n_live) {
    fprintf(f, "%zu entries in %d topics\n", n_live, in->n_topics);
    fprintf(f, "\nnear-duplicates (%d):\n", in->n_dups);
    for (int i = 0; i < in->n_dups; i++) {
        const kb_entry *a = kb_log_find(log, in->dups[i].a), *b = kb_log_find(log, in->dups[i].b);
        fprintf(f, "  %.3f  @%llu \"%.50s\"  ~  @%llu \"%.50s\"\n", in->dups[i].sim, (unsigned long long)a->offset,
                label(a), (unsigned long long)b->offset, label(b));
    }
    fprintf(f, "\ncross-links (%d):\n", in->n_links);
    for (int i = 0; i < in->n_links; i++) {
        const kb_entry *a = kb_log_find(log, in->links[i].a), *b = kb_log_find(log, in->links[i].b);
        fprintf(f, "  %.3f  [%s] \"%.40s\"  <->  [%s] \"%.40s\"\n", in->links[i].sim, a->topic, label(a), b->topic, label(b));
    }
    fprintf(f, "\ntopic overlaps (%d):\n", in->n_overlaps);
    for (int i = 0; i < in->n_overlaps; i++)
        fprintf(f, "  %.3f  %s  <->  %s\n", in->overlaps[i].sim, in->topics[in->overlaps[i].a], in->topics[in->overlaps[i].b]);
}

static int cache_find(const kb_cache *c, uint64_t off) {
    size_t lo = 0, hi = c->n;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (c->offset[m] < off) lo = m + 1; else hi = m; }
    return lo < c->n && c->offset[lo] == off ? (int)lo : -1;
}

hx_status kb_run_pass(const char *dir, kb_embedder *em, hx_pool *pool, const kb_opts *o, bool print_summary,
                      bool progress, uint64_t *reported_to, kb_pass_stats *stats, hx_error *e) {
    double t0 = hx_now_s();
    char log_path[4096], cache_path[4096], report_path[4096];
    snprintf(log_path, sizeof log_path, "%s/data.log", dir);
    snprintf(cache_path, sizeof cache_path, "%s/embeddings.bin", dir);
    snprintf(report_path, sizeof report_path, "%s/insights.json", dir);
    kb_log log = {0};
    kb_cache old = {0}, cur = {0};
    kb_insights in = {0};
    size_t *idx = NULL;
    char **texts = NULL;
    int *todo = NULL;
    log.quiet_below = reported_to ? *reported_to : 0;
    hx_status st = kb_log_read(&log, log_path, e);
    if (st) goto done;
    if (reported_to) *reported_to = log.read_to > log.quiet_below ? log.read_to : log.quiet_below;
    size_t live = kb_log_live(&log);
    idx = malloc((live ? live : 1) * sizeof *idx);
    todo = malloc((live ? live : 1) * sizeof *todo);
    if (!idx || !todo || !(cur.offset = malloc((live ? live : 1) * 8)) || !(cur.hash = malloc((live ? live : 1) * 8)) ||
        !(cur.vec = malloc((live ? live : 1) * (size_t)em->dim * sizeof(float)))) {
        st = hx_err(e, HX_ERR_NOMEM, "%s: out of memory", dir);
        goto done;
    }
    cur.dim = em->dim;
    cur.n = live;
    size_t k = 0, n_todo = 0;
    kb_cache_load(&old, cache_path, em);
    for (size_t i = 0; i < log.n; i++) {
        if (log.e[i].deleted) continue;
        idx[k] = i;
        cur.offset[k] = log.e[i].offset;
        cur.hash[k] = log.e[i].hash;
        int c = cache_find(&old, log.e[i].offset);
        /* a cached vector is reused only for the same text (hash 0: v1 cache, trusted once) */
        if (c >= 0 && (old.hash[c] == log.e[i].hash || old.hash[c] == 0))
            memcpy(cur.vec + k * (size_t)em->dim, old.vec + (size_t)c * em->dim, sizeof(float) * (size_t)em->dim);
        else
            todo[n_todo++] = (int)k;
        k++;
    }
    /* embed what the cache lacks, in chunks (progress between them) */
    texts = calloc(256, sizeof *texts);
    float *tmp = malloc(256 * (size_t)em->dim * sizeof(float));
    if (!texts || !tmp) { free(tmp); st = hx_err(e, HX_ERR_NOMEM, "out of memory"); goto done; }
    bool tty = progress && isatty(2);
    double t_embed = hx_now_s();
    for (size_t b = 0; b < n_todo; b += 256) {
        size_t nb = n_todo - b < 256 ? n_todo - b : 256;
        for (size_t q = 0; q < nb; q++) texts[q] = kb_entry_text(&log.e[idx[todo[b + q]]]);
        for (size_t q = 0; q < nb; q++) if (!texts[q]) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        if (!st) st = em->embed(em, (const char *const *)texts, (int)nb, tmp, e);
        for (size_t q = 0; q < nb; q++) { free(texts[q]); texts[q] = NULL; }
        if (st) { free(tmp); goto done; }
        for (size_t q = 0; q < nb; q++)
            memcpy(cur.vec + (size_t)todo[b + q] * em->dim, tmp + q * (size_t)em->dim, sizeof(float) * (size_t)em->dim);
        if (tty) fprintf(stderr, "\rembedding %zu/%zu", b + nb, n_todo);
    }
    if (tty && n_todo) fputc('\n', stderr);
    free(tmp);
    t_embed = hx_now_s() - t_embed;
    if (n_todo || old.n != cur.n) {
        if ((st = kb_cache_save(&cur, cache_path, em, e))) goto done;
    }
    double t_an = hx_now_s();
    if ((st = kb_analyze(pool, &log, idx, cur.vec, live, em->dim, o, &in, e))) goto done;
    t_an = hx_now_s() - t_an;
    if ((st = kb_write_report(report_path, &log, &in, live, em->name, e))) goto done;
    if (print_summary) kb_print_summary(stdout, &log, &in, live);
    if (stats) *stats = (kb_pass_stats){log.n, live, n_todo, log.n_malformed, (size_t)in.n_dups, (size_t)in.n_links,
                                        (size_t)in.n_overlaps, hx_now_s() - t0, t_embed, t_an};
done:
    free(texts); free(idx); free(todo);
    kb_insights_free(&in);
    kb_cache_free(&old);
    kb_cache_free(&cur);
    kb_log_free(&log);
    return st;
}
