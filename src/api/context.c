/* context.c — hx_context: a KV cache of n_seq_max sequences behind a
 * backend's function table (backend.h), as fixed slots or as a shared pool of
 * pages. Every argument is checked here before a backend runs anything;
 * batches run in ubatches of at most n_ubatch tokens; each sequence's length,
 * token ids and pages are kept here (the backend only maps page ids to rows). */
#include "api/api.h"
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Positions per KV page. A power of two (the CPU finds a row by shift and
 * mask); 16, as vLLM's default block: at most 15 positions wasted a sequence,
 * so many short requests waste little of the pool, while the CPU's cost of a
 * page is one table load per row whatever its size. Ggml's tiled CPU
 * attention copies (64 rows) are made by position, so they need no alignment
 * to pages. */
#define KV_PAGE 16

hx_context_params hx_context_default_params(void) {
    return (hx_context_params){.n_ctx = 0, .n_seq_max = 1, .n_batch = 2048, .n_ubatch = 512};
}

void hx_context_free(hx_context *c) {
    if (!c) return;
    if (c->logits && c->bctx && c->be->host_free) c->be->host_free(c->bctx, c->logits);
    else free(c->logits);
    free(c->fetched);
    if (c->bctx) c->be->ctx_free(c->bctx);
    hx_api_drop_adapters(c);
    free(c->kv_rows); free(c->seq_len); free(c->seq_tok);
    free(c->free_pg); free(c->seq_pg); free(c->seq_npg);
    free(c->hidden); free(c->row_of);
    free(c->ub_out); free(c->first_pos); free(c->next_pos); free(c->orig_len);
    free(c);
}

