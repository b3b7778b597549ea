/* sched.c — continuous batching over one hx_context, and the BERT embedder.
 *
 * The scheduler thread owns the context. Its loop, once per step:
 *   1. drop requests whose client is gone (hang-up seen on the socket or
 *      reported by libmicrohttpd) and those past their deadline;
 *   2. admit queued requests into free slots: the free slot whose cached
 *      tokens share the longest prefix with the prompt (or a copy of a busy
 *      slot's prefix, hx_seq_copy), keeping that prefix (hx_seq_keep);
 *   3. one hx_batch: the next token of every decoding slot, then up to
 *      prefill_chunk prompt tokens of prefilling slots (all of n_batch when
 *      nothing decodes), so running streams get a token every step while a
 *      long prompt is read in pieces;
 *   4. hx_decode, then for each slot that asked for logits: sample (within the
 *      JSON grammar for json_object), detokenize (hx_detok: whole UTF-8
 *      characters only), hold back text that may start a stop string, and
 *      append an SSE chunk (stream) or text (final body) to the request.
 * A step with one stream decoding and nothing else to run takes the
 * single-sequence greedy step instead (hx_decode_greedy: on the GPU the next
 * token is computed while this one is sent); the step after a new request
 * arrives is a batch again. The slot always holds its next token to feed, so
 * switching between the two loses or repeats nothing.
 * A slot's KV stays after its request ends: the next request with the same
 * prefix (a system prompt, the earlier turns of a chat) starts from there.
 *
 * KV pool (a paged context, hx_context_kv_page > 0: the CPU with --parallel
 * > 1): the slots share --ctx-size positions in pages. A queued request is
 * admitted, in queue order, when the pool can hold its prompt and
 * ADMIT_ROOM positions of its answer (counting idle slots' cached prefixes,
 * which are evicted least recently used first when pages run out, and what
 * admitted prompts still have to prefill); else it waits, or with
 * --no-queue gets 429. A decoding stream that needs a page when none is
 * left ends with finish_reason "length" and gives its pages back; a prompt
 * that finds none waits a step.
 */
#include "serve.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <microhttpd.h>

/* ------------------------------------------------------------------------ */
/* requests                                                                 */
/* ------------------------------------------------------------------------ */

srv_req *req_new(srv *s, req_kind kind) {
    srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->owner = s;
    r->refs = 1;
    r->kind = kind;
    r->fd = -1;
    r->logprobs = -1;
    r->created = (long)time(NULL);
    r->model_id = s->model_id;
    r->t_arrive = util_now();
    r->deadline = s->cfg.timeout_s > 0 ? r->t_arrive + s->cfg.timeout_s : 1e300;
    pthread_mutex_lock(&s->mu);
    r->serial = ++s->serial;
    pthread_mutex_unlock(&s->mu);
    static const char hex[] = "0123456789abcdef";
    uint64_t x = r->serial * 0x9E3779B97F4A7C15ull ^ (uint64_t)time(NULL) << 20;
    char tail[17];
    for (int i = 0; i < 16; i++, x >>= 4) tail[i] = hex[x & 15];
    tail[16] = 0;
    snprintf(r->id, sizeof r->id, "%s-%s", kind == REQ_CHAT ? "chatcmpl" : kind == REQ_COMPLETION ? "cmpl" : "emb", tail);
    return r;
}

static void req_free(srv_req *r) {
    free(r->prompt);
    free(r->bias);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    for (int i = 0; i < r->n_texts; i++) free(r->texts[i]);
    free(r->texts);
    if (r->text_ids)
        for (int i = 0; i < r->n_texts; i++) free(r->text_ids[i]);
    free(r->text_ids);
    free(r->n_text_ids);
    free(r->schema);
    srv_kb_refs_free(r);
    sbuf_free(&r->out);
    free(r);
}

void req_unref(srv *s, srv_req *r) {
    if (!r) return;
    pthread_mutex_lock(&s->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&s->mu);
    if (left == 0) req_free(r);
}

/* Caller holds s->mu. */
static void req_wake_locked(srv_req *r) {
    if (r->suspended && r->conn && !r->http_done) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
}

void req_emit_locked(srv_req *r, const char *p, size_t n) {
    sbuf_add(&r->out, p, n);
    req_wake_locked(r);
}

void req_cancel(srv *s, srv_req *r) {
    pthread_mutex_lock(&s->mu);
    r->cancelled = true;
    pthread_cond_broadcast(&s->wake);
    pthread_cond_broadcast(&s->emb_wake);
    pthread_mutex_unlock(&s->mu);
}

/* ---- the KV pool ---- */

/* Positions of its answer a request reserves at admission besides its prompt. */
#define ADMIT_ROOM 64

/* Positions a request needs to start: its prompt and up to ADMIT_ROOM of its
 * answer; decoder embeddings: the longest text (each is run alone). */
static int req_need(const srv_req *r) {
    if (r->kind == REQ_EMBED) {
        int m = 0;
        for (int i = 0; r->n_text_ids && i < r->n_texts; i++) if (r->n_text_ids[i] > m) m = r->n_text_ids[i];
        return m;
    }
    return r->n_prompt + (r->max_tokens < ADMIT_ROOM ? r->max_tokens : ADMIT_ROOM);
}

static int pages_of(int page, int n) { return page > 0 ? (n + page - 1) / page : 0; }

/* Pages a request waits for: req_need's, at most the whole pool (n_ctx). */
static int need_pages(int page, int n_ctx, const srv_req *r) {
    int need = pages_of(page, req_need(r)), all = page > 0 ? n_ctx / page : 0;
    return need < all ? need : all;
}

/* --no-queue on a paged pool: whether r fits beside the requests already
 * queued, by the pool figure of the scheduler's last step. Caller holds s->mu. */
static bool kv_room_locked(const srv *s, const srv_req *r) {
    int need = need_pages(s->kv_page, s->n_ctx, r);
    for (int i = 0; i < s->n_queue; i++) need += need_pages(s->kv_page, s->n_ctx, s->queue[i]);
    return need <= s->st.kv_admit_pages;
}

static bool push(srv_req ***q, int *n, int *cap, srv_req *r) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        srv_req **p = realloc(*q, (size_t)nc * sizeof *p);
        if (!p) return false;
        *q = p;
        *cap = nc;
    }
    (*q)[(*n)++] = r;
    return true;
}

