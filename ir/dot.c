/* dot.c: the graph as a Graphviz digraph, to look at (view.h).
 *
 *   dot -Tsvg graph.dot -o graph.svg
 *
 * Sources are ellipses (params light gray, inputs light blue, state light
 * yellow); ops are boxes labelled "name\nop", filled by device from a cycle
 * of twelve pastel colours (white when not placed yet).  Each edge goes from
 * the producer (or source) to the consumer and is labelled with the shape of
 * the value it carries.  The loss, when there is one, gets a box of its own.
 *
 * Collapsed (the default): the ops of a repeated block (blocks.h: h.0 ...
 * h.11) that share a phase and a device are one box, "h.0-11 forward" with
 * its count of blocks and ops, its parameters one ellipse, and the edges
 * between two boxes one edge labelled with how many values it stands for.
 * GPT-2 small after every pass is then 47 shapes, which dot lays out in a
 * tenth of a second; expanded it is about a thousand, and its edges took
 * dot minutes.  With a stage, only its ops are drawn (placed, what they
 * read from other stages comes through their receives; a value of
 * another stage read directly is a dashed ellipse naming the stage).
 *
 * It is a picture, not a format: nothing reads it back.  Labels keep ASCII
 * only (other bytes become '?'), so dot never sees invalid UTF-8.
 */
#include "view.h"

#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "view_groups.h"

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

/* The groups (view_groups.h) and the edges between the boxes. */
typedef struct {
    ir_view_groups gr;
    /* edges, deduplicated: key (from, to) -> count and the first value */
    uint64_t *keys;
    int32_t *counts, *first_value;
    size_t cap_edges;
} view;

static int visible(const view *w, int32_t n) { return ir_view_visible(&w->gr, n); }

/* The DOT id of where value v comes from, as seen by this view. */
static void origin_id(const view *w, int32_t v, char *id, size_t size)
{
    int32_t p = w->gr.g->values[v].producer;
    if (p >= 0 && p < w->gr.g->n_nodes && visible(w, p)) {
        if (w->gr.node_group[p] >= 0)
            snprintf(id, size, "g%d", w->gr.node_group[p]);
        else
            snprintf(id, size, "n%d", p);
    } else if (w->gr.value_group[v] >= 0) {
        snprintf(id, size, "g%d", w->gr.value_group[v]);
    } else {
        snprintf(id, size, "v%d", v);
    }
}

/* The table holds twice the edges there can be (print_edges sizes it):
 * a probe always ends. */
static void edge_add(view *w, uint64_t key, int32_t v)
{
    size_t at = (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) % w->cap_edges;
    while (w->counts[at] && w->keys[at] != key)
        at = (at + 1) % w->cap_edges;
    if (!w->counts[at])
        w->keys[at] = key, w->first_value[at] = v;
    w->counts[at]++;
}

static uint64_t id_number(const char *id, int32_t n_nodes, int32_t n_groups)
{
    uint64_t k = (uint64_t)strtoull(id + 1, NULL, 10);
    return id[0] == 'n' ? k : id[0] == 'g' ? (uint64_t)n_nodes + k : (uint64_t)n_nodes + (uint64_t)n_groups + k;
}

static void id_text(uint64_t k, int32_t n_nodes, int32_t n_groups, char *id, size_t size)
{
    if (k < (uint64_t)n_nodes)
        snprintf(id, size, "n%llu", (unsigned long long)k);
    else if (k < (uint64_t)n_nodes + (uint64_t)n_groups)
        snprintf(id, size, "g%llu", (unsigned long long)(k - (uint64_t)n_nodes));
    else
        snprintf(id, size, "v%llu", (unsigned long long)(k - (uint64_t)n_nodes - (uint64_t)n_groups));
}

static const char *device_label(const view *w, int32_t d, char *buf, size_t size)
{
    if (d >= 0 && d < w->gr.o->n_device_names && w->gr.o->device_names)
        snprintf(buf, size, "%s", w->gr.o->device_names[d]);
    else
        snprintf(buf, size, "device %d", d);
    return buf;
}

