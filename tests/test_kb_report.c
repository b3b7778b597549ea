/* test_kb_report.c — the summary people read (src/kb/insights.c): titles fit
 * at a word boundary without splitting UTF-8, near-duplicate pairs become
 * clusters (connected components) in insights.json's dup_clusters and in the
 * printed summary, and the existing fields stay as they were. */
#include "kb/analyze.h"
#include "kb/kb.h"
#include "core/core.h"
#include "test_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <unistd.h>

static bool valid_utf8(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = *p < 0x80 ? 1 : (*p >> 5) == 6 ? 2 : (*p >> 4) == 14 ? 3 : (*p >> 3) == 30 ? 4 : 0;
        if (!n) return false;
        for (int k = 1; k < n; k++) if ((p[k] & 0xC0) != 0x80) return false;
        p += n;
    }
    return true;
}

static int cps(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* kb_json_number / kb_json_string (think.c's raw classifications) give the
 * text cJSON prints for the same value, byte for byte. */
static void check_json_text(void) {
    double nums[] = {0, -0.0, 1, -1, 0.5, 0.0835, 0.0001, 1e-5, 0.99995, 1.0 / 3, 2147483646, 2147483647,
                     2147483648.0, -2147483648.0, -2147483649.0, 3e9, 25914454, 1e15 + 1, 1234567890123456.0,
                     9007199254740991.0, 1e300, 5e-324, NAN, INFINITY, -INFINITY};
    char buf[32];
    for (size_t i = 0; i < sizeof nums / sizeof *nums + 10001; i++) {
        /* the listed values, then every probability as think rounds them */
        double d = i < sizeof nums / sizeof *nums ? nums[i] : round((double)(i - sizeof nums / sizeof *nums) / 10000 * 10000) / 10000;
        cJSON *n = cJSON_CreateNumber(d);
        char *want = cJSON_PrintUnformatted(n);
        int len = kb_json_number(buf, d);
        CHECKF(want && !strcmp(buf, want) && len == (int)strlen(want), "%.17g: '%s', cJSON '%s'", d, buf, want);
        free(want);
        cJSON_Delete(n);
    }
    const char *strs[] = {"", "t05", "say \"hi\"", "back\\slash", "tab\there\nnew\rcr\bbs\fff", "\x01\x1f\x7f",
                          "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80", "/slash/"};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        char out[256];
        cJSON *x = cJSON_CreateString(strs[i]);
        char *want = cJSON_PrintUnformatted(x);
        size_t len = kb_json_string(out, strs[i]);
        CHECKF(want && !strcmp(out, want) && len == strlen(want), "'%s': '%s', cJSON '%s'", strs[i], out, want);
        free(want);
        cJSON_Delete(x);
    }
}

int main(void) {
    char out[256];
    check_json_text();
    /* whole when it fits */
    kb_fit_title("Leaky faucet in the kitchen", 40, out, sizeof out);
    CHECK(!strcmp(out, "Leaky faucet in the kitchen"));
    /* exactly max code points: whole */
    kb_fit_title("abcdefghij", 10, out, sizeof out);
    CHECK(!strcmp(out, "abcdefghij"));
    /* cut at the last word that fits, trailing punctuation dropped, ellipsis */
    kb_fit_title("Monthly report slow: missing index on orders.created_at", 24, out, sizeof out);
    CHECKF(!strcmp(out, "Monthly report slow\xE2\x80\xA6"), "got '%s'", out);
    CHECK(cps(out) <= 24);
    /* multi-byte characters count as one and are never split */
    const char *u = "Crème brûlée für zwölf Gäste – Rezept mit Vanille";
    for (int m = 4; m < 50; m++) {
        kb_fit_title(u, m, out, sizeof out);
        CHECKF(valid_utf8(out), "max %d: invalid UTF-8 '%s'", m, out);
        CHECKF(cps(out) <= m, "max %d: %d code points '%s'", m, cps(out), out);
    }
    kb_fit_title(u, 20, out, sizeof out);
    CHECKF(!strcmp(out, "Crème brûlée für\xE2\x80\xA6"), "got '%s'", out);
    /* one long word: cut at a code point */
    kb_fit_title("ääääääääääääääää", 6, out, sizeof out);
    CHECKF(!strcmp(out, "äääää\xE2\x80\xA6"), "got '%s'", out);
    /* only the first line of a multi-line text, marked as cut */
    kb_fit_title("first line\nsecond line", 40, out, sizeof out);
    CHECKF(!strcmp(out, "first line\xE2\x80\xA6"), "got '%s'", out);
    /* a small buffer still ends in NUL on a code point boundary */
    char small[8];
    kb_fit_title("Crème brûlée", 40, small, sizeof small);
    CHECK(valid_utf8(small) && strlen(small) < sizeof small);

    /* clusters: pairs (0,1) (1,2) form one cluster of three, (3,4) another */
    char dir[] = "/tmp/hx_kbreport_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256], rep[256];
    snprintf(path, sizeof path, "%s/data.log", dir);
    snprintf(rep, sizeof rep, "%s/insights.json", dir);
    FILE *f = fopen(path, "w");
    const char *titles[5] = {"Dripping kitchen tap: replaced the cartridge",
                             "Leaky faucet in the kitchen fixed with a new valve cartridge",
                             "Kitchen tap drips: new cartridge", "Compost too wet and smelly",
                             "Compost pile smells: add browns"};
    for (int i = 0; i < 5; i++)
        fprintf(f, "{\"topic\": \"%s\", \"title\": \"%s\", \"text\": \"note %d\"}\n", i < 3 ? "home" : "garden",
                titles[i], i);
    fclose(f);
    kb_log log = {0};
    hx_error e = {0};
    CHECK(kb_log_read(&log, path, &e) == HX_OK && log.n == 5);
    uint64_t o[5];
    for (int i = 0; i < 5; i++) o[i] = log.e[i].offset;
    kb_pair dups[3] = {{.a = o[3], .b = o[4], .sim = 0.41f}, {.a = o[0], .b = o[1], .sim = 0.38f},
                       {.a = o[1], .b = o[2], .sim = 0.30f}};
    char *names[2] = {"home", "garden"};
    kb_insights in = {.dups = dups, .n_dups = 3, .topics = names, .n_topics = 2};
    CHECK(kb_write_report(rep, &log, &in, 5, "lexical-384", &e) == HX_OK);
    char *js = NULL;
    size_t jn = 0;
    CHECK(hx_read_file(rep, &js, &jn, &e) == HX_OK);
    cJSON *r = cJSON_ParseWithLength(js, jn);
    CHECK(r != NULL);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(r, "near_duplicates")) == 3);   /* unchanged: every pair */
    cJSON *dc = cJSON_GetObjectItem(r, "dup_clusters");
    CHECK(cJSON_GetArraySize(dc) == 2);
    cJSON *c0 = cJSON_GetArrayItem(dc, 0), *c1 = cJSON_GetArrayItem(dc, 1);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(c0, "members")) == 2);          /* best first: 0.41 */
    CHECK_NEAR(cJSON_GetObjectItem(c0, "similarity")->valuedouble, 0.41, 1e-4);
    CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(c1, "members")) == 3);
    CHECK_NEAR(cJSON_GetObjectItem(c1, "similarity")->valuedouble, 0.38, 1e-4);
    CHECK_NEAR(cJSON_GetObjectItem(c1, "min_similarity")->valuedouble, 0.30, 1e-4);
    for (int k = 0; k < 3; k++)
        CHECK((uint64_t)cJSON_GetArrayItem(cJSON_GetObjectItem(c1, "members"), k)->valuedouble == o[k]);
    cJSON_Delete(r);
    free(js);

    /* the printed summary: one block per cluster, whole titles, each once */
    char *buf = NULL;
    size_t bn = 0;
    FILE *m = open_memstream(&buf, &bn);
    kb_print_summary(m, &log, &in, 5);
    fclose(m);
    CHECKF(strstr(buf, "near-duplicates to merge (2 clusters, 3 pairs):") != NULL, "%s", buf);
    for (int i = 0; i < 5; i++) {
        const char *p = strstr(buf, titles[i]);
        CHECKF(p && !strstr(p + 1, titles[i]), "title %d not printed exactly once:\n%s", i, buf);
    }
    CHECK(strstr(buf, "cross-links (0): none") != NULL);
    free(buf);
    kb_log_free(&log);

    /* random pairs among 40 entries: dup_clusters equals the components found
     * by label propagation, members ascending, clusters best first */
    f = fopen(path, "w");
    for (int i = 0; i < 40; i++) fprintf(f, "{\"topic\": \"t%d\", \"title\": \"entry %d\", \"text\": \"x\"}\n", i % 3, i);
    fclose(f);
    kb_log log2 = {0};
    CHECK(kb_log_read(&log2, path, &e) == HX_OK && log2.n == 40);
    hx_rng rng;
    hx_rng_seed(&rng, 11);
    for (int round = 0; round < 20; round++) {
        kb_pair rp[30];
        int np = 1 + round % 30, lab[40];
        for (int k = 0; k < np; k++) {
            int a = (int)(hx_rng_uniform(&rng) * 40) % 40, b = (int)(hx_rng_uniform(&rng) * 40) % 40;
            if (a == b) b = (b + 1) % 40;
            rp[k] = (kb_pair){.a = log2.e[a < b ? a : b].offset, .b = log2.e[a < b ? b : a].offset,
                              .sim = 0.3f + 0.01f * (float)k};
        }
        for (int i = 0; i < 40; i++) lab[i] = i;
        for (bool ch = true; ch;) {
            ch = false;
            for (int k = 0; k < np; k++) {
                int a = -1, b = -1;
                for (int i = 0; i < 40; i++) { if (log2.e[i].offset == rp[k].a) a = i; if (log2.e[i].offset == rp[k].b) b = i; }
                int l = lab[a] < lab[b] ? lab[a] : lab[b];
                if (lab[a] != l || lab[b] != l) { lab[a] = lab[b] = l; ch = true; }
            }
        }
        kb_insights in2 = {.dups = rp, .n_dups = np, .topics = names, .n_topics = 2};
        CHECK(kb_write_report(rep, &log2, &in2, 40, "lexical-384", &e) == HX_OK);
        CHECK(hx_read_file(rep, &js, &jn, &e) == HX_OK);
        r = cJSON_ParseWithLength(js, jn);
        cJSON *cl, *x;
        int seen[40] = {0}, n_members = 0;
        double prev = 2;
        cJSON_ArrayForEach(cl, cJSON_GetObjectItem(r, "dup_clusters")) {
            double sim = cJSON_GetObjectItem(cl, "similarity")->valuedouble;
            CHECK(sim <= prev);
            prev = sim;
            int first = -1;
            double last = -1;
            cJSON_ArrayForEach(x, cJSON_GetObjectItem(cl, "members")) {
                int i = 0;
                while (i < 40 && (double)log2.e[i].offset != x->valuedouble) i++;
                CHECK(i < 40 && !seen[i] && x->valuedouble > last);
                if (i == 40) break;
                seen[i] = 1;
                last = x->valuedouble;
                n_members++;
                if (first < 0) first = i;
                CHECK(lab[i] == lab[first]);
            }
            int size = 0;
            for (int i = 0; i < 40; i++) size += first >= 0 && lab[i] == lab[first];
            CHECKF(size == cJSON_GetArraySize(cJSON_GetObjectItem(cl, "members")), "round %d: cluster size", round);
        }
        int in_pairs = 0;
        for (int i = 0; i < 40; i++) {
            bool any = false;
            for (int k = 0; k < np; k++) any |= rp[k].a == log2.e[i].offset || rp[k].b == log2.e[i].offset;
            in_pairs += any;
        }
        CHECK(n_members == in_pairs);
        cJSON_Delete(r);
        free(js);
    }
    kb_log_free(&log2);
    unlink(rep);
    unlink(path);
    rmdir(dir);
    printf("kb_report: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
