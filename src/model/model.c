/* model.c — architecture config from GGUF metadata, and tensor binding.
 *
 * GGUF conventions followed here (llama.cpp's):
 * - keys are "<arch>.<name>", e.g. "qwen3.attention.head_count_kv";
 * - weight matrices are stored with ne[0] = input features (row length) and
 *   ne[1] = output features, so y = W x is a matvec over ne[1] rows;
 * - gemma3's converter stores RMSNorm weights already shifted by +1, so the
 *   norm is x * w as for llama (norm_add_one stays false);
 * - gemma3: every 6th layer (il % 6 == 5) is global with rope.freq_base, the
 *   others use a sliding window with rope.freq_base_swa (default 10000). */
#include "model/model.h"
#include "core/core.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>

const char *hx_arch_name(hx_arch a) {
    switch (a) {
    case HX_ARCH_LLAMA: return "llama";
    case HX_ARCH_QWEN2: return "qwen2";
    case HX_ARCH_QWEN3: return "qwen3";
    case HX_ARCH_GEMMA3: return "gemma3";
    case HX_ARCH_BERT: return "bert";
    }
    return "?";
}

static const struct { const char *name; hx_arch arch; } k_archs[] = {
    {"llama", HX_ARCH_LLAMA}, {"qwen2", HX_ARCH_QWEN2}, {"qwen3", HX_ARCH_QWEN3},
    {"gemma3", HX_ARCH_GEMMA3}, {"bert", HX_ARCH_BERT},
};

/* Read "<arch>.<key>" as an integer; returns false when absent. */
static bool get_int(const hx_gguf *g, const char *arch, const char *key, int64_t *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return hx_gguf_get_i64(g, full, out);
}

static bool get_f(const hx_gguf *g, const char *arch, const char *key, double *out) {
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    return hx_gguf_get_f64(g, full, out);
}

/* A required positive integer within [1, max]. */
static hx_status need_int(const hx_gguf *g, const char *arch, const char *key, int64_t max, int *out, hx_error *e) {
    int64_t v;
    if (!get_int(g, arch, key, &v))
        return hx_err(e, HX_ERR_FORMAT, "%s: missing metadata key %s.%s", g->path, arch, key);
    if (v < 1 || v > max)
        return hx_err(e, HX_ERR_FORMAT, "%s: metadata %s.%s = %lld is out of range [1, %lld]", g->path, arch, key,
                      (long long)v, (long long)max);
    *out = (int)v;
    return HX_OK;
}

