/* parse.c: ir_graph_parse, the reader of the text form that print.c writes
 * (the grammar is at the top of print.c).
 *
 * Hand-written and line-oriented: each line is read left to right by a
 * cursor that knows what it expects next, so every syntax error says
 * "expected X, found 'Y'" at the line of the text.  Blank lines and lines
 * starting with '#' are skipped; spaces between tokens are free.
 *
 * It is fed arbitrary bytes by the fuzzer, so: it never reads past len (the
 * text need not be NUL-terminated and may hold NUL bytes), never recurses,
 * reads numbers with strtoll/strtod on bounded copies with range checks, and
 * rejects shapes the verifier would.  It builds through the builder API and
 * ends with ir_graph_verify; on any error the graph is left empty.
 */
#include "ir.h"
#include "name_map.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

#define TOKEN_MAX 4096 /* longest name or file name, with its NUL */

typedef struct {
    const char *p, *end; /* the rest of the current line           */
    int line;
    const char *file;
    struct diag *err;
    ir_graph *g;
    name_map *values; /* name -> value index                    */
    name_map *nodes;  /* name -> line of the node's definition  */
} parser;

/* ---- errors ---------------------------------------------------------------- */

/* Up to 40 bytes of s, non-printable bytes and quotes as \xHH. */
static void escape_into(const char *s, size_t n, char *buf, size_t size)
{
    size_t used = 0, i = 0;
    for (; i < n && i < 40 && used + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\')
            used += (size_t)snprintf(buf + used, size - used, "\\x%02x", c);
        else
            buf[used++] = (char)c;
    }
    if (i < n && used + 4 < size)
        used += (size_t)snprintf(buf + used, size - used, "...");
    buf[used] = '\0';
}

static void skip_spaces(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t'))
        ps->p++;
}

/* "expected WHAT, found 'the next token'" at the current line. */
static int expected(parser *ps, const char *what)
{
    skip_spaces(ps);
    if (ps->p == ps->end)
        return diag_set(ps->err, ps->file, ps->line, "expected %s, found end of line", what);
    /* The next token: up to a space or a delimiter, at least one byte. */
    static const char delimiters[] = " \t,()[]";
    size_t n = 1;
    while (!memchr(delimiters, ps->p[0], sizeof delimiters - 1) && ps->p + n < ps->end &&
           !memchr(delimiters, ps->p[n], sizeof delimiters - 1))
        n++;
    char found[200];
    escape_into(ps->p, n, found, sizeof found);
    return diag_set(ps->err, ps->file, ps->line, "expected %s, found '%s'", what, found);
}

/* s, escaped, for a message. */
static const char *shown(const char *s, char buf[200])
{
    escape_into(s, strlen(s), buf, 200);
    return buf;
}

/* The same as expected(), for a token already read into tok. */
static int expected_tok(parser *ps, const char *what, const char *tok)
{
    char buf[200];
    return diag_set(ps->err, ps->file, ps->line, "expected %s, found '%s'", what, shown(tok, buf));
}

static int out_of_memory(parser *ps) { return diag_set(ps->err, ps->file, ps->line, "out of memory"); }

/* ---- tokens ---------------------------------------------------------------- */

static int at_end(parser *ps)
{
    skip_spaces(ps);
    return ps->p == ps->end;
}

static int peek_char(parser *ps, char c)
{
    skip_spaces(ps);
    return ps->p < ps->end && *ps->p == c;
}

static int peek_arrow(parser *ps)
{
    skip_spaces(ps);
    return ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] == '>';
}

/* what: "'('" and the like, for the message. */
static int expect_char(parser *ps, char c, const char *what)
{
    if (!peek_char(ps, c))
        return expected(ps, what);
    ps->p++;
    return 0;
}

/* Length of the bare word [A-Za-z0-9_.:/-]* at the cursor. */
static size_t word_len(parser *ps)
{
    skip_spaces(ps);
    size_t n = 0;
    while (ps->p + n < ps->end && ir_name_char((unsigned char)ps->p[n]))
        n++;
    return n;
}

/* A bare word into buf (TOKEN_MAX bytes); what names it for the message. */
static int read_word(parser *ps, char *buf, const char *what)
{
    size_t n = word_len(ps);
    if (n == 0)
        return expected(ps, what);
    if (n >= TOKEN_MAX)
        return diag_set(ps->err, ps->file, ps->line, "expected %s of at most %d bytes, found one of %zu", what,
                        TOKEN_MAX - 1, n);
    memcpy(buf, ps->p, n);
    buf[n] = '\0';
    ps->p += n;
    return 0;
}

/* Does a bare word followed by '=' come next?  Copies the word (without
 * consuming anything) into buf, at most size bytes. */
static int peek_key(parser *ps, char *buf, size_t size)
{
    size_t n = word_len(ps);
    const char *q = ps->p + n;
    while (q < ps->end && (*q == ' ' || *q == '\t'))
        q++;
    if (n == 0 || n >= size || q == ps->end || *q != '=')
        return 0;
    memcpy(buf, ps->p, n);
    buf[n] = '\0';
    return 1;
}

