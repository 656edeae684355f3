/* test_cpu_kernels_norm.c: layernorm, batchnorm (training and inference) against
 * double references (forward), finite differences of them (backward), and
 * torch's running-statistics rule; see test_cpu_kernels.h. */
#include "test_cpu_kernels.h"

/* ---- layernorm ---------------------------------------------------------- */

// x (N,C), w, b (C) or NULL -> y (N,C)
static void ref_layernorm(double *y, const double *x, const double *w, const double *b, int64_t N, int64_t C,
                          double eps)
{
    for (int64_t i = 0; i < N; i++) {
        double m = 0, v = 0;
        for (int64_t j = 0; j < C; j++)
            m += x[i * C + j];
        m /= C;
        for (int64_t j = 0; j < C; j++)
            v += (x[i * C + j] - m) * (x[i * C + j] - m);
        v /= C;
        for (int64_t j = 0; j < C; j++)
            y[i * C + j] = (x[i * C + j] - m) / sqrt(v + eps) * (w ? w[j] : 1) + (b ? b[j] : 0);
    }
}

typedef struct {
    int64_t N, C;
    int affine;
    float eps;
    tensor x, w, b, r;
    double *y;
} norm_case;

static norm_case norm_case_new(int64_t rows, int64_t C, int64_t HW, int affine, float eps)
{
    norm_case c = { rows,
                    C,
                    affine,
                    eps,
                    tensor_random(rows * C * HW, -2, 2),
                    tensor_random(C, 0.5f, 1.5f),
                    tensor_random(C, -1, 1),
                    tensor_random(rows * C * HW, -1, 1),
                    doubles_new(rows * C * HW) };
    return c;
}

static void norm_case_free(norm_case *c)
{
    tensor_free(&c->x);
    tensor_free(&c->w);
    tensor_free(&c->b);
    tensor_free(&c->r);
    free(c->y);
}

static double layernorm_objective(void *p)
{
    norm_case *c = p;
    ref_layernorm(c->y, c->x.d, c->affine ? c->w.d : NULL, c->affine ? c->b.d : NULL, c->N, c->C, c->eps);
    return dot_f64(c->y, c->r.d, c->N * c->C);
}

static void check_layernorm(int64_t N, int64_t C, int affine)
{
    norm_case c = norm_case_new(N, C, 1, affine, 1e-5f);
    const float *w = affine ? c.w.f : NULL, *b = affine ? c.b.f : NULL;
    float *y = grad_buffer(N * C);
    layernorm_forward(y, c.x.f, w, b, N, C, c.eps);
    layernorm_objective(&c);
    CHECK_FORWARD("layernorm", y, c.y, N * C);

    float *dx = grad_buffer(N * C), *dw = grad_buffer(C), *db = grad_buffer(C);
    layernorm_backward(dx, dw, db, c.r.f, c.x.f, w, N, C, c.eps);
    check_grad("layernorm dx", dx, c.x.d, N * C, layernorm_objective, &c);
    if (affine) {
        check_grad("layernorm dw", dw, c.w.d, C, layernorm_objective, &c);
        check_grad("layernorm db", db, c.b.d, C, layernorm_objective, &c);
    }
    float *dw2 = grad_buffer(C);
    layernorm_backward(NULL, dw2, NULL, c.r.f, c.x.f, w, N, C, c.eps);
    CHECK(memcmp(dw, dw2, (size_t)C * sizeof *dw) == 0);
    free(y);
    free(dx);
    free(dw);
    free(db);
    free(dw2);
    norm_case_free(&c);
}

static void test_layernorm_matches_reference_and_finite_differences(void)
{
    rng_seed(11);
    check_layernorm(7, 12, 1);
    check_layernorm(3, 36, 0);
    check_layernorm(1, 1, 1);
    check_layernorm(300, 20, 1); /* more rows than one chunk of the backward */
}

/* Rows with a large common offset: a one-pass E[x²]-E[x]² variance in float
 * would lose every digit here; the two-pass double one does not. */
