// sample.cu — the sampling chain on the GPU, token for token the CPU's
// (src/run/sampler.c) given the same logits and the same uniform draw:
// penalties over the recent tokens -> top-k -> top-p -> min-p -> temperature
// -> draw. One block of 1024 threads: the penalized logits go to a work copy,
// a radix select finds the k-th largest (logit desc, id asc, NaN dropped), the
// k candidates are sorted in shared memory and thread 0 runs the same double
// precision loops as the CPU. Cases it does not take (top-k off or > 256,
// k >= the number of candidates, more than 1024 logits tied at the k-th value)
// report status 1 and leave the logits untouched, so the caller samples on the
// CPU instead.
#include <math.h>
#include <stdint.h>
#include "backend/cuda/kernels.cuh"

enum { S_THREADS = 1024, S_MAXK = 256, S_MAXTIES = 1024 };

__device__ __forceinline__ uint32_t s_key(float f) { // order-preserving map of a float to uint32
    uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
// (logit desc, id asc): a before b
__device__ __forceinline__ bool s_before(float la, int ia, float lb, int ib) {
    return la > lb || (la == lb && ia < ib);
}

// Bitonic sort of n (a power of two, <= 2 * blockDim.x... any n with threads looping) pairs in shared memory.
__device__ void s_sort(float *l, int *id, int n, bool by_id) {
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n; i += blockDim.x) {
                int p = i ^ j;
                if (p > i) {
                    bool up = (i & k) == 0;
                    bool swap = by_id ? (up ? id[p] < id[i] : id[p] > id[i])
                                      : (up ? s_before(l[p], id[p], l[i], id[i]) : s_before(l[i], id[i], l[p], id[p]));
                    if (swap) {
                        float tl = l[i]; l[i] = l[p]; l[p] = tl;
                        int ti = id[i]; id[i] = id[p]; id[p] = ti;
                    }
                }
            }
            __syncthreads();
        }
}

