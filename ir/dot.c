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
 * GPT-2 small after every pass is then a few hundred boxes, which dot lays
 * out in seconds; expanded it is thousands, which it does not in minutes.
 * With a stage, only its ops are drawn; what they read from another stage
 * is an ellipse naming it.
 *
 * It is a picture, not a format: nothing reads it back.  Labels keep ASCII
 * only (other bytes become '?'), so dot never sees invalid UTF-8.
 */
#include "view.h"

#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "ops.h"

static const char *const device_colours[] = {
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
    "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
};
#define N_DEVICE_COLOURS (int)(sizeof device_colours / sizeof device_colours[0])

ir_view_options ir_view_defaults(void) { return (ir_view_options){ .expand = 0, .stage = -1 }; }

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

static const char *phase_name(ir_phase p)
{
    return p == PHASE_FORWARD ? "forward" : p == PHASE_BACKWARD ? "backward" : p == PHASE_UPDATE ? "update" : "ops";
}

/* A box (or ellipse) standing for several ops (or sources) of a block. */
typedef struct {
    char     prefix[128];
    int      is_source;
    int32_t  phase_or_role, device;
    int64_t  lo, hi;          /* the instances it holds */
    int32_t  members;
} group;

typedef struct {
    const ir_graph *g;
    const ir_view_options *o;
    int32_t *node_group, *value_group;   /* -1: drawn alone */
    group   *groups;
    int32_t  n_groups, cap_groups;
    /* edges, deduplicated: key (from, to) -> count and the first value */
    uint64_t *keys;
    int32_t  *counts, *first_value;
    size_t    cap_edges;
} view;

