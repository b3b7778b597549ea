/* test_dot.c — dot kernels: the scalar kernel against a float64 dot of the
 * dequantized operands, and every SIMD kernel (AVX2, AVX-512, AVX-512 VNNI)
 * against the scalar one, on odd block counts, quantized real-looking data
 * and random block bytes. Also CPU feature detection and ISA selection. */
#include "core/core.h"
#include "quant/quant.h"
#include "quant/quant_formats.h"
#include "test_util.h"

#include <stdlib.h>

static const int k_types[] = {HX_TYPE_F32, HX_TYPE_F16, HX_TYPE_BF16, HX_TYPE_Q4_0, HX_TYPE_Q4_1,
                              HX_TYPE_Q5_0, HX_TYPE_Q5_1, HX_TYPE_Q8_0, HX_TYPE_Q2_K, HX_TYPE_Q3_K,
                              HX_TYPE_Q4_K, HX_TYPE_Q5_K, HX_TYPE_Q6_K};
#define N_TYPES (int)(sizeof k_types / sizeof k_types[0])
static const int k_blocks[] = {1, 2, 3, 7, 13, 16, 33};
#define N_BLOCKS (int)(sizeof k_blocks / sizeof k_blocks[0])

typedef struct {
    int type, dot_type;
    int64_t n;
    void *w, *x;    /* quantized operands */
    double ref;     /* float64 dot of dequantized w and x */
    double mag;     /* sum |w_i x_i| of the dequantized values */
    double slack;   /* Q4_1/Q5_1: rounding of the Q8_1 block sums s = f16(d*sum q) */
} dot_case;

static float rand_val(hx_rng *r, int style) {
    switch (style) {
    case 0: return hx_rng_normal(r);
    case 1: return hx_rng_normal(r) * expf(hx_rng_normal(r));     /* heavy tails */
    default: return 0.5f + 0.1f * hx_rng_normal(r);              /* offset: exercises mins */
    }
}

/* Fill every byte at random, then make the f16 scale fields sane (finite,
 * moderate); everything else (levels, sub-block scales, high bits) keeps
 * its random bit pattern, so the kernels see every code. */
static void randomize_blocks(int type, void *w, int64_t nb, hx_rng *r) {
    size_t bs = (size_t)hx_type_get(type)->type_size;
    uint8_t *p = w;
    for (size_t i = 0; i < bs * (size_t)nb; i++) p[i] = (uint8_t)hx_rng_u64(r);
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *b = p + (size_t)i * bs;
        uint16_t h1 = hx_fp32_to_fp16(0.01f + 0.02f * hx_rng_uniform(r));
        uint16_t h2 = hx_fp32_to_fp16(-0.05f + 0.1f * hx_rng_uniform(r));
        switch (type) {
        case HX_TYPE_Q4_0: case HX_TYPE_Q5_0: case HX_TYPE_Q8_0: memcpy(b, &h1, 2); break;
        case HX_TYPE_Q4_1: case HX_TYPE_Q5_1: memcpy(b, &h1, 2); memcpy(b + 2, &h2, 2); break;
        case HX_TYPE_Q2_K: memcpy(b + 80, &h1, 2); memcpy(b + 82, &h1, 2); break;
        case HX_TYPE_Q3_K: memcpy(b + 108, &h1, 2); break;
        case HX_TYPE_Q4_K: case HX_TYPE_Q5_K: memcpy(b, &h1, 2); memcpy(b + 2, &h1, 2); break;
        case HX_TYPE_Q6_K: memcpy(b + 208, &h1, 2); break;
        case HX_TYPE_F16: case HX_TYPE_BF16: {
            uint16_t *h = (uint16_t *)b;
            *h = type == HX_TYPE_F16 ? hx_fp32_to_fp16(rand_val(r, 1)) : hx_fp32_to_bf16(rand_val(r, 1));
            break;
        }
        case HX_TYPE_F32: { float v = rand_val(r, 1); memcpy(b, &v, 4); break; }
        }
    }
}

