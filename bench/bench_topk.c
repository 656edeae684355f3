/* bench_topk.c: throughput of the AdaTopK codec (runtime/comm/topk.h) on one
 * thread: compress (topk_encode) then decompress (topk_decode) one 64 MiB
 * fp32 tensor of N(0, 1) values, at densities 1% (the target), 10% and
 * 0.1%, in GB/s of fp32 input (tensor bytes / time of both).  The anchor is
 * memcpy of the same 64 MiB between two touched buffers, measured in the
 * same run; ratio = codec / memcpy.  Target: compress + decompress >= 1 GB/s
 * per core.
 *
 * The row codec (runtime/comm/quant.h: what adatopk sends activations and
 * their gradients as) is measured the same way on the same tensor read as
 * rows of 128: 8 bits rounded to nearest, 8 and 4 bits stochastic; and as
 * the quantised all-reduce uses it (runtime/comm/quant_allreduce.c: rows
 * of ALLREDUCE_QUANT_COLS = 512, to nearest, 8 and 4 bits), the figure
 * passes/allreduce_plan.h prices its codec time at
 * (ALLREDUCE_QUANT_RATE_8BIT and _4BIT: 1.5 and 1.0 GB/s).
 *
 * Each figure is the median of REPS reps after one warm-up (which also
 * grows the scratch: the timed calls allocate nothing).  Compress and
 * decompress are also reported alone (medians of their own), and the
 * encoded size against the raw tensor's.  Every rep checks that decode
 * succeeded; what it holds is tests/unit/test_topk.c's business.
 *
 *     bench_topk [MiB]        default 64
 */
