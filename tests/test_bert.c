/* test_bert.c — the BERT encoder against transformers' float64 embeddings of
 * ../shared/refs/tiny-bert-shared.embeddings.json (ids given, so this tests the
 * encoder alone): cosine > 0.9999 per sentence, one at a time and batched. */
#include "backend/cpu/bert.h"
#include "core/core.h"
#include "quant/quant.h"
#include <unistd.h>
#include "test_util.h"

#include <cjson/cJSON.h>

/* Write the GGUF model as a Hugging Face folder (config.json + model.safetensors
 * with f32 tensors under BertModel's names) so the folder loader can be checked
 * against the GGUF loader on the same weights. */
static void put_tensor(FILE *hdr, FILE *data, uint64_t *off, const char *name, const hx_tensor *t, bool *first) {
    int64_t n = t->ne[0] * t->ne[1];
    float *buf = malloc(sizeof(float) * (size_t)n);
    hx_dequantize_row(t->type, t->data, buf, n);
    fwrite(buf, sizeof(float), (size_t)n, data);
    free(buf);
    if (t->ne[1] > 1)
        fprintf(hdr, "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%lld, %lld], \"data_offsets\": [%llu, %llu]}", *first ? "" : ", ",
                name, (long long)t->ne[1], (long long)t->ne[0], (unsigned long long)*off, (unsigned long long)(*off + 4 * (uint64_t)n));
    else
        fprintf(hdr, "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%lld], \"data_offsets\": [%llu, %llu]}", *first ? "" : ", ",
                name, (long long)t->ne[0], (unsigned long long)*off, (unsigned long long)(*off + 4 * (uint64_t)n));
    *first = false;
    *off += 4 * (uint64_t)n;
}

