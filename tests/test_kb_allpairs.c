/* test_kb_allpairs.c — the entry all-pairs stage's GPU path (allpairs_cuda.h)
 * and the CPU's int8 candidate tiles (allpairs.h).
 *
 * On every machine: the int8 bound holds (f32 similarity within it plus the
 * slack) and the VNNI sums equal the scalar kernel's; kb_entry_pairs_mode's
 * int8 path gives the f32 tiles' lists bit for bit at each ISA level.
 * On every machine: the fp16 error bound (kb_f16_eps) holds for similarities
 * formed as the tensor cores do (fp16 operands, f32 sums of 16-term blocks)
 * against the CPU kernel's f32 similarity, on random, clustered and tiny-valued
 * rows; and every pair the CPU keeps lies inside the candidate window
 * (kb_cand_window / kb_cand_take) formed from the final cuts, the tightest the
 * device ever uses, while most pairs lie outside it.
 * On every machine: the device stage's tiling (kb_stage_*, kb_piece_halves),
 * walked on the CPU as the driver and the tile kernel walk it, forms each
 * pair of a stage exactly once: over the row ranges of 1-5 MPI ranks (cuts
 * inside 128-row blocks included), incremental stages, and pieces redone as
 * halves at random (candidate overflow).
 * With CUDA and a usable GPU: kb_entry_pairs on the GPU equals the CPU's
 * lists bit for bit (pairs, similarities, cuts) on random and clustered rows
 * with exact and near ties, full and incremental, with a tiny candidate
 * buffer (overflow and redo), and dims that are no multiple of 32; and
 * kb_entry_pairs_rows (an MPI rank's share) on the GPU equals the CPU's for
 * each range of a 3-way split. */
#include "kb/analyze.h"
#include "kb/allpairs.h"
#include "kb/allpairs_cuda.h"
#include "core/core.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A case's thresholds and list sizes, pairs on the CPU. */
static kb_opts cpu_opts(float dup, float lo, float hi, float top, int kd, int kl, int ko) {
    return (kb_opts){.dup_threshold = dup, .link_low = lo, .link_high = hi, .topic_threshold = top, .max_dups = kd,
                     .max_links = kl, .max_overlaps = ko, .allpairs_device = HX_DEVICE_CPU};
}

static int failures;
#define CHECK(c, ...) do { if (!(c)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

static uint64_t rng = 88172645463325252ull;
static double urand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (double)(rng >> 11) / 9007199254740992.0; }
static double grand(void) { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }

static void unit(float *v, int dim) {
    double s = 0;
    for (int k = 0; k < dim; k++) s += (double)v[k] * v[k];
    s = s > 0 ? 1 / sqrt(s) : 0;
    for (int k = 0; k < dim; k++) v[k] = (float)(v[k] * s);
}

/* rows: kind 0 random; 1 clusters of near-duplicates with exact copies and
 * one-ulp neighbours (ties and near ties); 2 tiny components (fp16 subnormals);
 * 3 lexical-like: about 60 signed components at a few tf levels, every 5th row
 * a copy of an earlier one with one component changed */
static float *make_rows(size_t n, int dim, int kind) {
    float *v = malloc(n * (size_t)dim * sizeof *v);
    int nc = (int)(n / 40) + 1;
    float *ctr = malloc((size_t)nc * dim * sizeof *ctr);
    for (size_t i = 0; i < (size_t)nc * dim; i++) ctr[i] = (float)grand();
    for (size_t i = 0; i < n; i++) {
        float *r = v + i * dim;
        if (kind == 1 && i % 7 == 3 && i > 0) { memcpy(r, r - dim, (size_t)dim * sizeof *r); continue; } /* exact copy */
        if (kind == 1 && i % 11 == 5 && i > 0) { /* the previous row, one element one ulp off */
            memcpy(r, r - dim, (size_t)dim * sizeof *r);
            r[i % dim] = nextafterf(r[i % dim], 2.0f);
            continue;
        }
        if (kind == 3) {
            if (i % 5 == 2 && i > 2) {
                memcpy(r, v + (size_t)(urand() * (double)i) * dim, (size_t)dim * sizeof *r);
                r[(size_t)(urand() * dim)] += 0.1f;
            } else {
                memset(r, 0, (size_t)dim * sizeof *r);
                for (int w = 0; w < 60; w++) {
                    double u = urand();
                    r[(size_t)(urand() * dim)] += (float)((urand() < 0.5 ? -1 : 1) * (u < 0.8 ? 1.0 : u < 0.95 ? 1.693 : 2.099));
                }
            }
            unit(r, dim);
            continue;
        }
        const float *c = ctr + (size_t)(urand() * nc) * dim;
        double spread = kind == 1 ? 0.05 + 0.3 * urand() : 1.0;
        for (int k = 0; k < dim; k++) r[k] = (float)((kind == 1 ? c[k] : 0) + spread * grand());
        if (kind == 2)
            for (int k = 0; k < dim; k++) if (k % 3) r[k] *= 1e-6f;
        unit(r, dim);
    }
    free(ctr);
    return v;
}

