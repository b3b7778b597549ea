/* insights.c — all-pairs similarity as blocked products over unit vectors,
 * into kept top-k lists per finding kind; topic overlaps; the report.
 * Memory is O(n x dim) throughout: no n x n or topics x topics matrix. */
#include "kb/kb.h"
#include "kb/analyze.h"
#include "core/core.h"
#include "kb/allpairs.h"
#include "kb/allpairs_cuda.h"
#include "quant/quant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

#define TILE KB_TILE

kb_opts kb_default_opts(const kb_embedder *em) {
    /* Calibrated on the labelled pairs of examples/kb (bench/kb_calibrate.py,
     * bench/RESULTS.md): the best-F1 cut for near-duplicates, and for
     * cross-links the best-F0.5 lower bound below it (precision first: a
     * person reads each one). The lexical embedder's
     * similarities run far lower (shared words only); any BERT model gets
     * all-MiniLM-L6-v2's numbers, the one calibrated. */
    if (!strcmp(em->name, "lexical-384"))
        return (kb_opts){.dup_threshold = 0.247f, .link_low = 0.234f, .link_high = 0.247f, .topic_threshold = 0.45f,
                         .max_dups = 20, .max_links = 50, .max_overlaps = KB_DEFAULT_MAX_OVERLAPS};
    return (kb_opts){.dup_threshold = 0.69f, .link_low = 0.53f, .link_high = 0.69f, .topic_threshold = 0.6f,
                     .max_dups = 20, .max_links = 50, .max_overlaps = KB_DEFAULT_MAX_OVERLAPS};
}

int kb_max_overlaps(const kb_opts *o) { return o->max_overlaps > 0 ? o->max_overlaps : KB_DEFAULT_MAX_OVERLAPS; }

/* ---- pair order, bounded heaps, kept lists ---- */

bool kb_pair_better(const kb_pair *p, const kb_pair *q) {
    if (p->sim != q->sim) return p->sim > q->sim;
    if (p->a != q->a) return p->a < q->a;
    return p->b < q->b;
}

/* A bounded heap of the best k pairs, the worst on top. */
typedef struct topk { kb_pair *p; int n, k; } topk;

static void topk_push(topk *t, kb_pair p) {
    if (t->k <= 0) return;
    kb_pair *h = t->p;
    if (t->n < t->k) {
        int i = t->n++;
        h[i] = p;
        while (i > 0 && kb_pair_better(&h[(i - 1) / 2], &h[i])) {
            kb_pair x = h[i]; h[i] = h[(i - 1) / 2]; h[(i - 1) / 2] = x;
            i = (i - 1) / 2;
        }
    } else if (kb_pair_better(&p, &h[0])) {
        h[0] = p;
        for (int i = 0;;) {
            int m = i, l = 2 * i + 1, r = l + 1;
            if (l < t->n && kb_pair_better(&h[m], &h[l])) m = l;
            if (r < t->n && kb_pair_better(&h[m], &h[r])) m = r;
            if (m == i) break;
            kb_pair x = h[i]; h[i] = h[m]; h[m] = x; i = m;
        }
    }
}

static int pair_cmp(const void *x, const void *y) {
    const kb_pair *a = x, *b = y;
    return kb_pair_better(a, b) ? -1 : kb_pair_better(b, a) ? 1 : 0;
}

void kb_klist_sort(kb_klist *l) { qsort(l->p, (size_t)l->n, sizeof *l->p, pair_cmp); }

void kb_klist_free(kb_klist *l) {
    free(l->p);
    memset(l, 0, sizeof *l);
}

/* nt per-thread heaps of depth k -> one sorted list; it has a cut when the
 * depth was reached (pairs worse than the last one may have been dropped). */
static hx_status heaps_to_klist(topk *t, int nt, int k, kb_klist *out, hx_error *e) {
    memset(out, 0, sizeof *out);
    topk all = {malloc((size_t)(k > 0 ? k : 1) * sizeof(kb_pair)), 0, k};
    if (!all.p) return hx_err(e, HX_ERR_NOMEM, "insights: out of memory");
    for (int i = 0; i < nt; i++)
        for (int q = 0; q < t[i].n; q++) topk_push(&all, t[i].p[q]);
    qsort(all.p, (size_t)all.n, sizeof *all.p, pair_cmp);
    out->p = all.p;
    out->n = all.n;
    if (k > 0 && all.n == k) { out->has_cut = true; out->cut = all.p[k - 1]; }
    return HX_OK;
}

hx_status kb_klist_union(kb_klist *kept, const kb_klist *add, int depth, hx_error *e) {
    kb_pair *p = malloc((size_t)(kept->n + add->n + 1) * sizeof *p);
    if (!p) return hx_err(e, HX_ERR_NOMEM, "insights: out of memory");
    if (kept->n) memcpy(p, kept->p, (size_t)kept->n * sizeof *p);
    if (add->n) memcpy(p + kept->n, add->p, (size_t)add->n * sizeof *p);
    int n = kept->n + add->n;
    qsort(p, (size_t)n, sizeof *p, pair_cmp);
    bool has_cut = kept->has_cut || add->has_cut;
    kb_pair cut = {0};
    if (kept->has_cut && add->has_cut) cut = kb_pair_better(&kept->cut, &add->cut) ? kept->cut : add->cut;
    else if (has_cut) cut = kept->has_cut ? kept->cut : add->cut;
    if (has_cut) /* below the better cut the union is not complete: drop it */
        while (n > 0 && kb_pair_better(&cut, &p[n - 1])) n--;
    if (n > depth) { n = depth; has_cut = true; cut = p[depth - 1]; }
    free(kept->p);
    kept->p = p;
    kept->n = n;
    kept->has_cut = has_cut;
    kept->cut = cut;
    return HX_OK;
}

bool kb_klist_fills(const kb_klist *l, int k) { return l->n >= k || !l->has_cut; }

/* ---- the blocked all-pairs product ---- */

/* Rows [row0, n) of vec (n, dim): full (row0 = 0, pairs b > a) or incremental
 * (row0 > 0: each new row against every row before it, pairs b < a), so each
 * pair with a row >= row0 is formed once. Entries mode (topic != NULL):
 * near-duplicates, cross-links, and the overlaps of two single-entry topics
 * (their centroids are the entries themselves, so those pairs are scored here
 * and the topic pass skips them). Topics mode: overlaps only, key = topic id. */
