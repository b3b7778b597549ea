/* test_kv_pages.c — the shared KV pool of pages (helix.h, "Contexts"), through
 * the public API only.
 *
 * Model: a synthetic smollm-shaped file with f32 weights written by `helix-bg
 * synth` ($HX_BIN, set by ctest), or argv[1]. Covers:
 *  - layout: the same batches on a paged context and on a slotted one give
 *    the same logits bit for bit, in both arithmetic modes (the parity mode's
 *    ggml-order attention, its tiled prompt path, and the exact mode's grouped
 *    kernels all read rows through the page table);
 *  - sharing: a pool of 256 positions and 4 sequences, one grown to 200 while
 *    three stay short (fixed slots would give each 64): every sequence's
 *    greedy tokens equal it alone, logits within 1e-4 (f32 weights and cache);
 *  - a full pool: hx_decode fails with HX_ERR_KV_FULL and changes nothing
 *    (lengths, tokens, what the next decode computes);
 *  - pages come back after clear and keep and are used again, the sequence
 *    decoding as before;
 *  - hx_seq_copy and hx_seq_save / hx_seq_load of a paged sequence;
 *  - a sliding-window model (a tiny gemma3 of window 8 made with the private
 *    hx_synth_write; ubatches of 8): its ring layers keep per-sequence rings
 *    that wrap while its full layer is paged, bit for bit as with slots. */
#include <helix.h>

#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "t_synth.h"

static int fails = 0, checks = 0;
#define CHECK(c) do { checks++; if (!(c)) { fails++; fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c); } } while (0)
#define CHECKF(c, ...) do { checks++; if (!(c)) { fails++; fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #c); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

static char g_tmp[256];
static int V;
static int g_ubatch;   /* n_ubatch of the contexts made (0: the default) */

static hx_context *new_ctx(hx_model *m, int n_seq, int n_ctx, int n_ctx_seq, bool exact, bool kv_f32, bool slots) {
    hx_error e = {0};
    hx_context_params cp = hx_context_default_params();
    cp.n_seq_max = n_seq;
    cp.n_ctx = n_ctx;
    cp.n_ctx_seq = n_ctx_seq;
    cp.n_threads = 2;
    cp.exact = exact;
    cp.kv_f32 = kv_f32;
    cp.kv_slots = slots;
    if (g_ubatch) cp.n_ubatch = g_ubatch;
    hx_context *c = NULL;
    if (hx_context_new(m, &cp, &c, &e)) { fprintf(stderr, "context: %s\n", e.msg); fails++; return NULL; }
    return c;
}

static int32_t tok(unsigned *rng) { *rng = *rng * 1103515245u + 12345u; return (int32_t)((*rng >> 8) % 256); }

/* Appends n tokens of sequence s from position pos; the last asks for logits. */
static void add_run(hx_batch *b, const int32_t *t, int n, int pos, int s) {
    for (int i = 0; i < n; i++) hx_batch_add(b, t[i], pos + i, s, i == n - 1);
}

static double max_diff(const float *a, const float *b) {
    double d = 0;
    for (int v = 0; v < V; v++) if (fabs(a[v] - b[v]) > d) d = fabs(a[v] - b[v]);
    return d;
}

/* ---- layout: paged == slots, bit for bit ---- */

/* A fixed schedule on c (4 sequences of at most 96 positions): sequence 0's
 * prompt of 70 alone (the parity mode's tiled attention), then the other
 * prompts interleaved, then 8 steps of all four; every logits row to out
 * (rows x V), returns the rows written. */
