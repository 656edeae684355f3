/* overlap.c: gradient buckets reduced while the backward runs (overlap.h). */
#include "overlap.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../ir/ir.h"
#include "../../ir/op_kinds.h"
#include "../trace.h"
#include "comm.h"
#include "../rt_error.h"

typedef struct {
    int64_t offset, floats;         /* the gradient in the arena: the allreduce's input */
    int32_t first_entry, n_entries; /* its ROLE_GRADIENT tensors, entries[first, first + n) */
} ov_member;

typedef struct {
    int32_t tensor; /* index into the program's tensors */
    int64_t acc;    /* its first float in grad_sum      */
} ov_entry;

typedef struct {
    int32_t first, count; /* members[first, first + count)                 */
    int32_t ready;        /* launched once ops up to this index have run;
                                   INT32_MAX: only in rt_overlap_finish          */
    int32_t tag;          /* its messages' tensor id: the first member's    */
    int64_t groups;       /* the ring (0) or the hierarchy (allreduce_wire.h) */
    int bits;             /* 0, or the quantised exchange's bits ...          */
    rt_quant_feedback fb; /* ... and its feedback, kept across steps           */
    int mode;             /* RT_BUCKET_MEAN, or _SCATTER (--shard-optimizer) */
    int64_t floats;
    float *buf;     /* [floats]: the members end to end              */
    int64_t *sizes; /* [count]: each member's floats                 */
    float **member; /* [count]: each member's gradient in the arena   */
    int pieces;     /* buf is laid out piece by piece (comm.h)        */
} ov_bucket;

