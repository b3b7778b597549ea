/* test_inspect_lora.c — hx_inspect_attention through LoRA adapters, on real
 * small models of ../shared (stories260K: llama with GQA 8/4, untied head;
 * tiny qwen3: QK-norm, tied head; tiny gemma3: sliding-window layers, an
 * embedding scale, post-norms, tied head).
 *
 * The test writes a random adapter in llama.cpp's GGUF format on every
 * projection of every layer, the token embedding (llama.cpp's transposed
 * lora_a) and, where the head is untied, the output head; and a second one
 * (alpha 0) on layer 0's q and k only. Checks:
 *   - the adapter at scale 0 gives the base's result bit for bit (probs, q, k,
 *     v, o, logits), and so does no adapter after an adapted call;
 *   - with the first adapter at scale 1, and with both at scales 0.75 and -1.5,
 *     the probabilities, q and the last token's logits agree with a float64
 *     forward written here (ref_forward.h's weights, its recipe, the LoRA
 *     deltas s * B (A x) added in float64; the embedding's before the
 *     embedding scale, as llama.cpp adds it), and differ from the base's by
 *     far more than that agreement (an adapter that is ignored fails);
 *   - the adapted pass's logits equal an exact hx_decode's on a context with
 *     the same adapters set;
 *   - a NULL adapter, a non-finite scale and an adapter opened for another
 *     model fail with HX_ERR_ARG.
 * `helix-bg inspect --lora` is tests/inspect_lora.sh. */
#include "api/api.h"
#include "core/core.h"
#include "model/lora.h"
#include "ref_forward.h"
#include "test_util.h"

#include <unistd.h>

