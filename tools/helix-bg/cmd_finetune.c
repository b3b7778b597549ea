/* cmd_finetune.c — `helix-bg finetune`: LoRA fine-tuning of a frozen model on
 * a JSONL data set (src/train), and `helix-bg kb-to-dataset`: a knowledge
 * base's entries as a topic-classification data set.
 *
 * Data: one JSON object per line, either {"prompt": P, "completion": C} (P as
 * plain text, or through the chat template as the user's turn with --chat) or
 * {"messages": [{"role", "content"}...]} whose last message is the
 * assistant's: the messages before it are rendered with the chat template,
 * the assistant's turn opened, and the completion is its content. The
 * completion's tokens, then end-of-turn (chat) or EOS, are the targets; the
 * prompt's are context only.
 *
 * A step takes --batch examples (shuffled each epoch), packs them into
 * micro-batches of at most --micro-tokens tokens and accumulates their
 * gradients (the loss is the mean over the step's target tokens), clips,
 * and takes one AdamW step at the scheduled learning rate (linear warm-up,
 * cosine decay). Each step prints a progress line and rewrites the CSV loss
 * curve; --eval FILE reports the held-out loss and exact-match accuracy
 * (greedy decoding reproduces the whole completion, checked in one teacher-
 * forced pass) before and after training, and every --eval-every steps. The
 * curve is also drawn as a PNG (plot.c): the train loss of every step and the
 * held-out loss where measured (step 0 = before), written before the first
 * step (so a bad path fails at once), every --plot-every steps and at the end,
 * each time atomically. */
#include "cli.h"
#include "helix_kb.h"
#include "helix_train.h"
#include "plot.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* An error value with a message (the library's hx_err is private to it). */
static hx_status ft_err(hx_error *e, hx_status s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static hx_status ft_err(hx_error *e, hx_status s, const char *fmt, ...) {
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
        e->status = s;
    }
    return s;
}

int cmd_finetune(int argc, char **argv);
int cmd_kb_to_dataset(int argc, char **argv);

/* ---- data ---- */

typedef struct example {
    int32_t *tok;
    uint8_t *tgt;   /* 1 for completion tokens */
    int n;
} example;

typedef struct dataset {
    example *ex;
    int n, cap;
    long tokens, targets;
} dataset;

static void dataset_free(dataset *d) {
    for (int i = 0; i < d->n; i++) { free(d->ex[i].tok); free(d->ex[i].tgt); }
    free(d->ex);
    memset(d, 0, sizeof *d);
}

static hx_status tokenize_alloc(const hx_model *m, const char *text, bool special, int32_t **out, int *n, hx_error *e) {
    int cap = (int)strlen(text) + 8;
    *out = malloc(sizeof(int32_t) * (size_t)cap);
    if (!*out) return ft_err(e, HX_ERR_NOMEM, "out of memory");
    hx_status st = hx_tokenize(m, text, -1, special, special, *out, cap, n, e);
    if (st == HX_ERR_RANGE) {
        cap = *n;
        int32_t *p = realloc(*out, sizeof(int32_t) * (size_t)cap);
        if (!p) return ft_err(e, HX_ERR_NOMEM, "out of memory");
        *out = p;
        st = hx_tokenize(m, text, -1, special, special, *out, cap, n, e);
    }
    return st;
}

