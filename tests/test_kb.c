/* test_kb.c — data.log reader edge cases (deletes, NUL, CR), the lexical
 * embedder, the cache formats (v1 read, v2 round trip, damage, poisoned
 * values), special files and planted links, the lock, blocked all-pairs and
 * topic overlaps vs brute force, memory with one topic per entry. */
#include "kb/kb.h"
#include "kb/analyze.h"
#include "core/core.h"
#include "test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

/* stderr (the library's warnings) into a file between capture_begin and
 * capture_end, which returns what was written (caller frees). */
static int cap_saved = -1;
static void capture_begin(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    fflush(stderr);
    cap_saved = dup(2);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    hx_set_log_level(1);
}
static char *capture_end(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/stderr.txt", dir);
    fflush(stderr);
    dup2(cap_saved, 2);
    close(cap_saved);
    hx_set_log_level(0);
    char *buf = NULL;
    size_t n;
    hx_error e;
    if (hx_read_file(p, &buf, &n, &e)) buf = strdup("");
    unlink(p);
    return buf;
}

static void path_in(char *p, size_t cap, const char *name) { snprintf(p, cap, "%s/%s", dir, name); }

static void write_file(const char *name, const char *data, size_t n) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    fwrite(data, 1, n, f);
    fclose(f);
}

static hx_status read_log(kb_log *log, const char *data, size_t n) {
    write_file("data.log", data, n);
    char p[128];
    snprintf(p, sizeof p, "%s/data.log", dir);
    hx_error e;
    memset(log, 0, sizeof *log);
    return kb_log_read(log, p, &e);
}

static void test_reader(void) {
    kb_log log;
    /* empty KB */
    CHECK(read_log(&log, "", 0) == HX_OK && log.n == 0 && log.read_to == 0);
    kb_log_free(&log);
    /* one entry, offsets as ids, title optional */
    const char *one = "{\"topic\": \"a\", \"text\": \"hello\"}\n";
    CHECK(read_log(&log, one, strlen(one)) == HX_OK && log.n == 1 && log.e[0].offset == 0 && !log.e[0].title);
    kb_log_free(&log);
    /* garbage, invalid UTF-8, missing fields, partial last line, deletions (twice, and of a missing offset) */
    const char *mix =
        "{\"topic\": \"a\", \"text\": \"first\", \"title\": \"T\"}\n"  /* 0 */
        "not json at all\n"
        "{\"topic\": \"a\", \"text\": \"bad \xff\xfe utf8\"}\n"
        "{\"topic\": \"a\"}\n"
        "{\"topic\": \"b\", \"text\": \"second\"}\n"
        "{\"delete\": 0}\n{\"delete\": 0}\n{\"delete\": 12345}\n{\"delete\": -1}\n"
        "\n"
        "{\"topic\": \"c\", \"text\": \"partial";
    CHECK(read_log(&log, mix, strlen(mix)) == HX_OK);
    CHECK(log.n == 2 && log.e[0].deleted && !log.e[1].deleted && !strcmp(log.e[1].text, "second"));
    CHECK(log.n_malformed == 5); /* garbage, UTF-8, no text, delete of no entry, delete -1 */
    CHECK(log.read_to == strlen(mix) - strlen("{\"topic\": \"c\", \"text\": \"partial"));
    CHECK(kb_log_live(&log) == 1);
    char *t = kb_entry_text(&log.e[0]);
    CHECK(t && !strcmp(t, "T\nfirst"));
    free(t);
    kb_log_free(&log);
    /* a 10 MB line */
    size_t big = 10u << 20;
    char *huge = malloc(big + 64);
    int k = sprintf(huge, "{\"topic\": \"big\", \"text\": \"");
    memset(huge + k, 'x', big);
    strcpy(huge + k + big, "\"}\n{\"topic\": \"s\", \"text\": \"after\"}\n");
    CHECK(read_log(&log, huge, strlen(huge)) == HX_OK && log.n == 2 && strlen(log.e[0].text) == big);
    CHECK(log.e[1].offset == (uint64_t)k + big + 3);
    kb_log_free(&log);
    free(huge);
    /* shrink is reported */
    CHECK(read_log(&log, one, strlen(one)) == HX_OK);
    write_file("data.log", "{}", 2);
    char p[128];
    snprintf(p, sizeof p, "%s/data.log", dir);
    hx_error e;
    CHECK(kb_log_read(&log, p, &e) == HX_ERR_RANGE && strstr(e.msg, "rewritten"));
    kb_log_free(&log);
    /* missing file: error names it */
    CHECK(kb_log_read(&log, "/nonexistent/data.log", &e) == HX_ERR_IO && strstr(e.msg, "/nonexistent/data.log"));
}

