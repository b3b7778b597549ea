/* fuzz_cache.c — libFuzzer target for the embedding-cache reader: any bytes
 * must load as a valid cache (increasing offsets, finite unit vectors) or be
 * discarded with a warning, never crash. The reader refuses links (so not a
 * /proc/self/fd path) and non-regular files: the input goes to a real file in
 * a private temp directory. */
#include "kb/kb.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char g_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_path[0]) {
        char dir[] = "/tmp/fuzz_cache_XXXXXX";
        if (!mkdtemp(dir)) return 0;
        snprintf(g_path, sizeof g_path, "%s/embeddings.bin", dir);
    }
    int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return 0;
    if (write(fd, data, size) != (ssize_t)size) { close(fd); return 0; }
    close(fd);
    hx_set_log_level(0);
    kb_embedder *em = kb_lexical_new();
    kb_cache c;
    kb_cache_load(&c, g_path, em);
    for (size_t i = 0; i < c.n; i++) {
        double s2 = 0;
        for (int k = 0; k < c.dim; k++) s2 += (double)c.vec[i * (size_t)c.dim + k] * c.vec[i * (size_t)c.dim + k];
        if (!(s2 == 0 || fabs(s2 - 1) <= 1e-3) || (i && c.offset[i] <= c.offset[i - 1])) __builtin_trap();
    }
    kb_cache_free(&c);
    em->free(em);
    return 0;
}
