/* prefill.c: the `prefill` pass (pass_options.prefill = P > 0, in an
 * inference graph): a second copy of the decode pass's step that takes P
 * tokens a sequence at once (at most the cache's ctx), for a prompt.
 *
 * One token a step reads every weight for one token: a prompt of n
 * tokens read that way costs n passes over the weights, where P at a time
 * cost n / P, each a product of P rows (compute-bound rather than
 * bandwidth-bound).  So the program holds both steps over one arena:
 *
 *   the copy     every op of the step again, named prefill.<name>, in
 *                PHASE_PREFILL (the device program runs it as its own
 *                step, fusion_prefill); it reads the same parameters and
 *                the same key/value caches (its attention_cached writes
 *                the P keys and values where its positions say, and each
 *                token attends up to its own position);
 *   its inputs   prefill.<tokens> and prefill.pos, (B, P) i32: the
 *                runtime feeds a chunk of the prompt and its positions
 *                (a short last chunk repeats its last token at its
 *                position: the same key and value written twice);
 *   its result   prefill.<logits> (B, P, V): ir_graph.prefill_output;
 *   its place    each op on its twin's stage and device: the fence pass
 *                placed the one-token step, and the prompt takes the
 *                same path (the comm pass cuts the copy's edges as it
 *                cuts the twins').
 *
 * The copy's shapes come from the ops' shape rules with T = P; its dtypes
 * are the twins' (the precision pass chose them).  Runs after the fence
 * pass and before the comm pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "passes.h"

#define PREFILL_NAME_MAX 320

/* The copy of value v: the same parameter or state, a (B, P) input of
 * its own, or a new value of unknown shape.  -1 out of memory. */
static int32_t copy_value(ir_graph *g, int32_t v, int64_t P)
{
    const ir_value *val = &g->values[v];
    if (val->role != ROLE_INPUT && val->producer < 0) /* a parameter, the caches: shared */
        return v;
    char name[PREFILL_NAME_MAX];
    snprintf(name, sizeof name, "prefill.%s", ir_value_name(g, v));
    ir_shape shape = val->shape;
    if (val->role == ROLE_INPUT)
        shape.dim[1] = P; /* (B, 1) becomes (B, P) */
    else
        shape.rank = -1; /* the shape rules say */
    ir_loc loc = val->loc;
    ir_dtype dtype = val->dtype;
    ir_role role = val->role;
    return ir_add_value(g, name, dtype, role, &shape, loc);
}

/* Node i's copy's output shapes from its inputs' (the op's shape rule),
 * the dtypes its twin's.  0, or -1 with err. */
static int infer_copy(ir_graph *g, int32_t copy, int32_t twin, struct diag *err)
{
    ir_node *n = &g->nodes[copy];
    const op_def *def = &op_table[n->op];
    ir_shape shapes[IR_MAX_OUT];
    ir_dtype dtypes[IR_MAX_OUT];
    memset(shapes, 0, sizeof shapes);
    if (def->shape(g, n, shapes, dtypes, err)) {
        diag_prefix(err, "prefill: op '%s' (%s): ", ir_node_name(g, copy), def->name);
        return -1;
    }
    for (int k = 0; k < n->n_out; k++) {
        g->values[n->out[k]].shape = shapes[k];
        g->values[n->out[k]].dtype = g->values[g->nodes[twin].out[k]].dtype;
    }
    return 0;
}

int pass_prefill(ir_graph *g, const pass_options *opt, struct diag *err)
{
    if (!opt || opt->prefill <= 0)
        return 0;
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    if (g->output < 0)
        return diag_set(err, file, 0, "--prefill needs an inference program (--inference)");
    int32_t tokens = -1;
    for (int32_t v = 0; v < g->n_values && tokens < 0; v++)
        if (g->values[v].role == ROLE_INPUT && g->values[v].shape.rank == 2)
            tokens = v;
    if (tokens < 0 || g->values[tokens].shape.dim[1] != 1)
        return diag_set(err, file, 0, "--prefill %lld: the step it copies must take one token a sequence (seq=1)",
                        (long long)opt->prefill);
    int64_t P = opt->prefill;
    for (int32_t v = 0; v < g->n_values; v++) /* the caches (B, ctx, KV*D): a chunk of at most ctx */
        if (g->values[v].role == ROLE_STATE && g->values[v].shape.rank == 3 && P > g->values[v].shape.dim[1])
            P = g->values[v].shape.dim[1];
    int32_t n_old = g->n_nodes, V = g->n_values;
    int32_t *map = calloc((size_t)V + 1, sizeof *map); /* value -> its copy; 0 before: not touched */
    if (!map)
        return diag_set(err, file, 0, "out of memory");
    for (int32_t i = 0; i < n_old; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            map[g->nodes[i].in[k]] = 1;
    int rc = 0;
    for (int32_t v = 0; v < V && rc == 0; v++) {
        map[v] = map[v] || g->values[v].producer >= 0 ? copy_value(g, v, P) : v;
        rc = map[v] < 0 ? diag_set(err, file, 0, "out of memory") : 0;
    }
    for (int32_t i = 0; i < n_old && rc == 0; i++) {
        char name[PREFILL_NAME_MAX];
        snprintf(name, sizeof name, "prefill.%s", ir_node_name(g, i));
        int32_t c = ir_add_node(g, g->nodes[i].op, name, g->nodes[i].loc);
        if (c < 0) {
            rc = diag_set(err, file, 0, "out of memory");
            break;
        }
        ir_node *twin = &g->nodes[i], *n = &g->nodes[c];
        memcpy(n->attr, twin->attr, sizeof n->attr);
        n->n_attr = twin->n_attr;
        n->stage = twin->stage;
        n->device = twin->device;
        n->phase = PHASE_PREFILL;
        n->est_time = twin->est_time * (double)P;
        for (int k = 0; k < twin->n_in && rc == 0; k++)
            rc = ir_node_add_input(g, c, map[g->nodes[i].in[k]]);
        for (int k = 0; k < g->nodes[i].n_out && rc == 0; k++)
            rc = ir_node_add_output(g, c, map[g->nodes[i].out[k]]);
        if (rc)
            rc = diag_set(err, file, 0, "out of memory");
        else
            rc = infer_copy(g, c, i, err);
    }
    if (rc == 0)
        g->prefill_output = map[g->output];
    free(map);
    return rc;
}
