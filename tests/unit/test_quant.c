/* test_quant.c: the row-quantisation codec (runtime/comm/quant.h).
 *
 * Nearest rounding: every element within half a scale of x, and exactly the
 * closest of the row's levels (checked against a double-precision
 * reference).  Stochastic rounding: within one scale, and unbiased: the mean
 * of 4,000 encodings with different seeds is x to within 5 standard errors.
 * Both widths, rows not a multiple of anything (odd columns, 1 column, a
 * row longer than the encoder's 4,096-element chunk), zero rows, a row with
 * an Inf (decodes as NaN), the exact encoded size, and corrupt messages
 * (magic, bits, sizes, length, the unused 4-bit code) refused with a reason.
 */
#include "check.h"
#include "comm/quant.h"
#include "comm/quant_allreduce.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#define ERR 256

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static double rng_uniform(void)
{ /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

static void fill(float *x, int64_t n, double spread)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((rng_uniform() * 2 - 1) * spread * (1 + (i % 7)));
}

/* The row's scale as the encoder computes it. */
static double scale_of(const float *x, int64_t cols, int bits)
{
    float m = 0;
    for (int64_t j = 0; j < cols; j++)
        m = fmaxf(m, fabsf(x[j]));
    return m > 0 ? (double)(m / (bits == 8 ? 127.0f : 7.0f)) : 1.0;
}

static void roundtrip(int64_t rows, int64_t cols, int bits, quant_rounding rounding)
{
    int64_t n = rows * cols;
    float *x = malloc((size_t)(n ? n : 1) * 4), *y = malloc((size_t)(n ? n : 1) * 4);
    size_t cap = quant_encoded_bytes(rows, cols, bits);
    unsigned char *buf = malloc(cap);
    fill(x, n, 0.5);
    if (rows > 1)
        memset(x + cols, 0, (size_t)cols * 4); /* an all-zero row */
    int64_t len = quant_encode(x, rows, cols, bits, rounding, 42, buf, cap);
    CHECK_INT((int64_t)(QUANT_HEADER_BYTES + 4 * rows + (bits == 8 ? n : (n + 1) / 2)), len);
    char err[ERR] = "";
    CHECK_INT(0, quant_decode(buf, (size_t)len, y, n, err, sizeof err));
    int64_t worst = -1;
    double worst_err = 0;
    for (int64_t r = 0; r < rows; r++) {
        double s = scale_of(x + r * cols, cols, bits), bound = rounding == QUANT_NEAREST ? 0.5 : 1.0;
        for (int64_t j = 0; j < cols; j++) {
            int64_t i = r * cols + j;
            double e = fabs((double)y[i] - (double)x[i]) / s;
            if (rounding == QUANT_NEAREST) { /* the closest level, exactly */
                double level = nearbyint((double)x[i] / s);
                e = fmax(e, fabs((double)y[i] - (double)(float)(level * s)) > 1e-6 * s ? 1e9 : 0);
            }
            if (e > bound * (1 + 1e-5) && e > worst_err) {
                worst_err = e;
                worst = i;
            }
        }
    }
    if (worst >= 0)
        fprintf(stderr,
                "rows %lld cols %lld bits %d rounding %d: element %lld: x %.9g decoded %.9g (%.3g scales off)\n",
                (long long)rows, (long long)cols, bits, rounding, (long long)worst, x[worst], y[worst], worst_err);
    CHECK(worst < 0);
    if (rows > 1)
        for (int64_t j = 0; j < cols; j++)
            CHECK(y[cols + j] == 0.0f);
    free(x);
    free(y);
    free(buf);
}

