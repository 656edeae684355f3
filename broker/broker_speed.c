/* broker_speed.c: stragglers, from the devices' step reports (broker_speed.h). */
#include "broker_speed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void broker_speed_step(broker *b, member *m, int64_t step, double compute, double planned)
{
    m->ratio_step = step;
    if (!(planned > 0) || !(compute > 0))
        return;
    m->ratio = compute / planned;
    double fastest = m->ratio;
    int others = 0;
    for (int i = 0; i < b->n; i++) { /* the devices of this epoch that reported lately */
        const member *o = &b->mem[i];
        if (o == m || strcmp(o->m.role, "device") != 0 || o->ended || o->ratio_step < step - 2 || !(o->ratio > 0))
            continue;
        others++;
        if (o->ratio < fastest)
            fastest = o->ratio;
    }
    double slow = m->ratio / fastest;
    if (others == 0 || slow < STRAGGLER_RATIO) {
        m->slow_steps = 0, m->slow_sum = 0;
        return;
    }
    m->slow_steps++, m->slow_sum += slow;
    if (m->slow_steps < STRAGGLER_STEPS || m->flagged || b->straggler[0] || b->switching)
        return;
    m->flagged = 1;
    double measured = m->slow_sum / m->slow_steps;
    int d = cluster_find_device(&b->c, m->m.bundle_device);
    double had = d >= 0 && b->c.devices[d].slowdown > 1 ? b->c.devices[d].slowdown : 1.0;
    snprintf(b->straggler, sizeof b->straggler, "%s", m->m.bundle_device);
    b->straggler_slowdown = measured * had;
    broker_say(b, "straggler", m->m.device,
               "%s ran %.2fx slower than planned for %d steps in a row (its compute %.1f ms a step against %.1f ms "
               "planned, at step %lld; the fastest device %.2fx its plan): a plan with it %.2fx slower than its "
               "peaks is weighed at the next complete checkpoint",
               m->m.device, measured, m->slow_steps, compute * 1e3, planned * 1e3, (long long)step, fastest,
               b->straggler_slowdown);
}

void broker_speed_line(broker *b, const char *line)
{
    const char *at = strstr(line, " ms/step");
    if (!at)
        return;
    const char *p = at;
    while (p > line && p[-1] != ' ')
        p--;
    double ms = atof(p);
    if (ms > 0)
        b->step_ms[b->n_step_ms++ % (int)(sizeof b->step_ms / sizeof b->step_ms[0])] = ms;
    if (b->check_estimate_ms > 0 && b->n_step_ms == 20) { /* a new plan: as fast as estimated? */
        double measured = broker_speed_step_ms(b);
        broker_say(b, "speed", NULL,
                   "the new plan's steps 5-20: %.2f ms a step against its estimate of %.2f ms (%.0f%% of "
                   "the estimated speed)",
                   measured, b->check_estimate_ms, 100 * b->check_estimate_ms / measured);
        b->check_estimate_ms = 0;
    }
}

double broker_speed_step_ms(const broker *b)
{
    int n = b->n_step_ms < 16 ? b->n_step_ms : 16;
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += b->step_ms[i];
    return n ? sum / n : 0;
}
