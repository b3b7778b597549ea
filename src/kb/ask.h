/* ask.h — "what do my notes say about X?": a prompt grounded in retrieved
 * entries, within a token budget, and the citations in the answer.
 *
 * The retrieved entries are numbered [1]..[n] in the prompt (short numbers are
 * what small models cite reliably); kb_ask_citations maps the numbers the
 * answer uses back to entries, and tells apart numbers that name no
 * retrieved entry. The model is told to answer only from the entries, cite
 * them in brackets, and say it does not know when they do not hold the answer. */
#ifndef HX_KB_ASK_H
#define HX_KB_ASK_H

#include "helix.h"
#include "kb/kb.h"

/* Counts the tokens of text (the model's tokenizer); < 0 on failure. */
typedef int (*kb_count_fn)(const char *text, void *user);

typedef struct kb_ask_ctx {
    char *context;        /* the entries block of the prompt (malloc'ed) */
    int n_used;           /* entries placed, best first (entries[0..n_used) of the input) */
    int n_truncated;      /* 0 or 1: the last placed entry was cut to fit */
    int tokens;           /* tokens of the block */
} kb_ask_ctx;

/* Place entries (best first) into a block of at most budget tokens: whole
 * entries while they fit, then the next one cut at a word boundary when at
 * least 32 tokens remain; the rest are left out. */
hx_status kb_ask_context(const kb_entry *const *entries, int n, int budget, kb_count_fn count, void *user,
                         kb_ask_ctx *out, hx_error *e);
void kb_ask_ctx_free(kb_ask_ctx *c);

/* The user message: instructions, the entries block and the question (malloc'ed). */
char *kb_ask_message(const kb_ask_ctx *c, const char *question);
/* The system message. */
const char *kb_ask_system(void);

/* Numbers cited in text as [n] or [n, m, ...]: cited[k] set for 1 <= n <= n_refs
 * (k = n - 1); *n_bad counts citations of numbers outside 1..n_refs. Returns
 * how many distinct entries are cited. */
int kb_ask_citations(const char *text, int n_refs, bool *cited, int *n_bad);

#endif
