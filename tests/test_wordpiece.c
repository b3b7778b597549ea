/* test_wordpiece.c — WordPiece against the references in ../shared: the HF
 * tokenizers library's ids for 30 hard strings (bert-base-uncased vocab.txt),
 * llama.cpp's own test cases for its bert vocabulary GGUF, and the ids of the
 * tiny BERT reference embeddings (tokenizer from that model's GGUF). */
#include "tok/wordpiece.h"
#include "core/core.h"
#include "test_util.h"

#include <cjson/cJSON.h>

static int32_t ids[4096];

static int check_jsonl(const hx_wordpiece *w, const char *path, const char *ids_key, bool specials) {
    char *txt;
    size_t n;
    hx_error e;
    if (hx_read_file(path, &txt, &n, &e)) { CHECKF(0, "%s", e.msg); return 0; }
    int cases = 0, pass = 0;
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        if (!j) continue;
        const cJSON *t = cJSON_GetObjectItem(j, "text"), *r = cJSON_GetObjectItem(j, ids_key);
        if (cJSON_IsString(t) && cJSON_IsArray(r)) {
            int k = hx_wordpiece_encode(w, t->valuestring, strlen(t->valuestring), specials, ids, 4096);
            bool ok = k == cJSON_GetArraySize(r);
            for (int i = 0; ok && i < k; i++) ok = ids[i] == cJSON_GetArrayItem(r, i)->valueint;
            cases++;
            pass += ok;
            CHECKF(ok, "%s: '%s': got %d ids", path, t->valuestring, k);
        }
        cJSON_Delete(j);
    }
    free(txt);
    printf("%s: %d/%d match\n", path, pass, cases);
    return cases;
}

/* llama.cpp's .inp/.out pairs: inputs separated by __ggml_vocab_test__ lines,
 * one line of expected ids (no [CLS]/[SEP]) per input. */
static void check_inp_out(const hx_wordpiece *w, const char *inp, const char *out) {
    char *a, *b;
    size_t na, nb;
    hx_error e;
    if (hx_read_file(inp, &a, &na, &e) || hx_read_file(out, &b, &nb, &e)) { CHECKF(0, "%s", e.msg); return; }
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = a, *q = b;
    int cases = 0, pass = 0;
    while (p && *p) {
        char *end = strstr(p, sep);
        if (!end) break;
        *end = 0;
        char *ql = q;
        char *qn = strchr(q, '\n');
        if (!qn) break;
        *qn = 0;
        int k = hx_wordpiece_encode(w, p, strlen(p), false, ids, 4096);
        int want[4096], nw = 0;
        for (char *tok = strtok(ql, " "); tok && nw < 4096; tok = strtok(NULL, " ")) want[nw++] = atoi(tok);
        bool ok = k == nw;
        for (int i = 0; ok && i < k; i++) ok = ids[i] == want[i];
        cases++;
        pass += ok;
        CHECKF(ok, "%s case %d ('%.40s'): got %d ids, want %d", inp, cases, p, k, nw);
        p = end + strlen(sep);
        q = qn + 1;
    }
    printf("%s: %d/%d match\n", inp, pass, cases);
    CHECK(cases > 10);
    free(a); free(b);
}

int main(void) {
    const char *sh = t_require_shared();
    char p[512], p2[512];
    hx_error e = {0};
    hx_wordpiece *w = NULL;
    snprintf(p, sizeof p, "%s/tokenizers/bert-base-uncased.vocab.txt", sh);
    CHECKF(hx_wordpiece_load(p, &w, &e) == HX_OK, "%s", e.msg);
    if (w) {
        CHECK(hx_wordpiece_n_vocab(w) == 30522);
        snprintf(p, sizeof p, "%s/tokenizers/refs/tok_bert-uncased.jsonl", sh);
        CHECK(check_jsonl(w, p, "ids", true) == 30);
        /* truncation keeps [CLS] ... [SEP] */
        int k = hx_wordpiece_encode(w, "one two three four five", 23, true, ids, 4);
        CHECK(k == 4 && ids[0] == 101 && ids[3] == 102);
        hx_wordpiece_free(w);
    }
    snprintf(p, sizeof p, "%s/tokenizers/vocab-gguf/ggml-vocab-bert-bge.gguf", sh);
    CHECKF(hx_wordpiece_load(p, &w, &e) == HX_OK, "%s", e.msg);
    if (w) {
        snprintf(p, sizeof p, "%s/tokenizers/vocab-gguf/ggml-vocab-bert-bge.gguf.inp", sh);
        snprintf(p2, sizeof p2, "%s/tokenizers/vocab-gguf/ggml-vocab-bert-bge.gguf.out", sh);
        check_inp_out(w, p, p2);
        hx_wordpiece_free(w);
    }
    snprintf(p, sizeof p, "%s/models/ref-tiny/tiny-bert-shared.gguf", sh);
    CHECKF(hx_wordpiece_load(p, &w, &e) == HX_OK, "%s", e.msg);
    if (w) {
        snprintf(p, sizeof p, "%s/refs/tiny-bert-shared.embeddings.json", sh);
        char *txt;
        size_t n;
        if (hx_read_file(p, &txt, &n, &e) == HX_OK) {
            cJSON *root = cJSON_Parse(txt);
            int cases = 0, pass = 0;
            const cJSON *it;
            cJSON_ArrayForEach(it, root) {
                const char *t = cJSON_GetObjectItem(it, "text")->valuestring;
                const cJSON *r = cJSON_GetObjectItem(it, "ids");
                int k = hx_wordpiece_encode(w, t, strlen(t), true, ids, 256);
                bool ok = k == cJSON_GetArraySize(r);
                for (int i = 0; ok && i < k; i++) ok = ids[i] == cJSON_GetArrayItem(r, i)->valueint;
                cases++; pass += ok;
                CHECKF(ok, "tiny-bert '%.40s': got %d ids", t, k);
            }
            printf("tiny-bert reference ids: %d/%d match\n", pass, cases);
            cJSON_Delete(root);
            free(txt);
        }
        hx_wordpiece_free(w);
    }
    CHECK(hx_wordpiece_load("/nonexistent/vocab.txt", &w, &e) != HX_OK && strstr(e.msg, "/nonexistent/vocab.txt"));
    return t_done("test_wordpiece");
}