static int hex_digit(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* "..." with \" \\ \n \xHH escapes; the cursor is on the opening quote. */
static int read_quoted(parser *ps, char *buf, const char *what)
{
    const char *q = ps->p + 1;
    size_t n = 0;
    for (;;) {
        if (q == ps->end)
            return diag_set(ps->err, ps->file, ps->line, "expected '\"' to close %s, found end of line", what);
        char c = *q++;
        if (c == '"')
            break;
        if (c == '\\') {
            const char *escape = q - 1;
            char e = q < ps->end ? *q++ : '\0';
            if (e == '"' || e == '\\') {
                c = e;
            } else if (e == 'n') {
                c = '\n';
            } else if (e == 'x' && ps->end - q >= 2 && hex_digit(q[0]) >= 0 && hex_digit(q[1]) >= 0 &&
                       (hex_digit(q[0]) | hex_digit(q[1]))) {
                c = (char)(hex_digit(q[0]) * 16 + hex_digit(q[1]));
                q += 2;
            } else {
                ps->p = escape;
                return expected(ps, "an escape (\\\" \\\\ \\n or \\xHH, not \\x00) in a quoted name");
            }
        } else if (c == '\0') {
            return diag_set(ps->err, ps->file, ps->line, "expected a character in %s, found a NUL byte", what);
        }
        if (n + 1 >= TOKEN_MAX)
            return diag_set(ps->err, ps->file, ps->line, "expected %s of at most %d bytes, found a longer one", what,
                            TOKEN_MAX - 1);
        buf[n++] = c;
    }
    buf[n] = '\0';
    ps->p = q;
    return 0;
}

/* A name, bare or quoted. */
static int read_name(parser *ps, char *buf, const char *what)
{
    if (peek_char(ps, '"'))
        return read_quoted(ps, buf, what);
    return read_word(ps, buf, what);
}

/* The characters a number may be made of; the conversion must eat them all. */
static int number_char(int c) { return ir_name_char(c) || c == '+'; }

/* Copy the number-looking token at the cursor into buf; 0 if none or too long. */
static size_t number_token(parser *ps, char *buf, size_t size)
{
    skip_spaces(ps);
    size_t n = 0;
    while (ps->p + n < ps->end && number_char((unsigned char)ps->p[n]))
        n++;
    if (n == 0 || n >= size)
        return 0;
    memcpy(buf, ps->p, n);
    buf[n] = '\0';
    return n;
}

static int parse_int_text(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!*s)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0' || errno == ERANGE || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int read_int(parser *ps, int64_t lo, int64_t hi, const char *what, int64_t *out)
{
    char buf[64];
    size_t n = number_token(ps, buf, sizeof buf);
    if (n == 0 || parse_int_text(buf, lo, hi, out) != 0)
        return expected(ps, what);
    ps->p += n;
    return 0;
}

static int parse_float_text(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || (errno == ERANGE && isinf(v))) /* underflow is fine */
        return -1;
    *out = v;
    return 0;
}

static int read_float(parser *ps, const char *what, double *out)
{
    char buf[64];
    size_t n = number_token(ps, buf, sizeof buf);
    if (n == 0 || parse_float_text(buf, out) != 0)
        return expected(ps, what);
    ps->p += n;
    return 0;
}

/* ---- pieces of a line -------------------------------------------------------- */

/* "a,b,c]" after the '[': 1 to IR_MAX_RANK integers in [lo, hi]. */
static int read_int_list(parser *ps, int64_t lo, int64_t hi, const char *item, const char *list,
                         int64_t out[IR_MAX_RANK], int *count)
{
    char what[128];
    for (*count = 0;;) {
        if (read_int(ps, lo, hi, item, &out[*count]) != 0)
            return -1;
        ++*count;
        if (peek_char(ps, ']')) {
            ps->p++;
            return 0;
        }
        if (*count == IR_MAX_RANK)
            snprintf(what, sizeof what, "']' (at most %d %s)", IR_MAX_RANK, list);
        else
            snprintf(what, sizeof what, "',' or ']' in a list of %s", list);
        if (*count == IR_MAX_RANK || !peek_char(ps, ','))
            return expected(ps, what);
        ps->p++;
    }
}

/* DTYPE[d,d,...], DTYPE[] or DTYPE[?]. */
static int read_type(parser *ps, ir_dtype *dt, ir_shape *shape)
{
    char word[TOKEN_MAX];
    if (read_word(ps, word, "a dtype (f32, i32, f16, bf16)") != 0)
        return -1;
    if (ir_dtype_parse(word, dt) != 0)
        return expected_tok(ps, "a dtype (f32, i32, f16, bf16)", word);
    if (expect_char(ps, '[', "'[' and a shape") != 0)
        return -1;
    *shape = ir_shape_make(0, NULL);
    if (peek_char(ps, '?')) {
        ps->p++;
        *shape = ir_shape_unknown();
        return expect_char(ps, ']', "']' after '?'");
    }
    if (peek_char(ps, ']')) {
        ps->p++;
        return 0;
    }
    if (read_int_list(ps, 1, IR_DIM_MAX, "a dimension from 1 to 2147483648", "dimensions", shape->dim, &shape->rank) !=
        0)
        return -1;
    if (ir_shape_numel(shape) < 0) {
        char buf[256];
        return expected_tok(ps, "a shape of at most 2^40 elements", ir_shape_str(shape, buf, sizeof buf));
    }
    return 0;
}