/* rows rounded to fp16 (as the device holds them), as floats */
static float *halves(const float *v, size_t n, int dim) {
    float *h = malloc(n * (size_t)dim * sizeof *h);
    for (size_t i = 0; i < n * (size_t)dim; i++) h[i] = hx_fp16_to_fp32(hx_fp32_to_fp16(v[i]));
    return h;
}

/* the similarity as the tensor cores form it from fp16 rows (halves): exact
 * products, each 16-term block summed and then added to an f32 accumulator */
static float sim_f16(const float *a, const float *b, int dim) {
    float acc = 0;
    for (int k0 = 0; k0 < dim; k0 += 16) {
        float blk = 0;
        for (int k = k0; k < k0 + 16 && k < dim; k++) blk += (float)((double)a[k] * b[k]);
        acc += blk;
    }
    return acc;
}

/* the CPU's f32 similarity, through the tile kernel kb_entry_pairs uses */
static float sim_cpu(const float *a, const float *b, int dim) {
    static float bt[512 * 64], s[64 * 64]; /* dim <= 512 */
    for (int k = 0; k < dim; k++) { bt[(size_t)k * 64] = b[k]; for (int j = 1; j < 64; j++) bt[(size_t)k * 64 + j] = 0; }
    if (hx_isa_current() >= HX_ISA_AVX2) kb_tile_avx2(a, 1, bt, dim, s);
    else kb_tile_scalar(a, 1, bt, dim, s);
    return s[0];
}

static float max_norm(const float *v, size_t n, int dim) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < dim; k++) s += (double)v[i * dim + k] * v[i * dim + k];
        if (s > m) m = s;
    }
    return (float)(sqrt(m) * (1 + 1e-6));
}

static void test_eps(void) {
    const int dims[] = {384, 100, 64};
    for (int di = 0; di < 3; di++)
        for (int kind = 0; kind < 3; kind++) {
            int dim = dims[di];
            size_t n = 160;
            float *v = make_rows(n, dim, kind), *h = halves(v, n, dim);
            float eps = kb_f16_eps(dim, max_norm(v, n, dim)), worst = 0;
            for (size_t a = 0; a < n; a++)
                for (size_t b = a + 1; b < n; b++) {
                    float d = fabsf(sim_f16(h + a * dim, h + b * dim, dim) - sim_cpu(v + a * dim, v + b * dim, dim));
                    if (d > worst) worst = d;
                }
            CHECK(worst <= eps, "dim %d kind %d: |fp16 - f32| similarity %g over the bound %g", dim, kind, worst, eps);
            CHECK(eps < 2e-3f, "dim %d: the bound %g is too loose to select anything", dim, eps);
            printf("eps: dim %3d rows %d: worst |fp16 - f32| %.2e, bound %.2e\n", dim, kind, worst, eps);
            free(v); free(h);
        }
}

typedef struct set {
    size_t n;
    int dim;
    float *v;
    uint64_t *off;
    int *topic, *count, n_topics;
} set;

/* topics: groups of 25 rows, every 9th row alone in its own topic */
static set make_set(size_t n, int dim, int kind) {
    set s = {n, dim, make_rows(n, dim, kind), malloc(n * 8), malloc(n * sizeof(int)), NULL, 0};
    int *single = malloc(n * sizeof(int)), n_group = (int)(n / 25) + 1;
    int ns = 0;
    for (size_t i = 0; i < n; i++) single[i] = i % 9 == 4 ? ns++ : -1;
    s.n_topics = n_group + ns;
    s.count = calloc((size_t)s.n_topics, sizeof(int));
    for (size_t i = 0; i < n; i++) {
        s.off[i] = 1000 + 97 * (uint64_t)i;
        s.topic[i] = single[i] >= 0 ? n_group + single[i] : (int)((i * 7) % (size_t)n_group);
        s.count[s.topic[i]]++;
    }
    free(single);
    return s;
}

