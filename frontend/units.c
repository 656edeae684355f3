/* units.c: parse "20Mbps", "40ms", "16GiB", "125TFLOPS" into base units
 * (see units.h).  Deliberately strict: a unit that is almost right is an
 * error with a suggestion, never a guess, because a bits/bytes mix-up is a
 * silent 8x error in every schedule built on it.
 */
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    double scale; /* base units per one of this unit */
    int listed;   /* 1: shown in "expected one of"; 0: accepted alias */
} unit_def;

#define KILO 1e3
#define MEGA 1e6
#define GIGA 1e9
#define TERA 1e12
#define PETA 1e15
#define KIBI 1024.0
#define MEBI (1024.0 * 1024.0)
#define GIBI (1024.0 * 1024.0 * 1024.0)
#define TEBI (1024.0 * 1024.0 * 1024.0 * 1024.0)

static const unit_def bandwidth_units[] = {
    { "bps", 1.0 / 8, 1 },   { "Kbps", KILO / 8, 1 }, { "Mbps", MEGA / 8, 1 }, { "Gbps", GIGA / 8, 1 },
    { "Tbps", TERA / 8, 1 }, { "B/s", 1.0, 1 },       { "KB/s", KILO, 1 },     { "MB/s", MEGA, 1 },
    { "GB/s", GIGA, 1 },     { "TB/s", TERA, 1 },     { "KiB/s", KIBI, 1 },    { "MiB/s", MEBI, 1 },
    { "GiB/s", GIBI, 1 },    { "TiB/s", TEBI, 1 },    { "b/s", 1.0 / 8, 0 },   { "Kb/s", KILO / 8, 0 },
    { "Mb/s", MEGA / 8, 0 }, { "Gb/s", GIGA / 8, 0 }, { "Tb/s", TERA / 8, 0 }, { "kbps", KILO / 8, 0 },
    { "kb/s", KILO / 8, 0 }, { "kB/s", KILO, 0 },     { NULL, 0, 0 },
};

static const unit_def time_units[] = {
    { "ns", 1e-9, 1 }, { "us", 1e-6, 1 }, { "ms", 1e-3, 1 }, { "s", 1.0, 1 }, { NULL, 0, 0 },
};

static const unit_def size_units[] = {
    { "B", 1.0, 1 },    { "KB", KILO, 1 },  { "MB", MEGA, 1 },  { "GB", GIGA, 1 },
    { "TB", TERA, 1 },  { "KiB", KIBI, 1 }, { "MiB", MEBI, 1 }, { "GiB", GIBI, 1 },
    { "TiB", TEBI, 1 }, { "kB", KILO, 0 },  { NULL, 0, 0 },
};

static const unit_def flops_units[] = {
    { "FLOPS", 1.0, 1 },    { "KFLOPS", KILO, 1 },  { "MFLOPS", MEGA, 1 },  { "GFLOPS", GIGA, 1 },
    { "TFLOPS", TERA, 1 },  { "PFLOPS", PETA, 1 },  { "FLOP/s", 1.0, 1 },   { "KFLOP/s", KILO, 1 },
    { "MFLOP/s", MEGA, 1 }, { "GFLOP/s", GIGA, 1 }, { "TFLOP/s", TERA, 1 }, { "PFLOP/s", PETA, 1 },
    { "kFLOPS", KILO, 0 },  { "kFLOP/s", KILO, 0 }, { NULL, 0, 0 },
};

static const struct {
    const unit_def *units;
    const char *name;     /* "a bandwidth" */
    const char *expected; /* the listed units, for messages */
    const char *example;
} kinds[UNIT_KIND_COUNT] = {
    [UNIT_BANDWIDTH] = { bandwidth_units, "a bandwidth",
                         "bps, Kbps, Mbps, Gbps, Tbps, B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s",
                         "10Gbps" },
    [UNIT_TIME] = { time_units, "a time", "ns, us, ms, s", "40ms" },
    [UNIT_SIZE] = { size_units, "a size", "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB", "16GiB" },
    [UNIT_FLOPS] = { flops_units, "a compute rate",
                     "FLOPS, KFLOPS, MFLOPS, GFLOPS, TFLOPS, PFLOPS (or FLOP/s, KFLOP/s, ..., PFLOP/s)", "125TFLOPS" },
};

