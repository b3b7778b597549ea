/* kb.c — KB files (safe opens, the lock), data.log reader, lexical embedder,
 * embedding cache (see kb.h). */
#include "kb/kb.h"
#include "kb/analyze.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define FNV0 HX_FNV_INIT_SHORT

/* kb_sum64 in pieces: sum64_blocks over whole 32-byte blocks, in order,
 * then sum64_end with the tail (under 32 bytes) and the total length */
static void sum64_blocks(uint64_t h[4], const unsigned char *s, size_t n) {
    for (size_t i = 0; i + 32 <= n; i += 32)
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, s + i + 8 * l, 8);
            h[l] = (h[l] ^ w) * 1099511628211ull;
        }
}

static uint64_t sum64_end(const uint64_t h[4], const unsigned char *tail, size_t n_tail, size_t n) {
    uint64_t t = hx_fnv1a(tail, n_tail, FNV0);
    t = hx_fnv1a(h, 4 * sizeof *h, t);
    return hx_fnv1a(&n, sizeof n, t);
}

uint64_t kb_sum64(const void *p, size_t n) {
    uint64_t h[4] = {FNV0, FNV0 ^ 1, FNV0 ^ 2, FNV0 ^ 3};
    sum64_blocks(h, p, n);
    return sum64_end(h, (const unsigned char *)p + n / 32 * 32, n % 32, n);
}

/* ---- files in the KB directory ----
 * Every file helix-bg writes there goes through hx_write_file_atomic (a fresh
 * O_EXCL|O_NOFOLLOW temp file, then rename). Files it reads must be regular:
 * a FIFO would block the reader forever, /dev/zero would be read until memory
 * runs out. They are opened O_NONBLOCK (so a FIFO open does not wait for a
 * writer) and checked with fstat before any read. */

int kb_open_regular(const char *path, bool nofollow, struct stat *sb, hx_error *e) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
    if (fd < 0) {
        if (nofollow && errno == ELOOP) hx_err(e, HX_ERR_IO, "%s: is a symbolic link; not followed", path);
        else hx_err(e, HX_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, sb) != 0) {
        hx_err(e, HX_ERR_IO, "%s: stat failed: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(sb->st_mode)) {
        const char *what = S_ISFIFO(sb->st_mode) ? "a FIFO" : S_ISCHR(sb->st_mode) ? "a character device"
                         : S_ISBLK(sb->st_mode) ? "a block device" : S_ISSOCK(sb->st_mode) ? "a socket"
                         : S_ISDIR(sb->st_mode) ? "a directory" : "not a plain file";
        hx_err(e, HX_ERR_IO, "%s: is %s, not a regular file; refusing to read it", path, what);
        close(fd);
        return -1;
    }
    return fd;
}

/* pread exactly n bytes at off; false on a short read or an error. */
static bool pread_all(int fd, void *buf, size_t n, uint64_t off) {
    char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r; n -= (size_t)r; off += (uint64_t)r;
    }
    return true;
}

/* Stale temp files of writes a killed process left behind ("<name>.tmp.*" for
 * the files the KB writes). Only called with the lock held: nobody writes now. */
static void remove_stale_temps(int dfd) {
    int d2 = dup(dfd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d) { if (d2 >= 0) close(d2); return; }
    static const char *outs[] = {"embeddings.bin.tmp.", "embeddings.add.tmp.", "insights.json.tmp.", "insights.state.tmp.",
                                 ".helix.lock.tmp."};
    struct dirent *de;
    while ((de = readdir(d)))
        for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++)
            if (!strncmp(de->d_name, outs[i], strlen(outs[i]))) unlinkat(dfd, de->d_name, 0); /* a link is removed, not followed */
    closedir(d);
}

hx_status kb_lock(const char *dir, int *lock_fd, hx_error *e) {
    *lock_fd = -1;
    /* the lock is flock on the directory itself: it cannot be a planted link to
     * another file, and removing .helix.lock (only a note of the holder's pid)
     * does not release it */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return hx_err(e, HX_ERR_IO, "%s: cannot open the directory: %s", dir, strerror(errno));
    char note[4200];
    snprintf(note, sizeof note, "%s/.helix.lock", dir);
    if (flock(dfd, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        close(dfd);
        if (err != EWOULDBLOCK) return hx_err(e, HX_ERR_IO, "%s: cannot lock: %s", dir, strerror(err));
        char pid[32] = "?";
        struct stat sb;
        hx_error e2;
        int fd = kb_open_regular(note, true, &sb, &e2);
        if (fd >= 0) {
            ssize_t r = pread(fd, pid, sizeof pid - 1, 0);
            pid[r > 0 ? r : 0] = 0;
            pid[strcspn(pid, "\n")] = 0;
            if (!pid[0] || strspn(pid, "0123456789") != strlen(pid)) strcpy(pid, "?");
            close(fd);
        }
        return hx_err(e, HX_ERR_IO, "%s is locked by another helix-bg (pid %s: a daemon, or a pass in progress)", dir, pid);
    }
    remove_stale_temps(dfd);
    char pid[32];
    int pn = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    hx_error e2;
    if (hx_write_file_atomic(note, pid, (size_t)pn, &e2) != HX_OK)
        HX_WARN("%s; the lock is held all the same", e2.msg); /* the note is informational only */
    *lock_fd = dfd;
    return HX_OK;
}

void kb_unlock(int lock_fd) {
    if (lock_fd >= 0) close(lock_fd); /* closing the last fd releases the flock */
}

/* ---- data.log ---- */

/* Strict UTF-8 check (no overlongs, no surrogates, <= U+10FFFF). */
static bool utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            i++;
            for (uint64_t w; i + 8 <= n; i += 8) {   /* ASCII runs 8 bytes at a time */
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ull) break;
            }
            continue;
        }
        int k = (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2 : (c & 0xf8) == 0xf0 ? 3 : -1;
        if (k < 0 || (size_t)k >= n - i) return false;
        uint32_t cp = c & (0x3fu >> k);
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10ffff ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += (size_t)k + 1;
    }
    return true;
}

