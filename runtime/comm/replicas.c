/* replicas.c: what a stage's replicas do together (comm.h): the ring and
 * its halves, the hierarchy, the quantised exchange, and the buckets the
 * allreduce and allgather ops fill (--shard-optimizer's reduce-scatter and
 * all-gather among them, runtime/shard.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ir/op_kinds.h"
#include "../shard.h"
#include "allreduce_wire.h"
#include "comm.h"
#include "hub.h"
#include "quant_allreduce.h"

static int bucket_add(rt_comm *c, const rt_op *op, float *y, int64_t n, rt_context *ctx);

static int ensure_scratch(rt_comm *c, size_t floats, rt_context *ctx)
{
    if (floats <= c->scratch_floats)
        return 0;
    float *s = realloc(c->scratch, floats * sizeof *s);
    if (!s) {
        snprintf(ctx->msg, sizeof ctx->msg, "out of memory for a %zu-float all-reduce", floats);
        return -1;
    }
    c->scratch = s;
    c->scratch_floats = floats;
    return 0;
}

/* A ring over some of the stage's replicas: rep[0, n) in ring order
 * (NULL: replicas 0..n-1), this device the me-th. */
typedef struct {
    const int32_t *rep;
    int32_t n, me;
} ring;

static int32_t ring_replica(const ring *rg, int32_t i) { return rg->rep ? rg->rep[i] : i; }

/* One step of the ring: send n_send floats to the next member, receive
 * the previous member's n_recv into the scratch.  Message k of the
 * all-reduce travels as micro-batch -2 - k (the update's are -1). */
static int ring_step(rt_comm *c, const ring *rg, int32_t tensor, int32_t k, const float *send, int64_t n_send,
                     int64_t n_recv, rt_context *ctx)
{
    const rt_manifest *m = c->manifest;
    int32_t next = rt_comm_device_at(c, m->stage, ring_replica(rg, (rg->me + 1) % rg->n));
    int32_t prev = rt_comm_device_at(c, m->stage, ring_replica(rg, (rg->me + rg->n - 1) % rg->n));
    fu_msg_info out = { .kind = MSG_GRADIENT,
                        .step = ctx->step,
                        .micro_batch = -2 - k,
                        .tensor = tensor,
                        .codec = FU_CODEC_RAW_F32,
                        .length = (uint64_t)n_send * 4 };
    fu_msg_info in = out;
    in.length = (uint64_t)n_recv * 4;
    char why[400];
    if (fu_hub_send(c->hub, next, &out, send, why, sizeof why) != 0 ||
        fu_hub_recv(c->hub, prev, &in, c->scratch, in.length, why, sizeof why) != 0) {
        snprintf(ctx->msg, sizeof ctx->msg, "all-reduce of tensor %d over the replicas: %s", tensor, why);
        return -1;
    }
    return 0;
}

/* The ring's two halves over chunks lo[q] .. lo[q + 1] of x (q < R):
 * the reduce-scatter (phases & RING_SCATTER; messages k0 .. k0 + R - 2)
 * leaves member r chunk (r + 1) % R summed over all, divided by `divide`
 * (0: not divided); the all-gather (phases & RING_GATHER; messages k0 +
 * R - 1 ..) copies each member's chunk to the others, so every member
 * ends with the same bits.  The scratch must hold the largest chunk. */
enum { RING_SCATTER = 1, RING_GATHER = 2 };

static int ring_phases(rt_comm *c, const ring *rg, float *x, const int64_t *lo, int32_t tensor, int32_t k0,
                       int32_t divide, int phases, rt_context *ctx)
{
    int32_t R = rg->n, r = rg->me;
    for (int32_t k = 0; (phases & RING_SCATTER) && k < R - 1; k++) {
        int32_t s = (r - k + R) % R, g = (r - k - 1 + R) % R;
        if (ring_step(c, rg, tensor, k0 + k, x + lo[s], lo[s + 1] - lo[s], lo[g + 1] - lo[g], ctx))
            return -1;
        for (int64_t i = lo[g]; i < lo[g + 1]; i++)
            x[i] += c->scratch[i - lo[g]];
    }
    int32_t own = (r + 1) % R;
    for (int64_t i = lo[own]; (phases & RING_SCATTER) && divide && i < lo[own + 1]; i++)
        x[i] /= (float)divide;
    for (int32_t k = 0; (phases & RING_GATHER) && k < R - 1; k++) {
        int32_t s = (r + 1 - k + R) % R, g = (r - k + R) % R;
        if (ring_step(c, rg, tensor, k0 + R - 1 + k, x + lo[s], lo[s + 1] - lo[s], lo[g + 1] - lo[g], ctx))
            return -1;
        memcpy(x + lo[g], c->scratch, (size_t)(lo[g + 1] - lo[g]) * sizeof *x);
    }
    return 0;
}

