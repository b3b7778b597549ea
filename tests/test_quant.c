/* test_quant.c — quant formats: golden dequantization against llama.cpp's
 * output, quantization quality (round-trip error bounds, reference quality on
 * the golden source tensor), edge inputs. */
#include "core/core.h"
#include "quant/quant.h"
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static float *read_floats(const char *dir, const char *name, size_t want) {
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/quant/%s", dir, name);
    char *buf; size_t n; hx_error e;
    if (hx_read_file(path, &buf, &n, &e) != HX_OK) { fprintf(stderr, "%s\n", e.msg); return NULL; }
    if (n != want * 4) { fprintf(stderr, "%s: %zu bytes, want %zu\n", path, n, want * 4); free(buf); return NULL; }
    return (float *)buf;
}

/* ---- 1. dequantize every golden tensor and memcmp against llama.cpp's floats ---- */
static void test_golden_dequant(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/quant/index.json", dir);
    char *js; hx_error e;
    if (hx_read_file(path, &js, NULL, &e) != HX_OK) { CHECKF(0, "%s", e.msg); return; }
    cJSON *root = cJSON_Parse(js);
    free(js);
    CHECK(cJSON_IsArray(root));
    int n_types = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *tname = cJSON_GetStringValue(cJSON_GetObjectItem(it, "type"));
        int id = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "ggml_type_id"));
        size_t nv = (size_t)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "n_values"));
        size_t rb = (size_t)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "raw_bytes"));
        if (!tname) { CHECK(tname); continue; }
        CHECKF(hx_type_from_name(tname) == id, "%s id %d", tname, id);
        CHECKF(hx_row_size(id, (int64_t)nv) == rb, "%s row size", tname);
        char rn[64], fn[64];
        snprintf(rn, sizeof rn, "%s.raw", tname);
        snprintf(fn, sizeof fn, "%s.f32", tname);
        float *want = read_floats(dir, fn, nv);
        snprintf(path, sizeof path, "%s/golden/quant/%s", dir, rn);
        char *raw; size_t rn_bytes;
        if (!want || hx_read_file(path, &raw, &rn_bytes, &e) != HX_OK) { CHECKF(0, "%s: missing", tname); free(want); continue; }
        CHECK(rn_bytes == rb);
        float *got = malloc(nv * 4);
        /* dequantize in rows of 256 (the GGUF row length) like a reader would */
        for (size_t r = 0; r < nv / 256; r++)
            hx_dequantize_row(id, raw + r * hx_row_size(id, 256), got + r * 256, 256);
        size_t bad = 0, first = (size_t)-1;
        for (size_t i = 0; i < nv; i++)
            if (memcmp(&got[i], &want[i], 4)) { if (!bad) first = i; bad++; }
        CHECKF(bad == 0, "%s: %zu of %zu floats differ, first at %zu: got %.9g want %.9g",
               tname, bad, nv, first, bad ? got[first] : 0, bad ? want[first] : 0);
        n_types++;
        free(got); free(raw); free(want);
    }
    CHECK(n_types >= 12);
    cJSON_Delete(root);
}


/* ---- 2. quantization quality ---- */
static const int k_wtypes[] = {HX_TYPE_F16, HX_TYPE_BF16, HX_TYPE_Q4_0, HX_TYPE_Q4_1, HX_TYPE_Q5_0,
                               HX_TYPE_Q5_1, HX_TYPE_Q8_0, HX_TYPE_Q8_1, HX_TYPE_Q2_K, HX_TYPE_Q3_K,
                               HX_TYPE_Q4_K, HX_TYPE_Q5_K, HX_TYPE_Q6_K, HX_TYPE_Q8_K};
#define N_WTYPES (int)(sizeof k_wtypes / sizeof k_wtypes[0])

/* quantize then dequantize n values; returns the rms error (NaN on failure) */
static double roundtrip_rmse(int type, const float *x, float *y, int64_t n) {
    void *q = malloc(hx_row_size(type, n));
    size_t w = hx_quantize_row(type, x, q, n);
    if (w != hx_row_size(type, n)) { free(q); return NAN; }
    hx_dequantize_row(type, q, y, n);
    free(q);
    double e = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) return NAN;
        e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
    }
    return sqrt(e / (double)n);
}

static double rms(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s / (double)n);
}

/* Relative rms error bounds per type on N(0,1) data and on heavy-tailed data
 * (normal * exp(normal/2), a few large outliers per block). ~1.3-1.5x the
 * reference algorithm's measured error, so a broken search shows up. */
