/* kb.c — data.log reader, lexical embedder, embedding cache (see kb.h). */
#include "kb/kb.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}
#define FNV0 1469598103934665603ull

/* ---- data.log ---- */

/* Strict UTF-8 check (no overlongs, no surrogates, <= U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int k = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (k < 0 || (size_t)k >= n - i) return false;
        uint32_t cp = c & (0x3fu >> k);
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += (size_t)k + 1;
    }
    return true;
}

static bool log_push(kb_log *log, kb_entry en) {
    if (log->n == log->cap) {
        size_t cap = log->cap ? log->cap * 2 : 256;
        kb_entry *ne = realloc(log->e, cap * sizeof *ne);
        if (!ne) return false;
        log->e = ne;
        log->cap = cap;
    }
    log->e[log->n++] = en;
    return true;
}

kb_entry *kb_log_find(const kb_log *log, uint64_t off) {
    size_t lo = 0, hi = log->n; /* offsets increase: binary search */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (log->e[mid].offset < off) lo = mid + 1;
        else hi = mid;
    }
    return lo < log->n && log->e[lo].offset == off ? &log->e[lo] : NULL;
}

char *kb_entry_text(const kb_entry *en) {
    size_t a = en->title ? strlen(en->title) : 0, b = strlen(en->text);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    if (a) { memcpy(s, en->title, a); s[a] = '\n'; memcpy(s + a + 1, en->text, b + 1); }
    else memcpy(s, en->text, b + 1);
    return s;
}

static void malformed(kb_log *log, const char *path, uint64_t off, const char *why) {
    log->n_malformed++;
    if (off < log->quiet_below) return;
    HX_WARN("%s: offset %llu: %s; line skipped", path, (unsigned long long)off, why);
}

/* Parse one complete line at offset off. */
static hx_status parse_line(kb_log *log, const char *path, const char *line, size_t len, uint64_t off) {
    if (len == 0 || (len == 1 && line[0] == '\r')) return HX_OK; /* blank line */
    if (!utf8_valid((const unsigned char *)line, len)) { malformed(log, path, off, "invalid UTF-8"); return HX_OK; }
    cJSON *j = cJSON_ParseWithLength(line, len);
    if (!j || !cJSON_IsObject(j)) { malformed(log, path, off, "not a JSON object"); cJSON_Delete(j); return HX_OK; }
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(j, "delete");
    if (del) {
        if (!cJSON_IsNumber(del) || del->valuedouble < 0 || del->valuedouble != floor(del->valuedouble)) {
            malformed(log, path, off, "\"delete\" is not a byte offset");
        } else {
            kb_entry *t = kb_log_find(log, (uint64_t)del->valuedouble);
            if (!t) HX_INFO("%s: offset %llu: delete of %.0f, which is no entry; ignored", path, (unsigned long long)off, del->valuedouble);
            else t->deleted = true; /* deleting twice is harmless */
        }
        cJSON_Delete(j);
        return HX_OK;
    }
    const cJSON *topic = cJSON_GetObjectItemCaseSensitive(j, "topic"), *text = cJSON_GetObjectItemCaseSensitive(j, "text");
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(j, "title");
    if (!cJSON_IsString(topic) || !cJSON_IsString(text) || !*topic->valuestring) {
        malformed(log, path, off, "entry needs string \"topic\" and \"text\"");
        cJSON_Delete(j);
        return HX_OK;
    }
    kb_entry en = {.offset = off, .topic = strdup(topic->valuestring), .text = strdup(text->valuestring),
                   .title = cJSON_IsString(title) && *title->valuestring ? strdup(title->valuestring) : NULL};
    cJSON_Delete(j);
    if (!en.topic || !en.text) { free(en.topic); free(en.text); free(en.title); return HX_ERR_NOMEM; }
    char *t = kb_entry_text(&en);
    if (!t) { free(en.topic); free(en.text); free(en.title); return HX_ERR_NOMEM; }
    en.hash = fnv(t, strlen(t), FNV0);
    free(t);
    if (!log_push(log, en)) { free(en.topic); free(en.text); free(en.title); return HX_ERR_NOMEM; }
    return HX_OK;
}

