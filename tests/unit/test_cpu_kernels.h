/* test_cpu_kernels.h: what the CPU kernel tests share.
 *
 * How a gradient is checked. Every test keeps each input twice: as float
 * (what the kernel gets) and as the same values in double (what a naive
 * double-precision reference forward in the test gets). The objective is
 * L(inputs) = Σ y·r for a fixed random projection r, evaluated by the
 * reference in double; its central differences (step FD_STEP) are accurate
 * to ~1e-9, so the float backward, fed dy = r, must match them to float
 * accuracy:
 *
 *     |analytic_i - fd_i| <= GRAD_RTOL·|fd_i| + GRAD_ATOL·max_j |fd_j|
 *
 * for every checked coordinate (all of them, or FD_MAX_COORDS sampled ones
 * for big inputs). The float kernels land within ~1e-6 of the exact
 * gradient on these sizes, so the tolerances leave a 10x margin and still
 * refuse an error of 0.1% in any one element of ordinary size; every test
 * file proves the comparison can fail with check_perturbed_grad_is_detected
 * (one element changed by 10%).
 *
 * Forwards are compared with the same references: max|y - ref| must be
 * within FWD_RTOL of max|ref|.
 */
#ifndef TEST_CPU_KERNELS_H
#define TEST_CPU_KERNELS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu/kernels.h"

#define FD_STEP       1e-5
#define FD_MAX_COORDS 300
#define GRAD_RTOL     1e-4
#define GRAD_ATOL     1e-5
#define FWD_RTOL      1e-5

/* ---- deterministic random numbers (splitmix64) ------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static inline void rng_seed(uint64_t seed) { rng_state = seed; }

static inline uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi), as a float (so that it is exact in double too). */
static inline float rng_uniform(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rng_next() >> 11) / 9007199254740992.0);
}

static inline int64_t rng_below(int64_t n) { return (int64_t)(rng_next() % (uint64_t)n); }

/* ---- buffers: a float array and its double twin ----------------------- */

typedef struct {
    float *f;
    double *d;
    int64_t n;
} tensor;

static inline tensor tensor_new(int64_t n)
{
    tensor t = { calloc((size_t)(n ? n : 1), sizeof(float)), calloc((size_t)(n ? n : 1), sizeof(double)), n };
    if (!t.f || !t.d) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return t;
}

static inline tensor tensor_random(int64_t n, float lo, float hi)
{
    tensor t = tensor_new(n);
    for (int64_t i = 0; i < n; i++) {
        t.f[i] = rng_uniform(lo, hi);
        t.d[i] = t.f[i];
    }
    return t;
}

static inline void tensor_free(tensor *t)
{
    free(t->f);
    free(t->d);
    t->f = NULL;
    t->d = NULL;
}