/* One line's prompt text and completion (pointers into j or into *owned). */
static int line_texts(const hx_model *m, cJSON *j, bool chat, char **prompt, const char **completion, bool *is_chat,
                      hx_error *e) {
    *prompt = NULL;
    cJSON *p = cJSON_GetObjectItem(j, "prompt"), *c = cJSON_GetObjectItem(j, "completion");
    cJSON *msgs = cJSON_GetObjectItem(j, "messages");
    if (cJSON_IsString(p) && cJSON_IsString(c)) {
        *completion = c->valuestring;
        *is_chat = chat;
        if (!chat) { *prompt = strdup(p->valuestring); return *prompt ? 0 : -1; }
        hx_chat_message msg = { "user", p->valuestring };
        if (hx_chat_apply(m, &msg, 1, true, prompt, e)) return -1;
        return 0;
    }
    if (!cJSON_IsArray(msgs)) {
        ft_err(e, HX_ERR_FORMAT, "neither \"prompt\" + \"completion\" strings nor a \"messages\" array");
        return -1;
    }
    int nm = cJSON_GetArraySize(msgs);
    if (nm < 2 || nm > 256) { ft_err(e, HX_ERR_FORMAT, "\"messages\" needs 2..256 messages, has %d", nm); return -1; }
    hx_chat_message *ms = calloc((size_t)nm, sizeof *ms);
    if (!ms) return -1;
    for (int i = 0; i < nm; i++) {
        cJSON *it = cJSON_GetArrayItem(msgs, i);
        cJSON *r = cJSON_GetObjectItem(it, "role"), *ct = cJSON_GetObjectItem(it, "content");
        if (!cJSON_IsString(r) || !cJSON_IsString(ct)) {
            free(ms);
            ft_err(e, HX_ERR_FORMAT, "message %d lacks a \"role\" or \"content\" string", i);
            return -1;
        }
        ms[i] = (hx_chat_message){ r->valuestring, ct->valuestring };
    }
    if (strcmp(ms[nm - 1].role, "assistant")) {
        ft_err(e, HX_ERR_FORMAT, "the last message is '%s', not the assistant's (the completion)", ms[nm - 1].role);
        free(ms);
        return -1;
    }
    *completion = ms[nm - 1].content;
    *is_chat = true;
    int rc = hx_chat_apply(m, ms, nm - 1, true, prompt, e) ? -1 : 0;
    free(ms);
    return rc;
}

/* Reads path into d; lines longer than max_len tokens are cut from the front
 * of the prompt (the completion is kept). 0, or 1 after printing the error. */
static int dataset_load(const char *cmd, const hx_model *m, const char *path, bool chat, int max_len, dataset *d) {
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "helix-bg %s: %s: %s\n", cmd, path, strerror(errno)); return 1; }
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    int lineno = 0, rc = 0;
    int32_t end_chat = hx_token_eot(m) >= 0 ? hx_token_eot(m) : hx_token_eos(m), end_plain = hx_token_eos(m);
    while ((len = getline(&line, &lcap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        hx_error e = {0};
        cJSON *j = cJSON_ParseWithLength(line, (size_t)len);
        char *prompt = NULL;
        const char *completion = NULL;
        bool is_chat = false;
        int32_t *pt = NULL, *ct = NULL;
        int np = 0, nc = 0;
        if (!j) ft_err(&e, HX_ERR_FORMAT, "not valid JSON");
        if (!j || line_texts(m, j, chat, &prompt, &completion, &is_chat, &e) ||
            tokenize_alloc(m, prompt, true, &pt, &np, &e) || tokenize_alloc(m, completion, false, &ct, &nc, &e)) {
            fprintf(stderr, "helix-bg %s: %s:%d: %s\n", cmd, path, lineno, e.msg[0] ? e.msg : "out of memory");
            rc = 1;
        } else {
            int32_t end = is_chat ? end_chat : end_plain;
            int total_c = nc + (end >= 0 ? 1 : 0);
            if (total_c == 0 || total_c >= max_len) {
                fprintf(stderr, "helix-bg %s: %s:%d: the completion has %d tokens (1..%d with --max-len %d)\n", cmd,
                        path, lineno, total_c, max_len - 1, max_len);
                rc = 1;
            } else {
                int keep_p = np < max_len - total_c ? np : max_len - total_c; /* the prompt's last tokens */
                example x = { malloc(sizeof(int32_t) * (size_t)(keep_p + total_c)), calloc((size_t)(keep_p + total_c), 1),
                              keep_p + total_c };
                if (d->n == d->cap) {
                    d->cap = d->cap ? 2 * d->cap : 256;
                    example *nx = realloc(d->ex, sizeof(example) * (size_t)d->cap);
                    if (nx) d->ex = nx;
                    else rc = 1;
                }
                if (!x.tok || !x.tgt || rc) {
                    free(x.tok); free(x.tgt);
                    fprintf(stderr, "helix-bg %s: out of memory\n", cmd);
                    rc = 1;
                } else {
                    memcpy(x.tok, pt + (np - keep_p), sizeof(int32_t) * (size_t)keep_p);
                    memcpy(x.tok + keep_p, ct, sizeof(int32_t) * (size_t)nc);
                    if (end >= 0) x.tok[keep_p + nc] = end;
                    for (int i = keep_p; i < x.n; i++) x.tgt[i] = 1;
                    d->ex[d->n++] = x;
                    d->tokens += x.n;
                    d->targets += total_c;
                }
            }
        }
        free(pt); free(ct);
        hx_free(prompt);
        cJSON_Delete(j);
        if (rc) break;
    }
    free(line);
    fclose(f);
    if (!rc && d->n == 0) { fprintf(stderr, "helix-bg %s: %s: no examples\n", cmd, path); rc = 1; }
    return rc;
}

/* The tokenized examples as JSONL lines {"ids": [...], "target": [0/1...]}. 0, or 1 after printing why. */
static int tokens_write(const char *cmd, const char *path, const dataset *d) {
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (int k = 0; buf && k < d->n; k++) {
        const example *x = &d->ex[k];
        size_t need = len + 32 + (size_t)x->n * 16;
        if (need > cap) {
            while (cap < need) cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); buf = NULL; break; }
            buf = nb;
        }
        len += (size_t)sprintf(buf + len, "{\"ids\": [");
        for (int i = 0; i < x->n; i++) len += (size_t)sprintf(buf + len, "%s%d", i ? ", " : "", x->tok[i]);
        len += (size_t)sprintf(buf + len, "], \"target\": [");
        for (int i = 0; i < x->n; i++) len += (size_t)sprintf(buf + len, "%s%d", i ? ", " : "", x->tgt[i]);
        len += (size_t)sprintf(buf + len, "]}\n");
    }
    hx_error e = {0};
    if (!buf) { fprintf(stderr, "helix-bg %s: out of memory\n", cmd); return 1; }
    int rc = hx_write_file_atomic(path, buf, len, &e) ? 1 : 0;
    if (rc) fprintf(stderr, "helix-bg %s: %s\n", cmd, e.msg);
    free(buf);
    return rc;
}