static void set_free(set *s) { free(s->v); free(s->off); free(s->topic); free(s->count); }

static kb_rows rows_of(const set *s) {
    return (kb_rows){s->n, s->dim, s->off, s->topic, s->v, s->n_topics, s->count};
}

static size_t row_of_off(uint64_t off) { return (size_t)((off - 1000) / 97); }

/* every kept pair inside the window of the final cuts; most pairs outside */
static void test_window(void) {
    hx_pool *pool = hx_pool_create(2);
    for (int kind = 0; kind < 2; kind++) {
        set s = make_set(1500, 384, kind);
        kb_rows r = rows_of(&s);
        float *h = halves(s.v, s.n, 384);
        kb_opts o = {.dup_threshold = kind ? 0.92f : 0.15f, .link_low = kind ? 0.75f : 0.1f,
                     .link_high = kind ? 0.92f : 0.15f, .topic_threshold = kind ? 0.6f : 0.1f, .max_dups = 5,
                     .max_links = 7, .max_overlaps = 4, .allpairs_device = HX_DEVICE_CPU};
        kb_klist l[KB_KINDS];
        hx_error e = {0};
        CHECK(kb_entry_pairs(pool, &r, 0, &o, &l[0], &l[1], &l[2], &e) == HX_OK, "%s", e.msg);
        float cut[KB_KINDS], eps = kb_f16_eps(384, max_norm(s.v, s.n, 384));
        for (int k = 0; k < KB_KINDS; k++) {
            cut[k] = l[k].has_cut ? l[k].cut.sim : -INFINITY;
            CHECK(l[k].n > 0 && l[k].has_cut, "rows %d kind %d: the list should fill (%d pairs)", kind, k, l[k].n);
        }
        kb_cand_win w = kb_cand_window(&o, cut, eps);
        for (int k = 0; k < KB_KINDS; k++)
            for (int q = 0; q < l[k].n; q++) {
                size_t a, b;
                if (k == KB_KIND_OVER) { /* topic ids of single-entry topics: find their rows */
                    a = b = SIZE_MAX;
                    for (size_t i = 0; i < s.n; i++) {
                        if ((uint64_t)s.topic[i] == l[k].p[q].a) a = i;
                        if ((uint64_t)s.topic[i] == l[k].p[q].b) b = i;
                    }
                } else {
                    a = row_of_off(l[k].p[q].a);
                    b = row_of_off(l[k].p[q].b);
                }
                float f = sim_f16(h + a * 384, h + b * 384, 384);
                CHECK(kb_cand_take(&w, f, s.topic[a] != s.topic[b], s.count[s.topic[a]] == 1 && s.count[s.topic[b]] == 1),
                      "rows %d kind %d: kept pair %zu-%zu (fp16 %.6f, f32 %.6f) outside the window", kind, k, a, b, f,
                      l[k].p[q].sim);
            }
        size_t inside = 0, all = 0;
        for (size_t a = 0; a < s.n; a += 7)
            for (size_t b = a + 1; b < s.n; b++, all++)
                inside += kb_cand_take(&w, sim_f16(h + a * 384, h + b * 384, 384), s.topic[a] != s.topic[b],
                                       s.count[s.topic[a]] == 1 && s.count[s.topic[b]] == 1);
        CHECK(inside * 20 < all, "rows %d: %zu of %zu pairs inside the final window: it selects nothing", kind, inside, all);
        printf("window: rows %d: %zu of %zu sampled pairs inside the final window, every kept pair inside\n", kind,
               inside, all);
        for (int k = 0; k < KB_KINDS; k++) kb_klist_free(&l[k]);
        free(h);
        set_free(&s);
    }
    hx_pool_free(pool);
}

/* ---- the CPU's int8 candidate tiles (allpairs.h) ---- */

/* the window's slack for the f32 rounding, as insights.c forms it */
static float f32_slack(int dim, float m) { return (float)((dim + 16) * (double)m * m / 8388608.0 + 1.0 / 1048576); }

