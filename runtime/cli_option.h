/* cli_option.h: a program's command-line options as one table, from which
 * both its parser and its usage text come, so the two cannot drift.
 *
 * One entry an option: its name, the value it takes (none: a flag), the
 * parser that checks the value and the field it goes to, what a bad value
 * is told was expected, and its help.  Every option that takes a value
 * takes it as `--name VALUE` or `--name=VALUE` alike (a one-letter option,
 * `-o FILE`, only as the next argument).  fusionc's commands (tools/) and
 * the device programs (runtime/run_options.c) both use it, so it lives in
 * the lowest layer they share.
 *
 * What it deliberately is not: a getopt.  Positional arguments, and
 * arguments that are none of a program's options, stay with the program's
 * own loop (the broker passes them on to its devices, `launch` after OUT
 * too); cli_take says only whether an argument is one of the options.
 *
 *     static const cli_option table[] = {
 *         { .name = "--port", .metavar = "P", CLI_INT(my_options, port), .lo = 1, .hi = 65535,
 *           .expects = "a port in [1, 65535]", .help = "listen on tcp port P (default 29400)" },
 *         { .name = "--fresh", CLI_FLAG(my_options, fresh), .help = "start a new run" },
 *     };
 *     const cli_usage usage = { "usage: prog [--port P] [--fresh]\n", table, NULL, 2, 14 };
 *     for (int i = 0; i < argc; i++) {
 *         int took = cli_take(&usage, argc, argv, &i, &o, why, sizeof why);
 *         if (took < 0) ... why; if (took == 0) ... argv[i] is the program's
 *     }
 */
#ifndef FUSION_RT_CLI_OPTION_H
#define FUSION_RT_CLI_OPTION_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cli_option cli_option;

/* Checks `value` and stores it into `field` (the option's field of the
 * program's options).  0, or -1 with the whole message in why. */
typedef int (*cli_parse_fn)(const cli_option *opt, const char *value, void *field, char *why, size_t n);

enum { CLI_OPEN_LO = 1, CLI_OPEN_HI = 2 }; /* cli_double: the range's ends left out */

struct cli_option {
    const char *name;           /* "--port-base", "-o"; NULL: a heading line (help) in the usage */
    const char *alias;          /* another name for it ("--verbose" for "-v"), or NULL          */
    const char *metavar;        /* its value in the usage ("P"); NULL: a flag                   */
    cli_parse_fn parse;         /* NULL for a flag: its int field is set to 1                   */
    size_t field;               /* where it goes: CLI_FIELD, an offset into the options struct  */
    const char *expects;        /* "a port in [1, 65535]": what a bad value is told             */
    double lo, hi;              /* cli_int, cli_int64, cli_double: the range, ends included     */
    int open;                   /* cli_double: CLI_OPEN_LO, CLI_OPEN_HI                         */
    const char *const *choices; /* cli_choice, cli_choice_int: the names, NULL-terminated       */
    const int *values;          /* cli_choice_int: each name's value (NULL: its index)          */
    const char *help;           /* lines joined by '\n'; NULL: described with the option shown next */
};

/* The offset of `member` in struct type st, refused at compile time unless
 * the member is of `type`: a parser never writes a field of another type. */
#define CLI_FIELD(type, st, member) (offsetof(st, member) + 0 * sizeof(_Generic(((st *)0)->member, type : 1)))

/* The parser and its field, one macro each, so the two agree. */
#define CLI_FLAG(st, m)             .parse = NULL, .field = CLI_FIELD(int, st, m)
#define CLI_INT(st, m)              .parse = cli_int, .field = CLI_FIELD(int, st, m)
#define CLI_INT64(st, m)            .parse = cli_int64, .field = CLI_FIELD(int64_t, st, m)
#define CLI_DOUBLE(st, m)           .parse = cli_double, .field = CLI_FIELD(double, st, m)
#define CLI_STRING(st, m)           .parse = cli_string, .field = CLI_FIELD(const char *, st, m)
#define CLI_NONEMPTY(st, m)         .parse = cli_nonempty, .field = CLI_FIELD(const char *, st, m)
#define CLI_CHOICE(st, m)           .parse = cli_choice, .field = CLI_FIELD(const char *, st, m)
#define CLI_CHOICE_INT(st, m)       .parse = cli_choice_int, .field = CLI_FIELD(int, st, m)
#define CLI_CUSTOM(fn, type, st, m) .parse = fn, .field = CLI_FIELD(type, st, m)
/* An option that sets several fields (--seed S: the seed, and that one
 * was given): its parser gets the whole options struct. */
