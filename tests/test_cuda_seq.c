/* test_cuda_seq.c — many sequences in one CUDA context (hx_backend_cuda,
 * api/backend.h) against each sequence run alone.
 *
 * On synthetic models (qwen3-0.6b q4_k_m and gemma-3-1b q8_0, a few layers of
 * the real width, a small vocabulary; the gemma one with its sliding window
 * cut to 16 so that the per-slot rings wrap): N = 1, 5 and 16 sequences with
 * prompts of different lengths are prefilled together, in ubatches that
 * interleave the tokens of several sequences' chunks, then greedy-decoded
 * together (one token of every sequence per forward) for STEPS steps. Each
 * sequence is then run alone in a one-slot context with the same chunks. The
 * greedy tokens must be equal and every logit row within TOL of the largest
 * logit for one sequence (the same kernels on the same shapes: the GPU is
 * deterministic, so the difference is expected to be 0), within TOL_BATCH
 * when several share a ubatch (one forward over all their tokens: other
 * matmul kernels); the final hidden states too. Then B = 2, 8, 32 and 128
 * sequences decoding together (ubatches of 128 tokens) against each alone.
 * Also: decode_greedy (the graph and its lookahead, and with
 * hx_cuda_dev_opts.no_ahead; on two slots of the many-sequence context,
 * alternating) gives the forward's tokens; 5 sequences together without graphs
 * (no_graph) give what they give alone; a sequence copied to
 * another slot (seq_copy) and one saved and restored (seq_read/seq_write)
 * continue with the same logits as the original; keeping a prefix (seq_keep)
 * and decoding again gives what the first decode gave; a bad ubatch fails
 * and leaves the caches as they were.
 * Skipped (77) without CUDA in the build or without a usable GPU. */
#include "test_util.h"

#include <unistd.h>

#ifdef HX_HAVE_CUDA
#include "api/backend.h"
#include "backend/cuda/cuda.h"
#include "core/core.h"
#include "model/synth.h"

enum { NSEQ = 16, MAXSEQ = 128, STEPS = 24, NCTX = 80, V = 4096 };
static const double TOL = 1e-4; /* of max |logit|: the same kernels on the same shapes */
/* Several sequences in one ubatch run as one forward (every linear layer over
 * all tokens: the tiled f32 matmul, or cuBLAS on f16 operands from 32 tokens,
 * instead of the single-token matvec). Every context here decodes with f32
 * activations (hx_cuda_dev_opts.mvq = -1: the 8-bit-activation matvec differs
 * from f32 by up to ~2e-2 on gemma, and is checked against the CPU by
 * gpu-test), so the comparison isolates the batching: positions, slots,
 * rings, gathers. A greedy token may differ only where the sequence alone had
 * a near-tie (its top two logits within TOL_BATCH); the comparison of that
 * sequence stops there. */
static const double TOL_BATCH = 5e-3;
static const hx_cuda_dev_opts F32 = {.mvq = -1};
/* The production setting (8-bit activations: the q8 tile kernel for batches of
 * up to 4 tokens) against the f32 lone runs: the q8 rounding of the
 * activations on top (gemma's outliers: ~2e-2). */
static const double TOL_Q8 = 4e-2;

typedef struct model_case {
    const char *preset;
    hx_mix mix;
    int n_layer;
    int window;   /* > 0: sliding window set on the loaded model */
    int n_ubatch; /* a ring holds window + n_ubatch rows */
} model_case;

/* One sequence's run: prompt, chunk size, the logits rows it asked for (in
 * order: the prompt's requested rows, then one per decode step), greedy tokens. */
typedef struct seq_run {
    int id;             /* the sequence (0..NSEQ-1) */
    int len, chunk;
    int32_t prompt[64];
    int n_rows;
    float *rows;        /* n_rows * V */
    float hidden[4096]; /* the prompt's last hidden state (n_embd <= 4096) */
    int32_t gen[STEPS + 1];
} seq_run;

