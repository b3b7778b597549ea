/* kb_allpairs_bench.c — the entry all-pairs stage alone (kb_entry_pairs) on
 * N unit rows of DIM: clusters of near-duplicates around random centres with
 * spreads from tight to loose, groups of 25 rows per topic, every 9th row a
 * topic of its own; MiniLM's thresholds and list sizes. One warm-up call
 * (device start, module load) on 20,000 rows, then REPS timed calls, median.
 *   kb_allpairs_bench N [DIM] [cpu|cuda|auto|cpu-f32|cpu-i8|cpu-both] [REPS] [THREADS]
 * cpu-f32 / cpu-i8: the CPU's f32 tiles / int8 candidate tiles
 * (kb_entry_pairs_mode); cpu-both: the two alternately in one process, the
 * lists checked equal bit for bit, both medians and their ratio.
 * Prints one line per call and a JSON line (for bench/results.jsonl). */
#include "kb/analyze.h"
#include "core/core.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double urand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (double)(rng >> 11) / 9007199254740992.0; }
static double grand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

static int dcmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

typedef struct rowset { float *v; uint64_t *off; int *topic, *count, T; } rowset;

/* clusters of near-duplicates around random centres, topics of 25, every 9th row alone */
static bool make_rows(size_t n, int dim, rowset *rs) {
    float *v = malloc(n * (size_t)dim * sizeof *v);
    uint64_t *off = malloc(n * sizeof *off);
    int *topic = malloc(n * sizeof *topic), n_group = (int)(n / 25) + 1, n_single = 0;
    size_t nc = n / 50 + 1;
    float *ctr = malloc(nc * (size_t)dim * sizeof *ctr);
    if (!v || !off || !topic || !ctr) return false;
    for (size_t i = 0; i < nc * (size_t)dim; i++) ctr[i] = (float)grand();
    for (size_t i = 0; i < n; i++) {
        float *r = v + i * dim;
        const float *c = ctr + (size_t)(urand() * nc) * dim;
        double spread = 0.05 + 2.0 * urand() * urand(), s = 0;
        for (int k = 0; k < dim; k++) { r[k] = (float)(c[k] + spread * grand()); s += (double)r[k] * r[k]; }
        for (int k = 0; k < dim; k++) r[k] = (float)(r[k] / sqrt(s));
        off[i] = 64 * (uint64_t)i;
        topic[i] = i % 9 == 4 ? n_group + n_single++ : (int)((i * 7) % (size_t)n_group);
    }
    free(ctr);
    int T = n_group + n_single, *count = calloc((size_t)T, sizeof *count);
    if (!count) return false;
    for (size_t i = 0; i < n; i++) count[topic[i]]++;
    *rs = (rowset){v, off, topic, count, T};
    return true;
}

static bool same(const kb_klist *x, const kb_klist *y) {
    if (x->n != y->n || x->has_cut != y->has_cut) return false;
    if (x->has_cut && memcmp(&x->cut, &y->cut, sizeof x->cut)) return false;
    for (int i = 0; i < x->n; i++)
        if (x->p[i].a != y->p[i].a || x->p[i].b != y->p[i].b || memcmp(&x->p[i].sim, &y->p[i].sim, sizeof(float)))
            return false;
    return true;
}

/* f32 tiles and int8 candidates alternately on the same rows (f32 first),
 * the lists compared, both medians */
