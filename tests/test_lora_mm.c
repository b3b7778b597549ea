/* test_lora_mm.c — LoRA's products in ggml's summation order (model/lora_mm.h): the two
 * orders are the documented ones (hand-made sums that each order rounds differently), the
 * AVX2 kernels equal the scalar ones bit for bit on every shape class (k a multiple of 32,
 * of 8, neither; tails of 1-3, 4-7 and 8+; m not a multiple of 4), the dispatch picks
 * tinyBLAS only where ggml does, the pool changes nothing, and every result is within
 * float rounding of a double-precision product. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "model/lora_mm.h"
#include "quant/quant.h"
#include "test_util.h"

static uint64_t rng = 88172645463325252ull;
static float frand(void) { /* xorshift64, uniform in [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 40) * (2.0 / 16777216.0) - 1.0);
}

static int same_bits(const float *a, const float *b, int64_t n) { return memcmp(a, b, sizeof(float) * (size_t)n) == 0; }

/* Sums the two orders round differently: w = 1, x = the terms. */
static void test_orders(void) {
    float one[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    /* tinyBLAS: ((1e8 + -1e8) + (1 + 0)) + ((1 + 0) + (1 + 0)) = 3; ggml_vec_dot_f32 with
     * k = 8 (all tail, rounded products added in turn): 1e8 + 1 + 1 + 1 = 1e8 (ulp 8), - 1e8 = 0 */
    float x[8] = {1e8f, 1, 1, 1, -1e8f, 0, 0, 0};
    CHECK(hx_lora_dot_tinyblas(one, x, 8) == 3.0f);
    CHECK(hx_lora_dot_vecdot(one, x, 8) == 0.0f);
    /* vec_dot's blocks of 32: lanes 0 and 4 of accumulator 0 meet before lane 1: (1e8 + -1e8) + 1 */
    float w32[32], x32[32];
    for (int i = 0; i < 32; i++) { w32[i] = 1; x32[i] = 0; }
    x32[0] = 1e8f; x32[4] = -1e8f; x32[1] = 1; x32[9] = 1; /* x32[9]: lane 1 of accumulator 1 */
    CHECK(hx_lora_dot_vecdot(w32, x32, 32) == 2.0f);
    /* the last 1-3 tail elements are fused: 3 * (1 + 2^-23) rounds only once */
    float w3[3] = {3, 1, 1}, x3[3] = {1.0f + 0x1p-23f, 0, 0};
    CHECK(hx_lora_dot_vecdot(w3, x3, 3) == fmaf(3, 1.0f + 0x1p-23f, 0));
}

static void test_kernels(void) {
    if (hx_isa_best() < HX_ISA_AVX2) { printf("SKIP AVX2 LoRA kernels: CPU lacks AVX2\n"); return; }
    static const int64_t ks[] = { 8, 16, 24, 32, 40, 64, 96, 576, 1 , 3, 7, 12, 37, 45, 75 };
    static const int64_t ms[] = { 4, 8, 6, 192 };
    int bad = 0, checked = 0;
    for (size_t a = 0; a < sizeof ks / sizeof *ks; a++)
        for (size_t b = 0; b < sizeof ms / sizeof *ms; b++) {
            int64_t k = ks[a], m = ms[b], n = 3;
            float *W = malloc(sizeof(float) * (size_t)(m * k)), *X = malloc(sizeof(float) * (size_t)(n * k));
            float *Y1 = malloc(sizeof(float) * (size_t)(n * m)), *Y2 = malloc(sizeof(float) * (size_t)(n * m));
            for (int64_t i = 0; i < m * k; i++) W[i] = frand();
            for (int64_t i = 0; i < n * k; i++) X[i] = frand() * 3.0f;
            /* vec_dot order: any shape */
            hx_lora_mm_vecdot_avx2(W, m, k, X, 0, n, Y1);
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < m; r++) Y2[i * m + r] = hx_lora_dot_vecdot(W + r * k, X + i * k, k);
            bad += !same_bits(Y1, Y2, n * m);
            checked++;
            if (k % 8 == 0) { /* tinyBLAS order */
                hx_lora_mm_tinyblas_avx2(W, m, k, X, 0, n, Y1);
                for (int64_t i = 0; i < n; i++)
                    for (int64_t r = 0; r < m; r++) Y2[i * m + r] = hx_lora_dot_tinyblas(W + r * k, X + i * k, k);
                bad += !same_bits(Y1, Y2, n * m);
                checked++;
            }
            /* dispatch: batch picks tinyBLAS only when k % 8 == 0 and m % 4 == 0 */
            hx_lora_mm_ggml(NULL, W, m, k, X, n, true, Y1);
            bool tiny = k % 8 == 0 && m % 4 == 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < m; r++)
                    Y2[i * m + r] = tiny ? hx_lora_dot_tinyblas(W + r * k, X + i * k, k) : hx_lora_dot_vecdot(W + r * k, X + i * k, k);
            bad += !same_bits(Y1, Y2, n * m);
            double worst = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < m; r++) {
                    double ref = 0, mag = 0;
                    for (int64_t l = 0; l < k; l++) { ref += (double)W[r * k + l] * X[i * k + l]; mag += fabs((double)W[r * k + l] * X[i * k + l]); }
                    double err = fabs(Y1[i * m + r] - ref) / (mag + 1e-30);
                    if (err > worst) worst = err;
                }
            CHECKF(worst < 1e-6, "k %lld m %lld: relative error %g against double", (long long)k, (long long)m, worst);
            free(W); free(X); free(Y1); free(Y2);
        }
    CHECKF(bad == 0, "%d of %d shape classes: the AVX2 kernels differ from the scalar ones", bad, checked);
}

/* A prompt-sized product: split over the pool's threads, the same bits as one thread. */
static void test_pool(void) {
    int64_t m = 8, k = 576, n = 300;
    float *W = malloc(sizeof(float) * (size_t)(m * k)), *X = malloc(sizeof(float) * (size_t)(n * k));
    float *Y1 = malloc(sizeof(float) * (size_t)(n * m)), *Y2 = malloc(sizeof(float) * (size_t)(n * m));
    for (int64_t i = 0; i < m * k; i++) W[i] = frand();
    for (int64_t i = 0; i < n * k; i++) X[i] = frand();
    hx_pool *p = hx_pool_create(3);
    CHECK(p != NULL);
    for (int batch = 0; batch < 2; batch++) {
        hx_lora_mm_ggml(NULL, W, m, k, X, n, batch, Y1);
        hx_lora_mm_ggml(p, W, m, k, X, n, batch, Y2);
        CHECK(same_bits(Y1, Y2, n * m));
    }
    hx_pool_free(p);
    free(W); free(X); free(Y1); free(Y2);
}

int main(void) {
    test_orders();
    test_kernels();
    test_pool();
    printf("test_lora_mm: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
