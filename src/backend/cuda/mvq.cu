// mvq.cu — decode matvec with 8-bit activations and integer dot products.
//
// At batch 1 the float kernels of kernels.cu spend ~30 instructions per weight
// byte (unpack, convert, scale and a float FMA per element, plus float4 reads
// of the activations): the GPU runs out of issue slots long before it runs out
// of memory bandwidth. Here the activation vector is quantized once per use
// (k_quant_q8: optional RMSNorm, then blocks of 32 int8 with one float scale,
// like ggml's q8_1 and the CPU path's Q8_0), and the weights are dotted four
// at a time with dp4a, a few instructions per weight byte.
//
// Weight blocks are read in "units" (QD<T>::UNITS per block): lane k of a warp
// takes units k, k+32, ... of its row, so neighbouring lanes read neighbouring
// bytes. Numerics: the result differs from the float kernels by the 8-bit
// rounding of the activations (relative ~1e-3), as on the CPU.
#include <stdlib.h>
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/qblocks.cuh"
#include "backend/cuda/warp.cuh"
#include "backend/cuda/decode.cuh"

enum { Q_WARPS = 4 };

bool hx_k_mvq_supported(const hx_dmat *W) {
    switch (W->type) {
#define X(T) case T: return W->cols % QD<T>::QK == 0;
        HX_MVQ_TYPES(X)
#undef X
    default: return false;
    }
}

// xq/xd = q8(x * rsqrt(mean(x^2) + eps) * g) (no norm when g is NULL), one
// block; cols a multiple of 32.
__global__ void __launch_bounds__(1024) k_quant_q8(const float *__restrict__ x, const float *__restrict__ g, float eps,
                                                   int cols, int8_t *__restrict__ xq, float *__restrict__ xd) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    float scale = 1.0f;
    if (g) {
        float ss = 0.0f;
        for (int i = threadIdx.x; i < cols; i += blockDim.x) ss += x[i] * x[i];
        ss = warp_sum(ss);
        if (lane == 0) red[w] = ss;
        __syncthreads();
        ss = lane < nw ? red[lane] : 0.0f;
        scale = rsqrtf(warp_sum(ss) / cols + eps);
    }
    for (int gi = w; gi < cols / 32; gi += nw) {
        int i = gi * 32 + lane;
        float v = x[i] * scale;
        if (g) v *= g[i];
        float amax = warp_max(fabsf(v));
        float d = amax / 127.0f;
        xq[i] = (int8_t)(d > 0.0f ? __float2int_rn(v / d) : 0);
        if (lane == 0) xd[gi] = d;
    }
}

// A row per wpr warps (1, 2 or 4: more warps per row when there are few rows,
// so that enough loads are in flight); matrices as in k_mv_multi (up to 3
// stacked, or GLU: 0 = gate, 1 = up).
template <int T, bool GLU>
__global__ void __launch_bounds__(Q_WARPS * WARP)
k_mvq(hx_mv_set s, int cols, const int8_t *__restrict__ xq, const float *__restrict__ xd, int accumulate, int act,
      int wpr) {
    typedef QD<T> Q;
    __shared__ float part_sum[Q_WARPS][2];
    int lane = threadIdx.x, sub = threadIdx.y % wpr;
    int r = blockIdx.x * (Q_WARPS / wpr) + threadIdx.y / wpr;
    bool live = r < s.total_rows;
    int m = 0, row = live ? r : 0;
    if (!GLU) {
        if (s.count > 1 && row >= s.rows[0]) { row -= s.rows[0]; m = 1; }
        if (s.count > 2 && m == 1 && row >= s.rows[1]) { row -= s.rows[1]; m = 2; }
    }
    const uint8_t *wbase = m == 0 ? s.w[0] : m == 1 ? s.w[1] : s.w[2];
    size_t rb = m == 0 ? s.rb[0] : m == 1 ? s.rb[1] : s.rb[2];
    const uint8_t *w0 = wbase + (size_t)row * rb;
    const uint8_t *w1 = GLU ? s.w[1] + (size_t)row * s.rb[1] : NULL;
    pdl_trigger();
    if (live) { // weights never depend on the previous kernel: start their DRAM reads now
        for (size_t o = (size_t)(sub * WARP + lane) * 128; o < rb; o += (size_t)wpr * WARP * 128) {
            prefetch_l2(w0 + o);
            if (GLU) prefetch_l2(w1 + o);
        }
    }
    pdl_wait();
    float a0 = 0.0f, a1 = 0.0f;
    if (live) row_dot<T, GLU>(w0, w1, cols, sub * WARP + lane, WARP * wpr, xq, xd, a0, a1);
    a0 = warp_sum(a0);
    if (GLU) a1 = warp_sum(a1);
    if (wpr > 1) {
        if (lane == 0) { part_sum[threadIdx.y][0] = a0; part_sum[threadIdx.y][1] = a1; }
        __syncthreads();
        if (sub == 0 && lane == 0)
            for (int k = 1; k < wpr; k++) { a0 += part_sum[threadIdx.y + k][0]; a1 += part_sum[threadIdx.y + k][1]; }
    }
    if (!live || lane != 0 || sub != 0) return;
    if (GLU) {
        if (s.bias[0]) a0 += s.bias[0][row];
        if (s.bias[1]) a1 += s.bias[1][row];
        float gv = act == 0 ? a0 / (1.0f + expf(-a0))
                            : 0.5f * a0 * (1.0f + tanhf(0.7978845608028654f * (a0 + 0.044715f * a0 * a0 * a0)));
        s.y[0][row] = gv * a1;
        return;
    }
    const float *bias = m == 0 ? s.bias[0] : m == 1 ? s.bias[1] : s.bias[2];
    float *y = m == 0 ? s.y[0] : m == 1 ? s.y[1] : s.y[2];
    if (bias) a0 += bias[row];
    y[row] = accumulate ? y[row] + a0 : a0;
}

