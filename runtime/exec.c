/* exec.c: rt_op_run, the map from an op of the schedule onto its CPU
 * kernel (see exec.h).  Each case reads the dims the kernel needs from the
 * op's tensors: the compiler checked them, so nothing here re-validates
 * shapes; only data (token ids, targets) can still be out of range. */
#include "exec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "trace.h"
#include "cpu/half.h"
#include "cpu/kernels.h"

int64_t rt_tensor_numel(const rt_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dim[i];
    return n;
}

int64_t rt_tensor_bytes(const rt_tensor *t) { return rt_tensor_numel(t) * half_dtype_bytes(t->dtype); }

int rt_tensor_is_half(const rt_tensor *t) { return t->dtype == HALF_DT_BF16 || t->dtype == HALF_DT_F16; }

static int64_t last_dim(const rt_tensor *t) { return t->rank > 0 ? t->dim[t->rank - 1] : 1; }

#define IN(i)   ((float *)(arena + op->in[i].offset))
#define IN32(i) ((const int32_t *)(arena + op->in[i].offset))
#define OUT(i)  ((float *)(arena + op->out[i].offset))
#define WS      (op->ws_offset >= 0 ? (float *)(arena + op->ws_offset) : NULL)

/* The gradient output for forward input `bit` of a backward op, or NULL
 * when the `grads` attribute does not ask for it (outputs are in bit order). */
static float *grad_out(const rt_op *op, char *arena, int bit)
{
    int64_t mask = op->ints[ATTR_GRADS];
    if (!((mask >> bit) & 1))
        return NULL;
    int index = 0;
    for (int b = 0; b < bit; b++)
        index += (int)((mask >> b) & 1);
    return index < op->n_out ? OUT(index) : NULL;
}

static int bad_index(const rt_op *op, rt_context *ctx, const char *what, const int32_t *idx, int64_t pos,
                     int64_t limit)
{
    snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): %s %d at position %lld is outside [0, %lld)",
             op->name, (int)op->line, what, (int)idx[pos], (long long)pos, (long long)limit);
    return -1;
}

/* This step's learning rate: linear warm-up, then cosine decay to min_lr
 * over `steps` (constant when steps is 0), as llm.c schedules it. */
static double scheduled_lr(const rt_op *op, int64_t t)
{
    double lr = op->floats[ATTR_LR], min_lr = op->floats[ATTR_MIN_LR];
    int64_t warmup = op->ints[ATTR_WARMUP], steps = op->ints[ATTR_STEPS];
    if (warmup > 0 && t <= warmup)
        return lr * (double)t / (double)warmup;
    if (steps <= 0)
        return lr;
    double ratio = (double)(t - warmup) / (double)(steps - warmup);
    if (ratio > 1.0)
        ratio = 1.0;
    return min_lr + 0.5 * (1.0 + cos(M_PI * ratio)) * (lr - min_lr);
}

/* ---- 16-bit tensors and the scratch (exec.h: rt_op_workspace_floats) ------
 *
 * The CPU kernels compute in f32.  An op some of whose float tensors are
 * stored in bf16 or fp16 runs its f32 kernel on f32 copies in its scratch,
 * after the kernel's own scratch:
 *
 *   [kernel scratch][copy of 16-bit tensor 1][copy 2]...   each 64-byte aligned
 *
 * each 16-bit input widened (exact), each 16-bit output written there by the
 * kernel and rounded into its place (nearest even).  So products and
 * reductions accumulate in f32 (in double, where the kernels do) and only
 * what is stored is rounded, as with tensor cores.  f32 inputs, the
 * parameters among them, are read as they are: a CPU multiplies in f32
 * anyway, and rounding a weight first would cost a copy of it per product.
 * The CUDA path rounds them (cuBLAS wants both operands in one type) into
 * the same place, after the same kernel scratch:
 *
 *   [kernel scratch][16-bit copy of f32 product input 1][copy 2]...
 *
 * The two differ by less than the 16-bit format's own rounding of the
 * result (the emulation harness measures it: tests/unit/cuda_cases.c).
 * bench/bench_bf16_gemm.c and bench_precision.sh measure what the CPU's copies cost. */
static int64_t copy_floats(const rt_tensor *t) { return (rt_tensor_numel(t) + 15) / 16 * 16; }
/* A 16-bit copy of t in floats, 64-byte aligned (32 elements a line). */
static int64_t half_copy_floats(const rt_tensor *t) { return (rt_tensor_numel(t) + 31) / 32 * 16; }

