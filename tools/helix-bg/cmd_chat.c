/* cmd_chat.c — helix-bg chat -m FILE: interactive chat with the model's own
 * template. Each turn renders the whole conversation, tokenizes it, and runs
 * only the tokens after the longest prefix already in the KV cache, so history
 * is never recomputed. Reads user lines from stdin ("/reset" clears history,
 * "/quit" or EOF ends), streams the reply. --device auto|cpu|cuda (-ngl N) as
 * for generate: the forward pass runs on the GPU when one is usable; sampling
 * stays on the CPU (the logits of each step are copied back). */
#include "cli.h"
#include "backend/cpu/forward.h"
#include "core/core.h"
#include "model/model.h"
#include "quant/quant.h"
#include "run/sampler.h"
#include "tok/chat.h"
#include "tok/tok.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f, "usage: helix-bg chat -m FILE.gguf [--system TEXT] [-n MAX_REPLY_TOKENS] [-c CTX] [-t N]\n"
               "                     [--temp T --top-k K --top-p P --min-p P --repeat-penalty R --seed S]\n"
               "                     [--device auto|cpu|cuda] [-ngl N]\n"
               "  one user message per line on stdin; /reset clears the history, /quit ends.\n"
               "  The template comes from tokenizer.chat_template (ChatML/Qwen, Llama 3, Gemma, Llama 2);\n"
               "  an unrecognized one falls back to ChatML with a warning. Default sampling: temp 0.7,\n"
               "  top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1.\n");
}

typedef struct history { hx_chat_msg *m; size_t n, cap; } history;

static bool push(history *h, const char *role, const char *content) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 8;
        hx_chat_msg *nm = realloc(h->m, cap * sizeof *nm);
        if (!nm) return false;
        h->m = nm;
        h->cap = cap;
    }
    char *c = strdup(content);
    if (!c) return false;
    h->m[h->n++] = (hx_chat_msg){role, c};
    return true;
}

static void clear(history *h, size_t keep) {
    while (h->n > keep) free((char *)h->m[--h->n].content);
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *system = NULL, *device = "auto";
    int n_reply = 512, n_ctx = 4096, threads = 0;
    hx_sampler_params sp = hx_sampler_defaults();
    sp.temp = 0.7f;
    sp.repeat_penalty = 1.1f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "-m") && has) model = argv[++i];
        else if (!strcmp(a, "--system") && has) system = argv[++i];
        else if (!strcmp(a, "-n") && has) n_reply = atoi(argv[++i]);
        else if (!strcmp(a, "-c") && has) n_ctx = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && has) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--temp") && has) sp.temp = (float)atof(argv[++i]);
        else if (!strcmp(a, "--top-k") && has) sp.top_k = atoi(argv[++i]);
        else if (!strcmp(a, "--top-p") && has) sp.top_p = (float)atof(argv[++i]);
        else if (!strcmp(a, "--min-p") && has) sp.min_p = (float)atof(argv[++i]);
        else if (!strcmp(a, "--repeat-penalty") && has) sp.repeat_penalty = (float)atof(argv[++i]);
        else if (!strcmp(a, "--seed") && has) sp.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--device") && has) device = argv[++i];
        else if (!strcmp(a, "-ngl") && has) device = atoi(argv[++i]) > 0 ? "cuda" : "cpu";
        else { fprintf(stderr, "helix-bg chat: bad or incomplete option '%s'\n", a); usage(stderr); return 2; }
    }
    if (!model || n_reply < 1 || n_ctx < 64 || threads < 0 || sp.temp < 0) { usage(stderr); return 2; }
    if (strcmp(device, "auto") && strcmp(device, "cpu") && strcmp(device, "cuda")) {
        fprintf(stderr, "helix-bg chat: --device takes auto, cpu or cuda, not '%s'\n", device);
        return 2;
    }
    hx_error e = {0};
    hx_model *m = NULL;
    hx_tok *tok = NULL;
    hx_cpu_ctx *c = NULL;
    void *gc = NULL; /* hx_cuda_ctx when running on the GPU */
    hx_sampler *smp = NULL;
    float *logits = NULL;
    int32_t *cache_ids = NULL; /* the tokens in the KV cache, in order */
    int n_cached = 0, rc = 1;
    history h = {0};
    char *line = NULL;
    size_t lcap = 0;
    hx_gguf_open_opts go = {.prefault = true};
    if (hx_model_load(model, &go, &m, &e) || hx_tok_load_gguf(model, &tok, &e)) {
        fprintf(stderr, "helix-bg chat: %s\n", e.msg);
        goto done;
    }
    if (n_ctx > m->cfg.n_ctx_train) n_ctx = m->cfg.n_ctx_train;
