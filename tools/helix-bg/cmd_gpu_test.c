/* cmd_gpu_test.c — helix-bg gpu-test: what the GPU can do and whether our
 * kernels are right, measured the same way every time.
 *
 *   helix-bg gpu-test [--quick] [--json] [-m MODEL.gguf ...] [-p N] [-n N] [--ref64]
 *   helix-bg gpu-test --probe   (exit 0 when a GPU is usable, 77 with the reason when not: for tests)
 *
 * 1. device, device-to-device copy bandwidth (bytes read + written), cuBLAS
 *    f16 GEMM TFLOP/s;
 * 2. for every weight type: the fused dequant matvec (n = 1), the tiled small
 *    matmul (n = 5) and the cuBLAS path (n = 64) checked against the CPU
 *    reference (dequantize + float64 dot) on fresh random data of odd shapes,
 *    output poisoned with NaN first; then matvec GB/s at decode shapes against
 *    the copy bandwidth (32 products in one CUDA graph over copies of the
 *    matrix larger than the L2 cache, median of many timed launches). Types
 *    with the 8-bit-activation decode kernel get a second row (" +q8": error
 *    bound 2e-2, from rounding the activations; time includes quantizing x)
 *    and a third (" +q8 b") for many sequences' tokens at once (the int8
 *    tensor-core kernel, n 2..77, same bound; 4096 x 4096 timed at n = 1, 8,
 *    32, 64 as weight GB/s: a batch should cost about one read of W);
 * 2b. the fused decode attention (q/k norm + RoPE + KV store + attention in
 *    one launch) on 27 cases (head sizes 8-256, GQA 1/2/4, positions 0-300 over
 *    up to 10 splits, a sliding-window ring, softcap, rope table or not)
 *    against float64: out relative error < 2e-3, the stored K/V row within 1
 *    f16 ulp and no other cache element touched, the 8-bit output within 1;
 *    HX_CUDA_ATT_BLOCK=1 runs the block-wide kernel where it would pick the
 *    warp-per-position one (head sizes 64/128/256);
 * 2c. the prefill attention (hx_k_attention, n queries over a filled f16
 *    cache) on 17 cases (head sizes 64 and 128 on the tensor-core kernel, 96 on
 *    the per-query one; GQA 1/2/4, n 2-300, first position 0 or 37, sliding
 *    windows with and without a ring, softcap) against float64: relative
 *    error < 5e-3 (q and P are rounded to f16); HX_CUDA_ATT_TC=0 checks the
 *    FP32 tiled kernel instead, HX_CUDA_NAIVE_ATTN the per-query one;
 * 3. for each -m MODEL: the whole forward on the GPU against the CPU path
 *    (quantized weights dotted with 8-bit activations as in llama.cpp's CPU
 *    build, f32 elsewhere, f16 KV cache): prefill logits relative error
 *    (max |gpu - cpu| / max |cpu|) must be < 1e-2, and greedy decode (GPU: one
 *    graph launch per token) must give the same tokens for -n steps (64).
 *    --ref64 also runs tests/ref_forward.h (float64) on the prompt and prints
 *    both prefills' error against it; the logits then also pass when the GPU
 *    is at least as close to float64 as the CPU (models with outlier
 *    activations, where the CPU's 8-bit rounding is the larger error).
 * 4. for each -e BERT_MODEL (GGUF or HF folder): embeddings GPU vs CPU (min
 *    cosine over 200 sentences, must be > 0.9999), GPU sentences/s at batch
 *    1, 32 and 256 over 1000 sentences of 10-60 words (tokenization included);
 * The HX_CUDA_* developer variables (backend/cuda/dev_opts.h) are read here,
 * once, and passed to every check and context (the library reads none).
 * Exit status 1 when any check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "helix.h"
#ifdef HX_HAVE_CUDA
#include "backend/cpu/forward.h"
#include "backend/cuda/cuda.h"
#include "backend/cuda/checks/checks.h"
#include "core/core.h"
#include "model/model.h"
#include "quant/quant.h"
#include "run/sampler.h"
/* the float64 reference decoder forward (the tests' oracle), for --ref64 */
#include "../../tests/ref_forward.h"
#endif

#ifdef HX_HAVE_CUDA
/* The developer switches from the environment (hx_cuda_dev_opts_from_env), for every check and context. */
static hx_cuda_dev_opts g_dev;

static const int TYPES[] = {HX_TYPE_F32, HX_TYPE_F16, HX_TYPE_BF16, HX_TYPE_Q4_0, HX_TYPE_Q4_1, HX_TYPE_Q5_0,
                            HX_TYPE_Q5_1, HX_TYPE_Q8_0, HX_TYPE_Q2_K, HX_TYPE_Q3_K, HX_TYPE_Q4_K, HX_TYPE_Q5_K,
                            HX_TYPE_Q6_K};
#define NTYPES ((int)(sizeof TYPES / sizeof TYPES[0]))

/* Random rows x cols matrix quantized to type (host), and its dequantized f32 copy. */
static uint8_t *rand_matrix(int type, int rows, int cols, hx_rng *r, float **deq) {
    size_t rb = hx_row_size(type, cols);
    uint8_t *w = malloc(rb * rows);
    float *row = malloc(sizeof(float) * cols);
    *deq = malloc(sizeof(float) * (size_t)rows * cols);
    if (!w || !row || !*deq) { free(w); free(row); free(*deq); *deq = NULL; return NULL; }
    for (int i = 0; i < rows; i++) {
        for (int j = 0; j < cols; j++) row[j] = hx_rng_normal(r) * 0.05f;
        hx_quantize_row(type, row, w + rb * i, cols);
        hx_dequantize_row(type, w + rb * i, *deq + (size_t)i * cols, cols);
    }
    free(row);
    return w;
}

/* The error measure of every check: max |got - ref| / max |ref| over the
 * elements passed to err_add; an unwritten (NaN) output makes it infinite. */
static void err_add(double got, double ref, double *maxd, double *maxref) {
    if (fabs(ref) > *maxref) *maxref = fabs(ref);
    double d = isnan(got) ? INFINITY : fabs(got - ref);
    if (d > *maxd) *maxd = d;
}
static double err_rel(double maxd, double maxref) { return maxref > 0 ? maxd / maxref : maxd; }

/* err_rel of y against a float64 reference. */
static double check_linear(int type, int rows, int cols, int n, bool q8, hx_rng *r, hx_error *e, hx_status *st) {
    float *deq = NULL;
    uint8_t *w = rand_matrix(type, rows, cols, r, &deq);
    float *x = malloc(sizeof(float) * (size_t)n * cols), *y = malloc(sizeof(float) * (size_t)n * rows);
    double err = INFINITY;
    *st = HX_OK;
    if (!w || !x || !y) { *st = hx_err(e, HX_ERR_NOMEM, "gpu-test: out of memory"); goto out; }
    for (size_t i = 0; i < (size_t)n * cols; i++) x[i] = hx_rng_normal(r);
    if ((*st = hx_cuda_linear_check(type, rows, cols, w, n, x, y, q8, 0, NULL, &g_dev, e))) goto out;
    double maxref = 0, maxd = 0;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < rows; i++) {
            double s = 0;
            for (int j = 0; j < cols; j++) s += (double)deq[(size_t)i * cols + j] * x[(size_t)t * cols + j];
            err_add(y[(size_t)t * rows + i], s, &maxd, &maxref);
        }
    err = err_rel(maxd, maxref);
out:
    free(w); free(deq); free(x); free(y);
    return err;
}

/* ---- the fused decode attention (hx_k_attn_decode) against float64 ---- */

/* One case: shape, position, cache and rope / score options. */
typedef struct attn_case {
    int hd, nh, nkvh;      /* head size; query heads / KV heads (GQA ratio nh / nkvh) */
    int pos, window, rows; /* position; sliding window (0 = all); cache rows (fewer than pos + 1: a ring) */
    int max_ctx;           /* the launch's context: splits of 32 positions by default */
    bool neox, qk_norm, tab;
    float rope_scale, softcap; /* softcap > 0: scale 1 instead of 1/sqrt(hd), so that the cap bites */
} attn_case;

