/* synth.c — write random-weight GGUF models of real architectures. */
#include "model/synth.h"
#include "core/core.h"
#include "core/pool.h"
#include "gguf/gguf.h"
#include "quant/quant.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <strings.h>

/* Shapes from the models' published configs. */
static const hx_preset k_presets[] = {
    /* name            arch           embd  L   H  KV  hd   ffn    vocab   ctx     rope      swa     eps  tied  win pre */
    {"smollm-135m",    HX_ARCH_LLAMA,  576, 30,  9, 3,  64,  1536,  49152,   8192, 100000.f, 0, 1e-5f, true, 0, "smollm"},
    {"qwen3-0.6b",     HX_ARCH_QWEN3, 1024, 28, 16, 8, 128,  3072, 151936,  40960, 1000000.f, 0, 1e-6f, true, 0, "qwen2"},
    {"llama-3.2-1b",   HX_ARCH_LLAMA, 2048, 16, 32, 8,  64,  8192, 128256, 131072, 500000.f, 0, 1e-5f, true, 0, "llama-bpe"},
    {"tinyllama-1.1b", HX_ARCH_LLAMA, 2048, 22, 32, 4,  64,  5632,  32000,   2048, 10000.f,  0, 1e-5f, false, 0, "default"},
    {"llama-3.1-8b",   HX_ARCH_LLAMA, 4096, 32, 32, 8, 128, 14336, 128256, 131072, 500000.f, 0, 1e-5f, false, 0, "llama-bpe"},
    {"llama-3.1-70b",  HX_ARCH_LLAMA, 8192, 80, 64, 8, 128, 28672, 128256, 131072, 500000.f, 0, 1e-5f, false, 0, "llama-bpe"},
    {"gemma-3-1b",     HX_ARCH_GEMMA3, 1152, 26, 4, 1, 256,  6912, 262144,  32768, 1000000.f, 10000.f, 1e-6f, true, 512, "default"},
    {"minilm-l6",      HX_ARCH_BERT,   384,  6, 12, 12, 32,  1536,  30522,    512, 0, 0, 1e-12f, false, 0, NULL},
};

const hx_preset *hx_preset_at(int i) {
    return i >= 0 && i < (int)(sizeof k_presets / sizeof k_presets[0]) ? &k_presets[i] : NULL;
}

const hx_preset *hx_preset_find(const char *name) {
    for (int i = 0; hx_preset_at(i); i++)
        if (!strcasecmp(k_presets[i].name, name)) return &k_presets[i];
    return NULL;
}

static const char *k_mix_names[HX_MIX_COUNT] = {"f32", "f16", "q8_0", "q4_0", "q4_1", "q4_k_m"};
static const int k_file_type[HX_MIX_COUNT] = {0, 1, 7, 2, 3, 15}; /* llama_ftype numbers */

const char *hx_mix_name(hx_mix m) { return m < HX_MIX_COUNT ? k_mix_names[m] : "?"; }