static void print_nodes(view *w, FILE *out)
{
    const ir_graph *g = w->gr.g;
    char label[512], dev[128];
    /* what the drawn ops read: with a stage, the other sources are not drawn */
    char *read = calloc((size_t)g->n_values + 1, 1);
    int32_t *group_read = calloc((size_t)w->gr.n_groups + 1, sizeof *group_read);
    if (!read || !group_read) {
        free(read);
        free(group_read);
        return;
    }
    for (int32_t n = 0; n < g->n_nodes; n++)
        for (int i = 0; visible(w, n) && i < g->nodes[n].n_in; i++) {
            int32_t v = g->nodes[n].in[i];
            if (v < 0 || v >= g->n_values)
                continue;
            read[v] = 1;
            if (w->gr.value_group[v] >= 0)
                group_read[w->gr.value_group[v]] = 1;
        }
    /* sources: alone, or another stage's values read by this one */
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        int32_t p = val->producer;
        int foreign = p >= 0 && p < g->n_nodes && !visible(w, p);
        if ((p >= 0 && p < g->n_nodes && !foreign) || w->gr.value_group[v] >= 0)
            continue;
        if ((foreign || w->gr.o->stage >= 0) && !read[v])
            continue;
        fprintf(out, "  v%d [shape=ellipse, style=%s, fillcolor=\"%s\", label=\"", v, foreign ? "dashed" : "filled",
                foreign ? "white" : source_colour(val->role));
        put_escaped(out, ir_str(g, val->name));
        if (foreign)
            fprintf(out, "\\n(stage %d)", g->nodes[p].stage);
        fputs("\"];\n", out);
    }
    for (int32_t k = 0; k < w->gr.n_groups; k++) {
        const ir_view_group *q = &w->gr.groups[k];
        if (q->is_source && w->gr.o->stage >= 0 && !group_read[k])
            continue;
        if (q->is_source) {
            snprintf(label, sizeof label, "%s.%lld-%lld %s\n%d tensors", q->prefix, (long long)q->lo, (long long)q->hi,
                     q->phase_or_role == ROLE_PARAM ? "params" : "state", q->members);
            fprintf(out, "  g%d [shape=ellipse, style=filled, fillcolor=\"%s\", label=\"", k,
                    source_colour((ir_role)q->phase_or_role));
        } else {
            snprintf(label, sizeof label, "%s.%lld-%lld %s\n%lld blocks, %d ops%s%s", q->prefix, (long long)q->lo,
                     (long long)q->hi, ir_view_phase_name((ir_phase)q->phase_or_role), (long long)(q->hi - q->lo + 1),
                     q->members, q->device >= 0 ? "\n" : "",
                     q->device >= 0 ? device_label(w, q->device, dev, sizeof dev) : "");
            fprintf(out, "  g%d [shape=box3d, style=filled, fillcolor=\"%s\", label=\"", k,
                    ir_view_device_colour(q->device));
        }
        put_escaped(out, label);
        fputs("\"];\n", out);
    }
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const ir_node *node = &g->nodes[n];
        if (!visible(w, n) || w->gr.node_group[n] >= 0)
            continue;
        const char *fill = ir_view_device_colour(node->device);
        fprintf(out, "  n%d [shape=box, style=filled, fillcolor=\"%s\", label=\"", n, fill);
        put_escaped(out, ir_str(g, node->name));
        fputs("\\n", out);
        put_escaped(out, (unsigned)node->op < OP_COUNT ? op_table[node->op].name : "?");
        fputs("\"];\n", out);
    }
    free(read);
    free(group_read);
}

