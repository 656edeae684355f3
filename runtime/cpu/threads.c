/* threads.c: one thread count for the two pools the kernels use.
 *
 * The kernels run on two thread pools: OpenMP's (the `#pragma omp parallel
 * for` over rows in norm.c, attention.c, ...) and OpenBLAS's own pthreads
 * (inside cblas_sgemm). Each defaults to one thread per core. They never run
 * at the same time, because no kernel calls BLAS from inside an OpenMP
 * region, so giving both the same count n uses n cores without
 * oversubscribing them.
 *
 * Idle threads are the catch. After a parallel region OpenMP's workers keep
 * spinning for a while before they sleep (libgomp: ~3-20 ms by default;
 * LLVM's libomp: 200 ms), and a BLAS call in that window shares the cores
 * with them: measured on 2 cores, attention (which alternates sgemm and
 * OpenMP softmax) ran 10x slower. With LLVM's libomp, kernel_threads_set
 * turns the spinning off (kmp_set_blocktime(0)). libgomp reads its policy
 * only from the environment at program start, so a process that runs these
 * kernels under gcc should start with OMP_WAIT_POLICY=passive (the launcher
 * sets it, or main sets it and re-executes itself). OpenBLAS's idle threads
 * spin too, but yield the core (sched_yield) to whoever needs it.
 */
#include <omp.h>

#include <cblas.h>

#include "cpu/kernels.h"

static int threads_set; /* 0 until kernel_threads_set is called */

void kernel_threads_set(int n)
{
    if (n < 1)
        n = 1;
    omp_set_num_threads(n);
#ifdef KMP_VERSION_MAJOR /* LLVM's omp.h: the libomp extensions are there */
    kmp_set_blocktime(0);
#endif
    openblas_set_num_threads(n);
    threads_set = n;
}

int kernel_threads_get(void) { return threads_set ? threads_set : omp_get_max_threads(); }
