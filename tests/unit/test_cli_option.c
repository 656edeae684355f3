/* test_cli_option: runtime/cli_option.c, the option tables fusionc's
 * commands and the device programs parse with: every option with a value
 * takes it as `--x v` and `--x=v` alike, with the same result; a bad or
 * missing value is refused naming the option and what it expects; an
 * argument that is none of the options is left to the program; the usage
 * is printed from the same entries. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli_option.h"

typedef struct {
    int port, fresh, mode;
    int64_t steps;
    double rate;
    const char *out, *name, *format;
} opts;

static const char *const modes[] = { "all", "none", NULL };
static const int mode_values[] = { 1, 0 };
static const char *const formats[] = { "text", "dot", NULL };

/* clang-format off */
static const cli_option table[] = {
    { .name = "--port", .metavar = "P", CLI_INT(opts, port), .lo = 1, .hi = 65535, .expects = "a port in [1, 65535]",
      .help = "listen on port P" },
    { .name = "--steps", .metavar = "N", CLI_INT64(opts, steps), .lo = 0, .hi = 1e15, .expects = "a count",
      .help = "train N steps\nand stop" },
    { .name = "--rate", .metavar = "R", CLI_DOUBLE(opts, rate), .lo = 0, .hi = 1, .open = CLI_OPEN_LO,
      .expects = "a rate in (0, 1]", .help = NULL },
    { .name = "--mode", .metavar = "M", CLI_CHOICE_INT(opts, mode), .choices = modes, .values = mode_values,
      .expects = "all or none", .help = "the rate and the mode" },
    { .name = "--format", .metavar = "F", CLI_CHOICE(opts, format), .choices = formats, .expects = "text or dot",
      .help = "the format" },
    { .name = NULL, .help = "output:" },
    { .name = "-o", .metavar = "FILE", CLI_NONEMPTY(opts, out), .expects = "a file name", .help = "write to FILE" },
    { .name = "--name", .metavar = "NAME", CLI_STRING(opts, name), .help = "a name" },
    { .name = "--fresh", .alias = "-f", CLI_FLAG(opts, fresh), .help = "start afresh" },
};
static const cli_usage usage = { "usage: prog [options]\n", table, NULL, sizeof table / sizeof table[0], 14, "end\n" };
/* clang-format on */

/* Parses argv (a NULL-terminated list) into o; the last cli_take's result,
 * the index it stopped at in *at, its message in why. */
static int parse(char **argv, opts *o, int *at, char *why, size_t n)
{
    int argc = 0, rc = 1;
    while (argv[argc])
        argc++;
    memset(o, 0, sizeof *o);
    int i = 0;
    for (; i < argc && rc == 1; i++)
        rc = cli_take(&usage, argc, argv, &i, o, why, n);
    *at = i;
    return rc;
}

/* `--x v` and `--x=v` give the same options. */
static void check_both_forms(const char *name, const char *value)
{
    char joined[256], why[512];
    snprintf(joined, sizeof joined, "%s=%s", name, value);
    char *split[] = { (char *)name, (char *)value, NULL }, *one[] = { joined, NULL };
    opts a, b;
    int at;
    CHECK_INT(1, parse(split, &a, &at, why, sizeof why));
    CHECK_INT(1, parse(one, &b, &at, why, sizeof why));
    CHECK_INT(a.port, b.port);
    CHECK_INT(a.steps, b.steps);
    CHECK_NEAR(a.rate, b.rate, 0);
    CHECK_INT(a.mode, b.mode);
    CHECK(!a.format == !b.format && (!a.format || strcmp(a.format, b.format) == 0));
    CHECK(!a.name == !b.name && (!a.name || strcmp(a.name, b.name) == 0));
}

static void test_cli_option_every_value_option_takes_both_forms(void)
{
    check_both_forms("--port", "29400");
    check_both_forms("--steps", "12");
    check_both_forms("--rate", "0.5");
    check_both_forms("--mode", "none");
    check_both_forms("--format", "dot");
    check_both_forms("--name", "a=b"); /* only the first '=' splits */
    char *argv[] = { "--port=80", "--name=a=b", "--mode", "all", "--format=text", "--fresh", NULL };
    opts o;
    char why[512];
    int at;
    CHECK_INT(1, parse(argv, &o, &at, why, sizeof why));
    CHECK_INT(80, o.port);
    CHECK_STR("a=b", o.name);
    CHECK_INT(1, o.mode);
    CHECK_STR("text", o.format);
    CHECK_INT(1, o.fresh);
}

