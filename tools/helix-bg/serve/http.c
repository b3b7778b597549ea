/* http.c — the HTTP side of helix-bg serve, on libmicrohttpd.
 *
 * One internal polling thread (epoll when available) serves every
 * connection, so thousands of idle or slow clients cost a socket each, not a
 * thread. A request body is collected up to --max-body (a larger
 * Content-Length is refused at once with 413). Generation requests are handed
 * to the scheduler; the connection is then suspended and resumed when bytes
 * are ready: a non-stream answer once the request is done, SSE chunks as they
 * come (the content reader suspends whenever it has nothing to send). Idle
 * connections close after --idle-timeout seconds (slow-loris clients). */
#include "serve.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

typedef struct conn {
    sbuf body;
    size_t seen;           /* body bytes received (kept or not) */
    bool too_big;
    srv_req *req;          /* a generation or embedding request handed to a worker */
    double t0;
    int status;
    char method[12];
    char path[160];
    char peer[64];
} conn;

/* ------------------------------------------------------------------------ */
/* answers                                                                  */
/* ------------------------------------------------------------------------ */

static void add_common_headers(srv *s, struct MHD_Response *resp) {
    if (s->cfg.cors_origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Origin", s->cfg.cors_origin);
        MHD_add_response_header(resp, "Vary", "Origin");
    }
    MHD_add_response_header(resp, "Server", "helix-bg/" HX_VERSION);
}

/* Queues body (malloc'ed; taken) with the status. */
static enum MHD_Result reply(srv *s, struct MHD_Connection *c, conn *k, int status, char *body, const char *ctype) {
    if (!body) {
        status = 500;
        body = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"code\":null}}");
        ctype = "application/json";
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) { free(body); return MHD_NO; }
    MHD_add_response_header(resp, "Content-Type", ctype);
    add_common_headers(s, resp);
    if (status == 401) MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    if (status == 503 || status == 429) MHD_add_response_header(resp, "Retry-After", "1");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    k->status = status;
    return ret;
}

static enum MHD_Result reply_error(srv *s, struct MHD_Connection *c, conn *k, int status, const char *code,
                                   const char *msg) {
    return reply(s, c, k, status, oai_error_json(msg, oai_error_type(status), code), "application/json");
}

static enum MHD_Result reply_json(srv *s, struct MHD_Connection *c, conn *k, int status, char *body) {
    return reply(s, c, k, status, body, "application/json");
}

/* ------------------------------------------------------------------------ */
/* streaming                                                                */
/* ------------------------------------------------------------------------ */

/* libmicrohttpd asks for the next bytes of an SSE stream. Nothing ready:
 * suspend (the scheduler resumes) and return 0. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_req *r = cls;
    srv *s = r->owner;
    pthread_mutex_lock(&s->mu);
    size_t avail = r->out.len - r->out_off;
    if (avail) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, r->out.p + r->out_off, n);
        r->out_off += n;
        if (r->out_off == r->out.len) { sbuf_consume(&r->out, r->out.len); r->out_off = 0; }
        pthread_mutex_unlock(&s->mu);
        return (ssize_t)n;
    }
    if (r->done) {
        pthread_mutex_unlock(&s->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* routes                                                                   */
/* ------------------------------------------------------------------------ */

static bool authorized(srv *s, struct MHD_Connection *c) {
    if (s->cfg.n_api_keys == 0) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    while (*h == ' ') h++;
    bool ok = false;
    for (int i = 0; i < s->cfg.n_api_keys; i++) ok |= util_secret_eq(s->cfg.api_keys[i], h);
    return ok;
}

typedef enum { R_NONE, R_HEALTH, R_MODELS, R_MODEL_ONE, R_METRICS, R_CHAT, R_COMPLETION, R_EMBED, R_TOKENIZE, R_DETOKENIZE,
               R_KB_SEARCH } route_id;

static route_id route_of(const char *url, const char **method_ok) {
    static const struct { const char *path; route_id id; const char *method; } routes[] = {
        {"/health", R_HEALTH, "GET"},           {"/v1/health", R_HEALTH, "GET"},
        {"/v1/models", R_MODELS, "GET"},        {"/models", R_MODELS, "GET"},
        {"/metrics", R_METRICS, "GET"},
        {"/v1/chat/completions", R_CHAT, "POST"}, {"/chat/completions", R_CHAT, "POST"},
        {"/v1/completions", R_COMPLETION, "POST"}, {"/completions", R_COMPLETION, "POST"},
        {"/v1/embeddings", R_EMBED, "POST"},    {"/embeddings", R_EMBED, "POST"},
        {"/tokenize", R_TOKENIZE, "POST"},      {"/detokenize", R_DETOKENIZE, "POST"},
        {"/v1/kb/search", R_KB_SEARCH, "POST"},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path)) { *method_ok = routes[i].method; return routes[i].id; }
    if (!strncmp(url, "/v1/models/", 11) && url[11]) { *method_ok = "GET"; return R_MODEL_ONE; }
    return R_NONE;
}