/* ---- evaluation ---- */

typedef struct eval_result { double loss; double acc; long n_tok; } eval_result;

/* Mean target cross-entropy and the fraction of examples whose every target
 * token is the argmax (greedy decoding would reproduce the completion). */
static hx_status evaluate(hx_trainer *t, const hx_model *m, const dataset *d, eval_result *r, hx_error *e) {
    int V = hx_model_n_vocab(m), maxn = 0;
    for (int i = 0; i < d->n; i++) if (d->ex[i].n > maxn) maxn = d->ex[i].n;
    float *lg = malloc(sizeof(float) * (size_t)maxn * V);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)maxn);
    if (!lg || !pos) { free(lg); free(pos); return ft_err(e, HX_ERR_NOMEM, "eval: out of memory"); }
    for (int i = 0; i < maxn; i++) pos[i] = i;
    double loss = 0;
    long ntok = 0, right = 0;
    for (int k = 0; k < d->n; k++) {
        const example *x = &d->ex[k];
        hx_status st = hx_trainer_logits(t, x->tok, pos, x->n, lg, e);
        if (st) { free(lg); free(pos); return st; }
        bool all = true;
        for (int i = 1; i < x->n; i++) {
            if (!x->tgt[i]) continue;
            const float *row = lg + (size_t)(i - 1) * V;
            int best = 0;
            double mx = row[0], sum = 0;
            for (int v = 1; v < V; v++) if (row[v] > row[best]) best = v;
            mx = row[best];
            for (int v = 0; v < V; v++) sum += exp((double)row[v] - mx);
            loss += log(sum) + mx - row[x->tok[i]];
            ntok++;
            if (best != x->tok[i]) all = false;
        }
        right += all;
    }
    free(lg);
    free(pos);
    r->loss = ntok ? loss / ntok : 0;
    r->acc = d->n ? (double)right / d->n : 0;
    r->n_tok = ntok;
    return HX_OK;
}

/* ---- finetune ---- */

/* CPU seconds of the whole process (all threads): throughput on a shared machine. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

static hx_status csv_write(const char *path, const char *buf, size_t n, hx_error *e) {
    return hx_write_file_atomic(path, buf, n, e);
}

/* The loss curve so far: steps 1..n_step of train loss, and the held-out
 * loss at the steps it was measured (0: before training). */
typedef struct curve {
    double *step, *loss;      /* n_step, step[i] = i + 1 */
    int n_step;
    double *ev_step, *ev_loss;
    int n_ev;
} curve;

static hx_status curve_png(const char *path, const curve *c, hx_error *e) {
    plot_series s[2] = {
        {c->step, c->loss, c->n_step, {31, 119, 180}, false, "train loss (mean per target token)"},
        {c->ev_step, c->ev_loss, c->n_ev, {230, 110, 20}, true, "held-out loss (--eval)"},
    };
    return plot_png(path, "helix-bg finetune: loss per step", "optimizer step", "loss", s, c->n_ev ? 2 : 1, e);
}

