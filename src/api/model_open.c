/* model_open.c — hx_model_open (a GGUF file or a Hugging Face folder, the
 * tokenizer and chat template that come with it, the device choice) and the
 * metadata getters. */
#include "api/api.h"
#include "core/core.h"
#include "model/shard.h"
#include "quant/quant.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

hx_model_params hx_model_default_params(void) {
    return (hx_model_params){.device = HX_DEVICE_AUTO, .n_gpu_layers = -1, .gpu_index = 0, .tensor_parallel = 1};
}

void hx_model_api_free(struct hx_model_api *a) {
    if (!a) return;
    hx_tok_free(a->tok);
    free(a->chat_template);
    free(a);
}

/* Every weight the model binds, as a flat list (hx_layer_weights holds only
 * hx_tensor members): tensor i of n_tensors(m), NULL for unused slots. */
static size_t n_tensors(const hx_model *m) {
    return 8 + (size_t)m->cfg.n_layer * (sizeof(hx_layer_weights) / sizeof(hx_tensor));
}
static const hx_tensor *tensor_at(const hx_model *m, size_t i) {
    const hx_tensor *top[8] = {&m->tok_embd, &m->pos_embd, &m->type_embd, &m->embd_norm, &m->embd_norm_b,
                               &m->output_norm, &m->output_norm_b, m->cfg.tied_output ? NULL : &m->output};
    size_t per = sizeof(hx_layer_weights) / sizeof(hx_tensor);
    const hx_tensor *t = i < 8 ? top[i] : (const hx_tensor *)&m->layers[(i - 8) / per] + (i - 8) % per;
    return t && t->data ? t : NULL;
}
static uint64_t tensor_bytes(const hx_tensor *t) {
    uint64_t rows = 1;
    for (int d = 1; d < 4; d++) rows *= (uint64_t)(t->ne[d] > 0 ? t->ne[d] : 1);
    return rows * hx_row_size(t->type, t->ne[0]);
}

static void weights_stats(hx_model *m) {
    struct hx_model_api *a = m->api;
    uint64_t by_type[HX_TYPE_COUNT] = {0};
    for (size_t i = 0; i < n_tensors(m); i++) {
        const hx_tensor *t = tensor_at(m, i);
        if (!t) continue;
        uint64_t rows = 1;
        for (int d = 1; d < 4; d++) rows *= (uint64_t)(t->ne[d] > 0 ? t->ne[d] : 1);
        a->n_params += rows * (uint64_t)t->ne[0];
        a->size_bytes += tensor_bytes(t);
        if (t->type >= 0 && t->type < HX_TYPE_COUNT) by_type[t->type] += tensor_bytes(t);
    }
    int best = 0;
    for (int t = 1; t < HX_TYPE_COUNT; t++) if (by_type[t] > by_type[best]) best = t;
    snprintf(a->type_name, sizeof a->type_name, "%s", hx_type_name(best));
    for (char *c = a->type_name; *c; c++) if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
}

/* Read every page of the weights once (so the first forward does not stall on
 * page faults), reporting lo..hi every 16 MB. */
static hx_status touch(const hx_model *m, float lo, float hi, const hx_model_params *mp, hx_error *e) {
    long ps = sysconf(_SC_PAGESIZE);
    uint64_t page = ps > 0 ? (uint64_t)ps : 4096, total = m->api->size_bytes, done = 0, next = 16u << 20;
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < n_tensors(m); i++) {
        const hx_tensor *t = tensor_at(m, i);
        if (!t) continue;
        const uint8_t *p = t->data;
        uint64_t n = tensor_bytes(t);
        madvise((void *)((uintptr_t)p & ~(uintptr_t)(page - 1)), (size_t)n, MADV_WILLNEED);
        for (uint64_t at = 0; at < n;) {
            uint64_t end = n - at < (4u << 20) ? n : at + (4u << 20);
            for (uint64_t o = at; o < end; o += page) sink ^= p[o];
            done += end - at;
            at = end;
            if (done < next && done < total) continue;
            next = done + (16u << 20);
            if (mp->progress && !mp->progress(lo + (hi - lo) * (float)((double)done / (double)(total ? total : 1)),
                                              mp->progress_user))
                return hx_err(e, HX_ERR_CANCELLED, "loading cancelled by the progress callback");
        }
    }
    (void)sink;
    return HX_OK;
}

