/* fence_cost.c: the fence pass's cost model (fence_cost.h): what a
 * placement candidate costs.  The tables it reads are fence_model.c's.
 *
 * A candidate's stages are cut by dynamic programming on the pipeline's
 * bottleneck (fence_cut_dp), and its step (fence_evaluate) is the forward
 * and backward of the M micro-batches simulated event by event in the
 * runtime's 1F1B order with the schedule pass's warm-up (simulate_1f1b:
 * each stage's compute, each tensor's transfer and latency, links full
 * duplex); each stage s averages its gradients when its own last backward
 * is done (end_s; the later stages' overlap the earlier ones' drain), so
 *   clipping: max_s (end_s + allreduce_s) + the stages' agreement on the
 *             gradient norm (every stage sends its partial sum to every
 *             other at once: the slowest pair's latency) + the update;
 *   else:     max_s (end_s + allreduce_s + update_s - start_s), start_s
 *             when the stage's first forward starts (its next step's
 *             comes that long after stage 0's in any case);
 * with allreduce_s the ring all-reduce of a stage's gradients over its R
 * replicas, 2 (R-1)/R * bytes / bandwidth + 2 latency, or the
 * hierarchy over its regions when cheaper (allreduce_plan.h); only what
 * the gradient buckets leave after the last backward
 * (allreduce_exposed_seconds; CPU and CUDA devices alike reduce buckets
 * while the backward runs: runtime/comm/overlap.h).
 *
 * Traffic is priced as the comm pass sends it: an activation (or input)
 * from the stage that makes it straight to each later stage that reads
 * it, the lane's 1/R share of the micro-batch, its gradient back; a
 * parameter read on another stage (GPT-2's tied embedding) whole, once a
 * step, its gradient back once a step after the last micro-batch.  Under
 * --compress (m->compress) each tensor over a link it would wait for is
 * priced at the size the compress pass will send (compress_tensor_bytes,
 * with T* = the candidate's largest stage compute per micro-batch), and the
 * codec's time is added to the compute of both ends.  So a plan that
 * crosses a slow link compressed is weighed against one that avoids it.
 *
 * Shapes: S stages, R replicas, M micro-batches, n forward ops.  The DP is
 * O(S n^2) (a stage's alike replicas share one time row), the evaluation
 * O(S^2 (R + M) + the forward reads).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "../ir/pipeline_order.h"
#include "allreduce_plan.h"
#include "fence_cost.h"
#include "fence_dp_row.h"

/* fmax without its NaN rules (none arise here), so that it inlines. */
static inline double dmax(double a, double b) { return a > b ? a : b; }

/* ---- a candidate's devices, read once ------------------------------------ */

/* Per stage, the distinct time rows of its replicas; per pair of stages
 * (h, t), the slowest lane's bandwidth and the largest latency (lane r of
 * stage h talks to lane r of stage t).  pairs = 0: only consecutive
 * stages (what the DP needs). */
typedef struct {
    int32_t S, R;
    int32_t *rows, *n_rows; /* [S * R], [S] */
    double *bw, *lat;       /* [S * S] */
} lanes;

static void lanes_free(lanes *l)
{
    free(l->rows);
    free(l->n_rows);
    free(l->bw);
    free(l->lat);
}

static int lanes_init(lanes *l, const fence_model *m, const candidate *cd, int pairs)
{
    int32_t S = cd->S, R = cd->R;
    size_t SS = (size_t)S * (size_t)S;
    l->S = S, l->R = R;
    l->rows = malloc((size_t)S * (size_t)R * sizeof *l->rows);
    l->n_rows = calloc((size_t)S, sizeof *l->n_rows);
    l->bw = malloc(SS * sizeof *l->bw);
    l->lat = malloc(SS * sizeof *l->lat);
    if (!l->rows || !l->n_rows || !l->bw || !l->lat) {
        lanes_free(l);
        return -1;
    }
    for (int32_t s = 0; s < S; s++)
        for (int32_t r = 0; r < R; r++) {
            int32_t row = m->row_of[cd->dev[s * R + r]], seen = 0;
            for (int32_t i = 0; i < l->n_rows[s]; i++)
                seen |= l->rows[s * R + i] == row;
            if (!seen)
                l->rows[s * R + l->n_rows[s]++] = row;
        }
    for (int32_t h = 0; h < S; h++)
        for (int32_t t = 0; t < S; t++) {
            size_t ht = (size_t)h * S + t;
            l->bw[ht] = INFINITY, l->lat[ht] = 0.0;
            if (h == t || (!pairs && t != h + 1 && h != t + 1))
                continue;
            for (int32_t r = 0; r < R; r++) {
                double w, x;
                fence_link_of(m, cd->dev[h * R + r], cd->dev[t * R + r], &w, &x);
                l->bw[ht] = fmin(l->bw[ht], w);
                l->lat[ht] = fmax(l->lat[ht], x);
            }
        }
    return 0;
}

/* The slowest replica's seconds for forward positions [j, k] of stage s:
 * per micro-batch from table m->time (forward and backward; counts
 * m->n_ops) or m->time_fwd (forward alone; m->n_ops_fwd), a replica having
 * 1/R of the micro-batch, which shrinks its ops' work but not their
 * launches; or a step's update from m->update (counts NULL: each replica
 * runs all of it). */
