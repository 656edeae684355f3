/* cuda_cases.c: the op instances of the CUDA emulation harness (see
 * cuda_cases.h).  Sizes are chosen against the 256-thread block: rows of
 * 300 (more than a block, not a multiple), 37 and 13 (less), element counts
 * that leave the last block partial. */
#include "cuda_cases.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/ops.h"

typedef struct {
    cuda_case *c;
    int        n, cap;
} case_list;

static rt_tensor shape(int rank, ...)
{
    rt_tensor t;
    memset(&t, 0, sizeof t);
    t.rank = rank;
    va_list ap;
    va_start(ap, rank);
    for (int i = 0; i < rank; i++)
        t.dim[i] = va_arg(ap, int64_t);
    va_end(ap);
    return t;
}
#define S1(a)          shape(1, (int64_t)(a))
#define S2(a, b)       shape(2, (int64_t)(a), (int64_t)(b))
#define S3(a, b, c)    shape(3, (int64_t)(a), (int64_t)(b), (int64_t)(c))
#define S4(a, b, c, d) shape(4, (int64_t)(a), (int64_t)(b), (int64_t)(c), (int64_t)(d))
#define SCALAR         shape(0)

/* A new case of op kind k, attributes at the op table's defaults. */
static cuda_case *add(case_list *l, int k, const char *label)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->c = realloc(l->c, (size_t)l->cap * sizeof *l->c);
        if (!l->c)
            abort();
    }
    cuda_case *c = &l->c[l->n++];
    memset(c, 0, sizeof *c);
    c->op.op = k;
    c->op.ws_offset = -1;
    snprintf(c->label, sizeof c->label, "%s", label);
    snprintf(c->op.name, sizeof c->op.name, "%s", label);
    const op_def *def = &op_table[k];
    for (int i = 0; i < def->n_attr_specs; i++) {
        c->op.ints[def->attr_specs[i].key] = def->attr_specs[i].default_int;
        c->op.floats[def->attr_specs[i].key] = def->attr_specs[i].default_float;
    }
    return c;
}

static void in(cuda_case *c, rt_tensor t) { c->op.in[c->op.n_in++] = t; }
static void out(cuda_case *c, rt_tensor t) { c->op.out[c->op.n_out++] = t; }
static void ids(cuda_case *c, rt_tensor t, int32_t range)
{
    c->int_range[c->op.n_in] = range;
    in(c, t);
}

/* Every tensor its own 64-byte-aligned place; then the op's workspace. */
static void place(cuda_case *c)
{
    int64_t at = 0;
    for (int i = 0; i < c->op.n_in; i++) {
        c->op.in[i].offset = at;
        at += (rt_tensor_numel(&c->op.in[i]) * 4 + 63) / 64 * 64;
    }
    for (int i = 0; i < c->op.n_out; i++) {
        c->op.out[i].offset = at;
        at += (rt_tensor_numel(&c->op.out[i]) * 4 + 63) / 64 * 64;
    }
    int64_t ws = rt_op_workspace_floats(&c->op);
    if (ws > 0) {
        c->op.ws_offset = at;
        at += (ws * 4 + 63) / 64 * 64;
    }
    c->arena_bytes = at + 64;
}

