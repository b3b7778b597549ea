/* test_vnni.c — the AVX512-VNNI kernels (src/quant/gemm_avx512.c) give the
 * AVX2 kernels' bits: per-row dots and tiles (matvec nc = 1 with its
 * prefetch, batches on every edge shape) for Q8_0, Q5_0 and Q4_0 weights, and
 * the packed batch kernels (the AVX2 packed kernels' bits, which
 * are the scalar dot's),
 * on quantized rows and on random block bytes (Q8_0 levels down to -128).
 * Bit-identity is the contract that lets every ISA level share one summation
 * order (the parity mode's), so the comparison is ==, not a tolerance.
 *
 * Two builds are checked: the native one where this CPU has AVX512-VNNI, and
 * the same source compiled for AVX2 with vpdpbusd emulated by SIMDe
 * (tests/vnni_emu.c, built where SIMDe's headers exist), so machines without
 * AVX-512 run it too. Also: every ISA level's dispatched per-row kernel gives
 * the AVX2 bits for every type. Skipped (77) when neither build can run. */
#include "test_util.h"

#include "core/core.h"
#include "quant/dot.h"
#include "quant/quant.h"

typedef void (*gemm_t)(int64_t, int64_t, int64_t, const void *, size_t, const void *, size_t, float *, size_t);
typedef struct { int type; hx_vec_dot_fn dot; gemm_t gemm, packed; } kernels;

#ifdef HX_HAVE_SIMDE_EMU
#define EMU_DECL(t)                                                                                               \
    void hx_dot_##t##_avx512vnni_emu(int64_t n, float *out, const void *w, const void *x);                        \
    void hx_gemm_##t##_avx512vnni_emu(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw,                \
                                      const void *x, size_t ldx, float *y, size_t ldy);
EMU_DECL(q8_0) EMU_DECL(q5_0) EMU_DECL(q4_0)
void hx_gemm_q4_0_packed_avx512vnni_emu(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                        size_t ldx, float *y, size_t ldy);
void hx_gemm_q8_0_packed_avx512vnni_emu(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                        size_t ldx, float *y, size_t ldy);
void hx_gemm_q5_0_packed_avx512vnni_emu(int64_t n, int64_t nr, int64_t nc, const void *w, size_t ldw, const void *x,
                                        size_t ldx, float *y, size_t ldy);
static const kernels k_emu[3] = {
    { HX_TYPE_Q8_0, hx_dot_q8_0_avx512vnni_emu, hx_gemm_q8_0_avx512vnni_emu, hx_gemm_q8_0_packed_avx512vnni_emu },
    { HX_TYPE_Q5_0, hx_dot_q5_0_avx512vnni_emu, hx_gemm_q5_0_avx512vnni_emu, hx_gemm_q5_0_packed_avx512vnni_emu },
    { HX_TYPE_Q4_0, hx_dot_q4_0_avx512vnni_emu, hx_gemm_q4_0_avx512vnni_emu, hx_gemm_q4_0_packed_avx512vnni_emu } };
#endif
static const kernels k_native[3] = {
    { HX_TYPE_Q8_0, hx_dot_q8_0_avx512vnni, hx_gemm_q8_0_avx512vnni, hx_gemm_q8_0_packed_avx512vnni },
    { HX_TYPE_Q5_0, hx_dot_q5_0_avx512vnni, hx_gemm_q5_0_avx512vnni, hx_gemm_q5_0_packed_avx512vnni },
    { HX_TYPE_Q4_0, hx_dot_q4_0_avx512vnni, hx_gemm_q4_0_avx512vnni, hx_gemm_q4_0_packed_avx512vnni } };

static gemm_t avx2_gemm(int type) {
    return type == HX_TYPE_Q8_0 ? hx_gemm_q8_0_avx2 : type == HX_TYPE_Q5_0 ? hx_gemm_q5_0_avx2 : hx_gemm_q4_0_avx2;
}

