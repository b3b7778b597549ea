/* test_pipe.c — the layer (pipeline) split (api/pipe.c) on the CPU, through
 * the public API: a model opened with layer_split 2 and 3 (device CPU) must
 * give the logits of the same model without the split bit for bit, since
 * only the layer loop is cut (the residual stream passes between the parts
 * as f32). Both in the exact mode and in the parity mode (llama.cpp's
 * rounding, f16 cache), over:
 *   - a prompt of 40 tokens in ubatches of 16, every row's logits and hidden
 *     state;
 *   - greedy decode steps;
 *   - two sequences prefilled and decoded in the same batches;
 *   - hx_seq_copy of a prefix, then decoding the copy (and a copy the
 *     sliding-window rings no longer hold: refused alike, the target kept);
 *   - hx_seq_keep (a rewind) then decoding again (with a sliding-window
 *     ring, a rewind past the window must drop the sequence on both);
 *   - hx_seq_save / hx_seq_load of a sequence into a cleared slot;
 *   - hx_generate's greedy ids;
 *   - a state saved without the split does not load with it, and a split of
 *     more parts than layers is refused.
 * Models: synthetic tiny llama (untied head, 4 layers) and gemma3 (window 8,
 * sliding-window rings, tied head, 6 layers), always; the ref-tiny llama3,
 * qwen3 and gemma3 of ../shared when present (skipped with a line if not). */
#include "test_util.h"

#include <unistd.h>

#include "helix.h"
#include "model/synth.h"

enum { NSEQ = 3, NCTX = 96, UB = 16, PROMPT = 40, STEPS = 8 };

typedef struct pair {
    hx_model *m0, *m1;      /* without and with the split */
    hx_context *c0, *c1;
    int V, D;
    const char *what;
} pair;

static hx_model *open_model(const char *path, int split, hx_error *e) {
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    mp.layer_split = split;
    hx_model *m = NULL;
    return hx_model_open(path, &mp, &m, e) ? NULL : m;
}

static hx_context *open_ctx(hx_model *m, bool exact, hx_error *e) {
    hx_context_params cp = hx_context_default_params();
    cp.n_seq_max = NSEQ;
    cp.n_ctx = NSEQ * NCTX;
    cp.n_ctx_seq = NCTX;  /* the split's slots and the plain context's pages hold as much per sequence */
    cp.n_batch = 64;
    cp.n_ubatch = UB;
    cp.n_threads = 2;
    cp.exact = exact;
    cp.embeddings = true;
    hx_context *c = NULL;
    return hx_context_new(m, &cp, &c, e) ? NULL : c;
}

/* Runs b on both contexts; every row that asks compares logits and hidden
 * states bit for bit. Returns false when a decode failed. */
