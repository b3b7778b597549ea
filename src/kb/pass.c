/* pass.c — one pass over a KB directory, full or incremental (see kb_run_pass
 * in kb.h), and insights.state, what an incremental pass keeps from the last
 * (format in kb.h). */
#include "kb/kb.h"
#include "kb/analyze.h"
#include "core/core.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define FNV0 HX_FNV_INIT_SHORT

/* ---- insights.state ---- */

typedef struct kb_state {
    uint64_t cache_sum, cache_n;
    uint64_t read_to, dev, ino, head, tail, malformed;
    float thr[4];
    int32_t k[3];
    int n_topics;
    char **topics;           /* (n_topics) names */
    uint32_t *topic;         /* (cache_n) topic id per cache record */
    uint64_t *deleted;       /* (n_deleted) increasing */
    size_t n_deleted;
    kb_klist list[3];        /* near-duplicates, cross-links, single-entry topic overlaps */
} kb_state;

static void state_free(kb_state *s) {
    for (int t = 0; t < s->n_topics; t++) free(s->topics[t]);
    free(s->topics); free(s->topic); free(s->deleted);
    for (int i = 0; i < 3; i++) kb_klist_free(&s->list[i]);
    memset(s, 0, sizeof *s);
}

typedef struct wbuf { char *p; size_t n, cap; bool oom; } wbuf;
static void put(wbuf *w, const void *x, size_t n) {
    if (w->oom || !n) return;
    if (w->n + n > w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap < w->n + n) cap *= 2;
        char *np = realloc(w->p, cap);
        if (!np) { w->oom = true; return; }
        w->p = np;
        w->cap = cap;
    }
    memcpy(w->p + w->n, x, n);
    w->n += n;
}
static void put_u32(wbuf *w, uint32_t v) { put(w, &v, 4); }
static void put_u64(wbuf *w, uint64_t v) { put(w, &v, 8); }
static void put_pair(wbuf *w, const kb_pair *p) { put_u64(w, p->a); put_u64(w, p->b); put(w, &p->sim, 4); }

typedef struct rbuf { const char *p; size_t n, at; bool bad; } rbuf;
static bool get(rbuf *r, void *x, size_t n) {
    if (!n) return !r->bad;
    if (r->bad || n > r->n - r->at) { r->bad = true; memset(x, 0, n); return false; }
    memcpy(x, r->p + r->at, n);
    r->at += n;
    return true;
}
static uint32_t get_u32(rbuf *r) { uint32_t v; get(r, &v, 4); return v; }
static uint64_t get_u64(rbuf *r) { uint64_t v; get(r, &v, 8); return v; }
static kb_pair get_pair(rbuf *r) {
    kb_pair p = {0};
    p.a = get_u64(r); p.b = get_u64(r); get(r, &p.sim, 4);
    return p;
}

static void opts_key(const kb_opts *o, float thr[4], int32_t k[3]) {
    thr[0] = o->dup_threshold; thr[1] = o->link_low; thr[2] = o->link_high; thr[3] = o->topic_threshold;
    k[0] = o->max_dups; k[1] = o->max_links; k[2] = kb_max_overlaps(o);
}

static hx_status state_save(const char *path, const kb_state *s, hx_error *e) {
    wbuf w = {0};
    put(&w, "HXKS", 4); put_u32(&w, 1);
    put_u64(&w, s->cache_sum); put_u64(&w, s->cache_n);
    put_u64(&w, s->read_to); put_u64(&w, s->dev); put_u64(&w, s->ino); put_u64(&w, s->head); put_u64(&w, s->tail);
    put_u64(&w, s->malformed);
    put(&w, s->thr, 16); put(&w, s->k, 12);
    put_u32(&w, (uint32_t)s->n_topics);
    for (int t = 0; t < s->n_topics; t++) {
        uint32_t len = (uint32_t)strlen(s->topics[t]);
        put_u32(&w, len);
        put(&w, s->topics[t], len);
    }
    put(&w, s->topic, (size_t)s->cache_n * 4);
    put_u64(&w, s->n_deleted);
    put(&w, s->deleted, s->n_deleted * 8);
    for (int i = 0; i < 3; i++) {
        const kb_klist *l = &s->list[i];
        put_u32(&w, (uint32_t)l->n); put_u32(&w, l->has_cut); put_pair(&w, &l->cut);
        for (int q = 0; q < l->n; q++) put_pair(&w, &l->p[q]);
    }
    if (!w.oom) put_u64(&w, hx_fnv1a(w.p, w.n, FNV0));
    hx_status st = w.oom ? hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path) : hx_write_file_atomic(path, w.p, w.n, e);
    free(w.p);
    return st;
}

/* Loads path into s when it belongs to this cache and these options; false
 * (with a warning if the file was there but unusable) means a full pass. */
