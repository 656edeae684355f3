/* elementwise.c: gelu (tanh form), relu, silu, add, mul, copy over n
 * contiguous floats.
 *
 * Memory-bound loops (gelu aside, which is one exponential an element): the
 * questions are only that they vectorise and whether two threads pay, which
 * they do above KERNEL_PAR_MIN elements. The residual add's backward is the
 * identity and has no kernel (see kernels.h).
 */
#include <math.h>
#include <string.h>

#include "cpu/kernels_internal.h"

/* ---- gelu, tanh approximation ----------------------------------------- */

/* Constants as torch's CPU kernel spells them: kBeta = sqrt(2/π). */
#define GELU_BETA  0.7978845608028654f
#define GELU_KAPPA 0.044715f

/* The tanh is computed through 1 + tanh(u) = 2·sigmoid(2u) = 2/(1 + e^-2u),
 * which has no cancellation (1 - 2/(e^2u + 1) would, near u = 0) and takes
 * one vectorised exponential (kernel_expf) instead of a call to tanhf per
 * element. The exponent is clamped at 88 so e stays finite (s = 1/(1+e)
 * then underflows gracefully instead of making inf·0). */
static inline float gelu_exp_minus_2u(float x)
{
    float a = -2.0f * GELU_BETA * (x + GELU_KAPPA * x * x * x);
    return kernel_expf(a > 88.0f ? 88.0f : a);
}

// x, y are (n): y = 0.5·x·(1 + tanh(β·(x + κ·x³))) = x / (1 + e^(-2u))
void gelu_forward(float *y, const float *x, int64_t n)
{
    #pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + gelu_exp_minus_2u(x[i]));
}

// dy, x, dx are (n). With t = tanh(u), u = β·(x + κ·x³):
//   dx = dy · (0.5·(1 + t) + 0.5·x·(1 - t²)·β·(1 + 3κ·x²))
// and with s = sigmoid(2u): 0.5·(1 + t) = s, 0.5·(1 - t²) = 2·s·(1 - s),
// 1 - s = e^(-2u)·s.
void gelu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    #pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float xi = x[i], e = gelu_exp_minus_2u(xi);
        float s = 1.0f / (1.0f + e), oms = e * s;
        float dinner = GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * xi * xi);
        dx[i] = dy[i] * (s + 2.0f * xi * s * oms * dinner);
    }
}

/* ---- relu --------------------------------------------------------------- */

// x, y are (n): y = max(x, 0)
void relu_forward(float *y, const float *x, int64_t n)
{
    #pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// dy, x, dx are (n): dx = dy where x > 0, else 0
void relu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    #pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float g = dy[i];                 /* loaded either way: a select, not a branch */
        dx[i] = x[i] > 0.0f ? g : 0.0f;
    }
}

/* ---- add, copy ----------------------------------------------------------- */

// a, b, c are (n): c = a + b (c may be a or b)
void add_forward(float *c, const float *a, const float *b, int64_t n)
{
    #pragma omp parallel for schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) c[i] = a[i] + b[i];
}

// x, y are (n), not overlapping: y = x
void copy_forward(float *y, const float *x, int64_t n)
{
    if (y != x) memcpy(y, x, (size_t)n * sizeof *x);
}

/* ---- silu, mul (Llama's SwiGLU: silu(gate) · up) ------------------------ */

// x, y are (n): y = x·sigmoid(x) = x / (1 + e^-x)
void silu_forward(float *y, const float *x, int64_t n)
{
    #pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float a = -x[i];
        y[i] = x[i] / (1.0f + kernel_expf(a > 88.0f ? 88.0f : a));
    }
}

// dy, x, dx are (n). With s = sigmoid(x): dx = dy · s · (1 + x·(1 - s))
void silu_backward(float *dx, const float *dy, const float *x, int64_t n)
{
    #pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float a = -x[i], s = 1.0f / (1.0f + kernel_expf(a > 88.0f ? 88.0f : a));
        dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}

// a, b, c are (n): c = a·b (c may be a or b)
void mul_forward(float *c, const float *a, const float *b, int64_t n)
{
    #pragma omp parallel for simd schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) c[i] = a[i] * b[i];
}

// dy, a, b are (n): da = dy·b, db = dy·a (either NULL: not wanted)
void mul_backward(float *da, float *db, const float *dy, const float *a, const float *b, int64_t n)
{
    if (da) mul_forward(da, dy, b, n);
    if (db) mul_forward(db, dy, a, n);
}
