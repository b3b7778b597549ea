/* cmd_tokenize.c — helix-bg tokenize -m FILE.gguf -p TEXT [--ids] [--no-special] [--parse-special]:
 * prints the token ids of TEXT (like llama-tokenize), for tests and prompt debugging.
 * --stdin instead of -p: one text per input line, one "[id, ...]" line out each (for comparing
 * many texts with another tokenizer in one process). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "tok/tok.h"

static int usage(void) {
    fprintf(stderr, "usage: helix-bg tokenize (-m FILE.gguf | --tokenizer tokenizer.json|tokenizer.model|vocab.txt) (-p TEXT | --stdin) [--ids] [--no-special] [--parse-special]\n");
    return 2;
}

static void print_ids(const int32_t *ids, size_t n) {
    printf("[");
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
    printf("]\n");
}

/* --stdin: each line (without its newline) -> one "[ids]" line; frees t. */
static int tokenize_lines(hx_tok *t, bool add_special, bool parse_special) {
    char *line = NULL; size_t cap = 0; ssize_t len; int rc = 0;
    hx_error e = {0};
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        if (len > 0 && line[len - 1] == '\n') len--;
        if (len > 0 && line[len - 1] == '\r') len--;
        int32_t *ids = NULL; size_t n = 0;
        if (hx_tok_encode(t, line, (size_t)len, add_special, parse_special, &ids, &n, &e)) {
            fprintf(stderr, "tokenize: %s\n", e.msg); rc = 1; break;
        }
        print_ids(ids, n);
        free(ids);
    }
    free(line); hx_tok_free(t);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *tokfile = NULL;
    bool ids_only = false, add_special = true, parse_special = false, from_stdin = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) model = argv[++i];
        else if ((!strcmp(a, "-p") || !strcmp(a, "--prompt")) && i + 1 < argc) text = argv[++i];
        else if (!strcmp(a, "--ids")) ids_only = true;
        else if (!strcmp(a, "--stdin")) from_stdin = true;
        else if (!strcmp(a, "--no-special")) add_special = false;
        else if (!strcmp(a, "--parse-special")) parse_special = true;
        else if (!strcmp(a, "--tokenizer") && i + 1 < argc) tokfile = argv[++i];
        else { fprintf(stderr, "tokenize: unknown or incomplete argument '%s'\n", a); return usage(); }
    }
    if ((!model == !tokfile) || !text == !from_stdin) return usage();
    hx_tok *t = NULL; hx_error e = {0};
    hx_status st;
    if (model) st = hx_tok_load_gguf(model, &t, &e);
    else {
        size_t l = strlen(tokfile);
        if (l >= 5 && !strcmp(tokfile + l - 5, ".json")) st = hx_tok_load_hf_json(tokfile, &t, &e);
        else st = (l >= 4 && !strcmp(tokfile + l - 4, ".txt")) ? hx_tok_load_vocab_txt(tokfile, &t, &e)
                                                         : hx_tok_load_spm_model(tokfile, &t, &e);
    }
    if (st) { fprintf(stderr, "tokenize: %s\n", e.msg); return 1; }
    if (from_stdin) return tokenize_lines(t, add_special, parse_special);
    int32_t *ids = NULL; size_t n = 0;
    if (hx_tok_encode(t, text, strlen(text), add_special, parse_special, &ids, &n, &e)) {
        fprintf(stderr, "tokenize: %s\n", e.msg); hx_tok_free(t); return 1;
    }
    if (ids_only) {
        print_ids(ids, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            char buf[512]; size_t l = hx_tok_decode_token(t, ids[i], buf, sizeof buf);
            if (l > sizeof buf) l = sizeof buf;
            if (hx_tok_type(t, ids[i]) == HX_TT_CONTROL) { const char *p = hx_tok_piece(t, ids[i]); l = strlen(p); if (l > sizeof buf) l = sizeof buf; memcpy(buf, p, l); }
            printf("%6d -> '%.*s'\n", ids[i], (int)l, buf);
        }
    }
    free(ids); hx_tok_free(t);
    return 0;
}
