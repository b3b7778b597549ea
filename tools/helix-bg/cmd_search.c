/* cmd_search.c — helix-bg search KB-DIR "query": ranked entries of a
 * knowledge base, semantic (the KB's embedder) fused with BM25 (kb/search.h).
 *
 *   helix-bg search KB-DIR QUERY [-k 10] [--topic T] [--json]
 *                   [--embed-model M] [--semantic | --lexical] [--max-embed N] [-t N]
 *
 * Prints rank, score, topic, title, id and a snippet with the query's words
 * highlighted (bold, on a terminal). --json prints one object:
 * {"query", "hits": [{"id", "topic", "title", "score", "cosine", "bm25",
 *  "snippet"}], "entries", "not_indexed", "embedded_now", "seconds"}. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "helix_kb.h"

int cmd_search(int argc, char **argv) {
    const char *dir = NULL, *query = NULL, *topic = NULL, *model = NULL;
    int k = 10, max_embed = 10000, threads = 0;
    bool json = false, sem = false, lex = false;
    const cli_opt opts[] = {
        {CLI_POS, "KB-DIR", &dir, NULL, "the knowledge base (a directory holding data.log)", 0, 0, NULL},
        {CLI_POS, "QUERY", &query, NULL, "what to look for", 0, 0, NULL},
        {CLI_INT, "-k", &k, "N", "hits to show", 1, 100000, NULL},
        {CLI_STR, "--topic", &topic, "T", "only entries of topic T (case-insensitive)", 0, 0, NULL},
        {CLI_BOOL, "--json", &json, NULL, "one JSON object on stdout", 0, 0, NULL},
        {CLI_STR, "--embed-model", &model, "M", "the BERT model the KB was embedded with (default: built-in lexical-384)",
         0, 0, NULL},
        {CLI_BOOL, "--semantic", &sem, NULL, "cosine ranking alone", 0, 0, NULL},
        {CLI_BOOL, "--lexical", &lex, NULL, "BM25 ranking alone", 0, 0, NULL},
        {CLI_INT, "--max-embed", &max_embed, "N", "embed at most N entries missing from the cache (-1: all)", -1,
         1 << 30, NULL},
        {CLI_INT, "-t", &threads, "N", "threads for a BERT embedder (0: all)", 0, 4096, NULL},
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    int pr = cli_parse("search", "search KB-DIR QUERY [options]",
                       "Ranks the live entries of the knowledge base in KB-DIR against QUERY: cosine similarity of\n"
                       "embeddings (the KB's own embedder) fused with BM25 by reciprocal rank, so both paraphrases and\n"
                       "exact identifiers (error codes, hosts) are found. Entries appended since the last pass are\n"
                       "embedded on the fly.\n",
                       opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!dir || !query) return cli_usage_error("search", "KB-DIR and QUERY are required");
    if (sem && lex) return cli_usage_error("search", "--semantic and --lexical exclude each other");
    if (!*query) return cli_usage_error("search", "the query is empty");

    hx_error e = {0};
    kb_embedder *em = NULL;
    if (model) {
        if (kb_neural_new(model, (int)threads, &em, &e)) { fprintf(stderr, "helix-bg search: %s\n", e.msg); return 1; }
    } else if (!(em = kb_lexical_new())) {
        fprintf(stderr, "helix-bg search: out of memory\n");
        return 1;
    }
    double t0 = cli_now();
    kb_index ix;
    if (kb_index_open(dir, em, max_embed, &ix, &e)) {
        fprintf(stderr, "helix-bg search: %s\n", e.msg);
        em->free(em);
        return 1;
    }
    double t1 = cli_now();
    kb_search_opts so = {.k = (int)k, .topic = topic, .semantic_only = sem, .lexical_only = lex};
    kb_hit *hits = malloc(sizeof *hits * (size_t)k);
    int nh = 0;
    int rc = 0;
    if (!hits) { fprintf(stderr, "helix-bg search: out of memory\n"); rc = 1; goto out; }
    if (kb_search(&ix, em, query, &so, hits, &nh, &e)) { fprintf(stderr, "helix-bg search: %s\n", e.msg); rc = 1; goto out; }
    double t2 = cli_now();
    char words[32][64];
    int nw = kb_query_words(query, words, 32);
    bool hl = !json && isatty(STDOUT_FILENO);
    if (json) {
        cJSON *root = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(root, "hits");
        cJSON_AddStringToObject(root, "query", query);
        for (int r = 0; r < nh; r++) {
            const kb_entry *en = &ix.log.e[hits[r].entry];
            cJSON *h = cJSON_CreateObject();
            cJSON_AddNumberToObject(h, "id", (double)en->offset);
            cJSON_AddStringToObject(h, "topic", en->topic ? en->topic : "");
            cJSON_AddStringToObject(h, "title", en->title ? en->title : "");
            cJSON_AddNumberToObject(h, "score", hits[r].score);
            if (hits[r].cosine > -1.5f) cJSON_AddNumberToObject(h, "cosine", hits[r].cosine);
            else cJSON_AddNullToObject(h, "cosine");
            cJSON_AddNumberToObject(h, "bm25", hits[r].bm25);
            char *sn = kb_snippet(en->text ? en->text : "", words, nw, 200, NULL, NULL);
            cJSON_AddStringToObject(h, "snippet", sn ? sn : "");
            free(sn);
            cJSON_AddItemToArray(arr, h);
        }
        cJSON_AddNumberToObject(root, "entries", (double)ix.n);
        cJSON_AddNumberToObject(root, "not_indexed", (double)ix.n_unindexed);
        cJSON_AddNumberToObject(root, "embedded_now", (double)ix.n_embedded);
        cJSON_AddNumberToObject(root, "open_seconds", t1 - t0);
        cJSON_AddNumberToObject(root, "query_seconds", t2 - t1);
        char *s = cJSON_PrintUnformatted(root);
        if (s) printf("%s\n", s);
        free(s);
        cJSON_Delete(root);
    } else {
        if (nh == 0) printf("no entry matches \"%s\"%s%s\n", query, topic ? " in topic " : "", topic ? topic : "");
        for (int r = 0; r < nh; r++) {
            const kb_entry *en = &ix.log.e[hits[r].entry];
            printf("%2d. %s%s%s  [%s]  @%llu\n", r + 1, hl ? "\033[1m" : "", en->title && *en->title ? en->title : "(untitled)",
                   hl ? "\033[0m" : "", en->topic ? en->topic : "", (unsigned long long)en->offset);
            char *sn = kb_snippet(en->text ? en->text : "", words, nw, 200, hl ? "\033[1m" : NULL, hl ? "\033[0m" : NULL);
            if (hits[r].cosine > -1.5f) printf("    score %.4f  cosine %.3f  bm25 %.2f\n", hits[r].score, hits[r].cosine, hits[r].bm25);
            else printf("    score %.4f  (not embedded yet)  bm25 %.2f\n", hits[r].score, hits[r].bm25);
            printf("    %s\n", sn ? sn : "");
            free(sn);
        }
        fprintf(stderr, "%zu entries searched with %s in %.1f ms (index opened in %.2f s%s)", ix.n, em->name,
                (t2 - t1) * 1e3, t1 - t0, ix.n_embedded ? ", new entries embedded" : "");
        if (ix.n_unindexed) fprintf(stderr, "; %zu entries not indexed yet (run a pass, or raise --max-embed)", ix.n_unindexed);
        fprintf(stderr, "\n");
    }
out:
    free(hits);
    kb_index_free(&ix);
    em->free(em);
    return rc;
}
