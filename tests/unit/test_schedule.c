/* test_schedule.c: the schedule pass's choice (passes/schedule.c,
 * schedule_plan): each stage's warm-up and whether it recomputes.
 *
 * Four stages, 64 micro-batches, 20 ms of compute a micro-batch (7 ms of
 * it the forward):
 *   - slow cuts (0.5 s round trips) and memory for 5 micro-batches kept
 *     in full, 60 kept as inputs: `auto` recomputes the capped stages and
 *     their warm-up grows past what the stash allowed; each keeps whole
 *     as many as fit beside the others' inputs, and only the rest replay
 *     (partial replay);
 *   - fast cuts (1 ms round trips): plain 1F1B, nothing recomputed;
 *   - two stages whose cut's transfer bounds the step with the warm-up
 *     memory allows: recomputing would only add compute, so not (and
 *     with a longer round trip, it does);
 *   - `off` never recomputes, `on` recomputes every stage that keeps a
 *     micro-batch (not the last, whose backward follows its forward),
 *     replaying all; keep:K the same keeping at most K whole;
 *   - two stages, the first's memory holding 4 of the 7 in flight its
 *     round trip asks for (an 8B LoRA's stage 0 world-wide): it keeps 4
 *     whole and replays 3 of every 7, cheaper than replaying all.
 * Every plan keeps the 1F1B rule: a stage warms up at least one more than
 * the next.
 */
#include <math.h>
#include <stdint.h>

#include "check.h"
#include "passes.h"

enum { S = 4, M = 64 };

static const double stage_seconds[S] = { 0.020, 0.020, 0.020, 0.020 };
static const double forward_seconds[S] = { 0.007, 0.007, 0.007, 0.007 };

static void check_1f1b_rule(const int32_t *warm)
{
    for (int32_t s = 0; s + 1 < S; s++)
        CHECK(warm[s] >= warm[s + 1] + 1 || warm[s] == M);
    CHECK(warm[S - 1] >= 0 && warm[0] <= M);
}

/* room 61, kept 12, inputs 1: 5 waiting whole (5 x 12 <= 61), or 60 replaying ((60 + 1) x 1 <= 61). */
static const schedule_memory five_or_sixty[S] = { { 61, 12, 1 }, { 61, 12, 1 }, { 61, 12, 1 }, { 61, 12, 1 } };

static void test_slow_cuts_capped_by_memory_recompute(void)
{
    const double round_trip[S] = { 0.5, 0.5, 0.5, 0 }, transfer[S] = { 0.01, 0.01, 0.01, 0 };
    int32_t warm[S], plain[S], keep[S], kept_none[S];
    uint8_t recompute[S], none[S];
    double t[S];
    CHECK_NEAR(5, schedule_most_kept(&five_or_sixty[0]), 0);
    CHECK_NEAR(60, schedule_most_replayed(&five_or_sixty[0]), 0);
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, round_trip, transfer, five_or_sixty,
                               SCHEDULE_RECOMPUTE_AUTO, warm, recompute, keep, t));
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, round_trip, transfer, five_or_sixty,
                               SCHEDULE_RECOMPUTE_OFF, plain, none, kept_none, NULL));
    for (int32_t s = 0; s < S - 1; s++) {
        int32_t n = warm[s] + 1;
        CHECK_INT(1, recompute[s]);
        CHECK_INT(0, none[s]);
        CHECK_INT(0, kept_none[s]);
        CHECK(warm[s] > plain[s]);
        /* the most that fit whole beside the others' inputs, and only the rest replay */
        CHECK(keep[s] * 12 + (n - keep[s]) <= 61);
        CHECK(keep[s] == n - 1 || (keep[s] + 1) * 12 + (n - keep[s] - 1) > 61);
        CHECK_NEAR(0.020 + 0.007 * (n - keep[s]) / n, t[s], 1e-12);
    }
    CHECK_INT(0, keep[0]); /* 61 in flight: inputs alone fill the room */
    CHECK_NEAR(0.027, t[0], 1e-12);
    CHECK(keep[2] > 0);
    CHECK_INT(0, recompute[S - 1]);
    CHECK_NEAR(0.020, t[S - 1], 1e-12);
    /* Capped by the stash: stage 0 holds 5, every later stage one less. */
    CHECK_INT(5, plain[0]);
    CHECK_INT(3, plain[2]);
    /* Recomputing: the cap is 60; each cut's lead covers its round trip
     * (about 0.5 / t + 1), from the last stage up. */
    CHECK_INT(60, warm[0]);
    CHECK_INT(0, warm[3]);
    for (int32_t s = 0; s + 1 < S; s++)
        CHECK(warm[s] - warm[s + 1] >= (int32_t)floor(0.5 / t[s] + 0.5));
    check_1f1b_rule(warm);
    check_1f1b_rule(plain);
}

