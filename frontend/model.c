/* model.c: model XML -> OP-DAG (see model.h for what it guarantees).
 *
 * Three phases:
 *   1. walk the XML, evaluating hyper-parameters, expressions, repeats and
 *      ifs; every definition (input, param, op output, alias) is recorded
 *      under its qualified name, and every op's input names are kept as
 *      written, with the scope they were written in;
 *   2. resolve each input name by scope, innermost first, through aliases;
 *   3. sort the nodes topologically (stable: file order when possible) and
 *      report a cycle by its path.
 */
#include "model.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/tree.h>

#include "../ir/name_map.h"
#include "../ir/ops.h"
#include "expr.h"
#include "hyper_check.h"
#include "xml_util.h"

extern const unsigned char model_xsd[];
extern const unsigned model_xsd_len;

#define NAME_MAX_LEN  256
#define ATTR_TEXT_MAX 1024

typedef struct {
    char *prefix; /* "h.3." ; "" for the model's top level */
    int parent;   /* -1 for the top level                   */
} scope;

/* A definition under a qualified name: a value, or an alias to a name
 * looked up from a scope. */
typedef struct {
    int32_t value; /* >= 0: a value; -1: an alias */
    int alias_scope;
    char *alias_name;
    int line;
} definition;

typedef struct {
    int32_t node;
    int scope;
    int line;
    int n_in;
    char *in[IR_MAX_IN];
} pending_op;

typedef struct {
    char name[64];
    expr_value value;
} repeat_var;

typedef struct {
    const char *path;
    struct diag *err;
    ir_graph *g;
    uint32_t file; /* interned path, for locations */

    scope *scopes;
    int n_scopes, cap_scopes;
    definition *defs;
    int n_defs, cap_defs;
    name_map *def_index; /* qualified name -> defs index */
    pending_op *ops;
    int n_ops, cap_ops;

    repeat_var vars[MODEL_MAX_VARS]; /* repeat indices and <let>s, innermost last */
    int n_vars;
    int nesting;
    int64_t elements; /* elements visited, counting each repeat instance */
} builder;

/* ---- small helpers ------------------------------------------------------ */

static int grow(void **items, int *cap, int need, size_t item_size)
{
    if (need <= *cap)
        return 0;
    int cap2 = *cap ? *cap : 16;
    while (cap2 < need)
        cap2 *= 2;
    void *p = realloc(*items, (size_t)cap2 * item_size);
    if (!p)
        return -1;
    *items = p;
    *cap = cap2;
    return 0;
}

