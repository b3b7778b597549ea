/* test_sgemm.c — hx_sgemm (both packings, every flag, strided X and Y) on odd
 * shapes against a float64 loop, scalar and AVX2 kernels, 1 and 2 threads;
 * the vectorized GELU / softmax / LayerNorm against their scalar references.
 * HX_SGEMM_BENCH=1 also prints GFLOP/s on the MiniLM shapes (n = 32 x 40 tokens). */
#include "test_util.h"

#include "backend/cpu/sgemm.h"
#include "core/core.h"
#include "quant/quant.h"

#include <time.h>

static float *alloc_f(size_t n) { return aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64 + 64); }

static void check_gemm(hx_pool *pool, int64_t n, int64_t rows, int64_t cols, bool nn, unsigned flags, bool bias,
                       hx_rng *rng) {
    int64_t ldx = cols + (int64_t)(hx_rng_u64(rng) % 5), ldy = rows + (int64_t)(hx_rng_u64(rng) % 5);
    int64_t ldw = nn ? rows + 3 : cols + 2; /* nn: B is (cols, rows); nt: W is (rows, cols) */
    float *X = alloc_f((size_t)n * ldx), *W = alloc_f((size_t)(nn ? cols : rows) * ldw);
    float *Y = alloc_f((size_t)n * ldy), *Y0 = alloc_f((size_t)n * ldy), *b = alloc_f((size_t)rows);
    float *Wp = alloc_f(hx_sgemm_packed_size(rows, cols));
    for (int64_t i = 0; i < n * ldx; i++) X[i] = (float)hx_rng_normal(rng);
    for (int64_t i = 0; i < (nn ? cols : rows) * ldw; i++) W[i] = (float)hx_rng_normal(rng);
    for (int64_t i = 0; i < n * ldy; i++) Y0[i] = Y[i] = (float)hx_rng_normal(rng);
    for (int64_t i = 0; i < rows; i++) b[i] = (float)hx_rng_normal(rng);
    if (nn) hx_sgemm_pack_nn(W, ldw, rows, cols, Wp);
    else hx_sgemm_pack_nt(W, ldw, rows, cols, Wp);
    hx_sgemm(pool, n, rows, cols, X, ldx, Wp, Y, ldy, bias ? b : NULL, flags);
    double worst = 0;
    int bad = 0;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t r = 0; r < ldy; r++) {
            float got = Y[t * ldy + r];
            if (r >= rows) { /* padding of Y is left alone */
                if (got != Y0[t * ldy + r]) bad++;
                continue;
            }
            double s = 0, mag = 0;
            for (int64_t k = 0; k < cols; k++) {
                double w = nn ? W[k * ldw + r] : W[r * ldw + k];
                s += (double)X[t * ldx + k] * w;
                mag += fabs((double)X[t * ldx + k] * w);
            }
            if (flags & HX_SGEMM_ACC) { s += Y0[t * ldy + r]; mag += fabs(Y0[t * ldy + r]); }
            if (bias) { s += b[r]; mag += fabs(b[r]); }
            if (flags & HX_SGEMM_GELU) s = 0.5 * s * (1.0 + erf(s / sqrt(2.0)));
            double err = fabs(got - s) / (mag + 1.0);
            if (err > worst) worst = err;
            if (!(err < 2e-6)) bad++;
        }
    }
    CHECKF(bad == 0, "sgemm n %lld rows %lld cols %lld %s flags %u bias %d: %d bad, worst rel err %.3g",
           (long long)n, (long long)rows, (long long)cols, nn ? "nn" : "nt", flags, bias, bad, worst);
    free(X); free(W); free(Y); free(Y0); free(b); free(Wp);
}

