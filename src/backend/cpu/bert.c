/* bert.c — BERT encoder forward on the CPU (see bert.h for the recipe). */
#include "backend/cpu/bert.h"
#include "backend/cpu/matmul.h"
#include "core/core.h"
#include "quant/quant.h"

#include <math.h>
#include <stdlib.h>

/* Row r of an embedding table (any supported type) as f32. */
static void embd_row(const hx_tensor *t, int64_t r, float *out) {
    size_t rs = hx_row_size(t->type, t->ne[0]);
    hx_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)r * rs, out, t->ne[0]);
}

/* 1-D weight (norm or bias) as f32 into out[n]. */
static void vec_f32(const hx_tensor *t, float *out) { embd_row(t, 0, out); }

/* y = LayerNorm(x) * w + b over n, in place. */
static void layernorm(float *x, int n, const float *w, const float *b, float eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= n;
    float inv = (float)(1.0 / sqrt(var + eps));
    for (int i = 0; i < n; i++) x[i] = ((float)(x[i] - mean)) * inv * w[i] + b[i];
}

static float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

typedef struct attn_job {
    const float *q, *k, *v; /* (T, H*D) each */
    float *out;             /* (T, H*D) */
    const int *starts, *lens;
    int n_head, head_dim, stride;
    float scale;
    float *scratch;         /* per thread: max_len floats */
    int max_len;
} attn_job;

/* One (sequence, head) pair: full bidirectional softmax attention. */
static void attn_task(void *ctx, int64_t task, int thread) {
    attn_job *j = ctx;
    int s = (int)(task / j->n_head), h = (int)(task % j->n_head);
    int t0 = j->starts[s], L = j->lens[s], D = j->head_dim, W = j->stride;
    float *p = j->scratch + (size_t)thread * (size_t)j->max_len;
    for (int i = 0; i < L; i++) {
        const float *qi = j->q + (size_t)(t0 + i) * W + h * D;
        float mx = -INFINITY;
        for (int t = 0; t < L; t++) {
            const float *kt = j->k + (size_t)(t0 + t) * W + h * D;
            float d = 0;
            for (int c = 0; c < D; c++) d += qi[c] * kt[c];
            p[t] = d * j->scale;
            if (p[t] > mx) mx = p[t];
        }
        float sum = 0;
        for (int t = 0; t < L; t++) { p[t] = expf(p[t] - mx); sum += p[t]; }
        float inv = 1.0f / sum;
        float *o = j->out + (size_t)(t0 + i) * W + h * D;
        for (int c = 0; c < D; c++) o[c] = 0;
        for (int t = 0; t < L; t++) {
            const float *vt = j->v + (size_t)(t0 + t) * W + h * D;
            float w = p[t] * inv;
            for (int c = 0; c < D; c++) o[c] += w * vt[c];
        }
    }
}

static void add_bias(float *y, int64_t n, int dim, const float *b) {
    for (int64_t t = 0; t < n; t++)
        for (int i = 0; i < dim; i++) y[t * dim + i] += b[i];
}

hx_status hx_bert_encode(const hx_model *m, hx_pool *pool, const int32_t *ids, const int *lens, int n_seq,
                         hx_pooling pooling, bool normalize, float *out, hx_error *e) {
    const hx_model_config *c = &m->cfg;
    if (c->arch != HX_ARCH_BERT) return hx_err(e, HX_ERR_ARG, "hx_bert_encode: model is %s, not bert", c->arch_name);
    if (n_seq <= 0) return hx_err(e, HX_ERR_ARG, "hx_bert_encode: no sequences");
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
    size_t bigw = (size_t)(F > QD ? F : QD);
    float *x = malloc((size_t)T * E * sizeof(float));
    float *q = malloc((size_t)T * QD * sizeof(float)), *k = malloc((size_t)T * QD * sizeof(float));
    float *v = malloc((size_t)T * QD * sizeof(float)), *att = malloc((size_t)T * QD * sizeof(float));
    float *h = malloc((size_t)T * bigw * sizeof(float)), *y = malloc((size_t)T * E * sizeof(float));
    float *tmp = malloc((size_t)E * sizeof(float)), *vw = malloc((size_t)E * sizeof(float));
    float *vb = malloc((size_t)(bigw > (size_t)E ? bigw : (size_t)E) * sizeof(float));
    float *scratch = malloc((size_t)nt * (size_t)max_len * sizeof(float));
    int *starts = malloc((size_t)n_seq * sizeof(int));
    hx_status st = HX_OK;
    if (!x || !q || !k || !v || !att || !h || !y || !tmp || !vw || !vb || !scratch || !starts) {
        st = hx_err(e, HX_ERR_NOMEM, "bert: out of memory for %lld tokens", (long long)T);
        goto done;
    }
    /* embeddings + LayerNorm */
    {
        float *nw = malloc((size_t)E * sizeof(float)), *nb = malloc((size_t)E * sizeof(float));
        if (!nw || !nb) { free(nw); free(nb); st = hx_err(e, HX_ERR_NOMEM, "bert: out of memory"); goto done; }
        vec_f32(&m->embd_norm, nw);
        vec_f32(&m->embd_norm_b, nb);
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
                layernorm(xr, E, nw, nb, c->norm_eps);
            }
        }
        free(nw); free(nb);
    }
    for (int il = 0; il < c->n_layer; il++) {
        const hx_layer_weights *L = &m->layers[il];
        if ((st = hx_matmul(pool, &L->wq, x, T, q, e)) || (st = hx_matmul(pool, &L->wk, x, T, k, e)) ||
            (st = hx_matmul(pool, &L->wv, x, T, v, e)))
            goto done;
        vec_f32(&L->bq, vb); add_bias(q, T, QD, vb);
        vec_f32(&L->bk, vb); add_bias(k, T, QD, vb);
        vec_f32(&L->bv, vb); add_bias(v, T, QD, vb);
        attn_job j = {q, k, v, att, starts, lens, H, D, QD, c->attn_scale, scratch, max_len};
        hx_pool_run(pool, (int64_t)n_seq * H, attn_task, &j);
        if ((st = hx_matmul(pool, &L->wo, att, T, y, e))) goto done;
        vec_f32(&L->bo, vb);
        vec_f32(&L->attn_post_norm, vw);
        vec_f32(&L->attn_post_norm_b, tmp);
        for (int64_t t = 0; t < T; t++) {
            float *xr = x + t * E, *yr = y + t * E;
            for (int i = 0; i < E; i++) xr[i] += yr[i] + vb[i];
            layernorm(xr, E, vw, tmp, c->norm_eps);
        }
        if ((st = hx_matmul(pool, &L->ffn_up, x, T, h, e))) goto done;
        vec_f32(&L->ffn_up_b, vb);
        for (int64_t t = 0; t < T; t++)
            for (int i = 0; i < F; i++) h[t * F + i] = gelu_erf(h[t * F + i] + vb[i]);
        if ((st = hx_matmul(pool, &L->ffn_down, h, T, y, e))) goto done;
        vec_f32(&L->ffn_down_b, vb);
        vec_f32(&L->ffn_post_norm, vw);
        vec_f32(&L->ffn_post_norm_b, tmp);
        for (int64_t t = 0; t < T; t++) {
            float *xr = x + t * E, *yr = y + t * E;
            for (int i = 0; i < E; i++) xr[i] += yr[i] + vb[i];
            layernorm(xr, E, vw, tmp, c->norm_eps);
        }
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
    free(x); free(q); free(k); free(v); free(att); free(h); free(y);
    free(tmp); free(vw); free(vb); free(scratch); free(starts);
    return st;
}
