/* test_embed_gguf.c — the real all-MiniLM-L6-v2 in its three forms: the Hugging Face folder
 * (model.safetensors, as sentence-transformers ships it) and the GGUFs llama.cpp's convert_hf_to_gguf.py
 * makes from it (DIR-f32.gguf, DIR-f16.gguf). Checks, none against vectors of our own output:
 *   - the folder's 1_Pooling/config.json is honoured (mean; CLS read as CLS; max and friends refused);
 *   - every GGUF tokenizes like the folder's vocab.txt, and embeds like the folder (cosine > 0.9999);
 *   - a text embedded alone equals the same text embedded in a batch of different lengths;
 *   - each paraphrase pair scores above every unrelated pairing;
 *   - WordPiece edge cases where helix once differed from HF tokenizers' BertNormalizer (checked there):
 *     unassigned code points stay in their word, a U+2581 inside a word makes it [UNK].
 * DIR = $HX_MODEL_CACHE/all-MiniLM-L6-v2 (default ~/.cache/helix); absent: prints why and exits 77
 * (skipped). bench/RESULTS.md ("Real all-MiniLM-L6-v2") says how the files were obtained. */
#include "core/core.h"
#include "model/model.h"
#include "tok/tok.h"
#include "test_util.h"

#include <unistd.h>

