/* test_compress_rule.c: the time budget of a parameter's partial gradient
 * (passes/compress_rule.c), which the compress pass and the fence pass's
 * cost model share.
 *
 * The tied embedding's gradient (GPT-3 XL's: 103M fp32 values, 412 MB)
 * leaves the last stage once a step, after its last backward, and is due
 * at stage 0's update: only the pipeline's drain hides it, one stage's
 * micro-batch of work per stage between them, not the whole step.
 *   - compress_budget: T* for an activation; hops T* for such a gradient,
 *     at most the step's M T*;
 *   - over a link that carries it in the whole step but not in the drain,
 *     it is compressed, more when fewer stages lie between;
 *   - compress_pays for a once-a-step gradient: encode, transfer and
 *     decode in series, against the dense transfer, both past the budget.
 */
#include <math.h>

#include "check.h"
#include "passes.h"

static void test_budget(void)
{
    CHECK_NEAR(0.02, compress_budget(0.02, 128, 0), 1e-15);     /* each micro-batch: T* */
    CHECK_NEAR(7 * 0.02, compress_budget(0.02, 128, 7), 1e-15); /* seven stages of drain */
    CHECK_NEAR(4 * 0.02, compress_budget(0.02, 4, 7), 1e-15);   /* never past the step */
    CHECK_NEAR(0.02, compress_budget(0.02, 0, 3), 1e-15);       /* no micro-batches given: one */
}

static void test_tied_gradient_over_a_slow_link(void)
{
    const double n = 103e6, bw = 625e6, t_star = 0.022; /* 5 Gbps; a GPT-3 XL stage's micro-batch */
    double codec, dense = 4.0 * n;
    /* The whole step (128 T*, 2.8 s) carries the 0.66 s dense: left dense,
     * as the old M T* budget did. */
    CHECK_NEAR(dense, compress_tensor_bytes(n, 4.0, 2048, bw, t_star, 128, -1.0, 128, &codec), 0.0);
    CHECK_NEAR(0.0, codec, 0.0);
    /* Seven stages of drain (0.15 s) do not: top-k, with the codec's time. */
    double seven = compress_tensor_bytes(n, 4.0, 2048, bw, t_star, 128, -1.0, 7, &codec);
    CHECK(seven < dense / 2);
    CHECK(codec > 0.0);
    /* One stage between: a smaller budget, fewer values kept. */
    double one = compress_tensor_bytes(n, 4.0, 2048, bw, t_star, 128, -1.0, 1, &codec);
    CHECK(one < seven);
}

static void test_once_pays_in_series(void)
{
    const double bw = 1e9, budget = 0.1;
    /* 0.5 s dense, 0.05 s compressed: the codec's 2 x 0.1 s in series
     * still ends before the dense transfer would. */
    CHECK(compress_pays(5e8, 5e7, bw, budget, 0.1, 1));
    /* A codec of 2 x 0.3 s: 0.65 s past nothing against 0.5 s dense: no. */
    CHECK(!compress_pays(5e8, 5e7, bw, budget, 0.3, 1));
    /* The dense transfer fits the budget: nothing to win. */
    CHECK(!compress_pays(5e7, 5e6, bw, budget, 0.001, 1));
}

int main(void)
{
    test_budget();
    test_tied_gradient_over_a_slow_link();
    test_once_pays_in_series();
    CHECK_DONE();
}