/* Optional " at=OFFSET": where the memory pass placed a value. */
static int read_offset(parser *ps, int64_t *offset)
{
    char key[8];
    *offset = -1;
    if (!peek_key(ps, key, sizeof key) || strcmp(key, "at") != 0)
        return 0;
    ps->p += 2;
    return expect_char(ps, '=', "'='") != 0 ? -1 : read_int(ps, 0, INT64_MAX, "an arena offset >= 0", offset);
}

/* Optional " @FILE:LINE".  Without one, the line of the text itself (with
 * no file: messages then name the text file, and the printer, which prints
 * a location only when it has a file, still prints the line as it was). */
static int read_loc(parser *ps, ir_loc *loc)
{
    *loc = (ir_loc){ 0, ps->line };
    if (!peek_char(ps, '@'))
        return 0;
    ps->p++;
    char file[TOKEN_MAX];
    int64_t line;
    if (peek_char(ps, '"')) {
        if (read_quoted(ps, file, "a file name") != 0 || expect_char(ps, ':', "':' and a line number") != 0 ||
            read_int(ps, INT32_MIN, INT32_MAX, "a line number", &line) != 0)
            return -1;
    } else {
        /* A bare file name may hold ':' itself: the line is after the last one. */
        if (read_word(ps, file, "a file name after '@'") != 0)
            return -1;
        char *colon = strrchr(file, ':');
        if (!colon || colon == file || parse_int_text(colon + 1, INT32_MIN, INT32_MAX, &line) != 0)
            return expected_tok(ps, "FILE:LINE after '@'", file);
        *colon = '\0';
    }
    if (!file[0])
        return expected_tok(ps, "a file name after '@'", "\"\"");
    loc->file = ir_intern(ps->g, file);
    if (loc->file == IR_STR_NONE)
        return out_of_memory(ps);
    loc->line = (int32_t)line;
    return 0;
}

static int expect_end(parser *ps, const char *what) { return at_end(ps) ? 0 : expected(ps, what); }

/* The value called name, or -1 after reporting it unknown. */
static int32_t lookup_value(parser *ps, const char *name)
{
    int64_t hit;
    char buf[200];
    if (!name_map_get(ps->values, name, &hit))
        return diag_set(ps->err, ps->file, ps->line, "unknown value '%s' (a value must be defined on an earlier line)",
                        shown(name, buf));
    return (int32_t)hit;
}

/* Add a value and register its name; error if the name is taken. */
static int32_t define_value(parser *ps, const char *name, ir_dtype dt, ir_role role, const ir_shape *s)
{
    int64_t hit;
    if (name_map_get(ps->values, name, &hit)) {
        const ir_value *old = &ps->g->values[hit];
        char buf[200];
        if (old->producer >= 0)
            return diag_set(ps->err, ps->file, ps->line,
                            "value '%s' is already defined, as an output of node "
                            "'%s'",
                            shown(name, buf), ir_str(ps->g, ps->g->nodes[old->producer].name));
        return diag_set(ps->err, ps->file, ps->line, "value '%s' is already defined, as %s %s", shown(name, buf),
                        old->role == ROLE_INPUT ? "an" : "a", ir_role_name(old->role));
    }
    int32_t v = ir_add_value(ps->g, name, dt, role, s, (ir_loc){ 0, 0 });
    if (v < 0 || name_map_add(ps->values, name, v) != 0)
        return out_of_memory(ps);
    return v;
}

/* ---- lines ------------------------------------------------------------------ */

/* input NAME : TYPE [init=dropout(P)] @LOC   |   param/state NAME : TYPE init=INIT [frozen] @LOC */
static int parse_source(parser *ps, ir_role role)
{
    char name[TOKEN_MAX], word[TOKEN_MAX];
    ir_dtype dt;
    ir_shape shape;
    ir_init init = { INIT_NONE, 0 };
    ir_loc loc;
    if (read_name(ps, name, "a value name") != 0 || expect_char(ps, ':', "':' and a type") != 0 ||
        read_type(ps, &dt, &shape) != 0)
        return -1;
    int has_init = peek_key(ps, word, sizeof word) && strcmp(word, "init") == 0;
    if (role != ROLE_INPUT && !has_init)
        return expected(ps, "'init='");
    if (has_init) {
        const char *kinds =
            role == ROLE_INPUT ? "an input's init (dropout)" : "an init (none, zeros, ones, normal, uniform)";
        ps->p += 4;
        if (expect_char(ps, '=', "'='") != 0 || read_word(ps, word, kinds))
            return -1;
        if (ir_init_parse(word, &init.kind) != 0 || (role == ROLE_INPUT) != (init.kind == INIT_DROPOUT))
            return expected_tok(ps, kinds, word);
        if (init.kind == INIT_NORMAL || init.kind == INIT_UNIFORM || init.kind == INIT_DROPOUT)
            if (expect_char(ps, '(', "'(' and a number") != 0 || read_float(ps, "a number", &init.a) != 0 ||
                expect_char(ps, ')', "')'") != 0)
                return -1;
    }
    int frozen = role == ROLE_PARAM && word_len(ps) == 6 && strncmp(ps->p, "frozen", 6) == 0;
    if (frozen)
        ps->p += 6;
    int64_t offset = -1;
    if (read_offset(ps, &offset) != 0 || read_loc(ps, &loc) != 0 ||
        expect_end(ps, "'at=OFFSET', '@FILE:LINE' or end of line") != 0)
        return -1;
    int32_t v = define_value(ps, name, dt, role, &shape);
    if (v < 0)
        return -1;
    ps->g->values[v].offset = offset;
    ps->g->values[v].init = init;
    ps->g->values[v].frozen = frozen;
    ps->g->values[v].loc = loc;
    return 0;
}

