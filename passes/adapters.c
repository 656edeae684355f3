/* adapters.c: the `adapters` pass: which parameters train, and LoRA.
 *
 * --lora rank=R,alpha=A,targets=q_proj,v_proj,... (pass_options.lora)
 * wraps every linear y = x·Wᵀ (+ b) whose weight is named <linear>.weight
 * with <linear> ending in a target (".q_proj", or the whole name) in
 * Hu et al.'s low-rank update, as PEFT computes it:
 *
 *   x' = mul(x, <linear>.lora_dropout.mask)           with dropout=P > 0 only
 *   a = linear(x', <linear>.lora_A.weight)            A [R, in]: (.., R)
 *   d = matmul(a, <linear>.lora_B.weight) transpose_b scale=alpha/R
 *                                                     B [out, R]: (.., out)
 *   y' = y + d                                        every reader of y reads y'
 *
 * A is initialised as PEFT does (torch's kaiming_uniform_ with a = sqrt(5):
 * uniform in +-1/sqrt(in)), B with zeros, so training starts from the base
 * model; every other parameter is frozen.  The new ops follow their linear
 * in the node order, so placement and the views see them in their layer.
 * A target that wraps no linear is an error listing the model's linears.
 * (GPT-2's Conv1D, transpose_w, has W [in, out]; A and B are the same.)
 *
 * Dropout (PEFT's lora_dropout: lora_B(lora_A(dropout(x)))): the mask is
 * an input of x's shape, init dropout(P), that the runtime fills each
 * micro-batch from (seed, step, the row's place in the global batch, the
 * mask's name): 0 with probability P, else 1/(1-P), so every plan draws
 * the same masks; 1 while validating (runtime/data.h, rt_dropout_mask).
 * A `mul` applies it; its backward multiplies the gradient by the same
 * mask, which the 1F1B stash keeps as it keeps the tokens.  Each adapter
 * its own mask, as each PEFT module has its own nn.Dropout.
 *
 * --freeze PATTERN (repeatable; pass_options.freeze) marks every parameter
 * whose name matches the glob (fnmatch(3): `*` and `?` match any
 * character, dots included; `[...]` a set) frozen (ir_value.frozen): it is
 * loaded or initialised like any other and then never changes.  Autodiff
 * treats it as a constant (no gradient; a backward op computes none for it
 * and skips the products that would), the optimizer gives it no update and
 * no moments, the comm pass no all-reduce, and the memory plan, the
 * estimator and OP-Fence see the bytes and the work it no longer needs.
 *
 * A pattern that matches no parameter is an error listing some of the
 * model's parameter names: a typo must not silently train everything.
 * An inference program (pass_options.inference) freezes every parameter:
 * nothing trains, and --frozen-dtype stores all the weights in 16 bits.
 * Runs after shapes, so the names are the model's as built.
 */
#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_edit.h"
#include "passes.h"

#define LORA_NAME_MAX 320

/* Item i's name for a list in a message (into scratch or the graph's), or
 * NULL when item i is not one to list. */
typedef const char *(*item_name_fn)(const ir_graph *g, int32_t i, char *scratch, size_t size);

/* "a, b, c, ... (N in all)": the first `most` of the n items' names. */
static void some_names(const ir_graph *g, int32_t n_items, item_name_fn name_of, int32_t most, char *buf, size_t n)
{
    int32_t shown = 0, total = 0;
    size_t at = 0;
    char scratch[LORA_NAME_MAX];
    buf[0] = '\0';
    for (int32_t i = 0; i < n_items; i++) {
        const char *name = name_of(g, i, scratch, sizeof scratch);
        if (!name)
            continue;
        total++;
        if (shown < most && at < n) {
            int w = snprintf(buf + at, n - at, "%s%s", shown ? ", " : "", name);
            at += w > 0 ? (size_t)w : 0;
            shown++;
        }
    }
    if (at < n)
        snprintf(buf + at, n - at, "%s (%d in all)", total > shown ? ", ..." : "", total);
}

static const char *param_name(const ir_graph *g, int32_t v, char *scratch, size_t size)
{
    (void)scratch, (void)size;
    return g->values[v].role == ROLE_PARAM ? ir_value_name(g, v) : NULL;
}

/* The linear (no ".weight") of forward node n when it is a linear whose
 * weight is a parameter named <linear>.weight: into buf; 0 when not. */
