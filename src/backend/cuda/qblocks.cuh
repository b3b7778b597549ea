// qblocks.cuh — the GGUF block formats, decoded on the GPU.
//
// Every format is described by QT<type>: QK elements per block, BYTES per
// block, and PARTS pieces per block. part(b, p, f) decodes piece p of the block
// at b and calls f(i, w) for each run of 4 elements i..i+3 (index inside the
// block) with their values w (a float4). A warp walks a row piece by piece (lane k takes pieces k, k+32, ...),
// so neighbouring lanes read neighbouring bytes, and the same decoder serves
// the fused dequant-dot (f = accumulate w . x[i..i+4)) and plain
// dequantization (f = store w). Values come in runs of 4 consecutive elements
// (f(i, float4), i a multiple of 4) so the activations are read as float4. The value formulas follow src/quant/dequant.c, which is
// bit-exact with ggml; nvcc may contract a*b+c into one fma, so GPU values can
// differ from the CPU's in the last bit (the tests use tolerances).
//
// F32/F16/BF16 rows are treated as blocks of 32 elements, so every row length
// must be a multiple of 32 on the GPU.
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>
#include "quant/quant.h"

__device__ __forceinline__ float hx_dh2f(const uint8_t *p) {
    return __half2float(__ushort_as_half(*(const uint16_t *)p));
}
// 4 bytes from a 2-byte aligned address
__device__ __forceinline__ uint32_t hx_ld32_a2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (uint32_t)h[0] | ((uint32_t)h[1] << 16);
}

template <int T> struct QT;

