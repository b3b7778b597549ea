/* cmd_generate.c — helix-bg generate: text from a prompt, a client of helix.h.
 *
 * The prompt is -p TEXT (tokenized with BOS as the model asks, special-token
 * text parsed), or --chat -p TEXT (one user turn after an optional --system
 * turn, in the model's chat template, the assistant's turn opened), or exact
 * ids with --prompt-ids. Greedy unless --temp > 0. Streams the text to stdout,
 * ends it with a newline, then prints the device, load time and prompt/decode
 * speeds to stderr. --json prints one object instead:
 *   {prompt_ids, generated_ids, text, [top2], device, stop,
 *    timings{load_s, prompt_tokens, prompt_tok_per_s, gen_tokens, decode_tok_per_s}}
 * --top2 adds [id1, logit1, id2, logit2] of every step (to tell a near-tie
 * from a real divergence when comparing with another engine); it runs its own
 * decode loop over hx_decode so the logits come back from the GPU each step.
 * --dump DIR writes per-layer activations (helix_dev.h, through cli_context_new). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "cli_lora.h"
#include "cli_sampling.h"

#define CMD "generate"

typedef struct gen_opts {
    const char *model, *prompt, *prompt_ids, *system, *dump;
    bool chat, json, top2, exact;
    int n_predict, n_ctx, n_threads, kv; /* kv: index into kv_names */
    cli_device dev;
    cli_strs stop;
    hx_sampler_params sp;
} gen_opts;

static const char *const kv_names[] = {"f16", "f32", NULL};

/* What a run produced, whichever loop made it. */
typedef struct gen_out {
    char *text;
    int32_t *ids;
    int n_ids;
    float (*top2)[4]; /* id1, logit1, id2, logit2 per generated token */
    const char *stop;
    double prefill_tps, decode_tps;
} gen_out;

static volatile int g_cancel; /* Ctrl-C: stop at the next token and print what there is */
static void on_sigint(int sig) {
    (void)sig;
    g_cancel = 1;
}

typedef struct stream { char last; } stream;
static bool print_text(const char *text, size_t len, void *user) {
    if (!len) return true;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    ((stream *)user)->last = text[len - 1];
    return true;
}

static const char *stop_name(hx_stop_reason r) {
    switch (r) {
    case HX_STOP_EOG: return "eog";
    case HX_STOP_LENGTH: return "length";
    case HX_STOP_STRING: return "stop_string";
    case HX_STOP_CONTEXT: return "context";
    case HX_STOP_CANCELLED: return "cancelled";
    }
    return "unknown";
}

/* The two largest logits (lowest id first on ties) as {id1, logit1, id2, logit2}. */
static void top2_of(const float *l, int V, float out[4]) {
    int a = 0, b = -1;
    for (int v = 1; v < V; v++) {
        if (l[v] > l[a]) { b = a; a = v; }
        else if (b < 0 || l[v] > l[b]) b = v;
    }
    out[0] = (float)a; out[1] = l[a]; out[2] = (float)b; out[3] = b >= 0 ? l[b] : 0;
}

