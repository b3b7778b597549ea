/* search.c — kb_index (live entries, their vectors, BM25 postings) and
 * kb_search (cosine, BM25, reciprocal rank fusion). See search.h. */
#include "kb/search.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/core.h"

#define RRF_K 60.0
#define FUSE_TOP 1000   /* each list's top entries that take part in the fusion */

/* Words as the lexical embedder splits them: runs of ASCII alphanumerics, '_'
 * and non-ASCII bytes, lowercased; fn(word, len, user) for each. */
static void for_words(const char *s, void (*fn)(const char *w, size_t n, void *u), void *u) {
    char buf[256];
    for (size_t i = 0; s[i];) {
        while (s[i] && !(isalnum((unsigned char)s[i]) || s[i] == '_' || (unsigned char)s[i] >= 0x80)) i++;
        size_t n = 0;
        while (s[i] && (isalnum((unsigned char)s[i]) || s[i] == '_' || (unsigned char)s[i] >= 0x80)) {
            if (n < sizeof buf) buf[n++] = (char)tolower((unsigned char)s[i]);
            i++;
        }
        if (n) fn(buf, n, u);
    }
}

typedef struct word_acc { uint64_t *terms; size_t n, cap; bool oom; } word_acc;
static void acc_word(const char *w, size_t n, void *u) {
    word_acc *a = u;
    if (a->oom) return;
    if (a->n == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 64;
        uint64_t *t = realloc(a->terms, cap * sizeof *t);
        if (!t) { a->oom = true; return; }
        a->terms = t;
        a->cap = cap;
    }
    a->terms[a->n++] = hx_fnv1a(w, n, HX_FNV_INIT);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}
static int cmp_post(const void *a, const void *b) {
    const kb_posting *x = a, *y = b;
    if (x->term != y->term) return x->term < y->term ? -1 : 1;
    return x->doc < y->doc ? -1 : x->doc > y->doc;
}

/* The fingerprint an embeddings.bin (v2 or v3) was written with, into fp; false when
 * the file is absent or not a v2/v3 cache (then the open decides nothing). */
static bool cache_fingerprint(const char *path, char *fp, size_t cap) {
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    unsigned char h[20];
    bool ok = fread(h, 1, 20, f) == 20 && !memcmp(h, "HXEC", 4);
    uint32_t ver, fpl;
    memcpy(&ver, h + 4, 4);
    memcpy(&fpl, h + 16, 4);
    ok = ok && (ver == 2 || ver == 3) && fpl < cap && fread(fp, 1, fpl, f) == fpl;
    fclose(f);
    if (ok) fp[fpl] = 0;
    return ok;
}

void kb_index_free(kb_index *ix) {
    kb_log_free(&ix->log);
    free(ix->idx); free(ix->vec); free(ix->has_vec); free(ix->doc_len); free(ix->post);
    memset(ix, 0, sizeof *ix);
}

/* prev's row of the live entry en (same id and text), or -1: prev->idx is
 * increasing, so a binary search over it finds the log index kb_log_find gives. */
static long prev_row(const kb_index *prev, const kb_entry *en) {
    if (!prev || !prev->n) return -1;
    const kb_entry *pe = kb_log_find(&prev->log, en->offset);
    if (!pe || pe->deleted || pe->hash != en->hash) return -1;
    size_t li = (size_t)(pe - prev->log.e), lo = 0, hi = prev->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (prev->idx[mid] < li) lo = mid + 1;
        else hi = mid;
    }
    return lo < prev->n && prev->idx[lo] == li && prev->has_vec[lo] ? (long)lo : -1;
}

hx_status kb_index_open(const char *dir, kb_embedder *em, long max_embed_new, kb_index *ix, hx_error *e) {
    return kb_index_reopen(dir, em, max_embed_new, NULL, ix, e);
}

