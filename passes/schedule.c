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
 *   w_s = min(M, max(S - s - 1, w_{s+1} + 1 + round(r_s / t_s)))
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
 * Recomputation.  Over slow links that cap can be what limits the step:
 * GPT-3 XL's shape on DT-FM's world-wide cluster keeps 800 MB a micro-batch
 * for a 3-layer stage, so a 16 GiB device holds 15 in flight where the
 * round trips ask for over 100.  A stage that recomputes keeps only what
 * its forward received and loaded (16 MB there) and runs the forward again
 * before each waiting backward (runtime/main.c), at the price of one more
 * forward a micro-batch.  `auto` (the default) chooses it when memory caps
 * some stage's warm-up, for the stages it caps, if the step it predicts is
 * shorter: a stage's period a micro-batch is the longest of its compute,
 * the cut's transfer, and the cut's round trip shared among the
 * micro-batches the lead keeps on it,
 *
 *   period = max_s max(t_s, transfer_s, (r_s + t_s) / (w_s - w_{s+1}))
 *
 * (a lead of r_s / t_s + 1 makes the last term t_s).  The lead is
 * rounded to the nearest micro-batch.  Rounded down, as it was, a round
 * trip just short of a multiple of t_s lost a whole micro-batch of lead:
 * at r_s / t_s = 0.997 the stage waited its round trip every micro-batch
 * ((r + t) / 1 = 2 t), and an 8B LoRA world-wide ran 15.64 s a step for
 * 14.02 now.  Rounded up, a round trip a tenth of t_s (25 Gbps between a
 * data centre's hosts) asked for a micro-batch more in flight than the
 * 8B's 16 GiB stages hold, and the plan fell back to recomputing (11.28
 * -> 14.24 s); such a stage waits at most half a micro-batch's compute.
 * `on` recomputes every stage that keeps anything, `off` none.
 *
 * Partial replay.  A recomputing stage need not replay every waiting
 * micro-batch: with n = w_s + 1 in flight, memory may hold K of them whole
 * beside the other n - K's inputs,
 *
 *   K kept_s + (n - K) inputs_s <= room_s   (0 <= K < n),
 *
 * and only those n - K replay: the runtime keeps a forward whole while
 * fewer than K are (runtime/stepper.c), which in 1F1B's steady state
 * replays n - K of every n micro-batches, so the stage costs
 * t_s + f_s (n - K) / n.  All or nothing, an 8B LoRA's stage 0 world-wide
 * (7 in flight, 2 GB a micro-batch for 8 layers) either replayed all (a
 * third more compute) or took fewer layers (6, 107 ms against the
 * others' 181); keeping 5 of its 8 whole it takes its share (130 ms
 * against 158-163, 13.81 -> 12.88 s a step).  keep:K asks every
 * stage that stashes to recompute keeping at most K whole (a test's way
 * to run it).
 *
 * The runtime (runtime/main.c) and the simulator (tools/simulate.c) read
 * the warm-up, the recompute flags and the whole-kept counts from the
 * placement.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

void schedule_warmup(int32_t S, int32_t M, const double *stage_seconds, const double *round_trip, const double *most,
                     int32_t *warm)
{
    for (int32_t s = S - 1; s >= 0; s--) {
        double w = (double)(S - s - 1);
        if (s < S - 1) {
            double lead =
                stage_seconds[s] > 0 ? floor(round_trip[s] / stage_seconds[s] + 0.5) : (double)M; /* rounded */
            /* The cap: its own memory's, and room for the stages before it,
             * each of which must run at least one forward more. */
            double cap = (double)M;
            for (int32_t j = 0; most && j <= s; j++)
                cap = fmin(cap, most[j] - (s - j));
            w = fmax(w, warm[s + 1] + 1); /* always: or it waits for a backward that waits for it */
            w = fmax(w, fmin(warm[s + 1] + 1 + fmin(lead, (double)M), cap));
        }
        warm[s] = (int32_t)fmin(w, (double)M);
    }
}

double schedule_most_kept(const schedule_memory *m)
{
    return m && m->room < INFINITY && m->kept > 0 ? floor(fmax(m->room, -m->kept) / m->kept) : INFINITY;
}

double schedule_most_replayed(const schedule_memory *m)
{
    return m && m->room < INFINITY && m->inputs > 0 ? floor(fmax(m->room, 0.0) / m->inputs) - 1.0 : INFINITY;
}

int32_t schedule_keep_whole(const schedule_memory *m, int32_t n)
{
    if (n < 2)
        return 0;
    if (!m || !(m->room < INFINITY) || !(m->kept > m->inputs))
        return n - 1;
    double k = floor((m->room - n * m->inputs) / (m->kept - m->inputs));
    return k < 0 ? 0 : k > n - 1 ? n - 1 : (int32_t)k;
}