/* HF folders: conversion progress (bytes of tensors done) as 0..0.5 of the load. */
typedef struct hf_prog { const hx_model_params *mp; bool cancelled; } hf_prog;
static void hf_progress(void *user, uint64_t done, uint64_t total) {
    hf_prog *h = user;
    if (!h->cancelled && !h->mp->progress(0.5f * (float)((double)done / (double)(total ? total : 1)), h->mp->progress_user))
        h->cancelled = true;
}

static bool has_piece(const char *piece, void *user) { return hx_tok_find(user, piece, strlen(piece)) >= 0; }

/* Where contexts of this model run. */
static hx_status choose_device(hx_model *m, const hx_model_params *mp, const char *path, hx_error *e) {
    struct hx_model_api *a = m->api;
    int ngl = mp->n_gpu_layers;
    a->device = HX_DEVICE_CPU;
    a->gpu_index = mp->gpu_index;
    a->tp = mp->tensor_parallel > 1 ? mp->tensor_parallel : 1;
    a->layer_split = mp->layer_split > 1 ? mp->layer_split : 1;
    if (a->tp > 1 && (mp->device == HX_DEVICE_CPU || ngl == 0))
        return hx_err(e, HX_ERR_ARG, "%s: tensor_parallel %d needs the CUDA device (not the CPU)", path, a->tp);
    if (a->tp > 1 && a->layer_split > 1)
        return hx_err(e, HX_ERR_ARG, "%s: tensor_parallel %d and layer_split %d: one or the other", path, a->tp,
                      a->layer_split);
    if (a->layer_split > m->cfg.n_layer)
        return hx_err(e, HX_ERR_ARG, "%s: layer_split %d: the model has %d layers", path, a->layer_split, m->cfg.n_layer);
    if (a->layer_split > 1 && m->cfg.arch == HX_ARCH_BERT)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: layer_split: bert runs on one device", path);
    /* the CPU split is a test of the pipeline (api/pipe.c), not a way to more memory */
    if (a->layer_split > 1 && (mp->device == HX_DEVICE_CPU || ngl == 0)) {
        if (ngl > 0) return hx_err(e, HX_ERR_ARG, "%s: device cpu with n_gpu_layers %d", path, ngl);
        return HX_OK;
    }
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
        if (a->tp > 1) return hx_err(e, HX_ERR_UNSUPPORTED, "%s: tensor_parallel: bert runs on one device", path);
        if (want) return hx_err(e, HX_ERR_UNSUPPORTED, "%s: bert runs through hx_embedder (hx_embedder_set_device)", path);
        return HX_OK;
    }
