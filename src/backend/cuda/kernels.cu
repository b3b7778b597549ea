// kernels.cu — the decoder's GPU kernels (see kernels.cuh for layouts).
#include <atomic>
#include <math.h>
#include <mma.h>
#include <stdlib.h>
#include <string.h>
#include <utility>
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/qblocks.cuh"
#include "backend/cuda/warp.cuh"
#include "backend/cuda/decode.cuh"

// Per thread: the launches of one context happen on the thread that uses it,
// and each context sets its own choice before it enqueues (hx_k_pdl_set).
static thread_local bool t_pdl = false;
cudaError_t hx_k_pdl_init(bool allow, bool *on) {
    int dev = 0, major = 0;
    cudaError_t rc = cudaGetDevice(&dev);
    if (rc == cudaSuccess) rc = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (rc != cudaSuccess) return rc;
    t_pdl = allow && major >= 9;
    if (on) *on = t_pdl;
    return cudaSuccess;
}
void hx_k_pdl_set(bool on) { t_pdl = on; }

// The launch configuration: PDL attribute (in *at) when enabled.
static cudaLaunchConfig_t pdl_config(dim3 grid, dim3 block, size_t smem, cudaStream_t st, cudaLaunchAttribute *at) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    at->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at->val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = t_pdl ? 1 : 0;
    return cfg;
}

template <typename... KArgs, typename... Args>
static cudaError_t launch_k(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                            Args &&...args) {
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = pdl_config(grid, block, smem, st, &at);
    return cudaLaunchKernelEx(&cfg, k, std::forward<Args>(args)...);
}
#define LAUNCH(k, g, b, smem, st, ...) launch_k(k, dim3(g), dim3(b), (size_t)(smem), st, __VA_ARGS__)
// The same for kernels of other files (arguments as for cudaLaunchKernel).
cudaError_t hx_k_launch_pdl(const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st, void **args) {
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = pdl_config(grid, block, smem, st, &at);
    return cudaLaunchKernelExC(&cfg, fn, args);
}

// ---- fused dequant x matvec / small matmul ----

#ifndef HX_MV_WARPS
#define HX_MV_WARPS 4
#endif
#ifndef HX_MV_UNROLL
#define HX_MV_UNROLL 2
#endif
#define HX_PRAGMA(x) _Pragma(#x)
#define HX_UNROLL(n) HX_PRAGMA(unroll n)
enum { MV_WARPS = HX_MV_WARPS, MM_TILE = 8 };

// Each row is split over `wpr` warps of the block (1, 2 or 4: more warps per
// row for small matrices, so the GPU has enough loads in flight); blockIdx.y
// selects a tile of up to TILE tokens. Each decoded weight is used for every
// token of the tile; activations are read as float4.
template <int T, int TILE>
__global__ void __launch_bounds__(MV_WARPS * WARP)
k_matmul(const uint8_t *__restrict__ W, size_t row_bytes, int cols, int rows, const float *__restrict__ X, int n,
         float *__restrict__ Y, const float *__restrict__ bias, int accumulate, int wpr) {
    typedef QT<T> Q;
    __shared__ float part_sum[MV_WARPS][TILE];
    int lane = threadIdx.x, sub = threadIdx.y % wpr;
    int row = blockIdx.x * (MV_WARPS / wpr) + threadIdx.y / wpr;
    bool live = row < rows;
    int t0 = blockIdx.y * TILE, nt = n - t0 < TILE ? n - t0 : TILE;
    const uint8_t *wr = W + (size_t)(live ? row : 0) * row_bytes;
    pdl_trigger();
    if (live) prefetch_range(wr, row_bytes * sub / wpr, row_bytes * (sub + 1) / wpr, lane);
    pdl_wait();
    const float *x0 = X + (size_t)t0 * cols;
    float acc[TILE];
#pragma unroll
    for (int t = 0; t < TILE; t++) acc[t] = 0.0f;
    int nparts = live ? cols / Q::QK * Q::PARTS : 0;
HX_UNROLL(HX_MV_UNROLL)
    for (int p = sub * WARP + lane; p < nparts; p += WARP * wpr) {
        int blk = p / Q::PARTS, part = p % Q::PARTS;
        const float *xb = x0 + blk * Q::QK;
        Q::part(wr + (size_t)blk * Q::BYTES, part, [&](int i, float4 w) {
#pragma unroll
            for (int t = 0; t < TILE; t++)
                if (t < nt) {
                    float4 xv = *(const float4 *)(xb + (size_t)t * cols + i);
                    acc[t] = fmaf(w.x, xv.x, fmaf(w.y, xv.y, fmaf(w.z, xv.z, fmaf(w.w, xv.w, acc[t]))));
                }
        });
    }
#pragma unroll
    for (int t = 0; t < TILE; t++) {
        float v = warp_sum(acc[t]);
        if (lane == 0) part_sum[threadIdx.y][t] = v;
    }
    if (wpr > 1) __syncthreads();
    if (!live || sub != 0 || lane >= nt) return;
    int t = lane;
    float v = 0.0f;
    for (int k = 0; k < wpr; k++) v += part_sum[threadIdx.y + k][t];
    if (bias) v += bias[row];
    float *yp = Y + (size_t)(t0 + t) * rows + row;
    *yp = accumulate ? *yp + v : v;
}

// Decode (one token): up to 3 matrices of the same type and row length in one
// launch (q/k/v), with the RMSNorm of x fused in front (each block recomputes
// the sum of squares of x: a few KiB from L2, cheaper than a launch), and a
// GLU mode where matrix 0 is gate and 1 is up and the output is act(g) * u.
// Each launch saves ~2-4 us of launch and drain on an H100; at batch 1 that
// is what bounds a small model, not the bytes.
template <int T, bool GLU>
__global__ void __launch_bounds__(MV_WARPS * WARP)
k_mv_multi(hx_mv_set s, int cols, const float *__restrict__ x, const float *__restrict__ norm_w, float eps,
           int accumulate, int act, int wpr) {
    typedef QT<T> Q;
    __shared__ float part_sum[MV_WARPS][2];
    __shared__ float red[32];
    int lane = threadIdx.x, sub = threadIdx.y % wpr;
    int r = blockIdx.x * (MV_WARPS / wpr) + threadIdx.y / wpr;
    bool live = r < s.total_rows;
    // which matrix: selects, not s.w[m] — a parameter array indexed at run time
    // made ptxas copy the whole struct to a 120-byte stack frame per thread
    int m = 0, row = live ? r : 0;
    if (!GLU) {
        if (s.count > 1 && row >= s.rows[0]) { row -= s.rows[0]; m = 1; }
        if (s.count > 2 && m == 1 && row >= s.rows[1]) { row -= s.rows[1]; m = 2; }
    }
    size_t rb = m == 0 ? s.rb[0] : m == 1 ? s.rb[1] : s.rb[2];
    const uint8_t *w0 = (m == 0 ? s.w[0] : m == 1 ? s.w[1] : s.w[2]) + (size_t)row * rb;
    const uint8_t *w1 = GLU ? s.w[1] + (size_t)row * s.rb[1] : NULL;
    pdl_trigger();
    if (live) {
        prefetch_range(w0, rb * sub / wpr, rb * (sub + 1) / wpr, lane);
        if (GLU) prefetch_range(w1, s.rb[1] * sub / wpr, s.rb[1] * (sub + 1) / wpr, lane);
    }
    pdl_wait();
    float a0 = 0.0f, a1 = 0.0f;
    int nparts = live ? cols / Q::QK * Q::PARTS : 0;
HX_UNROLL(HX_MV_UNROLL)
    for (int p = sub * WARP + lane; p < nparts; p += WARP * wpr) {
        int blk = p / Q::PARTS, part = p % Q::PARTS;
        const float *xb = x + blk * Q::QK;
        const float *gb = norm_w ? norm_w + blk * Q::QK : NULL;
        // the norm's 1/rms factors out of the dot: scale the sums at the end,
        // so the sum of squares needs no pass (and no barrier) before the weights
        auto xval = [&](int i) {
            float4 xv = *(const float4 *)(xb + i);
            if (gb) {
                float4 g = *(const float4 *)(gb + i);
                xv.x *= g.x; xv.y *= g.y; xv.z *= g.z; xv.w *= g.w;
            }
            return xv;
        };
        Q::part(w0 + (size_t)blk * Q::BYTES, part, [&](int i, float4 w) {
            float4 xv = xval(i);
            a0 = fmaf(w.x, xv.x, fmaf(w.y, xv.y, fmaf(w.z, xv.z, fmaf(w.w, xv.w, a0))));
        });
        if (GLU)
            Q::part(w1 + (size_t)blk * Q::BYTES, part, [&](int i, float4 w) {
                float4 xv = xval(i);
                a1 = fmaf(w.x, xv.x, fmaf(w.y, xv.y, fmaf(w.z, xv.z, fmaf(w.w, xv.w, a1))));
            });
    }
    float nscale = 1.0f;
    if (norm_w) { // sum of squares of x, by the whole block
        float ss = 0.0f;
        int tid = threadIdx.y * WARP + threadIdx.x;
        for (int i = tid; i < cols; i += MV_WARPS * WARP) ss += x[i] * x[i];
        ss = warp_sum(ss);
        if (threadIdx.x == 0) red[threadIdx.y] = ss;
    }
    a0 = warp_sum(a0);
    if (GLU) a1 = warp_sum(a1);
    if (lane == 0) { part_sum[threadIdx.y][0] = a0; part_sum[threadIdx.y][1] = a1; }
    if (wpr > 1 || norm_w) __syncthreads();
    if (!live || sub != 0 || lane != 0) return;
    if (norm_w) {
        float ss = 0.0f;
        for (int k = 0; k < MV_WARPS; k++) ss += red[k];
        nscale = rsqrtf(ss / cols + eps);
    }
    float v0 = 0.0f, v1 = 0.0f;
    for (int k = 0; k < wpr; k++) { v0 += part_sum[threadIdx.y + k][0]; v1 += part_sum[threadIdx.y + k][1]; }
    v0 *= nscale; v1 *= nscale;
    if (GLU) {
        if (s.bias[0]) v0 += s.bias[0][row];
        if (s.bias[1]) v1 += s.bias[1][row];
        s.y[0][row] = ffn_act(v0, act) * v1;
        return;
    }
    const float *bias = m == 0 ? s.bias[0] : m == 1 ? s.bias[1] : s.bias[2];
    if (bias) v0 += bias[row];
    float *yp = (m == 0 ? s.y[0] : m == 1 ? s.y[1] : s.y[2]) + row;
    *yp = accumulate ? *yp + v0 : v0;
}

