/* test_train.c — LoRA training (src/train): every op's backward against
 * central finite differences, then the whole model's.
 *
 * Ops: L = sum(R .* op(x)) for a random R; the backward given dy = R must
 * match (L(x + eps e_i) - L(x - eps e_i)) / 2 eps for sampled inputs i:
 * RMSNorm, RoPE (norm and neox), attention (GQA, two packed sequences, a
 * sliding window, a logit softcap), SwiGLU / GeGLU (tanh and erf),
 * cross-entropy with and without the final softcap.
 *
 * Model (tiny random llama, qwen3 and gemma3 written by hx_synth_write, f32):
 * the LoRA gradient of a packed batch of two sequences, checked as a
 * directional derivative along each projection's own gradient (so a wrong
 * gradient in any one of q/k/v/o/gate/up/down fails); checkpointing gives the
 * same gradients; a packed batch gives the gradients of its sequences taken
 * one by one; AdamW steps lower the loss; the saved adapter loads through the
 * public API and its logits (CPU, exact) equal the trainer's own. */
#include "helix.h"
#include "model/lora.h"
#include "model/model.h"
#include "model/synth.h"
#include "test_util.h"
#include "train/ops.h"
#include "train/train.h"

#include <cjson/cJSON.h>
#include <unistd.h>

