/* cli_lora.h — LoRA in helix-bg (cmd_lora.c): the lora-convert and lora-merge
 * commands, and the --lora FILE / --lora-scaled FILE S flags for commands that
 * run an hx_context. cli_lora_flag returns 1 when argv[*i] was one of them
 * (advancing *i), 0 when not, -1 on a bad value (message printed);
 * cli_lora_apply opens them (opened: l->n slots, each freed by the caller with
 * hx_adapter_free) and sets them on c. */
#ifndef HX_CLI_LORA_H
#define HX_CLI_LORA_H

#include "helix.h"

int cmd_lora_convert(int argc, char **argv);
int cmd_lora_merge(int argc, char **argv);

#define CLI_MAX_LORA 16
typedef struct cli_lora_list { const char *path[CLI_MAX_LORA]; float scale[CLI_MAX_LORA]; int n; } cli_lora_list;
int cli_lora_flag(int argc, char **argv, int *i, cli_lora_list *l);
/* Takes every --lora / --lora-scaled out of argv (before a command's own
 * parser sees it); 0, or 2 after printing what is wrong. */
int cli_lora_strip(int *argc, char **argv, cli_lora_list *l);
hx_status cli_lora_apply(hx_model *m, hx_context *c, const cli_lora_list *l, hx_adapter **opened, hx_error *e);

#endif
