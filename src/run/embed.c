/* embed.c — hx_embed(): texts -> unit vectors with a BERT encoder.
 * Texts are tokenized, sorted by length, and run in batches of similar length
 * (no padding: see bert.h), then put back in the caller's order. */
#include "backend/cpu/bert.h"
#include "core/core.h"
#include "core/pool.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tok/tok.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

#include <stdlib.h>
#include <sys/stat.h>

#define BATCH_TOKENS 8192 /* tokens per forward: bounds activation memory */

struct hx_embedder {
    hx_model *model;
    hx_tok *tok;
    hx_pool *pool;
    int max_tokens;
    int max_seqs;   /* 0 = by BATCH_TOKENS only */
    void *gpu;      /* hx_cuda_bert when running on CUDA */
    hx_bert_cpu *cpu; /* the weights prepared for the CPU GEMM (f32 or int8); NULL = the per-row dot path */
    hx_bert_type type;
    char base_fp[240];  /* the model's fingerprint; fingerprint adds the type */
    char fingerprint[256];
};

hx_status hx_embedder_open(const char *path, int n_threads, hx_embedder **out, hx_error *e) {
    *out = NULL;
    hx_embedder *em = calloc(1, sizeof *em);
    if (!em) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    hx_status st = hx_model_load_any(path, &em->model, e);
    if (st) { free(em); return st; }
    if (em->model->cfg.arch != HX_ARCH_BERT) {
        st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: architecture %s is not a BERT encoder", path, em->model->cfg.arch_name);
        hx_embedder_free(em);
        return st;
    }
    if (em->model->gguf) {
        st = hx_tok_load_gguf(path, &em->tok, e);
    } else {
        char vocab[1100];
        snprintf(vocab, sizeof vocab, "%s/vocab.txt", path);
        st = hx_tok_load_vocab_txt(vocab, &em->tok, e);
    }
    if (st) { hx_embedder_free(em); return st; }
    if (hx_tok_kind_of(em->tok) != HX_TOK_WPM || hx_tok_n_vocab(em->tok) != em->model->cfg.n_vocab) {
        st = hx_err(e, HX_ERR_FORMAT, "%s: tokenizer is not WordPiece or has %d tokens for a model of %d", path,
                    hx_tok_n_vocab(em->tok), em->model->cfg.n_vocab);
        hx_embedder_free(em);
        return st;
    }
    if ((st = hx_bert_cpu_new(em->model, &em->cpu, e))) { hx_embedder_free(em); return st; }
    em->pool = hx_pool_create(n_threads);
    if (!em->pool) { hx_embedder_free(em); return hx_err(e, HX_ERR_NOMEM, "out of memory"); }
    em->max_tokens = em->model->cfg.n_ctx_train < 256 ? em->model->cfg.n_ctx_train : 256;
    /* fingerprint: file name, size and mtime, plus the shape */
    struct stat sb;
    const char *base = strrchr(path, '/');
    char probe[1100];
    snprintf(probe, sizeof probe, "%s%s", path, em->model->gguf ? "" : "/model.safetensors");
    long long size = stat(probe, &sb) == 0 ? (long long)sb.st_size : -1, mtime = size >= 0 ? (long long)sb.st_mtime : 0;
    snprintf(em->base_fp, sizeof em->base_fp, "bert:%s:%lld:%lld:%dx%d", base ? base + 1 : path, size, mtime,
             em->model->cfg.n_layer, em->model->cfg.n_embd);
    snprintf(em->fingerprint, sizeof em->fingerprint, "%s", em->base_fp);
    *out = em;
    return HX_OK;
}

void hx_embedder_free(hx_embedder *em) {
    if (!em) return;
#ifdef HX_HAVE_CUDA
    hx_cuda_bert_free(em->gpu);
#endif
    hx_bert_cpu_free(em->cpu);
    hx_model_free(em->model);
    hx_tok_free(em->tok);
    hx_pool_free(em->pool);
    free(em);
}

int hx_embedder_dim(const hx_embedder *em) { return em->model->cfg.n_embd; }
const char *hx_embedder_fingerprint(const hx_embedder *em) { return em->fingerprint; }
void hx_embedder_set_max_tokens(hx_embedder *em, int max_tokens) {
    if (max_tokens >= 2 && max_tokens <= em->model->cfg.n_ctx_train) em->max_tokens = max_tokens;
}

void hx_embedder_set_batch(hx_embedder *em, int max_seqs) { em->max_seqs = max_seqs > 0 ? max_seqs : 0; }

hx_status hx_embedder_set_device(hx_embedder *em, const char *device, hx_error *e) {
    bool want = !strcmp(device, "cuda"), maybe = !strcmp(device, "auto");
    int index = -1; /* "cuda:N": that device (one per MPI rank); plain "cuda": device 0 */
    if (!strncmp(device, "cuda:", 5)) {
        char *end;
        long v = strtol(device + 5, &end, 10);
        if (end == device + 5 || *end || v < 0 || v > 1023)
            return hx_err(e, HX_ERR_ARG, "embed: device '%s' (cuda:N takes a device number)", device);
        want = true;
        index = (int)v;
    }
    if (!want && !maybe && strcmp(device, "cpu"))
        return hx_err(e, HX_ERR_ARG, "embed: device '%s' (cpu, cuda, cuda:N or auto)", device);
#ifdef HX_HAVE_CUDA
    hx_cuda_bert_free(em->gpu);
    em->gpu = NULL;
    if (!want && !maybe) return HX_OK;
    hx_cuda_bert *b = NULL;
    hx_error e2 = {0};
    hx_status st = hx_cuda_bert_new(em->model, index, &b, want ? e : &e2);
    if (st && want) return st;
    em->gpu = b;
    return HX_OK;
#else
    (void)em; (void)index;
    if (want) return hx_err(e, HX_ERR_DEVICE, "embed: this build has no CUDA backend");
    return HX_OK;
#endif
}

