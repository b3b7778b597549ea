/* oai.c — the OpenAI wire format: request bodies in, response bodies out.
 *
 * Parsing is strict about types (a wrong type is a 400 naming the field) and
 * lenient about fields it does not know (OpenAI clients send many). Every
 * string that reaches the model is valid UTF-8 (the body is checked first),
 * and every string written back is too (token pieces are sanitized). */
#include "serve.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "helix_kb.h"

/* ------------------------------------------------------------------------ */
/* errors                                                                   */
/* ------------------------------------------------------------------------ */

const char *oai_error_type(int status) {
    switch (status) {
    case 400: case 404: case 405: case 413: return "invalid_request_error";
    case 401: return "authentication_error";
    case 429: return "rate_limit_error";
    case 501: return "not_implemented_error";
    case 503: return "unavailable_error";
    default: return "server_error";
    }
}

char *oai_error_json(const char *message, const char *type, const char *code) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    char *m = utf8_sanitize(message, strlen(message));
    cJSON_AddStringToObject(e, "message", m ? m : "error");
    free(m);
    cJSON_AddStringToObject(e, "type", type);
    if (code) cJSON_AddStringToObject(e, "code", code);
    else cJSON_AddNullToObject(e, "code");
    cJSON_AddNullToObject(e, "param");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static int fail(oai_err *err, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(oai_err *err, int status, const char *code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    return status;
}

/* ------------------------------------------------------------------------ */
/* field readers: absent -> default, wrong type -> 400                      */
/* ------------------------------------------------------------------------ */

static cJSON *field(const cJSON *o, const char *name) {
    cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);
    return (f && !cJSON_IsNull(f)) ? f : NULL;
}

static int get_num(const cJSON *o, const char *name, double lo, double hi, double *out, oai_err *err) {
    cJSON *f = field(o, name);
    if (!f) return 0;
    if (!cJSON_IsNumber(f) || !isfinite(f->valuedouble))
        return fail(err, 400, "invalid_type", "'%s' must be a number", name);
    if (f->valuedouble < lo || f->valuedouble > hi)
        return fail(err, 400, "invalid_value", "'%s' is %g; it must be in [%g, %g]", name, f->valuedouble, lo, hi);
    *out = f->valuedouble;
    return 0;
}

static int get_int(const cJSON *o, const char *name, double lo, double hi, long long *out, oai_err *err) {
    cJSON *f = field(o, name);
    if (!f) return 0;
    if (!cJSON_IsNumber(f) || f->valuedouble != floor(f->valuedouble))
        return fail(err, 400, "invalid_type", "'%s' must be an integer", name);
    if (f->valuedouble < lo || f->valuedouble > hi)
        return fail(err, 400, "invalid_value", "'%s' is %.0f; it must be in [%.0f, %.0f]", name, f->valuedouble, lo, hi);
    *out = (long long)f->valuedouble;
    return 0;
}

static int get_bool(const cJSON *o, const char *name, bool *out, oai_err *err) {
    cJSON *f = field(o, name);
    if (!f) return 0;
    if (!cJSON_IsBool(f)) return fail(err, 400, "invalid_type", "'%s' must be true or false", name);
    *out = cJSON_IsTrue(f);
    return 0;
}

