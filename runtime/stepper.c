/* stepper.c: one training step of a device program (stepper.h): the
 * micro-batches in 1F1B order (ir/pipeline_order.h), each forward's stash
 * kept until its backward, the gradients summed over micro-batches, the
 * last backward's gradients handed to the overlapped all-reduce buckets
 * (comm/overlap.c); and validation, forward only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "../ir/ir.h"
#include "../ir/pipeline_order.h"
#include "cpu/half.h"
#include "data.h"
#include "rt_error.h"
#include "stepper.h"
#include "trace.h"

/* The loader's feeds on this device (-1 when a stage holds neither). */
void program_find_feeds(const program *p, int32_t *tokens, int32_t *targets)
{
    *tokens = *targets = -1;
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        if (p->tensors[i].role != ROLE_INPUT)
            continue;
        if (p->tensors[i].feed == 0)
            *tokens = i;
        else if (p->tensors[i].feed == 1)
            *targets = i;
    }
}

/* The vocabulary the loader's ids must stay below on this device: the
 * first dim of the embedding table the tokens index, the last dim of the
 * logits cross_entropy scores the targets against (the smaller of the two
 * when both are here); 0 when neither op reads a feed here (a stage that
 * only passes them on: the op that reads them checks each id as it runs). */
int64_t program_feed_vocabulary(const program *p, int32_t tokens_at, int32_t targets_at)
{
    const rt_op *ops = (const rt_op *)fusion_ops_blob;
    int64_t vocab = 0;
    for (int32_t i = 0; i < p->manifest.n_ops; i++) {
        const rt_op *op = &ops[i];
        int64_t v = 0;
        if (op->op == OP_EMBEDDING && tokens_at >= 0 && op->in[0].offset == p->tensors[tokens_at].t.offset)
            v = op->in[1].dim[0]; /* idx (..), table (V, C) */
        else if (op->op == OP_CROSS_ENTROPY && targets_at >= 0 && op->in[1].offset == p->tensors[targets_at].t.offset)
            v = op->in[0].dim[op->in[0].rank - 1]; /* logits (.., V), targets (..) */
        if (v > 0 && (vocab == 0 || v < vocab))
            vocab = v;
    }
    return vocab;
}

/* ---- one step: 1F1B over the micro-batches ----------------------------------- */

/* The bytes of the stash's first n tensors. */
static int64_t stash_total(const program *p, int32_t n)
{
    int64_t bytes = 0;
    for (int32_t i = 0; i < n; i++)
        bytes += rt_tensor_bytes(&p->stash[i]);
    return bytes;
}

/* Micro-batch m's stash to its slot (save) or back to the arena: whole (2:
 * every stash tensor, in its whole slot), or (1) the first n_stash_replay,
 * all that a stage which keeps none whole has. */
static void stash_copy(stepper *st, int32_t m, int save, int kind)
{
    char *slot = kind == 2 ? st->whole_mem + (size_t)st->whole_slot[m] * (size_t)st->whole_bytes
                           : st->stash_mem + (size_t)(m % st->n_slots) * (size_t)st->stash_bytes;
    int32_t n = kind == 2 ? st->p->manifest.n_stash : st->p->manifest.n_stash_replay;
    for (int32_t i = 0; i < n; i++) {
        const rt_tensor *t = &st->p->stash[i];
        size_t bytes = (size_t)rt_tensor_bytes(t);
        if (save)
            memcpy(slot, st->p->arena + t->offset, bytes);
        else
            memcpy(st->p->arena + t->offset, slot, bytes);
        slot += bytes;
    }
}

/* The parameters' gradients: add this micro-batch's into the sum (m > 0),
 * or start it (m == 0); mean == 1: replace them by sum / M. */
static void gradients_accumulate(stepper *st, int32_t m, int mean)
{
    const program *p = st->p;
    float *acc = st->grad_sum, inv = 1.0f / (float)p->manifest.micro_batches;
    const uint8_t *final = rt_overlap_final(st->overlap); /* made by its bucket already */
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->role != ROLE_GRADIENT)
            continue;
        float *g = (float *)(p->arena + ti->t.offset);
        int64_t n = rt_tensor_numel(&ti->t);
        for (int64_t k = 0; k < n && !(final && final[i]); k++) {
            if (mean)
                g[k] = acc[k] * inv;
            else if (m == 0)
                acc[k] = g[k];
            else
                acc[k] += g[k];
        }
        acc += n;
    }
}

/* --trace: a micro-batch's forward or backward, or the update, as one span
 * around its ops'. */