static double bound_for(int type, int heavy) {
    switch (type) {
    case HX_TYPE_F16: return 0.0005;
    case HX_TYPE_BF16: return 0.004;
    case HX_TYPE_Q8_0: case HX_TYPE_Q8_1: return heavy ? 0.0095 : 0.007;
    case HX_TYPE_Q8_K: return heavy ? 0.016 : 0.009;
    case HX_TYPE_Q6_K: return heavy ? 0.035 : 0.025;
    case HX_TYPE_Q5_0: return heavy ? 0.075 : 0.06;
    case HX_TYPE_Q5_1: return heavy ? 0.07 : 0.055;
    case HX_TYPE_Q5_K: return heavy ? 0.06 : 0.045;
    case HX_TYPE_Q4_0: return heavy ? 0.15 : 0.12;
    case HX_TYPE_Q4_1: return heavy ? 0.14 : 0.11;
    case HX_TYPE_Q4_K: return heavy ? 0.12 : 0.09;
    case HX_TYPE_Q3_K: return heavy ? 0.25 : 0.2;
    case HX_TYPE_Q2_K: return heavy ? 0.45 : 0.4;
    }
    return 0;
}

static void test_roundtrip_random(void) {
    const int64_t n = 256 * 64;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    hx_rng r;
    for (int heavy = 0; heavy < 2; heavy++) {
        hx_rng_seed(&r, 1234 + heavy);
        for (int64_t i = 0; i < n; i++)
            x[i] = heavy ? hx_rng_normal(&r) * expf(0.5f * hx_rng_normal(&r)) : hx_rng_normal(&r);
        double xr = rms(x, n);
        for (int k = 0; k < N_WTYPES; k++) {
            int t = k_wtypes[k];
            double rel = roundtrip_rmse(t, x, y, n) / xr;
            if (getenv("HX_VERBOSE")) printf("  %-5s %s rel rmse %.5f (bound %.4f)\n", hx_type_name(t), heavy ? "heavy" : "gauss", rel, bound_for(t, heavy));
            CHECKF(rel < bound_for(t, heavy), "%s %s: rel rmse %.5f >= %.4f", hx_type_name(t),
                   heavy ? "heavy" : "gauss", rel, bound_for(t, heavy));
        }
    }
    free(x); free(y);
}

/* Our quantizer on llama.cpp's source tensor must be as good as llama.cpp's
 * own quantization of it (its dequantized output is <TYPE>.f32). */
static void test_reference_quality(const char *dir) {
    const char *types[] = {"F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
                           "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
    const size_t nv = 256 * 512;
    float *src = read_floats(dir, "source.f32", nv);
    if (!src) { CHECK(src); return; }
    float *y = malloc(nv * 4);
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int t = hx_type_from_name(types[k]);
        char fn[64];
        snprintf(fn, sizeof fn, "%s.f32", types[k]);
        float *ref = read_floats(dir, fn, nv);
        if (!ref) { CHECK(ref); continue; }
        double eref = 0;
        for (size_t i = 0; i < nv; i++) eref += ((double)ref[i] - src[i]) * ((double)ref[i] - src[i]);
        eref = sqrt(eref / (double)nv);
        double eour = roundtrip_rmse(t, src, y, (int64_t)nv);
        /* how many values came out identical to llama.cpp's (informational) */
        size_t same = 0;
        for (size_t i = 0; i < nv; i++) same += !memcmp(&y[i], &ref[i], 4);
        if (getenv("HX_VERBOSE"))
            printf("  %-5s rmse ours %.6g ref %.6g ratio %.4f, identical values %.2f%%\n", types[k], eour, eref,
                   eour / eref, 100.0 * (double)same / (double)nv);
        CHECKF(eour <= 1.02 * eref + 1e-12, "%s: rmse %.6g > 1.02 x reference %.6g", types[k], eour, eref);
        /* stronger: we implement the same reference algorithms, so the bytes match */
        char path[1024]; char *raw; size_t rn; hx_error e;
        snprintf(path, sizeof path, "%s/golden/quant/%s.raw", dir, types[k]);
        if (hx_read_file(path, &raw, &rn, &e) == HX_OK) {
            size_t rs = hx_row_size(t, 256);
            char *q = malloc(rs);
            size_t bad_rows = 0;
            for (size_t r = 0; r < nv / 256 && rn == rs * (nv / 256); r++) {
                hx_quantize_row(t, src + r * 256, q, 256);
                bad_rows += memcmp(q, raw + r * rs, rs) != 0;
            }
            CHECKF(rn == rs * (nv / 256) && bad_rows == 0, "%s: %zu of %zu rows differ from llama.cpp's bytes",
                   types[k], bad_rows, nv / 256);
            free(q); free(raw);
        } else CHECKF(0, "%s", e.msg);
        free(ref);
    }
    free(y); free(src);
}

