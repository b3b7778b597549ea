/* text.c — tokens and text of the public API: tokenize, pieces, detokenize
 * (always valid UTF-8), the streaming detokenizer and chat templates. */
#include "api/api.h"
#include "core/core.h"

#include <stdlib.h>
#include <string.h>

static void put(hx_utf8_buf *b, const void *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = (b->n + n + 1) * 2 < 64 ? 64 : (b->n + n + 1) * 2;
        char *q = realloc(b->p, nc);
        if (!q) { b->oom = true; return; }
        b->p = q; b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void hx_utf8_push(hx_utf8_buf *b, unsigned char *hold, int *n_hold, const char *in, size_t n, bool flush) {
    unsigned char stack[256];
    size_t m = (size_t)*n_hold + n;
    unsigned char *all = m <= sizeof stack ? stack : malloc(m);
    if (!all) { b->oom = true; return; }
    memcpy(all, hold, (size_t)*n_hold);
    if (n) memcpy(all + *n_hold, in, n);
    *n_hold = 0;
    size_t i = 0;
    while (i < m) {
        int r = hx_utf8_char(all + i, m - i);
        if (r > 0) {
            size_t j = i + (size_t)r;  /* runs of valid characters go out in one copy */
            while (j < m) { int q = hx_utf8_char(all + j, m - j); if (q <= 0) break; j += (size_t)q; }
            put(b, all + i, j - i);
            i = j;
        } else if (r == 0 && !flush) {
            memcpy(hold, all + i, m - i);
            *n_hold = (int)(m - i);
            break;
        } else {
            put(b, "\xEF\xBF\xBD", 3);
            i += r == 0 ? m - i : (size_t)-r;
        }
    }
    if (all != stack) free(all);
}

/* ---- tokenizing ---- */

static hx_status need_tok(const hx_model *m, hx_error *e) {
    if (!m || !m->api) return hx_err(e, HX_ERR_ARG, "model is NULL or not opened with hx_model_open");
    if (!m->api->tok) return hx_err(e, HX_ERR_UNSUPPORTED, "%s: the model has no tokenizer", m->cfg.name);
    return HX_OK;
}

hx_status hx_api_tokenize(const hx_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                          int32_t **ids, int *n, hx_error *e) {
    *ids = NULL; *n = 0;
    hx_status st = need_tok(m, e);
    if (st) return st;
    if (!text) return hx_err(e, HX_ERR_ARG, "tokenize: text is NULL");
    size_t k = 0;
    if ((st = hx_tok_encode(m->api->tok, text, len, add_special, parse_special, ids, &k, e))) return st;
    if (k > INT32_MAX) { free(*ids); *ids = NULL; return hx_err(e, HX_ERR_RANGE, "tokenize: %zu tokens", k); }
    *n = (int)k;
    return HX_OK;
}

hx_status hx_tokenize(const hx_model *m, const char *text, ptrdiff_t len, bool add_special, bool parse_special,
                      int32_t *ids, int cap, int *n_out, hx_error *e) {
    if (n_out) *n_out = 0;
    if (!text) return hx_err(e, HX_ERR_ARG, "hx_tokenize: text is NULL");
    if (cap < 0 || (cap > 0 && !ids)) return hx_err(e, HX_ERR_ARG, "hx_tokenize: ids is NULL or cap %d < 0", cap);
    int32_t *v = NULL;
    int n = 0;
    hx_status st = hx_api_tokenize(m, text, len < 0 ? strlen(text) : (size_t)len, add_special, parse_special, &v, &n, e);
    if (st) return st;
    if (n_out) *n_out = n;
    if (n > cap) {
        free(v);
        return hx_err(e, HX_ERR_RANGE, "hx_tokenize: %d tokens do not fit in %d", n, cap);
    }
    if (n) memcpy(ids, v, (size_t)n * sizeof *ids);
    free(v);
    return HX_OK;
}

/* Bytes of token t into buf (cap), count returned (may exceed cap); -1 out of range. */
static int piece(const hx_model *m, int32_t t, char *buf, size_t cap, bool special) {
    const hx_tok *tk = m->api->tok;
    if (t < 0 || t >= hx_tok_n_vocab(tk)) return -1;
    if (hx_tok_type(tk, t) == HX_TT_CONTROL) {
        if (!special) return 0;
        const char *p = hx_tok_piece(tk, t);
        size_t n = strlen(p);
        memcpy(buf, p, n < cap ? n : cap);
        return (int)n;
    }
    return (int)hx_tok_decode_token(tk, t, buf, cap);
}

int hx_token_to_piece(const hx_model *m, int32_t t, char *buf, int cap, bool special) {
    if (!m || !m->api || !m->api->tok || (cap > 0 && !buf)) return -1;
    return piece(m, t, buf, cap > 0 ? (size_t)cap : 0, special);
}

/* Appends token t's bytes to the sanitizer. */
static void push_token(const hx_model *m, int32_t t, bool special, hx_utf8_buf *b, unsigned char *hold, int *nh) {
    char small[256];
    int n = piece(m, t, small, sizeof small, special);
    if (n <= 0) return;
    if ((size_t)n <= sizeof small) { hx_utf8_push(b, hold, nh, small, (size_t)n, false); return; }
    char *big = malloc((size_t)n);
    if (!big) { b->oom = true; return; }
    piece(m, t, big, (size_t)n, special);
    hx_utf8_push(b, hold, nh, big, (size_t)n, false);
    free(big);
}

hx_status hx_detokenize(const hx_model *m, const int32_t *ids, int n, bool special, char **out, hx_error *e) {
    if (!out) return hx_err(e, HX_ERR_ARG, "hx_detokenize: out is NULL");
    *out = NULL;
    hx_status st = need_tok(m, e);
    if (st) return st;
    if (n < 0 || (n > 0 && !ids)) return hx_err(e, HX_ERR_ARG, "hx_detokenize: %d ids at %p", n, (const void *)ids);
    int V = hx_tok_n_vocab(m->api->tok);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= V)
            return hx_err(e, HX_ERR_RANGE, "hx_detokenize: ids[%d] = %d is outside the vocabulary (0..%d)", i, ids[i], V - 1);
    hx_utf8_buf b = {0};
    unsigned char hold[8];
    int nh = 0;
    put(&b, "", 0);
    for (int i = 0; i < n; i++) push_token(m, ids[i], special, &b, hold, &nh);
    hx_utf8_push(&b, hold, &nh, NULL, 0, true);
    if (b.oom) { free(b.p); return hx_err(e, HX_ERR_NOMEM, "hx_detokenize: out of memory"); }
    *out = b.p;
    return HX_OK;
}