static int schedule(hx_context *c, float *out) {
    hx_error e = {0};
    hx_batch b = hx_batch_init(256);
    unsigned rng = 99;
    int32_t p[4][70];
    const int np[4] = { 70, 5, 17, 33 };
    for (int s = 0; s < 4; s++) for (int i = 0; i < np[s]; i++) p[s][i] = tok(&rng);
    int rows = 0;
    add_run(&b, p[0], np[0], 0, 0);
    CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
    memcpy(out + (size_t)rows++ * V, hx_get_logits(c, -1), sizeof(float) * (size_t)V);
    hx_batch_clear(&b);
    for (int s = 1; s < 4; s++) add_run(&b, p[s], np[s], 0, s);
    CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
    for (int i = 0; i < b.n_tokens; i++)
        if (b.logits[i]) memcpy(out + (size_t)rows++ * V, hx_get_logits(c, i), sizeof(float) * (size_t)V);
    for (int g = 0; g < 8; g++) {
        hx_batch_clear(&b);
        for (int s = 0; s < 4; s++) hx_batch_add(&b, tok(&rng), np[s] + g, s, true);
        CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
        for (int i = 0; i < 4; i++) memcpy(out + (size_t)rows++ * V, hx_get_logits(c, i), sizeof(float) * (size_t)V);
    }
    hx_batch_free(&b);
    return rows;
}

static void test_layout(hx_model *m, const char *what) {
    for (int mode = 0; mode < 2; mode++) {
        bool exact = mode == 1;
        hx_context *pg = new_ctx(m, 4, 4 * 96, 96, exact, false, false);
        hx_context *sl = new_ctx(m, 4, 4 * 96, 0, exact, false, true);
        if (!pg || !sl) { hx_context_free(pg); hx_context_free(sl); return; }
        CHECK(hx_context_kv_page(pg) > 0 && hx_context_kv_page(sl) == 0);
        CHECK(hx_context_n_ctx_seq(pg) == 96 && hx_context_n_ctx_seq(sl) == 96);
        float *a = malloc(sizeof(float) * (size_t)V * 64), *b = malloc(sizeof(float) * (size_t)V * 64);
        int na = schedule(pg, a), nb = schedule(sl, b);
        CHECK(na == nb && na == 36);
        CHECKF(!memcmp(a, b, sizeof(float) * (size_t)V * na), "%s mode: paged logits differ from slotted ones",
               exact ? "exact" : "parity");
        printf("layout (%s, %s, f16 cache): %d rows of logits equal with pages and with slots\n", what,
               exact ? "exact" : "parity", na);
        free(a); free(b);
        hx_context_free(pg); hx_context_free(sl);
    }
}

/* ---- sharing, a full pool, pages back ---- */

enum { POOL = 256, LONG = 200, NSH = 3 };

/* Sequence s's tokens alone from 0: returns logits at position n - 1 of
 * toks[0..n) into out (exact, f32: the reference). */
static void alone(hx_context *one, const int32_t *toks, int n, float *out) {
    hx_error e = {0};
    hx_batch b = hx_batch_init(n);
    hx_seq_clear(one, 0);
    add_run(&b, toks, n, 0, 0);
    CHECKF(hx_decode(one, &b, &e) == HX_OK, "%s", e.msg);
    memcpy(out, hx_get_logits(one, -1), sizeof(float) * (size_t)V);
    hx_batch_free(&b);
}