static void test_layernorm_is_stable_for_large_offsets(void)
{
    rng_seed(12);
    int64_t N = 4, C = 768;
    norm_case c = norm_case_new(N, C, 1, 1, 1e-5f);
    for (int64_t i = 0; i < N * C; i++) {
        c.x.f[i] += 1000.0f;
        c.x.d[i] = c.x.f[i];
    }
    float *y = floats_new(N * C);
    layernorm_forward(y, c.x.f, c.w.f, c.b.f, N, C, c.eps);
    layernorm_objective(&c);
    /* The float input has ~6e-5 resolution at 1000, so xhat is exact to ~1e-4. */
    CHECK_NEAR(0.0, rel_error(y, c.y, N * C), 1e-4);
    free(y);
    norm_case_free(&c);
}

/* ---- batchnorm ----------------------------------------------------------- */

// x (N,C,HW), w, b (C) -> y (N,C,HW); biased variance per channel
static void ref_batchnorm(double *y, const double *x, const double *w, const double *b, int64_t N, int64_t C,
                          int64_t HW, double eps, double *mean_out, double *var_out)
{
    for (int64_t c = 0; c < C; c++) {
        double m = 0, v = 0, cnt = (double)(N * HW);
        for (int64_t n = 0; n < N; n++)
            for (int64_t p = 0; p < HW; p++)
                m += x[(n * C + c) * HW + p];
        m /= cnt;
        for (int64_t n = 0; n < N; n++)
            for (int64_t p = 0; p < HW; p++) {
                double d = x[(n * C + c) * HW + p] - m;
                v += d * d;
            }
        v /= cnt;
        if (mean_out) {
            mean_out[c] = m;
            var_out[c] = v;
        }
        for (int64_t n = 0; n < N; n++)
            for (int64_t p = 0; p < HW; p++) {
                int64_t i = (n * C + c) * HW + p;
                y[i] = (x[i] - m) / sqrt(v + eps) * (w ? w[c] : 1) + (b ? b[c] : 0);
            }
    }
}

typedef struct {
    norm_case nc;
    int64_t HW;
} bn_case;

static double batchnorm_objective(void *p)
{
    bn_case *c = p;
    norm_case *n = &c->nc;
    ref_batchnorm(n->y, n->x.d, n->affine ? n->w.d : NULL, n->affine ? n->b.d : NULL, n->N, n->C, c->HW, n->eps, NULL,
                  NULL);
    return dot_f64(n->y, n->r.d, n->N * n->C * c->HW);
}

static void check_batchnorm(int64_t N, int64_t C, int64_t HW, int affine)
{
    bn_case c = { norm_case_new(N, C, HW, affine, 1e-5f), HW };
    norm_case *n = &c.nc;
    int64_t len = N * C * HW;
    const float *w = affine ? n->w.f : NULL, *b = affine ? n->b.f : NULL;
    float *y = grad_buffer(len);
    batchnorm_forward(y, n->x.f, w, b, NULL, NULL, N, C, HW, n->eps, 0.1f);
    batchnorm_objective(&c);
    CHECK_FORWARD("batchnorm", y, n->y, len);

    float *dx = grad_buffer(len), *dw = grad_buffer(C), *db = grad_buffer(C);
    batchnorm_backward(dx, dw, db, n->r.f, n->x.f, w, N, C, HW, n->eps);
    check_grad("batchnorm dx", dx, n->x.d, len, batchnorm_objective, &c);
    if (affine) {
        check_grad("batchnorm dw", dw, n->w.d, C, batchnorm_objective, &c);
        check_grad("batchnorm db", db, n->b.d, C, batchnorm_objective, &c);
    }
    free(y);
    free(dx);
    free(dw);
    free(db);
    norm_case_free(n);
}

static void test_batchnorm_matches_reference_and_finite_differences(void)
{
    rng_seed(13);
    check_batchnorm(3, 4, 15, 1); /* (N,C,H,W) with H,W = 3,5 */
    check_batchnorm(2, 3, 49, 0); /* 7x7, no affine */
    check_batchnorm(6, 5, 1, 1);  /* (N,C) */
}

