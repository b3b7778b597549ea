/* test_multiseq.c — the CPU backend table (api/backend.h) with many sequences
 * in one forward: ubatches that mix prefill chunks of some sequences with
 * decode steps of others, interleaved in the batch.
 *
 * Checks (exact f32 path, f32 KV cache):
 *  - for 1..64 sequences of different prompt lengths decoded together, every
 *    sequence's greedy tokens equal the same sequence decoded alone, and its
 *    logits agree within 1e-4 (max abs);
 *  - seq_keep then new tokens equals recomputing the kept prefix + the new
 *    tokens from scratch (and a keep past a sliding window's ring returns 0);
 *  - seq_copy'd prefix + continuation equals computing it from scratch, while
 *    the source sequence goes on unchanged in the same batch;
 *  - seq_read / seq_write round trip into another context (bit-identical
 *    continuation), and bad states are refused;
 *  - bad ubatches are refused without touching the cache;
 *  - per-layer dumps come from hx_backend_dev and cover sequence 0 only (its
 *    final dump is the hidden state the forward returns).
 * Models: synthetic tiny llama and gemma3 (window 8, 6 layers: 5 sliding +
 * 1 global; prompts up to 40 tokens, longer than the window) made with
 * model/synth.h so the test always runs, and the ref-tiny models of ../shared
 * when present. The parity mode (f16 cache, llama.cpp rounding) runs one mixed
 * case with a loose tolerance: its mixed batches take the per-query attention
 * while a lone sequence of 64+ tokens takes the tiled one. */
#include "test_util.h"

#include <dirent.h>
#include <unistd.h>

#include "api/backend.h"
#include "core/core.h"
#include "model/synth.h"

enum { MAXS = 64, G = 6 };

static const hx_backend *B = &hx_backend_cpu;

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) if (x[i] > x[b]) b = i;
    return b;
}

static double max_abs(const float *a, const float *b, size_t n) {
    double w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > w || d != d) w = d != d ? INFINITY : d;
    }
    return w;
}

typedef struct setup {
    const hx_model *m;
    hx_backend_params p;
    int V;
} setup;

static void *new_ctx(const setup *s, int n_seq) {
    hx_backend_params p = s->p;
    p.n_seq = n_seq;
    void *c = NULL;
    hx_error e = {0};
    if (B->ctx_new(s->m, &p, &c, &e) != HX_OK) {
        fprintf(stderr, "ctx_new: %s\n", e.msg);
        t_failures++;
        return NULL;
    }
    return c;
}

/* Tokens toks[0..n) at positions pos.. of sequence seq, in ubatches of at most
 * n_ubatch; logits of the last n_last tokens into out (n_last rows). */
static hx_status feed(const setup *s, void *c, int seq, const int32_t *toks, int n, int pos, int n_last, float *out) {
    int U = s->p.n_ubatch;
    int32_t ps[512], sq[512], o[512];
    for (int at = 0; at < n; at += U) {
        int k = n - at < U ? n - at : U, n_out = 0;
        for (int i = 0; i < k; i++) {
            ps[i] = pos + at + i;
            sq[i] = seq;
            o[i] = at + i >= n - n_last ? n_out++ : -1;
        }
        int first_row = at > n - n_last ? at - (n - n_last) : 0;
        hx_ubatch ub = { k, toks + at, ps, sq, o, n_out, false, NULL, NULL };
        hx_error e = {0};
        hx_status st = B->forward(c, &ub, n_out ? out + (size_t)first_row * s->V : NULL, NULL, &e);
        if (st) { fprintf(stderr, "forward: %s\n", e.msg); return st; }
    }
    return HX_OK;
}

/* From scratch in a fresh one-sequence context: logits of the last n_last tokens. */
static void compute(const setup *s, const int32_t *toks, int n, int n_last, float *out) {
    void *c = new_ctx(s, 1);
    if (!c) return;
    CHECK(feed(s, c, 0, toks, n, 0, n_last, out) == HX_OK);
    B->ctx_free(c);
}

/* One sequence's prompt and what it generated. */
typedef struct seqrec {
    int32_t hist[128];   /* prompt, then the generated tokens */
    int plen;
    int32_t toks[G];     /* greedy tokens */
    float *logits;       /* (G, V): after the prompt, then after each fed token */
} seqrec;