typedef struct job {
    const float *vec;     /* (n, dim) */
    size_t row0, n_rows, n;
    bool incremental;
    int dim;
    const kb_opts *o;
    const uint64_t *key;  /* (n) a pair's a/b: entry offsets, or topic ids in topics mode */
    const int *topic;     /* entries mode: topic id per row; NULL in topics mode */
    const uint8_t *single;/* entries mode: 1 where the row's topic has this one entry */
    topk *dups, *links, *over; /* per thread */
    float *scratch;       /* per thread: TILE*TILE sims + dim*TILE transposed tile */
    void (*kernel)(const float *, int, const float *, int, float *);
    /* int8 candidates (entries mode; i8 NULL: f32 tiles throughout): the rows
     * quantized, the tile kernel, the f32 rescoring with kernel's arithmetic,
     * the f32 rounding slack of the window, per-thread scratch and counts */
    const kb_i8 *q;
    kb_i8_tile_fn i8;
    void (*dots)(const float *const *, const float *const *, int, int, float *);
    void (*dots_any)(const float *const *, const float *const *, int, int, float *); /* NULL: dots alone */
    float slack;
    char *i8_scratch;
    size_t *n_cand;       /* per thread: int8 candidates, then pairs given the f32 chain */
} job;

/* per thread: acc (TILE x TILE int32), mask (TILE), then a tile's
 * candidates (up to TILE x TILE): row pointers a, b, row and column in the
 * tile, similarities; lo (TILE) */
#define I8_SCRATCH (TILE * TILE * (sizeof(int32_t) + 2 * sizeof(float *) + 2 * sizeof(uint32_t) + sizeof(float)) + \
                    TILE * (sizeof(uint64_t) + sizeof(float)))

static inline kb_pair mkpair(uint64_t x, uint64_t y, float s) {
    return x < y ? (kb_pair){.a = x, .b = y, .sim = s} : (kb_pair){.a = y, .b = x, .sim = s};
}

static void visit(job *j, int thread, size_t a, size_t b, float s) {
    const kb_opts *o = j->o;
    if (j->topic) {
        if (s > o->dup_threshold) topk_push(&j->dups[thread], mkpair(j->key[a], j->key[b], s));
        else if (s >= o->link_low && s <= o->link_high && j->topic[a] != j->topic[b])
            topk_push(&j->links[thread], mkpair(j->key[a], j->key[b], s));
        if (s > o->topic_threshold && j->single[a] && j->single[b])
            topk_push(&j->over[thread], mkpair((uint64_t)j->topic[a], (uint64_t)j->topic[b], s));
    } else if (s > o->topic_threshold) {
        topk_push(&j->over[thread], mkpair(j->key[a], j->key[b], s));
    }
}

static void tile_task(void *ctx, int64_t task, int thread) {
    job *j = ctx;
    size_t i0 = j->row0 + (size_t)task * TILE, i1 = i0 + TILE < j->n_rows ? i0 + TILE : j->n_rows;
    const int D = j->dim;
    float *sims = j->scratch + (size_t)thread * (TILE * TILE + (size_t)D * TILE);
    float *bt = sims + TILE * TILE; /* (D, TILE): the column tile transposed */
    size_t c0 = j->incremental ? 0 : i0, c1 = j->incremental ? i1 - 1 : j->n;
    for (size_t j0 = c0; j0 < c1; j0 += TILE) {
        size_t j1 = j0 + TILE < c1 ? j0 + TILE : c1;
        for (size_t b = j0; b < j0 + TILE; b++)
            for (int k = 0; k < D; k++) bt[(size_t)k * TILE + (b - j0)] = b < j1 ? j->vec[b * (size_t)D + k] : 0.0f;
        j->kernel(j->vec + i0 * (size_t)D, (int)(i1 - i0), bt, D, sims);
        for (size_t a = i0; a < i1; a++) {
            const float *row = sims + (a - i0) * TILE;
            size_t lo = j->incremental ? j0 : (j0 > a + 1 ? j0 : a + 1), hi = j->incremental ? (j1 < a ? j1 : a) : j1;
            for (size_t b = lo; b < hi; b++) visit(j, thread, a, b, row[b - j0]);
        }
    }
}

/* tile_task on int8 candidate tiles. Per column tile: each row's window from
 * this thread's kept lists (a pair outside it is below a threshold or worse
 * than the thread's cut, which only rises, so it cannot reach the merged
 * lists); the int8 bound against it; the survivors' f32 similarity in any
 * order (within the window's slack of the f32 tiles' bits) against the
 * window again, the GPU's test (kb_cand_take); only the pairs left get the
 * f32 tiles' own chain and are visited as tile_task visits. */
