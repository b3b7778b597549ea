/* tok.c — SentencePiece-style BPE and GPT-2 byte-level BPE loaded from GGUF metadata.
 * Behaviour follows llama.cpp's llm_tokenizer_spm / llm_tokenizer_bpe (learned, not copied). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tok/tok.h"
#include <pcre2.h>
#include <utf8proc.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/core.h"
#include "gguf/gguf.h"

/* open-addressing string -> int32 map */
typedef struct { char **keys; size_t *lens; int32_t *vals; size_t cap; } smap;

static bool smap_init(smap *m, size_t n) {
    m->cap = 16; while (m->cap < n * 2 + 16) m->cap <<= 1;
    m->keys = calloc(m->cap, sizeof *m->keys); m->lens = calloc(m->cap, sizeof *m->lens);
    m->vals = calloc(m->cap, sizeof *m->vals);
    return m->keys && m->lens && m->vals;
}
static void smap_free(smap *m) { free(m->keys); free(m->lens); free(m->vals); }
/* key must outlive the map; first insertion wins */
static void smap_put(smap *m, char *k, size_t n, int32_t v) {
    size_t i = hx_fnv1a(k, n, HX_FNV_INIT_SHORT) & (m->cap - 1);
    while (m->keys[i]) { if (m->lens[i] == n && !memcmp(m->keys[i], k, n)) return; i = (i + 1) & (m->cap - 1); }
    m->keys[i] = k; m->lens[i] = n; m->vals[i] = v;
}
static int32_t smap_get(const smap *m, const char *k, size_t n) {
    size_t i = hx_fnv1a(k, n, HX_FNV_INIT_SHORT) & (m->cap - 1);
    while (m->keys[i]) { if (m->lens[i] == n && !memcmp(m->keys[i], k, n)) return m->vals[i]; i = (i + 1) & (m->cap - 1); }
    return -1;
}

struct hx_tok {
    hx_tok_kind kind;
    int32_t n;
    char **piece; size_t *plen; float *score; int *type;
    smap vocab;
    smap merges;        /* "a b" -> rank (BPE) */
    char **merge_str; size_t n_merges;
    int32_t bos, eos, eot, unk, pad, sep, cls, mask;
    bool add_bos, add_eos, add_space_prefix;
    bool add_sep, lowercase, strip_accents;
    size_t max_len;     /* longest piece in bytes (WordPiece search bound) */
    bool spbpe;         /* SentencePiece-style BPE by merge rank (Gemma tokenizer.json): U+2581 spaces, <0xNN> fallback */
    bool ignore_merges; /* llama3: a pre-token found whole in the vocab is emitted as is */
    pcre2_code *re[6];  /* BPE pre-tokenizer: regexes applied in sequence, each splitting every fragment */
    int n_re;
    int32_t *specials; size_t n_specials; /* control/user tokens, longest first */
    bool spec_first[256]; /* bytes that start some special token: the scan skips every other position */
    /* Specials by text: [0] every one, [1] all but control tokens (what
     * parse_special = false may match), each string to its first special in
     * the order above; spec_len: their distinct lengths, longest first. At a
     * position the match is the longest length whose text is in the map,
     * without a pass over all specials (a synthetic or padded vocabulary has
     * ~150k user tokens "[PAD<i>]"). */
    smap spec_map[2];
    size_t *spec_len, n_spec_len;
    int byte_to_cp[256]; int cp_to_byte[512];
};

int32_t hx_tok_n_vocab(const hx_tok *t) { return t->n; }
int32_t hx_tok_bos(const hx_tok *t) { return t->bos; }
int32_t hx_tok_eos(const hx_tok *t) { return t->eos; }
int32_t hx_tok_eot(const hx_tok *t) { return t->eot; }
int32_t hx_tok_unk(const hx_tok *t) { return t->unk; }
int32_t hx_tok_pad(const hx_tok *t) { return t->pad; }
int32_t hx_tok_sep(const hx_tok *t) { return t->sep; }
int32_t hx_tok_cls(const hx_tok *t) { return t->cls; }
int32_t hx_tok_mask(const hx_tok *t) { return t->mask; }
bool hx_tok_adds_bos(const hx_tok *t) { return t->add_bos; }
bool hx_tok_adds_eos(const hx_tok *t) { return t->add_eos; }
bool hx_tok_add_space_prefix(const hx_tok *t) { return t->add_space_prefix; }
bool hx_tok_is_eog(const hx_tok *t, int32_t id) { return id >= 0 && (id == t->eos || id == t->eot); }

/* Cut ids to at most max_len keeping a trailing separator/EOS (BERT truncation keeps [SEP]); returns new length. */
size_t hx_tok_truncate(const hx_tok *t, int32_t *ids, size_t n, size_t max_len) {
    if (n <= max_len || max_len == 0) return n <= max_len ? n : 0;
    int32_t last = ids[n - 1];
    bool keep = last >= 0 && (last == t->sep || last == t->eos);
    if (keep) ids[max_len - 1] = last;
    return max_len;
}
hx_tok_kind hx_tok_kind_of(const hx_tok *t) { return t->kind; }
int hx_tok_type(const hx_tok *t, int32_t id) { return id >= 0 && id < t->n ? t->type[id] : 0; }
const char *hx_tok_piece(const hx_tok *t, int32_t id) { return id >= 0 && id < t->n ? t->piece[id] : NULL; }
int32_t hx_tok_find(const hx_tok *t, const char *piece, size_t n) { return smap_get(&t->vocab, piece, n); }
void hx_tok_set_special(hx_tok *t, hx_tok_special which, int32_t id) {
    if (id < -1 || id >= t->n) id = -1;
    switch (which) {
    case HX_TOK_SPECIAL_BOS: t->bos = id; break;
    case HX_TOK_SPECIAL_EOS: t->eos = id; break;
    case HX_TOK_SPECIAL_EOT: t->eot = id; break;
    case HX_TOK_SPECIAL_UNK: t->unk = id; break;
    case HX_TOK_SPECIAL_PAD: t->pad = id; break;
    }
}
void hx_tok_set_add(hx_tok *t, bool add_bos, bool add_eos) { t->add_bos = add_bos; t->add_eos = add_eos; }

void hx_tok_free(hx_tok *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n && t->piece; i++) free(t->piece[i]);
    for (size_t i = 0; i < t->n_merges && t->merge_str; i++) free(t->merge_str[i]);
    free(t->piece); free(t->plen); free(t->score); free(t->type); free(t->merge_str); free(t->specials);
    smap_free(&t->vocab); smap_free(&t->merges); smap_free(&t->spec_map[0]); smap_free(&t->spec_map[1]);
    free(t->spec_len);
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    free(t);
}

static int utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}
static int put_utf8(char *o, int cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63)); return 3;
}

