/* diloco.c: planning --sync diloco (diloco.h). */
#include "diloco.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../runtime/atomic_file.h"
#include "../ir/ops.h"
#include "../runtime/comm/quant.h"
#include "baseline.h"
#include "plan_report.h"

void diloco_plan_free(diloco_plan *dp)
{
    for (int32_t k = 0; k < dp->n_sites; k++) {
        cluster_free(&dp->site[k]);
        ir_graph_free(&dp->g[k]);
        fence_plan_free(&dp->plan[k]);
        free(dp->map[k]);
    }
    memset(dp, 0, sizeof *dp);
}

/* Its holder in site k (replica 0 of the stage that updates it), as a
 * device of the whole cluster; -1 none. */
static int32_t holder(const diloco_plan *dp, int32_t k, const char *name)
{
    int32_t s = optimizer_update_stage(&dp->g[k], name);
    const ir_placement *p = &dp->g[k].placement;
    return s < 0 ? -1 : dp->map[k][p->device[s * p->n_replicas]];
}

/* The memory traffic of the outer step, bytes a parameter element, on
 * its holder (runtime/comm/diloco.c, two sites, 8- or 4-bit rows): the
 * change encoded with error feedback (start, param, residual read; the
 * change written, encoded, decoded; the residual written: ~37), the
 * changes gathered and summed (~33), the outer step (sum, anchor: ~12),
 * the parameter set from the anchor and the start from the parameter
 * (~16-24).  Priced at the holder's memory bandwidth: the arithmetic is
 * a few passes over memory, and it is not hidden by the round of delay. */
#define OUTER_BYTES_PER_ELEMENT 104.0

/* X, C, A and the bytes (diloco.h), for the plans and the codec. */
static void price_exchange(diloco_plan *dp, const cluster *c)
{
    int32_t N = c->n_devices;
    double *bytes = calloc((size_t)N * (size_t)N + 1, sizeof *bytes);
    double *held = calloc((size_t)N + 1, sizeof *held); /* [device]: parameter elements it steps */
    if (!bytes || !held) {
        free(bytes);
        free(held);
        return;
    }
    const ir_graph *g0 = &dp->g[0];
    for (int32_t v = 0; v < g0->n_values; v++) {
        const ir_value *x = &g0->values[v];
        if (!ir_value_trained(x)) /* a frozen one never changes: nothing to exchange */
            continue;
        int64_t n = ir_shape_numel(&x->shape), cols = x->shape.rank > 0 ? x->shape.dim[x->shape.rank - 1] : 1;
        double wire =
            dp->outer.outer_bits ? (double)quant_encoded_bytes(n / cols, cols, dp->outer.outer_bits) : 4.0 * (double)n;
        int32_t h[RT_MAX_SITES]; /* its holder in each site */
        for (int32_t k = 0; k < dp->n_sites; k++) {
            h[k] = holder(dp, k, ir_value_name(g0, v));
            if (h[k] >= 0)
                held[h[k]] += (double)n;
        }
        for (int32_t a = 0; a < dp->n_sites; a++)
            for (int32_t b = 0; b < dp->n_sites; b++)
                if (a != b && h[a] >= 0 && h[b] >= 0)
                    bytes[(size_t)h[a] * N + h[b]] += wire;
    }
    dp->exchange_seconds = dp->exchange_bytes = 0.0;
    for (int32_t a = 0; a < N; a++)
        for (int32_t b = 0; b < N; b++) {
            double bw, lat, B = bytes[(size_t)a * N + b];
            if (B <= 0)
                continue;
            cluster_link_between(c, a, b, &bw, &lat);
            double t = (bw > 0 ? B / bw : INFINITY) + lat;
            dp->exchange_seconds = fmax(dp->exchange_seconds, t);
            dp->exchange_bytes = fmax(dp->exchange_bytes, B);
        }
    free(bytes);
    dp->outer_seconds = 0.0;
    for (int32_t d = 0; d < N; d++)
        if (held[d] > 0 && c->devices[d].memory_bandwidth > 0)
            dp->outer_seconds =
                fmax(dp->outer_seconds, held[d] * OUTER_BYTES_PER_ELEMENT / c->devices[d].memory_bandwidth);
    free(held);
    /* C: each stage's parameters (f32) down its ring of replicas, one hop
     * after the other; the sites and stages side by side. */
    dp->copy_seconds = 0.0;
    for (int32_t k = 0; k < dp->n_sites; k++) {
        const ir_graph *g = &dp->g[k];
        const ir_placement *p = &g->placement;
        double *stage_of = p->n_replicas > 1 ? calloc((size_t)p->n_stages + 1, sizeof *stage_of) : NULL;
        if (!stage_of)
            continue; /* one replica a stage: nothing to copy (or no memory to price it) */
        for (int32_t v = 0; v < g->n_values; v++) { /* each stage's parameter bytes */
            int32_t s = g->values[v].role == ROLE_PARAM ? optimizer_update_stage(g, ir_value_name(g, v)) : -1;
            if (s >= 0 && s < p->n_stages)
                stage_of[s] += 4.0 * (double)ir_shape_numel(&g->values[v].shape);
        }
        for (int32_t s = 0; s < p->n_stages; s++) {
            double stage_bytes = stage_of[s], t = 0.0;
            for (int32_t r = 0; r + 1 < p->n_replicas; r++) {
                double bw, lat;
                cluster_link_between(c, dp->map[k][p->device[s * p->n_replicas + r]],
                                     dp->map[k][p->device[s * p->n_replicas + r + 1]], &bw, &lat);
                t += (bw > 0 ? stage_bytes / bw : INFINITY) + lat;
            }
            dp->copy_seconds = fmax(dp->copy_seconds, t);
        }
        free(stage_of);
    }
}