static int both(size_t n, int dim, int reps, int threads) {
    rowset rs;
    if (!make_rows(n, dim, &rs)) { fprintf(stderr, "kb_allpairs_bench: out of memory\n"); return 1; }
    kb_rows r = {n, dim, rs.off, rs.topic, rs.v, rs.T, rs.count};
    kb_opts o = {.dup_threshold = 0.92f, .link_low = 0.75f, .link_high = 0.92f, .topic_threshold = 0.6f, .max_dups = 20,
                 .max_links = 50, .max_overlaps = KB_DEFAULT_MAX_OVERLAPS, .allpairs_device = HX_DEVICE_CPU,
                 .allpairs_log = true};
    hx_pool *pool = hx_pool_create(threads);
    hx_error e = {0};
    double *t[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
    bool ok = true;
    for (int q = 0; q < reps; q++) {
        kb_klist l[2][3];
        for (int m = 0; m < 2; m++) {
            double t0 = hx_now_s();
            if (kb_entry_pairs_mode(pool, &r, 0, &o, m ? KB_PAIRS_I8 : KB_PAIRS_F32, &l[m][0], &l[m][1], &l[m][2], &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            t[m][q] = hx_now_s() - t0;
        }
        bool eq = same(&l[0][0], &l[1][0]) && same(&l[0][1], &l[1][1]) && same(&l[0][2], &l[1][2]);
        ok &= eq;
        printf("kb_entry_pairs %zu rows x %d: f32 %.3f s, int8 %.3f s (%.2fx), kept %d / %d / %d, lists %s\n", n, dim,
               t[0][q], t[1][q], t[0][q] / t[1][q], l[1][0].n, l[1][1].n, l[1][2].n, eq ? "identical" : "DIFFER");
        for (int m = 0; m < 2; m++) for (int k = 0; k < 3; k++) kb_klist_free(&l[m][k]);
    }
    qsort(t[0], (size_t)reps, sizeof(double), dcmp);
    qsort(t[1], (size_t)reps, sizeof(double), dcmp);
    printf("{\"bench\": \"kb_allpairs\", \"test\": \"entry-pairs-cpu\", \"n\": %zu, \"dim\": %d, \"threads\": %d, "
           "\"f32_seconds\": %.4f, \"int8_seconds\": %.4f, \"speedup\": %.2f, \"identical\": %s}\n",
           n, dim, hx_pool_threads(pool), t[0][reps / 2], t[1][reps / 2], t[0][reps / 2] / t[1][reps / 2],
           ok ? "true" : "false");
    hx_pool_free(pool);
    free(t[0]); free(t[1]); free(rs.v); free(rs.off); free(rs.topic); free(rs.count);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: kb_allpairs_bench N [DIM] [cpu|cuda|auto] [REPS] [THREADS]\n"); return 2; }
    size_t n = strtoull(argv[1], NULL, 10);
    int dim = argc > 2 ? atoi(argv[2]) : 384, reps = argc > 4 ? atoi(argv[4]) : 3, threads = argc > 5 ? atoi(argv[5]) : 0;
    const char *dev = argc > 3 ? argv[3] : "cuda";
    if (n < 2 || dim < 1 || dim > 8192 || reps < 1) { fprintf(stderr, "kb_allpairs_bench: bad N, DIM or REPS\n"); return 2; }
    hx_device d = !strncmp(dev, "cpu", 3) ? HX_DEVICE_CPU : !strcmp(dev, "cuda") ? HX_DEVICE_CUDA : HX_DEVICE_AUTO;
    kb_pairs_mode mode = !strcmp(dev, "cpu-f32") ? KB_PAIRS_F32 : !strcmp(dev, "cpu-i8") ? KB_PAIRS_I8 : KB_PAIRS_AUTO;
    if (!strcmp(dev, "cpu-both")) return both(n, dim, reps, threads);
    rowset rs;
    if (!make_rows(n, dim, &rs)) { fprintf(stderr, "kb_allpairs_bench: out of memory\n"); return 1; }
    kb_rows r = {n, dim, rs.off, rs.topic, rs.v, rs.T, rs.count};
    kb_opts o = {.dup_threshold = 0.92f, .link_low = 0.75f, .link_high = 0.92f, .topic_threshold = 0.6f, .max_dups = 20,
                 .max_links = 50, .max_overlaps = KB_DEFAULT_MAX_OVERLAPS, .allpairs_device = d, .allpairs_log = true};
    hx_pool *pool = hx_pool_create(threads);
    hx_error e = {0};
    kb_klist l[3];
    kb_rows warm = r;
    warm.n = n < 20000 ? n : 20000;
    if (d != HX_DEVICE_CPU) {
        if (kb_entry_pairs(pool, &warm, 0, &o, &l[0], &l[1], &l[2], &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        for (int k = 0; k < 3; k++) kb_klist_free(&l[k]);
    }
    double *t = malloc((size_t)reps * sizeof *t);
    int found[3] = {0};
    for (int q = 0; q < reps; q++) {
        double t0 = hx_now_s();
        if (kb_entry_pairs_mode(pool, &r, 0, &o, mode, &l[0], &l[1], &l[2], &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        t[q] = hx_now_s() - t0;
        for (int k = 0; k < 3; k++) { found[k] = l[k].n; kb_klist_free(&l[k]); }
        printf("kb_entry_pairs %zu rows x %d on %s: %.3f s (kept %d / %d / %d)\n", n, dim, dev, t[q], found[0],
               found[1], found[2]);
    }
    qsort(t, (size_t)reps, sizeof *t, dcmp);
    double flop = 2.0 * dim * (double)n * (double)(n - 1) / 2;
    printf("{\"bench\": \"kb_allpairs\", \"test\": \"entry-pairs\", \"n\": %zu, \"dim\": %d, \"device\": \"%s\", "
           "\"seconds\": %.4f, \"pairs_per_s\": %.4g, \"tflops_fp16_equiv\": %.1f}\n",
           n, dim, dev, t[reps / 2], (double)n * (n - 1) / 2 / t[reps / 2], flop / t[reps / 2] / 1e12);
    hx_pool_free(pool);
    free(t); free(rs.v); free(rs.off); free(rs.topic); free(rs.count);
    return 0;
}
