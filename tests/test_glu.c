/* test_glu.c — the ggml-rounded gated activations (backend/cpu/glu.h): the AVX2 SwiGLU equals
 * the scalar lane-by-lane code bit for bit on odd row lengths and over the whole input range
 * (including the |x| > 88 paths of the exp), the exp approximation stays within 2 ulp of libm's
 * expf where it does not over/underflow, and GeGLU equals f16(gelu(f16(x))) * u. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/attn.h"
#include "backend/cpu/fa_ggml.h"
#include "backend/cpu/glu.h"
#include "core/core.h"
#include "quant/dot.h"
#include "quant/quant.h"
#include "test_util.h"

static int32_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4); memcpy(&ib, &b, 4);
    return ia > ib ? ia - ib : ib - ia;
}

static void test_exp(void) {
    int32_t worst = 0;
    for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
        int32_t u = ulps(hx_expf_ggml(x), expf(x));
        if (u > worst) worst = u;
    }
    CHECKF(worst <= 2, "ggml expf: %d ulp from libm", worst);
    CHECK(hx_expf_ggml(0.0f) == 1.0f);
    CHECK(isinf(hx_expf_ggml(200.0f)) && hx_expf_ggml(-200.0f) == 0.0f);
    CHECK(hx_expf_ggml(-100.0f) > 0.0f && hx_expf_ggml(-100.0f) < 1e-40f); /* subnormal path */
}

static void test_swiglu(void) {
    if (hx_isa_best() < HX_ISA_AVX2) { printf("SKIP AVX2 SwiGLU: CPU lacks AVX2\n"); return; }
    hx_rng r;
    hx_rng_seed(&r, 11);
    const int sizes[] = {1, 7, 8, 9, 31, 1536, 2051};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        int n = sizes[k];
        float *g = malloc(sizeof(float) * n), *u = malloc(sizeof(float) * n);
        float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n);
        for (int i = 0; i < n; i++) {
            float s = (i % 5 == 0) ? 60.0f : (i % 5 == 1) ? 0.01f : 4.0f;   /* 60: the |n| > 126 paths */
            g[i] = s * hx_rng_normal(&r);
            u[i] = hx_rng_normal(&r);
        }
        memcpy(a, g, sizeof(float) * n); memcpy(b, g, sizeof(float) * n);
        hx_swiglu_ggml(n, a, u, true);
        hx_swiglu_ggml(n, b, u, false);
        CHECKF(!memcmp(a, b, sizeof(float) * n), "SwiGLU n=%d: AVX2 differs from scalar", n);
        double worst = 0;
        for (int i = 0; i < n; i++) {
            double want = (double)g[i] / (1.0 + exp(-(double)g[i])) * u[i];
            double err = fabs(a[i] - want) / (fabs(want) + 1e-30);
            if (fabs(want) > 1e-30 && err > worst) worst = err;
        }
        CHECKF(worst < 1e-6, "SwiGLU n=%d: rel err %g vs f64", n, worst);
        free(g); free(u); free(a); free(b);
    }
}

static void test_geglu(void) {
    /* -1.998913: f16 -1.999; only the FMA form gives ggml's table entry there (-0.0455, not -0.04547) */
    const float xs[] = {-12.0f, -10.0f, -3.3f, -1.998913f, -0.5f, 0.0f, 1e-3f, 0.7f, 2.5f, 9.99f, 10.0f, 15.0f};
    const int n = (int)(sizeof xs / sizeof xs[0]);
    float g[16], u[16];
    CHECK(n <= 16);
    for (int i = 0; i < n; i++) { g[i] = xs[i]; u[i] = 1.5f; }
    hx_geglu_ggml(n, g, u);
    for (int i = 0; i < n; i++) {
        float x = xs[i], want;
        if (x <= -10.0f) want = 0.0f;
        else if (x >= 10.0f) want = x * 1.5f;
        else {
            float h = hx_fp16_to_fp32(hx_fp32_to_fp16(x));
            float y = 0.5f * h * (1.0f + tanhf(0.79788456080286535587989211986876f * h * fmaf(0.044715f * h, h, 1.0f)));
            want = hx_fp16_to_fp32(hx_fp32_to_fp16(y)) * 1.5f;
        }
        CHECKF(g[i] == want, "GeGLU(%g) = %g, want %g", x, g[i], want);
        if (x == -1.998913f) CHECKF(hx_fp32_to_fp16(g[i] / 1.5f) == hx_fp32_to_fp16(-0.0455f), "GeGLU(-1.998913) table entry %g", g[i] / 1.5f);
        double exact = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))) * 1.5;
        CHECKF(fabs(g[i] - exact) <= 2e-3 * fabs(exact) + 1e-4, "GeGLU(%g) = %g, exact %g", x, g[i], exact);
    }
}

/* The tiled flash-attention pieces (fa_ggml.h): AVX2 equals scalar bit for bit, masked
 * (-inf) scores give 0, and each piece agrees with a plain float64 computation. */
