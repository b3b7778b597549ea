/* cmd_synth.c — helix-bg synth: a random-weight GGUF with a real model's shapes. */
#include "cli.h"
#include "core/core.h"
#include "model/synth.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f, "usage: helix-bg synth --preset NAME --type MIX -o OUT.gguf [--tokenizer FILE] [--seed N]\n"
               "                      [--layers N] [-t THREADS]\n"
               "  random weights with the exact shapes of a real model, scaled so activations stay\n"
               "  realistic; tensor names and metadata follow llama.cpp, so llama.cpp loads the file.\n"
               "  --tokenizer: a .gguf (its tokenizer.* keys) or a Hugging Face tokenizer.json;\n"
               "               default: a synthetic byte-level (or WordPiece, for bert) vocabulary.\n"
               "  presets:");
    for (int i = 0; hx_preset_at(i); i++) fprintf(f, " %s", hx_preset_at(i)->name);
    fprintf(f, "\n  mixes:  ");
    for (int i = 0; i < HX_MIX_COUNT; i++) fprintf(f, " %s", hx_mix_name((hx_mix)i));
    fprintf(f, "\n");
}

static bool parse_u64(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') return false;
    *out = v;
    return true;
}

int cmd_synth(int argc, char **argv) {
    hx_synth_opts o = {.seed = 42, .progress = isatty(2)};
    const char *preset = NULL, *mix = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        uint64_t v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--preset") && more) preset = argv[++i];
        else if (!strcmp(a, "--type") && more) mix = argv[++i];
        else if (!strcmp(a, "-o") && more) out = argv[++i];
        else if (!strcmp(a, "--tokenizer") && more) o.tokenizer = argv[++i];
        else if (!strcmp(a, "--seed") && more && parse_u64(argv[i + 1], &v)) { o.seed = v; i++; }
        else if (!strcmp(a, "--layers") && more && parse_u64(argv[i + 1], &v) && v >= 1 && v <= 256) { o.n_layer = (int)v; i++; }
        else if (!strcmp(a, "--vocab") && more && parse_u64(argv[i + 1], &v) && v >= 512 && v <= (1u << 20)) { o.n_vocab = (int)v; i++; }
        else if (!strcmp(a, "-t") && more && parse_u64(argv[i + 1], &v) && v <= 512) { o.n_threads = (int)v; i++; }
        else { fprintf(stderr, "helix-bg synth: bad or incomplete option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!preset || !mix || !out) { fprintf(stderr, "helix-bg synth: --preset, --type and -o are required\n"); usage(stderr); return 2; }
    if (!(o.preset = hx_preset_find(preset))) {
        fprintf(stderr, "helix-bg synth: unknown preset '%s'\n", preset); usage(stderr); return 2;
    }
    int m = hx_mix_from_name(mix);
    if (m < 0) { fprintf(stderr, "helix-bg synth: unknown mix '%s'\n", mix); usage(stderr); return 2; }
    o.mix = (hx_mix)m;
    hx_error e = {0};
    double t0 = hx_now_s();
    if (hx_synth_write(&o, out, &e) != HX_OK) { fprintf(stderr, "helix-bg synth: %s\n", e.msg); return 1; }
    FILE *f = fopen(out, "rb");
    long size = 0;
    if (f) { fseek(f, 0, SEEK_END); size = ftell(f); fclose(f); }
    fprintf(stderr, "helix-bg synth: wrote %s (%s %s, %.1f MiB) in %.1f s\n", out, o.preset->name, hx_mix_name(o.mix),
            size / 1048576.0, hx_now_s() - t0);
    return 0;
}