hx_status hx_context_new(hx_model *m, const hx_context_params *p, hx_context **out, hx_error *e) {
    if (!out) return hx_err(e, HX_ERR_ARG, "hx_context_new: out is NULL");
    *out = NULL;
    if (!m || !m->api) return hx_err(e, HX_ERR_ARG, "hx_context_new: the model is NULL or not opened by hx_model_open");
    if (m->cfg.arch == HX_ARCH_BERT)
        return hx_err(e, HX_ERR_ARG, "hx_context_new: %s is an encoder (bert): use hx_embedder", m->cfg.name);
    hx_context_params cp = p ? *p : hx_context_default_params();
    if (cp.n_seq_max < 1 || cp.n_seq_max > 4096)
        return hx_err(e, HX_ERR_ARG, "hx_context_new: n_seq_max %d (1..4096)", cp.n_seq_max);
    if (cp.n_batch < 1) return hx_err(e, HX_ERR_ARG, "hx_context_new: n_batch %d (>= 1)", cp.n_batch);
    if (cp.n_ubatch < 1) return hx_err(e, HX_ERR_ARG, "hx_context_new: n_ubatch %d (>= 1)", cp.n_ubatch);
    if (cp.n_ubatch > cp.n_batch) cp.n_ubatch = cp.n_batch;
    if (cp.n_threads < 0) return hx_err(e, HX_ERR_ARG, "hx_context_new: n_threads %d (0: all CPUs)", cp.n_threads);
    if (cp.n_ctx < 0) return hx_err(e, HX_ERR_ARG, "hx_context_new: n_ctx %d (0: the default)", cp.n_ctx);
    int train = m->cfg.n_ctx_train > 0 ? m->cfg.n_ctx_train : 4096;
    if (cp.n_ctx == 0) {
        int64_t n = (int64_t)cp.n_seq_max * (train < 4096 ? train : 4096);
        if (n > INT32_MAX) return hx_err(e, HX_ERR_ARG, "hx_context_new: n_seq_max %d: the default n_ctx overflows", cp.n_seq_max);
        cp.n_ctx = (int)n;
    }
    if (cp.n_ctx < cp.n_seq_max)
        return hx_err(e, HX_ERR_ARG, "hx_context_new: n_ctx %d is less than one position per sequence (n_seq_max %d)",
                      cp.n_ctx, cp.n_seq_max);
    if (cp.n_ctx_seq < 0) return hx_err(e, HX_ERR_ARG, "hx_context_new: n_ctx_seq %d (0: the default)", cp.n_ctx_seq);
    const hx_backend *be = m->api->layer_split > 1 ? &hx_backend_pipe_cpu : &hx_backend_cpu;
    if (m->api->device == HX_DEVICE_CUDA) {
#ifdef HX_HAVE_CUDA
        be = m->api->tp > 1 ? &hx_backend_cuda_tp : m->api->layer_split > 1 ? &hx_backend_pipe_cuda : &hx_backend_cuda;
        if (cp.kv_f32) return hx_err(e, HX_ERR_UNSUPPORTED, "hx_context_new: the CUDA KV cache is f16 (kv_f32 is CPU only)");
#else
        return hx_err(e, HX_ERR_UNSUPPORTED, "hx_context_new: this build has no CUDA backend");
#endif
    }
    /* pages where the backend maps them and there is more than one sequence
     * (one sequence in a pool of its own size is a slot). The pool holds at
     * least what the slots would: n_seq_max sequences of n_ctx / n_seq_max
     * positions each fit, whatever the rounding to pages. */
    int page = be->kv_map && cp.n_seq_max > 1 && !cp.kv_slots ? KV_PAGE : 0, n_pages = 0, n_ctx_seq;
    if (page) {
        int64_t by_pool = ((int64_t)cp.n_ctx + page - 1) / page;
        int64_t by_slots = (int64_t)cp.n_seq_max * ((cp.n_ctx / cp.n_seq_max + page - 1) / page);
        int64_t np = by_pool > by_slots ? by_pool : by_slots;
        if (np * page > INT32_MAX) return hx_err(e, HX_ERR_ARG, "hx_context_new: n_ctx %d: the pool overflows", cp.n_ctx);
        n_pages = (int)np;
        int pool = n_pages * page;
        n_ctx_seq = cp.n_ctx_seq ? cp.n_ctx_seq : cp.n_ctx < train ? cp.n_ctx : train;
        if (n_ctx_seq > pool)
            return hx_err(e, HX_ERR_ARG, "hx_context_new: n_ctx_seq %d exceeds the pool of %d positions (n_ctx %d)",
                          n_ctx_seq, pool, cp.n_ctx);
        cp.n_ctx = pool;
    } else {
        n_ctx_seq = cp.n_ctx / cp.n_seq_max;
        cp.n_ctx = n_ctx_seq * cp.n_seq_max;
    }
    if (n_ctx_seq > train) HX_WARN("n_ctx per sequence %d exceeds the model's training context %d", n_ctx_seq, train);
    hx_context *c = calloc(1, sizeof *c);
    if (!c) return hx_err(e, HX_ERR_NOMEM, "hx_context_new: out of memory");
    c->m = m; c->be = be; c->p = cp;
    c->n_seq = cp.n_seq_max; c->n_ctx_seq = n_ctx_seq;
    c->page = page; c->n_pages = n_pages;
    c->max_pg = page ? (n_ctx_seq + page - 1) / page : 0;
    c->n_vocab = m->cfg.n_vocab; c->n_embd = m->cfg.n_embd;
    c->last_row = -1;
    size_t ns = (size_t)c->n_seq;
    c->kv_rows = calloc((size_t)m->cfg.n_layer, sizeof *c->kv_rows);
    c->seq_len = calloc(ns, sizeof *c->seq_len);
    c->seq_tok = calloc(ns * (size_t)n_ctx_seq, sizeof *c->seq_tok);
    c->row_of = calloc((size_t)cp.n_batch, sizeof *c->row_of);
    c->ub_out = calloc((size_t)cp.n_ubatch, sizeof *c->ub_out);
    c->first_pos = calloc(ns, sizeof *c->first_pos);
    c->next_pos = calloc(ns, sizeof *c->next_pos);
    c->orig_len = calloc(ns, sizeof *c->orig_len);
    if (page) {
        c->free_pg = malloc((size_t)n_pages * sizeof *c->free_pg);
        c->seq_pg = malloc(ns * (size_t)c->max_pg * sizeof *c->seq_pg);
        c->seq_npg = calloc(ns, sizeof *c->seq_npg);
        if (c->free_pg) /* page 0 on top: a fresh context fills the pool from its start */
            for (int q = 0; q < n_pages; q++) c->free_pg[q] = n_pages - 1 - q;
        c->n_free = n_pages;
    }
    if (!c->kv_rows || !c->seq_len || !c->seq_tok || !c->row_of || !c->ub_out || !c->first_pos || !c->next_pos ||
        !c->orig_len || (page && (!c->free_pg || !c->seq_pg || !c->seq_npg))) {
        hx_context_free(c);
        return hx_err(e, HX_ERR_NOMEM, "hx_context_new: out of memory");
    }
    for (int l = 0; l < m->cfg.n_layer; l++) c->kv_rows[l] = hx_kv_layer_rows(&m->cfg, l, n_ctx_seq, cp.n_ubatch);
    hx_backend_params bp = {.n_seq = c->n_seq, .n_ctx_seq = n_ctx_seq, .n_ubatch = cp.n_ubatch,
                            .n_threads = cp.n_threads, .kv_f32 = cp.kv_f32, .exact = cp.exact,
                            .gpu_index = m->api->gpu_index, .tp = m->api->tp, .layer_split = m->api->layer_split,
                            .progress = m->api->progress,
                            .progress_user = m->api->progress_user, .kv_page = page, .kv_pages = n_pages};
    hx_status st = be->ctx_new(m, &bp, &c->bctx, e);
    if (st) { c->bctx = NULL; hx_context_free(c); return st; }
    *out = c;
    return HX_OK;
}

const hx_model *hx_context_model(const hx_context *c) { return c ? c->m : NULL; }
int hx_context_n_ctx(const hx_context *c) { return c ? c->p.n_ctx : 0; }
int hx_context_n_ctx_seq(const hx_context *c) { return c ? c->n_ctx_seq : 0; }
int hx_context_n_seq_max(const hx_context *c) { return c ? c->n_seq : 0; }
size_t hx_context_kv_bytes(const hx_context *c) { return c && c->be->kv_bytes ? c->be->kv_bytes(c->bctx) : 0; }
int hx_context_kv_page(const hx_context *c) { return c ? c->page : 0; }

