/* train.c — LoRA training of a frozen decoder: forward with saved
 * activations, explicit backward through every layer, AdamW (train.h).
 *
 * Per layer (x (n, D) the residual stream of the packed batch):
 *   h1 = RMSNorm(x) w_attn                         save h1, rstd
 *   q,k,v = lin(h1)  (W h1 + b + s B A h1)         save q,k,v and A h1
 *   qr,kr = RoPE([qk_norm] RMSNorm_head(q,k))      save qr,kr (+ rstd)
 *   att = softmax(scale qr kr^T, mask) v           save P (n_head, n, n)
 *   o = lin(att); x2 = x + [post] RMSNorm(o)       save o, x2
 *   h2 = RMSNorm(x2) w_ffn; g,u = lin(h2)          save h2, g, u
 *   a = act(g) u; f = lin(a); x' = x2 + [post] RMSNorm(f)   save a, f
 * and the backward runs the same list upwards. */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/sgemm.h"
#include "core/core.h"
#include "quant/quant.h"
#include "train/ops.h"

#define NSLOT HX_LORA_PER_LAYER
#define TRY(x) do { hx_status _s = (x); if (_s) return _s; } while (0)

/* A frozen matrix W (n_out, n_in) packed for Y = X W^T and for dX = dY W. */
typedef struct frozen_mat {
    int64_t n_in, n_out;
    float *fwd, *bwd;
} frozen_mat;

typedef struct layer_frozen {
    frozen_mat w[NSLOT];
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm, *attn_post, *ffn_post; /* NULL when absent */
    const float *bias[NSLOT];                                                  /* q, k, v, o, -, up, down */
} layer_frozen;

/* One layer's saved activations for n tokens. */
typedef struct act {
    float *h1, *r1, *q, *k, *v, *qr, *kr, *rq, *rk, *P, *att, *o, *ro, *x2, *h2, *r2, *g, *u, *a, *f, *rf;
    float *t[NSLOT];     /* A x per adapted slot (n, rank) */
} act;

struct hx_trainer {
    const hx_model *m;
    hx_train_opts o;
    float s;              /* alpha / rank */
    hx_pool *pool;
    layer_frozen *L;
    frozen_mat out;
    const float *out_norm;
    float *vec_arena;
    size_t base_bytes;
    hx_train_mat *mats;   /* n_layer * NSLOT */
    int adam_t;
    /* activations and scratch, for batches of up to cap tokens */
    int cap;
    float *act_mem;
    act *acts;            /* n_layer, or 1 with checkpointing */
    float *xs;            /* (n_layer + 1, cap, D): each layer's input, then the final residual */
    float *bx, *bt, *bh, *bq, *bk, *bv, *batt, *bf1, *bf2, *bf3, *attn_scr; /* backward */
    float *lt, *ldt, *ltT, *lg;  /* LoRA scratch: (cap, rank) x3, (rank, max dim) */
    float *pack;          /* sgemm packing scratch */
    size_t pack_cap;
    float *hrow, *hr, *logit;  /* head: (cap, D), (cap), (cap, V) */
    int *rows;
    /* attention probabilities of the current batch (ops.h layout), per kind of layer */
    int64_t *prow_full, *prow_swa, p_full, p_swa;
    size_t p_cap;         /* floats of each act's P */
};

hx_train_opts hx_train_default_opts(void) {
    return (hx_train_opts){ .rank = 8, .alpha = 16.0f, .slots = 0, .n_threads = 0, .checkpoint = true, .seed = 1 };
}

hx_adamw_opts hx_adamw_default_opts(void) {
    return (hx_adamw_opts){ .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .clip = 1.0f };
}

/* ---- setup ---- */

