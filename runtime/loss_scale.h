/* loss_scale.h: fp16's dynamic loss scaling, the device's side of it.
 *
 * fp16 keeps 10 bits of mantissa and stops at 2^-24: many gradients of a
 * network trained in it would flush to zero.  So the loss's gradient seed
 * is S (the scale) instead of 1, every gradient comes out S times larger,
 * and the update divides S out again (the IR's clip_scale op).  When some
 * gradient overflowed (inf or NaN anywhere: the global sum of squares the
 * devices agree on is not finite), every AdamW leaves its parameter alone,
 * the step is skipped, and S is halved; after `window` good steps in a row
 * S doubles.  This is torch.cuda.amp.GradScaler's rule with its defaults
 * (S = 65536, window 2000, factors 2 and 1/2).
 *
 * Every device of a run sees the same sum of squares (the comm pass sends
 * each stage's part to all), so every device decides the same and their
 * scales stay equal without a message of their own.
 */
#ifndef FUSION_RT_LOSS_SCALE_H
#define FUSION_RT_LOSS_SCALE_H

#include <stddef.h>
#include <stdint.h>

#define RT_LOSS_SCALE_INITIAL 65536.0f
#define RT_LOSS_SCALE_WINDOW  2000
#define RT_LOSS_SCALE_MIN     1.0f /* halving below it means the run diverged */

typedef struct {
    float scale;     /* S this step                                     */
    int64_t window;  /* good steps in a row before S doubles            */
    int64_t good;    /* good steps since the last change                */
    int64_t skipped; /* steps skipped so far (AdamW's t = step - skipped) */
} rt_loss_scaler;

void rt_loss_scaler_init(rt_loss_scaler *s, float initial, int64_t window);
/* After a step's update: overflowed says whether the step was skipped.
 * Returns 1 when S changed, with what happened in note ("overflow: step
 * skipped, loss scale 65536 -> 32768"), else 0 (note ""). */
int rt_loss_scaler_update(rt_loss_scaler *s, int overflowed, char *note, size_t size);

#endif