int hx_context_kv_free(const hx_context *c) {
    if (!c) return 0;
    if (c->page) return c->n_free * c->page;
    int64_t room = 0;
    for (int s = 0; s < c->n_seq; s++) room += c->n_ctx_seq - c->seq_len[s];
    return (int)room;
}

/* ---- pages ---- */

static int pages_for(const hx_context *c, int n) { return (n + c->page - 1) / c->page; }

/* Sequence s gives back its pages past the first n positions. */
static void trim_pages(hx_context *c, int s, int n) {
    if (!c->page) return;
    int keep = pages_for(c, n);
    int32_t *pg = c->seq_pg + (size_t)s * c->max_pg;
    while (c->seq_npg[s] > keep) c->free_pg[c->n_free++] = pg[--c->seq_npg[s]];
}

/* Sequence s takes pages until it can hold n positions (n <= n_ctx_seq; the
 * caller checked that enough are free) and the backend maps them. */
static hx_status grow_pages(hx_context *c, int s, int n, hx_error *e) {
    if (!c->page) return HX_OK;
    int want = pages_for(c, n), have = c->seq_npg[s];
    if (want <= have) return HX_OK;
    if (want - have > c->n_free)
        return hx_err(e, HX_ERR_KV_FULL, "sequence %d needs %d more KV pages, %d of %d are free", s, want - have,
                      c->n_free, c->n_pages);
    int32_t *pg = c->seq_pg + (size_t)s * c->max_pg;
    for (int q = have; q < want; q++) pg[q] = c->free_pg[--c->n_free];
    hx_status st = c->be->kv_map(c->bctx, s, have, want - have, pg + have, e);
    c->seq_npg[s] = want;
    if (st) trim_pages(c, s, c->seq_len[s]);
    return st;
}

/* ---- batches ---- */

hx_batch hx_batch_init(int capacity) {
    hx_batch b = {0};
    if (capacity <= 0) return b;
    size_t n = (size_t)capacity;
    b.token = malloc(n * sizeof *b.token);
    b.pos = malloc(n * sizeof *b.pos);
    b.seq_id = malloc(n * sizeof *b.seq_id);
    b.logits = malloc(n * sizeof *b.logits);
    if (!b.token || !b.pos || !b.seq_id || !b.logits) { hx_batch_free(&b); return b; }
    b.capacity = capacity;
    return b;
}

void hx_batch_free(hx_batch *b) {
    if (!b) return;
    free(b->token); free(b->pos); free(b->seq_id); free(b->logits);
    *b = (hx_batch){0};
}

void hx_batch_clear(hx_batch *b) { if (b) b->n_tokens = 0; }

bool hx_batch_add(hx_batch *b, int32_t token, int32_t pos, int32_t seq_id, bool logits) {
    if (!b || b->n_tokens < 0 || b->n_tokens >= b->capacity) return false;
    int i = b->n_tokens++;
    b->token[i] = token; b->pos[i] = pos; b->seq_id[i] = seq_id; b->logits[i] = logits ? 1 : 0;
    return true;
}

/* ---- decode ---- */

static bool wants(const hx_batch *b, int i) { return b->logits ? b->logits[i] != 0 : i == b->n_tokens - 1; }

