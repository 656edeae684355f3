/* cli_option.c: command-line options from one table (cli_option.h). */
#include "cli_option.h"

#include "../ir/suggest.h"
#include "rt_error.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The i-th option u shows, and the metavar and help it shows it with. */
static const cli_option *shown(const cli_usage *u, int i, const char **metavar, const char **help)
{
    const cli_option *o = &u->table[u->uses ? u->uses[i].option : i];
    *metavar = u->uses && u->uses[i].metavar ? u->uses[i].metavar : o->metavar;
    *help = u->uses && u->uses[i].help ? u->uses[i].help : o->help;
    return o;
}

int cli_bad_value(const cli_option *opt, const char *value, char *why, size_t n)
{
    return rt_error(why, n, "%s expects %s, found '%s'", opt->name, opt->expects ? opt->expects : "a value", value);
}

/* value as a whole decimal integer in [lo, hi]. */
static int whole_number(const cli_option *opt, const char *value, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(value, &end, 10);
    if (!*value || !end || *end || errno || (double)v < opt->lo || (double)v > opt->hi)
        return -1;
    *out = v;
    return 0;
}

int cli_int(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    long long v;
    if (whole_number(opt, value, &v))
        return cli_bad_value(opt, value, why, n);
    *(int *)field = (int)v;
    return 0;
}

int cli_int64(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    long long v;
    if (whole_number(opt, value, &v))
        return cli_bad_value(opt, value, why, n);
    *(int64_t *)field = (int64_t)v;
    return 0;
}

int cli_double(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    char *end = NULL;
    double v = strtod(value, &end);
    int low = (opt->open & CLI_OPEN_LO) ? v > opt->lo : v >= opt->lo;
    int high = (opt->open & CLI_OPEN_HI) ? v < opt->hi : v <= opt->hi;
    if (!*value || !end || *end || !isfinite(v) || !low || !high)
        return cli_bad_value(opt, value, why, n);
    *(double *)field = v;
    return 0;
}

int cli_string(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    (void)opt, (void)why, (void)n;
    *(const char **)field = value;
    return 0;
}

int cli_nonempty(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    if (!*value)
        return cli_bad_value(opt, value, why, n);
    *(const char **)field = value;
    return 0;
}

/* value's index among opt's choices, or -1. */
static int choice_index(const cli_option *opt, const char *value)
{
    for (int k = 0; opt->choices && opt->choices[k]; k++)
        if (strcmp(opt->choices[k], value) == 0)
            return k;
    return -1;
}

int cli_choice(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    int k = choice_index(opt, value);
    if (k < 0)
        return cli_bad_value(opt, value, why, n);
    *(const char **)field = opt->choices[k];
    return 0;
}

int cli_choice_int(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    int k = choice_index(opt, value);
    if (k < 0)
        return cli_bad_value(opt, value, why, n);
    *(int *)field = opt->values ? opt->values[k] : k;
    return 0;
}

/* The edit distance of a and b (Levenshtein's: insertions, deletions and
 * substitutions), up to CLI_NAME_MAX characters of each. */
#define CLI_NAME_MAX 64
void cli_suggest(const char *given, const char *const *names, int n_names, char *out, size_t n)
{
    char bare[CLI_NAME_MAX + 1]; /* "--stpes=3": "--stpes" */
    snprintf(bare, sizeof bare, "%.*s", (int)strcspn(given, "="), given);
    suggest_nearest(bare, names, n_names, out, n);
}

/* "; did you mean '--x'?" when message says an option of u's is unknown
 * ("unknown option '--stpes'") and one of u's is near it. */
static void suggest_option(const cli_usage *u, const char *message, char *out, size_t n)
{
    out[0] = '\0';
    const char *at = strstr(message, "unknown option '");
    if (!at)
        return;
    char given[CLI_NAME_MAX + 1];
    snprintf(given, sizeof given, "%.*s", (int)strcspn(at + 16, "'"), at + 16);
    const char *names[2 * 128];
    int k = 0;
    for (int i = 0; i < u->n && k + 2 <= (int)(sizeof names / sizeof names[0]); i++) {
        const char *metavar, *help;
        const cli_option *o = shown(u, i, &metavar, &help);
        if (o->name)
            names[k++] = o->name;
        if (o->alias)
            names[k++] = o->alias;
    }
    cli_suggest(given, names, k, out, n);
}

int cli_is_help(const char *arg) { return strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0; }

/* Whether arg names o: 0 no; 1 as itself; 2 as "--name=value" (*value
 * after '='); *used: the name it was given by (its alias, maybe). */
static int names(const cli_option *o, const char *arg, const char **value, const char **used)
{
    const char *name[2] = { o->name, o->alias };
    for (int k = 0; k < 2; k++) {
        if (!name[k])
            continue;
        size_t len = strlen(name[k]);
        if (strncmp(arg, name[k], len) != 0)
            continue;
        *used = name[k];
        if (arg[len] == '\0')
            return 1;
        if (arg[len] == '=' && name[k][1] == '-') { /* --name=value; -o=x is not a form */
            *value = arg + len + 1;
            return 2;
        }
    }
    return 0;
}

