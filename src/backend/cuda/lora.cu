// lora.cu — LoRA deltas on the GPU (layouts in lora.cuh).
//
// y += B diag(s) A x for a group of matrices that read the same x. A block
// of LB_THREADS threads owns LB_ROWS output rows of one matrix (GLU: of
// gate and up both) for a tile of up to LT tokens. Fused (n <= LT): the block
// first computes the A x it needs itself; two-phase (larger n): one launch
// writes A x of every token and matrix to t (n, sum of ranks), a second
// applies B from t.
//
// A x is computed by the whole block at once (each thread a stripe of
// columns for KC rank rows, then a block reduction), not a warp per rank
// row: at decode a matrix has few blocks, and a warp walking a 3,072-long row
// alone is a chain of dependent L2 round trips (~30 us for ffn_down).
#include <stdio.h>
#include <atomic>
#include "backend/cuda/lora.cuh"
#include "backend/cuda/warp.cuh"

cudaError_t hx_k_launch_pdl(const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st, void **args);

enum { LT = HX_LORA_FUSE_N, LB_THREADS = 256, LB_WARPS = LB_THREADS / WARP, LB_ROWS = LB_THREADS, KC = 16 };

struct lmat {
    const __half *a, *b;
    const float *s;
    int r, n_out;
    float *y;
    int toff;   // this matrix's first column in t
    int blk0;   // its first block (B phase, not GLU)
};
struct lset {
    lmat m[3];
    int count, n_in, n, rt; // rt: the sum of the ranks (t's row length)
    const float *x, *g;
    float eps;
    int glu;
    float *t;
    int8_t *xq; float *xd;  // GLU at n = 1: the output also as q8 blocks of 32 (hx_k_quant_q8's format)
    int pre;                // fused: A and B's rows copied to shared memory before the PDL wait
    int sm_a, sm_b;         // ... at these byte offsets of the dynamic shared memory (t first)
};

enum { MODE_FUSED = 0, MODE_A = 1, MODE_B = 2 };

// Same as decode.cuh's warp_q8 (hx_k_quant_q8's rounding): a warp's 32 values as int8 with one scale.
static __device__ __forceinline__ void lora_q8(float v, int8_t *q, float *d) {
    float amax = warp_max(fabsf(v));
    float dd = amax / 127.0f;
    *q = (int8_t)(dd > 0.0f ? __float2int_rn(v / dd) : 0);
    if ((threadIdx.x & 31) == 0) *d = dd;
}

