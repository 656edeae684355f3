/* autodiff.c: the `autodiff` pass (reverse-mode automatic differentiation).
 *
 * Appends to the forward graph the ops that compute d loss / d param for
 * every parameter, as ordinary IR ops with phase=backward:
 *
 *   - the seed: grad.<loss> = fill(1.0), a scalar;
 *   - for each forward op, last to first, that lies between a parameter and
 *     the loss: one backward op (op_table[op].backward) that reads what the
 *     rule needs (bwd_saves_in/out), the gradients of the op's outputs, and
 *     writes the gradient of each input that depends on a parameter;
 *   - where a value feeds several ops, its gradient contributions
 *     grad.<v>.1, grad.<v>.2, ... are summed by add ops into grad.<v>;
 *   - add passes its output's gradient through to both inputs (no op).
 *
 * Every parameter ends with a gradient value named grad.<param>, which the
 * optimizer pass looks up by that name; a frozen one (ir_value.frozen) is
 * a constant here: no gradient, and none flows into it.  Integer inputs (token ids,
 * targets) and values that do not depend on a parameter get no gradient.
 * Backward ops carry their forward op's attributes and source location, so
 * an error in one names the XML line of the op it differentiates.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/name_map.h"
#include "../ir/ops.h"
#include "passes.h"

#define GRAD_NAME_MAX 300

typedef struct {
    ir_graph *g;
    struct diag *err;
    char *needs_grad;  /* per value: depends on a parameter (float)          */
    char *relevant;    /* per forward node: on a path from a param to the loss */
    int32_t *expected; /* per value: gradient contributions it will receive   */
    int32_t **contrib; /* per value: the contributions so far                 */
    int32_t *n_contrib;
    name_map *value_names; /* every value's name -> its index: ir_find_value scans
                                  every value, quadratic over a model's gradients   */
} autodiff;

static int oom(autodiff *ad) { return diag_set(ad->err, ir_loc_file(ad->g, (ir_loc){ 0, 0 }), 0, "out of memory"); }

static int is_float(ir_dtype dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16; }

/* Does input i of forward node n get a gradient? */
static int input_wants_grad(const autodiff *ad, const ir_node *n, int i)
{
    const ir_value *v = &ad->g->values[n->in[i]];
    return ad->needs_grad[n->in[i]] && is_float(v->dtype);
}

/* Add a gradient value for `of` (a shape and dtype copy), named `name`,
 * produced by node n (or by nothing yet when n < 0). */
static int32_t new_grad_value(autodiff *ad, int32_t of, const char *name, int32_t n)
{
    ir_graph *g = ad->g;
    int64_t found;
    if (name_map_get(ad->value_names, name, &found))
        return diag_set(ad->err, ir_loc_file(g, g->values[of].loc), g->values[of].loc.line,
                        "a value is already named '%s'; the autodiff pass names gradients grad.<value>", name);
    ir_shape shape = g->values[of].shape;
    int32_t v = ir_add_value(g, name, g->values[of].dtype, ROLE_GRADIENT, &shape, g->values[of].loc);
    if (v < 0 || name_map_add(ad->value_names, name, v) < 0 || (n >= 0 && ir_node_add_output(g, n, v)))
        return oom(ad);
    return v;
}

/* The name of the next contribution to grad.<v>: grad.<v> when it will be
 * the only one, else grad.<v>.<k>. */
static void contribution_name(const autodiff *ad, int32_t v, char *buf, size_t size)
{
    const char *name = ir_value_name(ad->g, v);
    if (ad->expected[v] <= 1)
        snprintf(buf, size, "grad.%s", name);
    else
        snprintf(buf, size, "grad.%s.%d", name, ad->n_contrib[v] + 1);
}

static int add_contribution(autodiff *ad, int32_t v, int32_t grad)
{
    int32_t *grown = realloc(ad->contrib[v], ((size_t)ad->n_contrib[v] + 1) * sizeof *grown);
    if (!grown)
        return oom(ad);
    ad->contrib[v] = grown;
    grown[ad->n_contrib[v]++] = grad;
    return 0;
}

static int32_t add_node(autodiff *ad, ir_op op, const char *name, ir_loc loc)
{
    int32_t n = ir_add_node(ad->g, op, name, loc);
    if (n < 0)
        return oom(ad);
    ad->g->nodes[n].phase = PHASE_BACKWARD;
    return n;
}

/* The total gradient of value v: its one contribution, the sum of several
 * (add ops, pairwise left to right), or zeros when nothing reached it. */
