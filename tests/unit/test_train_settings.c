/* test_train_settings: runtime/train_settings.c, the run's learning-rate
 * schedule, decay and clipping: the settings read back from the update
 * ops the optimizer pass compiled, the run's overrides over them, the
 * schedule's length (option, model, run), the three schedules' rates
 * against their formulas, and the refusals. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "train_settings.h"

static const rt_train_overrides none = { NAN, NAN, NAN, NAN, RT_UNSET, RT_UNSET, RT_UNSET };

/* An lr_schedule, a clip_scale and two adamw ops (a bias, a matrix), as the optimizer pass writes them. */
static void compiled_ops(rt_op ops[4], double lr, int64_t warmup, int64_t steps, double min_lr, double clip, double wd)
{
    memset(ops, 0, 4 * sizeof *ops);
    ops[0].op = OP_LR_SCHEDULE;
    ops[0].floats[ATTR_LR] = lr, ops[0].ints[ATTR_WARMUP] = warmup, ops[0].ints[ATTR_STEPS] = steps;
    ops[0].floats[ATTR_MIN_LR] = min_lr;
    ops[1].op = OP_CLIP_SCALE;
    ops[1].floats[ATTR_MAX_NORM] = clip;
    ops[2].op = OP_ADAMW, ops[2].in[0].rank = 1; /* a bias: no decay */
    ops[3].op = OP_ADAMW, ops[3].in[0].rank = 2;
    ops[3].floats[ATTR_WEIGHT_DECAY] = wd;
}

static void test_train_settings_read_back_what_the_compile_wrote(void)
{
    rt_op ops[4];
    rt_train_settings s;
    compiled_ops(ops, 2e-3, 5, 100, 2e-4, 1.0, 0.1);
    rt_train_settings_from_ops(ops, 4, &s);
    CHECK(s.has_optimizer);
    CHECK_NEAR(2e-3, s.lr, 0);
    CHECK_NEAR(2e-4, s.min_lr, 0);
    CHECK_INT(5, s.warmup);
    CHECK_INT(RT_LR_COSINE, s.schedule); /* the model declared steps: cosine over them */
    CHECK_INT(100, s.length);
    CHECK_INT(RT_LENGTH_MODEL, s.length_from);
    CHECK_NEAR(1.0, s.grad_clip, 0);
    CHECK_NEAR(0.1, s.weight_decay, 0); /* the matrix's, not the bias's 0 */
    compiled_ops(ops, 6e-4, 0, 0, 0, 0, 0);
    rt_train_settings_from_ops(ops, 4, &s);
    CHECK_INT(RT_LR_CONSTANT, s.schedule);
    rt_train_settings_from_ops(ops + 1, 3, &s); /* no lr_schedule: not a training program */
    CHECK(!s.has_optimizer);
}

static void test_train_settings_length_is_the_option_the_model_or_the_run(void)
{
    rt_op ops[4];
    rt_train_settings s;
    char why[300];
    rt_train_overrides o = none;
    compiled_ops(ops, 6e-4, 0, 0, 0, 0, 0);
    rt_train_settings_from_ops(ops, 4, &s);
    o.schedule = RT_LR_COSINE;
    CHECK(rt_train_settings_apply(&s, &o, 20, why, sizeof why) == 0);
    CHECK_INT(20, s.length);
    CHECK_INT(RT_LENGTH_RUN, s.length_from);
    compiled_ops(ops, 6e-4, 0, 50, 0, 0, 0);
    rt_train_settings_from_ops(ops, 4, &s);
    CHECK(rt_train_settings_apply(&s, &none, 20, why, sizeof why) == 0);
    CHECK_INT(50, s.length); /* the model's steps */
    o = none;
    o.schedule_steps = 8;
    rt_train_settings_from_ops(ops, 4, &s);
    CHECK(rt_train_settings_apply(&s, &o, 20, why, sizeof why) == 0);
    CHECK_INT(8, s.length);
    CHECK_INT(RT_LENGTH_OPTION, s.length_from);
}

static void test_train_settings_rates_follow_their_formulas(void)
{
    rt_train_settings s = { .lr = 1e-3, .min_lr = 1e-4, .warmup = 4, .length = 24, .has_optimizer = 1 };
    s.schedule = RT_LR_COSINE;
    CHECK_NEAR(0.25e-3, rt_train_lr(&s, 1), 1e-15); /* warm-up: lr t / warmup */
    CHECK_NEAR(1e-3, rt_train_lr(&s, 4), 1e-15);
    CHECK_NEAR(1e-4 + 0.5 * (1e-3 - 1e-4), rt_train_lr(&s, 14), 1e-15); /* half way: the mean */
    CHECK_NEAR(1e-4, rt_train_lr(&s, 24), 1e-15);
    CHECK_NEAR(1e-4, rt_train_lr(&s, 100), 1e-15); /* past the end: min_lr */
    s.schedule = RT_LR_LINEAR;
    CHECK_NEAR(1e-3 - 0.25 * (1e-3 - 1e-4), rt_train_lr(&s, 9), 1e-15);
    s.schedule = RT_LR_CONSTANT;
    CHECK_NEAR(1e-3, rt_train_lr(&s, 20), 0);
}

static void test_train_settings_refuse_what_cannot_be(void)
{
    rt_op ops[4];
    rt_train_settings s;
    char why[300];
    rt_train_overrides o = none;
    compiled_ops(ops, 6e-4, 0, 0, 0, 0, 0);
    rt_train_settings_from_ops(ops, 4, &s);
    o.min_lr = 1e-2;
    CHECK(rt_train_settings_apply(&s, &o, 20, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "--min-lr 0.01: must be in [0, lr] (lr is 0.0006)");
    o = none;
    o.schedule = RT_LR_LINEAR;
    o.warmup = 20;
    rt_train_settings_from_ops(ops, 4, &s);
    CHECK(rt_train_settings_apply(&s, &o, 20, why, sizeof why) == -1);
    CHECK_CONTAINS(why, "the linear schedule's 20 steps (the run's --steps) are not more than its 20 warm-up steps");
    char line[400];
    o = none;
    o.schedule = RT_LR_COSINE, o.grad_clip = 0.5, o.warmup = 2;
    rt_train_settings_from_ops(ops, 4, &s);
    CHECK(rt_train_settings_apply(&s, &o, 20, why, sizeof why) == 0);
    rt_train_settings_describe(&s, line, sizeof line);
    CHECK_STR("learning rate 0.0006, cosine to 0 by step 20 (the run's --steps), after 2 warm-up steps; weight decay "
              "0; gradient norm clipped at 0.5",
              line);
}

int main(void)
{
    test_train_settings_read_back_what_the_compile_wrote();
    test_train_settings_length_is_the_option_the_model_or_the_run();
    test_train_settings_rates_follow_their_formulas();
    test_train_settings_refuse_what_cannot_be();
    CHECK_DONE();
}
