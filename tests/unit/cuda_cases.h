/* cuda_cases.h: the op instances the CUDA emulation harness checks, shared
 * by the generator that writes their kernels as C++ (cuda_emu_gen.c, at
 * build time) and the harness that runs them (test_cuda_emulation.cpp).
 *
 * Every op with a CUDA kernel appears, forward and backward, at sizes that
 * are not multiples of the 256-thread block (odd row lengths, rows longer
 * than one block, partial last blocks).  Each case is an rt_op placed in an
 * arena of its own. */
#ifndef FUSION_CUDA_CASES_H
#define FUSION_CUDA_CASES_H

#include <stdint.h>

#include "../../codegen/cuda_kernels.h"
#include "../../runtime/exec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    rt_op op;
    char label[80];
    int64_t arena_bytes;
    int32_t int_range[RT_MAX_IN]; /* > 0: input i is int32 ids in [0, range) */
    uint32_t updated_in;          /* bit i: input i is updated in place, a result too
                                     (adamw's 0..3, batchnorm's running statistics) */
    int32_t stats_mode;           /* what the run does with batchnorm's running
                                     statistics (stats_mode.h's rt_stats_mode)        */
    /* Precision.  Each case is there in f32, then (unless all its float
     * tensors stay f32) again in bf16 and in fp16: its activations and
     * their gradients in 16 bits, what a graph keeps in f32 in every
     * precision (parameters, their gradients, the loss, the seed: the
     * bits below) in f32, as the precision pass types them. */
    int32_t precision;        /* DT_F32, DT_BF16 or DT_F16               */
    uint32_t f32_in, f32_out; /* bit i: input / output i stays f32       */
    double tol16;             /* a 16-bit output may differ from the CPU's by
                                       tol16 x the format's unit roundoff (2^-8 bf16,
                                       2^-11 fp16) x its largest magnitude (cuda_cases.c) */
    int loss_scaled;          /* run with a loss scale (fill, clip_scale)  */
} cuda_case;

/* The cases, in a fixed order; free() the array. */
int cuda_cases_build(cuda_case **out);

/* A chain of ops on one arena, for the fusion of elementwise kernels
 * (codegen/cuda_elementwise.c): added to a plan with fuse = 1, its steps
 * must number `steps` and compute what the ops compute one by one. */
typedef struct {
    rt_op ops[4];
    int n_ops;
    char label[96];
    int64_t arena_bytes;
    int steps;         /* fused, as the fusion rules allow */
    int32_t precision; /* of the activations (the weights stay f32) */
} cuda_chain;

/* The chains, in a fixed order; free() the array. */
int cuda_chains_build(cuda_chain **out);

/* The harness's one plan (codegen/cuda_kernels.h): every case one by one,
 * then every chain with fusion on, chain j as group 1000 + j; chain j's
 * ops start at plan->n_ops = first_op[j] (first_op: room for the chains,
 * or NULL).  cuda_emu_gen compiles it for the CPU, test_cuda_emulation
 * runs it, test_cuda_kernels_nvrtc hands it to NVRTC.  *cases and *chains
 * are the caller's to free().  0, or -1 with why (the case or chain). */
int cuda_cases_plan(cuda_plan *plan, cuda_case **cases, int *n_cases, cuda_chain **chains, int *n_chains,
                    int **first_op, char *why, size_t size);

#ifdef __cplusplus
}
#endif

#endif