static bool state_load(const char *path, const kb_cache *c, const kb_opts *o, kb_state *s) {
    memset(s, 0, sizeof *s);
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) return false;
    hx_error e;
    int fd = kb_open_regular(path, true, &sb, &e);
    if (fd < 0) { HX_WARN("%s; a full pass instead", e.msg); return false; }
    const char *why = NULL;
    char *buf = NULL;
    size_t n = (size_t)sb.st_size;
    /* bounded by what a state for this cache can hold: topic names at most 64 KB each is far above any real one */
    if (sb.st_size < 32 || (uint64_t)sb.st_size > ((uint64_t)c->n + 1) * (16 + 8 + 4 + 65536) + 3 * 20 * 200000ull + 4096) {
        why = "size out of range";
        goto out;
    }
    if (!(buf = malloc(n))) { why = "out of memory"; goto out; }
    ssize_t r = pread(fd, buf, n, 0);
    if (r != (ssize_t)n) { why = "read failed"; goto out; }
    uint64_t sum;
    memcpy(&sum, buf + n - 8, 8);
    if (memcmp(buf, "HXKS", 4) || hx_fnv1a(buf, n - 8, FNV0) != sum) { why = "not a state file, or damaged (checksum)"; goto out; }
    rbuf rb = {buf, n - 8, 4, false};
    if (get_u32(&rb) != 1) { why = "unknown version"; goto out; }
    s->cache_sum = get_u64(&rb); s->cache_n = get_u64(&rb);
    if (!c->sum || s->cache_sum != c->sum || s->cache_n != c->n) { why = NULL; goto out; } /* another cache: silently full */
    s->read_to = get_u64(&rb); s->dev = get_u64(&rb); s->ino = get_u64(&rb);
    s->head = get_u64(&rb); s->tail = get_u64(&rb); s->malformed = get_u64(&rb);
    get(&rb, s->thr, 16); get(&rb, s->k, 12);
    float thr[4];
    int32_t k[3];
    opts_key(o, thr, k);
    if (memcmp(thr, s->thr, 16) || memcmp(k, s->k, 12)) { why = NULL; goto out; } /* other options: full */
    uint32_t T = get_u32(&rb);
    if (rb.bad || T > c->n + 1 || !(s->topics = calloc(T ? T : 1, sizeof *s->topics))) { why = "bad topic table"; goto out; }
    for (uint32_t t = 0; t < T; t++) {
        uint32_t len = get_u32(&rb);
        if (rb.bad || len > rb.n - rb.at || !(s->topics[t] = malloc((size_t)len + 1))) { why = "bad topic table"; goto out; }
        s->n_topics = (int)t + 1;
        get(&rb, s->topics[t], len);
        s->topics[t][len] = 0;
        if (strlen(s->topics[t]) != len || !len) { why = "bad topic name"; goto out; }
    }
    if (!(s->topic = malloc((size_t)(c->n ? c->n : 1) * 4))) { why = "out of memory"; goto out; }
    get(&rb, s->topic, (size_t)c->n * 4);
    for (size_t i = 0; i < c->n; i++) if (s->topic[i] >= T) { why = "topic id out of range"; goto out; }
    s->n_deleted = get_u64(&rb);
    if (rb.bad || s->n_deleted > (rb.n - rb.at) / 8 || !(s->deleted = malloc((s->n_deleted ? s->n_deleted : 1) * 8))) {
        why = "bad deleted list";
        goto out;
    }
    get(&rb, s->deleted, s->n_deleted * 8);
    for (size_t i = 1; i < s->n_deleted; i++) if (s->deleted[i] <= s->deleted[i - 1]) { why = "deleted list not increasing"; goto out; }
    for (int i = 0; i < 3; i++) {
        kb_klist *l = &s->list[i];
        uint32_t m = get_u32(&rb), has_cut = get_u32(&rb);
        l->cut = get_pair(&rb);
        l->has_cut = has_cut != 0;
        int depth = kb_keep_depth(k[i]);
        if (rb.bad || m > (uint32_t)depth || !(l->p = malloc((size_t)(m ? m : 1) * sizeof *l->p))) { why = "bad kept list"; goto out; }
        for (uint32_t q = 0; q < m; q++) {
            l->p[q] = get_pair(&rb);
            l->n = (int)q + 1;
            if (!isfinite(l->p[q].sim) || l->p[q].a >= l->p[q].b || (i == 2 && l->p[q].b >= T) ||
                (q && kb_pair_better(&l->p[q], &l->p[q - 1]))) {
                why = "bad kept list";
                goto out;
            }
        }
    }
    if (rb.bad || rb.at != rb.n) { why = "size does not match its contents"; goto out; }
    free(buf);
    close(fd);
    return true;
out:
    if (why) HX_WARN("%s: %s; a full pass instead", path, why);
    free(buf);
    close(fd);
    state_free(s);
    return false;
}

/* FNV-1a of the first and of the last min(4096, to) bytes before `to`: a
 * cheap check that the bytes an incremental pass does not read again are
 * still the ones it read. */