static float *alloc_f(size_t n) {
    size_t bytes = (sizeof(float) * (n ? n : 1) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

static void frozen_free(frozen_mat *f) { free(f->fwd); free(f->bwd); f->fwd = f->bwd = NULL; }

/* W from its GGUF tensor (any type) into both packings. */
static hx_status frozen_make(hx_trainer *t, const hx_tensor *W, frozen_mat *f, hx_error *e) {
    int64_t in = W->ne[0], out = W->ne[1];
    f->n_in = in;
    f->n_out = out;
    float *tmp = malloc(sizeof(float) * (size_t)in * out);
    f->fwd = alloc_f(hx_sgemm_packed_size(out, in));
    f->bwd = alloc_f(hx_sgemm_packed_size(in, out));
    if (!tmp || !f->fwd || !f->bwd) {
        free(tmp);
        return hx_err(e, HX_ERR_NOMEM, "train: out of memory for the f32 copy of %s (%lld x %lld)",
                      W->name ? W->name : "a matrix", (long long)out, (long long)in);
    }
    size_t rs = hx_row_size(W->type, in);
    for (int64_t r = 0; r < out; r++) hx_dequantize_row(W->type, (const uint8_t *)W->data + r * rs, tmp + r * in, in);
    hx_sgemm_pack_nt(tmp, in, out, in, f->fwd);
    hx_sgemm_pack_nn(tmp, in, in, out, f->bwd);
    free(tmp);
    t->base_bytes += sizeof(float) * (hx_sgemm_packed_size(out, in) + hx_sgemm_packed_size(in, out));
    return HX_OK;
}

static hx_status vec_make(const hx_tensor *tn, int64_t n, bool required, bool add_one, float **at, const float **out,
                          hx_error *e) {
    *out = NULL;
    if (!tn->data) {
        if (required) return hx_err(e, HX_ERR_FORMAT, "train: tensor '%s' is missing", tn->name ? tn->name : "?");
        return HX_OK;
    }
    if (tn->ne[0] != n)
        return hx_err(e, HX_ERR_FORMAT, "train: tensor '%s' has %lld elements, expected %lld", tn->name,
                      (long long)tn->ne[0], (long long)n);
    hx_dequantize_row(tn->type, tn->data, *at, n);
    if (add_one) for (int64_t i = 0; i < n; i++) (*at)[i] += 1.0f;
    *out = *at;
    *at += n;
    return HX_OK;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void mat_free(hx_train_mat *w) {
    free(w->a); free(w->b); free(w->ga); free(w->gb); free(w->ma); free(w->va); free(w->mb); free(w->vb);
    memset(w, 0, sizeof *w);
}

static hx_status mat_make(hx_train_mat *w, int rank, int64_t in, int64_t out, uint64_t *rng, hx_error *e) {
    w->rank = rank;
    w->n_in = in;
    w->n_out = out;
    size_t na = (size_t)rank * in, nb = (size_t)out * rank;
    float **pa[] = { &w->a, &w->ga, &w->ma, &w->va }, **pb[] = { &w->b, &w->gb, &w->mb, &w->vb };
    for (int i = 0; i < 4; i++) {
        *pa[i] = calloc(na, sizeof(float));
        *pb[i] = calloc(nb, sizeof(float));
        if (!*pa[i] || !*pb[i]) return hx_err(e, HX_ERR_NOMEM, "train: out of memory for the LoRA weights");
    }
    float bound = 1.0f / sqrtf((float)in);
    for (size_t i = 0; i < na; i++) w->a[i] = bound * (float)(2.0 * ((splitmix(rng) >> 11) * 0x1.0p-53) - 1.0);
    return HX_OK;
}

void hx_trainer_free(hx_trainer *t) {
    if (!t) return;
    if (t->L)
        for (int l = 0; l < t->m->cfg.n_layer; l++)
            for (int s = 0; s < NSLOT; s++) frozen_free(&t->L[l].w[s]);
    frozen_free(&t->out);
    if (t->mats) for (int i = 0; i < t->m->cfg.n_layer * NSLOT; i++) mat_free(&t->mats[i]);
    free(t->mats); free(t->L); free(t->vec_arena);
    if (t->acts)
        for (int l = 0; l < (t->o.checkpoint ? 1 : t->m->cfg.n_layer); l++) free(t->acts[l].P);
    free(t->act_mem); free(t->acts); free(t->xs);
    float *bufs[] = { t->bx, t->bt, t->bh, t->bq, t->bk, t->bv, t->batt, t->bf1, t->bf2, t->bf3, t->attn_scr,
                      t->lt, t->ldt, t->ltT, t->lg, t->pack, t->hrow, t->hr, t->logit };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(t->rows);
    free(t->prow_full); free(t->prow_swa);
    hx_pool_free(t->pool);
    free(t);
}

hx_status hx_trainer_new(const hx_model *m, const hx_train_opts *opts, hx_trainer **out, hx_error *e) {
    *out = NULL;
    if (!m) return hx_err(e, HX_ERR_ARG, "train: model is NULL");
    const hx_model_config *cfg = &m->cfg;
    if (cfg->arch == HX_ARCH_BERT) return hx_err(e, HX_ERR_UNSUPPORTED, "train: bert is an encoder; LoRA training covers decoders");
    if (cfg->n_head_kv <= 0 || cfg->n_head % cfg->n_head_kv || cfg->head_dim % 2 || cfg->head_dim > 1024)
        return hx_err(e, HX_ERR_FORMAT, "train: unusable heads (%d / %d, head_dim %d)", cfg->n_head, cfg->n_head_kv,
                      cfg->head_dim);
    hx_train_opts o = opts ? *opts : hx_train_default_opts();
    if (o.rank < 1 || o.rank > 1024) return hx_err(e, HX_ERR_ARG, "train: rank %d (1..1024)", o.rank);
    if (!isfinite(o.alpha)) return hx_err(e, HX_ERR_ARG, "train: alpha is not finite");
    if (o.slots == 0) o.slots = (1u << NSLOT) - 1;
    hx_trainer *t = calloc(1, sizeof *t);
    if (!t) return hx_err(e, HX_ERR_NOMEM, "train: out of memory");
    t->m = m;
    t->o = o;
    t->s = o.alpha != 0.0f ? o.alpha / (float)o.rank : 1.0f;
    t->pool = hx_pool_create(o.n_threads);
    int nl = cfg->n_layer;
    int64_t D = cfg->n_embd, hd = cfg->head_dim, nq = (int64_t)cfg->n_head * hd, nkv = (int64_t)cfg->n_head_kv * hd;
    t->L = calloc((size_t)nl, sizeof *t->L);
    t->mats = calloc((size_t)nl * NSLOT, sizeof *t->mats);
    t->vec_arena = malloc(sizeof(float) * (size_t)((6 * D + 2 * hd + nq + 2 * nkv + cfg->n_ff + D) * nl + D));
    hx_status st = HX_OK;
    if (!t->pool || !t->L || !t->mats || !t->vec_arena) { st = hx_err(e, HX_ERR_NOMEM, "train: out of memory"); goto fail; }
    float *at = t->vec_arena;
    bool p1 = cfg->norm_add_one;
    uint64_t rng = o.seed * 0x2545f4914f6cdd1dull + 17;
    for (int l = 0; l < nl && !st; l++) {
        const hx_layer_weights *W = &m->layers[l];
        layer_frozen *F = &t->L[l];
        const hx_tensor *mt[NSLOT] = { &W->wq, &W->wk, &W->wv, &W->wo, &W->ffn_gate, &W->ffn_up, &W->ffn_down };
        if ((st = vec_make(&W->attn_norm, D, true, p1, &at, &F->attn_norm, e)) ||
            (st = vec_make(&W->ffn_norm, D, true, p1, &at, &F->ffn_norm, e)) ||
            (st = vec_make(&W->q_norm, hd, cfg->qk_norm, p1, &at, &F->q_norm, e)) ||
            (st = vec_make(&W->k_norm, hd, cfg->qk_norm, p1, &at, &F->k_norm, e)) ||
            (st = vec_make(&W->attn_post_norm, D, cfg->post_norms, p1, &at, &F->attn_post, e)) ||
            (st = vec_make(&W->ffn_post_norm, D, cfg->post_norms, p1, &at, &F->ffn_post, e)) ||
            (st = vec_make(&W->bq, nq, false, false, &at, &F->bias[HX_LORA_Q], e)) ||
            (st = vec_make(&W->bk, nkv, false, false, &at, &F->bias[HX_LORA_K], e)) ||
            (st = vec_make(&W->bv, nkv, false, false, &at, &F->bias[HX_LORA_V], e)) ||
            (st = vec_make(&W->bo, D, false, false, &at, &F->bias[HX_LORA_O], e)) ||
            (st = vec_make(&W->ffn_up_b, cfg->n_ff, false, false, &at, &F->bias[HX_LORA_UP], e)) ||
            (st = vec_make(&W->ffn_down_b, D, false, false, &at, &F->bias[HX_LORA_DOWN], e)))
            break;
        for (int s = 0; s < NSLOT && !st; s++) {
            st = frozen_make(t, mt[s], &F->w[s], e);
            if (!st && (o.slots >> s & 1))
                st = mat_make(&t->mats[l * NSLOT + s], o.rank, F->w[s].n_in, F->w[s].n_out, &rng, e);
        }
    }
    if (!st) st = vec_make(&m->output_norm, D, true, p1, &at, &t->out_norm, e);
    if (!st) st = frozen_make(t, &m->output, &t->out, e);
    if (st) goto fail;
    *out = t;
    return HX_OK;
fail:
    hx_trainer_free(t);
    return st;
}

size_t hx_trainer_base_bytes(const hx_trainer *t) { return t->base_bytes; }
float hx_trainer_scale(const hx_trainer *t) { return t->s; }

hx_train_mat *hx_trainer_mat(hx_trainer *t, int layer, int slot) {
    if (!t || layer < 0 || layer >= t->m->cfg.n_layer || slot < 0 || slot >= NSLOT) return NULL;
    return &t->mats[layer * NSLOT + slot];
}

hx_status hx_trainer_load_adapter(hx_trainer *t, const struct hx_adapter *a, hx_error *e) {
    if (!a || a->m != t->m) return hx_err(e, HX_ERR_ARG, "train: the adapter belongs to another model");
    if (a->output.rank || a->tok_embd.rank)
        return hx_err(e, HX_ERR_UNSUPPORTED, "train: %s adapts the output head or the embeddings, which training leaves frozen",
                      a->path);
    for (int l = 0; l < t->m->cfg.n_layer; l++)
        for (int s = 0; s < NSLOT; s++) {
            const hx_lora_w *w = hx_lora_at(a, l, s);
            hx_train_mat *p = &t->mats[l * NSLOT + s];
            if (w->rank != p->rank || (w->rank && (w->n_in != p->n_in || w->n_out != p->n_out)))
                return hx_err(e, HX_ERR_FORMAT, "train: %s: layer %d slot %d has rank %d, the trainer %d", a->path, l, s,
                              w->rank, p->rank);
        }
    for (int l = 0; l < t->m->cfg.n_layer; l++)
        for (int s = 0; s < NSLOT; s++) {
            const hx_lora_w *w = hx_lora_at(a, l, s);
            hx_train_mat *p = &t->mats[l * NSLOT + s];
            if (!w->rank) continue;
            memcpy(p->a, w->a, sizeof(float) * (size_t)w->rank * w->n_in);
            memcpy(p->b, w->b, sizeof(float) * (size_t)w->rank * w->n_out);
        }
    t->s = a->alpha != 0.0f ? a->alpha / (float)t->o.rank : 1.0f;
    t->o.alpha = a->alpha;
    return HX_OK;
}

/* ---- scratch ---- */

/* Floats of one layer's activations (struct act) for n tokens. */
static size_t act_floats(const hx_model_config *c, int n, int rank_sum) {
    size_t D = c->n_embd, nq = (size_t)c->n_head * c->head_dim, nkv = (size_t)c->n_head_kv * c->head_dim;
    size_t ff = c->n_ff, nh = c->n_head, N = n;
    (void)nh;
    return N * (5 * D + 4 + 3 * nq + 3 * nkv + c->n_head + c->n_head_kv + 3 * ff + (size_t)rank_sum);
}

static hx_status ensure_cap(hx_trainer *t, int n, hx_error *e) {
    if (n <= t->cap) return HX_OK;
    const hx_model_config *c = &t->m->cfg;
    int nl = c->n_layer, nacts = t->o.checkpoint ? 1 : nl;
    int rank_sum = 0;
    for (int s = 0; s < NSLOT; s++) if (t->o.slots >> s & 1) rank_sum += t->o.rank;
    size_t per = act_floats(c, n, rank_sum);
    size_t D = c->n_embd, nq = (size_t)c->n_head * c->head_dim, nkv = (size_t)c->n_head_kv * c->head_dim;
    size_t ff = c->n_ff, N = n, r = t->o.rank, V = c->n_vocab;
    size_t maxdim = D > nq ? D : nq;
    if (ff > maxdim) maxdim = ff;
    /* the biggest LoRA packing: A or B (rank x maxdim either way), or x / dy (maxdim x N) */
    size_t pk1 = hx_sgemm_packed_size((int64_t)maxdim, (int64_t)(N > r ? N : r));
    size_t pk2 = hx_sgemm_packed_size((int64_t)r, (int64_t)maxdim);
    if (t->acts) for (int l = 0; l < nacts; l++) free(t->acts[l].P);
    t->p_cap = 0;
    free(t->act_mem); free(t->acts); free(t->xs);
    free(t->prow_full); free(t->prow_swa);
    t->prow_full = malloc(sizeof(int64_t) * N);
    t->prow_swa = malloc(sizeof(int64_t) * N);
    float **bufs[] = { &t->bx, &t->bt, &t->bh, &t->bq, &t->bk, &t->bv, &t->batt, &t->bf1, &t->bf2, &t->bf3,
                       &t->attn_scr, &t->lt, &t->ldt, &t->ltT, &t->lg, &t->pack, &t->hrow, &t->hr, &t->logit };
    size_t sizes[] = { N * D, N * D, N * maxdim, N * nq, N * nkv, N * nkv, N * nq, N * maxdim, N * maxdim, N * maxdim,
                       (size_t)c->n_head_kv * N, N * r, N * r, N * r, r * maxdim,
                       0, N * D, N, N * V };
    sizes[15] = pk1 > pk2 ? pk1 : pk2;
    t->pack_cap = sizes[15];
    t->cap = 0;
    t->act_mem = alloc_f(per * (size_t)nacts);
    t->acts = calloc((size_t)nacts, sizeof(act));
    t->xs = alloc_f((size_t)(nl + 1) * N * D);
    free(t->rows);
    t->rows = malloc(sizeof(int) * N);
    bool ok = t->act_mem && t->acts && t->xs && t->rows && t->prow_full && t->prow_swa;
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
        free(*bufs[i]);
        *bufs[i] = alloc_f(sizes[i]);
        ok = ok && *bufs[i];
    }
    if (!ok) return hx_err(e, HX_ERR_NOMEM, "train: out of memory for the activations of %d tokens", n);
    for (int l = 0; l < nacts; l++) {
        float *p = t->act_mem + (size_t)l * per;
        act *A = &t->acts[l];
        float **f[] = { &A->h1, &A->r1, &A->q, &A->k, &A->v, &A->qr, &A->kr, &A->rq, &A->rk, &A->att, &A->o, &A->ro,
                        &A->x2, &A->h2, &A->r2, &A->g, &A->u, &A->a, &A->f, &A->rf };
        size_t sz[] = { N * D, N, N * nq, N * nkv, N * nkv, N * nq, N * nkv, N * c->n_head, N * c->n_head_kv, N * nq,
                        N * D, N, N * D, N * D, N, N * ff, N * ff, N * ff, N * D, N };
        for (size_t i = 0; i < sizeof sz / sizeof sz[0]; i++) { *f[i] = p; p += sz[i]; }
        for (int s = 0; s < NSLOT; s++)
            if (t->o.slots >> s & 1) { A->t[s] = p; p += N * r; }
    }
    t->cap = n;
    return HX_OK;
}

/* ---- linear layers with LoRA ---- */

/* Y (n, out) = X (n, in) W^T + bias + s (X A^T) B^T; A x kept in tsave. */
static void lin_fwd(hx_trainer *t, const frozen_mat *W, const float *bias, const hx_train_mat *lw, const float *X, int n,
                    float *Y, float *tsave) {
    hx_sgemm(t->pool, n, W->n_out, W->n_in, X, W->n_in, W->fwd, Y, W->n_out, bias, 0);
    if (!lw || !lw->rank) return;
    int r = lw->rank;
    hx_sgemm_pack_nt(lw->a, lw->n_in, r, lw->n_in, t->pack);
    hx_sgemm(t->pool, n, r, lw->n_in, X, lw->n_in, t->pack, tsave, r, NULL, 0);
    for (size_t i = 0; i < (size_t)n * r; i++) t->lt[i] = t->s * tsave[i];
    hx_sgemm_pack_nt(lw->b, r, lw->n_out, r, t->pack);
    hx_sgemm(t->pool, n, lw->n_out, r, t->lt, r, t->pack, Y, lw->n_out, NULL, HX_SGEMM_ACC);
}

/* dX (n, in) (= or += with acc) = dY W + s (dY B) A, and the LoRA gradients:
 * gB += s dY^T (A x), gA += s (dY B)^T x. X and tsave are the forward's.
 * dX NULL: only the LoRA gradients (the first layer's input needs none). */
static void lin_bwd(hx_trainer *t, const frozen_mat *W, hx_train_mat *lw, const float *X, const float *tsave,
                    const float *dY, int n, float *dX, bool acc) {
    if (dX) hx_sgemm(t->pool, n, W->n_in, W->n_out, dY, W->n_out, W->bwd, dX, W->n_in, NULL, acc ? HX_SGEMM_ACC : 0);
    if (!lw || !lw->rank) return;
    int r = lw->rank;
    int64_t in = lw->n_in, out = lw->n_out;
    /* dt = s dY B (n, r) */
    hx_sgemm_pack_nn(lw->b, r, r, out, t->pack);
    hx_sgemm(t->pool, n, r, out, dY, out, t->pack, t->ldt, r, NULL, 0);
    for (size_t i = 0; i < (size_t)n * r; i++) t->ldt[i] *= t->s;
    /* dX += dt A */
    if (dX) {
        hx_sgemm_pack_nn(lw->a, in, in, r, t->pack);
        hx_sgemm(t->pool, n, in, r, t->ldt, r, t->pack, dX, in, NULL, HX_SGEMM_ACC);
    }
    /* gA (r, in) += dt^T X */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r; k++) t->ltT[(size_t)k * n + i] = t->ldt[(size_t)i * r + k];
    hx_sgemm_pack_nn(X, in, in, n, t->pack);
    hx_sgemm(t->pool, r, in, n, t->ltT, n, t->pack, lw->ga, in, NULL, HX_SGEMM_ACC);
    /* gB^T (r, out) = s tsave^T dY, added into gB (out, r) */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < r; k++) t->ltT[(size_t)k * n + i] = t->s * tsave[(size_t)i * r + k];
    hx_sgemm_pack_nn(dY, out, out, n, t->pack);
    hx_sgemm(t->pool, r, out, n, t->ltT, n, t->pack, t->lg, out, NULL, 0);
    for (int64_t o = 0; o < out; o++)
        for (int k = 0; k < r; k++) lw->gb[o * r + k] += t->lg[(size_t)k * out + o];
}

