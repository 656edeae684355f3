/* simulate.c: the discrete-event simulation of training steps (simulate.h).
 *
 * The state is a worker per device of the placement (stage s, replica r:
 * worker s * R + r), a cursor into its program, and the transfers on the
 * links.  Time jumps from event to event: a worker finishing an op, a
 * message arriving.  A link's direction carries one message at a time, in
 * the order they were sent (the runtime's hub: one outbox per link, its
 * head on the wire), so a message's last byte leaves bytes / bandwidth
 * after the link is free or it is sent, whichever is later, and it arrives
 * a latency after that.  At each event every worker that can go on
 * does: a compute op takes its estimated time, a send starts a transfer
 * (after encoding, for a top-k pair) and does not wait for it, a recv waits
 * for its message (then decodes), the first all-reduce of the update waits
 * for every replica of its stage and then takes the ring's time for the
 * gradients in no bucket.  A stage's gradient buckets (runtime/comm/overlap.h)
 * are reduced during the step's last backward: each starts once every
 * replica has made its gradients and the bucket before it has ended, and
 * the update waits for the last.
 *
 * A worker's program, as the runtime runs it (runtime/main.c): per step,
 * the forward and backward of each micro-batch in 1F1B order (warm-up
 * min(S - s - 1, M) forwards, then one forward one backward, then the
 * remaining backwards; on a stage that recomputes, a backward that waited
 * runs the forward's compute again first), then the update.  Steps follow each other with no
 * barrier, as on the devices.  A message is told apart by its tensor id,
 * micro-batch (the update's: M), replica and step; a `once` send or recv
 * runs in micro-batch 0 only.
 */
#include "simulate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/atomic_file.h"
#include "../ir/folders.h"
#include "../ir/ops.h"
#include "../ir/pipeline_order.h"
#include "../passes/allreduce_plan.h"
#include "../passes/passes.h"

typedef struct {
    int32_t stage, replica, device;
    int32_t step, action, op; /* action: index into the stage's order, 2M = the update */
    double t_free;            /* the current op ends (or the worker may go on) then   */
    int blocked;              /* waits for a message or its replicas                  */
    int in_allreduce;         /* counted at its stage's all-reduce                    */
    int32_t pending_send;     /* a send whose encoding ends at t_free, or -1          */
    double replay;            /* recomputing: its forward's compute, run again before a
                                   waiting backward (0: the stage keeps its stash)      */
    int replayed;             /* this backward's replay is done                        */
    int32_t keep, whole_now;  /* recomputing: the most micro-batches kept whole at once
                                   (ir_placement.keep), and how many are now            */
    uint8_t *whole;           /* [M]: kept whole, its backward replays nothing         */
    int32_t box;              /* the open box, or -1                                  */
    int done;
} worker;

typedef struct {
    const ir_graph *g;
    const cluster *c;
    sim_result *r;
    int32_t S, R, M, T, steps;
    int32_t *ops[PHASE_COUNT]; /* [S][n_nodes]: per stage and phase, node indices in order */
    int32_t *n_ops;            /* [S * PHASE_COUNT]                                      */
    int32_t *order;            /* [S][2M]: +m a forward, -(m+1) a backward               */
    worker *w;
    uint8_t *whole;    /* [W][M]: each worker's worker.whole */
    double *arrival;   /* [steps][M+1][R][T]: INFINITY until known               */
    int32_t *link_of;  /* [n_devices^2]: index into r->links, -1                 */
    double *link_free; /* [n_devices^2 capacity]: when each link's last message is out */
    int32_t *ar_count; /* [S] replicas at the all-reduce                         */
    /* Gradient buckets (runtime/comm/overlap.h): a bucket's all-reduce
     * starts once every replica of its stage has made its gradients in the
     * step's last backward, after the stage's bucket before it. */
    int overlap;            /* 0: the buckets one after the other in the update (--no-overlap) */
    int32_t B;              /* the most buckets a stage has                            */
    int32_t *n_buckets;     /* [S]                                                     */
    int32_t *bucket_ready;  /* [S][B] its last gradient's place in the stage's backward ops */
    double *bucket_bytes;   /* [S][B]                                                  */
    int64_t *bucket_groups; /* [S] the ring (0) or the hierarchy                       */
    int *bucket_bits;       /* [S] 0 dense, else the quantised exchange's bits        */
    int *bucket_shard;      /* [S] 1: --shard-optimizer's reduce-scatter (shard.h)    */
    int32_t *bucket_count;  /* [S][B] replicas past its ready op this step             */
    double *bucket_at;      /* [S][B] the last of them                                 */
    int32_t *bucket_next;   /* [S] the next bucket to start this step                  */
    double *bucket_end;     /* [S] when the last started ends                          */
} sim;

