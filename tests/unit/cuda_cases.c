/* cuda_cases.c: the op instances of the CUDA emulation harness (see
 * cuda_cases.h).  Sizes are chosen against the 256-thread block: rows of
 * 300 (more than a block, not a multiple), 37 and 13 (less), element counts
 * that leave the last block partial.
 *
 * Every case runs in f32, bf16 and fp16 (precision_variants).  How far a
 * 16-bit output may be from the CPU's, in units of the format's unit
 * roundoff u (2^-8 bf16, 2^-11 fp16) times the output's largest magnitude:
 *
 *   2   the kernel reads the same 16-bit inputs the CPU widens (exactly),
 *       computes the same f32 expressions and rounds once; the two f32
 *       results differ in their last bits (another summation order), so
 *       one that lies near a rounding boundary can round to the other
 *       neighbour: one step of the format, at most 2u of the value; and
 *       that is rare, so at most 1% of the elements may differ at all (a
 *       kernel that truncated would differ in half of them);
 *   8   a matrix product with an f32 operand (a weight): cuBLAS multiplies
 *       operands of one type, so the CUDA path rounds the weight to 16 bits
 *       (relative error u per element; summed over K terms of random sign
 *       it stays within about u of the result, a few u at worst) and the
 *       CPU multiplies the f32 weight; a bias added after the product
 *       rounds twice (the product, then the sum): 2u + 2u + the weight's;
 *       measured below 4u (the harness prints each case's figure).
 * f32 outputs (a parameter's gradient, the loss) hold to 1e-5 of their
 * largest magnitude in every precision: both paths read the same 16-bit
 * inputs exactly and accumulate in f32 or double. */
#include "cuda_cases.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/ops.h"
#include "../../runtime/stats_mode.h"

typedef struct {
    cuda_case *c;
    int n, cap;
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

/* A new case of op kind k, attributes at the op table's defaults, f32. */
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
    c->precision = DT_F32;
    c->tol16 = 2;
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
    t.dtype = DT_I32;
    in(c, t);
}
/* A parameter (f32 in every precision), and a parameter's gradient. */
static void param(cuda_case *c, rt_tensor t)
{
    c->f32_in |= 1u << c->op.n_in;
    in(c, t);
}
static void pgrad(cuda_case *c, rt_tensor t)
{
    c->f32_out |= 1u << c->op.n_out;
    out(c, t);
}
/* A scalar the graph keeps f32 (the loss, its seed, the optimizer's). */
static void f32_in(cuda_case *c, rt_tensor t) { param(c, t); }
static void f32_out(cuda_case *c, rt_tensor t) { pgrad(c, t); }

/* Every tensor its own 64-byte-aligned place; then the op's workspace. */
static void place(cuda_case *c)
{
    int64_t at = 0;
    for (int i = 0; i < c->op.n_in; i++) {
        c->op.in[i].offset = at;
        at += (rt_tensor_bytes(&c->op.in[i]) + 63) / 64 * 64;
    }
    for (int i = 0; i < c->op.n_out; i++) {
        c->op.out[i].offset = at;
        at += (rt_tensor_bytes(&c->op.out[i]) + 63) / 64 * 64;
    }
    int64_t ws = rt_op_workspace_floats(&c->op);
    if (ws > 0) {
        c->op.ws_offset = at;
        at += (ws * 4 + 63) / 64 * 64;
    }
    c->arena_bytes = at + 64;
}

/* Every pointwise op of ir/pointwise.h and its backward, from the table:
 * a row added there is checked here with no line of its own.  The forward
 * over 3x333 elements; the backward over 1001 with every gradient, and a
 * two-input op's with the second gradient only. */
static void pointwise_cases(case_list *l)
{
    for (int k = 0; k < OP_COUNT; k++) {
        const op_def *d = &op_table[k];
        if (!d->pointwise.inputs || d->forward_of != OP_COUNT)
            continue;
        char label[64];
        snprintf(label, sizeof label, "%s 3x333", d->name);
        cuda_case *c = add(l, k, label);
        for (int i = 0; i < d->pointwise.inputs; i++)
            in(c, S2(3, 333));
        out(c, S2(3, 333));
        if (d->backward == OP_COUNT)
            continue;
        for (int only_last = 0; only_last <= (d->pointwise.inputs == 2); only_last++) {
            snprintf(label, sizeof label, "%s 1001%s", op_table[d->backward].name, only_last ? " last grad only" : "");
            c = add(l, d->backward, label);
            for (int i = 0; i <= d->pointwise.inputs; i++) /* the inputs, then dy */
                in(c, S1(1001));
            int grads = only_last ? 1 << (d->pointwise.inputs - 1) : (1 << d->pointwise.inputs) - 1;
            for (int g = grads; g; g &= g - 1)
                out(c, S1(1001));
            c->op.ints[ATTR_GRADS] = grads;
        }
    }
}

