// mmq.cu — a batch of tokens times a quantized matrix on the int8 tensor cores.
//
// Decode of many sequences multiplies each weight matrix by a few to a few
// dozen activation columns (one per sequence). Dotting every column with
// dp4a (mvq.cu's tile kernel) redoes the unpacking of each weight per column
// and reads each column's activations once per weight unit; dequantizing to
// f16 for cuBLAS writes a copy of every matrix each step. Here each weight is
// unpacked once, into the int8 A fragment of an mma.sync.m16n8k32 (16 rows x
// 32 elements of one quant block), and multiplied by 8 * NT activation
// columns in NT instructions; the integer block dots are then scaled in f32 by
// the weight block's scale(s) and each column's activation scale. So a step
// costs about one read of the weights whatever the batch, as the one-token
// matvec does.
//
// Activations are quantized per column and per 32 elements as the q8 matvec
// does (scale amax / 127, round to nearest), with the block's sum of q kept
// for the formats with a minimum / offset term (Q4_1, Q5_1, Q4_K). Numerics:
// as mvq.cu's (8-bit activations, f32 accumulation across blocks).
//
// Fragment layouts (PTX ISA, mma.m16n8k32 .s8; gid = lane / 4, tig = lane % 4):
//   A (16 x 32, rows = weight rows): a0 = row gid, k 4tig..4tig+3; a1 = row
//     gid+8, same k; a2 = row gid, k 16+4tig..; a3 = row gid+8, k 16+4tig..
//   B (32 x 8, cols = tokens): b0 = k 4tig.., col gid; b1 = k 16+4tig.., col gid
//   C (16 x 8, s32): c0, c1 = row gid, cols 2tig, 2tig+1; c2, c3 = row gid+8
// and m16n8k16 (Q6_K, whose scales are per 16 elements): a0 / a1 as above for
// k 0..15, b0 as above.
#include <stdio.h>
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/qblocks.cuh"
#include "backend/cuda/warp.cuh"
#include "backend/cuda/decode.cuh"

// ---- the activations: q8 per 32 elements, with the block sums ----

// xq (np, cols) int8 rows; ds[g * np + t] = (d, d * sum of the 32 q) of group
// g of token t, for t < np = hx_k_mmq_pad(n): tokens n..np-1 repeat token n - 1
// (so that the product kernel reads whole tiles without bounds checks). With
// g, each row is RMS-normed (times g) first, as hx_k_rmsnorm would.
enum { MQ_QWARPS = 32 };
__global__ void __launch_bounds__(MQ_QWARPS * WARP) k_mmq_quant(const float *__restrict__ x,
                                                               const float *__restrict__ g, float eps, int cols, int n,
                                                               int np, int8_t *__restrict__ xq, float2 *__restrict__ ds) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    int lane = threadIdx.x & 31, gi = blockIdx.x * MQ_QWARPS + (threadIdx.x >> 5), t = blockIdx.y;
    const float *xr = x + (size_t)(t < n ? t : n - 1) * cols;
    float scale = 1.0f;
    if (g) { // RMSNorm: every block sums the squares of its token's whole row (no second launch)
        float ss = 0.0f;
#pragma unroll 8
        for (int i = threadIdx.x; i < cols; i += blockDim.x) ss += xr[i] * xr[i];
        scale = rsqrtf(block_sum(ss, red) / cols + eps);
    }
    if (gi >= cols / 32) return;
    int i = gi * 32 + lane;
    float v = xr[i] * scale;
    if (g) v *= g[i];
    float amax = warp_max(fabsf(v)), d = amax / 127.0f;
    int q = d > 0.0f ? __float2int_rn(v / d) : 0;
    xq[(size_t)t * cols + i] = (int8_t)q;
    int sum = __reduce_add_sync(0xffffffffu, q);
    if (lane == 0) ds[(size_t)gi * np + t] = make_float2(d, d * (float)sum);
}

// n-tiles of 8 tokens per block for n tokens, and the padded token count.
// 17..32 tokens take two blocks of 16 per row tile rather than one of 32: twice
// the blocks, and the 16-token kernel keeps the next unit's loads in flight
// (bench/RESULTS.md: qwen3-0.6b 11.7k -> 14.7k tok/s at B = 32 on an H200)
static int mmq_nt(int n) { return n <= 8 ? 1 : n <= 32 ? 2 : 8; }
int hx_k_mmq_pad(int n) {
    int t = 8 * mmq_nt(n);
    return (n + t - 1) / t * t;
}

