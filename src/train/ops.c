/* ops.c — forward and backward of the decoder's operations (ops.h). */
#include "train/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- RMSNorm ---- */

void hx_tr_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t rows, int dim, float eps) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim;
        float *yr = y + r * dim;
        double ss = 0;
        for (int i = 0; i < dim; i++) ss += (double)xr[i] * xr[i];
        float s = (float)(1.0 / sqrt(ss / dim + eps));
        rstd[r] = s;
        for (int i = 0; i < dim; i++) yr[i] = xr[i] * s * w[i];
    }
}

void hx_tr_rmsnorm_bwd(float *dx, const float *dy, const float *x, const float *w, const float *rstd, int64_t rows,
                       int dim, int acc) {
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * dim, *dyr = dy + r * dim;
        float *dxr = dx + r * dim;
        double dot = 0;
        for (int i = 0; i < dim; i++) dot += (double)w[i] * dyr[i] * xr[i];
        float s = rstd[r];
        float c = (float)(dot * s * s * s / dim);
        for (int i = 0; i < dim; i++) {
            float g = s * w[i] * dyr[i] - xr[i] * c;
            dxr[i] = acc ? dxr[i] + g : g;
        }
    }
}

/* ---- RoPE ---- */

void hx_tr_rope(float *v, int n, int n_heads, int hd, const int32_t *pos, double base, double pos_scale,
                hx_rope_style style, int inverse) {
    int half = hd / 2;
    float cs[512], sn[512];
    for (int i = 0; i < n; i++) {
        double p = pos[i] / pos_scale;
        for (int j = 0; j < half && j < 512; j++) {
            double th = p * pow(base, -2.0 * j / hd);
            cs[j] = (float)cos(th);
            sn[j] = inverse ? -(float)sin(th) : (float)sin(th);
        }
        for (int h = 0; h < n_heads; h++) {
            float *x = v + ((size_t)i * n_heads + h) * hd;
            for (int j = 0; j < half; j++) {
                int a = style == HX_ROPE_NORM ? 2 * j : j;
                int b = style == HX_ROPE_NORM ? 2 * j + 1 : j + half;
                float x0 = x[a], x1 = x[b];
                x[a] = x0 * cs[j] - x1 * sn[j];
                x[b] = x0 * sn[j] + x1 * cs[j];
            }
        }
    }
}

/* ---- attention ---- */

static inline int attn_first(const hx_tr_attn *a, int i) {
    int lo = i - a->pos[i];
    if (a->window > 0 && i - a->window + 1 > lo) lo = i - a->window + 1;
    return lo;
}

void hx_tr_attn_rows(hx_tr_attn *a, int64_t *prow) {
    int64_t at = 0;
    for (int i = 0; i < a->n; i++) {
        prow[i] = at - attn_first(a, i); /* row i's element j at prow[i] + j */
        at += i - attn_first(a, i) + 1;
    }
    a->prow = prow;
    a->p_total = at;
}

static inline float dotf(const float *x, const float *y, int n) {
    float s = 0;
    for (int d = 0; d < n; d++) s += x[d] * y[d];
    return s;
}

typedef struct attn_ctx {
    const hx_tr_attn *a;
    const float *q, *k, *v, *P, *dout;
    float *Pw, *out, *dq, *dk, *dv;
    float *scratch; /* backward: (n_kv, n) */
} attn_ctx;

/* task = query head h: every token's row of P and its output. */
static void attn_fwd_task(void *ctx, int64_t h, int thread) {
    (void)thread;
    const attn_ctx *c = ctx;
    const hx_tr_attn *a = c->a;
    int n = a->n, hd = a->hd, nq = a->n_head * hd, nkv = a->n_kv * hd;
    int kvh = (int)h / (a->n_head / a->n_kv);
    for (int i = 0; i < n; i++) {
        const float *qi = c->q + (size_t)i * nq + h * hd;
        float *Pi = c->Pw + h * a->p_total + a->prow[i];
        int lo = attn_first(a, i);
        float mx = -INFINITY;
        for (int j = lo; j <= i; j++) {
            float z = a->scale * dotf(qi, c->k + (size_t)j * nkv + kvh * hd, hd);
            if (a->softcap > 0) z = a->softcap * tanhf(z / a->softcap);
            Pi[j] = z;
            if (z > mx) mx = z;
        }
        double sum = 0;
        for (int j = lo; j <= i; j++) { Pi[j] = expf(Pi[j] - mx); sum += Pi[j]; }
        float inv = (float)(1.0 / sum);
        float *oi = c->out + (size_t)i * nq + h * hd;
        memset(oi, 0, sizeof(float) * hd);
        for (int j = lo; j <= i; j++) {
            Pi[j] *= inv;
            const float *vj = c->v + (size_t)j * nkv + kvh * hd;
            for (int d = 0; d < hd; d++) oi[d] += Pi[j] * vj[d];
        }
    }
}

void hx_tr_attn_fwd(hx_pool *pool, const hx_tr_attn *a, const float *q, const float *k, const float *v, float *P,
                    float *out) {
    attn_ctx c = { .a = a, .q = q, .k = k, .v = v, .Pw = P, .out = out };
    hx_pool_run(pool, a->n_head, attn_fwd_task, &c);
}

/* task = kv head: its query heads' gradients, and its keys' and values' (which
 * only the query heads of this group touch, so tasks never write the same row). */