/* Zeros, constants, huge and tiny magnitudes: no NaN/inf, exact zeros stay zero. */
static void test_edges(void) {
    const int64_t n = 512;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    for (int k = 0; k < N_WTYPES; k++) {
        int t = k_wtypes[k];
        const char *nm = hx_type_name(t);
        memset(x, 0, n * 4);
        double e = roundtrip_rmse(t, x, y, n);
        CHECKF(e == 0, "%s zeros: rmse %g", nm, e);
        for (int64_t i = 0; i < n; i++) x[i] = 0.75f;
        e = roundtrip_rmse(t, x, y, n);
        CHECKF(isfinite(e) && e < 0.75 * bound_for(t, 1), "%s constant: rmse %g", nm, e);
        for (int64_t i = 0; i < n; i++) x[i] = -3.0f;
        e = roundtrip_rmse(t, x, y, n);
        CHECKF(isfinite(e) && e < 3.0 * bound_for(t, 1), "%s negative constant: rmse %g", nm, e);
        hx_rng r;
        hx_rng_seed(&r, 99);
        for (int64_t i = 0; i < n; i++) x[i] = 3000.f * hx_rng_normal(&r);
        e = roundtrip_rmse(t, x, y, n);
        CHECKF(isfinite(e) && e / rms(x, n) < bound_for(t, 1), "%s large: rel rmse %g", nm, e / rms(x, n));
        for (int64_t i = 0; i < n; i++) x[i] = 1e-6f * hx_rng_normal(&r);
        e = roundtrip_rmse(t, x, y, n);
        CHECKF(isfinite(e), "%s tiny: rmse %g", nm, e);
        /* beyond f16 range: scales saturate, output stays finite */
        for (int64_t i = 0; i < n; i++) x[i] = 1e9f * hx_rng_normal(&r);
        if (t != HX_TYPE_F16) {
            e = roundtrip_rmse(t, x, y, n);
            CHECKF(isfinite(e), "%s huge: not finite", nm);
        }
        /* one outlier in a block of zeros */
        memset(x, 0, n * 4);
        x[37] = 5.0f;
        e = roundtrip_rmse(t, x, y, n);
        CHECKF(isfinite(e) && fabsf(y[37] - 5.0f) < 0.5f && y[36] == 0 , "%s outlier: y=%g", nm, y[37]);
    }
    /* rows that are not a multiple of the block size are refused */
    char buf[1024];
    CHECK(hx_quantize_row(HX_TYPE_Q4_K, x, buf, 100) == 0);
    CHECK(hx_quantize_row(HX_TYPE_Q4_0, x, buf, 33) == 0);
    CHECK(hx_quantize_row(HX_TYPE_I8, x, buf, 32) == 0);
    free(x); free(y);
}

