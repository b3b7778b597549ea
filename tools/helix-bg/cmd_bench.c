/* cmd_bench.c — helix-bg bench: throughput, llama-bench style, a client of
 * helix.h (helix_dev.h for the model's mix, decode bytes and the GPU's name).
 *
 *   pp N: N random prompt tokens in one hx_decode, logits of the last only;
 *   tg N: N greedy decode steps of hx_generate after a one-token prompt (on
 *         the GPU the token is picked there, as in generate);
 *   --batch B1,B2,..: llama-batched-bench's shape: B sequences of 128 random
 *         prompt tokens prefilled in one hx_decode (pp128-bB: all of them per
 *         second), then 128 steps each decoding one token of every sequence
 *         in one hx_decode (tg128-bB: aggregate generated tokens per second).
 * Each test runs -r times after a warm-up; rows give mean ± stddev. */
#include "cli.h"
#include "cli_lora.h"
#include "helix_dev.h"

#include "hx_version.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#define CMD "bench"
#define BATCH_PROMPT 128 /* --batch: prompt and generated tokens per sequence */
#define BATCH_GEN 128

/* Runs `helix-bg synth` as a child process: bench needs none of its internals. */
static int make_synth(const char *spec, char *out, size_t outn) {
    char preset[64], mix[32];
    const char *colon = strchr(spec, ':');
    if (!colon || colon == spec || colon - spec >= (long)sizeof preset || !colon[1] || strlen(colon + 1) >= sizeof mix)
        return cli_usage_error(CMD, "--synth wants PRESET:MIX (e.g. qwen3-0.6b:q4_0), not '%s'", spec), -1;
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
        fprintf(stderr, "helix-bg " CMD ": synth %s failed\n", spec);
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

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* One result row. */
typedef struct row {
    char test[32];
    int batch;        /* 0: a plain pp/tg test */
    double mean, sd;
} row;

/* pp: n tokens of sequence 0 from position 0 in one hx_decode; tokens/s. */
static hx_status run_pp(hx_context *ctx, const int32_t *toks, int n, double *tps, hx_error *e) {
    hx_batch b = hx_batch_init(n);
    if (!b.capacity) return snprintf(e->msg, sizeof e->msg, "out of memory"), e->status = HX_ERR_NOMEM;
    for (int i = 0; i < n; i++) hx_batch_add(&b, toks[i], i, 0, i == n - 1);
    hx_seq_clear(ctx, 0);
    double t0 = cli_now();
    hx_status s = hx_decode(ctx, &b, e);
    *tps = n / (cli_now() - t0);
    hx_batch_free(&b);
    return s;
}

/* tg: n greedy steps through hx_generate after the one-token prompt tok. */
static hx_status run_tg(hx_context *ctx, int32_t tok, int n, double *tps, hx_error *e) {
    hx_seq_clear(ctx, 0);
    hx_generate_params gp = hx_generate_default_params();
    gp.prompt_ids = &tok;
    gp.n_prompt_ids = 1;
    gp.max_tokens = n + 1; /* the first token comes from the prompt's logits; n decode steps follow */
    gp.ignore_eog = true;
    hx_generate_result r = {0};
    hx_status s = hx_generate(ctx, &gp, &r, e);
    *tps = r.metrics.decode_tok_per_s;
    hx_generate_result_free(&r);
    return s;
}

/* --batch: B sequences, BATCH_PROMPT prompt tokens each in one hx_decode, then
 * BATCH_GEN steps of B tokens. pp/tg: aggregate tokens per second. */
static hx_status run_batched(hx_context *ctx, int B, uint64_t *rng, double *pp, double *tg, hx_error *e) {
    const hx_model *m = hx_context_model(ctx);
    int V = hx_model_n_vocab(m);
    hx_batch b = hx_batch_init(B * BATCH_PROMPT);
    int32_t *next = malloc(sizeof(int32_t) * (size_t)B);
    int *idx = malloc(sizeof(int) * (size_t)B);
    hx_status s = HX_OK;
    if (!b.capacity || !next || !idx) {
        snprintf(e->msg, sizeof e->msg, "out of memory");
        s = e->status = HX_ERR_NOMEM;
        goto done;
    }
    for (int q = 0; q < B; q++) {
        hx_seq_clear(ctx, q);
        for (int i = 0; i < BATCH_PROMPT; i++)
            hx_batch_add(&b, (int32_t)(rng_next(rng) % (uint64_t)V), i, q, i == BATCH_PROMPT - 1);
    }
    double t0 = cli_now();
    if ((s = hx_decode(ctx, &b, e))) goto done;
    double t1 = cli_now();
    *pp = (double)B * BATCH_PROMPT / (t1 - t0);
    /* greedy picks with hx_get_argmax: on the GPU they are made on the device
     * and the B rows of logits never cross to the host */
    for (int q = 0; q < B; q++) idx[q] = (q + 1) * BATCH_PROMPT - 1;
    if ((s = hx_get_argmax(ctx, B, idx, next, e))) goto done;
    for (int q = 0; q < B; q++) idx[q] = q;
    for (int step = 0; step < BATCH_GEN; step++) {
        hx_batch_clear(&b);
        for (int q = 0; q < B; q++) hx_batch_add(&b, next[q], BATCH_PROMPT + step, q, true);
        if ((s = hx_decode(ctx, &b, e)) || (s = hx_get_argmax(ctx, B, idx, next, e))) goto done;
    }
    *tg = (double)B * BATCH_GEN / (cli_now() - t1);
done:
    free(next);
    free(idx);
    hx_batch_free(&b);
    return s;
}

/* The model's name for the rows: the synth spec's preset, the preset of a
 * file synth wrote ("helix synthetic P"), else the file's name. */
static void model_label(const hx_model *m, const char *path, const char *synth, char *name, size_t n) {
    if (synth) {
        snprintf(name, n, "%.*s", (int)(strchr(synth, ':') - synth), synth);
        return;
    }
    const char *gn = hx_model_name(m), *syn = "helix synthetic ";
    if (gn && !strncmp(gn, syn, strlen(syn)) && gn[strlen(syn)]) {
        snprintf(name, n, "%s", gn + strlen(syn));
        return;
    }
    size_t plen = strlen(path);
    while (plen > 1 && path[plen - 1] == '/') plen--;
    const char *b = path + plen;
    while (b > path && b[-1] != '/') b--;
    size_t len = (size_t)(path + plen - b);
    if (len > 5 && !strncmp(b + len - 5, ".gguf", 5)) len -= 5;
    snprintf(name, n, "%.*s", (int)len, b);
}

int cmd_bench(int argc, char **argv) {
    const char *path = NULL, *synth = NULL, *batch_arg = NULL;
    int n_prompt = 512, n_gen = 128, reps = 3, threads = 0, kv = 0;
    bool json = false, jsonl = false, parity = false, kv_slots = false;
    cli_device dev = {.device = 1, .ngl = -2};
    static const char *const kv_names[] = {"f16", "f32", NULL};
    const cli_opt opts[] = {
        {CLI_STR, "-m|--model", &path, "FILE", "model: a .gguf file or a Hugging Face folder", 0, 0, NULL},
        {CLI_STR, "--synth", &synth, "PRESET:MIX", "a random-weight model instead (helix-bg synth, temporary file)",
         0, 0, NULL},
        {CLI_INT, "-p|--n-prompt", &n_prompt, "N", "prompt tokens processed as one batch, 0 = skip", 0, 1 << 20, NULL},
        {CLI_INT, "-n|--n-gen", &n_gen, "N", "tokens generated one at a time, 0 = skip", 0, 1 << 20, NULL},
        {CLI_INT, "-r|--repetitions", &reps, "N", "repetitions of each test", 1, 1000, NULL},
        {CLI_STR, "--batch", &batch_arg, "B1,B2,..", "instead of pp/tg: B sequences decoded together, 128 prompt + "
         "128 generated tokens each (aggregate tokens/s)", 0, 0, NULL},
        {CLI_INT, "-t|--threads", &threads, "N", "CPU threads, 0 = all", 0, 4096, NULL},
        {CLI_CHOICE, "--kv", &kv, NULL, "KV cache type (f32: CPU only)", 0, 0, kv_names},
        {CLI_BOOL, "--kv-slots", &kv_slots, NULL, "--batch: fixed KV slots per sequence instead of the shared pool of "
         "pages (to compare the two)", 0, 0, NULL},
        {CLI_BOOL, "--parity", &parity, NULL, "CPU: llama.cpp's rounding and summation order (generate's default) "
         "instead of the fast path", 0, 0, NULL},
        {CLI_CHOICE, "--device", &dev.device, NULL, "backend; auto takes CUDA when usable", 0, 0, cli_device_names},
        {CLI_INT, "-ngl|--n-gpu-layers", &dev.ngl, "N", "0 = cpu, more = cuda (default: as --device)", 0, 1 << 20,
         NULL},
        {CLI_INT, "-tp|--tensor-split", &dev.tp, "N", "split every layer over N GPUs (tensor parallelism over NCCL; "
         "heads, FFN and vocabulary cut N ways) (default 1)", 1, 8, NULL},
        CLI_SPLIT_OPTS(dev),
        {CLI_BOOL, "--json", &json, NULL, "one JSON object per test on stdout (with stddev, size, threads)", 0, 0, NULL},
        {CLI_BOOL, "--jsonl", &jsonl, NULL, "one line per test for bench/results.jsonl: date, commit, device, engine, "
         "model, mix, test, tokens_per_s", 0, 0, NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    cli_lora_list lora = {0};
    hx_adapter *adapters[CLI_MAX_LORA] = {0};
    if (cli_lora_strip(&argc, argv, &lora)) return 2;
    int pr = cli_parse(CMD, CMD " (-m FILE | --synth PRESET:MIX) [options]",
                       "LoRA: --lora FILE, --lora-scaled FILE SCALE (repeatable) on every context.\n", opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!path == !synth) return cli_usage_error(CMD, "give exactly one of -m FILE and --synth PRESET:MIX");
    if (n_prompt == 0 && n_gen == 0 && !batch_arg) return cli_usage_error(CMD, "-p and -n are both 0: nothing to run");
    int32_t *batches = NULL;
    int n_batches = 0;
    if (batch_arg && !cli_parse_int_list(CMD, "--batch", batch_arg, 1, 4096, &batches, &n_batches)) return 2;
    char synth_path[512] = "";
    if (synth) {
        if (make_synth(synth, synth_path, sizeof synth_path)) { free(batches); return 1; }
        path = synth_path;
    }
    int rc = 1, n_rows = 0;
    hx_error e = {0};
    hx_context *ctx = NULL;
    int32_t *toks = NULL;
    double *v1 = calloc((size_t)reps, sizeof *v1), *v2 = calloc((size_t)reps, sizeof *v2);
    row *rows = calloc((size_t)(2 + 2 * n_batches), sizeof *rows);
    hx_model *m = cli_model_open(CMD, path, &dev, NULL);
    if (!m) goto done;
    if (!v1 || !v2 || !rows) { fprintf(stderr, "helix-bg " CMD ": out of memory\n"); goto done; }
    bool gpu = hx_model_device(m) == HX_DEVICE_CUDA;
    int tp = 1, ls = 1; /* tensor parallel / layer split, as the model settled them */
    hx_dev_model_split(m, &tp, &ls);
    int V = hx_model_n_vocab(m);
    uint64_t rng = 1234;
    hx_context_params cp = hx_context_default_params();
    cp.n_threads = threads;
    cp.kv_f32 = kv == 1;
    cp.exact = !parity; // the fast path unless asked (README: bench measures it)
    if (!batches) {
        cp.n_ctx = n_prompt + n_gen + 8;
        if (cp.n_batch < n_prompt) cp.n_batch = n_prompt;
        toks = malloc(sizeof(int32_t) * (size_t)(n_prompt > 1 ? n_prompt : 1));
        if (!toks) { fprintf(stderr, "helix-bg " CMD ": out of memory\n"); goto done; }
        for (int i = 0; i < (n_prompt > 1 ? n_prompt : 1); i++) toks[i] = (int32_t)(rng_next(&rng) % (uint64_t)V);
        if (!(ctx = cli_context_new(CMD, m, &cp, NULL))) goto done;
        if (lora.n && cli_lora_apply(m, ctx, &lora, adapters, &e)) goto fail;
        /* warm-up outside the timing: first-call allocations, cuBLAS set-up, the decode graph's capture */
        double t;
        int n_warm = gpu && n_prompt > 0 ? n_prompt : n_prompt > 8 ? 8 : n_prompt;
        if (n_warm > 0 && run_pp(ctx, toks, n_warm, &t, &e)) goto fail;
        if (n_gen > 0 && run_tg(ctx, toks[0], n_gen < 4 ? n_gen : 4, &t, &e)) goto fail;
        for (int r = 0; r < reps; r++) {
            if (n_prompt > 0 && run_pp(ctx, toks, n_prompt, &v1[r], &e)) goto fail;
            if (n_gen > 0 && run_tg(ctx, toks[0], n_gen, &v2[r], &e)) goto fail;
        }
        if (n_prompt > 0) {
            snprintf(rows[n_rows].test, sizeof rows[n_rows].test, "pp%d", n_prompt);
            stats(v1, reps, &rows[n_rows].mean, &rows[n_rows].sd);
            n_rows++;
        }
        if (n_gen > 0) {
            snprintf(rows[n_rows].test, sizeof rows[n_rows].test, "tg%d", n_gen);
            stats(v2, reps, &rows[n_rows].mean, &rows[n_rows].sd);
            n_rows++;
        }
    }
    for (int k = 0; k < n_batches; k++) {
        int B = batches[k];
        hx_context_free(ctx);
        ctx = NULL;
        cp.n_seq_max = B;
        cp.n_ctx = B * (BATCH_PROMPT + BATCH_GEN + 8);
        cp.kv_slots = kv_slots;
        cp.n_batch = B * BATCH_PROMPT > 2048 ? B * BATCH_PROMPT : 2048;
        if (!(ctx = cli_context_new(CMD, m, &cp, NULL))) goto done;
        if (lora.n && !adapters[0] && cli_lora_apply(m, ctx, &lora, adapters, &e)) goto fail;
        if (lora.n && adapters[0] && hx_context_set_adapters(ctx, adapters, lora.scale, lora.n, &e)) goto fail;
        double p0, t0;
        if (run_batched(ctx, B, &rng, &p0, &t0, &e)) goto fail; /* warm-up */
        for (int r = 0; r < reps; r++)
            if (run_batched(ctx, B, &rng, &v1[r], &v2[r], &e)) goto fail;
        for (int j = 0; j < 2; j++) {
            row *w = &rows[n_rows++];
            snprintf(w->test, sizeof w->test, "%s%d-b%d", j ? "tg" : "pp", j ? BATCH_GEN : BATCH_PROMPT, B);
            w->batch = B;
            stats(j ? v2 : v1, reps, &w->mean, &w->sd);
        }
    }

    char name[128], device[300];
    const char *mix = synth ? strchr(synth, ':') + 1 : hx_dev_model_mix(m);
    model_label(m, path, synth, name, sizeof name);
    int nt = threads > 0 ? threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    double copy_gbps = 0; /* the GPU's device-to-device copy bandwidth: the ceiling for tg */
    if (gpu) {
        if (hx_dev_cuda_device_name(0, device, sizeof device, &e)) snprintf(device, sizeof device, "cuda");
        size_t l = strlen(device); /* several GPUs: the label says how many and how */
        if (tp > 1) snprintf(device + l, sizeof device - l, " x%d (tensor parallel)", tp);
        else if (ls > 1) snprintf(device + l, sizeof device - l, " x%d (layer split)", ls);
        if (!jsonl && !json && hx_dev_cuda_copy_bandwidth((size_t)256 << 20, 10, &copy_gbps, &e)) copy_gbps = 0;
    } else {
        char cpu[256];
        cpu_name(cpu, sizeof cpu);
        snprintf(device, sizeof device, "%s (%d threads)", cpu, nt);
    }
    char date[16] = "unknown";
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(date, sizeof date, "%Y-%m-%d", &tm);
    /* weights each GPU reads per decode step (tensor parallel: its share) */
    double wgb = (double)hx_dev_model_decode_bytes(m) / 1e9 / tp;
    uint64_t size = hx_model_size_bytes(m);
    if (!json && !jsonl) {
        printf("| %-20s | %-6s | %10s | %6s | %-11s | %20s | %8s | %18s |\n", "model", "mix", "size", "thr", "test",
               "t/s", "ms/tok", copy_gbps > 0 ? "weights GB/s (copy)" : "weights GB/s");
        printf("|%s|%s|%s|%s|%s|%s|%s|%s|\n", "----------------------", "--------", "------------", "--------",
               "-------------", "----------------------", "----------", "--------------------");
    }
    char tp_key[32] = ""; /* results.jsonl's "tp" or "layer_split" where it applies */
    if (tp > 1) snprintf(tp_key, sizeof tp_key, ", \"tp\": %d", tp);
    else if (ls > 1) snprintf(tp_key, sizeof tp_key, ", \"layer_split\": %d", ls);
    for (int k = 0; k < n_rows; k++) {
        const row *w = &rows[k];
        char batch_key[24] = ""; /* ... and "batch" for --batch rows */
        if (w->batch) snprintf(batch_key, sizeof batch_key, ", \"batch\": %d", w->batch);
        if (jsonl)
            printf("{\"date\": \"%s\", \"commit\": \"%s\", \"device\": \"%s\", \"engine\": \"helix\", "
                   "\"model\": \"%s\", \"mix\": \"%s\", \"test\": \"%s\", \"tokens_per_s\": %.2f%s%s}\n",
                   date, HX_GIT_COMMIT, device, name, mix, w->test, w->mean, tp_key, batch_key);
        else if (json)
            printf("{\"engine\": \"helix\", \"device\": \"%s\", \"model\": \"%s\", \"mix\": \"%s\", \"size_bytes\": %llu, "
                   "\"threads\": %d, \"test\": \"%s\", \"batch\": %d, \"reps\": %d, \"tokens_per_s\": %.3f, "
                   "\"stddev\": %.3f, \"ms_per_token\": %.4f, \"commit\": \"%s\"}\n",
                   device, name, mix, (unsigned long long)size, gpu ? 0 : nt, w->test, w->batch ? w->batch : 1, reps,
                   w->mean, w->sd, 1e3 / w->mean, HX_GIT_COMMIT);
        else {
            /* weights read per second: one pass over them per decode step (B tokens in a batched step) */
            char bw[32] = "";
            bool decode = w->test[0] == 't';
            double steps = w->mean / (w->batch ? w->batch : 1);
            if (decode && copy_gbps > 0) snprintf(bw, sizeof bw, "%.0f (%.0f%%)", wgb * steps, 100 * wgb * steps / copy_gbps);
            else if (decode) snprintf(bw, sizeof bw, "%.1f", wgb * steps);
            char thr[16];
            snprintf(thr, sizeof thr, "%d", nt);
            printf("| %-20s | %-6s | %6.1f MiB | %6s | %-11s | %9.2f ± %8.2f | %8.3f | %18s |\n", name, mix,
                   size / 1048576.0, gpu ? "cuda" : thr, w->test, w->mean, w->sd, 1e3 / w->mean, bw);
        }
    }
    if (!json && !jsonl) printf("commit %s, %s, %s\n", HX_GIT_COMMIT, device, date);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
done:
    free(toks);
    free(v1);
    free(v2);
    free(rows);
    free(batches);
    hx_context_free(ctx);
    for (int k = 0; k < lora.n; k++) hx_adapter_free(adapters[k]);
    hx_model_free(m);
    if (synth_path[0]) unlink(synth_path);
    return rc;
}
