/* cmd_cpu_test.c — helix-bg cpu-test (placeholder until issue 2 lands it). */
#include "cli.h"

int cmd_cpu_test(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("cpu-test", "2");
}