hx_status hx_model_config_from_gguf(const hx_gguf *g, hx_model_config *c, hx_error *e) {
    memset(c, 0, sizeof *c);
    hx_gguf_str s;
    if (!hx_gguf_get_str(g, "general.architecture", &s))
        return hx_err(e, HX_ERR_FORMAT, "%s: missing metadata key general.architecture", g->path);
    if (s.len >= sizeof c->arch_name) s.len = sizeof c->arch_name - 1;
    memcpy(c->arch_name, s.ptr, s.len);
    c->arch_name[s.len] = 0;
    bool known = false;
    for (size_t i = 0; i < sizeof k_archs / sizeof k_archs[0]; i++)
        if (!strcmp(c->arch_name, k_archs[i].name)) { c->arch = k_archs[i].arch; known = true; }
    if (!known)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: architecture '%s' is not supported (llama, qwen2, qwen3, gemma3, bert)",
                      g->path, c->arch_name);
    if (hx_gguf_get_str(g, "general.name", &s)) {
        size_t n = s.len < sizeof c->name - 1 ? s.len : sizeof c->name - 1;
        memcpy(c->name, s.ptr, n);
        c->name[n] = 0;
    }
    const char *a = c->arch_name;
    hx_status st;
    if ((st = need_int(g, a, "block_count", HX_MAX_LAYERS, &c->n_layer, e))) return st;
    if ((st = need_int(g, a, "embedding_length", 1 << 16, &c->n_embd, e))) return st;
    if ((st = need_int(g, a, "attention.head_count", 1024, &c->n_head, e))) return st;
    if ((st = need_int(g, a, "feed_forward_length", 1 << 20, &c->n_ff, e))) return st;
    int64_t v;
    c->n_head_kv = c->n_head;
    if (get_int(g, a, "attention.head_count_kv", &v)) {
        if (v < 1 || v > c->n_head || c->n_head % v)
            return hx_err(e, HX_ERR_FORMAT, "%s: %s.attention.head_count_kv = %lld must divide head_count = %d",
                          g->path, a, (long long)v, c->n_head);
        c->n_head_kv = (int)v;
    }
    c->head_dim = c->n_embd / c->n_head;
    if (get_int(g, a, "attention.key_length", &v)) {
        if (v < 1 || v > 4096) return hx_err(e, HX_ERR_FORMAT, "%s: %s.attention.key_length = %lld out of range", g->path, a, (long long)v);
        c->head_dim = (int)v;
    }
    if (get_int(g, a, "attention.value_length", &v) && v != c->head_dim)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: value_length %lld != key_length %d is not supported", g->path, (long long)v, c->head_dim);
    c->n_ctx_train = get_int(g, a, "context_length", &v) && v > 0 && v <= (1 << 24) ? (int)v : 2048;
    double d;
    c->rope_base = get_f(g, a, "rope.freq_base", &d) && d > 0 ? (float)d : 10000.0f;
    c->rope_base_swa = get_f(g, a, "rope.freq_base_swa", &d) && d > 0 ? (float)d : c->rope_base;
    c->rope_scale = 1.0f;
    if (get_f(g, a, "rope.scaling.factor", &d) && d > 0) {
        hx_gguf_str type;
        char key[96];
        snprintf(key, sizeof key, "%s.rope.scaling.type", a);
        if (hx_gguf_get_str(g, key, &type) && hx_gguf_str_eq(type, "linear")) c->rope_scale = (float)d;
    }
    const char *eps_key = get_f(g, a, "attention.layer_norm_rms_epsilon", &d) ? "attention.layer_norm_rms_epsilon"
                        : get_f(g, a, "attention.layer_norm_epsilon", &d) ? "attention.layer_norm_epsilon" : NULL;
    /* the norm divides by sqrt(mean + eps): NaN, inf, 0 or < 0 give NaN/inf activations */
    if (eps_key && !(isfinite(d) && d > 0 && (float)d > 0 && d < 1))
        return hx_err(e, HX_ERR_FORMAT, "%s: metadata %s.%s = %g must be a finite number in (0, 1)", g->path, a,
                      eps_key, d);
    c->norm_eps = eps_key ? (float)d : 1e-5f;
    c->act = HX_ACT_SILU;
    c->rope_style = HX_ROPE_NORM;
    switch (c->arch) {
    case HX_ARCH_LLAMA: break;
    case HX_ARCH_QWEN2: c->rope_style = HX_ROPE_NEOX; c->qkv_bias = true; break;
    case HX_ARCH_QWEN3: c->rope_style = HX_ROPE_NEOX; c->qk_norm = true; break;
    case HX_ARCH_GEMMA3:
        c->rope_style = HX_ROPE_NEOX; c->qk_norm = true; c->post_norms = true; c->embd_scale = true;
        c->act = HX_ACT_GELU_TANH;
        if (!get_f(g, a, "rope.freq_base_swa", &d)) c->rope_base_swa = 10000.0f;
        c->swa_pattern = 6;
        if (get_int(g, a, "attention.sliding_window", &v) && v > 0 && v < (1 << 24)) c->sliding_window = (int)v;
        break;
    case HX_ARCH_BERT:
        c->norm_is_layernorm = true; c->qkv_bias = true; c->act = HX_ACT_GELU_ERF;
        c->rope_style = HX_ROPE_NORM; /* unused: learned positions */
        c->pooling = 1;
        if (get_int(g, a, "pooling_type", &v) && v >= 0 && v <= 2) c->pooling = (int)v;
        break;
    }
    /* llama.cpp's gemma3 runs its sliding layers unscaled (rope_freq_scale_train_swa = 1) */
    c->rope_scale_swa = c->arch == HX_ARCH_GEMMA3 ? 1.0f : c->rope_scale;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (get_f(g, a, "attention.scale", &d) && d > 0) c->attn_scale = (float)d;
    if (get_f(g, a, "final_logit_softcapping", &d) && d > 0) c->final_logit_softcap = (float)d;
    if (get_f(g, a, "attn_logit_softcapping", &d) && d > 0) c->attn_logit_softcap = (float)d;
    for (int il = 0; il < c->n_layer; il++)
        c->layer_is_swa[il] = c->sliding_window > 0 && c->swa_pattern > 0 && (il % c->swa_pattern) < c->swa_pattern - 1;
    /* vocabulary: tokenizer token count, else arch.vocab_size; checked against token_embd at load */
    const hx_gguf_value *toks = hx_gguf_get_arr(g, "tokenizer.ggml.tokens", HX_GGUF_STRING);
    if (toks) c->n_vocab = (int)(toks->arr.count < (1u << 30) ? toks->arr.count : 0);
    else if (get_int(g, a, "vocab_size", &v) && v > 0 && v < (1 << 30)) c->n_vocab = (int)v;
    const hx_gguf_tensor *te = hx_gguf_find_tensor(g, "token_embd.weight");
    if (te && te->n_dims == 2 && te->ne[1] > 0 && te->ne[1] < (1 << 30)) c->n_vocab = (int)te->ne[1];
    if (c->n_vocab <= 0) return hx_err(e, HX_ERR_FORMAT, "%s: cannot tell the vocabulary size (no token_embd.weight or tokenizer.ggml.tokens)", g->path);
    c->tied_output = hx_gguf_find_tensor(g, "output.weight") == NULL;
    return HX_OK;
}

