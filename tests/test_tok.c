/* test_tok.c — golden tokenization: llama.cpp's vocab test cases (../shared/tokenizers/vocab-gguf). */
#include "test_util.h"
#include <unistd.h>
#include "tok/tok.h"
#include "core/core.h"
#include <cjson/cJSON.h>

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb"); if (!f) return NULL;
    fseek(f, 0, SEEK_END); long l = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1); if (!b) { fclose(f); return NULL; }
    *n = fread(b, 1, (size_t)l, f); b[*n] = 0; fclose(f); return b;
}

/* Runs one vocab file; returns 1 when every case matches. */
static int run_vocab(const char *sh, const char *name) {
    char p[512], pi[520], po[520];
    snprintf(p, sizeof p, "%s/tokenizers/vocab-gguf/ggml-vocab-%s.gguf", sh, name);
    snprintf(pi, sizeof pi, "%s.inp", p); snprintf(po, sizeof po, "%s.out", p);
    hx_tok *t = NULL; hx_error e = {0};
    if (hx_tok_load_gguf(p, &t, &e)) { fprintf(stderr, "%s: %s\n", name, e.msg); CHECK(0); return 0; }
    size_t ni, no; char *inp = slurp(pi, &ni), *outp = slurp(po, &no);
    CHECK(inp && outp);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *ip = inp, *op = outp; int pass = 0, total = 0;
    while (ip && *ip && op && *op) {
        char *end = strstr(ip, sep); if (!end) break;
        char *oe = strchr(op, '\n'); if (!oe) break;
        *oe = 0;
        int32_t *ids; size_t n;
        CHECK(hx_tok_encode(t, ip, (size_t)(end - ip), false, true, &ids, &n, &e) == HX_OK);
        char got[8192]; size_t gl = 0; got[0] = 0;
        for (size_t k = 0; k < n && gl < sizeof got - 16; k++) gl += (size_t)snprintf(got + gl, sizeof got - gl, " %d", ids[k]);
        const char *exp = op; 
        total++;
        if (!strcmp(got, exp)) pass++;
        else fprintf(stderr, "%s: MISMATCH for '%.*s'\n  want:%s\n  got: %s\n", name, (int)(end - ip), ip, exp, got);
        free(ids);
        ip = end + strlen(sep); op = oe + 1;
    }
    printf("vocab %s: %d/%d pass\n", name, pass, total);
    CHECKF(pass == total && total > 0, "%s", name);
    free(inp); free(outp); hx_tok_free(t);
    return pass == total;
}

/* Prompt ids of the tiny decoder refs (BOS where the model adds one) with the model's own GGUF tokenizer. */
static void run_refs(const char *sh, const char *name) {
    char p[512], r[512];
    snprintf(p, sizeof p, "%s/models/ref-tiny/tiny-%s-shared.gguf", sh, name);
    snprintf(r, sizeof r, "%s/refs/tiny-%s-shared.refs.json", sh, name);
    hx_tok *t = NULL; hx_error e = {0};
    if (hx_tok_load_gguf(p, &t, &e)) { fprintf(stderr, "%s: %s\n", name, e.msg); CHECK(0); return; }
    size_t n; char *js = slurp(r, &n); CHECK(js != NULL);
    cJSON *root = js ? cJSON_Parse(js) : NULL; CHECK(cJSON_IsArray(root));
    int pass = 0, total = 0; cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *prompt = cJSON_GetStringValue(cJSON_GetObjectItem(it, "prompt"));
        cJSON *want = cJSON_GetObjectItem(it, "ids");
        if (!prompt || !cJSON_IsArray(want)) { CHECK(0); continue; }
        int32_t *ids; size_t ni;
        CHECK(hx_tok_encode(t, prompt, strlen(prompt), true, false, &ids, &ni, &e) == HX_OK);
        bool ok = (int)ni == cJSON_GetArraySize(want);
        for (size_t k = 0; ok && k < ni; k++) ok = ids[k] == (int32_t)cJSON_GetArrayItem(want, (int)k)->valuedouble;
        total++; pass += ok;
        if (!ok) fprintf(stderr, "refs %s: MISMATCH for '%s'\n", name, prompt);
        free(ids);
    }
    printf("refs %s: %d/%d pass\n", name, pass, total);
    CHECKF(pass == total && total > 0, "%s", name);
    cJSON_Delete(root); free(js); hx_tok_free(t);
}

