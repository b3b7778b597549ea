/* test_synth.c — synth writes loadable models of every preset: config and
 * shapes as the preset says, tensor types as llama.cpp's Q4_K_M rules say,
 * identical bytes for the same seed, finite weights of the intended scale. */
#include "model/synth.h"
#include "core/core.h"
#include "quant/quant.h"
#include "test_util.h"

#include <unistd.h>

static bool same_file(const char *a, const char *b) {
    char *x, *y;
    size_t nx, ny;
    hx_error e;
    if (hx_read_file(a, &x, &nx, &e) || hx_read_file(b, &y, &ny, &e)) return false;
    bool same = nx == ny && !memcmp(x, y, nx);
    free(x); free(y);
    return same;
}

static double tensor_rms(const hx_tensor *t) {
    int64_t n = t->ne[0] * t->ne[1];
    float *buf = malloc(sizeof(float) * (size_t)n);
    hx_dequantize_row(t->type, t->data, buf, n);
    double s = 0;
    bool finite = true;
    for (int64_t i = 0; i < n; i++) { s += (double)buf[i] * buf[i]; finite &= isfinite(buf[i]); }
    free(buf);
    return finite ? sqrt(s / (double)n) : NAN;
}

int main(void) {
    bool asan = getenv("HX_TEST_SANITIZE") != NULL;
    char path[128], path2[128];
    snprintf(path, sizeof path, "/tmp/hx_synth_%ld.gguf", (long)getpid());
    snprintf(path2, sizeof path2, "/tmp/hx_synth_%ld_b.gguf", (long)getpid());
    for (int i = 0; hx_preset_at(i); i++) {
        const hx_preset *ps = hx_preset_at(i);
        /* the 1B+ llama shapes share smollm's code path; writing them here would only cost time */
        if (ps->n_embd >= 2048) { printf("synth %-16s (shape only: written by bench, not here)\n", ps->name); continue; }
        bool big = ps->n_embd * (int64_t)ps->n_ff > 4000000; /* gemma-3-1b: f32 only */
        for (int mix = 0; mix < HX_MIX_COUNT; mix++) {
            if (mix != HX_MIX_F32 && mix != HX_MIX_Q4_K_M && !(mix == HX_MIX_Q8_0 && i == 1) && !(mix == HX_MIX_Q4_0 && i == 0) &&
                !(mix == HX_MIX_Q4_1 && i == 0)) continue;
            if ((asan || big) && mix != HX_MIX_F32 && i != 0) continue;
            hx_synth_opts o = {.preset = ps, .mix = (hx_mix)mix, .seed = 7, .n_layer = 2, .n_vocab = 1024, .n_threads = 2};
            hx_error e = {0};
            hx_status st = hx_synth_write(&o, path, &e);
            CHECKF(st == HX_OK, "%s %s: %s", ps->name, hx_mix_name((hx_mix)mix), e.msg);
            if (st) continue;
            hx_model *m = NULL;
            st = hx_model_load(path, NULL, &m, &e);
            CHECKF(st == HX_OK, "%s %s: load: %s", ps->name, hx_mix_name((hx_mix)mix), e.msg);
            if (st) continue;
            const hx_model_config *c = &m->cfg;
            CHECKF(c->arch == ps->arch && c->n_layer == 2 && c->n_embd == ps->n_embd && c->n_head == ps->n_head &&
                   c->n_ff == ps->n_ff && c->n_vocab == 1024 && c->head_dim == ps->head_dim,
                   "%s: config differs from the preset", ps->name);
            if (ps->arch != HX_ARCH_BERT) {
                CHECK(c->n_head_kv == ps->n_head_kv && c->tied_output == ps->tied);
                CHECK_NEAR(c->rope_base, ps->rope_base, 1e-3 * ps->rope_base);
            }
            /* types: Q4_K_M rules (2 layers: use_more_bits picks layer 1, not layer 0) */
            const hx_layer_weights *L = &m->layers[0], *L1 = &m->layers[1];
            if (mix == HX_MIX_Q4_K_M) {
                int body = ps->n_embd % 256 ? HX_TYPE_Q5_0 : HX_TYPE_Q4_K;
                int more = ps->n_embd % 256 ? HX_TYPE_Q8_0 : HX_TYPE_Q6_K;
                CHECKF(L->wq.type == body, "%s: attn_q is %s", ps->name, hx_type_name(L->wq.type));
                CHECKF(L->wv.type == body && L1->wv.type == more, "%s: attn_v is %s / %s", ps->name,
                       hx_type_name(L->wv.type), hx_type_name(L1->wv.type));
                int down_body = ps->n_ff % 256 ? HX_TYPE_Q5_0 : HX_TYPE_Q4_K;
                int down_more = ps->n_ff % 256 ? HX_TYPE_Q8_0 : HX_TYPE_Q6_K;
                CHECKF(L->ffn_down.type == down_body && L1->ffn_down.type == down_more, "%s: ffn_down is %s / %s",
                       ps->name, hx_type_name(L->ffn_down.type), hx_type_name(L1->ffn_down.type));
                if (ps->arch != HX_ARCH_BERT) CHECK(m->output.type == more);
            } else if (mix == HX_MIX_F32) {
                CHECK(L->wq.type == HX_TYPE_F32);
            } else if (mix == HX_MIX_Q8_0) {
                CHECK(L->wq.type == HX_TYPE_Q8_0 && m->output.type == HX_TYPE_Q8_0);
            } else if (mix == HX_MIX_Q4_0) {
                CHECK(L->wq.type == HX_TYPE_Q4_0);
            } else if (mix == HX_MIX_Q4_1) {
                CHECK(L->wq.type == HX_TYPE_Q4_1 && L->ffn_down.type == HX_TYPE_Q4_1);
            }
            if (ps->arch != HX_ARCH_BERT) CHECK(m->layers[1].attn_norm.type == HX_TYPE_F32);
            /* scale: input projections ~ 1/sqrt(n_embd) */
            double rms = tensor_rms(&L->wq), want = 1.0 / sqrt((double)ps->n_embd);
            CHECKF(rms > 0.8 * want && rms < 1.25 * want, "%s %s: attn_q rms %g, expected ~%g", ps->name,
                   hx_mix_name((hx_mix)mix), rms, want);
            hx_model_free(m);
            /* determinism: the same seed gives the same bytes, with any thread count */
            if (!big && (mix == HX_MIX_F32 || (i == 0 && !asan))) {
                o.n_threads = 1;
                CHECK(hx_synth_write(&o, path2, &e) == HX_OK);
                CHECKF(same_file(path, path2), "%s %s: not deterministic", ps->name, hx_mix_name((hx_mix)mix));
            }
        }
        printf("synth %-16s ok\n", ps->name);
    }
    /* rule table spot checks (llama.cpp's use_more_bits on 28 layers) */
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_K_M, "blk.0.attn_v.weight", 1024, 0, 28, true) == HX_TYPE_Q6_K);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_K_M, "blk.4.attn_v.weight", 1024, 4, 28, true) == HX_TYPE_Q4_K);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_K_M, "blk.5.attn_v.weight", 1024, 5, 28, true) == HX_TYPE_Q6_K);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_K_M, "blk.27.ffn_down.weight", 3072, 27, 28, true) == HX_TYPE_Q6_K);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_K_M, "blk.10.ffn_up.weight", 1024, 10, 28, true) == HX_TYPE_Q4_K);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_K_M, "token_embd.weight", 1024, -1, 28, true) == HX_TYPE_Q6_K);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_K_M, "token_embd.weight", 4096, -1, 32, false) == HX_TYPE_Q4_K);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_1, "blk.3.ffn_gate.weight", 576, 3, 30, true) == HX_TYPE_Q4_1);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_1, "token_embd.weight", 576, -1, 30, true) == HX_TYPE_Q8_0);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_1, "output.weight", 1024, -1, 28, false) == HX_TYPE_Q6_K);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_1, "blk.0.attn_norm.weight", 1024, 0, 28, false) == HX_TYPE_F32);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_0, "output.weight", 4096, -1, 32, false) == HX_TYPE_Q6_K);
    CHECK(hx_mix_tensor_type(HX_MIX_Q4_0, "blk.0.attn_norm.weight", 4096, 0, 32, false) == HX_TYPE_F32);
    /* a tokenizer from a real GGUF is carried over (and padded to the preset's vocabulary) */
    const char *sh = t_shared_dir();
    if (sh) {
        char tok[512];
        snprintf(tok, sizeof tok, "%s/models/stories260K.gguf", sh);
        hx_synth_opts o = {.preset = hx_preset_find("tinyllama-1.1b"), .mix = HX_MIX_F32, .seed = 1, .n_layer = 1, .tokenizer = tok};
        hx_error e = {0};
        CHECKF(hx_synth_write(&o, path, &e) == HX_OK, "%s", e.msg);
        hx_gguf *g = NULL;
        if (hx_gguf_open(path, NULL, &g, &e) == HX_OK) {
            const hx_gguf_value *t = hx_gguf_get_arr(g, "tokenizer.ggml.tokens", HX_GGUF_STRING);
            CHECK(t && t->arr.count == 32000);
            CHECK(t && hx_gguf_str_eq(t->arr.elems[1].str, "<s>") && hx_gguf_str_eq(t->arr.elems[600].str, "[PAD600]"));
            hx_gguf_str model;
            CHECK(hx_gguf_get_str(g, "tokenizer.ggml.model", &model) && hx_gguf_str_eq(model, "llama"));
            hx_gguf_close(g);
        }
    } else {
        printf("SKIP (partial): ../shared not found, tokenizer carry-over not tested\n");
    }
    unlink(path);
    unlink(path2);
    return t_done("test_synth");
}
