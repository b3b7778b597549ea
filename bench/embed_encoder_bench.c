/* embed_encoder_bench.c — the BERT encoder alone beside hx_embed end to end, so that a run shows
 * where the end-to-end time goes. Reads texts (one per line) from stdin, tokenizes them once
 * (untimed, sorted by token count, batches of B texts and at most 32768 tokens) and prints one
 * JSON line per measure, best of R passes:
 *   tokenize_1thread  that tokenization, one thread, one pass
 *   encoder_async  (CUDA) hx_cuda_bert_submit with HX_CUDA_BERT_SLOTS batches in flight, rows back
 *                  to the host: hx_embed's encoder side without tokenization
 *   encoder_sync   submit + wait per batch (CUDA), or hx_bert_encode_prep per batch (CPU)
 *   e2e            hx_embed on the texts: tokenization, batching, encoder, rows in place
 *   embed_encoder_bench MODEL [B=256] [R=3] [cpu|cuda] < sentences.txt     (MODEL: BERT .gguf or HF folder) */
#include "backend/cpu/bert.h"
#include "core/core.h"
#include "core/pool.h"
#include "model/model.h"
#include "tok/tok.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct seq { int len; int32_t *ids; } seq;
static int by_len(const void *a, const void *b) { return ((const seq *)a)->len - ((const seq *)b)->len; }

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: %s MODEL [B=256] [R=3] [cpu|cuda] < texts\n", argv[0]); return 2; }
    const char *path = argv[1];
    int B = argc > 2 ? atoi(argv[2]) : 256, R = argc > 3 ? atoi(argv[3]) : 3;
    bool cuda = argc > 4 ? !strcmp(argv[4], "cuda") : false;
    if (B < 1 || R < 1) { fprintf(stderr, "B and R must be >= 1\n"); return 2; }
    hx_error e = {0};
    hx_embedder *em = NULL;
    if (hx_embedder_open(path, 0, &em, &e) || hx_embedder_set_device(em, cuda ? "cuda" : "cpu", &e)) {
        fprintf(stderr, "%s: %s\n", path, e.msg);
        return 1;
    }
    hx_embedder_set_batch(em, B);
    hx_model *m = NULL;
    hx_tok *tok = NULL;
    char vocab[1100];
    snprintf(vocab, sizeof vocab, "%s/vocab.txt", path);
    size_t pl = strlen(path);
    bool gguf = pl > 5 && !strcmp(path + pl - 5, ".gguf");
    if (hx_model_load_any(path, &m, &e) || (gguf ? hx_tok_load_gguf(path, &tok, &e) : hx_tok_load_vocab_txt(vocab, &tok, &e))) {
        fprintf(stderr, "%s: %s\n", path, e.msg);
        return 1;
    }
    /* texts */
    size_t cap = 1024, n = 0, lcap = 0;
    char **texts = malloc(cap * sizeof *texts), *line = NULL;
    ssize_t len;
    while (texts && (len = getline(&line, &lcap, stdin)) >= 0) {
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (n == cap && !(texts = realloc(texts, (cap *= 2) * sizeof *texts))) break;
        texts[n++] = strdup(line);
    }
    free(line);
    if (!texts || !n) { fprintf(stderr, "no texts\n"); return 1; }
    const int E = m->cfg.n_embd, M = m->cfg.n_ctx_train < 256 ? m->cfg.n_ctx_train : 256, BUDGET = 32768;
    seq *s = calloc(n, sizeof *s);
    int64_t total = 0;
    double t_tok = hx_now_s();
    for (size_t i = 0; i < n; i++) {
        size_t nt = 0;
        if (hx_tok_encode(tok, texts[i], strlen(texts[i]), true, false, &s[i].ids, &nt, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        s[i].len = (int)hx_tok_truncate(tok, s[i].ids, nt, (size_t)M);
        total += s[i].len;
    }
    t_tok = hx_now_s() - t_tok;
    qsort(s, n, sizeof *s, by_len);
    /* batches: [first[k], first[k + 1]) */
    int *first = malloc((n + 1) * sizeof *first), nb = 0;
    int32_t *ids = malloc((size_t)total * sizeof *ids);
    int *lens = malloc(n * sizeof *lens);
    float *out = malloc(n * (size_t)E * sizeof *out);
    int64_t *off = malloc((n + 1) * sizeof *off);
    off[0] = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(ids + off[i], s[i].ids, (size_t)s[i].len * sizeof *ids);
        lens[i] = s[i].len;
        off[i + 1] = off[i] + s[i].len;
    }
    first[0] = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int64_t t = 0;
        while (j < n && (int)(j - i) < B && (j == i || t + lens[j] <= BUDGET)) t += lens[j++];
        first[++nb] = (int)j;
        i = j;
    }
    double best_sync = 0, best_async = 0, best_e2e = 0;