/* Head sizes 8, 32 and 96 run the block-wide kernel; 64, 128 and 256 the warp
 * per position unless HX_CUDA_ATT_BLOCK is set (run gpu-test again with it to
 * check the block-wide kernel on those). At 32 positions per block, positions 0, 5 and 31 are one chunk, 32
 * and 33 two (the second holding only the current position, or one more), 100
 * and 300 merge 4 and 10 splits (max_ctx 301: every block of the grid busy);
 * window 64 over 80 rows is a ring: chunks start off the 32-grid, and the rows
 * wrap at positions 81, 100 and 300 (not yet at 70). */
static const attn_case ATTN_CASES[] = {
    /* hd nh nkvh  pos win rows max_ctx  neox  qk_norm table  rs  softcap */
    {8, 4, 4, 0, 0, 512, 512, false, false, false, 1, 0},
    {8, 4, 2, 33, 0, 512, 512, true, true, true, 1, 0},
    {8, 8, 2, 300, 64, 80, 512, false, true, false, 1, 0},
    {32, 8, 2, 5, 0, 512, 512, true, false, false, 1, 0},
    {32, 8, 8, 31, 0, 512, 512, false, true, true, 1, 0},
    {32, 4, 2, 100, 0, 512, 512, true, true, false, 1, 4},
    {96, 6, 3, 32, 0, 512, 512, true, true, false, 1, 0},
    {96, 6, 6, 100, 0, 512, 512, false, false, true, 4, 0},
    {96, 8, 2, 300, 64, 80, 512, true, false, true, 1, 0},
    {64, 8, 2, 0, 0, 512, 512, true, true, true, 1, 0},
    {64, 8, 4, 32, 0, 512, 512, false, false, false, 1, 0},
    {64, 4, 4, 5, 0, 512, 512, false, true, false, 1, 4},
    {64, 8, 8, 300, 0, 512, 512, true, false, true, 1, 0},
    {64, 8, 2, 70, 64, 80, 512, false, true, true, 1, 0},
    {64, 8, 2, 300, 64, 80, 512, true, true, false, 1, 0},
    {128, 8, 2, 0, 0, 512, 512, false, true, false, 1, 0},
    {128, 8, 2, 31, 0, 512, 512, true, true, true, 1, 0},
    {128, 8, 8, 33, 0, 512, 512, true, false, false, 4, 0},
    {128, 8, 4, 100, 0, 512, 512, false, true, true, 1, 4},
    {128, 8, 2, 300, 0, 301, 301, true, true, true, 1, 0},
    {128, 4, 4, 81, 64, 80, 512, true, false, false, 1, 0},
    {128, 4, 4, 100, 64, 80, 512, false, false, false, 1, 0},
    {128, 8, 2, 300, 64, 80, 512, true, true, true, 1, 0},
    {256, 4, 2, 5, 0, 512, 512, true, true, true, 1, 0},
    {256, 4, 4, 32, 0, 512, 512, false, false, false, 1, 0},
    {256, 8, 2, 300, 0, 512, 512, true, true, false, 1, 4},
    {256, 4, 1, 300, 64, 80, 512, false, true, true, 1, 0},
};
#define N_ATTN_CASES ((int)(sizeof ATTN_CASES / sizeof ATTN_CASES[0]))

/* x (hd) RMS-normed with weights w (when not NULL), then rotated for position
 * p: the decode kernel's math in float64. */
static void ref_norm_rope(const float *x, const float *w, double eps, int hd, int p, double base, double rope_scale,
                          bool neox, double *y) {
    double ss = 0;
    for (int d = 0; d < hd; d++) ss += (double)x[d] * x[d];
    double nsc = w ? 1.0 / sqrt(ss / hd + eps) : 1.0;
    for (int d = 0; d < hd; d++) y[d] = w ? x[d] * nsc * w[d] : x[d];
    for (int j = 0; j < hd / 2; j++) {
        int a = neox ? j : 2 * j, b = neox ? j + hd / 2 : 2 * j + 1;
        double theta = ((double)p / rope_scale) * pow(base, -2.0 * j / hd), x0 = y[a], x1 = y[b];
        y[a] = x0 * cos(theta) - x1 * sin(theta);
        y[b] = x0 * sin(theta) + x1 * cos(theta);
    }
}

/* f16 bits on one line of integers (-0 = +0): neighbours differ by 1 */
static int f16_order(uint16_t h) { return h & 0x8000 ? -(int)(h & 0x7fff) : (int)h; }

/* The first position a query at p sees (window > 0: a sliding window). */
static int ref_first(int p, int window) { return window > 0 && p - window + 1 > 0 ? p - window + 1 : 0; }

/* The float64 attention of one query head q (hd) at position p over the f16
 * caches kc, vc (position t in row t % rows; rows of nkv halves, this head's KV
 * head at offset kvo): scores q.k * scale (then softcap * tanh(s / softcap)
 * when softcap > 0) over positions ref_first(p, window)..p, softmax, the
 * weighted sum of the V rows into out (hd). w: scratch, a double per position seen. */
static void ref_attend(const double *q, const uint16_t *kc, const uint16_t *vc, size_t nkv, size_t kvo, int rows,
                       int p, int window, int hd, double scale, double softcap, double *w, double *out) {
    const int first = ref_first(p, window);
    double mx = -INFINITY, sum = 0;
    for (int t = first; t <= p; t++) {
        const uint16_t *kt = kc + (size_t)(t % rows) * nkv + kvo;
        double s = 0;
        for (int d = 0; d < hd; d++) s += q[d] * hx_fp16_to_fp32(kt[d]);
        s *= scale;
        if (softcap > 0) s = softcap * tanh(s / softcap);
        w[t - first] = s;
        if (s > mx) mx = s;
    }
    for (int t = first; t <= p; t++) { w[t - first] = exp(w[t - first] - mx); sum += w[t - first]; }
    for (int d = 0; d < hd; d++) {
        double o = 0;
        for (int t = first; t <= p; t++) o += w[t - first] * hx_fp16_to_fp32(vc[(size_t)(t % rows) * nkv + kvo + d]);
        out[d] = o / sum;
    }
}

/* One case: random q, k, v in [-1, 1], cache rows of the visible positions
 * random f16 (every other row f16 NaN: read, it would poison the output), norm
 * weights in [0.5, 1.5]. Checks out against float64 (max |gpu - ref| / max
 * |ref| < 2e-3), the cache (row pos % rows = f16 of the reference rotated k
 * and of v within 1 ulp, every other row untouched) and the 8-bit output
 * (xd = amax / 127 of the GPU's own out, xq = round(out / xd) within 1).
 * Prints one line (and with json a record on stderr); returns 1 on failure. */