static int32_t total_grad(autodiff *ad, int32_t v)
{
    ir_graph *g = ad->g;
    char name[GRAD_NAME_MAX];
    snprintf(name, sizeof name, "grad.%s", ir_value_name(g, v));
    if (ad->n_contrib[v] == 0) {
        int32_t n = add_node(ad, OP_FILL, name, g->values[v].loc);
        if (n < 0 || ir_node_set_float(g, n, ATTR_VALUE, 0.0))
            return n < 0 ? -1 : oom(ad);
        return new_grad_value(ad, v, name, n);
    }
    int32_t sum = ad->contrib[v][0];
    for (int k = 1; k < ad->n_contrib[v]; k++) {
        char partial[GRAD_NAME_MAX];
        if (k + 1 < ad->n_contrib[v])
            snprintf(partial, sizeof partial, "grad.%s.sum%d", ir_value_name(g, v), k);
        const char *out = k + 1 < ad->n_contrib[v] ? partial : name;
        int32_t n = add_node(ad, OP_ADD, out, g->values[v].loc);
        if (n < 0 || ir_node_add_input(g, n, sum) || ir_node_add_input(g, n, ad->contrib[v][k]))
            return n < 0 ? -1 : oom(ad);
        sum = new_grad_value(ad, v, out, n);
        if (sum < 0)
            return -1;
    }
    return sum;
}

/* Mark what needs a gradient and what lies on the way to the loss. */
static void mark(autodiff *ad, int32_t n_forward)
{
    ir_graph *g = ad->g;
    for (int32_t v = 0; v < g->n_values; v++)
        ad->needs_grad[v] = ir_value_trained(&g->values[v]);
    for (int32_t i = 0; i < n_forward; i++) {
        const ir_node *n = &g->nodes[i];
        int any = 0;
        for (int k = 0; k < n->n_in; k++)
            any |= input_wants_grad(ad, n, k);
        for (int k = 0; k < n->n_out; k++)
            ad->needs_grad[n->out[k]] = any && is_float(g->values[n->out[k]].dtype);
    }
    char *wanted = calloc((size_t)g->n_values + 1, 1);
    if (!wanted)
        return;
    wanted[g->loss] = 1;
    for (int32_t i = n_forward - 1; i >= 0; i--) {
        const ir_node *n = &g->nodes[i];
        int on_path = 0;
        for (int k = 0; k < n->n_out; k++)
            on_path |= wanted[n->out[k]] && ad->needs_grad[n->out[k]];
        ad->relevant[i] = (char)on_path;
        if (on_path)
            for (int k = 0; k < n->n_in; k++)
                if (input_wants_grad(ad, n, k)) {
                    wanted[n->in[k]] = 1;
                    ad->expected[n->in[k]]++;
                }
    }
    free(wanted);
}

/* The backward op of forward node i, from its outputs' total gradients. */
static int differentiate(autodiff *ad, int32_t i, const int32_t *out_grads)
{
    ir_graph *g = ad->g;
    ir_node fwd = g->nodes[i]; /* a copy: adding nodes may move the array */
    const op_def *def = &op_table[fwd.op];
    if (fwd.op == OP_ADD) {
        for (int k = 0; k < fwd.n_in; k++)
            if (input_wants_grad(ad, &fwd, k) && add_contribution(ad, fwd.in[k], out_grads[0]))
                return -1;
        return 0;
    }
    if (def->backward == OP_COUNT)
        return diag_set(ad->err, ir_loc_file(g, fwd.loc), fwd.loc.line,
                        "op '%s' (%s) has no backward rule, but a parameter's gradient flows through it",
                        ir_node_name(g, i), def->name);
    char name[GRAD_NAME_MAX];
    snprintf(name, sizeof name, "%s.backward", ir_node_name(g, i));
    int32_t b = add_node(ad, def->backward, name, fwd.loc);
    if (b < 0)
        return -1;
    for (int k = 0; k < fwd.n_in; k++)
        if ((def->bwd_saves_in >> k) & 1)
            if (ir_node_add_input(g, b, fwd.in[k]))
                return oom(ad);
    for (int k = 0; k < fwd.n_out; k++)
        if ((def->bwd_saves_out >> k) & 1)
            if (ir_node_add_input(g, b, fwd.out[k]))
                return oom(ad);
    for (int k = 0; k < fwd.n_out; k++)
        if (ir_node_add_input(g, b, out_grads[k]))
            return oom(ad);
    int64_t grads = 0;
    for (int k = 0; k < fwd.n_in; k++) {
        if (!input_wants_grad(ad, &fwd, k)) {
            /* concat: the slice is written (its offset needs every input's
             * size) and goes nowhere. */
            if (def->bwd_all_inputs && is_float(g->values[fwd.in[k]].dtype)) {
                grads |= (int64_t)1 << k;
                snprintf(name, sizeof name, "%s.backward.unused%d", ir_node_name(g, i), k);
                if (new_grad_value(ad, fwd.in[k], name, b) < 0)
                    return -1;
            }
            continue;
        }
        grads |= (int64_t)1 << k;
        contribution_name(ad, fwd.in[k], name, sizeof name);
        int32_t v = new_grad_value(ad, fwd.in[k], name, b);
        if (v < 0 || add_contribution(ad, fwd.in[k], v))
            return -1;
    }
    for (int k = 0; k < fwd.n_attr; k++)
        g->nodes[b].attr[g->nodes[b].n_attr++] = fwd.attr[k];
    if (ir_node_set_int(g, b, ATTR_GRADS, grads))
        return oom(ad);
    return 0;
}