/* The packing of the current ISA is the scalar one, bit for bit (padding rows included). */
static void check_pack(int64_t rows, int64_t cols, hx_rng *rng) {
    int64_t ldw = cols + (int64_t)(hx_rng_u64(rng) % 4);
    size_t np = hx_sgemm_packed_size(rows, cols);
    float *W = alloc_f((size_t)(rows * ldw)), *a = alloc_f(np), *b = alloc_f(np);
    for (int64_t i = 0; i < rows * ldw; i++) W[i] = (float)hx_rng_normal(rng);
    for (size_t i = 0; i < np; i++) a[i] = b[i] = NAN;
    hx_isa cur = hx_isa_current();
    hx_sgemm_pack_nt(W, ldw, rows, cols, a);
    hx_isa_set(HX_ISA_SCALAR);
    hx_sgemm_pack_nt(W, ldw, rows, cols, b);
    hx_isa_set(cur);
    CHECKF(memcmp(a, b, np * sizeof(float)) == 0, "pack_nt %lld x %lld (%s) differs from the scalar packing",
           (long long)rows, (long long)cols, hx_isa_name(cur));
    free(W); free(a); free(b);
}

static void check_helpers(hx_rng *rng) {
    /* GELU over a wide range, incl. the tails */
    int bad = 0;
    float xs[4001], ys[4001];
    for (int i = 0; i < 4001; i++) xs[i] = ys[i] = -12.0f + 24.0f * i / 4000.0f;
    hx_gelu_f32(ys, 4001);
    for (int i = 0; i < 4001; i++) {
        double ref = 0.5 * xs[i] * (1.0 + erf(xs[i] / sqrt(2.0)));
        if (!(fabs(ys[i] - ref) <= 1e-6 * (1.0 + fabs(ref)))) bad++;
    }
    CHECKF(bad == 0, "gelu: %d of 4001 off", bad);
    /* softmax and LayerNorm on random rows of odd lengths */
    for (int trial = 0; trial < 50; trial++) {
        int n = 1 + (int)(hx_rng_u64(rng) % 300);
        float *x = alloc_f((size_t)n), *w = alloc_f((size_t)n), *b = alloc_f((size_t)n);
        double *r = malloc(sizeof(double) * (size_t)n);
        float scale = 0.125f + (float)(hx_rng_u64(rng) % 8);
        for (int i = 0; i < n; i++) x[i] = (float)(3 * hx_rng_normal(rng));
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < n; i++) mx = fmax(mx, (double)x[i] * scale);
        for (int i = 0; i < n; i++) { r[i] = exp((double)x[i] * scale - mx); sum += r[i]; }
        float *x0 = alloc_f((size_t)n);
        memcpy(x0, x, sizeof(float) * (size_t)n);
        hx_softmax_f32(x, n, scale);
        int sbad = 0;
        /* x * scale is rounded to f32 first: exp amplifies that by |x * scale - max| */
        for (int i = 0; i < n; i++) {
            double rel = 2e-6 + 1.2e-7 * (fabs((double)x0[i] * scale) + fabs(mx));
            if (!(fabs(x[i] - r[i] / sum) <= rel * (r[i] / sum) + 1e-9)) sbad++;
        }
        free(x0);
        CHECKF(sbad == 0, "softmax n %d: %d off", n, sbad);
        for (int i = 0; i < n; i++) {
            x[i] = (float)(5 + 2 * hx_rng_normal(rng));
            w[i] = (float)hx_rng_normal(rng);
            b[i] = (float)hx_rng_normal(rng);
        }
        double mean = 0, var = 0;
        for (int i = 0; i < n; i++) mean += x[i];
        mean /= n;
        for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
        var /= n;
        for (int i = 0; i < n; i++) r[i] = (x[i] - mean) / sqrt(var + 1e-12) * w[i] + b[i];
        hx_layernorm_f32(x, n, w, b, 1e-12f);
        int lbad = 0;
        for (int i = 0; i < n; i++) if (!(fabs(x[i] - r[i]) <= 1e-5 * (fabs(w[i]) + fabs(b[i]) + 1.0))) lbad++;
        CHECKF(lbad == 0 || n == 1, "layernorm n %d: %d off", n, lbad);
        free(x); free(w); free(b); free(r);
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bench(hx_pool *pool1, hx_pool *pool2) {
    static const int64_t shapes[][2] = {{384, 384}, {1152, 384}, {1536, 384}, {384, 1536}};
    const int64_t n = 32 * 40;
    hx_rng rng;
    hx_rng_seed(&rng, 7);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        float *X = alloc_f((size_t)(n * cols)), *W = alloc_f((size_t)(rows * cols)), *Y = alloc_f((size_t)(n * rows));
        float *Wp = alloc_f(hx_sgemm_packed_size(rows, cols));
        for (int64_t i = 0; i < n * cols; i++) X[i] = (float)hx_rng_normal(&rng);
        for (int64_t i = 0; i < rows * cols; i++) W[i] = (float)hx_rng_normal(&rng);
        hx_sgemm_pack_nt(W, cols, rows, cols, Wp);
        for (int p = 0; p < 2; p++) {
            hx_pool *pool = p ? pool2 : pool1;
            double best = 1e30;
            for (int rep = 0; rep < 15; rep++) {
                double t0 = now_s();
                hx_sgemm(pool, n, rows, cols, X, cols, Wp, Y, rows, NULL, 0);
                double dt = now_s() - t0;
                if (dt < best) best = dt;
            }
            printf("bench: n %lld x rows %lld x cols %lld, %d thread(s), %s: %.1f GFLOP/s (best of 15, %.2f ms)\n",
                   (long long)n, (long long)rows, (long long)cols, hx_pool_threads(pool), hx_isa_name(hx_isa_current()),
                   2.0 * n * rows * cols / best * 1e-9, best * 1e3);
        }
        free(X); free(W); free(Y); free(Wp);
    }
}

