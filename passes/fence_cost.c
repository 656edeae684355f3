/* fence_cost.c: the fence pass's cost model (fence_cost.h).
 *
 * Per forward op and device: the op's time and its backward ops' (the
 * workload estimator, estimate.c), prefix-summed so a run of ops costs two
 * lookups; per cut: the bytes that cross it.  A candidate's stages are
 * cut by dynamic programming on the pipeline's bottleneck, and its step is
 * the forward and backward of the M micro-batches simulated event by event
 * in the runtime's 1F1B order (simulate_1f1b: each stage's
 * compute, each cut's transfer and latency, links full duplex), then
 *   + max_s (update_s + allreduce_s) + the stages' agreement on the
 *     gradient norm (when the optimizer clips: the latencies of the chain
 *     along the stages, and of the last stage's answer back)
 * with allreduce_s the ring all-reduce of a stage's gradients over its R
 * replicas: 2 (R-1)/R * bytes / bandwidth + 2 latency.  The dynamic
 * program's objective, the bottleneck, is the steady state of the same
 * pipeline: (M - 1) * bottleneck + the fill and drain.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/name_map.h"
#include "../ir/ops.h"
#include "../ir/pipeline_order.h"
#include "fence_cost.h"
/* ---- what the cost model knows about the graph --------------------------- */


static int is_forward(const ir_node *n) { return n->phase == PHASE_FORWARD || n->phase == PHASE_NONE; }

static double *prefix_row(double *table, const fence_model *m, int32_t d) { return table + (size_t)d * (size_t)(m->n_fwd + 1); }

/* The forward op a backward op differentiates ("<forward>.backward"). */
static int32_t forward_of_backward(const ir_graph *g, const name_map *nodes, int32_t n)
{
    if ((unsigned)g->nodes[n].op >= OP_COUNT || op_table[g->nodes[n].op].forward_of == OP_COUNT)
        return -1;
    const char *name = ir_node_name(g, n);
    size_t len = strlen(name), suffix = strlen(".backward");
    if (len <= suffix || strcmp(name + len - suffix, ".backward") != 0 || len - suffix >= 512)
        return -1;
    char base[512];
    memcpy(base, name, len - suffix);
    base[len - suffix] = '\0';
    int64_t f;
    return name_map_get(nodes, base, &f) ? (int32_t)f : -1;
}

void fence_model_free(fence_model *m)
{
    free(m->fwd);
    free(m->fwd_pos);
    free(m->owner);
    free(m->time);
    free(m->time_fwd);
    free(m->update);
    free(m->param_bytes);
    free(m->cut_fwd);
    free(m->cut_bwd);
    free(m->layer_ops);
    free(m->first_fwd);
}

static int is_float_dtype(ir_dtype dt) { return dt == DT_F32 || dt == DT_F16 || dt == DT_BF16; }

