/* batch_decode_bench.c — aggregate decode throughput of B sequences decoding
 * together, through the public API (llama-batched-bench's shape): each of B
 * sequences gets a prompt of PP random tokens (prefilled, not timed), then TG
 * steps each decode one token of every sequence in one hx_decode with logits
 * for all of them (the token fed back is fixed, as llama-batched-bench does:
 * this measures the forward, not sampling). Prints one line per B and, with
 * --jsonl, a line for bench/results.jsonl.
 *
 * --device cpu runs it on the CPU (-t threads), where the decode's process
 * CPU time is printed too (steadier than wall time on a shared machine), and
 * --kv-slots asks for fixed KV slots instead of the shared pool of pages (to
 * compare the two layouts).
 *
 * usage: batch_decode_bench MODEL.gguf [--batch 1,8,32,128] [--pp 128] [--tg 128]
 *        [--label NAME] [--jsonl] [--device cpu|cuda] [-t N] [--kv-slots] */
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

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int g_threads, g_kv_slots;

static int run_one(hx_model *m, int B, int pp, int tg, const char *label, int jsonl) {
    hx_context_params cp = hx_context_default_params();
    cp.n_threads = g_threads;
    cp.kv_slots = g_kv_slots;
    cp.n_seq_max = B;
    cp.n_ctx = B * (pp + tg + 8);
    cp.n_batch = B > pp ? B : pp;
    cp.n_ubatch = cp.n_batch;
    hx_context *c = NULL;
    hx_error e = {0};
    if (hx_context_new(m, &cp, &c, &e) != HX_OK) {
        fprintf(stderr, "batch_decode_bench: context for %d sequences: %s\n", B, e.msg);
        return 1;
    }
    hx_batch b = hx_batch_init(cp.n_batch);
    if (b.capacity == 0) { fprintf(stderr, "batch_decode_bench: out of memory\n"); hx_context_free(c); return 1; }
    int V = hx_model_n_vocab(m);
    unsigned seed = 12345;
    double t0 = now_s();
    for (int s = 0; s < B; s++) { /* prompts: one hx_decode each */
        hx_batch_clear(&b);
        for (int i = 0; i < pp; i++) {
            seed = seed * 1103515245u + 12345u;
            hx_batch_add(&b, (int32_t)(1 + (seed >> 8) % (unsigned)(V - 1)), i, s, i == pp - 1);
        }
        if (hx_decode(c, &b, &e) != HX_OK) { fprintf(stderr, "prefill: %s\n", e.msg); goto fail; }
    }
    double t_pp = now_s() - t0;
    t0 = now_s();
    double c0 = cpu_s();
    for (int step = 0; step < tg; step++) {
        hx_batch_clear(&b);
        for (int s = 0; s < B; s++) hx_batch_add(&b, 0, pp + step, s, true);
        if (hx_decode(c, &b, &e) != HX_OK) { fprintf(stderr, "decode: %s\n", e.msg); goto fail; }
        if (!hx_get_logits(c, B - 1)) { fprintf(stderr, "decode: no logits\n"); goto fail; }
    }
    double t_tg = now_s() - t0, c_tg = cpu_s() - c0;
    double tps = (double)B * tg / t_tg;
    printf("%-24s B %4d  pp %d x %d: %.3f s  tg %d x %d: %.3f s  decode %.1f tok/s (%.2f ms/step, %.2f ms CPU/step, "
           "KV %s)\n", label, B, B, pp, t_pp, B, tg, t_tg, tps, 1e3 * t_tg / tg, 1e3 * c_tg / tg,
           hx_context_kv_page(c) ? "pages" : "slots");
    if (jsonl)
        printf("{\"engine\":\"helix\",\"bench\":\"batched-decode\",\"model\":\"%s\",\"batch\":%d,\"pp\":%d,\"tg\":%d,"
               "\"decode_tokens_per_s\":%.1f}\n", label, B, pp, tg, tps);
    hx_batch_free(&b);
    hx_context_free(c);
    return 0;
fail:
    hx_batch_free(&b);
    hx_context_free(c);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [--batch 1,8,32,128] [--pp 128] [--tg 128] [--label NAME] [--jsonl]\n",
                argv[0]);
        return 2;
    }
    const char *path = argv[1], *batches = "1,8,32,128", *label = argv[1];
    int pp = 128, tg = 128, jsonl = 0, cpu = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) batches = argv[++i];
        else if (!strcmp(argv[i], "--pp") && i + 1 < argc) pp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tg") && i + 1 < argc) tg = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--label") && i + 1 < argc) label = argv[++i];
        else if (!strcmp(argv[i], "--jsonl")) jsonl = 1;
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) cpu = !strcmp(argv[++i], "cpu");
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) g_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv-slots")) g_kv_slots = 1;
        else { fprintf(stderr, "batch_decode_bench: unknown argument '%s'\n", argv[i]); return 2; }
    }
    if (pp < 1 || tg < 1) { fprintf(stderr, "batch_decode_bench: --pp and --tg must be >= 1\n"); return 2; }
    hx_model_params mp = hx_model_default_params();
    mp.device = cpu ? HX_DEVICE_CPU : HX_DEVICE_CUDA;
    hx_model *m = NULL;
    hx_error e = {0};
    if (hx_model_open(path, &mp, &m, &e) != HX_OK) { fprintf(stderr, "batch_decode_bench: %s: %s\n", path, e.msg); return 1; }
    int rc = 0;
    for (const char *p = batches; *p;) {
        char *end;
        long B = strtol(p, &end, 10);
        if (end == p || B < 1 || B > 4096) { fprintf(stderr, "batch_decode_bench: bad --batch '%s'\n", batches); rc = 2; break; }
        rc |= run_one(m, (int)B, pp, tg, label, jsonl);
        p = *end == ',' ? end + 1 : end;
    }
    hx_model_free(m);
    return rc;
}
