/* fuzz_datalog.c — libFuzzer target for the data.log reader: any bytes must
 * parse or be reported and skipped, never crash. The input goes through a
 * memfd so the reader's real file path (pread in chunks) is what is fuzzed. */
#include "kb/kb.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("data.log", 0);
    if (fd < 0) return 0;
    if (write(fd, data, size) != (ssize_t)size) { close(fd); return 0; }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    hx_set_log_level(0);
    kb_log log = {0};
    hx_error e;
    if (kb_log_read(&log, path, &e) == HX_OK) {
        for (size_t i = 0; i < log.n; i++) {
            char *t = kb_entry_text(&log.e[i]);
            free(t);
        }
        (void)kb_log_live(&log);
    }
    kb_log_free(&log);
    close(fd);
    return 0;
}
