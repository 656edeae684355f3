/* passes.h: the compiler's fixed, named pass pipeline.
 *
 * Passes are data: pass_pipeline[] lists them in the order they run.  After
 * each one the verifier runs; a failure names the pass and the node (with
 * its XML file:line).  "frontend" is not a pass but names the graph as the
 * frontend built it, so `--after frontend` shows the IR before any pass.
 *
 * Today's pipeline:  shapes, adapters, precision, decode, autodiff, optimizer, estimate, fence, comm,
 * compress, schedule, memory.  The passes that place the graph on a cluster
 * (estimate, fence, comm, compress, schedule) read the cluster and the
 * scheduler's choices from pass_options; without a cluster they place
 * everything on one default CPU device.  The IR describes one micro-batch:
 * the device program runs its stage's forward and backward per micro-batch
 * in 1F1B order (runtime/main.c), from the placement the fence pass records
 * and the warm-up depth per stage the schedule pass adds to it.
 */
#ifndef FUSION_PASSES_H
#define FUSION_PASSES_H

#include <stdio.h>

#include "../frontend/cluster.h"
#include "../ir/ir.h"

/* --lora rank=R,alpha=A,targets=T1,T2,... (the adapters pass): LoRA
 * adapters on every linear whose weight's name, less ".weight", ends with
 * a target (PEFT's target_modules). */
#define LORA_MAX_TARGETS 32
typedef struct {
    int32_t rank;                          /* R >= 1 (0: no LoRA)            */
    double alpha;                          /* the update is scaled by alpha/R */
    double dropout;                        /* on the adapter's input, in [0, 1)  */
    const char *targets[LORA_MAX_TARGETS]; /* pointing into the option's text */
    int32_t n_targets;
} lora_spec;

/* The plan the fence pass chooses (see fence.c): S pipeline stages, each
 * replicated on R devices, over M micro-batches; which forward node runs
 * on which stage; and what the cost model expects of it.  Made on one
 * graph, it can be applied to another built from the same model at another
 * batch size (same nodes, other shapes): fusionc does that when the plan
 * has replicas, since each replica's micro-batch is then smaller. */
typedef struct {
    int32_t n_stages, n_replicas, micro_batches;
    int32_t *devices;       /* [n_stages * n_replicas]: cluster device of (stage, replica) */
    int32_t *stage_of_node; /* [n_nodes]: forward nodes' stages (others: -1)               */
    int32_t n_nodes;
    const char *scheduler; /* "opfence", "uniform", "megatron", "megatron-paper", "gcma" or "random" */
    /* The cost model's figures (seconds; per micro-batch unless said). */
    double *stage_compute;    /* [n_stages] forward + backward on the stage's slowest replica */
    double *stage_update;     /* [n_stages] the optimizer, once a step                       */
    double *cut_transfer;     /* [n_stages]: to the next stage, both directions (last: 0)    */
    double *cut_bytes;        /* [n_stages]: bytes sent forward at that cut per micro-batch  */
    double *allreduce;        /* [n_stages]: the replicas' gradient all-reduce, once a step  */
    uint8_t *recompute;       /* [n_stages]: 1 where the model expects the stage to recompute
                                 (the schedule pass decides by the arena, which may differ) */
    double step_seconds;      /* the estimated step                                          */
    double bottleneck;        /* the largest per-micro-batch stage or link time              */
    int32_t bottleneck_stage; /* its stage (a cut's: the stage before it)                    */
    int bottleneck_is_link;
    int32_t n_fences;
    int32_t *fence_of_device; /* [n_devices of the cluster]                                  */
} fence_plan;

void fence_plan_free(fence_plan *p);

