/* ops_cost.c: FLOP and byte counts of every op (see ops.h for the table).
 *
 * Counts are per execution, for the node's static shapes.  Matrix products
 * are exact (2 FLOPs per multiply-add, as PyTorch's FLOP counters and the
 * MFU literature count them); elementwise and normalisation ops use the
 * small per-element constants written beside each function, which is as
 * precise as the workload estimator needs: their time is memory-bound.
 * Attention counts the full T x T scores, causal mask or not, like the
 * usual "6N + 12·L·T·C" estimate.
 */
#include "ops_rules.h"

static double numel(const ir_graph *g, int32_t v)
{
    int64_t n = ir_shape_numel(&g->values[v].shape);
    return n < 0 ? 0.0 : (double)n;
}

static double in_numel(const ir_graph *g, const ir_node *n, int i) { return numel(g, n->in[i]); }
static double out_numel(const ir_graph *g, const ir_node *n, int i) { return numel(g, n->out[i]); }

double flops_zero(const ir_graph *g, const ir_node *n) { return 0.0; }

/* One operation per output element (add, relu, pooling's average). */
double flops_elementwise_1(const ir_graph *g, const ir_node *n) { return out_numel(g, n, 0); }

/* One operation per input element (a reduction). */
double flops_input_elements(const ir_graph *g, const ir_node *n) { return in_numel(g, n, 0); }

/* Forward is a gather (no arithmetic); backward scatter-adds each row. */
double flops_embedding(const ir_graph *g, const ir_node *n) { return 0.0; }
double flops_embedding_bwd(const ir_graph *g, const ir_node *n) { return out_numel(g, n, 0); }

/* linear's K: w is [N,K], or [K,N] under transpose_w. */
static double linear_k(const ir_graph *g, const ir_node *n)
{
    const ir_shape *w = &g->values[n->in[1]].shape;
    return (double)w->dim[ir_node_int(n, ATTR_TRANSPOSE_W, 0) ? 0 : 1];
}

/* x[M,K] w[N,K]: 2MKN, + MN for the bias. */
double flops_linear(const ir_graph *g, const ir_node *n)
{
    double mn = out_numel(g, n, 0);
    return 2.0 * mn * linear_k(g, n) + (n->n_in == 3 ? mn : 0.0);
}

/* dx = dy w (2MNK), dw = dy^T x (2MNK), db = sum dy (MN). */
double flops_linear_bwd(const ir_graph *g, const ir_node *n)
{
    double mn = out_numel(g, n, 0);
    return 4.0 * mn * linear_k(g, n) + (n->n_in == 3 ? mn : 0.0);
}

double flops_matmul(const ir_graph *g, const ir_node *n)
{
    const ir_shape *a = &g->values[n->in[0]].shape;
    double scale = ir_node_float(n, ATTR_SCALE, 1.0) != 1.0 ? out_numel(g, n, 0) : 0.0;
    return 2.0 * out_numel(g, n, 0) * (double)a->dim[a->rank - 1] + scale;
}

double flops_matmul_bwd(const ir_graph *g, const ir_node *n) { return 2.0 * flops_matmul(g, n); }

/* mean, variance, normalise, scale, shift: about 8 per element forward,
 * 16 backward (the same constants serve batchnorm). */
double flops_layernorm(const ir_graph *g, const ir_node *n) { return 8.0 * out_numel(g, n, 0); }
double flops_layernorm_bwd(const ir_graph *g, const ir_node *n) { return 16.0 * out_numel(g, n, 0); }

/* 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))): about 10 forward, 20 backward. */
double flops_gelu(const ir_graph *g, const ir_node *n) { return 10.0 * out_numel(g, n, 0); }
double flops_gelu_bwd(const ir_graph *g, const ir_node *n) { return 20.0 * out_numel(g, n, 0); }

/* B, T and the query width C = H*D of an attention (or its backward): its
 * first input is qkv[B,T,3C] when it is the only one (the backward's dy
 * aside), else q[B,T,C].  Grouped-query attention costs what multi-head
 * attention of the same query heads does: every query head scores every key. */
static void attention_dims(const ir_graph *g, const ir_node *n, double *b, double *t, double *c)
{
    const ir_shape *x = &g->values[n->in[0]].shape;
    int packed = n->n_in - (n->op == OP_ATTENTION_BACKWARD) == 1;
    *b = (double)x->dim[0], *t = (double)x->dim[1], *c = (double)(packed ? x->dim[2] / 3 : x->dim[2]);
}

/* H heads: scores 2BT^2C, weighted sum 2BT^2C, softmax 5BHT^2. */
double flops_attention(const ir_graph *g, const ir_node *n)
{
    double b, t, c, h = (double)ir_node_int(n, ATTR_HEADS, 1);
    attention_dims(g, n, &b, &t, &c);
    return 4.0 * b * t * t * c + 5.0 * b * h * t * t;
}

/* A query against a cache of CTX rows: 4 T CTX H D for the scores and the
 * weighted sum, 5 H T CTX for the softmax, as though every row were in use
 * (the longest a step can take). */
double flops_attention_cached(const ir_graph *g, const ir_node *n)
{
    const ir_shape *q = &g->values[n->in[0]].shape, *cache = &g->values[n->in[3]].shape;
    double b = (double)q->dim[0], t = (double)q->dim[1], c = (double)q->dim[2], ctx = (double)cache->dim[1];
    double h = (double)ir_node_int(n, ATTR_HEADS, 1);
    return 4.0 * b * t * ctx * c + 5.0 * b * h * t * ctx;
}