int fence_model_build(fence_model *m, const ir_graph *g, const cluster *c, struct diag *err)
{
    memset(m, 0, sizeof *m);
    m->g = g;
    m->c = c;
    m->n_devices = c && c->n_devices > 0 ? c->n_devices : 1;
    m->devices = c && c->n_devices > 0 ? c->devices : estimate_default_device();
    int32_t n = g->n_nodes, V = g->n_values;
    m->fwd = malloc(((size_t)n + 1) * sizeof *m->fwd);
    m->fwd_pos = malloc(((size_t)n + 1) * sizeof *m->fwd_pos);
    m->owner = malloc(((size_t)n + 1) * sizeof *m->owner);
    name_map *names = name_map_new();
    int32_t *first_fwd = m->first_fwd = malloc(((size_t)V + 1) * sizeof *first_fwd);
    int32_t *last_fwd = malloc(((size_t)V + 1) * sizeof *last_fwd);
    int rc = -1;
    if (!m->fwd || !m->fwd_pos || !m->owner || !names || !first_fwd || !last_fwd)
        goto done;
    for (int32_t i = 0; i < n; i++) {
        m->fwd_pos[i] = m->owner[i] = -1;
        if (name_map_add(names, ir_node_name(g, i), i) < 0)
            goto done;
        if (is_forward(&g->nodes[i])) {
            m->fwd_pos[i] = m->n_fwd;
            m->owner[i] = m->n_fwd;
            m->fwd[m->n_fwd++] = i;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        int32_t f = forward_of_backward(g, names, i);
        if (f >= 0 && m->fwd_pos[f] >= 0)
            m->owner[i] = m->fwd_pos[f];
    }
    size_t row = (size_t)m->n_fwd + 1;
    m->time = calloc(row * (size_t)m->n_devices, sizeof *m->time);
    m->time_fwd = calloc(row * (size_t)m->n_devices, sizeof *m->time_fwd);
    m->update = calloc(row * (size_t)m->n_devices, sizeof *m->update);
    m->param_bytes = calloc(row, sizeof *m->param_bytes);
    m->cut_fwd = calloc(row, sizeof *m->cut_fwd);
    m->cut_bwd = calloc(row, sizeof *m->cut_bwd);
    m->layer_ops = calloc(row, sizeof *m->layer_ops);
    if (!m->time || !m->time_fwd || !m->update || !m->param_bytes || !m->cut_fwd || !m->cut_bwd || !m->layer_ops)
        goto done;

    /* Where each value is first made or read, and last read, among forward ops. */
    for (int32_t v = 0; v < V; v++)
        first_fwd[v] = last_fwd[v] = -1;
    for (int32_t k = 0; k < m->n_fwd; k++) {
        const ir_node *node = &g->nodes[m->fwd[k]];
        for (int i = 0; i < node->n_in; i++) {
            int32_t v = node->in[i];
            if (first_fwd[v] < 0)
                first_fwd[v] = k;
            last_fwd[v] = k;
        }
        for (int i = 0; i < node->n_out; i++)
            first_fwd[node->out[i]] = k;
    }
    /* Params each forward op owns (its first reader), and its layer count. */
    for (int32_t v = 0; v < V; v++)
        if (g->values[v].role == ROLE_PARAM && first_fwd[v] >= 0)
            m->param_bytes[first_fwd[v] + 1] += (double)ir_value_bytes(g, v);
    for (int32_t k = 0; k < m->n_fwd; k++) {
        const ir_node *node = &g->nodes[m->fwd[k]];
        int has_param = 0;
        for (int i = 0; i < node->n_in; i++)
            has_param |= g->values[node->in[i]].role == ROLE_PARAM && first_fwd[node->in[i]] == k;
        m->layer_ops[k + 1] = m->layer_ops[k] + has_param;
        m->param_bytes[k + 1] += m->param_bytes[k];
    }
    /* Bytes that cross the cut after position k: made (or first read) at
     * or before k, read after it.  Their gradients cross back, but for
     * integers (token ids) that have none. */
    double *diff_f = m->cut_fwd, *diff_b = m->cut_bwd;
    for (int32_t v = 0; v < V; v++) {
        if (first_fwd[v] < 0 || last_fwd[v] <= first_fwd[v] || g->values[v].role == ROLE_STATE)
            continue;
        double bytes = (double)ir_value_bytes(g, v);
        diff_f[first_fwd[v]] += bytes;
        diff_f[last_fwd[v]] -= bytes;
        if (is_float_dtype(g->values[v].dtype) && g->values[v].role != ROLE_INPUT) {
            diff_b[first_fwd[v]] += bytes;
            diff_b[last_fwd[v]] -= bytes;
        }
    }
    for (int32_t k = 1; k < m->n_fwd; k++) {
        diff_f[k] += diff_f[k - 1];
        diff_b[k] += diff_b[k - 1];
    }
    /* Per device: each forward op's time plus its backward ops', and the
     * optimizer's time for the params it owns. */
    for (int32_t d = 0; d < m->n_devices; d++) {
        double *t = prefix_row(m->time, m, d), *u = prefix_row(m->update, m, d);
        double *tf = prefix_row(m->time_fwd, m, d);
        for (int32_t i = 0; i < n; i++) {
            const ir_node *node = &g->nodes[i];
            double s = estimate_node_seconds(g, i, &m->devices[d]);
            if (node->phase == PHASE_UPDATE) {
                int32_t owner = -1;
                for (int k = 0; k < node->n_in && owner < 0; k++)
                    if (g->values[node->in[k]].role == ROLE_PARAM)
                        owner = first_fwd[node->in[k]];
                if (owner >= 0)
                    u[owner + 1] += s;
            } else if (m->owner[i] >= 0) {
                t[m->owner[i] + 1] += s;
                if (is_forward(node))
                    tf[m->owner[i] + 1] += s;
            }
        }
        for (int32_t k = 0; k < m->n_fwd; k++) {
            t[k + 1] += t[k];
            tf[k + 1] += tf[k];
            u[k + 1] += u[k];
        }
    }
    for (int32_t v = 0; v < V && m->batch == 0; v++)
        if (g->values[v].role == ROLE_INPUT && g->values[v].shape.rank > 0)
            m->batch = g->values[v].shape.dim[0];
    for (int32_t i = 0; i < n; i++)
        m->clip |= g->nodes[i].op == OP_CLIP_SCALE;
    rc = 0;
done:
    name_map_free(names);
    free(last_fwd);
    if (rc)
        diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "out of memory planning the placement");
    return rc;
}