__global__ void __launch_bounds__(S_THREADS)
k_sample(const float *__restrict__ logits, float *__restrict__ w, int V, const int *__restrict__ hist, int nhist,
         float rep, float freq, float pres, int top_k, float top_p, float min_p, float temp, float u, int *out) {
    __shared__ unsigned hcount[256];
    __shared__ unsigned s_prefix, s_mask, s_need, s_n, s_ngt, s_nties;
    __shared__ float cl[S_MAXK];
    __shared__ int cid[S_MAXK];
    __shared__ float tl[S_MAXTIES];
    __shared__ int tid_[S_MAXTIES];
    int tid = threadIdx.x, nt = blockDim.x;
    // 1. penalties into the work copy
    for (int i = tid; i < V; i += nt) w[i] = logits[i];
    __syncthreads();
    if (nhist > 0 && (rep != 1.0f || freq != 0.0f || pres != 0.0f)) {
        for (int i = tid; i < nhist; i += nt) {
            int t = hist[i];
            if (t < 0 || t >= V) continue;
            bool first = true;
            int c = 0;
            for (int j = 0; j < nhist; j++)
                if (hist[j] == t) { if (j < i) first = false; c++; }
            if (!first) continue;
            float x = w[t];
            x = x <= 0 ? x * rep : x / rep;
            w[t] = x - ((float)c * freq + pres);
        }
        __syncthreads();
    }
    if (temp <= 0.0f) { // greedy: the lowest id among the maxima, as hx_argmax
        __shared__ float bv[32];
        __shared__ int bi[32];
        float v = -INFINITY;
        int b = 0x7fffffff;
        for (int i = tid; i < V; i += nt)
            if (w[i] > v || (w[i] == v && i < b)) { v = w[i]; b = i; }
        for (int o = 16; o > 0; o >>= 1) {
            float v2 = __shfl_xor_sync(0xffffffffu, v, o);
            int b2 = __shfl_xor_sync(0xffffffffu, b, o);
            if (v2 > v || (v2 == v && b2 < b)) { v = v2; b = b2; }
        }
        if ((tid & 31) == 0) { bv[tid >> 5] = v; bi[tid >> 5] = b; }
        __syncthreads();
        if (tid == 0) {
            for (int k = 1; k < nt / 32; k++)
                if (bv[k] > v || (bv[k] == v && bi[k] < b)) { v = bv[k]; b = bi[k]; }
            out[0] = b == 0x7fffffff ? 0 : b;
            out[1] = 0;
        }
        return;
    }
    // 2. radix select of the top_k-th largest key among the non-NaN logits
    if (tid == 0) { s_prefix = 0; s_mask = 0; s_need = (unsigned)top_k; s_n = 0; }
    __syncthreads();
    unsigned n_local = 0;
    for (int i = tid; i < V; i += nt) n_local += !isnan(w[i]);
    atomicAdd(&s_n, n_local);
    __syncthreads();
    if (top_k <= 0 || top_k > S_MAXK || (unsigned)top_k >= s_n) { if (tid == 0) out[1] = 1; return; }
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = tid; i < 256; i += nt) hcount[i] = 0;
        __syncthreads();
        unsigned prefix = s_prefix, mask = s_mask;
        for (int i = tid; i < V; i += nt) {
            float f = w[i];
            if (isnan(f)) continue;
            uint32_t k = s_key(f);
            if ((k & mask) == prefix) atomicAdd(&hcount[(k >> shift) & 0xFF], 1u);
        }
        __syncthreads();
        if (tid == 0) {
            unsigned need = s_need;
            int d = 255;
            for (; d > 0; d--) {
                if (hcount[d] >= need) break;
                need -= hcount[d];
            }
            s_need = need; // how many of the keys with this digit are still wanted
            s_prefix = prefix | ((unsigned)d << shift);
            s_mask = mask | (0xFFu << shift);
        }
        __syncthreads();
    }
    // 3. collect: keys above the k-th (exactly top_k - need of them), then the ties, lowest ids first
    uint32_t kth = s_prefix;
    if (tid == 0) { s_ngt = 0; s_nties = 0; }
    __syncthreads();
    for (int i = tid; i < V; i += nt) {
        float f = w[i];
        if (isnan(f)) continue;
        uint32_t k = s_key(f);
        if (k > kth) { unsigned p = atomicAdd(&s_ngt, 1u); if (p < S_MAXK) { cl[p] = f; cid[p] = i; } }
        else if (k == kth) { unsigned p = atomicAdd(&s_nties, 1u); if (p < S_MAXTIES) { tl[p] = f; tid_[p] = i; } }
    }
    __syncthreads();
    unsigned ngt = s_ngt, nties = s_nties, need = s_need;
    if (nties > S_MAXTIES || ngt + need != (unsigned)top_k) { if (tid == 0) out[1] = 1; return; }
    int np = 1;
    while (np < (int)nties) np <<= 1;
    for (int i = nties + tid; i < np; i += nt) { tl[i] = INFINITY; tid_[i] = 0x7fffffff; }
    __syncthreads();
    s_sort(tl, tid_, np, true); // ties by id ascending
    for (int i = tid; i < (int)need; i += nt) { cl[ngt + i] = tl[i]; cid[ngt + i] = tid_[i]; }
    int nk = 1;
    while (nk < top_k) nk <<= 1;
    for (int i = top_k + tid; i < nk; i += nt) { cl[i] = -INFINITY; cid[i] = 0x7fffffff; }
    __syncthreads();
    s_sort(cl, cid, nk, false); // (logit desc, id asc)
    // 4. top-p, min-p, temperature, draw: the CPU's loops, in double
    if (tid != 0) return;
    int n = top_k;
    double max = cl[0], sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)cl[i] - max);
    if (top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += exp((double)cl[i] - max) / sum;
            if (cum >= top_p) { keep = i + 1; break; }
        }
        n = keep;
    }
    if (min_p > 0.0f) {
        double cut = max + log((double)min_p);
        int keep = 1;
        while (keep < n && cl[keep] >= cut) keep++;
        n = keep;
    }
    double total = 0;
    for (int i = 0; i < n; i++) total += exp(((double)cl[i] - max) / temp);
    double r = (double)u * total, acc = 0;
    int pick = cid[n - 1];
    for (int i = 0; i < n; i++) {
        acc += exp(((double)cl[i] - max) / temp);
        if (r < acc) { pick = cid[i]; break; }
    }
    out[0] = pick;
    out[1] = 0;
}

cudaError_t hx_k_sample(cudaStream_t st, const float *logits, float *work, int V, const int *hist, int nhist,
                        float rep, float freq, float pres, int top_k, float top_p, float min_p, float temp, float u,
                        int *out) {
    k_sample<<<1, S_THREADS, 0, st>>>(logits, work, V, hist, nhist, rep, freq, pres, top_k, top_p, min_p, temp, u, out);
    return cudaGetLastError();
}