static int64_t half_copies_floats(const rt_op *op)
{
    int64_t floats = 0;
    for (int i = 0; i < op->n_in; i++)
        floats += rt_tensor_is_half(&op->in[i]) ? copy_floats(&op->in[i]) : 0;
    for (int i = 0; i < op->n_out; i++)
        floats += rt_tensor_is_half(&op->out[i]) ? copy_floats(&op->out[i]) : 0;
    return floats;
}

int32_t rt_op_product_dtype(const rt_op *op)
{
    if (!op_is_product(op->op))
        return HALF_DT_F32;
    for (int i = 0; i < op->n_in; i++)
        if (rt_tensor_is_half(&op->in[i]))
            return op->in[i].dtype;
    for (int i = 0; i < op->n_out; i++)
        if (rt_tensor_is_half(&op->out[i]))
            return op->out[i].dtype;
    return HALF_DT_F32;
}

uint32_t rt_op_product_inputs(const rt_op *op)
{
    int64_t grads = op->ints[ATTR_GRADS];
    int dx = (grads & 1) != 0, dw = (grads & 2) != 0;
    switch (op->op) {
    case OP_LINEAR:                              /* x·wᵀ */
    case OP_MATMUL:                              /* a·op(b) */
        return 1u << 0 | 1u << 1;
    case OP_LINEAR_BACKWARD:                     /* dx = dy·w, dw = dyᵀ·x */
    case OP_MATMUL_BACKWARD:                     /* da = dc·op(b)ᵀ, db = aᵀ·dc or dcᵀ·a */
        return (dx || dw ? 1u << 2 : 0) | (dx ? 1u << 1 : 0) | (dw ? 1u << 0 : 0);
    case OP_CONV2D:
    case OP_CONV2D_BACKWARD: {                   /* w·im2col(x); x itself when 1x1 */
        const rt_tensor *w = &op->in[1];
        int pointwise = w->dim[2] == 1 && w->dim[3] == 1 && op->ints[ATTR_STRIDE] == 1 && op->ints[ATTR_PAD] == 0;
        if (op->op == OP_CONV2D)
            return 1u << 1 | (pointwise ? 1u << 0 : 0);
        /* dx = col2im(wᵀ·dy), dw = dy·im2col(x)ᵀ */
        return (dx || dw ? 1u << 2 : 0) | (dx ? 1u << 1 : 0) | (dw && pointwise ? 1u << 0 : 0);
    }
    default:
        return 0;
    }
}

static int64_t kernel_workspace_floats(const rt_op *op)
{
    switch (op->op) {
    case OP_ATTENTION:
    case OP_ATTENTION_BACKWARD:
        return attention_workspace_floats(op->in[0].dim[1]);
    case OP_CONV2D:
    case OP_CONV2D_BACKWARD: {
        const rt_tensor *x = &op->in[0], *w = &op->in[1];
        return conv2d_workspace_floats(x->dim[1], x->dim[2], x->dim[3], w->dim[2], w->dim[3],
                                       op->ints[ATTR_STRIDE], op->ints[ATTR_PAD]);
    }
    default:
        return 0;
    }
}

/* The kernel's part, rounded up so that the copies start 64-byte aligned. */
static int64_t copies_at_floats(const rt_op *op) { return (kernel_workspace_floats(op) + 15) / 16 * 16; }

int64_t rt_op_rounded_input_at(const rt_op *op, int i)
{
    if (rt_op_product_dtype(op) == HALF_DT_F32)
        return -1;
    uint32_t inputs = rt_op_product_inputs(op);
    int64_t at = copies_at_floats(op);
    for (int k = 0; k < op->n_in; k++) {
        if (!((inputs >> k) & 1) || op->in[k].dtype != HALF_DT_F32)
            continue;
        if (k == i)
            return at * (int64_t)sizeof(float);
        at += half_copy_floats(&op->in[k]);
    }
    return -1;
}

/* The CUDA layout's copies, in floats. */
static int64_t rounded_inputs_floats(const rt_op *op)
{
    int64_t floats = 0;
    for (int k = 0; k < op->n_in; k++)
        if (rt_op_rounded_input_at(op, k) >= 0)
            floats += half_copy_floats(&op->in[k]);
    return floats;
}