/* key=VALUE for an attribute the op takes; the cursor is on the key. */
static int parse_attr(parser *ps, int32_t n, const char *key_text)
{
    ir_node *node = &ps->g->nodes[n];
    const op_def *d = &op_table[node->op];
    attr_key key;
    if (attr_key_parse(key_text, &key) != 0 || !op_attr_spec(node->op, key)) {
        char what[256] = "an attribute of ";
        strcat(what, d->name);
        strcat(what, d->n_attr_specs ? " (" : " (it takes none)");
        for (int i = 0; i < d->n_attr_specs; i++) {
            strcat(what, attr_key_name(d->attr_specs[i].key));
            strcat(what, i + 1 < d->n_attr_specs ? ", " : ")");
        }
        return expected_tok(ps, what, key_text);
    }
    if (ir_node_attr(node, key))
        return expected_tok(ps, "each attribute once", key_text);
    ps->p += strlen(key_text);
    if (expect_char(ps, '=', "'='") != 0)
        return -1;
    int rc;
    if (attr_key_type(key) == ATTR_FLOAT) {
        double f;
        if (read_float(ps, "a number", &f) != 0)
            return -1;
        rc = ir_node_set_float(ps->g, n, key, f);
    } else if (peek_char(ps, '[')) {
        ps->p++;
        int64_t v[IR_MAX_RANK];
        int count;
        if (read_int_list(ps, INT64_MIN, INT64_MAX, "an integer", "integers", v, &count) != 0)
            return -1;
        rc = ir_node_set_ints(ps->g, n, key, v, count);
    } else {
        int64_t v;
        if (read_int(ps, INT64_MIN, INT64_MAX, "an integer or '[' and a list", &v) != 0)
            return -1;
        rc = ir_node_set_int(ps->g, n, key, v);
    }
    if (rc != 0)
        return expected_tok(ps, "at most 6 attributes", key_text);
    return 0;
}

static const char *const annotation_keys[] = { "device", "stage", "phase", "time", "ws" };

static int annotation_index(const char *key)
{
    for (int k = 0; k < (int)(sizeof annotation_keys / sizeof annotation_keys[0]); k++)
        if (strcmp(key, annotation_keys[k]) == 0)
            return k;
    return -1;
}

/* device=N stage=N phase=NAME time=T ws=OFFSET, each at most once, in that order. */
static int parse_annotations(parser *ps, ir_node *node)
{
    static const char phases[] = "a phase (none, forward, backward, update)";
    char key[16], word[TOKEN_MAX];
    int64_t v;
    for (int next = 0; peek_key(ps, key, sizeof key);) { /* keys before next are done */
        int k = annotation_index(key);
        if (k < next)
            return expected_tok(ps,
                                next == 0 ? "an annotation (device, stage, phase, time, ws)"
                                          : "the annotations in the order device, stage, phase, time, ws, "
                                            "each once",
                                key);
        next = k + 1;
        ps->p += strlen(key);
        if (expect_char(ps, '=', "'='") != 0)
            return -1;
        if (k == 0 || k == 1) {
            if (read_int(ps, 0, INT32_MAX, k == 0 ? "a device number >= 0" : "a stage number >= 0", &v) != 0)
                return -1;
            *(k == 0 ? &node->device : &node->stage) = (int32_t)v;
        } else if (k == 2) {
            if (read_word(ps, word, phases) != 0)
                return -1;
            if (ir_phase_parse(word, &node->phase) != 0)
                return expected_tok(ps, phases, word);
        } else if (k == 4) {
            if (read_int(ps, 0, INT64_MAX, "a scratch offset >= 0", &v) != 0)
                return -1;
            node->ws_offset = v;
        } else {
            const char *at = ps->p;
            if (read_float(ps, "a time in seconds", &node->est_time) != 0)
                return -1;
            if (!(node->est_time >= 0)) {
                ps->p = at;
                return expected(ps, "a time >= 0");
            }
        }
    }
    return 0;
}