/* A string that must be valid UTF-8 (cJSON decodes \u escapes itself). */
static int check_str(const char *name, const char *s, oai_err *err) {
    if (!utf8_valid(s, strlen(s))) return fail(err, 400, "invalid_value", "'%s' is not valid UTF-8", name);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* common parts of chat and completions                                     */
/* ------------------------------------------------------------------------ */

static cJSON *parse_body(const char *body, size_t len, oai_err *err, int *status) {
    *status = 0;
    size_t ok = utf8_valid_prefix(body, len);
    if (ok != len) { *status = fail(err, 400, "invalid_encoding", "the request body is not valid UTF-8 (byte %zu)", ok); return NULL; }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!root) {
        size_t at = end && end >= body ? (size_t)(end - body) : 0;
        *status = fail(err, 400, "invalid_json", "the request body is not valid JSON (near byte %zu)", at);
        return NULL;
    }
    /* only whitespace may follow */
    for (const char *p = end; p && p < body + len; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            cJSON_Delete(root);
            *status = fail(err, 400, "invalid_json", "the request body has bytes after its JSON value (byte %zu)",
                           (size_t)(p - body));
            return NULL;
        }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        *status = fail(err, 400, "invalid_json", "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

/* The "model" field, when given, must name a model this server has. */
static const char *base_name(const char *p) {
    const char *b = strrchr(p, '/');
    return b ? b + 1 : p;
}

static bool model_matches(const char *want, const char *id, const char *path) {
    if (!id || !id[0]) return false;
    return !strcmp(want, id) || (path && (!strcmp(want, path) || !strcmp(want, base_name(path))));
}

static int check_model(srv *s, const cJSON *root, oai_err *err) {
    cJSON *m = field(root, "model");
    if (!m) return 0;
    if (!cJSON_IsString(m)) return fail(err, 400, "invalid_type", "'model' must be a string");
    if (s && m->valuestring[0] && !model_matches(m->valuestring, s->model_id, s->cfg.model_path))   /* "": the default */
        return fail(err, 404, "model_not_found", "the model '%.200s' does not exist; this server has '%.150s'",
                    m->valuestring, s->model_id);
    return 0;
}

/* Tokenize text (add_special: BOS as the model asks). */
static int tokenize(const hx_model *m, const char *text, bool add_special, int32_t **ids, int *n, oai_err *err) {
    size_t len = strlen(text);
    if (len > (size_t)INT32_MAX / 2) return fail(err, 413, "request_too_large", "the prompt is too long");
    int cap = (int)len + 8;
    for (int tries = 0; tries < 2; tries++) {
        int32_t *buf = malloc((size_t)cap * sizeof *buf);
        if (!buf) return fail(err, 500, "out_of_memory", "out of memory tokenizing %zu bytes", len);
        int n_out = 0;
        hx_error e = {0};
        hx_status st = hx_tokenize(m, text, (ptrdiff_t)len, add_special, true, buf, cap, &n_out, &e);
        if (st == HX_OK) { *ids = buf; *n = n_out; return 0; }
        free(buf);
        if (st != HX_ERR_RANGE || n_out <= cap) return fail(err, 400, "invalid_value", "tokenizing failed: %s", e.msg);
        cap = n_out;
    }
    return fail(err, 500, "server_error", "tokenizing failed");
}

static const struct { const char *name; unsigned bit; } json_types[] = {
    {"string", JG_T_STRING}, {"number", JG_T_NUMBER}, {"integer", JG_T_INTEGER}, {"boolean", JG_T_BOOLEAN},
    {"null", JG_T_NULL}, {"array", JG_T_ARRAY}, {"object", JG_T_OBJECT},
};

static int type_bits(const cJSON *ty, const char *key, unsigned *out, oai_err *err) {
    *out = 0;
    if (!ty) return 0;
    int n = cJSON_IsString(ty) ? 1 : cJSON_IsArray(ty) ? cJSON_GetArraySize(ty) : -1;
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_IsString(ty) ? ty : cJSON_GetArrayItem(ty, i);
        unsigned bit = 0;
        for (size_t k = 0; cJSON_IsString(e) && k < sizeof json_types / sizeof json_types[0]; k++)
            if (!strcmp(e->valuestring, json_types[k].name)) bit = json_types[k].bit;
        if (!bit) n = -1;
        else *out |= bit;
    }
    if (n < 0) return fail(err, 400, "invalid_value", "json_schema: the type of '%.64s' is not a JSON type or a list of them", key);
    return 0;
}

/* response_format.json_schema: the top-level keys (the required ones when
 * "required" is given, else all, in the order of "properties") and their
 * types become the grammar's schema. Nested schemas are not enforced. */
static int parse_schema(const cJSON *js, srv_req *r, oai_err *err) {
    const cJSON *sc = js && cJSON_IsObject(js) ? field(js, "schema") : NULL;
    if (!sc) return 0;
    if (!cJSON_IsObject(sc)) return fail(err, 400, "invalid_type", "'response_format.json_schema.schema' must be an object");
    const cJSON *ty = field(sc, "type");
    if (ty && !(cJSON_IsString(ty) && !strcmp(ty->valuestring, "object")))
        return fail(err, 400, "unsupported_value", "json_schema: only an object at the top level is supported");
    const cJSON *props = field(sc, "properties"), *req = field(sc, "required");
    if (!props) return 0;
    if (!cJSON_IsObject(props)) return fail(err, 400, "invalid_type", "json_schema: 'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return fail(err, 400, "invalid_type", "json_schema: 'required' must be an array");
    jg_schema *g = calloc(1, sizeof *g);
    if (!g) return fail(err, 500, "out_of_memory", "out of memory");
    r->schema = g;
    for (const cJSON *p = props->child; p; p = p->next) {
        const char *k = p->string ? p->string : "";
        bool wanted = !req;
        for (const cJSON *q = req ? req->child : NULL; q; q = q->next)
            if (cJSON_IsString(q) && !strcmp(q->valuestring, k)) wanted = true;
        if (!wanted) continue;
        size_t l = strlen(k);
        bool plain = l > 0 && l <= JG_MAX_KEY && utf8_valid(k, l);
        for (size_t i = 0; i < l; i++)
            if ((unsigned char)k[i] < 0x20 || k[i] == '"' || k[i] == '\\') plain = false;
        if (!plain)
            return fail(err, 400, "unsupported_value",
                        "json_schema: key '%.64s' must be 1..%d bytes without quotes, backslashes or control characters",
                        k, JG_MAX_KEY);
        if (g->n == JG_MAX_KEYS) return fail(err, 400, "unsupported_value", "json_schema: at most %d keys", JG_MAX_KEYS);
        unsigned bits;
        int st = type_bits(cJSON_IsObject(p) ? field(p, "type") : NULL, k, &bits, err);
        if (st) return st;
        memcpy(g->key[g->n], k, l + 1);
        g->klen[g->n] = (uint8_t)l;
        g->types[g->n] = (uint8_t)bits;
        g->tail += (int)l + 8;   /* ,"key":value with a value of at most 4 bytes */
        g->n++;
    }
    return 0;
}

/* Sampling, limits, stop strings, logit bias: the fields chat and completions share. */
static int parse_sampling(srv *s, const cJSON *root, srv_req *r, oai_err *err) {
    int st;
    double v;
    long long iv;
    r->sp = hx_sampler_defaults();
    r->sp.penalty_last_n = 64;
    v = r->sp.temp;
    if ((st = get_num(root, "temperature", 0, 100, &v, err))) return st;
    r->sp.temp = (float)v;
    v = r->sp.top_p;
    if ((st = get_num(root, "top_p", 0, 1, &v, err))) return st;
    r->sp.top_p = (float)v;
    v = r->sp.min_p;
    if ((st = get_num(root, "min_p", 0, 1, &v, err))) return st;
    r->sp.min_p = (float)v;
    iv = r->sp.top_k;
    if ((st = get_int(root, "top_k", 0, 1e9, &iv, err))) return st;
    r->sp.top_k = (int)iv;
    v = 0;
    if ((st = get_num(root, "presence_penalty", -2, 2, &v, err))) return st;
    r->sp.presence_penalty = (float)v;
    v = 0;
    if ((st = get_num(root, "frequency_penalty", -2, 2, &v, err))) return st;
    r->sp.freq_penalty = (float)v;
    v = r->sp.repeat_penalty;
    if ((st = get_num(root, "repeat_penalty", 0, 10, &v, err))) return st;
    r->sp.repeat_penalty = (float)v;
    iv = -1;
    if ((st = get_int(root, "seed", -9.2e18, 9.2e18, &iv, err))) return st;
    static uint64_t seed_counter;
    r->sp.seed = iv >= 0 ? (uint64_t)iv
                         : (uint64_t)time(NULL) * 6364136223846793005ull + __atomic_add_fetch(&seed_counter, 1, __ATOMIC_RELAXED);

    long long n = 1;
    if ((st = get_int(root, "n", 1, 128, &n, err))) return st;
    if (n != 1) return fail(err, 400, "unsupported_value", "'n' must be 1 (one choice per request)");

    long long mt = -1;
    if ((st = get_int(root, "max_tokens", 1, 1e9, &mt, err))) return st;
    if ((st = get_int(root, "max_completion_tokens", 1, 1e9, &mt, err))) return st;
    int ceiling = s ? s->n_ctx_seq : 1 << 20;
    if (s && s->cfg.max_tokens > 0 && s->cfg.max_tokens < ceiling) ceiling = s->cfg.max_tokens;
    r->max_tokens = (mt < 0 || mt > ceiling) ? ceiling : (int)mt;

    /* stop: a string or up to 16 strings */
    cJSON *stop = field(root, "stop");
    if (stop) {
        int k = cJSON_IsString(stop) ? 1 : cJSON_IsArray(stop) ? cJSON_GetArraySize(stop) : -1;
        if (k < 0) return fail(err, 400, "invalid_type", "'stop' must be a string or an array of strings");
        if (k > 16) return fail(err, 400, "invalid_value", "'stop' has %d strings; at most 16", k);
        r->stop = calloc((size_t)k + 1, sizeof *r->stop);
        if (!r->stop) return fail(err, 500, "out_of_memory", "out of memory");
        for (int i = 0; i < k; i++) {
            cJSON *e = cJSON_IsString(stop) ? stop : cJSON_GetArrayItem(stop, i);
            if (!cJSON_IsString(e)) return fail(err, 400, "invalid_type", "'stop[%d]' must be a string", i);
            size_t l = strlen(e->valuestring);
            if (l == 0) continue;
            if (l > 256) return fail(err, 400, "invalid_value", "'stop[%d]' is %zu bytes; at most 256", i, l);
            if ((st = check_str("stop", e->valuestring, err))) return st;
            r->stop[r->n_stop++] = strdup(e->valuestring);
        }
    }

    /* logit_bias: {"token id": bias in [-100, 100]}; -100 bans the token */
    cJSON *lb = field(root, "logit_bias");
    if (lb) {
        if (!cJSON_IsObject(lb)) return fail(err, 400, "invalid_type", "'logit_bias' must be an object");
        int k = cJSON_GetArraySize(lb);
        if (k > 1024) return fail(err, 400, "invalid_value", "'logit_bias' has %d entries; at most 1024", k);
        r->bias = calloc((size_t)k + 1, sizeof *r->bias);
        if (!r->bias) return fail(err, 500, "out_of_memory", "out of memory");
        int i = 0;
        for (cJSON *e = lb->child; e; e = e->next, i++) {
            char *end = NULL;
            long id = strtol(e->string ? e->string : "", &end, 10);
            int n_vocab = s ? s->n_vocab : 1 << 30;
            if (!e->string || !e->string[0] || *end || id < 0 || id >= n_vocab)
                return fail(err, 400, "invalid_value", "'logit_bias' key '%.40s' is not a token id below %d",
                            e->string ? e->string : "", n_vocab);
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble < -100 || e->valuedouble > 100)
                return fail(err, 400, "invalid_value", "'logit_bias[%ld]' must be a number in [-100, 100]", id);
            r->bias[i].token = (int32_t)id;
            r->bias[i].bias = e->valuedouble <= -100 ? -INFINITY : (float)e->valuedouble;
        }
        r->sp.logit_bias = r->bias;
        r->sp.n_logit_bias = k;
    }

    if ((st = get_bool(root, "ignore_eos", &r->ignore_eog, err))) return st;
    /* "lora" or "adapter": the name of an adapter the server loaded (--lora NAME=FILE); absent, null or "": the base */
    for (int pass = 0; pass < 2; pass++) {
        const char *key = pass ? "adapter" : "lora";
        cJSON *lo = field(root, key);
        if (!lo || cJSON_IsNull(lo) || (cJSON_IsString(lo) && !lo->valuestring[0])) continue;
        if (!cJSON_IsString(lo)) return fail(err, 400, "invalid_type", "'%s' must be an adapter's name (a string)", key);
        int k = 0;
        while (s && k < s->cfg.n_lora && strcmp(s->cfg.lora_name[k], lo->valuestring)) k++;
        if (!s || k == s->cfg.n_lora)
            return fail(err, 400, "invalid_value", "'%s': no adapter named '%.64s' (the server loads them with --lora "
                        "NAME=FILE; it has %d)", key, lo->valuestring, s ? s->cfg.n_lora : 0);
        if (r->lora && r->lora != k + 1) return fail(err, 400, "invalid_value", "'lora' and 'adapter' name different adapters");
        r->lora = k + 1;
    }
    bool stream = false;
    if ((st = get_bool(root, "stream", &stream, err))) return st;
    r->stream = stream;
    cJSON *so = field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return fail(err, 400, "invalid_type", "'stream_options' must be an object");
        if ((st = get_bool(so, "include_usage", &r->include_usage, err))) return st;
    }

    /* response_format */
    cJSON *rf = field(root, "response_format");
    if (rf) {
        cJSON *t = cJSON_IsObject(rf) ? field(rf, "type") : NULL;
        if (!t || !cJSON_IsString(t))
            return fail(err, 400, "invalid_type", "'response_format' must be an object with a string 'type'");
        if (!strcmp(t->valuestring, "json_object")) r->json_mode = true;
        else if (!strcmp(t->valuestring, "json_schema")) {
            r->json_mode = true;
            if ((st = parse_schema(field(rf, "json_schema"), r, err))) return st;
        }
        else if (strcmp(t->valuestring, "text"))
            return fail(err, 400, "invalid_value", "'response_format.type' '%.40s' is not text, json_object or json_schema",
                        t->valuestring);
    }
    return 0;
}

