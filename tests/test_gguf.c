/* test_gguf.c — GGUF reader and writer.
 *
 *  1. round trip: the writer emits every value type (nested arrays, arrays of
 *     strings, empty ones) and tensors of several types; our reader must read
 *     back exactly what went in, and copying every kv + tensor into a second
 *     writer must reproduce the file byte for byte;
 *  2. every GGUF under ../shared opens, with plausible tensors, and
 *     stories260K.gguf shows the facts ../shared/README.md states;
 *  3. hostile input: hand-made files break one rule each and must fail with
 *     the specific message; every truncation and a few thousand seeded
 *     mutations of real headers must open or fail with the file name
 *     (exact-size buffers, so ASan sees any over-read);
 *  4. regression inputs in tests/data/gguf/ (fuzzer finds) must fail cleanly.
 *
 * Extra modes used by tests/gguf_py_check.sh:
 *   test_gguf --write-sample OUT.gguf   write the round-trip sample file
 *   test_gguf --dump FILE.gguf          print kvs and tensors, one per line
 */
#include "core/core.h"
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "test_util.h"

#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <unistd.h>

static char g_tmpdir[256];

/* ------------------------------------------------------------------------ */
/* Walking an open file (touches every byte a caller could reach).          */

static uint64_t walk_value(const hx_gguf_value *v, int depth) {
    uint64_t h = (uint64_t)v->type;
    if (v->type == HX_GGUF_STRING) {
        for (uint64_t i = 0; i < v->str.len; i++) h = h * 31 + (uint8_t)v->str.ptr[i];
    } else if (v->type == HX_GGUF_ARRAY) {
        if (hx_gguf_vtype_size(v->arr.elem_type)) {
            for (uint64_t i = 0; i < v->arr.count; i++) h += (uint64_t)hx_gguf_arr_i64(v, i);
        } else {
            for (uint64_t i = 0; i < v->arr.count; i++) {
                if (v->arr.elems[i].type != v->arr.elem_type) h += 1000003;
                h += walk_value(&v->arr.elems[i], depth + 1);
            }
        }
    } else {
        h += v->u64;
    }
    return h;
}

static uint64_t walk(const hx_gguf *g) {
    uint64_t h = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const hx_gguf_kv *kv = &g->kv[i];
        h += kv->key.len + walk_value(&kv->value, 0);
        char key[256];
        if (kv->key.len < sizeof key) {
            memcpy(key, kv->key.ptr, kv->key.len);
            key[kv->key.len] = 0;
            CHECK(hx_gguf_find_kv(g, key) == kv);
        }
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        const uint8_t *d = t->data;
        if (t->n_bytes) h += d[0] + d[t->n_bytes - 1];
        CHECK((const uint8_t *)t->data >= g->map + g->data_offset);
        CHECK((const uint8_t *)t->data + t->n_bytes <= g->map + g->file_size);
        char name[256];
        if (t->name.len < sizeof name) {
            memcpy(name, t->name.ptr, t->name.len);
            name[t->name.len] = 0;
            CHECK(hx_gguf_find_tensor(g, name) == t);
        }
    }
    return h;
}

/* Open an exact-size copy of buf[0..n) from memory; must open or fail naming `name`. */
static int try_open_copy(const uint8_t *buf, size_t n, const char *name, hx_error *e) {
    uint8_t *c = malloc(n ? n : 1);
    memcpy(c, buf, n);
    hx_gguf *g = NULL;
    hx_status s = hx_gguf_open_memory(c, n, name, &g, e);
    if (s == HX_OK) {
        walk(g);
        hx_gguf_close(g);
    } else {
        CHECKF(g == NULL, "g not NULL on failure");
        CHECKF(strstr(e->msg, name) != NULL, "message lacks file name: %s", e->msg);
    }
    free(c);
    return s == HX_OK;
}

/* ------------------------------------------------------------------------ */
/* 1. Round trip                                                            */

static const int64_t k_ne_f32[2] = {8, 3};
static const int64_t k_ne_q8[2] = {64, 2};
static const int64_t k_ne_f16[1] = {5};
static const int64_t k_ne_q4k[3] = {256, 1, 2};

typedef struct sample_data {
    float f32[24];
    uint8_t q8[2 * 2 * 34];
    uint16_t f16[5];
    uint8_t q4k[2 * 144];
} sample_data;

static void sample_fill(sample_data *d) {
    for (int i = 0; i < 24; i++) d->f32[i] = (float)i * 0.5f - 3.0f;
    for (size_t i = 0; i < sizeof d->q8; i++) d->q8[i] = (uint8_t)(i * 7 + 1);
    for (int i = 0; i < 5; i++) d->f16[i] = hx_fp32_to_fp16((float)i + 0.25f);
    for (size_t i = 0; i < sizeof d->q4k; i++) d->q4k[i] = (uint8_t)(i * 13 + 5);
}

