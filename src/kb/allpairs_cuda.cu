// allpairs_cuda.cu — kb_entry_pairs' all-pairs product on the GPU (see
// allpairs_cuda.h for the contract and why the result equals the CPU's).
//
// Tiles: 128 x 128 pairs per block of 4 warps (64 x 64 each), fp16 operands
// through a 3-stage cp.async pipeline (64 of k a stage) into padded shared memory, ldmatrix and
// mma.sync m16n8k16 with f32 accumulators. The epilogue tests each similarity
// in registers against the lowest window bound of the kinds the tile can hold
// (one compare; single-topic overlaps only where both blocks hold a
// single-entry topic's row), and only those
// above take the full test and are appended (row, col) to a candidate buffer:
// no tile leaves the chip. A second kernel rescores the candidates in f32 with
// the CPU kernel's arithmetic; the host visits them into the kept lists and
// reads the lists' cuts back before the next round, so the window narrows as
// the lists fill. A round whose candidates overflow the buffer is dropped and
// redone in halves (rows, then columns): pieces are disjoint, each pair is
// visited once, and a single 128 x 128 tile always fits.
//
// Own tiles rather than cuBLAS GemmEx: GemmEx writes every similarity to
// memory (2 bytes a pair, about 1 TB at 10^6 rows, read back again by a
// selection kernel), which costs more than the products; a fused epilogue
// keeps them in registers.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <vector>

extern "C" {
#include "kb/allpairs_cuda.h"
#include "core/core.h"
}

namespace {

// BK 64 in 3 stages (110 KB: two blocks a multiprocessor) ran the tiles faster than BK 32 in 4 (bench/RESULTS.md)
constexpr int BM = 128, BK = 64, STAGES = 3, THREADS = 128, LDS = BK + 8; // LDS: halves a shared row (16 B of padding: no bank conflicts for ldmatrix)
constexpr size_t SMEM = (size_t)STAGES * 2 * BM * LDS * sizeof(__half);
constexpr unsigned CAP = 1u << 24;         // candidates a round may hold (HX_KB_ALLPAIRS_CAP: smaller, for tests)
constexpr double AUTO_MIN_PAIRS = 268435456.0; // HX_DEVICE_AUTO: below this many row x row products the CPU is as quick

struct rec { unsigned a, b; float s; };     // a candidate rescored: rows, CPU f32 similarity

struct tile_args {
    const __half *x;        // (n_pad, dpad) fp16 rows, zero padded
    int dpad;
    kb_stage st;            // which pairs (rows a, columns b) are the stage's
    unsigned rb0, cb0, nrb; // first row / column block of this piece, its row blocks
    const int *topic;       // (n)
    const unsigned char *single; // (n) 1: the row's topic has one entry
    const unsigned char *block_single; // (n_pad / BM) 1: some row of the block is single
    kb_cand_win w;
    uint2 *cand;            // (cap)
    unsigned *count, cap;
};

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned r[4], const __half *p) {
    unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}

