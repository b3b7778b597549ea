/* kb_allpairs_bench.c — the entry all-pairs stage alone (kb_entry_pairs) on
 * N unit rows of DIM: clusters of near-duplicates around random centres with
 * spreads from tight to loose, groups of 25 rows per topic, every 9th row a
 * topic of its own; MiniLM's thresholds and list sizes. One warm-up call
 * (device start, module load) on 20,000 rows, then REPS timed calls, median.
 *   kb_allpairs_bench N [DIM] [cpu|cuda|auto] [REPS] [THREADS]
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

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: kb_allpairs_bench N [DIM] [cpu|cuda|auto] [REPS] [THREADS]\n"); return 2; }
    size_t n = strtoull(argv[1], NULL, 10);
    int dim = argc > 2 ? atoi(argv[2]) : 384, reps = argc > 4 ? atoi(argv[4]) : 3, threads = argc > 5 ? atoi(argv[5]) : 0;
    const char *dev = argc > 3 ? argv[3] : "cuda";
    if (n < 2 || dim < 1 || dim > 8192 || reps < 1) { fprintf(stderr, "kb_allpairs_bench: bad N, DIM or REPS\n"); return 2; }
    hx_device d = !strcmp(dev, "cpu") ? HX_DEVICE_CPU : !strcmp(dev, "cuda") ? HX_DEVICE_CUDA : HX_DEVICE_AUTO;
    float *v = malloc(n * (size_t)dim * sizeof *v);
    uint64_t *off = malloc(n * sizeof *off);
    int *topic = malloc(n * sizeof *topic), n_group = (int)(n / 25) + 1, n_single = 0;
    size_t nc = n / 50 + 1;
    float *ctr = malloc(nc * (size_t)dim * sizeof *ctr);
    if (!v || !off || !topic || !ctr) { fprintf(stderr, "kb_allpairs_bench: out of memory\n"); return 1; }
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
    int T = n_group + n_single, *count = calloc((size_t)T, sizeof *count);
    for (size_t i = 0; i < n; i++) count[topic[i]]++;
    kb_rows r = {n, dim, off, topic, v, T, count};
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
        if (kb_entry_pairs(pool, &r, 0, &o, &l[0], &l[1], &l[2], &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
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
    free(t); free(v); free(off); free(topic); free(ctr); free(count);
    return 0;
}