#define CLI_WHOLE(fn) .parse = fn, .field = 0

/* The parsers.  A bad value's message: "NAME expects EXPECTS, found 'VALUE'". */
int cli_int(const cli_option *opt, const char *value, void *field, char *why, size_t n);   /* int in [lo, hi]     */
int cli_int64(const cli_option *opt, const char *value, void *field, char *why, size_t n); /* int64_t in [lo, hi] */
int cli_double(const cli_option *opt, const char *value, void *field, char *why,
               size_t n); /* double, [lo, hi] less `open` */
int cli_string(const cli_option *opt, const char *value, void *field, char *why, size_t n);   /* any text, kept      */
int cli_nonempty(const cli_option *opt, const char *value, void *field, char *why, size_t n); /* any text but ""     */
int cli_choice(const cli_option *opt, const char *value, void *field, char *why, size_t n);   /* one of choices, kept */
int cli_choice_int(const cli_option *opt, const char *value, void *field, char *why,
                   size_t n); /* ... as its value    */
/* The standard message, for a program's own parsers; returns -1. */
int cli_bad_value(const cli_option *opt, const char *value, char *why, size_t n);

/* An option of a table as one command shows it: metavar and help replace
 * the table's when not NULL (`-o FILE` for one command, `-o DIR` for
 * another, the same option). */
typedef struct {
    int option; /* its index in the table */
    const char *metavar, *help;
} cli_use;
/* clang-format off */
#define CLI_USE(opt) { .option = (opt) }   /* as the table shows it */
/* clang-format on */

/* A command's usage: the text before its options, and its options.  With
 * uses NULL, every entry of the table, in order (n of them); else the n
 * uses, in order: the options the command takes are exactly those shown. */
typedef struct {
    const char *head; /* "usage: ...\n\nwhat it does.\n"                 */
    const cli_option *table;
    const cli_use *uses;
    int n;
    int width;        /* the option column: help starts at 2 + width + 1 */
    const char *tail; /* printed after the options, or NULL              */
} cli_usage;

/* argv[*i] against u's options.  1: it is one of them, its value (the next
 * argument, or what follows '=') checked and stored into opts, *i on its
 * last argument; 0: it is none of them (why ""); -1: it is one, but its
 * value is missing or bad, or a flag was given one: why says which option,
 * what was expected and what was found. */
int cli_take(const cli_usage *u, int argc, char **argv, int *i, void *opts, char *why, size_t n);
/* "--help" or "-h". */
int cli_is_help(const char *arg);
/* u's head, its options (name, alias, metavar, help in a column) and tail. */
void cli_usage_print(FILE *f, const cli_usage *u);
/* A program's whole command line argv[1..] against u's options, each
 * argument one of them: 0; 1 after --help or -h (print_usage's text on
 * standard output); 2 when one is unknown or bad ("argv[0]: why", with a
 * "did you mean" for a mistyped option, and "see 'argv[0] --help'" on
 * standard error).  print_usage(f, argv[0]) prints the program's usage
 * (its own first line, then u's). */
int cli_parse_program(const cli_usage *u, int argc, char **argv, void *opts,
                      void (*print_usage)(FILE *f, const char *program));
/* "<who>: <fmt with arg>" (with "; did you mean '--x'?" when it says an
 * option is unknown and one of u's is a typo away) and "see '<who>
 * --help'", on standard error; returns 2, the exit status of a command
 * line refused. */
int cli_usage_fail(const cli_usage *u, const char *who, const char *fmt, const char *arg);
/* "; did you mean 'NAME'?" into out for the one of names[] nearest to
 * given (its "=value" left out) when it is a typo away (an edit distance
 * of at most a third of its length, and at most 2), else "". */
void cli_suggest(const char *given, const char *const *names, int n_names, char *out, size_t n);
/* Whether the table is sound: every name starts with '-', no two share a
 * name, a value's option has a parser and a flag none, and an option
 * described with the next one is followed by one.  0, or -1 with why. */
int cli_usage_check(const cli_usage *u, char *why, size_t n);

#endif
