/* llm.c — the KB's LLM: prompts, batched classification and generation on
 * the public API, and the answer cache (formats in llm.h). */
#include "kb/llm.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

struct kb_llm {
    hx_model *model;
    hx_context *ctx;
    kb_llm_opts o;
    char fingerprint[512];
    long long n_generated;  /* tokens kb_llm_generate produced, for benchmarks */
};

kb_llm_opts kb_llm_defaults(void) {
    return (kb_llm_opts){.device = HX_DEVICE_AUTO, .n_seq = 16, .n_ctx_seq = 1024, .max_entry_words = 200};
}

hx_status kb_llm_open(const kb_llm_opts *o, kb_llm **out, hx_error *e) {
    *out = NULL;
    kb_llm *l = calloc(1, sizeof *l);
    if (!l) return hx_err(e, HX_ERR_NOMEM, "llm: out of memory");
    l->o = *o;
    if (l->o.n_seq <= 0) l->o.n_seq = 16;
    if (l->o.n_ctx_seq <= 0) l->o.n_ctx_seq = 1024;
    if (l->o.max_entry_words <= 0) l->o.max_entry_words = 200;
    hx_model_params mp = hx_model_default_params();
    mp.device = o->device;
    hx_status st = hx_model_open(o->model, &mp, &l->model, e);
    if (st) { free(l); return st; }
    if (hx_model_is_encoder(l->model)) {
        st = hx_err(e, HX_ERR_ARG, "%s: %s is an encoder; the KB's LLM must be a decoder (llama, qwen2, qwen3, gemma3)",
                    o->model, hx_model_arch(l->model));
        kb_llm_free(l);
        return st;
    }
    hx_context_params cp = hx_context_default_params();
    cp.n_seq_max = l->o.n_seq;
    cp.n_ctx = l->o.n_seq * l->o.n_ctx_seq;
    cp.n_ctx_seq = l->o.n_ctx_seq;   /* each of n_seq classifications holds at most this (a pool: its share) */
    cp.n_threads = o->n_threads;
    cp.exact = true;   /* no llama.cpp parity needed here: plain f32 */
    if ((st = hx_context_new(l->model, &cp, &l->ctx, e))) { kb_llm_free(l); return st; }
    snprintf(l->fingerprint, sizeof l->fingerprint, "%s|prompts:%d", hx_model_fingerprint(l->model),
             KB_LLM_PROMPT_VERSION);
    *out = l;
    return HX_OK;
}

void kb_llm_free(kb_llm *l) {
    if (!l) return;
    hx_context_free(l->ctx);
    hx_model_free(l->model);
    free(l);
}

const char *kb_llm_fingerprint(const kb_llm *l) { return l->fingerprint; }
const char *kb_llm_device(const kb_llm *l) { return hx_model_device(l->model) == HX_DEVICE_CUDA ? "cuda" : "cpu"; }
long long kb_llm_tokens_generated(const kb_llm *l) { return l->n_generated; }

/* ---- prompts ---- */

/* A growing string. */
typedef struct sb { char *p; size_t n, cap; bool oom; } sb;
static void sb_add(sb *b, const char *fmt, ...) {
    if (b->oom) return;
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) { b->oom = true; va_end(ap2); return; }
    if (b->n + (size_t)k + 1 > b->cap) {
        size_t cap = (b->n + (size_t)k + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; va_end(ap2); return; }
        b->p = p;
        b->cap = cap;
    }
    vsnprintf(b->p + b->n, (size_t)k + 1, fmt, ap2);
    va_end(ap2);
    b->n += (size_t)k;
}

/* The first max_words words of s (whitespace collapsed), "..." when cut. */
static void sb_words(sb *b, const char *s, int max_words) {
    int w = 0;
    bool space = false;
    for (const char *p = s ? s : ""; *p; p++) {
        if (isspace((unsigned char)*p)) { space = true; continue; }
        if (space && w > 0) sb_add(b, " ");
        if (space || w == 0) {
            if (++w > max_words) { sb_add(b, "..."); return; }
        }
        space = false;
        sb_add(b, "%c", *p);
    }
}

