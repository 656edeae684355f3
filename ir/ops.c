/* ops.c: the operator table (see ops.h).  One entry per op: inputs,
 * outputs, attributes, shape rule, costs, and its backward op with what
 * that reads.  Shape rules and costs are in ops_shape.c and ops_cost.c,
 * declared in ops_rules.h. */
#include "ops.h"

#include <string.h>

#include "ops_rules.h"

/* clang-format off */
static const char *const attr_names[ATTR_KEY_COUNT] = {
    [ATTR_EPS] = "eps",         [ATTR_HEADS] = "heads",   [ATTR_STRIDE] = "stride",
    [ATTR_PAD] = "pad",         [ATTR_KERNEL] = "kernel", [ATTR_CAUSAL] = "causal",
    [ATTR_TRANSPOSE_B] = "transpose_b", [ATTR_SCALE] = "scale", [ATTR_GRADS] = "grads",
    [ATTR_VALUE] = "value",     [ATTR_LR] = "lr",         [ATTR_WARMUP] = "warmup",
    [ATTR_STEPS] = "steps",     [ATTR_MIN_LR] = "min_lr", [ATTR_BETA1] = "beta1",
    [ATTR_BETA2] = "beta2",     [ATTR_WEIGHT_DECAY] = "weight_decay", [ATTR_MAX_NORM] = "max_norm",
    [ATTR_PEER] = "peer",       [ATTR_TENSOR] = "tensor", [ATTR_ONCE] = "once",
    [ATTR_DENSITY] = "density", [ATTR_FEEDBACK] = "feedback", [ATTR_BITS] = "bits",
    [ATTR_ACCUMULATE] = "accumulate", [ATTR_LOSS_SCALE] = "loss_scale",
    [ATTR_GROUPS] = "groups",   [ATTR_BUCKET] = "bucket", [ATTR_READY] = "ready",
    [ATTR_KV_HEADS] = "kv_heads", [ATTR_BASE] = "base",   [ATTR_AXIS] = "axis",
    [ATTR_SCALE_FACTOR] = "scale_factor", [ATTR_LOW_FREQ] = "low_freq", [ATTR_HIGH_FREQ] = "high_freq",
    [ATTR_OLD_CTX] = "old_ctx", [ATTR_TRANSPOSE_W] = "transpose_w", [ATTR_SHARD] = "shard",
    [ATTR_SUM] = "sum",         [ATTR_MOMENTUM] = "momentum",
};

static const attr_type attr_types[ATTR_KEY_COUNT] = {
    [ATTR_EPS] = ATTR_FLOAT, [ATTR_HEADS] = ATTR_INT,  [ATTR_STRIDE] = ATTR_INT,
    [ATTR_PAD] = ATTR_INT,   [ATTR_KERNEL] = ATTR_INT, [ATTR_CAUSAL] = ATTR_INT,
    [ATTR_TRANSPOSE_B] = ATTR_INT, [ATTR_SCALE] = ATTR_FLOAT, [ATTR_GRADS] = ATTR_INT,
    [ATTR_VALUE] = ATTR_FLOAT, [ATTR_LR] = ATTR_FLOAT, [ATTR_WARMUP] = ATTR_INT,
    [ATTR_STEPS] = ATTR_INT,   [ATTR_MIN_LR] = ATTR_FLOAT, [ATTR_BETA1] = ATTR_FLOAT,
    [ATTR_BETA2] = ATTR_FLOAT, [ATTR_WEIGHT_DECAY] = ATTR_FLOAT, [ATTR_MAX_NORM] = ATTR_FLOAT,
    [ATTR_PEER] = ATTR_INT,  [ATTR_TENSOR] = ATTR_INT,  [ATTR_ONCE] = ATTR_INT,
    [ATTR_DENSITY] = ATTR_FLOAT, [ATTR_FEEDBACK] = ATTR_INT, [ATTR_BITS] = ATTR_INT,
    [ATTR_ACCUMULATE] = ATTR_INT, [ATTR_LOSS_SCALE] = ATTR_INT, [ATTR_GROUPS] = ATTR_INT,
    [ATTR_BUCKET] = ATTR_INT, [ATTR_READY] = ATTR_INT, [ATTR_KV_HEADS] = ATTR_INT, [ATTR_BASE] = ATTR_FLOAT,
    [ATTR_AXIS] = ATTR_INT, [ATTR_SCALE_FACTOR] = ATTR_FLOAT, [ATTR_LOW_FREQ] = ATTR_FLOAT,
    [ATTR_HIGH_FREQ] = ATTR_FLOAT, [ATTR_OLD_CTX] = ATTR_FLOAT, [ATTR_TRANSPOSE_W] = ATTR_INT,
    [ATTR_SHARD] = ATTR_INT, [ATTR_SUM] = ATTR_INT, [ATTR_MOMENTUM] = ATTR_FLOAT,
};

