/* expr.h: the small expression language of model files.
 *
 * Shapes, repeat counts, conditions and init scales are written as
 * expressions over hyper-parameters and repeat indices:
 *
 *     shape="batch, seq, 4*dim"    count="layers"    test="depth >= 50"
 *     init="normal(0.02/sqrt(2*layers))"    count="s == 0 ? n1 : n2"
 *
 * Grammar, lowest precedence first (C's precedence and meaning):
 *     cond   := or ('?' cond ':' cond)?
 *     or     := and ('||' and)*          and := cmp ('&&' cmp)*
 *     cmp    := sum (('=='|'!='|'<'|'<='|'>'|'>=') sum)?
 *     sum    := prod (('+'|'-') prod)*   prod := unary (('*'|'/'|'%') unary)*
 *     unary  := ('-'|'+'|'!') unary | primary
 *     primary:= INT | FLOAT | NAME | NAME '(' cond (',' cond)* ')' | '(' cond ')'
 * Functions: sqrt(x), min(a,b), max(a,b).
 * Values are 64-bit integers unless a float takes part; integer '/' and '%'
 * truncate as in C.  Integer overflow and division by zero are errors, not
 * wrap-around: a shape product that overflows is reported, never computed.
 * Only the taken branch of ?:, && and || is evaluated.
 */
#ifndef FUSION_EXPR_H
#define FUSION_EXPR_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int is_float;
    int64_t i;
    double f;
} expr_value;

/* Resolve a name (not NUL-terminated: name[0..len)).  Return 0 and fill
 * *out, or -1 if the name is unknown. */
typedef int (*expr_lookup_fn)(void *ctx, const char *name, size_t len, expr_value *out);

/* Evaluate text[0..len).  On error return -1 with a one-line reason in why. */
int expr_eval(const char *text, size_t len, expr_lookup_fn lookup, void *ctx, expr_value *out, char *why,
              size_t why_size);

/* As expr_eval, but the result must be an integer. */
int expr_eval_int(const char *text, size_t len, expr_lookup_fn lookup, void *ctx, int64_t *out, char *why,
                  size_t why_size);

static inline double expr_as_double(expr_value v) { return v.is_float ? v.f : (double)v.i; }

#endif