static uint64_t g_rng = 0x1234567ull;
static float frand(void) { /* uniform in (-1, 1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}
static void fill(float *x, size_t n, float s) { for (size_t i = 0; i < n; i++) x[i] = s * frand(); }
static double dotd(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* |analytic - numeric| within 3e-4 + 3e-3 |numeric| (f32 forward, eps 1e-2). */
static int fd_ok(double an, double num) { return fabs(an - num) <= 3e-4 + 3e-3 * fabs(num); }
#define FD_CHECK(what, an, num) CHECKF(fd_ok(an, num), "%s: analytic %.6g, numeric %.6g", what, an, num)

/* ---- ops ---- */

static void test_rmsnorm(void) {
    enum { R = 3, N = 24 };
    float x[R * N], w[N], y[R * N], rs[R], Rr[R * N], dx[R * N];
    fill(x, R * N, 1.5f); fill(w, N, 1.0f); fill(Rr, R * N, 1.0f);
    hx_tr_rmsnorm_fwd(y, rs, x, w, R, N, 1e-5f);
    hx_tr_rmsnorm_bwd(dx, Rr, x, w, rs, R, N, 0);
    for (int i = 0; i < R * N; i += 5) {
        float save = x[i], eps = 1e-2f;
        x[i] = save + eps; hx_tr_rmsnorm_fwd(y, rs, x, w, R, N, 1e-5f); double lp = dotd(y, Rr, R * N);
        x[i] = save - eps; hx_tr_rmsnorm_fwd(y, rs, x, w, R, N, 1e-5f); double lm = dotd(y, Rr, R * N);
        x[i] = save;
        FD_CHECK("rmsnorm", dx[i], (lp - lm) / (2 * eps));
    }
    /* accumulate mode adds */
    float acc[R * N];
    for (int i = 0; i < R * N; i++) acc[i] = 1.0f;
    hx_tr_rmsnorm_fwd(y, rs, x, w, R, N, 1e-5f);
    hx_tr_rmsnorm_bwd(acc, Rr, x, w, rs, R, N, 1);
    for (int i = 0; i < R * N; i++) CHECK_NEAR(acc[i], 1.0f + dx[i], 1e-5);
}

static void test_rope(hx_rope_style st) {
    enum { T = 5, H = 2, HD = 8 };
    int32_t pos[T] = { 0, 1, 2, 0, 1 };
    float x[T * H * HD], y[T * H * HD], Rr[T * H * HD], g[T * H * HD];
    fill(x, T * H * HD, 1.0f); fill(Rr, T * H * HD, 1.0f);
    memcpy(g, Rr, sizeof g);
    hx_tr_rope(g, T, H, HD, pos, 10000.0, 2.0, st, 1);
    for (int i = 0; i < T * H * HD; i += 3) {
        float eps = 1e-2f;
        memcpy(y, x, sizeof y); y[i] += eps; hx_tr_rope(y, T, H, HD, pos, 10000.0, 2.0, st, 0);
        double lp = dotd(y, Rr, T * H * HD);
        memcpy(y, x, sizeof y); y[i] -= eps; hx_tr_rope(y, T, H, HD, pos, 10000.0, 2.0, st, 0);
        double lm = dotd(y, Rr, T * H * HD);
        FD_CHECK(st == HX_ROPE_NORM ? "rope norm" : "rope neox", g[i], (lp - lm) / (2 * eps));
    }
    /* the forward rotates: a position-1 token actually changes */
    memcpy(y, x, sizeof y);
    hx_tr_rope(y, T, H, HD, pos, 10000.0, 2.0, st, 0);
    CHECK(fabsf(y[H * HD] - x[H * HD]) > 1e-4f || fabsf(y[H * HD + 1] - x[H * HD + 1]) > 1e-4f);
}

static void test_attention(int window, float softcap) {
    enum { T = 9, NHQ = 4, NKV = 2, HD = 4 };
    int32_t pos[T] = { 0, 1, 2, 3, 4, 5, 0, 1, 2 }; /* two sequences of 6 and 3 */
    hx_tr_attn a = { .n = T, .n_head = NHQ, .n_kv = NKV, .hd = HD, .window = window, .scale = 0.7f,
                     .softcap = softcap, .pos = pos };
    int64_t prow[T];
    hx_tr_attn_rows(&a, prow);
    CHECK(a.p_total <= T * T && a.p_total >= T);
    static float q[T * NHQ * HD], k[T * NKV * HD], v[T * NKV * HD], P[NHQ * T * T], out[T * NHQ * HD],
        Rr[T * NHQ * HD], dq[T * NHQ * HD], dk[T * NKV * HD], dv[T * NKV * HD], scr[NKV * T];
    fill(q, sizeof q / 4, 1.5f); fill(k, sizeof k / 4, 1.5f); fill(v, sizeof v / 4, 1.0f); fill(Rr, sizeof Rr / 4, 1.0f);
    hx_tr_attn_fwd(NULL, &a, q, k, v, P, out);
    hx_tr_attn_bwd(NULL, &a, q, k, v, P, Rr, dq, dk, dv, scr);
    float *ins[3] = { q, k, v }, *gr[3] = { dq, dk, dv };
    size_t ns[3] = { sizeof q / 4, sizeof k / 4, sizeof v / 4 };
    const char *nm[3] = { "attention dq", "attention dk", "attention dv" };
    for (int w = 0; w < 3; w++)
        for (size_t i = 0; i < ns[w]; i += 3) {
            float save = ins[w][i], eps = 1e-2f;
            ins[w][i] = save + eps; hx_tr_attn_fwd(NULL, &a, q, k, v, P, out); double lp = dotd(out, Rr, sizeof out / 4);
            ins[w][i] = save - eps; hx_tr_attn_fwd(NULL, &a, q, k, v, P, out); double lm = dotd(out, Rr, sizeof out / 4);
            ins[w][i] = save;
            FD_CHECK(nm[w], gr[w][i], (lp - lm) / (2 * eps));
        }
    /* masking: the second sequence's first token sees only itself, so its output is its value row */
    hx_tr_attn_fwd(NULL, &a, q, k, v, P, out);
    for (int d = 0; d < HD; d++) CHECK_NEAR(out[(6 * NHQ + 0) * HD + d], v[(6 * NKV + 0) * HD + d], 1e-6);
    /* a token's key outside every query's view gets no gradient (window 2: token 0 is seen by 0 and 1 only) */
    if (window == 2) {
        float s = 0;
        for (int d = 0; d < HD; d++) s += fabsf(dk[d]);
        CHECK(s > 0);
    }
}

static void test_glu(hx_act act, const char *name) {
    enum { N = 40 };
    float g[N], u[N], o[N], Rr[N], dg[N], du[N];
    fill(g, N, 3.0f); fill(u, N, 1.0f); fill(Rr, N, 1.0f);
    hx_tr_glu_bwd(dg, du, Rr, g, u, N, act);
    for (int i = 0; i < N; i++) {
        float eps = 1e-2f, save = g[i];
        g[i] = save + eps; hx_tr_glu_fwd(o, g, u, N, act); double lp = dotd(o, Rr, N);
        g[i] = save - eps; hx_tr_glu_fwd(o, g, u, N, act); double lm = dotd(o, Rr, N);
        g[i] = save;
        FD_CHECK(name, dg[i], (lp - lm) / (2 * eps));
        save = u[i];
        u[i] = save + eps; hx_tr_glu_fwd(o, g, u, N, act); lp = dotd(o, Rr, N);
        u[i] = save - eps; hx_tr_glu_fwd(o, g, u, N, act); lm = dotd(o, Rr, N);
        u[i] = save;
        FD_CHECK(name, du[i], (lp - lm) / (2 * eps));
    }
}

static void test_xent(float softcap) {
    enum { V = 30 };
    float lg[V], d[V];
    fill(lg, V, 4.0f);
    double l0 = hx_tr_xent(lg, V, 7, softcap, 0.5f, d);
    CHECK(l0 > 0);
    for (int i = 0; i < V; i++) {
        float eps = 1e-2f, save = lg[i];
        lg[i] = save + eps; double lp = hx_tr_xent(lg, V, 7, softcap, 1.0f, NULL);
        lg[i] = save - eps; double lm = hx_tr_xent(lg, V, 7, softcap, 1.0f, NULL);
        lg[i] = save;
        FD_CHECK(softcap > 0 ? "xent softcap" : "xent", d[i], 0.5 * (lp - lm) / (2 * eps));
    }
}

/* ---- the model ---- */

enum { NTOK = 17 };
static const int32_t g_pos[NTOK] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6 };
static const uint8_t g_tgt[NTOK] = { 0, 0, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1 }; /* index 10 starts a sequence: ignored */
static int32_t g_tok[NTOK];

