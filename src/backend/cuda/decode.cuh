// decode.cuh — decode device code kept apart from the kernels that launch it:
// the 8-bit-activation dot products per weight format (mvq.cu) and one work
// item of the decode attention (kernels.cu), written against an argument
// struct and a given (head, split) so that other kernels can reuse them (the
// persistent decode kernel of branch gpu-mega does).
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/qblocks.cuh"
#include "backend/cuda/warp.cuh"

// units of a row in flight per lane (HX_MVQ_UNROLL at compile time, for timing variants)
#ifndef HX_MVQ_UNROLL
#define HX_MVQ_UNROLL 4
#endif
#define MVQ_PRAGMA(x) _Pragma(#x)
#define MVQ_UNROLL_N(n) MVQ_PRAGMA(unroll n)
#define MVQ_UNROLL MVQ_UNROLL_N(HX_MVQ_UNROLL)

__device__ __forceinline__ int dp4a(int a, int b, int c) { return __dp4a(a, b, c); }
// 16 bytes from a 2-byte aligned address (Q8_0's 34-byte and Q6_K's 210-byte
// blocks): the 4-byte words that hold them, shifted by 16 bits when p is not
// 4-byte aligned. 4 or 5 loads instead of 8 two-byte ones; the fifth word is
// read only when part of the 16 bytes lies in it (never past them otherwise).
__device__ __forceinline__ int4 ld16_a2(const uint8_t *p) {
    const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
    uint32_t w0 = a[0], w1 = a[1], w2 = a[2], w3 = a[3];
    if (!((uintptr_t)p & 2)) return make_int4((int)w0, (int)w1, (int)w2, (int)w3);
    uint32_t w4 = a[4];
    return make_int4((int)__funnelshift_r(w0, w1, 16), (int)__funnelshift_r(w1, w2, 16), (int)__funnelshift_r(w2, w3, 16),
                     (int)__funnelshift_r(w3, w4, 16));
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
// Q5_0: d, qh (32 high bits), qs[16] (22 bytes, 2-byte aligned); element j
// < 16: low nibble of qs[j] + 16 * bit j of qh, j >= 16: high nibble of
// qs[j-16] + 16 * bit j; minus 16. Units as Q4_0's.
__device__ __forceinline__ int q5_hi4(uint32_t h) { // bits 0..3 of h -> bit 4 of bytes 0..3
    return (int)(((h << 4) & 0x10u) | ((h << 11) & 0x1000u) | ((h << 18) & 0x100000u) | ((h << 25) & 0x10000000u));
}
template <> struct QD<HX_TYPE_Q5_0> {
    enum { QK = 32, BYTES = 22, UNITS = 2 };
    __device__ static float dot(const uint8_t *b, int u, const int8_t *xq, const float *xd) {
        uint32_t qh = hx_ld32_a2(b + 2), v0 = hx_ld32_a2(b + 6 + 8 * u), v1 = hx_ld32_a2(b + 10 + 8 * u);
        int2 xl = *(const int2 *)(xq + 8 * u), xh = *(const int2 *)(xq + 16 + 8 * u);
        int l0 = (int)(v0 & 0x0F0F0F0Fu) | q5_hi4(qh >> (8 * u)), l1 = (int)(v1 & 0x0F0F0F0Fu) | q5_hi4(qh >> (8 * u + 4));
        int h0 = (int)((v0 >> 4) & 0x0F0F0F0Fu) | q5_hi4(qh >> (16 + 8 * u));
        int h1 = (int)((v1 >> 4) & 0x0F0F0F0Fu) | q5_hi4(qh >> (20 + 8 * u));
        int s = dp4a((int)__vsub4(l0, 0x10101010u), xl.x, 0);
        s = dp4a((int)__vsub4(l1, 0x10101010u), xl.y, s);
        s = dp4a((int)__vsub4(h0, 0x10101010u), xh.x, s);
        s = dp4a((int)__vsub4(h1, 0x10101010u), xh.y, s);
        return hx_dh2f(b) * xd[0] * (float)s;
    }
};
// Q4_1: d, m, qs[16] (20 bytes, 4-byte aligned); weight = d q + m, q the
// nibble (as Q4_0 without the -8), so the dot is d xd sum(q x) + m xd sum(x).
// Units as Q4_0's. Q5_1: d, m, qh, qs[16] (24 bytes), q of 5 bits as Q5_0's.
__device__ __forceinline__ int sum4x4(int2 a, int2 b) { // sum of the 16 int8 in a and b
    return dp4a(0x01010101, a.x, dp4a(0x01010101, a.y, dp4a(0x01010101, b.x, dp4a(0x01010101, b.y, 0))));
}
template <> struct QD<HX_TYPE_Q4_1> {
    enum { QK = 32, BYTES = 20, UNITS = 2 };
    __device__ static float dot(const uint8_t *b, int u, const int8_t *xq, const float *xd) {
        uint32_t v0 = *(const uint32_t *)(b + 4 + 8 * u), v1 = *(const uint32_t *)(b + 8 + 8 * u);
        int2 xl = *(const int2 *)(xq + 8 * u), xh = *(const int2 *)(xq + 16 + 8 * u);
        int s = dp4a((int)(v0 & 0x0F0F0F0Fu), xl.x, 0);
        s = dp4a((int)(v1 & 0x0F0F0F0Fu), xl.y, s);
        s = dp4a((int)((v0 >> 4) & 0x0F0F0F0Fu), xh.x, s);
        s = dp4a((int)((v1 >> 4) & 0x0F0F0F0Fu), xh.y, s);
        return xd[0] * (hx_dh2f(b) * (float)s + hx_dh2f(b + 2) * (float)sum4x4(xl, xh));
    }
};
template <> struct QD<HX_TYPE_Q5_1> {
    enum { QK = 32, BYTES = 24, UNITS = 2 };
    __device__ static float dot(const uint8_t *b, int u, const int8_t *xq, const float *xd) {
        uint32_t qh = *(const uint32_t *)(b + 4), v0 = *(const uint32_t *)(b + 8 + 8 * u);
        uint32_t v1 = *(const uint32_t *)(b + 12 + 8 * u);
        int2 xl = *(const int2 *)(xq + 8 * u), xh = *(const int2 *)(xq + 16 + 8 * u);
        int s = dp4a((int)(v0 & 0x0F0F0F0Fu) | q5_hi4(qh >> (8 * u)), xl.x, 0);
        s = dp4a((int)(v1 & 0x0F0F0F0Fu) | q5_hi4(qh >> (8 * u + 4)), xl.y, s);
        s = dp4a((int)((v0 >> 4) & 0x0F0F0F0Fu) | q5_hi4(qh >> (16 + 8 * u)), xh.x, s);
        s = dp4a((int)((v1 >> 4) & 0x0F0F0F0Fu) | q5_hi4(qh >> (20 + 8 * u)), xh.y, s);
        return xd[0] * (hx_dh2f(b) * (float)s + hx_dh2f(b + 2) * (float)sum4x4(xl, xh));
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

#define HX_MVQ_TYPES(X) \
    X(HX_TYPE_Q8_0) X(HX_TYPE_Q4_0) X(HX_TYPE_Q4_1) X(HX_TYPE_Q5_0) X(HX_TYPE_Q5_1) X(HX_TYPE_Q4_K) X(HX_TYPE_Q6_K)

// One row's units (or the gate and up rows' with GLU) from unit u0 on in
// steps of step (the lanes of the row's warps).
template <int T, bool GLU>
__device__ __forceinline__ void row_dot(const uint8_t *w0, const uint8_t *w1, int cols, int u0, int step,
                                        const int8_t *xq, const float *xd, float &a0, float &a1) {
    typedef QD<T> Q;
    int nunits = cols / Q::QK * Q::UNITS;
    MVQ_UNROLL
    for (int u = u0; u < nunits; u += step) {
        int blk = u / Q::UNITS, unit = u % Q::UNITS;
        const int8_t *xb = xq + (size_t)blk * Q::QK;
        const float *db = xd + (size_t)blk * (Q::QK / 32);
        a0 += Q::dot(w0 + (size_t)blk * Q::BYTES, unit, xb, db);
        if (GLU) a1 += Q::dot(w1 + (size_t)blk * Q::BYTES, unit, xb, db);
    }
}

// One block of 32 activations (a value per lane of the warp) to the q8
// matvec's format: scale d = amax / 127, q = round(v / d) (0 for an all-zero
// block); lane 0 stores d. hx_k_quant_q8 and the decode attention's output
// quantize with it, so wo gets the same bytes either way.
static __device__ __forceinline__ void warp_q8(float v, int8_t *q, float *d) {
    float amax = warp_max(fabsf(v));
    float dd = amax / 127.0f;
    *q = (int8_t)(dd > 0.0f ? __float2int_rn(v / dd) : 0);
    if ((threadIdx.x & 31) == 0) *d = dd;
}

// Decode only (one token): the rope kernel folded into attention. Block = one
// query head: it norms and rotates its q, and the current token's k of its KV
// head (every head of a GQA group recomputes it, the group's first head stores
// k and v into the caches), then attends over the cached positions plus the
// current one, whose k and v it takes from registers rounded to f16 exactly as
// the cache would hold them. Saves a launch per layer.
// The head's output (vals: hd floats in shared memory, hd a multiple of 32)
// quantized for the wo matvec exactly as hx_k_quant_q8 does it (blocks of 32,
// scale amax / 127, round to nearest): the next kernel needs no quantization
// launch of its own.
static __device__ __forceinline__ void head_q8(const float *vals, int hd, int h, int8_t *xq, float *xd) {
    __syncthreads();
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int g = w; g < hd / 32; g += nw)
        warp_q8(vals[g * 32 + lane], xq + (size_t)h * hd + g * 32 + lane, xd + ((size_t)h * hd) / 32 + g);
}

// N consecutive halves of a K or V row as one load (4, 8 or 16 bytes).
template <int N> struct Halves;
template <> struct Halves<2> { typedef unsigned T; };
template <> struct Halves<4> { typedef uint2 T; };
template <> struct Halves<8> { typedef uint4 T; };

// The attention's V sum over positions [0, nc) of a chunk (position t in row
// r0 + t, less the ring's rows once t >= wrap) with weights sc[t], plus the
// current position (weight sc[icur], value vcur as f16) when cur: thread owns
// W dimensions of a group of positions (ng groups of hd/W threads stride the
// positions, 8 row loads in flight). Leaves each group's sums in vpart (ng *
// hd floats, at most W * blockDim.x) and returns ng.
template <int W>
static __device__ __forceinline__ int v_accum(const __half *vc, size_t kvrow, int kvh, int hd, const float *sc, int r0,
                                              int wrap, int nc, bool cur, int icur, const float *vcur, float *vpart) {
    typedef typename Halves<W>::T VT;
    int nd = hd / W, ng = blockDim.x / nd > 0 ? blockDim.x / nd : 1, grp = threadIdx.x / nd;
    for (int dw = threadIdx.x % nd; dw < nd && grp < ng; dw += blockDim.x) {
        float acc[W];
#pragma unroll
        for (int j = 0; j < W; j++) acc[j] = 0.0f;
        const __half *vb = vc + (size_t)kvh * hd + (size_t)dw * W;
        for (int seg = 0; seg < 2; seg++) { // positions [0, wrap) in rows r0.., [wrap, nc) in rows 0..
            int hi = seg ? nc : wrap, off = seg ? -wrap : r0;
            int t = seg ? wrap + ((grp - wrap) % ng + ng) % ng : grp;
            for (; t < hi; t += 8 * ng) {
                VT vv[8];
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (t + i * ng < hi) vv[i] = *(const VT *)(vb + (size_t)(t + i * ng + off) * kvrow);
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (t + i * ng < hi) {
                        const __half *hv = (const __half *)&vv[i];
                        float w = sc[t + i * ng];
#pragma unroll
                        for (int j = 0; j < W; j++) acc[j] = fmaf(w, __half2float(hv[j]), acc[j]);
                    }
            }
        }
        if (cur && grp == 0)
#pragma unroll
            for (int j = 0; j < W; j++)
                acc[j] = fmaf(sc[icur], __half2float(__float2half(__ldcg(vcur + dw * W + j))), acc[j]);
#pragma unroll
        for (int j = 0; j < W; j++) vpart[grp * hd + dw * W + j] = acc[j];
    }
    return ng;
}

// The positions [t0, t1) of chunk `split` of those a query at p sees (chunks of
// A.chunk from the window's first position); nact: the chunks that hold any.
// A work item with split >= nact has nothing to do.
struct att_span { int t0, t1, nact; };
static __device__ __forceinline__ att_span att_span_of(const hx_attn_args &A, int p, int split) {
    int first = hx_att_first(p, A.window), nact = (p - first + 1 + A.chunk - 1) / A.chunk;
    int t0 = first + split * A.chunk, t1 = t0 + A.chunk < p + 1 ? t0 + A.chunk : p + 1;
    return {t0, t1, nact};
}

// The end of a (head h, split) work item of the decode attention: qs[d] (shared
// memory, written by thread d % blockDim.x) holds the item's unnormalized
// output, mx its largest score and sum its exp-sum. With one item per head the
// output is final (quantized for wo when A.xq); otherwise the partial goes to
// A.part and the last item of the head to arrive merges them.
static __device__ void attn_item_end(const hx_attn_args &A, int h, int split, int nsplit, int nact, float mx,
                                     float sum, float *qs) {
    __shared__ bool merge;
    int hd = A.hd;
    float *o = A.out + (size_t)h * hd;
    float *pp = A.part + ((size_t)h * nsplit + split) * (hd + 2);
    if (nact == 1) {
        for (int d = threadIdx.x; d < hd; d += blockDim.x) o[d] = qs[d] = qs[d] / sum;
        if (A.xq) head_q8(qs, hd, h, A.xq, A.xd);
        return;
    }
    // split-K: partial (max, sum, unnormalized output) per chunk; the last block of this head merges
    for (int d = threadIdx.x; d < hd; d += blockDim.x) pp[d] = qs[d];
    if (threadIdx.x == 0) { pp[hd] = mx; pp[hd + 1] = sum; }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) merge = atomicAdd(&A.count[h], 1u) == (unsigned)nact - 1;
    __syncthreads();
    if (!merge) return;
    __threadfence();
    const float *ph = A.part + (size_t)h * nsplit * (hd + 2);
    float M = -INFINITY;
    for (int i = 0; i < nact; i++) M = fmaxf(M, __ldcg(ph + (size_t)i * (hd + 2) + hd));
    float L = 0.0f;
    for (int i = 0; i < nact; i++) {
        const float *pi = ph + (size_t)i * (hd + 2);
        L += __ldcg(pi + hd + 1) * __expf(__ldcg(pi + hd) - M);
    }
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int i = 0; i < nact; i++) {
            const float *pi = ph + (size_t)i * (hd + 2);
            acc += __ldcg(pi + d) * __expf(__ldcg(pi + hd) - M);
        }
        o[d] = qs[d] = acc / L;
    }
    if (threadIdx.x == 0) A.count[h] = 0; // ready for the next step
    if (A.xq) head_q8(qs, hd, h, A.xq, A.xd);
}