// F32/F16/BF16 rows whose length is not a multiple of 32 (tiny models): warp
// per row, lane over elements; one token per blockIdx.y.
template <int T>
__device__ __forceinline__ float plain_ld(const uint8_t *row, int j) {
    if (T == HX_TYPE_F32) return ((const float *)row)[j];
    uint16_t u = ((const uint16_t *)row)[j];
    if (T == HX_TYPE_F16) return __half2float(__ushort_as_half(u));
    return __uint_as_float((uint32_t)u << 16);
}
template <int T>
__global__ void k_matmul_plain(const uint8_t *__restrict__ W, size_t row_bytes, int cols, int rows,
                               const float *__restrict__ X, float *__restrict__ Y, const float *__restrict__ bias,
                               int accumulate) {
    pdl_trigger();
    pdl_wait();
    int row = blockIdx.x * MV_WARPS + threadIdx.y, t = blockIdx.y, lane = threadIdx.x;
    if (row >= rows) return;
    const uint8_t *wr = W + (size_t)row * row_bytes;
    const float *x = X + (size_t)t * cols;
    float acc = 0.0f;
    for (int j = lane; j < cols; j += WARP) acc = fmaf(plain_ld<T>(wr, j), x[j], acc);
    acc = warp_sum(acc);
    if (lane == 0) {
        if (bias) acc += bias[row];
        float *yp = Y + (size_t)t * rows + row;
        *yp = accumulate ? *yp + acc : acc;
    }
}
template <int T, typename OutT>
__global__ void k_dequant_plain(const uint8_t *__restrict__ W, size_t row_bytes, int cols, const int *__restrict__ ids,
                                int nrows, OutT *__restrict__ out, float scale) {
    pdl_trigger();
    pdl_wait();
    size_t total = (size_t)nrows * cols;
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < total; g += (size_t)gridDim.x * blockDim.x) {
        int r = (int)(g / cols), j = (int)(g % cols);
        int src = ids ? ids[r] : r;
        float w = plain_ld<T>(W + (size_t)src * row_bytes, j);
        if (scale != 1.0f) w *= scale;
        out[(size_t)r * cols + j] = (OutT)w;
    }
}

// Four consecutive outputs in one store (8 bytes of f16, 16 of f32): runs of
// 4 start at multiples of 4 and rows at multiples of 32, so they are aligned.
static __device__ __forceinline__ void store4(float *p, float4 w) { *(float4 *)p = w; }
static __device__ __forceinline__ void store4(__half *p, float4 w) {
    __half2 a = __floats2half2_rn(w.x, w.y), b = __floats2half2_rn(w.z, w.w);
    *(uint2 *)p = make_uint2(*(const unsigned *)&a, *(const unsigned *)&b);
}

// out[r][...] = dequant(W row ids[r] (or r when ids is NULL)) * scale, as OutT.
template <int T, typename OutT>
__global__ void k_dequant(const uint8_t *__restrict__ W, size_t row_bytes, int cols, const int *__restrict__ ids,
                          int nrows, OutT *__restrict__ out, float scale) {
    pdl_trigger();
    pdl_wait();
    typedef QT<T> Q;
    int nparts = cols / Q::QK * Q::PARTS;
    size_t total = (size_t)nrows * nparts;
    bool small = total <= 0xFFFFFFFFu; // 32-bit division (a 64-bit one is a long instruction sequence)
    for (size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x; g < total; g += (size_t)gridDim.x * blockDim.x) {
        int r = small ? (int)((unsigned)g / (unsigned)nparts) : (int)(g / nparts);
        int p = small ? (int)((unsigned)g % (unsigned)nparts) : (int)(g % nparts);
        int src = ids ? ids[r] : r;
        int blk = p / Q::PARTS, part = p % Q::PARTS;
        OutT *ob = out + (size_t)r * cols + (size_t)blk * Q::QK;
        Q::part(W + (size_t)src * row_bytes + (size_t)blk * Q::BYTES, part, [&](int i, float4 w) {
            if (scale != 1.0f) { w.x *= scale; w.y *= scale; w.z *= scale; w.w *= scale; }
            store4(ob + i, w);
        });
    }
}

__global__ void k_f32_to_f16(const float *__restrict__ x, __half *__restrict__ y, size_t count) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2half(x[i]);
}
__global__ void k_add_bias(float *__restrict__ y, const float *__restrict__ b, int rows, size_t count) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        y[i] += b[i % rows];
}

static int grid_for(size_t count, int threads) {
    size_t g = (count + threads - 1) / threads;
    if (g > 65535u * 4) g = 65535u * 4;
    return g < 1 ? 1 : (int)g;
}

bool hx_k_type_supported(int type) {
    switch (type) {
#define X(T) case T: return true;
        HX_CUDA_TYPES(X)
#undef X
    default: return false;
    }
}

static bool is_plain(const hx_dmat *W) { return W->cols % 32 != 0; }

// Warps per row: dv->wpr (1, 2 or 4, a divisor of MV_WARPS) forces it, for
// timing variants; otherwise chosen from the row count.
static int pick_wpr(int rows, const hx_cuda_dev_opts *dv) {
    int f = dv ? dv->wpr : 0;
    if ((f == 1 || f == 2 || f == 4) && MV_WARPS % f == 0) return f;
    // enough warps in flight for ~4 waves of 16 warps per SM on an H100-class GPU
    return rows >= 16384 ? 1 : rows >= 4096 ? 2 : 4;
}

template <int T>
static void launch_matmul(cudaStream_t st, const hx_dmat *W, const float *x, int n, float *y, const float *bias,
                          bool acc, const hx_cuda_dev_opts *dv) {
    dim3 block(WARP, MV_WARPS);
    if (T == HX_TYPE_F32 || T == HX_TYPE_F16 || T == HX_TYPE_BF16) {
        if (is_plain(W)) {
            dim3 grid((W->rows + MV_WARPS - 1) / MV_WARPS, n);
            LAUNCH((k_matmul_plain<T>), grid, block, 0, st, W->d, W->row_bytes, W->cols, W->rows, x, y, bias, acc);
            return;
        }
    }
    int wpr = pick_wpr(W->rows, dv);
    int rpb = MV_WARPS / wpr;
    if (n == 1) {
        dim3 grid((W->rows + rpb - 1) / rpb, 1);
        LAUNCH((k_matmul<T, 1>), grid, block, 0, st, W->d, W->row_bytes, W->cols, W->rows, x, 1, y, bias, acc, wpr);
    } else {
        dim3 grid((W->rows + rpb - 1) / rpb, (n + MM_TILE - 1) / MM_TILE);
        LAUNCH((k_matmul<T, MM_TILE>), grid, block, 0, st, W->d, W->row_bytes, W->cols, W->rows, x, n, y, bias, acc, wpr);
    }
}

template <int T, typename OutT>
static void launch_dequant(cudaStream_t st, const hx_dmat *W, const int *ids, int nrows, OutT *out, float scale) {
    if ((T == HX_TYPE_F32 || T == HX_TYPE_F16 || T == HX_TYPE_BF16) && is_plain(W)) {
        size_t total = (size_t)nrows * W->cols;
        LAUNCH((k_dequant_plain<T, OutT>), grid_for(total, 256), 256, 0, st, W->d, W->row_bytes, W->cols, ids, nrows, out, scale);
        return;
    }
    size_t parts = (size_t)nrows * (W->cols / QT<T>::QK * QT<T>::PARTS);
    LAUNCH((k_dequant<T, OutT>), grid_for(parts, 256), 256, 0, st, W->d, W->row_bytes, W->cols, ids, nrows, out, scale);
}

