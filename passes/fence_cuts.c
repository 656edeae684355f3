/* fence_cuts.c: where the forward ops are cut into stages of equal layers
 * (fence_cuts.h): Megatron's default cut, which the uniform, megatron,
 * gcma and random schedulers use, and the front-loaded variant OP-Fence's
 * search also tries.  A layer is a repeat block's instance, read from the
 * ops' names; nothing here prices a cut (fence_cost.c does).
 *
 * On its own, below fence.c, fence_search.c and gcma.c, which all cut this
 * way: kept in fence.c it made fence.c -> fence_search.c -> fence.c a
 * circle.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fence_cuts.h"

/* The repeat instance a node belongs to: the name up to the first
 * ".<digits>." ("h.3" of "h.3.attn.qkv"), as the frontend names repeat
 * blocks' instances; its length, or 0 when the name has none. */
static size_t layer_prefix(const char *name)
{
    for (const char *p = strchr(name, '.'); p; p = strchr(p + 1, '.')) {
        const char *q = p + 1;
        while (*q >= '0' && *q <= '9')
            q++;
        if (q > p + 1 && *q == '.')
            return (size_t)(q - name);
    }
    return 0;
}

/* layer[k]: the layer (repeat instance) of forward op k, counted from 0,
 * carried over ops outside any layer (-1 before the first); returns the
 * number of layers. */
static int32_t layer_of_ops(const fence_model *m, int32_t *layer)
{
    int32_t L = 0;
    const char *last = NULL;
    size_t last_len = 0;
    for (int32_t k = 0; k < m->n_fwd; k++) {
        const char *name = ir_node_name(m->g, m->fwd[k]);
        size_t len = layer_prefix(name);
        if (len > 0 && !(last && len == last_len && strncmp(name, last, len) == 0)) {
            last = name;
            last_len = len;
            L++;
        }
        layer[k] = L - 1;
    }
    return L;
}

/* Equal layers per stage (gcma.h): a layer is a repeat block's instance
 * (a transformer block, a residual block), and stage s gets layers
 * [s L / S, (s+1) L / S), the ops before the first layer going with it and
 * those after the last with the last stage: Megatron's default cut.  A
 * model with fewer layers than stages is cut by counts of parameterised
 * ops instead. */
int fence_uniform_cuts(const fence_model *m, int32_t S, int32_t *end)
{
    if (S < 1 || S > m->n_fwd)
        return -1;
    int32_t *layer = malloc(((size_t)m->n_fwd + 1) * sizeof *layer);
    if (!layer)
        return -1;
    int32_t L = layer_of_ops(m, layer);
    for (int32_t s = 0; s < S; s++)
        end[s] = -1;
    if (L >= S) {
        for (int32_t k = 0; k < m->n_fwd; k++) {
            int32_t s = layer[k] < 0 ? 0 : (int32_t)((int64_t)layer[k] * S / L);
            end[s] = k;
        }
    } else {
        int32_t layers = m->layer_ops[m->n_fwd];
        for (int32_t s = 0, k = 0; s < S; s++) {
            /* Stage s ends where the op count reaches (s+1)/S of all,
             * leaving at least one op for each stage after it. */
            int64_t want = (int64_t)layers * (s + 1) / S;
            while (k < m->n_fwd - 1 && m->layer_ops[k + 1] < want)
                k++;
            if (k > m->n_fwd - (S - s))
                k = m->n_fwd - (S - s);
            if (s > 0 && k <= end[s - 1])
                k = end[s - 1] + 1;
            end[s] = s == S - 1 ? m->n_fwd - 1 : k;
            k++;
        }
    }
    free(layer);
    return 0;
}

int32_t fence_layer_ends(const fence_model *m, int32_t *out)
{
    int32_t *layer = malloc(((size_t)m->n_fwd + 1) * sizeof *layer);
    if (!layer)
        return -1;
    layer_of_ops(m, layer);
    int32_t n = 0;
    for (int32_t k = 0; k + 1 < m->n_fwd; k++)
        if (layer[k] >= 0 && layer[k + 1] != layer[k])
            out[n++] = k;
    free(layer);
    return n;
}

int fence_front_cuts(const fence_model *m, int32_t S, int32_t front, int32_t *end)
{
    if (S < 2 || S > m->n_fwd || front < 0)
        return -1;
    int32_t *layer = malloc(((size_t)m->n_fwd + 1) * sizeof *layer);
    if (!layer)
        return -1;
    int32_t L = layer_of_ops(m, layer);
    int rc = L - front >= S - 1 ? 0 : -1;
    for (int32_t s = 0; s < S; s++)
        end[s] = -1;
    for (int32_t k = 0; rc == 0 && k < m->n_fwd; k++) {
        int32_t s = layer[k] < front ? 0 : 1 + (int32_t)((int64_t)(layer[k] - front) * (S - 1) / (L - front));
        end[s] = k;
    }
    for (int32_t s = 0; rc == 0 && s < S; s++)
        if (end[s] < 0 || (s > 0 && end[s] <= end[s - 1]))
            rc = -1; /* a stage without ops */
    free(layer);
    return rc;
}

int fence_front_cuts_balanced(const fence_model *m, int32_t S, int32_t front, const double *time, int32_t *end)
{
    int32_t *layer_end = malloc(((size_t)m->n_fwd + 1) * sizeof *layer_end);
    int32_t n = layer_end ? fence_layer_ends(m, layer_end) : -1;
    int rc = n < 0 || fence_front_cuts(m, S, front, end) != 0 ? -1 : 0;
    double from = rc == 0 ? time[end[0] + 1] : 0.0, total = time[m->n_fwd] - from;
    for (int32_t s = 1, i = 0; rc == 0 && s + 1 < S; s++) {
        /* the layer end nearest to s / (S - 1) of the rest's seconds, past the last stage's end */
        double want = from + total * s / (S - 1);
        int32_t best = -1;
        for (; i < n; i++) {
            int32_t k = layer_end[i];
            if (k <= end[s - 1])
                continue;
            if (k > m->n_fwd - 1 - (S - 1 - s))
                break;
            if (best < 0 || fabs(time[k + 1] - want) < fabs(time[best + 1] - want))
                best = k;
            else
                break; /* past the nearest: the prefix only grows */
        }
        if (best < 0)
            rc = -1;
        else
            end[s] = best;
    }
    free(layer_end);
    return rc;
}
