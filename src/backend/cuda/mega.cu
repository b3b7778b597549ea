// mega.cu — the persistent decode kernel (mega.h says what it does).
//
// Shared memory of a block (one per SM, 256 or 512 threads):
//   ring    ns stages of sb bytes: each holds one item, rows [r0, r0 + n) of
//           one matrix (a GLU item: those rows of gate, then of up), copied
//           from global memory by the bulk-copy engine; stage s completes
//           mbarrier full[s] (expect-tx by thread 0, complete-tx by the copy)
//   layers  every layer's matrices, vectors and cache pointers (mk_layer),
//           copied once
//   act     the current phase's input as q8 (xq_s: cols int8, xd_s: cols/32
//           scales) and x as the last norm read it (xs: n_embd floats, the
//           residual adds of wo and down start from it)
//   att     the attention items' scratch
// A block's items follow from the layer table alone (mk_gen: layer by layer,
// q/k/v, wo, gate/up, down, its rows of each phase [R b / G, R (b + 1) / G)
// in stage-sized pieces), so thread 0 makes each descriptor on chip and
// refills a stage with the next item as soon as the block is done with it:
// the ring is always ns items ahead, across phase and layer boundaries.
//
// Activations written by one block and read by another (x, q/k/v, the
// attention's q8 output, h) are read past L1 (__ldcg) after a grid barrier.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
extern "C" {
#include "quant/quant.h"
}
#include "backend/cuda/mega.h"
#include "backend/cuda/decode.cuh"
#include "backend/cuda/warp.cuh"

enum { MK_MAX_STAGES = 12, MK_MAX_ROWS = 256 };
enum { MK_LAST = 1, MK_ACC = 2, MK_GLU = 4 };
enum { MK_Q, MK_K, MK_V, MK_X, MK_H };

// One stage's worth of a block's weight stream.
struct __align__(16) mk_item {
    const uint8_t *src, *src2; // 16-byte aligned starts of the copies (src2: a GLU item's up rows)
    int out;                   // output vector (MK_Q, MK_K, MK_V, MK_X, MK_H; row r0 + i of it)
    const float *bias, *bias2; // NULL: none (bias2: up's)
    unsigned bytes, bytes2;    // copy sizes, multiples of 16 (0: nothing)
    int r0, n, cols, rb;       // rows [r0, r0 + n) of `cols` elements, rb bytes apart
    unsigned d1, d2, off2;     // row r0's offset in each copy; the second copy's offset in the stage
    int type, flags;           // MK_LAST: the block's last item of this phase; MK_ACC: y +=; MK_GLU
};

// A matrix of a layer: rows of `cols` elements of `type`, rb bytes apart; per:
// rows per stage (a GLU pair counts gate and up).
struct mk_mat {
    const uint8_t *d;
    const float *bias;
    unsigned rb;
    int rows, cols, type, per, pad;
};
enum { MK_WQ, MK_WK, MK_WV, MK_WO, MK_GATE, MK_UP, MK_DOWN, MK_NMAT };

struct mk_layer {
    mk_mat m[MK_NMAT];
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm;
    __half *kc, *vc;
    size_t slot_stride;
    const float2 *rope_tab;
    float base;
    int window, rows, pad;
};

struct mk_args {
    const mk_layer *layers;
    int n_layer, D, ff, nh, nkvh, hd, act, chunk, nsplit, neox;
    float eps, scale, softcap, rope_scale;
    float *x, *q, *k, *v, *att, *h;
    int8_t *xq;
    float *xd, *apart;
    unsigned *acount, *bar;
    int ns;
    unsigned sb, lay_off, act_off, xd_off, xs_off, att_off;
    int slot;
    const int *d_pos;
    unsigned long long *tm;    // developer timing (hx_mega_in.times): ns per phase summed by block 0, else NULL
};
enum { MK_T_PHASES = 14, MK_T_WAIT = 16, MK_T_SLOTS = 24 };

