/* hf.c — load a Hugging Face model folder: config.json + safetensors (+ tokenizer.json).
 *
 * safetensors layout: header_len u64 LE | header JSON (header_len bytes) | data.
 * The JSON maps each tensor name to {"dtype": "F32"|"F16"|"BF16"|..., "shape":
 * [..], "data_offsets": [begin, end]} relative to the data section, plus an
 * optional "__metadata__". A sharded model lists its files in
 * model.safetensors.index.json ({"weight_map": {tensor: file}}); every shard
 * is mapped and a tensor is looked up in each header in turn.
 *
 * PyTorch Linear weights are [out, in] row-major, which is GGUF's ne[0] = in,
 * ne[1] = out: matrices are used in place (zero-copy) unless quantize-on-load
 * asks for a conversion. Differences from a llama.cpp GGUF of the same model:
 * - rotary embedding: HF rotates the halves (x[i], x[i + hd/2]) of every head
 *   for llama, qwen2, qwen3 and gemma3 alike; llama.cpp's converter permutes
 *   llama's Q/K rows to adjacent pairs and runs NORM rope. We keep the rows and
 *   run NEOX rope, which is the same function.
 * - gemma's RMSNorm multiplies by (1 + w); the converter bakes the +1 in. We
 *   add it once at load into owned f32 copies (norm_add_one stays false, so
 *   the backends see the same kind of weights as from a GGUF).
 *
 * Name map (P = "model.", or "model.language_model." / "language_model.model."
 * for gemma3's multimodal checkpoints):
 *   P embed_tokens.weight  -> tok_embd        lm_head.weight -> output (absent: tied)
 *   P norm.weight          -> output_norm
 *   P layers.N.input_layernorm          -> attn_norm
 *   P layers.N.self_attn.{q,k,v,o}_proj -> wq wk wv wo (+ .bias -> bq bk bv bo)
 *   P layers.N.self_attn.{q,k}_norm     -> q_norm k_norm (qwen3, gemma3)
 *   P layers.N.post_attention_layernorm -> ffn_norm (llama, qwen) / attn_post_norm (gemma3)
 *   P layers.N.pre_feedforward_layernorm, post_feedforward_layernorm -> ffn_norm, ffn_post_norm (gemma3)
 *   P layers.N.mlp.{gate,up,down}_proj  -> ffn_gate ffn_up ffn_down
 */
#include "model/model.h"
#include "core/core.h"
#include "core/pool.h"
#include "quant/quant.h"
#include "tok/tok.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_MAX_SHARDS 1024
#define HF_PATH_MAX 1200

/* ---------------------------------------------------------------- store */

typedef struct hf_shard {
    char path[HF_PATH_MAX];
    uint8_t *map;
    size_t size;
    uint64_t data_off;
    cJSON *header;      /* only while loading */
} hf_shard;

struct hx_hf_store {
    hf_shard *shards;
    int n_shards;
    void **owned;       /* tensor names and converted tensors */
    size_t n_owned, cap_owned;
};

void hx_hf_store_free(struct hx_hf_store *s) {
    if (!s) return;
    for (int i = 0; i < s->n_shards; i++) {
        if (s->shards[i].map) munmap(s->shards[i].map, s->shards[i].size);
        cJSON_Delete(s->shards[i].header);
    }
    for (size_t i = 0; i < s->n_owned; i++) free(s->owned[i]);
    free(s->owned);
    free(s->shards);
    free(s);
}

/* Keep p (malloc'ed) until the model is freed; frees it and returns NULL when the list cannot grow. */
static void *own(struct hx_hf_store *s, void *p) {
    if (!p) return NULL;
    if (s->n_owned == s->cap_owned) {
        size_t nc = s->cap_owned ? s->cap_owned * 2 : 256;
        void **q = realloc(s->owned, nc * sizeof *q);
        if (!q) { free(p); return NULL; }
        s->owned = q; s->cap_owned = nc;
    }
    s->owned[s->n_owned++] = p;
    return p;
}

/* Map one safetensors file and parse its header. */
static hx_status shard_open(hf_shard *f, bool prefault, hx_error *e) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return hx_err(e, HX_ERR_IO, "%s: cannot open: %s", f->path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 8) {
        close(fd);
        return hx_err(e, HX_ERR_FORMAT, "%s: too small to be safetensors", f->path);
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | (prefault ? MAP_POPULATE : 0), fd, 0);
    close(fd);
    if (map == MAP_FAILED) return hx_err(e, HX_ERR_IO, "%s: mmap failed: %s", f->path, strerror(errno));
    f->map = map;
    f->size = (size_t)sb.st_size;
    uint64_t hlen;
    memcpy(&hlen, f->map, 8);
    if (hlen > f->size - 8 || hlen > (100u << 20))
        return hx_err(e, HX_ERR_FORMAT, "%s: offset 0: header length %llu exceeds the file", f->path, (unsigned long long)hlen);
    f->data_off = 8 + hlen;
    f->header = cJSON_ParseWithLength((const char *)f->map + 8, (size_t)hlen);
    if (!cJSON_IsObject(f->header)) return hx_err(e, HX_ERR_FORMAT, "%s: offset 8: header is not a JSON object", f->path);
    return HX_OK;
}

