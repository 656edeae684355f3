/* test_fence_dp_row: one row of the fence pass's cut DP by fence_dp_row
 * (passes/fence_dp_row.h) against the scan the pass used before it, kept
 * here as the reference: for each k, j from k down to lo[k], stopping once
 * the stage alone, t[k + 1] - t[j], passes the best found (it only grows
 * as j falls); ties to the smallest j.
 *
 * Each row answered four ways: every position by the query (scan_steps 0),
 * after scans of 1 and 3 steps, and as the pass does (FENCE_DP_SCAN_STEPS).
 * 20,000 random rows of 1 to 300 positions: stage times as small integers
 * (ties everywhere) or spread doubles, steps of zero (ops that take no
 * time), b with INFINITY (the stages before do not fit) and repeated
 * values, lo[] from "everything fits" to "nothing does"; every best[k]
 * compared bit for bit and every from[k] exactly.  A mismatch names the
 * row, k, and what was expected and found.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../passes/fence_dp_row.h"
#include "check.h"

/* ---- the reference: passes/fence_cost.c's dp_fill_row before issue 29 ----- */

static void reference_row(const double *b, const double *t, const int32_t *lo, int32_t n, double *best, int32_t *from)
{
    for (int32_t k = 0; k < n; k++) {
        double bound = INFINITY;
        int32_t arg = -1;
        for (int32_t j = k; j >= lo[k]; j--) {
            double here = t[k + 1] - t[j];
            if (here > bound)
                break;
            double v = b[j] > here ? b[j] : here;
            if (v <= bound)
                bound = v, arg = j - 1;
        }
        best[k] = bound;
        from[k] = arg;
    }
}

/* ---- data ---------------------------------------------------------------- */

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rng_next(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static int64_t rng_below(int64_t n) { return n > 0 ? (int64_t)(rng_next() % (uint64_t)n) : 0; }
static double rng_unit(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }

static int32_t random_row(double *b, double *t, int32_t *lo)
{
    int32_t n = 1 + (int32_t)rng_below(300), s = 1 + (int32_t)rng_below(n < 6 ? n : 6);
    int ints = rng_below(2) == 0, zeros = (int)rng_below(4), infs = (int)rng_below(4), memory = (int)rng_below(4);
    t[0] = ints ? (double)rng_below(3) : rng_unit();
    for (int32_t k = 1; k <= n; k++) {
        double step = rng_below(4) < zeros ? 0.0 : ints ? (double)(1 + rng_below(5)) : rng_unit() * 3.0;
        t[k] = t[k - 1] + step;
    }
    double top = t[n] - t[0];
    for (int32_t j = 0; j < n; j++) {
        double x = ints ? (double)rng_below((int64_t)top + 2) : rng_unit() * top;
        b[j] = rng_below(8) < infs ? INFINITY : rng_below(5) == 0 && j > 0 ? b[j - 1] : x;
    }
    for (int32_t k = 0; k < n; k++) { /* lo[k] >= s, up to k + 1 (nothing fits) */
        int32_t span = memory == 0 ? k + 1 : (int32_t)rng_below(k + 2);
        lo[k] = k + 1 - span;
        if (lo[k] < s)
            lo[k] = s;
    }
    return n;
}

static int same_bits(double x, double y) { return memcmp(&x, &y, sizeof x) == 0; }

/* ---- checks -------------------------------------------------------------- */

static void test_fence_dp_row_matches_the_scan(void)
{
    double b[301], t[302], want[301], got[301];
    int32_t lo[301], want_from[301], got_from[301];
    int bad = 0;
    for (int32_t row = 0; row < 20000 && bad < 5; row++) {
        int32_t n = random_row(b, t, lo);
        reference_row(b, t, lo, n, want, want_from);
        static const int32_t scans[] = { 0, 1, 3, FENCE_DP_SCAN_STEPS };
        for (int w = 0; w < 4; w++) {
            CHECK_INT(0, fence_dp_row(b, t, lo, n, scans[w], got, got_from));
            for (int32_t k = 0; k < n; k++)
                if (!same_bits(want[k], got[k]) || want_from[k] != got_from[k]) {
                    fprintf(stderr,
                            "  row %d (n = %d, scans of %d), k = %d (lo %d): expected best %.17g from %d, "
                            "found %.17g from %d\n",
                            row, n, scans[w], k, lo[k], want[k], want_from[k], got[k], got_from[k]);
                    bad++;
                    break;
                }
        }
    }
    CHECK_INT(0, bad);
}

static void test_fence_dp_row_edges(void)
{
    /* Two positions, stage 1 = [1, 1]: best[1] = max(b[1], t[2] - t[1]). */
    double b[2] = { INFINITY, 5.0 }, t[3] = { 0.0, 2.0, 3.0 }, best[2];
    int32_t lo[2] = { 2, 1 }, from[2];
    CHECK_INT(0, fence_dp_row(b, t, lo, 2, 0, best, from));
    CHECK(isinf(best[0]));
    CHECK_INT(-1, from[0]);
    CHECK_NEAR(5.0, best[1], 0.0);
    CHECK_INT(0, from[1]);
    CHECK_INT(0, fence_dp_row(b, t, lo, 0, 0, best, from)); /* no positions */
}

int main(void)
{
    test_fence_dp_row_edges();
    test_fence_dp_row_matches_the_scan();
    CHECK_DONE();
}