static inline float *floats_new(int64_t n)
{
    float *p = calloc((size_t)(n ? n : 1), sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static inline double *doubles_new(int64_t n)
{
    double *p = calloc((size_t)(n ? n : 1), sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* A gradient buffer full of NaN: a backward that accumulates into it
 * instead of overwriting it shows at once. */
static inline float *grad_buffer(int64_t n)
{
    float *p = floats_new(n);
    for (int64_t i = 0; i < n; i++)
        p[i] = NAN;
    return p;
}

/* Σ y·r in double. */
static inline double dot_f64(const double *y, const double *r, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += y[i] * r[i];
    return s;
}

/* ---- forward comparison ----------------------------------------------- */

/* max|found - ref| / max|ref| (absolute when ref is all zero). */
static inline double rel_error(const float *found, const double *ref, int64_t n)
{
    double err = 0, scale = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)found[i] - ref[i]);
        if (e > err || isnan(e))
            err = isnan(e) ? INFINITY : e;
        if (fabs(ref[i]) > scale)
            scale = fabs(ref[i]);
    }
    return scale > 0 ? err / scale : err;
}

#define CHECK_FORWARD(what, found, ref, n)                                         \
    do {                                                                           \
        double e__ = rel_error((found), (ref), (n));                               \
        if (!(e__ <= FWD_RTOL))                                                    \
            fprintf(stderr, "    forward %s: relative error %.3g\n", (what), e__); \
        CHECK_NEAR(0.0, e__, FWD_RTOL);                                            \
    } while (0)

/* ---- finite differences of a double objective ------------------------- */

/* The objective: evaluates the reference forward on the current double
 * inputs (reachable from ctx) and returns Σ y·r. */
typedef double (*objective_fn)(void *ctx);

/* Central differences at the checked coordinates of x. */
typedef struct {
    int64_t count;
    int64_t *idx; /* which coordinates of x */
    double *fd;   /* dL/dx at them */
} fd_sample;

static inline fd_sample fd_gradient(double *x, int64_t n, objective_fn f, void *ctx)
{
    fd_sample s;
    s.count = n < FD_MAX_COORDS ? n : FD_MAX_COORDS;
    s.idx = calloc((size_t)(s.count ? s.count : 1), sizeof *s.idx);
    s.fd = doubles_new(s.count);
    if (!s.idx) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (int64_t k = 0; k < s.count; k++) {
        int64_t i = n <= FD_MAX_COORDS ? k : rng_below(n);
        double keep = x[i];
        x[i] = keep + FD_STEP;
        double up = f(ctx);
        x[i] = keep - FD_STEP;
        double down = f(ctx);
        x[i] = keep;
        s.idx[k] = i;
        s.fd[k] = (up - down) / (2 * FD_STEP);
    }
    return s;
}

static inline void fd_sample_free(fd_sample *s)
{
    free(s->idx);
    free(s->fd);
}

/* 1 when the analytic gradient matches the differences at every checked
 * coordinate; otherwise 0, with the worst coordinate in *worst. */
static inline int grad_matches(const float *analytic, const fd_sample *s, int64_t *worst)
{
    double scale = 0, worst_excess = -1;
    for (int64_t k = 0; k < s->count; k++)
        if (fabs(s->fd[k]) > scale)
            scale = fabs(s->fd[k]);
    int ok = 1;
    for (int64_t k = 0; k < s->count; k++) {
        double a = analytic[s->idx[k]], e = s->fd[k];
        double excess = fabs(a - e) - (GRAD_RTOL * fabs(e) + GRAD_ATOL * scale);
        if (!(excess <= 0)) {
            ok = 0;
            if (isnan(excess) || excess > worst_excess) {
                worst_excess = isnan(excess) ? INFINITY : excess;
                *worst = k;
            }
        }
    }
    return ok;
}

/* CHECK that analytic (the float backward's gradient for x) matches the
 * finite differences of f with respect to x; say where it does not. */
static inline void check_grad(const char *what, const float *analytic, double *x, int64_t n, objective_fn f, void *ctx)
{
    fd_sample s = fd_gradient(x, n, f, ctx);
    int64_t worst = 0;
    int ok = grad_matches(analytic, &s, &worst);
    if (!ok)
        fprintf(stderr, "    gradient %s: element %lld: analytic %.9g, finite differences %.9g\n", what,
                (long long)s.idx[worst], analytic[s.idx[worst]], s.fd[worst]);
    CHECK(ok);
    fd_sample_free(&s);
}

/* The comparison must be able to fail: a copy of a correct gradient with its
 * largest checked element changed by 10% must be refused, and the unchanged
 * one accepted. */
static inline void check_perturbed_grad_is_detected(const float *analytic, double *x, int64_t n, objective_fn f,
                                                    void *ctx)
{
    fd_sample s = fd_gradient(x, n, f, ctx);
    float *bad = floats_new(n);
    memcpy(bad, analytic, (size_t)n * sizeof *bad);
    int64_t big = 0, worst = 0;
    for (int64_t k = 0; k < s.count; k++)
        if (fabs(s.fd[k]) > fabs(s.fd[big]))
            big = k;
    bad[s.idx[big]] *= 1.1f;
    CHECK(grad_matches(analytic, &s, &worst));
    CHECK(!grad_matches(bad, &s, &worst));
    free(bad);
    fd_sample_free(&s);
}

#endif
