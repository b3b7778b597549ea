// bert.cu — the BERT encoder (all-MiniLM-L6-v2 and friends) on the GPU; the
// same recipe as src/backend/cpu/bert.c:
//   x = LN(tok_embd[id] + pos_embd[pos] + type_embd[0])
//   per layer: x = LN(x + Wo attn(Wq x, Wk x, Wv x) + bo);  x = LN(x + Wd gelu(Wu x + bu) + bd)
//   then mean (or CLS) pooling per sequence and L2 normalization.
// Sequences of a batch are concatenated (no padding); the projections are
// cuBLAS GEMMs over all tokens (f32 storage, TF32 tensor cores; HX_CUDA_BERT_FP32=1
// for plain f32 math), attention is one block per (sequence, head) with K and
// V of that sequence in shared memory. Batches go through one stream without a
// host wait each: hx_cuda_bert_submit stages ids in a slot's pinned buffer,
// queues the copy in, the forward and the copy of the pooled rows back, and
// records the slot's event; hx_cuda_bert_wait waits for that event only.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda.h"
#include "backend/cuda/warp.cuh"
extern "C" {
#include "core/core.h"
#include "quant/quant.h"
}

static hx_status bfail(hx_error *e, cudaError_t rc, int line, const char *what) {
    if (e) {
        e->status = HX_ERR_DEVICE;
        snprintf(e->msg, sizeof e->msg, "cuda bert: line %d: %s: %s", line, what, cudaGetErrorString(rc));
    }
    return HX_ERR_DEVICE;
}
#define BK(call) do { cudaError_t rc_ = (call); if (rc_ != cudaSuccess) return bfail(e, rc_, __LINE__, #call); } while (0)

struct blayer {
    float *wqkv, *bqkv;   // (3E, E), (3E)
    float *wo, *bo;       // (E, E)
    float *ln1w, *ln1b;
    float *wu, *bu;       // (F, E)
    float *wd, *bd;       // (E, F)
    float *ln2w, *ln2b;
};

// A batch in flight: its pinned staging and the event after its copy back.
struct bslot {
    void *host;       // pinned: the batch's ints (laid out as d_int), then its pooled rows
    size_t cap;       // bytes of host
    float *rows;      // (n_seq, E) inside host
    cudaEvent_t done; // recorded after the rows' copy back
    bool busy;
};

struct hx_cuda_bert {
    hx_model_config cfg;
    cudaStream_t st;
    cublasHandle_t blas;
    bool fp32;
    std::vector<void *> allocs;
    float *tok, *pos, *type0, *lnw, *lnb;
    std::vector<blayer> L;
    int cap_tok, cap_seq;
    float *x, *qkv, *att, *y, *h; // (cap_tok, E / 3E / E / E / F): activations
    float *out;                   // (cap_seq, E): pooled rows
    int *d_int;                   // 2 cap_tok + 2 cap_seq: a batch's ids, position ids, starts, lens
    size_t attn_smem_max;         // dynamic shared memory the attention kernel is cleared for
    bslot slot[HX_CUDA_BERT_SLOTS];
};

__global__ void k_bert_attn(const float *qkv, const float *bqkv, float *out, const int *starts, const int *lens, int H,
                            int D, float scale);

