/* baseline.c: the best single site and a plan's throughput (baseline.h). */
#include "baseline.h"

#include <math.h>
#include <string.h>

#include "plan_memory.h"
#include "simulate.h"

double baseline_simulated_step(const ir_graph *g, const cluster *c, int steps, struct diag *err)
{
    sim_result r;
    memset(&r, 0, sizeof r);
    double t = -1.0;
    if (simulate_steps(g, c, steps, 1, &r, err) == 0)
        t = sim_steady_step(&r);
    sim_result_free(&r);
    return t;
}

int baseline_best_site(const cluster *c, baseline_place_fn place, void *arg, int sim_steps, site_baseline *out,
                       struct diag *err)
{
    memset(out, 0, sizeof *out);
    out->sites = cluster_sites(c, &out->by_host);
    for (int s = 0; s < out->sites; s++) {
        cluster site;
        if (cluster_subset(c, s, out->by_host, &site))
            return diag_set(err, c->file, 0, "out of memory");
        ir_graph g;
        fence_plan plan;
        struct diag why = { 0 };
        memset(&plan, 0, sizeof plan);
        ir_graph_init(&g);
        double t = -1.0;
        /* a site counts when it can hold the model (plan_memory_check), as a user's own plan must */
        if (site.n_devices > 0 && place(arg, &site, &g, &plan, &why) == 0 &&
            plan_memory_check(&g, &site, &plan, c->file, &why) == 0)
            t = sim_steps > 0 ? baseline_simulated_step(&g, &site, sim_steps, &why) : plan.step_seconds;
        if (t > 0 && isfinite(t)) {
            out->placed++;
            if (!out->found || t < out->step_seconds) {
                out->found = 1;
                out->step_seconds = t;
                out->devices = site.n_devices;
                snprintf(out->site, sizeof out->site, "%s", site.name);
            }
        }
        ir_graph_free(&g);
        fence_plan_free(&plan);
        cluster_free(&site);
    }
    return 0;
}

void baseline_print(FILE *out, const site_baseline *b, double this_step_seconds)
{
    if (b->sites == 0) {
        fputs("best single site: the cluster is one site (one region of one host)\n", out);
        return;
    }
    if (!b->found) {
        fprintf(out, "best single site: none of its %d %s can train the model alone\n", b->sites,
                b->by_host ? "hosts" : "regions");
        return;
    }
    fprintf(out, "best single site: %s %s (%d device%s) %.2f ms/step; this plan %.3fx\n",
            b->by_host ? "host" : "region", b->site, b->devices, b->devices == 1 ? "" : "s", b->step_seconds * 1e3,
            this_step_seconds > 0 ? b->step_seconds / this_step_seconds : 0.0);
}

double baseline_step_items(const ir_graph *g, const char **unit)
{
    const ir_placement *p = &g->placement;
    double lanes = (double)(p->micro_batches > 0 ? p->micro_batches : 1) * (p->n_replicas > 0 ? p->n_replicas : 1);
    *unit = "samples";
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *x = &g->values[v];
        if (x->role != ROLE_INPUT || x->shape.rank < 1)
            continue;
        if (x->dtype == DT_I32) { /* token ids: every one is trained on */
            *unit = "tokens";
            return (double)ir_shape_numel(&x->shape) * lanes;
        }
        return (double)x->shape.dim[0] * lanes; /* images, feature rows: the batch's samples */
    }
    return 0.0;
}