static hx_status read_json(const char *path, cJSON **out, hx_error *e) {
    char *txt = NULL;
    size_t n;
    *out = NULL;
    hx_status st = hx_read_file(path, &txt, &n, e);
    if (st) return st;
    *out = cJSON_ParseWithLength(txt, n);
    free(txt);
    if (!cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return hx_err(e, HX_ERR_FORMAT, "%s: not a JSON object", path);
    }
    return HX_OK;
}

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Open model.safetensors, or every shard named by model.safetensors.index.json. */
static hx_status store_open(const char *dir, bool prefault, struct hx_hf_store **out, hx_error *e) {
    struct hx_hf_store *s = calloc(1, sizeof *s);
    if (!s) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", dir);
    *out = s;
    char path[HF_PATH_MAX];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    cJSON *idx = NULL;
    hx_status st = HX_OK;
    if (file_exists(path)) {
        if ((st = read_json(path, &idx, e))) return st;
        const cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map"), *it;
        if (!cJSON_IsObject(wm) || !wm->child) {
            cJSON_Delete(idx);
            return hx_err(e, HX_ERR_FORMAT, "%s: no \"weight_map\" object", path);
        }
        s->shards = calloc(HF_MAX_SHARDS, sizeof *s->shards);
        if (!s->shards) { cJSON_Delete(idx); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
        cJSON_ArrayForEach(it, wm) {
            const char *fn = cJSON_GetStringValue(it);
            /* a plain file name inside the folder: no directories, no "..", no hidden files */
            if (!fn || !*fn || strchr(fn, '/') || fn[0] == '.') {
                st = hx_err(e, HX_ERR_FORMAT, "%s: weight_map[\"%s\"] is not a file name in the folder", path,
                            it->string ? it->string : "?");
                break;
            }
            char full[HF_PATH_MAX];
            snprintf(full, sizeof full, "%s/%s", dir, fn);
            bool seen = false;
            for (int i = 0; i < s->n_shards && !seen; i++) seen = !strcmp(s->shards[i].path, full);
            if (seen) continue;
            if (s->n_shards == HF_MAX_SHARDS) { st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: more than %d shards", path, HF_MAX_SHARDS); break; }
            hf_shard *f = &s->shards[s->n_shards++];
            snprintf(f->path, sizeof f->path, "%s", full);
            if ((st = shard_open(f, prefault, e))) break;
        }
        cJSON_Delete(idx);
        return st;
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!file_exists(path))
        return hx_err(e, HX_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json in the folder", dir);
    s->shards = calloc(1, sizeof *s->shards);
    if (!s->shards) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", dir);
    s->n_shards = 1;
    snprintf(s->shards[0].path, sizeof s->shards[0].path, "%s", path);
    return shard_open(&s->shards[0], prefault, e);
}

/* A JSON number usable as a size or id: integral-range, non-negative; -1 otherwise (no undefined casts). */
static int64_t jdim(const cJSON *v) {
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 9007199254740992.0 ? (int64_t)v->valuedouble : -1;
}

static const cJSON *store_find(const struct hx_hf_store *s, const char *name, const hf_shard **sh) {
    for (int i = 0; i < s->n_shards; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(s->shards[i].header, name);
        if (it) { *sh = &s->shards[i]; return it; }
    }
    return NULL;
}

/* Shape [rows, cols] of a stored 1-D / 2-D tensor; false when absent or of another rank. */
static bool store_shape(const struct hx_hf_store *s, const char *name, int64_t *rows, int64_t *cols) {
    const hf_shard *sh;
    const cJSON *it = store_find(s, name, &sh), *shp = cJSON_GetObjectItemCaseSensitive(it, "shape");
    int nd = cJSON_GetArraySize(shp);
    if (!it || !cJSON_IsArray(shp) || nd < 1 || nd > 2) return false;
    *rows = nd == 2 ? jdim(cJSON_GetArrayItem(shp, 0)) : 1;
    *cols = jdim(cJSON_GetArrayItem(shp, nd - 1));
    return true;
}

/* ---------------------------------------------------------------- binding */

typedef enum { T_MAT, T_EMBD, T_OUT, T_NORM, T_VEC } hf_kind;

typedef struct hf_load {
    hx_model *m;
    struct hx_hf_store *s;
    hx_hf_opts o;
    bool norm_add_one;      /* gemma: store 1 + w */
    hx_pool *pool;          /* quantize-on-load threads, NULL = the calling thread only */
    uint64_t done, total;   /* progress, bytes of stored tensors */
} hf_load;

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every third in between. */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* Target type of a matrix under quantize-on-load; 0 = keep as stored.
 * q4_k_m follows llama.cpp's choice for LLAMA_FTYPE_MOSTLY_Q4_K_M (no imatrix). */
static int quant_target(const hf_load *L, hf_kind kind, const char *role, int layer, int64_t ne0) {
    if (!L->o.quant || kind == T_NORM || kind == T_VEC) return 0;
    int t = L->o.quant;
    if (t == HX_TYPE_Q4_K) {
        bool tied_out = kind == T_EMBD && L->m->cfg.tied_output;
        if (kind == T_OUT || tied_out) t = HX_TYPE_Q6_K;
        else if (role && (!strcmp(role, "attn_v") || !strcmp(role, "ffn_down")) && more_bits(layer, L->m->cfg.n_layer))
            t = HX_TYPE_Q6_K;
        if (ne0 % 256) t = t == HX_TYPE_Q6_K ? HX_TYPE_Q8_0 : HX_TYPE_Q5_0; /* llama.cpp's fallbacks */
    }
    return ne0 % 32 ? 0 : t;
}

/* Converting a tensor: stored rows (type) -> f32 (+1 for gemma norms) -> rows of `to`. */
typedef struct conv_job {
    int type, to;
    bool add_one, misaligned;
    const uint8_t *src;
    uint8_t *dst;
    size_t irow, orow;
    int64_t ne0, rows;
    float *scratch;         /* (threads, ne0) */
    _Atomic bool failed;
} conv_job;

#define CONV_CHUNK 16

static void conv_task(void *ctx, int64_t task, int thread) {
    conv_job *j = ctx;
    float *row = j->scratch + (size_t)thread * (size_t)j->ne0;
    size_t esz = j->type == HX_TYPE_F32 ? 4 : 2;
    int64_t r1 = (task + 1) * CONV_CHUNK < j->rows ? (task + 1) * CONV_CHUNK : j->rows;
    for (int64_t r = task * CONV_CHUNK; r < r1; r++) {
        const uint8_t *in = j->src + (size_t)r * j->irow;
        uint8_t *out = j->dst + (size_t)r * j->orow;
        if (j->to == j->type && !j->add_one) { memcpy(out, in, j->irow); continue; }
        if (j->misaligned && j->type != HX_TYPE_F32) { /* dequantize reads 16-bit values: one aligned copy each */
            for (int64_t i = 0; i < j->ne0; i++) {
                uint16_t h;
                memcpy(&h, in + (size_t)i * esz, esz);
                hx_dequantize_row(j->type, &h, row + i, 1);
            }
        } else if (j->misaligned) {
            memcpy(row, in, j->irow);
        } else {
            hx_dequantize_row(j->type, in, row, j->ne0);
        }
        if (j->add_one) for (int64_t i = 0; i < j->ne0; i++) row[i] += 1.0f;
        if (j->to == HX_TYPE_F32) memcpy(out, row, j->orow);
        else if (hx_quantize_row(j->to, row, out, j->ne0) != j->orow) j->failed = true;
    }
}

/* Bind `name` expecting GGUF-style shape (ne0, ne1) (ne1 = 0: 1-D). Not required and absent:
 * t->data stays NULL. Converts (gemma norms, quantize-on-load, misaligned data) into owned memory. */
static hx_status bind(hf_load *L, hx_tensor *t, const char *name, bool required, int64_t ne0, int64_t ne1,
                      hf_kind kind, const char *role, int layer, hx_error *e) {
    memset(t, 0, sizeof *t);
    const hf_shard *f = NULL;
    const cJSON *it = store_find(L->s, name, &f);
    if (!it) return required ? hx_err(e, HX_ERR_FORMAT, "%s: missing tensor '%s'", L->s->shards[0].path, name) : HX_OK;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s': malformed header entry", f->path, name);
    int type = !strcmp(dt->valuestring, "F32") ? HX_TYPE_F32 : !strcmp(dt->valuestring, "F16") ? HX_TYPE_F16
             : !strcmp(dt->valuestring, "BF16") ? HX_TYPE_BF16 : -1;
    if (type < 0)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16, BF16 supported)", f->path, name,
                      dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    int64_t want_rows = ne1 ? ne1 : 1;
    int64_t rows = nd == 2 ? jdim(cJSON_GetArrayItem(sh, 0)) : 1;
    int64_t cols = nd >= 1 ? jdim(cJSON_GetArrayItem(sh, nd - 1)) : 0;
    if (nd < 1 || nd > 2 || (ne1 && nd != 2) || cols != ne0 || rows != want_rows)
        return hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", f->path, name,
                      (long long)rows, (long long)cols, (long long)want_rows, (long long)ne0);
    int64_t b = jdim(cJSON_GetArrayItem(off, 0)), en = jdim(cJSON_GetArrayItem(off, 1));
    uint64_t need = hx_row_size(type, ne0) * (uint64_t)want_rows;
    if (b < 0 || en < b || (uint64_t)(en - b) != need || (uint64_t)en > f->size - f->data_off)
        return hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] do not fit its shape or the file",
                      f->path, name, (long long)b, (long long)en);
    t->type = type;
    t->ne[0] = ne0; t->ne[1] = want_rows; t->ne[2] = t->ne[3] = 1;
    t->data = f->map + f->data_off + (uint64_t)b;
    t->name = own(L->s, strdup(name));
    if (!t->name) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", f->path);

    int qt = quant_target(L, kind, role, layer, ne0);
    bool add_one = kind == T_NORM && L->norm_add_one;
    size_t esz = type == HX_TYPE_F32 ? 4 : 2;
    bool misaligned = (uintptr_t)t->data % esz != 0;
    if (qt || add_one || misaligned) {
        conv_job j = {.type = type, .to = qt ? qt : add_one ? HX_TYPE_F32 : type, .add_one = add_one,
                      .misaligned = misaligned, .src = t->data, .ne0 = ne0, .rows = want_rows};
        j.irow = hx_row_size(type, ne0);
        j.orow = hx_row_size(j.to, ne0);
        j.dst = own(L->s, malloc(j.orow * (size_t)want_rows));
        if (!j.dst) return hx_err(e, HX_ERR_NOMEM, "%s: tensor '%s': out of memory", f->path, name);
        /* the quantizers are slow (Q4_K searches scales): rows in chunks over the pool */
        int nthr = L->pool ? hx_pool_threads(L->pool) : 1;
        j.scratch = calloc((size_t)nthr * (size_t)ne0, sizeof(float));
        if (!j.scratch) return hx_err(e, HX_ERR_NOMEM, "%s: tensor '%s': out of memory", f->path, name);
        hx_pool_run(want_rows >= 2 * CONV_CHUNK ? L->pool : NULL, (want_rows + CONV_CHUNK - 1) / CONV_CHUNK, conv_task, &j);
        free(j.scratch);
        if (j.failed)
            return hx_err(e, HX_ERR_UNSUPPORTED, "%s: tensor '%s': cannot quantize to %s", f->path, name, hx_type_name(j.to));
        t->type = j.to;
        t->data = j.dst;
    }
    L->done += need;
    if (L->o.progress) L->o.progress(L->o.progress_user, L->done, L->total);
    return HX_OK;
}