hx_status kb_index_reopen(const char *dir, kb_embedder *em, long max_embed_new, const kb_index *prev, kb_index *ix,
                          hx_error *e) {
    memset(ix, 0, sizeof *ix);
    if (prev && prev->dim != em->dim) prev = NULL;
    char logp[4096], cachep[4096], fp[300];
    snprintf(logp, sizeof logp, "%s/data.log", dir);
    snprintf(cachep, sizeof cachep, "%s/embeddings.bin", dir);
    if (access(logp, F_OK) != 0) return hx_err(e, HX_ERR_IO, "%s: no data.log in this directory", logp);
    /* a KB embedded with this BERT model's int8 linear layers (--embed-type int8): the
     * query is embedded the same way, so its vector compares with the KB's */
    size_t fl = strlen(em->fingerprint);
    if (cache_fingerprint(cachep, fp, sizeof fp) && strcmp(fp, em->fingerprint) && !strncmp(fp, em->fingerprint, fl) &&
        !strcmp(fp + fl, ":int8")) {
        hx_status st = kb_neural_set_type(em, "int8", e);
        if (st) return st;
    }
    if (cache_fingerprint(cachep, fp, sizeof fp) && strcmp(fp, em->fingerprint))
        return hx_err(e, HX_ERR_ARG,
                      "%s was made by the embedder '%s', not '%s': its vectors do not compare with this query's "
                      "(search with the KB's embedder, --embed-model for a BERT model, or run a pass with this one)",
                      cachep, fp, em->fingerprint);
    if (prev) ix->log.quiet_below = prev->log.read_to;   /* malformed lines prev reported: counted, not printed again */
    hx_status st = kb_log_read(&ix->log, logp, e);
    if (st) { kb_index_free(ix); return st; }
    size_t live = kb_log_live(&ix->log);
    ix->dim = em->dim;
    ix->idx = malloc((live ? live : 1) * sizeof *ix->idx);
    ix->vec = calloc((live ? live : 1) * (size_t)em->dim, sizeof *ix->vec);
    ix->has_vec = calloc(live ? live : 1, sizeof *ix->has_vec);
    ix->doc_len = calloc(live ? live : 1, sizeof *ix->doc_len);
    if (!ix->idx || !ix->vec || !ix->has_vec || !ix->doc_len) { kb_index_free(ix); return hx_err(e, HX_ERR_NOMEM, "search: out of memory"); }
    for (size_t i = 0; i < ix->log.n; i++)
        if (!ix->log.e[i].deleted) ix->idx[ix->n++] = i;

    /* vectors from the cache where offset and text hash match (both sorted by offset) */
    kb_cache c;
    kb_cache_load(&c, cachep, em);
    size_t j = 0;
    size_t *todo = malloc((ix->n ? ix->n : 1) * sizeof *todo), n_todo = 0;
    if (!todo) { kb_cache_free(&c); kb_index_free(ix); return hx_err(e, HX_ERR_NOMEM, "search: out of memory"); }
    for (size_t i = 0; i < ix->n; i++) {
        const kb_entry *en = &ix->log.e[ix->idx[i]];
        while (j < c.n && c.offset[j] < en->offset) j++;
        if (j < c.n && c.offset[j] == en->offset && (c.hash[j] == en->hash || c.hash[j] == 0)) {
            memcpy(ix->vec + i * (size_t)ix->dim, c.vec + j * (size_t)c.dim, sizeof(float) * (size_t)ix->dim);
            ix->has_vec[i] = true;
        } else {
            long pr = prev_row(prev, en);   /* embedded by an earlier open: keep that vector */
            if (pr >= 0) {
                memcpy(ix->vec + i * (size_t)ix->dim, prev->vec + (size_t)pr * (size_t)prev->dim,
                       sizeof(float) * (size_t)ix->dim);
                ix->has_vec[i] = true;
            } else {
                todo[n_todo++] = i;
            }
        }
    }
    kb_cache_free(&c);
    size_t n_embed = max_embed_new < 0 || (size_t)max_embed_new > n_todo ? n_todo : (size_t)max_embed_new;
    for (size_t b = 0; b < n_embed && !st; b += 256) {
        size_t nb = n_embed - b < 256 ? n_embed - b : 256;
        char *texts[256];
        size_t got = 0;
        for (; got < nb; got++)
            if (!(texts[got] = kb_entry_text(&ix->log.e[ix->idx[todo[b + got]]]))) break;
        float *out = got == nb ? malloc(sizeof(float) * nb * (size_t)ix->dim) : NULL;
        if (!out) st = hx_err(e, HX_ERR_NOMEM, "search: out of memory");
        else st = em->embed(em, (const char *const *)texts, (int)nb, out, e);
        for (size_t k = 0; k < nb && !st; k++) {
            memcpy(ix->vec + todo[b + k] * (size_t)ix->dim, out + k * (size_t)ix->dim, sizeof(float) * (size_t)ix->dim);
            ix->has_vec[todo[b + k]] = true;
        }
        for (size_t k = 0; k < got; k++) free(texts[k]);
        free(out);
    }
    free(todo);
    if (st) { kb_index_free(ix); return st; }
    ix->n_embedded = n_embed;
    ix->n_unindexed = n_todo - n_embed;

    /* BM25 postings: (term, doc, tf) sorted by term */
    size_t cap = 0;
    double total = 0;
    for (size_t i = 0; i < ix->n; i++) {
        char *text = kb_entry_text(&ix->log.e[ix->idx[i]]);
        word_acc a = {0};
        if (text) for_words(text, acc_word, &a);
        free(text);
        if (!text || a.oom) { free(a.terms); kb_index_free(ix); return hx_err(e, HX_ERR_NOMEM, "search: out of memory"); }
        ix->doc_len[i] = (uint32_t)a.n;
        total += (double)a.n;
        qsort(a.terms, a.n, sizeof *a.terms, cmp_u64);
        for (size_t k = 0; k < a.n;) {
            size_t r = k;
            while (r < a.n && a.terms[r] == a.terms[k]) r++;
            if (ix->n_post == cap) {
                cap = cap ? 2 * cap : 4096;
                kb_posting *p = realloc(ix->post, cap * sizeof *p);
                if (!p) { free(a.terms); kb_index_free(ix); return hx_err(e, HX_ERR_NOMEM, "search: out of memory"); }
                ix->post = p;
            }
            ix->post[ix->n_post++] = (kb_posting){a.terms[k], (uint32_t)i, (uint32_t)(r - k)};
            k = r;
        }
        free(a.terms);
    }
    ix->avg_len = ix->n ? total / (double)ix->n : 0;
    if (ix->n_post) qsort(ix->post, ix->n_post, sizeof *ix->post, cmp_post);
    return HX_OK;
}

