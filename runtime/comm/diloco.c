/* diloco.c: the outer step of --sync diloco (diloco.h). */
#include "diloco.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../ir/ir.h"
#include "hub.h"
#include "quant.h"
#include "../rt_error.h"

/* micro_batch tags of the outer messages: no pipeline message uses them
 * (those are >= 0, the replica ring's -2 - k). */
#define OUTER_DELTA_TAG (-1000) /* a site's delta, to the other sites' holders */
#define OUTER_PARAM_TAG (-1001) /* the new parameters, down the stage's replicas */

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static size_t wire_bytes(const rt_diloco *d, const rt_outer_param *q)
{
    return d->info.outer_bits ? quant_encoded_bytes(q->rows, q->cols, d->info.outer_bits) : (size_t)q->n * 4;
}

int rt_diloco_init(rt_diloco *d, const rt_manifest *m, const rt_diloco_param *table, const rt_tensor_info *tensors,
                   int32_t n_tensors, char *arena, char *err, size_t n)
{
    memset(d, 0, sizeof *d);
    d->info = m->diloco;
    d->table = table;
    d->stage = m->stage;
    d->replica = m->replica;
    d->n_replicas = m->n_replicas;
    d->self = m->device_index;
    if (d->info.local_steps < 1 || d->info.n_sites < 2 || d->info.n_sites > RT_MAX_SITES) {
        return rt_error(err, n, "diloco: %d inner steps over %d sites in the manifest", d->info.local_steps,
                        d->info.n_sites);
    }
    d->params = calloc((size_t)d->info.n_params + 1, sizeof *d->params);
    if (!d->params)
        goto oom;
    int64_t largest = 0;
    size_t wire = 0;
    for (int32_t i = 0; i < d->info.n_params; i++) {
        if (table[i].stage != d->stage)
            continue;
        const rt_tensor_info *ti = NULL;
        for (int32_t k = 0; k < n_tensors && !ti; k++)
            if (tensors[k].role == ROLE_PARAM && strcmp(tensors[k].name, table[i].name) == 0)
                ti = &tensors[k];
        if (!ti) {
            return rt_error(err, n, "diloco: this device's stage updates parameter '%.60s', which it does not hold",
                            table[i].name);
        }
        rt_outer_param *q = &d->params[d->n++];
        q->index = i;
        q->param = (float *)(arena + ti->t.offset);
        q->n = rt_tensor_numel(&ti->t);
        q->cols = ti->t.rank > 0 ? ti->t.dim[ti->t.rank - 1] : 1;
        q->rows = q->n / (q->cols > 0 ? q->cols : 1);
        largest = q->n > largest ? q->n : largest;
        if (wire_bytes(d, q) > wire)
            wire = wire_bytes(d, q);
        if (d->replica != 0)
            continue;
        size_t bytes = (size_t)q->n * sizeof(float);
        q->anchor = malloc(bytes + 1);
        q->start = malloc(bytes + 1);
        q->momentum = calloc((size_t)q->n + 1, sizeof(float));
        q->residual = d->info.outer_bits ? calloc((size_t)q->n + 1, sizeof(float)) : NULL;
        q->pending = d->info.outer_delay ? malloc(bytes + 1) : NULL;
        q->mine = malloc(bytes + 1);
        if (!q->anchor || !q->start || !q->momentum || !q->mine || (d->info.outer_bits && !q->residual) ||
            (d->info.outer_delay && !q->pending))
            goto oom;
        memcpy(q->anchor, q->param, bytes);
        memcpy(q->start, q->param, bytes);
    }
    d->wire = malloc(wire + 1);
    d->wire_bytes = wire;
    d->decoded = malloc(((size_t)largest + 1) * sizeof(float));
    d->sum = malloc(((size_t)largest + 1) * sizeof(float));
    if (!d->wire || !d->decoded || !d->sum)
        goto oom;
    return 0;
oom:
    return rt_error(err, n, "diloco: out of memory for the outer optimizer's state");
}

void rt_diloco_free(rt_diloco *d)
{
    for (int32_t i = 0; d->params && i < d->n; i++) {
        rt_outer_param *q = &d->params[i];
        free(q->anchor);
        free(q->start);
        free(q->momentum);
        free(q->residual);
        free(q->pending);
        free(q->mine);
    }
    free(d->params);
    free(d->wire);
    free(d->decoded);
    free(d->sum);
    memset(d, 0, sizeof *d);
}

int64_t rt_diloco_site_steps(const rt_diloco_info *info, int64_t steps)
{
    int64_t most = 1, own = info->local_steps;
    for (int32_t k = 0; k < info->n_sites; k++)
        most = info->site_steps[k] > most ? info->site_steps[k] : most;
    int64_t rounds = steps / most, rest = steps % most;
    return rounds * own + (rest * own + most - 1) / most;
}