static bool log_push(kb_log *log, kb_entry en) {
    if (log->n == log->cap) {
        size_t cap = log->cap ? log->cap * 2 : 256;
        kb_entry *ne = realloc(log->e, cap * sizeof *ne);
        if (!ne) return false;
        log->e = ne;
        log->cap = cap;
    }
    log->e[log->n++] = en;
    return true;
}

kb_entry *kb_log_find(const kb_log *log, uint64_t off) {
    size_t lo = 0, hi = log->n; /* offsets increase: binary search */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (log->e[mid].offset < off) lo = mid + 1;
        else hi = mid;
    }
    return lo < log->n && log->e[lo].offset == off ? &log->e[lo] : NULL;
}

char *kb_entry_text(const kb_entry *en) {
    size_t a = en->title ? strlen(en->title) : 0, b = strlen(en->text);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    if (a) { memcpy(s, en->title, a); s[a] = '\n'; memcpy(s + a + 1, en->text, b + 1); }
    else memcpy(s, en->text, b + 1);
    return s;
}

static void malformed(kb_log *log, const char *path, uint64_t off, const char *why) {
    log->n_malformed++;
    if (off < log->quiet_below) return;
    HX_WARN("%s: offset %llu: %s; line skipped", path, (unsigned long long)off, why);
}

static bool find_u64(const uint64_t *v, size_t n, uint64_t x) {
    size_t lo = 0, hi = n;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (v[m] < x) lo = m + 1; else hi = m; }
    return lo < n && v[lo] == x;
}

/* A JSON "\u0000" escape anywhere in the line (a backslash escape is skipped
 * whole, so "\\u0000" - an escaped backslash, then text - is not one). */
static bool has_nul_escape(const char *s, size_t n) {
    size_t i = 0;
    while (i + 1 < n) {
        const char *b = memchr(s + i, '\\', n - 1 - i);   /* the next backslash with a byte after it */
        if (!b) break;
        i = (size_t)(b - s);
        if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return true;
        i += 2; /* past the escaped character */
    }
    return false;
}

/* 2^53: every integer below it is exact in the double cJSON parses numbers
 * into. A byte offset beyond it (9 PB) names no entry of any real data.log. */
#define KB_MAX_EXACT_OFFSET 9007199254740992.0

/* Parse one complete line at offset off. line[len] is writable (it held the
 * '\n') and is set to 0 for the parse, so trailing bytes after the object are
 * caught. Choices for inputs that would otherwise be silent:
 *  - a NUL byte, raw or as "\u0000": helix keeps strings as C strings and
 *    would cut the text there, so the line is skipped with a warning;
 *  - a bare CR inside the line (CR-only line endings): the line is skipped
 *    with a warning that says so; "\r\n" endings are fine (JSON whitespace);
 *  - {"delete": x} must be an exact integer in [0, 2^53) naming an entry
 *    before it; anything else is warned about (naming the line) and ignored. */
static hx_status parse_line(kb_log *log, const char *path, char *line, size_t len, uint64_t off) {
    if (len == 0 || (len == 1 && line[0] == '\r')) return HX_OK; /* blank line */
    if (memchr(line, 0, len)) { malformed(log, path, off, "NUL byte in the line"); return HX_OK; }
    if (!utf8_valid((const unsigned char *)line, len)) { malformed(log, path, off, "invalid UTF-8"); return HX_OK; }
    if (has_nul_escape(line, len)) {
        malformed(log, path, off, "\\u0000 (NUL) in a string: helix would cut the text there");
        return HX_OK;
    }
    char saved = line[len];
    line[len] = 0;
    cJSON *j = cJSON_ParseWithLengthOpts(line, len + 1, NULL, 1);
    line[len] = saved;
    if (!j || !cJSON_IsObject(j)) {
        const char *cr = memchr(line, '\r', len);
        malformed(log, path, off, cr && cr != line + len - 1
                  ? "bare carriage return in the line (CR-only line endings? data.log lines end in \\n)"
                  : j ? "not a JSON object" : "not a JSON object (or bytes after it)");
        cJSON_Delete(j);
        return HX_OK;
    }
    const cJSON *del = cJSON_GetObjectItemCaseSensitive(j, "delete");
    if (del) {
        double v = cJSON_IsNumber(del) ? del->valuedouble : -1;
        char why[160];
        if (!cJSON_IsNumber(del) || !(v >= 0 && v < KB_MAX_EXACT_OFFSET) || v != floor(v)) {
            if (cJSON_IsNumber(del))
                snprintf(why, sizeof why, "\"delete\": %.17g is not a byte offset (an integer in [0, 2^53)); ignored", v);
            else
                snprintf(why, sizeof why, "\"delete\" is not a number; ignored");
            malformed(log, path, off, why);
        } else {
            uint64_t x = (uint64_t)v;
            kb_entry *t = kb_log_find(log, x);
            if (!t && find_u64(log->prior_live, log->n_prior_live, x)) {
                if (log->n_del == log->del_cap) {
                    size_t cap = log->del_cap ? log->del_cap * 2 : 64;
                    uint64_t *nd = realloc(log->del, cap * sizeof *nd);
                    if (!nd) { cJSON_Delete(j); return HX_ERR_NOMEM; }
                    log->del = nd;
                    log->del_cap = cap;
                }
                log->del[log->n_del++] = x;
            } else if (!t && x < log->defer_below) { /* an earlier range's: the caller resolves it */
                if (log->n_deferred == log->deferred_cap) {
                    size_t cap = log->deferred_cap ? log->deferred_cap * 2 : 64;
                    uint64_t *nd = realloc(log->deferred, 2 * cap * sizeof *nd);
                    if (!nd) { cJSON_Delete(j); return HX_ERR_NOMEM; }
                    log->deferred = nd;
                    log->deferred_cap = cap;
                }
                log->deferred[2 * log->n_deferred] = off;
                log->deferred[2 * log->n_deferred++ + 1] = x;
            } else if (!t && find_u64(log->prior_deleted, log->n_prior_deleted, x)) {
                /* deleted by an earlier pass: deleting twice is harmless */
            } else if (!t) {
                snprintf(why, sizeof why, "\"delete\": %llu names no entry (no entry line starts at that offset); ignored",
                         (unsigned long long)v);
                malformed(log, path, off, why);
            } else {
                t->deleted = true; /* deleting twice is harmless */
            }
        }
        cJSON_Delete(j);
        return HX_OK;
    }
    const cJSON *topic = cJSON_GetObjectItemCaseSensitive(j, "topic"), *text = cJSON_GetObjectItemCaseSensitive(j, "text");
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(j, "title");
    if (!cJSON_IsString(topic) || !cJSON_IsString(text) || !*topic->valuestring) {
        malformed(log, path, off, "entry needs string \"topic\" and \"text\"");
        cJSON_Delete(j);
        return HX_OK;
    }
    kb_entry en = {.offset = off, .topic = strdup(topic->valuestring), .text = strdup(text->valuestring),
                   .title = cJSON_IsString(title) && *title->valuestring ? strdup(title->valuestring) : NULL};
    cJSON_Delete(j);
    if (!en.topic || !en.text) { free(en.topic); free(en.text); free(en.title); return HX_ERR_NOMEM; }
    /* the hash of kb_entry_text's "title\ntext" (or text), formed in pieces */
    en.hash = FNV0;
    if (en.title) en.hash = hx_fnv1a("\n", 1, hx_fnv1a(en.title, strlen(en.title), en.hash));
    en.hash = hx_fnv1a(en.text, strlen(en.text), en.hash);
    if (!log_push(log, en)) { free(en.topic); free(en.text); free(en.title); return HX_ERR_NOMEM; }
    return HX_OK;
}

