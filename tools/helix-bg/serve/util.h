/* util.h — small helpers of helix-bg serve: a growable byte buffer, UTF-8
 * checks, base64, a monotonic clock. No libhelix internals. */
#ifndef HX_SERVE_UTIL_H
#define HX_SERVE_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Growable bytes, always NUL-terminated when p != NULL. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool oom;          /* an append failed: the contents are incomplete */
} sbuf;

void sbuf_add(sbuf *b, const char *s, size_t n);
void sbuf_adds(sbuf *b, const char *s);
void sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void sbuf_consume(sbuf *b, size_t n);
void sbuf_free(sbuf *b);
/* Takes the text out (the caller frees it); b is left empty. */
char *sbuf_take(sbuf *b);

/* Length of the longest valid UTF-8 prefix of s[0..n) (RFC 3629: no
 * overlongs, no surrogates, nothing above U+10FFFF). */
size_t utf8_valid_prefix(const char *s, size_t n);
static inline bool utf8_valid(const char *s, size_t n) { return utf8_valid_prefix(s, n) == n; }
/* s[0..n) with every invalid byte sequence replaced by U+FFFD; malloc'ed, NUL-terminated. */
char *utf8_sanitize(const char *s, size_t n);

/* Standard base64 (with padding) of n bytes; malloc'ed. */
char *base64_encode(const void *data, size_t n);

/* Seconds on a monotonic clock. */
double util_now(void);
/* Constant-time equality of two NUL-terminated strings (API keys). */
bool util_secret_eq(const char *a, const char *b);

#endif
