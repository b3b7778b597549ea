/* cmd_load_model.c — helix-bg load-model FILE [--json]: GGUF metadata (long
 * arrays summarized), tensor inventory and the derived model config
 * (hx_dev_gguf_describe, helix_dev.h). */
#include "cli.h"
#include "helix_dev.h"

#include <stdio.h>

int cmd_load_model(int argc, char **argv) {
    const char *path = NULL;
    bool json = false, prefault = false;
    const cli_opt opts[] = {
        {CLI_POS, "FILE.gguf", &path, NULL, "the file to describe", 0, 0, NULL},
        {CLI_BOOL, "--json", &json, NULL, "one JSON object instead of the text report", 0, 0, NULL},
        {CLI_BOOL, "--prefault", &prefault, NULL, "read every page of the file while opening it", 0, 0, NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int pr = cli_parse("load-model", "load-model FILE.gguf [--json] [--prefault]",
                       "Prints GGUF metadata (long arrays summarized), the tensor inventory (name, type, shape,\n"
                       "bytes) and the derived model config.\n",
                       opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!path) return cli_usage_error("load-model", "FILE.gguf is required (see helix-bg load-model --help)");
    hx_error e = {0};
    char *text = NULL;
    if (hx_dev_gguf_describe(path, json, prefault, &text, &e)) {
        fprintf(stderr, "helix-bg load-model: %s\n", e.msg);
        return 1;
    }
    fputs(text, stdout);
    hx_free(text);
    return 0;
}