static int check_prompt_len(srv *s, srv_req *r, oai_err *err) {
    if (!s) return 0;
    int limit = s->n_ctx_seq - 1;
    if (s->cfg.max_prompt > 0 && s->cfg.max_prompt < limit) limit = s->cfg.max_prompt;
    if (r->n_prompt > limit)
        return fail(err, 400, "context_length_exceeded",
                    "the prompt is %d tokens; this server takes at most %d (context %d per sequence)", r->n_prompt,
                    limit, s->n_ctx_seq);
    if (r->n_prompt == 0) return fail(err, 400, "invalid_value", "the prompt is empty");
    /* leave room for the prompt in the sequence */
    if (r->max_tokens > s->n_ctx_seq - r->n_prompt) r->max_tokens = s->n_ctx_seq - r->n_prompt;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* POST /v1/chat/completions                                                */
/* ------------------------------------------------------------------------ */

/* content: a string, or an array of {"type":"text","text":...} parts. */
static int message_text(const cJSON *c, int idx, sbuf *out, oai_err *err) {
    if (!c) return 0;
    if (cJSON_IsString(c)) { sbuf_adds(out, c->valuestring); return 0; }
    if (!cJSON_IsArray(c))
        return fail(err, 400, "invalid_type", "'messages[%d].content' must be a string or an array of parts", idx);
    int j = 0;
    for (cJSON *p = c->child; p; p = p->next, j++) {
        cJSON *t = cJSON_IsObject(p) ? field(p, "type") : NULL;
        cJSON *tx = cJSON_IsObject(p) ? field(p, "text") : NULL;
        if (!t || !cJSON_IsString(t) || strcmp(t->valuestring, "text") || !tx || !cJSON_IsString(tx))
            return fail(err, 400, "unsupported_value",
                        "'messages[%d].content[%d]': only {\"type\": \"text\", \"text\": ...} parts are supported", idx, j);
        sbuf_adds(out, tx->valuestring);
    }
    return 0;
}

/* The chat template over msgs into *prompt (*own: free() it, else hx_free). */
static int apply_template(srv *s, const hx_chat_message *msgs, int n, char **prompt, bool *own, oai_err *err) {
    hx_error e = {0};
    *own = false;
    hx_status cs = hx_chat_apply(s->model, msgs, n, true, prompt, &e);
    if (cs == HX_ERR_UNSUPPORTED) {
        /* no template the library knows: ChatML, as llama-server falls back to */
        static int warned;
        if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
            fprintf(stderr, "serve: %s; using ChatML\n", e.msg);
        sbuf b = {0};
        for (int k = 0; k < n; k++) sbuf_printf(&b, "<|im_start|>%s\n%s<|im_end|>\n", msgs[k].role, msgs[k].content);
        sbuf_adds(&b, "<|im_start|>assistant\n");
        if (b.oom) { sbuf_free(&b); return fail(err, 500, "out_of_memory", "out of memory"); }
        *prompt = sbuf_take(&b);
        *own = true;
    } else if (cs != HX_OK) {
        return fail(err, 400, "invalid_value", "chat template: %s", e.msg);
    }
    return 0;
}

static void free_prompt(char *p, bool own) {
    if (own) free(p);
    else hx_free(p);
}

/* "kb": {"k": 8, "topic": "ops"}: the options, checked (k in 1..100). */
static int parse_kb_opts(const cJSON *kbf, int *k, const char **topic, oai_err *err) {
    if (!cJSON_IsObject(kbf))
        return fail(err, 400, "invalid_type", "'kb' must be an object like {\"k\": 8, \"topic\": \"ops\"}");
    long long kk = 8;
    int st = get_int(kbf, "k", 1, 100, &kk, err);
    if (st) {
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "kb: %s", err->msg);
        snprintf(err->msg, sizeof err->msg, "%s", m);
        return st;
    }
    *k = (int)kk;
    *topic = NULL;
    cJSON *t = field(kbf, "topic");
    if (t && (!cJSON_IsString(t) || !t->valuestring[0]))
        return fail(err, 400, "invalid_type", "'kb.topic' must be a non-empty string (or absent: every topic)");
    if (t) *topic = t->valuestring;
    return 0;
}