int64_t rt_op_workspace_floats(const rt_op *op)
{
    int64_t cpu = half_copies_floats(op), cuda = rounded_inputs_floats(op);
    int64_t copies = cpu > cuda ? cpu : cuda;
    return copies ? copies_at_floats(op) + copies : kernel_workspace_floats(op);
}

/* split, concat and their backwards: the one whole tensor (split's input,
 * concat's output, or the gradients' counterparts) and its parts along the
 * axis attribute; every part is there (concat's backward writes every
 * input's slice: ops.h's bwd_all_inputs). */
static int run_split_concat(const rt_op *op, char *arena)
{
    int whole_is_input = op->op == OP_SPLIT || op->op == OP_CONCAT_BACKWARD;
    const rt_tensor *whole = whole_is_input ? &op->in[0] : &op->out[0];
    int n = whole_is_input ? op->n_out : op->n_in;
    int64_t axis = op->ints[ATTR_AXIS] < 0 ? op->ints[ATTR_AXIS] + whole->rank : op->ints[ATTR_AXIS];
    int64_t outer = 1, inner = 1, sizes[RT_MAX_IN];
    float *parts[RT_MAX_IN];
    for (int i = 0; i < axis; i++) outer *= whole->dim[i];
    for (int i = (int)axis + 1; i < whole->rank; i++) inner *= whole->dim[i];
    for (int k = 0; k < n; k++) {
        const rt_tensor *part = whole_is_input ? &op->out[k] : &op->in[k];
        sizes[k] = part->dim[axis];
        parts[k] = (float *)(arena + part->offset);
    }
    if (whole_is_input)
        split_forward(parts, (const float *)(arena + whole->offset), sizes, n, outer, inner);
    else
        concat_forward((float *)(arena + whole->offset), (const float *const *)parts, sizes, n, outer, inner);
    return 0;
}

