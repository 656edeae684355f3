/* timing.h: what the unit tests that check a time budget share.
 *
 * OPTIMISED_BUILD: 1 in an optimised build without sanitizers, where a
 * user's time limit (say, scheduling 1,024 devices in 10 s) is checked;
 * 0 under ASan/UBSan or -O0, where the work is still done and verified but
 * not timed.  (clang 14 does not define __SANITIZE_ADDRESS__;
 * __has_feature does.)  now_seconds: a monotonic clock; work_seconds: the
 * thread's CPU time.
 */
#ifndef FUSION_TEST_TIMING_H
#define FUSION_TEST_TIMING_H

#include <time.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#endif
#if defined(__OPTIMIZE__) && !defined(UNDER_SANITIZER)
#define OPTIMISED_BUILD 1
#else
#define OPTIMISED_BUILD 0
#endif

static inline double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The calling thread's CPU time: what a single-threaded search's own work
 * took, whatever else the machine runs.  A user's limit is checked on it,
 * not on the wall clock: ctest -j2 beside a loaded CI stretched gcma's
 * 1,024-device search past 10 s of wall time (50 s for the test) while its
 * work was the same. */
static inline double work_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
