/* gguf.h — GGUF v2/v3 reader (mmap, zero-copy, validated) and writer.
 *
 * File layout (little-endian):
 *   magic "GGUF" | version u32 (2 or 3) | n_tensors u64 | n_kv u64
 *   n_kv x { key: string | value_type u32 | value }
 *   n_tensors x { name: string | n_dims u32 (1..4) | dims u64[n_dims]
 *                 | type u32 (hx_type) | offset u64 (relative to data section) }
 *   padding to general.alignment (default 32)
 *   data section: tensors at their offsets, each aligned to general.alignment
 * string = len u64 | bytes (no NUL). array = elem_type u32 | count u64 | elems.
 * Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
 *              9 array, 10 u64, 11 i64, 12 f64.
 * dims[0] is the fastest-varying (row length, "ne0" in ggml).
 */
#ifndef HX_GGUF_H
#define HX_GGUF_H

#include "helix.h"

typedef enum hx_gguf_vtype {
    HX_GGUF_U8 = 0, HX_GGUF_I8 = 1, HX_GGUF_U16 = 2, HX_GGUF_I16 = 3,
    HX_GGUF_U32 = 4, HX_GGUF_I32 = 5, HX_GGUF_F32 = 6, HX_GGUF_BOOL = 7,
    HX_GGUF_STRING = 8, HX_GGUF_ARRAY = 9, HX_GGUF_U64 = 10, HX_GGUF_I64 = 11,
    HX_GGUF_F64 = 12,
    HX_GGUF_VTYPE_COUNT
} hx_gguf_vtype;

/* A string inside the mapping: NOT NUL-terminated. */
typedef struct hx_gguf_str { const char *ptr; uint64_t len; } hx_gguf_str;

/* A metadata value. Scalars are decoded and widened: u8/u16/u32/u64 into .u64,
 * i8/i16/i32/i64 into .i64, f32/f64 into .f64, bool into .b; strings point into the mapping;
 * arrays keep a pointer to their raw little-endian payload plus, for arrays of
 * strings or arrays, a parsed element table. */
typedef struct hx_gguf_value hx_gguf_value;
struct hx_gguf_value {
    hx_gguf_vtype type;
    union {
        uint64_t u64; int64_t i64; double f64; /* every numeric scalar widened */
        bool b;
        hx_gguf_str str;
        struct {
            hx_gguf_vtype elem_type;
            uint64_t count;
            const void *data;        /* raw elements when elem_type is a fixed-size scalar */
            hx_gguf_value *elems;    /* parsed elements when elem_type is STRING or ARRAY; else NULL */
        } arr;
    };
};

typedef struct hx_gguf_kv {
    hx_gguf_str key;
    hx_gguf_value value;
    uint64_t file_offset;  /* where the key starts, for messages */
} hx_gguf_kv;

typedef struct hx_gguf_tensor {
    hx_gguf_str name;
    int type;              /* hx_type (see quant/quant.h) */
    int n_dims;            /* 1..4 */
    int64_t ne[4];         /* dims, ne[0] fastest; unused dims = 1 */
    uint64_t offset;       /* relative to the data section */
    uint64_t n_bytes;      /* validated size of the data */
    const void *data;      /* into the mapping */
} hx_gguf_tensor;

typedef struct hx_gguf {
    char *path;
    uint32_t version;
    uint64_t n_kv;
    hx_gguf_kv *kv;
    uint64_t n_tensors;
    hx_gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;  /* file offset of the data section */
    const uint8_t *map;    /* whole file */
    uint64_t file_size;
    /* private */
    void *priv;
} hx_gguf;

typedef struct hx_gguf_open_opts {
    bool prefault;   /* touch every page of the mapping once at load */
} hx_gguf_open_opts;

/* Open and validate a GGUF file. On failure *out is NULL and e->msg reads like
 * "model.gguf: offset 1234: tensor 'blk.0.attn_q.weight': data extends past end of file". */
hx_status hx_gguf_open(const char *path, const hx_gguf_open_opts *opts, hx_gguf **out, hx_error *e);
/* Parse from a memory buffer (no copy: buf must outlive the result). name is used in messages. */
hx_status hx_gguf_open_memory(const void *buf, size_t n, const char *name, hx_gguf **out, hx_error *e);
void hx_gguf_close(hx_gguf *g);

/* Lookups (NULL / -1 when absent). */
const hx_gguf_kv *hx_gguf_find_kv(const hx_gguf *g, const char *key);
const hx_gguf_tensor *hx_gguf_find_tensor(const hx_gguf *g, const char *name);
/* Typed getters: return false if absent or of an incompatible type. Integers of
 * any width convert when the value fits. */
