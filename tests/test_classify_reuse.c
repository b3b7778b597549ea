/* test_classify_reuse.c — hx_classify's head reuse: the prompts of a group
 * share their longest common token prefix (computed once in one slot, copied
 * into the others) and slot 0 carries it from group to group. Every prompt's
 * label log-probabilities must equal those of the prompt classified alone (a
 * one-prompt call computes the whole prompt in one piece, nothing reused).
 *
 * Models: a synthetic smollm-shaped file written by `helix-bg synth` ($HX_BIN,
 * set by ctest), and from ../shared (skipped with a note when absent)
 * stories260K, tiny llama3 / qwen3 and tiny gemma3, whose sliding window of 8
 * with n_ubatch 8 gives its local layers a ring of 16 rows, so the prompts
 * (longer than that) wrap it. Prompt sets: a long shared head with different
 * tails, a prompt that is a prefix of another, a prompt equal to the shared
 * head, a duplicate, and a prompt sharing only BOS; labels of one and of
 * several tokens. Contexts: 4, 3 and 1 sequences, default (llama.cpp
 * rounding) and exact arithmetic. And the KB's classification prompts
 * (kb_llm_prompt_classify_about) of two entries share every token before the
 * note, through each model's chat template. `test_classify_reuse --cuda`
 * (not run by ctest) runs the models on the GPU, default contexts only, with
 * the default tolerance: the check of hx_seq_copy and rings on the device.
 *
 * Tolerances (relative, |s - s_alone| / (1 + |s_alone|), on the raw summed
 * log-probabilities): the reference itself is not bit-identical to any batch.
 * On the exact context (plain f32, f32 KV cache) a prompt computed as head +
 * tail gives the bits of one piece with f32 weights; with Q8_0 weights a
 * batch of several sequences differs from one sequence alone by a few ulp of
 * f32 (2.4e-7), with or without head reuse: 1e-6. The default context rounds like llama.cpp's CPU path (f16 / Q8
 * activations per batch shape): a batch of 4 prompts differs from each alone
 * by up to 1.4e-3 with no reuse at all; 3e-3. The exact case is the one that
 * catches a wrong position, a lost or a foreign token: one tail token changed
 * moves s by more than 1e-4 on every model here (checked below).
 */
#include <helix.h>
#include <helix_kb.h>

#include "kb/llm.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* --cuda: the models on the GPU (default contexts only: exact is the CPU's) */
static hx_device g_device = HX_DEVICE_CPU;

#define TOL_EXACT 1e-6
#define TOL_DEFAULT 3e-3
#define MAXP 8
#define MAXL 4

static hx_model *open_model(const char *path) {
    hx_error e = {0};
    hx_model *m = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = g_device;
    if (hx_model_open(path, &mp, &m, &e)) { fprintf(stderr, "open %s: %s\n", path, e.msg); t_failures++; return NULL; }
    return m;
}

static hx_context *new_ctx(hx_model *m, int n_ctx_seq, int n_seq, int n_ubatch, bool exact) {
    hx_error e = {0};
    hx_context_params cp = hx_context_default_params();
    cp.n_ctx = n_ctx_seq * n_seq;
    cp.n_seq_max = n_seq;
    cp.n_ubatch = n_ubatch;
    cp.n_threads = 2;
    cp.exact = exact;
    cp.kv_f32 = exact;
    hx_context *c = NULL;
    if (hx_context_new(m, &cp, &c, &e)) { fprintf(stderr, "context: %s\n", e.msg); t_failures++; return NULL; }
    return c;
}

static int n_tokens(hx_model *m, const char *s, bool bos) {
    hx_error e = {0};
    int n = 0;
    hx_tokenize(m, s, -1, bos, bos, NULL, 0, &n, &e);
    return n;
}

/* The prompts classified together against each alone on the same context:
 * the raw log-probabilities within tol (relative), the tokens accounted for. */