// ---- Hopper primitives: mbarriers and bulk copies ----
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
static __device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
static __device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
static __device__ __forceinline__ void mbar_expect_tx(uint64_t *b, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done)
                     : "r"(smem_u32(b)), "r"(parity)
                     : "memory");
    } while (!done);
}
static __device__ __forceinline__ void bulk_g2s(void *dst, const void *src, unsigned bytes, uint64_t *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(b))
                 : "memory");
}
// Generic-proxy reads of a stage are ordered before the next bulk copy into it.
static __device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
static __device__ __forceinline__ unsigned ld_acquire(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
    return t;
}

// Every block of the grid (all resident: one per SM, launched cooperatively),
// in two halves so that a block does its own work between them: grid_arrive
// (after a __syncthreads: the block's writes are done) and grid_wait. The
// counter returns to its value after each barrier: block 0 adds 2^31 - (G - 1),
// the others 1, so bit 31 flips once all have arrived. Thread 0 only.
static __device__ __forceinline__ unsigned grid_arrive(unsigned *bar) {
    unsigned inc = blockIdx.x == 0 ? 0x80000000u - (gridDim.x - 1) : 1u;
    __threadfence();
    return atomicAdd(bar, inc);
}
static __device__ __forceinline__ void grid_wait(const unsigned *bar, unsigned old) {
    while (((old ^ ld_acquire(bar)) & 0x80000000u) == 0) {
    }
}
static __device__ __forceinline__ void grid_sync(unsigned *bar) {
    __syncthreads();
    if (threadIdx.x == 0) grid_wait(bar, grid_arrive(bar));
    __syncthreads();
}

// Copies of the item in desc[s] into stage s (thread 0).
static __device__ __forceinline__ void issue(int s, uint8_t *ring, unsigned sb, uint64_t *full, const mk_item *desc) {
    const mk_item &it = desc[s];
    fence_proxy_async();
    mbar_expect_tx(&full[s], it.bytes + it.bytes2);
    uint8_t *st = ring + (size_t)s * sb;
    if (it.bytes) bulk_g2s(st, it.src, it.bytes, &full[s]);
    if (it.bytes2) bulk_g2s(st + it.off2, it.src2, it.bytes2, &full[s]);
}

// Thread 0's cursor over the block's items: layer l, phase k (0 q/k/v, 1 wo,
// 2 gate/up, 3 down), the next row r of the phase's matrices stacked and the
// end of the block's rows hi (r < 0: the phase not started).
struct mk_gen { int l, k, r, hi; };
static __device__ __forceinline__ const unsigned char *al16_dn(const uint8_t *p) {
    return (const uint8_t *)((uintptr_t)p & ~(uintptr_t)15);
}
// The next item into *it; false when every layer is done.
static __device__ bool gen_next(mk_gen &g, const mk_layer *lay, int n_layer, mk_item *it) {
    if (g.l >= n_layer) return false;
    const mk_layer &L = lay[g.l];
    const int m0 = g.k == 0 ? MK_WQ : g.k == 1 ? MK_WO : g.k == 2 ? MK_GATE : MK_DOWN, nm = g.k == 0 ? 3 : 1;
    if (g.r < 0) { // (R G < 2^32: hx_mega_new checks)
        unsigned R = 0;
        for (int j = 0; j < nm; j++) R += (unsigned)L.m[m0 + j].rows;
        g.r = R * blockIdx.x / gridDim.x;
        g.hi = R * (blockIdx.x + 1) / gridDim.x;
    }
    *it = mk_item{};
    if (g.r < g.hi) {
        int base = 0, j = m0;
        while (g.r >= base + L.m[j].rows) base += L.m[j++].rows;
        const mk_mat &M = L.m[j];
        int row = g.r - base, end = base + M.rows < g.hi ? base + M.rows : g.hi;
        int n = end - g.r < M.per ? end - g.r : M.per;
        const uint8_t *s1 = M.d + (size_t)row * M.rb;
        it->src = al16_dn(s1);
        it->d1 = (unsigned)(s1 - it->src);
        it->bytes = (it->d1 + (unsigned)n * M.rb + 15) & ~15u;
        if (g.k == 2) {
            const mk_mat &U = L.m[MK_UP];
            const uint8_t *s2 = U.d + (size_t)row * U.rb;
            it->src2 = al16_dn(s2);
            it->d2 = (unsigned)(s2 - it->src2);
            it->bytes2 = (it->d2 + (unsigned)n * U.rb + 15) & ~15u;
            it->off2 = it->bytes;
            it->bias2 = U.bias;
        }
        it->out = g.k == 0 ? MK_Q + (j - MK_WQ) : g.k == 2 ? MK_H : MK_X;
        it->bias = M.bias;
        it->r0 = row;
        it->n = n;
        it->cols = M.cols;
        it->rb = (int)M.rb;
        it->type = M.type;
        it->flags = (g.k == 1 || g.k == 3 ? MK_ACC : 0) | (g.k == 2 ? MK_GLU : 0);
        g.r += n;
    }
    if (g.r >= g.hi) { // the block's last item of this phase (an empty one when it has no rows)
        it->flags |= MK_LAST;
        g.r = -1;
        if (++g.k == 4) { g.k = 0; g.l++; }
    }
    return true;
}

