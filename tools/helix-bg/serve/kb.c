/* kb.c — helix-bg serve --kb: the knowledge base behind POST /v1/kb/search
 * and chat completions that carry "kb" (grounded answers with citations).
 *
 * The same engine as `helix-bg search` and `helix-bg ask` (kb/search.h,
 * kb/ask.h): the index (live entries, their vectors from the KB's cache,
 * BM25 postings) is opened once and kept in memory. Before each query the
 * files are looked at (stat of data.log and embeddings.bin): when either
 * changed (entries appended or deleted, a pass wrote the cache) the index is
 * reopened, keeping the vectors it had computed (kb_index_reopen), and up to
 * --kb-max-embed entries the cache lacks are embedded on the fly; the rest
 * are counted as unindexed (found by BM25 only) and reported.
 *
 * Thread safety: every use of the index and of the KB's embedder holds
 * kb->mu (its own lock, never srv.mu). Queries come from the HTTP thread; the
 * scheduler only reads a request's own copies (srv_req.kb_refs), so it never
 * waits for a search. The KB's embedder is its own object, not the -e model
 * the embedding thread runs. Counters are atomics (the scheduler adds the
 * citations it sees). */
#include "serve.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helix_kb.h"

typedef struct kbs_file { bool ok; dev_t dev; ino_t ino; off_t size; struct timespec mtime; } kbs_file;

typedef struct srv_kb {
    pthread_mutex_t mu;        /* ix, em, files, query_s */
    kb_embedder *em;
    kb_index ix;
    kbs_file log_f, cache_f;   /* what the index was opened from */
    double query_s;            /* seconds spent searching (under mu) */
    /* counters (atomic) */
    uint64_t n_search, n_chat, n_errors, n_reloads, n_cited, n_bad;
} srv_kb;

#define KB_ADD(field, v) __atomic_add_fetch(&(field), (uint64_t)(v), __ATOMIC_RELAXED)
#define KB_GET(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

static kbs_file kbs_stat(const char *dir, const char *name) {
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    struct stat st;
    kbs_file f = {0};
    if (stat(p, &st)) return f;
    f.ok = true;
    f.dev = st.st_dev;
    f.ino = st.st_ino;
    f.size = st.st_size;
    f.mtime = st.st_mtim;
    return f;
}

