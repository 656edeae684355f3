/* comm.c: a device program's peers and its send and recv ops (see
 * comm.h; the replicas' all-reduce and all-gather are replicas.c's). */
#include "comm.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../ir/op_kinds.h"
#include "../../ir/ir.h"
#include "allreduce_wire.h"
#include "../shard.h"
#include "../cpu/half.h"
#include "hub.h"
#include "quant.h"
#include "quant_allreduce.h"
#include "topk.h"
#include "../rt_error.h"

static int packed_reserve(rt_comm *c, size_t bytes, rt_context *ctx);

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static rt_topk_send *topk_send_state(rt_comm *c, const rt_op *op, int32_t to, rt_context *ctx);
static float *accumulator(rt_comm *c, const rt_op *op, rt_context *ctx);

static const char *peer_address(const rt_comm_options *o, const rt_peer *p)
{
    for (int i = 0; o && i < o->n_overrides; i++)
        if (strcmp(o->peer_name[i], p->name) == 0)
            return o->peer_address[i];
    return p->address;
}

int rt_comm_open(rt_comm *c, const rt_manifest *m, const int32_t *placement, const rt_peer *peers, const rt_link *links,
                 const rt_comm_options *o, char *err, size_t n)
{
    memset(c, 0, sizeof *c);
    c->manifest = m;
    c->placement = placement;
    c->peers = peers;
    c->links = links;
    int32_t self = m->device_index, count = 0;
    c->adapt = o && o->adapt_density;
    c->shaped = o && o->emulate_links;
    size_t peers_n = (size_t)m->n_peers + 1;
    c->link_bandwidth = calloc(peers_n, sizeof *c->link_bandwidth);
    c->link_latency = calloc(peers_n, sizeof *c->link_latency);
    c->adapted = calloc(peers_n, sizeof *c->adapted);
    c->logged = calloc(peers_n, sizeof *c->logged);
    c->reported = calloc(peers_n, sizeof *c->reported);
    fu_hub_link_spec *specs = calloc((size_t)m->n_links + 1, sizeof *specs);
    if (!specs || !c->link_bandwidth || !c->link_latency || !c->adapted || !c->logged || !c->reported) {
        free(specs);
        rt_comm_close(c);
        return rt_error(err, n, "out of memory opening %d links", m->n_links);
    }
    int32_t port_base = o && o->port_base > 0 ? o->port_base : m->port_base;
    for (int32_t i = 0; i < m->n_links; i++) {
        const rt_link *l = &links[i];
        if (l->a != self && l->b != self)
            continue;
        int32_t other = l->a == self ? l->b : l->a;
        if (other < 0 || other >= m->n_peers) {
            free(specs);
            rt_comm_close(c);
            return rt_error(err, n, "link %d names device %d of %d: a damaged program", i, other, m->n_peers);
        }
        c->link_bandwidth[other] = l->bandwidth;
        c->link_latency[other] = l->latency;
        fu_hub_link_spec *s = &specs[count++];
        s->peer = other;
        snprintf(s->name, sizeof s->name, "%s", peers[other].name);
        snprintf(s->address, sizeof s->address, "%.199s", peer_address(o, &peers[other]));
        s->listen = (l->a == self) != (l->b_listens != 0);
        /* The lower-numbered device listens on every interface (the higher
         * one when the lower's host takes no connection); the other
         * connects to its host's address. */
        if (s->listen)
            snprintf(s->url, sizeof s->url, "tcp://*:%d", port_base + i);
        else
            snprintf(s->url, sizeof s->url, "tcp://%.200s:%d", peer_address(o, &peers[other]), port_base + i);
        if (o && o->emulate_links) {
            s->bandwidth = l->bandwidth;
            s->latency = l->latency;
        }
    }
    /* Every device of the program (of every DiLoCo site): those the links name. */
    uint8_t *members = calloc((size_t)m->n_peers + 1, 1);
    for (int32_t i = 0; members && i < m->n_links; i++)
        if (links[i].a >= 0 && links[i].a < m->n_peers && links[i].b >= 0 && links[i].b < m->n_peers)
            members[links[i].a] = members[links[i].b] = 1;
    fu_hub_options ho = { .self_name = m->device,
                          .build_id = m->build_id,
                          .epoch = o ? o->epoch : 0,
                          .timeout_ms = o && o->timeout_ms > 0 ? o->timeout_ms : 10000,
                          .connect_timeout_ms = o && o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 60000,
                          .secret = o ? o->secret : NULL,
                          .self_index = self,
                          .n_devices = members ? m->n_peers : 0,
                          .members = members };
    c->hub = count > 0 ? fu_hub_open(specs, count, &ho, err, n) : NULL;
    free(members);
    free(specs);
    if (count > 0 && !c->hub) {
        rt_comm_close(c);
        return -1;
    }
    return 0;
}