static ir_phase phase_of(const ir_node *n) { return n->phase == PHASE_NONE ? PHASE_FORWARD : n->phase; }

/* The bytes a send puts on the wire (compress_wire_bytes) and, when it is
 * compressed, the codec's seconds on the sender. */
static double wire_bytes(const ir_graph *g, const ir_node *send, double *codec_seconds)
{
    double density = ir_node_float(send, ATTR_DENSITY, 0.0), n = (double)ir_shape_numel(&g->values[send->in[0]].shape);
    int bits = (int)ir_node_int(send, ATTR_BITS, 0), compressed = bits > 0 || (density > 0.0 && density < 1.0);
    *codec_seconds = bits == ATTR_BITS_HALF ? comm_half_cast_seconds(n)
                     : compressed           ? 4.0 * n / SIM_CODEC_BYTES_PER_SECOND
                                            : 0.0;
    return compress_wire_bytes(g, send);
}

static int grow(void **p, int32_t *cap, int32_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    int32_t c = *cap ? *cap * 2 : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, (size_t)c * size);
    if (!q)
        return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* Start or extend worker w's box of this kind at [start, end]. */
static int add_box(sim *s, int32_t wi, sim_kind kind, int32_t mb, double start, double end)
{
    sim_result *r = s->r;
    worker *w = &s->w[wi];
    if (w->box >= 0) {
        sim_box *b = &r->boxes[w->box];
        if (b->kind == kind && b->micro_batch == mb && b->step == w->step && fabs(b->end - start) <= 1e-12) {
            b->end = end;
            return 0;
        }
    }
    if (grow((void **)&r->boxes, &r->cap_boxes, r->n_boxes + 1, sizeof *r->boxes))
        return -1;
    r->boxes[r->n_boxes] = (sim_box){ wi, kind, mb, w->step, start, end };
    w->box = r->n_boxes++;
    return 0;
}

static int32_t link_index(sim *s, int32_t from, int32_t to)
{
    int32_t D = s->c->n_devices;
    int32_t *at = &s->link_of[(size_t)from * D + to];
    if (*at < 0) {
        sim_link *l = &s->r->links[s->r->n_links];
        memset(l, 0, sizeof *l);
        l->from = from;
        l->to = to;
        cluster_link_between(s->c, from, to, &l->bandwidth, &l->latency);
        *at = s->r->n_links++;
    }
    return *at;
}

static size_t message_key(const sim *s, int32_t step, int32_t slot, int32_t replica, int32_t tensor)
{
    return (((size_t)step * (size_t)(s->M + 1) + (size_t)slot) * (size_t)s->R + (size_t)replica) * (size_t)s->T +
           (size_t)tensor;
}

/* Put worker w's send (node n) on the link to its peer at time `now`. */
static int start_transfer(sim *s, int32_t wi, int32_t n, int32_t mb, double now)
{
    const ir_graph *g = s->g;
    const ir_node *send = &g->nodes[n];
    worker *w = &s->w[wi];
    int32_t peer = (int32_t)ir_node_int(send, ATTR_PEER, -1), tensor = (int32_t)ir_node_int(send, ATTR_TENSOR, -1);
    if (peer < 0 || peer >= s->S || tensor < 0 || tensor >= s->T)
        return 1;
    int32_t to = s->w[peer * s->R + w->replica].device;
    int32_t li = link_index(s, w->device, to);
    double codec, bytes = wire_bytes(g, send, &codec);
    sim_result *r = s->r;
    sim_link *l = &r->links[li];
    if (w->step == 0)
        l->bytes[phase_of(send)] += bytes;
    if (grow((void **)&r->transfers, &r->cap_transfers, r->n_transfers + 1, sizeof *r->transfers))
        return -1;
    /* First in, first out: on the wire once the link is free. */
    double start = fmax(now, s->link_free[li]);
    double end = l->bandwidth < INFINITY && bytes > 0 ? start + bytes / l->bandwidth : start;
    s->link_free[li] = end;
    r->transfers[r->n_transfers++] = (sim_transfer){ li, mb, w->step, phase_of(send), bytes, start, end };
    s->arrival[message_key(s, w->step, mb < 0 ? s->M : mb, w->replica, tensor)] = end + l->latency;
    return 0;
}

/* The all-reduce of stage st's bucket, starting at node index k of its
 * update ops: the ring, or the hierarchy its `groups` names
 * (passes/allreduce_plan.h: the time the fence pass priced). */
static void sim_cluster_link(const void *ctx, int32_t a, int32_t b, double *bw, double *lat)
{
    cluster_link_between(ctx, a, b, bw, lat);
}