/* ---- one layer ---- */

static hx_tr_attn attn_base(const hx_trainer *t, bool swa, const int32_t *pos, int n) {
    const hx_model_config *c = &t->m->cfg;
    return (hx_tr_attn){ .n = n, .n_head = c->n_head, .n_kv = c->n_head_kv, .hd = c->head_dim,
                         .window = swa ? c->sliding_window : 0,
                         .scale = c->attn_scale > 0 ? c->attn_scale : 1.0f / sqrtf((float)c->head_dim),
                         .softcap = c->attn_logit_softcap, .pos = pos };
}

static hx_tr_attn attn_of(const hx_trainer *t, int l, const int32_t *pos, int n) {
    bool swa = t->m->cfg.layer_is_swa[l];
    hx_tr_attn a = attn_base(t, swa, pos, n);
    a.prow = swa ? t->prow_swa : t->prow_full;
    a.p_total = swa ? t->p_swa : t->p_full;
    return a;
}

/* The batch's attention layout (both kinds of layer) and room for its P. */
static hx_status attn_layout(hx_trainer *t, const int32_t *pos, int n, hx_error *e) {
    hx_tr_attn a = attn_base(t, false, pos, n), b = attn_base(t, true, pos, n);
    hx_tr_attn_rows(&a, t->prow_full);
    hx_tr_attn_rows(&b, t->prow_swa);
    t->p_full = a.p_total;
    t->p_swa = b.p_total;
    size_t need = (size_t)t->m->cfg.n_head * (size_t)(a.p_total > b.p_total ? a.p_total : b.p_total);
    if (need <= t->p_cap) return HX_OK;
    int nacts = t->o.checkpoint ? 1 : t->m->cfg.n_layer;
    for (int l = 0; l < nacts; l++) {
        free(t->acts[l].P);
        t->acts[l].P = alloc_f(need);
        if (!t->acts[l].P) {
            for (int k = 0; k <= l; k++) { free(t->acts[k].P); t->acts[k].P = NULL; }
            t->p_cap = 0;
            return hx_err(e, HX_ERR_NOMEM, "train: out of memory for the attention of %d tokens", n);
        }
    }
    t->p_cap = need;
    return HX_OK;
}

