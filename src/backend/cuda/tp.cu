// tp.cu — tensor parallelism over the GPUs of one host: the backend table
// hx_backend_cuda_tp drives one CUDA context per GPU (forward.cu), each
// holding its share of every layer (model/shard.h), and the collectives
// those contexts call inside their forward passes (tp.h).
//
// One process, one host thread per GPU (rank 0 on the caller's thread): the
// public API, the CLI and serve stay one process with one hx_context, and
// NCCL's rule (one thread per communicator, or group calls) holds because
// each rank enqueues its own forward, collectives included, on its own
// stream from its own thread, and captures and replays its own decode graphs.
// (One process per GPU under mpirun would need every caller, serve included,
// to run as MPI ranks that replay rank 0's calls.)
//
// All-reduces: NCCL (loaded with dlopen, so that builds and machines without
// it still work; the error says what was looked for) for large sums, and for
// the small ones of decode a one-shot kernel over peer-to-peer memory: every
// rank writes its partial sum into its own buffer, a flag in each peer's
// memory says so, and every rank then reads all partials and sums them in
// rank order, so every rank gets the same bits. NVLink multicast (NVLS) is
// never used: NCCL_NVLS_ENABLE=0 is set unless the caller set it.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/cuda/cuda.h"
#include "backend/cuda/check.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/tp.h"
#include "backend/cuda/warp.cuh"
#include "backend/cuda/decode.cuh"
extern "C" {
#include "api/backend.h"
#include "core/core.h"
#include "model/shard.h"
}

// ---- NCCL, loaded at run time (declarations as in nccl.h, ABI-stable) ----