/* Stage 0 holds 4 of the 7 in flight its round trip asks for: it keeps 4
 * whole and replays 3 of every 7, 0.100 + 0.033 x 3 / 7 a micro-batch,
 * where replaying all costs 0.133 and keeping 4 waits for the round trip. */
static void test_partial_replay(void)
{
    const double t[2] = { 0.100, 0.100 }, f[2] = { 0.033, 0.033 }, transfer[2] = { 0.067, 0 };
    const double round_trip[2] = { 0.6, 0 };
    const schedule_memory room[2] = { { 4 * 2.0 + 3 * 0.016 + 0.001, 2.0, 0.016 }, { INFINITY, 2.0, 0.016 } };
    int32_t warm[2], keep[2];
    uint8_t recompute[2];
    double seconds[2];
    CHECK_INT(4, schedule_keep_whole(&room[0], 7));
    CHECK_INT(3, schedule_keep_whole(&room[0], 8));
    CHECK_INT(0, schedule_keep_whole(&room[0], 1));
    CHECK_INT(6, schedule_keep_whole(&room[1], 7));
    CHECK_INT(0, schedule_plan(2, M, t, f, round_trip, transfer, room, SCHEDULE_RECOMPUTE_AUTO, warm, recompute, keep,
                               seconds));
    CHECK_INT(1, recompute[0]);
    CHECK_INT(6, warm[0]); /* 1 + round(0.6 / 0.114) */
    CHECK_INT(4, keep[0]);
    CHECK_NEAR(0.100 + 0.033 * 3 / 7, seconds[0], 1e-12);
    CHECK_INT(0, recompute[1]);
    CHECK_INT(0, keep[1]);
    /* `on` replays every waiting micro-batch; keep:2 keeps at most 2 whole */
    CHECK_INT(0, schedule_plan(2, M, t, f, round_trip, transfer, room, SCHEDULE_RECOMPUTE_ON, warm, recompute, keep,
                               seconds));
    CHECK_INT(1, recompute[0]);
    CHECK_INT(0, keep[0]);
    CHECK_NEAR(0.133, seconds[0], 1e-12);
    CHECK_INT(0, schedule_plan(2, M, t, f, round_trip, transfer, room, SCHEDULE_RECOMPUTE_KEEP + 2, warm, recompute,
                               keep, seconds));
    CHECK_INT(1, recompute[0]);
    CHECK_INT(2, keep[0]);
    CHECK_NEAR(0.100 + 0.033 * (warm[0] + 1 - 2) / (warm[0] + 1), seconds[0], 1e-12);
}

static void test_fast_cuts_plain_1f1b(void)
{
    const double round_trip[S] = { 0.001, 0.001, 0.001, 0 }, transfer[S] = { 0.0001, 0.0001, 0.0001, 0 };
    int32_t warm[S], keep[S];
    uint8_t recompute[S];
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, round_trip, transfer, five_or_sixty,
                               SCHEDULE_RECOMPUTE_AUTO, warm, recompute, keep, NULL));
    for (int32_t s = 0; s < S; s++) {
        CHECK_INT(0, recompute[s]);
        CHECK_INT(S - s - 1, warm[s]);
    }
}

static void test_transfer_bound_not_worth_recomputing(void)
{
    /* Two stages; the cut carries a micro-batch in 0.1 s and its round trip
     * is 0.22 s.  Memory holds 3 in flight where 12 would cover the round
     * trip, but 3 already keep the link busy: (0.22 + 0.02) / 3 < 0.1. */
    const double t[2] = { 0.020, 0.020 }, f[2] = { 0.007, 0.007 };
    const double round_trip[2] = { 0.22, 0 }, transfer[2] = { 0.1, 0 };
    /* room 61, kept 20, inputs 1: 3 waiting whole, or 60 replaying */
    const schedule_memory room[2] = { { 61, 20, 1 }, { 61, 20, 1 } };
    int32_t warm[2], keep[2];
    uint8_t recompute[2];
    CHECK_INT(
        0, schedule_plan(2, M, t, f, round_trip, transfer, room, SCHEDULE_RECOMPUTE_AUTO, warm, recompute, keep, NULL));
    CHECK_INT(0, recompute[0]);
    CHECK_INT(0, recompute[1]);
    CHECK_INT(3, warm[0]);
    CHECK_INT(0, warm[1]);
    /* A slower link's round trip (0.5 s, 0.1 s transfer): 3 in flight
     * leave it idle, (0.5 + 0.02) / 3 > 0.1, so recomputing pays. */
    const double longer[2] = { 0.5, 0 };
    CHECK_INT(0,
              schedule_plan(2, M, t, f, longer, transfer, room, SCHEDULE_RECOMPUTE_AUTO, warm, recompute, keep, NULL));
    CHECK_INT(1, recompute[0]);
    CHECK_INT(20, warm[0]); /* 1 + round(0.5 / (0.020 + 0.007 x 19 / 21)): 2 of 21 whole */
    CHECK_INT(2, keep[0]);
}