static double stage_seconds(const fence_model *m, const lanes *l, const double *table, const int32_t *counts, int32_t s,
                            int32_t j, int32_t k)
{
    double worst = 0.0;
    size_t row = (size_t)m->n_fwd + 1;
    for (int32_t i = 0; i < l->n_rows[s]; i++) {
        int32_t r = l->rows[s * l->R + i];
        const double *t = table + (size_t)r * row;
        double span = t[k + 1] - t[j];
        if (counts) {
            double fixed = m->launch[r] * (counts[k + 1] - counts[j]);
            span = (span - fixed) / l->R + fixed;
        }
        worst = dmax(worst, span);
    }
    return worst;
}

/* ---- traffic ---------------------------------------------------------------- */

/* What value v puts on a link of bandwidth bw, as the comm and compress
 * passes send it: *f forward and *b back, per micro-batch (each_mb) or per
 * step (a parameter: once); *cf, *cb the codec's seconds at one end. */
static void tensor_traffic(const fence_model *m, int32_t v, int32_t R, int32_t M, int32_t hops, double bw,
                           double t_star, double *f, double *b, double *cf, double *cb, int *each_mb)
{
    const ir_value *val = &m->g->values[v];
    int param = val->role == ROLE_PARAM, grad = fence_is_float(val->dtype) && val->role != ROLE_INPUT && !val->frozen;
    int on = m->compress != 0.0 && t_star > 0 && fence_is_float(val->dtype);
    double size = (double)ir_dtype_size(val->dtype);
    double elements = (double)ir_shape_numel(&val->shape) / (param ? 1 : R);
    double cols = val->shape.rank > 0 ? (double)val->shape.dim[val->shape.rank - 1] : 1.0;
    *each_mb = !param;
    *cf = *cb = 0.0;
    /* The parameter sent once a step is never compressed; its gradient is
     * (top-k with error feedback), as is everything sent each micro-batch. */
    *f = param || !on ? (double)ir_value_bytes(m->g, v) / (param ? 1 : R)
                      : compress_tensor_bytes(elements, size, cols, bw, t_star, M, m->compress, 0, cf);
    *b = !grad ? 0.0
         : on  ? compress_tensor_bytes(elements, size, cols, bw, t_star, M, m->compress, param ? hops : 0, cb)
               : (double)ir_value_bytes(m->g, v) / (param ? 1 : R);
}

/* The bytes crossing the cut after k each micro-batch, each way, for the
 * DP: per tensor as tensor_traffic says (a step's parameter traffic as its
 * 1/M share); dense and summed when not compressing. */
static void cut_bytes(const fence_model *m, int32_t R, int32_t M, int32_t k, double bw, double t_star, double *fwd,
                      double *bwd)
{
    if (m->compress == 0.0 || !(t_star > 0)) {
        *fwd = m->cut_fwd[k] / R + m->cut_param[k] / M;
        *bwd = m->cut_bwd[k] / R + (m->cut_param[k] - m->cut_frozen[k]) / M;
        return;
    }
    *fwd = *bwd = 0.0;
    for (int32_t i = m->cut_start[k]; i < m->cut_start[k + 1]; i++) {
        double f, b, cf, cb;
        int each;
        /* Where a parameter's readers are is not known here: its gradient
         * gets the whole step's budget (M T*).  Its 1/M share a
         * micro-batch is small beside the activations either way: a
         * budget of one stage's drain gave the same plans on the five
         * DT-FM clusters. */
        tensor_traffic(m, m->cut_vals[i], R, M, M, bw, t_star, &f, &b, &cf, &cb, &each);
        *fwd += each ? f : f / M;
        *bwd += each ? b : b / M;
    }
}

/* What crosses between stages, per lane, as the comm pass sends it: each
 * value from its home stage straight to every other stage that reads it.
 * Per micro-batch fwd[h*S + t] (and its gradient back, bwd[t*S + h]); once
 * a step fwd_once / bwd_once (parameters).  codec_f[s], codec_b[s]: the
 * codec's seconds a stage spends per forward / backward (a step's
 * parameter gradients spread over its M backwards). */
typedef struct {
    double *fwd, *bwd, *fwd_once, *bwd_once; /* [S * S] */
    double *held_once;                       /* [S * S] fwd_once as the receiver holds it (f32) */
    double *codec_f, *codec_b;               /* [S]     */
} traffic;

/* Does parameter v reach stage t in 16 bits (passes.h:
 * comm_param_may_cross_half, the comm pass's rule): t's devices all CUDA
 * and every forward reader of v there a 16-bit product (their backward
 * readers are the products' backward). */
static int crosses_half(const fence_model *m, const candidate *cd, int32_t v, int32_t t, const int32_t *stage_at,
                        double bw)
{
    if (!m->c || !comm_param_may_cross_half(m->g, v) ||
        !comm_half_pays((double)ir_shape_numel(&m->g->values[v].shape), bw))
        return 0;
    for (int32_t r = 0; r < cd->R; r++)
        if (m->devices[cd->dev[(size_t)t * cd->R + r]].kind != DEVICE_CUDA)
            return 0;
    for (int32_t i = m->read_start[v]; i < m->read_start[v + 1]; i++)
        if (stage_at[m->read_pos[i]] == t && !comm_reader_rounds_weight(m->g, m->fwd[m->read_pos[i]]))
            return 0;
    return 1;
}