static int print_edges(view *w, FILE *out)
{
    const ir_graph *g = w->gr.g;
    w->cap_edges = (size_t)g->n_nodes * IR_MAX_IN * 2 + 16;
    w->keys = calloc(w->cap_edges, sizeof *w->keys);
    w->counts = calloc(w->cap_edges, sizeof *w->counts);
    w->first_value = calloc(w->cap_edges, sizeof *w->first_value);
    if (!w->keys || !w->counts || !w->first_value)
        return -1;
    char from[32], to[32];
    uint64_t span = (uint64_t)g->n_nodes + (uint64_t)w->gr.n_groups + (uint64_t)g->n_values;
    for (int32_t n = 0; n < g->n_nodes; n++) {
        if (!visible(w, n))
            continue;
        if (w->gr.node_group[n] >= 0)
            snprintf(to, sizeof to, "g%d", w->gr.node_group[n]);
        else
            snprintf(to, sizeof to, "n%d", n);
        for (int i = 0; i < g->nodes[n].n_in && i < IR_MAX_IN; i++) {
            int32_t v = g->nodes[n].in[i];
            if (v < 0 || v >= g->n_values)
                continue;
            origin_id(w, v, from, sizeof from);
            if (strcmp(from, to) == 0)
                continue; /* inside one collapsed block */
            uint64_t key =
                id_number(from, g->n_nodes, w->gr.n_groups) * span + id_number(to, g->n_nodes, w->gr.n_groups);
            edge_add(w, key, v);
        }
    }
    char shape[256];
    for (size_t e = 0; e < w->cap_edges; e++) {
        if (!w->counts[e])
            continue;
        id_text(w->keys[e] / span, g->n_nodes, w->gr.n_groups, from, sizeof from);
        id_text(w->keys[e] % span, g->n_nodes, w->gr.n_groups, to, sizeof to);
        if (w->counts[e] == 1)
            fprintf(out, "  %s -> %s [label=\"%s\"];\n", from, to,
                    ir_shape_str(&g->values[w->first_value[e]].shape, shape, sizeof shape));
        else
            fprintf(out, "  %s -> %s [label=\"%d values\", penwidth=2];\n", from, to, w->counts[e]);
    }
    return 0;
}

int ir_graph_print_dot_view(const ir_graph *g, const ir_view_options *o, FILE *out)
{
    view w = { 0 };
    int rc = ir_view_groups_init(&w.gr, g, o);
    if (rc == 0) {
        fputs("digraph \"", out);
        put_escaped(out, ir_str(g, g->name));
        fputs("\" {\n  rankdir=TB;\n  labelloc=t;\n  label=\"", out);
        put_escaped(out, ir_str(g, g->name));
        if (o->stage >= 0)
            fprintf(out, ", stage %d", o->stage);
        fputs("\";\n  node [fontname=\"Helvetica\", fontsize=10];\n"
              "  edge [fontname=\"Helvetica\", fontsize=8];\n",
              out);
        print_nodes(&w, out);
        rc = print_edges(&w, out);
    }
    if (rc == 0 && g->loss >= 0 && g->loss < g->n_values &&
        (g->values[g->loss].producer < 0 || visible(&w, g->values[g->loss].producer))) {
        char from[32];
        fputs("  loss [shape=box, style=\"rounded,bold\", label=\"loss\\n", out);
        put_escaped(out, ir_str(g, g->values[g->loss].name));
        fputs("\"];\n", out);
        origin_id(&w, g->loss, from, sizeof from);
        char shape[256];
        fprintf(out, "  %s -> loss [label=\"%s\"];\n", from,
                ir_shape_str(&g->values[g->loss].shape, shape, sizeof shape));
    }
    if (rc == 0)
        fputs("}\n", out);
    ir_view_groups_free(&w.gr);
    free(w.keys);
    free(w.counts);
    free(w.first_value);
    return rc || ferror(out) ? -1 : 0;
}

int ir_graph_print_dot(const ir_graph *g, FILE *out)
{
    ir_view_options o = ir_view_defaults();
    return ir_graph_print_dot_view(g, &o, out);
}
