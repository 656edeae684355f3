/* bench_bf16_gemm: how a CPU device multiplies bf16 matrices, the two ways
 * the issue asked to compare, side by side in one run, at GPT-2 small's
 * shapes (B=4, T=64: 256 rows):
 *
 *   sgemm      fp32 inputs, fp32 output: the anchor
 *   widened    bf16 inputs widened to fp32 (half_to_f32), sgemm, the
 *              fp32 result rounded to bf16 (half_from_f32), timed as a whole
 *   fusion's   what runtime/exec.c does for a linear: the bf16 activation
 *              widened, the fp32 weight read as it is, the result rounded
 *   sbgemm     OpenBLAS's cblas_sbgemm (bf16 inputs, fp32 output), looked
 *              up at run time: Debian 12's OpenBLAS 0.3.21 is built without
 *              BUILD_BFLOAT16 and does not export it (nm -D shows none), in
 *              which case the line says "absent"
 *
 * Prints one line a figure: what, value, unit, anchor, ratio (sgemm's time
 * over this one's: 1 is as fast as fp32).  Run with OMP_WAIT_POLICY=passive
 * (bench_precision.sh does), or the conversions' idle OpenMP threads spin
 * against OpenBLAS's (runtime/cpu/threads.c).
 * usage: bench_bf16_gemm [THREADS]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cblas.h>

#include "cpu/half.h"
#include "cpu/kernels.h"

typedef void (*sbgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha, const uint16_t *a, int lda,
                          const uint16_t *b, int ldb, float beta, float *c, int ldc);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

typedef struct {
    int M, K, N;
    float *a, *b, *c, *aw, *bw; /* fp32 operands, result, widened copies */
    uint16_t *ah, *bh, *ch;     /* bf16 operands and result              */
} problem;

/* y (M,N) = x (M,K) · w (N,K)ᵀ, as linear_forward multiplies. */
static void run_sgemm(problem *p)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->M, p->N, p->K, 1.0f, p->a, p->K, p->b, p->K, 0.0f, p->c,
                p->N);
}

static void run_widened(problem *p)
{
    half_to_f32(p->aw, p->ah, (int64_t)p->M * p->K, HALF_DT_BF16);
    half_to_f32(p->bw, p->bh, (int64_t)p->N * p->K, HALF_DT_BF16);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->M, p->N, p->K, 1.0f, p->aw, p->K, p->bw, p->K, 0.0f, p->c,
                p->N);
    half_from_f32(p->ch, p->c, (int64_t)p->M * p->N, HALF_DT_BF16);
}

static void run_fusion(problem *p)
{
    half_to_f32(p->aw, p->ah, (int64_t)p->M * p->K, HALF_DT_BF16);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->M, p->N, p->K, 1.0f, p->aw, p->K, p->b, p->K, 0.0f, p->c,
                p->N);
    half_from_f32(p->ch, p->c, (int64_t)p->M * p->N, HALF_DT_BF16);
}

static sbgemm_fn sbgemm;
static void run_sbgemm(problem *p)
{
    sbgemm(CblasRowMajor, CblasNoTrans, CblasTrans, p->M, p->N, p->K, 1.0f, p->ah, p->K, p->bh, p->K, 0.0f, p->c, p->N);
}

/* The median of 7 timed runs after 2 warm-ups, in seconds. */
static double timed(void (*fn)(problem *), problem *p)
{
    double t[7];
    for (int i = 0; i < 2; i++)
        fn(p);
    for (int i = 0; i < 7; i++) {
        double t0 = now();
        fn(p);
        t[i] = now() - t0;
    }
    for (int i = 1; i < 7; i++)
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            double s = t[j];
            t[j] = t[j - 1];
            t[j - 1] = s;
        }
    return t[3];
}

static void row(const char *what, double value, const char *unit, const char *anchor, double ratio)
{
    printf("%-44s %10.1f %-8s %-32s %.3f\n", what, value, unit, anchor, ratio);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    kernel_threads_set(threads > 0 ? threads : 2);
    sbgemm = (sbgemm_fn)dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    static const int shapes[][3] = { { 256, 768, 3072 }, { 256, 3072, 768 }, { 256, 768, 50257 } };
    printf("%-44s %10s %-8s %-32s %s\n", "what", "value", "unit", "anchor", "ratio");
    for (int s = 0; s < 3; s++) {
        problem p = { .M = shapes[s][0], .K = shapes[s][1], .N = shapes[s][2] };
        size_t a = (size_t)p.M * p.K, b = (size_t)p.N * p.K, c = (size_t)p.M * p.N;
        p.a = malloc(a * 4), p.aw = malloc(a * 4), p.b = malloc(b * 4), p.bw = malloc(b * 4), p.c = malloc(c * 4);
        p.ah = malloc(a * 2), p.bh = malloc(b * 2), p.ch = malloc(c * 2);
        if (!p.a || !p.aw || !p.b || !p.bw || !p.c || !p.ah || !p.bh || !p.ch) {
            fprintf(stderr, "bench_bf16_gemm: out of memory\n");
            return 1;
        }
        srand(7);
        for (size_t i = 0; i < a; i++)
            p.a[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
        for (size_t i = 0; i < b; i++)
            p.b[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
        half_from_f32(p.ah, p.a, (int64_t)a, HALF_DT_BF16);
        half_from_f32(p.bh, p.b, (int64_t)b, HALF_DT_BF16);
        double flops = 2.0 * p.M * p.N * p.K, t32 = timed(run_sgemm, &p), tw = timed(run_widened, &p);
        char what[96], anchor[64];
        snprintf(anchor, sizeof anchor, "sgemm %.1f GFLOP/s", flops / t32 / 1e9);
        snprintf(what, sizeof what, "bf16 %dx%dx%d widened+sgemm, %d threads", p.M, p.K, p.N, threads);
        row(what, flops / tw / 1e9, "GFLOP/s", anchor, t32 / tw);
        double tf = timed(run_fusion, &p);
        snprintf(what, sizeof what, "bf16 %dx%dx%d fusion's (fp32 weight)", p.M, p.K, p.N);
        row(what, flops / tf / 1e9, "GFLOP/s", anchor, t32 / tf);
        snprintf(what, sizeof what, "bf16 %dx%dx%d cblas_sbgemm", p.M, p.K, p.N);
        if (sbgemm) {
            double tb = timed(run_sbgemm, &p);
            row(what, flops / tb / 1e9, "GFLOP/s", anchor, t32 / tb);
        } else {
            printf("%-44s %10s %-8s %-32s %s\n", what, "absent", "-", anchor, "- (this OpenBLAS has no bf16)");
        }
        free(p.a), free(p.aw), free(p.b), free(p.bw), free(p.c), free(p.ah), free(p.bh), free(p.ch);
    }
    return 0;
}