int hx_mix_from_name(const char *name) {
    for (int i = 0; i < HX_MIX_COUNT; i++)
        if (!strcasecmp(k_mix_names[i], name)) return i;
    return -1;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every
 * third layer in between get more bits in Q4_K_M. */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* K-quants need rows that are a multiple of 256; llama.cpp falls back to a
 * legacy type of similar size when they are not. */
static int fallback(int type, int64_t ne0) {
    if (ne0 % 256 == 0) return type;
    switch (type) {
    case HX_TYPE_Q4_K: return HX_TYPE_Q5_0;
    case HX_TYPE_Q5_K: return HX_TYPE_Q5_1;
    case HX_TYPE_Q6_K: return HX_TYPE_Q8_0;
    default: return type;
    }
}

static bool ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int hx_mix_tensor_type(hx_mix mix, const char *name, int64_t ne0, int il, int n_layer, bool tied) {
    /* 1-D tensors (norms, biases) stay f32, as llama.cpp keeps them */
    if (!ends_with(name, ".weight") || strstr(name, "norm") || strstr(name, "token_types") ||
        strstr(name, "position_embd"))
        return mix == HX_MIX_F16 && strstr(name, "position_embd") ? HX_TYPE_F16 : HX_TYPE_F32;
    bool is_output = !strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"));
    switch (mix) {
    case HX_MIX_F32: return HX_TYPE_F32;
    case HX_MIX_F16: return HX_TYPE_F16;
    case HX_MIX_Q8_0: return ne0 % 32 ? HX_TYPE_F16 : HX_TYPE_Q8_0;
    case HX_MIX_Q4_0:
    case HX_MIX_Q4_1: /* the output matrix in Q6_K, as llama.cpp's quantize does for both */
        if (is_output) return fallback(HX_TYPE_Q6_K, ne0);
        return ne0 % 32 ? HX_TYPE_F16 : mix == HX_MIX_Q4_0 ? HX_TYPE_Q4_0 : HX_TYPE_Q4_1;
    case HX_MIX_Q4_K_M: {
        int t = HX_TYPE_Q4_K;
        if (is_output) t = HX_TYPE_Q6_K;
        else if (il >= 0 && (strstr(name, "attn_v.") || strstr(name, "ffn_down.")) && use_more_bits(il, n_layer))
            t = HX_TYPE_Q6_K;
        return fallback(t, ne0);
    }
    default: return HX_TYPE_F32;
    }
}

/* ---- tensors ---- */

typedef enum tkind { T_MATRIX, T_NORM, T_BIAS } tkind;

typedef struct tspec {
    char name[64];
    int64_t ne0, ne1;   /* ne1 = 1 for vectors */
    int type;
    tkind kind;
    float sigma, mean;
    uint32_t index;     /* position in the file: seeds the rows */
} tspec;

typedef struct synth_ctx {
    uint64_t seed;
    hx_pool *pool;
    const tspec *t;
    uint8_t *buf;
    size_t row_bytes;
    float *scratch;     /* n_threads * ne0 */
    bool progress;
    int n_tensors;
} synth_ctx;

static void fill_rows(void *vctx, int64_t r, int thread) {
    synth_ctx *c = vctx;
    const tspec *t = c->t;
    float *x = c->scratch + (size_t)thread * (size_t)t->ne0;
    hx_rng rng;
    hx_rng_seed(&rng, c->seed ^ ((uint64_t)t->index << 40) ^ (uint64_t)r * 0x9e3779b97f4a7c15ull);
    for (int64_t i = 0; i < t->ne0; i++) x[i] = t->mean + t->sigma * hx_rng_normal(&rng);
    hx_quantize_row(t->type, x, c->buf + (size_t)r * c->row_bytes, t->ne0);
}

static hx_status fill_tensor(void *vctx, void *buf, uint64_t n_bytes, hx_error *e) {
    synth_ctx *c = vctx;
    const tspec *t = c->t;
    c->buf = buf;
    c->row_bytes = hx_row_size(t->type, t->ne0);
    if (c->row_bytes * (uint64_t)t->ne1 != n_bytes) return hx_err(e, HX_ERR_ARG, "synth: size mismatch for '%s'", t->name);
    hx_pool_run(c->pool, t->ne1, fill_rows, c);
    if (c->progress) {
        fprintf(stderr, "\rsynth: tensor %u/%d %-40s", t->index + 1, c->n_tensors, t->name);
        if ((int)t->index + 1 == c->n_tensors) fputc('\n', stderr);
    }
    c->t++; /* tensors are written in add order */
    return HX_OK;
}

typedef struct plan {
    tspec *t;
    int n, cap;
} plan;

static bool add(plan *p, const char *name, int64_t ne0, int64_t ne1, tkind kind, float sigma, float mean) {
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 64;
        tspec *nt = realloc(p->t, (size_t)cap * sizeof *nt);
        if (!nt) return false;
        p->t = nt;
        p->cap = cap;
    }
    tspec *t = &p->t[p->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ne0 = ne0; t->ne1 = ne1; t->kind = kind; t->sigma = sigma; t->mean = mean;
    t->index = (uint32_t)p->n++;
    return true;
}

/* The tensors of the recipe in model.c, with scales that keep activations
 * near unit RMS: projections into the residual stream are damped by
 * 1/sqrt(2 n_layer) so the stream grows slowly over depth. */
static bool build_plan(const hx_preset *ps, int L, int V, plan *p) {
    const int64_t E = ps->n_embd, H = ps->n_head, KV = ps->n_head_kv, D = ps->head_dim, F = ps->n_ff;
    const float in_e = 1.0f / sqrtf((float)E), damp = 1.0f / sqrtf(2.0f * (float)L);
    char n[64];
    bool ok = true;
    if (ps->arch == HX_ARCH_BERT) {
        ok &= add(p, "token_embd.weight", E, V, T_MATRIX, 0.05f, 0);
        ok &= add(p, "position_embd.weight", E, ps->n_ctx, T_MATRIX, 0.02f, 0);
        ok &= add(p, "token_types.weight", E, 2, T_MATRIX, 0.02f, 0);
        ok &= add(p, "token_embd_norm.weight", E, 1, T_NORM, 0.05f, 1);
        ok &= add(p, "token_embd_norm.bias", E, 1, T_BIAS, 0.02f, 0);
        for (int il = 0; il < L && ok; il++) {
#define A(suffix, a, b, k, s, m) do { snprintf(n, sizeof n, "blk.%d." suffix, il); ok &= add(p, n, a, b, k, s, m); } while (0)
            A("attn_q.weight", E, H * D, T_MATRIX, in_e, 0); A("attn_q.bias", H * D, 1, T_BIAS, 0.02f, 0);
            A("attn_k.weight", E, H * D, T_MATRIX, in_e, 0); A("attn_k.bias", H * D, 1, T_BIAS, 0.02f, 0);
            A("attn_v.weight", E, H * D, T_MATRIX, in_e, 0); A("attn_v.bias", H * D, 1, T_BIAS, 0.02f, 0);
            A("attn_output.weight", H * D, E, T_MATRIX, 1.0f / sqrtf((float)(H * D)), 0);
            A("attn_output.bias", E, 1, T_BIAS, 0.02f, 0);
            A("attn_output_norm.weight", E, 1, T_NORM, 0.05f, 1); A("attn_output_norm.bias", E, 1, T_BIAS, 0.02f, 0);
            A("ffn_up.weight", E, F, T_MATRIX, in_e, 0); A("ffn_up.bias", F, 1, T_BIAS, 0.02f, 0);
            A("ffn_down.weight", F, E, T_MATRIX, 1.0f / sqrtf((float)F), 0); A("ffn_down.bias", E, 1, T_BIAS, 0.02f, 0);
            A("layer_output_norm.weight", E, 1, T_NORM, 0.05f, 1); A("layer_output_norm.bias", E, 1, T_BIAS, 0.02f, 0);
        }
        return ok;
    }
    /* gemma scales embeddings by sqrt(E) at run time */
    ok &= add(p, "token_embd.weight", E, V, T_MATRIX, ps->arch == HX_ARCH_GEMMA3 ? in_e : 1.0f, 0);
    ok &= add(p, "output_norm.weight", E, 1, T_NORM, 0.05f, 1);
    if (!ps->tied) ok &= add(p, "output.weight", E, V, T_MATRIX, 2.0f * in_e, 0);
    for (int il = 0; il < L && ok; il++) {
        A("attn_norm.weight", E, 1, T_NORM, 0.05f, 1);
        A("attn_q.weight", E, H * D, T_MATRIX, in_e, 0);
        A("attn_k.weight", E, KV * D, T_MATRIX, in_e, 0);
        A("attn_v.weight", E, KV * D, T_MATRIX, in_e, 0);
        A("attn_output.weight", H * D, E, T_MATRIX, damp / sqrtf((float)(H * D)), 0);
        if (ps->arch == HX_ARCH_QWEN3 || ps->arch == HX_ARCH_GEMMA3) {
            A("attn_q_norm.weight", D, 1, T_NORM, 0.05f, 1);
            A("attn_k_norm.weight", D, 1, T_NORM, 0.05f, 1);
        }
        if (ps->arch == HX_ARCH_GEMMA3) A("post_attention_norm.weight", E, 1, T_NORM, 0.05f, 1);
        A("ffn_norm.weight", E, 1, T_NORM, 0.05f, 1);
        A("ffn_gate.weight", E, F, T_MATRIX, in_e, 0);
        A("ffn_up.weight", E, F, T_MATRIX, in_e, 0);
        A("ffn_down.weight", F, E, T_MATRIX, damp / sqrtf((float)F), 0);
        if (ps->arch == HX_ARCH_GEMMA3) A("post_ffw_norm.weight", E, 1, T_NORM, 0.05f, 1);
#undef A
    }
    return ok;
}

/* ---- tokenizers ---- */

/* GPT-2's byte -> unicode code point map: printable bytes map to themselves,
 * the rest to 256 + n in order. */
static int byte_to_cp(int b) {
    if ((b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) return b;
    int n = 0;
    for (int i = 0; i < b; i++)
        if (!((i >= 0x21 && i <= 0x7e) || (i >= 0xa1 && i <= 0xac) || (i >= 0xae && i <= 0xff))) n++;
    return 256 + n;
}

static int utf8_put(char *o, int cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
    return 3;
}

typedef struct vocab {
    char **tok;
    int32_t *type;   /* 1 normal, 2 unknown, 3 control, 6 byte */
    float *score;
    int n;
} vocab;

static void vocab_free(vocab *v) {
    if (v->tok) for (int i = 0; i < v->n; i++) free(v->tok[i]);
    free(v->tok); free(v->type); free(v->score);
    memset(v, 0, sizeof *v);
}

static bool vocab_alloc(vocab *v, int n) {
    v->n = n;
    v->tok = calloc((size_t)n, sizeof *v->tok);
    v->type = calloc((size_t)n, sizeof *v->type);
    v->score = calloc((size_t)n, sizeof *v->score);
    return v->tok && v->type && v->score;
}

/* Fill unset slots with "[PAD{id}]" (llama.cpp's converter does the same). */
static bool vocab_pad(vocab *v) {
    for (int i = 0; i < v->n; i++)
        if (!v->tok[i]) {
            char b[32];
            snprintf(b, sizeof b, "[PAD%d]", i);
            if (!(v->tok[i] = strdup(b))) return false;
            v->type[i] = 4; /* user-defined */
        }
    return true;
}

static hx_status write_vocab(hx_gguf_writer *w, const vocab *v) {
    hx_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tok, NULL, (uint64_t)v->n);
    hx_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", HX_GGUF_I32, v->type, (uint64_t)v->n);
    return hx_gguf_writer_set_arr(w, "tokenizer.ggml.scores", HX_GGUF_F32, v->score, (uint64_t)v->n);
}

/* A byte-level BPE vocabulary: the 256 byte tokens, a few merges, an
 * end-of-text control token, padding up to n. */
static hx_status synthetic_gpt2(hx_gguf_writer *w, const hx_preset *ps, int n, hx_error *e) {
    vocab v = {0};
    if (n < 300 || !vocab_alloc(&v, n)) { vocab_free(&v); return hx_err(e, HX_ERR_NOMEM, "synth: vocabulary of %d", n); }
    for (int b = 0; b < 256; b++) {
        char s[4];
        int k = utf8_put(s, byte_to_cp(b));
        v.tok[b] = strndup(s, (size_t)k);
        v.type[b] = 1;
    }
    const char *merged[] = {"\304\240t", "\304\240a", "he", "in"}; /* "Ġt", "Ġa", "he", "in" */
    const char *merges[] = {"\xc4\xa0 t", "\xc4\xa0 a", "h e", "i n"};
    for (int i = 0; i < 4; i++) { v.tok[256 + i] = strdup(merged[i]); v.type[256 + i] = 1; }
    v.tok[260] = strdup("<|endoftext|>");
    v.type[260] = 3;
    if (!vocab_pad(&v)) { vocab_free(&v); return hx_err(e, HX_ERR_NOMEM, "synth: out of memory"); }
    hx_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    hx_gguf_writer_set_str(w, "tokenizer.ggml.pre", ps->pre ? ps->pre : "default");
    write_vocab(w, &v);
    hx_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, NULL, 4);
    hx_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 260);
    hx_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 260);
    hx_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", false);
    vocab_free(&v);
    return HX_OK;
}

