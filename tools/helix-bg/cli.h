/* cli.h — subcommands of helix-bg. Each lives in its own cmd_*.c file. */
#ifndef HX_CLI_H
#define HX_CLI_H

#include "helix.h"
#include "backend/cpu/forward.h"
#include "run/sampler.h"

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

/* One forward (logits of the last token, or of all with all_logits) and the
 * cache truncation, on the CUDA context gc when not NULL, else on the CPU
 * context c (cli_backend.c). cli_truncate returns the positions kept (0 when a
 * sliding-window ring no longer holds the window before pos).  */
hx_status cli_forward(hx_cpu_ctx *c, void *gc, const int32_t *t, int n, int pos, float *logits, bool all_logits,
                      hx_error *e);
int cli_truncate(hx_cpu_ctx *c, void *gc, int pos);
/* One decode step: runs token t at pos and picks the next token into *next,
 * the argmax when greedy, else with the sampler smp (its draw; the caller
 * accepts the token). On the GPU, greedy decode and the sampling chain run
 * there and only the token comes back; logits (V floats) are then not
 * written unless want_logits, which forces the logits back and the choice
 * onto the CPU. Settings the GPU chain does not take (hx_cuda_sample_supported)
 * also fall back to the CPU sampler. */
hx_status cli_decode_next(hx_cpu_ctx *c, void *gc, hx_sampler *smp, bool greedy, bool want_logits, int32_t t, int pos,
                          float *logits, int V, int32_t *next, hx_error *e);

/* Shared helper for not-yet-built commands: prints a clear message, returns 2. */
int cli_not_built(const char *cmd, const char *issue);

#endif