// One (query head h, chunk split of nsplit) work item of the decode attention
// at position p, by a block of ATT_THREADS threads (1-D); sm: dynamic shared
// memory (hx_k_attn_decode_smem bytes). k_attn_decode_kernel runs one item
// per block; the persistent decode kernel of branch gpu-mega runs several per
// block. q, k and v are read once, past L1 (__ldcg).
static __device__ void attn_decode_item(const hx_attn_args &A, int h, int split, int nsplit, int p, float *sm) {
    const float *q = A.q, *k = A.k, *v = A.v;
    __half *kc = A.kc, *vc = A.vc;
    int rows = A.rows, nh = A.nh, nkvh = A.nkvh, hd = A.hd, neox = A.neox, chunk = A.chunk;
    float scale = A.scale, softcap = A.softcap, rope_scale = A.rope_scale, base = A.base, eps = A.eps;
    const float *q_norm = A.q_norm, *k_norm = A.k_norm;
    const float2 *rope_tab = A.rope_tab;
    float *qs = sm, *kcur = sm + hd, *red = kcur + hd, *sc = red + 32;
    int group = nh / nkvh, kvh = h / group;
    att_span sp = att_span_of(A, p, split);
    int nact = sp.nact, t0 = sp.t0, t1 = sp.t1;
    if (split >= nact) return;
    bool last = t1 == p + 1; // this block holds the current position: it ropes (and stores) k
    int half = hd / 2;
    size_t kvrow = (size_t)nkvh * hd;
    // q (warp 0) and, in the last chunk, the current k (warp 1): norm + rope,
    // pairs j = lane, lane + 32, ... of one warp (no block-wide barrier but one)
    int wid = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (wid < (last ? 2 : 1)) {
        const float *src = wid ? k + (size_t)kvh * hd : q + (size_t)h * hd;
        const float *nw = wid ? k_norm : q_norm;
        float *dst = wid ? kcur : qs;
        float ss = 0.0f; // src read once (all loads in flight), then rotated in place in dst
#pragma unroll 8
        for (int d = lane; d < hd; d += 32) { float t = __ldcg(src + d); dst[d] = t; ss += t * t; }
        float nsc = nw ? rsqrtf(warp_sum(ss) / hd + eps) : 1.0f;
        __syncwarp();
        for (int j = lane; j < half; j += 32) {
            int a = neox ? j : 2 * j, b = neox ? j + half : 2 * j + 1;
            float x0 = dst[a], x1 = dst[b];
            if (nw) { x0 = x0 * nsc * nw[a]; x1 = x1 * nsc * nw[b]; }
            float cs, sn;
            if (rope_tab) { // the same values, computed once on the host
                float2 t = rope_tab[(size_t)p * half + j];
                cs = t.x; sn = t.y;
            } else {
                float2 t = hx_rope_cs(p, j, hd, base, rope_scale);
                cs = t.x; sn = t.y;
            }
            dst[a] = x0 * cs - x1 * sn;
            dst[b] = x0 * sn + x1 * cs;
        }
    }
    __syncthreads();
    const float *vcur = v + (size_t)kvh * hd;
    if (last && h % group == 0) {
        size_t off = (size_t)(p % rows) * kvrow + (size_t)kvh * hd;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            kc[off + d] = __float2half(kcur[d]);
            vc[off + d] = __float2half(__ldcg(vcur + d));
        }
    }
    // scores: one position per thread (the cached k row read as 8 halves at a time);
    // position t0 + t lives in row r0 + t, less rows once past the ring's end
    const __half *kbase = kc + (size_t)kvh * hd;
    int r0 = t0 % rows;
    for (int t = t0 + threadIdx.x; t < t1; t += blockDim.x) {
        float s = 0.0f;
        if (t == p) {
            for (int d = 0; d < hd; d++) s = fmaf(qs[d], __half2float(__float2half(kcur[d])), s);
        } else {
            int r = r0 + (t - t0);
            const __half *kr = kbase + (size_t)(r < rows ? r : r - rows) * kvrow;
            for (int d0 = 0; d0 < hd; d0 += 128) { // 16 loads of 8 halves in flight, then their FMAs
                uint4 raw[16];
#pragma unroll
                for (int i = 0; i < 16; i++)
                    if (d0 + 8 * i < hd) raw[i] = *(const uint4 *)(kr + d0 + 8 * i);
#pragma unroll
                for (int i = 0; i < 16; i++) {
                    if (d0 + 8 * i >= hd) break;
                    const __half2 *h2 = (const __half2 *)&raw[i];
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        float2 f = __half22float2(h2[j]);
                        s = fmaf(qs[d0 + 8 * i + 2 * j], f.x, s);
                        s = fmaf(qs[d0 + 8 * i + 2 * j + 1], f.y, s);
                    }
                }
            }
        }
        s *= scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        sc[t - t0] = s;
    }
    __syncthreads();
    int n = t1 - t0;
    float mx;
    float sum = block_softmax_exp(sc, n, red, &mx);
    int nc = last ? n - 1 : n; // cached positions of this chunk (the current one comes from v)
    int wrap = rows - r0 < nc ? rows - r0 : nc; // positions before the ring's end
    float *vpart = sc + chunk;
    // V: a thread per W dimensions and per group of positions (groups of
    // hd/W threads stride the positions), groups summed in shared memory
    int ng = hd % 8 == 0 ? v_accum<8>(vc, kvrow, kvh, hd, sc, r0, wrap, nc, last, n - 1, vcur, vpart)
                         : v_accum<2>(vc, kvrow, kvh, hd, sc, r0, wrap, nc, last, n - 1, vcur, vpart);
    __syncthreads();
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int g2 = 0; g2 < ng; g2++) acc += vpart[g2 * hd + d];
        qs[d] = acc;
    }
    attn_item_end(A, h, split, nsplit, nact, mx, sum, qs);
}