// A x of matrix M for tokens t0..t0+nt by the whole block:
// out[tt * ld + k] = s_k * rstd_tt * A_k . (x_tt * g). need_rstd: also the
// RMS of each token's x (into rstd[], from the same pass over x); rstd[]
// must hold 1s (or the values) otherwise. red: LB_WARPS * (KC + 1) * LT floats.
static __device__ void lora_a_block(const lset &S, const lmat &M, const __half *a, int t0, int nt, float *rstd,
                                    bool need_rstd, float *out, int ld, float *red) {
    const int h2 = S.n_in / 2, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const __half2 *A2 = (const __half2 *)a; // M.a, or its copy in shared memory
    const float2 *g2 = (const float2 *)S.g;
    for (int k0 = 0; k0 < M.r || (need_rstd && k0 == 0); k0 += KC) {
        const int kn = M.r - k0 < KC ? M.r - k0 : KC; // <= 0: only the RMS
        const bool with_ss = need_rstd && k0 == 0;
        float acc[KC][LT], ss[LT];
#pragma unroll
        for (int tt = 0; tt < LT; tt++) {
            ss[tt] = 0.0f;
#pragma unroll
            for (int k = 0; k < KC; k++) acc[k][tt] = 0.0f;
        }
        for (int c = threadIdx.x; c < h2; c += LB_THREADS) {
            float2 gw = g2 ? g2[c] : make_float2(1.0f, 1.0f);
            float2 xv[LT];
#pragma unroll
            for (int tt = 0; tt < LT; tt++) {
                xv[tt] = make_float2(0.0f, 0.0f);
                if (tt < nt) {
                    float2 v = ((const float2 *)(S.x + (size_t)(t0 + tt) * S.n_in))[c];
                    ss[tt] += v.x * v.x + v.y * v.y;
                    xv[tt] = make_float2(v.x * gw.x, v.y * gw.y);
                }
            }
#pragma unroll
            for (int k = 0; k < KC; k++)
                if (k < kn) {
                    float2 a = __half22float2(A2[(size_t)(k0 + k) * h2 + c]);
#pragma unroll
                    for (int tt = 0; tt < LT; tt++) acc[k][tt] += a.x * xv[tt].x + a.y * xv[tt].y;
                }
        }
#pragma unroll
        for (int tt = 0; tt < LT; tt++) {
            if (tt >= nt) continue;
#pragma unroll
            for (int k = 0; k < KC; k++)
                if (k < kn) {
                    float v = warp_sum(acc[k][tt]);
                    if (lane == 0) red[(w * (KC + 1) + k) * LT + tt] = v;
                }
            if (with_ss) {
                float v = warp_sum(ss[tt]);
                if (lane == 0) red[(w * (KC + 1) + KC) * LT + tt] = v;
            }
        }
        __syncthreads();
        if (with_ss && (int)threadIdx.x < nt) {
            float sum = 0.0f;
            for (int i = 0; i < LB_WARPS; i++) sum += red[(i * (KC + 1) + KC) * LT + threadIdx.x];
            rstd[threadIdx.x] = rsqrtf(sum / S.n_in + S.eps);
        }
        __syncthreads();
        if ((int)threadIdx.x < KC * LT) {
            int k = threadIdx.x / LT, tt = threadIdx.x % LT;
            if (k < kn && tt < nt) {
                float sum = 0.0f;
                for (int i = 0; i < LB_WARPS; i++) sum += red[(i * (KC + 1) + k) * LT + tt];
                out[tt * ld + k0 + k] = sum * rstd[tt] * M.s[k0 + k];
            }
        }
        __syncthreads(); // red reused
    }
}

// Copies n halves (src and dst 4-byte aligned, n even) by the whole block.
static __device__ __forceinline__ void copy_halves(__half *dst, const __half *src, size_t n) {
#pragma unroll 8
    for (size_t i = threadIdx.x; i < n / 2; i += blockDim.x) ((__half2 *)dst)[i] = ((const __half2 *)src)[i];
}