static void layer_fwd(hx_trainer *t, int l, const int32_t *pos, int n, const float *x, act *A, float *xo) {
    const hx_model_config *c = &t->m->cfg;
    const layer_frozen *F = &t->L[l];
    hx_train_mat *M = &t->mats[l * NSLOT];
    int D = c->n_embd, hd = c->head_dim, nh = c->n_head, nkvh = c->n_head_kv;
    size_t nq = (size_t)nh * hd, nkv = (size_t)nkvh * hd, ff = c->n_ff, N = n;
    hx_tr_rmsnorm_fwd(A->h1, A->r1, x, F->attn_norm, n, D, c->norm_eps);
    lin_fwd(t, &F->w[HX_LORA_Q], F->bias[HX_LORA_Q], &M[HX_LORA_Q], A->h1, n, A->q, A->t[HX_LORA_Q]);
    lin_fwd(t, &F->w[HX_LORA_K], F->bias[HX_LORA_K], &M[HX_LORA_K], A->h1, n, A->k, A->t[HX_LORA_K]);
    lin_fwd(t, &F->w[HX_LORA_V], F->bias[HX_LORA_V], &M[HX_LORA_V], A->h1, n, A->v, A->t[HX_LORA_V]);
    if (c->qk_norm) {
        hx_tr_rmsnorm_fwd(A->qr, A->rq, A->q, F->q_norm, N * nh, hd, c->norm_eps);
        hx_tr_rmsnorm_fwd(A->kr, A->rk, A->k, F->k_norm, N * nkvh, hd, c->norm_eps);
    } else {
        memcpy(A->qr, A->q, sizeof(float) * N * nq);
        memcpy(A->kr, A->k, sizeof(float) * N * nkv);
    }
    bool swa = c->layer_is_swa[l];
    double base = swa ? c->rope_base_swa : c->rope_base;
    double rs = swa ? (c->rope_scale_swa > 0 ? c->rope_scale_swa : 1.0) : (c->rope_scale > 0 ? c->rope_scale : 1.0);
    hx_tr_rope(A->qr, n, nh, hd, pos, base, rs, c->rope_style, 0);
    hx_tr_rope(A->kr, n, nkvh, hd, pos, base, rs, c->rope_style, 0);
    hx_tr_attn at = attn_of(t, l, pos, n);
    hx_tr_attn_fwd(t->pool, &at, A->qr, A->kr, A->v, A->P, A->att);
    lin_fwd(t, &F->w[HX_LORA_O], F->bias[HX_LORA_O], &M[HX_LORA_O], A->att, n, A->o, A->t[HX_LORA_O]);
    const float *ob = A->o;
    if (c->post_norms) { hx_tr_rmsnorm_fwd(t->bt, A->ro, A->o, F->attn_post, n, D, c->norm_eps); ob = t->bt; }
    for (size_t i = 0; i < N * D; i++) A->x2[i] = x[i] + ob[i];
    hx_tr_rmsnorm_fwd(A->h2, A->r2, A->x2, F->ffn_norm, n, D, c->norm_eps);
    lin_fwd(t, &F->w[HX_LORA_GATE], NULL, &M[HX_LORA_GATE], A->h2, n, A->g, A->t[HX_LORA_GATE]);
    lin_fwd(t, &F->w[HX_LORA_UP], F->bias[HX_LORA_UP], &M[HX_LORA_UP], A->h2, n, A->u, A->t[HX_LORA_UP]);
    hx_tr_glu_fwd(A->a, A->g, A->u, N * ff, c->act);
    lin_fwd(t, &F->w[HX_LORA_DOWN], F->bias[HX_LORA_DOWN], &M[HX_LORA_DOWN], A->a, n, A->f, A->t[HX_LORA_DOWN]);
    const float *fb = A->f;
    if (c->post_norms) { hx_tr_rmsnorm_fwd(t->bt, A->rf, A->f, F->ffn_post, n, D, c->norm_eps); fb = t->bt; }
    for (size_t i = 0; i < N * D; i++) xo[i] = A->x2[i] + fb[i];
}