typedef struct {
    const char *dump_after;                    /* NULL, "frontend" or a pass name            */
    FILE *dump_out;                            /* where to print the IR after that pass      */
    const struct ir_view_options_s *dump_view; /* not NULL: print a picture (ir/view.h) instead of the text form */
    int dump_html;                             /* with dump_view: 1 = the HTML page, 0 = Graphviz */
    int stop_after;                            /* stop the pipeline after dump_after         */
    const char *last_pass;                     /* NULL, or run no pass after this one        */
    /* Placement (estimate, fence, comm). */
    const cluster *cluster; /* NULL: one default CPU device               */
    const char
        *scheduler;    /* "opfence" (NULL: the default), "uniform", "megatron", "megatron-paper", "gcma", "random" */
    int micro_batches; /* M >= 1 (0: 1)                              */
    int max_replicas;  /* 0: any; 1: no data parallelism (a model without a `batch`) */
    int stages;        /* > 0: opfence considers only this many stages   */
    int replicas;      /* > 0: ... and this many replicas per stage      */
    const fence_plan *plan; /* apply this plan rather than search         */
    fence_plan *plan_out;   /* when not NULL, the fence pass's plan is copied here */
    const char *compress;   /* none, topk:RHO or adatopk (NULL: adatopk on several regions, else none) */
    uint64_t seed;          /* --scheduler random's draw (0: 1)           */
    const char *recompute;  /* "auto" (NULL: the schedule pass decides), "on" or "off" */
    ir_dtype precision;     /* what activations and their gradients are stored in (0: f32) */
    int tf32;               /* 1: f32 products may run on TF32 tensor cores           */
    /* Which parameters train (the adapters pass). */
    const char *const *freeze; /* --freeze globs on parameter names                  */
    int n_freeze;
    const lora_spec *lora; /* --lora: NULL or rank 0 for none                   */
    ir_dtype frozen_dtype; /* the frozen parameters' storage (0: f32; the precision pass) */
    int shard_optimizer;   /* 1: --shard-optimizer: a stage's replicas split the AdamW moments
                              (ZeRO-1, runtime/shard.h; the comm pass)            */
    int inference;         /* 1: an inference step (the decode pass): no training */
    double memory_reserve; /* bytes the fence pass's cost model takes off every device's memory:
                              what tools/placed.c found its estimate short by (fence_cost.h) */
    int64_t prefill;       /* > 0: with inference, a copy of the step for P prompt tokens (the prefill pass) */
} pass_options;

/* A pass reads the options it needs (most read none). */
typedef int (*pass_fn)(ir_graph *g, const pass_options *opt, struct diag *err);

typedef struct {
    const char *name;
    const char *doc; /* one line, for --help */
    pass_fn run;
} pass;

extern const pass pass_pipeline[];
extern const int pass_count;

/* Is `name` "frontend" or a pass?  (For option checking before any work.) */
int pass_name_known(const char *name);
/* "frontend, shapes, ..." for messages. */
const char *pass_names(void);

int pass_run_pipeline(ir_graph *g, const pass_options *opt, struct diag *err);

/* ---- the passes ---- */
int pass_shapes(ir_graph *g, struct diag *err);
/* The running_stats pass (running_stats.c): every batchnorm's running mean and variance, as state. */
int pass_running_stats(ir_graph *g, const pass_options *opt, struct diag *err);
int pass_adapters(ir_graph *g, const pass_options *opt, struct diag *err);
int pass_precision(ir_graph *g, const pass_options *opt, struct diag *err);
/* The decode pass (decode.c): with opt->inference, the graph as an inference step against a key/value cache. */
int pass_decode(ir_graph *g, const pass_options *opt, struct diag *err);
/* The prefill pass (prefill.c): with opt->prefill = P, the decode step again for P tokens a sequence. */
int pass_prefill(ir_graph *g, const pass_options *opt, struct diag *err);
int pass_autodiff(ir_graph *g, struct diag *err);
int pass_optimizer(ir_graph *g, struct diag *err);
/* The stage whose optimizer op updates the parameter named name (0 when
 * unplaced), or -1: none does.  A parameter read on several stages (a tied
 * embedding) lives where it is updated. */
