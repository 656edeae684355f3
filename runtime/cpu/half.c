/* half.c: the array conversions of half.h.  Memory-bound loops written so
 * that gcc and clang vectorise them (the scalar forms are branch-free for
 * bf16; fp16's are not, and run at about a third of bf16's speed). */
#include "cpu/half.h"

#include "cpu/kernels_internal.h"

void half_to_f32(float *to, const void *from, int64_t n, int dtype)
{
    if (dtype == HALF_DT_BF16) {
        const bf16_t *h = from;
#pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            to[i] = bf16_to_f32(h[i]);
    } else {
        const fp16_t *h = from;
#pragma omp parallel for schedule(static) if (n >= KERNEL_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            to[i] = fp16_to_f32(h[i]);
    }
}

void half_from_f32(void *to, const float *from, int64_t n, int dtype)
{
    if (dtype == HALF_DT_BF16) {
        bf16_t *h = to;
#pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            h[i] = f32_to_bf16(from[i]);
    } else {
        fp16_t *h = to;
#pragma omp parallel for schedule(static) if (n >= KERNEL_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            h[i] = f32_to_fp16(from[i]);
    }
}

void half_round_f32(float *x, int64_t n, int dtype)
{
    if (dtype == HALF_DT_BF16) {
#pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    } else {
#pragma omp parallel for schedule(static) if (n >= KERNEL_PAR_MIN)
        for (int64_t i = 0; i < n; i++)
            x[i] = fp16_to_f32(f32_to_fp16(x[i]));
    }
}