static double g_worst = 0; /* largest relative logit difference seen */

/* max |a - b| / max |b| over n values (infinite on NaN) */
static double rel_diff(const float *a, const float *b, int n) {
    double md = 0, mr = 0;
    for (int i = 0; i < n; i++) {
        double d = isnan(a[i]) || isnan(b[i]) ? INFINITY : fabs((double)a[i] - b[i]);
        if (d > md) md = d;
        if (fabs(b[i]) > mr) mr = fabs(b[i]);
    }
    return mr > 0 ? md / mr : md;
}

static bool wants_all(int s) { return s % 3 == 0; } /* every prompt token's logits, else the chunk's last */

static void *new_ctx(const hx_model *m, int n_seq, const model_case *mc, const hx_cuda_dev_opts *dv) {
    hx_backend_params p = {.n_seq = n_seq, .n_ctx_seq = NCTX, .n_ubatch = mc->n_ubatch, .gpu_index = 0};
    p.dev.cuda = dv;
    void *ctx = NULL;
    hx_error e = {0};
    hx_status s = hx_backend_cuda.ctx_new(m, &p, &ctx, &e);
    CHECKF(s == HX_OK, "ctx_new: %s", e.msg);
    return s == HX_OK ? ctx : NULL;
}

/* ---- a ubatch under construction ---- */
typedef struct ub {
    int n, n_out;
    int32_t token[256], pos[256], seq[256], out[256];
    int out_seq[256]; /* for each output row: its sequence */
} ub;

static hx_status run_ub(void *ctx, ub *b, float *logits, float *hidden) {
    hx_ubatch u = {b->n, b->token, b->pos, b->seq, b->out, b->n_out, false, NULL, NULL };
    hx_error e = {0};
    hx_status s = hx_backend_cuda.forward(ctx, &u, logits, hidden, &e);
    CHECKF(s == HX_OK, "forward (%d tokens): %s", b->n, e.msg);
    return s;
}

/* Appends a row of logits to r->rows. */
static void push_row(seq_run *r, const float *row) {
    memcpy(r->rows + (size_t)r->n_rows * V, row, sizeof(float) * V);
    r->n_rows++;
}

/* Runs the sequences runs[0..n) in slots slot[0..n) of ctx: prompts in chunks
 * packed into ubatches of at most n_ubatch tokens (tokens of the chunks
 * interleaved), then STEPS greedy steps with one token of every sequence per
 * ubatch (as many ubatches as n_ubatch needs). Fills rows, hidden and gen. */
