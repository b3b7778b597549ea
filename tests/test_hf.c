/* test_hf.c — Hugging Face folders for decoders (src/model/hf.c).
 *
 * (a) Always: hand-written safetensors folders check the loader's contract:
 *     sharded index, BF16 data, gemma's (1 + w) norms, tied output, rope /
 *     sliding-window config parsing, quantize-on-load types, and clear errors
 *     for bad folders (missing tensor, wrong shape, unsupported dtype, a shard
 *     name that leaves the folder, data past the end of the file).
 * (c) With ../shared: the tiny qwen3 / llama3 / gemma3 GGUFs turned back into
 *     the HF folders llama.cpp's converter made them from (Q/K rows
 *     un-permuted, gemma norms minus 1, transformers-4 style config) load and
 *     reproduce the transformers float64 refs (last logits within 1e-3, 32
 *     greedy ids) and the GGUF's own logits within 1e-4; folders holding
 *     the real qwen3 / llama3 / gemma3 tokenizer.json (+ tokenizer_config)
 *     and llama2's tokenizer.model give their special ids, add_bos and chat
 *     template family.
 * (b) With HX_HF_TINY=DIR (tests/hf_decoders.sh makes DIR with transformers,
 *     tests/hf_make_tiny.py): for each of llama, qwen2, qwen3, gemma3 the
 *     folder loads, the exact-mode CPU forward (f32 KV) matches transformers'
 *     float64 last-position logits within 1e-4 (max abs; f32 math on the
 *     stored weights lands near 1e-6), the argmax at every
 *     prompt position and 16 greedy ids exactly; the folder's tokenizer gives
 *     transformers' ids for a text (specials added) and carries a chat template;
 *     quantize-on-load q8_0 keeps the first greedy id unless it is a near-tie,
 *     and q4_k_m picks llama.cpp's fallback types for rows of 64 (Q5_0, Q8_0
 *     for the Q6_K tensors).
 */
#include "test_util.h"

#include <cjson/cJSON.h>
#include <unistd.h>

#include "backend/cpu/forward.h"
#include "core/core.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tok/chat.h"
#include "tok/tok.h"

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static char *slurp(const char *path, size_t *n) {
    char *s = NULL;
    hx_error e = {0};
    if (hx_read_file(path, &s, n, &e) != HX_OK) return NULL;
    return s;
}

/* ---------------------------------------------------------------- (a) */

/* A safetensors writer for the tests: tensors given as (name, dtype, rows, cols, data). */
typedef struct { const char *name, *dtype; int64_t rows, cols; const void *data; } st_t;

static size_t dtype_size(const char *d) { return !strcmp(d, "F32") ? 4 : 2; }

static void write_st(const char *path, const st_t *t, int n, int64_t corrupt_end) {
    cJSON *h = cJSON_CreateObject();
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_AddObjectToObject(h, t[i].name);
        cJSON_AddStringToObject(o, "dtype", t[i].dtype);
        cJSON *sh = cJSON_AddArrayToObject(o, "shape");
        if (t[i].rows) cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].rows));
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)t[i].cols));
        size_t bytes = dtype_size(t[i].dtype) * (size_t)(t[i].rows ? t[i].rows : 1) * (size_t)t[i].cols;
        cJSON *of = cJSON_AddArrayToObject(o, "data_offsets");
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(of, cJSON_CreateNumber((double)(off + bytes + (i == n - 1 ? corrupt_end : 0))));
        off += bytes;
    }
    char *js = cJSON_PrintUnformatted(h);
    size_t hl = strlen(js), pad = (8 - hl % 8) % 8;
    FILE *f = fopen(path, "wb");
    uint64_t hlen = hl + pad;
    fwrite(&hlen, 8, 1, f);
    fwrite(js, 1, hl, f);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    for (int i = 0; i < n; i++)
        fwrite(t[i].data, dtype_size(t[i].dtype), (size_t)(t[i].rows ? t[i].rows : 1) * (size_t)t[i].cols, f);
    fclose(f);
    free(js);
    cJSON_Delete(h);
}

static void write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    fputs(s, f);
    fclose(f);
}

/* D=8, heads 2 (kv 1), head_dim 4, ff 16, vocab 10, 2 layers; values i * 0.01 etc. */
enum { D = 8, HD = 4, NH = 2, KVH = 1, FF = 16, V = 10, NL = 2 };
static float g_big[V * D], g_sq[FF * D], g_q[NH * HD * D], g_kv[KVH * HD * D], g_o[D * NH * HD], g_down[D * FF];
static float g_norm[D], g_hn[HD];
static uint16_t g_bf[V * D];

typedef struct { uint64_t done, total; int calls; bool monotonic; } prog_t;
static void on_progress(void *user, uint64_t done, uint64_t total) {
    prog_t *p = user;
    p->monotonic &= done >= p->done && done <= total;
    p->done = done; p->total = total; p->calls++;
}

static hx_status load_dir(const char *dir, const hx_hf_opts *o, hx_model **m, hx_error *e) {
    memset(e, 0, sizeof *e);
    return hx_model_load_hf_ex(dir, o, m, e);
}

/* Writes a gemma3_text or qwen3 folder: layers in model-0000{1,2}-of-00002 via an index (sharded)
 * or one model.safetensors; embedding in BF16 for gemma. */