// The rows of one item, a warp per row (warp w of nw: rows w, w + nw, ...),
// each finished by its warp's lane 0: times rs (the input's norm scale, see
// norm_q8), bias, GLU (act(gate) * up), the residual add (MK_ACC: xs holds x
// as this phase's norm read it), stored in y.
template <int T, bool GLU>
static __device__ __forceinline__ void mk_rows(const uint8_t *st, const mk_item &it, const int8_t *xq, const float *xd,
                                               const float *xs, float *y, int act, float rs) {
    int lane = threadIdx.x & 31;
    for (int i = threadIdx.x >> 5; i < it.n; i += blockDim.x >> 5) {
        const uint8_t *w0 = st + it.d1 + (size_t)i * it.rb;
        const uint8_t *w1 = GLU ? st + it.off2 + it.d2 + (size_t)i * it.rb : NULL;
        float a0 = 0.0f, a1 = 0.0f;
        row_dot<T, GLU>(w0, w1, it.cols, lane, WARP, xq, xd, a0, a1);
        a0 = warp_sum(a0);
        if (GLU) a1 = warp_sum(a1);
        if (lane) continue;
        int row = it.r0 + i;
        a0 *= rs;
        if (GLU) a1 *= rs;
        if (it.bias) a0 += it.bias[row];
        if (GLU) {
            if (it.bias2) a1 += it.bias2[row];
            y[row] = ffn_act(a0, act) * a1;
        } else {
            y[row] = (it.flags & MK_ACC) ? xs[row] + a0 : a0;
        }
    }
}

// The input of a normed phase: xq/xd = q8(x * g) over n elements (a multiple
// of 32), xs = x (the residual adds of the phase after read it), and the
// RMSNorm's scale rsqrt(mean(x^2) + eps) returned. The scale is left out of
// the 8-bit blocks (each block's own scale absorbs any factor) and multiplies
// the dot products instead, so the sum of squares needs no barrier of its own:
// the warps' partial sums meet in red at the one barrier that publishes xq.
// Four groups of 32 in flight per warp.
static __device__ __forceinline__ float norm_q8(const float *x, const float *g, int n, float eps, int8_t *xq,
                                                float *xd, float *xs, float *red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5, ng = n / 32;
    float ss = 0.0f;
    for (int g0 = w; g0 < ng; g0 += 4 * nw) {
        float v[4], gw[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int gi = g0 + j * nw;
            v[j] = gi < ng ? __ldcg(x + gi * 32 + lane) : 0.0f;
            gw[j] = gi < ng ? g[gi * 32 + lane] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int gi = g0 + j * nw;
            if (gi >= ng) break;
            xs[gi * 32 + lane] = v[j];
            ss += v[j] * v[j];
            warp_q8(v[j] * gw[j], xq + gi * 32 + lane, xd + gi);
        }
    }
    ss = warp_sum(ss);
    if (lane == 0) red[w] = ss;
    __syncthreads();
    float tot = 0.0f;
    for (int k = 0; k < nw; k++) tot += red[k];
    return rsqrtf(tot / n + eps);
}
// xq/xd = q8(h) over n elements, 8 groups of 32 in flight per warp.
static __device__ __forceinline__ void plain_q8(const float *h, int n, int8_t *xq, float *xd) {
    int lane = threadIdx.x & 31, ng = n / 32, nw = blockDim.x >> 5;
    for (int g0 = threadIdx.x >> 5; g0 < ng; g0 += 8 * nw) {
        float v[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int gi = g0 + j * nw;
            v[j] = gi < ng ? __ldcg(h + gi * 32 + lane) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int gi = g0 + j * nw;
            if (gi < ng) warp_q8(v[j], xq + gi * 32 + lane, xd + gi);
        }
    }
    __syncthreads();
}
// xq/xd from global (the attention's q8 output, n elements).
static __device__ __forceinline__ void copy_q8(const int8_t *gq, const float *gd, int n, int8_t *xq, float *xd) {
    for (int i = threadIdx.x; i < n / 16; i += blockDim.x) ((int4 *)xq)[i] = __ldcg((const int4 *)gq + i);
    for (int i = threadIdx.x; i < n / 32; i += blockDim.x) xd[i] = __ldcg(gd + i);
    __syncthreads();
}
#endif