int schedule_recompute_mode(const char *spec)
{
    if (spec && strncmp(spec, "keep:", 5) == 0) { /* keep:K, K >= 1 */
        char *end;
        long k = strtol(spec + 5, &end, 10);
        return spec[5] >= '0' && spec[5] <= '9' && *end == '\0' && k >= 1 && k <= 1 << 20
                   ? SCHEDULE_RECOMPUTE_KEEP + (int)k
                   : -1;
    }
    return !spec || strcmp(spec, "auto") == 0 ? SCHEDULE_RECOMPUTE_AUTO
           : strcmp(spec, "on") == 0          ? SCHEDULE_RECOMPUTE_ON
           : strcmp(spec, "off") == 0         ? SCHEDULE_RECOMPUTE_OFF
                                              : -1;
}

/* The predicted seconds a micro-batch of the pipeline in this order (the
 * period in the comment at the top). */
static double pipeline_period(int32_t S, const double *t, const double *round_trip, const double *transfer,
                              const int32_t *warm)
{
    double period = 0.0;
    for (int32_t s = 0; s < S; s++) {
        period = fmax(period, t[s]);
        if (s + 1 < S) {
            int32_t lead = warm[s] - warm[s + 1];
            period = fmax(period, transfer[s]);
            if (lead > 0) /* lead 0: both hold every micro-batch, nothing waits */
                period = fmax(period, (round_trip[s] + t[s]) / lead);
        }
    }
    return period;
}

/* How many of n waiting micro-batches a recomputing stage keeps whole:
 * `on` none, keep:K at most K, `auto` what its memory holds beside the
 * others' inputs. */
static int32_t keep_for(int mode, const schedule_memory *memory, int32_t n)
{
    if (mode == SCHEDULE_RECOMPUTE_ON)
        return 0;
    if (mode >= SCHEDULE_RECOMPUTE_KEEP)
        return mode - SCHEDULE_RECOMPUTE_KEEP < n - 1 ? mode - SCHEDULE_RECOMPUTE_KEEP : n - 1;
    return schedule_keep_whole(memory, n);
}

