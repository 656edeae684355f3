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

#include "../../runtime/exec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    rt_op   op;
    char    label[64];
    int64_t arena_bytes;
    int32_t int_range[RT_MAX_IN];   /* > 0: input i is int32 ids in [0, range) */
    int     in_place;               /* adamw: inputs 0..3 are its results      */
} cuda_case;

/* The cases, in a fixed order; free() the array. */
int cuda_cases_build(cuda_case **out);

/* A chain of ops on one arena, for the fusion of elementwise kernels
 * (codegen/cuda_elementwise.c): added to a plan with fuse = 1, its steps
 * must number `steps` and compute what the ops compute one by one. */
typedef struct {
    rt_op   ops[4];
    int     n_ops;
    char    label[96];
    int64_t arena_bytes;
    int     steps;                  /* fused, as the fusion rules allow */
} cuda_chain;

/* The chains, in a fixed order; free() the array. */
int cuda_chains_build(cuda_chain **out);

#ifdef __cplusplus
}
#endif

#endif
