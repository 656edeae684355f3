/* html.c: the graph as one self-contained HTML page, to look at in a
 * browser (view.h).
 *
 *   fusionc dump models/gpt2.xml --format html -o gpt2.html
 *
 * The page is html_view.html with html_view.css and html_view.js inlined
 * (embedded in the binary at build time, so the page needs no file beside
 * it and loads nothing from a network) and the graph as JSON in a
 * <script type="application/json" id="graph">.  The JS lays the visible
 * boxes out and draws them; this file only says what there is:
 *
 *   { "model": "gpt2", "after": "memory", "stage": -1, "expand": 0,
 *     "devices": [[d, "cpu-a0", "#8dd3c7", stage], ...],     devices the ops (and their
 *                                                             stage's replicas) run on
 *     "ops":     [[name, op, phase, device, stage, group,     group: -1 or an index in groups
 *                  [in values], [out values], flops, bytes,  forward cost (null: shapes unknown)
 *                  file, line, made_by, tensor], ...],       made_by: the pass that made it;
 *                                                             tensor: a send's or recv's message id, else -1
 *     "values":  [[name, dtype, shape, role, producer, group, from_stage], ...]
 *                                                             producer: an index in ops, or -1
 *                                                             (a source, or another stage's: from_stage >= 0)
 *     "groups":  [[prefix, is_source, phase or role, device, lo, hi, members], ...],
 *     "loss": value or -1 }
 *
 * Groups are view_groups.h's, always made (the page expands and collapses
 * them); "expand": 1 (--expand) starts with every group expanded.  With a
 * stage, only its ops are listed.  Strings are ASCII (other bytes become
 * '?') with '<', '>' and '&' escaped, so nothing in the data can end the
 * script element.
 */
#include "view.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "view_groups.h"

extern const unsigned char ir_html_view_html[], ir_html_view_css[], ir_html_view_js[];
extern const unsigned ir_html_view_html_len, ir_html_view_css_len, ir_html_view_js_len;

/* s as a JSON string. */
static void put_json(FILE *out, const char *s)
{
    putc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '<' || *p == '>' || *p == '&' || *p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else if (*p >= 0x7f)
            putc('?', out);
        else
            putc(*p, out);
    }
    putc('"', out);
}

/* A cost as JSON: null when not finite or not known. */
static void put_number(FILE *out, double x)
{
    if (isfinite(x) && x >= 0)
        fprintf(out, "%.15g", x);
    else
        fputs("null", out);
}

/* The pass that made node n, from what it is: passes do not record it, but
 * each kind of op has one maker. */
static const char *made_by(const ir_node *n)
{
    switch (n->op) {
    case OP_FILL:
    case OP_COPY:
        return "autodiff"; /* the loss seed; a gradient read by several consumers */
    case OP_SUM_SQUARES:
    case OP_CLIP_SCALE:
    case OP_LR_SCHEDULE:
    case OP_ADAMW:
    case OP_SGD:
        return "optimizer";
    case OP_SEND:
    case OP_RECV:
        return ir_node_attr(n, ATTR_DENSITY) || ir_node_attr(n, ATTR_BITS) ? "comm, compress" : "comm";
    case OP_ALLREDUCE:
    case OP_ALLGATHER:
        return "comm";
    default:
        return (unsigned)n->op < OP_COUNT && op_table[n->op].forward_of != OP_COUNT ? "autodiff" : "frontend";
    }
}

/* Are the shapes of every input and output of n known (the cost rules need
 * them: before the shapes pass they are not)? */
static int shapes_known(const ir_graph *g, const ir_node *n)
{
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] < 0 || n->in[i] >= g->n_values || g->values[n->in[i]].shape.rank < 0)
            return 0;
    for (int i = 0; i < n->n_out; i++)
        if (n->out[i] < 0 || n->out[i] >= g->n_values || g->values[n->out[i]].shape.rank < 0)
            return 0;
    return 1;
}

/* The stage of cluster device d in g's placement (-1: none). */
static int32_t device_stage(const ir_graph *g, int32_t d)
{
    const ir_placement *p = &g->placement;
    for (int32_t k = 0; k < p->n_stages * p->n_replicas; k++)
        if (p->device[k] == d)
            return k / p->n_replicas;
    return -1;
}

