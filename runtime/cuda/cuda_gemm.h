/* cuda_gemm.h: a GEMM step (row-major, as the CPU kernels and the plan
 * write products) as cuBLAS's column-major call: the row-major idiom.
 *
 * A row-major (M,N) matrix C with leading dimension ldc is, read
 * column-major, Cᵀ (N,M) with the same leading dimension.  So
 *     C = op(A)·op(B)    (row-major)
 * is  Cᵀ = op(B)ᵀ·op(A)ᵀ (column-major)
 * which is cublasSgemm(opB, opA, N, M, K, B, ldb, A, lda, C, ldc): the
 * operands swap places and the transposes stay with their operands (and
 * their types: cublasGemmEx's Atype is the step's B's dtype).  The
 * backend (cuda.c) and the emulation harness's reference cuBLAS
 * (tests/unit/test_cuda_emulation.cpp) both call this, so the harness
 * checks the very conversion the backend makes.
 */
#ifndef FUSION_RT_CUDA_GEMM_H
#define FUSION_RT_CUDA_GEMM_H

#include "cuda_program.h"

typedef struct {
    int trans_a, trans_b; /* cuBLAS's opA, opB (1: transposed)             */
    int64_t m, n, k;
    int a_arg, b_arg; /* which of step->arg[] is cuBLAS's A and B      */
    int64_t lda, ldb, ldc;
    int64_t stride_a, stride_b, stride_c, batch;
    float alpha, beta;
} rt_cuda_colmajor_gemm;

static inline rt_cuda_colmajor_gemm rt_cuda_gemm_colmajor(const rt_cuda_step *s)
{
    rt_cuda_colmajor_gemm g;
    g.trans_a = s->trans_b;
    g.trans_b = s->trans_a;
    g.m = s->n;
    g.n = s->m;
    g.k = s->k;
    g.a_arg = 1; /* cuBLAS's A is the step's B */
    g.b_arg = 0;
    g.lda = s->ldb;
    g.ldb = s->lda;
    g.ldc = s->ldc;
    g.stride_a = s->stride_b;
    g.stride_b = s->stride_a;
    g.stride_c = s->stride_c;
    g.batch = s->batch;
    g.alpha = s->alpha;
    g.beta = s->beta;
    return g;
}

#endif