static int stage_traffic(const fence_model *m, const candidate *cd, const int32_t *end, const lanes *l, double t_star,
                         traffic *tr)
{
    const ir_graph *g = m->g;
    int32_t S = cd->S, M = cd->M;
    int32_t *stage_at = malloc(((size_t)m->n_fwd + 1) * sizeof *stage_at);
    char *sent = calloc((size_t)S, 1);
    if (!stage_at || !sent) {
        free(stage_at);
        free(sent);
        return -1;
    }
    for (int32_t s = 0, k = 0; s < S; s++)
        for (; k <= end[s]; k++)
            stage_at[k] = s;
    for (int32_t v = 0; v < g->n_values; v++) {
        if (m->first_fwd[v] < 0 || g->values[v].role == ROLE_STATE || m->read_start[v] == m->read_start[v + 1])
            continue;
        int32_t home = stage_at[m->first_fwd[v]];
        memset(sent, 0, (size_t)S);
        for (int32_t i = m->read_start[v]; i < m->read_start[v + 1]; i++) {
            int32_t t = stage_at[m->read_pos[i]];
            if (t == home || sent[t])
                continue;
            sent[t] = 1;
            size_t ht = (size_t)home * S + t, th = (size_t)t * S + home;
            double f, b, cf, cb;
            int each;
            tensor_traffic(m, v, cd->R, M, t > home ? t - home : 1, l->bw[ht], t_star, &f, &b, &cf, &cb, &each);
            if (each) {
                tr->fwd[ht] += f;
                tr->bwd[th] += b;
                tr->codec_f[home] += cf;
                tr->codec_f[t] += cf;
                tr->codec_b[t] += cb;
                tr->codec_b[home] += cb;
            } else {
                tr->held_once[ht] += f;
                if (crosses_half(m, cd, v, t, stage_at, l->bw[ht])) {
                    double cast = comm_half_cast_seconds((double)ir_shape_numel(&g->values[v].shape));
                    f /= 2.0; /* the comm pass sends it in the graph's 16 bits, cast at both ends */
                    tr->codec_f[home] += cast / M;
                    tr->codec_f[t] += cast / M;
                }
                tr->fwd_once[ht] += f;
                tr->bwd_once[th] += b;
                tr->codec_b[t] += cb / M;
                tr->codec_b[home] += cb / M;
            }
        }
    }
    free(stage_at);
    free(sent);
    return 0;
}

/* ---- the pipeline, event by event ------------------------------------------- */

/* The forward and backward of M micro-batches in the runtime's 1F1B order
 * (runtime/main.c, the schedule pass's warm-up), event by event.  A stage
 * runs its next action once every tensor it needs has arrived: a forward,
 * every activation sent to it (micro-batch 0: and the parameters sent once
 * a step); a backward, every gradient sent to it (the last stage's, its
 * own forward).  A tensor leaves when its op is done and its link (the
 * pair of stages; the slowest replica lane) is free, is on the link
 * bytes / bandwidth, and arrives a latency later; links carry activations
 * and gradients in opposite directions at once.  A step's parameter
 * gradients leave after the sender's last backward, and the receiver's
 * update waits for them.  f[s], b[s]: a stage's forward and backward per
 * micro-batch; room[s]: its memory for waiting micro-batches.  A stage
 * that recomputes keeps a forward whole while fewer than keep[s] are, as
 * the runtime does (runtime/stepper.c), and replays the others before
 * their backward.  *warm_out, *recompute_out and *keep_out (when not
 * NULL, [S]) get what schedule_plan chose.
 * Returns the time the last stage is done, or -1 when out of memory. */