static bool both(pair *p, const hx_batch *b, const char *step) {
    hx_error e0 = {0}, e1 = {0};
    hx_status s0 = hx_decode(p->c0, b, &e0), s1 = hx_decode(p->c1, b, &e1);
    CHECKF(s0 == HX_OK, "%s: %s: no split: %s", p->what, step, e0.msg);
    CHECKF(s1 == HX_OK, "%s: %s: split: %s", p->what, step, e1.msg);
    if (s0 || s1) return false;
    int bad = 0, badh = 0;
    for (int i = 0; i < b->n_tokens; i++) {
        if (!b->logits[i]) continue;
        const float *a = hx_get_logits(p->c0, i), *c = hx_get_logits(p->c1, i);
        const float *ha = hx_get_embeddings(p->c0, i), *hc = hx_get_embeddings(p->c1, i);
        if (!a || !c || memcmp(a, c, sizeof(float) * (size_t)p->V)) bad++;
        if (!ha || !hc || memcmp(ha, hc, sizeof(float) * (size_t)p->D)) badh++;
    }
    CHECKF(bad == 0 && badh == 0, "%s: %s: %d rows of logits and %d hidden states differ from no split", p->what, step,
           bad, badh);
    return true;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static void run_pair(pair *p) {
    hx_batch b = hx_batch_init(64);
    int32_t prompt[PROMPT];
    uint64_t rng = 99;
    for (int i = 0; i < PROMPT; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        prompt[i] = (int32_t)((rng >> 33) % (uint64_t)p->V);
    }
    /* 1: a prompt of sequence 0 (ubatches of 16), every row */
    hx_batch_clear(&b);
    for (int i = 0; i < PROMPT; i++) hx_batch_add(&b, prompt[i], i, 0, true);
    if (!both(p, &b, "prompt")) goto out;
    /* 2: greedy decode steps */
    int t = argmax(hx_get_logits(p->c0, -1), p->V);
    for (int s = 0; s < STEPS; s++) {
        hx_batch_clear(&b);
        hx_batch_add(&b, t, PROMPT + s, 0, true);
        if (!both(p, &b, "decode step")) goto out;
        t = argmax(hx_get_logits(p->c0, 0), p->V);
    }
    /* 3: sequences 1 and 2 in the same batches: prefills of different lengths, then steps of both */
    hx_batch_clear(&b);
    for (int i = 0; i < 20; i++) hx_batch_add(&b, prompt[i], i, 1, i == 19 || i == 7);
    for (int i = 0; i < 13; i++) hx_batch_add(&b, prompt[PROMPT - 1 - i], i, 2, i == 12);
    if (!both(p, &b, "two sequences")) goto out;
    for (int k = 0; k < 4; k++) {
        int a1 = argmax(hx_get_logits(p->c0, -1), p->V);
        hx_batch_clear(&b);
        hx_batch_add(&b, a1, 20 + k, 1, true);
        hx_batch_add(&b, (a1 + 7) % p->V, 13 + k, 2, true);
        if (!both(p, &b, "two sequences, decode")) goto out;
    }
    /* 4: a prefix of sequence 1 copied over sequence 2, then decoded */
    {
        hx_error e = {0};
        CHECKF(hx_seq_copy(p->c0, 1, 2, 18, &e) == HX_OK, "%s: seq_copy: %s", p->what, e.msg);
        CHECKF(hx_seq_copy(p->c1, 1, 2, 18, &e) == HX_OK, "%s: seq_copy (split): %s", p->what, e.msg);
        CHECK(hx_seq_pos(p->c1, 2) == 18);
        hx_batch_clear(&b);
        hx_batch_add(&b, prompt[5], 18, 2, true);
        hx_batch_add(&b, prompt[6], 19, 2, true);
        if (!both(p, &b, "copied sequence")) goto out;
    }
    /* 5: rewinds of sequence 0: a short one, then one far back (past a ring's window: both drop it) */
    {
        int k0 = hx_seq_keep(p->c0, 0, PROMPT + STEPS - 3), k1 = hx_seq_keep(p->c1, 0, PROMPT + STEPS - 3);
        CHECKF(k0 == k1, "%s: seq_keep: %d positions kept, %d with the split", p->what, k0, k1);
        hx_batch_clear(&b);
        hx_batch_add(&b, prompt[1], k0, 0, true);
        if (!both(p, &b, "after a rewind")) goto out;
        /* a short prefix copied: refused alike where a ring lost its window (sequence 2 kept), else copied */
        hx_error e0 = {0}, e1 = {0};
        int len2 = hx_seq_pos(p->c1, 2);
        hx_status s0 = hx_seq_copy(p->c0, 0, 2, 10, &e0), s1 = hx_seq_copy(p->c1, 0, 2, 10, &e1);
        CHECKF(s0 == s1, "%s: seq_copy of 10 positions: %d (%s), %d with the split (%s)", p->what, s0, e0.msg, s1,
               e1.msg);
        CHECK(hx_seq_pos(p->c0, 2) == hx_seq_pos(p->c1, 2) && hx_seq_pos(p->c1, 2) == (s1 ? len2 : 10));
        hx_batch_clear(&b);
        hx_batch_add(&b, prompt[2], hx_seq_pos(p->c0, 2), 2, true);
        if (!both(p, &b, "after a short copy")) goto out;
        k0 = hx_seq_keep(p->c0, 0, 10);
        k1 = hx_seq_keep(p->c1, 0, 10);
        CHECKF(k0 == k1, "%s: seq_keep far back: %d positions kept, %d with the split", p->what, k0, k1);
        hx_batch_clear(&b);
        for (int i = k0; i < k0 + 12; i++) hx_batch_add(&b, prompt[i], i, 0, i >= k0 + 10);
        if (!both(p, &b, "after a far rewind")) goto out;
    }
    /* 6: sequence 1 saved (split), cleared, loaded into slot 1 again; the next steps match */
    {
        char path[128];
        snprintf(path, sizeof path, "/tmp/hx_test_pipe_%d.seq", (int)getpid());
        hx_error e = {0};
        int keep = hx_seq_pos(p->c1, 1);
        CHECKF(hx_seq_save(p->c1, 1, path, &e) == HX_OK, "%s: save: %s", p->what, e.msg);
        hx_seq_clear(p->c1, 1);
        CHECK(hx_seq_pos(p->c1, 1) == 0);
        CHECKF(hx_seq_load(p->c1, 1, path, &e) == HX_OK, "%s: load: %s", p->what, e.msg);
        CHECK(hx_seq_pos(p->c1, 1) == keep);
        /* a state saved without the split does not load with it (another backend) */
        char path0[140];
        snprintf(path0, sizeof path0, "%s.0", path);
        CHECKF(hx_seq_save(p->c0, 1, path0, &e) == HX_OK, "%s: save: %s", p->what, e.msg);
        CHECK(hx_seq_load(p->c1, 2, path0, &e) == HX_ERR_ARG);
        unlink(path);
        unlink(path0);
        for (int k = 0; k < 3; k++) {
            hx_batch_clear(&b);
            hx_batch_add(&b, prompt[9 + k], keep + k, 1, true);
            if (!both(p, &b, "reloaded sequence")) goto out;
        }
    }
    /* 7: hx_generate's greedy ids on a cleared sequence */
    {
        hx_seq_clear(p->c0, 0);
        hx_seq_clear(p->c1, 0);
        hx_generate_params gp = hx_generate_default_params();
        gp.prompt_ids = prompt;
        gp.n_prompt_ids = 24;
        gp.max_tokens = 16;
        gp.ignore_eog = true;
        hx_generate_result r0 = {0}, r1 = {0};
        hx_error e = {0};
        CHECKF(hx_generate(p->c0, &gp, &r0, &e) == HX_OK, "%s: generate: %s", p->what, e.msg);
        CHECKF(hx_generate(p->c1, &gp, &r1, &e) == HX_OK, "%s: generate (split): %s", p->what, e.msg);
        CHECKF(r0.n_ids == 16 && r1.n_ids == r0.n_ids && !memcmp(r0.ids, r1.ids, sizeof(int32_t) * (size_t)r0.n_ids),
               "%s: generate: %d and %d ids, or other ids", p->what, r0.n_ids, r1.n_ids);
        hx_generate_result_free(&r0);
        hx_generate_result_free(&r1);
    }
out:
    hx_batch_free(&b);
}

/* Every split of 2 and 3 parts (as the layers allow) against no split, in both modes. */
static int run_model(const char *name, const char *path) {
    hx_error e = {0};
    int runs = 0;
    for (int split = 2; split <= 3; split++)
        for (int exact = 1; exact >= 0; exact--) {
            pair p = {.what = name};
            p.m0 = open_model(path, 0, &e);
            CHECKF(p.m0 != NULL, "%s: open: %s", name, e.msg);
            if (!p.m0) return runs;
            if (split > hx_model_n_layer(p.m0)) { hx_model_free(p.m0); continue; }
            p.m1 = open_model(path, split, &e);
            CHECKF(p.m1 != NULL, "%s: open with layer_split %d: %s", name, split, e.msg);
            if (p.m1) {
                p.c0 = open_ctx(p.m0, exact, &e);
                CHECKF(p.c0 != NULL, "%s: context: %s", name, e.msg);
                p.c1 = open_ctx(p.m1, exact, &e);
                CHECKF(p.c1 != NULL, "%s: context with layer_split %d: %s", name, split, e.msg);
            }
            if (p.c0 && p.c1) {
                char what[160];
                snprintf(what, sizeof what, "%s x%d %s", name, split, exact ? "exact" : "parity");
                p.what = what;
                p.V = hx_model_n_vocab(p.m0);
                p.D = hx_model_n_embd(p.m0);
                int before = t_failures;
                CHECKF(hx_context_kv_bytes(p.c0) == hx_context_kv_bytes(p.c1), "%s: KV cache of %zu bytes, %zu with "
                       "the split", what, hx_context_kv_bytes(p.c0), hx_context_kv_bytes(p.c1));
                run_pair(&p);
                printf("%s: %s\n", what, t_failures == before ? "bit-identical to no split" : "FAILED");
                runs++;
            }
            hx_context_free(p.c0);
            hx_context_free(p.c1);
            hx_model_free(p.m0);
            hx_model_free(p.m1);
        }
    /* more parts than layers */
    hx_model *m = open_model(path, 0, &e);
    if (m) {
        int L = hx_model_n_layer(m);
        hx_model_free(m);
        CHECK(open_model(path, L + 1, &e) == NULL && e.status == HX_ERR_ARG);
    }
    return runs;
}

static bool synth(const hx_preset *ps, char *path) {
    int fd = mkstemp(path);
    if (fd < 0) return false;
    close(fd);
    hx_synth_opts o = {.preset = ps, .mix = HX_MIX_Q8_0, .seed = 5, .n_vocab = ps->n_vocab, .n_threads = 2};
    hx_error e = {0};
    hx_status st = hx_synth_write(&o, path, &e);
    CHECKF(st == HX_OK, "synth %s: %s", ps->name, e.msg);
    return st == HX_OK;
}

int main(void) {
    hx_set_log_level(0);
    /*                     name         arch           embd L  H KV hd ffn vocab ctx rope    swa     eps   tied win pre */
    static const hx_preset llama = {"tiny-llama", HX_ARCH_LLAMA, 64, 4, 4, 2, 16, 128, 384, 256, 10000.f, 0, 1e-5f,
                                    false, 0, "llama-bpe"};
    static const hx_preset gemma = {"tiny-gemma3", HX_ARCH_GEMMA3, 64, 6, 4, 1, 16, 128, 384, 256, 1000000.f,
                                    10000.f, 1e-6f, true, 8, "default"};
    const hx_preset *ps[2] = {&llama, &gemma};
    int runs = 0;
    for (int i = 0; i < 2; i++) {
        char path[] = "/tmp/hx_test_pipe_XXXXXX";
        if (synth(ps[i], path)) runs += run_model(ps[i]->name, path);
        unlink(path);
    }
    const char *shared = t_shared_dir();
    if (!shared) {
        printf("ref-tiny models skipped: ../shared not found (set HX_SHARED)\n");
    } else {
        const char *tiny[] = {"tiny-llama3-shared", "tiny-qwen3-shared", "tiny-gemma3-shared"};
        for (int i = 0; i < 3; i++) {
            char p[1024];
            snprintf(p, sizeof p, "%s/models/ref-tiny/%s.gguf", shared, tiny[i]);
            if (access(p, R_OK)) { printf("%s skipped: not in ../shared\n", tiny[i]); continue; }
            runs += run_model(tiny[i], p);
        }
    }
    CHECK(runs >= 8);
    return t_done("test_pipe");
}
