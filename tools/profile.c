/* profile.c: `fusionc profile` (see profile.h): measure this host's CPU and
 * write the <device> line of a cluster file.
 *
 * Two measurements share the time budget (--seconds, 60% and 40%), each the
 * best of as many repetitions as fit after one untimed warm-up, because the
 * best run is the one least disturbed by the rest of the machine and the
 * compiler's cost model wants what the hardware can do:
 *
 *   sgemm   cblas_sgemm, C (n,n) = A (n,n) · B (n,n), n = 512, 768, 1024, on
 *           the OpenBLAS threads the kernels use (kernel_threads_set); the
 *           rate of the best size is the peak.  A size whose one product
 *           would take more than half its share of the budget is skipped.
 *   triad   a[i] = b[i] + s·c[i] over three arrays of doubles on N OpenMP
 *           threads, first touched by the same threads (so each page sits by
 *           the core that streams it); 24 bytes an element, STREAM's count.
 *           The arrays hold 256 MiB in all, or four times the last-level
 *           cache when that is more (STREAM's rule), up to 1 GiB and a
 *           quarter of the memory.  Why more than 256 MiB: on this project's
 *           build host (AMD EPYC, 2 cores, sysconf reports a 508 MiB L3), one
 *           thread read 53 GB/s over 64 MiB, 39 over 256 MiB, and 31-33 over
 *           1 and 4 GiB, the memory's own rate.  Why no more than 1 GiB: that
 *           rate is reached there, and first touching the pages is slow on
 *           some hosts (the same one: 2.7 s for 2 GiB even with huge pages).
 *
 * The budget counts the triad's setup (first touching its arrays), so the
 * whole run takes about --seconds, unless the minimum work alone takes
 * longer: one timed product of the first size, three timed triad passes.
 * The figures have one decimal in the largest unit that keeps them >= 1
 * ("207.1GFLOPS"); memory is rounded down, so the line never promises more
 * than there is.
 */
#define _GNU_SOURCE 1   /* sched_getaffinity, CPU_COUNT; before any system header */
#include "profile.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "../frontend/units.h"
#include "../runtime/cpu/kernels.h"

#ifndef _OPENMP
#error "profile.c needs OpenMP for the triad (linking fusion_rt_cpu brings -fopenmp)"
#endif

#define PROFILE_TRIAD_MIN     ((double)(256 << 20))     /* bytes, the three arrays together */
#define PROFILE_TRIAD_MAX     ((double)(1 << 30))
#define PROFILE_MAX_THREADS   1024          /* cluster.xsd's threads range */
#define PROFILE_NAME_MAX      127           /* cluster.xsd's name length   */

static const char usage[] =
    "usage: fusionc profile [--threads N] [--name NAME] [--seconds S] [--out FILE] [-v]\n"
    "\n"
    "Measures this host's CPU (sgemm FLOP/s, memory bandwidth, memory) and prints\n"
    "its <device> line for a cluster file, ready to paste inside a <host>:\n"
    "  <device name=\"cpu0\" kind=\"cpu\" arch=\"x86_64\" peak=\"41.2GFLOPS\" memory=\"23.5GiB\"\n"
    "          memory-bandwidth=\"9.8GB/s\" threads=\"2\"/>\n"
    "  --threads N    threads to measure with, 1 to 1024 (default: every core it may use)\n"
    "  --name NAME    the device's name (default cpu0)\n"
    "  --seconds S    time to spend measuring, 0.1 to 3600 (default 3)\n"
    "  --out FILE     write the line to FILE (atomically) instead of standard output\n"
    "  -v             print each measurement on standard error\n";

typedef struct {
    int         threads;
    const char *name;
    double      seconds;
    const char *out;
    int         verbose;
} profile_options;

/* "fusionc profile: what" on one line, and the usage exit status. */
static int bad_usage(const char *fmt, const char *arg)
{
    fputs("fusionc profile: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs(" (see fusionc profile --help)\n", stderr);
    return 2;
}

/* cluster.xsd's name: [A-Za-z_][A-Za-z0-9_.-]*, at most 127 characters. */
static int xsd_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > PROFILE_NAME_MAX || !((s[0] >= 'A' && s[0] <= 'Z') || (s[0] >= 'a' && s[0] <= 'z') || s[0] == '_'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return 0;
    }
    return 1;
}