hx_status kb_log_read(kb_log *log, const char *path, hx_error *e) {
    struct stat sb;
    int fd = kb_open_regular(path, false, &sb, e);
    if (fd < 0) return e ? e->status : HX_ERR_IO;
    uint64_t size = (uint64_t)sb.st_size;
    if (log->read_end && log->read_end < size) size = log->read_end;
    if (size < log->read_to) {
        close(fd);
        return hx_err(e, HX_ERR_RANGE, "%s: file shrank from %llu to %llu bytes: the log was rewritten", path,
                      (unsigned long long)log->read_to, (unsigned long long)size);
    }
    /* read in chunks; only complete lines are consumed */
    uint64_t pos = log->read_to;
    size_t cap = size - pos < (1u << 20) ? (size_t)(size - pos) + 1 : (1u << 20), have = 0; /* grows for longer lines */
    char *buf = malloc(cap);
    hx_status st = HX_OK;
    if (!buf) { close(fd); return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); }
    while (pos + have < size) {
        if (have == cap) {
            char *nb = realloc(buf, cap * 2); /* a line longer than the buffer: grow */
            if (!nb) { st = hx_err(e, HX_ERR_NOMEM, "%s: out of memory for a line at offset %llu", path, (unsigned long long)pos); break; }
            buf = nb;
            cap *= 2;
        }
        size_t want = cap - have;
        if (want > size - pos - have) want = (size_t)(size - pos - have);
        ssize_t r = pread(fd, buf + have, want, (off_t)(pos + have));
        if (r < 0) { if (errno == EINTR) continue; st = hx_err(e, HX_ERR_IO, "%s: read failed: %s", path, strerror(errno)); break; }
        if (r == 0) break;
        have += (size_t)r;
        size_t start = 0;
        for (;;) {
            char *nl = memchr(buf + start, '\n', have - start);
            if (!nl) break;
            size_t len = (size_t)(nl - (buf + start));
            if ((st = parse_line(log, path, buf + start, len, pos + start))) {
                st = hx_err(e, st, "%s: out of memory at offset %llu", path, (unsigned long long)(pos + start));
                break;
            }
            start += len + 1;
        }
        if (st) break;
        memmove(buf, buf + start, have - start);
        have -= start;
        pos += start;
    }
    /* An unfinished last line is normally a write in progress. With carriage
     * returns in it, it is more likely a file with CR-only line endings, which
     * would otherwise never be read without a word: say so, once. */
    if (!st && have && memchr(buf, '\r', have) && pos + have > log->quiet_below) {
        HX_WARN("%s: offset %llu: the last %zu bytes hold carriage returns but no newline (CR-only line endings?); "
                "data.log lines must end in \\n, so they are not read", path, (unsigned long long)pos, have);
        log->quiet_below = pos + have;
    }
    free(buf);
    close(fd);
    log->read_to = pos; /* a partial last line stays unread */
    return st;
}