void rt_comm_close(rt_comm *c)
{
    if (c->hub)
        fu_hub_close(c->hub);
    free(c->scratch);
    free(c->widened);
    free(c->bucket_data);
    free(c->bucket_floats);
    free(c->bucket_buf);
    free(c->packed);
    if (c->topk)
        topk_scratch_free(c->topk);
    free(c->topk);
    for (int32_t i = 0; i < c->n_sends; i++)
        free(c->sends[i].residual);
    for (int32_t i = 0; i < c->n_accs; i++)
        free(c->accs[i].sum);
    free(c->accs);
    free(c->sends);
    free(c->link_bandwidth);
    free(c->link_latency);
    free(c->adapted);
    free(c->logged);
    free(c->reported);
    for (int32_t i = 0; i < c->n_update_fb; i++)
        rt_quant_feedback_free(&c->update_fb[i]);
    free(c->update_fb);
    free(c->update_fb_tag);
    rt_feedback_arrays_free(&c->restored);
    memset(c, 0, sizeof *c);
}

static void send_feedback_name(char *name, size_t size, int32_t tensor)
{
    snprintf(name, size, RT_FEEDBACK_PREFIX "send.%d", tensor);
}

int rt_comm_list_feedback(const rt_comm *c, rt_feedback_arrays *l)
{
    char name[96];
    for (int32_t i = 0; i < c->n_sends; i++) {
        if (!c->sends[i].residual)
            continue;
        send_feedback_name(name, sizeof name, c->sends[i].tensor);
        if (rt_feedback_add(l, name, c->sends[i].residual, c->sends[i].n))
            return -1;
    }
    for (int32_t i = 0; i < c->n_update_fb; i++)
        if (rt_quant_feedback_list(&c->update_fb[i], c->update_fb_tag[i], l))
            return -1;
    return 0;
}

void rt_comm_restore_feedback(rt_comm *c, rt_feedback_arrays *l)
{
    rt_feedback_arrays_free(&c->restored);
    c->restored = *l;
    memset(l, 0, sizeof *l);
}

void rt_comm_abort(rt_comm *c, const char *why)
{
    if (c->hub)
        fu_hub_abort(c->hub, why);
}

int rt_comm_flush(rt_comm *c, char *err, size_t n) { return c->hub ? fu_hub_flush(c->hub, err, n) : 0; }

int32_t rt_comm_device_at(const rt_comm *c, int32_t stage, int32_t replica)
{
    return c->placement[stage * c->manifest->n_replicas + replica];
}

static int64_t tensor_bytes(const rt_tensor *t) { return rt_tensor_bytes(t); }

/* The codecs (top-k, rows of bits) work on f32: a 16-bit tensor is widened
 * into c->widened first (exact), and decoded there before it is rounded
 * into place.  Raw, it crosses the link as it is stored: 2 bytes an element. */
static float *widened(rt_comm *c, int64_t n, rt_context *ctx)
{
    if ((size_t)n > c->widened_floats) {
        float *w = realloc(c->widened, (size_t)n * sizeof *w);
        if (!w) {
            snprintf(ctx->msg, sizeof ctx->msg, "out of memory for a %lld-float codec buffer", (long long)n);
            return NULL;
        }
        c->widened = w;
        c->widened_floats = (size_t)n;
    }
    return c->widened;
}

/* A quantised tensor's row: its last dimension (a scalar is one row of 1). */
static int64_t quant_cols(const rt_tensor *t) { return t->rank > 0 ? t->dim[t->rank - 1] : 1; }

