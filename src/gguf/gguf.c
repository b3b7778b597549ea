/* gguf.c — GGUF v2/v3 reader: mmap (or caller memory), validate every field
 * before use, zero-copy tensor data.
 *
 * The whole file is checked at open: after hx_gguf_open succeeds every kv,
 * every array element and every tensor's [data, data + n_bytes) lies inside the
 * mapping, so callers never need to re-check. Hostile input gets an error whose
 * message names the file, the byte offset and the field; nothing is allocated
 * from a count before that count is bounded by the bytes left in the file.
 */
#include "gguf/gguf.h"
#include "core/core.h"
#include "quant/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian fields with memcpy: a little-endian host is required"
#endif

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ARRAY_DEPTH 8   /* arrays of arrays of ... at most this many levels */
/* Smallest possible encodings, used to bound counts by the bytes left:
 * kv = key len u64 + >=1 key byte + type u32 + >=1 value byte;
 * tensor info = name len u64 + >=1 name byte + n_dims u32 + >=1 dim u64 + type u32 + offset u64. */
#define GGUF_MIN_KV_BYTES 14
#define GGUF_MIN_TENSOR_BYTES 33

static const uint8_t k_vtype_size[HX_GGUF_VTYPE_COUNT] = {
    [HX_GGUF_U8] = 1, [HX_GGUF_I8] = 1, [HX_GGUF_U16] = 2, [HX_GGUF_I16] = 2,
    [HX_GGUF_U32] = 4, [HX_GGUF_I32] = 4, [HX_GGUF_F32] = 4, [HX_GGUF_BOOL] = 1,
    [HX_GGUF_STRING] = 0, [HX_GGUF_ARRAY] = 0,
    [HX_GGUF_U64] = 8, [HX_GGUF_I64] = 8, [HX_GGUF_F64] = 8,
};

static const char *const k_vtype_name[HX_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
};

const char *hx_gguf_vtype_name(hx_gguf_vtype t) {
    return (unsigned)t < HX_GGUF_VTYPE_COUNT ? k_vtype_name[t] : "?";
}

size_t hx_gguf_vtype_size(hx_gguf_vtype t) {
    return (unsigned)t < HX_GGUF_VTYPE_COUNT ? k_vtype_size[t] : 0;
}

