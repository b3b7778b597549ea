/* mpi.c — one full KB pass over the ranks of MPI_COMM_WORLD (see mpi.h).
 *
 * Every collective below is reached by every rank in the same order: a rank
 * that fails keeps taking part in the agreement steps (kb_mpi_all) and
 * leaves at the next one together with the others, so no rank waits forever
 * in a collective its peers skipped. */
#include "kb/mpi.h"
#include "kb/analyze.h"
#include "core/core.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define COMM MPI_COMM_WORLD

hx_status kb_mpi_init(int *rank, int *size, int *local_rank, int *local_size, hx_error *e) {
    int provided = 0;
    /* funneled: only the main thread calls MPI; the pool's workers never do */
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return hx_err(e, HX_ERR_IO, "MPI_Init failed");
    MPI_Comm_rank(COMM, rank);
    MPI_Comm_size(COMM, size);
    MPI_Comm local;
    MPI_Comm_split_type(COMM, MPI_COMM_TYPE_SHARED, *rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, local_rank);
    MPI_Comm_size(local, local_size);
    MPI_Comm_free(&local);
    return HX_OK;
}

void kb_mpi_finalize(void) { MPI_Finalize(); }

bool kb_mpi_all(bool ok) {
    int v = ok, all = 0;
    MPI_Allreduce(&v, &all, 1, MPI_INT, MPI_LAND, COMM);
    return all != 0;
}

bool kb_mpi_root_ok(bool ok) {
    int v = ok;
    MPI_Bcast(&v, 1, MPI_INT, 0, COMM);
    return v != 0;
}

hx_status kb_mpi_pick_gpu(kb_embedder *em, int local_rank, char device[16], hx_error *e) {
    snprintf(device, 16, "cpu");
#ifdef HX_HAVE_CUDA
    /* only the BERT embedder runs on a GPU (its fingerprint says bert:) */
    if (strncmp(em->fingerprint, "bert:", 5)) return HX_OK;
    int n = 0;
    hx_error e2 = {0};
    if (hx_cuda_device_count(&n, &e2) != HX_OK || n <= 0) return HX_OK; /* no usable GPU: the CPU */
    snprintf(device, 16, "cuda:%d", local_rank % n);
    return hx_embedder_set_device(em->impl, device, e);
#else
    (void)em; (void)local_rank; (void)e;
    return HX_OK;
#endif
}

/* This rank's GPU for the all-pairs tiles: local rank % GPUs on its host,
 * -1 without CUDA or a usable GPU (the tiles then run on the CPU unless
 * --allpairs-device cuda asks otherwise, which then fails on that rank).
 * Collective: every rank calls it (hosts may differ in GPUs). */
static int rank_gpu(void) {
    int lrank = 0;
    MPI_Comm local;
    MPI_Comm_split_type(COMM, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_free(&local);
#ifdef HX_HAVE_CUDA
    int n = 0;
    hx_error e = {0};
    if (hx_cuda_device_count(&n, &e) != HX_OK || n <= 0) return -1;
    return lrank % n;
#else
    return -1;
#endif
}

/* ---- helpers ---- */

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Pairs in rows [0, L) of the upper triangle of n rows: sum of n-1-a. */
static double pairs_before(double L, double n) { return L * (n - 1) - L * (L - 1) / 2; }

/* Row bounds lo[0..R]: rank k gets [lo[k], lo[k+1]), about the same number
 * of pairs each, cut at multiples of KB_TILE rows. */
static void split_rows(size_t n, int R, size_t *lo) {
    double total = pairs_before((double)n, (double)n);
    lo[0] = 0;
    lo[R] = n;
    for (int k = 1; k < R; k++) {
        double want = total * k / R;
        size_t a = lo[k - 1], b = n; /* smallest L with pairs_before(L) >= want */
        while (a < b) {
            size_t m = a + (b - a) / 2;
            if (pairs_before((double)m, (double)n) < want) a = m + 1;
            else b = m;
        }
        size_t L = a / 64 * 64;
        lo[k] = L < lo[k - 1] ? lo[k - 1] : L;
    }
}

static int u64_cmp(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

/* The offsets of the entries the report names, increasing, unique. */
static uint64_t *report_offsets(const kb_insights *in, size_t *n) {
    uint64_t *o = malloc(((size_t)(in->n_dups + in->n_links) * 2 + 1) * sizeof *o);
    if (!o) return NULL;
    size_t k = 0;
    for (int i = 0; i < in->n_dups; i++) { o[k++] = in->dups[i].a; o[k++] = in->dups[i].b; }
    for (int i = 0; i < in->n_links; i++) { o[k++] = in->links[i].a; o[k++] = in->links[i].b; }
    qsort(o, k, sizeof *o, u64_cmp);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) if (!m || o[i] != o[m - 1]) o[m++] = o[i];
    *n = m;
    return o;
}

static int cache_find(const kb_cache *c, uint64_t off) {
    size_t lo = 0, hi = c->n;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (c->offset[m] < off) lo = m + 1; else hi = m; }
    return lo < c->n && c->offset[lo] == off ? (int)lo : -1;
}

