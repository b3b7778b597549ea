/* pipe.c — the layer (pipeline) split: one backend table (backend.h) over N
 * child contexts of the CPU or the CUDA backend, child k running the
 * contiguous layers [layer0_k, layer1_k) of the model with the KV cache of
 * those layers only. Child 0 also does the token embedding, the last child
 * the final norm and the output head.
 *
 * A child sees a view of the model (part_view): the same hx_model with
 * n_layer, layers and layer_is_swa narrowed to its range, and the embedding
 * (all but the first) and the output head (all but the last) cut off by a
 * NULL data pointer, so that a CUDA child uploads only what it runs. Views
 * point into the one mapping: nothing is copied on the CPU.
 *
 * Per ubatch (n tokens):
 *   child 0:    tokens          -> residual (n, n_embd) f32   (ub.embd_out)
 *   child k:    residual        -> residual                   (ub.embd_in / embd_out)
 *   child N-1:  residual        -> logits / hidden states     (ub.embd_in)
 * The residual passes through a host buffer: one copy out of and one into
 * each GPU per part and forward. This is the fallback for a model too large
 * for one GPU whose heads tensor parallelism cannot cut (a KV head count not
 * divisible by the GPUs); the parts run one after the other, so N GPUs give
 * N times the memory, not more speed.
 *
 * CPU parts (a test of the split) each have their own thread pool; they take
 * turns, so the idle pools sleep.
 *
 * Not offered (NULL in the table, so the API takes its plain paths): the
 * CUDA decode graphs, greedy lookahead and device sampling, logits kept on
 * the device. Sequences (keep, copy, state) go to every child; a state is the
 * children's states one after the other. */
#include "api/backend.h"
#include "core/core.h"
#include "quant/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIPE_MAX 16 /* most parts */

typedef struct pipe_part {
    hx_model view;       /* the model narrowed to this part's layers (part_view) */
    int layer0, layer1;  /* layers [layer0, layer1) of the model */
    int gpu;             /* CUDA ordinal (CPU: unused) */
    bool ring;           /* some layer of the part keeps a sliding-window ring */
    void *ctx;           /* the child backend's context */
} pipe_part;

typedef struct pipe_ctx {
    const hx_backend *child;
    hx_status (*select)(int gpu, hx_error *e); /* makes a part's GPU current; NULL on the CPU */
    int n;               /* parts */
    pipe_part part[PIPE_MAX];
    int order[PIPE_MAX]; /* parts with a ring first: the only ones whose sequence checks can differ */
    int n_embd, n_ubatch;
    float *res[2];       /* (n_ubatch, n_embd) f32 each: the residual stream between parts */
    int32_t *no_out;     /* (n_ubatch): -1, the outputs of a part before the last */
} pipe_ctx;

/* ---- the split ---- */

static uint64_t tensor_bytes(const hx_tensor *t) {
    if (!t->data) return 0;
    uint64_t rows = 1;
    for (int d = 1; d < 4; d++) rows *= (uint64_t)(t->ne[d] > 0 ? t->ne[d] : 1);
    return rows * hx_row_size(t->type, t->ne[0]);
}

static uint64_t layer_bytes(const hx_model *m, int l) {
    const hx_tensor *t = (const hx_tensor *)&m->layers[l];
    uint64_t sum = 0;
    for (size_t k = 0; k < sizeof(hx_layer_weights) / sizeof(hx_tensor); k++) sum += tensor_bytes(t + k);
    return sum;
}

/* Layer cuts for n parts balanced by bytes of weights: the embedding counts
 * on the first part, the output head on the last (both are uploaded there,
 * a tied head included). cut[k] = first layer of part k, cut[n] = n_layer;
 * every part gets at least one layer. */
static void balance(const hx_model *m, int n, int *cut) {
    int L = m->cfg.n_layer;
    uint64_t before[HX_MAX_LAYERS + 1], total;
    before[0] = tensor_bytes(&m->tok_embd);
    for (int l = 0; l < L; l++) before[l + 1] = before[l] + layer_bytes(m, l);
    total = before[L] + tensor_bytes(&m->output);
    cut[0] = 0;
    cut[n] = L;
    for (int k = 1; k < n; k++) {
        double want = (double)total * k / n;
        int best = cut[k - 1] + 1;
        for (int l = best; l <= L - (n - k); l++)
            if (fabs((double)before[l] - want) < fabs((double)before[best] - want)) best = l;
        cut[k] = best;
    }
}