/* GPT-2's reversible byte -> printable code point map */
static void init_byte_map(hx_tok *t) {
    int n = 0;
    for (int i = 0; i < 512; i++) t->cp_to_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        t->byte_to_cp[b] = keep ? b : 256 + n++;
        t->cp_to_byte[t->byte_to_cp[b]] = b;
    }
}

/* Pre-tokenizer regexes per tokenizer.ggml.pre (learned from llama.cpp's table); NULL-terminated list.
 * Each regex splits every fragment left by the previous ones into matches and gaps. */
static const char *const *pre_regexes(const char *pre, bool *is_llama3) {
    static const char *gpt2[] = {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", NULL};
    static const char *llama3[] = {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                   "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL};
    static const char *qwen2[] = {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
                                  "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL};
    static const char *smollm[] = {"\\p{N}", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", NULL};
    static const char *dscoder[] = {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+",
                                    "[\xE4\xB8\x80-\xE9\xBE\xA5\xE0\xA0\x80-\xE4\xB8\x80\xEA\xB0\x80-\xED\x9F\xBF]+", "\\p{N}", NULL};
    *is_llama3 = false;
    if (!strcmp(pre, "llama3") || !strcmp(pre, "llama-bpe") || !strcmp(pre, "llama-v3") || !strcmp(pre, "smaug-bpe")) {
        *is_llama3 = true; return llama3;
    }
    if (!strcmp(pre, "qwen2") || !strcmp(pre, "deepseek-r1-qwen")) return qwen2;
    if (!strcmp(pre, "smollm")) return smollm;
    if (!strcmp(pre, "deepseek-coder")) return dscoder;
    return gpt2;
}

/* longest special token first (then lower id), so matching prefers e.g. "<|im_start|>" over "<|im" */
static int cmp_spec(const void *a, const void *b, void *ctx) {
    const hx_tok *t = ctx; int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return t->plen[x] < t->plen[y] ? 1 : t->plen[x] > t->plen[y] ? -1 : (x > y) - (x < y);
}

/* t->specials (control and user tokens, longest first) and their indexes. */
static bool spec_index(hx_tok *t) {
    t->specials = calloc((size_t)t->n, sizeof *t->specials);
    if (!t->specials) return false;
    for (int32_t i = 0; i < t->n; i++)
        if ((t->type[i] == HX_TT_CONTROL || t->type[i] == HX_TT_USER) && t->plen[i] > 0) t->specials[t->n_specials++] = i;
    qsort_r(t->specials, t->n_specials, sizeof *t->specials, cmp_spec, t);
    t->spec_len = calloc(t->n_specials + 1, sizeof *t->spec_len);
    if (!t->spec_len || !smap_init(&t->spec_map[0], t->n_specials) || !smap_init(&t->spec_map[1], t->n_specials))
        return false;
    for (size_t k = 0; k < t->n_specials; k++) {
        int32_t id = t->specials[k];
        t->spec_first[(unsigned char)t->piece[id][0]] = true;
        smap_put(&t->spec_map[0], t->piece[id], t->plen[id], id);
        if (t->type[id] != HX_TT_CONTROL) smap_put(&t->spec_map[1], t->piece[id], t->plen[id], id);
        if (!t->n_spec_len || t->spec_len[t->n_spec_len - 1] != t->plen[id]) t->spec_len[t->n_spec_len++] = t->plen[id];
    }
    return true;
}

static char *dupn(const char *s, size_t n) {
    char *p = malloc(n + 1); if (!p) return NULL; memcpy(p, s, n); p[n] = 0; return p;
}

static int32_t get_id(const hx_gguf *g, const char *key, int32_t def) {
    int64_t v; return hx_gguf_get_i64(g, key, &v) ? (int32_t)v : def;
}

hx_status hx_tok_load_gguf(const char *path, hx_tok **out, hx_error *e) {
    *out = NULL;
    hx_gguf *g = NULL;
    hx_status st = hx_gguf_open(path, NULL, &g, e);
    if (st) return st;
    hx_tok *t = calloc(1, sizeof *t);
    if (!t) { hx_gguf_close(g); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
    hx_gguf_str model = {0}, pre = {0};
    if (!hx_gguf_get_str(g, "tokenizer.ggml.model", &model)) { st = hx_err(e, HX_ERR_FORMAT, "%s: no tokenizer.ggml.model", path); goto fail; }
    if (hx_gguf_str_eq(model, "llama")) t->kind = HX_TOK_SPM;
    else if (hx_gguf_str_eq(model, "gpt2")) t->kind = HX_TOK_BPE;
    else if (hx_gguf_str_eq(model, "bert")) t->kind = HX_TOK_WPM;
    else { st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: tokenizer.ggml.model '%.*s' not supported", path, (int)model.len, model.ptr); goto fail; }
    const hx_gguf_value *toks = hx_gguf_get_arr(g, "tokenizer.ggml.tokens", HX_GGUF_STRING);
    if (!toks || toks->arr.count == 0 || toks->arr.count > 0x7fffffff) { st = hx_err(e, HX_ERR_FORMAT, "%s: tokenizer.ggml.tokens missing or bad", path); goto fail; }
    t->n = (int32_t)toks->arr.count;
    t->piece = calloc((size_t)t->n, sizeof *t->piece); t->plen = calloc((size_t)t->n, sizeof *t->plen);
    t->score = calloc((size_t)t->n, sizeof *t->score); t->type = calloc((size_t)t->n, sizeof *t->type);
    if (!t->piece || !t->plen || !t->score || !t->type || !smap_init(&t->vocab, (size_t)t->n)) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto fail; }
    const hx_gguf_value *sc = hx_gguf_get_arr(g, "tokenizer.ggml.scores", HX_GGUF_VTYPE_COUNT);
    const hx_gguf_value *ty = hx_gguf_get_arr(g, "tokenizer.ggml.token_type", HX_GGUF_VTYPE_COUNT);
    for (int32_t i = 0; i < t->n; i++) {
        hx_gguf_str s = toks->arr.elems[i].str;
        if (!(t->piece[i] = dupn(s.ptr, s.len))) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto fail; }
        t->plen[i] = s.len;
        t->score[i] = sc && (uint64_t)i < sc->arr.count ? (float)hx_gguf_arr_f64(sc, (uint64_t)i) : 0.0f;
        t->type[i] = ty && (uint64_t)i < ty->arr.count ? (int)hx_gguf_arr_i64(ty, (uint64_t)i) : HX_TT_NORMAL;
        smap_put(&t->vocab, t->piece[i], t->plen[i], i);
    }
    bool wpm = t->kind == HX_TOK_WPM;  /* BERT defaults as llama.cpp: [CLS] 101 as BOS, [UNK] 100, [SEP] 102 */
    t->bos = get_id(g, "tokenizer.ggml.bos_token_id", wpm ? 101 : t->kind == HX_TOK_SPM ? 1 : -1);
    t->eos = get_id(g, "tokenizer.ggml.eos_token_id", t->kind == HX_TOK_SPM ? 2 : -1);
    t->eot = get_id(g, "tokenizer.ggml.eot_token_id", -1);
    t->unk = get_id(g, "tokenizer.ggml.unknown_token_id", wpm ? 100 : t->kind == HX_TOK_SPM ? 0 : -1);
    t->pad = get_id(g, "tokenizer.ggml.padding_token_id", wpm ? 0 : -1);
    t->sep = get_id(g, "tokenizer.ggml.seperator_token_id", wpm ? 102 : -1);
    t->cls = get_id(g, "tokenizer.ggml.cls_token_id", wpm ? 101 : -1);
    t->mask = get_id(g, "tokenizer.ggml.mask_token_id", wpm ? 103 : -1);
    int32_t *ids_chk[] = {&t->bos, &t->eos, &t->eot, &t->unk, &t->pad, &t->sep, &t->cls, &t->mask};
    for (size_t k = 0; k < sizeof ids_chk / sizeof *ids_chk; k++)
        if (*ids_chk[k] >= t->n) *ids_chk[k] = -1;  /* out-of-range special ids are treated as absent */
    t->add_bos = t->kind != HX_TOK_BPE; t->add_eos = false;
    t->add_sep = t->kind == HX_TOK_WPM;
    if (t->kind == HX_TOK_WPM) {
        t->lowercase = true;
        hx_gguf_get_bool(g, "tokenizer.ggml.normalizer.lowercase", &t->lowercase);
        t->strip_accents = t->lowercase;
        hx_gguf_get_bool(g, "tokenizer.ggml.normalizer.strip_accents", &t->strip_accents);
        for (int32_t i = 0; i < t->n; i++) if (t->plen[i] > t->max_len) t->max_len = t->plen[i];
    } t->add_space_prefix = t->kind == HX_TOK_SPM;
    if (t->kind == HX_TOK_BPE) {
        init_byte_map(t);
        const hx_gguf_value *mg = hx_gguf_get_arr(g, "tokenizer.ggml.merges", HX_GGUF_STRING);
        if (!mg) { st = hx_err(e, HX_ERR_FORMAT, "%s: gpt2 tokenizer without tokenizer.ggml.merges", path); goto fail; }
        t->n_merges = mg->arr.count;
        t->merge_str = calloc(t->n_merges ? t->n_merges : 1, sizeof *t->merge_str);
        if (!t->merge_str || !smap_init(&t->merges, t->n_merges)) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto fail; }
        for (size_t i = 0; i < t->n_merges; i++) {
            hx_gguf_str s = mg->arr.elems[i].str;
            if (!(t->merge_str[i] = dupn(s.ptr, s.len))) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto fail; }
            smap_put(&t->merges, t->merge_str[i], s.len, (int32_t)i);
        }
        char prebuf[64] = "default";
        if (hx_gguf_get_str(g, "tokenizer.ggml.pre", &pre) && pre.len < sizeof prebuf) {
            memcpy(prebuf, pre.ptr, pre.len); prebuf[pre.len] = 0;
        }
        bool l3;
        const char *const *rx = pre_regexes(prebuf, &l3);
        if (l3) { t->ignore_merges = true; t->add_bos = true; }
        for (; *rx && t->n_re < 6; rx++) {
            int ec; PCRE2_SIZE eo;
            t->re[t->n_re] = pcre2_compile((PCRE2_SPTR)*rx, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
            if (!t->re[t->n_re]) { st = hx_err(e, HX_ERR_FORMAT, "%s: pre-tokenizer regex %d failed to compile", path, t->n_re); goto fail; }
            t->n_re++;
        }
    }
    hx_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);  /* explicit keys override defaults */
    hx_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
    hx_gguf_get_bool(g, "tokenizer.ggml.add_sep_token", &t->add_sep);
    hx_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    if (!spec_index(t)) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto fail; }
    hx_gguf_close(g);
    *out = t;
    return HX_OK;
fail:
    hx_gguf_close(g);
    hx_tok_free(t);
    return st;
}

/* Shared tail of the non-GGUF loaders: vocab map, special list, defaults. pieces/scores/types already set. */
static hx_status tok_finish(hx_tok *t, const char *path, hx_error *e) {
    if (!smap_init(&t->vocab, (size_t)t->n)) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    for (int32_t i = 0; i < t->n; i++) smap_put(&t->vocab, t->piece[i], t->plen[i], i);
    if (!spec_index(t)) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    return HX_OK;
}

static hx_status tok_alloc(hx_tok *t, size_t n, const char *path, hx_error *e) {
    if (n == 0 || n > 0x7fffffff) return hx_err(e, HX_ERR_FORMAT, "%s: empty or oversized vocabulary", path);
    t->n = (int32_t)n;
    t->piece = calloc(n, sizeof *t->piece); t->plen = calloc(n, sizeof *t->plen);
    t->score = calloc(n, sizeof *t->score); t->type = calloc(n, sizeof *t->type);
    t->bos = t->eos = t->eot = t->unk = t->pad = t->sep = t->cls = t->mask = -1;
    if (!t->piece || !t->plen || !t->score || !t->type) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    return HX_OK;
}

/* BERT vocab.txt: one token per line, id = line number. Word-initial pieces get the U+2581 marker and
 * "##" continuations lose their prefix (the GGUF convention wpm_word expects); [X] names are control. */
hx_status hx_tok_load_vocab_txt(const char *path, hx_tok **out, hx_error *e) {
    *out = NULL;
    size_t len = 0; char *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hx_err(e, HX_ERR_IO, "%s: cannot open", path);
    if (fseek(f, 0, SEEK_END) || (len = (size_t)ftell(f), fseek(f, 0, SEEK_SET)) || !(buf = malloc(len + 1)) ||
        fread(buf, 1, len, f) != len) { fclose(f); free(buf); return hx_err(e, HX_ERR_IO, "%s: read failed", path); }
    fclose(f); buf[len] = 0;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) if (buf[i] == '\n') n++;
    if (len && buf[len - 1] != '\n') n++;
    hx_tok *t = calloc(1, sizeof *t);
    hx_status st = t ? tok_alloc(t, n, path, e) : hx_err(e, HX_ERR_NOMEM, "oom");
    if (st) { free(buf); hx_tok_free(t); return st; }
    t->kind = HX_TOK_WPM; t->add_bos = t->add_sep = true; t->lowercase = t->strip_accents = true;
    char *line = buf;
    for (int32_t i = 0; i < t->n; i++) {
        char *nl = strchr(line, '\n'); size_t l = nl ? (size_t)(nl - line) : strlen(line);
        if (l && line[l - 1] == '\r') l--;
        /* only BERT's five special tokens are specials (HF's added tokens);
         * [unused0] and the like are ordinary vocabulary entries */
        bool ctl = (l == 5 && (!memcmp(line, "[UNK]", 5) || !memcmp(line, "[CLS]", 5) || !memcmp(line, "[SEP]", 5) ||
                               !memcmp(line, "[PAD]", 5))) || (l == 6 && !memcmp(line, "[MASK]", 6));
        char *p = malloc(l + 4);
        if (!p) { st = hx_err(e, HX_ERR_NOMEM, "oom"); break; }
        size_t pl = 0;
        if (ctl) { memcpy(p, line, l); pl = l; }
        else if (l >= 2 && line[0] == '#' && line[1] == '#') { memcpy(p, line + 2, l - 2); pl = l - 2; }
        else { memcpy(p, "\xE2\x96\x81", 3); memcpy(p + 3, line, l); pl = l + 3; }
        p[pl] = 0; t->piece[i] = p; t->plen[i] = pl; t->type[i] = ctl ? HX_TT_CONTROL : HX_TT_NORMAL;
        if (pl > t->max_len) t->max_len = pl;
        if (ctl) {
            if (!strcmp(p, "[UNK]")) t->unk = i; else if (!strcmp(p, "[CLS]")) t->cls = t->bos = i;
            else if (!strcmp(p, "[SEP]")) t->sep = i; else if (!strcmp(p, "[PAD]")) t->pad = i;
            else if (!strcmp(p, "[MASK]")) t->mask = i;
        }
        line = nl ? nl + 1 : line + l;
    }
    free(buf);
    if (!st) st = tok_finish(t, path, e);
    if (st) { hx_tok_free(t); return st; }
    *out = t;
    return HX_OK;
}

