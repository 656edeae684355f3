/* test_topk.c: the AdaTopK codec (runtime/comm/topk.h) against an
 * independent reference: sort the indices by |x| key descending, then index
 * ascending, keep the first k.  Every comparison is bitwise (NaN included)
 * and a mismatch names n, k, the case and the first index that differs.
 */
#include "check.h"
#include "comm/topk.h"

#include <stdint.h>
#include <stdlib.h>

#define ERR 256

/* ---- data ---------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void)
{ /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static double rng_uniform(void) { return (double)(rng_next() >> 11) * (1.0 / 9007199254740992.0); }
static float rng_normal(void)
{
    double u = rng_uniform(), v = rng_uniform();
    return (float)(sqrt(-2 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

static uint32_t bits_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u;
}
static uint32_t key_of(float v) { return bits_of(v) & 0x7fffffffu; }

/* ---- reference ----------------------------------------------------------- */

static const float *ref_x;
static int cmp_rank(const void *a, const void *b)
{
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    uint32_t ki = key_of(ref_x[i]), kj = key_of(ref_x[j]);
    if (ki != kj)
        return ki > kj ? -1 : 1;
    return (i > j) - (i < j);
}

/* want = x masked to its top k by the reference rule. */
static void reference_mask(const float *x, int64_t n, int64_t k, float *want)
{
    int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    for (int64_t i = 0; i < n; i++)
        order[i] = i;
    ref_x = x;
    qsort(order, (size_t)n, sizeof *order, cmp_rank);
    memset(want, 0, (size_t)n * sizeof *want);
    for (int64_t j = 0; j < k; j++)
        want[order[j]] = x[order[j]];
    free(order);
}

/* Bitwise equality; on the first difference print the case and index. */
static int same_tensor(const float *want, const float *got, int64_t n, const char *what, int64_t k)
{
    for (int64_t i = 0; i < n; i++)
        if (bits_of(want[i]) != bits_of(got[i])) {
            fprintf(stderr, "  %s (n = %lld, k = %lld): element %lld: expected %.9g (0x%08x), found %.9g (0x%08x)\n",
                    what, (long long)n, (long long)k, (long long)i, want[i], bits_of(want[i]), got[i], bits_of(got[i]));
            return 0;
        }
    return 1;
}

static uint32_t format_of(const void *buf)
{
    uint32_t f;
    memcpy(&f, (const char *)buf + 4, 4);
    return f;
}

/* encode -> decode -> compare against the reference; checks size and count. */
static void roundtrip_case(const float *x, int64_t n, int64_t k, const char *what, topk_scratch *s)
{
    size_t cap = topk_encoded_bytes(n, k);
    unsigned char *buf = malloc(cap);
    float *got = malloc((size_t)(n ? n : 1) * sizeof *got), *want = malloc((size_t)(n ? n : 1) * sizeof *want);
    char err[ERR] = "";
    int64_t len = topk_encode(x, n, k, buf, cap, s);
    CHECK_INT((int64_t)cap, len);
    if (len == (int64_t)cap) {
        int rc = topk_decode(buf, (size_t)len, got, n, err, sizeof err);
        CHECK_INT(0, rc);
        if (rc != 0)
            fprintf(stderr, "  %s (n = %lld, k = %lld): %s\n", what, (long long)n, (long long)k, err);
        reference_mask(x, n, k, want);
        CHECK(same_tensor(want, got, n, what, k));
        /* exactly k kept: count what the format says was sent */
        int64_t hk;
        memcpy(&hk, buf + 16, 8);
        CHECK_INT(k, hk);
        if (format_of(buf) == TOPK_FORMAT_BITMAP) {
            int64_t pop = 0;
            for (int64_t i = 0; i < (n + 7) / 8; i++)
                pop += __builtin_popcount(buf[TOPK_HEADER_BYTES + i]);
            CHECK_INT(k, pop);
        }
    }
    free(buf);
    free(got);
    free(want);
}

/* ---- tests --------------------------------------------------------------- */

