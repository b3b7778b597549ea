/* test_matmul.c — hx_matvec / hx_matmul for every weight type on odd shapes,
 * against a float64 reference computed from the dequantized weights.
 *
 * Two references per output: (1) with the activations quantized+dequantized
 * (or, with HX_MM_ROUND_F16_ACT, rounded to f16/bf16) the way the kernels see them — must agree to ~1e-5 relative (only float
 * summation order differs); (2) with the original f32 activations — must agree
 * within the activation quantization error (1% of sum |w x|). */
#include <math.h>
#include "test_util.h"

#include "backend/cpu/matmul.h"
#include "core/core.h"
#include "quant/quant.h"

static const int types[] = { HX_TYPE_F32, HX_TYPE_F16, HX_TYPE_BF16, HX_TYPE_Q4_0, HX_TYPE_Q4_1,
                             HX_TYPE_Q5_0, HX_TYPE_Q5_1, HX_TYPE_Q8_0, HX_TYPE_Q2_K, HX_TYPE_Q3_K,
                             HX_TYPE_Q4_K, HX_TYPE_Q5_K, HX_TYPE_Q6_K };

static void check_one(hx_pool *pool, int type, int64_t rows, int64_t cols, int64_t n, unsigned flags, hx_rng *rng) {
    const hx_type_info *ti = hx_type_get(type);
    size_t wrow = hx_row_size(type, cols), xrow = hx_row_size(ti->dot_type, cols);
    float *wf = malloc(sizeof(float) * rows * cols), *wd = malloc(sizeof(float) * rows * cols);
    uint8_t *wq = malloc(wrow * rows), *xq = malloc(xrow);
    float *x = malloc(sizeof(float) * n * cols), *xd = malloc(sizeof(float) * n * cols);
    float *y = malloc(sizeof(float) * n * rows);
    for (int64_t i = 0; i < rows * cols; i++) wf[i] = (float)hx_rng_normal(rng);
    for (int64_t i = 0; i < n * cols; i++) x[i] = (float)hx_rng_normal(rng);
    for (int64_t r = 0; r < rows; r++) {
        CHECK(hx_quantize_row(type, wf + r * cols, wq + r * wrow, cols) == wrow);
        hx_dequantize_row(type, wq + r * wrow, wd + r * cols, cols);
    }
    bool round16 = (flags & HX_MM_ROUND_F16_ACT) != 0;
    for (int64_t t = 0; t < n; t++) {
        float *xt = x + t * cols, *dt = xd + t * cols;
        if (type == HX_TYPE_F16 && round16) {
            for (int64_t k = 0; k < cols; k++) dt[k] = hx_fp16_to_fp32(hx_fp32_to_fp16(xt[k]));
        } else if (type == HX_TYPE_BF16 && round16) {
            for (int64_t k = 0; k < cols; k++) dt[k] = hx_bf16_to_fp32(hx_fp32_to_bf16(xt[k]));
        } else {
            hx_quantize_row(ti->dot_type, xt, xq, cols);
            hx_dequantize_row(ti->dot_type, xq, dt, cols);
        }
    }
    hx_tensor W = { "w", type, { cols, rows, 1, 1 }, wq };
    hx_error e = {0};
    hx_status st = flags ? hx_matmul_ex(pool, &W, x, n, y, flags, &e)
                 : n == 1 ? hx_matvec(pool, &W, x, y, &e) : hx_matmul(pool, &W, x, n, y, &e);
    CHECKF(st == HX_OK, "%s: %s", hx_type_name(type), e.msg);
    double worst1 = 0, worst2 = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double s1 = 0, s2 = 0, mag = 0;
            for (int64_t k = 0; k < cols; k++) {
                s1 += (double)wd[r * cols + k] * xd[t * cols + k];
                s2 += (double)wd[r * cols + k] * x[t * cols + k];
                mag += fabs((double)wd[r * cols + k] * x[t * cols + k]);
            }
            double got = y[t * rows + r];
            double e1 = fabs(got - s1) / mag, e2 = fabs(got - s2) / mag;
            if (e1 > worst1) worst1 = e1;
            if (e2 > worst2) worst2 = e2;
        }
    /* Q8_1 (for Q4_1/Q5_1) stores s = d*sum(q) in fp16, like ggml: ~1e-3 relative */
    double tol1 = ti->dot_type == HX_TYPE_Q8_1 ? 1e-3 : 2e-5;
    CHECKF(worst1 < tol1, "%s %lldx%lld n=%lld: rel err vs dequantized activations %g",
           hx_type_name(type), (long long)rows, (long long)cols, (long long)n, worst1);
    CHECKF(worst2 < 1e-2, "%s %lldx%lld n=%lld: rel err vs f32 activations %g",
           hx_type_name(type), (long long)rows, (long long)cols, (long long)n, worst2);
    free(wf); free(wd); free(wq); free(xq); free(x); free(xd); free(y);
}