/* ---- one candidate: devices in stage order, cut by dynamic programming --- */


void fence_link_of(const fence_model *m, int32_t a, int32_t b, double *bw, double *lat)
{
    if (m->c && m->c->n_devices > 0)
        cluster_link_between(m->c, a, b, bw, lat);
    else
        *bw = INFINITY, *lat = 0.0;
}

/* The slowest replica's compute for forward positions [j, k] of stage s. */
static double stage_seconds(const fence_model *m, const candidate *cd, int32_t s, int32_t j, int32_t k)
{
    double worst = 0.0;
    for (int32_t r = 0; r < cd->R; r++) {
        const double *t = prefix_row(m->time, m, cd->dev[s * cd->R + r]);
        worst = fmax(worst, t[k + 1] - t[j]);
    }
    return worst / cd->R;   /* each replica has 1/R of the micro-batch */
}

/* The slowest replica's forward alone for positions [j, k] of stage s. */
static double stage_forward_seconds(const fence_model *m, const candidate *cd, int32_t s, int32_t j, int32_t k)
{
    double worst = 0.0;
    for (int32_t r = 0; r < cd->R; r++) {
        const double *t = prefix_row(m->time_fwd, m, cd->dev[s * cd->R + r]);
        worst = fmax(worst, t[k + 1] - t[j]);
    }
    return worst / cd->R;
}

/* The slowest lane's link from stage s to s+1 for the cut after k: its
 * busier direction per micro-batch (steady state), and its latency. */
static void cut_seconds(const fence_model *m, const candidate *cd, int32_t s, int32_t k, double *busy, double *lat)
{
    *busy = 0.0;
    *lat = 0.0;
    for (int32_t r = 0; r < cd->R; r++) {
        double bw, l;
        fence_link_of(m, cd->dev[s * cd->R + r], cd->dev[(s + 1) * cd->R + r], &bw, &l);
        double bytes = fmax(m->cut_fwd[k], m->cut_bwd[k]) / cd->R;
        *busy = fmax(*busy, estimate_transfer_seconds(bytes, bw, 0.0));
        *lat = fmax(*lat, l);
    }
}

/* The first micro-batch's trip over the cut after k and its gradient's
 * trip back: two latencies and both transfers, on the slowest lane. */
static double cut_round_trip(const fence_model *m, const candidate *cd, int32_t s, int32_t k)
{
    double worst = 0.0;
    for (int32_t r = 0; r < cd->R; r++) {
        double bw, lat;
        fence_link_of(m, cd->dev[s * cd->R + r], cd->dev[(s + 1) * cd->R + r], &bw, &lat);
        worst = fmax(worst, estimate_transfer_seconds((m->cut_fwd[k] + m->cut_bwd[k]) / cd->R, bw, 2.0 * lat));
    }
    return worst;
}

/* The ring all-reduce of stage s's gradients over its replicas. */
static double allreduce_seconds(const fence_model *m, const candidate *cd, int32_t s, double grad_bytes)
{
    if (cd->R < 2)
        return 0.0;
    double worst_bw = INFINITY, worst_lat = 0.0;
    for (int32_t r = 0; r < cd->R; r++) {
        double bw, lat;
        fence_link_of(m, cd->dev[s * cd->R + r], cd->dev[s * cd->R + (r + 1) % cd->R], &bw, &lat);
        worst_bw = fmin(worst_bw, bw);
        worst_lat = fmax(worst_lat, lat);
    }
    double R = cd->R;
    return estimate_transfer_seconds(2.0 * (R - 1) / R * grad_bytes, worst_bw, 2.0 * (R - 1) * worst_lat);
}

