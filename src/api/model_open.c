/* model_open.c — hx_model_open (a GGUF file or a Hugging Face folder, the
 * tokenizer and chat template that come with it, the device choice) and the
 * metadata getters. */
#include "api/api.h"
#include "core/core.h"
#include "quant/quant.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

hx_model_params hx_model_default_params(void) {
    return (hx_model_params){.device = HX_DEVICE_AUTO, .n_gpu_layers = -1, .gpu_index = 0};
}

void hx_model_api_free(struct hx_model_api *a) {
    if (!a) return;
    hx_tok_free(a->tok);
    free(a->chat_template);
    free(a);
}

/* Touch every page of [p, p+n) in steps, reporting fraction lo..hi. */
static hx_status touch(const uint8_t *p, uint64_t n, float lo, float hi, const hx_model_params *mp, hx_error *e) {
    if (!p || !n) return HX_OK;
    const uint64_t step = 16u << 20;
    long ps = sysconf(_SC_PAGESIZE);
    uint64_t page = ps > 0 ? (uint64_t)ps : 4096;
    volatile uint8_t sink = 0;
    for (uint64_t at = 0; at < n; at += step) {
        uint64_t end = n - at < step ? n : at + step;
        madvise((void *)((uintptr_t)(p + at) & ~(uintptr_t)(page - 1)), (size_t)(end - at), MADV_WILLNEED);
        for (uint64_t o = at; o < end; o += page) sink ^= p[o];
        if (mp->progress && !mp->progress(lo + (hi - lo) * (float)((double)end / (double)n), mp->progress_user))
            return hx_err(e, HX_ERR_CANCELLED, "loading cancelled by the progress callback");
    }
    (void)sink;
    return HX_OK;
}

/* Every weight the model binds, as a flat list (hx_layer_weights holds only hx_tensor members). */
static void weights_stats(hx_model *m) {
    struct hx_model_api *a = m->api;
    uint64_t by_type[HX_TYPE_COUNT] = {0};
    const hx_tensor *top[] = {&m->tok_embd, &m->pos_embd, &m->type_embd, &m->embd_norm, &m->embd_norm_b,
                              &m->output_norm, &m->output_norm_b, m->cfg.tied_output ? NULL : &m->output};
    size_t per_layer = sizeof(hx_layer_weights) / sizeof(hx_tensor);
    size_t n_top = sizeof top / sizeof top[0];
    for (size_t i = 0; i < n_top + (size_t)m->cfg.n_layer * per_layer; i++) {
        const hx_tensor *t = i < n_top ? top[i] : (const hx_tensor *)&m->layers[(i - n_top) / per_layer] + (i - n_top) % per_layer;
        if (!t || !t->data) continue;
        uint64_t rows = 1;
        for (int d = 1; d < 4; d++) rows *= (uint64_t)(t->ne[d] > 0 ? t->ne[d] : 1);
        a->n_params += rows * (uint64_t)t->ne[0];
        uint64_t bytes = rows * hx_row_size(t->type, t->ne[0]);
        a->size_bytes += bytes;
        if (t->type >= 0 && t->type < HX_TYPE_COUNT) by_type[t->type] += bytes;
    }
    int best = 0;
    for (int t = 1; t < HX_TYPE_COUNT; t++) if (by_type[t] > by_type[best]) best = t;
    snprintf(a->type_name, sizeof a->type_name, "%s", hx_type_name(best));
    for (char *c = a->type_name; *c; c++) if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
}

static bool has_piece(const char *piece, void *user) {
    const hx_tok *t = user;
    for (int32_t i = 0; i < hx_tok_n_vocab(t); i++) {
        const char *p = hx_tok_piece(t, i);
        if (p && !strcmp(p, piece)) return true;
    }
    return false;
}

/* A Hugging Face folder's tokenizer (tokenizer.json, tokenizer.model or vocab.txt) and the
 * chat_template of its tokenizer_config.json (a string, or a list of {name, template}). */
static hx_status hf_tokenizer(const char *dir, struct hx_model_api *a, hx_error *e) {
    char p[4200];
    struct stat sb;
    hx_status st = HX_OK;
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (stat(p, &sb) == 0) st = hx_tok_load_hf_json(p, &a->tok, e);
    else {
        snprintf(p, sizeof p, "%s/tokenizer.model", dir);
        if (stat(p, &sb) == 0) st = hx_tok_load_spm_model(p, &a->tok, e);
        else {
            snprintf(p, sizeof p, "%s/vocab.txt", dir);
            if (stat(p, &sb) == 0) st = hx_tok_load_vocab_txt(p, &a->tok, e);
        }
    }
    if (st) return st;
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    char *txt = NULL;
    if (stat(p, &sb) != 0 || hx_read_file(p, &txt, NULL, NULL)) return HX_OK;
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    if (!j) return hx_err(e, HX_ERR_FORMAT, "%s: not valid JSON", p);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    const char *s = cJSON_IsString(ct) ? ct->valuestring : NULL;
    if (cJSON_IsArray(ct)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *tp = cJSON_GetObjectItemCaseSensitive(it, "template");
            if (cJSON_IsString(tp) && (!s || (cJSON_IsString(nm) && !strcmp(nm->valuestring, "default"))))
                s = tp->valuestring;
        }
    }
    if (s && !(a->chat_template = strdup(s))) st = hx_err(e, HX_ERR_NOMEM, "%s: out of memory", p);
    cJSON_Delete(j);
    return st;
}