/* What child k sees: the model with layers [a, b) only. The tensors are the
 * model's (pointers into its mapping); the embedding is cut off after the
 * first part, the head before the last (a NULL data pointer). */
static void part_view(const hx_model *m, int a, int b, bool first, bool last, hx_model *v) {
    *v = *m;
    v->cfg.n_layer = b - a;
    memset(v->cfg.layer_is_swa, 0, sizeof v->cfg.layer_is_swa);
    memcpy(v->cfg.layer_is_swa, m->cfg.layer_is_swa + a, sizeof m->cfg.layer_is_swa[0] * (size_t)(b - a));
    v->layers = m->layers + a;
    if (!first) v->tok_embd.data = NULL;
    if (!last) v->output.data = NULL;
}

static hx_status use(const pipe_ctx *p, int k, hx_error *e) {
    return p->select ? p->select(p->part[k].gpu, e) : HX_OK;
}

/* Back to the first part's GPU (the model's gpu_index) after a call that went
 * through the others: the CUDA backend runs on the current device, and a
 * context without the split in the same thread expects that one. */
static void home(const pipe_ctx *p) {
    hx_error e = {0};
    if (p->select) use(p, 0, &e);
}

static void pipe_free(void *ctx) {
    pipe_ctx *p = ctx;
    if (!p) return;
    for (int k = 0; k < p->n; k++) {
        if (!p->part[k].ctx) continue;
        hx_error e = {0};
        use(p, k, &e);
        p->child->ctx_free(p->part[k].ctx);
    }
    home(p);
    free(p->res[0]); free(p->res[1]); free(p->no_out);
    free(p);
}

/* A part's upload progress as its share of the whole: part k's fraction f is (k + f) / n. */
typedef struct part_prog { hx_progress_fn fn; void *user; int k, n; } part_prog;
static bool part_progress(float f, void *user) {
    const part_prog *q = user;
    return q->fn(((float)q->k + f) / (float)q->n, q->user);
}

static hx_status pipe_new(const hx_backend *child, hx_status (*select)(int, hx_error *), const hx_model *m,
                          const hx_backend_params *bp, void **out, hx_error *e) {
    *out = NULL;
    int n = bp->layer_split;
    if (n < 2 || n > PIPE_MAX)
        return hx_err(e, HX_ERR_ARG, "layer split: %d parts (2..%d)", n, PIPE_MAX);
    if (m->cfg.n_layer < n)
        return hx_err(e, HX_ERR_ARG, "layer split: %d parts of a model of %d layers (at most one part per layer)", n,
                      m->cfg.n_layer);
    if (bp->tp > 1) return hx_err(e, HX_ERR_UNSUPPORTED, "layer split: not combined with tensor parallelism");
    if (bp->dev.dump_dir || bp->dev.n_dump_positions)
        return hx_err(e, HX_ERR_UNSUPPORTED, "layer split: per-layer dumps are of one context (run without the split)");
    pipe_ctx *p = calloc(1, sizeof *p);
    if (!p) return hx_err(e, HX_ERR_NOMEM, "layer split: out of memory");
    p->child = child;
    p->select = select;
    p->n = n;
    p->n_embd = m->cfg.n_embd;
    p->n_ubatch = bp->n_ubatch;
    size_t rows = (size_t)bp->n_ubatch;
    p->res[0] = malloc(sizeof(float) * rows * (size_t)p->n_embd);
    p->res[1] = malloc(sizeof(float) * rows * (size_t)p->n_embd);
    p->no_out = malloc(sizeof(int32_t) * rows);
    if (!p->res[0] || !p->res[1] || !p->no_out) {
        pipe_free(p);
        return hx_err(e, HX_ERR_NOMEM, "layer split: out of memory");
    }
    for (size_t i = 0; i < rows; i++) p->no_out[i] = -1;
    int cut[PIPE_MAX + 1];
    balance(m, n, cut);
    int o = 0;
    for (int pass = 0; pass < 2; pass++)  /* ring parts first, then the others */
        for (int k = 0; k < n; k++) {
            pipe_part *q = &p->part[k];
            if (pass == 0) {
                q->layer0 = cut[k];
                q->layer1 = cut[k + 1];
                q->gpu = bp->gpu_index + (child == &hx_backend_cpu || bp->dev.split_one_gpu ? 0 : k);
                part_view(m, q->layer0, q->layer1, k == 0, k == n - 1, &q->view);
                for (int l = 0; l < q->view.cfg.n_layer; l++)
                    q->ring |= hx_kv_layer_rows(&q->view.cfg, l, bp->n_ctx_seq, bp->n_ubatch) < bp->n_ctx_seq;
            }
            if (q->ring == (pass == 0)) p->order[o++] = k;
        }
    hx_backend_params cp = *bp;
    cp.layer_split = 0;
    part_prog pg = {bp->progress, bp->progress_user, 0, n};
    if (bp->progress) {
        cp.progress = part_progress;
        cp.progress_user = &pg;
    }
    for (int k = 0; k < n; k++) {
        pipe_part *q = &p->part[k];
        cp.gpu_index = q->gpu;
        pg.k = k;
        hx_status st = use(p, k, e);
        if (!st) st = child->ctx_new(&q->view, &cp, &q->ctx, e);
        char where[32] = "";
        if (select) snprintf(where, sizeof where, " on GPU %d", q->gpu);
        if (st) {
            q->ctx = NULL;
            char msg[sizeof e->msg]; /* the child's message, kept with which part failed */
            snprintf(msg, sizeof msg, "%s", e ? e->msg : "");
            pipe_free(p);
            return hx_err(e, st, "layer split: part %d (layers %d..%d)%s: %s", k, q->layer0, q->layer1 - 1, where, msg);
        }
        HX_INFO("layer split: part %d: layers %d..%d%s", k, q->layer0, q->layer1 - 1, where);
    }
    home(p);
    *out = p;
    return HX_OK;
}