// ---- the weights: one 32-element group of one row as A-fragment halves ----

// MQ<T>::frag(w, g, tig, lo, hi, d, m): the row at w, its group g (elements
// 32g..32g+31): lo = elements 4tig..+3 and hi = 16+4tig..+3 as signed int8,
// so that dot(group, x) = d * xd * sum(q x) + m * (xd * sum(xq)), for the
// 32-element formats; the K-quants' units (MU) give the same per group, Q6_K
// (SPLIT16) two scales instead: d for the lower 16, m for the upper 16.
template <int T> struct MQ;
template <> struct MQ<HX_TYPE_Q8_0> {
    enum { HAS_M = 0, SPLIT16 = 0 };
    __device__ static void frag(const uint8_t *w, int g, int tig, int &lo, int &hi, float &d, float &m) {
        const uint8_t *b = w + (size_t)g * 34;
        d = hx_dh2f(b); m = 0.0f;
        lo = (int)hx_ld32_a2(b + 2 + 4 * tig);
        hi = (int)hx_ld32_a2(b + 18 + 4 * tig);
    }
};
template <> struct MQ<HX_TYPE_Q4_0> {
    enum { HAS_M = 0, SPLIT16 = 0 };
    __device__ static void frag(const uint8_t *w, int g, int tig, int &lo, int &hi, float &d, float &m) {
        const uint8_t *b = w + (size_t)g * 18;
        d = hx_dh2f(b); m = 0.0f;
        uint32_t v = hx_ld32_a2(b + 2 + 4 * tig);
        lo = (int)__vsub4(v & 0x0F0F0F0Fu, 0x08080808u);
        hi = (int)__vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u);
    }
};
template <> struct MQ<HX_TYPE_Q4_1> {
    enum { HAS_M = 1, SPLIT16 = 0 };
    __device__ static void frag(const uint8_t *w, int g, int tig, int &lo, int &hi, float &d, float &m) {
        const uint8_t *b = w + (size_t)g * 20;
        d = hx_dh2f(b); m = hx_dh2f(b + 2);
        uint32_t v = *(const uint32_t *)(b + 4 + 4 * tig);
        lo = (int)(v & 0x0F0F0F0Fu);
        hi = (int)((v >> 4) & 0x0F0F0F0Fu);
    }
};
template <> struct MQ<HX_TYPE_Q5_0> {
    enum { HAS_M = 0, SPLIT16 = 0 };
    __device__ static void frag(const uint8_t *w, int g, int tig, int &lo, int &hi, float &d, float &m) {
        const uint8_t *b = w + (size_t)g * 22;
        d = hx_dh2f(b); m = 0.0f;
        uint32_t qh = hx_ld32_a2(b + 2), v = hx_ld32_a2(b + 6 + 4 * tig);
        lo = (int)__vsub4((v & 0x0F0F0F0Fu) | (uint32_t)q5_hi4(qh >> (4 * tig)), 0x10101010u);
        hi = (int)__vsub4(((v >> 4) & 0x0F0F0F0Fu) | (uint32_t)q5_hi4(qh >> (16 + 4 * tig)), 0x10101010u);
    }
};
template <> struct MQ<HX_TYPE_Q5_1> {
    enum { HAS_M = 1, SPLIT16 = 0 };
    __device__ static void frag(const uint8_t *w, int g, int tig, int &lo, int &hi, float &d, float &m) {
        const uint8_t *b = w + (size_t)g * 24;
        d = hx_dh2f(b); m = hx_dh2f(b + 2);
        uint32_t qh = *(const uint32_t *)(b + 4), v = *(const uint32_t *)(b + 8 + 4 * tig);
        lo = (int)((v & 0x0F0F0F0Fu) | (uint32_t)q5_hi4(qh >> (4 * tig)));
        hi = (int)(((v >> 4) & 0x0F0F0F0Fu) | (uint32_t)q5_hi4(qh >> (16 + 4 * tig)));
    }
};
// The K-quants are read a super-block at a time (MU below); MQ gives their
// scale kinds, and Q6_K's 6-bit levels minus 32 from its ql and qh words.
template <> struct MQ<HX_TYPE_Q4_K> {
    enum { HAS_M = 1, SPLIT16 = 0 };
};
template <> struct MQ<HX_TYPE_Q6_K> {
    enum { HAS_M = 0, SPLIT16 = 1 };
    __device__ static int q6(uint32_t ql, uint32_t qh, int s) {
        uint32_t q = ((ql >> (s >= 2 ? 4 : 0)) & 0x0F0F0F0Fu) | (((qh >> (2 * s)) & 0x03030303u) << 4);
        return (int)__vsub4(q, 0x20202020u);
    }
};

