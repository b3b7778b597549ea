/* dev_opts.h — measurement and experiment switches of the CUDA backend.
 *
 * For tools and tests only (gpu-test, bench, kernel sweeps): the library never
 * reads the environment. A tool fills this struct and hands it to a context
 * through hx_cuda_opts.dev or hx_backend_dev.cuda; checks.h's
 * hx_cuda_dev_opts_from_env maps the HX_CUDA_* variables the tools have always
 * taken (named after each field below). All zero, or a NULL pointer, is the
 * production path. Fields marked (results) change what the forward computes;
 * the others change only how fast it runs. A context copies the struct (and
 * the strings and rules it points to) when it is created.
 *
 * Plain C, no other include: a developer header in include/ may include it. */
#ifndef HX_BACKEND_CUDA_DEV_OPTS_H
#define HX_BACKEND_CUDA_DEV_OPTS_H
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One launch shape of the 8-bit-activation matvec: rows (all matrices of the
 * launch stacked; the gate's alone for gate/up) x cols gets wpr warps per row. */
typedef struct hx_cuda_wpr_rule {
    int rows, cols;
    int wpr;                 /* 1, 2 or 4 */
} hx_cuda_wpr_rule;

typedef struct hx_cuda_dev_opts {
    /* ---- the decode loop ---- */
    bool no_graph;           /* HX_CUDA_NO_GRAPH: launch every kernel of a decode step instead of replaying a
                                CUDA graph (also turns the greedy lookahead off) */
    bool no_ahead;           /* HX_CUDA_NO_AHEAD: decode_greedy waits for each token before it launches the
                                next step */
    bool no_pdl;             /* HX_CUDA_NO_PDL: launch without programmatic dependent launch (Hopper and later
                                overlap a kernel's start with the end of the one before) */
    bool profile;            /* HX_CUDA_PROFILE: decode steps run without the graph, an event after every
                                kernel; time per kernel label printed to stderr when the context is freed */
    const char *skip;        /* (results) HX_CUDA_SKIP: comma-separated kernel labels (those of the profile)
                                that are not launched at all, to time what the others cost; NULL: none */
    bool no_fuse_attn;       /* HX_CUDA_NO_FUSE_ATTN: decode runs RoPE + KV store and attention as two kernels
                                (the prefill ones) instead of the fused decode attention */
    bool mega;               /* (results, rounding) HX_CUDA_MEGA: one-token decode steps run every layer in the
                                persistent kernel (mega.h) where the model and device allow; slower than one
                                kernel per op on the H100 so far (bench/RESULTS.md, "Persistent decode kernel") */
    bool mega_times;         /* HX_CUDA_MEGA_TIMES: the persistent kernel's block 0 times each phase; the time
                                per layer is printed to stderr when the context is freed */
    int mega_threads;        /* HX_CUDA_MEGA_THREADS: threads per block of the persistent kernel, 256 or 512;
                                0: 256 */
    int mvq;                 /* (results) HX_CUDA_MVQ: decode matvecs with 8-bit activations. 0: default
                                (every matrix that has the kernel); 1: q/k/v and gate/up only; -1: none
                                (HX_CUDA_MVQ=0), f32 activations everywhere */

    /* ---- kernel choice ---- */
    bool naive_attn;         /* (results, rounding) HX_CUDA_NAIVE_ATTN: prefill attention with the one-block-
                                per-query kernel (the reference) */
    bool att_fp32;           /* (results, rounding) HX_CUDA_ATT_TC=0: prefill attention with the FP32 tiled
                                kernels instead of the tensor-core ones (head sizes 64 and 128) */
    bool att_block;          /* HX_CUDA_ATT_BLOCK: decode attention with the block-wide kernel for every head
                                size (by default 64/128/256 take a warp per position) */
    int att_chunk;           /* HX_CUDA_ATT_CHUNK: decode attention positions per block, 32..4096; 0: default
                                (small values make short tests exercise the split merge) */
    int wpr;                 /* HX_CUDA_WPR: warps per row of the float matvec, 1, 2 or 4; 0: by row count */
    int cublas_min_n;        /* (results, rounding) HX_CUDA_CUBLAS_MIN_N: tokens from which a batch product
                                goes to cuBLAS (f16); 0: default (32) */
    int mmq_max;             /* HX_CUDA_MMQ_MAX: a many-sequence product of up to this many tokens takes the
                                int8 tensor-core kernel (mmq.cu); 0: default (64); -1 (HX_CUDA_MMQ=0): never */
    int mmq_warps;           /* HX_CUDA_MMQ_WARPS: warps per block of mmq (1..16, splitting each row); 0: by shape */
    int mvq_cols_max;        /* HX_CUDA_MVQ_COLS: ... of up to this many tokens takes the dp4a tile kernel
                                instead (before mmq); 0: default; -1 (HX_CUDA_MVQ_COLS=0): never */
    bool mvq_no_mix;         /* HX_CUDA_MVQ_MIX=0: no single launch for a Q4_K run followed by a Q6_K run */
    bool mvq_no_rows;        /* HX_CUDA_MVQ_ROWS=0: no several-rows-per-warp kernel for long, short-row
                                matrices (the output matrix) */
    int mvq_wpr;             /* HX_CUDA_MVQ_WPR=N: warps per row (1, 2 or 4) of every 8-bit matvec; 0: chosen
                                per shape */
    const hx_cuda_wpr_rule *mvq_wpr_rules; /* HX_CUDA_MVQ_WPR=ROWSxCOLS=N,...: per launch shape (before mvq_wpr) */
    int n_mvq_wpr_rules;
    bool lora_plain;         /* HX_CUDA_LORA_PLAIN: decode applies LoRA deltas with the batch kernels only (no
                                single-block residual kernels handing 8-bit activations to the next matvec) */
    bool lora_preload;       /* (results) HX_CUDA_LORA_PRELOAD: LoRA decode kernels copy A and B to shared memory
                                before their PDL wait instead of reading them (prefetched to L2) after it;
                                slower on the H100 (bench/RESULTS.md) */
    /* ---- tensor parallelism ---- */
    bool tp_nccl;            /* HX_CUDA_TP_NCCL: every all-reduce through NCCL (no one-shot peer-to-peer kernel
                                for the small ones) */
    int tp_ar_blocks;        /* HX_CUDA_TP_AR_BLOCKS: blocks of the one-shot all-reduce, 1..64; 0: default */
    bool tp_no_fuse;         /* HX_CUDA_TP_NO_FUSE: decode's one-shot all-reduces leave the next matvec's norm and
                                quantization to its own launch */
} hx_cuda_dev_opts;

#ifdef __cplusplus
}
#endif
#endif