/* ---- forward ---- */

static hx_status pipe_forward(void *ctx, const hx_ubatch *ub, float *logits, float *hidden, hx_error *e) {
    pipe_ctx *p = ctx;
    if (!ub || ub->n <= 0 || ub->n > p->n_ubatch)
        return hx_err(e, HX_ERR_ARG, "layer split: forward of %d tokens (1..%d)", ub ? ub->n : 0, p->n_ubatch);
    for (int k = 0; k < p->n; k++) {
        bool last = k == p->n - 1;
        hx_ubatch sub = *ub;
        sub.defer_logits = false;
        sub.embd_in = k > 0 ? p->res[(k - 1) & 1] : NULL;
        sub.embd_out = last ? NULL : p->res[k & 1];
        if (!last) { sub.out = p->no_out; sub.n_out = 0; }
        hx_status st = use(p, k, e);
        if (!st) st = p->child->forward(p->part[k].ctx, &sub, last ? logits : NULL, last ? hidden : NULL, e);
        if (st) { home(p); return st; } /* the caller drops what ran (seq_keep on every part) */
    }
    home(p);
    return HX_OK;
}

/* ---- sequences: every part ---- */

static int pipe_seq_keep(void *ctx, int seq, int n) {
    pipe_ctx *p = ctx;
    int kept = n, got[PIPE_MAX];
    for (int k = 0; k < p->n; k++) {
        hx_error e = {0};
        got[k] = use(p, k, &e) ? 0 : p->child->seq_keep(p->part[k].ctx, seq, n);
        if (got[k] < kept) kept = got[k];
    }
    /* a ring part that lost what position n needs keeps nothing: then none does */
    for (int k = 0; k < p->n; k++)
        if (got[k] != kept) {
            hx_error e = {0};
            if (!use(p, k, &e)) p->child->seq_keep(p->part[k].ctx, seq, kept);
        }
    home(p);
    return kept;
}

static hx_status pipe_seq_copy(void *ctx, int src, int dst, int n, hx_error *e) {
    pipe_ctx *p = ctx;
    /* ring parts first: their check (the window's positions still held) is the
     * only one that can fail after another part copied */
    for (int j = 0; j < p->n; j++) {
        int k = p->order[j];
        hx_status st = use(p, k, e);
        if (!st) st = p->child->seq_copy(p->part[k].ctx, src, dst, n, e);
        if (st && j > 0) { /* dst is half copied: empty it everywhere, so the parts agree */
            pipe_seq_keep(p, dst, 0);
            char msg[sizeof e->msg];
            snprintf(msg, sizeof msg, "%s", e ? e->msg : "");
            return hx_err(e, st, "%s (layer split: sequence %d was emptied)", msg, dst);
        }
        if (st) { home(p); return st; }
    }
    home(p);
    return HX_OK;
}

