/* test_embed_pipe.c — hx_embed's pipeline (texts by length, chunks tokenized by a
 * producer thread while the encoder runs the previous chunk, batches filled to the
 * token budget, rows put back in the caller's order) gives every text the same
 * bits as embedding it alone (the CPU encoder is batch-invariant), for random
 * sets with empty, NULL, very long and invalid UTF-8 texts, at several batch
 * sizes; and a permuted input gives the same rows permuted, so a broken order
 * fails. With CUDA and a GPU, the GPU's rows match the CPU's (cosine) in place.
 * Runs on a small random BERT written here as a Hugging Face folder (no files
 * needed), and on ../shared's tiny BERT (real WordPiece vocabulary) when
 * present. */
#include "test_util.h"
#include "helix.h"

#include <unistd.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(float scale) { return ((float)(rnd() % 20001) / 10000.0f - 1.0f) * scale; }

enum { E = 32, L = 2, H = 4, F = 64, P = 96 };
static const char *k_words[] = {"the", "cat", "dog", "run", "data", "base", "cache", "log", "gpu", "kernel",
                                "token", "batch", "write", "read", "zu", "café"};
enum { NW = sizeof k_words / sizeof k_words[0] };

/* One tensor into the safetensors header (shape rows x cols, or cols alone when rows == 0) and data. */
static void put(FILE *hdr, FILE *data, uint64_t *off, const char *name, int rows, int cols, float scale, float bias,
                bool *first) {
    int64_t n = (int64_t)(rows ? rows : 1) * cols;
    for (int64_t i = 0; i < n; i++) {
        float v = bias + rndf(scale);
        fwrite(&v, 4, 1, data);
    }
    if (rows) fprintf(hdr, "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%d, %d], \"data_offsets\": [%llu, %llu]}",
                      *first ? "" : ", ", name, rows, cols, (unsigned long long)*off, (unsigned long long)(*off + 4 * n));
    else fprintf(hdr, "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%d], \"data_offsets\": [%llu, %llu]}",
                 *first ? "" : ", ", name, cols, (unsigned long long)*off, (unsigned long long)(*off + 4 * n));
    *first = false;
    *off += 4 * (uint64_t)n;
}

/* A random BERT (E 32, 2 layers, 4 heads, 96 positions) with a small WordPiece vocabulary, in dir. */
static bool write_model(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/vocab.txt", dir);
    FILE *f = fopen(p, "w");
    if (!f) return false;
    int V = 0;
    const char *spec[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 0; i < 5; i++, V++) fprintf(f, "%s\n", spec[i]);
    for (int c = 33; c < 127; c++)
        if (c < 'A' || c > 'Z') fprintf(f, "%c\n", c), V++;
    for (int c = 'a'; c <= 'z'; c++, V++) fprintf(f, "##%c\n", c);
    for (int i = 0; i < NW; i++, V += 2) fprintf(f, "%s\n##%s\n", k_words[i], k_words[i]);
    fclose(f);
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (!(f = fopen(p, "w"))) return false;
    fprintf(f, "{\"model_type\": \"bert\", \"hidden_act\": \"gelu\", \"hidden_size\": %d, \"num_hidden_layers\": %d, "
               "\"num_attention_heads\": %d, \"intermediate_size\": %d, \"vocab_size\": %d, "
               "\"max_position_embeddings\": %d, \"type_vocab_size\": 2, \"layer_norm_eps\": 1e-12}\n", E, L, H, F, V, P);
    fclose(f);
    char *hb = NULL, *db = NULL;
    size_t hn = 0, dn = 0;
    FILE *hdr = open_memstream(&hb, &hn), *data = open_memstream(&db, &dn);
    uint64_t off = 0;
    bool first = true;
    fputc('{', hdr);
    put(hdr, data, &off, "embeddings.word_embeddings.weight", V, E, 1.0f, 0, &first);
    put(hdr, data, &off, "embeddings.position_embeddings.weight", P, E, 0.3f, 0, &first);
    put(hdr, data, &off, "embeddings.token_type_embeddings.weight", 2, E, 0.1f, 0, &first);
    put(hdr, data, &off, "embeddings.LayerNorm.weight", 0, E, 0.1f, 1, &first);
    put(hdr, data, &off, "embeddings.LayerNorm.bias", 0, E, 0.1f, 0, &first);
    for (int il = 0; il < L; il++) {
        const struct { const char *n; int r, c; float s, b; } map[] = {
            {"attention.self.query.weight", E, E, 0.3f, 0}, {"attention.self.query.bias", 0, E, 0.1f, 0},
            {"attention.self.key.weight", E, E, 0.3f, 0}, {"attention.self.key.bias", 0, E, 0.1f, 0},
            {"attention.self.value.weight", E, E, 0.3f, 0}, {"attention.self.value.bias", 0, E, 0.1f, 0},
            {"attention.output.dense.weight", E, E, 0.3f, 0}, {"attention.output.dense.bias", 0, E, 0.1f, 0},
            {"attention.output.LayerNorm.weight", 0, E, 0.1f, 1}, {"attention.output.LayerNorm.bias", 0, E, 0.1f, 0},
            {"intermediate.dense.weight", F, E, 0.3f, 0}, {"intermediate.dense.bias", 0, F, 0.1f, 0},
            {"output.dense.weight", E, F, 0.2f, 0}, {"output.dense.bias", 0, E, 0.1f, 0},
            {"output.LayerNorm.weight", 0, E, 0.1f, 1}, {"output.LayerNorm.bias", 0, E, 0.1f, 0},
        };
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
            char nm[128];
            snprintf(nm, sizeof nm, "encoder.layer.%d.%s", il, map[i].n);
            put(hdr, data, &off, nm, map[i].r, map[i].c, map[i].s, map[i].b, &first);
        }
    }
    fputc('}', hdr);
    fclose(hdr);
    fclose(data);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (!(f = fopen(p, "wb"))) { free(hb); free(db); return false; }
    uint64_t hl = hn;
    bool ok = fwrite(&hl, 8, 1, f) == 1 && fwrite(hb, 1, hn, f) == hn && fwrite(db, 1, dn, f) == dn;
    ok = fclose(f) == 0 && ok;
    free(hb);
    free(db);
    return ok;
}

