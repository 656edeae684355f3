/* chat_template_expr.c: Jinja expressions, {% for %} and {% set %}
 * (chat_template_internal.h).  One recursive descent parses and
 * evaluates; with `live` off it only parses (a branch not taken), so a
 * short-circuit never evaluates what Python would not.  Precedence, low
 * to high, as Jinja's: the inline if; or; and; not; comparisons, in and
 * is; + -; ~; * / // %; unary -; then ., [], () and | filters on a
 * primary. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_template_internal.h"

typedef struct {
    ct_render *r;
    const char *p, *end;
    int live;
} parser;

static const cJSON *expr(parser *ps);

/* ---- the tokens --------------------------------------------------------------- */

static void skip_space(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int is_name_char(char c, int first)
{
    return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && c >= '0' && c <= '9');
}

/* The name at the cursor into name[] (not taken); its length, 0 for none. */
static size_t peek_name(parser *ps, char *name)
{
    skip_space(ps);
    size_t n = 0;
    while (ps->p + n < ps->end && is_name_char(ps->p[n], n == 0) && n + 1 < CT_NAME_MAX)
        name[n] = ps->p[n], n++;
    name[n] = '\0';
    return n;
}

/* The name at the cursor, taken, into name[]: 1; 0, the render failed
 * ("expected <what>"), when there is none. */
static int take_name(parser *ps, char *name, const char *what)
{
    size_t n = peek_name(ps, name);
    if (n == 0) {
        ct_fail(ps->r, "expected %s", what);
        return 0;
    }
    ps->p += n;
    return 1;
}

static int take_word(parser *ps, const char *word)
{
    char name[CT_NAME_MAX];
    size_t n = peek_name(ps, name);
    if (n == 0 || strcmp(name, word) != 0)
        return 0;
    ps->p += n;
    return 1;
}

/* The punctuation op at the cursor, taken; not when it is the start of a
 * longer one (`=` of `==`, `/` of `//`). */
static int take(parser *ps, const char *op)
{
    skip_space(ps);
    size_t n = strlen(op);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, op, n) != 0)
        return 0;
    const char *after = ps->p + n;
    if (after < ps->end && ((n == 1 && strchr("=<>!", op[0]) && *after == '=') ||
                            (op[0] == '/' && n == 1 && *after == '/') || (op[0] == '*' && n == 1 && *after == '*')))
        return 0;
    ps->p = after;
    return 1;
}

static const cJSON *expect(parser *ps, const char *op)
{
    if (take(ps, op))
        return CT_UNDEFINED;
    skip_space(ps);
    return ct_fail(ps->r, "expected '%s' at '%.20s'", op, ps->p < ps->end ? ps->p : "(the end)");
}

/* A string literal, its escapes read as Python's. */
static const cJSON *string_literal(parser *ps)
{
    char quote = *ps->p++;
    ct_buf b = { 0 };
    while (ps->p < ps->end && *ps->p != quote) {
        char c = *ps->p++;
        if (c == '\\' && ps->p < ps->end) {
            c = *ps->p++;
            c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c == '0' ? '\0' : c;
        }
        ct_buf_add(&b, &c, 1);
    }
    if (ps->p >= ps->end) {
        free(b.v);
        return ct_fail(ps->r, "a string without its closing quote");
    }
    ps->p++;
    const cJSON *v = !ps->live  ? CT_UNDEFINED
                     : b.failed ? ct_fail(ps->r, "out of memory")
                                : ct_string_n(ps->r, b.v ? b.v : "", b.n);
    free(b.v);
    return v;
}

