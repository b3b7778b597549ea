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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

// xq/xd = q8(x * rsqrt(mean(x^2) + eps) * g) (no norm when g is NULL); cols a
// multiple of 32. A warp per block of 32, up to 32 of them per thread block
// (so rows up to 1,024 take one thread block, as before); with the norm every
// thread block sums the squares of the whole row itself (one round trip to
// L2, all loads in flight: summing once would need a second launch). One thread
// block for every row length took a loop of dependent loads per warp: 6.1 us
// for 4,096 columns with the norm, 9.6 us for 14,336 (H100, ncu,
// llama-3.1-8b decode), a fifth of its layer.
enum { QQ_WARPS = 32 };
__global__ void __launch_bounds__(QQ_WARPS * WARP) k_quant_q8(const float *__restrict__ x, const float *__restrict__ g,
                                                             float eps, int cols, int8_t *__restrict__ xq,
                                                             float *__restrict__ xd) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    int lane = threadIdx.x & 31, gi = blockIdx.x * QQ_WARPS + (threadIdx.x >> 5);
    float scale = 1.0f;
    if (g) {
        float ss = 0.0f;
#pragma unroll 8
        for (int i = threadIdx.x; i < cols; i += blockDim.x) ss += x[i] * x[i];
        scale = rsqrtf(block_sum(ss, red) / cols + eps);
    }
    if (gi >= cols / 32) return;
    int i = gi * 32 + lane;
    float v = x[i] * scale;
    if (g) v *= g[i];
    warp_q8(v, xq + i, xd + gi);
}

// A row per wpr warps (1, 2 or 4, see mvq_wpr: more warps per row when there
// are few rows, so that enough loads are in flight); matrices as in k_mv_multi (up to 3
// stacked, or GLU: 0 = gate, 1 = up). Matrices from first2 on are of type T2
// (q4_k_m files keep V in Q6_K beside Q/K in Q4_K: one launch for the three).
template <int T, int T2, bool GLU>
__global__ void __launch_bounds__(Q_WARPS * WARP)
k_mvq(hx_mv_set s, int cols, const int8_t *__restrict__ xq, const float *__restrict__ xd, int accumulate, int act,
      int wpr, int first2) {
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
    if (live && (T == T2 || m < first2)) row_dot<T, GLU>(w0, w1, cols, sub * WARP + lane, WARP * wpr, xq, xd, a0, a1);
    else if (live) row_dot<T2, GLU>(w0, w1, cols, sub * WARP + lane, WARP * wpr, xq, xd, a0, a1);
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
        s.y[0][row] = ffn_act(a0, act) * a1;
        return;
    }
    const float *bias = m == 0 ? s.bias[0] : m == 1 ? s.bias[1] : s.bias[2];
    float *y = m == 0 ? s.y[0] : m == 1 ? s.y[1] : s.y[2];
    if (bias) a0 += bias[row];
    y[row] = accumulate ? y[row] + a0 : a0;
}

// One matrix with many short rows (the output matrix: 151,936 x 1,024):
// LPR lanes per row, 32 / LPR rows per warp, so that each lane has several
// units in flight instead of one (a row of 32 units on 32 lanes is one load
// each and a whole warp reduction per row).
template <int T, int LPR>
__global__ void __launch_bounds__(Q_WARPS * WARP)
k_mvq_rows(const uint8_t *__restrict__ w, size_t rb, int rows, int cols, const int8_t *__restrict__ xq,
           const float *__restrict__ xd, float *__restrict__ y, const float *__restrict__ bias, int accumulate) {
    int lane = threadIdx.x, sub = lane % LPR;
    int r = (blockIdx.x * Q_WARPS + threadIdx.y) * (WARP / LPR) + lane / LPR;
    bool live = r < rows;
    const uint8_t *wr = w + (size_t)(live ? r : 0) * rb;
    pdl_trigger();
    if (live)
        for (size_t o = (size_t)sub * 128; o < rb; o += (size_t)LPR * 128) prefetch_l2(wr + o);
    pdl_wait();
    float a = 0.0f, unused = 0.0f;
    if (live) row_dot<T, false>(wr, NULL, cols, sub, LPR, xq, xd, a, unused);
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    if (!live || sub != 0) return;
    if (bias) a += bias[r];
    y[r] = accumulate ? y[r] + a : a;
}

