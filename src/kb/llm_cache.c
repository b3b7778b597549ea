/* llm_cache.c — KB-DIR/llm.bin: the LLM's answers keyed by what they depend
 * on (format in llm.h), loaded defensively, written atomically. */
#include "kb/llm.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

void kb_llm_cache_free(kb_llm_cache *c) {
    for (size_t i = 0; i < c->n; i++) free(c->r[i].val);
    free(c->r);
    free(c->slot);
    memset(c, 0, sizeof *c);
}

static uint64_t key_hash(uint32_t kind, uint64_t a, uint64_t b) {
    uint64_t k[3] = {kind, a, b};
    return hx_fnv1a(k, sizeof k, HX_FNV_INIT);
}

/* The slot of (kind, a, b): where it is, or the empty slot where it would go. */
static size_t find_slot(const kb_llm_cache *c, uint32_t kind, uint64_t a, uint64_t b) {
    size_t m = c->n_slot - 1, s = (size_t)key_hash(kind, a, b) & m;
    while (c->slot[s]) {
        const kb_llm_rec *r = &c->r[c->slot[s] - 1];
        if (r->kind == kind && r->a == a && r->b == b) return s;
        s = (s + 1) & m;
    }
    return s;
}

static bool rehash(kb_llm_cache *c, size_t n_slot) {
    size_t *old = c->slot, old_n = c->n_slot;
    c->slot = calloc(n_slot, sizeof *c->slot);
    if (!c->slot) { c->slot = old; return false; }
    c->n_slot = n_slot;
    for (size_t i = 0; i < old_n; i++)
        if (old[i]) {
            const kb_llm_rec *r = &c->r[old[i] - 1];
            c->slot[find_slot(c, r->kind, r->a, r->b)] = old[i];
        }
    free(old);
    return true;
}

const char *kb_llm_cache_get(const kb_llm_cache *c, uint32_t kind, uint64_t a, uint64_t b) {
    if (!c->n_slot) return NULL;
    size_t s = find_slot(c, kind, a, b);
    return c->slot[s] ? c->r[c->slot[s] - 1].val : NULL;
}

hx_status kb_llm_cache_put(kb_llm_cache *c, uint32_t kind, uint64_t a, uint64_t b, const char *val, hx_error *e) {
    if (2 * (c->n + 1) > c->n_slot && !rehash(c, c->n_slot ? 2 * c->n_slot : 1024))
        return hx_err(e, HX_ERR_NOMEM, "llm cache: out of memory");
    size_t s = find_slot(c, kind, a, b);
    char *v = strdup(val);
    if (!v) return hx_err(e, HX_ERR_NOMEM, "llm cache: out of memory");
    c->dirty = true;
    if (c->slot[s]) {
        free(c->r[c->slot[s] - 1].val);
        c->r[c->slot[s] - 1].val = v;
        return HX_OK;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        kb_llm_rec *r = realloc(c->r, cap * sizeof *r);
        if (!r) { free(v); return hx_err(e, HX_ERR_NOMEM, "llm cache: out of memory"); }
        c->r = r;
        c->cap = cap;
    }
    c->r[c->n++] = (kb_llm_rec){kind, a, b, v};
    c->slot[s] = c->n;
    return HX_OK;
}

void kb_llm_cache_load(kb_llm_cache *c, const char *path, const char *fingerprint) {
    memset(c, 0, sizeof *c);
    if (access(path, F_OK) != 0) return;
    char *buf = NULL;
    size_t n = 0;
    hx_error e;
    if (hx_read_file(path, &buf, &n, &e)) { HX_WARN("%s; starting without the LLM cache", e.msg); return; }
    const char *why = NULL;
    uint32_t ver, fpl, count;
    size_t p = 0;
    if (n < 24 || memcmp(buf, "HXLC", 4)) { why = "not an LLM cache"; goto bad; }
    uint64_t sum;
    memcpy(&sum, buf + n - 8, 8);
    if (hx_fnv1a(buf, n - 8, HX_FNV_INIT) != sum) { why = "checksum mismatch"; goto bad; }
    memcpy(&ver, buf + 4, 4);
    memcpy(&fpl, buf + 8, 4);
    if (ver != 1) { why = "unknown version"; goto bad; }
    if (fpl > n - 24) { why = "bad fingerprint length"; goto bad; }
    if (fpl != strlen(fingerprint) || memcmp(buf + 12, fingerprint, fpl)) {
        HX_WARN("%s: made by another model or prompt version; its answers are dropped", path);
        free(buf);
        return;
    }
    p = 12 + fpl;
    memcpy(&count, buf + p, 4);
    p += 4;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t kind, len;
        uint64_t a, b;
        if (n - 8 - p < 24) { why = "truncated record"; goto bad; }
        memcpy(&kind, buf + p, 4);
        memcpy(&a, buf + p + 4, 8);
        memcpy(&b, buf + p + 12, 8);
        memcpy(&len, buf + p + 20, 4);
        p += 24;
        if (len > n - 8 - p) { why = "record longer than the file"; goto bad; }
        char *v = malloc((size_t)len + 1);
        if (!v) { why = "out of memory"; goto bad; }
        memcpy(v, buf + p, len);
        v[len] = 0;
        p += len;
        if (strlen(v) != len) { free(v); why = "NUL inside a value"; goto bad; }
        hx_error e2;
        hx_status st = kb_llm_cache_put(c, kind, a, b, v, &e2);
        free(v);
        if (st) { why = "out of memory"; goto bad; }
    }
    if (p != n - 8) { why = "trailing bytes"; goto bad; }
    c->dirty = false;
    free(buf);
    return;
bad:
    HX_WARN("%s: %s; discarding it (answers will be computed again)", path, why);
    free(buf);
    kb_llm_cache_free(c);
}

hx_status kb_llm_cache_save(const kb_llm_cache *c, const char *path, const char *fingerprint, hx_error *e) {
    size_t fpl = strlen(fingerprint), n = 4 + 4 + 4 + fpl + 4 + 8;
    for (size_t i = 0; i < c->n; i++) n += 24 + strlen(c->r[i].val);
    if (c->n > UINT32_MAX) return hx_err(e, HX_ERR_RANGE, "%s: too many records", path);
    char *buf = malloc(n);
    if (!buf) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    size_t p = 0;
    uint32_t ver = 1, f32 = (uint32_t)fpl, cnt = (uint32_t)c->n;
    memcpy(buf, "HXLC", 4); p += 4;
    memcpy(buf + p, &ver, 4); p += 4;
    memcpy(buf + p, &f32, 4); p += 4;
    memcpy(buf + p, fingerprint, fpl); p += fpl;
    memcpy(buf + p, &cnt, 4); p += 4;
    for (size_t i = 0; i < c->n; i++) {
        uint32_t len = (uint32_t)strlen(c->r[i].val);
        memcpy(buf + p, &c->r[i].kind, 4);
        memcpy(buf + p + 4, &c->r[i].a, 8);
        memcpy(buf + p + 12, &c->r[i].b, 8);
        memcpy(buf + p + 20, &len, 4);
        memcpy(buf + p + 24, c->r[i].val, len);
        p += 24 + len;
    }
    uint64_t sum = hx_fnv1a(buf, p, HX_FNV_INIT);
    memcpy(buf + p, &sum, 8);
    hx_status st = hx_write_file_atomic(path, buf, n, e);
    free(buf);
    return st;
}