static int check_attn_case(const attn_case *ac, hx_rng *r, bool json) {
    const int hd = ac->hd, nh = ac->nh, nkvh = ac->nkvh, p = ac->pos, rows = ac->rows, group = nh / nkvh;
    const size_t nq = (size_t)nh * hd, nkv = (size_t)nkvh * hd, ncache = (size_t)rows * nkv;
    const int first = ref_first(p, ac->window), len = p - first + 1;
    const bool q8 = hd % 32 == 0;
    const bool warp = (hd == 64 || hd == 128 || hd == 256) && !g_dev.att_block; /* as hx_k_attn_decode picks */
    float *q = malloc(sizeof(float) * nq), *k = malloc(sizeof(float) * nkv), *v = malloc(sizeof(float) * nkv);
    float *qn = malloc(sizeof(float) * hd), *kn = malloc(sizeof(float) * hd), *out = malloc(sizeof(float) * nq);
    float *xd = malloc(sizeof(float) * (nq / 32 + 1));
    int8_t *xq = malloc(nq);
    uint16_t *kc = malloc(2 * ncache), *vc = malloc(2 * ncache), *kc0 = malloc(2 * ncache), *vc0 = malloc(2 * ncache);
    double *qr = malloc(sizeof(double) * hd), *kr = malloc(sizeof(double) * nkv), *ref = malloc(sizeof(double) * nq);
    double *w = malloc(sizeof(double) * len);
    int fail = 1;
    if (!q || !k || !v || !qn || !kn || !out || !xd || !xq || !kc || !vc || !kc0 || !vc0 || !qr || !kr || !ref || !w) {
        fprintf(stderr, "gpu-test: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < nq; i++) q[i] = 2.0f * hx_rng_uniform(r) - 1.0f;
    for (size_t i = 0; i < nkv; i++) { k[i] = 2.0f * hx_rng_uniform(r) - 1.0f; v[i] = 2.0f * hx_rng_uniform(r) - 1.0f; }
    for (int d = 0; d < hd; d++) { qn[d] = 0.5f + hx_rng_uniform(r); kn[d] = 0.5f + hx_rng_uniform(r); }
    for (size_t i = 0; i < ncache; i++) kc0[i] = vc0[i] = 0x7e00; /* f16 NaN */
    for (int t = first; t < p; t++)
        for (size_t i = 0; i < nkv; i++) {
            kc0[(size_t)(t % rows) * nkv + i] = hx_fp32_to_fp16(2.0f * hx_rng_uniform(r) - 1.0f);
            vc0[(size_t)(t % rows) * nkv + i] = hx_fp32_to_fp16(2.0f * hx_rng_uniform(r) - 1.0f);
        }
    memcpy(kc, kc0, 2 * ncache);
    memcpy(vc, vc0, 2 * ncache);
    const double base = ac->neox ? 1e6 : 1e4, eps = 1e-6;
    const float scale = ac->softcap > 0 ? 1.0f : 1.0f / sqrtf((float)hd);
    hx_cuda_attn_case c = {.n_head = nh, .n_head_kv = nkvh, .head_dim = hd, .pos = p, .rows = rows,
                           .max_ctx = ac->max_ctx, .window = ac->window, .scale = scale, .softcap = ac->softcap,
                           .rope_base = (float)base, .rope_scale = ac->rope_scale, .neox = ac->neox,
                           .rope_tab = ac->tab, .q_norm = ac->qk_norm ? qn : NULL, .k_norm = ac->qk_norm ? kn : NULL,
                           .eps = (float)eps, .dev = &g_dev};
    hx_error e = {0};
    int splits = 0;
    char rope[24], cap[24] = "-";
    snprintf(rope, sizeof rope, ac->rope_scale != 1 ? "%s/%g" : "%s", ac->neox ? "neox" : "norm", ac->rope_scale);
    if (ac->softcap > 0) snprintf(cap, sizeof cap, "cap %g", ac->softcap);
    printf("attn %-5s hd %3d heads %d/%d pos %3d window %2d rows %3d  rope %-6s %-7s %-5s %-6s ", warp ? "warp" : "block",
           hd, nh, nkvh, p, ac->window, rows, rope, ac->qk_norm ? "qk-norm" : "-", ac->tab ? "table" : "-", cap);
    if (hx_cuda_attn_decode_check(&c, q, k, v, kc, vc, out, q8 ? xq : NULL, q8 ? xd : NULL, &splits, &e)) {
        printf("error FAIL\n");
        fprintf(stderr, "gpu-test: %s\n", e.msg);
        goto out;
    }
    /* reference: the rotated k of every KV head; kc0 / vc0 become the caches the step should leave (row
     * p % rows: f16 of the rotated k and of v); then each query head over them */
    for (int g = 0; g < nkvh; g++)
        ref_norm_rope(k + (size_t)g * hd, c.k_norm, eps, hd, p, base, ac->rope_scale, ac->neox, kr + (size_t)g * hd);
    for (size_t i = 0; i < nkv; i++) {
        kc0[(size_t)(p % rows) * nkv + i] = hx_fp32_to_fp16((float)kr[i]);
        vc0[(size_t)(p % rows) * nkv + i] = hx_fp32_to_fp16(v[i]);
    }
    for (int h = 0; h < nh; h++) {
        ref_norm_rope(q + (size_t)h * hd, c.q_norm, eps, hd, p, base, ac->rope_scale, ac->neox, qr);
        ref_attend(qr, kc0, vc0, nkv, (size_t)(h / group) * hd, rows, p, ac->window, hd, scale, ac->softcap, w,
                   ref + (size_t)h * hd);
    }
    double maxref = 0, maxd = 0;
    for (size_t i = 0; i < nq; i++) err_add(out[i], ref[i], &maxd, &maxref);
    double rel = err_rel(maxd, maxref);
    /* the cache: kc0 / vc0 as set above, row p % rows within 1 ulp (the rotated k), every other row exactly */
    int cache_bad = 0, xq_bad = 0;
    for (int row = 0; row < rows; row++)
        for (size_t i = 0; i < nkv; i++) {
            size_t at = (size_t)row * nkv + i;
            uint16_t kw = kc0[at], vw = vc0[at];
            bool kbad = kc[at] != kw, vbad = vc[at] != vw; /* other rows: untouched, NaN included */
            if (row == p % rows) { /* the current row: within 1 ulp, never NaN */
                kbad = abs(f16_order(kc[at]) - f16_order(kw)) > 1 || (kc[at] & 0x7fff) > 0x7c00;
                vbad = abs(f16_order(vc[at]) - f16_order(vw)) > 1 || (vc[at] & 0x7fff) > 0x7c00;
            }
            if ((kbad || vbad) && cache_bad++ == 0) /* the first wrong element, to tell a race from rounding */
                fprintf(stderr, "gpu-test: attn cache row %d (pos %d) element %zu: k 0x%04x want 0x%04x, v 0x%04x want "
                        "0x%04x\n", row, p, i, kc[at], kw, vc[at], vw);
        }
    /* the 8-bit output: blocks of 32 of the GPU's out, d = amax / 127, q = round(out / d) */
    for (size_t b = 0; q8 && b < nq / 32; b++) {
        float amax = 0;
        for (int l = 0; l < 32; l++) amax = fmaxf(amax, fabsf(out[b * 32 + l]));
        float d = amax / 127.0f;
        bool dbad = !(fabsf(xd[b] - d) <= 1e-6f * d);
        for (int l = 0; l < 32; l++) {
            int want = d > 0 ? (int)lrintf(out[b * 32 + l] / d) : 0, got = xq[b * 32 + l];
            xq_bad += dbad || got == -128 || abs(got - want) > 1;
        }
    }
    bool ok = rel < 2e-3 && cache_bad == 0 && xq_bad == 0;
    printf("splits %2d  err %8.2e  cache %-4s  q8 %-4s  %s\n", splits, rel, cache_bad ? "FAIL" : "ok",
           !q8 ? "-" : xq_bad ? "FAIL" : "ok", ok ? "ok" : "FAIL");
    if (json)
        fprintf(stderr, "{\"test\":\"attn_decode\",\"kernel\":\"%s\",\"head_dim\":%d,\"n_head\":%d,\"n_head_kv\":%d,"
                "\"pos\":%d,\"window\":%d,\"rows\":%d,\"max_ctx\":%d,\"splits\":%d,\"neox\":%s,\"rope_scale\":%g,"
                "\"qk_norm\":%s,\"rope_tab\":%s,\"softcap\":%g,\"rel_err\":%.3g,\"cache_bad\":%d,\"xq_bad\":%d,\"ok\":%s}\n",
                warp ? "warp" : "block", hd, nh, nkvh, p, ac->window, rows, ac->max_ctx, splits,
                ac->neox ? "true" : "false", ac->rope_scale, ac->qk_norm ? "true" : "false", ac->tab ? "true" : "false",
                ac->softcap, rel, cache_bad, xq_bad, ok ? "true" : "false");
    fail = !ok;
out:
    free(q); free(k); free(v); free(qn); free(kn); free(out); free(xd); free(xq);
    free(kc); free(vc); free(kc0); free(vc0); free(qr); free(kr); free(ref); free(w);
    return fail;
}

/* Every case of ATTN_CASES; returns the number that failed. */
static int check_attn_decode(hx_rng *r, bool json) {
    printf("\ndecode attention (q/k norm + RoPE + KV store + attention, one launch) vs float64: err < 2e-3, the stored "
           "K/V row within 1 f16 ulp and no other row touched, 8-bit output within 1%s\n",
           g_dev.att_block ? " (HX_CUDA_ATT_BLOCK: the block-wide kernel for every head size)" : "");
    int fails = 0;
    for (int i = 0; i < N_ATTN_CASES; i++) fails += check_attn_case(&ATTN_CASES[i], r, json);
    return fails;
}

/* ---- the prefill attention (hx_k_attention, n > 1) against float64 ---- */

/* One case: shape, the batch's positions, cache and score options. */
typedef struct prefill_case {
    int hd, nh, nkvh;  /* head size; query heads / KV heads (GQA ratio nh / nkvh) */
    int n, pos0;       /* queries at positions pos0 .. pos0 + n - 1 */
    int window, rows;  /* sliding window (0 = all); cache rows (0: pos0 + n + 16, no ring) */
    float softcap;     /* > 0: scale 1 instead of 1/sqrt(hd), so that the cap changes the largest scores */
} prefill_case;

/* The tensor-core kernel (head sizes 64 and 128) takes tiles of 64 queries,
 * 16 per warp, and 64 keys: n 2 and 17 fill part of one tile (at 17 the second
 * warp has one live row, the last two none), 64 one tile, 100 and 300 two and
 * five (the last one partial); at pos0 37 the key tiles start off the query
 * tiles. The rings hold window + n - 1 rows (the fewest that keep every
 * position the batch sees; 198..336 wrap at 278) or window + n as the forward
 * sizes them (98..436, wrapping at 340); window 16 without a ring leaves the
 * positions below the first query's window poisoned. Head size 96 runs the
 * per-query kernel. */
static const prefill_case PREFILL_CASES[] = {
    /* hd nh nkvh   n  pos0 win rows softcap */
    {64, 8, 8, 2, 0, 0, 0, 0},
    {64, 8, 4, 17, 37, 0, 0, 0},
    {64, 8, 2, 64, 0, 0, 0, 0},
    {64, 8, 8, 100, 37, 0, 0, 0},
    {64, 8, 4, 300, 0, 0, 0, 0},
    {64, 8, 2, 300, 37, 0, 0, 50},
    {64, 8, 2, 100, 237, 40, 139, 0},
    {64, 8, 4, 100, 37, 16, 0, 0},
    {128, 8, 8, 2, 37, 0, 0, 0},
    {128, 8, 4, 17, 0, 0, 0, 0},
    {128, 8, 2, 64, 37, 0, 0, 0},
    {128, 8, 4, 100, 0, 0, 0, 0},
    {128, 8, 8, 300, 37, 0, 0, 0},
    {128, 8, 4, 100, 37, 0, 0, 50},
    {128, 8, 2, 300, 137, 40, 340, 0},
    {128, 4, 2, 64, 37, 16, 0, 0},
    {96, 6, 3, 17, 37, 0, 0, 0},
};
#define N_PREFILL_CASES ((int)(sizeof PREFILL_CASES / sizeof PREFILL_CASES[0]))

/* The kernel hx_k_attention picks for n > 1 with g_dev. */
static const char *prefill_kernel(int hd) {
    if (g_dev.naive_attn || (hd != 64 && hd != 128)) return "query";
    return g_dev.att_fp32 ? "fp32" : "tc";
}

/* One case: q random in [-1, 1] (f32), the cache rows of every position the
 * batch sees random f16 in [-1, 1], every other row f16 NaN (read, it would
 * poison the output); the reference uses the same f32 q and f16 K/V in
 * float64. Prints one line (and with json a record on stderr); returns 1 on
 * failure (max |gpu - ref| / max |ref| >= 5e-3: q and P go through f16 on the
 * tensor cores). */
static int check_prefill_case(const prefill_case *pc, hx_rng *r, bool json) {
    const int hd = pc->hd, nh = pc->nh, nkvh = pc->nkvh, n = pc->n, p0 = pc->pos0, group = nh / nkvh;
    const int rows = pc->rows > 0 ? pc->rows : p0 + n + 16;
    const int first = ref_first(p0, pc->window);
    const size_t nq = (size_t)n * nh * hd, nkv = (size_t)nkvh * hd, ncache = (size_t)rows * nkv;
    const float scale = pc->softcap > 0 ? 1.0f : 1.0f / sqrtf((float)hd);
    const char *kernel = prefill_kernel(hd);
    float *q = malloc(sizeof(float) * nq), *out = malloc(sizeof(float) * nq);
    uint16_t *kc = malloc(2 * ncache), *vc = malloc(2 * ncache);
    double *w = malloc(sizeof(double) * (size_t)(p0 + n)), *ref = malloc(sizeof(double) * nq);
    double *qd = malloc(sizeof(double) * hd);
    int fail = 1;
    if (!q || !out || !kc || !vc || !w || !ref || !qd) {
        fprintf(stderr, "gpu-test: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < nq; i++) q[i] = 2.0f * hx_rng_uniform(r) - 1.0f;
    for (size_t i = 0; i < ncache; i++) kc[i] = vc[i] = 0x7e00; /* f16 NaN */
    for (int t = first; t < p0 + n; t++) /* in order: a ring row keeps the last position written to it */
        for (size_t i = 0; i < nkv; i++) {
            kc[(size_t)(t % rows) * nkv + i] = hx_fp32_to_fp16(2.0f * hx_rng_uniform(r) - 1.0f);
            vc[(size_t)(t % rows) * nkv + i] = hx_fp32_to_fp16(2.0f * hx_rng_uniform(r) - 1.0f);
        }
    hx_cuda_attn_case c = {.n_head = nh, .n_head_kv = nkvh, .head_dim = hd, .pos = p0, .rows = rows,
                           .max_ctx = p0 + n, .window = pc->window, .scale = scale, .softcap = pc->softcap,
                           .dev = &g_dev};
    hx_error e = {0};
    char cap[24] = "-";
    if (pc->softcap > 0) snprintf(cap, sizeof cap, "cap %g", pc->softcap);
    printf("attn prefill %-5s hd %3d heads %d/%d n %3d pos %3d window %2d rows %3d  %-6s ", kernel, hd, nh, nkvh, n, p0,
           pc->window, rows, cap);
    if (hx_cuda_attn_prefill_check(&c, n, q, kc, vc, out, &e)) {
        printf("error FAIL\n");
        fprintf(stderr, "gpu-test: %s\n", e.msg);
        goto out;
    }
    for (int i = 0; i < n; i++)
        for (int h = 0; h < nh; h++) {
            const float *qv = q + ((size_t)i * nh + h) * hd;
            for (int d = 0; d < hd; d++) qd[d] = qv[d];
            ref_attend(qd, kc, vc, nkv, (size_t)(h / group) * hd, rows, p0 + i, pc->window, hd, scale, pc->softcap, w,
                       ref + ((size_t)i * nh + h) * hd);
        }
    double maxref = 0, maxd = 0;
    for (size_t i = 0; i < nq; i++) err_add(out[i], ref[i], &maxd, &maxref);
    double rel = err_rel(maxd, maxref);
    bool ok = rel < 5e-3;
    printf("err %8.2e  %s\n", rel, ok ? "ok" : "FAIL");
    if (json)
        fprintf(stderr, "{\"test\":\"attn_prefill\",\"kernel\":\"%s\",\"head_dim\":%d,\"n_head\":%d,\"n_head_kv\":%d,"
                "\"n\":%d,\"pos\":%d,\"window\":%d,\"rows\":%d,\"softcap\":%g,\"rel_err\":%.3g,\"ok\":%s}\n",
                kernel, hd, nh, nkvh, n, p0, pc->window, rows, pc->softcap, rel, ok ? "true" : "false");
    fail = !ok;
out:
    free(q); free(out); free(kc); free(vc); free(w); free(ref); free(qd);
    return fail;
}

/* Every case of PREFILL_CASES; returns the number that failed. */
static int check_attn_prefill(hx_rng *r, bool json) {
    printf("\nprefill attention (hx_k_attention: n queries over a filled f16 cache) vs float64: err < 5e-3%s\n",
           g_dev.naive_attn ? " (HX_CUDA_NAIVE_ATTN: the per-query kernel for every head size)"
           : prefill_kernel(64)[0] == 'f' ? " (HX_CUDA_ATT_TC=0: the FP32 tiled kernel at head sizes 64 and 128)" : "");
    int fails = 0;
    for (int i = 0; i < N_PREFILL_CASES; i++) fails += check_prefill_case(&PREFILL_CASES[i], r, json);
    return fails;
}

/* The GPU sampling chain against the CPU sampler on the same logits and the
 * same draws: 5 settings x 100 steps over a 151,936-token vocabulary (fresh
 * logits every 10 steps, the chosen tokens fed back into both penalty
 * windows). Returns the number of settings where a token differed. */
static int check_sampler(hx_rng *r) {
    const int V = 151936, STEPS = 100;
    struct { const char *name; hx_sampler_params p; bool ties; } set[] = {
        {"temp 0.8 top-k 40 top-p 0.95 min-p 0.05 repeat 1.1/64", {0.8f, 40, 0.95f, 0.05f, 1.1f, 0, 0, 64, 11, NULL, 0}, false},
        {"temp 1.5 top-k 256 freq 0.5 presence 0.3 /32", {1.5f, 256, 1.0f, 0.0f, 1.0f, 0.5f, 0.3f, 32, 12, NULL, 0}, false},
        {"temp 0.7 top-k 1", {0.7f, 1, 1.0f, 0.0f, 1.0f, 0, 0, 64, 13, NULL, 0}, false},
        {"greedy, repeat 1.3/64", {0.0f, 40, 1.0f, 0.0f, 1.3f, 0, 0, 64, 14, NULL, 0}, false},
        {"temp 1.0 top-k 50, logits in steps of 0.25 (ties)", {1.0f, 50, 0.9f, 0.0f, 1.0f, 0, 0, 64, 15, NULL, 0}, true},
    };
    float *l = malloc(sizeof(float) * V);
    int fails = 0;
    for (size_t k = 0; l && k < sizeof set / sizeof *set; k++) {
        hx_sampler *a = hx_sampler_new(&set[k].p, V), *b = hx_sampler_new(&set[k].p, V);
        if (!a || !b) { hx_sampler_free(a); hx_sampler_free(b); fails++; continue; }
        hx_sampler_reset(a);
        hx_sampler_reset(b);
        const hx_sampler_params *pp = &set[k].p;
        hx_cuda_sample_params gp = {pp->temp, pp->top_k, pp->top_p, pp->min_p, pp->repeat_penalty, pp->freq_penalty,
                                    pp->presence_penalty};
        int same = 0, declined = 0, bad = 0;
        hx_error e = {0};
        for (int s = 0; s < STEPS; s++) {
            if (s % 10 == 0)
                for (int i = 0; i < V; i++) {
                    float v = 3.0f * hx_rng_normal(r);
                    l[i] = set[k].ties ? roundf(v * 4.0f) / 4.0f : v;
                }
            int32_t tc = hx_sampler_sample(a, l), tg = -1;
            const int32_t *hist;
            int nh = hx_sampler_history(b, &hist);
            float u = pp->temp > 0 ? hx_sampler_draw(b) : 0.0f;
            bool on_gpu = false;
            if (hx_cuda_sample_check(V, l, &gp, hist, nh, u, &tg, &on_gpu, &e)) { fprintf(stderr, "gpu-test: %s\n", e.msg); bad++; break; }
            if (!on_gpu) declined++;
            else if (tg == tc) same++;
            else bad++;
            hx_sampler_accept(a, tc);
            hx_sampler_accept(b, tc);
        }
        printf("sampling %-52s GPU = CPU %d/%d (declined to the CPU %d) %s\n", set[k].name, same, STEPS - declined,
               declined, bad ? "FAIL" : "ok");
        fails += bad > 0;
        hx_sampler_free(a);
        hx_sampler_free(b);
    }
    free(l);
    return fails;
}

/* Matvec GB/s (weight bytes / median time) at a decode shape. */
static hx_status time_matvec(int type, int rows, int cols, bool q8, hx_rng *r, double *gbs, double *us, hx_error *e) {
    size_t rb = hx_row_size(type, cols);
    uint8_t *w = malloc(rb * rows);
    float *x = malloc(sizeof(float) * cols), *y = malloc(sizeof(float) * rows);
    if (!w || !x || !y) { free(w); free(x); free(y); return hx_err(e, HX_ERR_NOMEM, "gpu-test: out of memory"); }
    /* timing does not need meaningful values, but keep them finite: quantize one random row and repeat it */
    float *row = malloc(sizeof(float) * cols);
    if (!row) { free(w); free(x); free(y); return hx_err(e, HX_ERR_NOMEM, "gpu-test: out of memory"); }
    for (int j = 0; j < cols; j++) { row[j] = hx_rng_normal(r); x[j] = hx_rng_normal(r); }
    hx_quantize_row(type, row, w, cols);
    for (int i = 1; i < rows; i++) memcpy(w + rb * i, w, rb);
    double ms = 0;
    hx_status st = hx_cuda_linear_check(type, rows, cols, w, 1, x, y, q8, 200, &ms, &g_dev, e);
    if (!st) { *gbs = (double)rb * rows / (ms * 1e-3) / 1e9; *us = ms * 1e3; }
    free(w); free(x); free(y); free(row);
    return st;
}

/* The many-sequence product of a 4096 x 4096 matrix at n tokens (8-bit
 * activations): weight GB/s (bytes of W once / median time), % of the copy
 * bandwidth bw and microseconds, for n = 1 (the matvec), 8, 32, 64. */
static hx_status print_batch_times(int type, int n_counts, double bw, bool json, hx_rng *r, hx_error *e) {
    static const int NS[] = {1, 8, 32, 64};
    const int rows = 4096, cols = 4096;
    size_t rb = hx_row_size(type, cols);
    uint8_t *w = malloc(rb * rows);
    float *x = malloc(sizeof(float) * cols * 64), *y = malloc(sizeof(float) * (size_t)rows * 64);
    float *row = malloc(sizeof(float) * cols);
    hx_status st = HX_OK;
    if (!w || !x || !y || !row) { st = hx_err(e, HX_ERR_NOMEM, "gpu-test: out of memory"); goto out; }
    for (int j = 0; j < cols; j++) row[j] = hx_rng_normal(r);
    for (int j = 0; j < cols * 64; j++) x[j] = hx_rng_normal(r);
    hx_quantize_row(type, row, w, cols);
    for (int i = 1; i < rows; i++) memcpy(w + rb * i, w, rb);
    for (int k = 0; k < n_counts && k < 4; k++) {
        double ms = 0;
        if ((st = hx_cuda_linear_check(type, rows, cols, w, NS[k], x, y, true, 200, &ms, &g_dev, e))) goto out;
        double gbs = (double)rb * rows / (ms * 1e-3) / 1e9;
        printf(" n=%-2d %5.0f GB/s %6.1f us |", NS[k], gbs, ms * 1e3);
        if (json)
            fprintf(stderr, "{\"test\":\"matmul_q8\",\"type\":\"%s\",\"rows\":%d,\"cols\":%d,\"n\":%d,\"gbs\":%.1f,\"pct_copy\":%.1f,\"us\":%.2f}\n",
                    hx_type_name(type), rows, cols, NS[k], gbs, 100.0 * gbs / bw, ms * 1e3);
    }
out:
    free(w); free(x); free(y); free(row);
    return st;
}

/* One table row's timings: the first n_shapes decode shapes, GB/s, % of the copy
 * bandwidth bw and microseconds; with json also one record per shape on stderr. */
static hx_status print_matvec_times(int type, bool q8, int n_shapes, double bw, bool json, hx_rng *r, hx_error *e) {
    static const int shapes[3][2] = {{4096, 4096}, {1024, 3072}, {151936, 1024}};
    for (int s = 0; s < n_shapes && s < 3; s++) {
        double gbs = 0, us = 0;
        hx_status st = time_matvec(type, shapes[s][0], shapes[s][1], q8, r, &gbs, &us, e);
        if (st) return st;
        printf(" %6.0f GB/s %3.0f%% %7.1f us |", gbs, 100.0 * gbs / bw, us);
        if (json)
            fprintf(stderr, "{\"test\":\"%s\",\"type\":\"%s\",\"rows\":%d,\"cols\":%d,\"gbs\":%.1f,\"pct_copy\":%.1f,\"us\":%.2f}\n",
                    q8 ? "matvec_q8" : "matvec", hx_type_name(type), shapes[s][0], shapes[s][1], gbs, 100.0 * gbs / bw, us);
    }
    return HX_OK;
}

/* 1000 sentences of 10-60 words from a fixed word list (seeded): the shape of
 * the embedding benchmark. Returns malloc'd strings. */
static char **make_sentences(int n, uint64_t seed) {
    static const char *W[] = {"the", "a", "model", "engine", "runs", "fast", "on", "small", "machines", "and",
        "large", "clusters", "while", "users", "write", "notes", "about", "cats", "dogs", "weather", "rain",
        "tomorrow", "market", "prices", "rise", "fall", "because", "of", "new", "data", "from", "sensors", "in",
        "the", "city", "river", "flows", "quietly", "through", "old", "town", "people", "walk", "slowly", "under",
        "bright", "lamps", "music", "plays", "loud", "songs", "every", "night", "kernel", "memory", "bandwidth",
        "limits", "decode", "speed", "but", "prefill", "is", "compute", "bound", "science", "history", "cooking",
        "recipe", "needs", "salt", "sugar", "butter", "flour", "eggs", "bake", "for", "twenty", "minutes", "at",
        "high", "heat", "children", "learn", "math", "with", "games", "teachers", "smile", "students", "ask",
        "questions", "answers", "arrive", "later", "than", "expected", "train", "station", "crowded", "morning"};
    const int nw = (int)(sizeof W / sizeof W[0]);
    hx_rng r;
    hx_rng_seed(&r, seed);
    char **out = calloc((size_t)n, sizeof *out);
    for (int i = 0; out && i < n; i++) {
        int words = 10 + (int)(hx_rng_u64(&r) % 51);
        out[i] = malloc((size_t)words * 12 + 2);
        if (!out[i]) continue;
        size_t len = 0;
        for (int k = 0; k < words; k++)
            len += (size_t)sprintf(out[i] + len, k ? " %s" : "%s", W[hx_rng_u64(&r) % (uint64_t)nw]);
        out[i][len] = 0;
    }
    return out;
}

/* BERT encoder GPU vs CPU (cosine of every sentence's embedding), then GPU sentences/s at batch 1, 32, 256. */
static int check_embed(const char *path, bool json) {
    hx_error e = {0};
    const int n = 1000, n_cpu = 200;
    char **sent = make_sentences(n, 42);
    hx_embedder *cpu = NULL, *gpu = NULL;
    int rc = 1, dim = 0;
    float *vc = NULL, *vg = NULL;
    if (!sent) { fprintf(stderr, "gpu-test: out of memory\n"); return 1; }
    if (hx_embedder_open(path, 0, &cpu, &e) || hx_embedder_open(path, 0, &gpu, &e) ||
        hx_embedder_set_device(gpu, "cuda", &e)) {
        fprintf(stderr, "gpu-test: %s: %s\n", path, e.msg);
        goto out;
    }
    dim = hx_embedder_dim(cpu);
    vc = malloc(sizeof(float) * (size_t)n * dim);
    vg = malloc(sizeof(float) * (size_t)n * dim);
    if (!vc || !vg) goto out;
    hx_embedder_set_batch(cpu, 32);
    hx_embedder_set_batch(gpu, 32);
    if (hx_embed(cpu, (const char *const *)sent, n_cpu, vc, &e) || hx_embed(gpu, (const char *const *)sent, n_cpu, vg, &e)) {
        fprintf(stderr, "gpu-test: %s: %s\n", path, e.msg);
        goto out;
    }
    double worst = 1.0;
    for (int i = 0; i < n_cpu; i++) {
        double d = 0, a = 0, b = 0;
        for (int k = 0; k < dim; k++) {
            d += (double)vc[(size_t)i * dim + k] * vg[(size_t)i * dim + k];
            a += (double)vc[(size_t)i * dim + k] * vc[(size_t)i * dim + k];
            b += (double)vg[(size_t)i * dim + k] * vg[(size_t)i * dim + k];
        }
        double cs = a > 0 && b > 0 ? d / sqrt(a * b) : 0;
        if (!(cs >= worst)) worst = cs; /* NaN counts as worst */
    }
    int batches[3] = {1, 32, 256};
    double sps[3] = {0};
    for (int k = 0; k < 3; k++) {
        hx_embedder_set_batch(gpu, batches[k]);
        if (hx_embed(gpu, (const char *const *)sent, 64, vg, &e)) { fprintf(stderr, "gpu-test: %s\n", e.msg); goto out; } /* warm-up */
        double t0 = hx_now_s();
        if (hx_embed(gpu, (const char *const *)sent, n, vg, &e)) { fprintf(stderr, "gpu-test: %s\n", e.msg); goto out; }
        sps[k] = n / (hx_now_s() - t0);
    }
    bool ok = worst > 0.9999;
    if (json)
        printf("{\"test\":\"embed\",\"model\":\"%s\",\"min_cosine_vs_cpu\":%.9f,\"sent_per_s_b1\":%.1f,"
               "\"sent_per_s_b32\":%.1f,\"sent_per_s_b256\":%.1f,\"ok\":%s}\n",
               path, worst, sps[0], sps[1], sps[2], ok ? "true" : "false");
    else
        printf("embed %s: GPU vs CPU min cosine %.7f over %d sentences; GPU %.0f / %.0f / %.0f sentences/s at batch "
               "1 / 32 / 256 (%d sentences of 10-60 words, tokenization included) — %s\n",
               path, worst, n_cpu, sps[0], sps[1], sps[2], n, ok ? "PASS" : "FAIL");
    rc = ok ? 0 : 1;
out:
    for (int i = 0; i < n; i++) free(sent[i]);
    free(sent); free(vc); free(vg);
    hx_embedder_free(cpu);
    hx_embedder_free(gpu);
    return rc;
}

/* --ref64: the prefill's last logits from the float64 reference forward (every weight dequantized to f32,
 * float64 activations, no 8-bit rounding), into lr. Returns false (with the reason on stderr) when the model's
 * f32 copy would take more than half of the host's memory. Slow: a few seconds per token for an 8B model. */
static bool ref64_logits(const hx_model *m, const int32_t *toks, int n_prompt, float *lr) {
    uint64_t params = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const hx_gguf_tensor *t = &m->gguf->tensors[i];
        params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    uint64_t half = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE) / 2;
    if (params * 4 > half) {
        fprintf(stderr, "gpu-test: --ref64 skipped: %.1f GB of f32 weights is over half of this host's memory (%.1f GB)\n",
                params * 4e-9, half * 2e-9);
        return false;
    }
    ref_model *rm = ref_new(m, n_prompt + 8);
    for (int i = 0; i < n_prompt; i++) ref_step(rm, toks[i], i == n_prompt - 1 ? lr : NULL);
    ref_free(rm);
    return true;
}

/* GPU against CPU on one model: prefill logits, then greedy tokens. With ref64, both prefills also against the
 * float64 reference: where 8-bit activations make the CPU (llama.cpp's CPU recipe) differ from the GPU's f16
 * prefill by more than 1e-2 (models with outlier activations), the logits pass when the GPU is at least as
 * close to float64 as the CPU is. (--json: cpu_vs_f64 / gpu_vs_f64 are -1 where the reference did not run.) */
static int check_model(const char *path, int n_prompt, int n_gen, int ubatch, bool ref64, bool json) {
    hx_error e = {0};
    hx_model *m = NULL;
    if (hx_model_load(path, NULL, &m, &e) != HX_OK) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
    const hx_model_config *cfg = &m->cfg;
    int n_ctx = n_prompt + n_gen + 8;
    hx_cpu_opts co = {.n_ctx = n_ctx, .kv_type = HX_TYPE_F16, .n_ubatch = ubatch};
    hx_cuda_opts go = {.device = -1, .n_ctx = n_ctx, .n_ubatch = ubatch, .dev = &g_dev};
    hx_cpu_ctx *cc = NULL;
    hx_cuda_ctx *gc = NULL;
    float *lc = malloc(sizeof(float) * cfg->n_vocab), *lg = malloc(sizeof(float) * cfg->n_vocab);
    int32_t *toks = malloc(sizeof(int32_t) * n_prompt);
    int32_t *gen_c = malloc(sizeof(int32_t) * (n_gen + 1)), *gen_g = malloc(sizeof(int32_t) * (n_gen + 1));
    int rc = 1;
    if (!lc || !lg || !toks || !gen_c || !gen_g) { fprintf(stderr, "gpu-test: out of memory\n"); goto out; }
    if (hx_cpu_ctx_new(m, &co, &cc, &e) || hx_cuda_ctx_new(m, &go, &gc, &e)) {
        fprintf(stderr, "gpu-test: %s: %s\n", path, e.msg);
        goto out;
    }
    hx_rng r;
    hx_rng_seed(&r, 1234);
    for (int i = 0; i < n_prompt; i++) toks[i] = (int32_t)(1 + hx_rng_u64(&r) % (uint64_t)(cfg->n_vocab - 1));
    if (hx_cpu_forward(cc, toks, n_prompt, 0, lc, false, &e) || hx_cuda_forward(gc, toks, n_prompt, 0, lg, false, &e)) {
        fprintf(stderr, "gpu-test: %s: %s\n", path, e.msg);
        goto out;
    }
    double maxref = 0, maxd = 0;
    for (int i = 0; i < cfg->n_vocab; i++) err_add(lg[i], lc[i], &maxd, &maxref);
    double rel = err_rel(maxd, maxref), rel_c64 = -1, rel_g64 = -1;
    if (ref64) {
        float *lr = malloc(sizeof(float) * cfg->n_vocab);
        if (lr && ref64_logits(m, toks, n_prompt, lr)) {
            double mc = 0, mg = 0, mr = 0;
            for (int i = 0; i < cfg->n_vocab; i++) { err_add(lc[i], lr[i], &mc, &mr); err_add(lg[i], lr[i], &mg, &mr); }
            rel_c64 = err_rel(mc, mr);
            rel_g64 = err_rel(mg, mr);
        }
        free(lr);
    }
    /* greedy: both from the same first token (CPU argmax of the prefill) */
    gen_c[0] = gen_g[0] = hx_argmax(lc, cfg->n_vocab);
    int same = 0;
    double t0 = hx_now_s();
    for (int i = 0; i < n_gen; i++) {
        if (hx_cuda_decode_greedy(gc, gen_g[i], n_prompt + i, &gen_g[i + 1], &e)) {
            fprintf(stderr, "gpu-test: %s: %s\n", path, e.msg);
            goto out;
        }
    }
    double tg = hx_now_s() - t0;
    for (int i = 0; i < n_gen; i++) {
        if (hx_cpu_forward(cc, &gen_c[i], 1, n_prompt + i, lc, false, &e)) {
            fprintf(stderr, "gpu-test: %s: %s\n", path, e.msg);
            goto out;
        }
        gen_c[i + 1] = hx_argmax(lc, cfg->n_vocab);
    }
    while (same < n_gen && gen_c[same + 1] == gen_g[same + 1]) same++;
    bool logits_ok = rel < 1e-2 || (rel_g64 >= 0 && rel_g64 <= rel_c64);
    bool ok = logits_ok && same == n_gen;
    if (json)
        printf("{\"test\":\"model\",\"model\":\"%s\",\"prompt\":%d,\"logits_rel_err\":%.3g,\"greedy_same\":%d,"
               "\"greedy_steps\":%d,\"decode_tok_s\":%.1f,\"cpu_vs_f64\":%.3g,\"gpu_vs_f64\":%.3g,\"ok\":%s}\n",
               path, n_prompt, rel, same, n_gen, n_gen / tg, rel_c64, rel_g64, ok ? "true" : "false");
    else
        printf("model %s: prefill %d tokens, logits rel err %.2e; greedy %d/%d tokens identical to the CPU "
               "(GPU decode %.0f tok/s incl. sync) — %s\n",
               path, n_prompt, rel, same, n_gen, n_gen / tg, ok ? "PASS" : "FAIL");
    if (rel_c64 >= 0)
        printf("  against the float64 reference forward: CPU %.2e, GPU %.2e (%s)\n", rel_c64, rel_g64,
               rel_g64 <= rel_c64 ? "the GPU is as close or closer" : "the GPU is further");
    if (!ok && same < n_gen)
        printf("  first difference at step %d: cpu %d gpu %d\n", same, gen_c[same + 1], gen_g[same + 1]);
    rc = ok ? 0 : 1;
out:
    hx_cpu_ctx_free(cc);
    hx_cuda_ctx_free(gc);
    hx_model_free(m);
    free(lc); free(lg); free(toks); free(gen_c); free(gen_g);
    return rc;
}

/* The persistent decode kernel (backend/cuda/mega.h, a developer option) against one kernel per op on one model: the same
 * prompt, then n_gen one-token steps, both fed the per-op path's argmax. Logits within 2e-2 of their scale at
 * every step (the 8-bit-activation bound), and the same argmax at every step, unless the per-op path's top two
 * are closer than twice that step's largest logit difference (a near-tie: counted and shown, not failed).
 * Not counted where the model or device does not take the persistent kernel. */
static int check_mega(const char *path, int n_prompt, int n_gen, bool json) {
    hx_error e = {0};
    hx_model *m = NULL;
    if (hx_model_load(path, NULL, &m, &e) != HX_OK) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
    const int V = m->cfg.n_vocab, n_ctx = n_prompt + n_gen + 8;
    hx_cuda_dev_opts mega = g_dev, per_op = g_dev;
    mega.mega = true;
    per_op.mega = false;
    hx_cuda_opts oa = {.device = -1, .n_ctx = n_ctx, .dev = &mega}, ob = {.device = -1, .n_ctx = n_ctx, .dev = &per_op};
    hx_cuda_ctx *a = NULL, *b = NULL;
    float *la = malloc(sizeof(float) * V), *lb = malloc(sizeof(float) * V);
    int32_t *toks = malloc(sizeof(int32_t) * n_prompt);
    int rc = 1;
    if (!la || !lb || !toks) { fprintf(stderr, "gpu-test: out of memory\n"); goto out; }
    if (hx_cuda_ctx_new(m, &oa, &a, &e) || hx_cuda_ctx_new(m, &ob, &b, &e)) {
        fprintf(stderr, "gpu-test: %s: %s\n", path, e.msg);
        goto out;
    }
    const char *why = NULL;
    if (!hx_cuda_persistent(a, &why)) {
        printf("model %s: no persistent decode kernel (%s): not checked\n", path, why);
        rc = 0;
        goto out;
    }
    hx_rng r;
    hx_rng_seed(&r, 4321);
    for (int i = 0; i < n_prompt; i++) toks[i] = (int32_t)(1 + hx_rng_u64(&r) % (uint64_t)(V - 1));
    if (hx_cuda_forward(a, toks, n_prompt, 0, la, false, &e) || hx_cuda_forward(b, toks, n_prompt, 0, lb, false, &e)) {
        fprintf(stderr, "gpu-test: %s: %s\n", path, e.msg);
        goto out;
    }
    int32_t tok = hx_argmax(lb, V);
    double worst = 0;
    int same = 0, ties = 0, wrong = 0, first_tie = -1;
    double tie_gap = 0, tie_diff = 0;
    for (int i = 0; i < n_gen; i++) {
        if (hx_cuda_forward(a, &tok, 1, n_prompt + i, la, false, &e) ||
            hx_cuda_forward(b, &tok, 1, n_prompt + i, lb, false, &e)) {
            fprintf(stderr, "gpu-test: %s: %s\n", path, e.msg);
            goto out;
        }
        double maxd = 0, maxref = 0;
        int ia = 0, ib = 0, i2 = -1;
        for (int j = 0; j < V; j++) {
            err_add(la[j], lb[j], &maxd, &maxref);
            if (la[j] > la[ia]) ia = j;
            if (lb[j] > lb[ib]) { i2 = ib; ib = j; }
            else if (j != ib && (i2 < 0 || lb[j] > lb[i2])) i2 = j;
        }
        double rel = err_rel(maxd, maxref);
        if (rel > worst) worst = rel;
        if (ia == ib) same++;
        else if (i2 >= 0 && lb[ib] - lb[i2] <= 2 * maxd) {
            if (first_tie < 0) { first_tie = i; tie_gap = lb[ib] - lb[i2]; tie_diff = maxd; }
            ties++;
        } else wrong++;
        tok = ib;
    }
    bool ok = worst < 2e-2 && wrong == 0;
    if (json)
        printf("{\"test\":\"persistent\",\"model\":\"%s\",\"steps\":%d,\"argmax_same\":%d,\"near_ties\":%d,"
               "\"logits_rel_err\":%.3g,\"ok\":%s}\n", path, n_gen, same, ties, worst, ok ? "true" : "false");
    else
        printf("model %s: persistent decode kernel against one kernel per op: argmax %d/%d steps the same, %d "
               "near-ties, %d different; logits rel err up to %.2e — %s\n", path, same, n_gen, ties, wrong, worst,
               ok ? "PASS" : "FAIL");
    if (first_tie >= 0)
        printf("  first near-tie at step %d: per-op top two %.4g apart, logits differ by up to %.4g\n", first_tie,
               tie_gap, tie_diff);
    rc = ok ? 0 : 1;
out:
    hx_cuda_ctx_free(a);
    hx_cuda_ctx_free(b);
    hx_model_free(m);
    free(la); free(lb); free(toks);
    return rc;
}
#endif

int cmd_gpu_test(int argc, char **argv) {
    bool quick = false, json = false, probe = false, ref64 = false;
    cli_strs models = {0}, emodels = {0};
    int n_prompt = 32, n_gen = 64, ubatch = 0;
    const cli_opt opts[] = {
        {CLI_BOOL, "--probe", &probe, NULL, "only say whether a GPU is usable (exit 0; 77: not, with the reason)", 0,
         0, NULL},
        {CLI_BOOL, "--quick", &quick, NULL, "fewer repetitions", 0, 0, NULL},
        {CLI_BOOL, "--json", &json, NULL, "model results as JSON lines", 0, 0, NULL},
        {CLI_STRS, "-m", &models, "MODEL.gguf", "also check this decoder against the CPU (repeatable)", 0, 0, NULL},
        {CLI_STRS, "-e", &emodels, "BERT_MODEL", "also check this encoder against the CPU (repeatable)", 0, 0, NULL},
        {CLI_INT, "-p", &n_prompt, "N", "-m: prompt tokens", 1, 1 << 20, NULL},
        {CLI_INT, "-n", &n_gen, "N", "-m: decode steps", 1, 1 << 20, NULL},
        {CLI_INT, "--ubatch", &ubatch, "N", "tokens per batch, 0 = the default (sliding-window layers keep "
         "window + N rows)", 0, 1 << 20, NULL},
        {CLI_BOOL, "--ref64", &ref64, NULL, "-m: also both prefills against the float64 reference forward", 0, 0,
         NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int pr = cli_parse("gpu-test", "gpu-test [options]",
                       "GPU bandwidth, GEMM, every linear and attention kernel against the CPU, the sampler, and\n"
                       "whole models (-m, -e) against the CPU path. Needs a CUDA build.\n",
                       opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
#ifdef HX_HAVE_CUDA
    const char *const *model_v = models.v, *const *emodel_v = emodels.v;
    int n_models = models.n, n_emodels = emodels.n;
    hx_error e = {0};
    if (hx_cuda_dev_opts_from_env(&g_dev, &e) != HX_OK) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 2; }
    hx_cuda_device dev;
    if (hx_cuda_init(-1, &dev, &e) != HX_OK) {
        fprintf(stderr, "gpu-test: %s\n", e.msg);
        return probe ? 77 : 1;
    }
    printf("device %d: %s (sm_%d%d, %d SMs, %.1f GiB)\n", dev.index, dev.name, dev.cc_major, dev.cc_minor, dev.n_sm,
           (double)dev.total_mem / (1024.0 * 1024.0 * 1024.0));
    if (probe) return 0;
    double bw = 0, tf = 0;
    if (hx_cuda_copy_bandwidth((size_t)1 << 30, quick ? 5 : 20, &bw, &e)) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
    printf("device-to-device copy: %.0f GB/s (bytes read + written, median)\n", bw);
    if (hx_cuda_gemm_tflops(8192, 8192, 8192, quick ? 3 : 10, &tf, &e)) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
    printf("cuBLAS f16 GEMM 8192^3 (f32 accumulate): %.0f TFLOP/s\n", tf);
    int fails = 0;
    hx_rng r;
    hx_rng_seed(&r, (uint64_t)(hx_now_s() * 1e6)); /* fresh inputs every run */
    printf("\n%-6s %12s %12s %12s   %s\n", "type", "err n=1", "err n=5", "err n=64", "decode matvec 4096x4096 / 1024x3072 / 151936x1024");
    for (int ti = 0; ti < NTYPES; ti++) {
        int t = TYPES[ti];
        int qk = hx_type_get(t)->block_size < 32 ? 32 : hx_type_get(t)->block_size;
        int cols = qk * (qk == 256 ? 5 : 37), rows = 301; /* odd shapes */
        hx_status st;
        double e1 = check_linear(t, rows, cols, 1, false, &r, &e, &st);
        if (st) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
        double e5 = check_linear(t, rows, cols, 5, false, &r, &e, &st);
        if (st) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
        double e64 = check_linear(t, 97, cols, 64, false, &r, &e, &st);
        if (st) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
        bool ok = e1 < 1e-4 && e5 < 1e-4 && e64 < 1e-2;
        fails += !ok;
        printf("%-6s %12.2e %12.2e %12.2e  ", hx_type_name(t), e1, e5, e64);
        if (print_matvec_times(t, false, quick ? 1 : 3, bw, json, &r, &e)) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
        printf(" %s\n", ok ? "ok" : "FAIL");
        /* the decode path with 8-bit activations (types that have it): error bound by the activation rounding
           (the worst of 301 rows and of 16,411 short rows, the output-matrix kernel) */
        double eq = check_linear(t, rows, cols, 1, true, &r, &e, &st);
        if (st == HX_ERR_UNSUPPORTED) continue;
        if (st) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
        /* many short rows: the output-matrix kernel (8 or 16 lanes per row; not Q6_K) */
        for (int k = 0; k < 2; k++) {
            double ek = check_linear(t, 16411, qk == 256 ? (k ? 1536 : 1024) : (k ? 864 : 512), 1, true, &r, &e, &st);
            if (st) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
            if (ek > eq) eq = ek;
        }
        bool okq = eq < 2e-2;
        fails += !okq;
        printf("%-6s %12.2e %12s %12s  ", " +q8", eq, "", "");
        if (print_matvec_times(t, true, quick ? 1 : 3, bw, json, &r, &e)) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
        printf(" %s\n", okq ? "ok" : "FAIL");
        /* many sequences (tokens of a batch, 8-bit activations): odd token counts over every n-tile width,
           301 rows (a partial row tile), and 16,411 rows */
        static const int NB[] = {2, 3, 8, 13, 29, 61, 64, 77};
        double eb = 0;
        for (int k = 0; k < (int)(sizeof NB / sizeof NB[0]); k++) {
            double ek = check_linear(t, k == 2 ? 16411 : rows, cols, NB[k], true, &r, &e, &st);
            if (st) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
            if (ek > eb) eb = ek;
        }
        bool okb = eb < 2e-2;
        fails += !okb;
        printf("%-6s %12.2e %12s %12s  ", " +q8 b", eb, "", "");
        if (print_batch_times(t, quick ? 2 : 4, bw, json, &r, &e)) { fprintf(stderr, "gpu-test: %s\n", e.msg); return 1; }
        printf(" %s\n", okb ? "ok" : "FAIL");
    }
    fails += check_attn_decode(&r, json);
    fails += check_attn_prefill(&r, json);
    fails += check_sampler(&r);
    for (int i = 0; i < n_models; i++) fails += check_model(model_v[i], n_prompt, n_gen, ubatch, ref64, json);
    for (int i = 0; i < n_models; i++) fails += check_mega(model_v[i], n_prompt, n_gen > 128 ? n_gen : 128, json);
    for (int i = 0; i < n_emodels; i++) fails += check_embed(emodel_v[i], json);
    printf("\ngpu-test: %s\n", fails ? "FAILED" : "all checks passed");
    return fails ? 1 : 0;
#else
    (void)quick, (void)json, (void)ref64, (void)models, (void)emodels, (void)n_prompt, (void)n_gen, (void)ubatch;
    fprintf(stderr, "gpu-test: this helix-bg was built without CUDA (configure with -DHX_CUDA=ON and nvcc on PATH)\n");
    return probe ? 77 : 1;
#endif
}