int pass_autodiff(ir_graph *g, struct diag *err)
{
    if (g->loss < 0)
        return diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "the model has no loss to differentiate");
    const ir_value *loss = &g->values[g->loss];
    if (loss->shape.rank != 0 || loss->dtype != DT_F32)
        return diag_set(err, ir_loc_file(g, loss->loc), loss->loc.line,
                        "loss '%s' must be an f32 scalar to differentiate", ir_value_name(g, g->loss));
    int32_t n_forward = g->n_nodes, n_values = g->n_values, trained = 0, frozen = 0;
    for (int32_t v = 0; v < n_values; v++) {
        trained += ir_value_trained(&g->values[v]);
        frozen += g->values[v].frozen;
    }
    if (trained == 0 && frozen > 0)
        return diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0,
                        "every parameter of the model is frozen: nothing to train");
    for (int32_t i = 0; i < n_forward; i++)
        if (g->nodes[i].phase == PHASE_NONE)
            g->nodes[i].phase = PHASE_FORWARD;
    autodiff ad = { g,
                    err,
                    calloc((size_t)n_values + 1, 1),
                    calloc((size_t)n_forward + 1, 1),
                    calloc((size_t)n_values + 1, sizeof(int32_t)),
                    calloc((size_t)n_values + 1, sizeof(int32_t *)),
                    calloc((size_t)n_values + 1, sizeof(int32_t)),
                    name_map_new() };
    int rc = 0;
    for (int32_t v = 0; ad.value_names && v < n_values && rc == 0; v++)
        rc = name_map_add(ad.value_names, ir_value_name(g, v), v) < 0 ? -1 : 0;
    if (rc || !ad.needs_grad || !ad.relevant || !ad.expected || !ad.contrib || !ad.n_contrib || !ad.value_names) {
        rc = oom(&ad);
        goto done;
    }
    mark(&ad, n_forward);

    /* The seed: d loss / d loss = 1. */
    char name[GRAD_NAME_MAX];
    snprintf(name, sizeof name, "grad.%s", ir_value_name(g, g->loss));
    int32_t seed_node = add_node(&ad, OP_FILL, name, loss->loc);
    int32_t seed = seed_node < 0 ? -1 : new_grad_value(&ad, g->loss, name, seed_node);
    /* fp16: the seed is the loss scale, so small gradients stay above
     * fp16's subnormals (the runtime's scaler; clip_scale divides it out). */
    if (seed < 0 || ir_node_set_float(g, seed_node, ATTR_VALUE, 1.0) ||
        (g->precision == DT_F16 && ir_node_set_int(g, seed_node, ATTR_LOSS_SCALE, 1)) ||
        add_contribution(&ad, g->loss, seed)) {
        rc = -1;
        goto done;
    }
    for (int32_t i = n_forward - 1; i >= 0 && rc == 0; i--) {
        if (!ad.relevant[i])
            continue;
        int32_t out_grads[IR_MAX_OUT];
        ir_node fwd = g->nodes[i];
        for (int k = 0; k < fwd.n_out && rc == 0; k++) {
            /* grad.<loss> already is the seed; others are summed here. */
            out_grads[k] = fwd.out[k] == g->loss ? seed : total_grad(&ad, fwd.out[k]);
            rc = out_grads[k] < 0 ? -1 : 0;
        }
        if (rc == 0)
            rc = differentiate(&ad, i, out_grads);
    }
    /* Every parameter ends with grad.<param>: the sum of its contributions,
     * or a copy where its only gradient is another value's (a parameter
     * added directly). */
    for (int32_t v = 0; v < n_values && rc == 0; v++) {
        if (!ir_value_trained(&g->values[v]))
            continue;
        int32_t total = total_grad(&ad, v);
        if (total < 0) {
            rc = -1;
            break;
        }
        snprintf(name, sizeof name, "grad.%s", ir_value_name(g, v));
        if (strcmp(ir_value_name(g, total), name) != 0) {
            int32_t n = add_node(&ad, OP_COPY, name, g->values[v].loc);
            int32_t copy = n < 0 ? -1 : new_grad_value(&ad, v, name, n);
            rc = copy < 0 || ir_node_add_input(g, n, total) ? -1 : 0;
        }
    }
done:
    if (ad.contrib)
        for (int32_t v = 0; v < n_values; v++)
            free(ad.contrib[v]);
    free(ad.contrib);
    free(ad.n_contrib);
    free(ad.expected);
    free(ad.relevant);
    free(ad.needs_grad);
    name_map_free(ad.value_names);
    return rc;
}