static cudaError_t dequant_f16(cudaStream_t st, const hx_dmat *W, __half *out) {
    switch (W->type) {
#define X(T) case T: launch_dequant<T, __half>(st, W, NULL, W->rows, out, 1.0f); break;
        HX_CUDA_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t hx_k_embed(cudaStream_t st, const hx_dmat *W, const int *ids, int n, float *out, float scale) {
    switch (W->type) {
#define X(T) case T: launch_dequant<T, float>(st, W, ids, n, out, scale); break;
        HX_CUDA_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

// Grows a device buffer of __half to at least want elements.
static cudaError_t grow_half(__half **p, size_t *cap, size_t want) {
    if (want <= *cap) return cudaSuccess;
    if (*p) cudaFree(*p);
    *p = NULL; *cap = 0;
    cudaError_t rc = cudaMalloc((void **)p, want * sizeof(__half));
    if (rc == cudaSuccess) *cap = want;
    return rc;
}

template <int T>
static void launch_mv_multi(cudaStream_t st, const hx_mv_set *s, int cols, const float *x, const float *norm_w,
                            float eps, bool acc, int glu_act, const hx_cuda_dev_opts *dv) {
    int wpr = pick_wpr(s->total_rows, dv);
    int rpb = MV_WARPS / wpr;
    dim3 block(WARP, MV_WARPS), grid((s->total_rows + rpb - 1) / rpb);
    if (glu_act >= 0) LAUNCH((k_mv_multi<T, true>), grid, block, 0, st, *s, cols, x, norm_w, eps, acc, glu_act, wpr);
    else LAUNCH((k_mv_multi<T, false>), grid, block, 0, st, *s, cols, x, norm_w, eps, acc, 0, wpr);
}

bool hx_k_mv_fusable(const hx_dmat *const *Ws, int count) {
    for (int i = 0; i < count; i++) {
        if (!hx_k_type_supported(Ws[i]->type) || Ws[i]->cols % 32 != 0) return false;
        if (Ws[i]->type != Ws[0]->type || Ws[i]->cols != Ws[0]->cols) return false;
    }
    return true;
}

cudaError_t hx_k_mv_fused(cudaStream_t st, int count, const hx_dmat *const *Ws, const float *x, const float *norm_w,
                          float eps, float *const *ys, const float *const *biases, bool accumulate, int glu_act,
                          const hx_cuda_dev_opts *dv) {
    hx_mv_set s = {};
    s.count = count;
    for (int i = 0; i < count; i++) {
        s.w[i] = Ws[i]->d; s.rb[i] = Ws[i]->row_bytes; s.rows[i] = Ws[i]->rows;
        s.y[i] = ys[i]; s.bias[i] = biases ? biases[i] : NULL;
        s.total_rows += Ws[i]->rows;
    }
    if (glu_act >= 0) s.total_rows = Ws[0]->rows;
    switch (Ws[0]->type) {
#define X(T) case T: launch_mv_multi<T>(st, &s, Ws[0]->cols, x, norm_w, eps, accumulate, glu_act, dv); break;
        HX_CUDA_TYPES(X)
#undef X
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

cudaError_t hx_k_linear(cudaStream_t st, hx_gemm_scratch *gs, const hx_dmat *W, const float *x, int n, float *y,
                        const float *bias, bool accumulate, const hx_cuda_dev_opts *dv) {
    int min_n = dv && dv->cublas_min_n > 0 ? dv->cublas_min_n : HX_CUBLAS_MIN_N;
    if (n < min_n || !gs || is_plain(W)) {
        switch (W->type) {
#define X(T) case T: launch_matmul<T>(st, W, x, n, y, bias, accumulate, dv); break;
            HX_CUDA_TYPES(X)
#undef X
        default: return cudaErrorInvalidValue;
        }
        return cudaGetLastError();
    }
    cudaError_t rc;
    if ((rc = grow_half(&gs->wh, &gs->wh_cap, (size_t)W->rows * W->cols)) != cudaSuccess) return rc;
    if ((rc = grow_half(&gs->xh, &gs->xh_cap, (size_t)n * W->cols)) != cudaSuccess) return rc;
    if ((rc = dequant_f16(st, W, gs->wh)) != cudaSuccess) return rc;
    size_t nx = (size_t)n * W->cols;
    LAUNCH(k_f32_to_f16, grid_for(nx, 256), 256, 0, st, x, gs->xh, nx);
    if ((rc = cudaGetLastError()) != cudaSuccess) return rc;
    // column-major view: C (rows x n) = W^T' (rows x cols) * X' (cols x n)
    float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (cublasSetStream(gs->blas, st) != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
    cublasStatus_t bs = cublasGemmEx(gs->blas, CUBLAS_OP_T, CUBLAS_OP_N, W->rows, n, W->cols, &alpha, gs->wh,
                                     CUDA_R_16F, W->cols, gs->xh, CUDA_R_16F, W->cols, &beta, y, CUDA_R_32F, W->rows,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS) return cudaErrorUnknown;
    if (bias) {
        size_t ny = (size_t)n * W->rows;
        LAUNCH(k_add_bias, grid_for(ny, 256), 256, 0, st, y, bias, W->rows, ny);
    }
    return cudaGetLastError();
}

// ---- norms, rope, attention, elementwise ----

// acc (not NULL): acc += out as well (gemma's post norms and the residual add
// in one launch; the same floats as the two kernels).
__global__ void k_rmsnorm_rows(const float *__restrict__ x, const float *__restrict__ w, float *out, int dim,
                               float eps, float *acc) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *orow = out + (size_t)blockIdx.x * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    float scale = rsqrtf(ss / dim + eps);
    float *arow = acc ? acc + (size_t)blockIdx.x * dim : NULL;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) {
        float v = xr[i] * scale * w[i];
        orow[i] = v;
        if (arow) arow[i] += v;
    }
}

cudaError_t hx_k_rmsnorm(cudaStream_t st, const float *x, const float *w, float *out, int rows, int dim, float eps) {
    return hx_k_rmsnorm_add(st, x, w, out, NULL, rows, dim, eps);
}
cudaError_t hx_k_rmsnorm_add(cudaStream_t st, const float *x, const float *w, float *out, float *acc, int rows, int dim,
                             float eps) {
    int threads = dim >= 1024 ? 256 : dim >= 256 ? 128 : 32;
    LAUNCH(k_rmsnorm_rows, rows, threads, 0, st, x, w, out, dim, eps, acc);
    return cudaGetLastError();
}

// grid (n, nh + nkvh), block >= hd/2 (a multiple of 32): thread j handles
// pair j of one head vector: optional per-head RMSNorm (qk_norm), rotation,
// and for k heads the f16 stores of k and v into the caches.
// tpos (not NULL): token i at position tpos[i] of cache slot tslot[i] (slots
// slot_stride elements apart), else at *d_pos + i of the caches as given.
__global__ void k_rope_store_kernel(float *q, float *k, const float *v, __half *kc, __half *vc, int rows, const int *d_pos,
                                    int nh, int nkvh, int hd, float base, float rope_scale, int neox,
                                    const float *q_norm, const float *k_norm, float eps, const int *tpos,
                                    const int *tslot, size_t slot_stride) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    int i = blockIdx.x, h = blockIdx.y, j = threadIdx.x, half = hd / 2;
    bool act = j < half;
    int pos = tpos ? tpos[i] : *d_pos + i;
    if (tpos) { kc += (size_t)tslot[i] * slot_stride; vc += (size_t)tslot[i] * slot_stride; }
    int a = neox ? j : 2 * j, b = neox ? j + half : 2 * j + 1;
    bool is_k = h >= nh;
    int hh = is_k ? h - nh : h;
    float *vec = is_k ? k + ((size_t)i * nkvh + hh) * hd : q + ((size_t)i * nh + hh) * hd;
    float x0 = act ? vec[a] : 0.0f, x1 = act ? vec[b] : 0.0f;
    const float *nw = is_k ? k_norm : q_norm;
    if (nw) {
        float ss = block_sum(x0 * x0 + x1 * x1, red);
        float sc = rsqrtf(ss / hd + eps);
        if (act) { x0 = x0 * sc * nw[a]; x1 = x1 * sc * nw[b]; }
    }
    if (!act) return;
    float2 t = hx_rope_cs(pos, j, hd, base, rope_scale);
    float cs = t.x, sn = t.y;
    float r0 = x0 * cs - x1 * sn, r1 = x0 * sn + x1 * cs;
    vec[a] = r0; vec[b] = r1;
    if (is_k) {
        size_t kvrow = (size_t)nkvh * hd, off = (size_t)(pos % rows) * kvrow + (size_t)hh * hd;
        const float *vv = v + ((size_t)i * nkvh + hh) * hd;
        kc[off + a] = __float2half(r0); kc[off + b] = __float2half(r1);
        vc[off + a] = __float2half(vv[a]); vc[off + b] = __float2half(vv[b]);
    }
}

cudaError_t hx_k_rope_store(cudaStream_t st, float *q, float *k, const float *v, __half *kc, __half *vc, int rows,
                            const int *d_pos, int n, int nh, int nkvh, int hd, float base, float rope_scale,
                            bool neox, const float *q_norm, const float *k_norm, float eps) {
    dim3 grid(n, nh + nkvh);
    int threads = (hd / 2 + 31) / 32 * 32;
    LAUNCH(k_rope_store_kernel, grid, threads, 0, st, q, k, v, kc, vc, rows, d_pos, nh, nkvh, hd, base, rope_scale, neox,
                                                  q_norm, k_norm, eps, (const int *)NULL, (const int *)NULL, (size_t)0);
    return cudaGetLastError();
}

cudaError_t hx_k_rope_store_tok(cudaStream_t st, float *q, float *k, const float *v, __half *kc, __half *vc, int rows,
                                size_t slot_stride, const int *tpos, const int *tslot, int n, int nh, int nkvh, int hd,
                                float base, float rope_scale, bool neox, const float *q_norm, const float *k_norm,
                                float eps) {
    dim3 grid(n, nh + nkvh);
    int threads = (hd / 2 + 31) / 32 * 32;
    LAUNCH(k_rope_store_kernel, grid, threads, 0, st, q, k, v, kc, vc, rows, (const int *)NULL, nh, nkvh, hd, base,
           rope_scale, neox, q_norm, k_norm, eps, tpos, tslot, slot_stride);
    return cudaGetLastError();
}

enum { ATT_THREADS = 128, ATT_CHUNK = 32, ATT_MAX_SPLITS = 256 };

// grid (nh, n): one block per (query head, token). Scores for every visible
// cached position go to shared memory, then an exact two-pass softmax, then
// each thread accumulates output dimensions over the positions.
__global__ void __launch_bounds__(ATT_THREADS)
k_attention_kernel(const float *__restrict__ q, const __half *__restrict__ kc, const __half *__restrict__ vc, int rows,
                   float *__restrict__ out, const int *d_pos, int nh, int nkvh, int hd, float scale, float softcap,
                   int window, const int *tpos, const int *tslot, size_t slot_stride) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ float sm[];
    float *qs = sm, *red = sm + hd, *sc = red + 32;
    int h = blockIdx.x, i = blockIdx.y, kvh = h / (nh / nkvh);
    int p = tpos ? tpos[i] : *d_pos + i;
    if (tpos) { kc += (size_t)tslot[i] * slot_stride; vc += (size_t)tslot[i] * slot_stride; }
    int first = hx_att_first(p, window);
    int len = p - first + 1;
    size_t kvrow = (size_t)nkvh * hd;
    const float *qv = q + ((size_t)i * nh + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qv[d];
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const __half *kbase = kc + (size_t)kvh * hd;
    int r0 = first % rows; // position first + t lives in row r0 + t, less rows past the ring's end
    int wrap = rows - r0 < len ? rows - r0 : len;
    for (int t = warp; t < len; t += nw) {
        const __half *kr = kbase + (size_t)(t < wrap ? r0 + t : t - wrap) * kvrow;
        float s = 0.0f;
        for (int d = lane; d < hd; d += 32) s = fmaf(qs[d], __half2float(kr[d]), s);
        s = warp_sum(s) * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        if (lane == 0) sc[t] = s;
    }
    __syncthreads();
    float mx;
    float inv = 1.0f / block_softmax_exp(sc, len, red, &mx);
    const __half *va = vc + (size_t)r0 * kvrow + (size_t)kvh * hd; // positions [0, wrap)
    const __half *vb = vc + (size_t)kvh * hd;                        // positions [wrap, len) from row 0
    float *o = out + ((size_t)i * nh + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < wrap; t++) acc = fmaf(sc[t], __half2float(va[(size_t)t * kvrow + d]), acc);
        for (int t = wrap; t < len; t++) acc = fmaf(sc[t], __half2float(vb[(size_t)(t - wrap) * kvrow + d]), acc);
        o[d] = acc * inv;
    }
}

__global__ void __launch_bounds__(ATT_THREADS) k_attn_decode_kernel(hx_attn_args a, const int *d_pos) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ float sm[];
    attn_decode_item(a, blockIdx.x, blockIdx.y, gridDim.y, *d_pos, sm);
}

template <int E> __global__ void __launch_bounds__(ATT_THREADS) k_attn_decode_warp(hx_attn_args a, const int *d_pos) {
    pdl_trigger(); // pdl_wait inside: the item loads what the earlier kernels do not write first
    extern __shared__ float sm[];
    attn_decode_warp_item<E>(a, blockIdx.x, blockIdx.y, gridDim.y, *d_pos, sm);
}

cudaError_t hx_k_attention_prepare(int hd, int max_ctx, size_t *smem) {
    *smem = sizeof(float) * (2 * (size_t)hd + 32 + (size_t)max_ctx);
    if (*smem > 48 * 1024)
        return cudaFuncSetAttribute(k_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)*smem);
    return cudaSuccess;
}

// Positions per block: ATT_CHUNK (dv->att_chunk, 32..4096, overrides it:
// tests use small chunks so that short runs exercise the merge), raised for
// long contexts so that there are at most ATT_MAX_SPLITS blocks per head (the
// grid is fixed when the decode graph is captured; blocks past the current
// position return at once, but each still costs a launch slot).
static int att_chunk(int max_ctx, const hx_cuda_dev_opts *dv) {
    int x = dv ? dv->att_chunk : 0;
    int c = x >= 32 && x <= 4096 ? x : ATT_CHUNK;
    int need = (max_ctx + ATT_MAX_SPLITS - 1) / ATT_MAX_SPLITS;
    need = (need + 31) / 32 * 32;
    return need > c ? need : c;
}
int hx_k_attn_decode_chunk(int max_ctx, const hx_cuda_dev_opts *dv) { return att_chunk(max_ctx, dv); }
int hx_k_attn_decode_splits(int max_ctx, const hx_cuda_dev_opts *dv) {
    return (max_ctx + att_chunk(max_ctx, dv) - 1) / att_chunk(max_ctx, dv);
}

size_t hx_k_attn_decode_smem(int hd, int chunk) {
    size_t vpart = 8 * ATT_THREADS > hd ? 8 * ATT_THREADS : hd; // v_accum's group sums
    size_t item = 2 * (size_t)hd + 32 + chunk + vpart, warp_item = (1 + ATT_THREADS / 32) * (size_t)hd + ATT_THREADS / 16;
    return sizeof(float) * (item > warp_item ? item : warp_item);
}

cudaError_t hx_k_attn_decode(cudaStream_t st, const float *q, const float *k, const float *v, __half *kc, __half *vc,
                             int rows, float *out, const int *d_pos, int nh, int nkvh, int hd, float scale, float softcap,
                             int window, int max_ctx, float base, float rope_scale, bool neox, const float *q_norm,
                             const float *k_norm, float eps, const float2 *rope_tab, float *part, unsigned *count,
                             int8_t *xq, float *xd, const hx_cuda_dev_opts *dv) {
    hx_attn_args a = {q, k, v, kc, vc, rows, out, nh, nkvh, hd, scale, softcap, window, base, rope_scale, neox ? 1 : 0,
                      q_norm, k_norm, eps, rope_tab, part, count, att_chunk(max_ctx, dv), hd % 32 ? NULL : xq, xd};
    dim3 grid(nh, hx_k_attn_decode_splits(max_ctx, dv));
    size_t smem = hx_k_attn_decode_smem(hd, a.chunk);
    // a warp per position for the usual head sizes (dv->att_block: the block-wide kernel for all)
    const bool block_only = dv && dv->att_block;
    if (hd == 64 && !block_only) LAUNCH(k_attn_decode_warp<2>, grid, ATT_THREADS, smem, st, a, d_pos);
    else if (hd == 128 && !block_only) LAUNCH(k_attn_decode_warp<4>, grid, ATT_THREADS, smem, st, a, d_pos);
    else if (hd == 256 && !block_only) LAUNCH(k_attn_decode_warp<8>, grid, ATT_THREADS, smem, st, a, d_pos);
    else LAUNCH(k_attn_decode_kernel, grid, ATT_THREADS, smem, st, a, d_pos);
    return cudaGetLastError();
}

// Prefill attention, tiled (flash-attention style, FP32 FMAs): a block of 128
// threads per (head, tile of QT queries). The block walks the visible keys in
// tiles of KT: K and V tiles go to shared memory once for all QT queries, the
// scores of a query row are spread over TPR = 128/QT threads (reduced by
// shuffles), softmax is online (running max and sum per row), and each thread
// keeps HD/TPR output dimensions of its row in registers. Dimensions and key
// columns are interleaved across the threads of a row and rows padded, so the
// shared-memory reads are free of bank conflicts. Same math as
// k_attention_kernel (which handles head sizes without an instance here).
template <int HD, int QT, int KT>
__global__ void __launch_bounds__(128)
k_attn_prefill(const float *__restrict__ q, const __half *__restrict__ kc, const __half *__restrict__ vc, int rows,
               float *__restrict__ out, const int *d_pos, int n, int nh, int nkvh, float scale, float softcap,
               int window) {
    constexpr int TPR = 128 / QT, SC = KT / TPR, DPT = HD / TPR;
    static_assert(KT % TPR == 0 && HD % TPR == 0, "tile shape");
    pdl_trigger();
    pdl_wait();
    extern __shared__ float sm[];
    float *Qs = sm, *Ks = Qs + QT * (HD + 1), *Vs = Ks + KT * (HD + 1), *Ps = Vs + KT * HD;
    int h = blockIdx.x, kvh = h / (nh / nkvh), tid = threadIdx.x;
    int r = tid / TPR, sub = tid % TPR; // this thread's query row and its slot in the row
    int pos0 = *d_pos, i0 = blockIdx.y * QT, nq = n - i0 < QT ? n - i0 : QT;
    size_t kvrow = (size_t)nkvh * HD, qrow = (size_t)nh * HD;
    for (int e = tid; e < QT * HD; e += 128) {
        int rr = e / HD, d = e % HD;
        Qs[rr * (HD + 1) + d] = rr < nq ? q[(size_t)(i0 + rr) * qrow + (size_t)h * HD + d] : 0.0f;
    }
    int qpos = pos0 + i0 + r; // this row's position
    bool live = r < nq;
    int qfirst = hx_att_first(qpos, window);
    int P0 = pos0 + i0, P1 = pos0 + i0 + nq; // positions of the tile's queries: [P0, P1)
    int kstart = hx_att_first(P0, window);
    float m = -INFINITY, l = 0.0f, o[DPT];
#pragma unroll
    for (int j = 0; j < DPT; j++) o[j] = 0.0f;
    for (int k0 = kstart; k0 < P1; k0 += KT) {
        __syncthreads(); // the previous tile is consumed (and Qs written, the first time)
        int kr0 = k0 % rows; // row of position k0 + c: kr0 + c, less rows past the ring's end
        for (int e = tid; e < KT * HD / 2; e += 128) {
            int c = e / (HD / 2), d = 2 * (e % (HD / 2)), kp = k0 + c;
            float2 kv = make_float2(0.0f, 0.0f), vv = make_float2(0.0f, 0.0f);
            if (kp < P1) {
                int kr = kr0 + c < rows ? kr0 + c : kr0 + c - rows;
                size_t off = (size_t)kr * kvrow + (size_t)kvh * HD + d;
                kv = __half22float2(*(const __half2 *)(kc + off));
                vv = __half22float2(*(const __half2 *)(vc + off));
            }
            Ks[c * (HD + 1) + d] = kv.x; Ks[c * (HD + 1) + d + 1] = kv.y;
            Vs[c * HD + d] = vv.x; Vs[c * HD + d + 1] = vv.y;
        }
        __syncthreads();
        // scores of row r, key columns sub + TPR * j
        float sc[SC];
#pragma unroll
        for (int j = 0; j < SC; j++) sc[j] = 0.0f;
        const float *qr = Qs + r * (HD + 1);
#pragma unroll 4
        for (int d = 0; d < HD; d++) {
            float qv = qr[d];
#pragma unroll
            for (int j = 0; j < SC; j++) sc[j] = fmaf(qv, Ks[(sub + TPR * j) * (HD + 1) + d], sc[j]);
        }
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < SC; j++) {
            int kp = k0 + sub + TPR * j;
            float v = sc[j] * scale;
            if (softcap > 0.0f) v = softcap * tanhf(v / softcap);
            sc[j] = live && kp <= qpos && kp >= qfirst ? v : -INFINITY;
            tmax = fmaxf(tmax, sc[j]);
        }
#pragma unroll
        for (int w = 1; w < TPR; w <<= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, w));
        float mnew = fmaxf(m, tmax);
        float corr = mnew == -INFINITY ? 1.0f : __expf(m - mnew), psum = 0.0f;
#pragma unroll
        for (int j = 0; j < SC; j++) {
            float pj = sc[j] == -INFINITY ? 0.0f : __expf(sc[j] - mnew);
            psum += pj;
            Ps[r * KT + sub + TPR * j] = pj;
        }
#pragma unroll
        for (int w = 1; w < TPR; w <<= 1) psum += __shfl_xor_sync(0xffffffffu, psum, w);
        l = l * corr + psum;
        m = mnew;
        __syncwarp(); // the row's threads are in one warp: their Ps writes are visible to each other
#pragma unroll
        for (int j = 0; j < DPT; j++) o[j] *= corr;
        const float *pr = Ps + r * KT;
        for (int c = 0; c < KT; c++) {
            float pc = pr[c];
            const float *vr = Vs + c * HD + sub;
#pragma unroll
            for (int j = 0; j < DPT; j++) o[j] = fmaf(pc, vr[TPR * j], o[j]);
        }
    }
    if (!live) return;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
    float *orow = out + (size_t)(i0 + r) * qrow + (size_t)h * HD;