/* The cores this process may run on (its affinity mask), at least 1. */
static int available_cores(void)
{
    cpu_set_t set;
    long n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n < 1)
        n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > PROFILE_MAX_THREADS ? PROFILE_MAX_THREADS : (int)n;
}

/* Returns 0, 1 for --help (printed), or 2 (printed). */
static int parse_args(int argc, char **argv, profile_options *o)
{
    *o = (profile_options){ .threads = available_cores(), .name = "cpu0", .seconds = 3.0 };
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *value = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            return 1;
        }
        if (strcmp(a, "-v") == 0) {
            o->verbose = 1;
            continue;
        }
        static const char *const keys[] = { "--threads", "--name", "--seconds", "--out", "-o" };
        int k = -1;
        for (int j = 0; j < 5 && k < 0; j++) {
            size_t n = strlen(keys[j]);
            if (strcmp(a, keys[j]) == 0) {
                if (i + 1 >= argc)
                    return bad_usage("option '%s' needs a value", a);
                k = j, value = argv[++i];
            } else if (strncmp(a, keys[j], n) == 0 && a[n] == '=' && keys[j][1] == '-') {
                k = j, value = a + n + 1;   /* --threads=2 */
            }
        }
        if (k < 0)
            return bad_usage(a[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s' (profile takes options only)",
                             a);
        if (k == 0) {
            char *end;
            errno = 0;
            long n = strtol(value, &end, 10);
            if (!*value || *end || errno || n < 1 || n > PROFILE_MAX_THREADS)
                return bad_usage("--threads expects an integer from 1 to 1024, found '%s'", value);
            o->threads = (int)n;
        } else if (k == 1) {
            if (!xsd_name_valid(value))
                return bad_usage("--name expects a cluster device name ([A-Za-z_][A-Za-z0-9_.-]*, at most 127 "
                                 "characters), found '%s'", value);
            o->name = value;
        } else if (k == 2) {
            double s;
            if (units_parse_number(value, &s, NULL, 0) != 0 || s < 0.1 || s > 3600)
                return bad_usage("--seconds expects a number of seconds from 0.1 to 3600, found '%s'", value);
            o->seconds = s;
        } else {
            if (!*value)
                return bad_usage("%s expects a file name, found ''", a);
            o->out = value;
        }
    }
    return 0;
}

/* ---- measurements -------------------------------------------------------- */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The best sgemm rate (FLOP/s) over the sizes that fit in `budget` seconds,
 * or -1 when memory runs out. */
static double measure_sgemm(double budget, int verbose)
{
    static const int sizes[] = { 512, 768, 1024 };
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    double best_rate = 0;
    for (int s = 0; s < n_sizes; s++) {
        const int n = sizes[s];
        const double flop = 2.0 * n * n * n, share = budget / n_sizes;
        if (best_rate > 0 && flop / best_rate > share / 2)
            break;   /* larger sizes only take longer */
        size_t count = (size_t)n * (size_t)n;
        float *a = malloc(count * sizeof *a), *b = malloc(count * sizeof *b), *c = malloc(count * sizeof *c);
        if (!a || !b || !c) {
            free(a), free(b), free(c);
            return -1;
        }
        for (size_t i = 0; i < count; i++) {   /* small, varied values: no denormals, no overflow */
            a[i] = (float)((i * 7 + 3) % 17) * 0.0625f - 0.5f;
            b[i] = (float)((i * 5 + 1) % 13) * 0.0625f - 0.375f;
        }
        double best = INFINITY, start = now();
        int reps = 0;
        /* One untimed warm-up (OpenBLAS starts its threads), then at least one timed run. */
        for (int warm = 1; reps == 0 || now() - start < share; warm = 0) {
            double t0 = now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
            double t = now() - t0;
            if (!warm) {
                reps++;
                if (t < best)
                    best = t;
            }
        }
        double rate = best > 0 ? flop / best : 0;
        if (verbose)
            fprintf(stderr, "sgemm %dx%d: %.1f GFLOP/s (best of %d, c[0] = %g)\n", n, n, rate / 1e9, reps,
                    (double)c[0]);
        if (rate > best_rate)
            best_rate = rate;
        free(a), free(b), free(c);
    }
    return best_rate;
}