static void tile_task_i8(void *ctx, int64_t task, int thread) {
    job *j = ctx;
    size_t i0 = j->row0 + (size_t)task * TILE, i1 = i0 + TILE < j->n_rows ? i0 + TILE : j->n_rows;
    const int D = j->dim, na = (int)(i1 - i0);
    char *sc = j->i8_scratch + (size_t)thread * I8_SCRATCH;
    int32_t *acc = (int32_t *)sc;
    uint64_t *mask = (uint64_t *)(acc + TILE * TILE);
    const float **pa = (const float **)(mask + TILE), **pb = pa + TILE * TILE;
    uint32_t *ia = (uint32_t *)(pb + TILE * TILE), *ib = ia + TILE * TILE;
    float *sim = (float *)(ib + TILE * TILE), *lo = sim + TILE * TILE;
    const kb_i8 *q = j->q;
    const float *vec = j->vec;
    size_t c0 = j->incremental ? 0 : i0, c1 = j->incremental ? i1 - 1 : j->n, n_cand = 0, n_exact = 0;
    for (size_t t = c0 / TILE; t * TILE < c1; t++) {
        const size_t j0 = t * TILE, j1 = j0 + TILE < c1 ? j0 + TILE : c1;
        const topk *h[KB_KINDS] = {&j->dups[thread], &j->links[thread], &j->over[thread]};
        float cut[KB_KINDS];
        for (int k = 0; k < KB_KINDS; k++) cut[k] = h[k]->k > 0 && h[k]->n == h[k]->k ? h[k]->p[0].sim : -INFINITY;
        const kb_cand_win w = kb_cand_window(j->o, cut, j->slack);
        const float lo_pair = w.lo[KB_KIND_DUP] < w.lo[KB_KIND_LINK] ? w.lo[KB_KIND_DUP] : w.lo[KB_KIND_LINK];
        bool any = false;
        for (int i = 0; i < na; i++) {
            lo[i] = j->single[i0 + i] && w.lo[KB_KIND_OVER] < lo_pair ? w.lo[KB_KIND_OVER] : lo_pair;
            any |= lo[i] < INFINITY;
        }
        if (!any) continue;
        j->i8(q, i0, na, t, lo, acc, mask);
        int nc = 0;
        for (int i = 0; i < na; i++) {
            const size_t a = i0 + (size_t)i;
            size_t lo_b = j->incremental ? j0 : (j0 > a + 1 ? j0 : a + 1), hi_b = j->incremental ? (j1 < a ? j1 : a) : j1;
            if (lo_b >= hi_b) continue;
            uint64_t m = mask[i] & (hi_b - j0 >= 64 ? ~0ull : (1ull << (hi_b - j0)) - 1) & ~((1ull << (lo_b - j0)) - 1);
            for (; m; m &= m - 1) {
                const size_t b = j0 + (size_t)__builtin_ctzll(m);
                /* the pair's bound in double, then the kinds' rules on it */
                const double s = (double)q->s[a] * q->s[b] * (acc[(size_t)i * TILE + (b - j0)] - q->corr[a]),
                             err = (double)q->nrm[a] * q->res[b] + (double)q->res[a] * q->nres[b];
                const double ub = s + err, lb = s - err;
                if (ub >= w.lo[KB_KIND_DUP] ||
                    (ub >= w.lo[KB_KIND_LINK] && lb <= w.link_hi && j->topic[a] != j->topic[b]) ||
                    (ub >= w.lo[KB_KIND_OVER] && j->single[a] && j->single[b])) {
                    pa[nc] = vec + a * (size_t)D, pb[nc] = vec + b * (size_t)D;
                    ia[nc] = (uint32_t)i, ib[nc++] = (uint32_t)(b - j0);
                }
            }
        }
        if (!nc) continue;
        n_cand += (size_t)nc;
        if (j->dots_any) { /* the f32 similarity in any order, against the window */
            /* the column rows are cold (the int8 tile used their copies): ask for all at once */
            for (int c = 0; c < nc; c++)
                if (c == 0 || pb[c] != pb[c - 1])
                    for (int k = 0; k < D; k += 16) __builtin_prefetch(pb[c] + k);
            j->dots_any(pa, pb, nc, D, sim);
            int keep = 0;
            for (int c = 0; c < nc; c++) {
                const size_t a = i0 + ia[c], b = j0 + ib[c];
                if (kb_cand_take(&w, sim[c], j->topic[a] != j->topic[b], j->single[a] && j->single[b])) {
                    pa[keep] = pa[c], pb[keep] = pb[c], ia[keep] = ia[c], ib[keep++] = ib[c];
                }
            }
            nc = keep;
        }
        j->dots(pa, pb, nc, D, sim);
        for (int c = 0; c < nc; c++) visit(j, thread, i0 + ia[c], j0 + ib[c], sim[c]);
        n_exact += (size_t)nc;
    }
    j->n_cand[2 * thread] += n_cand;
    j->n_cand[2 * thread + 1] += n_exact;
}

static void i8_fill_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const job *j = ctx;
    kb_i8_fill((kb_i8 *)j->q, j->vec, (size_t)task);
}

static topk *heaps(int nt, int k) {
    topk *t = calloc((size_t)nt, sizeof *t);
    for (int i = 0; t && i < nt; i++) {
        t[i] = (topk){malloc((size_t)(k > 0 ? k : 0) * sizeof(kb_pair) + sizeof(kb_pair)), 0, k};
        if (!t[i].p) { for (int q = 0; q < i; q++) free(t[q].p); free(t); return NULL; }
    }
    return t;
}

static void heaps_free(topk *t, int nt) {
    for (int i = 0; t && i < nt; i++) free(t[i].p);
    free(t);
}

static void (*tile_kernel(void))(const float *, int, const float *, int, float *) {
    /* the AVX2 kernel when the CPU and OS allow it and HX_ISA does not force scalar */
    return hx_isa_current() >= HX_ISA_AVX2 ? kb_tile_avx2 : kb_tile_scalar;
}

#ifdef HX_HAVE_CUDA
/* the GPU path's view of thread 0's heaps (allpairs_cuda.h) */
static void sink_visit(void *ctx, size_t a, size_t b, float s) { visit(ctx, 0, a, b, s); }
static void sink_cut(void *ctx, float cut[KB_KINDS]) {
    job *j = ctx;
    const topk *t[KB_KINDS] = {&j->dups[0], &j->links[0], &j->over[0]};
    for (int k = 0; k < KB_KINDS; k++) cut[k] = t[k]->k > 0 && t[k]->n == t[k]->k ? t[k]->p[0].sim : -INFINITY;
}
#endif

/* What both entry-pair passes set up: per-thread top-k heaps for the three
 * kinds, the single-entry-topic flags and the tile scratch, in a job over
 * rows [row0, n_rows) (incremental: against every row; else against the
 * rows after each). */
typedef struct pairs_run {
    int nt, kd, kl, ko;
    topk *hd, *hl, *ho;
    uint8_t *single;
    float *scratch;
    kb_i8 q;
    char *i8_scratch;
    size_t *n_cand;
    job j;
} pairs_run;

/* Whether rows [row0, n_rows) against the rest go through int8 candidates:
 * KB_PAIRS_AUTO where the CPU has AVX512-VNNI and 128 or more rows are new
 * (the quantization of all rows costs about what 100 new rows cost on f32
 * tiles at 100,000 rows x 384); KB_PAIRS_I8 always (the scalar int8 kernel
 * below VNNI). Never for rows that are not finite with norms up to 16: the
 * slack assumes them. The slack covers the f32 similarity's rounding: any
 * order of the dim products is within dim 2^-24 |a| |b| of the real dot, so
 * two orders within twice that, plus 2^-20 for forming the bound in float. */
static void pairs_i8(pairs_run *P, hx_pool *pool, const kb_rows *r, size_t row0, size_t n_rows, kb_pairs_mode mode) {
    if (mode == KB_PAIRS_F32 || !r->n || n_rows <= row0) return;
    if (mode == KB_PAIRS_AUTO && (hx_isa_current() < HX_ISA_AVX512_VNNI || n_rows - row0 < 128)) return;
    P->i8_scratch = malloc((size_t)P->nt * I8_SCRATCH);
    P->n_cand = calloc(2 * (size_t)P->nt, sizeof *P->n_cand);
    if (!P->i8_scratch || !P->n_cand || !kb_i8_alloc(&P->q, r->n, r->dim)) goto f32; /* f32 tiles need less memory */
    P->j.q = &P->q;
    hx_pool_run(pool, (int64_t)((r->n + TILE - 1) / TILE), i8_fill_task, &P->j);
    /* |v| <= |s q| + |v - s q| = nres: a bound of the norms, NaN or infinite
     * for a row that is not finite */
    float mx = 0;
    for (size_t i = 0; i < r->n; i++) {
        if (!(P->q.nres[i] <= 16.0f)) goto f32;
        mx = P->q.nres[i] > mx ? P->q.nres[i] : mx;
    }
    const double m2 = (double)mx * mx;
    P->j.i8 = hx_isa_current() >= HX_ISA_AVX512_VNNI ? kb_i8_tile_vnni : kb_i8_tile_scalar;
    P->j.dots = P->j.kernel == kb_tile_avx2 ? kb_dots_fma : kb_dots_scalar;
    P->j.dots_any = P->j.kernel == kb_tile_avx2 ? kb_dots_any_avx2 : NULL;
    P->j.slack = (float)((r->dim + 16) * m2 / 8388608.0 + 1.0 / 1048576);
    P->j.i8_scratch = P->i8_scratch;
    P->j.n_cand = P->n_cand;
    return;
f32:
    free(P->i8_scratch); free(P->n_cand);
    P->i8_scratch = NULL, P->n_cand = NULL;
    kb_i8_free(&P->q);
    P->j.q = NULL;
}