static double simulate_1f1b(const fence_model *m, const candidate *cd, const lanes *l, const traffic *tr,
                            const double *f, const double *b, const schedule_memory *room, int32_t *warm_out,
                            uint8_t *recompute_out, int32_t *keep_out, double *start_out, double *end_out)
{
    int32_t S = cd->S, M = cd->M;
    size_t SM = (size_t)S * (size_t)M, SS = (size_t)S * (size_t)S;
    double *link_free = calloc(SS, sizeof *link_free);
    double *ready_f = calloc(SM, sizeof *ready_f), *ready_b = calloc(SM, sizeof *ready_b);
    int32_t *got_f = calloc(SM, sizeof *got_f), *got_b = calloc(SM, sizeof *got_b);
    int32_t *need_f0 = calloc((size_t)S, sizeof *need_f0), *need_f = calloc((size_t)S, sizeof *need_f);
    int32_t *need_b = calloc((size_t)S, sizeof *need_b);
    double *free_at = calloc((size_t)S, sizeof *free_at), *once_at = calloc((size_t)S, sizeof *once_at);
    int32_t *order = malloc(SM * 2 * sizeof *order), *next = calloc((size_t)S, sizeof *next);
    double *stage_time = calloc((size_t)S, sizeof *stage_time), *round_trip = calloc((size_t)S, sizeof *round_trip);
    double *transfer = calloc((size_t)S, sizeof *transfer);
    int32_t *warm = calloc((size_t)S, sizeof *warm), *keep = calloc((size_t)S, sizeof *keep);
    int32_t *whole_now = calloc((size_t)S, sizeof *whole_now); /* micro-batches a stage keeps whole now */
    uint8_t *recompute = calloc((size_t)S, 1), *whole = calloc(SM, 1);
    double makespan = -1.0;
    if (!link_free || !ready_f || !ready_b || !got_f || !got_b || !need_f0 || !need_f || !need_b || !free_at ||
        !once_at || !order || !next || !stage_time || !round_trip || !transfer || !warm || !keep || !whole_now ||
        !recompute || !whole)
        goto done;
    for (int32_t s = 0; s < S; s++)
        for (int32_t t = 0; t < S; t++) {
            size_t st = (size_t)s * S + t;
            need_f[t] += tr->fwd[st] > 0;
            need_f0[t] += tr->fwd[st] > 0 || tr->fwd_once[st] > 0;
            need_b[t] += tr->bwd[st] > 0;
        }
    /* The runtime's order (the schedule pass's warm-up): +m a forward, -(m+1) a backward. */
    for (int32_t s = 0; s < S; s++) {
        size_t next_stage = (size_t)s * S + s + 1, back = (size_t)(s + 1) * S + s;
        stage_time[s] = f[s] + b[s];
        transfer[s] = s + 1 < S ? fmax(tr->fwd[next_stage], tr->bwd[back]) / l->bw[next_stage] : 0.0;
        round_trip[s] = s + 1 < S ? 2.0 * (l->lat[next_stage] + transfer[s]) : 0.0;
    }
    /* The schedule pass's warm-up and recompute choice; a stage that
     * recomputes runs its forward again before each backward, as soon as
     * it is free: the runtime replays, then its backward program waits for
     * the gradient (runtime/stepper.c), so a replay fills the wait.  Added
     * to the backward after the gradient came instead, this model put an
     * 8B LoRA's 8-stage pipeline world-wide at 18.02 s a step where the
     * simulator, which runs the program op by op, has 16.65 s. */
    if (schedule_plan(S, M, stage_time, f, round_trip, transfer, room, m->recompute, warm, recompute, keep, NULL))
        goto done;
    for (int32_t s = 0; s < S; s++)
        pipeline_order(M, warm[s], order + (size_t)s * 2 * M);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int32_t s = 0; s < S; s++)
            while (next[s] < 2 * M) {
                int32_t a = order[(size_t)s * 2 * M + next[s]], mb = a >= 0 ? a : -a - 1;
                size_t at = (size_t)s * M + mb;
                int ready = a >= 0 ? got_f[at] == (mb == 0 ? need_f0[s] : need_f[s]) : got_b[at] == need_b[s];
                if (!ready)
                    break;
                double start = free_at[s], done_at;
                if (a >= 0) {
                    start = fmax(start, ready_f[at]);
                    done_at = start + f[s];
                    if (recompute[s] && whole_now[s] < keep[s]) /* kept whole: its backward needs no replay */
                        whole[at] = 1, whole_now[s]++;
                } else { /* a replay does not wait for the gradient: the backward receives it after */
                    int replays = recompute[s] && !whole[at];
                    whole_now[s] -= whole[at];
                    done_at = fmax(start + (replays ? f[s] : 0.0), ready_b[at]) + b[s];
                }
                if (start_out && next[s] == 0)
                    start_out[s] = start;
                free_at[s] = done_at;
                for (int32_t t = 0; t < S; t++) {
                    size_t st = (size_t)s * S + t;
                    double bytes = a >= 0 ? tr->fwd[st] + (mb == 0 ? tr->fwd_once[st] : 0.0)
                                          : tr->bwd[st] + (mb == M - 1 ? tr->bwd_once[st] : 0.0);
                    if (bytes <= 0)
                        continue;
                    double tx = fmax(link_free[st], done_at), on_wire = bytes / l->bw[st];
                    link_free[st] = tx + on_wire;
                    double arrive = tx + on_wire + l->lat[st];
                    size_t to = (size_t)t * M + mb;
                    if (a >= 0) {
                        ready_f[to] = fmax(ready_f[to], arrive);
                        got_f[to]++;
                    } else if (tr->bwd[st] > 0) {
                        ready_b[to] = fmax(ready_b[to], arrive);
                        got_b[to]++;
                    }
                    if (a < 0 && mb == M - 1 && tr->bwd_once[st] > 0)
                        once_at[t] = fmax(once_at[t], arrive); /* the receiver's update waits */
                }
                if (a >= 0 && need_b[s] == 0)
                    ready_b[at] = done_at; /* no gradient comes: its own loss */
                next[s]++;
                progress = 1;
            }
    }
    makespan = 0.0;
    for (int32_t s = 0; s < S; s++) {
        if (next[s] < 2 * M) { /* cannot happen for a pipeline of forward edges; be safe */
            makespan = INFINITY;
            break;
        }
        makespan = fmax(makespan, fmax(free_at[s], once_at[s]));
        if (end_out)
            end_out[s] = fmax(free_at[s], once_at[s]);
    }
    if (warm_out)
        memcpy(warm_out, warm, (size_t)S * sizeof *warm);
    if (recompute_out)
        memcpy(recompute_out, recompute, (size_t)S);
    if (keep_out)
        memcpy(keep_out, keep, (size_t)S * sizeof *keep);
done:
    free(link_free);
    free(ready_f);
    free(ready_b);
    free(got_f);
    free(got_b);
    free(need_f0);
    free(need_f);
    free(need_b);
    free(free_at);
    free(once_at);
    free(order);
    free(next);
    free(stage_time);
    free(round_trip);
    free(transfer);
    free(warm);
    free(keep);
    free(whole_now);
    free(recompute);
    free(whole);
    return makespan;
}

/* ---- the step -------------------------------------------------------------- */

/* Stage s's gradients averaged over its replicas: the ring, or the
 * hierarchy over its regions when cheaper (allreduce_plan.h, the comm
 * pass's same choice). */
static void model_link(const void *ctx, int32_t a, int32_t b, double *bw, double *lat)
{
    fence_link_of(ctx, a, b, bw, lat);
}

