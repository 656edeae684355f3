/* comm.c: the `comm` pass.  After the fence pass every node has a stage;
 * this pass makes every value live on one stage only, which is what lets
 * each device's program be compiled alone (remote autodiff: RAD):
 *
 *   - a value read on a stage other than its home (its producer's stage,
 *     or for a param, input or state its first reader's) gets, per such
 *     stage t, a send on its home and a recv on t sharing a tensor id;
 *     t's readers read the received copy "<value>:s<t>".  Forward
 *     activations so flow down the pipeline and their gradients (made by
 *     the backward ops on the later stage) flow back up; a parameter used
 *     on two stages (GPT-2's tied embedding) is sent to the second once a
 *     step (`once`: in micro-batch 0) and its partial gradient sent back
 *     to be summed into the parameter's gradient (`accumulate`: the sender
 *     sums it over the step's micro-batches and sends the sum with the
 *     last, the receiver reads zeros before: the runtime sums each
 *     micro-batch's gradient, so the step's gradient is the same and one
 *     tensor crosses a step instead of M);
 *   - the send follows its producer when both ends are in the same phase
 *     (an activation leaves as soon as it is made), else it sits just
 *     before the recv;
 *   - an op without inputs (the learning-rate schedule) read on several
 *     stages is computed on each rather than sent;
 *   - with R > 1 replicas per stage, every parameter's gradient is averaged
 *     over the stage's replicas (allreduce) before the optimizer reads it;
 *     the all-reduces open the stage's update, back to back; they are
 *     numbered into buckets that the runtime reduces while the backward
 *     still runs (assign_buckets), on CPU and CUDA devices alike; when the
 *     stage's replicas span
 *     regions and it is cheaper, `groups` says to reduce inside each
 *     region first, then among one leader a region (allreduce_plan.h);
 *   - under --shard-optimizer (ZeRO-1, runtime/shard.h), with R > 1: each
 *     replica keeps the AdamW moments of its piece of every parameter (m
 *     and v shrink to ceil(n / R) elements); the all-reduces become the
 *     ring's reduce-scatter (`shard`), each replica's sum_squares and
 *     adamw run on its piece (`shard`), the partial norm squares are
 *     summed over the replicas (an allreduce with `sum`) before the clip,
 *     and the stage's update ends with an allgather of every parameter it
 *     updated (one bucket: the ring's all-gather half).
 *
 * With one stage and one replica the pass changes nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "../ir/readers.h"
#include "../runtime/shard.h"
#include "allreduce_plan.h"
#include "passes.h"

#define COMM_NAME_MAX 320

typedef struct {
    ir_graph *g;
    struct diag *err;
    int32_t n_old;   /* nodes before the pass                         */
    int32_t *anchor; /* per new node: the old node it goes next to    */
    char *after;     /* per new node: 0 before the anchor, 1 after it,
                                  2 after those                                  */
    int32_t cap;
    int32_t next_tensor;
    const cluster *cluster; /* the placement's devices (NULL: none)          */
} comm_state;

static int oom(comm_state *cs) { return diag_set(cs->err, ir_loc_file(cs->g, (ir_loc){ 0, 0 }), 0, "out of memory"); }

/* A new node next to old node `anchor` (before it, after it, or after
 * the others after it: `after` 0, 1, 2). */
static int32_t new_node(comm_state *cs, ir_op op, const char *name, int32_t anchor, int after, int32_t stage,
                        ir_phase phase)
{
    ir_graph *g = cs->g;
    ir_loc loc = g->nodes[anchor].loc;
    int32_t n = ir_add_node(g, op, name, loc);
    if (n < 0)
        return -1;
    int32_t k = n - cs->n_old;
    if (k >= cs->cap) {
        int32_t cap = cs->cap ? cs->cap * 2 : 64;
        int32_t *a = realloc(cs->anchor, (size_t)cap * sizeof *a);
        if (!a)
            return -1;
        cs->anchor = a;
        char *f = realloc(cs->after, (size_t)cap);
        if (!f)
            return -1;
        cs->after = f;
        cs->cap = cap;
    }
    cs->anchor[k] = anchor;
    cs->after[k] = (char)after;
    g->nodes[n].stage = stage;
    g->nodes[n].phase = phase;
    const ir_placement *p = &g->placement;
    g->nodes[n].device = p->device[stage * p->n_replicas];
    return n;
}

