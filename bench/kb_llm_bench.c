/* kb_llm_bench.c — the KB daemon's LLM stages at scale, through the same calls
 * the daemon makes (helix_kb.h: kb_llm_prompt_classify + kb_llm_classify in
 * chunks of 64, kb_llm_prompt_summary + kb_llm_generate): N synthetic notes
 * of 20-200 words under 12 topics.
 *
 *   classification: entries/s and prompt tokens/s (prefill only, one forward
 *                   per chunk, each label's probability); prompt tokens are
 *                   counted per note, the head all prompts share included
 *                   (hx_classify computes it once and copies it), so the
 *                   rate is over tokens classified, not tokens computed
 *   summaries:      aggregate generated tokens/s of greedy summaries (at most
 *                   40 tokens) of the first M notes (batched multi-sequence
 *                   decode); tokens counted by retokenizing the answers
 *
 * Compare the prompt tokens/s with `helix-bg bench -p 512 -n 0` on the same
 * model and device (the goal: classification at >= 60% of pp512).
 * Each note is drawn mostly from its topic's words (note i is topic i % 12),
 * so a real model's accuracy against that label is printed too.
 *
 * usage: kb_llm_bench MODEL [--n 10000] [--summaries 1000] [--device cpu|cuda]
 *        [--n-seq 16] [-t THREADS] [--max-tokens 40] [--label NAME]
 *        [--letter-labels] [--jsonl] [--dump FILE [--dump-only]]
 * --letter-labels: topics named A..L (one token each: no forked sequences).
 * --dump FILE: the prompts as JSON lines, before any timing, for a peer to be
 *   sent the same text (bench/kb_llm_peer.py): a first line {"labels": [...],
 *   "max_tokens": N}, then one {"i", "topic", "classify", "summary"?} per note;
 *   with --dump-only nothing runs after it. */
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

static const char *const LETTERS[12] = {"A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L"};
static const char *const TOPICS_WORDS[12] = {"databases", "networking", "cooking", "home repair", "reading", "travel",
                                       "finance", "gardening", "health", "music", "kubernetes", "security"};
static const char *const *TOPICS = TOPICS_WORDS;
/* Words of each topic (in TOPICS_WORDS' order), then words of any note. */
static const char *const TOPIC_WORDS[12][5] = {
    {"index", "replica", "query", "table", "vacuum"},     {"packet", "router", "dns", "latency", "timeout"},
    {"flour", "butter", "oven", "simmer", "salt"},        {"faucet", "leak", "washer", "drywall", "paint"},
    {"chapter", "novel", "author", "argument", "essay"},  {"flight", "train", "hotel", "passport", "luggage"},
    {"budget", "invoice", "savings", "tax", "pension"},   {"tomato", "soil", "compost", "seedling", "mulch"},
    {"sleep", "running", "knee", "doctor", "diet"},       {"guitar", "chord", "tempo", "melody", "drums"},
    {"pod", "node", "deployment", "cluster", "helm"},     {"password", "key", "audit", "patch", "certificate"}};
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

/* n notes: texts of 20..200 words, half of them drawn from topic i % 12's
 * words and half from all words; titles of their first 5 words. */
