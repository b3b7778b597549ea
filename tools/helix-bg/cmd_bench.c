/* cmd_bench.c — helix-bg bench: prompt-processing (pp) and text-generation (tg)
 * throughput, llama-bench style: -p 512 prefill tokens as one batch, -n 128
 * decode steps one token at a time, each repeated -r times, mean ± stddev. */
#include "cli.h"
#include "backend/cpu/forward.h"
#include "core/core.h"
#include "model/model.h"
#include "quant/quant.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

#include "hx_version.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

static void usage(FILE *f) {
    fprintf(f,
        "usage: helix-bg bench (-m FILE.gguf | --synth PRESET:MIX) [options]\n"
        "  -p N          prompt tokens processed as one batch (default 512; 0 = skip)\n"
        "  -n N          tokens generated one at a time (default 128; 0 = skip)\n"
        "  -r N          repetitions (default 3)\n"
        "  -t N          threads (default: all CPUs)\n"
        "  --kv f16|f32  KV cache type (default f16)\n"
        "  --device cpu|cuda  backend (default cpu); cuda decodes with greedy argmax on the GPU\n"
        "  --json        one JSON object per test on stdout (with stddev, size, threads)\n"
        "  --jsonl       one line per test for bench/results.jsonl: date, commit, device,\n"
        "                engine, model, mix, test, tokens_per_s\n"
        "  --synth P:M   benchmark a random-weight model of preset P in mix M\n"
        "                (written by 'helix-bg synth' to a temporary file)\n");
}

/* Run `helix-bg synth` as a child process so bench needs no synth internals. */
static int make_synth(const char *spec, char *out, size_t outn) {
    char preset[64], mix[32];
    const char *colon = strchr(spec, ':');
    if (!colon || colon - spec >= (long)sizeof preset || strlen(colon + 1) >= sizeof mix) {
        fprintf(stderr, "helix-bg bench: --synth wants PRESET:MIX (e.g. qwen3-0.6b:q4_0), got '%s'\n", spec);
        return -1;
    }
    memcpy(preset, spec, (size_t)(colon - spec));
    preset[colon - spec] = 0;
    strcpy(mix, colon + 1);
    const char *tmp = getenv("TMPDIR");
    snprintf(out, outn, "%s/helix-bench-%s-%s-%ld.gguf", tmp && *tmp ? tmp : "/tmp", preset, mix, (long)getpid());
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return -1; }
    if (pid == 0) {
        char *args[] = {"helix-bg", "synth", "--preset", preset, "--type", mix, "-o", out, NULL};
        execv("/proc/self/exe", args);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "helix-bg bench: synth %s failed\n", spec);
        return -1;
    }
    return 0;
}

static void stats(const double *v, int n, double *mean, double *sd) {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; i++) s += v[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
    *sd = n > 1 ? sqrt(s2 / (n - 1)) : 0;
}

/* The model's dominant weight type, e.g. "Q4_K" (by bytes). */
static const char *main_type(const hx_model *m) {
    uint64_t bytes[HX_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const hx_gguf_tensor *t = &m->gguf->tensors[i];
        if (t->type >= 0 && t->type < HX_TYPE_COUNT) bytes[t->type] += t->n_bytes;
    }
    int best = 0;
    for (int i = 1; i < HX_TYPE_COUNT; i++) if (bytes[i] > bytes[best]) best = i;
    return hx_type_name(best);
}

/* The llama.cpp file-type name of general.file_type ("q4_k_m"), else the
 * dominant weight type in lower case. */
static void mix_name(const hx_model *m, char *out, size_t n) {
    static const char *ft[] = {"f32", "f16", "q4_0", "q4_1", NULL, NULL, NULL, "q8_0", "q5_0", "q5_1", "q2_k",
                               "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s", "q4_k_m", "q5_k_s", "q5_k_m", "q6_k"};
    uint64_t v;
    const char *s = NULL;
    if (hx_gguf_get_u64(m->gguf, "general.file_type", &v)) {
        if (v < sizeof ft / sizeof *ft) s = ft[v];
        else if (v == 32) s = "bf16";
    }
    snprintf(out, n, "%s", s ? s : main_type(m));
    for (char *c = out; *c; c++) if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
}

