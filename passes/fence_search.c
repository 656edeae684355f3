/* fence_search.c: OP-Fence's search (FusionLLM, our reading: papers.md),
 * the default scheduler of the fence pass (fence.c).
 *
 *   1. fences: devices joined by links of similar bandwidth.  The links'
 *      bandwidths are sorted; at the widest gap between neighbours (a ratio
 *      of at least 4) the cluster splits, and the fences are the groups
 *      still joined by links above it;
 *   2. the fences are chained in the order that makes the links between
 *      consecutive fences cheapest (every order, for up to 7 fences; else
 *      nearest neighbour), and inside a fence the devices go fastest first;
 *   3. windows of consecutive fences, every replica count R that divides
 *      the micro-batch, and stage counts S with S*R devices in the window
 *      (the fastest of them) are the candidates: a dynamic program cuts the
 *      forward ops into S runs minimising the pipeline's bottleneck (a
 *      stage's compute on its slowest replica, or a cut's transfer, per
 *      micro-batch), and the cost model gives the step time (fence_cost.c);
 *      the cut of equal layers a stage is priced too (it can balance the
 *      all-reduce and the update, which the DP does not see).
 *      Under --compress the cuts are priced again at the sizes the compress
 *      pass will send (with T* from the dense cut, then from the compressed
 *      one), so a plan that crosses a slow link compressed can win;
 *   4. the fastest candidate that fits in its devices' memory wins (fewer
 *      devices on a tie); when none fits, the fastest.
 *
 * How much is searched.  Up to FENCE_ALL_WINDOWS windows (22 fences) every
 * window is tried, and up to FENCE_ALL_S stage counts per (window, R) every
 * count: clusters of up to 64 devices are searched exhaustively.  Beyond:
 *   - windows grow from each fence one fence at a time while the window's
 *     best improves (once more after it stops: FENCE_PATIENCE), since a
 *     window is worth widening only while the links it takes in pay;
 *   - stage counts are tried on a geometric grid (ratio 1.25), then refined
 *     by bisection on either side of the grid's best: the step time of S
 *     stages is smooth in S (fill, drain and cut sizes change slowly);
 * and the whole search stops widening windows when FENCE_WORK_BUDGET
 * elementary steps are spent (deterministic, unlike a clock): every single
 * fence is still searched.  1,024 devices (64 sites of two 8-GPU hosts:
 * 128 fences) take about 2.5 s (tests/unit/test_fence_scale.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fence_cost.h"
#include "fence_cuts.h"
#include "fence_search.h"

#define FENCE_GAP_RATIO   4.0  /* bandwidths this far apart are different fences      */
#define FENCE_MAX_PERMUTE 7    /* up to this many fences, every chain order is tried   */
#define FENCE_ALL_WINDOWS 256  /* up to this many windows, every one is tried          */
#define FENCE_ALL_S       64   /* up to this many stage counts, every one is tried     */
#define FENCE_S_RATIO     1.25 /* the stage-count grid beyond                          */
#define FENCE_PATIENCE    1    /* windows widened past the last improvement            */
#define FENCE_WORK_BUDGET 4e9  /* elementary steps (DP cells, simulated sends) in all  */

/* ---- fences ---------------------------------------------------------------- */

static int by_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int32_t find_root(int32_t *parent, int32_t x)
{
    while (parent[x] != x)
        x = parent[x] = parent[parent[x]];
    return x;
}

int32_t fence_find(const fence_model *m, int32_t *fence_of)
{
    int32_t N = m->n_devices;
    size_t n_links = 0;
    double *bws = malloc(((size_t)N * (size_t)N / 2 + 1) * sizeof *bws), threshold = 0.0;
    int32_t *parent = malloc(((size_t)N + 1) * sizeof *parent);
    for (int32_t d = 0; d < N; d++)
        fence_of[d] = d;
    if (!bws || !parent) {
        free(bws);
        free(parent);
        return N;
    }
    for (int32_t a = 0; a < N; a++)
        for (int32_t b = a + 1; b < N; b++) {
            double bw, lat;
            fence_link_of(m, a, b, &bw, &lat);
            bws[n_links++] = bw;
        }
    qsort(bws, n_links, sizeof *bws, by_double);
    double widest = FENCE_GAP_RATIO;
    for (size_t i = 1; i < n_links; i++)
        if (bws[i - 1] > 0 && bws[i] / bws[i - 1] >= widest)
            widest = bws[i] / bws[i - 1], threshold = bws[i];
    free(bws);
    /* Union devices joined by links at or above the threshold; each fence
     * is named by its first device, then numbered 0.. in that order. */
    for (int32_t d = 0; d < N; d++)
        parent[d] = d;
    for (int32_t a = 0; a < N; a++)
        for (int32_t b = a + 1; b < N; b++) {
            double bw, lat;
            fence_link_of(m, a, b, &bw, &lat);
            int32_t ra = find_root(parent, a), rb = find_root(parent, b);
            if (bw >= threshold && ra != rb) {
                if (ra < rb)
                    parent[rb] = ra;
                else
                    parent[ra] = rb;
            }
        }
    int32_t n = 0;
    for (int32_t d = 0; d < N; d++)
        fence_of[d] = -1;
    for (int32_t d = 0; d < N; d++) {
        int32_t r = find_root(parent, d);
        if (fence_of[r] < 0)
            fence_of[r] = n++;
        fence_of[d] = fence_of[r];
    }
    free(parent);
    return n;
}