int32_t optimizer_update_stage(const ir_graph *g, const char *name);
int pass_memory(ir_graph *g, struct diag *err);
int pass_estimate(ir_graph *g, const pass_options *opt, struct diag *err);
int pass_fence(ir_graph *g, const pass_options *opt, struct diag *err);
int pass_comm(ir_graph *g, const pass_options *opt, struct diag *err);
/* A parameter that crosses to another stage once a step may cross in the
 * graph's 16-bit precision (the comm pass's bits ATTR_BITS_HALF on its
 * send and recv): when the graph stores f16 or bf16, the parameter is f32,
 * and every op that reads it on the receiving stage is a matrix product
 * (or its backward) with a 16-bit operand, on CUDA devices.  Those round
 * an f32 weight to the precision as they read it (runtime/exec.c), so the
 * rounded copy is what they would use: half the bytes on the wire, not a
 * bit of the result changed (GPT-2's tied embedding, read by the output
 * projection on the last stage: 412 MB of GPT-3 XL's in 206).  CPU devices
 * read f32 weights as they are, so they get them whole. */
int comm_param_may_cross_half(const ir_graph *g, int32_t v);
int comm_reader_rounds_weight(const ir_graph *g, int32_t node);
/* The cast at one end (f32 read, 16 bits written, or back): 6 bytes an
 * element at the codecs' speed; the 16 bits are used only where the bytes
 * they save on a link of bw bytes/s take longer than the casts at both
 * ends (a data centre's fast links keep the f32). */
double comm_half_cast_seconds(double elements);
int comm_half_pays(double elements, double bw);
int pass_compress(ir_graph *g, const pass_options *opt, struct diag *err);
int pass_schedule(ir_graph *g, const pass_options *opt, struct diag *err);
/* The schedule pass's rule (schedule.c): warm[s] for S stages over M
 * micro-batches, from each stage's forward + backward seconds per
 * micro-batch and each cut's round trip (round_trip[c], c < S - 1: twice
 * latency + transfer between stages c and c + 1), at most most[s] (NULL:
 * M; schedule_most_kept) but never below plain 1F1B's S - s - 1.  The
 * fence pass's cost model uses it too, so a plan is priced in the order it
 * will run in. */
void schedule_warmup(int32_t S, int32_t M, const double *stage_seconds, const double *round_trip, const double *most,
                     int32_t *warm);
/* A stage's memory for micro-batches waiting for their backward, bytes:
 * room, what its devices have beside everything it holds with one
 * micro-batch running (parameters, gradients, optimizer moments, the
 * arena); kept, what a waiting micro-batch keeps whole (what its backward
 * reads); inputs, what one that will replay keeps (what its forward
 * received).  room INFINITY: no limit. */
typedef struct {
    double room, kept, inputs;
} schedule_memory;
/* The most warm-up forwards memory holds keeping them whole, w kept <=
 * room; replaying them all, (w + 1) inputs <= room (NULL: INFINITY). */
double schedule_most_kept(const schedule_memory *m);
double schedule_most_replayed(const schedule_memory *m);
/* Of n micro-batches in flight on a stage that recomputes, how many fit
 * whole beside the others' inputs: K kept + (n - K) inputs <= room, 0 <=
 * K < n (NULL: n - 1). */
int32_t schedule_keep_whole(const schedule_memory *m, int32_t n);
/* The schedule pass's whole choice (schedule.c), for the pass and the
 * fence pass's cost model alike: each stage's warm-up, whether it
 * recomputes its forward and how many waiting micro-batches it then keeps
 * whole.  Per stage s: stage_seconds (forward + backward) and
 * forward_seconds (what a replay costs) per micro-batch; per cut c < S -
 * 1: round_trip[c] and transfer[c] (its busier direction's seconds a
 * micro-batch); memory[s] (NULL: no limit).  mode: SCHEDULE_RECOMPUTE_AUTO,
 * _OFF, _ON (every stage that stashes, replaying all) or _KEEP + K (every
 * stage that stashes, keeping at most K whole).  *stage_out (when not
 * NULL): each stage's seconds a micro-batch with its replays.  0, or -1
 * when out of memory. */
