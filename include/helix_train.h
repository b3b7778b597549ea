/* helix_train.h — LoRA fine-tuning of a frozen decoder on the CPU (llama / qwen2 /
 * qwen3 / gemma3, the recipe of backend/cpu/forward.c), in f32.
 *
 * Trained: a LoRA pair per adapted projection (q, k, v, o, gate, up, down of
 * every layer): W x becomes W x + s B (A x), s = alpha / rank, A (rank, n_in)
 * and B (n_out, rank) row-major f32 (the master weights), B starting at 0 and
 * A uniform in +-1/sqrt(n_in) as PEFT does. Everything else is frozen.
 *
 * The base: every matrix is dequantized once (any GGUF type) into two packed
 * f32 copies for the blocked sgemm (backend/cpu/sgemm.h), one for W x and one
 * for W^T dy, so the base costs 8 bytes per matrix parameter (the output head
 * included) plus its norm vectors; hx_trainer_base_bytes says how much.
 *
 * One call of hx_trainer_accumulate takes a packed batch: n tokens of one or
 * more sequences back to back, pos[i] the position of token i in its own
 * sequence (0 starts a new one), target[i] != 0 when token i is a completion
 * token the loss counts (predicted from token i - 1 of the same sequence).
 * Forward: embeddings -> layers (activations saved) -> output norm and head at
 * the predicting positions only -> cross-entropy. Backward through every
 * layer into the LoRA gradients, which accumulate across calls (gradient
 * accumulation) until hx_trainer_zero_grad. With checkpointing, only each
 * layer's input is kept and the layer is recomputed before its backward:
 * activation memory is then one layer's plus n_embd floats per token per
 * layer. */
#ifndef HELIX_TRAIN_H
#define HELIX_TRAIN_H

#include "helix.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hx_trainer hx_trainer;

typedef struct hx_train_opts {
    int rank;           /* LoRA rank, default 8 */
    float alpha;        /* s = alpha / rank (0: s = 1, as llama.cpp reads it); default 16 */
    unsigned slots;     /* projections adapted, bit 0..6 = q, k, v, o, gate, up, down; 0 = all seven */
    int n_threads;      /* 0 = all online CPUs */
    bool checkpoint;    /* recompute each layer in the backward instead of keeping its activations */
    uint64_t seed;      /* A's initialization */
} hx_train_opts;
hx_train_opts hx_train_default_opts(void);


typedef struct hx_adamw_opts {
    float beta1, beta2, eps;  /* 0.9, 0.999, 1e-8 */
    float weight_decay;       /* decoupled, 0.01 */
    float clip;               /* clip the global gradient norm to this; <= 0 = off; default 1 */
} hx_adamw_opts;
hx_adamw_opts hx_adamw_default_opts(void);

/* m is a decoder (HX_ERR_UNSUPPORTED for bert); o may be NULL (defaults). */
hx_status hx_trainer_new(const hx_model *m, const hx_train_opts *o, hx_trainer **out, hx_error *e);
void hx_trainer_free(hx_trainer *t);

/* Bytes the dequantized, packed base takes. */
size_t hx_trainer_base_bytes(const hx_trainer *t);
float hx_trainer_scale(const hx_trainer *t);

void hx_trainer_zero_grad(hx_trainer *t);
/* Forward and backward of one packed batch (see above); gradients of
 * weight * (sum of the target tokens' cross-entropies) are added. *loss_sum
 * gets that sum (unweighted), *n_targets the count; either may be NULL. */
hx_status hx_trainer_accumulate(hx_trainer *t, const int32_t *tok, const int32_t *pos, const uint8_t *target, int n,
                                float weight, double *loss_sum, int *n_targets, hx_error *e);
/* Forward only: logits (n, n_vocab) at every position, the LoRA applied. */
hx_status hx_trainer_logits(hx_trainer *t, const int32_t *tok, const int32_t *pos, int n, float *logits, hx_error *e);

/* Global L2 norm of the accumulated gradients. */
double hx_trainer_grad_norm(const hx_trainer *t);
/* One AdamW step at learning rate lr over every adapted matrix, after
 * clipping the gradients to o->clip by their global norm (returned, before
 * clipping). */
double hx_trainer_adamw_step(hx_trainer *t, const hx_adamw_opts *o, float lr);
/* Learning rate at step (0-based) of total: linear warm-up over `warmup`
 * steps to lr, then cosine decay to lr * min_ratio at the last step. */
float hx_train_lr_at(float lr, int step, int warmup, int total, float min_ratio);

/* The adapter as llama.cpp's GGUF LoRA adapter (adapter.lora.alpha = alpha,
 * tensors blk.L.<proj>.weight.lora_a / .lora_b, f32), atomically. */
hx_status hx_trainer_save(const hx_trainer *t, const char *path, hx_error *e);

#ifdef __cplusplus
}
#endif
#endif
