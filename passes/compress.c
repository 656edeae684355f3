/* compress.c: the `compress` pass, AdaTopK (FusionLLM) on the slow links.
 *
 * After the comm pass every cut edge is a send/recv pair.  This pass marks
 * the pairs whose transfer would hold the pipeline up, so that fewer bytes
 * cross.  Our reading of the paper (shared/docs/papers.md):
 *
 *   T*  = the largest stage's compute per micro-batch (forward + backward);
 *   a link whose transfer S / beta exceeds T* is compressed, at the density
 *   rho = min(1, beta T* / (S (1 + index_overhead)))   index_overhead = 1
 *   (a kept fp32 element costs 8 bytes with its index), and only when
 *   rho < 1/2: above that the dense tensor is smaller.
 *
 * --compress adatopk (ours, bettered where measurement said so):
 *   - a parameter's partial gradient (summed into grad.<param> on the other
 *     end; it crosses once a step, summed over the micro-batches: the comm
 *     pass's `accumulate`, the last thing its stage's backward sends) is
 *     due at its home stage's update, so its budget is the pipeline's
 *     drain between the two stages, hops T* (compress_budget); codec and
 *     transfer then run in series.  It travels as its top k at
 *     rho (`density`, runtime/comm/topk.h), with error feedback
 *     (`feedback=1`): the runtime sends the top k of x + residual and keeps
 *     the rest for the next step, so every entry arrives in time;
 *   - an activation, or an activation's gradient, travels as rows of 8 bits
 *     and a scale (`bits=8`, runtime/comm/quant.h), or of 4 bits when even
 *     8 bits would take longer than T*.  Top-k of these stalled training in
 *     our measurement (quant.h says by how much): they have no next step to
 *     carry a residual to.  Gradients are rounded stochastically (unbiased),
 *     activations to nearest.
 * --compress topk:RHO: every pair over such a link is top-k at RHO, the
 *   paper's plain reading (kept to compare with).
 * --compress none: no pair is compressed.
 * Without --compress: adatopk on a cluster of several regions, none on one.
 *
 * Only fp32 tensors of the forward and backward phases are compressed; the
 * optimizer's scalars and a parameter sent once a step are not.  The
 * density is the send/recv pair's `density` attribute: the sender's starting
 * density.  The message carries its k, so the runtime may change the density
 * between steps (fusion --adapt-density: toward the time the compiled
 * density takes on the compiled link, or the sending stage's measured
 * compute per micro-batch when longer: runtime/comm/comm.h) without telling
 * the receiver.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "passes.h"

/* The density, the bits and the encoded sizes: compress_rule.c (shared
 * with the fence pass's cost model, so the plan is priced as sent). */

double compress_wire_bytes(const ir_graph *g, const ir_node *send)
{
    int32_t v = send->in[0];
    const ir_shape *sh = &g->values[v].shape;
    double density = ir_node_float(send, ATTR_DENSITY, 0.0);
    int bits = (int)ir_node_int(send, ATTR_BITS, 0);
    if (bits == ATTR_BITS_HALF) /* an f32 parameter in the graph's 16 bits (passes.h) */
        return 2.0 * (double)ir_shape_numel(sh);
    if (bits <= 0 && (density <= 0.0 || density >= 1.0))
        return (double)ir_value_bytes(g, v);
    return compress_encoded_bytes((double)ir_shape_numel(sh), sh->rank > 0 ? (double)sh->dim[sh->rank - 1] : 1.0,
                                  density, bits); /* compress_rule.c: topk.h's or quant.h's encoding */
}

int pass_compress(ir_graph *g, const pass_options *opt, struct diag *err)
{
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    double fixed;
    if (compress_parse(opt->compress, opt->cluster, &fixed))
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
        if (send->op != OP_SEND || send->phase == PHASE_UPDATE || ir_node_int(send, ATTR_ONCE, 0))
            continue;
        ir_dtype dt = g->values[send->in[0]].dtype;
        if (dt != DT_F32 && dt != DT_BF16 && dt != DT_F16)
            continue;
        int32_t to = (int32_t)ir_node_int(send, ATTR_PEER, -1), tensor = (int32_t)ir_node_int(send, ATTR_TENSOR, -1);
        double bw = INFINITY, lat = 0.0;
        for (int32_t r = 0; r < p->n_replicas && to >= 0 && to < p->n_stages; r++) {
            double b, l;
            cluster_link_between(c, p->device[send->stage * p->n_replicas + r], p->device[to * p->n_replicas + r], &b,
                                 &l);
            bw = fmin(bw, b);
            lat = fmax(lat, l);
        }
        /* A parameter's partial gradient crosses once a step (`accumulate`,
         * the comm pass), from its reader's stage back to its home: its
         * budget is the pipeline's drain between them (compress_budget). */
        int param_grad = ir_node_int(send, ATTR_ACCUMULATE, 0) != 0;
        int hops = param_grad ? (send->stage > to ? send->stage - to : 1) : 0;
        double budget = compress_budget(t_star, p->micro_batches, hops);
        /* The graph is one replica's micro-batch already (fusionc builds it
         * at B / (M R) when the plan replicates): its bytes are a lane's. */
        double bytes = (double)ir_value_bytes(g, send->in[0]);
        if (!(bytes / bw > budget))
            continue; /* fast enough: the link is not what the pipeline waits for */
        int bits = 0;
        double rho = 0.0;
        if (fixed < 0 && !param_grad) { /* adatopk: rows of 8 bits, or 4 when 8 are still too slow */
            bits = compress_bits((double)ir_shape_numel(&g->values[send->in[0]].shape), bw, t_star);
        } else {
            rho = compress_density((double)ir_shape_numel(&g->values[send->in[0]].shape), bytes, bw, budget,
                                   fixed); /* compress_rule.c, shared with fence_cost.c */
            if (rho <= 0.0)
                continue; /* the dense tensor is as small */
        }
        const ir_shape *sh = &g->values[send->in[0]].shape;
        double elements = (double)ir_shape_numel(sh);
        if (!compress_pays(
                bytes, compress_encoded_bytes(elements, sh->rank > 0 ? (double)sh->dim[sh->rank - 1] : 1.0, rho, bits),
                bw, budget, compress_codec_seconds(elements), param_grad))
            continue; /* the codec would cost the stage more than the link saves */
        if ((bits ? ir_node_set_int(g, i, ATTR_BITS, bits) : ir_node_set_float(g, i, ATTR_DENSITY, rho)) ||
            (!bits && param_grad && ir_node_set_int(g, i, ATTR_FEEDBACK, 1)))
            return diag_set(err, file, 0, "out of memory");
        for (int32_t j = 0; j < g->n_nodes; j++)
            if (g->nodes[j].op == OP_RECV && ir_node_int(&g->nodes[j], ATTR_TENSOR, -2) == tensor &&
                (bits ? ir_node_set_int(g, j, ATTR_BITS, bits) : ir_node_set_float(g, j, ATTR_DENSITY, rho)))
                return diag_set(err, file, 0, "out of memory");
    }
    return 0;
}