/* The tiled GEMM kernels (hx_get_gemm) against the per-row dot kernel of the
 * same ISA, pair by pair: bit-identical by construction (the per-row kernel is
 * the 1x1 tile), checked directly and through hx_matmul with 1 and 2 threads;
 * and against a float64 dot of the dequantized operands. The batch kernel
 * (hx_get_gemm_batch, what hx_matmul runs for n > 1) against the per-row
 * kernel it names (Q4_0: scalar), bit for bit. Random odd shapes, n = 1..17
 * and 64 (edge tiles of every size, partial 8-row groups). */
static void check_gemm(hx_pool *pool2, hx_pool *pool1, int type, hx_rng *rng) {
    const hx_type_info *ti = hx_type_get(type);
    hx_isa isa = hx_isa_current();
    hx_gemm_fn gemm = hx_get_gemm(type, isa);
    bool tiles = gemm != NULL;  /* Q5_0: a batch kernel only */
    if (!tiles) gemm = hx_get_gemm_batch(type, isa);
    if (!gemm) {
        printf("SKIP gemm %s: no tiled kernel at ISA %s\n", hx_type_name(type), hx_isa_name(isa));
        CHECK(isa < HX_ISA_AVX2);
        return;
    }
    hx_vec_dot_fn dot = hx_get_vec_dot(type, isa);
    bool same_isa = dot == hx_get_vec_dot(type, HX_ISA_AVX2); /* AVX-512 per-row kernels round differently */
    int checked = 0;
    for (int ni = 0; ni < 18; ni++) {
        int64_t n = ni < 17 ? ni + 1 : 64;
        int64_t rows = 1 + (int64_t)(hx_rng_u64(rng) % 70) * 2;               /* odd, 1..139 */
        int64_t cols = ti->block_size * (1 + (int64_t)(hx_rng_u64(rng) % 5) * 2); /* odd block count */
        size_t wrow = hx_row_size(type, cols), xrow = hx_row_size(ti->dot_type, cols);
        float *wf = malloc(sizeof(float) * cols), *wd = malloc(sizeof(float) * rows * cols);
        float *x = malloc(sizeof(float) * n * cols), *xd = malloc(sizeof(float) * n * cols);
        uint8_t *wq = malloc(wrow * rows), *xq = malloc(xrow * n);
        float *yr = malloc(sizeof(float) * n * rows), *yg = malloc(sizeof(float) * n * rows);
        float *y1 = malloc(sizeof(float) * n * rows), *y2 = malloc(sizeof(float) * n * rows);
        for (int64_t r = 0; r < rows; r++) {
            float sc = expf((float)hx_rng_normal(rng)); /* rows of different magnitudes */
            for (int64_t k = 0; k < cols; k++) wf[k] = (float)hx_rng_normal(rng) * sc;
            hx_quantize_row(type, wf, wq + r * wrow, cols);
            hx_dequantize_row(type, wq + r * wrow, wd + r * cols, cols);
        }
        for (int64_t i = 0; i < n * cols; i++) x[i] = (float)hx_rng_normal(rng);
        for (int64_t t = 0; t < n; t++) {
            hx_quantize_row(ti->dot_type, x + t * cols, xq + t * xrow, cols);
            hx_dequantize_row(ti->dot_type, xq + t * xrow, xd + t * cols, cols);
        }
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < rows; r++) dot(cols, &yr[t * rows + r], wq + r * wrow, xq + t * xrow);
        gemm(cols, rows, n, wq, wrow, xq, xrow, yg, (size_t)rows);
        /* the batch kernel (matmul with n > 1) against the per-row kernel it
         * claims to equal (Q4_0: the scalar one) */
        hx_gemm_fn gemm_b = hx_get_gemm_batch(type, isa);
        hx_vec_dot_fn dot_b = hx_get_vec_dot(type, hx_gemm_batch_ref_isa(type, isa));
        CHECK(gemm_b && dot_b);
        float *yb = malloc(sizeof(float) * n * rows), *yrb = malloc(sizeof(float) * n * rows);
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < rows; r++) dot_b(cols, &yrb[t * rows + r], wq + r * wrow, xq + t * xrow);
        gemm_b(cols, rows, n, wq, wrow, xq, xrow, yb, (size_t)rows);
        int64_t diff_b = 0;
        for (int64_t o = 0; o < n * rows; o++) diff_b += memcmp(&yb[o], &yrb[o], 4) != 0;
        CHECKF(!diff_b, "batch gemm %s %lldx%lld n=%lld: %lld outputs differ from the %s per-row kernel",
               hx_type_name(type), (long long)rows, (long long)cols, (long long)n, (long long)diff_b,
               hx_isa_name(hx_gemm_batch_ref_isa(type, isa)));
        /* matmul: n == 1 runs the matvec tiles (= AVX2 per-row), n > 1 the batch kernel */
        const float *ym = n > 1 ? yrb : yr;
        bool same_m = n > 1 ? true : same_isa;
        hx_tensor W = { "w", type, { cols, rows, 1, 1 }, wq };
        hx_error e = {0};
        CHECKF(hx_matmul(pool1, &W, x, n, y1, &e) == HX_OK, "%s", e.msg);
        CHECKF(hx_matmul(pool2, &W, x, n, y2, &e) == HX_OK, "%s", e.msg);
        double worst = 0;
        int64_t diff_g = 0, diff_1 = 0, diff_2 = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t r = 0; r < rows; r++) {
                size_t o = t * rows + r;
                diff_g += memcmp(&yg[o], &yr[o], 4) != 0;
                diff_1 += memcmp(&y1[o], &ym[o], 4) != 0;
                diff_2 += memcmp(&y2[o], &ym[o], 4) != 0;
                double s = 0, mag = 0;
                for (int64_t k = 0; k < cols; k++) {
                    s += (double)wd[r * cols + k] * xd[t * cols + k];
                    mag += fabs((double)wd[r * cols + k] * xd[t * cols + k]);
                }
                double err = fabs(yg[o] - s) / (mag > 0 ? mag : 1);
                double err_b = fabs(yb[o] - s) / (mag > 0 ? mag : 1);
                if (err > worst) worst = err;
                if (err_b > worst) worst = err_b;
            }
        if (same_isa && tiles)
            CHECKF(!diff_g, "gemm %s %lldx%lld n=%lld: %lld outputs differ from the per-row kernel", hx_type_name(type),
                   (long long)rows, (long long)cols, (long long)n, (long long)diff_g);
        if (same_m) {
            CHECKF(!diff_1 && !diff_2, "matmul %s %lldx%lld n=%lld: %lld / %lld outputs (1 / 2 threads) differ from the "
                   "per-row kernel", hx_type_name(type), (long long)rows, (long long)cols, (long long)n,
                   (long long)diff_1, (long long)diff_2);
        }
        CHECKF(worst < 2e-5, "gemm %s %lldx%lld n=%lld: rel err vs float64 %g", hx_type_name(type), (long long)rows,
               (long long)cols, (long long)n, worst);
        checked++;
        free(wf); free(wd); free(x); free(xd); free(wq); free(xq); free(yr); free(yg); free(y1); free(y2);
        free(yb); free(yrb);
    }
    printf("gemm %s: %d shapes, %s; batch kernel == %s per-row; within 2e-5 of float64\n", hx_type_name(type),
           checked, !tiles ? "no tiles" : same_isa ? "tiled == per-row bit for bit" : "tiles not compared: other ISA",
           hx_isa_name(hx_gemm_batch_ref_isa(type, isa)));
}

