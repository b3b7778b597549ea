/* test_model.c — config derivation and tensor binding on the real files in ../shared/models. */
#include "model/model.h"
#include "quant/quant.h"
#include "test_util.h"

static hx_model *load(const char *shared, const char *rel) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/%s", shared, rel);
    hx_model *m = NULL;
    hx_error e = {0};
    hx_status st = hx_model_load(path, NULL, &m, &e);
    CHECKF(st == HX_OK, "%s: %s", rel, e.msg);
    return m;
}

int main(void) {
    const char *sh = t_require_shared();
    const char *stories[] = {"stories260K.gguf", "stories260K-Q8_0.gguf", "stories260K-Q4_0.gguf", "stories260K-Q5_1.gguf"};
    for (int i = 0; i < 4; i++) {
        hx_model *m = load(sh, stories[i]);
        if (!m) continue;
        const hx_model_config *c = &m->cfg;
        CHECK(c->arch == HX_ARCH_LLAMA && c->n_layer == 5 && c->n_embd == 64 && c->n_head == 8);
        CHECK(c->n_head_kv == 4 && c->head_dim == 8 && c->n_ff == 172 && c->n_vocab == 512);
        CHECK(c->rope_style == HX_ROPE_NORM && !c->tied_output && !c->qk_norm);
        CHECK(m->layers[4].ffn_down.ne[0] == 172 && m->layers[4].ffn_down.ne[1] == 64);
        if (i == 1) CHECK(m->layers[0].wq.type == HX_TYPE_Q8_0 && m->layers[0].ffn_down.type == HX_TYPE_F16);
        hx_model_free(m);
    }
    hx_model *m = load(sh, "ref-tiny/tiny-qwen3-shared.gguf");
    if (m) {
        const hx_model_config *c = &m->cfg;
        CHECK(c->arch == HX_ARCH_QWEN3 && c->head_dim == 32 && c->n_embd == 32 && c->n_head == 4 && c->n_head_kv == 2);
        CHECK(c->qk_norm && c->rope_style == HX_ROPE_NEOX && c->tied_output && c->n_vocab == 151936);
        CHECK(m->output.data == m->tok_embd.data);
        CHECK(m->layers[0].wq.ne[0] == 32 && m->layers[0].wq.ne[1] == 128);
        CHECK_NEAR(c->rope_base, 1e6, 1);
        hx_model_free(m);
    }
    m = load(sh, "ref-tiny/tiny-llama3-shared.gguf");
    if (m) {
        CHECK(m->cfg.arch == HX_ARCH_LLAMA && m->cfg.n_vocab == 128256 && m->cfg.head_dim == 8 && m->cfg.n_ff == 96);
        CHECK_NEAR(m->cfg.rope_base, 500000, 1);
        hx_model_free(m);
    }
    m = load(sh, "ref-tiny/tiny-gemma3-shared.gguf");
    if (m) {
        const hx_model_config *c = &m->cfg;
        CHECK(c->arch == HX_ARCH_GEMMA3 && c->n_layer == 6 && c->n_head_kv == 1 && c->sliding_window == 8);
        CHECK(c->post_norms && c->embd_scale && c->act == HX_ACT_GELU_TANH && c->qk_norm);
        for (int il = 0; il < 5; il++) CHECK(c->layer_is_swa[il]);
        CHECK(!c->layer_is_swa[5]);
        CHECK_NEAR(c->rope_base_swa, 10000, 1e-3);
        CHECK(c->rope_scale == 1 && c->rope_scale_swa == 1);
        CHECK_NEAR(c->rope_base, 1e6, 1);
        CHECK(m->layers[5].ffn_post_norm.data != NULL);
        hx_model_free(m);
    }
    m = load(sh, "ref-tiny/tiny-bert-shared.gguf");
    if (m) {
        const hx_model_config *c = &m->cfg;
        CHECK(c->arch == HX_ARCH_BERT && c->norm_is_layernorm && c->n_layer == 3 && c->n_vocab == 30522);
        CHECK(m->pos_embd.ne[1] == 512 && m->layers[2].ffn_post_norm_b.data != NULL);
        hx_model_free(m);
    }
    const char *quant[] = {"BF16", "F16", "F32", "Q2_K", "Q3_K_S", "Q4_0", "Q4_1", "Q4_K_S", "Q5_0", "Q5_1", "Q5_K_S", "Q6_K", "Q8_0"};
    for (int i = 0; i < 13; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "quant-tiny/tiny-%s.gguf", quant[i]);
        m = load(sh, rel);
        if (m) { CHECK(m->cfg.n_embd == 256 && m->cfg.n_ff == 512 && m->cfg.n_layer == 1); hx_model_free(m); }
    }
    /* errors name the file */
    hx_error e = {0};
    CHECK(hx_model_load("/nonexistent/model.gguf", NULL, &m, &e) != HX_OK && strstr(e.msg, "/nonexistent/model.gguf"));
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizers/vocab-gguf/ggml-vocab-llama-bpe.gguf", sh);
    hx_status st = hx_model_load(path, NULL, &m, &e);
    CHECKF(st != HX_OK && strstr(e.msg, "ggml-vocab-llama-bpe.gguf"), "vocab-only file must not load as a model: %s", e.msg);
    return t_done("test_model");
}
