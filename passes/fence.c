/* fence.c: the `fence` pass: which devices train which ops (a plan of
 * stages x replicas), by one of five schedulers, then every node's stage.
 *
 * A plan is S pipeline stages, each replicated on R devices (data
 * parallel), trained over M micro-batches in 1F1B order.  The forward ops,
 * in their topological order, are cut into S contiguous runs; every
 * backward op follows the forward op it differentiates, every optimizer op
 * its parameter.
 *
 * opfence (the default): FusionLLM's OP-Fence, our reading (fence_search.c):
 *   fences of similar bandwidth, chained; windows of fences, S and R
 *   searched on the cost model (fence_cost.c), compression-aware under
 *   --compress, within the devices' memory.
 *
 * uniform (Megatron's default placement, the baseline): every device of
 * the cluster in file order, one stage each, the same number of layers
 * (repeat-block instances) per stage, blind to speeds and bandwidths.
 *
 * megatron (the well-tuned baseline a Megatron-LM user would run): every
 * device in file order as S stages x R replicas (stage s on devices
 * s R .. s R + R - 1, Megatron's rank order with data parallelism
 * innermost), equal layers per stage, dense; the S x R the cost model
 * prices fastest (or --stages / --replicas), as a user tuning it would.
 *
 * gcma (DT-FM's scheduler, the second baseline; gcma.c): S x R and the
 * devices' groups from DT-FM's own cost model and genetic search (seeded
 * with Megatron's file order), equal layers per stage; fence_evaluate
 * then costs it like the others, and the megatron and opfence plans
 * too: the best is gcma's answer, never worse than either.  gcma-alone:
 * the search's own answer, not weighed (what DT-FM's scheduler picks).
 *
 * random (the random placement of DT-FM's end-to-end comparison): the
 * same S x R as gcma, the devices in slots drawn at random (--seed), equal
 * layers per stage.
 *
 * The cost model and the step simulation are in fence_cost.c.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "../ir/readers.h"
#include "fence_cost.h"
#include "fence_cuts.h"
#include "fence_search.h"
#include "gcma.h"
#include "passes.h"

void fence_plan_free(fence_plan *p)
{
    if (!p)
        return;
    free(p->devices);
    free(p->stage_of_node);
    free(p->stage_compute);
    free(p->stage_update);
    free(p->cut_transfer);
    free(p->cut_bytes);
    free(p->allreduce);
    free(p->recompute);
    free(p->fence_of_device);
    memset(p, 0, sizeof *p);
}

/* Every device in file order, one stage each, equal layers per stage:
 * Megatron's default placement. */
static int plan_uniform(const fence_model *m, int32_t M, fence_best *b)
{
    int32_t S = m->n_devices < m->n_fwd ? m->n_devices : m->n_fwd;
    int32_t *dev = malloc(((size_t)S + 1) * sizeof *dev), *end = malloc(((size_t)S + 1) * sizeof *end);
    int rc = -1;
    if (dev && end && fence_uniform_cuts(m, S, end) == 0) {
        for (int32_t s = 0; s < S; s++)
            dev[s] = s;
        candidate cd = { S, 1, M, dev };
        rc = fence_keep_if_better(b, m, &cd, end, 0, NULL, NULL);
    }
    free(dev);
    free(end);
    return rc;
}

/* Every device in file order as S x R (S R = the devices), equal layers
 * per stage: each shape the batch allows, the fastest kept. */
static int plan_megatron(const fence_model *m, int32_t M, const pass_options *opt, fence_best *b)
{
    int32_t N = m->n_devices;
    int32_t *dev = malloc(((size_t)N + 1) * sizeof *dev), *end = malloc(((size_t)N + 1) * sizeof *end);
    int rc = dev && end ? 0 : -1;
    for (int32_t d = 0; d < N && dev; d++)
        dev[d] = d;
    for (int32_t S = 1; S <= N && rc == 0; S++) {
        int32_t R = N / S;
        if (N % S != 0 || S > m->n_fwd || (m->batch > 0 && m->batch % R != 0) || (m->batch == 0 && R > 1) ||
            (opt->stages > 0 && S != opt->stages) || (opt->replicas > 0 && R != opt->replicas))
            continue;
        if (fence_uniform_cuts(m, S, end) != 0) {
            rc = -1;
            break;
        }
        candidate cd = { S, R, M, dev };
        rc = fence_keep_if_better(b, m, &cd, end, 1, NULL, NULL) < 0 ? -1 : 0; /* a user picks one that fits */
    }
    free(dev);
    free(end);
    return rc;
}