static hx_status pairs_begin(pairs_run *P, hx_pool *pool, const kb_rows *r, size_t row0, size_t n_rows,
                             bool incremental, const kb_opts *o, kb_pairs_mode mode, hx_error *e) {
    memset(P, 0, sizeof *P);
    P->nt = hx_pool_threads(pool);
    P->kd = kb_keep_depth(o->max_dups), P->kl = kb_keep_depth(o->max_links), P->ko = kb_keep_depth(kb_max_overlaps(o));
    P->hd = heaps(P->nt, P->kd), P->hl = heaps(P->nt, P->kl), P->ho = heaps(P->nt, P->ko);
    P->single = malloc(r->n ? r->n : 1);
    P->scratch = malloc((size_t)P->nt * (TILE * TILE + (size_t)r->dim * TILE) * sizeof(float));
    if (!P->hd || !P->hl || !P->ho || !P->single || !P->scratch) return hx_err(e, HX_ERR_NOMEM, "insights: out of memory");
    for (size_t i = 0; i < r->n; i++) P->single[i] = r->count[r->topic[i]] == 1;
    P->j = (job){.vec = r->vec, .row0 = row0, .n_rows = n_rows, .n = r->n, .incremental = incremental, .dim = r->dim,
                 .o = o, .key = r->offset, .topic = r->topic, .single = P->single, .dups = P->hd, .links = P->hl,
                 .over = P->ho, .scratch = P->scratch, .kernel = tile_kernel()};
    pairs_i8(P, pool, r, row0, n_rows, mode);
    return HX_OK;
}

/* the stage's rows through whichever tiles pairs_begin chose */
static void pairs_run_tiles(pairs_run *P, hx_pool *pool) {
    if (P->j.n_rows > P->j.row0)
        hx_pool_run(pool, (int64_t)((P->j.n_rows - P->j.row0 + TILE - 1) / TILE), P->j.i8 ? tile_task_i8 : tile_task,
                    &P->j);
}

/* The heaps into the three lists when st is HX_OK; frees the run either way
 * (and the lists on failure). */
static hx_status pairs_end(pairs_run *P, hx_status st, kb_klist *dups, kb_klist *links, kb_klist *over1,
                           hx_error *e) {
    if (!st && !(st = heaps_to_klist(P->hd, P->nt, P->kd, dups, e)) && !(st = heaps_to_klist(P->hl, P->nt, P->kl, links, e)))
        st = heaps_to_klist(P->ho, P->nt, P->ko, over1, e);
    heaps_free(P->hd, P->nt); heaps_free(P->hl, P->nt); heaps_free(P->ho, P->nt);
    free(P->single); free(P->scratch); free(P->i8_scratch); free(P->n_cand);
    kb_i8_free(&P->q);
    if (st) { kb_klist_free(dups); kb_klist_free(links); kb_klist_free(over1); }
    return st;
}

hx_status kb_entry_pairs(hx_pool *pool, const kb_rows *r, size_t row0, const kb_opts *o, kb_klist *dups,
                         kb_klist *links, kb_klist *over1, hx_error *e) {
    return kb_entry_pairs_mode(pool, r, row0, o, KB_PAIRS_AUTO, dups, links, over1, e);
}

/* The stage's pairs on the GPU when o asks for it and the device takes them,
 * into thread 0's heaps: HX_OK, done; HX_ERR_UNSUPPORTED, declined or (AUTO)
 * failed, the heaps emptied and why (cap bytes) saying why for the log line:
 * the CPU's turn; any other status: CUDA was required and failed (e set). */
static hx_status pairs_on_gpu(pairs_run *P, const kb_rows *r, const kb_stage *s, const kb_opts *o, char *why,
                              size_t cap, hx_error *e) {
    if (s->lo >= s->hi) return HX_OK; /* no pairs: nothing to run anywhere */
    if (o->allpairs_device == HX_DEVICE_CPU) return HX_ERR_UNSUPPORTED;
#ifdef HX_HAVE_CUDA
    kb_pair_sink sink = {&P->j, sink_visit, sink_cut};
    hx_error ce = {0};
    hx_status cs = kb_allpairs_cuda(r, s, o, o->allpairs_device, P->j.kernel == kb_tile_avx2, o->allpairs_log, &sink, &ce);
    if (cs == HX_OK) return HX_OK;
    if (o->allpairs_device == HX_DEVICE_CUDA) return hx_err(e, cs, "%s", ce.msg);
    if (cs != HX_ERR_UNSUPPORTED) HX_WARN("%s: on the cpu instead", ce.msg);
    snprintf(why, cap, "; not on cuda: %s", ce.msg);
    P->hd[0].n = P->hl[0].n = P->ho[0].n = 0; /* a failed device pass may have visited some */
    return HX_ERR_UNSUPPORTED;
#else
    (void)P, (void)r, (void)why, (void)cap;
    if (o->allpairs_device == HX_DEVICE_CUDA)
        return hx_err(e, HX_ERR_UNSUPPORTED, "all-pairs on cuda: this build has no CUDA");
    return HX_ERR_UNSUPPORTED;
#endif
}

/* The stage's pairs on the CPU tiles (int8 candidates where pairs_i8 picks
 * them), with the log line o->allpairs_log asks for. */
