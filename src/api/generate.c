/* generate.c — hx_generate (prompt -> streamed text on one sequence, reusing
 * its cached prefix) and hx_classify (labels scored by prefill only). */
#include "api/api.h"
#include "core/core.h"
#include "run/sampler.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

hx_generate_params hx_generate_default_params(void) {
    hx_generate_params p;
    memset(&p, 0, sizeof p);
    p.max_tokens = -1;
    p.sampling = hx_sampler_greedy();
    return p;
}

void hx_generate_result_free(hx_generate_result *r) {
    if (!r) return;
    free(r->text); free(r->ids); free(r->prompt_ids);
    memset(r, 0, sizeof *r);
}

/* Pieces of token ids to decode: seq at positions pos.. ; want: 0 no logits,
 * 1 the last token's, 2 every token's. */
typedef struct seg { int seq, pos, n, want; const int32_t *tok; } seg;
/* Called after each hx_decode of run_segs: batch token i is token who[2i + 1]
 * of segment who[2i]; b->logits[i] says whether it asked for logits. */
typedef hx_status (*seg_fn)(void *user, hx_context *c, const hx_batch *b, const int *who, hx_error *e);

/* Runs the segments in hx_decode calls of at most n_batch tokens (fn after
 * each; may be NULL). Segments of one sequence must follow each other in
 * position order. */
static hx_status run_segs(hx_context *c, hx_batch *b, const seg *sg, int n_seg, seg_fn fn, void *user, hx_error *e) {
    int *who = malloc(sizeof(int) * 2 * (size_t)b->capacity);
    if (!who) return hx_err(e, HX_ERR_NOMEM, "out of memory");
    hx_status st = HX_OK;
    hx_batch_clear(b);
    for (int s = 0; s <= n_seg && !st; s++) {
        for (int k = 0; s < n_seg && k < sg[s].n; k++) {
            if (b->n_tokens == b->capacity) {
                if ((st = hx_decode(c, b, e)) || (fn && (st = fn(user, c, b, who, e)))) break;
                hx_batch_clear(b);
            }
            bool w = sg[s].want == 2 || (sg[s].want == 1 && k == sg[s].n - 1);
            who[2 * b->n_tokens] = s;
            who[2 * b->n_tokens + 1] = k;
            hx_batch_add(b, sg[s].tok[k], sg[s].pos + k, sg[s].seq, w);
        }
        if (s == n_seg && !st && b->n_tokens) {
            if ((st = hx_decode(c, b, e)) || (fn && (st = fn(user, c, b, who, e)))) break;
            hx_batch_clear(b);
        }
    }
    free(who);
    return st;
}

static size_t dev_bytes(const hx_context *c) {
    return c->be->device_bytes_in_use ? c->be->device_bytes_in_use(c->bctx) : 0;
}

/* ---- generate ---- */

