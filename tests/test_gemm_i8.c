/* test_gemm_i8.c — the int8 products of gemm_i8.h at every ISA level this
 * CPU has (scalar, AVX2, AVX512-VNNI), on odd shapes, strided X and Y, every
 * flag, 1 and 2 threads:
 *   - activation quantization: every level gives the scalar level's bytes,
 *     scales, zero points and outlier lists; each value comes back within
 *     half a step, the outliers (clamped levels) with their remainders;
 *   - the product against a plain float64 loop over levels re-derived here
 *     from the float inputs (round(w / sw), round(x / sx) + zx), to f32
 *     rounding, and bit for bit against the scalar level (to 1e-6 with GELU,
 *     relative to the sum of |terms|: the vector and scalar GELU differ slightly);
 *   - the product against the float product within the quantization error
 *     bound sum_k (|x| sw / 2 + |w| sx / 2 + sx sw / 4).
 * HX_I8_BENCH=1 also prints GOP/s on the MiniLM shapes (n = 32 x 53 tokens). */
#include "test_util.h"

#include "backend/cpu/gemm_i8.h"
#include "backend/cpu/sgemm.h"
#include "core/core.h"
#include "quant/quant.h"

#include <time.h>

static float *alloc_f(size_t n) { return aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64 + 64); }

typedef struct act_buf { hx_i8_act a; void *mem; } act_buf;

static void act_quantize(hx_pool *pool, const float *X, int64_t ldx, int64_t n, int64_t cols, act_buf *b) {
    b->mem = aligned_alloc(64, hx_i8_act_bytes(n, cols));
    memset(b->mem, 0xA5, hx_i8_act_bytes(n, cols)); /* garbage: init and quantize must write every byte used */
    hx_i8_act_init(&b->a, n, cols, b->mem);
    hx_i8_quantize(pool, X, ldx, &b->a);
}

static int rows_clipped, rows_unclipped; /* rows with outliers; rows over HX_I8_OUT_MAX, not clipped */

/* The remainder of an outlier at (t, k), 0 for other values. */
static double remainder_of(const hx_i8_act *a, int64_t t, int64_t k) {
    for (int o = 0; o < a->n_out[t]; o++)
        if (a->out_k[t * HX_I8_OUT_MAX + o] == k) return a->out_v[t * HX_I8_OUT_MAX + o];
    return 0;
}

/* Quantization: the same bytes as `ref` (the scalar level's), each value back within half a step
 * (level + remainder for the outliers), outliers exactly where the level was clamped. */
static void check_quant(const float *X, int64_t ldx, const hx_i8_act *a, const hx_i8_act *ref, const char *isa) {
    int bad = 0, bad_ref = 0;
    for (int64_t t = 0; t < a->n; t++) {
        if (a->scale[t] != ref->scale[t] || a->zero[t] != ref->zero[t] || a->n_out[t] != ref->n_out[t]) bad_ref++;
        if (a->zero[t] < 0 || a->zero[t] > 255 || a->n_out[t] < 0 || a->n_out[t] > HX_I8_OUT_MAX) { bad++; continue; }
        for (int o = 0; o < a->n_out[t] && a->n_out[t] == ref->n_out[t]; o++) {
            int64_t i = t * HX_I8_OUT_MAX + o;
            if (a->out_k[i] != ref->out_k[i] || memcmp(&a->out_v[i], &ref->out_v[i], sizeof(float))) bad_ref++;
            if (o && a->out_k[i] <= a->out_k[i - 1]) bad++;
        }
        double ss = 0, mx = 0;
        for (int64_t k = 0; k < a->cols; k++) ss += (double)X[t * ldx + k] * X[t * ldx + k], mx = fmax(mx, fabs(X[t * ldx + k]));
        if (a->n_out[t] > 0) rows_clipped++;
        else if (mx > 1.01 * HX_I8_CLIP * sqrt(ss / a->cols)) rows_unclipped++;
        for (int64_t k = 0; k < a->cols4; k++) {
            uint8_t q = a->q[t * a->cols4 + k];
            if (q != ref->q[t * a->cols4 + k]) bad_ref++;
            if (k >= a->cols) { if (q) bad++; continue; }
            double o = remainder_of(a, t, k), x = X[t * ldx + k];
            double back = (double)a->scale[t] * (q - a->zero[t]) + o;
            if (o != 0 && q != 0 && q != 255) bad++;
            /* a row not clipped may round its extremes one step past 0 or 255: clamped, a step off */
            double step = a->n_out[t] == 0 && (q == 0 || q == 255) ? 1.0001 : 0.5001;
            if (!(fabs(back - x) <= (o != 0 ? 1e-6 * fabs(x) : step * a->scale[t]) + 1e-30)) bad++;
        }
    }
    CHECKF(bad == 0 && bad_ref == 0, "%s quantize n %lld cols %lld: %d out of bound, %d differ from scalar", isa,
           (long long)a->n, (long long)a->cols, bad, bad_ref);
}

