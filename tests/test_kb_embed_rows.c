/* test_kb_embed_rows.c — kb_embed_rows (the KB pass's embedding: many texts a
 * call, rows written in place or through a buffer) gives every row the bits of
 * embedding its text alone, for the lexical embedder and a BERT model on the
 * CPU: rows consecutive and scattered, calls cut by count and by bytes (a text
 * longer than a call's bytes alone in its call), and a whole kb_run_pass,
 * whose embeddings.bin is read back. BERT: $HX_MINILM or
 * ~/.cache/helix/all-MiniLM-L6-v2, else a 2-layer MiniLM-shaped model that
 * helix-bg synth ($HX_BIN) makes with ../shared's bert-base-uncased vocabulary;
 * that part is skipped, saying why, when neither is there. */
#include "kb/kb.h"
#include "kb/analyze.h"
#include "core/core.h"
#include "test_util.h"

#include <unistd.h>

static char dir[64];

static uint64_t rng = 88172645463325252ull;
static uint32_t next(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

static const char *words[] = {"cache", "kernel", "tensor", "garden", "river", "tomato", "compiler", "thread",
                              "lock", "vector", "soil", "harvest", "budget", "invoice", "latency", "query",
                              "the", "a", "of", "and", "with", "über", "naïve", "東京", "ok", "mixed-case", "Words"};

/* n entries (about a third without a title), one text of ~6 KB, two deletes, into path. */
static void write_log(const char *path, int n) {
    FILE *f = fopen(path, "w");
    uint64_t offs[4] = {0};
    int k = 0;
    for (int i = 0; i < n; i++) {
        long at = ftell(f);
        if (i == 7 || i == 300) offs[k++] = (uint64_t)at;
        fprintf(f, "{\"topic\": \"t%d\", ", (int)(next() % 5));
        if (next() % 3) fprintf(f, "\"title\": \"note %d %s\", ", i, words[next() % 27]);
        fputs("\"text\": \"", f);
        int nw = i == 11 ? 900 : 1 + (int)(next() % 40);
        for (int w = 0; w < nw; w++) fprintf(f, "%s%s", w ? " " : "", words[next() % 27]);
        fputs("\"}\n", f);
    }
    for (int q = 0; q < k; q++) fprintf(f, "{\"delete\": %llu}\n", (unsigned long long)offs[q]);
    fclose(f);
}

/* rows[at[q]] = em's vector of log->e[which[q]]'s text, one text a call */
static void embed_alone(kb_embedder *em, const kb_log *log, const size_t *which, const size_t *at, size_t n,
                        float *rows) {
    hx_error e = {0};
    for (size_t q = 0; q < n; q++) {
        char *t = kb_entry_text(&log->e[which[q]]);
        CHECK(t && em->embed(em, (const char *const *)&t, 1, rows + at[q] * (size_t)em->dim, &e) == HX_OK);
        free(t);
    }
}

static size_t rows_differ(const float *a, const float *b, size_t n, int dim) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(a + i * (size_t)dim, b + i * (size_t)dim, (size_t)dim * 4) != 0;
    return bad;
}

/* kb_embed_rows and kb_embed_rows_by (several call sizes) against one text at a time,
 * with the live entries of log (at most max_n) in consecutive and in scattered rows */
static void check_rows(kb_embedder *em, const kb_log *log, size_t max_n) {
    size_t n = 0, D = (size_t)em->dim;
    CHECK(log->n < 7919);
    size_t *which = malloc(log->n * sizeof *which), *at = malloc(log->n * sizeof *at);
    for (size_t i = 0; i < log->n && n < max_n; i++) if (!log->e[i].deleted) which[n++] = i;
    float *alone = calloc(n * D + 1, 4), *want = NULL, *got = NULL;
    for (size_t q = 0; q < n; q++) at[q] = q;
    embed_alone(em, log, which, at, n, alone);
    struct { size_t texts, bytes; } calls[] = {{0, 0}, {97, 1 << 20}, {1000, 3000}, {1, 1}, {256, 1 << 20}};
    for (int layout = 0; layout < 3; layout++) {
        /* 0: rows 0..n-1; 1: a permutation (7919 is prime, n < 7919); 2: runs of 50 rows, gaps of 3 */
        for (size_t q = 0; q < n; q++)
            at[q] = layout == 0 ? q : layout == 1 ? (q * 7919 + 13) % n : q + (q / 50) * 3;
        size_t rows = layout == 2 ? at[n - 1] + 1 : n;
        want = realloc(want, rows * D * 4); got = realloc(got, rows * D * 4);
        memset(want, 0, rows * D * 4);
        for (size_t q = 0; q < n; q++) memcpy(want + at[q] * D, alone + q * D, D * 4);
        for (size_t c = 0; c < sizeof calls / sizeof *calls; c++) {
            hx_error e = {0};
            memset(got, 0, rows * D * 4);
            hx_status st = calls[c].texts
                ? kb_embed_rows_by(em, log, which, at, n, got, NULL, calls[c].texts, calls[c].bytes, &e)
                : kb_embed_rows(em, log, which, at, n, got, NULL, &e);
            CHECKF(st == HX_OK, "%s", e.msg);
            size_t bad = rows_differ(want, got, rows, em->dim);
            CHECKF(!bad, "%s, layout %d, calls of %zu texts / %zu bytes: %zu of %zu rows differ from one text at a time",
                   em->name, layout, calls[c].texts, calls[c].bytes, bad, n);
        }
    }
    printf("%s: %zu texts, 3 layouts x 5 call sizes bitwise equal to one text at a time\n", em->name, n);
    free(which); free(at); free(alone); free(want); free(got);
}

