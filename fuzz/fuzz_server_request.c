/* fuzz_server_request.c — helix-bg serve's request parsing and JSON grammar.
 *
 * libFuzzer target (HX_FUZZ=ON): the first byte picks the route (chat,
 * completions, embeddings); the rest is the request body, parsed without a
 * model (oai_parse_*(NULL, ...)): any bytes must give 0 or an HTTP error
 * status with a message, never a crash or a leak. The same bytes are then fed
 * to the JSON grammar of constrained decoding (serve/jsongram.c): whatever
 * prefix it accepts, that prefix plus jg_completion must parse as a JSON
 * object, jg_dist must be the completion's length, and the grammar must
 * accept its own completion and end done.
 *
 * Built with HX_FUZZ_SMOKE (tests/CMakeLists.txt: ctest server_fuzz_smoke) it
 * is a bounded random test instead: mutated requests and grammar walks from a
 * fixed seed. */
#include "../tools/helix-bg/serve/jsongram.c"
#include "../tools/helix-bg/serve/kb.c"
#include "../tools/helix-bg/serve/oai.c"
#include "../tools/helix-bg/serve/util.c"

#include <assert.h>

static void req_clear(srv_req *r) {
    free(r->prompt);
    free(r->bias);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    for (int i = 0; i < r->n_texts; i++) free(r->texts[i]);
    free(r->texts);
    free(r->text_ids);
    free(r->n_text_ids);
    free(r->schema);
    memset(r, 0, sizeof *r);
}

/* A schema for the grammar checks: {"name": string, "n": integer, "tags": array|null, "ok": boolean} */
static jg_schema test_schema;

static void schema_init(void) {
    static const char *keys[] = {"name", "n", "tags", "ok"};
    static const uint8_t types[] = {JG_T_STRING, JG_T_INTEGER, JG_T_ARRAY | JG_T_NULL, JG_T_BOOLEAN};
    for (int i = 0; i < 4; i++) {
        strcpy(test_schema.key[i], keys[i]);
        test_schema.klen[i] = (uint8_t)strlen(keys[i]);
        test_schema.types[i] = types[i];
        test_schema.tail += test_schema.klen[i] + 8;
    }
    test_schema.n = 4;
}

/* The parsed object has the schema's keys in order, with values of their types. */
static bool follows_schema(const cJSON *o, const jg_schema *g) {
    int i = 0;
    for (const cJSON *e = o->child; e; e = e->next, i++) {
        if (i >= g->n || strcmp(e->string, g->key[i])) return false;
        unsigned t = g->types[i], bit = cJSON_IsString(e) ? JG_T_STRING : cJSON_IsBool(e) ? JG_T_BOOLEAN
                   : cJSON_IsNull(e) ? JG_T_NULL : cJSON_IsArray(e) ? JG_T_ARRAY : cJSON_IsObject(e) ? JG_T_OBJECT : 0;
        if (cJSON_IsNumber(e)) bit = e->valuedouble == (double)(long long)e->valuedouble ? JG_T_INTEGER | JG_T_NUMBER : JG_T_NUMBER;
        if (t && !(t & bit)) return false;
    }
    return i == g->n;
}

static int check_grammar_with(const uint8_t *data, size_t size, const jg_schema *sch) {
    jg_state s;
    jg_init(&s, sch);
    char prefix[4096 + JG_MAX_COMPLETION];
    size_t n = 0;
    for (size_t i = 0; i < size && n < sizeof prefix - 200; i++) {
        jg_state t = s;
        if (!jg_feed(&t, (const char *)data + i, 1)) break;
        s = t;
        prefix[n++] = (char)data[i];
    }
    char comp[JG_MAX_COMPLETION];
    int k = jg_completion(&s, comp, (int)sizeof comp);
    if (k != jg_dist(&s) || k >= (int)sizeof comp) { fprintf(stderr, "jg_dist %d != completion %d\n", jg_dist(&s), k); return 1; }
    memcpy(prefix + n, comp, (size_t)k);
    size_t total = n + (size_t)k;
    prefix[total] = 0;
    jg_state u = s;
    if (!jg_feed(&u, comp, (size_t)k) || !jg_done(&u)) {
        fprintf(stderr, "the grammar rejects its own completion: '%s'\n", prefix);
        return 1;
    }
    if (!utf8_valid(prefix, total)) { fprintf(stderr, "accepted invalid UTF-8: '%s'\n", prefix); return 1; }
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(prefix, total, &end, false);
    bool ok = j && cJSON_IsObject(j) && end == prefix + total && (!sch || follows_schema(j, sch));
    cJSON_Delete(j);
    if (!ok) { fprintf(stderr, "accepted + completion is not one JSON object%s: '%s'\n", sch ? " of the schema" : "", prefix); return 1; }
    return 0;
}

