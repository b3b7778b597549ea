/* dev.c — include/helix_dev.h: what helix-bg's developer commands need
 * beyond helix.h (dumps, synth, a tokenizer alone, benchmark facts), on top of
 * the library's modules. */
#include "helix_dev.h"

#include "api/api.h"
#include "backend/cpu/matmul.h"
#include "core/core.h"
#include "core/pool.h"
#include "model/synth.h"
#include "quant/quant.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/checks/checks.h"
#include "backend/cuda/cuda.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- contexts with developer options ---- */

/* hx_context_new, then the backend context made again with the dump options.
 * The backend parameters are rebuilt here as context.c builds them; the KV
 * cache is allocated twice for a moment. context.c taking hx_backend_dev
 * itself would remove both (a developer path: generate --dump only). */
hx_status hx_dev_context_new(hx_model *m, const hx_context_params *p, const hx_dev_context_params *dp,
                             hx_context **out, hx_error *e) {
    hx_status st = hx_context_new(m, p, out, e);
    if (st || !dp || (!dp->dump_dir && !dp->n_dump_positions && !dp->cuda && !dp->split_one_gpu)) return st;
    hx_context *c = *out;
    c->be->ctx_free(c->bctx);
    c->bctx = NULL;
    hx_backend_params bp = {.n_seq = c->n_seq, .n_ctx_seq = c->n_ctx_seq, .n_ubatch = c->p.n_ubatch,
                            .n_threads = c->p.n_threads, .kv_f32 = c->p.kv_f32, .exact = c->p.exact,
                            .gpu_index = m->api->gpu_index, .tp = m->api->tp, .layer_split = m->api->layer_split,
                            .dev = {dp->dump_dir, dp->dump_positions, dp->n_dump_positions, dp->cuda,
                                    dp->split_one_gpu},
                            .kv_page = c->page, .kv_pages = c->n_pages};
    /* a fresh context holds no sequence: every page is free again */
    for (int q = 0; q < c->n_pages; q++) c->free_pg[q] = c->n_pages - 1 - q;
    c->n_free = c->n_pages;
    for (int q = 0; q < c->n_seq; q++) { c->seq_npg[q] = 0; c->seq_len[q] = 0; }
    if ((st = c->be->ctx_new(m, &bp, &c->bctx, e))) {
        c->bctx = NULL;
        hx_context_free(c);
        *out = NULL;
    }
    return st;
}

hx_status hx_dev_cuda_opts_from_env(const struct hx_cuda_dev_opts **out, hx_error *e) {
    if (!out) return hx_err(e, HX_ERR_ARG, "hx_dev_cuda_opts_from_env: out is NULL");
    *out = NULL;
#ifdef HX_HAVE_CUDA
    static hx_cuda_dev_opts opts; /* the skip string and wpr rules it points to live for the process too */
    static const hx_cuda_dev_opts none;
    hx_status st = hx_cuda_dev_opts_from_env(&opts, e);
    if (st) return st;
    if (memcmp(&opts, &none, sizeof opts)) *out = &opts; /* zeroed first by hx_cuda_dev_opts_from_env */
#else
    (void)e;
#endif
    return HX_OK;
}

/* ---- a tokenizer alone ---- */

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* An hx_model with a tokenizer and no weights. It reports itself as an
 * encoder so hx_context_new refuses it (HX_ERR_ARG) instead of binding
 * weights that are not there. */
hx_status hx_dev_tokenizer_open(const char *path, hx_model **out, hx_error *e) {
    if (!out || !path) return hx_err(e, HX_ERR_ARG, "hx_dev_tokenizer_open: NULL argument");
    *out = NULL;
    hx_tok *tok = NULL;
    hx_status st = ends_with(path, ".gguf") ? hx_tok_load_gguf(path, &tok, e)
                   : ends_with(path, ".json") ? hx_tok_load_hf_json(path, &tok, e)
                   : ends_with(path, ".txt") ? hx_tok_load_vocab_txt(path, &tok, e)
                                             : hx_tok_load_spm_model(path, &tok, e);
    if (st) return st;
    hx_model *m = calloc(1, sizeof *m);
    struct hx_model_api *a = m ? calloc(1, sizeof *a) : NULL;
    if (!a) {
        free(m);
        hx_tok_free(tok);
        return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    }
    m->api = a;
    a->tok = tok;
    a->device = HX_DEVICE_CPU;
    m->cfg.arch = HX_ARCH_BERT;
    m->cfg.n_vocab = hx_tok_n_vocab(tok);
    snprintf(m->cfg.arch_name, sizeof m->cfg.arch_name, "tokenizer");
    snprintf(m->cfg.name, sizeof m->cfg.name, "tokenizer only (%s)", path);
    snprintf(a->fingerprint, sizeof a->fingerprint, "tokenizer:%s", path);
    *out = m;
    return HX_OK;
}

/* ---- model facts for benchmarks ---- */

static uint64_t tensor_bytes(const hx_tensor *t) {
    if (!t->data) return 0;
    uint64_t rows = 1;
    for (int d = 1; d < 4; d++) rows *= (uint64_t)(t->ne[d] > 0 ? t->ne[d] : 1);
    return rows * hx_row_size(t->type, t->ne[0]);
}

void hx_dev_model_split(const hx_model *m, int *tp, int *layer_split) {
    *tp = m && m->api ? m->api->tp : 1;
    *layer_split = m && m->api ? m->api->layer_split : 1;
}

