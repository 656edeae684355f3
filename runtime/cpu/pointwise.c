/* pointwise.c: the CPU kernels of the pointwise ops, each made from its
 * row of ir/pointwise.h (see kernels.h for their signatures).
 *
 * Memory-bound loops (gelu aside, one exponential an element): what
 * matters is that they vectorise (kernel_expf is the vectorisable
 * exponential) and that two threads share them above KERNEL_PAR_MIN
 * elements.  The row's expression is the loop's body, so the numbers are
 * the row's, operation for operation. */
#include "cpu/kernels_internal.h"

#include "../../ir/op_kinds.h"

FU_POINTWISE_FUNCTIONS(static inline, kernel_expf)

/* x, y are (n): y = FWD(x) */
#define FORWARD_1(nm, FWD)                                                                                         \
    void nm##_forward(float *y, const float *px, int64_t n)                                                        \
    {                                                                                                              \
        _Pragma("omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)") for (int64_t i = 0; i < n; i++) \
        {                                                                                                          \
            float x = px[i];                                                                                       \
            y[i] = FWD;                                                                                            \
        }                                                                                                          \
    }
/* dy, x, dx are (n): dx = D0(x, dy) */
#define BACKWARD_1(nm, D0, D1)                                                                                     \
    void nm##_backward(float *dx, const float *pdy, const float *px, int64_t n)                                    \
    {                                                                                                              \
        _Pragma("omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)") for (int64_t i = 0; i < n; i++) \
        {                                                                                                          \
            float x = px[i], dy = pdy[i];                                                                          \
            dx[i] = D0;                                                                                            \
        }                                                                                                          \
    }
/* a, b, c are (n): c = FWD(a, b) */
#define FORWARD_2(nm, FWD)                                                                                         \
    void nm##_forward(float *c, const float *pa, const float *pb, int64_t n)                                       \
    {                                                                                                              \
        _Pragma("omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)") for (int64_t i = 0; i < n; i++) \
        {                                                                                                          \
            float x = pa[i], z = pb[i];                                                                            \
            c[i] = FWD;                                                                                            \
        }                                                                                                          \
    }
/* dy, a, b are (n): da = D0(a, b, dy), db = D1(a, b, dy), each when wanted
 * (a loop each: a gradient not asked for costs nothing) */
#define BACKWARD_2(nm, D0, D1)                                                                                         \
    void nm##_backward(float *da, float *db, const float *pdy, const float *pa, const float *pb, int64_t n)            \
    {                                                                                                                  \
        if (da) {                                                                                                      \
            _Pragma("omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)") for (int64_t i = 0; i < n; i++) \
            {                                                                                                          \
                float x = pa[i], z = pb[i], dy = pdy[i];                                                               \
                (void)x, (void)z;                                                                                      \
                da[i] = D0;                                                                                            \
            }                                                                                                          \
        }                                                                                                              \
        if (db) {                                                                                                      \
            _Pragma("omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)") for (int64_t i = 0; i < n; i++) \
            {                                                                                                          \
                float x = pa[i], z = pb[i], dy = pdy[i];                                                               \
                (void)x, (void)z;                                                                                      \
                db[i] = D1;                                                                                            \
            }                                                                                                          \
        }                                                                                                              \
    }

#define KERNELS(ENUM, nm, arity, f0, f1, has, FWD, D0, D1) \
    FORWARD_##arity(nm, FWD) FU_IF_BACKWARD_##has(BACKWARD_##arity(nm, D0, D1))
FU_POINTWISE_OPS(KERNELS)
#undef KERNELS

#define RUN_1(nm)          nm##_forward(out[0], in[0], n)
#define RUN_2(nm)          nm##_forward(out[0], in[0], in[1], n)
#define RUN_BACKWARD_1(nm) nm##_backward(out[0], in[1], in[0], n)
#define RUN_BACKWARD_2(nm) nm##_backward(out[0], out[1], in[2], in[0], in[1], n)
#define CASES(ENUM, nm, arity, f0, f1, has, ...) \
    case OP_##ENUM:                              \
        RUN_##arity(nm);                         \
        return 0;                                \
        FU_IF_BACKWARD_##has(case OP_##ENUM##_BACKWARD : RUN_BACKWARD_##arity(nm); return 0;)

int pointwise_run(int op, float *const out[2], const float *const in[3], int64_t n)
{
    switch (op) {
        FU_POINTWISE_OPS(CASES)
    default:
        return -1;
    }
}
