// forward.cu — the decoder recipe of src/backend/cpu/forward.c on the GPU.
//
// Per layer (x the residual stream, (n, n_embd) f32 on the device):
//   h = RMSNorm(x)*attn_norm; q,k,v = W h (+b); [qk_norm]; RoPE + KV store (f16);
//   a = attention; x += Wo a (fused into the matvec unless post_norms);
//   h = RMSNorm(x)*ffn_norm; g = act(Wg h) * (Wu h); x += Wd g.
// No host synchronization inside a forward: the position lives in device
// memory (d_pos), so a greedy decode step is captured once into a CUDA graph
// and replayed; the host copies 8 bytes in (token, position) and 4 bytes out.
//
// Sequences: the KV cache holds n_seq slots of n_ctx positions (slot s of
// layer l at rows s * kv_rows[l] ..). A forward over a batch that mixes
// sequences is one pass over all its tokens: every linear layer over the n
// tokens at once (each weight read once per step, not once per sequence),
// RoPE, the KV store and attention per token through a per-token (position,
// slot) array on the device, and the output matmul over the gathered rows
// that want logits (forward_multi: a graph per shape of such a batch). Each
// slot has its own single-token decode graph (captured on its first decode
// step). Everything else (weights, scratch,
// logits) is shared: work is serialized on the context's one stream.
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <map>
#include <string>
#include <utility>
#include <vector>
#include <algorithm>

#include "backend/cuda/cuda.h"
#include "backend/cuda/check.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/lora.cuh"
#include "backend/cuda/mega.h"
#include "backend/cuda/tp.h"
extern "C" {
#include "api/backend.h"
#include "core/core.h"
#include "model/lora.h"
#include "model/shard.h"
#include "quant/quant.h"
}

struct dlayer {
    hx_dmat wq, wk, wv, wo, gate, up, down;
    float *attn_norm, *ffn_norm, *q_norm, *k_norm, *post_attn, *post_ffn;
    float *bq, *bk, *bv, *bo, *up_b, *down_b;
};

struct lseg_t { size_t s_off; int r, adapter; float f; }; // LoRA: s[s_off..+r) = scale[adapter] * f

struct hx_cuda_ctx {
    const hx_model *m;
    hx_model_config cfg;
    int n_seq;                     // sequence slots
    int n_ctx;                     // positions per slot
    hx_cuda_dev_opts dv;           // developer switches (dev_opts.h); dv.skip and dv.mvq_wpr_rules point below
    std::string skip_s;
    std::vector<hx_cuda_wpr_rule> wpr_rules;
    bool use_graph;
    bool no_fuse_attn;             // dv.no_fuse_attn: separate rope and attention kernels at decode
    bool tok_distinct;             // the many-sequence forward being enqueued has no slot twice
    bool pdl;                      // launches with programmatic dependent launch (device has it, not dv.no_pdl)
    cudaStream_t st;
    hx_gemm_scratch gs;
    uint8_t *wbuf;                 // every weight matrix, as stored
    size_t wbytes;
    double load_s;
    std::vector<void *> small;     // norm / bias vectors (f32), rope tables
    const float2 *rope_tab[2];     // (cos, sin) per position and pair for rope_base / rope_base_swa, or NULL
    hx_dmat tok_embd, output;
    float *out_norm;
    std::vector<dlayer> L;
    std::vector<__half *> kc, vc;  // per layer (n_seq, kv_rows[l], n_head_kv*head_dim) f16
    std::vector<int> kv_rows;      // position t of a slot lives in its row t % kv_rows[l] (a ring for sliding-window layers)
    size_t kv_bytes;               // all of kc and vc
    std::vector<int> n_past;       // per slot: positions held
    int ubatch;                    // most tokens per batch when a ring is present
    int piece;                     // batches run in pieces of ubatch tokens with a ring, else 0 = whole
    int cap;                       // tokens the scratch holds
    float *x, *h, *q, *k, *v, *att, *o, *gate, *up;
    float *logits; int logits_rows;
    int *d_tok, *d_pos;
    int *d_tpos, *d_tslot, *d_gidx; // many-sequence forward (cap each): per token position and slot, output rows' tokens
    int8_t *xqn; float *xdn;        // many-sequence forward: the cap rows of a linear layer's input as q8
    float2 *dsn;                    // ... and their (scale, scale * sum) per 32 for mmq
    int mmq_max;                    // many-sequence forward: batches of at most this many tokens take mmq
    int cols_max;                   // many-sequence forward: batches of at most this many tokens take the q8 tile kernel
    unsigned long long *d_next;    // argmax key
    unsigned *d_acnt;              // the argmax's block counter (0 between launches)
    int *h_io;                     // pinned: [0..1] unused, [2..3] and [4..5] argmax keys (two slots), then
                                   // (token, pos) of each sequence slot at [6 + 2 * s]: the source of that slot's
                                   // asynchronous copies, so sub-batches of several slots can be enqueued back to back
    // Greedy lookahead (hx_cuda_decode_greedy): the step after the one a call
    // returns is already on the stream, its token and position taken on the
    // device from the argmax. ahead_pos: its position (-1: none), ahead_tok:
    // its token, ahead_seq: its sequence, ahead_slot: the h_io key slot its
    // result lands in, kev: an event after each key slot's copy. Off with
    // profiling, dumps, no graph, a sliding-window ring (the step would
    // overwrite a ring row a rewind may still need) or dv.no_ahead.
    bool ahead_on;
    int ahead_pos, ahead_tok, ahead_seq, ahead_slot;
    cudaEvent_t kev[2];
    std::vector<cudaGraphExec_t> graph; // per sequence slot: its decode step, NULL until first used
    // Many-sequence forwards as graphs, one per shape (tokens, output rows,
    // hidden states wanted): run eagerly on a shape's first use (scratch and
    // cuBLAS buffers grow then), captured on its second, replayed after.
    struct mgraph { int uses; cudaGraphExec_t exec; };
    std::map<long long, mgraph> mgraphs;
    char *dump_dir;                // dumps of sequence 0
    std::vector<int> dump_pos;
    int mvq;                       // decode with 8-bit activations: 0 off, 1 q/k/v + gate/up, 2 every matrix (default)
    int8_t *xq; float *xd;         // the quantized activation vector (mvq)
    float *apart; unsigned *acount; // split-K decode attention: partials, per-head counters
    float *swork; int *shist, *sout; int shist_cap; // GPU sampling: penalized logits, penalty window, result
    // logits rows left on the device by a forward with defer_logits:
    // dev_row[r] = the row of c->logits holding output row r (-1: none)
    bool deferred;
    std::vector<int> dev_row;
    int *d_amax, *h_amax;          // hx_k_argmax_rows results (HX_ROWS_MAX), device and page-locked host
    int *d_lpi;                    // hx_k_logprob_rows ids, then its results as floats (lp_cap of each)
    size_t lp_cap;
    const char *skip;              // dv.skip (timing experiments only), NULL: none
    // dv.profile: decode steps run without the graph, with an event after
    // every kernel; the time between events is summed per kernel label and
    // printed (stderr) when the context is freed.
    bool prof;
    std::vector<cudaEvent_t> pev;
    std::vector<const char *> plab;
    size_t pn;
    std::map<std::string, std::pair<long, double>> ptab; // label -> (calls, ms)
    long prof_tokens;
    // LoRA (hx_cuda_set_adapters): lw[l * HX_LORA_PER_LAYER + slot], then the
    // output head, then token_embd (lora.cuh; empty: no adapters). Every A, B
    // and s lives in lbuf; lt: the two-phase kernels' A x, cap * lrt floats
    // (lrt: the largest sum of ranks of one launch). lseg: what s is made of,
    // so a change of scales rewrites s in place (graphs stay valid).
    std::vector<hx_lora_dmat> lw;
    uint8_t *lbuf;
    float *lt; int lrt;
    std::vector<lseg_t> lsegs;
    std::vector<float> ls_host;
    float *ls_dev;
    std::vector<const struct hx_adapter *> lad;
    // Tensor parallelism (tp.cu): this context is rank tp.rank of tp.n and
    // holds that share of every layer (model/shard.h); cfg's n_head,
    // n_head_kv and n_ff are the share's. tpc: the ranks' collectives. With the
    // output head cut (tp.output), this rank's logits (rows, vocab_n) land in
    // lpart and are gathered (through lgath when rows > 1) into logits.
    hx_shard tp;
    const hx_tp_comm *tpc;
    int vocab_n;
    float *lpart, *lgath;
    bool mute;                     // a follower rank: forward copies no logits or hidden states to the host
    // The persistent decode kernel (mega.h): every layer of a one-token step
    // in one launch, when the model and device allow it (NULL: one kernel per op)
    hx_mega *mega;
    char mega_why[256];            // why not, when mega is NULL
    // A pipeline part (api/pipe.c), for the forward being run: embd_in (n,
    // n_embd) f32 on the host replaces the token embedding; with embd_out the
    // forward stops after the last layer (its residual is copied out). The
    // part's model view has no tok_embd / output when it does not run them.
    const float *embd_in;
    bool embd_out;
};