/* The messages of a "kb" request: the KB's system message first (before the
 * client's own, which is kept), the last user message (index u) replaced by
 * user_text. out has room for n + 1; returns the count. sys_buf receives a
 * merged system text to free. */
static int kb_messages(const hx_chat_message *msgs, int n, int u, const char *user_text, hx_chat_message *out,
                       char **sys_buf) {
    *sys_buf = NULL;
    int m = 0;
    if (n > 0 && !strcmp(msgs[0].role, "system")) {
        size_t cap = strlen(kb_ask_system()) + strlen(msgs[0].content) + 3;
        *sys_buf = malloc(cap);
        if (!*sys_buf) return -1;
        snprintf(*sys_buf, cap, "%s\n\n%s", kb_ask_system(), msgs[0].content);
        out[m++] = (hx_chat_message){"system", *sys_buf};
        msgs++, n--, u--;
    } else {
        out[m++] = (hx_chat_message){"system", kb_ask_system()};
    }
    for (int i = 0; i < n; i++) out[m++] = (hx_chat_message){msgs[i].role, i == u ? user_text : msgs[i].content};
    return m;
}

/* Tokens the model reads for text (no BOS); -1 when tokenizing fails. */
static int count_tokens(const hx_model *m, const char *text) {
    int n = 0;
    hx_status st = hx_tokenize(m, text, -1, false, false, NULL, 0, &n, NULL);
    return st == HX_OK || st == HX_ERR_RANGE ? n : -1;
}

/* Grounds a chat in the knowledge base: retrieval with the last user message
 * as the query, the entries in a budget of what the context leaves after the
 * rest of the prompt and the answer (max_tokens when given, else up to 512),
 * then the message list the template reads (*out, *n_out; *own_a and
 * *own_b to free). */
static int kb_ground_chat(srv *s, const cJSON *root, const cJSON *kbf, const hx_chat_message *msgs, int n,
                          srv_req *r, hx_chat_message **out, int *n_out, char **own_a, char **own_b, oai_err *err) {
    int k = 8;
    const char *topic = NULL;
    int st = parse_kb_opts(kbf, &k, &topic, err);
    if (st || !s) return st;
    if (!s->kb)
        return fail(err, 400, "kb_not_enabled",
                    "'kb' asks for answers from a knowledge base, and this server has none: start it with --kb KB-DIR");
    int u = -1;
    for (int i = 0; i < n; i++)
        if (!strcmp(msgs[i].role, "user")) u = i;
    if (u < 0 || !msgs[u].content[0])
        return fail(err, 400, "invalid_value", "'kb' needs a non-empty user message: the last one is the question");
    const char *question = msgs[u].content;
    hx_chat_message *cm = calloc((size_t)n + 1, sizeof *cm);
    if (!cm) return fail(err, 500, "out_of_memory", "out of memory");
    /* the prompt without entries: what the entries may not take */
    kb_ask_ctx none = {0};
    char *bare = kb_ask_message(&none, question), *sys = NULL, *prompt = NULL;
    bool own = false;
    int cn = bare ? kb_messages(msgs, n, u, bare, cm, &sys) : -1;
    if (cn < 0) { st = fail(err, 500, "out_of_memory", "out of memory"); goto fail; }
    if ((st = apply_template(s, cm, cn, &prompt, &own, err))) goto fail;
    int base = count_tokens(s->model, prompt);
    free_prompt(prompt, own);
    prompt = NULL;
    if (base < 0) { st = fail(err, 400, "invalid_value", "cannot tokenize the messages"); goto fail; }
    /* the answer keeps max_tokens (as parse_sampling capped it) when the client gave one, else up to 512 */
    int reserve = r->max_tokens;
    if (!field(root, "max_tokens") && !field(root, "max_completion_tokens")) {
        if (reserve > 512) reserve = 512;
        if (reserve > s->n_ctx_seq / 4) reserve = s->n_ctx_seq / 4;
    }
    int room = s->n_ctx_seq - reserve, limit = s->n_ctx_seq - 1;
    if (s->cfg.max_prompt > 0 && s->cfg.max_prompt < limit) limit = s->cfg.max_prompt;
    if (room > limit) room = limit;
    int budget = room - base - 8;   /* 8: tokens that merge across the block's edges */
    if (budget < 64) {
        st = fail(err, 400, "context_length_exceeded",
                  "the context leaves %d tokens for knowledge-base entries (context %d per sequence, %d for the "
                  "messages, %d for the answer); at least 64 are needed: lower max_tokens, shorten the messages or "
                  "start the server with a larger -c", budget < 0 ? 0 : budget, s->n_ctx_seq, base, reserve);
        goto fail;
    }
    free(sys);
    sys = NULL;
    char *grounded = NULL;
    if ((st = srv_kb_ground(s, question, k, topic, budget, r, &grounded, err))) goto fail;
    cn = kb_messages(msgs, n, u, grounded, cm, &sys);
    if (cn < 0) { free(grounded); st = fail(err, 500, "out_of_memory", "out of memory"); goto fail; }
    free(bare);
    *out = cm;
    *n_out = cn;
    *own_a = grounded;
    *own_b = sys;
    return 0;
fail:
    free(bare);
    free(sys);
    free(cm);
    return st;
}

