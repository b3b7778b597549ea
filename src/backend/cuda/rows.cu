// rows.cu — greedy picks and log-probabilities over rows of logits left on
// the device.
//
// A batched decode step of B sequences leaves B rows of n_vocab logits on the
// device; when the caller only wants each row's argmax (hx_get_argmax) or the
// log-probabilities of a few ids (hx_get_logprobs), one thread block per row
// computes them there and B ids (B * k floats) come back instead of B rows.
#include <math.h>
#include "backend/cuda/kernels.cuh"

enum { AR_THREADS = 256 };

// out[b] = the lowest index among the maxima of row rows.r[b] of x (rows of
// V floats), NaNs never picked; a row whose first value is NaN gives 0, as
// hx_argmax's scan does.
__global__ void __launch_bounds__(AR_THREADS) k_argmax_rows(const float *__restrict__ x, int V, hx_rows_arg rows,
                                                            int *__restrict__ out) {
    const float *w = x + (size_t)rows.r[blockIdx.x] * V;
    __shared__ float bv[AR_THREADS / 32];
    __shared__ int bi[AR_THREADS / 32];
    float v = -INFINITY;
    int b = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += AR_THREADS)
        if (w[i] > v || (w[i] == v && i < b)) { v = w[i]; b = i; }
    for (int o = 16; o > 0; o >>= 1) {
        float v2 = __shfl_xor_sync(0xffffffffu, v, o);
        int b2 = __shfl_xor_sync(0xffffffffu, b, o);
        if (v2 > v || (v2 == v && b2 < b)) { v = v2; b = b2; }
    }
    if ((threadIdx.x & 31) == 0) { bv[threadIdx.x >> 5] = v; bi[threadIdx.x >> 5] = b; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 1; k < AR_THREADS / 32; k++)
            if (bv[k] > v || (bv[k] == v && bi[k] < b)) { v = bv[k]; b = bi[k]; }
        out[blockIdx.x] = b == 0x7fffffff || isnan(w[0]) ? 0 : b;
    }
}

cudaError_t hx_k_argmax_rows(cudaStream_t st, const float *x, int V, const hx_rows_arg *rows, int n, int *out) {
    if (n <= 0) return cudaSuccess;
    if (n > HX_ROWS_MAX) return cudaErrorInvalidValue;
    k_argmax_rows<<<n, AR_THREADS, 0, st>>>(x, V, *rows, out);
    return cudaGetLastError();
}

// Max, then sum of exp(x - max) over one row, reduced across the block.
__device__ static float row_lse(const float *__restrict__ w, int V) {
    __shared__ float red[AR_THREADS / 32];
    float m = -INFINITY;
    for (int i = threadIdx.x; i < V; i += AR_THREADS) m = fmaxf(m, w[i]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = red[0];
    for (int k = 1; k < AR_THREADS / 32; k++) m = fmaxf(m, red[k]);
    __syncthreads(); // red is reused below
    float s = 0.0f;
    for (int i = threadIdx.x; i < V; i += AR_THREADS) s += expf(w[i] - m);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    s = 0.0f;
    for (int k = 0; k < AR_THREADS / 32; k++) s += red[k];
    return m + logf(s);
}

// out[b * k + q] = x[row b][ids[b * k + q]] - logsumexp(row b), for the rows
// rows.r[b] of x (rows of V floats); ids checked by the caller.
__global__ void __launch_bounds__(AR_THREADS) k_logprob_rows(const float *__restrict__ x, int V, hx_rows_arg rows,
                                                             int k, const int *__restrict__ ids, float *__restrict__ out) {
    const float *w = x + (size_t)rows.r[blockIdx.x] * V;
    float z = row_lse(w, V);
    for (int q = threadIdx.x; q < k; q += AR_THREADS) {
        size_t o = (size_t)blockIdx.x * k + q;
        out[o] = w[ids[o]] - z;
    }
}

cudaError_t hx_k_logprob_rows(cudaStream_t st, const float *x, int V, const hx_rows_arg *rows, int n, int k,
                              const int *ids, float *out) {
    if (n <= 0 || k <= 0) return cudaSuccess;
    if (n > HX_ROWS_MAX) return cudaErrorInvalidValue;
    k_logprob_rows<<<n, AR_THREADS, 0, st>>>(x, V, *rows, k, ids, out);
    return cudaGetLastError();
}