/* rows x cols weights: quantized normal rows, or (raw) random bytes with sane f16 scales */
static void make_rows(int type, uint8_t *w, int64_t rows, int64_t cols, bool raw, hx_rng *r) {
    size_t rb = hx_row_size(type, cols);
    float *tmp = malloc(sizeof(float) * cols);
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t k = 0; k < cols; k++) tmp[k] = (float)hx_rng_normal(r);
        hx_quantize_row(type, tmp, w + i * rb, cols);
        if (!raw) continue;
        size_t bs = (size_t)hx_type_get(type)->type_size;
        for (size_t b = 0; b < rb / bs; b++) {
            uint8_t *blk = w + i * rb + b * bs;
            for (size_t k = 2; k < bs; k++) blk[k] = (uint8_t)(hx_rng_u64(r) >> 56); /* keep the f16 scale */
        }
    }
    free(tmp);
}

static int check_set(const char *name, const kernels *ks, hx_rng *r) {
    int checked = 0;
    const int64_t cols_list[] = { 32, 96, 1024 + 64 };
    for (int k = 0; k < 3; k++) {
        const int type = ks[k].type;
        for (int ci = 0; ci < 3; ci++)
            for (int raw = 0; raw < 2; raw++) {
                const int64_t cols = cols_list[ci], rows = 13, toks = 9;
                const size_t wr = hx_row_size(type, cols), xr = hx_row_size(HX_TYPE_Q8_0, cols);
                uint8_t *w = malloc(wr * rows), *x = malloc(xr * toks);
                float *xf = malloc(sizeof(float) * cols);
                make_rows(type, w, rows, cols, raw, r);
                for (int64_t t = 0; t < toks; t++) {
                    for (int64_t i = 0; i < cols; i++) xf[i] = (float)hx_rng_normal(r);
                    hx_quantize_row_act(HX_TYPE_Q8_0, xf, x + t * xr, cols);
                }
                hx_vec_dot_fn ref_dot = hx_get_vec_dot(type, HX_ISA_AVX2);
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t t = 0; t < toks; t++) {
                        float a = -1, b = -2;
                        ref_dot(cols, &a, w + i * wr, x + t * xr);
                        ks[k].dot(cols, &b, w + i * wr, x + t * xr);
                        CHECKF(memcmp(&a, &b, 4) == 0, "%s %s dot cols %lld raw %d row %lld tok %lld: %.9g vs avx2 %.9g",
                               name, hx_type_name(type), (long long)cols, raw, (long long)i, (long long)t, b, a);
                    }
                /* every (rows, toks) edge shape, matvec included */
                float *ya = malloc(sizeof(float) * rows * toks), *yb = malloc(sizeof(float) * rows * toks);
                for (int64_t nr = 1; nr <= rows; nr += 3)
                    for (int64_t nc = 1; nc <= toks; nc++) {
                        memset(ya, 0, sizeof(float) * rows * toks);
                        memset(yb, 0xff, sizeof(float) * rows * toks);
                        avx2_gemm(type)(cols, nr, nc, w, wr, x, xr, ya, (size_t)rows);
                        ks[k].gemm(cols, nr, nc, w, wr, x, xr, yb, (size_t)rows);
                        for (int64_t t = 0; t < nc; t++)
                            for (int64_t i = 0; i < nr; i++)
                                CHECKF(memcmp(&ya[t * rows + i], &yb[t * rows + i], 4) == 0,
                                       "%s %s gemm %lldx%lld cols %lld raw %d at (%lld, %lld): %.9g vs avx2 %.9g", name,
                                       hx_type_name(type), (long long)nr, (long long)nc, (long long)cols, raw,
                                       (long long)i, (long long)t, yb[t * rows + i], ya[t * rows + i]);
                    }
                /* the packed batch kernels: the AVX2 packed kernel's bits (= the scalar dot's) */
                for (int64_t nr = 1; ks[k].packed && nr <= rows; nr += 4)
                    for (int64_t nc = 1; nc <= toks; nc += 2) {
                        memset(ya, 0, sizeof(float) * rows * toks);
                        memset(yb, 0xff, sizeof(float) * rows * toks);
                        (type == HX_TYPE_Q4_0   ? hx_gemm_q4_0_packed_avx2
                         : type == HX_TYPE_Q5_0 ? hx_gemm_q5_0_packed_avx2
                                                : hx_gemm_q8_0_packed_avx2)(
                            cols, nr, nc, w, wr, x, xr, ya, (size_t)rows);
                        ks[k].packed(cols, nr, nc, w, wr, x, xr, yb, (size_t)rows);
                        for (int64_t t = 0; t < nc; t++)
                            for (int64_t i = 0; i < nr; i++)
                                CHECKF(memcmp(&ya[t * rows + i], &yb[t * rows + i], 4) == 0,
                                       "%s %s packed %lldx%lld cols %lld raw %d at (%lld, %lld): %.9g vs avx2 %.9g",
                                       name, hx_type_name(type), (long long)nr, (long long)nc, (long long)cols, raw,
                                       (long long)i, (long long)t, yb[t * rows + i], ya[t * rows + i]);
                    }
                checked++;
                free(ya); free(yb); free(w); free(x); free(xf);
            }
    }
    printf("%s: %d (type, shape) sets bit-identical to AVX2\n", name, checked);
    return checked;
}

