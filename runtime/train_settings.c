/* train_settings.c: the run's training settings (train_settings.h). */
#include "train_settings.h"

#include <math.h>
#include <stdio.h>

#include "rt_error.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

void rt_train_settings_from_ops(const rt_op *ops, int32_t n, rt_train_settings *s)
{
    *s = (rt_train_settings){ .lr = 6e-4, .schedule = RT_LR_CONSTANT, .length_from = RT_LENGTH_RUN };
    int decay_found = 0, clip_found = 0;
    for (int32_t i = 0; i < n; i++) {
        const rt_op *op = &ops[i];
        if (op->op == OP_LR_SCHEDULE && !s->has_optimizer) {
            s->has_optimizer = 1;
            s->lr = op->floats[ATTR_LR];
            s->min_lr = op->floats[ATTR_MIN_LR];
            s->warmup = op->ints[ATTR_WARMUP];
            s->length = op->ints[ATTR_STEPS];
            s->schedule = s->length > 0 ? RT_LR_COSINE : RT_LR_CONSTANT;
            s->length_from = s->length > 0 ? RT_LENGTH_MODEL : RT_LENGTH_RUN;
        } else if (op->op == OP_CLIP_SCALE && !clip_found) {
            clip_found = 1;
            s->grad_clip = op->floats[ATTR_MAX_NORM];
        } else if ((op->op == OP_ADAMW || op->op == OP_SGD) && op->in[0].rank >= 2 && !decay_found) {
            decay_found = 1; /* the optimizer pass decays matrices and kernels only */
            s->weight_decay = op->floats[ATTR_WEIGHT_DECAY];
        }
    }
}

int rt_train_settings_apply(rt_train_settings *s, const rt_train_overrides *o, int64_t run_steps, char *why, size_t n)
{
    if (!isnan(o->lr))
        s->lr = o->lr;
    if (!isnan(o->min_lr))
        s->min_lr = o->min_lr;
    if (!isnan(o->weight_decay))
        s->weight_decay = o->weight_decay;
    if (!isnan(o->grad_clip))
        s->grad_clip = o->grad_clip;
    if (o->warmup != RT_UNSET)
        s->warmup = o->warmup;
    if (o->schedule != RT_UNSET)
        s->schedule = o->schedule;
    if (o->schedule_steps != RT_UNSET) {
        s->length = o->schedule_steps;
        s->length_from = RT_LENGTH_OPTION;
    } else if (s->length_from == RT_LENGTH_RUN) {
        s->length = run_steps;
    }
    if (!(s->lr > 0))
        return rt_error(why, n, "--lr %g: the learning rate must be above 0", s->lr);
    if (!(s->min_lr >= 0 && s->min_lr <= s->lr))
        return rt_error(why, n, "--min-lr %g: must be in [0, lr] (lr is %g)", s->min_lr, s->lr);
    if (s->schedule != RT_LR_CONSTANT && s->length <= s->warmup)
        return rt_error(why, n,
                        "the %s schedule's %lld steps (%s) are not more than its %lld warm-up steps: "
                        "shorten --warmup or set --schedule-steps",
                        s->schedule == RT_LR_COSINE ? "cosine" : "linear", (long long)s->length,
                        s->length_from == RT_LENGTH_OPTION  ? "--schedule-steps"
                        : s->length_from == RT_LENGTH_MODEL ? "the model's steps"
                                                            : "the run's --steps",
                        (long long)s->warmup);
    return 0;
}

double rt_train_lr(const rt_train_settings *s, int64_t t)
{
    if (s->warmup > 0 && t <= s->warmup)
        return s->lr * (double)t / (double)s->warmup;
    if (s->schedule == RT_LR_CONSTANT || s->length <= s->warmup)
        return s->lr;
    double r = (double)(t - s->warmup) / (double)(s->length - s->warmup);
    if (r > 1.0)
        r = 1.0;
    if (s->schedule == RT_LR_LINEAR)
        return s->lr - (s->lr - s->min_lr) * r;
    return s->min_lr + 0.5 * (1.0 + cos(M_PI * r)) * (s->lr - s->min_lr);
}

void rt_train_settings_describe(const rt_train_settings *s, char *out, size_t n)
{
    static const char *const from[] = { "the run's --steps", "the model's steps", "--schedule-steps" };
    int k = 0;
    if (s->schedule == RT_LR_CONSTANT)
        k = snprintf(out, n, "learning rate %g, constant", s->lr);
    else
        k = snprintf(out, n, "learning rate %g, %s to %g by step %lld (%s)", s->lr,
                     s->schedule == RT_LR_COSINE ? "cosine" : "linear", s->min_lr, (long long)s->length,
                     from[s->length_from]);
    if (k >= 0 && (size_t)k < n && s->warmup > 0)
        k += snprintf(out + k, n - (size_t)k, ", after %lld warm-up step%s", (long long)s->warmup,
                      s->warmup == 1 ? "" : "s");
    if (k >= 0 && (size_t)k < n)
        k += snprintf(out + k, n - (size_t)k, "; weight decay %g", s->weight_decay);
    if (k >= 0 && (size_t)k < n) {
        if (s->grad_clip > 0)
            snprintf(out + k, n - (size_t)k, "; gradient norm clipped at %g", s->grad_clip);
        else
            snprintf(out + k, n - (size_t)k, "; no gradient clipping");
    }
}