#ifdef HX_HAVE_CUDA
    if (strcmp(device, "cpu")) {
        hx_cuda_opts gopt = {.device = -1, .n_ctx = n_ctx};
        hx_cuda_ctx *g = NULL;
        if (hx_cuda_ctx_new(m, &gopt, &g, &e) != HX_OK) {
            if (!strcmp(device, "cuda")) { fprintf(stderr, "helix-bg chat: --device cuda: %s\n", e.msg); goto done; }
            fprintf(stderr, "helix-bg chat: running on the CPU (%s)\n", e.msg);
        }
        gc = g;
    }
#else
    if (!strcmp(device, "cuda")) {
        fprintf(stderr, "helix-bg chat: --device cuda: this build has no CUDA backend (nvcc was not found at configure time)\n");
        goto done;
    }
#endif
    hx_cpu_opts co = {.n_ctx = n_ctx, .kv_type = HX_TYPE_F16, .n_threads = threads, .ggml_compat = true};
    if (!gc && hx_cpu_ctx_new(m, &co, &c, &e)) { fprintf(stderr, "helix-bg chat: %s\n", e.msg); goto done; }
    hx_gguf_str tmpl = {0};
    char *tmpl_c = NULL;
    if (hx_gguf_get_str(m->gguf, "tokenizer.chat_template", &tmpl)) tmpl_c = strndup(tmpl.ptr, (size_t)tmpl.len);
    hx_chat_kind kind = hx_chat_detect(tmpl_c);
    free(tmpl_c);
    if (kind == HX_CHAT_UNKNOWN) {
        fprintf(stderr, "helix-bg chat: %s chat template not recognized; using ChatML\n", tmpl.ptr ? "the model's" : "no");
        kind = HX_CHAT_CHATML;
    }
    smp = hx_sampler_new(&sp, m->cfg.n_vocab);
    logits = malloc(sizeof(float) * (size_t)m->cfg.n_vocab);
    cache_ids = malloc(sizeof(int32_t) * (size_t)n_ctx);
    if (!smp || !logits || !cache_ids || (system && !push(&h, "system", system))) {
        fprintf(stderr, "helix-bg chat: out of memory\n");
        goto done;
    }
    size_t base = h.n;
    bool tty = isatty(0);
    fprintf(stderr, "helix-bg chat: %s, template %s, context %d, %s; /reset, /quit\n", m->cfg.name[0] ? m->cfg.name : model,
            hx_chat_name(kind), n_ctx, gc ? "cuda" : "cpu");
    rc = 0;
    for (;;) {
        if (tty) { fputs("> ", stdout); fflush(stdout); }
        ssize_t len = getline(&line, &lcap, stdin);
        if (len < 0) break;
        if (len > 0 && line[len - 1] == '\n') line[--len] = 0;
        if (!strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) { clear(&h, base); continue; }
        if (!len) continue;
        if (!push(&h, "user", line)) { fprintf(stderr, "helix-bg chat: out of memory\n"); rc = 1; break; }
        char *prompt = NULL;
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (hx_chat_format(kind, h.m, h.n, true, &prompt, &e) ||
            hx_tok_encode(tok, prompt, strlen(prompt), true, true, &ids, &n_ids, &e)) {
            fprintf(stderr, "helix-bg chat: %s\n", e.msg);
            free(prompt); rc = 1; break;
        }
        free(prompt);
        if ((int)n_ids + n_reply > n_ctx) {
            fprintf(stderr, "helix-bg chat: the conversation (%zu tokens) plus a reply no longer fits the context of %d; "
                            "/reset or raise -c\n", n_ids, n_ctx);
            free(ids);
            clear(&h, h.n - 1);
            continue;
        }
        /* reuse the longest cached prefix; run only the rest */
        int keep = 0;
        while (keep < n_cached && keep < (int)n_ids - 1 && cache_ids[keep] == ids[keep]) keep++;
        keep = cli_truncate(c, gc, keep); /* 0 when a sliding-window ring lost the window before keep */
        double t0 = hx_now_s();
        if (cli_forward(c, gc, ids + keep, (int)n_ids - keep, keep, logits, false, &e)) {
            fprintf(stderr, "helix-bg chat: %s\n", e.msg);
            free(ids); rc = 1; break;
        }
        memcpy(cache_ids, ids, n_ids * sizeof *ids);
        n_cached = (int)n_ids;
        double t_prompt = hx_now_s() - t0;
        hx_sampler_reset(smp);
        for (size_t i = 0; i < n_ids; i++) hx_sampler_accept(smp, ids[i]);
        free(ids);
        /* generate the reply */
        size_t rcap = 4096, rlen = 0;
        char *reply = malloc(rcap);
        hx_tok_stream ts = {0};
        int n_gen = 0;
        t0 = hx_now_s();
        /* the first token from the prompt's logits; each later one from a decode
         * step (cli_decode_next: on the GPU only the token comes back) */
        int V = m->cfg.n_vocab;
        bool greedy = sp.temp <= 0 && !hx_sampler_penalizes(&sp);
        int32_t t = greedy ? hx_argmax(logits, V) : hx_sampler_sample(smp, logits);
        while (reply && n_gen < n_reply) {
            if (hx_tok_is_eog(tok, t)) break;
            hx_sampler_accept(smp, t);
            char piece[256];
            size_t k = hx_tok_stream_push(tok, &ts, t, piece, sizeof piece);
            if (k > sizeof piece) k = sizeof piece;
            fwrite(piece, 1, k, stdout);
            fflush(stdout);
            if (rlen + k + 1 > rcap) { char *nr = realloc(reply, rcap *= 2); if (!nr) break; reply = nr; }
            memcpy(reply + rlen, piece, k);
            rlen += k;
            n_gen++;
            int32_t next = t;
            hx_status st = n_gen < n_reply ? cli_decode_next(c, gc, smp, greedy, false, t, n_cached, logits, V, &next, &e)
                                           : cli_forward(c, gc, &t, 1, n_cached, logits, false, &e); /* last: into the cache only */
            if (st) { fprintf(stderr, "\nhelix-bg chat: %s\n", e.msg); break; }
            cache_ids[n_cached++] = t;
            t = next;
        }
        double t_gen = hx_now_s() - t0;
        putchar('\n');
        fprintf(stderr, "[prompt %d new of %d tokens, %.1f tok/s | reply %d tokens, %.1f tok/s]\n", (int)n_ids - keep,
                (int)n_ids, t_prompt > 0 ? ((int)n_ids - keep) / t_prompt : 0.0, n_gen, t_gen > 0 ? n_gen / t_gen : 0.0);
        if (reply) {
            reply[rlen] = 0;
            push(&h, "assistant", reply);
            free(reply);
        }
    }
done:
    clear(&h, 0);
    free(h.m);
    free(line);
    free(cache_ids);
    free(logits);
    hx_sampler_free(smp);
    hx_cpu_ctx_free(c);
#ifdef HX_HAVE_CUDA
    hx_cuda_ctx_free(gc);
#endif
    hx_tok_free(tok);
    hx_model_free(m);
    return rc;
}