typedef struct { char internal[128]; } nccl_id;
typedef struct nccl_comm_s *nccl_comm;
enum { NCCL_OK = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

struct nccl_api {
    void *lib;
    int (*get_unique_id)(nccl_id *);
    int (*comm_init_rank)(nccl_comm *, int, nccl_id, int);
    int (*comm_destroy)(nccl_comm);
    int (*comm_abort)(nccl_comm);
    int (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, cudaStream_t);
    int (*all_gather)(const void *, void *, size_t, int, nccl_comm, cudaStream_t);
    const char *(*error_string)(int);
    int (*get_version)(int *);
};

static std::once_flag g_nccl_once;
static nccl_api g_nccl;
static char g_nccl_err[512];

static void nccl_load() {
    const char *names[] = {"libnccl.so.2", "libnccl.so", "/usr/local/cuda/lib64/libnccl.so.2",
                           "/usr/local/cuda/lib/libnccl.so.2", "/usr/local/cuda/targets/x86_64-linux/lib/libnccl.so.2"};
    void *lib = NULL;
    const char *why = "";
    for (const char *n : names)
        if ((lib = dlopen(n, RTLD_NOW | RTLD_LOCAL))) break;
        else why = dlerror();
    if (!lib) {
        snprintf(g_nccl_err, sizeof g_nccl_err, "tensor parallelism needs NCCL (libnccl.so.2, from the CUDA toolkit or "
                 "the nvidia-nccl packages; put its folder in LD_LIBRARY_PATH): %s", why ? why : "not found");
        return;
    }
    nccl_api a = {};
    a.lib = lib;
#define SYM(field, name) (*(void **)&a.field = dlsym(lib, name))
    bool ok = SYM(get_unique_id, "ncclGetUniqueId") && SYM(comm_init_rank, "ncclCommInitRank") &&
              SYM(comm_destroy, "ncclCommDestroy") && SYM(comm_abort, "ncclCommAbort") &&
              SYM(all_reduce, "ncclAllReduce") && SYM(all_gather, "ncclAllGather") &&
              SYM(error_string, "ncclGetErrorString") && SYM(get_version, "ncclGetVersion");
#undef SYM
    if (!ok) {
        snprintf(g_nccl_err, sizeof g_nccl_err, "tensor parallelism: the NCCL library found lacks a function we use");
        dlclose(lib);
        return;
    }
    g_nccl = a;
}

static const nccl_api *nccl_get(hx_error *e) {
    std::call_once(g_nccl_once, nccl_load);
    if (!g_nccl.lib) { hx_err(e, HX_ERR_UNSUPPORTED, "%s", g_nccl_err); return NULL; }
    return &g_nccl;
}

// ---- one rank's collectives (tp.h) ----

#define AR_BLOCKS 32   // blocks of the one-shot all-reduce (default): each waits only for the same block of its peers
#define AR_BLOCKS_MAX 64
#define AR_THREADS 512
#define AR_CAP (1 << 17) // floats per buffer: sums and gathers up to this size take the one-shot kernel

struct hx_tp_comm {
    const nccl_api *nc;
    nccl_comm comm;
    int n, rank;
    bool oneshot;                       // peers' memory reachable and the one-shot kernel allowed
    int blocks;                         // the one-shot kernel's grid (the same on every rank, every call)
    float *buf[2][HX_SHARD_MAX];        // [site parity][rank]: every rank's partial buffer (AR_CAP floats)
    float *gbuf[HX_SHARD_MAX];          // every rank's gather buffer (AR_CAP floats): rewritten one forward later,
                                        // after the all-reduces in between, so one is enough
    unsigned *flags[HX_SHARD_MAX];      // every rank's flags: [block][rank] = that rank's last epoch there
    unsigned *epoch;                    // this rank's per-block count of one-shot all-reduces
};

static cudaError_t nccl_fail(const hx_tp_comm *t, int rc, const char *what) {
    HX_WARN("tensor parallel rank %d: %s: %s", t->rank, what, t->nc->error_string(rc));
    return cudaErrorUnknown;
}

float *hx_tp_partial(const hx_tp_comm *t, size_t count, int site) {
    return t->oneshot && count <= AR_CAP ? t->buf[site & 1][t->rank] : NULL;
}

float *hx_tp_gather_buf(const hx_tp_comm *t, size_t count) {
    return t->oneshot && count <= AR_CAP ? t->gbuf[t->rank] : NULL;
}

struct ar_args {
    const float *buf[HX_SHARD_MAX];
    unsigned *flags[HX_SHARD_MAX];
    unsigned *epoch;
    int n, rank;
};

static __device__ __forceinline__ unsigned ld_acquire_sys(const unsigned *p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ void st_release_sys(unsigned *p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Block b's barrier with block b of every peer: it tells each peer it has
// started (its partial, written by the kernel before on its stream, is
// complete), then waits until each peer's block b has said the same. Epochs
// count the calls per block index, which stay in step because every rank
// launches the same kernels in the same order. Spinning more than ~10 s (a
// peer gone) traps. Ends with a __syncthreads.
static __device__ __forceinline__ void peer_barrier(const ar_args &a, int b) {
    __shared__ unsigned ep;
    if (threadIdx.x == 0) ep = a.epoch[b] + 1;
    __syncthreads();
    int q = threadIdx.x;
    if (q < a.n && q != a.rank) {
        st_release_sys(&a.flags[q][b * HX_SHARD_MAX + a.rank], ep);
        const unsigned *f = &a.flags[a.rank][b * HX_SHARD_MAX + q];
        long long t0 = clock64();
        while ((int)(ld_acquire_sys(f) - ep) < 0)
            if (clock64() - t0 > 20000000000ll) __trap();
    }
    if (threadIdx.x == 0) a.epoch[b] = ep;
    __syncthreads();
}

// mode 0: dst[i] = sum over ranks q (in order) of buf[q][i]; 1: dst[i] += it;
// 2 (gather): dst[q * count + i] = buf[q][i]. After its barrier, block b
// reads the slice of every partial it sums. Buffers alternate by site
// parity: a rank writes a buffer again only two all-reduces later, when every
// peer has started the one in between and so finished reading it.
__global__ void __launch_bounds__(AR_THREADS) k_tp_allreduce(ar_args a, float *dst, size_t count, int mode) {
    pdl_trigger();
    pdl_wait();
    peer_barrier(a, blockIdx.x);
    size_t step = (size_t)gridDim.x * blockDim.x;
    if (mode == 2) {
        for (int r = 0; r < a.n; r++)
            for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step)
                dst[r * count + i] = a.buf[r][i];
        return;
    }
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
        float s = a.buf[0][i];
        for (int r = 1; r < a.n; r++) s += a.buf[r][i];
        dst[i] = mode ? dst[i] + s : s;
    }
}

// hx_tp_sum_q8: one block (block 0's barrier). The new x is kept in shared
// memory for the norm and the quantization.
#define ARQ_THREADS 1024
__global__ void __launch_bounds__(ARQ_THREADS) k_tp_allreduce_q8(ar_args a, float *x, int count, const float *g,
                                                                float eps, int8_t *xq, float *xd) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ float xs[];
    __shared__ float red[32];
    peer_barrier(a, 0);
    float ss = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) {
        float s = a.buf[0][i];
        for (int r = 1; r < a.n; r++) s += a.buf[r][i];
        float v = x[i] + s;
        xs[i] = v;
        x[i] = v;
        ss += v * v;
    }
    float scale = rsqrtf(block_sum(ss, red) / count + eps); // (block_sum's barriers also publish xs)
    int lane = threadIdx.x & 31;
    for (int gi = threadIdx.x >> 5; gi < count / 32; gi += blockDim.x >> 5) {
        int i = gi * 32 + lane;
        warp_q8(xs[i] * scale * g[i], xq + i, xd + gi);
    }
}

