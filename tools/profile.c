/* profile.c: `fusionc profile` (see profile.h): measure this host's CPU and
 * write the <device> line of a cluster file.
 *
 * Three kinds of measurement share the time budget (--seconds: 30% fp32,
 * 30% the 16-bit ways together, 40% the triad), each the best of as many
 * repetitions as fit after one untimed warm-up, because the best run is
 * the one least disturbed by the rest of the machine and the compiler's
 * cost model wants what the hardware can do:
 *
 *   sgemm   cblas_sgemm, C (n,n) = A (n,n) · B (n,n), n = 512, 768, 1024, on
 *           the OpenBLAS threads the kernels use (kernel_threads_set); the
 *           rate of the best size is the peak.  A size whose one product
 *           would take more than half its share of the budget is skipped.
 *   16-bit  the same products the way fusion's CPU kernels do them: bf16
 *           (or fp16) A and B widened to fp32 (half_to_f32), cblas_sgemm,
 *           C rounded back (half_from_f32), timed as a whole.  fp16's
 *           conversions are slower than bf16's (half.c): on a 2-core Intel
 *           Xeon (AVX-512) the fp16 product ran 12-24% below the bf16 one,
 *           so it is measured, not copied.  When the OpenBLAS in the process
 *           exports cblas_sbgemm (built with BUILD_BFLOAT16; Debian 12's
 *           0.3.21 is not), bf16 is also timed through it (bf16 in, fp32
 *           out, rounded) and the faster way gives peak-bf16.
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
 * fusionc re-executes itself with OMP_WAIT_POLICY=passive when it is unset,
 * as the devices' programs do (runtime/main.c): the 16-bit ways alternate
 * OpenMP conversions and OpenBLAS, and with libgomp's threads left
 * spinning the bf16 product measured up to 17 times slower on that Xeon.
 *
 * The budget counts the triad's setup (first touching its arrays), so the
 * whole run takes about --seconds, unless the minimum work alone takes
 * longer: one timed product of the first size each way, three timed triad
 * passes.  The figures have one decimal in the largest unit that keeps them
 * >= 1 ("207.1GFLOPS"); memory is rounded down, so the line never promises
 * more than there is.
 */
#define _GNU_SOURCE 1 /* sched_getaffinity, CPU_COUNT; before any system header */
#include "profile.h"

#include <dlfcn.h>
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

#include "../frontend/cluster.h"
#include "../frontend/units.h"
#include "../runtime/cpu/half.h"
#include "../runtime/cpu/kernels.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

#ifndef _OPENMP
#error "profile.c needs OpenMP for the triad (linking fusion_rt_cpu brings -fopenmp)"
#endif

#define PROFILE_TRIAD_MIN   ((double)(256 << 20)) /* bytes, the three arrays together */
#define PROFILE_TRIAD_MAX   ((double)(1 << 30))
#define PROFILE_MAX_THREADS 1024 /* cluster.xsd's threads range */
#define PROFILE_NAME_MAX    127  /* cluster.xsd's name length   */

typedef struct {
    int threads;
    const char *name;
    double seconds;
    const char *out;
    int verbose;
} profile_options;

