/* forward.c — the CPU decoder: one recipe with flags for llama / qwen2 /
 * qwen3 / gemma3, run over a batch of tokens of one or several sequences.
 *
 * KV cache: rows of n_head_kv*head_dim elements (f16 or f32), one
 * allocation per layer, sequences of at most n_ctx positions. Two layouts:
 *  - slots: n_seq * kv_rows[l] rows, sequence s in the slot starting at row
 *    s * kv_rows[l], position t in row t % kv_rows[l] of it: a sliding-window
 *    layer keeps a ring of window + ubatch rows (hx_kv_layer_rows), enough for
 *    every query of a batch of at most ubatch tokens of that sequence.
 *  - pages (hx_backend_params.kv_page > 0): a layer without a ring (kv_rows[l]
 *    == n_ctx) holds a pool of n_pages pages of `page` rows; position t of
 *    sequence s is row t % page of page ptab[s][t / page]. The API layer
 *    (api/context.c) hands pages out and sets the table (kv_map); every such
 *    layer uses the same page ids. Ring layers keep their slots: a ring is
 *    small and fixed, and only full-length layers need to share.
 *
 * Per layer (x is the residual stream, (n, n_embd) f32, n tokens of any
 * sequences; every token has its own position and sequence):
 *   h = RMSNorm(x) * attn_norm
 *   q,k,v = Wq h (+bq), Wk h (+bk), Wv h (+bv)        (n, n_head*hd) / (n, n_kv*hd)
 *   [qk_norm] q,k = per-head RMSNorm * q_norm / k_norm
 *   q,k = RoPE(pos) (NORM: adjacent pairs, NEOX: halves; base per layer kind)
 *   cache k,v in the token's slot at its position (f16 or f32)
 *   a = softmax(scale * q k^T, causal [+ sliding window]) v over the token's
 *       own sequence, GQA head sharing
 *   o = Wo a (+bo)  [post_norms: o = RMSNorm(o) * attn_post_norm]
 *   x += o
 *   h = RMSNorm(x) * ffn_norm
 *   f = Wdown (act(Wgate h) * Wup h)  [post_norms: f = RMSNorm(f) * ffn_post_norm]
 *   x += f
 * then, for the tokens that ask, logits = Wout (RMSNorm(x) * output_norm)
 * [final softcap]. The projections run once over all n tokens (weights read
 * once per batch); attention is threaded over (token, head) pairs. Norm
 * weights and biases are converted to f32 once, at context creation.
 *
 * Dump format (hx_backend_dev.dump_dir / --dump DIR; the CUDA path writes the
 * same), sequence 0 only:
 *   one file per (position, layer, point): DIR/pos%05d-L%03d-{input,attn,ffn}.f32
 *   plus DIR/pos%05d-final.f32 (the output-normed hidden state) for positions
 *   whose logits are computed. Each file: 8-byte magic "HXDUMP1\0", int32 ndim,
 *   int64 dims[ndim] (dims[0] fastest), then prod(dims) little-endian f32.
 *   input = residual stream entering the layer, attn = attention block output
 *   added to the residual (after Wo and post-norm), ffn = FFN block output
 *   added to the residual (after post-norm). All (n_embd).
 *
 * Sequence state (seq_read / seq_write): a 24-byte header (magic "HXS1",
 * int32 n, hw, kv element bytes, n_layer, elements per row), then per layer
 * the K rows and then the V rows holding positions max(0, n - kv_rows[l])
 * .. n-1, in position order.
 */
#include "backend/cpu/forward.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#include "api/backend.h"
#include "backend/cpu/attn.h"
#include "backend/cpu/fa_ggml.h"
#include "backend/cpu/glu.h"
#include "backend/cpu/matmul.h"
#include "core/core.h"
#include "model/lora.h"
#include "model/lora_mm.h"
#include "quant/dot.h"
#include "quant/quant.h"

/* Norm weights and biases of one layer as f32 (NULL when the model has none). */
typedef struct layer_vecs {
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm, *attn_post_norm, *ffn_post_norm;
    const float *bq, *bk, *bv, *bo, *ffn_up_b, *ffn_down_b;
} layer_vecs;

struct hx_cpu_ctx {
    const hx_model *m;
    hx_pool *pool;
    int n_seq;            /* sequence slots */
    int n_ctx;            /* positions per slot */
    int kv_type;          /* HX_TYPE_F16 or HX_TYPE_F32 */
    bool ggml_compat;     /* see hx_cpu_opts */
    bool f16c;            /* AVX2+F16C+FMA usable: SIMD f16 accumulator */
    bool attn_grouped;    /* exact-mode attention by (token, kv head): attn_task_group */
    size_t kv_elem;       /* bytes per cache element */
    size_t kv_row;        /* bytes per cache row (n_head_kv * head_dim elements) */
    int *seq_len;         /* per slot: positions held (the next position) */
    int *seq_hw;          /* per slot: 1 + the highest position written since the slot was last
                             emptied; a ring row may hold any position below it, so a position
                             q is still in its ring when q >= hw - kv_rows (hx_kv_rewind) */
    int ubatch;           /* most tokens per internal forward (bounds the sliding-window ring) */
    int piece;            /* hx_cpu_forward runs in pieces of this many tokens: ubatch with a ring or
                             in the parity mode (llama.cpp splits the same way), else 0 = whole */
    int *kv_rows;         /* per layer: cache rows per slot */
    void **k_cache, **v_cache; /* per layer: (n_seq * kv_rows[l] | n_pages * page, n_head_kv*head_dim) */
    int page, page_shift; /* rows per page (a power of two), log2 of it; 0: slots only */
    int n_pages, max_pg;  /* pages in the pool; table entries per sequence (n_ctx / page rounded up) */
    int32_t *ptab;        /* (n_seq, max_pg): page ids of each sequence, in position order */
    layer_vecs *lv;       /* per layer, pointing into vec_arena */
    const float *out_norm;
    float *vec_arena;
    char *dump_dir;
    int *dump_pos; int n_dump_pos;
    /* scratch, grown to the largest batch seen: */
    int cap;
    float *x, *h, *q, *k, *v, *att, *o, *gate, *up; /* (cap, dim) each */
    int32_t *ub_pos, *ub_seq, *ub_out; /* (cap): hx_cpu_forward's ubatch */
    int *seq_next;        /* (n_seq): batch check, next position of each sequence in the batch */
    float *scores;        /* (n_threads, n_ctx) */
    float *fa_kt, *fa_v;  /* parity mode, 64+ queries: f32 copies of a layer's cache (fa_prepare) */
    size_t fa_cap; int fa_tiles;
    float *vacc;          /* (n_threads, head_dim) */
    float *rope_cs, *rope_sn; /* (n_threads, head_dim/2): one RoPE table per thread */
    double *rope_freq;    /* (head_dim/2): base^(-2i/hd) of the layer in progress */
    /* LoRA adapters applied (hx_cpu_set_adapters; the API layer keeps them alive) */
    struct hx_adapter **lora;
    float *lora_scale;
    int n_lora;
    float *lora_t, *lora_d; /* A x (n, rank) and B (A x) (n, n_out) */
    size_t lora_t_cap, lora_d_cap;
    hx_attn_probe *probe; /* attention inspection (api/backend.h); NULL: off */
};

/* ---- math helpers ---- */

/* out[i] = x[i] / rms(x) * w[i], w from a norm tensor (f32 or f16). */
static void rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    /* ggml's rounding: f32 squares summed in double, mean and 1/sqrt in f32 (one ulp of
     * scale is enough to flip a Q8 activation rounding downstream on real models) */
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)(x[i] * x[i]);
    const float mean = (float)(ss / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

static float gelu_tanh(float x) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}
static float silu(float x) { return x / (1.0f + expf(-x)); }

/* freq[i] = base^(-2i/hd), i < hd/2: once per layer, shared by every token. */
static void rope_freqs(double *freq, int hd, double base) {
    for (int i = 0; i < hd / 2; i++) freq[i] = pow(base, -2.0 * i / hd);
}

/* RoPE angles for one position: cs/sn[i] = cos/sin(pos * freq[i]),
 * computed once per (token, layer) and shared by every head. */
static void rope_table(float *cs, float *sn, int hd, double pos, const double *freq) {
    for (int i = 0; i < hd / 2; i++) {
        double theta = pos * freq[i];
        cs[i] = (float)cos(theta);
        sn[i] = (float)sin(theta);
    }
}

/* ggml_compat: the angles as ggml's rope cache makes them, in f32: theta starts at the
 * position and is multiplied by powf(base, -2/hd) per pair (one ulp off the exact angle
 * is enough to flip an f16 K rounding and move a real model's logits). */
static void rope_table_ggml(float *cs, float *sn, int hd, int pos, float freq_scale, float base) {
    const float theta_scale = powf(base, -2.0f / (float)hd);
    float theta = (float)pos;
    for (int i = 0; i < hd / 2; i++) {
        cs[i] = cosf(freq_scale * theta);
        sn[i] = sinf(freq_scale * theta);
        theta *= theta_scale;
    }
}

/* Rotate one head vector of length hd: NORM pairs (2i, 2i+1), NEOX pairs (i, i + hd/2). */
static void rope_apply(float *v, int hd, const float *cs, const float *sn, hx_rope_style style, bool fused) {
    int half = hd / 2;
    for (int i = 0; i < half; i++) {
        int a = style == HX_ROPE_NORM ? 2 * i : i;
        int b = style == HX_ROPE_NORM ? 2 * i + 1 : i + half;
        float x0 = v[a], x1 = v[b];
        if (fused) { /* llama.cpp's build contracts these to FMAs, the first product fused */
            v[a] = fmaf(x0, cs[i], -(x1 * sn[i]));
            v[b] = fmaf(x0, sn[i], x1 * cs[i]);
            continue;
        }
        v[a] = x0 * cs[i] - x1 * sn[i];
        v[b] = x0 * sn[i] + x1 * cs[i];
    }
}

/* ---- context ---- */

/* Whether layer l's rows are paged (a pool shared by the sequences). */
static inline bool layer_paged(const hx_cpu_ctx *c, int l) { return c->page > 0 && c->kv_rows[l] >= c->n_ctx; }

static uint8_t *slot_rows(const hx_cpu_ctx *c, void *const *cache, int layer, int seq) {
    return (uint8_t *)cache[layer] + (size_t)seq * c->kv_rows[layer] * c->kv_row;
}

/* The rows of sequence seq in layer l of an f16 cache as the attention
 * kernels address them (attn.h: row r is the ring row, = the position when
 * paged); off: bytes into each row (a head's columns). */
static hx_kv_rows kv_rows_of(const hx_cpu_ctx *c, void *const *cache, int layer, int seq, size_t off) {
    if (layer_paged(c, layer))
        return (hx_kv_rows){(const uint16_t *)((const uint8_t *)cache[layer] + off), c->kv_row / 2,
                            c->ptab + (size_t)seq * c->max_pg, c->page_shift};
    return (hx_kv_rows){(const uint16_t *)(slot_rows(c, cache, layer, seq) + off), c->kv_row / 2, NULL, 0};
}