/* Put the new nodes next to their anchors; fix every value's producer. */
static int reorder(comm_state *cs)
{
    ir_graph *g = cs->g;
    int32_t n = g->n_nodes, added = n - cs->n_old, k = 0;
    ir_node *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    int32_t *first = malloc(((size_t)cs->n_old + 1) * sizeof *first),
            *next = malloc(((size_t)added + 1) * sizeof *next);
    if (!sorted || !first || !next) {
        free(sorted);
        free(first);
        free(next);
        return oom(cs);
    }
    /* Lists of new nodes per anchor, in the order they were made. */
    for (int32_t i = 0; i < cs->n_old; i++)
        first[i] = -1;
    for (int32_t j = added - 1; j >= 0; j--) {
        next[j] = first[cs->anchor[j]];
        first[cs->anchor[j]] = j;
    }
    for (int32_t i = 0; i < cs->n_old; i++) {
        for (int32_t j = first[i]; j >= 0; j = next[j])
            if (!cs->after[j])
                sorted[k++] = g->nodes[cs->n_old + j];
        sorted[k++] = g->nodes[i];
        for (int late = 1; late <= 2; late++)
            for (int32_t j = first[i]; j >= 0; j = next[j])
                if (cs->after[j] == late)
                    sorted[k++] = g->nodes[cs->n_old + j];
    }
    memcpy(g->nodes, sorted, (size_t)n * sizeof *sorted);
    for (int32_t i = 0; i < n; i++)
        for (int o = 0; o < g->nodes[i].n_out; o++)
            g->values[g->nodes[i].out[o]].producer = i;
    free(sorted);
    free(first);
    free(next);
    return 0;
}

static void replace_input(ir_node *node, int32_t from, int32_t to)
{
    for (int k = 0; k < node->n_in; k++)
        if (node->in[k] == from)
            node->in[k] = to;
}

/* The optimizer reads every gradient averaged over the stage's replicas.
 * The all-reduces come first in the stage's update, one after another, so
 * the runtime can send them as one bucket (runtime/comm/comm.c). */
static void link_of_cluster(const void *ctx, int32_t a, int32_t b, double *bw, double *lat)
{
    cluster_link_between(ctx, a, b, bw, lat);
}

/* The way each stage's bucket is averaged: the ring, or the hierarchy over
 * its replicas' regions when that is cheaper for the bucket's bytes, or
 * under --compress the quantised exchange when the replicas span regions
 * and it is faster (allreduce_plan.h; the fence pass priced the same
 * choice).  groups[S], bits[S]. */
static int allreduce_ways(const ir_graph *g, const cluster *c, int quantise, int64_t *groups, int *bits)
{
    const ir_placement *p = &g->placement;
    int32_t S = p->n_stages, R = p->n_replicas;
    double *bytes = calloc((size_t)S, sizeof *bytes);
    if (!bytes)
        return -1;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == OP_ADAMW && g->nodes[i].n_in >= 2)
            bytes[g->nodes[i].stage] += (double)ir_value_bytes(g, g->nodes[i].in[1]);
    for (int32_t s = 0; s < S; s++) {
        groups[s] = 0, bits[s] = 0;
        if (c && c->n_devices > 0)
            allreduce_choose(c, p->device + (size_t)s * R, R, bytes[s], quantise, link_of_cluster, c, &groups[s],
                             &bits[s]);
    }
    free(bytes);
    return 0;
}

static int add_allreduces(comm_state *cs, const cluster *c, int quantise, int shard)
{
    ir_graph *g = cs->g;
    int64_t *groups = calloc((size_t)g->placement.n_stages + 1, sizeof *groups);
    int *bits = calloc((size_t)g->placement.n_stages + 1, sizeof *bits);
    /* sharded: the ring alone (its reduce-scatter leaves each replica its pieces) */
    if (!groups || !bits || (!shard && allreduce_ways(g, c, quantise, groups, bits))) {
        free(groups);
        free(bits);
        return oom(cs);
    }
    /* Each stage's first update op; who reads each gradient. */
    int32_t *first_update = malloc(((size_t)g->placement.n_stages + 1) * sizeof *first_update);
    ir_readers rd;
    int built = ir_readers_build(g, cs->n_old, g->n_values, &rd) == 0;
    if (!first_update || !built) {
        free(first_update);
        ir_readers_free(&rd);
        free(groups);
        free(bits);
        return oom(cs);
    }
    for (int32_t s = 0; s < g->placement.n_stages; s++)
        first_update[s] = -1;
    for (int32_t j = 0; j < cs->n_old; j++)
        if (g->nodes[j].phase == PHASE_UPDATE && first_update[g->nodes[j].stage] < 0)
            first_update[g->nodes[j].stage] = j;
    int rc = 0;
    for (int32_t i = 0; i < cs->n_old && rc == 0; i++) {
        if (!op_updates_param(g->nodes[i].op) || g->nodes[i].n_in < 2)
            continue;
        int32_t grad = g->nodes[i].in[1], stage = g->nodes[i].stage, first = first_update[stage];
        char name[COMM_NAME_MAX];
        snprintf(name, sizeof name, "%s:mean", ir_value_name(g, grad));
        ir_shape shape = g->values[grad].shape;
        int32_t n = new_node(cs, OP_ALLREDUCE, name, first, 0, stage, PHASE_UPDATE);
        int32_t v =
            n < 0 ? -1 : ir_add_value(g, name, g->values[grad].dtype, ROLE_GRADIENT, &shape, g->values[grad].loc);
        if (v < 0 || ir_node_add_input(g, n, grad) || ir_node_add_output(g, n, v) ||
            ir_node_set_int(g, n, ATTR_TENSOR, cs->next_tensor++) || (shard && ir_node_set_int(g, n, ATTR_SHARD, 1)) ||
            (groups[stage] && ir_node_set_int(g, n, ATTR_GROUPS, groups[stage])) ||
            (bits[stage] && ir_node_set_int(g, n, ATTR_BITS, bits[stage]))) {
            rc = oom(cs);
            break;
        }
        if (grad < rd.n_values) {
            for (int32_t r = rd.start[grad]; r < rd.start[grad + 1]; r++)
                if (g->nodes[rd.at[r]].phase == PHASE_UPDATE)
                    replace_input(&g->nodes[rd.at[r]], grad, v);
        } else { /* a mean made above (two updates of one gradient): read where it was swapped in */
            for (int32_t j = 0; j < cs->n_old; j++)
                if (g->nodes[j].phase == PHASE_UPDATE)
                    replace_input(&g->nodes[j], grad, v);
        }
    }
    free(first_update);
    ir_readers_free(&rd);
    free(groups);
    free(bits);
    return rc;
}