typedef struct scored { size_t i; double s; } scored;
static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? 1 : -1;
    return x->i < y->i ? -1 : x->i > y->i;   /* ties: earlier entry first */
}

static bool topic_ok(const kb_index *ix, size_t i, const char *topic) {
    return !topic || !strcasecmp(ix->log.e[ix->idx[i]].topic ? ix->log.e[ix->idx[i]].topic : "", topic);
}

/* The first posting of term (binary search), or n_post. */
static size_t post_lower(const kb_index *ix, uint64_t term) {
    size_t lo = 0, hi = ix->n_post;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->post[mid].term < term) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Keep the best `keep` candidates (cmp_scored order) in c[0..), sorted: a
 * min-heap of the best so far, O(n log keep) instead of sorting all n. */
static bool worse(const scored *a, const scored *b) { return cmp_scored(a, b) > 0; }
static void sift(scored *h, size_t n, size_t j) {
    for (;;) {
        size_t m = j, l = 2 * j + 1, r = l + 1;
        if (l < n && worse(&h[l], &h[m])) m = l;
        if (r < n && worse(&h[r], &h[m])) m = r;
        if (m == j) return;
        scored t = h[j]; h[j] = h[m]; h[m] = t;
        j = m;
    }
}
static size_t top_of(scored *c, size_t n, size_t keep) {
    if (n <= keep) {
        qsort(c, n, sizeof *c, cmp_scored);
        return n;
    }
    for (size_t j = keep / 2; j-- > 0;) sift(c, keep, j);
    for (size_t i = keep; i < n; i++)
        if (worse(&c[0], &c[i])) { c[0] = c[i]; sift(c, keep, 0); }
    qsort(c, keep, sizeof *c, cmp_scored);
    return keep;
}