#define REQ_INT(k)          { k, ATTR_INT, 1, 0, 0 }
#define OPT_INT(k, d)       { k, ATTR_INT, 0, d, 0 }
#define OPT_FLOAT(k, d)     { k, ATTR_FLOAT, 0, 0, d }
#define REQ_FLOAT(k)        { k, ATTR_FLOAT, 1, 0, 0 }
/* rope's Llama 3 scaling, off by default (op_kinds.h: ATTR_SCALE_FACTOR). */
#define ROPE_SCALING_SPECS                                                                     \
    OPT_FLOAT(ATTR_SCALE_FACTOR, 0.0), OPT_FLOAT(ATTR_LOW_FREQ, 1.0), OPT_FLOAT(ATTR_HIGH_FREQ, 4.0), \
    OPT_FLOAT(ATTR_OLD_CTX, 8192.0)

/* A forward op: name, inputs, outputs, shape rule, costs, backward op and
 * what the backward rule reads. */
#define FORWARD(nm, min_i, max_i, n_o, shape_fn, fwd_fn, bwd_fn, bwd_op, saves_in, saves_out) \
    FORWARD_OUTS(nm, min_i, max_i, n_o, n_o, shape_fn, fwd_fn, bwd_fn, bwd_op, saves_in, saves_out)
/* The same with a range of outputs (split: as many as the model names). */
#define FORWARD_OUTS(nm, min_i, max_i, min_o, max_o, shape_fn, fwd_fn, bwd_fn, bwd_op, saves_in, saves_out) \
    .name = nm, .min_in = min_i, .max_in = max_i, .min_out = min_o, .max_out = max_o,      \
    .shape = shape_fn, .flops_forward = fwd_fn, .flops_backward = bwd_fn, .bytes_forward = bytes_io, \
    .backward = bwd_op, .bwd_saves_in = saves_in, .bwd_saves_out = saves_out,             \
    .forward_of = OP_COUNT

/* A backward op: inputs are the saved forward tensors plus one gradient per
 * forward output; outputs one gradient per set bit of `grads`.  Its shapes
 * are given by the autodiff pass (the gradient of x has x's shape). */
#define BACKWARD(nm, fwd, min_i, max_i, max_o, flops_fn)                                       \
    .name = nm, .min_in = min_i, .max_in = max_i, .min_out = 1, .max_out = max_o,          \
    .shape = shape_given, .flops_forward = flops_fn, .flops_backward = flops_zero,         \
    .bytes_forward = bytes_io, .backward = OP_COUNT, .forward_of = fwd, .internal = 1

/* An optimizer op: made by the optimizer pass, runs in the update phase. */
#define OPTIMIZER(nm, min_i, max_i, n_o, shape_fn, flops_fn)                                    \
    .name = nm, .min_in = min_i, .max_in = max_i, .min_out = n_o, .max_out = n_o,          \
    .shape = shape_fn, .flops_forward = flops_fn, .flops_backward = flops_zero,            \
    .bytes_forward = bytes_io, .backward = OP_COUNT, .forward_of = OP_COUNT, .internal = 1


/* The pointwise ops (pointwise.h): each row makes the op and, when its
 * gradient is not the output's own, its backward op (inputs..., dy) ->
 * the gradients `grads` asks for. */
