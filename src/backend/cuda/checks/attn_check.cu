// attn_check.cu — the decode attention kernel alone, for gpu-test:
// hx_cuda_attn_decode_check uploads one token's q, k, v and a KV cache, runs
// hx_k_attn_decode once as the decoder does (same launcher, so the same kernel
// choice, given by the case's dev options) and copies back everything the
// step wrote. hx_cuda_attn_prefill_check does the same for the prefill
// attention (hx_k_attention, n queries over a filled cache).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#include "backend/cuda/checks/checks.h"
#include "backend/cuda/check.cuh"
#include "backend/cuda/kernels.cuh"
extern "C" {
#include "core/core.h"
}

namespace {
// The device buffers and the stream of one check, released together on every return.
struct check_res {
    std::vector<void *> bufs;
    cudaStream_t st = NULL;
    ~check_res() {
        for (void *p : bufs) cudaFree(p);
        if (st) cudaStreamDestroy(st);
    }
    // count elements of T (at least one), filled with the byte `fill`
    template <typename T> cudaError_t alloc(T **p, size_t count, int fill) {
        *p = NULL;
        size_t bytes = sizeof(T) * (count ? count : 1);
        cudaError_t rc = cudaMalloc((void **)p, bytes);
        if (rc != cudaSuccess) return rc;
        bufs.push_back(*p);
        return cudaMemset(*p, fill, bytes);
    }
    // the same, holding a copy of host[0..count)
    template <typename T> cudaError_t upload(T **p, const T *host, size_t count) {
        cudaError_t rc = alloc(p, count, 0);
        return rc == cudaSuccess ? cudaMemcpy(*p, host, sizeof(T) * count, cudaMemcpyHostToDevice) : rc;
    }
};
}