__device__ __forceinline__ void mma16816(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// The rare path: a similarity above the lowest bound. Rows outside [0, n),
// pairs of the wrong orientation and pairs outside every kind's window stay.
__device__ __noinline__ void consider(const tile_args &t, unsigned i, unsigned j, float s) {
    if (!kb_stage_pair(&t.st, i, j)) return;
    if (!kb_cand_take(&t.w, s, t.topic[i] != t.topic[j], t.single[i] && t.single[j])) return;
    unsigned k = atomicAdd(t.count, 1u);
    if (k < t.cap) t.cand[k] = make_uint2(i, j);
}

// grid: the piece's nrb x ncb tiles, row block fastest: consecutive blocks
// share one column tile and the piece's few row tiles stay in L2, so each
// column tile is read from memory once a piece, not once a row block.
// Block (bi, bj) = rows bi*128.., columns bj*128..
__global__ void __launch_bounds__(THREADS, 2) tile_kernel(const __grid_constant__ tile_args t) {
    const unsigned bi = t.rb0 + blockIdx.x % t.nrb, bj = t.cb0 + blockIdx.x / t.nrb;
    if (!kb_stage_tile(&t.st, bi, bj)) return; // no pair of this tile has the stage's orientation
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __half *sa = reinterpret_cast<__half *>(smem_raw); // (STAGES, BM, LDS)
    __half *sb = sa + STAGES * BM * LDS;               // (STAGES, BM, LDS)
    const __half *ga = t.x + (size_t)bi * BM * t.dpad, *gb = t.x + (size_t)bj * BM * t.dpad;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, wm = warp / 2, wn = warp % 2;
    const int KT = t.dpad / BK; // dpad: a multiple of BK
    // the one compare every similarity takes: the lowest bound of the kinds this tile can hold
    const float lo_min = fminf(fminf(t.w.lo[KB_KIND_DUP], t.w.lo[KB_KIND_LINK]),
                               t.block_single[bi] && t.block_single[bj] ? t.w.lo[KB_KIND_OVER] : INFINITY);
    float acc[4][8][4];
#pragma unroll
    for (int a = 0; a < 4; a++)
#pragma unroll
        for (int b = 0; b < 8; b++)
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][b][c] = 0.0f;
    auto load = [&](int stage, int kt) { // 128 rows x BK/8 chunks of 16 B, each operand
#pragma unroll
        for (int c = tid; c < BM * (BK / 8); c += THREADS) {
            const int row = c / (BK / 8), ch = c % (BK / 8);
            cp_async16(sa + (stage * BM + row) * LDS + ch * 8, ga + (size_t)row * t.dpad + kt * BK + ch * 8);
            cp_async16(sb + (stage * BM + row) * LDS + ch * 8, gb + (size_t)row * t.dpad + kt * BK + ch * 8);
        }
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < KT) load(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads(); // slot kt landed for all; slot kt-1 is no longer read
        if (kt + STAGES - 1 < KT) load((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
        cp_async_commit();
        const __half *As = sa + (kt % STAGES) * BM * LDS, *Bs = sb + (kt % STAGES) * BM * LDS;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned af[4][4], bf[8][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
                ldmatrix_x4(af[mi], As + (wm * 64 + mi * 16 + lane % 16) * LDS + kk + (lane / 16) * 8);
#pragma unroll
            for (int nj = 0; nj < 8; nj += 2) {
                unsigned r[4];
                ldmatrix_x4(r, Bs + (wn * 64 + nj * 8 + lane % 8 + (lane / 16) * 8) * LDS + kk + ((lane / 8) % 2) * 8);
                bf[nj][0] = r[0]; bf[nj][1] = r[1]; bf[nj + 1][0] = r[2]; bf[nj + 1][1] = r[3];
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int nj = 0; nj < 8; nj++) mma16816(acc[mi][nj], af[mi], bf[nj]);
        }
    }
    // accumulator layout of m16n8: c0,c1 at row lane/4, columns 2*(lane%4)+{0,1}; c2,c3 eight rows down
    const unsigned i0 = bi * BM + wm * 64 + lane / 4, j0 = bj * BM + wn * 64 + 2 * (lane % 4);
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int nj = 0; nj < 8; nj++)
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (acc[mi][nj][c] >= lo_min)
                    consider(t, i0 + mi * 16 + (c / 2) * 8, j0 + nj * 8 + (c % 2), acc[mi][nj][c]);
}

// rows base.. of (n_pad, dpad) fp16 from (n, dim) f32, zeros outside; and
// their largest norm (as float bits: non-negative floats order as integers; NaN is largest)
__global__ void to_half_kernel(const float *v, unsigned n, unsigned base, int dim, int dpad, __half *x,
                               unsigned *max_norm_bits) {
    const unsigned row = base + blockIdx.x;
    double ss = 0;
    for (int k = threadIdx.x; k < dpad; k += blockDim.x) {
        float f = row < n && k < dim ? v[(size_t)row * dim + k] : 0.0f;
        x[(size_t)row * dpad + k] = __float2half_rn(f);
        ss += (double)f * f;
    }
    for (int o = 16; o > 0; o /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ double part[32];
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0;
        for (int w = 0; w < (int)blockDim.x / 32; w++) t += part[w];
        float norm = (float)(sqrt(t) * (1 + 1e-6));
        atomicMax(max_norm_bits, __float_as_uint(norm) & 0x7fffffffu);
    }
}

// The CPU kernel's similarity of each candidate: one chain over k, in order,
// from +0 (fma_chain: fused, as the AVX2 kernel; else rounded product then add).
__global__ void rescore_kernel(const float *v, int dim, const uint2 *cand, const unsigned *count, unsigned cap,
                               int fma_chain, rec *out) {
    const unsigned n = min(*count, cap);
    for (unsigned q = blockIdx.x * blockDim.x + threadIdx.x; q < n; q += gridDim.x * blockDim.x) {
        const uint2 c = cand[q];
        const float *a = v + (size_t)c.x * dim, *b = v + (size_t)c.y * dim;
        float s = 0.0f;
        if (fma_chain)
            for (int k = 0; k < dim; k++) s = __fmaf_rn(a[k], b[k], s);
        else
            for (int k = 0; k < dim; k++) s = __fadd_rn(s, __fmul_rn(a[k], b[k]));
        out[q] = rec{c.x, c.y, s};
    }
}

struct dev_bufs {
    float *v = nullptr;
    __half *x = nullptr;
    int *topic = nullptr;
    unsigned char *single = nullptr, *block_single = nullptr;
    uint2 *cand = nullptr;
    rec *recs = nullptr;
    unsigned *count = nullptr; // [0] candidates, [1] max norm bits
    cudaEvent_t ev[2] = {nullptr, nullptr};
    ~dev_bufs() {
        cudaFree(v); cudaFree(x); cudaFree(topic); cudaFree(single); cudaFree(block_single); cudaFree(cand); cudaFree(recs); cudaFree(count);
        for (cudaEvent_t e : ev) if (e) cudaEventDestroy(e);
    }
};

hx_status fail(hx_error *e, hx_status st, const char *fmt, const char *what, cudaError_t rc) {
    return hx_err(e, st, fmt, what, cudaGetErrorString(rc));
}

} // namespace