/* Every site's H (diloco.h).  Split: one H for all, the smallest (at
 * least DILOCO_MIN_H) whose steps hide the exchange and keep the copies
 * under 5% of them.  Each: the fastest site's H is that (its steps) and at
 * least DILOCO_MIN_H times the slowest site's step over its own, so that
 * rounding the others' H to whole steps costs under a tenth of a round;
 * every other site's in proportion to its speed. */
static void choose_h(diloco_plan *dp, int32_t asked, int each)
{
    double fast = INFINITY, slow = 0.0;
    for (int32_t k = 0; k < dp->n_sites; k++) {
        fast = fmin(fast, dp->step[k]);
        slow = fmax(slow, dp->step[k]);
    }
    double T = each ? fast : slow;
    dp->h_chosen = asked == 0;
    int32_t H = asked;
    if (asked == 0) {
        double need = fmax(dp->exchange_seconds / T, (dp->copy_seconds + dp->outer_seconds) / (0.05 * T));
        if (each)
            need = fmax(need, DILOCO_MIN_H * slow / fast);
        H = (int32_t)fmin(ceil(fmax(need, DILOCO_MIN_H)), DILOCO_MAX_H);
    }
    for (int32_t k = 0; k < dp->n_sites; k++) {
        double h = each ? floor(H * fast / dp->step[k] + 0.5) : H;
        dp->outer.site_steps[k] = h < 1 ? 1 : (int32_t)h;
    }
    dp->outer.local_steps = H;
}

/* Place every site on its share (dp->rows) and time it: dp->g, plan, step. */
static int place_shares(diloco_plan *dp, diloco_place_fn place, void *arg, diloco_time_fn time, struct diag *err)
{
    for (int32_t k = 0; k < dp->n_sites; k++) {
        ir_graph_free(&dp->g[k]);
        ir_graph_init(&dp->g[k]);
        fence_plan_free(&dp->plan[k]);
        memset(&dp->plan[k], 0, sizeof dp->plan[k]);
        struct diag why = { 0 };
        if (place(arg, &dp->site[k], dp->rows[k], &dp->g[k], &dp->plan[k], &why))
            return diag_set(err, dp->site[k].file, 0, "--sync diloco: region %s with its %lld rows of the batch: %s",
                            dp->site[k].name, (long long)dp->rows[k], why.msg);
        dp->step[k] = time(&dp->site[k], &dp->g[k], &dp->plan[k]);
        if (!(dp->step[k] > 0) || !isfinite(dp->step[k]))
            return diag_set(err, dp->site[k].file, 0, "--sync diloco: region %s cannot be timed", dp->site[k].name);
    }
    return 0;
}