/* The batch kernels' int16 accumulators at their worst case: every weight at
 * the most negative level and every activation at +-127 (x + 128 = 255 or
 * 1): exact against the per-row kernel they claim to equal. */
static void check_gemm_extremes(int type) {
    const hx_type_info *ti = hx_type_get(type);
    hx_isa isa = hx_isa_current();
    hx_gemm_fn gb = hx_get_gemm_batch(type, isa);
    if (!gb) return;
    hx_vec_dot_fn ref = hx_get_vec_dot(type, hx_gemm_batch_ref_isa(type, isa));
    const int64_t cols = 4 * 256, rows = 11, n = 5;
    size_t wrow = hx_row_size(type, cols), xrow = hx_row_size(ti->dot_type, cols);
    uint8_t *wq = malloc(wrow * rows), *xq = malloc(xrow * n);
    float *f = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * rows * n);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < cols; k++) f[k] = r % 3 == 0 ? -1.f : r % 3 == 1 ? 1.f : (k % 7 ? -1.f : 0.5f);
        hx_quantize_row(type, f, wq + r * wrow, cols);
    }
    for (int64_t t = 0; t < n; t++) {
        for (int64_t k = 0; k < cols; k++) f[k] = t % 2 ? -1.f : 1.f;
        hx_quantize_row(ti->dot_type, f, xq + t * xrow, cols);
    }
    gb(cols, rows, n, wq, wrow, xq, xrow, y, (size_t)rows);
    int diff = t_gemm_bits_differ(ref, cols, rows, n, wq, wrow, xq, xrow, y);
    CHECKF(!diff, "batch gemm %s, extreme levels: %d of %lld outputs differ", hx_type_name(type), diff,
           (long long)(rows * n));
    free(wq); free(xq); free(f); free(y);
}

