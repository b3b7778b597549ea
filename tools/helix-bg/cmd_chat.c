/* cmd_chat.c — helix-bg chat -m FILE: a conversation in the model's chat
 * template, a client of helix.h.
 *
 * Every turn hands the whole conversation to hx_generate on sequence 0 of one
 * context; hx_generate reuses the longest prefix already in the KV cache, so a
 * turn runs only its new tokens. Input: one message per line; on a terminal
 * with line editing and history (libedit, when the build found it). Ctrl-C
 * while the model answers stops the reply and returns to the prompt, keeping
 * what was said (the partial reply too); Ctrl-C at the prompt (libedit's
 * readline returns no line on it, typed or not), Ctrl-D or /quit ends. /reset (after a
 * confirmation on a terminal) forgets the conversation. */
#include "cli.h"
#include "cli_sampling.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef HX_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

#define CMD "chat"

typedef struct history {
    hx_chat_message *m;
    int n, cap;
} history;

static bool push(history *h, const char *role, const char *content) {
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 8;
        hx_chat_message *nm = realloc(h->m, (size_t)cap * sizeof *nm);
        if (!nm) return false;
        h->m = nm;
        h->cap = cap;
    }
    char *c = strdup(content);
    if (!c) return false;
    h->m[h->n++] = (hx_chat_message){role, c};
    return true;
}

static void truncate_history(history *h, int keep) {
    while (h->n > keep) free((char *)h->m[--h->n].content);
}

/* SIGINT: while the model answers it cancels the reply (hx_generate polls
 * g_cancel); at the prompt it ends the session. */
static volatile int g_cancel;
static volatile sig_atomic_t g_at_prompt, g_quit;
static void on_sigint(int sig) {
    (void)sig;
    if (g_at_prompt) g_quit = 1; /* readline / getline then return NULL: the session ends */
    g_cancel = 1;
}

/* One line without its newline, malloc'ed; NULL at end of input or Ctrl-C. */
static char *read_line(const char *prompt, bool edit) {
    g_at_prompt = 1;
    char *line = NULL;
#ifdef HX_HAVE_LIBEDIT
    if (edit) {
        line = readline(prompt);
        if (line && *line) add_history(line);
        g_at_prompt = 0;
        return g_quit ? (free(line), NULL) : line;
    }
#endif
    if (edit) {
        fputs(prompt, stdout);
        fflush(stdout);
    }
    size_t cap = 0;
    ssize_t len = getline(&line, &cap, stdin);
    g_at_prompt = 0;
    if (len < 0 || g_quit) { /* EOF, or Ctrl-C interrupted the read (no SA_RESTART) */
        free(line);
        if (edit) putchar('\n');
        return NULL;
    }
    if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
    if (len > 0 && line[len - 1] == '\r') line[--len] = 0;
    return line;
}

