/* test_gemm_q8.c — the Q8_0 batch GEMMs (prefill):
 *   - the parity-order AVX512-VNNI kernel (hx_gemm_q8_0_ggml_avx512vnni, u8 activations and
 *     a per-row correction) against hx_dot_q8_0_avx2 (llama.cpp's vec_dot order), bit for
 *     bit (==), on odd shapes: rows and tokens that are not multiples of its 4x4 tiles, one
 *     to 96 blocks, weights quantized from normal values or raw random levels (-128 included),
 *     activations with outliers (levels at +-127);
 *   - hx_matmul_ex end to end at every level this CPU has: parity (HX_MM_GGML_ORDER) equal
 *     to hx_dot_q8_0_avx2, the fast path (flags 0) equal to its own reference kernel
 *     (hx_gemm_batch_ref_isa), and both within an error bound of a float64 reference:
 *     |y - y64| <= (nb + 4) * 2^-23 * S, S = sum over blocks of |dw dx| * sum |w x|
 *     (nb + 4 roundings at most on the path of any term, each <= 2^-24 relative, and a
 *     factor 2 of margin); a wrong block, lane or correction is off by about a term's
 *     size, far above it. */
#include "test_util.h"

#include "backend/cpu/matmul.h"
#include "core/core.h"
#include "quant/dot.h"
#include "quant/quant.h"
#include "quant/quant_formats.h"

typedef void (*gemm_t)(int64_t, int64_t, int64_t, const void *, size_t, const void *, size_t, float *, size_t);

/* rows of Q8_0 from normal values (every 97th element an outlier), or raw random levels in
 * [-128, 127] with a random sane scale */
static void make_w(uint8_t *w, int64_t rows, int64_t cols, bool raw, hx_rng *r) {
    const size_t rb = hx_row_size(HX_TYPE_Q8_0, cols);
    float *tmp = malloc(sizeof(float) * cols);
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t k = 0; k < cols; k++) tmp[k] = (float)hx_rng_normal(r) + (k % 97 == 0 ? 4.f : 0.f);
        hx_quantize_row(HX_TYPE_Q8_0, tmp, w + i * rb, cols);
        if (!raw) continue;
        for (int64_t j = 0; j < cols / QK8_0; j++) {
            block_q8_0 *b = (block_q8_0 *)(w + i * rb) + j;
            for (int k = 0; k < QK8_0; k++) b->qs[k] = (int8_t)(hx_rng_u64(r) >> 56);
            b->d = hx_fp32_to_fp16((float)(0.001 + 0.05 * (double)(hx_rng_u64(r) >> 40) / (1 << 24)));
        }
    }
    free(tmp);
}

/* toks Q8_0 activation rows (as matmul quantizes them) from normal values, every third
 * with an outlier so its blocks have levels at +-127 next to small ones */
static void make_x(float *f, uint8_t *x, int64_t toks, int64_t cols, hx_rng *r) {
    const size_t xr = hx_row_size(HX_TYPE_Q8_0, cols);
    for (int64_t t = 0; t < toks; t++) {
        float *ft = f + t * cols;
        for (int64_t k = 0; k < cols; k++) ft[k] = (float)hx_rng_normal(r);
        if (t % 3 == 0) ft[(t * 37) % cols] = -30.f;
        hx_quantize_row_act(HX_TYPE_Q8_0, ft, x + t * xr, cols);
    }
}

static void check_kernel(hx_rng *r) {
    if (hx_isa_best() < HX_ISA_AVX512_VNNI) {
        printf("SKIP Q8_0 vnni parity kernel: this CPU/OS has %s at best\n", hx_isa_name(hx_isa_best()));
        return;
    }
    const int64_t cols_list[] = { 32, 160, 1024, 3072 };
    const int64_t rows = 37, toks = 19; /* 9 x 4 + 1 rows, 4 x 4 + 3 tokens */
    int sets = 0;
    for (int ci = 0; ci < 4; ci++)
        for (int raw = 0; raw < 2; raw++) {
            const int64_t cols = cols_list[ci];
            const size_t wr = hx_row_size(HX_TYPE_Q8_0, cols), xr = hx_row_size(HX_TYPE_Q8_0, cols);
            uint8_t *w = malloc(wr * rows), *x = malloc(xr * toks);
            float *f = malloc(sizeof(float) * cols * toks), *y = malloc(sizeof(float) * rows * toks);
            make_w(w, rows, cols, raw, r);
            make_x(f, x, toks, cols, r);
            const int64_t nrs[] = { 1, 2, 3, 4, 5, 8, 13, rows }, ncs[] = { 1, 2, 3, 4, 5, 7, 8, toks };
            for (size_t a = 0; a < 8; a++)
                for (size_t b = 0; b < 8; b++) {
                    const int64_t nr = nrs[a], nc = ncs[b];
                    memset(y, 0xff, sizeof(float) * rows * toks);
                    hx_gemm_q8_0_ggml_avx512vnni(cols, nr, nc, w, wr, x, xr, y, (size_t)rows);
                    int bad = 0;
                    for (int64_t t = 0; t < nc; t++)
                        for (int64_t i = 0; i < nr; i++) {
                            float want;
                            hx_dot_q8_0_avx2(cols, &want, w + i * wr, x + t * xr);
                            bad += memcmp(&want, &y[t * rows + i], 4) != 0;
                        }
                    uint32_t guard;
                    memcpy(&guard, &y[(nc - 1) * rows + nr - 1 + (nr < rows)], 4);
                    CHECKF(!bad, "cols %lld raw %d %lldx%lld: %d outputs differ from hx_dot_q8_0_avx2",
                           (long long)cols, raw, (long long)nr, (long long)nc, bad);
                    CHECKF(nr == rows || guard == 0xffffffffu, "%lldx%lld: wrote past row %lld", (long long)nr,
                           (long long)nc, (long long)nr);
                }
            free(w); free(x); free(f); free(y);
            sets++;
        }
    printf("kernel: %d (cols, weights) sets of 64 shapes compared\n", sets);
}