hx_status kb_log_read(kb_log *log, const char *path, hx_error *e) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return hx_err(e, HX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) { close(fd); return hx_err(e, HX_ERR_IO, "%s: stat failed: %s", path, strerror(errno)); }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < log->read_to) {
        close(fd);
        return hx_err(e, HX_ERR_RANGE, "%s: file shrank from %llu to %llu bytes: the log was rewritten", path,
                      (unsigned long long)log->read_to, (unsigned long long)size);
    }
    /* read in chunks; only complete lines are consumed */
    size_t cap = 1 << 20, have = 0;
    char *buf = malloc(cap);
    uint64_t pos = log->read_to;
    hx_status st = HX_OK;
    if (!buf) { close(fd); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
    while (pos + have < size) {
        if (have == cap) {
            char *nb = realloc(buf, cap * 2); /* a line longer than the buffer: grow */
            if (!nb) { st = hx_err(e, HX_ERR_NOMEM, "%s: out of memory for a line at offset %llu", path, (unsigned long long)pos); break; }
            buf = nb;
            cap *= 2;
        }
        size_t want = cap - have;
        if (want > size - pos - have) want = (size_t)(size - pos - have);
        ssize_t r = pread(fd, buf + have, want, (off_t)(pos + have));
        if (r < 0) { if (errno == EINTR) continue; st = hx_err(e, HX_ERR_IO, "%s: read failed: %s", path, strerror(errno)); break; }
        if (r == 0) break;
        have += (size_t)r;
        size_t start = 0;
        for (;;) {
            char *nl = memchr(buf + start, '\n', have - start);
            if (!nl) break;
            size_t len = (size_t)(nl - (buf + start));
            if ((st = parse_line(log, path, buf + start, len, pos + start))) {
                st = hx_err(e, st, "%s: out of memory at offset %llu", path, (unsigned long long)(pos + start));
                break;
            }
            start += len + 1;
        }
        if (st) break;
        memmove(buf, buf + start, have - start);
        have -= start;
        pos += start;
    }
    free(buf);
    close(fd);
    log->read_to = pos; /* a partial last line stays unread */
    return st;
}

void kb_log_free(kb_log *log) {
    for (size_t i = 0; i < log->n; i++) { free(log->e[i].topic); free(log->e[i].title); free(log->e[i].text); }
    free(log->e);
    memset(log, 0, sizeof *log);
}

size_t kb_log_live(const kb_log *log) {
    size_t n = 0;
    for (size_t i = 0; i < log->n; i++) n += !log->e[i].deleted;
    return n;
}

/* ---- the built-in lexical embedder ----
 * Feature hashing of lowercased word unigrams and bigrams, weight 1 + log(tf),
 * a sign bit from the hash (so collisions cancel instead of pile up), common
 * English function words down-weighted, L2-normalized, 384 dims. */
#define LEX_DIM 384

static const char *k_stop[] = {"the", "a", "an", "and", "or", "of", "to", "in", "on", "for", "is", "are", "was",
                               "be", "it", "this", "that", "with", "as", "at", "by", "we", "our", "from", "not",
                               "but", "if", "when", "so", "can", "will", "its", "has", "have", "into", "than"};

static bool is_stop(const char *w, size_t n) {
    for (size_t i = 0; i < sizeof k_stop / sizeof k_stop[0]; i++)
        if (strlen(k_stop[i]) == n && !memcmp(k_stop[i], w, n)) return true;
    return false;
}

typedef struct feat { uint64_t h; float w; } feat;

static int feat_cmp(const void *a, const void *b) {
    uint64_t x = ((const feat *)a)->h, y = ((const feat *)b)->h;
    return x < y ? -1 : x > y;
}