static int linear_name(const ir_graph *g, int32_t n, char *buf, size_t size)
{
    const ir_node *node = &g->nodes[n];
    if (node->op != OP_LINEAR || node->n_in < 2 || g->values[node->in[1]].role != ROLE_PARAM)
        return 0;
    const char *w = ir_value_name(g, node->in[1]);
    size_t len = strlen(w);
    if (len <= 7 || strcmp(w + len - 7, ".weight") != 0 || len - 7 >= size)
        return 0;
    memcpy(buf, w, len - 7);
    buf[len - 7] = '\0';
    return 1;
}

static int ends_with_module(const char *name, const char *target)
{
    size_t n = strlen(name), t = strlen(target);
    return t > 0 && t <= n && strcmp(name + n - t, target) == 0 && (t == n || name[n - t - 1] == '.');
}

static int32_t new_param(ir_graph *g, const char *name, int64_t rows, int64_t cols, ir_init init, ir_loc loc)
{
    int64_t dims[2] = { rows, cols };
    ir_shape shape = ir_shape_make(2, dims);
    int32_t v = ir_add_value(g, name, DT_F32, ROLE_PARAM, &shape, loc);
    if (v >= 0)
        g->values[v].init = init;
    return v;
}

/* Node n1 with input `in`, output `out` of `shape`; its node and value named name. */
static int32_t new_op(ir_graph *g, ir_op op, const char *name, ir_loc loc, const int32_t *in, int n_in,
                      const ir_shape *shape)
{
    int32_t n = ir_add_node(g, op, name, loc);
    if (n < 0)
        return -1;
    for (int k = 0; k < n_in; k++)
        if (ir_node_add_input(g, n, in[k]))
            return -1;
    int32_t out = ir_add_value(g, name, DT_F32, ROLE_ACTIVATION, shape, loc);
    if (out < 0 || ir_node_add_output(g, n, out))
        return -1;
    return n;
}

/* Node i's linear, unless it is an adapter's. */
static const char *model_linear_name(const ir_graph *g, int32_t i, char *scratch, size_t size)
{
    size_t len = linear_name(g, i, scratch, size) ? strlen(scratch) : 0;
    return len == 0 || (len > 7 && strcmp(scratch + len - 7, ".lora_A") == 0) ? NULL : scratch;
}