bool hx_gguf_str_eq(hx_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

/* ------------------------------------------------------------------------ */
/* Name hash tables (open addressing, FNV-1a) for kv keys and tensor names.  */

typedef struct name_table {
    uint32_t *slots;   /* index + 1; 0 = empty */
    uint64_t mask;     /* capacity - 1 (capacity a power of two) */
} name_table;

typedef struct gguf_priv {
    name_table kv_tab, tensor_tab;
    bool mapped;       /* map came from mmap (unmap on close) */
} gguf_priv;

static bool table_init(name_table *t, uint64_t n) {
    uint64_t cap = 8;
    while (cap < 2 * n) cap <<= 1;
    t->slots = calloc(cap, sizeof *t->slots);
    t->mask = cap - 1;
    return t->slots != NULL;
}

/* Find name; returns the slot holding it or the empty slot where it would go. */
static uint64_t table_slot(const name_table *t, const hx_gguf_str *names, size_t stride,
                           const char *p, uint64_t n) {
    uint64_t i = hx_fnv1a(p, n, HX_FNV_INIT_SHORT) & t->mask;
    for (;;) {
        uint32_t v = t->slots[i];
        if (!v) return i;
        const hx_gguf_str *s = (const hx_gguf_str *)((const char *)names + (size_t)(v - 1) * stride);
        if (s->len == n && (n == 0 || memcmp(s->ptr, p, n) == 0)) return i;
        i = (i + 1) & t->mask;
    }
}

/* ------------------------------------------------------------------------ */
/* Bounded cursor over the file bytes.                                       */

typedef struct rd {
    const uint8_t *p;
    uint64_t n, off;
    const char *name;     /* file name for messages */
    hx_error *e;
    char field[160];      /* what is being read, for messages */
    int n_idx;            /* element path inside nested arrays, for messages */
    uint64_t idx[GGUF_MAX_ARRAY_DEPTH];
} rd;

/* Copy a gguf string into buf for a message: printable ASCII only, truncated. */
static const char *safe_str(char *buf, size_t cap, const char *p, uint64_t n) {
    size_t k = 0;
    for (uint64_t i = 0; i < n && k + 4 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        buf[k++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (n > 0 && k + 4 >= cap) { buf[k++] = '.'; buf[k++] = '.'; buf[k++] = '.'; }
    buf[k] = 0;
    return buf;
}

static hx_status rd_fail(rd *r, hx_status s, uint64_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static hx_status rd_fail(rd *r, hx_status s, uint64_t off, const char *fmt, ...) {
    char msg[320], path[GGUF_MAX_ARRAY_DEPTH * 22 + 1] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t k = 0;
    for (int i = 0; i < r->n_idx; i++)
        k += (size_t)snprintf(path + k, sizeof path - k, "[%" PRIu64 "]", r->idx[i]);
    return hx_err(r->e, s, "%s: offset %" PRIu64 ": %s%s: %s", r->name, off, r->field, path, msg);
}

static uint64_t rd_left(const rd *r) { return r->n - r->off; }

static hx_status rd_need(rd *r, uint64_t k, const char *what) {
    if (rd_left(r) < k)
        return rd_fail(r, HX_ERR_FORMAT, r->off, "%s needs %" PRIu64 " bytes, only %" PRIu64
                       " left before end of file (size %" PRIu64 ")", what, k, rd_left(r), r->n);
    return HX_OK;
}

static hx_status rd_u32(rd *r, uint32_t *v, const char *what) {
    hx_status s = rd_need(r, 4, what);
    if (s) return s;
    memcpy(v, r->p + r->off, 4);
    r->off += 4;
    return HX_OK;
}

static hx_status rd_u64(rd *r, uint64_t *v, const char *what) {
    hx_status s = rd_need(r, 8, what);
    if (s) return s;
    memcpy(v, r->p + r->off, 8);
    r->off += 8;
    return HX_OK;
}

static hx_status rd_str(rd *r, hx_gguf_str *out, const char *what) {
    uint64_t at = r->off, len;
    hx_status s = rd_u64(r, &len, what);
    if (s) return s;
    if (len > rd_left(r))
        return rd_fail(r, HX_ERR_FORMAT, at, "%s length %" PRIu64 " exceeds the %" PRIu64
                       " bytes left in the file (size %" PRIu64 ")", what, len, rd_left(r), r->n);
    out->ptr = (const char *)r->p + r->off;
    out->len = len;
    r->off += len;
    return HX_OK;
}

/* ------------------------------------------------------------------------ */
/* Values                                                                   */

static void value_free(hx_gguf_value *v) {
    if (v->type != HX_GGUF_ARRAY || !v->arr.elems) return;
    for (uint64_t i = 0; i < v->arr.count; i++) value_free(&v->arr.elems[i]);
    free(v->arr.elems);
    v->arr.elems = NULL;
}

/* Decode one little-endian scalar of type t at p into v (widened). */
static void decode_scalar(hx_gguf_vtype t, const uint8_t *p, hx_gguf_value *v) {
    uint8_t u8; uint16_t u16; uint32_t u32; uint64_t u64;
    float f;
    switch (t) {
    case HX_GGUF_U8:  v->u64 = p[0]; break;
    case HX_GGUF_I8:  memcpy(&u8, p, 1); v->i64 = (int8_t)u8; break;
    case HX_GGUF_U16: memcpy(&u16, p, 2); v->u64 = u16; break;
    case HX_GGUF_I16: memcpy(&u16, p, 2); v->i64 = (int16_t)u16; break;
    case HX_GGUF_U32: memcpy(&u32, p, 4); v->u64 = u32; break;
    case HX_GGUF_I32: memcpy(&u32, p, 4); v->i64 = (int32_t)u32; break;
    case HX_GGUF_F32: memcpy(&f, p, 4); v->f64 = f; break;
    case HX_GGUF_BOOL: v->b = p[0] != 0; break;
    case HX_GGUF_U64: memcpy(&u64, p, 8); v->u64 = u64; break;
    case HX_GGUF_I64: memcpy(&u64, p, 8); v->i64 = (int64_t)u64; break;
    case HX_GGUF_F64: memcpy(&v->f64, p, 8); break;
    default: break;
    }
}

/* Parse a value of type t at the cursor. depth = number of enclosing arrays. */
static hx_status parse_value(rd *r, hx_gguf_vtype t, hx_gguf_value *v, int depth) {
    hx_status s;
    uint64_t at = r->off;
    v->type = t;
    size_t sz = k_vtype_size[t];
    if (sz) {
        if ((s = rd_need(r, sz, hx_gguf_vtype_name(t)))) return s;
        if (t == HX_GGUF_BOOL && r->p[r->off] > 1)
            return rd_fail(r, HX_ERR_FORMAT, at, "bool byte is %u, must be 0 or 1", r->p[r->off]);
        decode_scalar(t, r->p + r->off, v);
        r->off += sz;
        return HX_OK;
    }
    if (t == HX_GGUF_STRING) return rd_str(r, &v->str, depth ? "array string element" : "string value");

    /* array: elem_type u32 | count u64 | elements */
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return rd_fail(r, HX_ERR_FORMAT, at, "arrays nested deeper than %d levels", GGUF_MAX_ARRAY_DEPTH);
    uint32_t et;
    uint64_t count;
    if ((s = rd_u32(r, &et, "array element type"))) return s;
    if (et >= HX_GGUF_VTYPE_COUNT)
        return rd_fail(r, HX_ERR_FORMAT, at, "unknown array element type %" PRIu32, et);
    if ((s = rd_u64(r, &count, "array count"))) return s;
    v->arr.elem_type = (hx_gguf_vtype)et;
    v->arr.count = 0;
    v->arr.data = r->p + r->off;
    v->arr.elems = NULL;
    size_t esz = k_vtype_size[et];
    if (esz) {
        uint64_t total;
        if (!hx_mul_ok(count, esz, &total) || total > rd_left(r))
            return rd_fail(r, HX_ERR_FORMAT, at + 4, "array of %" PRIu64 " %s needs more than the %"
                           PRIu64 " bytes left in the file (size %" PRIu64 ")",
                           count, hx_gguf_vtype_name(et), rd_left(r), r->n);
        if (et == HX_GGUF_BOOL)
            for (uint64_t i = 0; i < count; i++)
                if (r->p[r->off + i] > 1)
                    return rd_fail(r, HX_ERR_FORMAT, r->off + i, "bool array element %" PRIu64
                                   " is %u, must be 0 or 1", i, r->p[r->off + i]);
        v->arr.count = count;
        r->off += total;
        return HX_OK;
    }
    /* strings (>= 8 bytes each) or arrays (>= 12 bytes each): bound count first */
    uint64_t min_elem = et == HX_GGUF_STRING ? 8 : 12;
    if (count > rd_left(r) / min_elem)
        return rd_fail(r, HX_ERR_FORMAT, at + 4, "array of %" PRIu64 " %s cannot fit in the %" PRIu64
                       " bytes left in the file (size %" PRIu64 ")",
                       count, hx_gguf_vtype_name(et), rd_left(r), r->n);
    if (count) {
        v->arr.elems = calloc(count, sizeof *v->arr.elems);
        if (!v->arr.elems)
            return rd_fail(r, HX_ERR_NOMEM, at, "out of memory for %" PRIu64 " array elements", count);
    }
    v->arr.count = count; /* zeroed elements are u8 scalars: value_free skips them */
    r->n_idx = depth + 1;
    for (uint64_t i = 0; i < count; i++) {
        r->idx[depth] = i;
        if ((s = parse_value(r, (hx_gguf_vtype)et, &v->arr.elems[i], depth + 1))) return s;
        r->n_idx = depth + 1;
    }
    r->n_idx = depth;
    return HX_OK;
}

/* ------------------------------------------------------------------------ */
/* Open                                                                     */

void hx_gguf_close(hx_gguf *g) {
    if (!g) return;
    gguf_priv *pv = g->priv;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) value_free(&g->kv[i].value);
    free(g->kv);
    free(g->tensors);
    if (pv) {
        free(pv->kv_tab.slots);
        free(pv->tensor_tab.slots);
        if (pv->mapped && g->map && g->file_size) munmap((void *)g->map, g->file_size);
        free(pv);
    }
    free(g->path);
    free(g);
}

static bool is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

static hx_status parse_kvs(rd *r, hx_gguf *g) {
    gguf_priv *pv = g->priv;
    hx_status s;
    char kb[72];
    for (uint64_t i = 0; i < g->n_kv; i++) {
        hx_gguf_kv *kv = &g->kv[i];
        kv->file_offset = r->off;
        r->n_idx = 0;
        snprintf(r->field, sizeof r->field, "kv %" PRIu64, i);
        if ((s = rd_str(r, &kv->key, "key"))) return s;
        if (kv->key.len == 0) return rd_fail(r, HX_ERR_FORMAT, kv->file_offset, "empty key");
        if (memchr(kv->key.ptr, 0, kv->key.len))
            return rd_fail(r, HX_ERR_FORMAT, kv->file_offset, "key contains a NUL byte");
        snprintf(r->field, sizeof r->field, "kv %" PRIu64 " '%s'", i,
                 safe_str(kb, sizeof kb, kv->key.ptr, kv->key.len));
        uint64_t slot = table_slot(&pv->kv_tab, &g->kv[0].key, sizeof *kv, kv->key.ptr, kv->key.len);
        if (pv->kv_tab.slots[slot])
            return rd_fail(r, HX_ERR_FORMAT, kv->file_offset, "duplicate key (first at offset %" PRIu64 ")",
                           g->kv[pv->kv_tab.slots[slot] - 1].file_offset);
        pv->kv_tab.slots[slot] = (uint32_t)(i + 1);
        uint64_t at = r->off;
        uint32_t t;
        if ((s = rd_u32(r, &t, "value type"))) return s;
        if (t >= HX_GGUF_VTYPE_COUNT)
            return rd_fail(r, HX_ERR_FORMAT, at, "unknown value type %" PRIu32, t);
        if ((s = parse_value(r, (hx_gguf_vtype)t, &kv->value, 0))) return s;
    }
    return HX_OK;
}

/* Alignment from general.alignment (u32, power of two) or the default. */
static hx_status read_alignment(rd *r, hx_gguf *g) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const hx_gguf_kv *kv = hx_gguf_find_kv(g, "general.alignment");
    if (!kv) return HX_OK;
    snprintf(r->field, sizeof r->field, "kv 'general.alignment'");
    if (kv->value.type != HX_GGUF_U32)
        return rd_fail(r, HX_ERR_FORMAT, kv->file_offset, "type is %s, must be u32",
                       hx_gguf_vtype_name(kv->value.type));
    if (!is_pow2(kv->value.u64))
        return rd_fail(r, HX_ERR_FORMAT, kv->file_offset, "alignment %" PRIu64 " is not a power of two",
                       kv->value.u64);
    g->alignment = kv->value.u64;
    return HX_OK;
}

/* Parse tensor infos; sizes are validated here, offsets once the data section is known. */
static hx_status parse_tensor_infos(rd *r, hx_gguf *g, uint64_t *info_off) {
    gguf_priv *pv = g->priv;
    hx_status s;
    char nb[72];
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        hx_gguf_tensor *t = &g->tensors[i];
        uint64_t at = r->off;
        snprintf(r->field, sizeof r->field, "tensor %" PRIu64, i);
        if ((s = rd_str(r, &t->name, "name"))) return s;
        if (t->name.len == 0) return rd_fail(r, HX_ERR_FORMAT, at, "empty name");
        if (memchr(t->name.ptr, 0, t->name.len))
            return rd_fail(r, HX_ERR_FORMAT, at, "name contains a NUL byte");
        snprintf(r->field, sizeof r->field, "tensor %" PRIu64 " '%s'", i,
                 safe_str(nb, sizeof nb, t->name.ptr, t->name.len));
        uint64_t slot = table_slot(&pv->tensor_tab, &g->tensors[0].name, sizeof *t, t->name.ptr, t->name.len);
        if (pv->tensor_tab.slots[slot])
            return rd_fail(r, HX_ERR_FORMAT, at, "duplicate tensor name (first is tensor %u)",
                           pv->tensor_tab.slots[slot] - 1);
        pv->tensor_tab.slots[slot] = (uint32_t)(i + 1);

        uint32_t nd;
        uint64_t dat = r->off;
        if ((s = rd_u32(r, &nd, "n_dims"))) return s;
        if (nd < 1 || nd > 4) return rd_fail(r, HX_ERR_FORMAT, dat, "n_dims %" PRIu32 " not in 1..4", nd);
        t->n_dims = (int)nd;
        uint64_t n_el = 1;
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            uint64_t v, dim_at = r->off;
            if ((s = rd_u64(r, &v, "dim"))) return s;
            if (v > (uint64_t)INT64_MAX)
                return rd_fail(r, HX_ERR_FORMAT, dim_at, "dim %" PRIu32 " = %" PRIu64 " is negative as int64", d, v);
            if (!hx_mul_ok(n_el, v, &n_el) || n_el > (uint64_t)INT64_MAX)
                return rd_fail(r, HX_ERR_FORMAT, dim_at, "element count overflows int64 at dim %" PRIu32, d);
            t->ne[d] = (int64_t)v;
        }
        uint32_t type;
        uint64_t type_at = r->off;
        if ((s = rd_u32(r, &type, "type"))) return s;
        const hx_type_info *ti = hx_type_get((int)(type > INT32_MAX ? -1 : (int)type));
        if (!ti) return rd_fail(r, HX_ERR_FORMAT, type_at, "unknown tensor type %" PRIu32, type);
        t->type = (int)type;
        if (t->ne[0] % ti->block_size)
            return rd_fail(r, HX_ERR_FORMAT, type_at, "row length %" PRId64 " is not a multiple of %s block size %d",
                           t->ne[0], ti->name, ti->block_size);
        /* bytes = (ne0 / block) * type_size * ne1 * ne2 * ne3 */
        uint64_t nb_;
        if (!hx_mul_ok((uint64_t)(t->ne[0] / ti->block_size), (uint64_t)ti->type_size, &nb_))
            return rd_fail(r, HX_ERR_FORMAT, type_at, "row size overflows");
        for (int d = 1; d < 4; d++)
            if (!hx_mul_ok(nb_, (uint64_t)t->ne[d], &nb_))
                return rd_fail(r, HX_ERR_FORMAT, type_at, "data size overflows");
        t->n_bytes = nb_;
        info_off[i] = r->off;
        if ((s = rd_u64(r, &t->offset, "offset"))) return s;
    }
    return HX_OK;
}