/* protobuf varint with bounds; false on truncation or > 10 bytes */
static bool pb_varint(const unsigned char *p, size_t n, size_t *i, uint64_t *v) {
    *v = 0;
    for (int k = 0; k < 10; k++) {
        if (*i >= n) return false;
        unsigned char c = p[(*i)++];
        *v |= (uint64_t)(c & 0x7F) << (7 * k);
        if (!(c & 0x80)) return true;
    }
    return false;
}
/* skip one field of wire type wt */
static bool pb_skip(const unsigned char *p, size_t n, size_t *i, unsigned wt) {
    uint64_t v;
    switch (wt) {
    case 0: return pb_varint(p, n, i, &v);
    case 1: if (n - *i < 8) return false; *i += 8; return true;
    case 2: if (!pb_varint(p, n, i, &v) || v > n - *i) return false; *i += v; return true;
    case 5: if (n - *i < 4) return false; *i += 4; return true;
    default: return false;
    }
}

/* SentencePiece tokenizer.model: ModelProto field 1 = repeated SentencePiece {1: piece, 2: score f32, 3: type}. */
hx_status hx_tok_load_spm_model(const char *path, hx_tok **out, hx_error *e) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hx_err(e, HX_ERR_IO, "%s: cannot open", path);
    size_t len = 0; unsigned char *buf = NULL;
    if (fseek(f, 0, SEEK_END) || (len = (size_t)ftell(f), fseek(f, 0, SEEK_SET)) || !(buf = malloc(len + 1)) ||
        fread(buf, 1, len, f) != len) { fclose(f); free(buf); return hx_err(e, HX_ERR_IO, "%s: read failed", path); }
    fclose(f);
    hx_status st = HX_OK;
    hx_tok *t = NULL;
    for (int pass = 0; pass < 2 && !st; pass++) {   /* pass 0 counts pieces, pass 1 fills them */
        size_t i = 0, cnt = 0;
        while (i < len) {
            size_t at = i; uint64_t key, l;
            if (!pb_varint(buf, len, &i, &key)) { st = hx_err(e, HX_ERR_FORMAT, "%s: bad field key at byte %zu", path, at); break; }
            if ((key >> 3) != 1 || (key & 7) != 2) {
                if (!pb_skip(buf, len, &i, (unsigned)(key & 7))) { st = hx_err(e, HX_ERR_FORMAT, "%s: bad field at byte %zu", path, at); break; }
                continue;
            }
            if (!pb_varint(buf, len, &i, &l) || l > len - i) { st = hx_err(e, HX_ERR_FORMAT, "%s: piece at byte %zu overruns the file", path, at); break; }
            size_t end = i + (size_t)l;
            if (pass == 1) {
                const unsigned char *ps = NULL; size_t pl = 0; float sc = 0; int ty = HX_TT_NORMAL;
                while (i < end) {
                    size_t at2 = i; uint64_t k2, v;
                    if (!pb_varint(buf, end, &i, &k2)) { st = hx_err(e, HX_ERR_FORMAT, "%s: bad piece field at byte %zu", path, at2); break; }
                    if (k2 == ((1 << 3) | 2)) {
                        if (!pb_varint(buf, end, &i, &v) || v > end - i) { st = hx_err(e, HX_ERR_FORMAT, "%s: piece string overruns at byte %zu", path, at2); break; }
                        ps = buf + i; pl = (size_t)v; i += (size_t)v;
                    } else if (k2 == ((2 << 3) | 5)) {
                        if (end - i < 4) { st = hx_err(e, HX_ERR_FORMAT, "%s: truncated score at byte %zu", path, at2); break; }
                        uint32_t u = (uint32_t)buf[i] | (uint32_t)buf[i + 1] << 8 | (uint32_t)buf[i + 2] << 16 | (uint32_t)buf[i + 3] << 24;
                        memcpy(&sc, &u, 4); i += 4;
                    } else if (k2 == ((3 << 3) | 0)) {
                        if (!pb_varint(buf, end, &i, &v)) { st = hx_err(e, HX_ERR_FORMAT, "%s: bad type at byte %zu", path, at2); break; }
                        ty = (int)v;
                    } else if (!pb_skip(buf, end, &i, (unsigned)(k2 & 7))) { st = hx_err(e, HX_ERR_FORMAT, "%s: bad piece field at byte %zu", path, at2); break; }
                }
                if (st) break;
                char *p = malloc(pl + 1);
                if (!p) { st = hx_err(e, HX_ERR_NOMEM, "oom"); break; }
                if (pl) memcpy(p, ps, pl);
                p[pl] = 0;
                t->piece[cnt] = p; t->plen[cnt] = pl; t->score[cnt] = sc; t->type[cnt] = ty;
                if (ty == HX_TT_UNKNOWN && t->unk < 0) t->unk = (int32_t)cnt;
                if (!strcmp(p, "<s>")) t->bos = (int32_t)cnt;
                if (!strcmp(p, "</s>")) t->eos = (int32_t)cnt;
            }
            i = end; cnt++;
        }
        if (st) break;
        if (pass == 0) {
            t = calloc(1, sizeof *t);
            st = t ? tok_alloc(t, cnt, path, e) : hx_err(e, HX_ERR_NOMEM, "oom");
            if (!st) { t->kind = HX_TOK_SPM; t->add_bos = true; t->add_space_prefix = true; }
        }
    }
    free(buf);
    if (!st) st = tok_finish(t, path, e);
    if (st) { hx_tok_free(t); return st; }
    *out = t;
    return HX_OK;
}