static void test_lexical(void) {
    kb_embedder *em = kb_lexical_new();
    const char *tx[] = {"Postgres replica lag grows", "postgres REPLICA lag grows!", "bananas are yellow", ""};
    float v[4 * 384];
    hx_error e;
    CHECK(em->embed(em, tx, 4, v, &e) == HX_OK);
    double n0 = 0, s01 = 0, s02 = 0, n3 = 0;
    for (int i = 0; i < 384; i++) {
        n0 += v[i] * v[i]; s01 += v[i] * v[384 + i]; s02 += v[i] * v[768 + i]; n3 += v[1152 + i] * v[1152 + i];
    }
    CHECK_NEAR(n0, 1.0, 1e-5);
    CHECK_NEAR(s01, 1.0, 1e-5);  /* case and punctuation do not matter */
    CHECK(fabs(s02) < 0.3);
    CHECK(n3 == 0);              /* empty text: zero vector, not NaN */
    em->free(em);
}

static void test_cache(void) {
    kb_embedder *em = kb_lexical_new();
    char p[128];
    snprintf(p, sizeof p, "%s/embeddings.bin", dir);
    kb_cache c = {0};
    c.n = 3; c.dim = 384;
    uint64_t off[3] = {0, 100, 5000000000ull}, h[3] = {1, 2, 3};
    float *vec = calloc(3 * 384, sizeof(float));
    for (int i = 0; i < 3 * 384; i++) vec[i] = (float)i / 1000;
    for (int r = 0; r < 3; r++) { /* cache vectors are unit length */
        double s2 = 0;
        for (int k = 0; k < 384; k++) s2 += (double)vec[r * 384 + k] * vec[r * 384 + k];
        for (int k = 0; k < 384; k++) vec[r * 384 + k] = (float)(vec[r * 384 + k] / sqrt(s2));
    }
    c.offset = off; c.hash = h; c.vec = vec;
    hx_error e;
    CHECK(kb_cache_save(&c, p, em, &e) == HX_OK);
    kb_cache r;
    kb_cache_load(&r, p, em);
    CHECK(r.n == 3 && r.offset[2] == 5000000000ull && r.hash[1] == 2 && r.vec[3 * 384 - 1] == vec[3 * 384 - 1]);
    kb_cache_free(&r);
    /* every single-byte corruption is detected (checksum), never a crash */
    char *buf; size_t n;
    CHECK(hx_read_file(p, &buf, &n, &e) == HX_OK);
    uint32_t ver;
    memcpy(&ver, buf + 4, 4);
    CHECK(ver == 3);
    /* version 2: the same layout with byte-wise FNV-1a as the checksum, still read */
    {
        char *v2 = malloc(n);
        memcpy(v2, buf, n);
        ver = 2;
        memcpy(v2 + 4, &ver, 4);
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i + 8 < n; i++) h = (h ^ (unsigned char)v2[i]) * 1099511628211ull;
        memcpy(v2 + n - 8, &h, 8);
        write_file("embeddings.bin", v2, n);
        kb_cache_load(&r, p, em);
        CHECK(r.n == 3 && r.offset[2] == 5000000000ull && r.vec[5] == vec[5] && r.sum == h);
        kb_cache_free(&r);
        v2[n - 9] ^= 1; /* and its checksum is checked */
        write_file("embeddings.bin", v2, n);
        kb_cache_load(&r, p, em);
        CHECK(r.n == 0);
        kb_cache_free(&r);
        free(v2);
    }
    int detected = 0;
    for (size_t i = 0; i < n; i += 97) {
        buf[i] ^= 0x40;
        write_file("embeddings.bin", buf, n);
        kb_cache_load(&r, p, em);
        detected += r.n == 0;
        kb_cache_free(&r);
        buf[i] ^= 0x40;
    }
    CHECK(detected == (int)((n + 96) / 97));
    /* truncations */
    for (size_t cut = 0; cut < n; cut += 53) {
        write_file("embeddings.bin", buf, cut);
        kb_cache_load(&r, p, em);
        CHECK(r.n == 0);
        kb_cache_free(&r);
    }
    free(buf);
    /* another model's cache is not used */
    kb_embedder other = *em;
    strcpy(other.fingerprint, "bert:other");
    CHECK(kb_cache_save(&c, p, &other, &e) == HX_OK);
    kb_cache_load(&r, p, em);
    CHECK(r.n == 0);
    kb_cache_free(&r);
    /* version 1: "HXEC" 1 count dim {u32 offset, f32[dim]} */
    size_t rec = 4 + 4 * 384;
    char *v1 = calloc(1, 16 + 2 * rec);
    uint32_t hdr[4] = {0, 1, 2, 384};
    memcpy(hdr, "HXEC", 4);
    memcpy(v1, hdr, 16);
    uint32_t o1 = 77;
    memcpy(v1 + 16 + rec, &o1, 4);
    float one = 1.0f;
    memcpy(v1 + 16 + rec + 4, &one, 4);
    write_file("embeddings.bin", v1, 16 + 2 * rec);
    kb_cache_load(&r, p, em);
    CHECK(r.n == 2 && r.offset[1] == 77 && r.vec[384] == 1.0f && r.hash[1] == 0);
    kb_cache_free(&r);
    write_file("embeddings.bin", v1, 16 + 2 * rec - 1); /* truncated v1 */
    kb_cache_load(&r, p, em);
    CHECK(r.n == 0);
    kb_cache_free(&r);
    free(v1);
    free(vec);
    em->free(em);
}

