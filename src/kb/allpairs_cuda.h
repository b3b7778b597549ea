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

/* Which pairs a device stage forms: incremental, each row a in [lo, n)
 * against every b < a (lo = the first new row); full, each row a in [lo, hi)
 * against every b > a (lo 0, hi n: all pairs; a narrower range is one MPI
 * rank's share, kb_entry_pairs_rows). */
typedef struct kb_stage { size_t n, lo, hi; bool incremental; } kb_stage;

/* Whether pair (a = row i, b = column j) is the stage's (the tile epilogue's
 * test: a tile may straddle the range's ends and the diagonal). */
KB_HD static inline bool kb_stage_pair(const kb_stage *s, size_t i, size_t j) {
    if (i < s->lo || i >= s->hi || j >= s->n) return false;
    return s->incremental ? j < i : j > i;
}

/* The stage's work in tiles of bm x bm: pieces of row blocks [rb0, rb0 + nrb)
 * against column blocks [cb0, cb0 + ncb); a tile (bi, bj) whose pairs all
 * have the wrong orientation is skipped (kb_stage_tile). The driver takes
 * rounds of row blocks from first to end (kb_stage_blocks, kb_stage_piece)
 * and redoes a piece whose candidates overflow as two disjoint halves
 * (kb_piece_halves): rows first, then, for a single row block, columns. */
typedef struct kb_piece { unsigned rb0, nrb, cb0, ncb; } kb_piece;

KB_HD static inline bool kb_stage_tile(const kb_stage *s, unsigned bi, unsigned bj) {
    return s->incremental ? bj <= bi : bj >= bi;
}

/* Row blocks [*first, *end) holding the stage's rows a; nb: blocks of all n rows. */
static inline void kb_stage_blocks(const kb_stage *s, unsigned bm, unsigned *first, unsigned *end, unsigned *nb) {
    *nb = (unsigned)((s->n + bm - 1) / bm);
    *first = (unsigned)(s->lo / bm);
    *end = s->incremental ? *nb : (unsigned)((s->hi + bm - 1) / bm);
    if (s->lo >= s->hi) *end = *first; /* no rows */
}

static inline kb_piece kb_piece_of(unsigned rb0, unsigned nrb, unsigned cb0, unsigned ncb) {
    kb_piece p; /* no compound literal: the .cu file reads this header as C++ */
    p.rb0 = rb0, p.nrb = nrb, p.cb0 = cb0, p.ncb = ncb;
    return p;
}

/* The piece of nrb row blocks from rb0: its columns, all the stage can pair
 * with (full: from rb0 on; incremental: up to its last row block). */
static inline kb_piece kb_stage_piece(const kb_stage *s, unsigned rb0, unsigned nrb, unsigned nb) {
    return s->incremental ? kb_piece_of(rb0, nrb, 0, rb0 + nrb) : kb_piece_of(rb0, nrb, rb0, nb - rb0);
}

/* p as two disjoint pieces holding its tiles, in order (p has more than one tile). */
static inline void kb_piece_halves(const kb_stage *s, kb_piece p, kb_piece h[2]) {
    if (p.nrb > 1) {
        unsigned k = p.nrb / 2;
        h[0] = kb_piece_of(p.rb0, k, p.cb0, s->incremental ? p.rb0 + k : p.ncb);
        h[1] = kb_piece_of(p.rb0 + k, p.nrb - k, s->incremental ? 0 : p.rb0 + k,
                           s->incremental ? p.rb0 + p.nrb : p.ncb - k);
    } else {
        unsigned k = p.ncb / 2;
        h[0] = kb_piece_of(p.rb0, 1, p.cb0, k);
        h[1] = kb_piece_of(p.rb0, 1, p.cb0 + k, p.ncb - k);
    }
}

/* The stage's pairs of kb_entry_pairs (allpairs_cuda.cu) on CUDA device
 * o->allpairs_gpu. fma_chain: rescore as the AVX2 kernel does (fmaf chain),
 * else as the scalar one (multiply, then add). HX_DEVICE_AUTO declines with
 * HX_ERR_UNSUPPORTED (nothing visited) when no GPU is usable, the work is too
 * small to gain, or the rows are not unit vectors; HX_DEVICE_CUDA then fails
 * with the reason. log: one stderr line saying what ran and how fast. */
hx_status kb_allpairs_cuda(const kb_rows *r, const kb_stage *s, const kb_opts *o, hx_device dev, bool fma_chain,
                           bool log, const kb_pair_sink *sink, hx_error *e);

#endif
