/* shapes.c: the `shapes` pass.  Infers the shape and dtype of every op's
 * outputs from its inputs, in topological order, with the op's shape rule
 * from op_table[].  A mismatch names the op, its type, its XML file:line and
 * the shapes involved.  Outputs whose shapes are already known (a graph read
 * back from its text form) must agree with the rule. */
#include <string.h>

#include "../ir/ops.h"
#include "passes.h"

/* retype: the graph's precision changed, so the dtypes already there are
 * replaced by the rules' rather than checked against them. */
static int infer(ir_graph *g, int retype, struct diag *err)
{
    for (int32_t i = 0; i < g->n_nodes; i++) {
        ir_node *n = &g->nodes[i];
        const op_def *def = &op_table[n->op];
        const char *file = ir_loc_file(g, n->loc);
        for (int k = 0; k < n->n_in; k++)
            if (g->values[n->in[k]].shape.rank < 0)
                return diag_set(err, file, n->loc.line, "op '%s' (%s): input '%s' has no shape yet", ir_node_name(g, i),
                                def->name, ir_value_name(g, n->in[k]));
        ir_shape shapes[IR_MAX_OUT];
        ir_dtype dtypes[IR_MAX_OUT];
        memset(shapes, 0, sizeof shapes);
        if (def->shape(g, n, shapes, dtypes, err)) {
            err->line = n->loc.line;
            snprintf(err->file, sizeof err->file, "%s", file);
            diag_prefix(err, "op '%s' (%s): ", ir_node_name(g, i), def->name);
            return -1;
        }
        for (int k = 0; k < n->n_out; k++) {
            ir_value *v = &g->values[n->out[k]];
            char want[128], have[128];
            for (int d = 0; d < shapes[k].rank; d++)
                if (shapes[k].dim[d] > IR_DIM_MAX)
                    return diag_set(err, file, n->loc.line,
                                    "op '%s' (%s): output '%s' dimension %d would be %lld, more than %lld",
                                    ir_node_name(g, i), def->name, ir_value_name(g, n->out[k]), d + 1,
                                    (long long)shapes[k].dim[d], (long long)IR_DIM_MAX);
            if (ir_shape_numel(&shapes[k]) < 0)
                return diag_set(err, file, n->loc.line, "op '%s' (%s): output '%s' would be %s, an absurd size",
                                ir_node_name(g, i), def->name, ir_value_name(g, n->out[k]),
                                ir_shape_str(&shapes[k], want, sizeof want));
            if (v->shape.rank >= 0 && (!ir_shape_equal(&v->shape, &shapes[k]) || (!retype && v->dtype != dtypes[k])))
                return diag_set(err, file, n->loc.line,
                                "op '%s' (%s): output '%s' is declared %s%s but the inputs give %s%s",
                                ir_node_name(g, i), def->name, ir_value_name(g, n->out[k]), ir_dtype_name(v->dtype),
                                ir_shape_str(&v->shape, have, sizeof have), ir_dtype_name(dtypes[k]),
                                ir_shape_str(&shapes[k], want, sizeof want));
            v->shape = shapes[k];
            v->dtype = dtypes[k];
        }
    }
    return 0;
}

int pass_shapes(ir_graph *g, struct diag *err) { return infer(g, 0, err); }

/* --frozen-dtype: the frozen parameters (the adapters pass marked them)
 * stored in `dtype`.  They need no f32 master copy, as nothing updates
 * them; a product reads a 16-bit one as it is (a 16-bit operand makes a
 * 16-bit product, runtime/op_layout.c), every other op widens it.  One
 * 16-bit type per graph: cuBLAS multiplies two operands of one type, so a
 * 16-bit dtype must be the precision's when that is 16-bit. */
static const char *cli_dtype_name(ir_dtype dt) { return dt == DT_F16 ? "fp16" : dt == DT_BF16 ? "bf16" : "fp32"; }

static int store_frozen(ir_graph *g, ir_dtype dtype, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    if (dtype == DT_F32)
        return 0;
    if (dtype != DT_BF16 && dtype != DT_F16)
        return diag_set(err, file, 0, "--frozen-dtype %s: expected fp32, bf16 or fp16", ir_dtype_name(dtype));
    if (g->precision != DT_F32 && g->precision != dtype)
        return diag_set(err, file, 0,
                        "--frozen-dtype %s with --precision %s: a matrix product cannot mix two 16-bit types "
                        "(give --frozen-dtype %s)",
                        cli_dtype_name(dtype), cli_dtype_name(g->precision), cli_dtype_name(g->precision));
    int32_t frozen = 0;
    for (int32_t v = 0; v < g->n_values; v++)
        if (g->values[v].role == ROLE_PARAM && g->values[v].frozen) {
            g->values[v].dtype = dtype;
            frozen++;
        }
    if (frozen == 0)
        return diag_set(err, file, 0, "--frozen-dtype %s: no parameter is frozen (give --freeze or --lora)",
                        cli_dtype_name(dtype));
    return 0;
}

/* The precision pass: the graph's precision from --precision, then every
 * value a model op makes is stored in it (the shape rules say so, see
 * ops_shape.c's float_out), except the loss, which cross-entropy makes in
 * f32.  Parameters stay f32 (they are the master copy the optimizer
 * updates), and so do their gradients and AdamW's moments, which autodiff
 * and the optimizer pass make in the dtype of the parameter; a matrix
 * product rounds its f32 weight to the precision as it reads it (the
 * runtime, as autocast does).  The gradients of activations take the
 * activations' dtype, and so do the dropout masks (inputs of init
 * dropout) that multiply activations.  Frozen parameters: store_frozen. */
int pass_precision(ir_graph *g, const pass_options *opt, struct diag *err)
{
    if (opt->precision != DT_F32 && opt->precision != DT_BF16 && opt->precision != DT_F16)
        return diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "precision %s: expected f32, bf16 or f16",
                        ir_dtype_name(opt->precision));
    if (opt->tf32 && opt->precision != DT_F32)
        return diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "tf32 is for f32 compiles, not %s",
                        ir_dtype_name(opt->precision));
    g->precision = opt->precision;
    g->tf32 = opt->tf32;
    if (store_frozen(g, opt->frozen_dtype, err))
        return -1;
    for (int32_t v = 0; v < g->n_values; v++) /* LoRA's dropout masks: as the activations they multiply */
        if (g->values[v].role == ROLE_INPUT && g->values[v].init.kind == INIT_DROPOUT)
            g->values[v].dtype = g->precision;
    return infer(g, 1, err);
}