hx_status hx_decode(hx_context *c, const hx_batch *b, hx_error *e) {
    if (!c || !b) return hx_err(e, HX_ERR_ARG, "hx_decode: context or batch is NULL");
    int n = b->n_tokens;
    if (n <= 0) return hx_err(e, HX_ERR_ARG, "hx_decode: empty batch (n_tokens %d)", n);
    if (n > c->p.n_batch) return hx_err(e, HX_ERR_RANGE, "hx_decode: %d tokens exceed n_batch %d", n, c->p.n_batch);
    if (!b->token || !b->pos || !b->seq_id) return hx_err(e, HX_ERR_ARG, "hx_decode: batch arrays are NULL");
    c->n_last = 0;
    c->last_row = -1;
    for (int s = 0; s < c->n_seq; s++) c->first_pos[s] = c->next_pos[s] = -1;
    for (int i = 0; i < n; i++) {
        int32_t t = b->token[i], s = b->seq_id[i], p = b->pos[i];
        if (t < 0 || t >= c->n_vocab)
            return hx_err(e, HX_ERR_RANGE, "hx_decode: batch token %d: id %d is outside the vocabulary (0..%d)", i, t, c->n_vocab - 1);
        if (s < 0 || s >= c->n_seq)
            return hx_err(e, HX_ERR_RANGE, "hx_decode: batch token %d: sequence %d is outside 0..%d (n_seq_max %d)", i, s,
                          c->n_seq - 1, c->n_seq);
        if (c->first_pos[s] < 0) {
            if (p < 0 || p > c->seq_len[s])
                return hx_err(e, HX_ERR_RANGE, "hx_decode: sequence %d: batch token %d at position %d, but the sequence "
                              "holds %d positions (its first token must be at a position <= that)", s, i, p, c->seq_len[s]);
            c->first_pos[s] = p;
        } else if (p != c->next_pos[s]) {
            return hx_err(e, HX_ERR_RANGE, "hx_decode: sequence %d: batch token %d at position %d, expected %d (positions "
                          "of a sequence must be consecutive, in batch order)", s, i, p, c->next_pos[s]);
        }
        if (p >= c->n_ctx_seq)
            return hx_err(e, HX_ERR_RANGE, "hx_decode: sequence %d is full: batch token %d at position %d, the sequence "
                          "holds %d positions (%s)", s, i, p, c->n_ctx_seq, c->page ? "n_ctx_seq" : "n_ctx / n_seq_max");
        c->next_pos[s] = p + 1;
    }
    for (int s = 0; s < c->n_seq; s++) {
        int f = c->first_pos[s];
        if (f > 0 && f < c->seq_len[s] &&
            hx_kv_rewind(&c->m->cfg, c->kv_rows, c->n_ctx_seq, c->seq_len[s], f) == 0)
            return hx_err(e, HX_ERR_RANGE, "hx_decode: sequence %d: cannot go back to position %d of %d: a sliding-window "
                          "layer no longer holds what it needs (clear the sequence and decode from 0)", s, f, c->seq_len[s]);
    }
    /* pages for every new position, all or none: a full pool changes nothing */
    if (c->page) {
        int need = 0;
        for (int s = 0; s < c->n_seq; s++)
            if (c->first_pos[s] >= 0 && pages_for(c, c->next_pos[s]) > c->seq_npg[s])
                need += pages_for(c, c->next_pos[s]) - c->seq_npg[s];
        if (need > c->n_free)
            return hx_err(e, HX_ERR_KV_FULL, "hx_decode: the KV pool is full: the batch needs %d more pages of %d "
                          "positions, %d of %d are free", need, c->page, c->n_free, c->n_pages);
        for (int s = 0; s < c->n_seq; s++) {
            if (c->first_pos[s] < 0) continue;
            hx_status st = grow_pages(c, s, c->next_pos[s], e);
            if (st) {
                for (int q = 0; q <= s; q++) trim_pages(c, q, c->seq_len[q]);
                return st;
            }
        }
    }
    /* output rows, in batch order */
    int n_out = 0;
    for (int i = 0; i < n; i++) c->row_of[i] = wants(b, i) ? n_out++ : -1;
    if ((size_t)n_out > c->out_cap) {
        /* rows hold only the last decode's outputs: a fresh buffer, nothing to keep */
        size_t bytes = (size_t)n_out * (size_t)c->n_vocab * sizeof(float);
        float *lg = c->be->host_alloc ? c->be->host_alloc(c->bctx, bytes) : malloc(bytes);
        if (!lg) {
            for (int s = 0; s < c->n_seq; s++) trim_pages(c, s, c->seq_len[s]);
            return hx_err(e, HX_ERR_NOMEM, "hx_decode: out of memory for %d rows of logits", n_out);
        }
        if (c->be->host_free) c->be->host_free(c->bctx, c->logits);
        else free(c->logits);
        c->logits = lg;
        if (c->p.embeddings) {
            float *h = realloc(c->hidden, (size_t)n_out * (size_t)c->n_embd * sizeof *h);
            if (!h) {
                for (int s = 0; s < c->n_seq; s++) trim_pages(c, s, c->seq_len[s]);
                return hx_err(e, HX_ERR_NOMEM, "hx_decode: out of memory for %d embeddings", n_out);
            }
            c->hidden = h;
        }
        uint8_t *f = realloc(c->fetched, (size_t)n_out);
        if (!f) {
            for (int s = 0; s < c->n_seq; s++) trim_pages(c, s, c->seq_len[s]);
            return hx_err(e, HX_ERR_NOMEM, "hx_decode: out of memory for %d rows of logits", n_out);
        }
        c->fetched = f;
        c->out_cap = (size_t)n_out;
    }
    /* rows stay on the device until asked for when all of them come from one
     * ubatch (an earlier ubatch's rows would be overwritten on the device) */
    int first_ub = -1, last_ub = -1;
    for (int i = 0; i < n; i++)
        if (c->row_of[i] >= 0) {
            if (first_ub < 0) first_ub = i / c->p.n_ubatch;
            last_ub = i / c->p.n_ubatch;
        }
    bool defer = c->be->logits_get && c->be->logits_argmax && n_out > 0 && first_ub == last_ub;
    c->deferred = false;
    memcpy(c->orig_len, c->seq_len, (size_t)c->n_seq * sizeof *c->seq_len);
    int row_base = 0;
    for (int at = 0; at < n; at += c->p.n_ubatch) {
        int k = n - at < c->p.n_ubatch ? n - at : c->p.n_ubatch, k_out = 0;
        for (int j = 0; j < k; j++) {
            int r = c->row_of[at + j];
            c->ub_out[j] = r >= 0 ? r - row_base : -1;
            k_out += r >= 0;
        }
        hx_ubatch ub = {.n = k, .token = b->token + at, .pos = b->pos + at, .seq = b->seq_id + at,
                        .out = c->ub_out, .n_out = k_out, .defer_logits = defer};
        float *lg = k_out ? c->logits + (size_t)row_base * (size_t)c->n_vocab : NULL;
        float *hd = k_out && c->p.embeddings ? c->hidden + (size_t)row_base * (size_t)c->n_embd : NULL;
        hx_status st = c->be->forward(c->bctx, &ub, lg, hd, e);
        if (st) {
            /* what ran is dropped again: each sequence keeps what it held before,
             * or up to the first position this batch overwrote */
            for (int s = 0; s < c->n_seq; s++) {
                if (c->first_pos[s] < 0) continue;
                int keep = c->orig_len[s] < c->first_pos[s] ? c->orig_len[s] : c->first_pos[s];
                c->seq_len[s] = c->be->seq_keep(c->bctx, s, keep);
                trim_pages(c, s, c->seq_len[s]);
            }
            return st;
        }
        row_base += k_out;
    }
    for (int i = 0; i < n; i++) c->seq_tok[(size_t)b->seq_id[i] * (size_t)c->n_ctx_seq + (size_t)b->pos[i]] = b->token[i];
    for (int s = 0; s < c->n_seq; s++)
        if (c->first_pos[s] >= 0) {
            c->seq_len[s] = c->next_pos[s];
            trim_pages(c, s, c->seq_len[s]);  /* a rewrite from a lower position may end short of its old pages */
        }
    c->n_last = n;
    for (int i = n - 1; i >= 0 && c->last_row < 0; i--) c->last_row = c->row_of[i];
    c->deferred = defer;
    if (defer) memset(c->fetched, 0, (size_t)n_out);
    return HX_OK;
}