/* (a, b, key=c): the arguments of a call, after its '('. */
static int call_args(parser *ps, ct_args *a)
{
    a->n = 0;
    while (!take(ps, ")")) {
        if (a->n > 0 && !take(ps, ","))
            return expect(ps, ")") ? 0 : -1;
        if (take(ps, ")"))
            break;
        if (a->n == CT_MAX_ARGS)
            return ct_fail(ps->r, "more than %d arguments", CT_MAX_ARGS), -1;
        char name[CT_NAME_MAX];
        size_t n = peek_name(ps, name);
        a->key[a->n][0] = '\0';
        if (n > 0 && ps->p + n < ps->end) {
            const char *save = ps->p;
            ps->p += n;
            if (take(ps, "="))
                snprintf(a->key[a->n], CT_NAME_MAX, "%s", name);
            else
                ps->p = save;
        }
        if (!(a->v[a->n++] = expr(ps)))
            return -1;
    }
    return 0;
}

/* ---- names, access, calls -------------------------------------------------------- */

static const cJSON *lookup(ct_render *r, const char *name)
{
    for (size_t i = r->n_vars; i-- > 0;)
        if (strcmp(r->vars[i].name, name) == 0)
            return r->vars[i].v;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r->context, name);
    return v ? v : CT_UNDEFINED;
}

static int index_of(double x, int64_t n, int64_t *out)
{
    int64_t i = (int64_t)floor(x);
    if (i < 0)
        i += n;
    *out = i;
    return i >= 0 && i < n;
}

/* v[start:stop:step], Python's slice of a list or a string. */
static const cJSON *slice(ct_render *r, const cJSON *v, const cJSON *lo, const cJSON *hi, const cJSON *st)
{
    const cJSON *items = ct_items_of(r, v);
    if (!items)
        return NULL;
    int64_t n = cJSON_GetArraySize(items), step = cJSON_IsNumber(st) ? (int64_t)st->valuedouble : 1;
    if (step == 0)
        return ct_fail(r, "a slice step of 0");
    int64_t a = step > 0 ? 0 : n - 1, b = step > 0 ? n : -1;
    if (cJSON_IsNumber(lo)) {
        a = (int64_t)lo->valuedouble;
        a = a < 0 ? a + n : a;
        a = step > 0 ? (a < 0 ? 0 : a > n ? n : a) : (a < -1 ? -1 : a > n - 1 ? n - 1 : a);
    }
    if (cJSON_IsNumber(hi)) {
        b = (int64_t)hi->valuedouble;
        b = b < 0 ? b + n : b;
        b = step > 0 ? (b < 0 ? 0 : b > n ? n : b) : (b < -1 ? -1 : b > n - 1 ? n - 1 : b);
    }
    const cJSON **picked = malloc(((size_t)n + 1) * sizeof *picked);
    if (!picked)
        return ct_fail(r, "out of memory");
    int k = 0;
    for (int64_t i = a; step > 0 ? i < b : i > b; i += step)
        picked[k++] = cJSON_GetArrayItem(items, (int)i);
    const cJSON *out;
    if (cJSON_IsString(v)) {
        ct_buf s = { 0 };
        for (int i = 0; i < k; i++)
            ct_buf_add(&s, picked[i]->valuestring, strlen(picked[i]->valuestring));
        out = s.failed ? ct_fail(r, "out of memory") : ct_string_n(r, s.v ? s.v : "", s.n);
        free(s.v);
    } else {
        out = ct_list_of(r, picked, k);
    }
    free(picked);
    return out;
}

static const cJSON *subscript(ct_render *r, const cJSON *v, const cJSON *key)
{
    int64_t i;
    if (cJSON_IsObject(v) && cJSON_IsString(key)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, key->valuestring);
        return c ? c : CT_UNDEFINED;
    }
    if (cJSON_IsArray(v) && cJSON_IsNumber(key))
        return index_of(key->valuedouble, cJSON_GetArraySize(v), &i) ? cJSON_GetArrayItem(v, (int)i) : CT_UNDEFINED;
    if (cJSON_IsString(v) && cJSON_IsNumber(key)) {
        const cJSON *chars = ct_items_of(r, v);
        return !chars                                                      ? NULL
               : index_of(key->valuedouble, cJSON_GetArraySize(chars), &i) ? cJSON_GetArrayItem(chars, (int)i)
                                                                           : CT_UNDEFINED;
    }
    return CT_UNDEFINED;
}