/* Dot product in 8 independent partial sums (vectorizes without -ffast-math). */
static float dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int d = 0;
    for (; d + 8 <= n; d += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[d + k] * b[d + k];
    float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; d < n; d++) s += a[d] * b[d];
    return s;
}

hx_status kb_search(const kb_index *ix, kb_embedder *em, const char *query, const kb_search_opts *o, kb_hit *hits,
                    int *n_hits, hx_error *e) {
    *n_hits = 0;
    int k = o->k > 0 ? o->k : 10;
    if (!query || !*query) return hx_err(e, HX_ERR_ARG, "search: empty query");
    if (ix->n == 0) return HX_OK;
    bool use_vec = !o->lexical_only, use_lex = !o->semantic_only;
    double *bm = calloc(ix->n, sizeof *bm);
    float *cos = malloc(ix->n * sizeof *cos);
    scored *cv = malloc(ix->n * sizeof *cv), *cl = malloc(ix->n * sizeof *cl);
    int *rank_v = calloc(ix->n, sizeof *rank_v), *rank_l = calloc(ix->n, sizeof *rank_l);
    float *q = malloc(sizeof(float) * (size_t)ix->dim);
    hx_status st = HX_OK;
    if (!bm || !cos || !cv || !cl || !rank_v || !rank_l || !q) { st = hx_err(e, HX_ERR_NOMEM, "search: out of memory"); goto done; }

    size_t nv = 0, nl = 0;
    if (use_vec) {
        if ((st = em->embed(em, &query, 1, q, e))) goto done;
        for (size_t i = 0; i < ix->n; i++) {
            cos[i] = -2.0f;
            if (!ix->has_vec[i] || !topic_ok(ix, i, o->topic)) continue;
            float s = dot(q, ix->vec + i * (size_t)ix->dim, ix->dim);
            cos[i] = s;
            cv[nv++] = (scored){i, s};
        }
        nv = top_of(cv, nv, FUSE_TOP);
        for (size_t r = 0; r < nv; r++) rank_v[cv[r].i] = (int)r + 1;
    } else {
        for (size_t i = 0; i < ix->n; i++) cos[i] = ix->has_vec[i] ? 0.0f : -2.0f;
    }
    {   /* BM25 over the query's distinct words (scores are kept for display even when not fused) */
        word_acc a = {0};
        for_words(query, acc_word, &a);
        if (a.oom) { free(a.terms); st = hx_err(e, HX_ERR_NOMEM, "search: out of memory"); goto done; }
        qsort(a.terms, a.n, sizeof *a.terms, cmp_u64);
        const double k1 = 1.2, b = 0.75, N = (double)ix->n;
        for (size_t t = 0; t < a.n; t++) {
            if (t > 0 && a.terms[t] == a.terms[t - 1]) continue;
            size_t p0 = post_lower(ix, a.terms[t]), p1 = p0;
            while (p1 < ix->n_post && ix->post[p1].term == a.terms[t]) p1++;
            double df = (double)(p1 - p0);
            if (df == 0) continue;
            double idf = log(1.0 + (N - df + 0.5) / (df + 0.5));
            for (size_t p = p0; p < p1; p++) {
                const kb_posting *ps = &ix->post[p];
                double tf = ps->tf, dl = ix->doc_len[ps->doc];
                bm[ps->doc] += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / (ix->avg_len > 0 ? ix->avg_len : 1)));
            }
        }
        free(a.terms);
        for (size_t i = 0; i < ix->n; i++)
            if (bm[i] > 0 && topic_ok(ix, i, o->topic)) cl[nl++] = (scored){i, bm[i]};
        nl = top_of(cl, nl, FUSE_TOP);
        for (size_t r = 0; r < nl; r++) rank_l[cl[r].i] = (int)r + 1;
    }

    /* the final order */
    scored *fin = NULL;
    size_t nf = 0;
    if (use_vec && !use_lex) { fin = cv; nf = nv; }
    else if (!use_vec) { fin = cl; nf = nl; }
    else {
        /* fused: every entry in either list; scores into cv's storage would clash, so reuse a fresh pass */
        scored *f = malloc((nv + nl + 1) * sizeof *f);
        if (!f) { st = hx_err(e, HX_ERR_NOMEM, "search: out of memory"); goto done; }
        for (size_t r = 0; r < nv; r++) {
            size_t i = cv[r].i;
            f[nf++] = (scored){i, 1.0 / (RRF_K + rank_v[i]) + (rank_l[i] ? 1.0 / (RRF_K + rank_l[i]) : 0)};
        }
        for (size_t r = 0; r < nl; r++) {
            size_t i = cl[r].i;
            if (rank_v[i]) continue;
            f[nf++] = (scored){i, 1.0 / (RRF_K + rank_l[i])};
        }
        qsort(f, nf, sizeof *f, cmp_scored);
        memcpy(cl, f, nf * sizeof *f);   /* cl has room for n >= nf entries */
        free(f);
        fin = cl;
    }
    for (size_t r = 0; r < nf && r < (size_t)k; r++) {
        size_t i = fin[r].i;
        hits[r] = (kb_hit){ix->idx[i], fin[r].s, cos[i], (float)bm[i], rank_v[i], rank_l[i]};
        (*n_hits)++;
    }