/* The lead is rounded to the nearest micro-batch: a round trip just short
 * of a stage's compute (0.997 t, the 8B LoRA world-wide's cut) gets one
 * micro-batch more in flight, where rounding down gave none and the stage
 * waited its round trip every micro-batch; a round trip a tenth of it
 * (a data centre's) gets none. */
static void test_lead_rounded(void)
{
    const double t[2] = { 0.1, 0.1 }, f[2] = { 0.03, 0.03 }, transfer[2] = { 0.01, 0 };
    const double just_short[2] = { 0.0997, 0 }, tenth[2] = { 0.01, 0 }, over_half[2] = { 0.06, 0 };
    int32_t warm[2], keep[2];
    uint8_t recompute[2];
    CHECK_INT(
        0, schedule_plan(2, M, t, f, just_short, transfer, NULL, SCHEDULE_RECOMPUTE_AUTO, warm, recompute, keep, NULL));
    CHECK_INT(2, warm[0]);
    CHECK_INT(0, warm[1]);
    CHECK_INT(0,
              schedule_plan(2, M, t, f, tenth, transfer, NULL, SCHEDULE_RECOMPUTE_AUTO, warm, recompute, keep, NULL));
    CHECK_INT(1, warm[0]);
    CHECK_INT(
        0, schedule_plan(2, M, t, f, over_half, transfer, NULL, SCHEDULE_RECOMPUTE_AUTO, warm, recompute, keep, NULL));
    CHECK_INT(2, warm[0]);
}

static void test_modes(void)
{
    const double round_trip[S] = { 0.001, 0.001, 0.001, 0 }, transfer[S] = { 0.0001, 0.0001, 0.0001, 0 };
    int32_t warm[S], keep[S];
    uint8_t recompute[S];
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, round_trip, transfer, five_or_sixty,
                               SCHEDULE_RECOMPUTE_ON, warm, recompute, keep, NULL));
    for (int32_t s = 0; s < S; s++)
        CHECK_INT(s < S - 1, recompute[s]);
    check_1f1b_rule(warm);
    /* Slow cuts, memory-capped, but recomputation off: nothing recomputes. */
    const double slow[S] = { 0.5, 0.5, 0.5, 0 };
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, slow, transfer, five_or_sixty,
                               SCHEDULE_RECOMPUTE_OFF, warm, recompute, keep, NULL));
    for (int32_t s = 0; s < S; s++)
        CHECK_INT(0, recompute[s]);
    CHECK_INT(SCHEDULE_RECOMPUTE_AUTO, schedule_recompute_mode(NULL));
    CHECK_INT(SCHEDULE_RECOMPUTE_AUTO, schedule_recompute_mode("auto"));
    CHECK_INT(SCHEDULE_RECOMPUTE_ON, schedule_recompute_mode("on"));
    CHECK_INT(SCHEDULE_RECOMPUTE_OFF, schedule_recompute_mode("off"));
    CHECK_INT(-1, schedule_recompute_mode("yes"));
    CHECK_INT(SCHEDULE_RECOMPUTE_KEEP + 3, schedule_recompute_mode("keep:3"));
    CHECK_INT(-1, schedule_recompute_mode("keep:0"));
    CHECK_INT(-1, schedule_recompute_mode("keep:"));
    CHECK_INT(-1, schedule_recompute_mode("keep:2x"));
}

int main(void)
{
    test_slow_cuts_capped_by_memory_recompute();
    test_fast_cuts_plain_1f1b();
    test_transfer_bound_not_worth_recomputing();
    test_lead_rounded();
    test_partial_replay();
    test_modes();
    CHECK_DONE();
}
