/* comm.h: a device program's peers, and the ops that talk to them.
 *
 * A device runs replica `replica` of stage `stage` (runtime/program.h).
 * Its send and recv ops name the other end by stage; the other end is the
 * same replica of that stage (each replica lane is its own pipeline).  Its
 * allreduce ops average a gradient over the replicas of its stage with a
 * ring (reduce-scatter, then all-gather: every replica ends with the same
 * bits), or when the op's `groups` says so hierarchically: a ring inside
 * each region's run of replicas, a ring among their leaders, the result
 * sent back by each leader (allreduce_wire.h; the same bits on
 * every replica too).  Messages are tagged (kind, step, micro-batch, tensor id) and
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
#include "feedback.h"
#include "hub.h"
#include "quant_allreduce.h"
#include "topk.h"

#define RT_COMM_MAX_OVERRIDES 64

typedef struct {
    int emulate_links;                            /* shape each link to the cluster file's bandwidth and latency */
    int adapt_density;                            /* AdaTopK: re-measure each compressed link between steps   */
    int timeout_ms;                               /* a peer silent this long is dead (default 10000)               */
    int connect_timeout_ms;                       /* every peer must be up within this (default 60000)             */
    int32_t port_base;                            /* 0: the manifest's                                             */
    int64_t epoch;                                /* --epoch: the run's (fusionc broker); peers must agree         */
    const char *peer_name[RT_COMM_MAX_OVERRIDES]; /* --peer NAME=ADDRESS: a device moved or replaced */
    const char *peer_address[RT_COMM_MAX_OVERRIDES];
    int n_overrides;
    const uint8_t *secret; /* the run secret: every link sealed (seal.h); NULL: plain      */
} rt_comm_options;

/* AdaTopK, one compressed send op (a density > 0) of this device: the
 * density its messages use this step, and what it needs to adapt it.
 * The message carries its k, so the receiver needs none of this. */
typedef struct {
    int32_t tensor, peer; /* the op's message id; the receiving device                   */
    int64_t n;            /* elements of the dense tensor                                */
    double density;       /* this step's: the compiled one, then rt_comm_adapt_density's */
    double target;        /* seconds a message should take: the compiled density's bytes
                                         on the compiled link (T* under adatopk); 0 = unknown        */
    float *residual;      /* (n,) error feedback (feedback=1), zeroed at the start; else NULL */
    uint64_t step_bytes;  /* this step's encoded bytes ...                               */
    int32_t step_sends;   /* ... in this many messages                                   */
} rt_topk_send;

/* A parameter's partial gradient summed over a step's micro-batches before
 * it is sent (accumulate=1). */
typedef struct {
    int32_t tensor;
    int64_t n;
    float *sum; /* (n,) */
} rt_accumulator;

/* What a bucket does over the stage's replicas (its ops: allreduce with
 * its `shard` and `sum`, or allgather; runtime/shard.h's pieces):
 *   MEAN     each tensor := its mean (the ring, the hierarchy or the
 *            quantised exchange);
 *   SCATTER  the ring's reduce-scatter alone: the mean of this replica's
 *            piece of each tensor (the rest is left partial);
 *   SUM      each tensor := its sum (a sharded run's partial norm squares);
 *   GATHER   the ring's all-gather alone: each tensor's pieces from the
 *            replicas that own them, this replica's sent to the others. */
enum { RT_BUCKET_MEAN, RT_BUCKET_SCATTER, RT_BUCKET_SUM, RT_BUCKET_GATHER };

/* Whether a bucket of this mode, `groups` and `bits` over R replicas
 * travels piece by piece (the ring's: chunk q = piece q of each tensor in
 * turn, shard.h) rather than its tensors end to end. */
int rt_bucket_in_pieces(int mode, int64_t groups, int bits, int32_t R);
/* A bucket's count tensors (member[i]: sizes[i] floats) into buf (to_buf)
 * or back, end to end or piece by piece (pieces). */
void rt_bucket_lay_out(float *buf, float *const *member, const int64_t *sizes, int32_t count, int32_t R, int pieces,
                       int to_buf);