/* A batch on 16 threads, whose 48-row blocks alone give too few tasks, is
 * split over tokens too (matmul.c): the outputs must be the one-thread
 * products bit for bit, in the default and the parity (HX_MM_GGML_ORDER)
 * order, for token counts that cut 16-token groups and Q4_K's 4-token gemm
 * groups at odd places. */
static void check_split(hx_pool *pool1, hx_pool *pool16, int type, unsigned flags, hx_rng *rng) {
    const hx_type_info *ti = hx_type_get(type);
    const int64_t rows = 200, cols = ti->block_size * (ti->block_size == 256 ? 2 : 12);
    const int64_t ns[] = { 17, 67, 131 };
    size_t wrow = hx_row_size(type, cols);
    uint8_t *wq = malloc(wrow * rows);
    float *f = malloc(sizeof(float) * cols), *x = malloc(sizeof(float) * cols * 131);
    float *y1 = malloc(sizeof(float) * rows * 131), *y16 = malloc(sizeof(float) * rows * 131);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t k = 0; k < cols; k++) f[k] = (float)hx_rng_normal(rng);
        hx_quantize_row(type, f, wq + r * wrow, cols);
    }
    for (int64_t i = 0; i < cols * 131; i++) x[i] = (float)hx_rng_normal(rng);
    hx_tensor W = { "w", type, { cols, rows, 1, 1 }, wq };
    for (int i = 0; i < 3; i++) {
        hx_error e = {0};
        CHECKF(hx_matmul_ex(pool1, &W, x, ns[i], y1, flags, &e) == HX_OK, "%s", e.msg);
        CHECKF(hx_matmul_ex(pool16, &W, x, ns[i], y16, flags, &e) == HX_OK, "%s", e.msg);
        int64_t diff = 0;
        for (int64_t o = 0; o < rows * ns[i]; o++) diff += memcmp(&y1[o], &y16[o], 4) != 0;
        CHECKF(!diff, "matmul %s flags %u n=%lld: %lld outputs on 16 threads differ from 1 thread",
               hx_type_name(type), flags, (long long)ns[i], (long long)diff);
    }
    free(wq); free(f); free(x); free(y1); free(y16);
}

/* hx_matvec_pair == hx_matmul_multi then the hook over all rows, bit for bit:
 * every row visited once, the hook's ranges cover [0, rows) exactly, on 1, 2
 * and 16 threads (16 shares the rows far more finely); refused for matrices
 * of different heights. */