static int fail(builder *b, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(builder *b, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_vset(b->err, b->path, line, fmt, ap);
    va_end(ap);
    return -1;
}

static ir_loc loc_at(builder *b, int line) { return (ir_loc){ b->file, line }; }

static int is_identifier(const char *s)
{
    if (!isalpha((unsigned char)*s) && *s != '_')
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_')
            return 0;
    return 1;
}

/* Read attribute `name` of node (required: error if absent). */
static int get_attr(builder *b, xmlNodePtr node, const char *name, char *buf, size_t size, int required)
{
    int rc = xml_attr(node, name, buf, size, b->path, b->err);
    if (rc < 0)
        return -1;
    if (rc == 0 && required)
        return fail(b, xml_line(node), "<%s> needs the attribute '%s'", xml_element_name(node), name);
    return rc;
}

/* ---- expressions -------------------------------------------------------- */

static int lookup_name(void *ctx, const char *name, size_t len, expr_value *out)
{
    builder *b = ctx;
    for (int i = b->n_vars - 1; i >= 0; i--)
        if (strlen(b->vars[i].name) == len && memcmp(b->vars[i].name, name, len) == 0) {
            *out = b->vars[i].value;
            return 0;
        }
    for (int i = 0; i < b->g->n_hypers; i++) {
        const ir_hyper *h = &b->g->hypers[i];
        const char *hn = ir_str(b->g, h->name);
        if (strlen(hn) == len && memcmp(hn, name, len) == 0) {
            *out = (expr_value){ h->is_float, h->i, h->f };
            return 0;
        }
    }
    return -1;
}

static int eval(builder *b, int line, const char *what, const char *text, expr_value *out)
{
    char why[512];
    if (expr_eval(text, strlen(text), lookup_name, b, out, why, sizeof why))
        return fail(b, line, "%s: %s", what, why);
    return 0;
}

static int eval_int(builder *b, int line, const char *what, const char *text, int64_t *out)
{
    expr_value v;
    if (eval(b, line, what, text, &v))
        return -1;
    if (v.is_float)
        return fail(b, line, "%s: expected an integer, found %g from '%s'", what, v.f, text);
    *out = v.i;
    return 0;
}

/* "batch, seq, 4*dim" -> shape; commas inside parentheses do not split. */
static int eval_shape(builder *b, int line, const char *name, const char *text, ir_shape *out)
{
    out->rank = 0;
    const char *start = text;
    int depth = 0;
    for (const char *p = text;; p++) {
        if (*p == '(')
            depth++;
        else if (*p == ')')
            depth--;
        if ((*p == ',' && depth == 0) || *p == '\0') {
            char dim_text[ATTR_TEXT_MAX];
            size_t n = (size_t)(p - start);
            memcpy(dim_text, start, n);
            dim_text[n] = '\0';
            int blank = 1;
            for (size_t i = 0; i < n; i++)
                blank &= isspace((unsigned char)dim_text[i]) != 0;
            if (blank && *p == '\0' && out->rank == 0)
                return 0; /* shape="" : a scalar */
            if (out->rank == IR_MAX_RANK)
                return fail(b, line, "'%s': shape '%s' has more than %d dimensions", name, text, IR_MAX_RANK);
            char what[NAME_MAX_LEN + 64];
            snprintf(what, sizeof what, "'%s': dimension %d", name, out->rank + 1);
            int64_t d;
            if (eval_int(b, line, what, dim_text, &d))
                return -1;
            if (d < 1 || d > IR_DIM_MAX)
                return fail(b, line, "%s is %lld: expected 1 to %lld", what, (long long)d, (long long)IR_DIM_MAX);
            out->dim[out->rank++] = d;
            if (*p == '\0')
                break;
            start = p + 1;
        }
    }
    if (ir_shape_numel(out) < 0) {
        char s[256];
        return fail(b, line, "'%s': shape %s is absurd: more than %lld elements", name, ir_shape_str(out, s, sizeof s),
                    (long long)IR_NUMEL_MAX);
    }
    return 0;
}

/* "normal(0.02/sqrt(2*layers))", "zeros", "uniform(0.1)" */
static int eval_init(builder *b, int line, const char *name, const char *text, ir_init *out)
{
    char kind[32];
    size_t n = strcspn(text, "(");
    while (n > 0 && isspace((unsigned char)text[n - 1]))
        n--;
    if (n >= sizeof kind)
        n = sizeof kind - 1;
    memcpy(kind, text, n);
    kind[n] = '\0';
    ir_init_kind k;
    if (ir_init_parse(kind, &k) || k == INIT_NONE || k == INIT_DROPOUT)
        return fail(b, line, "'%s': unknown init '%s': expected zeros, ones, normal(std) or uniform(bound)", name,
                    text);
    out->kind = k;
    out->a = 0.0;
    const char *open = strchr(text, '(');
    int wants_arg = k == INIT_NORMAL || k == INIT_UNIFORM;
    if (!wants_arg) {
        if (open)
            return fail(b, line, "'%s': init '%s' takes no argument", name, kind);
        return 0;
    }
    const char *close = strrchr(text, ')');
    if (!open || !close || close < open)
        return fail(b, line, "'%s': init '%s' needs its argument: %s(value)", name, text, kind);
    for (const char *p = close + 1; *p; p++)
        if (!isspace((unsigned char)*p))
            return fail(b, line, "'%s': unexpected text after ')' in init '%s'", name, text);
    char arg[ATTR_TEXT_MAX];
    size_t len = (size_t)(close - open - 1);
    memcpy(arg, open + 1, len);
    arg[len] = '\0';
    expr_value v;
    char what[NAME_MAX_LEN + 32];
    snprintf(what, sizeof what, "'%s': init", name);
    if (eval(b, line, what, arg, &v))
        return -1;
    out->a = expr_as_double(v);
    if (!(out->a >= 0.0) || out->a > 1e6)
        return fail(b, line, "'%s': init scale %g: expected 0 to 1e6", name, out->a);
    return 0;
}

/* ---- definitions and scopes -------------------------------------------- */

static int add_scope(builder *b, const char *prefix, int parent)
{
    if (grow((void **)&b->scopes, &b->cap_scopes, b->n_scopes + 1, sizeof *b->scopes))
        return -1;
    char *copy = strdup(prefix);
    if (!copy)
        return -1;
    b->scopes[b->n_scopes] = (scope){ copy, parent };
    return b->n_scopes++;
}

/* prefix + name into out; -1 when it does not fit (names are at most
 * NAME_MAX_LEN - 1 characters). */
static int qualify(const builder *b, int sc, const char *name, char *out, size_t size)
{
    int n = snprintf(out, size, "%s%s", b->scopes[sc].prefix, name);
    return n < 0 || (size_t)n >= size ? -1 : 0;
}

/* qualify, reporting a name that is too long at `line`. */
static int qualify_or_fail(builder *b, int sc, const char *name, char *out, size_t size, int line)
{
    if (qualify(b, sc, name, out, size) == 0)
        return 0;
    return fail(b, line, "name '%s%.40s...' is longer than %d characters (repeats nested too deep?)",
                b->scopes[sc].prefix, name, NAME_MAX_LEN - 1);
}

static const definition *find_def(const builder *b, const char *qualified)
{
    int64_t hit;
    return name_map_get(b->def_index, qualified, &hit) ? &b->defs[hit] : NULL;
}

static int add_def(builder *b, const char *qualified, int32_t value, int alias_scope, const char *alias_name, int line)
{
    const definition *old = find_def(b, qualified);
    if (old)
        return fail(b, line, "'%s' is defined twice: first at line %d", qualified, old->line);
    if (grow((void **)&b->defs, &b->cap_defs, b->n_defs + 1, sizeof *b->defs))
        return fail(b, line, "out of memory");
    char *alias_copy = alias_name ? strdup(alias_name) : NULL;
    if (alias_name && !alias_copy)
        return fail(b, line, "out of memory");
    b->defs[b->n_defs] = (definition){ value, alias_scope, alias_copy, line };
    if (name_map_add(b->def_index, qualified, b->n_defs) != 0) {
        free(alias_copy);
        return fail(b, line, "out of memory");
    }
    b->n_defs++;
    return 0;
}

/* Define a source or op output value under name in scope sc. */
static int32_t define_value(builder *b, int sc, const char *name, ir_dtype dt, ir_role role, const ir_shape *shape,
                            int line)
{
    char q[NAME_MAX_LEN];
    if (qualify_or_fail(b, sc, name, q, sizeof q, line))
        return -1;
    if (find_def(b, q))
        return add_def(b, q, -1, 0, NULL, line); /* reports "defined twice" */
    int32_t v = ir_add_value(b->g, q, dt, role, shape, loc_at(b, line));
    if (v < 0)
        return fail(b, line, "out of memory");
    if (add_def(b, q, v, 0, NULL, line))
        return -1;
    return v;
}

/* Resolve `name` as seen from scope sc, through aliases.  -1: unknown. */
static int32_t resolve(const builder *b, int sc, const char *name, int depth)
{
    if (depth > 1000)
        return -2;
    for (int s = sc; s >= 0; s = b->scopes[s].parent) {
        char q[NAME_MAX_LEN];
        if (qualify(b, s, name, q, sizeof q))
            continue; /* too long to have been defined */
        const definition *d = find_def(b, q);
        if (!d)
            continue;
        if (d->value >= 0)
            return d->value;
        return resolve(b, d->alias_scope, d->alias_name, depth + 1);
    }
    return -1;
}

/* ---- elements ----------------------------------------------------------- */

static int walk_body(builder *b, xmlNodePtr first, int sc);
static int walk_elements(builder *b, xmlNodePtr first, int sc);

static int push_var(builder *b, int line, const char *name, expr_value v)
{
    if (b->n_vars == MODEL_MAX_VARS)
        return fail(b, line, "more than %d repeat variables and lets in scope", MODEL_MAX_VARS);
    repeat_var *rv = &b->vars[b->n_vars++];
    snprintf(rv->name, sizeof rv->name, "%s", name);
    rv->value = v;
    return 0;
}

static int read_dtype(builder *b, xmlNodePtr node, ir_dtype *dt)
{
    char text[16];
    int rc = get_attr(b, node, "dtype", text, sizeof text, 0);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        *dt = DT_F32;
        return 0;
    }
    if (ir_dtype_parse(text, dt))
        return fail(b, xml_line(node), "unknown dtype '%s': expected f32, i32, f16 or bf16", text);
    return 0;
}

