/* allreduce_plan.h: how a stage's gradients are averaged over its R
 * replicas, and what that costs; one place for the three that ask (the
 * fence pass's cost model, the comm pass that writes the choice into the
 * IR as the allreduce ops' `groups`, and the simulator).
 *
 * Two ways, every replica ending with the same bits either way:
 *   ring          one ring over the R replicas (reduce-scatter, then
 *                 all-gather): 2 (R-1)/R bytes over the ring's slowest link,
 *                 2 of its latencies;
 *   hierarchical  the replicas fall into groups, each a run of replicas in
 *                 one region (the fence pass places a stage's replicas in
 *                 chain order, regions together): a ring all-reduce inside
 *                 each group over its fast links, a ring all-reduce among
 *                 the groups' first replicas (the leaders) over the slow
 *                 ones, then each leader sends the result to its group:
 *                   max_g ring(g) + ring(leaders) + max_g (bytes/bw + lat)
 *                 (a leader's sends to its members go on separate links at
 *                 once, as the cluster file's links are per pair).
 * The hierarchy is used when it is cheaper: a slow link between regions is
 * then crossed by 2 (G-1)/G of the bytes among G leaders instead of
 * 2 (R-1)/R by every replica's ring step, the ring going at its slowest
 * link.
 *
 * groups: bit r (1 <= r < 63) set = replica r starts a new group; 0 = the
 * ring.  Up to 63 replicas can be grouped; more always ring.
 */
#ifndef FUSION_ALLREDUCE_PLAN_H
#define FUSION_ALLREDUCE_PLAN_H

#include <math.h>
#include <stdint.h>

#include "../frontend/cluster.h"
#include "../runtime/comm/allreduce_wire.h" /* groups, leaders, row width: the wire's conventions */

/* The link between devices a and b: bandwidth (bytes/s) and latency (s). */
typedef void (*allreduce_link_fn)(const void *ctx, int32_t a, int32_t b, double *bw, double *lat);

/* The seconds to average `bytes` over the R replicas on devices dev[0, R)
 * (replica order), the cheaper way; *groups (when not NULL) gets its mask
 * (0: the ring).  regions: the cluster whose hosts' regions group the
 * devices (NULL: one group, the ring). */
double allreduce_plan(const cluster *regions, const int32_t *dev, int32_t R, double bytes, allreduce_link_fn link,
                      const void *ctx, int64_t *groups);

/* The seconds of the way `groups` names (0: the ring). */
double allreduce_seconds_for(const int32_t *dev, int32_t R, double bytes, int64_t groups, allreduce_link_fn link,
                             const void *ctx);

/* The device pairs a hierarchical all-reduce over dev[0, R) talks on
 * (each group's ring, the leaders' ring, each leader to its members),
 * marked used[min * N + max] = 1 (codegen/bundle.c's link list). */
void allreduce_mark_links(int64_t groups, const int32_t *dev, int32_t R, char *used, int32_t N);

/* The direct exchange (bits ALLREDUCE_DIRECT_BITS, 32): the quantised
 * exchange below with its chunks and means sent as they are, f32: exact,
 * no codec, no feedback.  Each round pays the slowest pair's latency once,
 * where the ring pays 2 of its slowest link's: the way for small
 * gradients over far replicas (rank-16 LoRA of an 8B Llama over
 * dtfm-worldwide, 13.6 MB a stage over 16 replicas in 8 cities: the ring
 * 2.49 s, 2.02 of it latency).  Priced as if a replica's R-1 sends of a
 * round went one after the other (they share its network interface,
 * whatever the cluster file says of each pair), plus the slowest pair's
 * latency, twice, and once more for round 1's acks:
 *   round = max_a (max_b lat(a, b) + sum_b chunk / bw(a, b)),
 *   total = 2 round + max lat,   chunk = bytes / R.
 * Chosen, with or without --compress, for replicas in several regions
 * when ALLREDUCE_DIRECT_GAIN times faster than the ring or the hierarchy
 * (a margin, so that near ties keep the bandwidth-optimal ring); R >= 3
 * (for two replicas the ring is it). */
#define ALLREDUCE_DIRECT_GAIN 0.9
double allreduce_direct_seconds(const int32_t *dev, int32_t R, double bytes, allreduce_link_fn link, const void *ctx);

/* The quantised exchange (bits 8 or 4; the comm pass's `bits` on a
 * stage's allreduce ops; runtime/comm/quant_allreduce.h does it): for a
 * stage whose replicas sit in different regions under --compress.  Each
 * replica owns a 1/R chunk of the gradients; every replica sends each
 * other replica that one's chunk as rows of ALLREDUCE_QUANT_COLS values
 * quantised to `bits` (quant.h, rounded to nearest), the owner sums the R
 * chunks in fp32 and sends the mean back quantised the same way, and every
 * replica (the owner too) takes the decoded mean, so all end with the same
 * bits.  What each quantisation drops is kept (error feedback) and added
 * to the next step's gradient or mean before it is quantised, so nothing
 * is lost over the steps, only late (Seide et al. 2014; 1-bit Adam, Tang
 * et al. 2021, feeds back both ends the same way).  Two rounds, each
 * sending R-1 chunks at once on R-1 links (the cluster file's links are
 * per pair) where the ring takes 2 steps each paying the slowest
 * link's latency (GPT-3 XL on dtfm-worldwide: 14 x 143 ms).  The codec
 * runs on the host, one core, while the links carry what it has encoded
 * (the hub's sends are queued and go on their own threads), so a round
 * takes the longer of its transfer and its codec work, plus the last
 * chunk's codec, which nothing overlaps:
 *   round = max(lat + wire(bytes / R) / bw over the slowest pair, c) + c / (R - 1)
 *   c     = (2R - 1) / R * bytes / rate / 2   (a round's half of the codec's work)
 *   total = max(round, wire / bw + 2 lat) + round
 * (the second round's sends wait for the first's acks: the hub keeps one
 * message in flight a link).
 * rate: the codec's measured speed, fp32 bytes encoded and decoded a
 * second on one core (build/bench/bench_topk, rows of 512 to nearest, on
 * the 2-core AMD EPYC of session 12: 1.58 GB/s at 8 bits, 1.00 at 4). */