/* x := its sum over the ring's members, divided by `divide` (0: not
 * divided); messages k0, k0 + 1, ...  Large tensors: reduce-scatter then
 * all-gather over R equal chunks (each chunk summed at one member, then
 * copied, so every member has the same bits).  Tensors smaller than the
 * ring: every vector goes round, and each member sums them in ring order. */
static int ring_allreduce(rt_comm *c, const ring *rg, float *x, int64_t n, int32_t tensor, int32_t k0, int32_t divide,
                          rt_context *ctx)
{
    int32_t R = rg->n, r = rg->me;
    if (R == 1)
        return 0;
    if (n < R) {
        if (ensure_scratch(c, (size_t)n * (size_t)(R + 1), ctx))
            return -1;
        float *all = c->scratch + n; /* all[q * n + i]: member q's x[i] */
        memcpy(all + (size_t)r * n, x, (size_t)n * sizeof *x);
        for (int32_t k = 0; k < R - 1; k++) {
            int32_t have = (r - k + R) % R, get = (r - k - 1 + 2 * R) % R;
            if (ring_step(c, rg, tensor, k0 + k, all + (size_t)have * n, n, n, ctx))
                return -1;
            memcpy(all + (size_t)get * n, c->scratch, (size_t)n * sizeof *x);
        }
        for (int64_t i = 0; i < n; i++) {
            double sum = 0.0;
            for (int32_t q = 0; q < R; q++)
                sum += all[(size_t)q * n + i];
            x[i] = (float)(divide ? sum / divide : sum);
        }
        return 0;
    }
    int64_t *lo = malloc(((size_t)R + 1) * sizeof *lo);
    if (!lo || ensure_scratch(c, (size_t)(n / R + 1), ctx)) {
        free(lo);
        snprintf(ctx->msg, sizeof ctx->msg, "out of memory for the all-reduce of tensor %d", tensor);
        return -1;
    }
    for (int32_t q = 0; q <= R; q++)
        lo[q] = n * (int64_t)q / R;
    int rc = ring_phases(c, rg, x, lo, tensor, k0, divide, RING_SCATTER | RING_GATHER, ctx);
    free(lo);
    return rc;
}

int rt_bucket_in_pieces(int mode, int64_t groups, int bits, int32_t R)
{
    if (R < 2 || mode == RT_BUCKET_SUM)
        return 0;
    return mode != RT_BUCKET_MEAN || (bits == 0 && !(groups != 0 && R <= ALLREDUCE_MAX_GROUPED));
}

void rt_bucket_lay_out(float *buf, float *const *member, const int64_t *sizes, int32_t count, int32_t R, int pieces,
                       int to_buf)
{
    int64_t at = 0;
    for (int32_t q = 0; q < (pieces ? R : 1); q++)
        for (int32_t i = 0; i < count; i++) {
            int64_t lo = pieces ? shard_piece_lo(sizes[i], q, R) : 0;
            int64_t k = pieces ? shard_piece_size(sizes[i], q, R) : sizes[i];
            if (to_buf)
                memcpy(buf + at, member[i] + lo, (size_t)k * sizeof *buf);
            else
                memcpy(member[i] + lo, buf + at, (size_t)k * sizeof *buf);
            at += k;
        }
}

/* A bucket of count tensors (sizes[]) laid out piece by piece in x[n]
 * (rt_bucket_lay_out) over the ring of all the stage's replicas: chunk q
 * is piece q of every tensor, so that the reduce-scatter leaves each
 * replica its own pieces (shard.h): MEAN both halves, SCATTER the first,
 * GATHER the second.  Unsharded and sharded runs so sum every element in
 * the same order: the same gradients to the bit.  A bucket smaller than
 * the ring (MEAN, SCATTER) goes round whole. */
