/* profile.h: `fusionc profile`, the measured <device> line of a cluster file.
 *
 *   fusionc profile [--threads N] [--name NAME] [--seconds S] [--out FILE] [-v]
 *
 * Measures this host's CPU with N threads (default: every core this process
 * may run on) and prints two lines in frontend/cluster.xsd's syntax, ready
 * to paste inside a <host> of a cluster file: a comment saying how the
 * 16-bit peaks were measured, and the device:
 *
 *   <!-- fusionc profile: peak-fp32 is cblas_sgemm; peak-bf16 widens to fp32, runs cblas_sgemm and rounds (this OpenBLAS has no cblas_sbgemm); peak-fp16 ... -->
 *   <device name="cpu0" kind="cpu" arch="x86_64" peak-fp32="41.2GFLOPS" peak-bf16="36.5GFLOPS" peak-fp16="32.0GFLOPS" memory="23.5GiB" memory-bandwidth="9.8GB/s" threads="2"/>
 *
 *   peak-fp32         the best cblas_sgemm rate on square fp32 matrices
 *                     (512, 768, 1024), 2·n³ FLOP a product
 *   peak-bf16         the same products from bf16 inputs to a bf16 result,
 *                     as fusion's CPU kernels do them: widened to fp32,
 *                     cblas_sgemm, rounded, timed as a whole; or
 *                     cblas_sbgemm and rounding, when this OpenBLAS exports
 *                     it and it is faster (the comment says which)
 *   peak-fp16         the widening way with fp16 (no cblas_sbgemm for it);
 *                     below bf16's, its conversions being slower
 *   memory-bandwidth  the best STREAM triad a = b + s·c over doubles, 24
 *                     bytes an element (write-allocate not counted), on
 *                     arrays of 256 MiB or 4x the last-level cache in all
 *   memory            MemTotal of /proc/meminfo (sysconf when unreadable),
 *                     or the cgroup's memory.max when that is lower; rounded down
 *   arch              uname's machine ("x86_64"), left out when not a valid arch
 *
 * What it deliberately is not: a benchmark of fusion's own kernels (bench/
 * has those; the 16-bit ways follow their method, not their code), nor a
 * probe of GPUs (kind="cuda" lines are written by hand, from datasheets).
 */
#ifndef FUSION_PROFILE_H
#define FUSION_PROFILE_H

#include "../runtime/cli_option.h"

/* Its options and --help. */
extern const cli_usage profile_usage;

/* argv holds the arguments after "profile" (argv[0] is the first option, not
 * the command).  Prints the two lines on standard output, or writes them to
 * --out FILE under a temporary name then renames it.  The process should
 * have started with OMP_WAIT_POLICY=passive, as the devices' programs do
 * (fusionc's main re-executes itself so; profile.c says why).  Returns the
 * exit status: 0 done (or --help), 1 a measurement or the output failed
 * (one line on stderr), 2 bad arguments (one line on stderr). */
int profile_main(int argc, char **argv);

/* What profile_measure found: FLOP/s, bytes, bytes/s. */
typedef struct {
    double fp32, bf16, fp16; /* the peaks (bf16: the faster way)                */
    double bf16_other;       /* bf16 the other way (0 without cblas_sbgemm)      */
    int has_sbgemm, use_sbgemm;
    double memory, bandwidth;
    int threads;
    char arch[40]; /* uname's machine, "" when no valid arch              */
} profile_result;

/* The measurements above on `threads` threads in about `seconds`; without
 * with_gemm only the memory and its bandwidth (the peaks stay 0: a caller
 * that states them, as fusionc provide --emulate-peak does).  0, or -1
 * (said on stderr). */
int profile_measure(int threads, double seconds, int with_gemm, profile_result *r, int verbose);

/* A figure as the cluster file writes it ("41.2GFLOPS", "23.5GiB",
 * "9.8GB/s"; memory rounded down). */
enum { PROFILE_FLOPS, PROFILE_BYTES, PROFILE_RATE };
void profile_quantity(char *buf, size_t size, double value, int what);

#endif