#pragma unroll
    for (int j = 0; j < DPT; j++) orow[sub + TPR * j] = o[j] * inv;
}

template <int HD, int QT, int KT>
static cudaError_t launch_attn_prefill(cudaStream_t st, const float *q, const __half *kc, const __half *vc, int rows,
                                       float *out,
                                       const int *d_pos, int n, int nh, int nkvh, float scale, float softcap,
                                       int window) {
    size_t smem = sizeof(float) * ((size_t)QT * (HD + 1) + (size_t)KT * (HD + 1) + (size_t)KT * HD + (size_t)QT * KT);
    dim3 grid(nh, (n + QT - 1) / QT);
    LAUNCH((k_attn_prefill<HD, QT, KT>), grid, 128, smem, st, q, kc, vc, rows, out, d_pos, n, nh, nkvh, scale, softcap,
           window);
    return cudaGetLastError();
}

// Prefill attention on tensor cores (nvcuda::wmma, f16 inputs, f32
// accumulate): a block of TC_WARPS = 4 warps per (head, tile of TC_QT = 64
// queries), each warp owning 16 query rows. Same loop over key tiles (and the
// same bounds, ring rows and masks) as k_attn_prefill, with both products on
// tensor cores:
//   S (16 x TC_KT) = Q_w K^T: Q rows in f16 fragments (loaded once), the K
//     tile as stored ([key][dim], which read col_major is K^T);
//   softmax in plain code on S in the warp's f32 scratch: scale, softcap,
//     causal/window mask, running max m and sum l per row (two lanes per row);
//     P = exp(s - m) rounded to f16 (l sums the rounded values, so the output
//     is a convex combination of V rows whatever the rounding);
//   O (16 x HD) += P V: O stays in f32 accumulator fragments across tiles.
//     When a row's max moves, O goes through the scratch to be rescaled by
//     exp(m_old - m_new): the fragments' element-to-row mapping is
//     unspecified, so they are only ever read and written with
//     load/store_matrix_sync.
// Numerics against k_attn_prefill: q and P are rounded to f16 (relative error
// up to 2^-11 ~ 5e-4 per element; K and V are f16 in the cache anyway), every
// sum (scores, l, O) is f32. Shared memory (padded rows: +8 halves, +4 floats,
// keep the wmma rules: ldm a multiple of 8 halves / 4 floats, fragment
// pointers 32-byte aligned, and spread the rows over the banks):
//   K and V tiles: 2 * TC_KT * (HD + 8) halves;
//   per warp a scratch of 16 * max(TC_KT + 4, HD + 4) floats (staging of
//     its Q rows as f16, then each tile S in f32, O while it is rescaled, P
//     in f16) and 16 floats (the rows' corrections, then 1 / l);
//   HD 64: 36,096 bytes per block; HD 128: 68,864 (3 blocks per H100 SM).
// Registers (ptxas, CUDA 13.0, sm_80/89/90): __launch_bounds__ asks for 4
// blocks per SM at HD 64 (128 registers) and 3 at HD 128 (168; unbounded it
// took 191, 2 blocks); both spill 8-28 bytes: values reloaded once per tile.
// H100, pp512 against the FP32 kernel (hx_cuda_dev_opts.att_fp32 gives it, for A/B):
// qwen3-0.6b 47.3k -> 71.3k tok/s, llama-3.2-1b 56.9k -> 70.5k, llama-3.1-8b 11.2k -> 13.7k.
enum { TC_QT = 64, TC_KT = 64, TC_WARPS = TC_QT / 16 };
template <int HD> struct tc_shape {
    static constexpr int LDK = HD + 8;          // halves per row of the K / V tile
    static constexpr int LDQ = HD + 8;          // halves per row of the Q staging
    static constexpr int LDS = TC_KT + 4;       // floats per row of S
    static constexpr int LDO = HD + 4;          // floats per row of O
    static constexpr int LDP = TC_KT + 8;       // halves per row of P
    static constexpr int SCR = 16 * (LDS > LDO ? LDS : LDO); // floats of one warp's scratch
    static constexpr size_t BYTES = sizeof(__half) * 2 * TC_KT * LDK + sizeof(float) * TC_WARPS * (SCR + 16);
    static_assert(HD % 16 == 0 && TC_KT % 32 == 0, "wmma tiles");
    static_assert(LDK % 8 == 0 && LDQ % 8 == 0 && LDP % 8 == 0 && LDS % 4 == 0 && LDO % 4 == 0, "wmma ldm");
    static_assert((2 * TC_KT * LDK * sizeof(__half)) % 32 == 0 && (SCR * sizeof(float)) % 32 == 0, "32-byte alignment");
    static_assert(16 * LDQ <= 2 * SCR && 16 * LDP <= 2 * SCR, "Q and P fit the scratch");
};