// A unit: 8 consecutive groups (256 elements: one K-quant super-block) of one
// row, all loaded before any is used. The K-quants read their block once with
// word loads (the generic form would load the scales and the shared quant
// bytes once per group); the 32-element formats take their 8 blocks one by one.
template <int T> struct MU {
    __device__ static void unit(const uint8_t *w, int u, int ngroups, int tig, int (&lo)[8], int (&hi)[8],
                                float (&d)[8], float (&m)[8]) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (8 * u + j < ngroups) MQ<T>::frag(w, 8 * u + j, tig, lo[j], hi[j], d[j], m[j]);
    }
};
__device__ __forceinline__ int byte_of(uint32_t w, int i) { return (int)((w >> (8 * i)) & 0xFFu); }
// The K-quants' units in two steps: RW<T>::load issues one row's word loads of
// super-block u (this lane's share), RW<T>::group(s) turns them into group s's
// fragments and scales. Up to 16 tokens the kernel issues the next unit's
// loads before it multiplies the current one, and the first unit's before its
// PDL wait (weights never depend on the previous kernel).
template <int T> struct RW { // (the 32-element formats load through MU)
    enum { ON = 0 };
    __device__ void load(const uint8_t *, int, int) {}
    __device__ void group(int, int &, int &, float &, float &) const {}
};
template <> struct RW<HX_TYPE_Q4_K> {
    enum { ON = 1 };
    uint4 h; // d, dmin | scales[0..12)
    uint32_t qa[4], qb[4];
    __device__ __forceinline__ void load(const uint8_t *w, int u, int tig) {
        const uint8_t *b = w + (size_t)u * 144;
        h = *(const uint4 *)b;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            qa[c] = *(const uint32_t *)(b + 16 + 32 * c + 4 * tig);
            qb[c] = *(const uint32_t *)(b + 32 + 32 * c + 4 * tig);
        }
    }
    // group s (elements 32s..32s+31) of the super-block: fragments and scales
    __device__ __forceinline__ void group(int s, int &lo, int &hi, float &d, float &m) const {
        float dd = __half2float(__ushort_as_half((unsigned short)(h.x & 0xFFFFu)));
        float dm = __half2float(__ushort_as_half((unsigned short)(h.x >> 16)));
        const uint32_t sw[3] = {h.y, h.z, h.w};
        int sc, mn; // hx_dk4_scale_min on the scale bytes in registers
        if (s < 4) {
            sc = byte_of(sw[s / 4], s % 4) & 63;
            mn = byte_of(sw[(s + 4) / 4], (s + 4) % 4) & 63;
        } else {
            int q4 = byte_of(sw[(s + 4) / 4], (s + 4) % 4);
            sc = (q4 & 0xF) | ((byte_of(sw[(s - 4) / 4], (s - 4) % 4) >> 6) << 4);
            mn = (q4 >> 4) | ((byte_of(sw[s / 4], s % 4) >> 6) << 4);
        }
        d = dd * (float)sc;
        m = -dm * (float)mn;
        int sh = (s & 1) * 4;
        lo = (int)((qa[s >> 1] >> sh) & 0x0F0F0F0Fu);
        hi = (int)((qb[s >> 1] >> sh) & 0x0F0F0F0Fu);
    }
    __device__ __forceinline__ void decode(int (&lo)[8], int (&hi)[8], float (&d)[8], float (&m)[8]) const {
#pragma unroll
        for (int s = 0; s < 8; s++) group(s, lo[s], hi[s], d[s], m[s]);
    }
};
template <> struct RW<HX_TYPE_Q6_K> {
    enum { ON = 1 };
    uint32_t ql[2][2][2], qh[2][2]; // [h][s & 1][upper 16], [h][upper 16]
    int4 sc;
    uint32_t dh; // the f16 super-block scale (low half)
    __device__ __forceinline__ void load(const uint8_t *w, int u, int tig) {
        const uint8_t *b = w + (size_t)u * 210;
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int k = 0; k < 2; k++) {
                qh[h][k] = hx_ld32_a2(b + 128 + 32 * h + 16 * k + 4 * tig);
#pragma unroll
                for (int p = 0; p < 2; p++) ql[h][p][k] = hx_ld32_a2(b + 64 * h + 32 * p + 16 * k + 4 * tig);
            }
        sc = ld16_a2(b + 192);
        dh = *(const uint16_t *)(b + 208);
    }
    __device__ __forceinline__ void group(int gg, int &lo, int &hi, float &d, float &m) const {
        const uint32_t sw[4] = {(uint32_t)sc.x, (uint32_t)sc.y, (uint32_t)sc.z, (uint32_t)sc.w};
        float dd = __half2float(__ushort_as_half((unsigned short)dh));
        int h = gg >> 2, s = gg & 3, i = 8 * h + 2 * s;
        lo = MQ<HX_TYPE_Q6_K>::q6(ql[h][s & 1][0], qh[h][0], s);
        hi = MQ<HX_TYPE_Q6_K>::q6(ql[h][s & 1][1], qh[h][1], s);
        d = dd * (float)(int8_t)byte_of(sw[i / 4], i % 4);
        m = dd * (float)(int8_t)byte_of(sw[(i + 1) / 4], (i + 1) % 4);
    }
    __device__ __forceinline__ void decode(int (&lo)[8], int (&hi)[8], float (&d)[8], float (&m)[8]) const {
#pragma unroll
        for (int gg = 0; gg < 8; gg++) group(gg, lo[gg], hi[gg], d[gg], m[gg]);
    }
};

