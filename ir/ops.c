/* ops.c: the operator table (see ops.h).  One entry per op: inputs,
 * attributes, shape rule, and cost.  Shape rules and costs are in
 * ops_shape.c and ops_cost.c, declared in ops_rules.h. */
#include "ops.h"

#include <string.h>

#include "ops_rules.h"

static const char *const attr_names[ATTR_KEY_COUNT] = {
    [ATTR_EPS] = "eps",         [ATTR_HEADS] = "heads",   [ATTR_STRIDE] = "stride",
    [ATTR_PAD] = "pad",         [ATTR_KERNEL] = "kernel", [ATTR_CAUSAL] = "causal",
    [ATTR_TRANSPOSE_B] = "transpose_b", [ATTR_SCALE] = "scale",
};

static const attr_type attr_types[ATTR_KEY_COUNT] = {
    [ATTR_EPS] = ATTR_FLOAT, [ATTR_HEADS] = ATTR_INT,  [ATTR_STRIDE] = ATTR_INT,
    [ATTR_PAD] = ATTR_INT,   [ATTR_KERNEL] = ATTR_INT, [ATTR_CAUSAL] = ATTR_INT,
    [ATTR_TRANSPOSE_B] = ATTR_INT, [ATTR_SCALE] = ATTR_FLOAT,
};

#define REQ_INT(k)          { k, ATTR_INT, 1, 0, 0 }
#define OPT_INT(k, d)       { k, ATTR_INT, 0, d, 0 }
#define OPT_FLOAT(k, d)     { k, ATTR_FLOAT, 0, 0, d }

/*  name              in: min max  out  input names               attributes                                         shape                 flops fwd               flops bwd               bytes */
const op_def op_table[OP_COUNT] = {
    [OP_EMBEDDING]      = { "embedding",      2, 2, 1, { "idx", "table" }, 0, { { 0 } },
                            shape_embedding, flops_embedding, flops_embedding_bwd, bytes_io },
    [OP_POSITIONS]      = { "positions",      1, 1, 1, { "idx" }, 0, { { 0 } },
                            shape_positions, flops_zero, flops_zero, bytes_io },
    [OP_LINEAR]         = { "linear",         2, 3, 1, { "x", "w", "b" }, 0, { { 0 } },
                            shape_linear, flops_linear, flops_linear_bwd, bytes_io },
    [OP_MATMUL]         = { "matmul",         2, 2, 1, { "a", "b" }, 2,
                            { OPT_INT(ATTR_TRANSPOSE_B, 0), OPT_FLOAT(ATTR_SCALE, 1.0) },
                            shape_matmul, flops_matmul, flops_matmul_bwd, bytes_io },
    [OP_LAYERNORM]      = { "layernorm",      3, 3, 1, { "x", "w", "b" }, 1, { OPT_FLOAT(ATTR_EPS, 1e-5) },
                            shape_layernorm, flops_layernorm, flops_layernorm_bwd, bytes_io },
    [OP_GELU]           = { "gelu",           1, 1, 1, { "x" }, 0, { { 0 } },
                            shape_same_as_first, flops_gelu, flops_gelu_bwd, bytes_io },
    [OP_ATTENTION]      = { "attention",      1, 1, 1, { "qkv" }, 1, { REQ_INT(ATTR_HEADS) },
                            shape_attention, flops_attention, flops_attention_bwd, bytes_io },
    [OP_QKV_SPLIT]      = { "qkv_split",      1, 1, 3, { "qkv" }, 1, { REQ_INT(ATTR_HEADS) },
                            shape_qkv_split, flops_zero, flops_zero, bytes_io },
    [OP_MERGE_HEADS]    = { "merge_heads",    1, 1, 1, { "y" }, 0, { { 0 } },
                            shape_merge_heads, flops_zero, flops_zero, bytes_io },
    [OP_SOFTMAX]        = { "softmax",        1, 1, 1, { "x" }, 1, { OPT_INT(ATTR_CAUSAL, 0) },
                            shape_same_as_first, flops_softmax, flops_softmax_bwd, bytes_io },
    [OP_ADD]            = { "add",            2, 2, 1, { "a", "b" }, 0, { { 0 } },
                            shape_add, flops_elementwise_1, flops_zero, bytes_io },
    [OP_CROSS_ENTROPY]  = { "cross_entropy",  2, 2, 1, { "logits", "targets" }, 0, { { 0 } },
                            shape_cross_entropy, flops_cross_entropy, flops_cross_entropy_bwd, bytes_io },
    [OP_CONV2D]         = { "conv2d",         2, 3, 1, { "x", "w", "b" }, 2,
                            { OPT_INT(ATTR_STRIDE, 1), OPT_INT(ATTR_PAD, 0) },
                            shape_conv2d, flops_conv2d, flops_conv2d_bwd, bytes_io },
    [OP_BATCHNORM]      = { "batchnorm",      3, 3, 1, { "x", "w", "b" }, 1, { OPT_FLOAT(ATTR_EPS, 1e-5) },
                            shape_batchnorm, flops_layernorm, flops_layernorm_bwd, bytes_io },
    [OP_RELU]           = { "relu",           1, 1, 1, { "x" }, 0, { { 0 } },
                            shape_same_as_first, flops_elementwise_1, flops_elementwise_1, bytes_io },
    [OP_MAXPOOL]        = { "maxpool",        1, 1, 1, { "x" }, 3,
                            { REQ_INT(ATTR_KERNEL), OPT_INT(ATTR_STRIDE, 0), OPT_INT(ATTR_PAD, 0) },
                            shape_maxpool, flops_maxpool, flops_elementwise_1, bytes_io },
    [OP_AVGPOOL_GLOBAL] = { "avgpool_global", 1, 1, 1, { "x" }, 0, { { 0 } },
                            shape_avgpool_global, flops_input_elements, flops_elementwise_1, bytes_io },
    [OP_FLATTEN]        = { "flatten",        1, 1, 1, { "x" }, 0, { { 0 } },
                            shape_flatten, flops_zero, flops_zero, bytes_io },
};

const char *attr_key_name(attr_key k)
{
    return (unsigned)k < ATTR_KEY_COUNT ? attr_names[k] : "?";
}

attr_type attr_key_type(attr_key k)
{
    return (unsigned)k < ATTR_KEY_COUNT ? attr_types[k] : ATTR_INT;
}

int attr_key_parse(const char *s, attr_key *out)
{
    for (int k = 0; k < ATTR_KEY_COUNT; k++)
        if (strcmp(s, attr_names[k]) == 0) {
            *out = (attr_key)k;
            return 0;
        }
    return -1;
}

int op_parse(const char *s, ir_op *out)
{
    for (int k = 0; k < OP_COUNT; k++)
        if (strcmp(s, op_table[k].name) == 0) {
            *out = (ir_op)k;
            return 0;
        }
    return -1;
}

const attr_spec *op_attr_spec(ir_op op, attr_key key)
{
    const op_def *d = &op_table[op];
    for (int i = 0; i < d->n_attr_specs; i++)
        if (d->attr_specs[i].key == key)
            return &d->attr_specs[i];
    return NULL;
}