/* blocked all-pairs == brute force on random clustered vectors */
static void test_allpairs(void) {
    size_t n = 300;
    int dim = 48;
    kb_log log = {0};
    log.e = calloc(n, sizeof *log.e);
    log.n = n;
    size_t *idx = malloc(n * sizeof *idx);
    float *v = malloc(n * (size_t)dim * sizeof *v);
    hx_rng r;
    hx_rng_seed(&r, 3);
    char *topics[3] = {"x", "y", "z"};
    for (size_t i = 0; i < n; i++) {
        log.e[i].offset = i * 10;
        log.e[i].topic = topics[i % 3];
        idx[i] = i;
        double s = 0;
        for (int k = 0; k < dim; k++) {
            v[i * dim + k] = (float)((i / 7 == (size_t)k % 40 ? 3.0 : 0.0) + hx_rng_normal(&r) * (0.1 + 0.12 * (double)(i % 5)));
            s += v[i * dim + k] * v[i * dim + k];
        }
        for (int k = 0; k < dim; k++) v[i * dim + k] /= (float)sqrt(s);
    }
    kb_opts o = {.dup_threshold = 0.8f, .link_low = 0.5f, .link_high = 0.8f, .topic_threshold = 0.1f, .max_dups = 20, .max_links = 50};
    hx_pool *pool = hx_pool_create(2);
    kb_insights in;
    hx_error e;
    CHECK(kb_analyze(pool, &log, idx, v, n, dim, &o, &in, &e) == HX_OK);
    /* brute force: count and the best similarities */
    float best_dup = -2, best_link = -2;
    int n_dup = 0, n_link = 0;
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++) {
            float s = 0;
            for (int k = 0; k < dim; k++) s += v[a * dim + k] * v[b * dim + k];
            if (s > o.dup_threshold) { n_dup++; if (s > best_dup) best_dup = s; }
            else if (s >= o.link_low && s <= o.link_high && a % 3 != b % 3) { n_link++; if (s > best_link) best_link = s; }
        }
    CHECK(in.n_dups == (n_dup < 20 ? n_dup : 20) && in.n_links == (n_link < 50 ? n_link : 50));
    if (in.n_dups) CHECK_NEAR(in.dups[0].sim, best_dup, 1e-5);
    if (in.n_links) CHECK_NEAR(in.links[0].sim, best_link, 1e-5);
    for (int i = 1; i < in.n_links; i++) CHECK(in.links[i].sim <= in.links[i - 1].sim);
    CHECKF(n_dup > 20 && n_link > 50, "dups %d links %d", n_dup, n_link); /* the test exercises the top-k cut */
    kb_insights_free(&in);
    hx_pool_free(pool);
    free(log.e); free(idx); free(v);
}


/* {"delete": x}: only an exact integer offset of an entry before it deletes;
 * anything else is warned about, naming the line's offset, and ignored. */
static void test_delete(void) {
    const char *entry = "{\"topic\": \"a\", \"text\": \"keep me\"}\n"; /* offset 0 */
    const char *bad[] = {"1e300", "18446744073709551616", "9223372036854775808", "9007199254740993", "1.5", "-0.5",
                         "-1", "\"0\"", "null", "5", "34", "1e-300"};
    size_t elen = strlen(entry);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char data[256];
        /* 34 = the offset of this delete line itself (not an entry) */
        int k = snprintf(data, sizeof data, "%s{\"delete\": %s}\n", entry, bad[i]);
        kb_log log;
        capture_begin();
        hx_status st = read_log(&log, data, (size_t)k);
        char *err = capture_end();
        char where[64];
        snprintf(where, sizeof where, "offset %zu", elen);
        CHECKF(st == HX_OK && log.n == 1 && !log.e[0].deleted && log.n_malformed == 1, "delete %s: n %zu deleted %d",
               bad[i], log.n, log.n ? log.e[0].deleted : -1);
        CHECKF(strstr(err, where) && strstr(err, "delete") && strstr(err, "ignored"), "delete %s: warning '%s'", bad[i], err);
        free(err);
        kb_log_free(&log);
    }
    /* a forward reference (the entry comes after the delete) is no entry either */
    char data[256];
    int k = snprintf(data, sizeof data, "%s{\"delete\": %zu}\n%s", entry, elen + 15, entry);
    kb_log log;
    CHECK(read_log(&log, data, (size_t)k) == HX_OK && log.n == 2 && !log.e[0].deleted && !log.e[1].deleted);
    kb_log_free(&log);
    /* the exact forms delete: 0, 0.0, 0e5, -0 */
    const char *good[] = {"0", "0.0", "0e5", "-0"};
    for (size_t i = 0; i < 4; i++) {
        k = snprintf(data, sizeof data, "%s{\"delete\": %s}\n", entry, good[i]);
        CHECKF(read_log(&log, data, (size_t)k) == HX_OK && log.n == 1 && log.e[0].deleted && !log.n_malformed, "%s", good[i]);
        kb_log_free(&log);
    }
}