/* ---- the grammar ---------------------------------------------------------------- */

static const cJSON *primary(parser *ps)
{
    ct_render *r = ps->r;
    skip_space(ps);
    if (ps->p >= ps->end)
        return ct_fail(r, "an expression ends too soon");
    char c = *ps->p;
    if (c == '\'' || c == '"')
        return string_literal(ps);
    if ((c >= '0' && c <= '9') || (c == '.' && ps->p + 1 < ps->end && ps->p[1] >= '0' && ps->p[1] <= '9')) {
        char *after;
        double x = strtod(ps->p, &after);
        ps->p = after;
        return ps->live ? ct_number(r, x) : CT_UNDEFINED;
    }
    if (take(ps, "(")) {
        const cJSON *v = expr(ps);
        return v && expect(ps, ")") ? v : NULL;
    }
    if (take(ps, "[") || take(ps, "{")) {
        int dict = ps->p[-1] == '{';
        cJSON *made = ps->live ? ct_keep(r, dict ? cJSON_CreateObject() : cJSON_CreateArray()) : NULL;
        if (ps->live && !made)
            return NULL;
        while (!take(ps, dict ? "}" : "]")) {
            const cJSON *k = dict ? expr(ps) : NULL;
            if ((dict && (!k || !expect(ps, ":"))))
                return NULL;
            const cJSON *v = expr(ps);
            if (!v)
                return NULL;
            if (made) {
                cJSON *copy = cJSON_Duplicate(v, 1);
                if (dict && !cJSON_IsString(k))
                    return cJSON_Delete(copy), ct_fail(r, "a dict key must be a string");
                if (!copy ||
                    !(dict ? cJSON_AddItemToObject(made, k->valuestring, copy) : cJSON_AddItemToArray(made, copy)))
                    return cJSON_Delete(copy), ct_fail(r, "out of memory");
            }
            if (!take(ps, ",")) {
                if (!expect(ps, dict ? "}" : "]"))
                    return NULL;
                break;
            }
        }
        return made ? made : CT_UNDEFINED;
    }
    char name[CT_NAME_MAX];
    size_t n = peek_name(ps, name);
    if (n == 0)
        return ct_fail(r, "expected a value at '%.20s'", ps->p);
    ps->p += n;
    if (!strcmp(name, "true") || !strcmp(name, "True") || !strcmp(name, "false") || !strcmp(name, "False"))
        return ps->live ? ct_boolean(r, name[0] == 't' || name[0] == 'T') : CT_UNDEFINED;
    if (!strcmp(name, "none") || !strcmp(name, "None"))
        return ps->live ? ct_keep(r, cJSON_CreateNull()) : CT_UNDEFINED;
    if (take(ps, "(")) {
        ct_args a;
        if (call_args(ps, &a) != 0)
            return NULL;
        return ps->live ? ct_call_function(r, name, &a) : CT_UNDEFINED;
    }
    return ps->live ? lookup(r, name) : CT_UNDEFINED;
}