extern "C" hx_status hx_cuda_attn_decode_check(const hx_cuda_attn_case *c, const float *q, const float *k,
                                               const float *v, uint16_t *kc, uint16_t *vc, float *out, int8_t *xq,
                                               float *xd, int *splits, hx_error *e) {
    if (!c || !q || !k || !v || !kc || !vc || !out || (!xq) != (!xd))
        return hx_err(e, HX_ERR_ARG, "cuda: attn check: missing input or output (xq and xd go together)");
    const int nh = c->n_head, nkvh = c->n_head_kv, hd = c->head_dim, p = c->pos;
    if (nh < 1 || nkvh < 1 || nh % nkvh || hd < 2 || hd % 2 || c->rows < 1 || p < 0 || p >= c->max_ctx ||
        c->window < 0)
        return hx_err(e, HX_ERR_ARG, "cuda: attn check: bad case (heads %d/%d, head_dim %d, rows %d, pos %d, max_ctx %d, "
                      "window %d)", nh, nkvh, hd, c->rows, p, c->max_ctx, c->window);
    int visible = c->window > 0 && c->window < p + 1 ? c->window : p + 1;
    if (visible > c->rows)
        return hx_err(e, HX_ERR_ARG, "cuda: attn check: %d cache rows cannot hold the %d visible positions", c->rows,
                      visible);
    if (xq && hd % 32)
        return hx_err(e, HX_ERR_ARG, "cuda: attn check: xq needs head_dim a multiple of 32 (%d)", hd);
    CK(hx_k_pdl_init(!(c->dev && c->dev->no_pdl), NULL)); // as the decoder launches it

    const size_t nq = (size_t)nh * hd, nkv = (size_t)nkvh * hd, ncache = (size_t)c->rows * nkv;
    const int nsplit = hx_k_attn_decode_splits(c->max_ctx, c->dev), half = hd / 2;
    check_res R;
    CK(cudaStreamCreate(&R.st));
    float *dq, *dk, *dv, *dout, *dxd = NULL, *dpart, *dqn = NULL, *dkn = NULL;
    uint16_t *dkc, *dvc;
    int8_t *dxq = NULL;
    int *dpos;
    unsigned *dcount;
    float2 *dtab = NULL;
    CK(R.upload(&dq, q, nq));
    CK(R.upload(&dk, k, nkv));
    CK(R.upload(&dv, v, nkv));
    CK(R.upload(&dkc, (const uint16_t *)kc, ncache));
    CK(R.upload(&dvc, (const uint16_t *)vc, ncache));
    CK(R.upload(&dpos, &p, 1));
    if (c->q_norm) CK(R.upload(&dqn, c->q_norm, hd));
    if (c->k_norm) CK(R.upload(&dkn, c->k_norm, hd));
    if (c->rope_tab) { // rope_table() of forward.cu, but only row p: a read of another row gives NaN
        std::vector<float2> t((size_t)c->max_ctx * half, make_float2(NAN, NAN));
        float rs = c->rope_scale > 0 ? c->rope_scale : 1.0f;
        for (int j = 0; j < half; j++) t[(size_t)p * half + j] = hx_rope_cs(p, j, hd, c->rope_base, rs);
        CK(R.upload(&dtab, t.data(), t.size()));
    }
    // outputs poisoned: out and xd NaN, xq -128 (never produced: |q| <= 127)
    CK(R.alloc(&dout, nq, 0xff));
    if (xq) CK(R.alloc(&dxq, nq, 0x80));
    if (xq) CK(R.alloc(&dxd, nq / 32, 0xff));
    CK(R.alloc(&dpart, (size_t)nh * nsplit * (hd + 2), 0xff));
    CK(R.alloc(&dcount, nh, 0)); // zeroed once, as the decoder does; each step must leave them zero

    CK(hx_k_attn_decode(R.st, dq, dk, dv, (__half *)dkc, (__half *)dvc, c->rows, dout, dpos, nh, nkvh, hd, c->scale,
                        c->softcap, c->window, c->max_ctx, c->rope_base, c->rope_scale > 0 ? c->rope_scale : 1.0f,
                        c->neox, dqn, dkn, c->eps, dtab, dpart, dcount, dxq, dxd, c->dev));
    CK(cudaStreamSynchronize(R.st));

    CK(cudaMemcpy(out, dout, sizeof(float) * nq, cudaMemcpyDeviceToHost));
    if (xq) CK(cudaMemcpy(xq, dxq, nq, cudaMemcpyDeviceToHost));
    if (xq) CK(cudaMemcpy(xd, dxd, sizeof(float) * (nq / 32), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(kc, dkc, sizeof(uint16_t) * ncache, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(vc, dvc, sizeof(uint16_t) * ncache, cudaMemcpyDeviceToHost));
    std::vector<unsigned> count(nh);
    CK(cudaMemcpy(count.data(), dcount, sizeof(unsigned) * nh, cudaMemcpyDeviceToHost));
    if (splits) *splits = nsplit;
    for (int h = 0; h < nh; h++)
        if (count[h])
            return hx_err(e, HX_ERR_DEVICE, "cuda: attn check: head %d's split counter is %u after the step, not 0", h,
                          count[h]);
    return HX_OK;
}

// The prefill attention alone: q, the caches and pos0 uploaded, out poisoned,
// one hx_k_attention on a stream (the shared-memory attribute of the
// per-query kernel set first, as hx_cuda_ctx_new does), out copied back.
extern "C" hx_status hx_cuda_attn_prefill_check(const hx_cuda_attn_case *c, int n, const float *q,
                                                const uint16_t *kc, const uint16_t *vc, float *out, hx_error *e) {
    if (!c || !q || !kc || !vc || !out)
        return hx_err(e, HX_ERR_ARG, "cuda: attn prefill check: missing input or output");
    const int nh = c->n_head, nkvh = c->n_head_kv, hd = c->head_dim, p0 = c->pos;
    if (n < 1 || nh < 1 || nkvh < 1 || nh % nkvh || hd < 2 || hd % 2 || c->rows < 1 || p0 < 0 ||
        (long long)p0 + n > c->max_ctx || c->window < 0)
        return hx_err(e, HX_ERR_ARG, "cuda: attn prefill check: bad case (n %d, heads %d/%d, head_dim %d, rows %d, "
                      "pos %d, max_ctx %d, window %d)", n, nh, nkvh, hd, c->rows, p0, c->max_ctx, c->window);
    // the positions the batch reads, first..p0 + n - 1, must be rows of their own
    int first = hx_att_first(p0, c->window);
    if (p0 + n - first > c->rows)
        return hx_err(e, HX_ERR_ARG, "cuda: attn prefill check: %d cache rows cannot hold the %d positions the batch "
                      "sees", c->rows, p0 + n - first);
    CK(hx_k_pdl_init(!(c->dev && c->dev->no_pdl), NULL)); // as the forward launches it
    size_t smem = 0;
    CK(hx_k_attention_prepare(hd, c->max_ctx, &smem));

    const size_t nq = (size_t)n * nh * hd, ncache = (size_t)c->rows * nkvh * hd;
    check_res R;
    CK(cudaStreamCreate(&R.st));
    float *dq, *dout;
    uint16_t *dkc, *dvc;
    int *dpos;
    CK(R.upload(&dq, q, nq));
    CK(R.upload(&dkc, kc, ncache));
    CK(R.upload(&dvc, vc, ncache));
    CK(R.upload(&dpos, &p0, 1));
    CK(R.alloc(&dout, nq, 0xff)); // NaN
    CK(hx_k_attention(R.st, dq, (const __half *)dkc, (const __half *)dvc, c->rows, dout, dpos, n, nh, nkvh, hd,
                      c->scale, c->softcap, c->window, c->max_ctx, c->dev));
    CK(cudaStreamSynchronize(R.st));
    CK(cudaMemcpy(out, dout, sizeof(float) * nq, cudaMemcpyDeviceToHost));
    return HX_OK;
}