static void test_fa_tiles_hd(const int HD) {
    hx_rng r;
    hx_rng_seed(&r, 21 + HD);
    enum { MAXHD = 256 };
    static float kt[MAXHD * 64], v[64 * MAXHD], q[MAXHD], sa[64], sb[64], va[MAXHD], vb[MAXHD];
    for (int i = 0; i < HD * 64; i++) { kt[i] = hx_rng_normal(&r); v[i] = hx_rng_normal(&r); }
    for (int d = 0; d < HD; d++) q[d] = hx_rng_normal(&r);
    hx_fa_scores64(HD, kt, q, 0.125f, sa, true);
    hx_fa_scores64(HD, kt, q, 0.125f, sb, false);
    CHECK(!memcmp(sa, sb, sizeof sa));
    double worst = 0;
    for (int k = 0; k < 64; k++) {
        double want = 0;
        for (int d = 0; d < HD; d++) want += (double)kt[d * 64 + k] * q[d];
        want *= 0.125;
        if (fabs(sa[k] - want) > worst) worst = fabs(sa[k] - want);
    }
    CHECKF(worst < 1e-4, "tile scores vs f64: %g", worst);
    for (int k = 0; k < 64; k += 5) sa[k] = sb[k] = -INFINITY; /* masked */
    float M = -INFINITY;
    for (int k = 0; k < 64; k++) if (sa[k] > M) M = sa[k];
    double ea = hx_fa_exp64(sa, M, true), eb = hx_fa_exp64(sb, M, false), want = 0;
    CHECK(ea == eb && !memcmp(sa, sb, sizeof sa));
    for (int k = 0; k < 64; k++) {
        CHECK(k % 5 != 0 || sa[k] == 0.0f);
        if (k % 5) want += sa[k];
    }
    CHECKF(fabs(ea - want) < 1e-5 * want, "tile exp sum %g vs %g", ea, want);
    for (int d = 0; d < HD; d++) va[d] = vb[d] = hx_rng_normal(&r);
    hx_fa_vacc64(HD, v, sa, va, true);
    hx_fa_vacc64(HD, v, sb, vb, false);
    CHECKF(!memcmp(va, vb, sizeof(float) * HD), "tile V accumulation hd %d: AVX2 differs from scalar", HD);
}

/* head sizes: one 64-dimension chunk plus a remainder, two chunks, four */
static void test_fa_tiles(void) {
    if (hx_isa_best() < HX_ISA_AVX2) { printf("SKIP AVX2 attention tiles: CPU lacks AVX2\n"); return; }
    test_fa_tiles_hd(72);
    test_fa_tiles_hd(128);
    test_fa_tiles_hd(256);
}

/* The F16C row conversions of the KV cache stores and the tiled attention's
 * copies (forward.c) against the scalar ones, bit for bit: every f16, and
 * f32 bit patterns across the whole range (normals, f16 subnormals, ties,
 * overflow, inf, NaN), on odd lengths so the scalar tails run too. (All
 * 2^32 f32 values agree; a stride keeps the test short.) */
static void test_f16_rows(void) {
    hx_cpu_features cf = hx_cpu_detect();
    if (hx_isa_best() < HX_ISA_AVX2 || !cf.f16c) { printf("SKIP F16C rows: CPU lacks AVX2/F16C\n"); return; }
    enum { N = 65536 + 5 };
    static uint16_t h[N], ha[N], hb[N];
    static float f[N], fa[N], fb[N];
    for (int i = 0; i < N; i++) h[i] = (uint16_t)(i * 40503u);
    hx_f16_to_f32_row_avx2(N, fa, h);
    for (int i = 0; i < N; i++) fb[i] = hx_fp16_to_fp32(h[i]);
    int64_t diff = 0;
    for (int i = 0; i < N; i++) {
        /* F16C quiets a signaling NaN; the cache only holds converted f32, whose NaNs are quiet */
        bool snan = (h[i] & 0x7e00) == 0x7c00 && (h[i] & 0x3ff);
        diff += snan ? !(isnan(fa[i]) && isnan(fb[i])) : memcmp(&fa[i], &fb[i], 4) != 0;
    }
    CHECKF(!diff, "f16 -> f32 row: %lld values differ from hx_fp16_to_fp32", (long long)diff);
    diff = 0;
    for (uint64_t base = 0; base < (1ull << 32); base += (uint64_t)N * 997) {
        for (int i = 0; i < N; i++) {
            uint32_t u = (uint32_t)(base + (uint64_t)i * 997);
            memcpy(&f[i], &u, 4);
        }
        hx_f32_to_f16_row_avx2(N, ha, f);
        for (int i = 0; i < N; i++) hb[i] = hx_fp32_to_fp16(f[i]);
        for (int i = 0; i < N; i++) diff += ha[i] != hb[i];
    }
    CHECKF(!diff, "f32 -> f16 row: %lld values differ from hx_fp32_to_fp16", (long long)diff);
}