/* groups -1: the ring, whatever the stage's buckets do. */
static double way_seconds(const sim *s, int32_t st, double bytes, int64_t groups, int bits)
{
    int32_t *dev = malloc((size_t)s->R * sizeof *dev);
    if (!dev)
        return INFINITY;
    for (int32_t r = 0; r < s->R; r++)
        dev[r] = s->w[st * s->R + r].device;
    double t = allreduce_way_seconds(dev, s->R, bytes, groups, bits, sim_cluster_link, s->c);
    free(dev);
    return t;
}

static double stage_allreduce_seconds(const sim *s, int32_t st, double bytes, int64_t groups, int bits)
{
    if (s->bucket_shard && s->bucket_shard[st]) /* the reduce-scatter alone: half the ring */
        return 0.5 * way_seconds(s, st, bytes, 0, 0);
    return way_seconds(s, st, bytes, groups, bits);
}

/* The update's all-reduces (or all-gathers) from its node k on: those in
 * no bucket (the buckets went during the backward).  Under
 * --shard-optimizer (runtime/shard.h) a stage's gradient buckets are the
 * ring's reduce-scatter alone, its all-gathers the other half, and the
 * partial norms' sum a vector that goes round the ring: R - 1 steps, half
 * the latencies of an all-reduce. */
static double allreduce_seconds(const sim *s, int32_t st, int32_t k)
{
    const ir_graph *g = s->g;
    const int32_t *ops = s->ops[PHASE_UPDATE] + (size_t)st * g->n_nodes;
    int32_t n = s->n_ops[st * PHASE_COUNT + PHASE_UPDATE];
    int32_t kind = k < n ? (int32_t)g->nodes[ops[k]].op : (int32_t)OP_ALLREDUCE;
    int64_t groups = k < n ? ir_node_int(&g->nodes[ops[k]], ATTR_GROUPS, 0) : 0;
    int bits = k < n ? (int)ir_node_int(&g->nodes[ops[k]], ATTR_BITS, 0) : 0;
    int half = kind == OP_ALLGATHER || (k < n && ir_node_int(&g->nodes[ops[k]], ATTR_SUM, 0));
    double bytes = 0.0, buckets = 0.0;
    for (; k < n && (int32_t)g->nodes[ops[k]].op == kind; k++)
        if (ir_node_int(&g->nodes[ops[k]], ATTR_BUCKET, -1) < 0)
            bytes += (double)ir_value_bytes(g, g->nodes[ops[k]].in[0]);
    if (half && kind == OP_ALLGATHER) /* in buckets of RT_GATHER_BUCKET_FLOATS, a ring's latencies each */
        return bytes > 0.0 ? 0.5 * way_seconds(s, st, bytes, 0, 0) +
                                 (allgather_buckets(bytes) - 1) * 0.5 * way_seconds(s, st, 1.0, 0, 0)
                           : 0.0;
    if (half)
        return bytes > 0.0 ? 0.5 * way_seconds(s, st, bytes, 0, 0) : 0.0;
    for (int32_t b = 0; !s->overlap && b < s->n_buckets[st]; b++) /* --no-overlap: each now, in turn */
        buckets += stage_allreduce_seconds(s, st, s->bucket_bytes[(size_t)st * s->B + b], s->bucket_groups[st],
                                           s->bucket_bits[st]);
    return buckets + (bytes > 0.0 ? stage_allreduce_seconds(s, st, bytes, groups, bits) : 0.0);
}

/* A replica of stage st finished its last backward's op at place `pos`
 * at time t: the buckets that were waiting for it, then every bucket in
 * order whose replicas are all past it starts when they are and the
 * bucket before has ended. */
static void bucket_reached(sim *s, int32_t st, int32_t pos, double t)
{
    int32_t B = s->B, *count = s->bucket_count + (size_t)st * B;
    double *at = s->bucket_at + (size_t)st * B;
    for (int32_t b = 0; b < s->n_buckets[st]; b++)
        if (s->bucket_ready[(size_t)st * B + b] == pos)
            count[b]++, at[b] = fmax(at[b], t);
    for (int32_t *next = &s->bucket_next[st]; *next < s->n_buckets[st] && count[*next] == s->R; ++*next) {
        double start = fmax(at[*next], s->bucket_end[st]);
        s->bucket_end[st] = start + stage_allreduce_seconds(s, st, s->bucket_bytes[(size_t)st * B + *next],
                                                            s->bucket_groups[st], s->bucket_bits[st]);
    }
}

/* Each stage's buckets from its update's allreduce nodes (attr `bucket`)
 * and their gradients' producers' places in its backward. */