int oai_parse_chat(srv *s, const char *body, size_t len, srv_req *r, oai_err *err) {
    int st;
    cJSON *root = parse_body(body, len, err, &st);
    if (!root) return st;
    hx_chat_message *msgs = NULL, *kmsgs = NULL;
    sbuf *texts = NULL;
    int n = 0;
    char *prompt = NULL, *kb_a = NULL, *kb_b = NULL;
    bool own_prompt = false;
    if ((st = check_model(s, root, err))) goto done;
    cJSON *m = field(root, "messages");
    if (!m || !cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0) {
        st = fail(err, 400, "invalid_value", "'messages' must be a non-empty array");
        goto done;
    }
    n = cJSON_GetArraySize(m);
    msgs = calloc((size_t)n, sizeof *msgs);
    texts = calloc((size_t)n, sizeof *texts);
    if (!msgs || !texts) { st = fail(err, 500, "out_of_memory", "out of memory"); goto done; }
    int i = 0;
    for (cJSON *e = m->child; e; e = e->next, i++) {
        cJSON *role = cJSON_IsObject(e) ? field(e, "role") : NULL;
        if (!role || !cJSON_IsString(role)) {
            st = fail(err, 400, "invalid_value", "'messages[%d]' must be an object with a string 'role'", i);
            goto done;
        }
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant")) {
            st = fail(err, 400, "invalid_value", "'messages[%d].role' '%.40s' is not system, developer, user or assistant",
                      i, rs);
            goto done;
        }
        if ((st = message_text(field(e, "content"), i, &texts[i], err))) goto done;
        if (texts[i].oom) { st = fail(err, 500, "out_of_memory", "out of memory"); goto done; }
        msgs[i].role = rs;
        msgs[i].content = texts[i].p ? texts[i].p : "";
    }
    r->kind = REQ_CHAT;
    if ((st = parse_sampling(s, root, r, err))) goto done;
    bool lp = false;
    if ((st = get_bool(root, "logprobs", &lp, err))) goto done;
    long long top = 0;
    if ((st = get_int(root, "top_logprobs", 0, 20, &top, err))) goto done;
    if (top > 0 && !lp) { st = fail(err, 400, "invalid_value", "'top_logprobs' needs 'logprobs': true"); goto done; }
    r->logprobs = lp ? (int)top : -1;
    const hx_chat_message *use = msgs;
    int n_use = n;
    cJSON *kbf = field(root, "kb");
    if (kbf && (!s || s->model)) {
        if ((st = kb_ground_chat(s, root, kbf, msgs, n, r, &kmsgs, &n_use, &kb_a, &kb_b, err))) goto done;
        if (kmsgs) use = kmsgs;
    }
    if (s && s->model) {
        if ((st = apply_template(s, use, n_use, &prompt, &own_prompt, err))) goto done;
        if ((st = tokenize(s->model, prompt, true, &r->prompt, &r->n_prompt, err))) goto done;
        if ((st = check_prompt_len(s, r, err))) goto done;
    }
    st = 0;
done:
    if (texts) for (int k = 0; k < n; k++) sbuf_free(&texts[k]);
    free(texts);
    free(msgs);
    free(kmsgs);
    free(kb_a);
    free(kb_b);
    free_prompt(prompt, own_prompt);
    cJSON_Delete(root);
    return st;
}

/* ------------------------------------------------------------------------ */
/* POST /v1/completions                                                     */
/* ------------------------------------------------------------------------ */

int oai_parse_completion(srv *s, const char *body, size_t len, srv_req *r, oai_err *err) {
    int st;
    cJSON *root = parse_body(body, len, err, &st);
    if (!root) return st;
    if ((st = check_model(s, root, err))) goto done;
    r->kind = REQ_COMPLETION;
    if ((st = parse_sampling(s, root, r, err))) goto done;
    long long lp = -1;
    if ((st = get_int(root, "logprobs", 0, 20, &lp, err))) goto done;
    r->logprobs = (int)lp;
    bool echo = false;
    if ((st = get_bool(root, "echo", &echo, err))) goto done;
    if (echo) { st = fail(err, 400, "unsupported_value", "'echo': true is not supported"); goto done; }
    cJSON *p = field(root, "prompt");
    if (!p) { st = fail(err, 400, "invalid_value", "'prompt' is required"); goto done; }
    /* a string, [string], or [token ids] */
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child;
    if (cJSON_IsString(p)) {
        if (s && s->model && (st = tokenize(s->model, p->valuestring, true, &r->prompt, &r->n_prompt, err))) goto done;
    } else if (cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 && cJSON_IsNumber(p->child)) {
        int k = cJSON_GetArraySize(p);
        r->prompt = malloc((size_t)k * sizeof *r->prompt);
        if (!r->prompt) { st = fail(err, 500, "out_of_memory", "out of memory"); goto done; }
        int i = 0;
        for (cJSON *e = p->child; e; e = e->next, i++) {
            int n_vocab = s ? s->n_vocab : 1 << 30;
            if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                e->valuedouble >= n_vocab) {
                st = fail(err, 400, "invalid_value", "'prompt[%d]' is not a token id below %d", i, n_vocab);
                goto done;
            }
            r->prompt[i] = (int32_t)e->valuedouble;
        }
        r->n_prompt = k;
    } else {
        st = fail(err, 400, "invalid_type", "'prompt' must be a string, one string in an array, or an array of token ids");
        goto done;
    }
    if ((st = check_prompt_len(s, r, err))) goto done;
    st = 0;
done:
    cJSON_Delete(root);
    return st;
}

/* ------------------------------------------------------------------------ */
/* POST /v1/embeddings                                                      */
/* ------------------------------------------------------------------------ */

