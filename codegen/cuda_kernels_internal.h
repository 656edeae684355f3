/* cuda_kernels_internal.h: what the kernel-source files share
 * (cuda_plan.c: the plan, the kernel text, arguments; cuda_elementwise.c:
 * elementwise kernels and their fusion; cuda_pointwise.c: the pointwise
 * ops; cuda_kernels.c: layout ops, dense products; cuda_kernels_nn.c:
 * normalisation, softmax, loss, convolution, pooling, optimizer;
 * cuda_kernels_attention.c: attention; cuda_lowering.c: the table that
 * picks each op's lowering). */
#ifndef FUSION_CUDA_KERNELS_INTERNAL_H
#define FUSION_CUDA_KERNELS_INTERNAL_H

#include <stdarg.h>

#include "../ir/ir.h"
#include "cuda_kernels.h"

#define NT CUDA_KERNEL_THREADS

/* The block-reduction buffers every reducing kernel declares (red for
 * fusion_block_sum, redf for fusion_block_max), one slot a thread. */
#define RED_DECLS "    FUSION_SHARED(double, red, 256);\n    FUSION_SHARED(float, redf, 256);\n"
_Static_assert(NT == 256, "RED_DECLS spells the block size");

/* The plan's last step while another elementwise kernel may join it
 * (cuda_elementwise.c); the plan frees it. */
struct cuda_fusable {
    int valid;
    int32_t step; /* its index in the plan's steps               */
    int32_t group;
    int64_t n;
    char *parts; /* the loop body: each op's block, indices shifted */
    char tag[64];
    int32_t n_args;
    uint32_t broadcast;              /* bit k: argument k is read at other indices than i */
    int64_t bytes[RT_CUDA_MAX_ARGS]; /* what each argument spans      */
    int kernel_new;                  /* its kernel was added for it: drop it when replaced */
    size_t source_len_before;
};

/* A kernel being written: its tag (op and direction) and body text. */
typedef struct {
    char *text;
    size_t len, cap;
    int oom;
} kbuf;