/* "fusionc profile: what" on one line, and the usage exit status. */
static int bad_usage(const char *fmt, const char *arg)
{
    fputs("fusionc profile: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs(" (see fusionc profile --help)\n", stderr);
    return 2;
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

/* --name: cluster.xsd's name, so the line pastes into a cluster file. */
static int parse_device_name(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    if (!cluster_name_valid(value, PROFILE_NAME_MAX))
        return cli_bad_value(opt, value, why, n);
    *(const char **)field = value;
    return 0;
}

/* --seconds: a number as the cluster file writes one (frontend/units.h). */
static int parse_seconds(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    double s;
    if (units_parse_number(value, &s, NULL, 0) != 0 || s < 0.1 || s > 3600)
        return cli_bad_value(opt, value, why, n);
    *(double *)field = s;
    return 0;
}

static const cli_option profile_options_table[] = {
    { .name = "--threads",
      .metavar = "N",
      CLI_INT(profile_options, threads),
      .lo = 1,
      .hi = PROFILE_MAX_THREADS,
      .expects = "an integer from 1 to 1024",
      .help = "threads to measure with, 1 to 1024 (default: every core it may use)" },
    { .name = "--name",
      .metavar = "NAME",
      CLI_CUSTOM(parse_device_name, const char *, profile_options, name),
      .expects = "a cluster device name ([A-Za-z_][A-Za-z0-9_.-]*, at most 127 characters)",
      .help = "the device's name (default cpu0)" },
    { .name = "--seconds",
      .metavar = "S",
      CLI_CUSTOM(parse_seconds, double, profile_options, seconds),
      .expects = "a number of seconds from 0.1 to 3600",
      .help = "time to spend measuring, 0.1 to 3600 (default 3)" },
    { .name = "--out",
      .alias = "-o",
      .metavar = "FILE",
      CLI_NONEMPTY(profile_options, out),
      .expects = "a file name",
      .help = "write the two lines to FILE (atomically) instead of standard output" },
    { .name = "-v", CLI_FLAG(profile_options, verbose), .help = "print each measurement on standard error" },
};

const cli_usage profile_usage = {
    "usage: fusionc profile [--threads N] [--name NAME] [--seconds S] [--out FILE] [-v]\n"
    "\n"
    "Measures this host's CPU (matrix-product FLOP/s in fp32, bf16 and fp16, memory\n"
    "bandwidth, memory) and prints its <device> line for a cluster file, after a\n"
    "comment saying how the 16-bit figures were measured; both go inside a <host>:\n"
    "  <!-- fusionc profile: peak-fp32 is cblas_sgemm; peak-bf16 widens to fp32, ... -->\n"
    "  <device name=\"cpu0\" kind=\"cpu\" arch=\"x86_64\" peak-fp32=\"41.2GFLOPS\" peak-bf16=\"36.5GFLOPS\"\n"
    "          peak-fp16=\"32.0GFLOPS\" memory=\"23.5GiB\" memory-bandwidth=\"9.8GB/s\" threads=\"2\"/>\n",
    profile_options_table,
    NULL,
    sizeof profile_options_table / sizeof profile_options_table[0],
    15,
    NULL
};

/* Returns 0, 1 for --help (printed), or 2 (printed). */
static int parse_args(int argc, char **argv, profile_options *o)
{
    *o = (profile_options){ .threads = available_cores(), .name = "cpu0", .seconds = 3.0 };
    char why[512];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            cli_usage_print(stdout, &profile_usage);
            return 1;
        }
        int took = cli_take(&profile_usage, argc, argv, &i, o, why, sizeof why);
        if (took < 0)
            return bad_usage("%s", why);
        if (took == 0)
            return bad_usage(
                a[0] == '-' ? "unknown option '%s'" : "unexpected argument '%s' (profile takes options only)", a);
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

/* How a timed product of two n x n matrices is computed.  Every way takes
 * the same 2·n³ FLOP; the 16-bit ones start from 16-bit inputs and end
 * with a 16-bit result, the conversions inside the timing, as fusion's
 * kernels pay them (half.h: 16-bit tensors are stored, fp32 is computed). */
typedef enum {
    GEMM_F32,    /* cblas_sgemm on fp32                                    */
    GEMM_BF16,   /* widen A and B to fp32, cblas_sgemm, round C to bf16     */
    GEMM_FP16,   /* the same with fp16 (its conversions are slower: half.c) */
    GEMM_SBGEMM, /* cblas_sbgemm (bf16 in, fp32 out), round C to bf16       */
    GEMM_COUNT
} gemm_way;

static const char *const gemm_way_name[GEMM_COUNT] = {
    "sgemm",
    "bf16 (widen, sgemm, round)",
    "fp16 (widen, sgemm, round)",
    "bf16 (cblas_sbgemm, round)",
};

/* The 16-bit type a way's inputs and result are stored in (HALF_DT_*;
 * GEMM_F32 does not use them). */
static int gemm_way_dtype(gemm_way way) { return way == GEMM_FP16 ? HALF_DT_F16 : HALF_DT_BF16; }

/* cblas_sbgemm as OpenBLAS declares it (cblas.h, bfloat16 = uint16_t).  Not
 * called by name: OpenBLAS builds without BUILD_BFLOAT16 (Debian 12's 0.3.21)
 * declare it in the header but do not export it. */
typedef void (*sbgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint m, blasint n, blasint k,
                          float alpha, const bf16_t *a, blasint lda, const bf16_t *b, blasint ldb, float beta, float *c,
                          blasint ldc);

/* cblas_sbgemm from the OpenBLAS this process runs with, or NULL: first in
 * the global scope (fusionc links OpenBLAS), then in the loaded
 * libopenblas.so.0 itself.  *handle is that library's handle (to dlclose), or NULL. */
static sbgemm_fn find_sbgemm(void **handle)
{
    *handle = NULL;
    void *f = dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    if (!f && (*handle = dlopen("libopenblas.so.0", RTLD_LAZY | RTLD_NOLOAD)) != NULL)
        f = dlsym(*handle, "cblas_sbgemm");
    sbgemm_fn fn;
    memcpy(&fn, &f, sizeof fn); /* object pointer to function pointer, as POSIX allows */
    return f ? fn : NULL;
}

/* The operands of one size, in fp32 and in a 16-bit type. */
typedef struct {
    int n, dtype;           /* dtype: HALF_DT_BF16 or HALF_DT_F16 (of ha, hb, hc) */
    float *a, *b, *c;       /* (n,n) fp32                                        */
    uint16_t *ha, *hb, *hc; /* (n,n) 16-bit                                      */
} gemm_buffers;

static void gemm_buffers_free(gemm_buffers *g)
{
    free(g->a), free(g->b), free(g->c), free(g->ha), free(g->hb), free(g->hc);
    *g = (gemm_buffers){ 0 };
}

/* 0, or -1 when memory runs out. */
static int gemm_buffers_init(gemm_buffers *g, int n, int dtype)
{
    size_t count = (size_t)n * (size_t)n;
    *g = (gemm_buffers){ .n = n, .dtype = dtype };
    g->a = malloc(count * sizeof *g->a), g->b = malloc(count * sizeof *g->b), g->c = malloc(count * sizeof *g->c);
    g->ha = malloc(count * sizeof *g->ha), g->hb = malloc(count * sizeof *g->hb), g->hc = malloc(count * sizeof *g->hc);
    if (!g->a || !g->b || !g->c || !g->ha || !g->hb || !g->hc) {
        gemm_buffers_free(g);
        return -1;
    }
    for (size_t i = 0; i < count; i++) { /* small, varied values: no denormals, no overflow */
        g->a[i] = (float)((i * 7 + 3) % 17) * 0.0625f - 0.5f;
        g->b[i] = (float)((i * 5 + 1) % 13) * 0.0625f - 0.375f;
    }
    half_from_f32(g->ha, g->a, (int64_t)count, g->dtype); /* exact in both: multiples of 1/16 below 1 */
    half_from_f32(g->hb, g->b, (int64_t)count, g->dtype);
    return 0;
}

/* C (n,n) = A (n,n) · B (n,n), one way.  GEMM_BF16 and GEMM_FP16 overwrite
 * a and b with the widened ha and hb (the same values). */
static void gemm_once(gemm_way way, const gemm_buffers *g, sbgemm_fn sbgemm)
{
    const int n = g->n;
    const int64_t count = (int64_t)n * n;
    switch (way) {
    case GEMM_F32:
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, g->a, n, g->b, n, 0.0f, g->c, n);
        break;
    case GEMM_BF16:
    case GEMM_FP16:
        half_to_f32(g->a, g->ha, count, g->dtype);
        half_to_f32(g->b, g->hb, count, g->dtype);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, g->a, n, g->b, n, 0.0f, g->c, n);
        half_from_f32(g->hc, g->c, count, g->dtype);
        break;
    case GEMM_SBGEMM:
        sbgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, g->ha, n, g->hb, n, 0.0f, g->c, n);
        half_from_f32(g->hc, g->c, count, HALF_DT_BF16);
        break;
    default:
        break;
    }
}