/* Find the first Split pre-tokenizer's Regex in a (possibly Sequence) pre_tokenizer. */
static const char *json_split_regex(const cJSON *pt) {
    if (!pt) return NULL;
    const char *ty = cJSON_GetStringValue(cJSON_GetObjectItem(pt, "type"));
    if (ty && !strcmp(ty, "Split"))
        return cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetObjectItem(pt, "pattern"), "Regex"));
    const cJSON *seq = cJSON_GetObjectItem(pt, "pretokenizers"), *it;
    cJSON_ArrayForEach(it, seq) { const char *r = json_split_regex(it); if (r) return r; }
    return NULL;
}

/* Hugging Face tokenizer.json, byte-level BPE (Llama 3, Qwen): vocab, merges ("a b" or ["a","b"]),
 * added_tokens (special -> control, else user-defined), the Split regex compiled as is with PCRE2. */
hx_status hx_tok_load_hf_json(const char *path, hx_tok **out, hx_error *e) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return hx_err(e, HX_ERR_IO, "%s: cannot open", path);
    size_t len = 0; char *buf = NULL;
    if (fseek(f, 0, SEEK_END) || (len = (size_t)ftell(f), fseek(f, 0, SEEK_SET)) || !(buf = malloc(len + 1)) ||
        fread(buf, 1, len, f) != len) { fclose(f); free(buf); return hx_err(e, HX_ERR_IO, "%s: read failed", path); }
    fclose(f); buf[len] = 0;
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!root) return hx_err(e, HX_ERR_FORMAT, "%s: not valid JSON", path);
    hx_status st = HX_OK; hx_tok *t = NULL;
    cJSON *model = cJSON_GetObjectItem(root, "model");
    const char *mty = cJSON_GetStringValue(cJSON_GetObjectItem(model, "type"));
    cJSON *vocab = cJSON_GetObjectItem(model, "vocab"), *merges = cJSON_GetObjectItem(model, "merges");
    cJSON *added = cJSON_GetObjectItem(root, "added_tokens"), *it;
    const char *rx = json_split_regex(cJSON_GetObjectItem(root, "pre_tokenizer"));
    if (!mty || strcmp(mty, "BPE") || !cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: only BPE tokenizer.json with model.vocab and model.merges is supported", path);
        goto done;
    }
    bool spbpe = cJSON_IsTrue(cJSON_GetObjectItem(model, "byte_fallback"));
    if (!rx && !spbpe) {
        st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: neither byte-level BPE with a Split regex nor byte-fallback BPE", path);
        goto done;
    }
    int64_t maxid = -1;
    cJSON_ArrayForEach(it, vocab) { if (cJSON_IsNumber(it) && it->valuedouble > (double)maxid) maxid = (int64_t)it->valuedouble; }
    cJSON_ArrayForEach(it, added) {
        cJSON *id = cJSON_GetObjectItem(it, "id");
        if (cJSON_IsNumber(id) && id->valuedouble > (double)maxid) maxid = (int64_t)id->valuedouble;
    }
    if (maxid < 0 || maxid >= 0x7fffffff) { st = hx_err(e, HX_ERR_FORMAT, "%s: bad token ids", path); goto done; }
    t = calloc(1, sizeof *t);
    st = t ? tok_alloc(t, (size_t)maxid + 1, path, e) : hx_err(e, HX_ERR_NOMEM, "oom");
    if (st) goto done;
    t->kind = HX_TOK_BPE;
    init_byte_map(t);
    for (int32_t i = 0; i < t->n; i++) t->type[i] = HX_TT_UNUSED;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0) { st = hx_err(e, HX_ERR_FORMAT, "%s: vocab entry '%s' has no id", path, it->string); goto done; }
        int32_t id = (int32_t)it->valuedouble;
        free(t->piece[id]);
        if (!(t->piece[id] = dupn(it->string, strlen(it->string)))) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto done; }
        t->plen[id] = strlen(it->string); t->type[id] = HX_TT_NORMAL;
    }
    cJSON_ArrayForEach(it, added) {
        cJSON *idj = cJSON_GetObjectItem(it, "id");
        const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(it, "content"));
        if (!cJSON_IsNumber(idj) || idj->valuedouble < 0 || !c) { st = hx_err(e, HX_ERR_FORMAT, "%s: bad added_tokens entry", path); goto done; }
        int32_t id = (int32_t)idj->valuedouble;
        free(t->piece[id]);
        if (!(t->piece[id] = dupn(c, strlen(c)))) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto done; }
        t->plen[id] = strlen(c);
        t->type[id] = cJSON_IsTrue(cJSON_GetObjectItem(it, "special")) ? HX_TT_CONTROL : HX_TT_USER;
    }
    for (int32_t i = 0; i < t->n; i++)
        if (!t->piece[i] && !(t->piece[i] = dupn("", 0))) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto done; }
    t->n_merges = (size_t)cJSON_GetArraySize(merges);
    t->merge_str = calloc(t->n_merges ? t->n_merges : 1, sizeof *t->merge_str);
    if (!t->merge_str || !smap_init(&t->merges, t->n_merges)) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto done; }
    size_t mi = 0;
    cJSON_ArrayForEach(it, merges) {
        const char *a = NULL, *b = NULL; char *m = NULL;
        if (cJSON_IsString(it)) m = dupn(it->valuestring, strlen(it->valuestring));
        else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                 (a = cJSON_GetStringValue(cJSON_GetArrayItem(it, 0))) && (b = cJSON_GetStringValue(cJSON_GetArrayItem(it, 1)))) {
            size_t la = strlen(a), lb = strlen(b);
            if ((m = malloc(la + lb + 2))) { memcpy(m, a, la); m[la] = ' '; memcpy(m + la + 1, b, lb + 1); }
        } else { st = hx_err(e, HX_ERR_FORMAT, "%s: merges[%zu] is neither \"a b\" nor [\"a\",\"b\"]", path, mi); goto done; }
        if (!m) { st = hx_err(e, HX_ERR_NOMEM, "oom"); goto done; }
        t->merge_str[mi] = m;
        smap_put(&t->merges, m, strlen(m), (int32_t)mi);
        mi++;
    }
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItem(model, "ignore_merges"));
    t->spbpe = spbpe;
    {   /* TemplateProcessing: [SpecialToken BOS] $A [SpecialToken EOS] */
        cJSON *pp = cJSON_GetObjectItem(root, "post_processor");
        const char *pty = cJSON_GetStringValue(cJSON_GetObjectItem(pp, "type"));
        cJSON *single = cJSON_GetObjectItem(pp, "single");
        int ns = cJSON_GetArraySize(single);
        for (int end = 0; pty && !strcmp(pty, "TemplateProcessing") && ns >= 2 && end < 2; end++) {
            const char *tokname = cJSON_GetStringValue(cJSON_GetObjectItem(
                cJSON_GetObjectItem(cJSON_GetArrayItem(single, end ? ns - 1 : 0), "SpecialToken"), "id"));
            cJSON *sp = tokname ? cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(pp, "special_tokens"), tokname), "ids") : NULL;
            cJSON *id0 = cJSON_GetArrayItem(sp, 0);
            if (!cJSON_IsNumber(id0) || id0->valuedouble < 0 || id0->valuedouble >= t->n) continue;
            if (end) { t->eos = (int32_t)id0->valuedouble; t->add_eos = true; }
            else { t->bos = (int32_t)id0->valuedouble; t->add_bos = true; }
        }
    }
    if (spbpe) { st = tok_finish(t, path, e); goto done; }
    int ec; PCRE2_SIZE eo;
    t->re[0] = pcre2_compile((PCRE2_SPTR)rx, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!t->re[0]) { st = hx_err(e, HX_ERR_FORMAT, "%s: pre_tokenizer regex does not compile (offset %zu)", path, (size_t)eo); goto done; }
    t->n_re = 1;
    st = tok_finish(t, path, e);
