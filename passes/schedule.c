/* schedule.c: the `schedule` pass: how many forwards each pipeline stage
 * runs before its first backward (ir_placement.warmup).
 *
 * The device program runs its stage's micro-batches in 1F1B order
 * (runtime/main.c): w_s warm-up forwards, then one forward and one backward
 * in turn.  Plain 1F1B takes w_s = S - s - 1: enough when the stages'
 * compute is what the first backward waits for.  Over a slow link it is
 * not: the first micro-batch's gradient comes back a round trip later
 * (latency and transfer, each way, at every cut downstream), and a stage
 * that has run out of warm-up forwards idles that long with work it could
 * have done.  So each stage keeps as many more forwards in flight than
 * the next one as fit in the round trip of the cut between them:
 *
 *   w_s = min(M, max(S - s - 1, w_{s+1} + 1 + floor(r_s / t_s)))
 *   r_s = 2 (latency_s + max(fwd_s, bwd_s) / bandwidth_s), cut s's round trip
 *   t_s = stage s's forward + backward per micro-batch (the estimator's)
 *
 * where fwd_s and bwd_s are the bytes a micro-batch sends across cut s
 * (between stages s and s + 1) each way, at their compressed size
 * (compress_wire_bytes); what crosses once a step is not counted.  Per cut,
 * not summed over the cuts downstream: stage s runs ahead of stage s + 1 by
 * w_s - w_{s+1}, and that lead is what covers the round trip between them
 * (with a sum, a stage slower than the next, t_s > t_{s+1}, could get a
 * lead of one and stall every other micro-batch: measured, a 13-stage GPT-3
 * XL pipeline took 7.1 s a step for 4.5 s).  A stage never warms up less
 * than the next one plus one, or it would wait for a backward that waits
 * for its own forward.  The cost is memory: a stage keeps w_s + 1
 * micro-batches' stashed tensors instead of S - s, so the lead is capped
 * by memory: w_s + 1 micro-batches in flight must fit beside the stage's
 * parameters, gradients and AdamW moments,
 *
 *   w_s <= floor((memory_s - 4 P_s) / A_s) - 1   (never below S - s - 1 or w_{s+1} + 1;
 *                                                and w_s <= w_{s-1} - 1 for the stage before it)
 *
 * with P_s the stage's parameter bytes, A_s the forward outputs its backward reads per
 * micro-batch and memory_s its smallest replica's memory (the fence pass's
 * cost model caps alike: fence_cost.c).  On links as fast as the stages r_s
 * is below t_s and this is plain 1F1B.  Without a cluster or with one stage
 * there is nothing to do.
 *
 * The runtime (runtime/main.c) and the simulator (tools/simulate.c) read
 * the warm-up from the placement.
 */
#include <math.h>
#include <stdlib.h>

#include "passes.h"

void schedule_warmup(int32_t S, int32_t M, const double *stage_seconds, const double *round_trip,
                     const double *most, int32_t *warm)
{
    for (int32_t s = S - 1; s >= 0; s--) {
        double w = (double)(S - s - 1);
        if (s < S - 1) {
            double lead = stage_seconds[s] > 0 ? floor(round_trip[s] / stage_seconds[s]) : (double)M;
            /* The cap: its own memory's, and room for the stages before it,
             * each of which must run at least one forward more. */
            double cap = (double)M;
            for (int32_t j = 0; most && j <= s; j++)
                cap = fmin(cap, most[j] - (s - j));
            w = fmax(w, warm[s + 1] + 1);   /* always: or it waits for a backward that waits for it */
            w = fmax(w, fmin(warm[s + 1] + 1 + fmin(lead, (double)M), cap));
        }
        warm[s] = (int32_t)fmin(w, (double)M);
    }
}

double schedule_warmup_most(double memory, double state_bytes, double stash_bytes)
{
    if (!(memory > 0) || !(stash_bytes > 0))
        return INFINITY;
    return floor((memory - state_bytes) / stash_bytes) - 1.0;
}

