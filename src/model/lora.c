/* lora.c — LoRA adapters: load (llama.cpp GGUF adapter or PEFT folder), write
 * as a GGUF adapter, merge into a copy of a GGUF base. Formats and layouts in
 * lora.h.
 *
 * Matrices are indexed as idx = layer * HX_LORA_PER_LAYER + slot for the layer
 * projections, then output, then token_embd (n_idx = n_layer * 7 + 2). */
#include "model/lora.h"
#include "core/core.h"
#include "quant/quant.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const slot_names[HX_LORA_PER_LAYER] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};
static const char *const hf_names[HX_LORA_PER_LAYER] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
};

static int n_idx(const hx_model *m) { return m->cfg.n_layer * HX_LORA_PER_LAYER + 2; }
static int idx_output(const hx_model *m) { return m->cfg.n_layer * HX_LORA_PER_LAYER; }
static int idx_embd(const hx_model *m) { return m->cfg.n_layer * HX_LORA_PER_LAYER + 1; }

static hx_lora_w *w_at(struct hx_adapter *a, int idx) {
    if (idx == idx_output(a->m)) return &a->output;
    if (idx == idx_embd(a->m)) return &a->tok_embd;
    return &a->w[idx];
}

/* The base matrix of idx (NULL for output when the model ties it to token_embd). */
static const hx_tensor *base_of(const hx_model *m, int idx) {
    if (idx == idx_embd(m)) return &m->tok_embd;
    if (idx == idx_output(m)) return m->cfg.tied_output ? NULL : &m->output;
    const hx_layer_weights *L = &m->layers[idx / HX_LORA_PER_LAYER];
    const hx_tensor *t[HX_LORA_PER_LAYER] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down };
    return t[idx % HX_LORA_PER_LAYER];
}

static void idx_name(const hx_model *m, int idx, char *buf, size_t n) {
    if (idx == idx_embd(m)) snprintf(buf, n, "token_embd.weight");
    else if (idx == idx_output(m)) snprintf(buf, n, "output.weight");
    else snprintf(buf, n, "blk.%d.%s.weight", idx / HX_LORA_PER_LAYER, slot_names[idx % HX_LORA_PER_LAYER]);
}

/* GGUF base tensor name -> idx; -1 when it is not a matrix helix adapts. */
static int idx_of_name(const hx_model *m, const char *name, size_t len) {
    char buf[96];
    if (len >= sizeof buf) return -1;
    memcpy(buf, name, len);
    buf[len] = 0;
    if (!strcmp(buf, "token_embd.weight")) return idx_embd(m);
    if (!strcmp(buf, "output.weight")) return idx_output(m);
    int l, off = 0;
    if (sscanf(buf, "blk.%d.%n", &l, &off) != 1 || off == 0 || l < 0 || l >= m->cfg.n_layer) return -1;
    for (int s = 0; s < HX_LORA_PER_LAYER; s++) {
        size_t sl = strlen(slot_names[s]);
        if (!strncmp(buf + off, slot_names[s], sl) && !strcmp(buf + off + sl, ".weight"))
            return l * HX_LORA_PER_LAYER + s;
    }
    return -1;
}

