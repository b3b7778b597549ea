/* cmd_synth.c — helix-bg synth (placeholder until issue 2 lands it). */
#include "cli.h"

int cmd_synth(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("synth", "2");
}
