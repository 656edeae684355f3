/* optim.c: the SGD and AdamW updates and the two halves of global gradient-norm
 * clipping (sum of squares, scale).
 *
 * adamw_update follows torch.optim.AdamW's single-tensor path operation by
 * operation, so that a run here and a run in torch stay together: scalars
 * are computed in double (torch's Python floats), rounded to float once, and
 * the element-wise arithmetic is float in torch's order:
 *   p  = p · (1 - lr·wd)
 *   m  = lerp(m, g, 1-β1)          m + (1-β1)·(g - m)
 *   v  = v·β2 + (1-β2)·g·g
 *   p  = p + (-lr/bc1)·m / (sqrt(v)/sqrt(bc2) + eps),  bc = 1 - β^t
 */
#include <math.h>

#include "cpu/kernels_internal.h"

// param, grad, m, v are (n); t >= 1 is the step number.
void adamw_update(float *param, const float *grad, float *m, float *v, int64_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t t)
{
    double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    float decay = (float)(1.0 - lr * weight_decay);
    float w1 = (float)(1.0 - beta1); /* lerp weight */
    float b2 = (float)beta2, w2 = (float)(1.0 - beta2);
    float step = (float)(-(lr / bc1));
    float bc2_sqrt = (float)sqrt(bc2), epsf = (float)eps;
#pragma omp parallel for schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i], p = param[i] * decay;
        /* torch's lerp: a + w·(b - a) for w < 0.5, else b - (b - a)·(1 - w) */
        float mi = w1 < 0.5f ? m[i] + w1 * (g - m[i]) : g - (g - m[i]) * (1.0f - w1);
        float vi = v[i] * b2 + w2 * g * g;
        float denom = sqrtf(vi) / bc2_sqrt + epsf;
        param[i] = p + step * mi / denom;
        m[i] = mi;
        v[i] = vi;
    }
}

void sgd_update(float *param, const float *grad, int64_t n, double lr, double weight_decay)
{
    float step = (float)-lr, wd = (float)weight_decay;
#pragma omp parallel for schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float d = wd != 0.0f ? grad[i] + wd * param[i] : grad[i];
        param[i] = param[i] + step * d;
    }
}

// g is (n): Σ g², in double; blocks of SUMSQ_BLOCK for the threads, each
// summed with a vectorised reduction.
#define SUMSQ_BLOCK 16384

double grad_sum_squares(const float *g, int64_t n)
{
    double total = 0;
    int64_t nblocks = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
#pragma omp parallel for schedule(static) reduction(+ : total) if (n >= KERNEL_PAR_MIN)
    for (int64_t blk = 0; blk < nblocks; blk++) {
        const float *x = g + blk * SUMSQ_BLOCK;
        int64_t len = n - blk * SUMSQ_BLOCK < SUMSQ_BLOCK ? n - blk * SUMSQ_BLOCK : SUMSQ_BLOCK;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < len; i++)
            s += (double)x[i] * x[i];
        total += s;
    }
    return total;
}

// g is (n): g *= s
void grad_scale(float *g, int64_t n, float s)
{
#pragma omp parallel for schedule(static) if (n >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < n; i++)
        g[i] *= s;
}