/* Build the writer with every value type; returns NULL on failure. */
static hx_gguf_writer *sample_writer(uint32_t alignment, const sample_data *d) {
    hx_gguf_writer *w = hx_gguf_writer_new(alignment);
    CHECK(!hx_gguf_writer_set_str(w, "general.architecture", "llama"));
    CHECK(!hx_gguf_writer_set_str(w, "general.name", ""));
    hx_gguf_value v;
    v = (hx_gguf_value){.type = HX_GGUF_U8, .u64 = 200};        CHECK(!hx_gguf_writer_set_value(w, "t.u8", &v));
    v = (hx_gguf_value){.type = HX_GGUF_I8, .i64 = -100};       CHECK(!hx_gguf_writer_set_value(w, "t.i8", &v));
    v = (hx_gguf_value){.type = HX_GGUF_U16, .u64 = 60000};     CHECK(!hx_gguf_writer_set_value(w, "t.u16", &v));
    v = (hx_gguf_value){.type = HX_GGUF_I16, .i64 = -30000};    CHECK(!hx_gguf_writer_set_value(w, "t.i16", &v));
    CHECK(!hx_gguf_writer_set_u32(w, "t.u32", 4000000000u));
    CHECK(!hx_gguf_writer_set_i32(w, "t.i32", -2000000000));
    CHECK(!hx_gguf_writer_set_f32(w, "t.f32", 1.5f));
    CHECK(!hx_gguf_writer_set_bool(w, "t.bool", true));
    CHECK(!hx_gguf_writer_set_u64(w, "t.u64", UINT64_MAX - 1));
    v = (hx_gguf_value){.type = HX_GGUF_I64, .i64 = INT64_MIN}; CHECK(!hx_gguf_writer_set_value(w, "t.i64", &v));
    v = (hx_gguf_value){.type = HX_GGUF_F64, .f64 = -0.1};      CHECK(!hx_gguf_writer_set_value(w, "t.f64", &v));
    /* replacing keeps one entry */
    CHECK(!hx_gguf_writer_set_u32(w, "t.replaced", 1));
    CHECK(!hx_gguf_writer_set_u32(w, "t.replaced", 2));
    /* range checks */
    v = (hx_gguf_value){.type = HX_GGUF_U8, .u64 = 256};
    hx_gguf_writer *w2 = hx_gguf_writer_new(0);
    CHECK(hx_gguf_writer_set_value(w2, "bad", &v) == HX_ERR_RANGE);
    hx_gguf_writer_free(w2);

    /* arrays of every scalar type */
    const uint8_t a_u8[3] = {1, 2, 255};
    const int8_t a_i8[3] = {-128, 0, 127};
    const uint16_t a_u16[2] = {0, 65535};
    const int16_t a_i16[2] = {-32768, 32767};
    const uint32_t a_u32[4] = {0, 1, 2, 4294967295u};
    const int32_t a_i32[3] = {-5, 0, 5};
    const float a_f32[3] = {0.5f, -2.0f, 1e30f};
    const uint8_t a_bool[3] = {1, 0, 1};
    const uint64_t a_u64[2] = {0, UINT64_MAX};
    const int64_t a_i64[2] = {INT64_MIN, INT64_MAX};
    const double a_f64[2] = {3.25, -1e300};
    CHECK(!hx_gguf_writer_set_arr(w, "a.u8", HX_GGUF_U8, a_u8, 3));
    CHECK(!hx_gguf_writer_set_arr(w, "a.i8", HX_GGUF_I8, a_i8, 3));
    CHECK(!hx_gguf_writer_set_arr(w, "a.u16", HX_GGUF_U16, a_u16, 2));
    CHECK(!hx_gguf_writer_set_arr(w, "a.i16", HX_GGUF_I16, a_i16, 2));
    CHECK(!hx_gguf_writer_set_arr(w, "a.u32", HX_GGUF_U32, a_u32, 4));
    CHECK(!hx_gguf_writer_set_arr(w, "a.i32", HX_GGUF_I32, a_i32, 3));
    CHECK(!hx_gguf_writer_set_arr(w, "a.f32", HX_GGUF_F32, a_f32, 3));
    CHECK(!hx_gguf_writer_set_arr(w, "a.bool", HX_GGUF_BOOL, a_bool, 3));
    CHECK(!hx_gguf_writer_set_arr(w, "a.u64", HX_GGUF_U64, a_u64, 2));
    CHECK(!hx_gguf_writer_set_arr(w, "a.i64", HX_GGUF_I64, a_i64, 2));
    CHECK(!hx_gguf_writer_set_arr(w, "a.f64", HX_GGUF_F64, a_f64, 2));
    CHECK(!hx_gguf_writer_set_arr(w, "a.empty", HX_GGUF_F32, NULL, 0));
    const char *strs[4] = {"hello", "", "w\xc3\xb6rld", "x\0y"};
    const uint64_t lens[4] = {5, 0, 6, 3};
    CHECK(!hx_gguf_writer_set_arr_str(w, "a.str", strs, lens, 4));
    CHECK(!hx_gguf_writer_set_arr_str(w, "a.str0", strs, NULL, 3));
    CHECK(!hx_gguf_writer_set_arr_str(w, "a.str_empty", NULL, NULL, 0));

    /* nested: [[ "a", "bc" ], []] of strings, and [[[1,2],[3]],[[]]] of i32 */
    hx_gguf_value s_el[2] = {{.type = HX_GGUF_STRING, .str = {"a", 1}}, {.type = HX_GGUF_STRING, .str = {"bc", 2}}};
    hx_gguf_value inner[2] = {{.type = HX_GGUF_ARRAY}, {.type = HX_GGUF_ARRAY}};
    inner[0].arr.elem_type = HX_GGUF_STRING; inner[0].arr.count = 2; inner[0].arr.elems = s_el;
    inner[1].arr.elem_type = HX_GGUF_STRING; inner[1].arr.count = 0;
    hx_gguf_value outer = {.type = HX_GGUF_ARRAY};
    outer.arr.elem_type = HX_GGUF_ARRAY; outer.arr.count = 2; outer.arr.elems = inner;
    CHECK(!hx_gguf_writer_set_value(w, "n.strs", &outer));
    static const int32_t i12[2] = {1, 2}, i3[1] = {3};
    hx_gguf_value l3[3] = {{.type = HX_GGUF_ARRAY}, {.type = HX_GGUF_ARRAY}, {.type = HX_GGUF_ARRAY}};
    l3[0].arr.elem_type = HX_GGUF_I32; l3[0].arr.count = 2; l3[0].arr.data = i12;
    l3[1].arr.elem_type = HX_GGUF_I32; l3[1].arr.count = 1; l3[1].arr.data = i3;
    l3[2].arr.elem_type = HX_GGUF_I32; l3[2].arr.count = 0;
    hx_gguf_value l2[2] = {{.type = HX_GGUF_ARRAY}, {.type = HX_GGUF_ARRAY}};
    l2[0].arr.elem_type = HX_GGUF_ARRAY; l2[0].arr.count = 2; l2[0].arr.elems = &l3[0];
    l2[1].arr.elem_type = HX_GGUF_ARRAY; l2[1].arr.count = 1; l2[1].arr.elems = &l3[2];
    hx_gguf_value l1 = {.type = HX_GGUF_ARRAY};
    l1.arr.elem_type = HX_GGUF_ARRAY; l1.arr.count = 2; l1.arr.elems = l2;
    CHECK(!hx_gguf_writer_set_value(w, "n.i32", &l1));

    CHECK(!hx_gguf_writer_add_tensor(w, "w.f32", HX_TYPE_F32, 2, k_ne_f32, d->f32));
    CHECK(!hx_gguf_writer_add_tensor(w, "w.q8", HX_TYPE_Q8_0, 2, k_ne_q8, d->q8));
    CHECK(!hx_gguf_writer_add_tensor(w, "w.f16", HX_TYPE_F16, 1, k_ne_f16, d->f16));
    CHECK(!hx_gguf_writer_add_tensor(w, "w.q4k", HX_TYPE_Q4_K, 3, k_ne_q4k, d->q4k));
    return w;
}