static const cJSON *postfix(parser *ps)
{
    ct_render *r = ps->r;
    const cJSON *v = primary(ps);
    while (v) {
        if (take(ps, ".")) {
            char name[CT_NAME_MAX];
            if (!take_name(ps, name, "a name after '.'"))
                return NULL;
            if (take(ps, "(")) {
                ct_args a;
                if (call_args(ps, &a) != 0)
                    return NULL;
                v = ps->live ? ct_call_method(r, v, name, &a) : CT_UNDEFINED;
            } else {
                const cJSON *c = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, name) : NULL;
                v = c ? c : CT_UNDEFINED;
            }
        } else if (take(ps, "[")) {
            const cJSON *part[3] = { NULL, NULL, NULL };
            int k = 0, sliced = 0;
            for (;;) {
                skip_space(ps);
                if (ps->p < ps->end && *ps->p != ':' && *ps->p != ']' && !(part[k] = expr(ps)))
                    return NULL;
                if (k < 2 && take(ps, ":")) {
                    k++, sliced = 1;
                    continue;
                }
                break;
            }
            if (!expect(ps, "]"))
                return NULL;
            if (ps->live)
                v = sliced ? slice(r, v, part[0], part[1], part[2]) : subscript(r, v, part[0] ? part[0] : CT_UNDEFINED);
        } else if (take(ps, "|")) {
            char name[CT_NAME_MAX];
            if (!take_name(ps, name, "a filter's name after '|'"))
                return NULL;
            ct_args a = { .n = 0 };
            if (take(ps, "(") && call_args(ps, &a) != 0)
                return NULL;
            v = ps->live ? ct_call_filter(r, v, name, &a) : CT_UNDEFINED;
        } else {
            break;
        }
    }
    return v;
}

static const cJSON *unary(parser *ps)
{
    if (take(ps, "-")) {
        const cJSON *v = unary(ps);
        if (!v || !ps->live)
            return v;
        return cJSON_IsNumber(v) ? ct_number(ps->r, -v->valuedouble) : ct_fail(ps->r, "'-' of a value not a number");
    }
    return postfix(ps);
}

static const cJSON *arithmetic(parser *ps, const cJSON *a, char op, const cJSON *b)
{
    ct_render *r = ps->r;
    if (!ps->live)
        return CT_UNDEFINED;
    if (op == '+' && cJSON_IsString(a) && cJSON_IsString(b)) {
        size_t n = strlen(a->valuestring), m = strlen(b->valuestring);
        char *s = malloc(n + m + 1);
        if (!s)
            return ct_fail(r, "out of memory");
        memcpy(s, a->valuestring, n), memcpy(s + n, b->valuestring, m + 1);
        cJSON *v = cJSON_CreateString(s);
        free(s);
        return ct_keep(r, v);
    }
    if (op == '+' && cJSON_IsArray(a) && cJSON_IsArray(b)) {
        cJSON *v = ct_keep(r, cJSON_CreateArray());
        for (int side = 0; v && side < 2; side++)
            for (const cJSON *c = (side ? b : a)->child; c; c = c->next)
                cJSON_AddItemReferenceToArray(v, (cJSON *)c);
        return v;
    }
    if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b))
        return ct_fail(r, "'%c' needs two numbers (or, for '+', two strings or two lists)", op);
    double x = a->valuedouble, y = b->valuedouble;
    if ((op == '/' || op == 'd' || op == '%') && y == 0)
        return ct_fail(r, "division by zero");
    return ct_number(r, op == '+'   ? x + y
                        : op == '-' ? x - y
                        : op == '*' ? x * y
                        : op == '/' ? x / y
                        : op == 'd' ? floor(x / y)
                                    : x - y * floor(x / y));
}

static const cJSON *term(parser *ps)
{
    const cJSON *v = unary(ps);
    while (v) {
        char op = take(ps, "//") ? 'd' : take(ps, "*") ? '*' : take(ps, "/") ? '/' : take(ps, "%") ? '%' : 0;
        if (!op)
            break;
        const cJSON *w = unary(ps);
        v = w ? arithmetic(ps, v, op, w) : NULL;
    }
    return v;
}

static const cJSON *concat(parser *ps)
{
    const cJSON *v = term(ps);
    while (v && take(ps, "~")) {
        const cJSON *w = term(ps);
        if (!w)
            return NULL;
        if (ps->live) {
            const cJSON *a = ct_str_of(ps->r, v), *b = a ? ct_str_of(ps->r, w) : NULL;
            v = b ? arithmetic(ps, a, '+', b) : NULL;
        }
    }
    return v;
}

