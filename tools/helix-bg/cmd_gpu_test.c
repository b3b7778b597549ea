/* cmd_gpu_test.c — helix-bg gpu-test (placeholder until issue 4 lands it). */
#include "cli.h"

int cmd_gpu_test(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("gpu-test", "4");
}