template <> struct MU<HX_TYPE_Q4_K> {
    __device__ static void unit(const uint8_t *w, int u, int, int tig, int (&lo)[8], int (&hi)[8], float (&d)[8],
                                float (&m)[8]) {
        RW<HX_TYPE_Q4_K> r;
        r.load(w, u, tig);
        r.decode(lo, hi, d, m);
    }
};
template <> struct MU<HX_TYPE_Q6_K> {
    __device__ static void unit(const uint8_t *w, int u, int, int tig, int (&lo)[8], int (&hi)[8], float (&d)[8],
                                float (&m)[8]) {
        RW<HX_TYPE_Q6_K> r;
        r.load(w, u, tig);
        r.decode(lo, hi, d, m);
    }
};

__device__ __forceinline__ void mma_k32(int (&c)[4], int a0, int a1, int a2, int a3, int b0, int b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_k16(int (&c)[4], int a0, int a1, int b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

// The products of one unit of 8 groups of rows r0 and r1 with the block's
// tokens, into acc; frag(j, lo0, hi0, d0, m0, lo1, hi1, d1, m1) gives group
// j's fragments and scales of the two rows (from registers already decoded,
// or decoded from a unit's words just before its products).
template <int T, int NT, class F>
__device__ __forceinline__ void unit_mma(float (&acc)[NT][4], F frag, int u, int ngroups, const int8_t *xb,
                                         const float2 *db, int cols, int np) {
    typedef MQ<T> M;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        int g = 8 * u + j;
        if (g >= ngroups) break;
        int lo0, hi0, lo1, hi1;
        float d0, m0, d1, m1;
        frag(j, lo0, hi0, d0, m0, lo1, hi1, d1, m1);
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            const int8_t *xg = xb + (size_t)8 * nt * cols + 32 * g;
            int blo = *(const int *)xg, bhi = *(const int *)(xg + 16);
            float4 e = *(const float4 *)(db + (size_t)g * np + 8 * nt); // (d, s) of the two C tokens
            if (M::SPLIT16) { // d: scale of k 0..15, m: of k 16..31
                int cl[4] = {0, 0, 0, 0}, ch[4] = {0, 0, 0, 0};
                mma_k16(cl, lo0, lo1, blo);
                mma_k16(ch, hi0, hi1, bhi);
                acc[nt][0] += e.x * (d0 * (float)cl[0] + m0 * (float)ch[0]);
                acc[nt][1] += e.z * (d0 * (float)cl[1] + m0 * (float)ch[1]);
                acc[nt][2] += e.x * (d1 * (float)cl[2] + m1 * (float)ch[2]);
                acc[nt][3] += e.z * (d1 * (float)cl[3] + m1 * (float)ch[3]);
            } else {
                int c[4] = {0, 0, 0, 0};
                mma_k32(c, lo0, lo1, hi0, hi1, blo, bhi);
                acc[nt][0] += d0 * e.x * (float)c[0];
                acc[nt][1] += d0 * e.z * (float)c[1];
                acc[nt][2] += d1 * e.x * (float)c[2];
                acc[nt][3] += d1 * e.z * (float)c[3];
                if (M::HAS_M) {
                    acc[nt][0] += m0 * e.y;
                    acc[nt][1] += m0 * e.w;
                    acc[nt][2] += m1 * e.y;
                    acc[nt][3] += m1 * e.w;
                }
            }
        }
    }
}

