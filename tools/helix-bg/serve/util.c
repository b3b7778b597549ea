/* util.c — byte buffer, UTF-8, base64, clock (see util.h). */
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool sbuf_reserve(sbuf *b, size_t extra) {
    if (b->oom) return false;
    if (extra > SIZE_MAX / 2 - b->len) { b->oom = true; return false; }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) { b->oom = true; return false; }
    b->p = p;
    b->cap = cap;
    return true;
}

void sbuf_add(sbuf *b, const char *s, size_t n) {
    if (!sbuf_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void sbuf_adds(sbuf *b, const char *s) { sbuf_add(b, s, strlen(s)); }

void sbuf_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !sbuf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void sbuf_consume(sbuf *b, size_t n) {
    if (n >= b->len) { b->len = 0; if (b->p) b->p[0] = 0; return; }
    memmove(b->p, b->p + n, b->len - n);
    b->len -= n;
    b->p[b->len] = 0;
}

void sbuf_free(sbuf *b) {
    free(b->p);
    *b = (sbuf){0};
}

char *sbuf_take(sbuf *b) {
    char *p = b->p;
    if (!p) p = calloc(1, 1);
    *b = (sbuf){0};
    return p;
}

/* Bytes of the character starting at s (1..4), or 0 when it is not valid UTF-8. */
static size_t utf8_char(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;          /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;          /* nothing above U+10FFFF */
    } else return 0;
    if (n < len) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

size_t utf8_valid_prefix(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        size_t k = utf8_char(u + i, n - i);
        if (!k) return i;
        i += k;
    }
    return n;
}

char *utf8_sanitize(const char *s, size_t n) {
    sbuf b = {0};
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t k = utf8_char(u + i, n - i);
        if (k) { sbuf_add(&b, s + i, k); i += k; }
        else { sbuf_add(&b, "\xEF\xBF\xBD", 3); i++; }
    }
    if (b.oom) { sbuf_free(&b); return NULL; }
    return sbuf_take(&b);
}

char *base64_encode(const void *data, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *d = data;
    size_t out_len = (n + 2) / 3 * 4;
    char *o = malloc(out_len + 1);
    if (!o) return NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16;
        if (i + 1 < n) v |= (uint32_t)d[i + 1] << 8;
        if (i + 2 < n) v |= d[i + 2];
        o[j++] = tab[(v >> 18) & 63];
        o[j++] = tab[(v >> 12) & 63];
        o[j++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        o[j++] = i + 2 < n ? tab[v & 63] : '=';
    }
    o[j] = 0;
    return o;
}

double util_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

bool util_secret_eq(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < lb; i++) diff |= (unsigned char)(a[i % (la ? la : 1)] ^ b[i]);
    return diff == 0 && la == lb;
}