/* Bytes for the triad's three arrays: 4 x the last-level cache, at least
 * PROFILE_TRIAD_MIN, at most PROFILE_TRIAD_MAX and a quarter of `memory`
 * (but never below the minimum). */
static double triad_bytes(double memory)
{
    long cache = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (cache <= 0)
        cache = sysconf(_SC_LEVEL2_CACHE_SIZE);
    double bytes = cache > 0 ? 4.0 * (double)cache : 0;
    if (bytes > PROFILE_TRIAD_MAX)
        bytes = PROFILE_TRIAD_MAX;
    if (memory > 0 && bytes > memory / 4)
        bytes = memory / 4;
    return bytes > PROFILE_TRIAD_MIN ? bytes : PROFILE_TRIAD_MIN;
}

/* The best triad rate (bytes/s) on `threads` threads over `bytes` of arrays,
 * in `budget` seconds counted from before the arrays are touched (a host
 * slow to fault pages in still takes about the budget), or -1 when memory
 * runs out.  The arrays are one anonymous mapping, offered transparent huge
 * pages: fewer page faults to set up and fewer TLB misses to measure. */
static double measure_triad(double budget, int threads, double bytes, int verbose)
{
    const double start = now();
    const int64_t n = (int64_t)(bytes / 3 / sizeof(double));
    const size_t size = 3 * (size_t)n * sizeof(double);
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return -1;
    (void)madvise(map, size, MADV_HUGEPAGE);   /* a hint: without THP, 4 KiB pages */
    double *a = map, *b = a + n, *c = b + n;
    #pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        a[i] = 0.0;
        b[i] = 1.0;
        c[i] = 2.0;
    }
    const double setup = now() - start, scalar = 3.0;
    double best = INFINITY;
    int reps = 0;
    /* One untimed warm-up, then at least 3 timed runs, then until the budget is spent. */
    for (int warm = 1; reps < 3 || now() - start < budget; warm = 0) {
        double t0 = now();
        #pragma omp parallel for num_threads(threads) schedule(static)
        for (int64_t i = 0; i < n; i++)
            a[i] = b[i] + scalar * c[i];
        double t = now() - t0;
        if (!warm) {
            reps++;
            if (t < best)
                best = t;
        }
    }
    double rate = best > 0 ? (double)size / best : 0;
    if (verbose)
        fprintf(stderr, "triad %.0f MiB: %.2f GB/s (best of %d; %.2f s to set up; a[%lld] = %g)\n",
                (double)size / (1 << 20), rate / 1e9, reps, setup, (long long)(n / 2), a[n / 2]);
    munmap(map, size);
    return rate;
}

/* A number from the first line of `path` that starts with `key` (the rest
 * of the line after it), or -1: "MemTotal:  24683620 kB" -> 24683620. */
static double read_number_after(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    double v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, k) == 0) {
            char *end;
            v = strtod(line + k, &end);
            if (end == line + k || !(v > 0))
                v = -1;
            break;
        }
    fclose(f);
    return v;
}

/* Bytes of memory this process can have: the host's MemTotal (sysconf when
 * /proc is not there), or its cgroup (v2) memory.max when that is lower, as
 * in a container.  -1 if none can be read. */
static double memory_bytes(void)
{
    double kib = read_number_after("/proc/meminfo", "MemTotal:");
    double total = kib > 0 ? kib * 1024.0 : -1;
    if (total < 0) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0)
            total = (double)pages * (double)page;
    }
    /* "0::/some/path" in /proc/self/cgroup names the v2 cgroup. */
    char path[600] = "/sys/fs/cgroup/memory.max", line[512];
    FILE *f = fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", strcmp(line + 3, "/") ? line + 3 : "");
            break;
        }
    if (f)
        fclose(f);
    double limit = read_number_after(path, "");   /* "max" (no limit) does not read as a number */
    if (limit > 0 && (total < 0 || limit < total))
        total = limit;
    return total;
}

/* ---- the line -------------------------------------------------------------- */

/* value in the largest unit that keeps it >= 1, one decimal: "41.2GFLOPS".
 * units[0] is the base unit; each next one is `step` times larger.  With
 * round_down the last digit is cut, not rounded (for memory). */
