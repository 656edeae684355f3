/* placed.h: a model built and placed on a cluster, every pass run: what
 * compile, plan, simulate and dump start from (tools/placed.c), and the
 * pieces of it the other commands share. */
#ifndef FUSION_TOOLS_PLACED_H
#define FUSION_TOOLS_PLACED_H

#include <stdint.h>

#include "../frontend/cluster.h"
#include "../ir/ir.h"
#include "../passes/passes.h"
#include "options.h"

/* A model built and placed on a cluster (compile, plan and simulate start
 * from one).  placed_load fills p (err on failure); placed_free always. */
typedef struct {
    ir_graph g;
    cluster c;
    fence_plan plan;
    char note[400]; /* "note: the first plan ... did not fit ...": said by the command; "" none */
} placed_model;

/* Build and place o's model (o->files[0]) on o's cluster (o->files[1],
 * with --with and --without), every pass run, in a plan every device
 * holds (placed_build_fitting; a remedy said in p->note).  must_fit 0
 * (simulate, dump: studies): a plan that does not fit is kept, with a
 * warning in p->note.  0, or -1 with err. */
int placed_load(placed_model *p, const options *o, int must_fit, struct diag *err);
void placed_free(placed_model *p);

/* placed_build (below) on cluster c, into a plan every device holds
 * (plan_memory.h): when the planner's first does not fit, the remedies the
 * user left to fusion are tried in turn, cheapest first: --shard-optimizer
 * (replicas split the moments), --recompute on, both, then the same with
 * more micro-batches (each divisor of the batch's rows, smaller pieces); the
 * first that fits is taken, with a line in note ("" when the first plan
 * fit).  A first plan that fits, with replicas, is sharded instead when
 * that makes its estimated step shorter and the user left
 * --shard-optimizer to fusion (said in note too).  0; -1 with err when it cannot be built; -2 with err saying what
 * the first plan needed when no plan fits (g and plan then hold it). */
int placed_build_fitting(const options *o, const cluster *c, ir_graph *g, fence_plan *plan, char *note, size_t note_n,
                         struct diag *err);

/* The same on cluster c (a site of o's, a cluster with --with/--without
 * applied), model_path's graph into g and the fence pass's plan into plan:
 * every pass run.  0, or -1 with err. */
int placed_build(const options *o, const char *model_path, const cluster *c, ir_graph *g, fence_plan *plan,
                 struct diag *err);

/* What is trained and in which precision: --precision, --tf32, --freeze,
 * --lora, --frozen-dtype, --inference, --prefill, into the pipeline's options. */
void set_training_options(pass_options *p, const options *o);

/* The model's global batch: its `batch` hyper-parameter, 0 if it has none. */
int64_t global_batch(const ir_graph *g);

#endif