hx_status kb_line_start(int fd, uint64_t p, uint64_t size, uint64_t *out, const char *path, hx_error *e) {
    if (p == 0 || p >= size) { *out = p < size ? p : size; return HX_OK; }
    char buf[65536];
    uint64_t at = p - 1; /* the byte before p: a '\n' there makes p a line start */
    while (at < size) {
        size_t want = size - at < sizeof buf ? (size_t)(size - at) : sizeof buf;
        ssize_t r = pread(fd, buf, want, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return hx_err(e, HX_ERR_IO, "%s: read failed at offset %llu", path, (unsigned long long)at);
        char *nl = memchr(buf, '\n', (size_t)r);
        if (nl) { *out = at + (uint64_t)(nl - buf) + 1; return HX_OK; }
        at += (uint64_t)r;
    }
    *out = size;
    return HX_OK;
}

hx_status kb_log_split_begin(kb_log_split *s, const char *path, int parts, uint64_t quiet_below, hx_error *e) {
    memset(s, 0, sizeof *s);
    snprintf(s->path, sizeof s->path, "%s", path);
    struct stat sb;
    int fd = kb_open_regular(path, false, &sb, e);
    if (fd < 0) return e ? e->status : HX_ERR_IO;
    uint64_t size = (uint64_t)sb.st_size;
    /* parts of at least 1 MiB: below that a thread costs more than it saves */
    if (parts > 16) parts = 16;
    if ((uint64_t)parts > size / (1u << 20)) parts = (int)(size / (1u << 20));
    if (parts < 1) parts = 1;
    s->parts = parts;
    s->bounds[parts] = size;
    hx_status st = HX_OK;
    for (int k = 1; k < parts && !st; k++) {
        st = kb_line_start(fd, size / (uint64_t)parts * (uint64_t)k, size, &s->bounds[k], path, e);
        if (!st && s->bounds[k] < s->bounds[k - 1]) s->bounds[k] = s->bounds[k - 1];
    }
    close(fd);
    for (int k = 0; k < parts; k++)
        s->part[k] = (kb_log){.read_to = s->bounds[k], .read_end = s->bounds[k + 1], .defer_below = s->bounds[k],
                              .quiet_below = quiet_below};
    return st;
}

void kb_log_split_read(kb_log_split *s, int k) {
    if (k < 0 || k >= s->parts) return;
    if (s->bounds[k + 1] > s->bounds[k] || (k == s->parts - 1 && s->bounds[k + 1] == 0))
        s->st[k] = kb_log_read(&s->part[k], s->path, &s->err[k]);
}

hx_status kb_log_split_end(kb_log_split *s, kb_log *out, hx_error *e) {
    hx_status st = HX_OK;
    size_t total = 0;
    for (int k = 0; k < s->parts; k++) {
        if (s->st[k] && !st) {
            st = s->st[k];
            if (e) *e = s->err[k];
        }
        total += s->part[k].n;
    }
    memset(out, 0, sizeof *out);
    if (!st && !(out->e = malloc((total ? total : 1) * sizeof *out->e))) st = hx_err(e, HX_ERR_NOMEM, "%s: out of memory", s->path);
    if (st) {
        for (int k = 0; k < s->parts; k++) kb_log_free(&s->part[k]);
        return st;
    }
    /* entries in range order (offsets increase), ownership of their strings moved */
    out->cap = total ? total : 1;
    for (int k = 0; k < s->parts; k++) {
        kb_log *p = &s->part[k];
        if (p->n) memcpy(out->e + out->n, p->e, p->n * sizeof *p->e);
        out->n += p->n;
        out->n_malformed += p->n_malformed;
        p->n = 0;
    }
    kb_log *last = &s->part[s->parts - 1];
    out->read_to = last->read_to;
    out->quiet_below = last->quiet_below;
    /* deletes of entries in earlier ranges, in log order: every earlier entry
     * is in out, so the single read's verdict is found there */
    for (int k = 0; k < s->parts; k++) {
        const kb_log *p = &s->part[k];
        for (size_t q = 0; q < p->n_deferred; q++) {
            uint64_t line = p->deferred[2 * q], x = p->deferred[2 * q + 1];
            kb_entry *en = kb_log_find(out, x);
            if (en) { en->deleted = true; continue; } /* deleting twice is harmless */
            char why[160];
            snprintf(why, sizeof why, "\"delete\": %llu names no entry (no entry line starts at that offset); ignored",
                     (unsigned long long)x);
            malformed(out, s->path, line, why);
        }
    }
    for (int k = 0; k < s->parts; k++) kb_log_free(&s->part[k]);
    return HX_OK;
}

hx_status kb_log_read_at(kb_log *log, const char *path, const uint64_t *offs, size_t n, hx_error *e) {
    struct stat sb;
    int fd = kb_open_regular(path, false, &sb, e);
    if (fd < 0) return e ? e->status : HX_ERR_IO;
    size_t cap = 4096;
    char *buf = malloc(cap);
    hx_status st = buf ? HX_OK : hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < n && !st; i++) {
        size_t have = 0;
        char *nl = NULL;
        while (!nl) { /* the line, however long */
            if (have == cap) {
                char *nb = realloc(buf, cap * 2);
                if (!nb) { st = hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path); break; }
                buf = nb;
                cap *= 2;
            }
            ssize_t r = pread(fd, buf + have, cap - have, (off_t)(offs[i] + have));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            nl = memchr(buf + have, '\n', (size_t)r);
            have += (size_t)r;
        }
        if (st) break;
        size_t before = log->n;
        if (nl && (st = parse_line(log, path, buf, (size_t)(nl - buf), offs[i])))
            st = hx_err(e, st, "%s: out of memory", path);
        else if (!nl || log->n != before + 1)
            st = hx_err(e, HX_ERR_RANGE, "%s: offset %llu no longer holds an entry: the log was rewritten", path,
                        (unsigned long long)offs[i]);
    }
    free(buf);
    close(fd);
    return st;
}

void kb_log_free(kb_log *log) {
    for (size_t i = 0; i < log->n; i++) { free(log->e[i].topic); free(log->e[i].title); free(log->e[i].text); }
    free(log->e);
    free(log->del);
    free(log->deferred);
    memset(log, 0, sizeof *log);
}

size_t kb_log_live(const kb_log *log) {
    size_t n = 0;
    for (size_t i = 0; i < log->n; i++) n += !log->e[i].deleted;
    return n;
}

/* ---- the built-in lexical embedder ----
 * Feature hashing of lowercased word unigrams and bigrams, weight 1 + log(tf),
 * a sign bit from the hash (so collisions cancel instead of pile up), common
 * English function words down-weighted, L2-normalized, 384 dims. */
#define LEX_DIM 384

