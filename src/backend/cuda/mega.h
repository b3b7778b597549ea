// mega.h — the persistent decode kernel: every layer of one decode step in
// one launch (Hopper and later).
//
// One thread block per SM stays resident for the whole step. Each block owns
// a fixed slice of the rows of every matrix and streams its slices, in the
// order it will use them, through a ring of shared-memory stages filled by
// bulk copies (TMA, cp.async.bulk); weights never depend on activations, so
// the ring runs ahead across phase and layer boundaries and the next phase's
// rows are already on chip when its input is ready. A layer is five phases
// separated by grid-wide barriers (a counter in global memory, acquire and
// release):
//
//   q/k/v   x -> RMSNorm -> 8-bit (every block, into shared memory); its rows
//           of Wq, Wk, Wv (+ biases) into q, k, v
//   attn    the decode attention's (head, chunk) items of decode.cuh spread
//           over the blocks: q/k norm, RoPE, KV store, attention, the output
//           quantized for wo
//   wo      x += its rows of Wo a (+ bias)
//   gate/up x -> RMSNorm -> 8-bit; h = act(Wg x) * (Wu x) for its rows
//   down    h -> 8-bit; x += its rows of Wd h (+ bias)
//
// The dot products are decode.cuh's (the q8 decode path's, same formats).
// The embedding before and the output head and argmax after stay separate
// kernels. Numerics: as the q8 decode path, with the RMSNorm scale applied to
// the dot products instead of the activations and another summation order.
//
// A developer option (hx_cuda_dev_opts.mega, HX_CUDA_MEGA): correct, but
// slower than one kernel per op on the H100 so far; bench/RESULTS.md
// ("Persistent decode kernel") has the times per phase and why.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stddef.h>
#include "backend/cuda/kernels.cuh"

struct hx_mega;

// One layer as the context holds it (pointers into device memory).
struct hx_mega_layer_in {
    const hx_dmat *wq, *wk, *wv, *wo, *gate, *up, *down;
    const float *bq, *bk, *bv, *bo, *up_b, *down_b;  // NULL: none
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm; // q_norm, k_norm: NULL without qk-norm
    __half *kc, *vc;        // slot 0's cache; slot s at + s * slot_stride
    size_t slot_stride;     // halves
    int kv_rows;            // rows per slot (a ring for sliding-window layers)
    float rope_base;
    int window;             // 0: full attention
    const float2 *rope_tab; // (cos, sin) per position and pair, or NULL
};

struct hx_mega_in {
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim;
    float eps, attn_scale, softcap, rope_scale;
    bool neox;
    int act;                // 0 SiLU, 1 GELU-tanh
    int att_chunk;          // the decode attention's least positions per item (more when a step has
                            // fewer items than blocks)
    int att_splits;         // items per head the partials buffer (apart) holds: n_ctx / att_chunk at most
    const hx_mega_layer_in *layers;
    bool times;             // developer timing: time per phase printed to stderr by hx_mega_free
    int threads;            // threads per block: 256 or 512 (0: 256)
};

// The context's scratch (it may move between launches: the plan holds none
// of it): x (n_embd), q/k/v, att (n_head * head_dim), h (n_ff), xq/xd (the
// attention's output as q8), the attention's split partials and per-head
// counters.
struct hx_mega_bufs {
    float *x, *q, *k, *v, *att, *h;
    int8_t *xq;
    float *xd, *apart;
    unsigned *acount;
};

// A plan for this device, or NULL with the reason in why (the caller falls
// back to the kernel-per-op path and may log it).
hx_mega *hx_mega_new(const hx_mega_in *in, char *why, size_t why_n);
void hx_mega_free(hx_mega *m);
// All layers of one decode step of sequence slot `slot` at position *d_pos,
// x holding the token's embedding; leaves the last layer's output in x.
cudaError_t hx_mega_launch(hx_mega *m, const hx_mega_bufs *b, cudaStream_t st, int slot, const int *d_pos);