static void elementwise_cases(case_list *l)
{
    cuda_case *c;
    pointwise_cases(l);
    c = add(l, OP_COPY, "copy 517");
    in(c, S1(517));
    out(c, S1(517));
    c = add(l, OP_FLATTEN, "flatten 2x3x5x7");
    in(c, S4(2, 3, 5, 7));
    out(c, S2(2, 105));
    c = add(l, OP_FILL, "fill 259");
    out(c, S1(259));
    c->op.floats[ATTR_VALUE] = 1.25;
    /* fp16's seed: the value times the loss scale (the harness runs it with one) */
    c = add(l, OP_FILL, "fill loss_scale");
    f32_out(c, SCALAR);
    c->op.floats[ATTR_VALUE] = 1.0;
    c->op.ints[ATTR_LOSS_SCALE] = 1;
    c->loss_scaled = 1;
    c = add(l, OP_POSITIONS, "positions 3x37");
    ids(c, S2(3, 37), 50);
    out(c, S2(3, 37));
    c->op.out[0].dtype = DT_I32;
    c = add(l, OP_EMBEDDING, "embedding 2x13 of 37x300");
    ids(c, S2(2, 13), 37);
    param(c, S2(37, 300));
    out(c, S3(2, 13, 300));
    c = add(l, OP_EMBEDDING_BACKWARD, "embedding_backward 2x13 to 37x300");
    ids(c, S2(2, 13), 11); /* 11 of 37 rows: ids repeat, rows add up */
    in(c, S3(2, 13, 300));
    pgrad(c, S2(37, 300));
    c->op.ints[ATTR_GRADS] = 2;
    c = add(l, OP_QKV_SPLIT, "qkv_split 2x13x72 h3");
    in(c, S3(2, 13, 72));
    c->op.ints[ATTR_HEADS] = 3;
    out(c, S4(2, 3, 13, 8));
    out(c, S4(2, 3, 13, 8));
    out(c, S4(2, 3, 13, 8));
    c = add(l, OP_QKV_SPLIT_BACKWARD, "qkv_split_backward 2x13x72 h3");
    in(c, S4(2, 3, 13, 8));
    in(c, S4(2, 3, 13, 8));
    in(c, S4(2, 3, 13, 8));
    out(c, S3(2, 13, 72));
    c->op.ints[ATTR_HEADS] = 3;
    c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_MERGE_HEADS, "merge_heads 2x3x13x8");
    in(c, S4(2, 3, 13, 8));
    out(c, S3(2, 13, 24));
    c = add(l, OP_MERGE_HEADS_BACKWARD, "merge_heads_backward 2x3x13x8");
    in(c, S3(2, 13, 24));
    out(c, S4(2, 3, 13, 8));
    c->op.ints[ATTR_GRADS] = 1;
}

/* Products with a weight (an f32 parameter) read it rounded on CUDA in 16
 * bits: tol16 8 (the top of the file). */
static void dense_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_LINEAR, "linear 2x5x37 -> 19, bias");
    in(c, S3(2, 5, 37));
    param(c, S2(19, 37));
    param(c, S1(19));
    out(c, S3(2, 5, 19));
    c->tol16 = 8;
    c = add(l, OP_LINEAR, "linear 11x300 -> 7");
    in(c, S2(11, 300));
    param(c, S2(7, 300));
    out(c, S2(11, 7));
    c->tol16 = 8;
    c = add(l, OP_LINEAR_BACKWARD, "linear_backward 2x5x37 -> 19");
    in(c, S3(2, 5, 37));
    param(c, S2(19, 37));
    in(c, S3(2, 5, 19));
    out(c, S3(2, 5, 37));
    pgrad(c, S2(19, 37));
    pgrad(c, S1(19));
    c->op.ints[ATTR_GRADS] = 7;
    c->tol16 = 8;
    c = add(l, OP_LINEAR_BACKWARD, "linear_backward dw only");
    in(c, S2(11, 300));
    param(c, S2(7, 300));
    in(c, S2(11, 7));
    pgrad(c, S2(7, 300));
    c->op.ints[ATTR_GRADS] = 2;
    c = add(l, OP_LINEAR, "linear 2x5x37 -> 19, bias, w [in,out]");
    in(c, S3(2, 5, 37));
    param(c, S2(37, 19));
    param(c, S1(19));
    out(c, S3(2, 5, 19));
    c->op.ints[ATTR_TRANSPOSE_W] = 1;
    c->tol16 = 8;
    c = add(l, OP_LINEAR_BACKWARD, "linear_backward 2x5x37 -> 19, w [in,out]");
    in(c, S3(2, 5, 37));
    param(c, S2(37, 19));
    in(c, S3(2, 5, 19));
    out(c, S3(2, 5, 37));
    pgrad(c, S2(37, 19));
    pgrad(c, S1(19));
    c->op.ints[ATTR_GRADS] = 7;
    c->op.ints[ATTR_TRANSPOSE_W] = 1;
    c->tol16 = 8;
    c = add(l, OP_MATMUL, "matmul 2x3x5x7 . (9x7)^T batched");
    in(c, S4(2, 3, 5, 7));
    in(c, S4(2, 3, 9, 7));
    out(c, S4(2, 3, 5, 9));
    c->op.ints[ATTR_TRANSPOSE_B] = 1;
    c->op.floats[ATTR_SCALE] = 0.3;
    c = add(l, OP_MATMUL, "matmul 6x5x7 . 7x9 shared weight");
    in(c, S3(6, 5, 7));
    param(c, S2(7, 9));
    out(c, S3(6, 5, 9));
    c->tol16 = 8;
    c = add(l, OP_MATMUL_BACKWARD, "matmul_backward batched, transposed");
    in(c, S4(2, 3, 5, 7));
    in(c, S4(2, 3, 9, 7));
    in(c, S4(2, 3, 5, 9));
    out(c, S4(2, 3, 5, 7));
    out(c, S4(2, 3, 9, 7));
    c->op.ints[ATTR_TRANSPOSE_B] = 1;
    c->op.floats[ATTR_SCALE] = 0.3;
    c->op.ints[ATTR_GRADS] = 3;
    c = add(l, OP_MATMUL_BACKWARD, "matmul_backward shared weight");
    in(c, S3(6, 5, 7));
    param(c, S2(7, 9));
    in(c, S3(6, 5, 9));
    out(c, S3(6, 5, 7));
    pgrad(c, S2(7, 9));
    c->op.ints[ATTR_GRADS] = 3;
    c->tol16 = 8;
    c = add(l, OP_MATMUL_BACKWARD, "matmul_backward shared, transposed");
    in(c, S3(6, 5, 7));
    in(c, S2(9, 7));
    in(c, S3(6, 5, 9));
    out(c, S3(6, 5, 7));
    out(c, S2(9, 7));
    c->op.ints[ATTR_TRANSPOSE_B] = 1;
    c->op.ints[ATTR_GRADS] = 3;
}