/* A full kb_run_pass over log_path's directory; each record of embeddings.bin against its entry alone. */
static void check_pass(kb_embedder *em, const char *kb) {
    char log_path[256];
    snprintf(log_path, sizeof log_path, "%s/data.log", kb);
    hx_error e = {0};
    kb_opts o = kb_default_opts(em);
    o.full = true;
    o.allpairs_device = HX_DEVICE_CPU;
    hx_pool *pool = hx_pool_create(2);
    kb_pass_stats ps;
    CHECKF(kb_run_pass(kb, em, pool, &o, false, false, NULL, &ps, &e) == HX_OK, "%s", e.msg);
    hx_pool_free(pool);
    kb_log log = {0};
    CHECK(kb_log_read(&log, log_path, &e) == HX_OK);
    char cache_path[256];
    snprintf(cache_path, sizeof cache_path, "%s/embeddings.bin", kb);
    kb_cache c = {0};
    kb_cache_load(&c, cache_path, em);
    CHECKF(c.n == kb_log_live(&log) && c.n == ps.embedded && c.n > 0, "cache %zu rows, %zu live, %zu embedded", c.n,
           kb_log_live(&log), ps.embedded);
    size_t *which = malloc((c.n + 1) * sizeof *which), *at = malloc((c.n + 1) * sizeof *at);
    for (size_t i = 0; i < c.n; i++) {
        kb_entry *en = kb_log_find(&log, c.offset[i]);
        CHECK(en && !en->deleted);
        which[i] = en ? (size_t)(en - log.e) : 0;
        at[i] = i;
    }
    float *want = calloc(c.n * (size_t)em->dim + 1, 4);
    embed_alone(em, &log, which, at, c.n, want);
    size_t bad = rows_differ(want, c.vec, c.n, em->dim);
    CHECKF(!bad, "%s: %zu of %zu cache rows differ from one text at a time", em->name, bad, c.n);
    printf("%s: a full pass over %zu entries, embeddings.bin bitwise equal to one text at a time\n", em->name, c.n);
    free(which); free(at); free(want);
    kb_cache_free(&c);
    kb_log_free(&log);
}

/* A BERT model for the neural part, or NULL with why. */
static const char *bert_model(char *buf, size_t cap, const char **why) {
    const char *env = getenv("HX_MINILM"), *home = getenv("HOME");
    if (env && *env) snprintf(buf, cap, "%s", env);
    else snprintf(buf, cap, "%s/.cache/helix/all-MiniLM-L6-v2", home ? home : "/nonexistent");
    char probe[600];
    snprintf(probe, sizeof probe, "%s/config.json", buf);
    struct stat sb;
    if (stat(probe, &sb) == 0 || (stat(buf, &sb) == 0 && S_ISREG(sb.st_mode))) return buf;
    const char *shared = t_shared_dir(), *bin = getenv("HX_BIN");
    if (!shared || !bin) { *why = "no MiniLM, and no ../shared or $HX_BIN to make one"; return NULL; }
    snprintf(probe, sizeof probe, "%s/tokenizers/vocab-gguf/ggml-vocab-bert-bge.gguf", shared);
    if (stat(probe, &sb) != 0) { *why = "no MiniLM, and ../shared lacks the bert-base-uncased vocabulary"; return NULL; }
    snprintf(buf, cap, "%s/minilm2.gguf", dir);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' synth --preset minilm-l6 --type f32 --layers 2 --tokenizer '%s' -o '%s' -t 2 >/dev/null 2>&1",
             bin, probe, buf);
    if (system(cmd) != 0) { *why = "helix-bg synth failed"; return NULL; }
    return buf;
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hx_embed_rows_XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    char kb1[128], kb2[128], path[256];
    snprintf(kb1, sizeof kb1, "%s/lex", dir);
    snprintf(kb2, sizeof kb2, "%s/bert", dir);
    mkdir(kb1, 0700); mkdir(kb2, 0700);
    snprintf(path, sizeof path, "%s/data.log", kb1);
    write_log(path, 3000);
    rng = 88172645463325252ull;
    snprintf(path, sizeof path, "%s/data.log", kb2);
    write_log(path, 200);
    hx_error e = {0};

    kb_embedder *lex = kb_lexical_new();
    CHECK(kb_embed_call_texts(lex) == 65536);
    CHECK(kb_neural_set_device(lex, "cuda", &e) == HX_ERR_ARG && strstr(e.msg, "lexical-384")); /* no device to choose */
    kb_log log = {0};
    snprintf(path, sizeof path, "%s/data.log", kb1);
    CHECK(kb_log_read(&log, path, &e) == HX_OK && kb_log_live(&log) == 2998);
    check_rows(lex, &log, log.n);
    check_pass(lex, kb1);
    lex->free(lex);
    kb_log_free(&log);

    char mbuf[512];
    const char *why = NULL, *model = bert_model(mbuf, sizeof mbuf, &why);
    if (!model) printf("BERT part skipped: %s\n", why);
    else {
        kb_embedder *bert = NULL;
        CHECKF(kb_neural_new(model, 2, &bert, &e) == HX_OK, "%s", e.msg);
        if (bert) {
            CHECK(kb_embed_call_texts(bert) == 8192); /* on the CPU */
            kb_log l2 = {0};
            snprintf(path, sizeof path, "%s/data.log", kb2);
            CHECK(kb_log_read(&l2, path, &e) == HX_OK);
            check_rows(bert, &l2, 100);
            check_pass(bert, kb2);
            kb_log_free(&l2);
            bert->free(bert);
        }
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return t_done("test_kb_embed_rows");
}
