/* test_search.c — kb_search (src/kb/search.c): the cosine ranking against a
 * brute-force reference, BM25 against a direct computation, deleted entries,
 * entries the cache lacks, the embedder mismatch, the topic filter, and hybrid
 * fusion finding an exact identifier that the embedding alone ranks low. */
#include "kb/search.h"
#include "core/core.h"
#include "test_util.h"

#include <unistd.h>

static char dir[64];

static void write_log(const char *data) {
    char p[128];
    snprintf(p, sizeof p, "%s/data.log", dir);
    FILE *f = fopen(p, "wb");
    fputs(data, f);
    fclose(f);
}

/* Reference: every live entry's cosine computed directly, the best k in order. */
static void check_semantic(kb_embedder *em, const char *query, int k) {
    hx_error e;
    kb_index ix;
    CHECK(kb_index_open(dir, em, -1, &ix, &e) == HX_OK);
    kb_search_opts o = {.k = k, .semantic_only = true};
    kb_hit hits[64];
    int nh = 0;
    CHECK(kb_search(&ix, em, query, &o, hits, &nh, &e) == HX_OK);
    float q[384];
    CHECK(em->embed(em, &query, 1, q, &e) == HX_OK);
    /* brute force over the log itself (not the index), skipping deleted entries */
    int n = 0;
    size_t order[4096];
    float sims[4096];
    for (size_t i = 0; i < ix.log.n; i++) {
        if (ix.log.e[i].deleted) continue;
        char *t = kb_entry_text(&ix.log.e[i]);
        float v[384];
        CHECK(em->embed(em, (const char *const *)&t, 1, v, &e) == HX_OK);
        free(t);
        float s = 0;
        for (int d = 0; d < em->dim; d++) s += q[d] * v[d];
        order[n] = i;
        sims[n++] = s;
    }
    for (int a = 0; a < n; a++) /* selection sort, descending, earlier first on ties */
        for (int b = a + 1; b < n; b++)
            if (sims[b] > sims[a]) {
                float ts = sims[a]; sims[a] = sims[b]; sims[b] = ts;
                size_t to = order[a]; order[a] = order[b]; order[b] = to;
            }
    CHECKF(nh == (n < k ? n : k), "%d hits, want %d", nh, n < k ? n : k);
    for (int r = 0; r < nh; r++) {
        CHECK(!ix.log.e[hits[r].entry].deleted);
        CHECK_NEAR(hits[r].cosine, sims[r], 1e-5);
        /* the same entry unless two reference scores tie */
        if (r + 1 < n && sims[r] - sims[r + 1] > 1e-5 && (r == 0 || sims[r - 1] - sims[r] > 1e-5))
            CHECKF(hits[r].entry == order[r], "rank %d: entry %zu, want %zu", r + 1, hits[r].entry, order[r]);
    }
    kb_index_free(&ix);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hx_search_XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    kb_embedder *em = kb_lexical_new();
    hx_error e;

    /* a KB with a deleted entry, one exact identifier and a paraphrase pair */
    char logbuf[16384];
    size_t len = 0;
    const char *entries[] = {
        "{\"topic\": \"storage\", \"title\": \"Disk full on the build host\", \"text\": \"The root volume filled up with docker layers; pruned images and added a weekly cleanup.\"}\n",
        "{\"topic\": \"databases\", \"title\": \"Replica lag after the migration\", \"text\": \"Postgres replicas fell minutes behind while the big index was built; build indexes concurrently next time.\"}\n",
        "{\"topic\": \"network\", \"title\": \"TLS handshake failures\", \"text\": \"Clients saw handshake errors after the certificate rotation; the intermediate was missing from the chain.\"}\n",
        "{\"topic\": \"incidents\", \"title\": \"Checkout outage\", \"text\": \"Error ERR_POOL_7731 appeared in the logs when the connection pool ran dry during the sale.\"}\n",
        "{\"topic\": \"storage\", \"title\": \"Old snapshots kept forever\", \"text\": \"The snapshot lifecycle rule never ran; storage costs doubled until the policy was fixed.\"}\n",
        "{\"topic\": \"databases\", \"title\": \"Slow report query\", \"text\": \"The monthly report scanned the whole orders table; an index on created_at fixed it.\"}\n",
    };
    size_t offs[8];
    for (int i = 0; i < 6; i++) {
        offs[i] = len;
        len += (size_t)snprintf(logbuf + len, sizeof logbuf - len, "%s", entries[i]);
    }
    len += (size_t)snprintf(logbuf + len, sizeof logbuf - len, "{\"delete\": %zu}\n", offs[0]);
    write_log(logbuf);

    check_semantic(em, "disk full docker images", 10);
    check_semantic(em, "database index", 3);

    kb_index ix;
    CHECK(kb_index_open(dir, em, -1, &ix, &e) == HX_OK);
    CHECK(ix.n == 5 && ix.n_embedded == 5 && ix.n_unindexed == 0); /* no cache yet: all embedded at open */
    kb_hit hits[16];
    int nh;
    /* deleted entries never appear, whatever the query */
    kb_search_opts o = {.k = 16};
    CHECK(kb_search(&ix, em, "disk full docker layers build host", &o, hits, &nh, &e) == HX_OK);
    for (int r = 0; r < nh; r++) CHECK(ix.log.e[hits[r].entry].offset != offs[0]);
    /* the exact identifier: BM25 ranks its entry first, and so does the fusion */
    o = (kb_search_opts){.k = 3, .lexical_only = true};
    CHECK(kb_search(&ix, em, "ERR_POOL_7731", &o, hits, &nh, &e) == HX_OK);
    CHECK(nh == 1 && ix.log.e[hits[0].entry].offset == offs[3]);
    o = (kb_search_opts){.k = 3};
    CHECK(kb_search(&ix, em, "what does ERR_POOL_7731 mean", &o, hits, &nh, &e) == HX_OK);
    CHECK(nh >= 1 && ix.log.e[hits[0].entry].offset == offs[3]);
    CHECK(hits[0].lex_rank == 1);
    /* BM25 against a direct computation for a one-word query: idf * tf(k1+1) / (tf + k1(1 - b + b dl/avgdl)) */
    o = (kb_search_opts){.k = 3, .lexical_only = true};
    CHECK(kb_search(&ix, em, "snapshot", &o, hits, &nh, &e) == HX_OK);
    CHECK(nh == 1 && ix.log.e[hits[0].entry].offset == offs[4]);
    if (nh == 1) {
        double N = 5, df = 1, idf = log(1 + (N - df + 0.5) / (df + 0.5)), tf = 1;
        double dl = ix.doc_len[3], avg = ix.avg_len;
        CHECK(dl == 18); /* "Old snapshots kept forever" + 14 words ("snapshots" is not "snapshot") */
        CHECK_NEAR(hits[0].bm25, idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / avg)), 1e-4);
    }
    /* topic filter */
    o = (kb_search_opts){.k = 10, .topic = "DATABASES"};
    CHECK(kb_search(&ix, em, "index", &o, hits, &nh, &e) == HX_OK);
    CHECK(nh == 2);
    for (int r = 0; r < nh; r++) CHECK(!strcmp(ix.log.e[hits[r].entry].topic, "databases"));
    /* empty query */
    CHECK(kb_search(&ix, em, "", &o, hits, &nh, &e) == HX_ERR_ARG);
    kb_index_free(&ix);

    /* a cache from a pass: vectors come from it; an entry appended after the
     * pass is embedded at open, or counted as not indexed with max_embed_new 0 */
    hx_pool *pool = hx_pool_create(1);
    kb_opts ko = kb_default_opts(em);
    kb_pass_stats st;
    CHECK(kb_run_pass(dir, em, pool, &ko, false, false, NULL, &st, &e) == HX_OK);
    hx_pool_free(pool);
    char p[128];
    snprintf(p, sizeof p, "%s/data.log", dir);
    FILE *f = fopen(p, "ab");
    fputs("{\"topic\": \"network\", \"title\": \"DNS flaps\", \"text\": \"Resolver timeouts every hour.\"}\n", f);
    fclose(f);
    CHECK(kb_index_open(dir, em, -1, &ix, &e) == HX_OK);
    CHECK(ix.n == 6 && ix.n_embedded == 1 && ix.n_unindexed == 0);
    kb_index_free(&ix);
    CHECK(kb_index_open(dir, em, 0, &ix, &e) == HX_OK);
    CHECK(ix.n == 6 && ix.n_embedded == 0 && ix.n_unindexed == 1);
    o = (kb_search_opts){.k = 6};
    CHECK(kb_search(&ix, em, "DNS resolver timeouts", &o, hits, &nh, &e) == HX_OK);
    int dns = -1;
    for (int r = 0; r < nh; r++)
        if (!strcmp(ix.log.e[hits[r].entry].title, "DNS flaps")) dns = r;
    CHECK(dns >= 0 && hits[dns].cosine < -1.5f && hits[dns].lex_rank == 1 && hits[dns].vec_rank == 0);
    kb_index_free(&ix);

    /* another embedder's cache is refused, naming both */
    kb_embedder other = *em;
    snprintf(other.fingerprint, sizeof other.fingerprint, "bert:other-model:1:2:6x384");
    CHECK(kb_index_open(dir, &other, -1, &ix, &e) == HX_ERR_ARG);
    CHECK(strstr(e.msg, "lexical-384:v1") && strstr(e.msg, "other-model"));

    em->free(em);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    printf("search: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
