/* ref_forward.h — the reference decoder forward: the oracle for the CPU (and
 * CUDA) backends. Deliberately naive: every weight dequantized to f32 once,
 * every activation and accumulation in float64, one token at a time, a
 * float64 KV cache, no threads, no quantized activations. Follows the same
 * recipe as src/backend/cpu/forward.c (see its header comment) but shares no
 * code with it beyond the model config and hx_dequantize_row.
 *
 * Usage:
 *   ref_model *r = ref_new(m, n_ctx);
 *   ref_step(r, token, logits);   // logits: n_vocab floats (may be NULL), pos advances
 *   ref_step_ex(r, token, logits, &hooks);   // the same with extra products / recording (ref_hooks)
 *   ref_free(r);
 */
#ifndef HX_REF_FORWARD_H
#define HX_REF_FORWARD_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "quant/quant.h"

typedef struct ref_mat { int64_t rows, cols; float *w; } ref_mat; /* (rows, cols) f32 */

typedef struct ref_layer {
    ref_mat attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm, attn_post_norm;
    ref_mat ffn_norm, ffn_gate, ffn_up, ffn_down, ffn_post_norm;
} ref_layer;

typedef struct ref_model {
    const hx_model *m;
    int n_ctx, pos;
    ref_mat tok_embd, output_norm, output;
    ref_layer *layers;
    double *kc, *vc; /* (n_layer, n_ctx, n_head_kv*head_dim) */
} ref_model;

static ref_mat ref_mat_of(const hx_tensor *t) {
    ref_mat r = { 0, 0, NULL };
    if (!t->data) return r;
    r.cols = t->ne[0];
    r.rows = t->ne[1] * t->ne[2] * t->ne[3];
    r.w = malloc(sizeof(float) * r.rows * r.cols);
    size_t rb = hx_row_size(t->type, r.cols);
    for (int64_t i = 0; i < r.rows; i++)
        hx_dequantize_row(t->type, (const uint8_t *)t->data + i * rb, r.w + i * r.cols, r.cols);
    return r;
}

static ref_model *ref_new(const hx_model *m, int n_ctx) {
    const hx_model_config *c = &m->cfg;
    ref_model *r = calloc(1, sizeof *r);
    r->m = m;
    r->n_ctx = n_ctx;
    r->tok_embd = ref_mat_of(&m->tok_embd);
    r->output_norm = ref_mat_of(&m->output_norm);
    r->output = m->output.data == m->tok_embd.data ? r->tok_embd : ref_mat_of(&m->output);
    r->layers = calloc(c->n_layer, sizeof(ref_layer));
    for (int l = 0; l < c->n_layer; l++) {
        const hx_layer_weights *L = &m->layers[l];
        ref_layer *R = &r->layers[l];
        R->attn_norm = ref_mat_of(&L->attn_norm);
        R->wq = ref_mat_of(&L->wq); R->wk = ref_mat_of(&L->wk); R->wv = ref_mat_of(&L->wv); R->wo = ref_mat_of(&L->wo);
        R->bq = ref_mat_of(&L->bq); R->bk = ref_mat_of(&L->bk); R->bv = ref_mat_of(&L->bv); R->bo = ref_mat_of(&L->bo);
        R->q_norm = ref_mat_of(&L->q_norm); R->k_norm = ref_mat_of(&L->k_norm);
        R->attn_post_norm = ref_mat_of(&L->attn_post_norm);
        R->ffn_norm = ref_mat_of(&L->ffn_norm);
        R->ffn_gate = ref_mat_of(&L->ffn_gate); R->ffn_up = ref_mat_of(&L->ffn_up); R->ffn_down = ref_mat_of(&L->ffn_down);
        R->ffn_post_norm = ref_mat_of(&L->ffn_post_norm);
    }
    size_t kv = (size_t)c->n_layer * n_ctx * c->n_head_kv * c->head_dim;
    r->kc = calloc(kv, sizeof(double));
    r->vc = calloc(kv, sizeof(double));
    return r;
}

static void ref_free(ref_model *r) {
    if (!r) return;
    const hx_model_config *c = &r->m->cfg;
    if (r->output.w != r->tok_embd.w) free(r->output.w);
    free(r->tok_embd.w); free(r->output_norm.w);
    for (int l = 0; l < c->n_layer; l++) {
        ref_mat *mats = (ref_mat *)&r->layers[l];
        for (size_t i = 0; i < sizeof(ref_layer) / sizeof(ref_mat); i++) free(mats[i].w);
    }
    free(r->layers); free(r->kc); free(r->vc); free(r);
}