#define ALLREDUCE_QUANT_RATE_8BIT 1.5e9
#define ALLREDUCE_QUANT_RATE_4BIT 1.0e9
/* 4 bits only where they shorten the all-reduce by 10% or more against 8:
 * they round 18 times coarser (7 levels a side against 127), which the
 * feedback carries into later steps. */
#define ALLREDUCE_QUANT_4BIT_GAIN 0.9

/* Bytes on the wire for `floats` values as quantised rows. */
double allreduce_quant_wire_bytes(double floats, int bits);
/* The exchange's seconds for `bytes` of fp32 gradients over dev[0, R). */
double allreduce_quant_seconds(const int32_t *dev, int32_t R, double bytes, int bits, allreduce_link_fn link,
                               const void *ctx);
/* The seconds of the way (groups, bits) names: bits 0 = the ring or the
 * hierarchy, 32 the direct exchange, 8 or 4 the quantised one. */
double allreduce_way_seconds(const int32_t *dev, int32_t R, double bytes, int64_t groups, int bits,
                             allreduce_link_fn link, const void *ctx);
/* allreduce_plan's choice; the direct exchange where it is faster by the
 * rule above (*bits 32); and the quantised exchange where `quantise`
 * (--compress), the replicas span regions and it is faster still: *bits 8,
 * or 4 by the rule above.  *groups 0 with any bits. */
double allreduce_choose(const cluster *regions, const int32_t *dev, int32_t R, double bytes, int quantise,
                        allreduce_link_fn link, const void *ctx, int64_t *groups, int *bits);

/* Gradient buckets (the comm pass's `bucket` attribute; runtime/comm/overlap.h
 * reduces each while the rest of the backward runs): a stage's gradients, in
 * the order its backward makes them final, are cut into runs of at least
 * allreduce_bucket_cap(the stage's gradient bytes): a quarter of them, so
 * that three quarters can overlap the backward, within [64 KiB, 25 MiB]
 * (25 MiB is PyTorch DDP's bucket: larger buckets pay the ring's latencies
 * fewer times, smaller ones start sooner). */
#define ALLREDUCE_BUCKET_MIN_BYTES (64.0 * 1024)
#define ALLREDUCE_BUCKET_MAX_BYTES (25.0 * 1024 * 1024)

static inline double allreduce_bucket_cap(double stage_bytes)
{
    double cap = stage_bytes / 4;
    return cap < ALLREDUCE_BUCKET_MIN_BYTES   ? ALLREDUCE_BUCKET_MIN_BYTES
           : cap > ALLREDUCE_BUCKET_MAX_BYTES ? ALLREDUCE_BUCKET_MAX_BYTES
                                              : cap;
}

/* The part of a stage's all-reduce that n buckets leave after the step's
 * last backward (backward seconds).  ar: one all-reduce of all `bytes`;
 * latency: what each further all-reduce adds however small (its ring's
 * 2 latencies, or the hierarchy's), paid once a bucket.  The n
 * buckets start as their gradients are made, evenly over that backward as
 * far as a cost model knows, one after the other, and the last is made at
 * its end.  So total / n when the ring keeps up, else all but what fits
 * under the backward after the first bucket. */
static inline double allreduce_exposed_with(double n, double ar, double latency, double backward)
{
    double total = ar + (n - 1.0) * latency, hidden = total - backward * (1.0 - 1.0 / n);
    return hidden > total / n ? hidden : total / n;
}

/* How many buckets a stage's gradients go in: at most the cap's count
 * (allreduce_bucket_cap), and fewer when the buckets' latencies cost more
 * than their overlap hides.  GPT-3 XL on dtfm-worldwide: 8 replicas a
 * city, 5 ms apart, pay 70 ms a bucket against a last backward of 25 ms
 * (1 row of 128 micro-batches); twelve buckets left 0.77 s more after the
 * backward than one. */
static inline int32_t allreduce_bucket_count(double ar, double latency, double backward, double bytes)
{
    double most = bytes > 0 ? ceil(bytes / allreduce_bucket_cap(bytes)) : 1.0;
    int32_t best = 1;
    double least = allreduce_exposed_with(1.0, ar, latency, backward);
    for (int32_t n = 2; n <= (int32_t)most; n++) {
        double t = allreduce_exposed_with((double)n, ar, latency, backward);
        if (t < least)
            least = t, best = n;
    }
    return best;
}

/* The exposed part with the bucket count the comm pass will choose. */
static inline double allreduce_exposed_seconds(double ar, double latency, double backward, double bytes)
{
    return allreduce_exposed_with((double)allreduce_bucket_count(ar, latency, backward, bytes), ar, latency, backward);
}

/* --shard-optimizer's all-gather of a stage's `bytes` of parameters goes in
 * buckets of at most RT_GATHER_BUCKET_FLOATS (runtime/comm/comm.h), each
 * a ring of its own: how many. */
static inline double allgather_buckets(double bytes)
{
    double cap = 4.0 * RT_GATHER_BUCKET_FLOATS;
    return bytes > cap ? ceil(bytes / cap) : 1.0;
}

#endif
