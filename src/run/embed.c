/* embed.c — hx_embed(): texts -> unit vectors with a BERT encoder.
 * Texts are tokenized (a thread ahead of the encoder), grouped by length, and
 * run in batches of similar length (no padding: see bert.h), then put back in
 * the caller's order; the pipeline is described above hx_embed. */
#include "backend/cpu/bert.h"
#include "core/core.h"
#include "core/pool.h"
#include "model/model.h"
#include "quant/quant.h"
#include "tok/tok.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>

#define BATCH_TOKENS 8192 /* tokens per forward on the CPU: bounds activation memory */
#ifdef HX_HAVE_CUDA
#define HX_EMBED_SLOTS HX_CUDA_BERT_SLOTS /* GPU batches in flight */
#else
#define HX_EMBED_SLOTS 1
#endif

struct hx_embedder {
    hx_model *model;
    hx_tok *tok;
    hx_pool *pool;
    int max_tokens;
    int max_seqs;   /* 0 = by the token budget only */
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

/* ---- hx_embed: the pipeline ----
 * The texts are taken in order of byte length (known before tokenizing, a close
 * proxy for the token count; counting sort, O(n)) and cut into chunks. A
 * producer thread tokenizes chunk c + 1 while the encoder runs chunk c's
 * batches (two chunk buffers); on the GPU the producer uses the CPU pool, on
 * the CPU it tokenizes alone, as the encoder has the pool. Each chunk's texts
 * are sorted by token count and cut into batches filled to the token budget
 * (and to max_seqs). On the GPU, HX_CUDA_BERT_SLOTS batches are in flight at
 * once (pinned staging, asynchronous copies; the host waits only for the
 * oldest batch, when its slot is needed again). Rows land at the caller's
 * index. The CPU encoder gives every sequence the same bits whatever batch it
 * is in, so the result does not depend on the chunking or batching there. */

#define BATCH_TOKENS_GPU 32768 /* tokens per forward on the GPU: fewer launches; ~0.5 GB of activations for MiniLM */
#define CHUNK_FIRST 256        /* texts in the first chunk: the encoder starts early */
#define CHUNK_MAX 8192         /* texts per chunk after doubling */
#define LEN_CAP 4096           /* byte lengths from here on sort together (all cut to max_tokens) */
enum { TOK_TASK = 8 };         /* texts per tokenization task */

typedef struct chunk {
    int n;          /* texts */
    int *index;     /* [n] the caller's index of text k */
    int *len;       /* [n] its token count (-1: tokenizing failed) */
    int *perm;      /* [n] k by token count (stable) */
    int32_t *ids;   /* [n * M] text k's tokens at k * M */
} chunk;

typedef struct tok_pipe {
    const hx_tok *tok;
    const char *const *texts;
    const int *order;     /* [n] the texts by byte length */
    const int *bounds;    /* [n_chunks + 1] chunk c = order[bounds[c] .. bounds[c + 1]) */
    int n_chunks, M;
    hx_pool *pool;        /* tokenization's pool; NULL = one thread */
    chunk buf[2];         /* chunk c in buf[c % 2] */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready;            /* chunks tokenized */
    int released;         /* chunks the encoder is done with */
    bool stop;            /* the encoder failed: the producer stops */
} tok_pipe;

typedef struct tok_job { const tok_pipe *p; chunk *ch; } tok_job;

static void tok_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    tok_job *j = ctx;
    chunk *ch = j->ch;
    const int M = j->p->M;
    int k1 = (int)(task + 1) * TOK_TASK < ch->n ? (int)(task + 1) * TOK_TASK : ch->n;
    for (int k = (int)task * TOK_TASK; k < k1; k++) {
        const char *t = j->p->texts[ch->index[k]] ? j->p->texts[ch->index[k]] : "";
        int32_t *tid = NULL;
        size_t nt = 0;
        if (hx_tok_encode(j->p->tok, t, strlen(t), true, false, &tid, &nt, NULL)) { ch->len[k] = -1; continue; }
        nt = hx_tok_truncate(j->p->tok, tid, nt, (size_t)M); /* keeps the closing [SEP] */
        memcpy(ch->ids + (size_t)k * M, tid, nt * sizeof *tid);
        ch->len[k] = (int)nt;
        free(tid);
    }
}

