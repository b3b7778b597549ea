// lora.cuh — LoRA adapters on the GPU (lora.cu; applied by forward.cu).
//
// One adapted matrix W (n_out, n_in) with every adapter that adapts it
// concatenated along the rank (r = the sum of their ranks):
//   y += B diag(s) A x,   A (r, n_in) f16, B (n_out, r) f16, s (r) f32.
// s folds each adapter's scale * alpha / rank and the f16 normalization
// (A and B are stored divided by their largest magnitude, so f16 keeps full
// relative precision whatever the adapter's range); a change of scales only
// rewrites s, at the same address, so captured graphs stay valid.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

struct hx_lora_dmat {
    const __half *a;   // (r, n_in) row-major; token_embd: (n_vocab, r)
    const __half *b;   // (n_out, r) row-major
    float *s;          // (r)
    int r;             // 0: not adapted
    int n_in, n_out;
};

// Up to 3 matrices reading the same input x (n, n_in), RMS-normed on the fly
// with norm_w (NULL: x as is): ys[j] (n, n_out_j) += B_j diag(s_j) A_j x.
// glu_act >= 0: count = 2 (gate, up) of equal n_out and ys[0] = act(gate +
// its delta) * (up + its delta) (act 0 SiLU, 1 GELU-tanh), ys[1] left as is;
// a matrix with r = 0 then adds nothing. Up to HX_LORA_FUSE_N tokens: one
// launch (every block computes the A x it needs); more: two (A x of all
// tokens into t, then B), t holding n * (sum of the ranks) floats.
enum { HX_LORA_FUSE_N = 4 };
// xq/xd (GLU at n = 1 only, n_out a multiple of 32; else NULL): the GLU
// output also quantized as hx_k_quant_q8 would (no norm) for the down matvec.
// preload (with hx_k_lora_prepare done): the fused kernel copies the A and B
// rows a block needs to shared memory before its PDL wait (they do not
// depend on the kernel before), when they fit in 200 KiB. Off by default:
// slower on the H100 than reading them from L2 after the wait.
cudaError_t hx_k_lora(cudaStream_t st, int count, const hx_lora_dmat *const *Ms, const float *x, const float *norm_w,
                      float eps, int n, float *const *ys, int glu_act, float *t, int8_t *xq, float *xd, bool preload);
// Lets the preloading kernels take up to 200 KiB of shared memory; call
// outside stream capture (hx_cuda_set_adapters does). Without it, no preload.
cudaError_t hx_k_lora_prepare(void);
// Decode (one token) into the residual, in one block: x (n_out) += B diag(s)
// A in (in: n_in), then, with xq, the new x RMS-normed with norm_w and
// quantized as hx_k_quant_q8 does (n_out a multiple of 32) for the next
// matvec, which then needs no quantization launch of its own. r > 0 and
// hx_k_lora_res_fits (shared memory for r + n_out floats).
bool hx_k_lora_res_fits(const hx_lora_dmat *M);
cudaError_t hx_k_lora_res(cudaStream_t st, const hx_lora_dmat *M, const float *in, float *x, const float *norm_w,
                          float eps, int8_t *xq, float *xd, bool preload);
// Token embedding: x (n, n_out) += B diag(s) A[tok_i] (A (n_vocab, r)).
cudaError_t hx_k_lora_embd(cudaStream_t st, const hx_lora_dmat *M, const int *tok, int n, float *x);