static void put_devices(const ir_view_groups *w, FILE *out)
{
    const ir_graph *g = w->g;
    int32_t max = -1;
    for (int32_t n = 0; n < g->n_nodes; n++)
        max = g->nodes[n].device > max ? g->nodes[n].device : max;
    for (int32_t k = 0; k < g->placement.n_stages * g->placement.n_replicas; k++)
        max = g->placement.device[k] > max ? g->placement.device[k] : max;
    char *used = calloc((size_t)max + 2, 1);
    for (int32_t n = 0; used && n < g->n_nodes; n++)
        if (g->nodes[n].device >= 0 && ir_view_visible(w, n))
            used[g->nodes[n].device] = 1;
    /* a stage's other replicas run the same ops: they are in the legend too */
    const ir_placement *p = &g->placement;
    for (int32_t k = 0; used && k < p->n_stages * p->n_replicas; k++)
        if (p->device[k] >= 0 && p->device[k] <= max && (w->o->stage < 0 || k / p->n_replicas == w->o->stage))
            used[p->device[k]] = 1;
    fputs("\"devices\":[", out);
    const char *sep = "";
    char name[64];
    for (int32_t d = 0; used && d <= max; d++) {
        if (!used[d])
            continue;
        const char *label = d < w->o->n_device_names && w->o->device_names ? w->o->device_names[d] : NULL;
        if (!label) {
            snprintf(name, sizeof name, "device %d", d);
            label = name;
        }
        fprintf(out, "%s[%d,", sep, d);
        put_json(out, label);
        fprintf(out, ",\"%s\",%d]", ir_view_device_colour(d), device_stage(g, d));
        sep = ",";
    }
    fputs("],\n", out);
    free(used);
}

static void put_ints(FILE *out, const int32_t *v, int n)
{
    putc('[', out);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%d", i ? "," : "", v[i]);
    putc(']', out);
}

/* The visible ops, numbered in the page 0, 1, ... (index[n]; -1: not drawn). */
static void put_ops(const ir_view_groups *w, const int32_t *index, FILE *out)
{
    const ir_graph *g = w->g;
    fputs("\"ops\":[\n", out);
    const char *sep = "";
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const ir_node *node = &g->nodes[n];
        if (index[n] < 0)
            continue;
        int known = (unsigned)node->op < OP_COUNT && shapes_known(g, node);
        const op_def *def = (unsigned)node->op < OP_COUNT ? &op_table[node->op] : NULL;
        fputs(sep, out);
        putc('[', out);
        put_json(out, ir_str(g, node->name));
        putc(',', out);
        put_json(out, def ? def->name : "?");
        fprintf(out, ",\"%s\",%d,%d,%d,", ir_phase_name(node->phase), node->device, node->stage, w->node_group[n]);
        put_ints(out, node->in, node->n_in < IR_MAX_IN ? node->n_in : IR_MAX_IN);
        putc(',', out);
        put_ints(out, node->out, node->n_out < IR_MAX_OUT ? node->n_out : IR_MAX_OUT);
        putc(',', out);
        put_number(out, known && def->flops_forward ? def->flops_forward(g, node) : NAN);
        putc(',', out);
        put_number(out, known && def->bytes_forward ? def->bytes_forward(g, node) : NAN);
        putc(',', out);
        put_json(out, node->loc.line > 0 ? ir_loc_file(g, node->loc) : "");
        int message = node->op == OP_SEND || node->op == OP_RECV;
        fprintf(out, ",%d,\"%s\",%lld]", node->loc.line, made_by(node),
                message ? (long long)ir_node_int(node, ATTR_TENSOR, -1) : -1LL);
        sep = ",\n";
    }
    fputs("],\n", out);
}

static void put_values(const ir_view_groups *w, const int32_t *index, FILE *out)
{
    const ir_graph *g = w->g;
    char shape[256];
    fputs("\"values\":[\n", out);
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        int32_t p = val->producer, from_stage = -1, producer = -1;
        if (p >= 0 && p < g->n_nodes) {
            producer = index[p];
            from_stage = producer < 0 ? g->nodes[p].stage : -1;
        }
        fputs(v ? ",\n[" : "[", out);
        put_json(out, ir_str(g, val->name));
        fprintf(out, ",\"%s\",\"%s\",\"%s\",%d,%d,%d]", ir_dtype_name(val->dtype),
                ir_shape_str(&val->shape, shape, sizeof shape), ir_role_name(val->role), producer, w->value_group[v],
                from_stage);
    }
    fputs("],\n", out);
}