int srv_submit(srv *s, srv_req *r, const char **why) {
    pthread_mutex_lock(&s->mu);
    int st = 0;
    if (s->stopping || s->quit) { st = 503; *why = "the server is shutting down"; }
    else if (r->kind == REQ_EMBED && r->emb_bert) {
        if (s->n_emb_queue >= (s->cfg.max_queue > 0 ? s->cfg.max_queue : 64)) { st = 503; *why = "the embedding queue is full"; }
        else if (!push(&s->emb_queue, &s->n_emb_queue, &s->cap_emb_queue, r)) { st = 503; *why = "out of memory"; }
        else pthread_cond_broadcast(&s->emb_wake);
    } else {
        if (s->cfg.no_queue && s->st.slots_busy + s->n_queue >= s->cfg.n_parallel) {
            st = 429;
            *why = "all slots are busy (the server runs with --no-queue); retry later";
        } else if (s->cfg.no_queue && s->kv_page > 0 && !kv_room_locked(s, r)) {
            st = 429;
            *why = "the KV cache is full (the server runs with --no-queue); retry later";
        } else if (s->n_queue >= s->cfg.max_queue) {
            st = 503;
            *why = "the request queue is full; retry later";
        } else if (!push(&s->queue, &s->n_queue, &s->cap_queue, r)) { st = 503; *why = "out of memory"; }
        else {
            s->st.queue_depth = s->n_queue;
            pthread_cond_broadcast(&s->wake);
        }
    }
    if (st) s->st.requests_rejected++;
    else {
        r->refs++;
        s->n_active++;
        s->st.requests_total++;
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* The request is over for the worker: record, wake the connection, drop the worker's ref. */
static void req_finish(srv *s, srv_req *r, fin_reason fin) {
    pthread_mutex_lock(&s->mu);
    r->fin = fin;
    r->done = true;
    if (fin == FIN_ERROR) s->st.requests_failed++;
    else if (fin == FIN_CANCELLED) s->st.requests_cancelled++;
    else s->st.requests_ok++;
    s->n_active--;
    req_wake_locked(r);
    pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->mu);
    req_unref(s, r);
}

/* A request that ends before producing anything: an error answer (status) or, mid-stream, an error event. */
static void req_fail(srv *s, srv_req *r, int status, const char *code, const char *msg, fin_reason fin) {
    char *body = oai_error_json(msg, oai_error_type(status), code);
    pthread_mutex_lock(&s->mu);
    if (r->stream) {
        sbuf_adds(&r->out, "data: ");
        sbuf_adds(&r->out, body ? body : "{}");
        sbuf_adds(&r->out, "\n\ndata: [DONE]\n\n");
    } else {
        sbuf_free(&r->out);
        sbuf_adds(&r->out, body ? body : "{}");
        r->status = status;
    }
    pthread_mutex_unlock(&s->mu);
    free(body);
    req_finish(s, r, fin);
}

/* ------------------------------------------------------------------------ */
/* slots                                                                    */
/* ------------------------------------------------------------------------ */

typedef enum { S_FREE, S_PREFILL, S_DECODE, S_EMBED } slot_state;

typedef struct slot {
    int seq;
    slot_state state;
    srv_req *req;
    int n_past;           /* positions in the cache (hx_seq_pos) */
    int32_t next_tok;     /* S_DECODE: the sampled token to feed */
    int32_t picked;       /* this step's token when picked on the device (plain_greedy), else -1 */
    int n_gen;
    int batch_first, batch_n; /* this step: its tokens in the batch */
    double last_used;
    hx_sampler *smp;
    hx_detok *dt;
    sbuf pending;         /* text not yet released (may start a stop string) */
    sbuf final;           /* the released text: non-stream, and kb streams (for the citations) */
    bool first_sent;
    jg_state jg;
    oai_logprob *lp;      /* logprobs not yet sent (stream) or all (final) */
    int n_lp, cap_lp;
    /* decoder embeddings */
    int emb_text, emb_fed;
    float *emb_sum;       /* (n_embd) running sum over the text's tokens */
    float *emb_out;       /* (n_texts, n_embd) */
} slot;

typedef struct sched {
    hx_context *ctx;
    int n_slots;
    slot *slots;
    hx_batch batch;
    int n_vocab, n_embd;
    float *scratch;       /* (n_vocab) logprob work */
    /* the JSON grammar needs every token's bytes */
    char *pieces;         /* all pieces, back to back */
    int *piece_off;       /* (n_vocab + 1) */
    int32_t *eog;         /* end-of-generation ids */
    int n_eog;
    uint8_t *allowed;     /* (n_vocab) */
    int *pick_at, *pick_slot; /* (n_slots) this step's plain greedy picks: batch token, slot */
    int32_t *pick_tok;        /* (n_slots) their tokens */
    /* tokens/s window */
    double win_t[32];
    uint64_t win_tok[32];
    int win_n, win_head;
    double last_poll;
    int lora;             /* the adapter set on the context: 1 + index into cfg.lora_name, 0: none */
    int page;             /* positions per KV page (hx_context_kv_page); 0: fixed slots */
} sched;

static void slot_release(srv *s, sched *sc, slot *sl) {
    if (sl->req) {   /* exact at once: --no-queue decides on it */
        pthread_mutex_lock(&s->mu);
        s->st.slots_busy--;
        pthread_mutex_unlock(&s->mu);
    }
    hx_sampler_free(sl->smp);
    sl->smp = NULL;
    hx_detok_free(sl->dt);
    sl->dt = NULL;
    sbuf_free(&sl->pending);
    sbuf_free(&sl->final);
    free(sl->lp);
    sl->lp = NULL;
    sl->n_lp = sl->cap_lp = 0;
    free(sl->emb_sum);
    free(sl->emb_out);
    sl->emb_sum = sl->emb_out = NULL;
    sl->req = NULL;
    sl->state = S_FREE;
    sl->n_past = hx_seq_pos(sc->ctx, sl->seq);
    sl->last_used = util_now();
}

/* Pages of the pool a new request could have now: the free ones and those of
 * idle slots' cached prefixes (evictable), less what admitted requests still
 * need to reach req_need (a prompt is prefilled in pieces). */
static int pool_avail(sched *sc) {
    int pages = hx_context_kv_free(sc->ctx) / sc->page;
    for (int i = 0; i < sc->n_slots; i++) {
        const slot *sl = &sc->slots[i];
        int held = pages_of(sc->page, hx_seq_pos(sc->ctx, sl->seq));
        if (sl->state == S_FREE) pages += held;
        else if (sl->state == S_PREFILL || sl->state == S_EMBED) {
            int more = pages_of(sc->page, req_need(sl->req)) - held;
            if (more > 0) pages -= more;
        }
    }
    return pages;
}

/* Clears idle slots' cached prefixes, least recently used first, until at
 * least `pages` pages are free; false when they are too few. */
static bool evict_idle(sched *sc, int pages) {
    while (hx_context_kv_free(sc->ctx) / sc->page < pages) {
        slot *lru = NULL;
        for (int i = 0; i < sc->n_slots; i++) {
            slot *sl = &sc->slots[i];
            if (sl->state == S_FREE && hx_seq_pos(sc->ctx, sl->seq) > 0 && (!lru || sl->last_used < lru->last_used))
                lru = sl;
        }
        if (!lru) return false;
        hx_seq_clear(sc->ctx, lru->seq);
        lru->n_past = 0;
    }
    return true;
}

/* Longest common prefix of a and b. */
static int lcp(const int32_t *a, int na, const int32_t *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Puts r into a free slot, reusing the longest cached prefix. */
static slot *admit(srv *s, sched *sc, srv_req *r) {
    const int32_t *want = r->prompt;
    int n_want = r->n_prompt;
    if (r->kind == REQ_EMBED) { want = NULL; n_want = 0; }
    slot *best = NULL, *lru = NULL;
    int best_l = -1;   /* ties: the least recently used */
    for (int i = 0; i < sc->n_slots; i++) {
        slot *sl = &sc->slots[i];
        if (sl->state != S_FREE) continue;
        if (!lru || sl->last_used < lru->last_used) lru = sl;
        int l = want ? lcp(hx_seq_tokens(sc->ctx, sl->seq), hx_seq_pos(sc->ctx, sl->seq), want, n_want) : 0;
        if (l > best_l || (l == best_l && sl->last_used < best->last_used)) { best = sl; best_l = l; }
    }
    if (!best) return NULL;
    if (best_l <= 0) best = lru;   /* nothing shared: evict the least recently used cache */
    /* a busy slot may hold a longer prefix (the same system prompt, in flight): copy it */
    int keep = best_l;
    if (want) {
        slot *donor = NULL;
        int donor_l = 0;
        for (int i = 0; i < sc->n_slots; i++) {
            slot *sl = &sc->slots[i];
            if (sl->state == S_FREE) continue;
            int l = lcp(hx_seq_tokens(sc->ctx, sl->seq), hx_seq_pos(sc->ctx, sl->seq), want, n_want);
            if (l > donor_l) { donor = sl; donor_l = l; }
        }
        if (donor && donor_l >= best_l + 32) {
            if (donor_l > n_want - 1) donor_l = n_want - 1;
            hx_error e = {0};
            if (hx_seq_copy(sc->ctx, donor->seq, best->seq, donor_l, &e) == HX_OK) keep = donor_l;
            else if (s->cfg.verbose) fprintf(stderr, "serve: prefix copy from slot %d failed: %s\n", donor->seq, e.msg);
        }
    }
    if (keep > n_want - 1) keep = n_want - 1;   /* the last prompt token is always decoded: its logits start generation */
    if (keep < 0) keep = 0;
    int kept = hx_seq_keep(sc->ctx, best->seq, keep);
    if (kept != keep) { hx_seq_clear(sc->ctx, best->seq); kept = 0; }
    best->n_past = hx_seq_pos(sc->ctx, best->seq);
    best->req = r;
    best->n_gen = 0;
    best->first_sent = false;
    best->n_lp = 0;
    r->usage_cached = kept;
    r->usage_prompt = r->n_prompt;
    if (r->kind == REQ_EMBED) {
        best->state = S_EMBED;
        best->emb_text = 0;
        best->emb_fed = 0;
        hx_seq_clear(sc->ctx, best->seq);
        best->n_past = 0;
        best->emb_sum = calloc((size_t)sc->n_embd, sizeof(float));
        best->emb_out = calloc((size_t)r->n_texts * (size_t)sc->n_embd, sizeof(float));
        if (!best->emb_sum || !best->emb_out) return best;   /* caught by the caller */
    } else {
        best->state = S_PREFILL;
        best->smp = hx_sampler_new(&r->sp, sc->n_vocab);
        best->dt = hx_detok_new(s->model, false);
        if (best->smp)
            for (int i = 0; i < r->n_prompt; i++) hx_sampler_accept(best->smp, r->prompt[i]);
        jg_init(&best->jg, r->schema);
    }
    return best;
}

/* ------------------------------------------------------------------------ */
/* output                                                                   */
/* ------------------------------------------------------------------------ */

/* Bytes at the end of t that are a proper prefix of some stop string: held back. */
static size_t stop_hold(const srv_req *r, const char *t, size_t n) {
    size_t hold = 0;
    for (int k = 0; k < r->n_stop; k++) {
        size_t sl = strlen(r->stop[k]);
        size_t max = sl - 1 < n ? sl - 1 : n;
        for (size_t h = max; h > hold; h--)
            if (!memcmp(t + n - h, r->stop[k], h)) { hold = h; break; }
    }
    return hold;
}

/* First match of any stop string in t, or -1. */
static long stop_find(const srv_req *r, const char *t, size_t n) {
    long best = -1;
    for (int k = 0; k < r->n_stop; k++) {
        const char *p = memmem(t, n, r->stop[k], strlen(r->stop[k]));
        if (p && (best < 0 || p - t < best)) best = p - t;
    }
    return best;
}

/* Releases len bytes of text (with the pending logprobs) to the client. */
static void slot_send(srv *s, slot *sl, const char *text, size_t len) {
    srv_req *r = sl->req;
    if (!r->stream || r->kb) sbuf_add(&sl->final, text, len);   /* a kb stream's citations need the whole text */
    if (!r->stream) return;
    if (!len && sl->first_sent) return;
    sbuf chunk = {0};
    oai_stream_chunk(s, r, text, len, !sl->first_sent, NULL, sl->lp, sl->n_lp, &chunk);
    sl->first_sent = true;
    sl->n_lp = 0;
    pthread_mutex_lock(&s->mu);
    req_emit_locked(r, chunk.p ? chunk.p : "", chunk.len);
    pthread_mutex_unlock(&s->mu);
    sbuf_free(&chunk);
}

/* Adds new text; returns true when a stop string matched (the text before it is sent). */
static bool slot_text(srv *s, slot *sl, const char *t, size_t n) {
    srv_req *r = sl->req;
    sbuf_add(&sl->pending, t, n);
    const char *p = sl->pending.p ? sl->pending.p : "";
    long at = stop_find(r, p, sl->pending.len);
    if (at >= 0) {
        slot_send(s, sl, p, (size_t)at);
        sbuf_free(&sl->pending);
        return true;
    }
    size_t send = sl->pending.len - stop_hold(r, p, sl->pending.len);
    if (send) {
        slot_send(s, sl, p, send);
        sbuf_consume(&sl->pending, send);
    }
    return false;
}

/* Ends the slot's request: the rest of the text, the finish chunk or the whole body. */
static void slot_finish(srv *s, sched *sc, slot *sl, fin_reason fin) {
    srv_req *r = sl->req;
    if (fin == FIN_STOP || fin == FIN_LENGTH) {
        if (sl->dt) {
            const char *rest = hx_detok_flush(sl->dt);
            if (rest && *rest && slot_text(s, sl, rest, strlen(rest))) fin = FIN_STOP;
        }
        if (sl->pending.len) slot_send(s, sl, sl->pending.p, sl->pending.len);
        sbuf_free(&sl->pending);
    }
    r->usage_gen = sl->n_gen;
    const char *finish = oai_finish_str(fin == FIN_CANCELLED ? FIN_LENGTH : fin);
    if (r->stream) {
        sbuf out = {0};
        if (!sl->first_sent) oai_stream_chunk(s, r, "", 0, true, NULL, NULL, 0, &out);
        oai_stream_chunk(s, r, "", 0, false, finish, sl->lp, sl->n_lp, &out);
        if (r->include_usage) oai_stream_usage(r, &out);
        if (r->kb) oai_stream_citations(s, r, sl->final.p ? sl->final.p : "", sl->final.len, &out);
        sbuf_adds(&out, "data: [DONE]\n\n");
        pthread_mutex_lock(&s->mu);
        req_emit_locked(r, out.p, out.len);
        pthread_mutex_unlock(&s->mu);
        sbuf_free(&out);
    } else {
        char *body = oai_final_body(s, r, sl->final.p ? sl->final.p : "", sl->final.len, finish, sl->lp, sl->n_lp);
        pthread_mutex_lock(&s->mu);
        sbuf_free(&r->out);
        if (body) sbuf_adds(&r->out, body);
        r->status = body ? 200 : 500;
        pthread_mutex_unlock(&s->mu);
        free(body);
    }
    slot_release(s, sc, sl);
    req_finish(s, r, fin);
}

/* ------------------------------------------------------------------------ */
/* sampling                                                                 */
/* ------------------------------------------------------------------------ */

/* Every token's bytes and the end-of-generation ids, for the JSON grammar. */
static bool build_pieces(srv *s, sched *sc) {
    if (sc->pieces) return true;
    int V = sc->n_vocab;
    sbuf all = {0};
    sc->piece_off = malloc(((size_t)V + 1) * sizeof *sc->piece_off);
    sc->eog = malloc((size_t)V * sizeof *sc->eog);
    sc->allowed = malloc((size_t)V);
    if (!sc->piece_off || !sc->eog || !sc->allowed) return false;
    char buf[256];
    for (int t = 0; t < V; t++) {
        sc->piece_off[t] = (int)all.len;
        int n = hx_token_to_piece(s->model, t, buf, (int)sizeof buf, false);
        if (n > 0 && n <= (int)sizeof buf) sbuf_add(&all, buf, (size_t)n);
        if (hx_token_is_eog(s->model, t)) sc->eog[sc->n_eog++] = t;
    }
    sc->piece_off[V] = (int)all.len;
    if (all.oom) { sbuf_free(&all); return false; }
    sc->pieces = sbuf_take(&all);
    return true;
}

/* allowed[t] for the JSON grammar from sl->jg with `left` tokens after this one. */
static void json_mask(sched *sc, const slot *sl, int left) {
    memset(sc->allowed, 0, (size_t)sc->n_vocab);
    if (jg_done(&sl->jg)) {
        for (int i = 0; i < sc->n_eog; i++) sc->allowed[sc->eog[i]] = 1;
        return;
    }
    for (int t = 0; t < sc->n_vocab; t++) {
        int a = sc->piece_off[t], b = sc->piece_off[t + 1];
        if (a == b) continue;   /* control tokens: no text */
        jg_state st = sl->jg;
        if (!jg_feed(&st, sc->pieces + a, (size_t)(b - a))) continue;
        /* the shortest completion must still fit, one byte per token at worst */
        int bound = st.depth + 8 + (st.sch ? st.sch->tail : 0);   /* jg_dist is never more */
        if (left < bound && jg_dist(&st) > left) continue;
        sc->allowed[t] = 1;
    }
}

/* log-softmax of the raw logits: the chosen token's and the top n. */
static void logprobs_of(sched *sc, const float *logits, int32_t tok, int n_top, oai_logprob *out) {
    int V = sc->n_vocab;
    float mx = logits[0];
    for (int i = 1; i < V; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)(logits[i] - mx));
    float lse = mx + (float)log(sum);
    out->token = tok;
    out->logprob = logits[tok] - lse;
    out->n_top = 0;
    for (int k = 0; k < n_top && k < 20; k++) {
        int bi = -1;
        for (int i = 0; i < V; i++) {
            bool taken = false;
            for (int j = 0; j < out->n_top; j++) if (out->top_tok[j] == i) { taken = true; break; }
            if (!taken && (bi < 0 || logits[i] > logits[bi])) bi = i;
        }
        if (bi < 0) break;
        out->top_tok[out->n_top] = bi;
        out->top_lp[out->n_top++] = logits[bi] - lse;
    }
}

/* A request whose next token is the plain argmax of its logits: greedy with
 * no penalty, bias, grammar or logprobs. Its pick can be made on the device
 * (hx_get_argmax) without copying the row of logits to the host. */
static bool plain_greedy(const srv_req *r) {
    const hx_sampler_params *p = &r->sp;
    bool penalized = p->penalty_last_n != 0 &&
                     (p->repeat_penalty != 1.0f || p->freq_penalty != 0.0f || p->presence_penalty != 0.0f);
    return p->temp <= 0.0f && !penalized && p->n_logit_bias == 0 && !r->json_mode && r->logprobs < 0;
}

/* One generated token for a slot: `picked` when the token was chosen already
 * (plain_greedy on the device), else sampled from the row of batch token
 * `at` of the last decode. */
static void slot_sample(srv *s, sched *sc, slot *sl, int at, int32_t picked) {
    srv_req *r = sl->req;
    int left = r->max_tokens - sl->n_gen - 1;
    int room = hx_context_n_ctx_seq(sc->ctx) - sl->n_past - 1;
    if (room < left) left = room;
    const float *logits = picked >= 0 ? NULL : hx_get_logits(sc->ctx, at);
    if (picked < 0 && !logits) { /* a device fault while copying the row */
        hx_seq_clear(sc->ctx, sl->seq);
        slot_release(s, sc, sl);
        req_fail(s, r, 500, "decode_failed", "the logits of this step could not be read", FIN_ERROR);
        return;
    }
    int32_t tok;
    if (picked >= 0) tok = picked;
    else if (r->json_mode) {
        json_mask(sc, sl, left);
        tok = hx_sampler_sample_allowed(sl->smp, logits, sc->allowed);
        if (tok < 0) { slot_finish(s, sc, sl, FIN_LENGTH); return; }
    } else tok = hx_sampler_sample(sl->smp, logits);
    if (r->logprobs >= 0) {
        if (sl->n_lp == sl->cap_lp) {
            int nc = sl->cap_lp ? sl->cap_lp * 2 : 16;
            oai_logprob *p = realloc(sl->lp, (size_t)nc * sizeof *p);
            if (p) { sl->lp = p; sl->cap_lp = nc; }
        }
        if (sl->n_lp < sl->cap_lp) logprobs_of(sc, logits, tok, r->logprobs, &sl->lp[sl->n_lp++]);
    }
    hx_sampler_accept(sl->smp, tok);
    sl->n_gen++;
    pthread_mutex_lock(&s->mu);
    s->st.gen_tokens++;
    if (sl->n_gen == 1) r->t_first = util_now();
    pthread_mutex_unlock(&s->mu);
    if (hx_token_is_eog(s->model, tok) && !(r->ignore_eog && !r->json_mode)) {
        sl->n_gen--;   /* the end-of-generation token is not part of the completion */
        r->usage_gen = sl->n_gen;
        slot_finish(s, sc, sl, FIN_STOP);
        return;
    }
    if (r->json_mode) jg_feed(&sl->jg, sc->pieces + sc->piece_off[tok], (size_t)(sc->piece_off[tok + 1] - sc->piece_off[tok]));
    const char *t = hx_detok_push(sl->dt, tok);
    if (t && *t && slot_text(s, sl, t, strlen(t))) { slot_finish(s, sc, sl, FIN_STOP); return; }
    if (sl->n_gen >= r->max_tokens || sl->n_past >= hx_context_n_ctx_seq(sc->ctx)) {
        slot_finish(s, sc, sl, FIN_LENGTH);
        return;
    }
    sl->next_tok = tok;
    sl->state = S_DECODE;
}

/* ------------------------------------------------------------------------ */
/* decoder embeddings                                                       */
/* ------------------------------------------------------------------------ */

static void slot_embed_done(srv *s, sched *sc, slot *sl) {
    srv_req *r = sl->req;
    char *body = oai_embeddings_body(r, sl->emb_out, r->n_texts, sc->n_embd, r->n_prompt);
    pthread_mutex_lock(&s->mu);
    sbuf_free(&r->out);
    if (body) sbuf_adds(&r->out, body);
    r->status = body ? 200 : 500;
    s->st.embeddings += (uint64_t)r->n_texts;
    pthread_mutex_unlock(&s->mu);
    free(body);
    slot_release(s, sc, sl);
    req_finish(s, r, FIN_STOP);
}

/* Adds the hidden states of this step's tokens; moves to the next text when one is complete. */
static void slot_embed_step(srv *s, sched *sc, slot *sl) {
    srv_req *r = sl->req;
    for (int i = 0; i < sl->batch_n; i++) {
        const float *h = hx_get_embeddings(sc->ctx, sl->batch_first + i);
        if (!h) continue;
        for (int k = 0; k < sc->n_embd; k++) sl->emb_sum[k] += h[k];
    }
    if (sl->emb_fed < r->n_text_ids[sl->emb_text]) return;
    /* mean, then unit length */
    float *o = sl->emb_out + (size_t)sl->emb_text * sc->n_embd;
    double nrm = 0;
    for (int k = 0; k < sc->n_embd; k++) {
        o[k] = sl->emb_sum[k] / (float)r->n_text_ids[sl->emb_text];
        nrm += (double)o[k] * o[k];
    }
    float inv = nrm > 0 ? (float)(1.0 / sqrt(nrm)) : 0.f;
    for (int k = 0; k < sc->n_embd; k++) o[k] *= inv;
    memset(sl->emb_sum, 0, (size_t)sc->n_embd * sizeof(float));
    sl->emb_text++;
    sl->emb_fed = 0;
    hx_seq_clear(sc->ctx, sl->seq);
    sl->n_past = 0;
    if (sl->emb_text == r->n_texts) slot_embed_done(s, sc, sl);
}

/* ------------------------------------------------------------------------ */
/* the loop                                                                 */
/* ------------------------------------------------------------------------ */

/* Client hang-ups on suspended connections (libmicrohttpd does not watch
 * those sockets): POLLRDHUP / POLLHUP / POLLERR. Caller holds s->mu. */
static void poll_hangups_locked(sched *sc, srv *s) {
    struct pollfd pf[256];
    srv_req *who[256];
    int n = 0;
    for (int i = 0; i < sc->n_slots && n < 256; i++) {
        srv_req *r = sc->slots[i].req;
        if (r && r->suspended && r->fd >= 0 && !r->cancelled) { pf[n] = (struct pollfd){r->fd, POLLRDHUP, 0}; who[n++] = r; }
    }
    for (int i = 0; i < s->n_queue && n < 256; i++) {
        srv_req *r = s->queue[i];
        if (r->suspended && r->fd >= 0 && !r->cancelled) { pf[n] = (struct pollfd){r->fd, POLLRDHUP, 0}; who[n++] = r; }
    }
    if (!n || poll(pf, (nfds_t)n, 0) <= 0) return;
    for (int i = 0; i < n; i++)
        if (pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) who[i]->cancelled = true;
}

static void update_stats(srv *s, sched *sc, int seqs, int tokens) {
    int busy = 0, kv = 0;
    for (int i = 0; i < sc->n_slots; i++) {
        if (sc->slots[i].state != S_FREE) busy++;
        kv += hx_seq_pos(sc->ctx, sc->slots[i].seq);
    }
    double now = util_now();
    pthread_mutex_lock(&s->mu);
    s->st.kv_used = kv;
    if (sc->page) {
        s->st.kv_pages_used = (hx_context_n_ctx(sc->ctx) - hx_context_kv_free(sc->ctx)) / sc->page;
        s->st.kv_admit_pages = pool_avail(sc);
    }
    s->st.queue_depth = s->n_queue;
    if (tokens) { s->st.last_batch_seqs = seqs; s->st.last_batch_tokens = tokens; }
    /* tokens/s over a window of about 10 s, sampled at most every 0.25 s */
    int last = (sc->win_head + 31) % 32;
    if (!sc->win_n || now - sc->win_t[last] >= 0.25) {
        sc->win_t[sc->win_head] = now;
        sc->win_tok[sc->win_head] = s->st.gen_tokens;
        sc->win_head = (sc->win_head + 1) % 32;
        if (sc->win_n < 32) sc->win_n++;
    }
    int oldest = (sc->win_head + 32 - sc->win_n) % 32;
    for (int k = 0; k < sc->win_n && now - sc->win_t[oldest] > 10; k++) oldest = (oldest + 1) % 32;
    double dt = now - sc->win_t[oldest];
    s->st.tok_per_s = dt > 0.5 ? (double)(s->st.gen_tokens - sc->win_tok[oldest]) / dt : 0;
    if (!busy && now - sc->win_t[last] > 2) s->st.tok_per_s = 0;
    pthread_mutex_unlock(&s->mu);
}

/* One step of a lone plain-greedy stream through hx_decode_greedy; false when
 * the step failed (the slot's request is ended with the error). */
static bool lone_step(srv *s, sched *sc, slot *sl, double *tok_s) {
    hx_error e = {0};
    int32_t tok = -1;
    if (sc->page && sl->n_past % sc->page == 0) evict_idle(sc, 1);   /* a new page: idle caches give way */
    double t0 = util_now();
    hx_status st = hx_decode_greedy(sc->ctx, sl->seq, sl->next_tok, &tok, &e);
    double t1 = util_now();
    *tok_s = *tok_s > 0 ? 0.8 * *tok_s + 0.2 * (t1 - t0) : t1 - t0;
    pthread_mutex_lock(&s->mu);
    s->st.decode_steps++;
    s->st.single_steps++;
    s->st.busy_s += t1 - t0;
    pthread_mutex_unlock(&s->mu);
    if (st == HX_ERR_KV_FULL) {   /* the stream ends as at a full context, its pages back */
        hx_seq_clear(sc->ctx, sl->seq);
        slot_finish(s, sc, sl, FIN_LENGTH);
        return false;
    }
    if (st != HX_OK) {
        fprintf(stderr, "serve: decode of 1 token failed: %s\n", e.msg);
        srv_req *r = sl->req;
        hx_seq_clear(sc->ctx, sl->seq);
        slot_release(s, sc, sl);
        req_fail(s, r, 500, "decode_failed", e.msg, FIN_ERROR);
        return false;
    }
    sl->n_past++;
    sl->last_used = t1;
    slot_sample(s, sc, sl, -1, tok);
    return true;
}

static void *sched_main(void *arg) {
    srv *s = arg;
    sched *sc = s->sched;
    double tok_s = 0;   /* running estimate of decode seconds per batch token */
    for (;;) {
        double now = util_now();
        /* 1-2: cancellations, deadlines, admissions (under the lock), then the hx work outside it */
        srv_req *admitted[64];
        int n_admit = 0, n_free = 0;
        srv_req *dropped[64];
        int n_drop = 0;
        pthread_mutex_lock(&s->mu);
        if (s->quit) { pthread_mutex_unlock(&s->mu); break; }
        if (now - sc->last_poll > 0.02) { poll_hangups_locked(sc, s); sc->last_poll = now; }
        for (int i = 0; i < sc->n_slots; i++) if (sc->slots[i].state == S_FREE) n_free++;
        /* LoRA: the context applies one adapter (or none) to every slot, and changing it clears every
         * cache. Requests of the running adapter are admitted in queue order; at the first that wants
         * another, admission stops until the running ones finish, then the context switches to it. */
        int want = n_free < sc->n_slots ? sc->lora : -1;
        int w = 0;
        /* a paged pool: requests in queue order while the pool holds their prompt and some room */
        int avail = sc->page && s->n_queue ? pool_avail(sc) : 0;
        for (int i = 0; i < s->n_queue; i++) {
            srv_req *r = s->queue[i];
            int need = need_pages(sc->page, s->n_ctx, r);
            if ((r->cancelled || now > r->deadline) && n_drop < 64) dropped[n_drop++] = r;
            else if (n_free > 0 && n_admit < 64 && w == 0 && (want < 0 || r->lora == want) &&
                     (!sc->page || need <= avail)) {
                want = r->lora;
                admitted[n_admit++] = r;
                n_free--;
                avail -= need;
            }
            else s->queue[w++] = r;
        }
        s->n_queue = w;
        s->st.queue_depth = w;
        s->st.slots_busy += n_admit;   /* counted before the lock is let go (srv_submit reads it) */
        bool any_busy = false;
        for (int i = 0; i < sc->n_slots; i++) if (sc->slots[i].state != S_FREE) any_busy = true;
        if (!any_busy && !n_admit && !n_drop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&s->wake, &s->mu, &ts);
            pthread_mutex_unlock(&s->mu);
            update_stats(s, sc, 0, 0);
            continue;
        }
        pthread_mutex_unlock(&s->mu);

        for (int i = 0; i < n_drop; i++) {
            srv_req *r = dropped[i];
            if (r->cancelled) req_fail(s, r, 503, "cancelled", "the request was cancelled", FIN_CANCELLED);
            else req_fail(s, r, 503, "timeout", "timed out waiting for a free slot", FIN_CANCELLED);
        }
        if (n_admit > 0 && want != sc->lora) { /* nothing runs: switch the adapter (want: all of them take it) */
            hx_error e = {0};
            float one = 1.0f;
            hx_adapter **a = want > 0 ? &s->adapters[want - 1] : NULL;
            if (hx_context_set_adapters(sc->ctx, a, a ? &one : NULL, a ? 1 : 0, &e) != HX_OK) {
                for (int i = 0; i < n_admit; i++) {
                    pthread_mutex_lock(&s->mu);
                    s->st.slots_busy--;
                    pthread_mutex_unlock(&s->mu);
                    req_fail(s, admitted[i], 500, "adapter_error", e.msg, FIN_ERROR);
                }
                n_admit = 0;
            } else {
                sc->lora = want;
                for (int i = 0; i < sc->n_slots; i++) sc->slots[i].n_past = 0; /* the caches were cleared */
                if (s->cfg.verbose) fprintf(stderr, "serve: adapter now %s\n", want ? s->cfg.lora_name[want - 1] : "(none)");
            }
        }
        for (int i = 0; i < n_admit; i++) {
            srv_req *r = admitted[i];
            if (r->json_mode && !build_pieces(s, sc)) {
                req_fail(s, r, 500, "out_of_memory", "out of memory building the token table", FIN_ERROR);
                continue;
            }
            slot *sl = admit(s, sc, r);
            if (!sl) {
                pthread_mutex_lock(&s->mu);
                s->st.slots_busy--;
                pthread_mutex_unlock(&s->mu);
            }
            if (!sl || (sl->state == S_PREFILL && (!sl->smp || !sl->dt)) ||
                (sl->state == S_EMBED && (!sl->emb_sum || !sl->emb_out))) {
                if (sl) slot_release(s, sc, sl);
                req_fail(s, r, 500, "out_of_memory", "out of memory starting the request", FIN_ERROR);
                continue;
            }
            pthread_mutex_lock(&s->mu);
            s->st.cached_tokens += (uint64_t)r->usage_cached;
            pthread_mutex_unlock(&s->mu);
        }

        /* running requests: cancelled or past their deadline */
        for (int i = 0; i < sc->n_slots; i++) {
            slot *sl = &sc->slots[i];
            if (sl->state == S_FREE) continue;
            pthread_mutex_lock(&s->mu);
            bool cancelled = sl->req->cancelled;
            pthread_mutex_unlock(&s->mu);
            if (cancelled) {
                srv_req *r = sl->req;
                r->usage_gen = sl->n_gen;
                slot_release(s, sc, sl);
                req_fail(s, r, 503, "cancelled", "the request was cancelled", FIN_CANCELLED);
            } else if (now > sl->req->deadline) {
                if (sl->state == S_EMBED) {
                    srv_req *r = sl->req;
                    slot_release(s, sc, sl);
                    req_fail(s, r, 503, "timeout", "the request timed out", FIN_CANCELLED);
                } else slot_finish(s, sc, sl, FIN_LENGTH);
            }
        }

        /* 3, one plain-greedy stream and nothing else to run: the single-sequence step */
        slot *lone = NULL;
        int n_run = 0;
        for (int i = 0; i < sc->n_slots; i++) {
            slot *sl = &sc->slots[i];
            if (sl->state == S_FREE) continue;
            n_run++;
            if (sl->state == S_DECODE) lone = sl;
        }
        if (n_run == 1 && lone && plain_greedy(lone->req)) {
            bool ok = lone_step(s, sc, lone, &tok_s);
            update_stats(s, sc, ok ? 1 : 0, ok ? 1 : 0);
            continue;
        }

        /* 3: the batch */
        hx_batch *b = &sc->batch;
        hx_batch_clear(b);
        int seqs = 0, n_dec = 0;
        /* a paged pool: pages this batch takes (hx_decode takes them all or none) */
        int taken = 0, ended = 0;
        slot *stuck = NULL;
        for (int i = 0; i < sc->n_slots; i++) {
            slot *sl = &sc->slots[i];
            sl->batch_n = 0;
            if (sl->state != S_DECODE) continue;
            if (sc->page && sl->n_past % sc->page == 0 && !evict_idle(sc, taken + 1)) {
                /* the stream needs a page and the pool has none: it ends here, its pages back */
                hx_seq_clear(sc->ctx, sl->seq);
                slot_finish(s, sc, sl, FIN_LENGTH);
                ended++;
                continue;
            }
            if (sc->page && sl->n_past % sc->page == 0) taken++;
            sl->batch_first = b->n_tokens;
            hx_batch_add(b, sl->next_tok, sl->n_past, sl->seq, true);
            sl->batch_n = 1;
            seqs++;
            n_dec++;
        }
        /* While streams decode, a step's prompt tokens are capped so the step stays near
         * --step-ms (a step is every stream's inter-token gap), and at --prefill-chunk. */
        int budget = b->capacity;
        if (n_dec) {
            budget = s->cfg.prefill_chunk;
            if (tok_s > 0 && s->cfg.step_target_s > 0) {
                double fit = s->cfg.step_target_s / tok_s - n_dec;
                if (fit < budget) budget = fit < 16 ? 16 : (int)fit;
            }
        }
        /* prefill in admission order (request serial) so the oldest prompt finishes first */
        for (;;) {
            slot *pick = NULL;
            for (int i = 0; i < sc->n_slots; i++) {
                slot *sl = &sc->slots[i];
                if ((sl->state == S_PREFILL || sl->state == S_EMBED) && sl->batch_n == 0 &&
                    (!pick || sl->req->serial < pick->req->serial))
                    pick = sl;
            }
            int room = b->capacity - b->n_tokens;
            if (!pick || budget <= 0 || room <= 0) break;
            srv_req *r = pick->req;
            const int32_t *toks;
            int todo, done;
            if (pick->state == S_PREFILL) { toks = r->prompt; done = pick->n_past; todo = r->n_prompt - done; }
            else { toks = r->text_ids[pick->emb_text]; done = pick->emb_fed; todo = r->n_text_ids[pick->emb_text] - done; }
            int take = todo < budget ? todo : budget;
            if (take > room) take = room;
            if (sc->page && take > 0) {   /* as much as the pool holds now; the rest waits */
                int in_last = pages_of(sc->page, pick->n_past) * sc->page - pick->n_past;
                if (take > in_last) evict_idle(sc, taken + pages_of(sc->page, take - in_last));
                int can = in_last + (hx_context_kv_free(sc->ctx) / sc->page - taken) * sc->page;
                if (take > can) take = can > 0 ? can : 0;
                if (take == 0 && (!stuck || pick->req->serial > stuck->req->serial)) stuck = pick;
                taken += pages_of(sc->page, pick->n_past + take) - pages_of(sc->page, pick->n_past);
            }
            pick->batch_first = b->n_tokens;
            for (int k = 0; k < take; k++) {
                bool want = pick->state == S_EMBED || (k == take - 1 && take == todo);
                hx_batch_add(b, toks[done + k], pick->n_past + k, pick->seq, want);
            }
            pick->batch_n = take > 0 ? take : -1;   /* -1: nothing this step, but not picked again */
            budget -= take;
            seqs++;
        }
        if (b->n_tokens == 0 && stuck && !ended) {
            /* nothing can run and no page will come back: prompts hold the whole pool. The
             * youngest gives way (admission counts pages so that this stays rare). */
            srv_req *r = stuck->req;
            hx_seq_clear(sc->ctx, stuck->seq);
            slot_release(s, sc, stuck);
            req_fail(s, r, 503, "kv_cache_full", "the KV cache is full; retry later", FIN_CANCELLED);
        }
        if (b->n_tokens == 0) { update_stats(s, sc, 0, 0); continue; }

        /* 4: decode and sample */
        double t0 = util_now();
        hx_error e = {0};
        hx_status st = hx_decode(sc->ctx, b, &e);
        double t1 = util_now();
        double per = (t1 - t0) / b->n_tokens;
        tok_s = tok_s > 0 ? 0.8 * tok_s + 0.2 * per : per;
        pthread_mutex_lock(&s->mu);
        s->st.decode_steps++;
        s->st.busy_s += t1 - t0;
        pthread_mutex_unlock(&s->mu);
        if (st == HX_ERR_KV_FULL) {
            /* the pages counted above fell short (nothing was written): the streams in the
             * batch end as at a full context, the prompts wait for the pages they give back */
            if (s->cfg.verbose) fprintf(stderr, "serve: %s\n", e.msg);
            for (int i = 0; i < sc->n_slots; i++) {
                slot *sl = &sc->slots[i];
                if (sl->state != S_DECODE || sl->batch_n <= 0) continue;
                hx_seq_clear(sc->ctx, sl->seq);
                slot_finish(s, sc, sl, FIN_LENGTH);
            }
            update_stats(s, sc, 0, 0);
            continue;
        }
        if (st != HX_OK) {
            fprintf(stderr, "serve: decode of %d tokens failed: %s\n", b->n_tokens, e.msg);
            for (int i = 0; i < sc->n_slots; i++) {
                slot *sl = &sc->slots[i];
                if (sl->state == S_FREE || sl->batch_n == 0) continue;
                srv_req *r = sl->req;
                hx_seq_clear(sc->ctx, sl->seq);
                slot_release(s, sc, sl);
                req_fail(s, r, 500, "decode_failed", e.msg, FIN_ERROR);
            }
            update_stats(s, sc, 0, 0);
            continue;
        }
        /* the plain greedy picks of this step, all at once (on the device on a GPU) */
        int n_pick = 0;
        for (int i = 0; i < sc->n_slots; i++) {
            slot *sl = &sc->slots[i];
            sl->picked = -1;
            if (sl->state == S_FREE || sl->batch_n <= 0 || !plain_greedy(sl->req)) continue;
            if (sl->state == S_DECODE) sc->pick_at[n_pick] = sl->batch_first;
            else if (sl->state == S_PREFILL && sl->n_past + sl->batch_n == sl->req->n_prompt)
                sc->pick_at[n_pick] = sl->batch_first + sl->batch_n - 1;
            else continue;
            sc->pick_slot[n_pick++] = i;
        }
        if (n_pick > 0) {
            if (hx_get_argmax(sc->ctx, n_pick, sc->pick_at, sc->pick_tok, &e) == HX_OK) {
                for (int j = 0; j < n_pick; j++) sc->slots[sc->pick_slot[j]].picked = sc->pick_tok[j];
            } else {
                fprintf(stderr, "serve: greedy picks failed (%s); sampling on the host\n", e.msg);
            }
        }
        for (int i = 0; i < sc->n_slots; i++) {
            slot *sl = &sc->slots[i];
            if (sl->state == S_FREE || sl->batch_n <= 0) continue;
            sl->n_past += sl->batch_n;
            sl->last_used = t1;
            if (sl->state == S_DECODE) {
                slot_sample(s, sc, sl, sl->batch_first, sl->picked);
            } else if (sl->state == S_PREFILL) {
                pthread_mutex_lock(&s->mu);
                s->st.prompt_tokens += (uint64_t)sl->batch_n;
                pthread_mutex_unlock(&s->mu);
                if (sl->n_past == sl->req->n_prompt)
                    slot_sample(s, sc, sl, sl->batch_first + sl->batch_n - 1, sl->picked);
            } else if (sl->state == S_EMBED) {
                sl->emb_fed += sl->batch_n;
                pthread_mutex_lock(&s->mu);
                s->st.prompt_tokens += (uint64_t)sl->batch_n;
                pthread_mutex_unlock(&s->mu);
                slot_embed_step(s, sc, sl);
            }
        }
        update_stats(s, sc, seqs, b->n_tokens);
    }
    /* quit: end whatever is still running */
    for (int i = 0; i < sc->n_slots; i++) {
        slot *sl = &sc->slots[i];
        if (sl->state == S_FREE) continue;
        srv_req *r = sl->req;
        slot_release(s, sc, sl);
        req_fail(s, r, 503, "shutting_down", "the server is shutting down", FIN_CANCELLED);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* the BERT embedder thread                                                 */
/* ------------------------------------------------------------------------ */

static void *emb_main(void *arg) {
    srv *s = arg;
    int dim = hx_embedder_dim(s->emb);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->quit && s->n_emb_queue == 0) pthread_cond_wait(&s->emb_wake, &s->mu);
        if (s->quit && s->n_emb_queue == 0) { pthread_mutex_unlock(&s->mu); break; }
        srv_req *r = s->emb_queue[0];
        memmove(s->emb_queue, s->emb_queue + 1, (size_t)(s->n_emb_queue - 1) * sizeof *s->emb_queue);
        s->n_emb_queue--;
        bool cancelled = r->cancelled || s->quit;
        pthread_mutex_unlock(&s->mu);
        if (cancelled) { req_fail(s, r, 503, "cancelled", "the request was cancelled", FIN_CANCELLED); continue; }
        float *vec = malloc((size_t)r->n_texts * (size_t)dim * sizeof *vec);
        if (!vec) { req_fail(s, r, 500, "out_of_memory", "out of memory", FIN_ERROR); continue; }
        hx_error e = {0};
        if (hx_embed(s->emb, (const char *const *)r->texts, r->n_texts, vec, &e) != HX_OK) {
            free(vec);
            req_fail(s, r, 500, "embed_failed", e.msg, FIN_ERROR);
            continue;
        }
        int tokens = 0;
        if (s->emb_model)
            for (int i = 0; i < r->n_texts; i++) {
                int32_t one[1];
                int n = 0;
                hx_tokenize(s->emb_model, r->texts[i], -1, true, false, one, 1, &n, NULL);
                tokens += n;
            }
        char *body = oai_embeddings_body(r, vec, r->n_texts, dim, tokens);
        free(vec);
        pthread_mutex_lock(&s->mu);
        sbuf_free(&r->out);
        if (body) sbuf_adds(&r->out, body);
        r->status = body ? 200 : 500;
        r->usage_prompt = tokens;
        s->st.embeddings += (uint64_t)r->n_texts;
        s->st.prompt_tokens += (uint64_t)tokens;
        pthread_mutex_unlock(&s->mu);
        free(body);
        req_finish(s, r, FIN_STOP);
    }
    /* quit: refuse what is left */
    for (;;) {
        pthread_mutex_lock(&s->mu);
        srv_req *r = s->n_emb_queue ? s->emb_queue[--s->n_emb_queue] : NULL;
        pthread_mutex_unlock(&s->mu);
        if (!r) break;
        req_fail(s, r, 503, "shutting_down", "the server is shutting down", FIN_CANCELLED);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* start / stop                                                             */
/* ------------------------------------------------------------------------ */

int srv_sched_start(srv *s, hx_error *e) {
    sched *sc = calloc(1, sizeof *sc);
    if (!sc) { snprintf(e->msg, sizeof e->msg, "out of memory"); return 1; }
    s->sched = sc;
    if (s->model) {
        hx_context_params cp = hx_context_default_params();
        cp.n_seq_max = s->cfg.n_parallel;
        cp.n_ctx = s->cfg.n_ctx;
        cp.n_ctx_seq = s->cfg.n_ctx_seq;
        cp.n_threads = s->cfg.n_threads;
        int nb = s->cfg.n_batch;
        if (nb < s->cfg.n_parallel + s->cfg.prefill_chunk) nb = s->cfg.n_parallel + s->cfg.prefill_chunk;
        cp.n_batch = nb;
        cp.embeddings = s->cfg.decoder_embeddings;
        if (hx_context_new(s->model, &cp, &sc->ctx, e) != HX_OK) return 1;
        sc->n_vocab = hx_model_n_vocab(s->model);
        sc->n_embd = hx_model_n_embd(s->model);
        sc->n_slots = hx_context_n_seq_max(sc->ctx);
        sc->slots = calloc((size_t)sc->n_slots, sizeof *sc->slots);
        sc->pick_at = calloc((size_t)sc->n_slots, sizeof *sc->pick_at);
        sc->pick_slot = calloc((size_t)sc->n_slots, sizeof *sc->pick_slot);
        sc->pick_tok = calloc((size_t)sc->n_slots, sizeof *sc->pick_tok);
        sc->batch = hx_batch_init(nb);
        if (!sc->slots || !sc->pick_at || !sc->pick_slot || !sc->pick_tok || sc->batch.capacity == 0) { snprintf(e->msg, sizeof e->msg, "out of memory"); return 1; }
        for (int i = 0; i < sc->n_slots; i++) sc->slots[i].seq = i;
        s->n_ctx_seq = hx_context_n_ctx_seq(sc->ctx);
        s->n_ctx = hx_context_n_ctx(sc->ctx);
        s->kv_page = sc->page = hx_context_kv_page(sc->ctx);
        s->st.kv_admit_pages = sc->page ? s->n_ctx / sc->page : 0;
        s->n_vocab = sc->n_vocab;
        if (pthread_create(&s->sched_thread, NULL, sched_main, s)) {
            snprintf(e->msg, sizeof e->msg, "cannot start the scheduler thread: %s", strerror(errno));
            return 1;
        }
        s->sched_started = true;
    }
    if (s->emb) {
        if (pthread_create(&s->emb_thread, NULL, emb_main, s)) {
            snprintf(e->msg, sizeof e->msg, "cannot start the embedding thread: %s", strerror(errno));
            return 1;
        }
        s->emb_started = true;
    }
    return 0;
}

void srv_cancel_all(srv *s) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_queue; i++) s->queue[i]->cancelled = true;
    for (int i = 0; i < s->n_emb_queue; i++) s->emb_queue[i]->cancelled = true;
    sched *sc = s->sched;
    if (sc)
        for (int i = 0; i < sc->n_slots; i++)
            if (sc->slots[i].req) sc->slots[i].req->cancelled = true;
    pthread_cond_broadcast(&s->wake);
    pthread_cond_broadcast(&s->emb_wake);
    pthread_mutex_unlock(&s->mu);
}

void srv_sched_stop(srv *s) {
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->wake);
    pthread_cond_broadcast(&s->emb_wake);
    pthread_mutex_unlock(&s->mu);
    if (s->sched_started) pthread_join(s->sched_thread, NULL);
    if (s->emb_started) pthread_join(s->emb_thread, NULL);
    s->sched_started = s->emb_started = false;
    /* requests still queued for the scheduler */
    for (;;) {
        pthread_mutex_lock(&s->mu);
        srv_req *r = s->n_queue ? s->queue[--s->n_queue] : NULL;
        pthread_mutex_unlock(&s->mu);
        if (!r) break;
        req_fail(s, r, 503, "shutting_down", "the server is shutting down", FIN_CANCELLED);
    }
    sched *sc = s->sched;
    if (sc) {
        hx_batch_free(&sc->batch);
        free(sc->slots);
        free(sc->pick_at);
        free(sc->pick_slot);
        free(sc->pick_tok);
        free(sc->scratch);
        free(sc->pieces);
        free(sc->piece_off);
        free(sc->eog);
        free(sc->allowed);
        hx_context_free(sc->ctx);
        free(sc);
        s->sched = NULL;
    }
}
