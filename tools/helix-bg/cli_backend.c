/* cli_backend.c — the forward pass, cache truncation and a decode step on
 * whichever backend a command opened: the CUDA context gc when not NULL, else
 * the CPU context. */
#include "cli.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

hx_status cli_forward(hx_cpu_ctx *c, void *gc, const int32_t *t, int n, int pos, float *logits, bool all_logits,
                      hx_error *e) {
#ifdef HX_HAVE_CUDA
    if (gc) return hx_cuda_forward((hx_cuda_ctx *)gc, t, n, pos, logits, all_logits, e);
#else
    (void)gc;
#endif
    return hx_cpu_forward(c, t, n, pos, logits, all_logits, e);
}

int cli_truncate(hx_cpu_ctx *c, void *gc, int pos) {
#ifdef HX_HAVE_CUDA
    if (gc) return hx_cuda_truncate((hx_cuda_ctx *)gc, pos);
#else
    (void)gc;
#endif
    return hx_cpu_truncate(c, pos);
}

hx_status cli_decode_next(hx_cpu_ctx *c, void *gc, hx_sampler *smp, bool greedy, bool want_logits, int32_t t, int pos,
                          float *logits, int V, int32_t *next, hx_error *e) {
#ifdef HX_HAVE_CUDA
    if (gc && !want_logits && greedy) return hx_cuda_decode_greedy((hx_cuda_ctx *)gc, t, pos, next, e);
    const hx_sampler_params *pp = hx_sampler_get_params(smp);
    if (gc && !want_logits && pp->temp > 0) { /* the CPU's chain on the GPU, with the CPU sampler's own draw */
        const int32_t *hist;
        int nh = hx_sampler_history(smp, &hist);
        hx_cuda_sample_params gp = {pp->temp, pp->top_k, pp->top_p, pp->min_p,
                                    pp->penalty_last_n == 0 ? 1.0f : pp->repeat_penalty,
                                    pp->penalty_last_n == 0 ? 0.0f : pp->freq_penalty,
                                    pp->penalty_last_n == 0 ? 0.0f : pp->presence_penalty};
        if (hx_cuda_sample_supported(&gp, nh)) {
            float u = hx_sampler_draw(smp);
            bool on_gpu = false;
            hx_status s = hx_cuda_decode_sample((hx_cuda_ctx *)gc, t, pos, &gp, hist, nh, u, next, logits, &on_gpu, e);
            if (s) return s;
            if (!on_gpu) *next = hx_sampler_sample_u(smp, logits, u);
            return HX_OK;
        }
    }
#else
    (void)want_logits;
#endif
    hx_status s = cli_forward(c, gc, &t, 1, pos, logits, false, e);
    if (s) return s;
    *next = greedy ? hx_argmax(logits, V) : hx_sampler_sample(smp, logits);
    return HX_OK;
}
