/* cmd_generate.c — helix-bg generate: text generation on the CPU or the GPU.
 *
 *   helix-bg generate -m FILE (--prompt-ids 1,2,3 | -p TEXT) [-n N] [-t N] [-c N]
 *                     [--kv f16|f32] [--exact] [--json] [--top2] [--dump DIR]
 *                     [--device auto|cpu|cuda] [-ngl N] [--chat] [--system TEXT]
 *
 * --device auto (default) runs on CUDA when this build has it and a GPU is
 * usable, else on the CPU (saying why on stderr); --device cuda fails instead
 * of falling back. -ngl N (llama.cpp's flag): N > 0 means cuda, 0 means cpu;
 * there is no partial offload. On CUDA, greedy decoding picks the token on the
 * GPU (one graph launch per token); so does sampling (the CPU's chain, top-k
 * 1..256; other settings copy the logits back and sample on the CPU).
 *
 * By default the CPU path rounds like llama.cpp (ggml_compat) so greedy
 * output matches it token for token; --exact uses plain f32 math instead.
 * Streams the decoded text to stdout, then prints load time, prompt tokens/s
 * and decode tokens/s to stderr. --json prints one object instead:
 * {prompt_ids, generated_ids, text, timings{load_s, prompt_tokens,
 * prompt_tok_per_s, gen_tokens, decode_tok_per_s}}. Stops at EOS/EOT.
 * -p TEXT is tokenized with the model's own tokenizer (BOS as the model adds
 * it, special tokens written in the text parsed); output is decoded with it,
 * holding back partial UTF-8 between tokens. Greedy by default (token-exact
 * comparisons); --temp > 0 turns on the sampling chain of run/sampler.h.
 * --top2 (with --json; on the GPU it brings every step's logits back): adds "top2": [[id1, logit1, id2, logit2], ...] per generated
 * token, to tell a near-tie from a real divergence when comparing with another engine.
 * --chat wraps -p TEXT as one user turn (after --system TEXT, if given) in the model's
 * chat template (tok/chat.h) and opens the assistant's turn. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "backend/cpu/forward.h"
#ifdef HX_HAVE_CUDA
#include "backend/cuda/cuda.h"
#endif
#include "cli.h"
#include "core/core.h"
#include "quant/quant.h"
#include "run/sampler.h"
#include "tok/chat.h"
#include "tok/tok.h"

/* GPT-2 byte-level: code point -> byte (inverse of bytes_to_unicode). */
static int gpt2_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp >= 256 && cp < 256 + 68) {
        int n = 0;
        for (int b = 0; b < 256; b++) {
            if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) continue;
            if (256 + n == (int)cp) return b;
            n++;
        }
    }
    return -1;
}