/* y64 and the bound S of the header comment for w row . x row */
static double dot64(int64_t n, const uint8_t *w, const uint8_t *x, double *mag) {
    const block_q8_0 *a = (const block_q8_0 *)w, *b = (const block_q8_0 *)x;
    double s = 0, m = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const double d = (double)hx_fp16_to_fp32(a[i].d) * hx_fp16_to_fp32(b[i].d);
        int64_t is = 0, ia = 0;
        for (int k = 0; k < QK8_0; k++) {
            is += a[i].qs[k] * b[i].qs[k];
            ia += llabs((long long)a[i].qs[k] * b[i].qs[k]);
        }
        s += d * (double)is;
        m += fabs(d) * (double)ia;
    }
    *mag = m;
    return s;
}

static void check_matmul(hx_rng *r) {
    const hx_isa saved = hx_isa_current();
    const int64_t cols_list[] = { 576, 1024 }, rows_list[] = { 48, 21 }, ns[] = { 1, 2, 5, 37, 64 };
    hx_pool *pool = hx_pool_create(2);
    hx_error e = {0};
    CHECK(pool != NULL);
    double worst = 0; /* largest |y - y64| / bound seen */
    for (int ci = 0; ci < 2; ci++)
        for (int ri = 0; ri < 2; ri++) {
            const int64_t cols = cols_list[ci], rows = rows_list[ri], nb = cols / QK8_0;
            const size_t wr = hx_row_size(HX_TYPE_Q8_0, cols), xr = hx_row_size(HX_TYPE_Q8_0, cols);
            uint8_t *w = malloc(wr * rows), *xq = malloc(xr * 64);
            float *X = malloc(sizeof(float) * cols * 64), *Y = malloc(sizeof(float) * rows * 64);
            double *y64 = malloc(sizeof(double) * rows * 64), *mag = malloc(sizeof(double) * rows * 64);
            make_w(w, rows, cols, ri == 1, r);
            make_x(X, xq, 64, cols, r);
            for (int64_t t = 0; t < 64; t++)
                for (int64_t i = 0; i < rows; i++) y64[t * rows + i] = dot64(cols, w + i * wr, xq + t * xr, &mag[t * rows + i]);
            hx_tensor W = { "w", HX_TYPE_Q8_0, { cols, rows, 1, 1 }, w };
            for (int isa = HX_ISA_AVX2; isa <= (int)hx_isa_best(); isa++) {
                hx_isa_set((hx_isa)isa);
                for (size_t ni = 0; ni < 5; ni++)
                    for (int parity = 0; parity < 2; parity++) {
                        const int64_t n = ns[ni];
                        CHECK(hx_matmul_ex(pool, &W, X, n, Y, parity ? HX_MM_GGML_ORDER : 0, &e) == HX_OK);
                        const hx_vec_dot_fn ref = parity || n == 1
                                                      ? hx_dot_q8_0_avx2
                                                      : hx_get_vec_dot(HX_TYPE_Q8_0, hx_gemm_batch_ref_isa(HX_TYPE_Q8_0, (hx_isa)isa));
                        int bad = 0, far = 0;
                        for (int64_t t = 0; t < n; t++)
                            for (int64_t i = 0; i < rows; i++) {
                                float want;
                                ref(cols, &want, w + i * wr, xq + t * xr);
                                bad += memcmp(&want, &Y[t * rows + i], 4) != 0;
                                const double bound = (double)(nb + 4) * 0x1p-23 * mag[t * rows + i];
                                const double err = fabs((double)Y[t * rows + i] - y64[t * rows + i]);
                                far += !(err <= bound);
                                if (bound > 0 && err / bound > worst) worst = err / bound;
                            }
                        CHECKF(!bad, "matmul %s cols %lld rows %lld n %lld parity %d: %d outputs differ from %s",
                               hx_isa_name((hx_isa)isa), (long long)cols, (long long)rows, (long long)n, parity, bad,
                               parity || n == 1 ? "hx_dot_q8_0_avx2" : "the batch reference");
                        CHECKF(!far, "matmul %s cols %lld rows %lld n %lld parity %d: %d outputs beyond the f64 bound",
                               hx_isa_name((hx_isa)isa), (long long)cols, (long long)rows, (long long)n, parity, far);
                    }
            }
            free(w); free(xq); free(X); free(Y); free(y64); free(mag);
        }
    printf("matmul: worst |y - y64| is %.3f of the bound\n", worst);
    hx_isa_set(saved);
    hx_pool_free(pool);
}

int main(void) {
    if (hx_isa_best() < HX_ISA_AVX2) { printf("SKIP: no AVX2 on this CPU: no batch kernels\n"); return 77; }
    hx_rng r;
    hx_rng_seed(&r, 2028);
    check_kernel(&r);
    check_matmul(&r);
    return t_done("test_gemm_q8");
}
