/* test_ask.c — grounded prompts (src/kb/ask.c): the context budget (whole
 * entries best first, then one cut at a word boundary, never over budget),
 * the message, and citation extraction (lists, numbers outside the retrieved
 * set, text that only looks like a citation). Tokens are counted as words. */
#include "kb/ask.h"
#include "test_util.h"

#include <ctype.h>

static int words(const char *t, void *user) {
    (void)user;
    int n = 0;
    bool in = false;
    for (; *t; t++) {
        bool w = !isspace((unsigned char)*t);
        if (w && !in) n++;
        in = w;
    }
    return n;
}

int main(void) {
    char t1[] = "one two three four five six seven eight nine ten";
    char long_text[4000];
    size_t p = 0;
    for (int i = 0; i < 300; i++) p += (size_t)snprintf(long_text + p, sizeof long_text - p, "w%d ", i);
    kb_entry a = {.offset = 10, .topic = "ops", .title = "Alpha", .text = t1};
    kb_entry b = {.offset = 20, .topic = "db", .title = "Beta", .text = long_text};
    kb_entry c = {.offset = 30, .topic = "db", .title = "Gamma", .text = t1};
    const kb_entry *es[] = {&a, &b, &c};
    hx_error e;
    kb_ask_ctx k;
    /* everything fits */
    CHECK(kb_ask_context(es, 3, 10000, words, NULL, &k, &e) == HX_OK);
    CHECK(k.n_used == 3 && k.n_truncated == 0 && k.tokens <= 10000);
    CHECK(strstr(k.context, "[1] Alpha (topic: ops)") && strstr(k.context, "[3] Gamma"));
    CHECK(k.tokens == words(k.context, NULL));
    kb_ask_ctx_free(&k);
    /* the long entry is cut to the budget; the one after it is left out */
    CHECK(kb_ask_context(es, 3, 120, words, NULL, &k, &e) == HX_OK);
    CHECK(k.n_used == 2 && k.n_truncated == 1 && k.tokens <= 120 && k.tokens > 60);
    CHECK(words(k.context, NULL) == k.tokens && !strstr(k.context, "Gamma") && strstr(k.context, " ..."));
    CHECK(strstr(k.context, "w0 w1") && !strstr(k.context, "w299"));
    char *m = kb_ask_message(&k, "What is beta?");
    CHECK(m && strstr(m, "Question: What is beta?") && strstr(m, "[2] Beta"));
    free(m);
    kb_ask_ctx_free(&k);
    /* under 32 tokens left: the entry is not cut, just left out */
    CHECK(kb_ask_context(es, 3, 30, words, NULL, &k, &e) == HX_OK);
    CHECK(k.n_used == 1 && k.n_truncated == 0);
    kb_ask_ctx_free(&k);

    bool cited[5];
    int bad;
    CHECK(kb_ask_citations("Use the fake clock [2]. See also [1, 3] and [3].", 5, cited, &bad) == 3 && bad == 0);
    CHECK(cited[0] && cited[1] && cited[2] && !cited[3]);
    CHECK(kb_ask_citations("Not in the notes [7] nor [0]; [2,9].", 5, cited, &bad) == 1 && bad == 3 && cited[1]);
    CHECK(kb_ask_citations("arrays a[i] and [x] and [12 and [ 4 ]", 5, cited, &bad) == 1 && bad == 0 && cited[3]);
    CHECK(kb_ask_citations("I do not know.", 5, cited, &bad) == 0 && bad == 0);
    printf("ask: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