/* Bytes of row r (see kv_rows_of) of sequence seq in layer l. */
static inline uint8_t *kv_at(const hx_cpu_ctx *c, void *const *cache, int layer, int seq, int r) {
    if (!layer_paged(c, layer)) return slot_rows(c, cache, layer, seq) + (size_t)r * c->kv_row;
    size_t row = (size_t)c->ptab[(size_t)seq * c->max_pg + (size_t)(r >> c->page_shift)] << c->page_shift |
                 (size_t)(r & (c->page - 1));
    return (uint8_t *)cache[layer] + row * c->kv_row;
}

void hx_cpu_ctx_free(hx_cpu_ctx *c) {
    if (!c) return;
    if (c->k_cache)
        for (int l = 0; l < c->m->cfg.n_layer; l++) { free(c->k_cache[l]); free(c->v_cache[l]); }
    free(c->k_cache); free(c->v_cache); free(c->kv_rows); free(c->ptab);
    free(c->seq_len); free(c->seq_hw); free(c->seq_next);
    free(c->lv); free(c->vec_arena);
    free(c->dump_dir); free(c->dump_pos);
    free(c->x); free(c->h); free(c->q); free(c->k); free(c->v); free(c->att); free(c->o);
    free(c->gate); free(c->up); free(c->scores); free(c->vacc); free(c->fa_kt); free(c->fa_v);
    free(c->ub_pos); free(c->ub_seq); free(c->ub_out);
    free(c->rope_cs); free(c->rope_sn); free(c->rope_freq);
    free(c->lora); free(c->lora_scale); free(c->lora_t); free(c->lora_d);
    hx_pool_free(c->pool);
    free(c);
}

/* One norm weight or bias as f32 at *at (advanced by n); NULL when the model
 * has none, an error when it is required. */
static hx_status prep_vec(const hx_tensor *t, int64_t n, bool required, const char *what, float **at,
                          const float **out, hx_error *e) {
    *out = NULL;
    if (!t->data) {
        if (required) return hx_err(e, HX_ERR_FORMAT, "cpu forward: norm tensor '%s' missing", t->name ? t->name : what);
        return HX_OK;
    }
    if (t->ne[0] != n)
        return hx_err(e, HX_ERR_FORMAT, "cpu forward: tensor '%s' has %lld elements, expected %lld",
                      t->name ? t->name : what, (long long)t->ne[0], (long long)n);
    hx_dequantize_row(t->type, t->data, *at, n);
    *out = *at;
    *at += n;
    return HX_OK;
}

static hx_status prep_vecs(hx_cpu_ctx *c, hx_error *e) {
    const hx_model *m = c->m;
    const hx_model_config *cfg = &m->cfg;
    int64_t D = cfg->n_embd, hd = cfg->head_dim, nq = (int64_t)cfg->n_head * hd, nkv = (int64_t)cfg->n_head_kv * hd;
    int64_t per_layer = 5 * D + 2 * hd + nq + 2 * nkv + cfg->n_ff + D;
    c->vec_arena = malloc(sizeof(float) * (size_t)(per_layer * cfg->n_layer + D));
    c->lv = calloc((size_t)cfg->n_layer, sizeof(layer_vecs));
    if (!c->vec_arena || !c->lv) return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory");
    float *at = c->vec_arena;
    for (int l = 0; l < cfg->n_layer; l++) {
        const hx_layer_weights *L = &m->layers[l];
        layer_vecs *v = &c->lv[l];
        hx_status st;
        if ((st = prep_vec(&L->attn_norm, D, true, "attn_norm", &at, &v->attn_norm, e)) ||
            (st = prep_vec(&L->ffn_norm, D, true, "ffn_norm", &at, &v->ffn_norm, e)) ||
            (st = prep_vec(&L->q_norm, hd, cfg->qk_norm, "attn_q_norm", &at, &v->q_norm, e)) ||
            (st = prep_vec(&L->k_norm, hd, cfg->qk_norm, "attn_k_norm", &at, &v->k_norm, e)) ||
            (st = prep_vec(&L->attn_post_norm, D, cfg->post_norms, "post_attention_norm", &at, &v->attn_post_norm, e)) ||
            (st = prep_vec(&L->ffn_post_norm, D, cfg->post_norms, "post_ffw_norm", &at, &v->ffn_post_norm, e)) ||
            (st = prep_vec(&L->bq, nq, false, "attn_q.bias", &at, &v->bq, e)) ||
            (st = prep_vec(&L->bk, nkv, false, "attn_k.bias", &at, &v->bk, e)) ||
            (st = prep_vec(&L->bv, nkv, false, "attn_v.bias", &at, &v->bv, e)) ||
            (st = prep_vec(&L->bo, D, false, "attn_output.bias", &at, &v->bo, e)) ||
            (st = prep_vec(&L->ffn_up_b, cfg->n_ff, false, "ffn_up.bias", &at, &v->ffn_up_b, e)) ||
            (st = prep_vec(&L->ffn_down_b, D, false, "ffn_down.bias", &at, &v->ffn_down_b, e)))
            return st;
    }
    return prep_vec(&m->output_norm, D, true, "output_norm", &at, &c->out_norm, e);
}

typedef struct ctx_opts {
    int n_seq, n_ctx, kv_type, n_threads, ubatch;
    int page, n_pages;  /* hx_backend_params.kv_page / kv_pages; page 0: slots */
    bool ggml_compat;
    const char *dump_dir;
    const int *dump_positions; int n_dump_positions;
    bool attn_per_head; /* (tests) hx_cpu_opts.attn_per_head */
} ctx_opts;

