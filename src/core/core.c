/* core.c — errors, logging, fp16 rounding, RNG, clock, atomic file writes. */
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/stat.h>

static int g_log_level = 1;

void hx_set_log_level(int level) { g_log_level = level; }
int hx_log_level(void) { return g_log_level; }
void hx_free(void *p) { free(p); }

const char *hx_status_str(hx_status s) {
    switch (s) {
    case HX_OK: return "ok";
    case HX_ERR_IO: return "I/O error";
    case HX_ERR_FORMAT: return "bad format";
    case HX_ERR_NOMEM: return "out of memory";
    case HX_ERR_ARG: return "bad argument";
    case HX_ERR_UNSUPPORTED: return "unsupported";
    case HX_ERR_RANGE: return "out of range";
    case HX_ERR_DEVICE: return "device error";
    case HX_ERR_CANCELLED: return "cancelled";
    case HX_ERR_KV_FULL: return "KV cache full";
    }
    return "unknown status";
}

hx_status hx_err(hx_error *e, hx_status s, const char *fmt, ...) {
    if (e) {
        e->status = s;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return s;
}

hx_status hx_err_prefix(hx_error *e, const char *fmt, ...) {
    if (!e) return HX_ERR_ARG;
    char pre[256], old[sizeof e->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%s: %s", pre, old);
    return e->status;
}

void hx_log(int level, const char *fmt, ...) {
    if (level > g_log_level) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

uint16_t hx_fp32_to_fp16(float f) {
    uint32_t x = hx_bits_from_f32(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff)); /* NaN */
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (ax < 0x38800000) {
        /* subnormal or zero in half: round(|f| * 2^24) with ties to even */
        float a = hx_f32_from_bits(ax) * 16777216.0f;
        uint32_t m = (uint32_t)a;
        float rem = a - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t exp = ((ax >> 23) - 112) << 10;
    uint32_t man = ax & 0x7fffff;
    uint32_t h = exp | (man >> 13);
    uint32_t low = man & 0x1fff;
    if (low > 0x1000 || (low == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void hx_rng_seed(hx_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t hx_rng_u64(hx_rng *r) {
    uint64_t *s = r->s;
    uint64_t res = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return res;
}

float hx_rng_uniform(hx_rng *r) { return (float)(hx_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

float hx_rng_normal(hx_rng *r) {
    /* Box-Muller; one value per call keeps the state simple */
    double u1 = ((double)(hx_rng_u64(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(hx_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

double hx_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int hx_create_temp(const char *path, char *tmp, size_t cap, hx_error *e) {
    /* a fresh random name per try: an attacker who can write the directory
     * cannot predict it, and O_EXCL|O_NOFOLLOW refuses whatever is planted there */
    for (int attempt = 0; attempt < 16; attempt++) {
        uint64_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r)
            r = (uint64_t)(hx_now_s() * 1e9) ^ ((uint64_t)(uintptr_t)&r << 16) ^ (uint64_t)attempt;
        int k = snprintf(tmp, cap, "%s.tmp.%ld.%016llx", path, (long)getpid(), (unsigned long long)r);
        if (k < 0 || (size_t)k >= cap) { hx_err(e, HX_ERR_ARG, "%s: path too long for a temp name", path); return -1; }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) return fd;
        if (errno != EEXIST) { hx_err(e, HX_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno)); return -1; }
    }
    hx_err(e, HX_ERR_IO, "%s: cannot create a temp file beside it: 16 names taken", path);
    return -1;
}

hx_status hx_write_file_atomic(const char *path, const void *buf, size_t n, hx_error *e) {
    size_t cap = strlen(path) + 48;
    char *tmp = malloc(cap);
    if (!tmp) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    int fd = hx_create_temp(path, tmp, cap, e);
    if (fd < 0) { free(tmp); return e ? e->status : HX_ERR_IO; }
    const char *p = buf;
    size_t left = n;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            hx_status s = hx_err(e, HX_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
            close(fd); unlink(tmp); free(tmp);
            return s;
        }
        p += w; left -= (size_t)w;
    }
    hx_status s = hx_commit_file(fd, tmp, path, e);
    free(tmp);
    return s;
}

hx_status hx_commit_file(int fd, const char *tmp, const char *path, hx_error *e) {
    int r_sync = fsync(fd), r_errno = errno;
    int r_close = close(fd);
    if (r_sync != 0 || r_close != 0) {
        unlink(tmp);
        return hx_err(e, HX_ERR_IO, "%s: fsync/close failed: %s", tmp, strerror(r_sync ? r_errno : errno));
    }
    if (rename(tmp, path) != 0) {
        hx_status s = hx_err(e, HX_ERR_IO, "%s: rename failed: %s", path, strerror(errno));
        unlink(tmp);
        return s;
    }
    /* make the rename durable */
    char *dcopy = strdup(path);
    if (dcopy) {
        int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) { fsync(dfd); close(dfd); }
        free(dcopy);
    }
    return HX_OK;
}

hx_status hx_read_file(const char *path, char **out, size_t *n, hx_error *e) {
    *out = NULL;
    if (n) *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return hx_err(e, HX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (len < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) { free(buf); buf = NULL; break; }
        buf = nb;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory reading file", path);
    if (err) { free(buf); return hx_err(e, HX_ERR_IO, "%s: read error", path); }
    buf[len] = 0;
    *out = buf;
    if (n) *n = len;
    return HX_OK;
}