static int find_buckets(sim *s)
{
    const ir_graph *g = s->g;
    int32_t N = g->n_nodes;
    for (int32_t i = 0; i < N; i++)
        if (g->nodes[i].op == OP_ALLREDUCE)
            s->B = (int32_t)fmax(s->B, (double)ir_node_int(&g->nodes[i], ATTR_BUCKET, -1) + 1);
    size_t SB = (size_t)s->S * (size_t)(s->B > 0 ? s->B : 1);
    s->n_buckets = calloc((size_t)s->S, sizeof *s->n_buckets);
    s->bucket_ready = malloc(SB * sizeof *s->bucket_ready);
    s->bucket_bytes = calloc(SB, sizeof *s->bucket_bytes);
    s->bucket_groups = calloc((size_t)s->S, sizeof *s->bucket_groups);
    s->bucket_bits = calloc((size_t)s->S, sizeof *s->bucket_bits);
    s->bucket_shard = calloc((size_t)s->S, sizeof *s->bucket_shard);
    s->bucket_count = calloc(SB, sizeof *s->bucket_count);
    s->bucket_at = calloc(SB, sizeof *s->bucket_at);
    s->bucket_next = calloc((size_t)s->S, sizeof *s->bucket_next);
    s->bucket_end = calloc((size_t)s->S, sizeof *s->bucket_end);
    if (!s->n_buckets || !s->bucket_ready || !s->bucket_bytes || !s->bucket_groups || !s->bucket_bits ||
        !s->bucket_shard || !s->bucket_count || !s->bucket_at || !s->bucket_next || !s->bucket_end)
        return -1;
    for (size_t k = 0; k < SB; k++)
        s->bucket_ready[k] = -1;
    for (int32_t st = 0; st < s->S; st++) {
        const int32_t *upd = s->ops[PHASE_UPDATE] + (size_t)st * N, *bwd = s->ops[PHASE_BACKWARD] + (size_t)st * N;
        for (int32_t k = 0; k < s->n_ops[st * PHASE_COUNT + PHASE_UPDATE]; k++) {
            const ir_node *ar = &g->nodes[upd[k]];
            int32_t b = ar->op == OP_ALLREDUCE ? (int32_t)ir_node_int(ar, ATTR_BUCKET, -1) : -1;
            if (b < 0)
                continue;
            int32_t producer = g->values[ar->in[0]].producer, *ready = &s->bucket_ready[(size_t)st * s->B + b];
            for (int32_t j = 0; j < s->n_ops[st * PHASE_COUNT + PHASE_BACKWARD]; j++)
                if (bwd[j] == producer && j > *ready)
                    *ready = j;
            s->bucket_bytes[(size_t)st * s->B + b] += (double)ir_value_bytes(g, ar->in[0]);
            s->bucket_groups[st] = ir_node_int(ar, ATTR_GROUPS, 0);
            s->bucket_bits[st] = (int)ir_node_int(ar, ATTR_BITS, 0);
            s->bucket_shard[st] = (int)ir_node_int(ar, ATTR_SHARD, 0);
            s->n_buckets[st] = (int32_t)fmax(s->n_buckets[st], (double)b + 1);
        }
    }
    return 0;
}

