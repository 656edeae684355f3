/* fence_dp_row.h: one row of the fence pass's cut DP (fence_cost.c's
 * dp_fill_row) in O(n log n) where the scan it replaces was O(n^2) (long
 * stages), on its own so that a test can hold it against that scan
 * (tests/unit/test_fence_dp_row.c).
 *
 * Stage s of a pipeline takes forward positions [j, k]; the stages before
 * it end at j - 1.  With
 *   b[j]  = max(best bottleneck of the stages before, ending at j - 1,
 *               the cut after j - 1)                  (any values, INFINITY too)
 *   t[]   the stage's seconds as a prefix: [j, k] takes t[k + 1] - t[j]
 *         (finite, non-decreasing)
 *   lo[k] the smallest j whose stage [j, k] fits in memory, and >= s >= 1
 *         (fitting only gets harder as j falls)
 * the row is, for every k in [0, n):
 *   best[k] = min over j in [lo[k], k] of max(b[j], t[k + 1] - t[j])
 *   from[k] = the smallest j reaching it, minus 1 (the stage before's end)
 * and INFINITY, -1 where that range is empty.  The same doubles as the
 * scan: every value is one of the b[j] or t[k + 1] - t[j] it compares.
 */
#ifndef FUSION_FENCE_DP_ROW_H
#define FUSION_FENCE_DP_ROW_H

#include <stdint.h>

/* b, lo: [n]; t: [n + 1]; best, from: [n].  Each position is scanned as
 * before for up to scan_steps candidates, then answered by a query
 * (O(log n)) if the scan has not ended: the answer is the same either
 * way; the pass scans FENCE_DP_SCAN_STEPS.  0, or -1 when out of memory
 * (best and from then partly unset). */
#define FENCE_DP_SCAN_STEPS 64
int fence_dp_row(const double *b, const double *t, const int32_t *lo, int32_t n, int32_t scan_steps, double *best,
                 int32_t *from);

#endif
