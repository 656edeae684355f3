/* dense.c: linear (x·wᵀ + b) and batched matmul, forward and backward.
 *
 * Every f32 product is one cblas_sgemm (or one per batch entry when each
 * entry has its own right-hand matrix), or one cblas_sgemv for a single
 * row (decoding's: sgemm would pack the whole matrix to use it once); a
 * 16-bit weight times a few rows is multiplied here, reading the weight
 * as it is (linear_forward_half_w).  Row-major throughout: an (M,K)
 * matrix has leading dimension K.
 */
#include <string.h>

#include <cblas.h>

#include "cpu/half.h"
#include "cpu/kernels_internal.h"

void kernel_sgemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
                  const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) { /* empty sum: C = beta·C */
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < N; j++)
                C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    if (M == 1 && !trans_a) { /* a row times a matrix (decoding's products): sgemv reads B once, unpacked */
        if (trans_b)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)N, (int)K, alpha, B, (int)ldb, A, 1, beta, C, 1);
        else
            cblas_sgemv(CblasRowMajor, CblasTrans, (int)K, (int)N, alpha, B, (int)ldb, A, 1, beta, C, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* Columns are summed in blocks of COLSUM_BLOCK, each block's sums in a
 * double array on the stack; the blocks are independent, so they are what
 * the threads share out. */
#define COLSUM_BLOCK 64

void kernel_column_sums(float *out, const float *a, int64_t rows, int64_t cols)
{
    int64_t nblocks = (cols + COLSUM_BLOCK - 1) / COLSUM_BLOCK;
#pragma omp parallel for schedule(static) if (rows * cols >= KERNEL_PAR_MIN)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        int64_t j0 = blk * COLSUM_BLOCK;
        int64_t nj = cols - j0 < COLSUM_BLOCK ? cols - j0 : COLSUM_BLOCK;
        double acc[COLSUM_BLOCK] = { 0 };
        for (int64_t i = 0; i < rows; i++) {
            const float *row = a + i * cols + j0;
            for (int64_t j = 0; j < nj; j++)
                acc[j] += row[j];
        }
        for (int64_t j = 0; j < nj; j++)
            out[j0 + j] = (float)acc[j];
    }
}

/* ---- linear ----------------------------------------------------------- */

// y (M,N) = x (M,K)·wᵀ (+ b), w (N,K) 16-bit or f32 (WTYPE); transpose_w:
// w (K,N), y = x·w.  Memory-bound on w: every weight is read once a row
// of x (M is small), on the OpenMP threads (no BLAS pool to hand over to).
// One body a format (WIDEN: bf16_to_f32, fp16_to_f32 or as_is), so that the
// compiler vectorises the widening with the products: 16 partial sums a
// row and column, in lanes, summed at the end; compiled for AVX-512 and
// AVX2 beside the baseline (KERNEL_CLONES), the CPU's best chosen at load.
// clang-format off
#define LINEAR_FEW_ROWS(NAME, WTYPE, WIDEN)                                                                         \
    KERNEL_CLONES static void NAME(float *y, const float *x, const WTYPE *w, const float *b, int64_t M, int64_t K,   \
                                   int64_t N, int transpose_w)                                                       \
    {                                                                                                                \
        enum { L = 16, COLS = 256 };                                                                                 \
        if (!transpose_w) {                                                                                          \
            _Pragma("omp parallel for schedule(static) if (M * N * K >= KERNEL_PAR_MIN)")                            \
            for (int64_t n = 0; n < N; n++) {                                                                        \
                const WTYPE *wr = w + n * K;                                                                         \
                for (int64_t m = 0; m < M; m++) {                                                                    \
                    const float *xr = x + m * K;                                                                     \
                    float part[L] = { 0 };                                                                           \
                    int64_t k = 0;                                                                                   \
                    for (; k + L <= K; k += L)                                                                       \
                        for (int j = 0; j < L; j++)                                                                  \
                            part[j] += xr[k + j] * WIDEN(wr[k + j]);                                                 \
                    float acc = 0.0f;                                                                                \
                    for (; k < K; k++)                                                                               \
                        acc += xr[k] * WIDEN(wr[k]);                                                                 \
                    for (int j = 0; j < L; j++)                                                                      \
                        acc += part[j];                                                                              \
                    y[m * N + n] = acc + (b ? b[n] : 0.0f);                                                          \
                }                                                                                                    \
            }                                                                                                        \
            return;                                                                                                  \
        }                                                                                                            \
        /* w (K,N): a block of COLS columns a task, every k, rows of w read in order. */                             \
        _Pragma("omp parallel for schedule(static) if (M * N * K >= KERNEL_PAR_MIN)")                                \
        for (int64_t n0 = 0; n0 < N; n0 += COLS) {                                                                   \
            int64_t cols = N - n0 < COLS ? N - n0 : COLS;                                                            \
            for (int64_t m = 0; m < M; m++) {                                                                        \
                float acc[COLS];                                                                                     \
                for (int64_t j = 0; j < cols; j++)                                                                   \
                    acc[j] = b ? b[n0 + j] : 0.0f;                                                                   \
                for (int64_t k = 0; k < K; k++) {                                                                    \
                    float xv = x[m * K + k];                                                                         \
                    const WTYPE *wr = w + k * N + n0;                                                                \
                    for (int64_t j = 0; j < cols; j++)                                                               \
                        acc[j] += xv * WIDEN(wr[j]);                                                                 \
                }                                                                                                    \
                memcpy(y + m * N + n0, acc, (size_t)cols * sizeof *acc);                                             \
            }                                                                                                        \
        }                                                                                                            \
    }