template <int MODE>
__global__ void __launch_bounds__(LB_THREADS) k_lora(lset S) {
    extern __shared__ __align__(16) unsigned char dsm[];
    float *tsm = (float *)dsm; // (LT, rank columns of this block's matrices), then (pre) A's and B's rows
    __shared__ float red[LB_WARPS * (KC + 1) * LT];
    __shared__ float rstd[LT];
    pdl_trigger();
    const int t0 = blockIdx.y * LT, nt = S.n - t0 < LT ? S.n - t0 : LT;
    int j0, j1, slice;
    if (MODE == MODE_A) { j0 = blockIdx.x; j1 = j0 + 1; slice = 0; }
    else if (S.glu >= 0) { j0 = 0; j1 = 2; slice = blockIdx.x; }
    else {
        j0 = S.count - 1;
        while (j0 > 0 && (int)blockIdx.x < S.m[j0].blk0) j0--;
        j1 = j0 + 1;
        slice = blockIdx.x - S.m[j0].blk0;
    }
    // the adapter's bytes do not depend on the kernel before: into L2 while it drains
    if (blockIdx.y == 0)
        for (int j = j0; j < j1; j++) {
            const lmat &M = S.m[j];
            if (MODE != MODE_B)
                for (size_t o = (size_t)threadIdx.x * 128; o < (size_t)M.r * S.n_in * 2; o += (size_t)blockDim.x * 128)
                    prefetch_l2((const uint8_t *)M.a + o);
            if (MODE != MODE_A) {
                int r0 = slice * LB_ROWS, r1 = r0 + LB_ROWS < M.n_out ? r0 + LB_ROWS : M.n_out;
                const uint8_t *bb = (const uint8_t *)(M.b + (size_t)r0 * M.r);
                for (size_t o = (size_t)threadIdx.x * 128; r1 > r0 && o < (size_t)(r1 - r0) * M.r * 2;
                     o += (size_t)blockDim.x * 128)
                    prefetch_l2(bb + o);
            }
        }
    // pre: the block's A rows and B rows into shared memory while the kernel before drains
    const __half *pa[2] = {NULL, NULL}, *pb[2] = {NULL, NULL};
    {
        __half *sa = (__half *)(dsm + S.sm_a), *sb = (__half *)(dsm + S.sm_b);
        for (int j = j0; j < j1; j++) {
            const lmat &M = S.m[j];
            pa[j - j0] = M.a;
            pb[j - j0] = M.b + (size_t)slice * LB_ROWS * M.r;
            if (MODE != MODE_FUSED || !S.pre || M.r == 0) continue;
            int r0 = slice * LB_ROWS, r1 = r0 + LB_ROWS < M.n_out ? r0 + LB_ROWS : M.n_out;
            copy_halves(sa, M.a, (size_t)M.r * S.n_in);
            size_t nb = (size_t)(r1 - r0) * M.r;
            copy_halves(sb, M.b + (size_t)r0 * M.r, nb & ~(size_t)1);
            if ((nb & 1) && threadIdx.x == 0) sb[nb - 1] = M.b[(size_t)r0 * M.r + nb - 1];
            pa[j - j0] = sa;
            pb[j - j0] = sb;
            sa += (size_t)M.r * S.n_in;
            sb += ((size_t)LB_ROWS * M.r + 1) & ~(size_t)1;
        }
    }
    if (threadIdx.x < LT) rstd[threadIdx.x] = 1.0f;
    __syncthreads();
    pdl_wait();
    int ld = 0; // tsm row length: the ranks of matrices j0..j1
    for (int j = j0; j < j1; j++) ld += S.m[j].r;
    if (MODE != MODE_B) {
        int off = 0;
        for (int j = j0; j < j1; j++) {
            const lmat &M = S.m[j];
            bool need = S.g != NULL && j == j0;
            if (MODE == MODE_A) lora_a_block(S, M, M.a, t0, nt, rstd, need, S.t + (size_t)t0 * S.rt + M.toff, S.rt, red);
            else lora_a_block(S, M, pa[j - j0], t0, nt, rstd, need, tsm + off, ld, red);
            off += M.r;
        }
        if (MODE == MODE_A) return;
    } else {
        int off = 0;
        for (int j = j0; j < j1; j++) {
            const lmat &M = S.m[j];
            for (int i = threadIdx.x; i < nt * M.r; i += blockDim.x) {
                int tt = i / M.r, k = i % M.r;
                tsm[tt * ld + off + k] = S.t[(size_t)(t0 + tt) * S.rt + M.toff + k];
            }
            off += M.r;
        }
        __syncthreads();
    }
    const int o = slice * LB_ROWS + threadIdx.x;
    float acc0[LT], acc1[LT];
#pragma unroll
    for (int tt = 0; tt < LT; tt++) acc0[tt] = acc1[tt] = 0.0f;
    if (o < S.m[j0].n_out) {
        const lmat &M = S.m[j0];
        const __half *br = pb[0] + (size_t)threadIdx.x * M.r; // row o of B (pb: its slice's first row)
#pragma unroll 8
        for (int k = 0; k < M.r; k++) {
            float b = __half2float(br[k]);
#pragma unroll
            for (int tt = 0; tt < LT; tt++) acc0[tt] += b * tsm[tt * ld + k];
        }
        if (j1 - j0 == 2) { // GLU: up's columns follow gate's
            const lmat &U = S.m[j0 + 1];
            const __half *ur = pb[1] + (size_t)threadIdx.x * U.r;
#pragma unroll 8
            for (int k = 0; k < U.r; k++) {
                float b = __half2float(ur[k]);
#pragma unroll
                for (int tt = 0; tt < LT; tt++) acc1[tt] += b * tsm[tt * ld + M.r + k];
            }
        }
    }
    if (o >= S.m[j0].n_out) return; // whole warps when xq is set (n_out a multiple of 32)
#pragma unroll
    for (int tt = 0; tt < LT; tt++) {
        if (tt >= nt) break;
        if (S.glu >= 0) {
            size_t i = (size_t)(t0 + tt) * S.m[0].n_out + o;
            float v = ffn_act(S.m[0].y[i] + acc0[tt], S.glu) * (S.m[1].y[i] + acc1[tt]);
            S.m[0].y[i] = v;
            if (MODE == MODE_FUSED && S.xq) lora_q8(v, S.xq + o, S.xd + o / 32);
        } else {
            S.m[j0].y[(size_t)(t0 + tt) * S.m[j0].n_out + o] += acc0[tt];
        }
    }
}