/* A WordPiece vocabulary in bert-base-uncased's layout of special ids. */
static hx_status synthetic_bert(hx_gguf_writer *w, int n, hx_error *e) {
    vocab v = {0};
    if (n < 400 || !vocab_alloc(&v, n)) { vocab_free(&v); return hx_err(e, HX_ERR_NOMEM, "synth: vocabulary of %d", n); }
    const char *special[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    const int sid[] = {0, 100, 101, 102, 103};
    for (int i = 0; i < 5; i++) { v.tok[sid[i]] = strdup(special[i]); v.type[sid[i]] = 3; }
    for (int i = 1; i < 100; i++) { char b[16]; snprintf(b, sizeof b, "[unused%d]", i - 1); v.tok[i] = strdup(b); v.type[i] = 3; }
    /* llama.cpp's bert layout: word-initial pieces carry U+2581, continuations
     * ("##x" in vocab.txt) are stored bare */
    int id = 104;
    for (int c = 0x21; c <= 0x7e; c++) { char b[5] = {'\xe2', '\x96', '\x81', (char)c, 0}; v.tok[id] = strdup(b); v.type[id++] = 1; }
    for (int c = 0x21; c <= 0x7e; c++) { char b[2] = {(char)c, 0}; v.tok[id] = strdup(b); v.type[id++] = 1; }
    if (!vocab_pad(&v)) { vocab_free(&v); return hx_err(e, HX_ERR_NOMEM, "synth: out of memory"); }
    hx_gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    hx_gguf_writer_set_str(w, "tokenizer.ggml.pre", "jina-v2-en");
    write_vocab(w, &v);
    hx_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 100);
    hx_gguf_writer_set_u32(w, "tokenizer.ggml.seperator_token_id", 102);
    hx_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", 0);
    hx_gguf_writer_set_u32(w, "tokenizer.ggml.cls_token_id", 101);
    hx_gguf_writer_set_u32(w, "tokenizer.ggml.mask_token_id", 103);
    hx_gguf_writer_set_u32(w, "tokenizer.ggml.token_type_count", 2); /* llama.cpp requires it for bert */
    vocab_free(&v);
    return HX_OK;
}