template <> struct QT<HX_TYPE_F32> {
    enum { QK = 32, BYTES = 128, PARTS = 8 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        f(4 * p, *(const float4 *)(b + 16 * p));
    }
};
template <> struct QT<HX_TYPE_F16> {
    enum { QK = 32, BYTES = 64, PARTS = 8 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        uint2 v = *(const uint2 *)(b + 8 * p);
        __half2 a = *(__half2 *)&v.x, c = *(__half2 *)&v.y;
        f(4 * p, make_float4(__low2float(a), __high2float(a), __low2float(c), __high2float(c)));
    }
};
template <> struct QT<HX_TYPE_BF16> {
    enum { QK = 32, BYTES = 64, PARTS = 8 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        uint2 v = *(const uint2 *)(b + 8 * p);
        f(4 * p, make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xFFFF0000u),
                             __uint_as_float(v.y << 16), __uint_as_float(v.y & 0xFFFF0000u)));
    }
};
// Q4_0: d, qs[16]; element j: low nibble of qs[j] (j < 16), high nibble of qs[j-16]
template <> struct QT<HX_TYPE_Q4_0> {
    enum { QK = 32, BYTES = 18, PARTS = 4 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b);
        uint32_t q = hx_ld32_a2(b + 2 + 4 * p);
        float lo[4], hi[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int v = (q >> (8 * j)) & 0xFF;
            lo[j] = (float)((v & 0xF) - 8) * d;
            hi[j] = (float)((v >> 4) - 8) * d;
        }
        f(4 * p, make_float4(lo[0], lo[1], lo[2], lo[3]));
        f(16 + 4 * p, make_float4(hi[0], hi[1], hi[2], hi[3]));
    }
};
template <> struct QT<HX_TYPE_Q4_1> {
    enum { QK = 32, BYTES = 20, PARTS = 4 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b), m = hx_dh2f(b + 2);
        uint32_t q = *(const uint32_t *)(b + 4 + 4 * p);
        float lo[4], hi[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int v = (q >> (8 * j)) & 0xFF;
            lo[j] = (float)(v & 0xF) * d + m;
            hi[j] = (float)(v >> 4) * d + m;
        }
        f(4 * p, make_float4(lo[0], lo[1], lo[2], lo[3]));
        f(16 + 4 * p, make_float4(hi[0], hi[1], hi[2], hi[3]));
    }
};
template <> struct QT<HX_TYPE_Q5_0> {
    enum { QK = 32, BYTES = 22, PARTS = 4 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b);
        uint32_t qh = hx_ld32_a2(b + 2), q = hx_ld32_a2(b + 6 + 4 * p);
        float lo[4], hi[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int v = (q >> (8 * j)) & 0xFF, e = 4 * p + j;
            int h0 = (qh >> e) & 1, h1 = (qh >> (e + 16)) & 1;
            lo[j] = (float)(((v & 0xF) | (h0 << 4)) - 16) * d;
            hi[j] = (float)(((v >> 4) | (h1 << 4)) - 16) * d;
        }
        f(4 * p, make_float4(lo[0], lo[1], lo[2], lo[3]));
        f(16 + 4 * p, make_float4(hi[0], hi[1], hi[2], hi[3]));
    }
};
template <> struct QT<HX_TYPE_Q5_1> {
    enum { QK = 32, BYTES = 24, PARTS = 4 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b), m = hx_dh2f(b + 2);
        uint32_t qh = *(const uint32_t *)(b + 4), q = *(const uint32_t *)(b + 8 + 4 * p);
        float lo[4], hi[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int v = (q >> (8 * j)) & 0xFF, e = 4 * p + j;
            int h0 = (qh >> e) & 1, h1 = (qh >> (e + 16)) & 1;
            lo[j] = (float)((v & 0xF) | (h0 << 4)) * d + m;
            hi[j] = (float)((v >> 4) | (h1 << 4)) * d + m;
        }
        f(4 * p, make_float4(lo[0], lo[1], lo[2], lo[3]));
        f(16 + 4 * p, make_float4(hi[0], hi[1], hi[2], hi[3]));
    }
};
template <> struct QT<HX_TYPE_Q8_0> {
    enum { QK = 32, BYTES = 34, PARTS = 4 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b);
        uint32_t q0 = hx_ld32_a2(b + 2 + 8 * p), q1 = hx_ld32_a2(b + 6 + 8 * p);
        f(8 * p, make_float4((float)(int8_t)q0 * d, (float)(int8_t)(q0 >> 8) * d, (float)(int8_t)(q0 >> 16) * d,
                             (float)(int8_t)(q0 >> 24) * d));
        f(8 * p + 4, make_float4((float)(int8_t)q1 * d, (float)(int8_t)(q1 >> 8) * d, (float)(int8_t)(q1 >> 16) * d,
                                 (float)(int8_t)(q1 >> 24) * d));
    }
};
// Q2_K: scales[16] qs[64] d dmin; element 128h+32s+l = bits 2s of qs[32h+l], sub-block e/16
template <> struct QT<HX_TYPE_Q2_K> {
    enum { QK = 256, BYTES = 84, PARTS = 16 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b + 80), dmin = hx_dh2f(b + 82);
        int h = p >> 3, l0 = 4 * (p & 7);
        uint32_t q = *(const uint32_t *)(b + 16 + 32 * h + l0);
#pragma unroll
        for (int s = 0; s < 4; s++) {
            int e0 = 128 * h + 32 * s + l0;
            int sc = b[e0 >> 4];
            float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4), w[4];
#pragma unroll
            for (int j = 0; j < 4; j++) w[j] = dl * (float)((q >> (8 * j + 2 * s)) & 3) - ml;
            f(e0, make_float4(w[0], w[1], w[2], w[3]));
        }
    }
};
// Q3_K: hmask[32] qs[64] scales[12] d
template <> struct QT<HX_TYPE_Q3_K> {
    enum { QK = 256, BYTES = 110, PARTS = 16 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b + 108);
        const uint8_t *hm = b, *qs = b + 32, *s = b + 96;
        int h = p >> 3, l0 = 4 * (p & 7);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            int e0 = 128 * h + 32 * k + l0, sb = e0 >> 4;
            int lo = sb < 8 ? (s[sb] & 0xF) : (s[sb - 8] >> 4);
            int hi = (s[8 + sb % 4] >> (2 * (sb / 4))) & 3;
            float dl = d * (float)((lo | (hi << 4)) - 32), w[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int l = l0 + j;
                int q = (qs[32 * h + l] >> (2 * k)) & 3;
                int hbit = (hm[l] >> (e0 >> 5)) & 1;
                w[j] = dl * (float)(q - (hbit ? 0 : 4));
            }
            f(e0, make_float4(w[0], w[1], w[2], w[3]));
        }
    }
};
__device__ __forceinline__ void hx_dk4_scale_min(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) { *sc = q[j] & 63; *m = q[j + 4] & 63; }
    else { *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}