// ---- decode attention, a warp per position ----
// The same work item for head sizes 64, 128 and 256 (E = hd / 32 dimensions
// per lane), built for latency: each warp takes positions i = warp, warp +
// nwarps, ... of the chunk, a lane holds E dimensions of q, of each K and V
// row and of the output, so a score is E FMAs and a warp sum, the softmax is
// kept online per warp (no block-wide pass over the scores), and the warps are
// merged once at the end. The first ATT_NB positions of each warp — K and V,
// and the rope table entries at p — are loaded before pdl_wait: they do not
// depend on the kernels still running (p is copied in before the decode step
// starts; the cache rows below p were written by earlier steps).
enum { ATT_NB = 8 };
template <int E> static __device__ __forceinline__ void halves_f(const typename Halves<E>::T &v, float *f) {
    const __half2 *h2 = (const __half2 *)&v;
#pragma unroll
    for (int j = 0; j < E / 2; j++) { float2 t = __half22float2(h2[j]); f[2 * j] = t.x; f[2 * j + 1] = t.y; }
}
// x: this lane's E dimensions (lane * E + e) of one head vector: RMSNorm with
// weights nw (when not NULL), then RoPE with cs[] (neox: pair j = d mod hd/2,
// the partner in lane ^ 16; else pairs (2j, 2j+1) inside the lane).
template <int E>
static __device__ __forceinline__ void norm_rope_e(float *x, const float *nw, float eps, bool neox, const float2 *cs) {
    int lane = threadIdx.x & 31;
    if (nw) {
        float ss = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) ss += x[e] * x[e];
        float nsc = rsqrtf(warp_sum(ss) / (32 * E) + eps);
#pragma unroll
        for (int e = 0; e < E; e++) x[e] = x[e] * nsc * nw[lane * E + e];
    }
    if (neox) {
        bool lo = lane < 16;
#pragma unroll
        for (int e = 0; e < E; e++) {
            float y = __shfl_xor_sync(0xffffffffu, x[e], 16);
            x[e] = lo ? x[e] * cs[e].x - y * cs[e].y : y * cs[e].y + x[e] * cs[e].x;
        }
    } else {
#pragma unroll
        for (int k = 0; k < E / 2; k++) {
            float x0 = x[2 * k], x1 = x[2 * k + 1];
            x[2 * k] = x0 * cs[k].x - x1 * cs[k].y;
            x[2 * k + 1] = x0 * cs[k].y + x1 * cs[k].x;
        }
    }
}
template <int E> static __device__ __forceinline__ void load_e(const float *p, float *x) {
#pragma unroll
    for (int e = 0; e < E; e += 2) { float2 t = __ldcg((const float2 *)(p + e)); x[e] = t.x; x[e + 1] = t.y; }
}