void hx_lora_release(struct hx_adapter *a) {
    if (!a || __atomic_sub_fetch(&a->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    if (a->w)
        for (int i = 0; i < a->n_layer * HX_LORA_PER_LAYER; i++) { free(a->w[i].a); free(a->w[i].b); }
    free(a->w);
    free(a->output.a); free(a->output.b);
    free(a->tok_embd.a); free(a->tok_embd.b);
    free(a->path);
    free(a);
}

/* A matrix as stored: rows x cols row-major (GGUF: ne1 x ne0; torch: shape). */
typedef struct raw {
    const char *name;   /* for messages */
    int type;           /* hx_type: F32, F16, BF16, F64 or a GGUF block type */
    int64_t rows, cols;
    const void *data;
} raw;

static hx_status raw_to_f32(const raw *r, float **out, hx_error *e) {
    *out = NULL;
    if (r->rows <= 0 || r->cols <= 0 || r->rows > (1 << 24) || r->cols > (1 << 24))
        return hx_err(e, HX_ERR_FORMAT, "tensor '%s': shape %lld x %lld", r->name, (long long)r->rows, (long long)r->cols);
    float *f = malloc(sizeof(float) * (size_t)r->rows * (size_t)r->cols);
    if (!f) return hx_err(e, HX_ERR_NOMEM, "tensor '%s': out of memory", r->name);
    if (r->type == HX_TYPE_F64) {
        for (int64_t i = 0; i < r->rows * r->cols; i++) {
            double d;
            memcpy(&d, (const char *)r->data + 8 * i, 8);
            f[i] = (float)d;
        }
    } else {
        size_t rs = hx_row_size(r->type, r->cols);
        if (rs == 0) { free(f); return hx_err(e, HX_ERR_UNSUPPORTED, "tensor '%s': type %s unsupported", r->name, hx_type_name(r->type)); }
        for (int64_t i = 0; i < r->rows; i++)
            hx_dequantize_row(r->type, (const char *)r->data + (size_t)i * rs, f + (size_t)i * r->cols, r->cols);
    }
    *out = f;
    return HX_OK;
}

/* Rows of b (n_out, r) moved between HF's layout and llama.cpp's permuted one
 * for llama's Q/K: within each head of hd rows, row j*2+t (permuted) is row
 * t*hd/2+j (HF). to_perm: HF -> permuted. */
static hx_status permute_rows(float *b, int64_t n_out, int r, int n_head, bool to_perm, hx_error *e) {
    if (n_head <= 0 || n_out % (2 * n_head)) return hx_err(e, HX_ERR_FORMAT, "lora: %lld rows do not split into %d heads", (long long)n_out, n_head);
    int64_t hd = n_out / n_head, half = hd / 2;
    float *tmp = malloc(sizeof(float) * (size_t)n_out * r);
    if (!tmp) return hx_err(e, HX_ERR_NOMEM, "lora: out of memory");
    for (int64_t h = 0; h < n_head; h++)
        for (int64_t j = 0; j < half; j++)
            for (int t = 0; t < 2; t++) {
                int64_t p = h * hd + j * 2 + t, u = h * hd + t * half + j;
                memcpy(tmp + (to_perm ? p : u) * r, b + (to_perm ? u : p) * r, sizeof(float) * r);
            }
    memcpy(b, tmp, sizeof(float) * (size_t)n_out * r);
    free(tmp);
    return HX_OK;
}

/* Whether the base runs llama's Q/K rows permuted (a llama.cpp GGUF). */
static bool base_permuted(const hx_model *m) { return m->cfg.arch == HX_ARCH_LLAMA && m->cfg.rope_style == HX_ROPE_NORM; }

/* Fill matrix idx from its A and B as stored. Regular: A (r, n_in), B (n_out, r).
 * token_embd: A (n_vocab, r) (a_t: A is given as (r, n_vocab) and transposed),
 * B (n_embd, r). src_perm: B's Q/K rows are in llama.cpp's permuted layout. */
static hx_status set_pair(struct hx_adapter *ad, int idx, const raw *A, const raw *B, bool a_t, bool src_perm,
                          hx_error *e) {
    const hx_model *m = ad->m;
    char name[96];
    idx_name(m, idx, name, sizeof name);
    const hx_tensor *W = base_of(m, idx);
    if (!W || !W->data)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: adapter tensor for '%s', which the base model %s", ad->path, name,
                      idx == idx_output(m) ? "does not have (its output head is tied to token_embd)" : "does not have");
    hx_lora_w *w = w_at(ad, idx);
    if (w->rank) return hx_err(e, HX_ERR_FORMAT, "%s: two adapter pairs for '%s'", ad->path, name);
    bool embd = idx == idx_embd(m);
    int64_t a_rows = a_t ? A->cols : A->rows, a_cols = a_t ? A->rows : A->cols;
    int64_t rank = embd ? a_cols : a_rows;
    if (embd) {
        if (a_rows != W->ne[1] || B->rows != W->ne[0] || B->cols != rank)
            return hx_err(e, HX_ERR_FORMAT, "%s: '%s' (%lld x %lld): lora_a '%s' is %lld x %lld (want n_vocab x r) and lora_b "
                          "'%s' %lld x %lld (want n_embd x r)", ad->path, name, (long long)W->ne[1], (long long)W->ne[0],
                          A->name, (long long)a_rows, (long long)a_cols, B->name, (long long)B->rows, (long long)B->cols);
    } else {
        if (a_cols != W->ne[0] || B->rows != W->ne[1])
            return hx_err(e, HX_ERR_FORMAT, "%s: base '%s' has %lld rows of %lld; lora_a '%s' has rows of %lld (want %lld), "
                          "lora_b '%s' has %lld rows (want %lld)", ad->path, name, (long long)W->ne[1], (long long)W->ne[0],
                          A->name, (long long)a_cols, (long long)W->ne[0], B->name, (long long)B->rows, (long long)W->ne[1]);
        if (B->cols != rank)
            return hx_err(e, HX_ERR_FORMAT, "%s: '%s': lora_a '%s' has rank %lld, lora_b '%s' %lld (lora_a must be "
                          "[n_in, r] and lora_b [r, n_out], GGUF order; a transposed lora_a is not supported)",
                          ad->path, name, A->name, (long long)rank, B->name, (long long)B->cols);
    }
    if (rank < 1 || rank > 65536) return hx_err(e, HX_ERR_FORMAT, "%s: '%s': rank %lld", ad->path, name, (long long)rank);
    float *fa = NULL, *fb = NULL;
    hx_status st = raw_to_f32(A, &fa, e);
    if (!st) st = raw_to_f32(B, &fb, e);
    if (!st && a_t) {
        float *t = malloc(sizeof(float) * (size_t)A->rows * A->cols);
        if (!t) st = hx_err(e, HX_ERR_NOMEM, "lora: out of memory");
        else {
            for (int64_t i = 0; i < A->rows; i++)
                for (int64_t j = 0; j < A->cols; j++) t[j * A->rows + i] = fa[i * A->cols + j];
            free(fa);
            fa = t;
        }
    }
    int slot = idx % HX_LORA_PER_LAYER;
    bool qk = idx < idx_output(m) && (slot == HX_LORA_Q || slot == HX_LORA_K);
    if (!st && qk && m->cfg.arch == HX_ARCH_LLAMA && src_perm != base_permuted(m))
        st = permute_rows(fb, B->rows, (int)rank, slot == HX_LORA_Q ? m->cfg.n_head : m->cfg.n_head_kv, !src_perm, e);
    if (st) { free(fa); free(fb); return st; }
    w->rank = (int)rank;
    w->n_in = embd ? W->ne[1] : W->ne[0];
    w->n_out = embd ? W->ne[0] : W->ne[1];
    w->a = fa;
    w->b = fb;
    ad->n_weights++;
    return HX_OK;
}

/* ---- GGUF adapters ---- */

static bool ends_with(hx_gguf_str s, const char *suf, size_t *base_len) {
    size_t n = strlen(suf);
    if (s.len < n || memcmp(s.ptr + s.len - n, suf, n)) return false;
    *base_len = (size_t)s.len - n;
    return true;
}

static raw raw_of(const hx_gguf_tensor *t, char *name, size_t cap) {
    snprintf(name, cap, "%.*s", (int)(t->name.len < 200 ? t->name.len : 200), t->name.ptr);
    return (raw){ name, t->type, t->ne[1], t->ne[0], t->data };
}

static hx_status load_gguf(struct hx_adapter *ad, hx_error *e) {
    const hx_model *m = ad->m;
    hx_gguf *g = NULL;
    hx_status st = hx_gguf_open(ad->path, NULL, &g, e);
    if (st) return st;
    hx_gguf_str s = {0};
    if (!hx_gguf_get_str(g, "general.type", &s) || !hx_gguf_str_eq(s, "adapter")) {
        st = hx_err(e, HX_ERR_FORMAT, "%s: not a GGUF adapter (general.type is '%.*s', want 'adapter')", ad->path,
                    hx_gguf_get_str(g, "general.type", &s) ? (int)(s.len < 64 ? s.len : 64) : 0, s.ptr ? s.ptr : "");
        goto out;
    }
    if (!hx_gguf_get_str(g, "adapter.type", &s) || !hx_gguf_str_eq(s, "lora")) {
        st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: adapter.type is not 'lora'", ad->path);
        goto out;
    }
    const char *arch = hx_arch_name(m->cfg.arch);
    if (hx_gguf_get_str(g, "general.architecture", &s) && !hx_gguf_str_eq(s, arch)) {
        st = hx_err(e, HX_ERR_ARG, "%s: adapter for architecture '%.*s', the model is '%s'", ad->path,
                    (int)(s.len < 64 ? s.len : 64), s.ptr, arch);
        goto out;
    }
    double alpha = 0;
    if (hx_gguf_find_kv(g, "adapter.lora.alpha") && !hx_gguf_get_f64(g, "adapter.lora.alpha", &alpha)) {
        st = hx_err(e, HX_ERR_FORMAT, "%s: adapter.lora.alpha is not a number", ad->path);
        goto out;
    }
    ad->alpha = (float)alpha;
    for (uint64_t i = 0; i < g->n_tensors && !st; i++) {
        const hx_gguf_tensor *ta = &g->tensors[i];
        size_t bl;
        char na[256], nb[256];
        if (ends_with(ta->name, ".lora_b", &bl)) {
            /* checked from its lora_a; one without a partner is named here */
            char want[256];
            snprintf(want, sizeof want, "%.*s.lora_a", (int)(bl < 200 ? bl : 200), ta->name.ptr);
            if (!hx_gguf_find_tensor(g, want))
                st = hx_err(e, HX_ERR_FORMAT, "%s: tensor '%.*s' has no '%s'", ad->path, (int)(ta->name.len < 200 ? ta->name.len : 200),
                            ta->name.ptr, want);
            continue;
        }
        if (!ends_with(ta->name, ".lora_a", &bl)) {
            st = hx_err(e, HX_ERR_FORMAT, "%s: tensor '%.*s' is neither a .lora_a nor a .lora_b", ad->path,
                        (int)(ta->name.len < 200 ? ta->name.len : 200), ta->name.ptr);
            break;
        }
        int idx = idx_of_name(m, ta->name.ptr, bl);
        if (idx < 0) {
            st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: tensor '%.*s': helix applies adapters to token_embd, output and the "
                        "layers' attn_q/k/v/output and ffn_gate/up/down matrices only", ad->path,
                        (int)(ta->name.len < 200 ? ta->name.len : 200), ta->name.ptr);
            break;
        }
        char want[256];
        snprintf(want, sizeof want, "%.*s.lora_b", (int)(bl < 200 ? bl : 200), ta->name.ptr);
        const hx_gguf_tensor *tb = hx_gguf_find_tensor(g, want);
        if (!tb) { st = hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s' is missing (its lora_a is there)", ad->path, want); break; }
        if (ta->n_dims != 2 || tb->n_dims != 2) {
            st = hx_err(e, HX_ERR_FORMAT, "%s: '%s' and its lora_a must be 2-D", ad->path, want);
            break;
        }
        raw A = raw_of(ta, na, sizeof na), B = raw_of(tb, nb, sizeof nb);
        st = set_pair(ad, idx, &A, &B, false, m->cfg.arch == HX_ARCH_LLAMA, e);
    }
out:
    hx_gguf_close(g);
    return st;
}

/* ---- PEFT folders ---- */

static int st_type(const char *dt) {
    if (!strcmp(dt, "F32")) return HX_TYPE_F32;
    if (!strcmp(dt, "F16")) return HX_TYPE_F16;
    if (!strcmp(dt, "BF16")) return HX_TYPE_BF16;
    if (!strcmp(dt, "F64")) return HX_TYPE_F64;
    return -1;
}

/* HF tensor name -> idx and which half: 'A' or 'B'; -1 when unknown. Names
 * look like base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight,
 * ...lm_head.lora_B.weight, ...embed_tokens.lora_embedding_A. */
static int hf_idx(const hx_model *m, const char *name, char *half) {
    const char *p;
    *half = 0;
    if ((p = strstr(name, ".lora_embedding_")) && (p[16] == 'A' || p[16] == 'B') && !p[17]) {
        *half = p[16];
        size_t n = (size_t)(p - name);
        return n >= 12 && !strncmp(p - 12, "embed_tokens", 12) ? idx_embd(m) : -1;
    }
    p = strstr(name, ".lora_");
    if (!p || (p[6] != 'A' && p[6] != 'B') || strcmp(p + 7, ".weight")) return -1;
    *half = p[6];
    size_t n = (size_t)(p - name);
    if (n >= 7 && !strncmp(p - 7, "lm_head", 7) && (n == 7 || p[-8] == '.')) return idx_output(m);
    const char *L = strstr(name, "layers.");
    if (!L || L > p) return -1;
    char *end;
    long l = strtol(L + 7, &end, 10);
    if (end == L + 7 || *end != '.' || l < 0 || l >= m->cfg.n_layer) return -1;
    for (int s = 0; s < HX_LORA_PER_LAYER; s++) {
        size_t sl = strlen(hf_names[s]);
        if ((size_t)(p - (end + 1)) == sl && !strncmp(end + 1, hf_names[s], sl)) return (int)l * HX_LORA_PER_LAYER + s;
    }
    return -1;
}

/* "...embed_tokens.base_layer.weight" / "...lm_head.base_layer.weight" -> idx, else -1. */
static int base_copy_idx(const hx_model *m, const char *name) {
    size_t n = strlen(name);
    static const char suf[] = ".base_layer.weight";
    size_t sl = sizeof suf - 1;
    if (n < sl || strcmp(name + n - sl, suf)) return -1;
    if (n >= sl + 12 && !strncmp(name + n - sl - 12, "embed_tokens", 12)) return idx_embd(m);
    if (n >= sl + 7 && !strncmp(name + n - sl - 7, "lm_head", 7)) return idx_output(m);
    return -1;
}

/* A full copy of a base matrix saved with the adapter: accepted when it is the
 * base's, element for element (a changed one means new tokens or trained
 * embeddings, which an adapter of helix cannot carry). */
static hx_status check_copy(struct hx_adapter *ad, int idx, const raw *c, hx_error *e) {
    const hx_tensor *W = base_of(ad->m, idx);
    if (!W || !W->data) return HX_OK; /* tied: the base has no separate matrix; nothing to compare */
    if (c->rows != W->ne[1] || c->cols != W->ne[0])
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: tensor '%s' is %lld x %lld, the base's is %lld x %lld (tokens added "
                      "while fine-tuning are not supported)", ad->path, c->name, (long long)c->rows, (long long)c->cols,
                      (long long)W->ne[1], (long long)W->ne[0]);
    float *f = NULL, *row = malloc(sizeof(float) * (size_t)c->cols);
    hx_status st = row ? raw_to_f32(c, &f, e) : hx_err(e, HX_ERR_NOMEM, "lora: out of memory");
    size_t rs = hx_row_size(W->type, W->ne[0]);
    for (int64_t r = 0; !st && r < c->rows; r++) {
        hx_dequantize_row(W->type, (const char *)W->data + (size_t)r * rs, row, c->cols);
        if (memcmp(row, f + (size_t)r * c->cols, sizeof(float) * (size_t)c->cols))
            st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: tensor '%s' differs from the base model's (row %lld): trained or "
                        "resized embeddings are not supported", ad->path, c->name, (long long)r);
    }
    free(f);
    free(row);
    return st;
}