/* cost[a * F + b]: joining fences a and b, their slowest link's time for a MiB. */
static double *fence_link_costs(const fence_model *m, const int32_t *fence_of, int32_t F)
{
    double *cost = calloc((size_t)F * (size_t)F + 1, sizeof *cost);
    if (!cost)
        return NULL;
    for (int32_t x = 0; x < m->n_devices; x++)
        for (int32_t y = 0; y < m->n_devices; y++) {
            double bw, lat;
            if (fence_of[x] == fence_of[y])
                continue;
            fence_link_of(m, x, y, &bw, &lat);
            double *c = &cost[(size_t)fence_of[x] * F + fence_of[y]];
            *c = fmax(*c, estimate_transfer_seconds(1 << 20, bw, lat));
        }
    return cost;
}

/* Heap's algorithm, one swap a call: perm[0, n) becomes the next
 * permutation and 1 is returned, or 0 after the last.  c[0, n) zeroed and
 * *i = 0 before the first call. */
static int next_permutation(int32_t *perm, int32_t *c, int32_t n, int32_t *i)
{
    while (*i < n && c[*i] >= *i)
        c[(*i)++] = 0;
    if (*i >= n)
        return 0;
    int32_t j = *i % 2 ? c[*i] : 0, t = perm[j];
    perm[j] = perm[*i];
    perm[*i] = t;
    c[*i]++;
    *i = 1;
    return 1;
}

/* The chain of fences: every order for a few, else nearest neighbour. */
static void order_fences(const double *cost, int32_t F, int32_t *order)
{
    for (int32_t i = 0; i < F; i++)
        order[i] = i;
    if (F <= 2 || !cost)
        return;
    if (F <= FENCE_MAX_PERMUTE) {
        int32_t perm[FENCE_MAX_PERMUTE], c[FENCE_MAX_PERMUTE] = { 0 };
        double best = INFINITY;
        for (int32_t i = 0; i < F; i++)
            perm[i] = i;
        int32_t i = 0;
        do { /* every permutation */
            double len = 0.0;
            for (int32_t k = 1; k < F; k++)
                len += cost[(size_t)perm[k - 1] * F + perm[k]];
            if (len < best) {
                best = len;
                memcpy(order, perm, (size_t)F * sizeof *perm);
            }
        } while (next_permutation(perm, c, F, &i));
        return;
    }
    char *used = calloc((size_t)F, 1);
    if (!used)
        return;
    used[0] = 1;
    for (int32_t k = 1; k < F; k++) {
        int32_t best = -1;
        for (int32_t f = 0; f < F; f++)
            if (!used[f] && (best < 0 || cost[(size_t)order[k - 1] * F + f] < cost[(size_t)order[k - 1] * F + best]))
                best = f;
        order[k] = best;
        used[best] = 1;
    }
    free(used);
}

/* ---- regions inside a fence ------------------------------------------------ */

/* A fence joins devices whose links are within FENCE_GAP_RATIO of each
 * other, so one fence may hold several regions (dtfm-worldwide: eight
 * cities, 2 Gbps inside, 0.34-1.12 Gbps between, are one fence).  The
 * stages of a candidate are cut from the chain in order, so the order of
 * the regions inside the fence decides which links the pipeline crosses:
 * file order crosses seoul->london (0.342 Gbps) where seoul, tokyo, oregon,
 * ohio, virginia, ireland, london, frankfurt crosses nothing under 0.75.
 * A pipeline's micro-batches queue on its slowest link, so the order that
 * makes the slowest link between consecutive regions fastest wins, and
 * among those (within 1%) the one with the least summed time for a MiB
 * (bandwidth and latency: the fill and the drain); with a parameter
 * shared by the first and last stages, the link that closes the ring too.  Every order for up to
 * FENCE_MAX_PERMUTE + 1 regions (8! = 40,320 chains of 7 links), else the
 * best nearest-neighbour chain over every start.  Devices keep their
 * order inside a region.  chain[0, n): one fence's devices, reordered in
 * place; nothing changes without a cluster or with one region.  ring: the
 * regions will be a ring whatever the model (search_across_regions'
 * all-reduce). */
static double chain_cost(const double *inv_bw, const double *mib, int32_t G, const int32_t *order, int cycle,
                         double *sum)
{
    double worst = 0.0;
    *sum = 0.0;
    for (int32_t k = 1; k < G + (cycle && G > 2); k++) {
        size_t ab = (size_t)order[k - 1] * G + order[k % G];
        worst = fmax(worst, inv_bw[ab]);
        *sum += mib[ab];
    }
    return worst;
}

static int better_chain(double worst, double sum, double best_worst, double best_sum)
{
    if (worst < best_worst * 0.99)
        return 1;
    return worst <= best_worst * 1.01 && sum < best_sum;
}