template <int E, int NT> __global__ void __launch_bounds__(NT, 1) k_mega(mk_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ __align__(8) uint64_t full[MK_MAX_STAGES];
    __shared__ mk_item desc[MK_MAX_STAGES];
    __shared__ float red[32];
    const int tid = threadIdx.x, ns = a.ns;
    uint8_t *ring = smem;
    mk_layer *lay = (mk_layer *)(smem + a.lay_off);
    int8_t *xq_s = (int8_t *)(smem + a.act_off);
    float *xd_s = (float *)(smem + a.xd_off), *xs = (float *)(smem + a.xs_off);
    float *att_sm = (float *)(smem + a.att_off);
    if (tid == 0) {
        for (int s = 0; s < ns; s++) mbar_init(&full[s], 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    for (int i = tid; i < a.n_layer * (int)(sizeof(mk_layer) / 4); i += NT)
        ((int *)lay)[i] = ((const int *)a.layers)[i];
    __syncthreads();
    // thread 0 keeps the ring full: the next item made into desc[s] and its copies issued into stage s
    int consumed = 0;
    mk_gen g = {0, 0, -1, 0};
    if (tid == 0)
        for (int s = 0; s < ns && gen_next(g, lay, a.n_layer, &desc[s]); s++) issue(s, ring, a.sb, full, desc);
    const int p = *a.d_pos;
    // developer timing: block 0's thread 0 adds the time since the last mark to slot k
    __shared__ unsigned long long tms[MK_T_SLOTS];
    const bool timed = a.tm && blockIdx.x == 0 && tid == 0;
    if (timed)
        for (int k = 0; k < MK_T_SLOTS; k++) tms[k] = 0;
    unsigned long long t_last = timed ? gtimer() : 0;
    auto mark = [&](int k) {
        if (!timed) return;
        unsigned long long t = gtimer();
        tms[k] += t - t_last;
        t_last = t;
    };
    // the items of one phase, its input in xq_s / xd_s (wslot: the timing slot of its waits). Stages
    // [refilled, consumed) are used and not yet refilled: thread 0 refills them after a block-wide
    // barrier, once half the ring is used and at the end of the phase (end_phase)
    int refilled = 0;
    auto refill = [&]() { // after a __syncthreads: every thread is done with those stages
        if (tid == 0)
            for (; refilled < consumed; refilled++) {
                int s = refilled % ns;
                if (gen_next(g, lay, a.n_layer, &desc[s])) issue(s, ring, a.sb, full, desc);
            }
        refilled = consumed;
    };
    auto run_phase = [&](int wslot, float rs) {
        for (;;) {
            int s = consumed % ns;
            unsigned long long tw = timed ? gtimer() : 0;
            mbar_wait(&full[s], (unsigned)(consumed / ns) & 1u);
            if (timed) tms[wslot] += gtimer() - tw;
            const mk_item it = desc[s];
            const uint8_t *st = ring + (size_t)s * a.sb;
            const bool glu = it.flags & MK_GLU;
            float *y = it.out == MK_Q ? a.q : it.out == MK_K ? a.k : it.out == MK_V ? a.v : it.out == MK_X ? a.x : a.h;
            switch (it.type) {
#define X(T) case T: if (glu) mk_rows<T, true>(st, it, xq_s, xd_s, xs, y, a.act, rs); \
                     else mk_rows<T, false>(st, it, xq_s, xd_s, xs, y, a.act, rs); break;
                HX_MVQ_TYPES(X)
#undef X
            }
            consumed++;
            if (it.flags & MK_LAST) break;
            if (2 * (consumed - refilled) >= ns) {
                __syncthreads();
                refill();
            }
        }
    };
    // the end of a phase: every block (unless last) with the stages it used refilled while the
    // others arrive
    auto end_phase = [&](bool last) {
        __syncthreads();
        unsigned old = tid == 0 && !last ? grid_arrive(a.bar) : 0;
        refill();
        if (tid == 0 && !last) grid_wait(a.bar, old);
        __syncthreads();
    };
    const int qdim = a.nh * a.hd;
    for (int l = 0; l < a.n_layer; l++) {
        const mk_layer &L = lay[l];
        // q/k/v
        float rs = norm_q8(a.x, L.attn_norm, a.D, a.eps, xq_s, xd_s, xs, red);
        mark(0);
        run_phase(MK_T_WAIT + 0, rs);
        mark(1);
        end_phase(false);
        mark(2);
        // attention: the (head, chunk) items that hold positions, spread over the blocks. Chunks of at
        // least a.chunk positions, longer when that gives more items than blocks (a merge costs a round trip)
        {
            int len = p + 1 - hx_att_first(p, L.window), per = gridDim.x / a.nh > 0 ? gridDim.x / a.nh : 1;
            int chunk = a.chunk;
            if (len > chunk * per) chunk = ((len + per - 1) / per + 31) / 32 * 32;
            hx_attn_args A = {a.q, a.k, a.v, L.kc + (size_t)a.slot * L.slot_stride, L.vc + (size_t)a.slot * L.slot_stride,
                              L.rows, a.att, a.nh, a.nkvh, a.hd, a.scale, a.softcap, L.window, L.base, a.rope_scale,
                              a.neox, L.q_norm, L.k_norm, a.eps, L.rope_tab, a.apart, a.acount, chunk, a.xq, a.xd};
            int nact = att_span_of(A, p, 0).nact;
            for (int j = blockIdx.x; j < a.nh * nact; j += gridDim.x) {
                attn_decode_warp_item<E>(A, j / nact, j % nact, a.nsplit, p, att_sm);
                __syncthreads();
            }
        }
        mark(3);
        grid_sync(a.bar);
        mark(4);
        // wo: x += Wo a
        copy_q8(a.xq, a.xd, qdim, xq_s, xd_s);
        mark(5);
        run_phase(MK_T_WAIT + 1, 1.0f);
        mark(6);
        end_phase(false);
        mark(7);
        // gate/up: h = act(Wg x') * (Wu x'), x' = RMSNorm(x) * ffn_norm
        rs = norm_q8(a.x, L.ffn_norm, a.D, a.eps, xq_s, xd_s, xs, red);
        mark(8);
        run_phase(MK_T_WAIT + 2, rs);
        mark(9);
        end_phase(false);
        mark(10);
        // down: x += Wd h
        plain_q8(a.h, a.ff, xq_s, xd_s);
        mark(11);
        run_phase(MK_T_WAIT + 3, 1.0f);
        mark(12);
        end_phase(l + 1 == a.n_layer);
        mark(13);
    }
    if (timed) {
        for (int k = 0; k < MK_T_SLOTS - 1; k++) a.tm[k] += tms[k];
        a.tm[MK_T_SLOTS - 1] += 1; // launches
    }
#else
    __trap(); // hx_mega_new refuses devices before Hopper
#endif
}

// ---- host: the plan ----

struct hx_mega {
    int G, ns, E, NT;
    unsigned sb;
    size_t smem;
    mk_layer *d_layers;
    unsigned *d_bar;
    unsigned long long *d_tm; // developer timing, or NULL
    mk_args args;
};

static const void *kernel_of(int E, int NT) {
    if (NT == 256) return E == 2 ? (const void *)k_mega<2, 256> : E == 4 ? (const void *)k_mega<4, 256> : (const void *)k_mega<8, 256>;
    return E == 2 ? (const void *)k_mega<2, 512> : E == 4 ? (const void *)k_mega<4, 512> : (const void *)k_mega<8, 512>;
}

// NULL, with the reason in why.
static hx_mega *refuse(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static hx_mega *refuse(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (why && n) vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return NULL;
}

static size_t al16(size_t v) { return (v + 15) & ~(size_t)15; }

hx_mega *hx_mega_new(const hx_mega_in *in, char *why, size_t why_n) {
    int dev = 0, cc = 0, sms = 0, optin = 0, coop = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev) != cudaSuccess)
        return refuse(why, why_n, "the device's attributes could not be read");
    if (cc < 9) return refuse(why, why_n, "compute capability %d.x (bulk copies need 9.0)", cc);
    if (!coop) return refuse(why, why_n, "the device has no cooperative launch");
    const int D = in->n_embd, ff = in->n_ff, hd = in->head_dim, qdim = in->n_head * hd;
    int E = hd == 64 ? 2 : hd == 128 ? 4 : hd == 256 ? 8 : 0;
    if (!E) return refuse(why, why_n, "head size %d (64, 128 or 256)", hd);
    if (D % 32 || ff % 32 || qdim % 32)
        return refuse(why, why_n, "widths %d / %d / %d not multiples of 32", D, ff, qdim);
    size_t max_row = 0;
    for (int l = 0; l < in->n_layer; l++) {
        const hx_mega_layer_in *L = &in->layers[l];
        const hx_dmat *ms[7] = {L->wq, L->wk, L->wv, L->wo, L->gate, L->up, L->down};
        for (const hx_dmat *m : ms) {
            if (!hx_k_mvq_supported(m))
                return refuse(why, why_n, "layer %d has a %s matrix of %d columns (no 8-bit-activation kernel)", l,
                              hx_type_name(m->type), m->cols);
            if (m->row_bytes > max_row) max_row = m->row_bytes;
        }
        if (L->gate->type != L->up->type)
            return refuse(why, why_n, "layer %d: gate and up of different types", l);
        if ((uint64_t)(L->wq->rows + L->wk->rows + L->wv->rows) * (uint64_t)sms >= ((uint64_t)1 << 32) ||
            (uint64_t)L->gate->rows * (uint64_t)sms >= ((uint64_t)1 << 32))
            return refuse(why, why_n, "layer %d: too many rows", l);
    }
    // shared memory: the kernel's static part (as compiled), then (dynamic) the ring, the layer table,
    // act and the attention's scratch
    const int NT = in->threads == 512 ? 512 : 256, nw = NT / 32;
    const void *fn = kernel_of(E, NT);
    cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, fn) != cudaSuccess) {
        cudaGetLastError();
        return refuse(why, why_n, "the kernel's attributes could not be read");
    }
    size_t stat = fa.sharedSizeBytes;
    int maxcols = D > ff ? D : ff;
    if (qdim > maxcols) maxcols = qdim;
    size_t xd_off = al16((size_t)maxcols), xs_off = xd_off + al16((size_t)maxcols / 32 * sizeof(float));
    size_t act = al16(xs_off + sizeof(float) * (size_t)D);
    size_t att = sizeof(float) * ((1 + nw) * (size_t)hd + 2 * nw);
    size_t lay = al16(sizeof(mk_layer) * (size_t)in->n_layer);
    long ring = (long)optin - (long)stat - (long)act - (long)att - (long)lay - 1024;
    // stage size: a block's whole slice of a phase when at least 4 such stages fit (one wait per phase
    // for small models), else 16 KiB (or what the longest row needs)
    size_t slice = 0;
    for (int l = 0; l < in->n_layer; l++) {
        const hx_mega_layer_in *L = &in->layers[l];
        size_t qkv = (size_t)(L->wq->rows + L->wk->rows + L->wv->rows + sms - 1) / sms * L->wq->row_bytes + 48;
        size_t wo = (size_t)(L->wo->rows + sms - 1) / sms * L->wo->row_bytes + 16;
        size_t gu = (size_t)(L->gate->rows + sms - 1) / sms * 2 * L->gate->row_bytes + 32;
        size_t dn = (size_t)(L->down->rows + sms - 1) / sms * L->down->row_bytes + 16;
        for (size_t v : {qkv, wo, gu, dn}) slice = v > slice ? v : slice;
    }
    size_t need = 2 * max_row + 64 > 16384 ? 2 * max_row + 64 : 16384;
    unsigned sb = (unsigned)((slice + 4095) & ~(size_t)4095);
    if (sb < need || ring < 4 * (long)sb) sb = (unsigned)((need + 4095) & ~(size_t)4095);
    int ns = ring > 0 ? (int)(ring / sb) : 0;
    if (ns > MK_MAX_STAGES) ns = MK_MAX_STAGES;
    if (ns < 3)
        return refuse(why, why_n, "rows of %zu bytes leave %d stages of %u bytes in shared memory", max_row, ns, sb);
    hx_mega *m = (hx_mega *)calloc(1, sizeof *m);
    if (!m) return refuse(why, why_n, "out of memory");
    m->E = E;
    m->sb = sb;
    m->ns = ns;
    m->smem = (size_t)ns * sb + lay + act + att;
    m->NT = NT;
    int per_sm = 0;
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)m->smem) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, NT, m->smem) != cudaSuccess || per_sm < 1) {
        size_t smem = m->smem;
        cudaGetLastError();
        free(m);
        return refuse(why, why_n, "one block of %d threads and %zu bytes of shared memory does not fit an SM",
                      NT, smem);
    }
    m->G = sms;
    // the layer table: every matrix with its rows per stage (a stage holds
    // whole rows, each copy rounded out to 16 bytes at both ends)
    std::vector<mk_layer> lays(in->n_layer);
    for (int l = 0; l < in->n_layer; l++) {
        const hx_mega_layer_in *L = &in->layers[l];
        mk_layer y = {};
        const hx_dmat *ms[MK_NMAT] = {L->wq, L->wk, L->wv, L->wo, L->gate, L->up, L->down};
        const float *bs[MK_NMAT] = {L->bq, L->bk, L->bv, L->bo, NULL, L->up_b, L->down_b};
        for (int j = 0; j < MK_NMAT; j++) {
            mk_mat &M = y.m[j];
            M.d = ms[j]->d;
            M.bias = bs[j];
            M.rb = (unsigned)ms[j]->row_bytes;
            M.rows = ms[j]->rows;
            M.cols = ms[j]->cols;
            M.type = ms[j]->type;
            size_t per = j == MK_GATE ? (sb - 32) / (2 * M.rb) : (sb - 16) / M.rb;
            M.per = (int)(per < (size_t)MK_MAX_ROWS ? per : (size_t)MK_MAX_ROWS);
        }
        y.attn_norm = L->attn_norm;
        y.ffn_norm = L->ffn_norm;
        y.q_norm = L->q_norm;
        y.k_norm = L->k_norm;
        y.kc = L->kc;
        y.vc = L->vc;
        y.slot_stride = L->slot_stride;
        y.rope_tab = L->rope_tab;
        y.base = L->rope_base;
        y.window = L->window;
        y.rows = L->kv_rows;
        lays[l] = y;
    }
    bool ok = cudaMalloc((void **)&m->d_layers, sizeof(mk_layer) * lays.size()) == cudaSuccess &&
              cudaMalloc((void **)&m->d_bar, sizeof(unsigned)) == cudaSuccess &&
              cudaMemcpy(m->d_layers, lays.data(), sizeof(mk_layer) * lays.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
              cudaMemset(m->d_bar, 0, sizeof(unsigned)) == cudaSuccess &&
              (!in->times || (cudaMalloc((void **)&m->d_tm, sizeof(unsigned long long) * MK_T_SLOTS) == cudaSuccess &&
                              cudaMemset(m->d_tm, 0, sizeof(unsigned long long) * MK_T_SLOTS) == cudaSuccess));
    if (!ok) {
        cudaGetLastError();
        hx_mega_free(m);
        return refuse(why, why_n, "device memory for the layer table could not be had");
    }
    mk_args &a = m->args;
    a.layers = m->d_layers;
    a.n_layer = in->n_layer;
    a.D = D;
    a.ff = ff;
    a.nh = in->n_head;
    a.nkvh = in->n_head_kv;
    a.hd = hd;
    a.act = in->act;
    a.chunk = in->att_chunk;
    a.nsplit = in->att_splits;
    a.neox = in->neox ? 1 : 0;
    a.eps = in->eps;
    a.scale = in->attn_scale;
    a.softcap = in->softcap;
    a.rope_scale = in->rope_scale;
    a.bar = m->d_bar;
    a.tm = m->d_tm;
    a.ns = ns;
    a.sb = sb;
    a.lay_off = (unsigned)((size_t)ns * sb);
    a.act_off = (unsigned)((size_t)ns * sb + lay);
    a.xd_off = a.act_off + (unsigned)xd_off;
    a.xs_off = a.act_off + (unsigned)xs_off;
    a.att_off = a.act_off + (unsigned)act;
    return m;
}