static double allreduce_seconds(const fence_model *m, const candidate *cd, int32_t s, double grad_bytes,
                                double *latency, int *bits)
{
    *latency = 0.0;
    *bits = 0;
    if (cd->R < 2)
        return 0.0;
    int64_t groups = 0;
    const int32_t *dev = cd->dev + (size_t)s * cd->R;
    if (m->shard) { /* the ring alone (the comm pass) */
        *latency = allreduce_seconds_for(dev, cd->R, 1.0, 0, model_link, m);
        return allreduce_seconds_for(dev, cd->R, grad_bytes, 0, model_link, m);
    }
    double t = allreduce_choose(m->c, dev, cd->R, grad_bytes, m->compress != 0.0, model_link, m, &groups, bits);
    /* What one more bucket adds: the same way's latencies (a byte's worth). */
    *latency = allreduce_way_seconds(dev, cd->R, 1.0, groups, *bits, model_link, m);
    return t;
}

double fence_t_star(const fence_model *m, const candidate *cd, const int32_t *end)
{
    lanes l;
    double t = 0.0;
    if (lanes_init(&l, m, cd, 0))
        return 0.0;
    for (int32_t s = 0, j = 0; s < cd->S; j = end[s] + 1, s++)
        t = fmax(t, stage_seconds(m, &l, m->time, m->n_ops, s, j, end[s]));
    lanes_free(&l);
    return t;
}

/* A stage's memory (fence_cost.h): its state (parameters, gradients and
 * AdamW's moments, 4 x; 2 + 2/R x when sharded; a parameter received once a step and its summed
 * gradient, 2 x; under the quantised exchange, bits[s] != 0, its feedback:
 * the gradients and a chunk), what one micro-batch in flight adds (its
 * forward outputs, a lane's share; recomputing, what it receives, the
 * inputs being too small to count), and its smallest device's memory. */
static void stage_memory(const fence_model *m, const candidate *cd, const int32_t *end, const traffic *tr,
                         const int *bits, int32_t s, double *state, double *stash, double *replay, double *memory)
{
    int32_t S = cd->S, j = s > 0 ? end[s - 1] + 1 : 0;
    double received = 0.0;
    for (int32_t h = 0; h < S; h++)
        received += tr->held_once[(size_t)h * S + s];
    double grads = m->param_bytes[end[s] + 1] - m->param_bytes[j];
    double frozen = m->frozen_bytes[end[s] + 1] - m->frozen_bytes[j];
    double moments = m->shard && cd->R > 1 ? 2.0 / cd->R : 2.0; /* --shard-optimizer: a 1/R piece */
    *state = (bits[s] ? 3.0 + moments + 1.0 / cd->R : 2.0 + moments) * grads + frozen + 2.0 * received;
    *stash = (m->act_bytes[end[s] + 1] - m->act_bytes[j]) / cd->R;
    *replay = s > 0 ? m->cut_fwd[end[s - 1]] / cd->R : 0.0;
    *memory = INFINITY;
    for (int32_t r = 0; r < cd->R; r++) {
        double have = estimate_usable_memory(&m->devices[cd->dev[s * cd->R + r]]);
        if (have > 0)
            *memory = fmin(*memory, fmax(have - m->memory_reserve, 1.0));
    }
}

/* The fullest device's need over its memory, with warm[s] + 1 micro-batches
 * in flight: whole, or (recomputing) keep[s] whole, the rest their inputs,
 * beside the running one's. */
static double memory_fill(const fence_model *m, const candidate *cd, const int32_t *end, const traffic *tr,
                          const int *bits, const int32_t *warm, const uint8_t *recompute, const int32_t *keep)
{
    double fill = 0.0;
    for (int32_t s = 0; s < cd->S; s++) {
        double state, stash, replay, memory;
        stage_memory(m, cd, end, tr, bits, s, &state, &stash, &replay, &memory);
        int32_t in_flight = warm[s] + 1 < cd->M ? warm[s] + 1 : cd->M;
        if (memory < INFINITY)
            fill = fmax(fill, (state + (recompute[s] ? stash + keep[s] * stash + (in_flight - keep[s]) * replay
                                                     : in_flight * stash)) /
                                  memory);
    }
    return fill;
}