static void elementwise_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_GELU, "gelu 3x333"); in(c, S2(3, 333)); out(c, S2(3, 333));
    c = add(l, OP_GELU_BACKWARD, "gelu_backward 3x333"); in(c, S2(3, 333)); in(c, S2(3, 333)); out(c, S2(3, 333));
    c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_RELU, "relu 1001"); in(c, S1(1001)); out(c, S1(1001));
    c = add(l, OP_RELU_BACKWARD, "relu_backward 1001"); in(c, S1(1001)); in(c, S1(1001)); out(c, S1(1001));
    c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_ADD, "add 7x77"); in(c, S2(7, 77)); in(c, S2(7, 77)); out(c, S2(7, 77));
    c = add(l, OP_COPY, "copy 517"); in(c, S1(517)); out(c, S1(517));
    c = add(l, OP_FLATTEN, "flatten 2x3x5x7"); in(c, S4(2, 3, 5, 7)); out(c, S2(2, 105));
    c = add(l, OP_FILL, "fill 259"); out(c, S1(259)); c->op.floats[ATTR_VALUE] = 1.25;
    c = add(l, OP_POSITIONS, "positions 3x37"); ids(c, S2(3, 37), 50); out(c, S2(3, 37));
    c = add(l, OP_EMBEDDING, "embedding 2x13 of 37x300"); ids(c, S2(2, 13), 37); in(c, S2(37, 300)); out(c, S3(2, 13, 300));
    c = add(l, OP_EMBEDDING_BACKWARD, "embedding_backward 2x13 to 37x300");
    ids(c, S2(2, 13), 11);   /* 11 of 37 rows: ids repeat, rows add up */
    in(c, S3(2, 13, 300)); out(c, S2(37, 300));
    c->op.ints[ATTR_GRADS] = 2;
    c = add(l, OP_QKV_SPLIT, "qkv_split 2x13x72 h3"); in(c, S3(2, 13, 72)); c->op.ints[ATTR_HEADS] = 3;
    out(c, S4(2, 3, 13, 8)); out(c, S4(2, 3, 13, 8)); out(c, S4(2, 3, 13, 8));
    c = add(l, OP_QKV_SPLIT_BACKWARD, "qkv_split_backward 2x13x72 h3");
    in(c, S4(2, 3, 13, 8)); in(c, S4(2, 3, 13, 8)); in(c, S4(2, 3, 13, 8)); out(c, S3(2, 13, 72));
    c->op.ints[ATTR_HEADS] = 3; c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_MERGE_HEADS, "merge_heads 2x3x13x8"); in(c, S4(2, 3, 13, 8)); out(c, S3(2, 13, 24));
    c = add(l, OP_MERGE_HEADS_BACKWARD, "merge_heads_backward 2x3x13x8"); in(c, S3(2, 13, 24)); out(c, S4(2, 3, 13, 8));
    c->op.ints[ATTR_GRADS] = 1;
}

static void dense_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_LINEAR, "linear 2x5x37 -> 19, bias"); in(c, S3(2, 5, 37)); in(c, S2(19, 37)); in(c, S1(19));
    out(c, S3(2, 5, 19));
    c = add(l, OP_LINEAR, "linear 11x300 -> 7"); in(c, S2(11, 300)); in(c, S2(7, 300)); out(c, S2(11, 7));
    c = add(l, OP_LINEAR_BACKWARD, "linear_backward 2x5x37 -> 19");
    in(c, S3(2, 5, 37)); in(c, S2(19, 37)); in(c, S3(2, 5, 19));
    out(c, S3(2, 5, 37)); out(c, S2(19, 37)); out(c, S1(19));
    c->op.ints[ATTR_GRADS] = 7;
    c = add(l, OP_LINEAR_BACKWARD, "linear_backward dw only"); in(c, S2(11, 300)); in(c, S2(7, 300)); in(c, S2(11, 7));
    out(c, S2(7, 300));
    c->op.ints[ATTR_GRADS] = 2;
    c = add(l, OP_MATMUL, "matmul 2x3x5x7 . (9x7)^T batched"); in(c, S4(2, 3, 5, 7)); in(c, S4(2, 3, 9, 7));
    out(c, S4(2, 3, 5, 9)); c->op.ints[ATTR_TRANSPOSE_B] = 1; c->op.floats[ATTR_SCALE] = 0.3;
    c = add(l, OP_MATMUL, "matmul 6x5x7 . 7x9 shared"); in(c, S3(6, 5, 7)); in(c, S2(7, 9)); out(c, S3(6, 5, 9));
    c = add(l, OP_MATMUL_BACKWARD, "matmul_backward batched, transposed");
    in(c, S4(2, 3, 5, 7)); in(c, S4(2, 3, 9, 7)); in(c, S4(2, 3, 5, 9)); out(c, S4(2, 3, 5, 7)); out(c, S4(2, 3, 9, 7));
    c->op.ints[ATTR_TRANSPOSE_B] = 1; c->op.floats[ATTR_SCALE] = 0.3; c->op.ints[ATTR_GRADS] = 3;
    c = add(l, OP_MATMUL_BACKWARD, "matmul_backward shared");
    in(c, S3(6, 5, 7)); in(c, S2(7, 9)); in(c, S3(6, 5, 9)); out(c, S3(6, 5, 7)); out(c, S2(7, 9));
    c->op.ints[ATTR_GRADS] = 3;
    c = add(l, OP_MATMUL_BACKWARD, "matmul_backward shared, transposed");
    in(c, S3(6, 5, 7)); in(c, S2(9, 7)); in(c, S3(6, 5, 9)); out(c, S3(6, 5, 7)); out(c, S2(9, 7));
    c->op.ints[ATTR_TRANSPOSE_B] = 1; c->op.ints[ATTR_GRADS] = 3;
}

