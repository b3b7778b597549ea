/* cmd_embed.c — helix-bg embed -m MODEL: one text per stdin line in, one
 * embedding per line out (a JSON array of floats, or raw little-endian f32). */
#include "cli.h"
#include "core/core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: helix-bg embed -m MODEL [--format json|f32] [-t THREADS] [--max-tokens N]\n"
               "                       [--batch N] [--device cpu|cuda|auto]\n"
               "  MODEL: a BERT .gguf or a Hugging Face folder (config.json, model.safetensors, vocab.txt)\n"
               "  reads one text per line from stdin; writes one embedding per line (JSON array of\n"
               "  floats, L2-normalized mean pooling) or, with --format f32, raw little-endian floats.\n"
               "  --batch N: sequences per forward (default: up to 8192 tokens); --device (default cpu).\n");
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL;
    bool raw = false;
    int threads = 0, max_tokens = 256, batch = 0;
    const char *device = "cpu";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") && more) model = argv[++i];
        else if (!strcmp(a, "-t") && more) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--max-tokens") && more) max_tokens = atoi(argv[++i]);
        else if (!strcmp(a, "--batch") && more) batch = atoi(argv[++i]);
        else if (!strcmp(a, "--device") && more) device = argv[++i];
        else if (!strcmp(a, "--format") && more) {
            const char *f = argv[++i];
            if (!strcmp(f, "f32")) raw = true;
            else if (strcmp(f, "json")) { fprintf(stderr, "helix-bg embed: --format takes json or f32, not '%s'\n", f); return 2; }
        } else { fprintf(stderr, "helix-bg embed: bad or incomplete option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!model) { fprintf(stderr, "helix-bg embed: -m MODEL is required\n"); usage(stderr); return 2; }
    if (threads < 0 || max_tokens < 2 || batch < 0) {
        fprintf(stderr, "helix-bg embed: need -t >= 0, --max-tokens >= 2 and --batch >= 0\n");
        return 2;
    }
    hx_error e = {0};
    hx_embedder *em = NULL;
    double t0 = hx_now_s();
    if (hx_embedder_open(model, threads, &em, &e) != HX_OK) { fprintf(stderr, "helix-bg embed: %s\n", e.msg); return 1; }
    hx_embedder_set_max_tokens(em, max_tokens);
    hx_embedder_set_batch(em, batch);
    if (hx_embedder_set_device(em, device, &e) != HX_OK) {
        fprintf(stderr, "helix-bg embed: %s\n", e.msg);
        hx_embedder_free(em);
        return 1;
    }
    double t_load = hx_now_s() - t0;
    /* read all lines */
    size_t cap = 1024, n = 0;
    char **lines = malloc(cap * sizeof *lines);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while (lines && (len = getline(&line, &lcap, stdin)) >= 0) {
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (n == cap) {
            char **nl = realloc(lines, 2 * cap * sizeof *nl);
            if (!nl) break;
            lines = nl;
            cap *= 2;
        }
        lines[n++] = strdup(line);
    }
    free(line);
    int rc = 0, dim = hx_embedder_dim(em);
    float *out = malloc((n ? n : 1) * (size_t)dim * sizeof *out);
    if (!lines || !out) { fprintf(stderr, "helix-bg embed: out of memory\n"); rc = 1; goto done; }
    t0 = hx_now_s();
    if (hx_embed(em, (const char *const *)lines, (int)n, out, &e) != HX_OK) {
        fprintf(stderr, "helix-bg embed: %s\n", e.msg);
        rc = 1;
        goto done;
    }
    double t_embed = hx_now_s() - t0;
    for (size_t i = 0; i < n; i++) {
        if (raw) { fwrite(out + i * (size_t)dim, sizeof(float), (size_t)dim, stdout); continue; }
        putchar('[');
        for (int k = 0; k < dim; k++) printf(k ? ", %.7g" : "%.7g", out[i * (size_t)dim + k]);
        puts("]");
    }
    fprintf(stderr, "helix-bg embed: %zu texts, dim %d, %s, load %.2f s, %.1f texts/s\n", n, dim,
            hx_embedder_device(em), t_load, t_embed > 0 ? n / t_embed : 0.0);
done:
    for (size_t i = 0; lines && i < n; i++) free(lines[i]);
    free(lines);
    free(out);
    hx_embedder_free(em);
    return rc;
}
