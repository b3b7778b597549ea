/* kb_llm_bench.c — the KB daemon's LLM stages at scale, through the same calls
 * the daemon makes (helix_kb.h: kb_llm_prompt_classify + kb_llm_classify in
 * chunks of 64, kb_llm_prompt_summary + kb_llm_generate): N synthetic notes
 * of 20-200 words under 12 topics.
 *
 *   classification: entries/s and prompt tokens/s (prefill only, one forward
 *                   per chunk, each label's probability)
 *   summaries:      aggregate generated tokens/s of greedy summaries (at most
 *                   40 tokens) of the first M notes (batched multi-sequence
 *                   decode); tokens counted by retokenizing the answers
 *
 * Compare the prompt tokens/s with `helix-bg bench -p 512 -n 0` on the same
 * model and device (the goal: classification at >= 60% of pp512).
 *
 * usage: kb_llm_bench MODEL [--n 10000] [--summaries 1000] [--device cpu|cuda]
 *        [--n-seq 16] [--label NAME] [--jsonl] */
#include "helix.h"
#include "helix_kb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *const TOPICS[12] = {"databases", "networking", "cooking", "home repair", "reading", "travel",
                                       "finance", "gardening", "health", "music", "kubernetes", "security"};
static const char *const WORDS[] = {
    "the", "a", "of", "to", "and", "in", "on", "after", "before", "while", "because", "then", "index", "replica",
    "query", "table", "packet", "router", "certificate", "dns", "latency", "timeout", "flour", "butter", "oven",
    "simmer", "salt", "faucet", "leak", "washer", "drywall", "paint", "chapter", "novel", "author", "argument",
    "flight", "train", "hotel", "passport", "budget", "invoice", "savings", "tax", "tomato", "soil", "compost",
    "seedling", "sleep", "running", "knee", "doctor", "guitar", "chord", "tempo", "pod", "node", "deployment",
    "cluster", "password", "key", "audit", "patch", "fixed", "slow", "broke", "worked", "again", "every", "week",
    "morning", "cost", "hours", "minutes", "twice", "better", "worse", "new", "old", "the", "of", "and", "a"};

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13; *s ^= *s >> 7; *s ^= *s << 17;
    return *s;
}

/* n notes: texts of 20..200 words, titles of their first 5 words. */
static void make_notes(int n, char ***titles, char ***texts) {
    *titles = calloc((size_t)n, sizeof **titles);
    *texts = calloc((size_t)n, sizeof **texts);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    const int nw = (int)(sizeof WORDS / sizeof *WORDS);
    for (int i = 0; i < n; i++) {
        int words = 20 + (int)(rng(&s) % 181);
        char *t = malloc((size_t)words * 13 + 1), *p = t;
        for (int w = 0; w < words; w++) p += sprintf(p, "%s%s", w ? " " : "", WORDS[rng(&s) % (uint64_t)nw]);
        (*texts)[i] = t;
        int tl = 0, sp = 0;
        while (t[tl] && sp < 5) sp += t[tl++] == ' ';
        (*titles)[i] = strndup(t, (size_t)(t[tl] ? tl - 1 : tl));
    }
}