static hx_status up_mat(hx_cuda_bert *b, const hx_tensor *t, int64_t n, float **dst, hx_error *e) {
    *dst = NULL;
    if (!t->data) return HX_OK;
    std::vector<float> tmp((size_t)n);
    hx_dequantize_row(t->type, t->data, tmp.data(), n);
    void *d = NULL;
    BK(cudaMalloc(&d, sizeof(float) * n));
    b->allocs.push_back(d);
    BK(cudaMemcpy(d, tmp.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    *dst = (float *)d;
    return HX_OK;
}

// Several host tensors (each n_i floats) concatenated into one device array.
static hx_status up_cat(hx_cuda_bert *b, const hx_tensor *const *ts, const int64_t *ns, int k, float **dst,
                        hx_error *e) {
    int64_t total = 0;
    for (int i = 0; i < k; i++) total += ns[i];
    std::vector<float> tmp((size_t)total, 0.0f);
    int64_t off = 0;
    for (int i = 0; i < k; i++) {
        if (ts[i]->data) hx_dequantize_row(ts[i]->type, ts[i]->data, tmp.data() + off, ns[i]);
        off += ns[i];
    }
    void *d = NULL;
    BK(cudaMalloc(&d, sizeof(float) * total));
    b->allocs.push_back(d);
    BK(cudaMemcpy(d, tmp.data(), sizeof(float) * total, cudaMemcpyHostToDevice));
    *dst = (float *)d;
    return HX_OK;
}

extern "C" void hx_cuda_bert_free(hx_cuda_bert *b) {
    if (!b) return;
    if (b->st) cudaStreamSynchronize(b->st); // batches may still be in flight
    for (void *p : b->allocs) cudaFree(p);
    float *bufs[] = {b->x, b->qkv, b->att, b->y, b->h, b->out};
    for (float *p : bufs) if (p) cudaFree(p);
    if (b->d_int) cudaFree(b->d_int);
    for (auto &sl : b->slot) {
        if (sl.host) cudaFreeHost(sl.host);
        if (sl.done) cudaEventDestroy(sl.done);
    }
    if (b->blas) cublasDestroy(b->blas);
    if (b->st) cudaStreamDestroy(b->st);
    delete b;
}

extern "C" hx_status hx_cuda_bert_new(const hx_model *m, int device, hx_cuda_bert **out, hx_error *e) {
    *out = NULL;
    const hx_model_config *c = &m->cfg;
    if (c->arch != HX_ARCH_BERT) return hx_err(e, HX_ERR_ARG, "cuda bert: model is %s, not bert", c->arch_name);
    if (c->head_dim > 64 || c->head_dim % 2 || c->n_embd != c->n_head * c->head_dim)
        return hx_err(e, HX_ERR_UNSUPPORTED, "cuda bert: head_dim %d (the attention kernel takes even sizes <= 64)",
                      c->head_dim);
    hx_cuda_device dev;
    hx_status s = hx_cuda_init(device, &dev, e);
    if (s) return s;
    hx_cuda_bert *b = new hx_cuda_bert();
    b->cfg = *c;
    b->fp32 = getenv("HX_CUDA_BERT_FP32") != NULL;
#define TRYB(x) do { hx_status s_ = (x); if (s_) { hx_cuda_bert_free(b); return s_; } } while (0)
    cudaError_t rc = cudaStreamCreateWithFlags(&b->st, cudaStreamNonBlocking);
    if (rc != cudaSuccess) { hx_cuda_bert_free(b); return bfail(e, rc, __LINE__, "stream"); }
    if (cublasCreate(&b->blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(b->blas, b->st) != CUBLAS_STATUS_SUCCESS) {
        hx_cuda_bert_free(b);
        return hx_err(e, HX_ERR_DEVICE, "cuda bert: cublasCreate failed");
    }
    const int64_t E = c->n_embd, F = c->n_ff;
    TRYB(up_mat(b, &m->tok_embd, (int64_t)c->n_vocab * E, &b->tok, e));
    TRYB(up_mat(b, &m->pos_embd, m->pos_embd.ne[1] * E, &b->pos, e));
    TRYB(up_mat(b, &m->type_embd, E, &b->type0, e));
    TRYB(up_mat(b, &m->embd_norm, E, &b->lnw, e));
    TRYB(up_mat(b, &m->embd_norm_b, E, &b->lnb, e));
    if (!b->tok || !b->pos || !b->lnw || !b->lnb) {
        hx_cuda_bert_free(b);
        return hx_err(e, HX_ERR_FORMAT, "cuda bert: embedding tensors missing");
    }
    b->L.resize(c->n_layer);
    for (int l = 0; l < c->n_layer; l++) {
        const hx_layer_weights *W = &m->layers[l];
        blayer *D = &b->L[l];
        const hx_tensor *qkv[3] = {&W->wq, &W->wk, &W->wv}, *bqkv[3] = {&W->bq, &W->bk, &W->bv};
        int64_t nw[3] = {E * E, E * E, E * E}, nb[3] = {E, E, E};
        TRYB(up_cat(b, qkv, nw, 3, &D->wqkv, e));
        TRYB(up_cat(b, bqkv, nb, 3, &D->bqkv, e));
        TRYB(up_mat(b, &W->wo, E * E, &D->wo, e));
        TRYB(up_mat(b, &W->bo, E, &D->bo, e));
        TRYB(up_mat(b, &W->attn_post_norm, E, &D->ln1w, e));
        TRYB(up_mat(b, &W->attn_post_norm_b, E, &D->ln1b, e));
        TRYB(up_mat(b, &W->ffn_up, F * E, &D->wu, e));
        TRYB(up_mat(b, &W->ffn_up_b, F, &D->bu, e));
        TRYB(up_mat(b, &W->ffn_down, E * F, &D->wd, e));
        TRYB(up_mat(b, &W->ffn_down_b, E, &D->bd, e));
        TRYB(up_mat(b, &W->ffn_post_norm, E, &D->ln2w, e));
        TRYB(up_mat(b, &W->ffn_post_norm_b, E, &D->ln2b, e));
        if (!D->wo || !D->wu || !D->wd || !D->ln1w || !D->ln2w) {
            hx_cuda_bert_free(b);
            return hx_err(e, HX_ERR_FORMAT, "cuda bert: layer %d weights missing", l);
        }
    }
    size_t smem = (size_t)c->n_ctx_train * (2 * c->head_dim + 2) * sizeof(__half);
    if (smem > 227 * 1024) {
        hx_cuda_bert_free(b);
        return hx_err(e, HX_ERR_UNSUPPORTED, "cuda bert: %d positions x head_dim %d do not fit the attention kernel",
                      c->n_ctx_train, c->head_dim);
    }
    for (auto &sl : b->slot) {
        // blocking: a host waiting for a batch sleeps, leaving its core to the tokenizer threads
        rc = cudaEventCreateWithFlags(&sl.done, cudaEventBlockingSync | cudaEventDisableTiming);
        if (rc != cudaSuccess) { hx_cuda_bert_free(b); return bfail(e, rc, __LINE__, "event"); }
    }
    {
        int P = c->n_ctx_train < 512 ? c->n_ctx_train : 512;
        b->attn_smem_max = (size_t)P * (2 * c->head_dim + 2) * sizeof(__half) + 8 * 64 * sizeof(float);
        if (b->attn_smem_max > 48 * 1024) {
            rc = cudaFuncSetAttribute(k_bert_attn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)b->attn_smem_max);
            if (rc != cudaSuccess) { hx_cuda_bert_free(b); return bfail(e, rc, __LINE__, "attention shared memory"); }
        }
    }
    // Two warm-up batches (1 x 16 and 128 x 64 tokens of id 0): the first launch of each kernel and
    // of cuBLAS's GEMMs loads its code (CUDA's lazy loading); paid here with the model's load, not
    // by the first batch of hx_embed. They also size the buffers for an 8192-token batch.
    {
        int L = c->n_ctx_train < 64 ? c->n_ctx_train : 64;
        std::vector<int32_t> ids((size_t)128 * L, 0);
        std::vector<int> lens(128, L);
        lens[0] = L < 16 ? L : 16;
        const float *rows = NULL;
        TRYB(hx_cuda_bert_submit(b, 0, ids.data(), lens.data(), 1, 1, true, e));
        TRYB(hx_cuda_bert_wait(b, 0, &rows, e));
        lens[0] = L;
        TRYB(hx_cuda_bert_submit(b, 0, ids.data(), lens.data(), 128, 1, true, e));
        TRYB(hx_cuda_bert_wait(b, 0, &rows, e));
    }
    *out = b;
    return HX_OK;
#undef TRYB
}

// ---- kernels ----


// LayerNorm of row r (dim E) held in v[] (E <= 4 * blockDim): x = (v - mean)/sqrt(var + eps) * w + b
__device__ void ln_row(float *v, int E, const float *w, const float *b, float eps, float *dst, float *red) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < E; i += blockDim.x) s += v[i];
    float mean = block_sum(s, red) / E;
    float q = 0.0f;
    for (int i = threadIdx.x; i < E; i += blockDim.x) { float d = v[i] - mean; q += d * d; }
    float inv = rsqrtf(block_sum(q, red) / E + eps);
    for (int i = threadIdx.x; i < E; i += blockDim.x) dst[i] = (v[i] - mean) * inv * w[i] + b[i];
}