/* dx: the gradient of the layer's output in, of its input x out. */
static void layer_bwd(hx_trainer *t, int l, const int32_t *pos, int n, const float *x, const act *A, float *dx) {
    const hx_model_config *c = &t->m->cfg;
    const layer_frozen *F = &t->L[l];
    hx_train_mat *M = &t->mats[l * NSLOT];
    int D = c->n_embd, hd = c->head_dim, nh = c->n_head, nkvh = c->n_head_kv;
    size_t N = n, ff = c->n_ff;
    /* FFN */
    const float *df = dx;
    if (c->post_norms) { hx_tr_rmsnorm_bwd(t->bt, dx, A->f, F->ffn_post, A->rf, n, D, 0); df = t->bt; }
    lin_bwd(t, &F->w[HX_LORA_DOWN], &M[HX_LORA_DOWN], A->a, A->t[HX_LORA_DOWN], df, n, t->bf1, false);
    hx_tr_glu_bwd(t->bf2, t->bf3, t->bf1, A->g, A->u, N * ff, c->act);
    lin_bwd(t, &F->w[HX_LORA_GATE], &M[HX_LORA_GATE], A->h2, A->t[HX_LORA_GATE], t->bf2, n, t->bh, false);
    lin_bwd(t, &F->w[HX_LORA_UP], &M[HX_LORA_UP], A->h2, A->t[HX_LORA_UP], t->bf3, n, t->bh, true);
    hx_tr_rmsnorm_bwd(dx, t->bh, A->x2, F->ffn_norm, A->r2, n, D, 1);
    /* attention */
    const float *dob = dx;
    if (c->post_norms) { hx_tr_rmsnorm_bwd(t->bt, dx, A->o, F->attn_post, A->ro, n, D, 0); dob = t->bt; }
    lin_bwd(t, &F->w[HX_LORA_O], &M[HX_LORA_O], A->att, A->t[HX_LORA_O], dob, n, t->batt, false);
    hx_tr_attn at = attn_of(t, l, pos, n);
    hx_tr_attn_bwd(t->pool, &at, A->qr, A->kr, A->v, A->P, t->batt, t->bq, t->bk, t->bv, t->attn_scr);
    bool swa = c->layer_is_swa[l];
    double base = swa ? c->rope_base_swa : c->rope_base;
    double rs = swa ? (c->rope_scale_swa > 0 ? c->rope_scale_swa : 1.0) : (c->rope_scale > 0 ? c->rope_scale : 1.0);
    hx_tr_rope(t->bq, n, nh, hd, pos, base, rs, c->rope_style, 1);
    hx_tr_rope(t->bk, n, nkvh, hd, pos, base, rs, c->rope_style, 1);
    if (c->qk_norm) {
        hx_tr_rmsnorm_bwd(t->bq, t->bq, A->q, F->q_norm, A->rq, N * nh, hd, 0);
        hx_tr_rmsnorm_bwd(t->bk, t->bk, A->k, F->k_norm, A->rk, N * nkvh, hd, 0);
    }
    float *dh = l > 0 ? t->bh : NULL; /* below layer 0 are the frozen embeddings */
    lin_bwd(t, &F->w[HX_LORA_Q], &M[HX_LORA_Q], A->h1, A->t[HX_LORA_Q], t->bq, n, dh, false);
    lin_bwd(t, &F->w[HX_LORA_K], &M[HX_LORA_K], A->h1, A->t[HX_LORA_K], t->bk, n, dh, true);
    lin_bwd(t, &F->w[HX_LORA_V], &M[HX_LORA_V], A->h1, A->t[HX_LORA_V], t->bv, n, dh, true);
    if (dh) hx_tr_rmsnorm_bwd(dx, t->bh, x, F->attn_norm, A->r1, n, D, 1);
}

