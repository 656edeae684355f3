/* test_units.c: quantities with units ("20Mbps", "40ms", "16GiB") parse to
 * base units, and every malformed one is refused with a message that says
 * what was expected. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "units.h"

/* Parse must succeed with `expected` (relative tolerance 1e-12). */
#define CHECK_PARSES(text, kind, expected)                             \
    do {                                                               \
        double v_ = -1;                                                \
        char why_[512] = "";                                           \
        int rc_ = units_parse((text), (kind), &v_, why_, sizeof why_); \
        CHECK_INT(0, rc_);                                             \
        if (rc_ != 0)                                                  \
            fprintf(stderr, "    '%s': %s\n", (text), why_);           \
        CHECK_NEAR((expected), v_, fabs(expected) * 1e-12);            \
    } while (0)

/* Parse must fail, leave the output alone, and say `needle`. */
#define CHECK_REFUSED(text, kind, needle)                                   \
    do {                                                                    \
        double v_ = 42;                                                     \
        char why_[512] = "";                                                \
        CHECK_INT(-1, units_parse((text), (kind), &v_, why_, sizeof why_)); \
        CHECK_NEAR(42.0, v_, 0);                                            \
        CHECK_CONTAINS(why_, (needle));                                     \
    } while (0)

static void test_units_bandwidth_bits_and_bytes(void)
{
    CHECK_PARSES("20Mbps", UNIT_BANDWIDTH, 20e6 / 8);
    CHECK_PARSES("20 Mbps", UNIT_BANDWIDTH, 20e6 / 8);
    CHECK_PARSES("1bps", UNIT_BANDWIDTH, 1.0 / 8);
    CHECK_PARSES("8Kbps", UNIT_BANDWIDTH, 1000.0);
    CHECK_PARSES("0.524Gbps", UNIT_BANDWIDTH, 0.524e9 / 8);
    CHECK_PARSES("1.12 Gbps", UNIT_BANDWIDTH, 1.12e9 / 8);
    CHECK_PARSES("2Tbps", UNIT_BANDWIDTH, 2e12 / 8);
    CHECK_PARSES("900GB/s", UNIT_BANDWIDTH, 900e9);
    CHECK_PARSES("5B/s", UNIT_BANDWIDTH, 5.0);
    CHECK_PARSES("3KB/s", UNIT_BANDWIDTH, 3e3);
    CHECK_PARSES("10MB/s", UNIT_BANDWIDTH, 10e6);
    CHECK_PARSES("1TB/s", UNIT_BANDWIDTH, 1e12);
    CHECK_PARSES("1KiB/s", UNIT_BANDWIDTH, 1024.0);
    CHECK_PARSES("1MiB/s", UNIT_BANDWIDTH, 1048576.0);
    CHECK_PARSES("2GiB/s", UNIT_BANDWIDTH, 2.0 * 1073741824.0);
    CHECK_PARSES("1TiB/s", UNIT_BANDWIDTH, 1099511627776.0);
    /* accepted spellings: b/s for bits, SI lower-case kilo */
    CHECK_PARSES("100Mb/s", UNIT_BANDWIDTH, 100e6 / 8);
    CHECK_PARSES("64kbps", UNIT_BANDWIDTH, 64e3 / 8);
    CHECK_PARSES("64kB/s", UNIT_BANDWIDTH, 64e3);
}

static void test_units_time_size_flops(void)
{
    CHECK_PARSES("40ms", UNIT_TIME, 0.040);
    CHECK_PARSES("100us", UNIT_TIME, 100e-6);
    CHECK_PARSES("5ns", UNIT_TIME, 5e-9);
    CHECK_PARSES("1.5s", UNIT_TIME, 1.5);
    CHECK_PARSES("2e3us", UNIT_TIME, 2e-3);
    CHECK_PARSES("16GiB", UNIT_SIZE, 16.0 * 1073741824.0);
    CHECK_PARSES("16GB", UNIT_SIZE, 16e9);
    CHECK_PARSES("512B", UNIT_SIZE, 512.0);
    CHECK_PARSES("4KiB", UNIT_SIZE, 4096.0);
    CHECK_PARSES("4KB", UNIT_SIZE, 4000.0);
    CHECK_PARSES("3MiB", UNIT_SIZE, 3.0 * 1048576.0);
    CHECK_PARSES("1TiB", UNIT_SIZE, 1099511627776.0);
    CHECK_PARSES("2TB", UNIT_SIZE, 2e12);
    CHECK_PARSES("125TFLOPS", UNIT_FLOPS, 125e12);
    CHECK_PARSES("50GFLOPS", UNIT_FLOPS, 50e9);
    CHECK_PARSES("50 GFLOP/s", UNIT_FLOPS, 50e9);
    CHECK_PARSES("1PFLOPS", UNIT_FLOPS, 1e15);
    CHECK_PARSES("7KFLOPS", UNIT_FLOPS, 7e3);
    CHECK_PARSES("7MFLOP/s", UNIT_FLOPS, 7e6);
    CHECK_PARSES("3FLOPS", UNIT_FLOPS, 3.0);
    CHECK_PARSES("59.5TFLOPS", UNIT_FLOPS, 59.5e12);
}

