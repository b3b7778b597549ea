/* test_core.c — fp16/bf16 conversion, RNG, FNV-1a, thread pool, atomic writes. */
#include "core/core.h"
#include "core/pool.h"
#include "test_util.h"

#include <stdatomic.h>
#include <unistd.h>

static void test_fp16(void) {
    /* every half value converts to float and back unchanged (NaNs stay NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hx_fp16_to_fp32((uint16_t)h);
        uint16_t back = hx_fp32_to_fp16(f);
        if (isnan(f)) CHECK(isnan(hx_fp16_to_fp32(back)));
        else CHECKF(back == h, "h=%04x f=%g back=%04x", h, f, back);
    }
    CHECK(hx_fp32_to_fp16(1.0f) == 0x3c00);
    CHECK(hx_fp32_to_fp16(65520.0f) == 0x7c00);     /* rounds to inf */
    CHECK(hx_fp32_to_fp16(65504.0f) == 0x7bff);
    CHECK(hx_fp32_to_fp16(1.0f + 1.0f / 2048) == 0x3c00); /* tie -> even */
    CHECK(hx_fp32_to_fp16(1.0f + 3.0f / 2048) == 0x3c02);
    CHECK(hx_fp32_to_fp16(5.9604645e-08f) == 0x0001); /* smallest subnormal */
    CHECK(hx_fp32_to_fp16(2.9802322e-08f) == 0x0000); /* half of it: tie -> even (0) */
    CHECK(hx_fp32_to_bf16(1.0f) == 0x3f80);
    CHECK(hx_bf16_to_fp32(0x3f80) == 1.0f);
}

static void test_rng(void) {
    hx_rng a, b;
    hx_rng_seed(&a, 42); hx_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) CHECK(hx_rng_u64(&a) == hx_rng_u64(&b));
    double sum = 0, sum2 = 0;
    int n = 100000;
    for (int i = 0; i < n; i++) { double x = hx_rng_normal(&a); sum += x; sum2 += x * x; }
    CHECK_NEAR(sum / n, 0.0, 0.02);
    CHECK_NEAR(sum2 / n, 1.0, 0.02);
}

typedef struct { atomic_int hits[1000]; } pool_ctx;
static void pool_task(void *ctx, int64_t t, int thread) {
    (void)thread;
    atomic_fetch_add(&((pool_ctx *)ctx)->hits[t], 1);
}

static void test_pool(void) {
    for (int nt = 1; nt <= 4; nt++) {
        hx_pool *p = hx_pool_create(nt);
        CHECK(p != NULL);
        for (int rep = 0; rep < 50; rep++) {
            pool_ctx *c = calloc(1, sizeof *c);
            int n = 1 + (rep * 37) % 1000;
            hx_pool_run(p, n, pool_task, c);
            int ok = 1;
            for (int i = 0; i < 1000; i++) ok &= (atomic_load(&c->hits[i]) == (i < n));
            CHECKF(ok, "threads=%d rep=%d: every task exactly once", nt, rep);
            free(c);
        }
        hx_pool_free(p);
    }
}

/* The pool's hand-off under churn: many tiny jobs back to back, jobs after
 * the workers fell asleep, a caller that must sleep until a slow worker is
 * done, jobs that run jobs on other pools, and shutdown in every state. */
typedef struct { atomic_long sum; int slow_us; hx_pool **inner; } churn_ctx;
static void churn_task(void *ctx, int64_t t, int thread) {
    churn_ctx *c = ctx;
    if (c->slow_us && thread != 0) usleep((useconds_t)c->slow_us);
    atomic_fetch_add(&c->sum, t + 1);
}
static void nested_task(void *ctx, int64_t t, int thread) {
    churn_ctx *c = ctx;
    churn_ctx in = { 0, 0, NULL };
    hx_pool_run(c->inner[thread], 7 + t % 5, churn_task, &in); /* one inner pool per outer thread */
    int64_t n = 7 + t % 5;
    atomic_fetch_add(&c->sum, atomic_load(&in.sum) == n * (n + 1) / 2 ? 1 : 1000000);
}

static void test_pool_churn(void) {
    for (int nt = 2; nt <= 3; nt++) {
        hx_pool *p = hx_pool_create(nt);
        CHECK(p != NULL && hx_pool_threads(p) == nt);
        long bad = 0;
        for (int rep = 0; rep < 20000; rep++) {
            if (rep % 2500 == 1) usleep(3000); /* past the spin: workers sleep, the next job wakes them */
            churn_ctx c = { 0, rep % 4000 == 7 ? 3000 : 0, NULL }; /* a slow worker: the caller sleeps on it */
            int64_t n = 2 + rep % 4;
            hx_pool_run(p, n, churn_task, &c);
            bad += atomic_load(&c.sum) != n * (n + 1) / 2; /* every task done when run returns */
        }
        CHECKF(bad == 0, "threads=%d: %ld of 20000 small jobs returned before all their tasks were done", nt, bad);
        hx_pool *inner[3];
        for (int i = 0; i < nt; i++) inner[i] = hx_pool_create(2);
        churn_ctx c = { 0, 0, inner };
        hx_pool_run(p, 64, nested_task, &c);
        CHECKF(atomic_load(&c.sum) == 64, "threads=%d: nested jobs on inner pools (sum %ld, want 64)", nt,
               atomic_load(&c.sum));
        for (int i = 0; i < nt; i++) hx_pool_free(inner[i]);
        hx_pool_free(p);
    }
    /* shutdown right after creation, right after a job, and with the workers asleep */
    for (int rep = 0; rep < 60; rep++) {
        hx_pool *p = hx_pool_create(2 + rep % 3);
        CHECK(p != NULL);
        if (rep % 3 >= 1) {
            churn_ctx c = { 0, 0, NULL };
            hx_pool_run(p, 16, churn_task, &c);
            CHECK(atomic_load(&c.sum) == 16 * 17 / 2);
        }
        if (rep % 3 == 2) usleep(2000);
        hx_pool_free(p);
    }
}