/* system + user through the chat template, the assistant turn opened. */
static char *chat(kb_llm *l, const char *system, sb *user) {
    if (user->oom) { free(user->p); return NULL; }
    hx_chat_message m[2] = {{"system", system}, {"user", user->p}};
    char *out = NULL;
    hx_error e;
    if (hx_chat_apply(l->model, m, 2, true, &out, &e)) {
        /* no template the library knows (a base model): plain text turns */
        sb p = {0};
        sb_add(&p, "%s\n\nUser: %s\nAssistant:", system, user->p);
        out = p.oom ? (free(p.p), NULL) : p.p;
    }
    free(user->p);
    return out;
}

/* Tokens of a prompt as the model reads it (specials parsed), -1 on failure. */
static int prompt_tokens(const kb_llm *l, const char *p) {
    int need = 0;
    hx_error e;
    hx_status st = hx_tokenize(l->model, p, -1, true, true, NULL, 0, &need, &e);
    return st == HX_OK || st == HX_ERR_RANGE ? need : -1;
}

/* Classification is prefill only and cannot drop the prompt's head (the topic
 * list is there): a note too long for a sequence, with room for the longest
 * label, keeps fewer of its words (three quarters each try) until it fits.
 * The note comes after the topic list: everything before its title is the
 * same for every entry, and hx_classify computes that shared head once per
 * batch instead of once per entry. */
char *kb_llm_prompt_classify_about(kb_llm *l, const char *title, const char *text, const char *const *labels,
                                   const char *const *about, int n_labels) {
    const int room = hx_context_n_ctx_seq(l->ctx) - 32; /* 32: the label's tokens and a margin */
    for (int words = l->o.max_entry_words;; words = words * 3 / 4) {
        sb u = {0};
        if (about) {
            sb_add(&u, "Topics, each with titles of notes filed under it:\n");
            for (int i = 0; i < n_labels; i++) sb_add(&u, "- %s%s%s\n", labels[i], about[i] ? ": " : "", about[i] ? about[i] : "");
        } else {
            sb_add(&u, "Topics:");
            for (int i = 0; i < n_labels; i++) sb_add(&u, "%s %s", i ? "," : "", labels[i]);
            sb_add(&u, "\n");
        }
        sb_add(&u, "\nNote title: ");
        sb_words(&u, title ? title : "(none)", words < 24 ? words : 24);
        sb_add(&u, "\nNote: ");
        sb_words(&u, text, words);
        sb_add(&u, "\n\nWhich one of the topics fits this note best? Answer with the topic name only.");
        char *p = chat(l, "You file the notes of a knowledge base under its topics.", &u);
        if (!p || words <= 4) return p;
        int n = prompt_tokens(l, p);
        if (n >= 0 && n <= room) return p;
        free(p);
    }
}

char *kb_llm_prompt_classify(kb_llm *l, const char *title, const char *text, const char *const *labels, int n_labels) {
    return kb_llm_prompt_classify_about(l, title, text, labels, NULL, n_labels);
}

char *kb_llm_prompt_summary(kb_llm *l, const char *title, const char *text) {
    sb u = {0};
    sb_add(&u, "Title: %s\n\n", title ? title : "(none)");
    sb_words(&u, text, l->o.max_entry_words);
    sb_add(&u, "\n\nSummarize this note in one sentence of at most 25 words.");
    return chat(l, "You write short, factual summaries of notes.", &u);
}

char *kb_llm_prompt_digest(kb_llm *l, const char *topic, const char *const *titles, const char *const *texts, int n) {
    sb u = {0};
    sb_add(&u, "Notes filed under \"%s\":\n", topic);
    for (int i = 0; i < n; i++) {
        sb_add(&u, "- %s: ", titles[i] ? titles[i] : "(untitled)");
        sb_words(&u, texts[i], 40);
        sb_add(&u, "\n");
    }
    sb_add(&u, "\nIn two sentences, what do these notes say about %s?", topic);
    return chat(l, "You write short digests of the notes in a knowledge base.", &u);
}

