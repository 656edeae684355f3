/* op_table.c: the CPU back end as a table indexed by op (op_table.h):
 * each op's call of its kernel in kernels.h, the scratch it needs and
 * which of its inputs are matrix-product operands.  Each function reads
 * the dims its kernel needs from the op's tensors: the compiler checked
 * them, so nothing here re-validates shapes; only data (token ids,
 * targets) can still be out of range.  Forward and backward sit side by
 * side; the pointwise ops' rows come from ir/pointwise.h. */
#include "cpu/op_table.h"

#include <math.h>
#include <stdio.h>

#include "cpu/kernels.h"
#include "stats_mode.h"
#include "train_settings.h"

static int64_t last_dim(const rt_tensor *t) { return t->rank > 0 ? t->dim[t->rank - 1] : 1; }

#define IN(i)     ((float *)(arena + op->in[i].offset))
#define IN32(i)   ((const int32_t *)(arena + op->in[i].offset))
#define OUT(i)    ((float *)(arena + op->out[i].offset))
#define WS        (op->ws_offset >= 0 ? (float *)(arena + op->ws_offset) : NULL)
#define RUN(name) static int name(const rt_op *op, char *arena, rt_context *ctx)

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

static int bad_index(const rt_op *op, rt_context *ctx, const char *what, const int32_t *idx, int64_t pos, int64_t limit)
{
    snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): %s %d at position %lld is outside [0, %lld)", op->name,
             (int)op->line, what, (int)idx[pos], (long long)pos, (long long)limit);
    return -1;
}

/* ---- embedding, positions ------------------------------------------------ */

RUN(run_embedding) /* idx (N), table (V,C) -> (N,C); a 16-bit table read as it is (native_half_table) */
{
    int64_t V = op->in[1].dim[0], C = op->in[1].dim[1], N = rt_tensor_numel(&op->in[0]), bad = 0;
    int half = rt_tensor_is_half(&op->in[1]);
    if (half ? embedding_forward_half(OUT(0), IN32(0), (const uint16_t *)IN(1), N, V, C, op->in[1].dtype, &bad)
             : embedding_forward(OUT(0), IN32(0), IN(1), N, V, C, &bad))
        return bad_index(op, ctx, "token id", IN32(0), bad, V);
    return 0;
}

/* An embedding reads only its rows of a 16-bit table: never the whole table widened. */
static uint32_t native_half_table(const rt_op *op) { return rt_tensor_is_half(&op->in[1]) ? 1u << 1 : 0; }

RUN(run_embedding_backward) /* idx (N), dy (N,C) -> dtable (V,C) */
{
    int64_t V = op->out[0].dim[0], C = op->out[0].dim[1], N = rt_tensor_numel(&op->in[0]), bad = 0;
    if (embedding_backward(OUT(0), IN(1), IN32(0), N, V, C, &bad))
        return bad_index(op, ctx, "token id", IN32(0), bad, V);
    return 0;
}

RUN(run_positions)
{
    int64_t T = last_dim(&op->out[0]);
    positions_forward((int32_t *)OUT(0), rt_tensor_numel(&op->out[0]) / T, T);
    return 0;
}

/* ---- matrix products --------------------------------------------------------- */

/* A product of few rows (an inference step's) reads a 16-bit weight as it
 * is: it is bound by the weight's bytes, which a widened copy would make
 * three times as many; more rows are sgemm's, on the copy. */
#define NATIVE_HALF_MAX_ROWS 16
static uint32_t native_half_weight(const rt_op *op)
{
    int tw = op->ints[ATTR_TRANSPOSE_W] != 0;
    int64_t K = op->in[1].dim[tw ? 0 : 1], M = rt_tensor_numel(&op->in[0]) / (K > 0 ? K : 1);
    return rt_tensor_is_half(&op->in[1]) && M <= NATIVE_HALF_MAX_ROWS ? 1u << 1 : 0;
}