int oai_parse_embeddings(srv *s, const char *body, size_t len, srv_req *r, oai_err *err) {
    int st;
    cJSON *root = parse_body(body, len, err, &st);
    if (!root) return st;
    r->kind = REQ_EMBED;
    /* which model: -e (BERT) or the chat model's hidden states */
    cJSON *m = field(root, "model");
    if (m && !cJSON_IsString(m)) { st = fail(err, 400, "invalid_type", "'model' must be a string"); goto done; }
    if (s) {
        bool have_bert = s->emb != NULL, have_dec = s->model && s->cfg.decoder_embeddings;
        if (m) {
            if (have_bert && model_matches(m->valuestring, s->emb_id, s->cfg.embed_path)) r->emb_bert = true;
            else if (model_matches(m->valuestring, s->model_id, s->cfg.model_path)) {
                if (!have_dec) {
                    st = fail(err, 400, "unsupported_value",
                              "embeddings from '%.100s' are off (the server runs with --no-embeddings)", s->model_id);
                    goto done;
                }
            } else {
                st = fail(err, 404, "model_not_found", "the model '%.200s' does not exist", m->valuestring);
                goto done;
            }
        } else if (have_bert) r->emb_bert = true;
        else if (!have_dec) { st = fail(err, 400, "unsupported_value", "this server has no embedding model"); goto done; }
    }
    cJSON *f = field(root, "encoding_format");
    if (f) {
        if (!cJSON_IsString(f) || (strcmp(f->valuestring, "float") && strcmp(f->valuestring, "base64"))) {
            st = fail(err, 400, "invalid_value", "'encoding_format' must be \"float\" or \"base64\"");
            goto done;
        }
        r->emb_base64 = !strcmp(f->valuestring, "base64");
    }
    cJSON *in = field(root, "input");
    if (!in) { st = fail(err, 400, "invalid_value", "'input' is required"); goto done; }
    int k = cJSON_IsString(in) ? 1 : cJSON_IsArray(in) ? cJSON_GetArraySize(in) : 0;
    if (k <= 0) { st = fail(err, 400, "invalid_type", "'input' must be a string or a non-empty array of strings"); goto done; }
    if (k > 2048) { st = fail(err, 400, "invalid_value", "'input' has %d texts; at most 2048", k); goto done; }
    r->texts = calloc((size_t)k, sizeof *r->texts);
    if (!r->texts) { st = fail(err, 500, "out_of_memory", "out of memory"); goto done; }
    for (int i = 0; i < k; i++) {
        cJSON *e = cJSON_IsString(in) ? in : cJSON_GetArrayItem(in, i);
        if (!cJSON_IsString(e)) {
            st = fail(err, 400, "invalid_type", "'input[%d]' must be a string (token arrays are not supported)", i);
            goto done;
        }
        if (!e->valuestring[0]) { st = fail(err, 400, "invalid_value", "'input[%d]' is empty", i); goto done; }
        r->texts[i] = strdup(e->valuestring);
        r->n_texts++;
        if (!r->texts[i]) { st = fail(err, 500, "out_of_memory", "out of memory"); goto done; }
    }
    if (s && s->model && !r->emb_bert) {
        r->text_ids = calloc((size_t)k, sizeof *r->text_ids);
        r->n_text_ids = calloc((size_t)k, sizeof *r->n_text_ids);
        if (!r->text_ids || !r->n_text_ids) { st = fail(err, 500, "out_of_memory", "out of memory"); goto done; }
        for (int i = 0; i < k; i++) {
            if ((st = tokenize(s->model, r->texts[i], true, &r->text_ids[i], &r->n_text_ids[i], err))) goto done;
            if (r->n_text_ids[i] > s->n_ctx_seq) {
                st = fail(err, 400, "context_length_exceeded", "'input[%d]' is %d tokens; at most %d", i,
                          r->n_text_ids[i], s->n_ctx_seq);
                goto done;
            }
            r->n_prompt += r->n_text_ids[i];
        }
    }
    st = 0;
done:
    cJSON_Delete(root);
    return st;
}

/* ------------------------------------------------------------------------ */
/* /tokenize, /detokenize, /v1/models                                       */
/* ------------------------------------------------------------------------ */

static char *error_answer(int *status, int code, const oai_err *err) {
    *status = code;
    return oai_error_json(err->msg, oai_error_type(code), err->code);
}

/* A token's bytes as valid UTF-8 text (pieces of characters become U+FFFD). */
static char *piece_text(const hx_model *m, int32_t t, bool special) {
    char buf[256];
    int n = hx_token_to_piece(m, t, buf, (int)sizeof buf, special);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    return utf8_sanitize(buf, (size_t)n);
}

char *oai_tokenize(srv *s, const char *body, size_t len, int *status) {
    oai_err err = {0};
    int st;
    cJSON *root = parse_body(body, len, &err, &st);
    if (!root) return error_answer(status, st, &err);
    cJSON *c = field(root, "content");
    bool add_special = false, with_pieces = false;
    char *out = NULL;
    if (!c || !cJSON_IsString(c)) { st = fail(&err, 400, "invalid_value", "'content' must be a string"); goto done; }
    if ((st = get_bool(root, "add_special", &add_special, &err))) goto done;
    if ((st = get_bool(root, "with_pieces", &with_pieces, &err))) goto done;
    int32_t *ids = NULL;
    int n = 0;
    if ((st = tokenize(s->model, c->valuestring, add_special, &ids, &n, &err))) goto done;
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n; i++) {
        if (with_pieces) {
            cJSON *t = cJSON_CreateObject();
            cJSON_AddNumberToObject(t, "id", ids[i]);
            char *p = piece_text(s->model, ids[i], true);
            cJSON_AddStringToObject(t, "piece", p ? p : "");
            free(p);
            cJSON_AddItemToArray(a, t);
        } else cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    }
    free(ids);
    out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    *status = 200;
done:
    cJSON_Delete(root);
    return out ? out : error_answer(status, st, &err);
}

char *oai_detokenize(srv *s, const char *body, size_t len, int *status) {
    oai_err err = {0};
    int st;
    cJSON *root = parse_body(body, len, &err, &st);
    if (!root) return error_answer(status, st, &err);
    char *out = NULL;
    cJSON *t = field(root, "tokens");
    if (!t || !cJSON_IsArray(t)) { st = fail(&err, 400, "invalid_value", "'tokens' must be an array of token ids"); goto done; }
    int n = cJSON_GetArraySize(t);
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    if (!ids) { st = fail(&err, 500, "out_of_memory", "out of memory"); goto done; }
    int i = 0;
    for (cJSON *e = t->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
            e->valuedouble >= s->n_vocab) {
            free(ids);
            st = fail(&err, 400, "invalid_value", "'tokens[%d]' is not a token id below %d", i, s->n_vocab);
            goto done;
        }
        ids[i] = (int32_t)e->valuedouble;
    }
    char *text = NULL;
    hx_error e = {0};
    if (hx_detokenize(s->model, ids, n, true, &text, &e) != HX_OK) {
        free(ids);
        st = fail(&err, 400, "invalid_value", "detokenize: %s", e.msg);
        goto done;
    }
    free(ids);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", text);
    hx_free(text);
    out = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    *status = 200;
done:
    cJSON_Delete(root);
    return out ? out : error_answer(status, st, &err);
}

