/* test_bert.c — the BERT encoder against transformers' float64 embeddings of
 * ../shared/refs/tiny-bert-shared.embeddings.json (ids given, so this tests the
 * encoder alone): cosine > 0.9999 per sentence, one at a time and batched. */
#include "backend/cpu/bert.h"
#include "core/core.h"
#include "test_util.h"

#include <cjson/cJSON.h>

int main(void) {
    const char *sh = t_require_shared();
    char path[512];
    snprintf(path, sizeof path, "%s/models/ref-tiny/tiny-bert-shared.gguf", sh);
    hx_error e = {0};
    hx_model *m = NULL;
    if (hx_model_load(path, NULL, &m, &e) != HX_OK) { fprintf(stderr, "%s\n", e.msg); return 1; }
    snprintf(path, sizeof path, "%s/refs/tiny-bert-shared.embeddings.json", sh);
    char *txt;
    size_t n;
    if (hx_read_file(path, &txt, &n, &e) != HX_OK) { fprintf(stderr, "%s\n", e.msg); return 1; }
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    CHECK(root && cJSON_IsArray(root));
    int ns = cJSON_GetArraySize(root), E = m->cfg.n_embd;
    int32_t *all = malloc(sizeof(int32_t) * 256 * (size_t)ns);
    int *lens = malloc(sizeof(int) * (size_t)ns);
    float *ref = malloc(sizeof(float) * (size_t)E * (size_t)ns);
    int64_t total = 0;
    for (int s = 0; s < ns; s++) {
        cJSON *it = cJSON_GetArrayItem(root, s);
        cJSON *ids = cJSON_GetObjectItem(it, "ids"), *emb = cJSON_GetObjectItem(it, "embedding");
        lens[s] = cJSON_GetArraySize(ids);
        for (int i = 0; i < lens[s]; i++) all[total + i] = cJSON_GetArrayItem(ids, i)->valueint;
        total += lens[s];
        CHECK(cJSON_GetArraySize(emb) == E);
        for (int i = 0; i < E; i++) ref[(size_t)s * E + i] = (float)cJSON_GetArrayItem(emb, i)->valuedouble;
    }
    hx_pool *pool = hx_pool_create(2);
    float *one = malloc(sizeof(float) * (size_t)E), *batch = malloc(sizeof(float) * (size_t)E * (size_t)ns);
    double worst = 1.0;
    int64_t off = 0;
    for (int s = 0; s < ns; s++) {
        CHECK(hx_bert_encode(m, pool, all + off, &lens[s], 1, HX_POOL_MEAN, true, one, &e) == HX_OK);
        double dot = 0;
        for (int i = 0; i < E; i++) dot += (double)one[i] * ref[(size_t)s * E + i];
        if (dot < worst) worst = dot;
        CHECKF(dot > 0.9999, "sentence %d: cosine %.6f", s, dot);
        off += lens[s];
    }
    printf("one at a time: worst cosine %.7f over %d sentences\n", worst, ns);
    CHECK(hx_bert_encode(m, pool, all, lens, ns, HX_POOL_MEAN, true, batch, &e) == HX_OK);
    worst = 1.0;
    for (int s = 0; s < ns; s++) {
        double dot = 0;
        for (int i = 0; i < E; i++) dot += (double)batch[(size_t)s * E + i] * ref[(size_t)s * E + i];
        if (dot < worst) worst = dot;
        CHECKF(dot > 0.9999, "batched sentence %d: cosine %.6f", s, dot);
    }
    printf("batched: worst cosine %.7f\n", worst);
    /* bad input: clear errors */
    int bad_len = 0;
    CHECK(hx_bert_encode(m, pool, all, &bad_len, 1, HX_POOL_MEAN, true, one, &e) == HX_ERR_RANGE);
    int32_t bad_id = 1 << 30;
    int l1 = 1;
    CHECK(hx_bert_encode(m, pool, &bad_id, &l1, 1, HX_POOL_MEAN, true, one, &e) == HX_ERR_RANGE);
    free(one); free(batch); free(all); free(lens); free(ref);
    cJSON_Delete(root);
    hx_pool_free(pool);
    hx_model_free(m);
    return t_done("test_bert");
}