static void check_sample(const hx_gguf *g, uint64_t alignment, const sample_data *d) {
    CHECK(g->version == 3);
    CHECK(g->alignment == alignment);
    CHECK(g->data_offset % alignment == 0);
    hx_gguf_str s;
    CHECK(hx_gguf_get_str(g, "general.architecture", &s) && hx_gguf_str_eq(s, "llama"));
    CHECK(hx_gguf_get_str(g, "general.name", &s) && s.len == 0);
    uint64_t u; int64_t i; double f; bool b;
    CHECK(hx_gguf_get_u64(g, "t.u8", &u) && u == 200);
    CHECK(hx_gguf_get_i64(g, "t.i8", &i) && i == -100);
    CHECK(!hx_gguf_get_u64(g, "t.i8", &u));
    CHECK(hx_gguf_get_u64(g, "t.u16", &u) && u == 60000);
    CHECK(hx_gguf_get_i64(g, "t.i16", &i) && i == -30000);
    CHECK(hx_gguf_get_u64(g, "t.u32", &u) && u == 4000000000u);
    CHECK(hx_gguf_get_i64(g, "t.u32", &i) && i == 4000000000);
    CHECK(hx_gguf_get_i64(g, "t.i32", &i) && i == -2000000000);
    CHECK(hx_gguf_get_f64(g, "t.f32", &f) && f == 1.5);
    CHECK(hx_gguf_get_f64(g, "t.i32", &f) && f == -2000000000.0);
    CHECK(hx_gguf_get_bool(g, "t.bool", &b) && b);
    CHECK(!hx_gguf_get_bool(g, "t.u8", &b));
    CHECK(hx_gguf_get_u64(g, "t.u64", &u) && u == UINT64_MAX - 1);
    CHECK(!hx_gguf_get_i64(g, "t.u64", &i));
    CHECK(hx_gguf_get_i64(g, "t.i64", &i) && i == INT64_MIN);
    CHECK(hx_gguf_get_f64(g, "t.f64", &f) && f == -0.1);
    CHECK(!hx_gguf_get_str(g, "t.f64", &s));
    CHECK(hx_gguf_get_u64(g, "t.replaced", &u) && u == 2);
    CHECK(!hx_gguf_find_kv(g, "absent"));
    CHECK(hx_gguf_find_kv(g, "t.u8")->value.type == HX_GGUF_U8);
    CHECK(hx_gguf_find_kv(g, "t.i16")->value.type == HX_GGUF_I16);

    const hx_gguf_value *a;
    CHECK((a = hx_gguf_get_arr(g, "a.u8", HX_GGUF_U8)) && a->arr.count == 3 && hx_gguf_arr_i64(a, 2) == 255);
    CHECK(!hx_gguf_get_arr(g, "a.u8", HX_GGUF_I8));
    CHECK(hx_gguf_get_arr(g, "a.u8", HX_GGUF_VTYPE_COUNT) == a);
    CHECK((a = hx_gguf_get_arr(g, "a.i8", HX_GGUF_I8)) && hx_gguf_arr_i64(a, 0) == -128 && hx_gguf_arr_i64(a, 2) == 127);
    CHECK((a = hx_gguf_get_arr(g, "a.u16", HX_GGUF_U16)) && hx_gguf_arr_i64(a, 1) == 65535);
    CHECK((a = hx_gguf_get_arr(g, "a.i16", HX_GGUF_I16)) && hx_gguf_arr_i64(a, 0) == -32768);
    CHECK((a = hx_gguf_get_arr(g, "a.u32", HX_GGUF_U32)) && a->arr.count == 4 && hx_gguf_arr_i64(a, 3) == 4294967295);
    CHECK((a = hx_gguf_get_arr(g, "a.i32", HX_GGUF_I32)) && hx_gguf_arr_i64(a, 0) == -5);
    CHECK((a = hx_gguf_get_arr(g, "a.f32", HX_GGUF_F32)) && hx_gguf_arr_f64(a, 1) == -2.0 && hx_gguf_arr_f64(a, 2) == (double)1e30f);
    CHECK((a = hx_gguf_get_arr(g, "a.bool", HX_GGUF_BOOL)) && hx_gguf_arr_i64(a, 0) == 1 && hx_gguf_arr_i64(a, 1) == 0);
    CHECK((a = hx_gguf_get_arr(g, "a.u64", HX_GGUF_U64)) && hx_gguf_arr_i64(a, 1) == INT64_MAX /* saturated */ &&
          hx_gguf_arr_f64(a, 1) == (double)UINT64_MAX);
    CHECK((a = hx_gguf_get_arr(g, "a.i64", HX_GGUF_I64)) && hx_gguf_arr_i64(a, 0) == INT64_MIN && hx_gguf_arr_i64(a, 1) == INT64_MAX);
    CHECK((a = hx_gguf_get_arr(g, "a.f64", HX_GGUF_F64)) && hx_gguf_arr_f64(a, 0) == 3.25 && hx_gguf_arr_f64(a, 1) == -1e300);
    CHECK(hx_gguf_arr_f64(a, 2) == 0.0); /* out of range */
    CHECK((a = hx_gguf_get_arr(g, "a.empty", HX_GGUF_F32)) && a->arr.count == 0);
    CHECK((a = hx_gguf_get_arr(g, "a.str", HX_GGUF_STRING)) && a->arr.count == 4);
    if (a && a->arr.count == 4) {
        CHECK(hx_gguf_str_eq(a->arr.elems[0].str, "hello"));
        CHECK(a->arr.elems[1].str.len == 0);
        CHECK(hx_gguf_str_eq(a->arr.elems[2].str, "w\xc3\xb6rld"));
        CHECK(a->arr.elems[3].str.len == 3 && !memcmp(a->arr.elems[3].str.ptr, "x\0y", 3));
    }
    CHECK((a = hx_gguf_get_arr(g, "a.str0", HX_GGUF_STRING)) && a->arr.count == 3);
    CHECK((a = hx_gguf_get_arr(g, "a.str_empty", HX_GGUF_STRING)) && a->arr.count == 0);
    CHECK((a = hx_gguf_get_arr(g, "n.strs", HX_GGUF_ARRAY)) && a->arr.count == 2);
    if (a && a->arr.count == 2) {
        const hx_gguf_value *x = &a->arr.elems[0];
        CHECK(x->type == HX_GGUF_ARRAY && x->arr.elem_type == HX_GGUF_STRING && x->arr.count == 2);
        if (x->arr.count == 2) CHECK(hx_gguf_str_eq(x->arr.elems[1].str, "bc"));
        CHECK(a->arr.elems[1].arr.count == 0 && a->arr.elems[1].arr.elem_type == HX_GGUF_STRING);
    }
    CHECK((a = hx_gguf_get_arr(g, "n.i32", HX_GGUF_ARRAY)) && a->arr.count == 2);
    if (a && a->arr.count == 2 && a->arr.elems[0].arr.count == 2) {
        const hx_gguf_value *x = &a->arr.elems[0].arr.elems[0];
        CHECK(x->arr.elem_type == HX_GGUF_I32 && x->arr.count == 2 && hx_gguf_arr_i64(x, 1) == 2);
        CHECK(hx_gguf_arr_i64(&a->arr.elems[0].arr.elems[1], 0) == 3);
        CHECK(a->arr.elems[1].arr.count == 1 && a->arr.elems[1].arr.elems[0].arr.count == 0);
    }

    CHECK(g->n_tensors == 4);
    const hx_gguf_tensor *t;
    CHECK((t = hx_gguf_find_tensor(g, "w.f32")) && t->type == HX_TYPE_F32 && t->n_dims == 2 &&
          t->ne[0] == 8 && t->ne[1] == 3 && t->ne[2] == 1 && t->n_bytes == sizeof d->f32 &&
          !memcmp(t->data, d->f32, sizeof d->f32));
    CHECK((t = hx_gguf_find_tensor(g, "w.q8")) && t->type == HX_TYPE_Q8_0 && t->n_bytes == sizeof d->q8 &&
          !memcmp(t->data, d->q8, sizeof d->q8));
    CHECK((t = hx_gguf_find_tensor(g, "w.f16")) && t->n_dims == 1 && t->ne[0] == 5 && t->n_bytes == 10 &&
          !memcmp(t->data, d->f16, 10));
    CHECK((t = hx_gguf_find_tensor(g, "w.q4k")) && t->n_dims == 3 && t->ne[2] == 2 && t->n_bytes == sizeof d->q4k &&
          !memcmp(t->data, d->q4k, sizeof d->q4k));
    for (uint64_t k = 0; k < g->n_tensors; k++)
        CHECK(g->tensors[k].offset % alignment == 0 && (uintptr_t)((const uint8_t *)g->tensors[k].data - g->map) % alignment == 0);
    CHECK(!hx_gguf_find_tensor(g, "w"));
}