static double batch_loss(hx_trainer *t) {
    hx_error e = {0};
    double loss = 0;
    int nt = 0;
    hx_trainer_zero_grad(t);
    if (hx_trainer_accumulate(t, g_tok, g_pos, g_tgt, NTOK, 1.0f, &loss, &nt, &e)) fprintf(stderr, "%s\n", e.msg);
    (void)nt;
    return loss; /* the gradient is the sum's (weight 1) */
}

/* gradients of all trained matrices, concatenated (A then B of each) */
static size_t grads_copy(hx_trainer *t, int nl, float *dst) {
    size_t k = 0;
    for (int l = 0; l < nl; l++)
        for (int s = 0; s < HX_LORA_PER_LAYER; s++) {
            hx_train_mat *w = hx_trainer_mat(t, l, s);
            if (!w->rank) continue;
            size_t na = (size_t)w->rank * w->n_in, nb = (size_t)w->rank * w->n_out;
            if (dst) { memcpy(dst + k, w->ga, na * 4); memcpy(dst + k + na, w->gb, nb * 4); }
            k += na + nb;
        }
    return k;
}

/* slot s's A and B (every layer) += f * their gradient in g (grads_copy's order) */
static void shift(hx_trainer *t, int nl, int s, const float *g, double f) {
    size_t k = 0;
    for (int l = 0; l < nl; l++)
        for (int q = 0; q < HX_LORA_PER_LAYER; q++) {
            hx_train_mat *w = hx_trainer_mat(t, l, q);
            size_t na = (size_t)w->rank * w->n_in, nb = (size_t)w->rank * w->n_out;
            if (q == s) {
                for (size_t i = 0; i < na; i++) w->a[i] += (float)(f * g[k + i]);
                for (size_t i = 0; i < nb; i++) w->b[i] += (float)(f * g[k + na + i]);
            }
            k += na + nb;
        }
}

