/* synth.h — random-weight GGUF models with the exact shapes of real ones.
 *
 * Presets describe real architectures; mixes say which type each tensor gets
 * (following llama.cpp's quantizer rules, so a q4_k_m file has Q6_K exactly
 * where llama-quantize would put it). Weights are N(0, sigma) with sigma chosen
 * so activations stay in a realistic range through every layer; each row is
 * generated from (seed, tensor, row) so output is identical for any thread
 * count. Tensor names and metadata keys are llama.cpp's. */
#ifndef HX_SYNTH_H
#define HX_SYNTH_H

#include "helix.h"
#include "model/model.h"

typedef struct hx_preset {
    const char *name;        /* "qwen3-0.6b" */
    hx_arch arch;
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    float rope_base, rope_base_swa, norm_eps;
    bool tied;
    int sliding_window;      /* gemma3 */
    const char *pre;         /* tokenizer.ggml.pre for a synthetic gpt2 tokenizer */
} hx_preset;

typedef enum hx_mix { HX_MIX_F32, HX_MIX_F16, HX_MIX_Q8_0, HX_MIX_Q4_0, HX_MIX_Q4_1, HX_MIX_Q4_K_M, HX_MIX_COUNT } hx_mix;

const hx_preset *hx_preset_find(const char *name);
const hx_preset *hx_preset_at(int i);  /* NULL past the end */
int hx_mix_from_name(const char *name); /* -1 if unknown */
const char *hx_mix_name(hx_mix m);

typedef struct hx_synth_opts {
    const hx_preset *preset;
    hx_mix mix;
    uint64_t seed;
    int n_layer;             /* 0 = preset's */
    int n_vocab;             /* 0 = preset's (tests shrink it); ignored with a tokenizer */
    const char *tokenizer;   /* NULL: synthetic; else a .gguf or tokenizer.json */
    int n_threads;           /* 0 = all CPUs */
    bool progress;           /* per-tensor progress on stderr */
} hx_synth_opts;

hx_status hx_synth_write(const hx_synth_opts *o, const char *out_path, hx_error *e);

/* The type llama.cpp's quantizer gives tensor `name` (with row length ne0) of
 * layer il (-1: not a layer tensor) in a model of n_layer layers. */
int hx_mix_tensor_type(hx_mix mix, const char *name, int64_t ne0, int il, int n_layer, bool tied);

#endif
