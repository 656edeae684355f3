/* test_autodiff_matches_finite_differences: run compiled models (the
 * autodiff pass's backward ops on the CPU kernels) and compare every
 * parameter's gradient with central differences of the loss.
 *
 * For each param tensor P, a random direction u (±1 on P's elements) gives
 * the analytic directional derivative Σ grad.P·u, and the loss gives
 * (L(P + εu) - L(P - εu)) / 2ε.  Models: an MLP, a small GPT (whole
 * attention and attention from parts, T not a power of two, C = 12, vocab
 * 17, 1 and 3 heads), and a two-block residual network with every part of
 * ResNet (tests/models/small_resnet.xml; batch-norm in training mode).
 * Then one AdamW step is checked against the update rule written out. */
#include <stdio.h>
#include <stdlib.h>

#include "../../frontend/model.h"
#include "../../passes/passes.h"
#include "check.h"
#include "graph_runner.h"

static double loss_of(graph_runner *r)
{
    if (runner_run(r, RUN_FORWARD, 1))
        return NAN;
    return *runner_value(r, ir_value_name(r->g, r->g->loss));
}

/* Returns the number of param tensors checked.  `spread` elements of each
 * tensor are perturbed (all when spread is 0): a few suffice, and fewer
 * keep ReLU and max-pool kinks out of the step. */
static int check_model(const char *file, const model_setting *sets, int n_sets, int32_t int_limit, double eps,
                       double rel_tol, int64_t spread)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", getenv("FUSION_SOURCE_DIR") ? getenv("FUSION_SOURCE_DIR") : ".", file);
    ir_graph g;
    struct diag err = { 0 };
    if (model_load(path, sets, n_sets, &g, &err) || pass_run_pipeline(&g, NULL, &err)) {
        fprintf(stderr, "  %s:%d: %s\n", err.file, err.line, err.msg);
        CHECK(0);
        return 0;
    }
    graph_runner r;
    CHECK(runner_init(&r, &g) == 0);
    runner_fill(&r, 42, int_limit);
    CHECK(runner_run(&r, RUN_BACKWARD, 1) == 0);
    int checked = 0, before = check_failures;
    for (int32_t p = 0; p < g.n_values; p++) {
        if (g.values[p].role != ROLE_PARAM)
            continue;
        char grad_name[300];
        snprintf(grad_name, sizeof grad_name, "grad.%s", ir_value_name(&g, p));
        const char *pname = ir_value_name(&g, p);
        float *param = runner_value(&r, pname), *grad = runner_value(&r, grad_name);
        int64_t n = runner_numel(&r, pname);
        double analytic = 0.0;
        signed char *u = malloc((size_t)n);
        double keep = spread > 0 && spread < n ? (double)spread / (double)n : 1.0;
        for (int64_t i = 0; i < n; i++) {
            u[i] = runner_uniform() >= keep ? 0 : runner_uniform() < 0.5 ? -1 : 1;
            analytic += (double)grad[i] * u[i];
        }
        float *saved = malloc((size_t)n * sizeof *saved);
        memcpy(saved, param, (size_t)n * sizeof *saved);
        for (int64_t i = 0; i < n; i++)
            param[i] = saved[i] + (float)(eps * u[i]);
        double plus = loss_of(&r);
        for (int64_t i = 0; i < n; i++)
            param[i] = saved[i] - (float)(eps * u[i]);
        double minus = loss_of(&r);
        memcpy(param, saved, (size_t)n * sizeof *saved);
        double numeric = (plus - minus) / (2.0 * eps);
        double tol = rel_tol * fmax(fabs(analytic), fabs(numeric)) + 2e-3;
        CHECK_NEAR(numeric, analytic, tol);
        if (!(fabs(numeric - analytic) <= tol))
            fprintf(stderr, "  %s: param %s: d/du analytic %.6g, finite differences %.6g\n", file, pname, analytic,
                    numeric);
        checked++;
        free(u);
        free(saved);
    }
    if (check_failures == before)
        fprintf(stderr, "  %s: %d param tensors match finite differences\n", file, checked);
    runner_free(&r);
    ir_graph_free(&g);
    return checked;
}