static void pairs_on_cpu(pairs_run *P, hx_pool *pool, const kb_rows *r, const kb_stage *s, const kb_opts *o,
                         kb_pairs_mode mode, const char *why) {
    double t0 = hx_now_s();
    pairs_i8(P, pool, r, s->lo, s->hi, mode);
    pairs_run_tiles(P, pool);
    if (!o->allpairs_log || s->lo >= s->hi) return;
    char how[120], rows[96];
    size_t nc = 0, nx = 0;
    for (int t = 0; P->n_cand && t < P->nt; t++) nc += P->n_cand[2 * t], nx += P->n_cand[2 * t + 1];
    if (P->j.i8)
        snprintf(how, sizeof how, "%s int8 tiles, %zu candidates, %zu rescored in %s f32",
                 P->j.i8 == kb_i8_tile_vnni ? "vnni" : "scalar", nc, nx, P->j.kernel == kb_tile_avx2 ? "avx2" : "scalar");
    else snprintf(how, sizeof how, "%s f32 tiles", P->j.kernel == kb_tile_avx2 ? "avx2" : "scalar");
    if (s->incremental || (s->lo == 0 && s->hi == s->n)) snprintf(rows, sizeof rows, "%zu new of %zu rows", s->n - s->lo, s->n);
    else snprintf(rows, sizeof rows, "pairs of rows %zu..%zu of %zu", s->lo, s->hi, s->n);
    fprintf(stderr, "all-pairs: cpu (%s, %d threads), %s x %d, %.3f s%s\n", how, P->nt, rows, r->dim,
            hx_now_s() - t0, why);
}

hx_status kb_entry_pairs_mode(hx_pool *pool, const kb_rows *r, size_t row0, const kb_opts *o, kb_pairs_mode mode,
                              kb_klist *dups, kb_klist *links, kb_klist *over1, hx_error *e) {
    memset(dups, 0, sizeof *dups); memset(links, 0, sizeof *links); memset(over1, 0, sizeof *over1);
    const kb_stage s = {r->n, row0 < r->n ? row0 : r->n, r->n, row0 > 0};
    pairs_run P;
    /* the int8 set-up waits for the GPU's answer: pairs_begin's CPU part is cheap */
    hx_status st = pairs_begin(&P, pool, r, s.lo, s.hi, s.incremental, o, KB_PAIRS_F32, e);
    if (st) return pairs_end(&P, st, dups, links, over1, e);
    char why[200] = ""; /* for the log line: why the GPU did not take it */
    st = pairs_on_gpu(&P, r, &s, o, why, sizeof why, e);
    if (st != HX_ERR_UNSUPPORTED || o->allpairs_device == HX_DEVICE_CUDA) return pairs_end(&P, st, dups, links, over1, e);
    pairs_on_cpu(&P, pool, r, &s, o, mode, why);
    return pairs_end(&P, HX_OK, dups, links, over1, e);
}

hx_status kb_entry_pairs_rows(hx_pool *pool, const kb_rows *r, size_t row_lo, size_t row_hi, const kb_opts *o,
                              kb_klist *dups, kb_klist *links, kb_klist *over1, bool *on_gpu, hx_error *e) {
    memset(dups, 0, sizeof *dups); memset(links, 0, sizeof *links); memset(over1, 0, sizeof *over1);
    if (on_gpu) *on_gpu = false;
    if (row_hi > r->n) row_hi = r->n;
    if (row_lo > row_hi) row_lo = row_hi;
    /* full mode over rows [row_lo, row_hi): each row against the rows after it */
    const kb_stage s = {r->n, row_lo, row_hi, false};
    pairs_run P;
    hx_status st = pairs_begin(&P, pool, r, row_lo, row_hi, false, o, KB_PAIRS_F32, e);
    if (st) return pairs_end(&P, st, dups, links, over1, e);
    char why[200] = "";
    st = pairs_on_gpu(&P, r, &s, o, why, sizeof why, e);
    if (st == HX_OK && on_gpu) *on_gpu = row_lo < row_hi;
    if (st != HX_ERR_UNSUPPORTED || o->allpairs_device == HX_DEVICE_CUDA) return pairs_end(&P, st, dups, links, over1, e);
    pairs_on_cpu(&P, pool, r, &s, o, KB_PAIRS_AUTO, why);
    return pairs_end(&P, HX_OK, dups, links, over1, e);
}

hx_status kb_multi_overlaps(hx_pool *pool, const kb_rows *r, const kb_opts *o, kb_klist *over, hx_error *e) {
    memset(over, 0, sizeof *over);
    int T = r->n_topics, dim = r->dim, nt = hx_pool_threads(pool), ko = kb_keep_depth(kb_max_overlaps(o));
    /* rows: unit centroids of the topics with 2+ entries (accumulated once, in
     * double), then the single-entry topics' own vectors; only pairs with a
     * multi-entry row are formed */
    int *row = malloc((size_t)(T ? T : 1) * sizeof *row);
    uint64_t *key = malloc((size_t)(T ? T : 1) * sizeof *key);
    double *acc = NULL;
    float *rows = NULL, *scratch = NULL;
    topk *ho = NULL;
    hx_status st = HX_OK;
    if (!row || !key) { st = hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); goto done; }
    int n_multi = 0, n_rows = 0;
    for (int t = 0; t < T; t++) if (r->count[t] > 1) { row[t] = n_multi; key[n_multi++] = (uint64_t)t; }
    if (n_multi == 0) { st = heaps_to_klist(NULL, 0, ko, over, e); goto done; }
    n_rows = n_multi;
    for (int t = 0; t < T; t++) if (r->count[t] == 1) { row[t] = n_rows; key[n_rows++] = (uint64_t)t; }
    acc = calloc((size_t)n_multi * (size_t)dim, sizeof *acc);
    rows = malloc((size_t)n_rows * (size_t)dim * sizeof *rows);
    scratch = malloc((size_t)nt * (TILE * TILE + (size_t)dim * TILE) * sizeof(float));
    ho = heaps(nt, ko);
    if (!acc || !rows || !scratch || !ho) { st = hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); goto done; }
    for (size_t i = 0; i < r->n; i++) {
        int t = r->topic[i];
        const float *v = r->vec + i * (size_t)dim;
        if (r->count[t] == 1) { memcpy(rows + (size_t)row[t] * dim, v, (size_t)dim * sizeof *rows); continue; }
        double *c = acc + (size_t)row[t] * dim;
        for (int k = 0; k < dim; k++) c[k] += v[k];
    }
    for (int q = 0; q < n_multi; q++) {
        double *c = acc + (size_t)q * dim, s = 0;
        for (int k = 0; k < dim; k++) s += c[k] * c[k];
        s = s > 0 ? 1.0 / sqrt(s) : 0;
        for (int k = 0; k < dim; k++) rows[(size_t)q * dim + k] = (float)(c[k] * s);
    }
    job j = {.vec = rows, .row0 = 0, .n_rows = (size_t)n_multi, .n = (size_t)n_rows, .dim = dim, .o = o, .key = key,
             .over = ho, .scratch = scratch, .kernel = tile_kernel()};
    hx_pool_run(pool, (int64_t)((n_multi + TILE - 1) / TILE), tile_task, &j);
    st = heaps_to_klist(ho, nt, ko, over, e);