void kb_printf(kbuf *kb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Finish the kernel: name it f_<tag>_<hash>, add it to the plan unless an
 * equal one is there; its index, or -1 when out of memory. kb is freed. */
int32_t kb_finish(cuda_plan *p, kbuf *kb, const char *tag);

/* Arguments: a place and the dtype of what is there (scratch: f32). */
rt_cuda_arg arg_arena(int64_t offset, int32_t dtype);
rt_cuda_arg arg_scratch(int64_t offset);
rt_cuda_arg arg_none(void);
rt_cuda_arg arg_status(void);
rt_cuda_arg arg_flags(void);
#define ARG_END ((rt_cuda_arg){ -1, 0, 0 })

/* ---- storage types: the one place that maps a dtype to kernel text -----
 *
 * A kernel declares each tensor pointer with its C type, ctype(dtype):
 * float, int, __nv_bfloat16 or __half; it reads floats through LD(x[i])
 * and writes through ST(y[i], v) (the prelude's overloads: exact widening,
 * round-to-nearest-even narrowing), so one kernel text serves f32, bf16
 * and fp16 tensors, and mixes of them, but for its declarations. */
const char *ctype(int32_t dtype);
int64_t dtype_bytes(int32_t dtype);
/* "    [const ]T *name = ([const ]T *)a.p[index]<offset>;\n", T = ctype(arg.dtype);
 * offset: NULL, or an expression in elements (" + r * 300LL"). */
void kb_ptr(kbuf *kb, const char *name, int index, rt_cuda_arg arg, int writable, const char *offset);
/* One kb_ptr per argument: names are space-separated in argument order, a
 * trailing '!' marks one written (the others are const), "-" declares none. */
void kb_ptrs(kbuf *kb, const char *names, const rt_cuda_arg *args, int n_args);

/* Launch kernel k on grid x block (1-d), dyn shared bytes; args end with ARG_END. */
int step_kernel(cuda_plan *p, int32_t k, int64_t grid, uint32_t shared_bytes, int check_status, ...);
/* Row-major C = alpha·op(A)·op(B) + beta·C, batch entries batch apart.
 * A and B of one type (f32, bf16, fp16), C f32 or theirs; -3 otherwise. */
int step_gemm(cuda_plan *p, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, rt_cuda_arg A,
              int64_t lda, int64_t stride_a, rt_cuda_arg B, int64_t ldb, int64_t stride_b, float beta, rt_cuda_arg C,
              int64_t ldc, int64_t stride_c, int64_t batch);
/* A host step: the runtime does the op itself (a message). */
int step_host(cuda_plan *p);
void plan_need_scratch(cuda_plan *p, int64_t bytes);
/* *ptr (an array of *cap elements of size bytes) grown to hold need: 0, or -1 out of memory. */
int plan_grow(void **ptr, int32_t *cap, int32_t need, size_t size);

/* Blocks for n elements, one thread each, grid-stride beyond a cap. */
int64_t grid_for(int64_t n);

/* Op helpers: an input's or output's place, and a backward op's gradient
 * output for forward input `bit` (arg_none when not asked for). */
rt_cuda_arg in_arg(const rt_op *op, int i);
rt_cuda_arg out_arg(const rt_op *op, int i);
rt_cuda_arg grad_arg(const rt_op *op, int bit);
/* A place plus a number of its elements (of its dtype). */
rt_cuda_arg arg_elems(rt_cuda_arg a, int64_t elements);

/* One elementwise kernel over n elements (a grid-stride loop over i):
 * names declares the pointers of the arguments (kb_ptrs), body computes
 * element i; the arguments follow, ending with ARG_END. */
int elementwise(cuda_plan *p, const char *tag, int64_t n, const char *names, const char *body, ...);
/* The same with the arguments in an array; fusable (a pointwise op's
 * kernel, which touches element i only): with p->fuse it may instead join
 * the plan's last step (cuda_elementwise.c). */
int elementwise_of(cuda_plan *p, const char *tag, int fusable, int64_t n, const char *names, const char *body,
                   const rt_cuda_arg *args, int32_t n_args);
/* y (rows, cols) += b (cols) broadcast over rows: elementwise, fusable with
 * what follows though it reads b at i % cols. */
int elementwise_bias_rows_add(cuda_plan *p, int64_t rows, int64_t cols, rt_cuda_arg y, rt_cuda_arg b);
/* The operand input i of a product op as cuBLAS reads it: the tensor itself,
 * or, when it is f32 and the op multiplies in 16 bits (rt_op_product_dtype),
 * its copy rounded into the op's scratch (runtime/exec.h's layout) by a
 * kernel added here.  0, -1 out of memory, -2 no scratch. */
int product_operand(cuda_plan *p, const rt_op *op, int i, rt_cuda_arg *operand);
/* out[j] = Σ_rows in[row][j] in double, one thread per column. */
int lower_column_sums(cuda_plan *p, rt_cuda_arg out, rt_cuda_arg in, int64_t rows, int64_t cols);

/* Each op's lowering (the rows of cuda_lowering.c): its steps appended to
 * the plan; 0, -1 when out of memory, or a code cuda_plan_add_op explains
 * (-2, -3, -4).  cuda_kernels.c's: */
int lower_copy(cuda_plan *p, const rt_op *op); /* flatten, its backward, copy */
int lower_fill(cuda_plan *p, const rt_op *op);
int lower_positions(cuda_plan *p, const rt_op *op);
int lower_embedding(cuda_plan *p, const rt_op *op);
int lower_embedding_backward(cuda_plan *p, const rt_op *op);
int lower_qkv_split(cuda_plan *p, const rt_op *op);    /* and its backward */
int lower_merge_heads(cuda_plan *p, const rt_op *op);  /* and its backward */
int lower_rope(cuda_plan *p, const rt_op *op);         /* and its backward */
int lower_split_concat(cuda_plan *p, const rt_op *op); /* split, concat, their backwards */
int lower_linear(cuda_plan *p, const rt_op *op);
int lower_linear_backward(cuda_plan *p, const rt_op *op);
int lower_matmul(cuda_plan *p, const rt_op *op); /* and its backward */
int lower_host(cuda_plan *p, const rt_op *op);   /* send, recv, allreduce */
/* cuda_pointwise.c's: the pointwise ops of ir/pointwise.h, from their rows. */
int lower_pointwise(cuda_plan *p, const rt_op *op);
int lower_pointwise_backward(cuda_plan *p, const rt_op *op);
/* cuda_kernels_nn.c's and cuda_kernels_attention.c's: */
int lower_layernorm(cuda_plan *p, const rt_op *op);
int lower_layernorm_backward(cuda_plan *p, const rt_op *op);
int lower_rmsnorm(cuda_plan *p, const rt_op *op);
int lower_rmsnorm_backward(cuda_plan *p, const rt_op *op);
int lower_batchnorm(cuda_plan *p, const rt_op *op);
int lower_batchnorm_backward(cuda_plan *p, const rt_op *op);
int lower_softmax(cuda_plan *p, const rt_op *op);
int lower_softmax_backward(cuda_plan *p, const rt_op *op);
int lower_attention(cuda_plan *p, const rt_op *op);
int lower_attention_cached(cuda_plan *p, const rt_op *op);
int lower_attention_backward(cuda_plan *p, const rt_op *op);
int lower_cross_entropy(cuda_plan *p, const rt_op *op);
int lower_cross_entropy_backward(cuda_plan *p, const rt_op *op);
int lower_conv2d(cuda_plan *p, const rt_op *op);
int lower_conv2d_backward(cuda_plan *p, const rt_op *op);
int lower_maxpool(cuda_plan *p, const rt_op *op); /* and its backward */
int lower_avgpool(cuda_plan *p, const rt_op *op); /* and its backward */
int lower_sum_squares(cuda_plan *p, const rt_op *op);
int lower_clip_scale(cuda_plan *p, const rt_op *op);
int lower_lr_schedule(cuda_plan *p, const rt_op *op);
int lower_adamw(cuda_plan *p, const rt_op *op);
int lower_sgd(cuda_plan *p, const rt_op *op);

/* "%.9e" with an f: a float literal that reads back to the same float. */
const char *flit(char buf[32], double v);

#endif