template <int HD>
__global__ void __launch_bounds__(TC_WARPS * WARP, HD == 128 ? 3 : 4)
k_attn_prefill_tc(const float *__restrict__ q, const __half *__restrict__ kc, const __half *__restrict__ vc, int rows,
                  float *__restrict__ out, const int *d_pos, int n, int nh, int nkvh, float scale, float softcap,
                  int window) {
    pdl_trigger();
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 700 // f16 wmma (sm_70 on; the build's architectures are newer)
    using namespace nvcuda;
    typedef tc_shape<HD> TS;
    typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_frag;
    pdl_wait();
    extern __shared__ __align__(128) unsigned char tc_sm[];
    __half *Ks = (__half *)tc_sm, *Vs = Ks + TC_KT * TS::LDK;
    const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    float *scr = (float *)(Vs + TC_KT * TS::LDK) + warp * TS::SCR;              // this warp's scratch (f32 view)
    __half *hscr = (__half *)scr;                                                // (f16 view: Q staging, P)
    float *rs = (float *)(Vs + TC_KT * TS::LDK) + TC_WARPS * TS::SCR + warp * 16; // per row: corr, then 1 / l
    int h = blockIdx.x, kvh = h / (nh / nkvh);
    // the last query tiles (the most keys) first, so that the short ones fill the tail of the grid
    int pos0 = *d_pos, i0 = (gridDim.y - 1 - blockIdx.y) * TC_QT, nq = n - i0 < TC_QT ? n - i0 : TC_QT;
    int w0 = warp * 16;  // the warp's first row in the tile
    bool wlive = w0 < nq; // whether it has any query (warp-uniform)
    size_t kvrow = (size_t)nkvh * HD, qrow = (size_t)nh * HD;
    // softmax: lanes 2r and 2r + 1 hold row r (the same m and l), even / odd key columns
    int r = lane >> 1, par = lane & 1;
    int qpos = pos0 + i0 + w0 + r;
    bool live = w0 + r < nq;
    int qfirst = hx_att_first(qpos, window);
    int P0 = pos0 + i0, P1 = pos0 + i0 + nq; // positions of the tile's queries: [P0, P1)
    int kstart = hx_att_first(P0, window);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> qa[HD / 16];
    acc_frag of[HD / 16];
    if (wlive) {
        // the warp's Q rows (zero past n) -> f16 in its scratch -> fragments (q: float4 rows, 16-byte aligned)
        for (int e = lane; e < 16 * HD / 4; e += WARP) {
            int rr = e / (HD / 4), d = 4 * (e % (HD / 4));
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (w0 + rr < nq) x = *(const float4 *)(q + (size_t)(i0 + w0 + rr) * qrow + (size_t)h * HD + d);
            __half2 *dst = (__half2 *)(hscr + rr * TS::LDQ + d);
            dst[0] = __floats2half2_rn(x.x, x.y);
            dst[1] = __floats2half2_rn(x.z, x.w);
        }
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) wmma::load_matrix_sync(qa[kk], hscr + 16 * kk, TS::LDQ);
#pragma unroll
        for (int j = 0; j < HD / 16; j++) wmma::fill_fragment(of[j], 0.0f);
    }
    float m = -INFINITY, l = 0.0f;
    for (int k0 = kstart; k0 < P1; k0 += TC_KT) {
        __syncthreads(); // the previous tile is consumed (and the Q staging read, the first time)
        // K and V tiles, 8 halves (16 bytes) per load (cache rows of nkvh * HD halves, cudaMalloc-aligned);
        // positions past P1 are zero
        int kr0 = k0 % rows; // row of position k0 + c: kr0 + c, less rows past the ring's end
        for (int e = threadIdx.x; e < TC_KT * HD / 8; e += TC_WARPS * WARP) {
            int c = e / (HD / 8), d = 8 * (e % (HD / 8)), kp = k0 + c;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (kp < P1) {
                int kr = kr0 + c < rows ? kr0 + c : kr0 + c - rows;
                size_t off = (size_t)kr * kvrow + (size_t)kvh * HD + d;
                kv = *(const uint4 *)(kc + off);
                vv = *(const uint4 *)(vc + off);
            }
            *(uint4 *)(Ks + c * TS::LDK + d) = kv;
            *(uint4 *)(Vs + c * TS::LDK + d) = vv;
        }
        __syncthreads();
        if (!wlive) continue;
        // S = Q_w K^T (16 x TC_KT) into the scratch
#pragma unroll
        for (int j = 0; j < TC_KT / 16; j++) {
            acc_frag sf;
            wmma::fill_fragment(sf, 0.0f);
#pragma unroll
            for (int kk = 0; kk < HD / 16; kk++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> kb;
                wmma::load_matrix_sync(kb, Ks + 16 * j * TS::LDK + 16 * kk, TS::LDK);
                wmma::mma_sync(sf, qa[kk], kb, sf);
            }
            wmma::store_matrix_sync(scr + 16 * j, sf, TS::LDS, wmma::mem_row_major);
        }
        __syncwarp();
        // online softmax of row r: this lane's columns c = 2 * jj + par, jj = j rotated by r / 8 (so that the
        // 32 lanes read 32 different banks)
        float sv[TC_KT / 2], tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < TC_KT / 2; j++) {
            int c = 2 * ((j + (r >> 3)) % (TC_KT / 2)) + par, kp = k0 + c;
            float v = scr[r * TS::LDS + c] * scale;
            if (softcap > 0.0f) v = softcap * tanhf(v / softcap);
            sv[j] = live && kp <= qpos && kp >= qfirst ? v : -INFINITY;
            tmax = fmaxf(tmax, sv[j]);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        float mnew = fmaxf(m, tmax);
        float corr = mnew == -INFINITY ? 1.0f : __expf(m - mnew);
        if (par == 0) rs[r] = corr;
        // a row whose max was -inf has O = 0: nothing to rescale
        bool rescale = __any_sync(0xffffffffu, m != -INFINITY && corr != 1.0f);
        __syncwarp(); // S is read (the scratch is free) and rs written
        if (rescale) {
#pragma unroll
            for (int j = 0; j < HD / 16; j++) wmma::store_matrix_sync(scr + 16 * j, of[j], TS::LDO, wmma::mem_row_major);
            __syncwarp();
            for (int e = lane; e < 16 * HD; e += WARP) scr[(e / HD) * TS::LDO + e % HD] *= rs[e / HD];
            __syncwarp();
#pragma unroll
            for (int j = 0; j < HD / 16; j++) wmma::load_matrix_sync(of[j], scr + 16 * j, TS::LDO, wmma::mem_row_major);
            __syncwarp(); // O is back in the fragments before P overwrites the scratch
        }
        float psum = 0.0f;
#pragma unroll
        for (int j = 0; j < TC_KT / 2; j++) {
            int c = 2 * ((j + (r >> 3)) % (TC_KT / 2)) + par;
            __half ph = __float2half_rn(sv[j] == -INFINITY ? 0.0f : __expf(sv[j] - mnew));
            psum += __half2float(ph);
            hscr[r * TS::LDP + c] = ph;
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l = l * corr + psum;
        m = mnew;
        __syncwarp(); // P written
        // O += P V: P (16 x TC_KT) row_major, the V tile ([key][dim]) row_major
#pragma unroll
        for (int kk = 0; kk < TC_KT / 16; kk++) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> pa;
            wmma::load_matrix_sync(pa, hscr + 16 * kk, TS::LDP);
#pragma unroll
            for (int j = 0; j < HD / 16; j++) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> vb;
                wmma::load_matrix_sync(vb, Vs + 16 * kk * TS::LDK + 16 * j, TS::LDK);
                wmma::mma_sync(of[j], pa, vb, of[j]);
            }
        }
    }
    if (!wlive) return;
    __syncwarp(); // P is read before O overwrites the scratch
    if (par == 0) rs[r] = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int j = 0; j < HD / 16; j++) wmma::store_matrix_sync(scr + 16 * j, of[j], TS::LDO, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 16 * HD / 4; e += WARP) {
        int rr = e / (HD / 4), d = 4 * (e % (HD / 4));
        if (w0 + rr >= nq) break; // rows past n (rr grows with e)
        float4 o = *(const float4 *)(scr + rr * TS::LDO + d);
        float inv = rs[rr];
        o.x *= inv; o.y *= inv; o.z *= inv; o.w *= inv;
        *(float4 *)(out + (size_t)(i0 + w0 + rr) * qrow + (size_t)h * HD + d) = o;
    }
