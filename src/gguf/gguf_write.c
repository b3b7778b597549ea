/* gguf_write.c — GGUF v3 writer: metadata of every type, tensors padded to the
 * alignment, streamed to a temp file, fsync'd and renamed into place so a
 * reader never sees a half-written model.
 *
 * Each kv is serialized (value type + value bytes) when it is set, so copying
 * a kv from an open file does not keep the file alive. Tensor data stays with
 * the caller until _write streams it: multi-GB models are never buffered.
 */
#include "gguf/gguf.h"
#include "core/core.h"
#include "quant/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <unistd.h>

#define GGUF_VERSION_OUT 3
#define GGUF_MAX_NAME 64         /* ggml's GGML_MAX_NAME: tensor names must be shorter */
#define GGUF_MAX_ARRAY_DEPTH 8

/* Growable byte buffer. */
typedef struct bbuf { uint8_t *p; size_t n, cap; bool oom; } bbuf;

static void bb_put(bbuf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n < b->n) { b->oom = true; return; }
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) {
            if (cap > SIZE_MAX / 2) { b->oom = true; return; }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u32(bbuf *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bbuf *b, uint64_t v) { bb_put(b, &v, 8); }

typedef struct wkv {
    char *key;
    uint8_t *blob;   /* value type u32 | value */
    size_t len;
} wkv;

typedef struct wtensor {
    char *name;
    int type, n_dims;
    int64_t ne[4];
    const void *data;
    uint64_t n_bytes;
    hx_gguf_fill_fn fill;   /* when set, produces the bytes at write time */
    void *fill_ctx;
} wtensor;

struct hx_gguf_writer {
    uint32_t alignment;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    hx_status err;      /* first failure of a set_* / add_tensor call */
    char err_msg[400];
};

/* Remember the first failure so _write can report it with its message. */
static hx_status w_fail(hx_gguf_writer *w, hx_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static hx_status w_fail(hx_gguf_writer *w, hx_status s, const char *fmt, ...) {
    if (w && !w->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(w->err_msg, sizeof w->err_msg, fmt, ap);
        va_end(ap);
        w->err = s;
    }
    return s;
}

hx_gguf_writer *hx_gguf_writer_new(uint32_t alignment) {
    hx_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = alignment ? alignment : 32;
    if (alignment && alignment != 32) hx_gguf_writer_set_u32(w, "general.alignment", alignment);
    return w;
}

void hx_gguf_writer_free(hx_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key); free(w->kv[i].blob); }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

/* Store a serialized value under key (replacing an existing one). Takes b. */
static hx_status put_kv(hx_gguf_writer *w, const char *key, bbuf *b) {
    if (b->oom) { free(b->p); return w_fail(w, HX_ERR_NOMEM, "kv '%s': out of memory", key); }
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, key)) {
            free(w->kv[i].blob);
            w->kv[i].blob = b->p;
            w->kv[i].len = b->n;
            return HX_OK;
        }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *p = realloc(w->kv, cap * sizeof *p);
        if (!p) { free(b->p); return w_fail(w, HX_ERR_NOMEM, "kv '%s': out of memory", key); }
        w->kv = p;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) { free(b->p); return w_fail(w, HX_ERR_NOMEM, "kv '%s': out of memory", key); }
    w->kv[w->n_kv++] = (wkv){k, b->p, b->n};
    return HX_OK;
}

static hx_status check_key(hx_gguf_writer *w, const char *key) {
    if (!w) return HX_ERR_ARG;
    if (!key || !*key) return w_fail(w, HX_ERR_ARG, "kv: empty or NULL key");
    return HX_OK;
}