static void order_regions_in_fence(const fence_model *m, int32_t *chain, int32_t n, int ring)
{
    if (!m->c || n < 2)
        return;
    int32_t *region = malloc((size_t)n * sizeof *region), *first = malloc((size_t)n * sizeof *first);
    int32_t *order = malloc((size_t)n * sizeof *order), *perm = malloc((size_t)n * sizeof *perm);
    int32_t *copy = malloc((size_t)n * sizeof *copy);
    double *inv_bw = NULL, *mib = NULL;
    int32_t G = 0;
    if (!region || !first || !order || !perm || !copy)
        goto done;
    /* The fence's regions, numbered 0.. by first appearance in the chain. */
    for (int32_t i = 0; i < n; i++) {
        int32_t r = m->c->hosts[m->c->devices[chain[i]].host].region, g = 0;
        while (g < G && m->c->hosts[m->c->devices[chain[first[g]]].host].region != r)
            g++;
        if (g == G)
            first[G++] = i;
        region[i] = g;
    }
    if (G < 2)
        goto done;
    inv_bw = malloc((size_t)G * (size_t)G * sizeof *inv_bw);
    mib = malloc((size_t)G * (size_t)G * sizeof *mib);
    if (!inv_bw || !mib)
        goto done;
    for (int32_t a = 0; a < G; a++)
        for (int32_t b = 0; b < G; b++) {
            double bw = INFINITY, lat = 0.0;
            if (a != b)
                fence_link_of(m, chain[first[a]], chain[first[b]], &bw, &lat);
            inv_bw[(size_t)a * G + b] = bw > 0 ? 1.0 / bw : INFINITY;
            mib[(size_t)a * G + b] = a == b ? 0.0 : estimate_transfer_seconds(1 << 20, bw, lat);
        }
    /* A parameter read by the first stage and the last (GPT-2's tied
     * embedding) crosses between them each step, as many bytes as a
     * link's activations (GPT-3 XL: 412 MB against 128 x 5 MB): then the
     * chain is priced as a ring, the last region back to the first. */
    int cycle = ring || m->shared_bytes > 0;
    double best_worst = INFINITY, best_sum = INFINITY, sum, worst;
    for (int32_t g = 0; g < G; g++)
        order[g] = g;
    if (G <= FENCE_MAX_PERMUTE + 1) {
        int32_t c[FENCE_MAX_PERMUTE + 1] = { 0 };
        for (int32_t g = 0; g < G; g++)
            perm[g] = g;
        int32_t i = 0;
        do { /* every permutation */
            worst = chain_cost(inv_bw, mib, G, perm, cycle, &sum);
            if (better_chain(worst, sum, best_worst, best_sum)) {
                best_worst = worst, best_sum = sum;
                memcpy(order, perm, (size_t)G * sizeof *perm);
            }
        } while (next_permutation(perm, c, G, &i));
    } else {
        char *used = malloc((size_t)G);
        if (!used)
            goto done;
        for (int32_t s = 0; s < G; s++) { /* nearest neighbour (widest link) from each start */
            memset(used, 0, (size_t)G);
            perm[0] = s, used[s] = 1;
            for (int32_t k = 1; k < G; k++) {
                int32_t pick = -1;
                for (int32_t g = 0; g < G; g++)
                    if (!used[g] &&
                        (pick < 0 || inv_bw[(size_t)perm[k - 1] * G + g] < inv_bw[(size_t)perm[k - 1] * G + pick]))
                        pick = g;
                perm[k] = pick, used[pick] = 1;
            }
            worst = chain_cost(inv_bw, mib, G, perm, cycle, &sum);
            if (better_chain(worst, sum, best_worst, best_sum)) {
                best_worst = worst, best_sum = sum;
                memcpy(order, perm, (size_t)G * sizeof *perm);
            }
        }
        free(used);
    }
    /* Keep file order when it is as good (the chain changes only for a reason). */
    for (int32_t g = 0; g < G; g++)
        perm[g] = g;
    worst = chain_cost(inv_bw, mib, G, perm, cycle, &sum);
    if (!better_chain(best_worst, best_sum, worst, sum))
        goto done;
    memcpy(copy, chain, (size_t)n * sizeof *copy);
    for (int32_t k = 0, at = 0; k < G; k++)
        for (int32_t i = 0; i < n; i++)
            if (region[i] == order[k])
                chain[at++] = copy[i];
done:
    free(region);
    free(first);
    free(order);
    free(perm);
    free(copy);
    free(inv_bw);
    free(mib);
}

/* ---- the best candidate so far --------------------------------------------- */

void fence_best_free(fence_best *b)
{
    free(b->dev);
    free(b->end);
    memset(b, 0, sizeof *b);
    b->T = INFINITY;
}

/* Keep cd cut at end when it is better: fitting in memory first (when
 * memory_aware), then faster, then fewer devices.  Its T goes to *T_out. */
int fence_keep_if_better(fence_best *b, const fence_model *m, const candidate *cd, const int32_t *end, int memory_aware,
                         double *T_out, double *fill_out)
{
    double fill = 0.0, T = fence_evaluate(m, cd, end, NULL, memory_aware ? &fill : NULL);
    int fits = !memory_aware || fill <= 1.0;
    int32_t used = cd->S * cd->R, best_used = b->cd.S * b->cd.R;
    if (T_out)
        *T_out = fits ? T : INFINITY;
    if (fill_out)
        *fill_out = fill;
    if (b->dev) {
        int better = fits != b->fits ? fits : T < b->T * (1.0 - 1e-9) || (T <= b->T * (1.0 + 1e-9) && used < best_used);
        if (!better)
            return 0;
    }
    int32_t *dev = malloc((size_t)used * sizeof *dev), *e = malloc((size_t)cd->S * sizeof *e);
    if (!dev || !e) {
        free(dev);
        free(e);
        return -1;
    }
    memcpy(dev, cd->dev, (size_t)used * sizeof *dev);
    memcpy(e, end, (size_t)cd->S * sizeof *e);
    free(b->dev);
    free(b->end);
    b->T = T;
    b->fits = fits;
    b->cd = *cd;
    b->cd.dev = b->dev = dev;
    b->end = e;
    return 0;
}

/* ---- the search ------------------------------------------------------------ */