#ifdef HX_HAVE_CUDA
    hx_error ce = {0};
    /* (a layer split's GPUs are checked by its parts at hx_context_new: tests put every part on one) */
    int n = 0, gpus = a->tp > 1 ? a->tp : 1;
    char why[200] = "";
    if (hx_cuda_device_count(&n, &ce) != HX_OK || n <= 0)
        snprintf(why, sizeof why, "no CUDA device: %s", ce.msg[0] ? ce.msg : "none found");
    else if (mp->gpu_index < 0 || mp->gpu_index + gpus > n)
        snprintf(why, sizeof why, "gpu_index %d%s%.0d: this machine has %d CUDA device%s", mp->gpu_index,
                 a->tp > 1 ? " with tensor_parallel " : "",
                 gpus > 1 ? gpus : 0, n, n == 1 ? "" : "s");
    else if (a->tp > 1 && hx_shard_check(m, a->tp, &ce) != HX_OK) {
        /* heads (or a block) that do not cut n ways: each GPU takes whole layers instead */
        if (m->cfg.n_layer < a->tp)
            return hx_err(e, ce.status, "%s: %s; nor can %d layers be split over %d GPUs", path, ce.msg,
                          m->cfg.n_layer, a->tp);
        HX_WARN("%s: %s: splitting the layers over the %d GPUs instead (a pipeline: no speed-up)", path, ce.msg, a->tp);
        a->layer_split = a->tp;
        a->tp = 1;
    }
    if (!why[0]) {
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
    if (want || a->tp > 1 || a->layer_split > 1) return hx_err(e, HX_ERR_DEVICE, "%s: device cuda: %s", path, why);
    snprintf(a->device_note, sizeof a->device_note, "%s", why);
    return HX_OK;
#else
    if (want || a->tp > 1 || a->layer_split > 1)
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
    if (mp.tensor_parallel < 0 || mp.tensor_parallel > HX_SHARD_MAX)
        return hx_err(e, HX_ERR_ARG, "%s: tensor_parallel %d (1..%d GPUs)", path, mp.tensor_parallel, HX_SHARD_MAX);
    if (mp.layer_split < 0 || mp.layer_split > 16)
        return hx_err(e, HX_ERR_ARG, "%s: layer_split %d (1..16 parts)", path, mp.layer_split);
    struct stat sb;
    if (stat(path, &sb) != 0) return hx_err(e, HX_ERR_IO, "%s: %s", path, strerror(errno));
    bool dir = S_ISDIR(sb.st_mode);
    if (mp.quantize) {
        if (strcmp(mp.quantize, "q8_0") && strcmp(mp.quantize, "q4_k_m"))
            return hx_err(e, HX_ERR_ARG, "%s: quantize '%s' (q8_0 or q4_k_m)", path, mp.quantize);
        if (!dir) return hx_err(e, HX_ERR_ARG, "%s: quantize '%s' is for Hugging Face folders; a GGUF loads as stored", path, mp.quantize);
    }
    if (mp.progress && !mp.progress(0.0f, mp.progress_user)) return hx_err(e, HX_ERR_CANCELLED, "loading cancelled by the progress callback");
    hx_model *m = NULL;
    hx_status st;
    hf_prog hp = {.mp = &mp};
    if (dir) {
        hx_hf_opts ho = {.quant = !mp.quantize ? 0 : !strcmp(mp.quantize, "q8_0") ? HX_TYPE_Q8_0 : HX_TYPE_Q4_K,
                         .progress = mp.progress ? hf_progress : NULL, .progress_user = &hp};
        st = hx_model_load_hf_ex(path, &ho, &m, e);
        if (!st && hp.cancelled) {
            hx_model_free(m);
            return hx_err(e, HX_ERR_CANCELLED, "loading cancelled by the progress callback");
        }
    } else {
        hx_gguf_open_opts go = {.prefault = false}; /* touched below, with progress */
        st = hx_model_load(path, &go, &m, e);
    }
    if (st) return st;
    struct hx_model_api *a = calloc(1, sizeof *a);
    if (!a) { hx_model_free(m); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
    m->api = a;
    a->progress = mp.progress;
    a->progress_user = mp.progress_user;
    weights_stats(m);
    if ((st = touch(m, dir ? 0.5f : 0.0f, 0.95f, &mp, e))) goto fail;
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
    } else if (m->cfg.arch != HX_ARCH_BERT) {
        if ((st = hx_hf_tokenizer_load(path, &a->tok, &a->chat_template, &te))) {
            if (st != HX_ERR_UNSUPPORTED) { *e = te; goto fail; }
            HX_INFO("%s: no usable tokenizer (%s): token ids only", path, te.msg);  /* no tokenizer.json */
            st = HX_OK;
        }
    } else {
        char vocab[4200];
        snprintf(vocab, sizeof vocab, "%s/vocab.txt", path);
        if ((st = hx_tok_load_vocab_txt(vocab, &a->tok, e))) goto fail;
    }
    if (a->tok && hx_tok_n_vocab(a->tok) > m->cfg.n_vocab) {
        st = hx_err(e, HX_ERR_FORMAT, "%s: the tokenizer has %d tokens, the model's vocabulary %d", path,
                    hx_tok_n_vocab(a->tok), m->cfg.n_vocab);
        goto fail;
    }
    a->chat_kind = hx_chat_detect(a->chat_template);
    if (a->chat_kind == HX_CHAT_UNKNOWN && m->cfg.arch != HX_ARCH_BERT)
        a->chat_kind = hx_chat_fallback(m->cfg.arch_name, a->tok ? has_piece : NULL, a->tok);
    if ((st = choose_device(m, &mp, path, e))) goto fail;
    char base[4096];  /* the path's last component, trailing slashes dropped */
    snprintf(base, sizeof base, "%s", path);
    for (size_t l = strlen(base); l > 1 && base[l - 1] == '/';) base[--l] = 0;
    const char *bn = strrchr(base, '/') ? strrchr(base, '/') + 1 : base;
    if (dir) snprintf(m->cfg.name, sizeof m->cfg.name, "%s", bn);  /* HF config.json has no name */
    snprintf(a->fingerprint, sizeof a->fingerprint, "%s:%.100s:%lld:%lld:%d:%d:%d:%d:%s", m->cfg.arch_name, bn,
             (long long)(m->gguf ? m->gguf->file_size : a->size_bytes), (long long)sb.st_mtime, m->cfg.n_layer,
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
