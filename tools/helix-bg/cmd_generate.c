/* cmd_generate.c — helix-bg generate (placeholder until issue 3 lands it). */
#include "cli.h"

int cmd_generate(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("generate", "3");
}