static int run_kernel(const rt_op *op, char *arena, rt_context *ctx)
{
    int64_t bad = 0;
    switch (op->op) {
    case OP_EMBEDDING: {                         /* idx (N), table (V,C) -> (N,C) */
        int64_t V = op->in[1].dim[0], C = op->in[1].dim[1], N = rt_tensor_numel(&op->in[0]);
        if (embedding_forward(OUT(0), IN32(0), IN(1), N, V, C, &bad))
            return bad_index(op, ctx, "token id", IN32(0), bad, V);
        return 0;
    }
    case OP_EMBEDDING_BACKWARD: {                /* idx (N), dy (N,C) -> dtable (V,C) */
        int64_t V = op->out[0].dim[0], C = op->out[0].dim[1], N = rt_tensor_numel(&op->in[0]);
        if (embedding_backward(OUT(0), IN(1), IN32(0), N, V, C, &bad))
            return bad_index(op, ctx, "token id", IN32(0), bad, V);
        return 0;
    }
    case OP_POSITIONS: {
        int64_t T = last_dim(&op->out[0]);
        positions_forward((int32_t *)OUT(0), rt_tensor_numel(&op->out[0]) / T, T);
        return 0;
    }
    case OP_LINEAR: {                            /* x (M,K), w (N,K), b (N)? */
        int64_t K = op->in[1].dim[1], N = op->in[1].dim[0], M = rt_tensor_numel(&op->in[0]) / K;
        linear_forward(OUT(0), IN(0), IN(1), op->n_in == 3 ? IN(2) : NULL, M, K, N);
        return 0;
    }
    case OP_LINEAR_BACKWARD: {                   /* x, w, dy -> dx, dw, db */
        int64_t K = op->in[1].dim[1], N = op->in[1].dim[0], M = rt_tensor_numel(&op->in[0]) / K;
        linear_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(2), IN(0),
                        IN(1), M, K, N);
        return 0;
    }
    case OP_MATMUL:
    case OP_MATMUL_BACKWARD: {                   /* a (..,M,K), b (..,K,N) or (..,N,K) */
        const rt_tensor *a = &op->in[0], *b = &op->in[1];
        int tb = op->ints[ATTR_TRANSPOSE_B] != 0, b_batched = b->rank > 2;
        int64_t M = a->dim[a->rank - 2], K = a->dim[a->rank - 1];
        int64_t N = b->dim[b->rank - (tb ? 2 : 1)], Bt = rt_tensor_numel(a) / (M * K);
        float scale = (float)op->floats[ATTR_SCALE];
        if (op->op == OP_MATMUL)
            matmul_forward(OUT(0), IN(0), IN(1), Bt, M, K, N, tb, b_batched, scale);
        else
            matmul_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), IN(2), IN(0), IN(1), Bt, M, K, N,
                            tb, b_batched, scale);
        return 0;
    }
    case OP_LAYERNORM: {
        int64_t C = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / C;
        layernorm_forward(OUT(0), IN(0), IN(1), IN(2), N, C, (float)op->floats[ATTR_EPS]);
        return 0;
    }
    case OP_LAYERNORM_BACKWARD: {                /* x, w, dy */
        int64_t C = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / C;
        layernorm_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(2), IN(0),
                           IN(1), N, C, (float)op->floats[ATTR_EPS]);
        return 0;
    }
    case OP_GELU:
        gelu_forward(OUT(0), IN(0), rt_tensor_numel(&op->in[0]));
        return 0;
    case OP_GELU_BACKWARD:
        gelu_backward(OUT(0), IN(1), IN(0), rt_tensor_numel(&op->in[0]));
        return 0;
    case OP_RELU:
        relu_forward(OUT(0), IN(0), rt_tensor_numel(&op->in[0]));
        return 0;
    case OP_RELU_BACKWARD:
        relu_backward(OUT(0), IN(1), IN(0), rt_tensor_numel(&op->in[0]));
        return 0;
    case OP_ATTENTION:
    case OP_ATTENTION_BACKWARD: {                /* qkv (B,T,3C), or q (B,T,H*D), k, v (B,T,KV*D) */
        const rt_tensor *x = &op->in[0];
        int64_t B = x->dim[0], T = x->dim[1], H = op->ints[ATTR_HEADS];
        int packed = op->n_in - (op->op == OP_ATTENTION_BACKWARD) == 1;
        if (packed) {
            int64_t C = x->dim[2] / 3;
            if (op->op == OP_ATTENTION)
                attention_forward(OUT(0), IN(0), WS, B, T, C, H);
            else
                attention_backward(OUT(0), IN(1), IN(0), WS, B, T, C, H);
            return 0;
        }
        int64_t KV = op->ints[ATTR_KV_HEADS] ? op->ints[ATTR_KV_HEADS] : H, D = x->dim[2] / H;
        if (op->op == OP_ATTENTION)
            attention_forward_heads(OUT(0), IN(0), IN(1), IN(2), WS, B, T, H, KV, D, H * D, KV * D);
        else
            attention_backward_heads(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(3),
                                     IN(0), IN(1), IN(2), WS, B, T, H, KV, D, H * D, KV * D);
        return 0;
    }
    case OP_RMSNORM: {                           /* x (N,C), w (C) */
        int64_t C = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / C;
        rmsnorm_forward(OUT(0), IN(0), IN(1), N, C, (float)op->floats[ATTR_EPS]);
        return 0;
    }
    case OP_RMSNORM_BACKWARD: {                  /* x, w, dy -> dx, dw */
        int64_t C = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / C;
        rmsnorm_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), IN(2), IN(0), IN(1), N, C,
                         (float)op->floats[ATTR_EPS]);
        return 0;
    }
    case OP_ROPE:
    case OP_ROPE_BACKWARD: {                     /* x or dy (R,T,H*D) */
        const rt_tensor *x = &op->in[0];
        int64_t C = last_dim(x), T = x->dim[x->rank - 2], H = op->ints[ATTR_HEADS];
        rope_rotate(OUT(0), IN(0), rt_tensor_numel(x) / (T * C), T, H, C / H, op->floats[ATTR_BASE],
                    op->op == OP_ROPE ? 1 : -1);
        return 0;
    }
    case OP_SILU:
        silu_forward(OUT(0), IN(0), rt_tensor_numel(&op->in[0]));
        return 0;
    case OP_SILU_BACKWARD:
        silu_backward(OUT(0), IN(1), IN(0), rt_tensor_numel(&op->in[0]));
        return 0;
    case OP_MUL:
        mul_forward(OUT(0), IN(0), IN(1), rt_tensor_numel(&op->out[0]));
        return 0;
    case OP_MUL_BACKWARD:                        /* a, b, dy -> da, db */
        mul_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), IN(2), IN(0), IN(1),
                     rt_tensor_numel(&op->in[2]));
        return 0;
    case OP_SPLIT:
    case OP_SPLIT_BACKWARD:
    case OP_CONCAT:
    case OP_CONCAT_BACKWARD:
        return run_split_concat(op, arena);
    case OP_QKV_SPLIT: {
        const rt_tensor *qkv = &op->in[0];
        qkv_split_forward(OUT(0), OUT(1), OUT(2), IN(0), qkv->dim[0], qkv->dim[1], qkv->dim[2] / 3,
                          op->ints[ATTR_HEADS]);
        return 0;
    }
    case OP_QKV_SPLIT_BACKWARD: {                /* dq, dk, dv (B,H,T,D) -> dqkv */
        const rt_tensor *dq = &op->in[0];
        qkv_split_backward(OUT(0), IN(0), IN(1), IN(2), dq->dim[0], dq->dim[2], dq->dim[1] * dq->dim[3],
                           dq->dim[1]);
        return 0;
    }
    case OP_MERGE_HEADS: {                       /* x (B,H,T,D) -> (B,T,H*D) */
        const rt_tensor *x = &op->in[0];
        merge_heads_forward(OUT(0), IN(0), x->dim[0], x->dim[2], x->dim[1], x->dim[3]);
        return 0;
    }
    case OP_MERGE_HEADS_BACKWARD: {              /* dy (B,T,C) -> dx (B,H,T,D) */
        const rt_tensor *dx = &op->out[0];
        merge_heads_backward(OUT(0), IN(0), dx->dim[0], dx->dim[2], dx->dim[1], dx->dim[3]);
        return 0;
    }
    case OP_SOFTMAX: {
        int64_t L = last_dim(&op->in[0]);
        softmax_forward(OUT(0), IN(0), rt_tensor_numel(&op->in[0]) / L, L, (int)op->ints[ATTR_CAUSAL]);
        return 0;
    }
    case OP_SOFTMAX_BACKWARD: {                  /* y, dy */
        int64_t L = last_dim(&op->in[0]);
        softmax_backward(OUT(0), IN(1), IN(0), rt_tensor_numel(&op->in[0]) / L, L);
        return 0;
    }
    case OP_ADD:
        add_forward(OUT(0), IN(0), IN(1), rt_tensor_numel(&op->out[0]));
        return 0;
    case OP_CROSS_ENTROPY: {                     /* logits (N,V), targets (N) */
        int64_t V = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / V;
        if (cross_entropy_forward(OUT(0), IN(0), IN32(1), N, V, &bad))
            return bad_index(op, ctx, "target", IN32(1), bad, V);
        return 0;
    }
    case OP_CROSS_ENTROPY_BACKWARD: {            /* logits, targets, dloss */
        int64_t V = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / V;
        if (cross_entropy_backward(OUT(0), IN(2), IN(0), IN32(1), N, V, &bad))
            return bad_index(op, ctx, "target", IN32(1), bad, V);
        return 0;
    }
    case OP_CONV2D:
    case OP_CONV2D_BACKWARD: {                   /* x (N,C,H,W), w (OC,C,KH,KW) */
        const rt_tensor *x = &op->in[0], *w = &op->in[1];
        int64_t stride = op->ints[ATTR_STRIDE], pad = op->ints[ATTR_PAD];
        if (op->op == OP_CONV2D)
            conv2d_forward(OUT(0), IN(0), IN(1), op->n_in == 3 ? IN(2) : NULL, WS, x->dim[0], x->dim[1],
                           x->dim[2], x->dim[3], w->dim[0], w->dim[2], w->dim[3], stride, pad);
        else
            conv2d_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(2), IN(0),
                            IN(1), WS, x->dim[0], x->dim[1], x->dim[2], x->dim[3], w->dim[0], w->dim[2],
                            w->dim[3], stride, pad);
        return 0;
    }
    case OP_BATCHNORM:
    case OP_BATCHNORM_BACKWARD: {                /* x (N,C,...) */
        const rt_tensor *x = &op->in[0];
        int64_t N = x->dim[0], C = x->dim[1], HW = rt_tensor_numel(x) / (N * C);
        float eps = (float)op->floats[ATTR_EPS];
        if (op->op == OP_BATCHNORM)
            batchnorm_forward(OUT(0), IN(0), IN(1), IN(2), NULL, NULL, N, C, HW, eps, 0.1f);
        else
            batchnorm_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(2),
                               IN(0), IN(1), N, C, HW, eps);
        return 0;
    }
    case OP_MAXPOOL:
    case OP_MAXPOOL_BACKWARD: {
        const rt_tensor *x = &op->in[0];
        int64_t k = op->ints[ATTR_KERNEL], stride = op->ints[ATTR_STRIDE] ? op->ints[ATTR_STRIDE] : k;
        if (op->op == OP_MAXPOOL)
            maxpool2d_forward(OUT(0), IN(0), x->dim[0], x->dim[1], x->dim[2], x->dim[3], k, stride,
                              op->ints[ATTR_PAD]);
        else
            maxpool2d_backward(OUT(0), IN(1), IN(0), x->dim[0], x->dim[1], x->dim[2], x->dim[3], k, stride,
                               op->ints[ATTR_PAD]);
        return 0;
    }
    case OP_AVGPOOL_GLOBAL: {
        const rt_tensor *x = &op->in[0];
        avgpool_global_forward(OUT(0), IN(0), x->dim[0], x->dim[1], x->dim[2] * x->dim[3]);
        return 0;
    }
    case OP_AVGPOOL_GLOBAL_BACKWARD: {           /* dy (N,C) -> dx (N,C,H,W) */
        const rt_tensor *dx = &op->out[0];
        avgpool_global_backward(OUT(0), IN(0), dx->dim[0], dx->dim[1], dx->dim[2] * dx->dim[3]);
        return 0;
    }
    case OP_FLATTEN:
    case OP_FLATTEN_BACKWARD:
    case OP_COPY:
        copy_forward(OUT(0), IN(0), rt_tensor_numel(&op->out[0]));
        return 0;
    case OP_FILL: {
        float value = (float)op->floats[ATTR_VALUE], *y = OUT(0);
        if (op->ints[ATTR_LOSS_SCALE])
            value = ctx->inject_overflow ? INFINITY : value * (ctx->loss_scale > 0 ? ctx->loss_scale : 1.0f);
        for (int64_t i = 0, n = rt_tensor_numel(&op->out[0]); i < n; i++)
            y[i] = value;
        return 0;
    }
    case OP_LR_SCHEDULE:
        *OUT(0) = (float)scheduled_lr(op, ctx->step);
        return 0;
    case OP_SUM_SQUARES: {                       /* g, acc? -> acc + sum(g^2) */
        double acc = op->n_in == 2 ? (double)*IN(1) : 0.0;
        *OUT(0) = (float)(acc + grad_sum_squares(IN(0), rt_tensor_numel(&op->in[0])));
        return 0;
    }
    case OP_CLIP_SCALE: {                        /* as torch.nn.utils.clip_grad_norm_ */
        double norm = sqrt((double)*IN(0)), unscale = 1.0;
        if (op->ints[ATTR_LOSS_SCALE]) {         /* the gradients are loss_scale times the true ones */
            if (!isfinite(norm)) {
                *OUT(0) = NAN;                   /* overflow: every adamw skips this step */
                return 0;
            }
            unscale = ctx->loss_scale > 0 ? 1.0 / ctx->loss_scale : 1.0;
            norm *= unscale;
        }
        double max_norm = op->floats[ATTR_MAX_NORM], coef = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
        *OUT(0) = (float)((coef < 1.0 ? coef : 1.0) * unscale);
        return 0;
    }
    case OP_ADAMW: {                             /* p, g, m, v, lr, scale? */
        int64_t n = rt_tensor_numel(&op->in[0]);
        if (op->n_in == 6 && !isfinite(*IN(5))) {
            ctx->overflowed = 1;                 /* fp16's loss scaler skips the step (clip_scale) */
            return 0;
        }
        if (op->n_in == 6 && *IN(5) != 1.0f)
            grad_scale(IN(1), n, *IN(5));        /* the gradient dies here: scaled in place */
        adamw_update(IN(0), IN(1), IN(2), IN(3), n, (double)*IN(4), op->floats[ATTR_BETA1],
                     op->floats[ATTR_BETA2], op->floats[ATTR_EPS], op->floats[ATTR_WEIGHT_DECAY],
                     ctx->step - ctx->skipped);
        return 0;
    }
    case OP_SGD: {                               /* p, g, lr, scale? */
        int64_t n = rt_tensor_numel(&op->in[0]);
        if (op->n_in == 4 && !isfinite(*IN(3))) {
            ctx->overflowed = 1;
            return 0;
        }
        if (op->n_in == 4 && *IN(3) != 1.0f)
            grad_scale(IN(1), n, *IN(3));
        sgd_update(IN(0), IN(1), n, (double)*IN(2), op->floats[ATTR_WEIGHT_DECAY]);
        return 0;
    }
    default:
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s': op kind %d has no CPU kernel", op->name, (int)op->op);
        return -1;
    }
}