// The matrices of one launch: up to 3 of one type stacked by rows (q, k, v),
// each from row tile tile0[i] on; or with GLU the gate (0) and up (1) rows.
struct mmq_set {
    const uint8_t *w[3]; size_t rb[3]; int rows[3]; int tile0[4];
    float *y[3]; const float *bias[3];
};

// y (n, rows) = x W^T (+ bias) (accumulate: +=) for tokens [c0, c0 + 8 NT)
// (blockIdx.x picks the row tile and c0; np = hx_k_mmq_pad(n) tokens in xq / ds): a block
// holds 16 weight rows (blockIdx.x: a row tile of one of the set's matrices)
// and blockDim.y warps that split the row's groups by units of 8 (warp w
// takes units w, w + blockDim.y, ...; MU), each unit's weight loads issued
// before its first product (the loads in flight are what the speed depends
// on). GLU: the gate's and the up's rows in the same block, y = act(gate) *
// up. The warps' partial sums meet in shared memory (dynamic, (blockDim.y -
// 1) * NT * 4 * 32 floats, twice with GLU). Rows past a matrix reuse its last
// row and are not stored, as tokens past n.
template <int T, int NT, bool GLU>
__global__ void __launch_bounds__(NT <= 2 ? 512 : 256)
k_mmq(mmq_set S, int cols, const int8_t *__restrict__ xq, const float2 *__restrict__ ds, int n, int np,
      int accumulate, int act) {
    extern __shared__ float red[];
    int lane = threadIdx.x, wid = threadIdx.y, nw = blockDim.y, gid = lane >> 2, tig = lane & 3;
    // blockIdx.x = row tile * ny + token block: a row tile's token blocks run side by side, so
    // its weights come from DRAM once and from L2 for the others (ny = np / (8 NT))
    int ny = np / (8 * NT), mi = 0, tile = blockIdx.x / ny;
    if (!GLU) {
        if (tile >= S.tile0[1]) mi = 1;
        if (tile >= S.tile0[2]) mi = 2;
        tile -= S.tile0[mi];
    }
    const uint8_t *W = mi == 0 ? S.w[0] : mi == 1 ? S.w[1] : S.w[2];
    size_t rb = mi == 0 ? S.rb[0] : mi == 1 ? S.rb[1] : S.rb[2];
    int rows = mi == 0 ? S.rows[0] : mi == 1 ? S.rows[1] : S.rows[2];
    int r0 = tile * 16 + gid, r1 = r0 + 8, c0 = (blockIdx.x % ny) * 8 * NT;
    size_t o0 = (size_t)(r0 < rows ? r0 : rows - 1) * rb, o1 = (size_t)(r1 < rows ? r1 : rows - 1) * rb;
    pdl_trigger();
    int ngroups = cols / 32, nunits = (ngroups + 7) / 8;
    // K-quants, up to 16 tokens: the next unit's words of rows r0 and r1 in registers, the first
    // loaded before the wait (more tokens: the registers go to the accumulators; bench/RESULTS.md)
    constexpr bool PIPE = RW<T>::ON && NT <= 2;
    RW<T> n0, n1;
    if (PIPE && wid < nunits) { n0.load(W + o0, wid, tig); n1.load(W + o1, wid, tig); }
    { // the block's rows to L2 before the wait (weights never depend on the previous kernel)
        int ct = tile * 16, per = (16 + nw - 1) / nw;
        for (int i = wid * per; i < (wid + 1) * per && i < 16 && ct + i < rows; i++) {
            prefetch_range(W + (size_t)(ct + i) * rb, 0, rb, lane);
            if (GLU) prefetch_range(S.w[1] + (size_t)(ct + i) * rb, 0, rb, lane);
        }
    }
    pdl_wait();
    const int8_t *xb = xq + (size_t)(c0 + gid) * cols + 4 * tig; // B: token c0 + 8 nt + gid
    const float2 *db = ds + c0 + 2 * tig;                        // C: tokens c0 + 8 nt + 2 tig (+1)
    float acc[NT][4], acc2[NT][4]; // acc2: the up rows (GLU)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[nt][j] = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc2[nt][j] = 0.0f;
    if (PIPE) { // each job's loads in flight while the one before it is decoded and multiplied
        for (int u = wid; u < nunits; u += nw) {
#pragma unroll
            for (int part = 0; part < (GLU ? 2 : 1); part++) {
                RW<T> cur0 = n0, cur1 = n1;
                // the next job: the up rows of this unit (GLU), else the next unit
                int nu = GLU && part == 0 ? u : u + nw;
                const uint8_t *nW = GLU && part == 0 ? S.w[1] : W;
                if (nu < nunits) { n0.load(nW + o0, nu, tig); n1.load(nW + o1, nu, tig); }
                auto frag = [&](int j, int &lo0, int &hi0, float &d0, float &m0, int &lo1, int &hi1, float &d1,
                                float &m1) {
                    cur0.group(j, lo0, hi0, d0, m0);
                    cur1.group(j, lo1, hi1, d1, m1);
                };
                if (GLU && part == 1) unit_mma<T, NT>(acc2, frag, u, ngroups, xb, db, cols, np);
                else unit_mma<T, NT>(acc, frag, u, ngroups, xb, db, cols, np);
            }
        }
    } else for (int u = wid; u < nunits; u += nw) {
        int lo0[8] = {}, hi0[8] = {}, lo1[8] = {}, hi1[8] = {}; // (groups past the row's end stay unset by MU)
        float d0[8] = {}, m0[8] = {}, d1[8] = {}, m1[8] = {};
        auto frag = [&](int j, int &a0, int &b0, float &e0, float &f0, int &a1, int &b1, float &e1, float &f1) {
            a0 = lo0[j]; b0 = hi0[j]; e0 = d0[j]; f0 = m0[j];
            a1 = lo1[j]; b1 = hi1[j]; e1 = d1[j]; f1 = m1[j];
        };
        MU<T>::unit(W + o0, u, ngroups, tig, lo0, hi0, d0, m0);
        MU<T>::unit(W + o1, u, ngroups, tig, lo1, hi1, d1, m1);
        unit_mma<T, NT>(acc, frag, u, ngroups, xb, db, cols, np);
        if (GLU) {
            MU<T>::unit(S.w[1] + o0, u, ngroups, tig, lo0, hi0, d0, m0);
            MU<T>::unit(S.w[1] + o1, u, ngroups, tig, lo1, hi1, d1, m1);
            unit_mma<T, NT>(acc2, frag, u, ngroups, xb, db, cols, np);
        }
    }
    constexpr int NA = GLU ? 2 : 1; // accumulator sets
    if (nw > 1) { // the warps' partial sums: warp 0 adds the others'
        if (wid > 0)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int j = 0; j < 4; j++)
#pragma unroll
                    for (int a = 0; a < NA; a++)
                        red[((((wid - 1) * NT + nt) * 4 + j) * NA + a) * WARP + lane] = a ? acc2[nt][j]
                                                                                           : acc[nt][j];
        __syncthreads();
        if (wid > 0) return;
        for (int k = 1; k < nw; k++)
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    acc[nt][j] += red[((((k - 1) * NT + nt) * 4 + j) * NA) * WARP + lane];
                    if (GLU) acc2[nt][j] += red[((((k - 1) * NT + nt) * 4 + j) * NA + 1) * WARP + lane];
                }
    }
    float *y = mi == 0 ? S.y[0] : mi == 1 ? S.y[1] : S.y[2];
    const float *bias = mi == 0 ? S.bias[0] : mi == 1 ? S.bias[1] : S.bias[2];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int r = j < 2 ? r0 : r1, t = c0 + 8 * nt + 2 * tig + (j & 1);
            if (r >= rows || t >= n) continue;
            float a = acc[nt][j];
            if (bias) a += bias[r];
            float *yp = y + (size_t)t * rows + r;
            if (GLU) {
                float b = acc2[nt][j];
                if (S.bias[1]) b += S.bias[1][r];
                *yp = ffn_act(a, act) * b;
            } else {
                *yp = accumulate ? *yp + a : a;
            }
        }
}