/* Bind tensor `name` expecting shape (ne0, ne1) (ne1 = 0: 1-D). required=false:
 * absent leaves t->data NULL. */
static hx_status bind(const hx_gguf *g, hx_tensor *t, const char *name, bool required, int64_t ne0, int64_t ne1, hx_error *e) {
    memset(t, 0, sizeof *t);
    const hx_gguf_tensor *gt = hx_gguf_find_tensor(g, name);
    if (!gt) {
        if (!required) return HX_OK;
        return hx_err(e, HX_ERR_FORMAT, "%s: missing tensor '%s'", g->path, name);
    }
    int64_t want1 = ne1 ? ne1 : 1;
    if (gt->ne[0] != ne0 || gt->ne[1] != want1 || gt->ne[2] != 1 || gt->ne[3] != 1)
        return hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                      g->path, name, (long long)gt->ne[0], (long long)gt->ne[1], (long long)gt->ne[2],
                      (long long)gt->ne[3], (long long)ne0, (long long)want1);
    const hx_type_info *ti = hx_type_get(gt->type);
    if (!ti || !ti->supported)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which is not supported for weights", g->path,
                      name, hx_type_name(gt->type));
    t->name = hx_gguf_find_tensor(g, name)->name.ptr; /* not NUL-terminated: use only with the gguf length */
    t->type = gt->type;
    for (int i = 0; i < 4; i++) t->ne[i] = gt->ne[i];
    t->data = gt->data;
    return HX_OK;
}

static hx_status bind_layer(const hx_gguf *g, const hx_model_config *c, int il, hx_layer_weights *L, hx_error *e) {
    const int64_t E = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
    const bool bert = c->arch == HX_ARCH_BERT;
    char n[96];
    hx_status st = HX_OK;
#define B(field, suffix, req, a, b) do { snprintf(n, sizeof n, "blk.%d." suffix, il); \
        if ((st = bind(g, &L->field, n, (req), (a), (b), e))) return st; } while (0)
    if (bert) {
        B(wq, "attn_q.weight", true, E, Q);  B(bq, "attn_q.bias", true, Q, 0);
        B(wk, "attn_k.weight", true, E, KV); B(bk, "attn_k.bias", true, KV, 0);
        B(wv, "attn_v.weight", true, E, KV); B(bv, "attn_v.bias", true, KV, 0);
        B(wo, "attn_output.weight", true, Q, E); B(bo, "attn_output.bias", true, E, 0);
        B(attn_post_norm, "attn_output_norm.weight", true, E, 0);
        B(attn_post_norm_b, "attn_output_norm.bias", true, E, 0);
        B(ffn_up, "ffn_up.weight", true, E, F); B(ffn_up_b, "ffn_up.bias", true, F, 0);
        B(ffn_down, "ffn_down.weight", true, F, E); B(ffn_down_b, "ffn_down.bias", true, E, 0);
        B(ffn_post_norm, "layer_output_norm.weight", true, E, 0);
        B(ffn_post_norm_b, "layer_output_norm.bias", true, E, 0);
        return HX_OK;
    }
    B(attn_norm, "attn_norm.weight", true, E, 0);
    B(wq, "attn_q.weight", true, E, Q);
    B(wk, "attn_k.weight", true, E, KV);
    B(wv, "attn_v.weight", true, E, KV);
    B(wo, "attn_output.weight", true, Q, E);
    B(bq, "attn_q.bias", c->qkv_bias, Q, 0);
    B(bk, "attn_k.bias", c->qkv_bias, KV, 0);
    B(bv, "attn_v.bias", c->qkv_bias, KV, 0);
    B(bo, "attn_output.bias", false, E, 0);
    B(q_norm, "attn_q_norm.weight", c->qk_norm, c->head_dim, 0);
    B(k_norm, "attn_k_norm.weight", c->qk_norm, c->head_dim, 0);
    B(attn_post_norm, "post_attention_norm.weight", c->post_norms, E, 0);
    B(ffn_norm, "ffn_norm.weight", true, E, 0);
    B(ffn_gate, "ffn_gate.weight", true, E, F);
    B(ffn_up, "ffn_up.weight", true, E, F);
    B(ffn_down, "ffn_down.weight", true, F, E);
    B(ffn_post_norm, "post_ffw_norm.weight", c->post_norms, E, 0);