/* Let worker wi go on at `now` as far as it can.  0, -1 out of memory, 1 a bad send. */
static int advance(sim *s, int32_t wi, double now)
{
    const ir_graph *g = s->g;
    worker *w = &s->w[wi];
    w->blocked = 0;
    while (!w->done && w->t_free <= now) {
        int32_t st = w->stage;
        int update = w->action == 2 * s->M;
        int32_t a = update ? 0 : s->order[(size_t)st * 2 * s->M + w->action];
        int32_t mb = update ? -1 : a >= 0 ? a : -a - 1;
        ir_phase ph = update ? PHASE_UPDATE : a >= 0 ? PHASE_FORWARD : PHASE_BACKWARD;
        if (w->pending_send >= 0) {
            int rc = start_transfer(s, wi, w->pending_send, mb, w->t_free);
            if (rc)
                return rc;
            w->pending_send = -1;
        }
        const int32_t *ops = s->ops[ph] + (size_t)st * g->n_nodes;
        int32_t n_ops = s->n_ops[st * PHASE_COUNT + ph];
        if (!w->replayed && w->op == 0 && a < 0 && w->replay > 0.0 && w->action > 0 && !w->whole[mb] &&
            s->order[(size_t)st * 2 * s->M + w->action - 1] != mb) {
            /* A waiting backward on a stage that recomputes, not kept
             * whole: the forward again first (runtime/stepper.c run_backward). */
            double start = fmax(w->t_free, now);
            if (add_box(s, wi, SIM_FORWARD, mb, start, start + w->replay))
                return -1;
            s->r->busy[wi] += w->replay;
            w->t_free = start + w->replay;
            w->replayed = 1;
            continue;
        }
        if (w->op == n_ops) { /* the action is done */
            /* What the runtime keeps of it (runtime/stepper.c): a forward
             * whose backward waits, whole while fewer than keep are; a
             * backward frees its micro-batch's. */
            int waits = !update && a >= 0 && w->action + 1 < 2 * s->M &&
                        s->order[(size_t)st * 2 * s->M + w->action + 1] != -(mb + 1);
            if (waits && w->whole_now < w->keep)
                w->whole[mb] = 1, w->whole_now++;
            else if (!update && a < 0 && w->whole[mb])
                w->whole[mb] = 0, w->whole_now--;
            w->op = 0;
            w->replayed = 0;
            w->box = -1;
            if (++w->action > 2 * s->M) {
                s->r->step_end[w->step] = fmax(s->r->step_end[w->step], w->t_free);
                w->action = 0;
                if (++w->step == s->steps)
                    w->done = 1;
            }
            continue;
        }
        int32_t n = ops[w->op];
        const ir_node *node = &g->nodes[n];
        sim_kind kind = update ? SIM_UPDATE : a >= 0 ? SIM_FORWARD : SIM_BACKWARD;
        if ((node->op == OP_SEND || node->op == OP_RECV) &&
            ((ir_node_int(node, ATTR_ONCE, 0) && mb > 0) || /* a parameter: sent in micro-batch 0 */
             (ir_node_int(node, ATTR_ACCUMULATE, 0) && mb >= 0 && mb < s->M - 1))) { /* summed, sent with the last */
            w->op++;
            continue;
        }
        double dur = 0.0;
        if (node->op == OP_SEND) {
            wire_bytes(g, node, &dur);
            w->pending_send = n;
        } else if (node->op == OP_RECV) {
            int32_t tensor = (int32_t)ir_node_int(node, ATTR_TENSOR, -1);
            if (tensor < 0 || tensor >= s->T)
                return 1;
            double arrive = s->arrival[message_key(s, w->step, mb < 0 ? s->M : mb, w->replica, tensor)];
            if (arrive > now) {
                if (arrive < INFINITY)
                    w->t_free = arrive;
                else
                    w->blocked = 1;
                return 0;
            }
            if (ir_node_int(node, ATTR_BITS, 0) == ATTR_BITS_HALF) /* widened back to f32 */
                dur = comm_half_cast_seconds((double)ir_shape_numel(&g->values[node->out[0]].shape));
            else if ((ir_node_float(node, ATTR_DENSITY, 0.0) > 0.0 && ir_node_float(node, ATTR_DENSITY, 0.0) < 1.0) ||
                     ir_node_int(node, ATTR_BITS, 0) > 0)
                dur = 4.0 * (double)ir_shape_numel(&g->values[node->out[0]].shape) / SIM_CODEC_BYTES_PER_SECOND;
            w->t_free = fmax(w->t_free, arrive);
        } else if (node->op == OP_ALLREDUCE || node->op == OP_ALLGATHER) {
            if (w->op > 0 && g->nodes[ops[w->op - 1]].op == node->op) { /* in the bucket */
                w->op++;
                continue;
            }
            if (!w->in_allreduce) {
                w->in_allreduce = 1;
                s->ar_count[st]++;
            }
            if (s->ar_count[st] < s->R) {
                w->blocked = 1;
                return 0;
            }
            double end = fmax(now, s->bucket_end[st]) + allreduce_seconds(s, st, w->op);
            s->ar_count[st] = 0;
            s->bucket_next[st] = 0; /* the next step's buckets */
            for (int32_t b = 0; b < s->B; b++)
                s->bucket_count[(size_t)st * s->B + b] = 0, s->bucket_at[(size_t)st * s->B + b] = 0.0;
            for (int32_t r = 0; r < s->R; r++) {
                worker *x = &s->w[st * s->R + r];
                x->in_allreduce = 0;
                x->blocked = 0;
                x->t_free = end;
                x->op++;
                x->box = -1;
                if (add_box(s, st * s->R + r, SIM_ALLREDUCE, -1, now, end))
                    return -1;
                x->box = -1;
            }
            continue;
        } else {
            dur = estimate_node_seconds(g, n, &s->c->devices[w->device]);
        }
        double start = fmax(w->t_free, now);
        if (dur > 0.0) {
            if (add_box(s, wi, kind, mb, start, start + dur))
                return -1;
            s->r->busy[wi] += dur;
        }
        w->t_free = start + dur;
        w->op++;
        if (ph == PHASE_BACKWARD && mb == s->M - 1 && s->n_buckets[st] > 0 && s->overlap)
            bucket_reached(s, st, w->op - 1, w->t_free);
    }
    return 0;
}