double flops_attention_bwd(const ir_graph *g, const ir_node *n)
{
    double b, t, c, h = (double)ir_node_int(n, ATTR_HEADS, 1);
    attention_dims(g, n, &b, &t, &c);
    return 8.0 * b * t * t * c + 4.0 * b * h * t * t;
}

/* max, exp, sum, divide: about 5 forward; y*(dy - sum(y dy)): 4 backward. */
double flops_softmax(const ir_graph *g, const ir_node *n) { return 5.0 * out_numel(g, n, 0); }
double flops_softmax_bwd(const ir_graph *g, const ir_node *n) { return 4.0 * out_numel(g, n, 0); }

/* log-softmax over the logits plus the pick: about 5 per logit forward;
 * softmax minus one-hot: 2 per logit backward. */
double flops_cross_entropy(const ir_graph *g, const ir_node *n) { return 5.0 * in_numel(g, n, 0); }
double flops_cross_entropy_bwd(const ir_graph *g, const ir_node *n) { return 2.0 * in_numel(g, n, 0); }

/* y[N,OC,OH,OW] from w[OC,C,KH,KW]: 2 N OC OH OW C KH KW, + bias. */
double flops_conv2d(const ir_graph *g, const ir_node *n)
{
    const ir_shape *w = &g->values[n->in[1]].shape;
    double out = out_numel(g, n, 0);
    double per_out = (double)w->dim[1] * (double)w->dim[2] * (double)w->dim[3];
    return 2.0 * out * per_out + (n->n_in == 3 ? out : 0.0);
}

/* dx (a transposed convolution) and dw, each as costly as the forward. */
double flops_conv2d_bwd(const ir_graph *g, const ir_node *n) { return 2.0 * flops_conv2d(g, n); }

/* One comparison per window element per output. */
double flops_maxpool(const ir_graph *g, const ir_node *n)
{
    double k = (double)ir_node_int(n, ATTR_KERNEL, 1);
    return out_numel(g, n, 0) * k * k;
}

/* sum of squares: a multiply and an add per element. */
double flops_input_elements_2(const ir_graph *g, const ir_node *n) { return 2.0 * in_numel(g, n, 0); }

/* AdamW: moments, bias corrections, sqrt, divide, decay: about 12 per parameter. */
double flops_input_elements_12(const ir_graph *g, const ir_node *n) { return 12.0 * in_numel(g, n, 0); }

/* ---- backward ops: counted from their own inputs and outputs ---- */

static int grad_wanted(const ir_node *n, int i) { return (ir_node_int(n, ATTR_GRADS, 0) >> i) & 1; }
static double dy_numel(const ir_graph *g, const ir_node *n) { return in_numel(g, n, n->n_in - 1); }

double flops_output_elements(const ir_graph *g, const ir_node *n) { return out_numel(g, n, 0); }
double flops_output_elements_4(const ir_graph *g, const ir_node *n) { return 4.0 * out_numel(g, n, 0); }
double flops_dy_elements_1(const ir_graph *g, const ir_node *n) { return dy_numel(g, n); }
double flops_dy_elements_4(const ir_graph *g, const ir_node *n) { return 4.0 * dy_numel(g, n); }
double flops_dy_elements_16(const ir_graph *g, const ir_node *n) { return 16.0 * dy_numel(g, n); }

/* (x[M,K], w[N,K], dy[M,N]): dx and dw 2MKN each, db MN. */
double flops_linear_backward(const ir_graph *g, const ir_node *n)
{
    double mn = dy_numel(g, n), k = linear_k(g, n);
    return (grad_wanted(n, 0) + grad_wanted(n, 1)) * 2.0 * mn * k + grad_wanted(n, 2) * mn;
}

/* (a[..,M,K], b, dy[..,M,N]): each gradient 2·M·N·K per batch. */
double flops_matmul_backward(const ir_graph *g, const ir_node *n)
{
    const ir_shape *a = &g->values[n->in[0]].shape;
    return (grad_wanted(n, 0) + grad_wanted(n, 1)) * 2.0 * dy_numel(g, n) * (double)a->dim[a->rank - 1];
}

double flops_attention_backward(const ir_graph *g, const ir_node *n) { return flops_attention_bwd(g, n); }

/* (x, w[OC,C,KH,KW], dy[N,OC,OH,OW]): dx and dw 2·|dy|·C·KH·KW each, db |dy|. */
double flops_conv2d_backward(const ir_graph *g, const ir_node *n)
{
    const ir_shape *w = &g->values[n->in[1]].shape;
    double dy = dy_numel(g, n), per = (double)w->dim[1] * (double)w->dim[2] * (double)w->dim[3];
    return (grad_wanted(n, 0) + grad_wanted(n, 1)) * 2.0 * dy * per + grad_wanted(n, 2) * dy;
}

/* Ops that state their FLOPs per element in the table (op_def.elem_flops). */
double flops_per_element(const ir_graph *g, const ir_node *n)
{
    return op_table[n->op].elem_flops[0] * out_numel(g, n, 0);
}
double flops_per_element_bwd(const ir_graph *g, const ir_node *n)
{
    return op_table[n->op].elem_flops[1] * out_numel(g, n, 0);
}
double flops_per_dy_element(const ir_graph *g, const ir_node *n)
{
    return op_table[op_table[n->op].forward_of].elem_flops[1] * dy_numel(g, n);
}

/* Every input read once, every output written once. */
double bytes_io(const ir_graph *g, const ir_node *n)
{
    double bytes = 0.0;
    for (int i = 0; i < n->n_in; i++)
        bytes += (double)ir_value_bytes(g, n->in[i]);
    for (int i = 0; i < n->n_out; i++)
        bytes += (double)ir_value_bytes(g, n->out[i]);
    return bytes > 0.0 ? bytes : 0.0;
}