static void norm_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_LAYERNORM, "layernorm 3x7x300"); in(c, S3(3, 7, 300)); in(c, S1(300)); in(c, S1(300));
    out(c, S3(3, 7, 300));
    c = add(l, OP_LAYERNORM_BACKWARD, "layernorm_backward 3x7x300");
    in(c, S3(3, 7, 300)); in(c, S1(300)); in(c, S3(3, 7, 300));
    out(c, S3(3, 7, 300)); out(c, S1(300)); out(c, S1(300));
    c->op.ints[ATTR_GRADS] = 7;
    c = add(l, OP_LAYERNORM_BACKWARD, "layernorm_backward 5x37 dw db only");
    in(c, S2(5, 37)); in(c, S1(37)); in(c, S2(5, 37)); out(c, S1(37)); out(c, S1(37));
    c->op.ints[ATTR_GRADS] = 6;
    c = add(l, OP_BATCHNORM, "batchnorm 3x5x7x9"); in(c, S4(3, 5, 7, 9)); in(c, S1(5)); in(c, S1(5));
    out(c, S4(3, 5, 7, 9));
    c = add(l, OP_BATCHNORM_BACKWARD, "batchnorm_backward 3x5x7x9");
    in(c, S4(3, 5, 7, 9)); in(c, S1(5)); in(c, S4(3, 5, 7, 9));
    out(c, S4(3, 5, 7, 9)); out(c, S1(5)); out(c, S1(5));
    c->op.ints[ATTR_GRADS] = 7;
    c = add(l, OP_BATCHNORM, "batchnorm 13x3 (N,C)"); in(c, S2(13, 3)); in(c, S1(3)); in(c, S1(3)); out(c, S2(13, 3));
    c = add(l, OP_SOFTMAX, "softmax 5x300"); in(c, S2(5, 300)); out(c, S2(5, 300));
    c = add(l, OP_SOFTMAX, "softmax causal 2x3x11x11"); in(c, S4(2, 3, 11, 11)); out(c, S4(2, 3, 11, 11));
    c->op.ints[ATTR_CAUSAL] = 1;
    c = add(l, OP_SOFTMAX_BACKWARD, "softmax_backward 5x300"); in(c, S2(5, 300)); in(c, S2(5, 300));
    out(c, S2(5, 300)); c->op.ints[ATTR_GRADS] = 1;
}