static int check_grammar(const uint8_t *data, size_t size) {
    if (!test_schema.n) schema_init();
    return check_grammar_with(data, size, NULL) || check_grammar_with(data, size, &test_schema);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    srv_req r;
    memset(&r, 0, sizeof r);
    oai_err err;
    memset(&err, 0, sizeof err);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    int st;
    switch (data[0] % 3) {
    case 0: st = oai_parse_chat(NULL, body, len, &r, &err); break;
    case 1: st = oai_parse_completion(NULL, body, len, &r, &err); break;
    default: st = oai_parse_embeddings(NULL, body, len, &r, &err); break;
    }
    if (st != 0 && (st < 400 || st > 599 || !err.msg[0])) abort();
    if (st == 0 && r.n_stop > 16) abort();
    req_clear(&r);
    if (check_grammar(data + 1, size - 1)) abort();
    return 0;
}

#ifdef HX_FUZZ_SMOKE
/* xorshift64*: a fixed seed, so a failure repeats */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

int main(int argc, char **argv) {
    long iters = argc > 1 ? atol(argv[1]) : 30000;
    static const char *seeds[] = {
        "\x00{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":"
        "[{\"type\":\"text\",\"text\":\"hi\"}]}],\"max_tokens\":5,\"stop\":[\"a\",\"bc\"],\"logit_bias\":{\"12\":-100},"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"response_format\":{\"type\":\"json_object\"},"
        "\"logprobs\":true,\"top_logprobs\":3,\"temperature\":0.7,\"top_p\":0.9,\"seed\":1}",
        "\x01{\"prompt\":[1,2,3],\"max_tokens\":9,\"logprobs\":2,\"stop\":\"\\n\",\"frequency_penalty\":0.5}",
        "\x01{\"prompt\":\"once \\u00e9\\ud83d\\ude00\",\"echo\":false,\"n\":1}",
        "\x02{\"input\":[\"a\",\"b\"],\"encoding_format\":\"base64\"}",
        "\x02{\"input\":\"x\",\"model\":\"e\"}",
        "\x00{\"a\":[1,-2.5e+3,true,false,null,{\"b\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\"}],\"c\":{}}",
        "\x00{\"name\":\"bo\",\"n\":-12,\"tags\":[\"x\",{}],\"ok\":false}",
        "\x00{\"name\":\"\\u00e9\",\"n\":1.5e3,\"tags\":null,\"ok\":true}",
        ("\x01{\"prompt\":\"p\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\","
        "\"properties\":{\"a\":{\"type\":[\"string\",\"null\"]},\"b\":{\"type\":\"integer\"}},\"required\":[\"b\"]}}}}"),
    };
    static const char alphabet[] = "{}[]\":,0123456789-+.eEtrufalsn \n\t\\/bu\x80\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80xmgko";
    schema_init();
    uint8_t buf[2048];
    int fails = 0;
    for (long it = 0; it < iters && !fails; it++) {
        size_t n;
        if (it % 2 == 0) {
            /* a mutated request */
            const char *s = seeds[rnd() % (sizeof seeds / sizeof seeds[0])];
            n = 1 + strlen(s + 1);
            memcpy(buf, s, n);
            int muts = 1 + (int)(rnd() % 4);
            for (int m = 0; m < muts; m++) {
                size_t at = rnd() % n;
                switch (rnd() % 4) {
                case 0: buf[at] = (uint8_t)rnd(); break;                           /* flip a byte */
                case 1: n = at + 1; break;                                         /* truncate */
                case 2: if (n < sizeof buf - 1) { memmove(buf + at + 1, buf + at, n - at); buf[at] = (uint8_t)alphabet[rnd() % (sizeof alphabet - 1)]; n++; } break;
                default: if (n > 2) { memmove(buf + at, buf + at + 1, n - at - 1); n--; } break;
                }
            }
        } else {
            /* a walk that stays inside the grammar most of the time */
            n = 1;
            buf[0] = 0;
            jg_state s;
            jg_init(&s, it % 4 == 1 ? &test_schema : NULL);
            size_t want = 1 + rnd() % 300;
            while (n < want) {
                uint8_t c = (uint8_t)alphabet[rnd() % (sizeof alphabet - 1)];
                jg_state t = s;
                if (jg_feed(&t, (const char *)&c, 1) || rnd() % 50 == 0) { buf[n++] = c; s = t; }
            }
        }
        if (LLVMFuzzerTestOneInput(buf, n)) fails++;
    }
    printf("%ld inputs, %d failures\n", iters, fails);
    return fails ? 1 : 0;
}
#endif