static const char *k_stop[] = {"the", "a", "an", "and", "or", "of", "to", "in", "on", "for", "is", "are", "was",
                               "be", "it", "this", "that", "with", "as", "at", "by", "we", "our", "from", "not",
                               "but", "if", "when", "so", "can", "will", "its", "has", "have", "into", "than"};

static bool is_stop(const char *w, size_t n) {
    for (size_t i = 0; i < sizeof k_stop / sizeof k_stop[0]; i++)
        if (strlen(k_stop[i]) == n && !memcmp(k_stop[i], w, n)) return true;
    return false;
}

typedef struct feat { uint64_t h; float w; } feat;

static int feat_cmp(const void *a, const void *b) {
    uint64_t x = ((const feat *)a)->h, y = ((const feat *)b)->h;
    return x < y ? -1 : x > y;
}

static void lex_one(const char *text, float *out) {
    size_t n = strlen(text);
    char *low = malloc(n + 1);
    feat *f = malloc(sizeof *f * (2 * n + 2));
    memset(out, 0, sizeof(float) * LEX_DIM);
    if (!low || !f) { free(low); free(f); return; }
    size_t nf = 0;
    const char *pw = NULL; /* previous word */
    size_t pn = 0;
    bool pstop = false;
    for (size_t i = 0; i < n;) {
        /* words: runs of ASCII alphanumerics, '_' and any non-ASCII byte */
        while (i < n && !(isalnum((unsigned char)text[i]) || text[i] == '_' || (unsigned char)text[i] >= 0x80)) i++;
        size_t s = i;
        while (i < n && (isalnum((unsigned char)text[i]) || text[i] == '_' || (unsigned char)text[i] >= 0x80)) {
            low[i] = (char)tolower((unsigned char)text[i]);
            i++;
        }
        if (i == s) break;
        const char *w = low + s;
        size_t wn = i - s;
        bool stop = is_stop(w, wn);
        f[nf++] = (feat){hx_fnv1a(w, wn, FNV0), stop ? 0.2f : 1.0f};
        if (pw) {
            uint64_t h = hx_fnv1a(w, wn, hx_fnv1a(" ", 1, hx_fnv1a(pw, pn, FNV0 ^ 0x5bd1e995)));
            f[nf++] = (feat){h, (stop && pstop) ? 0.1f : 0.7f};
        }
        pw = w; pn = wn; pstop = stop;
    }
    /* term frequency per distinct feature: sort and count */
    qsort(f, nf, sizeof *f, feat_cmp);
    for (size_t i = 0; i < nf;) {
        size_t j = i;
        while (j < nf && f[j].h == f[i].h) j++;
        float tf = (float)(j - i), w = f[i].w * (1.0f + logf(tf));
        uint64_t h = f[i].h * 0x9e3779b97f4a7c15ull;
        out[(h >> 8) % LEX_DIM] += (h >> 63) ? -w : w;
        i = j;
    }
    double s2 = 0;
    for (int k = 0; k < LEX_DIM; k++) s2 += (double)out[k] * out[k];
    if (s2 > 0) { float inv = (float)(1.0 / sqrt(s2)); for (int k = 0; k < LEX_DIM; k++) out[k] *= inv; }
    free(low);
    free(f);
}

static hx_status lex_embed(kb_embedder *self, const char *const *texts, int n, float *out, hx_error *e) {
    (void)self; (void)e;
    for (int i = 0; i < n; i++) lex_one(texts[i], out + (size_t)i * LEX_DIM);
    return HX_OK;
}

static void simple_free(kb_embedder *self) { free(self); }

kb_embedder *kb_lexical_new(void) {
    kb_embedder *em = calloc(1, sizeof *em);
    if (!em) return NULL;
    snprintf(em->name, sizeof em->name, "lexical-384");
    snprintf(em->fingerprint, sizeof em->fingerprint, "lexical-384:v1");
    em->dim = LEX_DIM;
    em->embed = lex_embed;
    em->free = simple_free;
    return em;
}

/* ---- cache ---- */

void kb_cache_free(kb_cache *c) {
    free(c->offset); free(c->hash); free(c->vec);
    memset(c, 0, sizeof *c);
}

/* keep_vec false: offsets and hashes only (c->vec stays NULL). */
static bool cache_alloc(kb_cache *c, size_t n, int dim, bool keep_vec) {
    c->offset = calloc(n ? n : 1, sizeof *c->offset);
    c->hash = calloc(n ? n : 1, sizeof *c->hash);
    c->vec = keep_vec ? calloc((n ? n : 1) * (size_t)dim, sizeof *c->vec) : NULL;
    c->n = n;
    c->dim = dim;
    return c->offset && c->hash && (c->vec || !keep_vec);
}

/* Vectors in a cache are unit length (or all zero: a text without words). A
 * checksum only says the file is as written, not that what was written is
 * sane: a non-finite or huge vector would poison every similarity. */
static bool vec_sane(const float *v, int dim) {
    /* squares summed in double cannot overflow (dim FLT_MAX^2 is far below DBL_MAX), so
     * an infinite or NaN element leaves an infinite or NaN sum, which fails
     * the test below: no per-element check; four sums for speed */
    double s[4] = {0, 0, 0, 0};
    int k = 0;
    for (; k + 4 <= dim; k += 4)
        for (int l = 0; l < 4; l++) s[l] += (double)v[k + l] * v[k + l];
    for (; k < dim; k++) s[0] += (double)v[k] * v[k];
    const double s2 = (s[0] + s[1]) + (s[2] + s[3]);
    return s2 == 0 || fabs(s2 - 1.0) <= 1e-3;
}

/* keep_vec false: every check as with it (checksum, each vector sane), but
 * only offsets and hashes kept; a vector is checked in scratch (one record's
 * room) as it goes by, the first bad one remembered for the check below. */
