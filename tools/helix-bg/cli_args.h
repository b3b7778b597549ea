/* cli_args.h — the one flag parser every helix-bg subcommand uses.
 *
 * A subcommand describes its options as a table; cli_parse walks argv, stores
 * each value where the table says, and prints --help (stdout) from the same
 * table with every option's default (the value its destination holds before
 * parsing). The conventions, llama.cpp's:
 *   - numbers are parsed strictly: "-n abc", "-n 5x", "--temp abc" and values
 *     out of an option's range are errors naming the flag and the value;
 *   - an unknown flag, a missing value or a bad choice names the flag;
 *   - "--flag=value" is the same as "--flag value";
 *   - -h / --help prints the help and the command exits 0.
 * Errors go to stderr as "helix-bg CMD: ..." followed by a pointer to --help. */
#ifndef HX_CLI_ARGS_H
#define HX_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum cli_kind {
    CLI_END = 0,   /* ends a table */
    CLI_SECTION,   /* a heading in --help (help = its text), takes nothing */
    CLI_BOOL,      /* bool *: set to true by the flag */
    CLI_STR,       /* const char **: the value */
    CLI_STRS,      /* cli_strs *: the value appended (repeatable flag) */
    CLI_INT,       /* int *: integer in [min, max] */
    CLI_U64,       /* uint64_t *: unsigned integer */
    CLI_FLOAT,     /* float *: finite number in [min, max] */
    CLI_CHOICE,    /* int *: index of the value in choices (NULL-terminated) */
    CLI_POS,       /* const char **: a positional argument (names: its metavar) */
} cli_kind;

/* Up to 16 values of a repeatable flag. */
typedef struct cli_strs {
    const char *v[16];
    int n;
} cli_strs;

typedef struct cli_opt {
    cli_kind kind;
    const char *names;   /* "-n", "-n|--n-predict" (CLI_POS: the metavar shown) */
    void *dst;
    const char *meta;    /* the value's name in --help ("N", "TEXT"); NULL for CLI_BOOL */
    const char *help;    /* one line; the default is appended unless it says "(default" itself */
    double min, max;     /* CLI_INT / CLI_FLOAT range, both 0: any (int: INT_MIN..INT_MAX) */
    const char *const *choices;
} cli_opt;

/* 0: parsed; 1: --help printed (exit 0); 2: error printed (exit 2).
 * usage: the synopsis line(s) after "usage: helix-bg "; about: text printed
 * after the options in --help (may be NULL). */
int cli_parse(const char *cmd, const char *usage, const char *about, const cli_opt *opts, int argc, char **argv);

/* Strict conversions, for values that are not flags (lists, environment).
 * Each prints "helix-bg CMD: WHAT: 'VALUE' ..." on failure and returns false. */
bool cli_parse_int(const char *cmd, const char *what, const char *s, long min, long max, int *out);
bool cli_parse_float(const char *cmd, const char *what, const char *s, double min, double max, float *out);
/* "1,2,3" -> ints in [min, max]; *out malloc'ed (free), *n its length (>= 1). */
bool cli_parse_int_list(const char *cmd, const char *what, const char *s, long min, long max, int32_t **out, int *n);

/* "helix-bg CMD: " + message on stderr; returns 2 (the usage-error exit code). */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
