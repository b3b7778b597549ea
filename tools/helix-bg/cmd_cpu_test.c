/* cmd_cpu_test.c — helix-bg cpu-test [-t N] [--quick] [--json] [--type T]...
 *
 * 1. Memory bandwidth: multithreaded read-only streaming over a 256 MiB buffer
 *    (GB/s of bytes read) and a copy (GB/s of bytes read + written).
 *    The machine may be shared (the helix dev box has 2 cores and other
 *    jobs), so every figure is the best of many short windows (8 MiB of
 *    reads, one layer of matvecs) rather than one long pass: a window that
 *    ran without being preempted measures the hardware, a long pass measures
 *    the neighbours. Both sides of a "% of bandwidth" use the same rule.
 * 2. Matvec throughput per weight type at the shapes of qwen3-0.6b (n_embd
 *    1024; q 2048x1024, k/v 1024x1024, o 1024x2048, gate/up 3072x1024, down
 *    1024x3072), over as many layers as make >= 192 MiB of weights (max 28) so
 *    the working set is far beyond the LLC, plus the 151936x1024 output
 *    matrix. Reported as GB/s of weight bytes and % of the read bandwidth.
 *    Every ISA level from AVX2 up to the best this CPU has is measured (each
 *    level's kernels via hx_dev_isa_set), the levels taking turns within each
 *    repetition so a busy neighbour costs them alike, and a level whose layers
 *    GB/s is more than 5% below a lower level's is flagged "SLOWER than
 *    <level>": a higher level must never lose to a lower one on decode-shaped
 *    matvecs. A level whose matvec kernels (hx_get_gemm's tile, else
 *    hx_get_vec_dot's row kernel) are a lower level's runs the same code, so
 *    it is marked "= <level>'s kernels" and never flagged: a gap there is the
 *    machine, not the level. A report for the log and bench/RESULTS.md, not a
 *    pass/fail test: the machine may be shared (see 1.), so a flag is rerun
 *    before it is believed.
 * 3. Matmul (batch 64 and 512) GFLOP/s on one layer's matrices, at the best level.
 * --json: one JSON object per (type, level) matvec result on stdout
 * (bench/cpu-results.jsonl); "slower_than" names the flagged lower level,
 * "same_kernels_as" the lowest level whose kernels the level runs ("" if its own).
 * --type T (repeatable): only these weight types.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "helix_dev.h"

/* N(0, 1) samples for the inputs (splitmix64 + Box-Muller): contents only need
 * to be realistic, not to match any other generator. */