static void test_pool(hx_model *m) {
    hx_error e = {0};
    hx_context *c = new_ctx(m, 4, POOL, 0, true, true, false);
    hx_context *one = new_ctx(m, 1, POOL, 0, true, true, false);
    if (!c || !one) { hx_context_free(c); hx_context_free(one); return; }
    const int P = hx_context_kv_page(c);
    CHECKF(P > 0 && hx_context_n_ctx(c) == POOL && hx_context_kv_free(c) == POOL, "page %d, n_ctx %d, free %d", P,
           hx_context_n_ctx(c), hx_context_kv_free(c));
    CHECKF(hx_context_n_ctx_seq(c) == POOL, "one sequence may hold the whole pool: %d", hx_context_n_ctx_seq(c));
    /* fixed slots would give each sequence POOL / 4 = 64 positions */
    int32_t t[4][LONG + 8];
    unsigned rng = 7;
    for (int s = 0; s < 4; s++) for (int i = 0; i < LONG + 8; i++) t[s][i] = tok(&rng);
    const int np[4] = { 150, 6, 9, 12 };
    int len[4];
    hx_batch b = hx_batch_init(512);
    for (int s = 0; s < 4; s++) add_run(&b, t[s], np[s], 0, s);
    CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
    for (int s = 0; s < 4; s++) len[s] = np[s];
    /* steps: sequence 0 to LONG, the short ones while they stay within one page */
    float *lg = malloc(sizeof(float) * (size_t)V), *ref = malloc(sizeof(float) * (size_t)V);
    double worst = 0;
    int compared = 0, tok_eq = 0;
    while (len[0] < LONG) {
        hx_batch_clear(&b);
        int who[4], k = 0;
        for (int s = 0; s < 4; s++)
            if (s == 0 || len[s] < P) { hx_batch_add(&b, t[s][len[s]], len[s], s, true); who[k++] = s; }
        CHECKF(hx_decode(c, &b, &e) == HX_OK, "at %d: %s", len[0], e.msg);
        for (int i = 0; i < k; i++) {
            int s = who[i];
            len[s]++;
            if (s == 0 && len[0] % 25 != 0 && len[0] != LONG) continue; /* sequence 0 checked now and then */
            memcpy(lg, hx_get_logits(c, i), sizeof(float) * (size_t)V);
            alone(one, t[s], len[s], ref);
            double d = max_diff(lg, ref);
            if (d > worst) worst = d;
            tok_eq += hx_argmax(lg, V) == hx_argmax(ref, V);
            compared++;
        }
    }
    for (int s = 0; s < 4; s++) CHECK(hx_seq_pos(c, s) == (s == 0 ? LONG : P));
    CHECKF(tok_eq == compared && worst <= 1e-4, "%d of %d greedy picks equal alone, max |logit diff| %g", tok_eq,
           compared, worst);
    printf("pool: sequences of %d, %d, %d, %d positions in a pool of %d (slots of %d could not), %d rows equal alone "
           "within %.2g\n", len[0], len[1], len[2], len[3], POOL, POOL / 4, compared, worst);

    /* the pool is full: 13 + 3 pages. A batch needing one more page fails and changes nothing */
    CHECKF(hx_context_kv_free(c) == 0, "free %d", hx_context_kv_free(c));
    hx_batch_clear(&b);
    hx_batch_add(&b, t[0][LONG], LONG, 0, true);       /* fits the last page of sequence 0 */
    hx_batch_add(&b, t[1][P], P, 1, true);             /* needs a page */
    CHECK(hx_decode(c, &b, &e) == HX_ERR_KV_FULL && strstr(e.msg, "full"));
    CHECK(hx_seq_pos(c, 0) == LONG && hx_seq_pos(c, 1) == P && hx_context_kv_free(c) == 0);
    CHECK(!memcmp(hx_seq_tokens(c, 0), t[0], sizeof(int32_t) * LONG));
    CHECK(hx_seq_copy(c, 0, 3, 20, &e) == HX_ERR_KV_FULL && hx_seq_pos(c, 3) == P);
    /* what was there is intact: sequence 0's next step as alone */
    hx_batch_clear(&b);
    hx_batch_add(&b, t[0][LONG], LONG, 0, true);
    CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
    alone(one, t[0], LONG + 1, ref);
    CHECKF(max_diff(hx_get_logits(c, 0), ref) <= 1e-4, "after KV_FULL: %g", max_diff(hx_get_logits(c, 0), ref));
    hx_seq_keep(c, 0, LONG);

    /* pages back: clearing sequence 3 frees its page; keeping 100 of 200 frees 6 more */
    hx_seq_clear(c, 3);
    CHECKF(hx_context_kv_free(c) == P, "after clear: %d", hx_context_kv_free(c));
    CHECK(hx_seq_keep(c, 0, 100) == 100);
    CHECKF(hx_context_kv_free(c) == P + 6 * P, "after keep: %d", hx_context_kv_free(c));
    /* reused: sequence 1 grows into a freed page, sequence 0 back to LONG in one batch */
    hx_batch_clear(&b);
    add_run(&b, t[1] + P, 4, P, 1);
    add_run(&b, t[0] + 100, LONG - 100, 100, 0);
    CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
    CHECK(hx_context_kv_free(c) == 0 && hx_seq_pos(c, 1) == P + 4 && hx_seq_pos(c, 0) == LONG);
    alone(one, t[0], LONG, ref);
    double d0 = max_diff(hx_get_logits(c, -1), ref);
    alone(one, t[1], P + 4, ref);
    double d1 = max_diff(hx_get_logits(c, 3), ref);
    CHECKF(d0 <= 1e-4 && d1 <= 1e-4, "through reused pages: sequence 0 %g, sequence 1 %g", d0, d1);
    /* a refused decode takes no pages: a valid token, then one at a bad position */
    hx_seq_clear(c, 1);
    int free0 = hx_context_kv_free(c);
    hx_batch_clear(&b);
    hx_batch_add(&b, 1, 0, 2, true);
    hx_batch_add(&b, 1, 40, 1, true);
    CHECK(hx_decode(c, &b, &e) == HX_ERR_RANGE && hx_context_kv_free(c) == free0 && hx_seq_pos(c, 2) == P);

    /* copy of a paged sequence: 80 positions of 0 into 1 (5 pages of its own) */
    enum { C = 80 };
    hx_seq_clear(c, 2);
    CHECK(hx_seq_keep(c, 0, C) == C);
    CHECKF(hx_seq_copy(c, 0, 1, C, &e) == HX_OK, "%s", e.msg);
    CHECK(hx_seq_pos(c, 1) == C && !memcmp(hx_seq_tokens(c, 1), t[0], sizeof(int32_t) * C));
    CHECKF(hx_context_kv_free(c) == POOL - 2 * (C / P) * P, "after copy: %d", hx_context_kv_free(c));
    hx_batch_clear(&b);
    hx_batch_add(&b, 42, C, 0, true);
    hx_batch_add(&b, 42, C, 1, true);
    CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
    CHECK(!memcmp(hx_get_logits(c, 0), hx_get_logits(c, 1), sizeof(float) * (size_t)V));

    /* save / load: sequence 1 (C + 1 positions, 6 pages) to a file, loaded into 3 after clearing 1 */
    char path[400];
    snprintf(path, sizeof path, "%s/seq1.hxseq", g_tmp);
    CHECKF(hx_seq_save(c, 1, path, &e) == HX_OK, "%s", e.msg);
    hx_seq_clear(c, 1);
    int before = hx_context_kv_free(c);
    CHECKF(hx_seq_load(c, 3, path, &e) == HX_OK, "%s", e.msg);
    CHECK(hx_seq_pos(c, 3) == C + 1 && hx_context_kv_free(c) == before - 6 * P);
    /* and a load with no room (one page of its own and 3 free, 6 needed): KV_FULL, sequence 2 as it was */
    hx_batch_clear(&b);
    add_run(&b, t[2], 9, 0, 2);
    CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
    CHECKF(hx_context_kv_free(c) == 3 * P, "free %d", hx_context_kv_free(c));
    CHECK(hx_seq_load(c, 2, path, &e) == HX_ERR_KV_FULL && hx_seq_pos(c, 2) == 9 && hx_context_kv_free(c) == 3 * P);
    hx_batch_clear(&b);
    hx_batch_add(&b, 7, C + 1, 3, true);
    CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
    int32_t all[C + 2];
    memcpy(all, t[0], sizeof(int32_t) * C);
    all[C] = 42;
    all[C + 1] = 7;
    alone(one, all, C + 2, ref);
    CHECKF(max_diff(hx_get_logits(c, 0), ref) <= 1e-4, "loaded sequence: %g", max_diff(hx_get_logits(c, 0), ref));
    printf("pool: KV_FULL leaves state intact; pages come back after clear/keep and are reused; copy and save/load "
           "of a paged sequence decode as alone\n");

    free(lg); free(ref);
    hx_batch_free(&b);
    hx_context_free(c);
    hx_context_free(one);
}