static void test_topk_count_rounds_half_up_and_clamps(void)
{
    CHECK_INT(0, topk_count(0, 0.5));
    CHECK_INT(0, topk_count(-3, 0.5));
    CHECK_INT(0, topk_count(100, 0));
    CHECK_INT(0, topk_count(100, -1));
    CHECK_INT(0, topk_count(100, NAN));
    CHECK_INT(1, topk_count(100, 1e-9)); /* density > 0 keeps at least one */
    CHECK_INT(1, topk_count(1, 0.01));
    CHECK_INT(1, topk_count(100, 0.01));
    CHECK_INT(3, topk_count(10, 0.25)); /* 2.5 rounds up */
    CHECK_INT(2, topk_count(10, 0.24));
    CHECK_INT(100, topk_count(100, 1));
    CHECK_INT(100, topk_count(100, 7.5));
    CHECK_INT(167772, topk_count(16777216, 0.01));
}

static void test_topk_keeps_exactly_k_matching_reference(void)
{
    static const int64_t ns[] = { 1,   2,   3,    7,    8,    9,    15,    16,    17,     31,    33,
                                  100, 257, 1000, 4095, 4096, 4097, 10007, 65536, 100003, 262147 };
    topk_scratch s;
    topk_scratch_init(&s);
    for (size_t a = 0; a < sizeof ns / sizeof *ns; a++) {
        int64_t n = ns[a];
        float *x = malloc((size_t)n * sizeof *x);
        for (int64_t i = 0; i < n; i++)
            x[i] = rng_normal();
        int64_t ks[] = { 0, 1, n - 1, n, n / 2, n / 32, n / 33, n / 100, n / 1000, n / 10, n / 4, 2, 3 };
        for (size_t b = 0; b < sizeof ks / sizeof *ks; b++) {
            if (ks[b] < 0 || ks[b] > n)
                continue;
            roundtrip_case(x, n, ks[b], "normal", &s);
        }
        free(x);
    }
    topk_scratch_free(&s);
}

