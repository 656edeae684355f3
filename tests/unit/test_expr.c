/* test_expr: the model-file expression language (frontend/expr.h):
 * precedence, integer vs float, overflow and division errors, short-circuit,
 * names, functions, and messages that say where the problem is. */
#include <stdint.h>
#include <string.h>

#include "../../frontend/expr.h"
#include "check.h"

static int lookup(void *ctx, const char *name, size_t len, expr_value *out)
{
    (void)ctx;
    if (len == 3 && memcmp(name, "dim", 3) == 0) {
        *out = (expr_value){ 0, 768, 0 };
        return 0;
    }
    if (len == 5 && memcmp(name, "heads", 5) == 0) {
        *out = (expr_value){ 0, 12, 0 };
        return 0;
    }
    if (len == 2 && memcmp(name, "lr", 2) == 0) {
        *out = (expr_value){ 1, 0, 6e-4 };
        return 0;
    }
    return -1;
}

static int64_t ival(const char *text)
{
    int64_t v = -999;
    char why[256];
    if (expr_eval_int(text, strlen(text), lookup, NULL, &v, why, sizeof why))
        fprintf(stderr, "  (unexpected error for '%s': %s)\n", text, why);
    return v;
}

static double fval(const char *text)
{
    expr_value v = { 0 };
    char why[256];
    if (expr_eval(text, strlen(text), lookup, NULL, &v, why, sizeof why))
        fprintf(stderr, "  (unexpected error for '%s': %s)\n", text, why);
    return expr_as_double(v);
}

/* The evaluation fails and the reason contains `needle`. */
static const char *error_of(const char *text)
{
    static char why[256];
    expr_value v;
    if (expr_eval(text, strlen(text), lookup, NULL, &v, why, sizeof why) == 0)
        return "(no error)";
    return why;
}

static void test_expr_precedence_and_integers(void)
{
    CHECK_INT(3072, ival("4*dim"));
    CHECK_INT(64, ival("dim/heads"));
    CHECK_INT(14, ival("2 + 3 * 4"));
    CHECK_INT(20, ival("(2 + 3) * 4"));
    CHECK_INT(1, ival("7 % 3"));
    CHECK_INT(-5, ival("-5"));
    CHECK_INT(3, ival("7 / 2")); /* integer division truncates */
    CHECK_INT(1, ival("dim % heads == 0"));
    CHECK_INT(1, ival("1 < 2 && 2 <= 2 && 3 > 2 && 3 >= 3 && 1 != 2"));
    CHECK_INT(0, ival("!1"));
    CHECK_INT(1, ival("!0"));
    CHECK_INT(23, ival("dim == 768 ? 23 : 6"));
    CHECK_INT(2, ival("0 ? 1 : 0 ? 3 : 2")); /* ?: nests to the right */
    CHECK_INT(4, ival("max(3, 4)"));
    CHECK_INT(3, ival("min(3, 4)"));
    CHECK_INT(9223372036854775807LL, ival("9223372036854775807"));
}

static void test_expr_floats(void)
{
    CHECK_NEAR(0.125, fval("1.0 / sqrt(dim / heads)"), 1e-15);
    CHECK_NEAR(0.02 / sqrt(24.0), fval("0.02 / sqrt(2 * 12)"), 1e-15);
    CHECK_NEAR(6e-4, fval("lr"), 1e-18);
    CHECK_NEAR(1.5e3, fval("1.5e3"), 0);
    CHECK_NEAR(2.5, fval("max(2.5, 1)"), 0);
}

static void test_expr_errors_say_what_and_where(void)
{
    CHECK_CONTAINS(error_of("9223372036854775807 * 2"), "integer overflow");
    CHECK_CONTAINS(error_of("9223372036854775807 + 1"), "integer overflow");
    CHECK_CONTAINS(error_of("-9223372036854775807 - 2"), "integer overflow");
    CHECK_CONTAINS(error_of("99999999999999999999"), "out of range");
    CHECK_CONTAINS(error_of("dim / 0"), "division by zero");
    CHECK_CONTAINS(error_of("dim % 0"), "division by zero");
    CHECK_CONTAINS(error_of("dimm * 2"), "unknown name 'dimm'");
    CHECK_CONTAINS(error_of("dimm * 2"), "column 1");
    CHECK_CONTAINS(error_of("(dim * 2"), "expected ')'");
    CHECK_CONTAINS(error_of("dim 2"), "unexpected '2'");
    CHECK_CONTAINS(error_of(""), "found the end");
    CHECK_CONTAINS(error_of("foo(1)"), "unknown function 'foo'");
    CHECK_CONTAINS(error_of("sqrt(1, 2)"), "sqrt takes 1 argument");
    CHECK_CONTAINS(error_of("sqrt(-1)"), "negative");
    CHECK_CONTAINS(error_of("1.5 % 2"), "needs integers");
    CHECK_CONTAINS(error_of("dim @ 2"), "unexpected '@'");
    char deep[400];
    memset(deep, '(', 200);
    deep[200] = '1';
    memset(deep + 201, ')', 198);
    deep[399] = '\0';
    CHECK_CONTAINS(error_of(deep), "nested deeper");
    int64_t v;
    char why[256];
    CHECK(expr_eval_int("1.5", 3, lookup, NULL, &v, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "expected an integer");
}

static void test_expr_untaken_branches_are_not_evaluated(void)
{
    CHECK_INT(1, ival("1 ? 1 : 1 / 0"));
    CHECK_INT(0, ival("0 && nosuch"));
    CHECK_INT(1, ival("1 || 1 / 0"));
    CHECK_INT(5, ival("0 ? 9223372036854775807 * 2 : 5"));
}

static void test_expr_text_need_not_be_nul_terminated(void)
{
    const char text[] = { '4', '*', '3', 'X' }; /* only the first 3 bytes */
    int64_t v = 0;
    char why[128];
    CHECK(expr_eval_int(text, 3, lookup, NULL, &v, why, sizeof why) == 0);
    CHECK_INT(12, v);
}

int main(void)
{
    test_expr_precedence_and_integers();
    test_expr_floats();
    test_expr_errors_say_what_and_where();
    test_expr_untaken_branches_are_not_evaluated();
    test_expr_text_need_not_be_nul_terminated();
    CHECK_DONE();
}
