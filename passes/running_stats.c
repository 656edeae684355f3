/* running_stats.c: batch norm's running mean and variance.
 *
 * A batchnorm normalises a training batch by the batch's own statistics;
 * a model being validated (or used) has no batch to speak of, and
 * normalises by running statistics instead: what training saw, averaged.
 * This pass gives every batchnorm of three inputs (x, w, b) its two, as
 * PyTorch's BatchNorm2d has them:
 *
 *   <prefix>.running_mean   state, f32 [C], zeros
 *   <prefix>.running_var    state, f32 [C], ones
 *
 * <prefix> is the weight's name without its last component (bn1.w ->
 * bn1, layer.1.0.downsample.1.w -> layer.1.0.downsample.1: PyTorch's
 * names where the weight is PyTorch's), or the node's name when the
 * weight's has no dot.  They become the node's inputs 3 and 4.
 *
 * The runtime (runtime/cpu/norm.c, codegen/cuda_kernels_nn.c) folds each
 * training forward's statistics in, r = (1 - momentum) r + momentum s with
 * the unbiased variance, leaves them alone on a recompute's replay, and
 * normalises by them when it validates; replicas average theirs after every
 * step (runtime/stepper.c), and checkpoints keep them as any state.  No
 * gradient reaches them: they are not parameters. */
#include <stdio.h>
#include <string.h>

#include "passes.h"

#define STAT_NAME_MAX 512

static int32_t add_statistic(ir_graph *g, int32_t n, const char *prefix, const char *what, int64_t C, ir_init_kind init,
                             struct diag *err)
{
    char name[STAT_NAME_MAX];
    snprintf(name, sizeof name, "%s.%s", prefix, what);
    if (ir_find_value(g, name) >= 0)
        return diag_set(err, ir_loc_file(g, g->nodes[n].loc), g->nodes[n].loc.line,
                        "batchnorm '%s': its running statistic would be '%s', a name the model already uses",
                        ir_node_name(g, n), name);
    ir_shape s = ir_shape_make(1, (int64_t[]){ C });
    int32_t v = ir_add_value(g, name, DT_F32, ROLE_STATE, &s, g->nodes[n].loc);
    if (v < 0 || ir_node_add_input(g, n, v))
        return diag_set(err, ir_loc_file(g, g->nodes[n].loc), 0, "out of memory");
    g->values[v].init = (ir_init){ init, 0.0 };
    return 0;
}

int pass_running_stats(ir_graph *g, const pass_options *opt, struct diag *err)
{
    (void)opt;
    for (int32_t n = 0; n < g->n_nodes; n++) {
        const ir_node *node = &g->nodes[n];
        if (node->op != OP_BATCHNORM || node->n_in != 3)
            continue;
        char prefix[STAT_NAME_MAX];
        const char *w = ir_value_name(g, node->in[1]), *dot = strrchr(w, '.');
        if (dot)
            snprintf(prefix, sizeof prefix, "%.*s", (int)(dot - w), w);
        else
            snprintf(prefix, sizeof prefix, "%s", ir_node_name(g, n));
        int64_t C = g->values[node->in[1]].shape.dim[0];
        if (add_statistic(g, n, prefix, "running_mean", C, INIT_ZEROS, err) ||
            add_statistic(g, n, prefix, "running_var", C, INIT_ONES, err))
            return -1;
    }
    return 0;
}