/* Tokenizer from a GGUF: tokens, scores and types padded to n; every other
 * tokenizer.* key copied as is. Returns the tokenizer's own count in *n_tok. */
static hx_status tokenizer_from_gguf(hx_gguf_writer *w, const char *path, int n, hx_error *e) {
    hx_gguf *g = NULL;
    hx_status st = hx_gguf_open(path, NULL, &g, e);
    if (st) return st;
    const hx_gguf_value *toks = hx_gguf_get_arr(g, "tokenizer.ggml.tokens", HX_GGUF_STRING);
    if (!toks || toks->arr.count == 0 || toks->arr.count > (uint64_t)n) {
        st = hx_err(e, HX_ERR_FORMAT, "%s: tokenizer.ggml.tokens missing or larger (%llu) than the model's vocabulary (%d)",
                    path, toks ? (unsigned long long)toks->arr.count : 0ull, n);
        hx_gguf_close(g);
        return st;
    }
    vocab v = {0};
    if (!vocab_alloc(&v, n)) { hx_gguf_close(g); return hx_err(e, HX_ERR_NOMEM, "synth: out of memory"); }
    const hx_gguf_value *types = hx_gguf_get_arr(g, "tokenizer.ggml.token_type", HX_GGUF_VTYPE_COUNT);
    const hx_gguf_value *scores = hx_gguf_get_arr(g, "tokenizer.ggml.scores", HX_GGUF_VTYPE_COUNT);
    for (uint64_t i = 0; i < toks->arr.count; i++) {
        v.tok[i] = strndup(toks->arr.elems[i].str.ptr, (size_t)toks->arr.elems[i].str.len);
        v.type[i] = types && i < types->arr.count ? (int32_t)hx_gguf_arr_i64(types, i) : 1;
        v.score[i] = scores && i < scores->arr.count ? (float)hx_gguf_arr_f64(scores, i) : 0.0f;
    }
    if (!vocab_pad(&v)) st = hx_err(e, HX_ERR_NOMEM, "synth: out of memory");
    for (uint64_t i = 0; !st && i < g->n_kv; i++) {
        const hx_gguf_kv *kv = &g->kv[i];
        if (kv->key.len < 10 || memcmp(kv->key.ptr, "tokenizer.", 10)) continue;
        if (hx_gguf_str_eq(kv->key, "tokenizer.ggml.tokens") || hx_gguf_str_eq(kv->key, "tokenizer.ggml.token_type") ||
            hx_gguf_str_eq(kv->key, "tokenizer.ggml.scores"))
            continue;
        hx_gguf_writer_copy_kv(w, kv);
    }
    if (!st) write_vocab(w, &v);
    vocab_free(&v);
    hx_gguf_close(g);
    return st;
}