/* An all-reduce node and its gradient's producer, sorted by producer,
 * ties in node order: a stable sort by producer (an insertion sort was
 * quadratic here: the backward makes the gradients in reverse). */
typedef struct {
    int32_t producer, node;
} made_by;

static int by_producer(const void *a, const void *b)
{
    const made_by *x = a, *y = b;
    if (x->producer != y->producer)
        return (x->producer > y->producer) - (x->producer < y->producer);
    return (x->node > y->node) - (x->node < y->node);
}

/* Gradient buckets (allreduce_plan.h): on a stage of several replicas,
 * the all-reduces whose gradient a backward op of the stage makes are
 * numbered into buckets in the order the backward makes them (the
 * producers' order), each closed once it holds allreduce_bucket_cap of
 * the stage's bytes; the runtime reduces a bucket as soon as its last
 * gradient is made in the step's last backward (runtime/comm/overlap.h;
 * a CUDA device brings the bucket's gradients down to the host for it
 * first: runtime/cuda/cuda.h).  The rest (a gradient summed in the update)
 * keep bucket -1 and go with the update.  Only with a cluster (a graph
 * compiled without one runs nowhere). */
static int assign_buckets(ir_graph *g, const cluster *c)
{
    const ir_placement *p = &g->placement;
    int32_t S = p->n_stages;
    int32_t *order = malloc(((size_t)g->n_nodes + 1) * sizeof *order);
    made_by *made = malloc(((size_t)g->n_nodes + 1) * sizeof *made);
    ir_readers rd;
    int built = ir_readers_build(g, g->n_nodes, g->n_values, &rd) == 0;
    if (!order || !made || !built) {
        free(order);
        free(made);
        ir_readers_free(&rd);
        return -1;
    }
    for (int32_t s = 0; s < S && c && c->n_devices > 0; s++) {
        /* The stage's all-reduces made in its backward, by their producer's place. */
        int32_t n = 0;
        double total = 0.0;
        for (int32_t i = 0; i < g->n_nodes; i++) {
            const ir_node *ar = &g->nodes[i];
            int32_t producer = ar->op == OP_ALLREDUCE && ar->stage == s ? g->values[ar->in[0]].producer : -1;
            /* Final once made: no backward op reads it after (the runtime
             * replaces it by the micro-batches' mean there). */
            for (int32_t r = producer >= 0 ? rd.start[ar->in[0]] : 0; producer >= 0 && r < rd.start[ar->in[0] + 1]; r++)
                if (rd.at[r] != i && g->nodes[rd.at[r]].phase == PHASE_BACKWARD)
                    producer = -1;
            if (producer >= 0 && g->nodes[producer].phase == PHASE_BACKWARD && g->nodes[producer].stage == s) {
                order[n++] = i;
                total += (double)ir_value_bytes(g, ar->in[0]);
            }
        }
        for (int32_t k = 0; k < n; k++)
            made[k] = (made_by){ g->values[g->nodes[order[k]].in[0]].producer, order[k] };
        qsort(made, (size_t)n, sizeof *made, by_producer);
        for (int32_t k = 0; k < n; k++)
            order[k] = made[k].node;
        /* As many buckets as pay for their latencies (allreduce_bucket_count):
         * the stage's all-reduce the way its ops will run it (their
         * `groups`, add_allreduces'), one more bucket's latency, and one
         * micro-batch's backward on the stage's first device. */
        const int32_t *dev = p->device + (size_t)s * p->n_replicas;
        int64_t groups = n > 0 ? ir_node_int(&g->nodes[order[0]], ATTR_GROUPS, 0) : 0;
        int bits = n > 0 ? (int)ir_node_int(&g->nodes[order[0]], ATTR_BITS, 0) : 0;
        double ar = allreduce_way_seconds(dev, p->n_replicas, total, groups, bits, link_of_cluster, c);
        double latency = allreduce_way_seconds(dev, p->n_replicas, 1.0, groups, bits, link_of_cluster, c);
        double backward = 0.0;
        for (int32_t i = 0; i < g->n_nodes; i++)
            if (g->nodes[i].stage == s && g->nodes[i].phase == PHASE_BACKWARD)
                backward += estimate_node_seconds(g, i, &c->devices[dev[0]]);
        int32_t buckets = allreduce_bucket_count(ar, latency, backward, total);
        double cap = fmax(allreduce_bucket_cap(total), total / buckets), have = 0.0;
        for (int32_t k = 0, bucket = 0; k < n; k++) {
            if (ir_node_set_int(g, order[k], ATTR_BUCKET, bucket)) {
                free(order);
                free(made);
                ir_readers_free(&rd);
                return -1;
            }
            have += (double)ir_value_bytes(g, g->nodes[order[k]].in[0]);
            if (have >= cap)
                bucket++, have = 0.0;
        }
    }
    free(order);
    free(made);
    ir_readers_free(&rd);
    return 0;
}