static hx_status ctx_create(const hx_model *m, const ctx_opts *o, hx_cpu_ctx **out, hx_error *e) {
    *out = NULL;
    const hx_model_config *cfg = &m->cfg;
    if (cfg->arch == HX_ARCH_BERT)
        return hx_err(e, HX_ERR_UNSUPPORTED, "cpu forward: %s is an encoder; the decoder recipe does not apply",
                      cfg->arch_name);
    if (cfg->n_layer <= 0 || cfg->n_embd <= 0 || cfg->n_head <= 0 || cfg->n_head_kv <= 0 ||
        cfg->n_head % cfg->n_head_kv != 0 || cfg->head_dim <= 0 || cfg->head_dim % 2 != 0 || cfg->n_vocab <= 0 ||
        cfg->n_ff <= 0 || cfg->n_layer > HX_MAX_LAYERS)
        return hx_err(e, HX_ERR_FORMAT, "cpu forward: unusable config (layers %d, embd %d, heads %d/%d, head_dim %d, ff %d, vocab %d)",
                      cfg->n_layer, cfg->n_embd, cfg->n_head, cfg->n_head_kv, cfg->head_dim, cfg->n_ff, cfg->n_vocab);
    if (o->n_seq < 1 || o->n_ctx < 1 || o->ubatch < 1)
        return hx_err(e, HX_ERR_ARG, "cpu forward: %d sequences of %d positions, ubatch %d (each must be >= 1)",
                      o->n_seq, o->n_ctx, o->ubatch);
    if (o->page < 0 || (o->page > 0 && ((o->page & (o->page - 1)) || o->n_pages < 1 || (int64_t)o->n_pages * o->page >
                                                                  INT32_MAX)))
        return hx_err(e, HX_ERR_ARG, "cpu forward: KV pages of %d positions, %d pages (a power of two, >= 1 page)",
                      o->page, o->n_pages);
    if (o->kv_type != HX_TYPE_F16 && o->kv_type != HX_TYPE_F32)
        return hx_err(e, HX_ERR_ARG, "cpu forward: KV cache type %s unsupported (f16 or f32)", hx_type_name(o->kv_type));
    hx_cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory");
    c->m = m;
    c->n_seq = o->n_seq;
    c->n_ctx = o->n_ctx;
    c->kv_type = o->kv_type;
    c->kv_elem = c->kv_type == HX_TYPE_F16 ? 2 : 4;
    c->kv_row = (size_t)cfg->n_head_kv * cfg->head_dim * c->kv_elem;
    c->ggml_compat = o->ggml_compat;
    hx_cpu_features cf = hx_cpu_detect();
    c->f16c = hx_isa_current() >= HX_ISA_AVX2 && cf.f16c && cf.fma;
    c->pool = hx_pool_create(o->n_threads);
    c->ubatch = o->ubatch;
    c->k_cache = calloc(cfg->n_layer, sizeof(void *));
    c->v_cache = calloc(cfg->n_layer, sizeof(void *));
    c->kv_rows = calloc(cfg->n_layer, sizeof(int));
    c->seq_len = calloc((size_t)c->n_seq, sizeof(int));
    c->seq_hw = calloc((size_t)c->n_seq, sizeof(int));
    c->seq_next = calloc((size_t)c->n_seq, sizeof(int));
    if (o->page > 0) {
        c->page = o->page;
        while ((1 << c->page_shift) < c->page) c->page_shift++;
        c->n_pages = o->n_pages;
        c->max_pg = (int)(((int64_t)c->n_ctx + c->page - 1) / c->page);
        c->ptab = calloc((size_t)c->n_seq * (size_t)c->max_pg, sizeof *c->ptab);
        if (!c->ptab) { hx_cpu_ctx_free(c); return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory"); }
    }
    if (!c->pool || !c->k_cache || !c->v_cache || !c->kv_rows || !c->seq_len || !c->seq_hw || !c->seq_next) {
        hx_cpu_ctx_free(c);
        return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory");
    }
    hx_status st = prep_vecs(c, e);
    if (st) { hx_cpu_ctx_free(c); return st; }
    for (int l = 0; l < cfg->n_layer; l++) {
        c->kv_rows[l] = hx_kv_layer_rows(cfg, l, c->n_ctx, c->ubatch);
        size_t rows = layer_paged(c, l) ? (size_t)c->n_pages * c->page : (size_t)c->n_seq * c->kv_rows[l];
        if ((!layer_paged(c, l) && rows / (size_t)c->n_seq != (size_t)c->kv_rows[l]) || rows > SIZE_MAX / c->kv_row) {
            hx_cpu_ctx_free(c);
            return hx_err(e, HX_ERR_NOMEM, "cpu forward: KV cache of %d x %d positions overflows", c->n_seq, c->n_ctx);
        }
        c->k_cache[l] = calloc(rows, c->kv_row);
        c->v_cache[l] = calloc(rows, c->kv_row);
        if (!c->k_cache[l] || !c->v_cache[l]) {
            hx_cpu_ctx_free(c);
            return hx_err(e, HX_ERR_NOMEM, "cpu forward: cannot allocate a KV cache of %d sequences x %d positions",
                          c->n_seq, c->n_ctx);
        }
    }
    c->piece = hx_kv_has_ring(cfg, c->kv_rows, c->n_ctx) || c->ggml_compat ? c->ubatch : 0;
    int nth = hx_pool_threads(c->pool);
    /* the exact mode's grouped attention (attn_task_group): same bits as attn_task's
     * per-head loop, which it replaces where its kernels apply */
    int G = cfg->n_head_kv > 0 && cfg->n_head % cfg->n_head_kv == 0 ? cfg->n_head / cfg->n_head_kv : 0;
    c->attn_grouped = c->f16c && c->kv_type == HX_TYPE_F16 && cfg->head_dim % 32 == 0 && G >= 1 &&
                      G <= HX_ATTN_GROUP_MAX && hx_get_vec_dot(HX_TYPE_F16, hx_isa_current()) == hx_dot_f16_avx2 &&
                      !o->attn_per_head;
    c->scores = malloc(sizeof(float) * nth * (c->attn_grouped ? G : 1) * c->n_ctx);
    c->vacc = malloc(sizeof(float) * nth * cfg->head_dim);
    c->rope_cs = malloc(sizeof(float) * nth * (cfg->head_dim / 2 + 1));
    c->rope_sn = malloc(sizeof(float) * nth * (cfg->head_dim / 2 + 1));
    c->rope_freq = malloc(sizeof(double) * (cfg->head_dim / 2 + 1));
    if (!c->scores || !c->vacc || !c->rope_cs || !c->rope_sn || !c->rope_freq) {
        hx_cpu_ctx_free(c);
        return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory");
    }
    const char *dd = o->dump_dir;
    if (dd && *dd) {
        struct stat sb;
        if (stat(dd, &sb) != 0 && mkdir(dd, 0755) != 0) {
            hx_cpu_ctx_free(c);
            return hx_err(e, HX_ERR_IO, "dump: cannot create directory %s: %s", dd, strerror(errno));
        }
        c->dump_dir = strdup(dd);
        if (!c->dump_dir) { hx_cpu_ctx_free(c); return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory"); }
    }
    if (o->dump_positions && o->n_dump_positions > 0) {
        c->dump_pos = malloc(sizeof(int) * o->n_dump_positions);
        if (!c->dump_pos) { hx_cpu_ctx_free(c); return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory"); }
        memcpy(c->dump_pos, o->dump_positions, sizeof(int) * o->n_dump_positions);
        c->n_dump_pos = o->n_dump_positions;
    }
    *out = c;
    return HX_OK;
}

hx_status hx_cpu_ctx_new(const hx_model *m, const hx_cpu_opts *opts, hx_cpu_ctx **out, hx_error *e) {
    *out = NULL;
    hx_cpu_opts o = opts ? *opts : (hx_cpu_opts){0};
    const hx_model_config *cfg = &m->cfg;
    ctx_opts co = {
        .n_seq = 1,
        .n_ctx = o.n_ctx > 0 ? o.n_ctx : (cfg->n_ctx_train > 0 && cfg->n_ctx_train < 4096 ? cfg->n_ctx_train : 4096),
        .kv_type = o.kv_f32 ? HX_TYPE_F32 : o.kv_type ? o.kv_type : HX_TYPE_F16,
        .n_threads = o.n_threads,
        .ubatch = o.n_ubatch > 0 ? o.n_ubatch : 512,
        .ggml_compat = o.ggml_compat,
        .dump_dir = o.dump_dir,
        .dump_positions = o.dump_positions,
        .n_dump_positions = o.n_dump_positions,
        .attn_per_head = o.attn_per_head,
    };
    return ctx_create(m, &co, out, e);
}

bool hx_cpu_attn_grouped(const hx_cpu_ctx *c) { return c->attn_grouped && !c->ggml_compat; }

int hx_cpu_n_ctx(const hx_cpu_ctx *c) { return c->n_ctx; }
size_t hx_cpu_kv_bytes(const hx_cpu_ctx *c) {
    size_t rows = 0;
    for (int l = 0; l < c->m->cfg.n_layer; l++)
        rows += layer_paged(c, l) ? (size_t)c->n_pages * c->page : (size_t)c->kv_rows[l] * c->n_seq;
    return 2 * rows * c->kv_row;
}

/* Keep the first n positions of slot seq: n, or 0 when a ring no longer holds
 * what the query at n needs (the slot is then emptied). */
static int seq_keep(hx_cpu_ctx *c, int seq, int n) {
    if (seq < 0 || seq >= c->n_seq) return 0;
    if (n < 0) n = 0;
    if (n >= c->seq_len[seq]) return c->seq_len[seq];
    int kept = n == 0 ? 0 : hx_kv_rewind(&c->m->cfg, c->kv_rows, c->n_ctx, c->seq_hw[seq], n);
    c->seq_len[seq] = kept;
    if (kept == 0) c->seq_hw[seq] = 0;
    return kept;
}

int hx_cpu_truncate(hx_cpu_ctx *c, int pos) { return seq_keep(c, 0, pos); }

/* Grow the per-batch scratch to n tokens. */
static hx_status ensure_scratch(hx_cpu_ctx *c, int n, hx_error *e) {
    if (n <= c->cap) return HX_OK;
    const hx_model_config *cfg = &c->m->cfg;
    size_t nq = (size_t)cfg->n_head * cfg->head_dim, nkv = (size_t)cfg->n_head_kv * cfg->head_dim;
    size_t emb = (size_t)cfg->n_embd, ff = (size_t)cfg->n_ff;
    float **bufs[] = { &c->x, &c->h, &c->q, &c->k, &c->v, &c->att, &c->o, &c->gate, &c->up };
    size_t dims[] = { emb, emb > nq ? emb : nq, nq, nkv, nkv, nq, emb, ff, ff };
    for (int i = 0; i < 9; i++) {
        float *p = realloc(*bufs[i], sizeof(float) * dims[i] * n);
        if (!p) return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory for a batch of %d tokens", n);
        *bufs[i] = p;
    }
    int32_t **ibufs[] = { &c->ub_pos, &c->ub_seq, &c->ub_out };
    for (int i = 0; i < 3; i++) {
        int32_t *p = realloc(*ibufs[i], sizeof(int32_t) * n);
        if (!p) return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory for a batch of %d tokens", n);
        *ibufs[i] = p;
    }
    c->cap = n;
    return HX_OK;
}

static bool want_dump(const hx_cpu_ctx *c, int pos) {
    if (!c->dump_dir) return false;
    if (!c->dump_pos) return true;
    for (int i = 0; i < c->n_dump_pos; i++) if (c->dump_pos[i] == pos) return true;
    return false;
}

/* Write one dump file (format in the header comment). */
static hx_status dump_vec(const hx_cpu_ctx *c, int pos, int layer, const char *what, const float *v, int64_t n,
                          hx_error *e) {
    char path[4096];
    if (layer >= 0) snprintf(path, sizeof path, "%s/pos%05d-L%03d-%s.f32", c->dump_dir, pos, layer, what);
    else snprintf(path, sizeof path, "%s/pos%05d-%s.f32", c->dump_dir, pos, what);
    size_t bytes = 8 + 4 + 8 + sizeof(float) * (size_t)n;
    uint8_t *buf = malloc(bytes);
    if (!buf) return hx_err(e, HX_ERR_NOMEM, "dump: out of memory");
    int32_t ndim = 1;
    memcpy(buf, "HXDUMP1", 8);
    memcpy(buf + 8, &ndim, 4);
    memcpy(buf + 12, &n, 8);
    memcpy(buf + 20, v, sizeof(float) * (size_t)n);
    hx_status st = hx_write_file_atomic(path, buf, bytes, e);
    free(buf);
    return st;
}

/* Rows of x (n, n_embd) of the batch's sequence-0 tokens. */
static hx_status dump_rows(const hx_cpu_ctx *c, const hx_ubatch *ub, int layer, const char *what, const float *x,
                           hx_error *e) {
    int d = c->m->cfg.n_embd;
    for (int i = 0; i < ub->n; i++)
        if (ub->seq[i] == 0 && want_dump(c, ub->pos[i])) {
            hx_status st = dump_vec(c, ub->pos[i], layer, what, x + (size_t)i * d, d, e);
            if (st) return st;
        }
    return HX_OK;
}

/* ---- attention ---- */

typedef struct attn_job {
    hx_cpu_ctx *c;
    int layer, n;
    const int32_t *pos, *seq; /* per token */
    bool tiled;           /* parity mode, one sequence, 64+ queries: ggml's tiled kernel (fa_prepare) */
    int window;           /* 0 = full causal */
    float scale, softcap;
    hx_vec_dot_fn kdot;   /* f32 x (f16|f32 cache row) */
    bool prescale_q;      /* ggml_compat gemma3: llama.cpp scales q before flash attention (scale 1
                             there), so f16(q * scale), not f16(q) * scale (they differ where q * scale
                             is an f16 subnormal) */
    bool grouped;         /* exact mode, f16 cache, AVX2: a task is a (token, kv head), attn_task_group */
} attn_job;

/* The position a query at p sees in row r (r <= p): the last one at or before p that maps there.
 * A row overwritten by a later position of the same batch maps to one before the window. */
static inline int row_pos(int r, int p, int rows) { return r + (p - r) / rows * rows; }

/* f16 KV cache: attention computed the way ggml's CPU flash-attention kernel
 * does it for fewer than 64 queries (decode), so greedy output matches
 * llama.cpp (default f16 cache + flash attention): q rounded to f16, online
 * softmax over the cache rows in row order (ggml walks its cells; ours are the
 * same rows, a ring included), and the V accumulator kept in f16 (rounded
 * after every update). */
/* Rows [lo, hi) of one head's cache for the query at p (visible: positions
 * first..p): M, S and the unnormalized output in f32 (from the f16 accumulator). */
static void ggml_fa_rows(const attn_job *j, const float *qh, const hx_kv_rows *kc, const hx_kv_rows *vc, int first,
                         int p, int lo, int hi, float *Mo, float *So, float *out) {
    hx_cpu_ctx *c = j->c;
    const hx_model_config *cfg = &c->m->cfg;
    int hd = cfg->head_dim;
    int rows = c->kv_rows[j->layer];
    uint16_t vacc[512];
    memset(vacc, 0, sizeof(uint16_t) * hd);
    float S = 0, M = -INFINITY;
    hx_kv_walk wk = {0}, wv = {0};
    for (int r = lo; r < hi && r < rows && r <= p; r++) {
        const uint16_t *kr = hx_kv_next(kc, &wk, r - lo, lo, rows), *vr = hx_kv_next(vc, &wv, r - lo, lo, rows);
        if (row_pos(r, p, rows) < first) continue;
        float s;
        j->kdot(hd, &s, kr, qh);
        if (!j->prescale_q) s *= j->scale;
        if (j->softcap > 0) s = j->softcap * tanhf(s / j->softcap);
        float Mold = M, ms = 1.0f, vs = 1.0f;
        if (s > M) {
            M = s;
            ms = expf(Mold - M);
            if (c->f16c) hx_f16_scale_avx2(hd, vacc, ms);
            else for (int d = 0; d < hd; d++) vacc[d] = hx_fp32_to_fp16(hx_fp16_to_fp32(vacc[d]) * ms);
        } else {
            vs = expf(s - M);
        }
        if (c->f16c) hx_f16_mad_avx2(hd, vacc, vr, vs);
        else for (int d = 0; d < hd; d++)
            vacc[d] = hx_fp32_to_fp16(fmaf(hx_fp16_to_fp32(vr[d]), vs, hx_fp16_to_fp32(vacc[d])));
        S = fmaf(S, ms, vs); /* llama.cpp's build contracts S*ms + vs to an FMA */
    }
    for (int d = 0; d < hd; d++) out[d] = hx_fp16_to_fp32(vacc[d]);
    *Mo = M;
    *So = S;
}

/* kc, vc: head kvh's columns of the query's sequence. */
static void attn_f16_ggml(const attn_job *j, const float *q, float *acc, int first, int p, const hx_kv_rows *kc,
                          const hx_kv_rows *vc) {
    hx_cpu_ctx *c = j->c;
    const hx_model_config *cfg = &c->m->cfg;
    int hd = cfg->head_dim;
    int rows = c->kv_rows[j->layer];
    float qh[512];
    for (int d = 0; d < hd; d++) qh[d] = hx_fp16_to_fp32(hx_fp32_to_fp16(j->prescale_q ? q[d] * j->scale : q[d]));
    /* ggml's view spans n_kv cells: the used ones padded to 256 (at least 256, at
     * most the cache); one query over 512 or more is split into one range per
     * thread, merged in range order */
    int used = rows < p + 1 ? rows : p + 1;
    int n_kv = (used + 255) / 256 * 256;
    int nth = hx_pool_threads(c->pool);
    if (j->n == 1 && n_kv >= 512 && nth > 1) {
        int cs = (n_kv + nth - 1) / nth;
        float Mf = -INFINITY, Sf = 0.0f, part[512];
        for (int d = 0; d < hd; d++) acc[d] = 0.0f;
        for (int k = 0; k < nth && k * cs < n_kv; k++) {
            float Mc, Sc;
            ggml_fa_rows(j, qh, kc, vc, first, p, k * cs, (k + 1) * cs, &Mc, &Sc, part);
            if (Sc == 0.0f) continue;
            float Mn = fmaxf(Mf, Mc), so = expf(Mf - Mn), sn = expf(Mc - Mn);
            for (int d = 0; d < hd; d++) acc[d] = fmaf(acc[d], so, part[d] * sn);
            Sf = fmaf(Sf, so, Sc * sn);
            Mf = Mn;
        }
        if (Sf != 0.0f) {
            float inv = 1.0f / Sf;
            for (int d = 0; d < hd; d++) acc[d] *= inv;
        }
        return;
    }
    float M, S;
    ggml_fa_rows(j, qh, kc, vc, first, p, 0, rows, &M, &S, acc);
    float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < hd; d++) acc[d] *= inv;
}

/* The same for a batch of 64 or more queries of one sequence, where ggml
 * switches to its tiled kernel: q stays f32, the cache rows go in tiles of 64
 * (aligned to row 0), a tile's scores are f32 FMA dot products in dimension
 * order, the tile's softmax uses ggml's vector expf with its 8-lane sums added
 * in double, and the f32 V accumulator takes the tile's weighted rows in order
 * by FMA. */
static void attn_f16_ggml_tiled(const attn_job *j, const float *q, int kvh, float *acc, int first, int p) {
    enum { T = 64 };
    hx_cpu_ctx *c = j->c;
    const hx_model_config *cfg = &c->m->cfg;
    int hd = cfg->head_dim;
    /* the f32 copies fa_prepare made of this layer's cache */
    const float *kt = c->fa_kt + (size_t)kvh * c->fa_tiles * hd * T;
    const float *v32 = c->fa_v + (size_t)kvh * c->fa_tiles * T * hd;
    int rows = c->kv_rows[j->layer], end = rows < p + 1 ? rows : p + 1;
    float qf[512], vacc[512], kq[T];
    /* gemma3: q pre-scaled, kernel scale 1; a softcap divides the scale (ggml) */
    float sc = j->prescale_q ? 1.0f : j->scale;
    if (j->softcap > 0) sc /= j->softcap;
    for (int d = 0; d < hd; d++) { qf[d] = j->prescale_q ? q[d] * j->scale : q[d]; vacc[d] = 0.0f; }
    float S = 0.0f, M = -INFINITY;
    for (int r0 = 0; r0 < end; r0 += T) {
        bool vis[T], any = false;
        if (p < rows) { /* no row of the ring reused yet: row r holds position r */
            if (r0 + T <= first) continue;
            for (int k = 0; k < T; k++) vis[k] = r0 + k < end && r0 + k >= first;
            any = true;
        } else {
            for (int k = 0; k < T; k++) {
                int r = r0 + k;
                vis[k] = r < end && row_pos(r, p, rows) >= first;
                any |= vis[k];
            }
        }
        if (!any) continue;
        hx_fa_scores64(hd, kt + (size_t)(r0 / T) * hd * T, qf, sc, kq, c->f16c);
        float tmax = -INFINITY;
        for (int k = 0; k < T; k++) {
            if (!vis[k]) { kq[k] = -INFINITY; continue; }
            if (j->softcap > 0) kq[k] = tanhf(kq[k]) * j->softcap;
            if (kq[k] > tmax) tmax = kq[k];
        }
        float Mnew = fmaxf(M, tmax);
        if (Mnew > M) {
            float ms = expf(M - Mnew);
            for (int d = 0; d < hd; d++) vacc[d] *= ms;
            S *= ms;
        }
        M = Mnew;
        S = (float)((double)S + hx_fa_exp64(kq, Mnew, c->f16c));
        hx_fa_vacc64(hd, v32 + (size_t)r0 * hd, kq, vacc, c->f16c);
    }
    float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < hd; d++) acc[d] = vacc[d] * inv;
}

typedef struct fa_prep_job { hx_cpu_ctx *c; hx_kv_rows kc, vc; int end; } fa_prep_job;

/* One (kv head, tile of 64 rows) of fa_prepare's copies. */
static void fa_prep_task(void *ctx, int64_t task, int thread) {
    enum { T = 64 };
    (void)thread;
    const fa_prep_job *j = ctx;
    hx_cpu_ctx *c = j->c;
    int hd = c->m->cfg.head_dim, tiles = c->fa_tiles;
    int h = (int)(task / tiles), r0 = (int)(task % tiles) * T;
    float *kt = c->fa_kt + ((size_t)h * tiles + r0 / T) * hd * T, *v = c->fa_v + ((size_t)h * tiles * T + r0) * hd;
    for (int r = r0; r < r0 + T; r++) {
        float *kd = kt + r % T, *vd = v + (size_t)(r - r0) * hd;
        if (r >= j->end) {
            for (int d = 0; d < hd; d++) kd[(size_t)d * T] = vd[d] = 0.0f;
            continue;
        }
        const uint16_t *kr = hx_kv_row(&j->kc, r) + (size_t)h * hd, *vr = hx_kv_row(&j->vc, r) + (size_t)h * hd;
        float kf[512];
        if (c->f16c && hd <= 512) {
            hx_f16_to_f32_row_avx2(hd, kf, kr);
            hx_f16_to_f32_row_avx2(hd, vd, vr);
            for (int d = 0; d < hd; d++) kd[(size_t)d * T] = kf[d];
        } else {
            for (int d = 0; d < hd; d++) {
                kd[(size_t)d * T] = hx_fp16_to_fp32(kr[d]);
                vd[d] = hx_fp16_to_fp32(vr[d]);
            }
        }
    }
}

/* f32 copies of one layer's f16 cache rows of slot seq that a batch (positions
 * pos..pos+n-1) can see, for the tiled attention: keys transposed per tile of
 * 64 rows ([kv head][tile][hd][64]), values as rows ([kv head][row][hd]), rows
 * past the cache zero. One pool task per (kv head, tile). */
static hx_status fa_prepare(hx_cpu_ctx *c, int layer, int seq, int pos, int n, hx_error *e) {
    enum { T = 64 };
    const hx_model_config *cfg = &c->m->cfg;
    int hd = cfg->head_dim, nkv = cfg->n_head_kv, rows = c->kv_rows[layer];
    int end = rows < pos + n ? rows : pos + n, tiles = (end + T - 1) / T;
    size_t need = (size_t)nkv * tiles * T * hd;
    if (need > c->fa_cap) {
        free(c->fa_kt); free(c->fa_v);
        c->fa_kt = malloc(sizeof(float) * need);
        c->fa_v = malloc(sizeof(float) * need);
        c->fa_cap = c->fa_kt && c->fa_v ? need : 0;
        if (!c->fa_cap) return hx_err(e, HX_ERR_NOMEM, "forward: out of memory (attention tiles)");
    }
    c->fa_tiles = tiles;
    fa_prep_job j = { c, kv_rows_of(c, c->k_cache, layer, seq, 0), kv_rows_of(c, c->v_cache, layer, seq, 0), end };
    hx_pool_run(c->pool, (int64_t)nkv * tiles, fa_prep_task, &j);
    return HX_OK;
}

/* Inspection: the weights w[t] = sc[t] * inv, t = first..p, that the query at
 * batch index i, head h just used, when the probe records that token and layer. */
static void probe_row(const hx_cpu_ctx *c, const attn_job *j, int i, int h, int first, int p, const float *sc,
                      float inv) {
    const hx_attn_probe *pr = c->probe;
    int l = j->layer - pr->layer0, nt = pr->n_tok;
    if (j->seq[i] != 0 || p >= nt || l < 0 || l >= pr->n_layers) return;
    float *row = pr->probs + (((size_t)l * c->m->cfg.n_head + h) * nt + p) * nt;
    for (int t = first; t <= p; t++) row[t] = sc[t] * inv;
}

/* task = (n - 1 - token i) * n_head + head h: softmax(q k^T) v over the
 * cached positions of token i's sequence. A prompt's last tokens see the
 * most positions, so they are handed out first and the short ones fill the
 * threads' gaps at the end. */
static void attn_task(void *ctx, int64_t task, int thread) {
    const attn_job *j = ctx;
    hx_cpu_ctx *c = j->c;
    const hx_model_config *cfg = &c->m->cfg;
    int hd = cfg->head_dim, nh = cfg->n_head, nkv = cfg->n_head_kv;
    int i = j->n - 1 - (int)(task / nh), h = (int)(task % nh);
    int kvh = h / (nh / nkv);
    int p = j->pos[i];                          /* position of the query in its sequence */
    int first = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
    const float *q = c->q + ((size_t)i * nh + h) * hd;
    float *acc = c->vacc + (size_t)thread * hd;
    /* head kvh's columns; an f32 cache is addressed through the same rows (ld in 2-byte units) */
    const hx_kv_rows kc = kv_rows_of(c, c->k_cache, j->layer, j->seq[i], (size_t)kvh * hd * c->kv_elem);
    const hx_kv_rows vc = kv_rows_of(c, c->v_cache, j->layer, j->seq[i], (size_t)kvh * hd * c->kv_elem);
    if (c->kv_type == HX_TYPE_F16 && c->ggml_compat && hd <= 512) {
        if (j->tiled) attn_f16_ggml_tiled(j, q, kvh, acc, first, p);
        else attn_f16_ggml(j, q, acc, first, p, &kc, &vc);
        memcpy(c->att + ((size_t)i * nh + h) * hd, acc, sizeof(float) * hd);
        return;
    }
    /* exact two-pass softmax in f32 over the f16 or f32 cache */
    float *sc = c->scores + (size_t)thread * c->n_ctx;
    int rows = c->kv_rows[j->layer], r0 = first % rows;
    float mx = -INFINITY;
    hx_kv_walk wk = {0}, wv = {0};
    for (int t = first; t <= p; t++) {
        float s;
        j->kdot(hd, &s, hx_kv_next(&kc, &wk, t - first, r0, rows), q);
        s *= j->scale;
        if (j->softcap > 0) s = j->softcap * tanhf(s / j->softcap);
        sc[t] = s;
        if (s > mx) mx = s;
    }
    double sum = 0;
    for (int t = first; t <= p; t++) { sc[t] = expf(sc[t] - mx); sum += sc[t]; }
    float inv = (float)(1.0 / sum);
    memset(acc, 0, sizeof(float) * hd);
    for (int t = first; t <= p; t++) {
        float w = sc[t] * inv;
        const uint16_t *vrow = hx_kv_next(&vc, &wv, t - first, r0, rows);
        if (c->kv_type == HX_TYPE_F16) {
            const uint16_t *vr = vrow;
            if (c->f16c) hx_f32_axpy_f16_avx2(hd, acc, vr, w);
            else for (int d = 0; d < hd; d++) acc[d] += w * hx_fp16_to_fp32(vr[d]);
        } else {
            const float *vr = (const float *)vrow;
            for (int d = 0; d < hd; d++) acc[d] += w * vr[d];
        }
    }
    memcpy(c->att + ((size_t)i * nh + h) * hd, acc, sizeof(float) * hd);
    if (c->probe) probe_row(c, j, i, h, first, p, sc, inv);
}

/* The exact mode's attention over an f16 cache with AVX2 (attn.h): task = (n - 1 -
 * token i) * n_head_kv + kv head; the G = n_head / n_head_kv query heads that share
 * the kv head go together, so each cache row is read and converted once for all of
 * them. Every head's scores, softmax and weighted sum are attn_task's bits. */
static void attn_task_group(void *ctx, int64_t task, int thread) {
    const attn_job *j = ctx;
    hx_cpu_ctx *c = j->c;
    const hx_model_config *cfg = &c->m->cfg;
    int hd = cfg->head_dim, nh = cfg->n_head, nkv = cfg->n_head_kv, G = nh / nkv;
    int i = j->n - 1 - (int)(task / nkv), kvh = (int)(task % nkv), h0 = kvh * G;
    int p = j->pos[i];
    int first = j->window > 0 && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
    const float *q = c->q + ((size_t)i * nh + h0) * hd;
    const hx_kv_rows kc = kv_rows_of(c, c->k_cache, j->layer, j->seq[i], (size_t)kvh * hd * sizeof(uint16_t));
    const hx_kv_rows vc = kv_rows_of(c, c->v_cache, j->layer, j->seq[i], (size_t)kvh * hd * sizeof(uint16_t));
    int rows = c->kv_rows[j->layer], r0 = first % rows, cnt = p - first + 1;
    float *sc = c->scores + (size_t)thread * G * c->n_ctx, inv[HX_ATTN_GROUP_MAX];
    hx_attn_scores_f16_avx2(hd, G, q, &kc, r0, rows, cnt, sc + first, (size_t)c->n_ctx);
    for (int g = 0; g < G; g++) {
        float *s = sc + (size_t)g * c->n_ctx, mx = -INFINITY;
        for (int t = first; t <= p; t++) {
            float v = s[t] * j->scale;
            if (j->softcap > 0) v = j->softcap * tanhf(v / j->softcap);
            s[t] = v;
            if (v > mx) mx = v;
        }
        double sum = 0;
        for (int t = first; t <= p; t++) { s[t] = expf(s[t] - mx); sum += s[t]; }
        inv[g] = (float)(1.0 / sum);
    }
    hx_attn_values_f16_avx2(hd, G, sc + first, (size_t)c->n_ctx, inv, &vc, r0, rows, cnt,
                            c->att + ((size_t)i * nh + h0) * hd);
    if (c->probe)
        for (int g = 0; g < G; g++) probe_row(c, j, i, h0 + g, first, p, sc + (size_t)g * c->n_ctx, inv[g]);
}

/* Inspection: layer l's q, k (after RoPE), v and attention output of the
 * batch's recorded tokens. */
static void probe_layer(const hx_cpu_ctx *c, const hx_ubatch *ub, int layer) {
    const hx_attn_probe *pr = c->probe;
    const hx_model_config *cfg = &c->m->cfg;
    int l = layer - pr->layer0, nt = pr->n_tok;
    if (l < 0 || l >= pr->n_layers) return;
    size_t nq = (size_t)cfg->n_head * cfg->head_dim, nkv = (size_t)cfg->n_head_kv * cfg->head_dim;
    for (int i = 0; i < ub->n; i++) {
        int p = ub->pos[i];
        if (ub->seq[i] != 0 || p >= nt) continue;
        size_t at = (size_t)l * nt + p;
        if (pr->q) memcpy(pr->q + at * nq, c->q + (size_t)i * nq, sizeof(float) * nq);
        if (pr->k) memcpy(pr->k + at * nkv, c->k + (size_t)i * nkv, sizeof(float) * nkv);
        if (pr->v) memcpy(pr->v + at * nkv, c->v + (size_t)i * nkv, sizeof(float) * nkv);
        if (pr->o) memcpy(pr->o + at * nq, c->att + (size_t)i * nq, sizeof(float) * nq);
    }
}

/* ---- forward ---- */

#define TRY(x) do { hx_status _s = (x); if (_s) return _s; } while (0)

static void add_bias(float *y, int n, int64_t rows, const float *b) {
    if (!b) return;
    for (int i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++) y[(size_t)i * rows + r] += b[r];
}

/* y = W x for n rows (+ bias). */
static hx_status linear(hx_cpu_ctx *c, const hx_tensor *W, const float *x, int n, float *y, const float *bias,
                        hx_error *e) {
    TRY(hx_matmul_ex(c->pool, W, x, n, y, c->ggml_compat ? HX_MM_ROUND_F16_ACT | HX_MM_GGML_ORDER : 0, e));
    add_bias(y, n, W->ne[1], bias);
    return HX_OK;
}

/* Several projections of the same input (q/k/v, gate/up) in one pool run when
 * their types allow it, else one by one; biases added after. */
static hx_status linear_group(hx_cpu_ctx *c, int count, const hx_tensor *const *Ws, const float *x, int n,
                              float *const *ys, const float *const *biases, hx_error *e) {
    unsigned flags = c->ggml_compat ? HX_MM_ROUND_F16_ACT | HX_MM_GGML_ORDER : 0;
    hx_error e2 = {0};
    if (hx_matmul_multi(c->pool, count, Ws, x, n, ys, flags, &e2) != HX_OK) {
        for (int m = 0; m < count; m++) TRY(hx_matmul_ex(c->pool, Ws[m], x, n, ys[m], flags, e));
    }
    for (int m = 0; m < count; m++) add_bias(ys[m], n, Ws[m]->ne[1], biases[m]);
    return HX_OK;
}

/* The LoRA scratch: c->lora_t at least nt floats (A x per token), c->lora_d
 * at least nd (B t per token). */
static hx_status lora_scratch(hx_cpu_ctx *c, size_t nt, size_t nd, hx_error *e) {
    if (nt > c->lora_t_cap) {
        float *p = realloc(c->lora_t, sizeof(float) * nt);
        if (!p) return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory for LoRA");
        c->lora_t = p; c->lora_t_cap = nt;
    }
    if (nd > c->lora_d_cap) {
        float *p = realloc(c->lora_d, sizeof(float) * nd);
        if (!p) return hx_err(e, HX_ERR_NOMEM, "cpu forward: out of memory for LoRA");
        c->lora_d = p; c->lora_d_cap = nd;
    }
    return HX_OK;
}

/* One token's y (n_out) += s * B t, t (rank) = A x or A's row of the token:
 * each output a plain running sum over the rank. */
static void lora_add_bt(float *y, const hx_lora_w *w, const float *t, float s) {
    const int r = w->rank;
    for (int64_t o = 0; o < w->n_out; o++) {
        const float *b = w->b + (size_t)o * r;
        float acc = 0;
        for (int k = 0; k < r; k++) acc += b[k] * t[k];
        y[o] += s * acc;
    }
}

/* LoRA: y (n, n_out) += s * B (A x) for every adapter that adapts matrix
 * `slot` of `layer` (layer -1: the output head), x (n, n_in). A x runs as one
 * small f32 matmul over the n tokens, (n, rank), then B over that. In parity
 * mode both products sum in ggml's order (model/lora_mm.h), which depends on
 * the product's columns in llama.cpp's graph: cols (n, or the output rows in
 * the last layer's FFN and the head). */
static hx_status lora_add(hx_cpu_ctx *c, int layer, int slot, const float *x, int n, int cols, float *y, hx_error *e) {
    for (int k = 0; k < c->n_lora; k++) {
        const struct hx_adapter *ad = c->lora[k];
        const hx_lora_w *w = layer < 0 ? &ad->output : hx_lora_at(ad, layer, slot);
        float s = w->rank ? hx_lora_scale(ad, w, c->lora_scale[k]) : 0.0f;
        if (s == 0.0f) continue;
        size_t nd = (size_t)n * w->n_out;
        TRY(lora_scratch(c, (size_t)n * w->rank, nd, e));
        if (c->ggml_compat) { /* y + (float)(s * (B t)): ggml's scale, then its add */
            hx_lora_mm_ggml(c->pool, w->a, w->rank, w->n_in, x, n, cols > 1, c->lora_t);
            hx_lora_mm_ggml(c->pool, w->b, w->n_out, w->rank, c->lora_t, n, cols > 1, c->lora_d);
            for (size_t i = 0; i < nd; i++) y[i] += s * c->lora_d[i];
            continue;
        }
        hx_tensor A = { "lora_a", HX_TYPE_F32, { w->n_in, w->rank, 1, 1 }, w->a };
        hx_tensor B = { "lora_b", HX_TYPE_F32, { w->rank, w->n_out, 1, 1 }, w->b };
        /* threads only where the work outweighs waking them (not in decode) */
        hx_pool *pool = (double)n * w->rank * (double)(w->n_in + w->n_out) >= (double)(1 << 21) ? c->pool : NULL;
        TRY(hx_matmul_ex(pool, &A, x, n, c->lora_t, 0, e));
        if (!pool) { /* B's rows are only rank long: inline dots beat a kernel call per row */
            for (int i = 0; i < n; i++)
                lora_add_bt(y + (size_t)i * w->n_out, w, c->lora_t + (size_t)i * w->rank, s);
            continue;
        }
        TRY(hx_matmul_ex(pool, &B, c->lora_t, n, c->lora_d, 0, e));
        for (size_t i = 0; i < nd; i++) y[i] += s * c->lora_d[i];
    }
    return HX_OK;
}

/* LoRA on the token embedding (llama.cpp's order: before any embedding
 * scale): x (n, n_embd) += s * B A[tok] for the ubatch's n tokens, A (n_vocab,
 * rank), B (n_embd, rank). In parity mode the product sums in ggml's order for
 * llama.cpp's mul_mat(B, get_rows(A, tokens)), whose columns are the ubatch's
 * tokens (tinyBLAS for a prompt: a plain running sum is an ulp off, which the
 * quantized activations can carry to the logits). */
static hx_status lora_embd(hx_cpu_ctx *c, const int32_t *tok, int n, float *x, hx_error *e) {
    for (int k = 0; k < c->n_lora; k++) {
        const hx_lora_w *w = &c->lora[k]->tok_embd;
        float s = w->rank ? hx_lora_scale(c->lora[k], w, c->lora_scale[k]) : 0.0f;
        if (s == 0.0f) continue;
        const int r = w->rank;
        if (!c->ggml_compat) {
            for (int i = 0; i < n; i++) lora_add_bt(x + (size_t)i * w->n_out, w, w->a + (size_t)tok[i] * r, s);
            continue;
        }
        size_t nd = (size_t)n * w->n_out;
        TRY(lora_scratch(c, (size_t)n * r, nd, e));
        for (int i = 0; i < n; i++) memcpy(c->lora_t + (size_t)i * r, w->a + (size_t)tok[i] * r, sizeof(float) * r);
        hx_lora_mm_ggml(c->pool, w->b, w->n_out, r, c->lora_t, n, n > 1, c->lora_d);
        for (size_t i = 0; i < nd; i++) x[i] += s * c->lora_d[i]; /* ggml's scale, then its add */
    }
    return HX_OK;
}

/* rows of x (n, dim) normed with weights w (dim) into out. */
static void norm_rows(float *out, const float *x, int n, int dim, const float *w, float eps) {
    for (int i = 0; i < n; i++) rmsnorm(out + (size_t)i * dim, x + (size_t)i * dim, w, dim, eps);
}

static void store_kv(hx_cpu_ctx *c, int layer, int seq, int pos, const float *src, void **cache) {
    const hx_model_config *cfg = &c->m->cfg;
    size_t nkv = (size_t)cfg->n_head_kv * cfg->head_dim;
    uint8_t *dst = kv_at(c, cache, layer, seq, pos % c->kv_rows[layer]);
    if (c->kv_type == HX_TYPE_F16 && c->f16c)
        hx_f32_to_f16_row_avx2((int)nkv, (uint16_t *)dst, src);
    else if (c->kv_type == HX_TYPE_F16)
        for (size_t d = 0; d < nkv; d++) ((uint16_t *)dst)[d] = hx_fp32_to_fp16(src[d]);
    else
        memcpy(dst, src, nkv * sizeof(float));
}

/* ---- per-token stages ----
 * The element-wise work between the products (norms, RoPE and the cache
 * stores, the residual adds, the gated activation) is independent per token,
 * so it runs as pool tasks of a few tokens each: left serial, it bounds a
 * prompt's speed-up on many threads (Amdahl) while the products around it
 * scale. Each token is computed exactly as it would be alone, whatever the
 * split. */
typedef enum { TOK_NORM_IN, TOK_QK_ROPE, TOK_ATTN_OUT, TOK_GLU, TOK_FFN_OUT } tok_stage;

typedef struct tok_job {
    hx_cpu_ctx *c;
    const hx_ubatch *ub;
    int layer;
    tok_stage stage;
    int chunk;            /* tokens per task */
    bool avx2;            /* hx_swiglu_ggml's vector path */
} tok_job;

static void glu_span(hx_act act, float *g, const float *u, int64_t d0, int64_t d1);

static void tok_one(const tok_job *j, int i, int thread) {
    hx_cpu_ctx *c = j->c;
    const hx_model_config *cfg = &c->m->cfg;
    const layer_vecs *V = &c->lv[j->layer];
    int D = cfg->n_embd, hd = cfg->head_dim, nh = cfg->n_head, nkvh = cfg->n_head_kv, ff = cfg->n_ff;
    size_t nkv = (size_t)nkvh * hd;
    float *x = c->x + (size_t)i * D, *h = c->h + (size_t)i * D, *o = c->o + (size_t)i * D;
    switch (j->stage) {
    case TOK_NORM_IN:
        rmsnorm(h, x, V->attn_norm, D, cfg->norm_eps);
        break;
    case TOK_QK_ROPE: {
        float *q = c->q + (size_t)i * nh * hd, *k = c->k + (size_t)i * nkv;
        if (cfg->qk_norm) {
            norm_rows(q, q, nh, hd, V->q_norm, cfg->norm_eps);
            norm_rows(k, k, nkvh, hd, V->k_norm, cfg->norm_eps);
        }
        int p = j->ub->pos[i];
        float *cs = c->rope_cs + (size_t)thread * (hd / 2 + 1), *sn = c->rope_sn + (size_t)thread * (hd / 2 + 1);
        double rs = cfg->rope_scale > 0 ? cfg->rope_scale : 1.0;
        if (c->ggml_compat) {
            double base = cfg->layer_is_swa[j->layer] ? cfg->rope_base_swa : cfg->rope_base;
            rope_table_ggml(cs, sn, hd, p, (float)(1.0 / rs), (float)base);
        } else {
            rope_table(cs, sn, hd, p / rs, c->rope_freq);
        }
        for (int hh = 0; hh < nh; hh++) rope_apply(q + (size_t)hh * hd, hd, cs, sn, cfg->rope_style, c->ggml_compat);
        for (int hh = 0; hh < nkvh; hh++) rope_apply(k + (size_t)hh * hd, hd, cs, sn, cfg->rope_style, c->ggml_compat);
        store_kv(c, j->layer, j->ub->seq[i], p, k, c->k_cache);
        store_kv(c, j->layer, j->ub->seq[i], p, c->v + (size_t)i * nkv, c->v_cache);
        break;
    }
    case TOK_ATTN_OUT: /* o = Wo a was computed; then the FFN's input */
        if (cfg->post_norms) rmsnorm(o, o, V->attn_post_norm, D, cfg->norm_eps);
        for (int d = 0; d < D; d++) x[d] += o[d];
        rmsnorm(h, x, V->ffn_norm, D, cfg->norm_eps);
        break;
    case TOK_GLU: {
        float *g = c->gate + (size_t)i * ff;
        const float *u = c->up + (size_t)i * ff;
        if (c->ggml_compat) { /* ggml's rounding of the gated activation (glu.h) */
            if (cfg->act == HX_ACT_SILU) hx_swiglu_ggml(ff, g, u, j->avx2);
            else hx_geglu_ggml(ff, g, u);
        } else {
            glu_span(cfg->act, g, u, 0, ff);
        }
        break;
    }
    case TOK_FFN_OUT:
        if (cfg->post_norms) rmsnorm(o, o, V->ffn_post_norm, D, cfg->norm_eps);
        for (int d = 0; d < D; d++) x[d] += o[d];
        break;
    }
}

/* The exact mode's gated activation over g[d0, d1) (one element at a time,
 * so any split of the rows gives the same bits). */
static void glu_span(hx_act act, float *g, const float *u, int64_t d0, int64_t d1) {
    if (act == HX_ACT_SILU)
        for (int64_t d = d0; d < d1; d++) g[d] = silu(g[d]) * u[d];
    else
        for (int64_t d = d0; d < d1; d++) g[d] = gelu_tanh(g[d]) * u[d];
}

static void tok_task(void *ctx, int64_t task, int thread) {
    const tok_job *j = ctx;
    int i0 = (int)task * j->chunk, i1 = i0 + j->chunk < j->ub->n ? i0 + j->chunk : j->ub->n;
    for (int i = i0; i < i1; i++) tok_one(j, i, thread);
}

/* One stage over every token of the ubatch: about four tasks per thread, on
 * the pool from 32 tokens on (a prompt's pieces). A decode step, or the one
 * token each of a few sequences, stays inline: there a pool job's hand-off,
 * and on a busy machine the wait for every worker to be scheduled, costs
 * more than the few microseconds of work per token. */
static void run_tokens(hx_cpu_ctx *c, const hx_ubatch *ub, int layer, tok_stage stage) {
    int n = ub->n, nth = hx_pool_threads(c->pool);
    int chunk = n / (4 * nth) > 1 ? n / (4 * nth) : 1;
    tok_job j = { c, ub, layer, stage, chunk, hx_isa_current() >= HX_ISA_AVX2 };
    hx_pool_run(n >= 32 ? c->pool : NULL, (n + chunk - 1) / chunk, tok_task, &j);
}

/* Decode (one token), exact mode: gate and up in one pool run whose tasks
 * apply the gated activation to the rows they made (hx_matvec_pair), instead
 * of the activation running on the calling thread after the products. Not
 * with LoRA (its deltas come between the products and the activation), an up
 * bias, or the llama.cpp rounding mode (hx_swiglu_ggml works on whole
 * vectors). False: not taken (or the pair was refused), use the plain path. */
typedef struct { float *g; const float *u; hx_act act; } glu_rows_job;
static void glu_rows(void *ctx, int64_t r0, int64_t r1) {
    const glu_rows_job *j = ctx;
    glu_span(j->act, j->g, j->u, r0, r1);
}
static bool glu_fused(hx_cpu_ctx *c, const hx_layer_weights *L, const layer_vecs *V, int n) {
    if (n != 1 || c->ggml_compat || c->n_lora || V->ffn_up_b) return false;
    glu_rows_job gj = { c->gate, c->up, c->m->cfg.act };
    hx_error e2 = {0};
    return hx_matvec_pair(c->pool, &L->ffn_gate, &L->ffn_up, c->h, c->gate, c->up, 0, glu_rows, &gj, &e2) == HX_OK;
}

/* Tokens, sequences and positions of a ubatch: each sequence's tokens at
 * consecutive positions, the first at or below its length; outputs distinct
 * rows below n_out. */
static hx_status check_ubatch(hx_cpu_ctx *c, const hx_ubatch *ub, hx_error *e) {
    const hx_model_config *cfg = &c->m->cfg;
    if (ub->n <= 0) return hx_err(e, HX_ERR_ARG, "forward: empty batch");
    if (ub->n > c->ubatch) return hx_err(e, HX_ERR_ARG, "forward: %d tokens exceed the ubatch of %d", ub->n, c->ubatch);
    if (ub->n_out < 0 || ub->n_out > ub->n) return hx_err(e, HX_ERR_ARG, "forward: n_out %d of %d tokens", ub->n_out, ub->n);
    for (int s = 0; s < c->n_seq; s++) c->seq_next[s] = -1;
    int outs = 0;
    for (int i = 0; i < ub->n; i++) {
        int s = ub->seq[i], p = ub->pos[i];
        if (ub->token[i] < 0 || ub->token[i] >= cfg->n_vocab)
            return hx_err(e, HX_ERR_ARG, "forward: token %d at batch index %d outside the vocabulary (%d)",
                          ub->token[i], i, cfg->n_vocab);
        if (s < 0 || s >= c->n_seq)
            return hx_err(e, HX_ERR_ARG, "forward: sequence %d at batch index %d (the context has %d)", s, i, c->n_seq);
        if (p < 0 || p >= c->n_ctx)
            return hx_err(e, HX_ERR_RANGE, "forward: position %d of sequence %d outside its context of %d", p, s, c->n_ctx);
        int want = c->seq_next[s];
        if (want < 0 ? p > c->seq_len[s] : p != want)
            return hx_err(e, HX_ERR_ARG, "forward: sequence %d at position %d, expected %s%d", s, p,
                          want < 0 ? "at most " : "", want < 0 ? c->seq_len[s] : want);
        c->seq_next[s] = p + 1;
        if (ub->out[i] >= 0) {
            if (ub->out[i] >= ub->n_out)
                return hx_err(e, HX_ERR_ARG, "forward: output row %d of token %d (n_out %d)", ub->out[i], i, ub->n_out);
            outs++;
        }
    }
    if (outs != ub->n_out) return hx_err(e, HX_ERR_ARG, "forward: %d tokens ask for output, n_out is %d", outs, ub->n_out);
    /* a pipeline part's model view lacks the embedding or the head it does not run (api/pipe.c) */
    if (!ub->embd_in && !c->m->tok_embd.data)
        return hx_err(e, HX_ERR_ARG, "forward: this part of a layer split has no token embedding (embd_in required)");
    if (!ub->embd_out && ub->n_out > 0 && !c->m->output.data)
        return hx_err(e, HX_ERR_ARG, "forward: this part of a layer split has no output head (embd_out required)");
    return HX_OK;
}

/* One ubatch (at most c->ubatch tokens), checked by check_ubatch. */
static hx_status forward_ub(hx_cpu_ctx *c, const hx_ubatch *ub, float *logits, float *hidden, hx_error *e) {
    const hx_model *m = c->m;
    const hx_model_config *cfg = &m->cfg;
    int n = ub->n;
    TRY(ensure_scratch(c, n, e));
    int D = cfg->n_embd, hd = cfg->head_dim, nh = cfg->n_head;
    /* each sequence's positions from its first one in the batch on are overwritten */
    bool one_seq = true;
    int max_pos = 0;
    for (int s = 0; s < c->n_seq; s++) c->seq_next[s] = -1;
    for (int i = 0; i < n; i++) {
        int s = ub->seq[i], p = ub->pos[i];
        if (s != ub->seq[0]) one_seq = false;
        if (p > max_pos) max_pos = p;
        if (c->seq_next[s] < 0) { /* the sequence's first token in the batch */
            c->seq_len[s] = p;
            if (p == 0) c->seq_hw[s] = 0;
        }
        c->seq_next[s] = p + 1;
    }

    /* embeddings, or the residual stream of an earlier pipeline part (api/pipe.c) */
    if (ub->embd_in) {
        memcpy(c->x, ub->embd_in, sizeof(float) * (size_t)n * D);
    } else {
        size_t erow = hx_row_size(m->tok_embd.type, D);
        for (int i = 0; i < n; i++) {
            float *xi = c->x + (size_t)i * D;
            hx_dequantize_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (size_t)ub->token[i] * erow, xi, D);
        }
        if (c->n_lora) TRY(lora_embd(c, ub->token, n, c->x, e));
        if (cfg->embd_scale) {
            float s = sqrtf((float)D);
            for (size_t i = 0; i < (size_t)n * D; i++) c->x[i] *= s;
        }
    }

    float scale = cfg->attn_scale > 0 ? cfg->attn_scale : 1.0f / sqrtf((float)hd);
    hx_vec_dot_fn kdot = hx_get_vec_dot(c->kv_type, hx_isa_current());
    for (int l = 0; l < cfg->n_layer; l++) {
        const hx_layer_weights *L = &m->layers[l];
        const layer_vecs *V = &c->lv[l];
        if (c->dump_dir) TRY(dump_rows(c, ub, l, "input", c->x, e));
        run_tokens(c, ub, l, TOK_NORM_IN);
        {
            const hx_tensor *W[3] = { &L->wq, &L->wk, &L->wv };
            const float *B[3] = { V->bq, V->bk, V->bv };
            float *Y[3] = { c->q, c->k, c->v };
            TRY(linear_group(c, 3, W, c->h, n, Y, B, e));
            for (int j = 0; j < 3 && c->n_lora; j++) TRY(lora_add(c, l, HX_LORA_Q + j, c->h, n, n, Y[j], e));
        }
        /* qk_norm, RoPE, and k, v into the cache (a batch's positions are distinct rows) */
        bool swa = cfg->layer_is_swa[l];
        if (!c->ggml_compat) rope_freqs(c->rope_freq, hd, swa ? cfg->rope_base_swa : cfg->rope_base);
        run_tokens(c, ub, l, TOK_QK_ROPE);
        bool ggml_f16 = c->ggml_compat && c->kv_type == HX_TYPE_F16 && hd <= 512;
        attn_job aj = { c, l, n, ub->pos, ub->seq, ggml_f16 && one_seq && n >= 64, swa ? cfg->sliding_window : 0,
                        scale, cfg->attn_logit_softcap, kdot, c->ggml_compat && cfg->arch == HX_ARCH_GEMMA3,
                        !ggml_f16 && c->attn_grouped };
        if (aj.tiled) TRY(fa_prepare(c, l, ub->seq[0], ub->pos[0], n, e));
        /* threads only pay off when there is enough attention work */
        bool big = (double)n * nh * hd * (max_pos + 1) >= 65536.0;
        if (aj.grouped) hx_pool_run(big ? c->pool : NULL, (int64_t)n * cfg->n_head_kv, attn_task_group, &aj);
        else hx_pool_run(big ? c->pool : NULL, (int64_t)n * nh, attn_task, &aj);
        if (c->probe) probe_layer(c, ub, l);
        TRY(linear(c, &L->wo, c->att, n, c->o, V->bo, e));
        if (c->n_lora) TRY(lora_add(c, l, HX_LORA_O, c->att, n, n, c->o, e));
        run_tokens(c, ub, l, TOK_ATTN_OUT); /* [post-norm], residual, FFN norm */
        if (c->dump_dir) TRY(dump_rows(c, ub, l, "attn", c->o, e));

        /* llama.cpp keeps only the rows that give logits before the last layer's FFN */
        const int ffn_cols = l == cfg->n_layer - 1 && ub->n_out > 0 && !ub->embd_out ? ub->n_out : n;
        if (!glu_fused(c, L, V, n)) {
            const hx_tensor *W[2] = { &L->ffn_gate, &L->ffn_up };
            const float *B[2] = { NULL, V->ffn_up_b };
            float *Y[2] = { c->gate, c->up };
            TRY(linear_group(c, 2, W, c->h, n, Y, B, e));
            for (int j = 0; j < 2 && c->n_lora; j++) TRY(lora_add(c, l, HX_LORA_GATE + j, c->h, n, ffn_cols, Y[j], e));
            run_tokens(c, ub, l, TOK_GLU);
        }
        TRY(linear(c, &L->ffn_down, c->gate, n, c->o, V->ffn_down_b, e));
        if (c->n_lora) TRY(lora_add(c, l, HX_LORA_DOWN, c->gate, n, ffn_cols, c->o, e));
        run_tokens(c, ub, l, TOK_FFN_OUT); /* [post-norm], residual */
        if (c->dump_dir) TRY(dump_rows(c, ub, l, "ffn", c->o, e));
    }
    for (int i = 0; i < n; i++) {
        int s = ub->seq[i], p = ub->pos[i];
        if (p + 1 > c->seq_len[s]) c->seq_len[s] = p + 1;
        if (p + 1 > c->seq_hw[s]) c->seq_hw[s] = p + 1;
    }

    /* a pipeline part before the last: the residual stream of every token */
    if (ub->embd_out) {
        memcpy(ub->embd_out, c->x, sizeof(float) * (size_t)n * D);
        return HX_OK;
    }
    /* outputs: the normed rows of the tokens that ask, in their output order */
    if (ub->n_out == 0) return HX_OK;
    for (int i = 0; i < n; i++) {
        if (ub->out[i] < 0) continue;
        float *hr = c->h + (size_t)ub->out[i] * D;
        rmsnorm(hr, c->x + (size_t)i * D, c->out_norm, D, cfg->norm_eps);
        if (c->dump_dir && ub->seq[i] == 0 && want_dump(c, ub->pos[i]))
            TRY(dump_vec(c, ub->pos[i], -1, "final", hr, D, e));
    }
    if (hidden) memcpy(hidden, c->h, sizeof(float) * (size_t)ub->n_out * D);
    if (logits) {
        TRY(linear(c, &m->output, c->h, ub->n_out, logits, NULL, e));
        if (c->n_lora) TRY(lora_add(c, -1, 0, c->h, ub->n_out, ub->n_out, logits, e));
        if (cfg->final_logit_softcap > 0) {
            float cap = cfg->final_logit_softcap;
            for (size_t i = 0; i < (size_t)ub->n_out * cfg->n_vocab; i++) logits[i] = cap * tanhf(logits[i] / cap);
        }
    }
    return HX_OK;
}

