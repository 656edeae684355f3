/* baseline.h: what a plan is judged against (fusionc plan, simulate).
 *
 * The best single site: each site of the cluster (a region; a host when
 * the cluster is one region) placed alone by the same scheduler and timed
 * the same way (the simulator's steady-state step, or the plan's
 * estimate), the fastest kept.  A distributed plan is worth running only
 * when it beats that.
 *
 * The throughput of a plan: what every device trains on in a step (tokens
 * for a model fed token ids, samples otherwise) over the step's time.
 */
#ifndef FUSION_TOOLS_BASELINE_H
#define FUSION_TOOLS_BASELINE_H

#include <stdio.h>

#include "../frontend/cluster.h"
#include "../ir/ir.h"
#include "../passes/passes.h"

/* Build and place the model on cluster c (the caller's options: model,
 * --set, scheduler, precision, ...): g and plan filled, or -1 with err. */
typedef int (*baseline_place_fn)(void *arg, const cluster *c, ir_graph *g, fence_plan *plan, struct diag *err);

typedef struct {
    int found; /* 0: the cluster is one site, or no site could be placed */
    char site[CLUSTER_NAME_MAX];
    int devices;         /* the site's devices                                     */
    int by_host;         /* the sites are hosts (the cluster is one region)         */
    double step_seconds; /* its step                                               */
    int sites, placed;   /* sites tried, and placed                                */
} site_baseline;

/* sim_steps > 0: time each site with that many simulated steps (the last
 * one's time); 0: with the plan's estimate.  0, or -1 with err when
 * memory runs out (a site that cannot be placed is skipped, counted). */
int baseline_best_site(const cluster *c, baseline_place_fn place, void *arg, int sim_steps, site_baseline *out,
                       struct diag *err);
/* "best single site: region lab-a100 (8 devices) 46.23 ms/step; this plan 1.000x" */
void baseline_print(FILE *out, const site_baseline *b, double this_step_seconds);

/* The steady-state step of `steps` simulated steps (the last one's); -1
 * with err when the simulation fails. */
double baseline_simulated_step(const ir_graph *g, const cluster *c, int steps, struct diag *err);

/* Tokens (or samples) a step of the placed graph trains on, all
 * micro-batches and replicas; *unit "tokens" or "samples". */
double baseline_step_items(const ir_graph *g, const char **unit);

#endif
