/* core.h — small shared helpers: errors, logging, fp16/bf16, RNG, hashing, time, sizes. */
#ifndef HX_CORE_H
#define HX_CORE_H

#include "helix.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Set e (if non-NULL) to status s with a printf-style message; returns s. */
hx_status hx_err(hx_error *e, hx_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prefix an existing message ("ctx: old message"). Returns e->status. */
hx_status hx_err_prefix(hx_error *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void hx_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define HX_WARN(...) hx_log(1, __VA_ARGS__)
#define HX_INFO(...) hx_log(2, __VA_ARGS__)
#define HX_DEBUG(...) hx_log(3, __VA_ARGS__)

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool hx_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool hx_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ---- half precision ---- */
static inline float hx_f32_from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t hx_bits_from_f32(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* IEEE binary16 -> binary32, exact for all inputs (incl. subnormals, inf, nan). */
static inline float hx_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0) return hx_f32_from_bits(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31) return hx_f32_from_bits(sign | 0x7f800000u | (man << 13));
    return hx_f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}
/* binary32 -> binary16, round to nearest even (as F16C / numpy do). */
uint16_t hx_fp32_to_fp16(float f);
static inline float hx_bf16_to_fp32(uint16_t h) { return hx_f32_from_bits((uint32_t)h << 16); }
/* binary32 -> bfloat16, round to nearest even; NaN stays NaN (as ggml). */
static inline uint16_t hx_fp32_to_bf16(float f) {
    uint32_t u = hx_bits_from_f32(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

/* ---- RNG: xoshiro256** seeded by splitmix64; deterministic across platforms ---- */
typedef struct hx_rng { uint64_t s[4]; } hx_rng;
void     hx_rng_seed(hx_rng *r, uint64_t seed);
uint64_t hx_rng_u64(hx_rng *r);
float    hx_rng_uniform(hx_rng *r);  /* [0,1) */
float    hx_rng_normal(hx_rng *r);   /* N(0,1) */

/* ---- hashing: FNV-1a 64 ----
 * The values key caches, fingerprints and files on disk: never change them. */
#define HX_FNV_INIT 0xcbf29ce484222325ull
/* The offset basis short of its last decimal digit (1469598103934665603, not
 * ...6037): the start value some older hashes took. Kept where they still use it,
 * since their values are stored (kb caches, insights.state) or fix table order. */
#define HX_FNV_INIT_SHORT 1469598103934665603ull
/* One FNV-1a 64 step: mix byte c into h. */
static inline uint64_t hx_fnv1a_byte(uint64_t h, unsigned char c) { return (h ^ c) * 0x100000001b3ull; }
/* FNV-1a 64 of n bytes at p, continuing from h (HX_FNV_INIT to start). */
static inline uint64_t hx_fnv1a(const void *p, size_t n, uint64_t h) {
    const unsigned char *s = (const unsigned char *)p; /* cast: core.h is also C++ (CUDA) */
    for (size_t i = 0; i < n; i++) h = hx_fnv1a_byte(h, s[i]);
    return h;
}
/* The same over a NUL-terminated string, without the NUL; s NULL hashes as "". */
static inline uint64_t hx_fnv1a_str(const char *s, uint64_t h) {
    for (; s && *s; s++) h = hx_fnv1a_byte(h, (unsigned char)*s);
    return h;
}

/* ---- time ---- */
double hx_now_s(void); /* monotonic seconds */

/* ---- files ---- */
/* Create a new temp file beside path, "path.tmp.<pid>.<random hex>" (cap >= strlen(path) + 48
 * bytes for its name in tmp), opened O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW: never through a
 * planted symlink, never over an existing file. Returns the fd, or -1 with e set. */
int hx_create_temp(const char *path, char *tmp, size_t cap, hx_error *e);
/* Write buf to path atomically: a temp file from hx_create_temp, fsync, rename
 * over path (a symlink at path is replaced, not followed), fsync dir. */
hx_status hx_write_file_atomic(const char *path, const void *buf, size_t n, hx_error *e);
/* The end of every atomic write: fsync and close fd (open on tmp), rename tmp
 * over path, fsync the directory. On failure tmp is removed. fd is closed either way. */
hx_status hx_commit_file(int fd, const char *tmp, const char *path, hx_error *e);
/* Read a whole file into a malloc'd NUL-terminated buffer. */
hx_status hx_read_file(const char *path, char **out, size_t *n, hx_error *e);

#endif