static bool log_marks(int fd, uint64_t to, uint64_t *head, uint64_t *tail) {
    char buf[4096];
    size_t m = to < sizeof buf ? (size_t)to : sizeof buf;
    if (pread(fd, buf, m, 0) != (ssize_t)m) return false;
    *head = hx_fnv1a(buf, m, FNV0);
    if (pread(fd, buf, m, (off_t)(to - m)) != (ssize_t)m) return false;
    *tail = hx_fnv1a(buf, m, FNV0);
    return true;
}

/* ---- the pass ---- */

static int u64_cmp(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static bool has_u64(const uint64_t *v, size_t n, uint64_t x) {
    size_t lo = 0, hi = n;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (v[m] < x) lo = m + 1; else hi = m; }
    return lo < n && v[lo] == x;
}

static int cache_find(const kb_cache *c, uint64_t off) {
    size_t lo = 0, hi = c->n;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (c->offset[m] < off) lo = m + 1; else hi = m; }
    return lo < c->n && c->offset[lo] == off ? (int)lo : -1;
}

/* The live entries of this pass: cache-shaped arrays plus topic ids. */
typedef struct rowset {
    kb_cache cur;            /* offset, hash, vec of the live entries, increasing offsets */
    int *topic;              /* (cur.n) */
    char **names;            /* (n_topics) owned */
    int n_topics;
    int *count;              /* (n_topics) */
} rowset;

static void rowset_free(rowset *r) {
    kb_cache_free(&r->cur);
    free(r->topic);
    for (int t = 0; t < r->n_topics; t++) free(r->names[t]);
    free(r->names); free(r->count);
    memset(r, 0, sizeof *r);
}

static bool rowset_alloc(rowset *r, size_t n, int dim) {
    r->cur.offset = malloc((n ? n : 1) * 8);
    r->cur.hash = malloc((n ? n : 1) * 8);
    r->cur.vec = malloc((n ? n : 1) * (size_t)dim * sizeof(float));
    r->topic = malloc((n ? n : 1) * sizeof *r->topic);
    r->cur.n = n;
    r->cur.dim = dim;
    return r->cur.offset && r->cur.hash && r->cur.vec && r->topic;
}

/* A call of kb_embed_rows_by: at most max_texts texts of at most max_bytes in
 * all (one at least, whatever its size). */
static size_t call_size(const kb_log *log, const size_t *which, size_t n, size_t max_texts, size_t max_bytes,
                        size_t *bytes) {
    size_t nb = 0, sum = 0;
    for (; nb < n && nb < max_texts; nb++) {
        const kb_entry *en = &log->e[which[nb]];
        size_t l = (en->title ? strlen(en->title) + 1 : 0) + strlen(en->text) + 1;
        if (nb && sum + l > max_bytes) break;
        sum += l;
    }
    *bytes = sum;
    return nb;
}

/* rows at[0..n) are at[0], at[0] + 1, ...: the embedder can write them in place */
static bool consecutive(const size_t *at, size_t n) {
    for (size_t q = 1; q < n; q++) if (at[q] != at[0] + q) return false;
    return true;
}

hx_status kb_embed_rows_by(kb_embedder *em, const kb_log *log, const size_t *which, const size_t *at, size_t n,
                           float *vec, const char *progress, size_t max_texts, size_t max_bytes, hx_error *e) {
    const size_t D = (size_t)em->dim;
    if (max_texts > INT32_MAX) max_texts = INT32_MAX; /* em->embed counts texts in an int */
    if (!max_texts) max_texts = 1;
    /* vectors of a call whose rows are not consecutive go through tmp: bounded as the texts are */
    size_t tmp_rows = max_bytes / (D * sizeof(float));
    if (tmp_rows < 256) tmp_rows = 256;
    const char **texts = malloc((n < max_texts ? (n ? n : 1) : max_texts) * sizeof *texts);
    char *arena = NULL;
    float *tmp = NULL;
    size_t arena_cap = 0;
    hx_status st = HX_OK;
    if (!texts) return hx_err(e, HX_ERR_NOMEM, "out of memory for the texts to embed");
    bool tty = progress && isatty(2);
    for (size_t b = 0; b < n && !st;) {
        size_t bytes, nb = call_size(log, which + b, n - b, max_texts, max_bytes, &bytes);
        bool direct = consecutive(at + b, nb);
        if (!direct && nb > tmp_rows) nb = tmp_rows;
        if (!direct && !tmp && !(tmp = malloc(tmp_rows * D * sizeof *tmp))) {
            st = hx_err(e, HX_ERR_NOMEM, "out of memory for the vectors of %zu texts", tmp_rows);
            break;
        }
        if (bytes > arena_cap) {
            free(arena);
            if (!(arena = malloc(bytes))) { st = hx_err(e, HX_ERR_NOMEM, "out of memory for %zu bytes of texts", bytes); break; }
            arena_cap = bytes;
        }
        /* the texts as kb_entry_text forms them ("title\ntext", or text), one after another */
        char *w = arena;
        for (size_t q = 0; q < nb; q++) {
            const kb_entry *en = &log->e[which[b + q]];
            size_t a = en->title ? strlen(en->title) : 0, t = strlen(en->text);
            texts[q] = w;
            if (en->title) { memcpy(w, en->title, a); w[a] = '\n'; w += a + 1; }
            memcpy(w, en->text, t + 1);
            w += t + 1;
        }
        float *out = direct ? vec + at[b] * D : tmp;
        st = em->embed(em, texts, (int)nb, out, e);
        for (size_t q = 0; q < nb && !st && !direct; q++) memcpy(vec + at[b + q] * D, tmp + q * D, sizeof(float) * D);
        b += nb;
        if (tty) fprintf(stderr, "\rembedding %zu/%zu%s", b, n, progress);
    }
    if (tty && n) fputc('\n', stderr);
    free(texts); free(arena); free(tmp);
    return st;
}