static int element_source(builder *b, xmlNodePtr node, int sc, ir_role role)
{
    int line = xml_line(node);
    char name[NAME_MAX_LEN], shape_text[ATTR_TEXT_MAX], init_text[ATTR_TEXT_MAX];
    ir_dtype dt;
    ir_shape shape;
    char q[NAME_MAX_LEN];
    if (get_attr(b, node, "name", name, sizeof name, 1) < 0 || qualify_or_fail(b, sc, name, q, sizeof q, line) ||
        get_attr(b, node, "shape", shape_text, sizeof shape_text, 1) < 0 || read_dtype(b, node, &dt) ||
        eval_shape(b, line, q, shape_text, &shape))
        return -1;
    if (role == ROLE_PARAM && dt == DT_I32)
        return fail(b, line, "param '%s' is i32: parameters must be floating point", q);
    int32_t v = define_value(b, sc, name, dt, role, &shape, line);
    if (v < 0)
        return -1;
    if (role == ROLE_PARAM) {
        if (get_attr(b, node, "init", init_text, sizeof init_text, 1) < 0 ||
            eval_init(b, line, q, init_text, &b->g->values[v].init))
            return -1;
    }
    return 0;
}

/* Split "a, b c" into names; returns the count or -1. */
static int split_names(builder *b, int line, const char *text, char names[][NAME_MAX_LEN], int max, const char *what)
{
    int n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        if (!*p)
            return n;
        size_t len = strcspn(p, ", \t\r\n");
        if (n == max)
            return fail(b, line, "more than %d %s", max, what);
        if (len >= NAME_MAX_LEN)
            return fail(b, line, "a name in %s is longer than %d characters", what, NAME_MAX_LEN - 1);
        memcpy(names[n], p, len);
        names[n][len] = '\0';
        n++;
        p += len;
    }
}