enum {
    SCHEDULE_RECOMPUTE_OFF = 0,
    SCHEDULE_RECOMPUTE_ON = 1,
    SCHEDULE_RECOMPUTE_AUTO = 2,
    SCHEDULE_RECOMPUTE_KEEP = 3
};
int schedule_recompute_mode(const char *spec); /* -1: not auto, on, off or keep:K (K >= 1) */
int schedule_plan(int32_t S, int32_t M, const double *stage_seconds, const double *forward_seconds,
                  const double *round_trip, const double *transfer, const schedule_memory *memory, int mode,
                  int32_t *warm, uint8_t *recompute, int32_t *keep, double *stage_out);
/* The bytes a send puts on the wire: the tensor, its top-k encoding
 * (density, runtime/comm/topk.h) or its rows of bits (runtime/comm/quant.h). */
double compress_wire_bytes(const ir_graph *g, const ir_node *send);

/* ---- compression's arithmetic (compress_rule.c) ----
 * What the compress pass decides for a tensor over a slow link, and what
 * that costs, for the pass itself and for the fence pass's cost model,
 * which asks before the graph is placed.  Bytes, bytes/s, seconds. */
/* The top-k codec's measured speed, bytes of fp32 input per second at
 * each end (docs/results.md: bench_topk, 5.5 GB/s compress + decompress at 1%). */
#define COMPRESS_CODEC_BYTES_PER_SECOND 5e9
/* --compress: *fixed = 0 none, -1 adatopk, RHO for topk:RHO; -1 when
 * malformed.  NULL: adatopk on a cluster of several regions, else none. */
int compress_parse(const char *spec, const cluster *c, double *fixed);
/* Top-k density for a tensor of `elements` stored in `bytes` over
 * bandwidth bw within `budget` seconds (AdaTopK; fixed > 0: topk:RHO); 0:
 * send it dense (fast enough, or the encoding would be no smaller). */
double compress_density(double elements, double bytes, double bw, double budget, double fixed);
/* Row quantisation bits (8, or 4 when 8 still take longer than t_star). */
int compress_bits(double elements, double bw, double t_star);
/* Bytes on the wire for `elements` in rows of `cols`: top-k at `density`
 * or rows of `bits` (both 0: dense fp32; the codecs encode fp32 values
 * whatever the tensor is stored in). */
double compress_encoded_bytes(double elements, double cols, double density, int bits);
/* The codec's seconds at one end for a tensor of `elements` fp32. */
double compress_codec_seconds(double elements);
/* A tensor's time budget: T*, or for a parameter's partial gradient
 * that crosses grad_hops stages back to its home (> 0), the pipeline's
 * drain between them, grad_hops T* (at most M T*). */
double compress_budget(double t_star, int micro_batches, int grad_hops);
/* Whether sending `wire` bytes instead of `bytes` over bw, at the codec's
 * seconds on the stage, makes a micro-batch faster than `budget` allows
 * (once: a gradient sent once a step, codec and transfer in series). */
int compress_pays(double bytes, double wire, double bw, double budget, double codec_seconds, int once);
/* The compress pass's decision for one tensor of `elements` of
 * `elem_bytes` each (4, or 2 for bf16/fp16) sent each micro-batch
 * (grad_hops > 0: a parameter's partial gradient, sent once a step back
 * over that many stages), as bytes on the wire; *codec_seconds gets one
 * end's codec time (0 when dense). */
double compress_tensor_bytes(double elements, double elem_bytes, double cols, double bw, double t_star,
                             int micro_batches, double fixed, int grad_hops, double *codec_seconds);