/* Prompt of sequence k: lengths from 1 to max_p, tokens spread over the vocabulary. */
static void make_prompt(seqrec *r, int k, int max_p, int V) {
    r->plen = 1 + (k * 13 + 5) % max_p;
    for (int i = 0; i < r->plen; i++) r->hist[i] = (int32_t)((7 + (uint32_t)k * 131 + (uint32_t)i * 7919) % (uint32_t)V);
}

/* Sequence k alone: prompt, then G greedy tokens (G logits rows). */
static void decode_alone(const setup *s, seqrec *r) {
    void *c = new_ctx(s, 1);
    if (!c) return;
    CHECK(feed(s, c, 0, r->hist, r->plen, 0, 1, r->logits) == HX_OK);
    for (int g = 0; g < G; g++) {
        r->toks[g] = argmax(r->logits + (size_t)g * s->V, s->V);
        r->hist[r->plen + g] = r->toks[g];
        if (g + 1 < G) CHECK(feed(s, c, 0, &r->toks[g], 1, r->plen + g, 1, r->logits + (size_t)(g + 1) * s->V) == HX_OK);
    }
    B->ctx_free(c);
}

/* A piece of one sequence in a ubatch: count tokens from position start. */
typedef struct chunk { int seq, start, count; bool out_last; const int32_t *toks; } chunk;

/* S sequences together: each round fills a ubatch of up to n_ubatch tokens
 * with prefill chunks (of varying size) and decode steps, the chunks'
 * tokens interleaved round-robin. Returns the context (its sequences hold
 * prompt + G-1 generated tokens). */
static void *decode_together(const setup *s, int S, seqrec *got) {
    void *c = new_ctx(s, S);
    if (!c) return NULL;
    int U = s->p.n_ubatch, V = s->V;
    int fed[MAXS] = {0}, gen[MAXS] = {0};
    int32_t tok[512], pos[512], seq[512], out[512];
    int owner[512];
    float *lo = malloc(sizeof(float) * (size_t)U * V);
    for (int round = 0; ; round++) {
        chunk ch[MAXS];
        int nch = 0, budget = U;
        for (int k = 0; k < S && budget > 0; k++) {
            int q = (k + round) % S;
            seqrec *r = &got[q];
            if (fed[q] < r->plen) {
                int cap = 1 + (q * 7 + round * 3) % 11, left = r->plen - fed[q];
                int cnt = left < cap ? left : cap;
                if (cnt > budget) cnt = budget;
                ch[nch++] = (chunk){ q, fed[q], cnt, fed[q] + cnt == r->plen, r->hist + fed[q] };
                fed[q] += cnt;
                budget -= cnt;
            } else if (gen[q] >= 1 && gen[q] < G && fed[q] == r->plen + gen[q] - 1) {
                ch[nch++] = (chunk){ q, fed[q], 1, true, &r->toks[gen[q] - 1] };
                fed[q]++;
                budget--;
            }
        }
        if (nch == 0) break;
        int n = 0, n_out = 0, taken[MAXS] = {0};
        for (bool more = true; more;) { /* round-robin over the chunks */
            more = false;
            for (int i = 0; i < nch; i++) {
                if (taken[i] == ch[i].count) continue;
                int t = taken[i]++;
                tok[n] = ch[i].toks[t];
                pos[n] = ch[i].start + t;
                seq[n] = ch[i].seq;
                out[n] = t == ch[i].count - 1 && ch[i].out_last ? n_out++ : -1;
                owner[n] = ch[i].seq;
                n++;
                more = true;
            }
        }
        hx_ubatch ub = { n, tok, pos, seq, out, n_out, false, NULL, NULL };
        hx_error e = {0};
        hx_status st = B->forward(c, &ub, lo, NULL, &e);
        CHECKF(st == HX_OK, "forward of %d tokens: %s", n, e.msg);
        if (st) break;
        for (int i = 0; i < n; i++) {
            if (out[i] < 0) continue;
            seqrec *r = &got[owner[i]];
            int g = gen[owner[i]]++;
            memcpy(r->logits + (size_t)g * V, lo + (size_t)out[i] * V, sizeof(float) * V);
            r->toks[g] = argmax(lo + (size_t)out[i] * V, V);
            r->hist[r->plen + g] = r->toks[g];
        }
    }
    free(lo);
    return c;
}

/* The sequence holding the most positions, other than `not`. */
static int longest(const seqrec *got, int S, int not) {
    int best = not == 0 ? 1 : 0;
    for (int q = 0; q < S; q++)
        if (q != not && got[q].plen > got[best].plen) best = q;
    return best;
}