static void write_folder(const char *dir, bool gemma, bool sharded, const char *bad) {
    char p[512];
    mkdir(dir, 0755);
    const char *cfg_g =
        "{\"model_type\":\"gemma3_text\",\"hidden_size\":8,\"intermediate_size\":16,\"num_attention_heads\":2,"
        "\"num_key_value_heads\":1,\"head_dim\":4,\"num_hidden_layers\":2,\"vocab_size\":10,\"rms_norm_eps\":1e-6,"
        "\"sliding_window\":3,\"layer_types\":[\"sliding_attention\",\"full_attention\"],"
        "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\",\"factor\":4.0,\"rope_theta\":1000000.0},"
        "\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}},"
        "\"query_pre_attn_scalar\":16,\"final_logit_softcapping\":30.0,\"attn_logit_softcapping\":null}";
    const char *cfg_q =
        "{\"model_type\":\"qwen3\",\"hidden_size\":8,\"intermediate_size\":16,\"num_attention_heads\":2,"
        "\"num_key_value_heads\":1,\"head_dim\":4,\"num_hidden_layers\":2,\"vocab_size\":10,\"rms_norm_eps\":1e-6,"
        "\"rope_theta\":5000.0,\"rope_scaling\":null,\"tie_word_embeddings\":false,\"sliding_window\":null}";
    /* bad = "mm": Gemma3ForConditionalGeneration's layout (text_config, model.language_model. names) */
    bool mm = bad && !strcmp(bad, "mm");
    const char *P = mm ? "model.language_model." : "model.";
    char cfg_mm[1024];
    snprintf(cfg_mm, sizeof cfg_mm, "{\"model_type\":\"gemma3\",\"vision_config\":{\"hidden_size\":4},\"text_config\":%s}", cfg_g);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, mm ? cfg_mm : gemma ? cfg_g : cfg_q);
    if (mm) bad = NULL;
    st_t top[4];
    int nt = 0;
    static char n_embd[64], n_norm[64];
    snprintf(n_embd, sizeof n_embd, "%sembed_tokens.weight", P);
    snprintf(n_norm, sizeof n_norm, "%snorm.weight", P);
    top[nt++] = (st_t){n_embd, gemma ? "BF16" : "F32", V, D, gemma ? (const void *)g_bf : g_big};
    top[nt++] = (st_t){n_norm, "F32", 0, D, g_norm};
    if (!gemma) top[nt++] = (st_t){"lm_head.weight", "F32", V, D, g_big};
    st_t lay[NL][16];
    char names[NL][16][96];
    int nl[NL] = {0};
    for (int l = 0; l < NL; l++) {
#define T(nm, dt, r, c, d) do { snprintf(names[l][nl[l]], 96, "%slayers.%d.%s", P, l, nm); \
        lay[l][nl[l]] = (st_t){names[l][nl[l]], dt, r, c, d}; nl[l]++; } while (0)
        T("input_layernorm.weight", "F32", 0, D, g_norm);
        T("self_attn.q_proj.weight", "F32", NH * HD, D, g_q);
        T("self_attn.k_proj.weight", "F32", KVH * HD, D, g_kv);
        T("self_attn.v_proj.weight", "F32", KVH * HD, D, g_kv);
        T("self_attn.o_proj.weight", "F32", D, NH * HD, g_o);
        T("self_attn.q_norm.weight", "F32", 0, HD, g_hn);
        T("self_attn.k_norm.weight", "F32", 0, HD, g_hn);
        T("post_attention_layernorm.weight", "F32", 0, D, g_norm);
        if (gemma) {
            T("pre_feedforward_layernorm.weight", "F32", 0, D, g_norm);
            T("post_feedforward_layernorm.weight", "F32", 0, D, g_norm);
        }
        T("mlp.gate_proj.weight", "F32", FF, D, g_sq);
        T("mlp.up_proj.weight", "F32", FF, D, g_sq);
        T("mlp.down_proj.weight", bad && !strcmp(bad, "dtype") && l == 1 ? "F8_E4M3" : "F32", D,
          bad && !strcmp(bad, "shape") && l == 1 ? FF / 2 : FF, g_down);
#undef T
    }
    if (bad && !strcmp(bad, "missing")) nl[1]--;  /* drops layer 1's down_proj */
    if (!sharded) {
        st_t all[40];
        int n = 0;
        for (int i = 0; i < nt; i++) all[n++] = top[i];
        for (int l = 0; l < NL; l++) for (int i = 0; i < nl[l]; i++) all[n++] = lay[l][i];
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        write_st(p, all, n, bad && !strcmp(bad, "past_end") ? 64 : 0);
        return;
    }
    st_t s1[20];
    int n1 = 0;
    for (int i = 0; i < nt; i++) s1[n1++] = top[i];
    for (int i = 0; i < nl[0]; i++) s1[n1++] = lay[0][i];
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    write_st(p, s1, n1, 0);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    write_st(p, lay[1], nl[1], 0);
    cJSON *idx = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(idx, "weight_map");
    for (int i = 0; i < n1; i++) cJSON_AddStringToObject(wm, s1[i].name, "model-00001-of-00002.safetensors");
    for (int i = 0; i < nl[1]; i++)
        cJSON_AddStringToObject(wm, lay[1][i].name, bad && !strcmp(bad, "escape") ? "../model-00002-of-00002.safetensors"
                                                                               : "model-00002-of-00002.safetensors");
    char *js = cJSON_Print(idx);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_text(p, js);
    free(js);
    cJSON_Delete(idx);
}

static void rm_folder(const char *dir) {
    const char *files[] = {"config.json", "model.safetensors", "model-00001-of-00002.safetensors",
                           "model-00002-of-00002.safetensors", "model.safetensors.index.json"};
    char p[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) { snprintf(p, sizeof p, "%s/%s", dir, files[i]); unlink(p); }
    rmdir(dir);
}