static void test_units_number_syntax(void)
{
    CHECK_PARSES(".5s", UNIT_TIME, 0.5);
    CHECK_PARSES("5.s", UNIT_TIME, 5.0);
    CHECK_PARSES("0.05s", UNIT_TIME, 0.05);
    CHECK_PARSES("1.2E-3s", UNIT_TIME, 1.2e-3);
    CHECK_PARSES("1e+2ms", UNIT_TIME, 0.1);
    CHECK_PARSES("000100ms", UNIT_TIME, 0.1);
    CHECK_PARSES("1.000000000000000000000000000000000000000000000001s", UNIT_TIME, 1.0);
    CHECK_PARSES("123456789012345678901234567890123456789012345678901234567890B", UNIT_SIZE, 1.2345678901234568e59);
    /* "2e" is not an exponent: the 'e' starts the unit */
    CHECK_REFUSED("2es", UNIT_TIME, "unknown unit 'es'");

    double v = 0;
    char why[256];
    CHECK_INT(0, units_parse_number("1.5", &v, why, sizeof why));
    CHECK_NEAR(1.5, v, 0);
    CHECK_INT(0, units_parse_number("2e3", &v, why, sizeof why));
    CHECK_NEAR(2000.0, v, 0);
    CHECK_INT(-1, units_parse_number("2x", &v, why, sizeof why));
    CHECK_CONTAINS(why, "unexpected 'x'");
    CHECK_INT(-1, units_parse_number("0", &v, why, sizeof why));
    CHECK_CONTAINS(why, "greater than zero");
}