/* Stochastic rounding is unbiased: the mean over seeds converges to x. */
static void unbiased(int bits)
{
    enum { COLS = 64, TRIALS = 4000 };
    float x[COLS], y[COLS];
    double sum[COLS] = { 0 };
    fill(x, COLS, 1.0);
    double s = scale_of(x, COLS, bits);
    unsigned char buf[512];
    char err[ERR];
    for (int t = 0; t < TRIALS; t++) {
        int64_t len = quant_encode(x, 1, COLS, bits, QUANT_STOCHASTIC, 1000 + (uint64_t)t, buf, sizeof buf);
        CHECK(len > 0 && quant_decode(buf, (size_t)len, y, COLS, err, sizeof err) == 0);
        for (int j = 0; j < COLS; j++)
            sum[j] += y[j];
    }
    int off = 0;
    for (int j = 0; j < COLS; j++) {
        double mean = sum[j] / TRIALS, se = 0.5 * s / sqrt(TRIALS); /* a rounding's sd is at most s / 2 */
        if (fabs(mean - x[j]) > 5 * se) {
            fprintf(stderr, "bits %d: element %d: x %.6g, mean of %d decodes %.6g\n", bits, j, x[j], TRIALS, mean);
            off++;
        }
    }
    CHECK_INT(0, off);
    /* The same seed gives the same bytes; another seed other bytes. */
    unsigned char a[512], b[512];
    int64_t la = quant_encode(x, 1, COLS, bits, QUANT_STOCHASTIC, 7, a, sizeof a);
    quant_encode(x, 1, COLS, bits, QUANT_STOCHASTIC, 7, b, sizeof b);
    CHECK(memcmp(a, b, (size_t)la) == 0);
    quant_encode(x, 1, COLS, bits, QUANT_STOCHASTIC, 8, b, sizeof b);
    CHECK(memcmp(a, b, (size_t)la) != 0);
}

static void broken_rows(void)
{
    float x[6] = { 1, 2, INFINITY, 4, 5, 6 }, y[6];
    unsigned char buf[128];
    char err[ERR];
    int64_t len = quant_encode(x, 2, 3, 8, QUANT_NEAREST, 0, buf, sizeof buf);
    CHECK_INT(0, quant_decode(buf, (size_t)len, y, 6, err, sizeof err));
    CHECK(isnan(y[0]) && isnan(y[1]) && isnan(y[2]));
    CHECK_NEAR(4.0, y[3], 6.0 / 127 / 2);
}

static void refuses(void)
{
    float x[10], y[10];
    fill(x, 10, 1);
    unsigned char buf[128], bad[128];
    char err[ERR];
    int64_t len = quant_encode(x, 2, 5, 4, QUANT_STOCHASTIC, 3, buf, sizeof buf);
    CHECK(len > 0);
    CHECK_INT(-1, quant_encode(x, 2, 5, 6, QUANT_NEAREST, 0, buf, sizeof buf)); /* bits */
    CHECK_INT(-1, quant_encode(x, 2, 5, 8, QUANT_NEAREST, 0, buf, 20));         /* cap */
    memcpy(bad, buf, (size_t)len);
    bad[0] ^= 1;
    CHECK_INT(-1, quant_decode(bad, (size_t)len, y, 10, err, sizeof err));
    CHECK_CONTAINS(err, "bad magic");
    memcpy(bad, buf, (size_t)len);
    bad[4] = 5;
    CHECK_INT(-1, quant_decode(bad, (size_t)len, y, 10, err, sizeof err));
    CHECK_CONTAINS(err, "does not describe");
    CHECK_INT(-1, quant_decode(buf, (size_t)len, y, 12, err, sizeof err)); /* the receiver expects 12 */
    CHECK_CONTAINS(err, "does not describe");
    CHECK_INT(-1, quant_decode(buf, (size_t)len - 1, y, 10, err, sizeof err));
    CHECK_CONTAINS(err, "expected");
    CHECK_INT(-1, quant_decode(buf, 10, y, 10, err, sizeof err));
    CHECK_CONTAINS(err, "header");
    memcpy(bad, buf, (size_t)len);
    bad[QUANT_HEADER_BYTES + 8] &= 0xf0; /* element 0's nibble: the unused code 0 */
    CHECK_INT(-1, quant_decode(bad, (size_t)len, y, 10, err, sizeof err));
    CHECK_CONTAINS(err, "unused");
}

