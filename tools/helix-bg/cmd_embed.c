/* cmd_embed.c — helix-bg embed -m MODEL: one text per stdin line in, one
 * embedding per line out (a JSON array of floats, or raw little-endian f32).
 * stdin is read whole and split in place; f32 goes out in one write; JSON
 * lines are formatted on all threads (the same "%.7g" text as printf, a
 * block of rows per task) and written in order. */
#include "cli.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "embed"

enum { FMT_ROWS = 64, FMT_WINDOW = 4096 }; /* rows per formatting task; rows formatted before a write */

typedef struct fmt_job {
    const float *v;   /* rows [r0, r0 + n) of dim floats */
    int64_t r0, n;
    int dim;
    char **buf;       /* per task: its rows' JSON lines */
    size_t *len, *cap; /* per task; len SIZE_MAX: out of memory */
} fmt_job;

static void fmt_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    fmt_job *j = ctx;
    int64_t r1 = (task + 1) * FMT_ROWS < j->n ? (task + 1) * FMT_ROWS : j->n;
    size_t len = 0, cap = j->cap[task];
    char *b = j->buf[task];
    for (int64_t r = task * FMT_ROWS; r < r1; r++) {
        const float *x = j->v + (size_t)(j->r0 + r) * j->dim;
        for (int k = 0; k <= j->dim; k++) {
            if (cap - len < 40) { /* "%.7g" of a float is at most 15 bytes, plus ", " or "]\n" */
                size_t nc = cap ? 2 * cap : 16384;
                char *nb = realloc(b, nc);
                if (!nb) { j->len[task] = SIZE_MAX; return; }
                b = j->buf[task] = nb;
                cap = j->cap[task] = nc;
            }
            if (k == j->dim) { memcpy(b + len, "]\n", 2); len += 2; }
            else len += (size_t)snprintf(b + len, cap - len, k ? ", %.7g" : "[%.7g", x[k]);
        }
    }
    j->len[task] = len;
}

/* The rows as JSON lines, formatted on the pool's threads, written in order; false on a failed write. */
static bool write_json(hx_pool *pool, const float *v, size_t n, int dim, FILE *f) {
    int64_t tasks = FMT_WINDOW / FMT_ROWS;
    char **buf = calloc((size_t)tasks, sizeof *buf);
    size_t *len = calloc((size_t)tasks, sizeof *len), *cap = calloc((size_t)tasks, sizeof *cap);
    bool ok = buf && len && cap;
    for (size_t r0 = 0; ok && r0 < n; r0 += FMT_WINDOW) {
        fmt_job j = {v, (int64_t)r0, (int64_t)(n - r0 < FMT_WINDOW ? n - r0 : FMT_WINDOW), dim, buf, len, cap};
        int64_t nt = (j.n + FMT_ROWS - 1) / FMT_ROWS;
        hx_pool_run(pool, nt, fmt_task, &j);
        for (int64_t t = 0; ok && t < nt; t++) ok = len[t] != SIZE_MAX && fwrite(buf[t], 1, len[t], f) == len[t];
    }
    for (int64_t t = 0; buf && t < tasks; t++) free(buf[t]);
    free(buf); free(len); free(cap);
    return ok;
}