#define CK(call) do { cudaError_t rc_ = (call); \
    if (rc_ != cudaSuccess) return fail(e, HX_ERR_DEVICE, "all-pairs on cuda: %s: %s", #call, rc_); } while (0)

// Pairs a stage forms (the log line's rate).
static double stage_pairs(const kb_stage *s) {
    const double n = (double)s->n, lo = (double)s->lo, hi = (double)s->hi;
    if (s->incremental) return (n - lo) * lo + (n - lo) * (n - lo - 1) / 2; // new x old, new x new
    return (hi - lo) * (n - 1) - (hi * (hi - 1) - lo * (lo - 1)) / 2;      // sum over a in [lo, hi) of n - 1 - a
}

static hx_status run(const kb_rows *r, const kb_stage *s, const kb_opts *o, bool fma_chain, bool log, bool must,
                     const kb_pair_sink *sink, hx_error *e) {
    double t0 = hx_now_s();
    const unsigned n = (unsigned)r->n;
    const int dim = r->dim, dpad = (dim + BK - 1) / BK * BK;
    unsigned rb_first, rb_end, nb;
    kb_stage_blocks(s, BM, &rb_first, &rb_end, &nb);
    const unsigned n_pad = nb * BM;
    // the rows a tile can read: a full stage pairs its rows with later ones
    // only, so the rows before its first block stay on the host
    const unsigned base = s->incremental ? 0 : rb_first * BM;
    int gpu = 0;
    cudaDeviceProp prop;
    CK(cudaGetDevice(&gpu));
    CK(cudaGetDeviceProperties(&prop, gpu));
    unsigned cap = CAP;
    if (const char *c = getenv("HX_KB_ALLPAIRS_CAP")) cap = (unsigned)std::min(std::max(atol(c), (long)BM * BM), (long)CAP);
    dev_bufs d;
    std::vector<unsigned char> single(n), block_single(nb);
    for (unsigned i = 0; i < n; i++) {
        single[i] = r->count[r->topic[i]] == 1;
        block_single[i / BM] |= single[i];
    }
    cudaError_t rc;
    if ((rc = cudaMalloc(&d.v, (size_t)n * dim * sizeof(float))) != cudaSuccess ||
        (rc = cudaMalloc(&d.x, (size_t)n_pad * dpad * sizeof(__half))) != cudaSuccess ||
        (rc = cudaMalloc(&d.topic, (size_t)n * sizeof(int))) != cudaSuccess ||
        (rc = cudaMalloc(&d.single, (size_t)n)) != cudaSuccess ||
        (rc = cudaMalloc(&d.block_single, (size_t)nb)) != cudaSuccess ||
        (rc = cudaMalloc(&d.cand, (size_t)cap * sizeof(uint2))) != cudaSuccess ||
        (rc = cudaMalloc(&d.recs, (size_t)cap * sizeof(rec))) != cudaSuccess ||
        (rc = cudaMalloc(&d.count, 2 * sizeof(unsigned))) != cudaSuccess) {
        cudaGetLastError();
        return fail(e, must ? HX_ERR_NOMEM : HX_ERR_UNSUPPORTED, "all-pairs on cuda: %s do not fit on the device: %s",
                    "the rows and the candidate buffers", rc);
    }
    CK(cudaEventCreate(&d.ev[0]));
    CK(cudaEventCreate(&d.ev[1]));
    CK(cudaMemcpy(d.v + (size_t)base * dim, r->vec + (size_t)base * dim, (size_t)(n - std::min(base, n)) * dim * sizeof(float),
                  cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.topic, r->topic, (size_t)n * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.single, single.data(), n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.block_single, block_single.data(), nb, cudaMemcpyHostToDevice));
    CK(cudaMemset(d.count, 0, 2 * sizeof(unsigned)));
    if (n_pad > base) to_half_kernel<<<n_pad - base, 128>>>(d.v, n, base, dim, dpad, d.x, d.count + 1);
    CK(cudaGetLastError());
    unsigned bits = 0;
    CK(cudaMemcpy(&bits, d.count + 1, sizeof bits, cudaMemcpyDeviceToHost));
    float max_norm;
    memcpy(&max_norm, &bits, sizeof max_norm);
    if (!(max_norm <= 16.0f)) // fp16 range and the error bound both assume rows of moderate norm
        return hx_err(e, must ? HX_ERR_ARG : HX_ERR_UNSUPPORTED,
                      "all-pairs on cuda: a row has norm %g (not a unit vector): not on fp16 tiles", (double)max_norm);
    const float eps = kb_f16_eps(dim, max_norm);
    const double t_up = hx_now_s() - t0;
    CK(cudaFuncSetAttribute(tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM));

    // pieces: rounds of row blocks (growing while they fit), split on overflow
    std::vector<kb_piece> todo;
    std::vector<rec> host;
    unsigned grow = 1, rb_next = rb_first;
    size_t n_cand = 0;
    int n_rounds = 0, n_redone = 0;
    float tile_ms = 0;
    for (;;) {
        if (todo.empty()) {
            if (rb_next >= rb_end) break;
            unsigned nrb = std::min(grow, rb_end - rb_next);
            todo.push_back(kb_stage_piece(s, rb_next, nrb, nb));
            rb_next += nrb;
            grow = std::min(grow * 2, 32u);
        }
        kb_piece p = todo.back();
        todo.pop_back();
        float cut[KB_KINDS];
        sink->cut(sink->ctx, cut);
        tile_args t = {d.x, dpad, *s, p.rb0, p.cb0, p.nrb, d.topic, d.single, d.block_single,
                       kb_cand_window(o, cut, eps), d.cand, d.count, cap};
        CK(cudaMemsetAsync(d.count, 0, sizeof(unsigned)));
        CK(cudaEventRecord(d.ev[0]));
        tile_kernel<<<p.nrb * p.ncb, THREADS, SMEM>>>(t);
        CK(cudaGetLastError());
        CK(cudaEventRecord(d.ev[1]));
        rescore_kernel<<<4 * prop.multiProcessorCount, 256>>>(d.v, dim, d.cand, d.count, cap, fma_chain ? 1 : 0,
                                                              d.recs);
        CK(cudaGetLastError());
        unsigned cnt = 0;
        CK(cudaMemcpy(&cnt, d.count, sizeof cnt, cudaMemcpyDeviceToHost));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, d.ev[0], d.ev[1]));
        tile_ms += ms;
        n_rounds++;
        if (cnt > cap) { // too many for the buffer: drop, redo in disjoint halves (rows first)
            n_redone++;
            grow = 1;
            kb_piece h[2]; // a single tile holds at most 128 x 128 < CAP: p has two or more
            kb_piece_halves(s, p, h);
            todo.push_back(h[1]);
            todo.push_back(h[0]);
            continue;
        }
        if (!cnt) continue;
        host.resize(cnt);
        CK(cudaMemcpy(host.data(), d.recs, (size_t)cnt * sizeof(rec), cudaMemcpyDeviceToHost));
        for (const rec &q : host) sink->visit(sink->ctx, q.a, q.b, q.s);
        n_cand += cnt;
    }
    CK(cudaDeviceSynchronize());
    if (log) {
        const double pairs = stage_pairs(s);
        char rows[96] = "";
        if (!s->incremental && (s->lo > 0 || s->hi < s->n)) snprintf(rows, sizeof rows, " (pairs of rows %zu..%zu)", s->lo, s->hi);
        fprintf(stderr,
                "all-pairs: cuda:%d (%s), %u rows x %d%s, %.3f s (upload and fp16 %.3f s, tiles %.3f s at %.0f TFLOP/s "
                "fp16), %zu candidates rescored in f32, %d rounds (%d redone)\n",
                gpu, prop.name, n, dim, rows, hx_now_s() - t0, t_up, tile_ms / 1e3,
                tile_ms > 0 ? 2.0 * dim * pairs / (tile_ms / 1e3) / 1e12 : 0.0, n_cand, n_rounds, n_redone);
    }
    return HX_OK;
}