static enum MHD_Result finish_work(srv *s, struct MHD_Connection *c, conn *k);

/* Parses, submits and answers (or suspends) a generation / embedding request. */
static enum MHD_Result start_work(srv *s, struct MHD_Connection *c, conn *k, route_id id) {
    req_kind kind = id == R_CHAT ? REQ_CHAT : id == R_COMPLETION ? REQ_COMPLETION : REQ_EMBED;
    srv_req *r = req_new(s, kind);
    if (!r) return reply_error(s, c, k, 500, "out_of_memory", "out of memory");
    oai_err err = {0};
    const char *body = k->body.p ? k->body.p : "";
    int st = kind == REQ_CHAT ? oai_parse_chat(s, body, k->body.len, r, &err)
           : kind == REQ_COMPLETION ? oai_parse_completion(s, body, k->body.len, r, &err)
           : oai_parse_embeddings(s, body, k->body.len, r, &err);
    if (r->kind == REQ_EMBED && r->emb_bert) r->model_id = s->emb_id;
    if (st) {
        req_unref(s, r);
        return reply_error(s, c, k, st, err.code, err.msg);
    }
    sbuf_free(&k->body);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->conn = c;
    r->fd = ci ? ci->connect_fd : -1;
    const char *why = "";
    if ((st = srv_submit(s, r, &why))) {
        r->conn = NULL;
        req_unref(s, r);
        return reply_error(s, c, k, st, st == 429 ? "rate_limit_exceeded" : "server_busy", why);
    }
    k->req = r;
    pthread_mutex_lock(&s->mu);
    s->n_http_reqs++;
    pthread_mutex_unlock(&s->mu);
    if (r->stream) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_read, r, NULL);
        if (!resp) { req_cancel(s, r); return MHD_NO; }
        MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        MHD_add_response_header(resp, "X-Accel-Buffering", "no");
        add_common_headers(s, resp);
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        k->status = 200;
        return ret;
    }
    pthread_mutex_lock(&s->mu);
    if (r->done) {   /* finished already (an error found at once) */
        pthread_mutex_unlock(&s->mu);
        return finish_work(s, c, k);
    }
    r->suspended = true;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&s->mu);
    return MHD_YES;
}

/* The answer of a finished non-stream request. */
static enum MHD_Result finish_work(srv *s, struct MHD_Connection *c, conn *k) {
    srv_req *r = k->req;
    pthread_mutex_lock(&s->mu);
    if (!r->done) {   /* resumed early (should not happen): wait again */
        r->suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&s->mu);
        return MHD_YES;
    }
    int status = r->status ? r->status : 500;
    char *body = sbuf_take(&r->out);
    r->out_off = 0;
    pthread_mutex_unlock(&s->mu);
    return reply_json(s, c, k, status, body);
}