void stepper_trace(const rt_context *ctx, const char *what, double t0)
{
    if (!ctx->trace)
        return;
    char name[64], args[64];
    if (ctx->micro_batch >= 0)
        snprintf(name, sizeof name, "%s %d", what, (int)ctx->micro_batch);
    else
        snprintf(name, sizeof name, "%s", what);
    snprintf(args, sizeof args, "{\"step\":%lld}", (long long)ctx->step);
    rt_trace_span(ctx->trace, 0, "micro-batch", name, t0, rt_trace_clock(), args);
}

/* cross_entropy's loss weight (exec.h) for the batch of (seed, step) on a
 * device that feeds the targets: the whole batch's targets (its site's
 * under diloco, all of it validating there) over the ones not masked, so
 * that every plan's loss is the mean over the same trained targets; with
 * --inputs, this device's targets alone.  1 elsewhere. */
static float loss_weight(const stepper *st, const rt_data *d, uint64_t seed, int64_t step, int validating)
{
    const program *p = st->p;
    const rt_manifest *mf = &p->manifest;
    if (st->targets_at < 0)
        return 1.0f;
    if (st->o->inputs) {
        const int32_t *t = (const int32_t *)(p->arena + p->tensors[st->targets_at].t.offset);
        int64_t n = rt_tensor_numel(&p->tensors[st->targets_at].t), trained = 0;
        for (int64_t i = 0; i < n; i++)
            trained += t[i] != OP_IGNORE_TARGET;
        return trained > 0 ? (float)((double)n / (double)trained) : 0.0f;
    }
    int diloco = mf->diloco.sync == RT_SYNC_DILOCO;
    int64_t rows = st->b * mf->micro_batches * mf->n_replicas, row0 = 0;
    if (diloco)
        rows = validating ? mf->diloco.global_rows : mf->diloco.site_rows[mf->diloco.site];
    if (diloco && !validating)
        row0 = mf->diloco.row_offset;
    return (float)rt_data_loss_weight(d, seed, step, row0, rows, st->T);
}

/* Each dropout mask on this device (an input of init dropout(p), in the
 * graph's precision) for the rows from row0 of (seed, step)'s batch;
 * validating: ones (no dropout).  0, or -1 out of memory. */
static int fill_dropout_masks(const program *p, uint64_t seed, int64_t step, int64_t row0, int validating)
{
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->role != ROLE_INPUT || ti->init_kind != INIT_DROPOUT)
            continue;
        int64_t rows = ti->t.dim[0], n = rt_tensor_numel(&ti->t) / (rows > 0 ? rows : 1);
        int half = half_dtype_bytes(ti->dtype) == 2;
        float *mask = half ? malloc((size_t)(rows * n + 1) * sizeof *mask) : (float *)(p->arena + ti->t.offset);
        if (!mask)
            return -1;
        if (validating)
            for (int64_t k = 0; k < rows * n; k++)
                mask[k] = 1.0f;
        else
            rt_dropout_mask(mask, ti->init_a, seed, step, XXH3_64bits(ti->name, strlen(ti->name)), row0, rows, n);
        if (half) {
            half_from_f32(p->arena + ti->t.offset, mask, rows * n, ti->dtype);
            free(mask);
        }
    }
    return 0;
}

