/* plan_idle.c: why a plan leaves devices out (plan_idle.h).
 *
 * OP-Fence may find that some devices cost more than they add (a slow
 * link to the others, too little work a step to hide a transfer behind).
 * A user who gave four devices and got two programs deserves the reason
 * in numbers: the best plan this compiler finds when it must use every
 * device (each shape S stages x R replicas with S R = N, by the same
 * scheduler), its estimated step against the plan's, what limits it, and
 * what would make the devices pay.
 */
#include "plan_idle.h"

#include <math.h>
#include <string.h>

/* Every device of c that plan p uses: used[d] = 1. */
static void mark_used(const cluster *c, const fence_plan *p, int *used)
{
    memset(used, 0, (size_t)c->n_devices * sizeof *used);
    for (int32_t k = 0; k < p->n_stages * p->n_replicas; k++)
        if (p->devices[k] >= 0 && p->devices[k] < c->n_devices)
            used[p->devices[k]] = 1;
}

int plan_explain_idle(FILE *out, const options *o, const placed_model *m)
{
    const cluster *c = &m->c;
    int used[512];
    if (c->n_devices > (int)(sizeof used / sizeof used[0]))
        return 0;
    mark_used(c, &m->plan, used);
    char idle[1024] = "";
    int n_idle = 0;
    for (int d = 0; d < c->n_devices; d++)
        if (!used[d])
            snprintf(idle + strlen(idle), sizeof idle - strlen(idle), "%s%s", n_idle++ ? ", " : "", c->devices[d].name);
    if (n_idle == 0)
        return 0;
    if (o->stages > 0 || o->replicas > 0) {
        fprintf(out, "idle: %s (the --stages/--replicas asked for use %d of the %d devices)\n", idle,
                m->plan.n_stages * m->plan.n_replicas, c->n_devices);
        return n_idle;
    }
    /* The slowest link from an idle device to a used one: what they would talk over. */
    double bandwidth = INFINITY, latency = 0.0;
    int from = -1, to = -1;
    for (int a = 0; a < c->n_devices; a++)
        for (int b = 0; !used[a] && b < c->n_devices; b++) {
            double bw, lat;
            if (!used[b])
                continue;
            cluster_link_between(c, a, b, &bw, &lat);
            if (bw < bandwidth)
                bandwidth = bw, latency = lat, from = a, to = b;
        }
    /* The best plan that uses every device. */
    int N = c->n_devices;
    double best = INFINITY;
    int best_s = 0;
    char why_none[DIAG_MSG_MAX] = "";
    for (int S = 1; S <= N; S++) {
        if (N % S != 0)
            continue;
        options every = *o;
        every.stages = S;
        every.replicas = N / S;
        every.dump_ir = NULL;
        placed_model alt;
        struct diag err = { 0 };
        if (placed_load(&alt, &every, 1, &err) == 0) {
            if (alt.plan.step_seconds < best)
                best = alt.plan.step_seconds, best_s = S;
        } else if (!why_none[0]) {
            snprintf(why_none, sizeof why_none, "%s", err.msg);
        }
        placed_free(&alt);
    }
    fprintf(out, "idle: %s", idle);
    if (from >= 0 && !cluster_has_path(c, from, to))
        fprintf(out, ": %s host %s and %s's host %s both accept no connection (inbound=\"false\"): no path joins them",
                n_idle == 1 ? "its" : "the idle", c->hosts[c->devices[from].host].name, c->devices[to].name,
                c->hosts[c->devices[to].host].name);
    else if (from >= 0 && isfinite(bandwidth))
        fprintf(out, ": %s %.4g Mbps, %.4g ms link to %s costs more than %s add", n_idle == 1 ? "its" : "their",
                bandwidth * 8.0 / 1e6, latency * 1e3, c->devices[to].name, n_idle == 1 ? "it would" : "they would");
    if (from >= 0 && !cluster_has_path(c, from, to)) {
        fprintf(out, "; the plans found with every device need that path\n");
        return n_idle;
    }
    if (!isfinite(best)) {
        fprintf(out, "; no plan with every device could be made (%s)\n", why_none[0] ? why_none : "none fits");
        return n_idle;
    }
    fprintf(out,
            ".\n  With every device the best plan found (%d stage%s x %d replica%s) estimates %.2f ms a step, "
            "this plan %.2f ms.\n",
            best_s, best_s == 1 ? "" : "s", N / best_s, N / best_s == 1 ? "" : "s", best * 1e3,
            m->plan.step_seconds * 1e3);
    if (best > m->plan.step_seconds)
        fprintf(out,
                "  To use %s: more work a step to hide the transfers behind (a larger --set batch=), or each "
                "site training apart, averaging every H steps (--sync diloco).\n",
                n_idle == 1 ? "it" : "them");
    return n_idle;
}