/* The gradient-norm clip: the optimizer pass sums every gradient's squares
 * in one chain (sum_squares ... -> clip_scale) that, once placed, runs
 * along the stages, and clip_scale's answer goes back to each: two trips
 * along the pipeline, over every slow link, each step.  Instead each run of
 * the chain on one stage starts afresh; every stage receives the other
 * runs' partial sums, adds them all in one fixed order (so every stage gets
 * the same bits) and computes the clip scale itself: one exchange, all at
 * once.  Only the scalars travel. */
static int clip_norm_per_stage(comm_state *cs, int32_t S)
{
    ir_graph *g = cs->g;
    int32_t clip = -1;
    for (int32_t i = 0; i < cs->n_old && clip < 0; i++)
        if (g->nodes[i].op == OP_CLIP_SCALE && g->nodes[i].n_in == 1 && g->nodes[i].n_out == 1)
            clip = i;
    if (clip < 0)
        return 0;
    int32_t *part = malloc(((size_t)cs->n_old + 1) * sizeof *part), n_part = 0;
    if (!part)
        return oom(cs);
    /* The chain's runs: where it crosses to another stage, and its end. */
    for (int32_t i = 0; i < cs->n_old; i++) {
        ir_node *n = &g->nodes[i];
        if (n->op != OP_SUM_SQUARES || n->n_in != 2)
            continue;
        int32_t acc = n->in[1], producer = g->values[acc].producer;
        if (producer >= 0 && g->nodes[producer].stage != n->stage) {
            part[n_part++] = acc;
            n->n_in = 1; /* this run starts from zero */
        }
    }
    part[n_part++] = g->nodes[clip].in[0];
    int32_t scale = g->nodes[clip].out[0];
    ir_loc loc = g->nodes[clip].loc;
    int rc = 0;
    for (int32_t t = 0; t < S && rc == 0; t++) {
        int32_t first = -1; /* the first node on t that reads the scale */
        for (int32_t j = 0; j < cs->n_old && first < 0; j++)
            for (int k = 0; k < g->nodes[j].n_in; k++)
                if (g->nodes[j].in[k] == scale && g->nodes[j].stage == t)
                    first = j;
        int home = g->nodes[clip].stage == t;
        if (first < 0 && !home)
            continue;
        int32_t anchor = home ? clip : first, total = part[0];
        char name[COMM_NAME_MAX];
        for (int32_t k = 1; k < n_part && rc == 0; k++) { /* total = part[0] + part[1] + ... */
            ir_shape shape = { 0 };
            snprintf(name, sizeof name, "sumsq.total:s%d.%d", t, k);
            int32_t n = new_node(cs, OP_ADD, name, anchor, 0, t, PHASE_UPDATE);
            int32_t v = n < 0 ? -1 : ir_add_value(g, name, DT_F32, g->values[scale].role, &shape, loc);
            if (v < 0 || ir_node_add_input(g, n, total) || ir_node_add_input(g, n, part[k]) ||
                ir_node_add_output(g, n, v))
                rc = oom(cs);
            total = v;
        }
        if (rc || home) {
            g->nodes[clip].in[0] = total;
            continue;
        }
        ir_shape shape = { 0 };
        snprintf(name, sizeof name, "%s:s%d", ir_value_name(g, scale), t);
        int32_t n = new_node(cs, OP_CLIP_SCALE, name, first, 0, t, PHASE_UPDATE);
        int32_t v = n < 0 ? -1 : ir_add_value(g, name, DT_F32, g->values[scale].role, &shape, loc);
        if (v < 0 || ir_node_add_input(g, n, total) || ir_node_add_output(g, n, v)) {
            rc = oom(cs);
            break;
        }
        g->nodes[n].n_attr = g->nodes[clip].n_attr;
        memcpy(g->nodes[n].attr, g->nodes[clip].attr, sizeof g->nodes[n].attr);
        for (int32_t j = 0; j < cs->n_old; j++)
            if (g->nodes[j].stage == t)
                replace_input(&g->nodes[j], scale, v);
    }
    free(part);
    return rc;
}

