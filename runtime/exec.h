/* exec.h: one op of a device's schedule, as the runtime executes it.
 *
 * The compiler lowers each IR node it places on a device into an rt_op: the
 * op kind, where each input and output lives in the device's arena (byte
 * offsets) with its dims, the scratch offset, and the attributes by key.
 * The generated program is a straight line of rt_op_run calls over constant
 * rt_ops; tests run the same calls.  rt_op_run (step.c) hands a message to
 * the comm layer and any other op to the CPU executor (exec.c), which
 * finds its kernel in the CPU back end's table (cpu/op_table.h).
 *
 * What it deliberately is not: a graph.  The runtime sees one op at a time,
 * in the order the compiler chose.
 */
#ifndef FUSION_RT_EXEC_H
#define FUSION_RT_EXEC_H

#include <stdint.h>

#include "../ir/op_kinds.h"

#define RT_MAX_IN   8
#define RT_MAX_OUT  4
#define RT_MAX_RANK 8

typedef struct {
    int32_t rank;
    int32_t dtype; /* an ir_dtype: f32 (0), i32, f16 or bf16 (cpu/half.h) */
    int64_t dim[RT_MAX_RANK];
    int64_t offset; /* bytes into the arena                        */
} rt_tensor;

typedef struct {
    int32_t op; /* an ir_op                                     */
    int32_t n_in, n_out;
    rt_tensor in[RT_MAX_IN], out[RT_MAX_OUT];
    int64_t ws_offset;            /* bytes into the arena of the scratch, -1 none */
    int64_t ints[ATTR_KEY_COUNT]; /* attributes (defaults filled in)    */
    double floats[ATTR_KEY_COUNT];
    char name[64];      /* the IR node's name (cut to fit), for messages */
    int32_t line;       /* its model-file line                         */
    double est_seconds; /* the workload estimator's time of it on this device
                                  (its declared peaks, slowdown included): what
                                  --emulate-devices paces it to; 0: not paced  */
} rt_op;                /* position-independent: bundles embed rt_ops as bytes */

struct rt_comm;             /* runtime/comm/comm.h: the device's peers     */
struct rt_train_settings_s; /* train_settings.h: the run's lr, decay, clip  */

typedef struct rt_context_s {
    int64_t step;         /* the update about to be made, from 1; a forward that
                                  validates or samples runs at -step (0 before the first) */
    char msg[512];        /* why rt_op_run failed                        */
    int32_t micro_batch;  /* 0..M-1 in forward and backward; -1 in update */
    int32_t phase;        /* the ir_phase running (messages are tagged by it) */
    struct rt_comm *comm; /* send, recv and allreduce go through it; NULL: none */
    double slowdown;      /* > 1: sleep after each op so it takes this many times as long */
    struct rt_cuda *cuda; /* a CUDA device's backend (cuda/cuda.h); NULL on a CPU device */
    int32_t replay;       /* 1: the forward runs again for its backward (recompute):
                                  sends and recvs do nothing, what they moved is in place */
    /* The stash (what a backward reads of its forward) crosses to the host
     * and back only for a backward that waits (1F1B): keep_stash, main
     * keeps this forward's (a CUDA device brings it down); stash_restored,
     * main put a waiting micro-batch's back before this backward (a CUDA
     * device takes it up).  Both 0: the backward is next, or none comes;
     * 2: the whole stash of a micro-batch a recomputing stage keeps whole
     * (partial replay), 1 the rest (its replay's part under keep). */
    int32_t keep_stash, stash_restored;
    /* fp16's dynamic loss scaling (the fill and clip_scale ops that say loss_scale=1):
     * the loss seed is loss_scale (infinite when inject_overflow, a test's way
     * to force an overflow); clip_scale divides it out, or gives NaN when the
     * gradients overflowed, and then every adamw leaves its parameter, m and v
     * as they were and sets overflowed.  AdamW's bias correction counts the
     * steps taken: step - skipped. */
    float loss_scale;
    /* cross_entropy's mean over all its targets times loss_weight is the
     * mean over the ones it trains on (masked data: data.h's
     * rt_data_loss_weight); 0 or 1: no mask. */
    float loss_weight;
    int32_t inject_overflow;
    int32_t overflowed;
    int64_t skipped;
    /* --emulate-devices: every op takes at least its est_seconds (the
     * device's declared speed); what it owes is waited out in sleeps of at
     * least RT_PACE_MIN_SLEEP (a shorter sleep overshoots by the kernel's
     * timer slack) and before every message, and what was waited is added
     * to paced.  The cluster file's slowdown is then part of the estimate. */
    int32_t emulate_devices;
    double owed;
    double paced;
    double pace_factor; /* > 1: the device is this much slower than its est_seconds say */
    /* The step's compute: seconds of its ops other than messages (their
     * pacing included), and the est_seconds of those ops: what the broker
     * compares to find a straggler (broker_client.h's step report). */
    double compute, planned;
    /* Called before each op when set (the step's last backward: gradient
     * buckets whose gradients are final go to the all-reduce thread,
     * comm/overlap.h); non-zero fails the op. */
    int (*before_op)(void *user, const rt_op *op, struct rt_context_s *ctx);
    void *before_op_user;
    /* --trace FILE (trace.h): every op a span, every message a flow from
     * its send to its receive; NULL: nothing recorded. */
    struct rt_trace *trace;
    /* The run's learning-rate schedule, weight decay and clipping bound
     * (train_settings.h); NULL: the values compiled into the ops. */
    const struct rt_train_settings_s *train;
    double grad_norm; /* the step's global gradient norm: clip_scale sets it where it runs */
} rt_context;