/* hx_cpu_forward's piece: tokens at pos.. of sequence 0 as a ubatch. */
static hx_status forward_piece(void *ctx, const int32_t *tokens, int n, int pos, float *logits, bool all_logits,
                               hx_error *e) {
    hx_cpu_ctx *c = ctx;
    TRY(ensure_scratch(c, n, e));
    for (int i = 0; i < n; i++) {
        c->ub_pos[i] = pos + i;
        c->ub_seq[i] = 0;
        c->ub_out[i] = all_logits ? i : i == n - 1 ? 0 : -1;
    }
    hx_ubatch ub = { .n = n, .token = tokens, .pos = c->ub_pos, .seq = c->ub_seq, .out = c->ub_out,
                     .n_out = all_logits ? n : 1 };
    return forward_ub(c, &ub, logits, NULL, e);
}

hx_status hx_cpu_forward(hx_cpu_ctx *c, const int32_t *tokens, int n, int pos, float *logits, bool all_logits,
                         hx_error *e) {
    const hx_model_config *cfg = &c->m->cfg;
    if (n <= 0) return hx_err(e, HX_ERR_ARG, "forward: empty batch");
    if (pos < 0 || pos > c->seq_len[0])
        return hx_err(e, HX_ERR_ARG, "forward: position %d but only %d tokens in the cache", pos, c->seq_len[0]);
    if ((int64_t)pos + n > c->n_ctx)
        return hx_err(e, HX_ERR_RANGE, "context overflow: %d + %d tokens exceed the context of %d (raise -c)",
                      pos, n, c->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cfg->n_vocab)
            return hx_err(e, HX_ERR_ARG, "forward: token %d at batch index %d outside the vocabulary (%d)",
                          tokens[i], i, cfg->n_vocab);
    /* a sliding-window ring holds window + ubatch rows: at most ubatch tokens at a time */
    return hx_forward_pieces(forward_piece, c, c->piece, cfg->n_vocab, tokens, n, pos, logits, all_logits, e);
}

