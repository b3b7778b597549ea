/* wordpiece.c — BERT WordPiece tokenizer (see wordpiece.h). */
#include "tok/wordpiece.h"
#include "core/core.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <utf8proc.h>

#define MAX_WORD_CHARS 100

/* Open-addressing map from (continuation?, piece bytes) to id. */
typedef struct slot { const char *s; uint32_t len; int32_t id; bool cont; } slot;

struct hx_wordpiece {
    char **tok;          /* vocab.txt form, for hx_wordpiece_token */
    int n;
    slot *map;
    size_t cap;          /* power of two */
    int32_t unk, cls, sep;
};

static uint64_t hash(const char *s, size_t n, bool cont) {
    uint64_t h = cont ? 0x9e3779b97f4a7c15ull : 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int32_t lookup(const hx_wordpiece *w, const char *s, size_t n, bool cont) {
    size_t m = w->cap - 1;
    for (size_t i = hash(s, n, cont) & m;; i = (i + 1) & m) {
        const slot *sl = &w->map[i];
        if (!sl->s) return -1;
        if (sl->cont == cont && sl->len == n && !memcmp(sl->s, s, n)) return sl->id;
    }
}

static void insert(hx_wordpiece *w, const char *s, size_t n, bool cont, int32_t id) {
    size_t m = w->cap - 1;
    for (size_t i = hash(s, n, cont) & m;; i = (i + 1) & m) {
        slot *sl = &w->map[i];
        if (!sl->s) { *sl = (slot){s, (uint32_t)n, id, cont}; return; }
        if (sl->cont == cont && sl->len == n && !memcmp(sl->s, s, n)) return; /* first id wins */
    }
}

void hx_wordpiece_free(hx_wordpiece *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->tok[i]);
    free(w->tok);
    free(w->map);
    free(w);
}

/* Build from tokens in vocab.txt form ("##x" = continuation). */
static hx_status build(hx_wordpiece *w, const char *src, hx_error *e) {
    w->cap = 16;
    while (w->cap < (size_t)w->n * 2) w->cap *= 2;
    w->map = calloc(w->cap, sizeof *w->map);
    if (!w->map) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", src);
    w->unk = w->cls = w->sep = -1;
    for (int i = 0; i < w->n; i++) {
        const char *t = w->tok[i];
        size_t n = strlen(t);
        if (n > 2 && t[0] == '#' && t[1] == '#') insert(w, t + 2, n - 2, true, i);
        else insert(w, t, n, false, i);
        if (!strcmp(t, "[UNK]")) w->unk = i;
        if (!strcmp(t, "[CLS]")) w->cls = i;
        if (!strcmp(t, "[SEP]")) w->sep = i;
    }
    if (w->unk < 0 || w->cls < 0 || w->sep < 0)
        return hx_err(e, HX_ERR_FORMAT, "%s: vocabulary lacks [UNK], [CLS] or [SEP]", src);
    return HX_OK;
}

