/* optimizer.c: the `optimizer` pass.  Appends the AdamW (or, with the
 * hyper-parameter sgd = 1, plain SGD) update of every parameter as IR ops
 * (phase=update), after autodiff:
 *
 *   optimizer.lr   = lr_schedule() lr warmup steps min_lr      this step's rate
 *   sumsq.<p>      = sum_squares(grad.<p>, previous sumsq)
 *   clip_scale     = clip_scale(last sumsq) max_norm loss_scale
 *   adamw.<p>      : adamw(p, grad.<p>, adamw.m.<p>, adamw.v.<p>, optimizer.lr, clip_scale)
 *
 *   sgd.<p>        : sgd(p, grad.<p>, optimizer.lr, clip_scale)   when sgd = 1
 *
 * with the moments adamw.m.<p>, adamw.v.<p> as state values (zeros).  SGD
 * is torch.optim.SGD without momentum (p -= lr (g + weight_decay p)): the
 * inner optimizer of diloco's own test (H = 1 and an outer step of lr 1 is
 * exact data parallelism with SGD), and a baseline.  The
 * hyper-parameters come from the model when it declares them, else these
 * defaults (torch.optim.AdamW's, except the schedule and clipping, which
 * are off):
 *
 *   lr 6e-4   beta1 0.9   beta2 0.999   adam_eps 1e-8   weight_decay 0
 *   grad_clip 0 (off)   warmup 0   steps 0 (constant rate)   min_lr 0
 *
 * In an fp16 graph the gradients come scaled by the runtime's loss scale
 * (autodiff's seed): clip_scale (loss_scale=1) divides it out, clips when
 * grad_clip > 0, and is NaN when a gradient overflowed, which makes every
 * adamw skip the step (torch.cuda.amp.GradScaler's rule; runtime/exec.c).
 *
 * The gradient norm is always summed, clipping or not: every step's line
 * reports it, and a run may turn clipping on (--grad-clip) without a
 * compile.  What the ops hold (lr, warmup, steps, min_lr, max_norm, the
 * decay) are the run's defaults: the device programs read them back and
 * let their options override them (runtime/train_settings.h).
 *
 * A frozen parameter (ir_value.frozen) has no gradient and gets no update.
 *
 * Weight decay applies to matrices and kernels (rank >= 2) and not to
 * biases and norm scales, the convention of GPT-2 and llm.c training.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/name_map.h"
#include "../ir/ops.h"
#include "passes.h"

#define OPT_NAME_MAX 300

static double hyper(const ir_graph *g, const char *name, double fallback)
{
    for (int32_t i = 0; i < g->n_hypers; i++)
        if (strcmp(ir_str(g, g->hypers[i].name), name) == 0)
            return g->hypers[i].is_float ? g->hypers[i].f : (double)g->hypers[i].i;
    return fallback;
}

static int oom(const ir_graph *g, struct diag *err)
{
    return diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "out of memory");
}

/* A node of phase update with one scalar output named like it. */
static int32_t scalar_node(ir_graph *g, ir_op op, const char *name, ir_loc loc, int32_t *out)
{
    int32_t n = ir_add_node(g, op, name, loc);
    if (n < 0)
        return -1;
    g->nodes[n].phase = PHASE_UPDATE;
    ir_shape scalar = ir_shape_make(0, NULL);
    *out = ir_add_value(g, name, DT_F32, ROLE_ACTIVATION, &scalar, loc);
    if (*out < 0 || ir_node_add_output(g, n, *out))
        return -1;
    return n;
}

static int32_t state_like(ir_graph *g, const char *prefix, int32_t p)
{
    char name[OPT_NAME_MAX];
    snprintf(name, sizeof name, "%s.%s", prefix, ir_value_name(g, p));
    ir_shape shape = g->values[p].shape;
    int32_t v = ir_add_value(g, name, g->values[p].dtype, ROLE_STATE, &shape, g->values[p].loc);
    if (v >= 0)
        g->values[v].init = (ir_init){ INIT_ZEROS, 0.0 };
    return v;
}