static int element_op(builder *b, xmlNodePtr node, int sc)
{
    int line = xml_line(node);
    char type[64], in_text[ATTR_TEXT_MAX], out_text[ATTR_TEXT_MAX], name[NAME_MAX_LEN];
    char ins[IR_MAX_IN][NAME_MAX_LEN], outs[IR_MAX_OUT][NAME_MAX_LEN];
    if (get_attr(b, node, "type", type, sizeof type, 1) < 0 ||
        get_attr(b, node, "in", in_text, sizeof in_text, 1) < 0 ||
        get_attr(b, node, "out", out_text, sizeof out_text, 1) < 0 ||
        get_attr(b, node, "name", name, sizeof name, 0) < 0)
        return -1;
    ir_op op;
    if (op_parse(type, &op))
        return fail(b, line, "unknown op type '%s' (known: %s)", type, op_model_names());
    if (op_table[op].internal)
        return fail(b, line,
                    "op type '%s' is made by the compiler's passes, not written in a model "
                    "(model ops: %s)",
                    type, op_model_names());
    const op_def *def = &op_table[op];
    int n_in = split_names(b, line, in_text, ins, IR_MAX_IN, "inputs");
    int n_out = n_in < 0 ? -1 : split_names(b, line, out_text, outs, IR_MAX_OUT, "outputs");
    if (n_in < 0 || n_out < 0)
        return -1;
    if (n_in < def->min_in || n_in > def->max_in) {
        if (def->min_in == def->max_in)
            return fail(b, line, "op %s takes %d input%s, found %d", def->name, def->min_in,
                        def->min_in == 1 ? "" : "s", n_in);
        return fail(b, line, "op %s takes %d to %d inputs, found %d", def->name, def->min_in, def->max_in, n_in);
    }
    if (n_out < def->min_out || n_out > def->max_out) {
        if (def->min_out == def->max_out)
            return fail(b, line, "op %s has %d output%s, found %d in out=\"%s\"", def->name, def->min_out,
                        def->min_out == 1 ? "" : "s", n_out, out_text);
        return fail(b, line, "op %s has %d to %d outputs, found %d in out=\"%s\"", def->name, def->min_out,
                    def->max_out, n_out, out_text);
    }
    if (b->g->n_nodes >= MODEL_MAX_NODES)
        return fail(b, line, "the model expands to more than %d ops", MODEL_MAX_NODES);

    char qname[NAME_MAX_LEN];
    if (qualify_or_fail(b, sc, name[0] ? name : outs[0], qname, sizeof qname, line))
        return -1;
    int32_t n = ir_add_node(b->g, op, qname, loc_at(b, line));
    if (n < 0)
        return fail(b, line, "out of memory");
    for (int i = 0; i < n_out; i++) {
        ir_shape unknown = ir_shape_unknown();
        int32_t v = define_value(b, sc, outs[i], DT_F32, ROLE_ACTIVATION, &unknown, line);
        if (v < 0 || ir_node_add_output(b->g, n, v))
            return v < 0 ? -1 : fail(b, line, "out of memory");
    }
    /* Attributes: whichever of the known keys are present, checked against the op. */
    for (int k = 0; k < ATTR_KEY_COUNT; k++) {
        char text[ATTR_TEXT_MAX];
        int rc = get_attr(b, node, attr_key_name((attr_key)k), text, sizeof text, 0);
        const attr_spec *spec = op_attr_spec(op, (attr_key)k);
        if (rc < 0)
            return -1;
        if (rc == 0) {
            if (spec && spec->required)
                return fail(b, line, "op %s needs the attribute '%s'", def->name, attr_key_name((attr_key)k));
            continue;
        }
        if (!spec)
            return fail(b, line, "op %s takes no attribute '%s'", def->name, attr_key_name((attr_key)k));
        char what[128];
        snprintf(what, sizeof what, "attribute '%s'", attr_key_name((attr_key)k));
        if (spec->type == ATTR_INT) {
            int64_t v;
            if (eval_int(b, line, what, text, &v) || ir_node_set_int(b->g, n, (attr_key)k, v))
                return -1;
        } else {
            expr_value v;
            if (eval(b, line, what, text, &v) || ir_node_set_float(b->g, n, (attr_key)k, expr_as_double(v)))
                return -1;
        }
    }
    if (grow((void **)&b->ops, &b->cap_ops, b->n_ops + 1, sizeof *b->ops))
        return fail(b, line, "out of memory");
    pending_op *p = &b->ops[b->n_ops++];
    memset(p, 0, sizeof *p);
    p->node = n;
    p->scope = sc;
    p->line = line;
    for (int i = 0; i < n_in; i++) {
        p->in[i] = strdup(ins[i]);
        if (!p->in[i])
            return fail(b, line, "out of memory");
        p->n_in++;
    }
    return 0;
}

