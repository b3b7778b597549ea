/* allpairs_cuda.h — the entry all-pairs stage on a CUDA GPU (allpairs_cuda.cu,
 * built with HX_CUDA only), and the candidate window it shares with the CPU.
 *
 * The device keeps the rows twice: (n_pad, dim_pad) fp16 for tensor-core tiles
 * and (n, dim) f32 for rescoring. Each tile's similarities stay in registers;
 * a pair leaves the tile only when its fp16 similarity lies inside the window
 * of some kind (kb_cand_window): the kind's threshold or the current cut of its
 * kept list, widened by kb_f16_eps, the bound on |fp16 - f32| similarity. The
 * candidates are rescored on the device in f32 with the CPU kernel's own
 * arithmetic (one FMA chain over k, or a multiply then an add), so the visited
 * similarities are the CPU's bits and the kept lists equal the CPU's exactly:
 * a pair in the final list is at least as good as every cut seen on the way,
 * so its fp16 similarity was inside the window when its tile ran. */
#ifndef HX_KB_ALLPAIRS_CUDA_H
#define HX_KB_ALLPAIRS_CUDA_H

#include "kb/analyze.h"

#include <math.h>

#ifdef __CUDACC__
#define KB_HD __host__ __device__
#else
#define KB_HD
#endif

/* |fp16-tile similarity - CPU f32 similarity| for two rows of norm <= max_norm
 * (f32 inputs): fp16 rounding of both operands (relative 2^-11, absolute 2^-25
 * below the normal range), the tensor core's f32 accumulation (counted as
 * 2^-21 per term of sum |a_k b_k|, truncating adds included) and the CPU's own
 * f32 chain (2^-23 per term), plus slack for forming the window in float. */
static inline float kb_f16_eps(int dim, float max_norm) {
    const double u = 1.0 / 2048, eta = 1.0 / 33554432.0, m = max_norm;
    double e = (2 * u + u * u) * m * m + 2 * eta * sqrt((double)dim) * m * (1 + u) +
               (double)dim * (1.0 / 2097152 + 1.0 / 8388608) * m * m * (1 + u) * (1 + u) + 1.0 / 1048576;
    return (float)e;
}

enum { KB_KIND_DUP, KB_KIND_LINK, KB_KIND_OVER, KB_KINDS };

/* Where a pair's fp16 similarity s must lie to be a candidate of a kind:
 * s >= lo[k] (and s <= link_hi for links); lo = +inf for a kind kept 0 deep. */
typedef struct kb_cand_win { float lo[KB_KINDS], link_hi; } kb_cand_win;

/* cut[k]: the kind's kept list is full and a pair must be at least this good
 * to enter (-INFINITY while it is not full). */
static inline kb_cand_win kb_cand_window(const kb_opts *o, const float cut[KB_KINDS], float eps) {
    const float thr[KB_KINDS] = {o->dup_threshold, o->link_low, o->topic_threshold};
    const int depth[KB_KINDS] = {kb_keep_depth(o->max_dups), kb_keep_depth(o->max_links),
                                 kb_keep_depth(kb_max_overlaps(o))};
    kb_cand_win w;
    for (int k = 0; k < KB_KINDS; k++)
        w.lo[k] = depth[k] > 0 ? (thr[k] > cut[k] ? thr[k] : cut[k]) - eps : INFINITY;
    w.link_hi = o->link_high + eps;
    return w;
}

/* Whether a pair with fp16 similarity s is a candidate (the device kernel's
 * test, written once here so that the CPU tests check the same rule). */
KB_HD static inline bool kb_cand_take(const kb_cand_win *w, float s, bool diff_topic, bool both_single) {
    return s >= w->lo[KB_KIND_DUP] || (s >= w->lo[KB_KIND_LINK] && s <= w->link_hi && diff_topic) ||
           (s >= w->lo[KB_KIND_OVER] && both_single);
}

/* Where the device driver hands its pairs: visit(ctx, a, b, sim) with rows a,
 * b and their CPU f32 similarity (the caller applies the kinds' rules), and
 * cut(ctx, cut) filling the kept lists' current cuts. */
typedef struct kb_pair_sink {
    void *ctx;
    void (*visit)(void *ctx, size_t a, size_t b, float sim);
    void (*cut)(void *ctx, float cut[KB_KINDS]);
} kb_pair_sink;

/* The pairs of kb_entry_pairs (rows [row0, n) against the rest, as there) on
 * the GPU. fma_chain: rescore as the AVX2 kernel does (fmaf chain), else as the
 * scalar one (multiply, then add). HX_DEVICE_AUTO declines with
 * HX_ERR_UNSUPPORTED (nothing visited) when no GPU is usable, the work is too
 * small to gain, or the rows are not unit vectors; HX_DEVICE_CUDA then fails
 * with the reason. log: one stderr line saying what ran and how fast. */
hx_status kb_allpairs_cuda(const kb_rows *r, size_t row0, const kb_opts *o, hx_device dev, bool fma_chain, bool log,
                           const kb_pair_sink *sink, hx_error *e);

#endif