/* Place and check every tensor inside the data section. */
static hx_status check_tensor_data(rd *r, hx_gguf *g, const uint64_t *info_off) {
    uint64_t data_size = g->data_offset <= g->file_size ? g->file_size - g->data_offset : 0;
    char nb[72];
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        hx_gguf_tensor *t = &g->tensors[i];
        snprintf(r->field, sizeof r->field, "tensor %" PRIu64 " '%s'", i,
                 safe_str(nb, sizeof nb, t->name.ptr, t->name.len));
        /* even a 0-byte tensor must point inside [map, map + file_size] */
        if (g->data_offset > g->file_size)
            return rd_fail(r, HX_ERR_FORMAT, info_off[i], "data section (offset %" PRIu64 ") starts past end of file (size %" PRIu64 ")",
                           g->data_offset, g->file_size);
        if (t->offset % g->alignment)
            return rd_fail(r, HX_ERR_FORMAT, info_off[i], "data offset %" PRIu64 " is not a multiple of alignment %" PRIu64,
                           t->offset, g->alignment);
        uint64_t end;
        if (!hx_add_ok(t->offset, t->n_bytes, &end) || end > data_size) {
            uint64_t a, b;
            if (!hx_add_ok(g->data_offset, t->offset, &a) || !hx_add_ok(a, t->n_bytes, &b))
                return rd_fail(r, HX_ERR_FORMAT, info_off[i], "data offset %" PRIu64 " + size %" PRIu64
                               " overflows", t->offset, t->n_bytes);
            return rd_fail(r, HX_ERR_FORMAT, info_off[i], "data [%" PRIu64 ", %" PRIu64 ") extends past end of file (size %" PRIu64 ")",
                           a, b, g->file_size);
        }
        t->data = g->map + g->data_offset + t->offset;
    }
    return HX_OK;
}

