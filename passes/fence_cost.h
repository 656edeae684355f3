/* fence_cost.h: the cost model behind the fence pass (fence_cost.c):
 * what a placement candidate costs, from the workload estimator's op times
 * and the cluster's links.  Internal to passes/. */
#ifndef FUSION_FENCE_COST_H
#define FUSION_FENCE_COST_H

#include "passes.h"

typedef struct {
    const ir_graph *g;
    const cluster  *c;
    int32_t         n_devices;
    const cluster_device *devices;   /* c->devices, or the default device     */
    int32_t  n_fwd;                  /* forward ops                           */
    int32_t *fwd;                    /* [n_fwd] node index                    */
    int32_t *fwd_pos;                /* [n_nodes] position in fwd, or -1      */
    int32_t *owner;                  /* [n_nodes] the forward position a backward op belongs to */
    double  *time;                   /* [n_devices][n_fwd + 1] prefix sums: forward + backward seconds */
    double  *time_fwd;               /* [n_devices][n_fwd + 1] prefix sums: forward seconds alone */
    double  *update;                 /* [n_devices][n_fwd + 1] prefix sums: optimizer seconds */
    double  *param_bytes;            /* [n_fwd + 1] prefix sums of the params each op owns */
    double  *cut_fwd, *cut_bwd;      /* [n_fwd] bytes crossing the cut after position k */
    int32_t *layer_ops;              /* [n_fwd + 1] prefix counts of parameterised forward ops */
    int32_t *first_fwd;              /* [n_values] the forward position that makes (or first reads) it, -1 */
    int64_t  batch;                  /* rows of the micro-batch (leading dim of the first input) */
    int      clip;                   /* the optimizer clips: stages agree on a norm each step */
} fence_model;

/* A candidate: S stages of R devices each (dev[s * R + r]), M micro-batches. */
typedef struct {
    int32_t S, R, M;
    const int32_t *dev;      /* [S*R] */
} candidate;

int  fence_model_build(fence_model *m, const ir_graph *g, const cluster *c, struct diag *err);
void fence_model_free(fence_model *m);
/* Bandwidth (bytes/s) and latency (s) between devices a and b (no cluster:
 * one device, infinitely fast). */
void fence_link_of(const fence_model *m, int32_t a, int32_t b, double *bw, double *lat);
/* Cut the forward ops into cd->S runs minimising the pipeline's bottleneck;
 * end[s] gets each stage's last forward position.  0, or -1 when there
 * are fewer ops than stages (or no memory). */
int  fence_cut_dp(const fence_model *m, const candidate *cd, int32_t *end);
/* The estimated step of the candidate cut at end[]; when out is not NULL
 * its per-stage figures, bottleneck and step go there. */
double fence_evaluate(const fence_model *m, const candidate *cd, const int32_t *end, fence_plan *out);
/* Stage ends (end[s]: the last forward position of stage s) for S stages of
 * equal layers, Megatron's cut (fence.c; uniform and gcma use it).  0, or
 * -1 when the model has fewer forward ops than S, or no memory. */
int    fence_uniform_cuts(const fence_model *m, int32_t S, int32_t *end);

#endif
