/* step.c: rt_op_run, what the generated step calls for each op of the
 * schedule (exec.h): a message (send, recv, allreduce) goes to the comm
 * layer, any other op to the CPU executor (exec.c); around it, the
 * overlap's hook, the device's pace (--emulate-devices, --slowdown) and the
 * trace.  The CUDA back end hands its host steps here too
 * (rt_step_message), so that neither executor talks to the comm layer. */
#include "exec.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "trace.h"

double rt_seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_seconds(double wait)
{
    struct timespec ts = { (time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Sleep off at least `least` seconds of what is owed; the sleep's
 * overshoot is credited (owed goes below 0 and the next ops fill it). */
static void pay_owed(rt_context *ctx, double least)
{
    if (!(ctx->owed >= least) || !(ctx->owed > 0))
        return;
    double t0 = rt_seconds_now();
    sleep_seconds(ctx->owed);
    double slept = rt_seconds_now() - t0;
    ctx->paced += slept;
    ctx->owed -= slept;
}

void rt_pace_settle(rt_context *ctx)
{
    if (!ctx->emulate_devices)
        return;
    double t0 = rt_seconds_now();
    pay_owed(ctx, 0.0);
    ctx->compute += rt_seconds_now() - t0; /* (what the compute owed) */
}

void rt_pace_op(rt_context *ctx, double est_seconds, double took)
{
    double faster = est_seconds * (ctx->pace_factor > 1 ? ctx->pace_factor : 1) - took;
    if (faster > 0) { /* an op slower than declared earns no credit */
        ctx->owed += faster;
        pay_owed(ctx, RT_PACE_MIN_SLEEP);
    }
}

/* An all-reduce or all-gather: its tensor joins the comm layer's bucket. */
static int is_bucketed(const rt_op *op) { return op->op == OP_ALLREDUCE || op->op == OP_ALLGATHER; }

/* send, recv, allreduce, allgather: the comm layer's. */
static int run_message(const rt_op *op, char *arena, rt_context *ctx)
{
    if (ctx->replay && !is_bucketed(op)) /* sent already; received and put back by the stepper */
        return 0;
    if (!ctx->comm) {
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): this program has no peers to talk to", op->name,
                 (int)op->line);
        return -1;
    }
    return op->op == OP_SEND        ? rt_comm_send(ctx->comm, op, arena, ctx)
           : op->op == OP_RECV      ? rt_comm_recv(ctx->comm, op, arena, ctx)
           : op->op == OP_ALLGATHER ? rt_comm_gather_pieces(ctx->comm, op, arena, ctx)
                                    : rt_comm_allreduce(ctx->comm, op, arena, ctx);
}

int rt_step_flush_buckets(rt_context *ctx)
{
    return ctx->comm && ctx->comm->bucket_count > 0 ? rt_comm_flush_bucket(ctx->comm, ctx) : 0;
}

static int is_message(const rt_op *op) { return op->op == OP_SEND || op->op == OP_RECV || is_bucketed(op); }

static int run_scheduled(const rt_op *op, char *arena, rt_context *ctx)
{
    if (ctx->before_op && ctx->before_op(ctx->before_op_user, op, ctx))
        return -1;
    if (ctx->emulate_devices && is_message(op))
        rt_pace_settle(ctx); /* the device's compute is done before it talks */
    if (!is_bucketed(op) && rt_step_flush_buckets(ctx))
        return -1;
    if (is_message(op))
        return run_message(op, arena, ctx);
    double t0 = rt_seconds_now();
    int rc = rt_cpu_run(op, arena, ctx);
    if (ctx->emulate_devices && op->est_seconds > 0 && rc == 0) {
        rt_pace_op(ctx, op->est_seconds, rt_seconds_now() - t0);
    } else if (ctx->slowdown > 1.0 && !ctx->emulate_devices) {
        /* An emulated slower device: the op, then (slowdown - 1) times as
         * long again asleep, so the device takes `slowdown` times as long
         * and the idle time is free for the other devices on this machine. */
        sleep_seconds((rt_seconds_now() - t0) * (ctx->slowdown - 1.0));
    }
    ctx->compute += rt_seconds_now() - t0;
    ctx->planned += op->est_seconds;
    return rc;
}

/* --trace: the op as a span of its phase (a message's ops as "send" and
 * "recv" with its bytes, and the ends of its flow: the send's start, the
 * receive's end, when the bytes are in).  Runs that move nothing (a
 * recomputed forward's, a parameter's after micro-batch 0, a partial
 * gradient's before the last) draw no flow. */
void rt_op_trace(const rt_op *op, const rt_context *ctx, double t0, double t1)
{
    static const char *const phases[] = { "none", "forward", "backward", "update", "prefill" };
    int message = op->op == OP_SEND || op->op == OP_RECV;
    const char *cat = message                             ? (op->op == OP_SEND ? "send" : "recv")
                      : is_bucketed(op)                   ? "allreduce"
                      : ctx->phase >= 0 && ctx->phase < 5 ? phases[ctx->phase]
                                                          : "op";
    char args[256];
    const rt_tensor *t = op->op == OP_RECV ? &op->out[0] : &op->in[0];
    snprintf(args, sizeof args, "{\"step\":%lld,\"micro_batch\":%d%s", (long long)ctx->step, (int)ctx->micro_batch,
             ctx->replay ? ",\"recomputed\":true" : "");
    if (message || is_bucketed(op)) {
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
        rt_op_trace(op, ctx, t0, rt_trace_clock());
    /* what a receive spent blocked for its message (comm.c counts it), drawn from its start */
    waited = ctx->comm && op->op == OP_RECV ? ctx->comm->recv_wait - waited : 0.0;
    if (rc == 0 && waited > 0) {
        char name[96];
        snprintf(name, sizeof name, "wait: %s", op->name);
        rt_trace_span(ctx->trace, 0, "wait", name, t0, t0 + waited * 1e6, NULL);
    }
    return rc;
}
