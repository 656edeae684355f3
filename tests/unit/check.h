/* check.h: the few assertions the C unit tests use.
 *
 * A failed check prints where it is, what was expected and what was found,
 * counts the failure, and lets the test go on; CHECK_DONE() returns the exit
 * status (non-zero when anything failed), so a test can never pass silently.
 */
#ifndef FUSION_CHECK_H
#define FUSION_CHECK_H

#include <math.h>
#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                          \
    do {                                                                     \
        check_count++;                                                       \
        if (!(cond)) {                                                       \
            check_failures++;                                                \
            fprintf(stderr, "%s:%d: FAIL: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                    \
    } while (0)

#define CHECK_INT(expected, found)                                                                               \
    do {                                                                                                         \
        long long e_ = (long long)(expected), f_ = (long long)(found);                                           \
        check_count++;                                                                                           \
        if (e_ != f_) {                                                                                          \
            check_failures++;                                                                                    \
            fprintf(stderr, "%s:%d: FAIL: %s: expected %lld, found %lld\n", __FILE__, __LINE__, #found, e_, f_); \
        }                                                                                                        \
    } while (0)

#define CHECK_NEAR(expected, found, tol)                                                                               \
    do {                                                                                                               \
        double e_ = (expected), f_ = (found);                                                                          \
        check_count++;                                                                                                 \
        if (!(fabs(e_ - f_) <= (tol))) {                                                                               \
            check_failures++;                                                                                          \
            fprintf(stderr, "%s:%d: FAIL: %s: expected %.9g, found %.9g (tolerance %g)\n", __FILE__, __LINE__, #found, \
                    e_, f_, (double)(tol));                                                                            \
        }                                                                                                              \
    } while (0)

#define CHECK_STR(expected, found)                                                                          \
    do {                                                                                                    \
        const char *e_ = (expected), *f_ = (found);                                                         \
        check_count++;                                                                                      \
        if (!e_ || !f_ || strcmp(e_, f_) != 0) {                                                            \
            check_failures++;                                                                               \
            fprintf(stderr, "%s:%d: FAIL: %s: expected \"%s\", found \"%s\"\n", __FILE__, __LINE__, #found, \
                    e_ ? e_ : "(null)", f_ ? f_ : "(null)");                                                \
        }                                                                                                   \
    } while (0)

/* Substring: the found text must contain `needle`. */
#define CHECK_CONTAINS(found, needle)                                                                                  \
    do {                                                                                                               \
        const char *f_ = (found), *n_ = (needle);                                                                      \
        check_count++;                                                                                                 \
        if (!f_ || !strstr(f_, n_)) {                                                                                  \
            check_failures++;                                                                                          \
            fprintf(stderr, "%s:%d: FAIL: %s: expected to contain \"%s\", found \"%s\"\n", __FILE__, __LINE__, #found, \
                    n_, f_ ? f_ : "(null)");                                                                           \
        }                                                                                                              \
    } while (0)

#define CHECK_DONE()                                                            \
    do {                                                                        \
        if (check_count == 0) {                                                 \
            fprintf(stderr, "FAIL: no checks ran\n");                           \
            return 1;                                                           \
        }                                                                       \
        fprintf(stderr, "%d checks, %d failed\n", check_count, check_failures); \
        return check_failures ? 1 : 0;                                          \
    } while (0)

#endif