static int element_alias(builder *b, xmlNodePtr node, int sc)
{
    int line = xml_line(node);
    char name[NAME_MAX_LEN], to[NAME_MAX_LEN], q[NAME_MAX_LEN];
    if (get_attr(b, node, "name", name, sizeof name, 1) < 0 || get_attr(b, node, "to", to, sizeof to, 1) < 0)
        return -1;
    if (qualify_or_fail(b, sc, name, q, sizeof q, line))
        return -1;
    return add_def(b, q, -1, sc, to, line);
}

/* <let name value>: a named expression value for the rest of the body. */
static int element_let(builder *b, xmlNodePtr node)
{
    int line = xml_line(node);
    char name[64], text[ATTR_TEXT_MAX], what[96];
    expr_value v;
    if (get_attr(b, node, "name", name, sizeof name, 1) < 0 || get_attr(b, node, "value", text, sizeof text, 1) < 0)
        return -1;
    if (!is_identifier(name))
        return fail(b, line, "let name '%s' is not an identifier (letters, digits, '_')", name);
    snprintf(what, sizeof what, "let '%s'", name);
    if (eval(b, line, what, text, &v))
        return -1;
    return push_var(b, line, name, v);
}

static int element_assert(builder *b, xmlNodePtr node)
{
    int line = xml_line(node);
    char test[ATTR_TEXT_MAX], message[ATTR_TEXT_MAX];
    expr_value v;
    if (get_attr(b, node, "test", test, sizeof test, 1) < 0 ||
        get_attr(b, node, "message", message, sizeof message, 1) < 0 || eval(b, line, "assert", test, &v))
        return -1;
    if (expr_as_double(v) == 0.0)
        return fail(b, line, "%s (assert %s)", message, test);
    return 0;
}

/* <repeat name count var start input carry result output>: instance i's
 * `carry` is instance i-1's `result` (instance 0's is `input`); `output`
 * names the last instance's result in the enclosing scope. */
static int element_repeat(builder *b, xmlNodePtr node, int sc)
{
    int line = xml_line(node);
    char name[NAME_MAX_LEN], count_text[ATTR_TEXT_MAX], start_text[ATTR_TEXT_MAX], var[64];
    char input[NAME_MAX_LEN], carry[NAME_MAX_LEN], result[NAME_MAX_LEN], output[NAME_MAX_LEN];
    int64_t count, start = 0;
    if (get_attr(b, node, "name", name, sizeof name, 0) < 0 ||
        get_attr(b, node, "count", count_text, sizeof count_text, 1) < 0 ||
        get_attr(b, node, "var", var, sizeof var, 0) < 0 ||
        get_attr(b, node, "start", start_text, sizeof start_text, 0) < 0 ||
        get_attr(b, node, "input", input, sizeof input, 1) < 0 ||
        get_attr(b, node, "carry", carry, sizeof carry, 1) < 0 ||
        get_attr(b, node, "result", result, sizeof result, 1) < 0 ||
        get_attr(b, node, "output", output, sizeof output, 1) < 0 ||
        eval_int(b, line, "repeat count", count_text, &count) ||
        (start_text[0] && eval_int(b, line, "repeat start", start_text, &start)))
        return -1;
    if (count < 0 || count > MODEL_MAX_REPEAT_COUNT)
        return fail(b, line, "repeat count %lld: expected 0 to %d", (long long)count, MODEL_MAX_REPEAT_COUNT);
    if (start < 0 || start > MODEL_MAX_REPEAT_COUNT)
        return fail(b, line, "repeat start %lld: expected 0 to %d", (long long)start, MODEL_MAX_REPEAT_COUNT);
    if (var[0] && !is_identifier(var))
        return fail(b, line, "repeat var '%s' is not an identifier (letters, digits, '_')", var);
    if (b->nesting >= MODEL_MAX_NESTING)
        return fail(b, line, "repeats and ifs nested deeper than %d", MODEL_MAX_NESTING);
    int64_t children = 0;
    for (xmlNodePtr c = node->children; c; c = c->next)
        children += xml_element_name(c) != NULL;
    /* Each instance counts as an element too: an empty body still makes a
     * scope and a definition an instance (a fuzzer found 10^5 empty ones
     * nested in 10^5, which the elements alone never stopped). */
    if (b->elements + count * (children + 1) > MODEL_MAX_ELEMENTS)
        return fail(b, line,
                    "repeat count %lld (x %lld element%s each, and the instance) expands the model past "
                    "%d elements",
                    (long long)count, (long long)children, children == 1 ? "" : "s", MODEL_MAX_ELEMENTS);
    b->nesting++;
    int prev_scope = -1;
    for (int64_t i = 0; i < count; i++) {
        char prefix[NAME_MAX_LEN], q[NAME_MAX_LEN];
        if (++b->elements > MODEL_MAX_ELEMENTS)
            return fail(b, line, "repeat instance %lld expands the model past %d elements", (long long)(start + i),
                        MODEL_MAX_ELEMENTS);
        if (snprintf(prefix, sizeof prefix, "%s%s%s%lld.", b->scopes[sc].prefix, name, name[0] ? "." : "",
                     (long long)(start + i)) >= (int)sizeof prefix - 32)
            return fail(b, line, "repeat names nested too deep: '%s...' is too long", prefix);
        int inst = add_scope(b, prefix, sc);
        if (inst < 0)
            return fail(b, line, "out of memory");
        if (qualify_or_fail(b, inst, carry, q, sizeof q, line))
            return -1;
        if (prev_scope < 0 ? add_def(b, q, -1, sc, input, line) : add_def(b, q, -1, prev_scope, result, line))
            return -1;
        if (var[0] && push_var(b, line, var, (expr_value){ 0, start + i, 0.0 }))
            return -1;
        int rc = walk_body(b, node->children, inst);
        if (var[0])
            b->n_vars--;
        if (rc)
            return -1;
        prev_scope = inst;
    }
    b->nesting--;
    char q[NAME_MAX_LEN];
    if (qualify_or_fail(b, sc, output, q, sizeof q, line))
        return -1;
    return prev_scope < 0 ? add_def(b, q, -1, sc, input, line) : add_def(b, q, -1, prev_scope, result, line);
}