static void test_topk_formats_chosen_by_size(void)
{
    /* n = 1000: ceil(n/8) = 125 bitmap bytes; index+value while 4k <= 125. */
    int64_t n = 1000;
    float x[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = rng_normal();
    topk_scratch s;
    topk_scratch_init(&s);
    unsigned char buf[24 + 8 * 1000];
    for (int64_t k = 0; k <= n; k += (k < 40 ? 1 : 97)) {
        int64_t len = topk_encode(x, n, k, buf, sizeof buf, &s);
        size_t index = 24 + 8 * (size_t)k, bitmap = 24 + 125 + 4 * (size_t)k;
        int want_index = 4 * k <= 125;
        CHECK_INT(want_index ? index : bitmap, len);
        CHECK_INT(len, topk_encoded_bytes(n, k));
        CHECK_INT(want_index ? TOPK_FORMAT_INDEX : TOPK_FORMAT_BITMAP, format_of(buf));
        CHECK_INT((int64_t)(index < bitmap ? index : bitmap), len); /* never the larger one */
    }
    /* both formats at the boundary, n not a multiple of 8 */
    n = 1001; /* ceil = 126: k = 31 index (124 <= 126), k = 32 bitmap */
    CHECK_INT(24 + 8 * 31, topk_encoded_bytes(n, 31));
    CHECK_INT(24 + 126 + 4 * 32, topk_encoded_bytes(n, 32));
    CHECK_INT(0, topk_encoded_bytes(n, n + 1));
    CHECK_INT(0, topk_encoded_bytes(n, -1));
    CHECK_INT(0, topk_encoded_bytes(TOPK_MAX_N + 1, 1));
    CHECK_INT(24, topk_encoded_bytes(0, 0));
    topk_scratch_free(&s);
}

static void test_topk_ties_keep_lowest_indices(void)
{
    topk_scratch s;
    topk_scratch_init(&s);
    float a[] = { 0.5f, 2, -2, 0.5f, 2, 0.5f, -0.5f };
    unsigned char buf[256];
    float got[7];
    char err[ERR];
    int64_t len = topk_encode(a, 7, 4, buf, sizeof buf, &s); /* three 2s, then the first 0.5 */
    CHECK_INT(0, topk_decode(buf, (size_t)len, got, 7, err, sizeof err));
    float want[] = { 0.5f, 2, -2, 0, 2, 0, 0 };
    CHECK(same_tensor(want, got, 7, "ties 0.5/2", 4));
    /* +0 and -0 tie: the lowest index wins */
    float z[] = { 0.0f, -0.0f, 1, -0.0f };
    len = topk_encode(z, 4, 2, buf, sizeof buf, &s);
    CHECK_INT(0, topk_decode(buf, (size_t)len, got, 4, err, sizeof err));
    float wz[] = { 0.0f, 0, 1, 0 };
    CHECK(same_tensor(wz, got, 4, "signed zeros", 2));
    /* many ties across the sample path: values in {-3..3} */
    int64_t n = 200003;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((int64_t)(rng_next() % 7) - 3);
    for (int64_t k = 1; k < n; k = k * 3 + 1)
        roundtrip_case(x, n, k, "ties in {-3..3}", &s);
    free(x);
    topk_scratch_free(&s);
}

static void test_topk_all_equal_keeps_first_k(void)
{
    topk_scratch s;
    topk_scratch_init(&s);
    int64_t n = 100000;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = (i & 1) ? -3.0f : 3.0f;
    int64_t ks[] = { 1, 1000, 3125, 3126, 50000, n - 1 };
    for (size_t j = 0; j < sizeof ks / sizeof *ks; j++)
        roundtrip_case(x, n, ks[j], "all |x| = 3", &s);
    for (int64_t i = 0; i < n; i++)
        x[i] = 0;
    roundtrip_case(x, n, 1000, "all zero", &s);
    free(x);
    topk_scratch_free(&s);
}

static void test_topk_nan_and_inf_rank_above_every_number(void)
{
    topk_scratch s;
    topk_scratch_init(&s);
    int64_t n = 50000;
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal() * 1e30f;
    x[40000] = NAN;
    x[7] = INFINITY;
    x[123] = -INFINITY;
    x[9999] = -NAN;
    for (int64_t k = 1; k <= 6; k++)
        roundtrip_case(x, n, k, "NaN/Inf", &s);
    roundtrip_case(x, n, 500, "NaN/Inf", &s);
    roundtrip_case(x, n, 20000, "NaN/Inf", &s);
    /* k = 4 keeps exactly the two NaNs and the two Infs */
    size_t cap = topk_encoded_bytes(n, 4);
    unsigned char *buf = malloc(cap);
    float *got = malloc((size_t)n * sizeof *got);
    char err[ERR];
    int64_t len = topk_encode(x, n, 4, buf, cap, &s);
    CHECK_INT(0, topk_decode(buf, (size_t)len, got, n, err, sizeof err));
    CHECK(isnan(got[40000]) && isnan(got[9999]));
    CHECK(got[7] == INFINITY && got[123] == -INFINITY);
    free(buf);
    free(got);
    free(x);
    topk_scratch_free(&s);
}

static void test_topk_sample_misled_falls_back_exactly(void)
{
    topk_scratch s;
    topk_scratch_init(&s);
    int64_t n = 4096 * 64; /* sample stride 64 */
    float *x = malloc((size_t)n * sizeof *x);
    /* sampled positions large, the rest small: the guess keeps too few */
    for (int64_t i = 0; i < n; i++)
        x[i] = (i % 64 == 0) ? 100 + rng_normal() : rng_normal();
    roundtrip_case(x, n, 2621, "sample too high", &s);
    roundtrip_case(x, n, 26214, "sample too high", &s);
    /* sampled positions tiny, the rest large: the guess keeps far too many */
    for (int64_t i = 0; i < n; i++)
        x[i] = (i % 64 == 0) ? 1e-6f * rng_normal() : 100 + rng_normal();
    roundtrip_case(x, n, 2621, "sample too low", &s);
    /* sorted, both ways, and a spike at the end */
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)i;
    roundtrip_case(x, n, 2621, "ascending", &s);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(n - i);
    roundtrip_case(x, n, 2621, "descending", &s);
    /* many candidates (more than 65536): radix selection among them */
    free(x);
    n = 1 << 20;
    x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal();
    roundtrip_case(x, n, n / 10, "radix among candidates", &s);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(rng_next() % 5);
    roundtrip_case(x, n, n / 10, "radix among candidates, ties", &s);
    /* high density: the radix path over x */
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal();
    roundtrip_case(x, n, n / 3, "radix path", &s);
    roundtrip_case(x, n, n - 5, "radix path", &s);
    free(x);
    topk_scratch_free(&s);
}

