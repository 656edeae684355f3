/* validate_images.c: an image classifier's validation over the whole
 * held-out set (--val-data with --val-every): its mean loss and top-1
 * accuracy (stepper.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "rt_error.h"
#include "stepper.h"
#include "trace.h"

/* The set's N images in batches of the global batch's G rows, ceil(N/G)
 * of them: row r of batch k is image k·G + r, neither shuffled nor
 * augmented, and rows past the end (the last batch's) run but are not
 * counted.  Each micro-batch's forward runs on every device of the plan,
 * as in training; the device that holds the logits and the labels scores
 * each counted row on the host, from the logits (cross-entropy in double,
 * and whether its largest logit is its label's: ties count as wrong), and
 * the replicas' sums are averaged (their ratio is the whole set's).  The
 * loss tensor is put back, so the log and checkpoints see the training
 * step's, and the training's batches are not touched. */
int stepper_validate_images(stepper *st, rt_image_feed *val, const rt_context *train_ctx, int64_t step, float *val_loss,
                            float *val_acc, char *err, size_t err_size)
{
    program *p = st->p;
    const rt_manifest *mf = &p->manifest;
    int32_t M = mf->micro_batches;
    int64_t G = val->global_rows, N = val->d->n, batches = (N + G - 1) / G;
    rt_context ctx = *train_ctx;
    ctx.step = -step;
    ctx.replay = 0;
    ctx.before_op = NULL;
    ctx.inject_overflow = 0;
    ctx.loss_weight = 1.0f;
    ctx.msg[0] = '\0';
    float *loss_at = mf->loss >= 0 ? (float *)(p->arena + p->tensors[mf->loss].t.offset) : NULL;
    float kept = loss_at ? *loss_at : 0.0f;
    const rt_tensor *logits = mf->loss >= 0 && mf->logits >= 0 ? &p->tensors[mf->logits].t : NULL;
    int64_t classes = logits ? logits->dim[logits->rank - 1] : 0;
    float *img = st->images_at >= 0 ? (float *)(p->arena + p->tensors[st->images_at].t.offset) : NULL;
    int32_t *lbl = st->labels_at >= 0 ? (int32_t *)(p->arena + p->tensors[st->labels_at].t.offset) : NULL;
    double recv_wait = st->comm ? st->comm->recv_wait : 0.0, t0 = ctx.trace ? rt_trace_clock() : 0.0;
    double loss_sum = 0.0, correct = 0.0, counted = 0.0;
    int rc = 0;
    for (int64_t k = 0; k < batches && rc == 0; k++)
        for (int32_t m = 0; m < M && rc == 0; m++) {
            int64_t first = k * G + ((int64_t)mf->replica * M + m) * st->b;
            rt_image_feed_rows(val, first, st->b, img, lbl);
            ctx.micro_batch = (int32_t)(k * M + m);
            ctx.phase = PHASE_FORWARD;
            rc = fusion_forward(p->arena, &ctx);
            if (rc != 0 || !logits || !lbl)
                continue;
            rt_overlap_range range = { .offset = logits->offset, .bytes = rt_tensor_bytes(logits) };
            if (p->cuda && (rc = rt_cuda_fetch(p->cuda, &range, 1, &ctx)) != 0)
                continue;
            const float *z = (const float *)(p->arena + logits->offset);
            for (int64_t r = 0; r < st->b && first + r < N; r++, z += classes) {
                int64_t best = 0;
                int tie = 0; /* another logit equals the largest */
                double mx = z[0], s = 0.0;
                for (int64_t c = 1; c < classes; c++)
                    if (z[c] > mx)
                        mx = z[c], best = c, tie = 0;
                    else if (z[c] == mx)
                        tie = 1;
                for (int64_t c = 0; c < classes; c++)
                    s += exp((double)z[c] - mx);
                loss_sum += log(s) + mx - z[lbl[r]];
                correct += !tie && best == lbl[r];
                counted += 1.0;
            }
        }
    float sums[3] = { (float)loss_sum, (float)correct, (float)counted };
    if (rc == 0 && logits && mf->n_replicas > 1 &&
        (!st->comm || rt_comm_mean_over_replicas(st->comm, sums, 3, -1, &ctx)))
        rc = -1;
    *val_loss = logits && sums[2] > 0 ? sums[0] / sums[2] : NAN;
    *val_acc = logits && sums[2] > 0 ? sums[1] / sums[2] : NAN;
    stepper_validation_end(st, &ctx, step, loss_at, kept, recv_wait, t0, rc == 0);
    if (rc)
        rt_error(err, err_size, "validation: %s", ctx.msg[0] ? ctx.msg : "the sums' mean over the replicas failed");
    return rc ? -1 : 0;
}
