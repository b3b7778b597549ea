/* fuzz_cache.c — libFuzzer target for the embedding-cache reader: any bytes
 * must load as a valid cache or be discarded with a warning, never crash. */
#include "kb/kb.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("embeddings.bin", 0);
    if (fd < 0) return 0;
    if (write(fd, data, size) != (ssize_t)size) { close(fd); return 0; }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    hx_set_log_level(0);
    kb_embedder *em = kb_lexical_new();
    kb_cache c;
    kb_cache_load(&c, path, em);
    double s = 0;
    for (size_t i = 0; i < c.n * (size_t)c.dim; i++) s += c.vec[i]; /* touch every loaded value */
    (void)s;
    kb_cache_free(&c);
    em->free(em);
    close(fd);
    return 0;
}