__global__ void k_bert_embed(const int *ids, const int *posid, const float *tok, const float *pos, const float *type0,
                             const float *lnw, const float *lnb, float *x, int E, float eps) {
    extern __shared__ float row[];
    __shared__ float red[32];
    int t = blockIdx.x;
    const float *tr = tok + (size_t)ids[t] * E, *pr = pos + (size_t)posid[t] * E;
    for (int i = threadIdx.x; i < E; i += blockDim.x) row[i] = tr[i] + pr[i] + (type0 ? type0[i] : 0.0f);
    __syncthreads();
    ln_row(row, E, lnw, lnb, eps, x + (size_t)t * E, red);
}

// x = LN(x + y + bias)
__global__ void k_bert_res_ln(float *x, const float *y, const float *bias, const float *w, const float *b, int E,
                              float eps) {
    extern __shared__ float row[];
    __shared__ float red[32];
    size_t off = (size_t)blockIdx.x * E;
    for (int i = threadIdx.x; i < E; i += blockDim.x) row[i] = x[off + i] + (y[off + i] + (bias ? bias[i] : 0.0f));
    __syncthreads();
    ln_row(row, E, w, b, eps, x + off, red);
}

// y (T, cols) = gelu(y + b) (b may be NULL): block per row, float4 when cols allows (no index
// division per element)
__global__ void k_bert_bias_gelu(float *y, const float *b, int cols) {
    float *row = y + (size_t)blockIdx.x * cols;
    if ((cols & 3) == 0) {
        float4 *r4 = (float4 *)row;
        const float4 *b4 = (const float4 *)b;
        for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
            float4 v = r4[i], c = b4 ? b4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            v.x += c.x; v.y += c.y; v.z += c.z; v.w += c.w;
            v.x = 0.5f * v.x * (1.0f + erff(v.x * 0.70710678118654752f));
            v.y = 0.5f * v.y * (1.0f + erff(v.y * 0.70710678118654752f));
            v.z = 0.5f * v.z * (1.0f + erff(v.z * 0.70710678118654752f));
            v.w = 0.5f * v.w * (1.0f + erff(v.w * 0.70710678118654752f));
            r4[i] = v;
        }
        return;
    }
    for (int i = threadIdx.x; i < cols; i += blockDim.x) {
        float v = row[i] + (b ? b[i] : 0.0f);
        row[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

// grid (n_seq, H), 256 threads: K and V of the sequence's head in shared
// memory (f16), one warp per query row, lanes over keys, then lanes over dims.
// qkv (T, 3E) is the product without its bias; bqkv (3E) is added here, on load.
// K rows are D + 2 halves apart (D even): in the q.k loop lane j reads row j's
// pair d, and an odd row stride in 4-byte words puts the 32 lanes on 32 banks.
__global__ void k_bert_attn(const float *qkv, const float *bqkv, float *out, const int *starts, const int *lens, int H,
                            int D, float scale) {
    extern __shared__ __half kv[];
    int s = blockIdx.x, h = blockIdx.y, L = lens[s], t0 = starts[s], E = H * D, W3 = 3 * E, KS = D + 2;
    __half *ks = kv, *vs = kv + (size_t)L * KS;
    float *qsh = (float *)(vs + (size_t)L * D); // per warp: 64 floats of the query row
    for (int i = threadIdx.x; i < L * D; i += blockDim.x) {
        int t = i / D, d = i % D;
        const float *r = qkv + (size_t)(t0 + t) * W3 + h * D + d, *bb = bqkv + h * D + d;
        ks[t * KS + d] = __float2half(r[E] + bb[E]);
        vs[i] = __float2half(r[2 * E] + bb[2 * E]);
    }
    __syncthreads();
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int qi = warp; qi < L; qi += nw) {
        const float *q = qkv + (size_t)(t0 + qi) * W3 + h * D;
        float *qw = qsh + warp * 64;
        for (int d = lane; d < D; d += 32) qw[d] = q[d] + bqkv[h * D + d];
        __syncwarp();
        float sc[16];
        float mx = -INFINITY;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            int t = lane + 32 * k;
            float acc = -INFINITY;
            if (t < L) {
                acc = 0.0f;
                const __half2 *kr = (const __half2 *)(ks + (size_t)t * KS);
                for (int d = 0; d < D / 2; d++) {
                    float2 kf = __half22float2(kr[d]);
                    acc = fmaf(qw[2 * d], kf.x, acc);
                    acc = fmaf(qw[2 * d + 1], kf.y, acc);
                }
                acc *= scale;
            }
            sc[k] = acc;
            mx = fmaxf(mx, acc);
        }
        mx = warp_max(mx);
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < 16; k++) { sc[k] = lane + 32 * k < L ? __expf(sc[k] - mx) : 0.0f; sum += sc[k]; }
        sum = warp_sum(sum);
        float inv = 1.0f / sum;
        float o0 = 0.0f, o1 = 0.0f;
        int nk = (L + 31) / 32;
#pragma unroll
        for (int k = 0; k < 16; k++) {
            if (k >= nk) break;
            for (int src = 0; src < 32; src++) {
                float p = __shfl_sync(0xffffffffu, sc[k], src);
                int t = 32 * k + src;
                if (t >= L) break;
                const __half *vr = vs + (size_t)t * D;
                if (lane < D) o0 = fmaf(p, __half2float(vr[lane]), o0);
                if (lane + 32 < D) o1 = fmaf(p, __half2float(vr[lane + 32]), o1);
            }
        }
        float *orow = out + (size_t)(t0 + qi) * E + h * D;
        if (lane < D) orow[lane] = o0 * inv;
        if (lane + 32 < D) orow[lane + 32] = o1 * inv;
        __syncwarp();
    }
}