// The one-shot kernels' view of this rank's comm, over the given buffers (one per rank).
static ar_args args_of(const hx_tp_comm *t, float *const *bufs) {
    ar_args a = {};
    for (int r = 0; r < t->n; r++) {
        a.buf[r] = bufs[r];
        a.flags[r] = t->flags[r];
    }
    a.epoch = t->epoch;
    a.n = t->n;
    a.rank = t->rank;
    return a;
}

cudaError_t hx_tp_sum_q8(const hx_tp_comm *t, float *dst, const float *partial, int count, int site, const float *g,
                         float eps, int8_t *xq, float *xd, cudaStream_t st) {
    if (!partial || count > 8192 || count % 32) return cudaErrorInvalidValue;
    ar_args a = args_of(t, t->buf[site & 1]);
    void *args[] = {&a, &dst, &count, &g, &eps, &xq, &xd};
    return hx_k_launch_pdl((const void *)k_tp_allreduce_q8, dim3(1), dim3(ARQ_THREADS), sizeof(float) * count, st,
                           args);
}

// The one-shot kernel over the given buffers.
static cudaError_t oneshot(const hx_tp_comm *t, float *const *bufs, float *dst, size_t count, int mode,
                           cudaStream_t st) {
    ar_args a = args_of(t, bufs);
    void *args[] = {&a, &dst, &count, &mode};
    return hx_k_launch_pdl((const void *)k_tp_allreduce, dim3(t->blocks), dim3(AR_THREADS), 0, st, args);
}

cudaError_t hx_tp_sum(const hx_tp_comm *t, float *dst, const float *partial, size_t count, int site, bool add,
                      cudaStream_t st) {
    if (!partial) {
        int rc = t->nc->all_reduce(dst, dst, count, NCCL_FLOAT32, NCCL_SUM, t->comm, st);
        return rc == NCCL_OK ? cudaSuccess : nccl_fail(t, rc, "ncclAllReduce");
    }
    return oneshot(t, t->buf[site & 1], dst, count, add ? 1 : 0, st);
}

cudaError_t hx_tp_gather(const hx_tp_comm *t, const float *send, float *recv, size_t count, cudaStream_t st) {
    if (t->oneshot && send == t->gbuf[t->rank] && count <= AR_CAP) return oneshot(t, t->gbuf, recv, count, 2, st);
    int rc = t->nc->all_gather(send, recv, count, NCCL_FLOAT32, t->comm, st);
    return rc == NCCL_OK ? cudaSuccess : nccl_fail(t, rc, "ncclAllGather");
}