static int run_forward(stepper *st, rt_context *ctx, int32_t m, int keep)
{
    program *p = st->p;
    const rt_manifest *mf = &p->manifest;
    /* This micro-batch's first row of the global batch (under diloco, of its site's share). */
    int64_t row0 = mf->diloco.row_offset + ((int64_t)mf->replica * mf->micro_batches + m) * st->b;
    if (!st->o->inputs && fill_dropout_masks(p, st->o->seed, ctx->step, row0, 0)) {
        snprintf(ctx->msg, sizeof ctx->msg, "out of memory for a dropout mask");
        return -1;
    }
    if (!st->o->inputs && (st->tokens_at >= 0 || st->targets_at >= 0)) {
        int32_t *tok = st->tokens_at >= 0 ? (int32_t *)(p->arena + p->tensors[st->tokens_at].t.offset) : NULL;
        int32_t *tgt = st->targets_at >= 0 ? (int32_t *)(p->arena + p->tensors[st->targets_at].t.offset) : NULL;
        rt_data_batch(st->data, st->o->seed, ctx->step, row0, tok, tgt, st->b, st->T);
    } else if (!st->o->inputs && st->images) {
        float *img = st->images_at >= 0 ? (float *)(p->arena + p->tensors[st->images_at].t.offset) : NULL;
        int32_t *lbl = st->labels_at >= 0 ? (int32_t *)(p->arena + p->tensors[st->labels_at].t.offset) : NULL;
        rt_image_feed_batch(st->images, ctx->step, row0, st->b, img, lbl);
    }
    ctx->micro_batch = m;
    ctx->phase = PHASE_FORWARD;
    double t0 = ctx->trace ? rt_trace_clock() : 0.0;
    /* Partial replay (the schedule pass's keep): whole while a whole slot is free. */
    int kind = 0;
    for (int32_t j = 0; keep && j < st->n_whole && kind == 0; j++) {
        int busy = 0;
        for (int32_t k = 0; k < mf->micro_batches && !busy; k++)
            busy = st->stashed[k] == 2 && st->whole_slot[k] == j;
        if (!busy)
            kind = 2, st->whole_slot[m] = j;
    }
    if (keep && kind == 0)
        kind = 1;
    ctx->keep_stash = kind;
    int rc = fusion_forward(p->arena, ctx);
    ctx->keep_stash = 0;
    if (rc != 0)
        return -1;
    stepper_trace(ctx, "forward", t0);
    if (mf->loss >= 0)
        st->loss_sum += *(float *)(p->arena + p->tensors[mf->loss].t.offset);
    if (kind) {
        stash_copy(st, m, 1, kind);
        st->stashed[m] = (char)kind;
    }
    return 0;
}

static int run_backward(stepper *st, rt_context *ctx, int32_t m)
{
    ctx->micro_batch = m;
    if (st->stashed[m]) {
        int whole = st->stashed[m] == 2, replays = st->p->manifest.recompute && !whole;
        stash_copy(st, m, 0, st->stashed[m]);
        st->stashed[m] = 0;
        /* replaying, the forward run again takes it up (ctx->replay); 2: all of it */
        ctx->stash_restored = replays ? 0 : whole ? 2 : 1;
        if (replays) { /* the stash is the forward's inputs: run it again */
            ctx->phase = PHASE_FORWARD;
            ctx->replay = 1;
            int rc = fusion_forward(st->p->arena, ctx);
            ctx->replay = 0;
            if (rc != 0)
                return -1;
        }
    }
    ctx->phase = PHASE_BACKWARD;
    if (st->overlap && m == st->p->manifest.micro_batches - 1) { /* the gradients become final */
        ctx->before_op = rt_overlap_before_op;
        ctx->before_op_user = st->overlap;
    }
    double t0 = ctx->trace ? rt_trace_clock() : 0.0;
    int rc = fusion_backward(st->p->arena, ctx);
    ctx->before_op = NULL;
    ctx->stash_restored = 0;
    if (rc == 0)
        stepper_trace(ctx, "backward", t0);
    if (rc != 0)
        return -1;
    if (st->p->manifest.micro_batches > 1)
        gradients_accumulate(st, m, 0);
    return 0;
}

/* Forward and backward of every micro-batch in 1F1B order; the step's mean
 * loss into *loss (NAN on a device without it). */
int stepper_step(stepper *st, rt_context *ctx, float *loss)
{
    const rt_manifest *mf = &st->p->manifest;
    int32_t M = mf->micro_batches;
    /* The order: +m a forward, -(m+1) a backward. */
    int32_t *order = st->order, n = pipeline_order(M, mf->warmup, order);
    st->loss_sum = 0.0;
    ctx->loss_weight = loss_weight(st, st->data, st->o->seed, ctx->step, 0);
    rt_overlap_begin_step(st->overlap, ctx->step);
    for (int32_t i = 0; i < n; i++) {
        int32_t m = order[i] >= 0 ? order[i] : -order[i] - 1;
        /* A forward keeps what its backward reads unless that backward is next. */
        int rc = order[i] >= 0 ? run_forward(st, ctx, m, !(i + 1 < n && order[i + 1] == -(m + 1)))
                               : run_backward(st, ctx, m);
        if (rc)
            return -1;
    }
    if (M > 1)
        gradients_accumulate(st, 0, 1);
    *loss = mf->loss >= 0 ? (float)(st->loss_sum / M) : NAN;
    if (mf->loss >= 0 && mf->n_replicas > 1 && (!st->comm || rt_comm_mean_over_replicas(st->comm, loss, 1, -1, ctx)))
        return -1;
    if (mf->loss >= 0) /* the step's loss where the log, checkpoints and --dump-grads find it */
        *(float *)(st->p->arena + st->p->tensors[mf->loss].t.offset) = *loss;
    return 0;
}

