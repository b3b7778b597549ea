/* shard.h — a decoder's weights cut into tensor-parallel shares (Megatron's
 * split, as vLLM and TensorRT-LLM do it).
 *
 * Rank r of n holds, in every layer:
 *   - attention heads [r H/n, (r+1) H/n) and KV heads [r K/n, (r+1) K/n): the
 *     rows of wq / wk / wv (and their biases) of those heads, so its q heads
 *     use its own KV heads (GQA groups never straddle ranks), and the columns
 *     of wo that read them;
 *   - FFN rows [r F/n, (r+1) F/n): those rows of gate / up (and up's bias)
 *     and those columns of down;
 *   - the output head's rows [r V/n, (r+1) V/n) when n divides the
 *     vocabulary (the logits are gathered), else the whole head.
 * Each rank's wo and down then give a partial sum of the layer's output:
 * one all-reduce after attention and one after the FFN make it whole. Norms,
 * QK-norms, the token embedding, and the biases of wo and down (added once,
 * by rank 0) are not cut.
 *
 * A cut by rows keeps whole rows (contiguous bytes); a cut by columns keeps
 * the same byte range of every row, so its first column must start a
 * quantization block (hx_shard_check says which tensor does not). */
#ifndef HX_MODEL_SHARD_H
#define HX_MODEL_SHARD_H

#include "model/model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HX_SHARD_MAX 8 /* most ranks */

typedef enum hx_shard_dim { HX_CUT_NONE, HX_CUT_ROWS, HX_CUT_COLS } hx_shard_dim;

/* Part of a 2-D tensor (rows = ne[1] * ne[2] * ne[3] of ne[0] elements). */
typedef struct hx_shard_cut {
    hx_shard_dim dim;
    int64_t lo, hi; /* rows or columns [lo, hi) */
} hx_shard_cut;

typedef struct hx_shard {
    int n, rank;
    int n_head, n_head_kv, n_ff;  /* this rank's share */
    hx_shard_cut q, kv, o;        /* wq (and bq) rows, wk / wv (bk / bv) rows, wo columns */
    hx_shard_cut gate_up, down;   /* gate / up (up_b) rows, down columns */
    hx_shard_cut output;          /* rows, or HX_CUT_NONE when n does not divide the vocabulary */
} hx_shard;

/* Whether m's decoder can be cut n ways: n in 1..HX_SHARD_MAX dividing the
 * heads, the KV heads and the FFN size, and every column cut starting a
 * quantization block of its tensor. HX_ERR_UNSUPPORTED naming the
 * count or tensor at fault. */
hx_status hx_shard_check(const hx_model *m, int n, hx_error *e);
/* Rank `rank`'s share (after hx_shard_check). */
hx_shard hx_shard_make(const hx_model *m, int n, int rank);

/* Rows of t, and of its cut. */
int64_t hx_shard_rows(const hx_tensor *t);
int64_t hx_shard_cut_rows(const hx_tensor *t, const hx_shard_cut *c);
/* Elements per row of the cut, and its bytes per row. */
int64_t hx_shard_cut_cols(const hx_tensor *t, const hx_shard_cut *c);
size_t hx_shard_cut_row_bytes(const hx_tensor *t, const hx_shard_cut *c);
/* Copies rows [r0, r1) of the cut (counted within the cut) to dst, back to
 * back (hx_shard_cut_row_bytes each): the tensor a rank holds, as stored. */
void hx_shard_copy(const hx_tensor *t, const hx_shard_cut *c, int64_t r0, int64_t r1, void *dst);

#ifdef __cplusplus
}
#endif
#endif