static bool skipped(const char *list, const char *label) {
    size_t n = strlen(label);
    for (const char *p = list; (p = strstr(p, label)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

// Marks the end of the kernel just enqueued (profiling only).
static cudaError_t prof_mark(hx_cuda_ctx *c, const char *label) {
    if (c->pn == c->pev.size()) {
        cudaEvent_t ev;
        cudaError_t rc = cudaEventCreate(&ev);
        if (rc != cudaSuccess) return rc;
        c->pev.push_back(ev);
        c->plab.push_back(NULL);
    }
    c->plab[c->pn] = label;
    return cudaEventRecord(c->pev[c->pn++], c->st);
}

static void prof_report(hx_cuda_ctx *c) {
    if (!c->prof || c->prof_tokens == 0) return;
    double total = 0;
    for (auto &kv : c->ptab) total += kv.second.second;
    std::vector<std::pair<double, std::string>> rows;
    for (auto &kv : c->ptab) rows.push_back({-kv.second.second, kv.first});
    std::sort(rows.begin(), rows.end());
    fprintf(stderr, "cuda profile: %ld decode steps, %.3f ms per token (kernel to kernel, no graph, no PDL overlap)\n",
            c->prof_tokens, total / c->prof_tokens);
    fprintf(stderr, "  %-22s %10s %12s %12s %7s\n", "kernel", "calls/tok", "us/call", "us/token", "share");
    for (auto &r : rows) {
        auto &v = c->ptab[r.second];
        fprintf(stderr, "  %-22s %10.1f %12.2f %12.2f %6.1f%%\n", r.second.c_str(), (double)v.first / c->prof_tokens,
                1e3 * v.second / v.first, 1e3 * v.second / c->prof_tokens, 100 * v.second / total);
    }
}

// ---- upload ----

// Norm / bias vector of n elements as f32 on the device (NULL when absent),
// from element `first` on (a tensor-parallel share of a bias).
static hx_status upload_vec(hx_cuda_ctx *c, const hx_tensor *t, int64_t n, float **out, hx_error *e,
                            int64_t first = 0) {
    *out = NULL;
    if (!t->data) return HX_OK;
    std::vector<float> tmp((size_t)(first + n));
    hx_dequantize_row(t->type, t->data, tmp.data(), first + n);
    if (first) memmove(tmp.data(), tmp.data() + first, sizeof(float) * n);
    void *d = NULL;
    CK(cudaMalloc(&d, sizeof(float) * n));
    c->small.push_back(d);
    CK(cudaMemcpy(d, tmp.data(), sizeof(float) * n, cudaMemcpyHostToDevice));
    *out = (float *)d;
    return HX_OK;
}

struct pending { const hx_tensor *t; hx_dmat *dst; size_t off, bytes; hx_shard_cut cut; };

// A weight matrix (or its tensor-parallel cut) placed in the weight buffer.
static hx_status plan_mat(const hx_tensor *t, hx_dmat *dst, std::vector<pending> &plan, size_t *total, hx_error *e,
                          hx_shard_cut cut = hx_shard_cut{HX_CUT_NONE, 0, 0}) {
    if (!t->data) return hx_err(e, HX_ERR_FORMAT, "cuda: weight '%s' missing", t->name ? t->name : "?");
    if (!hx_k_type_supported(t->type))
        return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: tensor '%s' has type %s, which the GPU kernels do not handle",
                      t->name ? t->name : "?", hx_type_name(t->type));
    bool plain = t->type == HX_TYPE_F32 || t->type == HX_TYPE_F16 || t->type == HX_TYPE_BF16;
    int64_t cols = hx_shard_cut_cols(t, &cut);
    if (cols % 32 != 0 && !plain)
        return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: tensor '%s' rows of %lld elements (the GPU kernels need a multiple of 32)",
                      t->name ? t->name : "?", (long long)cols);
    dst->type = t->type;
    dst->cols = (int)cols;
    dst->rows = (int)hx_shard_cut_rows(t, &cut);
    dst->row_bytes = hx_shard_cut_row_bytes(t, &cut);
    size_t bytes = dst->row_bytes * (size_t)dst->rows;
    // tied output: the same tensor, cut the same way, already planned
    for (auto &p : plan)
        if (p.t->data == t->data && p.cut.dim == cut.dim && p.cut.lo == cut.lo && p.cut.hi == cut.hi) {
            plan.push_back({t, dst, p.off, 0, cut});
            return HX_OK;
        }
    size_t off = (*total + 255) & ~(size_t)255;
    plan.push_back({t, dst, off, bytes, cut});
    *total = off + bytes;
    return HX_OK;
}

// Copies host ranges to the device through two pinned staging buffers, so the
// memcpy out of the mapping (page faults, disk) overlaps the PCIe transfer.
static hx_status upload_all(hx_cuda_ctx *c, std::vector<pending> &plan, hx_error *e) {
    const size_t CH = (size_t)32 << 20;
    uint8_t *stage[2] = {NULL, NULL};
    cudaEvent_t done[2];
    CK(cudaMallocHost((void **)&stage[0], CH));
    hx_status s = HX_OK;
    cudaError_t rc = cudaMallocHost((void **)&stage[1], CH);
    if (rc != cudaSuccess) { cudaFreeHost(stage[0]); return cfail(e, rc, __FILE__, __LINE__, "cudaMallocHost"); }
    cudaEventCreateWithFlags(&done[0], cudaEventDisableTiming);
    cudaEventCreateWithFlags(&done[1], cudaEventDisableTiming);
    bool used[2] = {false, false};
    int k = 0;
    for (auto &p : plan) {
        p.dst->d = c->wbuf + p.off;
        // whole rows per chunk, so a column cut copies the same bytes of every row
        size_t rb = p.dst->row_bytes, per = rb ? (CH / rb > 0 ? CH / rb * rb : rb) : CH;
        if (per > CH) { s = hx_err(e, HX_ERR_UNSUPPORTED, "cuda: '%s': rows of %zu bytes", p.t->name, rb); break; }
        for (size_t o = 0; o < p.bytes && s == HX_OK; o += per) {
            size_t len = p.bytes - o < per ? p.bytes - o : per;
            if (used[k]) cudaEventSynchronize(done[k]);
            hx_shard_copy(p.t, &p.cut, (int64_t)(o / rb), (int64_t)((o + len) / rb), stage[k]);
            rc = cudaMemcpyAsync(c->wbuf + p.off + o, stage[k], len, cudaMemcpyHostToDevice, c->st);
            if (rc == cudaSuccess) rc = cudaEventRecord(done[k], c->st);
            if (rc != cudaSuccess) s = cfail(e, rc, __FILE__, __LINE__, "upload");
            used[k] = true;
            k ^= 1;
        }
        if (s) break;
    }
    rc = cudaStreamSynchronize(c->st);
    if (rc != cudaSuccess && s == HX_OK) s = cfail(e, rc, __FILE__, __LINE__, "upload sync");
    cudaEventDestroy(done[0]); cudaEventDestroy(done[1]);
    cudaFreeHost(stage[0]); cudaFreeHost(stage[1]);
    return s;
}

// The decode graphs of every slot (they hold the addresses of buffers about to move).
static void drop_graphs(hx_cuda_ctx *c) {
    for (auto &g : c->graph)
        if (g) { cudaGraphExecDestroy(g); g = NULL; }
    for (auto &kv : c->mgraphs)
        if (kv.second.exec) cudaGraphExecDestroy(kv.second.exec);
    c->mgraphs.clear();
}

extern "C" void hx_cuda_ctx_free(hx_cuda_ctx *c) {
    if (!c) return;
    if (c->st) cudaStreamSynchronize(c->st); // a greedy lookahead step may still run on the buffers freed below
    prof_report(c);
    for (auto ev : c->pev) cudaEventDestroy(ev);
    drop_graphs(c);
    for (auto p : c->small) cudaFree(p);
    for (auto p : c->kc) cudaFree(p);
    for (auto p : c->vc) cudaFree(p);
    float *bufs[] = {c->x, c->h, c->q, c->k, c->v, c->att, c->o, c->gate, c->up, c->logits, c->lpart, c->lgath};
    for (float *b : bufs) if (b) cudaFree(b);
    if (c->d_tok) cudaFree(c->d_tok);
    for (int *p : {c->d_tpos, c->d_tslot, c->d_gidx}) if (p) cudaFree(p);
    if (c->xqn) cudaFree(c->xqn);
    if (c->xdn) cudaFree(c->xdn);
    if (c->dsn) cudaFree(c->dsn);
    if (c->xq) cudaFree(c->xq);
    if (c->apart) cudaFree(c->apart);
    if (c->swork) cudaFree(c->swork);
    if (c->shist) cudaFree(c->shist);
    if (c->sout) cudaFree(c->sout);
    if (c->d_amax) cudaFree(c->d_amax);
    if (c->d_lpi) cudaFree(c->d_lpi);
    if (c->h_amax) cudaFreeHost(c->h_amax);
    if (c->acount) cudaFree(c->acount);
    if (c->xd) cudaFree(c->xd);
    if (c->d_pos) cudaFree(c->d_pos);
    if (c->d_next) cudaFree(c->d_next);
    if (c->d_acnt) cudaFree(c->d_acnt);
    for (cudaEvent_t ev : c->kev) if (ev) cudaEventDestroy(ev);
    if (c->h_io) cudaFreeHost(c->h_io);
    if (c->gs.wh) cudaFree(c->gs.wh);
    if (c->gs.xh) cudaFree(c->gs.xh);
    if (c->gs.blas) cublasDestroy(c->gs.blas);
    if (c->wbuf) cudaFree(c->wbuf);
    hx_mega_free(c->mega);
    if (c->lbuf) cudaFree(c->lbuf);
    if (c->lt) cudaFree(c->lt);
    if (c->st) cudaStreamDestroy(c->st);
    free(c->dump_dir);
    delete c;
}

static hx_status ensure_scratch(hx_cuda_ctx *c, int n, hx_error *e) {
    if (n <= c->cap) return HX_OK;
    const hx_model_config *cfg = &c->cfg;
    size_t nq = (size_t)cfg->n_head * cfg->head_dim, nkv = (size_t)cfg->n_head_kv * cfg->head_dim;
    size_t emb = (size_t)cfg->n_embd, ff = (size_t)cfg->n_ff;
    float **bufs[] = {&c->x, &c->h, &c->q, &c->k, &c->v, &c->att, &c->o, &c->gate, &c->up};
    size_t dims[] = {emb, emb > nq ? emb : nq, nq, nkv, nkv, nq, emb, ff, ff};
    CK(cudaStreamSynchronize(c->st));
    for (int i = 0; i < 9; i++) {
        if (*bufs[i]) cudaFree(*bufs[i]);
        *bufs[i] = NULL;
        CK(cudaMalloc((void **)bufs[i], sizeof(float) * dims[i] * n));
    }
    if (c->d_tok) cudaFree(c->d_tok);
    c->d_tok = NULL;
    CK(cudaMalloc((void **)&c->d_tok, sizeof(int) * n));
    for (int **p : {&c->d_tpos, &c->d_tslot, &c->d_gidx}) {
        if (*p) cudaFree(*p);
        *p = NULL;
        CK(cudaMalloc((void **)p, sizeof(int) * n));
    }
    size_t wide = emb > nq ? emb : nq;
    if (ff > wide) wide = ff;
    if (c->xqn) cudaFree(c->xqn);
    if (c->xdn) cudaFree(c->xdn);
    if (c->dsn) cudaFree(c->dsn);
    c->xqn = NULL; c->xdn = NULL; c->dsn = NULL;
    size_t np = (size_t)hx_k_mmq_pad(n); // mmq pads the tokens to whole tiles
    CK(cudaMalloc((void **)&c->xqn, wide * np));
    CK(cudaMalloc((void **)&c->xdn, sizeof(float) * (wide / 32 + 1) * n));
    CK(cudaMalloc((void **)&c->dsn, sizeof(float2) * (wide / 32 + 1) * np));
    if (c->lt) cudaFree(c->lt);
    c->lt = NULL;
    if (c->lrt > 0) CK(cudaMalloc((void **)&c->lt, sizeof(float) * (size_t)c->lrt * n));
    c->cap = n;
    drop_graphs(c); // buffers moved
    return HX_OK;
}

// (cos, sin) of every position below n_ctx for each rotary pair, computed on the
// host with the kernels' formula (hx_rope_cs: double theta, then float), so the decode
// kernel reads two floats instead of running pow/cos/sin in double. Skipped
// (NULL: the kernel computes) when the table would exceed 256 MiB.
static hx_status rope_table(hx_cuda_ctx *c, float base, const float2 **out, hx_error *e) {
    *out = NULL;
    int half = c->cfg.head_dim / 2;
    size_t count = (size_t)c->n_ctx * half;
    if (count * sizeof(float2) > ((size_t)256 << 20)) return HX_OK;
    float rs = c->cfg.rope_scale > 0 ? c->cfg.rope_scale : 1.0f;
    std::vector<float2> t(count);
    for (int p = 0; p < c->n_ctx; p++)
        for (int j = 0; j < half; j++) t[(size_t)p * half + j] = hx_rope_cs(p, j, c->cfg.head_dim, base, rs);
    float2 *d = NULL;
    CK(cudaMalloc((void **)&d, count * sizeof(float2)));
    c->small.push_back(d);
    CK(cudaMemcpy(d, t.data(), count * sizeof(float2), cudaMemcpyHostToDevice));
    *out = d;
    return HX_OK;
}

// End of the run of matrices from i on that share type and row length (one
// fused launch each).
static int run_end(const hx_dmat *const *Ws, int count, int i) {
    int j = i + 1;
    while (j < count && Ws[j]->type == Ws[i]->type && Ws[j]->cols == Ws[i]->cols) j++;
    return j;
}

// Decode: matrices sharing the input x (q/k/v), each run of equal type and row
// length in one fused launch with the RMSNorm in front (q4_k_m models mix Q4_K
// and Q6_K here: two launches instead of a norm and three).
static cudaError_t mv_runs(cudaStream_t st, int count, const hx_dmat *const *Ws, const float *x, const float *norm_w,
                           float eps, float *const *ys, const float *const *bs, const hx_cuda_dev_opts *dv) {
    for (int i = 0; i < count;) {
        int j = run_end(Ws, count, i);
        cudaError_t rc = hx_k_mv_fused(st, j - i, Ws + i, x, norm_w, eps, ys + i, bs + i, false, -1, dv);
        if (rc != cudaSuccess) return rc;
        i = j;
    }
    return cudaSuccess;
}

// Decode with 8-bit activations when every matrix allows it: x (normalized
// by norm_w when not NULL) quantized once, then one launch per run of equal
// type (hx_k_mvq). mvq_ok says whether it applies at this level of c->mvq.
static bool mvq_ok(const hx_cuda_ctx *c, int level, int count, const hx_dmat *const *Ws) {
    if (c->mvq < level) return false;
    for (int i = 0; i < count; i++)
        if (!hx_k_mvq_supported(Ws[i]) || Ws[i]->cols != Ws[0]->cols) return false;
    return true;
}
// have: c->xq already holds x quantized (the attention kernel writes its
// output that way for wo).
static cudaError_t mvq_runs(hx_cuda_ctx *c, int count, const hx_dmat *const *Ws, const float *x, const float *norm_w,
                            float eps, float *const *ys, const float *const *bs, bool acc, int glu_act,
                            bool have = false) {
    cudaError_t rc = have ? cudaSuccess : hx_k_quant_q8(c->st, x, norm_w, eps, Ws[0]->cols, c->xq, c->xd);
    if (rc != cudaSuccess) return rc;
    const hx_cuda_dev_opts *dv = &c->dv;
    if (glu_act >= 0) return Ws[0]->type == Ws[1]->type ? hx_k_mvq(c->st, 2, Ws, c->xq, c->xd, ys, bs, acc, glu_act, dv)
                                                        : cudaErrorInvalidValue;
    if (hx_k_mvq_one_launch(Ws, count, dv)) return hx_k_mvq(c->st, count, Ws, c->xq, c->xd, ys, bs, acc, -1, dv);
    for (int i = 0; i < count;) {
        int j = run_end(Ws, count, i);
        if ((rc = hx_k_mvq(c->st, j - i, Ws + i, c->xq, c->xd, ys + i, bs ? bs + i : NULL, acc, -1, dv)) != cudaSuccess)
            return rc;
        i = j;
    }
    return cudaSuccess;
}

static hx_status ensure_logits(hx_cuda_ctx *c, int rows, hx_error *e);

// The persistent decode kernel's plan for this context (developer option
// dv.mega: it is slower than one kernel per op so far), or the reason it runs
// one kernel per op (logged at info level). Not with tensor parallelism,
// post-norms (Gemma 3's sandwich norms need a whole row between wo and the
// residual), or f32 activations.
static hx_status mega_plan(hx_cuda_ctx *c, int tpn, hx_error *e) {
    const hx_model_config *cfg = &c->cfg;
    const char *off = !c->dv.mega ? "the persistent kernel is a developer option (hx_cuda_dev_opts.mega)"
                      : tpn > 1      ? "tensor parallel"
                      : cfg->post_norms ? "post-attention and post-FFN norms"
                      : c->mvq < 2   ? "8-bit activations not on for every matrix"
                                     : NULL;
    if (off) {
        snprintf(c->mega_why, sizeof c->mega_why, "%s", off);
        HX_INFO("cuda: one kernel per op at decode: %s", off);
        return HX_OK;
    }
    std::vector<hx_mega_layer_in> ls(cfg->n_layer);
    for (int l = 0; l < cfg->n_layer; l++) {
        const dlayer *L = &c->L[l];
        hx_mega_layer_in &y = ls[l];
        y.wq = &L->wq; y.wk = &L->wk; y.wv = &L->wv; y.wo = &L->wo;
        y.gate = &L->gate; y.up = &L->up; y.down = &L->down;
        y.bq = L->bq; y.bk = L->bk; y.bv = L->bv; y.bo = L->bo; y.up_b = L->up_b; y.down_b = L->down_b;
        y.attn_norm = L->attn_norm;
        y.ffn_norm = L->ffn_norm;
        y.q_norm = cfg->qk_norm ? L->q_norm : NULL;
        y.k_norm = cfg->qk_norm ? L->k_norm : NULL;
        y.kc = c->kc[l];
        y.vc = c->vc[l];
        y.slot_stride = (size_t)c->kv_rows[l] * cfg->n_head_kv * cfg->head_dim;
        y.kv_rows = c->kv_rows[l];
        bool swa = cfg->layer_is_swa[l];
        y.rope_base = swa ? cfg->rope_base_swa : cfg->rope_base;
        y.window = swa ? cfg->sliding_window : 0;
        y.rope_tab = c->rope_tab[swa ? 1 : 0];
    }
    hx_mega_in in = {};
    in.n_layer = cfg->n_layer;
    in.n_embd = cfg->n_embd;
    in.n_ff = cfg->n_ff;
    in.n_head = cfg->n_head;
    in.n_head_kv = cfg->n_head_kv;
    in.head_dim = cfg->head_dim;
    in.eps = cfg->norm_eps;
    in.attn_scale = cfg->attn_scale > 0 ? cfg->attn_scale : 1.0f / sqrtf((float)cfg->head_dim);
    in.softcap = cfg->attn_logit_softcap;
    in.rope_scale = cfg->rope_scale > 0 ? cfg->rope_scale : 1.0f;
    in.neox = cfg->rope_style == HX_ROPE_NEOX;
    in.act = cfg->act == HX_ACT_SILU ? 0 : 1;
    // chunks of 256 positions or more: short contexts take one item per head (no merge); a chunk
    // chosen by the developer switch (tests: merges on short runs) as given
    in.att_chunk = hx_k_attn_decode_chunk(c->n_ctx, &c->dv);
    if (!c->dv.att_chunk && in.att_chunk < 256) in.att_chunk = 256;
    in.att_splits = hx_k_attn_decode_splits(c->n_ctx, &c->dv);
    in.layers = ls.data();
    in.times = c->dv.mega_times;
    in.threads = c->dv.mega_threads;
    c->mega = hx_mega_new(&in, c->mega_why, sizeof c->mega_why);
    if (!c->mega) {
        cudaError_t rc = cudaGetLastError();
        if (rc != cudaSuccess) return cfail(e, rc, __FILE__, __LINE__, "hx_mega_new");
        HX_INFO("cuda: one kernel per op at decode: %s", c->mega_why);
    } else {
        HX_INFO("cuda: decode runs every layer in one persistent kernel");
    }
    return HX_OK;
}

extern "C" hx_status hx_cuda_ctx_new(const hx_model *m, const hx_cuda_opts *opts, hx_cuda_ctx **out, hx_error *e) {
    *out = NULL;
    const hx_model_config *cfg = &m->cfg;
    if (cfg->arch == HX_ARCH_BERT)
        return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: %s is an encoder; the GPU decoder does not apply", cfg->arch_name);
    if (cfg->n_layer <= 0 || cfg->n_embd <= 0 || cfg->n_head <= 0 || cfg->n_head_kv <= 0 ||
        cfg->n_head % cfg->n_head_kv != 0 || cfg->head_dim <= 0 || cfg->head_dim % 2 != 0 || cfg->head_dim > 1024 ||
        cfg->n_vocab <= 0 || cfg->n_ff <= 0)
        return hx_err(e, HX_ERR_FORMAT, "cuda: unusable config (layers %d, embd %d, heads %d/%d, head_dim %d)",
                      cfg->n_layer, cfg->n_embd, cfg->n_head, cfg->n_head_kv, cfg->head_dim);
    hx_cuda_opts o = {};
    if (opts) o = *opts;
    else o.device = -1;
    if (o.n_seq < 0 || o.n_seq > 4096 || o.n_ctx < 0 || o.n_ubatch < 0)
        return hx_err(e, HX_ERR_ARG, "cuda: bad context options (sequences %d, context %d, ubatch %d)", o.n_seq, o.n_ctx,
                      o.n_ubatch);
    hx_cuda_device dev;
    hx_status s = hx_cuda_init(o.device, &dev, e);
    if (s) return s;
    const int tpn = o.tp_size > 1 ? o.tp_size : 1;
    if (tpn > 1) {
        if ((s = hx_shard_check(m, tpn, e))) return s;
        if (o.tp_rank < 0 || o.tp_rank >= tpn || !o.tp_comm)
            return hx_err(e, HX_ERR_ARG, "cuda: tensor parallel rank %d of %d without its collectives", o.tp_rank, tpn);
        if (o.dump_dir && *o.dump_dir)
            return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: per-layer dumps are of one GPU (run without tensor parallelism)");
    }
    hx_cuda_ctx *c = new hx_cuda_ctx();
    c->m = m;
    c->cfg = *cfg;
    c->tp = hx_shard_make(m, tpn, tpn > 1 ? o.tp_rank : 0);
    c->tpc = tpn > 1 ? o.tp_comm : NULL;
    c->mute = tpn > 1 && o.tp_mute;
    if (tpn > 1) { // this rank's share of the heads and of the FFN
        c->cfg.n_head = c->tp.n_head;
        c->cfg.n_head_kv = c->tp.n_head_kv;
        c->cfg.n_ff = c->tp.n_ff;
    }
    c->vocab_n = c->tp.output.dim == HX_CUT_ROWS ? (int)(c->tp.output.hi - c->tp.output.lo) : cfg->n_vocab;
    cfg = &c->cfg; // from here on: this rank's share
    if (o.dev) c->dv = *o.dev;
    if (c->dv.skip) { c->skip_s = c->dv.skip; c->dv.skip = c->skip_s.c_str(); }
    if (c->dv.mvq_wpr_rules && c->dv.n_mvq_wpr_rules > 0)
        c->wpr_rules.assign(c->dv.mvq_wpr_rules, c->dv.mvq_wpr_rules + c->dv.n_mvq_wpr_rules);
    c->dv.mvq_wpr_rules = c->wpr_rules.data();
    c->dv.n_mvq_wpr_rules = (int)c->wpr_rules.size();
    c->n_seq = o.n_seq > 0 ? o.n_seq : 1;
    c->n_ctx = o.n_ctx > 0 ? o.n_ctx : (cfg->n_ctx_train > 0 && cfg->n_ctx_train < 4096 ? cfg->n_ctx_train : 4096);
    c->ubatch = o.n_ubatch > 0 ? o.n_ubatch : 512;
    c->kv_rows.resize(cfg->n_layer);
    size_t kv_total_rows = 0;
    for (int l = 0; l < cfg->n_layer; l++) {
        c->kv_rows[l] = hx_kv_layer_rows(cfg, l, c->n_ctx, c->ubatch);
        kv_total_rows += (size_t)c->kv_rows[l];
    }
    c->n_past.assign(c->n_seq, 0);
    c->graph.assign(c->n_seq, NULL);
    c->piece = hx_kv_has_ring(cfg, c->kv_rows.data(), c->n_ctx) ? c->ubatch : 0;
    c->use_graph = !o.no_graph && !c->dv.no_graph;
    c->no_fuse_attn = c->dv.no_fuse_attn;
    c->prof = c->dv.profile;
    c->skip = c->dv.skip && *c->dv.skip ? c->dv.skip : NULL;
    c->mvq = c->dv.mvq < 0 ? 0 : c->dv.mvq == 1 ? 1 : 2;
    // many-sequence products with 8-bit activations, by token count (H100, bench/RESULTS.md "Batched
    // decode on the int8 tensor cores" and "mmq to 64 tokens"): 1 the dp4a tile kernel, 2..64 mmq,
    // more: cuBLAS (f16)
    c->cols_max = c->dv.mvq_cols_max < 0 ? 0 : c->dv.mvq_cols_max > 0 ? c->dv.mvq_cols_max : 1;
    c->mmq_max = c->dv.mmq_max < 0 ? 0 : c->dv.mmq_max > 0 ? c->dv.mmq_max : 64;
    double t0 = hx_now_s();
#define FAIL(x) do { hx_status s_ = (x); if (s_) { hx_cuda_ctx_free(c); return s_; } } while (0)
#define FAILC(call) do { cudaError_t rc_ = (call); \
    if (rc_ != cudaSuccess) { hx_cuda_ctx_free(c); return cfail(e, rc_, __FILE__, __LINE__, #call); } } while (0)
    FAILC(hx_k_pdl_init(!c->dv.no_pdl, &c->pdl));
    FAILC(cudaStreamCreateWithFlags(&c->st, cudaStreamNonBlocking));
    if (cublasCreate(&c->gs.blas) != CUBLAS_STATUS_SUCCESS) {
        hx_cuda_ctx_free(c);
        return hx_err(e, HX_ERR_DEVICE, "cuda: cublasCreate failed");
    }
    // plan the weight buffer
    std::vector<pending> plan;
    size_t total = 0;
    c->L.resize(cfg->n_layer);
    const hx_shard *sh = &c->tp; // (whole tensors when tpn == 1: every cut is HX_CUT_NONE)
    const hx_shard_cut whole = {HX_CUT_NONE, 0, 0};
    // (a pipeline part's view lacks the embedding or the head it does not run: api/pipe.c)
    if (m->tok_embd.data) FAIL(plan_mat(&m->tok_embd, &c->tok_embd, plan, &total, e));
    if (m->output.data) FAIL(plan_mat(&m->output, &c->output, plan, &total, e, tpn > 1 ? sh->output : whole));
    for (int l = 0; l < cfg->n_layer; l++) {
        const hx_layer_weights *W = &m->layers[l];
        dlayer *D = &c->L[l];
        FAIL(plan_mat(&W->wq, &D->wq, plan, &total, e, tpn > 1 ? sh->q : whole));
        FAIL(plan_mat(&W->wk, &D->wk, plan, &total, e, tpn > 1 ? sh->kv : whole));
        FAIL(plan_mat(&W->wv, &D->wv, plan, &total, e, tpn > 1 ? sh->kv : whole));
        FAIL(plan_mat(&W->wo, &D->wo, plan, &total, e, tpn > 1 ? sh->o : whole));
        FAIL(plan_mat(&W->ffn_gate, &D->gate, plan, &total, e, tpn > 1 ? sh->gate_up : whole));
        FAIL(plan_mat(&W->ffn_up, &D->up, plan, &total, e, tpn > 1 ? sh->gate_up : whole));
        FAIL(plan_mat(&W->ffn_down, &D->down, plan, &total, e, tpn > 1 ? sh->down : whole));
    }
    size_t free_b = 0, total_b = 0;
    FAILC(cudaMemGetInfo(&free_b, &total_b));
    size_t kv_bytes = 2 * kv_total_rows * c->n_seq * cfg->n_head_kv * cfg->head_dim * sizeof(__half);
    if (total + kv_bytes + ((size_t)256 << 20) > free_b) {
        hx_cuda_ctx_free(c);
        return hx_err(e, HX_ERR_DEVICE, "cuda: %s: model %.2f GiB + KV cache %.2f GiB (%d sequences x %d positions) do "
                      "not fit in %.2f GiB free on the GPU", dev.name, total / 1073741824.0, kv_bytes / 1073741824.0,
                      c->n_seq, c->n_ctx, free_b / 1073741824.0);
    }
    c->kv_bytes = kv_bytes;
    // (+256: the persistent decode kernel copies rows in 16-byte units and may
    // read up to 15 bytes past a matrix's last row)
    FAILC(cudaMalloc((void **)&c->wbuf, total + 256));
    c->wbytes = total;
    FAIL(upload_all(c, plan, e));
    // small vectors
    int D = cfg->n_embd, hd = cfg->head_dim;
    FAIL(upload_vec(c, &m->output_norm, D, &c->out_norm, e));
    if (!c->out_norm) { hx_cuda_ctx_free(c); return hx_err(e, HX_ERR_FORMAT, "cuda: output_norm missing"); }
    for (int l = 0; l < cfg->n_layer; l++) {
        const hx_layer_weights *W = &m->layers[l];
        dlayer *Dl = &c->L[l];
        FAIL(upload_vec(c, &W->attn_norm, D, &Dl->attn_norm, e));
        FAIL(upload_vec(c, &W->ffn_norm, D, &Dl->ffn_norm, e));
        if (!Dl->attn_norm || !Dl->ffn_norm) {
            hx_cuda_ctx_free(c);
            return hx_err(e, HX_ERR_FORMAT, "cuda: layer %d: norm weights missing", l);
        }
        FAIL(upload_vec(c, &W->q_norm, hd, &Dl->q_norm, e));
        FAIL(upload_vec(c, &W->k_norm, hd, &Dl->k_norm, e));
        if (cfg->qk_norm && (!Dl->q_norm || !Dl->k_norm)) {
            hx_cuda_ctx_free(c);
            return hx_err(e, HX_ERR_FORMAT, "cuda: layer %d: q/k norm weights missing", l);
        }
        FAIL(upload_vec(c, &W->attn_post_norm, D, &Dl->post_attn, e));
        FAIL(upload_vec(c, &W->ffn_post_norm, D, &Dl->post_ffn, e));
        if (cfg->post_norms && (!Dl->post_attn || !Dl->post_ffn)) {
            hx_cuda_ctx_free(c);
            return hx_err(e, HX_ERR_FORMAT, "cuda: layer %d: post norms missing", l);
        }
        // a share's bias rows; wo's and down's biases are added once, by rank 0
        int64_t q0 = tpn > 1 ? sh->q.lo : 0, kv0 = tpn > 1 ? sh->kv.lo : 0, f0 = tpn > 1 ? sh->gate_up.lo : 0;
        FAIL(upload_vec(c, &W->bq, Dl->wq.rows, &Dl->bq, e, q0));
        FAIL(upload_vec(c, &W->bk, Dl->wk.rows, &Dl->bk, e, kv0));
        FAIL(upload_vec(c, &W->bv, Dl->wv.rows, &Dl->bv, e, kv0));
        FAIL(upload_vec(c, &W->ffn_up_b, Dl->up.rows, &Dl->up_b, e, f0));
        if (sh->rank == 0) {
            FAIL(upload_vec(c, &W->bo, Dl->wo.rows, &Dl->bo, e));
            FAIL(upload_vec(c, &W->ffn_down_b, Dl->down.rows, &Dl->down_b, e));
        }
    }
    // KV cache
    c->kc.assign(cfg->n_layer, NULL);
    c->vc.assign(cfg->n_layer, NULL);
    for (int l = 0; l < cfg->n_layer; l++) {
        size_t kvl = (size_t)c->n_seq * c->kv_rows[l] * cfg->n_head_kv * hd;
        FAILC(cudaMalloc((void **)&c->kc[l], kvl * sizeof(__half)));
        FAILC(cudaMalloc((void **)&c->vc[l], kvl * sizeof(__half)));
    }
    size_t smem = 0;
    FAILC(hx_k_attention_prepare(hd, c->n_ctx, &smem));
    if (smem > 227 * 1024) {
        hx_cuda_ctx_free(c);
        return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: context of %d tokens needs %zu KiB of shared memory in the "
                      "prefill attention kernel (max 227; decode is split, prefill is not yet): use -c with a smaller value",
                      c->n_ctx, smem / 1024);
    }
    for (int i = 0; i < 2; i++) {
        float base = i ? cfg->rope_base_swa : cfg->rope_base;
        bool used = false;
        for (int l = 0; l < cfg->n_layer; l++) used |= (cfg->layer_is_swa[l] != 0) == (i == 1);
        if (used) FAIL(rope_table(c, base, &c->rope_tab[i], e));
    }
    {
        size_t nmax = (size_t)cfg->n_embd;
        size_t dims[] = {(size_t)cfg->n_head * hd, (size_t)cfg->n_ff};
        for (size_t d : dims) if (d > nmax) nmax = d;
        FAILC(cudaMalloc((void **)&c->xq, nmax));
        FAILC(cudaMalloc((void **)&c->xd, sizeof(float) * (nmax / 32 + 1)));
    }
    {
        size_t np = (size_t)cfg->n_head * hx_k_attn_decode_splits(c->n_ctx, &c->dv) * (hd + 2);
        FAILC(cudaMalloc((void **)&c->apart, sizeof(float) * np));
        FAILC(cudaMalloc((void **)&c->acount, sizeof(unsigned) * cfg->n_head));
        FAILC(cudaMemset(c->acount, 0, sizeof(unsigned) * cfg->n_head));
    }
    FAILC(cudaMalloc((void **)&c->d_pos, sizeof(int)));
    FAILC(cudaMalloc((void **)&c->d_next, sizeof(unsigned long long)));
    FAILC(cudaMalloc((void **)&c->d_acnt, sizeof(unsigned)));
    FAILC(cudaMemset(c->d_acnt, 0, sizeof(unsigned)));
    FAILC(cudaMallocHost((void **)&c->h_io, (6 + 2 * (size_t)c->n_seq) * sizeof(int)));
    FAILC(cudaMalloc((void **)&c->d_amax, HX_ROWS_MAX * sizeof(int)));
    FAILC(cudaMallocHost((void **)&c->h_amax, HX_ROWS_MAX * sizeof(int)));
    for (cudaEvent_t &ev : c->kev) FAILC(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    c->ahead_pos = -1;
    FAIL(ensure_logits(c, 1, e));
    FAIL(ensure_scratch(c, 1, e));
    const char *dd = o.dump_dir;
    if (dd && *dd) {
        struct stat sb;
        if (stat(dd, &sb) != 0 && mkdir(dd, 0755) != 0) {
            hx_cuda_ctx_free(c);
            return hx_err(e, HX_ERR_IO, "dump: cannot create directory %s: %s", dd, strerror(errno));
        }
        c->dump_dir = strdup(dd);
        for (int i = 0; i < o.n_dump_positions; i++) c->dump_pos.push_back(o.dump_positions[i]);
    }
    c->ahead_on = c->use_graph && !c->prof && !c->dump_dir && c->piece == 0 && !c->dv.no_ahead;
    FAIL(mega_plan(c, tpn, e));
    c->load_s = hx_now_s() - t0;
    *out = c;
    return HX_OK;
#undef FAIL
#undef FAILC
}

extern "C" int hx_cuda_n_ctx(const hx_cuda_ctx *c) { return c->n_ctx; }
extern "C" bool hx_cuda_persistent(const hx_cuda_ctx *c, const char **why) {
    if (why) *why = c->mega ? NULL : c->mega_why;
    return c->mega != NULL;
}

// Keep the first pos positions of slot seq: pos, or 0 when a ring lost what
// position pos needs (hx_kv_rewind).
static int seq_keep(hx_cuda_ctx *c, int seq, int pos) {
    c->ahead_pos = -1;
    if (pos < 0) pos = 0;
    int &np = c->n_past[seq];
    if (pos >= np) return np;
    np = hx_kv_rewind(&c->cfg, c->kv_rows.data(), c->n_ctx, np, pos);
    return np;
}
extern "C" int hx_cuda_truncate(hx_cuda_ctx *c, int pos) { return seq_keep(c, 0, pos); }
extern "C" void hx_cuda_load_stats(const hx_cuda_ctx *c, size_t *bytes, double *seconds) {
    if (bytes) *bytes = c->wbytes;
    if (seconds) *seconds = c->load_s;
}

// ---- dumps (same files as the CPU path) ----

static bool want_dump(const hx_cuda_ctx *c, int pos) {
    if (!c->dump_dir) return false;
    if (c->dump_pos.empty()) return true;
    return std::find(c->dump_pos.begin(), c->dump_pos.end(), pos) != c->dump_pos.end();
}

static hx_status dump_rows(hx_cuda_ctx *c, int pos0, int n, int layer, const char *what, const float *dx,
                           hx_error *e) {
    int d = c->cfg.n_embd;
    std::vector<float> host((size_t)n * d);
    CK(cudaMemcpyAsync(host.data(), dx, sizeof(float) * host.size(), cudaMemcpyDeviceToHost, c->st));
    CK(cudaStreamSynchronize(c->st));
    for (int i = 0; i < n; i++) {
        if (!want_dump(c, pos0 + i)) continue;
        char path[4096];
        if (layer >= 0) snprintf(path, sizeof path, "%s/pos%05d-L%03d-%s.f32", c->dump_dir, pos0 + i, layer, what);
        else snprintf(path, sizeof path, "%s/pos%05d-%s.f32", c->dump_dir, pos0 + i, what);
        std::vector<uint8_t> buf(20 + sizeof(float) * d);
        int32_t ndim = 1;
        int64_t n64 = d;
        memcpy(buf.data(), "HXDUMP1", 8);
        memcpy(buf.data() + 8, &ndim, 4);
        memcpy(buf.data() + 12, &n64, 8);
        memcpy(buf.data() + 20, host.data() + (size_t)i * d, sizeof(float) * d);
        hx_status s = hx_write_file_atomic(path, buf.data(), buf.size(), e);
        if (s) return s;
    }
    return HX_OK;
}

// ---- the forward pass: enqueue only, no synchronization (except dumps) ----

#define KC(call) do { cudaError_t rc_ = (call); \
    if (rc_ != cudaSuccess) return cfail(e, rc_, __FILE__, __LINE__, #call); } while (0)
// KC, then (profiling) an event labelled `label` after the kernel(s)
// (dv.skip = "label,label": those kernels are not run at all — wrong results,
// for timing what the others cost inside the graph)
#define PK(label, call) do { if (c->skip && skipped(c->skip, label)) break; \
    KC(call); if (c->prof && c->pn < (size_t)1 << 20) KC(prof_mark(c, label)); } while (0)

// Runs n tokens of sequence slot `slot` whose ids are in d_tok at positions
// *d_pos..; pos0 is the same position on the host (used for dumps only).
// Leaves logits for the last `out_rows` tokens in c->logits (out_rows, n_vocab)
// and, with want_hidden, their final-normed hidden states in c->h (out_rows,
// n_embd). slot < 0: tokens of many sequences, token i at position d_tpos[i]
// of slot d_tslot[i]; the out_rows outputs are of tokens d_gidx[0..out_rows)
// (none when out_rows is 0).
static hx_status enqueue_forward(hx_cuda_ctx *c, int slot, int n, int pos0, int out_rows, bool want_hidden,
                                 hx_error *e) {
    const hx_model_config *cfg = &c->cfg;
    cudaStream_t st = c->st;
    int D = cfg->n_embd, hd = cfg->head_dim, nh = cfg->n_head, nkvh = cfg->n_head_kv, ff = cfg->n_ff;
    hx_gemm_scratch *gs = &c->gs;
    const hx_cuda_dev_opts *dv = &c->dv;
    float eps = cfg->norm_eps;
    const bool dump = c->dump_dir && slot == 0; // dumps are of sequence 0
    const bool multi = slot < 0;
    // y (m, rows) = x W^T. Tokens of many sequences with 8-bit activations: up
    // to c->cols_max tokens the dp4a tile kernel, up to c->mmq_max the int8
    // tensor-core one (mmq.cu); else hx_k_linear.
    auto linear = [&](const hx_dmat *W, const float *x, int m, float *y, const float *b, bool acc) -> cudaError_t {
        if (multi && c->mvq > 0 && hx_k_mvq_supported(W)) {
            if (m <= c->cols_max) {
                cudaError_t rc = hx_k_quant_q8_rows(st, x, m, W->cols, c->xqn, c->xdn);
                return rc != cudaSuccess ? rc : hx_k_mvq_cols(st, W, c->xqn, c->xdn, m, y, b, acc);
            }
            if (m <= c->mmq_max) {
                const hx_dmat *Ws[1] = {W};
                float *ys[1] = {y};
                const float *bs[1] = {b};
                cudaError_t rc = hx_k_mmq_quant(st, x, NULL, 0.0f, m, W->cols, c->xqn, c->dsn);
                return rc != cudaSuccess ? rc : hx_k_mmq(st, 1, Ws, c->xqn, c->dsn, m, ys, bs, acc, -1, dv);
            }
        }
        return hx_k_linear(st, gs, W, x, m, y, b, acc, dv);
    };
    // Tokens of many sequences: whether Ws[0..count) (one input) take mmq at m tokens
    auto mmq_ok = [&](int m, const hx_dmat *const *Ws, int count) -> bool {
        if (!multi || c->mvq == 0 || m <= c->cols_max || m > c->mmq_max) return false;
        for (int i = 0; i < count; i++)
            if (!hx_k_mmq_supported(Ws[i]) || Ws[i]->cols != Ws[0]->cols) return false;
        return true;
    };
    // ... then: x RMS-normed with norm_w and quantized once, the products in
    // one launch where the types allow (GLU: gate and up, ys[0] = act(gate) * up)
    auto mmq_runs = [&](int m, int count, const hx_dmat *const *Ws, const float *x, const float *norm_w,
                        float *const *ys, const float *const *bs, int glu_act) -> cudaError_t {
        cudaError_t rc = hx_k_mmq_quant(st, x, norm_w, eps, m, Ws[0]->cols, c->xqn, c->dsn);
        if (rc != cudaSuccess) return rc;
        if (hx_k_mmq_one_launch(Ws, count)) return hx_k_mmq(st, count, Ws, c->xqn, c->dsn, m, ys, bs, false, glu_act, dv);
        for (int i = 0; i < count && rc == cudaSuccess; i++)
            rc = hx_k_mmq(st, 1, Ws + i, c->xqn, c->dsn, m, ys + i, bs ? bs + i : NULL, false, -1, dv);
        if (rc == cudaSuccess && glu_act >= 0) rc = hx_k_glu(st, ys[0], ys[1], (size_t)m * Ws[0]->rows, glu_act);
        return rc;
    };
    const bool pre = c->dv.lora_preload; // LoRA kernels copy A and B to shared memory before the PDL wait
    // LoRA: Ms[0..count) = matrices slot.. of layer l (l = -1: the output
    // head); true when any of them is adapted
    auto lora_at = [&](int l, int slot, int count, const hx_lora_dmat **Ms) -> bool {
        if (c->lw.empty()) return false;
        bool any = false;
        for (int j = 0; j < count; j++) {
            Ms[j] = l < 0 ? &c->lw[(size_t)cfg->n_layer * HX_LORA_PER_LAYER] : &c->lw[(size_t)l * HX_LORA_PER_LAYER + slot + j];
            any |= Ms[j]->r > 0;
        }
        return any;
    };
    // y (m, n_out) += the deltas of one matrix over x (m, n_in) (normed with g when not NULL)
    auto lora1 = [&](int l, int slot, const float *x, const float *g, int m, float *y) -> cudaError_t {
        const hx_lora_dmat *M[1];
        if (!lora_at(l, slot, 1, M)) return cudaSuccess;
        float *ys[1] = {y};
        return hx_k_lora(st, 1, M, x, g, eps, m, ys, -1, c->lt, NULL, NULL, pre);
    };
    // Decode, a delta into the residual (wo, down) when the next matvec
    // quantizes x with norm_w: the single-block kernel adds it and hands that
    // matvec its 8-bit input (*have), one launch instead of two. Else lora1.
    auto lora_res = [&](int l, int slot, const float *x, bool next_q8, const float *norm_w, bool *have) -> cudaError_t {
        const hx_lora_dmat *M[1];
        *have = false;
        if (!lora_at(l, slot, 1, M)) return cudaSuccess;
        if (n == 1 && !c->dv.lora_plain && hx_k_lora_res_fits(M[0])) {
            *have = next_q8;
            return hx_k_lora_res(st, M[0], x, c->x, norm_w, eps, next_q8 ? c->xq : NULL, c->xd, pre);
        }
        return lora1(l, slot, x, NULL, n, c->x);
    };
    // Tensor parallelism: wo and down give this rank's partial sum of the
    // layer's output. part(site): where to write it for the one-shot
    // all-reduce (NULL: into the destination, summed in place by NCCL);
    // lead: this rank adds the residual (in place) and the biases once.
    const bool tpar = c->tpc != NULL, lead = c->tp.rank == 0;
    auto part = [&](int site) -> float * { return tpar ? hx_tp_partial(c->tpc, (size_t)n * D, site) : NULL; };
    bool xq_ready = false; // c->xq holds the next q/k/v matvec's input (a layer's down delta made it)
    bool out_have = false; // ... the output head's (the last layer's down delta made it)
    hx_k_pdl_set(c->pdl);
    if (c->embd_in) { // a later pipeline part: the residual stream of the part before
        PK("embd_in", cudaMemcpyAsync(c->x, c->embd_in, sizeof(float) * n * D, cudaMemcpyHostToDevice, st));
    } else {
        PK("embed", hx_k_embed(st, &c->tok_embd, c->d_tok, n, c->x, cfg->embd_scale ? sqrtf((float)D) : 1.0f));
        if (!c->lw.empty() && c->lw.back().r > 0) PK("lora embd", hx_k_lora_embd(st, &c->lw.back(), c->d_tok, n, c->x));
    }
    float scale = cfg->attn_scale > 0 ? cfg->attn_scale : 1.0f / sqrtf((float)hd);
    float rs = cfg->rope_scale > 0 ? cfg->rope_scale : 1.0f;
    // one token of one sequence without adapters: every layer in the persistent kernel
    const bool mega = c->mega && n == 1 && !multi && !dump && !c->skip && c->lw.empty() && !tpar;
    if (mega) {
        hx_mega_bufs mb = {c->x, c->q, c->k, c->v, c->att, c->gate, c->xq, c->xd, c->apart, c->acount};
        PK("layers (persistent)", hx_mega_launch(c->mega, &mb, st, slot, c->d_pos));
    }
    for (int l = 0; l < (mega ? 0 : cfg->n_layer); l++) {
        dlayer *L = &c->L[l];
        if (dump) { hx_status s = dump_rows(c, pos0, n, l, "input", c->x, e); if (s) return s; }
        const hx_dmat *qkv[3] = {&L->wq, &L->wk, &L->wv};
        if (n == 1 && mvq_ok(c, 1, 3, qkv)) {
            float *ys[3] = {c->q, c->k, c->v};
            const float *bs[3] = {L->bq, L->bk, L->bv};
            PK("qkv (q8 + norm)", mvq_runs(c, 3, qkv, c->x, L->attn_norm, eps, ys, bs, false, -1, xq_ready));
        } else if (n == 1 && hx_k_mv_fusable(qkv, 1) && hx_k_mv_fusable(qkv + 1, 1) && hx_k_mv_fusable(qkv + 2, 1)) {
            float *ys[3] = {c->q, c->k, c->v};
            const float *bs[3] = {L->bq, L->bk, L->bv};
            PK("qkv (norm fused)", mv_runs(st, 3, qkv, c->x, L->attn_norm, eps, ys, bs, dv));
        } else if (mmq_ok(n, qkv, 3)) {
            float *ys[3] = {c->q, c->k, c->v};
            const float *bs[3] = {L->bq, L->bk, L->bv};
            PK("qkv (mmq + norm)", mmq_runs(n, 3, qkv, c->x, L->attn_norm, ys, bs, -1));
        } else {
            PK("attn_norm", hx_k_rmsnorm(st, c->x, L->attn_norm, c->h, n, D, eps));
            PK("q", linear(&L->wq, c->h, n, c->q, L->bq, false));
            PK("k", linear(&L->wk, c->h, n, c->k, L->bk, false));
            PK("v", linear(&L->wv, c->h, n, c->v, L->bv, false));
        }
        xq_ready = false;
        const hx_lora_dmat *lm[3];
        if (lora_at(l, HX_LORA_Q, 3, lm)) {
            float *ys[3] = {c->q, c->k, c->v};
            PK("lora qkv", hx_k_lora(st, 3, lm, c->x, L->attn_norm, eps, n, ys, -1, c->lt, NULL, NULL, pre));
        }
        size_t slot_stride = (size_t)c->kv_rows[l] * nkvh * hd, slot_off = multi ? 0 : (size_t)slot * slot_stride;
        __half *kc = c->kc[l] + slot_off, *vc = c->vc[l] + slot_off;
        bool swa = cfg->layer_is_swa[l];
        float base = swa ? cfg->rope_base_swa : cfg->rope_base;
        int window = swa ? cfg->sliding_window : 0;
        const float *qn = cfg->qk_norm ? L->q_norm : NULL, *kn = cfg->qk_norm ? L->k_norm : NULL;
        bool neox = cfg->rope_style == HX_ROPE_NEOX;
        const hx_dmat *wo[1] = {&L->wo};
        const float *bo[1] = {L->bo};
        bool wo_q = n == 1 && mvq_ok(c, 2, 1, wo);
        bool att_q8 = false; // the decode attention wrote its output quantized for wo
        // many sequences, one token each, wo on mmq: rope and the KV stores inside the attention,
        // which also quantizes its output for wo when nothing else reads c->att (more tokens:
        // the separate kernels were faster, bench/RESULTS.md)
        const hx_lora_dmat *lo1[1];
        const bool tok_fuse = multi && c->tok_distinct && !c->no_fuse_attn && !dv->naive_attn &&
                              (hd == 64 || hd == 128 || hd == 256) && mmq_ok(n, wo, 1);
        // ... and wrote its output as mmq's activations (c->xqn, c->dsn)
        const bool att_mq = tok_fuse && !lora_at(l, HX_LORA_O, 1, lo1) && !dump && !cfg->post_norms;
        if (tok_fuse) {
            hx_attn_tok_args ta = {c->q, c->k, c->v, kc, vc, c->kv_rows[l], slot_stride, c->d_tpos, c->d_tslot, n, nh,
                                   nkvh, scale, cfg->attn_logit_softcap, window, base, rs, neox, qn, kn, eps,
                                   c->rope_tab[swa ? 1 : 0], c->att, att_mq ? c->xqn : NULL, c->dsn,
                                   hx_k_mmq_pad(n)};
            PK(att_mq ? "rope+attention+q8 (tokens)" : "rope+attention (tokens)", hx_k_attention_tok_rope(st, &ta, hd));
        } else if (multi) {
            PK("rope+store (tokens)", hx_k_rope_store_tok(st, c->q, c->k, c->v, kc, vc, c->kv_rows[l], slot_stride,
                                                          c->d_tpos, c->d_tslot, n, nh, nkvh, hd, base, rs, neox, qn, kn, eps));
            PK("attention (tokens)", hx_k_attention_tok(st, c->q, kc, vc, c->kv_rows[l], slot_stride, c->att, c->d_tpos,
                                                        c->d_tslot, n, nh, nkvh, hd, scale, cfg->attn_logit_softcap,
                                                        window, c->n_ctx, dv));
        } else if (n == 1 && !c->no_fuse_attn) {
            att_q8 = wo_q && hd % 32 == 0 && !c->skip;
            PK("attention (decode)", hx_k_attn_decode(st, c->q, c->k, c->v, kc, vc, c->kv_rows[l], c->att, c->d_pos, nh, nkvh, hd, scale,
                                cfg->attn_logit_softcap, window, c->n_ctx, base, rs, neox, qn, kn, eps,
                                c->rope_tab[swa ? 1 : 0], c->apart, c->acount, att_q8 ? c->xq : NULL, c->xd, dv));
        } else {
            PK("rope+store", hx_k_rope_store(st, c->q, c->k, c->v, kc, vc, c->kv_rows[l], c->d_pos, n, nh, nkvh, hd, base, rs, neox,
                               qn, kn, eps));
            PK("attention", hx_k_attention(st, c->q, kc, vc, c->kv_rows[l], c->att, c->d_pos, n, nh, nkvh, hd, scale,
                              cfg->attn_logit_softcap, window, c->n_ctx, dv));
        }
        const hx_dmat *gu[2] = {&L->gate, &L->up};
        int act = cfg->act == HX_ACT_SILU ? 0 : 1;
        // with deltas on gate or up the GLU waits for them (it runs in the LoRA kernel)
        const bool lgu = lora_at(l, HX_LORA_GATE, 2, lm);
        const bool gu_q8 = n == 1 && mvq_ok(c, 1, 2, gu) && (lgu || L->gate.type == L->up.type);
        float *pa = part(2 * l); // (tensor parallel: this rank's partial sum of wo)
        // one token, one-shot: the all-reduce also norms and quantizes gate/up's input. A single block
        // does it, which pays only for narrow residual streams (HX_TP_FUSE_MAX; bench/RESULTS.md)
        const bool tp_q8 = pa && n == 1 && gu_q8 && !lgu && !dump && !cfg->post_norms && D % 32 == 0 &&
                           D <= HX_TP_FUSE_MAX && !c->dv.tp_no_fuse;
        if (cfg->post_norms || dump) {
            float *wy = pa ? pa : c->o;
            float *ys[1] = {wy};
            if (wo_q) PK("wo (q8)", mvq_runs(c, 1, wo, c->att, NULL, eps, ys, bo, false, -1, att_q8));
            else PK("wo", linear(&L->wo, c->att, n, wy, L->bo, false));
            if (tpar) PK("all-reduce (attention)", hx_tp_sum(c->tpc, c->o, pa, (size_t)n * D, 2 * l, false, st));
            PK("lora wo", lora1(l, HX_LORA_O, c->att, NULL, n, c->o));
            if (cfg->post_norms) PK("post norm + add", hx_k_rmsnorm_add(st, c->o, L->post_attn, c->o, c->x, n, D, eps));
            else PK("residual add", hx_k_add(st, c->x, c->o, (size_t)n * D));
            if (dump) { hx_status s = dump_rows(c, pos0, n, l, "attn", c->o, e); if (s) return s; }
        } else {
            // x += Wo a; tensor parallel: x += the sum of the ranks' Wo a (one-shot: every rank's
            // partial into pa, then summed into x; NCCL: rank 0 adds into x, the others write
            // their term over x, and the all-reduce sums in place)
            float *wy = pa ? pa : c->x;
            bool acc = !pa && lead;
            float *ys[1] = {wy};
            if (wo_q) PK("wo (q8)", mvq_runs(c, 1, wo, c->att, NULL, eps, ys, bo, acc, -1, att_q8));
            else if (att_mq) PK("wo (mmq)", hx_k_mmq(st, 1, wo, c->xqn, c->dsn, n, ys, bo, acc, -1, dv));
            else PK("wo", linear(&L->wo, c->att, n, wy, L->bo, acc));
            if (tp_q8) PK("all-reduce (attention) + norm + q8", hx_tp_sum_q8(c->tpc, c->x, pa, D, 2 * l, L->ffn_norm, eps,
                                                                           c->xq, c->xd, st));
            else if (tpar) PK("all-reduce (attention)", hx_tp_sum(c->tpc, c->x, pa, (size_t)n * D, 2 * l, true, st));
        }
        bool gu_have = false; // c->xq holds gate/up's input (the wo delta's kernel made it)
        if (!(cfg->post_norms || dump)) PK("lora wo", lora_res(l, HX_LORA_O, c->att, gu_q8, L->ffn_norm, &gu_have));
        gu_have = gu_have || tp_q8;
        if (lgu && n == 1 && mvq_ok(c, 1, 2, gu)) {
            float *ys[2] = {c->gate, c->up};
            const float *bs[2] = {NULL, L->up_b};
            PK("gate/up (q8 + norm)", mvq_runs(c, 2, gu, c->x, L->ffn_norm, eps, ys, bs, false, -1, gu_have));
        } else if (lgu && n == 1 && hx_k_mv_fusable(gu, 1) && hx_k_mv_fusable(gu + 1, 1)) {
            float *ys[2] = {c->gate, c->up};
            const float *bs[2] = {NULL, L->up_b};
            PK("gate/up (norm fused)", mv_runs(st, 2, gu, c->x, L->ffn_norm, eps, ys, bs, dv));
        } else if (lgu) {
            PK("ffn_norm", hx_k_rmsnorm(st, c->x, L->ffn_norm, c->h, n, D, eps));
            PK("gate", linear(&L->gate, c->h, n, c->gate, NULL, false));
            PK("up", linear(&L->up, c->h, n, c->up, L->up_b, false));
        } else if (n == 1 && mvq_ok(c, 1, 2, gu) && L->gate.type == L->up.type) {
            float *ys[2] = {c->gate, c->up};
            const float *bs[2] = {NULL, L->up_b};
            PK("gate/up+glu (q8 + norm)", mvq_runs(c, 2, gu, c->x, L->ffn_norm, eps, ys, bs, false, act, gu_have));
        } else if (n == 1 && hx_k_mv_fusable(gu, 2)) {
            float *ys[2] = {c->gate, c->up};
            const float *bs[2] = {NULL, L->up_b};
            PK("gate/up+glu (norm fused)", hx_k_mv_fused(st, 2, gu, c->x, L->ffn_norm, eps, ys, bs, false, act, dv));
        } else if (mmq_ok(n, gu, 2)) {
            float *ys[2] = {c->gate, c->up};
            const float *bs[2] = {NULL, L->up_b};
            PK("gate/up+glu (mmq + norm)", mmq_runs(n, 2, gu, c->x, L->ffn_norm, ys, bs, act));
        } else {
            PK("ffn_norm", hx_k_rmsnorm(st, c->x, L->ffn_norm, c->h, n, D, eps));
            PK("gate", linear(&L->gate, c->h, n, c->gate, NULL, false));
            PK("up", linear(&L->up, c->h, n, c->up, L->up_b, false));
            PK("glu", hx_k_glu(st, c->gate, c->up, (size_t)n * ff, act));
        }
        const hx_dmat *dn[1] = {&L->down};
        const float *db[1] = {L->down_b};
        bool dn_q = n == 1 && mvq_ok(c, 2, 1, dn);
        bool dn_have = false; // c->xq holds down's input (the GLU's LoRA kernel made it)
        if (lgu) {
            float *ys[2] = {c->gate, c->up};
            dn_have = dn_q && !c->dv.lora_plain && ff % 32 == 0;
            PK("lora gate/up+glu", hx_k_lora(st, 2, lm, c->x, L->ffn_norm, eps, n, ys, act, c->lt,
                                             dn_have ? c->xq : NULL, c->xd, pre));
        }
        // the next matvec that quantizes x: the next layer's q/k/v, or the output head
        bool next_q8;
        const float *next_norm;
        if (l + 1 < cfg->n_layer) {
            const dlayer *N = &c->L[l + 1];
            const hx_dmat *nq[3] = {&N->wq, &N->wk, &N->wv};
            next_q8 = n == 1 && mvq_ok(c, 1, 3, nq);
            next_norm = N->attn_norm;
        } else {
            const hx_dmat *om[1] = {&c->output};
            next_q8 = n == 1 && out_rows == 1 && mvq_ok(c, 2, 1, om);
            next_norm = c->out_norm;
        }
        float *pf = part(2 * l + 1); // (tensor parallel: this rank's partial sum of down)
        const bool tpn_q8 = pf && n == 1 && next_q8 && !dump && !cfg->post_norms && !c->lw.size() && D % 32 == 0 &&
                            D <= HX_TP_FUSE_MAX && !c->dv.tp_no_fuse; // (as tp_q8: the next matvec's input)
        if (cfg->post_norms || dump) {
            float *dy = pf ? pf : c->o;
            float *ys[1] = {dy};
            if (dn_q) PK("down (q8)", mvq_runs(c, 1, dn, c->gate, NULL, eps, ys, db, false, -1, dn_have));
            else PK("down", linear(&L->down, c->gate, n, dy, L->down_b, false));
            if (tpar) PK("all-reduce (ffn)", hx_tp_sum(c->tpc, c->o, pf, (size_t)n * D, 2 * l + 1, false, st));
            PK("lora down", lora1(l, HX_LORA_DOWN, c->gate, NULL, n, c->o));
            if (cfg->post_norms) PK("post norm + add", hx_k_rmsnorm_add(st, c->o, L->post_ffn, c->o, c->x, n, D, eps));
            else PK("residual add", hx_k_add(st, c->x, c->o, (size_t)n * D));
            if (dump) { hx_status s = dump_rows(c, pos0, n, l, "ffn", c->o, e); if (s) return s; }
        } else {
            float *dy = pf ? pf : c->x; // (as wo above)
            bool acc = !pf && lead;
            float *ys[1] = {dy};
            if (dn_q) PK("down (q8)", mvq_runs(c, 1, dn, c->gate, NULL, eps, ys, db, acc, -1, dn_have));
            else PK("down", linear(&L->down, c->gate, n, dy, L->down_b, acc));
            if (tpn_q8) PK("all-reduce (ffn) + norm + q8", hx_tp_sum_q8(c->tpc, c->x, pf, D, 2 * l + 1, next_norm, eps,
                                                                     c->xq, c->xd, st));
            else if (tpar) PK("all-reduce (ffn)", hx_tp_sum(c->tpc, c->x, pf, (size_t)n * D, 2 * l + 1, true, st));
        }
        if (!(cfg->post_norms || dump)) {
            bool have = false;
            PK("lora down", lora_res(l, HX_LORA_DOWN, c->gate, next_q8, next_norm, &have));
            have = have || tpn_q8;
            if (l + 1 < cfg->n_layer) xq_ready = have;
            else out_have = have;
        }
    }
    if (out_rows == 0) return HX_OK;
    const float *xs = c->x + (size_t)(n - out_rows) * D;
    if (slot < 0) { // the rows that want outputs, gathered
        PK("gather", hx_k_gather_rows(st, c->x, c->d_gidx, out_rows, D, c->o));
        xs = c->o;
    }
    const hx_dmat *outm[1] = {&c->output};
    // the hidden states on their own: the logits below take the same kernels with or without them
    if (want_hidden) PK("output_norm (hidden)", hx_k_rmsnorm(st, xs, c->out_norm, c->h, out_rows, D, eps));
    // tensor parallel with the head cut by vocabulary: this rank's columns of the logits first
    const bool vsplit = tpar && c->tp.output.dim == HX_CUT_ROWS;
    // one row between one-shot all-reduces: straight into the one-shot gather's buffer
    float *gb = vsplit && out_rows == 1 && part(0) ? hx_tp_gather_buf(c->tpc, (size_t)c->vocab_n) : NULL;
    float *lg = gb ? gb : vsplit ? c->lpart : c->logits;
    // the norm is fused only for small vocabularies: every block recomputes it
    if (out_rows == 1 && !dump && mvq_ok(c, 2, 1, outm)) {
        float *ys[1] = {lg};
        PK("output (q8 + norm)", mvq_runs(c, 1, outm, xs, c->out_norm, eps, ys, NULL, false, -1, out_have));
    } else if (out_rows == 1 && !dump && c->output.rows < 16384 && hx_k_mv_fusable(outm, 1)) {
        float *ys[1] = {lg};
        PK("output (norm fused)", hx_k_mv_fused(st, 1, outm, xs, c->out_norm, eps, ys, NULL, false, -1, dv));
    } else {
        PK("output_norm", hx_k_rmsnorm(st, xs, c->out_norm, c->h, out_rows, D, eps));
        if (dump) { hx_status s = dump_rows(c, pos0 + n - out_rows, out_rows, -1, "final", c->h, e); if (s) return s; }
        PK("output", linear(&c->output, c->h, out_rows, lg, NULL, false));
    }
    PK("lora output", lora1(-1, 0, xs, c->out_norm, out_rows, lg));
    if (cfg->final_logit_softcap > 0)
        PK("softcap", hx_k_softcap(st, lg, (size_t)out_rows * c->vocab_n, cfg->final_logit_softcap));
    if (vsplit && out_rows == 1) { // one row: the ranks' pieces in rank order are the row
        PK("gather logits", hx_tp_gather(c->tpc, lg, c->logits, (size_t)c->vocab_n, st));
    } else if (vsplit) {
        PK("gather logits", hx_tp_gather(c->tpc, c->lpart, c->lgath, (size_t)out_rows * c->vocab_n, st));
        PK("interleave logits", hx_tp_interleave(c->lgath, c->logits, c->tp.n, out_rows, c->vocab_n, st));
    }
    return HX_OK;
}

static hx_status check_args(hx_cuda_ctx *c, int slot, const int32_t *tokens, int n, int pos, hx_error *e) {
    if (n <= 0) return hx_err(e, HX_ERR_ARG, "forward: empty batch");
    if (pos < 0 || pos > c->n_past[slot])
        return hx_err(e, HX_ERR_ARG, "forward: sequence %d: position %d but only %d tokens in the cache", slot, pos,
                      c->n_past[slot]);
    if ((int64_t)pos + n > c->n_ctx)
        return hx_err(e, HX_ERR_RANGE, "context overflow: sequence %d: %d + %d tokens exceed the context of %d (raise -c)",
                      slot, pos, n, c->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->cfg.n_vocab)
            return hx_err(e, HX_ERR_ARG, "forward: token %d at batch index %d outside the vocabulary (%d)", tokens[i], i,
                          c->cfg.n_vocab);
    return HX_OK;
}

// c->logits with room for `rows` rows (the decode graphs hold its address:
// they are dropped when it moves).
static hx_status ensure_logits(hx_cuda_ctx *c, int rows, hx_error *e) {
    if (rows <= c->logits_rows) return HX_OK;
    CK(cudaStreamSynchronize(c->st));
    for (float **p : {&c->logits, &c->lpart, &c->lgath}) {
        if (*p) cudaFree(*p);
        *p = NULL;
    }
    c->logits_rows = 0;
    CK(cudaMalloc((void **)&c->logits, sizeof(float) * c->cfg.n_vocab * rows));
    if (c->tp.output.dim == HX_CUT_ROWS) { // split output head: this rank's rows, and the gathered ones
        CK(cudaMalloc((void **)&c->lpart, sizeof(float) * c->vocab_n * rows));
        if (rows > 1) CK(cudaMalloc((void **)&c->lgath, sizeof(float) * c->cfg.n_vocab * rows));
    }
    c->logits_rows = rows;
    drop_graphs(c);
    return HX_OK;
}

// Enqueues one decode step of sequence slot `slot` (the forward pass of
// `token` at `pos` and the argmax into d_next): the slot's graph when enabled,
// captured on first use; nothing is waited for. Arguments checked.
static hx_status enqueue_decode(hx_cuda_ctx *c, int slot, int32_t token, int pos, hx_error *e) {
    c->ahead_pos = -1;
    c->deferred = false; // c->logits is this step's now
    c->n_past[slot] = pos;
    int *io = &c->h_io[6 + 2 * slot];
    io[0] = token;
    io[1] = pos;
    CK(cudaMemcpyAsync(c->d_tok, &io[0], sizeof(int), cudaMemcpyHostToDevice, c->st));
    CK(cudaMemcpyAsync(c->d_pos, &io[1], sizeof(int), cudaMemcpyHostToDevice, c->st));
    if (c->prof) c->pn = 0;
    if (c->prof) CK(prof_mark(c, "start"));
    if (c->use_graph && !(c->dump_dir && slot == 0) && !c->prof) {
        if (!c->graph[slot]) {
            cudaGraph_t g;
            CK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal));
            hx_status es = enqueue_forward(c, slot, 1, pos, 1, false, e);
            cudaError_t ke = es ? cudaSuccess : hx_k_argmax(c->st, c->logits, c->cfg.n_vocab, c->d_next, c->d_tok, c->d_pos,
                                                                     c->d_acnt);
            cudaError_t rc = cudaStreamEndCapture(c->st, &g);
            if (es) { if (rc == cudaSuccess) cudaGraphDestroy(g); return es; }
            if (ke != cudaSuccess) { if (rc == cudaSuccess) cudaGraphDestroy(g); return cfail(e, ke, __FILE__, __LINE__, "argmax"); }
            if (rc != cudaSuccess) return cfail(e, rc, __FILE__, __LINE__, "cudaStreamEndCapture");
            rc = cudaGraphInstantiate(&c->graph[slot], g, 0);
            cudaGraphDestroy(g);
            if (rc != cudaSuccess) { c->graph[slot] = NULL; return cfail(e, rc, __FILE__, __LINE__, "cudaGraphInstantiate"); }
        }
        CK(cudaGraphLaunch(c->graph[slot], c->st));
    } else {
        hx_status s = enqueue_forward(c, slot, 1, pos, 1, false, e);
        if (s) return s;
        CK(hx_k_argmax(c->st, c->logits, c->cfg.n_vocab, c->d_next, c->d_tok, c->d_pos, c->d_acnt));
        if (c->prof) CK(prof_mark(c, "argmax"));
    }
    return HX_OK;
}

// Enqueues n tokens of slot `slot` at pos.. (arguments checked; at most
// c->piece tokens when piece > 0): logits of the last out_rows tokens in
// c->logits, with want_hidden their hidden states in c->h. A lone token
// without hidden states takes the slot's decode step (the graph). Nothing is
// waited for; tokens may be reused once this returns (pageable host memory
// is staged by the copy).
static hx_status enqueue_batch(hx_cuda_ctx *c, int slot, const int32_t *tokens, int n, int pos, int out_rows,
                               bool want_hidden, hx_error *e) {
    hx_status s;
    c->ahead_pos = -1; // a lookahead step still on the stream runs first; its result is dropped
    if ((s = ensure_scratch(c, n, e))) return s;
    if ((s = ensure_logits(c, out_rows > 1 ? out_rows : 1, e))) return s;
    if (n == 1 && !want_hidden && !c->embd_in && !c->embd_out) {
        if ((s = enqueue_decode(c, slot, tokens[0], pos, e))) return s;
        c->n_past[slot] = pos + 1;
        return HX_OK;
    }
    c->n_past[slot] = pos;
    c->pn = 0; // (profiling: prefill kernels are marked but not counted)
    CK(cudaMemcpyAsync(c->d_tok, tokens, sizeof(int) * n, cudaMemcpyHostToDevice, c->st));
    c->h_io[6 + 2 * slot + 1] = pos;
    CK(cudaMemcpyAsync(c->d_pos, &c->h_io[6 + 2 * slot + 1], sizeof(int), cudaMemcpyHostToDevice, c->st));
    if ((s = enqueue_forward(c, slot, n, pos, out_rows, want_hidden, e))) return s;
    c->n_past[slot] = pos + n;
    return HX_OK;
}

static hx_status forward_batch(void *ctx, const int32_t *tokens, int n, int pos, float *logits,
                               bool all_logits, hx_error *e);

extern "C" hx_status hx_cuda_forward(hx_cuda_ctx *c, const int32_t *tokens, int n, int pos, float *logits,
                                     bool all_logits, hx_error *e) {
    hx_status s = check_args(c, 0, tokens, n, pos, e);
    if (s) return s;
    // a sliding-window ring holds window + ubatch rows: at most ubatch tokens at a time
    return hx_forward_pieces(forward_batch, c, c->piece, c->cfg.n_vocab, tokens, n, pos, logits, all_logits, e);
}

// One batch of sequence 0 (at most c->piece tokens when piece > 0); arguments checked.
static hx_status forward_batch(void *ctx, const int32_t *tokens, int n, int pos, float *logits,
                               bool all_logits, hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    int out_rows = all_logits ? n : 1;
    hx_status s = enqueue_batch(c, 0, tokens, n, pos, out_rows, false, e);
    if (s) return s;
    if (logits)
        CK(cudaMemcpyAsync(logits, c->logits, sizeof(float) * c->cfg.n_vocab * out_rows, cudaMemcpyDeviceToHost,
                           c->st));
    CK(cudaStreamSynchronize(c->st));
    return HX_OK;
}

static hx_status prof_collect(hx_cuda_ctx *c, hx_error *e) {
    if (!c->prof) return HX_OK;
    for (size_t i = 1; i < c->pn; i++) {
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, c->pev[i - 1], c->pev[i]));
        auto &v = c->ptab[c->plab[i]];
        v.first++;
        v.second += ms;
    }
    c->prof_tokens++;
    return HX_OK;
}