int pass_optimizer(ir_graph *g, struct diag *err)
{
    double lr = hyper(g, "lr", 6e-4), clip = hyper(g, "grad_clip", 0.0);
    double beta1 = hyper(g, "beta1", 0.9), beta2 = hyper(g, "beta2", 0.999), eps = hyper(g, "adam_eps", 1e-8);
    double wd = hyper(g, "weight_decay", 0.0), min_lr = hyper(g, "min_lr", 0.0);
    int64_t warmup = (int64_t)hyper(g, "warmup", 0), steps = (int64_t)hyper(g, "steps", 0);
    double sgd = hyper(g, "sgd", 0.0);
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    if (!(lr > 0) || !(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1) || !(eps > 0) || !(wd >= 0) ||
        !(clip >= 0) || warmup < 0 || steps < 0 || !(min_lr >= 0 && min_lr <= lr))
        return diag_set(err, file, 0,
                        "optimizer hyper-parameters out of range: need lr > 0, 0 <= beta1, beta2 < 1, adam_eps > 0, "
                        "weight_decay >= 0, grad_clip >= 0, warmup >= 0, steps >= 0, 0 <= min_lr <= lr");
    if (sgd != 0.0 && sgd != 1.0)
        return diag_set(err, file, 0, "the hyper-parameter sgd is %g: 0 (AdamW) or 1 (plain SGD)", sgd);
    if (steps > 0 && warmup >= steps)
        return diag_set(err, file, 0, "warmup (%lld) must be shorter than steps (%lld)", (long long)warmup,
                        (long long)steps);

    int32_t n_values = g->n_values, lr_value, n;
    n = scalar_node(g, OP_LR_SCHEDULE, "optimizer.lr", (ir_loc){ 0, 0 }, &lr_value);
    if (n < 0 || ir_node_set_float(g, n, ATTR_LR, lr) || ir_node_set_int(g, n, ATTR_WARMUP, warmup) ||
        ir_node_set_int(g, n, ATTR_STEPS, steps) || ir_node_set_float(g, n, ATTR_MIN_LR, min_lr))
        return oom(g, err);

    /* Each param's gradient, by the name autodiff gives it, from a map of
     * the value names (ir_find_value scans every value: quadratic over a
     * model's params).  The verifier keeps value names unique. */
    int32_t *grad_of = malloc(((size_t)n_values + 1) * sizeof *grad_of);
    name_map *by_name = name_map_new();
    for (int32_t v = 0; by_name && v < g->n_values; v++)
        if (name_map_add(by_name, ir_value_name(g, v), v) < 0) {
            name_map_free(by_name);
            by_name = NULL;
        }
    if (!grad_of || !by_name) {
        free(grad_of);
        name_map_free(by_name);
        return oom(g, err);
    }
    int32_t sumsq = -1, scale = -1;
    int rc = 0, scaled = g->precision == DT_F16;
    for (int32_t p = 0; p < n_values && rc == 0; p++) {
        grad_of[p] = -1;
        if (!ir_value_trained(&g->values[p]))
            continue;
        char name[OPT_NAME_MAX];
        snprintf(name, sizeof name, "grad.%s", ir_value_name(g, p));
        int64_t found;
        grad_of[p] = name_map_get(by_name, name, &found) ? (int32_t)found : -1;
        if (grad_of[p] < 0) {
            rc = diag_set(err, ir_loc_file(g, g->values[p].loc), g->values[p].loc.line,
                          "param '%s' has no gradient '%s': the optimizer runs after autodiff", ir_value_name(g, p),
                          name);
        } else {
            snprintf(name, sizeof name, "sumsq.%s", ir_value_name(g, p));
            int32_t acc;
            n = scalar_node(g, OP_SUM_SQUARES, name, g->values[p].loc, &acc);
            if (n < 0 || ir_node_add_input(g, n, grad_of[p]) || (sumsq >= 0 && ir_node_add_input(g, n, sumsq)))
                rc = oom(g, err);
            sumsq = acc;
        }
    }
    name_map_free(by_name);
    if (rc == 0 && sumsq >= 0) {
        n = scalar_node(g, OP_CLIP_SCALE, "clip_scale", (ir_loc){ 0, 0 }, &scale);
        if (n < 0 || ir_node_add_input(g, n, sumsq) || ir_node_set_float(g, n, ATTR_MAX_NORM, clip) ||
            (scaled && ir_node_set_int(g, n, ATTR_LOSS_SCALE, 1)))
            rc = oom(g, err);
    }
    for (int32_t p = 0; p < n_values && rc == 0; p++) {
        if (!ir_value_trained(&g->values[p]))
            continue;
        char name[OPT_NAME_MAX];
        double decay = g->values[p].shape.rank >= 2 ? wd : 0.0;
        if (sgd == 1.0) {
            snprintf(name, sizeof name, "sgd.%s", ir_value_name(g, p));
            n = ir_add_node(g, OP_SGD, name, g->values[p].loc);
            if (n < 0 || ir_node_add_input(g, n, p) || ir_node_add_input(g, n, grad_of[p]) ||
                ir_node_add_input(g, n, lr_value) || (scale >= 0 && ir_node_add_input(g, n, scale)) ||
                ir_node_set_float(g, n, ATTR_WEIGHT_DECAY, decay))
                rc = oom(g, err);
            else
                g->nodes[n].phase = PHASE_UPDATE;
            continue;
        }
        int32_t m = state_like(g, "adamw.m", p), v = state_like(g, "adamw.v", p);
        snprintf(name, sizeof name, "adamw.%s", ir_value_name(g, p));
        n = m < 0 || v < 0 ? -1 : ir_add_node(g, OP_ADAMW, name, g->values[p].loc);
        if (n < 0) {
            rc = oom(g, err);
            break;
        }
        g->nodes[n].phase = PHASE_UPDATE;
        int32_t ins[6] = { p, grad_of[p], m, v, lr_value, scale };
        for (int k = 0; k < (scale >= 0 ? 6 : 5) && rc == 0; k++)
            if (ir_node_add_input(g, n, ins[k]))
                rc = oom(g, err);
        if (rc == 0 && (ir_node_set_float(g, n, ATTR_BETA1, beta1) || ir_node_set_float(g, n, ATTR_BETA2, beta2) ||
                        ir_node_set_float(g, n, ATTR_EPS, eps) || ir_node_set_float(g, n, ATTR_WEIGHT_DECAY, decay)))
            rc = oom(g, err);
    }
    free(grad_of);
    return rc;
}

int32_t optimizer_update_stage(const ir_graph *g, const char *name)
{
    int32_t v = ir_find_value(g, name);
    for (int32_t i = 0; v >= 0 && i < g->n_nodes; i++)
        if (op_updates_param(g->nodes[i].op) && g->nodes[i].n_in > 0 && g->nodes[i].in[0] == v)
            return g->nodes[i].stage >= 0 ? g->nodes[i].stage : 0;
    return -1;
}