/* run_kernel on f32 copies of op's 16-bit tensors (see above). */
static int run_kernel_widened(const rt_op *op, char *arena, rt_context *ctx)
{
    rt_op wide = *op;
    int64_t at = op->ws_offset + copies_at_floats(op) * (int64_t)sizeof(float);
    for (int i = 0; i < op->n_in; i++) {
        if (!rt_tensor_is_half(&op->in[i]))
            continue;
        half_to_f32((float *)(arena + at), arena + op->in[i].offset, rt_tensor_numel(&op->in[i]), op->in[i].dtype);
        wide.in[i].offset = at;
        wide.in[i].dtype = HALF_DT_F32;
        at += copy_floats(&op->in[i]) * (int64_t)sizeof(float);
    }
    for (int i = 0; i < op->n_out; i++) {
        if (!rt_tensor_is_half(&op->out[i]))
            continue;
        wide.out[i].offset = at;
        wide.out[i].dtype = HALF_DT_F32;
        at += copy_floats(&op->out[i]) * (int64_t)sizeof(float);
    }
    if (run_kernel(&wide, arena, ctx))
        return -1;   /* the kernel wrote nothing (kernels.h): neither do we */
    for (int i = 0; i < op->n_out; i++)
        if (rt_tensor_is_half(&op->out[i]))
            half_from_f32(arena + op->out[i].offset, (const float *)(arena + wide.out[i].offset),
                          rt_tensor_numel(&op->out[i]), op->out[i].dtype);
    return 0;
}