static void make_case(dot_case *c, int type, int64_t nblk, int style, bool random_bytes, hx_rng *r) {
    const hx_type_info *ti = hx_type_get(type);
    c->type = type;
    c->dot_type = ti->dot_type;
    c->n = nblk * (ti->block_size == 1 ? 256 : ti->block_size);
    int64_t n = c->n;
    float *wf = malloc((size_t)n * 4), *xf = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) { wf[i] = rand_val(r, style); xf[i] = rand_val(r, (style + 1) % 3); }
    c->w = malloc(hx_row_size(type, n));
    c->x = malloc(hx_row_size(c->dot_type, n));
    if (random_bytes) randomize_blocks(type, c->w, n / hx_type_get(type)->block_size, r);
    else hx_quantize_row(type, wf, c->w, n);
    hx_quantize_row(c->dot_type, xf, c->x, n);
    /* the reference sees exactly what the kernel sees */
    hx_dequantize_row(type, c->w, wf, n);
    hx_dequantize_row(c->dot_type, c->x, xf, n);
    c->ref = c->mag = 0;
    for (int64_t i = 0; i < n; i++) {
        c->ref += (double)wf[i] * xf[i];
        c->mag += fabs((double)wf[i] * xf[i]);
    }
    /* m * s: s = f16(d * sum(q)) with ggml's unrounded d = amax/127, while the reference sums the
     * dequantized values (f16 d): off by up to 2^-11 (s's rounding) + 2^-11 (d's) relative */
    c->slack = 0;
    if (c->dot_type == HX_TYPE_Q8_1) {
        const block_q8_1 *xb = c->x;
        const uint8_t *wb = c->w;
        for (int64_t i = 0; i < n / 32; i++) {
            uint16_t m;
            memcpy(&m, wb + (size_t)i * (size_t)hx_type_get(type)->type_size + 2, 2);
            c->slack += fabs((double)hx_fp16_to_fp32(m) * hx_fp16_to_fp32(xb[i].s)) / 1024.0;
        }
    }
    free(wf); free(xf);
}

static void free_case(dot_case *c) { free(c->w); free(c->x); }

/* The scalar kernel against float64. Q4_1/Q5_1 carry sum(x) as the f16
 * value s = d*sum(q) (as ggml does), so they get an f16-sized tolerance. */
static void test_scalar_vs_f64(void) {
    hx_rng r;
    hx_rng_seed(&r, 7);
    for (int k = 0; k < N_TYPES; k++) {
        int t = k_types[k];
        hx_vec_dot_fn fn = hx_get_vec_dot(t, HX_ISA_SCALAR);
        CHECKF(fn != NULL, "%s: no scalar kernel", hx_type_name(t));
        if (!fn) continue;
        const double rel = 2e-6;
        for (int b = 0; b < N_BLOCKS; b++)
            for (int style = 0; style < 3; style++)
                for (int rb = 0; rb < 2; rb++) {
                    dot_case c;
                    make_case(&c, t, k_blocks[b], style, rb, &r);
                    float got = -1;
                    fn(c.n, &got, c.w, c.x);
                    CHECKF(fabs(got - c.ref) <= rel * c.mag + 1.01 * c.slack + 1e-30, "%s scalar n=%lld style %d rb %d: %.9g vs f64 %.9g (mag %g)",
                           hx_type_name(t), (long long)c.n, style, rb, got, c.ref, c.mag);
                    free_case(&c);
                }
    }
}

static void test_simd_vs_scalar(void) {
    const hx_isa isas[] = {HX_ISA_AVX2, HX_ISA_AVX512, HX_ISA_AVX512_VNNI};
    hx_cpu_features f = hx_cpu_detect();
    for (int ii = 0; ii < 3; ii++) {
        hx_isa isa = isas[ii];
        if (isa > hx_isa_best()) {
            printf("SKIP %s kernels: this CPU/OS lacks them (avx2=%d fma=%d f16c=%d os_avx=%d avx512f=%d bw=%d vl=%d "
                   "os_avx512=%d vnni=%d)\n", hx_isa_name(isa), f.avx2, f.fma, f.f16c, f.os_avx, f.avx512f, f.avx512bw,
                   f.avx512vl, f.os_avx512, f.avx512vnni);
            continue;
        }
        int tested = 0;
        hx_rng r;
        hx_rng_seed(&r, 100 + ii);
        for (int k = 0; k < N_TYPES; k++) {
            int t = k_types[k];
            hx_vec_dot_fn fs = hx_get_vec_dot(t, HX_ISA_SCALAR), fv = hx_get_vec_dot(t, isa);
            CHECK(fv != NULL);
            if (!fv || fv == fs) continue;
            /* a kernel that only falls back to a lower ISA was tested there */
            if (isa > HX_ISA_AVX2 && fv == hx_get_vec_dot(t, isa - 1)) continue;
            tested++;
            for (int b = 0; b < N_BLOCKS; b++)
                for (int style = 0; style < 3; style++)
                    for (int rb = 0; rb < 2; rb++) {
                        dot_case c;
                        make_case(&c, t, k_blocks[b], style, rb, &r);
                        float gs = -1, gv = -2;
                        fs(c.n, &gs, c.w, c.x);
                        fv(c.n, &gv, c.w, c.x);
                        CHECKF(fabs((double)gv - gs) <= 2e-5 * c.mag + 1e-30,
                               "%s %s n=%lld style %d rb %d: %.9g vs scalar %.9g (mag %g)", hx_type_name(t),
                               hx_isa_name(isa), (long long)c.n, style, rb, gv, gs, c.mag);
                        free_case(&c);
                    }
        }
        printf("%s: %d SIMD kernels checked against scalar\n", hx_isa_name(isa), tested);
    }
}

