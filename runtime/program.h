/* program.h: what a generated device program holds, and what runtime/main.c
 * reads from it.
 *
 * The code generator (codegen/llvm_host.c) emits, per device, an object
 * with three constant blobs and one function:
 *
 *   fusion_manifest_blob  an rt_manifest: model, device, arena size, counts
 *   fusion_tensors_blob   rt_tensor_info[n_tensors]: every input, param,
 *                         optimizer state, the loss and each param's
 *                         gradient (grad.<param>), with its place in the
 *                         arena (the data loader, the initialiser, the
 *                         checkpoints, the log and --dump-grads find them)
 *   fusion_ops_blob       rt_op[n_ops]: the schedule's ops
 *   fusion_stash_blob     rt_tensor[n_stash]: what a micro-batch's backward
 *                         reads of its forward (activations, received
 *                         tensors, inputs), saved while later micro-batches
 *                         run their forward (1F1B)
 *   fusion_placement_blob int32[n_stages * n_replicas]: the cluster device
 *                         of each (stage, replica)
 *   fusion_peers_blob     rt_peer[n_peers]: every device of the cluster
 *   fusion_links_blob     rt_link[n_links]: every link the whole program
 *                         uses (all devices agree on it: link i listens on
 *                         port base + i at its first device)
 *   fusion_diloco_blob    rt_diloco_param[manifest.diloco.n_params]: under
 *                         --sync diloco, each parameter of the model and,
 *                         per site, the device that holds it (empty in
 *                         exact mode)
 *   fusion_cuda_*_blob    a CUDA device's kernels and steps (below)
 *   fusion_forward(arena, ctx), fusion_backward(arena, ctx),
 *   fusion_update(arena, ctx), fusion_prefill(arena, ctx)
 *                         the stage's ops by phase: straight lines of
 *                         rt_op_run(&ops[i], arena, ctx) calls; forward and
 *                         backward run once per micro-batch, update once a
 *                         step; prefill: an inference program's prompt
 *                         chunk (passes/prefill.c), empty elsewhere
 *
 * The blobs are the C structs' bytes (compiler and runtime are built
 * together, for the same ABI); main copies them out before use.
 */
#ifndef FUSION_RT_PROGRAM_H
#define FUSION_RT_PROGRAM_H

#include <stdint.h>

#include "exec.h"

#define RT_TENSOR_NAME_MAX 128
#define RT_MAX_SITES       16

/* How the devices agree on the parameters.  Exact (the default): one
 * global batch a step, every gradient averaged over the replicas of its
 * stage before the update.  Diloco (fusionc --sync diloco): each site (a
 * region) runs its own plan on its share of the global batch, and every
 * local_steps steps the sites average their parameter change and apply it
 * with an outer Nesterov step (runtime/comm/diloco.h). */
enum { RT_SYNC_EXACT = 0, RT_SYNC_DILOCO = 1 };

typedef struct {
    int32_t sync;                     /* RT_SYNC_EXACT or RT_SYNC_DILOCO                          */
    int32_t site, n_sites;            /* this device's site, of n_sites                          */
    int32_t local_steps;              /* H: this site's inner steps between outer steps          */
    int32_t site_steps[RT_MAX_SITES]; /* every site's H (a slower site may take fewer: the
                                  sites' rounds take the same time)                       */
    int32_t outer_bits;               /* the outer change on the wire: 8 or 4 (quant.h rows, with
                                  error feedback), 0 raw f32                              */
    int32_t outer_delay;              /* 1: a round's change is applied at the end of the next round,
                                  its transfer overlapping that round's steps; 0: at once */
    double outer_lr, outer_momentum;
    int64_t row_offset;               /* this site's first row of the global batch               */
    int64_t site_rows[RT_MAX_SITES];  /* each site's rows of the global batch a step              */
    int64_t global_rows;              /* the global batch's rows a step (all sites)               */
    double site_weight[RT_MAX_SITES]; /* each site's share of a round's rows (sum 1)      */
    int32_t n_params;                 /* entries of fusion_diloco_blob                           */
} rt_diloco_info;

typedef struct {
    char name[RT_TENSOR_NAME_MAX];
    int32_t stage;               /* the stage of this device's site that updates it */
    int32_t owner[RT_MAX_SITES]; /* per site, the device that holds it and takes part
                                          in the outer step (replica 0 of its stage)      */
} rt_diloco_param;