int rt_diloco_due(const rt_diloco *d, int64_t step, int64_t last_step)
{
    return step == last_step || step % d->info.local_steps == 0;
}

/* q's change this round, as it goes on the wire: into d->wire (its
 * length in *len), and decoded (what every site will add) into mine. */
static int encode_delta(rt_diloco *d, rt_outer_param *q, float *mine, size_t *len, rt_context *ctx)
{
    float *e = d->decoded;
    for (int64_t i = 0; i < q->n; i++)
        e[i] = q->start[i] - q->param[i] + (q->residual ? q->residual[i] : 0.0f);
    if (!d->info.outer_bits) {
        memcpy(d->wire, e, (size_t)q->n * sizeof *e);
        memcpy(mine, e, (size_t)q->n * sizeof *e);
        *len = (size_t)q->n * sizeof *e;
        return 0;
    }
    char why[200];
    int64_t w = quant_encode(e, q->rows, q->cols, d->info.outer_bits, QUANT_NEAREST, 0, d->wire, d->wire_bytes);
    if (w < 0 || quant_decode(d->wire, (size_t)w, mine, q->n, why, sizeof why) != 0) {
        snprintf(ctx->msg, sizeof ctx->msg, "diloco: cannot encode the change of '%.60s'", d->table[q->index].name);
        return -1;
    }
    for (int64_t i = 0; i < q->n; i++) /* error feedback: what the rounding lost goes next round */
        q->residual[i] = e[i] - mine[i];
    *len = (size_t)w;
    return 0;
}

/* D = sum over sites, in site order, of w_k times site k's decoded delta
 * of round `round` (this site's: own), into d->sum. */
static int gather_mean(rt_diloco *d, rt_comm *c, rt_outer_param *q, int64_t round, const float *own, rt_context *ctx)
{
    const rt_diloco_param *e = &d->table[q->index];
    size_t len = wire_bytes(d, q);
    for (int64_t i = 0; i < q->n; i++)
        d->sum[i] = 0.0f;
    for (int32_t k = 0; k < d->info.n_sites; k++) {
        const float *x = own;
        if (k != d->info.site) {
            fu_msg_info want = { .kind = MSG_GRADIENT,
                                 .step = round,
                                 .micro_batch = OUTER_DELTA_TAG,
                                 .tensor = q->index,
                                 .codec = d->info.outer_bits ? FU_CODEC_QUANT : FU_CODEC_RAW_F32,
                                 .length = len };
            char why[400];
            double t0 = seconds_now();
            int rc = fu_hub_recv(c->hub, e->owner[k], &want, d->wire, d->wire_bytes, why, sizeof why);
            d->waited += seconds_now() - t0;
            if (rc == 0 && d->info.outer_bits)
                rc = quant_decode(d->wire, len, d->decoded, q->n, why, sizeof why);
            else if (rc == 0)
                memcpy(d->decoded, d->wire, len);
            if (rc != 0) {
                snprintf(ctx->msg, sizeof ctx->msg, "diloco: the change of '%.60s' from site %d: %.300s", e->name, k,
                         why);
                return -1;
            }
            x = d->decoded;
        }
        float w = (float)d->info.site_weight[k];
        for (int64_t i = 0; i < q->n; i++)
            d->sum[i] += w * x[i];
    }
    return 0;
}

/* The outer Nesterov step with D = d->sum: torch.optim.SGD(nesterov=True)'s
 * arithmetic, v = mu v + D; anchor -= lr (D + mu v). */
static void outer_step(const rt_diloco *d, rt_outer_param *q)
{
    float lr = (float)d->info.outer_lr, mu = (float)d->info.outer_momentum;
    for (int64_t i = 0; i < q->n; i++) {
        float D = d->sum[i];
        if (mu != 0.0f) {
            float v = mu * q->momentum[i] + D;
            q->momentum[i] = v;
            D = D + mu * v;
        }
        q->anchor[i] -= lr * D;
    }
}

/* The holder's part of the round for one parameter. */
/* The holder's first half for one parameter: its change this round,
 * encoded, to every other site (decoded into q->mine).  Every parameter
 * goes before any is waited for: one latency a round, not one a
 * parameter. */
static int holder_send(rt_diloco *d, rt_comm *c, rt_outer_param *q, int64_t round, rt_context *ctx)
{
    const rt_diloco_param *e = &d->table[q->index];
    size_t len = 0;
    int rc = encode_delta(d, q, q->mine, &len, ctx);
    fu_msg_info out = { .kind = MSG_GRADIENT,
                        .step = round,
                        .micro_batch = OUTER_DELTA_TAG,
                        .tensor = q->index,
                        .codec = d->info.outer_bits ? FU_CODEC_QUANT : FU_CODEC_RAW_F32,
                        .length = len };
    char why[400];
    for (int32_t k = 0; k < d->info.n_sites && rc == 0; k++) {
        if (k == d->info.site)
            continue;
        if (fu_hub_send(c->hub, e->owner[k], &out, d->wire, why, sizeof why) != 0) {
            snprintf(ctx->msg, sizeof ctx->msg, "diloco: sending the change of '%.60s' to site %d: %.300s", e->name, k,
                     why);
            rc = -1;
        }
        d->sent += len;
    }
    return rc;
}