static double slowest(const diloco_plan *dp)
{
    double T = 0.0;
    for (int32_t k = 0; k < dp->n_sites; k++)
        T = fmax(T, dp->step[k]);
    return T;
}

/* Site k's step on `rows` rows (placed and timed, then dropped); -1
 * when it cannot be placed or timed. */
static double step_on(diloco_plan *dp, int32_t k, int64_t rows, diloco_place_fn place, void *arg, diloco_time_fn time)
{
    ir_graph g;
    fence_plan plan;
    memset(&plan, 0, sizeof plan);
    ir_graph_init(&g);
    struct diag why = { 0 };
    double t = place(arg, &dp->site[k], rows, &g, &plan, &why) == 0 ? time(&dp->site[k], &g, &plan) : -1.0;
    ir_graph_free(&g);
    fence_plan_free(&plan);
    return t > 0 && isfinite(t) ? t : -1.0;
}

/* Site steps already timed, by site and rows: the search below asks for
 * the same ones again. */
#define SPLIT_MEMO 512
typedef struct {
    int32_t site[SPLIT_MEMO];
    int64_t rows[SPLIT_MEMO];
    double step[SPLIT_MEMO];
    int32_t n;
} split_memo;

static double memo_step(split_memo *m, diloco_plan *dp, int32_t k, int64_t rows, diloco_place_fn place, void *arg,
                        diloco_time_fn time)
{
    for (int32_t i = 0; i < m->n; i++)
        if (m->site[i] == k && m->rows[i] == rows)
            return m->step[i];
    double t = step_on(dp, k, rows, place, arg, time);
    if (m->n < SPLIT_MEMO) {
        m->site[m->n] = k;
        m->rows[m->n] = rows;
        m->step[m->n++] = t;
    }
    return t;
}

/* The largest step of a split: the time a step of every site takes; -1
 * when a site cannot be placed on its rows. */
static double split_step(split_memo *m, diloco_plan *dp, const int64_t *rows, diloco_place_fn place, void *arg,
                         diloco_time_fn time)
{
    double T = 0.0;
    for (int32_t k = 0; k < dp->n_sites; k++) {
        double t = memo_step(m, dp, k, rows[k], place, arg, time);
        if (t < 0)
            return -1.0;
        T = fmax(T, t);
    }
    return T;
}

/* Moves of `move` rows from one site to another while the largest step
 * shrinks (the best move each time).  A site's step is not monotonic in
 * its rows: 7 rows take one micro-batch where 8 take four, so water
 * filling alone can end at 9 + 7 rows and 407 ms where 8 + 8 take 236
 * (local-4 at 6 GFLOPS, 16 rows). */
static double refine_split(split_memo *m, diloco_plan *dp, int64_t *rows, int64_t move, int64_t q,
                           diloco_place_fn place, void *arg, diloco_time_fn time)
{
    double T = split_step(m, dp, rows, place, arg, time);
    for (int iter = 0; iter < 64 && T > 0; iter++) {
        int32_t from = -1, to = -1;
        double best = T * (1.0 - 1e-9);
        for (int32_t a = 0; a < dp->n_sites; a++)
            for (int32_t b = 0; b < dp->n_sites; b++) {
                if (a == b || rows[a] - move < q)
                    continue;
                rows[a] -= move;
                rows[b] += move;
                double t = split_step(m, dp, rows, place, arg, time);
                rows[a] += move;
                rows[b] -= move;
                if (t > 0 && t < best) {
                    best = t;
                    from = a;
                    to = b;
                }
            }
        if (from < 0)
            break;
        rows[from] -= move;
        rows[to] += move;
        T = best;
    }
    return T;
}

