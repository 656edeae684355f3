/* ops.h: the operator table, one entry per op.
 *
 * Everything the compiler knows about an op is found from its entry in
 * op_table[]: its name in XML and text IR, its inputs and attributes, its
 * shape rule, and its forward/backward FLOP and byte cost.  Backward rules
 * and kernels join the same entry as they are written; adding an op means
 * adding an entry here and its kernels, nothing scattered.
 *
 * Conventions (PyTorch's, so weights load unchanged):
 *   linear(x[..,K], w[N,K], b[N]?) -> [..,N]           y = x w^T + b
 *                                     transpose_w: w is [K,N], y = x w + b (GPT-2's Conv1D)
 *   matmul(a[..,M,K], b[..,K,N])   -> [..,M,N]          transpose_b: b is [..,N,K]
 *   conv2d(x[N,C,H,W], w[OC,C,KH,KW], b[OC]?) -> [N,OC,OH,OW]
 */
#ifndef FUSION_OPS_H
#define FUSION_OPS_H

#include <stdint.h>

#include "ir.h"

typedef enum { ATTR_INT, ATTR_FLOAT } attr_type;

typedef struct {
    attr_key key;
    attr_type type;
    int required;
    int64_t default_int;
    double default_float;
} attr_spec;

/* Shape rule: given the node's inputs (shapes known), fill the shape and
 * dtype of each output.  On a mismatch fill err->msg (file/line are added by
 * the caller) naming the inputs and both shapes, and return -1. */
typedef int (*op_shape_fn)(const ir_graph *g, const ir_node *n, ir_shape out_shape[], ir_dtype out_dtype[],
                           struct diag *err);
/* Cost of one execution for the node's shapes: floating-point operations,
 * and bytes read plus written (the memory-bound lower limit). */
typedef double (*op_cost_fn)(const ir_graph *g, const ir_node *n);

#define OP_MAX_ATTR_SPECS 7
#define OP_IN(i)          (1u << (i)) /* a bit in bwd_saves_in / bwd_saves_out / grads */

typedef struct {
    const char *name; /* "layernorm"                                   */
    int min_in, max_in;
    int min_out, max_out;
    const char *in_names[8]; /* for messages: "x", "w", "b"                   */
    int n_attr_specs;
    attr_spec attr_specs[OP_MAX_ATTR_SPECS];
    op_shape_fn shape;
    op_cost_fn flops_forward;  /* this op's own FLOPs                         */
    op_cost_fn flops_backward; /* forward ops: FLOPs of all input gradients   */
    op_cost_fn bytes_forward;
    /* Autodiff.  A forward op names its backward op and which of its inputs
     * and outputs the backward rule reads; OP_COUNT: no backward (the
     * gradient passes through, as for add, or there is none). */
    ir_op backward;
    unsigned bwd_saves_in, bwd_saves_out;
    ir_op forward_of; /* backward ops: their forward op; else OP_COUNT */
    int internal;     /* made by passes, not written in model files  */
    /* 1: the backward writes the gradient of every float input, wanted or
     * not (concat: its slices' offsets need every input's size). */
    int bwd_all_inputs;
    /* 1 + k: output 0 may be written over input k when this op is its last
     * reader (same size; the kernels read each element before they write
     * it, on both back ends); 0: no.  The memory pass then gives both one
     * place: cross_entropy_backward's logits gradient over the logits,
     * the largest activation of a language model. */
    int in_place;
    /* Ops whose cost is a constant per element (flops_per_element below):
     * FLOPs per output element forward, and per output element for all of
     * the input gradients backward.  A new elementwise or normalising op
     * states two numbers here instead of writing two cost functions. */
    double elem_flops[2];
    /* A pointwise op (pointwise.h) and its backward: inputs (1 or 2; 0: not
     * pointwise), and the row's formulas as C text, for the back ends that
     * generate code (CUDA): y of x (and z); the gradients of x and z, of
     * x, z and dy. */
    struct {
        int inputs;
        const char *forward;
        const char *gradient[2];
    } pointwise;
} op_def;

extern const op_def op_table[OP_COUNT];

/* An optimizer's update of one parameter: (p, g, ...), p updated in place. */
static inline int op_updates_param(ir_op op) { return op == OP_ADAMW || op == OP_SGD; }

const char *attr_key_name(attr_key k);
int attr_key_parse(const char *s, attr_key *out); /* 0 or -1 */
attr_type attr_key_type(attr_key k);
int op_parse(const char *s, ir_op *out); /* 0 or -1 */
/* "embedding, positions, ..." (the ops a model file may use) for messages. */
const char *op_model_names(void);
const attr_spec *op_attr_spec(ir_op op, attr_key key); /* NULL: not accepted */
/* Does node n read its input k?  A product's backward (linear, matmul,
 * conv2d: inputs x, w, dy) reads x only for w's gradient and w only for
 * x's: a frozen weight's linear leaves its x unread.  The memory pass ends
 * an unread input's life at its last reader that reads it, the stash and
 * the fence cost model leave it out, and the kernels never touch it (the
 * op still names it: the inputs are positional).  The CPU back end's twin
 * of this rule, for the rt_op: runtime/cpu/op_table.c's product_inputs_dense
 * and product_inputs_conv2d; the two must agree. */
int op_reads_input(const ir_node *n, int k);

#endif