/* The second half: the other sites' changes gathered and applied. */
static int holder_apply(rt_diloco *d, rt_comm *c, rt_outer_param *q, int64_t round, int final, rt_context *ctx)
{
    int rc = 0;
    /* The previous round's change, in flight since then. */
    if (rc == 0 && d->pending_round > 0) {
        rc = gather_mean(d, c, q, d->pending_round, q->pending, ctx);
        if (rc == 0)
            outer_step(d, q);
    }
    if (rc == 0 && (!d->info.outer_delay || final)) { /* this round's, now */
        rc = gather_mean(d, c, q, round, q->mine, ctx);
        if (rc == 0) {
            outer_step(d, q);
            memcpy(q->param, q->anchor, (size_t)q->n * sizeof *q->param);
        }
    } else if (rc == 0) { /* applied next round; keep this round's own progress meanwhile */
        float *t = q->pending;
        q->pending = q->mine;
        q->mine = t;
        for (int64_t i = 0; i < q->n; i++)
            q->param[i] = q->anchor[i] - (q->start[i] - q->param[i]);
    }
    if (rc == 0)
        memcpy(q->start, q->param, (size_t)q->n * sizeof *q->param);
    return rc;
}

/* The new parameters down the stage's ring of replicas: 0 -> 1 -> ... */
static int copy_to_replicas(rt_diloco *d, rt_comm *c, rt_outer_param *q, int64_t round, rt_context *ctx)
{
    if (d->n_replicas < 2)
        return 0;
    const int32_t *at = c->placement + (size_t)d->stage * d->n_replicas;
    fu_msg_info m = { .kind = MSG_GRADIENT,
                      .step = round,
                      .micro_batch = OUTER_PARAM_TAG,
                      .tensor = q->index,
                      .codec = FU_CODEC_RAW_F32,
                      .length = (uint64_t)q->n * 4 };
    char why[400];
    if (d->replica > 0 && fu_hub_recv(c->hub, at[d->replica - 1], &m, q->param, m.length, why, sizeof why) != 0) {
        snprintf(ctx->msg, sizeof ctx->msg, "diloco: the new '%.60s' from replica %d: %.300s", d->table[q->index].name,
                 d->replica - 1, why);
        return -1;
    }
    if (d->replica + 1 < d->n_replicas && fu_hub_send(c->hub, at[d->replica + 1], &m, q->param, why, sizeof why) != 0) {
        snprintf(ctx->msg, sizeof ctx->msg, "diloco: the new '%.60s' to replica %d: %.300s", d->table[q->index].name,
                 d->replica + 1, why);
        return -1;
    }
    return 0;
}

int rt_diloco_round(rt_diloco *d, rt_comm *c, int64_t step, int final, rt_context *ctx, char *line, size_t n)
{
    if (!c || !c->hub) {
        snprintf(ctx->msg, sizeof ctx->msg, "diloco: no links to the other sites");
        return -1;
    }
    double waited = d->waited, t0 = seconds_now();
    uint64_t sent = d->sent;
    int64_t round = d->rounds + 1; /* the tag: the sites' step counts differ when their H do */
    for (int32_t i = 0; i < d->n && d->replica == 0; i++)
        if (holder_send(d, c, &d->params[i], round, ctx))
            return -1;
    for (int32_t i = 0; i < d->n; i++) {
        if (d->replica == 0 && holder_apply(d, c, &d->params[i], round, final, ctx))
            return -1;
        if (copy_to_replicas(d, c, &d->params[i], round, ctx))
            return -1;
    }
    d->pending_round = d->info.outer_delay && !final ? round : 0;
    d->rounds++;
    (void)step;
    snprintf(line, n,
             "outer step %lld (site %d of %d, %d parameter%s): %.0f KiB sent, %.1f ms waiting for the other "
             "sites, %.1f ms in all%s",
             (long long)d->rounds, d->info.site, d->info.n_sites, d->n, d->n == 1 ? "" : "s",
             (double)(d->sent - sent) / 1024.0, (d->waited - waited) * 1e3, (seconds_now() - t0) * 1e3,
             final                 ? "; the sites now hold the same parameters"
             : d->info.outer_delay ? "; applied with the next round's"
                                   : "");
    return 0;
}

void rt_diloco_swap_agreed(rt_diloco *d)
{
    for (int32_t i = 0; i < d->n && d->replica == 0; i++) {
        rt_outer_param *q = &d->params[i];
        for (int64_t j = 0; j < q->n; j++) {
            float t = q->param[j];
            q->param[j] = q->anchor[j];
            q->anchor[j] = t;
        }
    }
}