static void test_cli_option_bad_values_name_the_option(void)
{
    struct {
        const char *arg, *value, *message;
    } bad[] = {
        { "--port", "0", "--port expects a port in [1, 65535], found '0'" },
        { "--port=", "", "--port expects a port in [1, 65535], found ''" },
        { "--port", "80x", "--port expects a port in [1, 65535], found '80x'" },
        { "--steps", "99999999999999999999", "--steps expects a count, found '99999999999999999999'" },
        { "--rate", "0", "--rate expects a rate in (0, 1], found '0'" },
        { "--rate", "nan", "--rate expects a rate in (0, 1], found 'nan'" },
        { "--mode", "some", "--mode expects all or none, found 'some'" },
        { "-o", "", "-o expects a file name, found ''" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char *argv[3] = { (char *)bad[k].arg, (char *)bad[k].value, NULL }, joined[64], why[512];
        if (bad[k].arg[strlen(bad[k].arg) - 1] == '=') { /* the value given with '=' */
            snprintf(joined, sizeof joined, "%s%s", bad[k].arg, bad[k].value);
            argv[0] = joined, argv[1] = NULL;
        }
        opts o;
        int at;
        CHECK_INT(-1, parse(argv, &o, &at, why, sizeof why));
        CHECK_STR(bad[k].message, why);
    }
    char *missing[] = { "--port", NULL }, *flag[] = { "--fresh=1", NULL }, why[512];
    opts o;
    int at;
    CHECK_INT(-1, parse(missing, &o, &at, why, sizeof why));
    CHECK_STR("option '--port' needs a value", why);
    CHECK_INT(-1, parse(flag, &o, &at, why, sizeof why));
    CHECK_STR("option '--fresh' takes no value, found '--fresh=1'", why);
}

static void test_cli_option_others_are_left_to_the_program(void)
{
    const char *others[] = { "--bogus", "--port-base", "--ports=1", "-o=x", "OUT", "-", "--" };
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++) {
        char *argv[] = { (char *)others[k], "1", NULL }, why[512] = "x";
        opts o;
        int i = 0;
        memset(&o, 0, sizeof o);
        CHECK_INT(0, cli_take(&usage, 2, argv, &i, &o, why, sizeof why));
        CHECK_INT(0, i);
        CHECK_STR("", why);
    }
    CHECK(cli_is_help("--help") && cli_is_help("-h") && !cli_is_help("--helpful"));
}

static void test_cli_option_usage_is_printed_from_the_table(void)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cli_usage_print(f, &usage);
    fclose(f);
    CHECK_STR("usage: prog [options]\n"
              "  --port P       listen on port P\n"
              "  --steps N      train N steps\n"
              "                 and stop\n"
              "  --rate R, --mode M  the rate and the mode\n"
              "  --format F     the format\n"
              "output:\n"
              "  -o FILE        write to FILE\n"
              "  --name NAME    a name\n"
              "  --fresh, -f    start afresh\n"
              "end\n",
              text);
    free(text);
    char why[256] = "";
    CHECK_INT(0, cli_usage_check(&usage, why, sizeof why));
    /* A command shows some of the table's options, some in its own words. */
    const cli_use uses[] = { { 6, "DIR", "the folder" }, { 8, NULL, NULL } };
    const cli_usage some = { NULL, table, uses, 2, 8, NULL };
    f = open_memstream(&text, &len);
    cli_usage_print(f, &some);
    fclose(f);
    CHECK_STR("  -o DIR   the folder\n  --fresh, -f  start afresh\n", text);
    free(text);
    char *argv[] = { "--port", "1", NULL };
    opts o;
    int i = 0;
    CHECK_INT(0, cli_take(&some, 2, argv, &i, &o, why, sizeof why)); /* not among its options */
}

static void test_cli_option_check_finds_unsound_tables(void)
{
    const cli_option twice[] = {
        { .name = "--a", CLI_FLAG(opts, fresh), .help = "a" },
        { .name = "--b", .alias = "--a", CLI_FLAG(opts, fresh), .help = "b" },
    };
    const cli_option dangling[] = {
        { .name = "--a", .metavar = "A", CLI_INT(opts, port), .lo = 0, .hi = 1, .help = NULL },
    };
    const cli_option no_parser[] = { { .name = "--a", .metavar = "A", .help = "a" } };
    const cli_option no_dash[] = { { .name = "a", CLI_FLAG(opts, fresh), .help = "a" } };
    const cli_usage bad[] = { { NULL, twice, NULL, 2, 8, NULL },
                              { NULL, dangling, NULL, 1, 8, NULL },
                              { NULL, no_parser, NULL, 1, 8, NULL },
                              { NULL, no_dash, NULL, 1, 8, NULL } };
    const char *says[] = { "listed twice", "none follows", "no parser", "must start with '-'" };
    for (int k = 0; k < 4; k++) {
        char why[256] = "";
        CHECK_INT(-1, cli_usage_check(&bad[k], why, sizeof why));
        CHECK_CONTAINS(why, says[k]);
    }
}

/* A typo gets the nearest name; a name far from all gets none. */
static void test_cli_option_suggests_the_nearest_name(void)
{
    const char *names[] = { "--steps", "--seed", "--save", "--save-every", NULL, "--micro-batches" };
    char out[128];
    cli_suggest("--stpes", names, 6, out, sizeof out);
    CHECK(strcmp(out, "; did you mean '--steps'?") == 0);
    cli_suggest("--micro-bathces=4", names, 6, out, sizeof out); /* its value left out */
    CHECK(strcmp(out, "; did you mean '--micro-batches'?") == 0);
    cli_suggest("--save-evry", names, 6, out, sizeof out);
    CHECK(strcmp(out, "; did you mean '--save-every'?") == 0);
    cli_suggest("--zzzzzzzz", names, 6, out, sizeof out);
    CHECK(strcmp(out, "") == 0);
    cli_suggest("-x", names, 6, out, sizeof out); /* short: one edit at most, and none is that near */
    CHECK(strcmp(out, "") == 0);
}

int main(void)
{
    test_cli_option_every_value_option_takes_both_forms();
    test_cli_option_bad_values_name_the_option();
    test_cli_option_others_are_left_to_the_program();
    test_cli_option_usage_is_printed_from_the_table();
    test_cli_option_check_finds_unsound_tables();
    test_cli_option_suggests_the_nearest_name();
    CHECK_DONE();
}
