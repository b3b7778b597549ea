/* cmd_tokenize.c — helix-bg tokenize (placeholder until issue 3 lands it). */
#include "cli.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("tokenize", "3");
}