static int row(const hx_context *c, int i) {
    if (!c || c->n_last <= 0) return -1;
    if (i == -1) return c->last_row;
    return i >= 0 && i < c->n_last ? c->row_of[i] : -1;
}

const float *hx_get_logits(hx_context *c, int i) {
    int r = row(c, i);
    if (r < 0) return NULL;
    float *l = c->logits + (size_t)r * (size_t)c->n_vocab;
    if (c->deferred && !c->fetched[r]) {
        hx_error e = {0};
        if (c->be->logits_get(c->bctx, r, l, &e)) return NULL; /* a device fault: the next decode reports it too */
        c->fetched[r] = 1;
    }
    return l;
}

hx_status hx_get_argmax(hx_context *c, int n, const int *idx, int32_t *ids, hx_error *e) {
    if (!c || n < 0 || (n > 0 && (!idx || !ids))) return hx_err(e, HX_ERR_ARG, "hx_get_argmax: bad arguments");
    enum { GROUP = 64 };
    int rows[GROUP], at[GROUP], m = 0;
    for (int j = 0; j < n; j++) {
        int r = row(c, idx[j]);
        if (r < 0) return hx_err(e, HX_ERR_ARG, "hx_get_argmax: batch token %d has no logits", idx[j]);
        if (!c->deferred || c->fetched[r]) { /* on the host already */
            ids[j] = hx_argmax(c->logits + (size_t)r * (size_t)c->n_vocab, c->n_vocab);
        } else {
            rows[m] = r;
            at[m++] = j;
        }
        if (m == GROUP || (m > 0 && j == n - 1)) { /* the rows still on the device, GROUP per call */
            int32_t got[GROUP];
            hx_status st = c->be->logits_argmax(c->bctx, m, rows, got, e);
            if (st) return st;
            for (int q = 0; q < m; q++) ids[at[q]] = got[q];
            m = 0;
        }
    }
    return HX_OK;
}

/* log(sum(exp(x))) of n logits, in double after the max. */
static double host_lse(const float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) if (x[i] > mx) mx = x[i];
    double s = 0;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    return mx + log(s);
}

hx_status hx_get_logprobs(hx_context *c, int n, const int *idx, int k, const int32_t *ids, float *out, hx_error *e) {
    if (!c || n < 0 || k < 0 || (n > 0 && k > 0 && (!idx || !ids || !out)))
        return hx_err(e, HX_ERR_ARG, "hx_get_logprobs: bad arguments");
    for (size_t q = 0; q < (size_t)n * (size_t)k; q++)
        if (ids[q] < 0 || ids[q] >= c->n_vocab)
            return hx_err(e, HX_ERR_RANGE, "hx_get_logprobs: id %d (entry %zu) is outside the vocabulary (0..%d)",
                          ids[q], q, c->n_vocab - 1);
    if (k == 0) return HX_OK;
    enum { GROUP = 64 };
    int rows[GROUP], at[GROUP], m = 0;
    int32_t *gid = NULL;
    float *got = NULL;
    hx_status st = HX_OK;
    for (int j = 0; j < n && !st; j++) {
        int r = row(c, idx[j]);
        if (r < 0) { st = hx_err(e, HX_ERR_ARG, "hx_get_logprobs: batch token %d has no logits", idx[j]); break; }
        if (!c->deferred || c->fetched[r] || !c->be->logits_logprob) { /* on the host (or fetched there) */
            const float *l = hx_get_logits(c, idx[j]);
            if (!l) { st = hx_err(e, HX_ERR_DEVICE, "hx_get_logprobs: batch token %d: its logits could not be read", idx[j]); break; }
            double z = host_lse(l, c->n_vocab);
            for (int q = 0; q < k; q++) out[(size_t)j * k + q] = (float)(l[ids[(size_t)j * k + q]] - z);
        } else {
            if (!gid && (!(gid = malloc(sizeof *gid * GROUP * (size_t)k)) || !(got = malloc(sizeof *got * GROUP * (size_t)k)))) {
                st = hx_err(e, HX_ERR_NOMEM, "hx_get_logprobs: out of memory");
                break;
            }
            memcpy(gid + (size_t)m * k, ids + (size_t)j * k, sizeof *gid * (size_t)k);
            rows[m] = r;
            at[m++] = j;
        }
        if (m == GROUP || (m > 0 && j == n - 1)) { /* the rows still on the device, GROUP per call */
            if ((st = c->be->logits_logprob(c->bctx, m, rows, k, gid, got, e))) break;
            for (int t = 0; t < m; t++) memcpy(out + (size_t)at[t] * k, got + (size_t)t * k, sizeof *out * (size_t)k);
            m = 0;
        }
    }
    free(gid);
    free(got);
    return st;
}