done:
    cJSON_Delete(root);
    if (st) { hx_tok_free(t); return st; }
    *out = t;
    return HX_OK;
}

/* growable id vector */
typedef struct { int32_t *v; size_t n, cap; bool oom; } ivec;
static void ipush(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64; int32_t *p = realloc(a->v, nc * sizeof *p);
        if (!p) { a->oom = true; return; }
        a->v = p; a->cap = nc;
    }
    a->v[a->n++] = x;
}

/* symbol list for merging: [off, len) into a work buffer */
typedef struct { size_t off, len; } sym;

static void spm_emit(const hx_tok *t, const char *s, size_t n, ivec *o) {
    int32_t id = smap_get(&t->vocab, s, n);
    if (id >= 0) { ipush(o, id); return; }
    for (size_t i = 0; i < n; i++) {   /* byte fallback */
        char b[8]; snprintf(b, sizeof b, "<0x%02X>", (unsigned char)s[i]);
        int32_t bid = smap_get(&t->vocab, b, 6);
        ipush(o, bid >= 0 ? bid : t->unk);
    }
}

/* SPM: spaces -> U+2581, then merge the adjacent pair with the best score (leftmost on ties) while one exists. */
static void spm_encode(const hx_tok *t, const char *txt, size_t n, bool prefix, ivec *o) {
    size_t cap = (n + 1) * 3 + 4;
    char *buf = malloc(cap); sym *sy = malloc((n + 2) * sizeof *sy);
    if (!buf || !sy) { free(buf); free(sy); o->oom = true; return; }
    size_t bl = 0;
    if (prefix) { memcpy(buf, "\xE2\x96\x81", 3); bl = 3; }
    for (size_t i = 0; i < n; i++) {
        if (txt[i] == ' ') { memcpy(buf + bl, "\xE2\x96\x81", 3); bl += 3; } else buf[bl++] = txt[i];
    }
    size_t ns = 0;
    for (size_t i = 0; i < bl;) {
        size_t l = (size_t)utf8_len((unsigned char)buf[i]); if (i + l > bl) l = bl - i;
        sy[ns].off = i; sy[ns].len = l; ns++; i += l;
    }
    for (;;) {
        size_t best = (size_t)-1; float bs = 0;
        for (size_t i = 0; i + 1 < ns; i++) {
            int32_t id = smap_get(&t->vocab, buf + sy[i].off, sy[i].len + sy[i + 1].len);
            if (id < 0) continue;
            if (best == (size_t)-1 || t->score[id] > bs) { best = i; bs = t->score[id]; }
        }
        if (best == (size_t)-1) break;
        sy[best].len += sy[best + 1].len;
        memmove(sy + best + 1, sy + best + 2, (ns - best - 2) * sizeof *sy);
        ns--;
    }
    for (size_t i = 0; i < ns; i++) spm_emit(t, buf + sy[i].off, sy[i].len, o);
    free(buf); free(sy);
}

