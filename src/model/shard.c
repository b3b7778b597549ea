/* shard.c — tensor-parallel shares of a decoder's weights (shard.h). */
#include "model/shard.h"
#include "core/core.h"
#include "quant/quant.h"

#include <string.h>

int64_t hx_shard_rows(const hx_tensor *t) {
    int64_t r = t->ne[1] > 0 ? t->ne[1] : 1;
    for (int k = 2; k < 4; k++) r *= t->ne[k] > 0 ? t->ne[k] : 1;
    return r;
}

int64_t hx_shard_cut_rows(const hx_tensor *t, const hx_shard_cut *c) {
    return c->dim == HX_CUT_ROWS ? c->hi - c->lo : hx_shard_rows(t);
}

int64_t hx_shard_cut_cols(const hx_tensor *t, const hx_shard_cut *c) {
    return c->dim == HX_CUT_COLS ? c->hi - c->lo : t->ne[0];
}

size_t hx_shard_cut_row_bytes(const hx_tensor *t, const hx_shard_cut *c) {
    return hx_row_size(t->type, hx_shard_cut_cols(t, c));
}

void hx_shard_copy(const hx_tensor *t, const hx_shard_cut *c, int64_t r0, int64_t r1, void *dst) {
    size_t src_row = hx_row_size(t->type, t->ne[0]), dst_row = hx_shard_cut_row_bytes(t, c);
    const uint8_t *src = (const uint8_t *)t->data;
    if (c->dim != HX_CUT_COLS) { /* whole rows: one range */
        int64_t base = c->dim == HX_CUT_ROWS ? c->lo : 0;
        memcpy(dst, src + (size_t)(base + r0) * src_row, (size_t)(r1 - r0) * src_row);
        return;
    }
    size_t col0 = hx_row_size(t->type, c->lo);
    uint8_t *d = (uint8_t *)dst;
    for (int64_t r = r0; r < r1; r++) memcpy(d + (size_t)(r - r0) * dst_row, src + (size_t)r * src_row + col0, dst_row);
}

/* [rank * total / n, (rank + 1) * total / n) */
static hx_shard_cut part(hx_shard_dim dim, int64_t total, int n, int rank) {
    return (hx_shard_cut){dim, total / n * rank, total / n * (rank + 1)};
}

hx_shard hx_shard_make(const hx_model *m, int n, int rank) {
    const hx_model_config *c = &m->cfg;
    hx_shard s = {.n = n, .rank = rank, .n_head = c->n_head / n, .n_head_kv = c->n_head_kv / n, .n_ff = c->n_ff / n};
    s.q = part(HX_CUT_ROWS, (int64_t)c->n_head * c->head_dim, n, rank);
    s.kv = part(HX_CUT_ROWS, (int64_t)c->n_head_kv * c->head_dim, n, rank);
    s.o = part(HX_CUT_COLS, (int64_t)c->n_head * c->head_dim, n, rank);
    s.gate_up = part(HX_CUT_ROWS, c->n_ff, n, rank);
    s.down = part(HX_CUT_COLS, c->n_ff, n, rank);
    s.output = c->n_vocab % n == 0 ? part(HX_CUT_ROWS, c->n_vocab, n, rank) : (hx_shard_cut){HX_CUT_NONE, 0, 0};
    return s;
}

/* A column cut of t at every rank's first column: each must start a block. */
static hx_status check_cols(const hx_tensor *t, int64_t total, int n, int layer, hx_error *e) {
    const hx_type_info *ti = hx_type_get(t->type);
    if (!t->data || !ti) return hx_err(e, HX_ERR_FORMAT, "tensor parallel: layer %d: tensor '%s' missing or of an "
                                       "unknown type", layer, t->name ? t->name : "?");
    if (t->ne[0] != total)
        return hx_err(e, HX_ERR_FORMAT, "tensor parallel: '%s' has rows of %lld, expected %lld", t->name ? t->name : "?",
                      (long long)t->ne[0], (long long)total);
    if ((total / n) % ti->block_size != 0)
        return hx_err(e, HX_ERR_UNSUPPORTED, "tensor parallel %d: '%s' (%s) would be cut at column %lld, inside a "
                      "block of %d (try %s)", n, t->name ? t->name : "?", ti->name, (long long)(total / n),
                      ti->block_size, n > 2 ? "fewer GPUs" : "one GPU");
    return HX_OK;
}

hx_status hx_shard_check(const hx_model *m, int n, hx_error *e) {
    const hx_model_config *c = &m->cfg;
    if (n < 1 || n > HX_SHARD_MAX)
        return hx_err(e, HX_ERR_ARG, "tensor parallel %d: between 1 and %d GPUs", n, HX_SHARD_MAX);
    if (c->arch == HX_ARCH_BERT) return hx_err(e, HX_ERR_UNSUPPORTED, "tensor parallel: %s is an encoder", c->arch_name);
    if (n == 1) return HX_OK;
    if (c->n_head % n || c->n_head_kv % n || c->n_ff % n)
        return hx_err(e, HX_ERR_UNSUPPORTED, "tensor parallel %d: %d heads, %d KV heads and an FFN of %d are not all "
                      "divisible by %d", n, c->n_head, c->n_head_kv, c->n_ff, n);
    for (int l = 0; l < c->n_layer; l++) {
        const hx_layer_weights *W = &m->layers[l];
        hx_status s = check_cols(&W->wo, (int64_t)c->n_head * c->head_dim, n, l, e);
        if (!s) s = check_cols(&W->ffn_down, c->n_ff, n, l, e);
        if (s) return s;
    }
    return HX_OK;
}