static void load_base(kb_cache *c, const char *path, const kb_embedder *em, bool keep_vec) {
    memset(c, 0, sizeof *c);
    c->dim = em->dim;
    char *buf = NULL;
    float *scratch = NULL;
    uint64_t first_bad = UINT64_MAX;
    char why_buf[200];
    const char *why = NULL;
    struct stat sb;
    hx_error e;
    /* not followed if a link, refused if not a regular file; sizes are checked
     * against what the header promises before anything is allocated */
    if (lstat(path, &sb) != 0 && errno == ENOENT) return; /* no cache yet */
    int fd = kb_open_regular(path, true, &sb, &e);
    if (fd < 0) { HX_WARN("%s; starting without a cache (entries will be embedded again)", e.msg); return; }
    uint64_t n = (uint64_t)sb.st_size;
    unsigned char hdr[20];
    uint32_t ver = 0, count = 0, dim = 0, fpl = 0;
    uint64_t want;
    if (n < 16 || !pread_all(fd, hdr, 16, 0) || memcmp(hdr, "HXEC", 4)) { why = "not an embedding cache"; goto bad; }
    memcpy(&ver, hdr + 4, 4); memcpy(&count, hdr + 8, 4); memcpy(&dim, hdr + 12, 4);
    if (dim != (uint32_t)em->dim) { why = "written with another vector size"; goto bad; }
    if (ver == 1) {
        /* v1 has no fingerprint or text hashes: its vectors are taken only for
         * the built-in embedder, and the hashes are filled in by the caller */
        if (strcmp(em->name, "lexical-384")) { why = "version 1 cache from an unknown embedder"; goto bad; }
        want = 16 + (uint64_t)count * (4 + 4 * (uint64_t)dim);
    } else if (ver == 2 || ver == 3) {
        if (n < 28 || !pread_all(fd, hdr + 16, 4, 16)) { why = "truncated header"; goto bad; }
        memcpy(&fpl, hdr + 16, 4);
        if (fpl != strlen(em->fingerprint)) { why = "made by another embedding model"; goto bad; }
        want = 20 + (uint64_t)fpl + (uint64_t)count * (16 + 4 * (uint64_t)dim) + 8;
    } else {
        why = "unknown version";
        goto bad;
    }
    if (n != want) {
        snprintf(why_buf, sizeof why_buf, "size %llu bytes, but its header promises %llu (count %u, dim %u)",
                 (unsigned long long)n, (unsigned long long)want, count, dim);
        why = why_buf;
        goto bad;
    }
    if (ver == 3) {
        /* read in chunks straight into the cache (no copy of the whole file
         * in memory), the checksum formed on the way; the fingerprint first */
        char fp[256];
        if (fpl >= sizeof fp || !pread_all(fd, fp, fpl, 20) || memcmp(fp, em->fingerprint, fpl)) {
            why = "made by another embedding model";
            goto bad;
        }
        enum { CHUNK = 4 << 20 }; /* a multiple of kb_sum64's 32-byte blocks */
        if (!(buf = malloc(CHUNK)) || !cache_alloc(c, count, (int)dim, keep_vec) ||
            !(scratch = malloc(sizeof *scratch * ((size_t)dim + 1)))) {
            why = "out of memory";
            goto bad;
        }
        const size_t rec = 16 + 4 * (size_t)dim, body = 20 + fpl, end = body + rec * count;
        uint64_t h[4] = {FNV0, FNV0 ^ 1, FNV0 ^ 2, FNV0 ^ 3}, sum = 0;
        if (!pread_all(fd, &sum, 8, n - 8)) { why = "read failed or the file shrank"; goto bad; }
        for (size_t p0 = 0; p0 < end; p0 += CHUNK) { /* end = n - 8: all but the stored sum */
            const size_t len = end - p0 < CHUNK ? end - p0 : CHUNK;
            if (!pread_all(fd, buf, len, p0)) { why = "read failed or the file shrank"; goto bad; }
            sum64_blocks(h, (unsigned char *)buf, len);
            if (p0 + len == end && sum64_end(h, (unsigned char *)buf + len - len % 32, len % 32, end) != sum) {
                why = "checksum mismatch";
                goto bad;
            }
            /* the records' bytes in this chunk into their fields */
            for (size_t x = p0 > body ? p0 : body; x < p0 + len && x < end;) {
                const size_t i = (x - body) / rec, j = (x - body) % rec;
                char *dst = j < 8 ? (char *)&c->offset[i] + j
                          : j < 16 ? (char *)&c->hash[i] + (j - 8)
                          : keep_vec ? (char *)(c->vec + i * (size_t)dim) + (j - 16)
                                     : (char *)scratch + (j - 16);
                size_t piece = (j < 8 ? 8 : j < 16 ? 16 : rec) - j;
                if (piece > p0 + len - x) piece = p0 + len - x;
                memcpy(dst, buf + (x - p0), piece);
                x += piece;
                if (!keep_vec && j + piece == rec && first_bad == UINT64_MAX && !vec_sane(scratch, (int)dim))
                    first_bad = i;
            }
        }
        c->sum = sum;
    } else {
        buf = malloc(n ? (size_t)n : 1);
        scratch = malloc(sizeof *scratch * ((size_t)dim + 1));
        if (!buf || !scratch) { why = "out of memory"; goto bad; }
        if (!pread_all(fd, buf, (size_t)n, 0)) { why = "read failed or the file shrank"; goto bad; }
        if (ver == 1) {
            size_t rec = 4 + 4 * (size_t)dim;
            if (!cache_alloc(c, count, (int)dim, keep_vec)) { why = "out of memory"; goto bad; }
            for (uint32_t i = 0; i < count; i++) {
                uint32_t off;
                memcpy(&off, buf + 16 + rec * i, 4);
                c->offset[i] = off;
                c->hash[i] = 0; /* unknown */
                float *v = keep_vec ? c->vec + (size_t)i * dim : scratch;
                memcpy(v, buf + 16 + rec * i + 4, 4 * (size_t)dim);
                if (!keep_vec && first_bad == UINT64_MAX && !vec_sane(v, (int)dim)) first_bad = i;
            }
        } else {
            uint64_t sum;
            memcpy(&sum, buf + n - 8, 8);
            if ((ver == 2 ? hx_fnv1a(buf, n - 8, FNV0) : kb_sum64(buf, n - 8)) != sum) { why = "checksum mismatch"; goto bad; }
            c->sum = sum;
            if (memcmp(buf + 20, em->fingerprint, fpl)) { why = "made by another embedding model"; goto bad; }
            size_t rec = 16 + 4 * (size_t)dim, body = 20 + fpl;
            if (!cache_alloc(c, count, (int)dim, keep_vec)) { why = "out of memory"; goto bad; }
            for (uint32_t i = 0; i < count; i++) {
                const char *r = buf + body + rec * i;
                memcpy(&c->offset[i], r, 8);
                memcpy(&c->hash[i], r + 8, 8);
                float *v = keep_vec ? c->vec + (size_t)i * dim : scratch;
                memcpy(v, r + 16, 4 * (size_t)dim);
                if (!keep_vec && first_bad == UINT64_MAX && !vec_sane(v, (int)dim)) first_bad = i;
            }
        }
    }
    for (uint32_t i = 0; i < count; i++) {
        if (i && c->offset[i] <= c->offset[i - 1]) {
            snprintf(why_buf, sizeof why_buf, "record %u: offsets not increasing", i);
            why = why_buf;
            goto bad;
        }
        if (keep_vec ? !vec_sane(c->vec + (size_t)i * dim, (int)dim) : i == first_bad) {
            snprintf(why_buf, sizeof why_buf, "record %u (offset %llu): vector is not finite and unit length", i,
                     (unsigned long long)c->offset[i]);
            why = why_buf;
            goto bad;
        }
    }
    free(buf);
    free(scratch);
    close(fd);
    return;
bad:
    HX_WARN("%s: %s; discarding it (entries will be embedded again)", path, why);
    free(buf);
    free(scratch);
    close(fd);
    kb_cache_free(c);
    c->dim = em->dim;
}