/* ---- hx_generate and hx_classify on a pool ---- */

/* hx_generate on a sequence beside one holding most of the pool: it stops
 * with HX_STOP_CONTEXT when no page is left (not an error), and the other
 * sequence is untouched. hx_classify on a paged context: every sequence gets
 * its share, so a full group of prompts runs without filling the pool. */
static void test_generate(hx_model *m) {
    hx_error e = {0};
    hx_context *c = new_ctx(m, 2, 128, 0, true, true, false);
    if (!c) return;
    int32_t big[100];
    unsigned rng = 3;
    for (int i = 0; i < 100; i++) big[i] = tok(&rng);
    hx_batch b = hx_batch_init(128);
    add_run(&b, big, 100, 0, 0);
    CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s", e.msg);
    int free0 = hx_context_kv_free(c);   /* 128 - 7 pages of 16 = 16 */
    hx_generate_params gp = hx_generate_default_params();
    int32_t pr[5] = { 11, 12, 13, 14, 15 };
    gp.prompt_ids = pr;
    gp.n_prompt_ids = 5;
    gp.seq = 1;
    gp.max_tokens = 100;
    gp.ignore_eog = true;
    gp.sampling.temp = 0;
    hx_generate_result r;
    CHECKF(hx_generate(c, &gp, &r, &e) == HX_OK, "%s", e.msg);
    CHECKF(r.stop == HX_STOP_CONTEXT && hx_seq_pos(c, 1) == free0 && hx_context_kv_free(c) == 0,
           "generate on a full pool: stop %d, sequence 1 at %d (want %d), free %d", (int)r.stop, hx_seq_pos(c, 1), free0,
           hx_context_kv_free(c));
    CHECK(hx_seq_pos(c, 0) == 100 && !memcmp(hx_seq_tokens(c, 0), big, sizeof big));
    hx_generate_result_free(&r);
    /* classify: 4 sequences, a pool of 4 x 96; prompts of 60-70 tokens fill most of every share at once */
    hx_context *k = new_ctx(m, 4, 4 * 96, 0, true, true, false);
    if (k) {
        const char *prompts[4] = {
            "one two three four five six seven eight nine ten eleven twelve thirteen",
            "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi",
            "red orange yellow green blue indigo violet black white grey brown pink",
            "north south east west up down left right front back inside outside over" };
        const char *labels[2] = { " yes", " no" };
        float p4[8], p1[2];
        CHECKF(hx_classify(k, prompts, 4, labels, 2, p4, NULL, NULL, &e) == HX_OK, "%s", e.msg);
        hx_context *one = new_ctx(m, 1, 128, 0, true, true, false);
        double d = 0;
        for (int i = 0; one && i < 4; i++) {
            CHECKF(hx_classify(one, prompts + i, 1, labels, 2, p1, NULL, NULL, &e) == HX_OK, "%s", e.msg);
            for (int j = 0; j < 2; j++) if (fabs(p1[j] - p4[2 * i + j]) > d) d = fabs(p1[j] - p4[2 * i + j]);
        }
        CHECKF(d <= 1e-5, "classify on a pool differs from alone by %g", d);
        hx_context_free(one);
        hx_context_free(k);
    }
    printf("generate: stops with HX_STOP_CONTEXT when the pool is full; classify on a pool equals alone\n");
    hx_batch_free(&b);
    hx_context_free(c);
}