// The argmax key of a step into h_io slot `slot`, and the slot's event after it.
static hx_status copy_key(hx_cuda_ctx *c, int slot, hx_error *e) {
    CK(cudaMemcpyAsync(&c->h_io[2 + 2 * slot], c->d_next, sizeof(unsigned long long), cudaMemcpyDeviceToHost, c->st));
    CK(cudaEventRecord(c->kev[slot], c->st));
    return HX_OK;
}

// One greedy step of sequence `seq` (see hx_cuda_decode_greedy).
static hx_status decode_greedy(hx_cuda_ctx *c, int seq, int32_t token, int pos, int32_t *next, hx_error *e) {
    hx_status s;
    int slot;
    if (c->ahead_pos >= 0 && c->ahead_seq == seq && c->ahead_pos == pos && c->ahead_tok == token) {
        slot = c->ahead_slot; // already on the stream (launched by the previous call)
    } else {
        if ((s = check_args(c, seq, &token, 1, pos, e))) return s;
        if ((s = ensure_logits(c, 1, e))) return s;
        if ((s = enqueue_decode(c, seq, token, pos, e))) return s; // (drops any lookahead)
        slot = 0;
        if ((s = copy_key(c, slot, e))) return s;
    }
    c->ahead_pos = -1;
    c->n_past[seq] = pos + 1;
    // the step after this one: the graph again, its token and position written on the device by this step's
    // argmax, so the GPU does not wait for this call's return and the next call's copies
    if (c->ahead_on && c->graph[seq] && pos + 2 <= c->n_ctx) {
        CK(cudaGraphLaunch(c->graph[seq], c->st));
        if ((s = copy_key(c, slot ^ 1, e))) return s;
        c->ahead_pos = pos + 1;
        c->ahead_seq = seq;
        c->ahead_slot = slot ^ 1;
    }
    CK(cudaEventSynchronize(c->kev[slot]));
    if ((s = prof_collect(c, e))) return s;
    unsigned long long key;
    memcpy(&key, &c->h_io[2 + 2 * slot], sizeof key);
    *next = hx_argmax_key_index(key);
    c->ahead_tok = *next;
    return HX_OK;
}