/* DT-FM's run of Megatron-LM, as its paper ran it: every device in the
 * order the cluster lists them, a pipeline of 8 stages (--stages: another)
 * times N/8 replicas, equal layers, dense; where 8 does not divide the
 * devices, the largest pipeline under 8 that does. */
static int plan_megatron_paper(const fence_model *m, int32_t M, const pass_options *opt, fence_best *b)
{
    int32_t N = m->n_devices, S = 0;
    for (int32_t s = opt->stages > 0 ? opt->stages : 8; s >= 1 && S == 0; s--)
        if (N % s == 0 && s <= m->n_fwd && (m->batch > 0 ? m->batch % (N / s) == 0 : N / s == 1))
            S = s;
    if (S == 0 || (opt->stages > 0 && S != opt->stages))
        return 0; /* no plan: reported by the caller */
    int32_t *dev = malloc(((size_t)N + 1) * sizeof *dev), *end = malloc(((size_t)S + 1) * sizeof *end);
    int rc = -1;
    if (dev && end && fence_uniform_cuts(m, S, end) == 0) {
        for (int32_t d = 0; d < N; d++)
            dev[d] = d;
        candidate cd = { S, N / S, M, dev };
        rc = fence_keep_if_better(b, m, &cd, end, 0, NULL, NULL) < 0 ? -1 : 0;
    }
    free(dev);
    free(end);
    return rc;
}

/* DT-FM's scheduler (gcma.c): its S x R, device order and equal layers;
 * or its random-placement baseline on the same S x R.  gcma's search is
 * seeded with Megatron's plans (gcma.c) and what it returns is weighed
 * against them and OP-Fence's by this cost model, the best kept: DT-FM's
 * scheduler, run as a user of this compiler would, never returns a plan
 * worse than the baselines it is compared with (issue 34). */
static int plan_gcma(const fence_model *m, int32_t M, const pass_options *opt, int random, int weigh,
                     const int32_t *fence_of, int32_t F, fence_best *b)
{
    int32_t S = 0, R = 0, *dev = NULL, *end = NULL;
    double cost;
    int rc = gcma_schedule(m, opt, random, &S, &R, &dev, &end, &cost);
    if (rc == 0) {
        candidate cd = { S, R, M, dev };
        rc = fence_keep_if_better(b, m, &cd, end, weigh, NULL, NULL);
    }
    free(dev);
    free(end);
    if (rc >= 0 && weigh && plan_megatron(m, M, opt, b) == 0)
        rc = fence_search(m, M, opt, fence_of, F, b);
    return rc < 0 ? -1 : 0; /* no shape fits: no plan, reported by the caller */
}

/* ---- applying a plan to the graph ------------------------------------------ */

/* Stages for every node: forward ops from the plan, backward ops from
 * their forward op (others: the largest stage that reads them), optimizer
 * ops from their parameter. */
