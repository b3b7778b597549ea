/* cmd_serve.c — helix-bg serve: flags, start-up and shutdown of the
 * OpenAI-compatible HTTP server (the server itself: serve/).
 *
 * Start-up order: listen first (so /health answers 503 while loading), load
 * the model(s), start the scheduler, then serve until SIGTERM / SIGINT. On
 * the first signal the server stops accepting connections, lets in-flight
 * requests finish for --shutdown-timeout seconds, cancels the rest, and
 * exits 0; a second signal cancels at once. */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "serve/serve.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: helix-bg serve -m MODEL [options]\n"
        "  An OpenAI-compatible HTTP server with continuous batching:\n"
        "  POST /v1/chat/completions, /v1/completions, /v1/embeddings, /tokenize, /detokenize;\n"
        "  GET /v1/models, /health (503 while loading), /metrics (Prometheus text).\n"
        "  With --kb: POST /v1/kb/search {\"query\", \"k\", \"topic\"}, and chat completions that carry\n"
        "  \"kb\": {\"k\": 8, \"topic\": T} answer from the knowledge base's entries and list the ones they cite.\n"
        "\n"
        "  -m, --model FILE         chat model (.gguf or Hugging Face folder)\n"
        "      --alias NAME         the model id clients use (default: the file name)\n"
        "  -e, --embed-model FILE   BERT model for /v1/embeddings (else the chat model's mean-pooled\n"
        "                           hidden states)\n"
        "      --embed-alias NAME   its id (default: the file name)\n"
        "      --no-embeddings      no embeddings from the chat model\n"
        "      --kb DIR             a knowledge base (a directory holding data.log) to search and answer from\n"
        "      --kb-embed-model M   the embedder it was embedded with: a BERT model, or 'lexical' for the\n"
        "                           built-in lexical-384 (default: the -e model when given, else lexical);\n"
        "                           one that differs from its cache's embedder is refused\n"
        "      --kb-max-embed N     entries its cache lacks embedded on the fly per (re)open (default 10000;\n"
        "                           -1: all); the rest are found by BM25 only and reported as unindexed\n"
        "      --host ADDR          listen address (default 127.0.0.1; IPv6 addresses work too)\n"
        "      --port N             port (default 8080; 0: any free port, printed on stderr)\n"
        "      --api-key KEY        require 'Authorization: Bearer KEY' (repeatable); /health stays open\n"
        "      --api-key-file FILE  keys, one per line ('#' comments)\n"
        "      --cors ORIGIN        send Access-Control-Allow-Origin: ORIGIN and answer preflights (default off)\n"
        "      --ssl-cert FILE      serve HTTPS with this PEM certificate (a chain: the server's first), with\n"
        "      --ssl-key FILE       ... its unencrypted PEM private key (default: plain HTTP; llama-server's\n"
        "                           --ssl-cert-file / --ssl-key-file work too)\n"
        "  -c, --ctx-size N         KV positions in all (default: parallel x min(train, 4096)). On the CPU with\n"
        "                           --parallel > 1 a pool of pages the slots share: one request may hold most\n"
        "                           of it while others stay short; elsewhere --parallel fixed slots of N / parallel\n"
        "      --ctx-seq N          most positions one request holds in the pool (default: min(ctx-size, train))\n"
        "  -np, --parallel N        sequence slots: requests decoded together (default 4)\n"
        "  -t, --threads N          CPU threads (default: all)\n"
        "      --device D           auto, cpu or cuda (default auto)\n"
        "  -tp, --tensor-split N    split every layer over N GPUs (tensor parallelism over NCCL; default 1)\n"
        "  -sm, --split-mode M      how the -tp N GPUs share the model: row (default: tensor parallelism, falling\n"
        "                           back to layer when the heads do not divide by N) or layer (contiguous layers\n"
        "                           on each GPU: a pipeline, N GPUs' memory, no speed-up)\n"
        "      --layer-split N      as -tp N -sm layer; with --device cpu, N CPU parts (a test of the split)\n"
        "  -b, --batch N            most tokens in one decode step (default 512)\n"
        "      --prefill-chunk N    prompt tokens per step while other requests decode (default 256)\n"
        "      --step-ms MS         ... fewer when such a step would take longer (default 150; 0: off)\n"
        "      --max-body BYTES     largest request body, K/M suffixes (default 8M); larger: 413\n"
        "      --max-tokens N       ceiling on generated tokens per request (default: the context)\n"
        "      --max-prompt N       ceiling on prompt tokens (default: the context); longer: 400\n"
        "      --queue N            requests waiting for a slot (default 256); more: 503\n"
        "      --no-queue           answer 429 when every slot is busy, or the KV pool cannot hold the prompt and\n"
        "                           64 tokens of answer, instead of queueing (a stream that fills the pool\n"
        "                           mid-answer ends with finish_reason \"length\")\n"
        "      --timeout S          a request's whole life, queue included (default 600)\n"
        "      --idle-timeout S     close connections idle this long (default 30)\n"
        "      --max-connections N  open connections at most (default 16384)\n"
        "      --shutdown-timeout S SIGTERM: time in-flight requests get to finish (default 10)\n"
        "      --lora NAME=FILE     a LoRA adapter (GGUF or PEFT folder) requests may name with \"lora\": NAME\n"
        "                           (repeatable; requests of different adapters run in turns, not in one batch)\n"
        "  -v, --verbose            more logging (-v -v: libhelix info)\n"
        "  -h, --help\n");
}