static int run_op(const rt_op *op, char *arena, rt_context *ctx)
{
    for (int i = 0; i < op->n_in + op->n_out; i++)
        if (rt_tensor_is_half(i < op->n_in ? &op->in[i] : &op->out[i - op->n_in])) {
            if (op->ws_offset < 0) {
                snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): 16-bit tensors but no scratch to widen them in",
                         op->name, (int)op->line);
                return -1;
            }
            return run_kernel_widened(op, arena, ctx);
        }
    return run_kernel(op, arena, ctx);
}

static void sleep_seconds(double wait)
{
    struct timespec ts = { (time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleep off at least `least` seconds of what is owed; the sleep's
 * overshoot is credited (owed goes below 0 and the next ops fill it). */
static void pay_owed(rt_context *ctx, double least)
{
    if (!(ctx->owed >= least) || !(ctx->owed > 0))
        return;
    double t0 = seconds_now();
    sleep_seconds(ctx->owed);
    double slept = seconds_now() - t0;
    ctx->paced += slept;
    ctx->owed -= slept;
}

void rt_pace_settle(rt_context *ctx)
{
    if (ctx->emulate_devices)
        pay_owed(ctx, 0.0);
}

void rt_pace_op(rt_context *ctx, double est_seconds, double took)
{
    double faster = est_seconds - took;
    if (faster > 0) {   /* an op slower than declared earns no credit */
        ctx->owed += faster;
        pay_owed(ctx, RT_PACE_MIN_SLEEP);
    }
}

static int run_scheduled(const rt_op *op, char *arena, rt_context *ctx)
{
    if (ctx->before_op && ctx->before_op(ctx->before_op_user, op, ctx))
        return -1;
    if (ctx->emulate_devices && (op->op == OP_SEND || op->op == OP_RECV || op->op == OP_ALLREDUCE))
        rt_pace_settle(ctx);   /* the device's compute is done before it talks */
    if (op->op != OP_ALLREDUCE && ctx->comm && ctx->comm->bucket_count > 0 && rt_comm_flush_bucket(ctx->comm, ctx))
        return -1;
    switch (op->op) {
    case OP_SEND:
    case OP_RECV:
        if (ctx->replay)   /* sent already; received and put back by the stepper */
            return 0;
        /* fall through */
    case OP_ALLREDUCE:
        if (!ctx->comm) {
            snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): this program has no peers to talk to",
                     op->name, (int)op->line);
            return -1;
        }
        return op->op == OP_SEND   ? rt_comm_send(ctx->comm, op, arena, ctx)
               : op->op == OP_RECV ? rt_comm_recv(ctx->comm, op, arena, ctx)
                                   : rt_comm_allreduce(ctx->comm, op, arena, ctx);
    default:
        break;
    }
    if (ctx->emulate_devices && op->est_seconds > 0) {
        double t0 = seconds_now();
        int rc = run_op(op, arena, ctx);
        if (rc == 0)
            rt_pace_op(ctx, op->est_seconds, seconds_now() - t0);
        return rc;
    }
    if (!(ctx->slowdown > 1.0))
        return run_op(op, arena, ctx);
    /* An emulated slower device: the op, then (slowdown - 1) times as long
     * again asleep, so the device takes `slowdown` times as long and the
     * idle time is free for the other devices on this machine. */
    double t0 = seconds_now();
    int rc = run_op(op, arena, ctx);
    sleep_seconds((seconds_now() - t0) * (ctx->slowdown - 1.0));
    return rc;
}

/* --trace: the op as a span of its phase (a message's ops as "send" and
 * "recv" with its bytes, and the ends of its flow: the send's start, the
 * receive's end, when the bytes are in).  Runs that move nothing (a
 * recomputed forward's, a parameter's after micro-batch 0, a partial
 * gradient's before the last) draw no flow. */
static void trace_op(const rt_op *op, const rt_context *ctx, double t0, double t1)
{
    static const char *const phases[] = { "none", "forward", "backward", "update" };
    int message = op->op == OP_SEND || op->op == OP_RECV;
    const char *cat = message ? (op->op == OP_SEND ? "send" : "recv")
                      : op->op == OP_ALLREDUCE ? "allreduce"
                      : ctx->phase >= 0 && ctx->phase < 4 ? phases[ctx->phase] : "op";
    char args[256];
    const rt_tensor *t = op->op == OP_RECV ? &op->out[0] : &op->in[0];
    snprintf(args, sizeof args, "{\"step\":%lld,\"micro_batch\":%d%s", (long long)ctx->step, (int)ctx->micro_batch,
             ctx->replay ? ",\"recomputed\":true" : "");
    if (message || op->op == OP_ALLREDUCE) {
        size_t n = strlen(args);
        snprintf(args + n, sizeof args - n, ",\"tensor\":%lld,\"bytes\":%lld", (long long)op->ints[ATTR_TENSOR],
                 (long long)rt_tensor_bytes(t));
        if (message) {
            n = strlen(args);
            snprintf(args + n, sizeof args - n, ",\"peer_stage\":%lld", (long long)op->ints[ATTR_PEER]);
        }
    }
    strncat(args, "}", sizeof args - strlen(args) - 1);
    rt_trace_span(ctx->trace, 0, cat, op->name, t0, t1, args);
    if (message && !ctx->replay && ctx->comm && rt_comm_moves(ctx->comm, op, ctx))
        rt_trace_flow(ctx->trace, 0, op->op == OP_SEND, ctx->step, ctx->micro_batch, op->ints[ATTR_TENSOR],
                      op->op == OP_SEND ? t0 : t1 - 0.001 * (t1 - t0));
}

int rt_op_run(const rt_op *op, char *arena, rt_context *ctx)
{
    if (!ctx->trace)
        return run_scheduled(op, arena, ctx);
    double t0 = rt_trace_clock(), waited = ctx->comm ? ctx->comm->recv_wait : 0.0;
    int rc = run_scheduled(op, arena, ctx);
    if (rc == 0)
        trace_op(op, ctx, t0, rt_trace_clock());
    /* what a receive spent blocked for its message (comm.c counts it), drawn from its start */
    waited = ctx->comm && op->op == OP_RECV ? ctx->comm->recv_wait - waited : 0.0;
    if (rc == 0 && waited > 0) {
        char name[96];
        snprintf(name, sizeof name, "wait: %s", op->name);
        rt_trace_span(ctx->trace, 0, "wait", name, t0, t0 + waited * 1e6, NULL);
    }
    return rc;
}
