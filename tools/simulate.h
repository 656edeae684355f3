/* simulate.h: a discrete-event simulation of training steps of a placed
 * graph (`fusionc simulate`, tools/simulate.c).
 *
 * Every device of the placement runs its stage's ops in the runtime's
 * order (runtime/main.c: 1F1B over M micro-batches, then the update), each
 * op for the workload estimator's time on that device (estimate.c).  The
 * send/recv pairs of the comm and compress passes are messages on the
 * link between the two devices (cluster_link_between): latency +
 * bytes / bandwidth, one message at a time per direction in the order sent
 * (the runtime's hub keeps one outbox per link; links are full duplex).  A top-k pair (`density`) sends its encoded size and costs its
 * ends the codec's time; the replicas' all-reduces (a bucket at the start
 * of the update) cost a ring over the stage's slowest link.
 *
 * What it is not: the cost model the fence pass searches with
 * (fence_cost.c, stage-level and FIFO links); this one follows the ops
 * and the actual messages, to check that model and to draw the timeline.
 */
#ifndef FUSION_SIMULATE_H
#define FUSION_SIMULATE_H

#include <stdint.h>

#include "../frontend/cluster.h"
#include "../ir/ir.h"

/* The top-k codec's measured speed: bytes of fp32 input per second. */
#define SIM_CODEC_BYTES_PER_SECOND 5e9

typedef enum { SIM_FORWARD, SIM_BACKWARD, SIM_UPDATE, SIM_ALLREDUCE, SIM_KIND_COUNT } sim_kind;

/* A span of one device's time: compute of one action (contiguous ops). */
typedef struct {
    int32_t worker; /* index into sim_result.device                       */
    sim_kind kind;
    int32_t micro_batch; /* -1 for update and all-reduce                       */
    int32_t step;
    double start, end; /* seconds                                             */
} sim_box;

/* One message on a link's direction. */
typedef struct {
    int32_t link; /* index into sim_result.links                         */
    int32_t micro_batch, step;
    ir_phase phase;
    double bytes, start, end; /* end: its last byte left (arrival: + latency)   */
} sim_transfer;

/* A link's direction and what crossed it in one step, by phase. */
typedef struct {
    int32_t from, to; /* cluster devices                                     */
    double bandwidth, latency;
    double bytes[PHASE_COUNT]; /* [PHASE_FORWARD], [PHASE_BACKWARD], [PHASE_UPDATE] */
} sim_link;

typedef struct {
    int32_t n_workers; /* stages x replicas                                   */
    int32_t *device;   /* [n_workers] cluster device                          */
    int32_t *stage;    /* [n_workers]                                         */
    double *busy;      /* [n_workers] compute and codec seconds, every step   */
    int32_t n_steps;
    double *step_end; /* [n_steps] when the last device ends step k          */
    double bubble;    /* idle / (workers x all the steps' span)              */
    sim_box *boxes;
    int32_t n_boxes, cap_boxes;
    sim_transfer *transfers;
    int32_t n_transfers, cap_transfers;
    sim_link *links;
    int32_t n_links;
} sim_result;

/* Simulate `steps` consecutive steps of g (placed: after every pass) on c.
 * 0, or -1 with err filled (out of memory, a message never sent). */
int simulate_steps(const ir_graph *g, const cluster *c, int32_t steps, int overlap, sim_result *r, struct diag *err);
void sim_result_free(sim_result *r);
/* The steady state: the last simulated step's seconds (step 1 also holds
 * the pipeline's start).  0 when nothing was simulated. */
double sim_steady_step(const sim_result *r);

/* DIR/gantt.svg: a row per device, a row per link direction, time in ms;
 * written under a temporary name and renamed. */
int simulate_write_gantt(const sim_result *r, const cluster *c, const char *dir, struct diag *err);

/* FILE: the steps as a Chrome trace-event timeline, in the format the
 * device programs' --trace writes (tools/simulate_trace.c). */
int simulate_write_trace(const sim_result *r, const cluster *c, const char *path, struct diag *err);

#endif
