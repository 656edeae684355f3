/* units.h: quantities with units, as cluster files spell them.
 *
 *     "20Mbps"  "1.12 Gbps"  "40ms"  "16GiB"  "900GB/s"  "125TFLOPS"  "2e3us"
 *
 * A quantity is a number, at most one space, then a unit.  The number is
 * decimal: digits with an optional fraction and exponent ("1.5", ".5", "2e3",
 * "1.2E-3"); no sign, no hex, no "inf"/"nan".  The unit is case-sensitive,
 * because case carries meaning: "Mbps" is megabits, "MB/s" megabytes.
 * Every value is converted to the base unit of its kind:
 *
 *   kind            base     units (decimal prefixes are 1000, binary 1024)
 *   UNIT_BANDWIDTH  bytes/s  bps Kbps Mbps Gbps Tbps          (bits: /8)
 *                            B/s KB/s MB/s GB/s TB/s KiB/s MiB/s GiB/s TiB/s
 *   UNIT_TIME       seconds  ns us ms s
 *   UNIT_SIZE       bytes    B KB MB GB TB KiB MiB GiB TiB
 *   UNIT_FLOPS      FLOP/s   FLOPS KFLOPS MFLOPS GFLOPS TFLOPS PFLOPS
 *                            (also spelled FLOP/s, KFLOP/s, ... PFLOP/s)
 *
 * Also accepted, never suggested: "b/s" "Kb/s" "Mb/s" "Gb/s" "Tb/s" for bits,
 * and the SI lower-case kilo ("kbps", "kB/s", "kB", "kFLOPS") for K.
 *
 * The value must be finite and greater than zero after conversion: a zero
 * bandwidth or a negative latency is a mistake in a cluster file, never a
 * setting.  Errors are one line with no file or line in it (the caller adds
 * those and the attribute's name), for example:
 *
 *   unknown unit 'Mbit' for a bandwidth: expected one of bps, Kbps, ...
 *   '40ms' is a time, but a bandwidth was expected: use one of bps, ...
 *   unknown unit 'mbps' for a bandwidth (units are case-sensitive: did you mean 'Mbps'?)
 *   missing unit after '20': expected one of bps, Kbps, ...
 */
#ifndef FUSION_UNITS_H
#define FUSION_UNITS_H

#include <stddef.h>

typedef enum {
    UNIT_BANDWIDTH, /* -> bytes/s */
    UNIT_TIME,      /* -> seconds */
    UNIT_SIZE,      /* -> bytes   */
    UNIT_FLOPS,     /* -> FLOP/s  */
    UNIT_KIND_COUNT
} unit_kind;

/* Parse `text` (NUL-terminated) as a quantity of `kind`.  Returns 0 and
 * stores the value in base units in *out; or returns -1, leaves *out alone,
 * and writes a one-line reason into why[0..why_size) (why may be NULL). */
int units_parse(const char *text, unit_kind kind, double *out, char *why, size_t why_size);

/* Parse a plain positive number with no unit ("1", "2.5", "1e3"), with the
 * same number syntax and the same errors as units_parse.  Locale-independent,
 * unlike strtod. */
int units_parse_number(const char *text, double *out, char *why, size_t why_size);

/* "a bandwidth", "a time", "a size", "a compute rate": for messages. */
const char *units_kind_name(unit_kind kind);

/* The units one may write for `kind`, comma-separated: "bps, Kbps, ...". */
const char *units_expected(unit_kind kind);

/* Format a base-unit value for people, in the largest unit that keeps the
 * number >= 1 (bandwidth in bits per second, sizes in binary units):
 * "20 Mbps", "40 ms", "16 GiB", "125 TFLOPS".  Up to 4 significant digits;
 * the text parses back with units_parse to within that rounding.  Infinite
 * values print as "inf".  Returns buf. */
char *units_format(double value, unit_kind kind, char *buf, size_t size);
/* The same without the space ("20Mbps"): as a cluster file's attribute. */
char *units_attr(double value, unit_kind kind, char *buf, size_t size);

#endif