/* ---------------------------------------------------------------- config */

static bool num(const cJSON *o, const char *key, double *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(it)) return false;
    *v = it->valuedouble;
    return true;
}
static int num_int(const cJSON *o, const char *key, int dflt) {
    double v;
    return num(o, key, &v) && v >= 0 && v < 2147483647.0 ? (int)v : dflt;
}
static const char *str(const cJSON *o, const char *key) { return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, key)); }

/* One rope parameter set (rope_scaling of transformers 4, an entry of rope_parameters of 5):
 * theta when given, and the linear factor. Other scaling types are refused. */
static hx_status rope_params(const cJSON *p, const char *path, const char *what, float *theta, float *scale, hx_error *e) {
    if (!cJSON_IsObject(p)) return HX_OK;
    double v;
    if (num(p, "rope_theta", &v) && v > 0) *theta = (float)v;
    const char *ty = str(p, "rope_type");
    if (!ty) ty = str(p, "type");
    if (!ty || !strcmp(ty, "default")) return HX_OK;
    if (strcmp(ty, "linear"))
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: %s type '%s' is not supported (default or linear)", path, what, ty);
    if (!num(p, "factor", &v) || !(v > 0))
        return hx_err(e, HX_ERR_FORMAT, "%s: %s: linear scaling without a positive factor", path, what);
    *scale = (float)v;
    return HX_OK;
}