cudaError_t hx_k_quant_q8(cudaStream_t st, const float *x, const float *norm_w, float eps, int cols, int8_t *xq,
                          float *xd) {
    if (cols % 32) return cudaErrorInvalidValue;
    int groups = cols / 32;
    void *args[] = {(void *)&x, (void *)&norm_w, (void *)&eps, (void *)&cols, (void *)&xq, (void *)&xd};
    return hx_k_launch_pdl((const void *)k_quant_q8, dim3((groups + QQ_WARPS - 1) / QQ_WARPS), dim3(QQ_WARPS * WARP),
                           0, st, args);
}

// Where Ws[0..count) split for one launch: count when all share one type; the
// index of the first Q6_K matrix when they are a run of Q4_K then a run of
// Q6_K; -1 otherwise (not one launch).
static int mix_split(const hx_dmat *const *Ws, int count) {
    int j = 1;
    while (j < count && Ws[j]->type == Ws[0]->type) j++;
    if (j == count) return count;
    if (Ws[0]->type != HX_TYPE_Q4_K) return -1;
    for (int i = j; i < count; i++)
        if (Ws[i]->type != HX_TYPE_Q6_K) return -1;
    return j;
}
bool hx_k_mvq_one_launch(const hx_dmat *const *Ws, int count, const hx_cuda_dev_opts *dv) {
    const bool no_mix = dv && dv->mvq_no_mix;
    for (int i = 0; i < count; i++)
        if (!hx_k_mvq_supported(Ws[i]) || Ws[i]->cols != Ws[0]->cols) return false;
    int j = mix_split(Ws, count);
    return j == count || (j > 0 && !no_mix);
}

// Warps per row (1, 2 or 4), from end-to-end tg128 on the H100 (each matvec
// of a layer swept over 1/2/4 with the others fixed; qwen3-0.6b, llama-3.2-1b,
// smollm-135m, llama-3.1-8b).
// Q4_K / Q6_K (a unit is 32 weights in one 16-byte load): first enough warps
// for the loads in flight (rows x wpr >= 4096, ~31 per SM; gate and up rows
// count twice), then more per row while each lane keeps >= 2 units. qwen3-0.6b
// q4_k_m 1,285 -> 1,395 tok/s against the old rule (1 from 8192 rows, 2 from
// 2048, else 4), llama-3.2-1b 1,348 -> 1,358, llama-3.1-8b 336 -> 332 (noise),
// all measured with the one-block k_quant_q8 of before.
// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 (a unit is 16 weights): about one unit per lane,
// rows aside: smollm-135m's short rows want wpr 1 (the old rule's 4 lost ~7%
// on its q/k/v), qwen3-0.6b's 1,024-wide rows 2.
// GLU (gate and up: two loads per unit) splits a row only while each lane
// keeps >= 4 units: llama-3.1-8b's 14,336 x 4,096 gate/up (128 units) went
// 2 -> 1 warps, tg128 ~377 -> 383 (H100, mvq_wpr sweep); no other
// preset's gate/up has 128 units.
static int mvq_wpr(int type, int rows, int units, bool glu) {
    int wpr = 1;
    if (type != HX_TYPE_Q4_K && type != HX_TYPE_Q6_K) { // the 32-weight blocks
        while (wpr < 4 && units >= 64 * wpr) wpr *= 2;
        return wpr;
    }
    while (wpr < 4 && rows * wpr < 4096) wpr *= 2;
    while (wpr < 4 && units >= 64 * wpr * (glu ? 4 : 2)) wpr *= 2;
    return wpr;
}

// The timing knobs of dv: a rule for this launch shape (rows: all stacked
// matrices, the gate's alone for gate/up), else mvq_wpr for every launch, to
// sweep one call site at a time. 0: mvq_wpr() decides.
static int wpr_override(int rows, int cols, const hx_cuda_dev_opts *dv) {
    if (!dv) return 0;
    for (int i = 0; i < dv->n_mvq_wpr_rules; i++) {
        const hx_cuda_wpr_rule *r = &dv->mvq_wpr_rules[i];
        if (r->rows == rows && r->cols == cols && (r->wpr == 1 || r->wpr == 2 || r->wpr == 4)) return r->wpr;
    }
    int n = dv->mvq_wpr;
    return n == 1 || n == 2 || n == 4 ? n : 0;
}

template <int T> static const void *rows_kernel(int lpr) {
    return lpr == 8 ? (const void *)k_mvq_rows<T, 8> : (const void *)k_mvq_rows<T, 16>;
}

