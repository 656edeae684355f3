/* view_groups.c: the groups the views collapse (view_groups.h). */
#include "view_groups.h"

#include <stdlib.h>
#include <string.h>

#include "blocks.h"

static const char *const device_colours[] = {
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
    "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
};
#define N_DEVICE_COLOURS (int)(sizeof device_colours / sizeof device_colours[0])

ir_view_options ir_view_defaults(void) { return (ir_view_options){ .expand = 0, .stage = -1 }; }

const char *ir_view_device_colour(int32_t d) { return d >= 0 ? device_colours[d % N_DEVICE_COLOURS] : "white"; }

const char *ir_view_phase_name(ir_phase p)
{
    return p == PHASE_FORWARD    ? "forward"
           : p == PHASE_BACKWARD ? "backward"
           : p == PHASE_UPDATE   ? "update"
           : p == PHASE_PREFILL  ? "prefill"
                                 : "ops";
}

int ir_view_visible(const ir_view_groups *w, int32_t n)
{
    return w->o->stage < 0 || w->g->nodes[n].stage == w->o->stage;
}

/* The group of (prefix, kind, phase or role, device), made when new. */
static int32_t group_for(ir_view_groups *w, const char *prefix, int is_source, int32_t what, int32_t device,
                         int64_t instance)
{
    for (int32_t k = 0; k < w->n_groups; k++) {
        ir_view_group *q = &w->groups[k];
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
        ir_view_group *grown = realloc(w->groups, (size_t)cap * sizeof *grown);
        if (!grown)
            return -1;
        w->groups = grown, w->cap_groups = cap;
    }
    ir_view_group *q = &w->groups[w->n_groups];
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
            continue; /* grad.wte.1, grad.wte.2: a value's gradient contributions, not blocks */
        if (ir_block_of(name, p, sizeof p, &instance) && strcmp(p, prefix) == 0) {
            if (first < 0)
                first = instance;
            else if (instance != first)
                return 1;
        }
    }
    return 0;
}

static int assign_groups(ir_view_groups *w)
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
            if (!ir_view_visible(w, i))
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

int ir_view_groups_init(ir_view_groups *w, const ir_graph *g, const ir_view_options *o)
{
    *w = (ir_view_groups){ .g = g, .o = o };
    w->node_group = malloc(((size_t)g->n_nodes + 1) * sizeof *w->node_group);
    w->value_group = malloc(((size_t)g->n_values + 1) * sizeof *w->value_group);
    return !w->node_group || !w->value_group || assign_groups(w) ? -1 : 0;
}

void ir_view_groups_free(ir_view_groups *w)
{
    free(w->node_group);
    free(w->value_group);
    free(w->groups);
    *w = (ir_view_groups){ 0 };
}
