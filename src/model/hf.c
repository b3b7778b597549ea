/* hf.c — load a Hugging Face model folder: config.json + model.safetensors.
 *
 * safetensors layout: header_len u64 LE | header JSON (header_len bytes) | data.
 * The JSON maps each tensor name to {"dtype": "F32"|"F16"|"BF16"|..., "shape":
 * [..], "data_offsets": [begin, end]} relative to the data section, plus an
 * optional "__metadata__". PyTorch Linear weights are [out, in] row-major,
 * which is GGUF's ne[0] = in, ne[1] = out: tensors are used in place. */
#include "model/model.h"
#include "core/core.h"
#include "quant/quant.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HF_NAMES_CAP (256 * 1024)

typedef struct st_file {
    const char *path;
    const uint8_t *map;
    size_t size;
    uint64_t data_off;
    cJSON *header;
} st_file;

static int cfg_int(const cJSON *cfg, const char *key, int dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    return cJSON_IsNumber(v) ? v->valueint : dflt;
}

/* Bind `name` (with or without a "bert." prefix) expecting GGUF-style shape (ne0, ne1). */
static hx_status st_bind(const st_file *f, hx_model *m, size_t *name_pos, hx_tensor *t, const char *name,
                         int64_t ne0, int64_t ne1, hx_error *e) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(f->header, name);
    char alt[160];
    if (!it) {
        snprintf(alt, sizeof alt, "bert.%s", name);
        it = cJSON_GetObjectItemCaseSensitive(f->header, alt);
    }
    if (!it) return hx_err(e, HX_ERR_FORMAT, "%s: missing tensor '%s'", f->path, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s': malformed header entry", f->path, name);
    int type = !strcmp(dt->valuestring, "F32") ? HX_TYPE_F32 : !strcmp(dt->valuestring, "F16") ? HX_TYPE_F16
             : !strcmp(dt->valuestring, "BF16") ? HX_TYPE_BF16 : -1;
    if (type < 0) return hx_err(e, HX_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (F32, F16, BF16 supported)", f->path, name, dt->valuestring);
    int nd = cJSON_GetArraySize(sh);
    int64_t want_rows = ne1 ? ne1 : 1;
    int64_t rows = nd == 2 ? (int64_t)cJSON_GetArrayItem(sh, 0)->valuedouble : 1;
    int64_t cols = (int64_t)cJSON_GetArrayItem(sh, nd - 1)->valuedouble;
    if (nd < 1 || nd > 2 || cols != ne0 || rows != want_rows)
        return hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld], expected [%lld, %lld]", f->path, name,
                      (long long)rows, (long long)cols, (long long)want_rows, (long long)ne0);
    double b = cJSON_GetArrayItem(off, 0)->valuedouble, en = cJSON_GetArrayItem(off, 1)->valuedouble;
    uint64_t need = hx_row_size(type, ne0) * (uint64_t)want_rows;
    if (!(b >= 0) || !(en >= b) || en - b != (double)need || f->data_off + (uint64_t)en > f->size)
        return hx_err(e, HX_ERR_FORMAT, "%s: tensor '%s': data_offsets [%.0f, %.0f] do not fit its shape or the file",
                      f->path, name, b, en);
    memset(t, 0, sizeof *t);
    t->type = type;
    t->ne[0] = ne0; t->ne[1] = want_rows; t->ne[2] = t->ne[3] = 1;
    t->data = f->map + f->data_off + (uint64_t)b;
    size_t n = strlen(name) + 1;
    if (*name_pos + n > HF_NAMES_CAP) return hx_err(e, HX_ERR_UNSUPPORTED, "%s: too many tensor names", f->path);
    memcpy(m->st_names + *name_pos, name, n);
    t->name = m->st_names + *name_pos;
    *name_pos += n;
    return HX_OK;
}

/* sentence-transformers pooling from DIR/1_Pooling/config.json: 1 mean (also when the file is absent), 2 CLS;
 * other modes (max, mean-sqrt-len, last token, weighted mean) are refused rather than silently changed. */