static bool files_equal(const char *a, const char *b) {
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    hx_error e;
    bool eq = !hx_read_file(a, &x, &nx, &e) && !hx_read_file(b, &y, &ny, &e) && nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return eq;
}

static void test_roundtrip(void) {
    sample_data d;
    sample_fill(&d);
    const uint32_t aligns[2] = {0, 64};
    for (int k = 0; k < 2; k++) {
        char p1[320], p2[320];
        snprintf(p1, sizeof p1, "%s/rt%d.gguf", g_tmpdir, k);
        snprintf(p2, sizeof p2, "%s/rt%d-copy.gguf", g_tmpdir, k);
        hx_gguf_writer *w = sample_writer(aligns[k], &d);
        hx_error e = {0};
        CHECKF(!hx_gguf_writer_write(w, p1, &e), "%s", e.msg);
        hx_gguf_writer_free(w);
        hx_gguf *g = NULL;
        hx_gguf_open_opts o = {.prefault = true};
        CHECKF(!hx_gguf_open(p1, &o, &g, &e), "%s", e.msg);
        if (!g) continue;
        check_sample(g, aligns[k] ? aligns[k] : 32, &d);
        walk(g);
        /* copy every kv and tensor: the result must be identical */
        hx_gguf_writer *w2 = hx_gguf_writer_new(0);
        for (uint64_t i = 0; i < g->n_kv; i++) CHECK(!hx_gguf_writer_copy_kv(w2, &g->kv[i]));
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const hx_gguf_tensor *t = &g->tensors[i];
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            CHECK(!hx_gguf_writer_add_tensor(w2, name, t->type, t->n_dims, t->ne, t->data));
        }
        CHECKF(!hx_gguf_writer_write(w2, p2, &e), "%s", e.msg);
        hx_gguf_writer_free(w2);
        CHECKF(files_equal(p1, p2), "copy of %s differs", p1);
        hx_gguf_close(g);
        unlink(p1);
        unlink(p2);
    }

    /* a 0-byte tensor (a 0 dim, legal in ggml) with NULL data, between two others */
    {
        char p0[320];
        snprintf(p0, sizeof p0, "%s/zero.gguf", g_tmpdir);
        hx_gguf_writer *w = hx_gguf_writer_new(0);
        const int64_t ne0[2] = {0, 4};
        CHECK(!hx_gguf_writer_add_tensor(w, "a", HX_TYPE_F16, 1, k_ne_f16, d.f16));
        CHECK(!hx_gguf_writer_add_tensor(w, "z", HX_TYPE_F32, 2, ne0, NULL));
        CHECK(!hx_gguf_writer_add_tensor(w, "b", HX_TYPE_F32, 2, k_ne_f32, d.f32));
        hx_error e = {0};
        CHECKF(!hx_gguf_writer_write(w, p0, &e), "%s", e.msg);
        hx_gguf_writer_free(w);
        hx_gguf *g = NULL;
        CHECKF(!hx_gguf_open(p0, NULL, &g, &e), "%s", e.msg);
        const hx_gguf_tensor *t;
        CHECK(g && (t = hx_gguf_find_tensor(g, "z")) && t->n_bytes == 0 && t->ne[0] == 0 && t->ne[1] == 4);
        CHECK(g && (t = hx_gguf_find_tensor(g, "b")) && !memcmp(t->data, d.f32, sizeof d.f32));
        hx_gguf_close(g);
        unlink(p0);
    }

    /* writer argument errors are remembered and reported by _write */
    hx_gguf_writer *w = hx_gguf_writer_new(0);
    const int64_t ne_bad[1] = {33};
    CHECK(hx_gguf_writer_add_tensor(w, "x", HX_TYPE_Q8_0, 1, ne_bad, d.q8) == HX_ERR_ARG);
    CHECK(hx_gguf_writer_add_tensor(w, "y", 77, 1, k_ne_f16, d.f16) == HX_ERR_ARG);
    hx_error e = {0};
    char p[320];
    snprintf(p, sizeof p, "%s/bad.gguf", g_tmpdir);
    CHECK(hx_gguf_writer_write(w, p, &e) == HX_ERR_ARG && strstr(e.msg, "block size"));
    CHECK(access(p, F_OK) != 0);
    hx_gguf_writer_free(w);
    w = hx_gguf_writer_new(0);
    CHECK(!hx_gguf_writer_add_tensor(w, "x", HX_TYPE_F16, 1, k_ne_f16, d.f16));
    CHECK(hx_gguf_writer_add_tensor(w, "x", HX_TYPE_F16, 1, k_ne_f16, d.f16) == HX_ERR_ARG);
    CHECK(hx_gguf_writer_set_str(w, "", "v") == HX_ERR_ARG);
    hx_gguf_writer_free(w);
    w = hx_gguf_writer_new(0);
    CHECK(!hx_gguf_writer_set_u32(w, "general.alignment", 48));
    CHECK(hx_gguf_writer_write(w, p, &e) == HX_ERR_ARG && strstr(e.msg, "power of two"));
    hx_gguf_writer_free(w);
    /* unwritable destination: IO error, nothing left behind */
    w = hx_gguf_writer_new(0);
    CHECK(hx_gguf_writer_write(w, "/nonexistent-dir/x.gguf", &e) == HX_ERR_IO && strstr(e.msg, "/nonexistent-dir"));
    hx_gguf_writer_free(w);
}

/* ------------------------------------------------------------------------ */
/* 2. Real files                                                            */

static int g_n_files;

static void check_real(const char *path) {
    hx_gguf *g = NULL;
    hx_error e = {0};
    g_n_files++;
    hx_status s = hx_gguf_open(path, NULL, &g, &e);
    CHECKF(s == HX_OK, "%s", e.msg);
    if (s) return;
    CHECK(g->version == 3 || g->version == 2);
    CHECKF(hx_gguf_find_kv(g, "general.architecture") != NULL, "%s: no general.architecture", path);
    bool vocab_only = strstr(path, "vocab-gguf") != NULL;
    CHECKF(vocab_only ? g->n_tensors == 0 : g->n_tensors >= 5, "%s: %" PRIu64 " tensors", path, g->n_tensors);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        CHECK(hx_type_get(t->type) != NULL);
        CHECK(t->n_dims >= 1 && t->n_dims <= 4);
        uint64_t nb = hx_row_size(t->type, t->ne[0]);
        for (int d = 1; d < 4; d++) nb *= (uint64_t)t->ne[d];
        CHECK(nb == t->n_bytes && nb > 0);
        CHECK(t->ne[0] >= 1 && t->ne[0] <= 1 << 20);
    }
    /* every model tensor is in a file llama.cpp wrote: back to back, padded */
    for (uint64_t i = 0; i + 1 < g->n_tensors; i++) {
        uint64_t end = g->tensors[i].offset + g->tensors[i].n_bytes;
        CHECK(g->tensors[i + 1].offset == (end + g->alignment - 1) / g->alignment * g->alignment);
    }
    const hx_gguf_value *tok = hx_gguf_get_arr(g, "tokenizer.ggml.tokens", HX_GGUF_STRING);
    CHECKF(tok && tok->arr.count >= 256, "%s: tokenizer.ggml.tokens", path);
    walk(g);
    hx_gguf_close(g);
}

