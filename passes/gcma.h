/* gcma.h: DT-FM's scheduler (Yuan et al., NeurIPS 2022; shared/docs/papers.md),
 * `--scheduler gcma`, a second baseline beside uniform.
 *
 * DT-FM places D_PP pipeline stages x D_DP data-parallel replicas
 * ("tasklets") on N = D_PP * D_DP devices.  In this file S = D_PP (groups)
 * and R = D_DP (devices per group).  Its cost model, in the cluster's
 * units (bytes, bytes/s, seconds), with link cost alpha + bytes / beta:
 *
 *   DPCost = max over devices d of
 *              sum over d' in d's group, d' != d, of 2 (alpha + c_g / (R beta))
 *   PPCost = the cheapest open path through the S groups (open TSP), where
 *            joining two groups costs their bottleneck perfect matching:
 *            the pairing of their devices that minimises the largest
 *            alpha + c_a / beta
 *   cost   = DPCost + 2 PPCost
 *
 * with c_a the activation bytes a lane sends at a cut per micro-batch and
 * c_g a stage's gradient bytes.  Compute is assumed equal on all devices.
 * The open path is exact (Held-Karp) for up to GCMA_HELD_KARP_MAX groups;
 * beyond, nearest neighbour from every start and then 2-opt.
 *
 * The search is DT-FM's genetic algorithm (gcma_search); gcma_random is
 * the paper's "random placement" baseline.  gcma_schedule is what the
 * fence pass calls.  Not modelled: compute heterogeneity, memory limits,
 * overlap of compute and transfer (as in the paper).
 */
#ifndef FUSION_GCMA_H
#define FUSION_GCMA_H

#include <stdint.h>

#include "fence_cost.h"

#define GCMA_HELD_KARP_MAX 16 /* open paths through up to this many groups are exact */

/* Bandwidth (bytes/s) and latency (s) between devices a and b. */
typedef void (*gcma_link_fn)(const void *ctx, int32_t a, int32_t b, double *bw, double *lat);

/* Every pair's link, read once: [n * n], row-major. */
typedef struct {
    int32_t n;
    double *bw, *lat;
} gcma_links;

int gcma_links_init(gcma_links *l, int32_t n, gcma_link_fn link, const void *ctx);
void gcma_links_free(gcma_links *l);

/* One instance: S groups of R devices over all l->n = S * R devices, and
 * each pair's two link costs. */
typedef struct {
    int32_t n, S, R;
    double c_a, c_g;
    double *pp; /* [n * n]: alpha + c_a / beta, a pipeline transfer        */
    double *dp; /* [n * n]: 2 (alpha + c_g / (R beta)), one all-reduce peer's share; 0 on the diagonal */
} gcma_problem;

int gcma_problem_init(gcma_problem *p, const gcma_links *l, int32_t S, int32_t R, double c_a, double c_g);
void gcma_problem_free(gcma_problem *p);

typedef struct {
    int32_t population;     /* DT-FM: 100                                         */
    int32_t trials;         /* DT-FM: 4,900 children                              */
    int32_t random_samples; /* the random baseline: 5,000 assignments            */
    int32_t crossover_copy; /* devices whose group a child takes from its second parent: 5 */
    uint64_t seed;
    /* Work cap: when population + trials evaluations would take more than
     * this many elementary steps (our count, see gcma.c), only as many
     * evaluations as fit are made: a tenth of them (at least 4) the
     * population, the rest trials.  Deterministic, unlike a time limit.
     * 0: no cap.  DT-FM's 64 devices in 8 x 8 fit whole. */
    double work_budget;
    /* Assignments (group_of, n each) put in the population in place of
     * random ones (gcma_schedule: Megatron's file order for the shape), so
     * the search never returns one its own cost model prices worse. */
    const int32_t *seeds;
    int32_t n_seeds;
} gcma_config;

void gcma_config_default(gcma_config *cfg);

typedef struct {
    double cost, dp_cost, pp_cost;
    int32_t *group_of;          /* [n] the device's group                                    */
    int32_t *dev;               /* [S * R]: (stage s, lane r) = dev[s * R + r]; stages in path
                             * order, lane r of stage s+1 matched to lane r of stage s   */
    int32_t population, trials; /* as run (after the work cap)                       */
} gcma_result;

void gcma_result_free(gcma_result *r);

/* The DT-FM cost of a balanced assignment group_of[n] (each group has R
 * devices); when dev is not NULL, the stage-major, lane-matched device
 * order goes there ([S * R]).  INFINITY when out of memory or unbalanced. */
double gcma_cost(const gcma_problem *p, const int32_t *group_of, int32_t *dev, double *dp_cost, double *pp_cost);

/* The genetic algorithm; 0, or -1 when out of memory. */
int gcma_search(const gcma_problem *p, const gcma_config *cfg, gcma_result *out);
/* The best of cfg->random_samples random balanced assignments. */
int gcma_random(const gcma_problem *p, const gcma_config *cfg, gcma_result *out);

/* Building blocks, exposed for the tests. */
/* The bottleneck perfect matching of an R x R cost matrix: match[i] is the
 * column of row i; returns the largest matched cost (INFINITY: no memory). */
double gcma_bottleneck_matching(int32_t R, const double *cost, int32_t *match);
/* The cheapest open path through S nodes of a symmetric S x S distance
 * matrix: order[S] gets the path; returns its length. */
double gcma_open_path(int32_t S, const double *dist, int32_t *order);

/* ---- the fence pass's side ------------------------------------------------ */

/* DT-FM's plan for the model on the cluster: S x R from opt->stages and
 * opt->replicas when given, else the factorisation of the device count
 * with the lowest DT-FM cost (S <= forward ops, R dividing the batch and
 * within opt->max_replicas); equal layers per stage.  *dev ([S * R]) and
 * *end ([S]) are allocated; 1 when no factorisation fits, -1 when out of
 * memory, else 0.  random: the random-placement baseline of DT-FM's
 * end-to-end runs instead: the shape the search chose, the devices in
 * slots drawn at random (seeded by opt->seed; 0: 1). */
int gcma_schedule(const fence_model *m, const pass_options *opt, int random, int32_t *S, int32_t *R, int32_t **dev,
                  int32_t **end, double *cost);

#endif