/* Parse an in-memory image. g->map/file_size/path/priv already set. */
static hx_status parse(hx_gguf *g, hx_error *e) {
    rd r = {.p = g->map, .n = g->file_size, .off = 0, .name = g->path, .e = e};
    gguf_priv *pv = g->priv;
    hx_status s;
    snprintf(r.field, sizeof r.field, "header");
    if ((s = rd_need(&r, 4, "magic"))) return s;
    if (memcmp(r.p, GGUF_MAGIC, 4) != 0) {
        char mb[16];
        return rd_fail(&r, HX_ERR_FORMAT, 0, "bad magic '%s', not a GGUF file", safe_str(mb, sizeof mb, (const char *)r.p, 4));
    }
    r.off = 4;
    if ((s = rd_u32(&r, &g->version, "version"))) return s;
    if (g->version != 2 && g->version != 3)
        return rd_fail(&r, HX_ERR_UNSUPPORTED, 4, "unsupported version %" PRIu32 " (only GGUF v2 and v3 are read)",
                       g->version);
    uint64_t nt_at = r.off;
    if ((s = rd_u64(&r, &g->n_tensors, "n_tensors"))) return s;
    uint64_t nkv_at = r.off;
    if ((s = rd_u64(&r, &g->n_kv, "n_kv"))) return s;
    uint64_t left = rd_left(&r);
    if (g->n_kv > left / GGUF_MIN_KV_BYTES)
        return rd_fail(&r, HX_ERR_FORMAT, nkv_at, "n_kv %" PRIu64 " cannot fit in the %" PRIu64
                       " bytes left in the file (size %" PRIu64 ")", g->n_kv, left, r.n);
    left -= g->n_kv * GGUF_MIN_KV_BYTES;
    if (g->n_tensors > left / GGUF_MIN_TENSOR_BYTES)
        return rd_fail(&r, HX_ERR_FORMAT, nt_at, "n_tensors %" PRIu64 " cannot fit in the %" PRIu64
                       " bytes left in the file (size %" PRIu64 ") after %" PRIu64 " kvs",
                       g->n_tensors, rd_left(&r), r.n, g->n_kv);
    if (g->n_kv >= UINT32_MAX || g->n_tensors >= UINT32_MAX)
        return rd_fail(&r, HX_ERR_FORMAT, nkv_at, "too many entries");

    g->kv = calloc(g->n_kv ? g->n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *g->tensors);
    uint64_t *info_off = calloc(g->n_tensors ? g->n_tensors : 1, sizeof *info_off);
    if (!g->kv || !g->tensors || !info_off || !table_init(&pv->kv_tab, g->n_kv) ||
        !table_init(&pv->tensor_tab, g->n_tensors)) {
        free(info_off);
        return hx_err(e, HX_ERR_NOMEM, "%s: out of memory for %" PRIu64 " kvs and %" PRIu64 " tensors",
                      g->path, g->n_kv, g->n_tensors);
    }
    s = parse_kvs(&r, g);
    r.n_idx = 0;
    if (!s) s = read_alignment(&r, g);
    if (!s) s = parse_tensor_infos(&r, g, info_off);
    if (!s) {
        /* data section starts at the next multiple of alignment */
        uint64_t pad = (g->alignment - r.off % g->alignment) % g->alignment;
        g->data_offset = r.off + pad; /* r.off <= file size < 2^63: no overflow */
        s = check_tensor_data(&r, g, info_off);
    }
    free(info_off);
    return s;
}