static bool kbs_same(const kbs_file *a, const kbs_file *b) {
    return a->ok == b->ok && a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

int srv_kb_open(srv *s, hx_error *e) {
    srv_kb *kb = calloc(1, sizeof *kb);
    if (!kb) { snprintf(e->msg, sizeof e->msg, "out of memory"); return 1; }
    pthread_mutex_init(&kb->mu, NULL);
    const char *dir = s->cfg.kb_dir;
    if (s->cfg.kb_embed_path) {
        if (kb_neural_new(s->cfg.kb_embed_path, s->cfg.n_threads, &kb->em, e) != HX_OK) {
            char m[sizeof e->msg];
            snprintf(m, sizeof m, "--kb-embed-model %s: %s", s->cfg.kb_embed_path, e->msg);
            snprintf(e->msg, sizeof e->msg, "%s", m);
            free(kb);
            return 1;
        }
    } else if (!(kb->em = kb_lexical_new())) {
        snprintf(e->msg, sizeof e->msg, "out of memory");
        free(kb);
        return 1;
    }
    kb->log_f = kbs_stat(dir, "data.log");
    kb->cache_f = kbs_stat(dir, "embeddings.bin");
    hx_status st = kb_index_open(dir, kb->em, s->cfg.kb_max_embed, &kb->ix, e);
    if (st != HX_OK) {
        char m[sizeof e->msg];
        snprintf(m, sizeof m, "--kb %s: %s%s", dir, e->msg,
                 st == HX_ERR_ARG ? "; serve takes the KB's embedder as --kb-embed-model (a BERT model, or 'lexical'; "
                                    "default: the -e model when given, else lexical)" : "");
        snprintf(e->msg, sizeof e->msg, "%s", m);
        kb->em->free(kb->em);
        free(kb);
        return 1;
    }
    s->kb = kb;
    return 0;
}

void srv_kb_free(srv *s) {
    srv_kb *kb = s->kb;
    if (!kb) return;
    kb_index_free(&kb->ix);
    kb->em->free(kb->em);
    pthread_mutex_destroy(&kb->mu);
    free(kb);
    s->kb = NULL;
}

void srv_kb_describe(srv *s, char *out, size_t cap) {
    srv_kb *kb = s->kb;
    pthread_mutex_lock(&kb->mu);
    snprintf(out, cap, "%zu entries, embedder %s, %zu embedded now, %zu not indexed", kb->ix.n, kb->em->name,
             kb->ix.n_embedded, kb->ix.n_unindexed);
    pthread_mutex_unlock(&kb->mu);
}

/* Reopens the index when data.log or the cache changed since it was opened.
 * A failed reopen keeps the old index (logged; the next query tries again).
 * Caller holds kb->mu. */
static void kbs_refresh(srv *s, srv_kb *kb) {
    kbs_file lf = kbs_stat(s->cfg.kb_dir, "data.log"), cf = kbs_stat(s->cfg.kb_dir, "embeddings.bin");
    if (kbs_same(&lf, &kb->log_f) && kbs_same(&cf, &kb->cache_f)) return;
    kb_index nix;
    hx_error e = {0};
    if (kb_index_reopen(s->cfg.kb_dir, kb->em, s->cfg.kb_max_embed, &kb->ix, &nix, &e) != HX_OK) {
        fprintf(stderr, "serve: --kb %s changed but cannot be reopened (searching the previous state): %s\n",
                s->cfg.kb_dir, e.msg);
        KB_ADD(kb->n_errors, 1);
        kb->log_f = lf;   /* not again for every query: only after the next change */
        kb->cache_f = cf;
        return;
    }
    kb_index_free(&kb->ix);
    kb->ix = nix;
    kb->log_f = lf;
    kb->cache_f = cf;
    KB_ADD(kb->n_reloads, 1);
    if (s->cfg.verbose)
        fprintf(stderr, "serve: --kb reopened: %zu entries, %zu embedded now, %zu not indexed\n", kb->ix.n,
                kb->ix.n_embedded, kb->ix.n_unindexed);
}

static int kbs_fail(oai_err *err, int status, const char *code, const char *msg) {
    snprintf(err->msg, sizeof err->msg, "%s", msg);
    err->code = code;
    return status;
}

/* A string of the KB (entries are UTF-8 JSON, but an escape may still make
 * invalid UTF-8): sanitized so the answer is valid JSON text. */
static void kbs_add_str(cJSON *o, const char *name, const char *v) {
    char *t = utf8_sanitize(v ? v : "", strlen(v ? v : ""));
    cJSON_AddStringToObject(o, name, t ? t : "");
    free(t);
}

int srv_kb_search(srv *s, const char *query, int k, const char *topic, int mode, cJSON **out, oai_err *err) {
    srv_kb *kb = s->kb;
    *out = NULL;
    KB_ADD(kb->n_search, 1);
    kb_hit *hits = malloc(sizeof *hits * (size_t)k);
    if (!hits) { KB_ADD(kb->n_errors, 1); return kbs_fail(err, 500, "out_of_memory", "out of memory"); }
    kb_search_opts so = {.k = k, .topic = topic, .semantic_only = mode == 1, .lexical_only = mode == 2};
    hx_error e = {0};
    int nh = 0;
    pthread_mutex_lock(&kb->mu);
    kbs_refresh(s, kb);
    double t0 = util_now();
    hx_status st = kb_search(&kb->ix, kb->em, query, &so, hits, &nh, &e);
    kb->query_s += util_now() - t0;
    if (st != HX_OK) {
        pthread_mutex_unlock(&kb->mu);
        free(hits);
        KB_ADD(kb->n_errors, 1);
        return kbs_fail(err, st == HX_ERR_ARG ? 400 : 500, st == HX_ERR_ARG ? "invalid_value" : "server_error", e.msg);
    }
    char words[32][64];
    int nw = kb_query_words(query, words, 32);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    kbs_add_str(o, "query", query);
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    for (int r = 0; r < nh; r++) {
        const kb_entry *en = &kb->ix.log.e[hits[r].entry];
        cJSON *h = cJSON_CreateObject();
        cJSON_AddStringToObject(h, "object", "kb.entry");
        cJSON_AddNumberToObject(h, "id", (double)en->offset);
        cJSON_AddNumberToObject(h, "rank", r + 1);
        kbs_add_str(h, "title", en->title);
        kbs_add_str(h, "topic", en->topic);
        cJSON_AddNumberToObject(h, "score", hits[r].score);
        if (hits[r].cosine > -1.5f) cJSON_AddNumberToObject(h, "cosine", hits[r].cosine);
        else cJSON_AddNullToObject(h, "cosine");
        cJSON_AddNumberToObject(h, "bm25", hits[r].bm25);
        char *sn = kb_snippet(en->text ? en->text : "", words, nw, 200, NULL, NULL);
        kbs_add_str(h, "snippet", sn);
        free(sn);
        cJSON_AddItemToArray(d, h);
    }
    cJSON_AddNumberToObject(o, "entries", (double)kb->ix.n);
    cJSON_AddNumberToObject(o, "unindexed", (double)kb->ix.n_unindexed);
    cJSON_AddStringToObject(o, "embedder", kb->em->name);
    pthread_mutex_unlock(&kb->mu);
    free(hits);
    *out = o;
    return 0;
}

/* Tokens of text with the chat model's tokenizer (an hx_model is read-only:
 * any thread may tokenize). */
static int kbs_count(const char *text, void *user) {
    int n = 0;
    hx_status st = hx_tokenize((const hx_model *)user, text, -1, false, false, NULL, 0, &n, NULL);
    return st == HX_OK || st == HX_ERR_RANGE ? n : -1;
}

void srv_kb_refs_free(srv_req *r) {
    for (int i = 0; i < r->n_kb_refs; i++) {
        free(r->kb_refs[i].title);
        free(r->kb_refs[i].topic);
    }
    free(r->kb_refs);
    r->kb_refs = NULL;
    r->n_kb_refs = 0;
}

int srv_kb_ground(srv *s, const char *question, int k, const char *topic, int budget, srv_req *r, char **msg,
                  oai_err *err) {
    srv_kb *kb = s->kb;
    *msg = NULL;
    KB_ADD(kb->n_chat, 1);
    kb_hit *hits = malloc(sizeof *hits * (size_t)k);
    const kb_entry **ents = malloc(sizeof *ents * (size_t)k);
    kb_ask_ctx ac = {0};
    int st = 0;
    hx_error e = {0};
    if (!hits || !ents) { st = kbs_fail(err, 500, "out_of_memory", "out of memory"); goto out; }
    kb_search_opts so = {.k = k, .topic = topic};
    int nh = 0;
    pthread_mutex_lock(&kb->mu);
    kbs_refresh(s, kb);
    double t0 = util_now();
    hx_status hs = kb_search(&kb->ix, kb->em, question, &so, hits, &nh, &e);
    kb->query_s += util_now() - t0;
    if (hs == HX_OK) {
        for (int i = 0; i < nh; i++) ents[i] = &kb->ix.log.e[hits[i].entry];
        hs = kb_ask_context(ents, nh, budget, kbs_count, s->model, &ac, &e);
    }
    if (hs == HX_OK && ac.n_used > 0 && !(r->kb_refs = calloc((size_t)ac.n_used, sizeof *r->kb_refs))) hs = HX_ERR_NOMEM;
    for (int i = 0; hs == HX_OK && i < ac.n_used; i++) {   /* copies: the index may be reopened after we let go */
        r->kb_refs[i].id = ents[i]->offset;
        r->kb_refs[i].title = strdup(ents[i]->title ? ents[i]->title : "");
        r->kb_refs[i].topic = strdup(ents[i]->topic ? ents[i]->topic : "");
        r->n_kb_refs = i + 1;
        if (!r->kb_refs[i].title || !r->kb_refs[i].topic) hs = HX_ERR_NOMEM;
    }
    r->kb_unindexed = (int)kb->ix.n_unindexed;
    pthread_mutex_unlock(&kb->mu);
    if (hs == HX_ERR_NOMEM) { st = kbs_fail(err, 500, "out_of_memory", "out of memory"); goto out; }
    if (hs != HX_OK) { st = kbs_fail(err, hs == HX_ERR_ARG ? 400 : 500, hs == HX_ERR_ARG ? "invalid_value" : "server_error", e.msg); goto out; }
    r->kb = true;
    r->kb_retrieved = nh;
    r->kb_truncated = ac.n_truncated != 0;
    if (!(*msg = kb_ask_message(&ac, question))) st = kbs_fail(err, 500, "out_of_memory", "out of memory");
out:
    if (st) KB_ADD(kb->n_errors, 1);
    kb_ask_ctx_free(&ac);
    free(ents);
    free(hits);
    return st;
}

void srv_kb_cite(srv *s, const srv_req *r, const char *text, size_t len, cJSON *obj) {
    int n = r->n_kb_refs, bad = 0;
    bool *cited = calloc((size_t)n + 1, sizeof *cited);
    char *t = malloc(len + 1);
    cJSON *c = cJSON_AddArrayToObject(obj, "citations");
    int nc = 0;
    if (cited && t) {
        memcpy(t, text, len);
        t[len] = 0;
        nc = kb_ask_citations(t, n, cited, &bad);
        for (int i = 0; i < n; i++) {
            if (!cited[i]) continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddNumberToObject(e, "ref", i + 1);
            cJSON_AddNumberToObject(e, "id", (double)r->kb_refs[i].id);
            kbs_add_str(e, "title", r->kb_refs[i].title);
            kbs_add_str(e, "topic", r->kb_refs[i].topic);
            cJSON_AddItemToArray(c, e);
        }
    }
    free(t);
    free(cited);
    cJSON *k = cJSON_AddObjectToObject(obj, "kb");
    cJSON_AddNumberToObject(k, "retrieved", r->kb_retrieved);
    cJSON_AddNumberToObject(k, "in_prompt", r->n_kb_refs);
    cJSON_AddBoolToObject(k, "truncated", r->kb_truncated);
    cJSON_AddNumberToObject(k, "bad_citations", bad);
    cJSON_AddNumberToObject(k, "unindexed", r->kb_unindexed);
    cJSON *ids = cJSON_AddArrayToObject(k, "ids");   /* [n] names ids[n - 1] */
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber((double)r->kb_refs[i].id));
    if (s && s->kb) {
        KB_ADD(s->kb->n_cited, nc);
        KB_ADD(s->kb->n_bad, bad);
    }
}