/* The group of (prefix, kind, phase or role, device), made when new. */
static int32_t group_for(view *w, const char *prefix, int is_source, int32_t what, int32_t device, int64_t instance)
{
    for (int32_t k = 0; k < w->n_groups; k++) {
        group *q = &w->groups[k];
        if (q->is_source == is_source && q->phase_or_role == what && q->device == device &&
            strcmp(q->prefix, prefix) == 0) {
            q->lo = instance < q->lo ? instance : q->lo;
            q->hi = instance > q->hi ? instance : q->hi;
            q->members++;
            return k;
        }
    }
    if (w->n_groups == w->cap_groups) {
        int32_t cap = w->cap_groups ? 2 * w->cap_groups : 64;
        group *grown = realloc(w->groups, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        w->groups = grown, w->cap_groups = cap;
    }
    group *q = &w->groups[w->n_groups];
    memset(q, 0, sizeof *q);
    snprintf(q->prefix, sizeof q->prefix, "%s", prefix);
    q->is_source = is_source, q->phase_or_role = what, q->device = device;
    q->lo = q->hi = instance;
    q->members = 1;
    return w->n_groups++;
}

/* Prefixes with two instances or more (among the ops' and values' names)
 * are the repeats to collapse. */
static int repeated(const ir_graph *g, const char *prefix)
{
    char p[128];
    int64_t instance, first = -1;
    for (int32_t i = 0; i < g->n_nodes + g->n_values; i++) {
        const char *name = ir_str(g, i < g->n_nodes ? g->nodes[i].name : g->values[i - g->n_nodes].name);
        if (strncmp(name, "grad.", 5) == 0)
            continue;   /* grad.wte.1, grad.wte.2: a value's gradient contributions, not blocks */
        if (ir_block_of(name, p, sizeof p, &instance) && strcmp(p, prefix) == 0) {
            if (first < 0)
                first = instance;
            else if (instance != first)
                return 1;
        }
    }
    return 0;
}

static int visible(const view *w, int32_t n)
{
    return w->o->stage < 0 || w->g->nodes[n].stage == w->o->stage;
}

static int assign_groups(view *w)
{
    const ir_graph *g = w->g;
    char prefix[128], known[64][128];
    int known_repeated[64], n_known = 0;
    int64_t instance;
    /* the repeated prefixes (a model has a handful): asked once each */
    for (int32_t i = 0; i < g->n_nodes + g->n_values; i++) {
        const char *name = i < g->n_nodes ? ir_str(g, g->nodes[i].name) : ir_str(g, g->values[i - g->n_nodes].name);
        int32_t *slot = i < g->n_nodes ? &w->node_group[i] : &w->value_group[i - g->n_nodes];
        *slot = -1;
        if (w->o->expand || !ir_block_of(name, prefix, sizeof prefix, &instance))
            continue;
        int k = 0;
        while (k < n_known && strcmp(known[k], prefix) != 0)
            k++;
        if (k == n_known) {
            if (n_known == 64)
                continue;
            snprintf(known[n_known], sizeof known[0], "%s", prefix);
            known_repeated[n_known++] = repeated(g, prefix);
        }
        if (!known_repeated[k])
            continue;
        if (i < g->n_nodes) {
            if (!visible(w, i))
                continue;
            *slot = group_for(w, prefix, 0, g->nodes[i].phase, g->nodes[i].device, instance);
        } else if (g->values[i - g->n_nodes].producer < 0) {
            *slot = group_for(w, prefix, 1, g->values[i - g->n_nodes].role, -1, instance);
        }
        if (*slot < 0 && w->n_groups == w->cap_groups)
            return -1;
    }
    return 0;
}

/* The DOT id of where value v comes from, as seen by this view. */
static void origin_id(const view *w, int32_t v, char *id, size_t size)
{
    int32_t p = w->g->values[v].producer;
    if (p >= 0 && p < w->g->n_nodes && visible(w, p)) {
        if (w->node_group[p] >= 0)
            snprintf(id, size, "g%d", w->node_group[p]);
        else
            snprintf(id, size, "n%d", p);
    } else if (w->value_group[v] >= 0) {
        snprintf(id, size, "g%d", w->value_group[v]);
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
    if (d >= 0 && d < w->o->n_device_names && w->o->device_names)
        snprintf(buf, size, "%s", w->o->device_names[d]);
    else
        snprintf(buf, size, "device %d", d);
    return buf;
}

static void print_nodes(view *w, FILE *out)
{
    const ir_graph *g = w->g;
    char label[512], dev[128];
    /* what the drawn ops read: with a stage, the other sources are not drawn */
    char *read = calloc((size_t)g->n_values + 1, 1);
    int32_t *group_read = calloc((size_t)w->n_groups + 1, sizeof *group_read);
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
            if (w->value_group[v] >= 0)
                group_read[w->value_group[v]] = 1;
        }
    /* sources: alone, or another stage's values read by this one */
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        int32_t p = val->producer;
        int foreign = p >= 0 && p < g->n_nodes && !visible(w, p);
        if ((p >= 0 && p < g->n_nodes && !foreign) || w->value_group[v] >= 0)
            continue;
        if ((foreign || w->o->stage >= 0) && !read[v])
            continue;
        fprintf(out, "  v%d [shape=ellipse, style=%s, fillcolor=\"%s\", label=\"", v, foreign ? "dashed" : "filled",
                foreign ? "white" : source_colour(val->role));
        put_escaped(out, ir_str(g, val->name));
        if (foreign)
            fprintf(out, "\\n(stage %d)", g->nodes[p].stage);
        fputs("\"];\n", out);
    }
    for (int32_t k = 0; k < w->n_groups; k++) {
        const group *q = &w->groups[k];
        if (q->is_source && w->o->stage >= 0 && !group_read[k])
            continue;
        if (q->is_source) {
            snprintf(label, sizeof label, "%s.%lld-%lld %s\n%d tensors", q->prefix, (long long)q->lo, (long long)q->hi,
                     q->phase_or_role == ROLE_PARAM ? "params" : "state", q->members);
            fprintf(out, "  g%d [shape=ellipse, style=filled, fillcolor=\"%s\", label=\"", k,
                    source_colour((ir_role)q->phase_or_role));
        } else {
            snprintf(label, sizeof label, "%s.%lld-%lld %s\n%lld blocks, %d ops%s%s", q->prefix, (long long)q->lo,
                     (long long)q->hi, phase_name((ir_phase)q->phase_or_role), (long long)(q->hi - q->lo + 1),
                     q->members, q->device >= 0 ? "\n" : "", q->device >= 0 ? device_label(w, q->device, dev, sizeof dev) : "");
            fprintf(out, "  g%d [shape=box3d, style=filled, fillcolor=\"%s\", label=\"", k,
                    q->device >= 0 ? device_colours[q->device % N_DEVICE_COLOURS] : "white");
        }
        put_escaped(out, label);
        fputs("\"];\n", out);
    }
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const ir_node *node = &g->nodes[n];
        if (!visible(w, n) || w->node_group[n] >= 0)
            continue;
        const char *fill = node->device >= 0 ? device_colours[node->device % N_DEVICE_COLOURS] : "white";
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
    const ir_graph *g = w->g;
    w->cap_edges = (size_t)g->n_nodes * IR_MAX_IN * 2 + 16;
    w->keys = calloc(w->cap_edges, sizeof *w->keys);
    w->counts = calloc(w->cap_edges, sizeof *w->counts);
    w->first_value = calloc(w->cap_edges, sizeof *w->first_value);
    if (!w->keys || !w->counts || !w->first_value)
        return -1;
    char from[32], to[32];
    uint64_t span = (uint64_t)g->n_nodes + (uint64_t)w->n_groups + (uint64_t)g->n_values;
    for (int32_t n = 0; n < g->n_nodes; n++) {
        if (!visible(w, n))
            continue;
        if (w->node_group[n] >= 0)
            snprintf(to, sizeof to, "g%d", w->node_group[n]);
        else
            snprintf(to, sizeof to, "n%d", n);
        for (int i = 0; i < g->nodes[n].n_in && i < IR_MAX_IN; i++) {
            int32_t v = g->nodes[n].in[i];
            if (v < 0 || v >= g->n_values)
                continue;
            origin_id(w, v, from, sizeof from);
            if (strcmp(from, to) == 0)
                continue;   /* inside one collapsed block */
            uint64_t key = id_number(from, g->n_nodes, w->n_groups) * span + id_number(to, g->n_nodes, w->n_groups);
            edge_add(w, key, v);
        }
    }
    char shape[256];
    for (size_t e = 0; e < w->cap_edges; e++) {
        if (!w->counts[e])
            continue;
        id_text(w->keys[e] / span, g->n_nodes, w->n_groups, from, sizeof from);
        id_text(w->keys[e] % span, g->n_nodes, w->n_groups, to, sizeof to);
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
    view w = { .g = g, .o = o };
    w.node_group = malloc(((size_t)g->n_nodes + 1) * sizeof *w.node_group);
    w.value_group = malloc(((size_t)g->n_values + 1) * sizeof *w.value_group);
    int rc = !w.node_group || !w.value_group || assign_groups(&w) ? -1 : 0;
    if (rc == 0) {
        fputs("digraph \"", out);
        put_escaped(out, ir_str(g, g->name));
        fputs("\" {\n  rankdir=TB;\n  labelloc=t;\n  label=\"", out);
        put_escaped(out, ir_str(g, g->name));
        if (o->stage >= 0)
            fprintf(out, ", stage %d", o->stage);
        fputs("\";\n  node [fontname=\"Helvetica\", fontsize=10];\n"
              "  edge [fontname=\"Helvetica\", fontsize=8];\n", out);
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
        fprintf(out, "  %s -> loss [label=\"%s\"];\n", from, ir_shape_str(&g->values[g->loss].shape, shape, sizeof shape));
    }
    if (rc == 0)
        fputs("}\n", out);
    free(w.node_group);
    free(w.value_group);
    free(w.groups);
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
