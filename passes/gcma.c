/* gcma.c: DT-FM's scheduler (gcma.h): its cost model, the genetic
 * algorithm that searches it, the random baseline, and the glue that turns
 * the best assignment into a fence-pass candidate.
 *
 * An assignment is group_of[n]: device -> group (pipeline stage), each of
 * the S groups holding exactly R devices.  Evaluating one:
 *   DPCost   O(n R): each device's sum over its group of the dp link costs;
 *   matching O(S^2 / 2 * R^2 per augmentation): for each pair of groups,
 *            a greedy start at a lower bound, then minimax augmenting
 *            paths (see bottleneck()); pairs of groups seen before come
 *            from a cache keyed by sums of the devices' random 64-bit keys
 *            (a collision, about 2^-64 a lookup, would give a wrong cost);
 *   path     O(2^S S^2) Held-Karp up to GCMA_HELD_KARP_MAX groups, else
 *            nearest neighbour from every start then 2-opt (not exact).
 *
 * The search (DT-FM's, our reading of the paper): a population of random
 * balanced assignments; each trial picks two parents at random, copies the
 * first, gives `crossover_copy` random devices the second parent's group,
 * re-balances (over-full groups hand random devices to under-full ones),
 * runs one pass of local search, and replaces the population's worst when
 * it is better.  The local search is the multi-way partition exchange with
 * cycles of length two: each device in turn (random order) is swapped with
 * the device of another group that most lowers the partition objective,
 * the sum over groups of their devices' dp link costs (the data-parallel
 * cost's sum form; DT-FM's cyclic search also tries longer cycles, which
 * we do not).  Every random choice comes from one seeded generator, so a
 * seed gives one answer.  DT-FM's sizes (population 100, 4,900 trials) are
 * the default; a deterministic work cap (gcma_config.work_budget) shrinks
 * them for large clusters: 1,024 devices in 32 x 32 get a population of 34
 * and 315 trials, about 4 s on one core (tests/unit/test_gcma.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fence_cuts.h"
#include "gcma.h"

#define GCMA_SEED 0x5eedull
/* Elementary steps (see eval_work) for one search, and for one whole
 * gcma_schedule; about 3 ns each on a 2020s x86 core, so about 5 s. */
#define GCMA_WORK_BUDGET 1.5e9

/* ---- a small deterministic generator (splitmix64) -------------------------- */

typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static int32_t rng_below(rng *r, int32_t n) { return (int32_t)(rng_next(r) % (uint64_t)n); }