/* NUL bytes, "\u0000", trailing bytes, CRLF and CR-only line endings. */
static void test_nul_cr(void) {
    kb_log log;
    char *err;
    static const char raw_nul[] = "{\"topic\": \"a\", \"text\": \"x\0y\"}\n";
    capture_begin();
    CHECK(read_log(&log, raw_nul, sizeof raw_nul - 1) == HX_OK && log.n == 0 && log.n_malformed == 1);
    err = capture_end();
    CHECKF(strstr(err, "offset 0") && strstr(err, "NUL"), "%s", err);
    free(err);
    kb_log_free(&log);
    const char *esc = "{\"topic\": \"a\", \"text\": \"x\\u0000y\"}\n";
    capture_begin();
    CHECK(read_log(&log, esc, strlen(esc)) == HX_OK && log.n == 0 && log.n_malformed == 1);
    err = capture_end();
    CHECKF(strstr(err, "\\u0000"), "%s", err);
    free(err);
    kb_log_free(&log);
    /* an escaped backslash then "u0000" is text, kept whole */
    const char *bs = "{\"topic\": \"a\", \"text\": \"x\\\\u0000y\"}\n";
    CHECK(read_log(&log, bs, strlen(bs)) == HX_OK && log.n == 1 && !strcmp(log.e[0].text, "x\\u0000y"));
    kb_log_free(&log);
    const char *trail = "{\"topic\": \"a\", \"text\": \"x\"} {\"topic\": \"b\", \"text\": \"y\"}\n";
    CHECK(read_log(&log, trail, strlen(trail)) == HX_OK && log.n == 0 && log.n_malformed == 1);
    kb_log_free(&log);
    const char *crlf = "{\"topic\": \"a\", \"text\": \"x\"}\r\n{\"topic\": \"a\", \"text\": \"y\"}\r\n";
    CHECK(read_log(&log, crlf, strlen(crlf)) == HX_OK && log.n == 2 && log.e[1].offset == 29 && !log.n_malformed);
    kb_log_free(&log);
    /* CR-only: no line ends, so nothing is read, but not in silence */
    const char *cr = "{\"topic\": \"a\", \"text\": \"x\"}\r{\"topic\": \"a\", \"text\": \"y\"}\r";
    capture_begin();
    CHECK(read_log(&log, cr, strlen(cr)) == HX_OK && log.n == 0 && log.read_to == 0);
    err = capture_end();
    CHECKF(strstr(err, "CR-only") && strstr(err, "offset 0"), "%s", err);
    free(err);
    kb_log_free(&log);
    /* CR-separated records ended by one \n: one malformed line, said why */
    const char *crnl = "{\"topic\": \"a\", \"text\": \"x\"}\r{\"topic\": \"a\", \"text\": \"y\"}\n";
    capture_begin();
    CHECK(read_log(&log, crnl, strlen(crnl)) == HX_OK && log.n == 0 && log.n_malformed == 1);
    err = capture_end();
    CHECKF(strstr(err, "carriage return"), "%s", err);
    free(err);
    kb_log_free(&log);
}

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "test_kb: a reader blocked or ran away (FIFO / device); alarm\n";
    if (write(2, m, sizeof m - 1)) {}
    _exit(1);
}

/* A FIFO or a device where a KB file should be is refused at once (not read
 * until a writer comes or memory runs out); a link is not followed for the
 * cache; sizes are capped by what the header promises. */
