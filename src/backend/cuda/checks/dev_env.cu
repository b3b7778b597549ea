// dev_env.cu — hx_cuda_dev_opts from the HX_CUDA_* environment variables
// (checks.h), for tools that keep taking them. The library itself never calls
// this. (Host code only; a .cu file so helix_cuda_checks has one language.)
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/checks/checks.h"
extern "C" {
#include "core/core.h"
}

/* Set and not "0" nor empty: the switches that were tested with getenv() != NULL
 * took any value; "0" now also means off. */
static bool env_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* Whole-string integer in [lo, hi]; *out unchanged and false otherwise. */
static bool parse_int(const char *s, long lo, long hi, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static hx_status env_int(const char *name, long lo, long hi, int *out, hx_error *e) {
    const char *v = getenv(name);
    if (!v || !*v) return HX_OK;
    if (!parse_int(v, lo, hi, out))
        return hx_err(e, HX_ERR_ARG, "%s=%s: expected an integer in %ld..%ld", name, v, lo, hi);
    return HX_OK;
}

/* "0" / "1" style switch with a meaning for 0: *off = value is 0. */
static hx_status env_zero_means(const char *name, bool *off, hx_error *e) {
    int v = 1;
    hx_status s = env_int(name, 0, 1, &v, e);
    if (s == HX_OK && getenv(name) && *getenv(name)) *off = v == 0;
    return s;
}

#define MAX_WPR_RULES 64
static hx_cuda_wpr_rule g_rules[MAX_WPR_RULES];

/* HX_CUDA_MVQ_WPR: "N" (1, 2, 4), or "ROWSxCOLS=N,ROWSxCOLS=N,...". */
static hx_status env_wpr(hx_cuda_dev_opts *o, hx_error *e) {
    const char *v = getenv("HX_CUDA_MVQ_WPR");
    if (!v || !*v) return HX_OK;
    if (!strchr(v, '=')) {
        if (!parse_int(v, 0, 4, &o->mvq_wpr) || o->mvq_wpr == 3)
            return hx_err(e, HX_ERR_ARG, "HX_CUDA_MVQ_WPR=%s: expected 1, 2 or 4, or ROWSxCOLS=N,...", v);
        return HX_OK;
    }
    int n = 0;
    for (const char *p = v; *p;) {
        char *end = NULL;
        long r = strtol(p, &end, 10), c = 0, w = 0;
        bool ok = end != p && *end == 'x';
        if (ok) { p = end + 1; c = strtol(p, &end, 10); ok = end != p && *end == '='; }
        if (ok) { p = end + 1; w = strtol(p, &end, 10); ok = end != p && (*end == ',' || !*end); }
        ok = ok && r > 0 && r < (1L << 30) && c > 0 && c < (1L << 30) && (w == 1 || w == 2 || w == 4);
        if (!ok || n == MAX_WPR_RULES)
            return hx_err(e, HX_ERR_ARG, "HX_CUDA_MVQ_WPR=%s: expected ROWSxCOLS=N (N 1, 2 or 4) separated by commas, "
                          "at most %d", v, MAX_WPR_RULES);
        g_rules[n].rows = (int)r;
        g_rules[n].cols = (int)c;
        g_rules[n].wpr = (int)w;
        n++;
        p = *end == ',' ? end + 1 : end;
    }
    o->mvq_wpr_rules = g_rules;
    o->n_mvq_wpr_rules = n;
    return HX_OK;
}

extern "C" hx_status hx_cuda_dev_opts_from_env(hx_cuda_dev_opts *o, hx_error *e) {
    memset(o, 0, sizeof *o);
    o->no_graph = env_on("HX_CUDA_NO_GRAPH");
    o->no_ahead = env_on("HX_CUDA_NO_AHEAD");
    o->tp_nccl = env_on("HX_CUDA_TP_NCCL");
    o->tp_no_fuse = env_on("HX_CUDA_TP_NO_FUSE");
    o->no_pdl = env_on("HX_CUDA_NO_PDL");
    o->profile = env_on("HX_CUDA_PROFILE");
    o->no_fuse_attn = env_on("HX_CUDA_NO_FUSE_ATTN");
    o->mega = env_on("HX_CUDA_MEGA");
    o->mega_times = env_on("HX_CUDA_MEGA_TIMES");
    o->naive_attn = env_on("HX_CUDA_NAIVE_ATTN");
    o->att_block = env_on("HX_CUDA_ATT_BLOCK");
    o->lora_plain = env_on("HX_CUDA_LORA_PLAIN");
    o->lora_preload = env_on("HX_CUDA_LORA_PRELOAD");
    const char *skip = getenv("HX_CUDA_SKIP");
    o->skip = skip && *skip ? skip : NULL;
    hx_status s;
    int mvq = 2;
    if ((s = env_int("HX_CUDA_MVQ", 0, 2, &mvq, e))) return s;
    o->mvq = mvq == 0 ? -1 : mvq == 1 ? 1 : 0;
    if ((s = env_zero_means("HX_CUDA_ATT_TC", &o->att_fp32, e))) return s;
    if ((s = env_zero_means("HX_CUDA_MVQ_MIX", &o->mvq_no_mix, e))) return s;
    if ((s = env_zero_means("HX_CUDA_MVQ_ROWS", &o->mvq_no_rows, e))) return s;
    if ((s = env_int("HX_CUDA_ATT_CHUNK", 32, 4096, &o->att_chunk, e))) return s;
    if ((s = env_int("HX_CUDA_TP_AR_BLOCKS", 1, 64, &o->tp_ar_blocks, e))) return s;
    if ((s = env_int("HX_CUDA_WPR", 1, 4, &o->wpr, e))) return s;
    if ((s = env_int("HX_CUDA_MEGA_THREADS", 256, 512, &o->mega_threads, e))) return s;
    if (o->wpr == 3) return hx_err(e, HX_ERR_ARG, "HX_CUDA_WPR=3: expected 1, 2 or 4");
    if ((s = env_int("HX_CUDA_CUBLAS_MIN_N", 1, 1 << 20, &o->cublas_min_n, e))) return s;
    int mmq = 1, cols = -1;
    if ((s = env_int("HX_CUDA_MMQ", 0, 1, &mmq, e))) return s;
    if ((s = env_int("HX_CUDA_MMQ_MAX", 1, 1 << 20, &o->mmq_max, e))) return s;
    if (!mmq) o->mmq_max = -1;
    if ((s = env_int("HX_CUDA_MMQ_WARPS", 1, 16, &o->mmq_warps, e))) return s;
    if ((s = env_int("HX_CUDA_MVQ_COLS", 0, 64, &cols, e))) return s;
    if (cols >= 0) o->mvq_cols_max = cols ? cols : -1;
    return env_wpr(o, e);
}