// The launch helper of kernels.cu (PDL attribute when enabled).
cudaError_t hx_k_launch_pdl(const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st, void **args);

cudaError_t hx_k_quant_q8(cudaStream_t st, const float *x, const float *norm_w, float eps, int cols, int8_t *xq,
                          float *xd) {
    if (cols % 32) return cudaErrorInvalidValue;
    int threads = cols >= 1024 ? 1024 : (cols + 31) / 32 * 32;
    void *args[] = {(void *)&x, (void *)&norm_w, (void *)&eps, (void *)&cols, (void *)&xq, (void *)&xd};
    return hx_k_launch_pdl((const void *)k_quant_q8, dim3(1), dim3(threads), 0, st, args);
}

cudaError_t hx_k_mvq(cudaStream_t st, int count, const hx_dmat *const *Ws, const int8_t *xq, const float *xd,
                     float *const *ys, const float *const *biases, bool accumulate, int glu_act) {
    hx_mv_set s = {};
    s.count = count;
    for (int i = 0; i < count; i++) {
        if (Ws[i]->type != Ws[0]->type || Ws[i]->cols != Ws[0]->cols || !hx_k_mvq_supported(Ws[i]))
            return cudaErrorInvalidValue;
        s.w[i] = Ws[i]->d; s.rb[i] = Ws[i]->row_bytes; s.rows[i] = Ws[i]->rows;
        s.y[i] = ys[i]; s.bias[i] = biases ? biases[i] : NULL;
        s.total_rows += Ws[i]->rows;
    }
    if (glu_act >= 0) s.total_rows = Ws[0]->rows;
    int cols = Ws[0]->cols, acc = accumulate ? 1 : 0, act = glu_act < 0 ? 0 : glu_act;
    // warps per row: aim at >= ~16 warps per SM of an H100 (132 SMs)
    int wpr = s.total_rows >= 8192 ? 1 : s.total_rows >= 2048 ? 2 : 4, rpb = Q_WARPS / wpr;
    const char *fw = getenv("HX_CUDA_MVQ_WPR");
    if (fw && (atoi(fw) == 1 || atoi(fw) == 2 || atoi(fw) == 4)) { wpr = atoi(fw); rpb = Q_WARPS / wpr; }
    void *args[] = {(void *)&s, (void *)&cols, (void *)&xq, (void *)&xd, (void *)&acc, (void *)&act, (void *)&wpr};
    dim3 block(WARP, Q_WARPS), grid((s.total_rows + rpb - 1) / rpb);
    const void *fn = NULL;
    switch (Ws[0]->type) {
#define X(T) case T: fn = glu_act >= 0 ? (const void *)k_mvq<T, true> : (const void *)k_mvq<T, false>; break;
        HX_MVQ_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return hx_k_launch_pdl(fn, grid, block, 0, st, args);
}