#define RT_PACE_MIN_SLEEP 1e-3 /* seconds */

/* --emulate-devices: wait out what the device still owes (the end of a
 * step, before a message).  Nothing without emulation. */
void rt_pace_settle(rt_context *ctx);

/* --emulate-devices: an op that should take est_seconds took `took`
 * (finished: a CUDA device synchronised first); the difference is owed and
 * waited out in sleeps of at least RT_PACE_MIN_SLEEP.  An op slower than
 * its estimate earns no credit.  Used by rt_op_run and the CUDA backend. */
void rt_pace_op(rt_context *ctx, double est_seconds, double took);

/* Run op on the arena (step.c): a message through the comm layer, any
 * other op on its CPU kernel.  Returns 0, or -1 with ctx->msg set (a token
 * id or target out of range: bad input data, not a compiler bug; a peer
 * lost). */
/* Seconds of CLOCK_MONOTONIC: what the runtime times its steps and ops by. */
double rt_seconds_now(void);
int rt_op_run(const rt_op *op, char *arena, rt_context *ctx);
/* --trace: the op's span from t0 to t1 (rt_trace_clock's microseconds) in
 * its phase's category, and a message's flow; rt_op_run draws it, and the
 * CUDA back end for the ops it runs on the GPU. */
void rt_op_trace(const rt_op *op, const rt_context *ctx, double t0, double t1);

/* The CPU executor (exec.c): op, not a message, on its kernel of
 * cpu/op_table.h, 16-bit tensors widened around it.  0, or -1 with ctx->msg. */
int rt_cpu_run(const rt_op *op, char *arena, rt_context *ctx);

/* The gradient bucket the comm layer holds, reduced now (comm/overlap.h):
 * the step loop does it before every op but an all-reduce, and a CUDA
 * device after an all-reduce it ran at once.  0, or -1 with ctx->msg. */
int rt_step_flush_buckets(rt_context *ctx);

/* The op's scratch in the arena (ws_offset), one layout for both backends,
 * each piece 64-byte aligned:
 *
 *   [kernel scratch][copies]
 *
 * kernel scratch: what the op's kernels need (attention's scores on a CPU,
 * conv2d's im2col columns on either); copies, only when some of its
 * tensors are 16-bit:
 *   CPU   an f32 copy of each 16-bit tensor, inputs then outputs (the f32
 *         kernel runs on them: exec.c, run_kernel_widened);
 *   CUDA  a 16-bit copy (in rt_op_product_dtype) of each f32 input a
 *         matrix product reads (rt_op_product_inputs): cuBLAS multiplies
 *         two operands of one type, so a product of bf16 activations by f32
 *         weights reads the weights rounded (codegen/cuda_kernels.c).
 * The memory pass does not tell the backends apart: the copies' part is
 * sized for the larger of the two.  Floats in all (0 for most ops of an
 * f32 graph). */
int64_t rt_op_workspace_floats(const rt_op *op);
/* The float type a product op (linear, matmul, conv2d and their backwards)
 * multiplies in: bf16 or f16 when any of its tensors is stored so, else
 * f32 (also for every other op). */
int32_t rt_op_product_dtype(const rt_op *op);
/* Bit i: input i is read as an operand of a matrix product (the backward
 * ops': of a gradient its `grads` attribute asks for) in its own layout,
 * not through an im2col kernel.  0 for an op without products. */
uint32_t rt_op_product_inputs(const rt_op *op);
/* Where, in bytes from ws_offset, the CUDA layout keeps input i's 16-bit
 * copy; -1 when input i has none (it is not an f32 product input of a
 * 16-bit product). */
int64_t rt_op_rounded_input_at(const rt_op *op, int i);

int64_t rt_tensor_numel(const rt_tensor *t);
/* numel times the dtype's size. */
int64_t rt_tensor_bytes(const rt_tensor *t);
/* Is it stored in 16 bits (bf16 or fp16)? */
int rt_tensor_is_half(const rt_tensor *t);
/* Row `row` of t (its last dimension, rows counted over all the others), in
 * the arena, as f32 into x: the logits of one token. */
void rt_tensor_row_f32(const rt_tensor *t, const char *arena, int64_t row, float *x);

#endif