RUN(run_linear) /* x (M,K), w (N,K) or (K,N) under transpose_w, b (N)? */
{
    int tw = op->ints[ATTR_TRANSPOSE_W] != 0;
    int64_t K = op->in[1].dim[tw ? 0 : 1], N = op->in[1].dim[tw ? 1 : 0], M = rt_tensor_numel(&op->in[0]) / K;
    if (rt_tensor_is_half(&op->in[1])) /* native_half_weight's few rows */
        linear_forward_half_w(OUT(0), IN(0), (const uint16_t *)IN(1), op->n_in == 3 ? IN(2) : NULL, M, K, N, tw,
                              op->in[1].dtype);
    else
        linear_forward(OUT(0), IN(0), IN(1), op->n_in == 3 ? IN(2) : NULL, M, K, N, tw);
    return 0;
}

RUN(run_linear_backward) /* x, w, dy -> dx, dw, db */
{
    int tw = op->ints[ATTR_TRANSPOSE_W] != 0;
    int64_t K = op->in[1].dim[tw ? 0 : 1], N = op->in[1].dim[tw ? 1 : 0], M = rt_tensor_numel(&op->in[0]) / K;
    linear_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(2), IN(0), IN(1), M, K,
                    N, tw);
    return 0;
}

RUN(run_matmul) /* a (..,M,K), b (..,K,N) or (..,N,K); and the backward */
{
    const rt_tensor *a = &op->in[0], *b = &op->in[1];
    int tb = op->ints[ATTR_TRANSPOSE_B] != 0, b_batched = b->rank > 2;
    int64_t M = a->dim[a->rank - 2], K = a->dim[a->rank - 1];
    int64_t N = b->dim[b->rank - (tb ? 2 : 1)], Bt = rt_tensor_numel(a) / (M * K);
    float scale = (float)op->floats[ATTR_SCALE];
    if (op->op == OP_MATMUL)
        matmul_forward(OUT(0), IN(0), IN(1), Bt, M, K, N, tb, b_batched, scale);
    else
        matmul_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), IN(2), IN(0), IN(1), Bt, M, K, N, tb, b_batched,
                        scale);
    return 0;
}

/* Which inputs the products read as operands (exec.h: rt_op_product_inputs). */
static uint32_t product_inputs_dense(const rt_op *op)
{
    int64_t grads = op->ints[ATTR_GRADS];
    int dx = (grads & 1) != 0, dw = (grads & 2) != 0;
    if (op->op == OP_LINEAR || op->op == OP_MATMUL) /* x·wᵀ, a·op(b) */
        return 1u << 0 | 1u << 1;
    /* dx = dy·w, dw = dyᵀ·x; da = dc·op(b)ᵀ, db = aᵀ·dc or dcᵀ·a */
    return (dx || dw ? 1u << 2 : 0) | (dx ? 1u << 1 : 0) | (dw ? 1u << 0 : 0);
}

/* ---- convolution and pooling ------------------------------------------------- */

RUN(run_conv2d) /* x (N,C,H,W), w (OC,C,KH,KW); and the backward */
{
    const rt_tensor *x = &op->in[0], *w = &op->in[1];
    int64_t stride = op->ints[ATTR_STRIDE], pad = op->ints[ATTR_PAD];
    if (op->op == OP_CONV2D)
        conv2d_forward(OUT(0), IN(0), IN(1), op->n_in == 3 ? IN(2) : NULL, WS, x->dim[0], x->dim[1], x->dim[2],
                       x->dim[3], w->dim[0], w->dim[2], w->dim[3], stride, pad);
    else
        conv2d_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(2), IN(0), IN(1), WS,
                        x->dim[0], x->dim[1], x->dim[2], x->dim[3], w->dim[0], w->dim[2], w->dim[3], stride, pad);
    return 0;
}