extern "C" hx_status hx_cuda_decode_greedy(hx_cuda_ctx *c, int32_t token, int pos, int32_t *next, hx_error *e) {
    return decode_greedy(c, 0, token, pos, next, e);
}

extern "C" hx_status hx_cuda_finish(hx_cuda_ctx *c, hx_error *e) {
    CK(cudaStreamSynchronize(c->st));
    return HX_OK;
}

extern "C" bool hx_cuda_sample_supported(const hx_cuda_sample_params *p, int n_hist) {
    return n_hist <= 4096 && (p->temp <= 0 || (p->top_k > 0 && p->top_k <= 256));
}

// The sampling kernel on logits already on the device (c->logits); *next, or
// *on_gpu = false when the kernel leaves the case to the CPU.
static hx_status sample_on_device(hx_cuda_ctx *c, const hx_cuda_sample_params *p, const int32_t *hist, int n_hist,
                                  float u, int32_t *next, bool *on_gpu, hx_error *e) {
    int V = c->cfg.n_vocab;
    if (!c->swork) CK(cudaMalloc((void **)&c->swork, sizeof(float) * V));
    if (!c->sout) CK(cudaMalloc((void **)&c->sout, 2 * sizeof(int)));
    if (n_hist > c->shist_cap) {
        if (c->shist) cudaFree(c->shist);
        c->shist = NULL;
        c->shist_cap = 0;
        CK(cudaMalloc((void **)&c->shist, sizeof(int) * n_hist));
        c->shist_cap = n_hist;
    }
    hx_k_pdl_set(c->pdl);
    if (n_hist > 0) CK(cudaMemcpyAsync(c->shist, hist, sizeof(int) * n_hist, cudaMemcpyHostToDevice, c->st));
    CK(hx_k_sample(c->st, c->logits, c->swork, V, c->shist, n_hist, p->repeat_penalty, p->freq_penalty,
                   p->presence_penalty, p->top_k, p->top_p, p->min_p, p->temp, u, c->sout));
    int out[2];
    CK(cudaMemcpyAsync(out, c->sout, sizeof out, cudaMemcpyDeviceToHost, c->st));
    CK(cudaStreamSynchronize(c->st));
    *on_gpu = out[1] == 0;
    *next = out[0];
    return HX_OK;
}