static void test_autodiff_mlp_matches_finite_differences(void)
{
    model_setting s[] = {
        { "batch", "4", NULL }, { "in_dim", "6", NULL }, { "hidden", "5", NULL }, { "classes", "3", NULL }
    };
    CHECK_INT(6, check_model("models/mlp.xml", s, 4, 3, 1e-3, 1e-2, 0));
}

static void test_autodiff_gpt_matches_finite_differences(void)
{
    model_setting whole[] = { { "vocab", "17", NULL }, { "ctx", "8", NULL },   { "layers", "2", NULL },
                              { "dim", "12", NULL },   { "heads", "3", NULL }, { "batch", "2", NULL },
                              { "seq", "5", NULL } };
    CHECK_INT(2 + 12 * 2 + 2, check_model("models/gpt2.xml", whole, 7, 17, 1e-3, 2e-2, 0));
    model_setting parts[] = { { "vocab", "17", NULL }, { "ctx", "8", NULL },       { "layers", "1", NULL },
                              { "dim", "12", NULL },   { "heads", "1", NULL },     { "batch", "2", NULL },
                              { "seq", "7", NULL },    { "attn_parts", "1", NULL } };
    CHECK_INT(2 + 12 + 2, check_model("models/gpt2.xml", parts, 8, 17, 1e-3, 2e-2, 0));
}

/* Llama (rmsnorm, rope, grouped-query attention, silu, mul), and split and
 * concat with a part unused and an input that needs no gradient. */
static void test_autodiff_llama_matches_finite_differences(void)
{
    model_setting s[] = { { "vocab", "17", NULL }, { "ctx", "8", NULL },   { "layers", "1", NULL },
                          { "dim", "16", NULL },   { "heads", "4", NULL }, { "kv_heads", "2", NULL },
                          { "ffn", "20", NULL },   { "batch", "2", NULL }, { "seq", "7", NULL } };
    CHECK_INT(2 + 9 + 1, check_model("models/llama.xml", s, 9, 17, 1e-3, 2e-2, 0));
    CHECK_INT(2, check_model("tests/models/split_concat.xml", NULL, 0, 7, 1e-3, 2e-2, 0));
}

static void test_autodiff_resnet_blocks_match_finite_differences(void)
{
    CHECK_INT(20, check_model("tests/models/small_resnet.xml", NULL, 0, 5, 1e-4, 2e-2, 0));
}

/* After one step (t = 1, zero moments, no decay) AdamW moves each weight by
 * lr · g / (|g| + eps): about lr against the gradient's sign. */
static void test_adamw_first_step_follows_the_update_rule(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/mlp.xml", getenv("FUSION_SOURCE_DIR") ? getenv("FUSION_SOURCE_DIR") : ".");
    model_setting s[] = {
        { "batch", "4", NULL }, { "in_dim", "6", NULL }, { "hidden", "5", NULL }, { "classes", "3", NULL }
    };
    ir_graph g;
    struct diag err = { 0 };
    CHECK(model_load(path, s, 4, &g, &err) == 0 && pass_run_pipeline(&g, NULL, &err) == 0);
    graph_runner r;
    CHECK(runner_init(&r, &g) == 0);
    runner_fill(&r, 7, 3);
    int64_t n = runner_numel(&r, "fc.0.w");
    float *before = malloc((size_t)n * sizeof *before);
    memcpy(before, runner_value(&r, "fc.0.w"), (size_t)n * sizeof *before);
    CHECK(runner_run(&r, RUN_STEP, 1) == 0);
    const float *after = runner_value(&r, "fc.0.w"), *grad = runner_value(&r, "grad.fc.0.w");
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double expected = before[i] - 1e-3 * grad[i] / (fabs(grad[i]) + 1e-8); /* mlp.xml: lr 1e-3 */
        worst = fmax(worst, fabs(expected - after[i]));
    }
    CHECK_NEAR(0.0, worst, 1e-7);
    free(before);
    runner_free(&r);
    ir_graph_free(&g);
}

int main(void)
{
    test_autodiff_mlp_matches_finite_differences();
    test_autodiff_gpt_matches_finite_differences();
    test_autodiff_llama_matches_finite_differences();
    test_autodiff_resnet_blocks_match_finite_differences();
    test_adamw_first_step_follows_the_update_rule();
    CHECK_DONE();
}
