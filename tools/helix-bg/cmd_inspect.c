/* cmd_inspect.c — helix-bg inspect: where each attention head looks. Runs the
 * prompt once through hx_inspect_attention (exact f32, CPU) and prints, per
 * head, the most-attended tokens of the last token (or of every token), as
 * text or JSON; writes a heatmap PNG and/or the raw probabilities. A client of
 * helix.h only.
 *
 * Heatmap: one tile per (layer, head) shown, layers down and heads across;
 * tile row i = query position i, column j = key position j. Colour: a
 * viridis-like ramp of sqrt(p) (dark purple 0 .. yellow 1; the square root
 * keeps weak attention visible); cells the mask hides (future tokens, outside
 * a sliding window) are grey; tiles are separated by white lines.
 *
 * The PNG encoder is png.c's (shared with finetune's loss curve). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_lora.h"
#include "helix_kb.h"   /* hx_write_file_atomic */
#include "png.h"

#define CMD "inspect"

/* ---- output files ---- */

/* Writes buf[0..n) to path atomically (hx_write_file_atomic); prints the error
 * and returns false on failure. */
static bool write_atomic(const char *path, const void *buf, size_t n) {
    hx_error e = {0};
    if (hx_write_file_atomic(path, buf, n, &e) == HX_OK) return true;
    fprintf(stderr, "helix-bg " CMD ": cannot write %s\n", e.msg);
    return false;
}

/* viridis-like ramp, t in [0, 1] */
static void ramp(float t, unsigned char *px) {
    static const unsigned char k[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    if (!(t > 0)) t = 0;
    if (t > 1) t = 1;
    float f = t * 4;
    int i = (int)f;
    if (i > 3) i = 3;
    f -= (float)i;
    for (int c = 0; c < 3; c++) px[c] = (unsigned char)lrintf(k[i][c] + f * (k[i + 1][c] - k[i][c]));
}

/* The heatmap of layers [l0, l1) x heads [h0, h1) (indexes into a's held layers). */
static bool write_png(const char *path, const hx_attention *a, int l0, int l1, int h0, int h1) {
    enum { GAP = 2, MAX_SIDE = 16384 };
    int rows = l1 - l0, cols = h1 - h0, T = a->n_tok;
    /* about 1024 pixels across and at most 2048 down, each cell 1..16 pixels */
    int cw = 1024 / (T * cols), ch = 2048 / (T * rows), cell = cw < ch ? cw : ch;
    if (cell < 1) cell = 1;
    if (cell > 16) cell = 16;
    int64_t W = (int64_t)cols * T * cell + (int64_t)(cols - 1) * GAP, H = (int64_t)rows * T * cell + (int64_t)(rows - 1) * GAP;
    if (W > MAX_SIDE || H > MAX_SIDE) {
        fprintf(stderr, "helix-bg " CMD ": --png: a %lld x %lld image is too large (at most %d a side): choose a layer "
                "with --layer or a head with --head, or a shorter prompt\n", (long long)W, (long long)H, MAX_SIDE);
        return false;
    }
    unsigned char *rgb = malloc((size_t)W * H * 3);
    if (!rgb) { fprintf(stderr, "helix-bg " CMD ": out of memory for the heatmap\n"); return false; }
    memset(rgb, 255, (size_t)W * H * 3);
    for (int l = l0; l < l1; l++)
        for (int h = h0; h < h1; h++) {
            const float *P = a->probs + ((size_t)l * a->n_head + h) * T * T;
            int win = a->window[l];
            int64_t x0 = (int64_t)(h - h0) * (T * cell + GAP), y0 = (int64_t)(l - l0) * (T * cell + GAP);
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    unsigned char px[3] = {128, 128, 128};
                    if (j <= i && (win == 0 || j > i - win)) ramp(sqrtf(P[(size_t)i * T + j]), px);
                    for (int dy = 0; dy < cell; dy++)
                        for (int dx = 0; dx < cell; dx++)
                            memcpy(rgb + ((size_t)(y0 + (int64_t)i * cell + dy) * W + (size_t)(x0 + (int64_t)j * cell + dx)) * 3,
                                   px, 3);
                }
        }
    hx_error e = {0};
    bool ok = png_write(path, rgb, (uint32_t)W, (uint32_t)H, &e) == HX_OK;
    free(rgb);
    if (!ok) fprintf(stderr, "helix-bg " CMD ": cannot write %s\n", e.msg);
    if (ok) fprintf(stderr, "helix-bg " CMD ": wrote %s (%lld x %lld, %d px per cell)\n", path, (long long)W,
                    (long long)H, cell);
    return ok;
}

