/* cmd_chat.c — helix-bg chat (placeholder until issue 3 lands it). */
#include "cli.h"

int cmd_chat(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("chat", "3");
}