void hx_mega_free(hx_mega *m) {
    if (!m) return;
    unsigned long long t[MK_T_SLOTS];
    if (m->d_tm && cudaMemcpy(t, m->d_tm, sizeof t, cudaMemcpyDeviceToHost) == cudaSuccess && t[MK_T_SLOTS - 1]) {
        static const char *names[MK_T_PHASES] = {"q/k/v norm+q8", "q/k/v rows", "barrier", "attention", "barrier",
                                                 "wo input", "wo rows", "barrier", "gate/up norm+q8", "gate/up rows",
                                                 "barrier", "down q8", "down rows", "barrier"};
        double per = 1e3 * (double)t[MK_T_SLOTS - 1] * m->args.n_layer, sum = 0;
        fprintf(stderr, "persistent decode kernel, block 0, us per layer (%llu launches):\n", t[MK_T_SLOTS - 1]);
        for (int k = 0; k < MK_T_PHASES; k++) {
            fprintf(stderr, "  %-16s %7.2f\n", names[k], t[k] / per);
            sum += t[k] / per;
        }
        fprintf(stderr, "  %-16s %7.2f\n  waits for weights: q/k/v %.2f, wo %.2f, gate/up %.2f, down %.2f\n", "total",
                sum, t[MK_T_WAIT] / per, t[MK_T_WAIT + 1] / per, t[MK_T_WAIT + 2] / per, t[MK_T_WAIT + 3] / per);
    }
    cudaFree(m->d_tm);
    cudaFree(m->d_layers);
    cudaFree(m->d_bar);
    free(m);
}

cudaError_t hx_mega_launch(hx_mega *m, const hx_mega_bufs *b, cudaStream_t st, int slot, const int *d_pos) {
    mk_args a = m->args;
    a.x = b->x; a.q = b->q; a.k = b->k; a.v = b->v; a.att = b->att; a.h = b->h;
    a.xq = b->xq; a.xd = b->xd; a.apart = b->apart; a.acount = b->acount;
    a.slot = slot;
    a.d_pos = d_pos;
    void *args[] = {(void *)&a};
    const void *fn = kernel_of(m->E, m->NT);
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeCooperative;
    at.val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(m->G);
    cfg.blockDim = dim3(m->NT);
    cfg.dynamicSmemBytes = m->smem;
    cfg.stream = st;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    return cudaLaunchKernelExC(&cfg, fn, args);
}