/* Units of q rows in proportion to each site's speed on the whole batch
 * (largest remainders), each site at least one. */
static void proportional_split(const diloco_plan *dp, int64_t units, int64_t q, int64_t *rows)
{
    double speed = 0.0, share[RT_MAX_SITES];
    for (int32_t k = 0; k < dp->n_sites; k++)
        speed += 1.0 / dp->alone[k];
    int64_t given = 0;
    for (int32_t k = 0; k < dp->n_sites; k++) {
        share[k] = (double)(units - dp->n_sites) * (1.0 / dp->alone[k]) / speed;
        rows[k] = 1 + (int64_t)floor(share[k]);
        share[k] -= floor(share[k]);
        given += rows[k];
    }
    while (given < units) {
        int32_t best = 0;
        for (int32_t k = 1; k < dp->n_sites; k++)
            if (share[k] > share[best])
                best = k;
        rows[best]++;
        share[best] = -1.0;
        given++;
    }
    for (int32_t k = 0; k < dp->n_sites; k++)
        rows[k] *= q;
}

/* The shares: every site starts with one unit of q rows; each further
 * unit goes to the site whose step would be shortest with it (water
 * filling: for steps that grow with the rows, the largest step ends as
 * small as units of q allow).  That split and one in proportion to the
 * sites' speeds are then each improved by moving rows between sites, and
 * the faster kept. */
/* The rows a site's share is a multiple of when --micro-batches leaves it
 * open: the largest power of two that still cuts the batch into at least
 * 16 pieces a site.  A share of 1-row units can be a prime (97 of 512 over
 * five sites), which only 1 or 97 micro-batches divide, and neither may
 * give a plan that fits the site; a multiple of 4 has many divisors. */
static int64_t row_granule(int64_t global_batch, int32_t n_sites)
{
    int64_t q = 1;
    while (global_batch / (2 * q) >= 16 * (int64_t)n_sites)
        q *= 2;
    return q;
}

static int share_batch(diloco_plan *dp, int64_t q, diloco_place_fn place, void *arg, diloco_time_fn time,
                       const char *file, struct diag *err)
{
    int64_t units = dp->global_batch / q;
    if (units < dp->n_sites)
        return diag_set(err, file, 0,
                        "--sync diloco: the batch (%lld rows) cannot give each of the %d sites %lld "
                        "row%s",
                        (long long)dp->global_batch, dp->n_sites, (long long)q, q == 1 ? "" : "s");
    split_memo *memo = calloc(1, sizeof *memo);
    if (!memo)
        return diag_set(err, file, 0, "out of memory");
    /* At most about 64 hand-outs (each places and times a site once). */
    int64_t chunk = units / 64 > 1 ? units / 64 : 1, given = dp->n_sites;
    double next[RT_MAX_SITES];
    for (int32_t k = 0; k < dp->n_sites; k++) {
        dp->rows[k] = q;
        int64_t more = units - given < chunk ? units - given : chunk;
        next[k] = more > 0 ? memo_step(memo, dp, k, (1 + more) * q, place, arg, time) : -1.0;
    }
    while (given < units) {
        int64_t more = units - given < chunk ? units - given : chunk;
        int32_t best = -1;
        for (int32_t k = 0; k < dp->n_sites; k++)
            if (next[k] > 0 && (best < 0 || next[k] < next[best]))
                best = k;
        if (best < 0) {
            free(memo);
            return diag_set(err, file, 0,
                            "--sync diloco: no site can take more of the batch (%lld of %lld rows "
                            "given)",
                            (long long)(given * q), (long long)dp->global_batch);
        }
        dp->rows[best] += more * q;
        given += more;
        more = units - given < chunk ? units - given : chunk;
        next[best] = more > 0 ? memo_step(memo, dp, best, dp->rows[best] + more * q, place, arg, time) : -1.0;
        /* The others' next hand-out may be smaller now (the last one). */
        for (int32_t k = 0; k < dp->n_sites && more > 0 && more < chunk; k++)
            if (k != best)
                next[k] = memo_step(memo, dp, k, dp->rows[k] + more * q, place, arg, time);
    }
    int64_t other[RT_MAX_SITES];
    proportional_split(dp, units, q, other);
    double filled = refine_split(memo, dp, dp->rows, chunk * q, q, place, arg, time);
    double even = refine_split(memo, dp, other, chunk * q, q, place, arg, time);
    if (even > 0 && (filled < 0 || even < filled))
        memcpy(dp->rows, other, sizeof other[0] * (size_t)dp->n_sites);
    free(memo);
    return 0;
}

