/* stats_mode.h: what a batchnorm with running statistics (its inputs 3
 * and 4: passes/running_stats.c) does with them in a forward, by the
 * forward's context; the CPU kernel asks it, the CUDA backend passes it to
 * the kernel in its launch's fusion_args. */
#ifndef FUSION_RT_STATS_MODE_H
#define FUSION_RT_STATS_MODE_H

#include "exec.h"

typedef enum {
    RT_STATS_UPDATE, /* a training forward: normalise by the batch's statistics, fold them in */
    RT_STATS_KEEP,   /* a recompute's replay: by the batch's, the running ones left as they are */
    RT_STATS_USE,    /* validation, sampling (step <= 0: their messages' steps are -step): by the running ones */
} rt_stats_mode;
static inline int rt_stats_mode_of(const rt_context *ctx)
{
    return ctx->step <= 0 ? RT_STATS_USE : ctx->replay ? RT_STATS_KEEP : RT_STATS_UPDATE;
}

#endif