const char *hx_embedder_device(const hx_embedder *em) { return em->gpu ? "cuda" : "cpu"; }

hx_status hx_embedder_set_type(hx_embedder *em, const char *type, hx_error *e) {
    hx_bert_type t;
    if (!strcmp(type, "f32")) t = HX_BERT_F32;
    else if (!strcmp(type, "int8")) t = HX_BERT_INT8;
    else if (!strcmp(type, "auto")) t = hx_isa_current() >= HX_ISA_AVX512_VNNI ? HX_BERT_INT8 : HX_BERT_F32;
    else return hx_err(e, HX_ERR_ARG, "embed: type '%s' (f32, int8 or auto)", type);
    if (t == em->type) return HX_OK;
    hx_bert_cpu *b = NULL;
    hx_status st = hx_bert_cpu_new_type(em->model, t, &b, e);
    if (st) return st;
    hx_bert_cpu_free(em->cpu);
    em->cpu = b;
    em->type = b ? t : HX_BERT_F32; /* no prepared weights (a huge model): the f32 per-row path */
    snprintf(em->fingerprint, sizeof em->fingerprint, "%s%s", em->base_fp, t == HX_BERT_INT8 ? ":int8" : "");
    return HX_OK;
}

const char *hx_embedder_type(const hx_embedder *em) { return em->type == HX_BERT_INT8 ? "int8" : "f32"; }

typedef struct item { int index, len; int32_t *ids; } item;

static int by_len(const void *a, const void *b) {
    const item *x = a, *y = b;
    return x->len != y->len ? x->len - y->len : x->index - y->index;
}

hx_status hx_embed(hx_embedder *em, const char *const *texts, int n, float *out, hx_error *e) {
    if (n <= 0) return HX_OK;
    const int E = em->model->cfg.n_embd, M = em->max_tokens;
    item *it = calloc((size_t)n, sizeof *it);
    int32_t *ids = malloc((size_t)n * (size_t)M * sizeof *ids);
    int32_t *batch_ids = malloc((size_t)BATCH_TOKENS * sizeof *batch_ids + (size_t)M * sizeof *batch_ids);
    int *lens = malloc((size_t)n * sizeof *lens);
    float *vec = malloc((size_t)n * (size_t)E * sizeof *vec);
    hx_status st = HX_OK;
    if (!it || !ids || !batch_ids || !lens || !vec) { st = hx_err(e, HX_ERR_NOMEM, "embed: out of memory for %d texts", n); goto done; }
    for (int i = 0; i < n; i++) {
        it[i].index = i;
        it[i].ids = ids + (size_t)i * M;
        const char *t = texts[i] ? texts[i] : "";
        int32_t *tid = NULL;
        size_t nt = 0;
        if ((st = hx_tok_encode(em->tok, t, strlen(t), true, false, &tid, &nt, e))) goto done;
        nt = hx_tok_truncate(em->tok, tid, nt, (size_t)M); /* keeps the closing [SEP] */
        memcpy(it[i].ids, tid, nt * sizeof *tid);
        it[i].len = (int)nt;
        free(tid);
    }
    qsort(it, (size_t)n, sizeof *it, by_len);
    for (int b = 0; b < n;) {
        int nb = 0, tok = 0;
        while (b + nb < n && (nb == 0 || tok + it[b + nb].len <= BATCH_TOKENS) && (!em->max_seqs || nb < em->max_seqs)) {
            memcpy(batch_ids + tok, it[b + nb].ids, (size_t)it[b + nb].len * sizeof *batch_ids);
            lens[nb] = it[b + nb].len;
            tok += it[b + nb].len;
            nb++;
        }
        /* the model's own pooling (GGUF bert.pooling_type, or sentence-transformers' 1_Pooling):
         * CLS when it says so, else mean (one vector per text either way) */
        hx_pooling pool = em->model->cfg.pooling == HX_POOL_CLS ? HX_POOL_CLS : HX_POOL_MEAN;
#ifdef HX_HAVE_CUDA
        if (em->gpu) st = hx_cuda_bert_encode(em->gpu, batch_ids, lens, nb, pool, true, vec, e);
        else
#endif
        st = hx_bert_encode_prep(em->model, em->cpu, em->pool, batch_ids, lens, nb, pool, true, vec, e);
        if (st) goto done;
        for (int k = 0; k < nb; k++) memcpy(out + (size_t)it[b + k].index * E, vec + (size_t)k * E, (size_t)E * sizeof *out);
        b += nb;
    }
done:
    free(it); free(ids); free(batch_ids); free(lens); free(vec);
    return st;
}