/* Where contexts of this model run. */
static hx_status choose_device(hx_model *m, const hx_model_params *mp, const char *path, hx_error *e) {
    struct hx_model_api *a = m->api;
    int ngl = mp->n_gpu_layers;
    a->device = HX_DEVICE_CPU;
    a->gpu_index = mp->gpu_index;
    if (ngl > 0 && ngl < m->cfg.n_layer)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: n_gpu_layers %d of %d: there is no partial offload (use 0 or -1)",
                      path, ngl, m->cfg.n_layer);
    if (mp->device == HX_DEVICE_CPU) {
        if (ngl > 0) return hx_err(e, HX_ERR_ARG, "%s: device cpu with n_gpu_layers %d", path, ngl);
        return HX_OK;
    }
    if (mp->device == HX_DEVICE_CUDA && ngl == 0)
        return hx_err(e, HX_ERR_ARG, "%s: device cuda with n_gpu_layers 0", path);
    if (mp->device == HX_DEVICE_AUTO && ngl == 0) return HX_OK;
    bool want = mp->device == HX_DEVICE_CUDA;
    if (m->cfg.arch == HX_ARCH_BERT) {
        if (want) return hx_err(e, HX_ERR_UNSUPPORTED, "%s: bert runs through hx_embedder (hx_embedder_set_device)", path);
        return HX_OK;
    }
#ifdef HX_HAVE_CUDA
    hx_error ce = {0};
    int n = 0;
    char why[200] = "";
    if (hx_cuda_device_count(&n, &ce) != HX_OK || n <= 0)
        snprintf(why, sizeof why, "no CUDA device: %s", ce.msg[0] ? ce.msg : "none found");
    else if (mp->gpu_index < 0 || mp->gpu_index >= n)
        snprintf(why, sizeof why, "gpu_index %d: this machine has %d CUDA device%s", mp->gpu_index, n, n == 1 ? "" : "s");
    else {
        size_t per_layer = sizeof(hx_layer_weights) / sizeof(hx_tensor);
        for (int l = 0; l < m->cfg.n_layer && !why[0]; l++)
            for (size_t k = 0; k < per_layer; k++) {
                const hx_tensor *t = (const hx_tensor *)&m->layers[l] + k;
                if (t->data && !hx_cuda_type_supported(t->type)) {
                    snprintf(why, sizeof why, "weight %s is %s, which the CUDA kernels lack", t->name ? t->name : "?",
                             hx_type_name(t->type));
                    break;
                }
            }
    }
    if (!why[0]) { a->device = HX_DEVICE_CUDA; return HX_OK; }
    if (want) return hx_err(e, HX_ERR_DEVICE, "%s: device cuda: %s", path, why);
    snprintf(a->device_note, sizeof a->device_note, "%s", why);
    return HX_OK;
#else
    if (want)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: device cuda: this build has no CUDA backend (nvcc was not found at "
                      "configure time)", path);
    return HX_OK;
#endif
}

