/* cmd_ask.c — helix-bg ask KB-DIR "question" --llm-model M: retrieve the
 * best entries (kb/search.h), put them in the prompt within a token budget
 * (kb/ask.h), stream the model's answer, then list the entries it cites.
 *
 *   helix-bg ask KB-DIR QUESTION --llm-model M [-k 8] [--topic T] [--embed-model E]
 *                [--device auto|cpu|cuda] [-c 4096] [-n 256] [-t N] [--json]
 *
 * --json prints {"question", "answer", "retrieved": [{"ref", "id", "title",
 * "topic", "score"}], "cited": [refs], "bad_citations", "timings"} instead. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "helix_kb.h"

static int count_tokens(const char *text, void *user) {
    int n = 0;
    hx_status st = hx_tokenize((const hx_model *)user, text, -1, false, false, NULL, 0, &n, NULL);
    return st == HX_OK || st == HX_ERR_RANGE ? n : -1;
}

static bool stream_out(const char *text, size_t len, void *user) {
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}

int cmd_ask(int argc, char **argv) {
    const char *dir = NULL, *question = NULL, *topic = NULL, *embed_model = NULL, *llm = NULL;
    int k = 8, n_ctx = 4096, n_predict = 256, threads = 0, device = 0;
    bool json = false;
    static const char *const devices[] = {"auto", "cpu", "cuda", NULL};
    const cli_opt opts[] = {
        {CLI_POS, "KB-DIR", &dir, NULL, "the knowledge base (a directory holding data.log)", 0, 0, NULL},
        {CLI_POS, "QUESTION", &question, NULL, "the question", 0, 0, NULL},
        {CLI_STR, "-m|--llm-model", &llm, "M", "decoder model (.gguf or Hugging Face folder), required", 0, 0, NULL},
        {CLI_INT, "-k", &k, "N", "entries retrieved", 1, 100, NULL},
        {CLI_STR, "--topic", &topic, "T", "only entries of topic T", 0, 0, NULL},
        {CLI_STR, "--embed-model", &embed_model, "E", "the BERT model the KB was embedded with (default: lexical-384)",
         0, 0, NULL},
        {CLI_CHOICE, "--device", &device, "D", "where the model runs", 0, 0, devices},
        {CLI_INT, "-c", &n_ctx, "N", "context positions", 256, 1 << 20, NULL},
        {CLI_INT, "-n", &n_predict, "N", "most answer tokens", 1, 1 << 20, NULL},
        {CLI_INT, "-t", &threads, "N", "CPU threads (0: all)", 0, 4096, NULL},
        {CLI_BOOL, "--json", &json, NULL, "one JSON object instead of streamed text", 0, 0, NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int pr = cli_parse("ask", "ask KB-DIR QUESTION --llm-model MODEL [options]",
                       "Answers QUESTION from the knowledge base in KB-DIR: the best entries (semantic + BM25 search)\n"
                       "go into the prompt, numbered; the model answers citing them as [n] and is told to say it does\n"
                       "not know when they do not hold the answer. The answer streams; the cited entries follow it.\n",
                       opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!dir || !question) return cli_usage_error("ask", "KB-DIR and QUESTION are required");
    if (!llm) return cli_usage_error("ask", "--llm-model MODEL is required (a decoder .gguf or Hugging Face folder)");
    hx_device dev = device == 1 ? HX_DEVICE_CPU : device == 2 ? HX_DEVICE_CUDA : HX_DEVICE_AUTO;

    hx_error e = {0};
    int rc = 1;
    kb_embedder *em = NULL;
    kb_index ix = {0};
    hx_model *model = NULL;
    hx_context *ctx = NULL;
    kb_hit *hits = NULL;
    const kb_entry **ents = NULL;
    kb_ask_ctx ac = {0};
    char *msg = NULL, *prompt = NULL;
    hx_generate_result res = {0};
    if (embed_model ? kb_neural_new(embed_model, (int)threads, &em, &e) != HX_OK : !(em = kb_lexical_new())) {
        fprintf(stderr, "helix-bg ask: %s\n", embed_model ? e.msg : "out of memory");
        return 1;
    }
    if (kb_index_open(dir, em, 10000, &ix, &e)) { fprintf(stderr, "helix-bg ask: %s\n", e.msg); goto out; }
    kb_search_opts so = {.k = (int)k, .topic = topic};
    hits = malloc(sizeof *hits * (size_t)k);
    ents = malloc(sizeof *ents * (size_t)k);
    int nh = 0;
    if (!hits || !ents) { fprintf(stderr, "helix-bg ask: out of memory\n"); goto out; }
    if (kb_search(&ix, em, question, &so, hits, &nh, &e)) { fprintf(stderr, "helix-bg ask: %s\n", e.msg); goto out; }
    for (int i = 0; i < nh; i++) ents[i] = &ix.log.e[hits[i].entry];

    hx_model_params mp = hx_model_default_params();
    mp.device = dev;
    if (hx_model_open(llm, &mp, &model, &e)) { fprintf(stderr, "helix-bg ask: %s\n", e.msg); goto out; }
    hx_context_params cp = hx_context_default_params();
    cp.n_ctx = (int)n_ctx;
    cp.n_threads = (int)threads;
    if (hx_context_new(model, &cp, &ctx, &e)) { fprintf(stderr, "helix-bg ask: %s\n", e.msg); goto out; }
    /* the entries get what the context leaves after the answer and ~200 tokens of instructions */
    int budget = (int)n_ctx - (int)n_predict - 200 - count_tokens(question, model);
    if (budget < 64) { fprintf(stderr, "helix-bg ask: -c %d leaves no room for entries; raise -c or lower -n\n", n_ctx); goto out; }
    if (kb_ask_context(ents, nh, budget, count_tokens, model, &ac, &e)) { fprintf(stderr, "helix-bg ask: %s\n", e.msg); goto out; }
    msg = kb_ask_message(&ac, question);
    hx_chat_message m[2] = {{"system", kb_ask_system()}, {"user", msg}};
    if (!msg || hx_chat_apply(model, m, 2, true, &prompt, &e)) { fprintf(stderr, "helix-bg ask: %s\n", msg ? e.msg : "out of memory"); goto out; }
    hx_generate_params gp = hx_generate_default_params();
    gp.prompt = prompt;
    gp.max_tokens = (int)n_predict;
    gp.on_text = json ? NULL : stream_out;
    if (hx_generate(ctx, &gp, &res, &e)) { fprintf(stderr, "\nhelix-bg ask: %s\n", e.msg); goto out; }
    bool cited[100];
    int bad = 0, nc = kb_ask_citations(res.text, ac.n_used, cited, &bad);
    if (json) {
        cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "retrieved");
        cJSON_AddStringToObject(root, "question", question);
        cJSON_AddStringToObject(root, "answer", res.text);
        cJSON *cj = cJSON_AddArrayToObject(root, "cited");
        for (int i = 0; i < ac.n_used; i++) {
            cJSON *h = cJSON_CreateObject();
            cJSON_AddNumberToObject(h, "ref", i + 1);
            cJSON_AddNumberToObject(h, "id", (double)ents[i]->offset);
            cJSON_AddStringToObject(h, "title", ents[i]->title ? ents[i]->title : "");
            cJSON_AddStringToObject(h, "topic", ents[i]->topic ? ents[i]->topic : "");
            cJSON_AddNumberToObject(h, "score", hits[i].score);
            cJSON_AddItemToArray(arr, h);
            if (cited[i]) cJSON_AddItemToArray(cj, cJSON_CreateNumber(i + 1));
        }
        cJSON_AddNumberToObject(root, "bad_citations", bad);
        cJSON *t = cJSON_AddObjectToObject(root, "timings");
        cJSON_AddNumberToObject(t, "prompt_tokens", res.metrics.prompt_tokens);
        cJSON_AddNumberToObject(t, "prefill_tok_per_s", res.metrics.prefill_tok_per_s);
        cJSON_AddNumberToObject(t, "gen_tokens", res.metrics.gen_tokens);
        cJSON_AddNumberToObject(t, "decode_tok_per_s", res.metrics.decode_tok_per_s);
        char *s = cJSON_PrintUnformatted(root);
        if (s) printf("%s\n", s);
        free(s);
        cJSON_Delete(root);
    } else {
        printf("\n\n");
        if (nc == 0) printf("(no entry cited)\n");
        for (int i = 0; i < ac.n_used; i++)
            if (cited[i])
                printf("[%d] %s  [%s]  @%llu\n", i + 1, ents[i]->title ? ents[i]->title : "(untitled)",
                       ents[i]->topic ? ents[i]->topic : "", (unsigned long long)ents[i]->offset);
        if (bad) printf("(%d citation%s named no retrieved entry)\n", bad, bad == 1 ? "" : "s");
        fflush(stdout);
        fprintf(stderr, "%d entries retrieved, %d in the prompt%s; %d prompt tokens at %.1f tok/s, %d answer tokens at %.1f tok/s\n",
                nh, ac.n_used, ac.n_truncated ? " (the last one cut)" : "", res.metrics.prompt_tokens,
                res.metrics.prefill_tok_per_s, res.metrics.gen_tokens, res.metrics.decode_tok_per_s);
    }
    rc = 0;
out:
    hx_generate_result_free(&res);
    free(prompt);
    free(msg);
    kb_ask_ctx_free(&ac);
    free(ents);
    free(hits);
    hx_context_free(ctx);
    hx_model_free(model);
    kb_index_free(&ix);
    if (em) em->free(em);
    return rc;
}