/* ---- 3. activation quantizers: AVX2 == scalar bytes, and close to the weight quantizer ---- */
static void test_act_quant(void) {
    const int types[] = {HX_TYPE_Q8_0, HX_TYPE_Q8_1, HX_TYPE_Q8_K};
    const int64_t n = 256 * 24;
    float *x = malloc(n * 4), *ya = malloc(n * 4), *yw = malloc(n * 4);
    hx_rng r;
    hx_rng_seed(&r, 77);
    for (int64_t i = 0; i < n; i++) {
        int blk = (int)(i / 256);
        float v = hx_rng_normal(&r);
        if (blk % 4 == 1) v *= expf(hx_rng_normal(&r));           /* heavy tails */
        if (blk % 4 == 2) v = (i % 7 == 0) ? 0.f : 0.5f;          /* constant with zeros */
        if (blk % 4 == 3 && (i % 256) < 32) v = 0.f;              /* an all-zero sub-block */
        x[i] = v;
    }
    x[4 * 256 + 3] = -9.f; x[4 * 256 + 200] = 9.f;                /* +-max tie: first one wins */
    /* a block with amax 127 (d = 1): exact half-way values, rounded away from zero by roundf */
    for (int j = 0; j < 32; j++) x[8 * 256 + j] = (j == 0) ? 127.f : (float)(j - 16) + (j % 2 ? 0.5f : -0.5f);
    const hx_isa saved = hx_isa_current(), best = hx_isa_best();
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        int t = types[k];
        size_t rs = hx_row_size(t, n);
        char *qs = malloc(rs), *qv = malloc(rs), *qw = malloc(rs);
        hx_isa_set(HX_ISA_SCALAR);
        CHECK(hx_quantize_row_act(t, x, qs, n) == rs);
        if (best >= HX_ISA_AVX2) {
            hx_isa_set(HX_ISA_AVX2);
            CHECK(hx_quantize_row_act(t, x, qv, n) == rs);
            CHECKF(!memcmp(qs, qv, rs), "%s: AVX2 activation quantizer differs from scalar", hx_type_name(t));
            /* hx_quantize_row (reference rule) has AVX2 paths for Q8_0 and Q8_K too */
            hx_isa_set(HX_ISA_SCALAR);
            hx_quantize_row(t, x, qs, n);
            hx_isa_set(HX_ISA_AVX2);
            hx_quantize_row(t, x, qv, n);
            CHECKF(!memcmp(qs, qv, rs), "%s: AVX2 hx_quantize_row differs from scalar", hx_type_name(t));
        } else {
            printf("SKIP %s AVX2 activation quantizer: CPU lacks AVX2\n", hx_type_name(t));
        }
        /* both quantizers round to the nearest level of (almost) the same grid */
        hx_quantize_row(t, x, qw, n);
        hx_dequantize_row(t, qs, ya, n);
        hx_dequantize_row(t, qw, yw, n);
        double worst = 0;
        for (int64_t i = 0; i < n; i += 32) {
            float amax = 0;
            int64_t bl = t == HX_TYPE_Q8_K ? 256 : 32, b0 = i / bl * bl;
            for (int64_t j = b0; j < b0 + bl; j++) amax = fmaxf(amax, fabsf(x[j]));
            for (int64_t j = i; j < i + 32; j++) {
                double step = amax / 127.0;
                double e = fabs((double)ya[j] - x[j]) / (step > 0 ? step : 1);
                if (e > worst) worst = e;
            }
        }
        /* f16 rounding of d moves level 127 by up to 127/2048 */
        CHECKF(worst <= (t == HX_TYPE_Q8_K ? 0.501 : 0.5 + 127.0 / 2048 + 1e-3), "%s act: max error %.4f levels", hx_type_name(t), worst);
        if (t == HX_TYPE_Q8_1) {
            /* hx_quantize_row (what matmul feeds the Q4_1/Q5_1 dots): s = f16(d * sum q) with the
             * unrounded d = amax/127, bit for bit as ggml's quantize_row_q8_1_ref */
            const uint8_t *bw = (const uint8_t *)qw;
            int bad = 0;
            for (int64_t i = 0; i < n / 32; i++) {
                float amax = 0;
                for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[i * 32 + j]));
                int sum = 0;
                for (int j = 0; j < 32; j++) sum += (int8_t)bw[i * 36 + 4 + j];
                uint16_t sh, want = hx_fp32_to_fp16((float)sum * (amax / 127));
                memcpy(&sh, bw + i * 36 + 2, 2);
                bad += sh != want;
            }
            CHECKF(bad == 0, "Q8_1 ref: %d blocks with s != f16(sum * amax/127)", bad);
        }
        if (t == HX_TYPE_Q8_1) {
            /* s = d * sum(q) within f16 rounding */
            const uint8_t *b = (const uint8_t *)qs;
            for (int64_t i = 0; i < n / 32; i++) {
                const uint8_t *blk = b + i * 36;
                uint16_t dh, sh;
                memcpy(&dh, blk, 2); memcpy(&sh, blk + 2, 2);
                int sum = 0;
                for (int j = 0; j < 32; j++) sum += (int8_t)blk[4 + j];
                double want = hx_fp16_to_fp32(dh) * sum;
                CHECK(fabs(hx_fp16_to_fp32(sh) - want) <= fabs(want) / 1000 + 1e-6);
            }
        }
        free(qs); free(qv); free(qw);
    }
    /* the tie: the first element of largest magnitude (-9, not the later +9) sets
     * the sign: iscale = -127/-9 > 0, so d > 0 and that element maps to -127 */
    {
        float d;
        char *q = malloc(hx_row_size(HX_TYPE_Q8_K, 256));
        hx_quantize_row_act(HX_TYPE_Q8_K, x + 4 * 256, q, 256);
        memcpy(&d, q, 4);
        CHECKF(d > 0 && (int8_t)q[4 + 3] == -127, "Q8_K tie: d=%g q=%d", d, (int8_t)q[4 + 3]);
        free(q);
    }
    hx_isa_set(saved);
    CHECK(hx_quantize_row_act(HX_TYPE_Q4_K, x, ya, 100) == 0);
    free(x); free(ya); free(yw);
}

int main(void) {
    const char *dir = t_shared_dir();
    test_roundtrip_random();
    test_edges();
    test_act_quant();
    if (dir) { test_golden_dequant(dir); test_reference_quality(dir); }
    else printf("SKIP golden: ../shared not found\n");
    return t_done("test_quant");
}