static void compare(hx_context *c, double tol, const char *what, const char *const *prompts, int np,
                      const char *const *labels, int nl, bool expect_reuse) {
    hx_error e = {0};
    float probs[MAXP * MAXL], lp[MAXP * MAXL], p1[MAXL], lp1[MAXL];
    hx_metrics mt, m1;
    CHECKF(hx_classify(c, prompts, np, labels, nl, probs, lp, &mt, &e) == HX_OK, "%s: %s", what, e.msg);
    for (int s = 0; s < hx_context_n_seq_max(c); s++) CHECKF(hx_seq_pos(c, s) == 0, "%s: slot %d not cleared", what, s);
    double worst = 0, worst_p = 0;
    long alone_tokens = 0;
    for (int i = 0; i < np; i++) {
        CHECKF(hx_classify(c, prompts + i, 1, labels, nl, p1, lp1, &m1, &e) == HX_OK, "%s: %s", what, e.msg);
        CHECKF(m1.cached_tokens == 0, "%s: prompt %d alone reused %d tokens", what, i, m1.cached_tokens);
        alone_tokens += m1.prompt_tokens;
        for (int j = 0; j < nl; j++) {
            double d = fabs((double)lp[i * nl + j] - lp1[j]) / (1 + fabs((double)lp1[j]));
            double dp = fabs((double)probs[i * nl + j] - p1[j]);
            if (!(d <= worst)) worst = d;      /* a NaN sticks, and fails below */
            if (!(dp <= worst_p)) worst_p = dp;
        }
    }
    CHECKF(worst <= tol, "%s: log-probabilities with head reuse differ from each prompt alone by %g (relative)", what, worst);
    CHECKF(worst_p <= tol, "%s: probabilities differ by %g", what, worst_p);
    /* every token classified is either computed or reused */
    CHECKF(mt.prompt_tokens + mt.cached_tokens == alone_tokens, "%s: %d computed + %d reused, alone %ld", what,
           mt.prompt_tokens, mt.cached_tokens, alone_tokens);
    if (expect_reuse) CHECKF(mt.cached_tokens > 0, "%s: nothing reused", what);
    printf("  %-44s worst |ds|/(1+|s|) %.2g, |dp| %.2g; %d computed, %d reused\n", what, worst, worst_p,
           mt.prompt_tokens, mt.cached_tokens);
}

static double host_lse(const float *x, int n) {
    double mx = x[0], z = 0;
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    for (int i = 0; i < n; i++) z += exp(x[i] - mx);
    return mx + log(z);
}

/* hx_classify's raw scores against the definition, computed by hand on
 * sequence 0 of c: prompt, then each label's tokens, every row's log-softmax
 * on the host from hx_get_logits (on the GPU this checks the device's
 * log-probabilities, hx_get_logprobs, against full rows). */
static void check_by_hand(hx_context *c, const char *what, const char *prompt, const char *const *labels, int nl) {
    hx_error e = {0};
    hx_model *m = (hx_model *)hx_context_model(c);
    float probs[MAXL], lp[MAXL];
    CHECKF(hx_classify(c, &prompt, 1, labels, nl, probs, lp, NULL, &e) == HX_OK, "%s: %s", what, e.msg);
    int32_t pt[512], lt[64];
    int np = 0, nlt = 0;
    CHECKF(hx_tokenize(m, prompt, -1, true, true, pt, 512, &np, &e) == HX_OK, "%s: %s", what, e.msg);
    int V = hx_model_n_vocab(m);
    double worst = 0;
    hx_batch b = hx_batch_init(512 + 64);
    for (int j = 0; j < nl; j++) {
        CHECKF(hx_tokenize(m, labels[j], -1, false, false, lt, 64, &nlt, &e) == HX_OK, "%s: %s", what, e.msg);
        hx_seq_clear(c, 0);
        hx_batch_clear(&b);
        for (int i = 0; i < np; i++) hx_batch_add(&b, pt[i], i, 0, i == np - 1);
        for (int k = 0; k + 1 < nlt; k++) hx_batch_add(&b, lt[k], np + k, 0, true);
        CHECKF(hx_decode(c, &b, &e) == HX_OK, "%s: %s", what, e.msg);
        double sj = 0;
        for (int k = 0; k < nlt; k++) {
            const float *l = hx_get_logits(c, np - 1 + k);
            sj += l[lt[k]] - host_lse(l, V);
        }
        double d = fabs(sj - lp[j]) / (1 + fabs(sj));
        if (!(d <= worst)) worst = d;
    }
    hx_seq_clear(c, 0);
    hx_batch_free(&b);
    CHECKF(worst <= 1e-3, "%s: hx_classify's scores differ from the hand computation by %g (relative)", what, worst);
    printf("  %-44s by hand: worst |ds|/(1+|s|) %.2g\n", what, worst);
}