/* Messages in the update phase carry micro-batch -1; the ring's steps -2, -3, ... */
static fu_msg_info message(const rt_op *op, const rt_context *ctx, int64_t bytes)
{
    fu_msg_info m = { .kind = ctx->phase == PHASE_FORWARD ? MSG_ACTIVATION : MSG_GRADIENT,
                      .step = ctx->step,
                      .micro_batch = ctx->micro_batch,
                      .tensor = (int32_t)op->ints[ATTR_TENSOR],
                      .codec = FU_CODEC_RAW_F32,
                      .length = (uint64_t)bytes };
    const rt_tensor *t = op->op == OP_RECV ? &op->out[0] : &op->in[0];
    if (rt_tensor_is_half(t))
        m.codec = t->dtype == HALF_DT_BF16 ? FU_CODEC_RAW_BF16 : FU_CODEC_RAW_F16;
    return m;
}

static int no_hub(const rt_op *op, rt_context *ctx)
{
    snprintf(ctx->msg, sizeof ctx->msg, "op '%s': no link to stage %lld", op->name, (long long)op->ints[ATTR_PEER]);
    return -1;
}

int rt_comm_moves(const rt_comm *c, const rt_op *op, const rt_context *ctx)
{
    if (op->ints[ATTR_ONCE] && ctx->micro_batch > 0)
        return 0;
    return !(op->ints[ATTR_ACCUMULATE] && c->manifest->micro_batches > 1 &&
             ctx->micro_batch < c->manifest->micro_batches - 1);
}

/* A parameter the comm pass sends in the graph's 16-bit precision
 * (ATTR_BITS_HALF): every reader at the other end rounds it so anyway. */
static int half_wire_dtype(const rt_comm *c, const rt_op *op, const rt_tensor *t, rt_context *ctx)
{
    int dtype = c->manifest->precision;
    if (rt_tensor_is_half(t) || (dtype != HALF_DT_F16 && dtype != HALF_DT_BF16)) {
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s': a 16-bit wire for a %s tensor in a %s program", op->name,
                 rt_tensor_is_half(t) ? "16-bit" : "f32", dtype == HALF_DT_F32 ? "f32" : "16-bit");
        return -1;
    }
    return dtype;
}

static int send_half(rt_comm *c, const rt_op *op, int32_t to, fu_msg_info *m, const void *payload, rt_context *ctx)
{
    int dtype = half_wire_dtype(c, op, &op->in[0], ctx);
    int64_t n = rt_tensor_numel(&op->in[0]);
    if (dtype < 0 || packed_reserve(c, (size_t)n * 2, ctx))
        return -1;
    half_from_f32(c->packed, (const float *)payload, n, dtype);
    m->codec = dtype == HALF_DT_BF16 ? FU_CODEC_RAW_BF16 : FU_CODEC_RAW_F16;
    m->length = (uint64_t)n * 2;
    char why[400];
    if (fu_hub_send(c->hub, to, m, c->packed, why, sizeof why) != 0) {
        snprintf(ctx->msg, sizeof ctx->msg, "sending '%s' to %s: %.300s", op->name, c->peers[to].name, why);
        return -1;
    }
    return 0;
}