static void attention_loss_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_ATTENTION, "attention 2x37x48 h2"); in(c, S3(2, 37, 48)); out(c, S3(2, 37, 16));
    c->op.ints[ATTR_HEADS] = 2;
    c = add(l, OP_ATTENTION_BACKWARD, "attention_backward 2x37x48 h2"); in(c, S3(2, 37, 48)); in(c, S3(2, 37, 16));
    out(c, S3(2, 37, 48)); c->op.ints[ATTR_HEADS] = 2; c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_ATTENTION, "attention 1x5x30 h2"); in(c, S3(1, 5, 30)); out(c, S3(1, 5, 10));
    c->op.ints[ATTR_HEADS] = 2;
    /* T = 300: query rows longer than a block, the strided loops over keys */
    c = add(l, OP_ATTENTION, "attention 1x300x9 h1"); in(c, S3(1, 300, 9)); out(c, S3(1, 300, 3));
    c->op.ints[ATTR_HEADS] = 1;
    c = add(l, OP_ATTENTION_BACKWARD, "attention_backward 1x300x9 h1"); in(c, S3(1, 300, 9)); in(c, S3(1, 300, 3));
    out(c, S3(1, 300, 9)); c->op.ints[ATTR_HEADS] = 1; c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_CROSS_ENTROPY, "cross_entropy 2x7x300"); in(c, S3(2, 7, 300)); ids(c, S2(2, 7), 300); out(c, SCALAR);
    c = add(l, OP_CROSS_ENTROPY_BACKWARD, "cross_entropy_backward 2x7x300");
    in(c, S3(2, 7, 300)); ids(c, S2(2, 7), 300); in(c, SCALAR); out(c, S3(2, 7, 300));
    c->op.ints[ATTR_GRADS] = 1;
}

static void conv_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_CONV2D, "conv2d 2x3x11x13 k3 s2 p1, bias"); in(c, S4(2, 3, 11, 13)); in(c, S4(5, 3, 3, 3));
    in(c, S1(5)); out(c, S4(2, 5, 6, 7)); c->op.ints[ATTR_STRIDE] = 2; c->op.ints[ATTR_PAD] = 1;
    c = add(l, OP_CONV2D, "conv2d 2x3x11x13 1x1"); in(c, S4(2, 3, 11, 13)); in(c, S4(5, 3, 1, 1));
    out(c, S4(2, 5, 11, 13)); c->op.ints[ATTR_STRIDE] = 1; c->op.ints[ATTR_PAD] = 0;
    c = add(l, OP_CONV2D_BACKWARD, "conv2d_backward k3 s2 p1");
    in(c, S4(2, 3, 11, 13)); in(c, S4(5, 3, 3, 3)); in(c, S4(2, 5, 6, 7));
    out(c, S4(2, 3, 11, 13)); out(c, S4(5, 3, 3, 3)); out(c, S1(5));
    c->op.ints[ATTR_STRIDE] = 2; c->op.ints[ATTR_PAD] = 1; c->op.ints[ATTR_GRADS] = 7;
    c = add(l, OP_CONV2D_BACKWARD, "conv2d_backward 1x1");
    in(c, S4(2, 3, 11, 13)); in(c, S4(5, 3, 1, 1)); in(c, S4(2, 5, 11, 13));
    out(c, S4(2, 3, 11, 13)); out(c, S4(5, 3, 1, 1));
    c->op.ints[ATTR_STRIDE] = 1; c->op.ints[ATTR_PAD] = 0; c->op.ints[ATTR_GRADS] = 3;
    c = add(l, OP_CONV2D_BACKWARD, "conv2d_backward k3 s1 p1 dx only");
    in(c, S4(1, 2, 7, 5)); in(c, S4(3, 2, 3, 3)); in(c, S4(1, 3, 7, 5)); out(c, S4(1, 2, 7, 5));
    c->op.ints[ATTR_STRIDE] = 1; c->op.ints[ATTR_PAD] = 1; c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_MAXPOOL, "maxpool 2x3x11x13 k3 s2 p1"); in(c, S4(2, 3, 11, 13)); out(c, S4(2, 3, 6, 7));
    c->op.ints[ATTR_KERNEL] = 3; c->op.ints[ATTR_STRIDE] = 2; c->op.ints[ATTR_PAD] = 1;
    c = add(l, OP_MAXPOOL_BACKWARD, "maxpool_backward 2x3x11x13 k3 s2 p1"); in(c, S4(2, 3, 11, 13));
    in(c, S4(2, 3, 6, 7)); out(c, S4(2, 3, 11, 13));
    c->op.ints[ATTR_KERNEL] = 3; c->op.ints[ATTR_STRIDE] = 2; c->op.ints[ATTR_PAD] = 1; c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_AVGPOOL_GLOBAL, "avgpool_global 2x5x7x9"); in(c, S4(2, 5, 7, 9)); out(c, S2(2, 5));
    c = add(l, OP_AVGPOOL_GLOBAL_BACKWARD, "avgpool_global_backward 2x5x7x9"); in(c, S2(2, 5)); out(c, S4(2, 5, 7, 9));
    c->op.ints[ATTR_GRADS] = 1;
}

