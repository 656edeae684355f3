/* quant_allreduce.h: the quantised exchange that averages a stage's
 * gradients over replicas in different regions (the comm pass's `bits` on
 * its allreduce ops; passes/allreduce_plan.h says when and what it costs).
 *
 * x[n] is cut into R chunks, chunk q = [n q / R, n (q + 1) / R), owned by
 * replica q.  Two rounds:
 *   1. to every other replica q, chunk q of (x + mine) as rows of
 *      ALLREDUCE_QUANT_COLS values (the tail row zero-padded) quantised to
 *      `bits` (quant.h, to nearest); mine[chunk q] := what that dropped.
 *      The owner sums its own chunk (exact) and the R-1 it receives, in
 *      replica order, and divides by R;
 *   2. the owner quantises (mean + owned), owned := what that dropped, and
 *      sends the encoding to every other replica; each replica, the owner
 *      too, takes the decoded mean for that chunk.
 * So every replica ends with the same bits, and what a step's rounding
 * dropped goes into the next step's (error feedback at both ends).
 * At bits ALLREDUCE_DIRECT_BITS (32) the chunks and means go as f32, as
 * they are: nothing is dropped, nothing fed back (the direct exchange:
 * exact, for small gradients over far replicas).  A
 * value that is not finite drops nothing (a step with an overflowed
 * fp16 gradient is skipped; its NaNs must not stay in the feedback).
 * Messages: micro_batch -2 (round 1) and -3 (round 2), tensor = the
 * bucket's tag, codec FU_CODEC_QUANT (FU_CODEC_RAW_F32 at 32 bits).
 *
 * Use (one state per bucket, kept across steps; one thread at a time):
 *
 *     rt_quant_feedback fb = { 0 };
 *     if (rt_quant_mean(hub, devices, R, me, x, n, tag, 8, step, &fb, err, sizeof err) != 0) ...
 *     ...
 *     rt_quant_feedback_free(&fb);
 */
#ifndef FUSION_RT_QUANT_ALLREDUCE_H
#define FUSION_RT_QUANT_ALLREDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "feedback.h"

struct fu_hub;

typedef struct {
    int64_t n;           /* the bucket's floats, fixed at first use           */
    int64_t chunk;       /* n / R + 1: room for the longest chunk              */
    float *mine;         /* [n] what round 1's rounding dropped, per chunk     */
    float *owned;        /* [chunk] what round 2's rounding of our chunk dropped */
    float *sum;          /* [chunk] the owner's sum                             */
    float *pad, *dec;    /* [rows * ALLREDUCE_QUANT_COLS] a chunk, padded       */
    unsigned char *wire; /* one chunk's encoding                                */
    size_t wire_cap;
} rt_quant_feedback;

/* x[n] := the mean over R replicas (devices[q]: replica q's device; this
 * is replica me) by the exchange at `bits` (8, 4 or 32), message id tag,
 * this step's number.  0, or -1 with err naming the peer and why. */
int rt_quant_mean(struct fu_hub *hub, const int32_t *devices, int32_t R, int32_t me, float *x, int64_t n, int32_t tag,
                  int bits, int64_t step, rt_quant_feedback *fb, char *err, size_t err_size);
void rt_quant_feedback_free(rt_quant_feedback *fb);

/* The feedback's arrays made now (zero) for a bucket of n floats over R
 * replicas at `bits`, as rt_quant_mean makes them at its first call: so
 * that a resumed run can fill them first.  0, or -1 with err. */
int rt_quant_feedback_prepare(rt_quant_feedback *fb, int64_t n, int32_t R, int bits, char *err, size_t err_size);
/* The bucket with message id tag's feedback as named arrays (feedback.h):
 * listed into l (not copied), or taken back from a checkpoint's. */
int rt_quant_feedback_list(rt_quant_feedback *fb, int32_t tag, rt_feedback_arrays *l);
void rt_quant_feedback_restore(rt_quant_feedback *fb, int32_t tag, const rt_feedback_arrays *l);

#endif