/* A JSON-lines or JSON-array file of {text, ids} checked against a GGUF tokenizer. */
static void run_jsonl(const char *sh, const char *gguf, const char *ref, bool add_special, bool parse_special) {
    hx_status (*load)(const char *, hx_tok **, hx_error *) = hx_tok_load_gguf;
    if (strstr(gguf, ".model")) load = hx_tok_load_spm_model;
    if (strstr(gguf, ".txt")) load = hx_tok_load_vocab_txt;
    if (strstr(gguf, ".json")) load = hx_tok_load_hf_json;
    char p[512], r[512];
    snprintf(p, sizeof p, "%s/%s", sh, gguf); snprintf(r, sizeof r, "%s/%s", sh, ref);
    hx_tok *t = NULL; hx_error e = {0};
    if (load(p, &t, &e)) { fprintf(stderr, "%s\n", e.msg); CHECK(0); return; }
    size_t n; char *js = slurp(r, &n); CHECK(js != NULL);
    int pass = 0, total = 0;
    for (char *line = js; line && *line;) {
        char *nl = strchr(line, '\n'); if (nl) *nl = 0;
        cJSON *root = cJSON_Parse(line);
        cJSON *arr = cJSON_IsArray(root) ? root : NULL, *one = arr ? NULL : root, *it;
        for (it = arr ? arr->child : one; it; it = arr ? it->next : NULL) {
            const char *text = cJSON_GetStringValue(cJSON_GetObjectItem(it, "text"));
            cJSON *want = cJSON_GetObjectItem(it, "ids");
            if (!text || !cJSON_IsArray(want)) { CHECK(0); continue; }
            int32_t *ids; size_t ni;
            CHECK(hx_tok_encode(t, text, strlen(text), add_special, parse_special, &ids, &ni, &e) == HX_OK);
            bool ok = (int)ni == cJSON_GetArraySize(want);
            for (size_t k = 0; ok && k < ni; k++) ok = ids[k] == (int32_t)cJSON_GetArrayItem(want, (int)k)->valuedouble;
            total++; pass += ok;
            if (!ok) {
                fprintf(stderr, "%s: MISMATCH for '%s'\n  got:", ref, text);
                for (size_t k = 0; k < ni; k++) fprintf(stderr, " %d", ids[k]);
                fprintf(stderr, "\n");
            }
            free(ids);
        }
        cJSON_Delete(root);
        line = nl ? nl + 1 : NULL;
    }
    printf("%s with %s: %d/%d pass\n", ref, gguf, pass, total);
    CHECKF(pass == total && total > 0, "%s", ref);
    free(js); hx_tok_free(t);
}

/* Hostile input: random bytes (invalid UTF-8 included) never crash, and streaming decode of the
 * ids of valid text reproduces the text's bytes exactly (partial UTF-8 held back between tokens). */
static void run_robust(const char *sh) {
    char p[512]; const char *files[] = {"models/ref-tiny/tiny-llama3-shared.gguf", "models/stories260K.gguf",
                                        "models/ref-tiny/tiny-bert-shared.gguf"};
    const char *txt = "Hé said: \xF0\x9F\x98\x80 ok \xE4\xB8\xAD\xE6\x96\x87!";
    for (int f = 0; f < 3; f++) {
        snprintf(p, sizeof p, "%s/%s", sh, files[f]);
        hx_tok *t = NULL; hx_error e = {0};
        if (hx_tok_load_gguf(p, &t, &e)) { CHECK(0); continue; }
        unsigned s = 12345;
        for (int r = 0; r < 200; r++) {
            char b[64]; size_t n = (size_t)(r % 64);
            for (size_t k = 0; k < n; k++) { s = s * 1103515245u + 12345u; b[k] = (char)(s >> 16); }
            int32_t *ids; size_t ni;
            CHECK(hx_tok_encode(t, b, n, true, r & 1, &ids, &ni, &e) == HX_OK);
            for (size_t k = 0; k < ni; k++) CHECK(ids[k] >= 0 && ids[k] < hx_tok_n_vocab(t));
            free(ids);
        }
        if (f < 2) {
            int32_t *ids; size_t ni;
            CHECK(hx_tok_encode(t, txt, strlen(txt), false, false, &ids, &ni, &e) == HX_OK);
            hx_tok_stream st = {0}; char out[256]; size_t ol = 0;
            for (size_t k = 0; k < ni; k++) {
                size_t w = hx_tok_stream_push(t, &st, ids[k], out + ol, sizeof out - ol);
                for (size_t q = 0; q < w; q++) CHECK(((unsigned char)out[ol + q] & 0xC0) != 0x80 || q > 0 || ol > 0);
                ol += w;
            }
            const char *want = txt; /* SPM adds the dummy-prefix space */
            if (f == 1) { CHECK(ol >= 1 && out[0] == ' '); CHECKF(ol - 1 == strlen(want) && !memcmp(out + 1, want, ol - 1), "stream %s", files[f]); }
            else CHECKF(ol == strlen(want) && !memcmp(out, want, ol), "stream %s", files[f]);
            CHECK(st.n_pend == 0);
            free(ids);
        }
        if (f == 1) { /* byte-fallback tokens: bytes that never form a character stream as U+FFFD */
            int32_t a0 = -1, e4 = -1;
            for (int32_t i = 0; i < hx_tok_n_vocab(t); i++) {
                if (!strcmp(hx_tok_piece(t, i), "<0xA0>")) a0 = i;
                if (!strcmp(hx_tok_piece(t, i), "<0xE4>")) e4 = i;
            }
            hx_tok_stream st = {0}; char out[16];
            CHECK(a0 >= 0 && e4 >= 0);
            CHECK(hx_tok_stream_push(t, &st, a0, out, sizeof out) == 3 && !memcmp(out, "\xEF\xBF\xBD", 3));
            CHECK(hx_tok_stream_push(t, &st, e4, out, sizeof out) == 0 && st.n_pend == 1);
            CHECK(hx_tok_stream_push(t, &st, e4, out, sizeof out) == 3 && st.n_pend == 1); /* E4 E4: the first is lost */
        }
        hx_tok_free(t);
    }
}