__global__ void k_tp_interleave(const float *src, float *dst, int n_ranks, int rows, int vn) {
    size_t total = (size_t)n_ranks * rows * vn, step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        size_t j = i % vn, r = (i / vn) % rows, q = i / ((size_t)vn * rows); // src[q][r][j]
        dst[(r * n_ranks + q) * vn + j] = src[i];
    }
}

cudaError_t hx_tp_interleave(const float *src, float *dst, int n_ranks, int rows, int vn, cudaStream_t st) {
    size_t total = (size_t)n_ranks * rows * vn;
    int blocks = (int)((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);
    k_tp_interleave<<<blocks, 256, 0, st>>>(src, dst, n_ranks, rows, vn);
    return cudaGetLastError();
}

// ---- the ranks: one thread each (rank 0: the caller's) ----

struct tp_rank {
    int dev;
    hx_cuda_ctx *c;
    hx_tp_comm comm;
    hx_status st;
    hx_error err;
};

struct tp_ctx {
    int n;
    const nccl_api *nc;
    tp_rank r[HX_SHARD_MAX];
    std::thread th[HX_SHARD_MAX];
    std::mutex mu;
    std::condition_variable go, done;
    unsigned long gen;
    int left;
    bool quit;
    // gen and left as seen without the lock: a decode step is a few hundred microseconds, so a
    // worker spins briefly for the next call (and the caller for the last rank) before it sleeps
    std::atomic<unsigned long> agen;
    std::atomic<int> aleft;
    const std::function<hx_status(int, hx_error *)> *job; // run_all's, alive until every rank is done
    bool broken;    // a rank failed on the device: its peers' collectives were aborted
    hx_error why;
};

// Frees every communicator, ending collectives that wait for a rank that
// failed; called only once every rank has enqueued its work (the ranks still
// busy are waiting on their streams), and the handles are forgotten.
static void abort_comms(tp_ctx *t) {
    for (int i = 0; i < t->n; i++)
        if (t->r[i].comm.comm) {
            t->nc->comm_abort(t->r[i].comm.comm);
            t->r[i].comm.comm = NULL;
        }
}

static inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}

static void worker(tp_ctx *t, int i) {
    cudaSetDevice(t->r[i].dev);
    unsigned long seen = 0;
    for (;;) {
        const std::function<hx_status(int, hx_error *)> *f;
        for (int k = 0; k < 20000 && t->agen.load(std::memory_order_acquire) == seen; k++) cpu_relax();
        {
            std::unique_lock<std::mutex> lk(t->mu);
            t->go.wait(lk, [&] { return t->quit || t->gen != seen; });
            if (t->quit) return;
            seen = t->gen;
            f = t->job;
        }
        hx_error err = {};
        hx_status st = (*f)(i, &err);
        std::lock_guard<std::mutex> lk(t->mu);
        t->r[i].err = err;
        t->r[i].st = st;
        t->aleft.store(t->left - 1, std::memory_order_release);
        if (--t->left == 0) t->done.notify_all();
    }
}