/* -> OUT : TYPE ROLE?, OUT : TYPE ROLE?, ...   or, when `own_name` is
 * given, the one output named like the node:  : TYPE ROLE? */
static int parse_outputs(parser *ps, int32_t n, const char *own_name)
{
    for (;;) {
        char name[TOKEN_MAX], word[TOKEN_MAX];
        ir_dtype dt;
        ir_shape shape;
        ir_role role = ROLE_ACTIVATION;
        if (ps->g->nodes[n].n_out == IR_MAX_OUT)
            return expected(ps, "the end of the outputs (at most 4)");
        if (own_name)
            snprintf(name, sizeof name, "%s", own_name);
        if ((!own_name && read_name(ps, name, "an output name") != 0) || expect_char(ps, ':', "':' and a type") != 0 ||
            read_type(ps, &dt, &shape) != 0)
            return -1;
        if (word_len(ps) > 0 && !peek_key(ps, word, sizeof word)) { /* a word, not key= */
            if (read_word(ps, word, "a role") != 0)
                return -1;
            if (ir_role_parse(word, &role) != 0)
                return expected_tok(ps, "a role (activation, gradient), an annotation, '@' or ','", word);
        }
        int64_t offset;
        if (read_offset(ps, &offset) != 0)
            return -1;
        int32_t v = define_value(ps, name, dt, role, &shape);
        if (v < 0)
            return -1;
        ps->g->values[v].offset = offset;
        if (ir_node_add_output(ps->g, n, v) != 0)
            return out_of_memory(ps);
        if (own_name || !peek_char(ps, ','))
            return 0;
        ps->p++;
    }
}

/* "expected an op (embedding, positions, ...), found ..." */
static int expected_op(parser *ps, const char *found)
{
    char what[1024];
    size_t used = (size_t)snprintf(what, sizeof what, "an op (");
    for (int k = 0; k < OP_COUNT && used < sizeof what; k++)
        used +=
            (size_t)snprintf(what + used, sizeof what - used, "%s%s", op_table[k].name, k + 1 < OP_COUNT ? ", " : ")");
    return found ? expected_tok(ps, what, found) : expected(ps, what);
}

/* node NAME = OP(IN, ...) ATTRS -> OUTS ANNOT @LOC */
static int parse_node(parser *ps)
{
    char name[TOKEN_MAX], word[TOKEN_MAX];
    if (read_name(ps, name, "a node name") != 0)
        return -1;
    int64_t first;
    char buf[200];
    if (name_map_get(ps->nodes, name, &first))
        return diag_set(ps->err, ps->file, ps->line, "node '%s' is already defined on line %d", shown(name, buf),
                        (int)first);
    ir_op op;
    if (expect_char(ps, '=', "'=' after the node name") != 0)
        return -1;
    if (word_len(ps) == 0)
        return expected_op(ps, NULL);
    if (read_word(ps, word, "an op") != 0)
        return -1;
    if (op_parse(word, &op) != 0)
        return expected_op(ps, word);
    int32_t n = ir_add_node(ps->g, op, name, (ir_loc){ 0, 0 });
    if (n < 0 || name_map_add(ps->nodes, name, ps->line) != 0)
        return out_of_memory(ps);
    if (expect_char(ps, '(', "'(' and the inputs") != 0)
        return -1;
    for (int32_t v; !peek_char(ps, ')');) {
        int n_in = ps->g->nodes[n].n_in;
        if (n_in > 0 && expect_char(ps, ',', "',' or ')' after an input") != 0)
            return -1;
        if (n_in == IR_MAX_IN)
            return expected(ps, "')' (at most 8 inputs)");
        if (read_name(ps, word, "an input value name") != 0 || (v = lookup_value(ps, word)) < 0)
            return -1;
        ir_node_add_input(ps->g, n, v); /* cannot fail: v and n_in are checked */
    }
    ps->p++;
    char key[64]; /* key= before "->" or an annotation: an attribute */
    while (!peek_arrow(ps) && peek_key(ps, key, sizeof key) && annotation_index(key) < 0)
        if (parse_attr(ps, n, key) != 0)
            return -1;
    if (peek_arrow(ps)) {
        ps->p += 2;
        if (parse_outputs(ps, n, NULL) != 0)
            return -1;
    } else if (peek_char(ps, ':')) {
        if (parse_outputs(ps, n, name) != 0)
            return -1;
    }
    ir_loc loc;
    ir_node *node = &ps->g->nodes[n];
    if (parse_annotations(ps, node) != 0 || read_loc(ps, &loc) != 0 ||
        expect_end(ps, node->n_out ? "',', an annotation, '@FILE:LINE' or end of line"
                                   : "an attribute, '->', an annotation, '@FILE:LINE' or end of line") != 0)
        return -1;
    node->loc = loc;
    for (int i = 0; i < node->n_out; i++)
        ps->g->values[node->out[i]].loc = loc;
    return 0;
}