hx_status hx_gguf_open_memory(const void *buf, size_t n, const char *name, hx_gguf **out, hx_error *e) {
    *out = NULL;
    if (!name) name = "<memory>";
    if (!buf && n) return hx_err(e, HX_ERR_ARG, "%s: NULL buffer", name);
    hx_gguf *g = calloc(1, sizeof *g);
    gguf_priv *pv = calloc(1, sizeof *pv);
    char *path = strdup(name);
    if (!g || !pv || !path) {
        free(g); free(pv); free(path);
        return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", name);
    }
    g->priv = pv;
    g->path = path;
    g->map = buf;
    g->file_size = n;
    hx_status s = parse(g, e);
    if (s) { hx_gguf_close(g); return s; }
    *out = g;
    return HX_OK;
}

hx_status hx_gguf_open(const char *path, const hx_gguf_open_opts *opts, hx_gguf **out, hx_error *e) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return hx_err(e, HX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        hx_status s = hx_err(e, HX_ERR_IO, "%s: fstat failed: %s", path, strerror(errno));
        close(fd);
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return hx_err(e, HX_ERR_IO, "%s: not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 24) {
        close(fd);
        return hx_err(e, HX_ERR_FORMAT, "%s: offset 0: header: file is %" PRIu64 " bytes, a GGUF header needs 24",
                      path, size);
    }
    if (size > SIZE_MAX) {
        close(fd);
        return hx_err(e, HX_ERR_IO, "%s: file too large to map", path);
    }
    void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return hx_err(e, HX_ERR_IO, "%s: mmap of %" PRIu64 " bytes failed: %s", path, size, strerror(errno));

    hx_gguf *g = calloc(1, sizeof *g);
    gguf_priv *pv = calloc(1, sizeof *pv);
    char *p = strdup(path);
    if (!g || !pv || !p) {
        free(g); free(pv); free(p);
        munmap(m, (size_t)size);
        return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    }
    pv->mapped = true;
    g->priv = pv;
    g->path = p;
    g->map = m;
    g->file_size = size;
    hx_status s = parse(g, e);
    if (s) { hx_gguf_close(g); return s; }
    if (opts && opts->prefault) {
        /* Bring the whole file into the page cache now, so the first forward
         * pass does not stall on page faults: readahead hint, then one read per page. */
        madvise(m, (size_t)size, MADV_WILLNEED);
        long ps = sysconf(_SC_PAGESIZE);
        uint64_t step = ps > 0 ? (uint64_t)ps : 4096;
        volatile uint8_t sink = 0;
        for (uint64_t o = 0; o < size; o += step) sink ^= g->map[o];
        (void)sink;
    }
    *out = g;
    return HX_OK;
}