typedef struct {
    const fence_model *m;
    const pass_options *opt;
    int32_t M;
    int32_t *chain; /* [N] fences in order, fastest devices first inside each */
    int32_t *start; /* [F + 1] each fence's first position in the chain       */
    int32_t *rank;  /* [N] a window's device's place in its speed order        */
    int32_t *order; /* [N] scratch for the speed order                        */
    int32_t *picked, *cuts, *cuts2;
    int32_t *prefix_rank; /* [N + 1] the largest rank among a window's first i devices */
    fence_dp *dp;         /* the dense DP of the window's chain for the current R   */
    double work;          /* elementary steps spent                                  */
    fence_best *best;
} search;

static const fence_model *speed_model;
/* Devices ranked by their peak in the precision the graph computes in. */
static double device_speed(const cluster_device *d)
{
    return d->peak_flops[estimate_graph_peak_kind(speed_model->g)] / (d->slowdown >= 1.0 ? d->slowdown : 1.0);
}

static int by_speed_desc(const void *a, const void *b)
{
    double x = device_speed(&speed_model->devices[*(const int32_t *)a]);
    double y = device_speed(&speed_model->devices[*(const int32_t *)b]);
    if (x != y)
        return x < y ? 1 : -1;
    return (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b);
}

/* Each device of chain[lo, hi)'s place among the window's devices by
 * speed (fastest first, ties by place in the chain, so that a candidate of
 * alike devices takes a run of the chain, its regions in chain order):
 * rank[i] for chain[lo + i]. */
static const int32_t *rank_chain;
static int by_speed_then_place(const void *a, const void *b)
{
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    double x = device_speed(&speed_model->devices[rank_chain[i]]);
    double y = device_speed(&speed_model->devices[rank_chain[j]]);
    if (x != y)
        return x < y ? 1 : -1;
    return (i > j) - (i < j);
}

static void rank_window(search *x, int32_t lo, int32_t hi)
{
    int32_t W = hi - lo, *by_speed = x->picked; /* scratch: picked is free between candidates */
    for (int32_t i = 0; i < W; i++)
        by_speed[i] = i;
    speed_model = x->m;
    rank_chain = x->chain + lo;
    qsort(by_speed, (size_t)W, sizeof *by_speed, by_speed_then_place);
    for (int32_t i = 0; i < W; i++)
        x->rank[by_speed[i]] = i;
}

/* Could the compress pass compress anything between consecutive stages
 * of cd, whatever the cut?  Not when the largest a cut can carry crosses
 * the slowest lane within T* (the pass leaves faster transfers alone);
 * then a cut priced compressed is the dense one, and not worth a DP. */
static int compression_may_apply(const fence_model *m, const candidate *cd, double t_star)
{
    double bw = INFINITY;
    for (int32_t s = 0; s + 1 < cd->S; s++)
        for (int32_t r = 0; r < cd->R; r++) {
            double b, lat;
            fence_link_of(m, cd->dev[s * cd->R + r], cd->dev[(s + 1) * cd->R + r], &b, &lat);
            bw = fmin(bw, b);
        }
    return m->max_cut_tensor / cd->R / bw > t_star || m->max_cut_param / bw > t_star * cd->M;
}

/* No cut, compressed or not, runs the M micro-batches in less than M times
 * a stage's share of the compute: the whole forward and backward over S
 * stages, on the candidate's fastest device, a replica's share. */
static double compute_bound(const fence_model *m, const candidate *cd)
{
    double fastest = INFINITY;
    int32_t n = m->n_fwd;
    for (int32_t i = 0; i < cd->S * cd->R; i++) {
        int32_t r = m->row_of[cd->dev[i]];
        const double *t = m->time + (size_t)r * ((size_t)n + 1);
        fastest = fmin(fastest, t[n] / cd->R + m->launch[r] * (1.0 - 1.0 / cd->R) * m->n_ops[n]);
    }
    return cd->M * fastest / cd->S;
}

/* The candidate of S stages x R replicas on the S*R fastest devices of the
 * window chain[lo, hi) (ranked), in chain order: cut, priced, kept when
 * better.  Returns its step (INFINITY when it does not fit), or -1 on no memory. */