/* hyper NAME = INT | FLOAT */
static int parse_hyper(parser *ps)
{
    char name[TOKEN_MAX], num[64];
    if (read_name(ps, name, "a hyper-parameter name") != 0 || expect_char(ps, '=', "'='") != 0)
        return -1;
    size_t n = number_token(ps, num, sizeof num);
    int64_t i;
    double f;
    int rc;
    if (n && strpbrk(num, ".eEnN")) {
        if (parse_float_text(num, &f) != 0)
            return expected(ps, "a number");
        rc = ir_add_hyper_float(ps->g, name, f);
    } else {
        if (n == 0 || parse_int_text(num, INT64_MIN, INT64_MAX, &i) != 0)
            return expected(ps, "a number (an integer, or a float with '.' or 'e')");
        rc = ir_add_hyper_int(ps->g, name, i);
    }
    ps->p += n;
    if (rc < 0)
        return out_of_memory(ps);
    return expect_end(ps, "end of line after the number");
}

#define TEXT_OF(x)       #x
#define DIGITS_OF(x)     TEXT_OF(x)
#define MAX_DEVICES_TEXT DIGITS_OF(IR_MAX_STAGE_DEVICES) /* "1024" */

/* KEY= at the cursor, KEY the one expected next. */
static int expect_key(parser *ps, const char *key)
{
    char found[32], what[64];
    snprintf(what, sizeof what, "'%s='", key);
    if (!peek_key(ps, found, sizeof found))
        return expected(ps, what);
    if (strcmp(found, key) != 0)
        return expected_tok(ps, what, found); /* the other key, without its value */
    ps->p += strlen(key);
    return expect_char(ps, '=', "'='");
}

/* Does the rest of the line start with key (as "warmup=")? */
static int starts_with_key(parser *ps, const char *key)
{
    size_t n = strlen(key);
    return !at_end(ps) && (size_t)(ps->end - ps->p) >= n && strncmp(ps->p, key, n) == 0;
}

/* key=[v,...]: one value a stage, each from 0 to hi (0 where only[s] is 0:
 * "keep 0 (the stage does not recompute)"); nouns name the list ("each
 * stage's <all>") and one value ("<one>"), range what a value may be. */
static int read_stage_list(parser *ps, const char *key, const char *all, const char *one, int64_t stages, int64_t hi,
                           const char *range, const uint8_t *only, int32_t *out)
{
    char what[160];
    snprintf(what, sizeof what, "'[' and each stage's %s", all);
    if (expect_key(ps, key) != 0 || expect_char(ps, '[', what) != 0)
        return -1;
    for (int32_t s = 0; s < stages; s++) {
        int64_t v;
        snprintf(what, sizeof what, "',' and %d more %s%s (one a stage)", (int)(stages - s), one,
                 stages - s == 1 ? "" : "s");
        if (s > 0 && !peek_char(ps, ','))
            return expected(ps, what);
        if (s > 0)
            ps->p++;
        int none = only && !only[s];
        if (read_int(ps, 0, none ? 0 : hi, none ? "keep 0 (the stage does not recompute)" : range, &v) != 0)
            return -1;
        out[s] = (int32_t)v;
    }
    snprintf(what, sizeof what, "']' after one %s a stage", one);
    return expect_char(ps, ']', what);
}

/* placement stages=S replicas=R micro_batches=M devices=[D,D,...] [warmup=[W,...]] [recompute=[0|1,...]]
 *   [keep=[K,...]]
 * Everything ir_graph_set_placement would refuse is named here, at this
 * line; that the nodes' stages fit is the verifier's to say, at the node. */
