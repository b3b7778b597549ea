/* test_util.h — a tiny test harness: CHECK macros, a failure count, skips.
 * A test executable returns 0 on success, 1 on failure, 77 when skipped. */
#ifndef HX_TEST_UTIL_H
#define HX_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int t_failures = 0, t_checks = 0;

#define CHECK(cond) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } } while (0)
#define CHECKF(cond, ...) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)
#define CHECK_NEAR(a, b, tol) do { double _a = (a), _b = (b); t_checks++; \
    if (!(fabs(_a - _b) <= (tol))) { t_failures++; \
    fprintf(stderr, "%s:%d: %s = %g, %s = %g, |diff| %g > %g\n", __FILE__, __LINE__, \
            #a, _a, #b, _b, fabs(_a - _b), (double)(tol)); } } while (0)

/* Path of ../shared (or $HX_SHARED); NULL when absent. */
static inline const char *t_shared_dir(void) {
    const char *env = getenv("HX_SHARED");
    const char *d = env && *env ? env : "../shared";
    struct stat st;
    return stat(d, &st) == 0 && S_ISDIR(st.st_mode) ? d : NULL;
}

/* Skip the whole test (exit 77) with a reason when ../shared is missing. */
static inline const char *t_require_shared(void) {
    const char *d = t_shared_dir();
    if (!d) { printf("SKIP: ../shared not found (set HX_SHARED); golden tests need it\n"); exit(77); }
    return d;
}

/* Outputs of a batch product y (toks x rows, y[t * rows + r]) that differ bit
 * for bit from the per-row kernel dot(n, out, w row r, x row t). */
static inline int t_gemm_bits_differ(void (*dot)(int64_t, float *, const void *, const void *), int64_t n,
                                     int64_t rows, int64_t toks, const uint8_t *w, size_t wr, const uint8_t *x,
                                     size_t xr, const float *y) {
    int bad = 0;
    for (int64_t t = 0; t < toks; t++)
        for (int64_t r = 0; r < rows; r++) {
            float want;
            dot(n, &want, w + r * wr, x + t * xr);
            bad += memcmp(&want, &y[t * rows + r], 4) != 0;
        }
    return bad;
}

static inline int t_done(const char *name) {
    printf("%s: %d checks, %d failed\n", name, t_checks, t_failures);
    return t_failures ? 1 : 0;
}

#endif
