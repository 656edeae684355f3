/* plan_memory.c: what each device of a placed plan needs, against what it
 * has (plan_memory.h).
 *
 * A device's need is its arena as the memory pass laid it out (the
 * parameters, their gradients, AdamW's moments, the step's activations and
 * every op's scratch, dead memory reused) plus the stashed activations of
 * the micro-batches 1F1B keeps waiting for their backward (the schedule
 * pass's warm-up), and on a CUDA device its context
 * (ESTIMATE_CUDA_CONTEXT_BYTES).  The fence pass searches with its own
 * estimate of the same (fence_cost.c); this is the check that nothing it
 * returns is compiled for a card it does not fit.
 */
#include "plan_memory.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h" /* op_updates_param */

#define GIB (1024.0 * 1024.0 * 1024.0)

/* What stage s keeps of a waiting micro-batch: whole (what its backward
 * reads), or to replay (what its forward received); memory_stash_values_as. */
static double stage_stash_bytes(const ir_graph *g, int32_t s, int replay)
{
    int32_t *ids = malloc(((size_t)g->n_values + 1) * sizeof *ids);
    int32_t n = ids ? memory_stash_values_as(g, s, replay, ids) : 0;
    double stash = 0.0;
    for (int32_t i = 0; i < n; i++)
        stash += (double)ir_value_bytes(g, ids[i]);
    free(ids);
    return stash;
}

double plan_stage_memory(const ir_graph *g, const fence_plan *p, int32_t s)
{
    int replay = ir_placement_recompute(&g->placement, s);
    double stash = stage_stash_bytes(g, s, replay);
    int32_t waiting =
        g->placement.n_stages == p->n_stages ? ir_placement_warmup(&g->placement, s) : p->n_stages - s - 1;
    if (waiting > p->micro_batches)
        waiting = p->micro_batches;
    if (waiting < 0 || p->micro_batches <= 1)
        waiting = 0;
    double arena = (double)memory_arena_bytes(g, p->devices[s * p->n_replicas]);
    int32_t keep = ir_placement_keep(&g->placement, s); /* > 0 only on a placed graph */
    if (replay && keep > 0) /* partial replay: keep whole, the rest their inputs (schedule_keep_whole) */
        return arena + keep * stage_stash_bytes(g, s, 0) + (ir_placement_in_flight(&g->placement, s) - keep) * stash;
    return arena + waiting * stash;
}

/* The bytes of device d's parameters, their gradients (what its update
 * ops read: a parameter's summed gradient lives the whole step) and its
 * optimizer state. */
static void state_bytes(const ir_graph *g, int32_t d, double *params, double *grads, double *moments)
{
    *params = *grads = *moments = 0.0;
    uint8_t *seen = calloc((size_t)g->n_values + 1, 1);
    for (int32_t i = 0; seen && i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->device != d)
            continue;
        if (op_updates_param(n->op) && n->n_in > 1 && !seen[n->in[1]]) {
            seen[n->in[1]] = 1;
            *grads += (double)ir_value_bytes(g, n->in[1]);
        }
        for (int k = 0; k < n->n_in; k++) {
            int32_t v = n->in[k];
            if (seen[v] || (g->values[v].role != ROLE_PARAM && g->values[v].role != ROLE_STATE))
                continue;
            seen[v] = 1;
            *(g->values[v].role == ROLE_PARAM ? params : moments) += (double)ir_value_bytes(g, v);
        }
    }
    free(seen);
}

/* Whether device d's updates run on sharded moments (--shard-optimizer). */
static int stage_sharded(const ir_graph *g, int32_t d)
{
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].device == d && g->nodes[i].op == OP_ADAMW && ir_node_int(&g->nodes[i], ATTR_SHARD, 0))
            return 1;
    return 0;
}