/* Tokenize chunk c into buf[c % 2] and order it by token count (counting sort, stable); false when a
 * text could not be tokenized (out of memory). */
static bool tokenize_chunk(tok_pipe *p, int c) {
    chunk *ch = &p->buf[c % 2];
    ch->n = p->bounds[c + 1] - p->bounds[c];
    memcpy(ch->index, p->order + p->bounds[c], (size_t)ch->n * sizeof *ch->index);
    tok_job j = {p, ch};
    hx_pool_run(p->pool, (ch->n + TOK_TASK - 1) / TOK_TASK, tok_task, &j);
    int *count = calloc((size_t)p->M + 2, sizeof *count); /* token counts are 0..M */
    if (!count) return false;
    for (int k = 0; k < ch->n; k++) {
        if (ch->len[k] < 0) { free(count); return false; }
        count[ch->len[k] + 1]++;
    }
    for (int l = 0; l <= p->M; l++) count[l + 1] += count[l];
    for (int k = 0; k < ch->n; k++) ch->perm[count[ch->len[k]]++] = k;
    free(count);
    return true;
}

static void *producer(void *arg) {
    tok_pipe *p = arg;
    for (int c = 0; c < p->n_chunks; c++) {
        pthread_mutex_lock(&p->mu);
        while (!p->stop && c - p->released >= 2) pthread_cond_wait(&p->cv, &p->mu);
        bool stop = p->stop;
        pthread_mutex_unlock(&p->mu);
        if (stop) break;
        bool ok = tokenize_chunk(p, c);
        pthread_mutex_lock(&p->mu);
        if (ok) p->ready = c + 1;
        else p->stop = true;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        if (!ok) break;
    }
    return NULL;
}

/* The batches in flight: on the GPU one per slot, finished in the order submitted; on the CPU each
 * batch is encoded and put in place at once. */
typedef struct runner {
    hx_embedder *em;
    float *out;
    int E;
    hx_pooling pooling;
    float *vec;            /* CPU: [batch seqs * E] */
    int *idx[HX_EMBED_SLOTS]; /* per slot: the caller's index of each row */
    int n_in[HX_EMBED_SLOTS]; /* rows in flight per slot, 0 = free */
    int next;              /* the slot the next batch takes */
} runner;

#ifdef HX_HAVE_CUDA
static hx_status finish_slot(runner *r, int s, hx_error *e) {
    if (!r->n_in[s]) return HX_OK;
    const float *rows = NULL;
    hx_status st = hx_cuda_bert_wait(r->em->gpu, s, &rows, e);
    if (!st)
        for (int k = 0; k < r->n_in[s]; k++)
            memcpy(r->out + (size_t)r->idx[s][k] * r->E, rows + (size_t)k * r->E, (size_t)r->E * sizeof *r->out);
    r->n_in[s] = 0;
    return st;
}
#endif

/* One batch: ids (concatenated), lens and the caller's indices of its nb texts. */
static hx_status run_batch(runner *r, const int32_t *ids, const int *lens, const int *index, int nb, hx_error *e) {
    hx_status st;
#ifdef HX_HAVE_CUDA
    if (r->em->gpu) {
        int s = r->next;
        if ((st = finish_slot(r, s, e))) return st;
        if ((st = hx_cuda_bert_submit(r->em->gpu, s, ids, lens, nb, r->pooling, true, e))) return st;
        memcpy(r->idx[s], index, (size_t)nb * sizeof *index);
        r->n_in[s] = nb;
        r->next = (s + 1) % HX_EMBED_SLOTS;
        return HX_OK;
    }
#endif
    if ((st = hx_bert_encode_prep(r->em->model, r->em->cpu, r->em->pool, ids, lens, nb, r->pooling, true, r->vec, e)))
        return st;
    for (int k = 0; k < nb; k++)
        memcpy(r->out + (size_t)index[k] * r->E, r->vec + (size_t)k * r->E, (size_t)r->E * sizeof *r->out);
    return HX_OK;
}