static void norm_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_LAYERNORM, "layernorm 3x7x300");
    in(c, S3(3, 7, 300));
    param(c, S1(300));
    param(c, S1(300));
    out(c, S3(3, 7, 300));
    c = add(l, OP_LAYERNORM_BACKWARD, "layernorm_backward 3x7x300");
    in(c, S3(3, 7, 300));
    param(c, S1(300));
    in(c, S3(3, 7, 300));
    out(c, S3(3, 7, 300));
    pgrad(c, S1(300));
    pgrad(c, S1(300));
    c->op.ints[ATTR_GRADS] = 7;
    c = add(l, OP_LAYERNORM_BACKWARD, "layernorm_backward 5x37 dw db only");
    in(c, S2(5, 37));
    param(c, S1(37));
    in(c, S2(5, 37));
    pgrad(c, S1(37));
    pgrad(c, S1(37));
    c->op.ints[ATTR_GRADS] = 6;
    c = add(l, OP_BATCHNORM, "batchnorm 3x5x7x9");
    in(c, S4(3, 5, 7, 9));
    param(c, S1(5));
    param(c, S1(5));
    out(c, S4(3, 5, 7, 9));
    c = add(l, OP_BATCHNORM_BACKWARD, "batchnorm_backward 3x5x7x9");
    in(c, S4(3, 5, 7, 9));
    param(c, S1(5));
    in(c, S4(3, 5, 7, 9));
    out(c, S4(3, 5, 7, 9));
    pgrad(c, S1(5));
    pgrad(c, S1(5));
    c->op.ints[ATTR_GRADS] = 7;
    c = add(l, OP_BATCHNORM, "batchnorm 13x3 (N,C)");
    in(c, S2(13, 3));
    param(c, S1(3));
    param(c, S1(3));
    out(c, S2(13, 3));
    /* With running statistics (f32 state in every precision): a training
     * forward folds the batch's in, a replay leaves them, a validation
     * normalises by them. */
    static const char *const stats_label[] = { "training", "replay", "validation" };
    for (int mode = RT_STATS_UPDATE; mode <= RT_STATS_USE; mode++) {
        char label[80];
        snprintf(label, sizeof label, "batchnorm 3x5x7x9, running statistics, %s", stats_label[mode]);
        c = add(l, OP_BATCHNORM, label);
        in(c, S4(3, 5, 7, 9));
        param(c, S1(5));
        param(c, S1(5));
        param(c, S1(5));
        param(c, S1(5));
        out(c, S4(3, 5, 7, 9));
        c->updated_in = 3u << 3;
        c->stats_mode = mode;
    }
    c = add(l, OP_SOFTMAX, "softmax 5x300");
    in(c, S2(5, 300));
    out(c, S2(5, 300));
    c = add(l, OP_SOFTMAX, "softmax causal 2x3x11x11");
    in(c, S4(2, 3, 11, 11));
    out(c, S4(2, 3, 11, 11));
    c->op.ints[ATTR_CAUSAL] = 1;
    c = add(l, OP_SOFTMAX_BACKWARD, "softmax_backward 5x300");
    in(c, S2(5, 300));
    in(c, S2(5, 300));
    out(c, S2(5, 300));
    c->op.ints[ATTR_GRADS] = 1;
}

static void attention_loss_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_ATTENTION, "attention 2x37x48 h2");
    in(c, S3(2, 37, 48));
    out(c, S3(2, 37, 16));
    c->op.ints[ATTR_HEADS] = 2;
    c = add(l, OP_ATTENTION_BACKWARD, "attention_backward 2x37x48 h2");
    in(c, S3(2, 37, 48));
    in(c, S3(2, 37, 16));
    out(c, S3(2, 37, 48));
    c->op.ints[ATTR_HEADS] = 2;
    c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_ATTENTION, "attention 1x5x30 h2");
    in(c, S3(1, 5, 30));
    out(c, S3(1, 5, 10));
    c->op.ints[ATTR_HEADS] = 2;
    /* T = 300: query rows longer than a block, the strided loops over keys */
    c = add(l, OP_ATTENTION, "attention 1x300x9 h1");
    in(c, S3(1, 300, 9));
    out(c, S3(1, 300, 3));
    c->op.ints[ATTR_HEADS] = 1;
    c = add(l, OP_ATTENTION_BACKWARD, "attention_backward 1x300x9 h1");
    in(c, S3(1, 300, 9));
    in(c, S3(1, 300, 3));
    out(c, S3(1, 300, 9));
    c->op.ints[ATTR_HEADS] = 1;
    c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_CROSS_ENTROPY, "cross_entropy 2x7x300");
    in(c, S3(2, 7, 300));
    ids(c, S2(2, 7), 300);
    f32_out(c, SCALAR);
    c = add(l, OP_CROSS_ENTROPY_BACKWARD, "cross_entropy_backward 2x7x300");
    in(c, S3(2, 7, 300));
    ids(c, S2(2, 7), 300);
    f32_in(c, SCALAR);
    out(c, S3(2, 7, 300));
    c->op.ints[ATTR_GRADS] = 1;
}

