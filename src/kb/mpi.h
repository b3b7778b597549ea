/* mpi.h — helix-bg one-shot --mpi: one full pass over a KB shared by the
 * ranks of MPI_COMM_WORLD. Built into helix-bg (not libhelix) only when CMake
 * finds MPI (HX_HAVE_MPI).
 *
 * Work split (R ranks, n live entries):
 *   - rank 0 stats data.log and cuts it into R byte ranges at line starts;
 *     each rank reads its range; deletes naming an entry of an earlier range
 *     are exchanged (MPI_Allgatherv) and applied by the range that holds it;
 *   - each rank embeds its live entries (cached vectors reused as in a
 *     single-process pass), then the topic table (first appearance over the
 *     ranks in order), offsets, topic ids and vectors are exchanged with
 *     MPI_Allgatherv: every rank holds the n x dim vectors;
 *   - rank k compares its rows [lo_k, hi_k) with every later row, the bounds
 *     chosen so each rank forms about n^2 / 2R pairs; the kept top-k lists
 *     go to rank 0 (MPI_Gatherv), which merges them (kb_klist_union), scores
 *     the topic centroids, and alone writes embeddings.bin, insights.state
 *     and insights.json (atomically, the single-process writers).
 * The files and the summary equal a single-process full pass's exactly
 * (pair order is total; a pair's similarity is the same bits in any tile). */
#ifndef HX_KB_MPI_H
#define HX_KB_MPI_H

#include "kb/kb.h"

typedef struct kb_mpi_stats {
    kb_pass_stats pass;       /* as kb_run_pass fills it (on rank 0) */
    int ranks;
    double read_s;            /* slowest rank: reading its range, deletes resolved */
    double embed_s;           /* slowest rank: cache lookups and embedding */
    double exchange_s;        /* topic table, offsets and vectors to every rank */
    double pairs_min_s, pairs_max_s; /* the fastest and the slowest rank's share of the pairs */
    double pairs_cpu_min_s, pairs_cpu_max_s; /* the same in CPU seconds of the rank (all its threads):
                                              * what the share costs with the machine to itself */
    double finish_s;          /* rank 0: lists merged, topic overlaps, files written */
} kb_mpi_stats;

/* The message a rank's error carries when another rank failed (that rank
 * printed its own); rank 0 prints it, the others need not. */
#define KB_MPI_OTHER_RANK "another rank failed (its message is above)"

/* MPI_Init (thread level: funneled) and this process's rank, the number of
 * ranks, and its rank and rank count on this host (MPI_COMM_TYPE_SHARED). */
hx_status kb_mpi_init(int *rank, int *size, int *local_rank, int *local_size, hx_error *e);
void kb_mpi_finalize(void);
/* True on every rank when ok is true on every rank. */
bool kb_mpi_all(bool ok);
/* rank 0's ok, on every rank. */
bool kb_mpi_root_ok(bool ok);
/* A neural embedder on this host's GPU local_rank % n_gpus (CUDA builds with
 * a GPU; otherwise the CPU, unchanged). *device: "cpu" or "cuda:N". */
hx_status kb_mpi_pick_gpu(kb_embedder *em, int local_rank, char device[16], hx_error *e);

/* One full pass on every rank (same arguments everywhere; the caller holds
 * the KB lock on rank 0). Returns on every rank; stats and the summary are
 * rank 0's. On failure e names the cause on the rank where it happened and
 * reads KB_MPI_OTHER_RANK on the others. */
hx_status kb_mpi_pass(const char *dir, kb_embedder *em, hx_pool *pool, const kb_opts *o, bool print_summary,
                      bool progress, kb_mpi_stats *st, hx_error *e);

#endif
