/* test_inspect.c — hx_inspect_attention's invariants on real small models of
 * ../shared (stories260K: llama with GQA 8/4; tiny gemma3: five sliding-window
 * layers of window 8 then a global one; tiny qwen3: QK-norm, head_dim != n_embd
 * / n_head), through the public API only:
 *   - every row sums to 1, entries after the query (causal) and before its
 *     sliding window are exactly 0;
 *   - the probabilities are softmax(scale q k^T) recomputed here in double
 *     from the returned post-RoPE q and k, with the documented mask and GQA
 *     head sharing (a wrong scale, mask or head mapping fails);
 *   - probs x v reproduces the attention output the forward passed on (o) for
 *     every token, the last one included;
 *   - the pass's last-token logits equal an ordinary exact f32 hx_decode's;
 *   - one layer alone equals that layer of the full result;
 *   - bad arguments fail with HX_ERR_ARG.
 * The comparison with transformers' output_attentions is tests/inspect_hf.sh. */
#include "helix.h"
#include "test_util.h"

static const char *TEXT = "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
                          "park with her friends and her dog.";

static void check_model(const char *path, bool expect_swa) {
    hx_error e = {0};
    hx_model *m = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    if (hx_model_open(path, &mp, &m, &e)) { CHECKF(0, "%s: %s", path, e.msg); return; }
    int32_t ids[256];
    int n = 0;
    CHECKF(hx_tokenize(m, TEXT, -1, true, false, ids, 256, &n, &e) == HX_OK, "%s", e.msg);
    CHECKF(n >= 20, "%s: only %d tokens", path, n);
    hx_inspect_params ip = hx_inspect_default_params();
    ip.want_qkv = true;
    hx_attention a;
    if (hx_inspect_attention(m, ids, n, &ip, &a, &e)) { CHECKF(0, "%s: %s", path, e.msg); hx_model_free(m); return; }
    CHECK(a.n_tok == n && a.n_layer == hx_model_n_layer(m) && a.layer0 == 0 && a.n_head == hx_model_n_head(m));
    CHECK(a.q && a.k && a.v && a.o && a.logits && a.window);
    const int T = n, H = a.n_head, Hkv = a.n_head_kv, d = a.head_dim, grp = H / Hkv;
    int n_swa = 0;
    double max_sum = 0, max_soft = 0, max_o = 0;
    long bad_mask = 0;
    double *s = malloc(sizeof(double) * T);
    for (int l = 0; l < a.n_layer; l++) {
        int win = a.window[l];
        if (win) { n_swa++; CHECKF(win < T, "%s: window %d is not shorter than the %d-token prompt", path, win, T); }
        for (int h = 0; h < H; h++) {
            int kvh = h / grp;
            for (int i = 0; i < T; i++) {
                const float *P = a.probs + (((size_t)l * H + h) * T + i) * T;
                int first = win && i - win + 1 > 0 ? i - win + 1 : 0;
                double sum = 0;
                for (int j = 0; j < T; j++) {
                    if (j > i || j < first) bad_mask += P[j] != 0.0f;
                    sum += P[j];
                }
                if (fabs(sum - 1) > max_sum) max_sum = fabs(sum - 1);
                /* softmax(scale q . k) over first..i, in double */
                const float *q = a.q + (((size_t)l * T + i) * H + h) * d;
                double mx = -INFINITY, z = 0;
                for (int j = first; j <= i; j++) {
                    const float *k = a.k + (((size_t)l * T + j) * Hkv + kvh) * d;
                    double dot = 0;
                    for (int c = 0; c < d; c++) dot += (double)q[c] * k[c];
                    s[j] = a.scale * dot;
                    if (a.softcap > 0) s[j] = a.softcap * tanh(s[j] / a.softcap);
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = first; j <= i; j++) z += exp(s[j] - mx);
                for (int j = first; j <= i; j++) {
                    double diff = fabs(exp(s[j] - mx) / z - P[j]);
                    if (diff > max_soft) max_soft = diff;
                }
                /* probs x v = o */
                const float *o = a.o + (((size_t)l * T + i) * H + h) * d;
                for (int c = 0; c < d; c++) {
                    double acc = 0;
                    for (int j = 0; j < T; j++) acc += (double)P[j] * a.v[(((size_t)l * T + j) * Hkv + kvh) * d + c];
                    double diff = fabs(acc - o[c]) / (1 + fabs(acc));
                    if (diff > max_o) max_o = diff;
                }
            }
        }
    }
    free(s);
    printf("%s: %d tokens, %d layers (%d sliding), |row sum - 1| %.2e, softmax recomputed %.2e, probs x v %.2e\n",
           path, T, a.n_layer, n_swa, max_sum, max_soft, max_o);
    CHECKF(bad_mask == 0, "%s: %ld masked entries are not 0", path, bad_mask);
    CHECKF(max_sum < 1e-5, "%s: a row sums to 1 +- %g", path, max_sum);
    CHECKF(max_soft < 1e-5, "%s: probabilities differ from softmax(scale q k) by %g", path, max_soft);
    CHECKF(max_o < 1e-5, "%s: probs x v differs from the forward's attention output by %g", path, max_o);
    CHECKF(expect_swa ? n_swa > 0 && n_swa < a.n_layer : n_swa == 0, "%s: %d sliding-window layers", path, n_swa);

    /* the same pass without the probe: an exact f32 context's last-token logits */
    hx_context_params cp = hx_context_default_params();
    cp.exact = true;
    cp.kv_f32 = true;
    cp.n_ctx = 256;
    hx_context *ctx = NULL;
    if (hx_context_new(m, &cp, &ctx, &e) == HX_OK) {
        hx_batch b = hx_batch_init(n);
        for (int i = 0; i < n; i++) hx_batch_add(&b, ids[i], i, 0, i == n - 1);
        CHECKF(hx_decode(ctx, &b, &e) == HX_OK, "%s", e.msg);
        const float *lg = hx_get_logits(ctx, -1);
        double md = 0;
        for (int t = 0; lg && t < a.n_vocab; t++) md = fmax(md, fabs((double)lg[t] - a.logits[t]));
        CHECKF(lg && md <= 1e-4, "%s: inspected logits differ from hx_decode's by %g", path, md);
        hx_batch_free(&b);
        hx_context_free(ctx);
    } else CHECKF(0, "%s", e.msg);

    /* one layer alone */
    int L = a.n_layer - 1;
    hx_inspect_params one = hx_inspect_default_params();
    one.layer = L;
    hx_attention b;
    if (hx_inspect_attention(m, ids, n, &one, &b, &e) == HX_OK) {
        CHECK(b.n_layer == 1 && b.layer0 == L && !b.q && b.window[0] == a.window[L]);
        size_t sz = (size_t)H * T * T;
        CHECKF(!memcmp(b.probs, a.probs + (size_t)L * sz, sz * sizeof(float)), "%s: layer %d alone differs", path, L);
        hx_attention_free(&b);
    } else CHECKF(0, "%s", e.msg);

    /* bad arguments */
    one.layer = a.n_layer;
    CHECK(hx_inspect_attention(m, ids, n, &one, &b, &e) == HX_ERR_ARG && strstr(e.msg, "layer") && !b.probs);
    one.layer = -2;
    CHECK(hx_inspect_attention(m, ids, n, &one, &b, &e) == HX_ERR_ARG);
    int32_t bad[2] = { ids[0], hx_model_n_vocab(m) };
    CHECK(hx_inspect_attention(m, bad, 2, NULL, &b, &e) == HX_ERR_ARG && strstr(e.msg, "vocabulary"));
    CHECK(hx_inspect_attention(m, ids, 0, NULL, &b, &e) == HX_ERR_ARG);
    CHECK(hx_inspect_attention(NULL, ids, n, NULL, &b, &e) == HX_ERR_ARG);
    hx_attention_free(&a);
    hx_attention_free(&a); /* twice is safe */
    hx_model_free(m);
}

int main(void) {
    const char *sh = t_require_shared();
    char p[1024];
    struct { const char *file; bool swa; } cases[] = {
        {"models/stories260K.gguf", false},
        {"models/ref-tiny/tiny-gemma3-shared.gguf", true},
        {"models/ref-tiny/tiny-qwen3-shared.gguf", false},
    };
    int ran = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(p, sizeof p, "%s/%s", sh, cases[c].file);
        struct stat st;
        if (stat(p, &st) != 0) { printf("SKIP part: %s not found\n", p); continue; }
        check_model(p, cases[c].swa);
        ran++;
    }
    snprintf(p, sizeof p, "%s/models/ref-tiny/tiny-bert-shared.gguf", sh);
    hx_model *m = NULL;
    hx_error e = {0};
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    if (hx_model_open(p, &mp, &m, &e) == HX_OK) {
        int32_t ids[3] = { 101, 2000, 102 };
        hx_attention a;
        CHECK(hx_inspect_attention(m, ids, 3, NULL, &a, &e) == HX_ERR_ARG && strstr(e.msg, "encoder"));
        hx_model_free(m);
    }
    if (!ran) { printf("SKIP: none of the models in %s/models\n", sh); return 77; }
    return t_done("test_inspect");
}
