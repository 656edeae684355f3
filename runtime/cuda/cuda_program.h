/* cuda_program.h: what a CUDA device's program holds besides its rt_ops,
 * shared by the code generator (codegen/cuda_kernels.c writes it) and the
 * CUDA backend (runtime/cuda/cuda.c runs it).
 *
 * Each rt_op of a CUDA device lowers to a short list of steps, run in
 * order on one stream:
 *
 *   RT_CUDA_STEP_KERNEL  one launch of a generated kernel (by index into the
 *                        module's kernel names), grid, block, dynamic shared
 *                        bytes and up to RT_CUDA_MAX_ARGS pointer arguments;
 *   RT_CUDA_STEP_GEMM    one cuBLAS strided-batched product, written in the
 *                        row-major form the CPU kernels use
 *                        (C = alpha·op(A)·op(B) + beta·C, leading dimensions
 *                        and batch strides in elements); the backend turns
 *                        it into cuBLAS's column-major call by swapping the
 *                        operands (Cᵀ = op(B)ᵀ·op(A)ᵀ).  The operands' types
 *                        are their arguments' dtypes: all f32, an sgemm
 *                        (TF32 tensor cores when the program allows them);
 *                        A and B both bf16 or both fp16, cublasGemmEx's
 *                        strided-batched form with an f32 accumulator, C in
 *                        its own type (f32 or the same 16-bit one);
 *   RT_CUDA_STEP_HOST    the op runs on the host (send, recv, allreduce):
 *                        its inputs are copied to the pinned host arena,
 *                        rt_op_run does the work there, its outputs are
 *                        copied back.
 *
 * Every generated kernel has one signature,
 *     extern "C" __global__ void NAME(fusion_args a)
 * with fusion_args laid out as rt_cuda_args below: a uniform ABI, so that
 * launching (here and in the CPU emulation harness, tests/unit/cuda_emu.h)
 * needs no per-kernel code.  Sizes are constants in the kernel's source,
 * so kernels of equal shapes are one kernel.
 *
 * Pointer arguments name a place: the device arena (a byte offset, as the
 * memory pass placed the op's tensors), the backend's scratch area (for
 * kernels that pass row statistics from one launch to the next), the
 * backend's status word (bad token ids and targets are reported there), its
 * flags word (an AdamW that skipped its step says so there), or nothing.
 * An argument also says the dtype of what it points at (ir_dtype: f32,
 * i32, f16, bf16): the kernels were written for it, and a product's
 * operand types come from it.
 *
 * Like rt_op, these are plain bytes embedded in the executable: compiler and
 * runtime are built together, for one ABI.
 */
#ifndef FUSION_RT_CUDA_PROGRAM_H
#define FUSION_RT_CUDA_PROGRAM_H

#include <stdint.h>

#define RT_CUDA_MAX_ARGS 8

typedef enum {
    RT_CUDA_ARG_NONE,    /* a NULL pointer                                 */
    RT_CUDA_ARG_ARENA,   /* device arena + value                            */
    RT_CUDA_ARG_SCRATCH, /* scratch area + value                            */
    RT_CUDA_ARG_STATUS,  /* the status word (int64, RT_CUDA_STATUS_OK or a position) */
    RT_CUDA_ARG_FLAGS    /* the flags word (int32, RT_CUDA_FLAG_* bits; 0 at start) */
} rt_cuda_arg_kind;

#define RT_CUDA_STATUS_OK    INT64_MAX /* kernels atomicMin a bad position into it */
#define RT_CUDA_FLAG_SKIPPED 1         /* an adamw skipped its step: fp16's loss scale overflowed */

typedef struct {
    int32_t kind;  /* rt_cuda_arg_kind */
    int32_t dtype; /* of what it points at: an ir_dtype (0: f32) */
    int64_t value; /* byte offset */
} rt_cuda_arg;