static void lex_one(const char *text, float *out) {
    size_t n = strlen(text);
    char *low = malloc(n + 1);
    feat *f = malloc(sizeof *f * (2 * n + 2));
    memset(out, 0, sizeof(float) * LEX_DIM);
    if (!low || !f) { free(low); free(f); return; }
    size_t nf = 0;
    const char *pw = NULL; /* previous word */
    size_t pn = 0;
    bool pstop = false;
    for (size_t i = 0; i < n;) {
        /* words: runs of ASCII alphanumerics, '_' and any non-ASCII byte */
        while (i < n && !(isalnum((unsigned char)text[i]) || text[i] == '_' || (unsigned char)text[i] >= 0x80)) i++;
        size_t s = i;
        while (i < n && (isalnum((unsigned char)text[i]) || text[i] == '_' || (unsigned char)text[i] >= 0x80)) {
            low[i] = (char)tolower((unsigned char)text[i]);
            i++;
        }
        if (i == s) break;
        const char *w = low + s;
        size_t wn = i - s;
        bool stop = is_stop(w, wn);
        f[nf++] = (feat){fnv(w, wn, FNV0), stop ? 0.2f : 1.0f};
        if (pw) {
            uint64_t h = fnv(w, wn, fnv(" ", 1, fnv(pw, pn, FNV0 ^ 0x5bd1e995)));
            f[nf++] = (feat){h, (stop && pstop) ? 0.1f : 0.7f};
        }
        pw = w; pn = wn; pstop = stop;
    }
    /* term frequency per distinct feature: sort and count */
    qsort(f, nf, sizeof *f, feat_cmp);
    for (size_t i = 0; i < nf;) {
        size_t j = i;
        while (j < nf && f[j].h == f[i].h) j++;
        float tf = (float)(j - i), w = f[i].w * (1.0f + logf(tf));
        uint64_t h = f[i].h * 0x9e3779b97f4a7c15ull;
        out[(h >> 8) % LEX_DIM] += (h >> 63) ? -w : w;
        i = j;
    }
    double s2 = 0;
    for (int k = 0; k < LEX_DIM; k++) s2 += (double)out[k] * out[k];
    if (s2 > 0) { float inv = (float)(1.0 / sqrt(s2)); for (int k = 0; k < LEX_DIM; k++) out[k] *= inv; }
    free(low);
    free(f);
}

static hx_status lex_embed(kb_embedder *self, const char *const *texts, int n, float *out, hx_error *e) {
    (void)self; (void)e;
    for (int i = 0; i < n; i++) lex_one(texts[i], out + (size_t)i * LEX_DIM);
    return HX_OK;
}

static void simple_free(kb_embedder *self) { free(self); }

kb_embedder *kb_lexical_new(void) {
    kb_embedder *em = calloc(1, sizeof *em);
    if (!em) return NULL;
    snprintf(em->name, sizeof em->name, "lexical-384");
    snprintf(em->fingerprint, sizeof em->fingerprint, "lexical-384:v1");
    em->dim = LEX_DIM;
    em->embed = lex_embed;
    em->free = simple_free;
    return em;
}

/* ---- the neural embedder: hx_embed behind the same interface ---- */
static hx_status neural_embed(kb_embedder *self, const char *const *texts, int n, float *out, hx_error *e) {
    return hx_embed(self->impl, texts, n, out, e);
}
static void neural_free(kb_embedder *self) { hx_embedder_free(self->impl); free(self); }

hx_status kb_neural_new(const char *model, int n_threads, kb_embedder **out, hx_error *e) {
    *out = NULL;
    kb_embedder *em = calloc(1, sizeof *em);
    if (!em) return hx_err(e, HX_ERR_NOMEM, "out of memory");
    hx_embedder *h = NULL;
    hx_status st = hx_embedder_open(model, n_threads, &h, e);
    if (st) { free(em); return st; }
    const char *base = strrchr(model, '/');
    snprintf(em->name, sizeof em->name, "%s", base && base[1] ? base + 1 : model);
    snprintf(em->fingerprint, sizeof em->fingerprint, "%s", hx_embedder_fingerprint(h));
    em->dim = hx_embedder_dim(h);
    em->embed = neural_embed;
    em->free = neural_free;
    em->impl = h;
    *out = em;
    return HX_OK;
}

/* ---- cache ---- */

void kb_cache_free(kb_cache *c) {
    free(c->offset); free(c->hash); free(c->vec);
    memset(c, 0, sizeof *c);
}

static bool cache_alloc(kb_cache *c, size_t n, int dim) {
    c->offset = calloc(n ? n : 1, sizeof *c->offset);
    c->hash = calloc(n ? n : 1, sizeof *c->hash);
    c->vec = calloc((n ? n : 1) * (size_t)dim, sizeof *c->vec);
    c->n = n;
    c->dim = dim;
    return c->offset && c->hash && c->vec;
}