static void test_special_files(void) {
    signal(SIGALRM, on_alarm);
    alarm(20);
    char p[128], q[128];
    path_in(p, sizeof p, "data.log");
    unlink(p);
    CHECK(mkfifo(p, 0600) == 0);
    kb_log log = {0};
    hx_error e = {0};
    CHECKF(kb_log_read(&log, p, &e) == HX_ERR_IO && strstr(e.msg, "FIFO") && strstr(e.msg, p), "%s", e.msg);
    kb_log_free(&log);
    unlink(p);
    kb_embedder *em = kb_lexical_new();
    path_in(q, sizeof q, "embeddings.bin");
    unlink(q);
    CHECK(mkfifo(q, 0600) == 0);
    kb_cache c;
    capture_begin();
    kb_cache_load(&c, q, em);
    char *err = capture_end();
    CHECKF(c.n == 0 && strstr(err, "FIFO"), "%s", err);
    free(err);
    kb_cache_free(&c);
    unlink(q);
    CHECK(symlink("/dev/zero", q) == 0);
    capture_begin();
    kb_cache_load(&c, q, em);
    err = capture_end();
    CHECKF(c.n == 0 && strstr(err, "symbolic link"), "%s", err);
    free(err);
    kb_cache_free(&c);
    unlink(q);
    /* a header promising 2^32-1 records in a 1 KB file: refused before any allocation */
    char small[1024] = {0};
    uint32_t hdr[5] = {0, 2, 0xffffffffu, 384, (uint32_t)strlen(em->fingerprint)};
    memcpy(hdr, "HXEC", 4);
    memcpy(small, hdr, sizeof hdr);
    write_file("embeddings.bin", small, sizeof small);
    capture_begin();
    kb_cache_load(&c, q, em);
    err = capture_end();
    CHECKF(c.n == 0 && strstr(err, "header promises"), "%s", err);
    free(err);
    kb_cache_free(&c);
    unlink(q);
    em->free(em);
    alarm(0);
}

/* A checksum only proves the bytes are as written: huge, NaN or infinite
 * vectors are refused; a zero vector (a text without words) is fine. */
static void test_cache_values(void) {
    kb_embedder *em = kb_lexical_new();
    char p[128];
    path_in(p, sizeof p, "embeddings.bin");
    float *vec = calloc(2 * 384, sizeof *vec);
    uint64_t off[2] = {0, 40}, h[2] = {1, 2};
    kb_cache c = {.offset = off, .hash = h, .vec = vec, .n = 2, .dim = 384};
    hx_error e;
    vec[0] = 1.0f; /* row 0 unit, row 1 zero */
    CHECK(kb_cache_save(&c, p, em, &e) == HX_OK);
    kb_cache r;
    kb_cache_load(&r, p, em);
    CHECK(r.n == 2);
    kb_cache_free(&r);
    const float poison[] = {1e30f, NAN, INFINITY, 2.0f};
    for (int i = 0; i < 4; i++) {
        vec[384] = poison[i];
        CHECK(kb_cache_save(&c, p, em, &e) == HX_OK);
        capture_begin();
        kb_cache_load(&r, p, em);
        char *err = capture_end();
        CHECKF(r.n == 0 && strstr(err, "offset 40") && strstr(err, "unit length"), "%g: %s", (double)poison[i], err);
        free(err);
        kb_cache_free(&r);
    }
    unlink(p);
    free(vec);
    em->free(em);
}

/* The lock: flock on the KB directory. A second holder (even in this process)
 * is refused; removing .helix.lock does not release it; a planted
 * .helix.lock link is replaced, never written through. */
static void test_lock(void) {
    char note[128], victim[128];
    path_in(note, sizeof note, ".helix.lock");
    path_in(victim, sizeof victim, "victim");
    write_file("victim", "precious", 8);
    CHECK(symlink(victim, note) == 0);
    int a = -1, b = -1;
    hx_error e = {0};
    CHECKF(kb_lock(dir, &a, &e) == HX_OK, "%s", e.msg);
    char *buf; size_t n;
    CHECK(hx_read_file(victim, &buf, &n, &e) == HX_OK && n == 8 && !memcmp(buf, "precious", 8));
    free(buf);
    struct stat sb;
    CHECK(lstat(note, &sb) == 0 && S_ISREG(sb.st_mode));
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    CHECKF(kb_lock(dir, &b, &e) != HX_OK && b < 0 && strstr(e.msg, "locked") && strstr(e.msg, pid), "%s", e.msg);
    unlink(note);
    CHECKF(kb_lock(dir, &b, &e) != HX_OK && b < 0 && strstr(e.msg, "locked"), "after removing the note: %s", e.msg);
    kb_unlock(a);
    CHECKF(kb_lock(dir, &b, &e) == HX_OK, "after unlock: %s", e.msg);
    kb_unlock(b);
    unlink(note);
    unlink(victim);
}

/* A pass never writes through links planted at the temp names the old code
 * used (<file>.tmp.<pid>) or at the outputs themselves. */
