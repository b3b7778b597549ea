/* test_shard.c — tensor-parallel shares (model/shard.h), checked on the CPU:
 * for synthetic models of real shapes in several quant mixes, every rank's
 * cut of every matrix, copied as stored (hx_shard_copy, what the CUDA upload
 * sends), dequantizes to exactly that block of the whole matrix; the ranks'
 * cuts tile each matrix once; the partial products of wo / down summed over
 * ranks equal the whole product (the all-reduce's algebra); and shapes that
 * cannot be cut are refused with a message naming why. */
#include "model/model.h"
#include "model/shard.h"
#include "model/synth.h"
#include "quant/quant.h"
#include "test_util.h"

#include <unistd.h>

/* The whole tensor as f32, (rows, cols). */
static float *dequant_all(const hx_tensor *t) {
    int64_t rows = hx_shard_rows(t), cols = t->ne[0];
    size_t rb = hx_row_size(t->type, cols);
    float *out = malloc(sizeof(float) * (size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++) hx_dequantize_row(t->type, (const uint8_t *)t->data + r * rb, out + r * cols, cols);
    return out;
}

/* The cut, copied as stored and dequantized, against the block of the whole. */
static void check_cut(const hx_tensor *t, const hx_shard_cut *c, const float *whole, const char *what, int rank) {
    int64_t rows = hx_shard_cut_rows(t, c), cols = hx_shard_cut_cols(t, c), all_cols = t->ne[0];
    size_t rb = hx_shard_cut_row_bytes(t, c);
    uint8_t *bytes = malloc(rb * (size_t)rows);
    float *row = malloc(sizeof(float) * (size_t)cols);
    /* in two pieces, as the upload's chunks do */
    hx_shard_copy(t, c, 0, rows / 2, bytes);
    hx_shard_copy(t, c, rows / 2, rows, bytes + rb * (size_t)(rows / 2));
    int64_t r0 = c->dim == HX_CUT_ROWS ? c->lo : 0, c0 = c->dim == HX_CUT_COLS ? c->lo : 0;
    int bad = 0;
    for (int64_t r = 0; r < rows && !bad; r++) {
        hx_dequantize_row(t->type, bytes + r * rb, row, cols);
        for (int64_t k = 0; k < cols; k++)
            if (memcmp(&row[k], &whole[(r0 + r) * all_cols + c0 + k], 4)) { bad = 1; break; }
    }
    CHECKF(!bad, "%s (%s) rank %d: the cut's bytes do not dequantize to its block", what, hx_type_name(t->type), rank);
    free(bytes);
    free(row);
}

static void check_model(const char *preset, hx_mix mix, int n) {
    char path[256];
    snprintf(path, sizeof path, "/tmp/hx_test_shard_%d_%s.gguf", (int)getpid(), preset);
    hx_error e = {0};
    hx_synth_opts o = {.preset = hx_preset_find(preset), .mix = mix, .seed = 3, .n_layer = 2, .n_vocab = 1024,
                       .n_threads = 2};
    CHECKF(hx_synth_write(&o, path, &e) == HX_OK, "%s", e.msg);
    hx_model *m = NULL;
    CHECKF(hx_model_load(path, NULL, &m, &e) == HX_OK, "%s", e.msg);
    unlink(path);
    if (!m) return;
    const hx_model_config *cfg = &m->cfg;
    CHECKF(hx_shard_check(m, n, &e) == HX_OK, "%s %s x%d: %s", preset, hx_mix_name(mix), n, e.msg);
    const hx_layer_weights *W = &m->layers[1];
    struct { const char *name; const hx_tensor *t; } mats[] = {
        {"wq", &W->wq}, {"wk", &W->wk}, {"wv", &W->wv}, {"wo", &W->wo}, {"gate", &W->ffn_gate},
        {"up", &W->ffn_up}, {"down", &W->ffn_down}, {"output", &m->output}};
    for (size_t k = 0; k < sizeof mats / sizeof mats[0]; k++) {
        const hx_tensor *t = mats[k].t;
        float *whole = dequant_all(t);
        int64_t covered = 0;
        for (int r = 0; r < n; r++) {
            hx_shard s = hx_shard_make(m, n, r);
            const hx_shard_cut *cuts[] = {&s.q, &s.kv, &s.kv, &s.o, &s.gate_up, &s.gate_up, &s.down, &s.output};
            const hx_shard_cut *c = cuts[k];
            CHECK(s.n_head * n == cfg->n_head && s.n_head_kv * n == cfg->n_head_kv && s.n_ff * n == cfg->n_ff);
            check_cut(t, c, whole, mats[k].name, r);
            covered += hx_shard_cut_rows(t, c) * hx_shard_cut_cols(t, c);
        }
        /* the cuts tile the matrix once (the output head is cut when n divides the vocabulary) */
        CHECKF(covered == hx_shard_rows(t) * t->ne[0], "%s: the %d cuts cover %lld of %lld elements", mats[k].name, n,
               (long long)covered, (long long)(hx_shard_rows(t) * t->ne[0]));
        free(whole);
    }
    /* wo: the ranks' partial products of their columns sum to the whole product */
    {
        const hx_tensor *t = &W->wo;
        int64_t rows = hx_shard_rows(t), cols = t->ne[0];
        float *whole = dequant_all(t), *x = malloc(sizeof(float) * (size_t)cols);
        for (int64_t j = 0; j < cols; j++) x[j] = (float)sin(0.37 * (double)j);
        double worst = 0;
        for (int64_t r = 0; r < rows; r++) {
            double full = 0, sum = 0;
            for (int64_t j = 0; j < cols; j++) full += (double)whole[r * cols + j] * x[j];
            for (int q = 0; q < n; q++) {
                hx_shard s = hx_shard_make(m, n, q);
                double part = 0;
                for (int64_t j = s.o.lo; j < s.o.hi; j++) part += (double)whole[r * cols + j] * x[j];
                sum += part;
            }
            if (fabs(sum - full) > worst) worst = fabs(sum - full);
        }
        CHECKF(worst < 1e-9, "wo: partial products sum to the whole within %g", worst);
        free(whole);
        free(x);
    }
    hx_model_free(m);
}

int main(void) {
    check_model("qwen3-0.6b", HX_MIX_Q4_K_M, 2);
    check_model("qwen3-0.6b", HX_MIX_Q8_0, 4);
    check_model("llama-3.2-1b", HX_MIX_Q4_0, 8);
    check_model("gemma-3-1b", HX_MIX_F16, 1);
    /* refusals, each naming why */
    {
        char path[256];
        snprintf(path, sizeof path, "/tmp/hx_test_shard_%d_r.gguf", (int)getpid());
        hx_error e = {0};
        hx_synth_opts o = {.preset = hx_preset_find("qwen3-0.6b"), .mix = HX_MIX_Q4_K_M, .seed = 1, .n_layer = 1,
                           .n_vocab = 1001, .n_threads = 2};
        CHECKF(hx_synth_write(&o, path, &e) == HX_OK, "%s", e.msg);
        hx_model *m = NULL;
        CHECKF(hx_model_load(path, NULL, &m, &e) == HX_OK, "%s", e.msg);
        unlink(path);
        if (m) {
            CHECK(hx_shard_check(m, 3, &e) == HX_ERR_UNSUPPORTED && strstr(e.msg, "divisible by 3"));
            CHECK(hx_shard_check(m, 9, &e) == HX_ERR_ARG && strstr(e.msg, "between 1 and 8"));
            CHECK(hx_shard_check(m, 0, &e) == HX_ERR_ARG);
            /* a Q4_K down (rows of 3072 = 12 blocks of 256) cut 8 ways starts a rank inside a block */
            hx_status s8 = hx_shard_check(m, 8, &e);
            CHECKF(s8 == HX_ERR_UNSUPPORTED && strstr(e.msg, "inside a block"), "8 ways: %d %s", (int)s8, e.msg);
            /* a vocabulary of 1001 is not cut: every rank computes the whole head */
            hx_shard s = hx_shard_make(m, 2, 1);
            CHECK(s.output.dim == HX_CUT_NONE && s.q.lo == 1024 && s.kv.lo == 512 && s.down.lo == 1536);
            hx_model_free(m);
        }
    }
    printf("test_shard: %d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