static void conv_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_CONV2D, "conv2d 2x3x11x13 k3 s2 p1, bias");
    in(c, S4(2, 3, 11, 13));
    param(c, S4(5, 3, 3, 3));
    param(c, S1(5));
    out(c, S4(2, 5, 6, 7));
    c->op.ints[ATTR_STRIDE] = 2;
    c->op.ints[ATTR_PAD] = 1;
    c->tol16 = 8;
    c = add(l, OP_CONV2D, "conv2d 2x3x11x13 1x1");
    in(c, S4(2, 3, 11, 13));
    param(c, S4(5, 3, 1, 1));
    out(c, S4(2, 5, 11, 13));
    c->op.ints[ATTR_STRIDE] = 1;
    c->op.ints[ATTR_PAD] = 0;
    c->tol16 = 8;
    c = add(l, OP_CONV2D_BACKWARD, "conv2d_backward k3 s2 p1");
    in(c, S4(2, 3, 11, 13));
    param(c, S4(5, 3, 3, 3));
    in(c, S4(2, 5, 6, 7));
    out(c, S4(2, 3, 11, 13));
    pgrad(c, S4(5, 3, 3, 3));
    pgrad(c, S1(5));
    c->op.ints[ATTR_STRIDE] = 2;
    c->op.ints[ATTR_PAD] = 1;
    c->op.ints[ATTR_GRADS] = 7;
    c->tol16 = 8;
    c = add(l, OP_CONV2D_BACKWARD, "conv2d_backward 1x1");
    in(c, S4(2, 3, 11, 13));
    param(c, S4(5, 3, 1, 1));
    in(c, S4(2, 5, 11, 13));
    out(c, S4(2, 3, 11, 13));
    pgrad(c, S4(5, 3, 1, 1));
    c->op.ints[ATTR_STRIDE] = 1;
    c->op.ints[ATTR_PAD] = 0;
    c->op.ints[ATTR_GRADS] = 3;
    c->tol16 = 8;
    c = add(l, OP_CONV2D_BACKWARD, "conv2d_backward k3 s1 p1 dx only");
    in(c, S4(1, 2, 7, 5));
    param(c, S4(3, 2, 3, 3));
    in(c, S4(1, 3, 7, 5));
    out(c, S4(1, 2, 7, 5));
    c->op.ints[ATTR_STRIDE] = 1;
    c->op.ints[ATTR_PAD] = 1;
    c->op.ints[ATTR_GRADS] = 1;
    c->tol16 = 8;
    c = add(l, OP_MAXPOOL, "maxpool 2x3x11x13 k3 s2 p1");
    in(c, S4(2, 3, 11, 13));
    out(c, S4(2, 3, 6, 7));
    c->op.ints[ATTR_KERNEL] = 3;
    c->op.ints[ATTR_STRIDE] = 2;
    c->op.ints[ATTR_PAD] = 1;
    c = add(l, OP_MAXPOOL_BACKWARD, "maxpool_backward 2x3x11x13 k3 s2 p1");
    in(c, S4(2, 3, 11, 13));
    in(c, S4(2, 3, 6, 7));
    out(c, S4(2, 3, 11, 13));
    c->op.ints[ATTR_KERNEL] = 3;
    c->op.ints[ATTR_STRIDE] = 2;
    c->op.ints[ATTR_PAD] = 1;
    c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_AVGPOOL_GLOBAL, "avgpool_global 2x5x7x9");
    in(c, S4(2, 5, 7, 9));
    out(c, S2(2, 5));
    c = add(l, OP_AVGPOOL_GLOBAL_BACKWARD, "avgpool_global_backward 2x5x7x9");
    in(c, S2(2, 5));
    out(c, S4(2, 5, 7, 9));
    c->op.ints[ATTR_GRADS] = 1;
}

/* rope's Llama 3 scaling on c: H heads, factor, low_freq, high_freq, old_ctx. */
static void rope_llama3(cuda_case *c, int H, double factor, double low, double high, double old_ctx)
{
    c->op.ints[ATTR_HEADS] = H;
    c->op.floats[ATTR_SCALE_FACTOR] = factor;
    c->op.floats[ATTR_LOW_FREQ] = low;
    c->op.floats[ATTR_HIGH_FREQ] = high;
    c->op.floats[ATTR_OLD_CTX] = old_ctx;
}

/* Llama's ops.  rope rotates pairs half a head apart (odd T, odd heads, a
 * large base at T = 300); split and concat along the last, a middle and
 * the first axis, negative axes too; attention on q, k, v apart with
 * grouped-query heads: H = 4 over KV = 2, H = 3 over KV = 1, KV = H
 * (kv_heads 0), T = 300 (rows longer than a block), and D = 300 (a head
 * wider than a block: the key launch's per-thread columns). */