double fence_evaluate(const fence_model *m, const candidate *cd, const int32_t *end, fence_plan *out, double *fill)
{
    int32_t S = cd->S;
    size_t SS = (size_t)S * (size_t)S;
    lanes l;
    traffic tr = { 0 };
    double *f = calloc((size_t)S, sizeof *f), *b = calloc((size_t)S, sizeof *b), *c = calloc((size_t)S, sizeof *c);
    int32_t *warm = calloc((size_t)S, sizeof *warm);
    schedule_memory *room = calloc((size_t)S, sizeof *room);
    int32_t *keep = calloc((size_t)S, sizeof *keep);
    uint8_t *recompute = calloc((size_t)S, 1);
    double *first = calloc((size_t)S, sizeof *first), *last = calloc((size_t)S, sizeof *last);
    double *ar_of = calloc((size_t)S, sizeof *ar_of), *upd_of = calloc((size_t)S, sizeof *upd_of), upd_max = 0.0;
    int *bits = calloc((size_t)S, sizeof *bits); /* each stage's all-reduce: 0 dense, else quantised */
    int have_lanes = lanes_init(&l, m, cd, 1) == 0;
    tr.fwd = calloc(SS, sizeof *tr.fwd);
    tr.bwd = calloc(SS, sizeof *tr.bwd);
    tr.fwd_once = calloc(SS, sizeof *tr.fwd_once);
    tr.held_once = calloc(SS, sizeof *tr.held_once);
    tr.bwd_once = calloc(SS, sizeof *tr.bwd_once);
    tr.codec_f = calloc((size_t)S, sizeof *tr.codec_f);
    tr.codec_b = calloc((size_t)S, sizeof *tr.codec_b);
    double T = INFINITY;
    if (fill)
        *fill = INFINITY;
    if (!f || !b || !c || !warm || !room || !keep || !recompute || !first || !last || !ar_of || !upd_of || !bits ||
        !have_lanes || !tr.fwd || !tr.bwd || !tr.fwd_once || !tr.bwd_once || !tr.held_once || !tr.codec_f ||
        !tr.codec_b)
        goto done;
    /* Compute per micro-batch, T* (the compress pass's target), then the
     * traffic at the sizes it will send and the codec's time. */
    double t_star = 0.0;
    for (int32_t s = 0, j = 0; s < S; j = end[s] + 1, s++) {
        f[s] = stage_seconds(m, &l, m->time_fwd, m->n_ops_fwd, s, j, end[s]);
        c[s] = stage_seconds(m, &l, m->time, m->n_ops, s, j, end[s]);
        b[s] = c[s] - f[s];
        t_star = fmax(t_star, c[s]);
    }
    if (stage_traffic(m, cd, end, &l, t_star, &tr))
        goto done;
    for (int32_t s = 0; s < S; s++) {
        f[s] += tr.codec_f[s];
        b[s] += tr.codec_b[s];
    }
    double sum = 0.0, bottleneck = 0.0, tail = 0.0;
    int32_t where = 0, is_link = 0;
    for (int32_t s = 0, j = 0; s < S; j = end[s] + 1, s++) {
        double cs = f[s] + b[s], busy = 0.0, fwd = 0.0, bwd = 0.0;
        double grads = m->param_bytes[end[s] + 1] - m->param_bytes[j];
        double upd = stage_seconds(m, &l, m->update, NULL, s, j, end[s]);
        double latency, ar = allreduce_seconds(m, cd, s, grads, &latency, &bits[s]);
        if (ar > 0.0 && m->shard && cd->R > 1) {
            /* ZeRO-1: the buckets' reduce-scatter (half the ring) during the
             * last backward; after it, the partial norms' sum (R - 1 ring
             * steps), each replica's update of its 1/R, and the all-gather
             * of the parameters (the other half, in buckets of 25 MiB) */
            ar = allreduce_exposed_seconds(0.5 * ar, 0.5 * latency, b[s], grads) + 0.5 * latency + 0.5 * ar +
                 (allgather_buckets(grads) - 1) * 0.5 * latency;
            upd /= cd->R;
        } else if (ar > 0.0) { /* the buckets go during the last backward (the comm pass's assign_buckets) */
            ar = allreduce_exposed_seconds(ar, latency, b[s], grads);
        }
        sum += cs;
        if (cs > bottleneck)
            bottleneck = cs, where = s, is_link = 0;
        if (s + 1 < S) {
            size_t next = (size_t)s * S + s + 1;
            cut_bytes(m, cd->R, cd->M, end[s], l.bw[next], t_star, &fwd, &bwd);
            busy = fmax(fwd, bwd) / l.bw[next];
            sum += (fwd + bwd) / l.bw[next] + 2.0 * l.lat[next]; /* the first micro-batch's round trip */
            if (busy > bottleneck)
                bottleneck = busy, where = s, is_link = 1;
        }
        tail = fmax(tail, upd + ar);
        ar_of[s] = ar, upd_of[s] = upd, upd_max = fmax(upd_max, upd);
        if (out) {
            out->stage_compute[s] = cs;
            out->stage_update[s] = upd;
            out->cut_transfer[s] = busy;
            out->cut_bytes[s] = fwd;
            out->allreduce[s] = ar;
        }
    }
    /* The clipping norm: every stage sends its partial sum of squares to
     * every other at once (the comm pass's clip_norm_per_stage): the
     * slowest pair's latency. */
    double norm_sync = 0.0;
    for (int32_t s = 0; m->clip && s < S; s++)
        for (int32_t t = 0; t < S; t++)
            norm_sync = fmax(norm_sync, s == t ? 0.0 : l.lat[(size_t)s * S + t]);
    for (int32_t s = 0; s < S; s++) { /* the warm-up the schedule pass will allow (schedule.c) */
        double state, stash, replay, memory;
        stage_memory(m, cd, end, &tr, bits, s, &state, &stash, &replay, &memory);
        /* beside the state, the running micro-batch's outputs (as the schedule pass counts its arena) */
        room[s] = (schedule_memory){ memory < INFINITY ? memory - state - stash : INFINITY, stash, replay };
    }
    double pipeline = simulate_1f1b(m, cd, &l, &tr, f, b, room, warm, recompute, keep, first, last);
    if (pipeline < 0) { /* out of memory: the closed form instead, plain 1F1B */
        pipeline = sum + (cd->M - 1) * bottleneck;
        for (int32_t s = 0; s < S; s++) {
            warm[s] = S - s - 1;
            recompute[s] = 0;
            keep[s] = 0;
        }
        T = pipeline + tail + norm_sync;
    } else {
        /* Each stage averages its gradients as soon as its own last
         * backward is done (and a shared parameter's gradient is in), as
         * the devices do, not when the whole pipeline is: the later stages'
         * all-reduces overlap the earlier stages' drain.  With the clip,
         * every update waits for every stage's norm, so the step is the
         * last all-reduce's end, the norms' exchange and the update; else a
         * stage's step restarts its update later, and its next step's first
         * forward comes first[s] after stage 0's anyway (last[s]: its
         * last backward's end, first[s]: its first forward's start). */
        T = 0.0;
        for (int32_t s = 0; s < S; s++)
            T = m->clip ? fmax(T, last[s] + ar_of[s] + norm_sync + upd_max)
                        : fmax(T, last[s] + ar_of[s] + upd_of[s] - first[s]);
    }
    if (fill)
        *fill = memory_fill(m, cd, end, &tr, bits, warm, recompute, keep);
    if (out) {
        memcpy(out->recompute, recompute, (size_t)S);
        out->step_seconds = T;
        out->bottleneck = bottleneck;
        out->bottleneck_stage = where;
        out->bottleneck_is_link = is_link;
    }
done:
    if (have_lanes)
        lanes_free(&l);
    free(f);
    free(b);
    free(c);
    free(warm);
    free(room);
    free(keep);
    free(recompute);
    free(first);
    free(last);
    free(ar_of);
    free(upd_of);
    free(bits);
    free(tr.fwd);
    free(tr.bwd);
    free(tr.fwd_once);
    free(tr.held_once);
    free(tr.bwd_once);
    free(tr.codec_f);
    free(tr.codec_b);
    return T;
}

