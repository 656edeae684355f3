/* stats.c: model statistics (parameters, FLOPs, activation bytes) from a
 * graph whose shapes are known; what `fusionc stats` prints. */
#include <string.h>

#include "../ir/ops.h"
#include "passes.h"

int model_stats_compute(const ir_graph *g, model_stats *s, struct diag *err)
{
    memset(s, 0, sizeof *s);
    s->batch = 1;
    int have_batch = 0;
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        if (val->shape.rank < 0)
            return diag_set(err, ir_str(g, val->loc.file), val->loc.line,
                            "value '%s' has no shape: run the shapes pass first", ir_value_name(g, v));
        int64_t bytes = ir_value_bytes(g, v);
        switch (val->role) {
        case ROLE_PARAM:
            s->params += ir_shape_numel(&val->shape);
            s->trained += val->frozen ? 0 : ir_shape_numel(&val->shape);
            s->param_bytes += bytes;
            break;
        case ROLE_INPUT:
            s->input_bytes += bytes;
            if (!have_batch && val->shape.rank > 0) {
                s->batch = val->shape.dim[0];
                have_batch = 1;
            }
            break;
        case ROLE_STATE:
            s->state_bytes += bytes;
            break;
        case ROLE_ACTIVATION:
            if (val->producer < 0 || g->nodes[val->producer].phase != PHASE_BACKWARD)
                s->activation_bytes += bytes;
            break;
        default:
            break;
        }
    }
    s->arena_bytes = memory_arena_bytes(g, 0);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        const op_def *def = &op_table[n->op];
        if (n->phase != PHASE_FORWARD && n->phase != PHASE_NONE)
            continue; /* the forward op's entry counts its backward FLOPs */
        s->n_ops++;
        s->flops_forward += def->flops_forward(g, n);
        s->flops_backward += def->flops_backward(g, n);
    }
    return 0;
}