// One warp's share of the attention over nc cached positions (a ring of rows
// rows from row r0, K / V rows kvrow halves apart, this lane's E dimensions at
// kb / vb): positions ib = wid, wid + nw, ... in rounds of ATT_NB, each round's
// K and V rows loaded together (attn_rows), an online softmax kept per warp in
// (m, l, o); kr / vr hold the first round, loaded before the PDL wait. With
// cur, the current position's k and v (kcur, vcur, in registers) join last.
template <int E>
static __device__ __forceinline__ void attn_rows(const __half *kb, const __half *vb, size_t kvrow, int r0, int rows,
                                                 int nc, int ib, int nw, typename Halves<E>::T (&kr)[ATT_NB],
                                                 typename Halves<E>::T (&vr)[ATT_NB]) {
    typedef typename Halves<E>::T HT;
#pragma unroll
    for (int j = 0; j < ATT_NB; j++) {
        int i = ib + nw * j;
        if (i < nc) {
            int r = r0 + i < rows ? r0 + i : r0 + i - rows;
            kr[j] = *(const HT *)(kb + (size_t)r * kvrow);
            vr[j] = *(const HT *)(vb + (size_t)r * kvrow);
        }
    }
}
// ... for the G query heads of one KV head at once (q[g], m[g], l[g], o[g]):
// each K and V row is loaded once for all of them.
template <int E, int G>
static __device__ __forceinline__ void attn_warp_pass_g(const float (&q)[G][E], const __half *kb, const __half *vb,
                                                        size_t kvrow, int r0, int rows, int nc, int wid, int nw,
                                                        typename Halves<E>::T (&kr)[ATT_NB],
                                                        typename Halves<E>::T (&vr)[ATT_NB], bool cur,
                                                        const float (&kcur)[E], const float (&vcur)[E], float scale,
                                                        float softcap, float (&m)[G], float (&l)[G],
                                                        float (&o)[G][E]) {
    auto score = [&](float s) {
        s *= scale;
        return softcap > 0.0f ? softcap * tanhf(s / softcap) : s;
    };
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) o[g][e] = 0.0f;
    }
    for (int ib = wid; ib < nc; ib += nw * ATT_NB) {
        if (ib != wid) attn_rows<E>(kb, vb, kvrow, r0, rows, nc, ib, nw, kr, vr);
        float s[G][ATT_NB];
#pragma unroll
        for (int j = 0; j < ATT_NB; j++) {
            float kf[E];
            halves_f<E>(kr[j], kf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float a = 0.0f;
#pragma unroll
                for (int e = 0; e < E; e++) a = fmaf(q[g][e], kf[e], a);
                s[g][j] = a;
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float mb = -INFINITY;
#pragma unroll
            for (int j = 0; j < ATT_NB; j++) {
                s[g][j] = ib + nw * j < nc ? score(warp_sum(s[g][j])) : -INFINITY;
                mb = fmaxf(mb, s[g][j]);
            }
            float mn = fmaxf(m[g], mb), corr = __expf(m[g] - mn);
            l[g] *= corr;
#pragma unroll
            for (int e = 0; e < E; e++) o[g][e] *= corr;
            m[g] = mn;
        }
#pragma unroll
        for (int j = 0; j < ATT_NB; j++) {
            if (ib + nw * j >= nc) break;
            float vf[E];
            halves_f<E>(vr[j], vf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float pj = __expf(s[g][j] - m[g]);
                l[g] += pj;
#pragma unroll
                for (int e = 0; e < E; e++) o[g][e] = fmaf(pj, vf[e], o[g][e]);
            }
        }
    }
    if (cur) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            float a = 0.0f;
#pragma unroll
            for (int e = 0; e < E; e++) a = fmaf(q[g][e], kcur[e], a);
            float s = score(warp_sum(a)), mn = fmaxf(m[g], s), corr = __expf(m[g] - mn), pj = __expf(s - mn);
            l[g] = l[g] * corr + pj;
#pragma unroll
            for (int e = 0; e < E; e++) o[g][e] = fmaf(pj, vcur[e], o[g][e] * corr);
            m[g] = mn;
        }
    }
}
template <int E>
static __device__ __forceinline__ void attn_warp_pass(const float (&q)[E], const __half *kb, const __half *vb,
                                                      size_t kvrow, int r0, int rows, int nc, int wid, int nw,
                                                      typename Halves<E>::T (&kr)[ATT_NB],
                                                      typename Halves<E>::T (&vr)[ATT_NB], bool cur,
                                                      const float (&kcur)[E], const float (&vcur)[E], float scale,
                                                      float softcap, float &m, float &l, float (&o)[E]) {
    attn_warp_pass_g<E, 1>(reinterpret_cast<const float(&)[1][E]>(q), kb, vb, kvrow, r0, rows, nc, wid, nw, kr, vr,
                           cur, kcur, vcur, scale, softcap, reinterpret_cast<float(&)[1]>(m),
                           reinterpret_cast<float(&)[1]>(l), reinterpret_cast<float(&)[1][E]>(o));
}
// The current token's k of its KV head (this lane's E dimensions, normed and
// rotated in place) and v, rounded to f16 as the cache holds them: kh / vh
// the f16 words to store, kcur / vcur their values back in f32.
template <int E>
static __device__ __forceinline__ void attn_cur_kv(float (&kcur)[E], float (&vcur)[E], const float *k_norm, float eps,
                                                   bool neox, const float2 *cs, typename Halves<E>::T &kh,
                                                   typename Halves<E>::T &vh) {
    norm_rope_e<E>(kcur, k_norm, eps, neox, cs);
    __half2 *k2 = (__half2 *)&kh, *v2 = (__half2 *)&vh;
#pragma unroll
    for (int j = 0; j < E / 2; j++) {
        k2[j] = __floats2half2_rn(kcur[2 * j], kcur[2 * j + 1]);
        v2[j] = __floats2half2_rn(vcur[2 * j], vcur[2 * j + 1]);
    }
    halves_f<E>(kh, kcur);
    halves_f<E>(vh, vcur);
}

