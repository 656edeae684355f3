/* fence_dp_row.c: fence_dp_row (fence_dp_row.h).
 *
 * Each k starts as the scan did: j from k down, stopping once the stage
 * alone, H(j) = t[k + 1] - t[j], passes the best found (it only grows as
 * j falls, so no smaller j can win).  Most scans end within a few steps
 * (short stages: many devices); one that does not is answered by a query
 * instead, from the same doubles:
 *
 * with M(p) = min b[p .. k] (non-decreasing in p) and H non-increasing (t
 * does not fall, and a rounded subtraction is monotone), the least
 * max(b[j], H(j)) over j in [lo, k] is the least f(p) = max(H(p), M(p)):
 * f(p) >= max(b[q], H(q)) for the q >= p that holds M(p), and f(j) <=
 * max(b[j], H(j)).  Past the first p where H(p) <= M(p) (a binary search:
 * that test only turns true) f is M, rising; before it f is H, falling;
 * so the least is M(p) there or H(p - 1).  The smallest j reaching it (the
 * scan's tie rule) is the first j, from where H(j) has fallen to it, with
 * b[j] no more than it.  Three binary searches over a table of minima:
 * O(log n) a position where the scan took up to k - lo[k] steps,
 * quadratic over a row of long stages (a GPT of thousands of layers cut
 * in two).
 */
#include <math.h>
#include <stdlib.h>

#include "fence_dp_row.h"

/* Minima of b over every run of a power-of-two length (a sparse table):
 * min[l][i] = min b[i .. i + 2^l - 1], so the minimum of any range is the
 * lesser of two overlapping runs.  n (levels + 1) doubles. */
typedef struct {
    double **min;
    int32_t levels;
} min_table;

static inline double dmin(double a, double b) { return b < a ? b : a; } /* no NaN here */

static int32_t floor_log2(uint32_t x) { return 31 - __builtin_clz(x); }

static double range_min(const min_table *tb, int32_t l, int32_t r)
{
    int32_t level = floor_log2((uint32_t)(r - l + 1));
    return dmin(tb->min[level][l], tb->min[level][r - (1 << level) + 1]);
}

static void table_free(min_table *tb)
{
    for (int32_t l = 0; tb->min && l < tb->levels; l++)
        free(tb->min[l]);
    free(tb->min);
    tb->min = NULL;
}

static int table_build(min_table *tb, const double *b, int32_t n)
{
    tb->levels = floor_log2((uint32_t)n) + 1;
    tb->min = calloc((size_t)tb->levels, sizeof *tb->min);
    for (int32_t l = 0; tb->min && l < tb->levels; l++) {
        int32_t runs = n - (1 << l) + 1;
        if (!(tb->min[l] = malloc((size_t)runs * sizeof *tb->min[l]))) {
            table_free(tb);
            return -1;
        }
        for (int32_t i = 0; i < runs; i++)
            tb->min[l][i] = l == 0 ? b[i] : dmin(tb->min[l - 1][i], tb->min[l - 1][i + (1 << (l - 1))]);
    }
    return tb->min ? 0 : -1;
}

/* The query for position k (lo <= k), into *best and *from. */
static void query(const min_table *tb, const double *t, int32_t lo, int32_t k, double *best, int32_t *from)
{
    double end = t[k + 1], least;
    int32_t a = lo, z = k + 1;
    while (a < z) { /* the first p where H(p) <= M(p), or k + 1 */
        int32_t p = a + (z - a) / 2;
        if (end - t[p] <= range_min(tb, p, k))
            z = p;
        else
            a = p + 1;
    }
    if (a > k)
        least = end - t[k];
    else
        least = a > lo ? dmin(range_min(tb, a, k), end - t[a - 1]) : range_min(tb, a, k);
    for (a = lo, z = k; a < z;) { /* the first j where H(j) <= least (j = k at the latest) */
        int32_t p = a + (z - a) / 2;
        if (end - t[p] <= least)
            z = p;
        else
            a = p + 1;
    }
    for (z = k; a < z;) { /* then the first j from there with b[j] <= least: min b[a .. p] only falls as p grows */
        int32_t p = a + (z - a) / 2;
        if (range_min(tb, a, p) <= least)
            z = p;
        else
            a = p + 1;
    }
    *best = least;
    *from = a - 1;
}

int fence_dp_row(const double *b, const double *t, const int32_t *lo, int32_t n, int32_t scan_steps, double *best,
                 int32_t *from)
{
    min_table tb = { NULL, 0 }; /* built for the first scan that runs long */
    int rc = 0;
    for (int32_t k = 0; k < n && rc == 0; k++) {
        double bound = INFINITY;
        int32_t arg = -1, j = k, steps = 0;
        for (; j >= lo[k] && steps < scan_steps; j--, steps++) {
            double here = t[k + 1] - t[j];
            if (here > bound)
                break;
            double v = b[j] > here ? b[j] : here;
            if (v <= bound)
                bound = v, arg = j - 1;
        }
        if (j < lo[k] || steps < scan_steps) { /* the scan ended */
            best[k] = bound;
            from[k] = arg;
        } else if (tb.min || (rc = table_build(&tb, b, n)) == 0) {
            query(&tb, t, lo[k], k, &best[k], &from[k]);
        }
    }
    table_free(&tb);
    return rc;
}