static int assign_stages(ir_graph *g, const fence_model *m, const fence_plan *p, struct diag *err)
{
    int32_t n = g->n_nodes, V = g->n_values;
    int32_t *home = malloc(((size_t)V + 1) * sizeof *home);
    if (!home)
        return diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "out of memory");
    for (int32_t i = 0; i < n; i++)
        g->nodes[i].stage = -1;
    for (int32_t k = 0; k < m->n_fwd; k++)
        g->nodes[m->fwd[k]].stage = p->stage_of_node[m->fwd[k]];
    /* A param's stage: its first forward reader's. */
    for (int32_t v = 0; v < V; v++)
        home[v] = -1;
    for (int32_t k = 0; k < m->n_fwd; k++) {
        const ir_node *node = &g->nodes[m->fwd[k]];
        for (int i = 0; i < node->n_in; i++)
            if (home[node->in[i]] < 0)
                home[node->in[i]] = node->stage;
    }
    for (int32_t i = 0; i < n; i++) {
        ir_node *node = &g->nodes[i];
        if (node->phase == PHASE_UPDATE)
            for (int k = 0; k < node->n_in && node->stage < 0; k++)
                if (g->values[node->in[k]].role == ROLE_PARAM)
                    node->stage = home[node->in[k]] >= 0 ? home[node->in[k]] : 0;
        if (node->phase == PHASE_BACKWARD && m->owner[i] >= 0)
            node->stage = g->nodes[m->fwd[m->owner[i]]].stage;
    }
    /* Update ops without a param (sum_squares, clip_scale, lr_schedule):
     * the stage of the adamw that reads the same gradient, else of their
     * input, else 0.  Then backward ops without a forward op (the seed,
     * fan-out sums, copies): the largest stage that reads them, walking
     * back so readers are placed first.  The gradient of a value made on
     * stage p is read by the backward of its producer (on p) and, through
     * an add's pass-through, by sums for the add's inputs (on p or
     * before): the largest is p, where the value lives, so a residual
     * stream's gradient sums stay on their stage. */
    int32_t *updater = home; /* reused: updater[v], the first placed update of a param that reads gradient v */
    for (int32_t v = 0; v < V; v++)
        updater[v] = -1;
    for (int32_t j = 0; j < n; j++)
        if (op_updates_param(g->nodes[j].op) && g->nodes[j].n_in > 1 && g->nodes[j].stage >= 0 &&
            updater[g->nodes[j].in[1]] < 0)
            updater[g->nodes[j].in[1]] = j;
    for (int32_t i = n - 1; i >= 0; i--) {
        ir_node *node = &g->nodes[i];
        if (node->phase != PHASE_UPDATE || node->stage >= 0 || node->op != OP_SUM_SQUARES)
            continue;
        if (updater[node->in[0]] >= 0)
            node->stage = g->nodes[updater[node->in[0]]].stage;
    }
    for (int32_t i = 0; i < n; i++) {
        ir_node *node = &g->nodes[i];
        if (node->stage >= 0)
            continue;
        if (node->phase == PHASE_UPDATE) {
            for (int k = 0; k < node->n_in && node->stage < 0; k++)
                if (g->values[node->in[k]].producer >= 0)
                    node->stage = g->nodes[g->values[node->in[k]].producer].stage;
            if (node->stage < 0)
                node->stage = 0;
        }
    }
    ir_readers rd; /* a node's readers, not every node: a scan each was quadratic in the layers */
    if (ir_readers_build(g, n, V, &rd)) {
        ir_readers_free(&rd);
        free(home);
        return diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "out of memory");
    }
    for (int32_t i = n - 1; i >= 0; i--) {
        ir_node *node = &g->nodes[i];
        if (node->stage >= 0)
            continue;
        int32_t s = -1;
        for (int o = 0; o < node->n_out; o++)
            for (int32_t r = rd.start[node->out[o]]; r < rd.start[node->out[o] + 1]; r++) {
                int32_t j = rd.at[r];
                if (j > i && g->nodes[j].stage > s)
                    s = g->nodes[j].stage;
            }
        node->stage = s >= 0 ? s : 0;
    }
    ir_readers_free(&rd);
    /* A gradient sum whose contributions all come from one other stage is
     * done there: one tensor crosses instead of one per contribution (the
     * residual stream's gradient at a cut has two). */
    for (int32_t i = 0; i < n; i++) {
        ir_node *node = &g->nodes[i];
        if (node->phase != PHASE_BACKWARD || node->op != OP_ADD || m->owner[i] >= 0 || node->n_in == 0)
            continue;
        int32_t from = -1, same = 1;
        for (int k = 0; k < node->n_in && same; k++) {
            int32_t producer = g->values[node->in[k]].producer;
            int32_t t = producer >= 0 ? g->nodes[producer].stage : -1;
            same = t >= 0 && (from < 0 || t == from);
            from = t;
        }
        if (same && from != node->stage)
            node->stage = from;
    }
    for (int32_t i = 0; i < n; i++)
        g->nodes[i].device = p->devices[g->nodes[i].stage * p->n_replicas];
    free(home);
    return 0;
}

