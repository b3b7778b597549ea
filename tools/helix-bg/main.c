/* helix-bg — knowledge-base daemon and command-line front end of libhelix. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_lora.h"

int cmd_serve(int argc, char **argv);   /* cmd_serve.c */
int cmd_finetune(int argc, char **argv);        /* cmd_finetune.c */
int cmd_kb_to_dataset(int argc, char **argv);   /* cmd_finetune.c */

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"one-shot",   cmd_one_shot,   "[kb-dir]            analyze a knowledge base once, write insights.json"},
    {"daemon",     cmd_daemon,     "[kb-dir]            watch data.log and keep insights current"},
    {"search",     cmd_search,     "KB-DIR QUERY        find entries (semantic + BM25), best first"},
    {"ask",        cmd_ask,        "KB-DIR QUESTION --llm-model M   answer from the KB's entries, citing them"},
    {"embed-test", cmd_embed_test, "                    embed sample texts, print their similarity table"},
    {"embed",      cmd_embed,      "-m FILE             embed stdin lines with a BERT model"},
    {"load-model", cmd_load_model, "FILE [--json]       GGUF metadata, tensors and model config"},
    {"lora-convert", cmd_lora_convert, "PEFT-DIR -m BASE -o OUT   PEFT LoRA folder -> GGUF adapter"},
    {"lora-merge", cmd_lora_merge, "-m BASE --lora A -o OUT   base GGUF with adapters merged in"},
    {"finetune",   cmd_finetune,   "-m BASE --data F.jsonl -o OUT   train a LoRA adapter (CPU)"},
    {"kb-to-dataset", cmd_kb_to_dataset, "KB-DIR > train.jsonl   entries -> topic classification set"},
    {"synth",      cmd_synth,      "--preset P --type T -o OUT   random-weight GGUF of a real architecture"},
    {"tokenize",   cmd_tokenize,   "-m FILE -p TEXT     print token ids"},
    {"generate",   cmd_generate,   "-m FILE -p PROMPT   generate text"},
    {"chat",       cmd_chat,       "-m FILE             interactive chat"},
    {"inspect",    cmd_inspect,    "-m FILE -p TEXT     attention per head: most-attended tokens, heatmap PNG"},
    {"bench",      cmd_bench,      "-m FILE             prompt and decode throughput"},
    {"serve",      cmd_serve,      "-m FILE             OpenAI-compatible HTTP server (continuous batching)"},
    {"cpu-test",   cmd_cpu_test,   "                    memory bandwidth and matvec/matmul throughput"},
    {"gpu-test",   cmd_gpu_test,   "                    GPU bandwidth, GEMM and matvec throughput"},
};

int cli_not_built(const char *cmd, const char *issue) {
    fprintf(stderr, "helix-bg %s: not built yet in this version (tracked in issue %s)\n", cmd, issue);
    return 2;
}

static void usage(FILE *f) {
    fprintf(f, "helix-bg %s — knowledge-base intelligence daemon on libhelix\n\nusage: helix-bg COMMAND [options]\n\n", HX_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'helix-bg COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) { usage(stdout); return 0; }
    if (!strcmp(argv[1], "--version")) { printf("helix-bg %s\n", HX_VERSION); return 0; }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "helix-bg: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
