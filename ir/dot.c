/* dot.c: ir_graph_print_dot, the graph as a Graphviz digraph, to look at.
 *
 *   dot -Tsvg graph.dot -o graph.svg
 *
 * Sources are ellipses (params light gray, inputs light blue, state light
 * yellow); ops are boxes labelled "name\nop", filled by device from a cycle
 * of twelve pastel colours (white when not placed yet).  Each edge goes from
 * the producer (or source) to the consumer and is labelled with the shape of
 * the value it carries.  The loss, when there is one, gets a box of its own.
 *
 * It is a picture, not a format: nothing reads it back.  Labels keep ASCII
 * only (other bytes become '?'), so dot never sees invalid UTF-8.
 */
#include "ir.h"

#include "ops.h"

static const char *const device_colours[] = {
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
    "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
};
#define N_DEVICE_COLOURS (int)(sizeof device_colours / sizeof device_colours[0])

/* s inside a DOT double-quoted string. */
static void put_escaped(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p < 0x20 || *p >= 0x7f)
            putc('?', out);
        else
            putc(*p, out);
    }
}

static const char *source_colour(ir_role r)
{
    return r == ROLE_PARAM ? "lightgray" : r == ROLE_INPUT ? "lightblue" : "lightyellow";
}

/* The DOT node a value comes from: its producer, or its own source ellipse. */
static void put_origin(FILE *out, const ir_graph *g, int32_t v)
{
    int32_t p = g->values[v].producer;
    if (p >= 0 && p < g->n_nodes)
        fprintf(out, "n%d", p);
    else
        fprintf(out, "v%d", v);
}

static void put_edge(FILE *out, const ir_graph *g, int32_t v, const char *to)
{
    char shape[256];
    fputs("  ", out);
    put_origin(out, g, v);
    fprintf(out, " -> %s [label=\"%s\"];\n", to, ir_shape_str(&g->values[v].shape, shape, sizeof shape));
}

int ir_graph_print_dot(const ir_graph *g, FILE *out)
{
    fputs("digraph \"", out);
    put_escaped(out, ir_str(g, g->name));
    fputs("\" {\n  rankdir=TB;\n  labelloc=t;\n  label=\"", out);
    put_escaped(out, ir_str(g, g->name));
    fputs("\";\n  node [fontname=\"Helvetica\", fontsize=10];\n"
          "  edge [fontname=\"Helvetica\", fontsize=8];\n", out);

    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        if (val->producer >= 0 && val->producer < g->n_nodes)
            continue;
        fprintf(out, "  v%d [shape=ellipse, style=filled, fillcolor=\"%s\", label=\"", v,
                source_colour(val->role));
        put_escaped(out, ir_str(g, val->name));
        fputs("\"];\n", out);
    }
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const ir_node *node = &g->nodes[n];
        const char *fill = node->device >= 0 ? device_colours[node->device % N_DEVICE_COLOURS] : "white";
        fprintf(out, "  n%d [shape=box, style=filled, fillcolor=\"%s\", label=\"", n, fill);
        put_escaped(out, ir_str(g, node->name));
        fputs("\\n", out);
        put_escaped(out, (unsigned)node->op < OP_COUNT ? op_table[node->op].name : "?");
        fputs("\"];\n", out);
    }
    char to[32];
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const ir_node *node = &g->nodes[n];
        snprintf(to, sizeof to, "n%d", n);
        for (int i = 0; i < node->n_in && i < IR_MAX_IN; i++)
            if (node->in[i] >= 0 && node->in[i] < g->n_values)
                put_edge(out, g, node->in[i], to);
    }
    if (g->loss >= 0 && g->loss < g->n_values) {
        fputs("  loss [shape=box, style=\"rounded,bold\", label=\"loss\\n", out);
        put_escaped(out, ir_str(g, g->values[g->loss].name));
        fputs("\"];\n", out);
        put_edge(out, g, g->loss, "loss");
    }
    fputs("}\n", out);
    return ferror(out) ? -1 : 0;
}