static double dotd(const float *a, const float *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Pairs (0,1) (2,3) (4,5) (6,7) are paraphrases; no text is related to another pair. */
static const char *k_texts[] = {
    "The database replica is lagging behind the primary.",
    "Replication lag on the Postgres standby keeps growing.",
    "How do I reset my password?",
    "I forgot my login credentials and need to change them.",
    "Quarterly cloud costs doubled because of idle GPU clusters.",
    "Our GPU bill exploded since the training cluster sits unused.",
    "The train was 40 minutes late because of snow on the tracks.",
    "Snow on the line delayed the railway service by forty minutes.",
    "Bananas are rich in potassium.",
    "Café owners in Zürich retry the naïve (see issue #42) test, don't they? 东京 ÅNGSTRÖM",
};
enum { NT = sizeof k_texts / sizeof k_texts[0], NPAIR = 4, DIM_CAP = 1024 };

/* Embeds texts[0..n) with an open embedder; false (and a failed check) on error. */
static bool embed(hx_embedder *em, const char *const *texts, int n, float *out) {
    hx_error e = {0};
    hx_status st = hx_embed(em, texts, n, out, &e);
    CHECKF(st == HX_OK, "%s", e.msg);
    return st == HX_OK;
}

/* Pooling from 1_Pooling/config.json, in a scratch folder linking the real config and weights. */
static void check_pooling(const char *dir) {
    char tmp[] = "/tmp/hx_pool_XXXXXX";
    if (!mkdtemp(tmp)) { CHECK(0); return; }
    char a[1200], b[1200];
    const char *files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/%s", dir, files[i]);
        snprintf(b, sizeof b, "%s/%s", tmp, files[i]);
        CHECK(symlink(a, b) == 0);
    }
    snprintf(b, sizeof b, "%s/1_Pooling", tmp);
    CHECK(mkdir(b, 0700) == 0);
    snprintf(b, sizeof b, "%s/1_Pooling/config.json", tmp);
    struct { const char *json; hx_status want; int pooling; } cases[] = {
        {NULL, HX_OK, 1},   /* no pooling config: mean */
        {"{\"pooling_mode_cls_token\": false, \"pooling_mode_mean_tokens\": true, \"pooling_mode_max_tokens\": false}", HX_OK, 1},
        {"{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": false}", HX_OK, 2},
        {"{\"pooling_mode_mean_tokens\": false, \"pooling_mode_max_tokens\": true}", HX_ERR_UNSUPPORTED, 0},
        {"{\"pooling_mode_mean_tokens\": true, \"pooling_mode_mean_sqrt_len_tokens\": true}", HX_ERR_UNSUPPORTED, 0},
        {"{\"pooling_mode_cls_token\": true, \"pooling_mode_mean_tokens\": true}", HX_ERR_UNSUPPORTED, 0},
        {"[1, 2]", HX_ERR_FORMAT, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        unlink(b);
        if (cases[k].json) {
            FILE *f = fopen(b, "w");
            CHECK(f != NULL);
            if (!f) continue;
            fputs(cases[k].json, f);
            fclose(f);
        }
        hx_model *m = NULL; hx_error e = {0};
        hx_status st = hx_model_load_hf(tmp, &m, &e);
        CHECKF(st == cases[k].want, "pooling case %zu: status %d (%s), want %d", k, (int)st, e.msg, (int)cases[k].want);
        if (st == HX_OK && m) CHECKF(m->cfg.pooling == cases[k].pooling, "pooling case %zu: %d", k, m->cfg.pooling);
        hx_model_free(m);
    }
    unlink(b);
    snprintf(b, sizeof b, "%s/1_Pooling", tmp); rmdir(b);
    for (int i = 0; i < 2; i++) { snprintf(b, sizeof b, "%s/%s", tmp, files[i]); unlink(b); }
    rmdir(tmp);
}

static bool same_ids(hx_tok *a, hx_tok *b, const char *text) {
    int32_t *x = NULL, *y = NULL; size_t nx = 0, ny = 0; hx_error e = {0};
    bool ok = hx_tok_encode(a, text, strlen(text), true, false, &x, &nx, &e) == HX_OK &&
              hx_tok_encode(b, text, strlen(text), true, false, &y, &ny, &e) == HX_OK &&
              nx == ny && !memcmp(x, y, nx * sizeof *x);
    free(x); free(y);
    return ok;
}

/* ids of text (with [CLS]/[SEP] when special) equal want[0..n)? */
static bool ids_are(hx_tok *t, const char *text, bool special, const int32_t *want, size_t n) {
    int32_t *x = NULL; size_t nx = 0; hx_error e = {0};
    bool ok = hx_tok_encode(t, text, strlen(text), special, false, &x, &nx, &e) == HX_OK && nx == n &&
              !memcmp(x, want, n * sizeof *x);
    free(x);
    return ok;
}

/* Edge cases where HF tokenizers 0.23 (what sentence-transformers uses) was checked by hand. */
static void check_wordpiece_edges(hx_tok *t) {
    const int32_t cls = hx_tok_cls(t), sep = hx_tok_sep(t), unk = hx_tok_unk(t);
    int32_t *ef = NULL, *xx = NULL; size_t nef = 0, nxx = 0; hx_error e = {0};
    CHECK(hx_tok_encode(t, "ef", 2, false, false, &ef, &nef, &e) == HX_OK);
    CHECK(hx_tok_encode(t, "xx", 2, true, false, &xx, &nxx, &e) == HX_OK);
    if (!ef || !xx || nef > 6) { CHECK(0); free(ef); free(xx); return; }
    /* HF: 'ab▁cd ef' -> [CLS] [UNK] e ##f [SEP]: U+2581 is an ordinary (symbol) character */
    int32_t want[10] = {cls, unk};
    memcpy(want + 2, ef, nef * sizeof *ef);
    want[2 + nef] = sep;
    CHECK(ids_are(t, "ab\xE2\x96\x81" "cd ef", true, want, nef + 3));
    int32_t one_unk[3] = {cls, unk, sep};
    CHECK(ids_are(t, "x\xE2\x96\x81x", true, one_unk, 3));
    CHECK(ids_are(t, "\xE2\x96\x81x", true, one_unk, 3));
    /* unassigned U+0378 and noncharacter U+FFFE stay in the word: [UNK]; HF drops only Cc Cf Cs Co */
    CHECK(ids_are(t, "x\xCD\xB8x", true, one_unk, 3));
    CHECK(ids_are(t, "x\xEF\xBF\xBEx", true, one_unk, 3));
    CHECK(ids_are(t, "x\xEE\x80\x80x", true, xx, nxx));   /* private use U+E000: dropped */
    CHECK(ids_are(t, "x\xE2\x80\x8Bx", true, xx, nxx));   /* zero-width space (Cf): dropped */
    CHECK(ids_are(t, "x\x01x", true, xx, nxx));           /* C0 control: dropped */
    free(ef); free(xx);
}

int main(void) {
    const char *cache = getenv("HX_MODEL_CACHE"), *home = getenv("HOME");
    char root[600], dir[700], probe[800];
    if (cache && *cache) snprintf(root, sizeof root, "%s", cache);
    else snprintf(root, sizeof root, "%s/.cache/helix", home ? home : ".");
    snprintf(dir, sizeof dir, "%s/all-MiniLM-L6-v2", root);
    snprintf(probe, sizeof probe, "%s/model.safetensors", dir);
    if (access(probe, R_OK) != 0) {
        printf("SKIP: %s not found (set HX_MODEL_CACHE to the folder holding all-MiniLM-L6-v2/; "
               "bench/RESULTS.md, 'Real all-MiniLM-L6-v2', says where it comes from)\n", probe);
        return 77;
    }
    check_pooling(dir);

    hx_tok *vt = NULL; hx_error e = {0};
    snprintf(probe, sizeof probe, "%s/vocab.txt", dir);
    CHECKF(hx_tok_load_vocab_txt(probe, &vt, &e) == HX_OK, "%s", e.msg);
    if (vt) check_wordpiece_edges(vt);

    hx_embedder *em = NULL;
    CHECKF(hx_embedder_open(dir, 2, &em, &e) == HX_OK, "%s", e.msg);
    if (!em || !vt) { hx_tok_free(vt); return t_done("test_embed_gguf"); }
    const int E = hx_embedder_dim(em);
    CHECK(E == 384);
    static float ref[NT * DIM_CAP], got[NT * DIM_CAP], one[DIM_CAP];
    if (E > DIM_CAP || !embed(em, k_texts, NT, ref)) { hx_embedder_free(em); hx_tok_free(vt); return t_done("test_embed_gguf"); }

    /* unit vectors; alone == in the batch */
    for (int i = 0; i < NT; i++) {
        CHECK_NEAR(dotd(ref + i * E, ref + i * E, E), 1.0, 1e-5);
        if (!embed(em, &k_texts[i], 1, one)) break;
        double c = dotd(one, ref + i * E, E);
        CHECKF(c > 0.99999, "text %d alone vs in a batch: cosine %.7f", i, c);
    }
    /* paraphrases above every unrelated pairing */
    for (int p = 0; p < NPAIR; p++) {
        int a = 2 * p, b = a + 1;
        double para = dotd(ref + a * E, ref + b * E, E), worst_other = -1;
        for (int j = 0; j < NT; j++) {
            if (j == a || j == b) continue;
            double u = dotd(ref + a * E, ref + j * E, E), v = dotd(ref + b * E, ref + j * E, E);
            if (u > worst_other) worst_other = u;
            if (v > worst_other) worst_other = v;
        }
        printf("pair %d: paraphrase cosine %.3f, highest unrelated %.3f\n", p, para, worst_other);
        CHECKF(para > worst_other + 0.1, "pair %d: paraphrase %.3f, unrelated up to %.3f", p, para, worst_other);
    }
    hx_embedder_free(em);

    const char *sfx[] = {"-f32.gguf", "-f16.gguf"};
    for (int k = 0; k < 2; k++) {
        char g[800];
        snprintf(g, sizeof g, "%s%s", dir, sfx[k]);
        if (access(g, R_OK) != 0) { printf("%s not found (llama.cpp convert_hf_to_gguf.py makes it): not compared\n", g); continue; }
        hx_tok *gt = NULL;
        CHECKF(hx_tok_load_gguf(g, &gt, &e) == HX_OK, "%s", e.msg);
        for (int i = 0; gt && i < NT; i++) CHECKF(same_ids(vt, gt, k_texts[i]), "%s: text %d: ids differ from vocab.txt", g, i);
        hx_tok_free(gt);
        hx_embedder *eg = NULL;
        CHECKF(hx_embedder_open(g, 2, &eg, &e) == HX_OK, "%s", e.msg);
        if (!eg) continue;
        CHECK(hx_embedder_dim(eg) == E);
        if (hx_embedder_dim(eg) == E && embed(eg, k_texts, NT, got)) {
            double worst = 1;
            for (int i = 0; i < NT; i++) { double c = dotd(ref + i * E, got + i * E, E); if (c < worst) worst = c; }
            printf("%s vs the folder: worst cosine %.8f over %d texts\n", g, worst, NT);
            CHECKF(worst > 0.9999, "%s: worst cosine %.7f", g, worst);
        }
        hx_embedder_free(eg);
    }
    hx_tok_free(vt);
    return t_done("test_embed_gguf");
}
