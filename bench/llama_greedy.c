/* llama_greedy.c — the llama.cpp side of the real-model parity check (bench/real_models_compare.sh).
 * Links a llama.cpp build (peer, outside this repository) through its public C API only.
 *
 *   llama_greedy -m FILE (-p TEXT | --ids 1,2,3) [-n 64] [-t 2] [--tokenize]
 *                [--lora ADAPTER.gguf] [--lora-scaled ADAPTER.gguf S] ...
 *
 * --lora / --lora-scaled (repeatable, as llama-cli's) load GGUF LoRA adapters with
 * llama_adapter_lora_init and apply them all (scale 1, or S) with llama_set_adapters_lora
 * (bench/lora_llama_compare.sh).
 * -p TEXT is tokenized the way llama-tokenize / llama-simple do it (special tokens added as the
 * model asks, special tokens written in the text parsed). Prints one JSON object:
 *   {"prompt_ids":[..], "generated_ids":[..], "top2":[[id1,logit1,id2,logit2], ..]}
 * generated_ids are the argmax of the logits at each step (lowest id wins a tie), run until
 * n tokens or an end-of-generation token; top2 lets a divergence from another engine be judged
 * (near-tie or not). --tokenize stops after printing prompt_ids. Default context options
 * (f16 KV cache, flash attention as llama.cpp picks it), n_ctx = prompt + n rounded up to 512,
 * ubatches of 512 and llama-cli's sliding-window cache (swa_full off).
 * Env LLAMA_GREEDY_DUMP=DIR: during the prompt's decode (or the LLAMA_GREEDY_DUMP_STEP-th
 * single-token decode after it), each f32 graph tensor named attn_out-L,
 * ffn_out-L, l_out-L or result_norm (every named f32 tensor, as DIR/NAME@OP.f32, with LLAMA_GREEDY_DUMP_ALL=1)
 * is written whole as raw f32 to DIR/NAME.f32 (the last token's row is the tail), to set beside helix's
 * --dump files when locating a divergence. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

static const char *dump_dir;
static int n_decoded, dump_step; /* the llama_decode call to dump (0 = the prompt) */

static bool dump_cb(struct ggml_tensor *t, bool ask, void *ud) {
    (void)ud;
    const char *n = t->name;
    bool want = t->type == GGML_TYPE_F32 && n_decoded == dump_step && n[0] &&
                (getenv("LLAMA_GREEDY_DUMP_ALL") || !strncmp(n, "attn_out-", 9) || !strncmp(n, "ffn_out-", 8) || !strncmp(n, "l_out-", 6) ||
                 !strcmp(n, "result_norm"));
    if (ask) return want;
    if (!want || !ggml_is_contiguous(t)) return true;
    char path[1024];
    if (getenv("LLAMA_GREEDY_DUMP_ALL")) snprintf(path, sizeof path, "%s/%s@%s.f32", dump_dir, n, ggml_op_desc(t));
    else snprintf(path, sizeof path, "%s/%s.f32", dump_dir, n);
    FILE *f = fopen(path, "wb");
    if (!f) return true;
    fwrite(t->data, sizeof(float), (size_t)ggml_nelements(t), f);
    fclose(f);
    return true;
}

static bool no_progress(float p, void *ud) { (void)p; (void)ud; return true; }

#define MAX_LORA 8