int rt_comm_send(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx)
{
    if (op->ints[ATTR_ONCE] && ctx->micro_batch > 0)
        return 0; /* a parameter: micro-batch 0 sent it */
    if (!c->hub)
        return no_hub(op, ctx);
    int32_t to = rt_comm_device_at(c, (int32_t)op->ints[ATTR_PEER], c->manifest->replica);
    fu_msg_info m = message(op, ctx, tensor_bytes(&op->in[0]));
    const void *payload = arena + op->in[0].offset;
    char why[400];
    if ((op->ints[ATTR_ACCUMULATE] || op->ints[ATTR_FEEDBACK]) && rt_tensor_is_half(&op->in[0])) {
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s': a parameter's gradient is f32, this one is 16-bit", op->name);
        return -1;
    }
    if (op->ints[ATTR_BITS] == ATTR_BITS_HALF) /* an f32 parameter in the graph's 16 bits (passes.h) */
        return send_half(c, op, to, &m, payload, ctx);
    if ((op->floats[ATTR_DENSITY] > 0 || op->ints[ATTR_BITS] > 0) && rt_tensor_is_half(&op->in[0])) {
        float *w = widened(c, rt_tensor_numel(&op->in[0]), ctx);
        if (!w)
            return -1;
        half_to_f32(w, payload, rt_tensor_numel(&op->in[0]), op->in[0].dtype);
        payload = w;
    }
    if (op->ints[ATTR_ACCUMULATE] && c->manifest->micro_batches > 1) {
        /* A parameter's partial gradient: summed here, sent with the last micro-batch. */
        float *sum = accumulator(c, op, ctx);
        if (!sum)
            return -1;
        const float *x = payload;
        int64_t n = rt_tensor_numel(&op->in[0]);
        for (int64_t i = 0; i < n; i++)
            sum[i] = ctx->micro_batch == 0 ? x[i] : sum[i] + x[i];
        if (ctx->micro_batch < c->manifest->micro_batches - 1)
            return 0;
        payload = sum;
    }
    if (op->floats[ATTR_DENSITY] > 0) { /* AdaTopK: the k largest by magnitude, at this step's density */
        rt_topk_send *s = topk_send_state(c, op, to, ctx);
        if (!s)
            return -1;
        int64_t n = s->n, k = topk_count(n, s->density);
        if (packed_reserve(c, topk_encoded_bytes(n, k), ctx))
            return -1;
        int64_t bytes = s->residual ? topk_encode_with_residual((const float *)payload, s->residual, n, k, c->packed,
                                                                c->packed_bytes, c->topk)
                                    : topk_encode((const float *)payload, n, k, c->packed, c->packed_bytes, c->topk);
        if (bytes < 0) {
            snprintf(ctx->msg, sizeof ctx->msg, "op '%s': cannot encode the top %lld of %lld", op->name, (long long)k,
                     (long long)n);
            return -1;
        }
        s->step_bytes += (uint64_t)bytes; /* what rt_comm_adapt_density measures against */
        s->step_sends++;
        m.codec = FU_CODEC_TOPK;
        m.length = (uint64_t)bytes;
        payload = c->packed;
    } else if (op->ints[ATTR_BITS] > 0) { /* rows of 8 or 4 bits (quant.h) */
        int64_t n = rt_tensor_numel(&op->in[0]), cols = quant_cols(&op->in[0]), rows = cols ? n / cols : 0;
        int bits = (int)op->ints[ATTR_BITS];
        size_t cap = quant_encoded_bytes(rows, cols, bits);
        if (packed_reserve(c, cap, ctx))
            return -1;
        /* Gradients round stochastically (unbiased), from a seed that is a
         * function of the message, so a run is reproducible. */
        quant_rounding rounding = ctx->phase == PHASE_BACKWARD ? QUANT_STOCHASTIC : QUANT_NEAREST;
        uint64_t seed = ((uint64_t)ctx->step << 32) ^ ((uint64_t)(uint32_t)ctx->micro_batch << 16) ^
                        (uint64_t)(uint32_t)m.tensor ^ ((uint64_t)c->manifest->replica << 56);
        int64_t bytes = quant_encode((const float *)payload, rows, cols, bits, rounding, seed, c->packed, cap);
        if (bytes < 0) {
            snprintf(ctx->msg, sizeof ctx->msg, "op '%s': cannot quantise %lld x %lld to %d bits", op->name,
                     (long long)rows, (long long)cols, bits);
            return -1;
        }
        m.codec = FU_CODEC_QUANT;
        m.length = (uint64_t)bytes;
        payload = c->packed;
    }
    if (fu_hub_send(c->hub, to, &m, payload, why, sizeof why) != 0) {
        snprintf(ctx->msg, sizeof ctx->msg, "sending '%s' to %s: %.300s", op->name, c->peers[to].name, why);
        return -1;
    }
    return 0;
}