static void put_quantity(char *buf, size_t size, double value, const char *const *units, int n_units, double step,
                         int round_down)
{
    int u = 0;
    while (u + 1 < n_units && value >= step) {
        value /= step;
        u++;
    }
    if (round_down)
        value = floor(value * 10.0) / 10.0;
    snprintf(buf, size, "%.1f%s", value, units[u]);
}

/* The machine name as an arch attribute value, or "" when cluster.xsd's
 * arch pattern ([A-Za-z0-9_.-]{1,31}) would not take it. */
static void machine_arch(char *buf, size_t size)
{
    struct utsname u;
    buf[0] = '\0';
    if (uname(&u) != 0 || !u.machine[0] || strlen(u.machine) > 31 || strlen(u.machine) >= size)
        return;
    for (const char *p = u.machine; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' ||
              *p == '.' || *p == '-'))
            return;
    snprintf(buf, size, "%s", u.machine);
}

/* --out: the temporary file is made before measuring, so that a path that
 * cannot be written fails at once, not after the measurements. */
typedef struct {
    const char *path;   /* NULL: standard output */
    char        tmp[4096];
    FILE       *f;
} output;

static int output_open(output *out, const char *path)
{
    out->path = path;
    out->f = stdout;
    if (!path)
        return 0;
    if ((size_t)snprintf(out->tmp, sizeof out->tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof out->tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    out->f = fopen(out->tmp, "w");
    return out->f ? 0 : -1;
}

/* Write `line` (NULL: give up) and rename the temporary into place. */
static int output_commit(output *out, const char *line)
{
    int ok = line && fputs(line, out->f) >= 0;
    if (!out->path)
        return ok && fflush(stdout) == 0 ? 0 : -1;
    ok = fclose(out->f) == 0 && ok;
    if (!ok || rename(out->tmp, out->path) != 0) {
        int saved = errno;
        unlink(out->tmp);
        errno = saved;
        return -1;
    }
    return 0;
}

static int cannot_write(const output *out)
{
    fprintf(stderr, "%s:0: error: cannot write: %s\n", out->path ? out->path : "<stdout>", strerror(errno));
    return 1;
}

int profile_main(int argc, char **argv)
{
    profile_options o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    output out;
    if (output_open(&out, o.out) != 0)
        return cannot_write(&out);

    kernel_threads_set(o.threads);
    double memory = memory_bytes(), stream = triad_bytes(memory);
    double flops = measure_sgemm(0.6 * o.seconds, o.verbose);
    double bandwidth = flops < 0 ? -1 : measure_triad(0.4 * o.seconds, o.threads, stream, o.verbose);
    if (flops < 0 || bandwidth < 0) {
        fprintf(stderr, "fusionc profile: error: out of memory for the measurement buffers (%.0f MiB)\n",
                stream / (1 << 20));
        output_commit(&out, NULL);
        return 1;
    }
    if (!(flops > 0) || !isfinite(flops) || !(bandwidth > 0) || !isfinite(bandwidth) || !(memory > 0)) {
        fprintf(stderr, "fusionc profile: error: a measurement failed (peak %g FLOP/s, bandwidth %g B/s, "
                        "memory %g B)\n", flops, bandwidth, memory);
        output_commit(&out, NULL);
        return 1;
    }

    static const char *const flop_units[] = { "FLOPS", "KFLOPS", "MFLOPS", "GFLOPS", "TFLOPS", "PFLOPS" };
    static const char *const size_units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    static const char *const rate_units[] = { "B/s", "KB/s", "MB/s", "GB/s", "TB/s" };
    char peak[32], mem[32], bw[32], arch[40], arch_attr[64] = "", line[512];
    put_quantity(peak, sizeof peak, flops, flop_units, 6, 1000.0, 0);
    put_quantity(mem, sizeof mem, memory, size_units, 5, 1024.0, 1);
    put_quantity(bw, sizeof bw, bandwidth, rate_units, 5, 1000.0, 0);
    machine_arch(arch, sizeof arch);
    if (arch[0])
        snprintf(arch_attr, sizeof arch_attr, " arch=\"%s\"", arch);
    snprintf(line, sizeof line,
             "<device name=\"%s\" kind=\"cpu\"%s peak=\"%s\" memory=\"%s\" memory-bandwidth=\"%s\" threads=\"%d\"/>\n",
             o.name, arch_attr, peak, mem, bw, o.threads);
    return output_commit(&out, line) == 0 ? 0 : cannot_write(&out);
}