/* BPE on one pre-tokenized word: bytes mapped to code points, merge lowest-rank pair first. */
static void bpe_word(const hx_tok *t, const char *w, size_t n, ivec *o) {
    char *buf = calloc(n * 2 + 1, 1); sym *sy = malloc((n + 1) * sizeof *sy);
    char *pair = malloc(n * 2 + 2);
    if (!buf || !sy || !pair) { free(buf); free(sy); free(pair); o->oom = true; return; }
    size_t bl = 0, ns = 0;
    if (t->ignore_merges) {
        for (size_t i = 0; i < n; i++) bl += (size_t)put_utf8(buf + bl, t->byte_to_cp[(unsigned char)w[i]]);
        int32_t id = smap_get(&t->vocab, buf, bl);
        if (id >= 0) { ipush(o, id); free(buf); free(sy); free(pair); return; }
        bl = 0;
    }
    for (size_t i = 0; i < n; i++) {
        int l = put_utf8(buf + bl, t->byte_to_cp[(unsigned char)w[i]]);
        sy[ns].off = bl; sy[ns].len = (size_t)l; ns++; bl += (size_t)l;
    }
    /* merge adjacent symbols lying contiguously in buf: off of i+1 == off+len of i always holds */
    for (;;) {
        size_t best = (size_t)-1; int32_t br = 0;
        for (size_t i = 0; i + 1 < ns; i++) {
            size_t a = sy[i].len, b = sy[i + 1].len;
            memcpy(pair, buf + sy[i].off, a); pair[a] = ' '; memcpy(pair + a + 1, buf + sy[i + 1].off, b);
            int32_t r = smap_get(&t->merges, pair, a + b + 1);
            if (r < 0) continue;
            if (best == (size_t)-1 || r < br) { best = i; br = r; }
        }
        if (best == (size_t)-1) break;
        sy[best].len += sy[best + 1].len;
        memmove(sy + best + 1, sy + best + 2, (ns - best - 2) * sizeof *sy);
        ns--;
    }
    for (size_t i = 0; i < ns; i++) {
        int32_t id = smap_get(&t->vocab, buf + sy[i].off, sy[i].len);
        if (id >= 0) { ipush(o, id); continue; }
        for (size_t k = 0; k < sy[i].len;) {  /* fall back to single mapped characters */
            int l = utf8_len((unsigned char)buf[sy[i].off + k]);
            int32_t cid = smap_get(&t->vocab, buf + sy[i].off + k, (size_t)l);
            ipush(o, cid >= 0 ? cid : t->unk);
            k += (size_t)l;
        }
    }
    free(buf); free(sy); free(pair);
}