static size_t pipe_seq_state_size(void *ctx, int n) {
    pipe_ctx *p = ctx;
    size_t sz = 0;
    for (int k = 0; k < p->n; k++) sz += p->child->seq_state_size(p->part[k].ctx, n);
    return sz;
}

/* Each part's state of seq's first n positions, in part order, from (write)
 * or into buf. */
static hx_status pipe_state_io(pipe_ctx *p, int seq, int n, uint8_t *buf, bool write, hx_error *e) {
    for (int k = 0; k < p->n; k++) {
        hx_status st = use(p, k, e);
        if (!st) st = write ? p->child->seq_write(p->part[k].ctx, seq, n, buf, e)
                            : p->child->seq_read(p->part[k].ctx, seq, n, buf, e);
        if (st) { home(p); return st; }
        buf += p->child->seq_state_size(p->part[k].ctx, n);
    }
    home(p);
    return HX_OK;
}

static hx_status pipe_seq_read(void *ctx, int seq, int n, void *buf, hx_error *e) {
    if (!buf) return hx_err(e, HX_ERR_ARG, "layer split: seq_read: no buffer");
    return pipe_state_io(ctx, seq, n, buf, false, e);
}

/* On failure the caller empties seq (seq_keep 0 on every part). */
static hx_status pipe_seq_write(void *ctx, int seq, int n, const void *buf, hx_error *e) {
    if (!buf) return hx_err(e, HX_ERR_ARG, "layer split: seq_write: no buffer");
    return pipe_state_io(ctx, seq, n, (uint8_t *)buf, true, e); /* only read through on write */
}

static size_t pipe_kv_bytes(void *ctx) {
    pipe_ctx *p = ctx;
    size_t sum = 0;
    for (int k = 0; k < p->n; k++) sum += p->child->kv_bytes ? p->child->kv_bytes(p->part[k].ctx) : 0;
    return sum;
}

/* The table of a pipe over one child backend (name, ctx_new, device_bytes_in_use). */
#define PIPE_TABLE(nm, new_fn, dev_bytes)                                                                             \
    {.name = nm, .ctx_new = new_fn, .ctx_free = pipe_free, .forward = pipe_forward, .seq_keep = pipe_seq_keep,   \
     .seq_copy = pipe_seq_copy, .seq_state_size = pipe_seq_state_size, .seq_read = pipe_seq_read,               \
     .seq_write = pipe_seq_write, .kv_bytes = pipe_kv_bytes, .device_bytes_in_use = dev_bytes}

static hx_status pipe_cpu_new(const hx_model *m, const hx_backend_params *bp, void **out, hx_error *e) {
    return pipe_new(&hx_backend_cpu, NULL, m, bp, out, e);
}

const hx_backend hx_backend_pipe_cpu = PIPE_TABLE("cpu-layer-split", pipe_cpu_new, NULL);

#ifdef HX_HAVE_CUDA
/* Memory in use on the parts' GPUs, each GPU counted once. */
static size_t pipe_device_bytes(void *ctx) {
    pipe_ctx *p = ctx;
    if (!p->child->device_bytes_in_use) return 0;
    size_t sum = 0;
    for (int k = 0; k < p->n; k++) {
        bool seen = false;
        for (int j = 0; j < k; j++) seen |= p->part[j].gpu == p->part[k].gpu;
        hx_error e = {0};
        if (!seen && !use(p, k, &e)) sum += p->child->device_bytes_in_use(p->part[k].ctx);
    }
    home(p);
    return sum;
}

static hx_status pipe_cuda_new(const hx_model *m, const hx_backend_params *bp, void **out, hx_error *e) {
    return pipe_new(&hx_backend_cuda, hx_cuda_select, m, bp, out, e);
}

const hx_backend hx_backend_pipe_cuda = PIPE_TABLE("cuda-layer-split", pipe_cuda_new, pipe_device_bytes);
#endif