static void test_contract(void) {
    for (int i = 0; i < V * D; i++) { g_big[i] = 0.01f * (float)(i % 37) - 0.15f; g_bf[i] = hx_fp32_to_bf16(g_big[i]); }
    for (int i = 0; i < FF * D; i++) g_sq[i] = 0.02f * (float)(i % 11) - 0.1f;
    for (int i = 0; i < NH * HD * D; i++) g_q[i] = 0.03f * (float)(i % 7) - 0.09f;
    for (int i = 0; i < KVH * HD * D; i++) g_kv[i] = 0.05f * (float)(i % 5) - 0.1f;
    for (int i = 0; i < D * NH * HD; i++) g_o[i] = 0.01f * (float)(i % 13) - 0.06f;
    for (int i = 0; i < D * FF; i++) g_down[i] = 0.015f * (float)(i % 9) - 0.06f;
    for (int i = 0; i < D; i++) g_norm[i] = 0.125f * (float)i - 0.25f;
    for (int i = 0; i < HD; i++) g_hn[i] = 0.5f - 0.25f * (float)i;
    char dir[256];
    snprintf(dir, sizeof dir, "/tmp/hx-test-hf-%d", (int)getpid());
    hx_model *m = NULL;
    hx_error e;

    /* gemma3, sharded: config, +1 norms, BF16 embedding, tied output, window and rope per layer kind */
    write_folder(dir, true, true, NULL);
    prog_t pr = {.monotonic = true};
    hx_hf_opts po = {.prefault = true, .progress = on_progress, .progress_user = &pr};
    CHECKF(load_dir(dir, &po, &m, &e) == HX_OK, "%s", e.msg);
    /* every stored byte belongs to a bound tensor here, so progress ends at the total */
    CHECKF(pr.monotonic && pr.calls > 10 && pr.done == pr.total && pr.total > 0, "progress %d calls, %llu / %llu",
           pr.calls, (unsigned long long)pr.done, (unsigned long long)pr.total);
    if (m) {
        const hx_model_config *c = &m->cfg;
        CHECK(c->arch == HX_ARCH_GEMMA3 && c->n_layer == 2 && c->n_embd == D && c->head_dim == HD && c->n_head_kv == 1);
        CHECK(c->rope_style == HX_ROPE_NEOX && c->qk_norm && c->post_norms && c->embd_scale && !c->norm_add_one);
        CHECK(c->act == HX_ACT_GELU_TANH && c->tied_output && c->n_vocab == V);
        CHECK(c->sliding_window == 3 && c->layer_is_swa[0] && !c->layer_is_swa[1]);
        CHECK_NEAR(c->rope_base, 1e6, 1e-3); CHECK_NEAR(c->rope_base_swa, 1e4, 1e-3); CHECK_NEAR(c->rope_scale, 4, 0);
        CHECK_NEAR(c->rope_scale_swa, 1, 0);  /* the sliding layers are not scaled */
        CHECK_NEAR(c->attn_scale, 0.25, 1e-7);   /* query_pre_attn_scalar 16 */
        CHECK_NEAR(c->final_logit_softcap, 30, 0); CHECK(c->attn_logit_softcap == 0);
        CHECK(m->tok_embd.type == HX_TYPE_BF16 && m->output.data == m->tok_embd.data);
        const hx_tensor *n = &m->layers[1].ffn_post_norm;
        CHECK(n->type == HX_TYPE_F32 && n->data != g_norm);
        for (int i = 0; n->data && i < D; i++) CHECK(((const float *)n->data)[i] == g_norm[i] + 1.0f);
        CHECK(m->layers[1].q_norm.data && ((const float *)m->layers[1].q_norm.data)[0] == g_hn[0] + 1.0f);
        CHECK(m->layers[1].ffn_down.type == HX_TYPE_F32 && m->layers[1].ffn_down.ne[0] == FF && m->layers[1].ffn_down.ne[1] == D);
        CHECK(((const float *)m->layers[1].ffn_down.data)[5] == g_down[5]);
        /* a forward pass runs on the loaded folder */
        hx_cpu_opts o = {.n_ctx = 16, .kv_f32 = true, .n_threads = 1};
        hx_cpu_ctx *cx = NULL;
        CHECKF(hx_cpu_ctx_new(m, &o, &cx, &e) == HX_OK, "%s", e.msg);
        int32_t toks[5] = {1, 2, 3, 4, 5};
        float lo[V];
        if (cx) CHECKF(hx_cpu_forward(cx, toks, 5, 0, lo, false, &e) == HX_OK, "%s", e.msg);
        for (int i = 0; cx && i < V; i++) CHECK(isfinite(lo[i]) && fabsf(lo[i]) <= 30.0f);
        hx_cpu_ctx_free(cx);
        hx_model_free(m); m = NULL;
    }
    rm_folder(dir);

    /* the multimodal checkpoint's language model loads the same way */
    write_folder(dir, true, false, "mm");
    CHECKF(load_dir(dir, NULL, &m, &e) == HX_OK, "%s", e.msg);
    if (m) {
        CHECK(m->cfg.arch == HX_ARCH_GEMMA3 && m->cfg.sliding_window == 3 && m->cfg.tied_output);
        CHECK(m->layers[1].ffn_post_norm.data && ((const float *)m->layers[1].ffn_post_norm.data)[2] == g_norm[2] + 1.0f);
        CHECK(m->layers[1].ffn_post_norm.name && strstr(m->layers[1].ffn_post_norm.name, "model.language_model.layers.1."));
        hx_model_free(m); m = NULL;
    }
    rm_folder(dir);

    /* qwen3, one file: untied output, rope theta, no window; quantize-on-load */
    write_folder(dir, false, false, NULL);
    CHECKF(load_dir(dir, NULL, &m, &e) == HX_OK, "%s", e.msg);
    if (m) {
        const hx_model_config *c = &m->cfg;
        CHECK(c->arch == HX_ARCH_QWEN3 && !c->tied_output && c->sliding_window == 0 && !c->layer_is_swa[0]);
        CHECK(c->rope_style == HX_ROPE_NEOX && !c->post_norms && !c->embd_scale && c->act == HX_ACT_SILU);
        CHECK_NEAR(c->rope_base, 5000, 0); CHECK_NEAR(c->rope_base_swa, 5000, 0); CHECK_NEAR(c->rope_scale, 1, 0);
        CHECK_NEAR(c->rope_scale_swa, 1, 0);
        CHECK_NEAR(c->attn_scale, 0.5, 1e-7);
        CHECK(m->layers[0].attn_norm.data == (const void *)m->layers[0].attn_norm.data && m->output.data != m->tok_embd.data);
        CHECK(((const float *)m->layers[0].ffn_norm.data)[3] == g_norm[3]);  /* no +1 outside gemma */
        hx_model_free(m); m = NULL;
    }
    /* rows of 8 / 16 elements: no 32-element blocks, so quantize-on-load keeps the stored type */
    hx_hf_opts q8 = {.quant = HX_TYPE_Q8_0};
    CHECKF(load_dir(dir, &q8, &m, &e) == HX_OK, "%s", e.msg);
    if (m) { CHECK(m->layers[0].wq.type == HX_TYPE_F32); hx_model_free(m); m = NULL; }
    hx_hf_opts bad_q = {.quant = HX_TYPE_Q5_1};
    CHECK(load_dir(dir, &bad_q, &m, &e) == HX_ERR_ARG && strstr(e.msg, "q8_0") && !m);
    /* damaged files: random byte flips in the header and truncations load or fail with a message, never crash
     * (under ASan this also checks every read stays inside the mapping) */
    {
        char sp[600];
        snprintf(sp, sizeof sp, "%s/model.safetensors", dir);
        size_t n = 0;
        char *orig = slurp(sp, &n);
        uint64_t hl = 0;
        if (orig && n > 8) memcpy(&hl, orig, 8);
        CHECK(orig && hl > 0 && hl < n);
        uint64_t x = 0x9E3779B97F4A7C15ull;
        int ok = 0, failed = 0;
        for (int it = 0; orig && it < 300; it++) {
            char *b = malloc(n);
            memcpy(b, orig, n);
            size_t len = n;
            for (int k = 0; k < 1 + it % 4; k++) {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                size_t at = (size_t)(x % (8 + hl));
                b[at] = (char)(x >> 32);
            }
            if (it % 10 == 9) len = (size_t)((x >> 20) % n);
            FILE *f = fopen(sp, "wb");
            fwrite(b, 1, len, f);
            fclose(f);
            free(b);
            hx_status st = load_dir(dir, NULL, &m, &e);
            if (st == HX_OK) { ok++; hx_model_free(m); m = NULL; }
            else { failed++; CHECKF(e.msg[0] && !m, "mutation %d: status %d without a message", it, st); }
        }
        printf("damaged safetensors: %d loaded, %d refused with a message\n", ok, failed);
        free(orig);
    }
    rm_folder(dir);

    /* bad folders: each error names the file and what is wrong */
    static const struct { const char *bad; bool sharded; hx_status st; const char *msg; } bads[] = {
        {"missing", false, HX_ERR_FORMAT, "missing tensor 'model.layers.1.mlp.down_proj.weight'"},
        {"shape", false, HX_ERR_FORMAT, "has shape [8, 8], expected [8, 16]"},
        {"dtype", true, HX_ERR_UNSUPPORTED, "dtype F8_E4M3"},
        {"escape", true, HX_ERR_FORMAT, "is not a file name in the folder"},
        {"past_end", false, HX_ERR_FORMAT, "do not fit its shape or the file"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        write_folder(dir, true, bads[i].sharded, bads[i].bad);
        hx_status st = load_dir(dir, NULL, &m, &e);
        CHECKF(st == bads[i].st && strstr(e.msg, bads[i].msg) && !m, "%s: status %d, '%s'", bads[i].bad, st, e.msg);
        rm_folder(dir);
    }
    mkdir(dir, 0755);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"model_type\":\"mamba\"}");
    CHECK(load_dir(dir, NULL, &m, &e) != HX_OK && strstr(e.msg, "model_type 'mamba'"));
    write_text(p, "{\"model_type\":\"llama\",\"hidden_size\":8,\"intermediate_size\":16,\"num_attention_heads\":2,"
                  "\"num_hidden_layers\":1,\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8.0}}");
    CHECK(load_dir(dir, NULL, &m, &e) == HX_ERR_UNSUPPORTED && strstr(e.msg, "'llama3'"));
    write_text(p, "{\"model_type\":\"llama\",\"hidden_size\":8,\"intermediate_size\":16,\"num_attention_heads\":2,"
                  "\"num_hidden_layers\":1}");
    CHECK(load_dir(dir, NULL, &m, &e) == HX_ERR_IO && strstr(e.msg, "no model.safetensors"));
    unlink(p);
    CHECK(load_dir(dir, NULL, &m, &e) == HX_ERR_IO && strstr(e.msg, "config.json"));
    rmdir(dir);
}