cudaError_t hx_k_mvq(cudaStream_t st, int count, const hx_dmat *const *Ws, const int8_t *xq, const float *xd,
                     float *const *ys, const float *const *biases, bool accumulate, int glu_act,
                     const hx_cuda_dev_opts *dv) {
    hx_mv_set s = {};
    s.count = count;
    int first2 = glu_act >= 0 ? (Ws[1]->type == Ws[0]->type ? count : -1) : mix_split(Ws, count);
    if (first2 < 0) return cudaErrorInvalidValue;
    for (int i = 0; i < count; i++) {
        if (Ws[i]->cols != Ws[0]->cols || !hx_k_mvq_supported(Ws[i])) return cudaErrorInvalidValue;
        s.w[i] = Ws[i]->d; s.rb[i] = Ws[i]->row_bytes; s.rows[i] = Ws[i]->rows;
        s.y[i] = ys[i]; s.bias[i] = biases ? biases[i] : NULL;
        s.total_rows += Ws[i]->rows;
    }
    if (glu_act >= 0) s.total_rows = Ws[0]->rows;
    int cols = Ws[0]->cols, acc = accumulate ? 1 : 0, act = glu_act < 0 ? 0 : glu_act;
    int units = 0; // weight units per row (QD<T>::UNITS per block)
    switch (Ws[0]->type) {
#define X(T) case T: units = cols / QD<T>::QK * QD<T>::UNITS; break;
        HX_MVQ_TYPES(X)
#undef X
    }
    dim3 block(WARP, Q_WARPS);
    // many rows of few units: several rows per warp (aim at 4 units per lane).
    // Not Q6_K: its 2-byte aligned blocks take two-byte loads, and it measured
    // no faster that way (H100, 151936 x 1024: 1,977 vs 2,065 GB/s; Q4_K 2,364
    // vs 1,727, Q4_0 2,149 vs 1,643, Q8_0 2,742 vs 2,787).
    const bool no_rows = dv && dv->mvq_no_rows;
    if (count == 1 && glu_act < 0 && s.total_rows >= 16384 && Ws[0]->type != HX_TYPE_Q6_K && !no_rows) {
        int lpr = units <= 32 ? 8 : units <= 64 ? 16 : 32;
        if (lpr < 32) {
            const void *fn = NULL;
            switch (Ws[0]->type) {
#define X(T) case T: fn = rows_kernel<T>(lpr); break;
                HX_MVQ_TYPES(X)
#undef X
            }
            const uint8_t *w = Ws[0]->d;
            size_t rb = Ws[0]->row_bytes;
            int rows = Ws[0]->rows, rpb = Q_WARPS * (WARP / lpr);
            float *y = ys[0];
            const float *bias = s.bias[0];
            void *args[] = {(void *)&w, (void *)&rb, (void *)&rows, (void *)&cols, (void *)&xq, (void *)&xd,
                            (void *)&y, (void *)&bias, (void *)&acc};
            return hx_k_launch_pdl(fn, dim3((rows + rpb - 1) / rpb), block, 0, st, args);
        }
    }
    int wpr = mvq_wpr(Ws[0]->type, s.total_rows * (glu_act >= 0 ? 2 : 1), units, glu_act >= 0);
    int fw = wpr_override(s.total_rows, cols, dv);
    if (fw) wpr = fw;
    int rpb = Q_WARPS / wpr;
    void *args[] = {(void *)&s, (void *)&cols, (void *)&xq, (void *)&xd, (void *)&acc, (void *)&act, (void *)&wpr,
                    (void *)&first2};
    dim3 grid((s.total_rows + rpb - 1) / rpb);
    const void *fn = NULL;
    if (first2 < count) {
        fn = (const void *)k_mvq<HX_TYPE_Q4_K, HX_TYPE_Q6_K, false>;
    } else {
        switch (Ws[0]->type) {
#define X(T) case T: fn = glu_act >= 0 ? (const void *)k_mvq<T, T, true> : (const void *)k_mvq<T, T, false>; break;
            HX_MVQ_TYPES(X)
#undef X
        default: return cudaErrorInvalidValue;
        }
    }
    return hx_k_launch_pdl(fn, grid, block, 0, st, args);
}

// ---- several activation columns (a batch of tokens of many sequences) ----