#else
    __trap(); // not reached: no architecture of the build is older than sm_70
#endif
}

template <int HD>
static cudaError_t launch_attn_prefill_tc(cudaStream_t st, const float *q, const __half *kc, const __half *vc, int rows,
                                          float *out, const int *d_pos, int n, int nh, int nkvh, float scale,
                                          float softcap, int window) {
    const size_t smem = tc_shape<HD>::BYTES;
    // above 48 KiB: the kernel's attribute, set once per device (tensor parallelism drives several, one
    // thread each)
    static std::atomic<unsigned long long> opted_in{0};
    int dev = 0;
    cudaError_t rc0 = cudaGetDevice(&dev);
    if (rc0 != cudaSuccess) return rc0;
    unsigned long long bit = 1ull << (dev & 63);
    if (smem > 48 * 1024 && !(opted_in.load() & bit)) {
        cudaError_t rc = cudaFuncSetAttribute(k_attn_prefill_tc<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem);
        if (rc != cudaSuccess) return rc;
        opted_in.fetch_or(bit);
    }
    dim3 grid(nh, (n + TC_QT - 1) / TC_QT);
    LAUNCH(k_attn_prefill_tc<HD>, grid, TC_WARPS * WARP, smem, st, q, kc, vc, rows, out, d_pos, n, nh, nkvh, scale,
           softcap, window);
    return cudaGetLastError();
}

cudaError_t hx_k_attention(cudaStream_t st, const float *q, const __half *kc, const __half *vc, int rows, float *out,
                           const int *d_pos, int n, int nh, int nkvh, int hd, float scale, float softcap, int window,
                           int max_ctx, const hx_cuda_dev_opts *dv) {
    const bool naive = dv && dv->naive_attn; // the one-block-per-query kernel (reference, timing)
    const bool tc = !(dv && dv->att_fp32);   // else the FP32 tiled kernels instead of the tensor-core ones
    if (!naive && n > 1 && tc) {
        // tensor cores (k_attn_prefill_tc): q and P rounded to f16 (relative ~5e-4), sums in f32
        if (hd == 64) return launch_attn_prefill_tc<64>(st, q, kc, vc, rows, out, d_pos, n, nh, nkvh, scale, softcap, window);
        if (hd == 128) return launch_attn_prefill_tc<128>(st, q, kc, vc, rows, out, d_pos, n, nh, nkvh, scale, softcap, window);
    }
    if (!naive && n > 1) {
        // tile shapes timed on an H100 (pp512): hd 64: 32x32 (llama-3.2-1b 28.6k -> 41.8k tok/s);
        // hd 128: 8x32 (qwen3-0.6b 33.7k -> 41.8k; 32x16 was slower than the per-query kernel);
        // hd 256 (gemma 3, 4 heads): no tile shape beat the per-query kernel (43.2k vs 32.6k at 8x16)
        if (hd == 64) return launch_attn_prefill<64, 32, 32>(st, q, kc, vc, rows, out, d_pos, n, nh, nkvh, scale, softcap, window);
        if (hd == 128) return launch_attn_prefill<128, 8, 32>(st, q, kc, vc, rows, out, d_pos, n, nh, nkvh, scale, softcap, window);
    }
    size_t smem = sizeof(float) * ((size_t)hd + 32 + (size_t)max_ctx);
    dim3 grid(nh, n);
    LAUNCH(k_attention_kernel, grid, ATT_THREADS, smem, st, q, kc, vc, rows, out, d_pos, nh, nkvh, hd, scale, softcap, window,
           (const int *)NULL, (const int *)NULL, (size_t)0);
    return cudaGetLastError();
}