// block per sequence: mean (or CLS) pooling and L2 normalization
__global__ void k_bert_pool(const float *x, const int *starts, const int *lens, float *out, int E, int cls,
                            int normalize) {
    extern __shared__ float row[];
    __shared__ float red[32];
    int s = blockIdx.x, t0 = starts[s], L = lens[s];
    for (int i = threadIdx.x; i < E; i += blockDim.x) {
        float acc = 0.0f;
        if (cls) acc = x[(size_t)t0 * E + i];
        else {
            for (int t = 0; t < L; t++) acc += x[(size_t)(t0 + t) * E + i];
            acc /= L;
        }
        row[i] = acc;
    }
    __syncthreads();
    float n2 = 0.0f;
    for (int i = threadIdx.x; i < E; i += blockDim.x) n2 += row[i] * row[i];
    n2 = block_sum(n2, red);
    float inv = normalize && n2 > 0 ? rsqrtf(n2) : 1.0f;
    for (int i = threadIdx.x; i < E; i += blockDim.x) out[(size_t)s * E + i] = row[i] * inv;
}

// y (T, rows) = x (T, cols) W^T
static bool gemm(hx_cuda_bert *b, const float *W, int rows, int cols, const float *x, int T, float *y) {
    float alpha = 1.0f, beta = 0.0f;
    return cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, rows, T, cols, &alpha, W, CUDA_R_32F, cols, x, CUDA_R_32F,
                        cols, &beta, y, CUDA_R_32F, rows,
                        b->fp32 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32,
                        CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
}