/* --lora NAME=FILE: NAME of letters, digits, '.', '_', '-' (at most 64), unique; FILE readable. */
static bool add_lora(srv_config *c, const char *v) {
    const char *eq = strchr(v, '=');
    size_t nl = eq ? (size_t)(eq - v) : 0;
    bool ok = eq && nl > 0 && nl <= 64 && eq[1];
    for (size_t i = 0; ok && i < nl; i++) ok = isalnum((unsigned char)v[i]) || strchr("._-", v[i]);
    if (!ok) { fprintf(stderr, "helix-bg serve: --lora takes NAME=FILE (NAME: letters, digits, . _ -), not '%s'\n", v); return false; }
    for (int k = 0; k < c->n_lora; k++)
        if (strlen(c->lora_name[k]) == nl && !strncmp(c->lora_name[k], v, nl)) {
            fprintf(stderr, "helix-bg serve: --lora: the name '%.*s' is given twice\n", (int)nl, v);
            return false;
        }
    if (access(eq + 1, R_OK)) { fprintf(stderr, "helix-bg serve: --lora %s: %s\n", v, strerror(errno)); return false; }
    char **n = realloc(c->lora_name, ((size_t)c->n_lora + 1) * sizeof *n);
    if (n) c->lora_name = n;
    char **p = realloc(c->lora_path, ((size_t)c->n_lora + 1) * sizeof *p);
    if (p) c->lora_path = p;
    if (!n || !p || !(c->lora_name[c->n_lora] = strndup(v, nl))) return false;
    if (!(c->lora_path[c->n_lora] = strdup(eq + 1))) { free(c->lora_name[c->n_lora]); return false; }
    c->n_lora++;
    return true;
}

static bool parse_int(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "helix-bg serve: %s takes an integer in [%ld, %ld], not '%s'\n", flag, lo, hi, v);
        return false;
    }
    *out = x;
    return true;
}

static bool parse_secs(const char *flag, const char *v, double *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= 0) || x > 1e7) {
        fprintf(stderr, "helix-bg serve: %s takes seconds >= 0, not '%s'\n", flag, v);
        return false;
    }
    *out = x;
    return true;
}

static bool parse_bytes(const char *flag, const char *v, size_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    unsigned long long mul = 1;
    if (end && (*end == 'K' || *end == 'k')) { mul = 1024; end++; }
    else if (end && (*end == 'M' || *end == 'm')) { mul = 1024 * 1024; end++; }
    if (errno || end == v || *end || v[0] == '-' || x == 0 || x > (1ull << 34) / mul) {
        fprintf(stderr, "helix-bg serve: %s takes a byte count (K/M suffix) up to 16G, not '%s'\n", flag, v);
        return false;
    }
    *out = (size_t)(x * mul);
    return true;
}

