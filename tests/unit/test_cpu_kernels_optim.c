/* test_cpu_kernels_optim.c: AdamW against the update computed by hand in
 * double, the gradient-norm halves (sum of squares, scale), and the thread
 * setting. */
#include <omp.h>

#include <cblas.h>

#include "test_cpu_kernels.h"

/* torch.optim.AdamW, one step, in double. */
static void ref_adamw(double *p, const double *g, double *m, double *v, int64_t n, double lr, double b1, double b2,
                      double eps, double wd, int64_t t)
{
    double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
    for (int64_t i = 0; i < n; i++) {
        p[i] *= 1 - lr * wd;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
        p[i] -= lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + eps);
    }
}

/* Each step's change of every parameter within 1e-4 of the reference's
 * change (relative to the largest change), and the parameter itself within
 * float resolution. */
static int adamw_matches(const float *p, const float *p_before, const double *ref, const double *ref_before, int64_t n)
{
    double scale = 0;
    for (int64_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(ref[i] - ref_before[i]));
    for (int64_t i = 0; i < n; i++) {
        double step = (double)p[i] - p_before[i], ref_step = ref[i] - ref_before[i];
        if (!(fabs(step - ref_step) <= 1e-4 * scale + 2e-7 * fabs(ref[i])))
            return 0;
        if (!(fabs(p[i] - ref[i]) <= 1e-6 * fabs(ref[i]) + 1e-7))
            return 0;
    }
    return 1;
}

static void test_adamw_three_steps_match_hand_computed_reference(void)
{
    rng_seed(71);
    int64_t n = 1000;
    double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    float *p = floats_new(n), *g = floats_new(n), *m = floats_new(n), *v = floats_new(n);
    float *before = floats_new(n);
    double *pd = doubles_new(n), *gd = doubles_new(n), *md = doubles_new(n), *vd = doubles_new(n);
    double *before_d = doubles_new(n);
    for (int64_t i = 0; i < n; i++) {
        p[i] = rng_uniform(-1, 1);
        pd[i] = p[i];
    }
    for (int64_t t = 1; t <= 3; t++) {
        for (int64_t i = 0; i < n; i++) {
            g[i] = rng_uniform(-2, 2);
            gd[i] = g[i];
        }
        memcpy(before, p, (size_t)n * sizeof *p);
        memcpy(before_d, pd, (size_t)n * sizeof *pd);
        adamw_update(p, g, m, v, n, lr, b1, b2, eps, wd, t);
        ref_adamw(pd, gd, md, vd, n, lr, b1, b2, eps, wd, t);
        CHECK(adamw_matches(p, before, pd, before_d, n));
        if (t == 1) {
            /* Step 1: m̂ = g, v̂ = g², so p moves by -lr·g/(|g| + eps) after decay. */
            double expect = before[0] * (1 - lr * wd) - lr * g[0] / (fabs(g[0]) + eps);
            CHECK_NEAR(expect, p[0], 1e-6);
        }
        /* The comparison can fail: one parameter off by 10% of its step. */
        float keep = p[7];
        p[7] += 0.1f * (p[7] - before[7]);
        CHECK(!adamw_matches(p, before, pd, before_d, n));
        p[7] = keep;
    }
    for (int64_t i = 0; i < n; i++) {
        CHECK_NEAR(md[i], m[i], 1e-6);
        CHECK_NEAR(vd[i], v[i], 1e-6);
    }
    free(p);
    free(g);
    free(m);
    free(v);
    free(before);
    free(pd);
    free(gd);
    free(md);
    free(vd);
    free(before_d);
}

static void test_grad_sum_squares_and_scale_give_the_clipped_norm(void)
{
    rng_seed(72);
    int64_t n = 100003;
    float *g = floats_new(n);
    double expect = 0;
    for (int64_t i = 0; i < n; i++) {
        g[i] = rng_uniform(-1, 1);
        expect += (double)g[i] * g[i];
    }
    double ss = grad_sum_squares(g, n);
    CHECK_NEAR(expect, ss, 1e-12 * expect);
    /* clip to norm 1: scale by 1/(norm + 1e-6) */
    float s = (float)(1.0 / (sqrt(ss) + 1e-6));
    grad_scale(g, n, s);
    CHECK_NEAR(1.0, sqrt(grad_sum_squares(g, n)), 1e-5);
    CHECK_NEAR(0.0, grad_sum_squares(g, 0), 0);
    free(g);
}

static void test_kernel_threads_set_sets_openmp_and_openblas(void)
{
    kernel_threads_set(1);
    CHECK_INT(1, kernel_threads_get());
    CHECK_INT(1, omp_get_max_threads());
    CHECK_INT(1, openblas_get_num_threads());
    /* Results do not depend on the thread count for a row-parallel kernel. */
    rng_seed(73);
    int64_t N = 512, C = 96;
    float *x = floats_new(N * C), *y1 = floats_new(N * C), *y2 = floats_new(N * C);
    for (int64_t i = 0; i < N * C; i++)
        x[i] = rng_uniform(-1, 1);
    layernorm_forward(y1, x, NULL, NULL, N, C, 1e-5f);
    kernel_threads_set(2);
    CHECK_INT(2, kernel_threads_get());
    CHECK_INT(2, omp_get_max_threads());
    CHECK_INT(2, openblas_get_num_threads());
    layernorm_forward(y2, x, NULL, NULL, N, C, 1e-5f);
    CHECK(memcmp(y1, y2, (size_t)(N * C) * sizeof *y1) == 0);
    kernel_threads_set(0); /* clamped to 1 */
    CHECK_INT(1, kernel_threads_get());
    free(x);
    free(y1);
    free(y2);
}

int main(void)
{
    test_adamw_three_steps_match_hand_computed_reference();
    test_grad_sum_squares_and_scale_give_the_clipped_norm();
    test_kernel_threads_set_sets_openmp_and_openblas();
    CHECK_DONE();
}