static bool write_hf(const hx_model *m, const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) return false;
    const hx_model_config *c = &m->cfg;
    fprintf(f, "{\"model_type\": \"bert\", \"hidden_act\": \"gelu\", \"hidden_size\": %d, \"num_hidden_layers\": %d, "
               "\"num_attention_heads\": %d, \"intermediate_size\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %lld, "
               "\"type_vocab_size\": %lld, \"layer_norm_eps\": %g}\n", c->n_embd, c->n_layer, c->n_head, c->n_ff, c->n_vocab,
            (long long)m->pos_embd.ne[1], (long long)m->type_embd.ne[1], c->norm_eps);
    fclose(f);
    char *hb = NULL, *db = NULL;
    size_t hn = 0, dn = 0;
    FILE *hdr = open_memstream(&hb, &hn), *data = open_memstream(&db, &dn);
    uint64_t off = 0;
    bool first = true;
    fputc('{', hdr);
    put_tensor(hdr, data, &off, "embeddings.word_embeddings.weight", &m->tok_embd, &first);
    put_tensor(hdr, data, &off, "embeddings.position_embeddings.weight", &m->pos_embd, &first);
    put_tensor(hdr, data, &off, "embeddings.token_type_embeddings.weight", &m->type_embd, &first);
    put_tensor(hdr, data, &off, "embeddings.LayerNorm.weight", &m->embd_norm, &first);
    put_tensor(hdr, data, &off, "embeddings.LayerNorm.bias", &m->embd_norm_b, &first);
    for (int il = 0; il < c->n_layer; il++) {
        const hx_layer_weights *L = &m->layers[il];
        const struct { const char *n; const hx_tensor *t; } map[] = {
            {"attention.self.query.weight", &L->wq}, {"attention.self.query.bias", &L->bq},
            {"attention.self.key.weight", &L->wk}, {"attention.self.key.bias", &L->bk},
            {"attention.self.value.weight", &L->wv}, {"attention.self.value.bias", &L->bv},
            {"attention.output.dense.weight", &L->wo}, {"attention.output.dense.bias", &L->bo},
            {"attention.output.LayerNorm.weight", &L->attn_post_norm}, {"attention.output.LayerNorm.bias", &L->attn_post_norm_b},
            {"intermediate.dense.weight", &L->ffn_up}, {"intermediate.dense.bias", &L->ffn_up_b},
            {"output.dense.weight", &L->ffn_down}, {"output.dense.bias", &L->ffn_down_b},
            {"output.LayerNorm.weight", &L->ffn_post_norm}, {"output.LayerNorm.bias", &L->ffn_post_norm_b},
        };
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
            char nm[128];
            snprintf(nm, sizeof nm, "bert.encoder.layer.%d.%s", il, map[i].n); /* with the "bert." prefix some exports use */
            put_tensor(hdr, data, &off, nm, map[i].t, &first);
        }
    }
    fputc('}', hdr);
    fclose(hdr); fclose(data);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    f = fopen(p, "wb");
    uint64_t hl = hn;
    fwrite(&hl, 8, 1, f); fwrite(hb, 1, hn, f); fwrite(db, 1, dn, f);
    fclose(f);
    free(hb); free(db);
    return true;
}

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
    float *old = malloc(sizeof(float) * (size_t)E * (size_t)ns); /* the per-row dot path, to compare the GEMM path with */
    memcpy(old, batch, sizeof(float) * (size_t)E * (size_t)ns);
    /* the prepared (packed f32, blocked GEMM) path: one at a time and batched, scalar and AVX2 kernels */
    hx_bert_cpu *prep = NULL;
    CHECK(hx_bert_cpu_new(m, &prep, &e) == HX_OK && prep);
    for (int isa = HX_ISA_SCALAR; prep && isa <= HX_ISA_AVX2; isa++) {
        if (!hx_isa_set((hx_isa)isa)) continue;
        double w1 = 1.0, wb = 1.0, wo = 1.0;
        off = 0;
        for (int s = 0; s < ns; s++) {
            CHECK(hx_bert_encode_prep(m, prep, pool, all + off, &lens[s], 1, HX_POOL_MEAN, true, one, &e) == HX_OK);
            double dot = 0;
            for (int i = 0; i < E; i++) dot += (double)one[i] * ref[(size_t)s * E + i];
            if (dot < w1) w1 = dot;
            off += lens[s];
        }
        CHECK(hx_bert_encode_prep(m, prep, pool, all, lens, ns, HX_POOL_MEAN, true, batch, &e) == HX_OK);
        for (int s = 0; s < ns; s++) {
            double dot = 0;
            for (int i = 0; i < E; i++) dot += (double)batch[(size_t)s * E + i] * ref[(size_t)s * E + i];
            if (dot < wb) wb = dot;
            dot = 0;
            for (int i = 0; i < E; i++) dot += (double)batch[(size_t)s * E + i] * old[(size_t)s * E + i];
            if (dot < wo) wo = dot;
        }
        CHECKF(wo > 0.99999, "prepared weights, %s: worst cosine %.7f to the per-row dot path", hx_isa_name((hx_isa)isa), wo);
        CHECKF(w1 > 0.9999 && wb > 0.9999, "prepared weights, %s: worst cosine %.6f one at a time, %.6f batched",
               hx_isa_name((hx_isa)isa), w1, wb);
        printf("prepared weights (%s): worst cosine %.7f one at a time, %.7f batched, %.8f to the per-row dot path\n",
               hx_isa_name((hx_isa)isa), w1, wb, wo);
    }
    hx_isa_set(hx_isa_best());
    hx_bert_cpu_free(prep);
    /* bad input: clear errors */
    int bad_len = 0;
    CHECK(hx_bert_encode(m, pool, all, &bad_len, 1, HX_POOL_MEAN, true, one, &e) == HX_ERR_RANGE);
    int32_t bad_id = 1 << 30;
    int l1 = 1;
    CHECK(hx_bert_encode(m, pool, &bad_id, &l1, 1, HX_POOL_MEAN, true, one, &e) == HX_ERR_RANGE);
    /* the same weights from a Hugging Face folder give the same embeddings */
    char dir[] = "/tmp/hx_bert_hf_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK(write_hf(m, dir));
    hx_model *hf = NULL;
    hx_status st = hx_model_load_any(dir, &hf, &e);
    CHECKF(st == HX_OK, "%s", e.msg);
    if (hf) {
        float *b2 = malloc(sizeof(float) * (size_t)E * (size_t)ns);
        CHECK(hx_bert_encode(hf, pool, all, lens, ns, HX_POOL_MEAN, true, b2, &e) == HX_OK);
        double w2 = 1.0;
        for (int s = 0; s < ns; s++) {
            double dot = 0;
            for (int i = 0; i < E; i++) dot += (double)b2[(size_t)s * E + i] * ref[(size_t)s * E + i];
            if (dot < w2) w2 = dot;
        }
        CHECKF(w2 > 0.9999, "HF folder: worst cosine %.6f", w2);
        printf("HF folder (safetensors): worst cosine %.7f\n", w2);
        free(b2);
        hx_model_free(hf);
    }
    /* a damaged safetensors header: clear error naming the file */
    char p[600];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    FILE *f = fopen(p, "r+b");
    if (f) { uint64_t big = 1ull << 40; fwrite(&big, 8, 1, f); fclose(f); }
    st = hx_model_load_hf(dir, &hf, &e);
    CHECKF(st == HX_ERR_FORMAT && strstr(e.msg, "model.safetensors"), "damaged header: %s", e.msg);
    unlink(p);
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    rmdir(dir);
    free(one); free(batch); free(old); free(all); free(lens); free(ref);
    cJSON_Delete(root);
    hx_pool_free(pool);
    hx_model_free(m);
    return t_done("test_bert");
}