int diloco_plan_make(const cluster *c, const options *o, int64_t global_batch, diloco_place_fn place, void *arg,
                     diloco_time_fn time, const char *timed_by, diloco_plan *dp, struct diag *err)
{
    memset(dp, 0, sizeof *dp);
    if (c->n_regions < 2)
        return diag_set(err, c->file, 0, "--sync diloco needs a cluster of several regions (sites)");
    if (c->n_regions > RT_MAX_SITES)
        return diag_set(err, c->file, 0, "--sync diloco: %d regions, more than the %d sites it supports", c->n_regions,
                        RT_MAX_SITES);
    if (global_batch <= 0)
        return diag_set(err, o->files[0], 0,
                        "--sync diloco splits the model's `batch` among the sites; this model "
                        "has no batch hyper-parameter");
    dp->global_batch = global_batch;
    dp->timed_by = timed_by;
    dp->outer = (rt_diloco_info){ .sync = RT_SYNC_DILOCO,
                                  .n_sites = c->n_regions,
                                  .outer_lr = o->outer_lr >= 0 ? o->outer_lr : 0.7,
                                  .outer_momentum = o->outer_momentum >= 0 ? o->outer_momentum : 0.9,
                                  .outer_bits = o->outer_bits >= 0 ? o->outer_bits : 8,
                                  .outer_delay = o->outer_delay >= 0 ? o->outer_delay : 0 };
    /* Each site alone on the whole batch: its first speed, and the
     * throughput it would have alone. */
    for (int32_t k = 0; k < c->n_regions; k++) {
        dp->n_sites = k + 1;
        ir_graph_init(&dp->g[k]);
        if (cluster_subset(c, k, 0, &dp->site[k]))
            return diag_set(err, c->file, 0, "out of memory");
        dp->map[k] = malloc(((size_t)dp->site[k].n_devices + 1) * sizeof *dp->map[k]);
        if (!dp->map[k])
            return diag_set(err, c->file, 0, "out of memory");
        for (int32_t d = 0; d < dp->site[k].n_devices; d++)
            dp->map[k][d] = cluster_find_device(c, dp->site[k].devices[d].name);
        dp->rows[k] = global_batch;
    }
    if (place_shares(dp, place, arg, time, err))
        return -1;
    for (int32_t k = 0; k < dp->n_sites; k++)
        dp->alone[k] = dp->step[k]; /* (under --site-batch each, also its plan) */
    dp->each = o->site_batch;
    if (!dp->each && (share_batch(dp, o->micro_batches > 0 ? o->micro_batches : row_granule(global_batch, dp->n_sites),
                                  place, arg, time, o->files[0], err) ||
                      place_shares(dp, place, arg, time, err)))
        return -1;
    price_exchange(dp, c);
    choose_h(dp, o->local_steps, dp->each);
    /* The round of delay costs quality (measured on the demo's GPT, H 8-11:
     * 2.70 against 2.51 without, at 300 steps): only where the exchange,
     * waited for, would cost over a tenth of a round. */
    double inner = 0.0;
    for (int32_t k = 0; k < dp->n_sites; k++)
        inner = fmax(inner, dp->outer.site_steps[k] * dp->step[k]);
    dp->delay_chosen = o->outer_delay < 0;
    if (o->outer_delay < 0)
        dp->outer.outer_delay = dp->exchange_seconds > 0.1 * inner;
    double rows = 0.0; /* a round's, every site's */
    for (int32_t k = 0; k < dp->n_sites; k++)
        rows += (double)dp->outer.site_steps[k] * (double)dp->rows[k];
    for (int32_t k = 0; k < dp->n_sites; k++)
        dp->outer.site_weight[k] = (double)dp->outer.site_steps[k] * (double)dp->rows[k] / rows;
    return 0;
}