typedef struct tbuf { char *p; size_t n, cap; } tbuf;
static bool tput(tbuf *t, const char *s, size_t n) {
    if (t->n + n + 1 > t->cap) {
        size_t nc = (t->n + n + 1) * 2 < 256 ? 256 : (t->n + n + 1) * 2;
        char *q = realloc(t->p, nc);
        if (!q) return false;
        t->p = q; t->cap = nc;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
    return true;
}

/* Text handling of one call: the full text, what was streamed, stop strings. */
typedef struct gtext {
    tbuf t;
    size_t sent;
    const hx_generate_params *p;
    bool stopped;    /* a stop string matched */
    bool cancelled;  /* on_text said stop */
} gtext;

/* After text was appended: cut at the first stop string, else stream what
 * cannot be the start of one (all of it when final). */
static void gtext_update(gtext *g, bool final) {
    size_t end = g->t.n;
    for (int i = 0; i < g->p->n_stop; i++) {
        const char *s = g->p->stop[i];
        size_t ls = strlen(s);
        if (!ls) continue;
        const char *hit = g->t.n >= ls ? memmem(g->t.p + g->sent, g->t.n - g->sent, s, ls) : NULL;
        if (hit && (size_t)(hit - g->t.p) < end) { end = (size_t)(hit - g->t.p); g->stopped = true; }
    }
    size_t emit = end;
    if (!g->stopped && !final) {
        for (int i = 0; i < g->p->n_stop; i++) {  /* hold back a suffix that starts a stop string */
            const char *s = g->p->stop[i];
            size_t ls = strlen(s);
            for (size_t l = ls ? ls - 1 : 0; l > 0; l--)
                if (l <= g->t.n - g->sent && !memcmp(g->t.p + g->t.n - l, s, l)) {
                    if (g->t.n - l < emit) emit = g->t.n - l;
                    break;
                }
        }
    }
    if (g->stopped) { g->t.n = end; g->t.p[end] = 0; }
    if (emit > g->sent && g->p->on_text && !g->cancelled)
        if (!g->p->on_text(g->t.p + g->sent, emit - g->sent, g->p->user)) g->cancelled = true;
    if (emit > g->sent) g->sent = emit;
}

hx_status hx_generate(hx_context *c, const hx_generate_params *p, hx_generate_result *r, hx_error *e) {
    if (!r) return hx_err(e, HX_ERR_ARG, "hx_generate: result is NULL");
    memset(r, 0, sizeof *r);
    if (!c || !p) return hx_err(e, HX_ERR_ARG, "hx_generate: context or params is NULL");
    const hx_model *m = c->m;
    int n_src = (p->prompt != NULL) + (p->messages != NULL || p->n_messages != 0) + (p->prompt_ids != NULL || p->n_prompt_ids != 0);
    if (n_src != 1)
        return hx_err(e, HX_ERR_ARG, "hx_generate: give exactly one of prompt, messages and prompt_ids (%d given)", n_src);
    if (p->seq < 0 || p->seq >= c->n_seq)
        return hx_err(e, HX_ERR_RANGE, "hx_generate: sequence %d is outside 0..%d", p->seq, c->n_seq - 1);
    if (p->max_tokens < -1) return hx_err(e, HX_ERR_ARG, "hx_generate: max_tokens %d (-1: until the end)", p->max_tokens);
    if (p->n_stop < 0 || (p->n_stop > 0 && !p->stop)) return hx_err(e, HX_ERR_ARG, "hx_generate: %d stop strings at NULL", p->n_stop);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop[i]) return hx_err(e, HX_ERR_ARG, "hx_generate: stop string %d is NULL", i);
    if (p->n_stop > 0 && !m->api->tok) return hx_err(e, HX_ERR_ARG, "hx_generate: stop strings need a tokenizer; %s has none", m->cfg.name);
    if (p->sampling.n_logit_bias < 0 || (p->sampling.n_logit_bias > 0 && !p->sampling.logit_bias))
        return hx_err(e, HX_ERR_ARG, "hx_generate: %d logit biases at NULL", p->sampling.n_logit_bias);
    const int V = c->n_vocab, seq = p->seq;
    hx_status st = HX_OK;
    int32_t *prompt = NULL;
    int n_prompt = 0;
    if (p->prompt) {
        st = hx_api_tokenize(m, p->prompt, strlen(p->prompt), true, true, &prompt, &n_prompt, e);
    } else if (p->messages || p->n_messages) {
        char *txt = NULL;
        if (!(st = hx_chat_apply(m, p->messages, p->n_messages, true, &txt, e)))
            st = hx_api_tokenize(m, txt, strlen(txt), true, true, &prompt, &n_prompt, e);
        free(txt);
    } else {
        if (p->n_prompt_ids < 0 || !p->prompt_ids)
            return hx_err(e, HX_ERR_ARG, "hx_generate: %d prompt ids at NULL", p->n_prompt_ids);
        for (int i = 0; i < p->n_prompt_ids; i++)
            if (p->prompt_ids[i] < 0 || p->prompt_ids[i] >= V)
                return hx_err(e, HX_ERR_RANGE, "hx_generate: prompt_ids[%d] = %d is outside the vocabulary (0..%d)", i,
                              p->prompt_ids[i], V - 1);
        n_prompt = p->n_prompt_ids;
        prompt = malloc(sizeof *prompt * (size_t)(n_prompt ? n_prompt : 1));
        if (!prompt) return hx_err(e, HX_ERR_NOMEM, "hx_generate: out of memory");
        if (n_prompt) memcpy(prompt, p->prompt_ids, sizeof *prompt * (size_t)n_prompt);
    }
    if (st) return st;
    if (n_prompt == 0) { free(prompt); return hx_err(e, HX_ERR_ARG, "hx_generate: the prompt has no tokens"); }
    if (n_prompt > c->n_ctx_seq) {
        free(prompt);
        return hx_err(e, HX_ERR_RANGE, "hx_generate: a prompt of %d tokens does not fit sequence %d's %d positions",
                      n_prompt, seq, c->n_ctx_seq);
    }
    float *step_logits = NULL; /* decode_sample's logits when the device declines */
    hx_sampler *smp = hx_sampler_new(&p->sampling, V);
    hx_detok *dt = m->api->tok ? hx_detok_new(m, false) : NULL;
    gtext g = {.p = p};
    int32_t *ids = malloc(sizeof *ids * 64);
    int n_ids = 0, cap_ids = 64;
    hx_batch b = hx_batch_init(c->p.n_batch);
    if (!smp || (m->api->tok && !dt) || !ids || !b.capacity || !tput(&g.t, "", 0)) {
        st = hx_err(e, HX_ERR_NOMEM, "hx_generate: out of memory");
        goto fail;
    }
    /* reuse the longest cached prefix; at least the last prompt token runs again for its logits */
    const int32_t *have = hx_seq_tokens(c, seq);
    int lcp = 0, held = hx_seq_pos(c, seq);
    while (lcp < held && lcp < n_prompt && have[lcp] == prompt[lcp]) lcp++;
    if (lcp == n_prompt) lcp--;
    int cached = lcp < held ? hx_seq_keep(c, seq, lcp) : lcp;
    size_t peak = dev_bytes(c);
    double t0 = hx_now_s();
    seg s0 = {.seq = seq, .pos = cached, .n = n_prompt - cached, .want = 1, .tok = prompt + cached};
    if ((st = run_segs(c, &b, &s0, 1, NULL, NULL, e))) goto fail;
    const float *logits = hx_get_logits(c, -1);
    double t1 = hx_now_s();
    if (dev_bytes(c) > peak) peak = dev_bytes(c);
    for (int i = 0; i < n_prompt; i++) hx_sampler_accept(smp, prompt[i]);
    bool greedy = p->sampling.temp <= 0 && !hx_sampler_penalizes(&p->sampling) && p->sampling.n_logit_bias == 0;
    bool fast = greedy && c->be->decode_greedy;
    /* sampling on the device (temp > 0, no logit bias: the device chain takes none) */
    bool dev_sample = !greedy && p->sampling.temp > 0 && c->be->decode_sample && !hx_sampler_has_bias(smp) &&
                      !c->page;   /* it writes the cache itself: a paged backend's pages come from hx_decode */
    if (dev_sample) step_logits = malloc(sizeof *step_logits * (size_t)V);
    if (dev_sample && !step_logits) { st = hx_err(e, HX_ERR_NOMEM, "hx_generate: out of memory"); goto fail; }
    int limit = p->max_tokens < 0 ? INT_MAX : p->max_tokens, pos = n_prompt, n_dec = 0;
    hx_stop_reason why = HX_STOP_LENGTH;
    int32_t t = limit > 0 ? (greedy ? hx_argmax(logits, V) : hx_sampler_sample(smp, logits)) : -1;
    bool ran_fast = false;
    while (limit > 0) {
        if (!p->ignore_eog && hx_token_is_eog(m, t)) { why = HX_STOP_EOG; break; }
        if (n_ids == cap_ids) {
            int32_t *q = realloc(ids, sizeof *ids * (size_t)(cap_ids *= 2));
            if (!q) { st = hx_err(e, HX_ERR_NOMEM, "hx_generate: out of memory"); goto fail; }
            ids = q;
        }
        ids[n_ids++] = t;
        hx_sampler_accept(smp, t);
        if (dt) {
            const char *piece = hx_detok_push(dt, t);
            if (!tput(&g.t, piece, strlen(piece))) { st = hx_err(e, HX_ERR_NOMEM, "hx_generate: out of memory"); goto fail; }
            gtext_update(&g, false);
            if (g.stopped) { why = HX_STOP_STRING; break; }
            if (g.cancelled) { why = HX_STOP_CANCELLED; break; }
        }
        if (n_ids == limit) { why = HX_STOP_LENGTH; break; }
        if (p->cancel && *p->cancel) { why = HX_STOP_CANCELLED; break; }
        if (pos >= c->n_ctx_seq) { why = HX_STOP_CONTEXT; break; }
        int32_t next;
        if (fast) {
            if ((st = hx_decode_greedy(c, seq, t, &next, e)) == HX_ERR_KV_FULL) { st = HX_OK; why = HX_STOP_CONTEXT; break; }
            if (st) goto fail;
            ran_fast = true;
        } else if (dev_sample) {
            const hx_sampler_params *sp = &p->sampling;
            bool pen = sp->penalty_last_n != 0, picked = false;
            hx_backend_sample bs = {sp->temp, sp->top_k, sp->top_p, sp->min_p, pen ? sp->repeat_penalty : 1.0f,
                                    pen ? sp->freq_penalty : 0.0f, pen ? sp->presence_penalty : 0.0f, NULL, 0, 0};
            bs.n_hist = hx_sampler_history(smp, &bs.hist);
            bs.u = hx_sampler_draw(smp);
            if ((st = c->be->decode_sample(c->bctx, seq, t, pos, &bs, &next, step_logits, &picked, e))) goto fail;
            if (!picked) next = hx_sampler_sample_u(smp, step_logits, bs.u);
            ran_fast = true;
            c->seq_tok[(size_t)seq * (size_t)c->n_ctx_seq + (size_t)pos] = t;
            c->seq_len[seq] = pos + 1;
            c->n_last = 0;
        } else {
            hx_batch_clear(&b);
            hx_batch_add(&b, t, pos, seq, true);
            /* a shared pool with no page left ends the sequence as a full context would */
            if ((st = hx_decode(c, &b, e)) == HX_ERR_KV_FULL) { st = HX_OK; why = HX_STOP_CONTEXT; break; }
            if (st) goto fail;
            logits = hx_get_logits(c, 0);
            next = greedy ? hx_argmax(logits, V) : hx_sampler_sample(smp, logits);
        }
        pos++;
        n_dec++;
        t = next;
    }
    /* decode time ends when the last token is in hand: finish() below only waits
     * for the step the device ran ahead speculatively, whose result is dropped */
    double t_dec = hx_now_s();
    if (ran_fast && c->be->finish && (st = c->be->finish(c->bctx, e))) goto fail;
    if (dt && why != HX_STOP_STRING) {
        const char *rest = hx_detok_flush(dt);
        if (!tput(&g.t, rest, strlen(rest))) { st = hx_err(e, HX_ERR_NOMEM, "hx_generate: out of memory"); goto fail; }
        gtext_update(&g, true);
        if (g.stopped) why = HX_STOP_STRING;
        else if (g.cancelled && why != HX_STOP_CANCELLED) why = HX_STOP_CANCELLED;
    }
    if (dev_bytes(c) > peak) peak = dev_bytes(c);
    r->text = g.t.p;
    r->ids = ids;
    r->n_ids = n_ids;
    r->prompt_ids = prompt;
    r->n_prompt_ids = n_prompt;
    r->stop = why;
    r->metrics = (hx_metrics){.prompt_tokens = n_prompt - cached, .cached_tokens = cached, .gen_tokens = n_ids,
                              .prefill_s = t1 - t0, .decode_s = t_dec - t1, .peak_device_bytes = peak};
    r->metrics.prefill_tok_per_s = t1 > t0 ? (n_prompt - cached) / (t1 - t0) : 0;
    r->metrics.decode_tok_per_s = t_dec > t1 && n_dec ? n_dec / (t_dec - t1) : 0;
    free(step_logits);
    hx_sampler_free(smp);
    hx_detok_free(dt);
    hx_batch_free(&b);
    return HX_OK;
fail:
    free(step_logits);
    hx_sampler_free(smp);
    hx_detok_free(dt);
    hx_batch_free(&b);
    free(g.t.p); free(ids); free(prompt);
    memset(r, 0, sizeof *r);
    return st;
}