/* Walk the element children of a body.  `if` and the `else` after it pick
 * which children take part, in the same scope. */
static int walk_body(builder *b, xmlNodePtr first, int sc)
{
    int vars_on_entry = b->n_vars;
    int rc = walk_elements(b, first, sc);
    b->n_vars = vars_on_entry; /* <let>s end with their body */
    return rc;
}

static int walk_elements(builder *b, xmlNodePtr first, int sc)
{
    int last_if = -1; /* -1: the previous element was not an if; else its truth */
    for (xmlNodePtr node = first; node; node = node->next) {
        const char *el = xml_element_name(node);
        if (!el)
            continue;
        int line = xml_line(node);
        int rc = 0, this_if = -1;
        if (++b->elements > MODEL_MAX_ELEMENTS)
            return fail(b, line,
                        "the model expands to more than %d elements (repeat counts multiplied "
                        "through nested repeats)",
                        MODEL_MAX_ELEMENTS);
        if (strcmp(el, "input") == 0)
            rc = element_source(b, node, sc, ROLE_INPUT);
        else if (strcmp(el, "param") == 0)
            rc = element_source(b, node, sc, ROLE_PARAM);
        else if (strcmp(el, "op") == 0)
            rc = element_op(b, node, sc);
        else if (strcmp(el, "alias") == 0)
            rc = element_alias(b, node, sc);
        else if (strcmp(el, "assert") == 0)
            rc = element_assert(b, node);
        else if (strcmp(el, "let") == 0)
            rc = element_let(b, node);
        else if (strcmp(el, "repeat") == 0)
            rc = element_repeat(b, node, sc);
        else if (strcmp(el, "if") == 0 || strcmp(el, "else") == 0) {
            int take;
            if (el[0] == 'i') {
                char test[ATTR_TEXT_MAX];
                expr_value v;
                if (get_attr(b, node, "test", test, sizeof test, 1) < 0 || eval(b, line, "if test", test, &v))
                    return -1;
                take = expr_as_double(v) != 0.0;
                this_if = take;
            } else {
                if (last_if < 0)
                    return fail(b, line, "<else> must follow an <if>");
                take = !last_if;
            }
            if (take) {
                if (b->nesting >= MODEL_MAX_NESTING)
                    return fail(b, line, "repeats and ifs nested deeper than %d", MODEL_MAX_NESTING);
                b->nesting++;
                rc = walk_body(b, node->children, sc);
                b->nesting--;
            }
        } else if (strcmp(el, "hyper") == 0 || strcmp(el, "loss") == 0) {
            continue; /* top level only; read by model_build */
        } else {
            return fail(b, line, "unexpected element <%s>", el);
        }
        if (rc)
            return -1;
        last_if = this_if;
    }
    return 0;
}

/* ---- hyper-parameters --------------------------------------------------- */