static int parse_placement(parser *ps)
{
    ir_graph *g = ps->g;
    if (g->placement.n_stages || g->n_hypers || g->n_values || g->n_nodes)
        return diag_set(ps->err, ps->file, ps->line,
                        "'placement' must come once, after 'model' (and 'after'), "
                        "before any hyper, source or node");
    int64_t stages, replicas, micro;
    if (expect_key(ps, "stages") != 0 ||
        read_int(ps, 1, IR_MAX_STAGE_DEVICES, "a stage count from 1 to " MAX_DEVICES_TEXT, &stages) != 0 ||
        expect_key(ps, "replicas") != 0 ||
        read_int(ps, 1, IR_MAX_STAGE_DEVICES, "a replica count from 1 to " MAX_DEVICES_TEXT, &replicas) != 0)
        return -1;
    if (stages * replicas > IR_MAX_STAGE_DEVICES)
        return diag_set(ps->err, ps->file, ps->line,
                        "expected at most %d devices in a placement "
                        "(stages x replicas), found %lld x %lld = %lld",
                        IR_MAX_STAGE_DEVICES, (long long)stages, (long long)replicas, (long long)(stages * replicas));
    if (expect_key(ps, "micro_batches") != 0 || read_int(ps, 1, INT32_MAX, "a micro-batch count >= 1", &micro) != 0 ||
        expect_key(ps, "devices") != 0 || expect_char(ps, '[', "'[' and the device list") != 0)
        return -1;
    int32_t n = (int32_t)(stages * replicas), devices[IR_MAX_STAGE_DEVICES];
    char what[160];
    for (int32_t i = 0; i < n; i++) {
        int64_t d;
        if (i > 0 && !peek_char(ps, ',')) {
            snprintf(what, sizeof what, "',' and %d more device%s (stages x replicas = %lld x %lld = %d)", (int)(n - i),
                     n - i == 1 ? "" : "s", (long long)stages, (long long)replicas, (int)n);
            return expected(ps, what);
        }
        if (i > 0)
            ps->p++;
        if (read_int(ps, 0, INT32_MAX, "a device index >= 0", &d) != 0)
            return -1;
        for (int32_t j = 0; j < i; j++)
            if (devices[j] == d)
                return diag_set(ps->err, ps->file, ps->line,
                                "device %lld is in the placement twice: stage %d "
                                "replica %d, and stage %d replica %d",
                                (long long)d, (int)(j / replicas), (int)(j % replicas), (int)(i / replicas),
                                (int)(i % replicas));
        devices[i] = (int32_t)d;
    }
    snprintf(what, sizeof what, "']' after %d devices (stages x replicas = %lld x %lld)", (int)n, (long long)stages,
             (long long)replicas);
    if (expect_char(ps, ']', what) != 0)
        return -1;
    int32_t warmup[IR_MAX_STAGE_DEVICES], keep[IR_MAX_STAGE_DEVICES], recompute32[IR_MAX_STAGE_DEVICES];
    uint8_t recompute[IR_MAX_STAGE_DEVICES];
    int has_warmup = starts_with_key(ps, "warmup=");
    if (has_warmup && read_stage_list(ps, "warmup", "warm-up forwards", "warm-up count", stages, micro,
                                      "a warm-up count from 0 to the micro-batches", NULL, warmup) != 0)
        return -1;
    int has_recompute = starts_with_key(ps, "recompute=");
    if (has_recompute && read_stage_list(ps, "recompute", "recompute flag", "recompute flag", stages, 1,
                                         "a recompute flag, 0 or 1", NULL, recompute32) != 0)
        return -1;
    for (int32_t s = 0; has_recompute && s < stages; s++)
        recompute[s] = (uint8_t)recompute32[s];
    int has_keep = has_recompute && starts_with_key(ps, "keep=");
    if (has_keep && read_stage_list(ps, "keep", "whole-kept micro-batches", "keep count", stages, micro,
                                    "a keep count from 0 to the micro-batches", recompute, keep) != 0)
        return -1;
    if (expect_end(ps, has_keep        ? "end of line after the keep list"
                       : has_recompute ? "end of line after the recompute list"
                       : has_warmup    ? "end of line after the warm-up list"
                                       : "end of line after the device list") != 0)
        return -1;
    if (ir_graph_set_placement(g, (int32_t)stages, (int32_t)replicas, (int32_t)micro, devices) != 0)
        return out_of_memory(ps); /* everything else it checks is checked above */
    if (has_warmup && ir_graph_set_warmup(g, warmup) != 0)
        return diag_set(ps->err, ps->file, ps->line,
                        "warmup: a stage warms up less than the next stage's + 1 "
                        "(it would wait for a backward that waits for its own forward)");
    if ((has_recompute && ir_graph_set_recompute(g, recompute) != 0) || (has_keep && ir_graph_set_keep(g, keep) != 0))
        return out_of_memory(ps); /* the flags and counts are checked above */
    return 0;
}

/* "precision DTYPE [tf32]": once, before the placement and any source. */
static int parse_precision(parser *ps)
{
    ir_graph *g = ps->g;
    char word[TOKEN_MAX];
    if (g->precision != DT_F32 || g->tf32 || g->placement.n_stages || g->n_hypers || g->n_values)
        return diag_set(ps->err, ps->file, ps->line,
                        "'precision' must come once, after 'model' (and 'after'), "
                        "before the placement and any source");
    if (read_word(ps, word, "a precision (f32, bf16 or f16)") != 0)
        return -1;
    ir_dtype dt;
    if (ir_dtype_parse(word, &dt) != 0 || dt == DT_I32)
        return expected_tok(ps, "a precision (f32, bf16 or f16)", word);
    g->precision = dt;
    if (at_end(ps))
        return expect_end(ps, "end of line after the precision");
    if (read_word(ps, word, "'tf32' or the end of the line") != 0)
        return -1;
    if (strcmp(word, "tf32") != 0 || dt != DT_F32)
        return expected_tok(
            ps, dt == DT_F32 ? "'tf32' or the end of the line" : "the end of the line (tf32 is for f32)", word);
    g->tf32 = 1;
    return expect_end(ps, "end of line after 'tf32'");
}