#ifdef HX_HAVE_CUDA
    hx_cuda_bert *gb = NULL;
    if (cuda && hx_cuda_bert_new(m, -1, &gb, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
#endif
    hx_bert_cpu *prep = NULL;
    hx_pool *pool = hx_pool_create(0);
    if (!cuda && hx_bert_cpu_new(m, &prep, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    for (int r = 0; r <= R; r++) { /* pass 0 warms up */
        double t0 = hx_now_s();
        for (int k = 0; k < nb; k++) {
            int a = first[k], c = first[k + 1];
#ifdef HX_HAVE_CUDA
            if (cuda) {
                const float *rows = NULL;
                if (hx_cuda_bert_submit(gb, 0, ids + off[a], lens + a, c - a, 1, true, &e) ||
                    hx_cuda_bert_wait(gb, 0, &rows, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
                memcpy(out + (size_t)a * E, rows, (size_t)(c - a) * E * sizeof *out);
                continue;
            }
#endif
            if (hx_bert_encode_prep(m, prep, pool, ids + off[a], lens + a, c - a, HX_POOL_MEAN, true, out + (size_t)a * E, &e)) {
                fprintf(stderr, "%s\n", e.msg);
                return 1;
            }
        }
        double dt = hx_now_s() - t0;
        if (r && n / dt > best_sync) best_sync = n / dt;
#ifdef HX_HAVE_CUDA
        if (cuda) {
            t0 = hx_now_s();
            int in_slot[HX_CUDA_BERT_SLOTS] = {0}; /* batch + 1 in each slot, 0 = free */
            for (int k = 0; k <= nb + HX_CUDA_BERT_SLOTS; k++) {
                int sl = k % HX_CUDA_BERT_SLOTS;
                if (in_slot[sl]) {
                    const float *rows = NULL;
                    int q = in_slot[sl] - 1;
                    if (hx_cuda_bert_wait(gb, sl, &rows, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
                    memcpy(out + (size_t)first[q] * E, rows, (size_t)(first[q + 1] - first[q]) * E * sizeof *out);
                    in_slot[sl] = 0;
                }
                if (k < nb) {
                    int a = first[k], c = first[k + 1];
                    if (hx_cuda_bert_submit(gb, sl, ids + off[a], lens + a, c - a, 1, true, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
                    in_slot[sl] = k + 1;
                }
            }
            dt = hx_now_s() - t0;
            if (r && n / dt > best_async) best_async = n / dt;
        }
#endif
        t0 = hx_now_s();
        if (hx_embed(em, (const char *const *)texts, (int)n, out, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
        dt = hx_now_s() - t0;
        if (r && n / dt > best_e2e) best_e2e = n / dt;
    }
    const char *dev = cuda ? "cuda" : "cpu";
    printf("{\"measure\": \"tokenize_1thread\", \"device\": \"cpu\", \"sentences\": %zu, \"tokens\": %lld, \"sentences_per_s\": %.1f}\n", n, (long long)total, n / t_tok);
    if (cuda) printf("{\"measure\": \"encoder_async\", \"device\": \"%s\", \"batch\": %d, \"sentences\": %zu, \"tokens\": %lld, \"sentences_per_s\": %.1f}\n", dev, B, n, (long long)total, best_async);
    printf("{\"measure\": \"encoder_sync\", \"device\": \"%s\", \"batch\": %d, \"sentences\": %zu, \"tokens\": %lld, \"sentences_per_s\": %.1f}\n", dev, B, n, (long long)total, best_sync);
    printf("{\"measure\": \"e2e\", \"device\": \"%s\", \"batch\": %d, \"sentences\": %zu, \"tokens\": %lld, \"sentences_per_s\": %.1f}\n", dev, B, n, (long long)total, best_e2e);
#ifdef HX_HAVE_CUDA
    hx_cuda_bert_free(gb);
#endif
    hx_bert_cpu_free(prep);
    hx_pool_free(pool);
    for (size_t i = 0; i < n; i++) { free(texts[i]); free(s[i].ids); }
    free(texts); free(s); free(first); free(ids); free(lens); free(out); free(off);
    hx_tok_free(tok);
    hx_model_free(m);
    hx_embedder_free(em);
    return 0;
}