void kb_cache_load(kb_cache *c, const char *path, const kb_embedder *em) {
    memset(c, 0, sizeof *c);
    c->dim = em->dim;
    char *buf;
    size_t n;
    hx_error e;
    if (access(path, F_OK) != 0) return;
    if (hx_read_file(path, &buf, &n, &e)) { HX_WARN("%s; starting without a cache", e.msg); return; }
    const char *why = NULL;
    uint32_t ver, count, dim;
    if (n < 16 || memcmp(buf, "HXEC", 4)) { why = "not an embedding cache"; goto bad; }
    memcpy(&ver, buf + 4, 4); memcpy(&count, buf + 8, 4); memcpy(&dim, buf + 12, 4);
    if (dim != (uint32_t)em->dim) { why = "written with another vector size"; goto bad; }
    if (ver == 1) {
        /* v1 has no fingerprint or text hashes: its vectors are taken only for
         * the built-in embedder, and the hashes are filled in by the caller */
        if (strcmp(em->name, "lexical-384")) { why = "version 1 cache from an unknown embedder"; goto bad; }
        size_t rec = 4 + 4 * (size_t)dim;
        if ((n - 16) / rec < count || 16 + rec * count != n) { why = "truncated or oversized (v1)"; goto bad; }
        if (!cache_alloc(c, count, (int)dim)) { why = "out of memory"; goto bad; }
        for (uint32_t i = 0; i < count; i++) {
            uint32_t off;
            memcpy(&off, buf + 16 + rec * i, 4);
            c->offset[i] = off;
            c->hash[i] = 0; /* unknown */
            memcpy(c->vec + (size_t)i * dim, buf + 16 + rec * i + 4, 4 * (size_t)dim);
        }
        free(buf);
        return;
    }
    if (ver != 2) { why = "unknown version"; goto bad; }
    if (n < 28) { why = "truncated header"; goto bad; }
    uint64_t sum;
    memcpy(&sum, buf + n - 8, 8);
    if (fnv(buf, n - 8, FNV0) != sum) { why = "checksum mismatch"; goto bad; }
    uint32_t fpl;
    memcpy(&fpl, buf + 16, 4);
    if (fpl > n - 28) { why = "bad fingerprint length"; goto bad; }
    if (fpl != strlen(em->fingerprint) || memcmp(buf + 20, em->fingerprint, fpl)) {
        why = "made by another embedding model";
        goto bad;
    }
    size_t rec = 16 + 4 * (size_t)dim, body = 20 + fpl;
    if ((n - body - 8) / rec < count || body + rec * count + 8 != n) { why = "size does not match its count"; goto bad; }
    if (!cache_alloc(c, count, (int)dim)) { why = "out of memory"; goto bad; }
    for (uint32_t i = 0; i < count; i++) {
        const char *r = buf + body + rec * i;
        memcpy(&c->offset[i], r, 8);
        memcpy(&c->hash[i], r + 8, 8);
        memcpy(c->vec + (size_t)i * dim, r + 16, 4 * (size_t)dim);
    }
    free(buf);
    return;
bad:
    HX_WARN("%s: %s; discarding it (entries will be embedded again)", path, why);
    free(buf);
    kb_cache_free(c);
    c->dim = em->dim;
}

hx_status kb_cache_save(const kb_cache *c, const char *path, const kb_embedder *em, hx_error *e) {
    uint32_t fpl = (uint32_t)strlen(em->fingerprint);
    size_t rec = 16 + 4 * (size_t)c->dim, n = 20 + fpl + rec * c->n + 8;
    char *buf = malloc(n);
    if (!buf) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    uint32_t hdr[5] = {0, 2, (uint32_t)c->n, (uint32_t)c->dim, fpl};
    memcpy(hdr, "HXEC", 4);
    memcpy(buf, hdr, 20);
    memcpy(buf + 20, em->fingerprint, fpl);
    for (size_t i = 0; i < c->n; i++) {
        char *r = buf + 20 + fpl + rec * i;
        memcpy(r, &c->offset[i], 8);
        memcpy(r + 8, &c->hash[i], 8);
        memcpy(r + 16, c->vec + i * (size_t)c->dim, 4 * (size_t)c->dim);
    }
    uint64_t sum = fnv(buf, n - 8, FNV0);
    memcpy(buf + n - 8, &sum, 8);
    hx_status st = hx_write_file_atomic(path, buf, n, e);
    free(buf);
    return st;
}