/* One model: the prompt sets on contexts of 4, 3 and 1 sequences. ring: the
 * model has a sliding window of 8 (n_ubatch 8 makes its local layers rings). */
static void test_model(hx_model *m, const char *name, bool ring) {
    static const char *head =
        "You file the notes of a knowledge base under its topics. Topics: cats, dogs and wolves, the weather "
        "in spring, cooking rice, databases and their indexes, travel by train.\n\nNote: ";
    char buf[MAXP][512];
    const char *tails[] = {
        "the cat sat on the mat and purred all afternoon.",
        "dogs bark at night and sleep all day long, wolves howl.",
        "",                                 /* the shared head itself */
        "the cat sat",                      /* a prefix of the first */
        "the cat sat on the mat and purred all afternoon.", /* a duplicate */
        "rain again; the trains were late and the index rebuild ran slow.",
    };
    int nt = (int)(sizeof tails / sizeof *tails);
    const char *prompts[MAXP];
    for (int i = 0; i < nt; i++) {
        snprintf(buf[i], sizeof buf[i], "%s%s", head, tails[i]);
        prompts[i] = buf[i];
    }
    const char *bos_only = "Hello";  /* shares BOS at most */
    const char *mixed[MAXP] = {prompts[0], prompts[1], bos_only, prompts[3], prompts[2], prompts[5], prompts[4]};
    const char *multi[] = {" cats", " dogs and wolves", " the weather", " travel by train"};
    /* one-token labels where the vocabulary has them */
    const char *one_cand[] = {" the", " a", " cat", " and", " of", ".", ",", "!", " t", "a", "e", " "};
    const char *one[MAXL];
    int n_one = 0;
    for (int k = 0; k < (int)(sizeof one_cand / sizeof *one_cand) && n_one < 3; k++)
        if (n_tokens(m, one_cand[k], false) == 1) one[n_one++] = one_cand[k];
    int head_tok = n_tokens(m, head, true);
    int longest = 0;
    for (int i = 0; i < nt; i++) if (n_tokens(m, prompts[i], true) > longest) longest = n_tokens(m, prompts[i], true);
    printf("%s: shared head %d tokens, prompts up to %d, %d one-token labels%s\n", name, head_tok, longest, n_one,
           ring ? ", sliding-window rings of 16 rows" : "");
    if (ring) CHECKF(longest > 16, "%s: prompts of %d tokens do not wrap the ring", name, longest);
    int ctx_seq = 64;
    while (ctx_seq < longest + 16) ctx_seq *= 2;
    int ub = ring ? 8 : 512;
    struct { int n_seq; bool exact; } cfgs[] = {{4, false}, {4, true}, {3, false}, {1, false}, {1, true}};
    for (int k = 0; k < (int)(sizeof cfgs / sizeof *cfgs); k++) {
        if (cfgs[k].exact && g_device != HX_DEVICE_CPU) continue;
        hx_context *c = new_ctx(m, ctx_seq, cfgs[k].n_seq, ub, cfgs[k].exact);
        if (!c) continue;
        char what[128];
        double tol = cfgs[k].exact ? TOL_EXACT : TOL_DEFAULT;
        /* reuse is expected where a group holds two prompts, or one slot carries
         * its head to the next prompt (not on a ring) */
        bool reuse = head_tok > 2 && (cfgs[k].n_seq > 1 || !ring);
        snprintf(what, sizeof what, "%s, %d seq%s, multi-token labels", name, cfgs[k].n_seq, cfgs[k].exact ? ", exact" : "");
        compare(c, tol, what, prompts, nt, multi, 4, reuse);
        if (k == 0) check_by_hand(c, what, prompts[1], multi, 4);
        snprintf(what, sizeof what, "%s, %d seq%s, with a BOS-only sharer", name, cfgs[k].n_seq, cfgs[k].exact ? ", exact" : "");
        compare(c, tol, what, mixed, 7, multi, 4, reuse);
        if (n_one > 1) {
            snprintf(what, sizeof what, "%s, %d seq%s, one-token labels", name, cfgs[k].n_seq, cfgs[k].exact ? ", exact" : "");
            compare(c, tol, what, prompts, nt, one, n_one, reuse);
        }
        /* the prompts' differences matter to these models: one token of the tail
         * changed moves s far beyond the tolerances */
        if (k == (g_device == HX_DEVICE_CPU ? 1 : 0)) {
            hx_error e = {0};
            char other[512];
            snprintf(other, sizeof other, "%s%s", head, "the bat sat on the mat and purred all afternoon.");
            const char *pa[] = {prompts[0]}, *pb[] = {other};
            float pr[MAXL], la[MAXL], lb[MAXL];
            CHECK(hx_classify(c, pa, 1, multi, 4, pr, la, NULL, &e) == HX_OK);
            CHECK(hx_classify(c, pb, 1, multi, 4, pr, lb, NULL, &e) == HX_OK);
            double d = 0;
            for (int j = 0; j < 4; j++) if (fabs((double)la[j] - lb[j]) / (1 + fabs((double)lb[j])) > d) d = fabs((double)la[j] - lb[j]) / (1 + fabs((double)lb[j]));
            printf("  one tail token changed: |ds|/(1+|s|) %.2g\n", d);
            CHECKF(d > 100 * TOL_EXACT, "%s: one token changed moves s by only %g", name, d);
        }
        hx_context_free(c);
    }
}