/* --shard-optimizer (the header's last point): the moments to pieces, the
 * norm's partial sums summed over the replicas, the all-gathers. */
static int shard_update(comm_state *cs)
{
    ir_graph *g = cs->g;
    int32_t R = g->placement.n_replicas, S = g->placement.n_stages;
    int32_t *last_update = malloc(((size_t)S + 1) * sizeof *last_update);
    ir_readers rd;
    if (!last_update || ir_readers_build(g, cs->n_old, g->n_values, &rd) != 0) {
        free(last_update);
        return oom(cs);
    }
    for (int32_t s = 0; s < S; s++)
        last_update[s] = -1;
    int rc = 0;
    for (int32_t i = 0; i < cs->n_old && rc == 0; i++) {
        ir_node *n = &g->nodes[i];
        if (n->phase == PHASE_UPDATE)
            last_update[n->stage] = i;
        if (n->op == OP_ADAMW && n->n_in >= 4) {
            int64_t piece = shard_piece_max(ir_shape_numel(&g->values[n->in[0]].shape), R);
            g->values[n->in[2]].shape = ir_shape_make(1, &piece);
            g->values[n->in[3]].shape = ir_shape_make(1, &piece);
        }
        if ((n->op == OP_ADAMW && n->n_in >= 4) || n->op == OP_SUM_SQUARES)
            rc = ir_node_set_int(g, i, ATTR_SHARD, 1) ? oom(cs) : 0;
    }
    /* A partial sum of squares that leaves its stage's chain (to the clip,
     * or to the next stage's run): its sum over the replicas instead. */
    for (int32_t i = 0; i < cs->n_old && rc == 0; i++) {
        if (g->nodes[i].op != OP_SUM_SQUARES)
            continue;
        int32_t acc = g->nodes[i].out[0], stage = g->nodes[i].stage, leaves = 0;
        for (int32_t r = rd.start[acc]; r < rd.start[acc + 1]; r++) {
            const ir_node *reader = &g->nodes[rd.at[r]];
            leaves |= reader->op == OP_CLIP_SCALE || (reader->op == OP_SUM_SQUARES && reader->stage != stage);
        }
        if (!leaves)
            continue;
        char name[COMM_NAME_MAX];
        snprintf(name, sizeof name, "%s:sum", ir_value_name(g, acc));
        ir_shape scalar = { 0 };
        int32_t n = new_node(cs, OP_ALLREDUCE, name, i, 1, stage, PHASE_UPDATE);
        int32_t v = n < 0 ? -1 : ir_add_value(g, name, DT_F32, g->values[acc].role, &scalar, g->values[acc].loc);
        if (v < 0 || ir_node_add_input(g, n, acc) || ir_node_add_output(g, n, v) ||
            ir_node_set_int(g, n, ATTR_TENSOR, cs->next_tensor++) || ir_node_set_int(g, n, ATTR_SUM, 1)) {
            rc = oom(cs);
            break;
        }
        for (int32_t r = rd.start[acc]; r < rd.start[acc + 1]; r++)
            if (g->nodes[rd.at[r]].op == OP_CLIP_SCALE || g->nodes[rd.at[r]].stage != stage)
                replace_input(&g->nodes[rd.at[r]], acc, v);
    }
    /* Every updated parameter's pieces back to every replica, at the end
     * of its stage's update, back to back (one bucket). */
    for (int32_t i = 0; i < cs->n_old && rc == 0; i++) {
        if (g->nodes[i].op != OP_ADAMW || g->nodes[i].n_in < 4)
            continue;
        int32_t param = g->nodes[i].in[0], stage = g->nodes[i].stage;
        char name[COMM_NAME_MAX];
        snprintf(name, sizeof name, "%s:gather", ir_value_name(g, param));
        int32_t n = new_node(cs, OP_ALLGATHER, name, last_update[stage], 2, stage, PHASE_UPDATE);
        if (n < 0 || ir_node_add_input(g, n, param) || ir_node_set_int(g, n, ATTR_TENSOR, cs->next_tensor++))
            rc = oom(cs);
    }
    ir_readers_free(&rd);
    free(last_update);
    return rc;
}