/* Append the bytes of token id to out (cap bytes). */
static size_t token_text(const hx_gguf_value *toks, bool gpt2, int id, char *out, size_t cap) {
    size_t len = 0;
    if (!toks || id < 0 || (uint64_t)id >= toks->arr.count) return 0;
    hx_gguf_str s = toks->arr.elems[id].str;
    if (!gpt2) {
        if (s.len == 6 && s.ptr[0] == '<' && s.ptr[1] == '0' && s.ptr[2] == 'x' && s.ptr[5] == '>') {
            char hex[3] = { s.ptr[3], s.ptr[4], 0 };
            if (cap > 0) out[len++] = (char)strtol(hex, NULL, 16);
            return len;
        }
        for (uint64_t i = 0; i < s.len && len < cap; i++) {
            if (i + 2 < s.len && (uint8_t)s.ptr[i] == 0xE2 && (uint8_t)s.ptr[i + 1] == 0x96 &&
                (uint8_t)s.ptr[i + 2] == 0x81) {
                out[len++] = ' ';
                i += 2;
            } else {
                out[len++] = s.ptr[i];
            }
        }
        return len;
    }
    for (uint64_t i = 0; i < s.len && len < cap;) {
        uint8_t c = (uint8_t)s.ptr[i];
        uint32_t cp;
        int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (i + n > s.len) break;
        if (n == 1) cp = c;
        else if (n == 2) cp = ((c & 0x1F) << 6) | (s.ptr[i + 1] & 0x3F);
        else if (n == 3) cp = ((c & 0x0F) << 12) | ((s.ptr[i + 1] & 0x3F) << 6) | (s.ptr[i + 2] & 0x3F);
        else cp = ((c & 0x07) << 18) | ((s.ptr[i + 1] & 0x3F) << 12) | ((s.ptr[i + 2] & 0x3F) << 6) | (s.ptr[i + 3] & 0x3F);
        int b = gpt2_byte(cp);
        if (b >= 0) out[len++] = (char)b;
        else for (int k = 0; k < n && len < cap; k++) out[len++] = s.ptr[i + k]; /* special tokens */
        i += n;
    }
    return len;
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

/* --chat: [system,] user TEXT in the template family that the file's tokenizer.chat_template names. */
static hx_status chat_prompt(const char *model, const char *system, const char *text, char **out, hx_error *e) {
    hx_gguf *g = NULL;
    hx_gguf_open_opts go = { 0 };
    if (hx_gguf_open(model, &go, &g, e) != HX_OK) return e->status;
    hx_gguf_str tmpl = { 0 };
    char *tc = hx_gguf_get_str(g, "tokenizer.chat_template", &tmpl) ? strndup(tmpl.ptr, (size_t)tmpl.len) : NULL;
    hx_chat_kind kind = hx_chat_detect(tc);
    free(tc);
    hx_gguf_close(g);
    hx_chat_msg msgs[2];
    size_t n = 0;
    if (system) msgs[n++] = (hx_chat_msg){ "system", system };
    msgs[n++] = (hx_chat_msg){ "user", text };
    return hx_chat_format(kind, msgs, n, true, out, e);
}

static int usage(void) {
    fprintf(stderr, "usage: helix-bg generate -m FILE (--prompt-ids 1,2,3 | -p TEXT) [-n N] [-t N] [-c N]\n"
                    "                         [--kv f16|f32] [--exact] [--json] [--dump DIR] [--stop STR]\n"
                    "                         [--device auto|cpu|cuda] [-ngl N] [--top2] [--chat] [--system TEXT]\n"
                    "  sampling (greedy unless --temp > 0): --temp T --top-k K --top-p P --min-p P\n"
                    "    --repeat-penalty R --repeat-last-n N --frequency-penalty F --presence-penalty P --seed S\n");
    return 2;
}

int cmd_generate(int argc, char **argv) {
    const char *model = NULL, *ids_arg = NULL, *text = NULL, *dump = NULL, *stop = NULL;
    int n_predict = 64, n_threads = 0, n_ctx = 0, kv = HX_TYPE_F16;
    bool json = false, exact = false, top2 = false, chat = false;
    const char *system = NULL;
    const char *device = "auto";
    hx_sampler_params sp = hx_sampler_defaults();
    sp.temp = 0; /* greedy unless asked */
    sp.repeat_penalty = 1.0f;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has = i + 1 < argc;
        if (!strcmp(a, "-m") && has) model = argv[++i];
        else if (!strcmp(a, "--temp") && has) sp.temp = (float)atof(argv[++i]);
        else if (!strcmp(a, "--top-k") && has) sp.top_k = atoi(argv[++i]);
        else if (!strcmp(a, "--top-p") && has) sp.top_p = (float)atof(argv[++i]);
        else if (!strcmp(a, "--min-p") && has) sp.min_p = (float)atof(argv[++i]);
        else if (!strcmp(a, "--repeat-penalty") && has) sp.repeat_penalty = (float)atof(argv[++i]);
        else if (!strcmp(a, "--repeat-last-n") && has) sp.penalty_last_n = atoi(argv[++i]);
        else if (!strcmp(a, "--frequency-penalty") && has) sp.freq_penalty = (float)atof(argv[++i]);
        else if (!strcmp(a, "--presence-penalty") && has) sp.presence_penalty = (float)atof(argv[++i]);
        else if (!strcmp(a, "--seed") && has) sp.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--stop") && has) stop = argv[++i];
        else if (!strcmp(a, "--prompt-ids") && has) ids_arg = argv[++i];
        else if (!strcmp(a, "-p") && has) text = argv[++i];
        else if (!strcmp(a, "-n") && has) n_predict = atoi(argv[++i]);
        else if (!strcmp(a, "-t") && has) n_threads = atoi(argv[++i]);
        else if (!strcmp(a, "-c") && has) n_ctx = atoi(argv[++i]);
        else if (!strcmp(a, "--dump") && has) dump = argv[++i];
        else if (!strcmp(a, "--kv") && has) {
            const char *k = argv[++i];
            if (!strcmp(k, "f16")) kv = HX_TYPE_F16;
            else if (!strcmp(k, "f32")) kv = HX_TYPE_F32;
            else return usage();
        } else if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--exact")) exact = true;
        else if (!strcmp(a, "--top2")) top2 = true;
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "--system") && has) system = argv[++i];
        else if (!strcmp(a, "--device") && has) device = argv[++i];
        else if (!strcmp(a, "-ngl") && has) device = atoi(argv[++i]) > 0 ? "cuda" : "cpu";
        else return usage();
    }
    if (!model || (!ids_arg == !text) || n_predict < 0 || sp.temp < 0 || sp.top_p <= 0 || sp.min_p < 0 ||
        sp.repeat_penalty <= 0 || (chat && !text) || (system && !chat))
        return usage();
    /* the model's tokenizer: for -p, and to decode the output */
    hx_error e = {0};
    hx_tok *tok = NULL;
    if (hx_tok_load_gguf(model, &tok, &e) != HX_OK) {
        if (text) { fprintf(stderr, "generate: %s\n", e.msg); return 1; }
        tok = NULL; /* --prompt-ids on a file without a usable tokenizer: decode from token strings */
    }
    int n_prompt = 0, cap = 16;
    int32_t *prompt = NULL;
    if (text) {
        size_t n_ids = 0;
        char *templated = NULL;
        if (chat && chat_prompt(model, system, text, &templated, &e) != HX_OK) {
            fprintf(stderr, "generate: --chat: %s\n", e.msg);
            hx_tok_free(tok);
            return 1;
        }
        const char *src = templated ? templated : text;
        hx_status st = hx_tok_encode(tok, src, strlen(src), true, true, &prompt, &n_ids, &e);
        free(templated);
        if (st != HX_OK) {
            fprintf(stderr, "generate: %s\n", e.msg);
            hx_tok_free(tok);
            return 1;
        }
        n_prompt = (int)n_ids;
    } else {
        prompt = malloc(sizeof(int32_t) * cap);
    }
    /* parse ids */
    for (const char *p = ids_arg; ids_arg && prompt && *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "generate: --prompt-ids: bad id at '%s'\n", p);
            free(prompt);
            hx_tok_free(tok);
            return 2;
        }
        if (n_prompt == cap) {
            int32_t *np = realloc(prompt, sizeof(int32_t) * (cap *= 2));
            if (!np) break;
            prompt = np;
        }
        prompt[n_prompt++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') { fprintf(stderr, "generate: --prompt-ids: expected ',' at '%s'\n", end); free(prompt); hx_tok_free(tok); return 2; }
    }
    if (!prompt || n_prompt == 0) { fprintf(stderr, "generate: empty prompt\n"); free(prompt); hx_tok_free(tok); return 2; }

    double t0 = hx_now_s();
    hx_model *m = NULL;
    hx_gguf_open_opts go = { .prefault = true };
    if (hx_model_load(model, &go, &m, &e) != HX_OK) { fprintf(stderr, "generate: %s\n", e.msg); free(prompt); hx_tok_free(tok); return 1; }
    if (n_ctx <= 0) {
        n_ctx = n_prompt + n_predict;
        if (n_ctx < 512) n_ctx = 512;
        if (m->cfg.n_ctx_train > 0 && n_ctx > m->cfg.n_ctx_train) n_ctx = m->cfg.n_ctx_train;
    }
    if (strcmp(device, "auto") && strcmp(device, "cpu") && strcmp(device, "cuda")) {
        fprintf(stderr, "generate: --device takes auto, cpu or cuda, not '%s'\n", device);
        hx_model_free(m); free(prompt); hx_tok_free(tok);
        return 2;
    }
    hx_cpu_ctx *c = NULL;
    void *gc = NULL; /* hx_cuda_ctx when running on the GPU */
