// tp.h — the collectives one rank of a tensor-parallel context uses inside
// its forward pass (tp.cu). Everything is enqueued on the rank's stream, so
// it is captured into the decode graphs with the rest.
//
// Sums are the same bits on every rank (each rank computes x + p_0 + p_1 + ...
// in rank order, or NCCL's all-reduce, which hands every rank the same
// result), so the ranks' residual streams never drift apart.
#ifndef HX_BACKEND_CUDA_TP_H
#define HX_BACKEND_CUDA_TP_H

#include <cuda_runtime.h>
#include <stddef.h>

struct hx_tp_comm;

// The buffer to write this rank's partial sum of `count` floats into for the
// all-reduce at `site` (even: after attention, odd: after the FFN), when the
// one-shot peer-to-peer all-reduce takes this size; NULL: compute into the
// destination and call hx_tp_sum with partial = NULL (NCCL, in place).
float *hx_tp_partial(const hx_tp_comm *t, size_t count, int site);
// dst (count floats) = [dst +] the sum over ranks. With partial (from
// hx_tp_partial): dst += sum of every rank's partial when add, else dst = it.
// Without: dst already holds this rank's term (rank 0's with whatever it
// adds once) and is summed in place.
cudaError_t hx_tp_sum(const hx_tp_comm *t, float *dst, const float *partial, size_t count, int site, bool add,
                      cudaStream_t st);
// The buffer to write this rank's `count` floats into for a one-shot gather
// (hx_tp_gather with send = it), when the one-shot kernels are on and take
// this size; NULL: gather from any buffer through NCCL. Only between
// one-shot all-reduces (a forward whose hx_tp_partial gave buffers).
float *hx_tp_gather_buf(const hx_tp_comm *t, size_t count);
// One token, one-shot: dst += the sum of every rank's partial (as hx_tp_sum),
// then RMSNorm(dst) * g quantized into the 8-bit matvec's input (xq, xd:
// hx_k_quant_q8's format), in one single-block kernel (count <= 8192, a
// multiple of 32). For the matvec after the all-reduce: one launch instead of two.
#define HX_TP_FUSE_MAX 1024 // widest residual stream hx_tp_sum_q8 is used for
cudaError_t hx_tp_sum_q8(const hx_tp_comm *t, float *dst, const float *partial, int count, int site, const float *g,
                         float eps, int8_t *xq, float *xd, cudaStream_t st);
// recv (n_ranks * count floats) = every rank's send, in rank order.
cudaError_t hx_tp_gather(const hx_tp_comm *t, const float *send, float *recv, size_t count, cudaStream_t st);
// The gathered split logits (n_ranks, rows, vn) as rows of n_ranks * vn.
cudaError_t hx_tp_interleave(const float *src, float *dst, int n_ranks, int rows, int vn, cudaStream_t st);

#endif
