/* allreduce_wire.h: what the two ends of an all-reduce agree on, the
 * compiler's side (passes/allreduce_plan.h chooses the way and writes it
 * into the allreduce ops) and the runtime's (comm.c, quant_allreduce.c do
 * it).  The runtime's own header, so that the runtime needs nothing of the
 * compiler; the planner includes it.
 *
 * groups (an allreduce op's attribute): bit r (1 <= r < 63) set = replica
 * r starts a new group, each group a run of replicas in one region; 0 = one
 * ring over all the replicas.  A hierarchical all-reduce rings inside each
 * group, then among the groups' first replicas (their leaders), then each
 * leader sends the result to its group.  Up to ALLREDUCE_MAX_GROUPED
 * replicas can be grouped; more always ring.
 *
 * The quantised exchange (bits 8 or 4) sends rows of ALLREDUCE_QUANT_COLS
 * values, each row its own scale (quant.h); at bits ALLREDUCE_DIRECT_BITS
 * the same exchange sends its chunks as they are, f32: exact, two rounds
 * of latency where a ring pays 2 (R - 1) (passes/allreduce_plan.h). */
#ifndef FUSION_RT_ALLREDUCE_WIRE_H
#define FUSION_RT_ALLREDUCE_WIRE_H

#include <stdint.h>

#define ALLREDUCE_MAX_GROUPED 63
#define ALLREDUCE_QUANT_COLS  512
#define ALLREDUCE_DIRECT_BITS 32

/* Replica r's group: its first replica (its leader), from the mask. */
static inline int32_t allreduce_leader_of(int64_t groups, int32_t r)
{
    while (r > 0 && !(groups >> r & 1))
        r--;
    return r;
}

/* --shard-optimizer's all-gather (comm.c): its buckets at most this many
 * floats (25 MiB, DDP's bucket cap), so that the buffer it is laid out in
 * stays small (allreduce_plan.h prices the rings). */
#define RT_GATHER_BUCKET_FLOATS (25 * 1024 * 1024 / 4)

#endif
