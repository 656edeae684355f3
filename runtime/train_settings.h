/* train_settings.h: the training settings a run may change without a
 * compile: the learning-rate schedule, weight decay and gradient clipping.
 *
 * The compile writes the model's values into the update ops (lr_schedule,
 * clip_scale, adamw, sgd: passes/optimizer.c); a device program reads them
 * back as its defaults (rt_train_settings_from_ops), the run's options
 * (--lr, --lr-schedule, ...) override them, and the kernels read the
 * result through rt_context.train, on a CPU and on a CUDA device alike
 * (the launch's fusion_args carry the rate, the bound and the decay).
 * Model shape and batch stay compile-time: they size the arena.
 *
 * The schedule, step t from 1 (llm.c's, with a linear choice beside the
 * cosine):
 *
 *   t <= warmup           lr * t / warmup
 *   constant              lr
 *   cosine                min_lr + (lr - min_lr) (1 + cos(pi r)) / 2
 *   linear                lr - (lr - min_lr) r
 *   r = min(1, (t - warmup) / (length - warmup))
 *
 * length: --schedule-steps, else the model's `steps` hyper-parameter when
 * it declares one, else the run's --steps.
 */
#ifndef FUSION_RT_TRAIN_SETTINGS_H
#define FUSION_RT_TRAIN_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "exec.h"

typedef enum { RT_LR_CONSTANT = 0, RT_LR_COSINE = 1, RT_LR_LINEAR = 2 } rt_lr_schedule;

typedef struct rt_train_settings_s {
    double lr, min_lr;
    int64_t warmup;
    int32_t schedule;      /* rt_lr_schedule                                       */
    int64_t length;        /* steps the schedule spans (warm-up included); 0: none */
    int32_t length_from;   /* RT_LENGTH_*: who set the length (for the start line) */
    double weight_decay;   /* on matrices and kernels (rank >= 2) only             */
    double grad_clip;      /* the global gradient norm's bound; 0: off             */
    int32_t has_optimizer; /* the program holds an lr_schedule (a training program) */
} rt_train_settings;

enum { RT_LENGTH_RUN = 0, RT_LENGTH_MODEL = 1, RT_LENGTH_OPTION = 2 };

/* The run's overrides: NaN or -1 (RT_UNSET) where not given. */
#define RT_UNSET (-1)
typedef struct {
    double lr, min_lr, weight_decay, grad_clip;
    int64_t warmup, schedule_steps;
    int32_t schedule; /* an rt_lr_schedule, or RT_UNSET */
} rt_train_overrides;

/* The settings compiled into ops[0..n) (the first lr_schedule, clip_scale
 * and decaying adamw or sgd); has_optimizer 0 when there is no lr_schedule. */
void rt_train_settings_from_ops(const rt_op *ops, int32_t n, rt_train_settings *s);

/* s with o's overrides applied, the length resolved against the run's
 * steps; 0, or -1 with why ("--warmup 30 is not shorter than the
 * schedule's 20 steps"). */
int rt_train_settings_apply(rt_train_settings *s, const rt_train_overrides *o, int64_t run_steps, char *why, size_t n);

/* Step t's learning rate (t from 1). */
double rt_train_lr(const rt_train_settings *s, int64_t t);

/* One line for the start of a run: "learning rate 0.002, cosine to 0.0002
 * by step 20 (the run's --steps), after 2 warm-up steps; weight decay 0.1;
 * gradient norm clipped at 1". */
void rt_train_settings_describe(const rt_train_settings *s, char *out, size_t n);

#endif