// Runs f(rank, err) on every rank at once and waits for all. Ranks fail
// alike on bad arguments (each checks the same call the same way); a rank
// that fails alone (the device) would leave its peers waiting in a
// collective: their communicators are aborted and the context refuses
// further work.
static hx_status run_all(tp_ctx *t, const std::function<hx_status(int, hx_error *)> &f, hx_error *e) {
    if (t->broken) return hx_err(e, HX_ERR_DEVICE, "%s", t->why.msg);
    {
        std::lock_guard<std::mutex> lk(t->mu);
        t->job = &f;
        t->left = t->n - 1;
        t->aleft.store(t->n - 1);
        t->gen++;
        for (int i = 1; i < t->n; i++) t->r[i].st = HX_OK;
        t->agen.store(t->gen, std::memory_order_release);
    }
    t->go.notify_all();
    cudaSetDevice(t->r[0].dev);
    t->r[0].err = hx_error{};
    t->r[0].st = f(0, &t->r[0].err);
    for (int k = 0; k < 20000 && t->aleft.load(std::memory_order_acquire) > 0; k++) cpu_relax();
    {
        std::unique_lock<std::mutex> lk(t->mu);
        while (t->left > 0) {
            if (t->done.wait_for(lk, std::chrono::milliseconds(200)) == std::cv_status::timeout) {
                // a rank that failed on the device may leave the others in a collective (NCCL's: the
                // one-shot kernel gives up by itself)
                bool dev_fail = false;
                for (int i = 0; i < t->n; i++) dev_fail |= t->r[i].st == HX_ERR_DEVICE;
                if (dev_fail && !t->broken) { t->broken = true; lk.unlock(); abort_comms(t); lk.lock(); }
            }
        }
    }
    hx_status first = HX_OK;
    int at = 0;
    bool alike = true;
    for (int i = 0; i < t->n; i++) {
        if (t->r[i].st && !first) { first = t->r[i].st; at = i; }
        alike &= t->r[i].st == t->r[0].st;
    }
    if (!first) return HX_OK;
    if (!alike || first == HX_ERR_DEVICE) {
        t->broken = true;
        hx_err(&t->why, HX_ERR_DEVICE, "tensor parallel: GPU %d (rank %d) failed, the context is unusable: %s",
               t->r[at].dev, at, t->r[at].err.msg);
        if (e) *e = t->why;
        return HX_ERR_DEVICE;
    }
    if (e) *e = t->r[at].err;
    return first;
}

static void tp_free(void *ctx) {
    tp_ctx *t = (tp_ctx *)ctx;
    if (!t) return;
    if (!t->broken)
        run_all(t, [t](int i, hx_error *) {
            hx_cuda_ctx_free(t->r[i].c);
            t->r[i].c = NULL;
            return HX_OK;
        }, NULL);
    {
        std::lock_guard<std::mutex> lk(t->mu);
        t->quit = true;
    }
    t->go.notify_all();
    for (int i = 1; i < t->n; i++)
        if (t->th[i].joinable()) t->th[i].join();
    for (int i = 0; i < t->n; i++) {
        tp_rank &r = t->r[i];
        cudaSetDevice(r.dev);
        if (r.c) hx_cuda_ctx_free(r.c); // (a broken context: freed here)
        if (r.comm.comm) (t->broken ? t->nc->comm_abort : t->nc->comm_destroy)(r.comm.comm);
        r.comm.comm = NULL;
        for (int p = 0; p < 2; p++)
            if (r.comm.buf[p][i]) cudaFree(r.comm.buf[p][i]);
        if (r.comm.gbuf[i]) cudaFree(r.comm.gbuf[i]);
        if (r.comm.flags[i]) cudaFree(r.comm.flags[i]);
        if (r.comm.epoch) cudaFree(r.comm.epoch);
    }
    delete t;
}

