/* cuda_emu.h: just enough CUDA to run the generated kernels on the CPU, as
 * C++ (the emulation harness, test_cuda_emulation.cpp).
 *
 * A launch runs every block of the grid in order; the block's threads are
 * fibers (cuda_emu.cpp) that run in turn up to each __syncthreads, so a
 * kernel that forgets a barrier and reads shared memory another thread has
 * not written yet reads the wrong value here too, and a divergent barrier
 * stops the run.  __shared__ arrays are function statics (blocks run one
 * after another, so one copy serves them all); the dynamic shared memory is
 * a buffer of the launch's size, filled with a pattern, not zeros.  The generated
 * source is compiled unchanged: its prelude leaves FUSION_SHARED,
 * FUSION_DYN_SHARED and FUSION_INF to this header when FUSION_EMULATION is
 * defined.
 *
 * The 16-bit storage types are the CUDA headers' names with the four
 * conversions the kernels use (the prelude reads and writes through them
 * only), done by runtime/cpu/half.h: round to nearest even, as
 * __float2bfloat16_rn and __float2half_rn do on the GPU.
 *
 * What it is not: a GPU.  Warp-level behaviour (shuffles, divergence,
 * memory ordering between blocks) is not modelled; the generated kernels use
 * none of it.
 */
#ifndef FUSION_CUDA_EMU_H
#define FUSION_CUDA_EMU_H

#include <math.h>
#include <stddef.h>

#include <limits>

#include "../../runtime/cpu/half.h"

#define FUSION_EMULATION 1

struct dim3 {
    unsigned x, y, z;
};
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

void __syncthreads();
void *cuda_emu_dyn_shared();
unsigned long long atomicMin(unsigned long long *address, unsigned long long value);

#define __global__
#define __device__ static inline
#define __launch_bounds__(n)
#define FUSION_SHARED(type, name, count) static type name[count]
#define FUSION_DYN_SHARED(type, name)    type *name = (type *)cuda_emu_dyn_shared()
#define FUSION_INF                       (std::numeric_limits<float>::infinity())
#define FUSION_NAN                       (std::numeric_limits<float>::quiet_NaN())

/* cuda_bf16.h's and cuda_fp16.h's types, as the prelude uses them: bits, no arithmetic. */
struct __nv_bfloat16 {
    bf16_t bits;
};
struct __half {
    fp16_t bits;
};
static inline float __bfloat162float(__nv_bfloat16 h) { return bf16_to_f32(h.bits); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{ f32_to_bf16(f) }; }
static inline float __half2float(__half h) { return fp16_to_f32(h.bits); }
static inline __half __float2half_rn(float f) { return __half{ f32_to_fp16(f) }; }

/* The generated table: each kernel's name and a thunk that calls it with
 * the fusion_args at args. */
typedef struct {
    const char *name;
    void (*run)(const void *args);
} cuda_emu_kernel;

/* Run kernel k on grid x block threads with shared_bytes of dynamic shared
 * memory; args points at the kernel's fusion_args. */
void cuda_emu_launch(const cuda_emu_kernel *k, dim3 grid, dim3 block, size_t shared_bytes, const void *args);

#endif