typedef struct rt_comm {
    struct fu_hub *hub;
    const rt_manifest *manifest;
    const int32_t *placement; /* [n_stages * n_replicas] device indices */
    const rt_peer *peers;
    const rt_link *links; /* [manifest->n_links]: every link of the program (tree.c) */
    float *scratch;       /* allreduce: what arrives from the ring  */
    size_t scratch_floats;
    float *widened; /* a 16-bit tensor in f32, for the codecs */
    size_t widened_floats;
    /* All-reduces wait in a bucket and go as one ring all-reduce when an op
     * of another kind runs (or rt_comm_flush_bucket): one message a ring
     * step for all of a stage's gradients, not one per tensor. */
    float **bucket_data; /* [bucket_cap] each tensor's output     */
    int64_t *bucket_floats;
    int32_t bucket_count, bucket_cap, bucket_tag;
    int64_t bucket_groups;        /* its ops' `groups`: 0 the ring, else the hierarchy */
    int bucket_bits;              /* its ops' `bits`: 0 dense, else the quantised exchange */
    int bucket_mode;              /* RT_BUCKET_MEAN, _SCATTER, _SUM or _GATHER: its ops' kind */
    rt_quant_feedback *update_fb; /* [n_update_fb] that exchange's feedback, a bucket each */
    int32_t *update_fb_tag;       /* [n_update_fb] the bucket's message id */
    int32_t n_update_fb;
    float *bucket_buf; /* the tensors end to end                */
    size_t bucket_buf_floats;
    /* Top-k sends and receives (ops with a density): the encoded bytes. */
    void *packed;
    size_t packed_bytes;
    topk_scratch *topk;
    /* AdaTopK between steps (rt_comm_adapt_density). */
    rt_topk_send *sends; /* [n_sends] by first use                */
    int32_t n_sends, sends_cap;
    int adapt;                   /* rt_comm_options.adapt_density         */
    double *link_bandwidth;      /* [n_peers] bytes/s compiled, 0 no link */
    double *link_latency;        /* [n_peers] seconds compiled            */
    int shaped;                  /* rt_comm_options.emulate_links         */
    fu_hub_link_stats *adapted;  /* [n_peers] fu_hub_stats at the last adaptation */
    fu_hub_link_stats *logged;   /* ... at the last log line (rt_comm_links_json) */
    fu_hub_link_stats *reported; /* ... at the last broker report (rt_comm_links_report) */
    double recv_wait;            /* seconds blocked in receives since the last adaptation */
    rt_accumulator *accs;        /* [n_accs] by first use                 */
    int32_t n_accs, accs_cap;
    int overlap;                 /* 1: the allreduce ops with a bucket are reduced by
                                         comm/overlap.h; their op only copies          */
    rt_feedback_arrays restored; /* feedback read from a checkpoint, taken by each
                                         feedback state when it is made (feedback.h)   */
} rt_comm;

/* The device of replica lane `replica` of stage `stage`. */
int32_t rt_comm_device_at(const rt_comm *c, int32_t stage, int32_t replica);

/* Connect to every peer this device has a link with (runtime/program.h's
 * links) and check they run the same compile.  0, or -1 with err set. */
int rt_comm_open(rt_comm *c, const rt_manifest *m, const int32_t *placement, const rt_peer *peers, const rt_link *links,
                 const rt_comm_options *o, char *err, size_t n);
void rt_comm_close(rt_comm *c);

/* The error feedback this device keeps (feedback.h), listed into l: its
 * compressed sends' residuals and, without the overlap, its quantised
 * all-reduces' (overlap.h lists the overlap's).  0, or -1 out of memory. */
int rt_comm_list_feedback(const rt_comm *c, rt_feedback_arrays *l);
/* The feedback a checkpoint of this compile held (l, which c now owns):
 * each array goes into its state when that is made, at its first use. */
void rt_comm_restore_feedback(rt_comm *c, rt_feedback_arrays *l);
/* Tell every peer this device stops, and why (they stop too, naming it). */
void rt_comm_abort(rt_comm *c, const char *why);
/* Wait until every send was acknowledged. */
int rt_comm_flush(rt_comm *c, char *err, size_t n);

/* The ops (rt_op_run calls these; errors in ctx->msg). */
int rt_comm_send(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx);
int rt_comm_recv(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx);
/* Whether this micro-batch's run of a send or recv moves a message: a
 * parameter (`once`) moves in micro-batch 0 only, a partial gradient
 * (`accumulate`) with the last (--trace draws only those). */
int rt_comm_moves(const rt_comm *c, const rt_op *op, const rt_context *ctx);
int rt_comm_allreduce(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx);
/* The allgather op: its parameter joins the bucket of pieces to gather. */
int rt_comm_gather_pieces(rt_comm *c, const rt_op *op, char *arena, rt_context *ctx);
/* The bucket mode of an allreduce or allgather op. */
int rt_comm_bucket_mode(const rt_op *op);

/* x[n], the bucket's `count` tensors of sizes[] laid out as
 * rt_bucket_in_pieces says (rt_bucket_lay_out), := what its
 * mode makes of them over the stage's replicas (MEAN or SCATTER), as an
 * allreduce op with message id `tensor`, `groups` and `bits` makes it (fb:
 * the bucket's feedback when bits is not 0, quant_allreduce.h), with the
 * caller's scratch (*scratch, *scratch_floats: grown as needed;
 * comm/overlap.h's thread reduces while the main thread talks).  0, or -1
 * with ctx->msg set. */
