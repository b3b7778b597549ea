/* cmd_embed.c — helix-bg embed -m MODEL: one text per stdin line in, one
 * embedding per line out (a JSON array of floats, or raw little-endian f32). */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "embed"

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
        {CLI_INT, "--batch", &batch, "N", "texts per forward, 0 = as many as fit 8192 tokens", 0, 1 << 20, NULL},
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
    /* read all lines */
    size_t cap = 1024, n = 0;
    char **lines = malloc(cap * sizeof *lines);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    bool oom = !lines;
    while (!oom && (len = getline(&line, &lcap, stdin)) >= 0) {
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (n == cap) {
            char **nl = realloc(lines, 2 * cap * sizeof *nl);
            if (!nl) { oom = true; break; }
            lines = nl;
            cap *= 2;
        }
        if (!(lines[n] = strdup(line))) { oom = true; break; }
        n++;
    }
    free(line);
    int rc = 0, dim = hx_embedder_dim(em);
    float *out = malloc((n ? n : 1) * (size_t)dim * sizeof *out);
    if (oom || !out) { fprintf(stderr, "helix-bg " CMD ": out of memory\n"); rc = 1; goto done; }
    t0 = cli_now();
    if (hx_embed(em, (const char *const *)lines, (int)n, out, &e) != HX_OK) {
        fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
        rc = 1;
        goto done;
    }
    double t_embed = cli_now() - t0;
    for (size_t i = 0; i < n; i++) {
        if (raw) { fwrite(out + i * (size_t)dim, sizeof(float), (size_t)dim, stdout); continue; }
        putchar('[');
        for (int k = 0; k < dim; k++) printf(k ? ", %.7g" : "%.7g", out[i * (size_t)dim + k]);
        puts("]");
    }
    fprintf(stderr, "helix-bg " CMD ": %zu texts, dim %d, %s %s, load %.2f s, %.1f texts/s\n", n, dim,
            hx_embedder_device(em), strcmp(hx_embedder_device(em), "cpu") ? "f32" : hx_embedder_type(em), t_load,
            t_embed > 0 ? n / t_embed : 0.0);
done:
    for (size_t i = 0; lines && i < n; i++) free(lines[i]);
    free(lines);
    free(out);
    hx_embedder_free(em);
    return rc;
}
