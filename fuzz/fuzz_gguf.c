/* fuzz_gguf.c — libFuzzer target for the GGUF reader.
 *
 * Parses the input with hx_gguf_open_memory (the same code as the mmap path),
 * then walks everything a caller may touch: every kv through the getters and
 * the array accessors (nested arrays recursively), every tensor's first and
 * last data byte and its hash lookup. A failed open must leave *out NULL and
 * name the file in the message. libFuzzer hands us an exact-size buffer, so
 * ASan reports any read past the end of the "file".
 */
#include "gguf/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t g_sink;
static volatile double g_fsink; /* doubles stay doubles: casting a negative or huge one to uint64 is UB */

static void walk_value(const hx_gguf_value *v) {
    switch (v->type) {
    case HX_GGUF_STRING:
        if (v->str.len) g_sink += (uint8_t)v->str.ptr[0] + (uint8_t)v->str.ptr[v->str.len - 1];
        break;
    case HX_GGUF_ARRAY:
        if (hx_gguf_vtype_size(v->arr.elem_type)) {
            for (uint64_t i = 0; i < v->arr.count; i++) {
                g_sink += (uint64_t)hx_gguf_arr_i64(v, i);
                g_fsink += hx_gguf_arr_f64(v, i);
            }
        } else {
            for (uint64_t i = 0; i < v->arr.count; i++) {
                if (v->arr.elems[i].type != v->arr.elem_type) __builtin_trap();
                walk_value(&v->arr.elems[i]);
            }
        }
        break;
    default:
        g_sink += v->u64;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    hx_gguf *g = (hx_gguf *)(uintptr_t)1;
    hx_error e = {0};
    if (hx_gguf_open_memory(data, size, "fuzz.gguf", &g, &e) != HX_OK) {
        if (g != NULL || !strstr(e.msg, "fuzz.gguf")) __builtin_trap();
        return 0;
    }
    char buf[256];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const hx_gguf_kv *kv = &g->kv[i];
        walk_value(&kv->value);
        if (kv->key.len >= sizeof buf) continue;
        memcpy(buf, kv->key.ptr, kv->key.len);
        buf[kv->key.len] = 0;
        if (hx_gguf_find_kv(g, buf) != kv) __builtin_trap();
        uint64_t u; int64_t s; double f; bool b; hx_gguf_str str;
        g_sink += hx_gguf_get_u64(g, buf, &u) + hx_gguf_get_i64(g, buf, &s) + hx_gguf_get_f64(g, buf, &f) +
                  hx_gguf_get_bool(g, buf, &b) + hx_gguf_get_str(g, buf, &str) +
                  (hx_gguf_get_arr(g, buf, HX_GGUF_VTYPE_COUNT) != NULL);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        const uint8_t *d = t->data;
        if (d < g->map + g->data_offset || t->n_bytes > g->file_size ||
            d + t->n_bytes > g->map + g->file_size) __builtin_trap();
        if (t->n_bytes) g_sink += d[0] + d[t->n_bytes - 1];
        if (t->name.len >= sizeof buf) continue;
        memcpy(buf, t->name.ptr, t->name.len);
        buf[t->name.len] = 0;
        if (hx_gguf_find_tensor(g, buf) != t) __builtin_trap();
    }
    hx_gguf_close(g);
    return 0;
}
