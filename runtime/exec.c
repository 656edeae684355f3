/* exec.c: rt_op_run, an op of the schedule run on its CPU kernel (the
 * rows of cpu/op_table.h) or handed to the comm layer (see exec.h): the
 * 16-bit tensors widened around the kernel, the device's pace kept. */
#include "exec.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "trace.h"
#include "cpu/half.h"
#include "cpu/op_table.h"

int64_t rt_tensor_numel(const rt_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dim[i];
    return n;
}

int64_t rt_tensor_bytes(const rt_tensor *t) { return rt_tensor_numel(t) * half_dtype_bytes(t->dtype); }

int rt_tensor_is_half(const rt_tensor *t) { return t->dtype == HALF_DT_BF16 || t->dtype == HALF_DT_F16; }

/* ---- 16-bit tensors and the scratch (exec.h: rt_op_workspace_floats) ------
 *
 * The CPU kernels compute in f32.  An op some of whose float tensors are
 * stored in bf16 or fp16 runs its f32 kernel on f32 copies in its scratch,
 * after the kernel's own scratch:
 *
 *   [kernel scratch][copy of 16-bit tensor 1][copy 2]...   each 64-byte aligned
 *
 * each 16-bit input widened (exact), each 16-bit output written there by the
 * kernel and rounded into its place (nearest even).  So products and
 * reductions accumulate in f32 (in double, where the kernels do) and only
 * what is stored is rounded, as with tensor cores.  f32 inputs, the
 * parameters among them, are read as they are: a CPU multiplies in f32
 * anyway, and rounding a weight first would cost a copy of it per product.
 * The CUDA path rounds them (cuBLAS wants both operands in one type) into
 * the same place, after the same kernel scratch:
 *
 *   [kernel scratch][16-bit copy of f32 product input 1][copy 2]...
 *
 * The two differ by less than the 16-bit format's own rounding of the
 * result (the emulation harness measures it: tests/unit/cuda_cases.c).
 * bench/bench_bf16_gemm.c and bench_precision.sh measure what the CPU's copies cost. */
static int64_t copy_floats(const rt_tensor *t) { return (rt_tensor_numel(t) + 15) / 16 * 16; }
/* A 16-bit copy of t in floats, 64-byte aligned (32 elements a line). */
static int64_t half_copy_floats(const rt_tensor *t) { return (rt_tensor_numel(t) + 31) / 32 * 16; }

static int64_t half_copies_floats(const rt_op *op)
{
    int64_t floats = 0;
    for (int i = 0; i < op->n_in; i++)
        floats += rt_tensor_is_half(&op->in[i]) ? copy_floats(&op->in[i]) : 0;
    for (int i = 0; i < op->n_out; i++)
        floats += rt_tensor_is_half(&op->out[i]) ? copy_floats(&op->out[i]) : 0;
    return floats;
}

int32_t rt_op_product_dtype(const rt_op *op)
{
    if (!op_is_product(op->op))
        return HALF_DT_F32;
    for (int i = 0; i < op->n_in; i++)
        if (rt_tensor_is_half(&op->in[i]))
            return op->in[i].dtype;
    for (int i = 0; i < op->n_out; i++)
        if (rt_tensor_is_half(&op->out[i]))
            return op->out[i].dtype;
    return HALF_DT_F32;
}

uint32_t rt_op_product_inputs(const rt_op *op)
{
    const rt_cpu_kernel *k = rt_cpu_kernel_of(op->op);
    return k && k->product_inputs ? k->product_inputs(op) : 0;
}

static int64_t kernel_workspace_floats(const rt_op *op)
{
    const rt_cpu_kernel *k = rt_cpu_kernel_of(op->op);
    return k && k->workspace_floats ? k->workspace_floats(op) : 0;
}

/* The kernel's part, rounded up so that the copies start 64-byte aligned. */
static int64_t copies_at_floats(const rt_op *op) { return (kernel_workspace_floats(op) + 15) / 16 * 16; }

int64_t rt_op_rounded_input_at(const rt_op *op, int i)
{
    if (rt_op_product_dtype(op) == HALF_DT_F32)
        return -1;
    uint32_t inputs = rt_op_product_inputs(op);
    int64_t at = copies_at_floats(op);
    for (int k = 0; k < op->n_in; k++) {
        if (!((inputs >> k) & 1) || op->in[k].dtype != HALF_DT_F32)
            continue;
        if (k == i)
            return at * (int64_t)sizeof(float);
        at += half_copy_floats(&op->in[k]);
    }
    return -1;
}