/* ---- the cache's appended records: embeddings.add ----
 * A pass that only appends entries writes their records to a second file
 * beside the base instead of rewriting the whole cache:
 *   magic "HXEA" | version u32 = 1 | count u32 | dim u32 | fpl u32 | fingerprint
 *   | base_count u32 | base_sum u64 | count x { offset u64 | hash u64 | vector f32[dim] }
 *   | checksum u64 (kb_sum64 of all before it)
 * It applies only to the base it names (count and checksum), with offsets
 * above the base's last; anything else is discarded with a warning and the
 * base stands alone. Loaded, the cache's sum is the delta's checksum (which
 * covers the base's): one number for the pair. */

static void add_path(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    if (n >= 4 && !strcmp(path + n - 4, ".bin")) snprintf(out, cap, "%.*s.add", (int)(n - 4), path);
    else snprintf(out, cap, "%s.add", path);
}

/* c: the base as loaded (its sum set). Appends the delta's records when they
 * belong to it; leaves c as it was otherwise. */
static void load_add(kb_cache *c, const char *path, const kb_embedder *em, bool keep_vec) {
    char ap[4200];
    add_path(path, ap, sizeof ap);
    struct stat sb;
    if (lstat(ap, &sb) != 0 && errno == ENOENT) return;
    hx_error e;
    int fd = kb_open_regular(ap, true, &sb, &e);
    if (fd < 0) { HX_WARN("%s; ignoring the appended records", e.msg); return; }
    const char *why = NULL;
    char *buf = NULL;
    float *scratch = NULL;
    unsigned char hdr[20];
    uint32_t ver = 0, count = 0, dim = 0, fpl = 0, base_n = 0;
    uint64_t base_sum = 0, n = (uint64_t)sb.st_size, sum = 0;
    const size_t rec = 16 + 4 * (size_t)em->dim;
    if (n < 20 || !pread_all(fd, hdr, 20, 0) || memcmp(hdr, "HXEA", 4)) { why = "not an appended-records file"; goto bad; }
    memcpy(&ver, hdr + 4, 4); memcpy(&count, hdr + 8, 4); memcpy(&dim, hdr + 12, 4); memcpy(&fpl, hdr + 16, 4);
    if (ver != 1) { why = "unknown version"; goto bad; }
    if (dim != (uint32_t)em->dim || fpl != strlen(em->fingerprint)) { why = "made by another embedding model"; goto bad; }
    if (n != 20 + (uint64_t)fpl + 12 + (uint64_t)count * rec + 8) { why = "size differs from what its header promises"; goto bad; }
    if (!c->sum || !c->n) { why = "no base cache to apply it to"; goto bad; }
    if (!(buf = malloc((size_t)n))) { why = "out of memory"; goto bad; }
    if (!pread_all(fd, buf, (size_t)n, 0)) { why = "read failed or the file shrank"; goto bad; }
    memcpy(&sum, buf + n - 8, 8);
    if (kb_sum64(buf, n - 8) != sum) { why = "checksum mismatch"; goto bad; }
    if (memcmp(buf + 20, em->fingerprint, fpl)) { why = "made by another embedding model"; goto bad; }
    memcpy(&base_n, buf + 20 + fpl, 4);
    memcpy(&base_sum, buf + 24 + fpl, 8);
    if (base_n != c->n || base_sum != c->sum) { why = "written for another base cache"; goto bad; }
    const size_t body = 32 + fpl, D = (size_t)dim, m = c->n + count;
    for (uint32_t i = 0; i < count; i++) {
        const char *r = buf + body + rec * i;
        uint64_t off, prev = c->offset[c->n - 1];
        memcpy(&off, r, 8);
        if (i) memcpy(&prev, r - rec, 8);
        if (off <= prev) { why = "offsets not increasing"; goto bad; }
    }
    uint64_t *ro = realloc(c->offset, m * 8), *rh = ro ? realloc(c->hash, m * 8) : NULL;
    float *rv = rh && keep_vec ? realloc(c->vec, m * D * sizeof(float)) : NULL;
    if (ro) c->offset = ro;
    if (rh) c->hash = rh;
    if (keep_vec ? !rv : !(rv = scratch = malloc(sizeof *scratch * (D + 1)))) { why = "out of memory"; goto bad; }
    if (keep_vec) c->vec = rv;
    for (uint32_t i = 0; i < count; i++) {
        const char *r = buf + body + rec * i;
        memcpy(&c->offset[c->n + i], r, 8);
        memcpy(&c->hash[c->n + i], r + 8, 8);
        float *v = keep_vec ? c->vec + (c->n + i) * D : scratch;   /* scratch: checked, not kept */
        memcpy(v, r + 16, 4 * D);
        if (!vec_sane(v, dim)) { why = "a vector is not finite and unit length"; goto bad; }
    }
    c->n = m; /* until here the base stood alone (the rows past n are spare room) */
    c->sum = sum;
    free(buf);
    free(scratch);
    close(fd);
    return;
bad:
    HX_WARN("%s: %s; ignoring it (its entries will be embedded again)", ap, why);
    free(buf);
    free(scratch);
    close(fd);
}