static void test_selection(void) {
    hx_cpu_features f = hx_cpu_detect();
    hx_isa best = hx_isa_best();
    printf("cpu: avx2=%d fma=%d f16c=%d avx512f=%d bw=%d vl=%d vnni=%d avx_vnni=%d os_avx=%d os_avx512=%d "
           "amx advertised=%d usable=%d -> best %s, current %s\n",
           f.avx2, f.fma, f.f16c, f.avx512f, f.avx512bw, f.avx512vl, f.avx512vnni, f.avx_vnni, f.os_avx, f.os_avx512,
           f.amx_tile_advertised, f.amx_usable, hx_isa_name(best), hx_isa_name(hx_isa_current()));
    CHECK(!f.amx_usable || f.amx_tile_advertised);
    if (best >= HX_ISA_AVX2) CHECK(f.avx2 && f.fma && f.os_avx);
    if (best >= HX_ISA_AVX512) CHECK(f.avx512f && f.avx512bw && f.os_avx512);
    CHECK(hx_isa_current() <= best);
    /* forcing a higher ISA than the CPU has fails; lower ones work */
    if (best < HX_ISA_AVX512_VNNI) CHECK(!hx_isa_set(HX_ISA_AVX512_VNNI));
    CHECK(hx_isa_set(HX_ISA_SCALAR) && hx_isa_current() == HX_ISA_SCALAR);
    CHECK(hx_isa_set(best) && hx_isa_current() == best);
    /* asking for more than the CPU has gives the best usable kernel, never NULL */
    for (int k = 0; k < N_TYPES; k++) {
        CHECK(hx_get_vec_dot(k_types[k], HX_ISA_AVX512_VNNI) == hx_get_vec_dot(k_types[k], best));
        CHECK(hx_get_vec_dot(k_types[k], HX_ISA_SCALAR) != NULL);
    }
    /* hx_isa_matvec_same_as (cpu-test's "= kernels of"): a level maps to the lowest one with its
     * exact decode kernels; AVX2 has its own for every type, AVX-512 without VNNI none */
    for (int k = 0; k < N_TYPES; k++)
        for (int lv = HX_ISA_SCALAR; lv <= HX_ISA_AVX512_VNNI; lv++) {
            const int s = hx_isa_matvec_same_as(k_types[k], lv);
            CHECK(s >= HX_ISA_SCALAR && s <= lv);
            CHECK(hx_get_vec_dot(k_types[k], (hx_isa)s) == hx_get_vec_dot(k_types[k], (hx_isa)lv));
            CHECK(hx_get_gemm(k_types[k], (hx_isa)s) == hx_get_gemm(k_types[k], (hx_isa)lv));
            if (lv == HX_ISA_AVX2 && best >= HX_ISA_AVX2) CHECK(s == HX_ISA_AVX2);
            if (lv == HX_ISA_AVX512 && best >= HX_ISA_AVX512) CHECK(s == HX_ISA_AVX2);
        }
    CHECK(hx_isa_matvec_same_as(-1, HX_ISA_AVX2) == -1 && hx_isa_matvec_same_as(HX_TYPE_Q4_0, 4) == -1);
    CHECK(hx_get_vec_dot(HX_TYPE_I8, best) == NULL);
    CHECK(hx_get_vec_dot(-1, best) == NULL);
    CHECK(hx_get_vec_dot(HX_TYPE_COUNT, best) == NULL);
    /* the convenience entry point agrees with the kernel it dispatches to */
    hx_rng r;
    hx_rng_seed(&r, 5);
    dot_case c;
    make_case(&c, HX_TYPE_Q4_K, 4, 0, false, &r);
    float a = 0, b = 1;
    hx_vec_dot(HX_TYPE_Q4_K, c.n, &a, c.w, c.x);
    hx_get_vec_dot(HX_TYPE_Q4_K, hx_isa_current())(c.n, &b, c.w, c.x);
    CHECK(a == b);
    free_case(&c);
}