static void test_model(hx_arch arch, const char *name, const char *dir) {
    enum { NL = 3, D = 64, NH = 4, NKV = 2, HD = 16, FF = 128, NV = 512 };
    hx_preset pr = { name, arch, D, NL, NH, NKV, HD, FF, NV, 256, 10000.f, arch == HX_ARCH_GEMMA3 ? 1000.f : 0, 1e-5f,
                     arch != HX_ARCH_LLAMA, arch == HX_ARCH_GEMMA3 ? 4 : 0, "default" };
    char path[300], apath[300];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, name);
    snprintf(apath, sizeof apath, "%s/%s.lora.gguf", dir, name);
    hx_synth_opts so = { .preset = &pr, .mix = HX_MIX_F32, .seed = 11, .n_threads = 1 };
    hx_error e = {0};
    hx_model *m = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    if (hx_synth_write(&so, path, &e) || hx_model_open(path, &mp, &m, &e)) {
        CHECKF(0, "%s: %s", name, e.msg);
        return;
    }
    for (int i = 0; i < NTOK; i++) g_tok[i] = (int32_t)((i * 37 + 11) % NV);
    hx_train_opts o = hx_train_default_opts();
    o.rank = 4;
    o.alpha = 8;
    o.n_threads = 2;
    o.checkpoint = false;
    hx_trainer *t = NULL;
    if (hx_trainer_new(m, &o, &t, &e)) { CHECKF(0, "%s: %s", name, e.msg); hx_model_free(m); return; }
    /* B random (it starts at 0, where A's gradient vanishes) */
    for (int l = 0; l < NL; l++)
        for (int s = 0; s < HX_LORA_PER_LAYER; s++) {
            hx_train_mat *w = hx_trainer_mat(t, l, s);
            fill(w->b, (size_t)w->rank * w->n_out, 0.3f);
        }
    double l0 = batch_loss(t);
    CHECKF(isfinite(l0) && l0 > 0, "%s: loss %g", name, l0);
    size_t ng = grads_copy(t, NL, NULL);
    float *g = malloc(ng * 4), *g2 = malloc(ng * 4);
    grads_copy(t, NL, g);

    /* directional derivative along each slot's gradient, summed over layers */
    for (int s = 0; s < HX_LORA_PER_LAYER; s++) {
        double nn = 0;
        size_t k = 0;
        for (int l = 0; l < NL; l++)
            for (int q = 0; q < HX_LORA_PER_LAYER; q++) {
                hx_train_mat *w = hx_trainer_mat(t, l, q);
                size_t na = (size_t)w->rank * w->n_in, nb = (size_t)w->rank * w->n_out;
                if (q == s) nn += dotd(g + k, g + k, na + nb);
                k += na + nb;
            }
        double norm = sqrt(nn);
        CHECKF(norm > 0, "%s slot %d: zero gradient", name, s);
        if (!(norm > 0)) continue;
        double eps = 5e-3;
        shift(t, NL, s, g, eps / norm);
        double lp = batch_loss(t);
        shift(t, NL, s, g, -2 * eps / norm);
        double lm = batch_loss(t);
        shift(t, NL, s, g, eps / norm);
        double num = (lp - lm) / (2 * eps);
        CHECKF(fabs(num - norm) <= 3e-3 * norm + 1e-5, "%s slot %d: |grad| %.6g, directional difference %.6g", name, s,
               norm, num);
    }

    /* checkpointing recomputes the same activations: the same gradients */
    hx_train_opts oc = o;
    oc.checkpoint = true;
    hx_trainer *tc = NULL;
    if (!hx_trainer_new(m, &oc, &tc, &e)) {
        for (int l = 0; l < NL; l++)
            for (int s = 0; s < HX_LORA_PER_LAYER; s++) {
                hx_train_mat *a = hx_trainer_mat(t, l, s), *b = hx_trainer_mat(tc, l, s);
                memcpy(b->a, a->a, (size_t)a->rank * a->n_in * 4);
                memcpy(b->b, a->b, (size_t)a->rank * a->n_out * 4);
            }
        double lc = batch_loss(tc);
        grads_copy(tc, NL, g2);
        double md = 0, mg = 0;
        for (size_t i = 0; i < ng; i++) { md = fmax(md, fabs((double)g[i] - g2[i])); mg = fmax(mg, fabs(g[i])); }
        /* equal up to f32 summation order (the blocked sgemm's split depends on the buffers' alignment) */
        CHECKF(md <= 1e-5 * mg && fabs(lc - l0) <= 1e-6 * fabs(l0), "%s: checkpointing changes the gradients by %g (max |g| %g), "
               "the loss by %g", name, md, mg, lc - l0);
        hx_trainer_free(tc);
    } else CHECKF(0, "%s", e.msg);

    /* the packed batch = its two sequences one by one */
    {
        double la = 0, lb = 0;
        int na = 0, nb = 0;
        hx_trainer_zero_grad(t);
        CHECK(!hx_trainer_accumulate(t, g_tok, g_pos, g_tgt, 10, 1.0f, &la, &na, &e));
        CHECK(!hx_trainer_accumulate(t, g_tok + 10, g_pos + 10, g_tgt + 10, NTOK - 10, 1.0f, &lb, &nb, &e));
        grads_copy(t, NL, g2);
        double md = 0, mg = 0;
        for (size_t i = 0; i < ng; i++) { md = fmax(md, fabs((double)g[i] - g2[i])); mg = fmax(mg, fabs(g[i])); }
        CHECKF(md <= 1e-5 * mg, "%s: packed vs one by one: max diff %g (max |g| %g)", name, md, mg);
        CHECK(na + nb == 9);
        CHECK_NEAR(la + lb, l0, 1e-4);
    }

    /* AdamW lowers the loss on this batch */
    hx_adamw_opts ao = hx_adamw_default_opts();
    double lstart = batch_loss(t), lnow = lstart;
    for (int it = 0; it < 8; it++) {
        lnow = batch_loss(t);
        hx_trainer_adamw_step(t, &ao, 1e-2f);
    }
    lnow = batch_loss(t);
    CHECKF(lnow < lstart - 0.05, "%s: loss %g -> %g after 8 AdamW steps", name, lstart, lnow);

    /* saved adapter: the public API's CPU context gives the trainer's logits */
    float *lt = malloc(sizeof(float) * NTOK * NV);
    CHECK(!hx_trainer_logits(t, g_tok, g_pos, 10, lt, &e));
    CHECKF(!hx_trainer_save(t, apath, &e), "%s", e.msg);
    hx_adapter *ad = NULL;
    hx_context *ctx = NULL;
    hx_context_params cp = hx_context_default_params();
    cp.exact = true;
    cp.kv_f32 = true;
    cp.n_ctx = 64;
    cp.n_threads = 1;
    float one = 1.0f;
    if (hx_adapter_open(m, apath, &ad, &e) || hx_context_new(m, &cp, &ctx, &e) ||
        hx_context_set_adapters(ctx, &ad, &one, 1, &e)) {
        CHECKF(0, "%s: %s", name, e.msg);
    } else {
        hx_batch b = hx_batch_init(16);
        for (int i = 0; i < 10; i++) hx_batch_add(&b, g_tok[i], i, 0, true);
        CHECKF(!hx_decode(ctx, &b, &e), "%s", e.msg);
        double md = 0, mdbase = 0;
        for (int i = 0; i < 10; i++) {
            const float *lg = hx_get_logits(ctx, i);
            for (int v = 0; v < NV && lg; v++) md = fmax(md, fabs(lg[v] - lt[i * NV + v]));
        }
        /* and without it the logits move (the adapter matters) */
        hx_context_set_adapters(ctx, NULL, NULL, 0, &e);
        hx_batch_clear(&b);
        for (int i = 0; i < 10; i++) hx_batch_add(&b, g_tok[i], i, 0, true);
        CHECK(!hx_decode(ctx, &b, &e));
        for (int i = 0; i < 10; i++) {
            const float *lg = hx_get_logits(ctx, i);
            for (int v = 0; v < NV && lg; v++) mdbase = fmax(mdbase, fabs(lg[v] - lt[i * NV + v]));
        }
        CHECKF(md < 1e-4, "%s: helix with the saved adapter vs the trainer: max |logit diff| %g", name, md);
        CHECKF(mdbase > 1e-2, "%s: the trained adapter moves the logits by only %g", name, mdbase);
        printf("%s: loss %.4f -> %.4f, adapter logits vs trainer %.2g (base differs by %.3g)\n", name, lstart, lnow, md,
               mdbase);
        hx_batch_free(&b);
    }
    hx_context_free(ctx);
    hx_adapter_free(ad);
    free(lt); free(g); free(g2);
    hx_trainer_free(t);
    hx_model_free(m);
}