static double try_candidate(search *x, int32_t lo, int32_t hi, int32_t S, int32_t R)
{
    const fence_model *m = x->m;
    int32_t used = 0, n = m->n_fwd;
    for (int32_t i = 0; i < hi - lo; i++)
        if (x->rank[i] < S * R)
            x->picked[used++] = x->chain[lo + i];
    candidate cd = { S, R, x->M, x->picked };
    double T = INFINITY, t;
    /* The S*R fastest are the window's first: the shared table cuts it. */
    int shared = x->dp && x->prefix_rank[S * R] < S * R;
    x->work +=
        (shared ? (double)n * n / S : (double)n * n) + (double)S * S * (R + 2 * x->M) + m->read_start[m->g->n_values];
    double fill = 0.0;
    if ((shared ? fence_dp_cuts(x->dp, S, x->cuts) : fence_cut_dp(m, &cd, 0.0, 0, x->cuts)) != 0)
        return INFINITY;
    if (fence_keep_if_better(x->best, m, &cd, x->cuts, 1, &T, &fill))
        return -1;
    /* Equal layers a stage (Megatron's and DT-FM's cut): the DP balances
     * the pipeline's bottleneck, but the step also holds the all-reduce
     * and the update, which equal stages can balance better. */
    if (fence_uniform_cuts(m, S, x->cuts2) == 0) {
        if (fence_keep_if_better(x->best, m, &cd, x->cuts2, 1, &t, NULL))
            return -1;
        T = fmin(T, t);
    }
    /* The cut balances compute; when a stage then overfills its memory,
     * cut again with memory as a bound. */
    if (fill > 1.0) {
        x->work += (double)n * n;
        if (fence_cut_dp(m, &cd, 0.0, 1, x->cuts) == 0) {
            if (fence_keep_if_better(x->best, m, &cd, x->cuts, 1, &t, &fill))
                return -1;
            T = fmin(T, t);
        }
    }
    /* Under compression, cut again at the sizes the compress pass will send
     * for this T*, and once more for the T* that cut gives. */
    int32_t *prev = x->cuts, *cur = x->cuts2;
    for (int round = 0; m->compress != 0.0 && round < 2; round++) {
        double t_star = fence_t_star(m, &cd, prev);
        x->work += (double)n * n;
        if (!(t_star > 0) || (x->best->fits && compute_bound(m, &cd) >= x->best->T) ||
            !compression_may_apply(m, &cd, t_star) || fence_cut_dp(m, &cd, t_star, fill > 1.0, cur) != 0 ||
            memcmp(cur, prev, (size_t)S * sizeof *cur) == 0)
            break;
        if (fence_keep_if_better(x->best, m, &cd, cur, 1, &t, NULL))
            return -1;
        T = fmin(T, t);
        int32_t *swap = prev;
        prev = cur;
        cur = swap;
    }
    return T;
}

/* The best over S for one window and R: every S, or the grid and its
 * refinement (see the top).  Returns the best step found, -1 on no memory. */
static double search_stages(search *x, int32_t lo, int32_t hi, int32_t R)
{
    const fence_model *m = x->m;
    int32_t W = hi - lo, S_max = W / R < m->n_fwd ? W / R : m->n_fwd;
    double best = INFINITY, T;
    if (x->opt->stages > 0)
        return x->opt->stages <= S_max ? try_candidate(x, lo, hi, x->opt->stages, R) : INFINITY;
    if (S_max <= FENCE_ALL_S) {
        for (int32_t S = 1; S <= S_max; S++) {
            if ((T = try_candidate(x, lo, hi, S, R)) < 0)
                return -1;
            best = fmin(best, T);
        }
        return best;
    }
    /* The grid: 1..8, then each 1.25 times the last, and S_max. */
    int32_t grid[256], n = 0;
    for (int32_t S = 1; S <= S_max && n < 255; S = S < 8 ? S + 1 : (int32_t)ceil(S * FENCE_S_RATIO))
        grid[n++] = S;
    if (grid[n - 1] != S_max)
        grid[n++] = S_max;
    int32_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        if ((T = try_candidate(x, lo, hi, grid[i], R)) < 0)
            return -1;
        if (T < best)
            best = T, at = i;
    }
    /* Bisect the gaps on either side of the grid's best [a, b, c] until
     * no stage count between them is left untried. */
    int32_t a = at > 0 ? grid[at - 1] : grid[at], b = grid[at], c = at + 1 < n ? grid[at + 1] : grid[at];
    while (b - a > 1 || c - b > 1) {
        if (b - a > 1) {
            int32_t mid = a + (b - a) / 2;
            if ((T = try_candidate(x, lo, hi, mid, R)) < 0)
                return -1;
            if (T < best)
                c = b, b = mid, best = T;
            else
                a = mid;
        }
        if (c - b > 1) {
            int32_t mid = b + (c - b) / 2;
            if ((T = try_candidate(x, lo, hi, mid, R)) < 0)
                return -1;
            if (T < best)
                a = b, b = mid, best = T;
            else
                c = mid;
        }
    }
    return best;
}

/* Every R (dividing the micro-batch, within the options) on one window. */
static double search_window(search *x, int32_t f0, int32_t f1)
{
    const fence_model *m = x->m;
    const pass_options *opt = x->opt;
    int32_t lo = x->start[f0], hi = x->start[f1 + 1], W = hi - lo;
    double best = INFINITY;
    rank_window(x, lo, hi);
    x->prefix_rank[0] = -1;
    for (int32_t i = 0; i < W; i++)
        x->prefix_rank[i + 1] = x->rank[i] > x->prefix_rank[i] ? x->rank[i] : x->prefix_rank[i];
    for (int32_t R = 1; R <= W && (opt->max_replicas <= 0 || R <= opt->max_replicas); R++) {
        if ((m->batch > 0 && m->batch % R != 0) || (opt->replicas > 0 && R != opt->replicas))
            continue;
        int32_t S_max = W / R < m->n_fwd ? W / R : m->n_fwd;
        candidate chain = { S_max, R, x->M, x->chain + lo };
        x->dp = S_max > 0 ? fence_dp_new(m, &chain, 0.0, 0) : NULL;
        double T = x->dp || S_max == 0 ? search_stages(x, lo, hi, R) : -1;
        fence_dp_free(x->dp);
        x->dp = NULL;
        if (T < 0)
            return -1;
        best = fmin(best, T);
    }
    return best;
}

/* ---- after the search ------------------------------------------------------ */

/* Each region alone, searched as a window of its own.  A fence may join
 * regions whose links differ less than FENCE_GAP_RATIO, so a region is not
 * always a window; the plan must never be slower than the best site alone
 * (which needs none of the slow links), so every region is a candidate
 * too.  0, or -1 on no memory. */
