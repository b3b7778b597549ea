/* kb_cli.c — option parsing shared by one-shot and daemon. */
#include "kb_cli.h"

#include <stdlib.h>
#include <string.h>

void kb_cli_usage(FILE *f, const char *cmd, bool daemon) {
    fprintf(f, "usage: helix-bg %s [KB-DIR] [options]        (KB-DIR holds data.log; default .)\n", cmd);
    fprintf(f, "  --embed-model M   BERT .gguf or Hugging Face folder (default: built-in lexical-384)\n"
               "  --embed-type T    the BERT encoder's linear layers on the CPU: f32 (default), int8 (several\n"
               "                    times faster with AVX512-VNNI), auto (int8 where the CPU has VNNI)\n"
               "  --embed-device D  where the BERT encoder runs: cpu (default), cuda, cuda:N, auto\n"
               "  -t N              threads (default: all CPUs)\n"
               "  --dup X           near-duplicate threshold (lexical 0.247, BERT 0.69)\n"
               "  --link-low X --link-high X   cross-link band (lexical 0.234-0.247, BERT 0.53-0.69)\n"
               "  --topic X         topic-overlap threshold (lexical 0.45, MiniLM 0.60)\n"
               "  --max-dups N --max-links N   how many to keep (20, 50)\n"
               "  --max-overlaps N  topic overlaps to keep, the best (100)\n"
               "  --full            compare all pairs (default: incremental when insights.state allows)\n"
               "  --llm-model M     decoder .gguf or HF folder: classify, summarize, digest, name patterns\n"
               "                    (default: none; entries are classified by the nearest topic centroid)\n"
               "  --llm-device D    auto (default), cpu or cuda\n"
               "  --misfiled X      report entries predicted elsewhere with probability > X (0.8)\n"
               "  --summarize-min-words N   summarize entries longer than N words (60)\n"
               "  --llm-alone               (measuring) topics by the LLM alone, not combined with the centroid\n"
               "  --llm-label-examples      (measuring) the LLM sees each topic's two most central titles\n"
               "  --allpairs-device D   auto (default: cuda when built in, a GPU is usable and the pass is\n"
               "                    large), cpu or cuda: where entry pairs are compared (same insights;\n"
               "                    under --mpi each rank on GPU local rank %% GPUs)\n"
               "  --no-think        only the pass: no classification, patterns or LLM stage\n"
               "  -q, --quiet       no summary / per-pass log\n");
    if (daemon)
        fprintf(f, "  --interval S      seconds between polls of data.log (default 30)\n"
                   "  --pidfile P       write the pid here (the KB is locked: flock on KB-DIR; one-shot refuses too)\n"
                   "  --once            one pass, then exit (like one-shot, with the lock)\n"
                   "  SIGINT/SIGTERM finish the current write and exit; SIGHUP starts a pass now.\n");
}

static bool num(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

int kb_cli_parse(kb_cli *c, int argc, char **argv, const char *cmd, bool daemon) {
    *c = (kb_cli){.dir = ".", .dup = -1, .link_low = -1, .link_high = -1, .topic = -1, .max_dups = 20,
                  .max_links = 50, .max_overlaps = KB_DEFAULT_MAX_OVERLAPS, .interval = 30, .llm_device = "auto",
                  .misfiled = 0.8f, .summarize_min_words = 60, .allpairs_device = "auto"};
    bool have_dir = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { kb_cli_usage(stdout, cmd, daemon); return -1; }
        else if (!strcmp(a, "--embed-model") && v) { c->embed_model = v; i++; }
        else if (!strcmp(a, "--embed-type") && v && (!strcmp(v, "f32") || !strcmp(v, "int8") || !strcmp(v, "auto"))) {
            c->embed_type = v;
            i++;
        }
        else if (!strcmp(a, "--embed-device") && v &&
                 (!strcmp(v, "cpu") || !strcmp(v, "cuda") || !strncmp(v, "cuda:", 5) || !strcmp(v, "auto"))) {
            c->embed_device = v;
            i++;
        }
        else if (!strcmp(a, "-t") && v && num(v, 0, 512, &x)) { c->threads = (int)x; i++; }
        else if (!strcmp(a, "--dup") && v && num(v, -1, 1, &x)) { c->dup = (float)x; i++; }
        else if (!strcmp(a, "--link-low") && v && num(v, -1, 1, &x)) { c->link_low = (float)x; i++; }
        else if (!strcmp(a, "--link-high") && v && num(v, -1, 1, &x)) { c->link_high = (float)x; i++; }
        else if (!strcmp(a, "--topic") && v && num(v, -1, 1, &x)) { c->topic = (float)x; i++; }
        else if (!strcmp(a, "--max-dups") && v && num(v, 0, 100000, &x)) { c->max_dups = (int)x; i++; }
        else if (!strcmp(a, "--max-links") && v && num(v, 0, 100000, &x)) { c->max_links = (int)x; i++; }
        else if (!strcmp(a, "--max-overlaps") && v && num(v, 1, 100000, &x)) { c->max_overlaps = (int)x; i++; }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) c->quiet = true;
        else if (!strcmp(a, "--full")) c->full = true;
        else if (!strcmp(a, "--no-think")) c->no_think = true;
        else if (!strcmp(a, "--llm-model") && v) { c->llm_model = v; i++; }
        else if (!strcmp(a, "--llm-device") && v && (!strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "cuda"))) {
            c->llm_device = v;
            i++;
        }
        else if (!strcmp(a, "--allpairs-device") && v &&
                 (!strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "cuda"))) { c->allpairs_device = v; i++; }
        else if (!strcmp(a, "--misfiled") && v && num(v, 0, 1, &x)) { c->misfiled = (float)x; i++; }
        else if (!strcmp(a, "--summarize-min-words") && v && num(v, 0, 1e6, &x)) { c->summarize_min_words = (int)x; i++; }
        else if (!strcmp(a, "--llm-alone")) c->llm_alone = true;
        else if (!strcmp(a, "--llm-label-examples")) c->llm_label_examples = true;
        else if (daemon && !strcmp(a, "--interval") && v && num(v, 0.05, 86400, &x)) { c->interval = x; i++; }
        else if (daemon && !strcmp(a, "--pidfile") && v) { c->pidfile = v; i++; }
        else if (daemon && !strcmp(a, "--once")) c->once = true;
        else if (a[0] != '-' && !have_dir) { c->dir = a; have_dir = true; }
        else {
            fprintf(stderr, "helix-bg %s: bad or incomplete option '%s'\n", cmd, a);
            kb_cli_usage(stderr, cmd, daemon);
            return 2;
        }
    }
    return 0;
}