static int run(sim *s, struct diag *err, const char *file)
{
    sim_result *r = s->r;
    double now = 0.0;
    for (;;) {
        int all_done = 1;
        /* Until no worker sends: a send makes its message's arrival known
         * at once, and a worker that blocked on it earlier in the pass can
         * then go on. */
        for (int32_t sent = -1; sent != r->n_transfers;) {
            sent = r->n_transfers;
            all_done = 1;
            for (int32_t i = 0; i < r->n_workers; i++) {
                int rc = s->w[i].done ? 0 : advance(s, i, now);
                if (rc < 0)
                    return diag_set(err, file, 0, "out of memory simulating");
                if (rc > 0)
                    return diag_set(err, file, 0, "a send or recv names no stage or tensor of the placement");
                all_done &= s->w[i].done;
            }
        }
        if (all_done)
            return 0;
        double next = INFINITY;
        for (int32_t i = 0; i < r->n_workers; i++)
            if (!s->w[i].done && !s->w[i].blocked && s->w[i].t_free > now)
                next = fmin(next, s->w[i].t_free);
        if (!(next < INFINITY)) {
            for (int32_t i = 0; i < r->n_workers; i++)
                if (!s->w[i].done)
                    return diag_set(err, file, 0,
                                    "the simulation is stuck: device %s (stage %d) waits at step %d for a message "
                                    "that never comes",
                                    s->c->devices[s->w[i].device].name, s->w[i].stage, s->w[i].step + 1);
            return 0;
        }
        now = next;
    }
}