/* The CUDA layout's copies, in floats. */
static int64_t rounded_inputs_floats(const rt_op *op)
{
    int64_t floats = 0;
    for (int k = 0; k < op->n_in; k++)
        if (rt_op_rounded_input_at(op, k) >= 0)
            floats += half_copy_floats(&op->in[k]);
    return floats;
}

int64_t rt_op_workspace_floats(const rt_op *op)
{
    int64_t cpu = half_copies_floats(op), cuda = rounded_inputs_floats(op);
    int64_t copies = cpu > cuda ? cpu : cuda;
    return copies ? copies_at_floats(op) + copies : kernel_workspace_floats(op);
}

/* The op's kernel (cpu/op_table.h), on tensors in f32. */
static int run_kernel(const rt_op *op, char *arena, rt_context *ctx)
{
    const rt_cpu_kernel *k = rt_cpu_kernel_of(op->op);
    if (!k || !k->run) {
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s': op kind %d has no CPU kernel", op->name, (int)op->op);
        return -1;
    }
    return k->run(op, arena, ctx);
}

/* run_kernel on f32 copies of op's 16-bit tensors (see above). */
static int run_kernel_widened(const rt_op *op, char *arena, rt_context *ctx)
{
    rt_op wide = *op;
    int64_t at = op->ws_offset + copies_at_floats(op) * (int64_t)sizeof(float);
    for (int i = 0; i < op->n_in; i++) {
        if (!rt_tensor_is_half(&op->in[i]))
            continue;
        half_to_f32((float *)(arena + at), arena + op->in[i].offset, rt_tensor_numel(&op->in[i]), op->in[i].dtype);
        wide.in[i].offset = at;
        wide.in[i].dtype = HALF_DT_F32;
        at += copy_floats(&op->in[i]) * (int64_t)sizeof(float);
    }
    for (int i = 0; i < op->n_out; i++) {
        if (!rt_tensor_is_half(&op->out[i]))
            continue;
        wide.out[i].offset = at;
        wide.out[i].dtype = HALF_DT_F32;
        at += copy_floats(&op->out[i]) * (int64_t)sizeof(float);
    }
    if (run_kernel(&wide, arena, ctx))
        return -1;   /* the kernel wrote nothing (kernels.h): neither do we */
    for (int i = 0; i < op->n_out; i++)
        if (rt_tensor_is_half(&op->out[i]))
            half_from_f32(arena + op->out[i].offset, (const float *)(arena + wide.out[i].offset),
                          rt_tensor_numel(&op->out[i]), op->out[i].dtype);
    return 0;
}

static int run_op(const rt_op *op, char *arena, rt_context *ctx)
{
    for (int i = 0; i < op->n_in + op->n_out; i++)
        if (rt_tensor_is_half(i < op->n_in ? &op->in[i] : &op->out[i - op->n_in])) {
            if (op->ws_offset < 0) {
                snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): 16-bit tensors but no scratch to widen them in",
                         op->name, (int)op->line);
                return -1;
            }
            return run_kernel_widened(op, arena, ctx);
        }
    return run_kernel(op, arena, ctx);
}