int schedule_plan(int32_t S, int32_t M, const double *stage_seconds, const double *forward_seconds,
                  const double *round_trip, const double *transfer, const schedule_memory *memory, int mode,
                  int32_t *warm, uint8_t *recompute, int32_t *keep, double *stage_out)
{
    double *t = malloc(((size_t)S + 1) * sizeof *t), *most = malloc(((size_t)S + 1) * sizeof *most);
    double *most_kept = malloc(((size_t)S + 1) * sizeof *most_kept);
    int32_t *uncapped = malloc(((size_t)S + 1) * sizeof *uncapped), *warm_r = malloc(((size_t)S + 1) * sizeof *warm_r);
    struct {
        int32_t *warm, *keep;
        double *t;
        uint8_t *recompute;
    } first = { malloc(((size_t)S + 1) * sizeof *first.warm), malloc(((size_t)S + 1) * sizeof *first.keep),
                malloc(((size_t)S + 1) * sizeof *first.t), malloc((size_t)S + 1) };
    int rc = -1, forced = mode == SCHEDULE_RECOMPUTE_ON || mode >= SCHEDULE_RECOMPUTE_KEEP;
    if (!t || !most || !most_kept || !uncapped || !warm_r || !first.warm || !first.keep || !first.t || !first.recompute)
        goto done;
    for (int32_t s = 0; s < S; s++)
        most_kept[s] = schedule_most_kept(memory ? &memory[s] : NULL);
    schedule_warmup(S, M, stage_seconds, round_trip, most_kept, warm);
    memset(recompute, 0, (size_t)S);
    memset(keep, 0, (size_t)S * sizeof *keep);
    if (stage_out)
        memcpy(stage_out, stage_seconds, (size_t)S * sizeof *stage_out);
    rc = 0;
    if (mode == SCHEDULE_RECOMPUTE_OFF)
        goto done;
    /* The stages whose own memory caps the warm-up they would take. */
    schedule_warmup(S, M, stage_seconds, round_trip, NULL, uncapped);
    int any = 0;
    for (int32_t s = 0; s < S; s++) {
        recompute[s] = forced || most_kept[s] < uncapped[s];
        t[s] = stage_seconds[s] + (recompute[s] ? forward_seconds[s] : 0.0);
        most[s] = recompute[s] ? schedule_most_replayed(memory ? &memory[s] : NULL) : most_kept[s];
        any |= recompute[s];
    }
    if (!any)
        goto done;
    /* The warm-up for these seconds, then what each recomputing stage
     * keeps whole at that warm-up and so the share of its micro-batches
     * that replay; then again, the warm-up seeing those cheaper stages,
     * kept only if its period is shorter.  A cheaper stage asks for more
     * lead, so more in flight and more replays: a link-bound full
     * fine-tune of an 8B Llama world-wide (14 stages, 128 ms a
     * micro-batch on a far link) took 11.45 s a step with the second
     * round where the first gives 11.09; the 8B LoRA's stage 0 needs it
     * (13.41 s with the first alone, 12.88 s). */
    for (int round = 0; round < 2; round++) {
        if (round == 1) { /* the first round's choice, to go back to */
            memcpy(first.warm, warm_r, (size_t)S * sizeof *warm_r);
            memcpy(first.keep, keep, (size_t)S * sizeof *keep);
            memcpy(first.t, t, (size_t)S * sizeof *t);
            memcpy(first.recompute, recompute, (size_t)S);
        }
        schedule_warmup(S, M, t, round_trip, most, warm_r);
        for (int32_t s = 0; s < S; s++) {
            if (!recompute[s])
                continue;
            int32_t n = warm_r[s] + 1 < M ? warm_r[s] + 1 : M;
            /* its backward always follows its forward (nothing kept), or its stash fits whole after all */
            if (warm_r[s] == 0 || (!forced && warm_r[s] <= most_kept[s])) {
                recompute[s] = 0, keep[s] = 0;
                t[s] = stage_seconds[s];
                most[s] = most_kept[s];
                continue;
            }
            keep[s] = keep_for(mode, memory ? &memory[s] : NULL, n);
            t[s] = stage_seconds[s] + forward_seconds[s] * (double)(n - keep[s]) / n;
        }
    }
    if (!(pipeline_period(S, t, round_trip, transfer, warm_r) <
          pipeline_period(S, first.t, round_trip, transfer, first.warm) * (1.0 - 1e-9))) {
        memcpy(warm_r, first.warm, (size_t)S * sizeof *warm_r);
        memcpy(keep, first.keep, (size_t)S * sizeof *keep);
        memcpy(t, first.t, (size_t)S * sizeof *t);
        memcpy(recompute, first.recompute, (size_t)S);
    }
    if (mode == SCHEDULE_RECOMPUTE_AUTO && !(pipeline_period(S, t, round_trip, transfer, warm_r) <
                                             pipeline_period(S, stage_seconds, round_trip, transfer, warm))) {
        memset(recompute, 0, (size_t)S);
        memset(keep, 0, (size_t)S * sizeof *keep);
        goto done;
    }
    memcpy(warm, warm_r, (size_t)S * sizeof *warm);
    if (stage_out)
        memcpy(stage_out, t, (size_t)S * sizeof *stage_out);
done:
    free(t);
    free(most);
    free(most_kept);
    free(uncapped);
    free(warm_r);
    free(first.warm), free(first.keep), free(first.t), free(first.recompute);
    return rc;
}

/* The bytes stage s keeps a waiting micro-batch (memory_stash_values_as). */
static double stash_bytes(const ir_graph *g, int32_t s, int recompute, int32_t *ids)
{
    int32_t n = memory_stash_values_as(g, s, recompute, ids);
    double bytes = 0.0;
    for (int32_t i = 0; i < n; i++)
        bytes += (double)ir_value_bytes(g, ids[i]);
    return n < 0 ? -1.0 : bytes;
}

