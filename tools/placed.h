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
} placed_model;

/* Build and place o's model (o->files[0]) on o's cluster (o->files[1],
 * with --with and --without), every pass run.  0, or -1 with err. */
int placed_load(placed_model *p, const options *o, struct diag *err);
void placed_free(placed_model *p);

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