int cmd_finetune(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *out = NULL, *csv = NULL, *png = NULL, *eval_path = NULL, *save_tokens = NULL;
    int rank = 8, epochs = 1, steps = 0, batch = 8, micro = 512, warmup = -1, threads = 0, max_len = 512;
    int plot_every = 10, eval_every = 0;
    float alpha = 0, lr = 1e-3f, wd = 0.01f, clip = 1.0f, min_ratio = 0.1f, max_minutes = 0;
    uint64_t seed = 1;
    bool chat = false, ckpt = false;
    cli_opt opts[] = {
        {CLI_STR, "-m|--model", &model, "FILE", "the base model: GGUF (any type; dequantized to f32) or HF folder", 0, 0, NULL},
        {CLI_STR, "--data", &data, "FILE", "training set: JSONL of {prompt, completion} or {messages}", 0, 0, NULL},
        {CLI_STR, "-o|--out", &out, "FILE", "the adapter to write (llama.cpp's GGUF LoRA format)", 0, 0, NULL},
        {CLI_STR, "--eval", &eval_path, "FILE", "held-out JSONL: loss and exact-match accuracy before and after", 0, 0, NULL},
        {CLI_INT, "--eval-every", &eval_every, "N", "also measure the held-out set every N steps (0 = before and after only)",
         0, 100000000, NULL},
        {CLI_STR, "--csv", &csv, "FILE", "loss curve CSV, rewritten each step (default: OUT with .csv appended)", 0, 0, NULL},
        {CLI_STR, "--png", &png, "FILE", "loss curve plot: train loss per step, held-out loss where measured "
                                         "(default: OUT with .png appended)", 0, 0, NULL},
        {CLI_INT, "--plot-every", &plot_every, "N", "rewrite the plot every N steps (it is also written before the "
                                                  "first and after the last; 0 = only then)", 0, 100000000, NULL},
        {CLI_STR, "--save-tokens", &save_tokens, "FILE", "also write the tokenized set as JSONL {ids, target} "
                                                       "(to train another framework on the same tokens)", 0, 0, NULL},
        {CLI_BOOL, "--chat", &chat, NULL, "render prompt/completion lines through the chat template as well", 0, 0, NULL},
        {CLI_SECTION, "LoRA", NULL, NULL, "LoRA (q, k, v, o, gate, up, down of every layer)", 0, 0, NULL},
        {CLI_INT, "-r|--rank", &rank, "R", "rank", 1, 1024, NULL},
        {CLI_FLOAT, "--alpha", &alpha, "A", "scale alpha / rank (default 2 x rank)", 0, 1e6, NULL},
        {CLI_SECTION, "optimization", NULL, NULL, "optimization (AdamW)", 0, 0, NULL},
        {CLI_FLOAT, "--lr", &lr, "LR", "peak learning rate", 0, 10, NULL},
        {CLI_INT, "--epochs", &epochs, "N", "passes over the data (unless --steps)", 1, 100000, NULL},
        {CLI_INT, "--steps", &steps, "N", "optimizer steps (default: epochs x examples / batch)", 0, 100000000, NULL},
        {CLI_INT, "--batch", &batch, "N", "examples per optimizer step", 1, 4096, NULL},
        {CLI_INT, "--micro-tokens", &micro, "N", "most tokens per forward/backward (gradient accumulation inside a step)", 16, 65536, NULL},
        {CLI_INT, "--max-len", &max_len, "N", "longest example in tokens (the prompt's start is cut)", 4, 65536, NULL},
        {CLI_INT, "--warmup", &warmup, "N", "warm-up steps (default: 5% of the steps)", -1, 100000000, NULL},
        {CLI_FLOAT, "--min-lr-ratio", &min_ratio, "F", "the cosine decays to lr x F", 0, 1, NULL},
        {CLI_FLOAT, "--wd", &wd, "F", "decoupled weight decay", 0, 10, NULL},
        {CLI_FLOAT, "--clip", &clip, "F", "clip the global gradient norm (0 = off)", 0, 1e9, NULL},
        {CLI_U64, "--seed", &seed, "N", "A's initialization and the shuffle", 0, 0, NULL},
        {CLI_FLOAT, "--max-minutes", &max_minutes, "M", "stop after this much training time (0 = no limit)", 0, 1e7, NULL},
        {CLI_SECTION, "compute", NULL, NULL, "compute", 0, 0, NULL},
        {CLI_INT, "-t|--threads", &threads, "N", "CPU threads (0 = all)", 0, 4096, NULL},
        {CLI_BOOL, "--checkpoint", &ckpt, NULL, "keep only each layer's input and recompute the layer in the backward "
                                               "(activation memory of one layer; a third more compute)", 0, 0, NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int rc = cli_parse("finetune", "finetune -m BASE --data FILE.jsonl -o ADAPTER.gguf [options]",
                       "Trains a LoRA adapter on the CPU (the base stays frozen; f32 math, 8 bytes per base\n"
                       "matrix parameter for its dequantized copies). Prints one line per step and writes the\n"
                       "loss curve as CSV and PNG. Load the result with --lora ADAPTER.gguf (helix or llama.cpp).",
                       opts, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    if (!model || !data || !out) return cli_usage_error("finetune", "-m BASE, --data FILE and -o OUT are required (see --help)");
    if (alpha == 0) alpha = 2.0f * rank;
    char csv_default[4096];
    if (!csv) { snprintf(csv_default, sizeof csv_default, "%s.csv", out); csv = csv_default; }
    char png_default[4096];
    if (!png) { snprintf(png_default, sizeof png_default, "%s.png", out); png = png_default; }
    if (eval_every && !eval_path) return cli_usage_error("finetune", "--eval-every needs --eval FILE");

    hx_error e = {0};
    hx_model *m = NULL;
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    if (hx_model_open(model, &mp, &m, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); return 1; }
    dataset ds = {0}, ev = {0};
    hx_trainer *t = NULL;
    char *csvbuf = NULL;
    curve cv = {0};
    int32_t *mtok = NULL, *mpos = NULL;
    uint8_t *mtgt = NULL;
    int *order = NULL;
    rc = 1;
    if (dataset_load("finetune", m, data, chat, max_len, &ds)) goto done;
    if (eval_path && dataset_load("finetune", m, eval_path, chat, max_len, &ev)) goto done;
    if (max_len > micro) micro = max_len; /* a micro-batch holds at least one whole example */
    if (save_tokens && tokens_write("finetune", save_tokens, &ds)) goto done;
    hx_train_opts to = hx_train_default_opts();
    to.rank = rank;
    to.alpha = alpha;
    to.n_threads = threads;
    to.checkpoint = ckpt;
    to.seed = seed;
    double t0 = cli_now();
    if (hx_trainer_new(m, &to, &t, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); goto done; }
    int per_epoch = (ds.n + batch - 1) / batch;
    int total = steps > 0 ? steps : epochs * per_epoch;
    if (warmup < 0) warmup = total / 20;
    fprintf(stderr, "finetune: %s (%s, %d layers), %d examples (%ld tokens, %ld targets), %d steps of %d, "
            "rank %d alpha %g, lr %g warm-up %d; base as f32: %.1f MiB (%.1f s)\n",
            model, hx_model_arch(m), hx_model_n_layer(m), ds.n, ds.tokens, ds.targets, total, batch, rank, alpha, lr,
            warmup, hx_trainer_base_bytes(t) / 1048576.0, cli_now() - t0);
    eval_result before = {0}, after = {0};
    if (ev.n) {
        if (evaluate(t, m, &ev, &before, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); goto done; }
        fprintf(stderr, "eval before: loss %.4f, exact match %.1f%% of %d\n", before.loss, 100 * before.acc, ev.n);
    }
    int max_ev = 2 + (eval_every ? total / eval_every : 0);
    cv.step = malloc(sizeof(double) * (size_t)total);
    cv.loss = malloc(sizeof(double) * (size_t)total);
    cv.ev_step = malloc(sizeof(double) * (size_t)max_ev);
    cv.ev_loss = malloc(sizeof(double) * (size_t)max_ev);
    if (!cv.step || !cv.loss || !cv.ev_step || !cv.ev_loss) { fprintf(stderr, "helix-bg finetune: out of memory\n"); goto done; }
    if (ev.n) { cv.ev_step[0] = 0; cv.ev_loss[0] = before.loss; cv.n_ev = 1; }
    /* the plot once before training: an unwritable --png fails now, not after the run */
    if (curve_png(png, &cv, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); goto done; }
    mtok = malloc(sizeof(int32_t) * (size_t)micro);
    mpos = malloc(sizeof(int32_t) * (size_t)micro);
    mtgt = malloc((size_t)micro);
    order = malloc(sizeof(int) * (size_t)ds.n);
    size_t csv_cap = 256 + (size_t)total * 96, csv_len = 0;
    csvbuf = malloc(csv_cap);
    if (!mtok || !mpos || !mtgt || !order || !csvbuf) { fprintf(stderr, "helix-bg finetune: out of memory\n"); goto done; }
    csv_len = (size_t)snprintf(csvbuf, csv_cap, "step,epoch,loss,lr,grad_norm,tokens,tokens_per_s,elapsed_s,eval_loss\n");
    hx_adamw_opts ao = hx_adamw_default_opts();
    ao.weight_decay = wd;
    ao.clip = clip;
    uint64_t rs = seed * 0x9e3779b97f4a7c15ull + 1;
    int cursor = ds.n; /* next index in order; ds.n: reshuffle */
    int epoch = 0;
    long tok_all = 0;
    double train_s = 0, cpu_s = 0;
    int done_steps = 0, last_eval = -1; /* steps taken; the step of the last mid-run eval */
    for (int step = 0; step < total; step++) {
        double ts = cli_now(), cs = cpu_now();
        hx_trainer_zero_grad(t);
        /* the step's examples */
        int picked[4096], np = 0;
        int want = batch < 4096 ? batch : 4096;
        long ntg = 0;
        while (np < want) {
            if (cursor == ds.n) {
                for (int i = 0; i < ds.n; i++) order[i] = i;
                for (int i = ds.n - 1; i > 0; i--) {
                    int j = (int)(rng_next(&rs) % (uint64_t)(i + 1)), tmp = order[i];
                    order[i] = order[j]; order[j] = tmp;
                }
                cursor = 0;
                epoch++;
            }
            picked[np++] = order[cursor++];
            if (np == ds.n) break;
        }
        for (int i = 0; i < np; i++) {
            const example *x = &ds.ex[picked[i]];
            for (int k = 1; k < x->n; k++) ntg += x->tgt[k];
        }
        double loss = 0;
        long step_tok = 0;
        int fill = 0;
        for (int i = 0; i <= np; i++) {
            const example *x = i < np ? &ds.ex[picked[i]] : NULL;
            if (fill > 0 && (!x || fill + x->n > micro)) {
                double ls = 0;
                if (hx_trainer_accumulate(t, mtok, mpos, mtgt, fill, (float)(1.0 / (ntg > 0 ? ntg : 1)), &ls, NULL, &e)) {
                    fprintf(stderr, "helix-bg finetune: %s\n", e.msg);
                    goto done;
                }
                loss += ls;
                step_tok += fill;
                fill = 0;
            }
            if (!x) break;
            memcpy(mtok + fill, x->tok, sizeof(int32_t) * (size_t)x->n);
            memcpy(mtgt + fill, x->tgt, (size_t)x->n);
            for (int k = 0; k < x->n; k++) mpos[fill + k] = k;
            fill += x->n;
        }
        float cur_lr = hx_train_lr_at(lr, step, warmup, total, min_ratio);
        double gn = hx_trainer_adamw_step(t, &ao, cur_lr);
        double dt = cli_now() - ts;
        train_s += dt;
        cpu_s += cpu_now() - cs;
        tok_all += step_tok;
        double mean = ntg ? loss / ntg : 0;
        fprintf(stderr, "step %5d/%d  epoch %d  loss %.4f  lr %.3g  |g| %.3g  %ld tok  %.0f tok/s  %.1f s\n", step + 1,
                total, epoch, mean, cur_lr, gn, step_tok, step_tok / dt, train_s);
        cv.step[cv.n_step] = step + 1;
        cv.loss[cv.n_step++] = mean;
        done_steps = step + 1;
        /* held-out loss every --eval-every steps (the last step's is the "after" below) */
        eval_result mid = {0};
        bool mid_ok = eval_every > 0 && (step + 1) % eval_every == 0 && step + 1 < total;
        if (mid_ok) {
            if (evaluate(t, m, &ev, &mid, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); goto done; }
            fprintf(stderr, "eval step %d: loss %.4f, exact match %.1f%% of %d\n", step + 1, mid.loss, 100 * mid.acc, ev.n);
            cv.ev_step[cv.n_ev] = step + 1;
            cv.ev_loss[cv.n_ev++] = mid.loss;
            last_eval = step + 1;
            after = mid;
        }
        if (csv_len + 160 > csv_cap) {
            char *nb = realloc(csvbuf, csv_cap * 2);
            if (!nb) { fprintf(stderr, "helix-bg finetune: out of memory\n"); goto done; }
            csvbuf = nb;
            csv_cap *= 2;
        }
        csv_len += (size_t)snprintf(csvbuf + csv_len, csv_cap - csv_len, "%d,%d,%.6f,%.6g,%.6g,%ld,%.1f,%.3f,",
                                    step + 1, epoch, mean, cur_lr, gn, step_tok, step_tok / dt, train_s);
        if (mid_ok) csv_len += (size_t)snprintf(csvbuf + csv_len, csv_cap - csv_len, "%.6f", mid.loss);
        csvbuf[csv_len++] = '\n';
        csvbuf[csv_len] = 0;
        if (csv_write(csv, csvbuf, csv_len, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); goto done; }
        if (plot_every > 0 && (step + 1) % plot_every == 0 && curve_png(png, &cv, &e)) {
            fprintf(stderr, "helix-bg finetune: %s\n", e.msg);
            goto done;
        }
        if (max_minutes > 0 && train_s > max_minutes * 60.0 && step + 1 < total) {
            fprintf(stderr, "finetune: --max-minutes %g reached after %d of %d steps\n", max_minutes, step + 1, total);
            break;
        }
    }
    if (hx_trainer_save(t, out, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); goto done; }
    fprintf(stderr, "finetune: wrote %s, %s and %s; %ld tokens in %.1f s (%.1f tok/s), %.1f CPU s (%.1f tok per CPU s)\n",
            out, csv, png, tok_all, train_s, train_s > 0 ? tok_all / train_s : 0, cpu_s, cpu_s > 0 ? tok_all / cpu_s : 0);
    if (ev.n) {
        /* a mid-run eval at the last step taken (--max-minutes) already measured these weights */
        if (last_eval != done_steps) {
            if (evaluate(t, m, &ev, &after, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); goto done; }
            cv.ev_step[cv.n_ev] = done_steps;
            cv.ev_loss[cv.n_ev++] = after.loss;
            /* the last CSV row ends "...,elapsed_s," with its eval_loss empty: fill it in */
            if (csv_len >= 2 && csvbuf[csv_len - 2] == ',' && csv_cap - csv_len > 32) {
                csv_len--;
                csv_len += (size_t)snprintf(csvbuf + csv_len, csv_cap - csv_len, "%.6f\n", after.loss);
                if (csv_write(csv, csvbuf, csv_len, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); goto done; }
            }
        }
        fprintf(stderr, "eval after: loss %.4f, exact match %.1f%% of %d (before: %.4f, %.1f%%)\n", after.loss,
                100 * after.acc, ev.n, before.loss, 100 * before.acc);
    }
    if (curve_png(png, &cv, &e)) { fprintf(stderr, "helix-bg finetune: %s\n", e.msg); goto done; }
    rc = 0;
done:
    free(mtok); free(mpos); free(mtgt); free(order); free(csvbuf);
    free(cv.step); free(cv.loss); free(cv.ev_step); free(cv.ev_loss);
    hx_trainer_free(t);
    dataset_free(&ds);
    dataset_free(&ev);
    hx_model_free(m);
    return rc;
}

/* ---- kb-to-dataset ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

int cmd_kb_to_dataset(int argc, char **argv) {
    const char *dir = NULL, *test_out = NULL;
    int test_every = 0, max_chars = 600;
    cli_opt opts[] = {
        {CLI_POS, "KB-DIR", &dir, NULL, "the knowledge base (its data.log)", 0, 0, NULL},
        {CLI_STR, "--test-out", &test_out, "FILE", "write every --test-every'th entry here instead (held-out set)", 0, 0, NULL},
        {CLI_INT, "--test-every", &test_every, "K", "hold out entries K-1, 2K-1, ... (0 = none)", 0, 1000000, NULL},
        {CLI_INT, "--max-chars", &max_chars, "N", "cut an entry's text to N bytes (at a character boundary)", 16, 1 << 20, NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int rc = cli_parse("kb-to-dataset", "kb-to-dataset KB-DIR [--test-out FILE --test-every K] > train.jsonl",
                       "Writes one {\"messages\": [system, user, assistant]} line per live entry: the system\n"
                       "message lists the KB's topics, the user's is the entry's title and text, the assistant's\n"
                       "answer is its topic. Feed it to helix-bg finetune --data.", opts, argc, argv);
    if (rc) return rc == 1 ? 0 : rc;
    if (!dir) return cli_usage_error("kb-to-dataset", "KB-DIR is required (see --help)");
    if ((test_out != NULL) != (test_every > 0))
        return cli_usage_error("kb-to-dataset", "--test-out and --test-every go together");
    char path[4096];
    snprintf(path, sizeof path, "%s/data.log", dir);
    kb_log log = {0};
    hx_error e = {0};
    if (kb_log_read(&log, path, &e)) { fprintf(stderr, "helix-bg kb-to-dataset: %s\n", e.msg); kb_log_free(&log); return 1; }
    /* the distinct topics, sorted */
    char **topics = malloc(sizeof(char *) * (log.n + 1));
    int nt = 0;
    for (size_t i = 0; topics && i < log.n; i++) {
        const kb_entry *en = &log.e[i];
        if (en->deleted || !en->topic || !*en->topic) continue;
        bool seen = false;
        for (int k = 0; k < nt && !seen; k++) seen = !strcmp(topics[k], en->topic);
        if (!seen) topics[nt++] = en->topic;
    }
    if (!topics || nt < 2) {
        fprintf(stderr, "helix-bg kb-to-dataset: %s: %s\n", path, topics ? "fewer than 2 topics: nothing to classify" : "out of memory");
        free(topics);
        kb_log_free(&log);
        return 1;
    }
    qsort(topics, (size_t)nt, sizeof(char *), cmp_str);
    size_t sys_len = 128;
    for (int k = 0; k < nt; k++) sys_len += strlen(topics[k]) + 2;
    char *sys = malloc(sys_len);
    FILE *tf = test_out ? fopen(test_out, "w") : NULL;
    if (!sys || (test_out && !tf)) {
        fprintf(stderr, "helix-bg kb-to-dataset: %s\n", !sys ? "out of memory" : strerror(errno));
        free(sys); free(topics); kb_log_free(&log);
        if (tf) fclose(tf);
        return 1;
    }
    size_t at = (size_t)snprintf(sys, sys_len, "Classify the note into one topic. Answer with the topic only. Topics: ");
    for (int k = 0; k < nt; k++) at += (size_t)snprintf(sys + at, sys_len - at, "%s%s", k ? ", " : "", topics[k]);
    size_t live = 0, n_train = 0, n_test = 0;
    for (size_t i = 0; i < log.n; i++) {
        const kb_entry *en = &log.e[i];
        if (en->deleted || !en->topic || !*en->topic) continue;
        live++;
        char *txt = kb_entry_text(en);
        if (!txt) continue;
        size_t tl = strlen(txt);
        if (tl > (size_t)max_chars) {
            tl = (size_t)max_chars;
            while (tl > 0 && ((unsigned char)txt[tl] & 0xC0) == 0x80) tl--; /* not inside a UTF-8 character */
            txt[tl] = 0;
        }
        cJSON *j = cJSON_CreateObject(), *ms = cJSON_AddArrayToObject(j, "messages");
        const char *roles[3] = { "system", "user", "assistant" }, *cont[3] = { sys, txt, en->topic };
        for (int k = 0; k < 3; k++) {
            cJSON *mo = cJSON_CreateObject();
            cJSON_AddStringToObject(mo, "role", roles[k]);
            cJSON_AddStringToObject(mo, "content", cont[k]);
            cJSON_AddItemToArray(ms, mo);
        }
        char *s = cJSON_PrintUnformatted(j);
        bool test = tf && live % (size_t)test_every == 0;
        if (s) fprintf(test ? tf : stdout, "%s\n", s);
        if (test) n_test++;
        else n_train++;
        cJSON_free(s);
        cJSON_Delete(j);
        free(txt);
    }
    rc = 0;
    if (tf && fclose(tf) != 0) { fprintf(stderr, "helix-bg kb-to-dataset: %s: %s\n", test_out, strerror(errno)); rc = 1; }
    if (fflush(stdout) != 0) rc = 1;
    fprintf(stderr, "kb-to-dataset: %zu entries in %d topics: %zu written%s", live, nt, n_train, test_out ? "" : "\n");
    if (test_out) fprintf(stderr, ", %zu held out to %s\n", n_test, test_out);
    free(sys);
    free(topics);
    kb_log_free(&log);
    return rc;
}