static void llama_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_RMSNORM, "rmsnorm 3x7x300");
    in(c, S3(3, 7, 300));
    param(c, S1(300));
    out(c, S3(3, 7, 300));
    c = add(l, OP_RMSNORM, "rmsnorm 5x37 eps 1e-5");
    in(c, S2(5, 37));
    param(c, S1(37));
    out(c, S2(5, 37));
    c->op.floats[ATTR_EPS] = 1e-5;
    c = add(l, OP_RMSNORM_BACKWARD, "rmsnorm_backward 3x7x300");
    in(c, S3(3, 7, 300));
    param(c, S1(300));
    in(c, S3(3, 7, 300));
    out(c, S3(3, 7, 300));
    pgrad(c, S1(300));
    c->op.ints[ATTR_GRADS] = 3;
    c = add(l, OP_RMSNORM_BACKWARD, "rmsnorm_backward 5x37 dw only");
    in(c, S2(5, 37));
    param(c, S1(37));
    in(c, S2(5, 37));
    pgrad(c, S1(37));
    c->op.ints[ATTR_GRADS] = 2;
    c = add(l, OP_RMSNORM_BACKWARD, "rmsnorm_backward 5x37 dx only");
    in(c, S2(5, 37));
    param(c, S1(37));
    in(c, S2(5, 37));
    out(c, S2(5, 37));
    c->op.ints[ATTR_GRADS] = 1;

    /* Inference (passes/decode.c): rope at given positions; attention
     * against a key/value cache, one new token a sequence (T = 1: no two
     * tokens of a sequence write one row), the caches f32. */
    c = add(l, OP_ROPE, "rope 2x5x24 h2 at positions");
    in(c, S3(2, 5, 24));
    ids(c, S2(2, 5), 50);
    out(c, S3(2, 5, 24));
    c->op.ints[ATTR_HEADS] = 2;
    c = add(l, OP_ATTENTION_CACHED, "attention_cached 2x1x24 h4 kv2 ctx37");
    in(c, S3(2, 1, 24));
    in(c, S3(2, 1, 12));
    in(c, S3(2, 1, 12));
    param(c, S3(2, 37, 12));
    param(c, S3(2, 37, 12));
    ids(c, S2(2, 1), 37);
    out(c, S3(2, 1, 24));
    c->op.ints[ATTR_HEADS] = 4;
    c->op.ints[ATTR_KV_HEADS] = 2;
    c = add(l, OP_ROPE, "rope 2x13x48 h3");
    in(c, S3(2, 13, 48));
    out(c, S3(2, 13, 48));
    c->op.ints[ATTR_HEADS] = 3;
    c = add(l, OP_ROPE, "rope 2x3x11x20 h2");
    in(c, S4(2, 3, 11, 20));
    out(c, S4(2, 3, 11, 20));
    c->op.ints[ATTR_HEADS] = 2;
    c = add(l, OP_ROPE, "rope 1x300x12 h1 base 5e5");
    in(c, S3(1, 300, 12));
    out(c, S3(1, 300, 12));
    c->op.ints[ATTR_HEADS] = 1;
    c->op.floats[ATTR_BASE] = 500000.0;
    /* Llama 3's scaling at small sizes: D = 20 has θ_c below, inside and
     * above the blended band for old_ctx 32 (wavelengths 6.3 to 2.5e4: the
     * bounds are 8 and 32). */
    c = add(l, OP_ROPE, "rope 2x13x40 h2 llama3 8 1 4 32");
    in(c, S3(2, 13, 40));
    out(c, S3(2, 13, 40));
    rope_llama3(c, 2, 8.0, 1.0, 4.0, 32.0);
    c = add(l, OP_ROPE_BACKWARD, "rope_backward 2x13x40 h2 llama3 8 1 4 32");
    in(c, S3(2, 13, 40));
    out(c, S3(2, 13, 40));
    rope_llama3(c, 2, 8.0, 1.0, 4.0, 32.0);
    c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_ROPE, "rope 1x300x64 h1 base 5e5 llama3 32 1 4 8192");
    in(c, S3(1, 300, 64));
    out(c, S3(1, 300, 64));
    rope_llama3(c, 1, 32.0, 1.0, 4.0, 8192.0);
    c->op.floats[ATTR_BASE] = 500000.0;
    c = add(l, OP_ROPE_BACKWARD, "rope_backward 2x13x48 h3");
    in(c, S3(2, 13, 48));
    out(c, S3(2, 13, 48));
    c->op.ints[ATTR_HEADS] = 3;
    c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_ROPE_BACKWARD, "rope_backward 1x300x12 h1 base 5e5");
    in(c, S3(1, 300, 12));
    out(c, S3(1, 300, 12));
    c->op.ints[ATTR_HEADS] = 1;
    c->op.floats[ATTR_BASE] = 500000.0;
    c->op.ints[ATTR_GRADS] = 1;

    c = add(l, OP_SPLIT, "split 2x5x12 axis -1 in 3");
    in(c, S3(2, 5, 12));
    out(c, S3(2, 5, 4));
    out(c, S3(2, 5, 4));
    out(c, S3(2, 5, 4));
    c = add(l, OP_SPLIT, "split 2x6x13 axis -2 in 2");
    in(c, S3(2, 6, 13));
    out(c, S3(2, 3, 13));
    out(c, S3(2, 3, 13));
    c->op.ints[ATTR_AXIS] = -2;
    c = add(l, OP_SPLIT, "split 4x37 axis 0 in 4");
    in(c, S2(4, 37));
    out(c, S2(1, 37));
    out(c, S2(1, 37));
    out(c, S2(1, 37));
    out(c, S2(1, 37));
    c->op.ints[ATTR_AXIS] = 0;
    c = add(l, OP_SPLIT_BACKWARD, "split_backward 3 x 2x5x4 axis -1");
    in(c, S3(2, 5, 4));
    in(c, S3(2, 5, 4));
    in(c, S3(2, 5, 4));
    out(c, S3(2, 5, 12));
    c->op.ints[ATTR_GRADS] = 1;
    c = add(l, OP_CONCAT, "concat 2x5x{3,7,1} axis -1");
    in(c, S3(2, 5, 3));
    in(c, S3(2, 5, 7));
    in(c, S3(2, 5, 1));
    out(c, S3(2, 5, 11));
    c = add(l, OP_CONCAT, "concat 2x{3,4}x13 axis 1");
    in(c, S3(2, 3, 13));
    in(c, S3(2, 4, 13));
    out(c, S3(2, 7, 13));
    c->op.ints[ATTR_AXIS] = 1;
    c = add(l, OP_CONCAT_BACKWARD, "concat_backward 2x5x11 to {3,7,1}");
    in(c, S3(2, 5, 11));
    out(c, S3(2, 5, 3));
    out(c, S3(2, 5, 7));
    out(c, S3(2, 5, 1));
    c->op.ints[ATTR_GRADS] = 7;
    c = add(l, OP_CONCAT_BACKWARD, "concat_backward 2x7x13 axis 1");
    in(c, S3(2, 7, 13));
    out(c, S3(2, 3, 13));
    out(c, S3(2, 4, 13));
    c->op.ints[ATTR_AXIS] = 1;
    c->op.ints[ATTR_GRADS] = 3;

    /* attention on q (B,T,H·D), k, v (B,T,KV·D) */
    static const struct {
        int64_t B, T, H, KV, D;
        int grads;
        const char *label;
    } att[] = {
        { 2, 37, 4, 2, 8, 7, "h4 kv2" },          { 1, 19, 3, 1, 6, 7, "h3 kv1" },
        { 1, 13, 2, 0, 5, 7, "h2 kv_heads 0" },   { 1, 300, 2, 1, 3, 7, "h2 kv1 T 300" },
        { 1, 5, 2, 1, 300, 7, "h2 kv1 D 300" },   { 2, 37, 4, 2, 8, 6, "h4 kv2, dk dv only" },
        { 1, 19, 3, 1, 6, 1, "h3 kv1, dq only" }, { 1, 19, 3, 1, 6, 4, "h3 kv1, dv only" },
    };
    for (size_t k = 0; k < sizeof att / sizeof att[0]; k++) {
        int64_t B = att[k].B, T = att[k].T, H = att[k].H, KV = att[k].KV ? att[k].KV : att[k].H, D = att[k].D;
        char label[80];
        if (k < 5) {
            snprintf(label, sizeof label, "attention q,k,v %lldx%lldx%lld %s", (long long)B, (long long)T,
                     (long long)(H * D), att[k].label);
            c = add(l, OP_ATTENTION, label);
            in(c, S3(B, T, H * D));
            in(c, S3(B, T, KV * D));
            in(c, S3(B, T, KV * D));
            out(c, S3(B, T, H * D));
            c->op.ints[ATTR_HEADS] = H;
            c->op.ints[ATTR_KV_HEADS] = att[k].KV;
        }
        snprintf(label, sizeof label, "attention_backward q,k,v %lldx%lldx%lld %s", (long long)B, (long long)T,
                 (long long)(H * D), att[k].label);
        c = add(l, OP_ATTENTION_BACKWARD, label);
        in(c, S3(B, T, H * D));
        in(c, S3(B, T, KV * D));
        in(c, S3(B, T, KV * D));
        in(c, S3(B, T, H * D));
        if (att[k].grads & 1)
            out(c, S3(B, T, H * D));
        if (att[k].grads & 2)
            out(c, S3(B, T, KV * D));
        if (att[k].grads & 4)
            out(c, S3(B, T, KV * D));
        c->op.ints[ATTR_HEADS] = H;
        c->op.ints[ATTR_KV_HEADS] = att[k].KV;
        c->op.ints[ATTR_GRADS] = att[k].grads;
    }
}