static void test_topk_error_feedback_conserves_sum(void)
{
    topk_scratch s;
    topk_scratch_init(&s);
    int64_t n = 20011, k = topk_count(n, 0.01), steps = 25;
    float *x = malloc((size_t)n * sizeof *x), *res = calloc((size_t)n, sizeof *res);
    float *r = malloc((size_t)n * sizeof *r), *sent = malloc((size_t)n * sizeof *sent);
    double *sum_x = calloc((size_t)n, sizeof *sum_x), *sum_sent = calloc((size_t)n, sizeof *sum_sent);
    size_t cap = topk_encoded_bytes(n, k);
    unsigned char *buf = malloc(cap);
    char err[ERR];
    int exact = 1;
    for (int64_t t = 0; t < steps; t++) {
        for (int64_t i = 0; i < n; i++) {
            x[i] = rng_normal();
            sum_x[i] += x[i];
            r[i] = x[i] + res[i];
        }
        int64_t len = topk_encode_with_residual(x, res, n, k, buf, cap, &s);
        CHECK_INT((int64_t)cap, len);
        CHECK_INT(0, topk_decode(buf, (size_t)len, sent, n, err, sizeof err));
        for (int64_t i = 0; i < n; i++) {
            sum_sent[i] += sent[i];
            /* residual = (x + residual) - decoded, exactly: 0 where sent, r elsewhere */
            float want = sent[i] != 0 ? 0.0f : r[i];
            if (bits_of(res[i]) != bits_of(want) && !(want == 0 && res[i] == 0)) {
                if (exact)
                    fprintf(stderr, "  step %lld element %lld: residual expected %.9g, found %.9g\n", (long long)t,
                            (long long)i, want, res[i]);
                exact = 0;
            }
        }
        /* what was sent is the top k of x + residual */
        float *want = malloc((size_t)n * sizeof *want);
        reference_mask(r, n, k, want);
        CHECK(same_tensor(want, sent, n, "error feedback step", k));
        free(want);
    }
    CHECK(exact);
    double worst = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(sum_sent[i] + res[i] - sum_x[i]);
        if (d > worst) {
            worst = d;
            at = i;
        }
    }
    if (worst > 1e-4)
        fprintf(stderr, "  element %lld: sent + residual - sum(x) = %g\n", (long long)at, worst);
    CHECK_NEAR(0, worst, 1e-4); /* 25 fp32 additions of N(0,1) values */
    /* bad arguments leave the residual alone */
    float before = res[0];
    CHECK_INT(-1, topk_encode_with_residual(x, res, n, k, buf, cap - 1, &s));
    CHECK(bits_of(before) == bits_of(res[0]));
    free(x);
    free(res);
    free(r);
    free(sent);
    free(sum_x);
    free(sum_sent);
    free(buf);
    topk_scratch_free(&s);
}

