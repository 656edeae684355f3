/* cuda_lowering.c: the CUDA back end as a table indexed by op: each op's
 * lowering (its kernels and steps: cuda_kernels*.c, cuda_pointwise.c), and
 * cuda_plan_add_op, which looks it up, and whether the op's kernels may
 * fuse with the launch before (the pointwise ops').
 * tests/unit/test_op_tables.c checks that no op lacks a row. */
#include "cuda_kernels_internal.h"

#include "../ir/ops.h"

typedef struct {
    int (*lower)(cuda_plan *p, const rt_op *op);
    int fusable; /* 1: its kernels touch element i only and may join the launch before (cuda_elementwise.c) */
} cuda_lowering;

/* clang-format off */
#define POINTWISE_ROWS(ENUM, nm, arity, f0, f1, has, ...)                                                      \
    [OP_##ENUM] = { lower_pointwise, 1 },                                                                       \
    FU_IF_BACKWARD_##has([OP_##ENUM##_BACKWARD] = { lower_pointwise_backward, 1 },)

static const cuda_lowering cuda_lowerings[] = {
    [OP_EMBEDDING]               = { lower_embedding, 0 },
    [OP_EMBEDDING_BACKWARD]      = { lower_embedding_backward, 0 },
    [OP_POSITIONS]               = { lower_positions, 0 },
    [OP_LINEAR]                  = { lower_linear, 0 },
    [OP_LINEAR_BACKWARD]         = { lower_linear_backward, 0 },
    [OP_MATMUL]                  = { lower_matmul, 0 },
    [OP_MATMUL_BACKWARD]         = { lower_matmul, 0 },
    [OP_CONV2D]                  = { lower_conv2d, 0 },
    [OP_CONV2D_BACKWARD]         = { lower_conv2d_backward, 0 },
    [OP_MAXPOOL]                 = { lower_maxpool, 0 },
    [OP_MAXPOOL_BACKWARD]        = { lower_maxpool, 0 },
    [OP_AVGPOOL_GLOBAL]          = { lower_avgpool, 0 },
    [OP_AVGPOOL_GLOBAL_BACKWARD] = { lower_avgpool, 0 },
    [OP_LAYERNORM]               = { lower_layernorm, 0 },
    [OP_LAYERNORM_BACKWARD]      = { lower_layernorm_backward, 0 },
    [OP_RMSNORM]                 = { lower_rmsnorm, 0 },
    [OP_RMSNORM_BACKWARD]        = { lower_rmsnorm_backward, 0 },
    [OP_BATCHNORM]               = { lower_batchnorm, 0 },
    [OP_BATCHNORM_BACKWARD]      = { lower_batchnorm_backward, 0 },
    [OP_SOFTMAX]                 = { lower_softmax, 0 },
    [OP_SOFTMAX_BACKWARD]        = { lower_softmax_backward, 0 },
    [OP_ATTENTION]               = { lower_attention, 0 },
    [OP_ATTENTION_CACHED]        = { lower_attention_cached, 0 },
    [OP_ATTENTION_BACKWARD]      = { lower_attention_backward, 0 },
    [OP_ROPE]                    = { lower_rope, 0 },
    [OP_ROPE_BACKWARD]           = { lower_rope, 0 },
    [OP_QKV_SPLIT]               = { lower_qkv_split, 0 },
    [OP_QKV_SPLIT_BACKWARD]      = { lower_qkv_split, 0 },
    [OP_MERGE_HEADS]             = { lower_merge_heads, 0 },
    [OP_MERGE_HEADS_BACKWARD]    = { lower_merge_heads, 0 },
    [OP_SPLIT]                   = { lower_split_concat, 0 },
    [OP_SPLIT_BACKWARD]          = { lower_split_concat, 0 },
    [OP_CONCAT]                  = { lower_split_concat, 0 },
    [OP_CONCAT_BACKWARD]         = { lower_split_concat, 0 },
    [OP_FLATTEN]                 = { lower_copy, 0 },
    [OP_FLATTEN_BACKWARD]        = { lower_copy, 0 },
    [OP_COPY]                    = { lower_copy, 0 },
    FU_POINTWISE_OPS(POINTWISE_ROWS)
    [OP_CROSS_ENTROPY]           = { lower_cross_entropy, 0 },
    [OP_CROSS_ENTROPY_BACKWARD]  = { lower_cross_entropy_backward, 0 },
    [OP_FILL]                    = { lower_fill, 0 },
    [OP_LR_SCHEDULE]             = { lower_lr_schedule, 0 },
    [OP_SUM_SQUARES]             = { lower_sum_squares, 0 },
    [OP_CLIP_SCALE]              = { lower_clip_scale, 0 },
    [OP_ADAMW]                   = { lower_adamw, 0 },
    [OP_SGD]                     = { lower_sgd, 0 },
    /* Messages: a host step; the step loop runs them (runtime/cuda/cuda.c). */
    [OP_SEND]                    = { lower_host, 0 },
    [OP_RECV]                    = { lower_host, 0 },
    [OP_ALLREDUCE]               = { lower_host, 0 },
    [OP_ALLGATHER]               = { lower_host, 0 },
};
/* clang-format on */
/* The last op has its row (one appended without a row fails here); that
 * every op has one is tests/unit/test_op_tables.c's. */
_Static_assert(sizeof cuda_lowerings / sizeof cuda_lowerings[0] == OP_COUNT, "one CUDA row per op");

int cuda_op_has_lowering(int32_t op) { return op >= 0 && op < OP_COUNT && cuda_lowerings[op].lower != NULL; }

int cuda_op_fusable(int32_t op) { return op >= 0 && op < OP_COUNT && cuda_lowerings[op].fusable; }

int cuda_plan_add_op(cuda_plan *p, const rt_op *op, struct diag *err)
{
    if (plan_grow((void **)&p->ops, &p->cap_ops, p->n_ops + 1, sizeof *p->ops))
        return diag_set(err, op->name, op->line, "out of memory generating CUDA kernels");
    int32_t first = p->n_steps;
    const cuda_lowering *row = op->op >= 0 && op->op < OP_COUNT ? &cuda_lowerings[op->op] : NULL;
    if (!row || !row->lower)
        return diag_set(err, op->name, op->line, "op '%s': %s has no CUDA kernel", op->name,
                        row ? op_table[op->op].name : "this op kind");
    int rc = row->lower(p, op);
    if (rc == -2)
        return diag_set(err, op->name, op->line,
                        "op '%s' (%s): sizes the CUDA kernels do not take yet (attention: T <= 6144; convolution, "
                        "and products of 16-bit tensors with f32 ones: a workspace from the memory pass)",
                        op->name, op_table[op->op].name);
    if (rc == -3)
        return diag_set(err, op->name, op->line,
                        "internal error: op '%s' (%s): a matrix product of operands cuBLAS does not multiply together "
                        "(%s by %s)",
                        op->name, op_table[op->op].name, ctype(op->in[0].dtype), ctype(op->in[1].dtype));
    if (rc == -4)
        return diag_set(err, op->name, op->line,
                        "op '%s' (%s): its CUDA kernel takes f32 tensors only, and this one "
                        "has a 16-bit one",
                        op->name, op_table[op->op].name);
    if (rc || p->oom)
        return diag_set(err, op->name, op->line, "out of memory generating CUDA kernels for op '%s'", op->name);
    p->ops[p->n_ops].first = first;
    p->ops[p->n_ops].count = p->n_steps - first;
    p->n_ops++;
    return 0;
}
