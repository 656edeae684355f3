/* verify.c: ir_graph_verify, the invariants listed at the top of ir.h,
 * checked after every pass.
 *
 * It reports the first violation only, at the source location of the value
 * or node at fault (the model name when it has none), in a sentence that
 * names it: "node 'h.0.attn' (attention): input 2 'foo' is not defined
 * before use (cycle or use before definition)".  It does not run shape
 * rules; that is the shapes pass.
 *
 * Order: values (names, dtypes, roles, shapes, producers), then nodes in
 * order (names, arity, inputs in topological order, outputs, attributes),
 * then what needs the whole graph (producers listed, params used, loss, the
 * placement and the nodes' stages in it).
 */
#include "ir.h"
#include "name_map.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
    const ir_graph *g;
    struct diag *err;
    int32_t *listed_by;    /* per value: the node whose outputs list it, or -1 */
    char *used;            /* per value: read by some node                      */
    name_map *value_names; /* name -> index, to find duplicates                 */
    name_map *node_names;
} verifier;

static int fail_at(verifier *vf, ir_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_at(verifier *vf, ir_loc loc, const char *fmt, ...)
{
    const ir_graph *g = vf->g;
    const char *file = ir_loc_file(g, loc);
    va_list ap;
    va_start(ap, fmt);
    diag_vset(vf->err, file, loc.line, fmt, ap);
    va_end(ap);
    return -1;
}

static const char *vname(const ir_graph *g, int32_t v) { return ir_str(g, g->values[v].name); }

static int is_source_role(ir_role r) { return r == ROLE_INPUT || r == ROLE_PARAM || r == ROLE_STATE; }
static int is_float_dtype(ir_dtype d) { return d == DT_F32 || d == DT_F16 || d == DT_BF16; }

static const char name_rule[] = "a name is 1 to 255 of [A-Za-z0-9_.:/-], not starting with '-'";

/* 0 if new, 1 if `name` was already in h (then *first is its index), -1 on no memory. */
static int seen_before(name_map *h, const char *name, int32_t index, int32_t *first)
{
    int64_t hit;
    if (name_map_get(h, name, &hit)) {
        *first = (int32_t)hit;
        return 1;
    }
    return name_map_add(h, name, index) == 0 ? 0 : -1;
}

static int verify_shape(verifier *vf, int32_t v)
{
    const ir_value *val = &vf->g->values[v];
    const ir_shape *s = &val->shape;
    if (s->rank < -1 || s->rank > IR_MAX_RANK)
        return fail_at(vf, val->loc, "value '%s': rank %d is out of range (-1 for unknown, 0 to %d)", vname(vf->g, v),
                       s->rank, IR_MAX_RANK);
    for (int i = 0; i < s->rank; i++)
        if (s->dim[i] < 1 || s->dim[i] > IR_DIM_MAX)
            return fail_at(vf, val->loc, "value '%s': dimension %d is %lld, expected 1 to %lld", vname(vf->g, v), i + 1,
                           (long long)s->dim[i], (long long)IR_DIM_MAX);
    if (s->rank >= 0 && ir_shape_numel(s) < 0) {
        char buf[256];
        return fail_at(vf, val->loc, "value '%s': shape %s has an absurd size (more than %lld elements)",
                       vname(vf->g, v), ir_shape_str(s, buf, sizeof buf), (long long)IR_NUMEL_MAX);
    }
    if (s->rank < 0 && is_source_role(val->role))
        return fail_at(vf, val->loc, "%s '%s' has an unknown shape; sources must have a known shape",
                       ir_role_name(val->role), vname(vf->g, v));
    return 0;
}

static int verify_value(verifier *vf, int32_t v)
{
    const ir_graph *g = vf->g;
    const ir_value *val = &g->values[v];
    const char *name = vname(g, v);
    if (!ir_name_valid(name))
        return fail_at(vf, val->loc, "value #%d: name '%s' is not valid (%s)", v, name, name_rule);
    int32_t first;
    int dup = seen_before(vf->value_names, name, v, &first);
    if (dup < 0)
        return fail_at(vf, val->loc, "out of memory while verifying");
    if (dup)
        return fail_at(vf, val->loc, "value '%s' is defined twice (values #%d and #%d)", name, first, v);
    if ((unsigned)val->dtype >= DT_COUNT)
        return fail_at(vf, val->loc, "value '%s': dtype %d is out of range", name, (int)val->dtype);
    if ((unsigned)val->role >= ROLE_COUNT)
        return fail_at(vf, val->loc, "value '%s': role %d is out of range", name, (int)val->role);
    if (verify_shape(vf, v) != 0)
        return -1;
    if (val->role == ROLE_PARAM && !is_float_dtype(val->dtype))
        return fail_at(vf, val->loc, "param '%s' has dtype %s, expected a floating type (f32, f16, bf16)", name,
                       ir_dtype_name(val->dtype));
    if (val->frozen && val->role != ROLE_PARAM)
        return fail_at(vf, val->loc, "%s '%s' is marked frozen: only a param can be", ir_role_name(val->role), name);
    if ((val->role == ROLE_PARAM || val->role == ROLE_STATE) &&
        ((unsigned)val->init.kind >= INIT_COUNT || val->init.kind == INIT_DROPOUT))
        return fail_at(vf, val->loc, "%s '%s': init kind %d is out of range", ir_role_name(val->role), name,
                       (int)val->init.kind);
    if (val->role == ROLE_INPUT && val->init.kind != INIT_NONE &&
        (val->init.kind != INIT_DROPOUT || !(val->init.a >= 0.0 && val->init.a < 1.0) || !is_float_dtype(val->dtype)))
        return fail_at(vf, val->loc, "input '%s': an input's init is none or dropout(p), 0 <= p < 1, a float", name);
    if (val->producer < -1 || val->producer >= g->n_nodes)
        return fail_at(vf, val->loc, "value '%s': producer %d is not a node (the graph has %d)", name, val->producer,
                       g->n_nodes);
    if (val->producer == -1 && !is_source_role(val->role))
        return fail_at(vf, val->loc, "%s '%s' has no producer; only input, param and state values are sources",
                       ir_role_name(val->role), name);
    if (val->producer >= 0 && is_source_role(val->role))
        return fail_at(vf, val->loc,
                       "%s '%s' is produced by node '%s'; input, param and state values "
                       "must not be produced",
                       ir_role_name(val->role), name, ir_str(g, g->nodes[val->producer].name));
    return 0;
}

static int verify_attrs(verifier *vf, int32_t n)
{
    const ir_node *node = &vf->g->nodes[n];
    const char *name = ir_str(vf->g, node->name), *op = op_table[node->op].name;
    if (node->n_attr < 0 || node->n_attr > IR_MAX_ATTR)
        return fail_at(vf, node->loc, "node '%s' (%s): %d attributes, expected 0 to %d", name, op, node->n_attr,
                       IR_MAX_ATTR);
    for (int i = 0; i < node->n_attr; i++) {
        const ir_attr *a = &node->attr[i];
        if ((unsigned)a->key >= ATTR_KEY_COUNT)
            return fail_at(vf, node->loc, "node '%s' (%s): attribute %d has key %d, out of range", name, op, i,
                           (int)a->key);
        const char *key = attr_key_name(a->key);
        if (!op_attr_spec(node->op, a->key))
            return fail_at(vf, node->loc, "node '%s' (%s): attribute '%s' is not one %s takes", name, op, key, op);
        for (int j = 0; j < i; j++)
            if (node->attr[j].key == a->key)
                return fail_at(vf, node->loc, "node '%s' (%s): attribute '%s' is given twice", name, op, key);
        if (attr_key_type(a->key) == ATTR_INT && (a->n < 1 || a->n > IR_MAX_RANK))
            return fail_at(vf, node->loc,
                           "node '%s' (%s): attribute '%s' is an integer attribute but holds "
                           "%d integers (expected 1 to %d)",
                           name, op, key, a->n, IR_MAX_RANK);
        if (attr_key_type(a->key) == ATTR_FLOAT && a->n != 0)
            return fail_at(vf, node->loc,
                           "node '%s' (%s): attribute '%s' is a float attribute but holds "
                           "%d integers",
                           name, op, key, a->n);
    }
    const op_def *d = &op_table[node->op];
    for (int s = 0; s < d->n_attr_specs; s++)
        if (d->attr_specs[s].required && !ir_node_attr(node, d->attr_specs[s].key))
            return fail_at(vf, node->loc, "node '%s' (%s): required attribute '%s' is missing", name, op,
                           attr_key_name(d->attr_specs[s].key));
    return 0;
}

static int verify_node(verifier *vf, int32_t n)
{
    const ir_graph *g = vf->g;
    const ir_node *node = &g->nodes[n];
    const char *name = ir_str(g, node->name);
    if (!ir_name_valid(name))
        return fail_at(vf, node->loc, "node #%d: name '%s' is not valid (%s)", n, name, name_rule);
    int32_t first;
    int dup = seen_before(vf->node_names, name, n, &first);
    if (dup < 0)
        return fail_at(vf, node->loc, "out of memory while verifying");
    if (dup)
        return fail_at(vf, node->loc, "node '%s' is defined twice (nodes #%d and #%d)", name, first, n);
    if ((unsigned)node->op >= OP_COUNT)
        return fail_at(vf, node->loc, "node '%s': op %d is out of range", name, (int)node->op);
    const op_def *d = &op_table[node->op];
    if (node->n_in < 0 || node->n_in > IR_MAX_IN || node->n_in < d->min_in || node->n_in > d->max_in) {
        if (d->min_in == d->max_in)
            return fail_at(vf, node->loc, "node '%s' (%s): %d inputs, expected %d", name, d->name, node->n_in,
                           d->min_in);
        return fail_at(vf, node->loc, "node '%s' (%s): %d inputs, expected %d to %d", name, d->name, node->n_in,
                       d->min_in, d->max_in);
    }
    if (node->n_out < 0 || node->n_out > IR_MAX_OUT || node->n_out < d->min_out || node->n_out > d->max_out) {
        if (d->min_out == d->max_out)
            return fail_at(vf, node->loc, "node '%s' (%s): %d outputs, expected %d", name, d->name, node->n_out,
                           d->min_out);
        return fail_at(vf, node->loc, "node '%s' (%s): %d outputs, expected %d to %d", name, d->name, node->n_out,
                       d->min_out, d->max_out);
    }
    if ((unsigned)node->phase >= PHASE_COUNT)
        return fail_at(vf, node->loc, "node '%s' (%s): phase %d is out of range", name, d->name, (int)node->phase);

    for (int i = 0; i < node->n_in; i++) {
        int32_t v = node->in[i];
        if (v < 0 || v >= g->n_values)
            return fail_at(vf, node->loc, "node '%s' (%s): input %d is value #%d, out of range (the graph has %d)",
                           name, d->name, i, v, g->n_values);
        /* Outputs of node n are registered below, after its inputs: a node
         * reading its own output is caught here too. */
        if (g->values[v].producer != -1 && vf->listed_by[v] < 0)
            return fail_at(vf, node->loc,
                           "node '%s' (%s): input %d '%s' is not defined before use "
                           "(cycle or use before definition)",
                           name, d->name, i, vname(g, v));
        vf->used[v] = 1;
    }
    for (int i = 0; i < node->n_out; i++) {
        int32_t v = node->out[i];
        if (v < 0 || v >= g->n_values)
            return fail_at(vf, node->loc, "node '%s' (%s): output %d is value #%d, out of range (the graph has %d)",
                           name, d->name, i, v, g->n_values);
        if (vf->listed_by[v] >= 0)
            return fail_at(vf, node->loc, "node '%s' (%s): output %d '%s' is also an output of node '%s'", name,
                           d->name, i, vname(g, v), ir_str(g, g->nodes[vf->listed_by[v]].name));
        if (g->values[v].producer != n)
            return fail_at(vf, node->loc,
                           "node '%s' (%s): output %d '%s' records producer %d, expected %d "
                           "(this node)",
                           name, d->name, i, vname(g, v), g->values[v].producer, n);
        vf->listed_by[v] = n;
    }
    return verify_attrs(vf, n);
}

/* The placement alone (verify_whole then checks the nodes' stages against it).
 * It has no source location: messages name the graph's file, line 0. */
static int verify_placement(verifier *vf)
{
    const ir_placement *p = &vf->g->placement;
    const ir_loc none = { 0, 0 };
    if (p->n_stages == 0) {
        if (p->n_replicas || p->micro_batches || p->device)
            return fail_at(vf, none,
                           "placement: 0 stages (not placed) but %d replicas, %d micro-batches and "
                           "%s device list; expected all zero and none",
                           p->n_replicas, p->micro_batches, p->device ? "a" : "no");
        return 0;
    }
    if (p->n_stages < 0 || p->n_replicas < 1 || p->micro_batches < 1)
        return fail_at(vf, none,
                       "placement: %d stages, %d replicas, %d micro-batches; expected each >= 1 "
                       "(or 0 stages: not placed)",
                       p->n_stages, p->n_replicas, p->micro_batches);
    int64_t n = (int64_t)p->n_stages * p->n_replicas;
    if (n > IR_MAX_STAGE_DEVICES)
        return fail_at(vf, none, "placement: %d stages x %d replicas = %lld devices, expected at most %d", p->n_stages,
                       p->n_replicas, (long long)n, IR_MAX_STAGE_DEVICES);
    if (!p->device)
        return fail_at(vf, none, "placement: %d stages x %d replicas but no device list", p->n_stages, p->n_replicas);
    for (int64_t i = 0; i < n; i++) {
        int s = (int)(i / p->n_replicas), r = (int)(i % p->n_replicas);
        if (p->device[i] < 0)
            return fail_at(vf, none, "placement: stage %d replica %d is device %d, expected a device index >= 0", s, r,
                           p->device[i]);
        for (int64_t j = 0; j < i; j++) /* at most 1024 devices: the square is cheap */
            if (p->device[j] == p->device[i])
                return fail_at(vf, none,
                               "placement: device %d runs both stage %d replica %d and stage %d "
                               "replica %d; a device runs one replica of one stage",
                               p->device[i], (int)(j / p->n_replicas), (int)(j % p->n_replicas), s, r);
    }
    return 0;
}

static int verify_whole(verifier *vf)
{
    const ir_graph *g = vf->g;
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        if (val->producer >= 0 && vf->listed_by[v] != val->producer)
            return fail_at(vf, val->loc,
                           "%s '%s' records producer '%s', but that node does not list it "
                           "as an output",
                           ir_role_name(val->role), vname(g, v), ir_str(g, g->nodes[val->producer].name));
        if (val->role == ROLE_PARAM && !vf->used[v])
            return fail_at(vf, val->loc, "param '%s' is never used", vname(g, v));
    }
    if (g->loss < -1 || g->loss >= g->n_values)
        return fail_at(vf, (ir_loc){ 0, 0 }, "loss is value #%d, out of range (the graph has %d values)", g->loss,
                       g->n_values);
    if (g->loss >= 0) {
        const ir_value *val = &g->values[g->loss];
        char buf[256];
        if (val->shape.rank > 0)
            return fail_at(vf, val->loc, "loss '%s' has shape %s, expected a scalar []", vname(g, g->loss),
                           ir_shape_str(&val->shape, buf, sizeof buf));
    }
    if (g->output < -1 || g->output >= g->n_values || (g->output >= 0 && g->loss >= 0))
        return fail_at(vf, (ir_loc){ 0, 0 }, "output is value #%d: out of range, or beside a loss (a graph has one)",
                       g->output);
    if (g->prefill_output < -1 || g->prefill_output >= g->n_values || (g->prefill_output >= 0 && g->output < 0))
        return fail_at(vf, (ir_loc){ 0, 0 }, "prefill_output is value #%d: out of range, or without an output",
                       g->prefill_output);
    if (verify_placement(vf) != 0)
        return -1;
    for (int32_t n = 0; n < g->n_nodes && g->placement.n_stages > 0; n++) {
        const ir_node *node = &g->nodes[n];
        if (node->stage >= g->placement.n_stages)
            return fail_at(vf, node->loc, "node '%s' (%s): stage %d, but the placement has %d stage%s (0 to %d)",
                           ir_str(g, node->name), op_table[node->op].name, node->stage, g->placement.n_stages,
                           g->placement.n_stages == 1 ? "" : "s", g->placement.n_stages - 1);
    }
    return 0;
}

