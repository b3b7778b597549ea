/* test_lora_cuda.c — LoRA adapters on the CUDA backend against the CPU backend
 * with the same adapters (skipped without a CUDA build or a usable GPU).
 *
 *   test_lora_cuda [MODEL.gguf ...]       (default: two synthetic models and
 *                                          ../shared's tiny decoders)
 *   test_lora_cuda --write-adapter BASE.gguf OUT.gguf RANK
 *       a random rank-RANK adapter on every q/k/v/o/gate/up/down matrix of
 *       BASE (the speed measurement's adapter, bench/RESULTS.md)
 *
 * Per model, adapters written here from the model's own tensor shapes:
 *   A1: rank 16, alpha 32, every projection of every layer, the output head
 *       (when the model has its own) and the token embedding;
 *   A2: rank 8, alpha 0, q/v/down of every layer.
 * With {A1 x 1, A2 x 0.5} on both backends:
 *   - one sequence: a prefill of 12 tokens (all rows' logits: the two-phase
 *     kernels) then 8 single-token steps (the decode graph: the fused kernel):
 *     GPU vs CPU logits relative error (max |gpu - cpu| / max |cpu|) < 1e-2,
 *     the adapters' own effect on the CPU logits at least 5x larger than that
 *     error (so a GPU that ignores them fails), greedy ids equal (a divergence
 *     only at a near-tie of the CPU's top two);
 *   - two sequences in one batch (12 + 9 prompt tokens, then 6 steps of one
 *     token each): the same checks;
 *   - hx_generate greedy (the GPU's decode_greedy path with its lookahead): 16
 *     ids equal;
 *   - scales changed to {0.25, 2} (rewritten in place on the GPU): the
 *     single-sequence checks again;
 *   - adapters removed: the GPU's logits equal its base logits. */
#include "helix.h"
#include "helix_dev.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/dev_opts.h"
#endif
#include "gguf/gguf.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "test_util.h"

#include <unistd.h>

static uint64_t g_rng = 88172645463325252ull;
static float urand(float amp) {
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)(((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0) * amp);
}