/* ---------------------------------------------------------------- (c) */

/* The shared tiny GGUFs were converted by llama.cpp from transformers models; undoing the converter
 * (llama's Q/K row permutation, gemma's +1 on norms) gives the HF folder they came from. Loading that
 * folder must reproduce the transformers float64 refs and the GGUF's own logits. */
typedef struct { char name[96]; const char *dtype; int64_t rows, cols; void *data; bool owned; } conv_t;

static void conv_add(conv_t *v, int *n, const char *name, const hx_tensor *t, int llama_heads, bool minus_one) {
    if (!t->data) return;
    conv_t *c = &v[(*n)++];
    snprintf(c->name, sizeof c->name, "%s", name);
    c->dtype = t->type == HX_TYPE_F16 ? "F16" : t->type == HX_TYPE_BF16 ? "BF16" : "F32";
    c->cols = t->ne[0];
    c->rows = t->ne[1] > 1 ? t->ne[1] : 0;
    c->data = (void *)t->data;
    size_t es = dtype_size(c->dtype), rb = es * (size_t)c->cols;
    if (llama_heads) {  /* GGUF row h*hd + 2j + s  <-  HF row h*hd + s*hd/2 + j */
        int64_t hd = t->ne[1] / llama_heads, half = hd / 2;
        uint8_t *o = malloc(rb * (size_t)t->ne[1]);
        for (int64_t h = 0; h < llama_heads; h++)
            for (int64_t j = 0; j < half; j++)
                for (int s = 0; s < 2; s++)
                    memcpy(o + (size_t)(h * hd + s * half + j) * rb, (const uint8_t *)t->data + (size_t)(h * hd + 2 * j + s) * rb, rb);
        c->data = o; c->owned = true;
    }
    if (minus_one) {
        float *o = malloc(sizeof(float) * (size_t)c->cols);
        hx_dequantize_row(t->type, t->data, o, c->cols);
        for (int64_t i = 0; i < c->cols; i++) o[i] -= 1.0f;
        c->data = o; c->owned = true; c->dtype = "F32";
    }
}