int ir_graph_verify(const ir_graph *g, struct diag *err)
{
    verifier vf = { .g = g, .err = err };
    if (g->n_values < 0 || g->n_nodes < 0 || (g->n_values && !g->values) || (g->n_nodes && !g->nodes))
        return fail_at(&vf, (ir_loc){ 0, 0 }, "graph arrays are inconsistent (%d values, %d nodes)", g->n_values,
                       g->n_nodes);
    if (!is_float_dtype(g->precision) || (g->tf32 != 0 && (g->tf32 != 1 || g->precision != DT_F32)))
        return fail_at(&vf, (ir_loc){ 0, 0 }, "precision %s%s: expected f32 (with or without tf32), bf16 or f16",
                       ir_dtype_name(g->precision), g->tf32 ? " tf32" : "");
    size_t nv = (size_t)g->n_values + 1;
    vf.listed_by = malloc(nv * sizeof *vf.listed_by);
    vf.used = calloc(nv, 1);
    vf.value_names = name_map_new();
    vf.node_names = name_map_new();
    int rc = 0;
    if (!vf.listed_by || !vf.used || !vf.value_names || !vf.node_names) {
        rc = fail_at(&vf, (ir_loc){ 0, 0 }, "out of memory while verifying");
        goto done;
    }
    for (size_t v = 0; v < nv; v++)
        vf.listed_by[v] = -1;
    for (int32_t v = 0; v < g->n_values && rc == 0; v++)
        rc = verify_value(&vf, v);
    for (int32_t n = 0; n < g->n_nodes && rc == 0; n++)
        rc = verify_node(&vf, n);
    if (rc == 0)
        rc = verify_whole(&vf);
done:
    free(vf.listed_by);
    free(vf.used);
    name_map_free(vf.value_names);
    name_map_free(vf.node_names);
    return rc;
}
