/* bert.c — BERT encoder forward on the CPU (see bert.h for the recipe). */
#include "backend/cpu/bert.h"
#include "backend/cpu/gemm_i8.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/sgemm.h"
#include "core/core.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>

/* Row r of an embedding table (any supported type) as f32. */
static void embd_row(const hx_tensor *t, int64_t r, float *out) {
    size_t rs = hx_row_size(t->type, t->ne[0]);
    hx_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rs, out, t->ne[0]);
}

/* 1-D weight (norm or bias) as f32 into out[n]; zeros when absent. */
static void vec_f32(const hx_tensor *t, float *out, int n) {
    if (t->data) embd_row(t, 0, out);
    else memset(out, 0, (size_t)n * sizeof(float));
}

static float *falloc(size_t n) {
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}

/* ---- prepared weights ---- */

typedef struct bert_layer_prep {
    float *qkv, *o, *up, *down;                 /* packed (sgemm.h); NULL with int8 */
    hx_i8_mat qkv8, o8, up8, down8;             /* int8 (gemm_i8.h); empty with f32 */
    float *b_qkv, *bo, *b_up, *b_down;          /* f32 biases (zeros when absent) */
    float *ln1_w, *ln1_b, *ln2_w, *ln2_b;       /* post-attention / post-FFN norms */
} bert_layer_prep;

struct hx_bert_cpu {
    int n_layer;
    hx_bert_type type;
    bert_layer_prep *L;
    float *ws;   /* the forward's activations, kept between calls (no page faults per batch) */
    size_t ws_n; /* floats in ws */
    void *act;   /* int8: a product's quantized input (hx_i8_act), kept like ws */
    size_t act_n; /* bytes in act */
};

void hx_bert_cpu_free(hx_bert_cpu *b) {
    if (!b) return;
    for (int i = 0; b->L && i < b->n_layer; i++) {
        bert_layer_prep *p = &b->L[i];
        free(p->qkv); free(p->o); free(p->up); free(p->down);
        hx_i8_mat_free(&p->qkv8); hx_i8_mat_free(&p->o8); hx_i8_mat_free(&p->up8); hx_i8_mat_free(&p->down8);
        free(p->b_qkv); free(p->bo); free(p->b_up); free(p->b_down);
        free(p->ln1_w); free(p->ln1_b); free(p->ln2_w); free(p->ln2_b);
    }
    free(b->L);
    free(b->ws);
    free(b->act);
    free(b);
}

/* Dequantize `count` matrices with the same row length into tmp, stacked by rows; returns the rows. */
static int64_t dequant_stack(int count, const hx_tensor *const *ts, float *tmp) {
    int64_t cols = ts[0]->ne[0], rows = 0;
    for (int m = 0; m < count; m++) {
        const hx_tensor *t = ts[m];
        size_t rs = hx_row_size(t->type, cols);
        for (int64_t r = 0; r < t->ne[1]; r++)
            hx_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rs, tmp + (size_t)(rows + r) * cols, cols);
        rows += t->ne[1];
    }
    return rows;
}

/* The stacked matrices packed for hx_sgemm; NULL when out of memory. */
static float *pack_stack(int count, const hx_tensor *const *ts, float *tmp) {
    int64_t cols = ts[0]->ne[0], rows = dequant_stack(count, ts, tmp);
    float *p = falloc(hx_sgemm_packed_size(rows, cols));
    if (p) hx_sgemm_pack_nt(tmp, cols, rows, cols, p);
    return p;
}

/* The stacked matrices quantized for hx_gemm_i8; false when out of memory. */
static bool pack_stack_i8(int count, const hx_tensor *const *ts, float *tmp, hx_i8_mat *out) {
    int64_t cols = ts[0]->ne[0], rows = dequant_stack(count, ts, tmp);
    return hx_i8_mat_pack(tmp, cols, rows, cols, out);
}

hx_status hx_bert_cpu_new(const hx_model *m, hx_bert_cpu **out, hx_error *e) {
    return hx_bert_cpu_new_type(m, HX_BERT_F32, out, e);
}