/* What crosses between stages per micro-batch and replica, as the comm
 * pass will send it: each value from its home stage straight to every
 * other stage that reads it (fwd[h*S + t], bytes), and its gradient back
 * (bwd[t*S + h]) unless it has none (integers). */
static void stage_traffic(const fence_model *m, const candidate *cd, const int32_t *end, double *fwd, double *bwd)
{
    const ir_graph *g = m->g;
    int32_t S = cd->S;
    memset(fwd, 0, (size_t)S * (size_t)S * sizeof *fwd);
    memset(bwd, 0, (size_t)S * (size_t)S * sizeof *bwd);
    int32_t *stage_at = malloc(((size_t)m->n_fwd + 1) * sizeof *stage_at);
    char *sent = calloc((size_t)S, 1);
    if (!stage_at || !sent) {
        free(stage_at);
        free(sent);
        return;
    }
    for (int32_t s = 0, k = 0; s < S; s++)
        for (; k <= end[s]; k++)
            stage_at[k] = s;
    for (int32_t v = 0; v < g->n_values; v++) {
        if (m->first_fwd[v] < 0 || g->values[v].role == ROLE_STATE)
            continue;
        int32_t home = stage_at[m->first_fwd[v]];
        memset(sent, 0, (size_t)S);
        for (int32_t k = m->first_fwd[v] + 1; k < m->n_fwd; k++) {
            const ir_node *node = &g->nodes[m->fwd[k]];
            int32_t t = stage_at[k];
            for (int i = 0; i < node->n_in && t != home && !sent[t]; i++)
                if (node->in[i] == v) {
                    /* An activation is split over the replicas' micro-batches; a
                     * parameter is whole, sent once a step, its partial
                     * gradient returned each micro-batch. */
                    int param = g->values[v].role == ROLE_PARAM;
                    double bytes = (double)ir_value_bytes(g, v) / (param ? 1 : cd->R);
                    sent[t] = 1;
                    fwd[(size_t)home * S + t] += param ? bytes / cd->M : bytes;
                    if (is_float_dtype(g->values[v].dtype) && g->values[v].role != ROLE_INPUT)
                        bwd[(size_t)t * S + home] += bytes;
                }
        }
    }
    free(stage_at);
    free(sent);
}

/* The forward and backward of M micro-batches in the runtime's 1F1B order
 * (runtime/main.c), event by event.  A stage runs its next action once
 * every tensor it needs has arrived: a forward, every activation sent to
 * it; a backward, every gradient sent to it (the last stage's, its own
 * forward).  A tensor leaves when its op is done and its link (the pair of
 * devices; the slowest replica lane) is free, is on the link bytes /
 * bandwidth, and arrives a latency later; links carry activations and
 * gradients in opposite directions at once.  Returns the time the last
 * backward ends, or -1 when out of memory. */