// sm: (1 + nwarps) * hd + 2 * nwarps floats.
template <int E>
static __device__ void attn_decode_warp_item(const hx_attn_args &A, int h, int split, int nsplit, int p, float *sm) {
    typedef typename Halves<E>::T HT;
    const int hd = 32 * E, half = hd / 2;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int group = A.nh / A.nkvh, kvh = h / group, rows = A.rows;
    att_span sp = att_span_of(A, p, split);
    int nact = sp.nact, t0 = sp.t0, t1 = sp.t1;
    if (split >= nact) return;
    bool last = t1 == p + 1;
    int nc = last ? t1 - t0 - 1 : t1 - t0; // cached positions of the chunk (the current one comes from k, v)
    size_t kvrow = (size_t)A.nkvh * hd;
    int r0 = t0 % rows;
    const __half *kb = A.kc + (size_t)kvh * hd + lane * E, *vb = A.vc + (size_t)kvh * hd + lane * E;
    HT kr[ATT_NB], vr[ATT_NB];
    attn_rows<E>(kb, vb, kvrow, r0, rows, nc, wid, nw, kr, vr);
    float2 cs[E];
    if (A.rope_tab) {
        const float2 *row = A.rope_tab + (size_t)p * half;
        int j0 = A.neox ? (lane & 15) * E : lane * (E / 2);
#pragma unroll
        for (int e = 0; e < E; e++)
            if (A.neox || e < E / 2) cs[e] = row[j0 + e];
    } else {
#pragma unroll
        for (int e = 0; e < E; e++) {
            cs[e] = hx_rope_cs(p, A.neox ? (lane & 15) * E + e : lane * (E / 2) + e, hd, A.base, A.rope_scale);
        }
    }
    pdl_wait();
    float q[E];
    load_e<E>(A.q + (size_t)h * hd + lane * E, q);
    norm_rope_e<E>(q, A.q_norm, A.eps, A.neox, cs);
    bool cur = last && wid == 0; // warp 0 of the last chunk adds the current position
    float kcur[E], vcur[E];
    if (cur) {
        load_e<E>(A.k + (size_t)kvh * hd + lane * E, kcur);
        load_e<E>(A.v + (size_t)kvh * hd + lane * E, vcur);
        HT kh, vh;
        attn_cur_kv<E>(kcur, vcur, A.k_norm, A.eps, A.neox, cs, kh, vh);
        if (h % group == 0) {
            size_t off = (size_t)(p % rows) * kvrow + (size_t)kvh * hd + lane * E;
            *(HT *)(A.kc + off) = kh;
            *(HT *)(A.vc + off) = vh;
        }
    }
    float m, l, o[E];
    attn_warp_pass<E>(q, kb, vb, kvrow, r0, rows, nc, wid, nw, kr, vr, cur, kcur, vcur, A.scale, A.softcap, m, l, o);
    // merge the warps: output (nw rows of hd), max and sum per warp
    float *qs = sm, *ow = sm + hd, *mw = ow + (size_t)nw * hd, *lw = mw + nw;
#pragma unroll
    for (int e = 0; e < E; e++) ow[wid * hd + lane * E + e] = o[e];
    if (lane == 0) { mw[wid] = m; lw[wid] = l; }
    __syncthreads();
    float M = -INFINITY, L = 0.0f;
    for (int w = 0; w < nw; w++) M = fmaxf(M, mw[w]);
    for (int w = 0; w < nw; w++) L += lw[w] * __expf(mw[w] - M);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int w = 0; w < nw; w++) acc += ow[w * hd + d] * __expf(mw[w] - M);
        qs[d] = acc;
    }
    attn_item_end(A, h, split, nsplit, nact, M, L, qs);
}