// Room for a batch of T tokens in n_seq sequences: at least 8192 tokens and 256 sequences, doubling,
// so that batches of rising length (hx_embed sorts by length) reallocate once or twice, not per
// batch. In-flight batches use the old buffers: the stream is drained first.
static hx_status grow(hx_cuda_bert *b, int T, int n_seq, hx_error *e) {
    const hx_model_config *c = &b->cfg;
    if (T <= b->cap_tok && n_seq <= b->cap_seq) return HX_OK;
    BK(cudaStreamSynchronize(b->st));
    int nt = b->cap_tok > 0 ? b->cap_tok : 8192, ns = b->cap_seq > 0 ? b->cap_seq : 256;
    while (nt < T) nt *= 2;
    while (ns < n_seq) ns *= 2;
    if (nt > b->cap_tok) {
        float **fb[] = {&b->x, &b->qkv, &b->att, &b->y, &b->h};
        size_t dims[] = {(size_t)c->n_embd, 3 * (size_t)c->n_embd, (size_t)c->n_embd, (size_t)c->n_embd,
                         (size_t)c->n_ff};
        for (int i = 0; i < 5; i++) {
            if (*fb[i]) cudaFree(*fb[i]);
            *fb[i] = NULL;
        }
        b->cap_tok = 0;
        for (int i = 0; i < 5; i++) BK(cudaMalloc((void **)fb[i], sizeof(float) * dims[i] * nt));
    }
    if (b->out) cudaFree(b->out);
    if (b->d_int) cudaFree(b->d_int);
    b->out = NULL;
    b->d_int = NULL;
    b->cap_seq = 0;
    BK(cudaMalloc((void **)&b->out, sizeof(float) * c->n_embd * ns));
    BK(cudaMalloc((void **)&b->d_int, sizeof(int) * (2 * (size_t)nt + 2 * (size_t)ns)));
    b->cap_tok = nt;
    b->cap_seq = ns;
    return HX_OK;
}