/* The backend's decode_greedy (CUDA: the step graph, its argmax on the device,
 * and the next step launched before this returns) or, without one, a
 * one-token hx_decode and its argmax. */
hx_status hx_decode_greedy(hx_context *c, int seq, int32_t token, int32_t *next, hx_error *e) {
    if (!c || !next) return hx_err(e, HX_ERR_ARG, "hx_decode_greedy: context or next is NULL");
    if (seq < 0 || seq >= c->n_seq)
        return hx_err(e, HX_ERR_RANGE, "hx_decode_greedy: sequence %d is outside 0..%d (n_seq_max %d)", seq, c->n_seq - 1,
                      c->n_seq);
    if (token < 0 || token >= c->n_vocab)
        return hx_err(e, HX_ERR_RANGE, "hx_decode_greedy: token %d is outside the vocabulary (0..%d)", token, c->n_vocab - 1);
    int pos = c->seq_len[seq];
    if (pos >= c->n_ctx_seq)
        return hx_err(e, HX_ERR_RANGE, "hx_decode_greedy: sequence %d is full (%d positions)", seq, c->n_ctx_seq);
    if (!c->be->decode_greedy) {   /* hx_decode takes the page */
        int32_t tk = token, ps = pos, sq = seq;
        int8_t lg = 1;
        hx_batch b = {.n_tokens = 1, .token = &tk, .pos = &ps, .seq_id = &sq, .logits = &lg, .capacity = 1};
        int at = 0;
        hx_status st = hx_decode(c, &b, e);
        if (!st) st = hx_get_argmax(c, 1, &at, next, e);
        c->n_last = 0;
        return st;
    }
    c->n_last = 0;
    hx_status st = grow_pages(c, seq, pos + 1, e);
    if (st) return st;
    st = c->be->decode_greedy(c->bctx, seq, token, pos, next, e);
    if (st) {   /* the sequence keeps what it held */
        c->seq_len[seq] = c->be->seq_keep(c->bctx, seq, pos);
        trim_pages(c, seq, c->seq_len[seq]);
        return st;
    }
    c->seq_tok[(size_t)seq * (size_t)c->n_ctx_seq + (size_t)pos] = token;
    c->seq_len[seq] = pos + 1;
    return HX_OK;
}

const float *hx_get_embeddings(hx_context *c, int i) {
    int r = row(c, i);
    return r >= 0 && c->p.embeddings ? c->hidden + (size_t)r * (size_t)c->n_embd : NULL;
}

/* ---- sequences ---- */

static bool seq_ok(const hx_context *c, int seq) { return c && seq >= 0 && seq < c->n_seq; }

int hx_seq_pos(const hx_context *c, int seq) { return seq_ok(c, seq) ? c->seq_len[seq] : 0; }

const int32_t *hx_seq_tokens(const hx_context *c, int seq) {
    return seq_ok(c, seq) ? c->seq_tok + (size_t)seq * (size_t)c->n_ctx_seq : NULL;
}

int hx_seq_keep(hx_context *c, int seq, int n) {
    if (!seq_ok(c, seq)) return 0;
    if (n < 0) n = 0;
    if (n >= c->seq_len[seq]) return c->seq_len[seq];
    c->n_last = 0;  /* the last decode's outputs may belong to dropped positions */
    c->seq_len[seq] = c->be->seq_keep(c->bctx, seq, n);
    trim_pages(c, seq, c->seq_len[seq]);
    return c->seq_len[seq];
}

void hx_seq_clear(hx_context *c, int seq) { hx_seq_keep(c, seq, 0); }