/* Drain every slot, oldest first; the first error wins. */
static hx_status drain(runner *r, hx_status st, hx_error *e) {
#ifdef HX_HAVE_CUDA
    hx_error e2 = {0};
    for (int k = 0; k < HX_EMBED_SLOTS; k++) {
        int s = (r->next + k) % HX_EMBED_SLOTS;
        hx_status s2 = finish_slot(r, s, st ? &e2 : e);
        if (!st) st = s2;
    }
#else
    (void)r; (void)e;
#endif
    return st;
}

/* Chunk c's batches: by token count, filled to `budget` tokens and max_seqs texts. */
static hx_status run_chunk(runner *r, const chunk *ch, int M, int budget, int max_seqs, int32_t *batch_ids,
                           int *lens, int *index, hx_error *e) {
    for (int b = 0; b < ch->n;) {
        int nb = 0, tok = 0;
        while (b + nb < ch->n && (max_seqs <= 0 || nb < max_seqs)) {
            int k = ch->perm[b + nb], l = ch->len[k];
            if (nb > 0 && tok + l > budget) break;
            memcpy(batch_ids + tok, ch->ids + (size_t)k * M, (size_t)l * sizeof *batch_ids);
            lens[nb] = l;
            index[nb] = ch->index[k];
            tok += l;
            nb++;
        }
        hx_status st = run_batch(r, batch_ids, lens, index, nb, e);
        if (st) return st;
        b += nb;
    }
    return HX_OK;
}

/* Texts in chunk c (of `left` still to come): CHUNK_FIRST doubling to CHUNK_MAX, rounded to a multiple of
 * max_seqs where that fits, so that only a chunk's last batch can be short. */
static int chunk_size(int c, int max_seqs, int left) {
    int sz = c < 6 && (CHUNK_FIRST << c) < CHUNK_MAX ? CHUNK_FIRST << c : CHUNK_MAX;
    if (max_seqs > 0 && max_seqs <= CHUNK_MAX) {
        sz = (sz + max_seqs - 1) / max_seqs * max_seqs;
        if (sz > CHUNK_MAX) sz = CHUNK_MAX / max_seqs * max_seqs;
    }
    return sz < left ? sz : left;
}