// Dynamic shared memory the preloading kernels may take (set by hx_k_lora_prepare).
enum { PRE_MAX = 200 * 1024 };
// The kernel attribute is the current device's: one bit per device prepared.
static std::atomic<unsigned long long> g_prepared{0};
static bool prepared() {
    int dev = 0;
    return cudaGetDevice(&dev) == cudaSuccess && (g_prepared.load() >> (dev & 63) & 1);
}

static size_t al16(size_t b) { return (b + 15) & ~(size_t)15; }

cudaError_t hx_k_lora(cudaStream_t st, int count, const hx_lora_dmat *const *Ms, const float *x, const float *norm_w,
                      float eps, int n, float *const *ys, int glu_act, float *t, int8_t *xq, float *xd, bool preload) {
    if (count < 1 || count > 3 || n < 1 || (glu_act >= 0 && count != 2)) return cudaErrorInvalidValue;
    lset S = {};
    S.n_in = Ms[0]->n_in;
    S.n = n;
    S.x = x;
    S.g = norm_w;
    S.eps = eps;
    S.glu = glu_act;
    S.t = t;
    int blocks = 0, rmax_block = 0;
    for (int j = 0; j < count; j++) {
        const hx_lora_dmat *M = Ms[j];
        if (M->n_in != S.n_in || (M->r > 0 && S.n_in % 2)) return cudaErrorInvalidValue;
        if (M->r == 0 && glu_act < 0) continue; // nothing to add to this one
        lmat &m = S.m[S.count++];
        m.a = M->a; m.b = M->b; m.s = M->s; m.r = M->r; m.n_out = M->n_out; m.y = ys[j];
        m.toff = S.rt;
        m.blk0 = blocks;
        S.rt += M->r;
        if (glu_act < 0) {
            blocks += (M->n_out + LB_ROWS - 1) / LB_ROWS;
            if (M->r > rmax_block) rmax_block = M->r;
        }
    }
    if (S.rt == 0) return cudaSuccess; // (GLU without deltas is the caller's hx_k_glu)
    if (glu_act >= 0) {
        if (Ms[0]->n_out != Ms[1]->n_out) return cudaErrorInvalidValue;
        blocks = (Ms[0]->n_out + LB_ROWS - 1) / LB_ROWS;
        rmax_block = S.rt;
        if (xq && n == 1 && Ms[0]->n_out % 32 == 0) { S.xq = xq; S.xd = xd; }
        else if (xq) return cudaErrorInvalidValue;
    } else if (xq) {
        return cudaErrorInvalidValue;
    }
    int tiles = (n + LT - 1) / LT;
    size_t smem = sizeof(float) * LT * (size_t)rmax_block;
    if (smem > 48 * 1024) return cudaErrorInvalidValue; // ranks summing past 3,072
    if (preload && prepared() && n <= LT) { // the A and B rows a block reads, in shared memory
        size_t a = 0, b = 0;
        for (int j = 0; j < S.count; j++) {
            size_t aj = (size_t)S.m[j].r * S.n_in * 2, bj = (((size_t)LB_ROWS * S.m[j].r + 1) & ~(size_t)1) * 2;
            if (glu_act >= 0) { a += aj; b += bj; }
            else { a = aj > a ? aj : a; b = bj > b ? bj : b; }
        }
        size_t total = al16(smem) + al16(a) + b;
        if (total <= PRE_MAX) {
            S.pre = 1;
            S.sm_a = (int)al16(smem);
            S.sm_b = (int)(al16(smem) + al16(a));
            smem = total;
        }
    }
    void *args[] = {&S};
    if (n <= LT) return hx_k_launch_pdl((const void *)k_lora<MODE_FUSED>, dim3(blocks, tiles), dim3(LB_THREADS), smem, st, args);
    if (!t) return cudaErrorInvalidValue;
    cudaError_t rc = hx_k_launch_pdl((const void *)k_lora<MODE_A>, dim3(S.count, tiles), dim3(LB_THREADS), 0, st, args);
    if (rc != cudaSuccess) return rc;
    return hx_k_launch_pdl((const void *)k_lora<MODE_B>, dim3(blocks, tiles), dim3(LB_THREADS), smem, st, args);
}