/* ---- parameters ---- */

static void test_params(hx_model *m) {
    hx_error e = {0};
    hx_context_params cp = hx_context_default_params();
    hx_context *c = NULL;
    cp.n_seq_max = 4; cp.n_ctx = 256; cp.n_ctx_seq = 300;
    CHECK(hx_context_new(m, &cp, &c, &e) == HX_ERR_ARG && !c && strstr(e.msg, "n_ctx_seq"));
    cp.n_ctx_seq = -1;
    CHECK(hx_context_new(m, &cp, &c, &e) == HX_ERR_ARG && !c);
    /* a pool rounded up so each sequence still fits what its slot held: 4 x 20 -> 4 pages of 16 would hold 64 */
    cp.n_ctx_seq = 0; cp.n_ctx = 80;
    CHECKF(hx_context_new(m, &cp, &c, &e) == HX_OK, "%s", e.msg);
    if (c) {
        int P = hx_context_kv_page(c), need = 4 * ((20 + P - 1) / P) * P;
        CHECKF(hx_context_n_ctx(c) >= need && hx_context_n_ctx(c) >= 80, "pool %d (need %d)", hx_context_n_ctx(c), need);
    }
    hx_context_free(c);
    c = NULL;
    cp.n_seq_max = 1; cp.n_ctx = 100;   /* one sequence: a slot of its own */
    CHECKF(hx_context_new(m, &cp, &c, &e) == HX_OK, "%s", e.msg);
    CHECK(c && hx_context_kv_page(c) == 0 && hx_context_n_ctx_seq(c) == 100 && hx_context_kv_free(c) == 100);
    hx_context_free(c);
    CHECK(strcmp(hx_status_str(HX_ERR_KV_FULL), "unknown status") != 0);
}