/* ------------------------------------------------------------------------ */
/* Lookups and getters                                                      */

const hx_gguf_kv *hx_gguf_find_kv(const hx_gguf *g, const char *key) {
    if (!g || !key || !g->n_kv) return NULL;
    const gguf_priv *pv = g->priv;
    uint64_t slot = table_slot(&pv->kv_tab, &g->kv[0].key, sizeof g->kv[0], key, strlen(key));
    uint32_t v = pv->kv_tab.slots[slot];
    return v ? &g->kv[v - 1] : NULL;
}

const hx_gguf_tensor *hx_gguf_find_tensor(const hx_gguf *g, const char *name) {
    if (!g || !name || !g->n_tensors) return NULL;
    const gguf_priv *pv = g->priv;
    uint64_t slot = table_slot(&pv->tensor_tab, &g->tensors[0].name, sizeof g->tensors[0], name, strlen(name));
    uint32_t v = pv->tensor_tab.slots[slot];
    return v ? &g->tensors[v - 1] : NULL;
}

static bool is_unsigned(hx_gguf_vtype t) {
    return t == HX_GGUF_U8 || t == HX_GGUF_U16 || t == HX_GGUF_U32 || t == HX_GGUF_U64;
}
static bool is_signed(hx_gguf_vtype t) {
    return t == HX_GGUF_I8 || t == HX_GGUF_I16 || t == HX_GGUF_I32 || t == HX_GGUF_I64;
}