static int64_t workspace_conv2d(const rt_op *op)
{
    const rt_tensor *x = &op->in[0], *w = &op->in[1];
    return conv2d_workspace_floats(x->dim[0], x->dim[1], x->dim[2], x->dim[3], w->dim[0], w->dim[2], w->dim[3],
                                   op->ints[ATTR_STRIDE], op->ints[ATTR_PAD]);
}

/* w·im2col(x), x itself when 1x1; dx = col2im(wᵀ·dy), dw = dy·im2col(x)ᵀ */
static uint32_t product_inputs_conv2d(const rt_op *op)
{
    const rt_tensor *w = &op->in[1];
    int64_t grads = op->ints[ATTR_GRADS];
    int dx = (grads & 1) != 0, dw = (grads & 2) != 0;
    int pointwise = w->dim[2] == 1 && w->dim[3] == 1 && op->ints[ATTR_STRIDE] == 1 && op->ints[ATTR_PAD] == 0;
    if (op->op == OP_CONV2D)
        return 1u << 1 | (pointwise ? 1u << 0 : 0);
    return (dx || dw ? 1u << 2 : 0) | (dx ? 1u << 1 : 0) | (dw && pointwise ? 1u << 0 : 0);
}

RUN(run_maxpool) /* x (N,C,H,W); and the backward */
{
    const rt_tensor *x = &op->in[0];
    int64_t k = op->ints[ATTR_KERNEL], stride = op->ints[ATTR_STRIDE] ? op->ints[ATTR_STRIDE] : k;
    if (op->op == OP_MAXPOOL)
        maxpool2d_forward(OUT(0), IN(0), x->dim[0], x->dim[1], x->dim[2], x->dim[3], k, stride, op->ints[ATTR_PAD]);
    else
        maxpool2d_backward(OUT(0), IN(1), IN(0), x->dim[0], x->dim[1], x->dim[2], x->dim[3], k, stride,
                           op->ints[ATTR_PAD]);
    return 0;
}

RUN(run_avgpool_global) /* x (N,C,H,W) -> (N,C) */
{
    const rt_tensor *x = &op->in[0];
    avgpool_global_forward(OUT(0), IN(0), x->dim[0], x->dim[1], x->dim[2] * x->dim[3]);
    return 0;
}

RUN(run_avgpool_global_backward) /* dy (N,C) -> dx (N,C,H,W) */
{
    const rt_tensor *dx = &op->out[0];
    avgpool_global_backward(OUT(0), IN(0), dx->dim[0], dx->dim[1], dx->dim[2] * dx->dim[3]);
    return 0;
}

/* ---- normalisation ------------------------------------------------------------- */

RUN(run_layernorm) /* x (N,C), w (C), b (C) */
{
    int64_t C = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / C;
    layernorm_forward(OUT(0), IN(0), IN(1), IN(2), N, C, (float)op->floats[ATTR_EPS]);
    return 0;
}

RUN(run_layernorm_backward) /* x, w, dy -> dx, dw, db */
{
    int64_t C = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / C;
    layernorm_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(2), IN(0), IN(1), N,
                       C, (float)op->floats[ATTR_EPS]);
    return 0;
}

RUN(run_rmsnorm) /* x (N,C), w (C) */
{
    int64_t C = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / C;
    rmsnorm_forward(OUT(0), IN(0), IN(1), N, C, (float)op->floats[ATTR_EPS]);
    return 0;
}

RUN(run_rmsnorm_backward) /* x, w, dy -> dx, dw */
{
    int64_t C = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / C;
    rmsnorm_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), IN(2), IN(0), IN(1), N, C,
                     (float)op->floats[ATTR_EPS]);
    return 0;
}

