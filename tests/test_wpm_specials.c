/* test_wpm_specials.c — WordPiece on text holding BERT's special-token strings
 * ([CLS], [SEP], [MASK], [PAD], [UNK]) gives the ids transformers'
 * BertTokenizerFast gives (it matches its special tokens in the text first,
 * case-sensitively, even inside a word; [unused0] is no special). Expected ids
 * are recorded in tests/data/wpm_specials/golden.jsonl by make_golden.py beside
 * it: with the small vocab.txt there (always checked) and with
 * bert-base-uncased from ../shared (checked when present). */
#include "tok/tok.h"
#include "core/core.h"
#include "test_util.h"

#include <cjson/cJSON.h>

static void check_vocab(const char *vocab, const char *field, cJSON *rows) {
    hx_tok *t = NULL;
    hx_error e = {0};
    CHECKF(hx_tok_load_vocab_txt(vocab, &t, &e) == HX_OK, "%s: %s", vocab, e.msg);
    if (!t) return;
    cJSON *r;
    cJSON_ArrayForEach(r, rows) {
        const char *text = cJSON_GetObjectItem(r, "text")->valuestring;
        cJSON *want = cJSON_GetObjectItem(r, field);
        int32_t *ids = NULL;
        size_t n = 0;
        /* the embedder's call: add [CLS]/[SEP], parse_special off (BERT parses them anyway) */
        CHECK(hx_tok_encode(t, text, strlen(text), true, false, &ids, &n, &e) == HX_OK);
        bool same = (int)n == cJSON_GetArraySize(want);
        for (size_t i = 0; same && i < n; i++) same = ids[i] == cJSON_GetArrayItem(want, (int)i)->valueint;
        char got[512] = "";
        for (size_t i = 0; i < n && strlen(got) < 480; i++) snprintf(got + strlen(got), 32, " %d", ids[i]);
        char *w = cJSON_PrintUnformatted(want);
        CHECKF(same, "%s: '%s': got [%s ], transformers %s", field, text, got, w);
        free(w);
        /* parse_special on: the same ids */
        int32_t *ids2 = NULL;
        size_t n2 = 0;
        CHECK(hx_tok_encode(t, text, strlen(text), true, true, &ids2, &n2, &e) == HX_OK);
        CHECK(n2 == n && (n == 0 || !memcmp(ids, ids2, n * sizeof *ids)));
        free(ids);
        free(ids2);
    }
    hx_tok_free(t);
}

int main(void) {
    char *js = NULL;
    size_t jn = 0;
    hx_error e = {0};
    if (hx_read_file("tests/data/wpm_specials/golden.jsonl", &js, &jn, &e) != HX_OK) {
        printf("FAIL: %s\n", e.msg);
        return 1;
    }
    cJSON *rows = cJSON_CreateArray();
    for (char *line = js; line < js + jn;) {
        char *nl = memchr(line, '\n', (size_t)(js + jn - line));
        size_t l = nl ? (size_t)(nl - line) : (size_t)(js + jn - line);
        if (l) {
            cJSON *o = cJSON_ParseWithLength(line, l);
            CHECKF(o != NULL, "golden.jsonl: bad line");
            if (o) cJSON_AddItemToArray(rows, o);
        }
        line += l + 1;
    }
    CHECK(cJSON_GetArraySize(rows) >= 10);
    check_vocab("tests/data/wpm_specials/vocab.txt", "ids_small", rows);
    const char *bert = "../shared/tokenizers/bert-base-uncased.vocab.txt";
    FILE *f = fopen(bert, "rb");
    if (f) { fclose(f); check_vocab(bert, "ids_bert", rows); }
    else printf("skip the bert-base-uncased half: %s absent\n", bert);
    cJSON_Delete(rows);
    free(js);
    printf("wpm_specials: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