// One token, one block of RES_THREADS: t = s * A in (r), x' = x + B t written
// back, and with xq: q8(x' * rstd(x') * g) for the next matvec.
enum { RES_THREADS = 1024, RES_WARPS = RES_THREADS / WARP };
__global__ void __launch_bounds__(RES_THREADS) k_lora_res(const __half *a, const __half *b, const float *s, int r,
                                                          int n_in, int n_x, const float *in, float *x,
                                                          const float *g, float eps, int8_t *xq, float *xd, int pre_a) {
    extern __shared__ __align__(16) unsigned char dsm[]; // t (r), then x' (n_x); pre_a: A, then B at byte pre_a
    float *tv = (float *)dsm, *xs = tv + r;
    __shared__ float red[RES_WARPS * KC];
    pdl_trigger();
    if (pre_a) { // A and B into shared memory while the kernel before drains
        __half *sa = (__half *)(dsm + pre_a), *sb = sa + (size_t)r * n_in;
        size_t nb = (size_t)n_x * r;
        copy_halves(sa, a, (size_t)r * n_in);
        copy_halves(sb, b, nb & ~(size_t)1);
        if ((nb & 1) && threadIdx.x == 0) sb[nb - 1] = b[nb - 1];
        a = sa;
        b = sb;
        __syncthreads();
    } else {
        for (size_t o = (size_t)threadIdx.x * 128; o < (size_t)r * n_in * 2; o += (size_t)RES_THREADS * 128)
            prefetch_l2((const uint8_t *)a + o);
        for (size_t o = (size_t)threadIdx.x * 128; o < (size_t)r * n_x * 2; o += (size_t)RES_THREADS * 128)
            prefetch_l2((const uint8_t *)b + o);
    }
    pdl_wait();
    const int h2 = n_in / 2, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const __half2 *A2 = (const __half2 *)a;
    for (int k0 = 0; k0 < r; k0 += KC) {
        const int kn = r - k0 < KC ? r - k0 : KC;
        float acc[KC];
#pragma unroll
        for (int k = 0; k < KC; k++) acc[k] = 0.0f;
        for (int c = threadIdx.x; c < h2; c += RES_THREADS) {
            float2 xv = ((const float2 *)in)[c];
#pragma unroll
            for (int k = 0; k < KC; k++)
                if (k < kn) {
                    float2 av = __half22float2(A2[(size_t)(k0 + k) * h2 + c]);
                    acc[k] += av.x * xv.x + av.y * xv.y;
                }
        }
#pragma unroll
        for (int k = 0; k < KC; k++)
            if (k < kn) {
                float v = warp_sum(acc[k]);
                if (lane == 0) red[w * KC + k] = v;
            }
        __syncthreads();
        if ((int)threadIdx.x < kn) {
            float sum = 0.0f;
            for (int i = 0; i < RES_WARPS; i++) sum += red[i * KC + threadIdx.x];
            tv[k0 + threadIdx.x] = sum * s[k0 + threadIdx.x];
        }
        __syncthreads();
    }
    float ss = 0.0f;
    for (int o = threadIdx.x; o < n_x; o += RES_THREADS) {
        const __half *br = b + (size_t)o * r;
        float acc = 0.0f;
#pragma unroll 8
        for (int k = 0; k < r; k++) acc += __half2float(br[k]) * tv[k];
        float v = x[o] + acc;
        x[o] = v;
        xs[o] = v;
        ss += v * v;
    }
    if (!xq) return;
    __shared__ float red2[32];
    float scale = rsqrtf(block_sum(ss, red2) / n_x + eps);
    for (int o = threadIdx.x; o < n_x; o += RES_THREADS) { // whole warps: n_x is a multiple of 32
        float v = xs[o] * scale;
        if (g) v *= g[o];
        lora_q8(v, xq + o, xd + o / 32);
    }
}