/* ---- the workload estimator (estimate.c) ---- */
/* The default device when no cluster is given: one CPU core's worth. */
const cluster_device *estimate_default_device(void);
/* The arithmetic node n runs in: bf16 or fp16 when any of its float
 * tensors is stored so (products then read their f32 weights rounded, and
 * accumulate in f32), else tf32 in a graph compiled with it, else fp32.
 * estimate_graph_peak_kind: the graph's own (its matrix products'). */
peak_kind estimate_node_peak_kind(const ir_graph *g, int32_t n);
/* The peak a precision (f32, bf16, f16; tf32 for f32 products) runs at. */
peak_kind estimate_peak_kind(ir_dtype precision, int tf32);
peak_kind estimate_graph_peak_kind(const ir_graph *g);
/* Seconds node n takes on device d: max(FLOPs / peak, bytes / memory
 * bandwidth) + a fixed launch cost, times the device's emulated slowdown. */
double estimate_node_seconds(const ir_graph *g, int32_t n, const cluster_device *d);
/* The part of every op's seconds on device d that does not shrink with
 * the op's size (a launch, a kernel call): what a replica's smaller
 * micro-batch still pays per op. */
double estimate_launch_seconds(const cluster_device *d);
/* What of device d's memory a plan may use: a CUDA device's less
 * ESTIMATE_CUDA_CONTEXT_BYTES (the driver's context, the loaded kernels,
 * cuBLAS's workspace: about 300-500 MiB on Ampere and Hopper, as PyTorch
 * reports it before its first tensor); a CPU's as stated.  0: not stated. */
#define ESTIMATE_CUDA_CONTEXT_BYTES (512.0 * 1024 * 1024)
double estimate_usable_memory(const cluster_device *d);
/* Seconds to move `bytes` over a link: latency + bytes / bandwidth. */
double estimate_transfer_seconds(double bytes, double bandwidth, double latency);

/* ---- analyses (read-only) ---- */
typedef struct {
    int64_t n_ops;
    int64_t params;  /* elements of role param                  */
    int64_t trained; /* ... of them not frozen                  */
    int64_t param_bytes;
    int64_t batch;            /* samples per step: leading dim of the first input */
    double flops_forward;     /* per step                                */
    double flops_backward;    /* per step, all gradients                 */
    int64_t activation_bytes; /* all forward activations of one step     */
    int64_t input_bytes;      /* one step's inputs                       */
    int64_t state_bytes;      /* optimizer state (AdamW moments)         */
    int64_t arena_bytes;      /* device 0's planned arena: the peak of one step, all included */
} model_stats;

/* Needs shapes (run after the shapes pass). */
int model_stats_compute(const ir_graph *g, model_stats *s, struct diag *err);

/* The peak bytes of a device's arena as the memory pass planned it (values
 * and scratch; 0 before the pass, -1 when out of memory). */
int64_t memory_arena_bytes(const ir_graph *g, int32_t device);

/* What 1F1B keeps of a micro-batch whose backward on `stage` waits while
 * later ones run their forward (runtime/main.c):
 *   - a stage that does not recompute (ir_placement_recompute): what its
 *     backward reads of its forward, values made by forward ops or fed by
 *     the loader (inputs) that a backward op of the stage reads;
 *   - a stage that recomputes: what its forward gets from outside, the
 *     values received each micro-batch and the inputs, that an op of the
 *     stage reads; the forward runs again from them before the backward.
 * Writes their ids to out (room for g->n_values); returns the count, -1
 * when out of memory.  memory_stash_values_as: the same for a given
 * `recompute`, whatever the placement says. */
int32_t memory_stash_values(const ir_graph *g, int32_t stage, int32_t *out);
int32_t memory_stash_values_as(const ir_graph *g, int32_t stage, int recompute, int32_t *out);

#endif