static int plan_copy(fence_plan *dst, const fence_plan *src, int32_t n_devices)
{
    memset(dst, 0, sizeof *dst);
    *dst = *src;
    size_t S = (size_t)src->n_stages, SR = S * (size_t)src->n_replicas;
    dst->devices = malloc(SR * sizeof *dst->devices);
    dst->stage_of_node = malloc(((size_t)src->n_nodes + 1) * sizeof *dst->stage_of_node);
    dst->stage_compute = malloc(S * sizeof(double));
    dst->stage_update = malloc(S * sizeof(double));
    dst->cut_transfer = malloc(S * sizeof(double));
    dst->cut_bytes = malloc(S * sizeof(double));
    dst->allreduce = malloc(S * sizeof(double));
    dst->recompute = malloc(S + 1);
    dst->fence_of_device = malloc(((size_t)n_devices + 1) * sizeof *dst->fence_of_device);
    if (!dst->devices || !dst->stage_of_node || !dst->stage_compute || !dst->stage_update || !dst->cut_transfer ||
        !dst->cut_bytes || !dst->allreduce || !dst->recompute || !dst->fence_of_device) {
        fence_plan_free(dst);
        return -1;
    }
    memcpy(dst->devices, src->devices, SR * sizeof *dst->devices);
    memcpy(dst->stage_of_node, src->stage_of_node, (size_t)src->n_nodes * sizeof *dst->stage_of_node);
    memcpy(dst->stage_compute, src->stage_compute, S * sizeof(double));
    memcpy(dst->stage_update, src->stage_update, S * sizeof(double));
    memcpy(dst->cut_transfer, src->cut_transfer, S * sizeof(double));
    memcpy(dst->cut_bytes, src->cut_bytes, S * sizeof(double));
    memcpy(dst->allreduce, src->allreduce, S * sizeof(double));
    memcpy(dst->recompute, src->recompute, S);
    if (src->fence_of_device)
        memcpy(dst->fence_of_device, src->fence_of_device, (size_t)n_devices * sizeof *dst->fence_of_device);
    return 0;
}

