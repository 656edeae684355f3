/* plan_memory.h: each device's memory in a placed plan, and the check that
 * refuses a plan some device cannot hold (compile, plan, simulate). */
#ifndef FUSION_TOOLS_PLAN_MEMORY_H
#define FUSION_TOOLS_PLAN_MEMORY_H

#include "../frontend/cluster.h"
#include "../ir/ir.h"
#include "../passes/passes.h"

/* Stage s's need on each of its devices: the arena, plus the stashed
 * activations of the micro-batches 1F1B keeps waiting for their backward
 * (the schedule pass's warm-up forwards, at most M; on a stage that
 * recomputes, only its forward's inputs). */
double plan_stage_memory(const ir_graph *g, const fence_plan *p, int32_t s);

/* The most bytes any device of p lacks for its stage (0: every one fits). */
double plan_memory_shortfall(const ir_graph *g, const cluster *c, const fence_plan *p);

/* The most any stage's working micro-batch holds beyond one stash: its
 * arena less its parameters, gradients and moments and one whole stash
 * (the micro-batch's activation gradients, scratch, the loss's logits),
 * which the fence pass's cost model does not count.  waiting_only: only
 * the stages that keep micro-batches waiting (warm-up > 0), the ones
 * whose stash it can make recompute: the last stage's logits (3.0 GiB on
 * an 8B Llama's, 0.7 GiB on the others') held back on every device kept
 * the world-wide LoRA's first three stages 2.3 GiB short. */
double plan_memory_working_extra(const ir_graph *g, const fence_plan *p, int waiting_only);

/* 0 when every device of p holds its stage (estimate_usable_memory: a
 * CUDA device's less its context); else -1 with err naming the first that
 * does not, what it needs against what it has, what the need is made of,
 * and what would help. */
int plan_memory_check(const ir_graph *g, const cluster *c, const fence_plan *p, const char *model_path,
                      struct diag *err);

#endif