/* A round's time: the slowest site's H_k steps, the exchange where the
 * inner steps do not hide it, the copies down the replicas. */
static double round_seconds(const diloco_plan *dp)
{
    double inner = 0.0;
    for (int32_t k = 0; k < dp->n_sites; k++)
        inner = fmax(inner, dp->outer.site_steps[k] * dp->step[k]);
    double exposed = dp->outer.outer_delay ? fmax(0.0, dp->exchange_seconds - inner) : dp->exchange_seconds;
    return inner + exposed + dp->copy_seconds + dp->outer_seconds;
}

static double round_rows(const diloco_plan *dp)
{
    double rows = 0.0;
    for (int32_t k = 0; k < dp->n_sites; k++)
        rows += (double)dp->outer.site_steps[k] * (double)dp->rows[k];
    return rows;
}

double diloco_global_step(const diloco_plan *dp)
{
    return round_seconds(dp) * (double)dp->global_batch / round_rows(dp);
}

double diloco_step_items(const diloco_plan *dp, const char **unit)
{
    double items = 0.0, rows = 0.0;
    for (int32_t k = 0; k < dp->n_sites; k++) {
        items += baseline_step_items(&dp->g[k], unit);
        rows += (double)dp->rows[k];
    }
    return items * (double)dp->global_batch / rows;
}

void diloco_print(FILE *out, const diloco_plan *dp, const cluster *c)
{
    const rt_diloco_info *x = &dp->outer;
    double T = slowest(dp);
    for (int32_t k = 0; k < dp->n_sites && dp->each; k++) /* the fastest site's, whose H it is */
        T = fmin(T, dp->step[k]);
    fprintf(out,
            "diloco: %d sites (the regions of %s) train side by side on %s (%lld rows); every H = %d steps%s "
            "they average their parameter change and take an outer Nesterov step (lr %g, momentum %g), %s on the "
            "wire%s\n",
            dp->n_sites, c->name, dp->each ? "a whole batch each" : "their shares of the global batch",
            (long long)dp->global_batch, x->local_steps, dp->each ? " (of the fastest site; slower ones fewer)" : "",
            x->outer_lr, x->outer_momentum,
            x->outer_bits ? (x->outer_bits == 8 ? "8-bit rows with error feedback" : "4-bit rows with error feedback")
                          : "f32",
            x->outer_delay     ? ", applied one round late (the transfer overlaps the next round)"
            : dp->delay_chosen ? ", applied at once (the exchange waited for is under a tenth of a round)"
                               : "");
    if (dp->h_chosen)
        fprintf(out,
                "H = %d chosen: the smallest (at least %d) whose steps hide the exchange (%.3f s <= H x %.3f ms) "
                "and keep the outer step and the copies to the replicas (%.3f s) under 5%% of them%s\n",
                x->local_steps, DILOCO_MIN_H, dp->exchange_seconds, T * 1e3, dp->copy_seconds + dp->outer_seconds,
                dp->each ? ", and the slowest site at least 10 steps a round" : "");
    else
        fprintf(out, "H = %d from --local-steps\n", x->local_steps);
    for (int32_t k = 0; k < dp->n_sites; k++) {
        const fence_plan *p = &dp->plan[k];
        fprintf(out,
                "site %d: region %s (%d device%s): %lld rows a step, H %d (%.1f%% of a round's rows), %d stage%s x "
                "%d replica%s, %d micro-batch%s, %s step %.2f ms (alone on the whole batch: %.2f ms)\n",
                k, dp->site[k].name, dp->site[k].n_devices, dp->site[k].n_devices == 1 ? "" : "s",
                (long long)dp->rows[k], x->site_steps[k], 100.0 * x->site_weight[k], p->n_stages,
                p->n_stages == 1 ? "" : "s", p->n_replicas, p->n_replicas == 1 ? "" : "s", p->micro_batches,
                p->micro_batches == 1 ? "" : "es", dp->timed_by, dp->step[k] * 1e3, dp->alone[k] * 1e3);
    }
    fprintf(out,
            "outer exchange: %.1f KiB from a holder to each other site's (the largest), %.3f s on the slowest "
            "link; the outer step's arithmetic %.3f s; copies down the replicas %.3f s\n",
            dp->exchange_bytes / 1024.0, dp->exchange_seconds, dp->outer_seconds, dp->copy_seconds);
    /* What the sites would train each alone on the whole batch, summed:
     * the most they can give together. */
    const char *unit;
    double items = diloco_step_items(dp, &unit), alone = 0.0, step = diloco_global_step(dp);
    for (int32_t k = 0; k < dp->n_sites; k++)
        alone += items / dp->alone[k];
    fprintf(out,
            "sites alone, summed: %.0f %s/s (each on the whole batch); together under diloco: %.0f %s/s (%.1f%%)\n",
            alone, unit, items / step, unit, 100.0 * (items / step) / alone);
}