/* The best rate (FLOP/s) of one way over the sizes that fit in `budget`
 * seconds, or -1 when memory runs out. */
static double measure_gemm(gemm_way way, sbgemm_fn sbgemm, double budget, int verbose)
{
    static const int sizes[] = { 512, 768, 1024 };
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    double best_rate = 0;
    for (int s = 0; s < n_sizes; s++) {
        const int n = sizes[s];
        const double flop = 2.0 * n * n * n, share = budget / n_sizes;
        if (best_rate > 0 && flop / best_rate > share / 2)
            break; /* larger sizes only take longer */
        gemm_buffers g;
        if (gemm_buffers_init(&g, n, gemm_way_dtype(way)) != 0)
            return -1;
        double best = INFINITY, start = now();
        int reps = 0;
        /* One untimed warm-up (OpenBLAS starts its threads), then at least one timed run. */
        for (int warm = 1; reps == 0 || now() - start < share; warm = 0) {
            double t0 = now();
            gemm_once(way, &g, sbgemm);
            double t = now() - t0;
            if (!warm) {
                reps++;
                if (t < best)
                    best = t;
            }
        }
        double rate = best > 0 ? flop / best : 0;
        if (verbose)
            fprintf(stderr, "%s %dx%d: %.1f GFLOP/s (best of %d, c[0] = %g)\n", gemm_way_name[way], n, n, rate / 1e9,
                    reps,
                    way == GEMM_F32    ? (double)g.c[0]
                    : way == GEMM_FP16 ? (double)fp16_to_f32(g.hc[0])
                                       : (double)bf16_to_f32(g.hc[0]));
        if (rate > best_rate)
            best_rate = rate;
        gemm_buffers_free(&g);
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
    (void)madvise(map, size, MADV_HUGEPAGE); /* a hint: without THP, 4 KiB pages */
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
    double limit = read_number_after(path, ""); /* "max" (no limit) does not read as a number */
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
    const char *path; /* NULL: standard output */
    char tmp[FU_PATH_BYTES];
    FILE *f;
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

int profile_measure(int threads, double seconds, int with_gemm, profile_result *r, int verbose)
{
    memset(r, 0, sizeof *r);
    kernel_threads_set(threads);
    r->threads = threads;
    void *blas = NULL;
    sbgemm_fn sbgemm = with_gemm ? find_sbgemm(&blas) : NULL;
    double memory = memory_bytes(), stream = triad_bytes(memory);
    /* 30% fp32; 30% the 16-bit ways, shared; 40% the triad. */
    const double share16 = 0.3 * seconds / (sbgemm ? 3 : 2);
    double rate[GEMM_COUNT] = { 0 };
    int oom = 0;
    for (int w = 0; with_gemm && w < GEMM_COUNT && !oom; w++)
        if (w != GEMM_SBGEMM || sbgemm)
            oom = (rate[w] = measure_gemm((gemm_way)w, sbgemm, w == GEMM_F32 ? 0.3 * seconds : share16, verbose)) < 0;
    double bandwidth = oom ? -1 : measure_triad(0.4 * seconds, threads, stream, verbose);
    if (blas)
        dlclose(blas);
    if (bandwidth < 0) {
        fprintf(stderr, "fusionc profile: error: out of memory for the measurement buffers (%.0f MiB)\n",
                stream / (1 << 20));
        return -1;
    }
    int measured = 1;
    for (int w = 0; with_gemm && w < GEMM_COUNT; w++)
        if (w != GEMM_SBGEMM || sbgemm)
            measured = measured && rate[w] > 0 && isfinite(rate[w]);
    if (!measured || !(bandwidth > 0) || !isfinite(bandwidth) || !(memory > 0)) {
        fprintf(stderr,
                "fusionc profile: error: a measurement failed (fp32 %g, bf16 %g, fp16 %g, cblas_sbgemm %g "
                "FLOP/s, bandwidth %g B/s, memory %g B)\n",
                rate[GEMM_F32], rate[GEMM_BF16], rate[GEMM_FP16], rate[GEMM_SBGEMM], bandwidth, memory);
        return -1;
    }
    /* bf16: the faster of widening and cblas_sbgemm, when this OpenBLAS has it. */
    const int use_sbgemm = sbgemm && rate[GEMM_SBGEMM] > rate[GEMM_BF16];
    r->fp32 = rate[GEMM_F32];
    r->bf16 = rate[use_sbgemm ? GEMM_SBGEMM : GEMM_BF16];
    r->fp16 = rate[GEMM_FP16];
    r->bf16_other = rate[use_sbgemm ? GEMM_BF16 : GEMM_SBGEMM];
    r->has_sbgemm = sbgemm != NULL, r->use_sbgemm = use_sbgemm;
    r->memory = memory, r->bandwidth = bandwidth;
    machine_arch(r->arch, sizeof r->arch);
    return 0;
}

void profile_quantity(char *buf, size_t size, double value, int what)
{
    static const char *const flop_units[] = { "FLOPS", "KFLOPS", "MFLOPS", "GFLOPS", "TFLOPS", "PFLOPS" };
    static const char *const size_units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    static const char *const rate_units[] = { "B/s", "KB/s", "MB/s", "GB/s", "TB/s" };
    if (what == PROFILE_FLOPS)
        put_quantity(buf, size, value, flop_units, 6, 1000.0, 0);
    else if (what == PROFILE_BYTES)
        put_quantity(buf, size, value, size_units, 5, 1024.0, 1);
    else
        put_quantity(buf, size, value, rate_units, 5, 1000.0, 0);
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
    profile_result r;
    if (profile_measure(o.threads, o.seconds, 1, &r, o.verbose)) {
        output_commit(&out, NULL);
        return 1;
    }
    char p32[32], pbf16[32], pfp16[32], pother[32], mem[32], bw[32], arch_attr[64] = "", how[256], line[1024];
    profile_quantity(p32, sizeof p32, r.fp32, PROFILE_FLOPS);
    profile_quantity(pbf16, sizeof pbf16, r.bf16, PROFILE_FLOPS);
    profile_quantity(pfp16, sizeof pfp16, r.fp16, PROFILE_FLOPS);
    profile_quantity(pother, sizeof pother, r.bf16_other, PROFILE_FLOPS);
    profile_quantity(mem, sizeof mem, r.memory, PROFILE_BYTES);
    profile_quantity(bw, sizeof bw, r.bandwidth, PROFILE_RATE);
    if (!r.has_sbgemm)
        snprintf(how, sizeof how, "widens to fp32, runs cblas_sgemm and rounds (this OpenBLAS has no cblas_sbgemm)");
    else if (r.use_sbgemm)
        snprintf(how, sizeof how, "is cblas_sbgemm, rounded (widening for cblas_sgemm: %s)", pother);
    else
        snprintf(how, sizeof how, "widens to fp32, runs cblas_sgemm and rounds (cblas_sbgemm: %s)", pother);
    if (r.arch[0])
        snprintf(arch_attr, sizeof arch_attr, " arch=\"%s\"", r.arch);
    /* The comment says how the 16-bit figures were had; no two hyphens in a
     * row inside it, which XML forbids there. */
    snprintf(line, sizeof line,
             "<!-- fusionc profile: peak-fp32 is cblas_sgemm; peak-bf16 %s; peak-fp16 widens to fp32, runs "
             "cblas_sgemm and rounds (fusion's CPU kernels compute in fp32, 16-bit tensors are storage only) -->\n"
             "<device name=\"%s\" kind=\"cpu\"%s peak-fp32=\"%s\" peak-bf16=\"%s\" peak-fp16=\"%s\" memory=\"%s\" "
             "memory-bandwidth=\"%s\" threads=\"%d\"/>\n",
             how, o.name, arch_attr, p32, pbf16, pfp16, mem, bw, o.threads);
    return output_commit(&out, line) == 0 ? 0 : cannot_write(&out);
}