static int ring_pieces(rt_comm *c, float *x, int64_t n, const int64_t *sizes, int32_t count, int32_t tensor, int mode,
                       rt_context *ctx)
{
    const rt_manifest *m = c->manifest;
    int32_t R = m->n_replicas;
    ring all = { NULL, R, m->replica };
    if (mode != RT_BUCKET_GATHER && n < R)
        return ring_allreduce(c, &all, x, n, tensor, 0, R, ctx);
    int64_t *lo = calloc((size_t)R + 1, sizeof *lo), largest = 0;
    if (!lo) {
        snprintf(ctx->msg, sizeof ctx->msg, "out of memory for the all-reduce of tensor %d", tensor);
        return -1;
    }
    for (int32_t q = 0; q < R; q++) {
        int64_t chunk = 0;
        for (int32_t i = 0; i < count; i++)
            chunk += shard_piece_size(sizes[i], q, R);
        lo[q + 1] = lo[q] + chunk;
        largest = chunk > largest ? chunk : largest;
    }
    int phases = mode == RT_BUCKET_MEAN      ? RING_SCATTER | RING_GATHER
                 : mode == RT_BUCKET_SCATTER ? RING_SCATTER
                                             : RING_GATHER;
    int rc = ensure_scratch(c, (size_t)largest + 1, ctx);
    if (rc == 0)
        rc = ring_phases(c, &all, x, lo, tensor, 0, mode == RT_BUCKET_GATHER ? 0 : R, phases, ctx);
    free(lo);
    return rc;
}

/* The hierarchy (allreduce_wire.h): groups' bit q set = replica q
 * leads a new group.  A ring sum inside this replica's group; a ring among
 * the leaders that sums the groups' sums and divides by R; each leader
 * sends the result to its members.  The members of a group copy their
 * leader's bits and the leaders end alike, so every replica has the same
 * bits.  Messages: the group's ring 0.., the leaders' 2R.., the result 4R. */
static int mean_hierarchical(rt_comm *c, float *x, int64_t n, int32_t tensor, int64_t groups, rt_context *ctx)
{
    const rt_manifest *m = c->manifest;
    int32_t R = m->n_replicas, r = m->replica, lead = allreduce_leader_of(groups, r);
    int32_t in_group[ALLREDUCE_MAX_GROUPED + 1], in_leaders[ALLREDUCE_MAX_GROUPED + 1];
    ring group = { in_group, 0, 0 }, leaders = { in_leaders, 0, 0 };
    for (int32_t q = 0; q < R; q++) {
        if (allreduce_leader_of(groups, q) == lead) {
            if (q == r)
                group.me = group.n;
            in_group[group.n++] = q;
        }
        if (allreduce_leader_of(groups, q) == q) {
            if (q == r)
                leaders.me = leaders.n;
            in_leaders[leaders.n++] = q;
        }
    }
    if (ring_allreduce(c, &group, x, n, tensor, 0, 0, ctx))
        return -1;
    fu_msg_info result = { .kind = MSG_GRADIENT,
                           .step = ctx->step,
                           .micro_batch = -2 - 4 * R,
                           .tensor = tensor,
                           .codec = FU_CODEC_RAW_F32,
                           .length = (uint64_t)n * 4 };
    char why[400];
    if (r != lead) {
        if (fu_hub_recv(c->hub, rt_comm_device_at(c, m->stage, lead), &result, x, result.length, why, sizeof why) != 0)
            goto fail;
        return 0;
    }
    if (ring_allreduce(c, &leaders, x, n, tensor, 2 * R, R, ctx))
        return -1;
    for (int32_t i = 0; i < group.n; i++)
        if (in_group[i] != r &&
            fu_hub_send(c->hub, rt_comm_device_at(c, m->stage, in_group[i]), &result, x, why, sizeof why) != 0)
            goto fail;
    return 0;
fail:
    snprintf(ctx->msg, sizeof ctx->msg, "hierarchical all-reduce of tensor %d over the replicas: %s", tensor, why);
    return -1;
}

/* The quantised exchange over the stage's replicas (quant_allreduce.h). */
static int mean_quantised(rt_comm *c, float *x, int64_t n, int32_t tensor, int bits, rt_quant_feedback *fb,
                          rt_context *ctx)
{
    const rt_manifest *m = c->manifest;
    int32_t R = m->n_replicas, *devices = malloc((size_t)R * sizeof *devices);
    if (!devices) {
        snprintf(ctx->msg, sizeof ctx->msg, "out of memory for the quantised all-reduce of tensor %d", tensor);
        return -1;
    }
    for (int32_t q = 0; q < R; q++)
        devices[q] = rt_comm_device_at(c, m->stage, q);
    if (!fb->mine && c->restored.n > 0) { /* a resumed run: the feedback it saved, before the first use */
        if (rt_quant_feedback_prepare(fb, n, R, bits, ctx->msg, sizeof ctx->msg)) {
            free(devices);
            return -1;
        }
        rt_quant_feedback_restore(fb, tensor, &c->restored);
    }
    int rc =
        rt_quant_mean(c->hub, devices, R, m->replica, x, n, tensor, bits, ctx->step, fb, ctx->msg, sizeof ctx->msg);
    free(devices);
    return rc;
}