#define POINTWISE_IN_NAMES_1 { "x" }
#define POINTWISE_IN_NAMES_2 { "a", "b" }
#define POINTWISE_BWD_IN_NAMES_1 { "x", "dy" }
#define POINTWISE_BWD_IN_NAMES_2 { "a", "b", "dy" }
#define POINTWISE_BACKWARD_OF_0(ENUM) OP_COUNT
#define POINTWISE_BACKWARD_OF_1(ENUM) OP_##ENUM##_BACKWARD
#define POINTWISE_ROW(ENUM, nm, arity, f0, f1, has, FWD, D0, D1)                                              \
    [OP_##ENUM] = { FORWARD(#nm, arity, arity, 1, arity == 1 ? shape_same_as_first : shape_add,                  \
                            flops_per_element, flops_per_element_bwd,                                          \
                            POINTWISE_BACKWARD_OF_##has(ENUM),                                                 \
                            has ? (1u << arity) - 1 : 0, 0),                                                   \
                    .in_names = POINTWISE_IN_NAMES_##arity, .elem_flops = { f0, f1 },                          \
                    .pointwise = { arity, FU_TEXT FWD, { FU_TEXT D0, FU_TEXT D1 } } },                         \
    FU_IF_BACKWARD_##has([OP_##ENUM##_BACKWARD] = {                                                           \
        BACKWARD(#nm "_backward", OP_##ENUM, arity + 1, arity + 1, arity, flops_per_dy_element),               \
        .in_names = POINTWISE_BWD_IN_NAMES_##arity, .n_attr_specs = 1, .attr_specs = { REQ_INT(ATTR_GRADS) },  \
        .pointwise = { arity, FU_TEXT FWD, { FU_TEXT D0, FU_TEXT D1 } } },)