static int read_hypers(builder *b, xmlNodePtr root, const model_setting *sets, int n_sets)
{
    int used[64] = { 0 };
    if (n_sets > 64)
        return fail(b, 0, "more than 64 --set options");
    for (xmlNodePtr node = root->children; node; node = node->next) {
        const char *el = xml_element_name(node);
        if (!el || strcmp(el, "hyper") != 0)
            continue;
        int line = xml_line(node);
        char name[64], text[ATTR_TEXT_MAX];
        if (get_attr(b, node, "name", name, sizeof name, 1) < 0 || get_attr(b, node, "value", text, sizeof text, 1) < 0)
            return -1;
        if (!is_identifier(name))
            return fail(b, line, "hyper-parameter name '%s' is not an identifier (letters, digits, '_')", name);
        expr_value dummy;
        if (lookup_name(b, name, strlen(name), &dummy) == 0) {
            int first = 0;
            char other[64];
            for (xmlNodePtr prev = root->children; prev != node && !first; prev = prev->next)
                if (xml_element_name(prev) && strcmp(xml_element_name(prev), "hyper") == 0 &&
                    xml_attr(prev, "name", other, sizeof other, b->path, NULL) == 1 && strcmp(other, name) == 0)
                    first = xml_line(prev);
            return fail(b, line, "hyper-parameter '%s' is defined twice: first at line %d", name, first);
        }
        const char *source = text;
        char what[640];
        snprintf(what, sizeof what, "hyper-parameter '%s'", name);
        for (int i = n_sets - 1; i >= 0; i--) /* the last --set of a name wins */
            if (strcmp(sets[i].name, name) == 0) {
                source = sets[i].value;
                used[i] = 1;
                if (sets[i].from)
                    snprintf(what, sizeof what, "%s: %s=%s", sets[i].from, name, sets[i].value);
                else
                    snprintf(what, sizeof what, "--set %s=%s", name, sets[i].value);
                break;
            }
        for (int i = 0; i < n_sets; i++)
            if (strcmp(sets[i].name, name) == 0)
                used[i] = 1;
        expr_value v;
        if (eval(b, line, what, source, &v))
            return -1;
        if ((v.is_float ? ir_add_hyper_float(b->g, name, v.f) : ir_add_hyper_int(b->g, name, v.i)) < 0)
            return fail(b, line, "out of memory");
    }
    for (int i = 0; i < n_sets; i++)
        if (!used[i]) {
            char known[1024] = "";
            for (int h = 0; h < b->g->n_hypers; h++)
                snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", h ? ", " : "",
                         ir_str(b->g, b->g->hypers[h].name));
            if (sets[i].from)
                return fail(b, 0, "%s gives %s, but the model has no hyper-parameter '%s' (it has: %s)", sets[i].from,
                            sets[i].name, sets[i].name, known[0] ? known : "none");
            return fail(b, 0, "--set %s: the model has no hyper-parameter '%s' (it has: %s)", sets[i].name,
                        sets[i].name, known[0] ? known : "none");
        }
    return 0;
}

/* ---- resolution and ordering -------------------------------------------- */

static int resolve_inputs(builder *b)
{
    for (int i = 0; i < b->n_ops; i++) {
        pending_op *p = &b->ops[i];
        for (int k = 0; k < p->n_in; k++) {
            int32_t v = resolve(b, p->scope, p->in[k], 0);
            if (v == -2)
                return fail(b, p->line, "op '%s': input '%s' is an alias of itself (alias cycle)",
                            ir_node_name(b->g, p->node), p->in[k]);
            if (v < 0)
                return fail(b, p->line, "op '%s': input '%s' is not defined (looked up from scope '%s')",
                            ir_node_name(b->g, p->node), p->in[k],
                            b->scopes[p->scope].prefix[0] ? b->scopes[p->scope].prefix : "top level");
            if (ir_node_add_input(b->g, p->node, v))
                return fail(b, p->line, "out of memory");
        }
    }
    return 0;
}

/* A producer of one of n's inputs that is not sorted yet (every unsorted
 * node has one: that is why it is unsorted). */
static int32_t unsorted_producer(const ir_graph *g, int32_t n, const char *done)
{
    for (int k = 0; k < g->nodes[n].n_in; k++) {
        int32_t p = g->values[g->nodes[n].in[k]].producer;
        if (p >= 0 && !done[p])
            return p;
    }
    return -1;
}

/* Describe a cycle through node `start` (every node on it is unsorted). */
static int report_cycle(builder *b, int32_t start, const char *done)
{
    ir_graph *g = b->g;
    char path[DIAG_MSG_MAX] = "";
    int32_t n = start;
    /* Walk back through unsorted producers; after n_nodes steps we are on the cycle. */
    for (int i = 0; i < g->n_nodes; i++)
        n = unsorted_producer(g, n, done);
    int32_t on_cycle = n;
    int steps = 0;
    do {
        snprintf(path + strlen(path), sizeof path - strlen(path), "'%s' (line %d) <- ", ir_node_name(g, n),
                 g->nodes[n].loc.line);
        n = unsorted_producer(g, n, done);
    } while (n != on_cycle && ++steps < 16);
    snprintf(path + strlen(path), sizeof path - strlen(path), "'%s'", ir_node_name(g, on_cycle));
    return fail(b, g->nodes[on_cycle].loc.line, "cycle: op %s needs its own output", path);
}