/* ---- the whole model ---- */

static hx_status check_batch(const hx_trainer *t, const int32_t *tok, const int32_t *pos, int n, hx_error *e) {
    if (n < 1) return hx_err(e, HX_ERR_ARG, "train: empty batch");
    for (int i = 0; i < n; i++) {
        if (tok[i] < 0 || tok[i] >= t->m->cfg.n_vocab)
            return hx_err(e, HX_ERR_ARG, "train: token %d at index %d outside the vocabulary (%d)", tok[i], i,
                          t->m->cfg.n_vocab);
        if (pos[i] != 0 && (i == 0 || pos[i] != pos[i - 1] + 1))
            return hx_err(e, HX_ERR_ARG, "train: position %d at index %d does not continue a sequence (0 starts one)",
                          pos[i], i);
    }
    return HX_OK;
}

/* Embeddings and every layer: xs[l] holds layer l's input, xs[n_layer] the
 * final residual; activations kept per layer unless checkpointing. */
static void forward_all(hx_trainer *t, const int32_t *tok, const int32_t *pos, int n) {
    const hx_model *m = t->m;
    const hx_model_config *c = &m->cfg;
    int D = c->n_embd;
    size_t rs = hx_row_size(m->tok_embd.type, D), ND = (size_t)n * D;
    float sc = c->embd_scale ? sqrtf((float)D) : 1.0f;
    for (int i = 0; i < n; i++) {
        float *xi = t->xs + (size_t)i * D;
        hx_dequantize_row(m->tok_embd.type, (const uint8_t *)m->tok_embd.data + (size_t)tok[i] * rs, xi, D);
        if (c->embd_scale) for (int d = 0; d < D; d++) xi[d] *= sc;
    }
    for (int l = 0; l < c->n_layer; l++)
        layer_fwd(t, l, pos, n, t->xs + l * ND, &t->acts[t->o.checkpoint ? 0 : l], t->xs + (l + 1) * ND);
}

