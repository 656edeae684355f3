/* running_stats.h: batch norm's running statistics across replicas.
 *
 * Each replica of a stage folds its own micro-batches' statistics into
 * its batchnorms' running mean and variance (passes/running_stats.c), so
 * replicas part a little every step.  Before they are read (a validation,
 * a checkpoint) they are averaged over the stage's replicas: every
 * replica then holds the mean, validates with it and saves it.  Between
 * reads they are left apart: the average costs a message round, and a
 * CUDA device's state crosses to the host and back for it. */
#ifndef FUSION_RT_RUNNING_STATS_H
#define FUSION_RT_RUNNING_STATS_H

#include "comm/comm.h"
#include "device_program.h"

/* The running statistics' mean over the replicas of this device's stage,
 * in place; every replica of the stage must call it at the same step.
 * Nothing to do (0) with one replica or none of them.  0, or -1 with
 * ctx->msg set (a peer lost, out of memory). */
int running_stats_mean_over_replicas(program *p, rt_comm *comm, rt_context *ctx);

#endif