const char *units_kind_name(unit_kind kind)
{
    return (unsigned)kind < UNIT_KIND_COUNT ? kinds[kind].name : "a quantity";
}

const char *units_expected(unit_kind kind) { return (unsigned)kind < UNIT_KIND_COUNT ? kinds[kind].expected : ""; }

static int fail(char *why, size_t why_size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t why_size, const char *fmt, ...)
{
    if (why && why_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, why_size, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static const unit_def *find_unit(const unit_def *table, const char *name, size_t len)
{
    for (const unit_def *u = table; u->name; u++)
        if (strlen(u->name) == len && memcmp(u->name, name, len) == 0)
            return u;
    return NULL;
}

/* The number at the start of s, per the grammar in units.h.  Returns the
 * characters it spans (0: no number there) and its value in *out, converted
 * through a digits-and-exponent string so that strtod's locale (its decimal
 * point) cannot change the result.  *range is set to +1 on overflow, -1 when
 * a non-zero number underflows to zero, else 0. */
static size_t scan_number(const char *s, double *out, int *range)
{
    enum { MAX_DIGITS = 40 };
    char canon[MAX_DIGITS + 32];
    size_t n_canon = 0, i = 0;
    long exp10 = 0; /* power of ten to apply to the kept digits */
    int any_digit = 0, nonzero = 0;

    for (int in_fraction = 0;; i++) {
        char ch = s[i];
        if (ch == '.' && !in_fraction) {
            in_fraction = 1;
            continue;
        }
        if (!isdigit((unsigned char)ch))
            break;
        any_digit = 1;
        if (ch != '0')
            nonzero = 1;
        if (!nonzero) /* a leading zero: contributes nothing */
            exp10 -= in_fraction;
        else if (n_canon < MAX_DIGITS) {
            canon[n_canon++] = ch;
            exp10 -= in_fraction;
        } else
            exp10 += !in_fraction; /* digits past the precision kept */
    }
    if (!any_digit)
        return 0;
    if (s[i] == 'e' || s[i] == 'E') { /* an exponent only if digits follow */
        size_t j = i + 1;
        int neg = 0;
        if (s[j] == '+' || s[j] == '-')
            neg = s[j++] == '-';
        if (isdigit((unsigned char)s[j])) {
            long e = 0;
            for (; isdigit((unsigned char)s[j]); j++)
                if (e < 100000)
                    e = e * 10 + (s[j] - '0');
            exp10 += neg ? -e : e;
            i = j;
        }
    }
    *range = 0;
    if (!nonzero) {
        *out = 0.0;
        return i;
    }
    snprintf(canon + n_canon, sizeof canon - n_canon, "e%ld", exp10);
    errno = 0;
    double v = strtod(canon, NULL);
    if (isinf(v) || (errno == ERANGE && v > 1.0))
        *range = 1;
    else if (v == 0.0)
        *range = -1;
    *out = v;
    return i;
}

/* Checks shared by units_parse and units_parse_number: what comes before
 * the number.  Returns the number's length, or 0 with why filled. */
static size_t number_part(const char *text, const char *what, const char *example, double *value, int *range, char *why,
                          size_t why_size)
{
    if (!text || !*text) {
        fail(why, why_size, "empty value: expected %s such as '%s'", what, example);
        return 0;
    }
    if (isspace((unsigned char)text[0])) {
        fail(why, why_size, "'%s' starts with a space: expected %s such as '%s'", text, what, example);
        return 0;
    }
    size_t n = scan_number(text, value, range);
    if (n > 0)
        return n;
    if (text[0] == '-' && scan_number(text + 1, value, range) > 0)
        fail(why, why_size, "'%s' is negative: %s must be greater than zero", text, what);
    else if (strncasecmp(text, "inf", 3) == 0 || strncasecmp(text, "nan", 3) == 0)
        fail(why, why_size, "'%s' is not a finite number: expected %s such as '%s'", text, what, example);
    else
        fail(why, why_size, "'%s' does not start with a number: expected %s such as '%s'", text, what, example);
    return 0;
}

static int check_value(const char *text, double v, int range, const char *what, char *why, size_t why_size)
{
    if (range > 0 || !isfinite(v))
        return fail(why, why_size, "'%s' is too large for %s", text, what);
    if (range < 0)
        return fail(why, why_size, "'%s' is too small for %s: it rounds to zero", text, what);
    if (!(v > 0.0))
        return fail(why, why_size, "'%s' is zero: %s must be greater than zero", text, what);
    return 0;
}

int units_parse_number(const char *text, double *out, char *why, size_t why_size)
{
    double v = 0;
    int range = 0;
    size_t n = number_part(text, "a number", "1.5", &v, &range, why, why_size);
    if (n == 0)
        return -1;
    if (text[n] != '\0')
        return fail(why, why_size, "unexpected '%s' after the number in '%s': expected a plain number such as '1.5'",
                    text + n, text);
    if (check_value(text, v, range, "a number", why, why_size) != 0)
        return -1;
    *out = v;
    return 0;
}

/* Units of `kind` equal to name[0..len) but for case, as "'Mbps'" or
 * "'Gb/s' or 'GB/s'", into buf.  Returns how many matched. */
static int case_suggestions(unit_kind kind, const char *name, size_t len, char *buf, size_t size)
{
    int found = 0;
    size_t used = 0;
    buf[0] = '\0';
    for (const unit_def *u = kinds[kind].units; u->name; u++) {
        if (strlen(u->name) != len || strncasecmp(u->name, name, len) != 0)
            continue;
        const char *what = kind != UNIT_BANDWIDTH ? "" : strchr(u->name, 'b') ? " (bits)" : " (bytes)";
        int w = snprintf(buf + used, size - used, "%s'%s'%s", found ? " or " : "", u->name, what);
        if (w < 0 || (size_t)w >= size - used)
            break;
        used += (size_t)w;
        found++;
    }
    return found;
}

/* A unit's characters: letters and '/'. */
static int is_unit_char(char ch) { return isalpha((unsigned char)ch) || ch == '/'; }

int units_parse(const char *text, unit_kind kind, double *out, char *why, size_t why_size)
{
    if ((unsigned)kind >= UNIT_KIND_COUNT)
        return fail(why, why_size, "internal error: unknown unit kind %d", (int)kind);
    const char *what = kinds[kind].name, *expected = kinds[kind].expected;
    double v = 0;
    int range = 0;
    size_t n = number_part(text, what, kinds[kind].example, &v, &range, why, why_size);
    if (n == 0)
        return -1;

    const char *unit = text + n;
    if (*unit == ' ')
        unit++;
    if (*unit == '\0')
        return fail(why, why_size, "missing unit after '%.*s': expected one of %s", (int)n, text, expected);
    if (isspace((unsigned char)*unit))
        return fail(why, why_size, "'%s': expected at most one space between the number and the unit", text);
    size_t len = 0;
    while (is_unit_char(unit[len]))
        len++;
    if (len == 0)
        return fail(why, why_size, "'%s': expected a unit after the number, found '%s': one of %s", text, unit,
                    expected);

    const unit_def *u = find_unit(kinds[kind].units, unit, len);
    if (!u) {
        char slash_s[64];
        snprintf(slash_s, sizeof slash_s, "%.*s/s", (int)(len < 40 ? len : 40), unit);
        int has_slash_s = len < 40 && find_unit(kinds[kind].units, slash_s, strlen(slash_s));
        for (int k = 0; k < UNIT_KIND_COUNT; k++) {
            if (k == (int)kind || !find_unit(kinds[k].units, unit, len))
                continue;
            if (has_slash_s)
                return fail(why, why_size, "'%s': '%.*s' is %s, but %s was expected (did you mean '%s'?)", text,
                            (int)len, unit, kinds[k].name, what, slash_s);
            return fail(why, why_size, "'%s' is %s, but %s was expected: use one of %s", text, kinds[k].name, what,
                        expected);
        }
        if (has_slash_s)
            return fail(why, why_size, "unknown unit '%.*s' for %s (did you mean '%s'?)", (int)len, unit, what,
                        slash_s);
        char alike[128];
        if (case_suggestions(kind, unit, len, alike, sizeof alike) > 0)
            return fail(why, why_size, "unknown unit '%.*s' for %s (units are case-sensitive: did you mean %s?)",
                        (int)len, unit, what, alike);
        return fail(why, why_size, "unknown unit '%.*s' for %s: expected one of %s", (int)len, unit, what, expected);
    }
    if (unit[len] != '\0')
        return fail(why, why_size, "unexpected '%s' after '%.*s': expected a number and a unit only", unit + len,
                    (int)(unit + len - text), text);

    double base = v * u->scale;
    if (range == 0 && v > 0 && isfinite(v) && base == 0.0)
        range = -1;
    if (check_value(text, base, range, what, why, why_size) != 0)
        return -1;
    *out = base;
    return 0;
}

typedef struct {
    double scale;
    const char *name;
} display_unit;

char *units_format(double value, unit_kind kind, char *buf, size_t size)
{
    static const display_unit bw[] = { { TERA / 8, "Tbps" }, { GIGA / 8, "Gbps" }, { MEGA / 8, "Mbps" },
                                       { KILO / 8, "Kbps" }, { 1.0 / 8, "bps" },   { 0, NULL } },
                              tm[] = { { 1.0, "s" }, { 1e-3, "ms" }, { 1e-6, "us" }, { 1e-9, "ns" }, { 0, NULL } },
                              sz[] = { { TEBI, "TiB" }, { GIBI, "GiB" }, { MEBI, "MiB" },
                                       { KIBI, "KiB" }, { 1.0, "B" },    { 0, NULL } },
                              fl[] = { { PETA, "PFLOPS" }, { TERA, "TFLOPS" }, { GIGA, "GFLOPS" }, { MEGA, "MFLOPS" },
                                       { KILO, "KFLOPS" }, { 1.0, "FLOPS" },   { 0, NULL } };
    static const display_unit *tables[UNIT_KIND_COUNT] = {
        [UNIT_BANDWIDTH] = bw,
        [UNIT_TIME] = tm,
        [UNIT_SIZE] = sz,
        [UNIT_FLOPS] = fl,
    };
    if (isnan(value) || isinf(value)) {
        snprintf(buf, size, "%s", isnan(value) ? "nan" : value > 0 ? "inf" : "-inf");
        return buf;
    }
    if ((unsigned)kind >= UNIT_KIND_COUNT) {
        snprintf(buf, size, "%.4g", value);
        return buf;
    }
    const display_unit *t = tables[kind];
    while (t[1].name && fabs(value) < t->scale) /* largest unit keeping the number >= 1 */
        t++;
    snprintf(buf, size, "%.4g %s", value / t->scale, t->name);
    return buf;
}

char *units_attr(double value, unit_kind kind, char *buf, size_t size)
{
    char spaced[64];
    units_format(value, kind, spaced, sizeof spaced);
    size_t k = 0;
    for (const char *c = spaced; *c && k + 1 < size; c++)
        if (*c != ' ')
            buf[k++] = *c;
    if (size)
        buf[k] = '\0';
    return buf;
}