/* ---- streaming ---- */

struct hx_detok {
    const hx_model *m;
    bool special;
    unsigned char hold[8];
    int n_hold;
    hx_utf8_buf out;
};

hx_detok *hx_detok_new(const hx_model *m, bool special) {
    if (!m || !m->api || !m->api->tok) return NULL;
    hx_detok *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->m = m;
    d->special = special;
    put(&d->out, "", 0);
    if (d->out.oom) { free(d); return NULL; }
    return d;
}

void hx_detok_free(hx_detok *d) {
    if (!d) return;
    free(d->out.p);
    free(d);
}

const char *hx_detok_push(hx_detok *d, int32_t t) {
    if (!d) return "";
    d->out.n = 0;
    d->out.p[0] = 0;
    push_token(d->m, t, d->special, &d->out, d->hold, &d->n_hold);
    if (d->out.oom) { d->out.oom = false; d->out.n = 0; d->out.p[0] = 0; }
    return d->out.p;
}

const char *hx_detok_flush(hx_detok *d) {
    if (!d) return "";
    d->out.n = 0;
    d->out.p[0] = 0;
    hx_utf8_push(&d->out, d->hold, &d->n_hold, NULL, 0, true);
    if (d->out.oom) { d->out.oom = false; d->out.n = 0; d->out.p[0] = 0; }
    d->n_hold = 0;
    return d->out.p;
}

/* ---- special tokens ---- */

int32_t hx_token_bos(const hx_model *m) { return m && m->api && m->api->tok ? hx_tok_bos(m->api->tok) : -1; }
int32_t hx_token_eos(const hx_model *m) { return m && m->api && m->api->tok ? hx_tok_eos(m->api->tok) : -1; }
int32_t hx_token_eot(const hx_model *m) { return m && m->api && m->api->tok ? hx_tok_eot(m->api->tok) : -1; }
bool hx_token_is_eog(const hx_model *m, int32_t t) {
    return m && m->api && m->api->tok && hx_tok_is_eog(m->api->tok, t);
}
bool hx_model_adds_bos(const hx_model *m) { return m && m->api && m->api->tok && hx_tok_adds_bos(m->api->tok); }

/* ---- chat ---- */

hx_status hx_chat_apply(const hx_model *m, const hx_chat_message *msgs, int n, bool add_assistant, char **out,
                        hx_error *e) {
    if (!out) return hx_err(e, HX_ERR_ARG, "hx_chat_apply: out is NULL");
    *out = NULL;
    if (!m || !m->api) return hx_err(e, HX_ERR_ARG, "hx_chat_apply: model is NULL");
    if (n < 0 || (n > 0 && !msgs)) return hx_err(e, HX_ERR_ARG, "hx_chat_apply: %d messages at %p", n, (const void *)msgs);
    for (int i = 0; i < n; i++) {
        const char *r = msgs[i].role;
        if (!r || !msgs[i].content)
            return hx_err(e, HX_ERR_ARG, "hx_chat_apply: message %d has no role or content", i);
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant"))
            return hx_err(e, HX_ERR_ARG, "hx_chat_apply: message %d: role '%s' (system, user or assistant)", i, r);
    }
    if (m->api->chat_kind == HX_CHAT_UNKNOWN)
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: no chat template the library knows (%s) and no fallback for "
                      "architecture %s", m->cfg.name[0] ? m->cfg.name : "model",
                      m->api->chat_template ? "its template is not ChatML, Llama 3, Gemma or Llama 2" : "the file has none",
                      m->cfg.arch_name);
    /* hx_chat_message and hx_chat_msg have the same two members in the same order */
    hx_chat_msg *mm = calloc(n > 0 ? (size_t)n : 1, sizeof *mm);
    if (!mm) return hx_err(e, HX_ERR_NOMEM, "hx_chat_apply: out of memory");
    for (int i = 0; i < n; i++) mm[i] = (hx_chat_msg){msgs[i].role, msgs[i].content};
    hx_status st = hx_chat_format(m->api->chat_kind, mm, (size_t)n, add_assistant, out, e);
    free(mm);
    return st;
}

const char *hx_chat_template_name(const hx_model *m) {
    return m && m->api ? hx_chat_name(m->api->chat_kind) : "unknown";
}
