/* cmd_bench.c — helix-bg bench (placeholder until issue 3 lands it). */
#include "cli.h"

int cmd_bench(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("bench", "3");
}