/* The optimizer's tensors are f32 in every precision: f32 cases only. */
static void optimizer_cases(case_list *l)
{
    cuda_case *c;
    c = add(l, OP_SUM_SQUARES, "sum_squares 5001 + acc");
    f32_in(c, S1(5001));
    f32_in(c, SCALAR);
    f32_out(c, SCALAR);
    c = add(l, OP_SUM_SQUARES, "sum_squares 37");
    f32_in(c, S1(37));
    f32_out(c, SCALAR);
    c = add(l, OP_CLIP_SCALE, "clip_scale");
    f32_in(c, SCALAR);
    f32_out(c, SCALAR);
    c->op.floats[ATTR_MAX_NORM] = 0.5;
    /* fp16's: the norm of gradients the loss scale made larger */
    c = add(l, OP_CLIP_SCALE, "clip_scale loss_scale");
    f32_in(c, SCALAR);
    f32_out(c, SCALAR);
    c->op.floats[ATTR_MAX_NORM] = 0.5;
    c->op.ints[ATTR_LOSS_SCALE] = 1;
    c->loss_scaled = 1;
    c = add(l, OP_LR_SCHEDULE, "lr_schedule warmup");
    f32_out(c, SCALAR);
    c->op.floats[ATTR_LR] = 6e-4;
    c->op.ints[ATTR_WARMUP] = 10;
    c->op.ints[ATTR_STEPS] = 100;
    c->op.floats[ATTR_MIN_LR] = 6e-5;
    c = add(l, OP_LR_SCHEDULE, "lr_schedule cosine");
    f32_out(c, SCALAR);
    c->op.floats[ATTR_LR] = 6e-4;
    c->op.ints[ATTR_WARMUP] = 1;
    c->op.ints[ATTR_STEPS] = 100;
    c->op.floats[ATTR_MIN_LR] = 6e-5;
    /* decayed: a matrix (the optimizer pass decays rank >= 2 only, and so
     * do the kernels' run-time decay: runtime/train_settings.h) */
    c = add(l, OP_ADAMW, "adamw 7x143, clip scale");
    for (int i = 0; i < 4; i++)
        f32_in(c, S2(7, 143));
    f32_in(c, SCALAR);
    f32_in(c, SCALAR);
    c->updated_in = 0xF; /* p, g's partner state: inputs 0..3 */
    c->op.floats[ATTR_BETA1] = 0.9;
    c->op.floats[ATTR_BETA2] = 0.95;
    c->op.floats[ATTR_EPS] = 1e-8;
    c->op.floats[ATTR_WEIGHT_DECAY] = 0.1;
    c = add(l, OP_ADAMW, "adamw 300");
    for (int i = 0; i < 4; i++)
        f32_in(c, S1(300));
    f32_in(c, SCALAR);
    c->updated_in = 0xF; /* p, g's partner state: inputs 0..3 */
    c = add(l, OP_SGD, "sgd 7x143, clip scale");
    f32_in(c, S2(7, 143));
    f32_in(c, S2(7, 143));
    f32_in(c, SCALAR);
    f32_in(c, SCALAR);
    c->updated_in = 0xF; /* p, g's partner state: inputs 0..3 */
    c->op.floats[ATTR_WEIGHT_DECAY] = 0.1;
    c = add(l, OP_SGD, "sgd 300");
    f32_in(c, S1(300));
    f32_in(c, S1(300));
    f32_in(c, SCALAR);
    c->updated_in = 0xF; /* p, g's partner state: inputs 0..3 */
}