static int nftw_cb(const char *path, const struct stat *st, int type, struct FTW *f) {
    (void)st; (void)f;
    size_t n = strlen(path);
    if (type == FTW_F && n > 5 && !strcmp(path + n - 5, ".gguf")) check_real(path);
    return 0;
}

static void test_stories(const char *shared) {
    char p[512];
    snprintf(p, sizeof p, "%s/models/stories260K.gguf", shared);
    hx_gguf *g = NULL;
    hx_error e = {0};
    hx_gguf_open_opts o = {.prefault = true};
    CHECKF(!hx_gguf_open(p, &o, &g, &e), "%s", e.msg);
    if (!g) return;
    hx_gguf_str s;
    CHECK(hx_gguf_get_str(g, "general.architecture", &s) && hx_gguf_str_eq(s, "llama"));
    uint64_t u;
    CHECK(hx_gguf_get_u64(g, "llama.block_count", &u) && u == 5);
    CHECK(hx_gguf_get_u64(g, "llama.embedding_length", &u) && u == 64);
    CHECK(hx_gguf_get_u64(g, "llama.attention.head_count", &u) && u == 8);
    CHECK(hx_gguf_get_u64(g, "llama.attention.head_count_kv", &u) && u == 4);
    const hx_gguf_value *a = hx_gguf_get_arr(g, "tokenizer.ggml.tokens", HX_GGUF_STRING);
    CHECK(a && a->arr.count == 512);
    a = hx_gguf_get_arr(g, "tokenizer.ggml.scores", HX_GGUF_F32);
    CHECK(a && a->arr.count == 512);
    const hx_gguf_tensor *t = hx_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == HX_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512);
    t = hx_gguf_find_tensor(g, "blk.4.attn_k.weight");
    CHECK(t && t->ne[0] == 64 && t->ne[1] == 32); /* 4 kv heads x head dim 8 */
    t = hx_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    CHECK(t && t->ne[0] == 172 && t->ne[1] == 64);
    CHECK(!hx_gguf_find_tensor(g, "blk.5.attn_q.weight"));
    /* data is the file's own bytes at data_offset + offset */
    if (t) CHECK((const uint8_t *)t->data == g->map + g->data_offset + t->offset);
    hx_gguf_close(g);

    snprintf(p, sizeof p, "%s/models/stories260K-Q8_0.gguf", shared);
    CHECKF(!hx_gguf_open(p, NULL, &g, &e), "%s", e.msg);
    if (!g) return;
    t = hx_gguf_find_tensor(g, "blk.0.attn_q.weight");
    CHECK(t && t->type == HX_TYPE_Q8_0 && t->n_bytes == 64 / 32 * 34 * 64);
    t = hx_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    CHECK(t && t->type == HX_TYPE_F16);
    hx_gguf_close(g);
}

/* Copying every kv and tensor of a file llama.cpp wrote must give back the
 * same bytes: our writer lays files out exactly as ggml's gguf writer does. */
static void test_copy_real(const char *shared, const char *rel) {
    char p[512], out[320];
    snprintf(p, sizeof p, "%s/%s", shared, rel);
    snprintf(out, sizeof out, "%s/copy.gguf", g_tmpdir);
    hx_gguf *g = NULL;
    hx_error e = {0};
    CHECKF(!hx_gguf_open(p, NULL, &g, &e), "%s", e.msg);
    if (!g) return;
    hx_gguf_writer *w = hx_gguf_writer_new((uint32_t)g->alignment);
    for (uint64_t i = 0; i < g->n_kv; i++) CHECK(!hx_gguf_writer_copy_kv(w, &g->kv[i]));
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        CHECK(!hx_gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data));
    }
    CHECKF(!hx_gguf_writer_write(w, out, &e), "%s", e.msg);
    hx_gguf_writer_free(w);
    CHECKF(files_equal(p, out), "copy of %s is not byte-identical", p);
    unlink(out);
    hx_gguf_close(g);
}

/* ------------------------------------------------------------------------ */
/* 3. Hostile input: hand-made files                                        */

typedef struct bb { uint8_t b[4096]; size_t n; } bb;
static void b_put(bb *b, const void *p, size_t n) { memcpy(b->b + b->n, p, n); b->n += n; }
static void b_u32(bb *b, uint32_t v) { b_put(b, &v, 4); }
static void b_u64(bb *b, uint64_t v) { b_put(b, &v, 8); }
static void b_str(bb *b, const char *s) { b_u64(b, strlen(s)); b_put(b, s, strlen(s)); }
static void b_hdr(bb *b, uint32_t ver, uint64_t nt, uint64_t nkv) { b->n = 0; b_put(b, "GGUF", 4); b_u32(b, ver); b_u64(b, nt); b_u64(b, nkv); }
static void b_kv_u32(bb *b, const char *k, uint32_t v) { b_str(b, k); b_u32(b, HX_GGUF_U32); b_u32(b, v); }
/* one tensor info; dims given */
static void b_tensor(bb *b, const char *name, uint32_t nd, const uint64_t *ne, uint32_t type, uint64_t off) {
    b_str(b, name); b_u32(b, nd);
    for (uint32_t i = 0; i < nd; i++) b_u64(b, ne[i]);
    b_u32(b, type); b_u64(b, off);
}
static void b_pad(bb *b, size_t align, size_t extra) {
    while (b->n % align) b->b[b->n++] = 0;
    memset(b->b + b->n, 0x11, extra); b->n += extra;
}

/* The buffer must fail to open with a message holding the file name, "offset" and `want`. */
static void expect_fail(const bb *b, const char *want, int line) {
    hx_error e = {0};
    uint8_t *c = malloc(b->n ? b->n : 1);
    memcpy(c, b->b, b->n);
    hx_gguf *g = NULL;
    hx_status s = hx_gguf_open_memory(c, b->n, "hostile.gguf", &g, &e);
    t_checks++;
    if (s == HX_OK || !strstr(e.msg, want) || !strstr(e.msg, "hostile.gguf: offset ")) {
        t_failures++;
        fprintf(stderr, "line %d: expected failure with '%s', got status %d: %s\n", line, want, (int)s, s ? e.msg : "(opened)");
    }
    hx_gguf_close(g);
    free(c);
}
#define EXPECT_FAIL(b, want) expect_fail(b, want, __LINE__)

static void expect_ok(const bb *b, int line) {
    hx_error e = {0};
    hx_gguf *g = NULL;
    hx_status s = hx_gguf_open_memory(b->b, b->n, "ok.gguf", &g, &e);
    CHECKF(s == HX_OK, "line %d: %s", line, e.msg);
    hx_gguf_close(g);
}