extern "C" hx_status hx_cuda_decode_sample(hx_cuda_ctx *c, int32_t token, int pos, const hx_cuda_sample_params *p,
                                          const int32_t *hist, int n_hist, float u, int32_t *next, float *logits,
                                          bool *on_gpu, hx_error *e) {
    hx_status s = check_args(c, 0, &token, 1, pos, e);
    if (s) return s;
    if ((s = ensure_logits(c, 1, e))) return s;
    if ((s = enqueue_decode(c, 0, token, pos, e))) return s;
    if ((s = sample_on_device(c, p, hist, n_hist, u, next, on_gpu, e))) return s;
    if ((s = prof_collect(c, e))) return s;
    if (!*on_gpu) {
        CK(cudaMemcpyAsync(logits, c->logits, sizeof(float) * c->cfg.n_vocab, cudaMemcpyDeviceToHost, c->st));
        CK(cudaStreamSynchronize(c->st));
    }
    c->n_past[0] = pos + 1;
    return HX_OK;
}

extern "C" bool hx_cuda_type_supported(int type) { return hx_k_type_supported(type); }

// ---- sequences: the backend table of api/backend.h ----

// Bytes of one cache row (one position of one layer, K or V).
static size_t row_bytes(const hx_cuda_ctx *c) { return (size_t)c->cfg.n_head_kv * c->cfg.head_dim * sizeof(__half); }