/* x[n] (count tensors of sizes[] end to end) := what `mode` makes of it
 * over the stage's replicas (comm.h's RT_BUCKET_*): the mean by one ring
 * over them all, piece by piece (groups 0), the hierarchy, or the
 * quantised exchange (bits 8 or 4, with fb its feedback); the ring's
 * reduce-scatter or all-gather alone; or the sum. */
static int mean_over_replicas(rt_comm *c, float *x, int64_t n, const int64_t *sizes, int32_t count, int32_t tensor,
                              int64_t groups, int bits, int mode, rt_quant_feedback *fb, rt_context *ctx)
{
    const rt_manifest *m = c->manifest;
    int32_t R = m->n_replicas;
    if (R == 1)
        return 0;
    if (!c->hub) {
        snprintf(ctx->msg, sizeof ctx->msg, "all-reduce of tensor %d: no links to the other replicas", tensor);
        return -1;
    }
    if (mode == RT_BUCKET_SUM) {
        ring all = { NULL, R, m->replica };
        return ring_allreduce(c, &all, x, n, tensor, 0, 0, ctx);
    }
    if (mode == RT_BUCKET_MEAN && bits)
        return mean_quantised(c, x, n, tensor, bits, fb, ctx);
    if (mode == RT_BUCKET_MEAN && groups != 0 && R <= ALLREDUCE_MAX_GROUPED)
        return mean_hierarchical(c, x, n, tensor, groups, ctx);
    return ring_pieces(c, x, n, sizes, count, tensor, mode, ctx);
}

/* The feedback of the update's quantised bucket with message id tag,
 * made at first use. */
static rt_quant_feedback *update_feedback(rt_comm *c, int32_t tag, rt_context *ctx)
{
    for (int32_t i = 0; i < c->n_update_fb; i++)
        if (c->update_fb_tag[i] == tag)
            return &c->update_fb[i];
    rt_quant_feedback *f = realloc(c->update_fb, (size_t)(c->n_update_fb + 1) * sizeof *f);
    if (f)
        c->update_fb = f;
    int32_t *t = f ? realloc(c->update_fb_tag, (size_t)(c->n_update_fb + 1) * sizeof *t) : NULL;
    if (!f || !t) {
        snprintf(ctx->msg, sizeof ctx->msg, "out of memory for the all-reduce's feedback");
        return NULL;
    }
    c->update_fb_tag = t;
    memset(&c->update_fb[c->n_update_fb], 0, sizeof *c->update_fb);
    t[c->n_update_fb] = tag;
    return &c->update_fb[c->n_update_fb++];
}

int rt_comm_allreduce(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx)
{
    int64_t n = rt_tensor_numel(&op->in[0]);
    if (rt_tensor_is_half(&op->in[0])) { /* parameters' gradients are f32 (the precision pass) */
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s': all-reduce of a 16-bit tensor", op->name);
        return -1;
    }
    float *y = (float *)(arena + op->out[0].offset);
    if (op->out[0].offset != op->in[0].offset)
        memmove(y, arena + op->in[0].offset, (size_t)n * sizeof *y);
    if (c->manifest->n_replicas == 1 || (c->overlap && op->ints[ATTR_BUCKET] >= 0))
        return 0;
    return bucket_add(c, op, y, n, ctx);
}

int rt_comm_bucket_mode(const rt_op *op)
{
    if (op->op == OP_ALLGATHER)
        return RT_BUCKET_GATHER;
    return op->ints[ATTR_SUM] ? RT_BUCKET_SUM : op->ints[ATTR_SHARD] ? RT_BUCKET_SCATTER : RT_BUCKET_MEAN;
}

int rt_comm_gather_pieces(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx)
{
    if (rt_tensor_is_half(&op->in[0])) { /* parameters are f32 (the precision pass) */
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s': all-gather of a 16-bit tensor", op->name);
        return -1;
    }
    if (c->manifest->n_replicas == 1)
        return 0;
    return bucket_add(c, op, (float *)(arena + op->in[0].offset), rt_tensor_numel(&op->in[0]), ctx);
}