/* Bytes of weights a decode step reads: every tensor but the token embedding
 * (a row lookup), which counts when it doubles as the output matrix. */
static uint64_t decode_weight_bytes(const hx_model *m) {
    uint64_t b = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const hx_gguf_tensor *t = &m->gguf->tensors[i];
        if (!m->cfg.tied_output && t->name.len == 17 && !memcmp(t->name.ptr, "token_embd.weight", 17)) continue;
        b += t->n_bytes;
    }
    return b;
}

/* The CPU's model name from /proc/cpuinfo ("cpu" when unknown). */
static void cpu_name(char *out, size_t n) {
    snprintf(out, n, "cpu");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        v[strcspn(v, "\n")] = 0;
        snprintf(out, n, "%s", v);
        break;
    }
    fclose(f);
}

int cmd_bench(int argc, char **argv) {
    const char *path = NULL, *synth = NULL;
    int n_prompt = 512, n_gen = 128, reps = 3, threads = 0, kv = HX_TYPE_F16;
    bool json = false, jsonl = false, gpu = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") && more) path = argv[++i];
        else if (!strcmp(a, "--synth") && more) synth = argv[++i];
        else if (!strcmp(a, "-p") && more) n_prompt = atoi(argv[++i]);
        else if (!strcmp(a, "-n") && more) n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "-r") && more) reps = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && more) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--kv") && more) {
            const char *k = argv[++i];
            if (!strcmp(k, "f16")) kv = HX_TYPE_F16;
            else if (!strcmp(k, "f32")) kv = HX_TYPE_F32;
            else { fprintf(stderr, "helix-bg bench: --kv takes f16 or f32, not '%s'\n", k); return 2; }
        }
        else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--jsonl")) jsonl = true;
        else if (!strcmp(a, "--device") && more) {
            const char *d = argv[++i];
            if (!strcmp(d, "cuda")) gpu = true;
            else if (strcmp(d, "cpu")) { fprintf(stderr, "helix-bg bench: --device takes cpu or cuda, not '%s'\n", d); return 2; }
        }
        else { fprintf(stderr, "helix-bg bench: unknown or incomplete option '%s'\n", a); usage(stderr); return 2; }
    }
#ifndef HX_HAVE_CUDA
    if (gpu) { fprintf(stderr, "helix-bg bench: this build has no CUDA backend (configure with nvcc on PATH)\n"); return 2; }
#endif
    if (!path == !synth) { fprintf(stderr, "helix-bg bench: give exactly one of -m FILE or --synth PRESET:MIX\n"); usage(stderr); return 2; }
    if (n_prompt < 0 || n_gen < 0 || reps < 1 || reps > 1000 || threads < 0 || (n_prompt == 0 && n_gen == 0)) {
        fprintf(stderr, "helix-bg bench: need -p >= 0, -n >= 0 (not both 0), 1 <= -r <= 1000, -t >= 0\n");
        return 2;
    }
    char synth_path[512] = "";
    if (synth) {
        if (make_synth(synth, synth_path, sizeof synth_path)) return 1;
        path = synth_path;
    }
    int rc = 1;
    hx_error e = {0};
    hx_model *m = NULL;
    hx_cpu_ctx *ctx = NULL;
    float *logits = NULL;
    int32_t *toks = NULL;
    double *pp = NULL, *tg = NULL;
    void *gp = NULL; /* the CUDA context when --device cuda */
#ifdef HX_HAVE_CUDA
    hx_cuda_ctx *gctx = NULL;
#endif
    hx_gguf_open_opts oo = {.prefault = true};
    if (hx_model_load(path, &oo, &m, &e) != HX_OK) { fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done; }
    int n_ctx = n_prompt + n_gen + 8;
    hx_cpu_opts co = {.n_ctx = n_ctx, .kv_type = kv, .n_threads = threads};
#ifdef HX_HAVE_CUDA
    if (gpu) {
        if (kv != HX_TYPE_F16) { fprintf(stderr, "helix-bg bench: the CUDA KV cache is f16\n"); goto done; }
        hx_cuda_opts go = {.device = -1, .n_ctx = n_ctx};
        if (hx_cuda_ctx_new(m, &go, &gctx, &e) != HX_OK) { fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done; }
        gp = gctx;
    } else