/* Serialize the payload of v (no type tag) as an element/value of type t. */
static hx_status put_payload(hx_gguf_writer *w, const char *key, bbuf *b, hx_gguf_vtype t,
                             const hx_gguf_value *v, int depth) {
    if (v->type != t)
        return w_fail(w, HX_ERR_ARG, "kv '%s': value has type %s where %s was expected", key,
                      hx_gguf_vtype_name(v->type), hx_gguf_vtype_name(t));
    bool uok = true, sok = true;
    switch (t) {
    case HX_GGUF_U8:  uok = v->u64 <= UINT8_MAX;  { uint8_t x = (uint8_t)v->u64;  bb_put(b, &x, 1); } break;
    case HX_GGUF_U16: uok = v->u64 <= UINT16_MAX; { uint16_t x = (uint16_t)v->u64; bb_put(b, &x, 2); } break;
    case HX_GGUF_U32: uok = v->u64 <= UINT32_MAX; { uint32_t x = (uint32_t)v->u64; bb_put(b, &x, 4); } break;
    case HX_GGUF_U64: bb_u64(b, v->u64); break;
    case HX_GGUF_I8:  sok = v->i64 >= INT8_MIN && v->i64 <= INT8_MAX;   { int8_t x = (int8_t)v->i64;   bb_put(b, &x, 1); } break;
    case HX_GGUF_I16: sok = v->i64 >= INT16_MIN && v->i64 <= INT16_MAX; { int16_t x = (int16_t)v->i64; bb_put(b, &x, 2); } break;
    case HX_GGUF_I32: sok = v->i64 >= INT32_MIN && v->i64 <= INT32_MAX; { int32_t x = (int32_t)v->i64; bb_put(b, &x, 4); } break;
    case HX_GGUF_I64: { int64_t x = v->i64; bb_put(b, &x, 8); } break;
    case HX_GGUF_F32: { float x = (float)v->f64; bb_put(b, &x, 4); } break;
    case HX_GGUF_F64: bb_put(b, &v->f64, 8); break;
    case HX_GGUF_BOOL: { uint8_t x = v->b ? 1 : 0; bb_put(b, &x, 1); } break;
    case HX_GGUF_STRING:
        if (!v->str.ptr && v->str.len) return w_fail(w, HX_ERR_ARG, "kv '%s': NULL string", key);
        bb_u64(b, v->str.len);
        bb_put(b, v->str.ptr, (size_t)v->str.len);
        break;
    case HX_GGUF_ARRAY: {
        if (depth >= GGUF_MAX_ARRAY_DEPTH)
            return w_fail(w, HX_ERR_ARG, "kv '%s': arrays nested deeper than %d levels", key, GGUF_MAX_ARRAY_DEPTH);
        hx_gguf_vtype et = v->arr.elem_type;
        if ((unsigned)et >= HX_GGUF_VTYPE_COUNT)
            return w_fail(w, HX_ERR_ARG, "kv '%s': unknown array element type %d", key, (int)et);
        bb_u32(b, (uint32_t)et);
        bb_u64(b, v->arr.count);
        size_t esz = hx_gguf_vtype_size(et);
        if (esz) {
            uint64_t total;
            if (!hx_mul_ok(v->arr.count, esz, &total) || total > SIZE_MAX)
                return w_fail(w, HX_ERR_ARG, "kv '%s': array of %" PRIu64 " elements too large", key, v->arr.count);
            if (total && !v->arr.data) return w_fail(w, HX_ERR_ARG, "kv '%s': NULL array data", key);
            if (et == HX_GGUF_BOOL)
                for (uint64_t i = 0; i < total; i++)
                    if (((const uint8_t *)v->arr.data)[i] > 1)
                        return w_fail(w, HX_ERR_ARG, "kv '%s': bool element %" PRIu64 " is not 0/1", key, i);
            bb_put(b, v->arr.data, (size_t)total);
        } else {
            if (v->arr.count && !v->arr.elems)
                return w_fail(w, HX_ERR_ARG, "kv '%s': NULL array elements", key);
            for (uint64_t i = 0; i < v->arr.count; i++) {
                hx_status s = put_payload(w, key, b, et, &v->arr.elems[i], depth + 1);
                if (s) return s;
            }
        }
        break;
    }
    default:
        return w_fail(w, HX_ERR_ARG, "kv '%s': unknown value type %d", key, (int)t);
    }
    if (!uok || !sok)
        return w_fail(w, HX_ERR_RANGE, "kv '%s': value does not fit in %s", key, hx_gguf_vtype_name(t));
    return HX_OK;
}

hx_status hx_gguf_writer_set_value(hx_gguf_writer *w, const char *key, const hx_gguf_value *v) {
    hx_status s = check_key(w, key);
    if (s) return s;
    if (!v) return w_fail(w, HX_ERR_ARG, "kv '%s': NULL value", key);
    bbuf b = {0};
    bb_u32(&b, (uint32_t)v->type);
    if ((s = put_payload(w, key, &b, v->type, v, 0))) { free(b.p); return s; }
    return put_kv(w, key, &b);
}

