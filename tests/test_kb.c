/* test_kb.c — data.log reader edge cases, the lexical embedder, the cache
 * formats (v1 read, v2 round trip, damage), and blocked all-pairs vs brute force. */
#include "kb/kb.h"
#include "core/core.h"
#include "test_util.h"

#include <unistd.h>

static char dir[64];

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
    CHECK(log.n_malformed == 4);
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

int main(void) {
    hx_set_log_level(0); /* the damaged inputs below each warn; the checks say what matters */
    strcpy(dir, "/tmp/hx_kb_XXXXXX");
    if (!mkdtemp(dir)) return 1;
    test_reader();
    test_lexical();
    test_cache();
    test_allpairs();
    char p[128];
    snprintf(p, sizeof p, "%s/data.log", dir); unlink(p);
    snprintf(p, sizeof p, "%s/embeddings.bin", dir); unlink(p);
    rmdir(dir);
    return t_done("test_kb");
}
