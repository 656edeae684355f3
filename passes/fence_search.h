/* fence_search.h: OP-Fence's search (fence_search.c), the fence pass's
 * default scheduler, and the best-so-far record the fence pass's other
 * schedulers keep their plan in too.  Internal to passes/. */
#ifndef FUSION_FENCE_SEARCH_H
#define FUSION_FENCE_SEARCH_H

#include "fence_cost.h"

/* The best candidate so far: its step T, whether it fits in memory, and
 * its devices ([S * R], owned) and cuts ([S], owned). */
typedef struct {
    double T;
    int fits;
    candidate cd;
    int32_t *dev, *end;
} fence_best;

/* Empty (T = INFINITY); frees what it holds. */
void fence_best_free(fence_best *b);
/* Price cd cut at end and keep it in b when better: fitting in memory first
 * (memory_aware), then a shorter step, then fewer devices.  *T_out (when
 * not NULL) gets its step, INFINITY when it does not fit; *fill_out its
 * memory fill (fence_evaluate).  0, -1 on no memory. */
int fence_keep_if_better(fence_best *b, const fence_model *m, const candidate *cd, const int32_t *end, int memory_aware,
                         double *T_out, double *fill_out);

/* The fences: fence_of[d] for every device; returns how many. */
int32_t fence_find(const fence_model *m, int32_t *fence_of);
/* OP-Fence's search over F fences (fence_of from fence_find) for M
 * micro-batches, within opt's stages, replicas and max_replicas; the
 * winner goes to b (b->dev NULL when no candidate fits the options).
 * 0, or -1 when out of memory. */
int fence_search(const fence_model *m, int32_t M, const pass_options *opt, const int32_t *fence_of, int32_t F,
                 fence_best *b);

#endif