char *kb_llm_prompt_merge(kb_llm *l, const char *title_a, const char *text_a, const char *title_b, const char *text_b) {
    sb u = {0};
    sb_add(&u, "Note A: %s\n", title_a ? title_a : "(untitled)");
    sb_words(&u, text_a, l->o.max_entry_words / 2);
    sb_add(&u, "\n\nNote B: %s\n", title_b ? title_b : "(untitled)");
    sb_words(&u, text_b, l->o.max_entry_words / 2);
    sb_add(&u, "\n\nThese notes are near-duplicates. In one sentence: which one should be kept, and what detail "
               "of the other should be folded into it?");
    return chat(l, "You help keep a knowledge base free of duplicates.", &u);
}

char *kb_llm_prompt_pattern(kb_llm *l, const char *const *titles, int n) {
    sb u = {0};
    sb_add(&u, "Related notes:\n");
    for (int i = 0; i < n; i++) sb_add(&u, "- %s\n", titles[i] ? titles[i] : "(untitled)");
    sb_add(&u, "\nWhat do these notes have in common? Answer with a name of at most six words, then a colon, then "
               "one sentence.");
    return chat(l, "You find recurring patterns in a knowledge base.", &u);
}

/* ---- running the model ---- */

hx_status kb_llm_classify(kb_llm *l, const char *const *prompts, int n, const char *const *labels, int n_labels,
                          float *probs, hx_error *e) {
    return hx_classify(l->ctx, prompts, n, labels, n_labels, probs, NULL, NULL, e);
}

typedef struct slot {
    int item;               /* prompt index, -1 = free */
    int32_t *ids;
    int n_ids, fed;         /* prompt tokens and how many are in the cache */
    int gen;                /* tokens generated */
    int32_t last;           /* the token to feed next (after the prompt) */
    hx_detok *dt;
    sb text;
    bool asked;             /* this slot asked for logits in the batch just run */
    int batch_i;            /* which batch token */
} slot;

/* Trim whitespace at both ends, in place. */
static char *trim(char *s) {
    if (!s) return s;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
    size_t k = 0;
    while (s[k] && isspace((unsigned char)s[k])) k++;
    memmove(s, s + k, n - k + 1);
    return s;
}