hx_status hx_bert_cpu_new_type(const hx_model *m, hx_bert_type type, hx_bert_cpu **out, hx_error *e) {
    *out = NULL;
    const hx_model_config *c = &m->cfg;
    if (c->arch != HX_ARCH_BERT) return hx_err(e, HX_ERR_ARG, "hx_bert_cpu_new: model is %s, not bert", c->arch_name);
    const int64_t E = c->n_embd, F = c->n_ff, QD = (int64_t)c->n_head * c->head_dim;
    double bytes = (type == HX_BERT_INT8 ? 1.0 : 4.0) * c->n_layer * (3.0 * QD * E + E * QD + 2.0 * F * E);
    if (bytes > 2.0 * 1024 * 1024 * 1024) return HX_OK;
    for (int il = 0; il < c->n_layer; il++) {
        const hx_layer_weights *L = &m->layers[il];
        const hx_tensor *ts[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_up, &L->ffn_down};
        for (int k = 0; k < 6; k++)
            if (!ts[k]->data || !hx_row_size(ts[k]->type, ts[k]->ne[0]))
                return hx_err(e, HX_ERR_UNSUPPORTED, "bert: tensor '%s' (%s) cannot be dequantized",
                              ts[k]->name ? ts[k]->name : "?", hx_type_name(ts[k]->type));
        if (L->wq.ne[0] != E || L->wk.ne[0] != E || L->wv.ne[0] != E || L->wq.ne[1] + L->wk.ne[1] + L->wv.ne[1] != 3 * QD ||
            L->wo.ne[0] != QD || L->wo.ne[1] != E || L->ffn_up.ne[0] != E || L->ffn_up.ne[1] != F ||
            L->ffn_down.ne[0] != F || L->ffn_down.ne[1] != E)
            return hx_err(e, HX_ERR_FORMAT, "bert: layer %d: unexpected weight shapes", il);
    }
    hx_bert_cpu *b = calloc(1, sizeof *b);
    int64_t big = 3 * QD * E > F * E ? 3 * QD * E : F * E;
    float *tmp = falloc((size_t)big);
    if (!b || !tmp || !(b->L = calloc((size_t)c->n_layer, sizeof *b->L))) goto nomem;
    b->n_layer = c->n_layer;
    b->type = type;
    for (int il = 0; il < c->n_layer; il++) {
        const hx_layer_weights *L = &m->layers[il];
        bert_layer_prep *p = &b->L[il];
        const hx_tensor *qkv[] = {&L->wq, &L->wk, &L->wv}, *o[] = {&L->wo}, *up[] = {&L->ffn_up}, *down[] = {&L->ffn_down};
        if (type == HX_BERT_INT8) {
            if (!pack_stack_i8(3, qkv, tmp, &p->qkv8) || !pack_stack_i8(1, o, tmp, &p->o8) ||
                !pack_stack_i8(1, up, tmp, &p->up8) || !pack_stack_i8(1, down, tmp, &p->down8))
                goto nomem;
        } else if (!(p->qkv = pack_stack(3, qkv, tmp)) || !(p->o = pack_stack(1, o, tmp)) ||
                   !(p->up = pack_stack(1, up, tmp)) || !(p->down = pack_stack(1, down, tmp))) {
            goto nomem;
        }
        if (!(p->b_qkv = falloc((size_t)(3 * QD))) || !(p->bo = falloc((size_t)E)) || !(p->b_up = falloc((size_t)F)) ||
            !(p->b_down = falloc((size_t)E)) || !(p->ln1_w = falloc((size_t)E)) || !(p->ln1_b = falloc((size_t)E)) ||
            !(p->ln2_w = falloc((size_t)E)) || !(p->ln2_b = falloc((size_t)E)))
            goto nomem;
        vec_f32(&L->bq, p->b_qkv, (int)QD);
        vec_f32(&L->bk, p->b_qkv + QD, (int)QD);
        vec_f32(&L->bv, p->b_qkv + 2 * QD, (int)QD);
        vec_f32(&L->bo, p->bo, (int)E);
        vec_f32(&L->ffn_up_b, p->b_up, (int)F);
        vec_f32(&L->ffn_down_b, p->b_down, (int)E);
        vec_f32(&L->attn_post_norm, p->ln1_w, (int)E);
        vec_f32(&L->attn_post_norm_b, p->ln1_b, (int)E);
        vec_f32(&L->ffn_post_norm, p->ln2_w, (int)E);
        vec_f32(&L->ffn_post_norm_b, p->ln2_b, (int)E);
    }
    free(tmp);
    *out = b;
    return HX_OK;
nomem:
    free(tmp);
    hx_bert_cpu_free(b);
    return hx_err(e, HX_ERR_NOMEM, "bert: out of memory for the %s weights", type == HX_BERT_INT8 ? "int8" : "f32");
}

/* ---- the forward ---- */