hx_status hx_gguf_writer_set_u32(hx_gguf_writer *w, const char *key, uint32_t v) {
    hx_gguf_value x = {.type = HX_GGUF_U32, .u64 = v};
    return hx_gguf_writer_set_value(w, key, &x);
}
hx_status hx_gguf_writer_set_i32(hx_gguf_writer *w, const char *key, int32_t v) {
    hx_gguf_value x = {.type = HX_GGUF_I32, .i64 = v};
    return hx_gguf_writer_set_value(w, key, &x);
}
hx_status hx_gguf_writer_set_u64(hx_gguf_writer *w, const char *key, uint64_t v) {
    hx_gguf_value x = {.type = HX_GGUF_U64, .u64 = v};
    return hx_gguf_writer_set_value(w, key, &x);
}
hx_status hx_gguf_writer_set_f32(hx_gguf_writer *w, const char *key, float v) {
    hx_gguf_value x = {.type = HX_GGUF_F32, .f64 = v};
    return hx_gguf_writer_set_value(w, key, &x);
}
hx_status hx_gguf_writer_set_bool(hx_gguf_writer *w, const char *key, bool v) {
    hx_gguf_value x = {.type = HX_GGUF_BOOL, .b = v};
    return hx_gguf_writer_set_value(w, key, &x);
}
hx_status hx_gguf_writer_set_str(hx_gguf_writer *w, const char *key, const char *v) {
    if (!v) return w_fail(w, HX_ERR_ARG, "kv '%s': NULL string", key ? key : "?");
    hx_gguf_value x = {.type = HX_GGUF_STRING, .str = {v, strlen(v)}};
    return hx_gguf_writer_set_value(w, key, &x);
}

hx_status hx_gguf_writer_set_arr(hx_gguf_writer *w, const char *key, hx_gguf_vtype elem_type,
                                 const void *data, uint64_t count) {
    hx_status s = check_key(w, key);
    if (s) return s;
    if (!hx_gguf_vtype_size(elem_type))
        return w_fail(w, HX_ERR_ARG, "kv '%s': set_arr needs a fixed-size element type, not %s", key,
                      hx_gguf_vtype_name(elem_type));
    hx_gguf_value x = {.type = HX_GGUF_ARRAY};
    x.arr.elem_type = elem_type;
    x.arr.count = count;
    x.arr.data = data;
    return hx_gguf_writer_set_value(w, key, &x);
}

hx_status hx_gguf_writer_set_arr_str(hx_gguf_writer *w, const char *key, const char *const *strs,
                                     const uint64_t *lens, uint64_t count) {
    hx_status s = check_key(w, key);
    if (s) return s;
    if (count && !strs) return w_fail(w, HX_ERR_ARG, "kv '%s': NULL string array", key);
    /* serialize directly: no need for a temporary element table */
    bbuf b = {0};
    bb_u32(&b, HX_GGUF_ARRAY);
    bb_u32(&b, HX_GGUF_STRING);
    bb_u64(&b, count);
    for (uint64_t i = 0; i < count; i++) {
        if (!strs[i] && (!lens || lens[i])) { free(b.p); return w_fail(w, HX_ERR_ARG, "kv '%s': string %" PRIu64 " is NULL", key, i); }
        uint64_t n = lens ? lens[i] : strlen(strs[i]);
        bb_u64(&b, n);
        bb_put(&b, strs[i], (size_t)n);
    }
    return put_kv(w, key, &b);
}

hx_status hx_gguf_writer_copy_kv(hx_gguf_writer *w, const hx_gguf_kv *kv) {
    if (!w) return HX_ERR_ARG;
    if (!kv || !kv->key.ptr || !kv->key.len || kv->key.len > 65535)
        return w_fail(w, HX_ERR_ARG, "copy_kv: bad kv");
    char *key = malloc((size_t)kv->key.len + 1);
    if (!key) return w_fail(w, HX_ERR_NOMEM, "copy_kv: out of memory");
    memcpy(key, kv->key.ptr, (size_t)kv->key.len);
    key[kv->key.len] = 0;
    hx_status s = hx_gguf_writer_set_value(w, key, &kv->value);
    free(key);
    return s;
}