static const struct { const char *model_type; hx_arch arch; bool tie_default; } k_hf_archs[] = {
    {"llama", HX_ARCH_LLAMA, false}, {"qwen2", HX_ARCH_QWEN2, false}, {"qwen3", HX_ARCH_QWEN3, false},
    {"gemma3_text", HX_ARCH_GEMMA3, true}, {"gemma3", HX_ARCH_GEMMA3, true},
};

/* config.json of a decoder -> cfg (n_vocab from the embedding later). */
static hx_status decoder_config(const cJSON *root, const char *path, hx_model_config *c, bool *tie, hx_error *e) {
    const char *mt = str(root, "model_type");
    const cJSON *tc = root;
    int k = -1;
    for (size_t i = 0; i < sizeof k_hf_archs / sizeof k_hf_archs[0]; i++)
        if (mt && !strcmp(mt, k_hf_archs[i].model_type)) k = (int)i;
    if (k < 0)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: model_type '%s' is not supported (llama, qwen2, qwen3, gemma3_text, gemma3, bert)",
                      path, mt ? mt : "?");
    if (!strcmp(mt, "gemma3")) { /* Gemma3ForConditionalGeneration: the language model's settings */
        tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
        if (!cJSON_IsObject(tc)) return hx_err(e, HX_ERR_FORMAT, "%s: model_type gemma3 without a text_config object", path);
    }
    c->arch = k_hf_archs[k].arch;
    snprintf(c->arch_name, sizeof c->arch_name, "%s", hx_arch_name(c->arch));
    c->n_layer = num_int(tc, "num_hidden_layers", 0);
    c->n_embd = num_int(tc, "hidden_size", 0);
    c->n_head = num_int(tc, "num_attention_heads", 0);
    c->n_head_kv = num_int(tc, "num_key_value_heads", c->n_head);
    c->n_ff = num_int(tc, "intermediate_size", 0);
    c->n_ctx_train = num_int(tc, "max_position_embeddings", 2048);
    c->head_dim = num_int(tc, "head_dim", c->n_head > 0 ? c->n_embd / c->n_head : 0);
    if (c->n_layer < 1 || c->n_layer > HX_MAX_LAYERS || c->n_embd < 1 || c->n_head < 1 || c->n_head > 1024 ||
        c->n_head_kv < 1 || c->n_head % c->n_head_kv || c->n_ff < 1 || c->head_dim < 2 || c->head_dim > 4096 ||
        c->head_dim % 2 || c->n_ctx_train < 1)
        return hx_err(e, HX_ERR_FORMAT, "%s: implausible config (layers %d, hidden %d, heads %d/%d, head_dim %d, ffn %d)",
                      path, c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->head_dim, c->n_ff);
    double v;
    bool gemma = c->arch == HX_ARCH_GEMMA3;
    c->norm_eps = num(tc, "rms_norm_eps", &v) && v > 0 ? (float)v : 1e-6f;
    const char *act = str(tc, "hidden_activation");
    if (!act) act = str(tc, "hidden_act");
    if (!act) act = gemma ? "gelu_pytorch_tanh" : "silu";
    if (!strcmp(act, "silu") || !strcmp(act, "swish")) c->act = HX_ACT_SILU;
    else if (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_tanh") || !strcmp(act, "gelu_new")) c->act = HX_ACT_GELU_TANH;
    else return hx_err(e, HX_ERR_UNSUPPORTED, "%s: hidden activation '%s' is not supported (silu, gelu_pytorch_tanh)", path, act);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tc, "use_bidirectional_attention")))
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: use_bidirectional_attention = true (an embedding model) is not supported", path);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tc, "mlp_bias")))
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: mlp_bias = true is not supported", path);
    /* rope: rope_theta (+ rope_local_base_freq for gemma3's sliding layers) and rope_scaling (transformers 4),
     * or rope_parameters, per layer kind for gemma3 (transformers 5) */
    c->rope_base = num(tc, "rope_theta", &v) && v > 0 ? (float)v : 10000.0f;
    c->rope_base_swa = gemma ? (num(tc, "rope_local_base_freq", &v) && v > 0 ? (float)v : 10000.0f) : c->rope_base;
    c->rope_scale = 1.0f;
    float swa_scale = 1.0f;
    hx_status st;
    if ((st = rope_params(cJSON_GetObjectItemCaseSensitive(tc, "rope_scaling"), path, "rope_scaling", &c->rope_base,
                          &c->rope_scale, e)))
        return st;
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(tc, "rope_parameters");
    const cJSON *rfull = cJSON_GetObjectItemCaseSensitive(rp, "full_attention");
    const cJSON *rswa = cJSON_GetObjectItemCaseSensitive(rp, "sliding_attention");
    if (rfull || rswa) {
        if ((st = rope_params(rfull, path, "rope_parameters.full_attention", &c->rope_base, &c->rope_scale, e))) return st;
        if ((st = rope_params(rswa, path, "rope_parameters.sliding_attention", &c->rope_base_swa, &swa_scale, e))) return st;
    } else if ((st = rope_params(rp, path, "rope_parameters", &c->rope_base, &c->rope_scale, e))) {
        return st;
    }
    if (!gemma) c->rope_base_swa = c->rope_base;
    /* Gemma 3 4B+ scales only the global layers' positions (rope_scaling of transformers 4 is the global
     * rotary's; the local one is default with rope_local_base_freq) */
    c->rope_scale_swa = gemma ? swa_scale : c->rope_scale;
    c->rope_style = HX_ROPE_NEOX;
    /* sliding window: layer_types when given, else gemma3's every-Nth-is-global pattern, qwen2's max_window_layers */
    c->sliding_window = num_int(tc, "sliding_window", 0);
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(tc, "layer_types");
    bool any_swa = false;
    if (cJSON_IsArray(lt)) {
        if (cJSON_GetArraySize(lt) != c->n_layer)
            return hx_err(e, HX_ERR_FORMAT, "%s: layer_types has %d entries for %d layers", path, cJSON_GetArraySize(lt), c->n_layer);
        for (int il = 0; il < c->n_layer; il++) {
            const char *ty = cJSON_GetStringValue(cJSON_GetArrayItem(lt, il));
            if (!ty || (strcmp(ty, "sliding_attention") && strcmp(ty, "full_attention")))
                return hx_err(e, HX_ERR_UNSUPPORTED, "%s: layer_types[%d] = '%s' (sliding_attention or full_attention)", path, il, ty ? ty : "?");
            any_swa |= c->layer_is_swa[il] = !strcmp(ty, "sliding_attention");
        }
    } else if (gemma) {
        c->swa_pattern = num_int(tc, "sliding_window_pattern", 6);
        for (int il = 0; il < c->n_layer; il++)
            any_swa |= c->layer_is_swa[il] = c->swa_pattern > 0 && (il + 1) % c->swa_pattern != 0;
    } else if (c->arch == HX_ARCH_QWEN2 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(tc, "use_sliding_window"))) {
        int from = num_int(tc, "max_window_layers", c->n_layer);
        for (int il = from; il < c->n_layer; il++) any_swa = c->layer_is_swa[il] = true;
    }
    if (!any_swa || c->sliding_window <= 0) {
        c->sliding_window = 0;
        for (int il = 0; il < c->n_layer; il++) c->layer_is_swa[il] = false;
    } else if (gemma && !c->swa_pattern) {
        c->swa_pattern = 6;
    }
    switch (c->arch) {
    case HX_ARCH_QWEN2: c->qkv_bias = true; break;
    case HX_ARCH_QWEN3: c->qk_norm = true; break;
    case HX_ARCH_GEMMA3: c->qk_norm = c->post_norms = c->embd_scale = true; break;
    default: break;
    }
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (gemma && num(tc, "query_pre_attn_scalar", &v) && v > 0) c->attn_scale = (float)(1.0 / sqrt(v));
    if (num(tc, "final_logit_softcapping", &v) && v > 0) c->final_logit_softcap = (float)v;
    /* gemma3's config carries attn_logit_softcapping, but transformers' Gemma3 attention never applies it
     * (Gemma 2's did), nor does llama.cpp's gemma3: follow them */
    if (!gemma && num(tc, "attn_logit_softcapping", &v) && v > 0) c->attn_logit_softcap = (float)v;
    const cJSON *tw = cJSON_GetObjectItemCaseSensitive(tc, "tie_word_embeddings");
    if (!tw) tw = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    *tie = cJSON_IsBool(tw) ? cJSON_IsTrue(tw) : k_hf_archs[k].tie_default;
    return HX_OK;
}