static bool run_together(void *ctx, int n_ubatch, seq_run *runs, const int *slot, int n, int n_embd, float *logits,
                         float *hidden) {
    int done[MAXSEQ] = {0};
    for (int i = 0; i < n; i++) runs[i].n_rows = 0;
    for (;;) {
        /* the next chunk of every sequence with prompt left, packed greedily */
        ub b = {0};
        int members[MAXSEQ], nm = 0, take[MAXSEQ];
        for (int i = 0; i < n; i++) {
            if (done[i] >= runs[i].len) continue;
            int k = runs[i].len - done[i] < runs[i].chunk ? runs[i].len - done[i] : runs[i].chunk;
            if (b.n + k > n_ubatch) continue;
            members[nm] = i;
            take[nm++] = k;
            b.n += k;
        }
        if (nm == 0) break;
        /* interleave: token j of each member in turn */
        b.n = 0;
        for (int j = 0; j < 64; j++)
            for (int q = 0; q < nm; q++) {
                int i = members[q];
                if (j >= take[q]) continue;
                int p = done[i] + j;
                bool last = j == take[q] - 1;
                b.token[b.n] = runs[i].prompt[p];
                b.pos[b.n] = p;
                b.seq[b.n] = slot[i];
                b.out[b.n] = wants_all(runs[i].id) || last ? b.n_out : -1;
                if (b.out[b.n] >= 0) b.out_seq[b.n_out++] = i;
                b.n++;
            }
        if (run_ub(ctx, &b, logits, hidden)) return false;
        for (int o = 0; o < b.n_out; o++) {
            int i = b.out_seq[o];
            push_row(&runs[i], logits + (size_t)o * V);
            memcpy(runs[i].hidden, hidden + (size_t)o * n_embd, sizeof(float) * n_embd);
        }
        for (int q = 0; q < nm; q++) done[members[q]] += take[q];
    }
    for (int i = 0; i < n; i++) runs[i].gen[0] = hx_argmax(runs[i].rows + (size_t)(runs[i].n_rows - 1) * V, V);
    for (int step = 0; step < STEPS; step++) {
        for (int i0 = 0; i0 < n; i0 += n_ubatch) {
            ub b = {0};
            for (int i = i0; i < n && i < i0 + n_ubatch; i++) {
                b.token[b.n] = runs[i].gen[step];
                b.pos[b.n] = runs[i].len + step;
                b.seq[b.n] = slot[i];
                b.out[b.n] = b.n_out;
                b.out_seq[b.n_out++] = i;
                b.n++;
            }
            if (run_ub(ctx, &b, logits, NULL)) return false;
            for (int o = 0; o < b.n_out; o++) push_row(&runs[b.out_seq[o]], logits + (size_t)o * V);
        }
        for (int i = 0; i < n; i++) runs[i].gen[step + 1] = hx_argmax(runs[i].rows + (size_t)(runs[i].n_rows - 1) * V, V);
    }
    return true;
}

/* The gap between the two largest of row[0..n) relative to max |row|. */
static double top2_gap(const float *row, int n) {
    float a = -INFINITY, b = -INFINITY, mx = 0;
    for (int i = 0; i < n; i++) {
        if (row[i] > a) { b = a; a = row[i]; } else if (row[i] > b) b = row[i];
        if (fabsf(row[i]) > mx) mx = fabsf(row[i]);
    }
    return mx > 0 ? (a - b) / mx : 0;
}

static int g_ties; /* sequences whose comparison stopped at a near-tie */

/* Compares two runs of one sequence: greedy tokens equal, every row within tol
 * (tol > TOL: a greedy token may differ at a near-tie of want's; rows are
 * compared up to there). */
static void compare_runs_tol(const char *what, int s, const seq_run *got, const seq_run *want, int n_embd, double tol) {
    CHECKF(got->n_rows == want->n_rows, "%s: seq %d: %d rows vs %d", what, s, got->n_rows, want->n_rows);
    int same = 0;
    while (same < STEPS + 1 && got->gen[same] == want->gen[same]) same++;
    int rows = got->n_rows < want->n_rows ? got->n_rows : want->n_rows;
    if (same < STEPS + 1 && tol > TOL) {
        /* gen[k] is the argmax of row n_rows - 1 - STEPS + k */
        int r = want->n_rows - 1 - STEPS + same;
        double gap = r >= 0 && r < want->n_rows ? top2_gap(want->rows + (size_t)r * V, V) : 1;
        CHECKF(gap <= tol, "%s: seq %d: greedy tokens differ at step %d (%d vs %d) without a near-tie (gap %.3g)",
               what, s, same, got->gen[same], want->gen[same], gap);
        if (gap <= tol) { g_ties++; same = STEPS + 1; rows = r + 1; }
    }
    CHECKF(same == STEPS + 1, "%s: seq %d: greedy tokens differ at step %d (%d vs %d)", what, s, same,
           same <= STEPS ? got->gen[same] : -1, same <= STEPS ? want->gen[same] : -1);
    double worst = 0;
    for (int r = 0; r < rows; r++) {
        double d = rel_diff(got->rows + (size_t)r * V, want->rows + (size_t)r * V, V);
        if (d > worst) worst = d;
    }
    double dh = rel_diff(got->hidden, want->hidden, n_embd);
    if (worst > g_worst) g_worst = worst;
    if (dh > g_worst) g_worst = dh;
    CHECKF(worst <= tol, "%s: seq %d: logits differ by %.3g of the largest", what, s, worst);
    CHECKF(dh <= tol, "%s: seq %d: hidden states differ by %.3g", what, s, dh);
}