static const cJSON *additive(parser *ps)
{
    const cJSON *v = concat(ps);
    while (v) {
        char op = take(ps, "+") ? '+' : take(ps, "-") ? '-' : 0;
        if (!op)
            break;
        const cJSON *w = concat(ps);
        v = w ? arithmetic(ps, v, op, w) : NULL;
    }
    return v;
}

static int compare(ct_render *r, const cJSON *a, const char *op, const cJSON *b, int *out)
{
    if (!strcmp(op, "==") || !strcmp(op, "!=")) {
        *out = ct_equal(a, b) == (op[0] == '=');
        return 0;
    }
    double d;
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        d = a->valuedouble - b->valuedouble;
    else if (cJSON_IsString(a) && cJSON_IsString(b))
        d = strcmp(a->valuestring, b->valuestring);
    else
        return ct_fail(r, "'%s' compares two numbers or two strings", op), -1;
    *out = !strcmp(op, "<") ? d < 0 : !strcmp(op, "<=") ? d <= 0 : !strcmp(op, ">") ? d > 0 : d >= 0;
    return 0;
}

static int contains(ct_render *r, const cJSON *hay, const cJSON *needle, int *out)
{
    if (cJSON_IsString(hay) && cJSON_IsString(needle))
        *out = strstr(hay->valuestring, needle->valuestring) != NULL;
    else if (cJSON_IsObject(hay) && cJSON_IsString(needle))
        *out = cJSON_GetObjectItemCaseSensitive(hay, needle->valuestring) != NULL;
    else if (cJSON_IsArray(hay)) {
        *out = 0;
        for (const cJSON *c = hay->child; c && !*out; c = c->next)
            *out = ct_equal(c, needle);
    } else
        return ct_fail(r, "'in' needs a string, a list or a dict on its right"), -1;
    return 0;
}

static const cJSON *comparison(parser *ps)
{
    ct_render *r = ps->r;
    const cJSON *v = additive(ps);
    while (v) {
        static const char *const ops[] = { "==", "!=", "<=", ">=", "<", ">" };
        const char *op = NULL;
        for (int k = 0; k < 6 && !op; k++)
            if (take(ps, ops[k]))
                op = ops[k];
        int result = 0;
        if (op) {
            const cJSON *w = additive(ps);
            if (!w || (ps->live && compare(r, v, op, w, &result) != 0))
                return NULL;
        } else if (take_word(ps, "in") || (take_word(ps, "not") && (take_word(ps, "in") ? (op = "not in") : 0))) {
            const cJSON *w = additive(ps);
            if (!w || (ps->live && contains(r, w, v, &result) != 0))
                return NULL;
            result = op ? !result : result;
        } else if (take_word(ps, "is")) {
            int negate = take_word(ps, "not");
            char name[CT_NAME_MAX];
            if (!take_name(ps, name, "a test's name after 'is'"))
                return NULL;
            ct_args a = { .n = 0 };
            if (take(ps, "(")) {
                if (call_args(ps, &a) != 0)
                    return NULL;
            } else if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "sameas") ||
                       !strcmp(name, "divisibleby")) {
                if (!(a.v[0] = additive(ps)))
                    return NULL;
                a.key[0][0] = '\0', a.n = 1;
            }
            if (ps->live && ct_call_test(r, v, name, &a, &result) != 0)
                return NULL;
            result = negate ? !result : result;
        } else {
            break;
        }
        v = ps->live ? ct_boolean(r, result) : CT_UNDEFINED;
    }
    return v;
}

static const cJSON *negation(parser *ps)
{
    if (take_word(ps, "not")) {
        const cJSON *v = negation(ps);
        return !v || !ps->live ? v : ct_boolean(ps->r, !ct_truthy(v));
    }
    return comparison(ps);
}

/* and / or: Python's, the operand's value; the right side only when it decides. */
static const cJSON *logical(parser *ps, int is_or)
{
    const cJSON *v = is_or ? logical(ps, 0) : negation(ps);
    while (v && take_word(ps, is_or ? "or" : "and")) {
        int live = ps->live, decided = ct_truthy(v) == is_or;
        ps->live = live && !decided;
        const cJSON *w = is_or ? logical(ps, 0) : negation(ps);
        ps->live = live;
        if (!w)
            return NULL;
        v = !live ? CT_UNDEFINED : decided ? v : w;
    }
    return v;
}

