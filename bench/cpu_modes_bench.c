/* cpu_modes_bench.c — prefill and decode tok/s of one GGUF on the CPU in both
 * arithmetic modes of hx_context_params, in one process, the modes alternating
 * within every repetition so a shared machine's load falls on both alike:
 *   parity (exact = false, the default: llama.cpp's summation orders, what
 *           `helix-bg bench` measures) and
 *   fast   (exact = true: the packed batch kernels in the scalar order).
 * pp: one hx_decode of P random tokens from an empty cache; tg: N greedy steps
 * after a one-token prompt (hx_generate's decode rate). Prints the mean and the
 * best of R repetitions per mode and test; helix.h only.
 *
 * usage: cpu_modes_bench MODEL.gguf [-p P] [-n N] [-r R] [-t THREADS]   (512 128 3 2) */
#include "helix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static hx_status run_pp(hx_context *ctx, const int32_t *toks, int n, double *tps, hx_error *e) {
    hx_batch b = hx_batch_init(n);
    if (!b.capacity) return snprintf(e->msg, sizeof e->msg, "out of memory"), e->status = HX_ERR_NOMEM;
    for (int i = 0; i < n; i++) hx_batch_add(&b, toks[i], i, 0, i == n - 1);
    hx_seq_clear(ctx, 0);
    const double t0 = now_s();
    hx_status s = hx_decode(ctx, &b, e);
    *tps = n / (now_s() - t0);
    hx_batch_free(&b);
    return s;
}

static hx_status run_tg(hx_context *ctx, int32_t tok, int n, double *tps, hx_error *e) {
    hx_seq_clear(ctx, 0);
    hx_generate_params gp = hx_generate_default_params();
    gp.prompt_ids = &tok;
    gp.n_prompt_ids = 1;
    gp.max_tokens = n + 1;
    gp.ignore_eog = true;
    hx_generate_result r = {0};
    hx_status s = hx_generate(ctx, &gp, &r, e);
    *tps = r.metrics.decode_tok_per_s;
    hx_generate_result_free(&r);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: cpu_modes_bench MODEL.gguf [-p P] [-n N] [-r R] [-t THREADS]\n");
        return 2;
    }
    int P = 512, N = 128, R = 3, T = 2;
    for (int i = 2; i + 1 < argc; i += 2) {
        const int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-p")) P = v;
        else if (!strcmp(argv[i], "-n")) N = v;
        else if (!strcmp(argv[i], "-r")) R = v;
        else if (!strcmp(argv[i], "-t")) T = v;
    }
    hx_error e = {0};
    hx_model *m = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    if (hx_model_open(argv[1], &mp, &m, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    hx_context *ctx[2] = { NULL, NULL }; /* [0] parity, [1] fast */
    for (int k = 0; k < 2; k++) {
        hx_context_params cp = hx_context_default_params();
        cp.n_threads = T;
        cp.n_ctx = P + N + 8;
        if (cp.n_batch < P) cp.n_batch = P;
        cp.exact = k == 1;
        if (hx_context_new(m, &cp, &ctx[k], &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    }
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(P > 0 ? P : 1));
    uint64_t rng = 1234;
    const int V = hx_model_n_vocab(m);
    for (int i = 0; i < (P > 0 ? P : 1); i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((rng >> 33) % (uint64_t)V);
    }
    double sum[2][2] = {{0}}, best[2][2] = {{0}}, v;
    for (int k = 0; k < 2; k++) { /* warm-up: first-call allocations */
        if (P > 0 && run_pp(ctx[k], toks, P < 8 ? P : 8, &v, &e)) goto fail;
        if (N > 0 && run_tg(ctx[k], toks[0], 4, &v, &e)) goto fail;
    }
    for (int r = 0; r < R; r++)
        for (int k = 0; k < 2; k++) {
            if (P > 0) {
                if (run_pp(ctx[k], toks, P, &v, &e)) goto fail;
                sum[k][0] += v;
                if (v > best[k][0]) best[k][0] = v;
            }
            if (N > 0) {
                if (run_tg(ctx[k], toks[0], N, &v, &e)) goto fail;
                sum[k][1] += v;
                if (v > best[k][1]) best[k][1] = v;
            }
        }
    printf("%s, %d threads, %d repetitions (tok/s: mean / best)\n", argv[1], T, R);
    for (int k = 0; k < 2; k++) {
        if (P > 0) printf("%-6s pp%-4d %8.1f / %8.1f\n", k ? "fast" : "parity", P, sum[k][0] / R, best[k][0]);
        if (N > 0) printf("%-6s tg%-4d %8.1f / %8.1f\n", k ? "fast" : "parity", N, sum[k][1] / R, best[k][1]);
    }
    for (int k = 0; k < 2; k++) hx_context_free(ctx[k]);
    hx_model_free(m);
    free(toks);
    return 0;
fail:
    fprintf(stderr, "%s\n", e.msg);
    return 1;
}
