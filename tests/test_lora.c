/* test_lora.c — LoRA adapters on the CPU path, against merged references.
 *
 * A tiny untied llama (random f32 weights, written by hx_synth_write) and two
 * random adapters the test writes in llama.cpp's GGUF adapter format:
 *   A1: rank 4, alpha 8, every projection of every layer, the output head and
 *       the token embedding;  A2: rank 2, alpha 0, q/v/down of layer 1.
 * Checks (exact contexts: f32 math and cache):
 *   - the merge itself: one merged matrix against W + s*B*A computed here in f64;
 *   - logits with A1 (prefill of 8 tokens, then 4 single-token decodes) equal
 *     the f32-merged model's within 1e-4, and differ from the base's;
 *   - scale 0 and removing the adapters give the base's logits bit for bit;
 *   - A1 * 0.5 + A2 * 2 equals the model with both merged;
 *   - a PEFT folder (HF names, torch layouts, Q/K rows unpermuted) with A1's
 *     numbers gives A1's logits, and so does its GGUF conversion;
 *   - bad adapters fail with the tensor named. */
#include "api/api.h"
#include "core/core.h"
#include "model/lora.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "test_util.h"

#include <sys/wait.h>
#include <unistd.h>

enum { NL = 2, D = 64, NH = 4, NKV = 2, HD = 16, FF = 128, NV = 512, NTOK = 12, NPRE = 8 };

static char g_dir[256];
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in (-0.1, 0.1) */
    g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17;
    return (float)((double)(g_rng >> 11) / 9007199254740992.0 * 0.2 - 0.1);
}