static void optimizer_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_SUM_SQUARES, "sum_squares 5001 + acc"); in(c, S1(5001)); in(c, SCALAR); out(c, SCALAR);
    c = add(l, OP_SUM_SQUARES, "sum_squares 37"); in(c, S1(37)); out(c, SCALAR);
    c = add(l, OP_CLIP_SCALE, "clip_scale"); in(c, SCALAR); out(c, SCALAR); c->op.floats[ATTR_MAX_NORM] = 0.5;
    c = add(l, OP_LR_SCHEDULE, "lr_schedule warmup"); out(c, SCALAR);
    c->op.floats[ATTR_LR] = 6e-4; c->op.ints[ATTR_WARMUP] = 10; c->op.ints[ATTR_STEPS] = 100; c->op.floats[ATTR_MIN_LR] = 6e-5;
    c = add(l, OP_LR_SCHEDULE, "lr_schedule cosine"); out(c, SCALAR);
    c->op.floats[ATTR_LR] = 6e-4; c->op.ints[ATTR_WARMUP] = 1; c->op.ints[ATTR_STEPS] = 100; c->op.floats[ATTR_MIN_LR] = 6e-5;
    c = add(l, OP_ADAMW, "adamw 1001, clip scale"); in(c, S1(1001)); in(c, S1(1001)); in(c, S1(1001)); in(c, S1(1001));
    in(c, SCALAR); in(c, SCALAR); c->in_place = 1;
    c->op.floats[ATTR_BETA1] = 0.9; c->op.floats[ATTR_BETA2] = 0.95; c->op.floats[ATTR_EPS] = 1e-8;
    c->op.floats[ATTR_WEIGHT_DECAY] = 0.1;
    c = add(l, OP_ADAMW, "adamw 300"); in(c, S1(300)); in(c, S1(300)); in(c, S1(300)); in(c, S1(300)); in(c, SCALAR);
    c->in_place = 1;
}

int cuda_cases_build(cuda_case **out_cases)
{
    case_list l = { 0 };
    elementwise_cases(&l);
    dense_cases(&l);
    norm_cases(&l);
    attention_loss_cases(&l);
    conv_cases(&l);
    optimizer_cases(&l);
    for (int i = 0; i < l.n; i++)
        place(&l.c[i]);
    *out_cases = l.c;
    return l.n;
}

/* ---- chains: elementwise kernels fusing (codegen/cuda_elementwise.c) ---- */

/* t placed at *at, *at moved past it (64-byte aligned). */
static rt_tensor at_place(rt_tensor t, int64_t *at)
{
    t.offset = *at;
    *at += (rt_tensor_numel(&t) * 4 + 63) / 64 * 64;
    return t;
}

static rt_op chain_op(int k, const char *name)
{
    rt_op op;
    memset(&op, 0, sizeof op);
    op.op = k;
    op.ws_offset = -1;
    snprintf(op.name, sizeof op.name, "%s", name);
    const op_def *def = &op_table[k];
    for (int i = 0; i < def->n_attr_specs; i++) {
        op.ints[def->attr_specs[i].key] = def->attr_specs[i].default_int;
        op.floats[def->attr_specs[i].key] = def->attr_specs[i].default_float;
    }
    return op;
}

static rt_op op2(int k, const char *name, rt_tensor a, rt_tensor b, rt_tensor y)
{
    rt_op op = chain_op(k, name);
    op.in[op.n_in++] = a;
    op.in[op.n_in++] = b;
    op.out[op.n_out++] = y;
    return op;
}

