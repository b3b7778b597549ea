/* sampler.h — the sampling chain, in llama.cpp's default order:
 *   logit bias -> penalties (repeat / frequency / presence over the last N tokens)
 *   -> top-k -> top-p -> min-p -> temperature -> draw from a seeded RNG.
 * temp <= 0 means greedy (argmax after penalties). */
#ifndef HX_SAMPLER_H
#define HX_SAMPLER_H

#include "helix.h"
#include "core/core.h"

/* hx_sampler_params, hx_sampler_new/free/accept/reset/sample and hx_argmax are
 * public: helix.h. */

/* Whether the repeat / frequency / presence penalties change anything (a window and a non-neutral value). */
bool hx_sampler_penalizes(const hx_sampler_params *p);

/* Whether the chain has a logit bias (the GPU chain does not take one). */
bool hx_sampler_has_bias(const hx_sampler *s);
/* For a sampler running elsewhere (the GPU): the parameters, the penalty
 * window (hist_len tokens, ring order: only their counts matter), and the
 * uniform draw hx_sampler_sample would make next (advances the RNG the same
 * way; call it exactly when temp > 0). */
const hx_sampler_params *hx_sampler_get_params(const hx_sampler *s);
int hx_sampler_history(const hx_sampler *s, const int32_t **tokens);
float hx_sampler_draw(hx_sampler *s);
/* hx_sampler_sample with the uniform u already drawn (by hx_sampler_draw). */
int32_t hx_sampler_sample_u(hx_sampler *s, const float *logits, float u);
#endif
