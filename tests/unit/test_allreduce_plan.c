/* test_allreduce_plan: the ring or the hierarchy (passes/allreduce_plan.h),
 * on the clusters the runtime test trains on (test_hierarchical_allreduce):
 *   - local-4's 4 replicas (2 + 2 over a 20 Mbps / 40 ms link): the
 *     hierarchy is chosen, its groups start at replica 2, and it is priced
 *     as a ring of 2 in a site + a ring of the 2 leaders + the result back,
 *     under the one ring of 4 it replaces (2 (R-1)/R of the bytes over the
 *     slow link, 6 of its latencies);
 *   - two-regions-3-1's 3 + 1: groups start at replica 3;
 *   - replicas in one region, or one a region: the ring (groups 0);
 *   - allreduce_mark_links marks each group's ring, the leaders' ring and
 *     each leader to its members, and nothing else;
 *   - the quantised exchange (allreduce_choose under --compress): priced
 *     as two rounds of one chunk on the slowest pair, the second after the
 *     first's acks, the codec overlapping;
 *     chosen on local-4's 4 replicas at 4 bits for 1M floats, at 8 for
 *     100,000 (4 bits save under 10%), not at all for 10,000 (the
 *     hierarchy's bytes cost less than a third latency), never without
 *     --compress nor inside one region;
 *   - the direct exchange (bits 32, exact): priced as two rounds of a
 *     replica's R-1 chunks one after the other plus the slowest latency,
 *     and once more that latency; chosen without --compress for
 *     four-regions' one replica a site 30 ms apart at 100,000 floats (3
 *     latencies against the ring's 6; with it, 8 bits are faster still),
 *     not for local-4's 1M floats (the
 *     hierarchy crosses the slow link with fewer bytes) nor inside one
 *     region.
 */
#include <math.h>
#include <stdlib.h>

#include "../../frontend/cluster.h"
#include "../../ir/diag.h"
#include "../../passes/allreduce_plan.h"
#include "../../passes/passes.h"
#include "check.h"

static void link_of(const void *ctx, int32_t a, int32_t b, double *bw, double *lat)
{
    cluster_link_between(ctx, a, b, bw, lat);
}

static int load(const char *rel, cluster *c)
{
    char path[1024];
    const char *src = getenv("FUSION_SOURCE_DIR");
    struct diag err = { 0 };
    snprintf(path, sizeof path, "%s/%s", src ? src : ".", rel);
    if (cluster_load(path, c, &err) != 0) {
        fprintf(stderr, "cannot load %s\n", path);
        return -1;
    }
    return 0;
}