/* A if C else B (B undefined when left out). */
static const cJSON *expr(parser *ps)
{
    const cJSON *v = logical(ps, 1);
    if (!v || !take_word(ps, "if"))
        return v;
    const cJSON *cond = logical(ps, 1);
    if (!cond)
        return NULL;
    int live = ps->live, yes = live && ct_truthy(cond);
    const cJSON *other = CT_UNDEFINED;
    if (take_word(ps, "else")) {
        ps->live = live && !yes;
        other = expr(ps);
        ps->live = live;
        if (!other)
            return NULL;
    }
    return !live ? CT_UNDEFINED : yes ? v : other;
}

const cJSON *ct_eval(ct_render *r, const char *s, size_t len)
{
    parser ps = { .r = r, .p = s, .end = s + len, .live = 1 };
    const cJSON *v = expr(&ps);
    skip_space(&ps);
    if (v && ps.p < ps.end)
        return ct_fail(r, "unexpected '%.*s' after an expression", (int)(ps.end - ps.p < 20 ? ps.end - ps.p : 20),
                       ps.p);
    return v;
}

/* ---- for and set ---------------------------------------------------------------- */

size_t ct_tag_rest(const ct_piece *pc)
{
    size_t i = 0;
    while (i < pc->len && (pc->s[i] == ' ' || pc->s[i] == '\t' || pc->s[i] == '\n' || pc->s[i] == '\r'))
        i++;
    return i + strlen(pc->word);
}

static int set_var(ct_render *r, const char *name, const cJSON *v, int here)
{
    for (size_t i = r->n_vars; here && i-- > r->scope;)
        if (strcmp(r->vars[i].name, name) == 0) {
            r->vars[i].v = v;
            return 0;
        }
    if (r->n_vars == r->cap_vars) {
        size_t cap = r->cap_vars * 2 + 16;
        ct_var *grown = realloc(r->vars, cap * sizeof *grown);
        if (!grown)
            return ct_fail(r, "out of memory"), -1;
        r->vars = grown, r->cap_vars = cap;
    }
    snprintf(r->vars[r->n_vars].name, CT_NAME_MAX, "%s", name);
    r->vars[r->n_vars++].v = v;
    return 0;
}

int ct_run_set(ct_render *r, const ct_piece *pc)
{
    size_t at = ct_tag_rest(pc);
    parser ps = { .r = r, .p = pc->s + at, .end = pc->s + pc->len, .live = 1 };
    char name[CT_NAME_MAX], attr[CT_NAME_MAX] = "", what[CT_NAME_MAX + 32];
    if (!take_name(&ps, name, "a name after 'set'"))
        return -1;
    snprintf(what, sizeof what, "an attribute after '%s.'", name);
    if (take(&ps, ".") && !take_name(&ps, attr, what))
        return -1;
    if (!take(&ps, "="))
        return ct_fail(r, "expected '=' in 'set' (a block set is not supported)"), -1;
    const cJSON *v = ct_eval(r, ps.p, (size_t)(ps.end - ps.p));
    if (!v)
        return -1;
    if (!attr[0])
        return set_var(r, name, v, 1);
    cJSON *ns = (cJSON *)lookup(r, name);
    if (!cJSON_IsObject(ns))
        return ct_fail(r, "'%s' is not a namespace: set %s.%s needs one", name, name, attr), -1;
    cJSON *copy = cJSON_Duplicate(v, 1);
    if (!copy && v != CT_UNDEFINED)
        return ct_fail(r, "out of memory"), -1;
    cJSON_DeleteItemFromObjectCaseSensitive(ns, attr);
    if (copy)
        cJSON_AddItemToObject(ns, attr, copy);
    return 0;
}