/* Reads API keys, one per line. */
static bool read_keys(const char *path, srv_config *c) {
    FILE *f = fopen(path, "r");
    if (!f) { fprintf(stderr, "helix-bg serve: --api-key-file %s: %s\n", path, strerror(errno)); return false; }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        size_t n = strlen(p);
        while (n && (p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t')) p[--n] = 0;
        if (!n || p[0] == '#') continue;
        char **k = realloc(c->api_keys, ((size_t)c->n_api_keys + 1) * sizeof *k);
        if (!k || !(k[c->n_api_keys] = strdup(p))) { fclose(f); fprintf(stderr, "helix-bg serve: out of memory\n"); return false; }
        c->api_keys = k;
        c->n_api_keys++;
    }
    fclose(f);
    return true;
}

static const char *base_name(const char *p) {
    size_t n = strlen(p);
    while (n > 1 && p[n - 1] == '/') n--;   /* a folder given with a trailing slash */
    const char *b = p + n;
    while (b > p && b[-1] != '/') b--;
    return b;
}

static void model_id_of(const char *alias, const char *path, char *out, size_t cap) {
    if (alias) { snprintf(out, cap, "%s", alias); return; }
    const char *b = base_name(path);
    size_t n = strcspn(b, "/");
    if (n > 5 && !strncmp(b + n - 5, ".gguf", 5)) n -= 5;
    snprintf(out, cap, "%.*s", (int)n, b);
}

/* ---- signals: a thread of its own waits for them ---- */
static srv *g_srv;
static int g_signals;

static void *signal_thread(void *arg) {
    sigset_t *set = arg;
    for (;;) {
        int sig = 0;
        if (sigwait(set, &sig)) continue;
        pthread_mutex_lock(&g_srv->mu);
        g_signals++;
        g_srv->stopping = g_signals >= 2 ? 2 : 1;
        pthread_cond_broadcast(&g_srv->idle);
        pthread_mutex_unlock(&g_srv->mu);
        fprintf(stderr, "serve: %s: %s\n", strsignal(sig), g_signals >= 2 ? "cancelling everything now" : "shutting down");
    }
    return NULL;
}

static bool load_progress(float frac, void *user) {
    (void)frac;
    srv *s = user;
    return !s->stopping;
}

/* Waits until no request is active or the deadline passes; true when idle. */
static bool wait_idle(srv *s, double deadline) {
    pthread_mutex_lock(&s->mu);
    while (s->n_active > 0 && util_now() < deadline && s->stopping < 2) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
        pthread_cond_timedwait(&s->idle, &s->mu, &ts);
    }
    bool idle = s->n_active == 0;
    pthread_mutex_unlock(&s->mu);
    return idle;
}