static void test_pass_links(void) {
    const char *d = "{\"topic\": \"a\", \"text\": \"alpha beta gamma\"}\n{\"topic\": \"b\", \"text\": \"alpha beta delta\"}\n";
    write_file("data.log", d, strlen(d));
    write_file("victim", "precious", 8);
    char victim[128], l1[160], l2[160], out[128];
    path_in(victim, sizeof victim, "victim");
    snprintf(l1, sizeof l1, "%s/embeddings.bin.tmp.%ld", dir, (long)getpid());
    snprintf(l2, sizeof l2, "%s/insights.json.tmp.%ld", dir, (long)getpid());
    path_in(out, sizeof out, "insights.json");
    CHECK(symlink(victim, l1) == 0 && symlink(victim, l2) == 0 && symlink(victim, out) == 0);
    kb_embedder *em = kb_lexical_new();
    kb_opts o = kb_default_opts(em);
    hx_pool *pool = hx_pool_create(1);
    hx_error e = {0};
    kb_pass_stats st;
    CHECKF(kb_run_pass(dir, em, pool, &o, false, false, NULL, &st, &e) == HX_OK, "%s", e.msg);
    char *buf; size_t n;
    CHECK(hx_read_file(victim, &buf, &n, &e) == HX_OK && n == 8 && !memcmp(buf, "precious", 8));
    free(buf);
    struct stat sb;
    CHECK(lstat(out, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 8);
    hx_pool_free(pool);
    em->free(em);
    unlink(l1); unlink(l2); unlink(out); unlink(victim);
    path_in(out, sizeof out, "embeddings.bin"); unlink(out);
}

static void unit_rows(float *v, size_t n, int dim, hx_rng *r, int clusters) {
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int k = 0; k < dim; k++) {
            v[i * dim + k] = (float)((int)(i % (size_t)clusters) == k % clusters ? 2.0 : 0.0) + hx_rng_normal(r);
            s += (double)v[i * dim + k] * v[i * dim + k];
        }
        for (int k = 0; k < dim; k++) v[i * dim + k] = (float)(v[i * dim + k] / sqrt(s));
    }
}

/* Topic overlaps against centroids computed by brute force in double: 10
 * topics of 12 entries and 200 single-entry topics (scored in the entry pass),
 * every pair above the threshold, the same similarities. */
static void test_topics(void) {
    size_t n = 320;
    int dim = 24;
    kb_log log = {0};
    log.e = calloc(n, sizeof *log.e);
    log.n = n;
    size_t *idx = malloc(n * sizeof *idx);
    float *v = malloc(n * (size_t)dim * sizeof *v);
    char (*names)[16] = malloc(n * 16);
    hx_rng r;
    hx_rng_seed(&r, 9);
    unit_rows(v, n, dim, &r, 6);
    /* entries 0..119: topics m0..m9 interleaved; 120..319: s120..s319 */
    for (size_t i = 0; i < n; i++) {
        if (i < 120) snprintf(names[i], 16, "m%zu", i % 10);
        else snprintf(names[i], 16, "s%zu", i);
        log.e[i].topic = names[i];
        log.e[i].offset = i * 10;
        idx[i] = i;
    }
    int T = 210;
    double *cent = calloc((size_t)T * dim, sizeof *cent);
    for (size_t i = 0; i < n; i++) {
        int t = i < 120 ? (int)(i % 10) : (int)(i - 110);
        for (int k = 0; k < dim; k++) cent[(size_t)t * dim + k] += v[i * dim + k];
    }
    for (int t = 0; t < T; t++) {
        double s = 0;
        for (int k = 0; k < dim; k++) s += cent[(size_t)t * dim + k] * cent[(size_t)t * dim + k];
        for (int k = 0; k < dim; k++) cent[(size_t)t * dim + k] /= sqrt(s);
    }
    float thr = 0.5f;
    int want = 0, near = 0;
    double best = -2;
    for (int a = 0; a < T; a++)
        for (int b = a + 1; b < T; b++) {
            double s = 0;
            for (int k = 0; k < dim; k++) s += cent[(size_t)a * dim + k] * cent[(size_t)b * dim + k];
            want += s > thr;
            near += fabs(s - thr) < 1e-5;
            if (s > best) best = s;
        }
    CHECK(near == 0); /* no pair so close to the threshold that float rounding decides */
    kb_opts o = {.dup_threshold = 0.99f, .link_low = 0.98f, .link_high = 0.99f, .topic_threshold = thr, .max_dups = 5,
                 .max_links = 5, .max_overlaps = 100000};
    hx_pool *pool = hx_pool_create(2);
    kb_insights in;
    hx_error e;
    CHECKF(kb_analyze(pool, &log, idx, v, n, dim, &o, &in, &e) == HX_OK, "%s", e.msg);
    CHECK(in.n_topics == T);
    CHECKF(in.n_overlaps == want && want > 1000, "overlaps %d, brute force %d", in.n_overlaps, want);
    int mismatched = 0, both_multi = 0, both_single = 0;
    for (int i = 0; i < in.n_overlaps; i++) {
        const char *ta = in.topics[in.overlaps[i].a], *tb = in.topics[in.overlaps[i].b];
        int a = ta[0] == 'm' ? atoi(ta + 1) : atoi(ta + 1) - 110, b = tb[0] == 'm' ? atoi(tb + 1) : atoi(tb + 1) - 110;
        double s = 0;
        for (int k = 0; k < dim; k++) s += cent[(size_t)a * dim + k] * cent[(size_t)b * dim + k];
        mismatched += fabs(s - in.overlaps[i].sim) > 1e-5 || in.overlaps[i].a >= in.overlaps[i].b;
        both_multi += ta[0] == 'm' && tb[0] == 'm';
        both_single += ta[0] == 's' && tb[0] == 's';
        if (i) CHECK(in.overlaps[i].sim <= in.overlaps[i - 1].sim);
    }
    CHECK(mismatched == 0);
    CHECKF(both_multi > 0 && both_single > 0, "multi/multi %d single/single %d", both_multi, both_single);
    if (in.n_overlaps) CHECK_NEAR(in.overlaps[0].sim, best, 1e-5);
    kb_insights_free(&in);
    o.max_overlaps = 7; /* the top-k cut keeps the best */
    CHECK(kb_analyze(pool, &log, idx, v, n, dim, &o, &in, &e) == HX_OK && in.n_overlaps == 7);
    if (in.n_overlaps) CHECK_NEAR(in.overlaps[0].sim, best, 1e-5);
    kb_insights_free(&in);
    hx_pool_free(pool);
    free(cent); free(names); free(log.e); free(idx); free(v);
}