void kb_cache_load(kb_cache *c, const char *path, const kb_embedder *em) {
    load_base(c, path, em, true);
    load_add(c, path, em, true);
}

void kb_cache_load_index(kb_cache *c, const char *path, const kb_embedder *em) {
    load_base(c, path, em, false);
    load_add(c, path, em, false);
}

hx_status kb_cache_save_append(kb_cache *c, size_t n_kept, const char *path, const kb_embedder *em, hx_error *e) {
    /* the base on disk: its count and checksum (the pass holds the KB's lock,
     * so it is the one loaded) */
    struct stat sb;
    hx_error e2;
    unsigned char hdr[16];
    uint32_t base_n = 0, ver = 0, dim = 0;
    uint64_t base_sum = 0;
    int fd = kb_open_regular(path, true, &sb, &e2);
    bool ok = fd >= 0 && sb.st_size >= 36 && pread_all(fd, hdr, 16, 0) && !memcmp(hdr, "HXEC", 4) &&
              pread_all(fd, &base_sum, 8, (uint64_t)sb.st_size - 8);
    if (fd >= 0) close(fd);
    if (ok) { memcpy(&ver, hdr + 4, 4); memcpy(&base_n, hdr + 8, 4); memcpy(&dim, hdr + 12, 4); }
    /* a full rewrite when the base is not a v3 prefix of c, or the appended
     * part has grown past a quarter of it (then reading two files costs more
     * than writing one) */
    if (!ok || ver != 3 || dim != (uint32_t)c->dim || base_n == 0 || base_n > n_kept || n_kept > c->n ||
        c->n - base_n > base_n / 4)
        return kb_cache_save(c, path, em, e);
    char ap[4200];
    add_path(path, ap, sizeof ap);
    const uint32_t fpl = (uint32_t)strlen(em->fingerprint), count = (uint32_t)(c->n - base_n);
    const size_t rec = 16 + 4 * (size_t)c->dim, n = 20 + fpl + 12 + rec * count + 8;
    char *buf = malloc(n);
    if (!buf) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", ap);
    uint32_t h[5] = {0, 1, count, (uint32_t)c->dim, fpl};
    memcpy(h, "HXEA", 4);
    memcpy(buf, h, 20);
    memcpy(buf + 20, em->fingerprint, fpl);
    memcpy(buf + 20 + fpl, &base_n, 4);
    memcpy(buf + 24 + fpl, &base_sum, 8);
    for (uint32_t i = 0; i < count; i++) {
        char *r = buf + 32 + fpl + rec * i;
        memcpy(r, &c->offset[base_n + i], 8);
        memcpy(r + 8, &c->hash[base_n + i], 8);
        memcpy(r + 16, c->vec + (base_n + i) * (size_t)c->dim, 4 * (size_t)c->dim);
    }
    uint64_t sum = kb_sum64(buf, n - 8);
    memcpy(buf + n - 8, &sum, 8);
    hx_status st = hx_write_file_atomic(ap, buf, n, e);
    if (!st) c->sum = sum;
    free(buf);
    return st;
}

hx_status kb_cache_save(kb_cache *c, const char *path, const kb_embedder *em, hx_error *e) {
    uint32_t fpl = (uint32_t)strlen(em->fingerprint);
    size_t rec = 16 + 4 * (size_t)c->dim, n = 20 + fpl + rec * c->n + 8;
    char *buf = malloc(n);
    if (!buf) return hx_err(e, HX_ERR_NOMEM, "%s: out of memory", path);
    uint32_t hdr[5] = {0, 3, (uint32_t)c->n, (uint32_t)c->dim, fpl};
    memcpy(hdr, "HXEC", 4);
    memcpy(buf, hdr, 20);
    memcpy(buf + 20, em->fingerprint, fpl);
    for (size_t i = 0; i < c->n; i++) {
        char *r = buf + 20 + fpl + rec * i;
        memcpy(r, &c->offset[i], 8);
        memcpy(r + 8, &c->hash[i], 8);
        memcpy(r + 16, c->vec + i * (size_t)c->dim, 4 * (size_t)c->dim);
    }
    uint64_t sum = kb_sum64(buf, n - 8);
    memcpy(buf + n - 8, &sum, 8);
    hx_status st = hx_write_file_atomic(path, buf, n, e);
    if (!st) c->sum = sum;
    free(buf);
    if (!st) { /* appended records of the old base: stale now (and refused by their base check) */
        char ap[4200];
        add_path(path, ap, sizeof ap);
        if (unlink(ap) != 0 && errno != ENOENT) HX_WARN("%s: cannot remove: %s", ap, strerror(errno));
    }
    return st;
}
