/* sgemm_gflops: OpenBLAS's cblas_sgemm throughput on this machine, the
 * anchor for "achieved GFLOP/s" in bench_gpt2_vs_torch.sh.  Sizes are GPT-2
 * small's at B*T = 256 tokens: (256 x 768) . (768 x 3072).
 * usage: sgemm_gflops THREADS  -> prints GFLOP/s */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void openblas_set_num_threads(int);

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1, M = 256, K = 768, N = 3072, reps = 50;
    openblas_set_num_threads(threads);
    float *a = calloc((size_t)M * K, 4), *b = calloc((size_t)K * N, 4), *c = calloc((size_t)M * N, 4);
    for (int i = 0; i < M * K; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)(i % 5) * 0.1f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < reps; r++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("%.2f\n", 2.0 * M * K * N * reps / s / 1e9);
    free(a), free(b), free(c);
    return 0;
}