/* ---- validation: forward only, on fixed held-out batches ---------------------- */

/* The validation windows' seed: fixed, not --seed, so that every
 * validation of a run, and of any run, sees the same windows. */
#define VAL_SEED 0x7A11DA7Aull

/* The mean loss after `step`'s update over --val-batches K fixed batches
 * of the training batch's shape (*val_loss; NAN on a device without the
 * loss).  Batch k's rows come from (VAL_SEED, k, row) as a training
 * step's come from (seed, step, row): this replica's micro-batches hold
 * its rows of the global batch.  Only fusion_forward runs: no gradient, no
 * update; the loss tensor is put back, so the log, checkpoints and
 * --dump-grads see the training step's.  Every device of the run calls it
 * after the same steps, a pipeline's stages passing the activations on:
 * its messages are tagged step -step (no training message has a step below
 * 1), micro-batches 0 .. K*M-1 (K*P*R*M-1 below); micro-batch 0 sends the parameters a stage
 * lends another (ATTR_ONCE), so a stage reads this step's updated copy.
 * The training's RNG is never drawn from (batches are functions of their
 * seed): the training goes on bit for bit as without validation.
 *
 * --sync diloco: the sites agree on the anchor bit for bit, and only
 * replica 0 of each stage holds it (main.c swaps it in), so site 0's
 * replica 0 chain validates alone, running the whole global batch's rows
 * as P = global_rows / site_rows passes of every replica's micro-batches:
 * the same windows as an exact plan of the same global batch, and no mean
 * over replicas. */
int stepper_validate(stepper *st, const rt_context *train_ctx, int64_t step, float *val_loss, char *err,
                     size_t err_size)
{
    program *p = st->p;
    const rt_manifest *mf = &p->manifest;
    int32_t M = mf->micro_batches;
    int64_t K = st->o->val_batches;
    rt_context ctx = *train_ctx;
    ctx.step = -step;
    ctx.replay = 0;
    ctx.before_op = NULL;
    ctx.inject_overflow = 0;
    ctx.msg[0] = '\0';
    float *loss_at = mf->loss >= 0 ? (float *)(p->arena + p->tensors[mf->loss].t.offset) : NULL;
    float kept = loss_at ? *loss_at : 0.0f;
    double recv_wait = st->comm ? st->comm->recv_wait : 0.0; /* AdaTopK measures the training's waits */
    double sum = 0.0, t0 = ctx.trace ? rt_trace_clock() : 0.0;
    int rc = 0;
    int diloco = mf->diloco.sync == RT_SYNC_DILOCO;
    int64_t R = diloco ? mf->n_replicas : 1; /* the replicas whose rows run here */
    int64_t site_rows = diloco ? mf->diloco.site_rows[mf->diloco.site] : 0;
    int64_t per_batch = (diloco ? mf->diloco.global_rows / site_rows : 1) * R * M; /* micro-batches of a batch */
    if (!st->o->inputs && fill_dropout_masks(p, 0, 0, 0, 1))                       /* validation drops nothing */
        return rt_error(err, err_size, "out of memory for a dropout mask");
    for (int64_t k = 0; k < K && rc == 0; k++) {
        ctx.loss_weight = st->val ? loss_weight(st, st->val, VAL_SEED, k, 1) : 1.0f;
        for (int64_t j = 0; j < per_batch && rc == 0; j++) {
            if (st->val) {
                int64_t pass = j / (R * M), r = diloco ? j / M % R : mf->replica, m = j % M;
                int64_t row0 = pass * site_rows + (r * M + m) * st->b;
                int32_t *tok = st->tokens_at >= 0 ? (int32_t *)(p->arena + p->tensors[st->tokens_at].t.offset) : NULL;
                int32_t *tgt = st->targets_at >= 0 ? (int32_t *)(p->arena + p->tensors[st->targets_at].t.offset) : NULL;
                rt_data_batch(st->val, VAL_SEED, k, row0, tok, tgt, st->b, st->T);
            }
            ctx.micro_batch = (int32_t)(k * per_batch + j);
            ctx.phase = PHASE_FORWARD;
            rc = fusion_forward(p->arena, &ctx);
            if (rc == 0 && loss_at)
                sum += *loss_at;
        }
    }
    *val_loss = loss_at ? (float)(sum / (double)(K * per_batch)) : NAN;
    if (rc == 0 && loss_at && mf->n_replicas > 1 && !diloco &&
        (!st->comm || rt_comm_mean_over_replicas(st->comm, val_loss, 1, -1, &ctx)))
        rc = -1;
    stepper_validation_end(st, &ctx, step, loss_at, kept, recv_wait, t0, rc == 0);
    if (rc)
        snprintf(err, err_size, "validation: %s", ctx.msg[0] ? ctx.msg : "the loss's mean over the replicas failed");
    return rc;
}