static rt_op op1(int k, const char *name, rt_tensor x, rt_tensor y)
{
    rt_op op = chain_op(k, name);
    op.in[op.n_in++] = x;
    op.out[op.n_out++] = y;
    return op;
}

static rt_op linear(rt_tensor x, rt_tensor w, rt_tensor b, rt_tensor y)
{
    rt_op op = op2(OP_LINEAR, "linear", x, w, y);
    op.in[op.n_in++] = b;
    return op;
}

int cuda_chains_build(cuda_chain **out)
{
    enum { N_CHAINS = 6 };
    cuda_chain *c = calloc(N_CHAINS, sizeof *c);
    if (!c)
        abort();
    int64_t at;
    rt_tensor x, w, b, h, y, r, z;

    /* GPT's MLP: the product, then its bias and gelu in one launch. */
    at = 0;
    x = at_place(S3(2, 5, 37), &at), w = at_place(S2(19, 37), &at), b = at_place(S1(19), &at);
    h = at_place(S3(2, 5, 19), &at), y = at_place(S3(2, 5, 19), &at);
    c[0] = (cuda_chain){ { linear(x, w, b, h), op1(OP_GELU, "gelu", h, y) }, 2, "linear + bias -> gelu", at, 2 };
    /* GPT's projection: bias and the residual add in one launch. */
    at = 0;
    x = at_place(S2(11, 300), &at), w = at_place(S2(7, 300), &at), b = at_place(S1(7), &at);
    h = at_place(S2(11, 7), &at), r = at_place(S2(11, 7), &at), y = at_place(S2(11, 7), &at);
    c[1] = (cuda_chain){ { linear(x, w, b, h), op2(OP_ADD, "add", r, h, y) }, 2, "linear + bias -> residual add", at, 2 };
    /* Three parts: bias, gelu, add. */
    at = 0;
    x = at_place(S3(2, 5, 37), &at), w = at_place(S2(19, 37), &at), b = at_place(S1(19), &at);
    h = at_place(S3(2, 5, 19), &at), y = at_place(S3(2, 5, 19), &at), r = at_place(S3(2, 5, 19), &at);
    z = at_place(S3(2, 5, 19), &at);
    c[2] = (cuda_chain){ { linear(x, w, b, h), op1(OP_GELU, "gelu", h, y), op2(OP_ADD, "add", y, r, z) }, 3,
                         "linear + bias -> gelu -> add", at, 2 };
    /* ResNet's block end, in place: add into a, relu of a into a. */
    at = 0;
    x = at_place(S1(1001), &at), r = at_place(S1(1001), &at);
    c[3] = (cuda_chain){ { op2(OP_ADD, "add", x, r, x), op1(OP_RELU, "relu", x, x) }, 2, "add in place -> relu in place",
                         at, 1 };
    /* Must not fuse: relu writes where add reads, 4 floats further on. */
    at = 0;
    x = at_place(S1(1001), &at), r = at_place(S1(1001), &at), y = at_place(S1(1001), &at);
    z = r;
    z.offset += 16;
    at += 64;
    c[4] = (cuda_chain){ { op2(OP_ADD, "add", x, r, y), op1(OP_RELU, "relu", y, z) }, 2,
                         "add -> relu over add's input, shifted: not fused", at, 2 };
    /* Must not fuse: different lengths. */
    at = 0;
    x = at_place(S1(1001), &at), r = at_place(S1(1001), &at), y = at_place(S1(1001), &at);
    h = at_place(S1(999), &at), z = at_place(S1(999), &at);
    c[5] = (cuda_chain){ { op2(OP_ADD, "add", x, r, y), op1(OP_RELU, "relu", h, z) }, 2,
                         "add 1001, relu 999: not fused", at, 2 };
    for (int i = 0; i < N_CHAINS; i++)
        c[i].arena_bytes += 64;
    *out = c;
    return N_CHAINS;
}