typedef struct {
    char model[64];
    char device[64];
    uint64_t build_id; /* hash of the compiled graph: peers must match */
    int64_t arena_bytes;
    int32_t n_ops, n_tensors;
    int32_t threads;        /* the device's CPU threads                      */
    int32_t loss;           /* index into the tensors of the loss, -1 none   */
    int32_t output;         /* an inference program's result (the logits: generate.h), -1 none */
    int32_t inference;      /* 1: an inference program (every stage of one; --inference) */
    int32_t logits;         /* a training program's: the tensor cross_entropy reads its logits from, -1 none */
    int32_t images;         /* 1: an image classifier (image_data.h); tokens_per_step counts its images */
    int32_t prefill_output; /* an inference program's prompt step's result (fusion_prefill), -1 none */
    int32_t prefill;        /* the tokens a sequence that step takes (--prefill P), 0 none */
    double slowdown;        /* >= 1: run this many times slower (emulation)  */
    /* Placement (the fence pass): this device runs replica `replica` of
     * stage `stage` of n_stages, over micro_batches micro-batches a step. */
    int32_t device_index; /* in the cluster                                */
    int32_t stage, replica, n_stages, n_replicas, micro_batches;
    int32_t warmup;         /* forwards before the first backward (the schedule pass) */
    int32_t recompute;      /* 1: the stash holds the forward's inputs; the forward
                                  runs again before a waiting backward (the schedule pass) */
    int32_t keep;           /* recomputing: the most waiting micro-batches kept whole at
                                  once, their backward replaying nothing (0: none) */
    int32_t n_stash_replay; /* the stash's first tensors: what a forward's replay needs
                                  (n_stash but under keep, where the rest complete a
                                  whole micro-batch's)                            */
    int32_t n_stash, n_peers, n_links;
    int32_t port_base;       /* link i listens on port_base + i               */
    int64_t tokens_per_step; /* the global batch's tokens (samples), all micro-batches and replicas */
    int32_t backend;         /* RT_BACKEND_CPU or RT_BACKEND_CUDA             */
    char arch[32];           /* the cluster file's arch ("sm_80"; "" on a CPU) */
    int32_t precision;       /* the graph's (ir_dtype): what activations are stored in */
    int32_t loss_scaling;    /* 1: fp16's dynamic loss scaling (loss_scale.h)    */
    int32_t tf32;            /* 1: f32 products may use TF32 tensor cores (CUDA: cuBLAS's
                                  CUBLAS_TF32_TENSOR_OP_MATH; a CPU ignores it)   */
    rt_diloco_info diloco;   /* sync = RT_SYNC_EXACT: the rest unused                   */
    uint64_t model_id;       /* hash of the whole model's parameters (names, shapes): a
                                  checkpoint of another model is refused on it, whatever
                                  the plan (checkpoint.c)                                 */
    char hypers[2048];       /* the model's hyper-parameters as built, "name=value ..." (floats
                                  in the fewest digits that read back exactly):
                                  checkpoints record them (fusion.hypers), so that `fusionc
                                  export` writes a config.json from a checkpoint alone    */
} rt_manifest;

enum { RT_BACKEND_CPU = 0, RT_BACKEND_CUDA = 1 };
/* What an input is fed: token ids, targets (training), positions (inference: decode.pos),
 * the prompt step's tokens and positions (passes/prefill.c), and an image
 * classifier's images (f32 (B,C,H,W)) and their labels (i32 (B)):
 * image_data.h. */
enum {
    RT_FEED_TOKENS = 0,
    RT_FEED_TARGETS = 1,
    RT_FEED_POSITIONS = 2,
    RT_FEED_PREFILL_TOKENS = 3,
    RT_FEED_PREFILL_POSITIONS = 4,
    RT_FEED_IMAGES = 5,
    RT_FEED_LABELS = 6
};

typedef struct {
    char name[64];
    char address[256]; /* where its host listens ("127.0.0.1")          */
} rt_peer;

typedef struct {
    int32_t a, b;      /* device indices, a < b: a listens, b connects   */
    int32_t b_listens; /* 1: b listens, a connects (a's host takes no
                          connection: cluster.h's inbound="false")       */
    int32_t reserved;  /* 0 */
    double bandwidth;  /* bytes/s, from the cluster file                 */
    double latency;    /* seconds                                        */
} rt_link;

typedef struct {
    char name[RT_TENSOR_NAME_MAX];
    int32_t role;      /* ir_role                                        */
    int32_t dtype;     /* ir_dtype                                       */
    int32_t init_kind; /* ir_init_kind                                   */
    int32_t feed;      /* inputs: RT_FEED_TOKENS, _TARGETS, ..., -1 none */
    int32_t frozen;    /* params: never trained (ir_value.frozen)        */
    int32_t running;   /* state: a batchnorm's running mean or variance
                          (passes/running_stats.c): averaged over the replicas
                          after every step; a checkpoint without it is read    */
    double init_a;
    /* A piece (--shard-optimizer's moments, runtime/shard.h): this tensor
     * holds elements [whole_lo, whole_lo + numel) of a tensor of `whole`
     * elements; whole 0: the tensor itself (checkpoints read and write
     * pieces by these). */
    int64_t whole, whole_lo;
    rt_tensor t; /* dims and place in the arena                    */
} rt_tensor_info;

/* Defined by the generated object. */
extern const unsigned char fusion_manifest_blob[];
extern const unsigned char fusion_tensors_blob[];
extern const unsigned char fusion_ops_blob[];
extern const unsigned char fusion_stash_blob[];
extern const unsigned char fusion_placement_blob[];
extern const unsigned char fusion_peers_blob[];
extern const unsigned char fusion_links_blob[];
extern const unsigned char fusion_diloco_blob[];
/* A CUDA device's module (runtime/cuda/cuda_program.h); on a CPU device
 * the info says zero kernels and the rest are empty. */
extern const unsigned char fusion_cuda_info_blob[];   /* rt_cuda_module_info          */
extern const unsigned char fusion_cuda_steps_blob[];  /* rt_cuda_step[n_steps]        */
extern const unsigned char fusion_cuda_ops_blob[];    /* rt_cuda_op[n_ops]            */
extern const unsigned char fusion_cuda_names_blob[];  /* n_kernels NUL-ended names    */
extern const unsigned char fusion_cuda_fatbin_blob[]; /* the fat binary, in .nv_fatbin  */
int fusion_forward(char *arena, rt_context *ctx);
int fusion_backward(char *arena, rt_context *ctx);
int fusion_update(char *arena, rt_context *ctx);
int fusion_prefill(char *arena, rt_context *ctx);

#endif
