/* test_tok_chat.c — chat template detection on the real tokenizer configs, and formatted prompts
 * that tokenize to the models' own special tokens. */
#include "test_util.h"
#include "tok/chat.h"
#include "tok/tok.h"
#include <cjson/cJSON.h>

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb"); if (!f) return NULL;
    fseek(f, 0, SEEK_END); long l = ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)l + 1); if (!b) { fclose(f); return NULL; }
    size_t n = fread(b, 1, (size_t)l, f); b[n] = 0; fclose(f); return b;
}

int main(void) {
    const char *sh = t_require_shared();
    const char *names[] = {"qwen3", "llama3", "gemma3"};
    hx_chat_kind want[] = {HX_CHAT_CHATML, HX_CHAT_LLAMA3, HX_CHAT_GEMMA};
    const char *turn_start[] = {"<|im_start|>", "<|start_header_id|>", "<start_of_turn>"};
    for (int i = 0; i < 3; i++) {
        char p[512]; snprintf(p, sizeof p, "%s/tokenizers/%s.tokenizer_config.json", sh, names[i]);
        char *js = slurp(p); CHECK(js != NULL);
        cJSON *root = js ? cJSON_Parse(js) : NULL;
        const char *tmpl = cJSON_GetStringValue(cJSON_GetObjectItem(root, "chat_template"));
        hx_chat_kind k = hx_chat_detect(tmpl);
        CHECKF(k == want[i], "%s detected as %s", names[i], hx_chat_name(k));
        hx_chat_msg m[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "2+2?"}};
        char *out = NULL; hx_error e = {0};
        CHECK(hx_chat_format(k, m, 4, true, &out, &e) == HX_OK);
        /* the rendered prompt, tokenized with parse_special, contains the turn-start special token as one id */
        snprintf(p, sizeof p, "%s/tokenizers/%s.tokenizer.json", sh, names[i]);
        hx_tok *t = NULL;
        CHECK(hx_tok_load_hf_json(p, &t, &e) == HX_OK);
        if (t && out) {
            int32_t *ids, *ts; size_t n, nts;
            CHECK(hx_tok_encode(t, out, strlen(out), false, true, &ids, &n, &e) == HX_OK);
            CHECK(hx_tok_encode(t, turn_start[i], strlen(turn_start[i]), false, true, &ts, &nts, &e) == HX_OK);
            CHECK(nts == 1);
            int cnt = 0; for (size_t k2 = 0; k2 < n; k2++) cnt += ids[k2] == ts[0];
            CHECKF(cnt >= 4, "%s: %d turn starts", names[i], cnt);  /* 3 (gemma folds system) or 4 turns + assistant header */
            free(ids); free(ts);
        }
        printf("%s: %s\n---\n%s\n---\n", names[i], hx_chat_name(k), out ? out : "(null)");
        hx_tok_free(t); free(out); cJSON_Delete(root); free(js);
    }
    hx_chat_msg bad[] = {{"user", NULL}};
    char *o = NULL; hx_error e = {0};
    CHECK(hx_chat_format(HX_CHAT_CHATML, bad, 1, true, &o, &e) == HX_ERR_ARG && o == NULL);
    CHECK(hx_chat_format(HX_CHAT_UNKNOWN, NULL, 0, true, &o, &e) == HX_ERR_UNSUPPORTED);
    CHECK(hx_chat_detect("{{ messages }}") == HX_CHAT_UNKNOWN);
    return t_done("test_tok_chat");
}