static bool gguf_to_hf(const hx_model *m, const char *dir) {
    const hx_model_config *c = &m->cfg;
    bool llama = c->arch == HX_ARCH_LLAMA, gemma = c->arch == HX_ARCH_GEMMA3;
    if (c->arch == HX_ARCH_QWEN2 || c->arch == HX_ARCH_BERT) return false;
    mkdir(dir, 0755);
    int cap = 8 + 20 * c->n_layer, n = 0;
    conv_t *v = calloc((size_t)cap, sizeof *v);
    conv_add(v, &n, "model.embed_tokens.weight", &m->tok_embd, 0, false);
    conv_add(v, &n, "model.norm.weight", &m->output_norm, 0, gemma);
    if (!c->tied_output) conv_add(v, &n, "lm_head.weight", &m->output, 0, false);
    for (int l = 0; l < c->n_layer; l++) {
        const hx_layer_weights *L = &m->layers[l];
        char nm[96];
#define A(t, suffix, heads, m1) do { snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix); conv_add(v, &n, nm, t, heads, m1); } while (0)
        A(&L->attn_norm, "input_layernorm.weight", 0, gemma);
        A(&L->wq, "self_attn.q_proj.weight", llama ? c->n_head : 0, false);
        A(&L->wk, "self_attn.k_proj.weight", llama ? c->n_head_kv : 0, false);
        A(&L->wv, "self_attn.v_proj.weight", 0, false);
        A(&L->wo, "self_attn.o_proj.weight", 0, false);
        A(&L->q_norm, "self_attn.q_norm.weight", 0, gemma);
        A(&L->k_norm, "self_attn.k_norm.weight", 0, gemma);
        A(&L->attn_post_norm, "post_attention_layernorm.weight", 0, gemma);
        A(&L->ffn_norm, gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight", 0, gemma);
        A(&L->ffn_post_norm, "post_feedforward_layernorm.weight", 0, gemma);
        A(&L->ffn_gate, "mlp.gate_proj.weight", 0, false);
        A(&L->ffn_up, "mlp.up_proj.weight", 0, false);
        A(&L->ffn_down, "mlp.down_proj.weight", 0, false);
#undef A
    }
    st_t *st = calloc((size_t)n, sizeof *st);
    for (int i = 0; i < n; i++) st[i] = (st_t){v[i].name, v[i].dtype, v[i].rows, v[i].cols, v[i].data};
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    write_st(p, st, n, 0);
    for (int i = 0; i < n; i++) if (v[i].owned) free(v[i].data);
    free(st); free(v);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model_type", llama ? "llama" : gemma ? "gemma3_text" : "qwen3");
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layer);
    cJSON_AddNumberToObject(j, "hidden_size", c->n_embd);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_head);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->n_head_kv);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(j, "intermediate_size", c->n_ff);
    cJSON_AddNumberToObject(j, "vocab_size", c->n_vocab);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->n_ctx_train);
    cJSON_AddNumberToObject(j, "rms_norm_eps", c->norm_eps);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_base);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tied_output);
    if (gemma) {
        cJSON_AddNumberToObject(j, "rope_local_base_freq", c->rope_base_swa);
        cJSON_AddNumberToObject(j, "sliding_window", c->sliding_window);
        cJSON_AddNumberToObject(j, "sliding_window_pattern", 6);  /* transformers 4 form: no layer_types */
        cJSON_AddNumberToObject(j, "query_pre_attn_scalar", 1.0 / ((double)c->attn_scale * c->attn_scale));
    }
    char *js = cJSON_Print(j);
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, js);
    free(js);
    cJSON_Delete(j);
    return true;
}