/* every level's dispatched per-row kernel and tile gives the AVX2 bits */
static void check_levels(hx_rng *r) {
    static const int types[] = { HX_TYPE_F32, HX_TYPE_F16, HX_TYPE_BF16, HX_TYPE_Q4_0, HX_TYPE_Q4_1,
                                 HX_TYPE_Q5_0, HX_TYPE_Q5_1, HX_TYPE_Q8_0, HX_TYPE_Q2_K, HX_TYPE_Q3_K,
                                 HX_TYPE_Q4_K, HX_TYPE_Q5_K, HX_TYPE_Q6_K };
    const int64_t cols = 512;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const int type = types[k], dt = hx_type_get(type)->dot_type;
        const size_t wr = hx_row_size(type, cols), xr = hx_row_size(dt, cols);
        uint8_t *w = malloc(wr), *x = malloc(xr);
        float *f = malloc(sizeof(float) * cols);
        for (int64_t i = 0; i < cols; i++) f[i] = (float)hx_rng_normal(r);
        hx_quantize_row(type, f, w, cols);
        for (int64_t i = 0; i < cols; i++) f[i] = (float)hx_rng_normal(r);
        if (dt == HX_TYPE_F32) memcpy(x, f, xr);
        else hx_quantize_row_act(dt, f, x, cols);
        float a = -1;
        hx_get_vec_dot(type, HX_ISA_AVX2)(cols, &a, w, x);
        for (int isa = HX_ISA_AVX512; isa <= (int)hx_isa_best(); isa++) {
            float b = -2;
            hx_get_vec_dot(type, (hx_isa)isa)(cols, &b, w, x);
            CHECKF(memcmp(&a, &b, 4) == 0, "%s at %s: %.9g vs avx2 %.9g", hx_type_name(type), hx_isa_name((hx_isa)isa),
                   b, a);
        }
        free(w); free(x); free(f);
    }
}

int main(void) {
    if (hx_isa_best() < HX_ISA_AVX2) { printf("SKIP: no AVX2 on this CPU: nothing to compare with\n"); return 77; }
    hx_rng r;
    hx_rng_seed(&r, 27);
    int sets = 0;
    check_levels(&r);
    if (hx_isa_best() >= HX_ISA_AVX512_VNNI) sets += check_set("avx512vnni", k_native, &r);
    else printf("SKIP native avx512vnni: this CPU/OS has %s at best\n", hx_isa_name(hx_isa_best()));
#ifdef HX_HAVE_SIMDE_EMU
    sets += check_set("avx512vnni (SIMDe emulation)", k_emu, &r);
#else
    printf("SKIP emulated avx512vnni: SIMDe's headers (Debian libsimde-dev) were absent at configure time\n");
#endif
    if (!sets) { printf("SKIP: no VNNI build could run here\n"); return 77; }
    printf("%d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
