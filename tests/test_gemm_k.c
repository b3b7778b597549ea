/* test_gemm_k.c — the K-quant batch GEMMs (prefill) against their per-row
 * references, bit for bit, on every ISA level this CPU has:
 *   Q4_K in three float orders (quant/dot.h): hx_dot_q4_K_scalar (exact mode,
 *   hx_get_gemm_batch), hx_dot_q4_K_ggml_gemm_avx2 and _gemv_avx2 (parity mode,
 *   hx_get_gemm_q4_K_ggml), each as the AVX2 8-row and the AVX512-VNNI 16-row
 *   packed kernel; Q6_K in the AVX2 per-row kernel's order (the parity mode's)
 *   as the AVX512-VNNI 16-row packed kernel;
 * and matmul end to end, both modes (HX_MM_GGML_ORDER: gemm order for the
 * first n - n % 4 tokens, gemv order after), at every level.
 * Shapes: rows and tokens that are not multiples of the 8/16-row groups or of
 * the 4/8-token tiles, one to many super-blocks; weights quantized from
 * normal values or random block bytes (every level, scale and min), and
 * activations with outliers (levels at +-127). Equality is ==, not a tolerance. */
#include "test_util.h"

#include "backend/cpu/matmul.h"
#include "core/core.h"
#include "quant/dot.h"
#include "quant/quant.h"
#include "quant/quant_formats.h"

#include <stddef.h>

typedef void (*gemm_t)(int64_t, int64_t, int64_t, const void *, size_t, const void *, size_t, float *, size_t);

/* rows of Q4_K or Q6_K: quantized normal values, or (raw) random bytes (every
 * level, scale and min, signed Q6_K scales down to -128) with sane f16 scales */
static void make_w(int type, uint8_t *w, int64_t rows, int64_t cols, bool raw, hx_rng *r) {
    const size_t rb = hx_row_size(type, cols);
    float *tmp = malloc(sizeof(float) * cols);
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t k = 0; k < cols; k++) tmp[k] = (float)hx_rng_normal(r) + (k % 97 == 0 ? 4.f : 0.f);
        hx_quantize_row(type, tmp, w + i * rb, cols);
        if (!raw) continue;
        for (int64_t j = 0; j < cols / QK_K; j++) {
            uint8_t *bytes;
            size_t len;
            if (type == HX_TYPE_Q4_K) {
                block_q4_K *b = (block_q4_K *)(w + i * rb) + j;
                bytes = b->scales; /* scales then qs, up to the end of the block */
                len = sizeof(block_q4_K) - offsetof(block_q4_K, scales);
            } else {
                block_q6_K *b = (block_q6_K *)(w + i * rb) + j;
                bytes = b->ql; /* ql, qh, scales; d stays */
                len = offsetof(block_q6_K, d);
            }
            for (size_t k = 0; k < len; k++) bytes[k] = (uint8_t)(hx_rng_u64(r) >> 56);
        }
    }
    free(tmp);
}

/* toks Q8_K activation rows from normal values, every third with an outlier */
static void make_act(uint8_t *x, int64_t toks, int64_t cols, hx_rng *r) {
    const size_t xr = hx_row_size(HX_TYPE_Q8_K, cols);
    float *f = malloc(sizeof(float) * cols);
    for (int64_t t = 0; t < toks; t++) {
        for (int64_t k = 0; k < cols; k++) f[k] = (float)hx_rng_normal(r);
        if (t % 3 == 0) f[(t * 37) % cols] = -30.f;
        hx_quantize_row_act(HX_TYPE_Q8_K, f, x + t * xr, cols);
    }
    free(f);
}

typedef struct { const char *name; int type; gemm_t gemm; hx_vec_dot_fn ref; hx_isa need; } kernel;