int main(void)
{
    cluster c4 = { 0 }, c31 = { 0 };
    if (load("clusters/local-4.xml", &c4) || load("tests/clusters/two-regions-3-1.xml", &c31))
        return 1;
    const double B = 4e6; /* a stage's gradients: 1M floats */
    int32_t dev[4] = { 0, 1, 2, 3 };
    int64_t groups = -1;
    double t = allreduce_plan(&c4, dev, 4, B, link_of, &c4, &groups);
    double ring = allreduce_seconds_for(dev, 4, B, 0, link_of, &c4);
    CHECK_INT((int64_t)1 << 2, groups);
    /* The ring of 4 crosses the 20 Mbps link: 2 * 3/4 of the bytes on it, 6 latencies. */
    CHECK_NEAR(estimate_transfer_seconds(1.5 * B, 20e6 / 8, 6 * 0.040), ring, 1e-9);
    double inside = estimate_transfer_seconds(B, 10e9 / 8, 2 * 50e-6); /* a ring of 2 in a site */
    double leaders = estimate_transfer_seconds(B, 20e6 / 8, 2 * 0.040);
    double back = estimate_transfer_seconds(B, 10e9 / 8, 50e-6);
    CHECK_NEAR(inside + leaders + back, t, 1e-9);
    CHECK(t < 0.7 * ring);
    CHECK_INT(0, allreduce_leader_of(groups, 1));
    CHECK_INT(2, allreduce_leader_of(groups, 3));

    t = allreduce_plan(&c31, dev, 4, B, link_of, &c31, &groups);
    CHECK_INT((int64_t)1 << 3, groups);
    CHECK(t < allreduce_seconds_for(dev, 4, B, 0, link_of, &c31));
    /* One region: the ring. */
    CHECK(allreduce_plan(&c31, dev, 3, B, link_of, &c31, &groups) > 0);
    CHECK_INT(0, groups);
    /* One replica a region (cpu-a1, cpu-b0 ... none alike): the ring. */
    int32_t apart[2] = { 0, 3 };
    allreduce_plan(&c31, apart, 2, B, link_of, &c31, &groups);
    CHECK_INT(0, groups);

    /* The pairs: groups {0,1,2} {3}: ring 0-1, 1-2, 2-0; leaders 0-3; leader 0 to 1 and 2. */
    char used[16] = { 0 };
    allreduce_mark_links((int64_t)1 << 3, dev, 4, used, 4);
    const char want[16] = { [0 * 4 + 1] = 1, [1 * 4 + 2] = 1, [0 * 4 + 2] = 1, [0 * 4 + 3] = 1 };
    for (int i = 0; i < 16; i++)
        CHECK_INT(want[i], used[i]);

    /* The quantised exchange: 1M floats over 4 replicas, chunks of 250,000
     * floats (489 rows of 512, the last padded): 32 + 4 * 489 + 489 * 512
     * bytes at 8 bits; each round's slowest pair is across the 20 Mbps link. */
    double wire8 = 32.0 + 4.0 * 489 + 489.0 * 512;
    CHECK_NEAR(wire8, allreduce_quant_wire_bytes(250000, 8), 1e-9);
    double codec = (2.0 * 4 - 1) / 4 * B / ALLREDUCE_QUANT_RATE_8BIT / 2; /* a round's */
    double round = fmax(estimate_transfer_seconds(wire8, 20e6 / 8, 0.040), codec) + codec / 3;
    double q8 = fmax(round, estimate_transfer_seconds(wire8, 20e6 / 8, 0.080)) + round; /* round 2 after the acks */
    CHECK_NEAR(q8, allreduce_quant_seconds(dev, 4, B, 8, link_of, &c4), 1e-9);
    CHECK_NEAR(q8, allreduce_way_seconds(dev, 4, B, 0, 8, link_of, &c4), 1e-9);
    int bits = -1;
    t = allreduce_choose(&c4, dev, 4, B, 1, link_of, &c4, &groups, &bits);
    CHECK_INT(4, bits);
    CHECK_INT(0, groups);
    CHECK_NEAR(allreduce_quant_seconds(dev, 4, B, 4, link_of, &c4), t, 1e-9);
    CHECK(q8 < allreduce_plan(&c4, dev, 4, B, link_of, &c4, NULL));
    /* Without --compress, or in one region: never quantised. */
    allreduce_choose(&c4, dev, 4, B, 0, link_of, &c4, &groups, &bits);
    CHECK_INT(0, bits);
    CHECK_INT((int64_t)1 << 2, groups);
    allreduce_choose(&c31, dev, 3, B, 1, link_of, &c31, &groups, &bits);
    CHECK_INT(0, bits);
    /* 1M floats: 4 bits save more than 10% against 8 (half the bytes on
     * 20 Mbps); 100,000: the latencies weigh more, 8 bits; 10,000: the
     * exchange's three latencies (two rounds, the second after the first's
     * acks) cost more than the hierarchy's bytes, which stays. */
    CHECK(allreduce_quant_seconds(dev, 4, B, 4, link_of, &c4) < ALLREDUCE_QUANT_4BIT_GAIN * q8);
    allreduce_choose(&c4, dev, 4, 4e5, 1, link_of, &c4, &groups, &bits);
    CHECK_INT(8, bits);
    allreduce_choose(&c4, dev, 4, 4e4, 1, link_of, &c4, &groups, &bits);
    CHECK_INT(0, bits);
    CHECK_INT((int64_t)1 << 2, groups);

    /* The direct exchange on four-regions: 4e5 bytes, chunks of 1e5. */
    cluster c44 = { 0 };
    if (load("tests/clusters/four-regions.xml", &c44))
        return 1;
    double chunk = 1e5, slow = 100e6 / 8;
    double round_d = 3 * chunk / slow + 0.030, direct = 2 * round_d + 0.030;
    CHECK_NEAR(direct, allreduce_direct_seconds(dev, 4, 4e5, link_of, &c44), 1e-9);
    CHECK_NEAR(direct, allreduce_way_seconds(dev, 4, 4e5, 0, ALLREDUCE_DIRECT_BITS, link_of, &c44), 1e-9);
    double ring4 = estimate_transfer_seconds(1.5 * 4e5, slow, 6 * 0.030);
    CHECK_NEAR(ring4, allreduce_plan(&c44, dev, 4, 4e5, link_of, &c44, &groups), 1e-9);
    t = allreduce_choose(&c44, dev, 4, 4e5, 0, link_of, &c44, &groups, &bits);
    CHECK_INT(ALLREDUCE_DIRECT_BITS, bits);
    CHECK_INT(0, groups);
    CHECK_NEAR(direct, t, 1e-9);
    /* Under --compress the quantised exchange, a quarter of the bytes, is faster still. */
    t = allreduce_choose(&c44, dev, 4, 4e5, 1, link_of, &c44, &groups, &bits);
    CHECK_INT(8, bits);
    CHECK(t < direct);
    /* local-4, 1M floats, no --compress: the hierarchy (2 leaders, 2 latencies) stays. */
    allreduce_choose(&c4, dev, 4, B, 0, link_of, &c4, &groups, &bits);
    CHECK_INT(0, bits);
    CHECK(allreduce_direct_seconds(dev, 4, B, link_of, &c4) > allreduce_plan(&c4, dev, 4, B, link_of, &c4, NULL));
    /* One region: the ring, however small. */
    allreduce_choose(&c31, dev, 3, 4e3, 0, link_of, &c31, &groups, &bits);
    CHECK_INT(0, bits);
    cluster_free(&c4);
    cluster_free(&c31);
    cluster_free(&c44);
    CHECK_DONE();
}