typedef struct { float *g; const float *u; int64_t rows; int *seen; } pair_ctx;
static void pair_post(void *ctx, int64_t r0, int64_t r1) {
    pair_ctx *c = ctx;
    for (int64_t r = r0; r < r1; r++) {
        c->seen[r]++; /* distinct r per task: no two tasks write one slot */
        c->g[r] = c->g[r] / (1.0f + expf(-c->g[r])) * c->u[r];
    }
}
static void check_pair(hx_pool *const *pools, int n_pools, int type, int64_t rows, int64_t cols, hx_rng *rng) {
    size_t rb = hx_row_size(type, cols);
    uint8_t *w = malloc(rb * rows * 2);
    float *tmp = malloc(sizeof(float) * cols), *x = malloc(sizeof(float) * cols);
    float *ga = malloc(sizeof(float) * rows), *ua = malloc(sizeof(float) * rows);
    float *gb = malloc(sizeof(float) * rows), *ub = malloc(sizeof(float) * rows);
    int *seen = calloc((size_t)rows, sizeof(int));
    for (int64_t r = 0; r < 2 * rows; r++) {
        for (int64_t k = 0; k < cols; k++) tmp[k] = hx_rng_normal(rng);
        hx_quantize_row(type, tmp, w + r * rb, cols);
    }
    for (int64_t k = 0; k < cols; k++) x[k] = hx_rng_normal(rng);
    hx_tensor W[2] = { { "gate", type, { cols, rows, 1, 1 }, w }, { "up", type, { cols, rows, 1, 1 }, w + rb * rows } };
    const hx_tensor *Wp[2] = { &W[0], &W[1] };
    float *Ya[2] = { ga, ua };
    hx_error e = {0};
    CHECK(hx_matmul_multi(pools[0], 2, Wp, x, 1, Ya, 0, &e) == HX_OK);
    for (int64_t r = 0; r < rows; r++) ga[r] = ga[r] / (1.0f + expf(-ga[r])) * ua[r];
    for (int p = 0; p < n_pools; p++) {
        memset(seen, 0, sizeof(int) * (size_t)rows);
        pair_ctx c = { gb, ub, rows, seen };
        CHECK(hx_matvec_pair(pools[p], &W[0], &W[1], x, gb, ub, 0, pair_post, &c, &e) == HX_OK);
        int64_t diff = 0, bad = 0;
        for (int64_t r = 0; r < rows; r++) {
            diff += memcmp(&ga[r], &gb[r], 4) != 0 || memcmp(&ua[r], &ub[r], 4) != 0;
            bad += seen[r] != 1;
        }
        CHECKF(!diff && !bad, "matvec pair %s %lld x %lld, %d threads: %lld rows differ from matmul_multi, %lld rows "
               "not hooked exactly once", hx_type_name(type), (long long)rows, (long long)cols,
               hx_pool_threads(pools[p]), (long long)diff, (long long)bad);
    }
    hx_tensor Wshort = W[1];
    Wshort.ne[1] = rows - 1;
    if (rows > 1) CHECK(hx_matvec_pair(pools[0], &W[0], &Wshort, x, gb, ub, 0, pair_post, NULL, &e) == HX_ERR_ARG);
    free(w); free(tmp); free(x); free(ga); free(ua); free(gb); free(ub); free(seen);
}

