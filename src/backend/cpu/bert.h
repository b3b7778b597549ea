/* bert.h — the BERT encoder on the CPU (all-MiniLM-L6-v2 and friends).
 *
 * Recipe (post-norm, llama.cpp's `bert` GGUF layout):
 *   x = LN(tok_embd[id] + pos_embd[pos] + type_embd[0])
 *   per layer: a = Wo·softmax(QK^T/sqrt(d))V + bo      (bidirectional, per sequence)
 *              x = LN(x + a);  x = LN(x + W_down·gelu(W_up·x + b_up) + b_down)
 *   pooling: mean over the sequence's tokens (default), CLS, or none; then L2.
 * A batch of sequences is run as one set of matrix products over all their
 * tokens concatenated, with attention kept inside each sequence, so there is
 * no padding to waste work on.
 * Products: with prepared weights (hx_bert_cpu) a register-tiled f32 GEMM with
 * bias / GELU / residual fused into its stores (or its int8 counterpart,
 * gemm_i8.h, with HX_BERT_INT8); without, hx_matmul's per-row
 * dot kernels over the stored type. Attention per (sequence, head) as two small
 * GEMMs around a vectorized softmax. */
#ifndef HX_CPU_BERT_H
#define HX_CPU_BERT_H

#include "helix.h"
#include "core/pool.h"
#include "model/model.h"

typedef enum hx_pooling { HX_POOL_NONE = 0, HX_POOL_MEAN = 1, HX_POOL_CLS = 2 } hx_pooling;

/* Encode n_seq sequences. ids: all token ids concatenated; lens[i] = length of
 * sequence i (each 1..n_ctx_train). out: n_seq * n_embd floats for MEAN/CLS
 * (L2-normalized when normalize), or sum(lens) * n_embd for NONE. */
hx_status hx_bert_encode(const hx_model *m, hx_pool *pool, const int32_t *ids, const int *lens, int n_seq,
                         hx_pooling pooling, bool normalize, float *out, hx_error *e);

/* The weights prepared for the blocked f32 GEMM (sgemm.h): every layer's
 * matrices dequantized to f32 once and packed into panels (q, k and v
 * stacked into one product), biases and norms as f32. Costs the f32 size of
 * the layer weights (42 MiB for MiniLM-L6). *out = NULL, HX_OK when the model
 * is too big for that (> 2 GiB of f32): use hx_bert_encode then. */
typedef struct hx_bert_cpu hx_bert_cpu;
hx_status hx_bert_cpu_new(const hx_model *m, hx_bert_cpu **out, hx_error *e);
/* The linear layers' number type: f32 (above), or int8 (gemm_i8.h): weights
 * int8 per output row (quantized once here, a quarter of the f32 size), each
 * product's input quantized to uint8 per token; attention (QK^T, softmax, PV),
 * LayerNorm, GELU, residuals and pooling stay f32. Fastest with AVX512-VNNI. */
typedef enum hx_bert_type { HX_BERT_F32 = 0, HX_BERT_INT8 = 1 } hx_bert_type;
hx_status hx_bert_cpu_new_type(const hx_model *m, hx_bert_type type, hx_bert_cpu **out, hx_error *e);
void hx_bert_cpu_free(hx_bert_cpu *b);
/* hx_bert_encode with the prepared weights of m (prep from hx_bert_cpu_new(m); NULL = hx_bert_encode).
 * prep also keeps the activation buffers of the largest batch so far: one call at a time per prep. */
hx_status hx_bert_encode_prep(const hx_model *m, hx_bert_cpu *prep, hx_pool *pool, const int32_t *ids,
                              const int *lens, int n_seq, hx_pooling pooling, bool normalize, float *out, hx_error *e);

#endif