uint64_t hx_dev_model_decode_bytes(const hx_model *m) {
    if (!m || !m->api) return 0;
    uint64_t b = m->api->size_bytes; /* every bound weight once (a tied output is the embedding) */
    if (!m->cfg.tied_output) b -= tensor_bytes(&m->tok_embd);
    return b;
}

const char *hx_dev_model_mix(const hx_model *m) {
    /* llama.cpp's llama_ftype numbers */
    static const char *const ft[] = {"f32", "f16", "q4_0", "q4_1", NULL, NULL, NULL, "q8_0", "q5_0", "q5_1",
                                     "q2_k", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m",
                                     "q6_k"};
    uint64_t v;
    if (m && m->gguf && hx_gguf_get_u64(m->gguf, "general.file_type", &v)) {
        if (v < sizeof ft / sizeof ft[0] && ft[v]) return ft[v];
        if (v == 32) return "bf16";
    }
    return hx_model_type_name(m);
}

/* ---- random-weight models ---- */

const char *hx_dev_synth_preset(int i) {
    const hx_preset *p = i >= 0 ? hx_preset_at(i) : NULL;
    return p ? p->name : NULL;
}

const char *hx_dev_synth_mix(int i) { return i >= 0 && i < HX_MIX_COUNT ? hx_mix_name((hx_mix)i) : NULL; }

hx_status hx_dev_synth_write(const hx_dev_synth_params *p, const char *path, hx_error *e) {
    if (!p || !path || !p->preset || !p->mix) return hx_err(e, HX_ERR_ARG, "hx_dev_synth_write: NULL argument");
    hx_synth_opts o = {.seed = p->seed, .n_layer = p->n_layer, .n_vocab = p->n_vocab, .tokenizer = p->tokenizer,
                       .n_threads = p->n_threads, .progress = p->progress};
    if (!(o.preset = hx_preset_find(p->preset))) return hx_err(e, HX_ERR_ARG, "unknown preset '%s'", p->preset);
    int mix = hx_mix_from_name(p->mix);
    if (mix < 0) return hx_err(e, HX_ERR_ARG, "unknown mix '%s'", p->mix);
    o.mix = (hx_mix)mix;
    return hx_synth_write(&o, path, e);
}

/* ---- CPU kernels ---- */

const char *hx_dev_cpu_isa(void) { return hx_isa_name(hx_isa_current()); }
int hx_dev_isa_level(void) { return (int)hx_isa_current(); }
int hx_dev_isa_avx2_level(void) { return (int)HX_ISA_AVX2; }
const char *hx_dev_isa_level_name(int level) { return hx_isa_name((hx_isa)level); }
void hx_dev_isa_set(int level) { hx_isa_set((hx_isa)level); }

static hx_tensor as_tensor(const hx_dev_matrix *W) {
    return (hx_tensor){"w", W->type, {W->cols, W->rows, 1, 1}, W->data};
}

hx_status hx_dev_matvec(hx_pool *pool, const hx_dev_matrix *W, const float *x, float *y, hx_error *e) {
    if (!W || !x || !y) return hx_err(e, HX_ERR_ARG, "hx_dev_matvec: NULL argument");
    hx_tensor t = as_tensor(W);
    return hx_matvec(pool, &t, x, y, e);
}

hx_status hx_dev_matmul(hx_pool *pool, const hx_dev_matrix *W, const float *X, int64_t n, float *Y, hx_error *e) {
    if (!W || !X || !Y) return hx_err(e, HX_ERR_ARG, "hx_dev_matmul: NULL argument");
    hx_tensor t = as_tensor(W);
    return hx_matmul(pool, &t, X, n, Y, e);
}

hx_status hx_dev_matmul_multi(hx_pool *pool, int count, const hx_dev_matrix *const *Ws, const float *X, int64_t n,
                              float *const *Ys, hx_error *e) {
    if (count < 1 || count > 4 || !Ws || !X || !Ys)
        return hx_err(e, HX_ERR_ARG, "hx_dev_matmul_multi: %d matrices (1..4) or NULL argument", count);
    hx_tensor t[4];
    const hx_tensor *tp[4];
    for (int i = 0; i < count; i++) {
        t[i] = as_tensor(Ws[i]);
        tp[i] = &t[i];
    }
    return hx_matmul_multi(pool, count, tp, X, n, Ys, 0, e);
}

/* ---- GPU facts ---- */

hx_status hx_dev_cuda_device_name(int index, char *buf, size_t cap, hx_error *e) {
#ifdef HX_HAVE_CUDA
    hx_cuda_device d;
    hx_status st = hx_cuda_init(index, &d, e);
    if (!st && cap) snprintf(buf, cap, "%s", d.name);
    return st;
#else
    (void)index, (void)buf, (void)cap;
    return hx_err(e, HX_ERR_UNSUPPORTED, "this build has no CUDA backend");
#endif
}

hx_status hx_dev_cuda_copy_bandwidth(size_t bytes, int reps, double *gbps, hx_error *e) {
#ifdef HX_HAVE_CUDA
    return hx_cuda_copy_bandwidth(bytes, reps, gbps, e);
#else
    (void)bytes, (void)reps, (void)gbps;
    return hx_err(e, HX_ERR_UNSUPPORTED, "this build has no CUDA backend");
#endif
}