hx_status hx_seq_copy(hx_context *c, int src, int dst, int n, hx_error *e) {
    if (!c) return hx_err(e, HX_ERR_ARG, "hx_seq_copy: context is NULL");
    if (!seq_ok(c, src) || !seq_ok(c, dst))
        return hx_err(e, HX_ERR_RANGE, "hx_seq_copy: sequence %d -> %d: ids are 0..%d", src, dst, c->n_seq - 1);
    if (n < 0 || n > c->seq_len[src])
        return hx_err(e, HX_ERR_RANGE, "hx_seq_copy: %d positions of sequence %d, which holds %d", n, src, c->seq_len[src]);
    if (src == dst) { hx_seq_keep(c, dst, n); return HX_OK; }
    /* paged: dst gets pages of its own (nothing shared with src) and the rows
     * are copied; dst's pages so far are reused, so a refused copy (KV full, or
     * a ring that lost src's window) leaves dst as it was */
    hx_status st = grow_pages(c, dst, n, e);
    if (!st) st = c->be->seq_copy(c->bctx, src, dst, n, e);
    if (st) {
        trim_pages(c, dst, c->seq_len[dst]);
        return st;
    }
    memcpy(c->seq_tok + (size_t)dst * (size_t)c->n_ctx_seq, c->seq_tok + (size_t)src * (size_t)c->n_ctx_seq,
           (size_t)n * sizeof *c->seq_tok);
    c->seq_len[dst] = n;
    trim_pages(c, dst, n);
    return HX_OK;
}

/* ---- save / load ----
 * File: "HXSEQ\0\0\0" | u32 version (1) | u32 header bytes (after these 16) |
 * u32 n | u32 fingerprint length | u32 backend name length | u32 reserved |
 * u64 state bytes | u64 checksum (FNV-1a 64 of everything after the header) |
 * fingerprint | backend name | n int32 token ids | state bytes. Little-endian. */
#define SEQ_MAGIC "HXSEQ\0\0\0"
#define SEQ_VERSION 1u
#define SEQ_HDR 40u

