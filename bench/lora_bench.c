/* lora_bench.c — speed of a LoRA adapter on the CPU: BASE.gguf alone, with a
 * random rank-R adapter on every q/k/v/o/gate/up/down matrix (written next to
 * OUT as adapter.gguf), and merged (helix-bg lora-merge, written by
 * bench/lora_bench.sh). Rounds alternate the three so that load on a shared
 * machine hits them alike; each line is the best of 3 repetitions.
 * usage: lora_bench BASE.gguf MERGED.gguf ADAPTER.gguf RANK THREADS
 * (MERGED "-": only write ADAPTER, from BASE's tensor shapes). */
#include <helix.h>
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

static int write_adapter(const char *base, const char *out, int r) {
    hx_error e = {0};
    hx_gguf *g = NULL;
    if (hx_gguf_open(base, NULL, &g, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    hx_gguf_writer *w = hx_gguf_writer_new(0);
    hx_gguf_str arch;
    hx_gguf_get_str(g, "general.architecture", &arch);
    char as[64];
    snprintf(as, sizeof as, "%.*s", (int)arch.len, arch.ptr);
    hx_gguf_writer_set_str(w, "general.type", "adapter");
    hx_gguf_writer_set_str(w, "general.architecture", as);
    hx_gguf_writer_set_str(w, "adapter.type", "lora");
    hx_gguf_writer_set_f32(w, "adapter.lora.alpha", 2.0f * r);
    static const char *const mats[] = { "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down" };
    uint64_t s = 12345;
    float **bufs = calloc(2 * g->n_tensors, sizeof *bufs);
    char (*names)[2][112] = calloc(g->n_tensors, sizeof *names);
    int n = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        char nm[96];
        snprintf(nm, sizeof nm, "%.*s", (int)t->name.len, t->name.ptr);
        int hit = 0;
        for (int k = 0; k < 7; k++) {
            char suf[40];
            snprintf(suf, sizeof suf, ".%s.weight", mats[k]);
            size_t L = strlen(nm), S = strlen(suf);
            hit |= !strncmp(nm, "blk.", 4) && L > S && !strcmp(nm + L - S, suf);
        }
        if (!hit) continue;
        int64_t in = t->ne[0], o = t->ne[1];
        float *a = bufs[2 * i] = malloc(sizeof(float) * (size_t)(r * in)), *b = bufs[2 * i + 1] = malloc(sizeof(float) * (size_t)(o * r));
        for (int64_t j = 0; j < r * in; j++) { s = s * 6364136223846793005ull + 1; a[j] = ((s >> 40) / 16777216.0f - 0.5f) * 0.04f; }
        for (int64_t j = 0; j < o * r; j++) { s = s * 6364136223846793005ull + 1; b[j] = ((s >> 40) / 16777216.0f - 0.5f) * 0.04f; }
        snprintf(names[i][0], 112, "%s.lora_a", nm);
        snprintf(names[i][1], 112, "%s.lora_b", nm);
        int64_t nea[2] = { in, r }, neb[2] = { r, o };
        hx_gguf_writer_add_tensor(w, names[i][0], HX_TYPE_F32, 2, nea, a);
        hx_gguf_writer_add_tensor(w, names[i][1], HX_TYPE_F32, 2, neb, b);
        n++;
    }
    int rc = hx_gguf_writer_write(w, out, &e) ? (fprintf(stderr, "%s\n", e.msg), 1) : 0;
    fprintf(stderr, "wrote %s: rank %d on %d matrices\n", out, r, n);
    for (uint64_t i = 0; i < 2 * g->n_tensors; i++) free(bufs[i]);
    free(bufs); free(names);
    hx_gguf_writer_free(w);
    hx_gguf_close(g);
    return rc;
}

typedef struct cfg { hx_model *m; hx_context *c; hx_adapter *a; const char *label; double pp, tg; } cfg;

static void open_cfg(cfg *k, const char *model, const char *lora, int threads) {
    hx_error e = {0};
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    hx_context_params cp = hx_context_default_params();
    cp.n_ctx = 512; cp.n_threads = threads;
    float one = 1.0f;
    if (hx_model_open(model, &mp, &k->m, &e) || hx_context_new(k->m, &cp, &k->c, &e) ||
        (lora && (hx_adapter_open(k->m, lora, &k->a, &e) || hx_context_set_adapters(k->c, &k->a, &one, 1, &e)))) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
}

/* prefill 128 tokens, then 64 greedy decode steps */
static void measure(cfg *k) {
    hx_error e = {0};
    int V = hx_model_n_vocab(k->m);
    hx_batch b = hx_batch_init(128);
    hx_seq_clear(k->c, 0);
    for (int i = 0; i < 128; i++) hx_batch_add(&b, (i * 7919) % (V - 16) + 10, i, 0, i == 127);
    double t0 = now();
    if (hx_decode(k->c, &b, &e)) { fprintf(stderr, "%s\n", e.msg); exit(1); }
    double t1 = now();
    int32_t tok = hx_argmax(hx_get_logits(k->c, -1), V);
    for (int i = 0; i < 64; i++) {
        hx_batch_clear(&b);
        hx_batch_add(&b, tok, 128 + i, 0, true);
        if (hx_decode(k->c, &b, &e)) { fprintf(stderr, "%s\n", e.msg); exit(1); }
        tok = hx_argmax(hx_get_logits(k->c, -1), V);
    }
    double t2 = now();
    hx_batch_free(&b);
    if (128 / (t1 - t0) > k->pp) k->pp = 128 / (t1 - t0);
    if (64 / (t2 - t1) > k->tg) k->tg = 64 / (t2 - t1);
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s BASE.gguf MERGED.gguf ADAPTER.gguf RANK THREADS\n", argv[0]); return 2; }
    int r = atoi(argv[4]), th = atoi(argv[5]);
    if (!strcmp(argv[2], "-")) return write_adapter(argv[1], argv[3], r); /* MERGED "-": write the adapter only */
    cfg k[3] = { { .label = "base" }, { .label = "base + adapter" }, { .label = "merged" } };
    open_cfg(&k[0], argv[1], NULL, th);
    open_cfg(&k[1], argv[1], argv[3], th);
    open_cfg(&k[2], argv[2], NULL, th);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 3; i++) measure(&k[i]);
    for (int i = 0; i < 3; i++)
        printf("%-16s prefill128 %7.1f tok/s  decode64 %6.1f tok/s  (%+.1f%% / %+.1f%% vs base)\n", k[i].label, k[i].pp,
               k[i].tg, 100 * (k[i].pp / k[0].pp - 1), 100 * (k[i].tg / k[0].tg - 1));
    for (int i = 0; i < 3; i++) { hx_context_free(k[i].c); hx_adapter_free(k[i].a); hx_model_free(k[i].m); }
    return 0;
}