/* Reorder nodes topologically, keeping file order where dependencies allow. */
static int sort_nodes(builder *b)
{
    ir_graph *g = b->g;
    int32_t n = g->n_nodes;
    char *done = calloc((size_t)n + 1, 1);
    int32_t *order = malloc(((size_t)n + 1) * sizeof *order);
    ir_node *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    if (!done || !order || !sorted) {
        free(done);
        free(order);
        free(sorted);
        return fail(b, 0, "out of memory");
    }
    int32_t count = 0;
    /* Repeated sweeps in file order: linear when the file is already in
     * order (the common case), quadratic only for backward references. */
    for (int progress = 1; progress && count < n;) {
        progress = 0;
        for (int32_t i = 0; i < n; i++) {
            if (done[i])
                continue;
            int ready = 1;
            for (int k = 0; k < g->nodes[i].n_in && ready; k++) {
                int32_t p = g->values[g->nodes[i].in[k]].producer;
                ready = p < 0 || done[p];
            }
            if (ready) {
                done[i] = 1;
                order[count++] = i;
                progress = 1;
            }
        }
    }
    int rc = 0;
    if (count < n) {
        for (int32_t i = 0; i < n; i++)
            if (!done[i]) {
                rc = report_cycle(b, i, done);
                break;
            }
    } else {
        for (int32_t i = 0; i < n; i++)
            sorted[i] = g->nodes[order[i]];
        if (n > 0)
            memcpy(g->nodes, sorted, (size_t)n * sizeof *sorted);
        for (int32_t i = 0; i < n; i++)
            for (int k = 0; k < g->nodes[i].n_out; k++)
                g->values[g->nodes[i].out[k]].producer = i;
    }
    free(done);
    free(order);
    free(sorted);
    return rc;
}

/* ---- entry points ------------------------------------------------------- */

static void builder_free(builder *b)
{
    for (int i = 0; i < b->n_scopes; i++)
        free(b->scopes[i].prefix);
    for (int i = 0; i < b->n_defs; i++)
        free(b->defs[i].alias_name);
    for (int i = 0; i < b->n_ops; i++)
        for (int k = 0; k < b->ops[i].n_in; k++)
            free(b->ops[i].in[k]);
    free(b->scopes);
    free(b->defs);
    free(b->ops);
    name_map_free(b->def_index);
}

static int model_build(builder *b, xmlDocPtr doc, const model_setting *sets, int n_sets)
{
    xmlNodePtr root = xmlDocGetRootElement(doc);
    if (!root || strcmp((const char *)root->name, "model") != 0)
        return fail(b, xml_line(root), "expected a <model> document, found <%s>", root ? (const char *)root->name : "");
    char name[NAME_MAX_LEN], loss[NAME_MAX_LEN] = "";
    int loss_line = 0;
    if (get_attr(b, root, "name", name, sizeof name, 1) < 0)
        return -1;
    b->g->name = ir_intern(b->g, name);
    b->file = ir_intern(b->g, b->path);
    b->g->source = b->file;
    if (add_scope(b, "", -1) < 0)
        return fail(b, 0, "out of memory");
    if (read_hypers(b, root, sets, n_sets) < 0)
        return -1;
    if (walk_body(b, root->children, 0) || resolve_inputs(b) || sort_nodes(b))
        return -1;
    for (xmlNodePtr node = root->children; node; node = node->next)
        if (xml_element_name(node) && strcmp(xml_element_name(node), "loss") == 0) {
            loss_line = xml_line(node);
            if (get_attr(b, node, "value", loss, sizeof loss, 1) < 0)
                return -1;
        }
    int32_t v = resolve(b, 0, loss, 0);
    if (v < 0)
        return fail(b, loss_line, "loss '%s' is not defined", loss);
    b->g->loss = v;
    /* after the body: an expression's own error names its line first */
    if (hyper_check_read(root, b->path, b->err) < 0)
        return -1;
    return ir_graph_verify(b->g, b->err);
}

int model_load_memory(const char *buf, size_t len, const char *path, const model_setting *sets, int n_sets, ir_graph *g,
                      struct diag *err)
{
    ir_graph_init(g);
    xmlDocPtr doc = xml_read(path, buf, len, err);
    if (!doc)
        return -1;
    builder b = { .path = path, .err = err, .g = g };
    int rc = xml_validate(doc, model_xsd, model_xsd_len, path, err);
    if (rc == 0) {
        b.def_index = name_map_new();
        rc = b.def_index ? model_build(&b, doc, sets, n_sets) : fail(&b, 0, "out of memory");
    }
    builder_free(&b);
    xmlFreeDoc(doc);
    if (rc != 0) {
        ir_graph_free(g);
        ir_graph_init(g);
    }
    return rc;
}

int model_load(const char *path, const model_setting *sets, int n_sets, ir_graph *g, struct diag *err)
{
    return model_load_memory(NULL, 0, path, sets, n_sets, g, err);
}

int model_setting_parse(const char *text, char *buf, size_t size, model_setting *out)
{
    const char *eq = strchr(text, '=');
    if (!eq || eq == text || strlen(text) >= size)
        return -1;
    memcpy(buf, text, strlen(text) + 1);
    buf[eq - text] = '\0';
    out->name = buf;
    out->from = NULL;
    out->value = buf + (eq - text) + 1;
    return 0;
}