static const char *slot_gguf[7] = { "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down" };
static const char *slot_hf[7] = { "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                  "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj" };
static const int slot_in[7] = { D, D, D, NH * HD, D, D, FF };
static const int slot_out[7] = { NH * HD, NKV * HD, NKV * HD, D, FF, FF, D };

/* One adapter's numbers: per matrix A (r, in) and B (out, r) row-major, GGUF
 * row layout (Q/K permuted); token_embd: A (vocab, r), B (D, r). */
typedef struct mat { int r, in, out; float *a, *b; } mat;
typedef struct adapter { float alpha; mat w[NL][7], output, embd; } adapter;

static void mat_rand(mat *m, int r, int in, int out) {
    m->r = r; m->in = in; m->out = out;
    m->a = malloc(sizeof(float) * (size_t)r * (in > out ? in : out) * 1);
    m->b = malloc(sizeof(float) * (size_t)out * r);
    for (int i = 0; i < r * in; i++) m->a[i] = frand();
    for (int i = 0; i < out * r; i++) m->b[i] = frand();
}

static void write_adapter(const adapter *ad, const char *path) {
    hx_gguf_writer *w = hx_gguf_writer_new(0);
    hx_gguf_writer_set_str(w, "general.type", "adapter");
    hx_gguf_writer_set_str(w, "general.architecture", "llama");
    hx_gguf_writer_set_str(w, "adapter.type", "lora");
    hx_gguf_writer_set_f32(w, "adapter.lora.alpha", ad->alpha);
    char n[128];
    for (int l = 0; l < NL; l++)
        for (int s = 0; s < 7; s++) {
            const mat *m = &ad->w[l][s];
            if (!m->r) continue;
            int64_t nea[2] = { m->in, m->r }, neb[2] = { m->r, m->out };
            snprintf(n, sizeof n, "blk.%d.%s.weight.lora_a", l, slot_gguf[s]);
            hx_gguf_writer_add_tensor(w, n, HX_TYPE_F32, 2, nea, m->a);
            snprintf(n, sizeof n, "blk.%d.%s.weight.lora_b", l, slot_gguf[s]);
            hx_gguf_writer_add_tensor(w, n, HX_TYPE_F32, 2, neb, m->b);
        }
    if (ad->output.r) {
        int64_t nea[2] = { D, ad->output.r }, neb[2] = { ad->output.r, NV };
        hx_gguf_writer_add_tensor(w, "output.weight.lora_a", HX_TYPE_F32, 2, nea, ad->output.a);
        hx_gguf_writer_add_tensor(w, "output.weight.lora_b", HX_TYPE_F32, 2, neb, ad->output.b);
    }
    if (ad->embd.r) { /* llama.cpp's token_embd layout: lora_a ne [r, n_vocab], lora_b ne [r, n_embd] */
        int64_t nea[2] = { ad->embd.r, NV }, neb[2] = { ad->embd.r, D };
        hx_gguf_writer_add_tensor(w, "token_embd.weight.lora_a", HX_TYPE_F32, 2, nea, ad->embd.a);
        hx_gguf_writer_add_tensor(w, "token_embd.weight.lora_b", HX_TYPE_F32, 2, neb, ad->embd.b);
    }
    hx_error e = {0};
    if (hx_gguf_writer_write(w, path, &e)) { fprintf(stderr, "write %s: %s\n", path, e.msg); exit(1); }
    hx_gguf_writer_free(w);
}

/* safetensors with F32 tensors: name, rows, cols, data */
typedef struct st_t { char name[128]; int rows, cols; const float *data; } st_t;
static void write_safetensors(const char *path, const st_t *t, int n) {
    char *hdr = malloc(65536);
    size_t hl = 0, off = 0;
    hl += (size_t)sprintf(hdr + hl, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        size_t sz = sizeof(float) * (size_t)t[i].rows * t[i].cols;
        hl += (size_t)sprintf(hdr + hl, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}", t[i].name,
                              t[i].rows, t[i].cols, off, off + sz);
        off += sz;
    }
    hdr[hl++] = '}';
    while (hl % 8) hdr[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t h64 = hl;
    fwrite(&h64, 8, 1, f);
    fwrite(hdr, 1, hl, f);
    for (int i = 0; i < n; i++) fwrite(t[i].data, sizeof(float), (size_t)t[i].rows * t[i].cols, f);
    fclose(f);
    free(hdr);
}

/* HF's Q/K row order from llama.cpp's: permuted row j*2+t of a head is HF row t*hd/2+j. */
static float *unpermute(const mat *m, int heads) {
    float *o = malloc(sizeof(float) * (size_t)m->out * m->r);
    int hd = m->out / heads, half = hd / 2;
    for (int h = 0; h < heads; h++)
        for (int j = 0; j < half; j++)
            for (int t = 0; t < 2; t++)
                memcpy(o + (size_t)(h * hd + t * half + j) * m->r, m->b + (size_t)(h * hd + j * 2 + t) * m->r,
                       sizeof(float) * m->r);
    return o;
}

static void write_peft(const adapter *ad, const char *dir, int r) {
    mkdir(dir, 0755);
    char p[512];
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    FILE *f = fopen(p, "w");
    fprintf(f, "{\"peft_type\": \"LORA\", \"r\": %d, \"lora_alpha\": %g, \"target_modules\": [\"q_proj\", \"k_proj\", "
               "\"v_proj\", \"o_proj\", \"gate_proj\", \"up_proj\", \"down_proj\", \"lm_head\", \"embed_tokens\"], "
               "\"bias\": \"none\", \"use_rslora\": false, \"modules_to_save\": null}\n", r, ad->alpha);
    fclose(f);
    st_t t[2 * (NL * 7 + 2)];
    float *tmp[NL * 2 + 1] = {0};
    int n = 0, nt = 0;
    for (int l = 0; l < NL; l++)
        for (int s = 0; s < 7; s++) {
            const mat *m = &ad->w[l][s];
            const float *b = m->b;
            if (s <= 1) b = tmp[nt++] = unpermute(m, s == 0 ? NH : NKV);
            snprintf(t[n].name, 128, "base_model.model.model.layers.%d.%s.lora_A.weight", l, slot_hf[s]);
            t[n].rows = m->r; t[n].cols = m->in; t[n++].data = m->a;
            snprintf(t[n].name, 128, "base_model.model.model.layers.%d.%s.lora_B.weight", l, slot_hf[s]);
            t[n].rows = m->out; t[n].cols = m->r; t[n++].data = b;
        }
    snprintf(t[n].name, 128, "base_model.model.lm_head.lora_A.weight");
    t[n].rows = r; t[n].cols = D; t[n++].data = ad->output.a;
    snprintf(t[n].name, 128, "base_model.model.lm_head.lora_B.weight");
    t[n].rows = NV; t[n].cols = r; t[n++].data = ad->output.b;
    /* PEFT's embedding pair: lora_embedding_A (r, vocab) = llama.cpp's lora_a transposed */
    float *at = tmp[nt++] = malloc(sizeof(float) * NV * r);
    for (int v = 0; v < NV; v++)
        for (int k = 0; k < r; k++) at[k * NV + v] = ad->embd.a[v * r + k];
    snprintf(t[n].name, 128, "base_model.model.model.embed_tokens.lora_embedding_A");
    t[n].rows = r; t[n].cols = NV; t[n++].data = at;
    snprintf(t[n].name, 128, "base_model.model.model.embed_tokens.lora_embedding_B");
    t[n].rows = D; t[n].cols = r; t[n++].data = ad->embd.b;
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    write_safetensors(p, t, n);
    for (int i = 0; i < nt; i++) free(tmp[i]);
}

static const int32_t g_tok[NTOK] = { 1, 17, 300, 42, 511, 7, 260, 99, 128, 3, 450, 64 };

/* Logits (NTOK, NV) of g_tok on sequence 0 from scratch: a batch of NPRE,
 * then one token at a time. */
static bool run(hx_context *c, float *out) {
    hx_error e = {0};
    hx_seq_clear(c, 0);
    hx_batch b = hx_batch_init(NTOK);
    for (int i = 0; i < NPRE; i++) hx_batch_add(&b, g_tok[i], i, 0, true);
    bool ok = hx_decode(c, &b, &e) == HX_OK;
    for (int i = 0; ok && i < NPRE; i++) memcpy(out + (size_t)i * NV, hx_get_logits(c, i), sizeof(float) * NV);
    for (int i = NPRE; ok && i < NTOK; i++) {
        hx_batch_clear(&b);
        hx_batch_add(&b, g_tok[i], i, 0, true);
        ok = hx_decode(c, &b, &e) == HX_OK;
        if (ok) memcpy(out + (size_t)i * NV, hx_get_logits(c, 0), sizeof(float) * NV);
    }
    if (!ok) fprintf(stderr, "decode: %s\n", e.msg);
    hx_batch_free(&b);
    return ok;
}

static double max_diff(const float *a, const float *b) {
    double m = 0;
    for (int i = 0; i < NTOK * NV; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

static hx_model *open_model(const char *path) {
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    hx_model *m = NULL;
    hx_error e = {0};
    if (hx_model_open(path, &mp, &m, &e)) { fprintf(stderr, "open %s: %s\n", path, e.msg); exit(1); }
    return m;
}

static hx_context *new_ctx(hx_model *m) {
    hx_context_params cp = hx_context_default_params();
    cp.n_ctx = 64; cp.n_threads = 2; cp.exact = true; cp.kv_f32 = true;
    hx_context *c = NULL;
    hx_error e = {0};
    if (hx_context_new(m, &cp, &c, &e)) { fprintf(stderr, "context: %s\n", e.msg); exit(1); }
    return c;
}

/* Logits of a model merged from base with the adapters (f32 matrices). */
static void merged_logits(const char *base, const char *const *ads, const float *sc, int n, const char *out, float *lg) {
    hx_error e = {0};
    hx_status st = hx_lora_merge(base, ads, sc, n, true, out, &e);
    CHECKF(st == HX_OK, "merge: %s", e.msg);
    if (st) exit(1);
    hx_model *m = open_model(out);
    hx_context *c = new_ctx(m);
    CHECK(run(c, lg));
    hx_context_free(c);
    hx_model_free(m);
}

/* The numbers of "top2" in the JSON that cmd prints (at most 16). */
static int top2_of(const char *cmd, double *v) {
    FILE *f = popen(cmd, "r");
    if (!f) return 0;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    pclose(f);
    const char *p = strstr(buf, "\"top2\":");
    int k = 0;
    if (!p) return 0;
    p += 7;
    while (*p && k < 16) {
        if (*p == ']' && p[1] == ']') break;
        if ((*p >= '0' && *p <= '9') || *p == '-') {
            char *end;
            v[k++] = strtod(p, &end);
            p = end;
        } else p++;
    }
    return k;
}

/* Opening path against m fails with status want and a message containing what. */
static void expect_fail(hx_model *m, const char *path, hx_status want, const char *what) {
    hx_error e = {0};
    hx_adapter *a = NULL;
    hx_status st = hx_adapter_open(m, path, &a, &e);
    CHECKF(st == want && strstr(e.msg, what), "%s: status %d (want %d), message '%s' (want '%s')", path, st, want, e.msg, what);
    hx_adapter_free(a);
}

/* ---- optional: PEFT adapters made by tests/lora_peft.py against transformers+PEFT in float64 ---- */

static float *read_f32(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *p = malloc((size_t)sz);
    *n = fread(p, 1, (size_t)sz, f) / sizeof(float);
    fclose(f);
    return p;
}

/* Logits of every id (n x V) with adapter a (NULL: none) on model m. */
static float *peft_logits(hx_model *m, hx_adapter *a, const int32_t *ids, int n) {
    hx_context *c = new_ctx(m);
    hx_error e = {0};
    float one = 1.0f;
    int V = hx_model_n_vocab(m);
    float *out = malloc(sizeof(float) * (size_t)n * V);
    hx_batch b = hx_batch_init(n);
    for (int i = 0; i < n; i++) hx_batch_add(&b, ids[i], i, 0, true);
    bool ok = (!a || hx_context_set_adapters(c, &a, &one, 1, &e) == HX_OK) && hx_decode(c, &b, &e) == HX_OK;
    CHECKF(ok, "%s", e.msg);
    for (int i = 0; ok && i < n; i++) memcpy(out + (size_t)i * V, hx_get_logits(c, i), sizeof(float) * V);
    hx_batch_free(&b);
    hx_context_free(c);
    if (!ok) { free(out); return NULL; }
    return out;
}

static void peft_check(const char *dir) {
    const char *names[] = { "llama", "qwen2", "qwen3", "gemma3" };
    for (int k = 0; k < 4; k++) {
        char p[600], *txt = NULL;
        size_t len = 0, nref = 0;
        hx_error e = {0};
        snprintf(p, sizeof p, "%s/%s.lora.json", dir, names[k]);
        if (hx_read_file(p, &txt, &len, &e)) { CHECKF(0, "%s", e.msg); continue; }
        int32_t ids[64];
        int n = 0;
        const char *q = strstr(txt, "\"ids\"");
        q = q ? strchr(q, '[') : NULL;
        while (q && *q != ']' && n < 64) {
            char *end;
            long v = strtol(q + 1, &end, 10);
            if (end == q + 1) break;
            ids[n++] = (int32_t)v;
            q = end;
        }
        free(txt);
        snprintf(p, sizeof p, "%s/%s.lora.f32", dir, names[k]);
        float *ref = read_f32(p, &nref);
        snprintf(p, sizeof p, "%s/%s", dir, names[k]);
        hx_model *m = open_model(p);
        int V = hx_model_n_vocab(m);
        CHECKF(ref && n > 0 && nref == (size_t)n * V, "%s: %zu reference logits for %d ids x %d", names[k], nref, n, V);
        hx_adapter *a = NULL, *g = NULL;
        snprintf(p, sizeof p, "%s/%s.lora", dir, names[k]);
        CHECKF(hx_adapter_open(m, p, &a, &e) == HX_OK, "%s", e.msg);
        char conv[600];
        snprintf(conv, sizeof conv, "%s/%s.lora.gguf", dir, names[k]);
        if (a) CHECKF(hx_lora_write_gguf(a, conv, &e) == HX_OK && hx_adapter_open(m, conv, &g, &e) == HX_OK, "%s", e.msg);
        for (int which = 0; which < 2 && ref && nref == (size_t)n * V; which++) {
            hx_adapter *use = which ? g : a;
            if (!use) continue;
            float *lg = peft_logits(m, use, ids, n);
            double err = 0, mag = 0;
            for (size_t i = 0; lg && i < nref; i++) { err = fmax(err, fabs((double)lg[i] - ref[i])); mag = fmax(mag, fabs(ref[i])); }
            printf("PEFT %s (%s): max |helix - transformers+PEFT f64| = %.3g (logits up to %.3g)\n", names[k],
                   which ? "converted GGUF" : "PEFT folder", err, mag);
            CHECKF(lg && err < 1e-4 * fmax(1.0, mag / 10), "%s: %g", names[k], err);
            free(lg);
        }
        hx_adapter_free(a);
        hx_adapter_free(g);
        hx_model_free(m);
        free(ref);
    }
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/hx_lora_%d", (int)getpid());
    mkdir(g_dir, 0755);
    char base[300], p1[300], p2[300], mg[300], peft[300], conv[300], bad[300];
    snprintf(base, sizeof base, "%s/base.gguf", g_dir);
    snprintf(p1, sizeof p1, "%s/a1.gguf", g_dir);
    snprintf(p2, sizeof p2, "%s/a2.gguf", g_dir);
    snprintf(mg, sizeof mg, "%s/merged.gguf", g_dir);
    snprintf(peft, sizeof peft, "%s/peft", g_dir);
    snprintf(conv, sizeof conv, "%s/converted.gguf", g_dir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", g_dir);

    hx_preset pr = { "lora-tiny", HX_ARCH_LLAMA, D, NL, NH, NKV, HD, FF, NV, 256, 10000.f, 0, 1e-5f, false, 0, "default" };
    hx_synth_opts so = { .preset = &pr, .mix = HX_MIX_F32, .seed = 7, .n_threads = 1 };
    hx_error e = {0};
    if (hx_synth_write(&so, base, &e)) { fprintf(stderr, "synth: %s\n", e.msg); return 1; }

    static adapter a1, a2;
    a1.alpha = 8.0f;
    for (int l = 0; l < NL; l++)
        for (int s = 0; s < 7; s++) mat_rand(&a1.w[l][s], 4, slot_in[s], slot_out[s]);
    mat_rand(&a1.output, 4, D, NV);
    a1.embd.r = 4; a1.embd.in = NV; a1.embd.out = D;
    a1.embd.a = malloc(sizeof(float) * NV * 4);
    a1.embd.b = malloc(sizeof(float) * D * 4);
    for (int i = 0; i < NV * 4; i++) a1.embd.a[i] = frand();
    for (int i = 0; i < D * 4; i++) a1.embd.b[i] = frand();
    a2.alpha = 0.0f;
    mat_rand(&a2.w[1][0], 2, slot_in[0], slot_out[0]);
    mat_rand(&a2.w[1][2], 2, slot_in[2], slot_out[2]);
    mat_rand(&a2.w[1][6], 2, slot_in[6], slot_out[6]);
    write_adapter(&a1, p1);
    write_adapter(&a2, p2);

    static float L0[NTOK * NV], L[NTOK * NV], M[NTOK * NV];
    hx_model *m = open_model(base);
    hx_context *c = new_ctx(m);
    CHECK(run(c, L0));

    hx_adapter *ad1 = NULL, *ad2 = NULL;
    CHECKF(hx_adapter_open(m, p1, &ad1, &e) == HX_OK, "%s", e.msg);
    CHECKF(hx_adapter_open(m, p2, &ad2, &e) == HX_OK, "%s", e.msg);
    if (!ad1 || !ad2) return t_done("test_lora");
    CHECK(hx_adapter_n_weights(ad1) == NL * 7 + 2);
    CHECK(hx_adapter_n_weights(ad2) == 3);

    /* the merge itself, one matrix: blk.1.ffn_down += (alpha/r) * B A, in f64 here */
    {
        const char *one[1] = { p1 };
        float s1 = 1.0f;
        CHECKF(hx_lora_merge(base, one, &s1, 1, true, mg, &e) == HX_OK, "%s", e.msg);
        hx_gguf *gb = NULL, *gm = NULL;
        CHECK(hx_gguf_open(base, NULL, &gb, &e) == HX_OK && hx_gguf_open(mg, NULL, &gm, &e) == HX_OK);
        const hx_gguf_tensor *tb = gb ? hx_gguf_find_tensor(gb, "blk.1.ffn_down.weight") : NULL;
        const hx_gguf_tensor *tm = gm ? hx_gguf_find_tensor(gm, "blk.1.ffn_down.weight") : NULL;
        CHECK(tb && tm && tm->type == HX_TYPE_F32 && tm->ne[0] == FF && tm->ne[1] == D);
        double worst = 0;
        const mat *w = &a1.w[1][6];
        for (int o = 0; tb && tm && o < D; o++)
            for (int i = 0; i < FF; i++) {
                double d = 0;
                for (int k = 0; k < w->r; k++) d += (double)w->b[o * w->r + k] * w->a[k * FF + i];
                double want = ((const float *)tb->data)[o * FF + i] + 2.0 * d;
                worst = fmax(worst, fabs(want - ((const float *)tm->data)[o * FF + i]));
            }
        CHECKF(worst < 1e-6, "merged ffn_down off by %g", worst);
        hx_gguf_close(gb);
        hx_gguf_close(gm);
    }

    /* A1 at scale 1 against the merged model */
    float s1 = 1.0f;
    CHECKF(hx_context_set_adapters(c, &ad1, &s1, 1, &e) == HX_OK, "%s", e.msg);
    CHECK(run(c, L));
    {
        const char *one[1] = { p1 };
        merged_logits(base, one, &s1, 1, mg, M);
    }
    double d_merge = max_diff(L, M), d_base = max_diff(L, L0);
    printf("A1: max |adapter - merged| = %.3g, max |adapter - base| = %.3g\n", d_merge, d_base);
    CHECKF(d_merge < 1e-4, "%g", d_merge);
    CHECKF(d_base > 1e-2, "the adapter changes nothing (%g)", d_base);

    /* scale 0: the base, bit for bit */
    float s0 = 0.0f;
    CHECK(hx_context_set_adapters(c, &ad1, &s0, 1, &e) == HX_OK);
    CHECK(run(c, L));
    CHECK(memcmp(L, L0, sizeof L) == 0);

    /* two adapters with their own scales */
    hx_adapter *both[2] = { ad1, ad2 };
    float sc[2] = { 0.5f, 2.0f };
    CHECK(hx_context_set_adapters(c, both, sc, 2, &e) == HX_OK);
    CHECK(run(c, L));
    {
        const char *two[2] = { p1, p2 };
        merged_logits(base, two, sc, 2, mg, M);
    }
    d_merge = max_diff(L, M);
    printf("A1*0.5 + A2*2: max |adapters - merged| = %.3g\n", d_merge);
    CHECKF(d_merge < 1e-4, "%g", d_merge);

    /* hx_adapter_free while set: the context keeps it */
    hx_adapter_free(ad2);
    ad2 = NULL;
    CHECK(run(c, M));
    CHECK(memcmp(L, M, sizeof L) == 0);

    /* removed: the base again, bit for bit */
    CHECK(hx_context_set_adapters(c, NULL, NULL, 0, &e) == HX_OK);
    CHECK(run(c, L));
    CHECK(memcmp(L, L0, sizeof L) == 0);

    /* a PEFT folder with A1's numbers, and its GGUF conversion */
    static float LA1[NTOK * NV];
    CHECK(hx_context_set_adapters(c, &ad1, &s1, 1, &e) == HX_OK);
    CHECK(run(c, LA1));
    write_peft(&a1, peft, 4);
    hx_adapter *ap = NULL, *ac = NULL;
    CHECKF(hx_adapter_open(m, peft, &ap, &e) == HX_OK, "%s", e.msg);
    if (ap) {
        CHECK(hx_context_set_adapters(c, &ap, &s1, 1, &e) == HX_OK);
        CHECK(run(c, L));
        double d = max_diff(L, LA1);
        printf("PEFT folder vs GGUF adapter: %.3g\n", d);
        CHECKF(d < 1e-6, "%g", d);
        CHECKF(hx_lora_write_gguf(ap, conv, &e) == HX_OK, "%s", e.msg);
        CHECKF(hx_adapter_open(m, conv, &ac, &e) == HX_OK, "%s", e.msg);
    }
    if (ac) {
        CHECK(hx_context_set_adapters(c, &ac, &s1, 1, &e) == HX_OK);
        CHECK(run(c, L));
        CHECK(max_diff(L, LA1) < 1e-6);
    }
    hx_adapter_free(ap);
    hx_adapter_free(ac);

    /* the CLI: lora-convert and lora-merge give what the library gives */
    const char *bin = getenv("HX_BIN");
    if (bin && *bin) {
        char cmd[2048], conv2[300], mg2[300];
        snprintf(conv2, sizeof conv2, "%s/cli-conv.gguf", g_dir);
        snprintf(mg2, sizeof mg2, "%s/cli-merged.gguf", g_dir);
        snprintf(cmd, sizeof cmd, "'%s' lora-convert '%s' -m '%s' -o '%s' 2>/dev/null", bin, peft, base, conv2);
        CHECK(system(cmd) == 0);
        hx_adapter *a3 = NULL;
        CHECKF(hx_adapter_open(m, conv2, &a3, &e) == HX_OK, "%s", e.msg);
        if (a3) {
            CHECK(hx_context_set_adapters(c, &a3, &s1, 1, &e) == HX_OK);
            CHECK(run(c, L));
            CHECK(max_diff(L, LA1) < 1e-6);
        }
        hx_adapter_free(a3);
        snprintf(cmd, sizeof cmd, "'%s' lora-merge -m '%s' --lora '%s' --scale 0.5 --lora-scaled '%s' 2 --f32 -o '%s' 2>/dev/null",
                 bin, base, p1, p2, mg2);
        CHECK(system(cmd) == 0);
        hx_model *mm = open_model(mg2);
        hx_context *cm = new_ctx(mm);
        CHECK(run(cm, M));
        hx_context_free(cm);
        hx_model_free(mm);
        hx_adapter *pair[2] = { ad1, NULL };
        CHECK(hx_adapter_open(m, p2, &pair[1], &e) == HX_OK);
        CHECK(pair[1] && hx_context_set_adapters(c, pair, sc, 2, &e) == HX_OK);
        CHECK(run(c, L));
        hx_adapter_free(pair[1]);
        d_merge = max_diff(L, M);
        printf("CLI lora-merge (0.5, 2): max |adapters - merged| = %.3g\n", d_merge);
        CHECKF(d_merge < 1e-4, "%g", d_merge);
        /* generate --lora / --lora-scaled: the two adapters against the merged model, logits of 4 steps */
        double ta[16], tm[16], t0[16];
        snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' --prompt-ids 1,17,300,42 -n 4 --exact --kv f32 -t 2 --json --top2 "
                 "--lora-scaled '%s' 0.5 --lora-scaled '%s' 2 2>/dev/null", bin, base, p1, p2);
        int na = top2_of(cmd, ta);
        snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' --prompt-ids 1,17,300,42 -n 4 --exact --kv f32 -t 2 --json --top2 "
                 "2>/dev/null", bin, mg2);
        int nm = top2_of(cmd, tm);
        snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' --prompt-ids 1,17,300,42 -n 4 --exact --kv f32 -t 2 --json --top2 "
                 "--lora '%s' --lora-scaled '%s' 0 2>/dev/null", bin, base, p1, p1);
        int n1 = top2_of(cmd, t0);
        CHECKF(na == 16 && nm == 16 && n1 == 16, "top2 values: %d %d %d", na, nm, n1);
        double dg = 0;
        for (int i = 0; i < 16 && na == 16 && nm == 16; i++) dg = fmax(dg, fabs(ta[i] - tm[i]));
        printf("CLI generate --lora-scaled x2 vs merged: max top2 difference %.3g\n", dg);
        CHECKF(na == 16 && dg < 1e-3, "%g", dg);
        snprintf(cmd, sizeof cmd, "'%s' generate -m '%s' --prompt-ids 1 --lora-scaled '%s' 2>/dev/null", bin, base, p1);
        CHECK(WEXITSTATUS(system(cmd)) == 2);
        snprintf(cmd, sizeof cmd, "'%s' lora-merge -m '%s' --lora-scaled '%s' x -o '%s' 2>/dev/null", bin, base, p1, mg2);
        CHECK(WEXITSTATUS(system(cmd)) == 2);
        snprintf(cmd, sizeof cmd, "'%s' lora-merge -m '%s' --lora '%s/none.gguf' -o '%s' 2>/dev/null", bin, base, g_dir, mg2);
        CHECK(WEXITSTATUS(system(cmd)) == 1);
        snprintf(cmd, sizeof cmd, "'%s' lora-convert '%s' -o '%s' 2>/dev/null", bin, peft, conv2);
        CHECK(WEXITSTATUS(system(cmd)) == 2);
    } else {
        printf("note: HX_BIN not set, the CLI checks are skipped\n");
    }

    /* a Q8_0 base: the merge requantizes every adapted matrix to Q8_0, and its
     * logits land near the adapter's (quantization noise), far from the base's */
    {
        char q8[300], q8m[300];
        snprintf(q8, sizeof q8, "%s/base-q8.gguf", g_dir);
        snprintf(q8m, sizeof q8m, "%s/merged-q8.gguf", g_dir);
        hx_synth_opts sq = so;
        sq.mix = HX_MIX_Q8_0;
        CHECKF(hx_synth_write(&sq, q8, &e) == HX_OK, "%s", e.msg);
        const char *one[1] = { p1 };
        CHECKF(hx_lora_merge(q8, one, &s1, 1, false, q8m, &e) == HX_OK, "%s", e.msg);
        hx_gguf *gb = NULL, *gm = NULL;
        CHECK(hx_gguf_open(q8, NULL, &gb, &e) == HX_OK && hx_gguf_open(q8m, NULL, &gm, &e) == HX_OK);
        for (uint64_t i = 0; gb && gm && i < gb->n_tensors; i++) {
            char nm[128];
            snprintf(nm, sizeof nm, "%.*s", (int)gb->tensors[i].name.len, gb->tensors[i].name.ptr);
            const hx_gguf_tensor *t = hx_gguf_find_tensor(gm, nm);
            CHECKF(t && t->type == gb->tensors[i].type, "%s: type changed", nm);
        }
        hx_gguf_close(gb);
        hx_gguf_close(gm);
        static float Q0[NTOK * NV], QA[NTOK * NV], QM[NTOK * NV];
        hx_model *mq = open_model(q8), *mqm = open_model(q8m);
        hx_context *cq = new_ctx(mq), *cqm = new_ctx(mqm);
        hx_adapter *aq = NULL;
        CHECKF(hx_adapter_open(mq, p1, &aq, &e) == HX_OK, "%s", e.msg);
        CHECK(run(cq, Q0));
        CHECK(aq && hx_context_set_adapters(cq, &aq, &s1, 1, &e) == HX_OK);
        CHECK(run(cq, QA));
        CHECK(run(cqm, QM));
        double dm = max_diff(QM, QA), db = max_diff(Q0, QA);
        printf("Q8_0 base: max |merged - adapter| = %.3g, |base - adapter| = %.3g\n", dm, db);
        CHECKF(dm < 0.2 * db, "%g vs %g", dm, db);
        hx_adapter_free(aq);
        hx_context_free(cq); hx_context_free(cqm);
        hx_model_free(mq); hx_model_free(mqm);
    }

    /* bad input */
    expect_fail(m, base, HX_ERR_FORMAT, "general.type");
    {
        adapter b = a2;
        mat wrong = b.w[1][2];
        wrong.out = NKV * HD + 2; /* lora_b one row pair too many for attn_v */
        wrong.b = calloc((size_t)wrong.out * wrong.r, sizeof(float));
        b.w[1][2] = wrong;
        write_adapter(&b, bad);
        expect_fail(m, bad, HX_ERR_FORMAT, "blk.1.attn_v.weight");
        free(wrong.b);
    }
    {
        hx_gguf_writer *w = hx_gguf_writer_new(0);
        hx_gguf_writer_set_str(w, "general.type", "adapter");
        hx_gguf_writer_set_str(w, "adapter.type", "lora");
        int64_t ne[2] = { D, 4 };
        hx_gguf_writer_add_tensor(w, "blk.0.attn_q.weight.lora_a", HX_TYPE_F32, 2, ne, a1.w[0][0].a);
        CHECK(hx_gguf_writer_write(w, bad, &e) == HX_OK);
        hx_gguf_writer_free(w);
        expect_fail(m, bad, HX_ERR_FORMAT, "blk.0.attn_q.weight.lora_b");
    }
    expect_fail(m, "/nonexistent/adapter.gguf", HX_ERR_IO, "/nonexistent/adapter.gguf");
    CHECK(hx_context_set_adapters(c, &ad1, &s0, -1, &e) == HX_ERR_ARG);
    float nan_s = NAN;
    CHECK(hx_context_set_adapters(c, &ad1, &nan_s, 1, &e) == HX_ERR_ARG);
    {
        hx_model *m2 = open_model(base);
        hx_context *c2 = new_ctx(m2);
        CHECK(hx_context_set_adapters(c2, &ad1, &s1, 1, &e) == HX_ERR_ARG && strstr(e.msg, "another model"));
        hx_context_free(c2);
        hx_model_free(m2);
    }

    hx_context_free(c);
    hx_adapter_free(ad1);
    hx_model_free(m);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    for (int l = 0; l < NL; l++)
        for (int s = 0; s < 7; s++) { free(a1.w[l][s].a); free(a1.w[l][s].b); free(a2.w[l][s].a); free(a2.w[l][s].b); }
    free(a1.output.a); free(a1.output.b); free(a1.embd.a); free(a1.embd.b);
    const char *pd = getenv("HX_LORA_PEFT");
    if (pd && *pd) peft_check(pd);
    else printf("note: the PEFT comparison runs from tests/lora_peft.sh (HX_LORA_PEFT not set)\n");
    return t_done("test_lora");
}