/* Keep, copy, state and bad-batch checks on the context decode_together left
 * (sequences hold hist[0 .. plen + G - 1)). */
static void test_seq_ops(const setup *s, void *c, int S, seqrec *got, bool ring) {
    int V = s->V;
    float *a = malloc(sizeof(float) * 8 * V), *b = malloc(sizeof(float) * 8 * V);
    int32_t h[160];
    /* keep a little: the rings still hold the window */
    for (int q = 0; q < S; q += 5) {
        seqrec *r = &got[q];
        int L = r->plen + G - 1, keep = L - 3;
        CHECKF(B->seq_keep(c, q, keep) == keep, "seq_keep(%d, %d)", q, keep);
        memcpy(h, r->hist, sizeof(int32_t) * keep);
        for (int i = 0; i < 5; i++) h[keep + i] = (int32_t)((q * 31 + i * 17 + 3) % V);
        CHECK(feed(s, c, q, h + keep, 5, keep, 5, a) == HX_OK);
        compute(s, h, keep + 5, 5, b);
        double d = max_abs(a, b, (size_t)5 * V);
        CHECKF(d <= 1e-4, "seq %d keep %d + 5 vs recomputed: %g", q, keep, d);
        memcpy(r->hist + keep, h + keep, sizeof(int32_t) * 5); /* sequence now holds keep + 5 */
        r->plen = keep + 5 - (G - 1);                           /* so that plen + G - 1 is its length */
    }
    /* keep far back: past the ring it drops everything */
    {
        int q = longest(got, S, -1);
        seqrec *r = &got[q];
        int L = r->plen + G - 1, keep = L - 30;
        if (keep > 0) {
            int kept = B->seq_keep(c, q, keep);
            CHECKF(kept == (ring ? 0 : keep), "seq_keep(%d, %d) of %d: %d (ring %d)", q, keep, L, kept, ring);
            CHECK(feed(s, c, q, r->hist + kept, keep + 2 - kept, kept, 2, a) == HX_OK);
            compute(s, r->hist, keep + 2, 2, b);
            double d = max_abs(a, b, (size_t)2 * V);
            CHECKF(d <= 1e-4, "seq %d keep %d (kept %d) vs recomputed: %g", q, keep, kept, d);
            r->plen = keep + 2 - (G - 1);
        }
    }
    /* copy a prefix of src to dst; continue dst with new tokens and src with
     * its own next token in the same ubatch */
    if (S >= 2) {
        int src = longest(got, S, -1), dst = longest(got, S, src);
        seqrec *r = &got[src];
        int L = r->plen + G - 1, n = L - 2;
        hx_error e = {0};
        CHECKF(B->seq_copy(c, src, dst, n, &e) == HX_OK, "seq_copy: %s", e.msg);
        int32_t tok[5], pos[5], sq[5], out[5];
        int32_t next = (int32_t)(11 % V);
        for (int i = 0; i < 4; i++) {
            tok[i] = (int32_t)((5 + i * 101) % V); pos[i] = n + i; sq[i] = dst; out[i] = i;
            h[n + i] = tok[i];
        }
        tok[4] = next; pos[4] = L; sq[4] = src; out[4] = 4;
        hx_ubatch ub = { 5, tok, pos, sq, out, 5, false, NULL, NULL };
        CHECKF(B->forward(c, &ub, a, NULL, &e) == HX_OK, "forward after copy: %s", e.msg);
        memcpy(h, r->hist, sizeof(int32_t) * n);
        compute(s, h, n + 4, 4, b);
        double d = max_abs(a, b, (size_t)4 * V);
        CHECKF(d <= 1e-4, "copied prefix %d + 4 vs recomputed: %g", n, d);
        memcpy(h, r->hist, sizeof(int32_t) * L);
        h[L] = next;
        compute(s, h, L + 1, 1, b);
        d = max_abs(a + (size_t)4 * V, b, V);
        CHECKF(d <= 1e-4, "copy source after the copy vs recomputed: %g", d);
        r->hist[L] = next;
        r->plen++;
        /* a prefix far before a sliding window's end is gone */
        if (ring && L - 30 > 0) {
            int st = B->seq_copy(c, src, dst, L - 30, &e);
            CHECKF(st == HX_ERR_RANGE, "copy of a prefix the ring dropped: %d", st);
        }
        CHECK(B->seq_copy(c, src, dst, L + 5, &e) == HX_ERR_RANGE);
        CHECK(B->seq_copy(c, src, S, L - 1, &e) == HX_ERR_ARG);
    }
    /* state round trip into another context */
    {
        int q = S / 2;
        seqrec *r = &got[q];
        int L = r->plen + G - 1;
        size_t sz = B->seq_state_size(c, L);
        uint8_t *buf = malloc(sz);
        hx_error e = {0};
        CHECKF(B->seq_read(c, q, L, buf, &e) == HX_OK, "seq_read: %s", e.msg);
        void *c2 = new_ctx(s, 4);
        if (c2) {
            CHECKF(B->seq_write(c2, 3, L, buf, &e) == HX_OK, "seq_write: %s", e.msg);
            int32_t t = (int32_t)(17 % V);
            CHECK(feed(s, c2, 3, &t, 1, L, 1, a) == HX_OK);
            CHECK(feed(s, c, q, &t, 1, L, 1, b) == HX_OK);
            CHECKF(memcmp(a, b, sizeof(float) * V) == 0, "state round trip: continuation differs (%g)", max_abs(a, b, V));
            CHECK(B->seq_write(c2, 3, L - 1, buf, &e) == HX_ERR_FORMAT); /* length mismatch */
            buf[0] ^= 1;
            CHECK(B->seq_write(c2, 2, L, buf, &e) == HX_ERR_FORMAT);     /* bad magic */
            buf[0] ^= 1;
            B->ctx_free(c2);
        }
        hx_backend_params p16 = s->p;
        p16.kv_f32 = !p16.kv_f32;
        p16.n_seq = 1;
        void *c3 = NULL;
        if (B->ctx_new(s->m, &p16, &c3, &e) == HX_OK) {
            CHECK(B->seq_write(c3, 0, L, buf, &e) == HX_ERR_FORMAT);  /* other cache type */
            B->ctx_free(c3);
        }
        CHECK(B->seq_read(c, q, L + 2, buf, &e) == HX_ERR_RANGE);
        free(buf);
    }
    /* bad ubatches are refused and change nothing */
    {
        int q = S - 1;
        seqrec *r = &got[q];
        int L = r->plen + G - 1;
        int32_t tok[2] = { 1, 2 }, pos[2] = { L, L + 1 }, sq[2] = { q, S }, out[2] = { -1, 0 };
        hx_ubatch ub = { 2, tok, pos, sq, out, 1, false, NULL, NULL };
        hx_error e = {0};
        CHECK(B->forward(c, &ub, a, NULL, &e) == HX_ERR_ARG);  /* sequence out of range */
        sq[1] = q; pos[1] = L + 2;
        CHECK(B->forward(c, &ub, a, NULL, &e) == HX_ERR_ARG);  /* a gap in the positions */
        pos[0] = L + 1; pos[1] = L + 2;
        CHECK(B->forward(c, &ub, a, NULL, &e) == HX_ERR_ARG);  /* past the sequence's length */
        pos[0] = L; pos[1] = L + 1; tok[1] = V;
        CHECK(B->forward(c, &ub, a, NULL, &e) == HX_ERR_ARG);  /* token outside the vocabulary */
        tok[1] = 2; out[0] = 0;
        CHECK(B->forward(c, &ub, a, NULL, &e) == HX_ERR_ARG);  /* two outputs, n_out 1 */
        /* the sequence is intact: its next token agrees with recomputing */
        int32_t t = 9;
        CHECK(feed(s, c, q, &t, 1, L, 1, a) == HX_OK);
        memcpy(h, r->hist, sizeof(int32_t) * L);
        h[L] = t;
        compute(s, h, L + 1, 1, b);
        CHECKF(max_abs(a, b, V) <= 1e-4, "after refused batches: %g", max_abs(a, b, V));
    }
    free(a); free(b);
}