/* ---- the backend table (src/api/backend.h) ---- */

static hx_status cpu_ctx_new(const hx_model *m, const hx_backend_params *p, void **out, hx_error *e) {
    *out = NULL;
    if (!m || !p) return hx_err(e, HX_ERR_ARG, "cpu backend: model and params are required");
    ctx_opts co = {
        .n_seq = p->n_seq,
        .n_ctx = p->n_ctx_seq,
        .kv_type = p->kv_f32 ? HX_TYPE_F32 : HX_TYPE_F16,
        .n_threads = p->n_threads,
        .ubatch = p->n_ubatch,
        .page = p->kv_page,
        .n_pages = p->kv_pages,
        .ggml_compat = !p->exact,
        .dump_dir = p->dev.dump_dir,
        .dump_positions = p->dev.dump_positions,
        .n_dump_positions = p->dev.n_dump_positions,
    };
    hx_cpu_ctx *c = NULL;
    hx_status st = ctx_create(m, &co, &c, e);
    *out = c;
    return st;
}

static void cpu_ctx_free(void *ctx) { hx_cpu_ctx_free(ctx); }

static hx_status cpu_forward(void *ctx, const hx_ubatch *ub, float *logits, float *hidden, hx_error *e) {
    hx_cpu_ctx *c = ctx;
    TRY(check_ubatch(c, ub, e));
    return forward_ub(c, ub, logits, hidden, e);
}