/* ---- classify ---- */

typedef struct cls {
    int n_labels;
    int32_t **lab;    /* label token ids */
    int *lab_n;
    int32_t *first;   /* every label's first token */
    double *score;    /* s_ij, n_prompts x n_labels */
    const seg *sg;    /* the segments of the running run_segs: segment k decodes in sequence sg[k].seq ... */
    int g0;           /* ... for prompt g0 + sg[k].seq */
    int label;        /* the label whose later tokens the run scores; -1: the prompts' last tokens (every label's first) */
    int *idx;         /* scratch, n_batch entries */
    int32_t *ids;     /* n_batch * n_labels */
    float *lp;        /* n_batch * n_labels */
} cls;

/* After a forward of classify: the log-probabilities its rows give, taken on
 * the device where the backend can (hx_get_logprobs), added to the scores. */
static hx_status cls_rows(void *user, hx_context *c, const hx_batch *b, const int *who, hx_error *e) {
    cls *C = user;
    const int L = C->n_labels;
    int m = 0;
    for (int i = 0; i < b->n_tokens; i++)
        if (b->logits[i]) C->idx[m++] = i;
    if (m == 0) return HX_OK;
    hx_status st;
    if (C->label < 0) {
        for (int t = 0; t < m; t++) memcpy(C->ids + (size_t)t * L, C->first, sizeof *C->ids * (size_t)L);
        if ((st = hx_get_logprobs(c, m, C->idx, L, C->ids, C->lp, e))) return st;
        for (int t = 0; t < m; t++) {
            int p = C->g0 + C->sg[who[2 * C->idx[t]]].seq;
            for (int j = 0; j < L; j++) C->score[(size_t)p * L + j] = C->lp[(size_t)t * L + j];
        }
    } else {
        /* label token k's logits: the log-probability of label token k + 1 */
        const int j = C->label;
        for (int t = 0; t < m; t++) C->ids[t] = C->lab[j][who[2 * C->idx[t] + 1] + 1];
        if ((st = hx_get_logprobs(c, m, C->idx, 1, C->ids, C->lp, e))) return st;
        for (int t = 0; t < m; t++) {
            int p = C->g0 + C->sg[who[2 * C->idx[t]]].seq;
            C->score[(size_t)p * L + j] += C->lp[t];
        }
    }
    return HX_OK;
}