/* The exact mode's grouped attention kernels (attn.h) against the per-head calls
 * they replace in forward.c, bit for bit: hx_dot_f16_avx2 per (head, row) for the
 * scores, hx_f32_axpy_f16_avx2 row by row for the weighted sums; G = 1..5 heads
 * (pairs and an odd one out), head sizes 32..256, a ring that wraps (r0 + cnt >
 * rows) and one that does not, rows through a page table (pages of 4 rows in a
 * shuffled order), and a row stride wider than the head (kv heads side by side
 * in a cache row). */
static void test_attn_group(void) {
    if (hx_isa_best() < HX_ISA_AVX2) { printf("SKIP grouped attention: CPU lacks AVX2\n"); return; }
    hx_rng r;
    hx_rng_seed(&r, 57);
    enum { MAXG = 5, MAXHD = 256, ROWS = 37, LDS = 40 };
    const int hds[] = { 32, 64, 128, 256 };
    static uint16_t kc[ROWS * 2 * MAXHD], vc[ROWS * 2 * MAXHD];
    static float q[MAXG * MAXHD], sa[MAXG * LDS], sb[MAXG * LDS], oa[MAXG * MAXHD], ob[MAXG * MAXHD];
    int cases = 0, bad_s = 0, bad_v = 0;
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++) {
        const int hd = hds[h];
        const size_t ld = 2 * (size_t)hd; /* two kv heads per row; ours is the second */
        for (size_t i = 0; i < ROWS * ld; i++) {
            kc[i] = hx_fp32_to_fp16(hx_rng_normal(&r));
            vc[i] = hx_fp32_to_fp16(hx_rng_normal(&r));
        }
        for (int i = 0; i < MAXG * hd; i++) q[i] = hx_rng_normal(&r);
        for (int G = 1; G <= MAXG; G++)
            for (int k = 0; k < 4; k++) {
                /* k 3: 9 pages of 4 rows (rows 0..35), logical page p at physical page pt[p] */
                static const int32_t pt[9] = { 7, 2, 8, 0, 5, 1, 6, 3, 4 };
                const bool paged = k == 3;
                const int r0 = k == 0 ? 0 : k == 1 ? 5 : k == 2 ? 30 : 0, cnt = k == 0 ? 1 : k == 1 ? 20 : k == 2 ? ROWS : 35;
                const uint16_t *K = kc + hd, *Vv = vc + hd;
                const hx_kv_rows kr = { K, ld, paged ? pt : NULL, paged ? 2 : 0 }, vr = { Vv, ld, paged ? pt : NULL, paged ? 2 : 0 };
                float inv[MAXG];
                hx_attn_scores_f16_avx2(hd, G, q, &kr, r0, paged ? 1 << 20 : ROWS, cnt, sa, LDS);
                for (int g = 0; g < G; g++) {
                    for (int i = 0; i < cnt; i++) {
                        const int lr = (r0 + i) % ROWS;
                        const size_t row = (size_t)(paged ? pt[lr >> 2] * 4 + (lr & 3) : lr) * ld;
                        hx_dot_f16_avx2(hd, &sb[g * LDS + i], K + row, q + (size_t)g * hd);
                        bad_s += memcmp(&sa[g * LDS + i], &sb[g * LDS + i], 4) != 0;
                        sa[g * LDS + i] = sb[g * LDS + i] = expf(0.05f * sb[g * LDS + i]); /* weights */
                    }
                    inv[g] = 1.0f / (float)(g + 3);
                }
                hx_attn_values_f16_avx2(hd, G, sa, LDS, inv, &vr, r0, paged ? 1 << 20 : ROWS, cnt, oa);
                for (int g = 0; g < G; g++) {
                    float *o = ob + (size_t)g * hd;
                    memset(o, 0, sizeof(float) * hd);
                    for (int i = 0; i < cnt; i++) {
                        const int lr = (r0 + i) % ROWS;
                        hx_f32_axpy_f16_avx2(hd, o, Vv + (size_t)(paged ? pt[lr >> 2] * 4 + (lr & 3) : lr) * ld,
                                             sb[g * LDS + i] * inv[g]);
                    }
                }
                bad_v += memcmp(oa, ob, sizeof(float) * G * hd) != 0;
                cases++;
            }
    }
    CHECKF(!bad_s, "grouped attention scores: %d differ from hx_dot_f16_avx2", bad_s);
    CHECKF(!bad_v, "grouped attention sums: %d of %d cases differ from the per-row axpy", bad_v, cases);
    printf("grouped attention: %d cases equal the per-head kernels bit for bit\n", cases);
}

int main(void) {
    test_f16_rows();
    test_exp();
    test_swiglu();
    test_geglu();
    test_fa_tiles();
    test_attn_group();
    return t_done("test_glu");
}
