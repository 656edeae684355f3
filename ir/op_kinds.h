/* op_kinds.h: the op and attribute-key enums, shared by ir.h and ops.h.
 * The table that gives each op its meaning is in ops.h / ops.c. */
#ifndef FUSION_OP_KINDS_H
#define FUSION_OP_KINDS_H

#include "pointwise.h"

/* A target cross_entropy skips (PyTorch's ignore_index, Hugging Face's
 * label of a prompt token): its row adds nothing to the loss and gets no
 * gradient, on every back end (runtime/cpu/loss.c, codegen's CUDA kernel);
 * the loader writes it for a masked token (runtime/data.h). */
#define OP_IGNORE_TARGET (-100)

/* clang-format off */
typedef enum {
    OP_EMBEDDING,       /* (idx i32[..], table[V,C]) -> [..,C]                 */
    OP_POSITIONS,       /* (idx i32[..,T]) -> i32[..,T], each row 0..T-1       */
    OP_LINEAR,
    OP_MATMUL,
    OP_LAYERNORM,       /* (x[..,C], w[C], b[C]) eps -> [..,C]                 */
    OP_ATTENTION,       /* (qkv[B,T,3C]) heads -> [B,T,C], causal; or
                           (q[B,T,H*D], k[B,T,KV*D], v[B,T,KV*D]) heads kv_heads
                           -> [B,T,H*D]: query head h reads kv head h/(H/KV)
                           (grouped-query attention)                           */
    OP_QKV_SPLIT,       /* (qkv[B,T,3C]) heads -> q,k,v [B,H,T,C/H]            */
    OP_MERGE_HEADS,     /* (y[B,H,T,D]) -> [B,T,H*D]                           */
    OP_SOFTMAX,         /* over the last axis; causal masks j > i              */
    OP_CROSS_ENTROPY,   /* (logits[..,V], targets i32[..]) -> [] mean          */
    OP_CONV2D,          /* stride, pad                                         */
    OP_BATCHNORM,       /* (x[N,C,H,W], w[C], b[C], running mean[C], var[C]) eps, momentum */
    OP_MAXPOOL,         /* kernel, stride, pad                                 */
    OP_AVGPOOL_GLOBAL,  /* [N,C,H,W] -> [N,C]                                  */
    OP_FLATTEN,         /* [N,...] -> [N,prod(...)]                            */
    OP_RMSNORM,         /* (x[..,C], w[C]) eps -> x / sqrt(mean(x^2) + eps) * w  */
    OP_ROPE,            /* (x[..,T,C][, pos i32[..,T]]) heads base -> each head's
                           D = C/heads rotated by position t (pos[..,t] when
                           given: the decode pass's), its two halves as pairs
                           (Hugging Face Llama's rotate_half); scale_factor
                           low_freq high_freq old_ctx: Llama 3's scaling     */
    OP_SPLIT,           /* (x) axis -> n equal parts along axis (torch.chunk)  */
    OP_CONCAT,          /* (a, b, ...) axis -> one tensor along axis           */
    OP_ATTENTION_CACHED, /* inference (the decode pass): (q[B,T,H*D], k[B,T,KV*D],
                           v, k_cache[B,CTX,KV*D], v_cache, pos i32[B,T]) heads
                           kv_heads -> [B,T,H*D]: writes k, v into the caches at
                           their positions, then each query attends to the
                           cache's rows up to its own position; no backward   */
    /* gelu (tanh form), relu, silu, add, mul: pointwise.h's rows */
#define FU_POINTWISE_ENUM(ENUM, ...) OP_##ENUM,
    FU_POINTWISE_OPS(FU_POINTWISE_ENUM)
#undef FU_POINTWISE_ENUM

    /* Backward ops, appended by the autodiff pass (not for model files).
     * Inputs: the forward inputs and outputs the rule needs (ops.c's
     * bwd_saves_in / bwd_saves_out), then the gradient of each forward
     * output.  Outputs: the gradients of the forward inputs whose bit is set
     * in the `grads` attribute, in input order. */
    OP_EMBEDDING_BACKWARD,
    OP_LINEAR_BACKWARD,
    OP_MATMUL_BACKWARD,
    OP_LAYERNORM_BACKWARD,
    OP_ATTENTION_BACKWARD,
    OP_QKV_SPLIT_BACKWARD,
    OP_MERGE_HEADS_BACKWARD,
    OP_SOFTMAX_BACKWARD,
    OP_CROSS_ENTROPY_BACKWARD,
    OP_CONV2D_BACKWARD,
    OP_BATCHNORM_BACKWARD,
    OP_MAXPOOL_BACKWARD,
    OP_AVGPOOL_GLOBAL_BACKWARD,
    OP_FLATTEN_BACKWARD,
    OP_RMSNORM_BACKWARD,
    OP_ROPE_BACKWARD,
    OP_SPLIT_BACKWARD,  /* (dy_0, ..., dy_n-1) -> dx: their concatenation     */
    OP_CONCAT_BACKWARD, /* (dy) -> every input's slice (op_def.bwd_all_inputs) */
#define FU_POINTWISE_BACKWARD_ENUM(ENUM, name, arity, f0, f1, has, ...) FU_IF_BACKWARD_##has(OP_##ENUM##_BACKWARD,)
    FU_POINTWISE_OPS(FU_POINTWISE_BACKWARD_ENUM)
#undef FU_POINTWISE_BACKWARD_ENUM
    OP_FILL,            /* () value -> a tensor of that value (the loss seed)  */
    OP_COPY,            /* (x) -> a copy of x                                   */

    /* The optimizer, appended by the optimizer pass (phase=update). */
    OP_LR_SCHEDULE,     /* () lr warmup steps min_lr -> f32[] this step's rate  */
    OP_SUM_SQUARES,     /* (g, acc?) -> f32[] acc + sum(g^2)                    */
    OP_CLIP_SCALE,      /* (sumsq) max_norm -> f32[] min(1, max_norm/(norm+1e-6)) */
    OP_ADAMW,           /* (p, g, m, v, lr, scale?) beta1 beta2 eps weight_decay:
                           updates p, m, v in place; no outputs               */
    OP_SGD,             /* (p, g, lr, scale?) weight_decay: p -= lr (g + wd p),
                           torch.optim.SGD without momentum; no outputs       */

    /* Communication, inserted by the comm pass where an edge crosses devices
     * (remote autodiff): each send on one stage has its recv on another, the
     * two sharing a `tensor` id; `peer` is the other end's stage.  allreduce
     * averages a gradient over the replicas of its stage (data parallel). */
    OP_SEND,            /* (x) peer tensor once -> nothing: x goes to stage `peer` */
    OP_RECV,            /* () peer tensor once -> x as sent by stage `peer`     */
    OP_ALLREDUCE,       /* (g) tensor -> the mean of g over the stage's replicas */
    OP_ALLGATHER,       /* (p) tensor -> nothing: p's pieces, each updated on one replica
                           (--shard-optimizer), gathered from them into p in place */
    OP_COUNT
} ir_op;
/* clang-format on */