/* The KB's classification prompts (src/kb/llm.c) put the note last, so two
 * entries' prompts share everything before the note's title: the chat
 * template, the system text and the topic list (with its lines about each
 * topic). Their common token prefix must reach that far (less the two tokens
 * a tokenizer may merge across the boundary). */
static void test_kb_prompts(const char *path, const char *name) {
    hx_error e = {0};
    kb_llm_opts o = kb_llm_defaults();
    o.model = path;
    o.device = HX_DEVICE_CPU;
    o.n_seq = 2;
    o.n_ctx_seq = 512;
    o.n_threads = 2;
    kb_llm *l = NULL;
    if (kb_llm_open(&o, &l, &e)) { fprintf(stderr, "%s: %s\n", name, e.msg); t_failures++; return; }
    hx_model *m = open_model(path);
    const char *labels[] = {"cats", "dogs and wolves", "the weather", "travel by train"};
    const char *about[] = {"the cat sat; purring", "howling at night", "rain again; a dry spring", "late trains"};
    for (int k = 0; k < 2 && m; k++) {
        const char *const *ab = k ? about : NULL;
        char *a = kb_llm_prompt_classify_about(l, "Cats at night", "the cat sat on the mat", labels, ab, 4);
        char *b = kb_llm_prompt_classify_about(l, "Trains", "all trains were late today because of the rain", labels, ab, 4);
        CHECK(a && b);
        if (!a || !b) { free(a); free(b); break; }
        const char *ta = strstr(a, "Note title: "), *tb = strstr(b, "Note title: ");
        CHECKF(ta && tb && ta - a == tb - b && !memcmp(a, b, (size_t)(ta - a)), "%s: the prompts differ before the note", name);
        size_t hl = ta ? (size_t)(ta - a) : 0;
        for (int j = 0; j < 4 && ta; j++) CHECKF(memmem(a, hl, labels[j], strlen(labels[j])), "%s: topic %d after the note", name, j);
        int na = 0, nb = 0, nh = 0;
        int32_t *ia = malloc(sizeof *ia * 1024), *ib = malloc(sizeof *ib * 1024);
        char *head = strndup(a, hl);
        CHECK(ia && ib && head);
        if (ia && ib && head) {
            CHECK(hx_tokenize(m, a, -1, true, true, ia, 1024, &na, &e) == HX_OK);
            CHECK(hx_tokenize(m, b, -1, true, true, ib, 1024, &nb, &e) == HX_OK);
            CHECK(hx_tokenize(m, head, -1, true, true, NULL, 0, &nh, &e) == HX_OK || nh > 0);
            int lcp = 0;
            while (lcp < na && lcp < nb && ia[lcp] == ib[lcp]) lcp++;
            printf("%s: KB prompts%s: %d and %d tokens share %d (the text before the note: %d)\n", name,
                   k ? " with lines about the topics" : "", na, nb, lcp, nh);
            CHECKF(lcp >= nh - 2, "%s: the prompts share %d tokens of the %d before the note", name, lcp, nh);
        }
        free(ia); free(ib); free(head); free(a); free(b);
    }
    hx_model_free(m);
    kb_llm_free(l);
}