RUN(run_batchnorm) /* x (N,C,...), w (C), b (C)[, running mean, var (C)]; and the backward */
{
    const rt_tensor *x = &op->in[0];
    int64_t N = x->dim[0], C = x->dim[1], HW = rt_tensor_numel(x) / (N * C);
    float eps = (float)op->floats[ATTR_EPS];
    int running = op->op == OP_BATCHNORM && op->n_in == 5, mode = rt_stats_mode_of(ctx);
    if (running && mode == RT_STATS_USE)
        batchnorm_inference(OUT(0), IN(0), IN(1), IN(2), IN(3), IN(4), N, C, HW, eps);
    else if (op->op == OP_BATCHNORM)
        batchnorm_forward(OUT(0), IN(0), IN(1), IN(2), running && mode == RT_STATS_UPDATE ? IN(3) : NULL,
                          running && mode == RT_STATS_UPDATE ? IN(4) : NULL, N, C, HW, eps,
                          (float)op->floats[ATTR_MOMENTUM]);
    else
        batchnorm_backward(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(2), IN(0), IN(1),
                           N, C, HW, eps);
    return 0;
}

RUN(run_softmax) /* x (N,L) over L */
{
    int64_t L = last_dim(&op->in[0]);
    softmax_forward(OUT(0), IN(0), rt_tensor_numel(&op->in[0]) / L, L, (int)op->ints[ATTR_CAUSAL]);
    return 0;
}

RUN(run_softmax_backward) /* y, dy -> dx */
{
    int64_t L = last_dim(&op->in[0]);
    softmax_backward(OUT(0), IN(1), IN(0), rt_tensor_numel(&op->in[0]) / L, L);
    return 0;
}

/* ---- attention and its reshapes --------------------------------------------------- */

RUN(run_attention) /* qkv (B,T,3C), or q (B,T,H*D), k, v (B,T,KV*D); and the backward */
{
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
        attention_backward_heads(grad_out(op, arena, 0), grad_out(op, arena, 1), grad_out(op, arena, 2), IN(3), IN(0),
                                 IN(1), IN(2), WS, B, T, H, KV, D, H * D, KV * D);
    return 0;
}

static int64_t workspace_attention(const rt_op *op) { return attention_workspace_floats(op->in[0].dim[1]); }

RUN(run_rope) /* x or dy (R,T,H*D): rotated by +t (by pos (R,T) when given), or back */
{
    const rt_tensor *x = &op->in[0];
    int64_t C = last_dim(x), T = x->dim[x->rank - 2], H = op->ints[ATTR_HEADS];
    rope_scaling s = { op->floats[ATTR_SCALE_FACTOR], op->floats[ATTR_LOW_FREQ], op->floats[ATTR_HIGH_FREQ],
                       op->floats[ATTR_OLD_CTX] };
    if (op->op == OP_ROPE && op->n_in == 2)
        rope_rotate_at(OUT(0), IN(0), IN32(1), rt_tensor_numel(x) / (T * C), T, H, C / H, op->floats[ATTR_BASE], &s);
    else
        rope_rotate(OUT(0), IN(0), rt_tensor_numel(x) / (T * C), T, H, C / H, op->floats[ATTR_BASE], &s,
                    op->op == OP_ROPE ? 1 : -1);
    return 0;
}

RUN(run_attention_cached) /* q (B,T,H*D), k, v (B,T,KV*D), k_cache, v_cache (B,CTX,KV*D), pos (B,T) */
{
    const rt_tensor *q = &op->in[0];
    int64_t B = q->dim[0], T = q->dim[1], H = op->ints[ATTR_HEADS], CTX = op->in[3].dim[1], bad = 0;
    int64_t KV = op->ints[ATTR_KV_HEADS] ? op->ints[ATTR_KV_HEADS] : H, D = q->dim[2] / H;
    if (attention_cached_forward(OUT(0), IN(0), IN(1), IN(2), IN(3), IN(4), IN32(5), WS, B, T, CTX, H, KV, D, &bad))
        return bad_index(op, ctx, "position", IN32(5), bad, CTX);
    return 0;
}

static int64_t workspace_attention_cached(const rt_op *op)
{
    return attention_cached_workspace_floats(op->in[0].dim[0], op->ints[ATTR_HEADS], op->in[3].dim[1]);
}