/* ---------------------------------------------------------------- loaders */

/* sentence-transformers pooling from DIR/1_Pooling/config.json: 1 mean (also when the file is absent), 2 CLS;
 * other modes (max, mean-sqrt-len, last token, weighted mean) are refused rather than silently changed. */
static hx_status st_pooling(const char *dir, int *pooling, hx_error *e) {
    char path[HF_PATH_MAX];
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    *pooling = 1;
    if (!file_exists(path)) return HX_OK;
    cJSON *pc;
    hx_status st = read_json(path, &pc, e);
    if (st) return st;
    int mean = 0, cls = 0, other = 0;
    for (const cJSON *it = pc->child; it; it = it->next) {
        if (!it->string || strncmp(it->string, "pooling_mode_", 13) || !cJSON_IsTrue(it)) continue;
        if (!strcmp(it->string, "pooling_mode_mean_tokens")) mean++;
        else if (!strcmp(it->string, "pooling_mode_cls_token")) cls++;
        else other++;
    }
    cJSON_Delete(pc);
    if (other || mean + cls > 1)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: pooling must be exactly one of mean or CLS", path);
    *pooling = cls ? 2 : 1;
    return HX_OK;
}

static hx_status load_bert(hf_load *L, const cJSON *cfg, const char *dir, const char *path, hx_error *e) {
    hx_model *m = L->m;
    hx_model_config *c = &m->cfg;
    c->arch = HX_ARCH_BERT;
    strcpy(c->arch_name, "bert");
    c->n_layer = num_int(cfg, "num_hidden_layers", 0);
    c->n_embd = num_int(cfg, "hidden_size", 0);
    c->n_head = c->n_head_kv = num_int(cfg, "num_attention_heads", 0);
    c->n_ff = num_int(cfg, "intermediate_size", 0);
    c->n_vocab = num_int(cfg, "vocab_size", 0);
    c->n_ctx_train = num_int(cfg, "max_position_embeddings", 512);
    int n_types = num_int(cfg, "type_vocab_size", 2);
    double v;
    c->norm_eps = num(cfg, "layer_norm_eps", &v) ? (float)v : 1e-12f;
    const char *act = str(cfg, "hidden_act");
    if (act && strcmp(act, "gelu")) return hx_err(e, HX_ERR_UNSUPPORTED, "%s: hidden_act must be gelu", path);
    if (c->n_layer < 1 || c->n_layer > HX_MAX_LAYERS || c->n_embd < 1 || c->n_head < 1 || c->n_embd % c->n_head ||
        c->n_ff < 1 || c->n_vocab < 1 || c->n_ctx_train < 1 || n_types < 1)
        return hx_err(e, HX_ERR_FORMAT, "%s: implausible BERT config (layers %d, hidden %d, heads %d, ffn %d, vocab %d)",
                      path, c->n_layer, c->n_embd, c->n_head, c->n_ff, c->n_vocab);
    c->head_dim = c->n_embd / c->n_head;
    c->norm_is_layernorm = true; c->qkv_bias = true; c->act = HX_ACT_GELU_ERF;
    hx_status st;
    if ((st = st_pooling(dir, &c->pooling, e))) return st;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    c->rope_scale = c->rope_scale_swa = 1.0f;
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", dir);
    const hf_shard *sh;
    const int64_t E = c->n_embd, F = c->n_ff;
    char nm[192];
    /* each tensor with or without the "bert." prefix (exports mix them) */
#define BIND(t, name, a, b, kind) do { snprintf(nm, sizeof nm, "%s", name); \
        if (!store_find(L->s, nm, &sh)) snprintf(nm, sizeof nm, "bert.%s", name); \
        if (!store_find(L->s, nm, &sh)) snprintf(nm, sizeof nm, "%s", name); \
        if ((st = bind(L, (t), nm, true, (a), (b), (kind), NULL, 0, e))) return st; } while (0)
    BIND(&m->tok_embd, "embeddings.word_embeddings.weight", E, c->n_vocab, T_EMBD);
    BIND(&m->pos_embd, "embeddings.position_embeddings.weight", E, c->n_ctx_train, T_VEC);
    BIND(&m->type_embd, "embeddings.token_type_embeddings.weight", E, n_types, T_VEC);
    BIND(&m->embd_norm, "embeddings.LayerNorm.weight", E, 0, T_VEC);
    BIND(&m->embd_norm_b, "embeddings.LayerNorm.bias", E, 0, T_VEC);
    for (int il = 0; il < c->n_layer; il++) {
        hx_layer_weights *W = &m->layers[il];
        char ln[160];
#define LB(field, suffix, a, b, kind) do { snprintf(ln, sizeof ln, "encoder.layer.%d.%s", il, suffix); BIND(&W->field, ln, a, b, kind); } while (0)
        LB(wq, "attention.self.query.weight", E, E, T_MAT); LB(bq, "attention.self.query.bias", E, 0, T_VEC);
        LB(wk, "attention.self.key.weight", E, E, T_MAT);   LB(bk, "attention.self.key.bias", E, 0, T_VEC);
        LB(wv, "attention.self.value.weight", E, E, T_MAT); LB(bv, "attention.self.value.bias", E, 0, T_VEC);
        LB(wo, "attention.output.dense.weight", E, E, T_MAT); LB(bo, "attention.output.dense.bias", E, 0, T_VEC);
        LB(attn_post_norm, "attention.output.LayerNorm.weight", E, 0, T_VEC);
        LB(attn_post_norm_b, "attention.output.LayerNorm.bias", E, 0, T_VEC);
        LB(ffn_up, "intermediate.dense.weight", E, F, T_MAT); LB(ffn_up_b, "intermediate.dense.bias", F, 0, T_VEC);
        LB(ffn_down, "output.dense.weight", F, E, T_MAT);     LB(ffn_down_b, "output.dense.bias", E, 0, T_VEC);
        LB(ffn_post_norm, "output.LayerNorm.weight", E, 0, T_VEC);
        LB(ffn_post_norm_b, "output.LayerNorm.bias", E, 0, T_VEC);
#undef LB
    }