/* y[n] joins the bucket (an op of another mode flushes it first). */
static int bucket_add(rt_comm *c, const rt_op *op, float *y, int64_t n, rt_context *ctx)
{
    int64_t held = 0;
    for (int32_t i = 0; i < c->bucket_count; i++)
        held += c->bucket_floats[i];
    /* The all-gather's bucket is the whole stage's parameters: in pieces
     * of RT_GATHER_BUCKET_FLOATS at most, so that its buffer stays small. */
    int full = rt_comm_bucket_mode(op) == RT_BUCKET_GATHER && held > 0 && held + n > RT_GATHER_BUCKET_FLOATS;
    if (c->bucket_count > 0 && (full || c->bucket_mode != rt_comm_bucket_mode(op)) && rt_comm_flush_bucket(c, ctx))
        return -1;
    if (c->bucket_count == c->bucket_cap) {
        int32_t cap = c->bucket_cap ? 2 * c->bucket_cap : 64;
        float **d = realloc(c->bucket_data, (size_t)cap * sizeof *d);
        if (d)
            c->bucket_data = d;
        int64_t *f = d ? realloc(c->bucket_floats, (size_t)cap * sizeof *f) : NULL;
        if (!d || !f) {
            snprintf(ctx->msg, sizeof ctx->msg, "out of memory for the all-reduce bucket");
            return -1;
        }
        c->bucket_floats = f;
        c->bucket_cap = cap;
    }
    if (c->bucket_count == 0) {
        c->bucket_tag = (int32_t)op->ints[ATTR_TENSOR];
        c->bucket_groups = op->ints[ATTR_GROUPS];
        c->bucket_bits = (int)op->ints[ATTR_BITS];
        c->bucket_mode = rt_comm_bucket_mode(op);
    }
    c->bucket_data[c->bucket_count] = y;
    c->bucket_floats[c->bucket_count++] = n;
    return 0;
}

int rt_comm_flush_bucket(rt_comm *c, rt_context *ctx)
{
    if (c->bucket_count == 0)
        return 0;
    int64_t total = 0;
    for (int32_t i = 0; i < c->bucket_count; i++)
        total += c->bucket_floats[i];
    if ((size_t)total > c->bucket_buf_floats) {
        float *b = realloc(c->bucket_buf, (size_t)total * sizeof *b);
        if (!b) {
            c->bucket_count = 0;
            snprintf(ctx->msg, sizeof ctx->msg, "out of memory for a %lld-float all-reduce", (long long)total);
            return -1;
        }
        c->bucket_buf = b;
        c->bucket_buf_floats = (size_t)total;
    }
    int32_t count = c->bucket_count, R = c->manifest->n_replicas;
    int pieces = rt_bucket_in_pieces(c->bucket_mode, c->bucket_groups, c->bucket_bits, R);
    rt_bucket_lay_out(c->bucket_buf, c->bucket_data, c->bucket_floats, count, R, pieces, 1);
    c->bucket_count = 0;
    rt_quant_feedback *fb = c->bucket_bits ? update_feedback(c, c->bucket_tag, ctx) : NULL;
    if ((c->bucket_bits && !fb) || mean_over_replicas(c, c->bucket_buf, total, c->bucket_floats, count, c->bucket_tag,
                                                      c->bucket_groups, c->bucket_bits, c->bucket_mode, fb, ctx))
        return -1;
    rt_bucket_lay_out(c->bucket_buf, c->bucket_data, c->bucket_floats, count, R, pieces, 0);
    return 0;
}

int rt_comm_mean_bucket(rt_comm *c, float **scratch, size_t *scratch_floats, float *x, const int64_t *sizes,
                        int32_t count, int32_t tensor, int64_t groups, int bits, int mode, rt_quant_feedback *fb,
                        rt_context *ctx)
{
    /* Only what the ring reads, all set at open and never changed (the
     * main thread keeps changing the rest): the hub is thread-safe; the
     * scratch is the caller's. */
    rt_comm own;
    memset(&own, 0, sizeof own);
    own.hub = c->hub;
    own.manifest = c->manifest;
    own.placement = c->placement;
    own.peers = c->peers;
    own.scratch = *scratch;
    own.scratch_floats = *scratch_floats;
    own.restored = c->restored; /* read only, and never freed through own */
    int64_t n = 0;
    for (int32_t i = 0; i < count; i++)
        n += sizes[i];
    int rc = mean_over_replicas(&own, x, n, sizes, count, tensor, groups, bits, mode, fb, ctx);
    *scratch = own.scratch;
    *scratch_floats = own.scratch_floats;
    return rc;
}

int rt_comm_mean_over_replicas(rt_comm *c, float *x, int64_t n, int32_t tag, rt_context *ctx)
{
    return mean_over_replicas(c, x, n, &n, 1, tag, 0, 0, RT_BUCKET_MEAN, NULL, ctx);
}
