/* cmd_synth.c — helix-bg synth: a random-weight GGUF with a real model's
 * shapes (helix_dev.h). */
#include "cli.h"
#include "helix_dev.h"

#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#define CMD "synth"

int cmd_synth(int argc, char **argv) {
    hx_dev_synth_params o = {.seed = 42, .progress = isatty(2)};
    const char *out = NULL;
    char about[1024];
    size_t n = (size_t)snprintf(about, sizeof about,
                                "Random weights with the exact shapes of a real model, scaled so activations stay\n"
                                "realistic; tensor names and metadata follow llama.cpp, so llama.cpp loads the file.\n"
                                "presets:");
    for (int i = 0; hx_dev_synth_preset(i) && n < sizeof about; i++)
        n += (size_t)snprintf(about + n, sizeof about - n, " %s", hx_dev_synth_preset(i));
    if (n < sizeof about) n += (size_t)snprintf(about + n, sizeof about - n, "\nmixes:  ");
    for (int i = 0; hx_dev_synth_mix(i) && n < sizeof about; i++)
        n += (size_t)snprintf(about + n, sizeof about - n, " %s", hx_dev_synth_mix(i));
    if (n < sizeof about) snprintf(about + n, sizeof about - n, "\n");
    const cli_opt opts[] = {
        {CLI_STR, "--preset", &o.preset, "NAME", "the architecture and shapes (list below)", 0, 0, NULL},
        {CLI_STR, "--type", &o.mix, "MIX", "weight types, as llama-quantize would give them (list below)", 0, 0, NULL},
        {CLI_STR, "-o", &out, "OUT.gguf", "the file to write", 0, 0, NULL},
        {CLI_STR, "--tokenizer", &o.tokenizer, "FILE", "a .gguf (its tokenizer.* keys) or a tokenizer.json "
         "(default: a synthetic byte-level, or WordPiece for bert, vocabulary)", 0, 0, NULL},
        {CLI_U64, "--seed", &o.seed, "N", "random seed", 0, 0, NULL},
        {CLI_INT, "--layers", &o.n_layer, "N", "layers, 0 = the preset's", 0, 256, NULL},
        {CLI_INT, "--vocab", &o.n_vocab, "N", "vocabulary size, 0 = the preset's", 0, 1 << 20, NULL},
        {CLI_INT, "-t|--threads", &o.n_threads, "N", "threads, 0 = all", 0, 512, NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int pr = cli_parse(CMD, CMD " --preset NAME --type MIX -o OUT.gguf [options]", about, opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!o.preset || !o.mix || !out) return cli_usage_error(CMD, "--preset, --type and -o are required");
    if (o.n_vocab && o.n_vocab < 512) return cli_usage_error(CMD, "--vocab: %d is below 512", o.n_vocab);
    hx_error e = {0};
    double t0 = cli_now();
    if (hx_dev_synth_write(&o, out, &e) != HX_OK) {
        fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
        return e.status == HX_ERR_ARG ? 2 : 1;
    }
    struct stat st;
    double mib = stat(out, &st) ? 0 : st.st_size / 1048576.0;
    fprintf(stderr, "helix-bg " CMD ": wrote %s (%s %s, %.1f MiB) in %.1f s\n", out, o.preset, o.mix, mib,
            cli_now() - t0);
    return 0;
}