/* Every pair's f32 similarity (the tile kernel's bits) lies within the int8
 * bound plus the slack, and the tile's mask holds every pair whose f32
 * similarity reaches its row's lo plus the slack; the VNNI kernel's sums equal
 * the scalar kernel's. */
static void test_i8_bound(void) {
    const int dims[] = {384, 100, 65};
    for (int di = 0; di < 3; di++)
        for (int kind = 0; kind < 4; kind++) {
            const int dim = dims[di];
            const size_t n = 128;
            float *v = make_rows(n, dim, kind);
            kb_i8 q;
            CHECK(kb_i8_alloc(&q, n, dim), "kb_i8_alloc");
            for (size_t t = 0; t < n / KB_TILE; t++) kb_i8_fill(&q, v, t);
            const float slack = f32_slack(dim, max_norm(v, n, dim));
            static int32_t acc[KB_TILE * KB_TILE], acc2[KB_TILE * KB_TILE];
            uint64_t mask[KB_TILE], mask2[KB_TILE];
            float lo[KB_TILE];
            double worst = -INFINITY, mean_err = 0;
            int missed = 0, acc_diff = 0;
            for (int i = 0; i < KB_TILE; i++) lo[i] = kind == 3 ? 0.1f + 0.004f * i : -0.2f + 0.01f * i;
            for (size_t t = 0; t < 2; t++) {
                kb_i8_tile_scalar(&q, 0, KB_TILE, t, lo, acc, mask);
                if (hx_isa_best() >= HX_ISA_AVX512_VNNI) {
                    kb_i8_tile_vnni(&q, 0, KB_TILE, t, lo, acc2, mask2);
                    acc_diff += memcmp(acc, acc2, sizeof acc) != 0;
                }
                for (int i = 0; i < KB_TILE; i++)
                    for (int j = 0; j < KB_TILE; j++) {
                        size_t a = (size_t)i, b = t * KB_TILE + (size_t)j;
                        double s = (double)q.s[a] * q.s[b] * (acc[i * KB_TILE + j] - q.corr[a]);
                        double err = (double)q.nrm[a] * q.res[b] + (double)q.res[a] * q.nres[b];
                        float f = sim_cpu(v + a * dim, v + b * dim, dim);
                        double over = fabs(f - s) - err;
                        if (over > worst) worst = over;
                        mean_err += err;
                        if (f >= lo[i] + slack && !((mask[i] >> j) & 1)) missed++;
                        if (hx_isa_best() >= HX_ISA_AVX512_VNNI && f >= lo[i] + slack && !((mask2[i] >> j) & 1)) missed++;
                    }
            }
            CHECK(worst <= slack, "dim %d rows %d: |f32 - int8| similarity over the bound by %g (slack %g)", dim, kind,
                  worst, slack);
            CHECK(!missed, "dim %d rows %d: %d pairs at or above lo missing from a mask", dim, kind, missed);
            CHECK(!acc_diff, "dim %d rows %d: the VNNI tile's sums differ from the scalar kernel's", dim, kind);
            printf("i8 bound: dim %3d rows %d: mean bound %.4f, closest |f32 - int8| - bound %.2e (slack %.2e)\n", dim, kind,
                   mean_err / (2.0 * KB_TILE * KB_TILE), worst, slack);
            kb_i8_free(&q);
            free(v);
        }
}

static bool same_list(const kb_klist *x, const kb_klist *y, const char *what);

/* kb_entry_pairs_mode: int8 candidates give the f32 tiles' lists bit for bit,
 * at every ISA level this CPU has (scalar: scalar int8 and f32 kernels; avx2
 * and avx512: the scalar int8 kernel, AVX2 f32; avx512vnni: the VNNI one) */
