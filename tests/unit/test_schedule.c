/* test_schedule.c: the schedule pass's choice (passes/schedule.c,
 * schedule_plan): each stage's warm-up and whether it recomputes.
 *
 * Four stages, 64 micro-batches, 20 ms of compute a micro-batch (7 ms of
 * it the forward):
 *   - slow cuts (0.5 s round trips) and memory for 5 micro-batches kept
 *     in full, 60 kept as inputs: `auto` recomputes the capped stages and
 *     their warm-up grows past what the stash allowed;
 *   - fast cuts (1 ms round trips): plain 1F1B, nothing recomputed;
 *   - two stages whose cut's transfer bounds the step with the warm-up
 *     memory allows: recomputing would only add compute, so not (and
 *     with a longer round trip, it does);
 *   - `off` never recomputes, `on` recomputes every stage that keeps a
 *     micro-batch (not the last, whose backward follows its forward).
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

static void test_slow_cuts_capped_by_memory_recompute(void)
{
    const double round_trip[S] = { 0.5, 0.5, 0.5, 0 }, transfer[S] = { 0.01, 0.01, 0.01, 0 };
    const double most_stash[S] = { 5, 5, 5, 5 }, most_replay[S] = { 60, 60, 60, 60 };
    int32_t warm[S], plain[S];
    uint8_t recompute[S], none[S];
    double t[S];
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, round_trip, transfer, most_stash, most_replay,
                               SCHEDULE_RECOMPUTE_AUTO, warm, recompute, t));
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, round_trip, transfer, most_stash, most_replay,
                               SCHEDULE_RECOMPUTE_OFF, plain, none, NULL));
    for (int32_t s = 0; s < S - 1; s++) {
        CHECK_INT(1, recompute[s]);
        CHECK_NEAR(0.027, t[s], 1e-12); /* the forward again */
        CHECK_INT(0, none[s]);
        CHECK(warm[s] > plain[s]);
    }
    CHECK_INT(0, recompute[S - 1]);
    CHECK_NEAR(0.020, t[S - 1], 1e-12);
    /* Capped by the stash: stage 0 holds 5, every later stage one less. */
    CHECK_INT(5, plain[0]);
    CHECK_INT(3, plain[2]);
    /* Recomputing: the cap is 60; each cut's lead covers its round trip
     * (round(0.5 / 0.027) + 1 = 20), from the last stage up: 0, 20, 40, 60. */
    CHECK_INT(60, warm[0]);
    CHECK_INT(40, warm[1]);
    CHECK_INT(20, warm[2]);
    CHECK_INT(0, warm[3]);
    check_1f1b_rule(warm);
    check_1f1b_rule(plain);
}

static void test_fast_cuts_plain_1f1b(void)
{
    const double round_trip[S] = { 0.001, 0.001, 0.001, 0 }, transfer[S] = { 0.0001, 0.0001, 0.0001, 0 };
    const double most_stash[S] = { 5, 5, 5, 5 }, most_replay[S] = { 60, 60, 60, 60 };
    int32_t warm[S];
    uint8_t recompute[S];
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, round_trip, transfer, most_stash, most_replay,
                               SCHEDULE_RECOMPUTE_AUTO, warm, recompute, NULL));
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
    const double most_stash[2] = { 3, 3 }, most_replay[2] = { 60, 60 };
    int32_t warm[2];
    uint8_t recompute[2];
    CHECK_INT(0, schedule_plan(2, M, t, f, round_trip, transfer, most_stash, most_replay, SCHEDULE_RECOMPUTE_AUTO, warm,
                               recompute, NULL));
    CHECK_INT(0, recompute[0]);
    CHECK_INT(0, recompute[1]);
    CHECK_INT(3, warm[0]);
    CHECK_INT(0, warm[1]);
    /* A slower link's round trip (0.5 s, 0.1 s transfer): 3 in flight
     * leave it idle, (0.5 + 0.02) / 3 > 0.1, so recomputing pays. */
    const double longer[2] = { 0.5, 0 };
    CHECK_INT(0, schedule_plan(2, M, t, f, longer, transfer, most_stash, most_replay, SCHEDULE_RECOMPUTE_AUTO, warm,
                               recompute, NULL));
    CHECK_INT(1, recompute[0]);
    CHECK_INT(20, warm[0]); /* 1 + round(0.5 / 0.027) */
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
    int32_t warm[2];
    uint8_t recompute[2];
    CHECK_INT(
        0, schedule_plan(2, M, t, f, just_short, transfer, NULL, NULL, SCHEDULE_RECOMPUTE_AUTO, warm, recompute, NULL));
    CHECK_INT(2, warm[0]);
    CHECK_INT(0, warm[1]);
    CHECK_INT(0,
              schedule_plan(2, M, t, f, tenth, transfer, NULL, NULL, SCHEDULE_RECOMPUTE_AUTO, warm, recompute, NULL));
    CHECK_INT(1, warm[0]);
    CHECK_INT(
        0, schedule_plan(2, M, t, f, over_half, transfer, NULL, NULL, SCHEDULE_RECOMPUTE_AUTO, warm, recompute, NULL));
    CHECK_INT(2, warm[0]);
}

static void test_modes(void)
{
    const double round_trip[S] = { 0.001, 0.001, 0.001, 0 }, transfer[S] = { 0.0001, 0.0001, 0.0001, 0 };
    const double most_stash[S] = { 5, 5, 5, 5 }, most_replay[S] = { 60, 60, 60, 60 };
    int32_t warm[S];
    uint8_t recompute[S];
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, round_trip, transfer, most_stash, most_replay,
                               SCHEDULE_RECOMPUTE_ON, warm, recompute, NULL));
    for (int32_t s = 0; s < S; s++)
        CHECK_INT(s < S - 1, recompute[s]);
    check_1f1b_rule(warm);
    /* Slow cuts, memory-capped, but recomputation off: nothing recomputes. */
    const double slow[S] = { 0.5, 0.5, 0.5, 0 };
    CHECK_INT(0, schedule_plan(S, M, stage_seconds, forward_seconds, slow, transfer, most_stash, most_replay,
                               SCHEDULE_RECOMPUTE_OFF, warm, recompute, NULL));
    for (int32_t s = 0; s < S; s++)
        CHECK_INT(0, recompute[s]);
    CHECK_INT(SCHEDULE_RECOMPUTE_AUTO, schedule_recompute_mode(NULL));
    CHECK_INT(SCHEDULE_RECOMPUTE_AUTO, schedule_recompute_mode("auto"));
    CHECK_INT(SCHEDULE_RECOMPUTE_ON, schedule_recompute_mode("on"));
    CHECK_INT(SCHEDULE_RECOMPUTE_OFF, schedule_recompute_mode("off"));
    CHECK_INT(-1, schedule_recompute_mode("yes"));
}

int main(void)
{
    test_slow_cuts_capped_by_memory_recompute();
    test_fast_cuts_plain_1f1b();
    test_transfer_bound_not_worth_recomputing();
    test_lead_rounded();
    test_modes();
    CHECK_DONE();
}
