/* print.c: ir_graph_print, the text form of a graph, for people first.
 *
 * One item a line, '\n' endings, no trailing spaces; parse.c reads it back
 * and print(parse(print(g))) is byte-identical to print(g).
 *
 *   fusion-ir 1
 *   model NAME
 *   after PASS                  (the last pass run; absent before any pass)
 *   precision DTYPE [tf32]      (the precision pass's choice; absent for f32
 *                               without tf32, the default)
 *   placement stages=S replicas=R micro_batches=M devices=[D,D,...]
 *                               (the stage -> device plan, ir_placement; absent
 *                               until placed: S*R device indices, stage 0's
 *                               replicas first; the keys in this order), then
 *                               warmup=[W,...] when the schedule pass set each
 *                               stage's warm-up forwards, then recompute=[0|1,...]
 *                               when it has a stage run its forward again, then
 *                               keep=[K,...] when such a stage keeps K waiting
 *                               micro-batches whole (ir_placement.keep)
 *   hyper NAME = VALUE                               one per hyper, in order
 *   input NAME : DTYPE[SHAPE] @FILE:LINE             every source, in value order
 *   param NAME : DTYPE[SHAPE] init=INIT [frozen] @FILE:LINE
 *   state NAME : DTYPE[SHAPE] init=INIT @FILE:LINE
 *   node NAME = OP(IN, IN, ...) ATTRS -> OUT : DTYPE[SHAPE] ROLE?, ... ANNOT @FILE:LINE
 *   node NAME = OP(IN, IN, ...) ATTRS : DTYPE[SHAPE] ROLE? ANNOT @FILE:LINE
 *     (the second form: one output, named like the node; the usual case)
 *   loss NAME                                        when the graph has one
 *   output NAME                                      an inference graph's result
 *   prefill_output NAME                              ... and its prompt chunk's (the prefill pass)
 *
 *   SHAPE   dims joined by ',' ("4,64,768"), empty for a scalar, '?' unknown
 *   INIT    none | zeros | ones | normal(A) | uniform(A)
 *   ATTRS   " key=V" each, in node order: V an integer, "[a,b,c]", or a float
 *   ROLE    " gradient" (any role but activation) after an output's type
 *   ANNOT   " device=N stage=N phase=NAME time=T", only those that are set
 *   " -> OUTS" is left out for a node without outputs, " @FILE:LINE" for a
 *   node or source without a location.
 *
 * Names and FILE are bare when they are all of [A-Za-z0-9_.:/-], otherwise
 * double-quoted with \" \\ \n and \xHH escapes.  Floats are %.9g; a float
 * hyper or attribute that would read as an integer gets ".0" appended.
 *
 * Example:
 *   node h.0.ln1 = layernorm(h.0.x, h.0.ln1.w, h.0.ln1.b) eps=1e-05 -> h.0.ln1.out : f32[4,64,768] phase=forward @models/gpt2.xml:40
 *   node h.0.ln_1 = layernorm(x0, h.0.ln_1.w, h.0.ln_1.b) eps=1e-05 : f32[4,64,768] @models/gpt2.xml:42
 *
 * Printing an invalid graph never crashes: out-of-range indices print as
 * quoted placeholders ("<value #99>") that the parser will then reject.
 */
#include "ir.h"

#include <string.h>

#include "ops.h"

/* A name bare when it can be, quoted otherwise. */
static void put_name(FILE *out, const char *s)
{
    int bare = *s != '\0';
    for (const char *p = s; *p && bare; p++)
        bare = ir_name_char((unsigned char)*p);
    if (bare) {
        fputs(s, out);
        return;
    }
    putc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            putc(*p, out);
    }
    putc('"', out);
}

static void put_value_name(FILE *out, const ir_graph *g, int32_t v)
{
    if (v >= 0 && v < g->n_values) {
        put_name(out, ir_str(g, g->values[v].name));
        return;
    }
    char buf[40];
    snprintf(buf, sizeof buf, "<value #%d>", v);
    put_name(out, buf);
}