/* The quantised all-reduce's feedback as named arrays (feedback.h), the
 * way checkpoints carry it: listed by name and length, copied out, and
 * taken back into a fresh state; an array of another length is not. */
static void feedback_travels_by_name(void)
{
    char err[256];
    rt_quant_feedback a = { 0 }, b = { 0 }, c = { 0 };
    CHECK_INT(0, rt_quant_feedback_prepare(&a, 1000, 3, 8, err, sizeof err));
    CHECK(a.chunk == 1000 / 3 + 1);
    for (int64_t i = 0; i < a.n; i++)
        a.mine[i] = (float)i * 0.25f;
    for (int64_t i = 0; i < a.chunk; i++)
        a.owned[i] = -(float)i;
    rt_feedback_arrays listed = { 0 }, saved = { .owns = 1 };
    CHECK_INT(0, rt_quant_feedback_list(&a, 42, &listed));
    CHECK_INT(2, listed.n);
    CHECK_STR("fusion.feedback.allreduce.42.mine", listed.a[0].name);
    CHECK_STR("fusion.feedback.allreduce.42.owned", listed.a[1].name);
    CHECK(listed.a[0].n == 1000 && listed.a[1].n == a.chunk);
    for (int i = 0; i < listed.n; i++) { /* what a checkpoint holds: copies */
        float *copy = malloc((size_t)listed.a[i].n * sizeof *copy);
        memcpy(copy, listed.a[i].data, (size_t)listed.a[i].n * sizeof *copy);
        CHECK_INT(0, rt_feedback_add(&saved, listed.a[i].name, copy, listed.a[i].n));
    }
    CHECK_INT(0, rt_quant_feedback_prepare(&b, 1000, 3, 8, err, sizeof err));
    rt_quant_feedback_restore(&b, 42, &saved);
    CHECK(memcmp(a.mine, b.mine, 1000 * sizeof *a.mine) == 0);
    CHECK(memcmp(a.owned, b.owned, (size_t)a.chunk * sizeof *a.owned) == 0);
    /* Another bucket's size (another compile): nothing is taken. */
    CHECK_INT(0, rt_quant_feedback_prepare(&c, 999, 3, 8, err, sizeof err));
    rt_quant_feedback_restore(&c, 42, &saved);
    CHECK(c.mine[5] == 0.0f && c.owned[5] == 0.0f); /* its owned has the same length: not taken alone */
    /* Another tag: nothing either. */
    rt_quant_feedback_free(&c);
    CHECK_INT(0, rt_quant_feedback_prepare(&c, 1000, 3, 8, err, sizeof err));
    rt_quant_feedback_restore(&c, 43, &saved);
    CHECK(c.mine[5] == 0.0f);
    /* Never used: nothing to list. */
    rt_quant_feedback unused = { 0 };
    rt_feedback_arrays none = { 0 };
    CHECK_INT(0, rt_quant_feedback_list(&unused, 7, &none));
    CHECK_INT(0, none.n);
    rt_feedback_arrays_free(&listed);
    rt_feedback_arrays_free(&saved);
    rt_quant_feedback_free(&a);
    rt_quant_feedback_free(&b);
    rt_quant_feedback_free(&c);
}

int main(void)
{
    const int64_t shapes[][2] = { { 1, 1 }, { 3, 5 }, { 7, 129 }, { 256, 128 }, { 2, 5000 }, { 5, 1 }, { 0, 8 } };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int bits = 4; bits <= 8; bits += 4) {
            roundtrip(shapes[i][0], shapes[i][1], bits, QUANT_NEAREST);
            roundtrip(shapes[i][0], shapes[i][1], bits, QUANT_STOCHASTIC);
        }
    unbiased(8);
    unbiased(4);
    broken_rows();
    refuses();
    feedback_travels_by_name();
    CHECK_DONE();
}