static void check_gemm(hx_pool *pool, int64_t n, int64_t rows, int64_t cols, unsigned flags, bool bias, hx_rng *rng,
                       const char *isa) {
    int64_t ldx = cols + (int64_t)(hx_rng_u64(rng) % 5), ldy = rows + (int64_t)(hx_rng_u64(rng) % 5), ldw = cols + 3;
    float *X = alloc_f((size_t)(n * ldx)), *W = alloc_f((size_t)(rows * ldw));
    float *Y = alloc_f((size_t)(n * ldy)), *Y0 = alloc_f((size_t)(n * ldy)), *Ys = alloc_f((size_t)(n * ldy));
    float *b = alloc_f((size_t)rows);
    /* activations like the encoder's: mostly small, a few large (outliers), some rows shifted up (like
     * GELU's output), some with 1 in 20 values at +-12 (more outliers than a token keeps, in long rows) */
    for (int64_t t = 0; t < n; t++) {
        int kind = (int)(hx_rng_u64(rng) % 4);
        for (int64_t k = 0; k < ldx; k++) {
            double v = hx_rng_normal(rng) * (hx_rng_u64(rng) % 50 == 0 ? 8.0 : 1.0) + (kind == 0 ? 3.0 : 0.0);
            if (kind == 1 && hx_rng_u64(rng) % 20 == 0) v = hx_rng_u64(rng) % 2 ? 12.0 : -12.0;
            X[t * ldx + k] = (float)v;
        }
    }
    for (int64_t i = 0; i < rows * ldw; i++) W[i] = (float)(hx_rng_normal(rng) * 0.05);
    for (int64_t r = 0; r < rows; r += 7) /* an all-zero row now and then */
        if (hx_rng_u64(rng) % 4 == 0) memset(W + r * ldw, 0, (size_t)cols * sizeof(float));
    for (int64_t i = 0; i < n * ldy; i++) Y0[i] = Y[i] = Ys[i] = (float)hx_rng_normal(rng);
    for (int64_t i = 0; i < rows; i++) b[i] = (float)hx_rng_normal(rng);

    hx_i8_mat M;
    CHECK(hx_i8_mat_pack(W, ldw, rows, cols, &M));
    act_buf A, As;
    act_quantize(pool, X, ldx, n, cols, &A);
    hx_isa cur = hx_isa_current();
    hx_isa_set(HX_ISA_SCALAR);
    act_quantize(NULL, X, ldx, n, cols, &As);
    hx_gemm_i8(NULL, &As.a, &M, Ys, ldy, bias ? b : NULL, flags);
    hx_isa_set(cur);
    check_quant(X, ldx, &A.a, &As.a, isa);
    hx_gemm_i8(pool, &A.a, &M, Y, ldy, bias ? b : NULL, flags);

    int bad = 0, bad_bits = 0, bad_float = 0;
    double worst = 0;
    for (int64_t r = 0; r < rows; r++) {
        /* the weight levels, re-derived from W */
        double amax = 0;
        for (int64_t k = 0; k < cols; k++) amax = fmax(amax, fabs(W[r * ldw + k]));
        double sw = amax / 127.0;
        CHECK((float)sw == M.scale[r]);
        for (int64_t t = 0; t < n; t++) {
            double sx = A.a.scale[t], zx = A.a.zero[t], s = 0, mag = 0, f = 0, bound = 0;
            for (int64_t k = 0; k < cols; k++) {
                double x = X[t * ldx + k], w = W[r * ldw + k];
                /* the products in f32, as the quantizers round them */
                double wq = amax > 0 ? nearbyintf(W[r * ldw + k] * (127.0f / (float)amax)) : 0;
                double xq = sx > 0 ? fmin(fmax(nearbyintf(X[t * ldx + k] * (1.0f / A.a.scale[t])) + zx, 0), 255) : 0;
                double o = remainder_of(&A.a, t, k);
                s += (sx * (xq - zx) + o) * sw * wq;
                mag += fabs(sx * (xq - zx) * sw * wq) + fabs(o * sw * wq);
                f += x * w;
                double hs = A.a.n_out[t] == 0 && (xq == 0 || xq == 255) ? sx : sx / 2; /* see check_quant */
                bound += fabs(x) * sw / 2 + fabs(w) * hs + hs * sw / 2;
            }
            double pre = s, pre_f = f;
            if (bias) s += b[r], f += b[r], mag += fabs(b[r]);
            if (flags & HX_I8_ACC) s += Y0[t * ldy + r], f += Y0[t * ldy + r], mag += fabs(Y0[t * ldy + r]);
            if (flags & HX_I8_GELU) s = 0.5 * s * (1.0 + erf(s / sqrt(2.0))), f = 0.5 * f * (1.0 + erf(f / sqrt(2.0)));
            double got = Y[t * ldy + r], err = fabs(got - s) / (mag + 1e-3);
            if (err > worst) worst = err;
            if (!(err < 4e-6)) bad++;
            /* bits: GELU is hx_gelu_f32's, whose AVX2 and scalar versions differ in the last bits */
            if (flags & HX_I8_GELU ? !(fabs(got - Ys[t * ldy + r]) <= 1e-6 * (mag + 1e-3))
                                   : memcmp(&Y[t * ldy + r], &Ys[t * ldy + r], sizeof(float)) != 0)
                bad_bits++;
            /* GELU is 1.13-Lipschitz: the bound carries over with that factor */
            if (!(fabs(got - f) <= 1.13 * bound * 1.0001 + 1e-5 * (fabs(pre) + fabs(pre_f) + 1))) bad_float++;
        }
    }
    for (int64_t t = 0; t < n; t++) /* Y's padding columns are left alone */
        for (int64_t r = rows; r < ldy; r++)
            if (Y[t * ldy + r] != Y0[t * ldy + r]) bad++;
    CHECKF(bad == 0 && bad_bits == 0 && bad_float == 0,
           "%s gemm_i8 n %lld rows %lld cols %lld flags %u bias %d: %d off the reference (worst rel %.3g), "
           "%d differ from scalar, %d outside the quantization bound",
           isa, (long long)n, (long long)rows, (long long)cols, flags, bias, bad, worst, bad_bits, bad_float);
    hx_i8_mat_free(&M);
    free(A.mem); free(As.mem);
    free(X); free(W); free(Y); free(Y0); free(Ys); free(b);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench(hx_pool *pool1, hx_pool *pool2, hx_rng *rng) {
    static const int64_t sh[][2] = {{1152, 384}, {384, 384}, {1536, 384}, {384, 1536}};
    const int64_t n = 32 * 53;
    for (int s = 0; s < 4; s++) {
        int64_t rows = sh[s][0], cols = sh[s][1];
        float *X = alloc_f((size_t)(n * cols)), *W = alloc_f((size_t)(rows * cols)), *Y = alloc_f((size_t)(n * rows));
        for (int64_t i = 0; i < n * cols; i++) X[i] = (float)hx_rng_normal(rng);
        for (int64_t i = 0; i < rows * cols; i++) W[i] = (float)hx_rng_normal(rng);
        hx_i8_mat M;
        hx_i8_mat_pack(W, cols, rows, cols, &M);
        act_buf A;
        act_quantize(NULL, X, cols, n, cols, &A);
        for (int th = 1; th <= 2; th++) {
            hx_pool *p = th == 1 ? pool1 : pool2;
            double best = 1e9, bestq = 1e9;
            for (int rep = 0; rep < 10; rep++) {
                double t0 = now_s();
                hx_i8_quantize(p, X, cols, &A.a);
                double t1 = now_s();
                hx_gemm_i8(p, &A.a, &M, Y, rows, NULL, 0);
                double t2 = now_s();
                bestq = fmin(bestq, t1 - t0), best = fmin(best, t2 - t1);
            }
            printf("bench %s n %lld rows %lld cols %lld, %d thread(s): gemm %.1f GOP/s, quantize %.2f GB/s of f32\n",
                   hx_isa_name(hx_isa_current()), (long long)n, (long long)rows, (long long)cols, th,
                   2.0 * n * rows * cols / best * 1e-9, n * cols * 4.0 / bestq * 1e-9);
        }
        hx_i8_mat_free(&M);
        free(A.mem); free(X); free(W); free(Y);
    }
}

int main(void) {
    hx_rng rng;
    hx_rng_seed(&rng, 4242);
    hx_pool *pool1 = hx_pool_create(1), *pool2 = hx_pool_create(2);
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 16, 8}, {5, 17, 3}, {7, 33, 13}, {8, 32, 4}, {9, 31, 257}, {13, 47, 130},
        {37, 45, 301}, {70, 100, 387}, {65, 129, 64}, {130, 70, 97}, {3, 389, 383},
    };
    hx_isa isas[] = {HX_ISA_SCALAR, HX_ISA_AVX2, HX_ISA_AVX512, HX_ISA_AVX512_VNNI};
    int levels = 0;
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        if (!hx_isa_set(isas[ii])) { printf("ISA %s not usable here: skipped\n", hx_isa_name(isas[ii])); continue; }
        const char *isa = hx_isa_name(isas[ii]);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int th = 0; th < 2; th++)
                for (int v = 0; v < 5; v++) {
                    static const unsigned fl[5] = {0, HX_I8_ACC, HX_I8_GELU, HX_I8_ACC, 0};
                    check_gemm(th ? pool2 : pool1, shapes[s][0], shapes[s][1], shapes[s][2], fl[v], v >= 3 || v == 2,
                               &rng, isa);
                }
        /* big enough to be split across threads in blocks of tokens and panels */
        check_gemm(pool2, 301, 1539, 385, HX_I8_GELU, true, &rng, isa);
        check_gemm(pool2, 259, 384, 1536, HX_I8_ACC, true, &rng, isa);
        printf("ISA %s: done\n", isa);
        levels++;
    }
    CHECK(levels >= 1);
    /* the clipping and its fallback were both exercised */
    printf("rows with outliers: %d; rows not clipped (too many outliers): %d\n", rows_clipped, rows_unclipped);
    CHECK(rows_clipped > 100 && rows_unclipped > 0);
    const char *b = getenv("HX_I8_BENCH");
    if (b && *b && strcmp(b, "0")) {
        hx_isa_set(hx_isa_best());
        bench(pool1, pool2, &rng);
        if (hx_isa_set(HX_ISA_AVX2)) bench(pool1, pool2, &rng);
    }
    hx_isa_set(hx_isa_best());
    hx_pool_free(pool1);
    hx_pool_free(pool2);
    return t_done("test_gemm_i8");
}