typedef struct attn_job {
    const float *qkv;       /* (T, ld): q at column 0, k at QD, v at 2 QD */
    float *out;             /* (T, QD) */
    const int *starts, *lens;
    int n_head, head_dim, ld, qd;
    float scale;
    float *scratch;         /* per thread: scratch_n floats */
    size_t scratch_n;
    int max_len;
} attn_job;

/* One (sequence, head) pair: S = Q K^T, softmax rows, O = P V, as two small GEMMs. */
static void attn_task(void *ctx, int64_t task, int thread) {
    attn_job *j = ctx;
    int s = (int)(task / j->n_head), h = (int)(task % j->n_head);
    int t0 = j->starts[s], L = j->lens[s], D = j->head_dim, W = j->ld;
    float *S = j->scratch + (size_t)thread * j->scratch_n;
    float *Kp = S + (size_t)j->max_len * j->max_len;
    float *Vp = Kp + hx_sgemm_packed_size(j->max_len, D);
    const float *q = j->qkv + (size_t)t0 * W + (size_t)h * D;
    hx_sgemm_pack_nt(q + j->qd, W, L, D, Kp);
    hx_sgemm(NULL, L, L, D, q, W, Kp, S, L, NULL, 0);
    for (int i = 0; i < L; i++) hx_softmax_f32(S + (size_t)i * L, L, j->scale);
    hx_sgemm_pack_nn(q + 2 * j->qd, W, D, L, Vp);
    hx_sgemm(NULL, L, D, L, S, L, Vp, j->out + (size_t)t0 * j->qd + (size_t)h * D, j->qd, NULL, 0);
}

typedef struct ln_job { float *x; int64_t T; int E; const float *w, *b; float eps; } ln_job;
enum { LN_ROWS = 32 };
static void ln_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    ln_job *j = ctx;
    int64_t r1 = (task + 1) * LN_ROWS < j->T ? (task + 1) * LN_ROWS : j->T;
    for (int64_t t = task * LN_ROWS; t < r1; t++) hx_layernorm_f32(j->x + (size_t)t * j->E, j->E, j->w, j->b, j->eps);
}
static void ln_rows(hx_pool *pool, float *x, int64_t T, int E, const float *w, const float *b, float eps) {
    ln_job j = {x, T, E, w, b, eps};
    hx_pool_run(T >= 2 * LN_ROWS ? pool : NULL, (T + LN_ROWS - 1) / LN_ROWS, ln_task, &j);
}

static void add_bias(float *y, int64_t n, int ld, int dim, const float *b) {
    for (int64_t t = 0; t < n; t++)
        for (int i = 0; i < dim; i++) y[t * ld + i] += b[i];
}

/* Y (T, rows) = X (T, cols) · W^T + bias (flags: HX_SGEMM_ACC / HX_SGEMM_GELU) with the prepared
 * weights: the f32 panels Wp, or with int8 W8, X quantized per token into prep->act first. */
static void prep_gemm(hx_pool *pool, hx_bert_cpu *prep, int64_t T, int64_t rows, int64_t cols, const float *X,
                      const float *Wp, const hx_i8_mat *W8, float *Y, int64_t ldy, const float *bias, unsigned flags) {
    if (prep->type != HX_BERT_INT8) {
        hx_sgemm(pool, T, rows, cols, X, cols, Wp, Y, ldy, bias, flags);
        return;
    }
    hx_i8_act a;
    hx_i8_act_init(&a, T, cols, prep->act);
    hx_i8_quantize(pool, X, cols, &a);
    hx_gemm_i8(pool, &a, W8, Y, ldy, bias,
               (flags & HX_SGEMM_ACC ? HX_I8_ACC : 0u) | (flags & HX_SGEMM_GELU ? HX_I8_GELU : 0u));
}

hx_status hx_bert_encode(const hx_model *m, hx_pool *pool, const int32_t *ids, const int *lens, int n_seq,
                         hx_pooling pooling, bool normalize, float *out, hx_error *e) {
    return hx_bert_encode_prep(m, NULL, pool, ids, lens, n_seq, pooling, normalize, out, e);
}