/* Split txt[0,n) with regex level lv into matches and gaps; each goes on to the next level, then to BPE. */
static void bpe_split(const hx_tok *t, const char *txt, size_t n, int lv, pcre2_match_data **md, ivec *o) {
    if (n == 0) return;
    if (lv == t->n_re) { bpe_word(t, txt, n, o); return; }
    size_t pos = 0;
    while (pos < n) {
        int rc = pcre2_match(t->re[lv], (PCRE2_SPTR)txt, n, pos, 0, md[lv], NULL);
        if (rc < 0) break;  /* no further match (or invalid UTF-8): the rest is a gap */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md[lv]);
        if (ov[0] > pos) bpe_split(t, txt + pos, ov[0] - pos, lv + 1, md, o);
        if (ov[1] == ov[0]) {  /* empty match: step one character as part of the next gap */
            size_t l = (size_t)utf8_len((unsigned char)txt[ov[0]]);
            bpe_split(t, txt + ov[0], l, lv + 1, md, o); pos = ov[0] + l; continue;
        }
        bpe_split(t, txt + ov[0], ov[1] - ov[0], lv + 1, md, o);
        pos = ov[1];
    }
    if (pos < n) bpe_split(t, txt + pos, n - pos, lv + 1, md, o);
}

/* Gemma-style: spaces -> U+2581, characters as symbols, merges by rank, <0xNN> for unknown symbols. */
static void spbpe_encode(const hx_tok *t, const char *txt, size_t n, ivec *o) {
    char *buf = malloc(n * 3 + 1); sym *sy = malloc((n + 1) * sizeof *sy); char *pair = malloc(n * 3 + 2);
    if (!buf || !sy || !pair) { free(buf); free(sy); free(pair); o->oom = true; return; }
    size_t bl = 0, ns = 0;
    for (size_t i = 0; i < n; i++) {
        if (txt[i] == ' ') { memcpy(buf + bl, "\xE2\x96\x81", 3); bl += 3; } else buf[bl++] = txt[i];
    }
    for (size_t i = 0; i < bl;) {
        size_t l = (size_t)utf8_len((unsigned char)buf[i]); if (i + l > bl) l = bl - i;
        sy[ns].off = i; sy[ns].len = l; ns++; i += l;
    }
    for (;;) {
        size_t best = (size_t)-1; int32_t br = 0;
        for (size_t i = 0; i + 1 < ns; i++) {
            size_t a = sy[i].len, b = sy[i + 1].len;
            memcpy(pair, buf + sy[i].off, a); pair[a] = ' '; memcpy(pair + a + 1, buf + sy[i + 1].off, b);
            int32_t r = smap_get(&t->merges, pair, a + b + 1);
            if (r >= 0 && (best == (size_t)-1 || r < br)) { best = i; br = r; }
        }
        if (best == (size_t)-1) break;
        sy[best].len += sy[best + 1].len;
        memmove(sy + best + 1, sy + best + 2, (ns - best - 2) * sizeof *sy);
        ns--;
    }
    for (size_t i = 0; i < ns; i++) spm_emit(t, buf + sy[i].off, sy[i].len, o);
    free(buf); free(sy); free(pair);
}

static void bpe_encode(const hx_tok *t, const char *txt, size_t n, ivec *o) {
    pcre2_match_data *md[6] = {0};
    for (int i = 0; i < t->n_re; i++)
        if (!(md[i] = pcre2_match_data_create_from_pattern(t->re[i], NULL))) o->oom = true;
    if (!o->oom) bpe_split(t, txt, n, 0, md, o);
    for (int i = 0; i < t->n_re; i++) pcre2_match_data_free(md[i]);
}

static bool is_cjk(int32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* WordPiece on one word: "▁"+word, greedy longest match from each position; the whole word is [UNK] on failure.
 * After the start a piece may not begin with "▁": in this vocabulary form that is a word-initial token, and a
 * literal U+2581 inside a word (SentencePiece output pasted as text) must not split it into words (HF: [UNK]). */
static void wpm_word(const hx_tok *t, const char *w, size_t n, ivec *o) {
    if (n == 0) return;
    size_t ncp = 0;
    for (size_t i = 0; i < n; i++) ncp += ((unsigned char)w[i] & 0xC0) != 0x80;
    if (ncp > 100) { ipush(o, t->unk); return; }  /* HF max_input_chars_per_word */
    char *b = malloc(n + 3); if (!b) { o->oom = true; return; }
    memcpy(b, "\xE2\x96\x81", 3); memcpy(b + 3, w, n);
    size_t m = n + 3, before = o->n;
    for (size_t i = 0; i < m;) {
        size_t j = i + t->max_len < m ? i + t->max_len : m; int32_t id = -1;
        if (i > 0 && m - i >= 3 && !memcmp(b + i, "\xE2\x96\x81", 3)) { o->n = before; break; }
        for (; j > i; j--) if ((id = smap_get(&t->vocab, b + i, j - i)) >= 0) break;
        if (id < 0) { o->n = before; break; }
        ipush(o, id); i = j;
    }
    if (o->n == before) ipush(o, t->unk);
    free(b);
}

/* BERT normalization and splitting: NFD + drop Mn when strip_accents, lowercase, drop controls,
 * whitespace separates words, punctuation / ASCII symbols / CJK are single-character words.
 * "Controls" are Cc, Cf, Cs, Co as in HF tokenizers' BertNormalizer; unassigned code points (Cn) stay
 * in their word (usually making it [UNK]), unlike Google's Python BERT, which drops every C* category. */
static void wpm_encode(const hx_tok *t, const char *txt, size_t n, ivec *o) {
    utf8proc_uint8_t *nf = NULL;
    utf8proc_ssize_t nl = utf8proc_map((const utf8proc_uint8_t *)txt, (utf8proc_ssize_t)n, &nf,
                                       t->strip_accents ? UTF8PROC_DECOMPOSE : 0);
    if (nl < 0) { free(nf); nf = NULL; }  /* invalid UTF-8: fall back to the raw bytes */
    const utf8proc_uint8_t *s = nf ? nf : (const utf8proc_uint8_t *)txt;
    size_t sl = nf ? (size_t)nl : n;
    char *word = malloc(sl * 2 + 8); if (!word) { free(nf); o->oom = true; return; }
    size_t wl = 0;
    for (size_t i = 0; i < sl;) {
        utf8proc_int32_t c; utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(sl - i), &c);
        if (k <= 0) { c = 0xFFFD; k = 1; }
        i += (size_t)k;
        utf8proc_category_t cat = utf8proc_category(c);
        bool ws = c == ' ' || c == '\t' || c == '\n' || c == '\r' || cat == UTF8PROC_CATEGORY_ZS ||
                  cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
        if (ws) { wpm_word(t, word, wl, o); wl = 0; continue; }
        if (c == 0 || c == 0xFFFD || (cat >= UTF8PROC_CATEGORY_CC && cat <= UTF8PROC_CATEGORY_CO)) continue;
        if (t->strip_accents && cat == UTF8PROC_CATEGORY_MN) continue;
        if (t->lowercase) c = utf8proc_tolower(c);
        char u[4]; utf8proc_ssize_t ul = utf8proc_encode_char(c, (utf8proc_uint8_t *)u);
        bool punct = (cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) ||
                     (c < 0x7F && cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO);
        if (punct || is_cjk(c)) { wpm_word(t, word, wl, o); wl = 0; wpm_word(t, u, (size_t)ul, o); continue; }
        memcpy(word + wl, u, (size_t)ul); wl += (size_t)ul;
    }
    wpm_word(t, word, wl, o);
    free(word); free(nf);
}