int main(void) {
    hx_rng rng;
    hx_rng_seed(&rng, 12345);
    hx_pool *pool1 = hx_pool_create(1), *pool2 = hx_pool_create(2);
    static const int64_t shapes[][3] = {
        {1, 1, 1}, {1, 16, 8}, {5, 17, 3}, {7, 33, 13}, {6, 16, 256}, {13, 47, 257}, {37, 45, 301},
        {100, 33, 515}, {97, 130, 64}, {203, 70, 97}, {31, 389, 383}, {250, 61, 1030},
    };
    hx_isa isas[2] = {HX_ISA_SCALAR, HX_ISA_AVX2};
    for (int ii = 0; ii < 2; ii++) {
        if (!hx_isa_set(isas[ii])) { printf("ISA %s not usable here: skipped\n", hx_isa_name(isas[ii])); continue; }
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int th = 0; th < 2; th++)
                for (int v = 0; v < 6; v++) {
                    static const unsigned fl[6] = {0, HX_SGEMM_ACC, 0, HX_SGEMM_GELU, HX_SGEMM_ACC, HX_SGEMM_GELU};
                    check_gemm(th ? pool2 : pool1, shapes[s][0], shapes[s][1], shapes[s][2], v % 2 == 1, fl[v],
                               v >= 2, &rng);
                }
        /* big enough to be split across threads in blocks of rows and panels */
        check_gemm(pool2, 1280, 384, 384, false, HX_SGEMM_ACC, true, &rng);
        check_gemm(pool2, 301, 1539, 385, false, HX_SGEMM_GELU, true, &rng);
        check_helpers(&rng);
        for (int64_t r = 1; r <= 40; r += 3)
            for (int64_t c = 1; c <= 70; c += 7) check_pack(r, c, &rng);
        printf("ISA %s: done\n", hx_isa_name(hx_isa_current()));
    }
    const char *b = getenv("HX_SGEMM_BENCH");
    if (b && *b && strcmp(b, "0")) {
        if (hx_isa_set(HX_ISA_AVX2)) bench(pool1, pool2);
    }
    hx_isa_set(hx_isa_best());
    hx_pool_free(pool1);
    hx_pool_free(pool2);
    return t_done("test_sgemm");
}