static int cpu_seq_keep(void *ctx, int seq, int n) { return seq_keep(ctx, seq, n); }

/* The first n positions of slot seq can be read: n <= its length and every
 * ring still holds the window position n needs. */
static hx_status check_prefix(const hx_cpu_ctx *c, int seq, int n, const char *what, hx_error *e) {
    if (seq < 0 || seq >= c->n_seq)
        return hx_err(e, HX_ERR_ARG, "%s: sequence %d (the context has %d)", what, seq, c->n_seq);
    if (n < 0 || n > c->seq_len[seq])
        return hx_err(e, HX_ERR_RANGE, "%s: %d positions of sequence %d, which holds %d", what, n, seq, c->seq_len[seq]);
    if (n > 0 && hx_kv_rewind(&c->m->cfg, c->kv_rows, c->n_ctx, c->seq_hw[seq], n) != n)
        return hx_err(e, HX_ERR_RANGE, "%s: sequence %d's sliding-window cache no longer holds the positions "
                      "before %d (it ran to %d); decode the prefix again", what, seq, n, c->seq_hw[seq]);
    return HX_OK;
}

/* First row and count of the positions max(0, n - rows) .. n-1 of layer l. */
static int prefix_rows(const hx_cpu_ctx *c, int l, int n, int *lo) {
    int rows = c->kv_rows[l];
    *lo = n > rows ? n - rows : 0;
    return n - *lo;
}