// Q4_K: d dmin scales[12] qs[128]; chunk c of 64: qs[32c+l] low -> 64c+l, high -> 64c+32+l
template <> struct QT<HX_TYPE_Q4_K> {
    enum { QK = 256, BYTES = 144, PARTS = 16 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b), dmin = hx_dh2f(b + 2);
        int c = p >> 2, l0 = 8 * (p & 3), sc, m;
        hx_dk4_scale_min(2 * c, b + 4, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        hx_dk4_scale_min(2 * c + 1, b + 4, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        uint2 q = *(const uint2 *)(b + 16 + 32 * c + l0);
#pragma unroll
        for (int g = 0; g < 2; g++) {
            uint32_t qq = g ? q.y : q.x;
            float lo[4], hi[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int v = (qq >> (8 * j)) & 0xFF;
                lo[j] = d1 * (float)(v & 0xF) - m1;
                hi[j] = d2 * (float)(v >> 4) - m2;
            }
            f(64 * c + l0 + 4 * g, make_float4(lo[0], lo[1], lo[2], lo[3]));
            f(64 * c + 32 + l0 + 4 * g, make_float4(hi[0], hi[1], hi[2], hi[3]));
        }
    }
};
// Q5_K: d dmin scales[12] qh[32] qs[128]
template <> struct QT<HX_TYPE_Q5_K> {
    enum { QK = 256, BYTES = 176, PARTS = 16 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b), dmin = hx_dh2f(b + 2);
        int c = p >> 2, l0 = 8 * (p & 3), sc, m;
        hx_dk4_scale_min(2 * c, b + 4, &sc, &m);
        float d1 = d * (float)sc, m1 = dmin * (float)m;
        hx_dk4_scale_min(2 * c + 1, b + 4, &sc, &m);
        float d2 = d * (float)sc, m2 = dmin * (float)m;
        const uint8_t *qh = b + 16, *qs = b + 48 + 32 * c;
#pragma unroll
        for (int g = 0; g < 2; g++) {
            float lo[4], hi[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int l = l0 + 4 * g + j, v = qs[l], hb = qh[l];
                lo[j] = d1 * (float)((v & 0xF) + (((hb >> (2 * c)) & 1) << 4)) - m1;
                hi[j] = d2 * (float)((v >> 4) + (((hb >> (2 * c + 1)) & 1) << 4)) - m2;
            }
            f(64 * c + l0 + 4 * g, make_float4(lo[0], lo[1], lo[2], lo[3]));
            f(64 * c + 32 + l0 + 4 * g, make_float4(hi[0], hi[1], hi[2], hi[3]));
        }
    }
};
// Q6_K: ql[128] qh[64] scales[16] d; element 128h+32s+l
template <> struct QT<HX_TYPE_Q6_K> {
    enum { QK = 256, BYTES = 210, PARTS = 16 };
    template <class F> __device__ static void part(const uint8_t *b, int p, F &&f) {
        float d = hx_dh2f(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *scales = (const int8_t *)(b + 192);
        int h = p >> 3, l0 = 4 * (p & 7);
        uint32_t hb4 = hx_ld32_a2(qh + 32 * h + l0); // blocks of 210 bytes: only 2-byte alignment
        uint32_t lo4[2] = {hx_ld32_a2(ql + 64 * h + l0), hx_ld32_a2(ql + 64 * h + l0 + 32)};
#pragma unroll
        for (int s = 0; s < 4; s++) {
            int e0 = 128 * h + 32 * s + l0;
            float ds = d * (float)scales[e0 >> 4], w[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int lo = (lo4[s & 1] >> (8 * j)) & 0xFF, hb = (hb4 >> (8 * j)) & 0xFF;
                int q = ((s >> 1) ? (lo >> 4) : (lo & 0xF)) | (((hb >> (2 * s)) & 3) << 4);
                w[j] = ds * (float)(q - 32);
            }
            f(e0, make_float4(w[0], w[1], w[2], w[3]));
        }
    }
};

// Calls MACRO(T) inside a switch over every weight type the GPU kernels know.
#define HX_CUDA_TYPES(X) X(HX_TYPE_F32) X(HX_TYPE_F16) X(HX_TYPE_BF16) X(HX_TYPE_Q4_0) X(HX_TYPE_Q4_1) \
    X(HX_TYPE_Q5_0) X(HX_TYPE_Q5_1) X(HX_TYPE_Q8_0) X(HX_TYPE_Q2_K) X(HX_TYPE_Q3_K) X(HX_TYPE_Q4_K) \
    X(HX_TYPE_Q5_K) X(HX_TYPE_Q6_K)