int simulate_steps(const ir_graph *g, const cluster *c, int32_t steps, int overlap, sim_result *r, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    memset(r, 0, sizeof *r);
    if (!c || c->n_devices < 1 || steps < 1)
        return diag_set(err, file, 0, "simulate needs a cluster and at least one step");
    const ir_placement *p = &g->placement;
    static const int32_t first_device = 0;
    sim s;
    memset(&s, 0, sizeof s);
    s.g = g;
    s.c = c;
    s.r = r;
    s.steps = steps;
    s.overlap = overlap;
    s.S = p->n_stages > 0 ? p->n_stages : 1;
    s.R = p->n_stages > 0 ? p->n_replicas : 1;
    s.M = p->n_stages > 0 && p->micro_batches > 0 ? p->micro_batches : 1;
    const int32_t *placed = p->n_stages > 0 ? p->device : &first_device;
    int32_t W = s.S * s.R, D = c->n_devices, N = g->n_nodes;
    for (int32_t i = 0; i < N; i++)
        if (g->nodes[i].op == OP_SEND || g->nodes[i].op == OP_RECV)
            s.T = (int32_t)fmax(s.T, (double)ir_node_int(&g->nodes[i], ATTR_TENSOR, -1) + 1);
    size_t n_keys = (size_t)steps * (size_t)(s.M + 1) * (size_t)s.R * (size_t)(s.T > 0 ? s.T : 1);
    r->n_workers = W;
    r->n_steps = steps;
    r->device = calloc((size_t)W, sizeof *r->device);
    r->stage = calloc((size_t)W, sizeof *r->stage);
    r->busy = calloc((size_t)W, sizeof *r->busy);
    r->step_end = calloc((size_t)steps, sizeof *r->step_end);
    r->links = calloc((size_t)D * (size_t)D + 1, sizeof *r->links);
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        s.ops[ph] = malloc((size_t)s.S * (size_t)N * sizeof *s.ops[ph] + 1);
    s.n_ops = calloc((size_t)s.S * PHASE_COUNT, sizeof *s.n_ops);
    s.order = malloc((size_t)s.S * 2 * (size_t)s.M * sizeof *s.order);
    s.w = calloc((size_t)W, sizeof *s.w);
    s.whole = calloc((size_t)W * (size_t)s.M + 1, 1);
    s.arrival = malloc(n_keys * sizeof *s.arrival);
    s.link_of = malloc((size_t)D * (size_t)D * sizeof *s.link_of);
    s.link_free = calloc((size_t)D * (size_t)D + 1, sizeof *s.link_free);
    s.ar_count = calloc((size_t)s.S, sizeof *s.ar_count);
    int rc = -1;
    if (!r->device || !r->stage || !r->busy || !r->step_end || !r->links || !s.ops[0] || !s.ops[1] || !s.ops[2] ||
        !s.ops[3] || !s.n_ops || !s.order || !s.w || !s.whole || !s.arrival || !s.link_of || !s.link_free ||
        !s.ar_count) {
        diag_set(err, file, 0, "out of memory simulating");
        goto done;
    }
    for (size_t k = 0; k < n_keys; k++)
        s.arrival[k] = INFINITY;
    for (size_t k = 0; k < (size_t)D * (size_t)D; k++)
        s.link_of[k] = -1;
    for (int32_t i = 0; i < N; i++) {
        int32_t st = g->nodes[i].stage >= 0 ? g->nodes[i].stage : 0;
        if (st >= s.S) {
            diag_set(err, file, 0, "node '%s' is on stage %d of a %d-stage placement", ir_node_name(g, i), st, s.S);
            goto done;
        }
        ir_phase ph = phase_of(&g->nodes[i]);
        s.ops[ph][(size_t)st * N + s.n_ops[st * PHASE_COUNT + ph]++] = i;
    }
    for (int32_t st = 0; st < s.S; st++) {
        /* The runtime's order (runtime/main.c run_micro_batches). */
        pipeline_order(s.M, ir_placement_warmup(&g->placement, st), s.order + (size_t)st * 2 * s.M);
        for (int32_t rep = 0; rep < s.R; rep++) {
            int32_t wi = st * s.R + rep, dev = placed[wi];
            if (dev < 0 || dev >= D) {
                diag_set(err, file, 0, "the placement names device %d; the cluster has %d", dev, D);
                goto done;
            }
            s.w[wi] = (worker){ .stage = st,
                                .replica = rep,
                                .device = dev,
                                .pending_send = -1,
                                .box = -1,
                                .keep = ir_placement_keep(&g->placement, st),
                                .whole = s.whole + (size_t)wi * s.M };
            for (int32_t k = 0;
                 ir_placement_recompute(&g->placement, st) && k < s.n_ops[st * PHASE_COUNT + PHASE_FORWARD]; k++) {
                int32_t n = s.ops[PHASE_FORWARD][(size_t)st * N + k];
                if (g->nodes[n].op != OP_SEND && g->nodes[n].op != OP_RECV)
                    s.w[wi].replay += estimate_node_seconds(g, n, &c->devices[dev]);
            }
            r->device[wi] = dev;
            r->stage[wi] = st;
        }
    }
    if (find_buckets(&s)) {
        diag_set(err, file, 0, "out of memory simulating");
        goto done;
    }
    if (run(&s, err, file))
        goto done;
    double span = r->step_end[steps - 1], busy = 0.0; /* the bubble over every step simulated */
    for (int32_t i = 0; i < W; i++)
        busy += r->busy[i];
    r->bubble = span > 0 ? fmax(0.0, (W * span - busy) / (W * span)) : 0.0;
    rc = 0;
done:
    for (int ph = 0; ph < PHASE_COUNT; ph++)
        free(s.ops[ph]);
    free(s.n_ops);
    free(s.order);
    free(s.w);
    free(s.whole);
    free(s.arrival);
    free(s.link_of);
    free(s.link_free);
    free(s.ar_count);
    free(s.n_buckets);
    free(s.bucket_ready);
    free(s.bucket_bytes);
    free(s.bucket_groups);
    free(s.bucket_bits);
    free(s.bucket_shard);
    free(s.bucket_count);
    free(s.bucket_at);
    free(s.bucket_next);
    free(s.bucket_end);
    if (rc)
        sim_result_free(r);
    return rc;
}

double sim_steady_step(const sim_result *r)
{
    int32_t last = r->n_steps - 1;
    return last < 0 ? 0.0 : r->step_end[last] - (last ? r->step_end[last - 1] : 0.0);
}

void sim_result_free(sim_result *r)
{
    free(r->device);
    free(r->stage);
    free(r->busy);
    free(r->step_end);
    free(r->boxes);
    free(r->transfers);
    free(r->links);
    memset(r, 0, sizeof *r);
}

/* ---- the timeline -------------------------------------------------------- */

static const char *const kind_colour[SIM_KIND_COUNT] = { "#4e79a7", "#59a14f", "#f28e2b", "#b07aa1" };

/* A tick spacing of 1, 2 or 5 times a power of ten giving about 10 ticks. */
static double tick_ms(double span_ms)
{
    double raw = span_ms / 10.0, p = pow(10.0, floor(log10(raw > 0 ? raw : 1.0)));
    return raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
}