/* Each case again in bf16 and in fp16, unless every float tensor of it
 * stays f32 (the optimizer's, the seed) or it has none (positions). */
static void precision_variants(case_list *l)
{
    static const int32_t precisions[] = { DT_BF16, DT_F16 };
    int n = l->n;
    for (size_t p = 0; p < sizeof precisions / sizeof precisions[0]; p++)
        for (int i = 0; i < n; i++) {
            cuda_case v = l->c[i]; /* a copy: add() may move the array */
            int changed = 0;
            for (int k = 0; k < v.op.n_in; k++)
                if (!((v.f32_in >> k) & 1) && v.int_range[k] == 0 && v.op.in[k].dtype == DT_F32)
                    v.op.in[k].dtype = precisions[p], changed = 1;
            for (int k = 0; k < v.op.n_out; k++)
                if (!((v.f32_out >> k) & 1) && v.op.out[k].dtype == DT_F32)
                    v.op.out[k].dtype = precisions[p], changed = 1;
            if (!changed)
                continue;
            cuda_case *c = add(l, v.op.op, "");
            *c = v;
            c->precision = precisions[p];
            snprintf(c->label, sizeof c->label, "%s %.70s", precisions[p] == DT_BF16 ? "bf16" : "fp16", v.label);
        }
}

int cuda_cases_build(cuda_case **out_cases)
{
    case_list l = { 0 };
    elementwise_cases(&l);
    dense_cases(&l);
    norm_cases(&l);
    attention_loss_cases(&l);
    conv_cases(&l);
    llama_cases(&l);
    optimizer_cases(&l);
    precision_variants(&l);
    for (int i = 0; i < l.n; i++)
        place(&l.c[i]);
    *out_cases = l.c;
    return l.n;
}

/* ---- chains: elementwise kernels fusing (codegen/cuda_elementwise.c) ---- */