// Rows of x (n, cols) to the q8 format, row r at xq + r * cols, xd + r * cols / 32.
__global__ void __launch_bounds__(QQ_WARPS * WARP) k_quant_q8_rows(const float *__restrict__ x, int cols,
                                                                  int8_t *__restrict__ xq, float *__restrict__ xd) {
    pdl_trigger();
    pdl_wait();
    int lane = threadIdx.x & 31, gi = blockIdx.x * QQ_WARPS + (threadIdx.x >> 5);
    if (gi >= cols / 32) return;
    size_t i = (size_t)blockIdx.y * cols + gi * 32 + lane;
    warp_q8(x[i], xq + i, xd + (size_t)blockIdx.y * (cols / 32) + gi);
}

cudaError_t hx_k_quant_q8_rows(cudaStream_t st, const float *x, int n, int cols, int8_t *xq, float *xd) {
    int groups = cols / 32;
    void *args[] = {(void *)&x, (void *)&cols, (void *)&xq, (void *)&xd};
    return hx_k_launch_pdl((const void *)k_quant_q8_rows, dim3((groups + QQ_WARPS - 1) / QQ_WARPS, n),
                           dim3(QQ_WARPS * WARP), 0, st, args);
}

// y (n, rows) = x W^T (+ bias) (accumulate: +=) with x given as q8 rows: a
// warp per weight row, blockIdx.y a tile of NC tokens. Each weight unit is
// loaded from DRAM once per tile and dotted with the NC activation columns
// (its repeated loads hit L1), so a tile costs about what one matvec does.
template <int T, int NC>
__global__ void __launch_bounds__(Q_WARPS * WARP)
k_mvq_cols(const uint8_t *__restrict__ W, size_t rb, int rows, int cols, const int8_t *__restrict__ xq,
           const float *__restrict__ xd, int n, float *__restrict__ y, const float *__restrict__ bias, int accumulate) {
    typedef QD<T> Q;
    int lane = threadIdx.x, r = blockIdx.x * Q_WARPS + threadIdx.y, c0 = blockIdx.y * NC;
    const uint8_t *w = W + (size_t)(r < rows ? r : 0) * rb;
    pdl_trigger();
    if (r < rows)
        for (size_t o = (size_t)lane * 128; o < rb; o += (size_t)WARP * 128) prefetch_l2(w + o);
    pdl_wait();
    if (r >= rows) return;
    float acc[NC];
#pragma unroll
    for (int c = 0; c < NC; c++) acc[c] = 0.0f;
    int nunits = cols / Q::QK * Q::UNITS, nc = n - c0 < NC ? n - c0 : NC;
    const int8_t *xq0 = xq + (size_t)c0 * cols;
    const float *xd0 = xd + (size_t)c0 * (cols / 32);
    for (int u = lane; u < nunits; u += WARP) {
        int blk = u / Q::UNITS, unit = u % Q::UNITS;
        const uint8_t *b = w + (size_t)blk * Q::BYTES;
#pragma unroll
        for (int c = 0; c < NC; c++)
            if (c < nc)
                acc[c] += Q::dot(b, unit, xq0 + (size_t)c * cols + (size_t)blk * Q::QK,
                                 xd0 + (size_t)c * (cols / 32) + (size_t)blk * (Q::QK / 32));
    }
#pragma unroll
    for (int c = 0; c < NC; c++) {
        float a = warp_sum(acc[c]);
        if (lane == 0 && c < nc) {
            float *yp = y + (size_t)(c0 + c) * rows + r;
            if (bias) a += bias[r];
            *yp = accumulate ? *yp + a : a;
        }
    }
}

template <int T> static const void *cols_kernel() { return (const void *)k_mvq_cols<T, MVQ_COLS>; }

cudaError_t hx_k_mvq_cols(cudaStream_t st, const hx_dmat *W, const int8_t *xq, const float *xd, int n, float *y,
                          const float *bias, bool accumulate) {
    const void *fn = NULL;
    switch (W->type) {
#define X(T) case T: fn = cols_kernel<T>(); break;
        HX_MVQ_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    const uint8_t *w = W->d;
    size_t rb = W->row_bytes;
    int rows = W->rows, cols = W->cols, acc = accumulate ? 1 : 0;
    void *args[] = {(void *)&w, (void *)&rb, (void *)&rows, (void *)&cols, (void *)&xq, (void *)&xd, (void *)&n,
                    (void *)&y, (void *)&bias, (void *)&acc};
    return hx_k_launch_pdl(fn, dim3((rows + Q_WARPS - 1) / Q_WARPS, (n + MVQ_COLS - 1) / MVQ_COLS), dim3(WARP, Q_WARPS),
                           0, st, args);
}