/* ---- the cut ----------------------------------------------------------------- */

/* The DP over a chain of stages (fence_cost.h).  best[s][k]: the least
 * bottleneck of positions [0, k] on stages [0, s]; stage s is [j, k].  The
 * rows depend only on the first s + 1 stages' devices, so one table serves
 * every S up to the chain's length; rows are filled as they are asked for. */
struct fence_dp {
    const fence_model *m;
    lanes l;
    int32_t S_max, n, M;
    int32_t rows; /* rows filled so far                                */
    double t_star;
    double *best, *cut;    /* [S_max * n], [(S_max - 1) * n]                     */
    int32_t *from;         /* [S_max * n]                                        */
    const int32_t *cd_dev; /* the candidate's devices, [S_max * R]               */
    double *prefix;        /* [n + 1] scratch: a stage's seconds as one prefix    */
    int memory;            /* stages must fit their devices' memory (S = S_max)   */
};

fence_dp *fence_dp_new(const fence_model *m, const candidate *cd, double t_star, int memory)
{
    fence_dp *dp = calloc(1, sizeof *dp);
    int32_t S = cd->S, n = m->n_fwd;
    if (!dp)
        return NULL;
    dp->m = m, dp->S_max = S, dp->n = n, dp->M = cd->M, dp->t_star = t_star, dp->memory = memory;
    dp->cd_dev = cd->dev; /* read while rows are filled: the caller keeps it */
    int have_lanes = lanes_init(&dp->l, m, cd, 0) == 0;
    dp->best = malloc((size_t)S * (size_t)n * sizeof *dp->best + 1);
    dp->cut = malloc((size_t)(S > 1 ? S - 1 : 1) * (size_t)n * sizeof *dp->cut + 1);
    dp->from = malloc((size_t)S * (size_t)n * sizeof *dp->from + 1);
    dp->prefix = malloc(((size_t)n + 1) * sizeof *dp->prefix);
    if (!have_lanes || !dp->best || !dp->cut || !dp->from || !dp->prefix) {
        if (have_lanes)
            lanes_free(&dp->l);
        free(dp->best), free(dp->cut), free(dp->from), free(dp->prefix), free(dp);
        return NULL;
    }
    return dp;
}

void fence_dp_free(fence_dp *dp)
{
    if (!dp)
        return;
    lanes_free(&dp->l);
    free(dp->best);
    free(dp->cut);
    free(dp->from);
    free(dp->prefix);
    free(dp);
}

/* Would stage [j, k] overfill a device with `have` bytes (plain 1F1B's
 * micro-batches in flight, and room for a copy of the parameters read on
 * several stages)?  Only more so as j falls. */
static int stage_too_big(const fence_model *m, int32_t R, double in_flight, double have, int32_t j, int32_t k)
{
    return have < INFINITY && 4.0 * (m->param_bytes[k + 1] - m->param_bytes[j]) +
                                      (m->frozen_bytes[k + 1] - m->frozen_bytes[j]) +
                                      in_flight * (m->act_bytes[k + 1] - m->act_bytes[j]) / R >
                                  have - 2.0 * m->shared_bytes;
}

/* Row s >= 1 of a stage of alike replicas (its seconds the prefix t) by
 * fence_dp_row: the same doubles as dp_fill_row's scan, which is
 * quadratic over long stages, in O(n log n).  1 where fence_dp_row's
 * terms do not hold (t not finite and non-decreasing, a NaN before or at a
 * cut, memory's prefix sums falling) or memory runs out: the scan then
 * writes the row. */
static int dp_row_fast(const fence_dp *dp, int32_t s, const double *t, const double *prev, const double *cut,
                       double have, double in_flight, double *best, int32_t *from)
{
    const fence_model *m = dp->m;
    int32_t n = dp->n, R = dp->l.R;
    for (int32_t k = 0; k <= n; k++)
        if (!isfinite(t[k]) || (k > 0 && !(t[k] >= t[k - 1])))
            return 1;
    for (int32_t k = 1; k <= n && have < INFINITY; k++)
        if (!(m->param_bytes[k] >= m->param_bytes[k - 1]) || !(m->frozen_bytes[k] >= m->frozen_bytes[k - 1]) ||
            !(m->act_bytes[k] >= m->act_bytes[k - 1]))
            return 1;
    double *b = malloc(((size_t)n + 1) * sizeof *b);
    int32_t *lo = malloc(((size_t)n + 1) * sizeof *lo);
    int rc = b && lo ? 0 : 1;
    for (int32_t j = 1; j < n && rc == 0; j++) { /* b[j]: stage s starts at j */
        rc = isnan(prev[j - 1]) || isnan(cut[j - 1]);
        b[j] = dmax(prev[j - 1], cut[j - 1]);
    }
    /* lo[k]: where the longest stage [lo, k] that fits starts (k + 1: none
     * does); it only moves right as k grows (a stage grows with k). */
    for (int32_t k = 0, a = s; k < n && rc == 0; k++) {
        while (a <= k && stage_too_big(m, R, in_flight, have, a, k))
            a++;
        lo[k] = k < s ? k + 1 : a;
    }
    if (n > 0 && rc == 0)
        b[0] = INFINITY; /* never read: j >= s >= 1 */
    if (rc == 0 && fence_dp_row(b, t, lo, n, FENCE_DP_SCAN_STEPS, best, from))
        rc = 1;
    free(b);
    free(lo);
    return rc;
}

