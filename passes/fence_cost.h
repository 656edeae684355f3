/* fence_cost.h: the cost model behind the fence pass: what the model and
 * cluster look like to the planner (fence_model.c), and what a placement
 * candidate costs (fence_cost.c), from the workload estimator's op times,
 * the cluster's links and, under --compress, what the compress pass will
 * send over them.  Internal to passes/. */
#ifndef FUSION_FENCE_COST_H
#define FUSION_FENCE_COST_H

#include "passes.h"

typedef struct {
    const ir_graph *g;
    const cluster *c;
    int32_t n_devices;
    const cluster_device *devices;  /* c->devices, or the default device     */
    int32_t n_fwd;                  /* forward ops                           */
    int32_t *fwd;                   /* [n_fwd] node index                    */
    int32_t *fwd_pos;               /* [n_nodes] position in fwd, or -1      */
    int32_t *owner;                 /* [n_nodes] the forward position a backward op belongs to */
    int32_t n_rows;                 /* distinct rows of the time tables      */
    int32_t *row_of;                /* [n_devices] the device's row (devices alike share one) */
    double *time;                   /* [n_rows][n_fwd + 1] prefix sums: forward + backward seconds */
    double *time_fwd;               /* [n_rows][n_fwd + 1] prefix sums: forward seconds alone */
    double *update;                 /* [n_rows][n_fwd + 1] prefix sums: optimizer seconds */
    double *launch;                 /* [n_rows] an op's fixed seconds (estimate_launch_seconds)   */
    int32_t *n_ops, *n_ops_fwd;     /* [n_fwd + 1] prefix counts of the ops in time and time_fwd:
                                      * a replica's 1/R of the micro-batch costs (t - ops launch) / R
                                      * + ops launch, the launches not shrinking with it */
    double *param_bytes;            /* [n_fwd + 1] prefix sums of the trained params each op owns:
                                      * each with a gradient, two moments and an all-reduce */
    double *frozen_bytes;           /* [n_fwd + 1] the same of the frozen params: stored alone */
    double *act_bytes;              /* [n_fwd + 1] prefix sums of the forward outputs a backward op
                                      * reads: what a micro-batch in flight keeps (all replicas)  */
    double *cut_fwd, *cut_bwd;      /* [n_fwd] activation (and input) bytes crossing the cut after
                                      * position k each micro-batch, forward and back (params apart) */
    double *cut_param;              /* [n_fwd] parameter bytes crossing it (once a step, and their
                                      * gradient back once a step)                           */
    double *cut_frozen;             /* [n_fwd] the frozen ones among them: no gradient back  */
    int32_t *cut_start, *cut_vals;  /* the values crossing the cut after k:
                                      * cut_vals[cut_start[k] .. cut_start[k + 1])           */
    int32_t *read_start, *read_pos; /* the forward positions reading value v after its first:
                                      * read_pos[read_start[v] .. read_start[v + 1]), ascending */
    int32_t *layer_ops;             /* [n_fwd + 1] prefix counts of parameterised forward ops */
    int32_t *first_fwd;             /* [n_values] the forward position that makes (or first reads) it, -1 */
    double *link_bw, *link_lat;     /* [n_devices^2] bytes/s and s (NULL without a cluster) */
    double max_cut_tensor;          /* the largest activation (or input) crossing any cut, and */
    double max_cut_param;           /* the largest parameter: what compression could shrink    */
    double shared_bytes;            /* params read by more than one forward op (GPT-2's tied wte.weight):
                                      * a stage may hold a copy of them and its gradient        */
    int64_t batch;                  /* rows of the micro-batch (leading dim of the first input) */
    int clip;                       /* the optimizer clips: stages agree on a norm each step */
    double compress;                /* what the compress pass will do (compress_parse): 0 none,
                                      * -1 adatopk, else topk's density; the fence pass sets it */
    int recompute;                  /* schedule_plan's mode (--recompute); the fence pass sets it */
    double memory_reserve;          /* bytes off every device's usable memory: the arena's
                                      * working micro-batch outgrows state + one stash (the
                                      * loss's logits, scratch) by what this model does not
                                      * see; tools/placed.c sets it from a plan that did not fit */
    int shard;                      /* --shard-optimizer: replicas split the moments (the comm pass's
                                      * shard_update); the fence pass sets it */
} fence_model;

/* A candidate: S stages of R devices each (dev[s * R + r]), M micro-batches. */
typedef struct {
    int32_t S, R, M;
    const int32_t *dev; /* [S*R] */
} candidate;

int fence_model_build(fence_model *m, const ir_graph *g, const cluster *c, struct diag *err);
void fence_model_free(fence_model *m);
int fence_is_float(ir_dtype dt);
/* Bandwidth (bytes/s) and latency (s) between devices a and b (no cluster:
 * one device, infinitely fast). */
void fence_link_of(const fence_model *m, int32_t a, int32_t b, double *bw, double *lat);
/* Cut the forward ops into cd->S runs minimising the pipeline's bottleneck
 * (a stage's compute or a cut's transfer per micro-batch); end[s] gets each
 * stage's last forward position.  t_star > 0 prices the cuts as the
 * compress pass would send them with that T* (m->compress); 0 prices them
 * dense.  memory: only cuts whose every stage fits its devices' memory
 * with plain 1F1B's micro-batches in flight (min(M, S - s); fence_cost.h's
 * need otherwise).  0, or -1 when there are fewer ops than stages, no cut
 * fits, or no memory. */
int fence_cut_dp(const fence_model *m, const candidate *cd, double t_star, int memory, int32_t *end);
/* The same DP as a table reusable for every S up to cd->S: its rows
 * depend only on the first stages' devices, so a chain of devices cut for
 * S = 1, 2, ... (the search's candidates on a window, when the S*R devices
 * it takes are the chain's first) fills each row once.  fence_dp_cuts
 * writes the cut of the first S stages (0, or -1 when S does not fit);
 * fence_dp_bottleneck gives its bottleneck.  With memory, the table is
 * for S = cd->S alone (a stage's micro-batches in flight depend on S).
 * NULL when out of memory. */
typedef struct fence_dp fence_dp;
fence_dp *fence_dp_new(const fence_model *m, const candidate *cd, double t_star, int memory);
int fence_dp_cuts(fence_dp *dp, int32_t S, int32_t *end);
double fence_dp_bottleneck(fence_dp *dp, int32_t S);
void fence_dp_free(fence_dp *dp);
/* T* of the candidate cut at end[]: its largest stage compute per micro-batch. */
double fence_t_star(const fence_model *m, const candidate *cd, const int32_t *end);
/* The estimated step of the candidate cut at end[]; when out is not NULL
 * its per-stage figures, bottleneck and step go there.  When fill is not
 * NULL it gets how far the candidate overfills its fullest device: the
 * largest estimated need / memory over its devices (<= 1: it fits).  A
 * stage's device needs its params, gradients and AdamW's two moments (4 x
 * the stage's parameter bytes; twice more for a parameter it receives from
 * another stage: the copy and its gradient), and the forward outputs a
 * backward reads of each micro-batch 1F1B keeps in flight there (the
 * warm-up + 1, at most M; the warm-up capped by memory as the schedule
 * pass caps it).  INFINITY when out of memory. */
double fence_evaluate(const fence_model *m, const candidate *cd, const int32_t *end, fence_plan *out, double *fill);

#endif
