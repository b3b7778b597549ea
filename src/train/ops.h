/* ops.h — the decoder recipe's operations for training: each forward with the
 * backward that turns the gradient of its output into the gradient of its
 * input, in f32 (sums in double where a row is reduced). train.c chains them;
 * test_train.c checks every backward against central finite differences.
 *
 * Layout: row-major, one row per token (or per (token, head) for the per-head
 * ops). Positions: pos[i] is token i's position in its own sequence; a batch
 * packs several sequences back to back, each starting at position 0, so token
 * i's sequence starts at index i - pos[i]. */
#ifndef HX_TRAIN_OPS_H
#define HX_TRAIN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/pool.h"
#include "model/model.h"

/* y = x * rstd * w per row of dim; rstd[r] = 1 / sqrt(mean(x_r^2) + eps) is kept for
 * the backward. y may alias x. */
void hx_tr_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t rows, int dim, float eps);
/* dx (=, or += when acc) from dy, the forward's input x and its rstd:
 * dx = rstd * (w*dy) - x * rstd^3 / dim * sum(w*dy*x). dx may alias dy when !acc. */
void hx_tr_rmsnorm_bwd(float *dx, const float *dy, const float *x, const float *w, const float *rstd, int64_t rows,
                       int dim, int acc);

/* RoPE over v (n tokens, n_heads heads of hd), token i at pos[i] / pos_scale, angles
 * pos * base^(-2j/hd); NORM rotates pairs (2j, 2j+1), NEOX pairs (j, j + hd/2).
 * inverse: rotate by -angle (the backward: a rotation's transpose). */
void hx_tr_rope(float *v, int n, int n_heads, int hd, const int32_t *pos, double base, double pos_scale,
                hx_rope_style style, int inverse);

/* Causal attention over packed sequences with GQA and an optional sliding
 * window (token i sees j in [max(i - pos[i], i - window + 1), i]; window 0 =
 * full) and logit softcap (0 = off):
 *   z = scale * q_i . k_j, s = softcap ? c*tanh(z/c) : z, P_i = softmax(s), out_i = P_i V.
 * q, out (n, n_head*hd); k, v (n, n_kv*hd). P keeps the probabilities for
 * the backward, only the visible ones: head h's row i (keys first_i .. i) at
 * P + h * p_total + prow[i] (hx_tr_attn_rows lays them out), so packed short
 * sequences take the sum of their triangles, not n^2. */
typedef struct hx_tr_attn {
    int n, n_head, n_kv, hd, window;
    float scale, softcap;
    const int32_t *pos;
    const int64_t *prow;  /* (n) */
    int64_t p_total;      /* floats of P per head */
} hx_tr_attn;
/* Fills prow (n) and p_total for a's positions and window. */
void hx_tr_attn_rows(hx_tr_attn *a, int64_t *prow);
void hx_tr_attn_fwd(hx_pool *pool, const hx_tr_attn *a, const float *q, const float *k, const float *v, float *P,
                    float *out);
/* dq, dk, dv (overwritten) from dout, with the forward's q, k, v and P;
 * scratch holds n_kv * n floats. */
void hx_tr_attn_bwd(hx_pool *pool, const hx_tr_attn *a, const float *q, const float *k, const float *v,
                    const float *P, const float *dout, float *dq, float *dk, float *dv, float *scratch);

/* Gated unit: out = act(g) * u over n elements; the backward writes dg, du. */
void hx_tr_glu_fwd(float *out, const float *g, const float *u, size_t n, hx_act act);
void hx_tr_glu_bwd(float *dg, float *du, const float *dout, const float *g, const float *u, size_t n, hx_act act);

/* Cross-entropy of one row of logits (n_vocab) against target, with the final
 * softcap (0 = off) applied to the logits first. Returns the loss; when dlogits
 * is not NULL it gets weight * d(loss)/d(logits) (logits before the softcap).
 * logits may alias dlogits. */
double hx_tr_xent(const float *logits, int n_vocab, int32_t target, float softcap, float weight, float *dlogits);

#endif