/* n random texts: words, punctuation, accents; some empty, some NULL, some thousands of words long,
 * some with invalid UTF-8 or control bytes; a few repeated. Caller frees each and the array. */
static char **make_texts(int n) {
    char **t = calloc((size_t)n, sizeof *t);
    for (int i = 0; t && i < n; i++) {
        int kind = (int)(rnd() % 20);
        if (kind == 0) { t[i] = strdup(""); continue; }
        if (kind == 1) { t[i] = NULL; continue; }
        if (kind == 2 && i > 0 && t[i - 1]) { t[i] = strdup(t[i - 1]); continue; }
        int words = kind == 3 ? 2000 + (int)(rnd() % 3000) : 1 + (int)(rnd() % 60);
        char *s = malloc((size_t)words * 16 + 1);
        if (!s) break;
        size_t len = 0;
        for (int w = 0; w < words; w++) {
            int k = (int)(rnd() % 10);
            if (w) s[len++] = ' ';
            if (k < 6) len += (size_t)sprintf(s + len, "%s", k_words[rnd() % NW]);
            else if (k == 6) len += (size_t)sprintf(s + len, "%c", "!?.,;:()"[rnd() % 8]);
            else if (k == 7 && kind == 4) { s[len++] = (char)(0x80 + rnd() % 64); s[len++] = (char)0xFF; } /* invalid */
            else if (k == 7 && kind == 5) { s[len++] = '\t'; s[len++] = (char)1; }
            else {
                int m = 1 + (int)(rnd() % 9);
                for (int c = 0; c < m; c++) s[len++] = (char)('a' + rnd() % 26);
            }
        }
        s[len] = 0;
        t[i] = s;
    }
    return t;
}