/* Clears slot `slot` and prefills r's prompt into it in r's chunks (no outputs). */
static bool prefill(void *ctx, int slot, const seq_run *r) {
    CHECK(hx_backend_cuda.seq_keep(ctx, slot, 0) == 0);
    for (int at = 0; at < r->len; at += r->chunk) {
        int k = r->len - at < r->chunk ? r->len - at : r->chunk;
        ub b = {0};
        for (int j = 0; j < k; j++) {
            b.token[j] = r->prompt[at + j];
            b.pos[j] = at + j;
            b.seq[j] = slot;
            b.out[j] = -1;
        }
        b.n = k;
        if (run_ub(ctx, &b, NULL, NULL)) return false;
    }
    return true;
}

/* decode_greedy from the end of the prompt (prefilled in the same chunks) gives r's greedy tokens. */
static void check_greedy(void *ctx1, const seq_run *r, const char *what) {
    hx_error e = {0};
    if (!prefill(ctx1, 0, r)) return;
    int32_t tok = r->gen[0];
    int same = 0;
    for (int step = 0; step < STEPS; step++) {
        int32_t next = -1;
        hx_status s = hx_backend_cuda.decode_greedy(ctx1, 0, tok, r->len + step, &next, &e);
        CHECKF(s == HX_OK, "%s: decode_greedy: %s", what, e.msg);
        if (s) return;
        if (next == r->gen[step + 1] && same == step) same++;
        tok = next;
    }
    CHECKF(hx_backend_cuda.finish(ctx1, &e) == HX_OK, "finish: %s", e.msg);
    CHECKF(same == STEPS, "%s: decode_greedy differs from the forward's greedy tokens at step %d", what, same);
}

/* One more decode step of slots a and b (same token, same position) in one
 * ubatch: their logits must be equal (b holds a copy of a's cache). */
static void check_twins(void *ctx, int a, int b, int32_t tok, int pos, const char *what, float *logits) {
    ub u = {0};
    u.n = 2;
    u.n_out = 2;
    u.token[0] = u.token[1] = tok;
    u.pos[0] = u.pos[1] = pos;
    u.seq[0] = a;
    u.seq[1] = b;
    u.out[0] = 0;
    u.out[1] = 1;
    if (run_ub(ctx, &u, logits, NULL)) return;
    double d = rel_diff(logits + V, logits, V);
    if (d > g_worst) g_worst = d;
    CHECKF(d <= TOL, "%s: slot %d vs slot %d: logits differ by %.3g", what, b, a, d);
}

/* B = 2, 8, 32 and 128 sequences decoding together (ubatches of up to 128
 * tokens, or the case's ubatch with a ring) against each alone. */