static void test_atomic_write(void) {
    char dir[] = "/tmp/hx_core_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/f.txt", dir);
    hx_error e = {0};
    CHECK(hx_write_file_atomic(path, "hello", 5, &e) == HX_OK);
    char *buf; size_t n;
    CHECK(hx_read_file(path, &buf, &n, &e) == HX_OK);
    CHECK(n == 5 && !memcmp(buf, "hello", 5));
    free(buf);
    CHECK(hx_read_file("/nonexistent/x", &buf, &n, &e) == HX_ERR_IO);
    CHECK(strstr(e.msg, "/nonexistent/x") != NULL);
    /* planted links: at the temp name the old code used (path.tmp.<pid>) and at
     * the destination. Neither victim may be written; path becomes a plain file. */
    char victim[256], victim2[256], old_tmp[300];
    snprintf(victim, sizeof victim, "%s/victim", dir);
    snprintf(victim2, sizeof victim2, "%s/victim2", dir);
    snprintf(old_tmp, sizeof old_tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(victim, "w"); fputs("precious", f); fclose(f);
    f = fopen(victim2, "w"); fputs("precious", f); fclose(f);
    unlink(path);
    CHECK(symlink(victim, old_tmp) == 0 && symlink(victim2, path) == 0);
    CHECK(hx_write_file_atomic(path, "new", 3, &e) == HX_OK);
    CHECK(hx_read_file(victim, &buf, &n, &e) == HX_OK && n == 8 && !memcmp(buf, "precious", 8));
    free(buf);
    CHECK(hx_read_file(victim2, &buf, &n, &e) == HX_OK && n == 8 && !memcmp(buf, "precious", 8));
    free(buf);
    struct stat sb;
    CHECK(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 3);
    /* hx_create_temp: a new file beside path, never an existing one */
    char tmp[400];
    int fd = hx_create_temp(path, tmp, sizeof tmp, &e);
    CHECK(fd >= 0 && !strncmp(tmp, path, strlen(path)) && strstr(tmp, ".tmp."));
    CHECK(fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size == 0 && sb.st_nlink == 1);
    close(fd);
    unlink(tmp);
    CHECK(hx_create_temp(path, tmp, 10, &e) < 0 && strstr(e.msg, "too long")); /* name does not fit: error, not overflow */
    unlink(old_tmp); unlink(victim); unlink(victim2);
    unlink(path); rmdir(dir);
}

static void test_fnv(void) {
    /* published FNV-1a 64 vectors */
    CHECK(hx_fnv1a("", 0, HX_FNV_INIT) == 0xcbf29ce484222325ull);
    CHECK(hx_fnv1a("a", 1, HX_FNV_INIT) == 0xaf63dc4c8601ec8cull);
    CHECK(hx_fnv1a("foobar", 6, HX_FNV_INIT) == 0x85944171f73967e8ull);
    CHECK(hx_fnv1a_str("foobar", HX_FNV_INIT) == 0x85944171f73967e8ull);
    CHECK(hx_fnv1a_str(NULL, HX_FNV_INIT) == HX_FNV_INIT);
    /* continuing from h is hashing the concatenation */
    CHECK(hx_fnv1a("bar", 3, hx_fnv1a("foo", 3, HX_FNV_INIT)) == 0x85944171f73967e8ull);
    CHECK(hx_fnv1a_str("bar", hx_fnv1a_str("foo", HX_FNV_INIT)) == 0x85944171f73967e8ull);
    /* bytes >= 0x80 mix in unsigned */
    const unsigned char hi[1] = {0xff};
    CHECK(hx_fnv1a_str("\xff", HX_FNV_INIT) == hx_fnv1a(hi, 1, HX_FNV_INIT));
    CHECK(hx_fnv1a(hi, 1, 0) == 0xff * 0x100000001b3ull);
    /* the short start value some stored hashes use: pinned, it must not change */
    CHECK(HX_FNV_INIT_SHORT == 0x14650fb0739d0383ull);
}

int main(void) {
    test_fp16();
    test_rng();
    test_fnv();
    test_pool();
    test_pool_churn();
    test_atomic_write();
    return t_done("test_core");
}