cudaError_t hx_k_lora_res(cudaStream_t st, const hx_lora_dmat *M, const float *in, float *x, const float *norm_w,
                          float eps, int8_t *xq, float *xd, bool preload) {
    if (M->r <= 0 || M->n_in % 2 || (xq && M->n_out % 32)) return cudaErrorInvalidValue;
    size_t smem = sizeof(float) * ((size_t)M->r + M->n_out);
    if (smem > 48 * 1024) return cudaErrorInvalidValue; // hx_k_lora_res_fits
    int pre_a = 0;
    size_t total = al16(smem) + al16((size_t)M->r * M->n_in * 2) + (((size_t)M->n_out * M->r + 1) & ~(size_t)1) * 2;
    if (preload && prepared() && total <= PRE_MAX) { pre_a = (int)al16(smem); smem = total; }
    const __half *a = M->a, *b = M->b;
    const float *s = M->s;
    int r = M->r, n_in = M->n_in, n_x = M->n_out;
    void *args[] = {&a, &b, &s, &r, &n_in, &n_x, &in, &x, &norm_w, &eps, &xq, &xd, &pre_a};
    return hx_k_launch_pdl((const void *)k_lora_res, dim3(1), dim3(RES_THREADS), smem, st, args);
}

cudaError_t hx_k_lora_prepare(void) {
    if (prepared()) return cudaSuccess;
    cudaError_t rc = cudaFuncSetAttribute((const void *)k_lora<MODE_FUSED>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          PRE_MAX);
    if (rc == cudaSuccess)
        rc = cudaFuncSetAttribute((const void *)k_lora_res, cudaFuncAttributeMaxDynamicSharedMemorySize, PRE_MAX);
    int dev = 0;
    if (rc == cudaSuccess) rc = cudaGetDevice(&dev);
    if (rc == cudaSuccess) g_prepared.fetch_or(1ull << (dev & 63));
    return rc;
}

bool hx_k_lora_res_fits(const hx_lora_dmat *M) {
    return M->r > 0 && M->n_in % 2 == 0 && sizeof(float) * ((size_t)M->r + M->n_out) <= 48 * 1024;
}

// A block per token: t = s * A[tok] (r), then x[d] += B[d] . t over its rows.
__global__ void __launch_bounds__(LB_THREADS) k_lora_embd(const __half *a, const __half *b, const float *s, int r,
                                                          int n_out, const int *tok, float *x) {
    extern __shared__ float tv[];
    pdl_trigger();
    pdl_wait();
    int i = blockIdx.x, tk = tok[i];
    for (int k = threadIdx.x; k < r; k += blockDim.x) tv[k] = __half2float(a[(size_t)tk * r + k]) * s[k];
    __syncthreads();
    for (int d = threadIdx.x; d < n_out; d += blockDim.x) {
        const __half *br = b + (size_t)d * r;
        float acc = 0.0f;
        for (int k = 0; k < r; k++) acc += __half2float(br[k]) * tv[k];
        x[(size_t)i * n_out + d] += acc;
    }
}

cudaError_t hx_k_lora_embd(cudaStream_t st, const hx_lora_dmat *M, const int *tok, int n, float *x) {
    if (M->r == 0 || n < 1) return cudaSuccess;
    const __half *a = M->a, *b = M->b;
    const float *s = M->s;
    int r = M->r, n_out = M->n_out;
    void *args[] = {&a, &b, &s, &r, &n_out, &tok, &x};
    return hx_k_launch_pdl((const void *)k_lora_embd, dim3(n), dim3(LB_THREADS), sizeof(float) * r, st, args);
}