static void check_kernels(hx_rng *r) {
    const kernel ks[] = {
        { "Q4_K avx2 packed (scalar order)", HX_TYPE_Q4_K, hx_gemm_q4_K_packed_avx2, hx_dot_q4_K_scalar, HX_ISA_AVX2 },
        { "Q4_K avx2 ggml gemm order", HX_TYPE_Q4_K, hx_gemm_q4_K_ggml_gemm_avx2, hx_dot_q4_K_ggml_gemm_avx2,
          HX_ISA_AVX2 },
        { "Q4_K avx2 ggml gemv order", HX_TYPE_Q4_K, hx_gemm_q4_K_ggml_gemv_avx2, hx_dot_q4_K_ggml_gemv_avx2,
          HX_ISA_AVX2 },
        { "Q4_K vnni packed (scalar order)", HX_TYPE_Q4_K, hx_gemm_q4_K_packed_avx512vnni, hx_dot_q4_K_scalar,
          HX_ISA_AVX512_VNNI },
        { "Q4_K vnni ggml gemm order", HX_TYPE_Q4_K, hx_gemm_q4_K_ggml_gemm_avx512vnni, hx_dot_q4_K_ggml_gemm_avx2,
          HX_ISA_AVX512_VNNI },
        { "Q4_K vnni ggml gemv order", HX_TYPE_Q4_K, hx_gemm_q4_K_ggml_gemv_avx512vnni, hx_dot_q4_K_ggml_gemv_avx2,
          HX_ISA_AVX512_VNNI },
        { "Q6_K vnni ggml (avx2) order", HX_TYPE_Q6_K, hx_gemm_q6_K_ggml_avx512vnni, hx_dot_q6_K_avx2,
          HX_ISA_AVX512_VNNI },
    };
    const int64_t cols_list[] = { 256, 768, 2304 };
    const int64_t rows = 37, toks = 19; /* rows: 2 x 16 + 5, 4 x 8 + 5; toks: 2 x 8 + 3, 4 x 4 + 3 */
    int ran = 0;
    for (size_t k = 0; k < sizeof ks / sizeof ks[0]; k++) {
        if (hx_isa_best() < ks[k].need) {
            printf("SKIP %s: this CPU/OS has %s at best\n", ks[k].name, hx_isa_name(hx_isa_best()));
            continue;
        }
        for (int ci = 0; ci < 3; ci++)
            for (int raw = 0; raw < 2; raw++) {
                const int64_t cols = cols_list[ci];
                const size_t wr = hx_row_size(ks[k].type, cols), xr = hx_row_size(HX_TYPE_Q8_K, cols);
                uint8_t *w = malloc(wr * rows), *x = malloc(xr * toks);
                float *y = malloc(sizeof(float) * rows * toks);
                make_w(ks[k].type, w, rows, cols, raw, r);
                make_act(x, toks, cols, r);
                const int64_t nrs[] = { 1, 5, 8, 16, 17, 33, rows }, ncs[] = { 1, 3, 4, 8, 9, 13, toks };
                for (size_t a = 0; a < 7; a++)
                    for (size_t b = 0; b < 7; b++) {
                        const int64_t nr = nrs[a], nc = ncs[b];
                        memset(y, 0xff, sizeof(float) * rows * toks);
                        ks[k].gemm(cols, nr, nc, w, wr, x, xr, y, (size_t)rows); /* ldy = rows: untouched rows stay */
                        int bad = 0;
                        for (int64_t t = 0; t < nc; t++)
                            for (int64_t i = 0; i < nr; i++) {
                                float want;
                                ks[k].ref(cols, &want, w + i * wr, x + t * xr);
                                bad += memcmp(&want, &y[t * rows + i], 4) != 0;
                            }
                        uint32_t guard;
                        memcpy(&guard, &y[(nc - 1) * rows + nr - 1 + (nr < rows)], 4);
                        CHECKF(!bad, "%s cols %lld raw %d %lldx%lld: %d outputs differ from the per-row kernel",
                               ks[k].name, (long long)cols, raw, (long long)nr, (long long)nc, bad);
                        CHECKF(nr == rows || guard == 0xffffffffu, "%s %lldx%lld: wrote past row %lld", ks[k].name,
                               (long long)nr, (long long)nc, (long long)nr);
                    }
                free(w); free(x); free(y);
                ran++;
            }
    }
    printf("kernels: %d (kernel, shape) sets compared\n", ran);
}