/* --top2: the decode loop over hx_decode, one token at a time with its logits. */
static hx_status run_top2(hx_context *ctx, const gen_opts *o, const int32_t *prompt, int n_prompt, gen_out *out,
                          hx_error *e) {
    const hx_model *m = hx_context_model(ctx);
    int V = hx_model_n_vocab(m), room = hx_context_n_ctx_seq(ctx) - n_prompt;
    int max = o->n_predict < 0 || o->n_predict > room ? room : o->n_predict;
    hx_status s = HX_OK;
    hx_batch b = hx_batch_init(n_prompt);
    hx_sampler *smp = hx_sampler_new(&o->sp, V);
    hx_detok *dt = hx_detok_new(m, false);
    size_t cap = 1024, len = 0;
    out->text = malloc(cap);
    out->ids = malloc(sizeof(int32_t) * (size_t)(max + 1));
    out->top2 = calloc((size_t)max + 1, sizeof *out->top2);
    out->stop = "length";
    if (!b.capacity || !smp || !dt || !out->text || !out->ids || !out->top2) {
        snprintf(e->msg, sizeof e->msg, "out of memory");
        s = e->status = HX_ERR_NOMEM;
        goto done;
    }
    out->text[0] = 0;
    for (int i = 0; i < n_prompt; i++) {
        hx_batch_add(&b, prompt[i], i, 0, i == n_prompt - 1);
        hx_sampler_accept(smp, prompt[i]);
    }
    double t0 = cli_now();
    if ((s = hx_decode(ctx, &b, e))) goto done;
    double t1 = cli_now();
    out->prefill_tps = n_prompt / (t1 - t0);
    int pos = n_prompt;
    for (int g = 0; g < max; g++) {
        const float *logits = hx_get_logits(ctx, -1);
        int32_t t = hx_sampler_sample(smp, logits);
        if (hx_token_is_eog(m, t)) { out->stop = "eog"; break; }
        top2_of(logits, V, out->top2[out->n_ids]);
        out->ids[out->n_ids++] = t;
        hx_sampler_accept(smp, t);
        const char *piece = hx_detok_push(dt, t);
        size_t k = strlen(piece);
        if (len + k + 1 > cap) {
            char *nt = realloc(out->text, cap = 2 * (len + k + 1));
            if (!nt) { snprintf(e->msg, sizeof e->msg, "out of memory"); s = e->status = HX_ERR_NOMEM; goto done; }
            out->text = nt;
        }
        memcpy(out->text + len, piece, k + 1);
        len += k;
        char *hit = NULL;
        for (int j = 0; j < o->stop.n && !hit; j++) hit = *o->stop.v[j] ? strstr(out->text, o->stop.v[j]) : NULL;
        if (hit) { *hit = 0; out->stop = "stop_string"; break; }
        if (g_cancel) { out->stop = "cancelled"; break; }
        if (g + 1 == max) { out->stop = max == room ? "context" : "length"; break; }
        hx_batch_clear(&b);
        hx_batch_add(&b, t, pos++, 0, true);
        if ((s = hx_decode(ctx, &b, e))) goto done;
    }
    double t2 = cli_now();
    out->decode_tps = out->n_ids > 1 ? (out->n_ids - 1) / (t2 - t1) : 0;
done:
    hx_detok_free(dt);
    hx_sampler_free(smp);
    hx_batch_free(&b);
    return s;
}

/* The prompt as ids: --prompt-ids as given, else the text (in the chat
 * template with --chat) tokenized as hx_generate would. */
static int32_t *prompt_ids(hx_model *m, const gen_opts *o, int *n) {
    int32_t *ids = NULL;
    if (o->prompt_ids) {
        if (!cli_parse_int_list(CMD, "--prompt-ids", o->prompt_ids, 0, hx_model_n_vocab(m) - 1, &ids, n)) return NULL;
        return ids;
    }
    hx_error e = {0};
    char *templated = NULL;
    const char *text = o->prompt;
    if (o->chat) {
        hx_chat_message msgs[2];
        int k = 0;
        if (o->system) msgs[k++] = (hx_chat_message){"system", o->system};
        msgs[k++] = (hx_chat_message){"user", o->prompt};
        if (hx_chat_apply(m, msgs, k, true, &templated, &e)) {
            fprintf(stderr, "helix-bg " CMD ": --chat: %s\n", e.msg);
            return NULL;
        }
        text = templated;
    }
    int need = 0;
    hx_status s = hx_tokenize(m, text, -1, true, true, NULL, 0, &need, &e);
    if (s == HX_ERR_RANGE || s == HX_OK) {
        ids = malloc(sizeof(int32_t) * (size_t)(need > 0 ? need : 1));
        s = ids ? hx_tokenize(m, text, -1, true, true, ids, need, n, &e) : HX_ERR_NOMEM;
        if (!ids) snprintf(e.msg, sizeof e.msg, "out of memory");
    }
    hx_free(templated);
    if (s) {
        fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
        free(ids);
        return NULL;
    }
    if (*n == 0) {
        fprintf(stderr, "helix-bg " CMD ": the prompt has no tokens\n");
        free(ids);
        return NULL;
    }
    return ids;
}

static void print_json(const gen_opts *o, const hx_model *m, const int32_t *prompt, int n_prompt, const gen_out *r,
                       double load_s) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "prompt_ids", cJSON_CreateIntArray(prompt, n_prompt));
    cJSON_AddItemToObject(j, "generated_ids", cJSON_CreateIntArray(r->ids, r->n_ids));
    cJSON_AddStringToObject(j, "text", r->text ? r->text : "");
    if (o->top2) {
        cJSON *a = cJSON_AddArrayToObject(j, "top2");
        for (int k = 0; k < r->n_ids; k++) cJSON_AddItemToArray(a, cJSON_CreateFloatArray(r->top2[k], 4));
    }
    cJSON_AddStringToObject(j, "device", hx_model_device(m) == HX_DEVICE_CUDA ? "cuda" : "cpu");
    cJSON_AddStringToObject(j, "stop", r->stop);
    cJSON *tm = cJSON_AddObjectToObject(j, "timings");
    cJSON_AddNumberToObject(tm, "load_s", load_s);
    cJSON_AddNumberToObject(tm, "prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(tm, "prompt_tok_per_s", r->prefill_tps);
    cJSON_AddNumberToObject(tm, "gen_tokens", r->n_ids);
    cJSON_AddNumberToObject(tm, "decode_tok_per_s", r->decode_tps);
    char *s = cJSON_PrintUnformatted(j);
    if (s) printf("%s\n", s);
    free(s);
    cJSON_Delete(j);
}