#ifdef HX_HAVE_CUDA
    if (strcmp(device, "cpu")) {
        hx_cuda_opts go = { .device = -1, .n_ctx = n_ctx, .dump_dir = dump };
        hx_cuda_ctx *g = NULL;
        if (kv != HX_TYPE_F16) hx_err(&e, HX_ERR_UNSUPPORTED, "the CUDA KV cache is f16 (--kv f32 is CPU only)");
        else hx_cuda_ctx_new(m, &go, &g, &e);
        if (!g && !strcmp(device, "cuda")) {
            fprintf(stderr, "generate: --device cuda: %s\n", e.msg);
            hx_model_free(m); free(prompt); hx_tok_free(tok);
            return 1;
        }
        if (!g) fprintf(stderr, "generate: running on the CPU (%s)\n", e.msg);
        gc = g;
    }
#else
    if (!strcmp(device, "cuda")) {
        fprintf(stderr, "generate: --device cuda: this build has no CUDA backend (nvcc was not found at configure time)\n");
        hx_model_free(m); free(prompt); hx_tok_free(tok);
        return 1;
    }
#endif
    hx_cpu_opts o = { .n_ctx = n_ctx, .kv_type = kv, .kv_f32 = kv == HX_TYPE_F32, .ggml_compat = !exact, .n_threads = n_threads, .dump_dir = dump };
    if (!gc && hx_cpu_ctx_new(m, &o, &c, &e) != HX_OK) {
        fprintf(stderr, "generate: %s\n", e.msg);
        hx_model_free(m); free(prompt);
        return 1;
    }
    double t_load = hx_now_s() - t0;
    const hx_gguf_value *toks = hx_gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", HX_GGUF_STRING);
    hx_gguf_str tmodel = { 0 };
    bool gpt2 = hx_gguf_get_str(m->gguf, "tokenizer.ggml.model", &tmodel) && hx_gguf_str_eq(tmodel, "gpt2");
    uint64_t eos = UINT64_MAX, eot = UINT64_MAX;
    hx_gguf_get_u64(m->gguf, "tokenizer.ggml.eos_token_id", &eos);
    hx_gguf_get_u64(m->gguf, "tokenizer.ggml.eot_token_id", &eot);

    int V = m->cfg.n_vocab, rc = 0;
    float *logits = malloc(sizeof(float) * V);
    int32_t *gen = malloc(sizeof(int32_t) * (n_predict + 1));
    float (*t2)[4] = top2 ? calloc((size_t)n_predict + 1, sizeof *t2) : NULL; /* id1, logit1, id2, logit2 */
    size_t text_cap = 256 + (size_t)n_predict * 64, text_len = 0;
    char *out = malloc(text_cap);
    int n_gen = 0;
    double t_prompt = 0, t_decode = 0;
    hx_sampler *smp = hx_sampler_new(&sp, V);
    hx_tok_stream ts = {0};
    if (!logits || !gen || !out || !smp) { fprintf(stderr, "generate: out of memory\n"); rc = 1; goto done; }
    for (int i = 0; i < n_prompt; i++) hx_sampler_accept(smp, prompt[i]);
    double t1 = hx_now_s();
    if (cli_forward(c, gc, prompt, n_prompt, 0, logits, false, &e) != HX_OK) {
        fprintf(stderr, "generate: %s\n", e.msg);
        rc = 1;
        goto done;
    }
    t_prompt = hx_now_s() - t1;
    t1 = hx_now_s();
    int pos = n_prompt;
    /* plain argmax only without penalties: with them, --temp 0 picks the argmax
     * of the penalized logits (hx_sampler_sample), as llama.cpp does */
    bool greedy = sp.temp <= 0 && !hx_sampler_penalizes(&sp);
    int32_t t = greedy ? hx_argmax(logits, V) : hx_sampler_sample(smp, logits);
    for (int g = 0; g < n_predict; g++) {
        if ((uint64_t)t == eos || (uint64_t)t == eot || (tok && hx_tok_is_eog(tok, t))) break;
        if (t2) top2_of(logits, V, t2[n_gen]);
        gen[n_gen++] = t;
        hx_sampler_accept(smp, t);
        size_t room = text_cap - text_len - 1;
        size_t k = tok ? hx_tok_stream_push(tok, &ts, t, out + text_len, room) : token_text(toks, gpt2, t, out + text_len, room);
        if (k > room) k = room;
        if (!json) { fwrite(out + text_len, 1, k, stdout); fflush(stdout); }
        text_len += k;
        out[text_len] = 0;
        if (stop && *stop && strstr(out, stop)) break;
        if (g + 1 == n_predict) break;
        /* on the GPU only the token comes back, unless --top2 needs the logits */
        if (cli_decode_next(c, gc, smp, greedy, t2 != NULL, t, pos++, logits, V, &t, &e) != HX_OK) {
            fprintf(stderr, "\ngenerate: %s\n", e.msg);
            rc = 1;
            break;
        }
    }
    t_decode = hx_now_s() - t1;
    out[text_len] = 0;
    /* decode speed counts the forward passes run after the prompt */
    int n_dec = n_gen > 0 ? n_gen - 1 : 0;
    double pps = t_prompt > 0 ? n_prompt / t_prompt : 0, dps = t_decode > 0 && n_dec ? n_dec / t_decode : 0;
    if (json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "prompt_ids", cJSON_CreateIntArray(prompt, n_prompt));
        cJSON_AddItemToObject(j, "generated_ids", cJSON_CreateIntArray(gen, n_gen));
        cJSON_AddStringToObject(j, "text", out);
        if (t2) {
            cJSON *a = cJSON_AddArrayToObject(j, "top2");
            for (int k = 0; k < n_gen; k++) cJSON_AddItemToArray(a, cJSON_CreateFloatArray(t2[k], 4));
        }
        cJSON_AddStringToObject(j, "device", gc ? "cuda" : "cpu");
        cJSON *tm = cJSON_AddObjectToObject(j, "timings");
        cJSON_AddNumberToObject(tm, "load_s", t_load);
        cJSON_AddNumberToObject(tm, "prompt_tokens", n_prompt);
        cJSON_AddNumberToObject(tm, "prompt_tok_per_s", pps);
        cJSON_AddNumberToObject(tm, "gen_tokens", n_gen);
        cJSON_AddNumberToObject(tm, "decode_tok_per_s", dps);
        char *s = cJSON_PrintUnformatted(j);
        if (s) printf("%s\n", s);
        free(s);
        cJSON_Delete(j);
    } else {
        printf("\n");
    }
    fprintf(stderr, "%s | load %.3f s | prompt %d tokens, %.1f tok/s | decode %d tokens, %.1f tok/s\n",
            gc ? "cuda" : "cpu", t_load, n_prompt, pps, n_gen, dps);
done:
    hx_sampler_free(smp);
    hx_tok_free(tok);
    free(out); free(gen); free(t2); free(logits); free(prompt);
    hx_cpu_ctx_free(c);
#ifdef HX_HAVE_CUDA
    hx_cuda_ctx_free(gc);
#endif
    hx_model_free(m);
    return rc;
}
