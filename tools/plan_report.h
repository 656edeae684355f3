/* plan_report.h: what `fusionc plan` prints and `fusionc compile` writes
 * beside the bundles: the fences, the stages and their devices, the cost
 * model's figures (compute and transfer per stage, the bottleneck, the
 * step), each device's memory; and plan.svg, the graph coloured by device. */
#ifndef FUSION_PLAN_REPORT_H
#define FUSION_PLAN_REPORT_H

#include <stdio.h>

#include "../frontend/cluster.h"
#include "../passes/passes.h"
#include "simulate.h"

void plan_report_print(FILE *out, const ir_graph *g, const cluster *c, const fence_plan *p);
/* DIR/plan.txt and DIR/plan.svg, each written under a temporary name and
 * renamed. */
int plan_report_write(const ir_graph *g, const cluster *c, const fence_plan *p, const char *dir, struct diag *err);

/* The simulated steps, the bubble, each stage's busy time, the links'
 * bytes (each link's with verbose), as `fusionc simulate` prints them. */
void simulate_print(FILE *out, const ir_graph *g, const cluster *c, const fence_plan *plan, const sim_result *r,
                    int verbose);

#endif