#undef BIND
    return HX_OK;
}

/* Binds a decoder's tensors; cfg already filled by decoder_config. */
static hx_status load_decoder(hf_load *L, bool tie, const char *path, hx_error *e) {
    hx_model *m = L->m;
    hx_model_config *c = &m->cfg;
    hx_status st;
    L->norm_add_one = c->arch == HX_ARCH_GEMMA3;
    /* tensor name prefix: text-only checkpoints use "model.", gemma3's multimodal ones nest the language model */
    static const char *const prefixes[] = {"model.", "model.language_model.", "language_model.model."};
    const char *P = NULL;
    char nm[256];
    int64_t V = 0, E = 0;
    for (size_t i = 0; i < 3 && !P; i++) {
        snprintf(nm, sizeof nm, "%sembed_tokens.weight", prefixes[i]);
        if (store_shape(L->s, nm, &V, &E)) P = prefixes[i];
    }
    if (!P) return hx_err(e, HX_ERR_FORMAT, "%s: no embed_tokens.weight (model., model.language_model. or language_model.model.)",
                          L->s->shards[0].path);
    if (V < 1 || V >= (1 << 30)) return hx_err(e, HX_ERR_FORMAT, "%s: %s has %lld rows", L->s->shards[0].path, nm, (long long)V);
    c->n_vocab = (int)V;  /* the embedding decides; config.json's vocab_size may be padded differently */
    const hf_shard *sh;
    const char *head = store_find(L->s, "lm_head.weight", &sh) ? "lm_head.weight"
                     : store_find(L->s, "language_model.lm_head.weight", &sh) ? "language_model.lm_head.weight" : NULL;
    c->tied_output = tie || !head;
    if (!tie && !head)
        return hx_err(e, HX_ERR_FORMAT, "%s: tie_word_embeddings is false but there is no lm_head.weight", path);
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->layers) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    const int64_t D = c->n_embd, Q = (int64_t)c->n_head * c->head_dim, KV = (int64_t)c->n_head_kv * c->head_dim, F = c->n_ff;
    if ((st = bind(L, &m->tok_embd, nm, true, D, V, T_EMBD, NULL, 0, e))) return st;
    snprintf(nm, sizeof nm, "%snorm.weight", P);
    if ((st = bind(L, &m->output_norm, nm, true, D, 0, T_NORM, NULL, 0, e))) return st;
    if (c->tied_output) m->output = m->tok_embd;
    else if ((st = bind(L, &m->output, head, true, D, V, T_OUT, NULL, 0, e))) return st;
    const bool gemma = c->arch == HX_ARCH_GEMMA3;
    for (int il = 0; il < c->n_layer; il++) {
        hx_layer_weights *W = &m->layers[il];
#define B(field, suffix, req, a, b, kind, role) do { snprintf(nm, sizeof nm, "%slayers.%d.%s", P, il, suffix); \
        if ((st = bind(L, &W->field, nm, (req), (a), (b), (kind), (role), il, e))) return st; } while (0)
        B(attn_norm, "input_layernorm.weight", true, D, 0, T_NORM, NULL);
        B(wq, "self_attn.q_proj.weight", true, D, Q, T_MAT, "attn_q");
        B(wk, "self_attn.k_proj.weight", true, D, KV, T_MAT, "attn_k");
        B(wv, "self_attn.v_proj.weight", true, D, KV, T_MAT, "attn_v");
        B(wo, "self_attn.o_proj.weight", true, Q, D, T_MAT, "attn_output");
        B(bq, "self_attn.q_proj.bias", c->qkv_bias, Q, 0, T_VEC, NULL);
        B(bk, "self_attn.k_proj.bias", c->qkv_bias, KV, 0, T_VEC, NULL);
        B(bv, "self_attn.v_proj.bias", c->qkv_bias, KV, 0, T_VEC, NULL);
        B(bo, "self_attn.o_proj.bias", false, D, 0, T_VEC, NULL);
        B(q_norm, "self_attn.q_norm.weight", c->qk_norm, c->head_dim, 0, T_NORM, NULL);
        B(k_norm, "self_attn.k_norm.weight", c->qk_norm, c->head_dim, 0, T_NORM, NULL);
        if (gemma) {
            B(attn_post_norm, "post_attention_layernorm.weight", true, D, 0, T_NORM, NULL);
            B(ffn_norm, "pre_feedforward_layernorm.weight", true, D, 0, T_NORM, NULL);
            B(ffn_post_norm, "post_feedforward_layernorm.weight", true, D, 0, T_NORM, NULL);
        } else {
            B(ffn_norm, "post_attention_layernorm.weight", true, D, 0, T_NORM, NULL);
        }
        B(ffn_gate, "mlp.gate_proj.weight", true, D, F, T_MAT, "ffn_gate");
        B(ffn_up, "mlp.up_proj.weight", true, D, F, T_MAT, "ffn_up");
        B(ffn_down, "mlp.down_proj.weight", true, F, D, T_MAT, "ffn_down");