char *oai_kb_search(srv *s, const char *body, size_t len, int *status) {
    oai_err err = {0};
    int st;
    cJSON *root = parse_body(body, len, &err, &st);
    if (!root) return error_answer(status, st, &err);
    char *out = NULL;
    cJSON *q = field(root, "query");
    long long k = 10;
    int mode = 0;
    const char *topic = NULL;
    if (!q || !cJSON_IsString(q) || !q->valuestring[0]) {
        st = fail(&err, 400, "invalid_value", "'query' must be a non-empty string");
        goto done;
    }
    if (strlen(q->valuestring) > 16384) { st = fail(&err, 400, "invalid_value", "'query' is longer than 16384 bytes"); goto done; }
    if ((st = get_int(root, "k", 1, 1000, &k, &err))) goto done;
    cJSON *t = field(root, "topic");
    if (t && (!cJSON_IsString(t) || !t->valuestring[0])) {
        st = fail(&err, 400, "invalid_type", "'topic' must be a non-empty string (or absent: every topic)");
        goto done;
    }
    if (t) topic = t->valuestring;
    cJSON *m = field(root, "mode");
    if (m) {
        if (cJSON_IsString(m) && !strcmp(m->valuestring, "hybrid")) mode = 0;
        else if (cJSON_IsString(m) && !strcmp(m->valuestring, "semantic")) mode = 1;
        else if (cJSON_IsString(m) && !strcmp(m->valuestring, "lexical")) mode = 2;
        else { st = fail(&err, 400, "invalid_value", "'mode' must be \"hybrid\", \"semantic\" or \"lexical\""); goto done; }
    }
    cJSON *res = NULL;
    if ((st = srv_kb_search(s, q->valuestring, (int)k, topic, mode, &res, &err))) goto done;
    out = cJSON_PrintUnformatted(res);
    cJSON_Delete(res);
    *status = out ? 200 : 500;
done:
    cJSON_Delete(root);
    return out ? out : error_answer(status, st ? st : 500, &err);
}

static cJSON *model_obj(srv *s, const char *id, bool embed) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)(time(NULL) - (long)(util_now() - s->t_start)));
    cJSON_AddStringToObject(o, "owned_by", "helix");
    cJSON *meta = cJSON_AddObjectToObject(o, "meta");
    if (!embed && s->model) {
        cJSON_AddStringToObject(meta, "arch", hx_model_arch(s->model));
        cJSON_AddNumberToObject(meta, "n_ctx_train", hx_model_n_ctx_train(s->model));
        cJSON_AddNumberToObject(meta, "n_ctx_seq", s->n_ctx_seq);
        cJSON_AddNumberToObject(meta, "n_vocab", hx_model_n_vocab(s->model));
        cJSON_AddNumberToObject(meta, "n_params", (double)hx_model_n_params(s->model));
        cJSON_AddNumberToObject(meta, "size", (double)hx_model_size_bytes(s->model));
        cJSON_AddStringToObject(meta, "type", hx_model_type_name(s->model));
    } else if (embed && s->emb) {
        cJSON_AddNumberToObject(meta, "dim", hx_embedder_dim(s->emb));
    }
    return o;
}

char *oai_models(srv *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    if (s->model) cJSON_AddItemToArray(d, model_obj(s, s->model_id, false));
    if (s->emb) cJSON_AddItemToArray(d, model_obj(s, s->emb_id, true));
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

char *oai_model_one(srv *s, const char *id) {
    cJSON *o = NULL;
    if (s->model && model_matches(id, s->model_id, s->cfg.model_path)) o = model_obj(s, s->model_id, false);
    else if (s->emb && model_matches(id, s->emb_id, s->cfg.embed_path)) o = model_obj(s, s->emb_id, true);
    if (!o) return NULL;
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

/* ------------------------------------------------------------------------ */
/* responses                                                                */
/* ------------------------------------------------------------------------ */

const char *oai_finish_str(fin_reason f) {
    switch (f) {
    case FIN_STOP: return "stop";
    case FIN_LENGTH: return "length";
    case FIN_CANCELLED: return "cancelled";
    case FIN_ERROR: return "error";
    default: return NULL;
    }
}

static void add_token_bytes(cJSON *o, const hx_model *m, int32_t t) {
    char buf[256];
    int n = hx_token_to_piece(m, t, buf, (int)sizeof buf, true);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    char *txt = utf8_sanitize(buf, (size_t)n);
    cJSON_AddStringToObject(o, "token", txt ? txt : "");
    free(txt);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)buf[i]));
}

/* Chat: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}.
 * Completions: {tokens, token_logprobs, top_logprobs: [{token: lp}], text_offset}. */
static cJSON *logprobs_json(srv *s, const srv_req *r, const oai_logprob *lp, int n_lp) {
    if (r->logprobs < 0) return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    if (r->kind == REQ_CHAT) {
        cJSON *c = cJSON_AddArrayToObject(o, "content");
        for (int i = 0; i < n_lp; i++) {
            cJSON *e = cJSON_CreateObject();
            add_token_bytes(e, s->model, lp[i].token);
            cJSON_AddNumberToObject(e, "logprob", lp[i].logprob);
            cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < lp[i].n_top; k++) {
                cJSON *t = cJSON_CreateObject();
                add_token_bytes(t, s->model, lp[i].top_tok[k]);
                cJSON_AddNumberToObject(t, "logprob", lp[i].top_lp[k]);
                cJSON_AddItemToArray(tops, t);
            }
            cJSON_AddItemToArray(c, e);
        }
    } else {
        cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
        cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
        int off = 0;
        for (int i = 0; i < n_lp; i++) {
            char *p = piece_text(s->model, lp[i].token, true);
            cJSON_AddItemToArray(toks, cJSON_CreateString(p ? p : ""));
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp[i].logprob));
            cJSON_AddItemToArray(offs, cJSON_CreateNumber(off));
            off += p ? (int)strlen(p) : 0;
            free(p);
            cJSON *t = cJSON_CreateObject();
            for (int k = 0; k < lp[i].n_top; k++) {
                char *q = piece_text(s->model, lp[i].top_tok[k], true);
                if (q && !cJSON_GetObjectItemCaseSensitive(t, q)) cJSON_AddNumberToObject(t, q, lp[i].top_lp[k]);
                free(q);
            }
            cJSON_AddItemToArray(tops, t);
        }
    }
    return o;
}

static cJSON *usage_json(const srv_req *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->usage_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->usage_gen);
    cJSON_AddNumberToObject(u, "total_tokens", r->usage_prompt + r->usage_gen);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", r->usage_cached);
    return u;
}

static cJSON *envelope(const srv_req *r, bool chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", r->kind == REQ_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                             : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", r->model_id);
    cJSON_AddStringToObject(o, "system_fingerprint", "helix-" HX_VERSION);
    return o;
}