bool hx_gguf_get_u64(const hx_gguf *g, const char *key, uint64_t *out) {
    const hx_gguf_kv *kv = hx_gguf_find_kv(g, key);
    if (!kv) return false;
    if (is_unsigned(kv->value.type)) { *out = kv->value.u64; return true; }
    if (is_signed(kv->value.type) && kv->value.i64 >= 0) { *out = (uint64_t)kv->value.i64; return true; }
    return false;
}

bool hx_gguf_get_i64(const hx_gguf *g, const char *key, int64_t *out) {
    const hx_gguf_kv *kv = hx_gguf_find_kv(g, key);
    if (!kv) return false;
    if (is_signed(kv->value.type)) { *out = kv->value.i64; return true; }
    if (is_unsigned(kv->value.type) && kv->value.u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)kv->value.u64;
        return true;
    }
    return false;
}

bool hx_gguf_get_f64(const hx_gguf *g, const char *key, double *out) {
    const hx_gguf_kv *kv = hx_gguf_find_kv(g, key);
    if (!kv) return false;
    hx_gguf_vtype t = kv->value.type;
    if (t == HX_GGUF_F32 || t == HX_GGUF_F64) { *out = kv->value.f64; return true; }
    if (is_unsigned(t)) { *out = (double)kv->value.u64; return true; }
    if (is_signed(t)) { *out = (double)kv->value.i64; return true; }
    return false;
}