hx_status hx_tok_encode(const hx_tok *t, const char *text, size_t n, bool add_special, bool parse_special,
                        int32_t **ids, size_t *n_ids, hx_error *e) {
    *ids = NULL; *n_ids = 0;
    ivec o = {0};
    int32_t first = t->kind == HX_TOK_WPM && t->bos < 0 ? t->cls : t->bos;  /* BERT: [CLS] */
    if (add_special && t->add_bos && first >= 0) ipush(&o, first);
    bool prev_special = true;
    size_t start = 0, i = 0;
    while (i <= n) {
        int32_t hit = -1;
        /* WordPiece: special tokens in the text are always specials, as in
         * transformers' BertTokenizerFast (added tokens are matched first);
         * otherwise control tokens only with parse_special */
        const smap *sm = &t->spec_map[!parse_special && t->kind != HX_TOK_WPM];
        if (i < n && t->spec_first[(unsigned char)text[i]])
            for (size_t k = 0; k < t->n_spec_len && hit < 0; k++)
                if (t->spec_len[k] <= n - i) hit = smap_get(sm, text + i, t->spec_len[k]);
        if (hit < 0 && i < n) { i++; continue; }
        if (i > start) {
            if (t->kind == HX_TOK_WPM) wpm_encode(t, text + start, i - start, &o);
            else if (t->kind == HX_TOK_SPM) spm_encode(t, text + start, i - start, t->add_space_prefix && prev_special, &o);
            else if (t->spbpe) spbpe_encode(t, text + start, i - start, &o);
            else bpe_encode(t, text + start, i - start, &o);
            prev_special = false;
        }
        if (hit < 0) break;
        ipush(&o, hit); prev_special = true;
        i += t->plen[hit]; start = i;
    }
    if (add_special && t->add_eos && t->eos >= 0) ipush(&o, t->eos);
    if (add_special && t->add_sep && t->sep >= 0) ipush(&o, t->sep);
    if (o.oom) { free(o.v); return hx_err(e, HX_ERR_NOMEM, "tokenize: out of memory"); }
    *ids = o.v; *n_ids = o.n;
    return HX_OK;
}

size_t hx_tok_decode_token(const hx_tok *t, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= t->n) return 0;
    const char *p = t->piece[id]; size_t n = t->plen[id], w = 0;
    char tmp[8];
#define PUT(c) do { if (w < cap) buf[w] = (char)(c); w++; } while (0)
    if (t->type[id] == HX_TT_CONTROL) return 0;
    if (t->kind != HX_TOK_BPE || t->spbpe) {
        unsigned v;
        if (t->type[id] == HX_TT_BYTE && n == 6 && sscanf(p, "<0x%2X>", &v) == 1) { PUT(v); return w; }
        for (size_t i = 0; i < n; i++) {
            if (i + 2 < n && !memcmp(p + i, "\xE2\x96\x81", 3)) { PUT(' '); i += 2; } else PUT(p[i]);
        }
        return w;
    }
    if (t->type[id] == HX_TT_USER) { for (size_t i = 0; i < n; i++) PUT(p[i]); return w; }
    for (size_t i = 0; i < n;) {   /* invert the byte -> code point map */
        unsigned char c = (unsigned char)p[i]; int l = utf8_len(c), cp = c;
        if (l == 2 && i + 1 < n) cp = ((c & 0x1F) << 6) | (p[i + 1] & 0x3F);
        if (l <= 2 && cp < 512 && t->cp_to_byte[cp] >= 0) PUT(t->cp_to_byte[cp]);
        else { memcpy(tmp, p + i, (size_t)l); for (int k = 0; k < l && i + (size_t)k < n; k++) PUT(tmp[k]); }
        i += (size_t)l;
    }
#undef PUT
    return w;
}

int hx_utf8_char(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned lo = 0x80, hi = 0xBF; /* range of the second byte (no overlongs, surrogates, > U+10FFFF) */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return -1;
    for (int k = 1; k < len; k++) {
        if ((size_t)k >= n) return 0;
        if (s[k] < (k == 1 ? lo : 0x80) || s[k] > (k == 1 ? hi : 0xBF)) return -k;
    }
    return len;
}

size_t hx_tok_stream_push(const hx_tok *t, hx_tok_stream *s, int32_t id, char *out, size_t cap) {
    char tmp[512];
    size_t n = hx_tok_decode_token(t, id, tmp, sizeof tmp);
    if (n > sizeof tmp) n = sizeof tmp;
    unsigned char all[8 + 512];
    size_t m = (size_t)s->n_pend, w = 0;
    memcpy(all, s->pend, m);
    memcpy(all + m, tmp, n);
    m += n;
    s->n_pend = 0;
    for (size_t i = 0; i < m;) {
        int r = hx_utf8_char(all + i, m - i);
        if (r == 0) { /* an incomplete character: held back until the next token */
            s->n_pend = (int)(m - i);
            memcpy(s->pend, all + i, m - i);
            break;
        }
        const unsigned char *src = r > 0 ? all + i : (const unsigned char *)"\xEF\xBF\xBD";
        size_t k = r > 0 ? (size_t)r : 3;
        if (w + k > cap) break; /* whole characters only */
        memcpy(out + w, src, k);
        w += k;
        i += r > 0 ? (size_t)r : (size_t)-r;
    }
    return w;
}