bool hx_k_mmq_supported(const hx_dmat *W) { return hx_k_mvq_supported(W); }

cudaError_t hx_k_mmq_quant(cudaStream_t st, const float *x, const float *norm_w, float eps, int n, int cols,
                           int8_t *xq, float2 *ds) {
    if (cols % 32 || n < 1) return cudaErrorInvalidValue;
    int groups = cols / 32, np = hx_k_mmq_pad(n);
    void *args[] = {(void *)&x, (void *)&norm_w, (void *)&eps, (void *)&cols, (void *)&n, (void *)&np, (void *)&xq,
                    (void *)&ds};
    return hx_k_launch_pdl((const void *)k_mmq_quant, dim3((groups + MQ_QWARPS - 1) / MQ_QWARPS, np),
                           dim3(MQ_QWARPS * WARP), 0, st, args);
}

template <int T, bool GLU> static const void *mmq_kernel(int nt) {
    return nt == 1 ? (const void *)k_mmq<T, 1, GLU> : nt == 2 ? (const void *)k_mmq<T, 2, GLU>
                   : (const void *)k_mmq<T, 8, GLU>;
}

bool hx_k_mmq_one_launch(const hx_dmat *const *Ws, int count) {
    for (int i = 0; i < count; i++)
        if (!hx_k_mmq_supported(Ws[i]) || Ws[i]->type != Ws[0]->type || Ws[i]->cols != Ws[0]->cols) return false;
    return true;
}