/* Real blocks: llama.cpp's quantized golden tensors ([512 rows of 256]) dotted
 * with a random activation row by every usable kernel, against float64 of
 * the dequantized values. */
static void test_golden_rows(const char *dir) {
    const char *names[] = {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                           "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
    hx_rng r;
    hx_rng_seed(&r, 31);
    float xf[256], xd[256], wd[256];
    for (int i = 0; i < 256; i++) xf[i] = hx_rng_normal(&r);
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        int t = hx_type_from_name(names[k]);
        char path[1024], *raw;
        size_t rn;
        hx_error e;
        snprintf(path, sizeof path, "%s/golden/quant/%s.raw", dir, names[k]);
        if (hx_read_file(path, &raw, &rn, &e) != HX_OK) { CHECKF(0, "%s", e.msg); continue; }
        const size_t rs = hx_row_size(t, 256);
        const int dt = hx_type_get(t)->dot_type;
        static char xq[4096];
        hx_quantize_row_act(dt, xf, xq, 256);
        hx_dequantize_row(dt, xq, xd, 256);
        int bad = 0;
        for (size_t row = 0; row < rn / rs && row < 512; row++) {
            const char *w = raw + row * rs;
            hx_dequantize_row(t, w, wd, 256);
            double ref = 0, mag = 0, slack = 0;
            for (int i = 0; i < 256; i++) { ref += (double)wd[i] * xd[i]; mag += fabs((double)wd[i] * xd[i]); }
            if (dt == HX_TYPE_Q8_1) {
                /* ggml-style s = f16(d_f32 * sum q): two f16 roundings per block */
                for (int b = 0; b < 8; b++) {
                    uint16_t m, sh;
                    memcpy(&m, w + b * hx_type_get(t)->type_size + 2, 2);
                    memcpy(&sh, xq + b * 36 + 2, 2);
                    slack += fabs((double)hx_fp16_to_fp32(m) * hx_fp16_to_fp32(sh)) / 1024.0;
                }
            }
            for (int isa = HX_ISA_SCALAR; isa <= (int)hx_isa_best(); isa++) {
                float got = 0;
                hx_get_vec_dot(t, (hx_isa)isa)(256, &got, w, xq);
                if (!(fabs(got - ref) <= 2e-5 * mag + slack + 1e-30)) {
                    if (!bad++) fprintf(stderr, "%s row %zu %s: %.9g vs f64 %.9g\n", names[k], row, hx_isa_name((hx_isa)isa), got, ref);
                }
            }
        }
        CHECKF(bad == 0, "%s: %d golden-row dots off", names[k], bad);
        free(raw);
    }
}


/* The Q4_K kernels in llama.cpp's repacked-kernel order (q4k_ggml_avx2.c) against a plain C
 * twin of that order (integer sums, fmaf chains per super-block or per 64 elements, acc - accm):
 * bit for bit, and near the float64 dot. */
static float q4k_ggml_ref(int64_t n, const void *w, const void *x, int per_pair) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    float acc = 0, accm = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = hx_fp16_to_fp32(a[i].d) * b[i].d, dm = hx_fp16_to_fp32(a[i].dmin) * b[i].d;
        int32_t isum = 0, imin = 0;
        for (int p = 0; p < 4; p++) {
            int32_t is = 0, im = 0;
            for (int h = 0; h < 2; h++) {
                const int j = 2 * p + h;
                uint8_t sc, m;
                hx_k4_scale_min(j, a[i].scales, &sc, &m);
                int32_t dot = 0;
                for (int k = 0; k < 32; k++) {
                    const uint8_t byte = a[i].qs[32 * p + k];
                    dot += (h ? byte >> 4 : byte & 0xF) * b[i].qs[32 * j + k];
                }
                is += sc * dot;
                im += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
            }
            if (per_pair) { acc = fmaf((float)is, d, acc); accm = fmaf((float)im, dm, accm); }
            else { isum += is; imin += im; }
        }
        if (!per_pair) { acc = fmaf((float)isum, d, acc); accm = fmaf((float)imin, dm, accm); }
    }
    return acc - accm;
}