typedef struct rng { uint64_t s; } rng;
static double rng_uniform(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return ((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}
static float rng_normal(rng *r) {
    double u = rng_uniform(r), v = rng_uniform(r);
    return (float)(sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(6.283185307179586 * v));
}

/* ---- bandwidth ---- */
typedef struct bw_job {
    const uint64_t *src;
    uint64_t *dst;
    size_t words_per_task;
    int64_t first;              /* first task (1 MiB unit) of this window */
    uint64_t sums[64];
} bw_job;

/* 16-byte vectors (SSE2 baseline, no ISA flags needed): 4 independent
 * accumulators so the loop is limited by loads, not by the adds. */
typedef uint64_t v2u64 __attribute__((vector_size(16)));
static void bw_read_task(void *ctx, int64_t task, int thread) {
    bw_job *j = ctx;
    const v2u64 *p = (const v2u64 *)(j->src + (size_t)(j->first + task) * j->words_per_task);
    v2u64 a = {0, 0}, b = a, c = a, d = a;
    for (size_t i = 0; i < j->words_per_task / 2; i += 4) {
        a += p[i]; b += p[i + 1]; c += p[i + 2]; d += p[i + 3];
    }
    a += b + c + d;
    j->sums[thread & 63] += a[0] + a[1];
}
static void bw_copy_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    bw_job *j = ctx;
    size_t off = (size_t)(j->first + task) * j->words_per_task;
    memcpy(j->dst + off, j->src + off, j->words_per_task * 8);
}

/* best time of `reps` windows of `win` tasks each, the windows walking
 * through the buffer's `units` tasks so each one starts cold */
typedef struct bw_run { hx_pool *pool; bw_job *job; int64_t units, win; bool copy; } bw_run;
static double bw_best(bw_run *r, int reps) {
    double best = 1e30;
    for (int k = 0; k < reps; k++) {
        r->job->first = (k * r->win) % r->units;
        double t0 = cli_now();
        hx_pool_run(r->pool, r->win, r->copy ? bw_copy_task : bw_read_task, r->job);
        double dt = cli_now() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

/* ---- matvec / matmul ---- */
enum { N_MATS = 7 };
static const int64_t shapes[N_MATS][2] = { /* rows, cols */
    { 2048, 1024 }, { 1024, 1024 }, { 1024, 1024 }, { 1024, 2048 },
    { 3072, 1024 }, { 3072, 1024 }, { 1024, 3072 } };

/* Fill buf (n_rows rows of `type`, row length cols) by quantizing 64 random
 * rows once and tiling them: realistic block contents, fast set-up. */
static void fill_rows(int type, uint8_t *buf, int64_t n_rows, int64_t cols, rng *rng) {
    size_t rb = hx_row_size(type, cols);
    float *tmp = malloc(sizeof(float) * cols);
    int64_t seed_rows = n_rows < 64 ? n_rows : 64;
    for (int64_t r = 0; r < seed_rows; r++) {
        for (int64_t i = 0; i < cols; i++) tmp[i] = rng_normal(rng) * 0.02f;
        hx_quantize_row(type, tmp, buf + r * rb, cols);
    }
    for (int64_t r = seed_rows; r < n_rows; r++) memcpy(buf + r * rb, buf + (r % seed_rows) * rb, rb);
    free(tmp);
}

static const char *const bench_types[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K",
                                          "Q3_K", "Q4_K", "Q5_K", "Q6_K"};

int cmd_cpu_test(int argc, char **argv) {
    int n_threads = 0;
    bool quick = false, json = false;
    int only[16], n_only = 0;
    cli_strs types = {0};
    const cli_opt opts[] = {
        {CLI_INT, "-t|--threads", &n_threads, "N", "threads, 0 = all", 0, 4096, NULL},
        {CLI_BOOL, "--quick", &quick, NULL, "smaller buffers and fewer layers (a smoke test)", 0, 0, NULL},
        {CLI_BOOL, "--json", &json, NULL, "one JSON object per matvec result on stdout", 0, 0, NULL},
        {CLI_STRS, "--type", &types, "T", "only this weight type (repeatable; default: all)", 0, 0, NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int pr = cli_parse("cpu-test", "cpu-test [options]",
                       "Memory bandwidth, then matvec and matmul throughput per weight type at qwen3-0.6b's shapes.\n",
                       opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    for (int i = 0; i < types.n; i++)
        if ((only[n_only++] = hx_type_from_name(types.v[i])) < 0)
            return cli_usage_error("cpu-test", "--type: unknown type '%s'", types.v[i]);
    hx_pool *pool = hx_pool_create(n_threads);
    if (!pool) { fprintf(stderr, "cpu-test: cannot create thread pool\n"); return 1; }
    int nth = hx_pool_threads(pool);
    FILE *out = json ? stderr : stdout;
    fprintf(out, "cpu-test: %d threads, ISA %s\n", nth, hx_dev_cpu_isa());

    /* 1. bandwidth */
    size_t bw_bytes = (size_t)(quick ? 64 : 256) << 20;
    uint64_t *src = malloc(bw_bytes), *dst = malloc(bw_bytes / 2);
    if (!src || !dst) { fprintf(stderr, "cpu-test: out of memory\n"); return 1; }
    memset(src, 1, bw_bytes);
    memset(dst, 0, bw_bytes / 2);
    bw_job bj = { src, dst, (1 << 20) / 8, 0, {0} };
    int64_t units = (int64_t)(bw_bytes >> 20);
    bw_run br = { pool, &bj, units, 8, false };
    int bw_reps = quick ? 24 : 96;
    double read_gbps = (8.0 * (1 << 20)) / bw_best(&br, bw_reps) / 1e9;
    br.copy = true;
    br.units = units / 2;
    double copy_gbps = 2 * (8.0 * (1 << 20)) / bw_best(&br, bw_reps) / 1e9; /* read + written */
    fprintf(out, "memory: read %.1f GB/s, copy %.1f GB/s (read+write bytes), %zu MiB buffer, best of %d 8 MiB windows\n",
            read_gbps, copy_gbps, bw_bytes >> 20, bw_reps);
    free(dst);
    free(src);

    /* 2. matvec */
    rng rng = {42};
    float *x = malloc(sizeof(float) * 3072 * 512), *y = malloc(sizeof(float) * 151936 * 64);
    if (!x || !y) { fprintf(stderr, "cpu-test: out of memory\n"); return 1; }
    for (int i = 0; i < 3072 * 512; i++) x[i] = rng_normal(&rng);
    fprintf(out, "\nmatvec, qwen3-0.6b shapes (GB/s of weight bytes, %% of read bandwidth; best layer / best call)\n");
    /* levels: AVX2 up to the current one (HX_ISA may lower it); the last row of a type is the current level's */
    const int lv_hi = hx_dev_isa_level(), lv_avx2 = hx_dev_isa_avx2_level(), lv_lo = lv_hi >= lv_avx2 ? lv_avx2 : lv_hi;
    int n_slower = 0;
    fprintf(out, "%-6s %-10s %7s %10s %6s %12s %6s %12s %12s\n", "type", "level", "layers", "layers GB/s", "%bw",
            "output GB/s", "%bw", "mm64 GFLOP/s", "mm512 GFLOP/s");
    for (size_t ti = 0; ti < sizeof bench_types / sizeof bench_types[0]; ti++) {
        int type = hx_type_from_name(bench_types[ti]);
        bool want = n_only == 0;
        for (int k = 0; k < n_only; k++) want |= only[k] == type;
        if (!want) continue;
        size_t layer_bytes = 0, mat_bytes[N_MATS];
        for (int m = 0; m < N_MATS; m++) {
            mat_bytes[m] = hx_row_size(type, shapes[m][1]) * shapes[m][0];
            layer_bytes += mat_bytes[m];
        }
        size_t target = (size_t)(quick ? 64 : 192) << 20;
        int n_layers = (int)((target + layer_bytes - 1) / layer_bytes);
        if (n_layers > 28) n_layers = 28;
        uint8_t *wl = malloc(layer_bytes * n_layers);
        size_t out_row = hx_row_size(type, 1024);
        uint8_t *wo = malloc(out_row * 151936);
        if (!wl || !wo) { fprintf(stderr, "cpu-test: out of memory\n"); return 1; }
        hx_dev_matrix mats[28][N_MATS];
        size_t off = 0;
        for (int l = 0; l < n_layers; l++)
            for (int m = 0; m < N_MATS; m++) {
                fill_rows(type, wl + off, shapes[m][0], shapes[m][1], &rng);
                mats[l][m] = (hx_dev_matrix){type, shapes[m][0], shapes[m][1], wl + off};
                off += mat_bytes[m];
            }
        fill_rows(type, wo, 151936, 1024, &rng);
        hx_dev_matrix wout = {type, 151936, 1024, wo};
        hx_error e = {0};
        int reps = quick ? 3 : 8;
        double lv_gbps[8] = {0}, lv_best[8], lv_best_o[8], gbps = 0, gbps_o = 0;
        for (int lv = lv_lo; lv <= lv_hi; lv++) lv_best[lv] = lv_best_o[lv] = 1e30;
        /* repetitions outermost and the levels in turn inside each, so a busy
         * neighbour or a clock change costs every level alike */
        for (int r = 0; r < reps; r++)
            for (int lv = lv_lo; lv <= lv_hi; lv++) {
                hx_dev_isa_set(lv);
                /* as a decode step runs them: q/k/v and gate/up grouped; best single layer */
                for (int l = 0; l < n_layers; l++) {
                    double t0 = cli_now();
                    const hx_dev_matrix *qkv[3] = { &mats[l][0], &mats[l][1], &mats[l][2] };
                    const hx_dev_matrix *gu[2] = { &mats[l][4], &mats[l][5] };
                    float *yq[3] = { y, y + 2048, y + 3072 }, *yg[2] = { y, y + 3072 };
                    hx_dev_matmul_multi(pool, 3, qkv, x, 1, yq, &e);
                    hx_dev_matvec(pool, &mats[l][3], x, y, &e);
                    hx_dev_matmul_multi(pool, 2, gu, x, 1, yg, &e);
                    hx_dev_matvec(pool, &mats[l][6], x, y, &e);
                    double dt = cli_now() - t0;
                    if (dt < lv_best[lv]) lv_best[lv] = dt;
                }
                double t0 = cli_now();
                hx_dev_matvec(pool, &wout, x, y, &e);
                double dt = cli_now() - t0;
                if (dt < lv_best_o[lv]) lv_best_o[lv] = dt;
            }
        hx_dev_isa_set(lv_hi);
        for (int lv = lv_lo; lv <= lv_hi; lv++) {
            gbps = lv_gbps[lv] = layer_bytes / lv_best[lv] / 1e9;
            gbps_o = out_row * 151936.0 / lv_best_o[lv] / 1e9;
            /* the lowest level whose matvec kernels this level runs (decode: hx_get_gemm's
             * tile if any, else the row kernel), -1 if its own */
            int same = hx_isa_matvec_same_as(type, lv);
            if (same < lv_lo || same >= lv) same = -1;
            int slower = -1; /* the lowest level measured faster by more than 5% */
            for (int k = lv_lo; k < lv && slower < 0 && same < 0; k++)
                if (gbps < 0.95 * lv_gbps[k]) slower = k;
            if (lv < lv_hi || lv_lo < lv_hi) {
                fprintf(out, "%-6s %-10s %7d %10.1f %5.0f%% %12.1f %5.0f%%%s%s%s%s\n", hx_type_name(type),
                        hx_dev_isa_level_name(lv), n_layers, gbps, 100 * gbps / read_gbps, gbps_o,
                        100 * gbps_o / read_gbps, slower >= 0 ? "  SLOWER than " : "",
                        slower >= 0 ? hx_dev_isa_level_name(slower) : "", same >= 0 ? "  = kernels of " : "",
                        same >= 0 ? hx_dev_isa_level_name(same) : "");
                n_slower += slower >= 0;
            }
            if (json)
                printf("{\"test\": \"matvec\", \"mix\": \"%s\", \"threads\": %d, \"isa\": \"%s\", \"gbps\": %.2f, "
                       "\"pct_of_bw\": %.1f, \"output_gbps\": %.2f, \"output_pct_of_bw\": %.1f, "
                       "\"read_bw_gbps\": %.2f, \"slower_than\": \"%s\", \"same_kernels_as\": \"%s\"}\n",
                       hx_type_name(type), nth, hx_dev_isa_level_name(lv), gbps, 100 * gbps / read_gbps, gbps_o,
                       100 * gbps_o / read_gbps, read_gbps, slower >= 0 ? hx_dev_isa_level_name(slower) : "",
                       same >= 0 ? hx_dev_isa_level_name(same) : "");
        }
        /* 3. matmul on layer 0 */
        double gf[2];
        int batches[2] = { 64, 512 };
        for (int b = 0; b < 2; b++) {
            int n = batches[b];
            if (quick && n > 64) { gf[b] = 0; continue; }
            double flops = 0, t0 = cli_now();
            for (int m = 0; m < N_MATS; m++) {
                float *Y = malloc(sizeof(float) * shapes[m][0] * n);
                hx_dev_matmul(pool, &mats[0][m], x, n, Y, &e);
                flops += 2.0 * shapes[m][0] * shapes[m][1] * n;
                free(Y);
            }
            gf[b] = flops / (cli_now() - t0) / 1e9;
        }
        fprintf(out, "%-6s %-10s %7d %10.1f %5.0f%% %12.1f %5.0f%% %12.1f %12.1f\n", hx_type_name(type),
                hx_dev_cpu_isa(), n_layers, gbps, 100 * gbps / read_gbps, gbps_o, 100 * gbps_o / read_gbps, gf[0],
                gf[1]);
        fflush(out);
        if (json)
            printf("{\"test\": \"matmul\", \"mix\": \"%s\", \"threads\": %d, \"isa\": \"%s\", "
                   "\"mm64_gflops\": %.1f, \"mm512_gflops\": %.1f}\n",
                   hx_type_name(type), nth, hx_dev_cpu_isa(), gf[0], gf[1]);
        free(wl);
        free(wo);
    }
    if (lv_lo < lv_hi)
        fprintf(out, "\nlevels %s..%s: %d (type, level) rows slower than a lower level by more than 5%%%s\n",
                hx_dev_isa_level_name(lv_lo), hx_dev_isa_level_name(lv_hi), n_slower,
                n_slower ? " (rerun on a quiet machine before believing it)" : "");
    else
        fprintf(out, "\none ISA level (%s): nothing to compare across levels\n", hx_dev_isa_level_name(lv_hi));
    free(x);
    free(y);
    hx_pool_free(pool);
    return 0;
}