static void check_model(const char *path, const char *label) {
    hx_error e = {0};
    hx_embedder *em = NULL;
    if (hx_embedder_open(path, 2, &em, &e) != HX_OK) {
        CHECKF(0, "%s: %s", label, e.msg);
        return;
    }
    const int n = 1500, dim = hx_embedder_dim(em); /* 1500 texts: chunks of 256, 512 and 732, two threads */
    char **texts = make_texts(n);
    float *one = malloc(sizeof(float) * (size_t)n * dim), *all = malloc(sizeof(float) * (size_t)n * dim);
    float *perm_out = malloc(sizeof(float) * (size_t)n * dim);
    const char **perm_in = malloc(sizeof *perm_in * (size_t)n);
    int *perm = malloc(sizeof *perm * (size_t)n);
    CHECK(texts && one && all && perm_out && perm_in && perm);
    if (!texts || !one || !all || !perm_out || !perm_in || !perm) goto out;
    /* unpipelined: each text alone */
    for (int i = 0; i < n; i++) {
        const char *t[1] = {texts[i]};
        if (hx_embed(em, t, 1, one + (size_t)i * dim, &e) != HX_OK) { CHECKF(0, "%s: text %d: %s", label, i, e.msg); goto out; }
    }
    /* distinct texts must give distinct rows, or the order checks below would prove nothing */
    int same = 0;
    for (int i = 1; i < n; i++) {
        const char *a = texts[i - 1] ? texts[i - 1] : "", *b = texts[i] ? texts[i] : "";
        if (strcmp(a, b)) same += !memcmp(one + (size_t)(i - 1) * dim, one + (size_t)i * dim, sizeof(float) * dim);
    }
    CHECKF(same == 0, "%s: %d neighbouring distinct texts with the same vector", label, same);
    const int batches[] = {0, 1, 3, 32, 256};
    for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
        hx_embedder_set_batch(em, batches[b]);
        memset(all, 0xFF, sizeof(float) * (size_t)n * dim);
        if (hx_embed(em, (const char *const *)texts, n, all, &e) != HX_OK) { CHECKF(0, "%s: %s", label, e.msg); goto out; }
        int bad = 0, first_bad = -1;
        for (int i = 0; i < n; i++)
            if (memcmp(one + (size_t)i * dim, all + (size_t)i * dim, sizeof(float) * dim)) {
                bad++;
                if (first_bad < 0) first_bad = i;
            }
        CHECKF(bad == 0, "%s, batch %d: %d of %d rows differ from the text embedded alone (first: %d)", label,
               batches[b], bad, n, first_bad);
    }
    /* the input reversed and shuffled: row i of the output is the row of the text put at i */
    hx_embedder_set_batch(em, 32);
    for (int i = 0; i < n; i++) perm[i] = n - 1 - i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint32_t)(i + 1)), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (int i = 0; i < n; i++) perm_in[i] = texts[perm[i]];
    if (hx_embed(em, perm_in, n, perm_out, &e) != HX_OK) { CHECKF(0, "%s: %s", label, e.msg); goto out; }
    int moved = 0;
    for (int i = 0; i < n; i++)
        moved += memcmp(perm_out + (size_t)i * dim, one + (size_t)perm[i] * dim, sizeof(float) * dim) != 0;
    CHECKF(moved == 0, "%s: %d rows of a shuffled input are not where their texts went", label, moved);
    /* the pieces of one call: a prefix embedded alone gives the same rows */
    if (hx_embed(em, (const char *const *)texts, 300, all, &e) != HX_OK) { CHECKF(0, "%s: %s", label, e.msg); goto out; }
    CHECK(!memcmp(all, one, sizeof(float) * 300 * (size_t)dim));
    printf("%s: %d texts, dim %d: batched = alone at batch 0/1/3/32/256, shuffled input in place\n", label, n, dim);
    /* the GPU (CUDA builds with a usable device): rows within cosine 0.9999 of the CPU's, in place, with
     * batches in flight (batch 1: many) and the token budget filled (batch 0) */
    hx_error eg = {0};
    if (hx_embedder_set_device(em, "cuda", &eg) == HX_OK) {
        for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++) {
            hx_embedder_set_batch(em, batches[b]);
            if (hx_embed(em, (const char *const *)texts, n, all, &e) != HX_OK) { CHECKF(0, "%s: %s", label, e.msg); goto out; }
            double worst = 1.0;
            for (int i = 0; i < n; i++) {
                const float *x = one + (size_t)i * dim, *y = all + (size_t)i * dim;
                double d = 0, xx = 0, yy = 0;
                for (int k = 0; k < dim; k++) { d += (double)x[k] * y[k]; xx += (double)x[k] * x[k]; yy += (double)y[k] * y[k]; }
                double c = xx > 0 && yy > 0 ? d / sqrt(xx * yy) : 0;
                if (!(c >= worst)) worst = c;
            }
            CHECKF(worst > 0.9999, "%s, cuda, batch %d: worst cosine to the CPU %.7f", label, batches[b], worst);
            printf("%s: cuda, batch %d: worst cosine to the CPU %.7f\n", label, batches[b], worst);
        }
        hx_embedder_set_device(em, "cpu", &eg);
    }
out:
    for (int i = 0; texts && i < n; i++) free(texts[i]);
    free(texts); free(one); free(all); free(perm_out); free(perm_in); free(perm);
    hx_embedder_free(em);
}

int main(void) {
    char dir[] = "/tmp/hx_embed_pipe_XXXXXX";
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    CHECK(write_model(dir));
    check_model(dir, "random bert");
    const char *names[] = {"vocab.txt", "config.json", "model.safetensors"};
    for (int i = 0; i < 3; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
    const char *sh = t_shared_dir();
    if (sh) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/ref-tiny/tiny-bert-shared.gguf", sh);
        if (access(path, R_OK) == 0) check_model(path, "tiny-bert-shared");
    } else {
        printf("(../shared not found: the tiny BERT with the real vocabulary is not checked)\n");
    }
    printf("%d checks, %d failed\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