/* One topic per entry, 20,000 entries, under a 1.5 GB address-space limit: the
 * old topics x topics overlap array alone wanted 2.4 GB (100,000 entries: 60 GB,
 * "insights: out of memory" on every pass). Memory is now O(n x dim). Not under
 * ASan, whose shadow memory needs the address space. */
static void test_many_topics(void) {
    if (getenv("HX_TEST_SANITIZE")) { printf("test_many_topics: skipped under the sanitizers (address-space limit)\n"); return; }
    size_t n = 20000;
    int dim = 8;
    kb_log log = {0};
    log.e = calloc(n, sizeof *log.e);
    log.n = n;
    size_t *idx = malloc(n * sizeof *idx);
    float *v = malloc(n * (size_t)dim * sizeof *v);
    char (*names)[16] = malloc(n * 16);
    hx_rng r;
    hx_rng_seed(&r, 5);
    unit_rows(v, n, dim, &r, 4);
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], 16, "t%zu", i);
        log.e[i].topic = names[i];
        log.e[i].offset = i;
        idx[i] = i;
    }
    kb_opts o = {.dup_threshold = 0.999f, .link_low = 0.99f, .link_high = 0.999f, .topic_threshold = 0.99f,
                 .max_dups = 20, .max_links = 50, .max_overlaps = 100};
    hx_pool *pool = hx_pool_create(2);
    struct rlimit old, lim;
    getrlimit(RLIMIT_AS, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)1536 << 20;
    setrlimit(RLIMIT_AS, &lim);
    kb_insights in;
    hx_error e = {0};
    double t0 = hx_now_s();
    hx_status st = kb_analyze(pool, &log, idx, v, n, dim, &o, &in, &e);
    double dt = hx_now_s() - t0;
    setrlimit(RLIMIT_AS, &old);
    CHECKF(st == HX_OK, "%s", e.msg);
    /* with one entry per topic the overlaps are the entry pairs above 0.99 */
    CHECK(st || (in.n_topics == (int)n && in.n_overlaps == 100 && in.overlaps[99].sim > 0.99f));
    printf("test_many_topics: %zu entries, %zu topics: %.2f s\n", n, n, dt);
    if (!st) kb_insights_free(&in);
    hx_pool_free(pool);
    free(names); free(log.e); free(idx); free(v);
}

/* kb_log_split (think's parallel read) gives a single kb_log_read's log: a
 * 3.5 MB log cut into 1 to 16 parts, with deletes of entries in earlier
 * parts (deferred, then applied), of the same part, twice, of an offset that
 * is no entry (in an earlier part and in its own), malformed lines, a bad
 * UTF-8 line, and an unfinished last line. */