// The end of the attention of tokens: each warp's online softmax (m, l) and
// output o for the block's G heads (this lane's E dimensions of each) go to
// shared memory, and dst[g * hd + d] = sum over warps of e^(m_w - M) o_w /
// sum over warps of e^(m_w - M) l_w, M the largest m_w (warps that saw no
// position, l_w = 0, left out). Ends with dst written by the block's threads
// (no barrier after).
template <int E, int G, int NW>
static __device__ __forceinline__ void attn_merge_warps(const float (&o)[G][E], const float (&m)[G],
                                                        const float (&l)[G], float (&ow)[NW][G * 32 * E],
                                                        float (&mw)[NW][G], float (&lw)[NW][G], float *dst) {
    constexpr int hd = 32 * E;
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int e = 0; e < E; e++) ow[wid][g * hd + lane * E + e] = o[g][e];
        if (lane == 0) { mw[wid][g] = m[g]; lw[wid][g] = l[g]; }
    }
    __syncthreads();
    for (int d = threadIdx.x; d < G * hd; d += blockDim.x) {
        int g = d / hd;
        float M = -INFINITY, L = 0.0f, acc = 0.0f;
        for (int w = 0; w < NW; w++) M = fmaxf(M, mw[w][g]);
        for (int w = 0; w < NW; w++)
            if (lw[w][g] > 0.0f) {
                float f = __expf(mw[w][g] - M);
                L += lw[w][g] * f;
                acc += ow[w][d] * f;
            }
        dst[d] = acc / L;
    }
}

// Attention of tokens of many sequences (q already roped, every position
// first..p of a token's slot already in the cache), head sizes 32 * E: a block
// per (KV head, token) holding the G query heads that share the KV head (G = 1:
// a block per query head), a warp per position strided over the block's warps,
// ATT_NB rows of K and V in flight per warp, each row's K and V read once for
// the G heads, online softmax per warp and head, warps merged at the end.
// ATT_TOK_THREADS: 8 warps, so that a few hundred positions take a few rounds
// of loads (each round waits for its loads: the kernel is latency-bound).
// It keeps its own loop rather than decode.cuh's attn_warp_pass: with the
// shared pass (dots of every slot of a round, masked after) B = 128 decode
// of qwen3-0.6b fell from 24.6k to 20.9k tok/s on an H100 (bench/RESULTS.md).
enum { ATT_TOK_THREADS = 256 };
template <int E, int G>
__global__ void __launch_bounds__(ATT_TOK_THREADS)
k_attn_tok_warp(const float *__restrict__ q, const __half *__restrict__ kc, const __half *__restrict__ vc, int rows,
                size_t slot_stride, float *__restrict__ out, const int *__restrict__ tpos, const int *__restrict__ tslot,
                int nh, int nkvh, float scale, float softcap, int window) {
    typedef typename Halves<E>::T HT;
    constexpr int hd = 32 * E, NW = ATT_TOK_THREADS / 32;
    __shared__ float ow[NW][G * hd];
    __shared__ float mw[NW][G], lw[NW][G];
    pdl_trigger();
    pdl_wait();
    int i = blockIdx.y, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int kvh = G > 1 ? blockIdx.x : blockIdx.x / (nh / nkvh), h0 = G > 1 ? kvh * G : blockIdx.x, p = tpos[i];
    int first = hx_att_first(p, window), len = p - first + 1, r0 = first % rows;
    size_t kvrow = (size_t)nkvh * hd, so = (size_t)tslot[i] * slot_stride + (size_t)kvh * hd + lane * E;
    const __half *kb = kc + so, *vb = vc + so;
    float qr[G][E], m[G], l[G], o[G][E];
#pragma unroll
    for (int g = 0; g < G; g++) {
        load_e<E>(q + ((size_t)i * nh + h0 + g) * hd + lane * E, qr[g]);
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; e++) o[g][e] = 0.0f;
    }
    for (int ib = wid; ib < len; ib += NW * ATT_NB) {
        HT kr[ATT_NB], vr[ATT_NB];
#pragma unroll
        for (int j = 0; j < ATT_NB; j++) {
            int t = ib + NW * j;
            if (t < len) {
                int r = r0 + t < rows ? r0 + t : r0 + t - rows;
                kr[j] = *(const HT *)(kb + (size_t)r * kvrow);
                vr[j] = *(const HT *)(vb + (size_t)r * kvrow);
            }
        }
        float s[G][ATT_NB], mb[G];
#pragma unroll
        for (int g = 0; g < G; g++) mb[g] = -INFINITY;
#pragma unroll
        for (int j = 0; j < ATT_NB; j++) {
            bool in = ib + NW * j < len;
            float kf[E];
            if (in) halves_f<E>(kr[j], kf);
#pragma unroll
            for (int g = 0; g < G; g++) {
                float a = 0.0f;
                if (in)
#pragma unroll
                    for (int e = 0; e < E; e++) a = fmaf(qr[g][e], kf[e], a);
                a = warp_sum(a) * scale;
                if (softcap > 0.0f) a = softcap * tanhf(a / softcap);
                s[g][j] = in ? a : -INFINITY;
                mb[g] = fmaxf(mb[g], s[g][j]);
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float mn = fmaxf(m[g], mb[g]), corr = __expf(m[g] - mn);
            l[g] *= corr;
#pragma unroll
            for (int e = 0; e < E; e++) o[g][e] *= corr;
            m[g] = mn;
        }
#pragma unroll
        for (int j = 0; j < ATT_NB; j++) {
            if (ib + NW * j >= len) break;
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
    attn_merge_warps<E, G, NW>(o, m, l, ow, mw, lw, out + ((size_t)i * nh + h0) * hd);
}

// Blocks of G query heads only when there are enough of them to fill the GPU:
// at 8 and 16 tokens of 8 KV heads the grouped fused kernel was 7-13% slower
// (fewer blocks in flight), from 32 it was as fast or faster (bench/RESULTS.md).
static bool attn_tok_grouped(int n, int nkvh) { return (long)n * nkvh >= 256; }

// The kernel for head size 32 * E with G query heads per KV head (G * E <= 16:
// the block's merge buffer and registers), else a block per query head.
template <int E>
static void launch_attn_tok(cudaStream_t st, int n, int nh, int nkvh, const float *q, const __half *kc, const __half *vc,
                            int rows, size_t slot_stride, float *out, const int *tpos, const int *tslot, float scale,
                            float softcap, int window) {
    int grp = attn_tok_grouped(n, nkvh) ? nh / nkvh : 1;
    dim3 gq(nkvh, n), g1(nh, n);
#define ATT_TOK(GG, grid) LAUNCH((k_attn_tok_warp<E, GG>), grid, ATT_TOK_THREADS, 0, st, q, kc, vc, rows, slot_stride, \
                                 out, tpos, tslot, nh, nkvh, scale, softcap, window)
    if (grp == 2 && 2 * E <= 16) ATT_TOK(2, gq);
    else if (grp == 4 && 4 * E <= 16) ATT_TOK((4 * E <= 16 ? 4 : 1), gq);
    else if (grp == 8 && 8 * E <= 16) ATT_TOK((8 * E <= 16 ? 8 : 1), gq);
    else ATT_TOK(1, g1);
#undef ATT_TOK
}

cudaError_t hx_k_attention_tok(cudaStream_t st, const float *q, const __half *kc, const __half *vc, int rows,
                               size_t slot_stride, float *out, const int *tpos, const int *tslot, int n, int nh,
                               int nkvh, int hd, float scale, float softcap, int window, int max_ctx,
                               const hx_cuda_dev_opts *dv) {
    const bool naive = dv && dv->naive_attn;
    if (!naive && hd == 64)
        launch_attn_tok<2>(st, n, nh, nkvh, q, kc, vc, rows, slot_stride, out, tpos, tslot, scale, softcap, window);
    else if (!naive && hd == 128)
        launch_attn_tok<4>(st, n, nh, nkvh, q, kc, vc, rows, slot_stride, out, tpos, tslot, scale, softcap, window);
    else if (!naive && hd == 256)
        launch_attn_tok<8>(st, n, nh, nkvh, q, kc, vc, rows, slot_stride, out, tpos, tslot, scale, softcap, window);
    else {
        dim3 grid(nh, n);
        size_t smem = sizeof(float) * ((size_t)hd + 32 + (size_t)max_ctx);
        LAUNCH(k_attention_kernel, grid, ATT_THREADS, smem, st, q, kc, vc, rows, out, (const int *)NULL, nh, nkvh, hd,
               scale, softcap, window, tpos, tslot, slot_stride);
    }
    return cudaGetLastError();
}

// Decode of many sequences, one token each (no two tokens of the same slot):
// the rope kernel folded into the attention of tokens, as the one-token
// decode item does it (decode.cuh). Block (KV head, i) with the G query
// heads of the KV head (as k_attn_tok_warp; G = 1: a block per query head):
// token i's query heads are normed and rotated in registers, warp 0 also
// rotates the token's k of its KV head and takes k and v rounded to f16 as the
// cache holds them; the group's first block stores them at (tslot[i],
// tpos[i]). The cached positions first..p-1 are read once for the G heads, the
// current one comes from registers. Output: f32 rows of out, or (xq not NULL) mmq's 8-bit
// activations: xq (np, nh * hd) and ds[g * np + i] = (d, d * sum q) per 32
// (hx_k_mmq_quant's rounding), tokens n..np-1 repeating token n - 1, so that
// wo needs no quantization launch.
// (launch bounds: at least 3 blocks an SM while G * hd <= 128, as
// k_attn_tok_warp holds without the bound; more registers cost B = 128 a
// block an SM)
template <int E, int G>
__global__ void __launch_bounds__(ATT_TOK_THREADS, E * G <= 4 ? 3 : 2) k_attn_tok_rope(hx_attn_tok_args A) {
    typedef typename Halves<E>::T HT;
    constexpr int hd = 32 * E, NW = ATT_TOK_THREADS / 32, half = hd / 2;
    __shared__ float ow[NW][G * hd];
    __shared__ float mw[NW][G], lw[NW][G], res[G * hd];
    pdl_trigger();
    // a block per (KV head, token) with its G query heads h0.. (G = 1: a block per query head)
    int i = blockIdx.y, lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    int group = A.nh / A.nkvh, kvh = G > 1 ? blockIdx.x : blockIdx.x / group, h0 = G > 1 ? kvh * G : blockIdx.x;
    int rows = A.rows;
    // positions, slots and the cache rows below p do not depend on the running kernels
    int p = A.tpos[i], first = hx_att_first(p, A.window), nc = p - first, r0 = first % rows;
    size_t kvrow = (size_t)A.nkvh * hd, so = (size_t)A.tslot[i] * A.slot_stride + (size_t)kvh * hd;
    const __half *kb = A.kc + so + lane * E, *vb = A.vc + so + lane * E;
    HT kr[ATT_NB], vr[ATT_NB];
    attn_rows<E>(kb, vb, kvrow, r0, rows, nc, wid, NW, kr, vr);
    float2 cs[E];
    int j0 = A.neox ? (lane & 15) * E : lane * (E / 2);
#pragma unroll
    for (int e = 0; e < E; e++)
        if (A.neox || e < E / 2)
            cs[e] = A.rope_tab ? A.rope_tab[(size_t)p * half + j0 + e] : hx_rope_cs(p, j0 + e, hd, A.base, A.rope_scale);
    pdl_wait();
    float q[G][E];
#pragma unroll
    for (int g = 0; g < G; g++) {
        load_e<E>(A.q + ((size_t)i * A.nh + h0 + g) * hd + lane * E, q[g]);
        norm_rope_e<E>(q[g], A.q_norm, A.eps, A.neox, cs);
    }
    const bool cur = wid == 0; // warp 0 adds the current position
    float kcur[E], vcur[E];
    if (cur) {
        load_e<E>(A.k + ((size_t)i * A.nkvh + kvh) * hd + lane * E, kcur);
        load_e<E>(A.v + ((size_t)i * A.nkvh + kvh) * hd + lane * E, vcur);
        HT kh, vh;
        attn_cur_kv<E>(kcur, vcur, A.k_norm, A.eps, A.neox, cs, kh, vh);
        if (h0 % group == 0) {
            size_t off = so + (size_t)(p % rows) * kvrow + lane * E;
            *(HT *)(A.kc + off) = kh;
            *(HT *)(A.vc + off) = vh;
        }
    }
    float m[G], l[G], o[G][E];
    attn_warp_pass_g<E, G>(q, kb, vb, kvrow, r0, rows, nc, wid, NW, kr, vr, cur, kcur, vcur, A.scale, A.softcap, m, l, o);
    attn_merge_warps<E, G, NW>(o, m, l, ow, mw, lw, res);
    if (!A.xq) {
        for (int d = threadIdx.x; d < G * hd; d += blockDim.x) A.out[((size_t)i * A.nh + h0) * hd + d] = res[d];
        return;
    }
    __syncthreads();
    // a warp per 32 outputs: the heads' G * E groups of the wo input
    int cols = A.nh * hd;
    for (int gw = wid; gw < G * E; gw += NW) {
        int gi = h0 * E + gw;
        float v = res[gw * 32 + lane], amax = warp_max(fabsf(v)), d = amax / 127.0f;
        int qv = d > 0.0f ? __float2int_rn(v / d) : 0, sum = __reduce_add_sync(0xffffffffu, qv);
        for (int t = i; t < (i == A.n - 1 ? A.np : i + 1); t++) { // the last token fills the pad rows
            A.xq[(size_t)t * cols + gi * 32 + lane] = (int8_t)qv;
            if (lane == 0) A.ds[(size_t)gi * A.np + t] = make_float2(d, d * (float)sum);
        }
    }
}

// G query heads per block where the group allows (as launch_attn_tok), else one.
template <int E> static void launch_attn_tok_rope(cudaStream_t st, const hx_attn_tok_args *a) {
    int grp = attn_tok_grouped(a->n, a->nkvh) ? a->nh / a->nkvh : 1;
    dim3 gq(a->nkvh, a->n), g1(a->nh, a->n);
    if (grp == 2 && 2 * E <= 16) LAUNCH((k_attn_tok_rope<E, 2>), gq, ATT_TOK_THREADS, 0, st, *a);
    else if (grp == 4 && 4 * E <= 16) LAUNCH((k_attn_tok_rope<E, (4 * E <= 16 ? 4 : 1)>), gq, ATT_TOK_THREADS, 0, st, *a);
    else if (grp == 8 && 8 * E <= 16) LAUNCH((k_attn_tok_rope<E, (8 * E <= 16 ? 8 : 1)>), gq, ATT_TOK_THREADS, 0, st, *a);
    else LAUNCH((k_attn_tok_rope<E, 1>), g1, ATT_TOK_THREADS, 0, st, *a);
}

cudaError_t hx_k_attention_tok_rope(cudaStream_t st, const hx_attn_tok_args *a, int hd) {
    if (a->np < a->n || (a->xq && !a->ds) || (!a->xq && !a->out)) return cudaErrorInvalidValue;
    if (hd == 64) launch_attn_tok_rope<2>(st, a);
    else if (hd == 128) launch_attn_tok_rope<4>(st, a);
    else if (hd == 256) launch_attn_tok_rope<8>(st, a);
    else return cudaErrorInvalidValue;
    return cudaGetLastError();
}

__global__ void k_gather_rows(const float *__restrict__ x, const int *__restrict__ idx, int dim, float *__restrict__ out) {
    pdl_trigger();
    pdl_wait();
    const float *src = x + (size_t)idx[blockIdx.x] * dim;
    float *dst = out + (size_t)blockIdx.x * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) dst[d] = src[d];
}