static double simulate_1f1b(const fence_model *m, const candidate *cd, const int32_t *end)
{
    int32_t S = cd->S, M = cd->M;
    size_t SM = (size_t)S * (size_t)M, SS = (size_t)S * (size_t)S;
    double *f = calloc((size_t)S, sizeof *f), *b = calloc((size_t)S, sizeof *b);
    double *fwd = calloc(SS, sizeof *fwd), *bwd = calloc(SS, sizeof *bwd);
    double *bw = calloc(SS, sizeof *bw), *lat = calloc(SS, sizeof *lat), *link_free = calloc(SS, sizeof *link_free);
    double *ready_f = calloc(SM, sizeof *ready_f), *ready_b = calloc(SM, sizeof *ready_b);
    int32_t *got_f = calloc(SM, sizeof *got_f), *got_b = calloc(SM, sizeof *got_b);
    int32_t *need_f = calloc((size_t)S, sizeof *need_f), *need_b = calloc((size_t)S, sizeof *need_b);
    double *free_at = calloc((size_t)S, sizeof *free_at);
    int32_t *order = malloc(SM * 2 * sizeof *order), *next = calloc((size_t)S, sizeof *next);
    double *stage_time = calloc((size_t)S, sizeof *stage_time), *round_trip = calloc((size_t)S, sizeof *round_trip);
    int32_t *warm = calloc((size_t)S, sizeof *warm);
    double makespan = -1.0;
    if (!f || !b || !fwd || !bwd || !bw || !lat || !link_free || !ready_f || !ready_b || !got_f || !got_b ||
        !need_f || !need_b || !free_at || !order || !next || !stage_time || !round_trip || !warm)
        goto done;
    stage_traffic(m, cd, end, fwd, bwd);
    for (int32_t s = 0, j = 0; s < S; j = end[s] + 1, s++) {
        f[s] = stage_forward_seconds(m, cd, s, j, end[s]);
        b[s] = stage_seconds(m, cd, s, j, end[s]) - f[s];
        for (int32_t t = 0; t < S; t++) {
            size_t st = (size_t)s * S + t;
            bw[st] = INFINITY;
            for (int32_t r = 0; r < cd->R; r++) {
                double w, l;
                fence_link_of(m, cd->dev[s * cd->R + r], cd->dev[t * cd->R + r], &w, &l);
                bw[st] = fmin(bw[st], w);
                lat[st] = fmax(lat[st], l);
            }
            need_f[t] += fwd[st] > 0;
            need_b[t] += bwd[st] > 0;
        }
    }
    /* The runtime's order (the schedule pass's warm-up): +m a forward, -(m+1) a backward. */
    for (int32_t s = 0; s < S; s++) {
        stage_time[s] = f[s] + b[s];
        round_trip[s] = s + 1 < S ? 2.0 * (lat[(size_t)s * S + s + 1] +
                                           fmax(fwd[(size_t)s * S + s + 1], bwd[(size_t)(s + 1) * S + s]) /
                                               bw[(size_t)s * S + s + 1]) : 0.0;
    }
    schedule_warmup(S, M, stage_time, round_trip, warm);
    for (int32_t s = 0; s < S; s++)
        pipeline_order(M, warm[s], order + (size_t)s * 2 * M);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int32_t s = 0; s < S; s++)
            while (next[s] < 2 * M) {
                int32_t a = order[(size_t)s * 2 * M + next[s]], mb = a >= 0 ? a : -a - 1;
                size_t at = (size_t)s * M + mb;
                int ready = a >= 0 ? got_f[at] == need_f[s] : got_b[at] == need_b[s];
                if (!ready)
                    break;
                double start = fmax(free_at[s], a >= 0 ? ready_f[at] : ready_b[at]);
                double done_at = start + (a >= 0 ? f[s] : b[s]);
                free_at[s] = done_at;
                const double *bytes = a >= 0 ? fwd : bwd;
                for (int32_t t = 0; t < S; t++) {
                    size_t st = (size_t)s * S + t;
                    if (bytes[st] <= 0)
                        continue;
                    double tx = fmax(link_free[st], done_at), on_wire = estimate_transfer_seconds(bytes[st], bw[st], 0.0);
                    link_free[st] = tx + on_wire;
                    size_t to = (size_t)t * M + mb;
                    double arrive = tx + on_wire + lat[st];
                    if (a >= 0) {
                        ready_f[to] = fmax(ready_f[to], arrive);
                        got_f[to]++;
                    } else {
                        ready_b[to] = fmax(ready_b[to], arrive);
                        got_b[to]++;
                    }
                }
                if (a >= 0 && need_b[s] == 0)
                    ready_b[at] = done_at;   /* no gradient comes: its own loss */
                next[s]++;
                progress = 1;
            }
    }
    makespan = 0.0;
    for (int32_t s = 0; s < S; s++) {
        if (next[s] < 2 * M) {   /* cannot happen for a pipeline of forward edges; be safe */
            makespan = INFINITY;
            break;
        }
        makespan = fmax(makespan, free_at[s]);
    }
done:
    free(f);
    free(b);
    free(fwd);
    free(bwd);
    free(bw);
    free(lat);
    free(link_free);
    free(ready_f);
    free(ready_b);
    free(got_f);
    free(got_b);
    free(need_f);
    free(need_b);
    free(free_at);
    free(order);
    free(next);
    free(stage_time);
    free(round_trip);
    free(warm);
    return makespan;
}

