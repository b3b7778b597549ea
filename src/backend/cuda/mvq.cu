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

enum { Q_WARPS = 4 };
// units of a row in flight per lane (HX_MVQ_UNROLL at compile time, for timing variants)
#ifndef HX_MVQ_UNROLL
#define HX_MVQ_UNROLL 4
#endif
#define MVQ_PRAGMA(x) _Pragma(#x)
#define MVQ_UNROLL_N(n) MVQ_PRAGMA(unroll n)
#define MVQ_UNROLL MVQ_UNROLL_N(HX_MVQ_UNROLL)

__device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }
// 16 bytes from a 2-byte aligned address
__device__ __forceinline__ int4 ld16_a2(const uint8_t *p) {
    return make_int4((int)hx_ld32_a2(p), (int)hx_ld32_a2(p + 4), (int)hx_ld32_a2(p + 8), (int)hx_ld32_a2(p + 12));
}
__device__ __forceinline__ int dot16(int4 w, int4 x, int acc) {
    return dp4a(w.w, x.w, dp4a(w.z, x.z, dp4a(w.y, x.y, dp4a(w.x, x.x, acc))));
}
__device__ __forceinline__ int4 and4(int4 v, int m) { return make_int4(v.x & m, v.y & m, v.z & m, v.w & m); }
__device__ __forceinline__ int4 shr4(int4 v, int s) {
    return make_int4((int)((unsigned)v.x >> s), (int)((unsigned)v.y >> s), (int)((unsigned)v.z >> s), (int)((unsigned)v.w >> s));
}
__device__ __forceinline__ int4 sub4(int4 v, unsigned b) { // per byte, wrapping: unsigned bytes - b -> signed bytes
    return make_int4((int)__vsub4(v.x, b), (int)__vsub4(v.y, b), (int)__vsub4(v.z, b), (int)__vsub4(v.w, b));
}

// dot(unit u of the weight block at b, the same elements of x): xq the block's
// 8-bit activations (QK of them), xd their scales (one per 32).
template <int T> struct QD;