// clang-format on
static inline float as_is(float v) { return v; }
LINEAR_FEW_ROWS(linear_bf16_w, uint16_t, bf16_to_f32)
LINEAR_FEW_ROWS(linear_fp16_w, uint16_t, fp16_to_f32)
LINEAR_FEW_ROWS(linear_f32_one_row, float, as_is)

// x is (M,K), w is (N,K) (torch.nn.Linear's layout), or (K,N) when
// transpose_w (GPT-2's Conv1D), b is (N) or NULL, y is (M,N):
// y = x·wᵀ + b (x·w + b), one sgemm; a single row (M = 1) by the few-row
// kernel above, f32 (sgemm would pack all of w to use it once).
void linear_forward(float *y, const float *x, const float *w, const float *b, int64_t M, int64_t K, int64_t N,
                    int transpose_w)
{
    if (M == 1) { /* a decoding step's: each weight read once, on the kernels' own threads */
        linear_f32_one_row(y, x, w, b, M, K, N, transpose_w);
        return;
    }
    if (b) {
#pragma omp parallel for schedule(static) if (M * N >= KERNEL_PAR_MIN)
        for (int64_t i = 0; i < M; i++)
            memcpy(y + i * N, b, (size_t)N * sizeof *b);
    }
    kernel_sgemm(0, !transpose_w, M, N, K, 1.0f, x, K, w, transpose_w ? N : K, b ? 1.0f : 0.0f, y, N);
}

void linear_forward_half_w(float *y, const float *x, const uint16_t *w, const float *b, int64_t M, int64_t K, int64_t N,
                           int transpose_w, int dtype)
{
    (dtype == HALF_DT_BF16 ? linear_bf16_w : linear_fp16_w)(y, x, w, b, M, K, N, transpose_w);
}

// dy is (M,N); dx (M,K) = dy·w ; dw (N,K) = dyᵀ·x ; db (N) = column sums of dy.
// transpose_w: dx = dy·wᵀ ; dw (K,N) = xᵀ·dy.
void linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t M,
                     int64_t K, int64_t N, int transpose_w)
{
    if (dx)
        kernel_sgemm(0, transpose_w, M, K, N, 1.0f, dy, N, w, transpose_w ? N : K, 0.0f, dx, K);
    if (dw && !transpose_w)
        kernel_sgemm(1, 0, N, K, M, 1.0f, dy, N, x, K, 0.0f, dw, K);
    if (dw && transpose_w)
        kernel_sgemm(1, 0, K, N, M, 1.0f, x, K, dy, N, 0.0f, dw, N);
    if (db)
        kernel_column_sums(db, dy, M, N);
}

/* ---- batched matmul --------------------------------------------------- */

// a is (Bt,M,K); b is (Bt,K,N), or (Bt,N,K) when transpose_b, or one such
// matrix when !b_batched; c is (Bt,M,N) = scale · a·op(b).
// A shared b makes the batch one tall product: (Bt·M,K)·op(b).
void matmul_forward(float *c, const float *a, const float *b, int64_t Bt, int64_t M, int64_t K, int64_t N,
                    int transpose_b, int b_batched, float scale)
{
    int64_t ldb = transpose_b ? K : N;
    if (!b_batched) {
        kernel_sgemm(0, transpose_b, Bt * M, N, K, scale, a, K, b, ldb, 0.0f, c, N);
        return;
    }
    for (int64_t i = 0; i < Bt; i++)
        kernel_sgemm(0, transpose_b, M, N, K, scale, a + i * M * K, K, b + i * K * N, ldb, 0.0f, c + i * M * N, N);
}

// dc is (Bt,M,N).
// da (Bt,M,K) = scale · dc·bᵀ, or dc·b when b is stored (N,K).
// db = scale · aᵀ·dc (K,N), or dcᵀ·a (N,K) when transposed; when b is
// shared, the sum over the batch is again one product over Bt·M rows.
void matmul_backward(float *da, float *db, const float *dc, const float *a, const float *b, int64_t Bt, int64_t M,
                     int64_t K, int64_t N, int transpose_b, int b_batched, float scale)
{
    int64_t ldb = transpose_b ? K : N;
    int64_t rows = b_batched ? M : Bt * M; /* rows of one product */
    int64_t count = b_batched ? Bt : 1;    /* products */
    for (int64_t i = 0; i < count; i++) {
        const float *ai = a + i * rows * K, *dci = dc + i * rows * N;
        const float *bi = b + (b_batched ? i * K * N : 0);
        if (da)
            kernel_sgemm(0, !transpose_b, rows, K, N, scale, dci, N, bi, ldb, 0.0f, da + i * rows * K, K);
        if (db && !transpose_b)
            kernel_sgemm(1, 0, K, N, rows, scale, ai, K, dci, N, 0.0f, db + i * K * N, N);
        if (db && transpose_b)
            kernel_sgemm(1, 0, N, K, rows, scale, dci, N, ai, K, 0.0f, db + i * K * N, K);
    }
}
