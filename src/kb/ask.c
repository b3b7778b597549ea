/* ask.c — grounded prompts and citations (see ask.h). */
#include "kb/ask.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

const char *kb_ask_system(void) {
    return "You answer questions from a person's notes. Use only the numbered notes you are given. Cite the notes "
           "you use by their numbers in square brackets, like [2]. If the notes do not contain the answer, say that "
           "you do not know.";
}

/* "[n] title (topic)\ntext\n\n" for one entry; text cut to max_bytes when >= 0. */
static char *entry_block(int num, const kb_entry *en, long max_bytes) {
    const char *text = en->text ? en->text : "";
    size_t tn = strlen(text);
    bool cut = max_bytes >= 0 && (size_t)max_bytes < tn;
    if (cut) {
        tn = (size_t)max_bytes;
        while (tn > 0 && ((unsigned char)text[tn] & 0xC0) == 0x80) tn--;     /* not inside a character */
        size_t w = tn;
        while (w > 0 && !isspace((unsigned char)text[w])) w--;                 /* at a word boundary */
        if (w > 0) tn = w;
    }
    const char *title = en->title && *en->title ? en->title : "(untitled)";
    const char *topic = en->topic ? en->topic : "";
    size_t cap = tn + strlen(title) + strlen(topic) + 64;
    char *b = malloc(cap);
    if (b) snprintf(b, cap, "[%d] %s (topic: %s)\n%.*s%s\n\n", num, title, topic, (int)tn, text, cut ? " ..." : "");
    return b;
}

void kb_ask_ctx_free(kb_ask_ctx *c) {
    free(c->context);
    memset(c, 0, sizeof *c);
}

hx_status kb_ask_context(const kb_entry *const *entries, int n, int budget, kb_count_fn count, void *user,
                         kb_ask_ctx *out, hx_error *e) {
    memset(out, 0, sizeof *out);
    size_t len = 0, cap = 1;
    char *ctx = malloc(cap);
    if (!ctx) return hx_err(e, HX_ERR_NOMEM, "ask: out of memory");
    ctx[0] = 0;
    int used = 0;
    for (int i = 0; i < n; i++) {
        char *b = entry_block(i + 1, entries[i], -1);
        if (!b) { free(ctx); return hx_err(e, HX_ERR_NOMEM, "ask: out of memory"); }
        int t = count(b, user);
        if (t < 0) { free(b); free(ctx); return hx_err(e, HX_ERR_ARG, "ask: cannot count the tokens of an entry"); }
        bool fits = used + t <= budget;
        if (!fits) {
            int left = budget - used;
            free(b);
            b = NULL;
            if (left < 32) break;
            /* cut: shrink the text until the block fits (bytes per token from this entry) */
            long bytes = (long)strlen(entries[i]->text ? entries[i]->text : "");
            long target = (long)((double)bytes * left / (t > 0 ? t : 1));
            for (int tries = 0; tries < 8 && target > 0; tries++) {
                b = entry_block(i + 1, entries[i], target);
                if (!b) { free(ctx); return hx_err(e, HX_ERR_NOMEM, "ask: out of memory"); }
                t = count(b, user);
                if (t >= 0 && used + t <= budget) break;
                free(b);
                b = NULL;
                target = target * 8 / 10;
            }
            if (!b) break;
            out->n_truncated = 1;
        }
        size_t bl = strlen(b);
        char *p = realloc(ctx, len + bl + 1);
        if (!p) { free(b); free(ctx); return hx_err(e, HX_ERR_NOMEM, "ask: out of memory"); }
        ctx = p;
        memcpy(ctx + len, b, bl + 1);
        len += bl;
        free(b);
        used += t;
        out->n_used = i + 1;
        if (out->n_truncated) break;
    }
    out->context = ctx;
    out->tokens = used;
    return HX_OK;
}

char *kb_ask_message(const kb_ask_ctx *c, const char *question) {
    const char *fmt = "Notes:\n\n%s"
                      "Question: %s\n\n"
                      "Answer from the notes above, citing them like [1]. If they do not contain the answer, say you "
                      "do not know.";
    size_t cap = strlen(fmt) + strlen(c->context ? c->context : "") + strlen(question) + 1;
    char *m = malloc(cap);
    if (m) snprintf(m, cap, fmt, c->context ? c->context : "", question);
    return m;
}

int kb_ask_citations(const char *text, int n_refs, bool *cited, int *n_bad) {
    int distinct = 0;
    *n_bad = 0;
    for (int k = 0; k < n_refs; k++) cited[k] = false;
    for (const char *p = text; (p = strchr(p, '[')); ) {
        p++;
        /* a list of numbers: [3] [3, 5] [3,5] */
        const char *q = p;
        long nums[32];
        int nn = 0;
        bool ok = false;
        for (;;) {
            while (*q == ' ') q++;
            if (!isdigit((unsigned char)*q)) break;
            char *end;
            long v = strtol(q, &end, 10);
            if (end - q > 9) break;
            if (nn < 32) nums[nn++] = v;
            q = end;
            while (*q == ' ') q++;
            if (*q == ']') { ok = true; break; }
            if (*q != ',') break;
            q++;
        }
        if (!ok) continue;
        for (int i = 0; i < nn; i++) {
            if (nums[i] >= 1 && nums[i] <= n_refs) {
                if (!cited[nums[i] - 1]) distinct++;
                cited[nums[i] - 1] = true;
            } else {
                (*n_bad)++;
            }
        }
        p = q;
    }
    return distinct;
}
