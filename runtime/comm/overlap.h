/* overlap.h: a stage's gradient buckets averaged over its replicas while
 * the backward still runs (PyTorch DDP's overlap: Li et al., VLDB 2020).
 *
 * The comm pass numbers each all-reduce's bucket (its `bucket` attribute:
 * 0, 1, ... in the order the stage's backward makes the buckets' gradients
 * final; -1 for one reduced with the update) and codegen writes into each
 * the program's index of the backward op that makes its gradient final
 * (`ready`).  A gradient is final only in the step's last backward (the
 * micro-batches' gradients are summed), so in that backward the stepper
 * calls rt_overlap_before_op before each op: every bucket whose ready ops
 * have all run is finalised (the micro-batches' mean, exactly as the
 * stepper's own accumulation computes it), copied into the bucket's
 * buffer and handed to this device's all-reduce thread, which averages
 * it over the replicas (the ring or the hierarchy of comm.h, with the
 * bucket's first tensor id as its messages' id) while the backward goes
 * on.  rt_overlap_finish, before the update, hands over what is left,
 * waits for the thread and copies the results back into the gradients;
 * the update's allreduce ops then only copy (rt_comm_allreduce).
 *
 * With the overlap off (the device's --no-overlap) every bucket is
 * reduced in rt_overlap_finish instead, one after the other: the same
 * messages and the same bits, later (tests/test_overlap.sh compares).
 *
 * A CUDA device's backward writes its gradients to device memory, and the
 * arena here is its host staging copy: rt_overlap_set_fetch gives the hook
 * that brings a bucket's gradients down before it is handed over
 * (cuda.h, rt_cuda_fetch); the rest of the path is the CPU's, on the host
 * copy, and the update phase takes the averaged gradients back up
 * (tests/test_cuda_overlap.sh).
 *
 * Threads: the all-reduce thread uses the hub (thread-safe) and its own
 * scratch; the gradients it reduces are copies, so the main thread never
 * shares memory with it but the buffers it hands over and takes back
 * under the lock.
 */
#ifndef FUSION_RT_OVERLAP_H
#define FUSION_RT_OVERLAP_H

#include <stddef.h>
#include <stdint.h>

#include "../exec.h"
#include "../program.h"
#include "feedback.h"

struct rt_comm;
typedef struct rt_overlap rt_overlap;

/* The buckets of this device's program (ops[n_ops], its allreduce ops'
 * `bucket` and `ready`); grad_sum: the stepper's sum of the micro-batches'
 * gradients, the ROLE_GRADIENT tensors end to end in tensor order (NULL
 * with one micro-batch); enabled: 0 = reduce every bucket in
 * rt_overlap_finish.  *out = NULL when the program has no bucket.  0, or
 * -1 with err set. */
int rt_overlap_open(rt_overlap **out, struct rt_comm *c, const rt_op *ops, int32_t n_ops, const rt_tensor_info *tensors,
                    int32_t n_tensors, char *arena, float *grad_sum, int32_t micro_batches, int enabled, char *err,
                    size_t n);

/* A span of the arena: one bucket member's gradient, in bytes. */
typedef struct {
    int64_t offset, bytes;
} rt_overlap_range;

/* Brings ranges[n] of the arena (a bucket's members) up to date with what
 * the ops run so far wrote, for a device whose ops write elsewhere; 0, or
 * -1 with ctx->msg set. */
typedef int (*rt_overlap_fetch_fn)(void *user, const rt_overlap_range *ranges, int32_t n, rt_context *ctx);

/* Called before a bucket is handed over during a backward (not in
 * rt_overlap_finish: by then the backward's end has brought everything
 * down).  Without one, the arena is where the ops write (a CPU device). */
void rt_overlap_set_fetch(rt_overlap *o, rt_overlap_fetch_fn fetch, void *user);

/* A new step (before its first forward): no gradient is final yet. */
void rt_overlap_begin_step(rt_overlap *o, int64_t step);

/* The stepper's hook in the step's last backward (rt_context.before_op):
 * hands over every bucket whose gradients the ops before `op` made final. */
int rt_overlap_before_op(void *o, const rt_op *op, rt_context *ctx);

/* Per tensor (index into the program's tensors): 1 when this step's
 * bucket finalised its gradient already (the stepper's accumulation skips it). */
const uint8_t *rt_overlap_final(const rt_overlap *o);

/* --trace: the thread's reductions as spans of the trace's thread 1. */
void rt_overlap_set_trace(rt_overlap *o, struct rt_trace *trace);

/* Before the update: hand over the rest, wait, copy the results back.
 * 0, or -1 with ctx->msg set (the thread's error). */
int rt_overlap_finish(rt_overlap *o, rt_context *ctx);

/* How many buckets, and the seconds the main thread waited in
 * rt_overlap_finish over the run (what the overlap did not hide). */
int32_t rt_overlap_buckets(const rt_overlap *o);
double rt_overlap_waited(const rt_overlap *o);
/* Buckets handed to the thread during a backward, and in all, over the run. */
void rt_overlap_counts(const rt_overlap *o, int64_t *early, int64_t *handed);

/* The quantised buckets' error feedback, listed into l (feedback.h), for
 * a checkpoint; call between steps (the thread is idle then).  0, or -1. */
int rt_overlap_list_feedback(rt_overlap *o, rt_feedback_arrays *l);

/* Stops the thread (after rt_comm_abort, its calls on the hub fail at once) and frees. */
void rt_overlap_close(rt_overlap *o);

#endif