/* A nested array kv of the given depth (innermost: empty u8 array). */
static void b_nested(bb *b, const char *key, int depth) {
    b_str(b, key);
    b_u32(b, HX_GGUF_ARRAY);
    for (int i = 1; i < depth; i++) { b_u32(b, HX_GGUF_ARRAY); b_u64(b, 1); }
    b_u32(b, HX_GGUF_U8); b_u64(b, 0);
}

static void test_open_errors(void) {
    hx_gguf *g = (hx_gguf *)1;
    hx_error e = {0};
    CHECK(hx_gguf_open("/nonexistent/m.gguf", NULL, &g, &e) == HX_ERR_IO && !g && strstr(e.msg, "/nonexistent/m.gguf"));
    CHECK(hx_gguf_open("/tmp", NULL, &g, &e) == HX_ERR_IO && strstr(e.msg, "not a regular file"));
    char p[320];
    snprintf(p, sizeof p, "%s/short.gguf", g_tmpdir);
    CHECK(!hx_write_file_atomic(p, "GGUF\3\0\0\0", 8, &e));
    CHECK(hx_gguf_open(p, NULL, &g, &e) == HX_ERR_FORMAT && strstr(e.msg, "short.gguf: offset 0") && strstr(e.msg, "8 bytes"));
    unlink(p);
    CHECK(hx_gguf_open_memory(NULL, 0, "empty", &g, &e) == HX_ERR_FORMAT && strstr(e.msg, "empty: offset 0"));
}

static void test_handmade(void) {
    bb *b = calloc(1, sizeof *b);
    const uint64_t ne2[2] = {32, 2}, ne1[1] = {32};
    /* baseline: valid */
    b_hdr(b, 3, 1, 1); b_kv_u32(b, "k", 7); b_tensor(b, "t", 2, ne2, HX_TYPE_F32, 0); b_pad(b, 32, 256);
    expect_ok(b, __LINE__);
    b_hdr(b, 2, 0, 0); expect_ok(b, __LINE__);                     /* v2, empty */
    b_hdr(b, 1, 0, 0); EXPECT_FAIL(b, "unsupported version 1");
    b_hdr(b, 4, 0, 0); EXPECT_FAIL(b, "unsupported version 4");
    b_hdr(b, 3, 0, 0); b->b[0] = 'X'; EXPECT_FAIL(b, "bad magic");
    b_hdr(b, 3, 0, 0); b->n = 20; EXPECT_FAIL(b, "n_kv needs 8 bytes");
    b_hdr(b, 3, 0, UINT64_MAX); EXPECT_FAIL(b, "n_kv 18446744073709551615 cannot fit");
    b_hdr(b, 3, 0, 1ull << 40); b_kv_u32(b, "k", 1); EXPECT_FAIL(b, "n_kv 1099511627776 cannot fit");
    b_hdr(b, 3, 1ull << 60, 0); EXPECT_FAIL(b, "n_tensors 1152921504606846976 cannot fit");
    b_hdr(b, 3, 3, 1); b_kv_u32(b, "k", 7); b_pad(b, 1, 60); EXPECT_FAIL(b, "n_tensors 3 cannot fit");
    /* keys and values */
    b_hdr(b, 3, 0, 1); b_kv_u32(b, "", 7); EXPECT_FAIL(b, "empty key");
    b_hdr(b, 3, 0, 2); b_kv_u32(b, "k", 7); b_kv_u32(b, "k", 8); EXPECT_FAIL(b, "kv 1 'k': duplicate key (first at offset 24)");
    b_hdr(b, 3, 0, 1); b_str(b, "k"); b_u32(b, 13); b_u32(b, 0); EXPECT_FAIL(b, "unknown value type 13");
    b_hdr(b, 3, 0, 1); b_str(b, "k"); b_u32(b, HX_GGUF_BOOL); b_u32(b, 2); EXPECT_FAIL(b, "bool byte is 2");
    b_hdr(b, 3, 0, 1); b_str(b, "k"); b_u32(b, HX_GGUF_STRING); b_u64(b, 1000); b_u64(b, 0); EXPECT_FAIL(b, "string value length 1000 exceeds");
    b_hdr(b, 3, 0, 1); b_u64(b, UINT64_MAX); b_u64(b, 0); EXPECT_FAIL(b, "key length 18446744073709551615 exceeds");
    b_hdr(b, 3, 0, 1); b_str(b, "k"); b_u32(b, HX_GGUF_ARRAY); b_u32(b, HX_GGUF_U32); b_u64(b, 1ull << 62); b_u64(b, 0);
    EXPECT_FAIL(b, "array of 4611686018427387904 u32 needs more");
    b_hdr(b, 3, 0, 1); b_str(b, "k"); b_u32(b, HX_GGUF_ARRAY); b_u32(b, HX_GGUF_STRING); b_u64(b, 1000000); b_u64(b, 0);
    EXPECT_FAIL(b, "array of 1000000 string cannot fit");
    b_hdr(b, 3, 0, 1); b_str(b, "k"); b_u32(b, HX_GGUF_ARRAY); b_u32(b, HX_GGUF_BOOL); b_u64(b, 2); b_u32(b, 0x0301);
    EXPECT_FAIL(b, "bool array element 1 is 3");
    b_hdr(b, 3, 0, 1); b_str(b, "k"); b_u32(b, HX_GGUF_ARRAY); b_u32(b, 99); b_u64(b, 0); EXPECT_FAIL(b, "unknown array element type 99");
    /* the message locates the element inside nested arrays: [[ "ab", <len 99> ]] */
    b_hdr(b, 3, 0, 1); b_str(b, "k"); b_u32(b, HX_GGUF_ARRAY); b_u32(b, HX_GGUF_ARRAY); b_u64(b, 1);
    b_u32(b, HX_GGUF_STRING); b_u64(b, 2); b_str(b, "ab"); b_u64(b, 99); b_u32(b, 0);
    EXPECT_FAIL(b, "kv 0 'k'[0][1]: array string element length 99 exceeds");
    b_hdr(b, 3, 0, 1); b_nested(b, "deep", 8); expect_ok(b, __LINE__);
    b_hdr(b, 3, 0, 1); b_nested(b, "deep", 9); EXPECT_FAIL(b, "kv 0 'deep'[0][0][0][0][0][0][0][0]: arrays nested deeper than 8 levels");
    b_hdr(b, 3, 0, 1); b_nested(b, "deep", 200); EXPECT_FAIL(b, "nested deeper");
    /* alignment */
    b_hdr(b, 3, 0, 1); b_kv_u32(b, "general.alignment", 48); EXPECT_FAIL(b, "alignment 48 is not a power of two");
    b_hdr(b, 3, 0, 1); b_kv_u32(b, "general.alignment", 0); EXPECT_FAIL(b, "alignment 0 is not a power of two");
    b_hdr(b, 3, 0, 1); b_str(b, "general.alignment"); b_u32(b, HX_GGUF_U64); b_u64(b, 64); EXPECT_FAIL(b, "type is u64, must be u32");
    b_hdr(b, 3, 1, 1); b_kv_u32(b, "general.alignment", 64); b_tensor(b, "t", 1, ne1, HX_TYPE_F32, 0); b_pad(b, 64, 128);
    expect_ok(b, __LINE__);
    b_hdr(b, 3, 1, 1); b_kv_u32(b, "general.alignment", 64); b_tensor(b, "t", 1, ne1, HX_TYPE_F32, 32); b_pad(b, 64, 256);
    EXPECT_FAIL(b, "tensor 0 't': data offset 32 is not a multiple of alignment 64");
    /* tensors */
    b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, ne2, HX_TYPE_F32, 8); b_pad(b, 32, 512); EXPECT_FAIL(b, "not a multiple of alignment 32");
    b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, ne2, 99, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "tensor 0 't': unknown tensor type 99");
    b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, ne2, 4, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "unknown tensor type 4"); /* removed Q4_2 */
    b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, ne2, 0xffffffffu, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "unknown tensor type 4294967295");
    b_hdr(b, 3, 2, 0); b_tensor(b, "t", 2, ne2, HX_TYPE_F32, 0); b_tensor(b, "t", 2, ne2, HX_TYPE_F32, 256); b_pad(b, 32, 512);
    EXPECT_FAIL(b, "tensor 1 't': duplicate tensor name (first is tensor 0)");
    b_hdr(b, 3, 1, 0); b_tensor(b, "", 2, ne2, HX_TYPE_F32, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "empty name");
    b_hdr(b, 3, 1, 0); b_tensor(b, "t", 0, ne2, HX_TYPE_F32, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "n_dims 0 not in 1..4");
    { const uint64_t ne5[5] = {1, 1, 1, 1, 1};
      b_hdr(b, 3, 1, 0); b_tensor(b, "t", 5, ne5, HX_TYPE_F32, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "n_dims 5 not in 1..4"); }
    { const uint64_t big[2] = {1ull << 40, 1ull << 40};
      b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, big, HX_TYPE_F32, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "element count overflows int64 at dim 1"); }
    { const uint64_t big[2] = {1ull << 62, 1};
      b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, big, HX_TYPE_F32, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "row size overflows"); }
    { const uint64_t big[4] = {1ull << 20, 1ull << 20, 1ull << 20, 2};
      b_hdr(b, 3, 1, 0); b_tensor(b, "t", 4, big, HX_TYPE_F64, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "data size overflows"); }
    { const uint64_t neg[2] = {32, UINT64_MAX};
      b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, neg, HX_TYPE_F32, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "dim 1 = 18446744073709551615 is negative"); }
    { const uint64_t odd[1] = {33};
      b_hdr(b, 3, 1, 0); b_tensor(b, "t", 1, odd, HX_TYPE_Q8_0, 0); b_pad(b, 32, 256); EXPECT_FAIL(b, "row length 33 is not a multiple of Q8_0 block size 32"); }
    { const uint64_t z[2] = {0, 5}; /* zero-size tensors are legal in ggml */
      b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, z, HX_TYPE_Q4_K, 0); b_pad(b, 32, 0); expect_ok(b, __LINE__);
      /* ... but not when the data section itself lies past the end (fuzzer find) */
      b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, z, HX_TYPE_Q4_K, 0); EXPECT_FAIL(b, "starts past end of file"); }
    b_hdr(b, 3, 1, 0); b_tensor(b, "blk.0.attn_q.weight", 2, ne2, HX_TYPE_F32, 0); b_pad(b, 32, 255);
    EXPECT_FAIL(b, "tensor 0 'blk.0.attn_q.weight': data [96, 352) extends past end of file (size 351)");
    b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, ne2, HX_TYPE_F32, 1ull << 40); b_pad(b, 32, 256); EXPECT_FAIL(b, "extends past end of file");
    b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, ne2, HX_TYPE_F32, UINT64_MAX - 31); b_pad(b, 32, 256); EXPECT_FAIL(b, "overflows");
    /* truncated inside tensor infos */
    b_hdr(b, 3, 1, 0); b_tensor(b, "t", 2, ne2, HX_TYPE_F32, 0); b->n -= 3; EXPECT_FAIL(b, "tensor 0 't': offset needs 8 bytes");
    free(b);
}