void srv_kb_metrics(srv *s, sbuf *b) {
    srv_kb *kb = s->kb;
    if (!kb) return;
    pthread_mutex_lock(&kb->mu);
    size_t n = kb->ix.n, unindexed = kb->ix.n_unindexed;
    double qs = kb->query_s;
    pthread_mutex_unlock(&kb->mu);
#define COUNTER(name, help, v) sbuf_printf(b, "# HELP helix_" name " " help "\n# TYPE helix_" name " counter\nhelix_" name " %llu\n", (unsigned long long)(v))
#define GAUGE(name, help, fmt, v) sbuf_printf(b, "# HELP helix_" name " " help "\n# TYPE helix_" name " gauge\nhelix_" name " " fmt "\n", v)
    COUNTER("kb_search_requests_total", "POST /v1/kb/search queries.", KB_GET(kb->n_search));
    COUNTER("kb_chat_requests_total", "Chat completions grounded in the knowledge base (\"kb\").", KB_GET(kb->n_chat));
    COUNTER("kb_query_errors_total", "Knowledge-base queries or reopens that failed.", KB_GET(kb->n_errors));
    COUNTER("kb_reloads_total", "Times the index was reopened after data.log or the cache changed.", KB_GET(kb->n_reloads));
    COUNTER("kb_citations_total", "Retrieved entries cited by grounded answers.", KB_GET(kb->n_cited));
    COUNTER("kb_bad_citations_total", "Citations in grounded answers naming no retrieved entry.", KB_GET(kb->n_bad));
    sbuf_printf(b, "# HELP helix_kb_query_seconds_total Seconds spent ranking the knowledge base.\n"
                   "# TYPE helix_kb_query_seconds_total counter\nhelix_kb_query_seconds_total %.6f\n", qs);
    GAUGE("kb_entries", "Live entries in the knowledge base index.", "%zu", n);
    GAUGE("kb_unindexed_entries", "Live entries without a vector (found by BM25 only).", "%zu", unindexed);
#undef COUNTER
#undef GAUGE
}