/* The whole set for one model: sequences alone, then 1..64 together. */
static void run_model(const char *name, const hx_model *m, bool exact, int max_p, int ubatch, const int *counts,
                      int n_counts, double tol) {
    setup s = { m, { .n_seq = 1, .n_ctx_seq = 128, .n_ubatch = ubatch, .n_threads = 2, .kv_f32 = exact, .exact = exact },
                m->cfg.n_vocab };
    bool ring = false;
    for (int l = 0; l < m->cfg.n_layer; l++)
        ring |= hx_kv_layer_rows(&m->cfg, l, s.p.n_ctx_seq, s.p.n_ubatch) < s.p.n_ctx_seq;
    int maxS = counts[n_counts - 1];
    seqrec *ref = calloc((size_t)maxS, sizeof *ref), *got = calloc((size_t)maxS, sizeof *got);
    for (int k = 0; k < maxS; k++) {
        ref[k].logits = malloc(sizeof(float) * G * s.V);
        got[k].logits = malloc(sizeof(float) * G * s.V);
        make_prompt(&ref[k], k, max_p, s.V);
        decode_alone(&s, &ref[k]);
    }
    for (int ci = 0; ci < n_counts; ci++) {
        int S = counts[ci];
        for (int k = 0; k < S; k++) {
            float *keep = got[k].logits;
            got[k] = ref[k];
            got[k].logits = keep;
            memset(got[k].logits, 0, sizeof(float) * G * s.V);
        }
        void *c = decode_together(&s, S, got);
        if (!c) continue;
        /* compare up to a sequence's first differing token; the parity mode
         * accepts one at a near-tie (top-2 gap below 2 * tol) */
        int tok_bad = 0, ties = 0;
        double worst = 0;
        for (int k = 0; k < S; k++) {
            int g = 0;
            while (g < G && got[k].toks[g] == ref[k].toks[g]) g++;
            int rows = g < G ? g + 1 : G;
            double d = max_abs(got[k].logits, ref[k].logits, (size_t)rows * s.V);
            if (d > worst) worst = d;
            if (g < G) {
                const float *lr = ref[k].logits + (size_t)g * s.V;
                float top = lr[ref[k].toks[g]], alt = lr[got[k].toks[g]];
                if (!exact && top - alt < 2 * tol) ties++;
                else tok_bad++;
            }
        }
        printf("%-22s %s: %2d sequences together (prompts 1..%d, ubatch %d%s): greedy mismatches %d "
               "(near-ties %d), max |logit diff| %.2e\n", name, exact ? "exact " : "parity", S, max_p,
               s.p.n_ubatch, ring ? ", sliding-window rings" : "", tok_bad, ties, worst);
        CHECKF(tok_bad == 0, "%s: %d sequences: %d greedy tokens differ from decoding alone", name, S, tok_bad);
        CHECKF(worst <= tol, "%s: %d sequences: logits differ by %g (tol %g)", name, S, worst, tol);
        if (S == maxS && exact) {
            size_t one = 0;
            void *c1 = new_ctx(&s, 1);
            if (c1) { one = B->kv_bytes(c1); B->ctx_free(c1); }
            CHECK(B->kv_bytes(c) == one * (size_t)S);
            test_seq_ops(&s, c, S, got, ring);
        }
        B->ctx_free(c);
    }
    for (int k = 0; k < maxS; k++) { free(ref[k].logits); free(got[k].logits); }
    free(ref); free(got);
}