static void test_q4k_ggml_order(void) {
    if (hx_isa_best() < HX_ISA_AVX2) { printf("SKIP Q4_K ggml-order kernels: CPU lacks AVX2\n"); return; }
    hx_rng r;
    hx_rng_seed(&r, 23);
    for (int b = 0; b < N_BLOCKS; b++)
        for (int style = 0; style < 3; style++)
            for (int rb = 0; rb < 2; rb++) {
                dot_case c;
                make_case(&c, HX_TYPE_Q4_K, k_blocks[b], style, rb, &r);
                float gv, gm;
                hx_dot_q4_K_ggml_gemv_avx2(c.n, &gv, c.w, c.x);
                hx_dot_q4_K_ggml_gemm_avx2(c.n, &gm, c.w, c.x);
                const float rv = q4k_ggml_ref(c.n, c.w, c.x, 0), rm = q4k_ggml_ref(c.n, c.w, c.x, 1);
                CHECKF(!memcmp(&gv, &rv, 4) && !memcmp(&gm, &rm, 4), "Q4_K ggml order n=%lld style %d rb %d: gemv %.9g vs %.9g, gemm %.9g vs %.9g",
                       (long long)c.n, style, rb, gv, rv, gm, rm);
                CHECKF(fabs(gv - c.ref) <= 1e-5 * c.mag + 1e-30 && fabs(gm - c.ref) <= 1e-5 * c.mag + 1e-30,
                       "Q4_K ggml order n=%lld: %.9g / %.9g vs f64 %.9g (mag %g)", (long long)c.n, gv, gm, c.ref, c.mag);
                free_case(&c);
            }
}

/* hx_get_gemm_ggml's tiles: every output equals the AVX2 per-row kernel bit for bit (odd shapes) */
static void test_gemm_ggml(void) {
    if (hx_isa_best() < HX_ISA_AVX2) { printf("SKIP ggml-order tiles: CPU lacks AVX2\n"); return; }
    const int types[] = {HX_TYPE_Q8_0, HX_TYPE_Q5_0, HX_TYPE_Q6_K};
    hx_rng r;
    hx_rng_seed(&r, 31);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const int t = types[k], dt = hx_type_get(t)->dot_type;
        hx_gemm_fn g = hx_get_gemm_ggml(t, HX_ISA_AVX2);
        hx_vec_dot_fn dot = hx_get_vec_dot(t, HX_ISA_AVX2);
        CHECKF(g && dot, "%s: no ggml-order tile", hx_type_name(t));
        if (!g || !dot) continue;
        const int64_t n = (t == HX_TYPE_Q6_K ? 256 : 32) * 5, rows = 7, toks = 6;
        const size_t wr = hx_row_size(t, n), xr = hx_row_size(dt, n);
        float *wf = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * rows * toks);
        uint8_t *w = malloc(wr * rows), *x = malloc(xr * toks);
        for (int64_t i = 0; i < rows; i++) {
            for (int64_t j = 0; j < n; j++) wf[j] = hx_rng_normal(&r) * (i % 3 ? 1.0f : 40.0f);
            hx_quantize_row(t, wf, w + i * wr, n);
        }
        for (int64_t i = 0; i < toks; i++) {
            for (int64_t j = 0; j < n; j++) wf[j] = hx_rng_normal(&r);
            hx_quantize_row_act(dt, wf, x + i * xr, n);
        }
        g(n, rows, toks, w, wr, x, xr, y, rows);
        int bad = t_gemm_bits_differ(dot, n, rows, toks, w, wr, x, xr, y);
        CHECKF(bad == 0, "%s: %d ggml-order tile outputs differ from the AVX2 per-row kernel", hx_type_name(t), bad);
        free(wf); free(y); free(w); free(x);
    }
}

int main(void) {
    test_selection();
    test_scalar_vs_f64();
    test_simd_vs_scalar();
    test_q4k_ggml_order();
    test_gemm_ggml();
    const char *dir = t_shared_dir();
    if (dir) test_golden_rows(dir);
    else printf("SKIP golden rows: ../shared not found\n");
    return t_done("test_dot");
}