static void test_i8_pairs(void) {
    hx_pool *pool = hx_pool_create(2);
    const hx_isa was = hx_isa_current();
    struct { size_t n; int dim, kind; size_t row0; float dup, lo, hi, top; int kd, kl, ko; const char *what; } cs[] = {
        {1500, 384, 0, 0, 0.2f, 0.12f, 0.2f, 0.15f, 20, 50, 100, "random, low thresholds"},
        {1500, 384, 1, 0, 0.92f, 0.75f, 0.92f, 0.6f, 20, 50, 100, "clusters, ties"},
        {1500, 384, 1, 0, 0.92f, 0.75f, 0.92f, 0.6f, 2000, 3000, 500, "clusters, deep lists"},
        {1500, 384, 1, 1300, 0.92f, 0.75f, 0.92f, 0.6f, 20, 50, 100, "clusters, incremental"},
        {1200, 100, 1, 0, 0.9f, 0.5f, 0.9f, 0.55f, 3, 0, 7, "dim 100, no links"},
        {700, 65, 0, 0, -1.0f, -1.0f, 1.0f, -1.0f, 40, 40, 40, "dim 65, every pair a candidate"},
        {1500, 384, 2, 0, 0.3f, 0.1f, 0.3f, 0.2f, 20, 50, 100, "tiny components"},
        {2000, 384, 3, 0, 0.247f, 0.234f, 0.247f, 0.45f, 20, 50, 100, "lexical-like, copies"},
        {1000, 384, 3, 0, 0.247f, 0.234f, 0.247f, 0.45f, 5, 5, 5, "lexical-like, short lists"},
        {2000, 384, 3, 1937, 0.247f, 0.234f, 0.247f, 0.45f, 20, 50, 100, "lexical-like, incremental"},
    };
    for (int isa = HX_ISA_SCALAR; isa <= HX_ISA_AVX512_VNNI; isa++) {
        if (isa > (int)hx_isa_best() || !hx_isa_set((hx_isa)isa)) continue;
        int same = 0, ran = 0;
        for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
            if (isa == HX_ISA_SCALAR && cs[c].n > 1200) continue; /* the scalar kernels are slow under sanitizers */
            set s = make_set(cs[c].n, cs[c].dim, cs[c].kind);
            kb_rows r = rows_of(&s);
            kb_opts o = cpu_opts(cs[c].dup, cs[c].lo, cs[c].hi, cs[c].top, cs[c].kd, cs[c].kl, cs[c].ko);
            kb_klist x[3], y[3];
            hx_error e = {0};
            CHECK(kb_entry_pairs_mode(pool, &r, cs[c].row0, &o, KB_PAIRS_F32, &x[0], &x[1], &x[2], &e) == HX_OK,
                  "f32: %s", e.msg);
            CHECK(kb_entry_pairs_mode(pool, &r, cs[c].row0, &o, KB_PAIRS_I8, &y[0], &y[1], &y[2], &e) == HX_OK,
                  "int8: %s", e.msg);
            int ok = (int)same_list(&x[0], &y[0], "near-duplicates") + (int)same_list(&x[1], &y[1], "cross-links") +
                     (int)same_list(&x[2], &y[2], "single-topic overlaps") == 3;
            CHECK(ok, "%s: case %zu (%s): the int8 path's lists differ from the f32 tiles'", hx_isa_name((hx_isa)isa),
                  c, cs[c].what);
            CHECK(x[0].n + x[1].n + x[2].n > 0, "case %zu (%s): nothing kept, nothing tested", c, cs[c].what);
            same += ok, ran++;
            for (int k = 0; k < 3; k++) { kb_klist_free(&x[k]); kb_klist_free(&y[k]); }
            set_free(&s);
        }
        printf("i8 pairs: %s: %d of %d cases identical to the f32 tiles\n", hx_isa_name((hx_isa)isa), same, ran);
        /* rows the bound does not hold for (a NaN, an infinity, a norm of 20):
         * the int8 path declines, the f32 tiles run, no undefined conversion */
        for (int bad = 0; bad < 3; bad++) {
            set s = make_set(300, 100, 1);
            s.v[77 * 100 + 5] = bad == 0 ? NAN : bad == 1 ? INFINITY : s.v[77 * 100 + 5];
            if (bad == 2) for (int k = 0; k < 100; k++) s.v[120 * 100 + k] *= 20.0f;
            kb_rows r = rows_of(&s);
            kb_opts o = {.dup_threshold = 0.9f, .link_low = 0.5f, .link_high = 0.9f, .topic_threshold = 0.55f,
                         .max_dups = 5, .max_links = 5, .max_overlaps = 5, .allpairs_device = HX_DEVICE_CPU};
            kb_klist x[3], y[3];
            hx_error e = {0};
            CHECK(kb_entry_pairs_mode(pool, &r, 0, &o, KB_PAIRS_F32, &x[0], &x[1], &x[2], &e) == HX_OK, "%s", e.msg);
            CHECK(kb_entry_pairs_mode(pool, &r, 0, &o, KB_PAIRS_I8, &y[0], &y[1], &y[2], &e) == HX_OK, "%s", e.msg);
            CHECK(same_list(&x[0], &y[0], "near-duplicates") && same_list(&x[1], &y[1], "cross-links") &&
                      same_list(&x[2], &y[2], "single-topic overlaps"),
                  "%s: bad rows %d: the lists differ", hx_isa_name((hx_isa)isa), bad);
            for (int k = 0; k < 3; k++) { kb_klist_free(&x[k]); kb_klist_free(&y[k]); }
            set_free(&s);
        }
    }
    hx_isa_set(was);
    hx_pool_free(pool);
}