static int search_each_region(search *x)
{
    const fence_model *m = x->m;
    int32_t N = m->n_devices;
    if (!m->c || m->c->n_regions < 2 || x->opt->stages > 0 || x->opt->replicas > 0)
        return 0;
    int32_t *chain = malloc(((size_t)N + 1) * sizeof *chain), start[2] = { 0, 0 };
    if (!chain)
        return -1;
    search y = *x;
    y.chain = chain;
    y.start = start;
    speed_model = m;
    for (int32_t g = 0; g < m->c->n_regions; g++) {
        int32_t n = 0;
        for (int32_t d = 0; d < N; d++)
            if (m->c->hosts[m->c->devices[d].host].region == g)
                chain[n++] = d;
        if (n == 0 || n == N)
            continue;
        qsort(chain, (size_t)n, sizeof *chain, by_speed_desc);
        start[1] = n;
        if (search_window(&y, 0, 0) < 0) {
            free(chain);
            return -1;
        }
    }
    x->work = y.work;
    free(chain);
    return 0;
}

/* Each stage's replicas spread over the regions, the pipeline inside each
 * region: the layout DT-FM and SWARM use across data centres, and the
 * transpose of the windows' (a stage's replicas a run of one region's
 * devices, the pipeline crossing from region to region).  Stage s takes j
 * devices of every region (R = G j), so each region runs the whole model
 * on its share of every micro-batch, its activations never leave it, and
 * only the all-reduces cross the slow links, one a stage, each on its own
 * hosts' links: a ring in the order that makes its slowest link fastest
 * (order_regions_in_fence), the hierarchy when j > 1 and it is cheaper,
 * or under --compress the quantised exchange (allreduce_plan.h).  With
 * more devices in some regions than others, the extra ones stay idle
 * (S j <= the smallest region).  0, or -1 on no memory. */
static int search_across_regions(search *x)
{
    const fence_model *m = x->m;
    int32_t N = m->n_devices, G = 0;
    if (!m->c || m->c->n_regions < 2)
        return 0;
    int32_t *all = malloc(((size_t)N + 1) * sizeof *all), *chain = malloc(((size_t)N + 1) * sizeof *chain);
    int32_t *first = malloc(((size_t)N + 2) * sizeof *first);
    int rc = -1;
    if (!all || !chain || !first)
        goto done;
    for (int32_t d = 0; d < N; d++)
        all[d] = d;
    speed_model = m;
    qsort(all, (size_t)N, sizeof *all, by_speed_desc);
    order_regions_in_fence(m, all, N, 1);
    /* first[g]: where region g (in ring order) starts in all[]. */
    int32_t smallest = N;
    for (int32_t i = 0; i < N; i++)
        if (i == 0 ||
            m->c->hosts[m->c->devices[all[i]].host].region != m->c->hosts[m->c->devices[all[i - 1]].host].region)
            first[G++] = i;
    first[G] = N;
    for (int32_t g = 0; g < G; g++)
        smallest = first[g + 1] - first[g] < smallest ? first[g + 1] - first[g] : smallest;
    search y = *x;
    y.chain = chain;
    for (int32_t j = 1; G >= 2 && j <= smallest; j++) {
        int32_t R = G * j, S_max = smallest / j < m->n_fwd ? smallest / j : m->n_fwd, L = 0;
        if ((m->batch > 0 && m->batch % R != 0) || (x->opt->replicas > 0 && R != x->opt->replicas) ||
            (x->opt->max_replicas > 0 && R > x->opt->max_replicas))
            continue;
        for (int32_t s = 0; s < S_max; s++) /* stage-major: stage s = j devices of each region */
            for (int32_t g = 0; g < G; g++)
                for (int32_t t = 0; t < j; t++)
                    chain[L++] = all[first[g] + s * j + t];
        for (int32_t i = 0; i < L; i++)
            y.rank[i] = i, y.prefix_rank[i + 1] = i;
        y.prefix_rank[0] = -1;
        candidate whole = { S_max, R, y.M, chain };
        y.dp = fence_dp_new(m, &whole, 0.0, 0);
        double T = y.dp ? search_stages(&y, 0, L, R) : -1;
        fence_dp_free(y.dp);
        y.dp = NULL;
        if (T < 0)
            goto done;
    }
    x->work = y.work;
    rc = 0;
done:
    free(all);
    free(chain);
    free(first);
    return rc;
}

/* The winner's cut, refined against the whole cost model.  The DP cuts for
 * the pipeline's bottleneck and the equal-layers cut for balance; neither
 * sees that each stage's all-reduce and the tied embedding's gradient end
 * the step (fence_evaluate), which a stage holding the embedding (GPT-3 XL:
 * 103M parameters, 7.3 s of all-reduce on a city's 2 Gbps) makes the
 * longest.  So first stage 0 takes 0, 1, 2, ... whole layers and the
 * other stages the rest in equal parts; then each boundary in turn tries 1, 2, 4, ... forward positions
 * either way and moves to the one that shortens the step most while the
 * plan still fits (at most FENCE_REFINE_ROUNDS passes over the
 * boundaries, O(S log n) evaluations each).  That descent starts from the
 * best cut so far and, when it is another, from the best of the front
 * cuts: a light stage 0 (the embedding alone) may be a valley of its own
 * that moving one boundary at a time from a balanced cut never reaches
 * (dtfm-multi-dc, GPT-3 XL: 5,193 ms from the balanced cut, 4,944 ms
 * from stage 0 = the embedding, in the model's estimate). */
#define FENCE_REFINE_ROUNDS 8
/* Boundary s of `end` tried at `to`: *best and *here follow the shortest
 * step that fits. */