/* Row s: the cut into stage s from stage s - 1 (its busier direction per
 * micro-batch on the slowest lane), then best[s][*].  j runs down from k:
 * stage s only grows as j falls, so once it alone passes the best found no
 * smaller j can win.  Ties go to the smallest j.  A stage of alike replicas
 * (the usual case) reads one prefix row. */
static void dp_fill_row(fence_dp *dp, int32_t s)
{
    const fence_model *m = dp->m;
    const lanes *l = &dp->l;
    int32_t n = dp->n;
    /* One row: the stage's seconds as one prefix, t[k + 1] - t[j], its
     * work shared by the R replicas and its launches not (stage_seconds). */
    double *t = l->n_rows[s] == 1 ? dp->prefix : NULL;
    if (t) {
        int32_t r = l->rows[s * l->R];
        const double *p = m->time + (size_t)r * ((size_t)n + 1);
        for (int32_t k = 0; k <= n; k++)
            t[k] = p[k] / l->R + m->launch[r] * (1.0 - 1.0 / l->R) * m->n_ops[k];
    }
    double *best = dp->best + (size_t)s * n;
    int32_t *from = dp->from + (size_t)s * n;
    double have = INFINITY, in_flight = dp->S_max - s < dp->M ? dp->S_max - s : dp->M;
    for (int32_t r = 0; dp->memory && r < l->R; r++)
        if (m->devices[dp->cd_dev[s * l->R + r]].memory_bytes > 0)
            have = fmin(have,
                        fmax(estimate_usable_memory(&m->devices[dp->cd_dev[s * l->R + r]]) - m->memory_reserve, 1.0));
    if (s == 0) {
        for (int32_t k = 0; k < n; k++) {
            int fits = !(have < INFINITY) ||
                       4.0 * m->param_bytes[k + 1] + m->frozen_bytes[k + 1] + in_flight * m->act_bytes[k + 1] / l->R <=
                           have - 2.0 * m->shared_bytes;
            best[k] = !fits ? INFINITY : t ? t[k + 1] - t[0] : stage_seconds(m, l, m->time, m->n_ops, 0, 0, k);
            from[k] = -1;
        }
        return;
    }
    double *cut = dp->cut + (size_t)(s - 1) * n;
    size_t link = (size_t)(s - 1) * l->S + s;
    for (int32_t k = 0; k < n; k++) {
        double fwd, bwd;
        cut_bytes(m, l->R, dp->M, k, l->bw[link], dp->t_star, &fwd, &bwd);
        cut[k] = dmax(fwd, bwd) / l->bw[link];
    }
    const double *prev = best - n;
    if (t && dp_row_fast(dp, s, t, prev, cut, have, in_flight, best, from) == 0)
        return;
    for (int32_t k = 0; k < n; k++) {
        double bound = INFINITY;
        int32_t arg = -1;
        for (int32_t j = k; j >= s; j--) { /* stage s-1 ends at j-1 */
            double here = t ? t[k + 1] - t[j] : stage_seconds(m, l, m->time, m->n_ops, s, j, k);
            /* Memory only grows as the stage does: the first j that does not
             * fit ends the search. */
            if (here > bound || stage_too_big(m, l->R, in_flight, have, j, k))
                break;
            double v = dmax(prev[j - 1], dmax(cut[j - 1], here));
            if (v <= bound)
                bound = v, arg = j - 1;
        }
        best[k] = bound;
        from[k] = arg;
    }
}

int fence_dp_cuts(fence_dp *dp, int32_t S, int32_t *end)
{
    if (S < 1 || S > dp->S_max || dp->n < S)
        return -1;
    for (; dp->rows < S; dp->rows++)
        dp_fill_row(dp, dp->rows);
    if (!(dp->best[(size_t)(S - 1) * dp->n + dp->n - 1] < INFINITY))
        return -1; /* no cut fits (memory) */
    for (int32_t s = S - 1, k = dp->n - 1; s >= 0; s--) {
        end[s] = k;
        k = dp->from[(size_t)s * dp->n + k];
    }
    return 0;
}

double fence_dp_bottleneck(fence_dp *dp, int32_t S)
{
    if (S < 1 || S > dp->S_max || dp->n < S)
        return INFINITY;
    for (; dp->rows < S; dp->rows++)
        dp_fill_row(dp, dp->rows);
    return dp->best[(size_t)(S - 1) * dp->n + dp->n - 1];
}

int fence_cut_dp(const fence_model *m, const candidate *cd, double t_star, int memory, int32_t *end)
{
    if (m->n_fwd < cd->S)
        return -1;
    fence_dp *dp = fence_dp_new(m, cd, t_star, memory);
    int rc = dp ? fence_dp_cuts(dp, cd->S, end) : -1;
    fence_dp_free(dp);
    return rc;
}
