/* cmd_embed.c — helix-bg embed (placeholder until issue 6 lands it). */
#include "cli.h"

int cmd_embed(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("embed", "6");
}