typedef enum {
    ATTR_EPS,
    ATTR_HEADS,
    ATTR_STRIDE,
    ATTR_PAD,
    ATTR_KERNEL,
    ATTR_CAUSAL,
    ATTR_TRANSPOSE_B,
    ATTR_SCALE,
    ATTR_GRADS,  /* backward ops: bit i set = output the gradient of forward input i */
    ATTR_VALUE,  /* fill: the value                                              */
    ATTR_LR,     /* lr_schedule: peak learning rate                              */
    ATTR_WARMUP, /* lr_schedule: linear warm-up steps                            */
    ATTR_STEPS,  /* lr_schedule: total steps of the cosine decay (0: constant)   */
    ATTR_MIN_LR, /* lr_schedule: the rate the cosine ends at                      */
    ATTR_BETA1,
    ATTR_BETA2,
    ATTR_WEIGHT_DECAY,
    ATTR_MAX_NORM,   /* clip_scale: the global gradient-norm bound                    */
    ATTR_PEER,       /* send/recv: the stage at the other end                         */
    ATTR_TENSOR,     /* send/recv/allreduce: the message id both ends agree on         */
    ATTR_ONCE,       /* send/recv: 1 = in micro-batch 0 only (a parameter: it does not
                           change within a step; the copy is kept for the others)     */
    ATTR_DENSITY,    /* send/recv: > 0 = only this fraction of the elements travels,
                           the largest by magnitude (AdaTopK, the compress pass)       */
    ATTR_FEEDBACK,   /* send: 1 = x is a parameter's partial gradient: send the top k of
                           x + residual, keep the rest in the residual (error feedback) */
    ATTR_BITS,       /* send/recv: 8 or 4 = the tensor travels as rows of that many bits
                           and a scale (runtime/comm/quant.h; the compress pass); ATTR_BITS_HALF
                           = an f32 parameter travels in the graph's 16-bit precision
                           (passes.h: comm_param_may_cross_half); allreduce: the quantised
                           exchange (passes/allreduce_plan.h; the comm pass)            */
    ATTR_ACCUMULATE, /* send/recv: 1 = x is a parameter's partial gradient: the sender
                           sums it over the step's micro-batches and sends the sum with
                           the last one; the receiver reads zeros before (the comm pass) */
    ATTR_LOSS_SCALE, /* fill: 1 = the loss seed, times the runtime's loss scale; clip_scale:
                           1 = divide by it too, and NaN (skip the step) when the
                           gradients overflowed (fp16's dynamic loss scaling)        */
    ATTR_GROUPS,     /* allreduce: 0 = one ring over the stage's replicas; else bit r set
                           (r >= 1) = replica r starts a new group (its region): the
                           gradient is reduced inside each group, across the groups'
                           first replicas (their leaders), then sent back (allreduce_plan.h) */
    ATTR_BUCKET,     /* allreduce: 0, 1, ... = the gradient bucket it is reduced in, in the
                           order the stage's backward makes the buckets' gradients final (the
                           runtime reduces each while the rest of the backward runs:
                           runtime/comm/overlap.h); -1 = with the update (the comm pass) */
    ATTR_READY,      /* allreduce, in a device program only (codegen): the program's index
                           of the backward op that makes its gradient final; -1 none   */
    ATTR_KV_HEADS,   /* attention on (q, k, v): key/value heads (0: as many as heads)  */
    ATTR_BASE,       /* rope: theta_i = base^(-2i/D)                                   */
    ATTR_AXIS,       /* split, concat: the axis (negative: from the end)              */
    /* rope: Llama 3's frequency scaling (Hugging Face's rope_type "llama3"):
       each theta_i's wavelength 2π/theta_i against old_ctx/low_freq and
       old_ctx/high_freq; longer: theta_i/factor; shorter: kept; between: a
       blend (runtime/cpu/rope.c: rope_inv_freq) */
    ATTR_SCALE_FACTOR, /* rope: the factor (0: no scaling)                            */
    ATTR_LOW_FREQ,     /* rope: low_freq_factor                                       */
    ATTR_HIGH_FREQ,    /* rope: high_freq_factor                                      */
    ATTR_OLD_CTX,      /* rope: original_max_position_embeddings                      */
    ATTR_TRANSPOSE_W,  /* linear: 1 = w is [in, out] (GPT-2's Conv1D: y = x·w + b), not [out, in] */
    ATTR_SHARD,        /* --shard-optimizer (runtime/shard.h): allreduce: 1 = reduce-scatter, the
                          mean is kept of this replica's piece of each gradient only;
                          sum_squares, adamw: 1 = over this replica's piece of p and g
                          (its m and v are that piece's)                                */
    ATTR_SUM,          /* allreduce: 1 = the sum over the replicas, not the mean (a sharded
                          run's partial gradient-norm squares)                          */
    ATTR_MOMENTUM,     /* batchnorm: how much of a training batch's statistics its running
                          ones take in (PyTorch's momentum, 0.1)                        */
    ATTR_KEY_COUNT
} attr_key;

#define ATTR_BITS_HALF 16 /* ATTR_BITS: the graph's 16-bit float, rounded to nearest even */

/* The matrix products: in 16 bits (a 16-bit operand or result), they round
 * an f32 weight to that precision as they read it (runtime/exec.c); the
 * comm pass counts on it (passes.h: comm_reader_rounds_weight). */
static inline int op_is_product(int kind)
{
    return kind == OP_LINEAR || kind == OP_LINEAR_BACKWARD || kind == OP_MATMUL || kind == OP_MATMUL_BACKWARD ||
           kind == OP_CONV2D || kind == OP_CONV2D_BACKWARD;
}

#endif
