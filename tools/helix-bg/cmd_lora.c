/* cmd_lora.c — LoRA adapter tools: lora-convert (a PEFT folder to a llama.cpp
 * GGUF adapter) and lora-merge (a base GGUF with adapters added into its
 * matrices, for decoding without the LoRA work). Generate's --lora flags are
 * parsed by cli_lora_flag below. */
#include "cli_lora.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse_scale(const char *flag, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        fprintf(stderr, "helix-bg: %s: '%s' is not a number\n", flag, s);
        return false;
    }
    *out = (float)v;
    return true;
}

int cmd_lora_convert(int argc, char **argv) {
    const char *in = NULL, *base = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) base = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: helix-bg lora-convert PEFT-DIR -m BASE -o OUT.gguf\n"
                   "  PEFT-DIR  adapter_config.json + adapter_model.safetensors\n"
                   "  -m BASE   the base model (GGUF or Hugging Face folder): names and shapes are checked\n"
                   "            against it, and llama's Q/K rows are written in llama.cpp's layout\n"
                   "  -o OUT    a GGUF adapter as llama.cpp's convert_lora_to_gguf.py writes it (f32)\n");
            return 0;
        } else if (argv[i][0] == '-' || in) {
            fprintf(stderr, "helix-bg lora-convert: unexpected argument '%s' (see --help)\n", argv[i]);
            return 2;
        } else in = argv[i];
    }
    if (!in || !base || !out) {
        fprintf(stderr, "helix-bg lora-convert: PEFT-DIR, -m BASE and -o OUT are required (see --help)\n");
        return 2;
    }
    hx_error e = {0};
    hx_model *m = NULL;
    hx_adapter *a = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    if (hx_model_open(base, &mp, &m, &e) || hx_adapter_open(m, in, &a, &e) || hx_adapter_save(a, out, &e)) {
        fprintf(stderr, "helix-bg lora-convert: %s\n", e.msg);
        hx_adapter_free(a);
        hx_model_free(m);
        return 1;
    }
    fprintf(stderr, "wrote %s: %d adapted matrices\n", out, hx_adapter_n_weights(a));
    hx_adapter_free(a);
    hx_model_free(m);
    return 0;
}

int cmd_lora_merge(int argc, char **argv) {
    const char *base = NULL, *out = NULL;
    const char *paths[64];
    float scales[64];
    int n = 0;
    bool f32 = false;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) base = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--f32")) f32 = true;
        else if (!strcmp(argv[i], "--lora") && i + 1 < argc && n < 64) { paths[n] = argv[++i]; scales[n++] = 1.0f; }
        else if (!strcmp(argv[i], "--lora-scaled") && i + 2 < argc && n < 64) {
            paths[n] = argv[++i];
            if (!parse_scale("--lora-scaled", argv[++i], &scales[n])) return 2;
            n++;
        } else if (!strcmp(argv[i], "--scale") && i + 1 < argc) {
            if (n == 0) { fprintf(stderr, "helix-bg lora-merge: --scale comes after the --lora it scales\n"); return 2; }
            if (!parse_scale("--scale", argv[++i], &scales[n - 1])) return 2;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: helix-bg lora-merge -m BASE.gguf --lora A.gguf [--scale S] [--lora B ...] -o MERGED.gguf [--f32]\n"
                   "  --lora FILE          a GGUF adapter or a PEFT folder (scale 1)\n"
                   "  --scale S            the scale of the --lora before it\n"
                   "  --lora-scaled FILE S the same in one flag (llama.cpp's spelling)\n"
                   "  --f32                write the adapted matrices as f32 (default: requantized to the base's type)\n"
                   "Every adapted matrix becomes W + sum s*B*A, s = scale*alpha/rank; all else is copied.\n");
            return 0;
        } else {
            fprintf(stderr, "helix-bg lora-merge: unexpected or incomplete argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!base || !out || n == 0) {
        fprintf(stderr, "helix-bg lora-merge: -m BASE, at least one --lora and -o OUT are required (see --help)\n");
        return 2;
    }
    hx_error e = {0};
    if (hx_adapter_merge(base, paths, scales, n, f32, out, &e)) {
        fprintf(stderr, "helix-bg lora-merge: %s\n", e.msg);
        return 1;
    }
    fprintf(stderr, "wrote %s (%d adapter%s merged)\n", out, n, n == 1 ? "" : "s");
    return 0;
}

int cli_lora_flag(int argc, char **argv, int *i, cli_lora_list *l) {
    const char *f = argv[*i];
    if (strcmp(f, "--lora") && strcmp(f, "--lora-scaled")) return 0;
    bool scaled = !strcmp(f, "--lora-scaled");
    if (*i + 1 + scaled >= argc) { fprintf(stderr, "helix-bg: %s needs %s\n", f, scaled ? "FILE SCALE" : "FILE"); return -1; }
    if (l->n >= CLI_MAX_LORA) { fprintf(stderr, "helix-bg: more than %d adapters\n", CLI_MAX_LORA); return -1; }
    l->path[l->n] = argv[++*i];
    l->scale[l->n] = 1.0f;
    if (scaled && !parse_scale(f, argv[++*i], &l->scale[l->n])) return -1;
    l->n++;
    return 1;
}

int cli_lora_strip(int *argc, char **argv, cli_lora_list *l) {
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        int r = cli_lora_flag(*argc, argv, &i, l);
        if (r < 0) return 2;
        if (r == 0) argv[out++] = argv[i];
    }
    *argc = out;
    argv[out] = NULL;
    return 0;
}

hx_status cli_lora_apply(hx_model *m, hx_context *c, const cli_lora_list *l, hx_adapter **opened, hx_error *e) {
    for (int k = 0; k < l->n; k++) {
        hx_status st = hx_adapter_open(m, l->path[k], &opened[k], e);
        if (st) return st;
    }
    return hx_context_set_adapters(c, opened, l->scale, l->n, e);
}