int pass_schedule(ir_graph *g, const pass_options *opt, struct diag *err)
{
    const cluster *c = opt->cluster;
    const ir_placement *p = &g->placement;
    int32_t S = p->n_stages, R = p->n_replicas, M = p->micro_batches;
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    int mode = schedule_recompute_mode(opt->recompute);
    if (mode < 0)
        return diag_set(err, file, 0, "--recompute: expected auto, on, off or keep:K, found '%s'", opt->recompute);
    if (!c || S < 2)
        return 0;
    double *t = calloc((size_t)S, sizeof *t), *fwd = calloc((size_t)S, sizeof *fwd),
           *bwd = calloc((size_t)S, sizeof *bwd), *forward = calloc((size_t)S, sizeof *forward);
    double *transfer = calloc((size_t)S, sizeof *transfer), *state = calloc((size_t)S, sizeof *state);
    schedule_memory *room = calloc((size_t)S, sizeof *room);
    int32_t *warm = calloc((size_t)S, sizeof *warm), *ids = malloc(((size_t)g->n_values + 1) * sizeof *ids);
    int32_t *keep = calloc((size_t)S, sizeof *keep);
    uint8_t *recompute = calloc((size_t)S, 1);
    char *counted = calloc((size_t)g->n_values + 1, 1);
    int rc = 0;
    if (!t || !fwd || !bwd || !forward || !transfer || !state || !room || !warm || !ids || !keep || !recompute ||
        !counted) {
        rc = diag_set(err, file, 0, "out of memory");
        goto done;
    }
    /* Memory: each stage's trained parameters with their gradients and two
     * AdamW moments (read by its ops, each once: 4 x; 2 + 2/R x with
     * --shard-optimizer), its frozen ones alone (1 x: no gradient, no
     * moments; counted 4 x, an 8B LoRA stage of 5 layers looked 6.6 GB
     * fuller than it is and recomputed for nothing), a parameter received
     * once a step with its summed gradient (2 x), and what it keeps a
     * waiting micro-batch (its stash, either way).  The fence pass's cost
     * model counts alike (fence_cost.c: stage_memory). */
    double trained_times = opt->shard_optimizer && R > 1 ? 2.0 + 2.0 / R : 4.0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->stage < 0 || n->stage >= S)
            continue;
        for (int k = 0; k < n->n_in; k++)
            if (g->values[n->in[k]].role == ROLE_PARAM && !counted[n->in[k]]) {
                counted[n->in[k]] = 1;
                double times = ir_value_trained(&g->values[n->in[k]]) ? trained_times : 1.0;
                state[n->stage] += times * (double)ir_value_bytes(g, n->in[k]);
            }
        if (n->op == OP_RECV && ir_node_int(n, ATTR_ONCE, 0) && n->phase != PHASE_BACKWARD && n->phase != PHASE_UPDATE)
            for (int k = 0; k < n->n_out; k++)
                state[n->stage] += 2.0 * (double)ir_value_bytes(g, n->out[k]);
    }
    /* The micro-batch being run: the arena as the memory pass lays it out
     * (the stage's state and one micro-batch's activations, gradients and
     * scratch), which tools/plan_memory.c checks a plan against; counted
     * as state plus one stash, it was 0.7-3.2 GB short on an 8B Llama's
     * stages, and a warm-up the cap allowed did not fit. */
    if (pass_memory(g, err)) {
        rc = -1;
        goto done;
    }
    for (int32_t s = 0; s < S; s++) {
        double memory = INFINITY, kept = stash_bytes(g, s, 0, ids), inputs = stash_bytes(g, s, 1, ids);
        double arena = (double)memory_arena_bytes(g, p->device[s * R]), working = fmax(state[s] + kept, arena);
        if (kept < 0 || inputs < 0) {
            rc = diag_set(err, file, 0, "out of memory");
            goto done;
        }
        for (int32_t r = 0; r < R; r++)
            if (p->device[s * R + r] >= 0 && p->device[s * R + r] < c->n_devices)
                memory = fmin(memory, estimate_usable_memory(&c->devices[p->device[s * R + r]]));
        room[s] = (schedule_memory){ memory > 0 ? memory - working : INFINITY, kept, inputs }; /* 0: not known */
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->phase == PHASE_UPDATE || n->phase == PHASE_PREFILL || n->stage < 0 || n->stage >= S || n->device < 0 ||
            n->device >= c->n_devices)
            continue;
        double seconds = estimate_node_seconds(g, i, &c->devices[n->device]);
        t[n->stage] += seconds;
        if (n->phase != PHASE_BACKWARD && n->op != OP_SEND && n->op != OP_RECV)
            forward[n->stage] += seconds; /* what a replay runs */
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
    for (int32_t s = 0; s + 1 < S; s++) { /* cut s: the slowest replica lane's link between s and s + 1 */
        double bw = INFINITY, lat = 0.0;
        for (int32_t r = 0; r < R; r++) {
            double b, l;
            cluster_link_between(c, p->device[s * R + r], p->device[(s + 1) * R + r], &b, &l);
            bw = fmin(bw, b);
            lat = fmax(lat, l);
        }
        transfer[s] = fmax(fwd[s], bwd[s]) / bw;
        fwd[s] = 2.0 * (lat + transfer[s]); /* now the cut's round trip */
    }
    if (schedule_plan(S, M, t, forward, fwd, transfer, room, mode, warm, recompute, keep, NULL))
        rc = diag_set(err, file, 0, "out of memory");
    else if (ir_graph_set_warmup(g, warm) || ir_graph_set_recompute(g, recompute) || ir_graph_set_keep(g, keep))
        rc = diag_set(err, file, 0, "schedule: cannot set the warm-up counts");
done:
    free(t), free(fwd), free(bwd), free(forward), free(transfer), free(state), free(room);
    free(warm), free(ids), free(keep), free(recompute), free(counted);
    return rc;
}