static int lora_wrap(ir_graph *g, const lora_spec *l, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    if (l->rank < 1 || !(l->alpha > 0) || l->n_targets < 1)
        return diag_set(err, file, 0, "--lora needs rank >= 1, alpha > 0 and at least one target");
    if (!(l->dropout >= 0.0 && l->dropout < 1.0))
        return diag_set(err, file, 0, "--lora dropout=%g: expected 0 <= dropout < 1", l->dropout);
    /* In the checkpoint's fusion.hypers: what fusionc export --adapter and --merge need. */
    if (ir_add_hyper_int(g, "lora_rank", l->rank) < 0 || ir_add_hyper_float(g, "lora_alpha", l->alpha) < 0 ||
        ir_add_hyper_float(g, "lora_dropout", l->dropout) < 0)
        return diag_set(err, file, 0, "out of memory");
    for (int32_t v = 0; v < g->n_values; v++) /* PEFT: only the adapters train */
        if (g->values[v].role == ROLE_PARAM)
            g->values[v].frozen = 1;
    int32_t n_old = g->n_nodes, *anchor = malloc(((size_t)4 * n_old + 1) * sizeof *anchor);
    int32_t wrapped[LORA_MAX_TARGETS] = { 0 };
    if (!anchor)
        return diag_set(err, file, 0, "out of memory");
    int rc = 0;
    for (int32_t i = 0; i < n_old && rc == 0; i++) {
        char lin[LORA_NAME_MAX], name[LORA_NAME_MAX + 32];
        if (g->nodes[i].phase == PHASE_BACKWARD || !linear_name(g, i, lin, sizeof lin))
            continue;
        int hit = 0;
        for (int32_t t = 0; t < l->n_targets; t++)
            if (ends_with_module(lin, l->targets[t])) {
                wrapped[t]++;
                hit = 1;
            }
        if (!hit)
            continue;
        ir_node base = g->nodes[i]; /* a copy: adding nodes may move the array */
        const ir_shape *w = &g->values[base.in[1]].shape;
        int tw = ir_node_int(&base, ATTR_TRANSPOSE_W, 0) != 0;
        int64_t in = w->dim[tw ? 0 : 1], out = w->dim[tw ? 1 : 0], R = l->rank;
        int32_t y = base.out[0], x = base.in[0];
        ir_shape mid = g->values[y].shape, full = mid;
        mid.dim[mid.rank - 1] = R;
        snprintf(name, sizeof name, "%s.lora_A.weight", lin);
        int32_t A = new_param(g, name, R, in, (ir_init){ INIT_UNIFORM, 1.0 / sqrt((double)in) }, base.loc);
        snprintf(name, sizeof name, "%s.lora_B.weight", lin);
        int32_t B = new_param(g, name, out, R, (ir_init){ INIT_ZEROS, 0.0 }, base.loc);
        if (A < 0 || B < 0) {
            rc = diag_set(err, file, 0, "out of memory");
            break;
        }
        int32_t k0 = g->n_nodes - n_old, xa = x; /* what A reads: x, or x dropped */
        if (l->dropout > 0.0) {
            ir_shape xs = g->values[x].shape;
            snprintf(name, sizeof name, "%s.lora_dropout.mask", lin);
            int32_t mask = ir_add_value(g, name, DT_F32, ROLE_INPUT, &xs, base.loc);
            snprintf(name, sizeof name, "%s.lora_dropout", lin);
            int32_t nd = mask < 0 ? -1 : new_op(g, OP_MUL, name, base.loc, (int32_t[]){ x, mask }, 2, &xs);
            if (nd < 0) {
                rc = diag_set(err, file, 0, "out of memory");
                break;
            }
            g->values[mask].init = (ir_init){ INIT_DROPOUT, l->dropout };
            xa = g->nodes[nd].out[0];
        }
        snprintf(name, sizeof name, "%s.lora_A", lin);
        int32_t na = new_op(g, OP_LINEAR, name, base.loc, (int32_t[]){ xa, A }, 2, &mid);
        snprintf(name, sizeof name, "%s.lora_B", lin);
        int32_t nb =
            na < 0 ? -1 : new_op(g, OP_MATMUL, name, base.loc, (int32_t[]){ g->nodes[na].out[0], B }, 2, &full);
        snprintf(name, sizeof name, "%s.lora", lin);
        int32_t ns = nb < 0 ? -1 : new_op(g, OP_ADD, name, base.loc, (int32_t[]){ y, g->nodes[nb].out[0] }, 2, &full);
        if (ns < 0 || ir_node_set_int(g, nb, ATTR_TRANSPOSE_B, 1) ||
            ir_node_set_float(g, nb, ATTR_SCALE, l->alpha / (double)R)) {
            rc = diag_set(err, file, 0, "out of memory");
            break;
        }
        for (int32_t k = k0; k < g->n_nodes - n_old; k++)
            anchor[k] = i;
        int32_t sum = g->nodes[ns].out[0];
        for (int32_t j = 0; j < g->n_nodes; j++) /* every other reader of y reads y + d */
            for (int k = 0; j != ns && k < g->nodes[j].n_in; k++)
                if (g->nodes[j].in[k] == y)
                    g->nodes[j].in[k] = sum;
        if (g->loss == y)
            g->loss = sum;
    }
    if (rc == 0 && graph_place_new_nodes(g, n_old, anchor, 1))
        rc = diag_set(err, file, 0, "out of memory");
    free(anchor);
    for (int32_t t = 0; t < l->n_targets && rc == 0; t++)
        if (wrapped[t] == 0) {
            char names[768];
            some_names(g, g->n_nodes, model_linear_name, 8, names, sizeof names);
            rc = diag_set(err, file, 0, "--lora target '%s' matches no linear of the model; its linears: %s",
                          l->targets[t], names);
        }
    return rc;
}

int pass_adapters(ir_graph *g, const pass_options *opt, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    for (int32_t v = 0; opt && opt->inference && v < g->n_values;
         v++) /* nothing trains: --frozen-dtype stores them all */
        if (g->values[v].role == ROLE_PARAM)
            g->values[v].frozen = 1;
    if (opt && opt->lora && opt->lora->rank > 0 && lora_wrap(g, opt->lora, err))
        return -1;
    for (int32_t i = 0; opt && i < opt->n_freeze; i++) {
        int32_t matched = 0;
        for (int32_t v = 0; v < g->n_values; v++) {
            if (g->values[v].role != ROLE_PARAM || fnmatch(opt->freeze[i], ir_value_name(g, v), 0) != 0)
                continue;
            g->values[v].frozen = 1;
            matched++;
        }
        if (matched == 0) {
            char names[512];
            some_names(g, g->n_values, param_name, 6, names, sizeof names);
            return diag_set(err, file, 0, "--freeze '%s' matches no parameter of the model; its parameters: %s",
                            opt->freeze[i], names);
        }
    }
    return 0;
}