hx_status kb_embed_rows(kb_embedder *em, const kb_log *log, const size_t *which, const size_t *at, size_t n,
                        float *vec, const char *progress, hx_error *e) {
    return kb_embed_rows_by(em, log, which, at, n, vec, progress, kb_embed_call_texts(em), KB_EMBED_CALL_BYTES, e);
}

/* Topic ids for rows from their names (names[i] for row i), table by first appearance. */
static hx_status rowset_topics(rowset *r, const char *const *names, hx_error *e) {
    char **tab = NULL;
    hx_status st = kb_topic_table(names, r->cur.n, r->topic, &tab, &r->n_topics, e);
    if (st) return st;
    r->names = calloc((size_t)(r->n_topics ? r->n_topics : 1), sizeof *r->names);
    r->count = calloc((size_t)(r->n_topics ? r->n_topics : 1), sizeof *r->count);
    if (!r->names || !r->count) { free(tab); return hx_err(e, HX_ERR_NOMEM, "out of memory"); }
    for (int t = 0; t < r->n_topics; t++)
        if (!(r->names[t] = strdup(tab[t]))) { free(tab); return hx_err(e, HX_ERR_NOMEM, "out of memory"); }
    free(tab);
    for (size_t i = 0; i < r->cur.n; i++) r->count[r->topic[i]]++;
    return HX_OK;
}