static const char *const k_slots[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

/* A random adapter for base: rank r on the slots in mask (bit i: k_slots[i]),
 * plus the output head and token_embd when extra. A ~ U(+-1/sqrt(n_in)),
 * B ~ U(+-b_amp). */
static int write_adapter(const char *base, const char *out, int r, float alpha, unsigned mask, bool extra, float b_amp) {
    hx_error e = {0};
    hx_gguf *g = NULL;
    if (hx_gguf_open(base, NULL, &g, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    hx_gguf_writer *w = hx_gguf_writer_new(0);
    hx_gguf_str arch = {0};
    hx_gguf_get_str(g, "general.architecture", &arch);
    char as[64];
    snprintf(as, sizeof as, "%.*s", (int)arch.len, arch.ptr);
    hx_gguf_writer_set_str(w, "general.type", "adapter");
    hx_gguf_writer_set_str(w, "general.architecture", as);
    hx_gguf_writer_set_str(w, "adapter.type", "lora");
    hx_gguf_writer_set_f32(w, "adapter.lora.alpha", alpha);
    float **bufs = calloc(2 * g->n_tensors, sizeof *bufs);
    char (*names)[2][112] = calloc(g->n_tensors, sizeof *names);
    int n = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        char nm[96];
        snprintf(nm, sizeof nm, "%.*s", (int)t->name.len, t->name.ptr);
        bool hit = false, embd = extra && !strcmp(nm, "token_embd.weight");
        hit |= extra && !strcmp(nm, "output.weight");
        for (int k = 0; k < 7; k++) {
            char suf[40];
            snprintf(suf, sizeof suf, ".%s.weight", k_slots[k]);
            size_t L = strlen(nm), S = strlen(suf);
            hit |= (mask >> k & 1) && !strncmp(nm, "blk.", 4) && L > S && !strcmp(nm + L - S, suf);
        }
        if (!hit && !embd) continue;
        int64_t in = t->ne[0], o = t->ne[1];
        float *a = bufs[2 * i] = malloc(sizeof(float) * (size_t)(r * (embd ? o : in)));
        float *b = bufs[2 * i + 1] = malloc(sizeof(float) * (size_t)((embd ? in : o) * r));
        float a_amp = embd ? 1.0f : 1.0f / sqrtf((float)in);
        for (int64_t j = 0; j < r * (embd ? o : in); j++) a[j] = urand(a_amp);
        for (int64_t j = 0; j < (embd ? in : o) * r; j++) b[j] = urand(embd ? 0.02f : b_amp);
        snprintf(names[i][0], 112, "%s.lora_a", nm);
        snprintf(names[i][1], 112, "%s.lora_b", nm);
        /* llama.cpp's layouts: lora_a ne [n_in, r], lora_b ne [r, n_out]; token_embd: [r, n_vocab], [r, n_embd] */
        int64_t nea[2] = {embd ? r : in, embd ? o : r}, neb[2] = {r, embd ? in : o};
        hx_gguf_writer_add_tensor(w, names[i][0], HX_TYPE_F32, 2, nea, a);
        hx_gguf_writer_add_tensor(w, names[i][1], HX_TYPE_F32, 2, neb, b);
        n++;
    }
    int rc = hx_gguf_writer_write(w, out, &e) ? (fprintf(stderr, "%s\n", e.msg), 1) : 0;
    for (uint64_t i = 0; i < 2 * g->n_tensors; i++) free(bufs[i]);
    free(bufs);
    free(names);
    hx_gguf_writer_free(w);
    hx_gguf_close(g);
    return rc ? rc : n ? 0 : (fprintf(stderr, "%s: no matrix to adapt\n", base), 1);
}

#ifdef HX_HAVE_CUDA
typedef struct side { hx_model *m; hx_context *c; hx_adapter *a[2]; } side;
typedef struct stats { double maxd, maxref, maxdelta; int steps, ids_equal, ties; } stats;

static int V;
/* GPU vs CPU relative error allowed with adapters: 1e-2 (gpu-test's bound
 * for whole forwards), or 1.5x what the two give without adapters when that
 * is more (random quantized models with large logits). */
static double g_tol = 1e-2;

static int argmax(const float *x) {
    int b = 0;
    for (int i = 1; i < V; i++) if (x[i] > x[b]) b = i;
    return b;
}
static float second(const float *x, int top) {
    float s = -INFINITY;
    for (int i = 0; i < V; i++) if (i != top && x[i] > s) s = x[i];
    return s;
}

/* One logits row of each side (and the CPU's base row, NULL: none). */
static void cmp_row(stats *s, const float *g, const float *c, const float *cbase) {
    for (int i = 0; i < V; i++) {
        s->maxd = fmax(s->maxd, fabs((double)g[i] - c[i]));
        s->maxref = fmax(s->maxref, fabs((double)c[i]));
        if (cbase) s->maxdelta = fmax(s->maxdelta, fabs((double)c[i] - cbase[i]));
    }
}

/* Greedy ids of both sides from their own logits: equal, or the CPU's top
 * two within tie of each other (then the runs part; *stop set). */
static bool ids_step(stats *s, const float *g, const float *c, int *tg, int *tc, double tie, bool *stop) {
    *tg = argmax(g);
    *tc = argmax(c);
    s->steps++;
    if (*tg == *tc) { s->ids_equal++; return true; }
    if (c[*tc] - second(c, *tc) <= tie) { s->ties++; *stop = true; return true; }
    return false;
}

#define NP0 12
#define NP1 9
#define NSTEP 8
static const int32_t P0[NP0] = {1, 17, 300, 42, 211, 7, 260, 99, 128, 3, 450, 64};
static const int32_t P1[NP1] = {5, 77, 123, 9, 321, 44, 18, 250, 66};

/* Sequence 0 from scratch: the prompt with every row's logits, then NSTEP
 * steps of the own greedy token. rows: (NP0 + NSTEP, V) out. */
static bool run_one(hx_context *c, float *rows, const float *fixed_ids_from, int32_t *ids) {
    (void)fixed_ids_from;
    hx_error e = {0};
    hx_seq_clear(c, 0);
    hx_batch b = hx_batch_init(NP0);
    for (int i = 0; i < NP0; i++) hx_batch_add(&b, P0[i] % V, i, 0, true);
    bool ok = hx_decode(c, &b, &e) == HX_OK;
    for (int i = 0; ok && i < NP0; i++) memcpy(rows + (size_t)i * V, hx_get_logits(c, i), sizeof(float) * V);
    for (int k = 0; ok && k < NSTEP; k++) {
        hx_batch_clear(&b);
        hx_batch_add(&b, ids[k], NP0 + k, 0, true);
        ok = hx_decode(c, &b, &e) == HX_OK;
        if (ok) memcpy(rows + (size_t)(NP0 + k) * V, hx_get_logits(c, 0), sizeof(float) * V);
    }
    if (!ok) fprintf(stderr, "decode: %s\n", e.msg);
    hx_batch_free(&b);
    return ok;
}

/* The single-sequence check: both sides fed the same ids (the CPU's greedy
 * choice), so a near-tie cannot make the rows incomparable; ids compared
 * from each side's own logits. */
static void check_one(side *g, side *c, const float *cbase, const char *what) {
    float *rg = malloc(sizeof(float) * (size_t)(NP0 + NSTEP) * V), *rc = malloc(sizeof(float) * (size_t)(NP0 + NSTEP) * V);
    int32_t ids[NSTEP];
    /* the CPU first, greedy from its own logits, step by step */
    hx_error e = {0};
    hx_seq_clear(c->c, 0);
    hx_batch b = hx_batch_init(NP0);
    for (int i = 0; i < NP0; i++) hx_batch_add(&b, P0[i] % V, i, 0, true);
    bool ok = hx_decode(c->c, &b, &e) == HX_OK;
    for (int i = 0; ok && i < NP0; i++) memcpy(rc + (size_t)i * V, hx_get_logits(c->c, i), sizeof(float) * V);
    for (int k = 0; ok && k < NSTEP; k++) {
        ids[k] = argmax(rc + (size_t)(NP0 + k - 1) * V);
        hx_batch_clear(&b);
        hx_batch_add(&b, ids[k], NP0 + k, 0, true);
        ok = hx_decode(c->c, &b, &e) == HX_OK;
        if (ok) memcpy(rc + (size_t)(NP0 + k) * V, hx_get_logits(c->c, 0), sizeof(float) * V);
    }
    hx_batch_free(&b);
    CHECKF(ok, "%s: cpu: %s", what, e.msg);
    ok = ok && run_one(g->c, rg, NULL, ids);
    CHECKF(ok, "%s: gpu run failed", what);
    if (ok) {
        stats s = {0};
        bool stop = false;
        for (int i = 0; i < NP0 + NSTEP; i++) {
            cmp_row(&s, rg + (size_t)i * V, rc + (size_t)i * V, cbase ? cbase + (size_t)i * V : NULL);
            int a, bb;
            double tie = 4 * s.maxd;
            if (!stop) CHECKF(ids_step(&s, rg + (size_t)i * V, rc + (size_t)i * V, &a, &bb, tie, &stop),
                              "%s: row %d: gpu argmax %d, cpu %d", what, i, a, bb);
        }
        double rel = s.maxd / s.maxref;
        printf("  %-28s rel err %.2e, argmax equal %d/%d%s\n", what, rel, s.ids_equal, s.steps,
               s.ties ? " (then a near-tie)" : "");
        CHECKF(rel < g_tol, "%s: gpu vs cpu relative error %.3e (bound %.3e)", what, rel, g_tol);
        if (cbase) CHECKF(s.maxdelta > 5 * s.maxd, "%s: adapter effect %.3e not above 5x the gpu/cpu error %.3e", what,
                          s.maxdelta, s.maxd);
    }
    free(rg);
    free(rc);
}

/* Two sequences in one batch (12 + 9 prompt tokens, last rows' logits), then
 * NSTEP batches of one token of each (the CPU's greedy ids fed to both). */
static void check_two(side *g, side *c, const char *what) {
    hx_context *cs[2] = {c->c, g->c};
    float *lg[2];
    for (int k = 0; k < 2; k++) lg[k] = malloc(sizeof(float) * (size_t)2 * (NSTEP + 1) * V);
    int32_t next[2] = {0, 0};
    hx_error e = {0};
    bool ok = true;
    for (int k = 0; k < 2 && ok; k++) { /* k = 0: the CPU, whose ids both sides take */
        hx_context *x = cs[k];
        hx_seq_clear(x, 0);
        hx_seq_clear(x, 1);
        hx_batch b = hx_batch_init(NP0 + NP1);
        for (int i = 0; i < NP0; i++) hx_batch_add(&b, P0[i] % V, i, 0, i == NP0 - 1);
        for (int i = 0; i < NP1; i++) hx_batch_add(&b, P1[i] % V, i, 1, i == NP1 - 1);
        ok = hx_decode(x, &b, &e) == HX_OK;
        for (int step = 0; ok && step <= NSTEP; step++) {
            for (int s = 0; s < 2; s++) {
                const float *l = hx_get_logits(x, step == 0 ? (s ? NP0 + NP1 - 1 : NP0 - 1) : s);
                memcpy(lg[k] + ((size_t)step * 2 + s) * V, l, sizeof(float) * V);
            }
            if (step == NSTEP) break;
            hx_batch_clear(&b);
            for (int s = 0; s < 2; s++) {
                next[s] = argmax(lg[0] + ((size_t)step * 2 + s) * V);
                hx_batch_add(&b, next[s], (s ? NP1 : NP0) + step, s, true);
            }
            ok = hx_decode(x, &b, &e) == HX_OK;
        }
        hx_batch_free(&b);
        CHECKF(ok, "%s: %s: %s", what, k ? "gpu" : "cpu", e.msg);
    }
    if (ok) {
        stats st = {0};
        bool stop = false;
        for (int r = 0; r < 2 * (NSTEP + 1); r++) {
            const float *gr = lg[1] + (size_t)r * V, *cr = lg[0] + (size_t)r * V;
            cmp_row(&st, gr, cr, NULL);
            int a, bb;
            if (!stop) CHECKF(ids_step(&st, gr, cr, &a, &bb, 4 * st.maxd, &stop), "%s: row %d: gpu argmax %d, cpu %d", what,
                              r, a, bb);
        }
        double rel = st.maxd / st.maxref;
        printf("  %-28s rel err %.2e, argmax equal %d/%d%s\n", what, rel, st.ids_equal, st.steps,
               st.ties ? " (then a near-tie)" : "");
        CHECKF(rel < g_tol, "%s: gpu vs cpu relative error %.3e (bound %.3e)", what, rel, g_tol);
    }
    free(lg[0]);
    free(lg[1]);
}

/* Both sides' logits after the prompt and ids[0..d): whether the CPU's top
 * two there are within 4x the largest difference between the sides (a
 * near-tie, as ids_step; *gap and *diff say by how much). */
static bool near_tie_after(side *g, side *c, const int32_t *ids, int d, double *gap, double *diff) {
    float *row[2] = {malloc(sizeof(float) * V), malloc(sizeof(float) * V)};
    hx_context *cs[2] = {c->c, g->c};
    bool ok = row[0] && row[1];
    for (int k = 0; ok && k < 2; k++) {
        hx_error e = {0};
        hx_seq_clear(cs[k], 0);
        hx_batch b = hx_batch_init(NP0 + d);
        for (int i = 0; i < NP0 + d; i++) hx_batch_add(&b, i < NP0 ? P0[i] % V : ids[i - NP0], i, 0, i == NP0 + d - 1);
        ok = hx_decode(cs[k], &b, &e) == HX_OK;
        if (ok) memcpy(row[k], hx_get_logits(cs[k], -1), sizeof(float) * V);
        else fprintf(stderr, "decode: %s\n", e.msg);
        hx_batch_free(&b);
    }
    stats s = {0};
    if (ok) cmp_row(&s, row[1], row[0], NULL);
    int top = ok ? argmax(row[0]) : 0;
    *gap = ok ? row[0][top] - second(row[0], top) : INFINITY;
    *diff = s.maxd;
    free(row[0]);
    free(row[1]);
    return ok && *gap <= 4 * s.maxd;
}

/* hx_generate greedy, 16 ids, on both: the same ids, or the same up to a
 * near-tie of the CPU's logits (the rest then parts). */
static void check_generate(side *g, side *c) {
    int32_t ids[2][16];
    int n[2] = {0, 0};
    hx_context *cs[2] = {c->c, g->c};
    for (int k = 0; k < 2; k++) {
        hx_error e = {0};
        hx_seq_clear(cs[k], 0);
        int32_t p[NP0];
        for (int i = 0; i < NP0; i++) p[i] = P0[i] % V;
        hx_generate_params gp = hx_generate_default_params();
        gp.prompt_ids = p;
        gp.n_prompt_ids = NP0;
        gp.max_tokens = 16;
        gp.ignore_eog = true;
        hx_generate_result r = {0};
        hx_status st = hx_generate(cs[k], &gp, &r, &e);
        CHECKF(st == HX_OK, "generate (%s): %s", k ? "gpu" : "cpu", e.msg);
        n[k] = r.n_ids < 16 ? r.n_ids : 16;
        memcpy(ids[k], r.ids, sizeof(int32_t) * n[k]);
        hx_generate_result_free(&r);
    }
    int same = 0;
    while (same < n[0] && same < n[1] && ids[0][same] == ids[1][same]) same++;
    double gap = 0, diff = 0;
    bool tie = n[0] == 16 && same < 16 && near_tie_after(g, c, ids[0], same, &gap, &diff);
    printf("  %-28s %d/%d greedy ids equal%s\n", "hx_generate", same, n[0], tie ? " (then a near-tie)" : "");
    if (same < 16 && n[0] == 16)
        printf("  %-28s at step %d: cpu top two %.4g apart, logits differ by up to %.4g\n", "", same, gap, diff);
    CHECKF(n[0] == 16 && (same == 16 || tie), "hx_generate: greedy ids differ at %d of %d", same, n[0]);
}

static int check_model(const char *path) {
    int fails = t_failures;
    printf("%s\n", path);
    side g = {0}, c = {0};
    hx_error e = {0};
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CUDA;
    if (hx_model_open(path, &mp, &g.m, &e)) {
        printf("  gpu: %s\n", e.msg);
        return strstr(e.msg, "no CUDA device") ? -1 : (t_failures++, 1);
    }
    mp.device = HX_DEVICE_CPU;
    CHECKF(hx_model_open(path, &mp, &c.m, &e) == HX_OK, "%s: %s", path, e.msg);
    if (!c.m) { hx_model_free(g.m); return 1; }
    V = hx_model_n_vocab(c.m);
    char a1[512], a2[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(a1, sizeof a1, "%s/hx_lora_cuda_%d_a1.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    snprintf(a2, sizeof a2, "%s/hx_lora_cuda_%d_a2.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid());
    CHECK(write_adapter(path, a1, 16, 32.0f, 0x7f, true, 0.05f) == 0);
    CHECK(write_adapter(path, a2, 8, 0.0f, 1 | 4 | 64, false, 0.03f) == 0);
    side *sd[2] = {&c, &g};
    for (int k = 0; k < 2; k++) {
        hx_context_params cp = hx_context_default_params();
        cp.n_ctx = 2 * 64;
        cp.n_seq_max = 2;
        cp.n_threads = 2;
        /* HX_CUDA_LORA_PLAIN=1: the GPU applies the deltas with the batch kernels only;
           HX_CUDA_LORA_PRELOAD=1: its kernels copy A and B to shared memory before their PDL wait */
        static hx_cuda_dev_opts dv;
        const char *plain = getenv("HX_CUDA_LORA_PLAIN");
        dv.lora_plain = plain && *plain && strcmp(plain, "0") != 0;
        const char *pre = getenv("HX_CUDA_LORA_PRELOAD");
        dv.lora_preload = pre && *pre && strcmp(pre, "0") != 0;
        hx_dev_context_params dp = {0};
        if (k == 1) dp.cuda = &dv;
        CHECKF(hx_dev_context_new(sd[k]->m, &cp, &dp, &sd[k]->c, &e) == HX_OK, "context: %s", e.msg);
        CHECKF(hx_adapter_open(sd[k]->m, a1, &sd[k]->a[0], &e) == HX_OK, "%s: %s", a1, e.msg);
        CHECKF(hx_adapter_open(sd[k]->m, a2, &sd[k]->a[1], &e) == HX_OK, "%s: %s", a2, e.msg);
    }
    if (!c.c || !g.c || !c.a[0] || !c.a[1] || !g.a[0] || !g.a[1]) goto out;
    {
        size_t rows = (size_t)(NP0 + NSTEP) * V;
        float *cbase = malloc(sizeof(float) * rows), *gbase = malloc(sizeof(float) * rows), *g2 = malloc(sizeof(float) * rows);
        int32_t ids[NSTEP];
        for (int k = 0; k < NSTEP; k++) ids[k] = (int32_t)((k * 131 + 7) % V);
        /* the base rows of both with fixed ids (the removal check's reference, the adapters' effect) */
        CHECK(run_one(c.c, cbase, NULL, ids));
        CHECK(run_one(g.c, gbase, NULL, ids));
        {
            stats s = {0};
            for (size_t i = 0; i < (size_t)(NP0 + NSTEP); i++) cmp_row(&s, gbase + i * V, cbase + i * V, NULL);
            g_tol = fmax(1e-2, 1.5 * s.maxd / s.maxref);
            printf("  %-28s rel err %.2e (bound with adapters: %.2e)\n", "base, no adapters", s.maxd / s.maxref, g_tol);
        }
        float sc[2] = {1.0f, 0.5f};
        for (int k = 0; k < 2; k++)
            CHECKF(hx_context_set_adapters(sd[k]->c, sd[k]->a, sc, 2, &e) == HX_OK, "set_adapters: %s", e.msg);
        /* the adapters' effect needs rows fed the same ids as cbase */
        {
            float *ca = malloc(sizeof(float) * rows), *ga = malloc(sizeof(float) * rows);
            CHECK(run_one(c.c, ca, NULL, ids));
            CHECK(run_one(g.c, ga, NULL, ids));
            stats s = {0};
            for (size_t i = 0; i < (size_t)(NP0 + NSTEP); i++) cmp_row(&s, ga + i * V, ca + i * V, cbase + i * V);
            printf("  %-28s rel err %.2e, adapter effect %.2e (rel)\n", "fixed ids, {A1 1, A2 0.5}", s.maxd / s.maxref,
                   s.maxdelta / s.maxref);
            CHECKF(s.maxd / s.maxref < g_tol, "fixed ids: relative error %.3e", s.maxd / s.maxref);
            CHECKF(s.maxdelta > 5 * s.maxd, "fixed ids: adapter effect %.3e not above 5x the error %.3e", s.maxdelta,
                   s.maxd);
            free(ca);
            free(ga);
        }
        check_one(&g, &c, NULL, "one sequence, greedy");
        check_two(&g, &c, "two sequences in one batch");
        check_generate(&g, &c);
        float sc2[2] = {0.25f, 2.0f};
        for (int k = 0; k < 2; k++)
            CHECKF(hx_context_set_adapters(sd[k]->c, sd[k]->a, sc2, 2, &e) == HX_OK, "set_adapters: %s", e.msg);
        check_one(&g, &c, NULL, "scales {0.25, 2}, greedy");
        check_two(&g, &c, "scales {0.25, 2}, two seqs");
        for (int k = 0; k < 2; k++)
            CHECKF(hx_context_set_adapters(sd[k]->c, NULL, NULL, 0, &e) == HX_OK, "set_adapters: %s", e.msg);
        CHECK(run_one(g.c, g2, NULL, ids));
        double d = 0, ref = 0;
        for (size_t i = 0; i < rows; i++) { d = fmax(d, fabs((double)g2[i] - gbase[i])); ref = fmax(ref, fabs((double)gbase[i])); }
        printf("  %-28s max |diff| %.2e against the gpu's base\n", "removed", d);
        CHECKF(d <= 1e-5 * ref, "removed: the gpu's logits differ from its base by %.3e", d);
        free(cbase);
        free(gbase);
        free(g2);
    }
out:
    for (int k = 0; k < 2; k++) {
        hx_context_free(sd[k]->c);
        hx_adapter_free(sd[k]->a[0]);
        hx_adapter_free(sd[k]->a[1]);
        hx_model_free(sd[k]->m);
    }
    unlink(a1);
    unlink(a2);
    return t_failures > fails;
}
#endif

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--write-adapter")) return write_adapter(argv[2], argv[3], atoi(argv[4]), 2.0f * atoi(argv[4]), 0x7f, false, 0.02f);
#ifndef HX_HAVE_CUDA
    (void)argc; (void)argv;
    printf("SKIP: built without CUDA (HX_CUDA=OFF or no nvcc)\n");
    return 77;
#else
    const char *tmp = getenv("TMPDIR");
    char syn[2][512];
    const char *list[16];
    int n = 0;
    for (int i = 1; i < argc && n < 16; i++) list[n++] = argv[i];
    if (n == 0) {
        struct { const char *preset; hx_mix mix; } sy[2] = {{"qwen3-0.6b", HX_MIX_Q4_K_M}, {"tinyllama-1.1b", HX_MIX_Q8_0}};
        for (int k = 0; k < 2; k++) {
            snprintf(syn[k], sizeof syn[k], "%s/hx_lora_cuda_%d_%s.gguf", tmp && *tmp ? tmp : "/tmp", (int)getpid(), sy[k].preset);
            hx_synth_opts o = {0};
            o.preset = hx_preset_find(sy[k].preset);
            o.mix = sy[k].mix;
            o.seed = 7 + k;
            o.n_layer = 2;
            o.n_vocab = 4096;
            o.n_threads = 2;
            hx_error e = {0};
            if (hx_synth_write(&o, syn[k], &e)) { fprintf(stderr, "synth: %s\n", e.msg); return 1; }
            list[n++] = syn[k];
        }
        const char *sh = t_shared_dir();
        static char paths[3][512];
        const char *tiny[3] = {"qwen3", "llama3", "gemma3"};
        for (int k = 0; k < 3 && sh; k++) {
            snprintf(paths[k], sizeof paths[k], "%s/models/ref-tiny/tiny-%s-shared.gguf", sh, tiny[k]);
            if (access(paths[k], R_OK) == 0) list[n++] = paths[k];
            else printf("(no %s: skipped)\n", paths[k]);
        }
        if (!sh) printf("(../shared absent: its tiny decoders skipped)\n");
    }
    int tested = 0;
    for (int i = 0; i < n; i++) {
        int r = check_model(list[i]);
        if (r < 0) {
            printf("SKIP: no usable GPU\n");
            if (argc == 1) { unlink(syn[0]); unlink(syn[1]); }
            return 77;
        }
        tested++;
    }
    if (argc == 1) { unlink(syn[0]); unlink(syn[1]); }
    printf("%d models, %d checks, %d failed\n", tested, t_checks, t_failures);
    return t_failures ? 1 : 0;
#endif
}