static bool synth(const char *out) {
    const char *bin = getenv("HX_BIN");
    if (!bin || access(bin, X_OK)) return false;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s synth --preset smollm-135m --type q8_0 --layers 2 --vocab 1024 -o %s -t 2 > /dev/null 2>&1",
             bin, out);
    return system(cmd) == 0;
}

int main(int argc, char **argv) {
    hx_set_log_level(1);
    if (argc > 1 && !strcmp(argv[1], "--cuda")) g_device = HX_DEVICE_CUDA;
    else if (argc > 1) { fprintf(stderr, "usage: test_classify_reuse [--cuda]\n"); return 2; }
    char dir[] = "/tmp/hx_test_cls_reuse.XXXXXX", model[300];
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    snprintf(model, sizeof model, "%s/smollm.gguf", dir);
    bool any = false;
    if (synth(model)) {
        hx_model *m = open_model(model);
        if (m) { test_model(m, "synthetic smollm", false); any = true; }
        if (m) test_kb_prompts(model, "synthetic smollm");
        hx_model_free(m);
    } else printf("SKIP part: no synthetic model (set HX_BIN to helix-bg; ctest does)\n");
    remove(model);
    rmdir(dir);
    const char *sh = t_shared_dir();
    if (!sh) printf("SKIP part: ../shared not found (set HX_SHARED): stories260K, tiny llama3/qwen3/gemma3\n");
    struct { const char *file, *name; bool ring; } shared[] = {
        {"models/stories260K.gguf", "stories260K", false},
        {"models/ref-tiny/tiny-llama3-shared.gguf", "tiny llama3", false},
        {"models/ref-tiny/tiny-qwen3-shared.gguf", "tiny qwen3", false},
        {"models/ref-tiny/tiny-gemma3-shared.gguf", "tiny gemma3", true},
    };
    for (int k = 0; sh && k < (int)(sizeof shared / sizeof *shared); k++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", sh, shared[k].file);
        struct stat st;
        if (stat(p, &st)) { printf("SKIP part: %s not found\n", p); continue; }
        hx_model *m = open_model(p);
        if (m) { test_model(m, shared[k].name, shared[k].ring); any = true; }
        if (m) test_kb_prompts(p, shared[k].name);
        hx_model_free(m);
    }
    if (!any && !t_failures) { printf("SKIP: no model (no HX_BIN, no ../shared)\n"); return 77; }
    printf("test_classify_reuse: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
