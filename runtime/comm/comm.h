/* comm.h: a device program's peers, and the ops that talk to them.
 *
 * A device runs replica `replica` of stage `stage` (runtime/program.h).
 * Its send and recv ops name the other end by stage; the other end is the
 * same replica of that stage (each replica lane is its own pipeline).  Its
 * allreduce ops average a gradient over the replicas of its stage with a
 * ring (reduce-scatter, then all-gather: every replica ends with the same
 * bits).  Messages are tagged (kind, step, micro-batch, tensor id) and
 * travel through the hub (comm/hub.h): sends return at once, receives wait
 * for their exact message, a dead peer is reported by timeout.
 *
 * What it deliberately is not: a scheduler.  Ops run in the order the
 * compiler emitted them; the 1F1B order is runtime/main.c's.
 */
#ifndef FUSION_RT_COMM_H
#define FUSION_RT_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "../exec.h"
#include "../program.h"
#include "topk.h"

#define RT_COMM_MAX_OVERRIDES 64

typedef struct {
    int         emulate_links;        /* shape each link to the cluster file's bandwidth and latency */
    int         timeout_ms;           /* a peer silent this long is dead (default 10000)               */
    int         connect_timeout_ms;   /* every peer must be up within this (default 60000)             */
    int32_t     port_base;            /* 0: the manifest's                                             */
    const char *peer_name[RT_COMM_MAX_OVERRIDES];  /* --peer NAME=ADDRESS: a device moved or replaced */
    const char *peer_address[RT_COMM_MAX_OVERRIDES];
    int         n_overrides;
} rt_comm_options;

typedef struct rt_comm {
    struct fu_hub  *hub;
    const rt_manifest *manifest;
    const int32_t  *placement;        /* [n_stages * n_replicas] device indices */
    const rt_peer  *peers;
    float          *scratch;          /* allreduce: what arrives from the ring  */
    size_t          scratch_floats;
    /* All-reduces wait in a bucket and go as one ring all-reduce when an op
     * of another kind runs (or rt_comm_flush_bucket): one message a ring
     * step for all of a stage's gradients, not one per tensor. */
    float         **bucket_data;      /* [bucket_cap] each tensor's output     */
    int64_t        *bucket_floats;
    int32_t         bucket_count, bucket_cap, bucket_tag;
    float          *bucket_buf;       /* the tensors end to end                */
    size_t          bucket_buf_floats;
    /* Top-k sends and receives (ops with a density): the encoded bytes. */
    void           *packed;
    size_t          packed_bytes;
    topk_scratch   *topk;
} rt_comm;

/* Connect to every peer this device has a link with (runtime/program.h's
 * links) and check they run the same compile.  0, or -1 with err set. */
int  rt_comm_open(rt_comm *c, const rt_manifest *m, const int32_t *placement, const rt_peer *peers,
                  const rt_link *links, const rt_comm_options *o, char *err, size_t n);
void rt_comm_close(rt_comm *c);
/* Tell every peer this device stops, and why (they stop too, naming it). */
void rt_comm_abort(rt_comm *c, const char *why);
/* Wait until every send was acknowledged. */
int  rt_comm_flush(rt_comm *c, char *err, size_t n);

/* The ops (rt_op_run calls these; errors in ctx->msg). */
int rt_comm_send(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx);
int rt_comm_recv(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx);
int rt_comm_allreduce(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx);

/* Run the bucketed all-reduces (rt_op_run calls it before any other op). */
int rt_comm_flush_bucket(rt_comm *c, rt_context *ctx);

/* x[0..n) := its mean over the replicas of this device's stage (the loss a
 * data-parallel step reports).  tag: a tensor id no op uses. */
int rt_comm_mean_over_replicas(rt_comm *c, float *x, int64_t n, int32_t tag, rt_context *ctx);

#endif