/* One non-blank line; *stage: 0 before "fusion-ir 1", 1 before "model", 2 after. */
static int parse_line(parser *ps, int *stage)
{
    char word[TOKEN_MAX];
    if (*stage == 0) {
        int64_t version;
        if (read_word(ps, word, "'fusion-ir 1' (the first line of a fusion IR file)") != 0)
            return -1;
        if (strcmp(word, "fusion-ir") != 0)
            return expected_tok(ps, "'fusion-ir 1' (the first line of a fusion IR file)", word);
        if (read_int(ps, INT64_MIN, INT64_MAX, "a version number", &version) != 0)
            return -1;
        if (version != 1)
            return diag_set(ps->err, ps->file, ps->line, "expected version 1, found version %lld", (long long)version);
        *stage = 1;
        return expect_end(ps, "end of line after the version");
    }
    if (read_word(ps, word,
                  *stage == 1
                      ? "'model'"
                      : "'hyper', 'input', 'param', 'state', 'node', 'loss', 'output' or 'prefill_output'") != 0)
        return -1;
    if (*stage == 1) {
        if (strcmp(word, "model") != 0)
            return expected_tok(ps, "'model' and the model name", word);
        if (read_name(ps, word, "a model name") != 0 || expect_end(ps, "end of line after the model name") != 0)
            return -1;
        if ((ps->g->name = ir_intern(ps->g, word)) == IR_STR_NONE)
            return out_of_memory(ps);
        *stage = 2;
        return 0;
    }
    if (strcmp(word, "after") == 0) {
        if (ps->g->after_pass || ps->g->placement.n_stages || ps->g->n_hypers || ps->g->n_values)
            return diag_set(ps->err, ps->file, ps->line, "'after PASS' must come once, right after 'model'");
        if (read_name(ps, word, "a pass name") != 0 || expect_end(ps, "end of line after the pass name") != 0)
            return -1;
        if ((ps->g->after_pass = ir_intern(ps->g, word)) == IR_STR_NONE)
            return out_of_memory(ps);
        return 0;
    }
    if (strcmp(word, "precision") == 0)
        return parse_precision(ps);
    if (strcmp(word, "placement") == 0)
        return parse_placement(ps);
    if (strcmp(word, "node") == 0)
        return parse_node(ps);
    if (strcmp(word, "input") == 0)
        return parse_source(ps, ROLE_INPUT);
    if (strcmp(word, "param") == 0)
        return parse_source(ps, ROLE_PARAM);
    if (strcmp(word, "state") == 0)
        return parse_source(ps, ROLE_STATE);
    if (strcmp(word, "hyper") == 0)
        return parse_hyper(ps);
    if (strcmp(word, "loss") == 0) {
        if (ps->g->loss >= 0)
            return expected_tok(ps, "one 'loss' line", "loss");
        int32_t v;
        if (read_name(ps, word, "the loss value name") != 0 || (v = lookup_value(ps, word)) < 0)
            return -1;
        ps->g->loss = v;
        return expect_end(ps, "end of line after the loss name");
    }
    if (strcmp(word, "output") == 0) {
        if (ps->g->output >= 0)
            return expected_tok(ps, "one 'output' line", "output");
        int32_t v;
        if (read_name(ps, word, "the output value name") != 0 || (v = lookup_value(ps, word)) < 0)
            return -1;
        ps->g->output = v;
        return expect_end(ps, "end of line after the output name");
    }
    if (strcmp(word, "prefill_output") == 0) {
        if (ps->g->prefill_output >= 0)
            return expected_tok(ps, "one 'prefill_output' line", "prefill_output");
        int32_t v;
        if (read_name(ps, word, "the prefill output value name") != 0 || (v = lookup_value(ps, word)) < 0)
            return -1;
        ps->g->prefill_output = v;
        return expect_end(ps, "end of line after the prefill output name");
    }
    return expected_tok(ps, "'hyper', 'input', 'param', 'state', 'node', 'loss', 'output' or 'prefill_output'", word);
}

int ir_graph_parse(const char *text, size_t len, const char *filename, ir_graph *g, struct diag *err)
{
    ir_graph_init(g);
    parser ps = {
        .file = filename ? filename : "<text>", .err = err, .g = g, .values = name_map_new(), .nodes = name_map_new()
    };
    int rc = 0, stage = 0;
    if (!ps.values || !ps.nodes)
        rc = out_of_memory(&ps);
    const char *p = text, *end = text ? text + len : text;
    while (rc == 0 && p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        if (ps.line == INT_MAX) {
            rc = diag_set(err, ps.file, ps.line, "expected at most %d lines, found more", INT_MAX);
            break;
        }
        ps.line++;
        ps.p = p;
        ps.end = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        p = eol < end ? eol + 1 : end;
        if (at_end(&ps) || *ps.p == '#')
            continue;
        rc = parse_line(&ps, &stage);
    }
    if (rc == 0 && stage < 2)
        rc = diag_set(err, ps.file, ps.line, "expected %s, found end of file",
                      stage == 0 ? "'fusion-ir 1' (the first line of a fusion IR file)" : "'model' and the model name");
    if (rc == 0) {
        g->source = ir_intern(g, ps.file);
        if (g->source == IR_STR_NONE)
            rc = out_of_memory(&ps);
    }
    name_map_free(ps.values);
    name_map_free(ps.nodes);
    if (rc == 0)
        rc = ir_graph_verify(g, err);
    if (rc != 0)
        ir_graph_free(g);
    return rc;
}