void stepper_validation_end(stepper *st, const rt_context *ctx, int64_t step, float *loss_at, float kept,
                            double recv_wait, double t0, int ok)
{
    if (loss_at)
        *loss_at = kept;
    if (st->comm)
        st->comm->recv_wait = recv_wait;
    if (ok && ctx->trace) {
        char args[64];
        snprintf(args, sizeof args, "{\"step\":%lld}", (long long)step);
        rt_trace_span(ctx->trace, 0, "micro-batch", "validation", t0, rt_trace_clock(), args);
    }
}

int stepper_init(stepper *st, program *p, rt_comm *comm, rt_data *data, train_images *images, const run_options *o)
{
    memset(st, 0, sizeof *st);
    st->p = p;
    st->comm = comm;
    st->data = data;
    st->o = o;
    const rt_manifest *m = &p->manifest;
    program_find_feeds(p, &st->tokens_at, &st->targets_at);
    int32_t feed = st->tokens_at >= 0 ? st->tokens_at : st->targets_at;
    if (feed >= 0) {
        st->b = p->tensors[feed].t.dim[0];
        st->T = p->tensors[feed].t.dim[1];
    }
    st->images_at = st->labels_at = -1;
    if (images && images->active) {
        st->images = &images->feed;
        st->images_at = images->images_at, st->labels_at = images->labels_at;
        st->b = p->tensors[st->images_at >= 0 ? st->images_at : st->labels_at].t.dim[0];
    }
    /* At most warm-up + 1 micro-batches wait for their backward at once. */
    st->n_slots = (m->warmup < m->micro_batches ? m->warmup : m->micro_batches) + 1;
    st->stash_bytes = stash_total(p, m->n_stash_replay);
    st->stash_mem = malloc((size_t)st->n_slots * (size_t)st->stash_bytes + 1);
    st->n_whole = m->recompute && m->keep > 0 ? (m->keep < st->n_slots ? m->keep : st->n_slots) : 0;
    st->whole_bytes = stash_total(p, m->n_stash);
    st->whole_mem = malloc((size_t)st->n_whole * (size_t)st->whole_bytes + 1);
    st->whole_slot = malloc(((size_t)m->micro_batches + 1) * sizeof *st->whole_slot);
    st->stashed = calloc((size_t)m->micro_batches + 1, 1);
    st->order = malloc((2 * (size_t)m->micro_batches + 1) * sizeof *st->order);
    for (int32_t i = 0; i < m->n_tensors; i++)
        if (p->tensors[i].role == ROLE_GRADIENT)
            st->grad_floats += rt_tensor_numel(&p->tensors[i].t);
    st->grad_sum = m->micro_batches > 1 ? malloc((size_t)st->grad_floats * sizeof(float) + 1) : NULL;
    if (!st->stash_mem || !st->whole_mem || !st->whole_slot || !st->stashed || !st->order ||
        (m->micro_batches > 1 && !st->grad_sum))
        return fail("cannot allocate %lld bytes of stash and %lld of gradient sums",
                    (long long)(st->n_slots * st->stash_bytes), (long long)st->grad_floats * 4);
    char why[512];
    /* On a CUDA device p->arena is the host staging copy: a bucket's
     * gradients come down to it before the thread takes them (cuda.h). */
    if (comm && rt_overlap_open(&st->overlap, comm, (const rt_op *)fusion_ops_blob, m->n_ops, p->tensors, m->n_tensors,
                                p->arena, st->grad_sum, m->micro_batches, !o->no_overlap, why, sizeof why))
        return fail("%s", why);
    if (p->cuda)
        rt_overlap_set_fetch(st->overlap, rt_cuda_fetch, p->cuda);
    if (comm)
        comm->overlap = st->overlap != NULL;
    return 0;
}

void stepper_free(stepper *st)
{
    free(st->stash_mem);
    free(st->whole_mem);
    free(st->whole_slot);
    free(st->stashed);
    rt_overlap_close(st->overlap);
    free(st->grad_sum);
    free(st->order);
}