static hx_status tp_new(const hx_model *m, const hx_backend_params *p, void **out, hx_error *e) {
    *out = NULL;
    int n = p->tp;
    hx_status s = hx_shard_check(m, n, e);
    if (s) return s;
    int count = 0;
    if ((s = hx_cuda_device_count(&count, e))) return s;
    if (p->gpu_index < 0 || p->gpu_index + n > count)
        return hx_err(e, HX_ERR_DEVICE, "tensor parallel %d from GPU %d: this machine has %d CUDA device%s", n,
                      p->gpu_index, count, count == 1 ? "" : "s");
    if (p->kv_f32) return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: the GPU keeps an f16 KV cache (an f32 cache is CPU only)");
    const hx_cuda_dev_opts *dv = (const hx_cuda_dev_opts *)p->dev.cuda;
    if (p->dev.dump_dir) return hx_err(e, HX_ERR_UNSUPPORTED, "tensor parallel: per-layer dumps are of one GPU");
    const nccl_api *nc = nccl_get(e);
    if (!nc) return HX_ERR_UNSUPPORTED;
    setenv("NCCL_NVLS_ENABLE", "0", 0); // never NVLink multicast (see the top of this file)
    tp_ctx *t = new tp_ctx();
    t->n = n;
    t->nc = nc;
    for (int i = 0; i < n; i++) t->r[i].dev = p->gpu_index + i;
    // the one-shot all-reduce reads peers' memory: every pair must reach each other
    bool p2p = !(dv && dv->tp_nccl);
    for (int i = 0; i < n && p2p; i++)
        for (int j = 0; j < n && p2p; j++) {
            int ok = 0;
            if (i != j && (cudaDeviceCanAccessPeer(&ok, t->r[i].dev, t->r[j].dev) != cudaSuccess || !ok)) p2p = false;
        }
    nccl_id id;
    int rc = nc->get_unique_id(&id);
    if (rc != NCCL_OK) {
        delete t;
        return hx_err(e, HX_ERR_DEVICE, "tensor parallel: ncclGetUniqueId: %s", nc->error_string(rc));
    }
    for (int i = 1; i < n; i++) t->th[i] = std::thread(worker, t, i);
    // 1: communicators and the one-shot buffers, on every rank at once (ncclCommInitRank waits for all)
    s = run_all(t, [&](int i, hx_error *re) -> hx_status {
        tp_rank &r = t->r[i];
        hx_tp_comm &c = r.comm;
        c.nc = nc;
        c.n = n;
        c.rank = i;
        int rc2 = nc->comm_init_rank(&c.comm, n, id, i);
        if (rc2 != NCCL_OK) {
            c.comm = NULL;
            return hx_err(re, HX_ERR_DEVICE, "tensor parallel: GPU %d: ncclCommInitRank: %s", r.dev, nc->error_string(rc2));
        }
        hx_error *e = re; // (CK reports through e)
        // NCCL connects on first use: here, not inside the capture of a decode graph (where that fails)
        float *tmp = NULL;
        CK(cudaMalloc((void **)&tmp, sizeof(float) * 2 * n));
        CK(cudaMemset(tmp, 0, sizeof(float) * 2 * n));
        rc2 = nc->all_reduce(tmp, tmp, 1, NCCL_FLOAT32, NCCL_SUM, c.comm, 0);
        if (rc2 == NCCL_OK) rc2 = nc->all_gather(tmp, tmp + n, 1, NCCL_FLOAT32, c.comm, 0);
        cudaError_t se = cudaDeviceSynchronize();
        cudaFree(tmp);
        if (rc2 != NCCL_OK)
            return hx_err(re, HX_ERR_DEVICE, "tensor parallel: GPU %d: first all-reduce: %s", r.dev, nc->error_string(rc2));
        CK(se);
        if (!p2p) return HX_OK;
        for (int j = 0; j < n; j++)
            if (j != i) {
                cudaError_t pe = cudaDeviceEnablePeerAccess(t->r[j].dev, 0);
                if (pe == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
                else CK(pe);
            }
        for (int par = 0; par < 2; par++) CK(cudaMalloc((void **)&c.buf[par][i], sizeof(float) * AR_CAP));
        CK(cudaMalloc((void **)&c.gbuf[i], sizeof(float) * AR_CAP));
        c.blocks = dv && dv->tp_ar_blocks > 0 ? dv->tp_ar_blocks : AR_BLOCKS;
        size_t fb = sizeof(unsigned) * AR_BLOCKS_MAX * HX_SHARD_MAX;
        CK(cudaMalloc((void **)&c.flags[i], fb));
        CK(cudaMemset(c.flags[i], 0, fb));
        CK(cudaMalloc((void **)&c.epoch, sizeof(unsigned) * AR_BLOCKS_MAX));
        CK(cudaMemset(c.epoch, 0, sizeof(unsigned) * AR_BLOCKS_MAX));
        CK(cudaDeviceSynchronize());
        return HX_OK;
    }, e);
    // every rank learns its peers' buffers
    if (!s && p2p)
        for (int i = 0; i < n; i++) {
            hx_tp_comm &c = t->r[i].comm;
            c.oneshot = true;
            for (int j = 0; j < n; j++) {
                c.buf[0][j] = t->r[j].comm.buf[0][j];
                c.buf[1][j] = t->r[j].comm.buf[1][j];
                c.gbuf[j] = t->r[j].comm.gbuf[j];
                c.flags[j] = t->r[j].comm.flags[j];
            }
        }
    // 2: each rank's share of the model
    if (!s)
        s = run_all(t, [&](int i, hx_error *re) -> hx_status {
            hx_cuda_opts o = {};
            o.device = t->r[i].dev;
            o.n_ctx = p->n_ctx_seq;
            o.n_ubatch = p->n_ubatch;
            o.n_seq = p->n_seq;
            o.dev = dv;
            o.tp_size = n;
            o.tp_rank = i;
            o.tp_comm = &t->r[i].comm;
            o.tp_mute = i > 0;
            return hx_cuda_ctx_new(m, &o, &t->r[i].c, re);
        }, e);
    if (s) {
        // (a device failure marked the context broken: tp_free aborts instead of destroying)
        tp_free(t);
        return s;
    }
    if (p2p)
        HX_INFO("tensor parallel over %d GPUs (%d..%d): all-reduces up to %zu KiB one-shot peer-to-peer, larger "
                "through NCCL", n, p->gpu_index, p->gpu_index + n - 1, sizeof(float) * AR_CAP / 1024);
    else
        HX_INFO("tensor parallel over %d GPUs (%d..%d): all-reduces through NCCL", n, p->gpu_index,
                p->gpu_index + n - 1);
    *out = t;
    return HX_OK;
}

// ---- the table: every call on every rank; outputs from rank 0 ----

extern "C" const hx_backend hx_backend_cuda; // forward.cu
#define CU hx_backend_cuda

static hx_status tp_forward(void *ctx, const hx_ubatch *ub, float *logits, float *hidden, hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    return run_all(t, [&](int i, hx_error *re) { return CU.forward(t->r[i].c, ub, logits, hidden, re); }, e);
}

static int tp_seq_keep(void *ctx, int seq, int n) {
    tp_ctx *t = (tp_ctx *)ctx;
    int kept[HX_SHARD_MAX];
    if (run_all(t, [&](int i, hx_error *) { kept[i] = CU.seq_keep(t->r[i].c, seq, n); return HX_OK; }, NULL)) return 0;
    return kept[0]; // (the same bookkeeping on every rank)
}

static hx_status tp_seq_copy(void *ctx, int src, int dst, int n, hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    return run_all(t, [&](int i, hx_error *re) { return CU.seq_copy(t->r[i].c, src, dst, n, re); }, e);
}

// A sequence's state: each rank's (its KV heads), in rank order; every rank's is the same size.
static size_t tp_state_size(void *ctx, int n) {
    tp_ctx *t = (tp_ctx *)ctx;
    return (size_t)t->n * CU.seq_state_size(t->r[0].c, n);
}

static hx_status tp_seq_read(void *ctx, int seq, int n, void *buf, hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    size_t one = CU.seq_state_size(t->r[0].c, n);
    return run_all(t, [&](int i, hx_error *re) {
        return CU.seq_read(t->r[i].c, seq, n, (uint8_t *)buf + i * one, re);
    }, e);
}

static hx_status tp_seq_write(void *ctx, int seq, int n, const void *buf, hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    size_t one = CU.seq_state_size(t->r[0].c, n);
    return run_all(t, [&](int i, hx_error *re) {
        return CU.seq_write(t->r[i].c, seq, n, (const uint8_t *)buf + i * one, re);
    }, e);
}

static size_t tp_kv_bytes(void *ctx) {
    tp_ctx *t = (tp_ctx *)ctx;
    size_t sum = 0;
    for (int i = 0; i < t->n; i++) sum += CU.kv_bytes(t->r[i].c);
    return sum;
}

static hx_status tp_decode_greedy(void *ctx, int seq, int32_t token, int pos, int32_t *next, hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    int32_t ids[HX_SHARD_MAX];
    hx_status s = run_all(t, [&](int i, hx_error *re) {
        return CU.decode_greedy(t->r[i].c, seq, token, pos, &ids[i], re);
    }, e);
    if (s) return s;
    for (int i = 1; i < t->n; i++)
        if (ids[i] != ids[0])
            return hx_err(e, HX_ERR_DEVICE, "tensor parallel: ranks picked different tokens (%d on rank 0, %d on rank %d)",
                          ids[0], ids[i], i);
    *next = ids[0];
    return HX_OK;
}

static hx_status tp_finish(void *ctx, hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    return run_all(t, [&](int i, hx_error *re) { return CU.finish(t->r[i].c, re); }, e);
}

static size_t tp_device_bytes(void *ctx) {
    tp_ctx *t = (tp_ctx *)ctx;
    size_t used[HX_SHARD_MAX] = {0}, sum = 0;
    run_all(t, [&](int i, hx_error *) { used[i] = CU.device_bytes_in_use(t->r[i].c); return HX_OK; }, NULL);
    for (int i = 0; i < t->n; i++) sum += used[i];
    return sum;
}

// Every rank samples the same gathered logits with the same draw; rank 0's
// logits go to the caller when the device declines the step.
static hx_status tp_decode_sample(void *ctx, int seq, int32_t token, int pos, const hx_backend_sample *bs,
                                  int32_t *next, float *logits, bool *picked, hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    int32_t ids[HX_SHARD_MAX];
    bool pk[HX_SHARD_MAX];
    hx_status s = run_all(t, [&](int i, hx_error *re) {
        return CU.decode_sample(t->r[i].c, seq, token, pos, bs, &ids[i], logits, &pk[i], re);
    }, e);
    if (s) return s;
    for (int i = 1; i < t->n; i++)
        if (pk[i] != pk[0] || (pk[0] && ids[i] != ids[0]))
            return hx_err(e, HX_ERR_DEVICE, "tensor parallel: ranks sampled differently (rank 0: %d, rank %d: %d)", ids[0],
                          i, ids[i]);
    *next = ids[0];
    *picked = pk[0];
    return HX_OK;
}

static void *tp_host_alloc(void *ctx, size_t bytes) {
    tp_ctx *t = (tp_ctx *)ctx;
    cudaSetDevice(t->r[0].dev);
    return CU.host_alloc(t->r[0].c, bytes);
}
static void tp_host_free(void *ctx, void *p) {
    tp_ctx *t = (tp_ctx *)ctx;
    CU.host_free(t->r[0].c, p);
}

// Rank 0 holds the whole gathered logits: rows are read there alone.
static hx_status tp_logits_get(void *ctx, int row, float *host, hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    if (t->broken) return hx_err(e, HX_ERR_DEVICE, "%s", t->why.msg);
    cudaSetDevice(t->r[0].dev);
    return CU.logits_get(t->r[0].c, row, host, e);
}
static hx_status tp_logits_argmax(void *ctx, int n, const int *rows, int32_t *ids, hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    if (t->broken) return hx_err(e, HX_ERR_DEVICE, "%s", t->why.msg);
    cudaSetDevice(t->r[0].dev);
    return CU.logits_argmax(t->r[0].c, n, rows, ids, e);
}
static hx_status tp_logits_logprob(void *ctx, int n, const int *rows, int k, const int32_t *ids, float *out,
                                   hx_error *e) {
    tp_ctx *t = (tp_ctx *)ctx;
    if (t->broken) return hx_err(e, HX_ERR_DEVICE, "%s", t->why.msg);
    cudaSetDevice(t->r[0].dev);
    return CU.logits_logprob(t->r[0].c, n, rows, k, ids, out, e);
}

extern "C" const hx_backend hx_backend_cuda_tp = {
    "cuda-tp",
    tp_new,
    tp_free,
    tp_forward,
    tp_seq_keep,
    tp_seq_copy,
    tp_state_size,
    tp_seq_read,
    tp_seq_write,
    tp_kv_bytes,
    tp_decode_greedy,
    tp_finish,
    tp_device_bytes,
    tp_decode_sample,
    tp_host_alloc,
    tp_host_free,
    tp_logits_get,
    tp_logits_argmax,
    tp_logits_logprob,
    NULL, /* kv_map: fixed slots (paged KV is CPU only for now) */
};