/* "; what" appended to help (no "; " before the first). */
static void add_help(char *help, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_help(char *help, size_t n, const char *fmt, ...)
{
    size_t at = strlen(help);
    if (at && at + 2 < n)
        memcpy(help + at, "; ", 3), at += 2;
    va_list ap;
    va_start(ap, fmt);
    if (at < n)
        vsnprintf(help + at, n - at, fmt, ap);
    va_end(ap);
}

double plan_memory_shortfall(const ir_graph *g, const cluster *c, const fence_plan *p)
{
    double most = 0.0;
    for (int32_t s = 0; s < p->n_stages; s++) {
        double need = plan_stage_memory(g, p, s);
        for (int32_t r = 0; r < p->n_replicas; r++) {
            double have = estimate_usable_memory(&c->devices[p->devices[s * p->n_replicas + r]]);
            if (have > 0 && need - have > most)
                most = need - have;
        }
    }
    return most;
}

double plan_memory_working_extra(const ir_graph *g, const fence_plan *p, int waiting_only)
{
    double most = 0.0;
    for (int32_t s = 0; s < p->n_stages; s++) {
        if (waiting_only && g->placement.n_stages == p->n_stages && ir_placement_warmup(&g->placement, s) == 0)
            continue;
        int32_t d = p->devices[s * p->n_replicas];
        double params, grads, moments;
        state_bytes(g, d, &params, &grads, &moments);
        /* the cost model counts a running micro-batch as one whole stash, recomputing or not */
        double extra = (double)memory_arena_bytes(g, d) - params - grads - moments - stage_stash_bytes(g, s, 0);
        most = fmax(most, extra);
    }
    return most;
}

int plan_memory_check(const ir_graph *g, const cluster *c, const fence_plan *p, const char *model_path,
                      struct diag *err)
{
    for (int32_t s = 0; s < p->n_stages; s++) {
        double need = plan_stage_memory(g, p, s);
        for (int32_t r = 0; r < p->n_replicas; r++) {
            int32_t d = p->devices[s * p->n_replicas + r];
            const cluster_device *dev = &c->devices[d];
            double have = estimate_usable_memory(dev);
            if (have <= 0 || need <= have)
                continue;
            double params, grads, moments;
            state_bytes(g, d, &params, &grads, &moments);
            double state = params + grads + moments, rest = need - state;
            /* what would help, each only where it applies */
            char help[900] = "";
            int stages_needed = (int)ceil(state / have);
            if (stages_needed > 1)
                add_help(help, sizeof help,
                         "more devices as pipeline stages (its parameters, gradients and AdamW's moments alone need "
                         "%.1f GiB: %d stages of this card at the least)",
                         state / GIB, stages_needed * p->n_stages);
            if (p->n_replicas > 1 && !stage_sharded(g, d))
                add_help(help, sizeof help, "--shard-optimizer (the %d replicas split AdamW's moments)", p->n_replicas);
            if (!ir_placement_recompute(&g->placement, s))
                add_help(help, sizeof help, "--recompute on (a stage keeps only what its forward receives)");
            add_help(help, sizeof help, "a smaller micro-batch (--micro-batches %d, or a smaller --set batch=)",
                     p->micro_batches * 2);
            if (g->precision == DT_F32)
                add_help(help, sizeof help, "--precision bf16 (16-bit activations)");
            add_help(help, sizeof help, "fine-tuning: --lora or --freeze (no gradients or moments for the base)");
            return diag_set(err, model_path, 0,
                            "the plan (%d stage%s x %d replica%s) does not fit: %s (stage %d) needs %.1f GiB and has "
                            "%.1f GiB%s (parameters %.1f GiB, their gradients %.1f GiB, AdamW's moments %.1f "
                            "GiB, activations and scratch %.1f GiB). What would help: %s",
                            p->n_stages, p->n_stages == 1 ? "" : "s", p->n_replicas, p->n_replicas == 1 ? "" : "s",
                            dev->name, s, need / GIB, have / GIB,
                            dev->kind == DEVICE_CUDA ? " once its CUDA context (0.5 GiB) is made" : "", params / GIB,
                            grads / GIB, moments / GIB, (rest > 0 ? rest : 0.0) / GIB, help);
        }
    }
    return 0;
}