static void shuffle(rng *r, int32_t *a, int32_t n)
{
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = rng_below(r, i + 1), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

/* fmax and fmin without their NaN rules, so that they inline (no NaN here). */
static inline double dmax(double a, double b) { return a > b ? a : b; }
static inline double dmin(double a, double b) { return a < b ? a : b; }

/* ---- links and problems ------------------------------------------------------ */

int gcma_links_init(gcma_links *l, int32_t n, gcma_link_fn link, const void *ctx)
{
    size_t nn = (size_t)n * (size_t)n;
    l->n = n;
    l->bw = malloc((nn + 1) * sizeof *l->bw);
    l->lat = malloc((nn + 1) * sizeof *l->lat);
    if (!l->bw || !l->lat) {
        gcma_links_free(l);
        return -1;
    }
    for (int32_t a = 0; a < n; a++)
        for (int32_t b = 0; b < n; b++) {
            size_t i = (size_t)a * (size_t)n + (size_t)b;
            if (a == b)
                l->bw[i] = INFINITY, l->lat[i] = 0.0;
            else
                link(ctx, a, b, &l->bw[i], &l->lat[i]);
        }
    return 0;
}

void gcma_links_free(gcma_links *l)
{
    free(l->bw);
    free(l->lat);
    memset(l, 0, sizeof *l);
}

/* alpha + bytes / beta; no bytes over a dead link still cost nothing. */
static double link_cost(double bytes, double bw, double lat) { return lat + (bytes > 0 ? bytes / bw : 0.0); }

int gcma_problem_init(gcma_problem *p, const gcma_links *l, int32_t S, int32_t R, double c_a, double c_g)
{
    memset(p, 0, sizeof *p);
    if (S < 1 || R < 1 || (int64_t)S * R != l->n)
        return -1;
    size_t nn = (size_t)l->n * (size_t)l->n;
    p->n = l->n, p->S = S, p->R = R, p->c_a = c_a, p->c_g = c_g;
    p->pp = malloc((nn + 1) * sizeof *p->pp);
    p->dp = malloc((nn + 1) * sizeof *p->dp);
    if (!p->pp || !p->dp) {
        gcma_problem_free(p);
        return -1;
    }
    for (size_t i = 0; i < nn; i++) {
        p->pp[i] = link_cost(c_a, l->bw[i], l->lat[i]);
        p->dp[i] = 2.0 * link_cost(c_g / R, l->bw[i], l->lat[i]);
    }
    for (int32_t d = 0; d < l->n; d++)
        p->pp[(size_t)d * (size_t)l->n + (size_t)d] = p->dp[(size_t)d * (size_t)l->n + (size_t)d] = 0.0;
    return 0;
}

void gcma_problem_free(gcma_problem *p)
{
    free(p->pp);
    free(p->dp);
    memset(p, 0, sizeof *p);
}

void gcma_config_default(gcma_config *cfg)
{
    cfg->population = 100;
    cfg->trials = 4900;
    cfg->random_samples = 5000;
    cfg->crossover_copy = 5;
    cfg->seed = GCMA_SEED;
    cfg->work_budget = GCMA_WORK_BUDGET;
    cfg->seeds = NULL;
    cfg->n_seeds = 0;
}

void gcma_result_free(gcma_result *r)
{
    free(r->group_of);
    free(r->dev);
    memset(r, 0, sizeof *r);
}

/* ---- bottleneck perfect matching ---------------------------------------------- */

typedef struct {
    int32_t R;
    const double *cost; /* [R * R] */
    double *key;        /* [R] per column: the least largest link of a path to it */
    int32_t *via;       /* [R] per column: the row the path reaches it from        */
    char *done;         /* [R]                                                     */
    int32_t *col_of;    /* [R] row -> column */
    int32_t *row_of;    /* [R] column -> row */
} matcher;

static int matcher_init(matcher *w, int32_t R)
{
    memset(w, 0, sizeof *w);
    w->R = R;
    w->key = malloc(((size_t)R + 1) * sizeof *w->key);
    w->via = malloc(((size_t)R + 1) * sizeof *w->via);
    w->done = malloc((size_t)R + 1);
    w->col_of = malloc(((size_t)R + 1) * sizeof *w->col_of);
    w->row_of = malloc(((size_t)R + 1) * sizeof *w->row_of);
    return w->key && w->via && w->done && w->col_of && w->row_of ? 0 : -1;
}

static void matcher_free(matcher *w)
{
    free(w->key);
    free(w->via);
    free(w->done);
    free(w->col_of);
    free(w->row_of);
}

/* The matching goes to w->col_of; returns its largest cost.
 *
 * Greedy at a lower bound, then for each row left unmatched the augmenting
 * path whose largest link is least (Dijkstra's order with max in place of
 * +, over columns); the threshold rises to that link when it must.  Exact:
 * while the threshold is below the optimum t, the links up to t hold a
 * perfect matching P, and M xor P has an augmenting path from every row M
 * leaves unmatched, all of whose links are at most t; so the threshold
 * never passes t, and the final perfect matching shows it reaches it.
 * O(R^2) per augmentation. */
static double bottleneck(matcher *w, const double *cost)
{
    int32_t R = w->R;
    w->cost = cost;
    /* No perfect matching beats the largest of the rows' and columns'
     * cheapest links. */
    double th = 0.0;
    for (int32_t j = 0; j < R; j++)
        w->key[j] = INFINITY; /* here: each column's cheapest link */
    for (int32_t i = 0; i < R; i++) {
        const double *c = cost + (size_t)i * (size_t)R;
        double row = INFINITY;
        for (int32_t j = 0; j < R; j++) {
            row = dmin(row, c[j]);
            w->key[j] = dmin(w->key[j], c[j]);
        }
        th = dmax(th, row);
    }
    for (int32_t j = 0; j < R; j++)
        th = dmax(th, w->key[j]);
    for (int32_t i = 0; i < R; i++)
        w->col_of[i] = w->row_of[i] = -1;
    for (int32_t u = 0; u < R; u++)
        for (int32_t v = 0; v < R; v++)
            if (w->row_of[v] < 0 && cost[(size_t)u * (size_t)R + (size_t)v] <= th) {
                w->row_of[v] = u;
                w->col_of[u] = v;
                break;
            }
    for (int32_t u = 0; u < R; u++) {
        if (w->col_of[u] >= 0)
            continue;
        for (int32_t v = 0; v < R; v++) {
            w->key[v] = cost[(size_t)u * (size_t)R + (size_t)v];
            w->via[v] = u;
            w->done[v] = 0;
        }
        int32_t v = 0;
        for (int32_t j = 1; j < R; j++)
            if (w->key[j] < w->key[v])
                v = j;
        for (;;) {
            w->done[v] = 1;
            if (w->row_of[v] < 0) {
                th = dmax(th, w->key[v]);
                for (;;) { /* flip the path back to u */
                    int32_t r = w->via[v], next = w->col_of[r];
                    w->col_of[r] = v;
                    w->row_of[v] = r;
                    if (r == u)
                        break;
                    v = next;
                }
                break;
            }
            /* Relax through v's row, and pick the next column in the same sweep. */
            int32_t r = w->row_of[v], next = -1;
            const double *c = cost + (size_t)r * (size_t)R;
            double kv = w->key[v];
            for (int32_t j = 0; j < R; j++) {
                if (w->done[j])
                    continue;
                double k = dmax(kv, c[j]);
                if (k < w->key[j]) {
                    w->key[j] = k;
                    w->via[j] = r;
                }
                if (next < 0 || w->key[j] < w->key[next])
                    next = j;
            }
            v = next; /* some column is left: fewer rows are matched than columns */
        }
    }
    return th;
}

double gcma_bottleneck_matching(int32_t R, const double *cost, int32_t *match)
{
    matcher w;
    double b = INFINITY;
    memset(&w, 0, sizeof w);
    if (R >= 1 && matcher_init(&w, R) == 0) {
        b = bottleneck(&w, cost);
        memcpy(match, w.col_of, (size_t)R * sizeof *match);
    }
    matcher_free(&w);
    return b;
}

/* ---- the open path through the groups ------------------------------------------ */

static double path_length(int32_t S, const double *dist, const int32_t *order)
{
    double len = 0.0;
    for (int32_t k = 1; k < S; k++)
        len += dist[(size_t)order[k - 1] * (size_t)S + (size_t)order[k]];
    return len;
}

/* Held-Karp: best[mask][j], the cheapest path visiting mask and ending at j.
 * hk: [2^S * S] doubles, from: [2^S * S]. */
static double held_karp(int32_t S, const double *dist, int32_t *order, double *best, int8_t *from)
{
    size_t full = ((size_t)1 << S) - 1;
    for (size_t i = 0; i <= full * (size_t)S + (size_t)S - 1; i++)
        best[i] = INFINITY;
    for (int32_t j = 0; j < S; j++) {
        best[((size_t)1 << j) * (size_t)S + (size_t)j] = 0.0;
        from[((size_t)1 << j) * (size_t)S + (size_t)j] = -1;
    }
    for (size_t mask = 1; mask <= full; mask++)
        for (int32_t j = 0; j < S; j++) {
            double here = best[mask * (size_t)S + (size_t)j];
            if (!(mask >> j & 1) || here == INFINITY)
                continue;
            const double *dj = dist + (size_t)j * (size_t)S;
            for (int32_t k = 0; k < S; k++) {
                if (mask >> k & 1)
                    continue;
                size_t to = (mask | (size_t)1 << k) * (size_t)S + (size_t)k;
                if (here + dj[k] < best[to]) {
                    best[to] = here + dj[k];
                    from[to] = (int8_t)j;
                }
            }
        }
    int32_t end = 0;
    for (int32_t j = 1; j < S; j++)
        if (best[full * (size_t)S + (size_t)j] < best[full * (size_t)S + (size_t)end])
            end = j;
    double len = best[full * (size_t)S + (size_t)end];
    size_t mask = full;
    for (int32_t k = S - 1, j = end; k >= 0; k--) {
        order[k] = j;
        int32_t prev = from[mask * (size_t)S + (size_t)j];
        mask &= ~((size_t)1 << j);
        j = prev;
    }
    return len;
}

/* Nearest neighbour from every start, the best then improved by 2-opt
 * (reversing a stretch, ends included) until no reversal helps. */
static double path_heuristic(int32_t S, const double *dist, int32_t *order, int32_t *tmp, char *used)
{
    double best = INFINITY;
    for (int32_t s0 = 0; s0 < S; s0++) {
        memset(used, 0, (size_t)S);
        tmp[0] = s0;
        used[s0] = 1;
        for (int32_t k = 1; k < S; k++) {
            int32_t next = -1;
            for (int32_t j = 0; j < S; j++)
                if (!used[j] && (next < 0 || dist[(size_t)tmp[k - 1] * (size_t)S + (size_t)j] <
                                                 dist[(size_t)tmp[k - 1] * (size_t)S + (size_t)next]))
                    next = j;
            tmp[k] = next;
            used[next] = 1;
        }
        double len = path_length(S, dist, tmp);
        if (len < best) {
            best = len;
            memcpy(order, tmp, (size_t)S * sizeof *order);
        }
    }
#define D(a, b) dist[(size_t)(a) * (size_t)S + (size_t)(b)]
    for (int improved = 1, sweeps = 0; improved && sweeps < 100; sweeps++) {
        improved = 0;
        for (int32_t i = 0; i < S - 1; i++)
            for (int32_t j = i + 1; j < S; j++) {
                double before = (i > 0 ? D(order[i - 1], order[i]) : 0) + (j < S - 1 ? D(order[j], order[j + 1]) : 0);
                double after = (i > 0 ? D(order[i - 1], order[j]) : 0) + (j < S - 1 ? D(order[i], order[j + 1]) : 0);
                if (after < before - 1e-12 * fmax(1.0, before)) {
                    for (int32_t a = i, b = j; a < b; a++, b--) {
                        int32_t t = order[a];
                        order[a] = order[b];
                        order[b] = t;
                    }
                    improved = 1;
                }
            }
    }
#undef D
    return path_length(S, dist, order);
}

/* ---- evaluating an assignment ------------------------------------------------------ */

typedef struct {
    matcher m;
    int32_t *members;     /* [n]: group g's devices at [g R, (g+1) R)      */
    int32_t *fill;        /* [S]                                          */
    int32_t *pos;         /* [n]: a device's index among its group's       */
    double *mcost;        /* [R * R]                                      */
    double *dist;         /* [S * S]                                      */
    int32_t *order, *tmp; /* [S]                                          */
    char *used;           /* [S]                                          */
    double *hk;           /* [2^S * S] when S <= GCMA_HELD_KARP_MAX        */
    int8_t *hk_from;
    double *dsum;   /* [n * S]: local search, sum of dp to each group */
    int32_t *perm;  /* [n]                                          */
    int32_t *count; /* [S]                                          */
    /* Pair costs already computed: a group is known by the sum of its
     * devices' random keys, a pair by its two groups' (a direct-mapped
     * cache; a child shares most groups with its parents). */
    uint64_t *key;               /* [n]                                          */
    uint64_t *group_key;         /* [S]                                          */
    uint64_t *cache_a, *cache_b; /* [GCMA_CACHE]                         */
    double *cache_cost;          /* [GCMA_CACHE]                         */
} workspace;

#define GCMA_CACHE (1u << 16)

static void workspace_free(workspace *w)
{
    matcher_free(&w->m);
    free(w->members);
    free(w->fill);
    free(w->pos);
    free(w->mcost);
    free(w->dist);
    free(w->order);
    free(w->tmp);
    free(w->used);
    free(w->hk);
    free(w->hk_from);
    free(w->dsum);
    free(w->perm);
    free(w->count);
    free(w->key);
    free(w->group_key);
    free(w->cache_a);
    free(w->cache_b);
    free(w->cache_cost);
}

static int workspace_init(workspace *w, const gcma_problem *p)
{
    memset(w, 0, sizeof *w);
    size_t n = (size_t)p->n, S = (size_t)p->S, R = (size_t)p->R;
    int ok = matcher_init(&w->m, p->R) == 0;
    w->members = malloc((n + 1) * sizeof *w->members);
    w->fill = malloc((S + 1) * sizeof *w->fill);
    w->pos = malloc((n + 1) * sizeof *w->pos);
    w->mcost = malloc((R * R + 1) * sizeof *w->mcost);
    w->dist = malloc((S * S + 1) * sizeof *w->dist);
    w->order = malloc((S + 1) * sizeof *w->order);
    w->tmp = malloc((S + 1) * sizeof *w->tmp);
    w->used = malloc(S + 1);
    w->dsum = malloc((n * S + 1) * sizeof *w->dsum);
    w->perm = malloc((n + 1) * sizeof *w->perm);
    w->count = malloc((S + 1) * sizeof *w->count);
    w->key = malloc((n + 1) * sizeof *w->key);
    w->group_key = malloc((S + 1) * sizeof *w->group_key);
    w->cache_a = calloc(GCMA_CACHE, sizeof *w->cache_a);
    w->cache_b = calloc(GCMA_CACHE, sizeof *w->cache_b);
    w->cache_cost = malloc(GCMA_CACHE * sizeof *w->cache_cost);
    ok = ok && w->members && w->fill && w->pos && w->mcost && w->dist && w->order && w->tmp && w->used && w->dsum &&
         w->perm && w->count && w->key && w->group_key && w->cache_a && w->cache_b && w->cache_cost;
    if (ok) {
        rng r = { 0x6b6579ull }; /* fixed: the keys only name groups */
        for (size_t d = 0; d < n; d++)
            w->key[d] = rng_next(&r) | 1;
    }
    if (ok && p->S > 2 && p->S <= GCMA_HELD_KARP_MAX) {
        size_t cells = ((size_t)1 << S) * S;
        w->hk = malloc(cells * sizeof *w->hk);
        w->hk_from = malloc(cells);
        ok = w->hk && w->hk_from;
    }
    if (!ok)
        workspace_free(w);
    return ok ? 0 : -1;
}

static double open_path(workspace *w, int32_t S, const double *dist, int32_t *order)
{
    if (S <= 2) {
        for (int32_t k = 0; k < S; k++)
            order[k] = k;
        return S == 2 ? dist[1] : 0.0;
    }
    if (S <= GCMA_HELD_KARP_MAX && w->hk)
        return held_karp(S, dist, order, w->hk, w->hk_from);
    return path_heuristic(S, dist, order, w->tmp, w->used);
}

double gcma_open_path(int32_t S, const double *dist, int32_t *order)
{
    workspace w;
    memset(&w, 0, sizeof w);
    double len = INFINITY;
    w.tmp = malloc(((size_t)S + 1) * sizeof *w.tmp);
    w.used = malloc((size_t)S + 1);
    if (S >= 1 && S <= GCMA_HELD_KARP_MAX && S > 2) {
        w.hk = malloc(((size_t)1 << S) * (size_t)S * sizeof *w.hk);
        w.hk_from = malloc(((size_t)1 << S) * (size_t)S);
    }
    if (S >= 1 && w.tmp && w.used && (S <= 2 || S > GCMA_HELD_KARP_MAX || (w.hk && w.hk_from)))
        len = open_path(&w, S, dist, order);
    workspace_free(&w);
    return len;
}

/* The members of each group; 0, or -1 when unbalanced. */
static int gather(const gcma_problem *p, workspace *w, const int32_t *group_of)
{
    memset(w->fill, 0, (size_t)p->S * sizeof *w->fill);
    for (int32_t d = 0; d < p->n; d++) {
        int32_t g = group_of[d];
        if (g < 0 || g >= p->S || w->fill[g] >= p->R)
            return -1;
        w->pos[d] = w->fill[g];
        w->members[g * p->R + w->fill[g]++] = d;
    }
    return 0;
}

/* Fill w->mcost with the pipeline costs from group a's devices (rows) to b's. */
static void pair_costs(const gcma_problem *p, workspace *w, int32_t a, int32_t b)
{
    int32_t R = p->R;
    for (int32_t i = 0; i < R; i++) {
        const double *row = p->pp + (size_t)w->members[a * R + i] * (size_t)p->n;
        for (int32_t j = 0; j < R; j++)
            w->mcost[(size_t)i * (size_t)R + (size_t)j] = row[w->members[b * R + j]];
    }
}

static double evaluate(const gcma_problem *p, workspace *w, const int32_t *group_of, int32_t *dev, double *dp_out,
                       double *pp_out)
{
    int32_t S = p->S, R = p->R;
    if (gather(p, w, group_of))
        return INFINITY;
    double dp = 0.0;
    for (int32_t g = 0; g < S; g++)
        for (int32_t i = 0; i < R; i++) {
            const double *row = p->dp + (size_t)w->members[g * R + i] * (size_t)p->n;
            double sum = 0.0;
            for (int32_t j = 0; j < R; j++)
                sum += row[w->members[g * R + j]];
            dp = fmax(dp, sum);
        }
    for (int32_t g = 0; g < S; g++) {
        w->group_key[g] = 0;
        for (int32_t i = 0; i < R; i++)
            w->group_key[g] += w->key[w->members[g * R + i]];
    }
    for (int32_t a = 0; a < S; a++) {
        w->dist[(size_t)a * (size_t)S + (size_t)a] = 0.0;
        for (int32_t b = a + 1; b < S; b++) {
            /* Links are symmetric, so is the pair's cost: key it unordered. */
            uint64_t ka = w->group_key[a] < w->group_key[b] ? w->group_key[a] : w->group_key[b];
            uint64_t kb = w->group_key[a] ^ w->group_key[b] ^ ka;
            uint64_t h = (ka * 0x9e3779b97f4a7c15ull) ^ (kb * 0xc2b2ae3d27d4eb4full);
            size_t slot = (size_t)(h >> 40) & (GCMA_CACHE - 1);
            double c;
            if (w->cache_a[slot] == ka && w->cache_b[slot] == kb) {
                c = w->cache_cost[slot];
            } else {
                pair_costs(p, w, a, b);
                c = bottleneck(&w->m, w->mcost);
                w->cache_a[slot] = ka;
                w->cache_b[slot] = kb;
                w->cache_cost[slot] = c;
            }
            w->dist[(size_t)a * (size_t)S + (size_t)b] = w->dist[(size_t)b * (size_t)S + (size_t)a] = c;
        }
    }
    double pp = open_path(w, S, w->dist, w->order);
    if (dev) {
        /* Lanes: stage 0 in member order, then each along the matching. */
        for (int32_t r = 0; r < R; r++)
            dev[r] = w->members[w->order[0] * R + r];
        for (int32_t s = 1; s < S; s++) {
            pair_costs(p, w, w->order[s - 1], w->order[s]);
            bottleneck(&w->m, w->mcost);
            for (int32_t r = 0; r < R; r++)
                dev[s * R + r] = w->members[w->order[s] * R + w->m.col_of[w->pos[dev[(s - 1) * R + r]]]];
        }
    }
    if (dp_out)
        *dp_out = dp;
    if (pp_out)
        *pp_out = pp;
    return dp + 2.0 * pp;
}

double gcma_cost(const gcma_problem *p, const int32_t *group_of, int32_t *dev, double *dp_cost, double *pp_cost)
{
    workspace w;
    if (workspace_init(&w, p))
        return INFINITY;
    double c = evaluate(p, &w, group_of, dev, dp_cost, pp_cost);
    workspace_free(&w);
    return c;
}

/* Our count of one evaluation's elementary steps, for the work cap: the
 * local search's n^2, the data-parallel n R, the matchings' R^2 each (a
 * few augmentations after the greedy start), and the path. */
static double eval_work(const gcma_problem *p)
{
    double n = p->n, S = p->S, R = p->R;
    double match = R * R * 4.0;
    double path = S <= 2 ? 1.0 : S <= GCMA_HELD_KARP_MAX ? ldexp(1.0, p->S) * S * S : S * S * S * 4.0;
    return n * n * 2.0 + n * R + S * (S - 1) / 2.0 * match + path;
}

/* ---- the genetic algorithm ------------------------------------------------------------ */

static void random_assignment(const gcma_problem *p, rng *r, int32_t *perm, int32_t *group_of)
{
    for (int32_t i = 0; i < p->n; i++)
        perm[i] = i;
    shuffle(r, perm, p->n);
    for (int32_t i = 0; i < p->n; i++)
        group_of[perm[i]] = i / p->R;
}

/* The child: parent a, with `copy` random devices in parent b's group, re-balanced. */
static void crossover(const gcma_problem *p, workspace *w, rng *r, int32_t copy, const int32_t *a, const int32_t *b,
                      int32_t *child)
{
    int32_t n = p->n, S = p->S, R = p->R;
    memcpy(child, a, (size_t)n * sizeof *child);
    for (int32_t k = 0; k < copy; k++) {
        int32_t d = rng_below(r, n);
        child[d] = b[d];
    }
    memset(w->count, 0, (size_t)S * sizeof *w->count);
    for (int32_t d = 0; d < n; d++)
        w->count[child[d]]++;
    for (int32_t i = 0; i < n; i++)
        w->perm[i] = i;
    shuffle(r, w->perm, n);
    for (int32_t i = 0; i < n; i++) {
        int32_t d = w->perm[i];
        if (w->count[child[d]] <= R)
            continue;
        int32_t g = rng_below(r, S);
        while (w->count[g] >= R)
            g = (g + 1) % S;
        w->count[child[d]]--;
        w->count[g]++;
        child[d] = g;
    }
}

/* One pass of pair exchanges on the partition objective (see the top). */
static void local_search(const gcma_problem *p, workspace *w, rng *r, int32_t *group_of)
{
    int32_t n = p->n, S = p->S;
    if (S < 2 || p->R < 2)
        return; /* every exchange leaves the objective as it is */
    memset(w->dsum, 0, (size_t)n * (size_t)S * sizeof *w->dsum);
    for (int32_t v = 0; v < n; v++) {
        const double *row = p->dp + (size_t)v * (size_t)n;
        double *ds = w->dsum + (size_t)v * (size_t)S;
        for (int32_t u = 0; u < n; u++)
            ds[group_of[u]] += row[u];
    }
    for (int32_t i = 0; i < n; i++)
        w->perm[i] = i;
    shuffle(r, w->perm, n);
    for (int32_t i = 0; i < n; i++) {
        int32_t u = w->perm[i], A = group_of[u], best = -1;
        const double *du = w->dsum + (size_t)u * (size_t)S, *pu = p->dp + (size_t)u * (size_t)n;
        double gain = 0.0;
        for (int32_t v = 0; v < n; v++) {
            int32_t B = group_of[v];
            if (B == A)
                continue;
            const double *dv = w->dsum + (size_t)v * (size_t)S;
            double delta = (du[B] - pu[v] - du[A]) + (dv[A] - pu[v] - dv[B]);
            if (delta < gain - 1e-12 * (fabs(du[A]) + fabs(dv[B]))) {
                gain = delta;
                best = v;
            }
        }
        if (best < 0)
            continue;
        int32_t B = group_of[best];
        const double *pv = p->dp + (size_t)best * (size_t)n;
        for (int32_t x = 0; x < n; x++) {
            double *dx = w->dsum + (size_t)x * (size_t)S;
            /* dp is symmetric: dp[x][u] = dp[u][x]. */
            dx[A] += pv[x] - pu[x];
            dx[B] += pu[x] - pv[x];
        }
        group_of[u] = B;
        group_of[best] = A;
    }
}

static int result_alloc(const gcma_problem *p, gcma_result *out)
{
    memset(out, 0, sizeof *out);
    out->group_of = malloc(((size_t)p->n + 1) * sizeof *out->group_of);
    out->dev = malloc(((size_t)p->n + 1) * sizeof *out->dev);
    out->cost = INFINITY;
    if (out->group_of && out->dev)
        return 0;
    gcma_result_free(out);
    return -1;
}

static double finish(const gcma_problem *p, workspace *w, gcma_result *out)
{
    return out->cost = evaluate(p, w, out->group_of, out->dev, &out->dp_cost, &out->pp_cost);
}

int gcma_search(const gcma_problem *p, const gcma_config *cfg, gcma_result *out)
{
    int32_t n = p->n, P = cfg->population > 1 ? cfg->population : 2, T = cfg->trials > 0 ? cfg->trials : 0;
    if (cfg->work_budget > 0) {
        double evals = (double)P + T, fits = cfg->work_budget / eval_work(p);
        if (evals > fits) {
            /* A tenth of what fits for the population (at least 4), the rest for trials. */
            int32_t P2 = (int32_t)(fits / 10) < 4 ? 4 : (int32_t)(fits / 10);
            P = P2 < P ? P2 : P;
            T = fits - P > 0 ? (int32_t)(fits - P) : 0;
        }
    }
    workspace w;
    int32_t *pop = malloc(((size_t)P * (size_t)n + 1) * sizeof *pop), *child = malloc(((size_t)n + 1) * sizeof *child);
    double *cost = malloc(((size_t)P + 1) * sizeof *cost);
    int rc = -1, have_ws = workspace_init(&w, p) == 0;
    if (!pop || !child || !cost || !have_ws || result_alloc(p, out))
        goto done;
    out->population = P;
    out->trials = T;
    rng r = { cfg->seed };
    int32_t best = 0, copy = cfg->crossover_copy > 0 ? cfg->crossover_copy : 1;
    for (int32_t i = 0; i < P; i++) {
        random_assignment(p, &r, w.perm, pop + (size_t)i * (size_t)n); /* drawn for each, so seeds change no other */
        if (i < cfg->n_seeds && cfg->seeds)
            memcpy(pop + (size_t)i * (size_t)n, cfg->seeds + (size_t)i * (size_t)n, (size_t)n * sizeof *pop);
        cost[i] = evaluate(p, &w, pop + (size_t)i * (size_t)n, NULL, NULL, NULL);
        if (cost[i] < cost[best])
            best = i;
    }
    for (int32_t t = 0; t < T; t++) {
        int32_t a = rng_below(&r, P), b = rng_below(&r, P - 1);
        b += b >= a;
        crossover(p, &w, &r, copy, pop + (size_t)a * (size_t)n, pop + (size_t)b * (size_t)n, child);
        local_search(p, &w, &r, child);
        double c = evaluate(p, &w, child, NULL, NULL, NULL);
        int32_t worst = 0;
        for (int32_t i = 1; i < P; i++)
            if (cost[i] > cost[worst])
                worst = i;
        if (c < cost[worst]) {
            memcpy(pop + (size_t)worst * (size_t)n, child, (size_t)n * sizeof *child);
            cost[worst] = c;
            if (c < cost[best])
                best = worst;
        }
    }
    memcpy(out->group_of, pop + (size_t)best * (size_t)n, (size_t)n * sizeof *out->group_of);
    finish(p, &w, out);
    rc = 0;
done:
    if (rc)
        gcma_result_free(out);
    if (have_ws)
        workspace_free(&w);
    free(pop);
    free(child);
    free(cost);
    return rc;
}

int gcma_random(const gcma_problem *p, const gcma_config *cfg, gcma_result *out)
{
    workspace w;
    int32_t *cand = malloc(((size_t)p->n + 1) * sizeof *cand);
    int rc = -1, have_ws = workspace_init(&w, p) == 0;
    if (!cand || !have_ws || result_alloc(p, out))
        goto done;
    rng r = { cfg->seed };
    double best = INFINITY;
    for (int32_t i = 0; i < (cfg->random_samples > 0 ? cfg->random_samples : 1); i++) {
        random_assignment(p, &r, w.perm, cand);
        double c = evaluate(p, &w, cand, NULL, NULL, NULL);
        if (c < best) {
            best = c;
            memcpy(out->group_of, cand, (size_t)p->n * sizeof *cand);
        }
    }
    out->trials = cfg->random_samples;
    finish(p, &w, out);
    rc = 0;
done:
    if (rc)
        gcma_result_free(out);
    if (have_ws)
        workspace_free(&w);
    free(cand);
    return rc;
}

/* ---- the fence pass's side ------------------------------------------------------------------ */

static void model_link(const void *ctx, int32_t a, int32_t b, double *bw, double *lat)
{
    fence_link_of(ctx, a, b, bw, lat);
}

/* Can the fence pass use S stages x R replicas? */
static int shape_fits(const fence_model *m, const pass_options *opt, int32_t S, int32_t R)
{
    return (int64_t)S * R == m->n_devices && S <= m->n_fwd && (opt->stages <= 0 || S == opt->stages) &&
           (opt->replicas <= 0 || R == opt->replicas) && (opt->max_replicas <= 0 || R <= opt->max_replicas) &&
           (m->batch <= 0 || m->batch % R == 0);
}

int gcma_schedule(const fence_model *m, const pass_options *opt, int random, int32_t *S_out, int32_t *R_out,
                  int32_t **dev_out, int32_t **end_out, double *cost_out)
{
    int32_t N = m->n_devices, shapes = 0;
    for (int32_t S = 1; S <= N; S++)
        shapes += N % S == 0 && shape_fits(m, opt, S, N / S);
    *dev_out = *end_out = NULL;
    *cost_out = INFINITY;
    if (shapes == 0)
        return 1;
    gcma_links links;
    if (gcma_links_init(&links, N, model_link, m))
        return -1;
    gcma_config cfg;
    gcma_config_default(&cfg);
    cfg.work_budget /= shapes; /* the whole schedule stays within the budget */
    int rc = 0;
    for (int32_t S = 1; S <= N && rc == 0; S++) {
        int32_t R = N / S;
        if (N % S != 0 || !shape_fits(m, opt, S, R))
            continue;
        int32_t *end = malloc(((size_t)S + 1) * sizeof *end);
        if (!end || fence_uniform_cuts(m, S, end)) {
            free(end);
            rc = -1;
            break;
        }
        /* c_a: the most a lane sends at a cut (its 1/R of the micro-batch);
         * c_g: the largest stage's parameter (= gradient) bytes. */
        double c_a = 0.0, c_g = 0.0;
        for (int32_t s = 0; s < S; s++) {
            if (s < S - 1)
                c_a = fmax(c_a, m->cut_fwd[end[s]] / R);
            c_g = fmax(c_g, m->param_bytes[end[s] + 1] - m->param_bytes[s > 0 ? end[s - 1] + 1 : 0]);
        }
        /* Megatron's placement of this shape (device d in stage d / R, file
         * order) seeds the population: the search then never returns what
         * its own model prices worse (the random baseline draws its own). */
        int32_t *megatron = malloc(((size_t)N + 1) * sizeof *megatron);
        if (!megatron) {
            free(end);
            rc = -1;
            break;
        }
        for (int32_t d = 0; d < N; d++)
            megatron[d] = d / R;
        cfg.seeds = random ? NULL : megatron;
        cfg.n_seeds = random ? 0 : 1;
        gcma_problem p;
        gcma_result res;
        int failed = gcma_problem_init(&p, &links, S, R, c_a, c_g) || gcma_search(&p, &cfg, &res);
        free(megatron);
        if (failed) {
            gcma_problem_free(&p);
            free(end);
            rc = -1;
            break;
        }
        if (res.cost < *cost_out) {
            free(*dev_out);
            free(*end_out);
            *dev_out = res.dev;
            *end_out = end;
            res.dev = NULL;
            end = NULL;
            *cost_out = res.cost;
            *S_out = S;
            *R_out = R;
        }
        free(end);
        gcma_result_free(&res);
        gcma_problem_free(&p);
    }
    /* The random baseline: the shape the search chose, every device in a
     * slot drawn at random (Megatron's placement with the devices listed
     * in a random order: no matching of lanes, no order of groups). */
    if (rc == 0 && random && *dev_out) {
        rng r = { (opt->seed ? opt->seed : 1) * 0x9e3779b97f4a7c15ull };
        for (int32_t i = 0; i < N; i++)
            (*dev_out)[i] = i;
        shuffle(&r, *dev_out, N);
    }
    gcma_links_free(&links);
    if (rc || !*dev_out) {
        free(*dev_out);
        free(*end_out);
        *dev_out = *end_out = NULL;
        return rc ? rc : 1;
    }
    return 0;
}