static hx_status st_pooling(const char *dir, int *pooling, hx_error *e) {
    char path[1100];
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    *pooling = 1;
    struct stat sb;
    if (stat(path, &sb) != 0) return HX_OK;
    char *txt = NULL;
    size_t n;
    hx_status st = hx_read_file(path, &txt, &n, e);
    if (st) return st;
    cJSON *pc = cJSON_Parse(txt);
    free(txt);
    if (!cJSON_IsObject(pc)) { cJSON_Delete(pc); return hx_err(e, HX_ERR_FORMAT, "%s: not a JSON object", path); }
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

hx_status hx_model_load_hf(const char *dir, hx_model **out, hx_error *e) {
    *out = NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *txt = NULL;
    size_t n;
    hx_status st = hx_read_file(path, &txt, &n, e);
    if (st) return st;
    cJSON *cfg = cJSON_Parse(txt);
    free(txt);
    if (!cfg) return hx_err(e, HX_ERR_FORMAT, "%s: not valid JSON", path);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(cfg, "model_type");
    if (!cJSON_IsString(mt) || strcmp(mt->valuestring, "bert")) {
        st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: model_type '%s' is not supported from a folder (bert only; use a GGUF)",
                    path, cJSON_IsString(mt) ? mt->valuestring : "?");
        cJSON_Delete(cfg);
        return st;
    }
    hx_model *m = calloc(1, sizeof *m);
    st_file f = {0};
    char stpath[1024];
    snprintf(stpath, sizeof stpath, "%s/model.safetensors", dir);
    f.path = stpath;
    if (!m) { cJSON_Delete(cfg); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", dir); }
    hx_model_config *c = &m->cfg;
    c->arch = HX_ARCH_BERT;
    strcpy(c->arch_name, "bert");
    snprintf(c->name, sizeof c->name, "%s", dir);
    c->n_layer = cfg_int(cfg, "num_hidden_layers", 0);
    c->n_embd = cfg_int(cfg, "hidden_size", 0);
    c->n_head = c->n_head_kv = cfg_int(cfg, "num_attention_heads", 0);
    c->n_ff = cfg_int(cfg, "intermediate_size", 0);
    c->n_vocab = cfg_int(cfg, "vocab_size", 0);
    c->n_ctx_train = cfg_int(cfg, "max_position_embeddings", 512);
    int n_types = cfg_int(cfg, "type_vocab_size", 2);
    const cJSON *eps = cJSON_GetObjectItemCaseSensitive(cfg, "layer_norm_eps");
    c->norm_eps = cJSON_IsNumber(eps) ? (float)eps->valuedouble : 1e-12f;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(cfg, "hidden_act");
    bool gelu = !cJSON_IsString(act) || !strcmp(act->valuestring, "gelu");
    cJSON_Delete(cfg);
    if (!gelu) { hx_model_free(m); return hx_err(e, HX_ERR_UNSUPPORTED, "%s: hidden_act must be gelu", path); }
    if (c->n_layer < 1 || c->n_layer > HX_MAX_LAYERS || c->n_embd < 1 || c->n_head < 1 || c->n_embd % c->n_head ||
        c->n_ff < 1 || c->n_vocab < 1 || c->n_ctx_train < 1 || n_types < 1) {
        hx_model_free(m);
        return hx_err(e, HX_ERR_FORMAT, "%s: implausible BERT config (layers %d, hidden %d, heads %d, ffn %d, vocab %d)",
                      path, c->n_layer, c->n_embd, c->n_head, c->n_ff, c->n_vocab);
    }
    c->head_dim = c->n_embd / c->n_head;
    c->norm_is_layernorm = true; c->qkv_bias = true; c->act = HX_ACT_GELU_ERF;
    if ((st = st_pooling(dir, &c->pooling, e))) { hx_model_free(m); return st; }
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    c->rope_scale = 1.0f;
    /* map the safetensors file */
    int fd = open(stpath, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { hx_model_free(m); return hx_err(e, HX_ERR_IO, "%s: cannot open: %s", stpath, strerror(errno)); }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size < 8) { close(fd); hx_model_free(m); return hx_err(e, HX_ERR_FORMAT, "%s: too small to be safetensors", stpath); }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) { hx_model_free(m); return hx_err(e, HX_ERR_IO, "%s: mmap failed: %s", stpath, strerror(errno)); }
    m->st_map = map;
    m->st_size = (size_t)sb.st_size;
    f.map = map;
    f.size = (size_t)sb.st_size;
    uint64_t hlen;
    memcpy(&hlen, f.map, 8);
    if (hlen > f.size - 8 || hlen > (100u << 20)) { hx_model_free(m); return hx_err(e, HX_ERR_FORMAT, "%s: offset 0: header length %llu exceeds the file", stpath, (unsigned long long)hlen); }
    f.data_off = 8 + hlen;
    f.header = cJSON_ParseWithLength((const char *)f.map + 8, (size_t)hlen);
    if (!f.header) { hx_model_free(m); return hx_err(e, HX_ERR_FORMAT, "%s: offset 8: header is not valid JSON", stpath); }
    m->st_names = malloc(HF_NAMES_CAP);
    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    if (!m->st_names || !m->layers) { cJSON_Delete(f.header); hx_model_free(m); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", dir); }
    size_t pos = 0;
    const int64_t E = c->n_embd, F = c->n_ff;
#define BIND(t, name, a, b) do { if ((st = st_bind(&f, m, &pos, (t), (name), (a), (b), e))) goto fail; } while (0)
    BIND(&m->tok_embd, "embeddings.word_embeddings.weight", E, c->n_vocab);
    BIND(&m->pos_embd, "embeddings.position_embeddings.weight", E, c->n_ctx_train);
    BIND(&m->type_embd, "embeddings.token_type_embeddings.weight", E, n_types);
    BIND(&m->embd_norm, "embeddings.LayerNorm.weight", E, 0);
    BIND(&m->embd_norm_b, "embeddings.LayerNorm.bias", E, 0);
    for (int il = 0; il < c->n_layer; il++) {
        hx_layer_weights *L = &m->layers[il];
        char nm[128];
#define LB(field, suffix, a, b) do { snprintf(nm, sizeof nm, "encoder.layer.%d.%s", il, suffix); BIND(&L->field, nm, a, b); } while (0)
        LB(wq, "attention.self.query.weight", E, E); LB(bq, "attention.self.query.bias", E, 0);
        LB(wk, "attention.self.key.weight", E, E);   LB(bk, "attention.self.key.bias", E, 0);
        LB(wv, "attention.self.value.weight", E, E); LB(bv, "attention.self.value.bias", E, 0);
        LB(wo, "attention.output.dense.weight", E, E); LB(bo, "attention.output.dense.bias", E, 0);
        LB(attn_post_norm, "attention.output.LayerNorm.weight", E, 0);
        LB(attn_post_norm_b, "attention.output.LayerNorm.bias", E, 0);
        LB(ffn_up, "intermediate.dense.weight", E, F); LB(ffn_up_b, "intermediate.dense.bias", F, 0);
        LB(ffn_down, "output.dense.weight", F, E);     LB(ffn_down_b, "output.dense.bias", E, 0);
        LB(ffn_post_norm, "output.LayerNorm.weight", E, 0);
        LB(ffn_post_norm_b, "output.LayerNorm.bias", E, 0);
#undef LB
    }
#undef BIND
    cJSON_Delete(f.header);
    *out = m;
    return HX_OK;
fail:
    cJSON_Delete(f.header);
    hx_model_free(m);
    return st;
}

hx_status hx_model_load_any(const char *path, hx_model **out, hx_error *e) {
    struct stat sb;
    if (stat(path, &sb) != 0) return hx_err(e, HX_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) return hx_model_load_hf(path, out, e);
    hx_gguf_open_opts oo = {.prefault = true};
    return hx_model_load(path, &oo, out, e);
}