/* A full pass's reading: the whole log, cached vectors reused for the same text. */
static hx_status read_full(const char *log_path, kb_embedder *em, const kb_cache *old, uint64_t quiet_below,
                           bool progress, kb_log *log, rowset *r, size_t *embedded, double *embed_s, hx_error *e) {
    log->quiet_below = quiet_below;
    hx_status st = kb_log_read(log, log_path, e);
    if (st) return st;
    size_t live = kb_log_live(log), k = 0, n_todo = 0;
    size_t *which = malloc((live ? live : 1) * sizeof *which), *at = malloc((live ? live : 1) * sizeof *at);
    const char **names = malloc((live ? live : 1) * sizeof *names);
    if (!which || !at || !names || !rowset_alloc(r, live, em->dim)) {
        free(which); free(at); free(names);
        return hx_err(e, HX_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < log->n; i++) {
        const kb_entry *en = &log->e[i];
        if (en->deleted) continue;
        r->cur.offset[k] = en->offset;
        r->cur.hash[k] = en->hash;
        names[k] = en->topic;
        int c = cache_find(old, en->offset);
        /* a cached vector is reused only for the same text (hash 0: v1 cache, trusted once) */
        if (c >= 0 && (old->hash[c] == en->hash || old->hash[c] == 0))
            memcpy(r->cur.vec + k * (size_t)em->dim, old->vec + (size_t)c * em->dim, sizeof(float) * (size_t)em->dim);
        else { which[n_todo] = i; at[n_todo++] = k; }
        k++;
    }
    st = rowset_topics(r, names, e);
    double t = hx_now_s();
    if (!st) st = kb_embed_rows(em, log, which, at, n_todo, r->cur.vec, progress ? "" : NULL, e);
    *embed_s = hx_now_s() - t;
    *embedded = n_todo;
    free(which); free(at); free(names);
    return st;
}

/* An incremental pass's reading: the bytes after s->read_to; the kept rows of
 * the cache minus deletes, then the new entries. *n_old = kept rows;
 * old_map[t] (s->n_topics) = this pass's id of the state's topic t, or -1;
 * old_count[t] its entries before, touched[t] 1 if one of them was deleted.
 * The cache's arrays move into r->cur (compacted in place, then grown): old
 * keeps only n and sum, so the vectors are held once. */
static hx_status read_incremental(const char *log_path, kb_embedder *em, kb_cache *old, const kb_state *s,
                                  bool progress, kb_log *log, rowset *r, size_t *n_old, uint64_t **del,
                                  size_t *n_del, int *old_map, int *old_count, uint8_t *touched, size_t *embedded,
                                  double *embed_s, hx_error *e) {
    log->read_to = log->quiet_below = s->read_to;
    log->prior_live = old->offset; log->n_prior_live = old->n;
    log->prior_deleted = s->deleted; log->n_prior_deleted = s->n_deleted;
    hx_status st = kb_log_read(log, log_path, e);
    if (st) return st;
    if (log->n_del) qsort(log->del, log->n_del, sizeof *log->del, u64_cmp);
    size_t nd = 0;
    for (size_t i = 0; i < log->n_del; i++) if (!nd || log->del[i] != log->del[nd - 1]) log->del[nd++] = log->del[i];
    log->n_del = nd;
    *del = log->del;
    *n_del = nd;
    size_t n_new = kb_log_live(log), n = old->n - nd + n_new, k = 0;
    const char **names = malloc((s->n_topics + n + 1) * sizeof *names);
    int *tid = malloc((s->n_topics + n + 1) * sizeof *tid);
    size_t *which = malloc((n_new ? n_new : 1) * sizeof *which), *at = malloc((n_new ? n_new : 1) * sizeof *at);
    r->topic = malloc((n ? n : 1) * sizeof *r->topic);
    if (!names || !tid || !which || !at || !r->topic) {
        free(names); free(tid); free(which); free(at);
        return hx_err(e, HX_ERR_NOMEM, "out of memory");
    }
    /* the old table first, so old ids stay; then each row's name */
    for (int t = 0; t < s->n_topics; t++) names[t] = s->topics[t];
    const size_t D = (size_t)em->dim;
    for (size_t i = 0; i < old->n; i++) {
        old_count[s->topic[i]]++;
        if (has_u64(log->del, nd, old->offset[i])) { touched[s->topic[i]] = 1; continue; }
        if (k != i) {
            old->offset[k] = old->offset[i];
            old->hash[k] = old->hash[i];
            memcpy(old->vec + k * D, old->vec + i * D, sizeof(float) * D);
        }
        names[s->n_topics + k] = s->topics[s->topic[i]];
        k++;
    }
    *n_old = k;
    uint64_t *ro = realloc(old->offset, (n ? n : 1) * 8), *rh = ro ? realloc(old->hash, (n ? n : 1) * 8) : NULL;
    float *rv = rh ? realloc(old->vec, (n ? n : 1) * D * sizeof(float)) : NULL;
    if (ro) old->offset = ro;
    if (rh) old->hash = rh;
    if (!rv) { free(names); free(tid); free(which); free(at); return hx_err(e, HX_ERR_NOMEM, "out of memory"); }
    r->cur = (kb_cache){.offset = ro, .hash = rh, .vec = rv, .n = n, .dim = em->dim};
    old->offset = old->hash = NULL;
    old->vec = NULL;
    size_t m = 0;
    for (size_t i = 0; i < log->n; i++) {
        if (log->e[i].deleted) continue;
        r->cur.offset[k] = log->e[i].offset;
        r->cur.hash[k] = log->e[i].hash;
        names[s->n_topics + k] = log->e[i].topic;
        which[m] = i; at[m++] = k;
        k++;
    }
    /* ids over table + rows; then rows keep only their own topics, renumbered
     * in order of the table (topics whose entries are all gone drop out) */
    char **tab = NULL;
    int T = 0;
    st = kb_topic_table(names, (size_t)s->n_topics + n, tid, &tab, &T, e);
    if (!st) {
        int *cnt = calloc((size_t)T + 1, sizeof *cnt), *remap = malloc(((size_t)T + 1) * sizeof *remap);
        if (!cnt || !remap) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        for (size_t i = 0; !st && i < n; i++) cnt[tid[s->n_topics + i]]++;
        int live_t = 0;
        for (int t = 0; !st && t < T; t++) remap[t] = cnt[t] ? live_t++ : -1;
        if (!st) {
            r->names = calloc((size_t)(live_t ? live_t : 1), sizeof *r->names);
            r->count = calloc((size_t)(live_t ? live_t : 1), sizeof *r->count);
            if (!r->names || !r->count) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        }
        for (int t = 0; !st && t < T; t++)
            if (remap[t] >= 0 && !(r->names[remap[t]] = strdup(tab[t]))) st = hx_err(e, HX_ERR_NOMEM, "out of memory");
        if (!st) {
            r->n_topics = live_t;
            for (size_t i = 0; i < n; i++) { r->topic[i] = remap[tid[s->n_topics + i]]; r->count[r->topic[i]]++; }
            for (int t = 0; t < s->n_topics; t++) old_map[t] = remap[tid[t]];
        }
        free(cnt); free(remap);
    }
    free(tab);
    double t = hx_now_s();
    if (!st) st = kb_embed_rows(em, log, which, at, m, r->cur.vec, progress ? "" : NULL, e);
    *embed_s = hx_now_s() - t;
    *embedded = m;
    free(names); free(tid); free(which); free(at);
    return st;
}

/* Kept lists after an incremental read: pairs of deleted entries out; the
 * single-entry topic overlaps renumbered to this pass's topic ids (map) and
 * kept only while both topics still have exactly one entry. False: a topic
 * fell back to one entry (its pairs with other single-entry topics were never
 * kept): a full pass is needed. */
static bool carry_lists(kb_state *s, const uint64_t *del, size_t n_del, const int *map, const int *old_count,
                        const uint8_t *touched, const rowset *r) {
    for (int i = 0; i < 2; i++) {
        kb_klist *l = &s->list[i];
        int m = 0;
        for (int q = 0; q < l->n; q++)
            if (!has_u64(del, n_del, l->p[q].a) && !has_u64(del, n_del, l->p[q].b)) l->p[m++] = l->p[q];
        l->n = m;
    }
    /* touched: a topic that lost an entry (a single-entry topic may have a new
     * one now, whose pairs the new rows' pass forms afresh) */
    bool ok = true;
    for (int t = 0; ok && t < s->n_topics; t++)
        if (old_count[t] >= 2 && map[t] >= 0 && r->count[map[t]] == 1) ok = false;
    kb_klist *l = &s->list[2];
    int m = 0;
    for (int q = 0; ok && q < l->n; q++) {
        int a = map[l->p[q].a], b = map[l->p[q].b];
        if (touched[l->p[q].a] || touched[l->p[q].b] || a < 0 || b < 0 || r->count[a] != 1 || r->count[b] != 1) continue;
        l->p[m] = l->p[q];
        l->p[m].a = (uint64_t)(a < b ? a : b);
        l->p[m].b = (uint64_t)(a < b ? b : a);
        m++;
    }
    if (!ok) return false;
    l->n = m;
    /* ids changed: re-sort, and keep of the cut only its similarity (complete
     * for every pair strictly more similar: a weaker claim, still true) */
    kb_klist_sort(l);
    l->cut.a = l->cut.b = 0;
    return true;
}

/* The offsets of the entries the report names, increasing, unique. */
static uint64_t *report_offsets(const kb_insights *in, size_t *n) {
    uint64_t *o = malloc(((size_t)(in->n_dups + in->n_links) * 2 + 1) * sizeof *o);
    if (!o) return NULL;
    size_t k = 0;
    for (int i = 0; i < in->n_dups; i++) { o[k++] = in->dups[i].a; o[k++] = in->dups[i].b; }
    for (int i = 0; i < in->n_links; i++) { o[k++] = in->links[i].a; o[k++] = in->links[i].b; }
    qsort(o, k, sizeof *o, u64_cmp);
    size_t m = 0;
    for (size_t i = 0; i < k; i++) if (!m || o[i] != o[m - 1]) o[m++] = o[i];
    *n = m;
    return o;
}

/* A sorted union of two increasing offset lists (the deleted entries). */
static uint64_t *merge_sorted(const uint64_t *a, size_t na, const uint64_t *b, size_t nb, size_t *n) {
    uint64_t *o = malloc((na + nb + 1) * sizeof *o);
    if (!o) return NULL;
    size_t i = 0, j = 0, k = 0;
    while (i < na || j < nb) {
        uint64_t x = j >= nb || (i < na && a[i] < b[j]) ? a[i++] : b[j++];
        if (!k || o[k - 1] != x) o[k++] = x;
    }
    *n = k;
    return o;
}

hx_status kb_run_pass(const char *dir, kb_embedder *em, hx_pool *pool, const kb_opts *o, bool print_summary,
                      bool progress, uint64_t *reported_to, kb_pass_stats *stats, hx_error *e) {
    double t0 = hx_now_s();
    char log_path[4096], cache_path[4096], report_path[4096], state_path[4096];
    snprintf(log_path, sizeof log_path, "%s/data.log", dir);
    snprintf(cache_path, sizeof cache_path, "%s/embeddings.bin", dir);
    snprintf(report_path, sizeof report_path, "%s/insights.json", dir);
    snprintf(state_path, sizeof state_path, "%s/insights.state", dir);
    kb_log log = {0}, labels = {0};
    kb_cache old = {0};
    kb_state s = {0};
    rowset r = {0};
    kb_klist d = {0}, l = {0}, o1 = {0}, om = {0}, over = {0}, nd = {0}, nl = {0}, no1 = {0};
    kb_insights in = {0};
    uint64_t *del = NULL, *deleted = NULL, *offs = NULL;
    int *old_map = NULL, *old_count = NULL;
    uint8_t *touched = NULL;
    size_t n_del = 0, n_deleted = 0, n_old = 0, embedded = 0;
    double embed_only = 0;
    uint64_t quiet = reported_to ? *reported_to : 0;
    hx_status st = HX_OK;
    struct stat sb;
    int fd = kb_open_regular(log_path, false, &sb, e);
    if (fd < 0) return e ? e->status : HX_ERR_IO;
    kb_cache_load(&old, cache_path, em);
    bool inc = !o->full && state_load(state_path, &old, o, &s);
    if (inc) { /* the same file, not shorter, the same bytes where checked */
        uint64_t h, t;
        inc = s.dev == (uint64_t)sb.st_dev && s.ino == (uint64_t)sb.st_ino && s.read_to <= (uint64_t)sb.st_size &&
              log_marks(fd, s.read_to, &h, &t) && h == s.head && t == s.tail;
        if (!inc) HX_INFO("%s: changed before the kept offset %llu: a full pass", log_path, (unsigned long long)s.read_to);
    }
    double t_embed = hx_now_s();
    bool read_inc = inc; /* how data.log was read: from the kept offset, or whole */
    if (inc) {
        size_t nt = (size_t)(s.n_topics ? s.n_topics : 1);
        old_map = malloc(nt * sizeof *old_map);
        old_count = calloc(nt, sizeof *old_count);
        touched = calloc(nt, 1);
        if (!old_map || !old_count || !touched) {
            st = hx_err(e, HX_ERR_NOMEM, "out of memory");
            goto done;
        }
        st = read_incremental(log_path, em, &old, &s, progress, &log, &r, &n_old, &del, &n_del, old_map, old_count,
                              touched, &embedded, &embed_only, e);
        if (st == HX_ERR_RANGE) { /* shrank since the state was written */
            kb_log_free(&log); rowset_free(&r); memset(&log, 0, sizeof log);
            inc = read_inc = false;
            st = HX_OK;
        } else if (st) goto done;
    }
    if (!read_inc) {
        if ((st = read_full(log_path, em, &old, quiet, progress, &log, &r, &embedded, &embed_only, e))) goto done;
    }
    t_embed = hx_now_s() - t_embed;
    if (o->allpairs_log && embedded) /* the embedder alone; t_embed adds reading data.log and the cache */
        fprintf(stderr, "embedding: %zu texts with %s, %.3f s (%.0f texts/s); reading %.3f s\n", embedded, em->name,
                embed_only, embed_only > 0 ? (double)embedded / embed_only : 0.0, t_embed - embed_only);
    double t_an = hx_now_s();
    kb_rows rows = {r.cur.n, em->dim, r.cur.offset, r.topic, r.cur.vec, r.n_topics, r.count};
    int kd = kb_keep_depth(o->max_dups), kl = kb_keep_depth(o->max_links), ko = kb_keep_depth(kb_max_overlaps(o));
    bool have = false;
    if (inc && !carry_lists(&s, del, n_del, old_map, old_count, touched, &r)) inc = false; /* a topic fell back to one entry */
    if (inc) {
        /* new rows against all rows, merged into the kept lists */
        if ((st = kb_entry_pairs(pool, &rows, n_old, o, &nd, &nl, &no1, e))) goto done;
        d = s.list[0]; l = s.list[1]; o1 = s.list[2];
        memset(s.list, 0, sizeof s.list);
        if ((st = kb_klist_union(&d, &nd, kd, e)) || (st = kb_klist_union(&l, &nl, kl, e)) ||
            (st = kb_klist_union(&o1, &no1, ko, e)))
            goto done;
        have = true;
    }
    if ((st = kb_multi_overlaps(pool, &rows, o, &om, e))) goto done;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!have) { /* all pairs */
            kb_klist_free(&d); kb_klist_free(&l); kb_klist_free(&o1);
            if ((st = kb_entry_pairs(pool, &rows, 0, o, &d, &l, &o1, e))) goto done;
            have = true;
        }
        kb_klist_free(&over);
        if (!(over.p = malloc((size_t)(o1.n + 1) * sizeof *over.p))) { st = hx_err(e, HX_ERR_NOMEM, "out of memory"); goto done; }
        if (o1.n) memcpy(over.p, o1.p, (size_t)o1.n * sizeof *over.p);
        over.n = o1.n; over.has_cut = o1.has_cut; over.cut = o1.cut;
        if ((st = kb_klist_union(&over, &om, ko, e))) goto done;
        if (kb_klist_fills(&d, o->max_dups) && kb_klist_fills(&l, o->max_links) && kb_klist_fills(&over, kb_max_overlaps(o)))
            break;
        have = false; /* the kept lists ran short (deletes): compare all pairs */
        inc = false;
    }
    if ((st = kb_insights_from(&d, &l, &over, o, r.names, r.n_topics, &in, e))) goto done;
    t_an = hx_now_s() - t_an;
    /* the entries deleted so far: for the next pass's deletes of them */
    if ((read_inc && s.n_deleted) || n_del || log.n > kb_log_live(&log)) {
        size_t nn = 0;
        uint64_t *newly = malloc((n_del + log.n + 1) * sizeof *newly);
        if (!newly) { st = hx_err(e, HX_ERR_NOMEM, "out of memory"); goto done; }
        for (size_t i = 0; i < n_del; i++) newly[nn++] = del[i];
        for (size_t i = 0; i < log.n; i++) if (log.e[i].deleted) newly[nn++] = log.e[i].offset;
        qsort(newly, nn, sizeof *newly, u64_cmp);
        deleted = merge_sorted(read_inc ? s.deleted : NULL, read_inc ? s.n_deleted : 0, newly, nn, &n_deleted);
        free(newly);
        if (!deleted) { st = hx_err(e, HX_ERR_NOMEM, "out of memory"); goto done; }
    }
    bool changed = embedded || old.n != r.cur.n || !old.sum;
    /* only appended (no deletes moved rows): the new records beside the base */
    if (changed && (st = kb_cache_save_append(&r.cur, read_inc && !n_del ? n_old : 0, cache_path, em, e))) goto done;
    if (!changed) r.cur.sum = old.sum;
    {
        kb_state ns = {.cache_sum = r.cur.sum, .cache_n = r.cur.n, .read_to = log.read_to, .dev = (uint64_t)sb.st_dev,
                       .ino = (uint64_t)sb.st_ino, .malformed = (read_inc ? s.malformed : 0) + log.n_malformed,
                       .n_topics = r.n_topics, .topics = r.names, .deleted = deleted, .n_deleted = n_deleted};
        opts_key(o, ns.thr, ns.k);
        ns.topic = malloc((r.cur.n ? r.cur.n : 1) * 4);
        if (!ns.topic) { st = hx_err(e, HX_ERR_NOMEM, "out of memory"); goto done; }
        for (size_t i = 0; i < r.cur.n; i++) ns.topic[i] = (uint32_t)r.topic[i];
        ns.list[0] = d; ns.list[1] = l; ns.list[2] = o1;
        if (!log_marks(fd, log.read_to, &ns.head, &ns.tail)) {
            free(ns.topic);
            st = hx_err(e, HX_ERR_IO, "%s: read failed", log_path);
            goto done;
        }
        st = state_save(state_path, &ns, e);
        free(ns.topic);
        if (st) goto done;
    }
    /* labels for the report: the full log when it was read, else the named lines */
    const kb_log *lab = &log;
    if (read_inc) {
        size_t n_offs = 0;
        if (!(offs = report_offsets(&in, &n_offs))) { st = hx_err(e, HX_ERR_NOMEM, "out of memory"); goto done; }
        if ((st = kb_log_read_at(&labels, log_path, offs, n_offs, e))) {
            /* rewritten where the marks did not look: the next pass is a full one */
            if (st == HX_ERR_RANGE) { unlink(state_path); hx_err_prefix(e, "the next pass reads it all"); }
            goto done;
        }
        lab = &labels;
    }
    if ((st = kb_write_report(report_path, lab, &in, r.cur.n, em->name, e))) goto done;
    if (print_summary) kb_print_summary(stdout, lab, &in, r.cur.n);
    if (reported_to) *reported_to = log.read_to > log.quiet_below ? log.read_to : log.quiet_below;
    if (stats)
        *stats = (kb_pass_stats){.entries = r.cur.n + n_deleted, .live = r.cur.n, .embedded = embedded,
                                 .malformed = (size_t)((read_inc ? s.malformed : 0) + log.n_malformed),
                                 .dups = (size_t)in.n_dups, .links = (size_t)in.n_links, .overlaps = (size_t)in.n_overlaps,
                                 .seconds = hx_now_s() - t0, .embed_seconds = t_embed, .analyze_seconds = t_an,
                                 .incremental = inc, .new_entries = read_inc ? log.n : 0, .deleted = n_del};
