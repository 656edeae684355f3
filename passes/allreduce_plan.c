/* allreduce_plan.c: the ring or the hierarchy, priced (allreduce_plan.h). */
#include "allreduce_plan.h"

#include <math.h>

#include "passes.h"

/* A ring all-reduce over dev[i] for i in members[0, n): its slowest link
 * and largest latency, around the ring. */
static double ring_seconds(const int32_t *dev, const int32_t *members, int32_t n, double bytes, allreduce_link_fn link,
                           const void *ctx)
{
    if (n < 2)
        return 0.0;
    double bw = INFINITY, lat = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double b, l;
        link(ctx, dev[members[i]], dev[members[(i + 1) % n]], &b, &l);
        bw = fmin(bw, b);
        lat = fmax(lat, l);
    }
    return estimate_transfer_seconds(2.0 * (n - 1) / n * bytes, bw, 2.0 * (n - 1) * lat);
}

double allreduce_seconds_for(const int32_t *dev, int32_t R, double bytes, int64_t groups, allreduce_link_fn link,
                             const void *ctx)
{
    int32_t members[ALLREDUCE_MAX_GROUPED + 1], leaders[ALLREDUCE_MAX_GROUPED + 1], G = 0;
    if (R < 2)
        return 0.0;
    if (groups == 0 || R > ALLREDUCE_MAX_GROUPED) {
        int32_t all[ALLREDUCE_MAX_GROUPED + 1];
        if (R > ALLREDUCE_MAX_GROUPED) { /* ring over all: its slowest link, without the member list */
            double bw = INFINITY, lat = 0.0;
            for (int32_t r = 0; r < R; r++) {
                double b, l;
                link(ctx, dev[r], dev[(r + 1) % R], &b, &l);
                bw = fmin(bw, b);
                lat = fmax(lat, l);
            }
            return estimate_transfer_seconds(2.0 * (R - 1) / R * bytes, bw, 2.0 * (R - 1) * lat);
        }
        for (int32_t r = 0; r < R; r++)
            all[r] = r;
        return ring_seconds(dev, all, R, bytes, link, ctx);
    }
    double inside = 0.0, back = 0.0;
    for (int32_t lo = 0; lo < R;) {
        int32_t hi = lo + 1, n = 0;
        while (hi < R && !(groups >> hi & 1))
            hi++;
        leaders[G++] = lo;
        for (int32_t r = lo; r < hi; r++)
            members[n++] = r;
        inside = fmax(inside, ring_seconds(dev, members, n, bytes, link, ctx));
        for (int32_t r = lo + 1; r < hi; r++) { /* the leader's result to each member, at once */
            double b, l;
            link(ctx, dev[lo], dev[r], &b, &l);
            back = fmax(back, estimate_transfer_seconds(bytes, b, l));
        }
        lo = hi;
    }
    return inside + ring_seconds(dev, leaders, G, bytes, link, ctx) + back;
}

static int region_of(const cluster *c, int32_t device) { return c->hosts[c->devices[device].host].region; }

double allreduce_plan(const cluster *regions, const int32_t *dev, int32_t R, double bytes, allreduce_link_fn link,
                      const void *ctx, int64_t *groups)
{
    int64_t mask = 0;
    int several = 0; /* some group has more than one replica */
    double ring = allreduce_seconds_for(dev, R, bytes, 0, link, ctx);
    if (groups)
        *groups = 0;
    if (!regions || R < 3 || R > ALLREDUCE_MAX_GROUPED)
        return ring;
    for (int32_t r = 1; r < R; r++) {
        if (region_of(regions, dev[r - 1]) != region_of(regions, dev[r]))
            mask |= (int64_t)1 << r;
        else
            several = 1;
    }
    if (mask == 0 || !several)
        return ring; /* one region, or one replica a region: the ring is the hierarchy */
    double hier = allreduce_seconds_for(dev, R, bytes, mask, link, ctx);
    if (!(hier < ring))
        return ring;
    if (groups)
        *groups = mask;
    return hier;
}

/* The pairs a hierarchical all-reduce over dev[0, R) talks on
 * (passes/allreduce_plan.h): each group's ring, the leaders' ring, each
 * leader to its members; marked in used[min * N + max]. */