int rt_comm_recv(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx)
{
    if (op->ints[ATTR_ONCE] && ctx->micro_batch > 0)
        return 0; /* the copy micro-batch 0 received is still in the arena */
    if (!c->hub)
        return no_hub(op, ctx);
    int32_t from = rt_comm_device_at(c, (int32_t)op->ints[ATTR_PEER], c->manifest->replica);
    int64_t bytes = tensor_bytes(&op->out[0]), n = rt_tensor_numel(&op->out[0]);
    if (op->ints[ATTR_ACCUMULATE] && ctx->micro_batch < c->manifest->micro_batches - 1) {
        memset(arena + op->out[0].offset, 0, (size_t)bytes); /* the sum comes with the last micro-batch */
        return 0;
    }
    fu_msg_info want = message(op, ctx, bytes);
    void *into = arena + op->out[0].offset;
    char why[400];
    int half = op->ints[ATTR_BITS] == ATTR_BITS_HALF ? half_wire_dtype(c, op, &op->out[0], ctx) : 0;
    if (half < 0)
        return -1;
    if (half) { /* an f32 parameter in 16 bits: widened (exactly) into its place below */
        want.codec = half == HALF_DT_BF16 ? FU_CODEC_RAW_BF16 : FU_CODEC_RAW_F16;
        want.length = (uint64_t)n * 2;
        if (packed_reserve(c, want.length, ctx))
            return -1;
        into = c->packed;
    } else if (op->floats[ATTR_DENSITY] > 0) { /* the sender chose k (its header says): any length up to k = n */
        want.codec = FU_CODEC_TOPK;
        want.length = topk_encoded_bytes(n, n);
        if (packed_reserve(c, want.length, ctx))
            return -1;
        into = c->packed;
    } else if (op->ints[ATTR_BITS] > 0) { /* rows of bits (quant.h): the length is the encoding's */
        int64_t cols = quant_cols(&op->out[0]);
        want.codec = FU_CODEC_QUANT;
        want.length = quant_encoded_bytes(cols ? n / cols : 0, cols, (int)op->ints[ATTR_BITS]);
        if (!want.length) {
            snprintf(ctx->msg, sizeof ctx->msg, "op '%s': %lld bits is not a row width", op->name,
                     (long long)op->ints[ATTR_BITS]);
            return -1;
        }
        if (packed_reserve(c, want.length, ctx))
            return -1;
        into = c->packed;
    }
    uint64_t got = want.length;
    double t0 = seconds_now();
    int rc = into == c->packed ? fu_hub_recv_upto(c->hub, from, &want, into, want.length, &got, why, sizeof why)
                               : fu_hub_recv(c->hub, from, &want, into, want.length, why, sizeof why);
    c->recv_wait += seconds_now() - t0;
    if (rc != 0) {
        snprintf(ctx->msg, sizeof ctx->msg, "receiving '%s' from %s: %.300s", op->name, c->peers[from].name, why);
        return -1;
    }
    float *out = (float *)(arena + op->out[0].offset);
    if (half) {
        if (got != want.length) {
            snprintf(ctx->msg, sizeof ctx->msg, "receiving '%s' from %s: %llu bytes, expected %llu (16-bit)", op->name,
                     c->peers[from].name, (unsigned long long)got, (unsigned long long)want.length);
            return -1;
        }
        half_to_f32(out, c->packed, n, half);
        return 0;
    }
    if (into == c->packed && rt_tensor_is_half(&op->out[0]) && !(out = widened(c, n, ctx)))
        return -1;
    if (into == c->packed &&
        (want.codec == FU_CODEC_QUANT ? quant_decode(c->packed, got, out, n, why, sizeof why)
                                      : topk_decode(c->packed, got, out, n, why, sizeof why)) != 0) {
        snprintf(ctx->msg, sizeof ctx->msg, "receiving '%s' from %s: %.300s", op->name, c->peers[from].name, why);
        return -1;
    }
    if (into == c->packed && rt_tensor_is_half(&op->out[0]))
        half_from_f32(arena + op->out[0].offset, out, n, op->out[0].dtype);
    return 0;
}

/* The state of the compressed send op, made at its first message: the
 * compiled density, the target it implies on the compiled link, and for
 * feedback=1 a zeroed residual, kept for the whole run. */
