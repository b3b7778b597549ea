/* cli_args.c — the table-driven flag parser of cli_args.h. */
#include "cli_args.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "helix-bg %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

bool cli_parse_int(const char *cmd, const char *what, const char *s, long min, long max, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno == ERANGE) {
        cli_usage_error(cmd, "%s: '%s' is not an integer", what, s);
        return false;
    }
    if (v < min || v > max) {
        cli_usage_error(cmd, "%s: %ld is out of range (%ld to %ld)", what, v, min, max);
        return false;
    }
    *out = (int)v;
    return true;
}

bool cli_parse_float(const char *cmd, const char *what, const char *s, double min, double max, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v)) {
        cli_usage_error(cmd, "%s: '%s' is not a number", what, s);
        return false;
    }
    if (v < min || v > max) {
        cli_usage_error(cmd, "%s: %s is out of range (%g to %g)", what, s, min, max);
        return false;
    }
    *out = (float)v;
    return true;
}

static bool parse_u64(const char *cmd, const char *what, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || errno == ERANGE || s[0] == '-' || s[0] == '+' || s[0] == ' ') {
        cli_usage_error(cmd, "%s: '%s' is not an unsigned integer", what, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_int_list(const char *cmd, const char *what, const char *s, long min, long max, int32_t **out, int *n) {
    int cap = 16, k = 0;
    int32_t *v = malloc(sizeof *v * (size_t)cap);
    char *copy = strdup(s);
    if (!v || !copy) {
        free(v);
        free(copy);
        cli_usage_error(cmd, "out of memory");
        return false;
    }
    bool ok = *s != 0;
    if (!ok) cli_usage_error(cmd, "%s: empty list", what);
    for (char *p = copy, *next; ok && p; p = next) {
        next = strchr(p, ',');
        if (next) *next++ = 0;
        int x;
        if (!cli_parse_int(cmd, what, p, min, max, &x)) { ok = false; break; }
        if (k == cap) {
            int32_t *nv = realloc(v, sizeof *v * (size_t)(cap *= 2));
            if (!nv) { ok = false; cli_usage_error(cmd, "out of memory"); break; }
            v = nv;
        }
        v[k++] = x;
    }
    free(copy);
    if (!ok) { free(v); return false; }
    *out = v;
    *n = k;
    return true;
}

/* Whether flag a is one of names ("-n|--n-predict"). */
static bool name_matches(const char *names, const char *a, size_t alen) {
    for (const char *p = names; *p;) {
        size_t l = strcspn(p, "|");
        if (l == alen && !memcmp(p, a, l)) return true;
        p += l;
        if (*p == '|') p++;
    }
    return false;
}

static void print_default(const cli_opt *o) {
    if (o->help && strstr(o->help, "(default")) return;
    switch (o->kind) {
    case CLI_BOOL: if (*(bool *)o->dst) printf(" (default: on)"); break;
    case CLI_STR: if (*(const char **)o->dst) printf(" (default: %s)", *(const char **)o->dst); break;
    case CLI_INT: printf(" (default: %d)", *(int *)o->dst); break;
    case CLI_U64: printf(" (default: %llu)", (unsigned long long)*(uint64_t *)o->dst); break;
    case CLI_FLOAT: printf(" (default: %g)", (double)*(float *)o->dst); break;
    case CLI_CHOICE: printf(" (default: %s)", o->choices[*(int *)o->dst]); break;
    default: break;
    }
}

static void print_help(const char *cmd, const char *usage, const char *about, const cli_opt *opts) {
    printf("usage: helix-bg %s\n", usage);
    for (const cli_opt *o = opts; o->kind != CLI_END; o++) {
        if (o->kind == CLI_SECTION) { printf("\n%s\n", o->help); continue; }
        /* "-m|--model FILE" is shown as "-m, --model FILE" */
        char left[96];
        size_t n = 0;
        for (const char *c = o->names; *c && n + 3 < sizeof left; c++) {
            if (*c == '|') { left[n++] = ','; left[n++] = ' '; }
            else left[n++] = *c;
        }
        left[n] = 0;
        if (o->kind == CLI_CHOICE && !o->meta) {
            for (int i = 0; o->choices[i] && n + 2 < sizeof left; i++)
                n += (size_t)snprintf(left + n, sizeof left - n, "%s%s", i ? "|" : " ", o->choices[i]);
        } else if (o->meta) {
            snprintf(left + n, sizeof left - n, " %s", o->meta);
        }
        if (strlen(left) > 26) printf("  %s\n  %-26s %s", left, "", o->help ? o->help : "");
        else printf("  %-26s %s", left, o->help ? o->help : "");
        print_default(o);
        printf("\n");
    }
    if (about) printf("\n%s", about);
    (void)cmd;
}

int cli_parse(const char *cmd, const char *usage, const char *about, const cli_opt *opts, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            print_help(cmd, usage, about, opts);
            return 1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) { /* a positional argument: the next free CLI_POS */
            const cli_opt *o = opts;
            for (; o->kind != CLI_END; o++)
                if (o->kind == CLI_POS && !*(const char **)o->dst) break;
            if (o->kind == CLI_END) {
                cli_usage_error(cmd, "unexpected argument '%s' (see helix-bg %s --help)", a, cmd);
                return 2;
            }
            *(const char **)o->dst = a;
            continue;
        }
        const char *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
        size_t alen = eq ? (size_t)(eq - a) : strlen(a);
        const cli_opt *o = opts;
        for (; o->kind != CLI_END; o++)
            if (o->kind != CLI_SECTION && o->kind != CLI_POS && name_matches(o->names, a, alen)) break;
        if (o->kind == CLI_END) {
            cli_usage_error(cmd, "unknown option '%.*s' (see helix-bg %s --help)", (int)alen, a, cmd);
            return 2;
        }
        char flag[64];
        snprintf(flag, sizeof flag, "%.*s", (int)alen, a);
        if (o->kind == CLI_BOOL) {
            if (eq) { cli_usage_error(cmd, "%s takes no value (got '%s')", flag, eq + 1); return 2; }
            *(bool *)o->dst = true;
            continue;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (!v) {
            if (i + 1 >= argc) {
                cli_usage_error(cmd, "%s needs a value%s%s (see helix-bg %s --help)", flag, o->meta ? " " : "",
                                o->meta ? o->meta : "", cmd);
                return 2;
            }
            v = argv[++i];
        }
        switch (o->kind) {
        case CLI_STR: *(const char **)o->dst = v; break;
        case CLI_STRS: {
            cli_strs *s = o->dst;
            if (s->n == (int)(sizeof s->v / sizeof s->v[0])) {
                cli_usage_error(cmd, "%s: at most %d values", flag, (int)(sizeof s->v / sizeof s->v[0]));
                return 2;
            }
            s->v[s->n++] = v;
            break;
        }
        case CLI_INT: {
            long lo = o->min == 0 && o->max == 0 ? INT_MIN : (long)o->min;
            long hi = o->min == 0 && o->max == 0 ? INT_MAX : (long)o->max;
            if (!cli_parse_int(cmd, flag, v, lo, hi, o->dst)) return 2;
            break;
        }
        case CLI_U64:
            if (!parse_u64(cmd, flag, v, o->dst)) return 2;
            break;
        case CLI_FLOAT: {
            double lo = o->min == 0 && o->max == 0 ? -HUGE_VAL : o->min;
            double hi = o->min == 0 && o->max == 0 ? HUGE_VAL : o->max;
            if (!cli_parse_float(cmd, flag, v, lo, hi, o->dst)) return 2;
            break;
        }
        case CLI_CHOICE: {
            int k = 0;
            while (o->choices[k] && strcmp(o->choices[k], v)) k++;
            if (!o->choices[k]) {
                fprintf(stderr, "helix-bg %s: %s takes ", cmd, flag);
                for (int j = 0; o->choices[j]; j++)
                    fprintf(stderr, "%s%s", j ? (o->choices[j + 1] ? ", " : " or ") : "", o->choices[j]);
                fprintf(stderr, ", not '%s'\n", v);
                return 2;
            }
            *(int *)o->dst = k;
            break;
        }
        default: break;
        }
    }
    return 0;
}