hx_status hx_gguf_writer_add_tensor(hx_gguf_writer *w, const char *name, int type, int n_dims,
                                    const int64_t *ne, const void *data) {
    if (!w) return HX_ERR_ARG;
    if (!name || !*name) return w_fail(w, HX_ERR_ARG, "tensor: empty or NULL name");
    if (strlen(name) >= GGUF_MAX_NAME)
        return w_fail(w, HX_ERR_ARG, "tensor '%s': name longer than %d bytes (llama.cpp limit)", name, GGUF_MAX_NAME - 1);
    const hx_type_info *ti = hx_type_get(type);
    if (!ti) return w_fail(w, HX_ERR_ARG, "tensor '%s': unknown type %d", name, type);
    if (n_dims < 1 || n_dims > 4 || !ne)
        return w_fail(w, HX_ERR_ARG, "tensor '%s': n_dims %d not in 1..4", name, n_dims);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}, .data = data};
    uint64_t n_el = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0 || !hx_mul_ok(n_el, (uint64_t)ne[d], &n_el) || n_el > (uint64_t)INT64_MAX)
            return w_fail(w, HX_ERR_ARG, "tensor '%s': bad dim %d = %" PRId64, name, d, ne[d]);
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % ti->block_size)
        return w_fail(w, HX_ERR_ARG, "tensor '%s': row length %" PRId64 " is not a multiple of %s block size %d",
                      name, t.ne[0], ti->name, ti->block_size);
    uint64_t nb = hx_row_size(type, t.ne[0]);
    for (int d = 1; d < 4; d++)
        if (!hx_mul_ok(nb, (uint64_t)t.ne[d], &nb))
            return w_fail(w, HX_ERR_ARG, "tensor '%s': size overflows", name);
    if (nb && !data) return w_fail(w, HX_ERR_ARG, "tensor '%s': NULL data", name);
    t.n_bytes = nb;
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return w_fail(w, HX_ERR_ARG, "tensor '%s': duplicate name", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *p = realloc(w->t, cap * sizeof *p);
        if (!p) return w_fail(w, HX_ERR_NOMEM, "tensor '%s': out of memory", name);
        w->t = p;
        w->cap_t = cap;
    }
    if (!(t.name = strdup(name))) return w_fail(w, HX_ERR_NOMEM, "tensor '%s': out of memory", name);
    w->t[w->n_t++] = t;
    return HX_OK;
}

/* ------------------------------------------------------------------------ */
/* Streaming output                                                         */

typedef struct wstream {
    int fd;
    uint64_t pos;        /* bytes accepted so far */
    size_t n;            /* bytes in buf */
    int err;             /* errno of the first failed write */
    uint8_t buf[1 << 16];
} wstream;

static void ws_raw(wstream *s, const void *p, size_t n) {
    const uint8_t *c = p;
    while (n && !s->err) {
        ssize_t k = write(s->fd, c, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0) {
            if (errno == EINTR) continue;
            s->err = errno;
            return;
        }
        c += k;
        n -= (size_t)k;
    }
}

static void ws_flush(wstream *s) { ws_raw(s, s->buf, s->n); s->n = 0; }

static void ws_put(wstream *s, const void *p, size_t n) {
    if (n == 0) return; /* p may be NULL for 0-byte tensors */
    s->pos += n;
    if (s->n + n > sizeof s->buf) ws_flush(s);
    if (n >= sizeof s->buf) { ws_raw(s, p, n); return; }
    memcpy(s->buf + s->n, p, n);
    s->n += n;
}