void allreduce_mark_links(int64_t groups, const int32_t *dev, int32_t R, char *used, int32_t N)
{
    for (int32_t q = 0; q < R; q++) {
        int32_t lead = allreduce_leader_of(groups, q), next = q + 1,
                pairs[3][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
        while (next < R && allreduce_leader_of(groups, next) != next)
            next++; /* next: the following group's leader (or R) */
        if (q == lead) {
            int32_t after = next < R ? next : 0; /* the leaders' ring */
            pairs[0][0] = q, pairs[0][1] = after;
        } else {
            pairs[1][0] = lead, pairs[1][1] = q; /* leader to member */
        }
        int32_t ring_next = q + 1 < R && allreduce_leader_of(groups, q + 1) == lead ? q + 1 : lead;
        pairs[2][0] = q, pairs[2][1] = ring_next; /* the group's ring */
        for (int k = 0; k < 3; k++) {
            if (pairs[k][0] < 0 || pairs[k][0] == pairs[k][1])
                continue;
            int32_t a = dev[pairs[k][0]], b = dev[pairs[k][1]];
            used[(size_t)(a < b ? a : b) * N + (a < b ? b : a)] = 1;
        }
    }
}

/* ---- the quantised exchange ------------------------------------------------ */

double allreduce_quant_wire_bytes(double floats, int bits)
{
    double rows = ceil(floats / ALLREDUCE_QUANT_COLS);
    return floats > 0 ? 32.0 + 4.0 * rows + rows * ALLREDUCE_QUANT_COLS * bits / 8.0 : 0.0;
}

double allreduce_quant_seconds(const int32_t *dev, int32_t R, double bytes, int bits, allreduce_link_fn link,
                               const void *ctx)
{
    if (R < 2)
        return 0.0;
    double floats = bytes / 4.0, wire = allreduce_quant_wire_bytes(ceil(floats / R), bits), phase = 0.0, acked = 0.0;
    for (int32_t a = 0; a < R; a++)
        for (int32_t b = 0; b < R; b++) {
            double bw, lat;
            if (a == b)
                continue;
            link(ctx, dev[a], dev[b], &bw, &lat);
            phase = fmax(phase, estimate_transfer_seconds(wire, bw, lat));
            acked = fmax(acked, estimate_transfer_seconds(wire, bw, 2.0 * lat));
        }
    /* A replica encodes R-1 chunks and decodes each again (what it dropped
     * is the difference), decodes the R-1 it receives, then encodes and
     * decodes its own chunk's mean and decodes R-1 means: (4R - 2) / R
     * chunk-sized halves of an encode-and-decode a step, half a round. */
    double rate = bits == 8 ? ALLREDUCE_QUANT_RATE_8BIT : ALLREDUCE_QUANT_RATE_4BIT;
    double codec = (2.0 * R - 1.0) / R * bytes / rate / 2.0, round = fmax(phase, codec) + codec / (R - 1);
    /* A link carries its next message once the last is acked (runtime/comm/
     * hub.c): round 2 goes on a pair's link no sooner than round 1's chunk
     * crossed it and the ack came back. */
    return fmax(round, acked) + round;
}

double allreduce_direct_seconds(const int32_t *dev, int32_t R, double bytes, allreduce_link_fn link, const void *ctx)
{
    if (R < 2)
        return 0.0;
    double chunk = ceil(bytes / 4.0 / R) * 4.0, phase = 0.0, lat_max = 0.0;
    for (int32_t a = 0; a < R; a++) {
        double sends = 0.0, lat_a = 0.0;
        for (int32_t b = 0; b < R; b++) {
            double bw, lat;
            if (a == b)
                continue;
            link(ctx, dev[a], dev[b], &bw, &lat);
            sends += chunk / bw;
            lat_a = fmax(lat_a, lat);
        }
        phase = fmax(phase, sends + lat_a);
        lat_max = fmax(lat_max, lat_a);
    }
    return 2.0 * phase + lat_max; /* round 2 after round 1's acks */
}

double allreduce_way_seconds(const int32_t *dev, int32_t R, double bytes, int64_t groups, int bits,
                             allreduce_link_fn link, const void *ctx)
{
    return bits == ALLREDUCE_DIRECT_BITS ? allreduce_direct_seconds(dev, R, bytes, link, ctx)
           : bits                        ? allreduce_quant_seconds(dev, R, bytes, bits, link, ctx)
                                         : allreduce_seconds_for(dev, R, bytes, groups, link, ctx);
}

double allreduce_choose(const cluster *regions, const int32_t *dev, int32_t R, double bytes, int quantise,
                        allreduce_link_fn link, const void *ctx, int64_t *groups, int *bits)
{
    double t = allreduce_plan(regions, dev, R, bytes, link, ctx, groups);
    *bits = 0;
    if (!regions || R < 3 || bytes <= 0)
        return t;
    int spans = 0; /* the slow links are between regions: inside one, the ring (and the sums stay exact) */
    for (int32_t r = 1; r < R && !spans; r++)
        spans = region_of(regions, dev[r]) != region_of(regions, dev[0]);
    if (!spans)
        return t;
    double direct = allreduce_direct_seconds(dev, R, bytes, link, ctx);
    if (direct < ALLREDUCE_DIRECT_GAIN * t)
        t = direct, *bits = ALLREDUCE_DIRECT_BITS;
    if (!quantise)
        return *bits && groups ? (*groups = 0, t) : t;
    double q8 = allreduce_quant_seconds(dev, R, bytes, 8, link, ctx);
    double q4 = allreduce_quant_seconds(dev, R, bytes, 4, link, ctx);
    if (q8 < t)
        t = q8, *bits = 8;
    if (q4 < ALLREDUCE_QUANT_4BIT_GAIN * t)
        t = q4, *bits = 4;
    if (*bits && groups)
        *groups = 0;
    return t;
}
