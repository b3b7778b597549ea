/* lora.h — LoRA adapters bound to a base model: W x becomes
 * W x + s * B (A x), s = scale * alpha / rank (scale alone when alpha is 0,
 * as llama.cpp does).
 *
 * Sources: a llama.cpp GGUF adapter (general.type = adapter, adapter.type =
 * lora, adapter.lora.alpha; tensors "<base tensor>.lora_a" ne = [n_in, r] and
 * ".lora_b" ne = [r, n_out]; token_embd.weight's pair as llama.cpp keeps it:
 * lora_a ne = [r, n_vocab], lora_b ne = [r, n_embd]) or a PEFT folder
 * (adapter_config.json + adapter_model.safetensors, torch lora_A (r, in) and
 * lora_B (out, r); lora_embedding_A (r, vocab) / lora_embedding_B (embd, r)).
 *
 * Q/K rows: llama.cpp's converter permutes llama's Q/K rows (adjacent rotary
 * pairs) and its adapter converter permutes lora_b's rows the same way; helix
 * runs a llama loaded from a Hugging Face folder unpermuted (NEOX rope). The
 * loader brings B into the base's layout either way; the GGUF writer always
 * writes llama.cpp's layout. Everything is held as f32. */
#ifndef HX_MODEL_LORA_H
#define HX_MODEL_LORA_H

#include "model/model.h"

enum { HX_LORA_Q, HX_LORA_K, HX_LORA_V, HX_LORA_O, HX_LORA_GATE, HX_LORA_UP, HX_LORA_DOWN, HX_LORA_PER_LAYER };

typedef struct hx_lora_w {
    int rank;          /* 0: the adapter leaves this matrix alone */
    int64_t n_in, n_out;
    float *a;          /* (rank, n_in) row-major; token_embd: (n_vocab, rank) */
    float *b;          /* (n_out, rank) row-major, in the base's row layout */
} hx_lora_w;

struct hx_adapter {
    const hx_model *m;
    char *path;
    float alpha;       /* 0: s = scale */
    int n_layer;
    hx_lora_w *w;      /* n_layer * HX_LORA_PER_LAYER */
    hx_lora_w output, tok_embd;
    int n_weights;     /* matrices adapted */
    int refs;          /* the handle and every context that applies it */
};

static inline float hx_lora_scale(const struct hx_adapter *a, const hx_lora_w *w, float scale) {
    return a->alpha != 0.0f ? scale * a->alpha / (float)w->rank : scale;
}
static inline hx_lora_w *hx_lora_at(const struct hx_adapter *a, int layer, int slot) {
    return &a->w[(size_t)layer * HX_LORA_PER_LAYER + slot];
}

/* path: a GGUF adapter file or a PEFT folder; shapes checked against m. */
hx_status hx_lora_load(const hx_model *m, const char *path, struct hx_adapter **out, hx_error *e);
/* Drops one reference; frees at zero. */
void hx_lora_release(struct hx_adapter *a);
/* Writes a in llama.cpp's GGUF adapter format (f32 tensors). */
hx_status hx_lora_write_gguf(const struct hx_adapter *a, const char *path, hx_error *e);
/* base (a GGUF file) with W += s_i * B_i A_i for every adapter, each adapted
 * matrix dequantized, summed in f32 and requantized to its type (to f32 when
 * f32_out); every other tensor and all metadata copied. */
hx_status hx_lora_merge(const char *base, const char *const *adapters, const float *scales, int n, bool f32_out,
                        const char *out, hx_error *e);

#endif
