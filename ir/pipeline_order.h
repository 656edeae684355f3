/* pipeline_order.h: the order a pipeline stage runs its micro-batches in,
 * shared by the device program (runtime/main.c), the simulator
 * (tools/simulate.c) and the fence pass's cost model (passes/fence_cost.c),
 * so that all three mean the same schedule.
 *
 * 1F1B with `warm` warm-up forwards (ir_placement_warmup: the schedule
 * pass's choice, or plain 1F1B's min(M, S - s - 1)): forwards 0 .. warm-1,
 * then one forward and one backward in turn until every backward has run.
 * order[0 .. 2M) gets +m for micro-batch m's forward and -(m + 1) for its
 * backward; returns 2M. */
#ifndef FUSION_PIPELINE_ORDER_H
#define FUSION_PIPELINE_ORDER_H

#include <stdint.h>

static inline int32_t pipeline_order(int32_t M, int32_t warm, int32_t *order)
{
    int32_t n = 0, f = 0, b = 0;
    if (warm > M)
        warm = M;
    for (; f < warm; f++)
        order[n++] = f;
    while (b < M) {
        if (f < M)
            order[n++] = f++;
        order[n++] = -(++b);
    }
    return n;
}

#endif