static void attn_bwd_task(void *ctx, int64_t kvh, int thread) {
    (void)thread;
    const attn_ctx *c = ctx;
    const hx_tr_attn *a = c->a;
    int n = a->n, hd = a->hd, nq = a->n_head * hd, nkv = a->n_kv * hd, grp = a->n_head / a->n_kv;
    float *dS = c->scratch + (size_t)kvh * n;
    for (int i = 0; i < n; i++) {
        float *dk = c->dk + (size_t)i * nkv + kvh * hd, *dv = c->dv + (size_t)i * nkv + kvh * hd;
        memset(dk, 0, sizeof(float) * hd);
        memset(dv, 0, sizeof(float) * hd);
    }
    for (int g = 0; g < grp; g++) {
        int h = (int)kvh * grp + g;
        for (int i = 0; i < n; i++) {
            const float *Pi = c->P + h * a->p_total + a->prow[i];
            const float *qi = c->q + (size_t)i * nq + h * hd, *doi = c->dout + (size_t)i * nq + h * hd;
            float *dqi = c->dq + (size_t)i * nq + h * hd;
            int lo = attn_first(a, i);
            double pd = 0;
            for (int j = lo; j <= i; j++) {
                const float *vj = c->v + (size_t)j * nkv + kvh * hd;
                float *dvj = c->dv + (size_t)j * nkv + kvh * hd;
                dS[j] = dotf(doi, vj, hd);          /* dP */
                pd += (double)Pi[j] * dS[j];
                for (int d = 0; d < hd; d++) dvj[d] += Pi[j] * doi[d];
            }
            memset(dqi, 0, sizeof(float) * hd);
            for (int j = lo; j <= i; j++) {
                const float *kj = c->k + (size_t)j * nkv + kvh * hd;
                float ds = Pi[j] * (dS[j] - (float)pd);
                if (a->softcap > 0) { /* s = c tanh(z/c): ds/dz = 1 - (s/c)^2, s recomputed */
                    float t = tanhf(a->scale * dotf(qi, kj, hd) / a->softcap);
                    ds *= 1.0f - t * t;
                }
                ds *= a->scale;
                float *dkj = c->dk + (size_t)j * nkv + kvh * hd;
                for (int d = 0; d < hd; d++) { dqi[d] += ds * kj[d]; dkj[d] += ds * qi[d]; }
            }
        }
    }
}

void hx_tr_attn_bwd(hx_pool *pool, const hx_tr_attn *a, const float *q, const float *k, const float *v,
                    const float *P, const float *dout, float *dq, float *dk, float *dv, float *scratch) {
    attn_ctx c = { .a = a, .q = q, .k = k, .v = v, .P = P, .dout = dout, .dq = dq, .dk = dk, .dv = dv,
                   .scratch = scratch };
    hx_pool_run(pool, a->n_kv, attn_bwd_task, &c);
}

/* ---- gated units ---- */

static const float GELU_C = 0.7978845608028654f; /* sqrt(2/pi) */

static inline float act_fwd(float x, hx_act act) {
    if (act == HX_ACT_SILU) return x / (1.0f + expf(-x));
    if (act == HX_ACT_GELU_ERF) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    return 0.5f * x * (1.0f + tanhf(GELU_C * (x + 0.044715f * x * x * x)));
}

static inline float act_grad(float x, hx_act act) {
    if (act == HX_ACT_SILU) {
        float s = 1.0f / (1.0f + expf(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    if (act == HX_ACT_GELU_ERF)
        return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) + x * 0.3989422804014327f * expf(-0.5f * x * x);
    float u = GELU_C * (x + 0.044715f * x * x * x), t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_C * (1.0f + 3.0f * 0.044715f * x * x);
}

void hx_tr_glu_fwd(float *out, const float *g, const float *u, size_t n, hx_act act) {
    for (size_t i = 0; i < n; i++) out[i] = act_fwd(g[i], act) * u[i];
}

void hx_tr_glu_bwd(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n, hx_act act) {
    for (size_t i = 0; i < n; i++) {
        float d = dout[i];
        float gu = act_grad(g[i], act) * u[i], ag = act_fwd(g[i], act);
        dg[i] = d * gu;
        du[i] = d * ag;
    }
}

/* ---- loss ---- */

double hx_tr_xent(const float *logits, int n_vocab, int32_t target, float softcap, float weight, float *dlogits) {
    float mx = -INFINITY;
    for (int v = 0; v < n_vocab; v++) {
        float z = softcap > 0 ? softcap * tanhf(logits[v] / softcap) : logits[v];
        if (z > mx) mx = z;
    }
    double sum = 0;
    for (int v = 0; v < n_vocab; v++) {
        float z = softcap > 0 ? softcap * tanhf(logits[v] / softcap) : logits[v];
        sum += exp((double)z - mx);
    }
    float zt = softcap > 0 ? softcap * tanhf(logits[target] / softcap) : logits[target];
    double loss = log(sum) + mx - zt;
    if (dlogits) {
        for (int v = 0; v < n_vocab; v++) {
            float t = softcap > 0 ? tanhf(logits[v] / softcap) : 0.0f;
            float z = softcap > 0 ? softcap * t : logits[v];
            float p = (float)(exp((double)z - mx) / sum) - (v == target ? 1.0f : 0.0f);
            dlogits[v] = weight * p * (softcap > 0 ? 1.0f - t * t : 1.0f);
        }
    }
    return loss;
}
