/* diloco.h: planning `--sync diloco` (fusionc compile, plan, simulate).
 *
 * Each site (a region of the cluster) gets its own plan, made by the
 * user's scheduler on the site alone, for its share of the global batch:
 * in units of the micro-batch count when one was asked for, so that the
 * sites finish their inner steps together: each unit goes to the site
 * whose step would be shortest with it (a smaller batch is not
 * proportionally faster, so shares by the speeds on the whole batch
 * would leave the slowest site behind).  Every H steps the
 * sites exchange their parameter change (runtime/comm/diloco.h): each
 * parameter's holder in a site sends it to the holder in every other site,
 * on the link between the two, encoded as the outer codec says.
 *
 * --site-batch each (DiLoCo's own setting, a batch per worker): every site
 * trains the model's whole `batch` a step, with its plan alone, and a
 * slower site takes fewer steps a round (H_k in proportion to its speed),
 * so no site waits for another; one global batch is then `batch` rows of
 * all the sites' work.
 *
 * The time of a round, and of one global batch (`batch` rows):
 *
 *   I      = max_k H_k step_k                     the sites run side by side
 *   X      = the slowest holder pair's bytes / bandwidth + latency
 *   C      = the new parameters copied down each stage's replicas (f32)
 *   round  = I + max(0, X - I) + C                with one round of delay
 *          = I + X + C                            without
 *   step   = round * batch / sum_k H_k rows_k
 *
 * (split: H_k = H, sum_k rows_k = batch, so step = T + (exposed + C) / H.)
 * The round of delay: --outer-delay, else only when the exchange waited
 * for would cost over a tenth of a round (it costs quality).
 * H: --local-steps, else the smallest H >= DILOCO_MIN_H whose inner steps
 * hide the exchange and make the copies under 5% of them, at most
 * DILOCO_MAX_H (see choose_h in diloco.c).
 */
#ifndef FUSION_TOOLS_DILOCO_H
#define FUSION_TOOLS_DILOCO_H

#include <stdio.h>

#include "../codegen/bundle.h"
#include "../frontend/cluster.h"
#include "../ir/ir.h"
#include "../passes/passes.h"
#include "../runtime/program.h"
#include "options.h"

#define DILOCO_MIN_H 10
#define DILOCO_MAX_H 1000

/* Build and place the model (the user's options) on cluster c with
 * `batch` rows: g and plan filled, or -1 with err. */
typedef int (*diloco_place_fn)(void *arg, const cluster *c, int64_t batch, ir_graph *g, fence_plan *plan,
                               struct diag *err);
/* A placed site's step in seconds (the plan's estimate, or the simulator's
 * steady step); <= 0 or not finite: it cannot be timed. */
typedef double (*diloco_time_fn)(const cluster *c, const ir_graph *g, const fence_plan *plan);

typedef struct {
    int32_t n_sites;
    cluster site[RT_MAX_SITES]; /* each region alone (cluster_subset)                  */
    ir_graph g[RT_MAX_SITES];   /* placed on its site (the site's device indices)      */
    fence_plan plan[RT_MAX_SITES];
    int32_t *map[RT_MAX_SITES]; /* [site devices]: its index in the whole cluster      */
    int64_t rows[RT_MAX_SITES]; /* its share of the global batch                       */
    double alone[RT_MAX_SITES]; /* its step on the whole batch (the time_fn's)         */
    double step[RT_MAX_SITES];  /* its step on its share                               */
    const char *timed_by;       /* "estimated" or "simulated"                          */
    int64_t global_batch;
    double exchange_seconds; /* X: one outer exchange                               */
    double copy_seconds;     /* C: the copies down the replicas                     */
    double outer_seconds;    /* A: the outer step's arithmetic on the busiest holder */
    double exchange_bytes;   /* the largest bytes one holder sends one other site   */
    int h_chosen;            /* 1: H from the links; 0: --local-steps                */
    int each;                /* --site-batch each: every site trains `batch` rows a step */
    int delay_chosen;        /* 1: outer_delay from the exchange (no --outer-delay)  */
    rt_diloco_info outer;    /* the run's settings, H included                       */
} diloco_plan;

/* The plan (dp filled; diloco_plan_free after, even on failure), or -1
 * with err.  c: the whole cluster, of at least two regions. */
int diloco_plan_make(const cluster *c, const options *o, int64_t global_batch, diloco_place_fn place, void *arg,
                     diloco_time_fn time, const char *timed_by, diloco_plan *dp, struct diag *err);
void diloco_plan_free(diloco_plan *dp);

/* The step of one global batch (from dp->step). */
double diloco_global_step(const diloco_plan *dp);
/* Tokens (samples) of one global batch. */
double diloco_step_items(const diloco_plan *dp, const char **unit);

/* The summary: sites, shares, plans, their steps, H and why, the
 * exchange, and what the sites would train alone (each on the whole batch). */
void diloco_print(FILE *out, const diloco_plan *dp, const cluster *c);

/* Every site's bundles into out_dir (codegen/bundle.h's bundle_write_sites),
 * and out_dir/plan.txt: the summary and each site's plan. */
int diloco_write(const diloco_plan *dp, const cluster *c, const char *out_dir, const bundle_toolchain *tc,
                 int32_t port_base, struct diag *err);

#endif