#undef B
        /* a llama with attention_bias has all four; the recipe adds whichever are present */
        if (W->bq.data || W->bk.data || W->bv.data) {
            if (!W->bq.data || !W->bk.data || !W->bv.data)
                return hx_err(e, HX_ERR_FORMAT, "%s: layer %d has some but not all of the q/k/v biases", path, il);
            c->qkv_bias = true;
        }
        if (c->qk_norm && (!W->q_norm.data || !W->k_norm.data))
            return hx_err(e, HX_ERR_FORMAT, "%s: layer %d lacks q_norm / k_norm", path, il);
    }
    return HX_OK;
}

hx_status hx_model_load_hf_ex(const char *dir, const hx_hf_opts *opts, hx_model **out, hx_error *e) {
    *out = NULL;
    hx_hf_opts o = opts ? *opts : (hx_hf_opts){0};
    if (o.quant && o.quant != HX_TYPE_Q8_0 && o.quant != HX_TYPE_Q4_K)
        return hx_err(e, HX_ERR_ARG, "%s: quantize-on-load type %s is not supported (q8_0, q4_k_m)", dir, hx_type_name(o.quant));
    char path[HF_PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    cJSON *cfg;
    hx_status st = read_json(path, &cfg, e);
    if (st) return st;
    hx_model *m = calloc(1, sizeof *m);
    if (!m) { cJSON_Delete(cfg); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", dir); }
    hf_load L = {.m = m, .o = o};
    if (o.quant && o.n_threads != 1 && !(L.pool = hx_pool_create(o.n_threads))) {
        cJSON_Delete(cfg);
        hx_model_free(m);
        return hx_err(e, HX_ERR_NOMEM, "%s: cannot start quantize threads", dir);
    }
    const char *mt = str(cfg, "model_type");
    bool bert = mt && !strcmp(mt, "bert"), tie = false;
    /* the config first: an unsupported model says so before any file is mapped */
    if (!bert && (st = decoder_config(cfg, path, &m->cfg, &tie, e))) goto done;
    if ((st = store_open(dir, o.prefault, &m->hf, e))) goto done;
    L.s = m->hf;
    for (int i = 0; i < L.s->n_shards; i++) L.total += L.s->shards[i].size - L.s->shards[i].data_off;
    st = bert ? load_bert(&L, cfg, dir, path, e) : load_decoder(&L, tie, path, e);
    const char *nm = str(cfg, "_name_or_path");
    snprintf(m->cfg.name, sizeof m->cfg.name, "%s", nm && *nm ? nm : dir);
done:
    hx_pool_free(L.pool);
    cJSON_Delete(cfg);
    if (m->hf)
        for (int i = 0; i < m->hf->n_shards; i++) { cJSON_Delete(m->hf->shards[i].header); m->hf->shards[i].header = NULL; }
    if (st) { hx_model_free(m); return st; }
    *out = m;
    return HX_OK;
}

hx_status hx_model_load_hf(const char *dir, hx_model **out, hx_error *e) { return hx_model_load_hf_ex(dir, NULL, out, e); }

/* ---------------------------------------------------------------- tokenizer */

/* A special token given as "text" or {"content": "text"} (tokenizer_config.json); -1 when absent or unknown. */
static int32_t special_id(const hx_tok *t, const cJSON *v) {
    const char *s = cJSON_IsString(v) ? v->valuestring : str(v, "content");
    return s ? hx_tok_find(t, s, strlen(s)) : -1;
}

hx_status hx_hf_tokenizer_load(const char *dir, hx_tok **tok, char **chat_template, hx_error *e) {
    *tok = NULL;
    if (chat_template) *chat_template = NULL;
    char path[HF_PATH_MAX];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    hx_tok *t = NULL;
    hx_status st;
    char alt[HF_PATH_MAX];
    snprintf(alt, sizeof alt, "%s/vocab.txt", dir);
    bool vocab_txt = file_exists(alt);
    st = file_exists(path) ? hx_tok_load_hf_json(path, &t, e) : HX_ERR_IO;
    if (st == HX_ERR_IO || (st == HX_ERR_UNSUPPORTED && vocab_txt)) {
        if (vocab_txt) {  /* BERT folders: tokenizer.json holds a WordPiece model; vocab.txt is the same vocabulary */
            st = hx_tok_load_vocab_txt(alt, &t, e);
        } else {          /* older folders carry only the SentencePiece model */
            snprintf(path, sizeof path, "%s/tokenizer.model", dir);
            if (!file_exists(path))
                return hx_err(e, HX_ERR_IO, "%s: neither tokenizer.json, vocab.txt nor tokenizer.model in the folder", dir);
            st = hx_tok_load_spm_model(path, &t, e);
        }
    }
    if (st) return st;
    char *tmpl = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (file_exists(path)) {
        cJSON *tc;
        if ((st = read_json(path, &tc, e))) { hx_tok_free(t); return st; }
        static const struct { const char *key; hx_tok_special which; } keys[] = {
            {"bos_token", HX_TOK_SPECIAL_BOS}, {"eos_token", HX_TOK_SPECIAL_EOS},
            {"unk_token", HX_TOK_SPECIAL_UNK}, {"pad_token", HX_TOK_SPECIAL_PAD}};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(tc, keys[i].key);
            if (!v) continue;
            if (cJSON_IsNull(v)) { hx_tok_set_special(t, keys[i].which, -1); continue; }
            int32_t id = special_id(t, v);
            if (id >= 0) hx_tok_set_special(t, keys[i].which, id);
        }
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(tc, "add_bos_token");
        const cJSON *ae = cJSON_GetObjectItemCaseSensitive(tc, "add_eos_token");
        hx_tok_set_add(t, cJSON_IsBool(ab) ? cJSON_IsTrue(ab) : hx_tok_adds_bos(t),
                       cJSON_IsBool(ae) ? cJSON_IsTrue(ae) : hx_tok_adds_eos(t));
        if (hx_tok_adds_bos(t) && hx_tok_bos(t) < 0) hx_tok_set_add(t, false, hx_tok_adds_eos(t));
        if (hx_tok_adds_eos(t) && hx_tok_eos(t) < 0) hx_tok_set_add(t, hx_tok_adds_bos(t), false);
        /* chat_template: a string, or a list of {name, template} where "default" is the one to use */
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(tc, "chat_template"), *it;
        if (cJSON_IsString(ct)) tmpl = strdup(ct->valuestring);
        else cJSON_ArrayForEach(it, ct) {
            const char *n = str(it, "name"), *s = str(it, "template");
            if (n && s && !strcmp(n, "default")) tmpl = strdup(s);
        }
        cJSON_Delete(tc);
    }
    /* transformers 5 writes the template to its own file */
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    if (file_exists(path)) {
        char *txt = NULL;
        size_t n;
        if ((st = hx_read_file(path, &txt, &n, e))) { free(tmpl); hx_tok_free(t); return st; }
        free(tmpl);
        tmpl = txt;
    }
    /* generation_config.json: eos_token_id may list several ids (e.g. end of text and end of turn) */
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    cJSON *gc = NULL;
    if (file_exists(path) && read_json(path, &gc, e) == HX_OK) {
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(gc, "eos_token_id"), *it;
        const cJSON *list = cJSON_IsArray(ids) ? ids : NULL;
        if (jdim(ids) >= 0 && jdim(ids) < hx_tok_n_vocab(t) && hx_tok_eos(t) < 0)
            hx_tok_set_special(t, HX_TOK_SPECIAL_EOS, (int32_t)jdim(ids));
        cJSON_ArrayForEach(it, list) {
            if (jdim(it) < 0 || jdim(it) >= hx_tok_n_vocab(t)) continue;
            int32_t id = (int32_t)jdim(it);
            if (hx_tok_eos(t) < 0) hx_tok_set_special(t, HX_TOK_SPECIAL_EOS, id);
            else if (id != hx_tok_eos(t) && hx_tok_eot(t) < 0) hx_tok_set_special(t, HX_TOK_SPECIAL_EOT, id);
        }
    }
    cJSON_Delete(gc);
    *tok = t;
    if (chat_template) *chat_template = tmpl;
    else free(tmpl);
    return HX_OK;
}

hx_status hx_model_load_any(const char *path, hx_model **out, hx_error *e) {
    struct stat sb;
    if (stat(path, &sb) != 0) return hx_err(e, HX_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        hx_hf_opts o = {.prefault = true};
        return hx_model_load_hf_ex(path, &o, out, e);
    }
    hx_gguf_open_opts oo = {.prefault = true};
    return hx_model_load(path, &oo, out, e);
}