/* Fill the plan's figures for cuts end[s] (the last forward position of each stage). */
double fence_evaluate(const fence_model *m, const candidate *cd, const int32_t *end, fence_plan *out)
{
    double sum = 0.0, bottleneck = 0.0, tail = 0.0, chain_lat = 0.0;
    int32_t where = 0, is_link = 0;
    for (int32_t s = 0, j = 0; s < cd->S; j = end[s] + 1, s++) {
        double c = stage_seconds(m, cd, s, j, end[s]), busy = 0.0, lat = 0.0;
        double grads = m->param_bytes[end[s] + 1] - m->param_bytes[j];
        double upd = 0.0;
        for (int32_t r = 0; r < cd->R; r++) {
            const double *u = prefix_row(m->update, m, cd->dev[s * cd->R + r]);
            upd = fmax(upd, u[end[s] + 1] - u[j]);
        }
        double ar = allreduce_seconds(m, cd, s, grads);
        sum += c;
        if (c > bottleneck)
            bottleneck = c, where = s, is_link = 0;
        if (s + 1 < cd->S) {
            cut_seconds(m, cd, s, end[s], &busy, &lat);
            sum += cut_round_trip(m, cd, s, end[s]);
            chain_lat += lat;
            if (busy > bottleneck)
                bottleneck = busy, where = s, is_link = 1;
        }
        tail = fmax(tail, upd + ar);
        if (out) {
            out->stage_compute[s] = c;
            out->stage_update[s] = upd;
            out->cut_transfer[s] = s + 1 < cd->S ? busy : 0.0;
            out->cut_bytes[s] = s + 1 < cd->S ? m->cut_fwd[end[s]] / cd->R : 0.0;
            out->allreduce[s] = ar;
        }
    }
    /* Clipping: the stages agree on the gradient norm, a chain of scalars
     * along the pipeline and one answer back. */
    /* The clipping norm: a chain of scalars from stage to stage, then the
     * last stage's answer to every other at once. */
    double back = 0.0;
    for (int32_t t = 0; t + 1 < cd->S; t++) {
        double bw, lat;
        fence_link_of(m, cd->dev[(cd->S - 1) * cd->R], cd->dev[t * cd->R], &bw, &lat);
        back = fmax(back, lat);
    }
    double norm_sync = m->clip && cd->S > 1 ? chain_lat + back : 0.0;
    double pipeline = simulate_1f1b(m, cd, end);
    if (pipeline < 0)   /* out of memory: the closed form instead */
        pipeline = sum + (cd->M - 1) * bottleneck;
    double T = pipeline + tail + norm_sync;
    if (out) {
        out->step_seconds = T;
        out->bottleneck = bottleneck;
        out->bottleneck_stage = where;
        out->bottleneck_is_link = is_link;
    }
    return T;
}

/* Cut forward positions into cd->S runs minimising the bottleneck; end[s]
 * gets each stage's last position.  Returns 0, or -1 when there are fewer
 * ops than stages. */
int fence_cut_dp(const fence_model *m, const candidate *cd, int32_t *end)
{
    int32_t S = cd->S, n = m->n_fwd;
    if (n < S)
        return -1;
    double *best = malloc((size_t)S * (size_t)n * sizeof *best);
    int32_t *from = malloc((size_t)S * (size_t)n * sizeof *from);
    if (!best || !from) {
        free(best);
        free(from);
        return -1;
    }
    for (int32_t k = 0; k < n; k++) {
        best[k] = stage_seconds(m, cd, 0, 0, k);
        from[k] = -1;
    }
    for (int32_t s = 1; s < S; s++)
        for (int32_t k = 0; k < n; k++) {
            double b = INFINITY;
            int32_t arg = -1;
            for (int32_t j = s; j <= k; j++) {   /* stage s is [j, k]; stage s-1 ends at j-1 */
                double prev = best[(size_t)(s - 1) * n + (j - 1)];
                if (!(prev < b))
                    continue;
                double busy, lat;
                cut_seconds(m, cd, s - 1, j - 1, &busy, &lat);
                double v = fmax(prev, fmax(busy, stage_seconds(m, cd, s, j, k)));
                if (v < b)
                    b = v, arg = j - 1;
            }
            best[(size_t)s * n + k] = b;
            from[(size_t)s * n + k] = arg;
        }
    int32_t k = n - 1;
    for (int32_t s = S - 1; s >= 0; s--) {
        end[s] = k;
        k = from[(size_t)s * n + k];
    }
    free(best);
    free(from);
    return 0;
}

