/* cmd_embed_test.c — helix-bg embed-test (placeholder until issue 5 lands it). */
#include "cli.h"

int cmd_embed_test(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("embed-test", "5");
}