/* Tokenizer from a Hugging Face tokenizer.json (byte-level BPE). */
static hx_status tokenizer_from_json(hx_gguf_writer *w, const char *path, const hx_preset *ps, int n, hx_error *e) {
    char *txt = NULL;
    size_t len;
    hx_status st = hx_read_file(path, &txt, &len, e);
    if (st) return st;
    cJSON *root = cJSON_ParseWithLength(txt, len);
    free(txt);
    if (!root) return hx_err(e, HX_ERR_FORMAT, "%s: not valid JSON", path);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *vmap = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(vmap) || !cJSON_IsArray(merges) || !cJSON_IsString(type) || strcmp(type->valuestring, "BPE")) {
        cJSON_Delete(root);
        return hx_err(e, HX_ERR_UNSUPPORTED, "%s: only BPE tokenizer.json files (model.vocab + model.merges) are supported", path);
    }
    vocab v = {0};
    if (!vocab_alloc(&v, n)) { cJSON_Delete(root); return hx_err(e, HX_ERR_NOMEM, "synth: out of memory"); }
    const cJSON *it;
    cJSON_ArrayForEach(it, vmap) {
        int id = it->valueint;
        if (!cJSON_IsNumber(it) || id < 0 || id >= n) {
            st = hx_err(e, HX_ERR_FORMAT, "%s: token '%s' has id %d outside the model's vocabulary (%d)", path, it->string, id, n);
            break;
        }
        free(v.tok[id]);
        v.tok[id] = strdup(it->string);
        v.type[id] = 1;
    }
    int bos = -1, eos = -1;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(root, "added_tokens")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id"), *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "special");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(c) || id->valueint < 0 || id->valueint >= n) continue;
        free(v.tok[id->valueint]);
        v.tok[id->valueint] = strdup(c->valuestring);
        v.type[id->valueint] = cJSON_IsTrue(sp) ? 3 : 4;
        if (!strcmp(c->valuestring, "<|begin_of_text|>")) bos = id->valueint;
        if (!strcmp(c->valuestring, "<|endoftext|>") || !strcmp(c->valuestring, "<|end_of_text|>")) eos = id->valueint;
    }
    int nm = cJSON_GetArraySize(merges);
    char **ms = calloc((size_t)(nm > 0 ? nm : 1), sizeof *ms);
    if (!ms && !st) st = hx_err(e, HX_ERR_NOMEM, "synth: out of memory");
    int k = 0;
    cJSON_ArrayForEach(it, merges) {
        if (!ms || st) break;
        if (cJSON_IsString(it)) ms[k++] = strdup(it->valuestring);
        else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2) {
            const char *a = cJSON_GetArrayItem(it, 0)->valuestring, *b = cJSON_GetArrayItem(it, 1)->valuestring;
            if (!a || !b) continue;
            size_t la = strlen(a), lb = strlen(b);
            char *m = malloc(la + lb + 2);
            if (!m) continue;
            memcpy(m, a, la); m[la] = ' '; memcpy(m + la + 1, b, lb + 1);
            ms[k++] = m;
        }
    }
    if (!st && !vocab_pad(&v)) st = hx_err(e, HX_ERR_NOMEM, "synth: out of memory");
    if (!st) {
        hx_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        hx_gguf_writer_set_str(w, "tokenizer.ggml.pre", ps->pre ? ps->pre : "default");
        write_vocab(w, &v);
        hx_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)ms, NULL, (uint64_t)k);
        if (bos >= 0) hx_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
        if (eos >= 0) hx_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
        hx_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", bos >= 0);
    }
    for (int i = 0; ms && i < k; i++) free(ms[i]);
    free(ms);
    vocab_free(&v);
    cJSON_Delete(root);
    return st;
}