static void add_text(cJSON *o, const char *name, const char *text, size_t len) {
    /* text is valid UTF-8 from hx_detok; sanitize anyway so a bug never makes invalid JSON */
    char *t = utf8_sanitize(text, len);
    cJSON_AddStringToObject(o, name, t ? t : "");
    free(t);
}

void oai_stream_chunk(srv *s, const srv_req *r, const char *text, size_t len, bool first, const char *finish,
                      const oai_logprob *lp, int n_lp, sbuf *out) {
    cJSON *o = envelope(r, true);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->kind == REQ_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (first) cJSON_AddStringToObject(d, "role", "assistant");
        if (len || (first && !finish)) add_text(d, "content", text, len);
    } else add_text(c, "text", text, len);
    if (n_lp > 0) cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, r, lp, n_lp));
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    sbuf_adds(out, "data: ");
    sbuf_adds(out, txt ? txt : "{}");
    sbuf_adds(out, "\n\n");
    free(txt);
}

void oai_stream_usage(const srv_req *r, sbuf *out) {
    cJSON *o = envelope(r, true);
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_json(r));
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    sbuf_adds(out, "data: ");
    sbuf_adds(out, txt ? txt : "{}");
    sbuf_adds(out, "\n\n");
    free(txt);
}

char *oai_final_body(srv *s, const srv_req *r, const char *text, size_t len, const char *finish,
                     const oai_logprob *lp, int n_lp) {
    cJSON *o = envelope(r, false);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (r->kind == REQ_CHAT) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        add_text(m, "content", text, len);
    } else add_text(c, "text", text, len);
    cJSON_AddItemToObject(c, "logprobs", logprobs_json(s, r, lp, n_lp));
    cJSON_AddStringToObject(c, "finish_reason", finish);
    cJSON_AddItemToObject(o, "usage", usage_json(r));
    if (r->kb) srv_kb_cite(s, r, text, len, o);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

void oai_stream_citations(srv *s, const srv_req *r, const char *text, size_t len, sbuf *out) {
    cJSON *o = envelope(r, true);
    cJSON_AddArrayToObject(o, "choices");
    srv_kb_cite(s, r, text, len, o);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    sbuf_adds(out, "data: ");
    sbuf_adds(out, txt ? txt : "{}");
    sbuf_adds(out, "\n\n");
    free(txt);
}

char *oai_embeddings_body(const srv_req *r, const float *vec, int n, int dim, int prompt_tokens) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "object", "embedding");
        cJSON_AddNumberToObject(e, "index", i);
        const float *v = vec + (size_t)i * dim;
        if (r->emb_base64) {
            char *b = base64_encode(v, (size_t)dim * sizeof *v);   /* little-endian f32, as OpenAI */
            cJSON_AddStringToObject(e, "embedding", b ? b : "");
            free(b);
        } else {
            cJSON *a = cJSON_AddArrayToObject(e, "embedding");
            for (int k = 0; k < dim; k++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[k]));
        }
        cJSON_AddItemToArray(d, e);
    }
    cJSON_AddStringToObject(o, "model", r->model_id);
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", prompt_tokens);
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

/* ------------------------------------------------------------------------ */
/* GET /metrics (Prometheus text format 0.0.4)                              */
/* ------------------------------------------------------------------------ */

char *oai_metrics(srv *s) {
    pthread_mutex_lock(&s->mu);
    srv_stats st = s->st;
    pthread_mutex_unlock(&s->mu);
    int n_ctx = s->n_ctx, pages = s->kv_page > 0 ? s->n_ctx / s->kv_page : 0;
    sbuf b = {0};
#define COUNTER(name, help, v) sbuf_printf(&b, "# HELP helix_" name " " help "\n# TYPE helix_" name " counter\nhelix_" name " %llu\n", (unsigned long long)(v))
#define GAUGE(name, help, fmt, v) sbuf_printf(&b, "# HELP helix_" name " " help "\n# TYPE helix_" name " gauge\nhelix_" name " " fmt "\n", v)
    COUNTER("requests_total", "Generation and embedding requests accepted.", st.requests_total);
    COUNTER("requests_success_total", "Requests that finished normally.", st.requests_ok);
    COUNTER("requests_failed_total", "Requests that ended in an error.", st.requests_failed);
    COUNTER("requests_cancelled_total", "Requests cancelled (client gone, timeout or shutdown).", st.requests_cancelled);
    COUNTER("requests_rejected_total", "Requests refused because the server was full or stopping.", st.requests_rejected);
    COUNTER("prompt_tokens_total", "Prompt tokens prefilled.", st.prompt_tokens);
    COUNTER("prompt_tokens_cached_total", "Prompt tokens reused from a slot's cache.", st.cached_tokens);
    COUNTER("tokens_generated_total", "Tokens generated.", st.gen_tokens);
    COUNTER("decode_steps_total", "Decode steps.", st.decode_steps);
    COUNTER("single_stream_steps_total", "Decode steps of one stream alone (the single-sequence greedy step).",
            st.single_steps);
    COUNTER("embeddings_total", "Embedding vectors computed.", st.embeddings);
    GAUGE("queue_depth", "Requests waiting for a slot.", "%d", st.queue_depth);
    GAUGE("slots_busy", "Sequence slots running a request.", "%d", st.slots_busy);
    GAUGE("slots_total", "Sequence slots (--parallel).", "%d", s->cfg.n_parallel);
    GAUGE("batch_sequences", "Sequences in the last decode step.", "%d", st.last_batch_seqs);
    GAUGE("batch_tokens", "Tokens in the last decode step.", "%d", st.last_batch_tokens);
    GAUGE("tokens_per_second", "Generated tokens per second over the last seconds.", "%.3f", st.tok_per_s);
    GAUGE("kv_used_positions", "KV positions held by all slots.", "%d", st.kv_used);
    GAUGE("kv_capacity_positions", "KV positions in all.", "%d", n_ctx);
    GAUGE("kv_usage_ratio", "KV positions held / capacity.", "%.4f", n_ctx ? (double)st.kv_used / n_ctx : 0.0);
    GAUGE("kv_page_positions", "Positions per KV page (0: fixed slots of capacity / slots).", "%d", s->kv_page);
    GAUGE("kv_pages_used", "KV pages held by all slots, running and cached (0 with fixed slots).", "%d",
          st.kv_pages_used);
    GAUGE("kv_pages_total", "KV pages in the pool (0 with fixed slots).", "%d", pages);
    GAUGE("decode_busy_seconds", "Seconds spent in decode steps.", "%.3f", st.busy_s);
    GAUGE("model_loaded", "1 once the model is ready.", "%d", s->loading ? 0 : 1);
#undef COUNTER
#undef GAUGE
    srv_kb_metrics(s, &b);
    if (b.oom) { sbuf_free(&b); return NULL; }
    return sbuf_take(&b);
}