/* counts (R) -> displacements (R); false when the total passes INT_MAX
 * (MPI counts are ints). */
static bool displs_of(const int *cnt, int R, int *dis) {
    long long t = 0;
    for (int k = 0; k < R; k++) { dis[k] = (int)t; t += cnt[k]; if (t > INT_MAX) return false; }
    return true;
}

/* A kept list's header on the wire. */
typedef struct wire_hdr { int32_t n, has_cut; kb_pair cut; } wire_hdr;

/* rank 0: lists[i] := the union of every rank's lists[i] (each complete down
 * to its cut), depth[i] deep. Other ranks send theirs. */
static hx_status gather_lists(kb_klist lists[3], const int depth[3], int rank, int R, hx_error *e) {
    hx_status st = HX_OK;
    wire_hdr *hdr = rank == 0 ? calloc((size_t)R, sizeof *hdr) : NULL;
    int *cnt = rank == 0 ? malloc((size_t)R * sizeof *cnt) : NULL, *dis = rank == 0 ? malloc((size_t)R * sizeof *dis) : NULL;
    int fail = rank == 0 && (!hdr || !cnt || !dis);
    MPI_Bcast(&fail, 1, MPI_INT, 0, COMM);
    if (fail) { free(hdr); free(cnt); free(dis); return hx_err(e, HX_ERR_NOMEM, "out of memory"); }
    for (int i = 0; i < 3 && !st; i++) {
        wire_hdr h = {lists[i].n, lists[i].has_cut, lists[i].cut};
        MPI_Gather(&h, (int)sizeof h, MPI_BYTE, hdr, (int)sizeof h, MPI_BYTE, 0, COMM);
        kb_pair *all = NULL;
        if (rank == 0) {
            for (int k = 0; k < R; k++) cnt[k] = hdr[k].n * (int)sizeof(kb_pair);
            /* depth <= 2 x 100000 + 64 pairs of 32 bytes a rank: far below INT_MAX for any R that runs */
            displs_of(cnt, R, dis);
            all = malloc((size_t)dis[R - 1] + (size_t)cnt[R - 1] + 1);
        }
        fail = rank == 0 && !all;
        MPI_Bcast(&fail, 1, MPI_INT, 0, COMM);
        if (fail) { st = hx_err(e, HX_ERR_NOMEM, "out of memory"); break; }
        MPI_Gatherv(lists[i].p, lists[i].n * (int)sizeof(kb_pair), MPI_BYTE, all, cnt, dis, MPI_BYTE, 0, COMM);
        if (rank == 0) {
            for (int k = 1; k < R && !st; k++) {
                kb_klist add = {all + dis[k] / (int)sizeof(kb_pair), hdr[k].n, hdr[k].has_cut != 0, hdr[k].cut};
                st = kb_klist_union(&lists[i], &add, depth[i], e);
            }
        }
        free(all);
    }
    free(hdr); free(cnt); free(dis);
    return st;
}

/* ---- the pass ---- */

