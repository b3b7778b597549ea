/* inspect.c — hx_inspect_attention: one exact f32 CPU forward of a prompt on a
 * context of its own, with the CPU backend's attention probe (api/backend.h)
 * recording the softmax weights, q, k, v and the attention output, and the
 * caller's LoRA adapters set on that context the way hx_context_set_adapters
 * sets them on a CPU context (so the probe sees the adapted q, k and v). */
#include "api/api.h"
#include "core/core.h"
#include "model/lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

hx_inspect_params hx_inspect_default_params(void) {
    return (hx_inspect_params){.layer = -1, .want_qkv = false, .n_threads = 0, .adapters = NULL,
                               .adapter_scales = NULL, .n_adapters = 0};
}

void hx_attention_free(hx_attention *a) {
    if (!a) return;
    free(a->probs); free(a->q); free(a->k); free(a->v); free(a->o);
    free(a->window); free(a->logits);
    memset(a, 0, sizeof *a);
}

/* calloc of a * b * c * d floats, NULL (and *bytes = 0) when the product overflows. */
static float *calloc4(size_t a, size_t b, size_t c, size_t d, size_t *bytes) {
    *bytes = 0;
    size_t n = a;
    if (b && n > SIZE_MAX / b) return NULL;
    n *= b;
    if (c && n > SIZE_MAX / c) return NULL;
    n *= c;
    if (d && n > SIZE_MAX / d) return NULL;
    n *= d;
    if (n > SIZE_MAX / sizeof(float)) return NULL;
    *bytes = n * sizeof(float);
    return calloc(n ? n : 1, sizeof(float));
}

hx_status hx_inspect_attention(hx_model *m, const int32_t *ids, int n, const hx_inspect_params *p,
                               hx_attention *out, hx_error *e) {
    if (!out) return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: out is NULL");
    memset(out, 0, sizeof *out);
    if (!m || !m->api) return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: the model is NULL or not opened by hx_model_open");
    const hx_model_config *cfg = &m->cfg;
    if (cfg->arch == HX_ARCH_BERT)
        return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: %s is an encoder (bert); inspection runs decoders", cfg->name);
    if (!ids || n < 1) return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: no tokens (n = %d)", n);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= cfg->n_vocab)
            return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: token %d at index %d outside the vocabulary (%d)",
                          ids[i], i, cfg->n_vocab);
    hx_inspect_params ip = p ? *p : hx_inspect_default_params();
    if (ip.layer < -1 || ip.layer >= cfg->n_layer)
        return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: layer %d (the model has %d: 0..%d, or -1 for all)", ip.layer,
                      cfg->n_layer, cfg->n_layer - 1);
    if (ip.n_threads < 0) return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: n_threads %d (0: all CPUs)", ip.n_threads);
    if (ip.n_adapters < 0 || (ip.n_adapters > 0 && (!ip.adapters || !ip.adapter_scales)))
        return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: n_adapters %d with adapters or scales NULL", ip.n_adapters);
    for (int i = 0; i < ip.n_adapters; i++) {
        if (!ip.adapters[i]) return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: adapter %d is NULL", i);
        if (ip.adapters[i]->m != m)
            return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: adapter %d (%s) was opened for another model", i,
                          ip.adapters[i]->path);
        if (!isfinite(ip.adapter_scales[i]))
            return hx_err(e, HX_ERR_ARG, "hx_inspect_attention: the scale of adapter %d is not finite", i);
    }

    hx_attention a = {0};
    a.n_tok = n;
    a.layer0 = ip.layer < 0 ? 0 : ip.layer;
    a.n_layer = ip.layer < 0 ? cfg->n_layer : 1;
    a.n_head = cfg->n_head;
    a.n_head_kv = cfg->n_head_kv;
    a.head_dim = cfg->head_dim;
    a.scale = cfg->attn_scale > 0 ? cfg->attn_scale : 1.0f / sqrtf((float)cfg->head_dim);
    a.softcap = cfg->attn_logit_softcap;
    a.n_vocab = cfg->n_vocab;
    size_t L = (size_t)a.n_layer, T = (size_t)n, bytes;
    a.probs = calloc4(L, (size_t)a.n_head, T, T, &bytes);
    if (!a.probs)
        return hx_err(e, HX_ERR_NOMEM, "hx_inspect_attention: cannot allocate the probabilities of %zu layers x %d heads "
                      "x %d x %d tokens (%.1f MiB)", L, a.n_head, n, n,
                      (double)L * a.n_head * (double)n * n * sizeof(float) / (1 << 20));
    hx_status st = HX_OK;
    if (ip.want_qkv) {
        size_t b1, b2, b3, b4;
        a.q = calloc4(L, T, (size_t)a.n_head, (size_t)a.head_dim, &b1);
        a.k = calloc4(L, T, (size_t)a.n_head_kv, (size_t)a.head_dim, &b2);
        a.v = calloc4(L, T, (size_t)a.n_head_kv, (size_t)a.head_dim, &b3);
        a.o = calloc4(L, T, (size_t)a.n_head, (size_t)a.head_dim, &b4);
        if (!a.q || !a.k || !a.v || !a.o) {
            st = hx_err(e, HX_ERR_NOMEM, "hx_inspect_attention: cannot allocate q/k/v/o of %zu layers x %d tokens", L, n);
            goto fail;
        }
    }
    a.window = calloc(L, sizeof *a.window);
    a.logits = malloc(sizeof(float) * (size_t)cfg->n_vocab);
    int32_t *pos = malloc(sizeof(int32_t) * T), *seq = calloc(T, sizeof(int32_t)), *outrow = malloc(sizeof(int32_t) * T);
    if (!a.window || !a.logits || !pos || !seq || !outrow) {
        free(pos); free(seq); free(outrow);
        st = hx_err(e, HX_ERR_NOMEM, "hx_inspect_attention: out of memory");
        goto fail;
    }
    for (size_t l = 0; l < L; l++) a.window[l] = cfg->layer_is_swa[a.layer0 + l] ? cfg->sliding_window : 0;
    for (int i = 0; i < n; i++) { pos[i] = i; outrow[i] = i == n - 1 ? 0 : -1; }

    /* one slot of exactly n positions and one ubatch of all n tokens: the
     * probe sees every query once, at its position */
    const hx_backend *be = &hx_backend_cpu;
    hx_backend_params bp = {.n_seq = 1, .n_ctx_seq = n, .n_ubatch = n, .n_threads = ip.n_threads, .kv_f32 = true,
                            .exact = true};
    void *bctx = NULL;
    hx_attn_probe probe = {.n_tok = n, .layer0 = a.layer0, .n_layers = a.n_layer, .probs = a.probs,
                           .q = a.q, .k = a.k, .v = a.v, .o = a.o};
    hx_ubatch ub = {.n = n, .token = ids, .pos = pos, .seq = seq, .out = outrow, .n_out = 1};
    /* the adapters are the caller's and outlive this call: the CPU context
     * copies the list and holds no references of its own */
    if (!(st = be->ctx_new(m, &bp, &bctx, e)) && !(st = hx_cpu_set_probe(bctx, &probe, e)) &&
        (ip.n_adapters == 0 ||
         !(st = hx_cpu_set_adapters(bctx, ip.adapters, ip.adapter_scales, ip.n_adapters, e))))
        st = be->forward(bctx, &ub, a.logits, NULL, e);
    if (bctx) be->ctx_free(bctx);
    free(pos); free(seq); free(outrow);
    if (st) goto fail;
    *out = a;
    return HX_OK;
fail:
    hx_attention_free(&a);
    return st;
}