/* An op without inputs read on other stages is made again on each of them. */
static int duplicate_sourceless(comm_state *cs, int32_t i, int32_t S)
{
    ir_graph *g = cs->g;
    ir_node *node = &g->nodes[i];
    if (node->n_in != 0 || node->n_out != 1 || node->op == OP_RECV)
        return 0;
    int32_t v = node->out[0];
    for (int32_t t = 0; t < S; t++) {
        if (t == g->nodes[i].stage)
            continue;
        int32_t first = -1;
        for (int32_t j = i + 1; j < cs->n_old && first < 0; j++)
            for (int k = 0; k < g->nodes[j].n_in; k++)
                if (g->nodes[j].in[k] == v && g->nodes[j].stage == t)
                    first = j;
        if (first < 0)
            continue;
        char name[COMM_NAME_MAX];
        snprintf(name, sizeof name, "%s:s%d", ir_value_name(g, v), t);
        ir_shape shape = g->values[v].shape;
        int32_t n = new_node(cs, g->nodes[i].op, name, first, 0, t, g->nodes[first].phase);
        int32_t copy =
            n < 0 ? -1 : ir_add_value(g, name, g->values[v].dtype, g->values[v].role, &shape, g->values[v].loc);
        if (copy < 0 || ir_node_add_output(g, n, copy))
            return oom(cs);
        g->nodes[n].n_attr = g->nodes[i].n_attr;
        memcpy(g->nodes[n].attr, g->nodes[i].attr, sizeof g->nodes[n].attr);
        for (int32_t j = i + 1; j < cs->n_old; j++)
            if (g->nodes[j].stage == t)
                replace_input(&g->nodes[j], v, copy);
    }
    return 0;
}

/* Is v, read by node `reader`, a parameter's partial gradient: a gradient
 * that reader sums (add) into grad.<param>? */
static int partial_param_gradient(const ir_graph *g, int32_t v, int32_t reader)
{
    const ir_node *n = &g->nodes[reader];
    if (g->values[v].role != ROLE_GRADIENT || n->op != OP_ADD || n->phase != PHASE_BACKWARD || n->n_out != 1)
        return 0;
    const char *name = ir_value_name(g, n->out[0]);
    int32_t param = strncmp(name, "grad.", 5) == 0 ? ir_find_value(g, name + 5) : -1;
    return param >= 0 && g->values[param].role == ROLE_PARAM;
}

int comm_param_may_cross_half(const ir_graph *g, int32_t v)
{
    return (g->precision == DT_F16 || g->precision == DT_BF16) && g->values[v].role == ROLE_PARAM &&
           g->values[v].dtype == DT_F32;
}

int comm_reader_rounds_weight(const ir_graph *g, int32_t node)
{
    const ir_node *n = &g->nodes[node];
    if (!op_is_product(n->op))
        return 0;
    for (int k = 0; k < n->n_in; k++) /* rt_op_product_dtype: a 16-bit operand makes it a 16-bit product */
        if (g->values[n->in[k]].dtype == DT_F16 || g->values[n->in[k]].dtype == DT_BF16)
            return 1;
    for (int k = 0; k < n->n_out; k++)
        if (g->values[n->out[k]].dtype == DT_F16 || g->values[n->out[k]].dtype == DT_BF16)
            return 1;
    return 0;
}

double comm_half_cast_seconds(double elements) { return 6.0 * elements / COMPRESS_CODEC_BYTES_PER_SECOND; }

int comm_half_pays(double elements, double bw) { return 2.0 * elements / bw > 2.0 * comm_half_cast_seconds(elements); }

/* Does parameter v go from stage `home` to stage t in 16 bits (passes.h)? */
static int crosses_half(const comm_state *cs, const ir_readers *rd, int32_t v, int32_t home, int32_t t)
{
    const ir_graph *g = cs->g;
    const ir_placement *p = &g->placement;
    double bw, lat;
    if (!cs->cluster || !comm_param_may_cross_half(g, v))
        return 0;
    cluster_link_between(cs->cluster, p->device[(size_t)home * p->n_replicas], p->device[(size_t)t * p->n_replicas],
                         &bw, &lat);
    if (!comm_half_pays((double)ir_shape_numel(&g->values[v].shape), bw))
        return 0;
    for (int32_t r = 0; r < p->n_replicas; r++) {
        int32_t d = p->device[(size_t)t * p->n_replicas + r];
        if (d < 0 || d >= cs->cluster->n_devices || cs->cluster->devices[d].kind != DEVICE_CUDA)
            return 0;
    }
    for (int32_t r = rd->start[v]; r < rd->start[v + 1]; r++)
        if (g->nodes[rd->at[r]].stage == t && !comm_reader_rounds_weight(g, rd->at[r]))
            return 0;
    return 1;
}

/* What cut_value looks up, built once for all values (the old nodes'
 * stages and phases do not change while the pass cuts): scanning every
 * node for each value and stage made the pass cubic, most of a 400-layer
 * GPT's compile. */
typedef struct {
    ir_readers rd;     /* the old nodes reading each value                   */
    int32_t *first_on; /* [S] v's first reader on stage t, when seen[t] == v */
    int32_t *seen;     /* [S]                                                */
    int32_t *last_in;  /* [S * PHASE_COUNT] the last old node of a stage and phase, -1 */
} cut_index;

