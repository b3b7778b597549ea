/* gemm_k_bench.c — one thread's GFLOP/s of the quantized batch (prefill)
 * kernels: the K-quants' (Q4_K, Q6_K against Q8_K activations) and the
 * 32-element formats' (Q8_0, Q4_0 against Q8_0 activations). Prefill shape:
 * ROWS weight rows x TOKS tokens x COLS, weights and activations in L2, per
 * kernel and ISA level, on CPU time (CLOCK_THREAD_CPUTIME_ID) so a shared
 * machine's neighbours count less; best of REPS calls. "avx2 order" kernels
 * give hx_dot_*_avx2's bits (the parity mode), "scalar order" ones
 * hx_dot_*_scalar's (the exact mode). COLS must be a multiple of 32; the
 * K-quant kernels run where it is a multiple of 256.
 *
 * usage: gemm_k_bench [ROWS [TOKS [COLS [REPS]]]]   (default 96 256 1024 7) */
#include "core/core.h"
#include "quant/dot.h"
#include "quant/quant.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*gemm_t)(int64_t, int64_t, int64_t, const void *, size_t, const void *, size_t, float *, size_t);

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int64_t rows = argc > 1 ? atoll(argv[1]) : 96, toks = argc > 2 ? atoll(argv[2]) : 256;
    const int64_t cols = argc > 3 ? atoll(argv[3]) : 1024;
    const int reps = argc > 4 ? atoi(argv[4]) : 7;
    if (hx_isa_best() < HX_ISA_AVX2 || cols % 32) { fprintf(stderr, "needs AVX2 and COLS %% 32 == 0\n"); return 1; }
    const struct { const char *name; int type; gemm_t g; hx_isa need; } ks[] = {
        { "q4_K tiles 3x4 (avx2 order)", HX_TYPE_Q4_K, hx_gemm_q4_K_avx2, HX_ISA_AVX2 },
        { "q4_K packed avx2 (scalar order)", HX_TYPE_Q4_K, hx_gemm_q4_K_packed_avx2, HX_ISA_AVX2 },
        { "q4_K packed vnni (scalar order)", HX_TYPE_Q4_K, hx_gemm_q4_K_packed_avx512vnni, HX_ISA_AVX512_VNNI },
        { "q4_K ggml gemm avx2", HX_TYPE_Q4_K, hx_gemm_q4_K_ggml_gemm_avx2, HX_ISA_AVX2 },
        { "q4_K ggml gemm vnni", HX_TYPE_Q4_K, hx_gemm_q4_K_ggml_gemm_avx512vnni, HX_ISA_AVX512_VNNI },
        { "q4_K ggml gemv vnni", HX_TYPE_Q4_K, hx_gemm_q4_K_ggml_gemv_avx512vnni, HX_ISA_AVX512_VNNI },
        { "q6_K tiles 3x4 (avx2 order)", HX_TYPE_Q6_K, hx_gemm_q6_K_avx2, HX_ISA_AVX2 },
        { "q6_K packed avx2 (scalar order)", HX_TYPE_Q6_K, hx_gemm_q6_K_packed_avx2, HX_ISA_AVX2 },
        { "q6_K ggml (avx2 order) vnni", HX_TYPE_Q6_K, hx_gemm_q6_K_ggml_avx512vnni, HX_ISA_AVX512_VNNI },
        { "q8_0 tiles 4x4 avx2 (avx2 order)", HX_TYPE_Q8_0, hx_gemm_q8_0_avx2, HX_ISA_AVX2 },
        { "q8_0 tiles 4x4 vnni (avx2 order)", HX_TYPE_Q8_0, hx_gemm_q8_0_avx512vnni, HX_ISA_AVX512_VNNI },
        { "q8_0 ggml u8 vnni (avx2 order)", HX_TYPE_Q8_0, hx_gemm_q8_0_ggml_avx512vnni, HX_ISA_AVX512_VNNI },
        { "q8_0 packed avx2 (scalar order)", HX_TYPE_Q8_0, hx_gemm_q8_0_packed_avx2, HX_ISA_AVX2 },
        { "q8_0 packed vnni (scalar order)", HX_TYPE_Q8_0, hx_gemm_q8_0_packed_avx512vnni, HX_ISA_AVX512_VNNI },
        { "q4_0 packed avx2 (scalar order)", HX_TYPE_Q4_0, hx_gemm_q4_0_packed_avx2, HX_ISA_AVX2 },
        { "q4_0 packed vnni (scalar order)", HX_TYPE_Q4_0, hx_gemm_q4_0_packed_avx512vnni, HX_ISA_AVX512_VNNI },
    };
    hx_rng r;
    hx_rng_seed(&r, 1);
    float *f = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * rows * toks);
    /* the same activations quantized both ways: [0] Q8_K (K-quants, COLS % 256 == 0), [1] Q8_0 */
    const int act[2] = {HX_TYPE_Q8_K, HX_TYPE_Q8_0};
    const bool kq = cols % 256 == 0;
    size_t xr[2] = {kq ? hx_row_size(HX_TYPE_Q8_K, cols) : 0, hx_row_size(HX_TYPE_Q8_0, cols)};
    uint8_t *x[2] = {malloc(xr[0] * toks + 1), malloc(xr[1] * toks)};
    for (int64_t t = 0; t < toks; t++) {
        for (int64_t i = 0; i < cols; i++) f[i] = hx_rng_normal(&r);
        for (int a = kq ? 0 : 1; a < 2; a++) hx_quantize_row_act(act[a], f, x[a] + t * xr[a], cols);
    }
    printf("%lld rows x %lld tokens x %lld cols, one thread, best of %d%s\n", (long long)rows, (long long)toks,
           (long long)cols, reps, kq ? "" : " (COLS % 256 != 0: no K-quant kernels)");
    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
        const int a = ks[k].type == HX_TYPE_Q4_K || ks[k].type == HX_TYPE_Q6_K ? 0 : 1;
        if (hx_isa_best() < ks[k].need || (a == 0 && !kq)) continue;
        const size_t wr = hx_row_size(ks[k].type, cols);
        uint8_t *w = malloc(wr * rows);
        for (int64_t i = 0; i < rows; i++) {
            for (int64_t c = 0; c < cols; c++) f[c] = hx_rng_normal(&r);
            hx_quantize_row(ks[k].type, f, w + i * wr, cols);
        }
        double best = 1e30;
        for (int rep = 0; rep < reps; rep++) {
            const double t0 = cpu_s();
            ks[k].g(cols, rows, toks, w, wr, x[a], xr[a], y, (size_t)rows);
            const double dt = cpu_s() - t0;
            if (dt < best) best = dt;
        }
        printf("%-34s %8.1f GFLOP/s\n", ks[k].name, 2.0 * rows * toks * cols / best * 1e-9);
        free(w);
    }
    free(f); free(y); free(x[0]); free(x[1]);
    return 0;
}
