/* embed_neural.c — the BERT embedder (hx_embed) behind kb_embedder. Kept apart
 * from kb.c so the data.log and cache readers link without the model code
 * (the fuzz targets build from kb.c and core.c alone). */
#include "kb/kb.h"
#include "kb/analyze.h"
#include "core/core.h"

#include <stdlib.h>

static hx_status neural_embed(kb_embedder *self, const char *const *texts, int n, float *out, hx_error *e) {
    return hx_embed(self->impl, texts, n, out, e);
}
size_t kb_embed_call_texts(const kb_embedder *em) {
    return em->embed == neural_embed && !strcmp(hx_embedder_device(em->impl), "cpu") ? 8192 : 65536;
}

static void neural_free(kb_embedder *self) { hx_embedder_free(self->impl); free(self); }

hx_status kb_neural_new(const char *model, int n_threads, kb_embedder **out, hx_error *e) {
    *out = NULL;
    kb_embedder *em = calloc(1, sizeof *em);
    if (!em) return hx_err(e, HX_ERR_NOMEM, "out of memory");
    hx_embedder *h = NULL;
    hx_status st = hx_embedder_open(model, n_threads, &h, e);
    if (st) { free(em); return st; }
    const char *base = strrchr(model, '/');
    snprintf(em->name, sizeof em->name, "%s", base && base[1] ? base + 1 : model);
    snprintf(em->fingerprint, sizeof em->fingerprint, "%s", hx_embedder_fingerprint(h));
    em->dim = hx_embedder_dim(h);
    em->embed = neural_embed;
    em->free = neural_free;
    em->impl = h;
    *out = em;
    return HX_OK;
}

hx_status kb_neural_set_type(kb_embedder *em, const char *type, hx_error *e) {
    if (strncmp(em->fingerprint, "bert:", 5)) return hx_err(e, HX_ERR_ARG, "embedder %s has no number type", em->name);
    hx_status st = hx_embedder_set_type(em->impl, type, e);
    if (!st) snprintf(em->fingerprint, sizeof em->fingerprint, "%s", hx_embedder_fingerprint(em->impl));
    return st;
}

hx_status kb_neural_set_device(kb_embedder *em, const char *device, hx_error *e) {
    if (em->embed != neural_embed) return hx_err(e, HX_ERR_ARG, "embedder %s runs on the CPU only", em->name);
    return hx_embedder_set_device(em->impl, device, e);
}