done:
    close(fd);
    kb_klist_free(&d); kb_klist_free(&l); kb_klist_free(&o1); kb_klist_free(&om); kb_klist_free(&over);
    kb_klist_free(&nd); kb_klist_free(&nl); kb_klist_free(&no1);
    kb_insights_free(&in);
    free(deleted); free(offs); free(old_map); free(old_count); free(touched);
    state_free(&s);
    rowset_free(&r);
    kb_cache_free(&old);
    kb_log_free(&log);
    kb_log_free(&labels);
    return st;
}

hx_status kb_state_save_full(const char *dir, int log_fd, const struct stat *sb, const kb_cache *cur, const kb_opts *o,
                             uint64_t read_to, uint64_t malformed, char **names, int n_topics, const int *topic,
                             const uint64_t *deleted, size_t n_deleted, const kb_klist lists[3], hx_error *e) {
    char path[4096], log_path[4096];
    snprintf(path, sizeof path, "%s/insights.state", dir);
    snprintf(log_path, sizeof log_path, "%s/data.log", dir);
    kb_state ns = {.cache_sum = cur->sum, .cache_n = cur->n, .read_to = read_to, .dev = (uint64_t)sb->st_dev,
                   .ino = (uint64_t)sb->st_ino, .malformed = malformed, .n_topics = n_topics, .topics = names,
                   .deleted = (uint64_t *)deleted, .n_deleted = n_deleted};
    opts_key(o, ns.thr, ns.k);
    for (int i = 0; i < 3; i++) ns.list[i] = lists[i];
    if (!log_marks(log_fd, read_to, &ns.head, &ns.tail)) return hx_err(e, HX_ERR_IO, "%s: read failed", log_path);
    if (!(ns.topic = malloc((cur->n ? cur->n : 1) * 4))) return hx_err(e, HX_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < cur->n; i++) ns.topic[i] = (uint32_t)topic[i];
    hx_status st = state_save(path, &ns, e);
    free(ns.topic);
    return st;
}