static void test_shared_roundtrip(const char *sh) {
    const char *names[] = {"qwen3", "llama3", "gemma3"};
    for (int k = 0; k < 3; k++) {
        char p[512], dir[256];
        snprintf(p, sizeof p, "%s/models/ref-tiny/tiny-%s-shared.gguf", sh, names[k]);
        hx_model *g = NULL, *m = NULL;
        hx_error e = {0};
        CHECKF(hx_model_load(p, NULL, &g, &e) == HX_OK, "%s: %s", p, e.msg);
        if (!g) continue;
        snprintf(dir, sizeof dir, "/tmp/hx-test-hf-rt-%d", (int)getpid());
        CHECK(gguf_to_hf(g, dir));
        CHECKF(hx_model_load_hf(dir, &m, &e) == HX_OK, "%s: %s", names[k], e.msg);
        snprintf(p, sizeof p, "%s/refs/tiny-%s-shared.refs.json", sh, names[k]);
        size_t n;
        char *js = slurp(p, &n);
        cJSON *refs = js ? cJSON_Parse(js) : NULL, *r0 = cJSON_GetArrayItem(refs, 0);
        free(js);
        int Vn = g->cfg.n_vocab;
        float *want = malloc(sizeof(float) * (size_t)Vn), *lh = malloc(sizeof(float) * (size_t)Vn), *lg = malloc(sizeof(float) * (size_t)Vn);
        snprintf(p, sizeof p, "%s/refs/tiny-%s-shared.last_logits.0.f32", sh, names[k]);
        FILE *f = fopen(p, "rb");
        CHECK(f && fread(want, sizeof(float), (size_t)Vn, f) == (size_t)Vn);
        if (f) fclose(f);
        if (m && r0) {
            CHECK(m->cfg.rope_style == HX_ROPE_NEOX && g->cfg.n_layer == m->cfg.n_layer);
            cJSON *ids = cJSON_GetObjectItem(r0, "ids"), *gr = cJSON_GetObjectItem(r0, "greedy");
            int np = cJSON_GetArraySize(ids), ng = cJSON_GetArraySize(gr);
            int32_t *toks = malloc(sizeof(int32_t) * (size_t)(np + ng));
            for (int i = 0; i < np; i++) toks[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
            hx_cpu_opts o = {.n_ctx = 128, .kv_f32 = true, .n_threads = 2};
            hx_cpu_ctx *ch = NULL, *cg = NULL;
            CHECK(hx_cpu_ctx_new(m, &o, &ch, &e) == HX_OK && hx_cpu_ctx_new(g, &o, &cg, &e) == HX_OK);
            if (ch && cg && hx_cpu_forward(ch, toks, np, 0, lh, false, &e) == HX_OK &&
                hx_cpu_forward(cg, toks, np, 0, lg, false, &e) == HX_OK) {
                double eref = 0, egg = 0;
                for (int i = 0; i < Vn; i++) { eref = fmax(eref, fabs((double)lh[i] - want[i])); egg = fmax(egg, fabs((double)lh[i] - lg[i])); }
                int same = 0;
                for (int s = 0; s < ng; s++) {
                    int got = argmax(lh, Vn);
                    if (got != (int)cJSON_GetArrayItem(gr, s)->valuedouble) break;
                    same++;
                    toks[np + s] = got;
                    if (s + 1 < ng && hx_cpu_forward(ch, &toks[np + s], 1, np + s, lh, false, &e)) break;
                }
                printf("shared %s as an HF folder: last logits max abs err %.3g to transformers, %.3g to the GGUF; greedy %d/%d\n",
                       names[k], eref, egg, same, ng);
                CHECKF(eref <= 1e-3, "%s: %g", names[k], eref);
                CHECKF(egg <= 1e-4, "%s: HF folder vs GGUF %g", names[k], egg);
                CHECKF(same == ng, "%s: greedy %d/%d", names[k], same, ng);
            } else {
                CHECKF(0, "%s: %s", names[k], e.msg);
            }
            hx_cpu_ctx_free(ch); hx_cpu_ctx_free(cg);
            free(toks);
        }
        free(want); free(lh); free(lg);
        cJSON_Delete(refs);
        hx_model_free(m); hx_model_free(g);
        snprintf(p, sizeof p, "%s/config.json", dir); unlink(p);
        snprintf(p, sizeof p, "%s/model.safetensors", dir); unlink(p);
        rmdir(dir);
    }
}

/* Folders holding the shared real tokenizers (symlinked into /tmp): special ids, add_bos, the chat
 * template's family, and an encode with specials. Expected values from transformers 5.24's
 * AutoTokenizer on the same two files (qwen3 [151644, 872], llama3 [128006, 882], gemma3 [2, 105, 2364])
 * and sentencepiece 0.2 for llama2 ("Hello" -> 15043, bos 1, eos 2); BERT's vocab.txt adds [CLS] 101
 * and [SEP] 102. */
static void test_shared_tokenizers(const char *sh) {
    static const struct {
        const char *json, *model, *config; int32_t bos, eos; bool add_bos; hx_chat_kind chat;
        const char *text; int32_t first, last;
    } cases[] = {
        {"qwen3.tokenizer.json", NULL, "qwen3.tokenizer_config.json", -1, 151645, false, HX_CHAT_CHATML,
         "<|im_start|>user", 151644, 872},
        {"llama3.tokenizer.json", NULL, "llama3.tokenizer_config.json", 128000, 128001, false, HX_CHAT_LLAMA3,
         "<|start_header_id|>user", 128006, 882},
        {"gemma3.tokenizer.json", NULL, "gemma3.tokenizer_config.json", 2, 106, true, HX_CHAT_GEMMA,
         "<start_of_turn>user", 2, 2364},
        {NULL, "llama2.tokenizer.model", NULL, 1, 2, true, HX_CHAT_UNKNOWN, "Hello", 1, 15043},
        {NULL, "bert-base-uncased.vocab.txt", NULL, 101, -1, true, HX_CHAT_UNKNOWN, "Hello world", 101, 102},
    };
    char dir[256], a[700], b[700];
    snprintf(dir, sizeof dir, "/tmp/hx-test-hf-tok-%d", (int)getpid());
    char abs_sh[512];
    if (!realpath(sh, abs_sh)) { CHECKF(0, "realpath %s", sh); return; }
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mkdir(dir, 0755);
        const char *src[2] = {cases[i].json ? cases[i].json : cases[i].model, cases[i].config};
        const char *dst[2] = {cases[i].json ? "tokenizer.json" : strstr(src[0], ".txt") ? "vocab.txt" : "tokenizer.model",
                              "tokenizer_config.json"};
        for (int k = 0; k < 2; k++) {
            if (!src[k]) continue;
            snprintf(a, sizeof a, "%s/tokenizers/%s", abs_sh, src[k]);
            snprintf(b, sizeof b, "%s/%s", dir, dst[k]);
            CHECK(symlink(a, b) == 0);
        }
        hx_tok *t = NULL;
        char *tmpl = NULL;
        hx_error e = {0};
        CHECKF(hx_hf_tokenizer_load(dir, &t, &tmpl, &e) == HX_OK, "%s: %s", src[0], e.msg);
        if (t) {
            CHECKF(hx_tok_bos(t) == cases[i].bos && hx_tok_eos(t) == cases[i].eos && hx_tok_adds_bos(t) == cases[i].add_bos,
                   "%s: bos %d eos %d add_bos %d", src[0], hx_tok_bos(t), hx_tok_eos(t), hx_tok_adds_bos(t));
            CHECKF(hx_chat_detect(tmpl) == cases[i].chat, "%s: chat template family %s", src[0], hx_chat_name(hx_chat_detect(tmpl)));
            int32_t *ids = NULL;
            size_t n = 0;
            CHECK(hx_tok_encode(t, cases[i].text, strlen(cases[i].text), true, true, &ids, &n, &e) == HX_OK);
            CHECKF(n >= 2 && ids[0] == cases[i].first && ids[n - 1] == cases[i].last, "%s: '%s' -> %zu ids, first %d, last %d",
                   src[0], cases[i].text, n, n ? ids[0] : -1, n ? ids[n - 1] : -1);
            free(ids);
        }
        free(tmpl);
        hx_tok_free(t);
        for (int k = 0; k < 2; k++) { snprintf(b, sizeof b, "%s/%s", dir, dst[k]); unlink(b); }
        rmdir(dir);
    }
    hx_tok *t = NULL;
    hx_error e = {0};
    mkdir(dir, 0755);
    CHECK(hx_hf_tokenizer_load(dir, &t, NULL, &e) == HX_ERR_IO && strstr(e.msg, "neither tokenizer.json"));
    rmdir(dir);
}