hx_status hx_model_open(const char *path, const hx_model_params *p, hx_model **out, hx_error *e) {
    if (!out) return hx_err(e, HX_ERR_ARG, "hx_model_open: out is NULL");
    *out = NULL;
    if (!path || !*path) return hx_err(e, HX_ERR_ARG, "hx_model_open: path is NULL or empty");
    hx_model_params mp = p ? *p : hx_model_default_params();
    if ((unsigned)mp.device > HX_DEVICE_CUDA) return hx_err(e, HX_ERR_ARG, "%s: device %d is not auto, cpu or cuda", path, (int)mp.device);
    if (mp.n_gpu_layers < -1) return hx_err(e, HX_ERR_ARG, "%s: n_gpu_layers %d (-1: all, 0: none)", path, mp.n_gpu_layers);
    struct stat sb;
    if (stat(path, &sb) != 0) return hx_err(e, HX_ERR_IO, "%s: %s", path, strerror(errno));
    bool dir = S_ISDIR(sb.st_mode);
    if (mp.quantize) {
        if (strcmp(mp.quantize, "q8_0") && strcmp(mp.quantize, "q4_k_m"))
            return hx_err(e, HX_ERR_ARG, "%s: quantize '%s' (q8_0 or q4_k_m)", path, mp.quantize);
        if (!dir) return hx_err(e, HX_ERR_ARG, "%s: quantize '%s' is for Hugging Face folders; a GGUF loads as stored", path, mp.quantize);
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: quantize-on-load is not implemented yet", path);
    }
    if (mp.progress && !mp.progress(0.0f, mp.progress_user)) return hx_err(e, HX_ERR_CANCELLED, "loading cancelled by the progress callback");
    hx_model *m = NULL;
    hx_status st;
    if (dir) st = hx_model_load_any(path, &m, e);
    else {
        hx_gguf_open_opts go = {.prefault = false}; /* touched below, with progress */
        st = hx_model_load(path, &go, &m, e);
    }
    if (st) return st;
    struct hx_model_api *a = calloc(1, sizeof *a);
    if (!a) { hx_model_free(m); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
    m->api = a;
    a->progress = mp.progress;
    a->progress_user = mp.progress_user;
    if (m->gguf) st = touch(m->gguf->map, m->gguf->file_size, 0.0f, 0.9f, &mp, e);
    else st = touch(m->st_map, m->st_size, 0.0f, 0.9f, &mp, e);
    if (st) goto fail;
    /* the tokenizer and chat template */
    hx_error te = {0};
    if (m->gguf) {
        if (hx_tok_load_gguf(path, &a->tok, &te) != HX_OK) {
            if (te.status != HX_ERR_FORMAT && te.status != HX_ERR_UNSUPPORTED) { *e = te; st = te.status; goto fail; }
            HX_INFO("%s: no usable tokenizer (%s): token ids only", path, te.msg);
        }
        hx_gguf_str s = {0};
        if (hx_gguf_get_str(m->gguf, "tokenizer.chat_template", &s) && !(a->chat_template = strndup(s.ptr, (size_t)s.len))) {
            st = hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
            goto fail;
        }
    } else if ((st = hf_tokenizer(path, a, e))) goto fail;
    if (a->tok && hx_tok_n_vocab(a->tok) > m->cfg.n_vocab) {
        st = hx_err(e, HX_ERR_FORMAT, "%s: the tokenizer has %d tokens, the model's vocabulary %d", path,
                    hx_tok_n_vocab(a->tok), m->cfg.n_vocab);
        goto fail;
    }
    a->chat_kind = hx_chat_detect(a->chat_template);
    if (a->chat_kind == HX_CHAT_UNKNOWN && m->cfg.arch != HX_ARCH_BERT)
        a->chat_kind = hx_chat_fallback(m->cfg.arch_name, a->tok ? has_piece : NULL, a->tok);
    weights_stats(m);
    if ((st = choose_device(m, &mp, path, e))) goto fail;
    char base[4096];  /* the path's last component, trailing slashes dropped */
    snprintf(base, sizeof base, "%s", path);
    for (size_t l = strlen(base); l > 1 && base[l - 1] == '/';) base[--l] = 0;
    const char *bn = strrchr(base, '/') ? strrchr(base, '/') + 1 : base;
    if (!m->cfg.name[0] && dir) snprintf(m->cfg.name, sizeof m->cfg.name, "%s", bn);
    snprintf(a->fingerprint, sizeof a->fingerprint, "%s:%.100s:%lld:%lld:%d:%d:%d:%d:%s", m->cfg.arch_name, bn,
             (long long)(m->gguf ? m->gguf->file_size : m->st_size), (long long)sb.st_mtime, m->cfg.n_layer,
             m->cfg.n_embd, m->cfg.n_vocab, m->cfg.n_ctx_train, a->type_name);
    if (mp.progress && !mp.progress(1.0f, mp.progress_user)) {
        st = hx_err(e, HX_ERR_CANCELLED, "loading cancelled by the progress callback");
        goto fail;
    }
    *out = m;
    return HX_OK;
fail:
    hx_model_free(m);
    return st;
}

/* ---- metadata ---- */
const char *hx_model_arch(const hx_model *m) { return m ? m->cfg.arch_name : ""; }
const char *hx_model_name(const hx_model *m) { return m ? m->cfg.name : ""; }
bool hx_model_is_encoder(const hx_model *m) { return m && m->cfg.arch == HX_ARCH_BERT; }
int hx_model_n_ctx_train(const hx_model *m) { return m ? m->cfg.n_ctx_train : 0; }
int hx_model_n_vocab(const hx_model *m) { return m ? m->cfg.n_vocab : 0; }
int hx_model_n_embd(const hx_model *m) { return m ? m->cfg.n_embd : 0; }
int hx_model_n_layer(const hx_model *m) { return m ? m->cfg.n_layer : 0; }
int hx_model_n_head(const hx_model *m) { return m ? m->cfg.n_head : 0; }
int hx_model_n_head_kv(const hx_model *m) { return m ? m->cfg.n_head_kv : 0; }
uint64_t hx_model_n_params(const hx_model *m) { return m && m->api ? m->api->n_params : 0; }
uint64_t hx_model_size_bytes(const hx_model *m) { return m && m->api ? m->api->size_bytes : 0; }
const char *hx_model_type_name(const hx_model *m) { return m && m->api ? m->api->type_name : ""; }
hx_device hx_model_device(const hx_model *m) { return m && m->api ? m->api->device : HX_DEVICE_CPU; }
const char *hx_model_device_note(const hx_model *m) { return m && m->api ? m->api->device_note : ""; }
const char *hx_model_chat_template(const hx_model *m) { return m && m->api ? m->api->chat_template : NULL; }
const char *hx_model_fingerprint(const hx_model *m) { return m && m->api ? m->api->fingerprint : ""; }