/* A copy of site k's graph with the whole cluster's device indices. */
static int remapped(const diloco_plan *dp, int32_t k, ir_graph *out)
{
    if (ir_graph_copy(out, &dp->g[k]))
        return -1;
    for (int32_t i = 0; i < out->n_nodes; i++)
        if (out->nodes[i].device >= 0)
            out->nodes[i].device = dp->map[k][out->nodes[i].device];
    ir_placement *p = &out->placement;
    for (int32_t i = 0; i < p->n_stages * p->n_replicas; i++)
        p->device[i] = dp->map[k][p->device[i]];
    return 0;
}

static int write_plan_text(const diloco_plan *dp, const cluster *c, const char *out_dir, struct diag *err)
{
    char path[FU_PATH_BYTES], why[FU_PATH_BYTES + 200];
    snprintf(path, sizeof path, "%s/plan.txt", out_dir);
    atomic_file af;
    FILE *f = atomic_open(&af, path, why, sizeof why);
    if (!f)
        return diag_set(err, path, 0, "%s", why);
    diloco_print(f, dp, c);
    for (int32_t k = 0; k < dp->n_sites; k++) {
        fprintf(f, "\n== site %d: region %s ==\n", k, dp->site[k].name);
        plan_report_print(f, &dp->g[k], &dp->site[k], &dp->plan[k]);
    }
    if (atomic_commit(&af, 0, why, sizeof why))
        return diag_set(err, path, 0, "the plan: %s", why);
    return 0;
}

int diloco_write(const diloco_plan *dp, const cluster *c, const char *out_dir, const bundle_toolchain *tc,
                 int32_t port_base, struct diag *err)
{
    ir_graph g[RT_MAX_SITES];
    bundle_sites s = { .n_sites = dp->n_sites, .outer = dp->outer };
    int rc = 0;
    int32_t made = 0;
    for (; made < dp->n_sites; made++) {
        if (remapped(dp, made, &g[made])) {
            rc = diag_set(err, out_dir, 0, "out of memory");
            break;
        }
        s.graphs[made] = &g[made];
        s.site_rows[made] = dp->rows[made];
    }
    if (rc == 0)
        rc = bundle_write_sites(&s, c, out_dir, tc, port_base, err);
    if (rc == 0)
        rc = write_plan_text(dp, c, out_dir, err);
    for (int32_t k = 0; k < made; k++)
        ir_graph_free(&g[k]);
    return rc;
}
