// warp.cuh — device helpers shared by the kernel files: warp and block
// reductions, programmatic dependent launch, L2 prefetch, the GLU activation.
#pragma once
#include <math.h>
#include <stdint.h>

#define WARP 32

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum over the block (blockDim.x a multiple of 32, at most 1024); red: 32 floats of shared memory.
static __device__ float block_sum(float v, float *red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return warp_sum(v);
}
static __device__ float block_max(float v, float *red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INFINITY;
    return warp_max(v);
}
// In place over sc[0..n) (shared memory, the whole block): sc = exp(sc - max),
// the max in *mx; returns the sum (the unnormalized softmax of attention).
static __device__ float block_softmax_exp(float *sc, int n, float *red, float *mx) {
    float m = -INFINITY;
    for (int t = threadIdx.x; t < n; t += blockDim.x) m = fmaxf(m, sc[t]);
    m = block_max(m, red);
    float sum = 0.0f;
    for (int t = threadIdx.x; t < n; t += blockDim.x) { float e = __expf(sc[t] - m); sc[t] = e; sum += e; }
    *mx = m;
    return block_sum(sum, red);
}

// The gated FFN's activation of x: act 0 SiLU (x sigmoid(x)), 1 GELU with the
// tanh approximation. Every GLU kernel calls this one.
static __device__ __forceinline__ float ffn_act(float x, int act) {
    return act == 0 ? x / (1.0f + expf(-x)) : 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

// ---- programmatic dependent launch (Hopper) ----
// Every kernel is launched so that the next one may start while it drains:
// each kernel calls pdl_trigger() first (its dependents may launch) and
// pdl_wait() before it reads anything an earlier kernel wrote (waits for the
// earlier grid to complete and flush). Matvec kernels prefetch their weight
// rows into L2 before waiting: weights never depend on the previous kernel,
// so their DRAM reads overlap the previous kernel's tail. On pre-Hopper
// devices (or HX_CUDA_NO_PDL) kernels launch normally and both calls are no-ops.
static __device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
#endif
}
static __device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cudaGridDependencySynchronize();
#endif
}
static __device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
// Prefetch bytes [lo, hi) of a row to L2, lanes of a warp striding 128-byte lines.
static __device__ __forceinline__ void prefetch_range(const uint8_t *base, size_t lo, size_t hi, int lane) {
    for (size_t o = (lo & ~(size_t)127) + (size_t)lane * 128; o < hi; o += 32 * 128) prefetch_l2(base + o);
}