int rt_comm_mean_bucket(rt_comm *c, float **scratch, size_t *scratch_floats, float *x, const int64_t *sizes,
                        int32_t count, int32_t tensor, int64_t groups, int bits, int mode, rt_quant_feedback *fb,
                        rt_context *ctx);

/* Run the bucketed all-reduces (rt_op_run calls it before any other op). */
int rt_comm_flush_bucket(rt_comm *c, rt_context *ctx);

/* AdaTopK, between steps (after a step's update, before the next step's
 * first send; step_seconds: the step's wall time): for each compressed
 * send, the link's throughput since the last call (fu_hub_stats: bytes
 * acked / busy seconds) gives the time its messages took; the density
 * moves toward the one that makes them take the target:
 *     rho' = clamp(rho * target / measured, RT_DENSITY_MIN, 1),
 * smoothed (rho := sqrt(rho * rho'), a half step in log space).  The
 * target is the compiled one (the compiled density's bytes on the compiled
 * link: T* under adatopk), or this stage's measured compute per
 * micro-batch (step_seconds less the time blocked in receives, over the
 * micro-batches) when that is longer: T* is the largest stage's compute,
 * so never less than this stage's, and the compiled estimate can be far
 * below what the devices really take.  Does nothing unless adapt_density
 * was set.  Never fails: a link that sent nothing keeps its density. */
#define RT_DENSITY_MIN 1e-3 /* the compress pass's minimum */
void rt_comm_adapt_density(rt_comm *c, double step_seconds);
/* "  rho 0.0520" for each compressed send of this device (tensor order of
 * first use) into buf, or with json ', "rho": [0.0520, ...]' for the
 * JSONL log; "" when none. */
/* The step log's links: `, "links": {"cpu-b0": {"bytes": 786432, "busy_ms": 12.5}, ...}`,
 * per peer this device sends to, the payload bytes acked and the seconds its
 * link was busy sending since the last call (fu_hub_stats; shaped time under
 * --emulate-links).  Nothing when there is no peer. */
void rt_comm_links_json(rt_comm *c, char *buf, size_t n);
/* The broker's "links" report (broker_client.h), per peer this device
 * sent to since the last call:
 *     PEER BYTES BUSY PLANNED MEASURED DECLARED
 * BUSY: the seconds its link was busy sending them (fu_hub_stats);
 * PLANNED: the seconds the compiled link takes for them, counted as BUSY
 * is (bytes / bandwidth, plus a round trip of its latency a message
 * when unshaped: there a message is busy from its post to its ack);
 * DECLARED: the compiled bandwidth (bytes/s); MEASURED: the bandwidth the
 * traffic shows, bytes / (BUSY less those round trips), 0 when the round
 * trips are half of BUSY or more (latency-bound: no bandwidth to read).
 * Entries separated by spaces; "" when this device sent nothing. */
void rt_comm_links_report(rt_comm *c, char *buf, size_t n);
/* --inject-link-mbps: every shaped link of this device with `device` at
 * either end (this device's name: all of them) carries bandwidth bytes/s
 * from now on.  The number of links changed. */
int rt_comm_set_link_bandwidth(rt_comm *c, const char *device, double bandwidth);
void rt_comm_density_text(const rt_comm *c, char *buf, size_t n, int json);

/* Every device of the program ends with every device's record (tree.c):
 * mine is this device's rec_bytes, all[d * rec_bytes ...] device d's for
 * every device index d < manifest->n_peers, present[d] 1 where device d
 * took part (a device of another program's site: 0).  The records travel
 * up a spanning tree of the links to its root and the whole table back
 * down: 2 (depth) messages, so it is also a barrier: when it returns, every
 * device has called it.  tag: which exchange (a step's checkpoint, the
 * resume's choice); both ends of every link must call it with the same
 * step and tag.  0, or -1 with err set (a peer lost or stopped: named). */
int rt_comm_allgather(rt_comm *c, int64_t step, int32_t tag, const void *mine, size_t rec_bytes, void *all,
                      uint8_t *present, char *err, size_t n);
/* The tree's root: the device whose line an exchange's summary is printed on. */
int rt_comm_tree_root(const rt_comm *c);

/* x[0..n) := its mean over the replicas of this device's stage (the loss a
 * data-parallel step reports).  tag: a tensor id no op uses. */
int rt_comm_mean_over_replicas(rt_comm *c, float *x, int64_t n, int32_t tag, rt_context *ctx);

#endif
