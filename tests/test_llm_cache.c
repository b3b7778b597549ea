/* test_llm_cache.c — KB-DIR/llm.bin (src/kb/llm_cache.c): round trip, the
 * index under many records and replacements, a foreign fingerprint, and
 * damaged files (every truncation, a flipped byte) give an empty cache. */
#include "kb/llm.h"
#include "core/core.h"
#include "test_util.h"

#include <unistd.h>

int main(void) {
    char dir[64] = "/tmp/hx_llmc_XXXXXX", path[128];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/llm.bin", dir);
    hx_error e;
    kb_llm_cache c = {0};
    char v[64];
    for (int i = 0; i < 5000; i++) {
        snprintf(v, sizeof v, "value %d", i);
        CHECK(kb_llm_cache_put(&c, (uint32_t)(i % 5 + 1), (uint64_t)i * 977, (uint64_t)i ^ 0xabcdef, v, &e) == HX_OK);
    }
    CHECK(kb_llm_cache_put(&c, 2, 977, 1 ^ 0xabcdef, "replaced", &e) == HX_OK);
    CHECK(c.n == 5000);
    CHECK(!strcmp(kb_llm_cache_get(&c, 2, 977, 1 ^ 0xabcdef), "replaced"));
    CHECK(!kb_llm_cache_get(&c, 1, 977, 1 ^ 0xabcdef));   /* other kind */
    CHECK(kb_llm_cache_save(&c, path, "model-a|prompts:1", &e) == HX_OK);
    kb_llm_cache r;
    kb_llm_cache_load(&r, path, "model-a|prompts:1");
    CHECK(r.n == 5000 && !r.dirty);
    int bad = 0;
    for (int i = 0; i < 5000; i++) {
        snprintf(v, sizeof v, "value %d", i);
        const char *g = kb_llm_cache_get(&r, (uint32_t)(i % 5 + 1), (uint64_t)i * 977, (uint64_t)i ^ 0xabcdef);
        if (!g || strcmp(g, i == 1 ? "replaced" : v)) bad++;
    }
    CHECK(bad == 0);
    kb_llm_cache_free(&r);
    /* another model: dropped */
    kb_llm_cache_load(&r, path, "model-b|prompts:1");
    CHECK(r.n == 0);
    kb_llm_cache_free(&r);
    /* damage: truncations and a flipped byte */
    char *buf;
    size_t n;
    CHECK(hx_read_file(path, &buf, &n, &e) == HX_OK);
    hx_set_log_level(0);
    size_t cuts[] = {0, 3, 11, 20, n / 2, n - 9, n - 1};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        FILE *f = fopen(path, "wb");
        fwrite(buf, 1, cuts[k], f);
        fclose(f);
        kb_llm_cache_load(&r, path, "model-a|prompts:1");
        CHECKF(r.n == 0, "cut at %zu", cuts[k]);
        kb_llm_cache_free(&r);
    }
    buf[n / 3] ^= 0x40;
    FILE *f = fopen(path, "wb");
    fwrite(buf, 1, n, f);
    fclose(f);
    kb_llm_cache_load(&r, path, "model-a|prompts:1");
    CHECK(r.n == 0);
    kb_llm_cache_free(&r);
    hx_set_log_level(1);
    free(buf);
    kb_llm_cache_free(&c);
    unlink(path);
    rmdir(dir);
    printf("llm cache: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
