/* test_pipe_cuda.c — the layer (pipeline) split (api/pipe.c) on CUDA against
 * the same GPU without the split, through the public API, on synthetic
 * models of real shapes (llama-3.2-1b: GQA; qwen3-0.6b: QK-norm, Q4_K_M;
 * gemma-3-1b: one KV head, which tensor parallelism cannot cut, post-norms,
 * sliding window, tied head), 4 layers and a vocabulary of 4096 each:
 *   - a 2-way split with both parts on GPU 0 (hx_dev_context_params
 *     .split_one_gpu), and with 2+ GPUs the split over GPUs 0 and 1;
 *   - a 40-token prefill with every row's logits, two sequences in the same
 *     batches, a copied sequence, a saved and reloaded one: logits within
 *     the bound set by the GPU's own run-to-run difference (the same prompt
 *     twice without the split; at least 1e-5 of the logits' scale);
 *   - 64 greedy ids of hx_generate: equal (without the split these take the
 *     decode graphs and the lookahead, with it the plain path);
 *   - with 2+ GPUs, tensor_parallel 2 on gemma-3-1b (one KV head) falls back
 *     to the layer split and gives the same logits.
 * Built with CUDA only; skipped (77) without a CUDA device. */
#include "test_util.h"
#include "ctx_compare.h"

#include "helix.h"
#include "helix_dev.h"
#include "model/synth.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif

#define NSEQ 4
#define NCTX 256
#define PROMPT 40
#define STEPS 64

#ifdef HX_HAVE_CUDA
static hx_model *open_model(const char *path, int split, int tp, char *msg, size_t cap) {
    hx_model_params mp = hx_model_default_params();
    mp.device = HX_DEVICE_CUDA;
    mp.layer_split = split;
    mp.tensor_parallel = tp;
    hx_error e = {0};
    hx_model *m = NULL;
    if (hx_model_open(path, &mp, &m, &e)) { snprintf(msg, cap, "%s", e.msg); return NULL; }
    return m;
}

static hx_context *open_ctx(hx_model *m, bool one_gpu, char *msg, size_t cap) {
    hx_context_params cp = hx_context_default_params();
    cp.n_seq_max = NSEQ;
    cp.n_ctx = NSEQ * NCTX;
    hx_dev_context_params dp = {.split_one_gpu = one_gpu};
    hx_error e = {0};
    hx_context *c = NULL;
    if (hx_dev_context_new(m, &cp, &dp, &c, &e)) { snprintf(msg, cap, "%s", e.msg); return NULL; }
    return c;
}

static void prompt_ids(int32_t *p, int n, int V) {
    uint64_t rng = 77;
    for (int i = 0; i < n; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (int32_t)((rng >> 33) % (uint64_t)V);
    }
}

/* The GPU's own run-to-run difference: the prompt twice on `one` (sequences 0 and 1). */
static double self_bound(hx_context *one, int V) {
    int32_t prompt[PROMPT];
    prompt_ids(prompt, PROMPT, V);
    hx_batch b = hx_batch_init(PROMPT);
    float *l[2] = {NULL, NULL};
    for (int s = 0; s < 2; s++) {
        hx_batch_clear(&b);
        for (int i = 0; i < PROMPT; i++) hx_batch_add(&b, prompt[i], i, s, true);
        l[s] = t_batch_logits(one, &b, V);
    }
    double d = l[0] && l[1] ? t_rel_diff(l[0], l[1], (size_t)PROMPT * V) : INFINITY;
    free(l[0]);
    free(l[1]);
    hx_batch_free(&b);
    hx_seq_clear(one, 0);
    hx_seq_clear(one, 1);
    return d;
}