static void test_units_refuses_with_reason(void)
{
    CHECK_REFUSED("20Mbit", UNIT_BANDWIDTH,
                  "unknown unit 'Mbit' for a bandwidth: expected one of bps, Kbps, Mbps, Gbps, Tbps, B/s, KB/s, "
                  "MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s");
    CHECK_REFUSED("20", UNIT_BANDWIDTH, "missing unit after '20': expected one of bps");
    CHECK_REFUSED("20 ", UNIT_BANDWIDTH, "missing unit");
    CHECK_REFUSED("20  Mbps", UNIT_BANDWIDTH, "at most one space");
    CHECK_REFUSED("20\tMbps", UNIT_BANDWIDTH, "at most one space");
    CHECK_REFUSED("20Mbps x", UNIT_BANDWIDTH, "unexpected ' x'");
    CHECK_REFUSED("20Mbps,", UNIT_BANDWIDTH, "unexpected ','");
    CHECK_REFUSED("20%", UNIT_BANDWIDTH, "expected a unit after the number");
    CHECK_REFUSED("-5Gbps", UNIT_BANDWIDTH, "negative");
    CHECK_REFUSED("0Gbps", UNIT_BANDWIDTH, "greater than zero");
    CHECK_REFUSED("0.000ms", UNIT_TIME, "greater than zero");
    CHECK_REFUSED("inf Gbps", UNIT_BANDWIDTH, "not a finite number");
    CHECK_REFUSED("NaNs", UNIT_TIME, "not a finite number");
    CHECK_REFUSED("1e400Gbps", UNIT_BANDWIDTH, "too large");
    CHECK_REFUSED("1e308TB", UNIT_SIZE, "too large"); /* finite number, infinite after scaling */
    CHECK_REFUSED("1e-400s", UNIT_TIME, "too small");
    CHECK_REFUSED("1e-320ns", UNIT_TIME, "too small");
    CHECK_REFUSED("", UNIT_TIME, "empty value: expected a time such as '40ms'");
    CHECK_REFUSED(NULL, UNIT_SIZE, "empty value");
    CHECK_REFUSED(" 5ms", UNIT_TIME, "starts with a space");
    CHECK_REFUSED("fast", UNIT_BANDWIDTH, "does not start with a number");
    CHECK_REFUSED("0x10Gbps", UNIT_BANDWIDTH, "unknown unit 'x'");
    CHECK_REFUSED("+5ms", UNIT_TIME, "does not start with a number");
    /* case matters, and the message says so */
    CHECK_REFUSED("20mbps", UNIT_BANDWIDTH, "case-sensitive: did you mean 'Mbps' (bits)?");
    CHECK_REFUSED("10gb/s", UNIT_BANDWIDTH, "did you mean 'GB/s' (bytes) or 'Gb/s' (bits)?");
    CHECK_REFUSED("5MS", UNIT_TIME, "did you mean 'ms'?");
    CHECK_REFUSED("16gib", UNIT_SIZE, "did you mean 'GiB'?");
    /* a unit of another kind */
    CHECK_REFUSED("40ms", UNIT_BANDWIDTH, "'40ms' is a time, but a bandwidth was expected: use one of bps");
    CHECK_REFUSED("16GB/s", UNIT_SIZE, "is a bandwidth, but a size was expected");
    CHECK_REFUSED("900GB", UNIT_BANDWIDTH, "'GB' is a size, but a bandwidth was expected (did you mean 'GB/s'?)");
    CHECK_REFUSED("10Gbps", UNIT_FLOPS, "is a bandwidth, but a compute rate was expected");
    CHECK_REFUSED("5GFLOP", UNIT_FLOPS, "did you mean 'GFLOP/s'?");
    CHECK_REFUSED("5us", UNIT_SIZE, "is a time, but a size was expected");

    /* why may be NULL */
    double v = 7;
    CHECK_INT(-1, units_parse("x", UNIT_TIME, &v, NULL, 0));
    CHECK_NEAR(7.0, v, 0);
    /* a short buffer truncates, never overflows */
    char tiny[8];
    CHECK_INT(-1, units_parse("20Mbit", UNIT_BANDWIDTH, &v, tiny, sizeof tiny));
    CHECK_INT(7, (int)strlen(tiny));
}

static void test_units_format_round_trips(void)
{
    char buf[64];
    CHECK_STR("20 Mbps", units_format(20e6 / 8, UNIT_BANDWIDTH, buf, sizeof buf));
    CHECK_STR("1.12 Gbps", units_format(1.12e9 / 8, UNIT_BANDWIDTH, buf, sizeof buf));
    CHECK_STR("40 ms", units_format(0.040, UNIT_TIME, buf, sizeof buf));
    CHECK_STR("2 us", units_format(2e-6, UNIT_TIME, buf, sizeof buf));
    CHECK_STR("16 GiB", units_format(16.0 * 1073741824.0, UNIT_SIZE, buf, sizeof buf));
    CHECK_STR("125 TFLOPS", units_format(125e12, UNIT_FLOPS, buf, sizeof buf));
    CHECK_STR("inf", units_format(INFINITY, UNIT_BANDWIDTH, buf, sizeof buf));
    CHECK_STR("0.5 bps", units_format(1.0 / 16, UNIT_BANDWIDTH, buf, sizeof buf));

    const struct {
        double v;
        unit_kind k;
    } cases[] = {
        { 3.3e9, UNIT_BANDWIDTH }, { 7.77e-5, UNIT_TIME },  { 123456789.0, UNIT_SIZE }, { 9.87e14, UNIT_FLOPS },
        { 2.5e16, UNIT_FLOPS },    { 1.0, UNIT_BANDWIDTH }, { 2e-10, UNIT_TIME },       { 600.0, UNIT_TIME },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double back = -1;
        char why[256] = "";
        units_format(cases[i].v, cases[i].k, buf, sizeof buf);
        CHECK_INT(0, units_parse(buf, cases[i].k, &back, why, sizeof why));
        CHECK_NEAR(cases[i].v, back, cases[i].v * 1e-3);
    }
    CHECK_CONTAINS(units_expected(UNIT_TIME), "ns, us, ms, s");
    CHECK_STR("a bandwidth", units_kind_name(UNIT_BANDWIDTH));
}

int main(void)
{
    test_units_bandwidth_bits_and_bytes();
    test_units_time_size_flops();
    test_units_number_syntax();
    test_units_refuses_with_reason();
    test_units_format_round_trips();
    CHECK_DONE();
}
