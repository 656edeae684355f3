/* test_cpu_kernels_elementwise.c: gelu (tanh form), relu, add and copy
 * against double references, backward by finite differences (see
 * test_cpu_kernels.h). */
#include "test_cpu_kernels.h"
#include "cpu/kernels_internal.h"

typedef struct {
    int64_t n;
    tensor x, r;
    double *y;
    int op; /* 0 gelu, 1 relu */
} unary_case;

static double ref_gelu(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

static double unary_objective(void *p)
{
    unary_case *c = p;
    for (int64_t i = 0; i < c->n; i++)
        c->y[i] = c->op == 0 ? ref_gelu(c->x.d[i]) : (c->x.d[i] > 0 ? c->x.d[i] : 0);
    return dot_f64(c->y, c->r.d, c->n);
}

static unary_case unary_case_new(int64_t n, int op, float spread)
{
    unary_case c = { n, tensor_random(n, -spread, spread), tensor_random(n, -1, 1), doubles_new(n), op };
    return c;
}

static void unary_case_free(unary_case *c)
{
    tensor_free(&c->x);
    tensor_free(&c->r);
    free(c->y);
}

static void test_gelu_matches_tanh_formula_and_finite_differences(void)
{
    rng_seed(41);
    unary_case c = unary_case_new(257, 0, 6);
    float *y = grad_buffer(c.n), *dx = grad_buffer(c.n);
    gelu_forward(y, c.x.f, c.n);
    unary_objective(&c);
    CHECK_FORWARD("gelu", y, c.y, c.n);
    /* torch.nn.functional.gelu(torch.tensor(1.), approximate='tanh') */
    float one = 1.0f, g1;
    gelu_forward(&g1, &one, 1);
    CHECK_NEAR(0.841192, g1, 1e-6);
    gelu_backward(dx, c.r.f, c.x.f, c.n);
    check_grad("gelu dx", dx, c.x.d, c.n, unary_objective, &c);
    free(y);
    free(dx);
    unary_case_free(&c);
}

static void test_relu_matches_reference_and_finite_differences(void)
{
    rng_seed(42);
    unary_case c = unary_case_new(100, 1, 2);
    float *y = grad_buffer(c.n), *dx = grad_buffer(c.n);
    relu_forward(y, c.x.f, c.n);
    unary_objective(&c);
    CHECK_FORWARD("relu", y, c.y, c.n);
    relu_backward(dx, c.r.f, c.x.f, c.n);
    check_grad("relu dx", dx, c.x.d, c.n, unary_objective, &c);
    /* At exactly 0 the gradient is 0, like torch. */
    float z = 0.0f, g = 1.0f, dz = 5.0f;
    relu_backward(&dz, &g, &z, 1);
    CHECK_NEAR(0.0, dz, 0);
    free(y);
    free(dx);
    unary_case_free(&c);
}

static void test_perturbed_gelu_gradient_is_detected(void)
{
    rng_seed(43);
    unary_case c = unary_case_new(50, 0, 3);
    float *dx = floats_new(c.n);
    gelu_backward(dx, c.r.f, c.x.f, c.n);
    check_perturbed_grad_is_detected(dx, c.x.d, c.n, unary_objective, &c);
    free(dx);
    unary_case_free(&c);
}

/* Big enough for the threaded path, and in place (c aliasing a). */
static void test_add_and_copy_are_exact_including_in_place(void)
{
    rng_seed(44);
    int64_t n = 100003;
    float *a = floats_new(n), *b = floats_new(n), *c = floats_new(n), *d = floats_new(n);
    for (int64_t i = 0; i < n; i++) {
        a[i] = rng_uniform(-1, 1);
        b[i] = rng_uniform(-1, 1);
    }
    add_forward(c, a, b, n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += c[i] != a[i] + b[i];
    CHECK_INT(0, bad);
    copy_forward(d, a, n);
    CHECK(memcmp(d, a, (size_t)n * sizeof *a) == 0);
    add_forward(d, d, b, n);
    CHECK(memcmp(d, c, (size_t)n * sizeof *c) == 0);
    free(a);
    free(b);
    free(c);
    free(d);
}

/* The softmaxes, cross-entropy and gelu use kernel_expf, not expf: it must
 * be within 2 ulp over the range it promises, and exact at the ends. */
static void test_kernel_expf_is_within_two_ulp_of_exp(void)
{
    double worst = 0;
    float worst_at = 0;
    for (int64_t i = 0; i <= 2000000; i++) {
        float x = -87.3f + (float)((88.0 + 87.3) * (double)i / 2000000.0);
        double e = exp((double)x), rel = fabs((double)kernel_expf(x) - e) / e;
        if (rel > worst) {
            worst = rel;
            worst_at = x;
        }
    }
    if (!(worst <= 2.4e-7))
        fprintf(stderr, "    kernel_expf: relative error %.3g at %.9g\n", worst, worst_at);
    CHECK(worst <= 2.4e-7); /* 2 ulp = 2·2^-23 at worst */
    CHECK_NEAR(1.0, kernel_expf(0.0f), 0);
    CHECK_NEAR(0.0, kernel_expf(-INFINITY), 0);
    CHECK_NEAR(0.0, kernel_expf(-100.0f), 0);
    CHECK(isinf(kernel_expf(100.0f)));
    CHECK(isnan(kernel_expf(NAN)));
}

/* concat of a (2,3,2) and b (2,1,2) along the middle axis, element by
 * element as torch.cat lays it out, and split back; a NULL part is skipped. */
static void test_concat_and_split_follow_torch_cat_layout(void)
{
    float a[12], b[4], y[16], a2[12], b2[4];
    for (int i = 0; i < 12; i++)
        a[i] = (float)(i + 1); /* a[o][j][k] = 1 + 6o + 2j + k */
    for (int i = 0; i < 4; i++)
        b[i] = (float)(-(i + 1)); /* b[o][0][k] = -(1 + 2o + k)   */
    const float *parts[2] = { a, b };
    int64_t sizes[2] = { 3, 1 };
    concat_forward(y, parts, sizes, 2, 2, 2);
    const float expected[16] = { 1, 2, 3, 4, 5, 6, -1, -2, 7, 8, 9, 10, 11, 12, -3, -4 };
    int same = 1;
    for (int i = 0; i < 16; i++)
        same &= y[i] == expected[i];
    CHECK(same);
    memset(a2, 0, sizeof a2);
    memset(b2, 0, sizeof b2);
    float *back[2] = { a2, b2 };
    split_forward(back, y, sizes, 2, 2, 2);
    CHECK(memcmp(a, a2, sizeof a) == 0 && memcmp(b, b2, sizeof b) == 0);
    float *only_b[2] = { NULL, b2 };
    memset(b2, 0, sizeof b2);
    split_forward(only_b, y, sizes, 2, 2, 2);
    CHECK(memcmp(b, b2, sizeof b) == 0);
}

/* silu against x·sigmoid(x) in double, and mul's two gradients. */
static void test_silu_and_mul_match_their_formulas(void)
{
    enum { N = 1001 };
    static float x[N], y[N], dy[N], dx[N], b[N], da[N], db[N];
    double worst = 0, worst_d = 0;
    for (int i = 0; i < N; i++) {
        x[i] = -30.0f + 60.0f * (float)i / (float)(N - 1);
        dy[i] = 0.5f + (float)(i % 7);
        b[i] = (float)(i % 5) - 2.0f;
    }
    silu_forward(y, x, N);
    silu_backward(dx, dy, x, N);
    for (int i = 0; i < N; i++) {
        double s = 1.0 / (1.0 + exp(-(double)x[i]));
        worst = fmax(worst, fabs(y[i] - x[i] * s) / fmax(1.0, fabs(x[i] * s)));
        worst_d = fmax(worst_d, fabs(dx[i] - dy[i] * s * (1.0 + x[i] * (1.0 - s))) / fmax(1.0, fabs(dy[i])));
    }
    CHECK_NEAR(0.0, worst, 1e-6);
    CHECK_NEAR(0.0, worst_d, 1e-6);
    mul_backward(da, db, dy, x, b, N);
    int same = 1;
    for (int i = 0; i < N; i++)
        same &= da[i] == dy[i] * b[i] && db[i] == dy[i] * x[i];
    CHECK(same);
}

int main(void)
{
    test_concat_and_split_follow_torch_cat_layout();
    test_silu_and_mul_match_their_formulas();
    test_kernel_expf_is_within_two_ulp_of_exp();
    test_gelu_matches_tanh_formula_and_finite_differences();
    test_relu_matches_reference_and_finite_differences();
    test_perturbed_gelu_gradient_is_detected();
    test_add_and_copy_are_exact_including_in_place();
    CHECK_DONE();
}