static hx_status cpu_seq_copy(void *ctx, int src, int dst, int n, hx_error *e) {
    hx_cpu_ctx *c = ctx;
    TRY(check_prefix(c, src, n, "seq_copy", e));
    if (dst < 0 || dst >= c->n_seq)
        return hx_err(e, HX_ERR_ARG, "seq_copy: sequence %d (the context has %d)", dst, c->n_seq);
    if (src == dst) { seq_keep(c, src, n); return HX_OK; }
    for (int l = 0; l < c->m->cfg.n_layer; l++) {
        int lo, cnt = prefix_rows(c, l, n, &lo), rows = c->kv_rows[l];
        for (int q = lo; q < lo + cnt; q++) {
            memcpy(kv_at(c, c->k_cache, l, dst, q % rows), kv_at(c, c->k_cache, l, src, q % rows), c->kv_row);
            memcpy(kv_at(c, c->v_cache, l, dst, q % rows), kv_at(c, c->v_cache, l, src, q % rows), c->kv_row);
        }
    }
    /* dst's rings now hold what src's held for those positions (the ones at or
     * past src's hw - rows intact) */
    c->seq_len[dst] = n;
    c->seq_hw[dst] = n == 0 ? 0 : c->seq_hw[src];
    return HX_OK;
}

enum { STATE_HEADER = 24 };