hx_status kb_mpi_pass(const char *dir, kb_embedder *em, hx_pool *pool, const kb_opts *o, bool print_summary,
                      bool progress, kb_mpi_stats *stats, hx_error *e) {
    double t0 = hx_now_s();
    int rank, R;
    MPI_Comm_rank(COMM, &rank);
    MPI_Comm_size(COMM, &R);
    char log_path[4096], cache_path[4096], report_path[4096];
    snprintf(log_path, sizeof log_path, "%s/data.log", dir);
    snprintf(cache_path, sizeof cache_path, "%s/embeddings.bin", dir);
    snprintf(report_path, sizeof report_path, "%s/insights.json", dir);
    const int D = em->dim;
    hx_status st = HX_OK;
    int fd = -1;
    struct stat sb;
    kb_log log = {0}, labels = {0};
    kb_cache old = {0};
    kb_insights in = {0};
    kb_klist lists[3] = {{0}}, om = {0}, over = {0};
    uint64_t *bounds = malloc(((size_t)R + 1) * sizeof *bounds), *defer_all = NULL, *my_off = NULL, *my_hash = NULL;
    uint64_t *off = NULL, *hash_all = NULL, *deleted = NULL, *my_del = NULL, *offs = NULL;
    int *cnt = malloc((size_t)R * sizeof *cnt), *dis = malloc((size_t)R * sizeof *dis), *gid = NULL;
    int *my_topic = NULL, *topic = NULL, *count = NULL, *local_count = NULL;
    size_t *which = NULL, *at = NULL, *row_lo = malloc(((size_t)R + 1) * sizeof *row_lo);
    const char **my_names = NULL, **all_names = NULL;
    char **tab = NULL, **gtab = NULL, *name_buf = NULL, *name_all = NULL;
    float *my_vec = NULL, *vec = NULL;
    MPI_Datatype row_type = MPI_DATATYPE_NULL;
    size_t n_live = 0, n = 0, n_todo = 0, n_deleted = 0;
    int T = 0, T_local = 0;
    uint64_t old_n = 0, old_sum = 0;
    double t_read = 0, t_embed = 0, t_exchange = 0, t_pairs = 0, t_finish = 0;
    if (!bounds || !cnt || !dis || !row_lo) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
#define AGREE() do { if (!kb_mpi_all(st == HX_OK)) { if (!st) st = hx_err(e, HX_ERR_IO, KB_MPI_OTHER_RANK); goto done; } } while (0)
    AGREE();

    /* 1. rank 0 cuts data.log at line starts; each rank reads its range */
    double t = hx_now_s();
    if (rank == 0) {
        fd = kb_open_regular(log_path, false, &sb, e);
        if (fd < 0) st = e ? e->status : HX_ERR_IO;
        uint64_t size = fd >= 0 ? (uint64_t)sb.st_size : 0;
        bounds[0] = 0;
        bounds[R] = size;
        for (int k = 1; k < R && !st; k++) {
            st = kb_line_start(fd, size / (uint64_t)R * (uint64_t)k, size, &bounds[k], log_path, e);
            if (!st && bounds[k] < bounds[k - 1]) bounds[k] = bounds[k - 1];
        }
    }
    AGREE();
    MPI_Bcast(bounds, R + 1, MPI_UINT64_T, 0, COMM);
    log.read_to = bounds[rank];
    log.read_end = bounds[rank + 1];
    log.defer_below = bounds[rank];
    if (bounds[rank + 1] > bounds[rank]) st = kb_log_read(&log, log_path, e);
    AGREE();
    /* deletes of entries in earlier ranges: to every rank; the range holding
     * the named offset applies them (or, holding no entry there, says so as
     * a single-process read would) */
    {
        int mine = (int)(2 * log.n_deferred);
        MPI_Allgather(&mine, 1, MPI_INT, cnt, 1, MPI_INT, COMM);
        if (!displs_of(cnt, R, dis)) st = hx_err(e, HX_ERR_RANGE, "%s: too many deletes for one exchange", log_path);
        AGREE();
        if (!(defer_all = malloc(((size_t)dis[R - 1] + (size_t)cnt[R - 1] + 1) * sizeof *defer_all)))
            st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        AGREE();
        MPI_Allgatherv(log.deferred, mine, MPI_UINT64_T, defer_all, cnt, dis, MPI_UINT64_T, COMM);
        size_t nd = ((size_t)dis[R - 1] + (size_t)cnt[R - 1]) / 2;
        for (size_t q = 0; q < nd; q++) {
            uint64_t line = defer_all[2 * q], x = defer_all[2 * q + 1];
            if (x < bounds[rank] || x >= bounds[rank + 1]) continue;
            kb_entry *en = kb_log_find(&log, x);
            if (en) { en->deleted = true; continue; } /* deleting twice is harmless */
            log.n_malformed++;
            HX_WARN("%s: offset %llu: \"delete\": %llu names no entry (no entry line starts at that offset); ignored; "
                    "line skipped", log_path, (unsigned long long)line, (unsigned long long)x);
        }
    }
    t_read = hx_now_s() - t;

    /* 2. this rank's live entries, cached vectors reused for the same text, the rest embedded */
    t = hx_now_s();
    n_live = kb_log_live(&log);
    size_t nl1 = n_live ? n_live : 1;
    my_off = malloc(nl1 * sizeof *my_off);
    my_hash = malloc(nl1 * sizeof *my_hash);
    my_names = malloc(nl1 * sizeof *my_names);
    my_topic = malloc(nl1 * sizeof *my_topic);
    my_vec = malloc(nl1 * (size_t)D * sizeof *my_vec);
    which = malloc(nl1 * sizeof *which);
    at = malloc(nl1 * sizeof *at);
    if (!my_off || !my_hash || !my_names || !my_topic || !my_vec || !which || !at) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
    AGREE();
    kb_cache_load(&old, cache_path, em);
    old_n = old.n;
    old_sum = old.sum;
    for (size_t i = 0, k = 0; i < log.n; i++) {
        const kb_entry *en = &log.e[i];
        if (en->deleted) continue;
        my_off[k] = en->offset;
        my_hash[k] = en->hash;
        my_names[k] = en->topic;
        int c = cache_find(&old, en->offset);
        /* as the single-process pass: a cached vector only for the same text (hash 0: v1 cache, trusted once) */
        if (c >= 0 && (old.hash[c] == en->hash || old.hash[c] == 0))
            memcpy(my_vec + k * (size_t)D, old.vec + (size_t)c * D, sizeof(float) * (size_t)D);
        else { which[n_todo] = i; at[n_todo++] = k; }
        k++;
    }
    kb_cache_free(&old); /* the vectors are held once: each rank's own rows now, all rows after the exchange */
    st = kb_embed_rows(em, &log, which, at, n_todo, my_vec, progress && rank == 0 ? " (rank 0's share)" : NULL, e);
    t_embed = hx_now_s() - t;
    AGREE();

    /* 3. the topic table: each rank's distinct names in first appearance,
     * concatenated in rank order (= offset order), numbered by first appearance */
    t = hx_now_s();
    st = kb_topic_table(my_names, n_live, my_topic, &tab, &T_local, e);
    AGREE();
    {
        size_t bytes = 0;
        for (int q = 0; q < T_local; q++) bytes += strlen(tab[q]) + 1;
        if (bytes > INT_MAX) st = hx_err(e, HX_ERR_RANGE, "%s: topic names too long for one exchange", log_path);
        else if (!(name_buf = malloc(bytes + 1))) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        AGREE();
        size_t p = 0;
        for (int q = 0; q < T_local; q++) { size_t m = strlen(tab[q]) + 1; memcpy(name_buf + p, tab[q], m); p += m; }
        int mine = (int)bytes, tl = T_local;
        MPI_Allgather(&mine, 1, MPI_INT, cnt, 1, MPI_INT, COMM);
        if (!displs_of(cnt, R, dis)) st = hx_err(e, HX_ERR_RANGE, "%s: topic names too long for one exchange", log_path);
        AGREE();
        size_t total = (size_t)dis[R - 1] + (size_t)cnt[R - 1];
        if (!(name_all = malloc(total + 1))) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        AGREE();
        MPI_Allgatherv(name_buf, mine, MPI_CHAR, name_all, cnt, dis, MPI_CHAR, COMM);
        int *tcnt = malloc((size_t)R * sizeof *tcnt);
        if (!tcnt) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        AGREE();
        MPI_Allgather(&tl, 1, MPI_INT, tcnt, 1, MPI_INT, COMM);
        size_t n_all = 0, first = 0;
        for (int k = 0; k < R; k++) { if (k == rank) first = n_all; n_all += (size_t)tcnt[k]; }
        free(tcnt);
        all_names = malloc((n_all ? n_all : 1) * sizeof *all_names);
        gid = malloc((n_all ? n_all : 1) * sizeof *gid);
        if (!all_names || !gid) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        AGREE();
        for (size_t q = 0, p2 = 0; q < n_all; q++) { all_names[q] = name_all + p2; p2 += strlen(name_all + p2) + 1; }
        st = kb_topic_table(all_names, n_all, gid, &gtab, &T, e);
        AGREE();
        for (size_t i = 0; i < n_live; i++) my_topic[i] = gid[first + (size_t)my_topic[i]];
        count = calloc((size_t)(T ? T : 1), sizeof *count);
        local_count = calloc((size_t)(T ? T : 1), sizeof *local_count);
        if (!count || !local_count) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        AGREE();
        for (size_t i = 0; i < n_live; i++) local_count[my_topic[i]]++;
        MPI_Allreduce(local_count, count, T, MPI_INT, MPI_SUM, COMM);
    }
    /* 4. offsets, topic ids and vectors to every rank (hashes to rank 0, for the cache) */
    {
        int mine = (int)n_live;
        if (n_live > INT_MAX) st = hx_err(e, HX_ERR_RANGE, "%s: more than 2^31 entries in one rank's range", log_path);
        AGREE();
        MPI_Allgather(&mine, 1, MPI_INT, cnt, 1, MPI_INT, COMM);
        if (!displs_of(cnt, R, dis)) st = hx_err(e, HX_ERR_RANGE, "%s: more than 2^31 entries", log_path);
        AGREE();
        n = (size_t)dis[R - 1] + (size_t)cnt[R - 1];
        size_t n1 = n ? n : 1;
        off = malloc(n1 * sizeof *off);
        topic = malloc(n1 * sizeof *topic);
        vec = malloc(n1 * (size_t)D * sizeof *vec);
        if (rank == 0) hash_all = malloc(n1 * sizeof *hash_all);
        if (!off || !topic || !vec || (rank == 0 && !hash_all)) st = hx_err(e, HX_ERR_NOMEM, "out of memory for %zu x %d vectors", n, D);
        AGREE();
        MPI_Type_contiguous(D, MPI_FLOAT, &row_type);
        MPI_Type_commit(&row_type);
        MPI_Allgatherv(my_off, mine, MPI_UINT64_T, off, cnt, dis, MPI_UINT64_T, COMM);
        MPI_Allgatherv(my_topic, mine, MPI_INT, topic, cnt, dis, MPI_INT, COMM);
        MPI_Allgatherv(my_vec, mine, row_type, vec, cnt, dis, row_type, COMM);
        MPI_Gatherv(my_hash, mine, MPI_UINT64_T, hash_all, cnt, dis, MPI_UINT64_T, 0, COMM);
        free(my_vec); my_vec = NULL;
    }
    t_exchange = hx_now_s() - t;

    /* 5. this rank's rows of the all-pairs product (on its own GPU when it
     * has one and o allows), then the lists to rank 0 */
    t = hx_now_s();
    kb_rows rows = {n, D, off, topic, vec, T, count};
    int depth[3] = {kb_keep_depth(o->max_dups), kb_keep_depth(o->max_links), kb_keep_depth(kb_max_overlaps(o))};
    split_rows(n, R, row_lo);
    kb_opts ro = *o;
    const int gpu = rank_gpu();
    if (gpu >= 0) ro.allpairs_gpu = gpu;
    bool on_gpu = false;
    double c_pairs = cpu_s();
    st = kb_entry_pairs_rows(pool, &rows, row_lo[rank], row_lo[rank + 1], &ro, &lists[0], &lists[1], &lists[2], &on_gpu, e);
    t_pairs = hx_now_s() - t;
    c_pairs = cpu_s() - c_pairs;
    AGREE();
    t = hx_now_s();
    st = gather_lists(lists, depth, rank, R, e);
    AGREE();

    /* 6. rank 0: topic overlaps, the report's lists, the deleted entries, the files */
    size_t embedded = 0, n_mal = 0, my_n_del = log.n - n_live;
    uint64_t read_to = bounds[rank + 1] > bounds[rank] ? log.read_to : 0, g_read_to = 0;
    {
        unsigned long long v[2] = {n_todo, log.n_malformed}, s[2] = {0, 0};
        MPI_Reduce(v, s, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, 0, COMM);
        embedded = (size_t)s[0];
        n_mal = (size_t)s[1];
        MPI_Reduce(&read_to, &g_read_to, 1, MPI_UINT64_T, MPI_MAX, 0, COMM);
        if (my_n_del > INT_MAX) st = hx_err(e, HX_ERR_RANGE, "%s: more than 2^31 deleted entries in one range", log_path);
        else if (!(my_del = malloc((my_n_del ? my_n_del : 1) * sizeof *my_del))) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        AGREE();
        size_t k = 0;
        for (size_t i = 0; i < log.n; i++) if (log.e[i].deleted) my_del[k++] = log.e[i].offset;
        int mine = (int)my_n_del;
        MPI_Gather(&mine, 1, MPI_INT, cnt, 1, MPI_INT, 0, COMM);
        if (rank == 0) {
            if (!displs_of(cnt, R, dis)) st = hx_err(e, HX_ERR_RANGE, "%s: more than 2^31 deleted entries", log_path);
            else {
                n_deleted = (size_t)dis[R - 1] + (size_t)cnt[R - 1];
                if (!(deleted = malloc((n_deleted ? n_deleted : 1) * sizeof *deleted))) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
            }
        }
        if (!kb_mpi_root_ok(st == HX_OK)) { if (!st) st = hx_err(e, HX_ERR_IO, KB_MPI_OTHER_RANK); goto done; }
        /* ranges in offset order: the concatenation is increasing */
        MPI_Gatherv(my_del, mine, MPI_UINT64_T, deleted, cnt, dis, MPI_UINT64_T, 0, COMM);
    }
    double pr[4] = {t_read, t_embed, t_pairs, c_pairs}, prmax[4] = {0}, prmin[4] = {0};
    MPI_Reduce(pr, prmax, 4, MPI_DOUBLE, MPI_MAX, 0, COMM);
    MPI_Reduce(pr, prmin, 4, MPI_DOUBLE, MPI_MIN, 0, COMM);
    int gpu_one = on_gpu, gpu_ranks = 0;
    MPI_Reduce(&gpu_one, &gpu_ranks, 1, MPI_INT, MPI_SUM, 0, COMM);
    if (rank != 0) goto done;

    if ((st = kb_multi_overlaps(pool, &rows, o, &om, e))) goto done;
    if (!(over.p = malloc((size_t)(lists[2].n + 1) * sizeof *over.p))) { st = hx_err(e, HX_ERR_NOMEM, "out of memory"); goto done; }
    if (lists[2].n) memcpy(over.p, lists[2].p, (size_t)lists[2].n * sizeof *over.p);
    over.n = lists[2].n; over.has_cut = lists[2].has_cut; over.cut = lists[2].cut;
    if ((st = kb_klist_union(&over, &om, depth[2], e))) goto done;
    if ((st = kb_insights_from(&lists[0], &lists[1], &over, o, gtab, T, &in, e))) goto done;
    double t_an = hx_now_s() - t + t_pairs;
    kb_cache cur = {.offset = off, .hash = hash_all, .vec = vec, .n = n, .dim = D};
    bool changed = embedded || old_n != n || !old_sum;
    if (changed && (st = kb_cache_save(&cur, cache_path, em, e))) goto done;
    if (!changed) cur.sum = old_sum;
    if ((st = kb_state_save_full(dir, fd, &sb, &cur, o, g_read_to, n_mal, gtab, T, topic, deleted, n_deleted, lists, e)))
        goto done;
    size_t n_offs = 0;
    if (!(offs = report_offsets(&in, &n_offs))) { st = hx_err(e, HX_ERR_NOMEM, "out of memory"); goto done; }
    if ((st = kb_log_read_at(&labels, log_path, offs, n_offs, e))) goto done;
    if ((st = kb_write_report(report_path, &labels, &in, n, em->name, e))) goto done;
    if (print_summary) kb_print_summary(stdout, &labels, &in, n);
    t_finish = hx_now_s() - t;
    if (stats)
        *stats = (kb_mpi_stats){
            .pass = {.entries = n + n_deleted, .live = n, .embedded = embedded, .malformed = n_mal,
                     .dups = (size_t)in.n_dups, .links = (size_t)in.n_links, .overlaps = (size_t)in.n_overlaps,
                     .seconds = hx_now_s() - t0, .embed_seconds = prmax[0] + prmax[1], .analyze_seconds = t_an},
            .ranks = R, .read_s = prmax[0], .embed_s = prmax[1], .exchange_s = t_exchange, .pairs_min_s = prmin[2],
            .pairs_max_s = prmax[2], .pairs_cpu_min_s = prmin[3], .pairs_cpu_max_s = prmax[3], .finish_s = t_finish,
            .pairs_gpu_ranks = gpu_ranks};
#undef AGREE
done:
    if (fd >= 0) close(fd);
    if (row_type != MPI_DATATYPE_NULL) MPI_Type_free(&row_type);
    for (int i = 0; i < 3; i++) kb_klist_free(&lists[i]);
    kb_klist_free(&om); kb_klist_free(&over);
    kb_insights_free(&in);
    kb_log_free(&log); kb_log_free(&labels);
    kb_cache_free(&old);
    free(bounds); free(defer_all); free(my_off); free(my_hash); free(off); free(hash_all); free(deleted); free(my_del);
    free(offs); free(cnt); free(dis); free(gid); free(my_topic); free(topic); free(count); free(local_count);
    free(which); free(at); free(row_lo); free(my_names); free(all_names); free(tab); free(gtab); free(name_buf);
    free(name_all); free(my_vec); free(vec);
    return st;
}
