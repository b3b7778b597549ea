/* bert_encode_bench.c — the CPU BERT encoder alone (no tokenizer, no process start):
 * N sequences of random token ids with lengths 12..101 (about what bench/make_sentences.py
 * gives all-MiniLM-L6-v2: mean 53 tokens), encoded in batches of B on T threads with the
 * prepared weights; prints sequences/s (best of R passes). For timing changes to the
 * encoder on a quiet machine (e.g. a slice of a larger one: taskset -c 0,1).
 *   cc -O2 -Isrc -Iinclude bench/bert_encode_bench.c build/libhelix.a $(pkg-config --libs libcjson libpcre2-8 libutf8proc) -lm -lpthread
 *   ./a.out MODEL.gguf [N=256] [B=32] [T=2] [R=3]     (MODEL: any BERT GGUF or HF folder, e.g. helix-bg synth --preset minilm-l6) */
#include "backend/cpu/bert.h"
#include "core/core.h"
#include "core/pool.h"
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s MODEL [N] [B] [T] [R]\n", argv[0]); return 2; }
    int N = argc > 2 ? atoi(argv[2]) : 256, B = argc > 3 ? atoi(argv[3]) : 32, T = argc > 4 ? atoi(argv[4]) : 2;
    int R = argc > 5 ? atoi(argv[5]) : 3;
    hx_error e = {0};
    hx_model *m = NULL;
    if (hx_model_load_any(argv[1], &m, &e) != HX_OK) { fprintf(stderr, "%s\n", e.msg); return 1; }
    hx_bert_cpu *prep = NULL;
    if (hx_bert_cpu_new(m, &prep, &e) != HX_OK) { fprintf(stderr, "%s\n", e.msg); return 1; }
    hx_pool *pool = hx_pool_create(T);
    hx_rng rng;
    hx_rng_seed(&rng, 42);
    int *lens = malloc(sizeof(int) * (size_t)N), E = m->cfg.n_embd;
    int64_t total = 0;
    for (int s = 0; s < N; s++) total += lens[s] = 12 + (int)(hx_rng_u64(&rng) % 90);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)total);
    for (int64_t t = 0; t < total; t++) ids[t] = 1000 + (int32_t)(hx_rng_u64(&rng) % (uint64_t)(m->cfg.n_vocab - 1000));
    float *out = malloc(sizeof(float) * (size_t)E * (size_t)B);
    double best = 1e30;
    for (int r = 0; r < R; r++) {
        double t0 = now_s();
        int64_t off = 0;
        for (int s = 0; s < N; s += B) {
            int nb = N - s < B ? N - s : B;
            if (hx_bert_encode_prep(m, prep, pool, ids + off, lens + s, nb, HX_POOL_MEAN, true, out, &e) != HX_OK) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
            for (int k = 0; k < nb; k++) off += lens[s + k];
        }
        double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    printf("bert encode: %d sequences (%lld tokens), batch %d, %d threads: best %.1f seq/s (%.1f tokens/s)\n", N,
           (long long)total, B, T, N / best, total / best);
    free(out); free(ids); free(lens);
    hx_pool_free(pool);
    hx_bert_cpu_free(prep);
    hx_model_free(m);
    return 0;
}
