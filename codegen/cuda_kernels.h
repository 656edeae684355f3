/* cuda_kernels.h: CUDA C for the forward and backward of every op, one
 * kernel specialised per op instance's sizes, and the steps that run it.
 *
 * The code generator lowers each node of a CUDA device to an rt_op (as for
 * a CPU device), then hands it here: cuda_plan_add_op appends the op's steps
 * (kernel launches, cuBLAS products, or a host step for communication; see
 * runtime/cuda/cuda_program.h) and the source of any kernel it needs that
 * the plan does not have yet.  Sizes, attributes and strides are constants
 * in the source; pointers are arguments, so the twelve identical layers of
 * GPT-2 share their kernels and the module stays small.  A kernel's name is
 * its op and a hash of its text (f_layernorm_fwd_3f2a...), so equal sources
 * are one kernel.
 *
 * The source is plain CUDA C whose only includes are cuda_bf16.h and
 * cuda_fp16.h: the prelude (cuda_kernels_prelude) defines fusion_args, the
 * block reductions and the loads and stores of the three float storage
 * types, and spells shared memory through two macros that the CPU
 * emulation harness (tests/unit/cuda_emu.h) defines its own way, with the
 * two 16-bit types.  Reductions accumulate in double, as the CPU kernels
 * do, and in a fixed order: results do not depend on timing, and the
 * harness compares them with the CPU kernels.
 *
 * Precision.  A kernel is written once and declares each tensor with the C
 * type of its dtype (rt_tensor.dtype: float, __nv_bfloat16, __half); it
 * loads to float, computes in float and rounds what it stores (nearest
 * even), as the CPU's 16-bit path does (runtime/exec.c).  So a bf16 graph's
 * layernorm reads bf16 activations and f32 weights and writes bf16, and
 * its weight gradient in f32.  A matrix product of 16-bit activations is a
 * cublasGemmEx (tensor cores, f32 accumulator); an f32 weight it reads is
 * rounded first into the op's scratch (runtime/exec.h's layout).
 *
 * What it deliberately is not: fast.  The kernels are the plain,
 * obviously-right form (block-per-row reductions, one thread per output);
 * matrix products, where the time goes, are cuBLAS's.  Chains of
 * elementwise ops (a bias, then gelu or a residual add) fuse into one
 * launch when the plan asks (cuda_elementwise.c).  A weight is rounded
 * again for each product that reads it (once a micro-batch per direction),
 * not cached for the step.
 */
#ifndef FUSION_CUDA_KERNELS_H
#define FUSION_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../ir/diag.h"
#include "../runtime/cuda/cuda_program.h"
#include "../runtime/exec.h"

typedef struct {
    char *source; /* the prelude, then every kernel, NUL-terminated */
    size_t source_len, source_cap;
    char **names;     /* [n_kernels] kernel names                      */
    uint64_t *hashes; /* [n_kernels] of the kernels' text              */
    int32_t n_kernels, cap_kernels;
    rt_cuda_step *steps;
    int32_t n_steps, cap_steps;
    rt_cuda_op *ops; /* one per op added, in order                    */
    int32_t n_ops, cap_ops;
    int64_t scratch_bytes;        /* the most any op's steps need                  */
    int oom;                      /* an allocation failed: the plan is unusable    */
    int fuse;                     /* 1: an elementwise kernel may join the one before
                                   it (cuda_elementwise.c); 0 (cuda_plan_init): each
                                   op its own steps, as the emulation harness checks them */
    int32_t group;                /* the caller's label for the ops being added (their
                                   phase): only kernels of one group fuse      */
    struct cuda_fusable *fusable; /* the last step, when another may join it */
} cuda_plan;

void cuda_plan_init(cuda_plan *p);
void cuda_plan_free(cuda_plan *p);

/* Append op's steps (and new kernels).  0, or -1 with err set naming the op. */
int cuda_plan_add_op(cuda_plan *p, const rt_op *op, struct diag *err);

/* Has op kind `op` a row in the lowering table (cuda_lowering.c)?  Does
 * its row say its kernels may fuse with the launch before? */
int cuda_op_has_lowering(int32_t op);
int cuda_op_fusable(int32_t op);

/* The text every module starts with (also what the harness compiles). */
const char *cuda_kernels_prelude(void);

/* Threads per block of every generated kernel. */
#define CUDA_KERNEL_THREADS 256

#endif