/* ---- the file ---- */

static void set_arch_kv(hx_gguf_writer *w, const hx_preset *ps, int L) {
    const char *a = hx_arch_name(ps->arch);
    char k[96];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", a, suffix), k)
    hx_gguf_writer_set_str(w, "general.architecture", a);
    char name[96];
    snprintf(name, sizeof name, "helix synthetic %s", ps->name);
    hx_gguf_writer_set_str(w, "general.name", name);
    hx_gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)ps->n_ctx);
    hx_gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)ps->n_embd);
    hx_gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)L);
    hx_gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)ps->n_ff);
    hx_gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)ps->n_head);
    if (ps->arch == HX_ARCH_BERT) {
        hx_gguf_writer_set_f32(w, KEY("attention.layer_norm_epsilon"), ps->norm_eps);
        hx_gguf_writer_set_bool(w, KEY("attention.causal"), false);
        hx_gguf_writer_set_u32(w, KEY("pooling_type"), 1);
        return;
    }
    hx_gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)ps->n_head_kv);
    hx_gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)ps->head_dim);
    hx_gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)ps->head_dim);
    hx_gguf_writer_set_f32(w, KEY("rope.freq_base"), ps->rope_base);
    hx_gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), ps->norm_eps);
    if (ps->arch == HX_ARCH_LLAMA) hx_gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)ps->head_dim);
    if (ps->arch == HX_ARCH_GEMMA3) {
        hx_gguf_writer_set_u32(w, KEY("attention.sliding_window"), (uint32_t)ps->sliding_window);
        hx_gguf_writer_set_f32(w, KEY("rope.freq_base_swa"), ps->rope_base_swa);
    }
