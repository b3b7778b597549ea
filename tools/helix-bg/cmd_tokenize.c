/* cmd_tokenize.c — helix-bg tokenize: the token ids of a text (like
 * llama-tokenize), for tests and prompt debugging; a client of helix.h.
 * --stdin instead of -p: one text per input line, one "[id, ...]" line out
 * each (to compare many texts with another tokenizer in one process). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "helix_dev.h"

#define CMD "tokenize"

static void print_ids(const int32_t *ids, int n) {
    printf("[");
    for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
    printf("]\n");
}

/* text[0..len) -> ids, grown as needed (*ids malloc'ed, *cap its size). */
static hx_status encode(const hx_model *m, const char *text, size_t len, bool add_special, bool parse_special,
                        int32_t **ids, int *cap, int *n, hx_error *e) {
    hx_status s = hx_tokenize(m, text, (ptrdiff_t)len, add_special, parse_special, *ids, *cap, n, e);
    if (s != HX_ERR_RANGE || *n <= *cap) return s;
    int32_t *ni = realloc(*ids, sizeof(int32_t) * (size_t)*n);
    if (!ni) return snprintf(e->msg, sizeof e->msg, "out of memory"), e->status = HX_ERR_NOMEM;
    *ids = ni;
    *cap = *n;
    return hx_tokenize(m, text, (ptrdiff_t)len, add_special, parse_special, *ids, *cap, n, e);
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *tokfile = NULL;
    bool ids_only = false, no_special = false, parse_special = false, from_stdin = false;
    const cli_opt opts[] = {
        {CLI_STR, "-m|--model", &model, "FILE", "model: a .gguf file or a Hugging Face folder", 0, 0, NULL},
        {CLI_STR, "--tokenizer", &tokfile, "FILE", "a tokenizer alone instead: tokenizer.json, tokenizer.model or "
         "vocab.txt", 0, 0, NULL},
        {CLI_STR, "-p|--prompt", &text, "TEXT", "the text", 0, 0, NULL},
        {CLI_BOOL, "--stdin", &from_stdin, NULL, "one text per stdin line instead, one [ids] line out each", 0, 0, NULL},
        {CLI_BOOL, "--ids", &ids_only, NULL, "print only the ids, as [1, 2, 3]", 0, 0, NULL},
        {CLI_BOOL, "--no-special", &no_special, NULL, "no BOS/EOS even where the model adds them", 0, 0, NULL},
        {CLI_BOOL, "--parse-special", &parse_special, NULL, "special-token text (<|im_start|>) becomes its id", 0, 0,
         NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int pr = cli_parse(CMD, CMD " (-m FILE | --tokenizer FILE) (-p TEXT | --stdin) [options]", NULL, opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model == !tokfile) return cli_usage_error(CMD, "give exactly one of -m FILE and --tokenizer FILE");
    if (!text == !from_stdin) return cli_usage_error(CMD, "give exactly one of -p TEXT and --stdin");
    hx_error e = {0};
    hx_model *m = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU; /* only the vocabulary is used */
    hx_status st = model ? hx_model_open(model, &mp, &m, &e) : hx_dev_tokenizer_open(tokfile, &m, &e);
    if (st) {
        fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
        return 1;
    }
    int rc = 0, cap = 256, n = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids) { fprintf(stderr, "helix-bg " CMD ": out of memory\n"); hx_model_free(m); return 1; }
    if (from_stdin) {
        char *line = NULL;
        size_t lcap = 0;
        ssize_t len;
        while ((len = getline(&line, &lcap, stdin)) >= 0) {
            if (len > 0 && line[len - 1] == '\n') len--;
            if (len > 0 && line[len - 1] == '\r') len--;
            if (encode(m, line, (size_t)len, !no_special, parse_special, &ids, &cap, &n, &e)) {
                fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
                rc = 1;
                break;
            }
            print_ids(ids, n);
        }
        free(line);
    } else if (encode(m, text, strlen(text), !no_special, parse_special, &ids, &cap, &n, &e)) {
        fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
        rc = 1;
    } else if (ids_only) {
        print_ids(ids, n);
    } else {
        for (int i = 0; i < n; i++) {
            char buf[512];
            int l = hx_token_to_piece(m, ids[i], buf, sizeof buf, true);
            if (l < 0) l = 0;
            if (l > (int)sizeof buf) l = sizeof buf;
            printf("%6d -> '%.*s'\n", ids[i], l, buf);
        }
    }
    free(ids);
    hx_model_free(m);
    return rc;
}