static hx_status load_txt(const char *path, hx_wordpiece **out, hx_error *e) {
    char *buf;
    size_t n;
    hx_status st = hx_read_file(path, &buf, &n, e);
    if (st) return st;
    hx_wordpiece *w = calloc(1, sizeof *w);
    int lines = 0;
    for (size_t i = 0; i < n; i++) lines += buf[i] == '\n';
    if (n && buf[n - 1] != '\n') lines++;
    if (w) w->tok = calloc((size_t)lines + 1, sizeof *w->tok);
    if (!w || !w->tok) { free(buf); hx_wordpiece_free(w); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
    char *p = buf, *end = buf + n;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (len && p[len - 1] == '\r') len--;
        w->tok[w->n] = strndup(p, len);
        if (!w->tok[w->n]) { free(buf); hx_wordpiece_free(w); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
        w->n++;
        p = nl ? nl + 1 : end;
    }
    free(buf);
    if (w->n == 0) { hx_wordpiece_free(w); return hx_err(e, HX_ERR_FORMAT, "%s: empty vocabulary", path); }
    if ((st = build(w, path, e))) { hx_wordpiece_free(w); return st; }
    *out = w;
    return HX_OK;
}

hx_status hx_wordpiece_from_gguf(const hx_gguf *g, hx_wordpiece **out, hx_error *e) {
    *out = NULL;
    hx_gguf_str model;
    if (!hx_gguf_get_str(g, "tokenizer.ggml.model", &model) || !hx_gguf_str_eq(model, "bert"))
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model is not bert", g->path);
    const hx_gguf_value *toks = hx_gguf_get_arr(g, "tokenizer.ggml.tokens", HX_GGUF_STRING);
    if (!toks || toks->arr.count == 0 || toks->arr.count > (1u << 24))
        return hx_err(e, HX_ERR_FORMAT, "%s: missing or bad tokenizer.ggml.tokens", g->path);
    const hx_gguf_value *types = hx_gguf_get_arr(g, "tokenizer.ggml.token_type", HX_GGUF_VTYPE_COUNT);
    hx_wordpiece *w = calloc(1, sizeof *w);
    if (w) w->tok = calloc(toks->arr.count, sizeof *w->tok);
    if (!w || !w->tok) { hx_wordpiece_free(w); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", g->path); }
    /* llama.cpp's layout back to vocab.txt's: "▁x" -> "x", "x" -> "##x", control tokens as they are */
    for (uint64_t i = 0; i < toks->arr.count; i++) {
        hx_gguf_str s = toks->arr.elems[i].str;
        int64_t type = types && i < types->arr.count ? hx_gguf_arr_i64(types, i) : 1;
        char *t;
        if (s.len >= 3 && !memcmp(s.ptr, "\xe2\x96\x81", 3)) t = strndup(s.ptr + 3, (size_t)s.len - 3);
        else if (type == 3 || type == 2) t = strndup(s.ptr, (size_t)s.len);
        else {
            t = malloc((size_t)s.len + 3);
            if (t) { t[0] = t[1] = '#'; memcpy(t + 2, s.ptr, (size_t)s.len); t[s.len + 2] = 0; }
        }
        if (!t) { hx_wordpiece_free(w); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", g->path); }
        w->tok[w->n++] = t;
    }
    hx_status st = build(w, g->path, e);
    if (st) { hx_wordpiece_free(w); return st; }
    *out = w;
    return HX_OK;
}

hx_status hx_wordpiece_load(const char *path, hx_wordpiece **out, hx_error *e) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return hx_err(e, HX_ERR_IO, "%s: not found", path);
    if (S_ISDIR(sb.st_mode)) {
        char p[1024];
        snprintf(p, sizeof p, "%s/vocab.txt", path);
        return load_txt(p, out, e);
    }
    size_t n = strlen(path);
    if (n > 5 && !strcmp(path + n - 5, ".gguf")) {
        hx_gguf *g = NULL;
        hx_status st = hx_gguf_open(path, NULL, &g, e);
        if (st) return st;
        st = hx_wordpiece_from_gguf(g, out, e);
        hx_gguf_close(g);
        return st;
    }
    return load_txt(path, out, e);
}

int hx_wordpiece_n_vocab(const hx_wordpiece *w) { return w->n; }
const char *hx_wordpiece_token(const hx_wordpiece *w, int32_t id) { return id >= 0 && id < w->n ? w->tok[id] : NULL; }

/* ---- normalization ---- */

static bool is_cjk(int32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static bool is_ws(int32_t c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || utf8proc_category(c) == UTF8PROC_CATEGORY_ZS;
}

static bool is_control(int32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF;
}

static bool is_punct(int32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

/* A code point buffer that grows. */
typedef struct cps { int32_t *p; size_t n, cap; } cps;
static bool push(cps *b, int32_t c) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        int32_t *np = realloc(b->p, cap * sizeof *np);
        if (!np) return false;
        b->p = np;
        b->cap = cap;
    }
    b->p[b->n++] = c;
    return true;
}

/* Text -> normalized code points with words separated by ' ' and punctuation
 * isolated (so a split on ' ' gives BertPreTokenizer's words). Invalid UTF-8
 * bytes are dropped. */
static bool normalize(const char *text, size_t len, cps *out) {
    const uint8_t *s = (const uint8_t *)text;
    size_t i = 0;
    while (i < len) {
        utf8proc_int32_t c;
        utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(len - i), &c);
        if (k <= 0) { i++; continue; }
        i += (size_t)k;
        if (c == 0 || c == 0xFFFD || is_control(c)) continue;
        if (is_ws(c)) { if (!push(out, ' ')) return false; continue; }
        if (is_cjk(c)) {
            if (!push(out, ' ') || !push(out, c) || !push(out, ' ')) return false;
            continue;
        }
        /* NFD, drop combining marks (Mn), lowercase */
        utf8proc_int32_t d[16];
        int last = 0;
        utf8proc_ssize_t nd = utf8proc_decompose_char(c, d, 16, UTF8PROC_DECOMPOSE, &last);
        if (nd <= 0 || nd > 16) { d[0] = c; nd = 1; }
        for (utf8proc_ssize_t j = 0; j < nd; j++) {
            if (utf8proc_category(d[j]) == UTF8PROC_CATEGORY_MN) continue;
            int32_t lc = utf8proc_tolower(d[j]);
            if (is_punct(lc)) {
                if (!push(out, ' ') || !push(out, lc) || !push(out, ' ')) return false;
            } else if (!push(out, lc)) return false;
        }
    }
    return true;
}

static size_t encode_utf8(const int32_t *c, size_t n, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += (size_t)utf8proc_encode_char(c[i], (utf8proc_uint8_t *)out + k);
    return k;
}

int hx_wordpiece_encode(const hx_wordpiece *w, const char *text, size_t len, bool add_special, int32_t *ids, int max_ids) {
    if (max_ids < (add_special ? 2 : 1)) return 0;
    int n = 0, limit = add_special ? max_ids - 1 : max_ids;
    if (add_special) ids[n++] = w->cls;
    cps cp = {0};
    char *word = NULL;
    if (!normalize(text, len, &cp)) goto out;
    word = malloc(4 * MAX_WORD_CHARS + 8);
    if (!word) goto out;
    for (size_t i = 0; i < cp.n && n < limit;) {
        while (i < cp.n && cp.p[i] == ' ') i++;
        size_t j = i;
        while (j < cp.n && cp.p[j] != ' ') j++;
        if (j == i) break;
        size_t nchar = j - i;
        if (nchar > MAX_WORD_CHARS) { ids[n++] = w->unk; i = j; continue; }
        /* byte offset of each char boundary */
        size_t bpos[MAX_WORD_CHARS + 1];
        bpos[0] = 0;
        for (size_t c = 0; c < nchar; c++)
            bpos[c + 1] = bpos[c] + encode_utf8(&cp.p[i + c], 1, word + bpos[c]);
        /* greedy longest match */
        int32_t pieces[MAX_WORD_CHARS];
        int np = 0;
        size_t start = 0;
        bool bad = false;
        while (start < nchar) {
            size_t end = nchar;
            int32_t id = -1;
            while (end > start) {
                id = lookup(w, word + bpos[start], bpos[end] - bpos[start], start > 0);
                if (id >= 0) break;
                end--;
            }
            if (id < 0) { bad = true; break; }
            pieces[np++] = id;
            start = end;
        }
        if (bad) ids[n++] = w->unk;
        else for (int k = 0; k < np && n < limit; k++) ids[n++] = pieces[k];
        i = j;
    }
out:
    free(cp.p);
    free(word);
    if (add_special) ids[n++] = w->sep;
    return n;
}