/* A launch's one parameter, the generated prelude's fusion_args: the
 * pointers, this step's number, the steps taken (AdamW's bias correction:
 * step - skipped), fp16's loss scale (runtime/exec.h: the seed is
 * loss_scale, infinite when inject_overflow; clip_scale divides it out),
 * cross_entropy's loss weight (exec.h; 0 reads as 1), and the run's
 * training settings (train_settings.h): this step's learning rate (what
 * lr_schedule writes), the gradient norm's bound (clip_scale; 0: none) and
 * the weight decay of matrices and kernels (adamw, sgd); and what batch
 * norm does with its running statistics (stats_mode.h's rt_stats_mode). */
typedef struct {
    uint64_t p[RT_CUDA_MAX_ARGS]; /* device addresses                       */
    int64_t step, adam_step;
    float loss_scale; /* 1 when the program does not scale       */
    int32_t inject_overflow;
    float loss_weight;
    float lr;
    double max_norm, weight_decay;
    int32_t stats_mode;
    int32_t unused; /* 0 */
} rt_cuda_args;
/* The prelude spells it { char *p[8]; long long step, adam_step; float
 * loss_scale; int inject_overflow; float loss_weight, lr; double max_norm,
 * weight_decay; int stats_mode, unused; } (codegen/cuda_plan.c): 120 bytes. */
#ifdef __cplusplus
static_assert(sizeof(rt_cuda_args) == 120, "rt_cuda_args is the kernels' fusion_args");
#else
_Static_assert(sizeof(rt_cuda_args) == 120, "rt_cuda_args is the kernels' fusion_args");
#endif

typedef enum { RT_CUDA_STEP_KERNEL, RT_CUDA_STEP_GEMM, RT_CUDA_STEP_HOST } rt_cuda_step_kind;

typedef struct {
    int32_t kind; /* rt_cuda_step_kind                              */
    /* kernel */
    int32_t kernel; /* index into the module's kernel names           */
    uint32_t grid[3], block[3];
    uint32_t shared_bytes;             /* dynamic shared memory                           */
    int32_t check_status;              /* 1: read the status word after this launch      */
    rt_cuda_arg arg[RT_CUDA_MAX_ARGS]; /* kernel: p[0..]; gemm: A, B, C        */
    /* gemm, row-major: C (M,N) = alpha·op(A)·op(B) + beta·C, per batch entry */
    int32_t trans_a, trans_b;
    int64_t m, n, k, lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c, batch;
    float alpha, beta;
} rt_cuda_step;

typedef struct {
    int32_t first, count; /* this op's steps                                */
} rt_cuda_op;

/* The module: images and names, as the generated program embeds them. */
typedef struct {
    int32_t n_kernels; /* names: n_kernels NUL-terminated strings        */
    int32_t n_steps;
    int64_t scratch_bytes;             /* the scratch area's size (device memory)        */
    int64_t fatbin_bytes, names_bytes; /* the fat binary: a CUBIN for each arch of the
                                            cluster, PTX for the newest (codegen/fatbin.h) */
    char ptx_arch[16];                 /* "compute_90": the PTX's virtual architecture   */
    int32_t n_cubins;                  /* cubin_sm[0..n_cubins): 75, 80, 86, ... ascending */
    int32_t cubin_sm[8];
    int32_t ptx_sm; /* 90: the PTX runs (compiled by the driver) on 9.0 and newer */
    int32_t unused;
} rt_cuda_module_info;

/* Whether a GPU of compute capability major.minor can run a module with
 * these images: a CUBIN of its major version and a minor at most its own
 * (sm_80's runs on 8.6, sm_86's not on 8.0), or PTX of at most its
 * capability (the driver compiles it). */
static inline int rt_cuda_module_runs_on(const rt_cuda_module_info *m, int major, int minor)
{
    int cc = major * 10 + minor;
    for (int32_t k = 0; k < m->n_cubins && k < 8; k++)
        if (m->cubin_sm[k] / 10 == major && m->cubin_sm[k] <= cc)
            return 1;
    return m->ptx_sm > 0 && m->ptx_sm <= cc;
}

#endif
