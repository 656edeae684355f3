/* fence_cuts.h: stage cuts of equal layers (fence_cuts.c), shared by the
 * fence pass's schedulers (fence.c, fence_search.c, gcma.c).  end[s] gets
 * the last forward position (in m->fwd) of stage s.  Internal to passes/. */
#ifndef FUSION_FENCE_CUTS_H
#define FUSION_FENCE_CUTS_H

#include "fence_cost.h"

/* Stage ends for S stages of equal layers, Megatron's cut (uniform and
 * gcma use it).  0, or -1 when the model has fewer forward ops than S, or
 * no memory. */
int fence_uniform_cuts(const fence_model *m, int32_t S, int32_t *end);
/* Stage 0 the ops before the first layer and the first `front` layers, the
 * other S - 1 stages the rest in equal layers: a cut that can lighten the
 * stage holding the embedding, whose all-reduce may end the step.  0, or
 * -1 when it leaves a stage empty, or no memory. */
int fence_front_cuts(const fence_model *m, int32_t S, int32_t front, int32_t *end);
/* The same stage 0, the other S - 1 stages cut at the layer ends nearest
 * to equal shares of the rest's seconds (time: a device row's prefix sums,
 * [n_fwd + 1]): a last stage that also holds the head or the loss gets
 * fewer layers.  0, or -1 as fence_front_cuts. */
int fence_front_cuts_balanced(const fence_model *m, int32_t S, int32_t front, const double *time, int32_t *end);

/* The forward positions that end a layer (a repeat block's instance), in
 * order, into out (room for m->n_fwd); returns their count, -1 when out
 * of memory.  A cut there sends what a layer hands the next: the
 * residual stream alone, where a cut inside a layer may send several
 * tensors a micro-batch. */
int32_t fence_layer_ends(const fence_model *m, int32_t *out);

#endif
