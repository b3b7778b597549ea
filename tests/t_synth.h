/* t_synth.h — a synthetic model for tests of the public API, made by running
 * `$HX_BIN synth` (ctest sets HX_BIN), so the test needs no internals. */
#pragma once
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* False when there is no helix-bg to run or it fails. extra: more synth
 * flags ("" for none). */
static inline bool t_synth(const char *out, const char *preset, const char *type, const char *extra) {
    const char *bin = getenv("HX_BIN");
    if (!bin || access(bin, X_OK)) return false;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s synth --preset %s --type %s %s -o %s -t 2 > /dev/null 2>&1", bin, preset, type, extra, out);
    return system(cmd) == 0;
}