static enum MHD_Result dispatch(srv *s, struct MHD_Connection *c, conn *k, const char *url, const char *method) {
    if (!strcmp(method, "OPTIONS") && s->cfg.cors_origin) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        add_common_headers(s, resp);
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
        enum MHD_Result ret = MHD_queue_response(c, 204, resp);
        MHD_destroy_response(resp);
        k->status = 204;
        return ret;
    }
    const char *want = NULL;
    route_id id = route_of(url, &want);
    if (id == R_NONE) return reply_error(s, c, k, 404, "not_found", "no such route; see GET /v1/models, POST /v1/chat/completions");
    if (strcmp(method, want) && !(id == R_HEALTH && !strcmp(method, "HEAD"))) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s takes %s, not %.12s", url, want, method);
        enum MHD_Result ret;
        char *body = oai_error_json(msg, "invalid_request_error", "method_not_allowed");
        struct MHD_Response *resp = MHD_create_response_from_buffer(body ? strlen(body) : 0, body, MHD_RESPMEM_MUST_FREE);
        MHD_add_response_header(resp, "Content-Type", "application/json");
        MHD_add_response_header(resp, "Allow", want);
        add_common_headers(s, resp);
        ret = MHD_queue_response(c, 405, resp);
        MHD_destroy_response(resp);
        k->status = 405;
        return ret;
    }
    if (id == R_HEALTH) {
        if (s->loading) return reply_json(s, c, k, 503, strdup("{\"status\":\"loading model\"}"));
        if (s->stopping) return reply_json(s, c, k, 503, strdup("{\"status\":\"shutting down\"}"));
        return reply_json(s, c, k, 200, strdup("{\"status\":\"ok\"}"));
    }
    if (!authorized(s, c)) return reply_error(s, c, k, 401, "invalid_api_key", "invalid or missing API key (Authorization: Bearer KEY)");
    if (k->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes (--max-body)", s->cfg.max_body);
        return reply_error(s, c, k, 413, "request_too_large", msg);
    }
    if (id == R_METRICS) return reply(s, c, k, 200, oai_metrics(s), "text/plain; version=0.0.4; charset=utf-8");
    if (s->loading) return reply_error(s, c, k, 503, "model_loading", "the model is still loading");
    if (s->stopping && id != R_MODELS) return reply_error(s, c, k, 503, "shutting_down", "the server is shutting down");
    switch (id) {
    case R_MODELS: return reply_json(s, c, k, 200, oai_models(s));
    case R_MODEL_ONE: {
        char *b = oai_model_one(s, url + 11);
        if (!b) return reply_error(s, c, k, 404, "model_not_found", "no such model");
        return reply_json(s, c, k, 200, b);
    }
    case R_TOKENIZE:
    case R_DETOKENIZE: {
        if (!s->model) return reply_error(s, c, k, 400, "no_model", "this server has no chat model");
        int st = 500;
        const char *body = k->body.p ? k->body.p : "";
        char *b = id == R_TOKENIZE ? oai_tokenize(s, body, k->body.len, &st) : oai_detokenize(s, body, k->body.len, &st);
        return reply_json(s, c, k, st, b);
    }
    case R_KB_SEARCH: {
        /* answered here, on the HTTP thread: a search takes milliseconds (kb.c) */
        if (!s->kb)
            return reply_error(s, c, k, 400, "kb_not_enabled",
                               "this server has no knowledge base: start it with --kb KB-DIR for /v1/kb/search");
        int st = 500;
        const char *body = k->body.p ? k->body.p : "";
        char *b = oai_kb_search(s, body, k->body.len, &st);
        return reply_json(s, c, k, st, b);
    }
    case R_CHAT:
    case R_COMPLETION:
        if (!s->model) return reply_error(s, c, k, 404, "model_not_found", "this server has no chat model (-m)");
        return start_work(s, c, k, id);
    case R_EMBED:
        return start_work(s, c, k, id);
    default:
        return reply_error(s, c, k, 404, "not_found", "no such route");
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *s = cls;
    conn *k = *con_cls;
    if (!k) {
        k = calloc(1, sizeof *k);
        if (!k) return MHD_NO;
        *con_cls = k;
        k->t0 = util_now();
        snprintf(k->method, sizeof k->method, "%s", method);
        snprintf(k->path, sizeof k->path, "%s", url);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        if (ci && ci->client_addr) {
            const struct sockaddr *sa = ci->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, k->peer, sizeof k->peer);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, k->peer, sizeof k->peer);
        }
        /* a body announced larger than the limit is refused before it is read */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end = NULL;
            unsigned long long n = strtoull(cl, &end, 10);
            if (end != cl && n > s->cfg.max_body) {
                char msg[96];
                snprintf(msg, sizeof msg, "the request body is %llu bytes; the limit is %zu (--max-body)", n, s->cfg.max_body);
                return reply_error(s, c, k, 413, "request_too_large", msg);
            }
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        k->seen += n;
        if (!k->too_big && k->body.len + n > s->cfg.max_body) { k->too_big = true; sbuf_free(&k->body); }
        if (!k->too_big) sbuf_add(&k->body, upload, n);
        if (k->body.oom) { k->too_big = true; sbuf_free(&k->body); }
        *upload_size = 0;
        /* a chunked body far past the limit: stop reading, close */
        if (k->seen > 4 * s->cfg.max_body + (1 << 20)) return MHD_NO;
        return MHD_YES;
    }
    if (k->req) return finish_work(s, c, k);
    if (k->status) return MHD_YES;   /* already answered (early 413) */
    return dispatch(s, c, k, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)c;
    srv *s = cls;
    conn *k = *con_cls;
    if (!k) return;
    *con_cls = NULL;
    srv_req *r = k->req;
    int prompt = 0, cached = 0, gen = 0;
    fin_reason fin = FIN_NONE;
    double ttft = 0;
    if (r) {
        pthread_mutex_lock(&s->mu);
        r->http_done = true;
        s->n_http_reqs--;
        r->conn = NULL;
        r->fd = -1;
        r->suspended = false;
        if (!r->done) {
            r->cancelled = true;   /* the client went away mid-request: free its slot now */
            pthread_cond_broadcast(&s->wake);
            pthread_cond_broadcast(&s->emb_wake);
        }
        prompt = r->usage_prompt;
        cached = r->usage_cached;
        gen = r->usage_gen;
        fin = r->done ? r->fin : FIN_CANCELLED;
        ttft = r->t_first > 0 ? r->t_first - r->t_arrive : 0;
        pthread_mutex_unlock(&s->mu);
    }
    /* one line per request */
    const char *how = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" :
                      toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT ? " client-abort" :
                      toe == MHD_REQUEST_TERMINATED_TIMEOUT_REACHED ? " idle-timeout" :
                      toe == MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN ? " shutdown" : " connection-error";
    double ms = (util_now() - k->t0) * 1e3;
    if (r)
        fprintf(stderr, "serve: %s %s %s %d %.1fms %s prompt=%d cached=%d gen=%d ttft=%.1fms finish=%s%s\n", k->peer,
                k->method, k->path, k->status, ms, r->id, prompt, cached, gen, ttft * 1e3,
                fin == FIN_NONE ? "none" : oai_finish_str(fin), how);
    else if (k->status || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK)
        fprintf(stderr, "serve: %s %s %s %d %.1fms%s\n", k->peer, k->method, k->path, k->status, ms, how);
    if (r) req_unref(s, r);
    sbuf_free(&k->body);
    free(k);
}

