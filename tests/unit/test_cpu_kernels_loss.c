/* test_cpu_kernels_loss.c: cross-entropy (mean over rows) against a double
 * log-sum-exp, its backward by finite differences (see test_cpu_kernels.h),
 * stability on large logits, and the refusal of out-of-range targets. */
#include "test_cpu_kernels.h"

typedef struct {
    int64_t N, V;
    int32_t *targets;
    tensor logits;
    double dloss;
} ce_case;

// logits (N,V), targets (N) -> mean_i (logsumexp(logits[i]) - logits[i][t_i])
static double ref_cross_entropy(const double *x, const int32_t *t, int64_t N, int64_t V)
{
    double total = 0;
    for (int64_t i = 0; i < N; i++) {
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < V; j++)
            if (x[i * V + j] > m)
                m = x[i * V + j];
        for (int64_t j = 0; j < V; j++)
            s += exp(x[i * V + j] - m);
        total += m + log(s) - x[i * V + t[i]];
    }
    return total / (double)N;
}

static double ce_objective(void *p)
{
    ce_case *c = p;
    return c->dloss * ref_cross_entropy(c->logits.d, c->targets, c->N, c->V);
}

static ce_case ce_case_new(int64_t N, int64_t V, float spread)
{
    ce_case c = { N, V, calloc((size_t)N, sizeof(int32_t)), tensor_random(N * V, -spread, spread), 0.7 };
    for (int64_t i = 0; i < N; i++)
        c.targets[i] = (int32_t)rng_below(V);
    c.targets[0] = (int32_t)(V - 1);
    return c;
}

static void ce_case_free(ce_case *c)
{
    free(c->targets);
    tensor_free(&c->logits);
}

static void check_cross_entropy(int64_t N, int64_t V, float spread)
{
    ce_case c = ce_case_new(N, V, spread);
    float loss = NAN, dloss = (float)c.dloss;
    CHECK_INT(0, cross_entropy_forward(&loss, c.logits.f, c.targets, N, V, NULL));
    double expect = ref_cross_entropy(c.logits.d, c.targets, N, V);
    CHECK_NEAR(expect, loss, 1e-6 * fabs(expect) + 1e-7);
    float *dlogits = grad_buffer(N * V);
    CHECK_INT(0, cross_entropy_backward(dlogits, &dloss, c.logits.f, c.targets, N, V, NULL));
    check_grad("cross_entropy dlogits", dlogits, c.logits.d, N * V, ce_objective, &c);
    free(dlogits);
    ce_case_free(&c);
}

static void test_cross_entropy_matches_logsumexp_and_finite_differences(void)
{
    rng_seed(61);
    check_cross_entropy(7, 257, 3);
    check_cross_entropy(1, 2, 1);
    check_cross_entropy(13, 10, 4);
}

/* Logits in the hundreds overflow exp() without the max subtracted. */
static void test_cross_entropy_is_stable_for_large_logits(void)
{
    rng_seed(62);
    check_cross_entropy(4, 50, 300);
}

static void test_perturbed_cross_entropy_gradient_is_detected(void)
{
    rng_seed(63);
    ce_case c = ce_case_new(5, 17, 2);
    float dloss = (float)c.dloss, *dlogits = floats_new(5 * 17);
    cross_entropy_backward(dlogits, &dloss, c.logits.f, c.targets, 5, 17, NULL);
    check_perturbed_grad_is_detected(dlogits, c.logits.d, 5 * 17, ce_objective, &c);
    free(dlogits);
    ce_case_free(&c);
}

static void test_cross_entropy_refuses_out_of_range_targets(void)
{
    rng_seed(64);
    ce_case c = ce_case_new(6, 257, 1);
    float loss = 42.0f, one = 1.0f, dlogits[6 * 257];
    for (int i = 0; i < 6 * 257; i++)
        dlogits[i] = 42.0f;
    c.targets[4] = 257;
    int64_t pos = -1;
    CHECK_INT(-1, cross_entropy_forward(&loss, c.logits.f, c.targets, 6, 257, &pos));
    CHECK_INT(4, pos);
    c.targets[2] = -1;
    pos = -1;
    CHECK_INT(-1, cross_entropy_backward(dlogits, &one, c.logits.f, c.targets, 6, 257, &pos));
    CHECK_INT(2, pos);
    CHECK_NEAR(42.0, loss, 0);
    int touched = 0;
    for (int i = 0; i < 6 * 257; i++)
        touched += dlogits[i] != 42.0f;
    CHECK_INT(0, touched);
    ce_case_free(&c);
}

int main(void)
{
    test_cross_entropy_matches_logsumexp_and_finite_differences();
    test_cross_entropy_is_stable_for_large_logits();
    test_perturbed_cross_entropy_gradient_is_detected();
    test_cross_entropy_refuses_out_of_range_targets();
    CHECK_DONE();
}