/* Output norm and head over the rows listed: hrow (nr, D), logits (nr, V). */
static void head_fwd(hx_trainer *t, const int *rows, int nr, float *logits) {
    const hx_model_config *c = &t->m->cfg;
    int D = c->n_embd;
    for (int i = 0; i < nr; i++) memcpy(t->bt + (size_t)i * D, t->hrow + (size_t)rows[i] * D, sizeof(float) * D);
    hx_tr_rmsnorm_fwd(t->bh, t->hr, t->bt, t->out_norm, nr, D, c->norm_eps);
    hx_sgemm(t->pool, nr, t->out.n_out, D, t->bh, D, t->out.fwd, logits, t->out.n_out, NULL, 0);
}

hx_status hx_trainer_logits(hx_trainer *t, const int32_t *tok, const int32_t *pos, int n, float *logits, hx_error *e) {
    TRY(check_batch(t, tok, pos, n, e));
    TRY(ensure_cap(t, n, e));
    TRY(attn_layout(t, pos, n, e));
    forward_all(t, tok, pos, n);
    const hx_model_config *c = &t->m->cfg;
    memcpy(t->hrow, t->xs + (size_t)c->n_layer * n * c->n_embd, sizeof(float) * (size_t)n * c->n_embd);
    for (int i = 0; i < n; i++) t->rows[i] = i;
    head_fwd(t, t->rows, n, logits);
    if (c->final_logit_softcap > 0) {
        float cap = c->final_logit_softcap;
        for (size_t i = 0; i < (size_t)n * c->n_vocab; i++) logits[i] = cap * tanhf(logits[i] / cap);
    }
    return HX_OK;
}