// Positions a slot holding n positions keeps in layer l: the last min(n, rows) of them.
static int layer_first(const hx_cuda_ctx *c, int l, int n) { return n > c->kv_rows[l] ? n - c->kv_rows[l] : 0; }

// For positions first..first+count-1 of layer l (count <= kv_rows[l]): calls
// f(row, count) for each run of consecutive cache rows (two runs when the
// positions wrap around a ring), in position order.
template <typename F> static hx_status for_rows(const hx_cuda_ctx *c, int l, int first, int count, F f) {
    int rows = c->kv_rows[l], r0 = first % rows;
    int a = count < rows - r0 ? count : rows - r0;
    if (a > 0) { hx_status s = f(r0, a); if (s) return s; }
    if (count > a) { hx_status s = f(0, count - a); if (s) return s; }
    return HX_OK;
}

// Whether slot seq (holding n_past positions) still has what its first n
// positions need: n == n_past, or a rewind to n is possible.
static bool prefix_held(const hx_cuda_ctx *c, int seq, int n) {
    int np = c->n_past[seq];
    return n == np || n == 0 || (n < np && hx_kv_rewind(&c->cfg, c->kv_rows.data(), c->n_ctx, np, n) == n);
}

static hx_status seq_check(const hx_cuda_ctx *c, int seq, hx_error *e) {
    if (seq < 0 || seq >= c->n_seq)
        return hx_err(e, HX_ERR_ARG, "cuda: sequence %d outside 0..%d", seq, c->n_seq - 1);
    return HX_OK;
}

static hx_status be_ctx_new(const hx_model *m, const hx_backend_params *p, void **out, hx_error *e) {
    *out = NULL;
    if (p->kv_f32)
        return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: the GPU keeps an f16 KV cache (an f32 cache is CPU only)");
    hx_cuda_opts o = {};
    o.device = p->gpu_index;
    o.n_ctx = p->n_ctx_seq;
    o.n_ubatch = p->n_ubatch;
    o.n_seq = p->n_seq;
    o.dump_dir = p->dev.dump_dir;
    o.dump_positions = p->dev.dump_positions;
    o.n_dump_positions = p->dev.n_dump_positions;
    o.dev = (const hx_cuda_dev_opts *)p->dev.cuda;
    hx_cuda_ctx *c = NULL;
    hx_status s = hx_cuda_ctx_new(m, &o, &c, e);
    if (s == HX_OK) *out = c;
    return s;
}

static void be_ctx_free(void *ctx) { hx_cuda_ctx_free((hx_cuda_ctx *)ctx); }