static void ws_u32(wstream *s, uint32_t v) { ws_put(s, &v, 4); }
static void ws_u64(wstream *s, uint64_t v) { ws_put(s, &v, 8); }
static void ws_str(wstream *s, const char *p) { size_t n = strlen(p); ws_u64(s, n); ws_put(s, p, n); }
static void ws_pad(wstream *s, uint64_t align) {
    static const uint8_t zeros[256];
    uint64_t pad = (align - s->pos % align) % align;
    while (pad) { size_t k = pad > sizeof zeros ? sizeof zeros : (size_t)pad; ws_put(s, zeros, k); pad -= k; }
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* The alignment that will be written: a general.alignment kv wins over _new's. */
static hx_status out_alignment(hx_gguf_writer *w, uint64_t *align, hx_error *e, const char *path) {
    *align = w->alignment;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment")) continue;
        uint32_t t, v;
        memcpy(&t, w->kv[i].blob, 4);
        if (t != HX_GGUF_U32)
            return hx_err(e, HX_ERR_ARG, "%s: kv 'general.alignment' must be u32, is %s", path, hx_gguf_vtype_name(t));
        memcpy(&v, w->kv[i].blob + 4, 4);
        if (!v || (v & (v - 1)))
            return hx_err(e, HX_ERR_ARG, "%s: kv 'general.alignment' = %u is not a power of two", path, v);
        *align = v;
    }
    if (!*align || (*align & (*align - 1)))
        return hx_err(e, HX_ERR_ARG, "%s: alignment %" PRIu64 " is not a power of two", path, *align);
    return HX_OK;
}

hx_status hx_gguf_writer_add_tensor_cb(hx_gguf_writer *w, const char *name, int type, int n_dims,
                                       const int64_t *ne, hx_gguf_fill_fn fill, void *ctx) {
    if (!w) return HX_ERR_ARG;
    if (!fill) return w_fail(w, HX_ERR_ARG, "tensor '%s': NULL fill callback", name ? name : "?");
    static const char placeholder = 0; /* validated like a real pointer, never read */
    size_t before = w->n_t;
    hx_status st = hx_gguf_writer_add_tensor(w, name, type, n_dims, ne, &placeholder);
    if (st || w->n_t != before + 1) return st;
    w->t[before].data = NULL;
    w->t[before].fill = fill;
    w->t[before].fill_ctx = ctx;
    return HX_OK;
}

hx_status hx_gguf_writer_write(hx_gguf_writer *w, const char *path, hx_error *e) {
    if (!w || !path) return hx_err(e, HX_ERR_ARG, "gguf writer: NULL writer or path");
    if (w->err) return hx_err(e, w->err, "%s: %s", path, w->err_msg);
    uint64_t align;
    hx_status st = out_alignment(w, &align, e, path);
    if (st) return st;

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 32);
    wstream *s = malloc(sizeof *s);
    if (!tmp || !s) { free(tmp); free(s); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = hx_err(e, HX_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
        free(tmp); free(s);
        return st;
    }
    *s = (wstream){.fd = fd};

    /* header */
    ws_put(s, "GGUF", 4);
    ws_u32(s, GGUF_VERSION_OUT);
    ws_u64(s, w->n_t);
    ws_u64(s, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        ws_str(s, w->kv[i].key);
        ws_put(s, w->kv[i].blob, w->kv[i].len);
    }
    /* tensor infos: offsets relative to the data section, each padded */
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        ws_str(s, t->name);
        ws_u32(s, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) ws_u64(s, (uint64_t)t->ne[d]);
        ws_u32(s, (uint32_t)t->type);
        ws_u64(s, off);
        off = pad_to(off + t->n_bytes, align);
    }
    ws_pad(s, align);
    /* data section */
    st = HX_OK;
    for (size_t i = 0; i < w->n_t && !s->err && !st; i++) {
        const wtensor *t = &w->t[i];
        if (t->fill) {
            void *buf = malloc(t->n_bytes ? (size_t)t->n_bytes : 1);
            if (!buf) { st = hx_err(e, HX_ERR_NOMEM, "%s: out of memory for tensor '%s'", path, t->name); break; }
            st = t->fill(t->fill_ctx, buf, t->n_bytes, e);
            if (!st) ws_put(s, buf, (size_t)t->n_bytes);
            free(buf);
        } else {
            ws_put(s, t->data, (size_t)t->n_bytes);
        }
        ws_pad(s, align);
    }
    if (st) {
        free(s);
        close(fd); unlink(tmp); free(tmp);
        return st;
    }
    ws_flush(s);
    int werr = s->err;
    free(s);
    if (werr) {
        st = hx_err(e, HX_ERR_IO, "%s: write failed: %s", tmp, strerror(werr));
        close(fd); unlink(tmp); free(tmp);
        return st;
    }
    st = hx_commit_file(fd, tmp, path, e);
    free(tmp);
    return st;
}
