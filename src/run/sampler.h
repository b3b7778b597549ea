/* sampler.h — the sampling chain, in llama.cpp's default order:
 *   penalties (repeat / frequency / presence over the last N tokens)
 *   -> top-k -> top-p -> min-p -> temperature -> draw from a seeded RNG.
 * temp <= 0 means greedy (argmax after penalties). */
#ifndef HX_SAMPLER_H
#define HX_SAMPLER_H

#include "helix.h"
#include "core/core.h"

typedef struct hx_sampler_params {
    float temp;             /* <= 0: greedy */
    int   top_k;            /* <= 0: off */
    float top_p;            /* >= 1: off */
    float min_p;            /* <= 0: off */
    float repeat_penalty;   /* 1: off */
    float freq_penalty;     /* 0: off */
    float presence_penalty; /* 0: off */
    int   penalty_last_n;   /* window of recent tokens the penalties look at; 0: off, -1: all */
    uint64_t seed;
} hx_sampler_params;

/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, penalties off, last_n 64. */
hx_sampler_params hx_sampler_defaults(void);
/* Whether the repeat / frequency / presence penalties change anything (a window and a non-neutral value). */
bool hx_sampler_penalizes(const hx_sampler_params *p);

typedef struct hx_sampler hx_sampler;
hx_sampler *hx_sampler_new(const hx_sampler_params *p, int n_vocab);
void hx_sampler_free(hx_sampler *s);
/* Record a token (prompt or generated) in the penalty history. */
void hx_sampler_accept(hx_sampler *s, int32_t token);
void hx_sampler_reset(hx_sampler *s);
/* Pick the next token from logits[n_vocab]. logits is left unchanged. */
int32_t hx_sampler_sample(hx_sampler *s, const float *logits);
/* For a sampler running elsewhere (the GPU): the parameters, the penalty
 * window (hist_len tokens, ring order: only their counts matter), and the
 * uniform draw hx_sampler_sample would make next (advances the RNG the same
 * way; call it exactly when temp > 0). */
const hx_sampler_params *hx_sampler_get_params(const hx_sampler *s);
int hx_sampler_history(const hx_sampler *s, const int32_t **tokens);
float hx_sampler_draw(hx_sampler *s);
/* hx_sampler_sample with the uniform u already drawn (by hx_sampler_draw). */
int32_t hx_sampler_sample_u(hx_sampler *s, const float *logits, float u);
/* Plain argmax (lowest id wins ties). */
int32_t hx_argmax(const float *x, int n);

#endif
