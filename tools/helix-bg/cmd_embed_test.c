/* cmd_embed_test.c — helix-bg embed-test: embed fixed sample texts with the
 * active embedder and print their cosine similarity table. */
#include "cli.h"
#include "helix_kb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_samples[] = {
    "The database replica is lagging behind the primary.",
    "Replication lag on the Postgres standby keeps growing.",
    "How do I reset my password?",
    "I forgot my login credentials and need to change them.",
    "The cat sat on the warm windowsill all afternoon.",
    "Quarterly cloud costs doubled because of idle GPU clusters.",
    "Our GPU bill exploded since the training cluster sits unused.",
    "Bananas are rich in potassium.",
};

int cmd_embed_test(int argc, char **argv) {
    const char *model = NULL;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "--embed-model") || !strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: helix-bg embed-test [-m|--embed-model MODEL]\n"
                   "  embeds fixed sample texts (paraphrase pairs and unrelated ones) and prints their\n"
                   "  cosine similarities; MODEL: a BERT .gguf or Hugging Face folder (default embedder:\n"
                   "  built-in lexical-384)\n");
            return 0;
        } else { fprintf(stderr, "helix-bg embed-test: bad option '%s'\n", argv[i]); return 2; }
    }
    kb_embedder *em = NULL;
    hx_error e = {0};
    if (model) {
        if (kb_neural_new(model, 0, &em, &e) != HX_OK) { fprintf(stderr, "helix-bg embed-test: %s\n", e.msg); return 1; }
    } else if (!(em = kb_lexical_new())) { fprintf(stderr, "helix-bg embed-test: out of memory\n"); return 1; }
    const int n = (int)(sizeof k_samples / sizeof k_samples[0]);
    float *v = malloc(sizeof(float) * (size_t)n * (size_t)em->dim);
    if (!v || em->embed(em, k_samples, n, v, &e) != HX_OK) {
        fprintf(stderr, "helix-bg embed-test: %s\n", v ? e.msg : "out of memory");
        free(v); em->free(em);
        return 1;
    }
    printf("embedder: %s (%d dims)\n\n", em->name, em->dim);
    for (int i = 0; i < n; i++) printf("  [%d] %s\n", i, k_samples[i]);
    printf("\n     ");
    for (int j = 0; j < n; j++) printf("   [%d]", j);
    putchar('\n');
    for (int i = 0; i < n; i++) {
        printf("[%d] ", i);
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < em->dim; k++) s += (double)v[i * em->dim + k] * v[j * em->dim + k];
            printf(" %5.2f", s);
        }
        putchar('\n');
    }
    printf("\npairs (0,1) (2,3) (5,6) are paraphrases; a good embedder scores them above the rest.\n");
    static const int pairs[][2] = {{0, 1}, {2, 3}, {5, 6}};
    for (int p = 0; p < 3; p++) {
        int a = pairs[p][0], b = pairs[p][1], ja = -1;
        double ab = 0, top = -2;
        for (int k = 0; k < em->dim; k++) ab += (double)v[a * em->dim + k] * v[b * em->dim + k];
        for (int j = 0; j < n; j++) {   /* the closest text that is not the partner, to either side */
            if (j == a || j == b) continue;
            for (int x = 0; x < 2; x++) {
                double s = 0;
                for (int k = 0; k < em->dim; k++) s += (double)v[pairs[p][x] * em->dim + k] * v[j * em->dim + k];
                if (s > top) { top = s; ja = j; }
            }
        }
        printf("  (%d,%d): %.2f, closest unrelated [%d] %.2f: %s\n", a, b, ab, ja, top, ab > top ? "ok" : "NOT above");
    }
    free(v);
    em->free(em);
    return 0;
}