// Copies rows [first, first + count) of a device array of `row` floats to
// host rows out[first..] (runs of consecutive out indices in one copy).
static hx_status copy_out_rows(hx_cuda_ctx *c, const float *dev, size_t row, const int32_t *out_idx, int count,
                               float *host, hx_error *e) {
    if (c->mute) return HX_OK; // a follower rank: rank 0 hands out the (identical) rows
    for (int k = 0; k < count;) {
        if (out_idx[k] < 0) { k++; continue; }
        int j = k + 1;
        while (j < count && out_idx[j] == out_idx[k] + (j - k)) j++;
        CK(cudaMemcpyAsync(host + (size_t)out_idx[k] * row, dev + (size_t)k * row, sizeof(float) * row * (j - k),
                           cudaMemcpyDeviceToHost, c->st));
        k = j;
    }
    return HX_OK;
}

// A checked ubatch of several sequences as one forward (enqueue_forward with
// slot -1): logits / hidden states of the tokens with out[i] >= 0 only.
static hx_status forward_multi(hx_cuda_ctx *c, const hx_ubatch *ub, float *logits, float *hidden, hx_error *e) {
    int n = ub->n;
    std::vector<int> host(3 * (size_t)n); // positions, slots, output tokens
    std::vector<int32_t> orow;            // output row of each gathered token
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        host[i] = ub->pos[i];
        host[n + i] = ub->seq[i];
        if (ub->out && ub->out[i] >= 0 && (logits || hidden)) {
            host[2 * n + n_out++] = i;
            orow.push_back(ub->out[i]);
        }
    }
    hx_status s;
    c->ahead_pos = -1; // a lookahead step still on the stream runs first; its result is dropped
    if ((s = ensure_scratch(c, n, e))) return s;
    if ((s = ensure_logits(c, n_out > 1 ? n_out : 1, e))) return s;
    // the first position of each sequence present sets its length (a lower one drops the rest)
    for (int i = n - 1; i >= 0; i--) c->n_past[ub->seq[i]] = ub->pos[i];
    c->pn = 0; // (profiling: batch kernels are marked; decode steps of many sequences are counted)
    CK(cudaMemcpyAsync(c->d_tok, ub->token, sizeof(int) * n, cudaMemcpyHostToDevice, c->st));
    CK(cudaMemcpyAsync(c->d_tpos, host.data(), sizeof(int) * n, cudaMemcpyHostToDevice, c->st));
    CK(cudaMemcpyAsync(c->d_tslot, host.data() + n, sizeof(int) * n, cudaMemcpyHostToDevice, c->st));
    if (n_out > 0) CK(cudaMemcpyAsync(c->d_gidx, host.data() + 2 * n, sizeof(int) * n_out, cudaMemcpyHostToDevice, c->st));
    const bool want_hidden = hidden != NULL && n_out > 0;
    c->tok_distinct = true; // no sequence twice: the attention of tokens may rope and store itself
    {
        std::vector<char> seen(c->n_seq, 0);
        for (int i = 0; i < n && c->tok_distinct; i++) c->tok_distinct = !seen[ub->seq[i]]++;
    }
    const long long key = (long long)n | (long long)n_out << 20 | (long long)want_hidden << 40 |
                          (long long)c->tok_distinct << 41;
    hx_cuda_ctx::mgraph *g = NULL;
    if (c->use_graph && !c->prof && !c->embd_in && !c->embd_out) {
        auto it = c->mgraphs.find(key);
        if (it != c->mgraphs.end()) g = &it->second;
        else if (c->mgraphs.size() < 64) g = &(c->mgraphs[key] = {0, NULL});
    }
    if (g && !g->exec && g->uses > 0) {
        cudaGraph_t gr;
        CK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal));
        hx_status es = enqueue_forward(c, -1, n, 0, n_out, want_hidden, e);
        cudaError_t rc = cudaStreamEndCapture(c->st, &gr);
        if (es) { if (rc == cudaSuccess) cudaGraphDestroy(gr); return es; }
        if (rc != cudaSuccess) return cfail(e, rc, __FILE__, __LINE__, "cudaStreamEndCapture");
        rc = cudaGraphInstantiate(&g->exec, gr, 0);
        cudaGraphDestroy(gr);
        if (rc != cudaSuccess) { g->exec = NULL; return cfail(e, rc, __FILE__, __LINE__, "cudaGraphInstantiate"); }
    }
    if (g && g->exec) {
        CK(cudaGraphLaunch(g->exec, c->st));
    } else {
        // an eager run may grow the cuBLAS scratch: graphs holding the old buffers go
        const __half *wh = c->gs.wh, *xh = c->gs.xh;
        if ((s = enqueue_forward(c, -1, n, 0, n_out, want_hidden, e))) return s;
        if (c->gs.wh != wh || c->gs.xh != xh) {
            CK(cudaStreamSynchronize(c->st));
            drop_graphs(c);
            g = NULL;
            if (c->use_graph && !c->prof) g = &(c->mgraphs[key] = {0, NULL});
        }
    }
    if (g) g->uses++;
    for (int i = 0; i < n; i++)
        if (ub->pos[i] + 1 > c->n_past[ub->seq[i]]) c->n_past[ub->seq[i]] = ub->pos[i] + 1;
    const size_t V = (size_t)c->cfg.n_vocab, D = (size_t)c->cfg.n_embd;
    if (logits && n_out > 0 && ub->defer_logits) {
        c->dev_row.assign(ub->n_out, -1);
        for (int k = 0; k < n_out; k++) c->dev_row[orow[k]] = k;
        c->deferred = true;
    } else if (logits && n_out > 0 && (s = copy_out_rows(c, c->logits, V, orow.data(), n_out, logits, e))) {
        return s;
    }
    if (hidden && n_out > 0 && (s = copy_out_rows(c, c->h, D, orow.data(), n_out, hidden, e))) return s;
    if (ub->embd_out) CK(cudaMemcpyAsync(ub->embd_out, c->x, sizeof(float) * n * D, cudaMemcpyDeviceToHost, c->st));
    CK(cudaStreamSynchronize(c->st));
    // profiling: decode steps of many sequences (one token each) are counted, per step
    if (c->prof && n_out == n && n <= c->n_seq) return prof_collect(c, e);
    return HX_OK;
}

// One forward over a ubatch: a single sequence as one batch through its
// slot's cache (a lone token takes the slot's decode graph), several as one
// pass over all tokens (forward_multi). The whole ubatch is checked before
// anything runs, so a bad ubatch leaves every cache as it was.
static hx_status forward_ub(hx_cuda_ctx *c, const hx_ubatch *ub, float *logits, float *hidden, hx_error *e) {
    if (!ub || ub->n <= 0) return hx_err(e, HX_ERR_ARG, "cuda: forward: empty batch");
    if (!ub->embd_in && !c->tok_embd.d)
        return hx_err(e, HX_ERR_ARG, "cuda: forward: this part of a layer split has no token embedding (embd_in required)");
    if (!ub->embd_out && !c->output.d)
        return hx_err(e, HX_ERR_ARG, "cuda: forward: this part of a layer split has no output head (embd_out required)");
    if (c->piece > 0 && ub->n > c->piece)
        return hx_err(e, HX_ERR_ARG, "cuda: forward: %d tokens in one batch, the sliding-window caches hold %d", ub->n,
                      c->piece);
    struct sub { int seq; std::vector<int32_t> tok, out; int pos, first_out; };
    std::vector<sub> subs;
    std::vector<int> at(c->n_seq, -1); // sequence -> index in subs
    for (int i = 0; i < ub->n; i++) {
        int s = ub->seq[i];
        hx_status st = seq_check(c, s, e);
        if (st) return st;
        if (at[s] < 0) {
            at[s] = (int)subs.size();
            subs.push_back({s, {}, {}, ub->pos[i], -1});
        }
        sub &b = subs[at[s]];
        if (ub->pos[i] != b.pos + (int)b.tok.size())
            return hx_err(e, HX_ERR_ARG, "cuda: forward: sequence %d: batch token %d at position %d, expected %d", s, i,
                          ub->pos[i], b.pos + (int)b.tok.size());
        int32_t o = ub->out ? ub->out[i] : -1;
        if (o >= 0 && (o >= ub->n_out || (!logits && !hidden)))
            return hx_err(e, HX_ERR_ARG, "cuda: forward: batch token %d: output row %d outside 0..%d", i, o, ub->n_out - 1);
        if (o >= 0 && b.first_out < 0) b.first_out = (int)b.tok.size();
        b.tok.push_back(ub->token[i]);
        b.out.push_back(o);
    }
    for (auto &b : subs) {
        hx_status st = check_args(c, b.seq, b.tok.data(), (int)b.tok.size(), b.pos, e);
        if (st) return st;
    }
    const size_t V = (size_t)c->cfg.n_vocab, D = (size_t)c->cfg.n_embd;
    c->deferred = false;
    if (subs.size() > 1) return forward_multi(c, ub, logits, hidden, e);
    for (auto &b : subs) {
        int n = (int)b.tok.size();
        int out_rows = ub->embd_out ? 0 : b.first_out < 0 ? 1 : n - b.first_out;
        bool want_hidden = hidden && b.first_out >= 0 && !ub->embd_out;
        hx_status st = enqueue_batch(c, b.seq, b.tok.data(), n, b.pos, out_rows, want_hidden, e);
        if (st) return st;
        if (ub->embd_out) { // (one sub-batch: its rows are the ubatch's, in order)
            CK(cudaMemcpyAsync(ub->embd_out, c->x, sizeof(float) * n * D, cudaMemcpyDeviceToHost, c->st));
            continue;
        }
        if (b.first_out < 0) continue;
        const int32_t *oi = b.out.data() + b.first_out;
        if (logits && ub->defer_logits) { // (one sub-batch: a single sequence)
            c->dev_row.assign(ub->n_out, -1);
            for (int j = 0; j < out_rows; j++)
                if (oi[j] >= 0) c->dev_row[oi[j]] = j;
            c->deferred = true;
        } else if (logits && (st = copy_out_rows(c, c->logits, V, oi, out_rows, logits, e))) {
            return st;
        }
        if (want_hidden && (st = copy_out_rows(c, c->h, D, oi, out_rows, hidden, e))) return st;
        // the next sub-batch reuses c->logits and c->h
        CK(cudaStreamSynchronize(c->st));
    }
    CK(cudaStreamSynchronize(c->st));
    return HX_OK;
}

static hx_status be_forward(void *ctx, const hx_ubatch *ub, float *logits, float *hidden, hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    c->embd_in = ub ? ub->embd_in : NULL;
    c->embd_out = ub && ub->embd_out;
    hx_status s = forward_ub(c, ub, logits, hidden, e);
    c->embd_in = NULL;
    c->embd_out = false;
    return s;
}

extern "C" hx_status hx_cuda_select(int index, hx_error *e) {
    CK(cudaSetDevice(index));
    return HX_OK;
}

static int be_seq_keep(void *ctx, int seq, int n) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    if (seq < 0 || seq >= c->n_seq) return 0;
    return seq_keep(c, seq, n);
}

static hx_status be_seq_copy(void *ctx, int src, int dst, int n, hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    hx_status s;
    if ((s = seq_check(c, src, e)) || (s = seq_check(c, dst, e))) return s;
    if (n < 0 || n > c->n_past[src])
        return hx_err(e, HX_ERR_ARG, "cuda: seq_copy: %d positions of sequence %d, which holds %d", n, src, c->n_past[src]);
    if (!prefix_held(c, src, n))
        return hx_err(e, HX_ERR_RANGE, "cuda: seq_copy: the sliding-window cache of sequence %d no longer holds the "
                      "positions before %d", src, n);
    c->ahead_pos = -1;
    if (src != dst) {
        size_t rb = row_bytes(c);
        for (int l = 0; l < c->cfg.n_layer; l++) {
            int first = layer_first(c, l, n);
            size_t so = (size_t)src * c->kv_rows[l] * rb, dof = (size_t)dst * c->kv_rows[l] * rb;
            s = for_rows(c, l, first, n - first, [&](int r, int k) -> hx_status {
                for (__half *base : {c->kc[l], c->vc[l]}) {
                    uint8_t *b = (uint8_t *)base;
                    CK(cudaMemcpyAsync(b + dof + r * rb, b + so + r * rb, k * rb, cudaMemcpyDeviceToDevice, c->st));
                }
                return HX_OK;
            });
            if (s) return s;
        }
    }
    c->n_past[dst] = n;
    return HX_OK;
}

// The state of n positions: for each layer, the K rows then the V rows of
// positions max(0, n - kv_rows[l]) .. n-1 in position order, f16
// (n_head_kv * head_dim per row).
static size_t be_seq_state_size(void *ctx, int n) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    if (n <= 0) return 0;
    size_t total = 0;
    for (int l = 0; l < c->cfg.n_layer; l++) total += 2 * (size_t)(n - layer_first(c, l, n)) * row_bytes(c);
    return total;
}

// Moves the state of slot seq's first n positions between the device and buf (to_host: read).
static hx_status state_io(hx_cuda_ctx *c, int seq, int n, uint8_t *buf, bool to_host, hx_error *e) {
    size_t rb = row_bytes(c), off = 0;
    for (int l = 0; l < c->cfg.n_layer; l++) {
        int first = layer_first(c, l, n);
        size_t so = (size_t)seq * c->kv_rows[l] * rb;
        for (__half *base : {c->kc[l], c->vc[l]}) {
            uint8_t *b = (uint8_t *)base + so;
            hx_status s = for_rows(c, l, first, n - first, [&](int r, int k) -> hx_status {
                if (to_host) CK(cudaMemcpyAsync(buf + off, b + r * rb, k * rb, cudaMemcpyDeviceToHost, c->st));
                else CK(cudaMemcpyAsync(b + r * rb, buf + off, k * rb, cudaMemcpyHostToDevice, c->st));
                off += k * rb;
                return HX_OK;
            });
            if (s) return s;
        }
    }
    CK(cudaStreamSynchronize(c->st));
    return HX_OK;
}

static hx_status be_seq_read(void *ctx, int seq, int n, void *buf, hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    hx_status s = seq_check(c, seq, e);
    if (s) return s;
    if (n < 0 || n > c->n_past[seq])
        return hx_err(e, HX_ERR_ARG, "cuda: seq_read: %d positions of sequence %d, which holds %d", n, seq, c->n_past[seq]);
    if (!prefix_held(c, seq, n))
        return hx_err(e, HX_ERR_RANGE, "cuda: seq_read: the sliding-window cache of sequence %d no longer holds the "
                      "positions before %d", seq, n);
    return state_io(c, seq, n, (uint8_t *)buf, true, e);
}

static hx_status be_seq_write(void *ctx, int seq, int n, const void *buf, hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    hx_status s = seq_check(c, seq, e);
    if (s) return s;
    if (n < 0 || n > c->n_ctx)
        return hx_err(e, HX_ERR_RANGE, "cuda: seq_write: %d positions, a sequence holds %d", n, c->n_ctx);
    c->ahead_pos = -1;
    c->n_past[seq] = 0;
    if ((s = state_io(c, seq, n, (uint8_t *)buf, false, e))) return s;
    c->n_past[seq] = n;
    return HX_OK;
}

static size_t be_kv_bytes(void *ctx) { return ((hx_cuda_ctx *)ctx)->kv_bytes; }