static bool same_list(const kb_klist *x, const kb_klist *y, const char *what) {
    bool ok = x->n == y->n && x->has_cut == y->has_cut;
    for (int i = 0; ok && i < x->n; i++)
        ok = x->p[i].a == y->p[i].a && x->p[i].b == y->p[i].b && !memcmp(&x->p[i].sim, &y->p[i].sim, sizeof(float));
    if (ok && x->has_cut) ok = x->cut.a == y->cut.a && x->cut.b == y->cut.b && x->cut.sim == y->cut.sim;
    if (!ok) {
        printf("  %s: cpu %d pairs (cut %d), cuda %d pairs (cut %d)\n", what, x->n, x->has_cut, y->n, y->has_cut);
        for (int i = 0; i < x->n || i < y->n; i++) {
            if (i < x->n && i < y->n && x->p[i].a == y->p[i].a && x->p[i].b == y->p[i].b && x->p[i].sim == y->p[i].sim)
                continue;
            printf("    #%d cpu %llu-%llu %.9g  cuda %llu-%llu %.9g\n", i, i < x->n ? (unsigned long long)x->p[i].a : 0,
                   i < x->n ? (unsigned long long)x->p[i].b : 0, i < x->n ? x->p[i].sim : 0,
                   i < y->n ? (unsigned long long)y->p[i].a : 0, i < y->n ? (unsigned long long)y->p[i].b : 0,
                   i < y->n ? y->p[i].sim : 0);
            break;
        }
    }
    return ok;
}

/* Walk stage s as allpairs_cuda.cu's driver does, pieces of bm-row blocks
 * growing to 32 a round, each piece redone as halves with probability 0.3
 * (an overflow), and count each pair the tiles would test in seen (n x n). */
static void walk_stage(const kb_stage *s, unsigned bm, unsigned char *seen) {
    unsigned first, end, nb, grow = 1, next, top = 0;
    kb_stage_blocks(s, bm, &first, &end, &nb);
    kb_piece todo[128];
    next = first;
    for (;;) {
        if (!top) {
            if (next >= end) break;
            unsigned nrb = grow < end - next ? grow : end - next;
            todo[top++] = kb_stage_piece(s, next, nrb, nb);
            next += nrb;
            grow = grow * 2 < 32 ? grow * 2 : 32;
        }
        kb_piece p = todo[--top];
        if ((p.nrb > 1 || p.ncb > 1) && urand() < 0.3 && top + 2 <= 128) {
            kb_piece h[2];
            kb_piece_halves(s, p, h);
            todo[top++] = h[1];
            todo[top++] = h[0];
            grow = 1;
            continue;
        }
        for (unsigned bi = p.rb0; bi < p.rb0 + p.nrb; bi++)
            for (unsigned bj = p.cb0; bj < p.cb0 + p.ncb; bj++) {
                if (!kb_stage_tile(s, bi, bj)) continue;
                for (size_t i = (size_t)bi * bm; i < (size_t)(bi + 1) * bm; i++)
                    for (size_t j = (size_t)bj * bm; j < (size_t)(bj + 1) * bm; j++)
                        if (kb_stage_pair(s, i, j)) seen[i * s->n + j]++;
            }
    }
}

