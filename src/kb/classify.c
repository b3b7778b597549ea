/* classify.c — nearest topic centroid (see classify.h). */
#include "kb/classify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

kb_classify_opts kb_classify_defaults(void) {
    return (kb_classify_opts){.temperature = 0.05f, .min_members = 3, .max_topics = 512};
}

typedef struct cjob {
    const float *vec;
    int dim;
    const int *topic;
    const int *cand_of;      /* topic -> candidate index or -1 */
    const double *sum;       /* (n_cand, dim) member vector sums */
    const int *count;        /* n_cand members */
    int n_cand;
    const int *cand_topic;   /* candidate -> topic */
    float temp;
    kb_class *out;
    float *scratch;          /* (threads, n_cand) */
} cjob;

static void classify_row(void *ctx, int64_t i, int thread) {
    const cjob *j = ctx;
    const float *v = j->vec + (size_t)i * j->dim;
    float *cos = j->scratch + (size_t)thread * j->n_cand;
    int own = j->cand_of[j->topic[i]];
    for (int c = 0; c < j->n_cand; c++) {
        const double *s = j->sum + (size_t)c * j->dim;
        double dot = 0, nn = 0;
        bool self = c == own;
        if (self && j->count[c] <= 1) { cos[c] = -1.0f; continue; }
        for (int d = 0; d < j->dim; d++) {
            double x = s[d] - (self ? v[d] : 0.0);   /* leave the entry out of its own centroid */
            dot += x * v[d];
            nn += x * x;
        }
        cos[c] = nn > 0 ? (float)(dot / sqrt(nn)) : 0.0f;
    }
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
}

typedef struct tc { int topic, count; } tc;
static int tc_desc(const void *a, const void *b) {
    const tc *x = a, *y = b;
    if (x->count != y->count) return y->count - x->count;
    return x->topic - y->topic;
}

hx_status kb_classify_centroid(hx_pool *pool, const float *vec, size_t n, int dim, const int *topic, int n_topics,
                               const kb_classify_opts *o, kb_class *out, int *n_candidates, hx_error *e) {
    kb_classify_opts op = o ? *o : kb_classify_defaults();
    if (op.temperature <= 0) op.temperature = 0.05f;
    *n_candidates = 0;
    for (size_t i = 0; i < n; i++) out[i] = (kb_class){.row = i, .topic = topic[i], .predicted = -1};
    if (n == 0 || n_topics <= 0) return HX_OK;
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
    int *cand_topic = malloc(sizeof(int) * (size_t)nc), *cnt = malloc(sizeof(int) * (size_t)nc);
    double *sum = calloc((size_t)nc * (size_t)dim, sizeof *sum);
    float *scratch = malloc(sizeof(float) * (size_t)nc * (size_t)hx_pool_threads(pool));
    hx_status st = HX_OK;
    if (!cand_topic || !cnt || !sum || !scratch) { st = hx_err(e, HX_ERR_NOMEM, "classify: out of memory"); goto done; }
    for (int c = 0; c < nc; c++) { cand_topic[c] = counts[c].topic; cnt[c] = counts[c].count; cand_of[counts[c].topic] = c; }
    for (size_t i = 0; i < n; i++) {
        int c = cand_of[topic[i]];
        if (c < 0) continue;
        double *s = sum + (size_t)c * dim;
        for (int d = 0; d < dim; d++) s[d] += vec[i * (size_t)dim + d];
    }
    cjob j = {vec, dim, topic, cand_of, sum, cnt, nc, cand_topic, op.temperature, out, scratch};
    hx_pool_run(pool, (int64_t)n, classify_row, &j);
    *n_candidates = nc;
done:
    free(counts); free(cand_of); free(cand_topic); free(cnt); free(sum); free(scratch);
    return st;
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