static hx_status load_peft(struct hx_adapter *ad, hx_error *e) {
    const hx_model *m = ad->m;
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", ad->path);
    char *txt = NULL, *st_buf = NULL;
    size_t len = 0, st_len = 0;
    hx_status st = hx_read_file(path, &txt, &len, e);
    if (st) return st;
    cJSON *cfg = cJSON_ParseWithLength(txt, len), *hdr = NULL;
    free(txt);
    raw *A = NULL, *B = NULL;
    int ni = n_idx(m);
    if (!cJSON_IsObject(cfg)) { st = hx_err(e, HX_ERR_FORMAT, "%s: not a JSON object", path); goto out; }
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(cfg, "peft_type");
    if (cJSON_IsString(pt) && strcmp(pt->valuestring, "LORA")) {
        st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: peft_type '%s' (LORA only)", path, pt->valuestring);
        goto out;
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(cfg, "r"), *al = cJSON_GetObjectItemCaseSensitive(cfg, "lora_alpha");
    if (!cJSON_IsNumber(r) || r->valuedouble < 1 || !cJSON_IsNumber(al)) {
        st = hx_err(e, HX_ERR_FORMAT, "%s: needs a positive number 'r' and a number 'lora_alpha'", path);
        goto out;
    }
    static const char *const flags[] = { "use_dora", "fan_in_fan_out" };
    for (int i = 0; i < 2; i++)
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, flags[i]))) {
            st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: %s = true is not supported", path, flags[i]);
            goto out;
        }
    static const char *const pats[] = { "rank_pattern", "alpha_pattern" };
    for (int i = 0; i < 2; i++) {
        const cJSON *o = cJSON_GetObjectItemCaseSensitive(cfg, pats[i]);
        if (o && !cJSON_IsNull(o) && cJSON_GetArraySize(o) > 0) {
            st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: a non-empty %s is not supported (one r and lora_alpha for all)", path, pats[i]);
            goto out;
        }
    }
    const cJSON *mts = cJSON_GetObjectItemCaseSensitive(cfg, "modules_to_save");
    if (mts && !cJSON_IsNull(mts) && cJSON_GetArraySize(mts) > 0) {
        st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: modules_to_save (fully trained copies of modules) is not supported", path);
        goto out;
    }
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(cfg, "bias");
    if (cJSON_IsString(bias) && strcmp(bias->valuestring, "none")) {
        st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: bias '%s' (trained biases) is not supported", path, bias->valuestring);
        goto out;
    }
    /* rsLoRA scales by alpha / sqrt(r): the same as alpha * sqrt(r) / r */
    double rank = r->valuedouble, alpha = al->valuedouble;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "use_rslora"))) alpha *= sqrt(rank);
    ad->alpha = (float)alpha;

    snprintf(path, sizeof path, "%s/adapter_model.safetensors", ad->path);
    if ((st = hx_read_file(path, &st_buf, &st_len, e))) goto out;
    uint64_t hlen = 0;
    if (st_len >= 8) memcpy(&hlen, st_buf, 8);
    if (st_len < 8 || hlen > st_len - 8) { st = hx_err(e, HX_ERR_FORMAT, "%s: not a safetensors file", path); goto out; }
    hdr = cJSON_ParseWithLength(st_buf + 8, (size_t)hlen);
    if (!cJSON_IsObject(hdr)) { st = hx_err(e, HX_ERR_FORMAT, "%s: offset 8: header is not a JSON object", path); goto out; }
    uint64_t data_len = st_len - 8 - hlen;
    const char *data = st_buf + 8 + hlen;
    A = calloc((size_t)ni, sizeof *A);
    B = calloc((size_t)ni, sizeof *B);
    if (!A || !B) { st = hx_err(e, HX_ERR_NOMEM, "lora: out of memory"); goto out; }
    const cJSON *it;
    cJSON_ArrayForEach(it, hdr) {
        if (!strcmp(it->string, "__metadata__")) continue;
        char half;
        int idx = hf_idx(m, it->string, &half);
        bool copy = idx < 0 && (idx = base_copy_idx(m, it->string)) >= 0;
        if (idx < 0) {
            st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: tensor '%s': helix applies adapters to embed_tokens, lm_head and the "
                        "layers' q/k/v/o_proj and gate/up/down_proj (LoRA A/B pairs) only", path, it->string);
            goto out;
        }
        const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(it, "shape"),
                    *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        int type = cJSON_IsString(dt) ? st_type(dt->valuestring) : -1;
        if (type < 0 || !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != 2 || !cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2) {
            st = hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s': want a 2-D F32/F16/BF16/F64 tensor with data_offsets", path, it->string);
            goto out;
        }
        double r0 = cJSON_GetArrayItem(sh, 0)->valuedouble, c0 = cJSON_GetArrayItem(sh, 1)->valuedouble;
        double b0 = cJSON_GetArrayItem(of, 0)->valuedouble, b1 = cJSON_GetArrayItem(of, 1)->valuedouble;
        double esz = type == HX_TYPE_F64 ? 8 : type == HX_TYPE_F32 ? 4 : 2;
        if (r0 < 1 || c0 < 1 || r0 > (1 << 24) || c0 > (1 << 24) || b0 < 0 || b1 > (double)data_len || b1 - b0 != r0 * c0 * esz) {
            st = hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s': shape and data_offsets do not fit the file", path, it->string);
            goto out;
        }
        if (copy) { /* PEFT saves embedding layers it adapts in full: they must be the base's */
            raw c = { it->string, type, (int64_t)r0, (int64_t)c0, data + (uint64_t)b0 };
            if ((st = check_copy(ad, idx, &c, e))) goto out;
            continue;
        }
        raw *dst = half == 'A' ? &A[idx] : &B[idx];
        if (dst->data) { st = hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s' appears twice", path, it->string); goto out; }
        *dst = (raw){ it->string, type, (int64_t)r0, (int64_t)c0, data + (uint64_t)b0 };
    }
    for (int idx = 0; idx < ni && !st; idx++) {
        if (!A[idx].data && !B[idx].data) continue;
        if (!A[idx].data || !B[idx].data) {
            st = hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s' has no partner lora_%c", path,
                        A[idx].data ? A[idx].name : B[idx].name, A[idx].data ? 'B' : 'A');
            break;
        }
        if ((double)A[idx].rows != rank) {
            st = hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s' has rank %lld, adapter_config.json says r = %g", path, A[idx].name,
                        (long long)A[idx].rows, rank);
            break;
        }
        st = set_pair(ad, idx, &A[idx], &B[idx], idx == idx_embd(m), false, e);
    }