extern "C" hx_status kb_allpairs_cuda(const kb_rows *r, const kb_stage *s, const kb_opts *o, hx_device dev,
                                      bool fma_chain, bool log, const kb_pair_sink *sink, hx_error *e) {
    const bool must = dev == HX_DEVICE_CUDA;
    if (dev == HX_DEVICE_CPU) return hx_err(e, HX_ERR_UNSUPPORTED, "the cpu was asked for");
    if (r->n >= 0x7fffff00u) return hx_err(e, HX_ERR_UNSUPPORTED, "all-pairs on cuda: %zu rows: 2^31 at most", r->n);
    if (s->n != r->n || s->lo > s->hi || s->hi > s->n)
        return hx_err(e, HX_ERR_ARG, "all-pairs on cuda: rows %zu..%zu of %zu: not a stage of %zu rows", s->lo, s->hi,
                      s->n, r->n);
    // row x row products as the tiles see them (a full stage's tiles hold each pair once, a triangle)
    const double products = s->incremental ? (double)(s->n - s->lo) * (double)s->n : 2 * stage_pairs(s);
    if (!must && products < AUTO_MIN_PAIRS)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%.0f pairs, the cpu is as quick", stage_pairs(s));
    int c = 0;
    cudaError_t rc = cudaGetDeviceCount(&c);
    if (rc != cudaSuccess || c <= 0) {
        cudaGetLastError();
        return hx_err(e, must ? HX_ERR_DEVICE : HX_ERR_UNSUPPORTED, "all-pairs on cuda: no usable CUDA device (%s)",
                      rc != cudaSuccess ? cudaGetErrorString(rc) : "none found");
    }
    if (o->allpairs_gpu < 0 || o->allpairs_gpu >= c)
        return hx_err(e, must ? HX_ERR_ARG : HX_ERR_UNSUPPORTED, "all-pairs on cuda: device %d asked for; %d found",
                      o->allpairs_gpu, c);
    // on the asked device, then back to the thread's own (an embedder may run on another)
    int was = 0;
    if ((rc = cudaGetDevice(&was)) != cudaSuccess || (rc = cudaSetDevice(o->allpairs_gpu)) != cudaSuccess) {
        cudaGetLastError();
        return fail(e, must ? HX_ERR_DEVICE : HX_ERR_UNSUPPORTED, "all-pairs on cuda: %s: %s", "cudaSetDevice", rc);
    }
    hx_status st = run(r, s, o, fma_chain, log, must, sink, e);
    cudaSetDevice(was);
    return st;
}