static int count_tokens(const hx_model *m, const char *p) {
    int need = 0;
    hx_error e;
    hx_status st = hx_tokenize(m, p, -1, true, true, NULL, 0, &need, &e);
    return st == HX_OK || st == HX_ERR_RANGE ? need : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [--n 10000] [--summaries 1000] [--device cpu|cuda] [--n-seq 16] "
                        "[--label NAME] [--jsonl]\n", argv[0]);
        return 2;
    }
    int n = 10000, n_sum = 1000, n_seq = 16, jsonl = 0;
    const char *label = argv[1], *dev = "auto";
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--n") && i + 1 < argc) n = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--summaries") && i + 1 < argc) n_sum = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) dev = argv[++i];
        else if (!strcmp(argv[i], "--n-seq") && i + 1 < argc) n_seq = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--label") && i + 1 < argc) label = argv[++i];
        else if (!strcmp(argv[i], "--jsonl")) jsonl = 1;
        else { fprintf(stderr, "kb_llm_bench: unknown argument '%s'\n", argv[i]); return 2; }
    }
    if (n < 1 || n_sum < 0 || n_sum > n || n_seq < 1) { fprintf(stderr, "kb_llm_bench: bad counts\n"); return 2; }
    kb_llm_opts o = kb_llm_defaults();
    o.model = argv[1];
    o.n_seq = n_seq;
    o.device = !strcmp(dev, "cpu") ? HX_DEVICE_CPU : !strcmp(dev, "cuda") ? HX_DEVICE_CUDA : HX_DEVICE_AUTO;
    kb_llm *l = NULL;
    hx_error e = {0};
    if (kb_llm_open(&o, &l, &e)) { fprintf(stderr, "kb_llm_bench: %s: %s\n", argv[1], e.msg); return 1; }
    /* a second handle on the model only to count tokens */
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CPU;
    hx_model *m = NULL;
    if (hx_model_open(argv[1], &mp, &m, &e)) { fprintf(stderr, "kb_llm_bench: %s\n", e.msg); return 1; }
    char **titles, **texts;
    make_notes(n, &titles, &texts);

    /* classification: prompts built as the daemon builds them, chunks of 64 */
    double t0 = now_s();
    char **prompts = calloc((size_t)n, sizeof *prompts);
    long long ptok = 0;
    for (int i = 0; i < n; i++) {
        prompts[i] = kb_llm_prompt_classify(l, titles[i], texts[i], TOPICS, 12);
        if (!prompts[i]) { fprintf(stderr, "kb_llm_bench: prompt %d: out of memory\n", i); return 1; }
        ptok += count_tokens(m, prompts[i]);
    }
    double t_build = now_s() - t0;
    float *probs = malloc(sizeof(float) * 64 * 12);
    /* warm-up: one chunk, not timed (first-call allocations, graphs) */
    if (kb_llm_classify(l, (const char *const *)prompts, n < 64 ? n : 64, TOPICS, 12, probs, &e)) {
        fprintf(stderr, "kb_llm_bench: classify: %s\n", e.msg);
        return 1;
    }
    t0 = now_s();
    for (int b0 = 0; b0 < n; b0 += 64) {
        int nb = n - b0 < 64 ? n - b0 : 64;
        if (kb_llm_classify(l, (const char *const *)prompts + b0, nb, TOPICS, 12, probs, &e)) {
            fprintf(stderr, "kb_llm_bench: classify: %s\n", e.msg);
            return 1;
        }
    }
    double t_cls = now_s() - t0;
    printf("%s (%s): classification of %d notes x 12 topics: %.2f s, %.1f entries/s, %lld prompt tokens "
           "(%.0f per note), %.0f prompt tok/s; building the prompts %.2f s\n",
           label, kb_llm_device(l), n, t_cls, n / t_cls, ptok, (double)ptok / n, ptok / t_cls, t_build);
    if (jsonl)
        printf("{\"engine\":\"helix\",\"bench\":\"kb-classify\",\"model\":\"%s\",\"device\":\"%s\",\"entries\":%d,"
               "\"labels\":12,\"n_seq\":%d,\"seconds\":%.3f,\"entries_per_s\":%.1f,\"prompt_tokens_per_s\":%.0f}\n",
               label, kb_llm_device(l), n, n_seq, t_cls, n / t_cls, ptok / t_cls);

    if (n_sum > 0) {
        char **sp = calloc((size_t)n_sum, sizeof *sp), **out = calloc((size_t)n_sum, sizeof *out);
        for (int i = 0; i < n_sum; i++) sp[i] = kb_llm_prompt_summary(l, titles[i], texts[i]);
        t0 = now_s();
        /* one_line false: a random-weight model's first token is often a newline, and
         * a cut answer would measure nothing; a real model's summary is one line anyway */
        if (kb_llm_generate(l, (const char *const *)sp, n_sum, 40, false, out, NULL, NULL, &e)) {
            fprintf(stderr, "kb_llm_bench: summaries: %s\n", e.msg);
            return 1;
        }
        double t_sum = now_s() - t0;
        long long gtok = 0, stok = 0;
        for (int i = 0; i < n_sum; i++) {
            int k = count_tokens(m, out[i] ? out[i] : "");
            gtok += k > 1 ? k - hx_model_adds_bos(m) : 0; /* the answer's tokens, without the BOS count_tokens adds */
            stok += count_tokens(m, sp[i]);
            free(out[i]);
            free(sp[i]);
        }
        printf("%s (%s): summaries of %d notes (at most 40 tokens): %.2f s, %lld tokens out (the answers "
               "retokenized: %.0f tok/s generated), %lld prompt tokens (%.0f tok/s with them)\n",
               label, kb_llm_device(l), n_sum, t_sum, gtok, gtok / t_sum, stok, (gtok + stok) / t_sum);
        if (jsonl)
            printf("{\"engine\":\"helix\",\"bench\":\"kb-summaries\",\"model\":\"%s\",\"device\":\"%s\",\"entries\":%d,"
                   "\"n_seq\":%d,\"seconds\":%.3f,\"generated_tokens_per_s\":%.0f}\n",
                   label, kb_llm_device(l), n_sum, n_seq, t_sum, gtok / t_sum);
        free(sp);
        free(out);
    }
    for (int i = 0; i < n; i++) { free(prompts[i]); free(titles[i]); free(texts[i]); }
    free(prompts); free(titles); free(texts); free(probs);
    hx_model_free(m);
    kb_llm_free(l);
    return 0;
}