done:
    heaps_free(ho, nt);
    free(row); free(key); free(acc); free(rows); free(scratch);
    return st;
}

/* ---- kb_analyze: one full analysis ---- */

void kb_insights_free(kb_insights *in) {
    free(in->dups); free(in->links); free(in->overlaps);
    for (int i = 0; i < in->n_topics; i++) free(in->topics[i]);
    free(in->topics);
    memset(in, 0, sizeof *in);
}

typedef struct named { kb_topic_pair p; const char *a, *b; } named;

static int named_cmp(const void *x, const void *y) {
    const named *a = x, *b = y;
    if (a->p.sim != b->p.sim) return a->p.sim > b->p.sim ? -1 : 1;
    int c = strcmp(a->a, b->a);
    return c ? c : strcmp(a->b, b->b);
}

static kb_pair *top_copy(const kb_klist *l, int k, int *n) {
    *n = l->n < k ? l->n : k;
    kb_pair *p = malloc((size_t)(*n ? *n : 1) * sizeof *p);
    if (p && *n) memcpy(p, l->p, (size_t)*n * sizeof *p);
    return p;
}

hx_status kb_insights_from(const kb_klist *dups, const kb_klist *links, const kb_klist *over, const kb_opts *o,
                           char **names, int n_topics, kb_insights *out, hx_error *e) {
    memset(out, 0, sizeof *out);
    int n_over = 0;
    out->dups = top_copy(dups, o->max_dups, &out->n_dups);
    out->links = top_copy(links, o->max_links, &out->n_links);
    kb_pair *ov = top_copy(over, kb_max_overlaps(o), &n_over);
    named *nm = malloc((size_t)(n_over ? n_over : 1) * sizeof *nm);
    out->overlaps = malloc((size_t)(n_over ? n_over : 1) * sizeof *out->overlaps);
    out->topics = malloc((size_t)(n_topics ? n_topics : 1) * sizeof *out->topics);
    if (!out->dups || !out->links || !ov || !nm || !out->overlaps || !out->topics) goto oom;
    for (int t = 0; t < n_topics; t++) {
        if (!(out->topics[t] = strdup(names[t]))) goto oom;
        out->n_topics = t + 1;
    }
    /* a topic pair reads in name order, ties in name order: the same report
     * whatever ids the topics got (full and incremental passes number them apart) */
    for (int i = 0; i < n_over; i++) {
        int a = (int)ov[i].a, b = (int)ov[i].b;
        if (strcmp(names[a], names[b]) > 0) { int t = a; a = b; b = t; }
        nm[i] = (named){{a, b, ov[i].sim}, names[a], names[b]};
    }
    qsort(nm, (size_t)n_over, sizeof *nm, named_cmp);
    for (int i = 0; i < n_over; i++) out->overlaps[i] = nm[i].p;
    out->n_overlaps = n_over;
    free(ov); free(nm);
    return HX_OK;
oom:
    free(ov); free(nm);
    kb_insights_free(out);
    return hx_err(e, HX_ERR_NOMEM, "insights: out of memory");
}

/* Distinct topics in order of first appearance through an open-addressing hash
 * map (O(n) however many topics): topic[i] = id of names[i]; ids index *ids_names. */
hx_status kb_topic_table(const char *const *names, size_t n, int *topic, char ***ids_names, int *n_topics, hx_error *e) {
    size_t cap = 64;
    while (cap < 2 * n) cap *= 2;
    int *slot = malloc(cap * sizeof *slot);
    const char **tab = malloc((n ? n : 1) * sizeof *tab);
    int T = 0;
    if (!slot || !tab) { free(slot); free(tab); return hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); }
    memset(slot, 0xff, cap * sizeof *slot); /* -1: empty */
    for (size_t i = 0; i < n; i++) {
        size_t h = (size_t)hx_fnv1a_str(names[i], HX_FNV_INIT_SHORT) & (cap - 1);
        while (slot[h] >= 0 && strcmp(tab[slot[h]], names[i])) h = (h + 1) & (cap - 1);
        if (slot[h] < 0) { slot[h] = T; tab[T++] = names[i]; }
        topic[i] = slot[h];
    }
    free(slot);
    *ids_names = (char **)tab; /* pointers into names: the caller copies what it keeps */
    *n_topics = T;
    return HX_OK;
}