static rt_topk_send *topk_send_state(rt_comm *c, const rt_op *op, int32_t to, rt_context *ctx)
{
    int32_t tensor = (int32_t)op->ints[ATTR_TENSOR];
    for (int32_t i = 0; i < c->n_sends; i++)
        if (c->sends[i].tensor == tensor)
            return &c->sends[i];
    if (c->n_sends == c->sends_cap) {
        int32_t cap = c->sends_cap ? 2 * c->sends_cap : 8;
        rt_topk_send *p = realloc(c->sends, (size_t)cap * sizeof *p);
        if (!p) {
            snprintf(ctx->msg, sizeof ctx->msg, "out of memory for op '%s'", op->name);
            return NULL;
        }
        c->sends = p;
        c->sends_cap = cap;
    }
    int64_t n = rt_tensor_numel(&op->in[0]);
    double density = op->floats[ATTR_DENSITY], bw = c->link_bandwidth[to];
    rt_topk_send s = { .tensor = tensor,
                       .peer = to,
                       .n = n,
                       .density = density,
                       .target = bw > 0 ? (double)topk_encoded_bytes(n, topk_count(n, density)) / bw : 0.0 };
    if (op->ints[ATTR_FEEDBACK] && !(s.residual = calloc((size_t)n, sizeof *s.residual))) {
        snprintf(ctx->msg, sizeof ctx->msg, "out of memory for the residual of op '%s' (%lld floats)", op->name,
                 (long long)n);
        return NULL;
    }
    if (s.residual) { /* a resumed run goes on with the residual it saved */
        char name[96];
        send_feedback_name(name, sizeof name, tensor);
        rt_feedback_restore(&c->restored, name, s.residual, n);
    }
    c->sends[c->n_sends] = s;
    return &c->sends[c->n_sends++];
}

/* The step's sum of op's input (accumulate=1), made at first use. */
static float *accumulator(rt_comm *c, const rt_op *op, rt_context *ctx)
{
    int32_t tensor = (int32_t)op->ints[ATTR_TENSOR];
    for (int32_t i = 0; i < c->n_accs; i++)
        if (c->accs[i].tensor == tensor)
            return c->accs[i].sum;
    int64_t n = rt_tensor_numel(&op->in[0]);
    if (c->n_accs == c->accs_cap) {
        int32_t cap = c->accs_cap ? 2 * c->accs_cap : 4;
        rt_accumulator *p = realloc(c->accs, (size_t)cap * sizeof *p);
        if (!p)
            goto oom;
        c->accs = p;
        c->accs_cap = cap;
    }
    float *sum = malloc((size_t)(n > 0 ? n : 1) * sizeof *sum);
    if (!sum)
        goto oom;
    c->accs[c->n_accs++] = (rt_accumulator){ .tensor = tensor, .n = n, .sum = sum };
    return sum;
oom:
    snprintf(ctx->msg, sizeof ctx->msg, "out of memory for the gradient sum of op '%s' (%lld floats)", op->name,
             (long long)n);
    return NULL;
}

void rt_comm_adapt_density(rt_comm *c, double step_seconds)
{
    /* This stage's compute per micro-batch: the step less its waits for peers. */
    double compute =
        fmax(0.0, step_seconds - c->recv_wait) / (c->manifest->micro_batches > 0 ? c->manifest->micro_batches : 1);
    c->recv_wait = 0.0;
    if (!c->adapt || !c->hub)
        return;
    for (int32_t p = 0; p < c->manifest->n_peers; p++) {
        int used = 0;
        for (int32_t i = 0; i < c->n_sends; i++)
            used |= c->sends[i].peer == p;
        fu_hub_link_stats now;
        if (!used || fu_hub_stats(c->hub, p, &now) != 0)
            continue;
        double d_bytes = (double)(now.bytes - c->adapted[p].bytes),
               d_busy = now.busy_seconds - c->adapted[p].busy_seconds;
        if (!(d_bytes > 0 && d_busy > 0))
            continue; /* nothing acked since: keep the densities, measure again next step */
        c->adapted[p] = now;
        double throughput = d_bytes / d_busy; /* bytes/s */
        for (int32_t i = 0; i < c->n_sends; i++) {
            rt_topk_send *s = &c->sends[i];
            if (s->peer != p || s->step_sends == 0 || !(s->target > 0))
                continue;
            double took = (double)s->step_bytes / s->step_sends / throughput, target = fmax(s->target, compute);
            double next = fmin(1.0, fmax(RT_DENSITY_MIN, s->density * target / took));
            s->density = fmin(1.0, fmax(RT_DENSITY_MIN, sqrt(s->density * next)));
        }
    }
    for (int32_t i = 0; i < c->n_sends; i++) {
        c->sends[i].step_bytes = 0;
        c->sends[i].step_sends = 0;
    }
}

/* printf at buf + *at (buf: n bytes), *at moved past it: 0; -1 when it
 * did not fit (buf cut back to *at: only whole entries). */
