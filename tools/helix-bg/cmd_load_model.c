/* cmd_load_model.c — helix-bg load-model (placeholder until issue 2 lands it). */
#include "cli.h"

int cmd_load_model(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("load-model", "2");
}