#undef B
    return st;
}

void hx_model_free(hx_model *m) {
    if (!m) return;
    hx_model_api_free(m->api);
    free(m->layers);
    hx_gguf_close(m->gguf);
    hx_hf_store_free(m->hf);
    free(m);
}

hx_status hx_model_load(const char *path, const hx_gguf_open_opts *opts, hx_model **out, hx_error *e) {
    *out = NULL;
    hx_model *m = calloc(1, sizeof *m);
    if (!m) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    hx_status st = hx_gguf_open(path, opts, &m->gguf, e);
    if (st) { free(m); return st; }
    const hx_gguf *g = m->gguf;
    hx_model_config *c = &m->cfg;
    if ((st = hx_model_config_from_gguf(g, c, e))) goto fail;
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) { st = hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); goto fail; }
    const int64_t E = c->n_embd, V = c->n_vocab;
    if ((st = bind(g, &m->tok_embd, "token_embd.weight", true, E, V, e))) goto fail;
    if (c->arch == HX_ARCH_BERT) {
        const hx_gguf_tensor *pe = hx_gguf_find_tensor(g, "position_embd.weight");
        int64_t npos = pe ? pe->ne[1] : 0;
        if ((st = bind(g, &m->pos_embd, "position_embd.weight", true, E, npos, e))) goto fail;
        const hx_gguf_tensor *tt = hx_gguf_find_tensor(g, "token_types.weight");
        if ((st = bind(g, &m->type_embd, "token_types.weight", false, E, tt ? tt->ne[1] : 1, e))) goto fail;
        if ((st = bind(g, &m->embd_norm, "token_embd_norm.weight", true, E, 0, e))) goto fail;
        if ((st = bind(g, &m->embd_norm_b, "token_embd_norm.bias", true, E, 0, e))) goto fail;
        if (npos < c->n_ctx_train) c->n_ctx_train = (int)npos;
    } else {
        if ((st = bind(g, &m->output_norm, "output_norm.weight", true, E, 0, e))) goto fail;
        if (c->tied_output) m->output = m->tok_embd;
        else if ((st = bind(g, &m->output, "output.weight", true, E, V, e))) goto fail;
    }
    for (int il = 0; il < c->n_layer; il++)
        if ((st = bind_layer(g, c, il, &m->layers[il], e))) goto fail;
    *out = m;
    return HX_OK;
fail:
    hx_model_free(m);
    return st;
}

int hx_kv_layer_rows(const hx_model_config *cfg, int l, int n_ctx, int ubatch) {
    int64_t ring = (int64_t)cfg->sliding_window + ubatch;
    return cfg->layer_is_swa[l] && cfg->sliding_window > 0 && ring < n_ctx ? (int)ring : n_ctx;
}

bool hx_kv_has_ring(const hx_model_config *cfg, const int *kv_rows, int n_ctx) {
    for (int l = 0; l < cfg->n_layer; l++)
        if (kv_rows[l] < n_ctx) return true;
    return false;
}

int hx_kv_rewind(const hx_model_config *cfg, const int *kv_rows, int n_ctx, int n_past, int pos) {
    int need = pos - cfg->sliding_window + 1 > 0 ? pos - cfg->sliding_window + 1 : 0;
    for (int l = 0; l < cfg->n_layer; l++)
        if (kv_rows[l] < n_ctx && pos > 0 && need < n_past - kv_rows[l]) return 0;
    return pos;
}

hx_status hx_forward_pieces(hx_batch_fn batch, void *ctx, int piece, int n_vocab, const int32_t *tokens, int n,
                            int pos, float *logits, bool all_logits, hx_error *e) {
    if (piece <= 0 || n <= piece) return batch(ctx, tokens, n, pos, logits, all_logits, e);
    for (int at = 0; at < n; at += piece) {
        int k = n - at < piece ? n - at : piece;
        float *lo = !logits ? NULL : all_logits ? logits + (size_t)at * n_vocab : at + k == n ? logits : NULL;
        hx_status st = batch(ctx, tokens + at, k, pos + at, lo, all_logits, e);
        if (st) return st;
    }
    return HX_OK;
}