/* y (rows) = W x (cols) [+ b] */
static void ref_linear(const ref_mat *W, const double *x, double *y, const ref_mat *b) {
    for (int64_t i = 0; i < W->rows; i++) {
        double s = 0;
        for (int64_t j = 0; j < W->cols; j++) s += (double)W->w[i * W->cols + j] * x[j];
        y[i] = s + (b && b->w ? b->w[i] : 0.0);
    }
}

static void ref_rmsnorm(double *x, int n, const ref_mat *w, double eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++) x[i] = x[i] * s * w->w[i];
}

static void ref_rope(double *v, int hd, double pos, double base, hx_rope_style style) {
    for (int i = 0; i < hd / 2; i++) {
        double th = pos / pow(base, 2.0 * i / hd);
        int a = style == HX_ROPE_NORM ? 2 * i : i, b = style == HX_ROPE_NORM ? 2 * i + 1 : i + hd / 2;
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * cos(th) - x1 * sin(th);
        v[b] = x0 * sin(th) + x1 * cos(th);
    }
}

/* What a caller may add to a step (all optional; ref_step passes none):
 * delta(u, idx, x, y) adds to y the output of an extra product of matrix idx
 * (layer * 7 + slot, slots q k v o gate up down; -1 the output head) on its
 * input x, as LoRA adapters do; embd(u, token, x) adds to the token's
 * embedding row before the embedding scale; probs ((n_layer, n_head, T, T),
 * row pos of every (layer, head)) and qout ((n_layer, T, n_head, head_dim),
 * after RoPE) record the step's attention; logits64 (n_vocab doubles) gets the
 * logits unrounded. */
typedef struct ref_hooks {
    void *u;
    void (*delta)(void *u, int idx, const double *x, double *y);
    void (*embd)(void *u, int32_t token, double *x);
    int T;
    double *probs, *qout, *logits64;
} ref_hooks;

/* Run one token at position r->pos; logits (n_vocab floats) may be NULL.
 * Returns -1 when the cache is full. */
