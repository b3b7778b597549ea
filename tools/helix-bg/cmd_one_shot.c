/* cmd_one_shot.c — helix-bg one-shot (placeholder until issue 5 lands it). */
#include "cli.h"

int cmd_one_shot(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("one-shot", "5");
}