#endif
    if (hx_cpu_ctx_new(m, &co, &ctx, &e) != HX_OK) { fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done; }
    int nv = m->cfg.n_vocab;
    logits = malloc((size_t)nv * sizeof *logits);
    toks = malloc((size_t)(n_prompt > 1 ? n_prompt : 1) * sizeof *toks);
    pp = calloc((size_t)reps, sizeof *pp);
    tg = calloc((size_t)reps, sizeof *tg);
    if (!logits || !toks || !pp || !tg) { fprintf(stderr, "helix-bg bench: out of memory\n"); goto done; }
    hx_rng rng;
    hx_rng_seed(&rng, 1234);
    for (int i = 0; i < (n_prompt > 1 ? n_prompt : 1); i++) toks[i] = (int32_t)(hx_rng_u64(&rng) % (uint64_t)nv);
    /* warm-up: a short prefill (on the GPU the full one: first-call allocations and cuBLAS set-up) */
    if (ctx) hx_cpu_truncate(ctx, 0);
    int n_warm = gp && n_prompt > 0 ? n_prompt : n_prompt > 8 ? 8 : (n_prompt ? n_prompt : 1);
    if (cli_forward(ctx, gp, toks, n_warm, 0, logits, false, &e) != HX_OK) {
        fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done;
    }
#ifdef HX_HAVE_CUDA
    if (gctx && n_gen > 0) { /* capture the decode graph outside the timing */
        int32_t next;
        if (hx_cuda_decode_greedy(gctx, toks[0], 0, &next, &e) != HX_OK) { fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done; }
    }
#endif
    for (int r = 0; r < reps; r++) {
#ifdef HX_HAVE_CUDA
        /* the greedy lookahead step of the last decode is still running: not part of what is timed next */
        if (gctx && hx_cuda_finish(gctx, &e) != HX_OK) { fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done; }
#endif
        if (n_prompt > 0) {
            if (ctx) hx_cpu_truncate(ctx, 0);
            double t0 = hx_now_s();
            if (cli_forward(ctx, gp, toks, n_prompt, 0, logits, false, &e) != HX_OK) { fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done; }
            pp[r] = n_prompt / (hx_now_s() - t0);
        }
        if (n_gen > 0) {
            if (ctx) hx_cpu_truncate(ctx, 0);
            int32_t tok = toks[0];
#ifdef HX_HAVE_CUDA
            if (gctx && hx_cuda_finish(gctx, &e) != HX_OK) { fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done; }
#endif
            double t0 = hx_now_s();
            for (int i = 0; i < n_gen; i++) {
#ifdef HX_HAVE_CUDA
                if (gctx) {
                    /* GPU: one graph launch + greedy argmax on the device + 8-byte copy back per token, the
                     * next step launched before this one's token is back (the clock stops at the n-th token;
                     * the lookahead step then running is waited for before the next timing) */
                    int32_t next;
                    if (hx_cuda_decode_greedy(gctx, tok, i, &next, &e) != HX_OK) { fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done; }
                    tok = next;
                    continue;
                }
#endif
                if (hx_cpu_forward(ctx, &tok, 1, i, logits, false, &e) != HX_OK) { fprintf(stderr, "helix-bg bench: %s\n", e.msg); goto done; }
                tok = (int32_t)(hx_rng_u64(&rng) % (uint64_t)nv);
            }
            tg[r] = n_gen / (hx_now_s() - t0);
        }
    }
    /* model and mix: the synth spec's two halves, else the file name and general.file_type */
    char name[128], mix[32];
    if (synth) {
        const char *colon = strchr(synth, ':');
        snprintf(name, sizeof name, "%.*s", (int)(colon - synth), synth);
        snprintf(mix, sizeof mix, "%s", colon + 1);
    } else {
        /* a file written by synth names its preset; any other file is named by its file name */
        hx_gguf_str gn;
        const char *syn = "helix synthetic ";
        const char *b = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t len = strlen(b);
        if (len > 5 && !strcmp(b + len - 5, ".gguf")) len -= 5;
        if (hx_gguf_get_str(m->gguf, "general.name", &gn) && gn.len > strlen(syn) && !memcmp(gn.ptr, syn, strlen(syn)))
            snprintf(name, sizeof name, "%.*s", (int)(gn.len - strlen(syn)), gn.ptr + strlen(syn));
        else
            snprintf(name, sizeof name, "%.*s", (int)len, b);
        mix_name(m, mix, sizeof mix);
    }
    double size_mib = (double)m->gguf->file_size / (1024.0 * 1024);
    int nt = threads > 0 ? threads : hx_cpu_count();
    char device[300];
    double copy_gbps = 0; /* the GPU's device-to-device copy bandwidth, the ceiling for tg */