cudaError_t hx_k_gather_rows(cudaStream_t st, const float *x, const int *idx, int n, int dim, float *out) {
    LAUNCH(k_gather_rows, n, 256, 0, st, x, idx, dim, out);
    return cudaGetLastError();
}

__global__ void k_glu_kernel(float *g, const float *u, size_t count, int act) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        g[i] = ffn_act(g[i], act) * u[i];
    }
}
cudaError_t hx_k_glu(cudaStream_t st, float *g, const float *u, size_t count, int act) {
    LAUNCH(k_glu_kernel, grid_for(count, 256), 256, 0, st, g, u, count, act);
    return cudaGetLastError();
}
__global__ void k_add_kernel(float *x, const float *o, size_t count) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        x[i] += o[i];
}
cudaError_t hx_k_add(cudaStream_t st, float *x, const float *o, size_t count) {
    LAUNCH(k_add_kernel, grid_for(count, 256), 256, 0, st, x, o, count);
    return cudaGetLastError();
}
__global__ void k_softcap_kernel(float *x, size_t count, float cap) {
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
        x[i] = cap * tanhf(x[i] / cap);
}
cudaError_t hx_k_softcap(cudaStream_t st, float *x, size_t count, float cap) {
    LAUNCH(k_softcap_kernel, grid_for(count, 256), 256, 0, st, x, count, cap);
    return cudaGetLastError();
}

// Argmax as one 64-bit key per element: the float's bits mapped to an
// order-preserving unsigned value in the high half, ~index in the low half
// (so on ties the lowest index wins, like hx_argmax). Blocks reduce their
// share and combine with one atomicMax; *key must be 0 before the launch.
// With tok: the last block to finish (count, zero before and after) writes
// the winning index to *tok and advances *pos by one, so that a decode step
// launched next runs on it with no copy from the host (hx_cuda_decode_greedy's
// lookahead).
__device__ __forceinline__ unsigned long long argmax_key(float v, int i) {
    uint32_t u = __float_as_uint(v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (uint32_t)~(uint32_t)i;
}
__global__ void k_argmax_kernel(const float *x, int n, unsigned long long *key, int *tok, int *pos, unsigned *count) {
    pdl_trigger();
    pdl_wait();
    __shared__ unsigned long long sk[32];
    unsigned long long best = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        float v = x[i];
        if (v == v) { unsigned long long k = argmax_key(v, i); if (k > best) best = k; } // NaN never wins
    }
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long ok = __shfl_xor_sync(0xffffffffu, best, o);
        if (ok > best) best = ok;
    }
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sk[w] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int k = 0; k < (int)(blockDim.x >> 5); k++) if (sk[k] > best) best = sk[k];
        atomicMax(key, best);
        if (tok) {
            __threadfence(); // this block's atomicMax before its count
            if (atomicAdd(count, 1u) == gridDim.x - 1) { // every block's max is in
                *tok = hx_argmax_key_index(atomicMax(key, 0ull)); // (an atomic read of the final key)
                *pos += 1;
                *count = 0;
            }
        }
    }
}
cudaError_t hx_k_argmax(cudaStream_t st, const float *x, int n, unsigned long long *key, int *tok, int *pos,
                        unsigned *count) {
    cudaError_t rc = cudaMemsetAsync(key, 0, sizeof *key, st);
    if (rc != cudaSuccess) return rc;
    int blocks = (n + 1023) / 1024;
    if (blocks > 264) blocks = 264;
    LAUNCH(k_argmax_kernel, blocks, 256, 0, st, x, n, key, tok, pos, count);
    return cudaGetLastError();
}