bool hx_gguf_get_u64(const hx_gguf *g, const char *key, uint64_t *out);
bool hx_gguf_get_i64(const hx_gguf *g, const char *key, int64_t *out);
bool hx_gguf_get_f64(const hx_gguf *g, const char *key, double *out); /* also from integer/float types */
bool hx_gguf_get_bool(const hx_gguf *g, const char *key, bool *out);
bool hx_gguf_get_str(const hx_gguf *g, const char *key, hx_gguf_str *out);
/* Array access; returns the array value or NULL. elem_type HX_GGUF_VTYPE_COUNT
 * matches any element type. Scalar elements are raw little-endian and possibly
 * unaligned in arr.data: read them with hx_gguf_arr_f64 / hx_gguf_arr_i64. */
const hx_gguf_value *hx_gguf_get_arr(const hx_gguf *g, const char *key, hx_gguf_vtype elem_type);
/* Element i of a numeric array as double / int64 (array already validated). */
double  hx_gguf_arr_f64(const hx_gguf_value *arr, uint64_t i);
int64_t hx_gguf_arr_i64(const hx_gguf_value *arr, uint64_t i);
const char *hx_gguf_vtype_name(hx_gguf_vtype t);
/* Bytes of one element of a fixed-size scalar type; 0 for string, array, unknown. */
size_t hx_gguf_vtype_size(hx_gguf_vtype t);
/* Compare a gguf string with a C string. */
bool hx_gguf_str_eq(hx_gguf_str s, const char *c);

/* ---- writer ----
 * Build metadata and tensor list in memory, then stream to disk (temp file +
 * rename). Tensor data is provided by pointer at add time (copied at write
 * time, so it must stay valid until hx_gguf_writer_write returns). */
typedef struct hx_gguf_writer hx_gguf_writer;
hx_gguf_writer *hx_gguf_writer_new(uint32_t alignment /* 0 = 32 */);
void hx_gguf_writer_free(hx_gguf_writer *w);
hx_status hx_gguf_writer_set_u32(hx_gguf_writer *w, const char *key, uint32_t v);
hx_status hx_gguf_writer_set_i32(hx_gguf_writer *w, const char *key, int32_t v);
hx_status hx_gguf_writer_set_u64(hx_gguf_writer *w, const char *key, uint64_t v);
hx_status hx_gguf_writer_set_f32(hx_gguf_writer *w, const char *key, float v);
hx_status hx_gguf_writer_set_bool(hx_gguf_writer *w, const char *key, bool v);
hx_status hx_gguf_writer_set_str(hx_gguf_writer *w, const char *key, const char *v);
/* Arrays of fixed-size scalars (data copied). */
hx_status hx_gguf_writer_set_arr(hx_gguf_writer *w, const char *key, hx_gguf_vtype elem_type,
                                 const void *data, uint64_t count);
/* Array of strings (copied). lens may be NULL for NUL-terminated strings. */
hx_status hx_gguf_writer_set_arr_str(hx_gguf_writer *w, const char *key, const char *const *strs,
                                     const uint64_t *lens, uint64_t count);
/* Any value: every scalar type (taken from the widened field, range-checked),
 * strings, arrays of scalars (from arr.data, raw little-endian), arrays of
 * strings or arrays (from arr.elems), nested up to 8 levels. Copied. */
hx_status hx_gguf_writer_set_value(hx_gguf_writer *w, const char *key, const hx_gguf_value *v);
/* Copy one kv (any type, including nested arrays) from an open file. */
hx_status hx_gguf_writer_copy_kv(hx_gguf_writer *w, const hx_gguf_kv *kv);
/* ne[0] fastest. data must hold hx_row_size(type, ne[0]) * ne[1]*ne[2]*ne[3] bytes. */
hx_status hx_gguf_writer_add_tensor(hx_gguf_writer *w, const char *name, int type, int n_dims,
                                    const int64_t *ne, const void *data);
/* Streaming variant for tensors too large to hold all at once (synth of an 8B
 * model): fill(ctx, buf, n_bytes, e) produces the tensor's bytes at write time,
 * one tensor in memory at a time; a failing fill aborts the write (no file). */
typedef hx_status (*hx_gguf_fill_fn)(void *ctx, void *buf, uint64_t n_bytes, hx_error *e);
hx_status hx_gguf_writer_add_tensor_cb(hx_gguf_writer *w, const char *name, int type, int n_dims,
                                       const int64_t *ne, hx_gguf_fill_fn fill, void *ctx);
/* Setting a key that exists replaces its value in place (order kept). The first
 * failing set_* / add_tensor call is remembered and reported by _write. A
 * general.alignment kv (u32, power of two) overrides the alignment given to _new.
 * Output: GGUF v3, tensors in add order, each padded to the alignment, written to
 * path.tmp.<pid>, fsync'd, renamed over path. */
hx_status hx_gguf_writer_write(hx_gguf_writer *w, const char *path, hx_error *e);

#endif
