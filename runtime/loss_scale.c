/* loss_scale.c: the scaler's rule (loss_scale.h). */
#include "loss_scale.h"

#include <stdio.h>

void rt_loss_scaler_init(rt_loss_scaler *s, float initial, int64_t window)
{
    s->scale = initial > 0 ? initial : RT_LOSS_SCALE_INITIAL;
    s->window = window > 0 ? window : RT_LOSS_SCALE_WINDOW;
    s->good = 0;
    s->skipped = 0;
}

int rt_loss_scaler_update(rt_loss_scaler *s, int overflowed, char *note, size_t size)
{
    float before = s->scale;
    if (size)
        note[0] = '\0';
    if (overflowed) {
        s->skipped++;
        s->good = 0;
        s->scale *= 0.5f;
        snprintf(note, size, "gradients overflowed: step skipped, loss scale %g -> %g", (double)before,
                 (double)s->scale);
        return 1;
    }
    if (++s->good < s->window)
        return 0;
    s->good = 0;
    s->scale *= 2.0f;
    snprintf(note, size, "%lld good steps: loss scale %g -> %g", (long long)s->window, (double)before,
             (double)s->scale);
    return 1;
}