/* All of f, NUL-terminated; NULL when out of memory or on a read error. */
static char *read_all(FILE *f, size_t *size) {
    size_t cap = 1 << 20, n = 0;
    char *b = malloc(cap + 1);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(b, 2 * cap + 1);
        if (!nb) { free(b); return NULL; }
        b = nb;
        cap *= 2;
    }
    if (!b || ferror(f)) { free(b); return NULL; }
    b[n] = 0;
    *size = n;
    return b;
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL;
    int threads = 0, max_tokens = 256, batch = 0, format = 0, device = 1, type = 0;
    static const char *const formats[] = {"json", "f32", NULL}, *const types[] = {"f32", "int8", "auto", NULL};
    const cli_opt opts[] = {
        {CLI_STR, "-m|--model", &model, "MODEL", "a BERT .gguf or a Hugging Face folder (config.json, "
         "model.safetensors, vocab.txt)", 0, 0, NULL},
        {CLI_CHOICE, "--format", &format, NULL, "a JSON array of floats per line, or raw little-endian f32", 0, 0,
         formats},
        {CLI_INT, "-t|--threads", &threads, "N", "CPU threads, 0 = all", 0, 4096, NULL},
        {CLI_INT, "--max-tokens", &max_tokens, "N", "tokens per text (longer ones are cut)", 2, 1 << 20, NULL},
        {CLI_INT, "--batch", &batch, "N", "texts per forward, 0 = as many as fit the token budget (8192 on the CPU, 32768 on the GPU)", 0, 1 << 20, NULL},
        {CLI_CHOICE, "--embed-type", &type, NULL, "the CPU encoder's linear layers: f32, int8 (per-row weights, "
         "per-token activations; fast with AVX512-VNNI) or auto (int8 where the CPU has VNNI)", 0, 0, types},
        {CLI_CHOICE, "--device", &device, NULL, "where to run; cuda fails instead of falling back", 0, 0,
         cli_device_names},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int pr = cli_parse(CMD, CMD " -m MODEL [options] < texts",
                       "Reads one text per stdin line; writes one embedding per line (L2-normalized mean pooling).\n",
                       opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model) return cli_usage_error(CMD, "-m MODEL is required (see helix-bg " CMD " --help)");
    bool raw = format == 1;
    hx_error e = {0};
    hx_embedder *em = NULL;
    double t0 = cli_now();
    if (hx_embedder_open(model, threads, &em, &e) != HX_OK) { fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg); return 1; }
    hx_embedder_set_max_tokens(em, max_tokens);
    hx_embedder_set_batch(em, batch);
    if (hx_embedder_set_type(em, types[type], &e) != HX_OK ||
        hx_embedder_set_device(em, cli_device_names[device], &e) != HX_OK) {
        fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
        hx_embedder_free(em);
        return 1;
    }
    double t_load = cli_now() - t0;
    /* read all lines: split in place at each '\n' (a last line without one counts) */
    double t_start = cli_now();
    size_t size = 0, n = 0;
    char *in = read_all(stdin, &size);
    char **lines = NULL;
    if (in) {
        size_t count = 0;
        for (char *q = in; (q = memchr(q, '\n', size - (size_t)(q - in))); q++) count++;
        lines = malloc((count + 1) * sizeof *lines);
        for (size_t at = 0; lines && at < size; n++) {
            char *nl = memchr(in + at, '\n', size - at);
            lines[n] = in + at;
            if (!nl) { n++; break; } /* the unterminated last line */
            *nl = 0;
            at = (size_t)(nl - in) + 1;
        }
    }
    int rc = 0, dim = hx_embedder_dim(em);
    float *out = malloc((n ? n : 1) * (size_t)dim * sizeof *out);
    hx_pool *pool = NULL;
    if (n > INT_MAX) {
        fprintf(stderr, "helix-bg " CMD ": %zu lines (at most %d)\n", n, INT_MAX);
        rc = 1;
        goto done;
    }
    if (!in || !lines || !out || (!raw && !(pool = hx_pool_create(threads)))) {
        fprintf(stderr, "helix-bg " CMD ": %s\n", in ? "out of memory" : "cannot read stdin");
        rc = 1;
        goto done;
    }
    t0 = cli_now();
    if (hx_embed(em, (const char *const *)lines, (int)n, out, &e) != HX_OK) {
        fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
        rc = 1;
        goto done;
    }
    double t_embed = cli_now() - t0;
    bool wrote = raw ? fwrite(out, sizeof(float) * (size_t)dim, n, stdout) == n : write_json(pool, out, n, dim, stdout);
    if (!wrote || fflush(stdout)) {
        fprintf(stderr, "helix-bg " CMD ": writing the embeddings failed\n");
        rc = 1;
        goto done;
    }
    double t_all = cli_now() - t_start;
    fprintf(stderr, "helix-bg " CMD ": %zu texts, dim %d, %s %s, load %.2f s, %.1f texts/s, "
            "%.1f texts/s with reading and writing\n", n, dim,
            hx_embedder_device(em), strcmp(hx_embedder_device(em), "cpu") ? "f32" : hx_embedder_type(em), t_load,
            t_embed > 0 ? n / t_embed : 0.0, t_all > 0 ? n / t_all : 0.0);
done:
    free(in);
    free(lines);
    free(out);
    hx_pool_free(pool);
    hx_embedder_free(em);
    return rc;
}