/* t, of dtype dt, placed at *at, *at moved past it (64-byte aligned). */
static rt_tensor at_place(rt_tensor t, int32_t dt, int64_t *at)
{
    t.dtype = dt;
    t.offset = *at;
    *at += (rt_tensor_bytes(&t) + 63) / 64 * 64;
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

enum { N_CHAINS = 7 };

/* The chains with activations of dtype dt (weights and biases f32): in 16
 * bits a linear rounds its weight first, one step more (not fused: it is
 * over the weight's elements). */
static void build_chains(cuda_chain *c, int32_t dt)
{
    int64_t at;
    int round = dt != DT_F32;
    rt_tensor x, w, b, h, y, r, z;

    /* GPT's MLP: the product, then its bias and gelu in one launch. */
    at = 0;
    x = at_place(S3(2, 5, 37), dt, &at), w = at_place(S2(19, 37), DT_F32, &at), b = at_place(S1(19), DT_F32, &at);
    h = at_place(S3(2, 5, 19), dt, &at), y = at_place(S3(2, 5, 19), dt, &at);
    c[0] = (cuda_chain){
        { linear(x, w, b, h), op1(OP_GELU, "gelu", h, y) }, 2, "linear + bias -> gelu", at, 2 + round, dt
    };
    /* GPT's projection: bias and the residual add in one launch. */
    at = 0;
    x = at_place(S2(11, 300), dt, &at), w = at_place(S2(7, 300), DT_F32, &at), b = at_place(S1(7), DT_F32, &at);
    h = at_place(S2(11, 7), dt, &at), r = at_place(S2(11, 7), dt, &at), y = at_place(S2(11, 7), dt, &at);
    c[1] = (cuda_chain){
        { linear(x, w, b, h), op2(OP_ADD, "add", r, h, y) }, 2, "linear + bias -> residual add", at, 2 + round, dt
    };
    /* Three parts: bias, gelu, add. */
    at = 0;
    x = at_place(S3(2, 5, 37), dt, &at), w = at_place(S2(19, 37), DT_F32, &at), b = at_place(S1(19), DT_F32, &at);
    h = at_place(S3(2, 5, 19), dt, &at), y = at_place(S3(2, 5, 19), dt, &at), r = at_place(S3(2, 5, 19), dt, &at);
    z = at_place(S3(2, 5, 19), dt, &at);
    c[2] = (cuda_chain){ { linear(x, w, b, h), op1(OP_GELU, "gelu", h, y), op2(OP_ADD, "add", y, r, z) },
                         3,
                         "linear + bias -> gelu -> add",
                         at,
                         2 + round,
                         dt };
    /* ResNet's block end, in place: add into a, relu of a into a. */
    at = 0;
    x = at_place(S1(1001), dt, &at), r = at_place(S1(1001), dt, &at);
    c[3] = (cuda_chain){
        { op2(OP_ADD, "add", x, r, x), op1(OP_RELU, "relu", x, x) }, 2, "add in place -> relu in place", at, 1, dt
    };
    /* Must not fuse: relu writes where add reads, 16 bytes further on. */
    at = 0;
    x = at_place(S1(1001), dt, &at), r = at_place(S1(1001), dt, &at), y = at_place(S1(1001), dt, &at);
    z = r;
    z.offset += 16;
    at += 64;
    c[4] = (cuda_chain){ { op2(OP_ADD, "add", x, r, y), op1(OP_RELU, "relu", y, z) },
                         2,
                         "add -> relu over add's input, shifted: not fused",
                         at,
                         2,
                         dt };
    /* Must not fuse: different lengths. */
    at = 0;
    x = at_place(S1(1001), dt, &at), r = at_place(S1(1001), dt, &at), y = at_place(S1(1001), dt, &at);
    h = at_place(S1(999), dt, &at), z = at_place(S1(999), dt, &at);
    c[5] = (cuda_chain){
        { op2(OP_ADD, "add", x, r, y), op1(OP_RELU, "relu", h, z) }, 2, "add 1001, relu 999: not fused", at, 2, dt
    };
    /* Llama's SwiGLU: silu(gate) and the product with up in one launch
     * after the gate's product (no bias). */
    at = 0;
    x = at_place(S3(2, 5, 37), dt, &at), w = at_place(S2(19, 37), DT_F32, &at), h = at_place(S3(2, 5, 19), dt, &at);
    y = at_place(S3(2, 5, 19), dt, &at), r = at_place(S3(2, 5, 19), dt, &at), z = at_place(S3(2, 5, 19), dt, &at);
    c[6] = (cuda_chain){ { op2(OP_LINEAR, "linear", x, w, h), op1(OP_SILU, "silu", h, y), op2(OP_MUL, "mul", y, r, z) },
                         3,
                         "linear -> silu -> mul (SwiGLU)",
                         at,
                         2 + round,
                         dt };
    for (int i = 0; i < N_CHAINS; i++) {
        if (dt != DT_F32) {
            char label[96];
            snprintf(label, sizeof label, "%s %s", dt == DT_BF16 ? "bf16" : "fp16", c[i].label);
            memcpy(c[i].label, label, sizeof label);
        }
        for (int k = 0; k < c[i].n_ops; k++) { /* scratch where an op wants it (exec.h) */
            int64_t ws = rt_op_workspace_floats(&c[i].ops[k]);
            if (ws > 0) {
                c[i].ops[k].ws_offset = c[i].arena_bytes;
                c[i].arena_bytes += (ws * 4 + 63) / 64 * 64;
            }
        }
        c[i].arena_bytes += 64;
    }
}

int cuda_chains_build(cuda_chain **out)
{
    static const int32_t precisions[] = { DT_F32, DT_BF16, DT_F16 };
    const int n = (int)(sizeof precisions / sizeof precisions[0]);
    cuda_chain *c = calloc((size_t)(N_CHAINS * n), sizeof *c);
    if (!c)
        abort();
    for (int p = 0; p < n; p++)
        build_chains(c + p * N_CHAINS, precisions[p]);
    *out = c;
    return N_CHAINS * n;
}

int cuda_cases_plan(cuda_plan *plan, cuda_case **cases, int *n_cases, cuda_chain **chains, int *n_chains,
                    int **first_op, char *why, size_t size)
{
    struct diag err;
    memset(&err, 0, sizeof err);
    *n_cases = cuda_cases_build(cases);
    *n_chains = cuda_chains_build(chains);
    if (first_op && !(*first_op = malloc(((size_t)*n_chains + 1) * sizeof **first_op))) {
        snprintf(why, size, "out of memory");
        return -1;
    }
    for (int i = 0; i < *n_cases; i++)
        if (cuda_plan_add_op(plan, &(*cases)[i].op, &err)) {
            snprintf(why, size, "case '%s': %s", (*cases)[i].label, err.msg);
            return -1;
        }
    plan->fuse = 1;
    for (int j = 0; j < *n_chains; j++) {
        if (first_op)
            (*first_op)[j] = plan->n_ops;
        plan->group = 1000 + j;
        for (int i = 0; i < (*chains)[j].n_ops; i++)
            if (cuda_plan_add_op(plan, &(*chains)[j].ops[i], &err)) {
                snprintf(why, size, "chain '%s': %s", (*chains)[j].label, err.msg);
                return -1;
            }
    }
    return 0;
}