static size_t cpu_seq_state_size(void *ctx, int n) {
    const hx_cpu_ctx *c = ctx;
    if (n < 0) n = 0;
    size_t sz = STATE_HEADER;
    for (int l = 0; l < c->m->cfg.n_layer; l++) {
        int lo;
        sz += 2 * (size_t)prefix_rows(c, l, n, &lo) * c->kv_row;
    }
    return sz;
}

static hx_status cpu_seq_read(void *ctx, int seq, int n, void *buf, hx_error *e) {
    hx_cpu_ctx *c = ctx;
    TRY(check_prefix(c, seq, n, "seq_read", e));
    if (!buf) return hx_err(e, HX_ERR_ARG, "seq_read: no buffer");
    const hx_model_config *cfg = &c->m->cfg;
    int32_t hdr[5] = { n, c->seq_hw[seq], (int32_t)c->kv_elem, cfg->n_layer, cfg->n_head_kv * cfg->head_dim };
    uint8_t *at = buf;
    memcpy(at, "HXS1", 4);
    memcpy(at + 4, hdr, sizeof hdr);
    at += STATE_HEADER;
    for (int l = 0; l < cfg->n_layer; l++) {
        int lo, cnt = prefix_rows(c, l, n, &lo), rows = c->kv_rows[l];
        for (int kv = 0; kv < 2; kv++)
            for (int q = lo; q < lo + cnt; q++) {
                memcpy(at, kv_at(c, kv ? c->v_cache : c->k_cache, l, seq, q % rows), c->kv_row);
                at += c->kv_row;
            }
    }
    return HX_OK;
}

static hx_status cpu_seq_write(void *ctx, int seq, int n, const void *buf, hx_error *e) {
    hx_cpu_ctx *c = ctx;
    const hx_model_config *cfg = &c->m->cfg;
    if (seq < 0 || seq >= c->n_seq)
        return hx_err(e, HX_ERR_ARG, "seq_write: sequence %d (the context has %d)", seq, c->n_seq);
    if (n < 0 || n > c->n_ctx)
        return hx_err(e, HX_ERR_RANGE, "seq_write: %d positions, a sequence holds at most %d", n, c->n_ctx);
    if (!buf) return hx_err(e, HX_ERR_ARG, "seq_write: no buffer");
    const uint8_t *at = buf;
    int32_t hdr[5];
    memcpy(hdr, at + 4, sizeof hdr);
    if (memcmp(at, "HXS1", 4) != 0)
        return hx_err(e, HX_ERR_FORMAT, "seq_write: not a CPU sequence state (bad magic)");
    if (hdr[0] != n || hdr[1] < n || hdr[2] != (int32_t)c->kv_elem || hdr[3] != cfg->n_layer ||
        hdr[4] != cfg->n_head_kv * cfg->head_dim)
        return hx_err(e, HX_ERR_FORMAT, "seq_write: state of %d positions (mark %d), %d-byte cache elements, %d layers, "
                      "rows of %d does not fit this context (%d positions, %d-byte elements, %d layers, rows of %d)",
                      hdr[0], hdr[1], hdr[2], hdr[3], hdr[4], n, (int)c->kv_elem, cfg->n_layer,
                      cfg->n_head_kv * cfg->head_dim);
    at += STATE_HEADER;
    for (int l = 0; l < cfg->n_layer; l++) {
        int lo, cnt = prefix_rows(c, l, n, &lo), rows = c->kv_rows[l];
        for (int kv = 0; kv < 2; kv++)
            for (int q = lo; q < lo + cnt; q++) {
                memcpy(kv_at(c, kv ? c->v_cache : c->k_cache, l, seq, q % rows), at, c->kv_row);
                at += c->kv_row;
            }
    }
    c->seq_len[seq] = n;
    c->seq_hw[seq] = n == 0 ? 0 : hdr[1];
    return HX_OK;
}

static size_t cpu_kv_bytes(void *ctx) { return hx_cpu_kv_bytes(ctx); }

static hx_status cpu_kv_map(void *ctx, int seq, int page0, int n, const int32_t *pages, hx_error *e) {
    hx_cpu_ctx *c = ctx;
    if (!c->page) return hx_err(e, HX_ERR_ARG, "kv_map: this context has slots, not pages");
    if (seq < 0 || seq >= c->n_seq || page0 < 0 || n < 0 || page0 + n > c->max_pg || (n > 0 && !pages))
        return hx_err(e, HX_ERR_ARG, "kv_map: sequence %d, pages %d+%d (table of %d)", seq, page0, n, c->max_pg);
    for (int i = 0; i < n; i++)
        if (pages[i] < 0 || pages[i] >= c->n_pages)
            return hx_err(e, HX_ERR_ARG, "kv_map: page %d outside the pool of %d", pages[i], c->n_pages);
    memcpy(c->ptab + (size_t)seq * c->max_pg + page0, pages, sizeof *pages * (size_t)n);
    return HX_OK;
}

hx_status hx_cpu_set_adapters(void *ctx, struct hx_adapter *const *adapters, const float *scales, int n,
                              hx_error *e) {
    hx_cpu_ctx *c = ctx;
    struct hx_adapter **a = NULL;
    float *s = NULL;
    if (n > 0) {
        a = malloc(sizeof *a * (size_t)n);
        s = malloc(sizeof *s * (size_t)n);
        if (!a || !s) { free(a); free(s); return hx_err(e, HX_ERR_NOMEM, "cpu backend: out of memory"); }
        memcpy(a, adapters, sizeof *a * (size_t)n);
        memcpy(s, scales, sizeof *s * (size_t)n);
    }
    free(c->lora); free(c->lora_scale);
    c->lora = a; c->lora_scale = s; c->n_lora = n;
    return HX_OK;
}

hx_status hx_cpu_set_probe(void *ctx, hx_attn_probe *probe, hx_error *e) {
    hx_cpu_ctx *c = ctx;
    if (probe && c->ggml_compat)
        return hx_err(e, HX_ERR_UNSUPPORTED, "cpu backend: attention inspection needs an exact context "
                      "(llama.cpp's rounding mode never forms the attention probabilities)");
    if (probe && (!probe->probs || probe->n_tok < 1 || probe->layer0 < 0 || probe->n_layers < 1 ||
                  probe->layer0 + probe->n_layers > c->m->cfg.n_layer))
        return hx_err(e, HX_ERR_ARG, "cpu backend: attention probe of layers %d+%d, %d tokens (model has %d layers)",
                      probe->layer0, probe->n_layers, probe->n_tok, c->m->cfg.n_layer);
    c->probe = probe;
    return HX_OK;
}

const hx_backend hx_backend_cpu = {
    .name = "cpu",
    .ctx_new = cpu_ctx_new,
    .ctx_free = cpu_ctx_free,
    .forward = cpu_forward,
    .seq_keep = cpu_seq_keep,
    .seq_copy = cpu_seq_copy,
    .seq_state_size = cpu_seq_state_size,
    .seq_read = cpu_seq_read,
    .seq_write = cpu_seq_write,
    .kv_bytes = cpu_kv_bytes,
    .decode_greedy = NULL,
    .finish = NULL,
    .device_bytes_in_use = NULL,
    .kv_map = cpu_kv_map,
};