hx_status kb_llm_generate(kb_llm *l, const char *const *prompts, int n, int max_tokens, bool one_line, char **out,
                          void (*progress)(int done, int total, void *user), void *user, hx_error *e) {
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (n <= 0) return HX_OK;
    const int S = hx_context_n_seq_max(l->ctx), C = hx_context_n_ctx_seq(l->ctx), V = hx_model_n_vocab(l->model);
    const int budget = 512;   /* tokens per hx_decode: prefill chunks share it with decode steps */
    slot *sl = calloc((size_t)S, sizeof *sl);
    hx_batch b = hx_batch_init(budget + S);
    hx_status st = HX_OK;
    if (!sl || !b.capacity) { free(sl); hx_batch_free(&b); return hx_err(e, HX_ERR_NOMEM, "llm: out of memory"); }
    for (int s = 0; s < S; s++) sl[s].item = -1;
    int next = 0, done = 0;
    while (done < n && !st) {
        /* fill free slots */
        for (int s = 0; s < S && next < n; s++) {
            if (sl[s].item >= 0) continue;
            slot *q = &sl[s];
            hx_seq_clear(l->ctx, s);
            int need = 0, cap = C;
            q->ids = malloc(sizeof(int32_t) * (size_t)cap);
            if (!q->ids) { st = hx_err(e, HX_ERR_NOMEM, "llm: out of memory"); break; }
            st = hx_tokenize(l->model, prompts[next], -1, true, true, q->ids, cap, &need, e);
            if (st == HX_ERR_RANGE || (!st && need + max_tokens > C)) {
                /* too long for a sequence: keep the end of the prompt (the question is there) */
                int32_t *all = realloc(q->ids, sizeof(int32_t) * (size_t)(need > cap ? need : cap));
                if (!all) { st = hx_err(e, HX_ERR_NOMEM, "llm: out of memory"); break; }
                q->ids = all;
                if (need > cap && (st = hx_tokenize(l->model, prompts[next], -1, true, true, q->ids, need, &need, e))) break;
                int keep = C - max_tokens - 1;
                if (keep < 8) { st = hx_err(e, HX_ERR_RANGE, "llm: %d positions per sequence leave no room for a prompt", C); break; }
                memmove(q->ids, q->ids + (need - keep), sizeof(int32_t) * (size_t)keep);
                need = keep;
            } else if (st) {
                break;
            }
            q->item = next++;
            q->n_ids = need;
            q->fed = q->gen = 0;
            q->text = (sb){0};
            q->dt = hx_detok_new(l->model, false);
            if (!q->dt) { st = hx_err(e, HX_ERR_NOMEM, "llm: out of memory"); break; }
        }
        if (st) break;
        /* one batch: decode steps first (one token each), then prompt chunks */
        hx_batch_clear(&b);
        int left = budget;
        for (int s = 0; s < S; s++) {
            slot *q = &sl[s];
            q->asked = false;
            if (q->item < 0 || q->fed < q->n_ids) continue;
            q->batch_i = b.n_tokens;
            hx_batch_add(&b, q->last, q->n_ids + q->gen - 1, s, true);
            q->asked = true;
            left--;
        }
        for (int s = 0; s < S && left > 0; s++) {
            slot *q = &sl[s];
            if (q->item < 0 || q->fed >= q->n_ids) continue;
            int k = q->n_ids - q->fed < left ? q->n_ids - q->fed : left;
            for (int t = 0; t < k; t++) {
                bool last = q->fed + t == q->n_ids - 1;
                if (last) { q->batch_i = b.n_tokens; q->asked = true; }
                hx_batch_add(&b, q->ids[q->fed + t], q->fed + t, s, last);
            }
            q->fed += k;
            left -= k;
        }
        if ((st = hx_decode(l->ctx, &b, e))) break;
        for (int s = 0; s < S; s++) {
            slot *q = &sl[s];
            if (!q->asked) continue;
            const float *lg = hx_get_logits(l->ctx, q->batch_i);
            int32_t t = lg ? hx_argmax(lg, V) : -1;
            bool fin = t < 0 || hx_token_is_eog(l->model, t);
            if (!fin) {
                const char *piece = hx_detok_push(q->dt, t);
                sb_add(&q->text, "%s", piece);
                q->gen++;
                l->n_generated++;
                q->last = t;
                if (one_line && q->text.p && strchr(q->text.p, '\n') && trim(q->text.p)[0]) fin = true;
                if (q->gen >= max_tokens || q->n_ids + q->gen >= C) fin = true;
            }
            if (fin) {
                sb_add(&q->text, "%s", hx_detok_flush(q->dt));
                if (q->text.oom) { st = hx_err(e, HX_ERR_NOMEM, "llm: out of memory"); break; }
                char *txt = q->text.p ? q->text.p : strdup("");
                if (one_line && txt) {
                    trim(txt);
                    char *nl = strchr(txt, '\n');
                    if (nl) *nl = 0;
                }
                out[q->item] = trim(txt);
                hx_detok_free(q->dt);
                free(q->ids);
                q->dt = NULL;
                q->ids = NULL;
                q->item = -1;
                done++;
                if (progress) progress(done, n, user);
            }
        }
    }
    for (int s = 0; s < S; s++) { hx_detok_free(sl[s].dt); free(sl[s].ids); if (sl[s].item >= 0) free(sl[s].text.p); }
    free(sl);
    hx_batch_free(&b);
    if (st)
        for (int i = 0; i < n; i++) { free(out[i]); out[i] = NULL; }
    return st;
}