int pass_schedule(ir_graph *g, const pass_options *opt, struct diag *err)
{
    const cluster *c = opt->cluster;
    const ir_placement *p = &g->placement;
    int32_t S = p->n_stages, R = p->n_replicas, M = p->micro_batches;
    if (!c || S < 2)
        return 0;
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    double *t = calloc((size_t)S, sizeof *t), *fwd = calloc((size_t)S, sizeof *fwd),
           *bwd = calloc((size_t)S, sizeof *bwd);
    int32_t *warm = calloc((size_t)S, sizeof *warm);
    double *state = calloc((size_t)S, sizeof *state), *outputs = calloc((size_t)S, sizeof *outputs);
    double *most = calloc((size_t)S, sizeof *most);
    char *counted = calloc((size_t)g->n_values + 1, 1), *by_backward = calloc((size_t)g->n_values + 1, 1);
    if (!t || !fwd || !bwd || !warm || !state || !outputs || !most || !counted || !by_backward) {
        free(t), free(fwd), free(bwd), free(warm), free(state), free(outputs), free(most), free(counted),
            free(by_backward);
        return diag_set(err, file, 0, "out of memory");
    }
    /* Memory: each stage's parameters with their gradients and two AdamW
     * moments (read by its ops, each once: 4 x), a parameter received once
     * a step with its summed gradient (2 x), and the outputs of its forward
     * ops a backward op reads, one micro-batch's (its stash). */
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].phase == PHASE_BACKWARD)
            for (int k = 0; k < g->nodes[i].n_in; k++)
                by_backward[g->nodes[i].in[k]] = 1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->stage < 0 || n->stage >= S)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (g->values[n->in[k]].role == ROLE_PARAM && !counted[n->in[k]]) {
                counted[n->in[k]] = 1;
                state[n->stage] += 4.0 * (double)ir_value_bytes(g, n->in[k]);
            }
        int once = n->op == OP_RECV && ir_node_int(n, ATTR_ONCE, 0);
        if (n->phase == PHASE_FORWARD || n->phase == PHASE_NONE)
            for (int k = 0; k < n->n_out; k++) {
                if (once)
                    state[n->stage] += 2.0 * (double)ir_value_bytes(g, n->out[k]);
                else if (by_backward[n->out[k]])
                    outputs[n->stage] += (double)ir_value_bytes(g, n->out[k]);
            }
    }
    for (int32_t s = 0; s < S; s++) {
        double memory = INFINITY;
        for (int32_t r = 0; r < R; r++)
            if (p->device[s * R + r] >= 0 && p->device[s * R + r] < c->n_devices)
                memory = fmin(memory, c->devices[p->device[s * R + r]].memory_bytes);
        most[s] = schedule_warmup_most(memory, state[s], outputs[s]);
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->phase == PHASE_UPDATE || n->stage < 0 || n->stage >= S || n->device < 0 || n->device >= c->n_devices)
            continue;
        t[n->stage] += estimate_node_seconds(g, i, &c->devices[n->device]);
        /* A micro-batch's round trip: not what crosses once a step (a
         * parameter, and its gradient summed over the step: `accumulate`). */
        if (n->op != OP_SEND || ir_node_int(n, ATTR_ONCE, 0) || ir_node_int(n, ATTR_ACCUMULATE, 0))
            continue;
        int32_t to = (int32_t)ir_node_int(n, ATTR_PEER, -1);
        if (to < 0 || to >= S || to == n->stage)
            continue;
        double bytes = compress_wire_bytes(g, n);
        for (int32_t cut = n->stage < to ? n->stage : to; cut < (n->stage < to ? to : n->stage); cut++)
            *(n->stage < to ? &fwd[cut] : &bwd[cut]) += bytes;
    }
    for (int32_t s = 0; s + 1 < S; s++) {   /* cut s: the slowest replica lane's link between s and s + 1 */
        double bw = INFINITY, lat = 0.0;
        for (int32_t r = 0; r < R; r++) {
            double b, l;
            cluster_link_between(c, p->device[s * R + r], p->device[(s + 1) * R + r], &b, &l);
            bw = fmin(bw, b);
            lat = fmax(lat, l);
        }
        fwd[s] = 2.0 * (lat + fmax(fwd[s], bwd[s]) / bw);   /* now the cut's round trip */
    }
    schedule_warmup(S, M, t, fwd, most, warm);
    int rc = ir_graph_set_warmup(g, warm) ? diag_set(err, file, 0, "schedule: cannot set the warm-up counts") : 0;
    free(t), free(fwd), free(bwd), free(warm), free(state), free(outputs), free(most), free(counted),
        free(by_backward);
    return rc;
}