#include "comm/quant.h"
#include "comm/topk.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REPS 7

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static double uniform(void)
{ /* xorshift64*, [0, 1) */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? (size_t)atol(argv[1]) : 64;
    if (mib == 0) {
        fprintf(stderr, "usage: bench_topk [MiB]\n");
        return 2;
    }
    size_t bytes = mib << 20;
    int64_t n = (int64_t)(bytes / sizeof(float));
    float *x = malloc(bytes), *y = malloc(bytes), *copy = malloc(bytes);
    unsigned char *buf = malloc(topk_encoded_bytes(n, n));
    if (!x || !y || !copy || !buf) {
        fprintf(stderr, "bench_topk: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < n; i += 2) { /* Box-Muller, two normals a draw */
        double r = sqrt(-2 * log(1 - uniform())), a = 6.283185307179586 * uniform();
        x[i] = (float)(r * cos(a));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(a));
    }
    memset(y, 0, bytes);
    memset(copy, 0, bytes);

    double t[REPS];
    memcpy(copy, x, bytes); /* warm-up */
    for (int r = 0; r < REPS; r++) {
        double t0 = now_s();
        memcpy(copy, x, bytes);
        t[r] = now_s() - t0;
    }
    double gb_memcpy = bytes / median(t, REPS) / 1e9;

    printf("%-44s %12s %-6s %-28s %s\n", "what", "value", "unit", "anchor", "ratio");
    char what[80];
    snprintf(what, sizeof what, "memcpy %zu MiB, 1 thread", mib);
    printf("%-44s %12.3f %-6s %-28s %s\n", what, gb_memcpy, "GB/s", "-", "-");

    static const double densities[] = { 0.01, 0.10, 0.001 };
    topk_scratch s;
    topk_scratch_init(&s);
    char err[256];
    for (size_t d = 0; d < sizeof densities / sizeof *densities; d++) {
        int64_t k = topk_count(n, densities[d]);
        size_t cap = topk_encoded_bytes(n, k);
        double tc[REPS], td[REPS], tb[REPS];
        if (topk_scratch_reserve(&s, n, k) != 0) {
            fprintf(stderr, "bench_topk: out of memory\n");
            return 1;
        }
        for (int r = -1; r < REPS; r++) { /* r = -1: warm-up */
            double t0 = now_s();
            int64_t len = topk_encode(x, n, k, buf, cap, &s);
            double t1 = now_s();
            int rc = len < 0 ? -1 : topk_decode(buf, (size_t)len, y, n, err, sizeof err);
            double t2 = now_s();
            if (len < 0 || rc != 0) {
                fprintf(stderr, "bench_topk: %s\n", len < 0 ? "encode failed" : err);
                return 1;
            }
            if (r >= 0) {
                tc[r] = t1 - t0;
                td[r] = t2 - t1;
                tb[r] = t2 - t0;
            }
        }
        double gb = bytes / median(tb, REPS) / 1e9;
        double gc = bytes / median(tc, REPS) / 1e9, gd = bytes / median(td, REPS) / 1e9;
        const char *fmt = cap == (size_t)TOPK_HEADER_BYTES + 8 * (size_t)k ? "index" : "bitmap";
        snprintf(what, sizeof what, "topk %.1f%% compress+decompress (%s)", densities[d] * 100, fmt);
        printf("%-44s %12.3f %-6s %-28s %.3f\n", what, gb, "GB/s", "memcpy (target >= 1 GB/s)", gb / gb_memcpy);
        snprintf(what, sizeof what, "  compress alone");
        printf("%-44s %12.3f %-6s %-28s %.3f\n", what, gc, "GB/s", "memcpy", gc / gb_memcpy);
        snprintf(what, sizeof what, "  decompress alone");
        printf("%-44s %12.3f %-6s %-28s %.3f\n", what, gd, "GB/s", "memcpy", gd / gb_memcpy);
        snprintf(what, sizeof what, "  encoded size, %lld of %lld kept", (long long)k, (long long)n);
        printf("%-44s %12.3f %-6s %-28s %.4f\n", what, (double)cap / (1 << 20), "MiB", "raw fp32 bytes",
               (double)cap / bytes);
    }
    static const struct {
        int bits;
        quant_rounding rounding;
        int64_t cols;
        const char *name;
    } rows[] = { { 8, QUANT_NEAREST, 128, "8-bit rows, nearest" },
                 { 8, QUANT_STOCHASTIC, 128, "8-bit rows, stochastic" },
                 { 4, QUANT_STOCHASTIC, 128, "4-bit rows, stochastic" },
                 { 8, QUANT_NEAREST, 512, "8-bit rows of 512, nearest (all-reduce)" },
                 { 4, QUANT_NEAREST, 512, "4-bit rows of 512, nearest (all-reduce)" } };
    for (size_t q = 0; q < sizeof rows / sizeof *rows; q++) {
        const int64_t cols = rows[q].cols, n_rows = n / cols;
        size_t cap = quant_encoded_bytes(n_rows, cols, rows[q].bits);
        double tb[REPS];
        for (int r = -1; r < REPS; r++) {
            double t0 = now_s();
            int64_t len = quant_encode(x, n_rows, cols, rows[q].bits, rows[q].rounding, 7 + (uint64_t)r, buf, cap);
            int rc = len < 0 ? -1 : quant_decode(buf, (size_t)len, y, n_rows * cols, err, sizeof err);
            double t1 = now_s();
            if (len < 0 || rc != 0) {
                fprintf(stderr, "bench_topk: %s\n", len < 0 ? "quant encode failed" : err);
                return 1;
            }
            if (r >= 0)
                tb[r] = t1 - t0;
        }
        double gb = (double)(n_rows * cols) * 4 / median(tb, REPS) / 1e9;
        snprintf(what, sizeof what, "%s compress+decompress", rows[q].name);
        printf("%-44s %12.3f %-6s %-28s %.3f\n", what, gb, "GB/s", "memcpy (target >= 1 GB/s)", gb / gb_memcpy);
        snprintf(what, sizeof what, "  encoded size");
        printf("%-44s %12.3f %-6s %-28s %.4f\n", what, (double)cap / (1 << 20), "MiB", "raw fp32 bytes",
               (double)cap / bytes);
    }
    printf("target: compress + decompress >= 1 GB/s per core\n");
    topk_scratch_free(&s);
    free(x);
    free(y);
    free(copy);
    free(buf);
    return 0;
}