static hx_status be_decode_greedy(void *ctx, int seq, int32_t token, int pos, int32_t *next, hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    hx_status s = seq_check(c, seq, e);
    return s ? s : decode_greedy(c, seq, token, pos, next, e);
}

// The sampling chain on the device for any slot (hx_cuda_decode_sample is slot 0's).
static hx_status be_decode_sample(void *ctx, int seq, int32_t token, int pos, const hx_backend_sample *bs,
                                  int32_t *next, float *logits, bool *picked, hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    hx_status s = seq_check(c, seq, e);
    if (s) return s;
    hx_cuda_sample_params p = {bs->temp, bs->top_k, bs->top_p, bs->min_p, bs->repeat_penalty, bs->freq_penalty,
                               bs->presence_penalty};
    *picked = false;
    if ((s = check_args(c, seq, &token, 1, pos, e))) return s;
    if ((s = ensure_logits(c, 1, e))) return s;
    if ((s = enqueue_decode(c, seq, token, pos, e))) return s;
    if (hx_cuda_sample_supported(&p, bs->n_hist)) {
        if ((s = sample_on_device(c, &p, bs->hist, bs->n_hist, bs->u, next, picked, e))) return s;
    }
    if ((s = prof_collect(c, e))) return s;
    if (!*picked && !c->mute) {
        CK(cudaMemcpyAsync(logits, c->logits, sizeof(float) * c->cfg.n_vocab, cudaMemcpyDeviceToHost, c->st));
        CK(cudaStreamSynchronize(c->st));
    }
    return HX_OK;
}

// ---- LoRA ----

// The adapter list a context applies (contract: hx_cpu_set_adapters in
// api/backend.h). A new list is uploaded (lora.cuh layouts; the graphs are
// dropped and captured again on their next use, with the LoRA launches in
// them); the same list with other scales only rewrites s in place.
extern "C" hx_status hx_cuda_set_adapters(void *ctx, struct hx_adapter *const *adapters, const float *scales, int n,
                                          hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    const hx_model_config *cfg = &c->cfg;
    CK(cudaStreamSynchronize(c->st)); // a lookahead step may still read the buffers
    c->ahead_pos = -1;
    bool same = n > 0 && (size_t)n == c->lad.size();
    for (int k = 0; same && k < n; k++) same = c->lad[k] == adapters[k];
    auto fill_s = [&]() {
        for (auto &sg : c->lsegs)
            for (int q = 0; q < sg.r; q++) c->ls_host[sg.s_off + q] = scales[sg.adapter] * sg.f;
    };
    if (same) {
        fill_s();
        CK(cudaMemcpy(c->ls_dev, c->ls_host.data(), sizeof(float) * c->ls_host.size(), cudaMemcpyHostToDevice));
        return HX_OK;
    }
    // the old set stays in place until the new one is on the device
    auto drop_old = [&]() {
        drop_graphs(c);
        if (c->lbuf) cudaFree(c->lbuf);
        if (c->lt) cudaFree(c->lt);
        c->lbuf = NULL; c->lt = NULL; c->lrt = 0; c->ls_dev = NULL;
        c->lw.clear(); c->lsegs.clear(); c->ls_host.clear(); c->lad.clear();
    };
    if (n == 0) { drop_old(); return HX_OK; }
    {
        cudaError_t prc = hx_k_lora_prepare();
        if (prc != cudaSuccess) return cfail(e, prc, __FILE__, __LINE__, "hx_k_lora_prepare");
    }
    const int NL = cfg->n_layer, n_idx = NL * HX_LORA_PER_LAYER + 2, i_out = n_idx - 2, i_embd = n_idx - 1;
    auto w_of = [&](const struct hx_adapter *ad, int idx) -> const hx_lora_w * {
        return idx == i_out ? &ad->output : idx == i_embd ? &ad->tok_embd : &ad->w[idx];
    };
    // sizes: the f16 A and B of every matrix, then its s (f32)
    std::vector<hx_lora_dmat> lw((size_t)n_idx);
    std::vector<size_t> a_off((size_t)n_idx), b_off((size_t)n_idx), s_off((size_t)n_idx);
    size_t nh = 0, nf = 0;
    for (int idx = 0; idx < n_idx; idx++) {
        hx_lora_dmat &M = lw[idx];
        M = {};
        for (int k = 0; k < n; k++) {
            const hx_lora_w *w = w_of(adapters[k], idx);
            if (!w->rank) continue;
            if (idx != i_embd && w->n_in % 2)
                return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: adapter %s: a matrix with rows of %lld (odd) elements",
                              adapters[k]->path, (long long)w->n_in);
            M.r += w->rank;
            M.n_in = (int)w->n_in;
            M.n_out = (int)w->n_out;
        }
        if (!M.r) continue;
        if (M.r > 3072 / 2)
            return hx_err(e, HX_ERR_UNSUPPORTED, "cuda: the adapters set have a rank of %d on one matrix (at most %d)", M.r,
                          3072 / 2);
        a_off[idx] = nh; nh += (size_t)M.r * M.n_in;
        b_off[idx] = nh; nh += (size_t)M.n_out * M.r;
        nh = (nh + 63) & ~(size_t)63;
        s_off[idx] = nf; nf += (size_t)M.r;
    }
    std::vector<__half> hh(nh);
    std::vector<lseg_t> segs;
    std::vector<float> sh(nf, 0.0f);
    for (int idx = 0; idx < n_idx; idx++) {
        const int R = lw[idx].r;
        if (!R) continue;
        int ko = 0;
        for (int k = 0; k < n; k++) {
            const hx_lora_w *w = w_of(adapters[k], idx);
            const int rk = w->rank;
            if (!rk) continue;
            size_t na = (size_t)rk * w->n_in, nb = (size_t)w->n_out * rk;
            float ma = 0, mb = 0;
            for (size_t i = 0; i < na; i++) ma = fmaxf(ma, fabsf(w->a[i]));
            for (size_t i = 0; i < nb; i++) mb = fmaxf(mb, fabsf(w->b[i]));
            if (!(ma > 0) || !isfinite(ma)) ma = 1;
            if (!(mb > 0) || !isfinite(mb)) mb = 1;
            __half *A = hh.data() + a_off[idx], *B = hh.data() + b_off[idx];
            if (idx == i_embd) { // A (n_vocab, rk) -> columns ko.. of (n_vocab, R)
                for (int64_t v = 0; v < w->n_in; v++)
                    for (int q = 0; q < rk; q++) A[(size_t)v * R + ko + q] = __float2half(w->a[(size_t)v * rk + q] / ma);
            } else { // A (rk, n_in) -> rows ko..
                for (size_t i = 0; i < na; i++) A[(size_t)ko * w->n_in + i] = __float2half(w->a[i] / ma);
            }
            for (int64_t o = 0; o < w->n_out; o++)
                for (int q = 0; q < rk; q++) B[(size_t)o * R + ko + q] = __float2half(w->b[(size_t)o * rk + q] / mb);
            float f = hx_lora_scale(adapters[k], w, 1.0f) * ma * mb;
            if (idx == i_embd && cfg->embd_scale) f *= sqrtf((float)cfg->n_embd); // the delta is scaled with the row
            segs.push_back({s_off[idx] + ko, rk, k, f});
            ko += rk;
        }
    }
    for (auto &sg : segs)
        for (int q = 0; q < sg.r; q++) sh[sg.s_off + q] = scales[sg.adapter] * sg.f;
    size_t hbytes = (sizeof(__half) * nh + 255) & ~(size_t)255;
    uint8_t *buf = NULL;
    float *lt = NULL;
    cudaError_t rc = cudaMalloc((void **)&buf, hbytes + sizeof(float) * nf);
    if (rc != cudaSuccess)
        return hx_err(e, HX_ERR_DEVICE, "cuda: no room on the GPU for the adapters (%.1f MiB): %s",
                      (hbytes + 4.0 * nf) / 1048576.0, cudaGetErrorString(rc));
    float *sdev = (float *)(buf + hbytes);
    for (int idx = 0; idx < n_idx; idx++) {
        if (!lw[idx].r) continue;
        lw[idx].a = (const __half *)buf + a_off[idx];
        lw[idx].b = (const __half *)buf + b_off[idx];
        lw[idx].s = sdev + s_off[idx];
    }
    rc = cudaMemcpy(buf, hh.data(), sizeof(__half) * nh, cudaMemcpyHostToDevice);
    if (rc == cudaSuccess) rc = cudaMemcpy(sdev, sh.data(), sizeof(float) * nf, cudaMemcpyHostToDevice);
    // t of the two-phase launches: the widest group (q + k + v, gate + up, one matrix)
    int lrt = 0;
    for (int l = 0; l < NL; l++) {
        const hx_lora_dmat *L = &lw[(size_t)l * HX_LORA_PER_LAYER];
        int g[4] = {L[HX_LORA_Q].r + L[HX_LORA_K].r + L[HX_LORA_V].r, L[HX_LORA_O].r,
                    L[HX_LORA_GATE].r + L[HX_LORA_UP].r, L[HX_LORA_DOWN].r};
        for (int v : g) lrt = v > lrt ? v : lrt;
    }
    if (lw[i_out].r > lrt) lrt = lw[i_out].r;
    if (rc == cudaSuccess && lrt > 0) rc = cudaMalloc((void **)&lt, sizeof(float) * (size_t)lrt * c->cap);
    if (rc != cudaSuccess) {
        hx_status st = cfail(e, rc, __FILE__, __LINE__, "lora upload");
        cudaFree(buf);
        if (lt) cudaFree(lt);
        return st;
    }
    drop_old();
    c->lbuf = buf;
    c->lt = lt;
    c->ls_dev = sdev;
    c->lrt = lrt;
    c->lw = std::move(lw);
    c->lsegs = std::move(segs);
    c->ls_host = std::move(sh);
    c->lad.assign(adapters, adapters + n);
    return HX_OK;
}

// Page-locked host memory for the logits rows: the device-to-host copy then
// runs by DMA at full speed instead of through a staging buffer.
static void *be_host_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    void *p = NULL;
    return cudaMallocHost(&p, bytes) == cudaSuccess ? p : NULL;
}
static void be_host_free(void *ctx, void *p) {
    (void)ctx;
    if (p) cudaFreeHost(p);
}

static hx_status be_finish(void *ctx, hx_error *e) { return hx_cuda_finish((hx_cuda_ctx *)ctx, e); }

// Output row `row` of the last forward (defer_logits) to the host.
static hx_status be_logits_get(void *ctx, int row, float *host, hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    if (!c->deferred || row < 0 || row >= (int)c->dev_row.size() || c->dev_row[row] < 0)
        return hx_err(e, HX_ERR_ARG, "cuda: logits row %d is not on the device", row);
    const size_t V = (size_t)c->cfg.n_vocab;
    CK(cudaMemcpyAsync(host, c->logits + (size_t)c->dev_row[row] * V, sizeof(float) * V, cudaMemcpyDeviceToHost,
                       c->st));
    CK(cudaStreamSynchronize(c->st));
    return HX_OK;
}

// Where output rows rows[0..m) of the last forward (defer_logits) lie on the device, m <= HX_ROWS_MAX.
static hx_status dev_rows(const hx_cuda_ctx *c, const int *rows, int m, hx_rows_arg *ra, hx_error *e) {
    for (int j = 0; j < m; j++) {
        int r = rows[j];
        if (!c->deferred || r < 0 || r >= (int)c->dev_row.size() || c->dev_row[r] < 0)
            return hx_err(e, HX_ERR_ARG, "cuda: logits row %d is not on the device", r);
        ra->r[j] = c->dev_row[r];
    }
    return HX_OK;
}

// ids[j] = argmax of output row rows[j] of the last forward (defer_logits), picked on the device.
static hx_status be_logits_argmax(void *ctx, int n, const int *rows, int32_t *ids, hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    for (int j0 = 0; j0 < n; j0 += HX_ROWS_MAX) {
        int m = n - j0 < HX_ROWS_MAX ? n - j0 : HX_ROWS_MAX;
        hx_rows_arg ra;
        hx_status s = dev_rows(c, rows + j0, m, &ra, e);
        if (s) return s;
        CK(hx_k_argmax_rows(c->st, c->logits, c->cfg.n_vocab, &ra, m, c->d_amax));
        CK(cudaMemcpyAsync(c->h_amax, c->d_amax, sizeof(int) * m, cudaMemcpyDeviceToHost, c->st));
        CK(cudaStreamSynchronize(c->st));
        for (int j = 0; j < m; j++) ids[j0 + j] = c->h_amax[j];
    }
    return HX_OK;
}

// out[j * k + q] = log-softmax of output row rows[j] of the last forward
// (defer_logits) at ids[j * k + q], computed on the device, HX_ROWS_MAX rows a launch.
static hx_status be_logits_logprob(void *ctx, int n, const int *rows, int k, const int32_t *ids, float *out,
                                   hx_error *e) {
    hx_cuda_ctx *c = (hx_cuda_ctx *)ctx;
    if (n <= 0 || k <= 0) return HX_OK;
    size_t need = (size_t)(n < HX_ROWS_MAX ? n : HX_ROWS_MAX) * (size_t)k;
    if (need > c->lp_cap) {
        CK(cudaStreamSynchronize(c->st));
        if (c->d_lpi) cudaFree(c->d_lpi);
        c->d_lpi = NULL;
        c->lp_cap = 0;
        CK(cudaMalloc((void **)&c->d_lpi, need * (sizeof(int) + sizeof(float))));
        c->lp_cap = need;
    }
    float *d_out = (float *)(c->d_lpi + c->lp_cap);
    for (int j0 = 0; j0 < n; j0 += HX_ROWS_MAX) {
        int m = n - j0 < HX_ROWS_MAX ? n - j0 : HX_ROWS_MAX;
        hx_rows_arg ra;
        hx_status s = dev_rows(c, rows + j0, m, &ra, e);
        if (s) return s;
        const size_t cnt = (size_t)m * (size_t)k;
        CK(cudaMemcpyAsync(c->d_lpi, ids + (size_t)j0 * k, sizeof(int) * cnt, cudaMemcpyHostToDevice, c->st));
        CK(hx_k_logprob_rows(c->st, c->logits, c->cfg.n_vocab, &ra, m, k, c->d_lpi, d_out));
        CK(cudaMemcpyAsync(out + (size_t)j0 * k, d_out, sizeof(float) * cnt, cudaMemcpyDeviceToHost, c->st));
        CK(cudaStreamSynchronize(c->st));
    }
    return HX_OK;
}

// Memory in use on the context's device, by every program on it (total - free).
static size_t be_device_bytes_in_use(void *ctx) {
    (void)ctx;
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
    return total_b - free_b;
}

extern "C" const hx_backend hx_backend_cuda = {
    "cuda",
    be_ctx_new,
    be_ctx_free,
    be_forward,
    be_seq_keep,
    be_seq_copy,
    be_seq_state_size,
    be_seq_read,
    be_seq_write,
    be_kv_bytes,
    be_decode_greedy,
    be_finish,
    be_device_bytes_in_use,
    be_decode_sample,
    be_host_alloc,
    be_host_free,
    be_logits_get,
    be_logits_argmax,
    be_logits_logprob,
    NULL, /* kv_map: fixed slots (paged KV is CPU only for now) */
};
