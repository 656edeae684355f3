/* profile.h: `fusionc profile`, the measured <device> line of a cluster file.
 *
 *   fusionc profile [--threads N] [--name NAME] [--seconds S] [--out FILE] [-v]
 *
 * Measures this host's CPU with N threads (default: every core this process
 * may run on) and prints one line in frontend/cluster.xsd's syntax, ready to
 * paste inside a <host> of a cluster file:
 *
 *   <device name="cpu0" kind="cpu" arch="x86_64" peak="41.2GFLOPS" memory="23.5GiB" memory-bandwidth="9.8GB/s" threads="2"/>
 *
 *   peak              the best cblas_sgemm rate on square fp32 matrices
 *                     (512, 768, 1024), 2·n³ FLOP a product
 *   memory-bandwidth  the best STREAM triad a = b + s·c over doubles, 24
 *                     bytes an element (write-allocate not counted), on
 *                     arrays of 256 MiB or 4x the last-level cache in all
 *   memory            MemTotal of /proc/meminfo (sysconf when unreadable),
 *                     or the cgroup's memory.max when that is lower; rounded down
 *   arch              uname's machine ("x86_64"), left out when not a valid arch
 *
 * What it deliberately is not: a benchmark of fusion's own kernels (bench/
 * has those), nor a probe of GPUs (kind="cuda" lines are written by hand).
 */
#ifndef FUSION_PROFILE_H
#define FUSION_PROFILE_H

/* argv holds the arguments after "profile" (argv[0] is the first option, not
 * the command).  Prints the line on standard output, or writes it to --out
 * FILE under a temporary name then renames it.  Returns the exit status:
 * 0 done (or --help), 1 a measurement or the output failed (one line on
 * stderr), 2 bad arguments (one line on stderr). */
int profile_main(int argc, char **argv);

#endif