hx_status kb_analyze(hx_pool *pool, const kb_log *log, const size_t *idx, const float *vec, size_t n, int dim,
                     const kb_opts *o, kb_insights *out, hx_error *e) {
    memset(out, 0, sizeof *out);
    uint64_t *off = malloc((n ? n : 1) * sizeof *off);
    const char **nm = malloc((n ? n : 1) * sizeof *nm);
    int *topic = malloc((n ? n : 1) * sizeof *topic), *count = NULL, T = 0;
    char **tab = NULL;
    kb_klist d = {0}, l = {0}, o1 = {0}, om = {0};
    hx_status st = HX_OK;
    if (!off || !nm || !topic) { st = hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) { off[i] = log->e[idx[i]].offset; nm[i] = log->e[idx[i]].topic; }
    if ((st = kb_topic_table(nm, n, topic, &tab, &T, e))) goto done;
    if (!(count = calloc((size_t)(T ? T : 1), sizeof *count))) { st = hx_err(e, HX_ERR_NOMEM, "insights: out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) count[topic[i]]++;
    kb_rows r = {n, dim, off, topic, vec, T, count};
    if ((st = kb_entry_pairs(pool, &r, 0, o, &d, &l, &o1, e)) || (st = kb_multi_overlaps(pool, &r, o, &om, e)) ||
        (st = kb_klist_union(&o1, &om, kb_keep_depth(kb_max_overlaps(o)), e)))
        goto done;
    st = kb_insights_from(&d, &l, &o1, o, tab, T, out, e);
done:
    kb_klist_free(&d); kb_klist_free(&l); kb_klist_free(&o1); kb_klist_free(&om);
    free(off); free(nm); free(topic); free(count); free(tab);
    return st;
}

/* ---- the report ---- */

static cJSON *pair_json(const kb_log *log, const kb_pair *p) {
    const kb_entry *a = kb_log_find(log, p->a), *b = kb_log_find(log, p->b);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "a", (double)p->a);
    cJSON_AddNumberToObject(o, "b", (double)p->b);
    cJSON_AddStringToObject(o, "topic_a", a->topic);
    cJSON_AddStringToObject(o, "topic_b", b->topic);
    if (a->title) cJSON_AddStringToObject(o, "title_a", a->title);
    if (b->title) cJSON_AddStringToObject(o, "title_b", b->title);
    cJSON_AddNumberToObject(o, "similarity", round(p->sim * 10000) / 10000);
    return o;
}

typedef struct dup_cluster { uint64_t first; float best, worst; int start, n; } dup_cluster;

static int u64_cmp(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static int cluster_cmp(const void *x, const void *y) {
    const dup_cluster *a = x, *b = y;
    if (a->best != b->best) return a->best > b->best ? -1 : 1;
    return a->first < b->first ? -1 : a->first > b->first;   /* clusters are disjoint */
}

static int uf_root(int *par, int i) {
    while (par[i] != i) i = par[i] = par[par[i]];
    return i;
}

static int off_index(const uint64_t *off, int n, uint64_t o) {
    const uint64_t *p = bsearch(&o, off, (size_t)n, sizeof *off, u64_cmp);
    return (int)(p - off);
}

/* Near-duplicate clusters: connected components of the reported pairs, each
 * {"members": offsets ascending, "similarity": its best pair, "min_similarity":
 * its weakest}, best cluster first (then by first member). O(p log p) for p pairs. */
static cJSON *dup_clusters_json(const kb_insights *in) {
    cJSON *arr = cJSON_CreateArray();
    int n = 2 * in->n_dups, nd = 0, nc = 0;
    if (!arr || n == 0) return arr;
    uint64_t *off = malloc((size_t)n * sizeof *off), *mem = malloc((size_t)n * sizeof *mem);
    int *par = malloc((size_t)n * sizeof *par), *cl = malloc((size_t)n * sizeof *cl), *fill = calloc((size_t)n, sizeof *fill);
    dup_cluster *c = malloc((size_t)n * sizeof *c);
    if (!off || !mem || !par || !cl || !fill || !c) goto done;
    for (int i = 0; i < in->n_dups; i++) { off[2 * i] = in->dups[i].a; off[2 * i + 1] = in->dups[i].b; }
    qsort(off, (size_t)n, sizeof *off, u64_cmp);
    for (int i = 0; i < n; i++) if (i == 0 || off[i] != off[nd - 1]) off[nd++] = off[i];   /* distinct, ascending */
    for (int k = 0; k < nd; k++) par[k] = k;
    for (int i = 0; i < in->n_dups; i++)
        par[uf_root(par, off_index(off, nd, in->dups[i].a))] = uf_root(par, off_index(off, nd, in->dups[i].b));
    /* a cluster per root, in order of its smallest member (members ascend) */
    for (int k = 0; k < nd; k++) cl[k] = -1;
    for (int k = 0; k < nd; k++) {
        int r = uf_root(par, k);
        if (cl[r] < 0) { cl[r] = nc; c[nc++] = (dup_cluster){off[k], 0.0f, 2.0f, 0, 0}; }
        c[cl[r]].n++;
    }
    for (int q = 1; q < nc; q++) c[q].start = c[q - 1].start + c[q - 1].n;
    for (int k = 0; k < nd; k++) { int q = cl[uf_root(par, k)]; mem[c[q].start + fill[q]++] = off[k]; }
    for (int i = 0; i < in->n_dups; i++) {
        dup_cluster *x = &c[cl[uf_root(par, off_index(off, nd, in->dups[i].a))]];
        if (in->dups[i].sim > x->best) x->best = in->dups[i].sim;
        if (in->dups[i].sim < x->worst) x->worst = in->dups[i].sim;
    }
    qsort(c, (size_t)nc, sizeof *c, cluster_cmp);
    for (int q = 0; q < nc; q++) {
        cJSON *o = cJSON_CreateObject(), *ma = cJSON_AddArrayToObject(o, "members");
        for (int k = 0; k < c[q].n; k++) cJSON_AddItemToArray(ma, cJSON_CreateNumber((double)mem[c[q].start + k]));
        cJSON_AddNumberToObject(o, "similarity", round(c[q].best * 10000) / 10000);
        cJSON_AddNumberToObject(o, "min_similarity", round(c[q].worst * 10000) / 10000);
        cJSON_AddItemToArray(arr, o);
    }
done:
    free(off); free(mem); free(par); free(cl); free(fill); free(c);
    return arr;
}

static cJSON *report_json(const kb_log *log, const kb_insights *in, size_t n_live, const char *embedder) {
    cJSON *r = cJSON_CreateObject();
    cJSON_AddNumberToObject(r, "entries", (double)n_live);
    if (embedder) cJSON_AddStringToObject(r, "embedder", embedder);
    cJSON *d = cJSON_AddArrayToObject(r, "near_duplicates"), *l = cJSON_AddArrayToObject(r, "cross_links");
    cJSON *t = cJSON_AddArrayToObject(r, "topic_overlaps");
    for (int i = 0; i < in->n_dups; i++) cJSON_AddItemToArray(d, pair_json(log, &in->dups[i]));
    for (int i = 0; i < in->n_links; i++) cJSON_AddItemToArray(l, pair_json(log, &in->links[i]));
    for (int i = 0; i < in->n_overlaps; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "a", in->topics[in->overlaps[i].a]);
        cJSON_AddStringToObject(o, "b", in->topics[in->overlaps[i].b]);
        cJSON_AddNumberToObject(o, "similarity", round(in->overlaps[i].sim * 10000) / 10000);
        cJSON_AddItemToArray(t, o);
    }
    cJSON_AddItemToObject(r, "dup_clusters", dup_clusters_json(in));
    return r;
}

hx_status kb_write_report(const char *path, const kb_log *log, const kb_insights *in, size_t n_live,
                          const char *embedder, hx_error *e) {
    cJSON *r = report_json(log, in, n_live, embedder);
    char *s = r ? cJSON_Print(r) : NULL;
    cJSON_Delete(r);
    if (!s) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    size_t n = strlen(s);
    char *withnl = malloc(n + 2);
    if (!withnl) { free(s); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
    memcpy(withnl, s, n);
    withnl[n] = '\n';
    free(s);
    hx_status st = hx_write_file_atomic(path, withnl, n + 1, e);
    free(withnl);
    return st;
}

/* ---- the summary people read ---- */

#define TITLE_COLS 72  /* a title longer than this (in code points) is cut at a word */
#define SHOW_LINKS 12
#define SHOW_MISFILED 10
#define SHOW_PATTERNS 8
#define SHOW_MEMBERS 5
#define SHOW_OVERLAPS 8

/* s in at most max code points: whole when it fits, else cut after the last
 * whole word that fits (at a code point when that would keep less than half)
 * and ended with "…"; only the first line of a multi-line s. Never splits a
 * UTF-8 sequence; out (cap bytes) always ends in NUL. */
void kb_fit_title(const char *s, int max, char *out, size_t cap) {
    if (cap == 0) return;
    if (max < 2) max = 2;
    size_t n = strcspn(s, "\n\r"), cut = n, word_cut = 0;
    bool ellipsis = s[n] != 0;   /* more lines follow */
    int cps = 0;
    for (size_t i = 0; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) == 0x80) continue;  /* inside a code point */
        if (cps == max - 1) cut = i;                         /* the first max-1 code points end here */
        if (++cps > max) { ellipsis = true; break; }
        if (s[i] == ' ' && cps - 1 <= max - 1 && cps - 1 >= max / 2) word_cut = i;
    }
    if (cps <= max) cut = n;
    else if (word_cut) cut = word_cut;
    while (ellipsis && cut > 0 && strchr(" ,;:-", s[cut - 1])) cut--;
    size_t room = cap - 1 - (ellipsis && cap > 4 ? 3 : 0);
    if (cut > room) { /* a small buffer: back off to a code point start */
        cut = room;
        while (cut > 0 && ((unsigned char)s[cut] & 0xC0) == 0x80) cut--;
    }
    memcpy(out, s, cut);
    if (ellipsis && cap > 4) { memcpy(out + cut, "\xE2\x80\xA6", 3); cut += 3; }
    out[cut] = 0;
}