RUN(run_qkv_split) /* qkv (B,T,3C) -> q, k, v (B,H,T,D) */
{
    const rt_tensor *qkv = &op->in[0];
    qkv_split_forward(OUT(0), OUT(1), OUT(2), IN(0), qkv->dim[0], qkv->dim[1], qkv->dim[2] / 3, op->ints[ATTR_HEADS]);
    return 0;
}

RUN(run_qkv_split_backward) /* dq, dk, dv (B,H,T,D) -> dqkv */
{
    const rt_tensor *dq = &op->in[0];
    qkv_split_backward(OUT(0), IN(0), IN(1), IN(2), dq->dim[0], dq->dim[2], dq->dim[1] * dq->dim[3], dq->dim[1]);
    return 0;
}

RUN(run_merge_heads) /* x (B,H,T,D) -> (B,T,H*D) */
{
    const rt_tensor *x = &op->in[0];
    merge_heads_forward(OUT(0), IN(0), x->dim[0], x->dim[2], x->dim[1], x->dim[3]);
    return 0;
}

RUN(run_merge_heads_backward) /* dy (B,T,C) -> dx (B,H,T,D) */
{
    const rt_tensor *dx = &op->out[0];
    merge_heads_backward(OUT(0), IN(0), dx->dim[0], dx->dim[2], dx->dim[1], dx->dim[3]);
    return 0;
}

/* split, concat and their backwards: the one whole tensor (split's input,
 * concat's output, or the gradients' counterparts) and its parts along the
 * axis attribute; every part is there (concat's backward writes every
 * input's slice: ops.h's bwd_all_inputs). */