static void test_log_split(void) {
    size_t cap = 4 << 20, n = 0;
    char *d = malloc(cap);
    uint64_t *off = malloc(sizeof *off * 40000);
    size_t ne = 0;
    hx_rng r;
    hx_rng_seed(&r, 5);
    for (int i = 0; n + 600 < cap - (1 << 18) && ne < 40000; i++) {
        int kind = (int)(hx_rng_uniform(&r) * 100);
        if (kind < 4 && ne > 10) {            /* a delete of any earlier entry (maybe another part's) */
            n += (size_t)snprintf(d + n, cap - n, "{\"delete\": %llu}\n",
                                  (unsigned long long)off[(size_t)(hx_rng_uniform(&r) * (double)ne) % ne]);
        } else if (kind < 5) {                /* names no entry: just past an entry's first byte */
            n += (size_t)snprintf(d + n, cap - n, "{\"delete\": %llu}\n", (unsigned long long)(ne ? off[ne / 2] + 1 : 7));
        } else if (kind < 6) {
            n += (size_t)snprintf(d + n, cap - n, "{\"topic\": \"x\"}\n");        /* malformed: no text */
        } else if (kind < 7) {
            n += (size_t)snprintf(d + n, cap - n, "{\"topic\": \"x\", \"text\": \"bad \xff utf8\"}\n");
        } else {
            off[ne++] = n;
            n += (size_t)snprintf(d + n, cap - n, "{\"topic\": \"t%d\", \"title\": \"note %d\", \"text\": \"%s words %d %.*s\"}\n",
                                  i % 7, i, i % 3 ? "some" : "other", i, (int)(hx_rng_uniform(&r) * 300),
                                  "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
                                  "labore et dolore magna aliqua ut enim ad minim veniam quis nostrud exercitation ullamco laboris "
                                  "nisi ut aliquip ex ea commodo consequat duis aute irure dolor in reprehenderit in voluptate velit");
        }
    }
    n += (size_t)snprintf(d + n, cap - n, "{\"topic\": \"t\", \"text\": \"unfinished");
    CHECK(n > (3u << 20));
    kb_log want;
    capture_begin();
    CHECK(read_log(&want, d, n) == HX_OK);
    free(capture_end());
    char p[128];
    path_in(p, sizeof p, "data.log");
    int parts_seen[17] = {0};
    for (int parts = 1; parts <= 16; parts += parts < 4 ? 1 : 4) {
        kb_log_split sp;
        kb_log got;
        hx_error e;
        capture_begin();
        CHECK(kb_log_split_begin(&sp, p, parts, 0, &e) == HX_OK);
        parts_seen[sp.parts] = 1;
        for (int k = sp.parts - 1; k >= 0; k--) kb_log_split_read(&sp, k);   /* any order */
        CHECK(kb_log_split_end(&sp, &got, &e) == HX_OK);
        free(capture_end());
        CHECKF(got.n == want.n && got.read_to == want.read_to && got.n_malformed == want.n_malformed,
               "parts %d: %zu entries, read to %llu, %zu malformed; one read: %zu, %llu, %zu", parts, got.n,
               (unsigned long long)got.read_to, got.n_malformed, want.n, (unsigned long long)want.read_to,
               want.n_malformed);
        size_t diff = 0;
        for (size_t i = 0; i < got.n && i < want.n; i++) {
            const kb_entry *a = &got.e[i], *b = &want.e[i];
            diff += a->offset != b->offset || a->hash != b->hash || a->deleted != b->deleted || strcmp(a->topic, b->topic) ||
                    strcmp(a->text, b->text) || !a->title != !b->title || (a->title && strcmp(a->title, b->title));
        }
        CHECKF(diff == 0, "parts %d: %zu entries differ from one read", parts, diff);
        kb_log_free(&got);
    }
    CHECK(parts_seen[3] && kb_log_live(&want) < want.n);   /* 3 MB: up to 3 parts of 1 MiB; some deleted */
    kb_log_free(&want);
    free(d);
    free(off);
}

int main(void) {
    hx_set_log_level(0); /* the damaged inputs below each warn; the checks say what matters */
    strcpy(dir, "/tmp/hx_kb_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_reader();
    test_lexical();
    test_cache();
    test_allpairs();
    test_delete();
    test_nul_cr();
    test_special_files();
    test_cache_values();
    test_lock();
    test_pass_links();
    test_topics();
    test_many_topics();
    test_log_split();
    char p[128];
    snprintf(p, sizeof p, "%s/data.log", dir); unlink(p);
    snprintf(p, sizeof p, "%s/embeddings.bin", dir); unlink(p);
    snprintf(p, sizeof p, "%s/insights.json", dir); unlink(p);
    snprintf(p, sizeof p, "%s/insights.state", dir); unlink(p);
    snprintf(p, sizeof p, "%s/.helix.lock", dir); unlink(p);
    CHECKF(rmdir(dir) == 0, "%s: left files behind", dir);
    return t_done("test_kb");
}
