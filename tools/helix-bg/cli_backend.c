/* cli_backend.c — the forward pass and cache truncation on whichever backend a
 * command opened: the CUDA context gc when not NULL, else the CPU context. */
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