static int try_boundary(const fence_model *m, fence_best *b, const candidate *cd, int32_t *end, int32_t s, int32_t to,
                        double *here, int32_t *best)
{
    int32_t was = end[s];
    double t;
    end[s] = to;
    int rc = fence_keep_if_better(b, m, cd, end, 1, &t, NULL);
    if (t < *here * (1.0 - 1e-9))
        *best = to, *here = t;
    end[s] = was;
    return rc;
}

/* Each boundary tries 1, 2, 4, ... forward positions either way, and,
 * given layer_end (n_layer_ends of them), the ends of the two layers
 * either side of it: a layer is rarely a power of two positions long (a
 * Llama layer with LoRA is 28), so whole layers more or less were never
 * tried (an 8B LoRA fine-tune at 1,024 rows in one data centre: 12.35 s
 * simulated with powers of two alone, 11.28 s with the layer ends). */
static int descend_cuts(const fence_model *m, fence_best *b, const candidate *cd, int32_t *end,
                        const int32_t *layer_end, int32_t n_layer_ends)
{
    int32_t S = cd->S;
    int rc = 0;
    double here = fence_evaluate(m, cd, end, NULL, NULL); /* the step of `end` as it stands */
    for (int round = 0, moved = 1; moved && round < FENCE_REFINE_ROUNDS && rc == 0; round++) {
        moved = 0;
        for (int32_t s = 0; s + 1 < S && rc == 0; s++) {
            int32_t was = end[s], lo = s > 0 ? end[s - 1] + 1 : 0, hi = end[s + 1] - 1, best = was;
            for (int32_t dir = -1; dir <= 1 && rc == 0; dir += 2)
                for (int32_t step = 1; step < m->n_fwd && rc == 0; step *= 2) {
                    int32_t to = was + dir * step;
                    if (to < lo || to > hi)
                        break;
                    rc = try_boundary(m, b, cd, end, s, to, &here, &best);
                }
            int32_t above = 0; /* the first layer end past `was` */
            while (above < n_layer_ends && layer_end[above] <= was)
                above++;
            int32_t below = above - 1;
            if (below >= 0 && layer_end[below] == was)
                below--;
            for (int32_t k = 0; k < 2 && rc == 0; k++) {
                if (above + k < n_layer_ends && layer_end[above + k] <= hi)
                    rc = try_boundary(m, b, cd, end, s, layer_end[above + k], &here, &best);
                if (rc == 0 && below - k >= 0 && layer_end[below - k] >= lo)
                    rc = try_boundary(m, b, cd, end, s, layer_end[below - k], &here, &best);
            }
            end[s] = best;
            moved |= best != was;
        }
    }
    return rc;
}

/* The descent by powers of two first, then with the layer ends too: from
 * where the first stops, so the second can only shorten its step (each
 * descent is greedy, and the extra moves from the start led the 8B LoRA
 * world-wide into a worse valley: 16.26 s estimated against 15.80). */
static int descend_in_two(const fence_model *m, fence_best *b, const candidate *cd, int32_t *end,
                          const int32_t *layer_end, int32_t n_layer_ends)
{
    int rc = descend_cuts(m, b, cd, end, NULL, 0);
    return rc ? rc : descend_cuts(m, b, cd, end, layer_end, n_layer_ends);
}

/* Every front cut (fence_front_cuts; by seconds, fence_front_cuts_balanced,
 * when seconds is not NULL) priced and kept in b when better; the best in
 * front_end, its step in *front_T (INFINITY: none fits).  end: scratch. */
static int try_fronts(const fence_model *m, fence_best *b, const candidate *cd, const double *seconds, int32_t *end,
                      int32_t *front_end, double *front_T)
{
    int32_t S = cd->S;
    int rc = 0;
    *front_T = INFINITY;
    for (int32_t front = 0; rc == 0; front++) {
        if (seconds ? fence_front_cuts_balanced(m, S, front, seconds, end) : fence_front_cuts(m, S, front, end))
            break;
        double t;
        rc = fence_keep_if_better(b, m, cd, end, 1, &t, NULL);
        if (t < *front_T)
            *front_T = t, memcpy(front_end, end, (size_t)S * sizeof *end);
    }
    return rc;
}

/* b's cut back to was_end (its step was_T) unless b is now 1% shorter:
 * within the cost model's error a cut does not change. */
static void keep_within_error(fence_best *b, const int32_t *was_end, double was_T)
{
    if (!(b->T < 0.99 * was_T)) {
        memcpy(b->end, was_end, (size_t)b->cd.S * sizeof *was_end);
        b->T = was_T;
    }
}