struct rt_overlap {
    rt_comm *comm;
    char *arena;
    float *grad_sum;
    float inv_m; /* 1 / micro-batches, as the stepper computes it */
    int enabled;
    ov_member *members;
    ov_entry *entries;
    ov_bucket *buckets;
    rt_overlap_range *ranges; /* [n_members]: the members' bytes, for fetch    */
    int32_t n_members, n_entries, n_buckets;
    rt_overlap_fetch_fn fetch; /* NULL: the ops write the arena itself          */
    void *fetch_user;
    uint8_t *final; /* [n_tensors] */
    int32_t n_tensors;
    int32_t launched; /* buckets handed over this step: [0, launched) */
    const rt_op *ops; /* the program's ops (the generated code's blob)  */
    double waited;
    int64_t early, handed; /* buckets handed over during a backward / in all */
    /* The thread and what it shares with the main thread, under mu. */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int32_t queued, done; /* handed over / reduced this step            */
    int quit, failed;
    char msg[512];
    rt_context ctx; /* the thread's: this step's number            */
    float *scratch; /* the thread's ring scratch                   */
    size_t scratch_floats;
};

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void *reduce_thread(void *arg)
{
    rt_overlap *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->quit && o->done == o->queued)
            pthread_cond_wait(&o->cv, &o->mu);
        if (o->quit)
            break;
        ov_bucket *b = &o->buckets[o->done];
        rt_context ctx = o->ctx;
        int failed = o->failed;
        pthread_mutex_unlock(&o->mu);
        double t0 = rt_trace_clock();
        int rc = failed ? -1
                        : rt_comm_mean_bucket(o->comm, &o->scratch, &o->scratch_floats, b->buf, b->sizes, b->count,
                                              b->tag, b->groups, b->bits, b->mode, &b->fb, &ctx);
        if (rc == 0 && ctx.trace) {
            char name[64], args[128];
            snprintf(name, sizeof name, "allreduce bucket %d", (int)(b - o->buckets));
            snprintf(args, sizeof args, "{\"step\":%lld,\"bytes\":%lld}", (long long)ctx.step,
                     (long long)b->floats * 4);
            rt_trace_span(ctx.trace, 1, "allreduce", name, t0, rt_trace_clock(), args);
        }
        pthread_mutex_lock(&o->mu);
        if (rc && !o->failed) {
            o->failed = 1;
            snprintf(o->msg, sizeof o->msg, "%s", ctx.msg);
        }
        o->done++;
        pthread_cond_broadcast(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

/* The members' gradients' tensors, and where each sums in grad_sum. */
static int find_entries(rt_overlap *o, const rt_tensor_info *tensors, int32_t n_tensors, char *err, size_t n)
{
    int64_t *acc_of = malloc(((size_t)n_tensors + 1) * sizeof *acc_of), acc = 0;
    o->entries = malloc(((size_t)n_tensors + 1) * sizeof *o->entries);
    if (!acc_of || !o->entries) {
        free(acc_of);
        return rt_error(err, n, "out of memory for the gradient buckets");
    }
    for (int32_t i = 0; i < n_tensors; i++) {
        acc_of[i] = acc;
        if (tensors[i].role == ROLE_GRADIENT)
            acc += rt_tensor_numel(&tensors[i].t);
    }
    for (int32_t k = 0; k < o->n_members; k++) {
        ov_member *m = &o->members[k];
        m->first_entry = o->n_entries;
        for (int32_t i = 0; i < n_tensors; i++) {
            const rt_tensor *t = &tensors[i].t;
            if (tensors[i].role != ROLE_GRADIENT || t->offset >= m->offset + m->floats * 4 ||
                t->offset + rt_tensor_bytes(t) <= m->offset)
                continue;
            if (t->offset != m->offset || rt_tensor_numel(t) != m->floats || o->n_entries == n_tensors) {
                free(acc_of);
                return rt_error(err, n,
                                "gradient '%s' only partly overlaps an all-reduce's input: the buckets cannot "
                                "finalise it",
                                tensors[i].name);
            }
            o->entries[o->n_entries++] = (ov_entry){ i, acc_of[i] };
        }
        m->n_entries = o->n_entries - m->first_entry;
    }
    free(acc_of);
    return 0;
}

int rt_overlap_open(rt_overlap **out, rt_comm *c, const rt_op *ops, int32_t n_ops, const rt_tensor_info *tensors,
                    int32_t n_tensors, char *arena, float *grad_sum, int32_t micro_batches, int enabled, char *err,
                    size_t n)
{
    *out = NULL;
    int32_t n_buckets = 0, n_members = 0;
    for (int32_t i = 0; i < n_ops; i++)
        if (ops[i].op == OP_ALLREDUCE && ops[i].ints[ATTR_BUCKET] >= 0) {
            n_members++;
            if (ops[i].ints[ATTR_BUCKET] + 1 > n_buckets)
                n_buckets = (int32_t)ops[i].ints[ATTR_BUCKET] + 1;
        }
    if (n_members == 0 || !c || c->manifest->n_replicas < 2)
        return 0;
    rt_overlap *o = calloc(1, sizeof *o);
    if (!o || !(o->members = calloc((size_t)n_members, sizeof *o->members)) ||
        !(o->ranges = calloc((size_t)n_members, sizeof *o->ranges)) ||
        !(o->buckets = calloc((size_t)n_buckets, sizeof *o->buckets)) ||
        !(o->final = calloc((size_t)n_tensors + 1, 1))) {
        if (o) {
            free(o->members);
            free(o->ranges);
            free(o->buckets);
        }
        free(o);
        return rt_error(err, n, "out of memory for the gradient buckets");
    }
    o->comm = c, o->arena = arena, o->grad_sum = grad_sum, o->ops = ops, o->enabled = enabled;
    o->inv_m = 1.0f / (float)micro_batches;
    o->n_buckets = n_buckets, o->n_tensors = n_tensors;
    /* Members bucket by bucket, each bucket's in program order (every
     * replica's program is the same, so they agree on the layout). */
    int rc = 0;
    for (int32_t b = 0; b < n_buckets && rc == 0; b++) {
        ov_bucket *bk = &o->buckets[b];
        bk->first = o->n_members, bk->tag = -1;
        for (int32_t i = 0; i < n_ops; i++) {
            const rt_op *op = &ops[i];
            if (op->op != OP_ALLREDUCE || op->ints[ATTR_BUCKET] != b)
                continue;
            int64_t ready = op->ints[ATTR_READY];
            if (bk->tag < 0)
                bk->tag = (int32_t)op->ints[ATTR_TENSOR], bk->groups = op->ints[ATTR_GROUPS], bk->ready = -1,
                bk->bits = (int)op->ints[ATTR_BITS], bk->mode = rt_comm_bucket_mode(op);
            bk->ready = ready < 0 || bk->ready == INT32_MAX ? INT32_MAX
                        : ready > bk->ready                 ? (int32_t)ready
                                                            : bk->ready;
            o->ranges[o->n_members] = (rt_overlap_range){ op->in[0].offset, rt_tensor_bytes(&op->in[0]) };
            o->members[o->n_members++] = (ov_member){ op->in[0].offset, rt_tensor_numel(&op->in[0]), 0, 0 };
            bk->floats += rt_tensor_numel(&op->in[0]);
        }
        bk->count = o->n_members - bk->first;
        bk->sizes = bk->count > 0 ? malloc((size_t)bk->count * sizeof *bk->sizes) : NULL;
        bk->member = bk->count > 0 ? malloc((size_t)bk->count * sizeof *bk->member) : NULL;
        for (int32_t k = 0; bk->sizes && bk->member && k < bk->count; k++) {
            bk->sizes[k] = o->members[bk->first + k].floats;
            bk->member[k] = (float *)(arena + o->members[bk->first + k].offset);
        }
        bk->pieces = rt_bucket_in_pieces(bk->mode, bk->groups, bk->bits, c->manifest->n_replicas);
        if (bk->count == 0 || !bk->sizes || !bk->member ||
            !(bk->buf = malloc((size_t)bk->floats * sizeof *bk->buf + 1))) {
            snprintf(err, n,
                     bk->count == 0 ? "gradient bucket %d has no all-reduce: the program is inconsistent"
                                    : "out of memory for gradient bucket %d",
                     b);
            rc = -1;
        }
    }
    if (rc == 0)
        rc = find_entries(o, tensors, n_tensors, err, n);
    if (rc == 0 && (pthread_mutex_init(&o->mu, NULL) || pthread_cond_init(&o->cv, NULL) ||
                    pthread_create(&o->thread, NULL, reduce_thread, o))) {
        snprintf(err, n, "cannot start the all-reduce thread");
        rc = -1;
    } else if (rc == 0) {
        o->thread_started = 1;
    }
    if (rc) {
        rt_overlap_close(o);
        return -1;
    }
    *out = o;
    return 0;
}

void rt_overlap_set_fetch(rt_overlap *o, rt_overlap_fetch_fn fetch, void *user)
{
    if (o)
        o->fetch = fetch, o->fetch_user = user;
}

void rt_overlap_set_trace(rt_overlap *o, struct rt_trace *trace)
{
    if (!o)
        return;
    o->ctx.trace = trace;
    rt_trace_thread(trace, 1, "gradient buckets");
}

void rt_overlap_begin_step(rt_overlap *o, int64_t step)
{
    if (!o)
        return;
    memset(o->final, 0, (size_t)o->n_tensors);
    o->launched = 0;
    pthread_mutex_lock(&o->mu); /* the thread is idle between steps (rt_overlap_finish waited) */
    o->queued = o->done = 0;
    o->ctx.step = step;
    o->ctx.micro_batch = -1;
    o->ctx.phase = PHASE_UPDATE;
    pthread_mutex_unlock(&o->mu);
}

/* Bucket b's gradients into its buffer (finalise: the micro-batches'
 * mean, in the stepper's two passes: every sum, then every mean), then
 * to the thread. */
static void launch(rt_overlap *o, int32_t b, int finalise)
{
    ov_bucket *bk = &o->buckets[b];
    for (int32_t k = bk->first; finalise && o->grad_sum && k < bk->first + bk->count; k++) {
        const ov_member *m = &o->members[k];
        const float *g = (const float *)(o->arena + m->offset);
        for (int32_t e = m->first_entry; e < m->first_entry + m->n_entries; e++) {
            float *acc = o->grad_sum + o->entries[e].acc;
            for (int64_t i = 0; i < m->floats; i++)
                acc[i] += g[i];
        }
    }
    for (int32_t k = bk->first; finalise && k < bk->first + bk->count; k++) {
        const ov_member *m = &o->members[k];
        float *g = (float *)(o->arena + m->offset);
        for (int32_t e = m->first_entry; e < m->first_entry + m->n_entries; e++) {
            const float *acc = o->grad_sum ? o->grad_sum + o->entries[e].acc : NULL;
            for (int64_t i = 0; acc && i < m->floats; i++)
                g[i] = acc[i] * o->inv_m;
            o->final[o->entries[e].tensor] = 1;
        }
    }
    rt_bucket_lay_out(bk->buf, bk->member, bk->sizes, bk->count, o->comm->manifest->n_replicas, bk->pieces, 1);
    pthread_mutex_lock(&o->mu);
    o->queued = b + 1;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    o->launched = b + 1;
}

int rt_overlap_before_op(void *user, const rt_op *op, rt_context *ctx)
{
    rt_overlap *o = user;
    int32_t index = (int32_t)(op - o->ops);
    while (o->enabled && o->launched < o->n_buckets && o->buckets[o->launched].ready < index) {
        const ov_bucket *bk = &o->buckets[o->launched];
        if (o->fetch && o->fetch(o->fetch_user, o->ranges + bk->first, bk->count, ctx))
            return -1;
        launch(o, o->launched, 1);
    }
    return 0;
}

const uint8_t *rt_overlap_final(const rt_overlap *o) { return o ? o->final : NULL; }

int rt_overlap_finish(rt_overlap *o, rt_context *ctx)
{
    if (!o)
        return 0;
    o->early += o->launched;
    o->handed += o->n_buckets;
    while (o->launched < o->n_buckets) /* final already: the stepper's accumulation made them */
        launch(o, o->launched, 0);
    double t0 = seconds_now();
    pthread_mutex_lock(&o->mu);
    while (o->done < o->queued)
        pthread_cond_wait(&o->cv, &o->mu);
    int failed = o->failed;
    if (failed)
        snprintf(ctx->msg, sizeof ctx->msg, "%s", o->msg);
    pthread_mutex_unlock(&o->mu);
    o->waited += seconds_now() - t0;
    if (failed)
        return -1;
    for (int32_t b = 0; b < o->n_buckets; b++) {
        ov_bucket *bk = &o->buckets[b];
        rt_bucket_lay_out(bk->buf, bk->member, bk->sizes, bk->count, o->comm->manifest->n_replicas, bk->pieces, 0);
    }
    return 0;
}

int32_t rt_overlap_buckets(const rt_overlap *o) { return o ? o->n_buckets : 0; }
double rt_overlap_waited(const rt_overlap *o) { return o ? o->waited : 0.0; }

void rt_overlap_counts(const rt_overlap *o, int64_t *early, int64_t *handed)
{
    *early = o ? o->early : 0;
    *handed = o ? o->handed : 0;
}

int rt_overlap_list_feedback(rt_overlap *o, rt_feedback_arrays *l)
{
    for (int32_t b = 0; o && b < o->n_buckets; b++)
        if (o->buckets[b].bits && rt_quant_feedback_list(&o->buckets[b].fb, o->buckets[b].tag, l))
            return -1;
    return 0;
}

void rt_overlap_close(rt_overlap *o)
{
    if (!o)
        return;
    if (o->thread_started) {
        pthread_mutex_lock(&o->mu);
        o->quit = 1;
        pthread_cond_broadcast(&o->cv);
        pthread_mutex_unlock(&o->mu);
        pthread_join(o->thread, NULL);
        pthread_mutex_destroy(&o->mu);
        pthread_cond_destroy(&o->cv);
    }
    for (int32_t b = 0; b < o->n_buckets && o->buckets; b++) {
        free(o->buckets[b].buf);
        free(o->buckets[b].sizes);
        free(o->buckets[b].member);
        rt_quant_feedback_free(&o->buckets[b].fb);
    }
    free(o->buckets);
    free(o->members);
    free(o->ranges);
    free(o->entries);
    free(o->final);
    free(o->scratch);
    free(o);
}