/* ---------------------------------------------------------------- (b) */

static void check_case(const char *root, const char *name) {
    char dir[512], p[600];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(p, sizeof p, "%s/%s.ref.json", root, name);
    size_t n;
    char *js = slurp(p, &n);
    cJSON *ref = js ? cJSON_Parse(js) : NULL;
    free(js);
    CHECKF(ref != NULL, "%s: cannot read", p);
    if (!ref) return;
    hx_model *m = NULL;
    hx_error e = {0};
    CHECKF(hx_model_load_any(dir, &m, &e) == HX_OK, "%s: %s", dir, e.msg);
    if (!m) { cJSON_Delete(ref); return; }
    int Vn = m->cfg.n_vocab;
    cJSON *ids = cJSON_GetObjectItem(ref, "ids"), *greedy = cJSON_GetObjectItem(ref, "greedy");
    cJSON *am = cJSON_GetObjectItem(ref, "argmax"), *gap = cJSON_GetObjectItem(ref, "gap");
    int np = cJSON_GetArraySize(ids), ng = cJSON_GetArraySize(greedy);
    int32_t *toks = calloc((size_t)(np + ng), sizeof *toks);
    for (int i = 0; i < np; i++) toks[i] = (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
    float *lo = malloc(sizeof(float) * (size_t)Vn * (size_t)np), *want = malloc(sizeof(float) * (size_t)Vn);
    snprintf(p, sizeof p, "%s/%s.last.f32", root, name);
    FILE *f = fopen(p, "rb");
    CHECKF(f && fread(want, sizeof(float), (size_t)Vn, f) == (size_t)Vn, "%s: want %d floats", p, Vn);
    if (f) fclose(f);
    hx_cpu_opts o = {.n_ctx = 64, .kv_f32 = true, .n_threads = 2};
    hx_cpu_ctx *c = NULL;
    CHECKF(hx_cpu_ctx_new(m, &o, &c, &e) == HX_OK, "%s: %s", name, e.msg);
    if (c) {
        CHECKF(hx_cpu_forward(c, toks, np, 0, lo, true, &e) == HX_OK, "%s: %s", name, e.msg);
        int bad_pos = 0;
        for (int i = 0; i < np; i++)
            bad_pos += argmax(lo + (size_t)i * Vn, Vn) != (int)cJSON_GetArrayItem(am, i)->valuedouble;
        const float *last = lo + (size_t)(np - 1) * Vn;
        double err = 0, mx = 0;
        for (int i = 0; i < Vn; i++) { err = fmax(err, fabs((double)last[i] - want[i])); mx = fmax(mx, fabs(want[i])); }
        int same = 0;
        float *step = malloc(sizeof(float) * (size_t)Vn);
        const float *cur = last;
        for (int s = 0; s < ng; s++) {
            int got = argmax(cur, Vn), w = (int)cJSON_GetArrayItem(greedy, s)->valuedouble;
            if (got != w) {
                fprintf(stderr, "%s: greedy step %d: %d, transformers %d (its top-2 gap %.3g)\n", name, s, got, w,
                        cJSON_GetArrayItem(gap, s)->valuedouble);
                break;
            }
            same++;
            toks[np + s] = got;
            if (!step || hx_cpu_forward(c, &toks[np + s], 1, np + s, step, false, &e)) break;
            cur = step;
        }
        printf("%s: %s, last logits max abs err %.3g (max |logit| %.3g), argmax %d/%d positions, greedy %d/%d\n", name,
               hx_type_name(m->layers[0].wq.type), err, mx, np - bad_pos, np, same, ng);
        free(step);
        CHECKF(err <= 1e-4, "%s: max abs err %g", name, err);
        CHECKF(bad_pos == 0, "%s: %d prompt positions with another argmax", name, bad_pos);
        CHECKF(same == ng, "%s: greedy %d/%d", name, same, ng);
        hx_cpu_ctx_free(c);
    }
    hx_model_free(m);
    m = NULL;

    /* quantize-on-load Q8_0: the prompt's next token agrees unless transformers saw a near-tie */
    hx_hf_opts q8 = {.quant = HX_TYPE_Q8_0};
    CHECKF(hx_model_load_hf_ex(dir, &q8, &m, &e) == HX_OK, "%s q8_0: %s", name, e.msg);
    if (m) {
        CHECK(m->layers[0].wq.type == HX_TYPE_Q8_0 && m->layers[0].attn_norm.type != HX_TYPE_Q8_0);
        c = NULL;
        if (hx_cpu_ctx_new(m, &o, &c, &e) == HX_OK && hx_cpu_forward(c, toks, np, 0, lo, false, &e) == HX_OK) {
            double err = 0;
            for (int i = 0; i < Vn; i++) err = fmax(err, fabs((double)lo[i] - want[i]));
            int got = argmax(lo, Vn), w = (int)cJSON_GetArrayItem(greedy, 0)->valuedouble;
            printf("%s q8_0: last logits max abs err %.3g, next token %d (transformers %d)\n", name, err, got, w);
            CHECKF(got == w || cJSON_GetArrayItem(gap, 0)->valuedouble < 0.05, "%s q8_0: next %d vs %d", name, got, w);
            CHECKF(err < 0.25, "%s q8_0: max abs err %g", name, err);
        } else {
            CHECKF(0, "%s q8_0: %s", name, e.msg);
        }
        hx_cpu_ctx_free(c);
        hx_model_free(m);
    }

    /* q4_k_m on rows of 64 (no 256-element super-blocks): Q4_K -> Q5_0, Q6_K -> Q8_0 as llama-quantize does */
    hx_hf_opts q4 = {.quant = HX_TYPE_Q4_K};
    CHECKF(hx_model_load_hf_ex(dir, &q4, &m, &e) == HX_OK, "%s q4_k_m: %s", name, e.msg);
    if (m) {
        int nl = m->cfg.n_layer;
        CHECK(m->layers[0].wq.type == HX_TYPE_Q5_0 && m->layers[0].ffn_gate.type == HX_TYPE_Q5_0);
        /* use_more_bits holds for the last layer of a model of at most 8 layers, not for layer 0 of 2 or 3 */
        CHECK(m->layers[nl - 1].wv.type == HX_TYPE_Q8_0 && m->layers[nl - 1].ffn_down.type == HX_TYPE_Q8_0);
        CHECK(m->layers[0].wv.type == HX_TYPE_Q5_0 && m->layers[0].ffn_down.type == HX_TYPE_Q5_0);
        CHECK(m->output.type == HX_TYPE_Q8_0);  /* output (or the tied embedding) */
        CHECK(m->output_norm.type != HX_TYPE_Q5_0 && m->output_norm.type != HX_TYPE_Q8_0);
        c = NULL;
        if (hx_cpu_ctx_new(m, &o, &c, &e) == HX_OK && hx_cpu_forward(c, toks, np, 0, lo, false, &e) == HX_OK) {
            double err = 0;
            for (int i = 0; i < Vn; i++) err = fmax(err, fabs((double)lo[i] - want[i]));
            printf("%s q4_k_m: last logits max abs err %.3g\n", name, err);
            CHECKF(err < 1.0, "%s q4_k_m: max abs err %g", name, err);  /* 5-bit random weights: about 0.4 */
        } else {
            CHECKF(0, "%s q4_k_m: %s", name, e.msg);
        }
        hx_cpu_ctx_free(c);
        hx_model_free(m);
    }

    /* tokenizer and chat template from the folder */
    hx_tok *t = NULL;
    char *tmpl = NULL;
    CHECKF(hx_hf_tokenizer_load(dir, &t, &tmpl, &e) == HX_OK, "%s: %s", name, e.msg);
    if (t) {
        const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(ref, "text"));
        cJSON *tid = cJSON_GetObjectItem(ref, "text_ids");
        int32_t *got = NULL;
        size_t ng2 = 0;
        CHECK(hx_tok_encode(t, text, strlen(text), true, true, &got, &ng2, &e) == HX_OK);
        bool ok = (int)ng2 == cJSON_GetArraySize(tid);
        for (size_t i = 0; ok && i < ng2; i++) ok = got[i] == (int32_t)cJSON_GetArrayItem(tid, (int)i)->valuedouble;
        if (!ok) {
            fprintf(stderr, "%s: tokenizer ids differ from transformers':", name);
            for (size_t i = 0; i < ng2; i++) fprintf(stderr, " %d", got[i]);
            fprintf(stderr, "\n");
        }
        CHECKF(ok, "%s: tokenizer", name);
        CHECKF(tmpl && strlen(tmpl) > 20, "%s: no chat template", name);
        CHECKF(hx_tok_eos(t) >= 0, "%s: no EOS", name);
        printf("%s: tokenizer %zu ids match, bos %d (add %d), eos %d, eot %d, chat template %zu bytes\n", name, ng2,
               hx_tok_bos(t), hx_tok_adds_bos(t), hx_tok_eos(t), hx_tok_eot(t), tmpl ? strlen(tmpl) : 0);
        free(got);
        free(tmpl);
        hx_tok_free(t);
    }
    free(toks); free(lo); free(want);
    cJSON_Delete(ref);
}

int main(void) {
    test_contract();
    const char *sh = t_shared_dir();
    if (sh) { test_shared_roundtrip(sh); test_shared_tokenizers(sh); }
    else printf("(c) skipped: ../shared not found (set HX_SHARED)\n");
    const char *tiny = getenv("HX_HF_TINY");
    if (tiny && *tiny) {
        const char *names[] = {"llama", "qwen2", "qwen3", "gemma3"};
        for (int i = 0; i < 4; i++) check_case(tiny, names[i]);
    } else {
        printf("(b) skipped: HX_HF_TINY not set (tests/hf_decoders.sh makes the transformers folders)\n");
    }
    printf("%d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