const op_def op_table[OP_COUNT] = {
    FU_POINTWISE_OPS(POINTWISE_ROW)
    [OP_EMBEDDING] = { FORWARD("embedding", 2, 2, 1, shape_embedding, flops_embedding, flops_embedding_bwd,
                               OP_EMBEDDING_BACKWARD, OP_IN(0), 0),
                       .in_names = { "idx", "table" } },
    [OP_POSITIONS] = { FORWARD("positions", 1, 1, 1, shape_positions, flops_zero, flops_zero, OP_COUNT, 0, 0),
                       .in_names = { "idx" } },
    [OP_LINEAR] = { FORWARD("linear", 2, 3, 1, shape_linear, flops_linear, flops_linear_bwd,
                            OP_LINEAR_BACKWARD, OP_IN(0) | OP_IN(1), 0),
                    .in_names = { "x", "w", "b" }, .n_attr_specs = 1, .attr_specs = { OPT_INT(ATTR_TRANSPOSE_W, 0) } },
    [OP_MATMUL] = { FORWARD("matmul", 2, 2, 1, shape_matmul, flops_matmul, flops_matmul_bwd,
                            OP_MATMUL_BACKWARD, OP_IN(0) | OP_IN(1), 0),
                    .in_names = { "a", "b" }, .n_attr_specs = 2,
                    .attr_specs = { OPT_INT(ATTR_TRANSPOSE_B, 0), OPT_FLOAT(ATTR_SCALE, 1.0) } },
    [OP_LAYERNORM] = { FORWARD("layernorm", 3, 3, 1, shape_layernorm, flops_layernorm, flops_layernorm_bwd,
                               OP_LAYERNORM_BACKWARD, OP_IN(0) | OP_IN(1), 0),
                       .in_names = { "x", "w", "b" }, .n_attr_specs = 1, .attr_specs = { OPT_FLOAT(ATTR_EPS, 1e-5) } },
    /* attention(qkv) or attention(q, k, v): shape_attention tells them apart. */
    [OP_ATTENTION] = { FORWARD("attention", 1, 3, 1, shape_attention, flops_attention, flops_attention_bwd,
                               OP_ATTENTION_BACKWARD, OP_IN(0) | OP_IN(1) | OP_IN(2), 0),
                       .in_names = { "qkv", "k", "v" }, .n_attr_specs = 2,
                       .attr_specs = { REQ_INT(ATTR_HEADS), OPT_INT(ATTR_KV_HEADS, 0) } },
    [OP_QKV_SPLIT] = { FORWARD("qkv_split", 1, 1, 3, shape_qkv_split, flops_zero, flops_zero,
                               OP_QKV_SPLIT_BACKWARD, 0, 0),
                       .in_names = { "qkv" }, .n_attr_specs = 1, .attr_specs = { REQ_INT(ATTR_HEADS) } },
    [OP_MERGE_HEADS] = { FORWARD("merge_heads", 1, 1, 1, shape_merge_heads, flops_zero, flops_zero,
                                 OP_MERGE_HEADS_BACKWARD, 0, 0),
                         .in_names = { "y" } },
    [OP_SOFTMAX] = { FORWARD("softmax", 1, 1, 1, shape_same_as_first, flops_softmax, flops_softmax_bwd,
                             OP_SOFTMAX_BACKWARD, 0, OP_IN(0)),
                     .in_names = { "x" }, .n_attr_specs = 1, .attr_specs = { OPT_INT(ATTR_CAUSAL, 0) } },
    [OP_CROSS_ENTROPY] = { FORWARD("cross_entropy", 2, 2, 1, shape_cross_entropy, flops_cross_entropy,
                                   flops_cross_entropy_bwd, OP_CROSS_ENTROPY_BACKWARD, OP_IN(0) | OP_IN(1), 0),
                           .in_names = { "logits", "targets" } },
    [OP_CONV2D] = { FORWARD("conv2d", 2, 3, 1, shape_conv2d, flops_conv2d, flops_conv2d_bwd,
                            OP_CONV2D_BACKWARD, OP_IN(0) | OP_IN(1), 0),
                    .in_names = { "x", "w", "b" }, .n_attr_specs = 2,
                    .attr_specs = { OPT_INT(ATTR_STRIDE, 1), OPT_INT(ATTR_PAD, 0) } },
    /* running_mean, running_var: state (passes/running_stats.c adds them) that a
     * training forward updates in place and validation normalises by. */
    [OP_BATCHNORM] = { FORWARD("batchnorm", 3, 5, 1, shape_batchnorm, flops_layernorm, flops_layernorm_bwd,
                               OP_BATCHNORM_BACKWARD, OP_IN(0) | OP_IN(1), 0),
                       .in_names = { "x", "w", "b", "running_mean", "running_var" }, .n_attr_specs = 2,
                       .attr_specs = { OPT_FLOAT(ATTR_EPS, 1e-5), OPT_FLOAT(ATTR_MOMENTUM, 0.1) } },
    [OP_MAXPOOL] = { FORWARD("maxpool", 1, 1, 1, shape_maxpool, flops_maxpool, flops_elementwise_1,
                             OP_MAXPOOL_BACKWARD, OP_IN(0), 0),
                     .in_names = { "x" }, .n_attr_specs = 3,
                     .attr_specs = { REQ_INT(ATTR_KERNEL), OPT_INT(ATTR_STRIDE, 0), OPT_INT(ATTR_PAD, 0) } },
    [OP_AVGPOOL_GLOBAL] = { FORWARD("avgpool_global", 1, 1, 1, shape_avgpool_global, flops_input_elements,
                                    flops_elementwise_1, OP_AVGPOOL_GLOBAL_BACKWARD, 0, 0),
                            .in_names = { "x" } },
    [OP_FLATTEN] = { FORWARD("flatten", 1, 1, 1, shape_flatten, flops_zero, flops_zero,
                             OP_FLATTEN_BACKWARD, 0, 0),
                     .in_names = { "x" } },
    /* Llama's ops.  Per-element costs: rmsnorm about 4 forward (square, sum,
     * scale, weight) and 10 backward; rope 3 (a rotation a pair: 6 per 2
     * elements) both ways. */
    [OP_RMSNORM] = { FORWARD("rmsnorm", 2, 2, 1, shape_rmsnorm, flops_per_element, flops_per_element_bwd,
                             OP_RMSNORM_BACKWARD, OP_IN(0) | OP_IN(1), 0),
                     .in_names = { "x", "w" }, .n_attr_specs = 1, .attr_specs = { OPT_FLOAT(ATTR_EPS, 1e-6) },
                     .elem_flops = { 4, 10 } },
    [OP_ROPE] = { FORWARD("rope", 1, 2, 1, shape_rope, flops_per_element, flops_per_element_bwd,
                          OP_ROPE_BACKWARD, 0, 0),
                  .in_names = { "x", "pos" }, .n_attr_specs = 6,
                  .attr_specs = { REQ_INT(ATTR_HEADS), OPT_FLOAT(ATTR_BASE, 10000.0), ROPE_SCALING_SPECS },
                  .elem_flops = { 3, 3 } },
    [OP_SPLIT] = { FORWARD_OUTS("split", 1, 1, 2, IR_MAX_OUT, shape_split, flops_zero, flops_zero,
                                OP_SPLIT_BACKWARD, 0, 0),
                   .in_names = { "x" }, .n_attr_specs = 1,
                   .attr_specs = { OPT_INT(ATTR_AXIS, -1) } },
    [OP_CONCAT] = { FORWARD("concat", 2, IR_MAX_OUT, 1, shape_concat, flops_zero, flops_zero,
                            OP_CONCAT_BACKWARD, 0, 0),
                    .in_names = { "a", "b", "c", "d" }, .n_attr_specs = 1, .attr_specs = { OPT_INT(ATTR_AXIS, -1) },
                    .bwd_all_inputs = 1 },
    /* Inference only (passes/decode.c): no backward. */
    [OP_ATTENTION_CACHED] = { FORWARD("attention_cached", 6, 6, 1, shape_attention_cached, flops_attention_cached,
                                      flops_zero, OP_COUNT, 0, 0),
                              .in_names = { "q", "k", "v", "k_cache", "v_cache", "pos" }, .n_attr_specs = 2,
                              .attr_specs = { REQ_INT(ATTR_HEADS), OPT_INT(ATTR_KV_HEADS, 0) } },

    /*                         name                  forward            in   out  own FLOPs            */
    [OP_EMBEDDING_BACKWARD] = { BACKWARD("embedding_backward", OP_EMBEDDING, 2, 2, 1, flops_output_elements),
                                .in_names = { "idx", "dy" }, .n_attr_specs = 1, .attr_specs = { REQ_INT(ATTR_GRADS) } },
    [OP_LINEAR_BACKWARD] = { BACKWARD("linear_backward", OP_LINEAR, 3, 3, 3, flops_linear_backward),
                             .in_names = { "x", "w", "dy" }, .n_attr_specs = 2,
                             .attr_specs = { REQ_INT(ATTR_GRADS), OPT_INT(ATTR_TRANSPOSE_W, 0) } },
    [OP_MATMUL_BACKWARD] = { BACKWARD("matmul_backward", OP_MATMUL, 3, 3, 2, flops_matmul_backward),
                             .in_names = { "a", "b", "dy" }, .n_attr_specs = 3,
                             .attr_specs = { REQ_INT(ATTR_GRADS), OPT_INT(ATTR_TRANSPOSE_B, 0), OPT_FLOAT(ATTR_SCALE, 1.0) } },
    [OP_LAYERNORM_BACKWARD] = { BACKWARD("layernorm_backward", OP_LAYERNORM, 3, 3, 3, flops_dy_elements_16),
                                .in_names = { "x", "w", "dy" }, .n_attr_specs = 2,
                                .attr_specs = { REQ_INT(ATTR_GRADS), OPT_FLOAT(ATTR_EPS, 1e-5) } },
    [OP_ATTENTION_BACKWARD] = { BACKWARD("attention_backward", OP_ATTENTION, 2, 4, 3, flops_attention_backward),
                                .in_names = { "qkv", "k", "v", "dy" }, .n_attr_specs = 3,
                                .attr_specs = { REQ_INT(ATTR_GRADS), REQ_INT(ATTR_HEADS), OPT_INT(ATTR_KV_HEADS, 0) } },
    [OP_QKV_SPLIT_BACKWARD] = { BACKWARD("qkv_split_backward", OP_QKV_SPLIT, 3, 3, 1, flops_zero),
                                .in_names = { "dq", "dk", "dv" }, .n_attr_specs = 2,
                                .attr_specs = { REQ_INT(ATTR_GRADS), REQ_INT(ATTR_HEADS) } },
    [OP_MERGE_HEADS_BACKWARD] = { BACKWARD("merge_heads_backward", OP_MERGE_HEADS, 1, 1, 1, flops_zero),
                                  .in_names = { "dy" }, .n_attr_specs = 1, .attr_specs = { REQ_INT(ATTR_GRADS) } },
    [OP_SOFTMAX_BACKWARD] = { BACKWARD("softmax_backward", OP_SOFTMAX, 2, 2, 1, flops_dy_elements_4),
                              .in_names = { "y", "dy" }, .n_attr_specs = 2,
                              .attr_specs = { REQ_INT(ATTR_GRADS), OPT_INT(ATTR_CAUSAL, 0) } },
    [OP_CROSS_ENTROPY_BACKWARD] = { BACKWARD("cross_entropy_backward", OP_CROSS_ENTROPY, 3, 3, 1,
                                             flops_output_elements_4),
                                    .in_names = { "logits", "targets", "dloss" }, .n_attr_specs = 1,
                                    .attr_specs = { REQ_INT(ATTR_GRADS) }, .in_place = 1 + 0 },
    [OP_CONV2D_BACKWARD] = { BACKWARD("conv2d_backward", OP_CONV2D, 3, 3, 3, flops_conv2d_backward),
                             .in_names = { "x", "w", "dy" }, .n_attr_specs = 3,
                             .attr_specs = { REQ_INT(ATTR_GRADS), OPT_INT(ATTR_STRIDE, 1), OPT_INT(ATTR_PAD, 0) } },
    [OP_BATCHNORM_BACKWARD] = { BACKWARD("batchnorm_backward", OP_BATCHNORM, 3, 3, 3, flops_dy_elements_16),
                                .in_names = { "x", "w", "dy" }, .n_attr_specs = 2,
                                .attr_specs = { REQ_INT(ATTR_GRADS), OPT_FLOAT(ATTR_EPS, 1e-5) } },
    [OP_MAXPOOL_BACKWARD] = { BACKWARD("maxpool_backward", OP_MAXPOOL, 2, 2, 1, flops_output_elements),
                              .in_names = { "x", "dy" }, .n_attr_specs = 4,
                              .attr_specs = { REQ_INT(ATTR_GRADS), REQ_INT(ATTR_KERNEL), OPT_INT(ATTR_STRIDE, 0),
                                              OPT_INT(ATTR_PAD, 0) } },
    [OP_AVGPOOL_GLOBAL_BACKWARD] = { BACKWARD("avgpool_global_backward", OP_AVGPOOL_GLOBAL, 1, 1, 1,
                                              flops_output_elements),
                                     .in_names = { "dy" }, .n_attr_specs = 1, .attr_specs = { REQ_INT(ATTR_GRADS) } },
    [OP_FLATTEN_BACKWARD] = { BACKWARD("flatten_backward", OP_FLATTEN, 1, 1, 1, flops_zero),
                              .in_names = { "dy" }, .n_attr_specs = 1, .attr_specs = { REQ_INT(ATTR_GRADS) } },
    [OP_RMSNORM_BACKWARD] = { BACKWARD("rmsnorm_backward", OP_RMSNORM, 3, 3, 2, flops_per_dy_element),
                              .in_names = { "x", "w", "dy" }, .n_attr_specs = 2,
                              .attr_specs = { REQ_INT(ATTR_GRADS), OPT_FLOAT(ATTR_EPS, 1e-6) } },
    [OP_ROPE_BACKWARD] = { BACKWARD("rope_backward", OP_ROPE, 1, 1, 1, flops_per_dy_element),
                           .in_names = { "dy" }, .n_attr_specs = 7,
                           .attr_specs = { REQ_INT(ATTR_GRADS), REQ_INT(ATTR_HEADS), OPT_FLOAT(ATTR_BASE, 10000.0),
                                           ROPE_SCALING_SPECS } },
    [OP_SPLIT_BACKWARD] = { BACKWARD("split_backward", OP_SPLIT, 2, IR_MAX_OUT, 1, flops_zero),
                            .in_names = { "dy0", "dy1", "dy2", "dy3" }, .n_attr_specs = 2,
                            .attr_specs = { REQ_INT(ATTR_GRADS), OPT_INT(ATTR_AXIS, -1) } },
    [OP_CONCAT_BACKWARD] = { BACKWARD("concat_backward", OP_CONCAT, 1, 1, IR_MAX_OUT, flops_zero),
                             .in_names = { "dy" }, .n_attr_specs = 2,
                             .attr_specs = { REQ_INT(ATTR_GRADS), OPT_INT(ATTR_AXIS, -1) } },
    [OP_COPY] = { .name = "copy", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .in_names = { "x" },
                  .shape = shape_same_as_first, .flops_forward = flops_zero, .flops_backward = flops_zero,
                  .bytes_forward = bytes_io, .backward = OP_COUNT, .forward_of = OP_COUNT, .internal = 1 },
    [OP_LR_SCHEDULE] = { OPTIMIZER("lr_schedule", 0, 0, 1, shape_scalar, flops_zero),
                         .n_attr_specs = 4, .attr_specs = { REQ_FLOAT(ATTR_LR), OPT_INT(ATTR_WARMUP, 0),
                                                            OPT_INT(ATTR_STEPS, 0), OPT_FLOAT(ATTR_MIN_LR, 0.0) } },
    [OP_SUM_SQUARES] = { OPTIMIZER("sum_squares", 1, 2, 1, shape_scalar, flops_input_elements_2),
                         .in_names = { "g", "acc" }, .n_attr_specs = 1, .attr_specs = { OPT_INT(ATTR_SHARD, 0) } },
    [OP_CLIP_SCALE] = { OPTIMIZER("clip_scale", 1, 1, 1, shape_scalar, flops_zero),
                        .in_names = { "sumsq" }, .n_attr_specs = 2,
                        .attr_specs = { REQ_FLOAT(ATTR_MAX_NORM), OPT_INT(ATTR_LOSS_SCALE, 0) } },
    [OP_ADAMW] = { OPTIMIZER("adamw", 5, 6, 0, shape_scalar, flops_input_elements_12),
                   .in_names = { "p", "g", "m", "v", "lr", "scale" }, .n_attr_specs = 5,
                   .attr_specs = { OPT_FLOAT(ATTR_BETA1, 0.9), OPT_FLOAT(ATTR_BETA2, 0.999), OPT_FLOAT(ATTR_EPS, 1e-8),
                                   OPT_FLOAT(ATTR_WEIGHT_DECAY, 0.0), OPT_INT(ATTR_SHARD, 0) } },
    [OP_SGD] = { OPTIMIZER("sgd", 3, 4, 0, shape_scalar, flops_input_elements_2),
                 .in_names = { "p", "g", "lr", "scale" }, .n_attr_specs = 1,
                 .attr_specs = { OPT_FLOAT(ATTR_WEIGHT_DECAY, 0.0) } },
    [OP_FILL] = { .name = "fill", .min_in = 0, .max_in = 0, .min_out = 1, .max_out = 1,
                  .shape = shape_given, .flops_forward = flops_zero, .flops_backward = flops_zero,
                  .bytes_forward = bytes_io, .backward = OP_COUNT, .forward_of = OP_COUNT, .internal = 1,
                  .n_attr_specs = 2, .attr_specs = { REQ_FLOAT(ATTR_VALUE), OPT_INT(ATTR_LOSS_SCALE, 0) } },
    /* Communication (the comm pass): no FLOPs; their cost is the link's. */
    [OP_SEND] = { .name = "send", .min_in = 1, .max_in = 1, .min_out = 0, .max_out = 0, .in_names = { "x" },
                  .shape = shape_scalar, .flops_forward = flops_zero, .flops_backward = flops_zero,
                  .bytes_forward = bytes_io, .backward = OP_COUNT, .forward_of = OP_COUNT, .internal = 1,
                  .n_attr_specs = 7, .attr_specs = { REQ_INT(ATTR_PEER), REQ_INT(ATTR_TENSOR), OPT_INT(ATTR_ONCE, 0),
                                                     OPT_FLOAT(ATTR_DENSITY, 0.0), OPT_INT(ATTR_FEEDBACK, 0),
                                                     OPT_INT(ATTR_BITS, 0), OPT_INT(ATTR_ACCUMULATE, 0) } },
    [OP_RECV] = { .name = "recv", .min_in = 0, .max_in = 0, .min_out = 1, .max_out = 1,
                  .shape = shape_given, .flops_forward = flops_zero, .flops_backward = flops_zero,
                  .bytes_forward = bytes_io, .backward = OP_COUNT, .forward_of = OP_COUNT, .internal = 1,
                  .n_attr_specs = 6, .attr_specs = { REQ_INT(ATTR_PEER), REQ_INT(ATTR_TENSOR), OPT_INT(ATTR_ONCE, 0),
                                                     OPT_FLOAT(ATTR_DENSITY, 0.0), OPT_INT(ATTR_BITS, 0),
                                                     OPT_INT(ATTR_ACCUMULATE, 0) } },
    [OP_ALLREDUCE] = { .name = "allreduce", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .in_names = { "g" },
                       .shape = shape_same_as_first, .flops_forward = flops_input_elements,
                       .flops_backward = flops_zero, .bytes_forward = bytes_io, .backward = OP_COUNT,
                       .forward_of = OP_COUNT, .internal = 1,
                       .n_attr_specs = 6, .attr_specs = { REQ_INT(ATTR_TENSOR), OPT_INT(ATTR_GROUPS, 0),
                                                          OPT_INT(ATTR_BUCKET, -1), OPT_INT(ATTR_BITS, 0),
                                                          OPT_INT(ATTR_SHARD, 0), OPT_INT(ATTR_SUM, 0) } },
    [OP_ALLGATHER] = { .name = "allgather", .min_in = 1, .max_in = 1, .min_out = 0, .max_out = 0, .in_names = { "p" },
                       .shape = shape_scalar, .flops_forward = flops_zero, .flops_backward = flops_zero,
                       .bytes_forward = bytes_io, .backward = OP_COUNT, .forward_of = OP_COUNT, .internal = 1,
                       .n_attr_specs = 1, .attr_specs = { REQ_INT(ATTR_TENSOR) } },
};
/* clang-format on */