bool hx_gguf_get_bool(const hx_gguf *g, const char *key, bool *out) {
    const hx_gguf_kv *kv = hx_gguf_find_kv(g, key);
    if (!kv || kv->value.type != HX_GGUF_BOOL) return false;
    *out = kv->value.b;
    return true;
}

bool hx_gguf_get_str(const hx_gguf *g, const char *key, hx_gguf_str *out) {
    const hx_gguf_kv *kv = hx_gguf_find_kv(g, key);
    if (!kv || kv->value.type != HX_GGUF_STRING) return false;
    *out = kv->value.str;
    return true;
}

const hx_gguf_value *hx_gguf_get_arr(const hx_gguf *g, const char *key, hx_gguf_vtype elem_type) {
    const hx_gguf_kv *kv = hx_gguf_find_kv(g, key);
    if (!kv || kv->value.type != HX_GGUF_ARRAY) return NULL;
    if (elem_type != HX_GGUF_VTYPE_COUNT && kv->value.arr.elem_type != elem_type) return NULL;
    return &kv->value;
}

/* Element i of a fixed-size scalar array, decoded; false if not one. */
static bool arr_elem(const hx_gguf_value *arr, uint64_t i, hx_gguf_value *v) {
    if (!arr || arr->type != HX_GGUF_ARRAY || i >= arr->arr.count) return false;
    size_t sz = hx_gguf_vtype_size(arr->arr.elem_type);
    if (!sz) return false;
    v->type = arr->arr.elem_type;
    decode_scalar(v->type, (const uint8_t *)arr->arr.data + i * sz, v);
    return true;
}

double hx_gguf_arr_f64(const hx_gguf_value *arr, uint64_t i) {
    hx_gguf_value v;
    if (!arr_elem(arr, i, &v)) return 0.0;
    if (v.type == HX_GGUF_F32 || v.type == HX_GGUF_F64) return v.f64;
    if (is_unsigned(v.type)) return (double)v.u64;
    if (is_signed(v.type)) return (double)v.i64;
    return v.b ? 1.0 : 0.0;
}

int64_t hx_gguf_arr_i64(const hx_gguf_value *arr, uint64_t i) {
    hx_gguf_value v;
    if (!arr_elem(arr, i, &v)) return 0;
    if (is_signed(v.type)) return v.i64;
    if (is_unsigned(v.type)) return v.u64 > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v.u64;
    if (v.type == HX_GGUF_BOOL) return v.b;
    /* floats: truncate toward zero, saturating (NaN -> 0) */
    if (!(v.f64 == v.f64)) return 0;
    if (v.f64 >= 9.2233720368547758e18) return INT64_MAX;
    if (v.f64 <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v.f64;
}