/* %.9g, with ".0" appended when that would read as an integer. */
static void put_float_marked(FILE *out, double f)
{
    char buf[40];
    snprintf(buf, sizeof buf, "%.9g", f);
    fputs(buf, out);
    if (!strpbrk(buf, ".en")) /* 'e': exponent, 'n': inf and nan */
        fputs(".0", out);
}

static void put_type(FILE *out, ir_dtype dt, const ir_shape *s)
{
    char buf[256];
    fprintf(out, "%s%s", ir_dtype_name(dt), ir_shape_str(s, buf, sizeof buf));
}

static void put_loc(FILE *out, const ir_graph *g, ir_loc loc)
{
    if (loc.file == 0)
        return;
    fputs(" @", out);
    put_name(out, ir_str(g, loc.file));
    fprintf(out, ":%d", (int)loc.line);
}

static void put_source(FILE *out, const ir_graph *g, int32_t v)
{
    const ir_value *val = &g->values[v];
    fprintf(out, "%s ", ir_role_name(val->role));
    put_value_name(out, g, v);
    fputs(" : ", out);
    put_type(out, val->dtype, &val->shape);
    if (val->role != ROLE_INPUT || val->init.kind == INIT_DROPOUT) {
        fprintf(out, " init=%s", ir_init_name(val->init.kind));
        if (val->init.kind == INIT_NORMAL || val->init.kind == INIT_UNIFORM || val->init.kind == INIT_DROPOUT)
            fprintf(out, "(%.9g)", val->init.a);
    }
    if (val->role == ROLE_PARAM && val->frozen)
        fputs(" frozen", out);
    if (val->offset >= 0)
        fprintf(out, " at=%lld", (long long)val->offset);
    put_loc(out, g, val->loc);
    putc('\n', out);
}

static void put_attr(FILE *out, const ir_attr *a)
{
    fprintf(out, " %s=", attr_key_name(a->key));
    if (attr_key_type(a->key) == ATTR_FLOAT) {
        put_float_marked(out, a->f);
        return;
    }
    int n = a->n < 0 ? 0 : a->n > IR_MAX_RANK ? IR_MAX_RANK : a->n;
    if (n == 1) {
        fprintf(out, "%lld", (long long)a->i[0]);
        return;
    }
    putc('[', out);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%lld", i ? "," : "", (long long)a->i[i]);
    putc(']', out);
}

static int clamp(int n, int max) { return n < 0 ? 0 : n > max ? max : n; }

static void put_node(FILE *out, const ir_graph *g, int32_t n)
{
    const ir_node *node = &g->nodes[n];
    fputs("node ", out);
    put_name(out, ir_str(g, node->name));
    fprintf(out, " = %s(", (unsigned)node->op < OP_COUNT ? op_table[node->op].name : "?");
    for (int i = 0; i < clamp(node->n_in, IR_MAX_IN); i++) {
        if (i)
            fputs(", ", out);
        put_value_name(out, g, node->in[i]);
    }
    putc(')', out);
    for (int i = 0; i < clamp(node->n_attr, IR_MAX_ATTR); i++)
        put_attr(out, &node->attr[i]);
    int n_out = clamp(node->n_out, IR_MAX_OUT);
    /* The common case, one output named like its node, reads "node y = op(x) : f32[..]". */
    int named_like_node =
        n_out == 1 && node->out[0] >= 0 && node->out[0] < g->n_values && g->values[node->out[0]].name == node->name;
    for (int i = 0; i < n_out; i++) {
        int32_t v = node->out[i];
        if (!named_like_node) {
            fputs(i ? ", " : " -> ", out);
            put_value_name(out, g, v);
        }
        if (v < 0 || v >= g->n_values)
            continue;
        fputs(" : ", out);
        put_type(out, g->values[v].dtype, &g->values[v].shape);
        if (g->values[v].role != ROLE_ACTIVATION)
            fprintf(out, " %s", ir_role_name(g->values[v].role));
        if (g->values[v].offset >= 0)
            fprintf(out, " at=%lld", (long long)g->values[v].offset);
    }
    if (node->device >= 0)
        fprintf(out, " device=%d", (int)node->device);
    if (node->stage >= 0)
        fprintf(out, " stage=%d", (int)node->stage);
    if (node->phase != PHASE_NONE)
        fprintf(out, " phase=%s", ir_phase_name(node->phase));
    if (node->est_time >= 0)
        fprintf(out, " time=%.9g", node->est_time);
    if (node->ws_offset >= 0)
        fprintf(out, " ws=%lld", (long long)node->ws_offset);
    put_loc(out, g, node->loc);
    putc('\n', out);
}