// Q8_0: d, qs[32] (2-byte aligned); unit = 16 elements
template <> struct QD<HX_TYPE_Q8_0> {
    enum { QK = 32, BYTES = 34, UNITS = 2 };
    __device__ static float dot(const uint8_t *b, int u, const int8_t *xq, const float *xd) {
        int4 w = ld16_a2(b + 2 + 16 * u);
        int4 x = *(const int4 *)(xq + 16 * u);
        return hx_dh2f(b) * xd[0] * (float)dot16(w, x, 0);
    }
};
// Q4_0: d, qs[16]; element j < 16: low nibble of qs[j], j >= 16: high nibble of qs[j-16].
// unit u: qs[8u, 8u+8) -> elements 8u..8u+7 (low) and 16+8u.. (high)
template <> struct QD<HX_TYPE_Q4_0> {
    enum { QK = 32, BYTES = 18, UNITS = 2 };
    __device__ static float dot(const uint8_t *b, int u, const int8_t *xq, const float *xd) {
        unsigned v0 = hx_ld32_a2(b + 2 + 8 * u), v1 = hx_ld32_a2(b + 6 + 8 * u);
        int2 xl = *(const int2 *)(xq + 8 * u), xh = *(const int2 *)(xq + 16 + 8 * u);
        int s = dp4a((int)__vsub4(v0 & 0x0F0F0F0Fu, 0x08080808u), xl.x, 0);
        s = dp4a((int)__vsub4(v1 & 0x0F0F0F0Fu, 0x08080808u), xl.y, s);
        s = dp4a((int)__vsub4((v0 >> 4) & 0x0F0F0F0Fu, 0x08080808u), xh.x, s);
        s = dp4a((int)__vsub4((v1 >> 4) & 0x0F0F0F0Fu, 0x08080808u), xh.y, s);
        return hx_dh2f(b) * xd[0] * (float)s;
    }
};
// Q4_K: d dmin scales[12] qs[128] (blocks of 144 bytes: 16-byte aligned rows).
// unit u: chunk c = u/2 of 64 elements, half h = u%2: qs[32c+16h, +16) low
// nibbles -> elements 64c+16h.. (sub-block 2c), high -> 64c+32+16h.. (2c+1)
template <> struct QD<HX_TYPE_Q4_K> {
    enum { QK = 256, BYTES = 144, UNITS = 8 };
    __device__ static float dot(const uint8_t *b, int u, const int8_t *xq, const float *xd) {
        int c = u >> 1, h = u & 1, sc1, m1, sc2, m2;
        int4 q = *(const int4 *)(b + 16 + 32 * c + 16 * h);
        int4 xl = *(const int4 *)(xq + 64 * c + 16 * h), xh = *(const int4 *)(xq + 64 * c + 32 + 16 * h);
        hx_dk4_scale_min(2 * c, b + 4, &sc1, &m1);
        hx_dk4_scale_min(2 * c + 1, b + 4, &sc2, &m2);
        int dl = dot16(and4(q, 0x0F0F0F0F), xl, 0), dh = dot16(and4(shr4(q, 4), 0x0F0F0F0F), xh, 0);
        const int4 ones = make_int4(0x01010101, 0x01010101, 0x01010101, 0x01010101);
        int sl = dot16(ones, xl, 0), sh = dot16(ones, xh, 0);
        float d = hx_dh2f(b), dmin = hx_dh2f(b + 2);
        return xd[2 * c] * (d * (float)(sc1 * dl) - dmin * (float)(m1 * sl)) +
               xd[2 * c + 1] * (d * (float)(sc2 * dh) - dmin * (float)(m2 * sh));
    }
};
// Q6_K: ql[128] qh[64] scales[16] d (2-byte aligned); element 128h+32s+l:
// ql[64h + 32(s&1) + l] (high nibble when s >= 2), bits 2s of qh[32h + l], scale (128h+32s+l)/16.
// unit u: h = u/4, s0 = (u/2)%2, l16 = u%2: s = s0 and s0+2, l = 16 l16 .. +16
template <> struct QD<HX_TYPE_Q6_K> {
    enum { QK = 256, BYTES = 210, UNITS = 8 };
    __device__ static float dot(const uint8_t *b, int u, const int8_t *xq, const float *xd) {
        int h = u >> 2, s0 = (u >> 1) & 1, l16 = u & 1;
        int4 ql = ld16_a2(b + 64 * h + 32 * s0 + 16 * l16), qh = ld16_a2(b + 128 + 32 * h + 16 * l16);
        const int8_t *sc = (const int8_t *)(b + 192);
        float r = 0.0f;
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int s = s0 + 2 * k;
            int4 lo = and4(k ? shr4(ql, 4) : ql, 0x0F0F0F0F), hb = and4(shr4(qh, 2 * s), 0x03030303);
            int4 q = make_int4(lo.x | (hb.x << 4), lo.y | (hb.y << 4), lo.z | (hb.z << 4), lo.w | (hb.w << 4));
            int e = 128 * h + 32 * s + 16 * l16;
            int dot = dot16(sub4(q, 0x20202020u), *(const int4 *)(xq + e), 0);
            r += xd[e >> 5] * (float)(sc[e >> 4] * dot);
        }
        return hx_dh2f(b + 208) * r;
    }
};

#define HX_MVQ_TYPES(X) X(HX_TYPE_Q8_0) X(HX_TYPE_Q4_0) X(HX_TYPE_Q4_K) X(HX_TYPE_Q6_K)

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
    int nunits = live ? cols / Q::QK * Q::UNITS : 0;
    MVQ_UNROLL
    for (int u = sub * WARP + lane; u < nunits; u += WARP * wpr) {
        int blk = u / Q::UNITS, unit = u % Q::UNITS;
        const int8_t *xb = xq + (size_t)blk * Q::QK;
        const float *db = xd + (size_t)blk * (Q::QK / 32);
        a0 += Q::dot(w0 + (size_t)blk * Q::BYTES, unit, xb, db);
        if (GLU) a1 += Q::dot(w1 + (size_t)blk * Q::BYTES, unit, xb, db);
    }
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