static void put_groups(const ir_view_groups *w, FILE *out)
{
    fputs("\"groups\":[\n", out);
    for (int32_t k = 0; k < w->n_groups; k++) {
        const ir_view_group *q = &w->groups[k];
        fputs(k ? ",\n[" : "[", out);
        put_json(out, q->prefix);
        fprintf(out, ",%d,\"%s\",%d,%lld,%lld,%d]", q->is_source,
                q->is_source ? ir_role_name((ir_role)q->phase_or_role) : ir_phase_name((ir_phase)q->phase_or_role),
                q->device, (long long)q->lo, (long long)q->hi, q->members);
    }
    fputs("],\n", out);
}

static int put_graph(const ir_graph *g, const ir_view_options *o, FILE *out)
{
    /* grouped as collapsed: the page expands what --expand asks for */
    ir_view_options grouping = *o;
    grouping.expand = 0;
    ir_view_groups w;
    int32_t *index = malloc(((size_t)g->n_nodes + 1) * sizeof *index);
    int rc = ir_view_groups_init(&w, g, &grouping);
    if (rc == 0 && index) {
        int32_t k = 0;
        for (int32_t n = 0; n < g->n_nodes; n++)
            index[n] = ir_view_visible(&w, n) ? k++ : -1;
        fputs("{\"model\":", out);
        put_json(out, ir_str(g, g->name));
        fputs(",\"after\":", out);
        put_json(out, ir_str(g, g->after_pass)[0] ? ir_str(g, g->after_pass) : "frontend");
        fprintf(out, ",\"stage\":%d,\"expand\":%d,\n", o->stage, o->expand ? 1 : 0);
        put_devices(&w, out);
        put_ops(&w, index, out);
        put_values(&w, index, out);
        put_groups(&w, out);
        fprintf(out, "\"loss\":%d}\n", g->loss);
    }
    rc = rc || !index ? -1 : 0;
    free(index);
    ir_view_groups_free(&w);
    return rc;
}

/* Write the template, each "<!--@NAME@-->" replaced: STYLE, SCRIPT, GRAPH
 * and TITLE. */
int ir_graph_print_html(const ir_graph *g, const ir_view_options *o, FILE *out)
{
    const char *t = (const char *)ir_html_view_html, *end = t + ir_html_view_html_len;
    int rc = 0;
    while (t < end && rc == 0) {
        const char *mark = strstr(t, "<!--@");
        const char *close = mark ? strstr(mark + 5, "@-->") : NULL;
        if (!mark || !close) {
            fwrite(t, 1, (size_t)(end - t), out);
            break;
        }
        fwrite(t, 1, (size_t)(mark - t), out);
        size_t len = (size_t)(close - (mark + 5));
        const char *name = mark + 5;
        if (len == 5 && strncmp(name, "STYLE", 5) == 0)
            fwrite(ir_html_view_css, 1, ir_html_view_css_len, out);
        else if (len == 6 && strncmp(name, "SCRIPT", 6) == 0)
            fwrite(ir_html_view_js, 1, ir_html_view_js_len, out);
        else if (len == 5 && strncmp(name, "GRAPH", 5) == 0)
            rc = put_graph(g, o, out);
        else if (len == 5 && strncmp(name, "TITLE", 5) == 0) {
            const char *after = ir_str(g, g->after_pass);
            char title[512];
            snprintf(title, sizeof title, "%s after %s%s", ir_str(g, g->name), after[0] ? after : "frontend",
                     g->placement.n_stages ? " (placed)" : "");
            for (char *c = title; *c; c++) /* names are [A-Za-z0-9_.:/-]: nothing to escape but to be sure */
                if (*c == '<' || *c == '>' || *c == '&' || (unsigned char)*c >= 0x7f)
                    *c = '?';
            fputs(title, out);
        }
        t = close + 4;
    }
    return rc || ferror(out) ? -1 : 0;
}