int cmd_generate(int argc, char **argv) {
    gen_opts o = {.n_predict = 64, .dev = {.ngl = -2}, .sp = hx_sampler_defaults()};
    o.sp.temp = 0; /* greedy unless asked: token-exact comparisons */
    const cli_opt opts[] = {
        {CLI_STR, "-m|--model", &o.model, "FILE", "model: a .gguf file or a Hugging Face folder", 0, 0, NULL},
        {CLI_STR, "-p|--prompt", &o.prompt, "TEXT", "prompt text (BOS as the model asks, special tokens parsed)", 0, 0, NULL},
        {CLI_STR, "--prompt-ids", &o.prompt_ids, "1,2,3", "exact prompt token ids instead of -p", 0, 0, NULL},
        {CLI_BOOL, "--chat", &o.chat, NULL, "-p is a user turn in the model's chat template", 0, 0, NULL},
        {CLI_STR, "--system", &o.system, "TEXT", "a system turn before it (with --chat)", 0, 0, NULL},
        {CLI_INT, "-n|--n-predict", &o.n_predict, "N", "tokens to generate, -1 = until end of generation or context",
         -1, 1 << 30, NULL},
        {CLI_STRS, "--stop", &o.stop, "STR", "stop before this text (repeatable)", 0, 0, NULL},
        {CLI_BOOL, "--json", &o.json, NULL, "one JSON object on stdout instead of the text", 0, 0, NULL},
        {CLI_BOOL, "--top2", &o.top2, NULL, "with --json: the two best ids and logits of every step", 0, 0, NULL},
        {CLI_SECTION, NULL, NULL, NULL, "model and context:", 0, 0, NULL},
        {CLI_CHOICE, "--device", &o.dev.device, NULL, "where to run; cuda fails instead of falling back", 0, 0,
         cli_device_names},
        {CLI_INT, "-ngl|--n-gpu-layers", &o.dev.ngl, "N", "llama.cpp's flag: 0 = cpu, more = cuda (all layers; "
         "no partial offload) (default: as --device)", 0, 1 << 20, NULL},
        {CLI_INT, "-tp|--tensor-split", &o.dev.tp, "N", "split every layer over N GPUs (tensor parallelism over NCCL; "
         "heads, FFN and vocabulary cut N ways) (default 1)", 1, 8, NULL},
        CLI_SPLIT_OPTS(o.dev),
        {CLI_INT, "-c|--ctx-size", &o.n_ctx, "N", "context positions, 0 = prompt + -n (at least 512, at most "
         "the model's)", 0, 1 << 24, NULL},
        {CLI_INT, "-t|--threads", &o.n_threads, "N", "CPU threads, 0 = all", 0, 4096, NULL},
        {CLI_CHOICE, "--kv", &o.kv, NULL, "KV cache type (f32: CPU only)", 0, 0, kv_names},
        {CLI_BOOL, "--exact", &o.exact, NULL, "CPU: plain f32 arithmetic instead of llama.cpp's rounding", 0, 0, NULL},
        {CLI_STR, "--dump", &o.dump, "DIR", "write per-layer activations of the run here", 0, 0, NULL},
        CLI_SAMPLING_OPTS(o.sp),
        {CLI_END, NULL, NULL, NULL, NULL, 0, 0, NULL},
    };
    cli_lora_list lora = {0};
    if (cli_lora_strip(&argc, argv, &lora)) return 2;
    int pr = cli_parse(CMD, CMD " -m FILE (-p TEXT | --prompt-ids 1,2,3) [options]",
                       "Streams the text to stdout and the speeds to stderr. Greedy by default.\n"
                       "LoRA: --lora FILE, --lora-scaled FILE SCALE (repeatable; GGUF adapter or PEFT folder).\n",
                       opts, argc, argv);
    if (pr) return pr == 1 ? 0 : 2;
    if (!o.model) return cli_usage_error(CMD, "-m FILE is required (see helix-bg " CMD " --help)");
    if (!o.prompt == !o.prompt_ids) return cli_usage_error(CMD, "give exactly one of -p TEXT and --prompt-ids");
    if (o.chat && !o.prompt) return cli_usage_error(CMD, "--chat needs -p TEXT");
    if (o.system && !o.chat) return cli_usage_error(CMD, "--system needs --chat");
    if (o.top2 && !o.json) return cli_usage_error(CMD, "--top2 needs --json");

    double load_s = 0;
    hx_model *m = cli_model_open(CMD, o.model, &o.dev, &load_s);
    if (!m) return 1;
    int rc = 1, n_prompt = 0;
    hx_context *ctx = NULL;
    gen_out r = {0};
    hx_generate_result res = {0};
    hx_error e = {0};
    hx_adapter *adapters[CLI_MAX_LORA] = {0};
    int32_t *prompt = prompt_ids(m, &o, &n_prompt);
    if (!prompt) { rc = o.prompt_ids ? 2 : 1; goto done; }

    hx_context_params cp = hx_context_default_params();
    int train = hx_model_n_ctx_train(m);
    cp.n_ctx = o.n_ctx;
    if (cp.n_ctx == 0) {
        int want = n_prompt + (o.n_predict >= 0 ? o.n_predict : 4096);
        cp.n_ctx = want < 512 ? 512 : want;
        if (train > 0 && cp.n_ctx > train) cp.n_ctx = train;
    }
    if (n_prompt >= cp.n_ctx) {
        fprintf(stderr, "helix-bg " CMD ": the prompt (%d tokens) does not fit the context of %d (-c)\n", n_prompt,
                cp.n_ctx);
        goto done;
    }
    cp.n_threads = o.n_threads;
    cp.kv_f32 = o.kv == 1;
    cp.exact = o.exact;
    if (cp.n_batch < n_prompt) cp.n_batch = n_prompt;
    double t0 = cli_now();
    if (!(ctx = cli_context_new(CMD, m, &cp, o.dump))) goto done;
    if (lora.n && cli_lora_apply(m, ctx, &lora, adapters, &e)) {
        fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
        goto done;
    }
    load_s += cli_now() - t0;

    hx_status st;
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_sigint;
    sigaction(SIGINT, &sa, &old);
    stream so = {'\n'};
    if (o.top2) {
        st = run_top2(ctx, &o, prompt, n_prompt, &r, &e);
    } else {
        hx_generate_params gp = hx_generate_default_params();
        gp.prompt_ids = prompt;
        gp.n_prompt_ids = n_prompt;
        gp.max_tokens = o.n_predict;
        gp.sampling = o.sp;
        gp.stop = o.stop.v;
        gp.n_stop = o.stop.n;
        gp.cancel = &g_cancel;
        if (!o.json) {
            gp.on_text = print_text;
            gp.user = &so;
        }
        st = hx_generate(ctx, &gp, &res, &e);
        r.text = res.text;
        r.ids = res.ids;
        r.n_ids = res.n_ids;
        r.stop = stop_name(res.stop);
        r.prefill_tps = res.metrics.prefill_tok_per_s;
        r.decode_tps = res.metrics.decode_tok_per_s;
    }
    sigaction(SIGINT, &old, NULL);
    if (st) {
        if (so.last != '\n') putchar('\n');
        fprintf(stderr, "helix-bg " CMD ": %s\n", e.msg);
        goto done;
    }
    if (o.json) print_json(&o, m, prompt, n_prompt, &r, load_s);
    else if (so.last != '\n') putchar('\n'); /* the text ends with a newline before the statistics */
    fflush(stdout);
    fprintf(stderr, "%s | load %.3f s | prompt %d tokens, %.1f tok/s | decode %d tokens, %.1f tok/s%s\n",
            hx_model_device(m) == HX_DEVICE_CUDA ? "cuda" : "cpu", load_s, n_prompt, r.prefill_tps, r.n_ids,
            r.decode_tps, g_cancel ? " | interrupted" : "");
    rc = 0;
done:
    if (o.top2) {
        free(r.text);
        free(r.ids);
    }
    free(r.top2);
    hx_generate_result_free(&res);
    free(prompt);
    hx_context_free(ctx);
    for (int k = 0; k < lora.n; k++) hx_adapter_free(adapters[k]);
    hx_model_free(m);
    return rc;
}
