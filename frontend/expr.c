/* expr.c: recursive-descent evaluator for model-file expressions (see
 * expr.h for the grammar).  It evaluates while it parses: there is no tree,
 * because every expression is evaluated once, where it is written. */
#include "expr.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPR_MAX_DEPTH 64

typedef struct {
    const char *text;
    size_t len, pos;
    expr_lookup_fn lookup;
    void *ctx;
    char *why;
    size_t why_size;
    int failed;
    int depth;
} parser;

static int fail(parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(parser *p, const char *fmt, ...)
{
    if (p->failed)
        return -1;
    p->failed = 1;
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    snprintf(p->why, p->why_size, "%s at column %zu of '%.*s'", reason, p->pos + 1, (int)(p->len > 200 ? 200 : p->len),
             p->text);
    return -1;
}

static void skip_space(parser *p)
{
    while (p->pos < p->len && isspace((unsigned char)p->text[p->pos]))
        p->pos++;
}

/* Consume `tok` if it is next (after spaces). */
static int accept(parser *p, const char *tok)
{
    skip_space(p);
    size_t n = strlen(tok);
    if (p->pos + n <= p->len && memcmp(p->text + p->pos, tok, n) == 0) {
        p->pos += n;
        return 1;
    }
    return 0;
}

static int expect(parser *p, const char *tok)
{
    if (accept(p, tok))
        return 0;
    return fail(p, "expected '%s'", tok);
}

static expr_value make_int(int64_t i) { return (expr_value){ 0, i, 0.0 }; }
static expr_value make_float(double f) { return (expr_value){ 1, 0, f }; }
static int truth(expr_value v) { return v.is_float ? v.f != 0.0 : v.i != 0; }

static int parse_cond(parser *p, int live, expr_value *out);

static int parse_number(parser *p, expr_value *out)
{
    size_t start = p->pos;
    int is_float = 0;
    while (p->pos < p->len && isdigit((unsigned char)p->text[p->pos]))
        p->pos++;
    if (p->pos < p->len && p->text[p->pos] == '.') {
        is_float = 1;
        p->pos++;
        while (p->pos < p->len && isdigit((unsigned char)p->text[p->pos]))
            p->pos++;
    }
    if (p->pos < p->len && (p->text[p->pos] == 'e' || p->text[p->pos] == 'E')) {
        size_t save = p->pos++;
        if (p->pos < p->len && (p->text[p->pos] == '+' || p->text[p->pos] == '-'))
            p->pos++;
        if (p->pos < p->len && isdigit((unsigned char)p->text[p->pos])) {
            is_float = 1;
            while (p->pos < p->len && isdigit((unsigned char)p->text[p->pos]))
                p->pos++;
        } else {
            p->pos = save;
        }
    }
    char buf[64];
    size_t n = p->pos - start;
    if (n == 0 || n >= sizeof buf)
        return fail(p, n == 0 ? "expected a number" : "number too long");
    memcpy(buf, p->text + start, n);
    buf[n] = '\0';
    errno = 0;
    if (is_float) {
        double f = strtod(buf, NULL);
        if (errno == ERANGE || !isfinite(f))
            return fail(p, "number '%s' is out of range", buf);
        *out = make_float(f);
    } else {
        long long i = strtoll(buf, NULL, 10);
        if (errno == ERANGE)
            return fail(p, "integer '%s' is out of range", buf);
        *out = make_int(i);
    }
    return 0;
}

static int call_function(parser *p, const char *name, size_t name_len, int live, expr_value *out)
{
    expr_value args[2];
    int n = 0;
    do {
        if (n == 2)
            return fail(p, "too many arguments to '%.*s'", (int)name_len, name);
        if (parse_cond(p, live, &args[n++]))
            return -1;
    } while (accept(p, ","));
    if (expect(p, ")"))
        return -1;
    int want = (name_len == 4 && memcmp(name, "sqrt", 4) == 0) ? 1 : 2;
    if (name_len == 4 && memcmp(name, "sqrt", 4) == 0) {
        if (n != want)
            return fail(p, "sqrt takes 1 argument, found %d", n);
        double x = expr_as_double(args[0]);
        if (live && x < 0)
            return fail(p, "sqrt of a negative number (%g)", x);
        *out = make_float(x < 0 ? 0 : sqrt(x));
        return 0;
    }
    int is_min = name_len == 3 && memcmp(name, "min", 3) == 0;
    int is_max = name_len == 3 && memcmp(name, "max", 3) == 0;
    if (!is_min && !is_max)
        return fail(p, "unknown function '%.*s' (known: sqrt, min, max)", (int)name_len, name);
    if (n != want)
        return fail(p, "%s takes 2 arguments, found %d", is_min ? "min" : "max", n);
    if (!args[0].is_float && !args[1].is_float) {
        int64_t a = args[0].i, b = args[1].i;
        *out = make_int(is_min ? (a < b ? a : b) : (a > b ? a : b));
    } else {
        double a = expr_as_double(args[0]), b = expr_as_double(args[1]);
        *out = make_float(is_min ? fmin(a, b) : fmax(a, b));
    }
    return 0;
}

static int parse_primary(parser *p, int live, expr_value *out)
{
    skip_space(p);
    if (p->pos >= p->len)
        return fail(p, "expected a number, a name or '(', found the end");
    char c = p->text[p->pos];
    if (isdigit((unsigned char)c) || c == '.')
        return parse_number(p, out);
    if (c == '(') {
        p->pos++;
        if (parse_cond(p, live, out))
            return -1;
        return expect(p, ")");
    }
    if (isalpha((unsigned char)c) || c == '_') {
        size_t start = p->pos;
        while (p->pos < p->len && (isalnum((unsigned char)p->text[p->pos]) || p->text[p->pos] == '_'))
            p->pos++;
        const char *name = p->text + start;
        size_t n = p->pos - start;
        if (accept(p, "("))
            return call_function(p, name, n, live, out);
        *out = make_int(0);
        if (!live)
            return 0;
        if (!p->lookup || p->lookup(p->ctx, name, n, out) != 0) {
            p->pos = start;
            return fail(p, "unknown name '%.*s'", (int)n, name);
        }
        return 0;
    }
    return fail(p, "unexpected character '%c'", isprint((unsigned char)c) ? c : '?');
}

static int parse_unary(parser *p, int live, expr_value *out)
{
    if (++p->depth > EXPR_MAX_DEPTH)
        return fail(p, "expression nested deeper than %d", EXPR_MAX_DEPTH);
    int rc;
    skip_space(p);
    if (accept(p, "-")) {
        rc = parse_unary(p, live, out);
        if (rc == 0) {
            if (out->is_float)
                out->f = -out->f;
            else if (out->i == INT64_MIN)
                rc = fail(p, "integer overflow in negation");
            else
                out->i = -out->i;
        }
    } else if (accept(p, "+")) {
        rc = parse_unary(p, live, out);
    } else if (p->pos + 1 < p->len && p->text[p->pos] == '!' && p->text[p->pos + 1] != '=' && accept(p, "!")) {
        rc = parse_unary(p, live, out);
        if (rc == 0)
            *out = make_int(!truth(*out));
    } else {
        rc = parse_primary(p, live, out);
    }
    p->depth--;
    return rc;
}

/* a op b for + - * / %, checked for overflow and division by zero. */
static int arith(parser *p, char op, int live, expr_value a, expr_value b, expr_value *out)
{
    if (a.is_float || b.is_float) {
        double x = expr_as_double(a), y = expr_as_double(b), r = 0;
        switch (op) {
        case '+':
            r = x + y;
            break;
        case '-':
            r = x - y;
            break;
        case '*':
            r = x * y;
            break;
        case '/':
            if (y == 0.0 && live)
                return fail(p, "division by zero");
            r = y == 0.0 ? 0.0 : x / y;
            break;
        case '%':
            return fail(p, "'%%' needs integers");
        }
        if (live && !isfinite(r))
            return fail(p, "floating-point overflow");
        *out = make_float(r);
        return 0;
    }
    int64_t x = a.i, y = b.i, r = 0;
    int overflow = 0;
    switch (op) {
    case '+':
        overflow = __builtin_add_overflow(x, y, &r);
        break;
    case '-':
        overflow = __builtin_sub_overflow(x, y, &r);
        break;
    case '*':
        overflow = __builtin_mul_overflow(x, y, &r);
        break;
    case '/':
    case '%':
        if (y == 0) {
            if (live)
                return fail(p, "division by zero");
            r = 0;
        } else if (x == INT64_MIN && y == -1) {
            overflow = 1;
        } else {
            r = op == '/' ? x / y : x % y;
        }
        break;
    }
    if (overflow && live)
        return fail(p, "integer overflow in %lld %c %lld", (long long)x, op, (long long)y);
    *out = make_int(overflow ? 0 : r);
    return 0;
}

static int parse_prod(parser *p, int live, expr_value *out)
{
    if (parse_unary(p, live, out))
        return -1;
    for (;;) {
        char op = accept(p, "*") ? '*' : accept(p, "/") ? '/' : accept(p, "%") ? '%' : 0;
        if (!op)
            return 0;
        expr_value rhs;
        if (parse_unary(p, live, &rhs) || arith(p, op, live, *out, rhs, out))
            return -1;
    }
}

static int parse_sum(parser *p, int live, expr_value *out)
{
    if (parse_prod(p, live, out))
        return -1;
    for (;;) {
        char op = accept(p, "+") ? '+' : accept(p, "-") ? '-' : 0;
        if (!op)
            return 0;
        expr_value rhs;
        if (parse_prod(p, live, &rhs) || arith(p, op, live, *out, rhs, out))
            return -1;
    }
}

static int parse_cmp(parser *p, int live, expr_value *out)
{
    if (parse_sum(p, live, out))
        return -1;
    static const char *const ops[] = { "==", "!=", "<=", ">=", "<", ">" };
    for (int k = 0; k < 6; k++) {
        if (!accept(p, ops[k]))
            continue;
        expr_value rhs;
        if (parse_sum(p, live, &rhs))
            return -1;
        double a = expr_as_double(*out), b = expr_as_double(rhs);
        int both_int = !out->is_float && !rhs.is_float;
        int64_t x = out->i, y = rhs.i;
        int r = 0;
        switch (k) {
        case 0:
            r = both_int ? x == y : a == b;
            break;
        case 1:
            r = both_int ? x != y : a != b;
            break;
        case 2:
            r = both_int ? x <= y : a <= b;
            break;
        case 3:
            r = both_int ? x >= y : a >= b;
            break;
        case 4:
            r = both_int ? x < y : a < b;
            break;
        case 5:
            r = both_int ? x > y : a > b;
            break;
        }
        *out = make_int(r);
        return 0;
    }
    return 0;
}

static int parse_and(parser *p, int live, expr_value *out)
{
    if (parse_cmp(p, live, out))
        return -1;
    while (accept(p, "&&")) {
        int value = truth(*out);
        expr_value rhs;
        if (parse_cmp(p, live && value, &rhs))
            return -1;
        *out = make_int(value && truth(rhs));
    }
    return 0;
}

static int parse_or(parser *p, int live, expr_value *out)
{
    if (parse_and(p, live, out))
        return -1;
    while (accept(p, "||")) {
        int value = truth(*out);
        expr_value rhs;
        if (parse_and(p, live && !value, &rhs))
            return -1;
        *out = make_int(value || truth(rhs));
    }
    return 0;
}

static int parse_cond(parser *p, int live, expr_value *out)
{
    if (++p->depth > EXPR_MAX_DEPTH)
        return fail(p, "expression nested deeper than %d", EXPR_MAX_DEPTH);
    expr_value c;
    int rc = parse_or(p, live, &c);
    if (rc == 0 && accept(p, "?")) {
        expr_value a, b;
        int take = truth(c);
        rc = parse_cond(p, live && take, &a);
        if (rc == 0)
            rc = expect(p, ":");
        if (rc == 0)
            rc = parse_cond(p, live && !take, &b);
        if (rc == 0)
            *out = take ? a : b;
    } else if (rc == 0) {
        *out = c;
    }
    p->depth--;
    return rc;
}

int expr_eval(const char *text, size_t len, expr_lookup_fn lookup, void *ctx, expr_value *out, char *why,
              size_t why_size)
{
    parser p = { text, len, 0, lookup, ctx, why, why_size, 0, 0 };
    if (why_size)
        why[0] = '\0';
    if (parse_cond(&p, 1, out))
        return -1;
    skip_space(&p);
    if (p.pos != p.len)
        return fail(&p, "unexpected '%c' after the expression",
                    isprint((unsigned char)text[p.pos]) ? text[p.pos] : '?');
    return 0;
}

int expr_eval_int(const char *text, size_t len, expr_lookup_fn lookup, void *ctx, int64_t *out, char *why,
                  size_t why_size)
{
    expr_value v;
    if (expr_eval(text, len, lookup, ctx, &v, why, why_size))
        return -1;
    if (v.is_float) {
        snprintf(why, why_size, "expected an integer, found %g in '%.*s'", v.f, (int)(len > 200 ? 200 : len), text);
        return -1;
    }
    *out = v.i;
    return 0;
}