static const cJSON *loop_object(ct_render *r, int i, int n)
{
    cJSON *o = ct_keep(r, cJSON_CreateObject());
    if (o && !(cJSON_AddNumberToObject(o, "index", i + 1) && cJSON_AddNumberToObject(o, "index0", i) &&
               cJSON_AddNumberToObject(o, "revindex", n - i) && cJSON_AddNumberToObject(o, "revindex0", n - i - 1) &&
               cJSON_AddBoolToObject(o, "first", i == 0) && cJSON_AddBoolToObject(o, "last", i == n - 1) &&
               cJSON_AddNumberToObject(o, "length", n)))
        return ct_fail(r, "out of memory");
    return o;
}

/* Bind the loop's target (one name, or two from a pair) to item. */
static int bind(ct_render *r, char names[2][CT_NAME_MAX], int n_names, const cJSON *item)
{
    if (n_names == 1)
        return set_var(r, names[0], item, 0);
    if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != 2)
        return ct_fail(r, "'%s, %s' unpacks pairs; this item is not one", names[0], names[1]), -1;
    return set_var(r, names[0], cJSON_GetArrayItem(item, 0), 0) || set_var(r, names[1], cJSON_GetArrayItem(item, 1), 0)
               ? -1
               : 0;
}

int ct_run_for(ct_render *r, int i, int (*run)(ct_render *, int, int))
{
    const ct_piece *pc = &r->t->pieces[i];
    size_t at = ct_tag_rest(pc);
    parser ps = { .r = r, .p = pc->s + at, .end = pc->s + pc->len, .live = 1 };
    char names[2][CT_NAME_MAX];
    int n_names = 0;
    do {
        if (n_names == 2 || peek_name(&ps, names[n_names]) == 0)
            return ct_fail(r, "expected 'for NAME in ...' or 'for A, B in ...'"), -1;
        ps.p += strlen(names[n_names++]);
    } while (take(&ps, ","));
    if (!take_word(&ps, "in"))
        return ct_fail(r, "expected 'in' after the loop's name"), -1;
    const cJSON *seq = logical(&ps, 1);
    const cJSON *items = seq ? ct_items_of(r, seq) : NULL;
    if (!items)
        return -1;
    const char *filter = NULL;
    if (take_word(&ps, "if"))
        filter = ps.p;
    else if (skip_space(&ps), ps.p < ps.end)
        return ct_fail(r, "unexpected '%.20s' in the for tag", ps.p), -1;
    size_t outer_scope = r->scope, mark = r->n_vars;
    /* The items the loop runs: those its filter keeps (loop.* counts only them). */
    int n = cJSON_GetArraySize(items), kept = 0;
    const cJSON **run_items = malloc(((size_t)n + 1) * sizeof *run_items);
    if (!run_items)
        return ct_fail(r, "out of memory"), -1;
    int rc = 0;
    for (const cJSON *c = items->child; c && rc == 0; c = c->next) {
        if (!filter) {
            run_items[kept++] = c;
            continue;
        }
        const cJSON *keep = bind(r, names, n_names, c) ? NULL : ct_eval(r, filter, (size_t)(ps.end - filter));
        r->n_vars = mark;
        if (!keep)
            rc = -1;
        else if (ct_truthy(keep))
            run_items[kept++] = c;
    }
    r->loops++;
    for (int k = 0; k < kept && rc == 0; k++) {
        r->scope = mark;
        const cJSON *loop = loop_object(r, k, kept);
        rc = !loop || bind(r, names, n_names, run_items[k]) || set_var(r, "loop", loop, 0) || run(r, i + 1, pc->next);
        r->n_vars = mark;
        int jump = r->jump;
        r->jump = CT_NONE;
        if (jump == CT_BREAK)
            break;
    }
    r->loops--;
    r->scope = outer_scope;
    free(run_items);
    return rc ? -1 : 0;
}