/* ---- text ---- */

/* Whether p[0..n) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool utf8_valid(const unsigned char *p, int n) {
    for (int i = 0; i < n;) {
        unsigned c = p[i];
        int len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!len || i + len > n) return false;
        uint32_t cp = len == 1 ? c : c & (0x7fu >> len);
        for (int k = 1; k < len; k++) {
            if ((p[i + k] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (p[i + k] & 0x3fu);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += len;
    }
    return true;
}

/* The token's text for a quoted string (text and JSON alike): quotes,
 * backslashes and control bytes escaped; bytes of a piece that is not valid
 * UTF-8 alone (byte tokens, pieces of a character) as \u00XX. */
static void token_text(const hx_model *m, int32_t id, char *out, size_t cap) {
    char buf[256];
    int n = hx_token_to_piece(m, id, buf, sizeof buf, true);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = sizeof buf;
    bool valid = utf8_valid((const unsigned char *)buf, n);
    size_t o = 0;
    for (int i = 0; i < n && o + 7 < cap; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c == '"' || c == '\\') { out[o++] = '\\'; out[o++] = (char)c; }
        else if (c == '\n') { out[o++] = '\\'; out[o++] = 'n'; }
        else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !valid)) o += (size_t)snprintf(out + o, cap - o, "\\u%04x", c);
        else out[o++] = (char)c;
    }
    out[o] = 0;
}

/* Indexes of the k largest of p[0..n) into top (k <= n), largest first, lowest index on ties. */
static int top_k(const float *p, int n, int k, int *top) {
    if (k > n) k = n;
    for (int r = 0; r < k; r++) {
        int best = -1;
        for (int j = 0; j < n; j++) {
            bool used = false;
            for (int q = 0; q < r; q++) used |= top[q] == j;
            if (!used && (best < 0 || p[j] > p[best])) best = j;
        }
        top[r] = best;
    }
    return k;
}

