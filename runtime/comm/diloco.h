/* diloco.h: the outer step of --sync diloco (DiLoCo, Douillard et al. 2023).
 *
 * Each site (a region of the cluster) trains on its own rows with its own
 * plan, exact inside the site.  Every round (H_k steps at site k: a slower
 * site may take fewer, so that the sites' rounds take the same time; and
 * after the last step) the sites agree on the parameters:
 *
 *   delta_k   = start - theta_k          site k's change this round
 *   D         = sum_k w_k delta_k        w_k: site k's share of the round's rows
 *   v         = mu v + D                 outer Nesterov momentum (mu 0.9)
 *   anchor   -= lr (D + mu v)            outer lr 0.7 (the paper's)
 *   theta     = anchor;  start = anchor
 *
 * The anchor (the parameters every site agrees on), v and start are kept
 * by the device that holds each parameter in its site (replica 0 of its
 * stage); it sends its delta to the other sites' holders of the same
 * parameter and, after the step, copies the new parameters down its
 * stage's ring of replicas (exact inside the site, they were equal).
 *
 * On the wire (outer_bits 8 or 4): each delta travels as comm/quant.h's
 * rows with error feedback (what the rounding lost is added to the next
 * round's delta), and every site sums the DECODED deltas of all sites,
 * its own included, in site order: every site computes the same D, bit
 * for bit, so the anchors never drift apart.
 *
 * One round of delay (outer_delay 1, the default): a round's delta is sent
 * at its end and applied at the end of the NEXT round, so its transfer
 * overlaps H inner steps.  Meanwhile each site keeps its own unsent
 * progress: theta = anchor - (start - theta) after applying the previous
 * round's D, i.e. the agreed parameters plus this round's local change.
 * After the last step everything in flight is applied and every site ends
 * with the same parameters (theta = anchor).
 *
 * With H = 1, no delay, f32 on the wire, outer lr 1 and momentum 0, D is
 * the batch-weighted mean of the sites' one-step changes, which for plain
 * SGD is lr times the global mean gradient: exact data parallelism
 * (tests/test_diloco.sh checks it).
 */
#ifndef FUSION_RT_DILOCO_H
#define FUSION_RT_DILOCO_H

#include <stddef.h>
#include <stdint.h>

#include "../program.h"
#include "comm.h"

typedef struct {
    int32_t index;         /* in the table: the message's tensor id   */
    float *param;          /* (n) in the arena                        */
    int64_t n, rows, cols; /* n = rows * cols (cols: the last dim)     */
    /* The holder's (replica 0's) state; NULL on the other replicas. */
    float *anchor, *start, *momentum; /* (n) each                                */
    float *residual;                  /* (n) error feedback; NULL with f32 on the wire */
    float *pending;                   /* (n) its own decoded delta awaiting the next round (delay) */
    float *mine;                      /* (n) its own decoded delta this round                      */
} rt_outer_param;

typedef struct {
    rt_diloco_info info;
    const rt_diloco_param *table; /* [info.n_params] this site's            */
    int32_t stage, replica, n_replicas;
    int32_t self;           /* this device's index                    */
    rt_outer_param *params; /* the ones this device holds             */
    int32_t n;
    unsigned char *wire; /* one encoded delta                      */
    size_t wire_bytes;
    float *decoded, *sum;  /* (largest n) each                       */
    int64_t pending_round; /* the round whose deltas are in flight; 0 none */
    int64_t rounds;
    double waited; /* seconds blocked receiving, all rounds  */
    uint64_t sent; /* payload bytes sent to other sites      */
} rt_diloco;

/* Set up from the manifest and the site's table, after the parameters
 * were initialised (or loaded): the anchor and start are their values.
 * 0, or -1 with err. */
int rt_diloco_init(rt_diloco *d, const rt_manifest *m, const rt_diloco_param *table, const rt_tensor_info *tensors,
                   int32_t n_tensors, char *arena, char *err, size_t n);
void rt_diloco_free(rt_diloco *d);

/* The steps site `info->site` takes for a run of `steps`: `steps` counts
 * the steps of the site with the largest H; the others take as many
 * rounds, each of their own H (the last round cut in proportion). */
int64_t rt_diloco_site_steps(const rt_diloco_info *info, int64_t steps);
/* After step `step`'s update: 1 when an outer step is due (step % H == 0,
 * or the last step). */
int rt_diloco_due(const rt_diloco *d, int64_t step, int64_t last_step);
/* The outer step (see above; its messages are tagged by round, which the
 * sites count alike); final: the last one, which applies everything in
 * flight.  Errors in ctx->msg; a one-line summary in line. */
int rt_diloco_round(rt_diloco *d, rt_comm *c, int64_t step, int final, rt_context *ctx, char *line, size_t n);
/* Exchange each parameter this device holds (replica 0) with the anchor,
 * the value the sites agree on after the last outer step applied; a
 * second call undoes it.  Validation measures the agreed model this way
 * (with outer_delay 1 it lags the sites' own progress by a round or two;
 * after the last step the two are equal). */
void rt_diloco_swap_agreed(rt_diloco *d);

#endif