static void test_topk_encode_rejects_bad_arguments(void)
{
    topk_scratch s;
    topk_scratch_init(&s);
    float x[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
    unsigned char buf[256];
    CHECK_INT(-1, topk_encode(x, 10, 11, buf, sizeof buf, &s));
    CHECK_INT(-1, topk_encode(x, 10, -1, buf, sizeof buf, &s));
    CHECK_INT(-1, topk_encode(x, -1, 0, buf, sizeof buf, &s));
    CHECK_INT(-1, topk_encode(x, 10, 3, buf, topk_encoded_bytes(10, 3) - 1, &s));
    CHECK_INT((int64_t)topk_encoded_bytes(10, 3), topk_encode(x, 10, 3, buf, topk_encoded_bytes(10, 3), &s));
    topk_scratch_free(&s);
}

static void test_topk_scratch_reused_without_growing(void)
{
    topk_scratch s;
    topk_scratch_init(&s);
    int64_t n = 1 << 20, k = topk_count(n, 0.01);
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal();
    size_t cap = topk_encoded_bytes(n, k);
    unsigned char *buf = malloc(cap);
    CHECK_INT(0, topk_scratch_reserve(&s, n, k));
    uint32_t *idx = s.cand_idx, *hist = s.hist;
    int64_t cc = s.cand_cap;
    for (int t = 0; t < 3; t++) {
        for (int64_t i = 0; i < n; i++)
            x[i] = rng_normal();
        CHECK_INT((int64_t)cap, topk_encode(x, n, k, buf, cap, &s));
    }
    CHECK(idx == s.cand_idx && hist == s.hist);
    CHECK_INT(cc, s.cand_cap);
    free(x);
    free(buf);
    topk_scratch_free(&s);
}

/* Decode one mutated encoding: it must fail with `needle` in the reason. */
static void expect_reject(const void *buf, size_t len, int64_t n, const char *needle, const char *what)
{
    float *out = malloc((size_t)(n > 0 ? n : 1) * sizeof *out);
    char err[ERR] = "";
    int rc = topk_decode(buf, len, out, n, err, sizeof err);
    CHECK_INT(-1, rc);
    if (rc != -1)
        fprintf(stderr, "  %s: accepted\n", what);
    else if (!strstr(err, needle))
        fprintf(stderr, "  %s: reason \"%s\" lacks \"%s\"\n", what, err, needle);
    CHECK_CONTAINS(err, needle);
    CHECK(!strchr(err, '\n'));
    free(out);
}

static void test_topk_decode_rejects_malformed(void)
{
    topk_scratch s;
    topk_scratch_init(&s);
    int64_t n = 1003;
    float x[1003], out[1003];
    for (int i = 0; i < 1003; i++)
        x[i] = rng_normal();
    int64_t ks[] = { 10, 200 }; /* index format, bitmap format */
    unsigned char buf[24 + 8 * 1003], bad[24 + 8 * 1003 + 8];
    char err[ERR];
    for (int f = 0; f < 2; f++) {
        int64_t k = ks[f];
        int64_t len = topk_encode(x, n, k, buf, sizeof buf, &s);
        CHECK_INT(f ? TOPK_FORMAT_BITMAP : TOPK_FORMAT_INDEX, format_of(buf));
        /* every truncation */
        for (int64_t l = 0; l < len; l++)
            expect_reject(buf, (size_t)l, n, "topk:", "truncated");
        expect_reject(buf, 10, n, "shorter", "truncated header");
        /* one byte too many */
        memcpy(bad, buf, (size_t)len);
        bad[len] = 0;
        expect_reject(bad, (size_t)len + 1, n, "bytes, expected", "extended");
        /* wrong n, both ways */
        expect_reject(buf, (size_t)len, n - 1, "header says n", "wrong n");
        expect_reject(buf, (size_t)len, n + 1, "header says n", "wrong n");
        /* header fields */
        memcpy(bad, buf, (size_t)len);
        bad[0] ^= 1;
        expect_reject(bad, (size_t)len, n, "magic", "magic");
        memcpy(bad, buf, (size_t)len);
        bad[4] = 7;
        expect_reject(bad, (size_t)len, n, "format", "format");
        int64_t big = n + 1;
        memcpy(bad, buf, (size_t)len);
        memcpy(bad + 16, &big, 8);
        expect_reject(bad, (size_t)len, n, "outside", "k > n");
        big = -1;
        memcpy(bad + 16, &big, 8);
        expect_reject(bad, (size_t)len, n, "outside", "k < 0");
        /* the other format's id on this body: a size mismatch */
        memcpy(bad, buf, (size_t)len);
        bad[4] = f ? 1 : 2;
        expect_reject(bad, (size_t)len, n, "expected", "format swapped");
    }
    /* index format: not ascending, repeated, out of range */
    int64_t len = topk_encode(x, n, 10, buf, sizeof buf, &s);
    uint32_t i0, i1, oob = (uint32_t)n;
    memcpy(&i0, buf + 24, 4);
    memcpy(&i1, buf + 28, 4);
    memcpy(bad, buf, (size_t)len);
    memcpy(bad + 24, &i1, 4);
    memcpy(bad + 28, &i0, 4);
    expect_reject(bad, (size_t)len, n, "does not ascend", "swapped indices");
    memcpy(bad, buf, (size_t)len);
    memcpy(bad + 28, &i0, 4);
    expect_reject(bad, (size_t)len, n, "does not ascend", "repeated index");
    memcpy(bad, buf, (size_t)len);
    memcpy(bad + 24 + 4 * 9, &oob, 4);
    expect_reject(bad, (size_t)len, n, "out of range", "index = n");
    oob = 0xffffffffu;
    memcpy(bad, buf, (size_t)len);
    memcpy(bad + 24, &oob, 4);
    expect_reject(bad, (size_t)len, n, "out of range", "index = 2^32 - 1");
    /* bitmap format: popcount off by one either way, bits past n */
    len = topk_encode(x, n, 200, buf, sizeof buf, &s);
    int64_t nb = (n + 7) / 8;
    int64_t w = 0;
    while (buf[24 + w] == 0xff)
        w++;
    memcpy(bad, buf, (size_t)len);
    bad[24 + w] |= (unsigned char)(bad[24 + w] + 1); /* sets one more bit */
    expect_reject(bad, (size_t)len, n, "bits set", "popcount k+1");
    w = 0;
    while (buf[24 + w] == 0)
        w++;
    memcpy(bad, buf, (size_t)len);
    bad[24 + w] &= (unsigned char)(bad[24 + w] - 1); /* clears one bit */
    expect_reject(bad, (size_t)len, n, "bits set", "popcount k-1");
    memcpy(bad, buf, (size_t)len);
    bad[24 + nb - 1] |= 0x80; /* n = 1003: bits 3..7 of the last byte are past n */
    expect_reject(bad, (size_t)len, n, "past n", "bit past n");
    /* a rejected decode leaves out unchanged */
    for (int i = 0; i < 1003; i++)
        out[i] = 42;
    CHECK_INT(-1, topk_decode(bad, (size_t)len, out, n, err, sizeof err));
    CHECK(out[0] == 42 && out[1002] == 42);
    /* random byte flips: either rejected or a valid tensor; never a crash (ASan/UBSan watch) */
    int rejected = 0, accepted = 0;
    for (int t = 0; t < 20000; t++) {
        int64_t k = (t & 1) ? 200 : 10;
        len = topk_encode(x, n, k, buf, sizeof buf, &s);
        memcpy(bad, buf, (size_t)len);
        int flips = 1 + (int)(rng_next() % 3);
        for (int j = 0; j < flips; j++) {
            uint64_t r = rng_next();
            size_t at = (t % 4 == 0) ? (size_t)(r % 24) : (size_t)(r % (uint64_t)len);
            bad[at] ^= (unsigned char)(1u << ((r >> 32) % 8));
        }
        size_t l = (t % 7 == 0) ? (size_t)(rng_next() % (uint64_t)(len + 1)) : (size_t)len;
        if (topk_decode(bad, l, out, n, err, sizeof err) == 0)
            accepted++;
        else
            rejected++;
    }
    CHECK(rejected > 0 && accepted > 0); /* value-byte flips decode; structure flips do not */
    /* n = 0 and n = 1 */
    len = topk_encode(x, 0, 0, buf, sizeof buf, &s);
    CHECK_INT(24, len);
    CHECK_INT(0, topk_decode(buf, (size_t)len, out, 0, err, sizeof err));
    expect_reject(buf, (size_t)len, 1, "header says n", "n = 0 read as n = 1");
    topk_scratch_free(&s);
}

int main(void)
{
    test_topk_count_rounds_half_up_and_clamps();
    test_topk_keeps_exactly_k_matching_reference();
    test_topk_formats_chosen_by_size();
    test_topk_ties_keep_lowest_indices();
    test_topk_all_equal_keeps_first_k();
    test_topk_nan_and_inf_rank_above_every_number();
    test_topk_sample_misled_falls_back_exactly();
    test_topk_error_feedback_conserves_sum();
    test_topk_encode_rejects_bad_arguments();
    test_topk_scratch_reused_without_growing();
    test_topk_decode_rejects_malformed();
    CHECK_DONE();
}