hx_status hx_classify(hx_context *c, const char *const *prompts, int n_prompts, const char *const *labels,
                      int n_labels, float *probs, float *logprobs, hx_metrics *metrics, hx_error *e) {
    if (!c || !prompts || !labels || !probs) return hx_err(e, HX_ERR_ARG, "hx_classify: context, prompts, labels or probs is NULL");
    if (n_prompts < 1 || n_labels < 1) return hx_err(e, HX_ERR_ARG, "hx_classify: %d prompts and %d labels (>= 1 each)", n_prompts, n_labels);
    if (metrics) memset(metrics, 0, sizeof *metrics);
    const hx_model *m = c->m;
    hx_status st = HX_OK;
    const int ns = c->n_seq, nb = c->p.n_batch;
    cls C = {.n_labels = n_labels, .label = -1};
    C.lab = calloc((size_t)n_labels, sizeof *C.lab);
    C.lab_n = calloc((size_t)n_labels, sizeof *C.lab_n);
    C.first = calloc((size_t)n_labels, sizeof *C.first);
    C.score = calloc((size_t)n_prompts * (size_t)n_labels, sizeof *C.score);
    C.idx = calloc((size_t)nb, sizeof *C.idx);
    C.ids = calloc((size_t)nb * (size_t)n_labels, sizeof *C.ids);
    C.lp = calloc((size_t)nb * (size_t)n_labels, sizeof *C.lp);
    int32_t **pt = calloc((size_t)ns, sizeof *pt);
    int *pn = calloc((size_t)ns, sizeof *pn);
    seg *sg = calloc((size_t)ns, sizeof *sg);
    hx_batch b = hx_batch_init(nb);
    /* forwards that want logits: one ubatch each, so that their rows stay on
     * the device (hx_decode keeps them there only then) */
    hx_batch bu = hx_batch_init(c->p.n_ubatch < nb ? c->p.n_ubatch : nb);
    if (!C.lab || !C.lab_n || !C.first || !C.score || !C.idx || !C.ids || !C.lp || !pt || !pn || !sg || !b.capacity ||
        !bu.capacity) {
        st = hx_err(e, HX_ERR_NOMEM, "hx_classify: out of memory");
        goto out;
    }
    int max_l = 0;
    for (int j = 0; j < n_labels && !st; j++) {
        if (!labels[j]) { st = hx_err(e, HX_ERR_ARG, "hx_classify: label %d is NULL", j); break; }
        if ((st = hx_api_tokenize(m, labels[j], strlen(labels[j]), false, false, &C.lab[j], &C.lab_n[j], e))) break;
        if (C.lab_n[j] == 0) { st = hx_err(e, HX_ERR_ARG, "hx_classify: label %d ('%s') has no tokens", j, labels[j]); break; }
        C.first[j] = C.lab[j][0];
        if (C.lab_n[j] > max_l) max_l = C.lab_n[j];
    }
    if (st) goto out;
    int last_multi = -1; /* the last label of several tokens */
    for (int j = 0; j < n_labels; j++) if (C.lab_n[j] > 1) last_multi = j;
    /* Slot 0 carries its prompt's head from group to group (head reuse below),
     * except on a sliding-window ring, where going back within a slot may need
     * positions the ring dropped: there every group starts from an empty slot. */
    bool carry = !hx_kv_has_ring(&m->cfg, c->kv_rows, c->n_ctx_seq);
    /* every sequence may be full at once: on a paged pool each gets its share
     * (whole pages), as a slot would, so no decode here finds the pool full */
    int per_seq = c->page ? c->n_pages / ns * c->page : c->n_ctx_seq;
    if (per_seq > c->n_ctx_seq) per_seq = c->n_ctx_seq;
    for (int s = 0; s < ns; s++) hx_seq_clear(c, s);
    double t0 = hx_now_s();
    long tokens = 0, reused = 0;
    for (int g0 = 0; g0 < n_prompts && !st; g0 += ns) {
        int gn = n_prompts - g0 < ns ? n_prompts - g0 : ns;
        for (int s = 0; s < gn; s++) {
            int i = g0 + s;
            free(pt[s]); pt[s] = NULL;
            if (!prompts[i]) { st = hx_err(e, HX_ERR_ARG, "hx_classify: prompt %d is NULL", i); break; }
            if ((st = hx_api_tokenize(m, prompts[i], strlen(prompts[i]), true, true, &pt[s], &pn[s], e))) break;
            if (pn[s] == 0) { st = hx_err(e, HX_ERR_ARG, "hx_classify: prompt %d has no tokens", i); break; }
            if (pn[s] + max_l - 1 > per_seq) {
                st = hx_err(e, HX_ERR_RANGE, "hx_classify: prompt %d: %d tokens and labels of up to %d do not fit a "
                            "sequence's %d positions", i, pn[s], max_l, per_seq);
                break;
            }
        }
        if (st) break;
        /* Head reuse. hd: the group's shared head, its prompts' longest common
         * token prefix, less at least one token of each prompt (whose last
         * token's logits are wanted). Slot 0 keeps the part of it that it
         * already holds (kept), computes the rest, and every other slot of the
         * group starts as a copy of it; each prompt then prefills only its
         * tail, pt[s][hd..pn[s]). A group of one prompt has nothing to share:
         * its head is what slot 0 kept. */
        int hd = pn[0] - 1;
        for (int s = 1; s < gn; s++) {
            int k = 0, lim = pn[s] - 1 < hd ? pn[s] - 1 : hd;
            while (k < lim && pt[s][k] == pt[0][k]) k++;
            hd = k;
        }
        int kept = 0, held = hx_seq_pos(c, 0);
        const int32_t *ht = hx_seq_tokens(c, 0);
        while (kept < held && kept < hd && ht[kept] == pt[0][kept]) kept++;
        kept = hx_seq_keep(c, 0, kept);  /* 0 when a ring no longer holds it */
        if (gn == 1) hd = kept;
        if (hd > kept) {
            seg head = {.seq = 0, .pos = kept, .n = hd - kept, .want = 0, .tok = pt[0] + kept};
            if ((st = run_segs(c, &b, &head, 1, NULL, NULL, e))) break;
        }
        for (int s = 1; s < gn && !st && hd > 0; s++) st = hx_seq_copy(c, 0, s, hd, e);
        if (st) break;
        tokens += hd - kept;
        reused += kept + (long)(gn - 1) * hd;
        /* each prompt's tail but its last token, then the last tokens in a
         * forward of their own: their rows stay on the device (one ubatch) and
         * only the labels' log-probabilities come back */
        int na = 0;
        for (int s = 0; s < gn; s++) {
            if (pn[s] - 1 > hd) sg[na++] = (seg){.seq = s, .pos = hd, .n = pn[s] - 1 - hd, .want = 0, .tok = pt[s] + hd};
            tokens += pn[s] - hd;
        }
        if (na && (st = run_segs(c, &b, sg, na, NULL, NULL, e))) break;
        for (int s = 0; s < gn; s++) sg[s] = (seg){.seq = s, .pos = pn[s] - 1, .n = 1, .want = 1, .tok = pt[s] + pn[s] - 1};
        C.sg = sg; C.g0 = g0; C.label = -1;
        if ((st = run_segs(c, &bu, sg, gn, cls_rows, &C, e))) break;
        /* A label of several tokens: its later tokens decoded in each prompt's
         * own sequence after the prompt, every prompt of the group at once,
         * then each sequence goes back to its prompt (free; a sliding-window
         * ring that no longer holds what the prompt's end needs computes the
         * prompt again). No copies of the prompts' caches. */
        for (int j = 0; j <= last_multi && !st; j++) {
            if (C.lab_n[j] < 2) continue;
            for (int s = 0; s < gn; s++) {
                sg[s] = (seg){.seq = s, .pos = pn[s], .n = C.lab_n[j] - 1, .want = 2, .tok = C.lab[j]};
                tokens += C.lab_n[j] - 1;
            }
            C.label = j;
            if ((st = run_segs(c, &bu, sg, gn, cls_rows, &C, e)) || j == last_multi) break;
            int nr = 0;
            for (int s = 0; s < gn; s++)
                if (hx_seq_keep(c, s, pn[s]) != pn[s]) {
                    hx_seq_clear(c, s);
                    sg[nr++] = (seg){.seq = s, .pos = 0, .n = pn[s], .want = 0, .tok = pt[s]};
                    tokens += pn[s];
                }
            if (nr) st = run_segs(c, &b, sg, nr, NULL, NULL, e);
        }
        if (st) break;
        if (carry) hx_seq_keep(c, 0, pn[0]);  /* the next group may share its head */
        else hx_seq_clear(c, 0);
        for (int s = 1; s < ns; s++) hx_seq_clear(c, s);
    }
    for (int s = 0; s < ns && !st; s++) hx_seq_clear(c, s);
    if (st) goto out;
    double t1 = hx_now_s();
    for (int i = 0; i < n_prompts; i++) {
        const double *sc = C.score + (size_t)i * (size_t)n_labels;
        double mx = sc[0];
        for (int j = 1; j < n_labels; j++) if (sc[j] > mx) mx = sc[j];
        double sum = 0;
        for (int j = 0; j < n_labels; j++) sum += exp(sc[j] - mx);
        for (int j = 0; j < n_labels; j++) {
            probs[(size_t)i * (size_t)n_labels + (size_t)j] = (float)(exp(sc[j] - mx) / sum);
            if (logprobs) logprobs[(size_t)i * (size_t)n_labels + (size_t)j] = (float)sc[j];
        }
    }
    if (metrics) {
        metrics->prompt_tokens = (int)(tokens < INT_MAX ? tokens : INT_MAX);
        metrics->cached_tokens = (int)(reused < INT_MAX ? reused : INT_MAX);
        metrics->prefill_s = t1 - t0;
        metrics->prefill_tok_per_s = t1 > t0 ? tokens / (t1 - t0) : 0;
        metrics->peak_device_bytes = dev_bytes(c);
    }
out:
    for (int s = 0; s < ns && pt; s++) free(pt[s]);
    for (int j = 0; j < n_labels && C.lab; j++) free(C.lab[j]);
    free(pt); free(pn); free(sg); free(C.lab); free(C.lab_n); free(C.first); free(C.score); free(C.idx); free(C.ids);
    free(C.lp);
    hx_batch_free(&b);
    hx_batch_free(&bu);
    if (st && c) for (int s = 0; s < c->n_seq; s++) hx_seq_clear(c, s);
    return st;
}