RUN(run_split_concat)
{
    int whole_is_input = op->op == OP_SPLIT || op->op == OP_CONCAT_BACKWARD;
    const rt_tensor *whole = whole_is_input ? &op->in[0] : &op->out[0];
    int n = whole_is_input ? op->n_out : op->n_in;
    int64_t axis = op->ints[ATTR_AXIS] < 0 ? op->ints[ATTR_AXIS] + whole->rank : op->ints[ATTR_AXIS];
    int64_t outer = 1, inner = 1, sizes[RT_MAX_IN];
    float *parts[RT_MAX_IN];
    for (int i = 0; i < axis; i++)
        outer *= whole->dim[i];
    for (int i = (int)axis + 1; i < whole->rank; i++)
        inner *= whole->dim[i];
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

RUN(run_copy) /* flatten, its backward, copy: y = x */
{
    copy_forward(OUT(0), IN(0), rt_tensor_numel(&op->out[0]));
    return 0;
}

/* ---- the pointwise ops (ir/pointwise.h) ------------------------------------------- */

RUN(run_pointwise) /* (x[, z]) -> y, all (n) */
{
    float *const out[2] = { OUT(0), NULL };
    const float *const in[3] = { IN(0), op->n_in > 1 ? IN(1) : NULL, NULL };
    return pointwise_run(op->op, out, in, rt_tensor_numel(&op->out[0]));
}

RUN(run_pointwise_backward) /* (x[, z], dy) -> the gradients asked for, all (n) */
{
    float *const out[2] = { grad_out(op, arena, 0), grad_out(op, arena, 1) };
    const float *const in[3] = { IN(0), IN(1), op->n_in > 2 ? IN(2) : NULL };
    return pointwise_run(op->op, out, in, rt_tensor_numel(&op->in[0]));
}

/* ---- the loss ---------------------------------------------------------------------- */

RUN(run_cross_entropy) /* logits (N,V), targets (N) -> mean loss */
{
    int64_t V = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / V, bad = 0;
    if (cross_entropy_forward(OUT(0), IN(0), IN32(1), N, V, &bad))
        return bad_index(op, ctx, "target", IN32(1), bad, V);
    *OUT(0) *= ctx->loss_weight > 0 ? ctx->loss_weight : 1.0f; /* the mean over the trained targets */
    return 0;
}

RUN(run_cross_entropy_backward) /* logits, targets, dloss -> dlogits */
{
    int64_t V = last_dim(&op->in[0]), N = rt_tensor_numel(&op->in[0]) / V, bad = 0;
    float dloss = *IN(2) * (ctx->loss_weight > 0 ? ctx->loss_weight : 1.0f);
    if (cross_entropy_backward(OUT(0), &dloss, IN(0), IN32(1), N, V, &bad))
        return bad_index(op, ctx, "target", IN32(1), bad, V);
    return 0;
}

RUN(run_fill) /* the loss seed, or a constant */
{
    float value = (float)op->floats[ATTR_VALUE], *y = OUT(0);
    if (op->ints[ATTR_LOSS_SCALE])
        value = ctx->inject_overflow ? INFINITY : value * (ctx->loss_scale > 0 ? ctx->loss_scale : 1.0f);
    for (int64_t i = 0, n = rt_tensor_numel(&op->out[0]); i < n; i++)
        y[i] = value;
    return 0;
}

/* ---- the optimizer ------------------------------------------------------------------- */

/* This step's learning rate: the run's settings (train_settings.h: the
 * compiled ones, or what the run's options made of them); a caller
 * without settings (a unit test) gets the compiled schedule. */
RUN(run_lr_schedule)
{
    rt_train_settings compiled;
    const rt_train_settings *s = ctx->train;
    if (!s) {
        rt_train_settings_from_ops(op, 1, &compiled);
        s = &compiled;
    }
    *OUT(0) = (float)rt_train_lr(s, ctx->step);
    return 0;
}

/* The decay of an update op's parameter: the run's on a matrix or kernel
 * (rank >= 2, the optimizer pass's rule), none on a bias or norm scale. */
static double weight_decay(const rt_op *op, const rt_context *ctx)
{
    if (!ctx->train)
        return op->floats[ATTR_WEIGHT_DECAY];
    return op->in[0].rank >= 2 ? ctx->train->weight_decay : 0.0;
}

RUN(run_sum_squares) /* g, acc? -> acc + sum(g^2) */
{
    double acc = op->n_in == 2 ? (double)*IN(1) : 0.0;
    *OUT(0) = (float)(acc + grad_sum_squares(IN(0), rt_tensor_numel(&op->in[0])));
    return 0;
}

RUN(run_clip_scale) /* as torch.nn.utils.clip_grad_norm_ */
{
    double norm = sqrt((double)*IN(0)), unscale = 1.0;
    if (op->ints[ATTR_LOSS_SCALE]) { /* the gradients are loss_scale times the true ones */
        if (!isfinite(norm)) {
            *OUT(0) = NAN; /* overflow: every adamw skips this step */
            return 0;
        }
        unscale = ctx->loss_scale > 0 ? 1.0 / ctx->loss_scale : 1.0;
        norm *= unscale;
    }
    ctx->grad_norm = norm; /* the step line's */
    double max_norm = ctx->train ? ctx->train->grad_clip : op->floats[ATTR_MAX_NORM];
    double coef = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;
    *OUT(0) = (float)((coef < 1.0 ? coef : 1.0) * unscale);
    return 0;
}

RUN(run_adamw) /* p, g, m, v, lr, scale? */
{
    int64_t n = rt_tensor_numel(&op->in[0]);
    if (op->n_in == 6 && !isfinite(*IN(5))) {
        ctx->overflowed = 1; /* fp16's loss scaler skips the step (clip_scale) */
        return 0;
    }
    if (op->n_in == 6 && *IN(5) != 1.0f)
        grad_scale(IN(1), n, *IN(5)); /* the gradient dies here: scaled in place */
    adamw_update(IN(0), IN(1), IN(2), IN(3), n, (double)*IN(4), op->floats[ATTR_BETA1], op->floats[ATTR_BETA2],
                 op->floats[ATTR_EPS], weight_decay(op, ctx), ctx->step - ctx->skipped);
    return 0;
}

RUN(run_sgd) /* p, g, lr, scale? */
{
    int64_t n = rt_tensor_numel(&op->in[0]);
    if (op->n_in == 4 && !isfinite(*IN(3))) {
        ctx->overflowed = 1;
        return 0;
    }
    if (op->n_in == 4 && *IN(3) != 1.0f)
        grad_scale(IN(1), n, *IN(3));
    sgd_update(IN(0), IN(1), n, (double)*IN(2), weight_decay(op, ctx));
    return 0;
}

/* ---- the table ----------------------------------------------------------------------- */

/* clang-format off */
#define POINTWISE_ROWS(ENUM, nm, arity, f0, f1, has, ...)                                                      \
    [OP_##ENUM] = { run_pointwise, NULL, NULL, 0, NULL },                                                       \
    FU_IF_BACKWARD_##has([OP_##ENUM##_BACKWARD] = { run_pointwise_backward, NULL, NULL, 0, NULL },)

const rt_cpu_kernel rt_cpu_kernels[] = {
    /*                              run                          scratch (floats)     product inputs          step loop's  16-bit inputs read as they are */
    [OP_EMBEDDING]              = { run_embedding,               NULL,                NULL,                   0, native_half_table },
    [OP_EMBEDDING_BACKWARD]     = { run_embedding_backward,      NULL,                NULL,                   0, NULL },
    [OP_POSITIONS]              = { run_positions,               NULL,                NULL,                   0, NULL },
    [OP_LINEAR]                 = { run_linear,                  NULL,                product_inputs_dense,   0, native_half_weight },
    [OP_LINEAR_BACKWARD]        = { run_linear_backward,         NULL,                product_inputs_dense,   0, NULL },
    [OP_MATMUL]                 = { run_matmul,                  NULL,                product_inputs_dense,   0, NULL },
    [OP_MATMUL_BACKWARD]        = { run_matmul,                  NULL,                product_inputs_dense,   0, NULL },
    [OP_CONV2D]                 = { run_conv2d,                  workspace_conv2d,    product_inputs_conv2d,  0, NULL },
    [OP_CONV2D_BACKWARD]        = { run_conv2d,                  workspace_conv2d,    product_inputs_conv2d,  0, NULL },
    [OP_MAXPOOL]                = { run_maxpool,                 NULL,                NULL,                   0, NULL },
    [OP_MAXPOOL_BACKWARD]       = { run_maxpool,                 NULL,                NULL,                   0, NULL },
    [OP_AVGPOOL_GLOBAL]         = { run_avgpool_global,          NULL,                NULL,                   0, NULL },
    [OP_AVGPOOL_GLOBAL_BACKWARD]= { run_avgpool_global_backward, NULL,                NULL,                   0, NULL },
    [OP_LAYERNORM]              = { run_layernorm,               NULL,                NULL,                   0, NULL },
    [OP_LAYERNORM_BACKWARD]     = { run_layernorm_backward,      NULL,                NULL,                   0, NULL },
    [OP_RMSNORM]                = { run_rmsnorm,                 NULL,                NULL,                   0, NULL },
    [OP_RMSNORM_BACKWARD]       = { run_rmsnorm_backward,        NULL,                NULL,                   0, NULL },
    [OP_BATCHNORM]              = { run_batchnorm,               NULL,                NULL,                   0, NULL },
    [OP_BATCHNORM_BACKWARD]     = { run_batchnorm,               NULL,                NULL,                   0, NULL },
    [OP_SOFTMAX]                = { run_softmax,                 NULL,                NULL,                   0, NULL },
    [OP_SOFTMAX_BACKWARD]       = { run_softmax_backward,        NULL,                NULL,                   0, NULL },
    [OP_ATTENTION]              = { run_attention,               workspace_attention, NULL,                   0, NULL },
    [OP_ATTENTION_BACKWARD]     = { run_attention,               workspace_attention, NULL,                   0, NULL },
    [OP_ROPE]                   = { run_rope,                    NULL,                NULL,                   0, NULL },
    [OP_ATTENTION_CACHED]       = { run_attention_cached,        workspace_attention_cached, NULL,            0, NULL },
    [OP_ROPE_BACKWARD]          = { run_rope,                    NULL,                NULL,                   0, NULL },
    [OP_QKV_SPLIT]              = { run_qkv_split,               NULL,                NULL,                   0, NULL },
    [OP_QKV_SPLIT_BACKWARD]     = { run_qkv_split_backward,      NULL,                NULL,                   0, NULL },
    [OP_MERGE_HEADS]            = { run_merge_heads,             NULL,                NULL,                   0, NULL },
    [OP_MERGE_HEADS_BACKWARD]   = { run_merge_heads_backward,    NULL,                NULL,                   0, NULL },
    [OP_SPLIT]                  = { run_split_concat,            NULL,                NULL,                   0, NULL },
    [OP_SPLIT_BACKWARD]         = { run_split_concat,            NULL,                NULL,                   0, NULL },
    [OP_CONCAT]                 = { run_split_concat,            NULL,                NULL,                   0, NULL },
    [OP_CONCAT_BACKWARD]        = { run_split_concat,            NULL,                NULL,                   0, NULL },
    [OP_FLATTEN]                = { run_copy,                    NULL,                NULL,                   0, NULL },
    [OP_FLATTEN_BACKWARD]       = { run_copy,                    NULL,                NULL,                   0, NULL },
    [OP_COPY]                   = { run_copy,                    NULL,                NULL,                   0, NULL },
    FU_POINTWISE_OPS(POINTWISE_ROWS)
    [OP_CROSS_ENTROPY]          = { run_cross_entropy,           NULL,                NULL,                   0, NULL },
    [OP_CROSS_ENTROPY_BACKWARD] = { run_cross_entropy_backward,  NULL,                NULL,                   0, NULL },
    [OP_FILL]                   = { run_fill,                    NULL,                NULL,                   0, NULL },
    [OP_LR_SCHEDULE]            = { run_lr_schedule,             NULL,                NULL,                   0, NULL },
    [OP_SUM_SQUARES]            = { run_sum_squares,             NULL,                NULL,                   0, NULL },
    [OP_CLIP_SCALE]             = { run_clip_scale,              NULL,                NULL,                   0, NULL },
    [OP_ADAMW]                  = { run_adamw,                   NULL,                NULL,                   0, NULL },
    [OP_SGD]                    = { run_sgd,                     NULL,                NULL,                   0, NULL },
    /* Messages: the step loop's (exec.c: rt_op_run hands them to the comm layer). */
    [OP_SEND]                   = { NULL,                        NULL,                NULL,                   1, NULL },
    [OP_RECV]                   = { NULL,                        NULL,                NULL,                   1, NULL },
    [OP_ALLREDUCE]              = { NULL,                        NULL,                NULL,                   1, NULL },
    [OP_ALLGATHER]              = { NULL,                        NULL,                NULL,                   1, NULL },
};
/* clang-format on */
/* The last op has its row (an op appended without one fails here); that
 * every op has one is tests/unit/test_op_tables.c's. */
_Static_assert(sizeof rt_cpu_kernels / sizeof rt_cpu_kernels[0] == OP_COUNT, "one CPU row per op");

const rt_cpu_kernel *rt_cpu_kernel_of(int32_t op)
{
    if (op < 0 || op >= OP_COUNT)
        return NULL;
    const rt_cpu_kernel *k = &rt_cpu_kernels[op];
    return k->run || k->step_loop ? k : NULL;
}

uint32_t rt_cpu_native_half_inputs(const rt_op *op)
{
    const rt_cpu_kernel *k = rt_cpu_kernel_of(op->op);
    return k && k->native_half ? k->native_half(op) : 0;
}