static int refine_cuts(const fence_model *m, fence_best *b)
{
    if (!b->dev || b->cd.S < 2)
        return 0;
    int32_t S = b->cd.S, used = S * b->cd.R;
    int32_t *dev = malloc((size_t)used * sizeof *dev), *end = malloc((size_t)S * sizeof *end);
    int32_t *front_end = malloc((size_t)S * sizeof *front_end), *was_end = malloc((size_t)S * sizeof *was_end);
    int32_t *kept_end = malloc((size_t)S * sizeof *kept_end);
    int32_t *layer_end = malloc(((size_t)m->n_fwd + 1) * sizeof *layer_end);
    int32_t n_layer_ends = layer_end ? fence_layer_ends(m, layer_end) : -1;
    if (!dev || !end || !front_end || !was_end || !kept_end || n_layer_ends < 0) {
        free(dev), free(end), free(front_end), free(was_end), free(kept_end), free(layer_end);
        return -1;
    }
    memcpy(dev, b->dev, (size_t)used * sizeof *dev);
    memcpy(was_end, b->end, (size_t)S * sizeof *was_end);
    candidate cd = b->cd;
    cd.dev = dev;
    double was_T = b->T, front_T;
    int rc = 0;
    /* First stage 0 lighter or heavier by whole layers, the rest equal. */
    rc = try_fronts(m, b, &cd, NULL, end, front_end, &front_T);
    memcpy(end, b->end, (size_t)S * sizeof *end);
    if (rc == 0)
        rc = descend_in_two(m, b, &cd, end, layer_end, n_layer_ends);
    if (rc == 0 && front_T < INFINITY && memcmp(front_end, was_end, (size_t)S * sizeof *end) != 0 &&
        memcmp(front_end, end, (size_t)S * sizeof *end) != 0)
        rc = descend_in_two(m, b, &cd, front_end, layer_end, n_layer_ends);
    /* Then the other stages' layers shared by seconds rather than counts
     * (the last holds the head too), and the descent from the best of
     * those: an 8B LoRA world-wide, stage 0 taking 8 layers beside
     * partial replay, came to 8, 8, 8 and the head, 13.59 s, where 8, 9, 7
     * and the head take 13.07 s, two moves away for a descent.  Kept only
     * 1% better than the cut so far, the model's error: GPT-3 XL in one
     * data centre found a cut 0.05% better by its estimate that simulates
     * 2.5% slower (3.65 s for 3.56). */
    double kept_T = b->T;
    memcpy(kept_end, b->end, (size_t)S * sizeof *kept_end);
    const double *seconds = m->time + (size_t)m->row_of[dev[b->cd.R]] * ((size_t)m->n_fwd + 1);
    if (rc == 0)
        rc = try_fronts(m, b, &cd, seconds, end, front_end, &front_T);
    if (rc == 0 && front_T < INFINITY && memcmp(front_end, kept_end, (size_t)S * sizeof *end) != 0)
        rc = descend_in_two(m, b, &cd, front_end, layer_end, n_layer_ends);
    if (rc == 0)
        keep_within_error(b, kept_end, kept_T);
    /* Under 1% is within the model's error: keep the search's cut then,
     * so a plan does not change for nothing (the same cut across
     * precisions, say). */
    if (rc == 0)
        keep_within_error(b, was_end, was_T);
    free(was_end);
    free(front_end);
    free(kept_end);
    free(layer_end);
    free(dev);
    free(end);
    return rc;
}

int fence_search(const fence_model *m, int32_t M, const pass_options *opt, const int32_t *fence_of, int32_t F,
                 fence_best *b)
{
    int32_t N = m->n_devices;
    search x = { .m = m, .opt = opt, .M = M, .best = b };
    int32_t *fences = malloc(((size_t)F + 1) * sizeof *fences);
    double *cost = fence_link_costs(m, fence_of, F);
    int rc = -1;
    x.chain = malloc(((size_t)N + 1) * sizeof *x.chain);
    x.start = malloc(((size_t)F + 2) * sizeof *x.start);
    x.rank = malloc(((size_t)N + 1) * sizeof *x.rank);
    x.order = malloc(((size_t)N + 1) * sizeof *x.order);
    x.picked = malloc(((size_t)N + 1) * sizeof *x.picked);
    x.cuts = malloc(((size_t)N + m->n_fwd + 1) * sizeof *x.cuts);
    x.cuts2 = malloc(((size_t)N + m->n_fwd + 1) * sizeof *x.cuts2);
    x.prefix_rank = malloc(((size_t)N + 2) * sizeof *x.prefix_rank);
    if (!fences || !cost || !x.chain || !x.start || !x.rank || !x.order || !x.picked || !x.cuts || !x.cuts2 ||
        !x.prefix_rank)
        goto done;
    order_fences(cost, F, fences);
    /* The chain: fences in order, fastest devices first inside each. */
    int32_t n = 0;
    speed_model = m;
    for (int32_t k = 0; k < F; k++) {
        x.start[k] = n;
        for (int32_t d = 0; d < N; d++)
            if (fence_of[d] == fences[k])
                x.chain[n++] = d;
        qsort(x.chain + x.start[k], (size_t)(n - x.start[k]), sizeof *x.chain, by_speed_desc);
        order_regions_in_fence(m, x.chain + x.start[k], n - x.start[k], 0);
    }
    x.start[F] = n;
    int exhaustive = (int64_t)F * (F + 1) / 2 <= FENCE_ALL_WINDOWS;
    for (int32_t f0 = 0; f0 < F; f0++) {
        double best = INFINITY;
        int32_t since = 0;
        for (int32_t f1 = f0; f1 < F; f1++) {
            if (!exhaustive && f1 > f0 && (since > FENCE_PATIENCE || x.work > FENCE_WORK_BUDGET))
                break;
            double T = search_window(&x, f0, f1);
            if (T < 0)
                goto done;
            since = T < best ? 0 : since + 1;
            best = fmin(best, T);
        }
    }
    if (search_each_region(&x) || search_across_regions(&x) || refine_cuts(m, b))
        goto done;
    rc = 0;
done:
    free(fences);
    free(cost);
    free(x.chain);
    free(x.start);
    free(x.rank);
    free(x.order);
    free(x.picked);
    free(x.cuts);
    free(x.cuts2);
    free(x.prefix_rank);
    return rc;
}