int cli_take(const cli_usage *u, int argc, char **argv, int *i, void *opts, char *why, size_t n)
{
    const char *arg = argv[*i];
    why[0] = '\0';
    for (int k = 0; k < u->n; k++) {
        const char *metavar, *help, *value = NULL, *used = NULL;
        const cli_option *o = shown(u, k, &metavar, &help);
        int form = o->name ? names(o, arg, &value, &used) : 0;
        if (form == 0)
            continue;
        void *field = (char *)opts + o->field;
        if (!o->metavar) { /* a flag */
            if (form == 2) {
                return rt_error(why, n, "option '%s' takes no value, found '%s'", used, arg);
            }
            *(int *)field = 1;
            return 1;
        }
        if (form == 1) {
            if (*i + 1 >= argc) {
                return rt_error(why, n, "option '%s' needs a value", used);
            }
            value = argv[++*i];
        }
        return o->parse(o, value, field, why, n) == 0 ? 1 : -1;
    }
    return 0;
}

/* "NAME[, ALIAS][ METAVAR]" */
static void label(const cli_option *o, const char *metavar, char *out, size_t n)
{
    snprintf(out, n, "%s%s%s%s%s", o->name, o->alias ? ", " : "", o->alias ? o->alias : "", metavar ? " " : "",
             metavar ? metavar : "");
}

int cli_parse_program(const cli_usage *u, int argc, char **argv, void *opts,
                      void (*print_usage)(FILE *f, const char *program))
{
    char why[512];
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            print_usage(stdout, argv[0]);
            return 1;
        }
        int took = cli_take(u, argc, argv, &i, opts, why, sizeof why);
        if (took == 0)
            snprintf(why, sizeof why, "%s '%s'", argv[i][0] == '-' ? "unknown option" : "unexpected argument", argv[i]);
        if (took <= 0) {
            char suggestion[128];
            suggest_option(u, why, suggestion, sizeof suggestion);
            fprintf(stderr, "%s: %s%s\nsee '%s --help'\n", argv[0], why, suggestion, argv[0]);
            return 2;
        }
    }
    return 0;
}

int cli_usage_fail(const cli_usage *u, const char *who, const char *fmt, const char *arg)
{
    char message[1024], suggestion[128];
    snprintf(message, sizeof message, fmt, arg);
    suggest_option(u, message, suggestion, sizeof suggestion);
    fprintf(stderr, "%s: %s%s\nsee '%s --help'\n", who, message, suggestion, who);
    return 2;
}

void cli_usage_print(FILE *f, const cli_usage *u)
{
    if (u->head)
        fputs(u->head, f);
    char joined[512] = "";
    for (int k = 0; k < u->n; k++) {
        const char *metavar, *help;
        const cli_option *o = shown(u, k, &metavar, &help);
        if (!o->name) { /* a heading */
            fprintf(f, "%s\n", help ? help : "");
            continue;
        }
        char one[256];
        label(o, metavar, one, sizeof one);
        size_t at = strlen(joined);
        snprintf(joined + at, sizeof joined - at, "%s%s", at ? ", " : "", one);
        if (!help) /* described with the next one: "--stages S, --replicas R" */
            continue;
        /* The help's first line beside the label (two spaces after a label
         * too long for the column), its other lines under the column. */
        int pad = (int)strlen(joined) < u->width ? u->width - (int)strlen(joined) + 1 : 2;
        fprintf(f, "  %s%*s", joined, pad, "");
        for (const char *line = help; line;) {
            const char *next = strchr(line, '\n');
            int len = next ? (int)(next - line) : (int)strlen(line);
            fprintf(f, "%.*s\n", len, line);
            line = next ? next + 1 : NULL;
            if (line)
                fprintf(f, "%*s", u->width + 3, "");
        }
        joined[0] = '\0';
    }
    if (u->tail)
        fputs(u->tail, f);
}

int cli_usage_check(const cli_usage *u, char *why, size_t n)
{
    for (int k = 0; k < u->n; k++) {
        const char *metavar, *help;
        const cli_option *o = shown(u, k, &metavar, &help);
        if (!o->name)
            continue;
        if (o->name[0] != '-' || (o->alias && o->alias[0] != '-')) {
            return rt_error(why, n, "option '%s': a name must start with '-'", o->name);
        }
        if ((o->metavar != NULL) != (o->parse != NULL)) {
            return rt_error(why, n, "option '%s': %s", o->name,
                            o->metavar ? "takes a value but has no parser" : "is a flag but has a parser");
        }
        if (!help && (k + 1 == u->n || !shown(u, k + 1, &metavar, &help)->name)) {
            return rt_error(why, n, "option '%s' is described with the next one, and none follows", o->name);
        }
        for (int j = 0; j < k; j++) {
            const cli_option *p = shown(u, j, &metavar, &help);
            const char *a[2] = { o->name, o->alias }, *b[2] = { p->name, p->alias };
            for (int x = 0; x < 2; x++)
                for (int y = 0; y < 2; y++)
                    if (a[x] && b[y] && strcmp(a[x], b[y]) == 0) {
                        return rt_error(why, n, "option '%s' is listed twice", a[x]);
                    }
        }
    }
    return 0;
}