int main(void) {
    hx_rng rng;
    hx_rng_seed(&rng, 1234);
    hx_pool *pool = hx_pool_create(2);
    bool small = getenv("HX_TEST_SANITIZE") != NULL;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        int bs = hx_type_get(types[i])->block_size;
        int64_t cols_list[] = { bs == 256 ? 256 : 96, bs == 256 ? 768 : 544 };
        int64_t rows_list[] = { 1, 7, 67, small ? 130 : 531 };
        int64_t n_list[] = { 1, 3, small ? 9 : 37 };
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 4; b++)
                for (int c = 0; c < 3; c++)
                    check_one(b == 2 ? NULL : pool, types[i], rows_list[b], cols_list[a], n_list[c],
                              (a + b + c) % 2 ? HX_MM_ROUND_F16_ACT : 0, &rng);
    }
    {
        hx_pool *pool1 = hx_pool_create(1), *pool16 = hx_pool_create(16);
        const int gemm_types[] = { HX_TYPE_Q8_0, HX_TYPE_Q4_0, HX_TYPE_Q5_0, HX_TYPE_Q4_K, HX_TYPE_Q6_K };
        for (size_t i = 0; i < sizeof gemm_types / sizeof gemm_types[0]; i++) {
            check_gemm(pool, pool1, gemm_types[i], &rng);
            check_gemm_extremes(gemm_types[i]);
            check_split(pool1, pool16, gemm_types[i], 0, &rng);
            check_split(pool1, pool16, gemm_types[i], HX_MM_ROUND_F16_ACT | HX_MM_GGML_ORDER, &rng);
        }
        check_split(pool1, pool16, HX_TYPE_F16, HX_MM_ROUND_F16_ACT | HX_MM_GGML_ORDER, &rng);
        check_split(pool1, pool16, HX_TYPE_Q4_1, 0, &rng);
        hx_pool_free(pool1);
        hx_pool_free(pool16);
    }
    /* hx_matmul_multi == separate products, bit for bit; mixed dot types refused */
    {
        int64_t cols = 256, rows[3] = { 40, 17, 9 }, n = 5;
        size_t rb = hx_row_size(HX_TYPE_Q4_K, cols), rb6 = hx_row_size(HX_TYPE_Q6_K, cols);
        uint8_t *w = malloc(rb * 57 + rb6 * 9);
        float *tmp = malloc(sizeof(float) * cols), *X = malloc(sizeof(float) * cols * n);
        for (int r = 0; r < 66; r++) {
            for (int k = 0; k < cols; k++) tmp[k] = hx_rng_normal(&rng);
            if (r < 57) hx_quantize_row(HX_TYPE_Q4_K, tmp, w + r * rb, cols);
            else hx_quantize_row(HX_TYPE_Q6_K, tmp, w + 57 * rb + (r - 57) * rb6, cols);
        }
        for (int k = 0; k < cols * n; k++) X[k] = hx_rng_normal(&rng);
        hx_tensor W3[3] = { { "a", HX_TYPE_Q4_K, { cols, rows[0], 1, 1 }, w },
                            { "b", HX_TYPE_Q4_K, { cols, rows[1], 1, 1 }, w + rb * 40 },
                            { "c", HX_TYPE_Q6_K, { cols, rows[2], 1, 1 }, w + rb * 57 } };
        const hx_tensor *Wp[3] = { &W3[0], &W3[1], &W3[2] };
        float *Ya[3], *Yb[3];
        for (int m = 0; m < 3; m++) { Ya[m] = malloc(sizeof(float) * rows[m] * n); Yb[m] = malloc(sizeof(float) * rows[m] * n); }
        hx_error e = {0};
        CHECK(hx_matmul_multi(pool, 3, Wp, X, n, Ya, 0, &e) == HX_OK); /* Q4_K and Q6_K share Q8_K */
        for (int m = 0; m < 3; m++) {
            CHECK(hx_matmul(pool, Wp[m], X, n, Yb[m], &e) == HX_OK);
            CHECK(!memcmp(Ya[m], Yb[m], sizeof(float) * rows[m] * n));
        }
        hx_tensor Wf = { "f", HX_TYPE_F32, { cols, 2, 1, 1 }, X };
        const hx_tensor *mixed[2] = { &W3[0], &Wf };
        CHECK(hx_matmul_multi(pool, 2, mixed, X, 1, Ya, 0, &e) == HX_ERR_ARG);
        for (int m = 0; m < 3; m++) { free(Ya[m]); free(Yb[m]); }
        free(w); free(tmp); free(X);
    }
    {
        hx_pool *pools[3] = { hx_pool_create(1), pool, hx_pool_create(16) };
        const int pair_types[] = { HX_TYPE_Q8_0, HX_TYPE_Q4_0, HX_TYPE_Q4_K, HX_TYPE_Q6_K, HX_TYPE_F32, HX_TYPE_Q4_1 };
        for (size_t i = 0; i < sizeof pair_types / sizeof pair_types[0]; i++) {
            int64_t cols = hx_type_get(pair_types[i])->block_size == 256 ? 1024 : 576;
            const int64_t rows_list[] = { 1, 37, 1536, 3072 }; /* 1536/3072: enough work to use the pool */
            for (int b = 0; b < 4; b++) check_pair(pools, 3, pair_types[i], rows_list[b], cols, &rng);
        }
        hx_pool_free(pools[0]);
        hx_pool_free(pools[2]);
    }
    /* a type without a dot kernel is an error, not a crash */
    hx_tensor W = { "w", HX_TYPE_I32, { 32, 2, 1, 1 }, NULL };
    float x[32] = {0}, y[2];
    hx_error e = {0};
    CHECK(hx_matvec(pool, &W, x, y, &e) != HX_OK);
    hx_pool_free(pool);
    return t_done("test_matmul");
}