static bool on_text(const char *text, size_t len, void *user) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *system = NULL;
    int n_reply = 512, n_ctx = 4096, threads = 0;
    cli_device dev = {.ngl = -2};
    hx_sampler_params sp = hx_sampler_defaults();
    sp.temp = 0.7f;
    sp.repeat_penalty = 1.1f;
    const cli_opt opts[] = {
        {CLI_STR, "-m|--model", &model, "FILE", "model: a .gguf file or a Hugging Face folder", 0, 0, NULL},
        {CLI_STR, "--system", &system, "TEXT", "system message at the start of the conversation", 0, 0, NULL},
        {CLI_INT, "-n|--n-predict", &n_reply, "N", "most tokens per reply, -1 = until end of turn or context", -1,
         1 << 30, NULL},
        {CLI_INT, "-c|--ctx-size", &n_ctx, "N", "context positions (at most the model's)", 64, 1 << 24, NULL},
        {CLI_INT, "-t|--threads", &threads, "N", "CPU threads, 0 = all", 0, 4096, NULL},
        {CLI_CHOICE, "--device", &dev.device, NULL, "where to run; cuda fails instead of falling back", 0, 0,
         cli_device_names},
        {CLI_INT, "-ngl|--n-gpu-layers", &dev.ngl, "N", "0 = cpu, more = cuda (default: as --device)", 0, 1 << 20,
         NULL},
        {CLI_INT, "-tp|--tensor-split", &dev.tp, "N", "split every layer over N GPUs (tensor parallelism over NCCL; "
         "heads, FFN and vocabulary cut N ways) (default 1)", 1, 8, NULL},
        CLI_SPLIT_OPTS(dev),
        CLI_SAMPLING_OPTS(sp),
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int pr = cli_parse(CMD, CMD " -m FILE [options]",
                       "One message per line. Ctrl-C stops a reply (the conversation is kept); Ctrl-C at the\n"
                       "prompt, Ctrl-D or /quit ends; /reset forgets the conversation. The template comes from\n"
                       "the model (ChatML, Llama 3, Gemma, Llama 2), or from its architecture when it has none.\n",
                       opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!model) return cli_usage_error(CMD, "-m FILE is required (see helix-bg " CMD " --help)");

    hx_model *m = cli_model_open(CMD, model, &dev, NULL);
    if (!m) return 1;
    int rc = 1;
    hx_context *ctx = NULL;
    history h = {0};
    hx_error e = {0};
    int train = hx_model_n_ctx_train(m);
    hx_context_params cp = hx_context_default_params();
    cp.n_ctx = train > 0 && n_ctx > train ? train : n_ctx;
    cp.n_threads = threads;
    if (!(ctx = cli_context_new(CMD, m, &cp, NULL))) goto done;
    if (system && !push(&h, "system", system)) {
        fprintf(stderr, "helix-bg " CMD ": out of memory\n");
        goto done;
    }
    int base = h.n;
    const char *name = hx_model_name(m);
    if (!hx_model_chat_template(m))
        fprintf(stderr, "helix-bg " CMD ": the model carries no chat template; using %s (from its architecture %s)\n",
                hx_chat_template_name(m), hx_model_arch(m));
    fprintf(stderr, "helix-bg " CMD ": %s, template %s, context %d, %s; /reset, /quit\n", name && *name ? name : model,
            hx_chat_template_name(m), hx_context_n_ctx_seq(ctx), hx_model_device(m) == HX_DEVICE_CUDA ? "cuda" : "cpu");

    bool tty = isatty(0) && isatty(1);
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint; /* no SA_RESTART: Ctrl-C interrupts a plain read at the prompt */
    sigaction(SIGINT, &sa, &old);
    rc = 0;
    for (char *line; (line = read_line("> ", tty));) {
        if (!strcmp(line, "/quit") || !strcmp(line, "/exit")) { free(line); break; }
        if (!strcmp(line, "/reset")) {
            free(line);
            char *yes = tty ? read_line("forget the conversation? [y/N] ", true) : NULL;
            if (!tty || (yes && (!strcmp(yes, "y") || !strcmp(yes, "yes")))) {
                truncate_history(&h, base);
                hx_seq_clear(ctx, 0);
                fprintf(stderr, "[conversation cleared]\n");
            }
            free(yes);
            if (g_quit) break;
            continue;
        }
        if (!*line) { free(line); continue; }
        bool ok = push(&h, "user", line);
        free(line);
        if (!ok) { fprintf(stderr, "helix-bg " CMD ": out of memory\n"); rc = 1; break; }

        hx_generate_params gp = hx_generate_default_params();
        gp.messages = h.m;
        gp.n_messages = h.n;
        gp.max_tokens = n_reply;
        gp.sampling = sp;
        gp.on_text = on_text;
        gp.cancel = &g_cancel;
        g_cancel = 0;
        hx_generate_result res = {0};
        if (hx_generate(ctx, &gp, &res, &e)) {
            fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
            truncate_history(&h, h.n - 1); /* the message was not answered: forget it */
            if (e.status == HX_ERR_RANGE) {
                fprintf(stderr, "helix-bg " CMD ": /reset or raise -c\n");
                continue;
            }
            rc = 1;
            break;
        }
        putchar('\n');
        fflush(stdout);
        const hx_metrics *mt = &res.metrics;
        fprintf(stderr, "[prompt %d new of %d tokens, %.1f tok/s | reply %d tokens, %.1f tok/s%s]\n", mt->prompt_tokens,
                res.n_prompt_ids, mt->prefill_tok_per_s, mt->gen_tokens, mt->decode_tok_per_s,
                res.stop == HX_STOP_CANCELLED ? " | stopped"
                : res.stop == HX_STOP_CONTEXT ? " | context full: /reset or raise -c" : "");
        ok = push(&h, "assistant", res.text ? res.text : "");
        hx_generate_result_free(&res);
        if (!ok) { fprintf(stderr, "helix-bg " CMD ": out of memory\n"); rc = 1; break; }
    }
    sigaction(SIGINT, &old, NULL);
done:
    truncate_history(&h, 0);
    free(h.m);
    hx_context_free(ctx);
    hx_model_free(m);
    return rc;
}