hx_status hx_trainer_accumulate(hx_trainer *t, const int32_t *tok, const int32_t *pos, const uint8_t *target, int n,
                                float weight, double *loss_sum, int *n_targets, hx_error *e) {
    if (loss_sum) *loss_sum = 0;
    if (n_targets) *n_targets = 0;
    TRY(check_batch(t, tok, pos, n, e));
    if (!target) return hx_err(e, HX_ERR_ARG, "train: no target mask");
    TRY(ensure_cap(t, n, e));
    const hx_model_config *c = &t->m->cfg;
    int D = c->n_embd, V = c->n_vocab, nl = c->n_layer;
    size_t ND = (size_t)n * D;
    /* the predicting rows: i - 1 for every target token i inside a sequence */
    int nr = 0;
    for (int i = 1; i < n; i++)
        if (target[i] && pos[i] > 0) t->rows[nr++] = i - 1;
    if (nr == 0) return HX_OK;
    TRY(attn_layout(t, pos, n, e));
    forward_all(t, tok, pos, n);
    const float *xf = t->xs + (size_t)nl * ND;
    memcpy(t->hrow, xf, sizeof(float) * ND);
    head_fwd(t, t->rows, nr, t->logit);
    double loss = 0;
    for (int k = 0; k < nr; k++) {
        float *lg = t->logit + (size_t)k * V;
        loss += hx_tr_xent(lg, V, tok[t->rows[k] + 1], c->final_logit_softcap, weight, lg);
    }
    /* back through the head and the output norm into dx (n, D), zero off the rows */
    hx_sgemm(t->pool, nr, D, V, t->logit, V, t->out.bwd, t->bh, D, NULL, 0);
    hx_tr_rmsnorm_bwd(t->bh, t->bh, t->bt, t->out_norm, t->hr, nr, D, 0);
    memset(t->bx, 0, sizeof(float) * ND);
    for (int k = 0; k < nr; k++)
        memcpy(t->bx + (size_t)t->rows[k] * D, t->bh + (size_t)k * D, sizeof(float) * D);
    for (int l = nl - 1; l >= 0; l--) {
        const float *x = t->xs + (size_t)l * ND;
        act *A = &t->acts[t->o.checkpoint ? 0 : l];
        if (t->o.checkpoint) layer_fwd(t, l, pos, n, x, A, t->bf3); /* recompute; its output is not needed */
        layer_bwd(t, l, pos, n, x, A, t->bx);
    }
    if (loss_sum) *loss_sum = loss;
    if (n_targets) *n_targets = nr;
    return HX_OK;
}

/* ---- optimizer ---- */

void hx_trainer_zero_grad(hx_trainer *t) {
    for (int i = 0; i < t->m->cfg.n_layer * NSLOT; i++) {
        hx_train_mat *w = &t->mats[i];
        if (!w->rank) continue;
        memset(w->ga, 0, sizeof(float) * (size_t)w->rank * w->n_in);
        memset(w->gb, 0, sizeof(float) * (size_t)w->rank * w->n_out);
    }
}

double hx_trainer_grad_norm(const hx_trainer *t) {
    double ss = 0;
    for (int i = 0; i < t->m->cfg.n_layer * NSLOT; i++) {
        const hx_train_mat *w = &t->mats[i];
        if (!w->rank) continue;
        for (size_t j = 0; j < (size_t)w->rank * w->n_in; j++) ss += (double)w->ga[j] * w->ga[j];
        for (size_t j = 0; j < (size_t)w->rank * w->n_out; j++) ss += (double)w->gb[j] * w->gb[j];
    }
    return sqrt(ss);
}

/* PyTorch's AdamW order: decay, moments, bias-corrected step. */
static void adamw(float *p, const float *g, float *m, float *v, size_t n, const hx_adamw_opts *o, float lr,
                  float gscale, double bc1, double bc2) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        p[i] *= 1.0f - lr * o->weight_decay;
        m[i] = o->beta1 * m[i] + (1.0f - o->beta1) * gi;
        v[i] = o->beta2 * v[i] + (1.0f - o->beta2) * gi * gi;
        float mh = (float)(m[i] / bc1), vh = (float)(v[i] / bc2);
        p[i] -= lr * mh / (sqrtf(vh) + o->eps);
    }
}

double hx_trainer_adamw_step(hx_trainer *t, const hx_adamw_opts *o, float lr) {
    double norm = hx_trainer_grad_norm(t);
    float gscale = o->clip > 0 && norm > o->clip ? (float)(o->clip / (norm + 1e-6)) : 1.0f;
    t->adam_t++;
    double bc1 = 1.0 - pow(o->beta1, t->adam_t), bc2 = 1.0 - pow(o->beta2, t->adam_t);
    for (int i = 0; i < t->m->cfg.n_layer * NSLOT; i++) {
        hx_train_mat *w = &t->mats[i];
        if (!w->rank) continue;
        adamw(w->a, w->ga, w->ma, w->va, (size_t)w->rank * w->n_in, o, lr, gscale, bc1, bc2);
        adamw(w->b, w->gb, w->mb, w->vb, (size_t)w->rank * w->n_out, o, lr, gscale, bc1, bc2);
    }
    return norm;
}

float hx_train_lr_at(float lr, int step, int warmup, int total, float min_ratio) {
    if (warmup > 0 && step < warmup) return lr * (float)(step + 1) / (float)warmup;
    int span = total - warmup - 1;
    if (span <= 0) return lr;
    double p = (double)(step - warmup) / span;
    if (p > 1) p = 1;
    return (float)(lr * (min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + cos(M_PI * p))));
}

/* ---- output ---- */

hx_status hx_trainer_save(const hx_trainer *t, const char *path, hx_error *e) {
    const hx_model *m = t->m;
    struct hx_adapter ad = { .m = m, .path = (char *)path, .alpha = t->o.alpha, .n_layer = m->cfg.n_layer, .refs = 1 };
    ad.w = calloc((size_t)m->cfg.n_layer * NSLOT, sizeof *ad.w);
    if (!ad.w) return hx_err(e, HX_ERR_NOMEM, "train: out of memory");
    for (int i = 0; i < m->cfg.n_layer * NSLOT; i++) {
        const hx_train_mat *w = &t->mats[i];
        if (!w->rank) continue;
        ad.w[i] = (hx_lora_w){ .rank = w->rank, .n_in = w->n_in, .n_out = w->n_out, .a = w->a, .b = w->b };
        ad.n_weights++;
    }
    hx_status st = hx_lora_write_gguf(&ad, path, e);
    free(ad.w);
    return st;
}