int cmd_inspect(int argc, char **argv) {
    const char *model = NULL, *text = NULL, *ids_arg = NULL, *png = NULL, *probs_out = NULL;
    int layer = -1, head = -1, k = 5, threads = 0;
    bool json = false, every = false, no_special = false;
    const cli_opt opts[] = {
        {CLI_STR, "-m|--model", &model, "FILE", "model: a .gguf file or a Hugging Face folder (a decoder)", 0, 0, NULL},
        {CLI_STR, "-p|--prompt", &text, "TEXT", "the prompt (tokenized with BOS as the model asks, specials parsed)",
         0, 0, NULL},
        {CLI_STR, "--prompt-ids", &ids_arg, "LIST", "the prompt as token ids instead, e.g. 1,2,3 (used as given)", 0, 0,
         NULL},
        {CLI_BOOL, "--no-special", &no_special, NULL, "no BOS even where the model adds one", 0, 0, NULL},
        {CLI_INT, "--layer", &layer, "L", "only this layer (-1: all)", -1, 1 << 20, NULL},
        {CLI_INT, "--head", &head, "H", "only this head (-1: all)", -1, 1 << 20, NULL},
        {CLI_INT, "--top", &k, "K", "most-attended tokens listed per head", 1, 1 << 20, NULL},
        {CLI_BOOL, "--all-tokens", &every, NULL, "list them for every query token, not only the last", 0, 0, NULL},
        {CLI_STR, "--png", &png, "FILE", "write a heatmap: a tile per layer (down) and head (across)", 0, 0, NULL},
        {CLI_STR, "--probs", &probs_out, "FILE", "write the probabilities as raw little-endian f32, shape (layers, "
         "heads, tokens, tokens) of the layers shown", 0, 0, NULL},
        {CLI_BOOL, "--json", &json, NULL, "print JSON instead of text", 0, 0, NULL},
        {CLI_INT, "-t|--threads", &threads, "N", "CPU threads (0: all)", 0, 4096, NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    const char *about =
        "Runs the prompt once on the CPU in exact f32 and reports each layer's attention per head:\n"
        "the softmax weights the forward multiplies V by, after the causal and sliding-window masks.\n"
        "Heatmap colours: sqrt(probability) from dark purple (0) to yellow (1); grey = masked.\n"
        "LoRA: --lora FILE, --lora-scaled FILE SCALE (repeatable; GGUF adapter or PEFT folder): the\n"
        "attention of the adapted model.";
    cli_lora_list lora = {0};
    if (cli_lora_strip(&argc, argv, &lora)) return 2;
    int pr = cli_parse(CMD, CMD " -m FILE (-p TEXT | --prompt-ids LIST) [--layer L] [--head H] [--png FILE] [--json]",
                       about, opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model) return cli_usage_error(CMD, "-m FILE is required");
    if (!text == !ids_arg) return cli_usage_error(CMD, "give exactly one of -p TEXT and --prompt-ids LIST");

    hx_error e = {0};
    cli_device dev = {.device = 1, .ngl = -2}; /* inspection runs on the CPU */
    hx_model *m = cli_model_open(CMD, model, &dev, NULL);
    if (!m) return 1;
    int rc = 1;
    int32_t *ids = NULL;
    int n = 0;
    int *top = NULL;
    hx_attention a = {0};
    hx_adapter *adapters[CLI_MAX_LORA] = {0};
    if (hx_model_is_encoder(m)) {
        fprintf(stderr, "helix-bg " CMD ": %s is an encoder (%s); inspect runs decoders\n", model, hx_model_arch(m));
        goto done;
    }
    if (layer >= hx_model_n_layer(m)) {
        fprintf(stderr, "helix-bg " CMD ": --layer %d: the model has %d layers (0..%d)\n", layer, hx_model_n_layer(m),
                hx_model_n_layer(m) - 1);
        goto done;
    }
    if (head >= hx_model_n_head(m)) {
        fprintf(stderr, "helix-bg " CMD ": --head %d: the model has %d heads (0..%d)\n", head, hx_model_n_head(m),
                hx_model_n_head(m) - 1);
        goto done;
    }
    if (ids_arg) {
        if (!cli_parse_int_list(CMD, "--prompt-ids", ids_arg, 0, hx_model_n_vocab(m) - 1, &ids, &n)) { rc = 2; goto done; }
    } else {
        int cap = 0;
        hx_status st = hx_tokenize(m, text, -1, !no_special, true, NULL, 0, &cap, &e);
        if (st != HX_OK && st != HX_ERR_RANGE) { fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg); goto done; }
        ids = malloc(sizeof(int32_t) * (size_t)(cap > 0 ? cap : 1));
        if (!ids) { fprintf(stderr, "helix-bg " CMD ": out of memory\n"); goto done; }
        if (hx_tokenize(m, text, -1, !no_special, true, ids, cap, &n, &e)) {
            fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
            goto done;
        }
        if (n == 0) { fprintf(stderr, "helix-bg " CMD ": -p: the prompt has no tokens\n"); goto done; }
    }
    for (int i = 0; i < lora.n; i++)
        if (hx_adapter_open(m, lora.path[i], &adapters[i], &e)) {
            fprintf(stderr, "helix-bg " CMD ": --lora %s: %s\n", lora.path[i], e.msg);
            goto done;
        }
    hx_inspect_params ip = hx_inspect_default_params();
    ip.layer = layer;
    ip.n_threads = threads;
    ip.adapters = adapters;
    ip.adapter_scales = lora.scale;
    ip.n_adapters = lora.n;
    if (hx_inspect_attention(m, ids, n, &ip, &a, &e)) { fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg); goto done; }

    int h0 = head < 0 ? 0 : head, h1 = head < 0 ? a.n_head : head + 1;
    int q0 = every ? 0 : n - 1;
    if (k > n) k = n;
    top = malloc(sizeof(int) * (size_t)k);
    if (!top) { fprintf(stderr, "helix-bg " CMD ": out of memory\n"); goto done; }
    char tt[1024];
    if (json) {
        printf("{\"model\": \"");
        for (const char *s = model; *s; s++) printf(*s == '"' || *s == '\\' ? "\\%c" : "%c", *s);
        printf("\", \"arch\": \"%s\", \"n_tok\": %d, \"n_layer\": %d, \"layer0\": %d, \"n_head\": %d, \"n_head_kv\": %d, "
               "\"head_dim\": %d, \"scale\": %.9g, \"window\": [", hx_model_arch(m), n, a.n_layer, a.layer0, a.n_head,
               a.n_head_kv, a.head_dim, a.scale);
        for (int l = 0; l < a.n_layer; l++) printf("%s%d", l ? ", " : "", a.window[l]);
        printf("], \"ids\": [");
        for (int i = 0; i < n; i++) printf("%s%d", i ? ", " : "", ids[i]);
        printf("], \"tokens\": [");
        for (int i = 0; i < n; i++) { token_text(m, ids[i], tt, sizeof tt); printf("%s\"%s\"", i ? ", " : "", tt); }
        printf("], \"heads\": [");
    } else {
        printf("%s (%s): %d tokens, %d layers x %d heads (%d KV heads, head dim %d)\n", model, hx_model_arch(m), n,
               hx_model_n_layer(m), a.n_head, a.n_head_kv, a.head_dim);
        printf("tokens:");
        for (int i = 0; i < n; i++) { token_text(m, ids[i], tt, sizeof tt); printf(" %d:'%s'", i, tt); }
        printf("\n");
    }
    bool first_head = true;
    for (int l = 0; l < a.n_layer; l++)
        for (int h = h0; h < h1; h++) {
            if (json) printf("%s{\"layer\": %d, \"head\": %d, \"queries\": [", first_head ? "" : ", ", a.layer0 + l, h);
            else printf("layer %d head %d%s:\n", a.layer0 + l, h, a.window[l] ? " (sliding window)" : "");
            first_head = false;
            for (int i = q0; i < n; i++) {
                const float *row = a.probs + (((size_t)l * a.n_head + h) * n + i) * n;
                int kk = top_k(row, i + 1, k, top);
                token_text(m, ids[i], tt, sizeof tt);
                if (json) printf("%s{\"pos\": %d, \"top\": [", i > q0 ? ", " : "", i);
                else printf("  %3d '%s' ->", i, tt);
                for (int r = 0; r < kk; r++) {
                    int j = top[r];
                    token_text(m, ids[j], tt, sizeof tt);
                    if (json) printf("%s{\"pos\": %d, \"id\": %d, \"token\": \"%s\", \"p\": %.6g}", r ? ", " : "", j, ids[j],
                                     tt, row[j]);
                    else printf("  %d:'%s' %.3f", j, tt, row[j]);
                }
                printf(json ? "]}" : "\n");
            }
            if (json) printf("]}");
        }
    if (json) printf("]}\n");
    if (fflush(stdout) != 0) { fprintf(stderr, "helix-bg " CMD ": cannot write stdout\n"); goto done; }
    if (png && !write_png(png, &a, 0, a.n_layer, h0, h1)) goto done;
    if (probs_out) {
        size_t cnt = (size_t)a.n_layer * a.n_head * n * n;
        if (!write_atomic(probs_out, a.probs, cnt * sizeof(float))) goto done;
    }
    rc = 0;
done:
    free(top);
    free(ids);
    hx_attention_free(&a);
    for (int i = 0; i < lora.n; i++) hx_adapter_free(adapters[i]);
    hx_model_free(m);
    return rc;
}