const char *attr_key_name(attr_key k) { return (unsigned)k < ATTR_KEY_COUNT ? attr_names[k] : "?"; }

attr_type attr_key_type(attr_key k) { return (unsigned)k < ATTR_KEY_COUNT ? attr_types[k] : ATTR_INT; }

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

const char *op_model_names(void)
{
    static char names[512];
    if (!names[0]) {
        size_t used = 0;
        for (int k = 0; k < OP_COUNT && used < sizeof names; k++)
            if (!op_table[k].internal)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", op_table[k].name);
    }
    return names;
}

int op_reads_input(const ir_node *n, int k)
{
    if (n->op != OP_LINEAR_BACKWARD && n->op != OP_MATMUL_BACKWARD && n->op != OP_CONV2D_BACKWARD)
        return 1;
    int64_t grads = ir_node_int(n, ATTR_GRADS, -1);
    if (k == 0)
        return (grads & 2) != 0; /* x: for w's gradient */
    if (k == 1)
        return (grads & 1) != 0; /* w: for x's gradient */
    return 1;
}

const attr_spec *op_attr_spec(ir_op op, attr_key key)
{
    const op_def *d = &op_table[op];
    for (int i = 0; i < d->n_attr_specs; i++)
        if (d->attr_specs[i].key == key)
            return &d->attr_specs[i];
    return NULL;
}