#undef KEY
}

hx_status hx_synth_write(const hx_synth_opts *o, const char *out_path, hx_error *e) {
    const hx_preset *ps = o->preset;
    if (!ps || o->mix >= HX_MIX_COUNT) return hx_err(e, HX_ERR_ARG, "synth: no preset or bad mix");
    int L = o->n_layer > 0 ? o->n_layer : ps->n_layer;
    if (L > HX_MAX_LAYERS) return hx_err(e, HX_ERR_ARG, "synth: at most %d layers", HX_MAX_LAYERS);
    int V = o->n_vocab > 0 && !o->tokenizer ? o->n_vocab : ps->n_vocab;
    hx_gguf_writer *w = hx_gguf_writer_new(32);
    plan p = {0};
    hx_pool *pool = NULL;
    float *scratch = NULL;
    if (!w) return hx_err(e, HX_ERR_NOMEM, "synth: out of memory");
    set_arch_kv(w, ps, L);
    hx_gguf_writer_set_u32(w, "general.quantization_version", 2);
    hx_gguf_writer_set_u32(w, "general.file_type", (uint32_t)k_file_type[o->mix]);
    hx_status st;
    if (o->tokenizer) {
        size_t n = strlen(o->tokenizer);
        st = n > 5 && !strcmp(o->tokenizer + n - 5, ".gguf") ? tokenizer_from_gguf(w, o->tokenizer, V, e)
                                                             : tokenizer_from_json(w, o->tokenizer, ps, V, e);
    } else {
        st = ps->arch == HX_ARCH_BERT ? synthetic_bert(w, V, e) : synthetic_gpt2(w, ps, V, e);
    }
    if (st) goto done;
    if (!build_plan(ps, L, V, &p)) { st = hx_err(e, HX_ERR_NOMEM, "synth: out of memory"); goto done; }
    int64_t max_ne0 = 0;
    for (int i = 0; i < p.n; i++) {
        tspec *t = &p.t[i];
        int il = -1;
        if (!strncmp(t->name, "blk.", 4)) il = atoi(t->name + 4);
        t->type = t->ne1 == 1 && t->kind != T_MATRIX ? HX_TYPE_F32
                : hx_mix_tensor_type(o->mix, t->name, t->ne0, il, L, ps->tied);
        if (t->ne0 > max_ne0) max_ne0 = t->ne0;
    }
    pool = hx_pool_create(o->n_threads);
    scratch = pool ? malloc((size_t)hx_pool_threads(pool) * (size_t)max_ne0 * sizeof(float)) : NULL;
    if (!pool || !scratch) { st = hx_err(e, HX_ERR_NOMEM, "synth: out of memory"); goto done; }
    synth_ctx ctx = {.seed = o->seed, .pool = pool, .t = p.t, .scratch = scratch, .progress = o->progress, .n_tensors = p.n};
    for (int i = 0; i < p.n; i++) {
        const tspec *t = &p.t[i];
        int64_t ne[2] = {t->ne0, t->ne1};
        hx_gguf_writer_add_tensor_cb(w, t->name, t->type, t->ne1 == 1 ? 1 : 2, ne, fill_tensor, &ctx);
    }
    st = hx_gguf_writer_write(w, out_path, e);
done:
    free(scratch);
    hx_pool_free(pool);
    free(p.t);
    hx_gguf_writer_free(w);
    return st;
}