/* The same calls on both contexts; every logits row compared. */
static void compare(const char *what, hx_context *one, hx_context *sp, int V, double tol) {
    hx_batch b = hx_batch_init(128);
    double worst = 0, d;
    int32_t prompt[PROMPT];
    prompt_ids(prompt, PROMPT, V);
    for (int s = 0; s < NSEQ; s++) { hx_seq_clear(one, s); hx_seq_clear(sp, s); }
    /* 1: a prefill of sequence 0, every row's logits */
    hx_batch_clear(&b);
    for (int i = 0; i < PROMPT; i++) hx_batch_add(&b, prompt[i], i, 0, true);
    float *l1 = t_batch_logits(one, &b, V), *l2 = t_batch_logits(sp, &b, V);
    CHECKF(l1 && l2, "%s: prefill failed", what);
    if (l1 && l2) {
        d = t_rel_diff(l1, l2, (size_t)PROMPT * V);
        worst = d > worst ? d : worst;
        CHECKF(d <= tol, "%s: prefill logits differ by %.3g of their scale (bound %.3g)", what, d, tol);
    }
    free(l1);
    free(l2);
    /* 2: sequences 1 and 2 in the same batches; 3: sequence 1 copied to 3, saved, cleared, loaded again */
    d = t_two_sequences(what, one, sp, prompt, PROMPT, V, tol);
    worst = d > worst ? d : worst;
    d = t_copy_reload(what, one, sp, prompt[3], V, tol);
    worst = d > worst ? d : worst;
    hx_error e = {0};
    /* 4: greedy ids of hx_generate on sequence 0 (cleared) */
    hx_seq_clear(one, 0);
    hx_seq_clear(sp, 0);
    hx_generate_params gp = hx_generate_default_params();
    gp.prompt_ids = prompt;
    gp.n_prompt_ids = PROMPT;
    gp.max_tokens = STEPS;
    gp.ignore_eog = true;
    hx_generate_result r1 = {0}, r2 = {0};
    CHECKF(hx_generate(one, &gp, &r1, &e) == HX_OK, "%s: generate: %s", what, e.msg);
    CHECKF(hx_generate(sp, &gp, &r2, &e) == HX_OK, "%s: generate (split): %s", what, e.msg);
    int same = 0;
    while (same < r1.n_ids && same < r2.n_ids && r1.ids[same] == r2.ids[same]) same++;
    CHECKF(r1.n_ids == STEPS && r2.n_ids == STEPS && same == STEPS, "%s: greedy ids: %d and %d, the same up to %d",
           what, r1.n_ids, r2.n_ids, same);
    hx_generate_result_free(&r1);
    hx_generate_result_free(&r2);
    printf("%s: %d/%d greedy ids the same; largest logit difference %.3g of the logits' scale (bound %.3g)\n", what,
           same, STEPS, worst, tol);
    hx_batch_free(&b);
}

int main(void) {
    int n_gpu = 0;
    hx_error e = {0};
    if (hx_cuda_device_count(&n_gpu, &e) || n_gpu < 1) {
        printf("SKIP: no CUDA device: %s\n", e.msg);
        return 77;
    }
    const struct { const char *preset; hx_mix mix; } models[] = {
        {"llama-3.2-1b", HX_MIX_Q4_0}, {"qwen3-0.6b", HX_MIX_Q4_K_M}, {"gemma-3-1b", HX_MIX_Q8_0}};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        char path[256], msg[512], what[128];
        snprintf(path, sizeof path, "/tmp/hx_test_pipe_cuda_%d_%s.gguf", (int)getpid(), models[k].preset);
        hx_synth_opts o = {.preset = hx_preset_find(models[k].preset), .mix = models[k].mix, .seed = 21 + (int)k,
                           .n_layer = 4, .n_vocab = 4096};
        if (hx_synth_write(&o, path, &e)) { CHECKF(0, "synth: %s", e.msg); continue; }
        hx_model *m1 = open_model(path, 0, 0, msg, sizeof msg);
        hx_context *one = m1 ? open_ctx(m1, false, msg, sizeof msg) : NULL;
        CHECKF(one != NULL, "%s: one GPU: %s", models[k].preset, msg);
        if (!one) { hx_model_free(m1); unlink(path); continue; }
        int V = hx_model_n_vocab(m1);
        double self = self_bound(one, V), tol = self * 4 > 1e-5 ? self * 4 : 1e-5;
        printf("%s: run-to-run difference on one GPU %.3g of the logits' scale\n", models[k].preset, self);
        /* both parts on GPU 0; then GPUs 0 and 1; then (gemma) -tp 2 falling back to the split */
        for (int mode = 0; mode < 3; mode++) {
            if (mode > 0 && n_gpu < 2) {
                printf("%s: split over two GPUs not run: one CUDA device\n", models[k].preset);
                break;
            }
            if (mode == 2 && strcmp(models[k].preset, "gemma-3-1b")) continue;
            hx_model *ms = open_model(path, mode == 2 ? 0 : 2, mode == 2 ? 2 : 0, msg, sizeof msg);
            hx_context *sp = ms ? open_ctx(ms, mode == 0, msg, sizeof msg) : NULL;
            const char *how = mode == 0 ? "layer split 2 on GPU 0"
                              : mode == 1 ? "layer split over GPUs 0,1"
                                          : "-tp 2 (one KV head: falls back to the layer split)";
            snprintf(what, sizeof what, "%s %s", models[k].preset, how);
            CHECKF(sp != NULL, "%s: %s", what, msg);
            if (sp) compare(what, one, sp, V, tol);
            hx_context_free(sp);
            hx_model_free(ms);
        }
        hx_context_free(one);
        hx_model_free(m1);
        unlink(path);
    }
    return t_done("test_pipe_cuda");
}
#else
int main(void) {
    printf("SKIP: this build has no CUDA backend (test_pipe_cuda runs on the device machine)\n");
    return 77;
}
#endif