static void test_big(const hx_model *m, const model_case *mc, float *logits, float *hidden) {
    const int D = m->cfg.n_embd, ubatch = mc->window > 0 ? mc->n_ubatch : MAXSEQ;
    model_case big = *mc;
    big.n_ubatch = ubatch;
    seq_run *multi = calloc(MAXSEQ, sizeof *multi), *alone = calloc(MAXSEQ, sizeof *alone);
    void *ctx = NULL, *ctx1 = NULL;
    if (!multi || !alone) { CHECK(0); goto out; }
    for (int s = 0; s < MAXSEQ; s++) {
        multi[s].rows = malloc(sizeof(float) * V * (64 + STEPS));
        alone[s].rows = malloc(sizeof(float) * V * (64 + STEPS));
        if (!multi[s].rows || !alone[s].rows) { CHECK(0); goto out; }
        hx_rng r;
        hx_rng_seed(&r, 1000 + (uint64_t)s);
        multi[s].id = alone[s].id = s;
        multi[s].len = alone[s].len = 2 + (5 * s) % 23;
        multi[s].chunk = alone[s].chunk = 1 + s % 4;
        for (int i = 0; i < multi[s].len; i++)
            multi[s].prompt[i] = alone[s].prompt[i] = (int32_t)(1 + hx_rng_u64(&r) % (V - 1));
    }
    ctx = new_ctx(m, MAXSEQ, &big, &F32);
    ctx1 = new_ctx(m, 1, &big, &F32);
    if (!ctx || !ctx1) goto out;
    for (int s = 0; s < MAXSEQ; s++) {
        int slot0 = 0;
        CHECK(hx_backend_cuda.seq_keep(ctx1, 0, 0) == 0);
        if (!run_together(ctx1, ubatch, &alone[s], &slot0, 1, D, logits, hidden)) goto out;
    }
    static const int BS[] = {2, 8, 32, MAXSEQ};
    for (int k = 0; k < 4; k++) {
        int n = BS[k], slot[MAXSEQ];
        for (int i = 0; i < n; i++) slot[i] = (i * 37 + 11) % MAXSEQ;
        for (int s = 0; s < MAXSEQ; s++) hx_backend_cuda.seq_keep(ctx, s, 0);
        if (!run_together(ctx, ubatch, multi, slot, n, D, logits, hidden)) goto out;
        char what[96];
        snprintf(what, sizeof what, "%s, %d together (ubatch %d)", mc->preset, n, ubatch);
        for (int i = 0; i < n; i++) compare_runs_tol(what, i, &multi[i], &alone[i], D, TOL_BATCH);
    }
    /* production settings (q8 activations: the tile kernel at 2), 2 and 32 together */
    hx_backend_cuda.ctx_free(ctx);
    ctx = new_ctx(m, MAXSEQ, &big, NULL);
    if (!ctx) goto out;
    for (int k = 0; k < 3; k += 2) {
        int n = BS[k], slot[MAXSEQ];
        for (int i = 0; i < n; i++) slot[i] = (i * 37 + 11) % MAXSEQ;
        if (!run_together(ctx, ubatch, multi, slot, n, D, logits, hidden)) goto out;
        char what[96];
        snprintf(what, sizeof what, "%s, %d together, q8 activations", mc->preset, n);
        for (int i = 0; i < n; i++) compare_runs_tol(what, i, &multi[i], &alone[i], D, TOL_Q8);
        for (int s = 0; s < n; s++) hx_backend_cuda.seq_keep(ctx, slot[s], 0);
    }
    printf("%s: 2..%d sequences together, ubatch %d: largest relative difference so far %.3g, near-ties %d\n",
           mc->preset, MAXSEQ, ubatch, g_worst, g_ties);
out:
    if (ctx) hx_backend_cuda.ctx_free(ctx);
    if (ctx1) hx_backend_cuda.ctx_free(ctx1);
    for (int s = 0; multi && alone && s < MAXSEQ; s++) { free(multi[s].rows); free(alone[s].rows); }
    free(multi); free(alone);
}