out:
    free(A); free(B);
    cJSON_Delete(hdr);
    cJSON_Delete(cfg);
    free(st_buf);
    return st;
}

hx_status hx_lora_load(const hx_model *m, const char *path, struct hx_adapter **out, hx_error *e) {
    *out = NULL;
    if (!m || !path || !*path) return hx_err(e, HX_ERR_ARG, "lora: model and path are required");
    if (m->cfg.arch == HX_ARCH_BERT) return hx_err(e, HX_ERR_UNSUPPORTED, "%s: adapters apply to decoders, the model is bert", path);
    struct stat sb;
    if (stat(path, &sb) != 0) return hx_err(e, HX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct hx_adapter *ad = calloc(1, sizeof *ad);
    if (!ad) return hx_err(e, HX_ERR_NOMEM, "lora: out of memory");
    ad->m = m;
    ad->refs = 1;
    ad->n_layer = m->cfg.n_layer;
    ad->path = strdup(path);
    ad->w = calloc((size_t)m->cfg.n_layer * HX_LORA_PER_LAYER, sizeof *ad->w);
    if (!ad->path || !ad->w) { hx_lora_release(ad); return hx_err(e, HX_ERR_NOMEM, "lora: out of memory"); }
    hx_status st = S_ISDIR(sb.st_mode) ? load_peft(ad, e) : load_gguf(ad, e);
    if (!st && ad->n_weights == 0) st = hx_err(e, HX_ERR_FORMAT, "%s: the adapter has no LoRA tensors", path);
    if (st) { hx_lora_release(ad); return st; }
    *out = ad;
    return HX_OK;
}

/* ---- writing ---- */

hx_status hx_lora_write_gguf(const struct hx_adapter *a, const char *path, hx_error *e) {
    const hx_model *m = a->m;
    hx_gguf_writer *w = hx_gguf_writer_new(0);
    if (!w) return hx_err(e, HX_ERR_NOMEM, "lora: out of memory");
    int ni = n_idx(m);
    float **perm = calloc((size_t)ni, sizeof *perm);
    char (*names)[2][96] = calloc((size_t)ni, sizeof *names);
    hx_status st = HX_OK;
    if (!perm || !names) { st = hx_err(e, HX_ERR_NOMEM, "lora: out of memory"); goto out; }
    hx_gguf_writer_set_str(w, "general.type", "adapter");
    hx_gguf_writer_set_str(w, "general.architecture", hx_arch_name(m->cfg.arch));
    hx_gguf_writer_set_str(w, "adapter.type", "lora");
    hx_gguf_writer_set_f32(w, "adapter.lora.alpha", a->alpha);
    for (int idx = 0; idx < ni && !st; idx++) {
        hx_lora_w *lw = w_at((struct hx_adapter *)a, idx);
        if (!lw->rank) continue;
        char base[96];
        idx_name(m, idx, base, sizeof base);
        snprintf(names[idx][0], 96, "%s.lora_a", base);
        snprintf(names[idx][1], 96, "%s.lora_b", base);
        const float *b = lw->b;
        int slot = idx % HX_LORA_PER_LAYER;
        if (idx < idx_output(m) && (slot == HX_LORA_Q || slot == HX_LORA_K) && m->cfg.arch == HX_ARCH_LLAMA &&
            !base_permuted(m)) {
            perm[idx] = malloc(sizeof(float) * (size_t)lw->n_out * lw->rank);
            if (!perm[idx]) { st = hx_err(e, HX_ERR_NOMEM, "lora: out of memory"); break; }
            memcpy(perm[idx], lw->b, sizeof(float) * (size_t)lw->n_out * lw->rank);
            if ((st = permute_rows(perm[idx], lw->n_out, lw->rank, slot == HX_LORA_Q ? m->cfg.n_head : m->cfg.n_head_kv,
                                   true, e)))
                break;
            b = perm[idx];
        }
        bool embd = idx == idx_embd(m);
        int64_t nea[2] = { embd ? lw->rank : lw->n_in, embd ? lw->n_in : lw->rank };
        int64_t neb[2] = { lw->rank, lw->n_out };
        hx_gguf_writer_add_tensor(w, names[idx][0], HX_TYPE_F32, 2, nea, lw->a);
        hx_gguf_writer_add_tensor(w, names[idx][1], HX_TYPE_F32, 2, neb, b);
    }
    if (!st) st = hx_gguf_writer_write(w, path, e);
out:
    if (perm) for (int i = 0; i < ni; i++) free(perm[i]);
    free(perm);
    free(names);
    hx_gguf_writer_free(w);
    return st;
}

/* ---- merging ---- */

typedef struct merge_job {
    const hx_model *m;
    const hx_tensor *W;
    int idx, type;
    struct hx_adapter *const *ad;
    const float *scales;
    int n;
} merge_job;

/* The merged tensor's bytes, row by row: W row o (+)= s * sum_k B[o][k] A[k][:];
 * token_embd row t += s * sum_k A[t][k] B[:][k]. */
static hx_status merge_fill(void *ctx, void *buf, uint64_t n_bytes, hx_error *e) {
    const merge_job *j = ctx;
    int64_t cols = j->W->ne[0], rows = j->W->ne[1];
    size_t in_rs = hx_row_size(j->W->type, cols), out_rs = hx_row_size(j->type, cols);
    if (out_rs * (uint64_t)rows != n_bytes) return hx_err(e, HX_ERR_FORMAT, "merge: '%s': size mismatch", j->W->name);
    float *row = malloc(sizeof(float) * (size_t)cols);
    if (!row) return hx_err(e, HX_ERR_NOMEM, "merge: out of memory");
    bool embd = j->idx == idx_embd(j->m);
    for (int64_t o = 0; o < rows; o++) {
        hx_dequantize_row(j->W->type, (const char *)j->W->data + (size_t)o * in_rs, row, cols);
        for (int k = 0; k < j->n; k++) {
            const hx_lora_w *lw = w_at(j->ad[k], j->idx);
            if (!lw->rank) continue;
            float s = hx_lora_scale(j->ad[k], lw, j->scales[k]);
            int r = lw->rank;
            if (embd) { /* row o is token o: A row o (r) against B (cols, r) */
                const float *ar = lw->a + (size_t)o * r;
                for (int64_t d = 0; d < cols; d++) {
                    double acc = 0;
                    for (int q = 0; q < r; q++) acc += (double)ar[q] * lw->b[(size_t)d * r + q];
                    row[d] += s * (float)acc;
                }
            } else {
                const float *br = lw->b + (size_t)o * r;
                for (int64_t i = 0; i < cols; i++) {
                    double acc = 0;
                    for (int q = 0; q < r; q++) acc += (double)br[q] * lw->a[(size_t)q * cols + i];
                    row[i] += s * (float)acc;
                }
            }
        }
        if (hx_quantize_row(j->type, row, (char *)buf + (size_t)o * out_rs, cols) == 0) {
            free(row);
            return hx_err(e, HX_ERR_UNSUPPORTED, "merge: '%s': cannot requantize to %s (use --f32)", j->W->name,
                          hx_type_name(j->type));
        }
    }
    free(row);
    return HX_OK;
}

hx_status hx_lora_merge(const char *base, const char *const *adapters, const float *scales, int n, bool f32_out,
                        const char *out, hx_error *e) {
    if (!base || !out || n < 1 || !adapters || !scales) return hx_err(e, HX_ERR_ARG, "merge: a base, an output and adapters are required");
    struct stat sb;
    if (stat(base, &sb) == 0 && S_ISDIR(sb.st_mode))
        return hx_err(e, HX_ERR_UNSUPPORTED, "merge: %s is a folder; the merge writes a copy of a GGUF base", base);
    hx_model *m = NULL;
    hx_status st = hx_model_load(base, NULL, &m, e);
    if (st) return st;
    struct hx_adapter **ad = calloc((size_t)n, sizeof *ad);
    int ni = n_idx(m);
    merge_job *jobs = calloc((size_t)ni, sizeof *jobs);
    hx_gguf_writer *w = hx_gguf_writer_new(0);
    if (!ad || !jobs || !w) { st = hx_err(e, HX_ERR_NOMEM, "merge: out of memory"); goto out; }
    for (int k = 0; k < n && !st; k++) st = hx_lora_load(m, adapters[k], &ad[k], e);
    if (st) goto out;
    for (int k = 0; k < n; k++)
        if (ad[k]->tok_embd.rank && m->cfg.tied_output) {
            st = hx_err(e, HX_ERR_UNSUPPORTED, "merge: %s adapts token_embd, which %s ties to the output head: merging "
                        "would change the output too (apply it at run time instead)", adapters[k], base);
            goto out;
        }
    for (uint64_t i = 0; i < m->gguf->n_kv && !st; i++) st = hx_gguf_writer_copy_kv(w, &m->gguf->kv[i]);
    if (st) { st = hx_err(e, st, "merge: %s: cannot copy its metadata", base); goto out; }
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const hx_gguf_tensor *t = &m->gguf->tensors[i];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 200 ? t->name.len : 200), t->name.ptr);
        int idx = idx_of_name(m, t->name.ptr, (size_t)t->name.len);
        bool adapted = false;
        for (int k = 0; idx >= 0 && k < n; k++) adapted |= w_at(ad[k], idx)->rank > 0;
        if (!adapted) {
            hx_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data);
            continue;
        }
        merge_job *j = &jobs[idx];
        *j = (merge_job){ m, base_of(m, idx), idx, f32_out ? HX_TYPE_F32 : t->type, ad, scales, n };
        hx_gguf_writer_add_tensor_cb(w, name, j->type, t->n_dims, t->ne, merge_fill, j);
    }
    st = hx_gguf_writer_write(w, out, e);
out:
    hx_gguf_writer_free(w);
    if (ad) for (int k = 0; k < n; k++) hx_lora_release(ad[k]);
    free(ad);
    free(jobs);
    hx_model_free(m);
    return st;
}
