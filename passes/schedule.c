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
 * have done.  So each stage warms up by as many more forwards as fit in
 * the round trips of the cuts after it:
 *
 *   w_s = min(M, max(w_{s+1} + 1, S - s - 1 + floor(R_s / t_s)))
 *   R_s = sum over the cuts c >= s of 2 (latency_c + max(fwd_c, bwd_c) / bandwidth_c)
 *   t_s = stage s's forward + backward per micro-batch (the estimator's)
 *
 * where fwd_c and bwd_c are the bytes a micro-batch sends across cut c
 * (between stages c and c + 1) each way, at their compressed size
 * (compress_wire_bytes).  A stage never warms up less than the next one
 * plus one, or it would wait for a backward that waits for its own
 * forward.  The cost is memory: a stage keeps w_s + 1 micro-batches'
 * stashed tensors instead of S - s.  On links as fast as the stages, R_s is
 * below t_s and this is plain 1F1B.  Without a cluster or with one stage
 * there is nothing to do.
 *
 * The runtime (runtime/main.c) and the simulator (tools/simulate.c) read
 * the warm-up from the placement.
 */
#include <math.h>
#include <stdlib.h>

#include "passes.h"

void schedule_warmup(int32_t S, int32_t M, const double *stage_seconds, const double *round_trip, int32_t *warm)
{
    double round_trips = 0.0;   /* R_s, summed from the last cut back */
    for (int32_t s = S - 1; s >= 0; s--) {
        if (s < S - 1)
            round_trips += round_trip[s];
        double extra = stage_seconds[s] > 0 ? floor(round_trips / stage_seconds[s]) : (double)M;
        double w = fmax(s + 1 < S ? warm[s + 1] + 1 : 0, (double)(S - s - 1) + fmin(extra, (double)M));
        warm[s] = (int32_t)fmin(w, (double)M);
    }
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
    if (!t || !fwd || !bwd || !warm) {
        free(t), free(fwd), free(bwd), free(warm);
        return diag_set(err, file, 0, "out of memory");
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->phase == PHASE_UPDATE || n->stage < 0 || n->stage >= S || n->device < 0 || n->device >= c->n_devices)
            continue;
        t[n->stage] += estimate_node_seconds(g, i, &c->devices[n->device]);
        if (n->op != OP_SEND || ir_node_int(n, ATTR_ONCE, 0))
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
    schedule_warmup(S, M, t, fwd, warm);
    int rc = ir_graph_set_warmup(g, warm) ? diag_set(err, file, 0, "schedule: cannot set the warm-up counts") : 0;
    free(t), free(fwd), free(bwd), free(warm);
    return rc;
}