static void make_notes(int n, char ***titles, char ***texts) {
    *titles = calloc((size_t)n, sizeof **titles);
    *texts = calloc((size_t)n, sizeof **texts);
    uint64_t s = 0x9E3779B97F4A7C15ull;
    const int nw = (int)(sizeof WORDS / sizeof *WORDS);
    for (int i = 0; i < n; i++) {
        int words = 20 + (int)(rng(&s) % 181);
        char *t = malloc((size_t)words * 13 + 1), *p = t;
        for (int w = 0; w < words; w++) {
            uint64_t r = rng(&s);
            const char *word = r & 1 ? TOPIC_WORDS[i % 12][(r >> 1) % 5] : WORDS[(r >> 1) % (uint64_t)nw];
            p += sprintf(p, "%s%s", w ? " " : "", word);
        }
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

/* Tokens every prompt starts with (hx_classify computes such a head once per
 * batch of prompts and copies it into the other sequences). */
static int shared_head(const hx_model *m, char *const *p, int n) {
    int32_t *first = NULL;
    int head = 0;
    for (int i = 0; i < n; i++) {
        int k = count_tokens(m, p[i]);
        int32_t *t = malloc(sizeof *t * (size_t)(k > 0 ? k : 1));
        hx_error e;
        if (!t || hx_tokenize(m, p[i], -1, true, true, t, k, &k, &e)) { free(t); head = 0; break; }
        if (i == 0) { first = t; head = k; continue; }
        int c = 0;
        while (c < head && c < k && t[c] == first[c]) c++;
        head = c;
        free(t);
    }
    free(first);
    return head;
}

/* s as a JSON string on f. */
static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static int usage(const char *argv0) {
    fprintf(stderr, "usage: %s MODEL [--n 10000] [--summaries 1000] [--device cpu|cuda] [--n-seq 16] [-t THREADS] "
                    "[--max-tokens 40] [--label NAME] [--letter-labels] [--jsonl] [--dump FILE [--dump-only]]\n", argv0);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2 || argv[1][0] == '-') return usage(argv[0]);
    int n = 10000, n_sum = 1000, n_seq = 16, jsonl = 0, threads = 0, max_tokens = 40, dump_only = 0;
    const char *label = argv[1], *dev = "auto", *dump = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        bool val = i + 1 < argc;
        if (!strcmp(a, "--n") && val) n = atoi(argv[++i]);
        else if (!strcmp(a, "--summaries") && val) n_sum = atoi(argv[++i]);
        else if (!strcmp(a, "--device") && val) dev = argv[++i];
        else if (!strcmp(a, "--n-seq") && val) n_seq = atoi(argv[++i]);
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && val) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--max-tokens") && val) max_tokens = atoi(argv[++i]);
        else if (!strcmp(a, "--label") && val) label = argv[++i];
        else if (!strcmp(a, "--dump") && val) dump = argv[++i];
        else if (!strcmp(a, "--jsonl")) jsonl = 1;
        else if (!strcmp(a, "--dump-only")) dump_only = 1;
        else if (!strcmp(a, "--letter-labels")) TOPICS = LETTERS; /* single-token labels: no forks */
        else { fprintf(stderr, "kb_llm_bench: unknown argument '%s' (or it lacks its value)\n", a); return usage(argv[0]); }
    }
    if (n < 1 || n_sum < 0 || n_sum > n || n_seq < 1 || threads < 0 || max_tokens < 1) {
        fprintf(stderr, "kb_llm_bench: bad counts (--n >= 1, 0 <= --summaries <= --n, --n-seq >= 1, -t >= 0, "
                        "--max-tokens >= 1)\n");
        return 2;
    }
    if (strcmp(dev, "auto") && strcmp(dev, "cpu") && strcmp(dev, "cuda")) {
        fprintf(stderr, "kb_llm_bench: --device auto, cpu or cuda, not '%s'\n", dev);
        return 2;
    }
    kb_llm_opts o = kb_llm_defaults();
    o.model = argv[1];
    o.n_seq = n_seq;
    o.n_threads = threads;
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
    fprintf(stderr, "kb_llm_bench: %d prompts built and counted in %.2f s\n", n, t_build);
    int head = shared_head(m, prompts, n);
    char **sp = calloc((size_t)n_sum + 1, sizeof *sp);
    for (int i = 0; i < n_sum; i++)
        if (!(sp[i] = kb_llm_prompt_summary(l, titles[i], texts[i]))) {
            fprintf(stderr, "kb_llm_bench: summary prompt %d: out of memory\n", i);
            return 1;
        }
    if (dump) {
        FILE *f = fopen(dump, "w");
        if (!f) { fprintf(stderr, "kb_llm_bench: --dump %s: cannot write\n", dump); return 1; }
        fputs("{\"labels\": [", f);
        for (int j = 0; j < 12; j++) { if (j) fputs(", ", f); json_str(f, TOPICS[j]); }
        fprintf(f, "], \"max_tokens\": %d}\n", max_tokens);
        for (int i = 0; i < n; i++) {
            fprintf(f, "{\"i\": %d, \"topic\": %d, \"classify\": ", i, i % 12);
            json_str(f, prompts[i]);
            if (i < n_sum) { fputs(", \"summary\": ", f); json_str(f, sp[i]); }
            fputs("}\n", f);
        }
        if (fclose(f)) { fprintf(stderr, "kb_llm_bench: --dump %s: write failed\n", dump); return 1; }
    }
    if (dump_only) {
        if (!dump) { fprintf(stderr, "kb_llm_bench: --dump-only without --dump FILE\n"); return 2; }
        return 0;
    }
    float *probs = malloc(sizeof(float) * 64 * 12);
    /* warm-up: one chunk, not timed (first-call allocations, graphs) */
    if (kb_llm_classify(l, (const char *const *)prompts, n < 64 ? n : 64, TOPICS, 12, probs, &e)) {
        fprintf(stderr, "kb_llm_bench: classify: %s\n", e.msg);
        return 1;
    }
    fprintf(stderr, "kb_llm_bench: warm-up chunk done at %.2f s\n", now_s() - t0);
    int right = 0;
    t0 = now_s();
    for (int b0 = 0; b0 < n; b0 += 64) {
        int nb = n - b0 < 64 ? n - b0 : 64;
        if (kb_llm_classify(l, (const char *const *)prompts + b0, nb, TOPICS, 12, probs, &e)) {
            fprintf(stderr, "kb_llm_bench: classify: %s\n", e.msg);
            return 1;
        }
        for (int k = 0; k < nb; k++) {
            int best = 0;
            for (int j = 1; j < 12; j++) if (probs[k * 12 + j] > probs[k * 12 + best]) best = j;
            right += best == (b0 + k) % 12;
        }
        if ((b0 / 64) % 16 == 15) fprintf(stderr, "kb_llm_bench: %d classified, %.2f s\n", b0 + nb, now_s() - t0);
    }
    double t_cls = now_s() - t0;
    printf("%s (%s): classification of %d notes x 12 topics: %.2f s, %.1f entries/s, %lld prompt tokens "
           "(%.0f per note, the first %d shared by all), %.0f prompt tok/s, accuracy %.3f; building the prompts "
           "%.2f s\n", label, kb_llm_device(l), n, t_cls, n / t_cls, ptok, (double)ptok / n, head, ptok / t_cls,
           (double)right / n, t_build);
    if (jsonl)
        printf("{\"engine\":\"helix\",\"bench\":\"kb-classify\",\"model\":\"%s\",\"device\":\"%s\",\"entries\":%d,"
               "\"labels\":12,\"n_seq\":%d,\"seconds\":%.3f,\"entries_per_s\":%.2f,\"prompt_tokens\":%lld,"
               "\"shared_head_tokens\":%d,\"prompt_tokens_per_s\":%.1f,\"accuracy\":%.4f}\n",
               label, kb_llm_device(l), n, n_seq, t_cls, n / t_cls, ptok, head, ptok / t_cls, (double)right / n);
    fflush(stdout);

    if (n_sum > 0) {
        char **out = calloc((size_t)n_sum, sizeof *out);
        long long g0 = kb_llm_tokens_generated(l);
        t0 = now_s();
        /* one_line false: a random-weight model's first token is often a newline, and
         * a cut answer would measure nothing; a real model's summary is one line anyway */
        if (kb_llm_generate(l, (const char *const *)sp, n_sum, max_tokens, false, out, NULL, NULL, &e)) {
            fprintf(stderr, "kb_llm_bench: summaries: %s\n", e.msg);
            return 1;
        }
        double t_sum = now_s() - t0;
        long long gtok = kb_llm_tokens_generated(l) - g0, stok = 0;
        for (int i = 0; i < n_sum; i++) {
            stok += count_tokens(m, sp[i]);
            free(out[i]);
        }
        printf("%s (%s): summaries of %d notes (at most %d tokens): %.2f s, %lld tokens generated (%.1f tok/s), "
               "%lld prompt tokens (%.0f tok/s with them)\n",
               label, kb_llm_device(l), n_sum, max_tokens, t_sum, gtok, gtok / t_sum, stok, (gtok + stok) / t_sum);
        if (jsonl)
            printf("{\"engine\":\"helix\",\"bench\":\"kb-summaries\",\"model\":\"%s\",\"device\":\"%s\",\"entries\":%d,"
                   "\"n_seq\":%d,\"max_tokens\":%d,\"seconds\":%.3f,\"entries_per_s\":%.2f,\"generated_tokens\":%lld,"
                   "\"generated_tokens_per_s\":%.1f,\"prompt_tokens\":%lld}\n",
                   label, kb_llm_device(l), n_sum, n_seq, max_tokens, t_sum, n_sum / t_sum, gtok, gtok / t_sum, stok);
        free(out);
    }
    for (int i = 0; i < n_sum; i++) free(sp[i]);
    for (int i = 0; i < n; i++) { free(prompts[i]); free(titles[i]); free(texts[i]); }
    free(sp); free(prompts); free(titles); free(texts); free(probs);
    hx_model_free(m);
    kb_llm_free(l);
    return 0;
}
