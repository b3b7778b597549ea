/* cmd_daemon.c — helix-bg daemon (placeholder until issue 5 lands it). */
#include "cli.h"

int cmd_daemon(int argc, char **argv) {
    (void)argc; (void)argv;
    return cli_not_built("daemon", "5");
}