int cmd_serve(int argc, char **argv) {
    srv_config c = {
        .host = "127.0.0.1", .port = 8080, .n_parallel = 4, .n_batch = 512, .prefill_chunk = 256, .step_target_s = 0.15,
        .device = HX_DEVICE_AUTO, .max_body = 8u << 20, .max_queue = 256, .timeout_s = 600,
        .idle_timeout_s = 30, .max_connections = 16384, .shutdown_s = 10, .decoder_embeddings = true,
        .kb_max_embed = 10000,
    };
    int rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool more = i + 1 < argc;
        long v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); rc = 0; goto out_cfg; }
        else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && more) c.model_path = argv[++i];
        else if (!strcmp(a, "--alias") && more) c.alias = argv[++i];
        else if ((!strcmp(a, "-e") || !strcmp(a, "--embed-model")) && more) c.embed_path = argv[++i];
        else if (!strcmp(a, "--embed-alias") && more) c.embed_alias = argv[++i];
        else if (!strcmp(a, "--no-embeddings")) c.decoder_embeddings = false;
        else if (!strcmp(a, "--kb") && more) c.kb_dir = argv[++i];
        else if (!strcmp(a, "--kb-embed-model") && more) c.kb_embed_path = argv[++i];
        else if (!strcmp(a, "--kb-max-embed") && more) { if (!parse_int(a, argv[++i], -1, 1 << 30, &v)) goto out_cfg; c.kb_max_embed = v; }
        else if (!strcmp(a, "--host") && more) c.host = argv[++i];
        else if (!strcmp(a, "--port") && more) { if (!parse_int(a, argv[++i], 0, 65535, &v)) goto out_cfg; c.port = (int)v; }
        else if (!strcmp(a, "--api-key") && more) {
            const char *k = argv[++i];
            if (!*k) { fprintf(stderr, "helix-bg serve: --api-key is empty\n"); goto out_cfg; }
            char **p = realloc(c.api_keys, ((size_t)c.n_api_keys + 1) * sizeof *p);
            if (!p) goto out_cfg;
            c.api_keys = p;
            c.api_keys[c.n_api_keys++] = strdup(k);
        }
        else if (!strcmp(a, "--api-key-file") && more) { if (!read_keys(argv[++i], &c)) goto out_cfg; }
        else if (!strcmp(a, "--cors") && more) c.cors_origin = argv[++i];
        else if ((!strcmp(a, "--ssl-cert") || !strcmp(a, "--ssl-cert-file")) && more) c.ssl_cert = argv[++i];
        else if ((!strcmp(a, "--ssl-key") || !strcmp(a, "--ssl-key-file")) && more) c.ssl_key = argv[++i];
        else if ((!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) && more) { if (!parse_int(a, argv[++i], 0, 1 << 24, &v)) goto out_cfg; c.n_ctx = (int)v; }
        else if (!strcmp(a, "--ctx-seq") && more) { if (!parse_int(a, argv[++i], 0, 1 << 24, &v)) goto out_cfg; c.n_ctx_seq = (int)v; }
        else if ((!strcmp(a, "-np") || !strcmp(a, "--parallel")) && more) { if (!parse_int(a, argv[++i], 1, 1024, &v)) goto out_cfg; c.n_parallel = (int)v; }
        else if ((!strcmp(a, "-t") || !strcmp(a, "--threads")) && more) { if (!parse_int(a, argv[++i], 0, 1024, &v)) goto out_cfg; c.n_threads = (int)v; }
        else if ((!strcmp(a, "-b") || !strcmp(a, "--batch")) && more) { if (!parse_int(a, argv[++i], 1, 1 << 16, &v)) goto out_cfg; c.n_batch = (int)v; }
        else if (!strcmp(a, "--step-ms") && more) { if (!parse_int(a, argv[++i], 0, 100000, &v)) goto out_cfg; c.step_target_s = v / 1e3; }
        else if (!strcmp(a, "--prefill-chunk") && more) { if (!parse_int(a, argv[++i], 1, 1 << 16, &v)) goto out_cfg; c.prefill_chunk = (int)v; }
        else if ((!strcmp(a, "-tp") || !strcmp(a, "--tensor-split")) && more) { if (!parse_int(a, argv[++i], 1, 8, &v)) goto out_cfg; c.tensor_parallel = (int)v; }
        else if (!strcmp(a, "--layer-split") && more) { if (!parse_int(a, argv[++i], 1, 16, &v)) goto out_cfg; c.layer_split = (int)v; }
        else if ((!strcmp(a, "-sm") || !strcmp(a, "--split-mode")) && more) {
            const char *m = argv[++i];
            if (strcmp(m, "row") && strcmp(m, "layer")) {
                fprintf(stderr, "helix-bg serve: %s '%s': row or layer\n", a, m);
                goto out_cfg;
            }
            c.split_layer = !strcmp(m, "layer");
        }
        else if (!strcmp(a, "--device") && more) {
            const char *d = argv[++i];
            if (!strcmp(d, "auto")) c.device = HX_DEVICE_AUTO;
            else if (!strcmp(d, "cpu")) c.device = HX_DEVICE_CPU;
            else if (!strcmp(d, "cuda")) c.device = HX_DEVICE_CUDA;
            else { fprintf(stderr, "helix-bg serve: --device takes auto, cpu or cuda, not '%s'\n", d); goto out_cfg; }
        }
        else if (!strcmp(a, "--max-body") && more) { if (!parse_bytes(a, argv[++i], &c.max_body)) goto out_cfg; }
        else if (!strcmp(a, "--max-tokens") && more) { if (!parse_int(a, argv[++i], 1, 1 << 24, &v)) goto out_cfg; c.max_tokens = (int)v; }
        else if (!strcmp(a, "--max-prompt") && more) { if (!parse_int(a, argv[++i], 1, 1 << 24, &v)) goto out_cfg; c.max_prompt = (int)v; }
        else if (!strcmp(a, "--queue") && more) { if (!parse_int(a, argv[++i], 0, 1 << 20, &v)) goto out_cfg; c.max_queue = (int)v; }
        else if (!strcmp(a, "--no-queue")) c.no_queue = true;
        else if (!strcmp(a, "--timeout") && more) { if (!parse_secs(a, argv[++i], &c.timeout_s)) goto out_cfg; }
        else if (!strcmp(a, "--idle-timeout") && more) { if (!parse_int(a, argv[++i], 1, 86400, &v)) goto out_cfg; c.idle_timeout_s = (int)v; }
        else if (!strcmp(a, "--max-connections") && more) { if (!parse_int(a, argv[++i], 1, 1 << 20, &v)) goto out_cfg; c.max_connections = (int)v; }
        else if (!strcmp(a, "--shutdown-timeout") && more) { if (!parse_secs(a, argv[++i], &c.shutdown_s)) goto out_cfg; }
        else if (!strcmp(a, "--lora") && more) { if (!add_lora(&c, argv[++i])) goto out_cfg; }
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) c.verbose++;
        else { fprintf(stderr, "helix-bg serve: bad or incomplete option '%s'\n", a); usage(stderr); goto out_cfg; }
    }
    if (!c.model_path && !c.embed_path && !c.kb_dir) {
        fprintf(stderr, "helix-bg serve: -m MODEL (or -e EMBED_MODEL, or --kb KB-DIR) is required\n");
        usage(stderr);
        goto out_cfg;
    }
    if (!c.ssl_cert != !c.ssl_key) {
        fprintf(stderr, "helix-bg serve: --ssl-cert and --ssl-key go together (%s is missing)\n",
                c.ssl_cert ? "--ssl-key" : "--ssl-cert");
        goto out_cfg;
    }
    if (c.kb_embed_path && !c.kb_dir) { fprintf(stderr, "helix-bg serve: --kb-embed-model needs --kb KB-DIR\n"); goto out_cfg; }
    /* the KB's embedder: --kb-embed-model, else the -e model, else lexical-384 (NULL) */
    if (c.kb_dir && !c.kb_embed_path) c.kb_embed_path = c.embed_path;
    if (c.kb_embed_path && !strcmp(c.kb_embed_path, "lexical")) c.kb_embed_path = NULL;
    /* a missing file is reported before listening (loading reports everything else) */
    const char *paths[3] = {c.model_path, c.embed_path, c.kb_embed_path};
    static const char *const flags[3] = {"-m", "-e", "--kb-embed-model"};
    for (int i = 0; i < 3; i++)
        if (paths[i] && access(paths[i], R_OK)) {
            fprintf(stderr, "helix-bg serve: %s %s: %s\n", flags[i], paths[i], strerror(errno));
            rc = 1;
            goto out_cfg;
        }
    if (c.kb_dir) {
        char logp[4200];
        snprintf(logp, sizeof logp, "%s/data.log", c.kb_dir);
        if (access(logp, R_OK)) {
            fprintf(stderr, "helix-bg serve: --kb %s: no readable data.log there (%s)\n", c.kb_dir, strerror(errno));
            rc = 1;
            goto out_cfg;
        }
    }
    if (c.no_queue) c.max_queue = c.n_parallel;
    if (c.max_queue < 1) c.max_queue = 1;
    if (c.verbose >= 2) hx_set_log_level(2);

    /* many connections need many descriptors */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    srv *s = calloc(1, sizeof *s);
    if (!s) { fprintf(stderr, "helix-bg serve: out of memory\n"); rc = 1; goto out_cfg; }
    s->cfg = c;
    s->loading = 1;
    s->t_start = util_now();
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->emb_wake, NULL);
    pthread_cond_init(&s->idle, NULL);
    if (c.model_path) model_id_of(c.alias, c.model_path, s->model_id, sizeof s->model_id);
    if (c.embed_path) model_id_of(c.embed_alias, c.embed_path, s->emb_id, sizeof s->emb_id);
    if (c.model_path && c.embed_path && !strcmp(s->model_id, s->emb_id))
        snprintf(s->emb_id + strlen(s->emb_id), sizeof s->emb_id - strlen(s->emb_id), "-embed");
    g_srv = s;

    /* signals go to one thread; every thread started from here on inherits the mask */
    static sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_t sig_thread;
    pthread_create(&sig_thread, NULL, signal_thread, &set);
    pthread_detach(sig_thread);

    hx_error e = {0};
    rc = 1;
    if (srv_tls_load(s, &e)) { fprintf(stderr, "helix-bg serve: %s\n", e.msg); goto out; }
    if (srv_http_start(s, &e)) { fprintf(stderr, "helix-bg serve: %s\n", e.msg); goto out; }
    fprintf(stderr, "serve: listening on %s://%s%s%s:%d\n", s->tls_cert ? "https" : "http", strchr(c.host, ':') ? "[" : "", c.host,
            strchr(c.host, ':') ? "]" : "", s->port);

    /* load: the knowledge base first, so an embedder that does not match its cache fails at once */
    double t0 = util_now();
    if (c.kb_dir) {
        if (srv_kb_open(s, &e)) { fprintf(stderr, "helix-bg serve: %s\n", e.msg); goto out; }
        char d[300];
        srv_kb_describe(s, d, sizeof d);
        fprintf(stderr, "serve: knowledge base %s: %s (opened in %.1fs)\n", c.kb_dir, d, util_now() - t0);
    }
    if (c.model_path) {
        hx_model_params mp = hx_model_default_params();
        mp.device = c.device;
        mp.tensor_parallel = c.tensor_parallel > 1 && !c.split_layer ? c.tensor_parallel : 1;
        mp.layer_split = c.layer_split > 1 ? c.layer_split : c.split_layer ? c.tensor_parallel : 1;
        if (c.layer_split > 1 && c.tensor_parallel > 1) {
            fprintf(stderr, "helix-bg serve: --layer-split %d with -tp %d: give one of them\n", c.layer_split,
                    c.tensor_parallel);
            goto out;
        }
        mp.progress = load_progress;
        mp.progress_user = s;
        if (hx_model_open(c.model_path, &mp, &s->model, &e) != HX_OK) {
            fprintf(stderr, "helix-bg serve: -m %s: %s\n", c.model_path, e.msg);
            goto out;
        }
        if (hx_model_is_encoder(s->model)) {
            fprintf(stderr, "helix-bg serve: -m %s is a BERT encoder; pass it with -e for /v1/embeddings\n", c.model_path);
            goto out;
        }
        if (*hx_model_device_note(s->model)) fprintf(stderr, "serve: %s\n", hx_model_device_note(s->model));
        if (c.n_lora && !(s->adapters = calloc((size_t)c.n_lora, sizeof *s->adapters))) goto out;
        for (int k = 0; k < c.n_lora; k++) {
            if (hx_adapter_open(s->model, c.lora_path[k], &s->adapters[k], &e) != HX_OK) {
                fprintf(stderr, "helix-bg serve: --lora %s=%s: %s\n", c.lora_name[k], c.lora_path[k], e.msg);
                goto out;
            }
            fprintf(stderr, "serve: adapter '%s': %d matrices\n", c.lora_name[k], hx_adapter_n_weights(s->adapters[k]));
        }
    } else if (c.n_lora) {
        fprintf(stderr, "helix-bg serve: --lora needs a chat model (-m)\n");
        goto out;
    }
    if (c.embed_path) {
        if (hx_embedder_open(c.embed_path, c.n_threads, &s->emb, &e) != HX_OK) {
            fprintf(stderr, "helix-bg serve: -e %s: %s\n", c.embed_path, e.msg);
            goto out;
        }
        const char *dev = c.device == HX_DEVICE_CUDA ? "cuda" : c.device == HX_DEVICE_CPU ? "cpu" : "auto";
        if (hx_embedder_set_device(s->emb, dev, &e) != HX_OK) {
            fprintf(stderr, "helix-bg serve: -e %s: %s\n", c.embed_path, e.msg);
            goto out;
        }
        hx_model_params mp = hx_model_default_params();
        mp.device = HX_DEVICE_CPU;
        if (hx_model_open(c.embed_path, &mp, &s->emb_model, NULL) != HX_OK) s->emb_model = NULL;   /* token counts only */
    }
    if (s->stopping) { rc = 0; goto out; }
    if (srv_sched_start(s, &e)) { fprintf(stderr, "helix-bg serve: %s\n", e.msg); goto out; }
    s->loading = 0;
    if (s->model) {
        char kv[128];
        if (s->kv_page > 0)
            snprintf(kv, sizeof kv, "%d slots sharing %d KV positions (pages of %d, at most %d a request)", c.n_parallel,
                     s->n_ctx, s->kv_page, s->n_ctx_seq);
        else snprintf(kv, sizeof kv, "%d slots x %d positions", c.n_parallel, s->n_ctx_seq);
        fprintf(stderr, "serve: model '%s' ready in %.1fs: %s %s, %s, %s, device %s\n", s->model_id, util_now() - t0,
                hx_model_arch(s->model), hx_model_type_name(s->model), kv, hx_chat_template_name(s->model),
                hx_model_device(s->model) == HX_DEVICE_CUDA ? "cuda" : "cpu");
    }
    if (s->emb) fprintf(stderr, "serve: embedding model '%s' ready (dim %d, %s)\n", s->emb_id, hx_embedder_dim(s->emb),
                        hx_embedder_device(s->emb));
    if (!s->model && !s->emb) fprintf(stderr, "serve: ready (the knowledge base only: /v1/kb/search)\n");

    /* serve until a signal */
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) pthread_cond_wait(&s->idle, &s->mu);
    pthread_mutex_unlock(&s->mu);
    srv_http_quiesce(s);
    double deadline = util_now() + c.shutdown_s;
    if (!wait_idle(s, deadline)) {
        fprintf(stderr, "serve: cancelling the requests still running\n");
        srv_cancel_all(s);
        wait_idle(s, util_now() + 2);
    }
    rc = 0;
    fprintf(stderr, "serve: stopped\n");
out:
    srv_sched_stop(s);   /* every request still held is answered (cancelled) here */
    /* let the connections send their last bytes, then close them */
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&s->mu);
        int open = s->n_http_reqs;
        pthread_mutex_unlock(&s->mu);
        if (!open || !s->httpd) break;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    srv_http_stop(s);
    srv_tls_free(s);
    hx_embedder_free(s->emb);
    srv_kb_free(s);
    hx_model_free(s->emb_model);
    for (int k = 0; s->adapters && k < c.n_lora; k++) hx_adapter_free(s->adapters[k]);
    free(s->adapters);
    hx_model_free(s->model);
    free(s->queue);
    free(s->emb_queue);
    /* the signal thread may still look at s: leave the mutex and conds alive until exit */
out_cfg:
    for (int i = 0; i < c.n_api_keys; i++) free(c.api_keys[i]);
    free(c.api_keys);
    for (int k = 0; k < c.n_lora; k++) { free(c.lora_name[k]); free(c.lora_path[k]); }
    free(c.lora_name);
    free(c.lora_path);
    return rc;
}