static void mhd_log(void *cls, const char *fmt, va_list ap) {
    srv *s = cls;
    if (s->http_starting) {   /* start-up: keep the reason MHD_start_daemon may fail with (one thread yet) */
        va_list aq;
        va_copy(aq, ap);
        vsnprintf(s->http_err, sizeof s->http_err, fmt, aq);
        va_end(aq);
        size_t n = strlen(s->http_err);
        while (n && (s->http_err[n - 1] == '\n' || s->http_err[n - 1] == '.')) s->http_err[--n] = 0;
    }
    if (s->cfg.verbose < 1) return;
    fprintf(stderr, "serve: libmicrohttpd: ");
    vfprintf(stderr, fmt, ap);
}

/* ------------------------------------------------------------------------ */
/* start / stop                                                             */
/* ------------------------------------------------------------------------ */

int srv_http_start(srv *s, hx_error *e) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    flags |= MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES ? MHD_USE_EPOLL : MHD_USE_POLL;
    if (strchr(s->cfg.host, ':')) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)s->cfg.port);
        if (inet_pton(AF_INET6, s->cfg.host, &a->sin6_addr) != 1) {
            snprintf(e->msg, sizeof e->msg, "--host '%s' is not an IPv6 address", s->cfg.host);
            return 1;
        }
        flags |= MHD_USE_IPv6;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)s->cfg.port);
        const char *h = !strcmp(s->cfg.host, "localhost") ? "127.0.0.1" : s->cfg.host;
        if (inet_pton(AF_INET, h, &a->sin_addr) != 1) {
            snprintf(e->msg, sizeof e->msg, "--host '%s' is not an IPv4 address (or localhost)", s->cfg.host);
            return 1;
        }
    }
    /* HTTPS: libmicrohttpd's TLS with both PEM texts from memory (checked by srv_tls_load) */
    struct MHD_OptionItem tls[] = {
        {MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert},
        {MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key},
        {MHD_OPTION_END, 0, NULL},
    };
    if (s->tls_cert) flags |= MHD_USE_TLS;
    else tls[0].option = MHD_OPTION_END;
    s->http_err[0] = 0;
    s->http_starting = 1;
    s->httpd = MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s,
                                MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                                MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                                MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->cfg.max_connections,
                                MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->cfg.idle_timeout_s,
                                MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
                                MHD_OPTION_ARRAY, tls,
                                MHD_OPTION_END);
    s->http_starting = 0;
    if (!s->httpd) {
        snprintf(e->msg, sizeof e->msg, "cannot listen on %s:%d%s: %s", s->cfg.host, s->cfg.port, s->tls_cert ? " with TLS" : "",
                 s->http_err[0] ? s->http_err : "address in use, or not allowed");
        return 1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->httpd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    return 0;
}

void srv_http_quiesce(srv *s) {
    if (!s->httpd) return;
    MHD_socket fd = MHD_quiesce_daemon(s->httpd);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void srv_http_stop(srv *s) {
    if (!s->httpd) return;
    MHD_stop_daemon(s->httpd);
    s->httpd = NULL;
}