static int ref_step_ex(ref_model *r, int32_t token, float *logits, const ref_hooks *hk) {
    const hx_model_config *c = &r->m->cfg;
    if (r->pos >= r->n_ctx) return -1;
    int D = c->n_embd, hd = c->head_dim, nh = c->n_head, nkv = c->n_head_kv, F = c->n_ff, T = hk ? hk->T : 0;
    int p = r->pos;
    double *x = calloc(D, sizeof(double)), *h = calloc(D, sizeof(double));
    double *q = calloc((size_t)nh * hd, sizeof(double)), *k = calloc((size_t)nkv * hd, sizeof(double));
    double *v = calloc((size_t)nkv * hd, sizeof(double)), *a = calloc((size_t)nh * hd, sizeof(double));
    double *g = calloc(F, sizeof(double)), *u = calloc(F, sizeof(double)), *o = calloc(D, sizeof(double));
    double *sc = calloc(r->n_ctx, sizeof(double));
    for (int i = 0; i < D; i++) x[i] = r->tok_embd.w[(size_t)token * D + i];
    if (hk && hk->embd) hk->embd(hk->u, token, x);
    if (c->embd_scale)
        for (int i = 0; i < D; i++) x[i] *= sqrt((double)D);
    /* y += the caller's extra product of matrix idx on x */
#define REF_DELTA(idx, x, y) do { if (hk && hk->delta) hk->delta(hk->u, (idx), (x), (y)); } while (0)
    double scale = c->attn_scale > 0 ? c->attn_scale : 1.0 / sqrt((double)hd);
    for (int l = 0; l < c->n_layer; l++) {
        const ref_layer *L = &r->layers[l];
        memcpy(h, x, sizeof(double) * D);
        ref_rmsnorm(h, D, &L->attn_norm, c->norm_eps);
        ref_linear(&L->wq, h, q, &L->bq);
        ref_linear(&L->wk, h, k, &L->bk);
        ref_linear(&L->wv, h, v, &L->bv);
        REF_DELTA(l * 7 + 0, h, q);
        REF_DELTA(l * 7 + 1, h, k);
        REF_DELTA(l * 7 + 2, h, v);
        bool swa = c->layer_is_swa[l];
        double base = swa ? c->rope_base_swa : c->rope_base;
        double pp = p / (c->rope_scale > 0 ? c->rope_scale : 1.0);
        for (int hh = 0; hh < nh; hh++) {
            if (c->qk_norm) ref_rmsnorm(q + hh * hd, hd, &L->q_norm, c->norm_eps);
            ref_rope(q + hh * hd, hd, pp, base, c->rope_style);
        }
        for (int hh = 0; hh < nkv; hh++) {
            if (c->qk_norm) ref_rmsnorm(k + hh * hd, hd, &L->k_norm, c->norm_eps);
            ref_rope(k + hh * hd, hd, pp, base, c->rope_style);
        }
        if (hk && hk->qout) memcpy(hk->qout + ((size_t)l * T + p) * nh * hd, q, sizeof(double) * nh * hd);
        double *kc = r->kc + ((size_t)l * r->n_ctx) * nkv * hd, *vc = r->vc + ((size_t)l * r->n_ctx) * nkv * hd;
        memcpy(kc + (size_t)p * nkv * hd, k, sizeof(double) * nkv * hd);
        memcpy(vc + (size_t)p * nkv * hd, v, sizeof(double) * nkv * hd);
        int first = swa && c->sliding_window > 0 && p - c->sliding_window + 1 > 0 ? p - c->sliding_window + 1 : 0;
        for (int hh = 0; hh < nh; hh++) {
            int kh = hh / (nh / nkv);
            double mx = -INFINITY, sum = 0;
            for (int t = first; t <= p; t++) {
                double s = 0;
                for (int d = 0; d < hd; d++) s += q[hh * hd + d] * kc[((size_t)t * nkv + kh) * hd + d];
                s *= scale;
                if (c->attn_logit_softcap > 0) s = c->attn_logit_softcap * tanh(s / c->attn_logit_softcap);
                sc[t] = s;
                if (s > mx) mx = s;
            }
            for (int t = first; t <= p; t++) { sc[t] = exp(sc[t] - mx); sum += sc[t]; }
            if (hk && hk->probs) {
                double *prow = hk->probs + (((size_t)l * nh + hh) * T + p) * T;
                for (int t = first; t <= p; t++) prow[t] = sc[t] / sum;
            }
            for (int d = 0; d < hd; d++) {
                double acc = 0;
                for (int t = first; t <= p; t++) acc += sc[t] / sum * vc[((size_t)t * nkv + kh) * hd + d];
                a[hh * hd + d] = acc;
            }
        }
        ref_linear(&L->wo, a, o, &L->bo);
        REF_DELTA(l * 7 + 3, a, o);
        if (c->post_norms) ref_rmsnorm(o, D, &L->attn_post_norm, c->norm_eps);
        for (int i = 0; i < D; i++) x[i] += o[i];
        memcpy(h, x, sizeof(double) * D);
        ref_rmsnorm(h, D, &L->ffn_norm, c->norm_eps);
        ref_linear(&L->ffn_gate, h, g, NULL);
        ref_linear(&L->ffn_up, h, u, NULL);
        REF_DELTA(l * 7 + 4, h, g);
        REF_DELTA(l * 7 + 5, h, u);
        for (int i = 0; i < F; i++) {
            double z = g[i];
            double act = c->act == HX_ACT_SILU ? z / (1.0 + exp(-z))
                       : 0.5 * z * (1.0 + tanh(sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
            g[i] = act * u[i];
        }
        ref_linear(&L->ffn_down, g, o, NULL);
        REF_DELTA(l * 7 + 6, g, o);
        if (c->post_norms) ref_rmsnorm(o, D, &L->ffn_post_norm, c->norm_eps);
        for (int i = 0; i < D; i++) x[i] += o[i];
    }
    r->pos++;
    if (logits || (hk && hk->logits64)) {
        ref_rmsnorm(x, D, &r->output_norm, c->norm_eps);
        double *lg = calloc((size_t)r->output.rows, sizeof(double));
        for (int64_t i = 0; i < r->output.rows; i++) {
            double s = 0;
            for (int j = 0; j < D; j++) s += (double)r->output.w[i * D + j] * x[j];
            lg[i] = s;
        }
        REF_DELTA(-1, x, lg);
        for (int64_t i = 0; i < r->output.rows; i++) {
            double s = lg[i];
            if (c->final_logit_softcap > 0) s = c->final_logit_softcap * tanh(s / c->final_logit_softcap);
            if (logits) logits[i] = (float)s;
            if (hk && hk->logits64) hk->logits64[i] = s;
        }
        free(lg);
    }
#undef REF_DELTA
    free(x); free(h); free(q); free(k); free(v); free(a); free(g); free(u); free(o); free(sc);
    return 0;
}

static int ref_step(ref_model *r, int32_t token, float *logits) { return ref_step_ex(r, token, logits, NULL); }

#endif