static void print_ids(const char *key, const llama_token *v, int n) {
    printf("\"%s\":[", key);
    for (int i = 0; i < n; i++) printf("%s%d", i ? "," : "", v[i]);
    printf("]");
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *text = NULL, *ids = NULL;
    int n_gen = 64, n_threads = 2, tokenize_only = 0;
    const char *lora_path[MAX_LORA];
    float lora_scale[MAX_LORA];
    int n_lora = 0;
    for (int i = 1; i < argc; i++) {
        int has = i + 1 < argc;
        if (!strcmp(argv[i], "-m") && has) model_path = argv[++i];
        else if (!strcmp(argv[i], "-p") && has) text = argv[++i];
        else if (!strcmp(argv[i], "--ids") && has) ids = argv[++i];
        else if (!strcmp(argv[i], "-n") && has) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && has) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tokenize")) tokenize_only = 1;
        else if ((!strcmp(argv[i], "--lora") && has) || (!strcmp(argv[i], "--lora-scaled") && i + 2 < argc)) {
            if (n_lora == MAX_LORA) { fprintf(stderr, "llama_greedy: at most %d adapters\n", MAX_LORA); return 2; }
            int scaled = !strcmp(argv[i], "--lora-scaled");
            lora_path[n_lora] = argv[++i];
            lora_scale[n_lora++] = scaled ? strtof(argv[++i], NULL) : 1.0f;
        }
        else {
            fprintf(stderr, "usage: llama_greedy -m FILE (-p TEXT | --ids 1,2,3) [-n 64] [-t 2] [--tokenize]\n"
                            "                    [--lora ADAPTER.gguf] [--lora-scaled ADAPTER.gguf S] ...\n");
            return 2;
        }
    }
    if (!model_path || !text == !ids) { fprintf(stderr, "llama_greedy: need -m and one of -p / --ids\n"); return 2; }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.progress_callback = no_progress;
    struct llama_model *model = llama_model_load_from_file(model_path, mp);
    if (!model) { fprintf(stderr, "llama_greedy: cannot load %s\n", model_path); return 1; }
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n_vocab = llama_vocab_n_tokens(vocab);

    int n_prompt = 0;
    llama_token *prompt = NULL;
    if (text) {
        int len = (int)strlen(text);
        n_prompt = -llama_tokenize(vocab, text, len, NULL, 0, true, true);
        prompt = malloc(sizeof *prompt * (size_t)(n_prompt > 0 ? n_prompt : 1));
        if (llama_tokenize(vocab, text, len, prompt, n_prompt, true, true) != n_prompt) {
            fprintf(stderr, "llama_greedy: tokenize failed\n");
            return 1;
        }
    } else {
        prompt = malloc(sizeof *prompt * (strlen(ids) / 2 + 2));
        for (const char *p = ids; *p;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p) { fprintf(stderr, "llama_greedy: bad id at '%s'\n", p); return 2; }
            prompt[n_prompt++] = (llama_token)v;
            p = *end == ',' ? end + 1 : end;
        }
    }
    printf("{");
    print_ids("prompt_ids", prompt, n_prompt);
    if (tokenize_only || n_prompt == 0) { printf("}\n"); return 0; }

    struct llama_context_params cp = llama_context_default_params();
    int n_ctx = n_prompt + n_gen;
    cp.n_ctx = (uint32_t)((n_ctx + 511) / 512 * 512);
    /* the prompt in one llama_decode, split into ubatches of 512 as llama-cli does, and the
     * sliding-window cache of llama-cli (window + ubatch cells, swa_full off) rather than the
     * C API's default full-size one: helix keeps the same ring */
    cp.n_batch = (uint32_t)(n_prompt > 512 ? n_prompt : 512);
    cp.n_ubatch = 512;
    cp.swa_full = false;
    cp.n_threads = cp.n_threads_batch = n_threads;
    dump_dir = getenv("LLAMA_GREEDY_DUMP");
    dump_step = getenv("LLAMA_GREEDY_DUMP_STEP") ? atoi(getenv("LLAMA_GREEDY_DUMP_STEP")) : 0;
    if (dump_dir) { cp.cb_eval = dump_cb; cp.cb_eval_user_data = NULL; }
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) { fprintf(stderr, "llama_greedy: cannot create a context\n"); return 1; }
    struct llama_adapter_lora *lora[MAX_LORA];
    for (int i = 0; i < n_lora; i++) {
        lora[i] = llama_adapter_lora_init(model, lora_path[i]);
        if (!lora[i]) { fprintf(stderr, "llama_greedy: cannot load the LoRA adapter %s\n", lora_path[i]); return 1; }
    }
    if (n_lora && llama_set_adapters_lora(ctx, lora, (size_t)n_lora, lora_scale)) {
        fprintf(stderr, "llama_greedy: llama_set_adapters_lora failed\n");
        return 1;
    }

    llama_token *gen = malloc(sizeof *gen * (size_t)(n_gen + 1));
    float (*top)[4] = malloc(sizeof *top * (size_t)(n_gen + 1));
    int n_out = 0;
    struct llama_batch batch = llama_batch_get_one(prompt, n_prompt);
    llama_token next;
    while (n_out < n_gen) {
        if (llama_decode(ctx, batch)) { fprintf(stderr, "llama_greedy: decode failed\n"); return 1; }
        n_decoded++;
        const float *lg = llama_get_logits_ith(ctx, -1);
        int a = 0, b = -1;
        for (int v = 1; v < n_vocab; v++) {
            if (lg[v] > lg[a]) { b = a; a = v; }
            else if (b < 0 || lg[v] > lg[b]) b = v;
        }
        top[n_out][0] = (float)a; top[n_out][1] = lg[a];
        top[n_out][2] = (float)b; top[n_out][3] = lg[b];
        next = a;
        gen[n_out++] = next;
        if (llama_vocab_is_eog(vocab, next)) { n_out--; break; }  /* like helix: the EOG token is not listed */
        batch = llama_batch_get_one(&next, 1);
    }
    printf(",");
    print_ids("generated_ids", gen, n_out);
    printf(",\"top2\":[");
    for (int i = 0; i < n_out; i++)
        printf("%s[%d,%.6f,%d,%.6f]", i ? "," : "", (int)top[i][0], top[i][1], (int)top[i][2], top[i][3]);
    printf("]}\n");
    llama_free(ctx);
    for (int i = 0; i < n_lora; i++) llama_adapter_lora_free(lora[i]);
    llama_model_free(model);
    free(gen); free(top); free(prompt);
    return 0;
}
