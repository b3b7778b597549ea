/* adapter.c — LoRA adapters in the public API: open one against a model
 * (model/lora.c does the reading and checks) and set the list a context
 * applies. The context holds a reference to every adapter it applies, so
 * hx_adapter_free is safe at any time. */
#include "api/api.h"
#include "core/core.h"
#include "model/lora.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ADAPTERS 64

hx_status hx_adapter_open(hx_model *m, const char *path, hx_adapter **out, hx_error *e) {
    if (!out) return hx_err(e, HX_ERR_ARG, "hx_adapter_open: out is NULL");
    *out = NULL;
    if (!m || !m->api) return hx_err(e, HX_ERR_ARG, "hx_adapter_open: the model is NULL or not opened by hx_model_open");
    if (!path || !*path) return hx_err(e, HX_ERR_ARG, "hx_adapter_open: path is empty");
    return hx_lora_load(m, path, out, e);
}

void hx_adapter_free(hx_adapter *a) { hx_lora_release(a); }

int hx_adapter_n_weights(const hx_adapter *a) { return a ? a->n_weights : 0; }

hx_status hx_adapter_save(const hx_adapter *a, const char *path, hx_error *e) {
    if (!a || !path || !*path) return hx_err(e, HX_ERR_ARG, "hx_adapter_save: adapter or path is NULL");
    return hx_lora_write_gguf(a, path, e);
}

hx_status hx_adapter_merge(const char *base, const char *const *adapters, const float *scales, int n, bool f32_out,
                           const char *out, hx_error *e) {
    if (!base || !out || !adapters || !scales || n < 1)
        return hx_err(e, HX_ERR_ARG, "hx_adapter_merge: a base, an output and at least one adapter are required");
    for (int i = 0; i < n; i++)
        if (!adapters[i] || !isfinite(scales[i]))
            return hx_err(e, HX_ERR_ARG, "hx_adapter_merge: adapter %d is NULL or its scale is not finite", i);
    return hx_lora_merge(base, adapters, scales, n, f32_out, out, e);
}

void hx_api_drop_adapters(hx_context *c) {
    for (int i = 0; i < c->n_adapters; i++) hx_lora_release(c->adapters[i]);
    free(c->adapters);
    free(c->adapter_scales);
    c->adapters = NULL;
    c->adapter_scales = NULL;
    c->n_adapters = 0;
}

hx_status hx_context_set_adapters(hx_context *c, hx_adapter *const *adapters, const float *scales, int n, hx_error *e) {
    if (!c) return hx_err(e, HX_ERR_ARG, "hx_context_set_adapters: context is NULL");
    if (n < 0 || n > MAX_ADAPTERS) return hx_err(e, HX_ERR_ARG, "hx_context_set_adapters: n = %d (0..%d)", n, MAX_ADAPTERS);
    if (n > 0 && (!adapters || !scales)) return hx_err(e, HX_ERR_ARG, "hx_context_set_adapters: adapters or scales is NULL");
    for (int i = 0; i < n; i++) {
        if (!adapters[i]) return hx_err(e, HX_ERR_ARG, "hx_context_set_adapters: adapter %d is NULL", i);
        if (adapters[i]->m != c->m)
            return hx_err(e, HX_ERR_ARG, "hx_context_set_adapters: adapter %d (%s) was opened for another model", i,
                          adapters[i]->path);
        if (!isfinite(scales[i])) return hx_err(e, HX_ERR_ARG, "hx_context_set_adapters: scale %d is not finite", i);
    }
    bool same = n == c->n_adapters;
    for (int i = 0; same && i < n; i++) same = adapters[i] == c->adapters[i] && scales[i] == c->adapter_scales[i];
    if (same) return HX_OK;
    hx_status (*set)(void *, struct hx_adapter *const *, const float *, int, hx_error *) = NULL;
    if (c->be == &hx_backend_cpu) set = hx_cpu_set_adapters;
#ifdef HX_HAVE_CUDA
    if (c->be == &hx_backend_cuda) set = hx_cuda_set_adapters;
#endif
    if (!set) {
        if (n > 0)
            return hx_err(e, HX_ERR_UNSUPPORTED, "hx_context_set_adapters: the %s backend does not apply LoRA adapters "
                          "(use a CPU context, or merge the adapter into the model with helix-bg lora-merge)", c->be->name);
        hx_api_drop_adapters(c);
        return HX_OK;
    }
    hx_adapter **na = NULL;
    float *ns = NULL;
    if (n > 0) {
        na = malloc((size_t)n * sizeof *na);
        ns = malloc((size_t)n * sizeof *ns);
        if (!na || !ns) { free(na); free(ns); return hx_err(e, HX_ERR_NOMEM, "hx_context_set_adapters: out of memory"); }
        memcpy(na, adapters, (size_t)n * sizeof *na);
        memcpy(ns, scales, (size_t)n * sizeof *ns);
    }
    hx_status st = set(c->bctx, na, ns, n, e);
    if (st) { free(na); free(ns); return st; }
    for (int i = 0; i < n; i++) __atomic_add_fetch(&na[i]->refs, 1, __ATOMIC_ACQ_REL);
    hx_api_drop_adapters(c);
    c->adapters = na;
    c->adapter_scales = ns;
    c->n_adapters = n;
    /* the caches hold keys and values computed under the old set */
    for (int s = 0; s < c->n_seq; s++) hx_seq_keep(c, s, 0);
    return HX_OK;
}