int pass_fence(ir_graph *g, const pass_options *opt, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    const char *scheduler = opt->scheduler ? opt->scheduler : "opfence";
    if (strcmp(scheduler, "opfence") != 0 && strcmp(scheduler, "uniform") != 0 && strcmp(scheduler, "gcma") != 0 &&
        strcmp(scheduler, "random") != 0 && strcmp(scheduler, "megatron") != 0 &&
        strcmp(scheduler, "megatron-paper") != 0 && strcmp(scheduler, "gcma-alone") != 0)
        return diag_set(err, file, 0,
                        "unknown scheduler '%s' (the schedulers: opfence, uniform, megatron, megatron-paper, gcma, "
                        "gcma-alone, random)",
                        scheduler);
    double compress;
    if (compress_parse(opt->compress, opt->cluster, &compress))
        return diag_set(err, file, 0, "--compress expects none, topk:RHO (0 < RHO <= 1) or adatopk, found '%s'",
                        opt->compress);
    int32_t M = opt->micro_batches > 0 ? opt->micro_batches : 1;
    fence_model m;
    if (fence_model_build(&m, g, opt->cluster, err))
        return -1;
    m.compress = compress;
    m.shard = opt->shard_optimizer;
    m.memory_reserve = opt->memory_reserve;
    m.recompute = schedule_recompute_mode(opt->recompute);
    if (m.recompute < 0) {
        fence_model_free(&m);
        return diag_set(err, file, 0, "--recompute expects auto, on or off, found '%s'", opt->recompute);
    }
    fence_plan plan;
    memset(&plan, 0, sizeof plan);
    fence_best b = { INFINITY, 0, { 0, 0, 0, NULL }, NULL, NULL };
    int rc = 0;
    int32_t *fence_of = malloc(((size_t)m.n_devices + 1) * sizeof *fence_of);
    if (!fence_of) {
        rc = diag_set(err, file, 0, "out of memory");
        goto done;
    }
    int32_t F = fence_find(&m, fence_of);
    if (opt->plan) {
        if (opt->plan->n_nodes != g->n_nodes) {
            rc = diag_set(err, file, 0, "internal error: the plan was made for a graph of %d ops, this one has %d",
                          opt->plan->n_nodes, g->n_nodes);
            goto done;
        }
        if (plan_copy(&plan, opt->plan, m.n_devices)) {
            rc = diag_set(err, file, 0, "out of memory");
            goto done;
        }
    } else {
        if (m.n_fwd == 0) {
            rc = diag_set(err, file, 0, "the model has no forward ops to place");
            goto done;
        }
        rc = strcmp(scheduler, "uniform") == 0          ? plan_uniform(&m, M, &b)
             : strcmp(scheduler, "megatron") == 0       ? plan_megatron(&m, M, opt, &b)
             : strcmp(scheduler, "megatron-paper") == 0 ? plan_megatron_paper(&m, M, opt, &b)
             : strcmp(scheduler, "gcma") == 0           ? plan_gcma(&m, M, opt, 0, 1, fence_of, F, &b)
             : strcmp(scheduler, "gcma-alone") == 0     ? plan_gcma(&m, M, opt, 0, 0, fence_of, F, &b)
             : strcmp(scheduler, "random") == 0         ? plan_gcma(&m, M, opt, 1, 0, fence_of, F, &b)
                                                        : fence_search(&m, M, opt, fence_of, F, &b);
        if (rc || !b.dev) {
            if (opt->stages > 0 || opt->replicas > 0)
                rc = diag_set(err, file, 0,
                              "no placement of %d stages x %d replicas: the cluster has %d devices, the "
                              "model %d forward ops, and the replicas must divide the micro-batch (%lld rows)",
                              opt->stages, opt->replicas > 0 ? opt->replicas : 1, m.n_devices, m.n_fwd,
                              (long long)m.batch);
            else
                rc = diag_set(err, file, 0, "no placement of %d forward ops on %d devices fits", m.n_fwd, m.n_devices);
            goto done;
        }
        int32_t S = b.cd.S, R = b.cd.R;
        plan.n_stages = S;
        plan.n_replicas = R;
        plan.micro_batches = M;
        plan.n_nodes = g->n_nodes;
        plan.scheduler = strcmp(scheduler, "uniform") == 0          ? "uniform"
                         : strcmp(scheduler, "megatron") == 0       ? "megatron"
                         : strcmp(scheduler, "megatron-paper") == 0 ? "megatron-paper"
                         : strcmp(scheduler, "gcma") == 0           ? "gcma"
                         : strcmp(scheduler, "gcma-alone") == 0     ? "gcma-alone"
                         : strcmp(scheduler, "random") == 0         ? "random"
                                                                    : "opfence";
        plan.devices = malloc((size_t)S * (size_t)R * sizeof *plan.devices);
        plan.stage_of_node = malloc(((size_t)g->n_nodes + 1) * sizeof *plan.stage_of_node);
        plan.stage_compute = calloc((size_t)S, sizeof(double));
        plan.stage_update = calloc((size_t)S, sizeof(double));
        plan.cut_transfer = calloc((size_t)S, sizeof(double));
        plan.cut_bytes = calloc((size_t)S, sizeof(double));
        plan.allreduce = calloc((size_t)S, sizeof(double));
        plan.recompute = calloc((size_t)S + 1, 1);
        plan.fence_of_device = malloc(((size_t)m.n_devices + 1) * sizeof *plan.fence_of_device);
        if (!plan.devices || !plan.stage_of_node || !plan.stage_compute || !plan.stage_update || !plan.cut_transfer ||
            !plan.cut_bytes || !plan.allreduce || !plan.recompute || !plan.fence_of_device) {
            rc = diag_set(err, file, 0, "out of memory");
            goto done;
        }
        memcpy(plan.devices, b.dev, (size_t)S * (size_t)R * sizeof *plan.devices);
        memcpy(plan.fence_of_device, fence_of, (size_t)m.n_devices * sizeof *fence_of);
        plan.n_fences = F;
        for (int32_t i = 0; i < g->n_nodes; i++)
            plan.stage_of_node[i] = -1;
        for (int32_t s = 0, k = 0; s < S; s++)
            for (; k <= b.end[s]; k++)
                plan.stage_of_node[m.fwd[k]] = s;
        fence_evaluate(&m, &b.cd, b.end, &plan, NULL);
    }
    if ((rc = assign_stages(g, &m, &plan, err)) != 0)
        goto done;
    if (ir_graph_set_placement(g, plan.n_stages, plan.n_replicas, plan.micro_batches, plan.devices)) {
        rc = diag_set(err, file, 0, "out of memory");
        goto done;
    }
    if (opt->plan_out) {
        fence_plan_free(opt->plan_out);
        if (plan_copy(opt->plan_out, &plan, m.n_devices))
            rc = diag_set(err, file, 0, "out of memory");
    }
done:
    fence_plan_free(&plan);
    fence_best_free(&b);
    free(fence_of);
    fence_model_free(&m);
    return rc;
}
