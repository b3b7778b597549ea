/* kb_cli.h — options shared by one-shot and daemon. */
#ifndef HX_KB_CLI_H
#define HX_KB_CLI_H

#include "helix_kb.h"

typedef struct kb_cli {
    const char *dir;
    const char *embed_model;   /* NULL: built-in lexical embedder */
    const char *embed_type;    /* f32, int8, auto (NULL: kb_neural_new's, f32) */
    const char *embed_device;  /* cpu, cuda, cuda:N, auto (NULL: kb_neural_new's, cpu) */
    int threads;
    float dup, link_low, link_high, topic; /* < 0: embedder's default */
    int max_dups, max_links, max_overlaps;
    double interval;           /* daemon: seconds between polls */
    const char *pidfile;
    bool once, quiet, full;   /* full: ignore insights.state */
    const char *llm_model;     /* NULL: no LLM (centroid classification) */
    const char *llm_device;    /* auto, cpu, cuda */
    float misfiled;            /* probability above which a differing prediction is reported */
    int summarize_min_words;
    bool llm_alone, llm_label_examples; /* kb_think_opts' measuring switches */
    bool no_think;             /* skip classification / patterns / LLM stage */
    const char *allpairs_device; /* auto, cpu, cuda: where entry pairs are compared */
} kb_cli;

/* Parses argv[1..); returns 0 on success, else the exit code (2). */
int kb_cli_parse(kb_cli *c, int argc, char **argv, const char *cmd, bool daemon);
/* Opens the embedder the options ask for. */
kb_embedder *kb_cli_embedder(const kb_cli *c, const char *cmd);
kb_opts kb_cli_opts(const kb_cli *c, const kb_embedder *em);
/* The LLM the options ask for (NULL and *failed false when none; NULL and
 * *failed true after printing why it could not be opened). */
kb_llm *kb_cli_llm(const kb_cli *c, const char *cmd, bool *failed);
kb_think_opts kb_cli_think_opts(const kb_cli *c, kb_llm *llm);
void kb_cli_usage(FILE *f, const char *cmd, bool daemon);

#endif
