/* cmd_daemon.c — helix-bg daemon [KB-DIR]: keep insights current as data.log grows.
 *
 * One pass = read data.log, embed entries the cache lacks, analyze, rewrite
 * embeddings.bin and insights.json atomically. Between passes the daemon waits
 * for data.log to change (inotify on the directory, with a poll of size/mtime
 * every --interval seconds as the fallback and safety net). A failed pass is
 * retried with backoff (1 s doubling to 60 s) without waiting for a change.
 * The KB lock (flock on KB-DIR, see kb_lock) keeps a second daemon and one-shot
 * off the same KB. SIGINT/SIGTERM end the daemon after the write in progress;
 * SIGHUP starts a pass now. */
#include "cli.h"
#include "kb_cli.h"

#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop, g_hup;

static void on_signal(int sig) {
    if (sig == SIGHUP) g_hup = 1;
    else g_stop = 1;
}

typedef struct file_id { dev_t dev; ino_t ino; off_t size; struct timespec mtime; } file_id;

static bool same_id(const file_id *a, const file_id *b) {
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime.tv_sec == b->mtime.tv_sec &&
           a->mtime.tv_nsec == b->mtime.tv_nsec;
}

static file_id stat_id(const char *path) {
    struct stat sb;
    file_id id = {0};
    if (stat(path, &sb) == 0) id = (file_id){sb.st_dev, sb.st_ino, sb.st_size, sb.st_mtim};
    return id;
}

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...) {
    char ts[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s helix-bg daemon: ", ts);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cmd_daemon(int argc, char **argv) {
    kb_cli c;
    int rc = kb_cli_parse(&c, argc, argv, "daemon", true);
    if (rc) return rc < 0 ? 0 : rc;
    char log_path[4096];
    snprintf(log_path, sizeof log_path, "%s/data.log", c.dir);
    struct stat sb;
    if (stat(c.dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "helix-bg daemon: '%s' is not a directory (a knowledge base is a directory holding data.log)\n", c.dir);
        return 1;
    }
    if (stat(log_path, &sb) != 0) { fprintf(stderr, "helix-bg daemon: %s: no such file: not a knowledge base\n", log_path); return 1; }
    hx_error e = {0};
    int lock;
    if (kb_lock(c.dir, &lock, &e) != HX_OK) {
        fprintf(stderr, "helix-bg daemon: %s; not starting a second one\n", e.msg);
        return 1;
    }
    char pid[32];
    int pn = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (c.pidfile && hx_write_file_atomic(c.pidfile, pid, (size_t)pn, &e) != HX_OK) {
        fprintf(stderr, "helix-bg daemon: --pidfile: %s\n", e.msg);
        kb_unlock(lock);
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    kb_embedder *em = kb_cli_embedder(&c, "daemon");
    if (!em) { kb_unlock(lock); return 1; }
    kb_opts o = kb_cli_opts(&c, em);
    bool llm_failed;
    kb_llm *llm = kb_cli_llm(&c, "daemon", &llm_failed);
    if (llm_failed) { em->free(em); kb_unlock(lock); return 1; }
    kb_think_opts to = kb_cli_think_opts(&c, llm);
    to.progress = false;
    hx_pool *pool = hx_pool_create(c.threads);
    int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ino >= 0 && inotify_add_watch(ino, c.dir, IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE) < 0) {
        close(ino);
        ino = -1;
    }
    if (!c.quiet)
        log_line("watching %s (%s, %s; poll every %.3g s), embedder %s", log_path, ino >= 0 ? "inotify" : "polling",
                 "lock held", c.interval, em->name);
    file_id last = {0};
    uint64_t reported_to = 0; /* malformed lines are reported once */
    bool first = true;
    double retry_at = 0, backoff = 0; /* a failed pass is tried again at retry_at (monotonic s) */
    rc = 0;
    while (!g_stop) {
        file_id now = stat_id(log_path);
        bool retry = retry_at > 0 && cli_now() >= retry_at;
        if (first || g_hup || retry || !same_id(&now, &last)) {
            if (g_hup && !c.quiet) log_line("SIGHUP: running a pass now");
            g_hup = 0;
            first = false;
            if (now.size < last.size || now.ino != last.ino) reported_to = 0; /* rewritten: report afresh */
            kb_pass_stats st = {0};
            if (kb_run_pass(c.dir, em, pool, &o, false, false, &reported_to, &st, &e) != HX_OK) {
                if (c.once) { log_line("pass failed: %s", e.msg); rc = 1; break; }
                /* disk full, a file in the way, data.log gone: try again without
                 * waiting for a change, 1 s, 2 s, 4 s ... up to 60 s apart */
                backoff = backoff > 0 ? (backoff * 2 < 60 ? backoff * 2 : 60) : 1;
                retry_at = cli_now() + backoff;
                log_line("pass failed: %s; retrying in %.0f s", e.msg, backoff);
            } else {
                if (retry_at > 0) log_line("pass succeeded after a failure");
                retry_at = 0;
                backoff = 0;
                if (!c.quiet)
                    log_line("%s pass: %zu entries, %zu new, %.2f s, %zu near-duplicates, %zu cross-links, %zu topic overlaps%s",
                             st.incremental ? "incremental" : "full", st.live, st.embedded, st.seconds, st.dups,
                             st.links, st.overlaps,
                             st.malformed ? " (malformed lines skipped: see warnings)" : "");
                kb_think_stats ts;
                if (!c.no_think && kb_think(c.dir, em, pool, &to, false, &ts, &e) != HX_OK) {
                    /* the pass's own report stands; the classification and LLM stage is retried */
                    backoff = 1;
                    retry_at = cli_now() + backoff;
                    log_line("classification / LLM stage failed: %s; retrying in 1 s", e.msg);
                } else if (!c.no_think && !c.quiet) {
                    log_line("%zu classified, %zu likely misfiled, %zu patterns%s, %zu prompts run, %.2f s", ts.classified,
                             ts.misfiled, ts.patterns, llm ? ", LLM answers cached in llm.bin" : "", ts.llm_asked,
                             ts.seconds);
                }
            }
            last = now;
            if (c.once) break;
        }
        /* wait for a change, a signal, or the poll interval */
        int wait_ms = (int)(c.interval * 1000);
        if (retry_at > 0) {
            double left = retry_at - cli_now();
            int left_ms = left > 0 ? (int)(left * 1000) + 1 : 0;
            if (left_ms < wait_ms) wait_ms = left_ms;
        }
        if (ino >= 0) {
            struct pollfd pfd = {ino, POLLIN, 0};
            int r = poll(&pfd, 1, wait_ms);
            if (r > 0) {
                char buf[4096];
                while (read(ino, buf, sizeof buf) > 0) { /* drain */ }
                usleep(50 * 1000); /* let a burst of appends settle */
            }
        } else {
            for (int waited = 0; waited < wait_ms && !g_stop && !g_hup; waited += 100) usleep(100 * 1000);
        }
    }
    if (!c.quiet && g_stop) log_line("stopping (signal); cache and report are complete");
    if (ino >= 0) close(ino);
    hx_pool_free(pool);
    kb_llm_free(llm);
    em->free(em);
    if (c.pidfile) unlink(c.pidfile);
    kb_unlock(lock);
    return rc;
}