static void test_stage_plan(void) {
    const size_t ns[] = {1, 2, 127, 128, 129, 700, 1000, 1500};
    int stages = 0;
    for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
        const size_t n = ns[c];
        unsigned char *seen = malloc(n * n);
        for (int R = 1; R <= 5; R++)
            for (int cut = 0; cut < 2; cut++) { /* cuts at 64-row multiples (mpi.c's) or anywhere */
                size_t lo[6] = {0};
                lo[R] = n;
                for (int k = 1; k < R; k++) {
                    size_t x = (size_t)(urand() * (double)n);
                    x = cut ? x : x / 64 * 64;
                    lo[k] = x < lo[k - 1] ? lo[k - 1] : x;
                }
                memset(seen, 0, n * n);
                for (int k = 0; k < R; k++, stages++) {
                    kb_stage s = {n, lo[k], lo[k + 1], false};
                    walk_stage(&s, 128, seen);
                }
                size_t bad = 0;
                for (size_t a = 0; a < n; a++)
                    for (size_t b = 0; b < n; b++) bad += seen[a * n + b] != (b > a);
                CHECK(!bad, "plan: %zu rows, %d ranks (cuts %s): %zu pairs not formed exactly once", n, R,
                      cut ? "anywhere" : "at 64", bad);
            }
        const size_t row0s[] = {1, n / 2, n > 1 ? n - 1 : 1, n / 3 * 2 + 5};
        for (size_t q = 0; q < 4; q++, stages++) {
            const size_t row0 = row0s[q] < n ? row0s[q] : n;
            kb_stage s = {n, row0, n, true};
            memset(seen, 0, n * n);
            walk_stage(&s, 128, seen);
            size_t bad = 0;
            for (size_t a = 0; a < n; a++)
                for (size_t b = 0; b < n; b++) bad += seen[a * n + b] != (a >= row0 && b < a);
            CHECK(!bad, "plan: %zu rows, incremental from %zu: %zu pairs not formed exactly once", n, row0, bad);
        }
        free(seen);
    }
    printf("plan: %d device stages walked, each pair formed once\n", stages);
}