static void test_model(const model_case *mc, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.gguf", dir, mc->preset);
    hx_synth_opts so = {.preset = hx_preset_find(mc->preset), .mix = mc->mix, .seed = 7, .n_layer = mc->n_layer,
                        .n_vocab = V, .n_threads = 0};
    hx_error e = {0};
    if (!so.preset || hx_synth_write(&so, path, &e) != HX_OK) { CHECKF(0, "synth %s: %s", mc->preset, e.msg); return; }
    hx_model *m = NULL;
    if (hx_model_load(path, NULL, &m, &e) != HX_OK) { CHECKF(0, "load %s: %s", path, e.msg); return; }
    if (mc->window > 0) m->cfg.sliding_window = mc->window;
    const int D = m->cfg.n_embd;
    CHECK(m->cfg.n_vocab == V && D <= 4096);
    seq_run *multi = calloc(NSEQ, sizeof *multi), *alone = calloc(NSEQ, sizeof *alone);
    float *logits = malloc(sizeof(float) * V * 256), *hidden = malloc(sizeof(float) * (size_t)D * 256);
    void *ctx = NULL, *ctx1 = NULL, *ctx1n = NULL;
    hx_cuda_dev_opts no_ahead = {.no_ahead = true, .mvq = -1};
    if (!multi || !alone || !logits || !hidden) { CHECK(0); goto out; }
    for (int s = 0; s < NSEQ; s++) {
        size_t rows = (size_t)64 + STEPS;
        multi[s].rows = malloc(sizeof(float) * V * rows);
        alone[s].rows = malloc(sizeof(float) * V * rows);
        if (!multi[s].rows || !alone[s].rows) { CHECK(0); goto out; }
        hx_rng r;
        hx_rng_seed(&r, 100 + (uint64_t)s);
        multi[s].id = alone[s].id = s;
        multi[s].len = alone[s].len = 3 + (7 * s) % 29;
        multi[s].chunk = alone[s].chunk = 1 + s % 5;
        for (int i = 0; i < multi[s].len; i++)
            multi[s].prompt[i] = alone[s].prompt[i] = (int32_t)(1 + hx_rng_u64(&r) % (V - 1));
    }
    ctx = new_ctx(m, NSEQ, mc, &F32);
    ctx1 = new_ctx(m, 1, mc, &F32);
    ctx1n = new_ctx(m, 1, mc, &no_ahead);
    if (!ctx || !ctx1 || !ctx1n) goto out;
    {
        /* the cache: NSEQ slots of every layer's rows, K and V, f16 */
        size_t want = 0;
        for (int l = 0; l < m->cfg.n_layer; l++)
            want += 2 * (size_t)hx_kv_layer_rows(&m->cfg, l, NCTX, mc->n_ubatch) * m->cfg.n_head_kv * m->cfg.head_dim * 2;
        CHECKF(hx_backend_cuda.kv_bytes(ctx) == NSEQ * want, "kv_bytes %zu, want %zu", hx_backend_cuda.kv_bytes(ctx),
               NSEQ * want);
        CHECK(hx_backend_cuda.device_bytes_in_use(ctx) > hx_backend_cuda.kv_bytes(ctx));
    }
    /* each sequence alone (one slot), the same chunks */
    for (int s = 0; s < NSEQ; s++) {
        int slot0 = 0;
        CHECK(hx_backend_cuda.seq_keep(ctx1, 0, 0) == 0);
        if (!run_together(ctx1, mc->n_ubatch, &alone[s], &slot0, 1, D, logits, hidden)) goto out;
    }
    /* 1, 5 and 16 together: slots in a scrambled order (sequence i in slot perm[i]) */
    static const int NS[] = {1, 5, NSEQ};
    for (int k = 0; k < 3; k++) {
        int n = NS[k], slot[NSEQ];
        for (int i = 0; i < n; i++) slot[i] = (i * 7 + 3) % NSEQ;
        for (int s = 0; s < NSEQ; s++) hx_backend_cuda.seq_keep(ctx, s, 0);
        if (!run_together(ctx, mc->n_ubatch, multi, slot, n, D, logits, hidden)) goto out;
        char what[64];
        snprintf(what, sizeof what, "%s, %d together", mc->preset, n);
        for (int i = 0; i < n; i++) compare_runs_tol(what, i, &multi[i], &alone[i], D, n > 1 ? TOL_BATCH : TOL);
    }
    /* the fast path alone: decode_greedy with the lookahead, and without it */
    for (int s = 0; s < NSEQ; s += 5) {
        check_greedy(ctx1, &alone[s], mc->preset);
        check_greedy(ctx1n, &alone[s], "no_ahead");
    }
    {
        /* after the 16: sequence i in slot (i * 7 + 3) % 16 holds len + STEPS positions (its last token not yet
           run). seq_copy of a whole sequence, and a state saved and restored, continue as the original. */
        int a = 3, b = 6; /* sequence 0's slot, copied over sequence 5's */
        int n = multi[0].len + STEPS;
        CHECKF(hx_backend_cuda.seq_copy(ctx, a, b, n, &e) == HX_OK, "seq_copy: %s", e.msg);
        check_twins(ctx, a, b, multi[0].gen[STEPS], n, "seq_copy", logits);
        int c = (1 * 7 + 3) % NSEQ, d = 13; /* sequence 1's slot, restored over sequence 6's */
        int n1 = multi[1].len + STEPS;
        size_t sz = hx_backend_cuda.seq_state_size(ctx, n1);
        uint8_t *buf = malloc(sz ? sz : 1);
        CHECK(buf != NULL);
        if (buf) {
            memset(buf, 0xa5, sz);
            CHECKF(hx_backend_cuda.seq_read(ctx, c, n1, buf, &e) == HX_OK, "seq_read: %s", e.msg);
            CHECKF(hx_backend_cuda.seq_write(ctx, d, n1, buf, &e) == HX_OK, "seq_write: %s", e.msg);
            check_twins(ctx, c, d, multi[1].gen[STEPS], n1, "seq_read/seq_write", logits);
        }
        free(buf);
        /* a bad ubatch (a gap in sequence 2's positions) fails and changes nothing: sequence 2 then continues as
           before */
        int s2 = (2 * 7 + 3) % NSEQ, p2 = multi[2].len + STEPS;
        ub bad = {0};
        bad.n = 2;
        bad.token[0] = bad.token[1] = multi[2].gen[STEPS];
        bad.seq[0] = bad.seq[1] = s2;
        bad.pos[0] = p2;
        bad.pos[1] = p2 + 2;
        bad.out[0] = bad.out[1] = -1;
        hx_ubatch u = {bad.n, bad.token, bad.pos, bad.seq, bad.out, 0, false, NULL, NULL };
        CHECK(hx_backend_cuda.forward(ctx, &u, NULL, NULL, &e) == HX_ERR_ARG);
        bad.seq[1] = NSEQ; /* a sequence out of range */
        bad.pos[1] = 0;
        CHECK(hx_backend_cuda.forward(ctx, &u, NULL, NULL, &e) == HX_ERR_ARG);
        /* keep the prompt of sequence 2 and decode again: the same logits as the first time (a ring may have
           lost what the prompt's end needs: then keep says 0 and the sequence is run again from 0) */
        int kept = hx_backend_cuda.seq_keep(ctx, s2, multi[2].len);
        CHECK(kept == multi[2].len || (mc->window > 0 && kept == 0));
        seq_run again = multi[2];
        again.rows = malloc(sizeof(float) * V * (64 + STEPS));
        if (again.rows) {
            if (kept == 0) {
                if (run_together(ctx, mc->n_ubatch, &again, &s2, 1, D, logits, hidden))
                    compare_runs_tol("seq_keep to 0 + run again", 2, &again, &multi[2], D, TOL_BATCH);
            } else {
                again.n_rows = 0;
                for (int step = 0; step < STEPS; step++) {
                    ub one = {0};
                    one.n = one.n_out = 1;
                    one.token[0] = multi[2].gen[step];
                    one.pos[0] = multi[2].len + step;
                    one.seq[0] = s2;
                    one.out[0] = 0;
                    if (run_ub(ctx, &one, logits, NULL)) break;
                    push_row(&again, logits);
                    again.gen[step + 1] = hx_argmax(logits, V);
                }
                /* compare against the decode rows of the first run (the last STEPS rows) */
                seq_run tail = multi[2];
                tail.rows = multi[2].rows + (size_t)(multi[2].n_rows - STEPS) * V;
                tail.n_rows = STEPS;
                compare_runs_tol("seq_keep + decode", 2, &again, &tail, D, TOL_BATCH);
            }
            free(again.rows);
        }
    }
    {
        /* decode_greedy on two slots of the many-sequence context, alternating (each call drops the other's
           lookahead): each gives its sequence's greedy tokens */
        int sa = 4, sb = 9, ia = 3, ib = 4;
        if (prefill(ctx, sa, &alone[ia]) && prefill(ctx, sb, &alone[ib])) {
            int32_t ta = alone[ia].gen[0], tb = alone[ib].gen[0];
            int same_a = 0, same_b = 0;
            for (int step = 0; step < STEPS; step++) {
                int32_t na = -1, nb = -1;
                CHECKF(hx_backend_cuda.decode_greedy(ctx, sa, ta, alone[ia].len + step, &na, &e) == HX_OK, "%s", e.msg);
                CHECKF(hx_backend_cuda.decode_greedy(ctx, sb, tb, alone[ib].len + step, &nb, &e) == HX_OK, "%s", e.msg);
                if (na == alone[ia].gen[step + 1] && same_a == step) same_a++;
                if (nb == alone[ib].gen[step + 1] && same_b == step) same_b++;
                ta = na;
                tb = nb;
            }
            CHECKF(same_a == STEPS && same_b == STEPS, "%s: alternating decode_greedy: %d and %d of %d steps equal",
                   mc->preset, same_a, same_b, STEPS);
        }
        CHECKF(hx_backend_cuda.finish(ctx, &e) == HX_OK, "finish: %s", e.msg);
    }
    {
        /* without graphs (hx_cuda_dev_opts.no_graph): 5 together, as alone (multi[] is reused) */
        hx_cuda_dev_opts no_graph = {.no_graph = true, .mvq = -1};
        void *ctxg = new_ctx(m, NSEQ, mc, &no_graph);
        int slot[5] = {2, 9, 0, 15, 6};
        if (ctxg && run_together(ctxg, mc->n_ubatch, multi, slot, 5, D, logits, hidden))
            for (int i = 0; i < 5; i++) compare_runs_tol("no_graph, 5 together", i, &multi[i], &alone[i], D, TOL_BATCH);
        if (ctxg) hx_backend_cuda.ctx_free(ctxg);
    }
    printf("%s: %d layers, window %d, ubatch %d: largest relative difference %.3g\n", mc->preset, m->cfg.n_layer,
           m->cfg.sliding_window, mc->n_ubatch, g_worst);
    test_big(m, mc, logits, hidden);
out:
    if (ctx) hx_backend_cuda.ctx_free(ctx);
    if (ctx1) hx_backend_cuda.ctx_free(ctx1);
    if (ctx1n) hx_backend_cuda.ctx_free(ctx1n);
    for (int s = 0; multi && alone && s < NSEQ; s++) { free(multi[s].rows); free(alone[s].rows); }
    free(multi); free(alone); free(logits); free(hidden);
    hx_model_free(m);
    unlink(path);
}
#endif

int main(void) {
#ifndef HX_HAVE_CUDA
    printf("SKIP: this build has no CUDA backend\n");
    return 77;
#else
    int n = 0;
    hx_error e = {0};
    if (hx_cuda_device_count(&n, &e) != HX_OK) { printf("SKIP: %s\n", e.msg); return 77; }
    char dir[] = "/tmp/hx_cuda_seq_XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    static const model_case cases[] = {
        {"qwen3-0.6b", HX_MIX_Q4_K_M, 3, 0, 32},
        {"gemma-3-1b", HX_MIX_Q8_0, 6, 16, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) test_model(&cases[i], dir);
    rmdir(dir);
    return t_done("test_cuda_seq");
#endif
}