static void sleep_seconds(double wait)
{
    struct timespec ts = { (time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleep off at least `least` seconds of what is owed; the sleep's
 * overshoot is credited (owed goes below 0 and the next ops fill it). */
static void pay_owed(rt_context *ctx, double least)
{
    if (!(ctx->owed >= least) || !(ctx->owed > 0))
        return;
    double t0 = seconds_now();
    sleep_seconds(ctx->owed);
    double slept = seconds_now() - t0;
    ctx->paced += slept;
    ctx->owed -= slept;
}

void rt_pace_settle(rt_context *ctx)
{
    if (ctx->emulate_devices)
        pay_owed(ctx, 0.0);
}

void rt_pace_op(rt_context *ctx, double est_seconds, double took)
{
    double faster = est_seconds - took;
    if (faster > 0) {   /* an op slower than declared earns no credit */
        ctx->owed += faster;
        pay_owed(ctx, RT_PACE_MIN_SLEEP);
    }
}

static int run_scheduled(const rt_op *op, char *arena, rt_context *ctx)
{
    if (ctx->before_op && ctx->before_op(ctx->before_op_user, op, ctx))
        return -1;
    if (ctx->emulate_devices && (op->op == OP_SEND || op->op == OP_RECV || op->op == OP_ALLREDUCE))
        rt_pace_settle(ctx);   /* the device's compute is done before it talks */
    if (op->op != OP_ALLREDUCE && ctx->comm && ctx->comm->bucket_count > 0 && rt_comm_flush_bucket(ctx->comm, ctx))
        return -1;
    switch (op->op) {
    case OP_SEND:
    case OP_RECV:
        if (ctx->replay)   /* sent already; received and put back by the stepper */
            return 0;
        /* fall through */
    case OP_ALLREDUCE:
        if (!ctx->comm) {
            snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): this program has no peers to talk to",
                     op->name, (int)op->line);
            return -1;
        }
        return op->op == OP_SEND   ? rt_comm_send(ctx->comm, op, arena, ctx)
               : op->op == OP_RECV ? rt_comm_recv(ctx->comm, op, arena, ctx)
                                   : rt_comm_allreduce(ctx->comm, op, arena, ctx);
    default:
        break;
    }
    if (ctx->emulate_devices && op->est_seconds > 0) {
        double t0 = seconds_now();
        int rc = run_op(op, arena, ctx);
        if (rc == 0)
            rt_pace_op(ctx, op->est_seconds, seconds_now() - t0);
        return rc;
    }
    if (!(ctx->slowdown > 1.0))
        return run_op(op, arena, ctx);
    /* An emulated slower device: the op, then (slowdown - 1) times as long
     * again asleep, so the device takes `slowdown` times as long and the
     * idle time is free for the other devices on this machine. */
    double t0 = seconds_now();
    int rc = run_op(op, arena, ctx);
    sleep_seconds((seconds_now() - t0) * (ctx->slowdown - 1.0));
    return rc;
}

/* --trace: the op as a span of its phase (a message's ops as "send" and
 * "recv" with its bytes, and the ends of its flow: the send's start, the
 * receive's end, when the bytes are in).  Runs that move nothing (a
 * recomputed forward's, a parameter's after micro-batch 0, a partial
 * gradient's before the last) draw no flow. */
static void trace_op(const rt_op *op, const rt_context *ctx, double t0, double t1)
{
    static const char *const phases[] = { "none", "forward", "backward", "update" };
    int message = op->op == OP_SEND || op->op == OP_RECV;
    const char *cat = message ? (op->op == OP_SEND ? "send" : "recv")
                      : op->op == OP_ALLREDUCE ? "allreduce"
                      : ctx->phase >= 0 && ctx->phase < 4 ? phases[ctx->phase] : "op";
    char args[256];
    const rt_tensor *t = op->op == OP_RECV ? &op->out[0] : &op->in[0];
    snprintf(args, sizeof args, "{\"step\":%lld,\"micro_batch\":%d%s", (long long)ctx->step, (int)ctx->micro_batch,
             ctx->replay ? ",\"recomputed\":true" : "");
    if (message || op->op == OP_ALLREDUCE) {
        size_t n = strlen(args);
        snprintf(args + n, sizeof args - n, ",\"tensor\":%lld,\"bytes\":%lld", (long long)op->ints[ATTR_TENSOR],
                 (long long)rt_tensor_bytes(t));
        if (message) {
            n = strlen(args);
            snprintf(args + n, sizeof args - n, ",\"peer_stage\":%lld", (long long)op->ints[ATTR_PEER]);
        }
    }
    strncat(args, "}", sizeof args - strlen(args) - 1);
    rt_trace_span(ctx->trace, 0, cat, op->name, t0, t1, args);
    if (message && !ctx->replay && ctx->comm && rt_comm_moves(ctx->comm, op, ctx))
        rt_trace_flow(ctx->trace, 0, op->op == OP_SEND, ctx->step, ctx->micro_batch, op->ints[ATTR_TENSOR],
                      op->op == OP_SEND ? t0 : t1 - 0.001 * (t1 - t0));
}

int rt_op_run(const rt_op *op, char *arena, rt_context *ctx)
{
    if (!ctx->trace)
        return run_scheduled(op, arena, ctx);
    double t0 = rt_trace_clock(), waited = ctx->comm ? ctx->comm->recv_wait : 0.0;
    int rc = run_scheduled(op, arena, ctx);
    if (rc == 0)
        trace_op(op, ctx, t0, rt_trace_clock());
    /* what a receive spent blocked for its message (comm.c counts it), drawn from its start */
    waited = ctx->comm && op->op == OP_RECV ? ctx->comm->recv_wait - waited : 0.0;
    if (rc == 0 && waited > 0) {
        char name[96];
        snprintf(name, sizeof name, "wait: %s", op->name);
        rt_trace_span(ctx->trace, 0, "wait", name, t0, t0 + waited * 1e6, NULL);
    }
    return rc;
}