/* Files in dir (removed when clean); -1 when it cannot be read. */
static int count_files(const char *dir, bool clean) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    char p[4096];
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        n++;
        if (clean) { snprintf(p, sizeof p, "%s/%s", dir, de->d_name); unlink(p); }
    }
    closedir(d);
    return n;
}

/* Dumps (hx_backend_dev): sequence 0's positions only, from the options. */
static void test_dumps(const hx_model *m) {
    char dir[] = "/tmp/hx_multiseq_dump_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0); return; }
    int L = m->cfg.n_layer, D = m->cfg.n_embd, V = m->cfg.n_vocab;
    /* seq 1 at positions 0..3, seq 0 at 0..2 (its last one with output), interleaved */
    int32_t tok[7] = { 5, 6, 7, 8, 9, 10, 11 }, pos[7] = { 0, 0, 1, 1, 2, 2, 3 }, sq[7] = { 1, 0, 1, 0, 1, 0, 1 };
    int32_t out[7] = { -1, -1, -1, -1, -1, 0, -1 };
    hx_ubatch ub = { 7, tok, pos, sq, out, 1, false, NULL, NULL };
    float *lo = malloc(sizeof(float) * V), *hid = malloc(sizeof(float) * D);
    for (int pass = 0; pass < 2; pass++) {
        int only = 1;
        hx_backend_params p = { .n_seq = 2, .n_ctx_seq = 16, .n_ubatch = 16, .n_threads = 2, .kv_f32 = true,
                                .exact = true, .dev = { dir, pass ? &only : NULL, pass ? 1 : 0 } };
        void *c = NULL;
        hx_error e = {0};
        CHECKF(B->ctx_new(m, &p, &c, &e) == HX_OK, "ctx_new with dumps: %s", e.msg);
        if (!c) break;
        CHECKF(B->forward(c, &ub, lo, hid, &e) == HX_OK, "forward with dumps: %s", e.msg);
        if (!pass) {
            /* the final dump is the hidden state returned */
            char f[4200];
            snprintf(f, sizeof f, "%s/pos00002-final.f32", dir);
            FILE *fp = fopen(f, "rb");
            float *v = malloc(sizeof(float) * D);
            CHECKF(fp && fseek(fp, 20, SEEK_SET) == 0 && fread(v, sizeof(float), D, fp) == (size_t)D &&
                   memcmp(v, hid, sizeof(float) * D) == 0, "%s: missing or not the hidden state", f);
            if (fp) fclose(fp);
            free(v);
            snprintf(f, sizeof f, "%s/pos00003-L000-input.f32", dir);
            CHECKF(access(f, F_OK) != 0, "sequence 1's position 3 was dumped");
        }
        int want = pass ? 3 * L : 3 * 3 * L + 1, got = count_files(dir, true);
        CHECKF(got == want, "dump pass %d: %d files, expected %d", pass, got, want);
        B->ctx_free(c);
    }
    rmdir(dir);
    free(lo); free(hid);
}