/* ------------------------------------------------------------------------ */
/* 3b. Truncations and mutations of real headers                            */

static void test_truncations(const uint8_t *buf, size_t n, uint64_t data_end, const char *name) {
    hx_error e;
    uint64_t header_end = 0;
    {   hx_gguf *g = NULL;
        CHECKF(!hx_gguf_open_memory(buf, n, name, &g, &e), "%s", e.msg);
        if (!g) return;
        header_end = g->data_offset;
        hx_gguf_close(g);
    }
    int tries = 0;
    for (uint64_t len = 0; len <= header_end; len++) {
        tries++;
        int ok = try_open_copy(buf, (size_t)len, name, &e);
        CHECKF(!ok, "%s truncated to %" PRIu64 " opened", name, len);
    }
    for (uint64_t len = header_end; len <= n; len += 4093) {
        tries++;
        int ok = try_open_copy(buf, (size_t)len, name, &e);
        CHECKF(ok == (len >= data_end), "%s truncated to %" PRIu64 ": %s", name, len, ok ? "opened" : e.msg);
    }
    printf("  truncations of %s: %d lengths (header %" PRIu64 " bytes)\n", name, tries, header_end);
}

/* Seeded mutations of the header region: flips, byte sets, interesting u64s. */
static void test_mutations(uint8_t *buf, size_t n, uint64_t region, int count, uint64_t seed, const char *name) {
    hx_rng r;
    hx_rng_seed(&r, seed);
    hx_error e;
    int opened = 0;
    uint8_t *save = malloc(region);
    memcpy(save, buf, region);
    static const uint64_t interesting[] = {0, 1, 0x7f, 0x80, 0xff, 0xffff, 0x7fffffffull, 0xffffffffull,
                                           1ull << 32, INT64_MAX, UINT64_MAX, UINT64_MAX - 31};
    for (int it = 0; it < count; it++) {
        int n_ops = 1 + (int)(hx_rng_u64(&r) % 4);
        for (int k = 0; k < n_ops; k++) {
            uint64_t pos = hx_rng_u64(&r) % region;
            switch (hx_rng_u64(&r) % 4) {
            case 0: buf[pos] ^= (uint8_t)(1u << (hx_rng_u64(&r) % 8)); break;
            case 1: buf[pos] = (uint8_t)hx_rng_u64(&r); break;
            case 2: buf[pos] = (uint8_t)interesting[hx_rng_u64(&r) % 5]; break;
            default: {
                uint64_t v = interesting[hx_rng_u64(&r) % (sizeof interesting / sizeof *interesting)];
                size_t w = pos + 8 <= region ? 8 : (size_t)(region - pos);
                memcpy(buf + pos, &v, w);
            }
            }
        }
        hx_gguf *g = NULL;
        hx_status s = hx_gguf_open_memory(buf, n, name, &g, &e);
        if (s == HX_OK) { opened++; walk(g); hx_gguf_close(g); }
        else CHECKF(strstr(e.msg, name) != NULL, "message lacks name: %s", e.msg);
        memcpy(buf, save, region);
    }
    free(save);
    printf("  mutations of %s: %d, %d still opened\n", name, count, opened);
}