int simulate_write_gantt(const sim_result *r, const cluster *c, const char *dir, struct diag *err)
{
    char path[FU_PATH_BYTES], why[FU_PATH_BYTES + 200];
    if (folders_make(dir, err))
        return -1;
    snprintf(path, sizeof path, "%s/gantt.svg", dir);
    atomic_file af;
    FILE *f = atomic_open(&af, path, why, sizeof why);
    if (!f)
        return diag_set(err, path, 0, "%s", why);
    const double left = 130.0, width = 1100.0, row = 24.0, top = 30.0;
    double span = r->n_steps > 0 ? r->step_end[r->n_steps - 1] : 0.0;
    for (int32_t k = 0; k < r->n_transfers; k++)
        span = fmax(span, r->transfers[k].end + r->links[r->transfers[k].link].latency);
    if (!(span > 0))
        span = 1e-3;
    double scale = width / span; /* px per second */
    int32_t used_links = r->n_links;
    double height = top + (r->n_workers + used_links) * row + 40.0;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
            "font-size=\"11\">\n",
            left + width + 20.0, height);
    fprintf(f,
            "<text x=\"%.0f\" y=\"16\" font-size=\"13\">simulated: %d step%s, %.2f ms (step 1 %.2f ms), "
            "bubble %.1f%%</text>\n",
            left, r->n_steps, r->n_steps == 1 ? "" : "s", span * 1e3, r->n_steps > 0 ? r->step_end[0] * 1e3 : 0.0,
            r->bubble * 100.0);
    for (int32_t i = 0; i < r->n_workers; i++) {
        double y = top + i * row;
        fprintf(f, "<text class=\"row device\" x=\"4\" y=\"%.1f\">%s (stage %d)</text>\n", y + 15.0,
                c->devices[r->device[i]].name, r->stage[i]);
    }
    for (int32_t l = 0; l < r->n_links; l++) {
        double y = top + (r->n_workers + l) * row;
        fprintf(f, "<text class=\"row link\" x=\"4\" y=\"%.1f\">%s&#8594;%s</text>\n", y + 15.0,
                c->devices[r->links[l].from].name, c->devices[r->links[l].to].name);
    }
    static const char *const kind_name[SIM_KIND_COUNT] = { "forward", "backward", "update", "all-reduce" };
    static const char *const kind_letter[SIM_KIND_COUNT] = { "F", "B", "U", "AR" };
    for (int32_t k = 0; k < r->n_boxes; k++) {
        const sim_box *b = &r->boxes[k];
        double x = left + b->start * scale, w = fmax(0.5, (b->end - b->start) * scale), y = top + b->worker * row;
        fprintf(f,
                "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\" "
                "stroke-width=\"0.3\"><title>step %d %s",
                x, y + 2.0, w, row - 4.0, kind_colour[b->kind], b->step + 1, kind_name[b->kind]);
        if (b->micro_batch >= 0)
            fprintf(f, " micro-batch %d", b->micro_batch);
        fprintf(f, ": %.3f-%.3f ms</title></rect>\n", b->start * 1e3, b->end * 1e3);
        if (w >= 16.0) {
            if (b->micro_batch >= 0)
                fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"white\">%s%d</text>\n", x + 2.0, y + 15.0,
                        kind_letter[b->kind], b->micro_batch);
            else
                fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"white\">%s</text>\n", x + 2.0, y + 15.0,
                        kind_letter[b->kind]);
        }
    }
    for (int32_t k = 0; k < r->n_transfers; k++) {
        const sim_transfer *t = &r->transfers[k];
        const sim_link *l = &r->links[t->link];
        double x = left + t->start * scale, w = fmax(0.5, (t->end + l->latency - t->start) * scale);
        double y = top + (r->n_workers + t->link) * row;
        ir_phase ph = t->phase;
        const char *colour = ph == PHASE_BACKWARD ? kind_colour[SIM_BACKWARD]
                             : ph == PHASE_UPDATE ? kind_colour[SIM_UPDATE]
                                                  : kind_colour[SIM_FORWARD];
        fprintf(f,
                "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" fill-opacity=\"0.35\" "
                "stroke=\"%s\" stroke-width=\"0.5\"><title>step %d micro-batch %d: %.0f bytes, sent %.3f ms, "
                "last byte out %.3f ms, arrives %.3f ms</title></rect>\n",
                x, y + 3.0, w, row - 6.0, colour, colour, t->step + 1, t->micro_batch, t->bytes, t->start * 1e3,
                t->end * 1e3, (t->end + l->latency) * 1e3);
    }
    double axis = top + (r->n_workers + used_links) * row + 4.0, dt = tick_ms(span * 1e3);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"black\"/>\n", left, axis, left + width,
            axis);
    for (double t = 0.0; t <= span * 1e3 + 1e-9; t += dt) {
        double x = left + t * 1e-3 * scale;
        fprintf(f,
                "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"black\"/>"
                "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n",
                x, axis, x, axis + 4.0, x, axis + 16.0, t);
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\">ms</text>\n", left + width + 4.0, axis + 16.0);
    fprintf(f, "</svg>\n");
    if (atomic_commit(&af, 0, why, sizeof why))
        return diag_set(err, path, 0, "the timeline: %s", why);
    return 0;
}