/* returns 77 when no GPU path runs here */
static int test_gpu(void) {
#ifndef HX_HAVE_CUDA
    printf("SKIP gpu: this build has no CUDA\n");
    return 77;
#else
    hx_pool *pool = hx_pool_create(0);
    struct { size_t n; int dim, kind; size_t row0; float dup, lo, hi, top; int kd, kl, ko; const char *cap, *what; } cs[] = {
        {6000, 384, 0, 0, 0.2f, 0.12f, 0.2f, 0.15f, 20, 50, 100, NULL, "random, low thresholds"},
        {6000, 384, 1, 0, 0.92f, 0.75f, 0.92f, 0.6f, 20, 50, 100, NULL, "clusters, ties"},
        {6000, 384, 1, 0, 0.92f, 0.75f, 0.92f, 0.6f, 2000, 3000, 500, NULL, "clusters, deep lists"},
        {6000, 384, 1, 5700, 0.92f, 0.75f, 0.92f, 0.6f, 20, 50, 100, NULL, "clusters, incremental"},
        {5000, 100, 1, 0, 0.9f, 0.5f, 0.9f, 0.55f, 3, 0, 7, NULL, "dim 100, no links"},
        {4000, 384, 0, 0, -1.0f, -1.0f, 1.0f, -1.0f, 40, 40, 40, "20000", "every pair a candidate, tiny buffer"},
        {4000, 384, 1, 3000, 0.92f, 0.75f, 0.92f, 0.6f, 40, 40, 40, "16384", "incremental, tiny buffer"},
        {3000, 384, 2, 0, 0.3f, 0.1f, 0.3f, 0.2f, 20, 50, 100, NULL, "tiny components"},
    };
    int ran = 0;
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        set s = make_set(cs[c].n, cs[c].dim, cs[c].kind);
        kb_rows r = rows_of(&s);
        kb_opts o = cpu_opts(cs[c].dup, cs[c].lo, cs[c].hi, cs[c].top, cs[c].kd, cs[c].kl, cs[c].ko);
        kb_klist x[3], y[3];
        hx_error e = {0};
        double t0 = hx_now_s();
        CHECK(kb_entry_pairs(pool, &r, cs[c].row0, &o, &x[0], &x[1], &x[2], &e) == HX_OK, "cpu: %s", e.msg);
        double t1 = hx_now_s();
        o.allpairs_device = HX_DEVICE_CUDA;
        o.allpairs_log = true;
        if (cs[c].cap) setenv("HX_KB_ALLPAIRS_CAP", cs[c].cap, 1);
        hx_status st = kb_entry_pairs(pool, &r, cs[c].row0, &o, &y[0], &y[1], &y[2], &e);
        unsetenv("HX_KB_ALLPAIRS_CAP");
        if (st != HX_OK && c == 0 && (st == HX_ERR_DEVICE || st == HX_ERR_UNSUPPORTED)) {
            printf("SKIP gpu: %s\n", e.msg);
            for (int k = 0; k < 3; k++) kb_klist_free(&x[k]);
            set_free(&s);
            hx_pool_free(pool);
            return 77;
        }
        CHECK(st == HX_OK, "cuda: %s", e.msg);
        if (st == HX_OK) {
            /* all three compared (and printed when different), not cut short */
            int ok = (int)same_list(&x[0], &y[0], "near-duplicates") + (int)same_list(&x[1], &y[1], "cross-links") +
                     (int)same_list(&x[2], &y[2], "single-topic overlaps") == 3;
            CHECK(ok, "case %zu (%s): the GPU lists differ from the CPU's", c, cs[c].what);
            printf("gpu: %-38s %zu rows x %d: %d/%d/%d pairs, %s (cpu %.2f s, cuda %.2f s)\n", cs[c].what, s.n,
                   s.dim, x[0].n, x[1].n, x[2].n, ok ? "identical" : "DIFFERENT", t1 - t0, hx_now_s() - t1);
            for (int k = 0; k < 3; k++) kb_klist_free(&y[k]);
            ran++;
        }
        for (int k = 0; k < 3; k++) kb_klist_free(&x[k]);
        set_free(&s);
    }
    /* an MPI rank's share: rows [lo, hi) against the rows after them, cuts
     * inside 128-row blocks, with and without a tiny candidate buffer */
    {
        set s = make_set(6000, 384, 1);
        kb_rows r = rows_of(&s);
        const size_t lo[4] = {0, 1664, 3520, 6000};
        for (int tiny = 0; tiny < 2; tiny++)
            for (int k = 0; k < 3; k++) {
                kb_opts o = cpu_opts(0.92f, 0.75f, 0.92f, 0.6f, 20, 50, 100);
                kb_klist x[3], y[3];
                hx_error e = {0};
                bool gpu = true;
                CHECK(kb_entry_pairs_rows(pool, &r, lo[k], lo[k + 1], &o, &x[0], &x[1], &x[2], &gpu, &e) == HX_OK,
                      "cpu rows: %s", e.msg);
                CHECK(!gpu, "rows %zu..%zu: the cpu was asked for, the gpu reported", lo[k], lo[k + 1]);
                o.allpairs_device = HX_DEVICE_CUDA;
                o.allpairs_log = true;
                if (tiny) setenv("HX_KB_ALLPAIRS_CAP", "16384", 1);
                hx_status st = kb_entry_pairs_rows(pool, &r, lo[k], lo[k + 1], &o, &y[0], &y[1], &y[2], &gpu, &e);
                unsetenv("HX_KB_ALLPAIRS_CAP");
                CHECK(st == HX_OK && gpu, "cuda rows %zu..%zu: %s", lo[k], lo[k + 1], e.msg);
                if (st == HX_OK) {
                    int ok = (int)same_list(&x[0], &y[0], "near-duplicates") + (int)same_list(&x[1], &y[1], "cross-links") +
                             (int)same_list(&x[2], &y[2], "single-topic overlaps") == 3;
                    CHECK(ok, "rows %zu..%zu%s: the GPU lists differ from the CPU's", lo[k], lo[k + 1],
                          tiny ? " (tiny buffer)" : "");
                    printf("gpu: rows %zu..%zu of %zu%s: %d/%d/%d pairs, %s\n", lo[k], lo[k + 1], s.n,
                           tiny ? " (tiny buffer)" : "", x[0].n, x[1].n, x[2].n, ok ? "identical" : "DIFFERENT");
                    for (int q = 0; q < 3; q++) kb_klist_free(&y[q]);
                }
                for (int q = 0; q < 3; q++) kb_klist_free(&x[q]);
            }
        set_free(&s);
    }
    hx_pool_free(pool);
    return ran ? 0 : 1;
#endif
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--gpu-only")) {
        int rc = test_gpu();
        return failures ? 1 : rc;
    }
    test_eps();
    test_stage_plan();
    test_window();
    test_i8_bound();
    test_i8_pairs();
    int rc = test_gpu();
    if (failures) { printf("%d failures\n", failures); return 1; }
    printf("ok\n");
    (void)rc;
    return 0;
}
