/* comm.c: a device program's peers and its send, recv and allreduce ops
 * (see comm.h). */
#include "comm.h"

#include <math.h>
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
static int bucket_add(rt_comm *c, const rt_op *op, float *y, int64_t n, rt_context *ctx);

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
    c->link_bandwidth = calloc((size_t)m->n_peers + 1, sizeof *c->link_bandwidth);
    c->mark_bytes = calloc((size_t)m->n_peers + 1, sizeof *c->mark_bytes);
    c->mark_busy = calloc((size_t)m->n_peers + 1, sizeof *c->mark_busy);
    c->logged_bytes = calloc((size_t)m->n_peers + 1, sizeof *c->logged_bytes);
    c->logged_busy = calloc((size_t)m->n_peers + 1, sizeof *c->logged_busy);
    fu_hub_link_spec *specs = calloc((size_t)m->n_links + 1, sizeof *specs);
    if (!specs || !c->link_bandwidth || !c->mark_bytes || !c->mark_busy || !c->logged_bytes || !c->logged_busy) {
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
        fu_hub_link_spec *s = &specs[count++];
        s->peer = other;
        snprintf(s->name, sizeof s->name, "%s", peers[other].name);
        snprintf(s->address, sizeof s->address, "%.199s", peer_address(o, &peers[other]));
        s->listen = l->a == self;
        /* The lower-numbered device listens on every interface; the other
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
    free(c->mark_bytes);
    free(c->mark_busy);
    free(c->logged_bytes);
    free(c->logged_busy);
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

/* The device of replica lane r's stage s. */
static int32_t device_at(const rt_comm *c, int32_t stage, int32_t replica)
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
    int32_t to = device_at(c, (int32_t)op->ints[ATTR_PEER], c->manifest->replica);
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
    int32_t from = device_at(c, (int32_t)op->ints[ATTR_PEER], c->manifest->replica);
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
        uint64_t bytes;
        double busy;
        if (!used || fu_hub_stats(c->hub, p, &bytes, &busy) != 0)
            continue;
        double d_bytes = (double)(bytes - c->mark_bytes[p]), d_busy = busy - c->mark_busy[p];
        if (!(d_bytes > 0 && d_busy > 0))
            continue; /* nothing acked since: keep the densities, measure again next step */
        c->mark_bytes[p] = bytes;
        c->mark_busy[p] = busy;
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

void rt_comm_links_json(rt_comm *c, char *buf, size_t n)
{
    size_t at = 0;
    if (n)
        buf[0] = '\0';
    for (int32_t p = 0; c && c->hub && p < c->manifest->n_peers && at < n; p++) {
        uint64_t bytes;
        double busy;
        if (fu_hub_stats(c->hub, p, &bytes, &busy) != 0 || (bytes == 0 && c->link_bandwidth[p] <= 0))
            continue; /* no link to it */
        int w = snprintf(buf + at, n - at, "%s\"%s\": {\"bytes\": %llu, \"busy_ms\": %.3f}",
                         at ? ", " : ", \"links\": {", c->peers[p].name,
                         (unsigned long long)(bytes - c->logged_bytes[p]), (busy - c->logged_busy[p]) * 1e3);
        if (w < 0 || (size_t)w >= n - at) {
            buf[at] = '\0';
            break;
        }
        at += (size_t)w;
        c->logged_bytes[p] = bytes;
        c->logged_busy[p] = busy;
    }
    if (at > 0 && at + 1 < n)
        snprintf(buf + at, n - at, "}");
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
    int32_t next = device_at(c, m->stage, ring_replica(rg, (rg->me + 1) % rg->n));
    int32_t prev = device_at(c, m->stage, ring_replica(rg, (rg->me + rg->n - 1) % rg->n));
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
        if (fu_hub_recv(c->hub, device_at(c, m->stage, lead), &result, x, result.length, why, sizeof why) != 0)
            goto fail;
        return 0;
    }
    if (ring_allreduce(c, &leaders, x, n, tensor, 2 * R, R, ctx))
        return -1;
    for (int32_t i = 0; i < group.n; i++)
        if (in_group[i] != r &&
            fu_hub_send(c->hub, device_at(c, m->stage, in_group[i]), &result, x, why, sizeof why) != 0)
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
        devices[q] = device_at(c, m->stage, q);
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