done:
    free(bm); free(cos); free(cv); free(cl); free(rank_v); free(rank_l); free(q);
    return st;
}

typedef struct qw { char (*w)[64]; int n, cap; } qw;
static void add_qword(const char *w, size_t n, void *u) {
    qw *a = u;
    if (a->n >= a->cap || n < 2 || n > 63) return;
    for (int i = 0; i < a->n; i++)
        if (strlen(a->w[i]) == n && !memcmp(a->w[i], w, n)) return;
    memcpy(a->w[a->n], w, n);
    a->w[a->n++][n] = 0;
}

int kb_query_words(const char *query, char (*words)[64], int cap) {
    qw a = {words, 0, cap};
    for_words(query, add_qword, &a);
    return a.n;
}

char *kb_snippet(const char *text, char (*words)[64], int nw, size_t width, const char *hl_on, const char *hl_off) {
    bool hl = hl_on && hl_off;
    size_t n = strlen(text), at = n, on_l = hl ? strlen(hl_on) : 0, off_l = hl ? strlen(hl_off) : 0;
    for (int w = 0; w < nw; w++) {
        size_t wl = strlen(words[w]);
        for (size_t i = 0; i + wl <= n && i < at; i++)
            if (!strncasecmp(text + i, words[w], wl) && (i == 0 || !isalnum((unsigned char)text[i - 1]))) { at = i; break; }
    }
    size_t s = at == n || at < width / 3 ? 0 : at - width / 3;
    while (s > 0 && s < n && (text[s] != ' ' || ((unsigned char)text[s] & 0xC0) == 0x80)) s++;
    size_t end = s + width < n ? s + width : n;
    while (end < n && end > s && ((unsigned char)text[end] & 0xC0) == 0x80) end--;
    while (end < n && end > s + width / 2 && text[end] != ' ') end--;
    /* worst case: every byte a one-letter highlighted word */
    size_t cap = (end - s) * (1 + on_l + off_l) + 16;
    char *out = malloc(cap), *o = out;
    if (!out) return NULL;
    if (s > 0) { memcpy(o, "...", 3); o += 3; }
    for (size_t i = s; i < end;) {
        int match = -1;
        if (hl && (i == s || !isalnum((unsigned char)text[i - 1])))
            for (int w = 0; w < nw && match < 0; w++) {
                size_t wl = strlen(words[w]);
                if (i + wl <= end && !strncasecmp(text + i, words[w], wl) &&
                    (i + wl == n || !isalnum((unsigned char)text[i + wl])))
                    match = w;
            }
        if (match >= 0) {
            size_t wl = strlen(words[match]);
            memcpy(o, hl_on, on_l); o += on_l;
            memcpy(o, text + i, wl); o += wl;
            memcpy(o, hl_off, off_l); o += off_l;
            i += wl;
            continue;
        }
        *o++ = text[i] == '\n' || text[i] == '\r' || text[i] == '\t' ? ' ' : text[i];
        i++;
    }
    if (end < n) { memcpy(o, "...", 3); o += 3; }
    *o = 0;
    return out;
}