extern "C" hx_status hx_cuda_bert_submit(hx_cuda_bert *b, int slot, const int32_t *ids, const int *lens, int n_seq,
                                         int pooling, bool normalize, hx_error *e) {
    const hx_model_config *c = &b->cfg;
    if (slot < 0 || slot >= HX_CUDA_BERT_SLOTS) return hx_err(e, HX_ERR_ARG, "cuda bert: slot %d", slot);
    if (n_seq <= 0) return hx_err(e, HX_ERR_ARG, "cuda bert: no sequences");
    int T = 0, max_len = 0;
    for (int s = 0; s < n_seq; s++) {
        if (lens[s] < 1 || lens[s] > c->n_ctx_train)
            return hx_err(e, HX_ERR_RANGE, "sequence %d has %d tokens; the model takes 1..%d", s, lens[s], c->n_ctx_train);
        T += lens[s];
        max_len = lens[s] > max_len ? lens[s] : max_len;
    }
    if (max_len > 512) return hx_err(e, HX_ERR_UNSUPPORTED, "cuda bert: sequences of more than 512 tokens");
    for (int t = 0; t < T; t++)
        if (ids[t] < 0 || ids[t] >= c->n_vocab)
            return hx_err(e, HX_ERR_RANGE, "token id %d out of range (vocab %d)", ids[t], c->n_vocab);
    bslot *S = &b->slot[slot];
    if (S->busy) {
        S->busy = false;
        BK(cudaEventSynchronize(S->done));
    }
    hx_status s = grow(b, T, n_seq, e);
    if (s) return s;
    cudaStream_t st = b->st;
    const int E = c->n_embd, F = c->n_ff, H = c->n_head, D = c->head_dim;
    size_t asm_ = (size_t)max_len * (2 * D + 2) * sizeof(__half) + 8 * 64 * sizeof(float); // <= attn_smem_max
    // pinned staging: ids (T) | position ids (T) | starts (n_seq) | lens (n_seq), then the rows (n_seq, E)
    size_t n_int = 2 * (size_t)T + 2 * (size_t)n_seq, rows_off = (n_int * sizeof(int) + 255) / 256 * 256;
    size_t need = rows_off + sizeof(float) * E * (size_t)n_seq;
    if (need > S->cap) {
        if (S->host) cudaFreeHost(S->host);
        S->host = NULL;
        S->cap = 0;
        size_t want = need < ((size_t)2 << 20) ? (size_t)4 << 20 : 2 * need; // MiniLM at 256 texts: ~0.5 MB
        BK(cudaHostAlloc(&S->host, want, cudaHostAllocDefault));
        S->cap = want;
    }
    int *hi = (int *)S->host, *hpos = hi + T, *hstart = hi + 2 * T, *hlen = hstart + n_seq;
    memcpy(hi, ids, sizeof(int) * T);
    memcpy(hlen, lens, sizeof(int) * n_seq);
    for (int q = 0, t = 0; q < n_seq; q++) {
        hstart[q] = t;
        for (int i = 0; i < lens[q]; i++) hpos[t++] = i;
    }
    S->rows = (float *)((char *)S->host + rows_off);
    const int *d_ids = b->d_int, *d_posid = b->d_int + T, *d_starts = b->d_int + 2 * T,
              *d_lens = b->d_int + 2 * T + n_seq;
    BK(cudaMemcpyAsync(b->d_int, hi, sizeof(int) * n_int, cudaMemcpyHostToDevice, st));
    int thr = 128;
    size_t rowsm = sizeof(float) * E;
    k_bert_embed<<<T, thr, rowsm, st>>>(d_ids, d_posid, b->tok, b->pos, b->type0, b->lnw, b->lnb, b->x, E,
                                        c->norm_eps);
    BK(cudaGetLastError());
    for (int l = 0; l < c->n_layer; l++) {
        blayer *Lw = &b->L[l];
        if (!gemm(b, Lw->wqkv, 3 * E, E, b->x, T, b->qkv)) return hx_err(e, HX_ERR_DEVICE, "cuda bert: cuBLAS GEMM failed");
        dim3 ag(n_seq, H);
        k_bert_attn<<<ag, 256, asm_, st>>>(b->qkv, Lw->bqkv, b->att, d_starts, d_lens, H, D, c->attn_scale);
        BK(cudaGetLastError());
        if (!gemm(b, Lw->wo, E, E, b->att, T, b->y)) return hx_err(e, HX_ERR_DEVICE, "cuda bert: cuBLAS GEMM failed");
        k_bert_res_ln<<<T, thr, rowsm, st>>>(b->x, b->y, Lw->bo, Lw->ln1w, Lw->ln1b, E, c->norm_eps);
        if (!gemm(b, Lw->wu, F, E, b->x, T, b->h)) return hx_err(e, HX_ERR_DEVICE, "cuda bert: cuBLAS GEMM failed");
        k_bert_bias_gelu<<<T, 128, 0, st>>>(b->h, Lw->bu, F);
        if (!gemm(b, Lw->wd, E, F, b->h, T, b->y)) return hx_err(e, HX_ERR_DEVICE, "cuda bert: cuBLAS GEMM failed");
        k_bert_res_ln<<<T, thr, rowsm, st>>>(b->x, b->y, Lw->bd, Lw->ln2w, Lw->ln2b, E, c->norm_eps);
        BK(cudaGetLastError());
    }
    if (pooling != 0) {
        k_bert_pool<<<n_seq, thr, rowsm, st>>>(b->x, d_starts, d_lens, b->out, E, pooling == 2, normalize);
        BK(cudaGetLastError());
        BK(cudaMemcpyAsync(S->rows, b->out, sizeof(float) * E * n_seq, cudaMemcpyDeviceToHost, st));
    }
    BK(cudaEventRecord(S->done, st));
    S->busy = true;
    return HX_OK;
}