/* hx_matmul_ex with HX_MM_GGML_ORDER at every level: Q4_K rows % 8 == 0 take
 * the gemm order for tokens below n - n % 4, the gemv order after; other rows
 * counts the scalar order; the default (flags 0) the scalar order. */
static void check_matmul(hx_rng *r) {
    const hx_isa saved = hx_isa_current();
    const int64_t cols = 512, rows_list[] = { 48, 40, 21 }, ns[] = { 1, 2, 7, 37, 64 };
    hx_pool *pool = hx_pool_create(2);
    hx_error e = {0};
    CHECK(pool != NULL);
    for (size_t ri = 0; ri < 6; ri++) {
        const int64_t rows = rows_list[ri % 3];
        const int type = ri < 3 ? HX_TYPE_Q4_K : HX_TYPE_Q6_K;
        const size_t wr = hx_row_size(type, cols), xr = hx_row_size(HX_TYPE_Q8_K, cols);
        uint8_t *w = malloc(wr * rows), *xq = malloc(xr * 64);
        float *X = malloc(sizeof(float) * cols * 64), *Y = malloc(sizeof(float) * rows * 64);
        make_w(type, w, rows, cols, ri % 3 == 1, r);
        for (int64_t i = 0; i < cols * 64; i++) X[i] = (float)hx_rng_normal(r);
        for (int64_t t = 0; t < 64; t++) hx_quantize_row_act(HX_TYPE_Q8_K, X + t * cols, xq + t * xr, cols);
        hx_tensor W = { "w", type, { cols, rows, 1, 1 }, w };
        for (int isa = HX_ISA_AVX2; isa <= (int)hx_isa_best(); isa++) {
            hx_isa_set((hx_isa)isa);
            for (size_t ni = 0; ni < 5; ni++)
                for (int parity = 0; parity < 2; parity++) {
                    const int64_t n = ns[ni];
                    CHECK(hx_matmul_ex(pool, &W, X, n, Y, parity ? HX_MM_GGML_ORDER : 0, &e) == HX_OK);
                    int bad = 0;
                    for (int64_t t = 0; t < n; t++)
                        for (int64_t i = 0; i < rows; i++) {
                            hx_vec_dot_fn ref;
                            if (type == HX_TYPE_Q6_K) /* parity: ggml's vec_dot order = the AVX2 kernel's */
                                ref = parity || n == 1 ? hx_dot_q6_K_avx2 : hx_dot_q6_K_scalar;
                            else
                                ref = !parity        ? (n == 1 ? hx_dot_q4_K_avx2 : hx_dot_q4_K_scalar)
                                    : rows % 8      ? (n == 1 ? hx_dot_q4_K_avx2 : hx_dot_q4_K_scalar)
                                    : t < n - n % 4 ? hx_dot_q4_K_ggml_gemm_avx2
                                                    : hx_dot_q4_K_ggml_gemv_avx2;
                            float want;
                            ref(cols, &want, w + i * wr, xq + t * xr);
                            bad += memcmp(&want, &Y[t * rows + i], 4) != 0;
                        }
                    CHECKF(!bad, "matmul %s %s rows %lld n %lld parity %d: %d outputs differ", hx_type_name(type),
                           hx_isa_name((hx_isa)isa),
                           (long long)rows, (long long)n, parity, bad);
                }
        }
        free(w); free(xq); free(X); free(Y);
    }
    hx_isa_set(saved);
    hx_pool_free(pool);
}

int main(void) {
    if (hx_isa_best() < HX_ISA_AVX2) { printf("SKIP: no AVX2 on this CPU: no batch kernels\n"); return 77; }
    hx_rng r;
    hx_rng_seed(&r, 2027);
    check_kernels(&r);
    check_matmul(&r);
    return t_done("test_gemm_k");
}