/* A tiny synthetic model of preset-like shape (f32 weights). */
static hx_model *synth_model(const hx_preset *ps, char *path) {
    int fd = mkstemp(path);
    if (fd < 0) { t_failures++; return NULL; }
    close(fd);
    hx_synth_opts o = { .preset = ps, .mix = HX_MIX_F32, .seed = 11, .n_vocab = ps->n_vocab, .n_threads = 2 };
    hx_error e = {0};
    hx_model *m = NULL;
    CHECKF(hx_synth_write(&o, path, &e) == HX_OK, "synth %s: %s", ps->name, e.msg);
    CHECKF(hx_model_load(path, NULL, &m, &e) == HX_OK, "load %s: %s", ps->name, e.msg);
    return m;
}

int main(void) {
    static const int counts[] = { 1, 2, 5, 16, 64 };
    static const int few[] = { 1, 3, 8 };
    /*                     name         arch           embd L  H KV hd ffn vocab ctx rope    swa     eps   tied win pre */
    static const hx_preset llama = { "tiny-llama", HX_ARCH_LLAMA, 64, 2, 4, 2, 16, 128, 384, 256, 10000.f, 0, 1e-5f,
                                     false, 0, "llama-bpe" };
    static const hx_preset gemma = { "tiny-gemma3", HX_ARCH_GEMMA3, 64, 6, 4, 1, 16, 128, 384, 256, 1000000.f,
                                     10000.f, 1e-6f, true, 8, "default" };
    const hx_preset *ps[2] = { &llama, &gemma };
    for (int i = 0; i < 2; i++) {
        char path[] = "/tmp/hx_multiseq_XXXXXX";
        hx_model *m = synth_model(ps[i], path);
        if (m && i == 0) test_dumps(m);
        if (m) {
            run_model(ps[i]->name, m, true, 40, 16, counts, 5, 1e-4);
            run_model(ps[i]->name, m, false, 100, 64, few, 3, 5e-2);
            hx_model_free(m);
        }
        unlink(path);
    }
    const char *shared = t_shared_dir();
    if (!shared) {
        printf("ref-tiny models skipped: ../shared not found (set HX_SHARED)\n");
    } else {
        const char *tiny[] = { "tiny-qwen3-shared", "tiny-llama3-shared", "tiny-gemma3-shared" };
        for (int i = 0; i < 3; i++) {
            char p[1024];
            snprintf(p, sizeof p, "%s/models/ref-tiny/%s.gguf", shared, tiny[i]);
            hx_model *m = NULL;
            hx_error e = {0};
            if (hx_model_load(p, NULL, &m, &e) != HX_OK) {
                printf("%s skipped: %s\n", tiny[i], e.msg);
                continue;
            }
            run_model(tiny[i], m, true, 40, 16, i == 2 ? counts : few, i == 2 ? 5 : 3, 1e-4);
            hx_model_free(m);
        }
    }
    printf("test_multiseq: %d checks, %d failed\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