extern "C" hx_status hx_cuda_bert_wait(hx_cuda_bert *b, int slot, const float **rows, hx_error *e) {
    if (slot < 0 || slot >= HX_CUDA_BERT_SLOTS || !b->slot[slot].busy)
        return hx_err(e, HX_ERR_ARG, "cuda bert: slot %d has no batch", slot);
    bslot *S = &b->slot[slot];
    S->busy = false;
    BK(cudaEventSynchronize(S->done));
    *rows = S->rows;
    return HX_OK;
}

extern "C" hx_status hx_cuda_bert_encode(hx_cuda_bert *b, const int32_t *ids, const int *lens, int n_seq,
                                         int pooling, bool normalize, float *out, hx_error *e) {
    hx_status s = hx_cuda_bert_submit(b, 0, ids, lens, n_seq, pooling, normalize, e);
    if (s) return s;
    const int E = b->cfg.n_embd;
    if (pooling != 0) {
        const float *rows = NULL;
        if ((s = hx_cuda_bert_wait(b, 0, &rows, e))) return s;
        memcpy(out, rows, sizeof(float) * E * (size_t)n_seq);
        return HX_OK;
    }
    int T = 0;
    for (int q = 0; q < n_seq; q++) T += lens[q];
    b->slot[0].busy = false;
    BK(cudaMemcpyAsync(out, b->x, sizeof(float) * E * (size_t)T, cudaMemcpyDeviceToHost, b->st));
    BK(cudaStreamSynchronize(b->st));
    if (normalize)
        for (int t = 0; t < T; t++) {
            double n2 = 0;
            for (int i = 0; i < E; i++) n2 += (double)out[(size_t)t * E + i] * out[(size_t)t * E + i];
            float inv = n2 > 0 ? (float)(1.0 / sqrt(n2)) : 0.0f;
            for (int i = 0; i < E; i++) out[(size_t)t * E + i] *= inv;
        }
    return HX_OK;
}