/* HX_TRAIN_REF (tests/train_grad.sh): the gradients PyTorch autograd computed in float64 for a PEFT
 * adapter on tiny Hugging Face decoders; helix's f32 gradients must agree to a relative error
 * (|g - ref| / |ref| per matrix) below 1e-4. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    if (b) b[n] = 0;
    fclose(f);
    return b;
}

static void test_torch_ref(const char *dir, const char *name) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s.train.json", dir, name);
    char *js = slurp(p);
    cJSON *j = js ? cJSON_Parse(js) : NULL;
    free(js);
    cJSON *ids = cJSON_GetObjectItem(j, "ids"), *tg = cJSON_GetObjectItem(j, "target");
    if (!cJSON_IsArray(ids) || !cJSON_IsArray(tg)) { CHECKF(0, "%s: unreadable", p); cJSON_Delete(j); return; }
    int n = cJSON_GetArraySize(ids);
    double ref_loss = cJSON_GetNumberValue(cJSON_GetObjectItem(j, "loss"));
    int32_t *tok = malloc(sizeof(int32_t) * n), *pos = malloc(sizeof(int32_t) * n);
    uint8_t *tgt = malloc((size_t)n);
    int ntg = 0;
    for (int i = 0; i < n; i++) {
        tok[i] = (int32_t)cJSON_GetNumberValue(cJSON_GetArrayItem(ids, i));
        tgt[i] = (uint8_t)cJSON_GetNumberValue(cJSON_GetArrayItem(tg, i));
        pos[i] = i;
        ntg += i > 0 && tgt[i];
    }
    cJSON_Delete(j);
    hx_error e = {0};
    hx_model *m = NULL;
    hx_adapter *ad = NULL;
    hx_trainer *t = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    hx_train_opts o = hx_train_default_opts();
    o.rank = 4;
    o.n_threads = 2;
    if (hx_model_open(p, &mp, &m, &e) || (snprintf(p, sizeof p, "%s/%s.lora", dir, name), hx_adapter_open(m, p, &ad, &e)) ||
        hx_trainer_new(m, &o, &t, &e) || hx_trainer_load_adapter(t, ad, &e)) {
        CHECKF(0, "%s: %s", name, e.msg);
        goto out;
    }
    double loss = 0;
    int nt = 0;
    hx_trainer_zero_grad(t);
    CHECKF(!hx_trainer_accumulate(t, tok, pos, tgt, n, 1.0f / ntg, &loss, &nt, &e), "%s", e.msg);
    CHECKF(fabs(loss / nt - ref_loss) <= 1e-5 * fabs(ref_loss), "%s: loss %.8f, PyTorch %.8f", name, loss / nt, ref_loss);
    snprintf(p, sizeof p, "%s/%s.grads.f32", dir, name);
    FILE *f = fopen(p, "rb");
    CHECKF(f != NULL, "%s: missing", p);
    double worst = 0;
    for (int l = 0; f && l < m->cfg.n_layer; l++)
        for (int s = 0; s < HX_LORA_PER_LAYER; s++) {
            hx_train_mat *w = hx_trainer_mat(t, l, s);
            for (int ab = 0; ab < 2; ab++) {
                size_t cnt = (size_t)w->rank * (ab ? w->n_out : w->n_in);
                float *ref = malloc(cnt * 4);
                if (fread(ref, 4, cnt, f) != cnt) { CHECKF(0, "%s: short file", p); free(ref); goto closef; }
                const float *gg = ab ? w->gb : w->ga;
                double num = 0, den = 0;
                for (size_t i = 0; i < cnt; i++) { num += ((double)gg[i] - ref[i]) * ((double)gg[i] - ref[i]); den += (double)ref[i] * ref[i]; }
                double rel = sqrt(num / den);
                if (rel > worst) worst = rel;
                CHECKF(den > 0 && rel < 1e-4, "%s layer %d slot %d %s: relative error %.3g", name, l, s, ab ? "B" : "A", rel);
                free(ref);
            }
        }
    if (f) CHECKF(fgetc(f) == EOF, "%s: longer than the adapter's gradients", p);
    printf("%s: loss %.6f (PyTorch %.6f), worst relative gradient error %.2g\n", name, loss / nt, ref_loss, worst);
closef:
    if (f) fclose(f);
out:
    hx_trainer_free(t);
    hx_adapter_free(ad);
    hx_model_free(m);
    free(tok); free(pos); free(tgt);
}

static void test_schedule(void) {
    CHECK_NEAR(hx_train_lr_at(1.0f, 0, 4, 20, 0.1f), 0.25, 1e-6);
    CHECK_NEAR(hx_train_lr_at(1.0f, 3, 4, 20, 0.1f), 1.0, 1e-6);
    CHECK_NEAR(hx_train_lr_at(1.0f, 4, 4, 20, 0.1f), 1.0, 1e-6);
    CHECK_NEAR(hx_train_lr_at(1.0f, 19, 4, 20, 0.1f), 0.1, 1e-6);
    CHECK(hx_train_lr_at(1.0f, 12, 4, 20, 0.1f) < 0.9f && hx_train_lr_at(1.0f, 12, 4, 20, 0.1f) > 0.2f);
}

int main(void) {
    test_rmsnorm();
    test_rope(HX_ROPE_NORM);
    test_rope(HX_ROPE_NEOX);
    test_attention(0, 0);
    test_attention(2, 0);
    test_attention(3, 5.0f);
    test_glu(HX_ACT_SILU, "swiglu");
    test_glu(HX_ACT_GELU_TANH, "geglu tanh");
    test_glu(HX_ACT_GELU_ERF, "geglu erf");
    test_xent(0);
    test_xent(3.0f);
    test_schedule();
    const char *ref = getenv("HX_TRAIN_REF");
    if (ref && *ref) {
        const char *names[] = { "llama", "qwen2", "qwen3", "gemma3" };
        for (int i = 0; i < 4; i++) test_torch_ref(ref, names[i]);
    }
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/hx_train_%d", (int)getpid());
    mkdir(dir, 0755);
    test_model(HX_ARCH_LLAMA, "llama", dir);
    test_model(HX_ARCH_QWEN3, "qwen3", dir);
    test_model(HX_ARCH_GEMMA3, "gemma3", dir);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    printf("test_train: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
