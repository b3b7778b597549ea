/* cli.h — subcommands of helix-bg. Each lives in its own cmd_*.c file and,
 * except the knowledge-base commands and the developer tools, uses only the
 * public API (helix.h) and the shared helpers here. */
#ifndef HX_CLI_H
#define HX_CLI_H

#include "helix.h"
#include "cli_args.h"

/* Each returns the process exit code. argv[0] is the subcommand name. */
int cmd_load_model(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_cpu_test(int argc, char **argv);
int cmd_gpu_test(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_one_shot(int argc, char **argv);
int cmd_daemon(int argc, char **argv);
int cmd_embed_test(int argc, char **argv);
int cmd_embed(int argc, char **argv);
int cmd_search(int argc, char **argv);
int cmd_ask(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

/* Shared helper for not-yet-built commands: prints a clear message, returns 2. */
int cli_not_built(const char *cmd, const char *issue);

/* ---- cli_model.c: what generate, chat and bench share ---- */

/* --device and -ngl as the user gave them. */
typedef struct cli_device {
    int device;       /* index into cli_device_names: auto, cpu, cuda */
    int ngl;          /* -ngl N; -2 when not given */
    int tp;           /* -tp N: GPUs that share every layer (tensor parallelism); 0 or 1: one */
    int split_mode;   /* -sm: index into cli_split_mode_names: how -tp N GPUs share the model */
    int layer_split;  /* --layer-split N: contiguous layers on each of N GPUs (N CPU parts with --device cpu) */
} cli_device;
extern const char *const cli_device_names[];     /* {"auto", "cpu", "cuda", NULL} */
extern const char *const cli_split_mode_names[]; /* {"row", "layer", NULL}: llama.cpp's -sm names */
/* The split flags of generate, bench and chat (serve parses its own). */
#define CLI_SPLIT_OPTS(d)                                                                                            \
    {CLI_CHOICE, "-sm|--split-mode", &(d).split_mode, NULL, "how the -tp N GPUs share the model: row = tensor "      \
     "parallelism (falls back to layer when the heads do not divide by N), layer = contiguous layers on each GPU "   \
     "(a pipeline: N GPUs' memory, no speed-up)", 0, 0, cli_split_mode_names},                                      \
    {CLI_INT, "--layer-split", &(d).layer_split, "N", "as -tp N -sm layer; with --device cpu, N CPU parts (a test " \
     "of the split) (default 1)", 1, 16, NULL}

/* Opens the model at path on the device asked for, with a progress bar on a
 * terminal (stderr) when the file is over ~100 MB. Prints the error as
 * "helix-bg CMD: ..." and returns NULL on failure; says on stderr why AUTO
 * fell back to the CPU. *load_s: seconds spent (may be NULL). */
hx_model *cli_model_open(const char *cmd, const char *path, const cli_device *d, double *load_s);
/* Clears the progress line if one is shown: after hx_context_new, which on
 * CUDA reports the weight upload through the same callback. */
void cli_progress_end(void);

/* hx_context_new; with hx_dev_context_new (helix_dev.h) when there is a dump
 * folder or, on CUDA, HX_CUDA_* measurement switches in the environment.
 * Prints the error as "helix-bg CMD: ..." and returns NULL on failure. */
hx_context *cli_context_new(const char *cmd, hx_model *m, const hx_context_params *cp, const char *dump_dir);

/* Monotonic seconds. */
double cli_now(void);

#endif