static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static void put64(unsigned char *p, uint64_t v) { for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static uint32_t get32(const unsigned char *p) { uint32_t v = 0; for (int i = 3; i >= 0; i--) v = v << 8 | p[i]; return v; }
static uint64_t get64(const unsigned char *p) { uint64_t v = 0; for (int i = 7; i >= 0; i--) v = v << 8 | p[i]; return v; }

static hx_status write_all(int fd, const void *p, size_t n, const char *tmp, hx_error *e) {
    const char *b = p;
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return hx_err(e, HX_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        b += w; n -= (size_t)w;
    }
    return HX_OK;
}

hx_status hx_seq_save(hx_context *c, int seq, const char *path, hx_error *e) {
    if (!c || !path || !*path) return hx_err(e, HX_ERR_ARG, "hx_seq_save: context or path is NULL");
    if (!seq_ok(c, seq)) return hx_err(e, HX_ERR_RANGE, "hx_seq_save: sequence %d is outside 0..%d", seq, c->n_seq - 1);
    int n = c->seq_len[seq];
    size_t sb = c->be->seq_state_size(c->bctx, n);
    void *state = malloc(sb ? sb : 1);
    if (!state) return hx_err(e, HX_ERR_NOMEM, "hx_seq_save: out of memory for %zu bytes", sb);
    hx_status st = c->be->seq_read(c->bctx, seq, n, state, e);
    if (st) { free(state); return st; }
    const char *fp = hx_model_fingerprint(c->m), *bn = c->be->name;
    const int32_t *toks = hx_seq_tokens(c, seq);
    unsigned char h[SEQ_HDR];
    memcpy(h, SEQ_MAGIC, 8);
    put32(h + 8, SEQ_VERSION); put32(h + 12, SEQ_HDR - 16);
    put32(h + 16, (uint32_t)n); put32(h + 20, (uint32_t)strlen(fp)); put32(h + 24, (uint32_t)strlen(bn)); put32(h + 28, 0);
    put64(h + 32, sb);
    unsigned char *ids = malloc((size_t)n * 4 + 1);
    if (!ids) { free(state); return hx_err(e, HX_ERR_NOMEM, "hx_seq_save: out of memory"); }
    for (int i = 0; i < n; i++) put32(ids + 4 * i, (uint32_t)toks[i]);
    uint64_t ck = HX_FNV_INIT;
    ck = hx_fnv1a(fp, strlen(fp), ck); ck = hx_fnv1a(bn, strlen(bn), ck); ck = hx_fnv1a(ids, (size_t)n * 4, ck);
    ck = hx_fnv1a(state, sb, ck);
    unsigned char tail[8];
    put64(tail, ck);
    size_t tl = strlen(path) + 64;
    char *tmp = malloc(tl);
    if (!tmp) { free(ids); free(state); return hx_err(e, HX_ERR_NOMEM, "hx_seq_save: out of memory"); }
    static unsigned counter;
    snprintf(tmp, tl, "%s.tmp.%ld.%u", path, (long)getpid(), __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) st = hx_err(e, HX_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    if (!st) st = write_all(fd, h, sizeof h, tmp, e);
    if (!st) st = write_all(fd, tail, 8, tmp, e);
    if (!st) st = write_all(fd, fp, strlen(fp), tmp, e);
    if (!st) st = write_all(fd, bn, strlen(bn), tmp, e);
    if (!st) st = write_all(fd, ids, (size_t)n * 4, tmp, e);
    if (!st) st = write_all(fd, state, sb, tmp, e);
    if (!st) st = hx_commit_file(fd, tmp, path, e);
    else if (fd >= 0) { close(fd); unlink(tmp); }
    free(tmp); free(ids); free(state);
    return st;
}

hx_status hx_seq_load(hx_context *c, int seq, const char *path, hx_error *e) {
    if (!c || !path || !*path) return hx_err(e, HX_ERR_ARG, "hx_seq_load: context or path is NULL");
    if (!seq_ok(c, seq)) return hx_err(e, HX_ERR_RANGE, "hx_seq_load: sequence %d is outside 0..%d", seq, c->n_seq - 1);
    char *buf = NULL;
    size_t len = 0;
    hx_status st = hx_read_file(path, &buf, &len, e);
    if (st) return st;
    const unsigned char *b = (const unsigned char *)buf;
    const char *fp = hx_model_fingerprint(c->m), *bn = c->be->name;
    if (len < SEQ_HDR + 8 || memcmp(b, SEQ_MAGIC, 8)) { st = hx_err(e, HX_ERR_FORMAT, "%s: not a helix sequence file", path); goto out; }
    if (get32(b + 8) != SEQ_VERSION || get32(b + 12) != SEQ_HDR - 16) {
        st = hx_err(e, HX_ERR_UNSUPPORTED, "%s: sequence file version %u (this library reads %u)", path, get32(b + 8), SEQ_VERSION);
        goto out;
    }
    uint64_t n = get32(b + 16), lf = get32(b + 20), lb = get32(b + 24), sb = get64(b + 32);
    uint64_t need = (uint64_t)SEQ_HDR + 8 + lf + lb + 4 * n;
    if (sb > len || need > len || need + sb != len) {
        st = hx_err(e, HX_ERR_FORMAT, "%s: %zu bytes, the header says %llu", path, len, (unsigned long long)(need + sb));
        goto out;
    }
    const unsigned char *pf = b + SEQ_HDR + 8, *pb = pf + lf, *pi = pb + lb, *ps = pi + 4 * n;
    uint64_t ck = hx_fnv1a(pf, (size_t)(len - SEQ_HDR - 8), HX_FNV_INIT);
    if (ck != get64(b + SEQ_HDR)) { st = hx_err(e, HX_ERR_FORMAT, "%s: checksum mismatch (damaged file)", path); goto out; }
    if (lf != strlen(fp) || memcmp(pf, fp, lf)) {
        st = hx_err(e, HX_ERR_ARG, "%s: saved from model '%.*s', this context's model is '%s'", path, (int)(lf < 300 ? lf : 300),
                    (const char *)pf, fp);
        goto out;
    }
    if (lb != strlen(bn) || memcmp(pb, bn, lb)) {
        st = hx_err(e, HX_ERR_ARG, "%s: saved by the %.*s backend, this context runs on %s", path, (int)(lb < 32 ? lb : 32),
                    (const char *)pb, bn);
        goto out;
    }
    if (n > (uint64_t)c->n_ctx_seq) {
        st = hx_err(e, HX_ERR_RANGE, "%s: %llu positions, sequence %d holds at most %d", path, (unsigned long long)n, seq, c->n_ctx_seq);
        goto out;
    }
    if (sb != c->be->seq_state_size(c->bctx, (int)n)) {
        st = hx_err(e, HX_ERR_ARG, "%s: %llu state bytes for %llu positions, this context needs %zu (another KV type or size)",
                    path, (unsigned long long)sb, (unsigned long long)n, c->be->seq_state_size(c->bctx, (int)n));
        goto out;
    }
    for (uint64_t i = 0; i < n; i++) {
        uint32_t t = get32(pi + 4 * i);
        if (t >= (uint32_t)c->n_vocab) {
            st = hx_err(e, HX_ERR_FORMAT, "%s: token %llu is %u, outside the vocabulary", path, (unsigned long long)i, t);
            goto out;
        }
    }
    if (c->page && pages_for(c, (int)n) > c->n_free + c->seq_npg[seq]) {
        st = hx_err(e, HX_ERR_KV_FULL, "%s: %llu positions need %d KV pages, %d of %d are free (and %d of sequence %d's)",
                    path, (unsigned long long)n, pages_for(c, (int)n), c->n_free, c->n_pages, c->seq_npg[seq], seq);
        goto out;
    }
    c->n_last = 0;
    if (c->page) { /* the old pages go first, so the file can reuse them */
        c->seq_len[seq] = c->be->seq_keep(c->bctx, seq, 0);
        trim_pages(c, seq, 0);
    }
    if ((st = grow_pages(c, seq, (int)n, e)) || (st = c->be->seq_write(c->bctx, seq, (int)n, ps, e))) {
        c->seq_len[seq] = c->be->seq_keep(c->bctx, seq, 0);
        trim_pages(c, seq, 0);
        goto out;
    }
    int32_t *dst = c->seq_tok + (size_t)seq * (size_t)c->n_ctx_seq;
    for (uint64_t i = 0; i < n; i++) dst[i] = (int32_t)get32(pi + 4 * i);
    c->seq_len[seq] = (int)n;
out:
    free(buf);
    return st;
}