static int cut_index_build(const comm_state *cs, int32_t n_values, int32_t S, cut_index *x)
{
    const ir_graph *g = cs->g;
    x->first_on = malloc(((size_t)S + 1) * sizeof *x->first_on);
    x->seen = malloc(((size_t)S + 1) * sizeof *x->seen);
    x->last_in = malloc(((size_t)S * PHASE_COUNT + 1) * sizeof *x->last_in);
    if (ir_readers_build(g, cs->n_old, n_values, &x->rd) || !x->first_on || !x->seen || !x->last_in)
        return -1;
    for (int32_t t = 0; t < S; t++)
        x->seen[t] = -1;
    for (int32_t k = 0; k < S * PHASE_COUNT; k++)
        x->last_in[k] = -1;
    for (int32_t j = 0; j < cs->n_old; j++)
        x->last_in[g->nodes[j].stage * PHASE_COUNT + (int)g->nodes[j].phase] = j;
    return 0;
}

static void cut_index_free(cut_index *x)
{
    ir_readers_free(&x->rd);
    free(x->first_on);
    free(x->seen);
    free(x->last_in);
}

/* cut_value for the readers in PHASE_PREFILL (prompt = 1) or in the
 * other phases (prompt = 0). */
static int cut_value_for(comm_state *cs, cut_index *x, int32_t v, int32_t home, int32_t S, int prompt)
{
    ir_graph *g = cs->g;
    const ir_readers *rd = &x->rd;
    int32_t producer = g->values[v].producer, mark = 2 * v + prompt;
    for (int32_t r = rd->start[v]; r < rd->start[v + 1]; r++) { /* v's first reader on each stage */
        int32_t t = g->nodes[rd->at[r]].stage;
        if ((g->nodes[rd->at[r]].phase == PHASE_PREFILL) != prompt)
            continue;
        if (x->seen[t] != mark) {
            x->seen[t] = mark;
            x->first_on[t] = rd->at[r];
        }
    }
    for (int32_t t = 0; t < S; t++) {
        if (t == home || x->seen[t] != mark)
            continue;
        int32_t first = x->first_on[t];
        ir_phase phase = g->nodes[first].phase;
        int32_t tensor = cs->next_tensor++;
        char name[COMM_NAME_MAX];
        int send_after_producer = producer >= 0 && producer < cs->n_old && g->nodes[producer].phase == phase;
        /* A parameter does not change within a step: sent in micro-batch 0
         * only, its copy kept (the memory pass keeps it all step). */
        int once = g->values[v].role == ROLE_PARAM && (phase == PHASE_FORWARD || phase == PHASE_PREFILL);
        /* A parameter's partial gradient is only needed summed, at the
         * update: it crosses once a step, summed over the micro-batches.
         * It leaves last in its stage's backward: it is due only at the
         * update, and its codec (when compressed) would otherwise hold up
         * the activation gradients that the stages before wait for. */
        int accumulate = partial_param_gradient(g, v, first);
        int32_t anchor = send_after_producer ? producer : first;
        if (accumulate && send_after_producer && x->last_in[home * PHASE_COUNT + (int)phase] > producer)
            anchor = x->last_in[home * PHASE_COUNT + (int)phase]; /* the last of home's phase after it */
        const char *prefix = prompt ? "prefill." : "";            /* names stay unique */
        snprintf(name, sizeof name, "%s%s:send%d", prefix, ir_value_name(g, v), t);
        int32_t s = new_node(cs, OP_SEND, name, anchor, send_after_producer ? 1 + accumulate : 0, home, phase);
        int half = once && crosses_half(cs, rd, v, home, t);
        if (s < 0 || ir_node_add_input(g, s, v) || ir_node_set_int(g, s, ATTR_PEER, t) ||
            ir_node_set_int(g, s, ATTR_TENSOR, tensor) || (once && ir_node_set_int(g, s, ATTR_ONCE, 1)) ||
            (accumulate && ir_node_set_int(g, s, ATTR_ACCUMULATE, 1)) ||
            (half && ir_node_set_int(g, s, ATTR_BITS, ATTR_BITS_HALF)))
            return oom(cs);
        snprintf(name, sizeof name, "%s%s:s%d", prefix, ir_value_name(g, v), t);
        ir_shape shape = g->values[v].shape;
        ir_role role = g->values[v].role == ROLE_GRADIENT ? ROLE_GRADIENT : ROLE_ACTIVATION;
        int32_t r = new_node(cs, OP_RECV, name, first, 0, t, phase);
        int32_t copy = r < 0 ? -1 : ir_add_value(g, name, g->values[v].dtype, role, &shape, g->values[v].loc);
        if (copy < 0 || ir_node_add_output(g, r, copy) || ir_node_set_int(g, r, ATTR_PEER, home) ||
            ir_node_set_int(g, r, ATTR_TENSOR, tensor) || (once && ir_node_set_int(g, r, ATTR_ONCE, 1)) ||
            (accumulate && ir_node_set_int(g, r, ATTR_ACCUMULATE, 1)) ||
            (half && ir_node_set_int(g, r, ATTR_BITS, ATTR_BITS_HALF)))
            return oom(cs);
        for (int32_t r = rd->start[v]; r < rd->start[v + 1]; r++)
            if (g->nodes[rd->at[r]].stage == t && (g->nodes[rd->at[r]].phase == PHASE_PREFILL) == prompt)
                replace_input(&g->nodes[rd->at[r]], v, copy);
    }
    return 0;
}

