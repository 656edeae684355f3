/* compress.c: the `compress` pass, AdaTopK (FusionLLM) on the slow links.
 *
 * After the comm pass every cut edge is a send/recv pair.  This pass gives
 * the pairs whose transfer would hold the pipeline up a top-k density:
 * the sender then ships only the k elements of largest magnitude (index
 * and value, or a bitmap and the values: runtime/comm/topk.h) and the
 * receiver rebuilds the tensor with zeros elsewhere.  Our reading of the
 * paper (shared/docs/papers.md):
 *
 *   T*  = the largest stage's compute per micro-batch (forward + backward)
 *   a link whose transfer S / beta exceeds T* gets
 *   rho = min(1, beta T* / (S (1 + index_overhead)))   index_overhead = 1
 *   (a kept fp32 element costs 8 bytes with its index), and only when
 *   rho < 1/2: above that the dense tensor is smaller.
 *
 * --compress none (the default for now: no pair compressed), topk:RHO
 * (every pair over such a link at density RHO), adatopk (the density
 * above).  Only fp32 tensors of the forward and backward phases are
 * compressed: activations, activation gradients, and a parameter's partial
 * gradient (summed into grad.<param> on the other end), whose send also
 * gets `feedback=1`: the runtime sends the top k of x + residual and keeps
 * what it did not send in the residual for the next micro-batch and step
 * (error feedback: without it the small entries of a parameter gradient
 * would never arrive).  The optimizer's scalars and a parameter sent once a
 * step are not compressed.  The density is the send/recv pair's `density`
 * attribute: the sender's starting density.  The message carries its k, so
 * the runtime may change the density between steps (fusion
 * --adapt-density: toward the time the compiled density takes on the
 * compiled link, i.e. T* under adatopk, or the sending stage's measured
 * compute per micro-batch when longer: runtime/comm/comm.h) without
 * telling the receiver.
 *
 * Not yet: the cost model's account of compression; adatopk as the
 * default for multi-site clusters.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "passes.h"

#define INDEX_OVERHEAD 1.0   /* a kept element: 4 bytes of value, 4 of index */
#define DENSITY_MIN    1e-3  /* keep at least 0.1%: below it training stalls */

/* The parsed --compress option: density < 0 for adatopk, 0 for none. */
static int parse_compress(const char *spec, double *density)
{
    if (spec && strcmp(spec, "adatopk") == 0) {
        *density = -1.0;
        return 0;
    }
    if (!spec || strcmp(spec, "none") == 0) {
        *density = 0.0;
        return 0;
    }
    char *end = NULL;
    if (strncmp(spec, "topk:", 5) == 0) {
        *density = strtod(spec + 5, &end);
        return end && *end == '\0' && *density > 0 && *density <= 1 ? 0 : -1;
    }
    return -1;
}

/* Is v a contribution to a parameter's gradient: a gradient summed (add)
 * into grad.<param>?  (Through its received copy, if any.) */
static int feeds_param_gradient(const ir_graph *g, int32_t v)
{
    if (g->values[v].role != ROLE_GRADIENT)
        return 0;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        int reads = 0;
        if (n->op != OP_ADD)
            continue;
        for (int k = 0; k < n->n_in; k++) {
            int32_t u = n->in[k], p = g->values[u].producer;
            reads |= u == v || (p >= 0 && g->nodes[p].op == OP_RECV && g->nodes[p].n_out == 1 &&
                                strncmp(ir_value_name(g, u), ir_value_name(g, v), strlen(ir_value_name(g, v))) == 0 &&
                                ir_value_name(g, u)[strlen(ir_value_name(g, v))] == ':');
        }
        for (int o = 0; reads && o < n->n_out; o++) {
            const char *name = ir_value_name(g, n->out[o]);
            int32_t param = strncmp(name, "grad.", 5) == 0 ? ir_find_value(g, name + 5) : -1;
            if (param >= 0 && g->values[param].role == ROLE_PARAM)
                return 1;
        }
    }
    return 0;
}

int pass_compress(ir_graph *g, const pass_options *opt, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    double fixed;
    if (parse_compress(opt->compress, &fixed))
        return diag_set(err, file, 0, "--compress expects none, topk:RHO (0 < RHO <= 1) or adatopk, found '%s'",
                        opt->compress);
    const cluster *c = opt->cluster;
    const ir_placement *p = &g->placement;
    if (fixed == 0.0 || !c || c->n_devices < 2 || p->n_stages < 2)
        return 0;
    /* T*: the largest stage's forward + backward per micro-batch. */
    double *stage_time = calloc((size_t)p->n_stages, sizeof *stage_time);
    if (!stage_time)
        return diag_set(err, file, 0, "out of memory");
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        if (n->phase == PHASE_UPDATE || n->stage < 0 || n->device < 0 || n->device >= c->n_devices)
            continue;
        stage_time[n->stage] += estimate_node_seconds(g, i, &c->devices[n->device]);
    }
    double t_star = 0.0;
    for (int32_t s = 0; s < p->n_stages; s++)
        t_star = fmax(t_star, stage_time[s]);
    free(stage_time);
    /* Each pair: its link is the slowest of the replica lanes'. */
    for (int32_t i = 0; i < g->n_nodes; i++) {
        ir_node *send = &g->nodes[i];
        if (send->op != OP_SEND || send->phase == PHASE_UPDATE || ir_node_int(send, ATTR_ONCE, 0) ||
            g->values[send->in[0]].dtype != DT_F32)
            continue;
        int32_t to = (int32_t)ir_node_int(send, ATTR_PEER, -1), tensor = (int32_t)ir_node_int(send, ATTR_TENSOR, -1);
        double bw = INFINITY, lat = 0.0;
        for (int32_t r = 0; r < p->n_replicas && to >= 0 && to < p->n_stages; r++) {
            double b, l;
            cluster_link_between(c, p->device[send->stage * p->n_replicas + r], p->device[to * p->n_replicas + r], &b, &l);
            bw = fmin(bw, b);
            lat = fmax(lat, l);
        }
        double bytes = (double)ir_value_bytes(g, send->in[0]) / p->n_replicas;
        if (!(bytes / bw > t_star))
            continue;   /* fast enough: the link is not what the pipeline waits for */
        double rho = fixed > 0 ? fixed : fmin(1.0, bw * t_star / (bytes * (1.0 + INDEX_OVERHEAD)));
        if (rho >= 0.5)
            continue;   /* the dense tensor is as small */
        rho = fmax(rho, DENSITY_MIN);
        if (ir_node_set_float(g, i, ATTR_DENSITY, rho) ||
            (feeds_param_gradient(g, send->in[0]) && ir_node_set_int(g, i, ATTR_FEEDBACK, 1)))
            return diag_set(err, file, 0, "out of memory");
        for (int32_t j = 0; j < g->n_nodes; j++)
            if (g->nodes[j].op == OP_RECV && ir_node_int(&g->nodes[j], ATTR_TENSOR, -2) == tensor &&
                ir_node_set_float(g, j, ATTR_DENSITY, rho))
                return diag_set(err, file, 0, "out of memory");
    }
    return 0;
}
