/* kernels_internal.h: what the kernel files share and users do not need.
 *
 * KERNEL_PAR_MIN is the amount of work (elements touched) below which an
 * OpenMP loop costs more to start than it saves; loops use it in an `if`
 * clause. BLAS is never called inside an OpenMP region (see threads.c).
 */
#ifndef FUSION_CPU_KERNELS_INTERNAL_H
#define FUSION_CPU_KERNELS_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cpu/kernels.h"

#define KERNEL_PAR_MIN ((int64_t)1 << 15)

/* A memory-bound loop that the baseline x86-64 (SSE2) runs a quarter as
 * wide: compiled for AVX-512 and AVX2 too, the CPU's best picked when the
 * program loads (an ifunc), so a bundle still runs on any x86-64. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KERNEL_NO_CLONES /* clang's ASan build: one version is enough to check */
#endif
#endif
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(KERNEL_NO_CLONES)
#define KERNEL_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KERNEL_CLONES
#endif

/* Row-major C (M,N) = alpha · op(A) · op(B) + beta · C with leading
 * dimensions given, a thin wrapper over cblas_sgemm that takes int64_t
 * sizes (BLAS takes int; sizes here fit, the compiler checks tensor sizes). */
void kernel_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

/* Column sums of a (rows, cols) row-major matrix, accumulated in double:
 * out[j] = Σ_i a[i][j]. Used for bias gradients. */
void kernel_column_sums(float *out, const float *a, int64_t rows, int64_t cols);

/* Σ x[i] and Σ (x[i] - mean)² in double, vectorised (the simd reduction
 * keeps several partial sums, which is also what makes it accurate). */
static inline double kernel_sum_f64(const float *x, int64_t n)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++)
        s += x[i];
    return s;
}

static inline double kernel_sum_sq_dev_f64(const float *x, int64_t n, double mean)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - mean;
        s += d * d;
    }
    return s;
}

/* e^x for float x, written so that a loop of it vectorises (`#pragma omp
 * simd`): Cephes' range reduction x = n·ln2 + r, |r| <= ln2/2, a degree-7
 * polynomial for e^r, and 2^n put straight into the exponent bits. Within
 * 2 ulp of expf over [-87.3, 88] (test_cpu_kernels_elementwise checks); 0 below
 * -87.3 (where expf goes subnormal, < 1.2e-38), +inf above 88 (expf overflows at
 * 88.72), NaN for NaN. glibc's expf is a function call per element and the
 * same accuracy; this is 2-4x faster in softmax and cross-entropy loops. */
static inline float kernel_expf(float x)
{
    const float shift = 12582912.0f; /* 1.5·2^23: rounds to an integer */
    float xc = x < -87.3f ? -87.3f : x;
    xc = xc > 88.0f ? 88.0f : xc;
    float t = xc * 1.44269504088896341f + shift; /* n + shift, n = round(x/ln2) */
    float n = t - shift;
    float r = xc - n * 0.693359375f; /* ln2 in two parts, exact first */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t tb, sb;
    float scale;
    memcpy(&tb, &t, sizeof tb);           /* low bits of t hold n */
    sb = (tb - 0x4B400000u + 127u) << 23; /* 2^n, n in [-126, 127] */
    memcpy(&scale, &sb, sizeof scale);
    float e = p * scale;
    e = x < -87.3f ? 0.0f : e;
    return x > 88.0f ? INFINITY : e;
}

/* max_j x[j], n >= 1. Sixteen running maxima, one per lane: an element-wise
 * select that both gcc and clang vectorise without -ffast-math (a max
 * *reduction* they would not, for NaN's sake). */
static inline float kernel_max_f32(const float *x, int64_t n)
{
    float lane[16];
    for (int k = 0; k < 16; k++)
        lane[k] = x[0];
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int k = 0; k < 16; k++)
            lane[k] = x[j + k] > lane[k] ? x[j + k] : lane[k];
    float m = x[0];
    for (int k = 0; k < 16; k++)
        m = lane[k] > m ? lane[k] : m;
    for (; j < n; j++)
        m = x[j] > m ? x[j] : m;
    return m;
}

/* y[0..n) = softmax(x[0..n)), n >= 1; y may be x (in place). The row max is
 * subtracted, the sum is in double. */
static inline void kernel_softmax_row(float *y, const float *x, int64_t n)
{
    float m = kernel_max_f32(x, n);
    double sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        float e = kernel_expf(x[j] - m);
        y[j] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
#pragma omp simd
    for (int64_t j = 0; j < n; j++)
        y[j] *= inv;
}

#endif
