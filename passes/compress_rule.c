/* compress_rule.c: the arithmetic of compression, in one place for the two
 * passes that need it (passes.h):
 *
 *   - the compress pass (compress.c) decides, per send over a slow link,
 *     the top-k density or the row quantisation bits;
 *   - the fence pass's cost model (fence_cost.c) asks the same question
 *     before the graph is placed, for every candidate plan, so that a plan
 *     crossing a slow link is charged what the compress pass will then
 *     send over it, and the codec's time on both ends.
 *
 * Units are the cluster's: bytes, bytes/s, seconds.  Nothing here looks at
 * the graph; the callers say how many elements a tensor has and over which
 * link it goes.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

#define KEPT_BYTES  8.0  /* a kept element: its value as fp32 and its index   */
#define DENSITY_MIN 1e-3 /* keep at least 0.1%: below it training stalls      */
#define ROW_BYTES_8 1.0  /* bytes an element costs at bits=8 (the row scales aside) */

/* Not given: adatopk on a cluster of several regions (sites joined by
 * links that may be slow), none on one. */
int compress_parse(const char *spec, const cluster *c, double *fixed)
{
    char *end = NULL;
    if (!spec)
        spec = c && c->n_regions > 1 ? "adatopk" : "none";
    if (strcmp(spec, "adatopk") == 0) {
        *fixed = -1.0;
        return 0;
    }
    if (strcmp(spec, "none") == 0) {
        *fixed = 0.0;
        return 0;
    }
    if (strncmp(spec, "topk:", 5) == 0) {
        *fixed = strtod(spec + 5, &end);
        return end && *end == '\0' && *fixed > 0 && *fixed <= 1 ? 0 : -1;
    }
    return -1;
}

/* AdaTopK's density (papers.md): rho = min(1, beta T / (8 n)) for n
 * elements (8 bytes a kept one) when the dense transfer S / beta exceeds
 * the time budget T; a fixed topk:RHO takes RHO instead.  When the
 * encoding is no smaller than the dense tensor (rho >= S / 8n: 1/2 for
 * fp32, 1/4 for 16-bit tensors), 0: send it dense. */
double compress_density(double elements, double bytes, double bw, double budget, double fixed)
{
    if (fixed == 0.0 || !(bytes / bw > budget) || !(elements > 0))
        return 0.0; /* fast enough: the link is not what the pipeline waits for */
    double rho = fixed > 0 ? fixed : fmin(1.0, bw * budget / (elements * KEPT_BYTES));
    return rho >= bytes / (elements * KEPT_BYTES) ? 0.0 : fmax(rho, DENSITY_MIN);
}

/* Rows of 8 bits, or of 4 when 8 would still take longer than T*. */
int compress_bits(double elements, double bw, double t_star) { return ROW_BYTES_8 * elements / bw > t_star ? 4 : 8; }

/* runtime/comm/quant.h: a header, an fp32 scale a row, `bits` an element;
 * runtime/comm/topk.h: a header, then index/value pairs or a bitmap and the
 * values, whichever is smaller. */
double compress_encoded_bytes(double elements, double cols, double density, int bits)
{
    if (bits > 0)
        return 32.0 + 4.0 * ceil(elements / fmax(1.0, cols)) + ceil(elements * (double)bits / 8.0);
    if (density <= 0.0 || density >= 1.0)
        return 4.0 * elements;
    double k = fmax(1.0, floor(density * elements + 0.5));
    return 24.0 + fmin(8.0 * k, ceil(elements / 8.0) + 4.0 * k);
}

double compress_codec_seconds(double elements) { return 4.0 * elements / COMPRESS_CODEC_BYTES_PER_SECOND; }

/* A tensor's time budget: T* for what crosses each micro-batch.  A
 * parameter's partial gradient (summed over the step, sent after the
 * reader stage's last backward) is due at its home stage's update; only
 * the pipeline's drain hides it, one stage's work per stage between them:
 * grad_hops T* (at most the step's M T*).  grad_hops = 0: not such a
 * gradient. */
double compress_budget(double t_star, int micro_batches, int grad_hops)
{
    if (grad_hops <= 0)
        return t_star;
    int M = micro_batches > 0 ? micro_batches : 1;
    return t_star * (grad_hops < M ? grad_hops : M);
}

/* Does compressing pay?  Per micro-batch the pipeline goes at the slower
 * of its stage (T* or the budget, plus the codec's time there) and the
 * link; compress only when that is faster than the stage and the dense
 * transfer.  (A link a little slower than the stages may not be worth the
 * codec: the codec's time lands on the stage, the bottleneck then.)  A
 * gradient sent once a step (once) is encoded, sent and decoded in
 * series after the backward: what shows is what outlasts the budget. */
int compress_pays(double bytes, double wire, double bw, double budget, double codec_seconds, int once)
{
    if (once)
        return fmax(0.0, 2.0 * codec_seconds + wire / bw - budget) < fmax(0.0, bytes / bw - budget);
    return fmax(budget + codec_seconds, wire / bw) < fmax(budget, bytes / bw);
}

/* The compress pass's whole decision for one fp32 tensor, as bytes on the
 * wire (compress.c applies the same steps to a send node). */
double compress_tensor_bytes(double elements, double elem_bytes, double cols, double bw, double t_star,
                             int micro_batches, double fixed, int grad_hops, double *codec_seconds)
{
    double bytes = elem_bytes * elements, wire = bytes;
    int param_grad = grad_hops > 0;
    double budget = compress_budget(t_star, micro_batches, grad_hops);
    *codec_seconds = 0.0;
    if (fixed == 0.0 || !(bytes / bw > budget))
        return bytes;
    if (fixed < 0 && !param_grad) {
        wire = compress_encoded_bytes(elements, cols, 0.0, compress_bits(elements, bw, t_star));
    } else {
        double rho = compress_density(elements, bytes, bw, budget, fixed);
        if (rho <= 0.0)
            return bytes;
        wire = compress_encoded_bytes(elements, cols, rho, 0);
    }
    if (!compress_pays(bytes, wire, bw, budget, compress_codec_seconds(elements), param_grad))
        return bytes;
    *codec_seconds = compress_codec_seconds(elements);
    return wire;
}