/* torch: running = (1-momentum)·running + momentum·batch stat, the variance
 * unbiased (·M/(M-1)). */
static void test_batchnorm_updates_running_statistics_like_torch(void)
{
    rng_seed(14);
    int64_t N = 2, C = 3, HW = 9;
    norm_case c = norm_case_new(N, C, HW, 1, 1e-5f);
    float rm[3] = { 0.5f, -1.0f, 0.0f }, rv[3] = { 1.0f, 2.0f, 0.25f };
    double mean[3], var[3];
    float *y = floats_new(N * C * HW);
    ref_batchnorm(c.y, c.x.d, c.w.d, c.b.d, N, C, HW, c.eps, mean, var);
    double expect_m[3], expect_v[3];
    for (int i = 0; i < 3; i++) {
        expect_m[i] = 0.9 * rm[i] + 0.1 * mean[i];
        expect_v[i] = 0.9 * rv[i] + 0.1 * var[i] * (N * HW) / (N * HW - 1.0);
    }
    batchnorm_forward(y, c.x.f, c.w.f, c.b.f, rm, rv, N, C, HW, c.eps, 0.1f);
    for (int i = 0; i < 3; i++) {
        CHECK_NEAR(expect_m[i], rm[i], 1e-6);
        CHECK_NEAR(expect_v[i], rv[i], 1e-6);
    }
    free(y);
    norm_case_free(&c);
}

/* Inference (validation): each channel by its running statistics, in
 * double: y = (x - rm) / sqrt(rv + eps) · w + b; a channel's y does not
 * depend on the batch (its first row alone gives the same). */
static void test_batchnorm_inference_uses_running_statistics(void)
{
    rng_seed(16);
    int64_t N = 3, C = 3, HW = 5, len = N * C * HW;
    norm_case c = norm_case_new(N, C, HW, 1, 1e-5f);
    const float rm[3] = { 0.5f, -1.0f, 0.0f }, rv[3] = { 1.0f, 2.0f, 0.25f };
    float *y = floats_new(len), *first = floats_new(C * HW);
    batchnorm_inference(y, c.x.f, c.w.f, c.b.f, rm, rv, N, C, HW, c.eps);
    for (int64_t i = 0; i < len; i++) {
        int64_t ch = i / HW % C;
        double want = (c.x.d[i] - rm[ch]) / sqrt((double)rv[ch] + c.eps) * c.w.d[ch] + c.b.d[ch];
        CHECK_NEAR(want, y[i], 1e-5 * (1.0 + fabs(want)));
    }
    batchnorm_inference(first, c.x.f, c.w.f, c.b.f, rm, rv, 1, C, HW, c.eps);
    for (int64_t i = 0; i < C * HW; i++)
        CHECK(first[i] == y[i]);
    batchnorm_inference(y, c.x.f, NULL, NULL, rm, rv, N, C, HW, c.eps); /* no affine */
    CHECK_NEAR((c.x.d[HW] - rm[1]) / sqrt((double)rv[1] + c.eps), y[HW], 1e-5);
    free(y);
    free(first);
    norm_case_free(&c);
}

static void test_perturbed_layernorm_gradient_is_detected(void)
{
    rng_seed(15);
    norm_case c = norm_case_new(5, 12, 1, 1, 1e-5f);
    float *dx = floats_new(5 * 12);
    layernorm_backward(dx, NULL, NULL, c.r.f, c.x.f, c.w.f, 5, 12, c.eps);
    check_perturbed_grad_is_detected(dx, c.x.d, 5 * 12, layernorm_objective, &c);
    free(dx);
    norm_case_free(&c);
}

int main(void)
{
    test_layernorm_matches_reference_and_finite_differences();
    test_layernorm_is_stable_for_large_offsets();
    test_batchnorm_matches_reference_and_finite_differences();
    test_batchnorm_updates_running_statistics_like_torch();
    test_batchnorm_inference_uses_running_statistics();
    test_perturbed_layernorm_gradient_is_detected();
    CHECK_DONE();
}