#ifdef HX_HAVE_CUDA
    if (gctx) {
        hx_cuda_device dev;
        snprintf(device, sizeof device, "%s", hx_cuda_init(-1, &dev, &e) == HX_OK ? dev.name : "cuda");
        if (n_gen > 0 && !jsonl && hx_cuda_copy_bandwidth((size_t)256 << 20, 10, &copy_gbps, &e) != HX_OK) copy_gbps = 0;
    } else
#endif
    {
        char cpu[256];
        cpu_name(cpu, sizeof cpu);
        snprintf(device, sizeof device, "%s (%d threads)", cpu, nt);
    }
    char date[16] = "unknown";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%d", &tm);
    double wgb = (double)decode_weight_bytes(m) / 1e9;
    if (!json && !jsonl) {
        printf("| %-20s | %-6s | %10s | %6s | %-6s | %20s | %8s | %18s |\n", "model", "mix", "size", "thr", "test", "t/s",
               "ms/tok", copy_gbps > 0 ? "weights GB/s (copy)" : "weights GB/s");
        printf("|%s|%s|%s|%s|%s|%s|%s|%s|\n", "----------------------", "--------", "------------", "--------",
               "--------", "----------------------", "----------", "--------------------");
    }
    for (int k = 0; k < 2; k++) {
        int n = k == 0 ? n_prompt : n_gen;
        if (n == 0) continue;
        double mean, sd;
        stats(k == 0 ? pp : tg, reps, &mean, &sd);
        char test[32];
        snprintf(test, sizeof test, "%s%d", k == 0 ? "pp" : "tg", n);
        if (jsonl)
            printf("{\"date\": \"%s\", \"commit\": \"%s\", \"device\": \"%s\", \"engine\": \"helix\", "
                   "\"model\": \"%s\", \"mix\": \"%s\", \"test\": \"%s\", \"tokens_per_s\": %.2f}\n",
                   date, HX_GIT_COMMIT, device, name, mix, test, mean);
        else if (json)
            printf("{\"engine\": \"helix\", \"device\": \"%s\", \"model\": \"%s\", \"mix\": \"%s\", \"size_bytes\": %llu, "
                   "\"threads\": %d, \"test\": \"%s\", \"reps\": %d, \"tokens_per_s\": %.3f, \"stddev\": %.3f, "
                   "\"ms_per_token\": %.4f, \"commit\": \"%s\"}\n",
                   device, name, mix, (unsigned long long)m->gguf->file_size, gpu ? 0 : nt, test, reps, mean, sd,
                   1e3 / mean, HX_GIT_COMMIT);
        else {
            char bw[32] = "";
            if (k == 1 && copy_gbps > 0) snprintf(bw, sizeof bw, "%.0f (%.0f%%)", wgb * mean, 100 * wgb * mean / copy_gbps);
            else if (k == 1) snprintf(bw, sizeof bw, "%.1f", wgb * mean);
            char thr[8];
            snprintf(thr, sizeof thr, "%d", nt);
            printf("| %-20s | %-6s | %6.1f MiB | %6s | %-6s | %9.2f ± %8.2f | %8.3f | %18s |\n", name, mix, size_mib,
                   gpu ? "cuda" : thr, test, mean, sd, 1e3 / mean, bw);
        }
    }
    if (!json && !jsonl) printf("commit %s, %s, %s\n", HX_GIT_COMMIT, device, date);
    rc = 0;
done:
    free(logits); free(toks); free(pp); free(tg);
    hx_cpu_ctx_free(ctx);
#ifdef HX_HAVE_CUDA
    hx_cuda_ctx_free(gctx);
#endif
    hx_model_free(m);
    if (synth_path[0]) unlink(synth_path);
    return rc;
}