/* Value v, at home on stage `home`, read on other stages: a send/recv pair
 * each, in the order of the stages; the prefill pass's copy (PHASE_PREFILL,
 * a step of its own) gets pairs of its own for what it reads (a shared
 * parameter: the tied embedding). */
static int cut_value(comm_state *cs, cut_index *x, int32_t v, int32_t home, int32_t S)
{
    for (int prompt = 0; prompt < 2; prompt++)
        if (cut_value_for(cs, x, v, home, S, prompt))
            return -1;
    return 0;
}

int pass_comm(ir_graph *g, const pass_options *opt, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    const ir_placement *p = &g->placement;
    if (p->n_stages <= 0)
        return diag_set(err, file, 0, "the graph has no placement: the comm pass runs after the fence pass");
    int32_t S = p->n_stages;
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].stage < 0 || g->nodes[i].stage >= S)
            return diag_set(err, ir_loc_file(g, g->nodes[i].loc), g->nodes[i].loc.line,
                            "node '%s' has no stage in [0, %d): the fence pass places every node", ir_node_name(g, i),
                            S);
    if (S == 1 && p->n_replicas == 1)
        return 0;
    /* First the clip's partial sums, placed among the old nodes; then the
     * cut edges of the graph that makes, the new adds read included. */
    comm_state pre = { g, err, g->n_nodes, NULL, NULL, 0, 0, NULL };
    int shard = opt && opt->shard_optimizer && p->n_replicas > 1, rc = 0;
    for (int32_t i = 0; shard && i < g->n_nodes; i++)
        if (g->nodes[i].op == OP_SGD) /* its update reads the whole gradient, which a reduce-scatter does not leave */
            return diag_set(err, file, 0,
                            "--shard-optimizer splits AdamW's moments over the replicas; this model trains with "
                            "plain SGD (sgd = 1), which keeps none");
    if (shard) { /* its sums first: the clip's per-stage runs then read them */
        rc = shard_update(&pre);
        if (rc == 0 && g->n_nodes > pre.n_old)
            rc = reorder(&pre);
        pre.n_old = g->n_nodes;
    }
    if (rc == 0 && S > 1)
        rc = clip_norm_per_stage(&pre, S);
    if (rc == 0 && g->n_nodes > pre.n_old)
        rc = reorder(&pre);
    free(pre.anchor);
    free(pre.after);
    if (rc)
        return rc;
    comm_state cs = { g, err, g->n_nodes, NULL, NULL, 0, pre.next_tensor, opt ? opt->cluster : NULL };
    int32_t n_values = g->n_values;
    double compress = 0.0; /* --compress also quantises an all-reduce across regions (allreduce_plan.h) */
    if (opt && compress_parse(opt->compress, opt->cluster, &compress))
        compress = 0.0; /* the fence pass has refused a bad spec already */
    if (p->n_replicas > 1)
        rc = add_allreduces(&cs, opt ? opt->cluster : NULL, compress != 0.0, shard);
    for (int32_t i = 0; i < cs.n_old && rc == 0; i++)
        rc = duplicate_sourceless(&cs, i, S);
    /* Each value's home: its producer's stage, or its first reader's. */
    cut_index x = { { 0, NULL, NULL }, NULL, NULL, NULL };
    if (rc == 0 && cut_index_build(&cs, n_values, S, &x))
        rc = oom(&cs);
    for (int32_t v = 0; v < n_values && rc == 0; v++) {
        int32_t home = -1, producer = g->values[v].producer;
        if (producer >= 0)
            home = g->nodes[producer].stage;
        else if (x.rd.start[v] < x.rd.start[v + 1])
            home = g->nodes[x.rd.at[x.rd.start[v]]].stage;
        if (home >= 0)
            rc = cut_value(&cs, &x, v, home, S);
    }
    cut_index_free(&x);
    if (rc == 0)
        rc = reorder(&cs);
    if (rc == 0 && p->n_replicas > 1 && assign_buckets(g, opt ? opt->cluster : NULL))
        rc = oom(&cs);
    /* What the pass promises: every value is read on its home stage only. */
    for (int32_t i = 0; i < g->n_nodes && rc == 0; i++)
        for (int k = 0; k < g->nodes[i].n_in && rc == 0; k++) {
            int32_t v = g->nodes[i].in[k], producer = g->values[v].producer;
            if (producer >= 0 && g->nodes[producer].stage != g->nodes[i].stage)
                rc = diag_set(err, file, 0, "internal error: node '%s' on stage %d reads '%s' from stage %d",
                              ir_node_name(g, i), g->nodes[i].stage, ir_value_name(g, v), g->nodes[producer].stage);
        }
    free(cs.anchor);
    free(cs.after);
    return rc;
}