int main(int argc, char **argv) {
    hx_set_log_level(1);
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hx_test_kv_pages.XXXXXX");
    if (!mkdtemp(g_tmp)) { perror("mkdtemp"); return 1; }
    char model[400];
    snprintf(model, sizeof model, "%s/smollm-f32.gguf", g_tmp);
    if (argc > 1) snprintf(model, sizeof model, "%s", argv[1]);
    else if (!t_synth(model, "smollm-135m", "f32", "--layers 2 --vocab 1024")) {
        printf("SKIP: no model: give one as argv[1] or set HX_BIN to helix-bg (ctest does)\n");
        rmdir(g_tmp);
        return 77;
    }
    hx_error e = {0};
    hx_model *m = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    if (hx_model_open(model, &mp, &m, &e)) { fprintf(stderr, "open %s: %s\n", model, e.msg); fails++; }
    if (m) {
        V = hx_model_n_vocab(m);
        test_params(m);
        test_layout(m, "smollm");
        test_pool(m);
        test_generate(m);
    }
    hx_model_free(m);
    /* a sliding-window model: gemma3 shapes in miniature, window 8, 6 layers (5 sliding, 1 full) */
    static const hx_preset gemma = { "tiny-gemma3", HX_ARCH_GEMMA3, 64, 6, 4, 1, 16, 128, 384, 256, 1000000.f,
                                     10000.f, 1e-6f, true, 8, "default" };
    char gpath[400];
    snprintf(gpath, sizeof gpath, "%s/tiny-gemma3.gguf", g_tmp);
    hx_synth_opts so = { .preset = &gemma, .mix = HX_MIX_F32, .seed = 11, .n_vocab = gemma.n_vocab, .n_threads = 2 };
    m = NULL;
    CHECKF(hx_synth_write(&so, gpath, &e) == HX_OK, "synth tiny-gemma3: %s", e.msg);
    CHECKF(hx_model_open(gpath, &mp, &m, &e) == HX_OK, "open tiny-gemma3: %s", e.msg);
    if (m) {
        V = hx_model_n_vocab(m);
        g_ubatch = 8;   /* rings of window + ubatch = 16 rows: they wrap in the schedule's 78 positions */
        test_layout(m, "tiny gemma3, rings + pages");
        g_ubatch = 0;
    }
    hx_model_free(m);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", g_tmp);
    printf("test_kv_pages: %d checks, %d failures\n", checks, fails);
    return fails ? 1 : 0;
}