hx_status hx_embed(hx_embedder *em, const char *const *texts, int n, float *out, hx_error *e) {
    if (n <= 0) return HX_OK;
    const int E = em->model->cfg.n_embd, M = em->max_tokens;
    const bool gpu = em->gpu != NULL;
    const int budget = gpu ? BATCH_TOKENS_GPU : BATCH_TOKENS;
    /* chunks: CHUNK_FIRST texts, doubling to CHUNK_MAX, each a multiple of max_seqs where that fits */
    int n_chunks = 0, cmax = 0;
    for (int at = 0; at < n; n_chunks++) {
        int sz = chunk_size(n_chunks, em->max_seqs, n - at);
        cmax = sz > cmax ? sz : cmax;
        at += sz;
    }
    int *order = malloc((size_t)n * sizeof *order), *bounds = malloc(((size_t)n_chunks + 1) * sizeof *bounds);
    int *count = calloc(LEN_CAP + 2, sizeof *count);
    int bmax = cmax; /* texts per batch: batches stay inside a chunk */
    int32_t *batch_ids = malloc(((size_t)budget + (size_t)M) * sizeof *batch_ids);
    int *lens = malloc((size_t)bmax * sizeof *lens), *index = malloc((size_t)bmax * sizeof *index);
    runner r = {.em = em, .out = out, .E = E,
                .pooling = em->model->cfg.pooling == HX_POOL_CLS ? HX_POOL_CLS : HX_POOL_MEAN};
    /* the model's own pooling (GGUF bert.pooling_type, or sentence-transformers' 1_Pooling):
     * CLS when it says so, else mean (one vector per text either way) */
    tok_pipe p = {.tok = em->tok, .texts = texts, .order = order, .bounds = bounds, .n_chunks = n_chunks, .M = M};
    bool bufs = true;
    for (int i = 0; i < 2 && i < n_chunks; i++) {
        chunk *ch = &p.buf[i];
        ch->index = malloc((size_t)cmax * sizeof(int));
        ch->len = malloc((size_t)cmax * sizeof(int));
        ch->perm = malloc((size_t)cmax * sizeof(int));
        ch->ids = malloc((size_t)cmax * (size_t)M * sizeof(int32_t));
        bufs = bufs && ch->index && ch->len && ch->perm && ch->ids;
    }
    bool slots = true;
#ifdef HX_HAVE_CUDA
    for (int s = 0; gpu && s < HX_EMBED_SLOTS; s++) slots = slots && (r.idx[s] = malloc((size_t)bmax * sizeof(int)));
#endif
    if (!gpu) slots = (r.vec = malloc((size_t)bmax * (size_t)E * sizeof *r.vec)) != NULL;
    hx_status st = HX_OK;
    if (!order || !bounds || !count || !batch_ids || !lens || !index || !bufs || !slots) {
        st = hx_err(e, HX_ERR_NOMEM, "embed: out of memory for %d texts", n);
        goto done;
    }
    /* by byte length (stable): counting sort */
    for (int i = 0; i < n; i++) {
        size_t l = texts[i] ? strlen(texts[i]) : 0;
        count[(l < LEN_CAP ? l : LEN_CAP) + 1]++;
    }
    for (int l = 0; l <= LEN_CAP; l++) count[l + 1] += count[l];
    for (int i = 0; i < n; i++) {
        size_t l = texts[i] ? strlen(texts[i]) : 0;
        order[count[l < LEN_CAP ? l : LEN_CAP]++] = i;
    }
    bounds[0] = 0;
    for (int c = 0; c < n_chunks; c++) bounds[c + 1] = bounds[c] + chunk_size(c, em->max_seqs, n - bounds[c]);
    if (n_chunks == 1) { /* nothing to overlap: tokenize on the pool, then encode */
        p.pool = em->pool;
        if (!tokenize_chunk(&p, 0)) { st = hx_err(e, HX_ERR_NOMEM, "embed: out of memory tokenizing"); goto done; }
        st = run_chunk(&r, &p.buf[0], M, budget, em->max_seqs, batch_ids, lens, index, e);
        st = drain(&r, st, e);
        goto done;
    }
    p.pool = gpu ? em->pool : NULL;
    pthread_t th;
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    if (pthread_create(&th, NULL, producer, &p)) {
        st = hx_err(e, HX_ERR_NOMEM, "embed: cannot start the tokenizer thread");
        goto cleanup;
    }
    for (int c = 0; c < n_chunks && !st; c++) {
        pthread_mutex_lock(&p.mu);
        while (p.ready <= c && !p.stop) pthread_cond_wait(&p.cv, &p.mu);
        bool have = p.ready > c;
        pthread_mutex_unlock(&p.mu);
        if (!have) { st = hx_err(e, HX_ERR_NOMEM, "embed: out of memory tokenizing"); break; }
        st = run_chunk(&r, &p.buf[c % 2], M, budget, em->max_seqs, batch_ids, lens, index, e);
        /* the chunk's tokens are copied out (CPU: encoded; GPU: staged by submit): its buffer is free */
        pthread_mutex_lock(&p.mu);
        p.released = c + 1;
        if (st) p.stop = true;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
    }
    st = drain(&r, st, e);
    pthread_mutex_lock(&p.mu);
    p.stop = true;
    pthread_cond_broadcast(&p.cv);
    pthread_mutex_unlock(&p.mu);
    pthread_join(th, NULL);
cleanup:
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
done:
    for (int i = 0; i < 2; i++) { free(p.buf[i].index); free(p.buf[i].len); free(p.buf[i].perm); free(p.buf[i].ids); }
    for (int s = 0; s < HX_EMBED_SLOTS; s++) free(r.idx[s]);
    free(r.vec); free(order); free(bounds); free(count); free(batch_ids); free(lens); free(index);
    return st;
}