static const char *TEXT = "Once upon a time, there was a little girl named Lily. She loved to play outside.";

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static float frand(float amp) { /* uniform in (-amp, amp) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)(((double)(g_rng >> 11) / 9007199254740992.0 * 2 - 1) * amp);
}

static const char *slot_gguf[7] = { "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down" };

/* One adapted matrix: A (r, in), B (out, r) row-major; the embedding's A is
 * (vocab, r) (llama.cpp's token_embd layout), its B (n_embd, r). */
typedef struct mat { int r; int64_t in, out; float *a, *b; } mat;
typedef struct adapter {
    float alpha;
    mat *w;            /* n_layer * 7 */
    mat output, embd;
} adapter;

static void mat_rand(mat *m, int r, int64_t in, int64_t out, float a_amp, float b_amp) {
    m->r = r; m->in = in; m->out = out;
    m->a = malloc(sizeof(float) * (size_t)r * in);
    m->b = malloc(sizeof(float) * (size_t)out * r);
    for (int64_t i = 0; i < r * in; i++) m->a[i] = frand(a_amp);
    for (int64_t i = 0; i < out * r; i++) m->b[i] = frand(b_amp);
}

static void adapter_free(adapter *ad, int n_layer) {
    for (int i = 0; ad->w && i < n_layer * 7; i++) { free(ad->w[i].a); free(ad->w[i].b); }
    free(ad->w);
    free(ad->output.a); free(ad->output.b); free(ad->embd.a); free(ad->embd.b);
}

static bool write_adapter(const adapter *ad, const hx_model *m, const char *path) {
    hx_gguf_writer *w = hx_gguf_writer_new(0);
    hx_gguf_writer_set_str(w, "general.type", "adapter");
    hx_gguf_writer_set_str(w, "general.architecture", hx_arch_name(m->cfg.arch));
    hx_gguf_writer_set_str(w, "adapter.type", "lora");
    hx_gguf_writer_set_f32(w, "adapter.lora.alpha", ad->alpha);
    char n[128];
    for (int l = 0; l < m->cfg.n_layer; l++)
        for (int s = 0; s < 7; s++) {
            const mat *x = &ad->w[l * 7 + s];
            if (!x->r) continue;
            int64_t nea[2] = { x->in, x->r }, neb[2] = { x->r, x->out };
            snprintf(n, sizeof n, "blk.%d.%s.weight.lora_a", l, slot_gguf[s]);
            hx_gguf_writer_add_tensor(w, n, HX_TYPE_F32, 2, nea, x->a);
            snprintf(n, sizeof n, "blk.%d.%s.weight.lora_b", l, slot_gguf[s]);
            hx_gguf_writer_add_tensor(w, n, HX_TYPE_F32, 2, neb, x->b);
        }
    if (ad->output.r) {
        int64_t nea[2] = { ad->output.in, ad->output.r }, neb[2] = { ad->output.r, ad->output.out };
        hx_gguf_writer_add_tensor(w, "output.weight.lora_a", HX_TYPE_F32, 2, nea, ad->output.a);
        hx_gguf_writer_add_tensor(w, "output.weight.lora_b", HX_TYPE_F32, 2, neb, ad->output.b);
    }
    if (ad->embd.r) { /* lora_a ne [r, n_vocab], lora_b ne [r, n_embd] */
        int64_t nea[2] = { ad->embd.r, ad->embd.in }, neb[2] = { ad->embd.r, ad->embd.out };
        hx_gguf_writer_add_tensor(w, "token_embd.weight.lora_a", HX_TYPE_F32, 2, nea, ad->embd.a);
        hx_gguf_writer_add_tensor(w, "token_embd.weight.lora_b", HX_TYPE_F32, 2, neb, ad->embd.b);
    }
    hx_error e = {0};
    bool ok = hx_gguf_writer_write(w, path, &e) == HX_OK;
    if (!ok) fprintf(stderr, "write %s: %s\n", path, e.msg);
    hx_gguf_writer_free(w);
    return ok;
}

/* ---- the float64 reference ---- */

typedef struct lora_set { const adapter *ad[2]; float scale[2]; int n; } lora_set;

static double lscale(const adapter *ad, const mat *x, float scale) {
    return ad->alpha != 0.0f ? (double)scale * ad->alpha / x->r : scale;
}

/* y (out) += s * B (A x) for every adapter of the set that adapts matrix idx
 * (layer * 7 + slot; -1: the output head). */
static void ref_lora(const lora_set *ls, int idx, const double *x, double *y) {
    for (int k = 0; k < ls->n; k++) {
        const mat *w = idx < 0 ? &ls->ad[k]->output : &ls->ad[k]->w[idx];
        if (!w->r) continue;
        double s = lscale(ls->ad[k], w, ls->scale[k]), t[64];
        for (int q = 0; q < w->r; q++) {
            t[q] = 0;
            for (int64_t i = 0; i < w->in; i++) t[q] += (double)w->a[(size_t)q * w->in + i] * x[i];
        }
        for (int64_t o = 0; o < w->out; o++) {
            double acc = 0;
            for (int q = 0; q < w->r; q++) acc += (double)w->b[(size_t)o * w->r + q] * t[q];
            y[o] += s * acc;
        }
    }
}

/* x += s * B A[tok] for every adapter of the set on the token embedding
 * (ref_step_ex adds it before the embedding scale, as llama.cpp does). */
static void ref_lora_embd(void *u, int32_t token, double *x) {
    const lora_set *ls = u;
    for (int kk = 0; kk < ls->n; kk++) {
        const mat *w = &ls->ad[kk]->embd;
        if (!w->r) continue;
        double s = lscale(ls->ad[kk], w, ls->scale[kk]);
        for (int64_t d = 0; d < w->out; d++) {
            double acc = 0;
            for (int qq = 0; qq < w->r; qq++) acc += (double)w->a[(size_t)token * w->r + qq] * w->b[(size_t)d * w->r + qq];
            x[d] += s * acc;
        }
    }
}
static void ref_lora_delta(void *u, int idx, const double *x, double *y) { ref_lora(u, idx, x, y); }

/* ref_step (tests/ref_forward.h) with the adapters of ls, recording each
 * layer's probabilities of the query at r->pos (probs: (n_layer, H, T, T),
 * row r->pos of every (layer, head)) and its post-RoPE q ((n_layer, T, H, d)). */
static void ref_step_lora(ref_model *r, const lora_set *ls, int32_t token, int T, double *probs, double *qout,
                          double *logits) {
    ref_hooks hk = {(void *)ls, ref_lora_delta, ref_lora_embd, T, probs, qout, logits};
    ref_step_ex(r, token, NULL, &hk);
}

/* ---- checks ---- */

static bool same_attention(const hx_attention *a, const hx_attention *b) {
    size_t L = (size_t)a->n_layer, T = (size_t)a->n_tok, H = (size_t)a->n_head, Hk = (size_t)a->n_head_kv,
           d = (size_t)a->head_dim;
    return !memcmp(a->probs, b->probs, sizeof(float) * L * H * T * T) && !memcmp(a->q, b->q, sizeof(float) * L * T * H * d) &&
           !memcmp(a->k, b->k, sizeof(float) * L * T * Hk * d) && !memcmp(a->v, b->v, sizeof(float) * L * T * Hk * d) &&
           !memcmp(a->o, b->o, sizeof(float) * L * T * H * d) && !memcmp(a->logits, b->logits, sizeof(float) * a->n_vocab);
}

/* The inspected pass with ls against the float64 reference and the base pass. */
static void check_against_ref(const char *path, const char *what, hx_model *m, const int32_t *ids, int n,
                              const lora_set *ls, const hx_attention *got, const hx_attention *base) {
    const hx_model_config *c = &m->cfg;
    int T = n, H = c->n_head, d = c->head_dim, L = c->n_layer, V = c->n_vocab;
    double *probs = calloc((size_t)L * H * T * T, sizeof(double)), *q = calloc((size_t)L * T * H * d, sizeof(double));
    double *logits = calloc((size_t)V, sizeof(double));
    ref_model *r = ref_new(m, n);
    for (int i = 0; i < n; i++) ref_step_lora(r, ls, ids[i], T, probs, q, i == n - 1 ? logits : NULL);
    ref_free(r);
    double dp = 0, db = 0, dq = 0, qmax = 0, dl = 0, dlb = 0, lmax = 0;
    for (size_t i = 0; i < (size_t)L * H * T * T; i++) {
        dp = fmax(dp, fabs(got->probs[i] - probs[i]));
        db = fmax(db, fabs((double)base->probs[i] - probs[i]));
    }
    for (size_t i = 0; i < (size_t)L * T * H * d; i++) {
        dq = fmax(dq, fabs(got->q[i] - q[i]));
        qmax = fmax(qmax, fabs(q[i]));
    }
    for (int i = 0; i < V; i++) {
        dl = fmax(dl, fabs(got->logits[i] - logits[i]));
        dlb = fmax(dlb, fabs((double)base->logits[i] - logits[i]));
        lmax = fmax(lmax, fabs(logits[i]));
    }
    printf("%s %s: probs max |helix - f64| %.2e (base's %.2e), q %.2e of %.2g, logits %.2e of %.2g (base's %.2e)\n", path,
           what, dp, db, dq, qmax, dl, lmax, dlb);
    CHECKF(dp < 2e-5, "%s %s: probabilities differ from the float64 reference by %g", path, what, dp);
    CHECKF(db > 100 * dp && db > 1e-3, "%s %s: the adapter moves the probabilities by only %g (agreement %g)", path, what,
           db, dp);
    CHECKF(dq < 1e-4 * (1 + qmax), "%s %s: q differs from the float64 reference by %g", path, what, dq);
    CHECKF(dl < 1e-4 * (1 + lmax), "%s %s: logits differ from the float64 reference by %g", path, what, dl);
    CHECKF(dlb > 100 * dl, "%s %s: the adapter moves the logits by only %g", path, what, dlb);
    free(probs); free(q); free(logits);
}

/* The inspected logits against an exact hx_decode with the same adapters set. */
static void check_decode(const char *path, hx_model *m, const int32_t *ids, int n, hx_adapter *const *ads,
                         const float *scales, int n_ad, const hx_attention *a) {
    hx_error e = {0};
    hx_context_params cp = hx_context_default_params();
    cp.exact = true;
    cp.kv_f32 = true;
    cp.n_ctx = 256;
    hx_context *ctx = NULL;
    if (hx_context_new(m, &cp, &ctx, &e)) { CHECKF(0, "%s", e.msg); return; }
    CHECKF(hx_context_set_adapters(ctx, ads, scales, n_ad, &e) == HX_OK, "%s", e.msg);
    hx_batch b = hx_batch_init(n);
    for (int i = 0; i < n; i++) hx_batch_add(&b, ids[i], i, 0, i == n - 1);
    CHECKF(hx_decode(ctx, &b, &e) == HX_OK, "%s", e.msg);
    const float *lg = hx_get_logits(ctx, -1);
    double md = 0;
    for (int t = 0; lg && t < a->n_vocab; t++) md = fmax(md, fabs((double)lg[t] - a->logits[t]));
    CHECKF(lg && md <= 1e-4, "%s: inspected logits with %d adapters differ from hx_decode's by %g", path, n_ad, md);
    hx_batch_free(&b);
    hx_context_free(ctx);
}

static void check_model(const char *path, const char *other_path, const char *dir, int idx) {
    hx_error e = {0};
    hx_model *m = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    if (hx_model_open(path, &mp, &m, &e)) { CHECKF(0, "%s: %s", path, e.msg); return; }
    const hx_model_config *c = &m->cfg;
    int32_t ids[256];
    int n = 0;
    CHECKF(hx_tokenize(m, TEXT, -1, true, false, ids, 256, &n, &e) == HX_OK, "%s", e.msg);
    CHECKF(n >= 12, "%s: only %d tokens", path, n);

    /* adapter 1: every projection, the embedding, the head where it is untied;
     * A about unit gain on x, B small against the weights */
    const hx_layer_weights *L0 = &m->layers[0];
    const hx_tensor *W[7] = { &L0->wq, &L0->wk, &L0->wv, &L0->wo, &L0->ffn_gate, &L0->ffn_up, &L0->ffn_down };
    adapter a1 = { .alpha = 8.0f }, a2 = { .alpha = 0.0f };
    a1.w = calloc((size_t)c->n_layer * 7, sizeof(mat));
    a2.w = calloc((size_t)c->n_layer * 7, sizeof(mat));
    for (int l = 0; l < c->n_layer; l++)
        for (int s = 0; s < 7; s++) {
            int64_t in = W[s]->ne[0], out = W[s]->ne[1];
            mat_rand(&a1.w[l * 7 + s], 4, in, out, (float)sqrt(3.0 / in), 0.15f);
            if (l == 0 && s < 2) mat_rand(&a2.w[s], 2, in, out, (float)sqrt(3.0 / in), 0.1f);
        }
    mat_rand(&a1.embd, 4, c->n_vocab, c->n_embd, 1.0f, 0.05f); /* a: (vocab, r) */
    a1.embd.in = c->n_vocab; a1.embd.out = c->n_embd;
    if (!c->tied_output) mat_rand(&a1.output, 4, c->n_embd, c->n_vocab, (float)sqrt(3.0 / c->n_embd), 0.3f);
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/a1-%d.gguf", dir, idx);
    snprintf(p2, sizeof p2, "%s/a2-%d.gguf", dir, idx);
    hx_adapter *h1 = NULL, *h2 = NULL;
    if (!write_adapter(&a1, m, p1) || !write_adapter(&a2, m, p2) || hx_adapter_open(m, p1, &h1, &e) ||
        hx_adapter_open(m, p2, &h2, &e)) {
        CHECKF(0, "%s: %s", path, e.msg);
        goto out;
    }
    CHECK(hx_adapter_n_weights(h1) == c->n_layer * 7 + 1 + !c->tied_output && hx_adapter_n_weights(h2) == 2);

    { /* the recipe copied here is ref_step's: without adapters, the same logits */
        int T = n, H = c->n_head, d = c->head_dim;
        double *pr = calloc((size_t)c->n_layer * H * T * T, sizeof(double)), *q = calloc((size_t)c->n_layer * T * H * d, sizeof(double));
        double *lg = calloc((size_t)c->n_vocab, sizeof(double));
        float *lf = calloc((size_t)c->n_vocab, sizeof(float));
        lora_set none = { { NULL, NULL }, { 0, 0 }, 0 };
        ref_model *r1 = ref_new(m, n), *r2 = ref_new(m, n);
        for (int i = 0; i < n; i++) {
            ref_step(r1, ids[i], i == n - 1 ? lf : NULL);
            ref_step_lora(r2, &none, ids[i], T, pr, q, i == n - 1 ? lg : NULL);
        }
        double md = 0;
        for (int i = 0; i < c->n_vocab; i++) md = fmax(md, fabs(lf[i] - lg[i]) / (1 + fabs(lg[i])));
        CHECKF(md < 1e-6, "%s: the test's reference step differs from ref_step by %g", path, md);
        ref_free(r1); ref_free(r2);
        free(pr); free(q); free(lg); free(lf);
    }

    hx_inspect_params ip = hx_inspect_default_params();
    ip.want_qkv = true;
    hx_attention base, zero, one, two, again;
    if (hx_inspect_attention(m, ids, n, &ip, &base, &e)) { CHECKF(0, "%s: %s", path, e.msg); goto out; }

    hx_adapter *both[2] = { h1, h2 };
    float s0[2] = { 0.0f, 0.0f }, s1[2] = { 1.0f, 0.0f }, s2[2] = { 0.75f, -1.5f };
    ip.adapters = both;
    ip.n_adapters = 2;
    ip.adapter_scales = s0;
    CHECKF(hx_inspect_attention(m, ids, n, &ip, &zero, &e) == HX_OK, "%s", e.msg);
    CHECKF(same_attention(&base, &zero), "%s: adapters at scale 0 change the inspected pass", path);
    hx_attention_free(&zero);

    ip.n_adapters = 1;
    ip.adapter_scales = s1;
    if (hx_inspect_attention(m, ids, n, &ip, &one, &e) == HX_OK) {
        lora_set ls = { { &a1, &a2 }, { 1.0f, 0.0f }, 1 };
        check_against_ref(path, "adapter@1", m, ids, n, &ls, &one, &base);
        check_decode(path, m, ids, n, both, s1, 1, &one);
        hx_attention_free(&one);
    } else CHECKF(0, "%s", e.msg);

    ip.n_adapters = 2;
    ip.adapter_scales = s2;
    if (hx_inspect_attention(m, ids, n, &ip, &two, &e) == HX_OK) {
        lora_set ls = { { &a1, &a2 }, { 0.75f, -1.5f }, 2 };
        check_against_ref(path, "adapter@0.75+q/k adapter@-1.5", m, ids, n, &ls, &two, &base);
        check_decode(path, m, ids, n, both, s2, 2, &two);
        hx_attention_free(&two);
    } else CHECKF(0, "%s", e.msg);

    /* nothing stays behind: the next call without adapters is the base again */
    ip.adapters = NULL;
    ip.adapter_scales = NULL;
    ip.n_adapters = 0;
    CHECKF(hx_inspect_attention(m, ids, n, &ip, &again, &e) == HX_OK, "%s", e.msg);
    CHECKF(same_attention(&base, &again), "%s: a call without adapters differs from the first", path);
    hx_attention_free(&again);

    /* bad arguments */
    hx_attention bad;
    hx_adapter *nul[1] = { NULL };
    float inf[1] = { INFINITY };
    ip.n_adapters = 1;
    ip.adapters = nul;
    ip.adapter_scales = s1;
    CHECK(hx_inspect_attention(m, ids, n, &ip, &bad, &e) == HX_ERR_ARG && !bad.probs);
    ip.adapters = both;
    ip.adapter_scales = NULL;
    CHECK(hx_inspect_attention(m, ids, n, &ip, &bad, &e) == HX_ERR_ARG);
    ip.adapter_scales = inf;
    CHECK(hx_inspect_attention(m, ids, n, &ip, &bad, &e) == HX_ERR_ARG && strstr(e.msg, "finite"));
    ip.n_adapters = -1;
    CHECK(hx_inspect_attention(m, ids, n, &ip, &bad, &e) == HX_ERR_ARG);
    hx_model *m2 = NULL;
    if (other_path && hx_model_open(other_path, &mp, &m2, &e) == HX_OK) {
        ip.n_adapters = 1;
        ip.adapter_scales = s1;
        int32_t few[2] = { 1, 2 };
        CHECK(hx_inspect_attention(m2, few, 2, &ip, &bad, &e) == HX_ERR_ARG && strstr(e.msg, "another model"));
        hx_model_free(m2);
    }
    hx_attention_free(&base);
out:
    hx_adapter_free(h1);
    hx_adapter_free(h2);
    unlink(p1);
    unlink(p2);
    adapter_free(&a1, c->n_layer);
    adapter_free(&a2, c->n_layer);
    hx_model_free(m);
}

int main(void) {
    const char *sh = t_require_shared();
    char dir[] = "/tmp/hx_inspect_lora.XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char p[1024], other[1024];
    const char *files[] = { "models/stories260K.gguf", "models/ref-tiny/tiny-qwen3-shared.gguf",
                            "models/ref-tiny/tiny-gemma3-shared.gguf" };
    int ran = 0;
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", sh, files[i]);
        snprintf(other, sizeof other, "%s/%s", sh, files[(i + 1) % 3]);
        struct stat st;
        if (stat(p, &st) != 0) { printf("SKIP part: %s not found\n", p); continue; }
        check_model(p, stat(other, &st) == 0 ? other : NULL, dir, i);
        ran++;
    }
    rmdir(dir);
    if (!ran) { printf("SKIP: none of the models in %s/models\n", sh); return 77; }
    return t_done("test_inspect_lora");
}
