/* broker_links.c: links re-measured from a run's traffic (broker_links.h). */
#include "broker_links.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../frontend/units.h"

/* The watch on the link from device `from` to `to` in this epoch (a new
 * one, when there is room: else NULL). */
static link_watch *watch_of(broker *b, const char *from, const char *to)
{
    link_watch *free_slot = NULL;
    for (int i = 0; i < b->n_watch; i++) {
        link_watch *w = &b->watch[i];
        if (w->epoch != b->epoch) {
            if (!free_slot)
                free_slot = w;
        } else if (strcmp(w->from, from) == 0 && strcmp(w->to, to) == 0) {
            return w;
        }
    }
    if (!free_slot && b->n_watch < MAX_WATCH)
        free_slot = &b->watch[b->n_watch++];
    if (free_slot) {
        memset(free_slot, 0, sizeof *free_slot);
        free_slot->epoch = b->epoch;
        snprintf(free_slot->from, sizeof free_slot->from, "%s", from);
        snprintf(free_slot->to, sizeof free_slot->to, "%s", to);
    }
    return free_slot;
}

/* w drifted: the two hosts' link, with its mean measured bandwidth, is
 * what the next complete checkpoint weighs. */
static void drifted(broker *b, link_watch *w, int64_t step)
{
    int da = cluster_find_device(&b->c, w->from), db = cluster_find_device(&b->c, w->to);
    if (da < 0 || db < 0)
        return; /* (a name the run's cluster does not hold: nothing to write) */
    w->flagged = 1;
    const cluster_host *ha = &b->c.hosts[b->c.devices[da].host], *hb = &b->c.hosts[b->c.devices[db].host];
    double declared, latency;
    cluster_link_between(&b->c, da, db, &declared, &latency);
    snprintf(b->drift_from, sizeof b->drift_from, "%s", ha->name);
    snprintf(b->drift_to, sizeof b->drift_to, "%s", hb->name);
    b->drift_bandwidth = w->bytes_sum / w->net_busy_sum;
    b->drift_latency = latency;
    char measured[32], was[32];
    units_format(b->drift_bandwidth, UNIT_BANDWIDTH, measured, sizeof measured);
    units_format(declared, UNIT_BANDWIDTH, was, sizeof was);
    broker_say(b, "link", w->from,
               "the link %s -> %s (hosts %s, %s) carried %s for %d steps in a row against %s declared (busy %.1f ms a "
               "step against %.1f ms planned, at step %lld): a plan with the measured link is weighed at the next "
               "complete checkpoint",
               w->from, w->to, ha->name, hb->name, measured, w->steps, was, w->busy_sum / w->steps * 1e3,
               w->planned_sum / w->steps * 1e3, (long long)step);
}

void broker_links_report(broker *b, member *m, const char *rest)
{
    long long step;
    double wall;
    int at = 0;
    if (sscanf(rest, "%lld %lf %n", &step, &wall, &at) < 2 || !(wall > 0))
        return;
    const char *p = rest + at;
    char peer[128];
    double bytes, busy, planned, measured, declared;
    int used = 0;
    while (sscanf(p, "%127s %lf %lf %lf %lf %lf %n", peer, &bytes, &busy, &planned, &measured, &declared, &used) == 6) {
        p += used;
        link_watch *w = watch_of(b, m->m.bundle_device, peer);
        if (!w || step <= w->step) /* (a report sent again: taken once) */
            continue;
        w->step = step;
        double ratio = declared > 0 ? measured / declared : 0;
        int slower = ratio <= 1 / LINK_DRIFT && busy - planned >= LINK_SHARE * wall,
            faster = ratio >= LINK_DRIFT && planned - busy >= LINK_SHARE * wall;
        if (!(measured > 0) || !(slower || faster)) {
            w->steps = 0, w->bytes_sum = w->net_busy_sum = w->busy_sum = w->planned_sum = 0;
            continue;
        }
        /* (the steps' bytes over their seconds on the wire: a step's own
         * ratio, averaged, would weigh a short step as much as a long one) */
        w->steps++, w->bytes_sum += bytes, w->net_busy_sum += bytes / measured;
        w->busy_sum += busy, w->planned_sum += planned;
        if (w->steps >= LINK_STEPS && !w->flagged && !b->drift_from[0] && !b->switching)
            drifted(b, w, step);
    }
}