/* Printed when placed, whatever it holds; a device array too short for its
 * counts (an invalid graph) prints what there is, for the parser to reject. */
static void put_placement(FILE *out, const ir_placement *p)
{
    if (p->n_stages <= 0)
        return;
    fprintf(out, "placement stages=%d replicas=%d micro_batches=%d devices=[", (int)p->n_stages, (int)p->n_replicas,
            (int)p->micro_batches);
    int64_t n = (int64_t)p->n_stages * p->n_replicas;
    for (int64_t i = 0; p->device && p->n_replicas > 0 && n <= IR_MAX_STAGE_DEVICES && i < n; i++)
        fprintf(out, "%s%d", i ? "," : "", (int)p->device[i]);
    putc(']', out);
    for (int32_t s = 0; p->warmup && p->n_stages <= IR_MAX_STAGE_DEVICES && s < p->n_stages; s++)
        fprintf(out, "%s%d", s ? "," : " warmup=[", (int)p->warmup[s]);
    if (p->warmup && p->n_stages <= IR_MAX_STAGE_DEVICES)
        putc(']', out);
    for (int32_t s = 0; p->recompute && p->n_stages <= IR_MAX_STAGE_DEVICES && s < p->n_stages; s++)
        fprintf(out, "%s%d", s ? "," : " recompute=[", (int)p->recompute[s]);
    if (p->recompute && p->n_stages <= IR_MAX_STAGE_DEVICES)
        putc(']', out);
    for (int32_t s = 0; p->keep && p->n_stages <= IR_MAX_STAGE_DEVICES && s < p->n_stages; s++)
        fprintf(out, "%s%d", s ? "," : " keep=[", (int)p->keep[s]);
    fputs(p->keep && p->n_stages <= IR_MAX_STAGE_DEVICES ? "]\n" : "\n", out);
}

int ir_graph_print(const ir_graph *g, FILE *out)
{
    fputs("fusion-ir 1\nmodel ", out);
    put_name(out, ir_str(g, g->name));
    putc('\n', out);
    if (g->after_pass) {
        fputs("after ", out);
        put_name(out, ir_str(g, g->after_pass));
        putc('\n', out);
    }
    if (g->precision != DT_F32 || g->tf32)
        fprintf(out, "precision %s%s\n", ir_dtype_name(g->precision), g->tf32 ? " tf32" : "");
    put_placement(out, &g->placement);
    for (int32_t h = 0; h < g->n_hypers; h++) {
        const ir_hyper *hy = &g->hypers[h];
        fputs("hyper ", out);
        put_name(out, ir_str(g, hy->name));
        fputs(" = ", out);
        if (hy->is_float)
            put_float_marked(out, hy->f);
        else
            fprintf(out, "%lld", (long long)hy->i);
        putc('\n', out);
    }
    for (int32_t v = 0; v < g->n_values; v++)
        if (g->values[v].producer == -1)
            put_source(out, g, v);
    for (int32_t n = 0; n < g->n_nodes; n++)
        put_node(out, g, n);
    if (g->loss >= 0) {
        fputs("loss ", out);
        put_value_name(out, g, g->loss);
        putc('\n', out);
    }
    if (g->output >= 0) {
        fputs("output ", out);
        put_value_name(out, g, g->output);
        putc('\n', out);
    }
    if (g->prefill_output >= 0) {
        fputs("prefill_output ", out);
        put_value_name(out, g, g->prefill_output);
        putc('\n', out);
    }
    return ferror(out) ? -1 : 0;
}