static void test_hostile_real(const char *shared) {
    char p[512];
    snprintf(p, sizeof p, "%s/models/stories260K-Q8_0.gguf", shared);
    char *raw = NULL;
    size_t n = 0;
    hx_error e;
    CHECKF(!hx_read_file(p, &raw, &n, &e), "%s", e.msg);
    if (!raw) return;
    uint8_t *buf = malloc(n);  /* exact size: ASan catches reads past the end */
    memcpy(buf, raw, n);
    free(raw);
    hx_gguf *g = NULL;
    CHECKF(!hx_gguf_open_memory(buf, n, "stories260K-Q8_0.gguf", &g, &e), "%s", e.msg);
    if (g) {
        uint64_t data_end = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            uint64_t end = g->data_offset + g->tensors[i].offset + g->tensors[i].n_bytes;
            if (end > data_end) data_end = end;
        }
        uint64_t header = g->data_offset;
        hx_gguf_close(g);
        test_truncations(buf, n, data_end, "stories260K-Q8_0.gguf");
        test_mutations(buf, n, header, 4000, 1234, "stories260K-Q8_0.gguf");
    }
    free(buf);
}

static void test_hostile_written(void) {
    sample_data d;
    sample_fill(&d);
    char p[320];
    snprintf(p, sizeof p, "%s/small.gguf", g_tmpdir);
    hx_gguf_writer *w = sample_writer(0, &d);
    hx_error e = {0};
    CHECKF(!hx_gguf_writer_write(w, p, &e), "%s", e.msg);
    hx_gguf_writer_free(w);
    char *raw = NULL;
    size_t n = 0;
    CHECKF(!hx_read_file(p, &raw, &n, &e), "%s", e.msg);
    unlink(p);
    if (!raw) return;
    uint8_t *buf = malloc(n);
    memcpy(buf, raw, n);
    free(raw);
    hx_gguf *g = NULL;
    CHECKF(!hx_gguf_open_memory(buf, n, "small.gguf", &g, &e), "%s", e.msg);
    if (g) {
        uint64_t header = g->data_offset, data_end = 0;
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            uint64_t end = g->data_offset + g->tensors[i].offset + g->tensors[i].n_bytes;
            if (end > data_end) data_end = end;
        }
        hx_gguf_close(g);
        test_truncations(buf, n, data_end, "small.gguf");
        test_mutations(buf, n, header, 4000, 99, "small.gguf");
    }
    free(buf);
}

/* ------------------------------------------------------------------------ */
/* 4. Regression inputs                                                     */

static void test_regressions(void) {
    const char *dir = "tests/data/gguf";
    DIR *d = opendir(dir);
    if (!d) { printf("  no %s (run from the project root)\n", dir); return; }
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "README.md")) continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        char *raw = NULL;
        size_t len = 0;
        hx_error e;
        if (hx_read_file(p, &raw, &len, &e)) continue;
        n++;
        uint8_t *buf = malloc(len ? len : 1);
        memcpy(buf, raw, len);
        free(raw);
        hx_gguf *g = NULL;
        hx_status s = hx_gguf_open_memory(buf, len, de->d_name, &g, &e);
        CHECKF(s != HX_OK && strstr(e.msg, de->d_name), "%s: %s", p, s ? e.msg : "opened");
        if (g) { walk(g); hx_gguf_close(g); }
        /* and through the mmap path */
        s = hx_gguf_open(p, NULL, &g, &e);
        CHECKF(s != HX_OK && strstr(e.msg, p), "%s: %s", p, s ? e.msg : "opened");
        if (g) { walk(g); hx_gguf_close(g); }
        free(buf);
    }
    closedir(d);
    printf("  %d regression inputs replayed\n", n);
}

/* ------------------------------------------------------------------------ */
/* Modes for gguf_py_check.sh                                               */

static int write_sample(const char *path) {
    sample_data d;
    sample_fill(&d);
    hx_gguf_writer *w = sample_writer(0, &d);
    hx_error e = {0};
    hx_status s = hx_gguf_writer_write(w, path, &e);
    hx_gguf_writer_free(w);
    if (s) { fprintf(stderr, "%s\n", e.msg); return 1; }
    return t_failures ? 1 : 0;
}

/* One line per kv ("kv KEY TYPE[/ELEM] COUNT") and per tensor
 * ("tensor NAME TYPE ne0,ne1,.. OFFSET NBYTES"): compared against gguf-py's view. */
static int dump(const char *path) {
    hx_gguf *g = NULL;
    hx_error e = {0};
    if (hx_gguf_open(path, NULL, &g, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
    printf("version %u\n", g->version);
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const hx_gguf_kv *kv = &g->kv[i];
        const hx_gguf_value *v = &kv->value;
        printf("kv %.*s %s", (int)kv->key.len, kv->key.ptr, hx_gguf_vtype_name(v->type));
        if (v->type == HX_GGUF_ARRAY) printf("/%s %" PRIu64, hx_gguf_vtype_name(v->arr.elem_type), v->arr.count);
        printf("\n");
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const hx_gguf_tensor *t = &g->tensors[i];
        printf("tensor %.*s %s ", (int)t->name.len, t->name.ptr, hx_type_name(t->type));
        for (int d = 0; d < t->n_dims; d++) printf("%s%" PRId64, d ? "," : "", t->ne[d]);
        printf(" %" PRIu64 " %" PRIu64 "\n", g->data_offset + t->offset, t->n_bytes);
    }
    hx_gguf_close(g);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--write-sample")) return write_sample(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--dump")) return dump(argv[2]);
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/hx_test_gguf.XXXXXX");
    if (!mkdtemp(g_tmpdir)) { perror("mkdtemp"); return 1; }
    double t0 = hx_now_s();
    test_roundtrip();
    test_open_errors();
    test_handmade();
    test_hostile_written();
    test_regressions();
    printf("  no-shared parts: %.2f s\n", hx_now_s() - t0);
    const char *shared = t_shared_dir();
    if (!shared) {
        rmdir(g_tmpdir);
        printf("SKIP (partial): ../shared not found; real-file tests not run\n");
        return t_done("test_gguf");
    }
    char p[512];
    snprintf(p, sizeof p, "%s/models", shared);
    nftw(p, nftw_cb, 16, FTW_PHYS);
    snprintf(p, sizeof p, "%s/tokenizers/vocab-gguf", shared);
    nftw(p, nftw_cb, 16, FTW_PHYS);
    printf("  %d real GGUF files opened\n", g_n_files);
    CHECK(g_n_files >= 20);
    test_stories(shared);
    test_copy_real(shared, "models/stories260K.gguf");
    test_copy_real(shared, "models/stories260K-Q8_0.gguf");
    test_copy_real(shared, "models/quant-tiny/tiny-Q4_K_S.gguf");
    test_copy_real(shared, "models/ref-tiny/tiny-gemma3-shared.gguf");
    test_hostile_real(shared);
    printf("  total %.2f s\n", hx_now_s() - t0);
    rmdir(g_tmpdir);
    return t_done("test_gguf");
}