int main(void) {
    const char *sh = t_require_shared();
    run_vocab(sh, "llama-spm");
    run_vocab(sh, "phi-3");
    run_vocab(sh, "gpt-2");
    run_vocab(sh, "deepseek-coder");
    run_vocab(sh, "bert-bge");
    run_refs(sh, "qwen3");
    run_refs(sh, "llama3");
    run_jsonl(sh, "models/ref-tiny/tiny-bert-shared.gguf", "refs/tiny-bert-shared.embeddings.json", true, false);
    run_jsonl(sh, "models/ref-tiny/tiny-bert-shared.gguf", "tokenizers/refs/tok_bert-uncased.jsonl", true, false);
    run_jsonl(sh, "models/ref-tiny/tiny-llama3-shared.gguf", "tokenizers/refs/tok_llama3-hf.jsonl", false, true);
    run_jsonl(sh, "models/ref-tiny/tiny-qwen3-shared.gguf", "tokenizers/refs/tok_qwen3-hf.jsonl", false, true);
    run_jsonl(sh, "tokenizers/vocab-gguf/ggml-vocab-llama-spm.gguf", "tokenizers/refs/tok_llama2-spm.jsonl", false, false);
    run_jsonl(sh, "tokenizers/llama3.tokenizer.json", "tokenizers/refs/tok_llama3-hf.jsonl", false, true);
    run_jsonl(sh, "tokenizers/qwen3.tokenizer.json", "tokenizers/refs/tok_qwen3-hf.jsonl", false, true);
    run_jsonl(sh, "tokenizers/gemma3.tokenizer.json", "tokenizers/refs/tok_gemma3-hf.jsonl", false, true);
    run_jsonl(sh, "tokenizers/llama2.tokenizer.model", "tokenizers/refs/tok_llama2-spm.jsonl", false, false);
    run_jsonl(sh, "tokenizers/bert-base-uncased.vocab.txt", "tokenizers/refs/tok_bert-uncased.jsonl", true, false);
    run_robust(sh);
    {   /* truncated / corrupted tokenizer.model: an error or a valid load, never a crash */
        char p[512]; snprintf(p, sizeof p, "%s/tokenizers/llama2.tokenizer.model", sh);
        size_t n; char *b = slurp(p, &n); CHECK(b != NULL);
        char tmp[] = "/tmp/hx_tok_trunc_XXXXXX"; int fd = mkstemp(tmp); CHECK(fd >= 0);
        for (int k = 0; b && fd >= 0 && k < 24; k++) {
            size_t cut = k < 12 ? (size_t)k * 7 : n / (size_t)(k - 10);
            if (k >= 18) { b[(size_t)k * 4099 % n] ^= 0x55; cut = n; }
            FILE *f = fopen(tmp, "wb"); fwrite(b, 1, cut, f); fclose(f);
            hx_tok *t = NULL; hx_error e = {0};
            hx_status st = hx_tok_load_spm_model(tmp, &t, &e);
            CHECK((st == HX_OK) == (t != NULL));
            CHECK(st == HX_OK || e.msg[0]);
            hx_tok_free(t);
        }
        if (fd >= 0) { close(fd); unlink(tmp); }
        free(b);
    }
    {   /* WordPiece: a word over 100 characters is [UNK]; truncation keeps [SEP] */
        char p[512]; snprintf(p, sizeof p, "%s/tokenizers/bert-base-uncased.vocab.txt", sh);
        hx_tok *t = NULL; hx_error e = {0};
        CHECK(hx_tok_load_vocab_txt(p, &t, &e) == HX_OK);
        if (t) {
            char w[160]; memset(w, 'a', 101); w[101] = 0;
            int32_t *ids; size_t n;
            CHECK(hx_tok_encode(t, w, strlen(w), true, false, &ids, &n, &e) == HX_OK);
            CHECK(n == 3 && ids[0] == 101 && ids[1] == 100 && ids[2] == 102);
            free(ids);
            const char *txt = "the quick brown fox jumps over the lazy dog again and again";
            CHECK(hx_tok_encode(t, txt, strlen(txt), true, false, &ids, &n, &e) == HX_OK);
            int32_t first[8]; memcpy(first, ids, sizeof first);
            size_t m = hx_tok_truncate(t, ids, n, 8);
            CHECK(n > 8 && m == 8 && ids[7] == 102 && !memcmp(ids, first, 7 * sizeof *ids));
            free(ids);
            hx_tok_free(t);
        }
    }
    return t_done("test_tok");
}