hx_status hx_bert_encode_prep(const hx_model *m, hx_bert_cpu *prep, hx_pool *pool, const int32_t *ids,
                              const int *lens, int n_seq, hx_pooling pooling, bool normalize, float *out, hx_error *e) {
    const hx_model_config *c = &m->cfg;
    if (c->arch != HX_ARCH_BERT) return hx_err(e, HX_ERR_ARG, "hx_bert_encode: model is %s, not bert", c->arch_name);
    if (n_seq <= 0) return hx_err(e, HX_ERR_ARG, "hx_bert_encode: no sequences");
    if (prep && prep->n_layer != c->n_layer) return hx_err(e, HX_ERR_ARG, "hx_bert_encode: weights prepared for another model");
    const int E = c->n_embd, F = c->n_ff, H = c->n_head, D = c->head_dim, QD = H * D;
    int64_t T = 0;
    int max_len = 0;
    for (int s = 0; s < n_seq; s++) {
        if (lens[s] < 1 || lens[s] > c->n_ctx_train)
            return hx_err(e, HX_ERR_RANGE, "sequence %d has %d tokens; the model takes 1..%d", s, lens[s], c->n_ctx_train);
        T += lens[s];
        if (lens[s] > max_len) max_len = lens[s];
    }
    for (int64_t t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= c->n_vocab)
            return hx_err(e, HX_ERR_RANGE, "token id %d out of range (vocab %d)", ids[t], c->n_vocab);
    int nt = hx_pool_threads(pool);
    size_t scratch_n = (size_t)max_len * max_len + hx_sgemm_packed_size(max_len, D) + hx_sgemm_packed_size(D, max_len);
    scratch_n = (scratch_n + 15) / 16 * 16;
    /* one block for all activations, each part 64-byte aligned: x, qkv, att, h, y, vb, tmp, scratch */
    const size_t part[8] = {(size_t)T * E, (size_t)T * 3 * QD, (size_t)T * QD, (size_t)T * F, prep ? 0 : (size_t)T * E,
                            (size_t)(F > 3 * QD ? F : 3 * QD) + (size_t)E, (size_t)E * 5, (size_t)nt * scratch_n};
    size_t need = 0;
    for (int i = 0; i < 8; i++) need += (part[i] + 15) / 16 * 16;
    float *ws = NULL, *own = NULL;
    if (prep && prep->ws_n >= need) {
        ws = prep->ws;
    } else if (prep) {
        free(prep->ws);
        prep->ws_n = 0;
        if ((prep->ws = ws = falloc(need))) prep->ws_n = need;
    } else {
        ws = own = falloc(need);
    }
    float *pp[8] = {0};
    for (size_t i = 0, o = 0; ws && i < 8; o += (part[i] + 15) / 16 * 16, i++) pp[i] = ws + o;
    float *x = pp[0], *qkv = pp[1], *att = pp[2], *h = pp[3], *y = prep ? NULL : pp[4], *vb = pp[5], *tmp = pp[6];
    float *scratch = pp[7];
    if (ws && prep && prep->type == HX_BERT_INT8) {
        int64_t widest = F > QD ? F : QD;
        size_t an = hx_i8_act_bytes(T, widest > E ? widest : E);
        if (prep->act_n < an) {
            free(prep->act);
            prep->act_n = 0;
            if ((prep->act = aligned_alloc(64, (an + 63) / 64 * 64))) prep->act_n = an;
            else ws = NULL;
        }
    }
    int *starts = malloc((size_t)n_seq * sizeof(int));
    hx_status st = HX_OK;
    if (!ws || !starts) {
        st = hx_err(e, HX_ERR_NOMEM, "bert: out of memory for %lld tokens", (long long)T);
        goto done;
    }
    float *nw = tmp + E, *nb = tmp + 2 * E, *lw = tmp + 3 * E, *lb = tmp + 4 * E;
    /* embeddings + LayerNorm */
    vec_f32(&m->embd_norm, nw, E);
    vec_f32(&m->embd_norm_b, nb, E);
    {
        int64_t t = 0;
        for (int s = 0; s < n_seq; s++) {
            starts[s] = (int)t;
            for (int i = 0; i < lens[s]; i++, t++) {
                float *xr = x + t * E;
                embd_row(&m->tok_embd, ids[t], xr);
                embd_row(&m->pos_embd, i, tmp);
                for (int j = 0; j < E; j++) xr[j] += tmp[j];
                if (m->type_embd.data) {
                    embd_row(&m->type_embd, 0, tmp);
                    for (int j = 0; j < E; j++) xr[j] += tmp[j];
                }
                hx_layernorm_f32(xr, E, nw, nb, c->norm_eps);
            }
        }
    }
    for (int il = 0; il < c->n_layer; il++) {
        const hx_layer_weights *L = &m->layers[il];
        const bert_layer_prep *P = prep ? &prep->L[il] : NULL;
        /* q, k, v side by side in qkv (T, 3 QD) */
        if (P) {
            prep_gemm(pool, prep, T, 3 * QD, E, x, P->qkv, &P->qkv8, qkv, 3 * QD, P->b_qkv, 0);
        } else {
            for (int k = 0; k < 3; k++) {
                const hx_tensor *W = k == 0 ? &L->wq : k == 1 ? &L->wk : &L->wv;
                if ((st = hx_matmul(pool, W, x, T, att, e))) goto done;
                vec_f32(k == 0 ? &L->bq : k == 1 ? &L->bk : &L->bv, vb, QD);
                for (int64_t t = 0; t < T; t++)
                    for (int i = 0; i < QD; i++) qkv[t * 3 * QD + k * QD + i] = att[t * QD + i] + vb[i];
            }
        }
        attn_job j = {qkv, att, starts, lens, H, D, 3 * QD, QD, c->attn_scale, scratch, scratch_n, max_len};
        hx_pool_run(pool, (int64_t)n_seq * H, attn_task, &j);
        const float *w1 = P ? P->ln1_w : lw, *b1 = P ? P->ln1_b : lb;
        if (P) {
            prep_gemm(pool, prep, T, E, QD, att, P->o, &P->o8, x, E, P->bo, HX_SGEMM_ACC); /* x += att Wo^T + bo */
        } else {
            if ((st = hx_matmul(pool, &L->wo, att, T, y, e))) goto done;
            vec_f32(&L->bo, vb, E);
            for (int64_t t = 0; t < T; t++)
                for (int i = 0; i < E; i++) x[t * E + i] += y[t * E + i] + vb[i];
            vec_f32(&L->attn_post_norm, lw, E);
            vec_f32(&L->attn_post_norm_b, lb, E);
        }
        ln_rows(pool, x, T, E, w1, b1, c->norm_eps);
        if (P) {
            prep_gemm(pool, prep, T, F, E, x, P->up, &P->up8, h, F, P->b_up, HX_SGEMM_GELU);
            prep_gemm(pool, prep, T, E, F, h, P->down, &P->down8, x, E, P->b_down, HX_SGEMM_ACC);
        } else {
            if ((st = hx_matmul(pool, &L->ffn_up, x, T, h, e))) goto done;
            vec_f32(&L->ffn_up_b, vb, F);
            add_bias(h, T, F, F, vb);
            hx_gelu_f32(h, T * F);
            if ((st = hx_matmul(pool, &L->ffn_down, h, T, y, e))) goto done;
            vec_f32(&L->ffn_down_b, vb, E);
            for (int64_t t = 0; t < T; t++)
                for (int i = 0; i < E; i++) x[t * E + i] += y[t * E + i] + vb[i];
            vec_f32(&L->ffn_post_norm, lw, E);
            vec_f32(&L->ffn_post_norm_b, lb, E);
        }
        ln_rows(pool, x, T, E, P ? P->ln2_w : lw, P ? P->ln2_b : lb, c->norm_eps);
    }
    /* pooling */
    if (pooling == HX_POOL_NONE) {
        memcpy(out, x, (size_t)T * E * sizeof(float));
        if (normalize)
            for (int64_t t = 0; t < T; t++) {
                double n2 = 0;
                for (int i = 0; i < E; i++) n2 += (double)x[t * E + i] * x[t * E + i];
                float inv = n2 > 0 ? (float)(1.0 / sqrt(n2)) : 0.0f;
                for (int i = 0; i < E; i++) out[t * E + i] *= inv;
            }
        goto done;
    }
    for (int s = 0; s < n_seq; s++) {
        float *o = out + (size_t)s * E;
        if (pooling == HX_POOL_CLS) {
            memcpy(o, x + (size_t)starts[s] * E, (size_t)E * sizeof(float));
        } else {
            for (int i = 0; i < E; i++) {
                double sum = 0;
                for (int t = 0; t < lens[s]; t++) sum += x[(size_t)(starts[s] + t) * E + i];
                o[i] = (float)(sum / lens[s]);
            }
        }
        if (normalize) {
            double n2 = 0;
            for (int i = 0; i < E; i++) n2 += (double)o[i] * o[i];
            float inv = n2 > 0 ? (float)(1.0 / sqrt(n2)) : 0.0f;
            for (int i = 0; i < E; i++) o[i] *= inv;
        }
    }
done:
    free(own);
    free(starts);
    return st;
}