kb_embedder *kb_cli_embedder(const kb_cli *c, const char *cmd) {
    if (!c->embed_model) {
        if (c->embed_device && strcmp(c->embed_device, "cpu")) {
            fprintf(stderr, "helix-bg %s: --embed-device %s needs --embed-model (the lexical embedder runs on the CPU)\n",
                    cmd, c->embed_device);
            return NULL;
        }
        kb_embedder *em = kb_lexical_new();
        if (!em) fprintf(stderr, "helix-bg %s: out of memory\n", cmd);
        return em;
    }
    kb_embedder *em = NULL;
    hx_error e = {0};
    if (kb_neural_new(c->embed_model, c->threads, &em, &e) != HX_OK) {
        fprintf(stderr, "helix-bg %s: --embed-model: %s\n", cmd, e.msg);
        return NULL;
    }
    if (c->embed_type && kb_neural_set_type(em, c->embed_type, &e) != HX_OK) {
        fprintf(stderr, "helix-bg %s: --embed-type: %s\n", cmd, e.msg);
        em->free(em);
        return NULL;
    }
    if (c->embed_device && kb_neural_set_device(em, c->embed_device, &e) != HX_OK) {
        fprintf(stderr, "helix-bg %s: --embed-device: %s\n", cmd, e.msg);
        em->free(em);
        return NULL;
    }
    return em;
}

kb_opts kb_cli_opts(const kb_cli *c, const kb_embedder *em) {
    kb_opts o = kb_default_opts(em);
    if (c->dup >= 0) o.dup_threshold = c->dup;
    if (c->link_low >= 0) o.link_low = c->link_low;
    if (c->link_high >= 0) o.link_high = c->link_high;
    if (c->topic >= 0) o.topic_threshold = c->topic;
    o.max_dups = c->max_dups;
    o.max_links = c->max_links;
    o.max_overlaps = c->max_overlaps;
    o.full = c->full;
    o.allpairs_device = !strcmp(c->allpairs_device, "cpu")    ? HX_DEVICE_CPU
                        : !strcmp(c->allpairs_device, "cuda") ? HX_DEVICE_CUDA
                                                              : HX_DEVICE_AUTO;
    o.allpairs_log = !c->quiet;
    return o;
}

kb_llm *kb_cli_llm(const kb_cli *c, const char *cmd, bool *failed) {
    *failed = false;
    if (!c->llm_model || c->no_think) return NULL;
    kb_llm_opts o = kb_llm_defaults();
    o.model = c->llm_model;
    o.device = !strcmp(c->llm_device, "cpu") ? HX_DEVICE_CPU : !strcmp(c->llm_device, "cuda") ? HX_DEVICE_CUDA
                                                                                          : HX_DEVICE_AUTO;
    o.n_threads = c->threads;
    kb_llm *l = NULL;
    hx_error e = {0};
    if (kb_llm_open(&o, &l, &e) != HX_OK) {
        fprintf(stderr, "helix-bg %s: --llm-model: %s\n", cmd, e.msg);
        *failed = true;
        return NULL;
    }
    return l;
}

kb_think_opts kb_cli_think_opts(const kb_cli *c, kb_llm *llm) {
    kb_think_opts t = kb_think_defaults();
    t.llm = llm;
    t.misfiled = c->misfiled;
    t.summarize_min_words = c->summarize_min_words;
    t.progress = !c->quiet;
    t.llm_alone = c->llm_alone;
    t.llm_label_examples = c->llm_label_examples;
    return t;
}