static const char *label(const kb_entry *en) { return en && en->title ? en->title : en ? en->text : "?"; }

static void put_entry(FILE *f, const char *lead, const kb_entry *en) {
    char t[TITLE_COLS * 4 + 8];
    kb_fit_title(label(en), TITLE_COLS, t, sizeof t);
    fprintf(f, "%s[%s] %s\n", lead, en ? en->topic : "?", t);
}

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static void more(FILE *f, int shown, int total) {
    if (total > shown) fprintf(f, "  ... %d more in insights.json\n", total - shown);
}

void kb_print_report(FILE *f, const kb_log *log, const cJSON *r, size_t n_live, int n_topics) {
    fprintf(f, "%zu entries in %d topics\n", n_live, n_topics);
    const cJSON *it, *x;
    /* 1. entries to move */
    const cJSON *mis = cJSON_GetObjectItemCaseSensitive(r, "misfiled");
    if (cJSON_IsArray(mis)) {
        int n = cJSON_GetArraySize(mis), k = 0;
        fprintf(f, "\nlikely misfiled (%d, by %s):%s\n", n,
                strcmp(str(r, "classifier"), "llm") ? "nearest topic centroid" : "the LLM", n ? "" : " none");
        cJSON_ArrayForEach(it, mis) {
            if (k++ == SHOW_MISFILED) break;
            const kb_entry *en = kb_log_find(log, (uint64_t)num(it, "id"));
            char t[TITLE_COLS * 4 + 8];
            kb_fit_title(en ? label(en) : str(it, "title"), TITLE_COLS, t, sizeof t);
            fprintf(f, "  %.3f  %s\n         filed under %s, reads like %s\n", num(it, "probability"), t,
                    str(it, "topic"), str(it, "predicted"));
        }
        more(f, SHOW_MISFILED, n);
    }
    /* 2. entries to merge: one block per cluster */
    const cJSON *dc = cJSON_GetObjectItemCaseSensitive(r, "dup_clusters");
    int n_pairs = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r, "near_duplicates"));
    fprintf(f, "\nnear-duplicates to merge (%d clusters, %d pairs):%s\n", cJSON_GetArraySize(dc), n_pairs,
            n_pairs ? "" : " none");
    cJSON_ArrayForEach(it, dc) {
        int k = 0;
        char lead[32];
        cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(it, "members")) {
            if (k == 0) snprintf(lead, sizeof lead, "  %.3f  ", num(it, "similarity"));
            put_entry(f, k++ ? "         " : lead, kb_log_find(log, (uint64_t)x->valuedouble));
        }
    }
    /* 3. related entries across topics */
    const cJSON *cl = cJSON_GetObjectItemCaseSensitive(r, "cross_links");
    int nl = cJSON_GetArraySize(cl), k = 0;
    fprintf(f, "\ncross-links (%d):%s\n", nl, nl ? "" : " none");
    cJSON_ArrayForEach(it, cl) {
        if (k++ == SHOW_LINKS) break;
        char lead[32];
        snprintf(lead, sizeof lead, "  %.3f  ", num(it, "similarity"));
        put_entry(f, lead, kb_log_find(log, (uint64_t)num(it, "a")));
        put_entry(f, "    <->  ", kb_log_find(log, (uint64_t)num(it, "b")));
    }
    more(f, SHOW_LINKS, nl);
    const cJSON *pa = cJSON_GetObjectItemCaseSensitive(r, "patterns");
    if (cJSON_IsArray(pa) && cJSON_GetArraySize(pa)) {
        int np = cJSON_GetArraySize(pa);
        fprintf(f, "\npatterns across topics (%d):\n", np);
        k = 0;
        cJSON_ArrayForEach(it, pa) {
            if (k++ == SHOW_PATTERNS) break;
            const cJSON *mem = cJSON_GetObjectItemCaseSensitive(it, "members");
            int nm = cJSON_GetArraySize(mem), q = 0;
            fprintf(f, "  %d entries in", nm);
            cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(it, "topics")) fprintf(f, "%s%s", q++ ? ", " : " ",
                                                                                          cJSON_IsString(x) ? x->valuestring : "?");
            if (*str(it, "name")) fprintf(f, ": %s", str(it, "name"));
            fprintf(f, "\n");
            q = 0;
            cJSON_ArrayForEach(x, mem) {
                if (q++ == SHOW_MEMBERS) { fprintf(f, "         ... %d more\n", nm - SHOW_MEMBERS); break; }
                put_entry(f, "         ", kb_log_find(log, (uint64_t)x->valuedouble));
            }
        }
        more(f, SHOW_PATTERNS, np);
    }
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(r, "topic_overlaps");
    int no = cJSON_GetArraySize(ov);
    fprintf(f, "\ntopic overlaps (%d):%s\n", no, no ? "" : " none");
    k = 0;
    cJSON_ArrayForEach(it, ov) {
        if (k++ == SHOW_OVERLAPS) break;
        fprintf(f, "  %.3f  %s <-> %s\n", num(it, "similarity"), str(it, "a"), str(it, "b"));
    }
    more(f, SHOW_OVERLAPS, no);
}

void kb_print_summary(FILE *f, const kb_log *log, const kb_insights *in, size_t n_live) {
    cJSON *r = report_json(log, in, n_live, NULL);
    if (!r) { fprintf(f, "%zu entries in %d topics (out of memory for the summary)\n", n_live, in->n_topics); return; }
    kb_print_report(f, log, r, n_live, in->n_topics);
    cJSON_Delete(r);
}