static int append(char *buf, size_t n, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int append(char *buf, size_t n, size_t *at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *at, n - *at, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n - *at) {
        buf[*at] = '\0';
        return -1;
    }
    *at += (size_t)w;
    return 0;
}

void rt_comm_links_json(rt_comm *c, char *buf, size_t n)
{
    size_t at = 0;
    if (n)
        buf[0] = '\0';
    for (int32_t p = 0; c && c->hub && p < c->manifest->n_peers && at < n; p++) {
        fu_hub_link_stats now;
        if (fu_hub_stats(c->hub, p, &now) != 0 || (now.bytes == 0 && c->link_bandwidth[p] <= 0))
            continue; /* no link to it */
        if (append(buf, n, &at, "%s\"%s\": {\"bytes\": %llu, \"busy_ms\": %.3f}", at ? ", " : ", \"links\": {",
                   c->peers[p].name, (unsigned long long)(now.bytes - c->logged[p].bytes),
                   (now.busy_seconds - c->logged[p].busy_seconds) * 1e3))
            break;
        c->logged[p] = now;
    }
    if (at > 0 && at + 1 < n)
        snprintf(buf + at, n - at, "}");
}

void rt_comm_links_report(rt_comm *c, char *buf, size_t n)
{
    size_t at = 0;
    if (n)
        buf[0] = '\0';
    for (int32_t p = 0; c && c->hub && p < c->manifest->n_peers && at < n; p++) {
        fu_hub_link_stats now;
        if (!(c->link_bandwidth[p] > 0) || fu_hub_stats(c->hub, p, &now) != 0 || now.bytes == c->reported[p].bytes)
            continue;
        double bytes = (double)(now.bytes - c->reported[p].bytes),
               busy = now.busy_seconds - c->reported[p].busy_seconds,
               round_trips =
                   c->shaped ? 0.0 : (double)(now.messages - c->reported[p].messages) * 2 * c->link_latency[p],
               planned = bytes / c->link_bandwidth[p] + round_trips,
               measured = busy - round_trips > 0.5 * busy ? bytes / (busy - round_trips) : 0.0;
        if (append(buf, n, &at, "%s%s %.0f %.6f %.6f %.6g %.6g", at ? " " : "", c->peers[p].name, bytes, busy, planned,
                   measured, c->link_bandwidth[p]))
            break;
        c->reported[p] = now;
    }
}

int rt_comm_set_link_bandwidth(rt_comm *c, const char *device, double bandwidth)
{
    int changed = 0, all = strcmp(device, c->manifest->device) == 0;
    for (int32_t p = 0; c->hub && p < c->manifest->n_peers; p++)
        if (c->link_bandwidth[p] > 0 && (all || strcmp(c->peers[p].name, device) == 0))
            changed += fu_hub_set_bandwidth(c->hub, p, bandwidth) == 0;
    return changed;
}

void rt_comm_density_text(const rt_comm *c, char *buf, size_t n, int json)
{
    size_t at = 0;
    if (n)
        buf[0] = '\0';
    for (int32_t i = 0; c && i < c->n_sends && at < n; i++) {
        int w = json ? snprintf(buf + at, n - at, "%s%.4f%s", i ? ", " : ", \"rho\": [", c->sends[i].density,
                                i + 1 == c->n_sends ? "]" : "")
                     : snprintf(buf + at, n - at, "  rho %.4f", c->sends[i].density);
        if (w < 0)
            break;
        at += (size_t)w;
    }
}

/* Room for `bytes` of encoded tensor, and the codec's scratch. */
static int packed_reserve(rt_comm *c, size_t bytes, rt_context *ctx)
{
    if (!c->topk) {
        c->topk = malloc(sizeof *c->topk);
        if (!c->topk) {
            snprintf(ctx->msg, sizeof ctx->msg, "out of memory for the top-k codec");
            return -1;
        }
        topk_scratch_init(c->topk);
    }
    if (bytes <= c->packed_bytes)
        return 0;
    void *p = realloc(c->packed, bytes);
    if (!p) {
        snprintf(ctx->msg, sizeof ctx->msg, "out of memory for a %zu-byte top-k message", bytes);
        return -1;
    }
    c->packed = p;
    c->packed_bytes = bytes;
    return 0;
}