cudaError_t hx_k_mmq(cudaStream_t st, int count, const hx_dmat *const *Ws, const int8_t *xq, const float2 *ds, int n,
                     float *const *ys, const float *const *biases, bool accumulate, int glu_act,
                     const hx_cuda_dev_opts *dv) {
    const bool glu = glu_act >= 0;
    if (n < 1 || count < 1 || count > 3 || (glu && (count != 2 || Ws[1]->rows != Ws[0]->rows)) ||
        !hx_k_mmq_one_launch(Ws, count))
        return cudaErrorInvalidValue;
    int nt = mmq_nt(n), np = hx_k_mmq_pad(n);
    const void *fn = NULL;
    switch (Ws[0]->type) {
#define X(T) case T: fn = glu ? mmq_kernel<T, true>(nt) : mmq_kernel<T, false>(nt); break;
        HX_MVQ_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    mmq_set S = {};
    int tiles = 0;
    for (int i = 0; i < count; i++) {
        S.w[i] = Ws[i]->d; S.rb[i] = Ws[i]->row_bytes; S.rows[i] = Ws[i]->rows;
        S.y[i] = ys[i]; S.bias[i] = biases ? biases[i] : NULL;
        S.tile0[i] = tiles;
        if (!glu || i == 0) tiles += (Ws[i]->rows + 15) / 16;
    }
    for (int i = count; i < 4; i++) S.tile0[i] = 1 << 30;
    int cols = Ws[0]->cols, acc = accumulate ? 1 : 0, act = glu ? glu_act : 0, na = glu ? 2 : 1;
    // warps per block splitting each row's groups: enough warps for the loads
    // in flight (few row tiles: more warps each), each with a unit of 8 groups or more
    int units = (cols / 32 + 7) / 8, most = nt <= 2 ? 16 : 8; // (the kernel's launch bounds)
    int nw = tiles * na >= 2048 ? 2 : tiles * na >= 512 ? 4 : tiles * na >= 128 ? 8 : 16;
    if (dv && dv->mmq_warps > 0) nw = dv->mmq_warps;
    if (nw > most) nw = most;
    if (nw > units) nw = units;
    while (nw > 1 && (size_t)(nw - 1) * nt * 4 * na * WARP * sizeof(float) > 48 * 1024) nw--;
    size_t smem = sizeof(float) * (size_t)(nw - 1) * nt * 4 * na * WARP;
    void *args[] = {(void *)&S, (void *)&cols, (void *)&xq, (void *)&ds, (void *)&n, (void *)&np, (void *)&acc,
                    (void *)&act};
    return hx_k_launch_pdl(fn, dim3(tiles * (np / (8 * nt))), dim3(WARP, nw), smem, st, args);
}
