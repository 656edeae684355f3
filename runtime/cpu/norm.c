/* norm.c: layer norm and RMS norm (over the last axis) and training-mode
 * batch norm (over all but the channel axis), forward and backward.
 *
 * Both backwards recompute the mean and rstd from x instead of reading saved
 * statistics: one more pass over x, and no saved state for the memory plan.
 * Statistics are two-pass (mean, then Σ(x-mean)²) in double; the variance is
 * the biased one, as torch normalises with.
 */
#include <math.h>
#include <string.h>

#include "cpu/kernels_internal.h"

/* ---- layernorm -------------------------------------------------------- */

/* Rows are processed in chunks of LN_CHUNK: the chunk's row statistics live
 * in stack arrays between the row-parallel pass (dx) and the column-parallel
 * pass (dw, db), which sums the chunk in double and adds it into dw, db. */
#define LN_CHUNK 256
#define LN_COLS  64

static void row_stats(const float *x, int64_t C, float eps, double *mean, double *rstd)
{
    double m = kernel_sum_f64(x, C) / (double)C;
    double var = kernel_sum_sq_dev_f64(x, C, m) / (double)C;
    *mean = m;
    *rstd = 1.0 / sqrt(var + (double)eps);
}

// x is (N,C), w and b are (C) or NULL, y is (N,C).
// y[i][j] = (x[i][j] - mean_i) · rstd_i · w[j] + b[j]
void layernorm_forward(float *y, const float *x, const float *w, const float *b, int64_t N, int64_t C, float eps)
{
#pragma omp parallel for schedule(static) if (N * C >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *xr = x + i * C;
        float *yr = y + i * C;
        double mean, rstd;
        row_stats(xr, C, eps, &mean, &rstd);
        float m = (float)mean, s = (float)rstd;
        if (w && b)
            for (int64_t j = 0; j < C; j++)
                yr[j] = (xr[j] - m) * s * w[j] + b[j];
        else
            for (int64_t j = 0; j < C; j++)
                yr[j] = (xr[j] - m) * s * (w ? w[j] : 1.0f) + (b ? b[j] : 0.0f);
    }
}

// dy, x are (N,C), w is (C) or NULL.
// With xhat = (x - mean)·rstd and g = dy·w (per row):
//   dx = rstd · (g - mean_j(g) - xhat · mean_j(g·xhat))
//   dw = Σ_rows dy·xhat ; db = Σ_rows dy
void layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t N,
                        int64_t C, float eps)
{
    if (dw)
        memset(dw, 0, (size_t)C * sizeof *dw);
    if (db)
        memset(db, 0, (size_t)C * sizeof *db);
    for (int64_t i0 = 0; i0 < N; i0 += LN_CHUNK) {
        int64_t rows = N - i0 < LN_CHUNK ? N - i0 : LN_CHUNK;
        double mean[LN_CHUNK], rstd[LN_CHUNK];

#pragma omp parallel for schedule(static) if (rows * C >= KERNEL_PAR_MIN)
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + (i0 + r) * C, *dyr = dy + (i0 + r) * C;
            row_stats(xr, C, eps, &mean[r], &rstd[r]);
            if (!dx)
                continue;
            float m = (float)mean[r], s = (float)rstd[r];
            double sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
            for (int64_t j = 0; j < C; j++) {
                float xhat = (xr[j] - m) * s, g = dyr[j] * (w ? w[j] : 1.0f);
                sg += g;
                sgx += g * xhat;
            }
            float mg = (float)(sg / (double)C), mgx = (float)(sgx / (double)C);
            float *dxr = dx + (i0 + r) * C;
            for (int64_t j = 0; j < C; j++) {
                float xhat = (xr[j] - m) * s, g = dyr[j] * (w ? w[j] : 1.0f);
                dxr[j] = s * (g - mg - xhat * mgx);
            }
        }

        if (!dw && !db)
            continue;
        int64_t nblocks = (C + LN_COLS - 1) / LN_COLS;
#pragma omp parallel for schedule(static) if (rows * C >= KERNEL_PAR_MIN)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            int64_t j0 = blk * LN_COLS, nj = C - j0 < LN_COLS ? C - j0 : LN_COLS;
            double aw[LN_COLS] = { 0 }, ab[LN_COLS] = { 0 };
            for (int64_t r = 0; r < rows; r++) {
                const float *xr = x + (i0 + r) * C + j0, *dyr = dy + (i0 + r) * C + j0;
                float m = (float)mean[r], s = (float)rstd[r];
                for (int64_t j = 0; j < nj; j++) {
                    aw[j] += dyr[j] * ((xr[j] - m) * s);
                    ab[j] += dyr[j];
                }
            }
            for (int64_t j = 0; j < nj; j++) {
                if (dw)
                    dw[j0 + j] += (float)aw[j];
                if (db)
                    db[j0 + j] += (float)ab[j];
            }
        }
    }
}

/* ---- batchnorm (training mode) ---------------------------------------- */

/* Mean and biased variance of channel c of x (N,C,HW): N planes of HW. */
static void channel_stats(const float *x, int64_t N, int64_t C, int64_t HW, int64_t c, double *mean, double *var)
{
    double s = 0, ss = 0, count = (double)(N * HW);
    for (int64_t n = 0; n < N; n++)
        s += kernel_sum_f64(x + (n * C + c) * HW, HW);
    double m = s / count;
    for (int64_t n = 0; n < N; n++)
        ss += kernel_sum_sq_dev_f64(x + (n * C + c) * HW, HW, m);
    *mean = m;
    *var = ss / count;
}

// Channel c of x (N,C,HW) into y: (x - m) · s · w[c] + b[c] (w, b may be NULL).
static void normalise_channel(float *y, const float *x, const float *w, const float *b, int64_t N, int64_t C,
                              int64_t HW, int64_t c, float m, float s)
{
    float wc = w ? w[c] : 1.0f, bc = b ? b[c] : 0.0f;
    for (int64_t n = 0; n < N; n++) {
        const float *xp = x + (n * C + c) * HW;
        float *yp = y + (n * C + c) * HW;
        for (int64_t p = 0; p < HW; p++)
            yp[p] = (xp[p] - m) * s * wc + bc;
    }
}

// x is (N,C,HW), w and b are (C) or NULL, y is (N,C,HW); running_mean and
// running_var (C) are updated when not NULL.
// y[n][c][p] = (x[n][c][p] - mean_c) · rstd_c · w[c] + b[c]
void batchnorm_forward(float *y, const float *x, const float *w, const float *b, float *running_mean,
                       float *running_var, int64_t N, int64_t C, int64_t HW, float eps, float momentum)
{
    int64_t count = N * HW;
#pragma omp parallel for schedule(static) if (N * C * HW >= KERNEL_PAR_MIN)
    for (int64_t c = 0; c < C; c++) {
        double mean, var;
        channel_stats(x, N, C, HW, c, &mean, &var);
        normalise_channel(y, x, w, b, N, C, HW, c, (float)mean, (float)(1.0 / sqrt(var + (double)eps)));
        if (running_mean)
            running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
        if (running_var) {
            double unbiased = count > 1 ? var * (double)count / (double)(count - 1) : var;
            running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
        }
    }
}

void batchnorm_inference(float *y, const float *x, const float *w, const float *b, const float *running_mean,
                         const float *running_var, int64_t N, int64_t C, int64_t HW, float eps)
{
#pragma omp parallel for schedule(static) if (N * C * HW >= KERNEL_PAR_MIN)
    for (int64_t c = 0; c < C; c++)
        normalise_channel(y, x, w, b, N, C, HW, c, running_mean[c],
                          (float)(1.0 / sqrt((double)running_var[c] + (double)eps)));
}

// dy, x are (N,C,HW), w is (C) or NULL. With M = N·HW values per channel:
//   dx = w·rstd · (dy - Σdy/M - xhat · Σ(dy·xhat)/M)
//   dw = Σ dy·xhat ; db = Σ dy            (sums over n and p, per channel)
void batchnorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t N,
                        int64_t C, int64_t HW, float eps)
{
    double count = (double)(N * HW);
#pragma omp parallel for schedule(static) if (N * C * HW >= KERNEL_PAR_MIN)
    for (int64_t c = 0; c < C; c++) {
        double mean, var;
        channel_stats(x, N, C, HW, c, &mean, &var);
        float m = (float)mean, s = (float)(1.0 / sqrt(var + (double)eps));
        double sdy = 0, sdyx = 0;
        for (int64_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * HW, *dyp = dy + (n * C + c) * HW;
#pragma omp simd reduction(+ : sdy, sdyx)
            for (int64_t p = 0; p < HW; p++) {
                sdy += dyp[p];
                sdyx += dyp[p] * ((xp[p] - m) * s);
            }
        }
        if (dw)
            dw[c] = (float)sdyx;
        if (db)
            db[c] = (float)sdy;
        if (!dx)
            continue;
        float k = (w ? w[c] : 1.0f) * s;
        float mdy = (float)(sdy / count), mdyx = (float)(sdyx / count);
        for (int64_t n = 0; n < N; n++) {
            const float *xp = x + (n * C + c) * HW, *dyp = dy + (n * C + c) * HW;
            float *dxp = dx + (n * C + c) * HW;
            for (int64_t p = 0; p < HW; p++)
                dxp[p] = k * (dyp[p] - mdy - (xp[p] - m) * s * mdyx);
        }
    }
}

/* ---- rmsnorm (Llama's) -------------------------------------------------- */

/* 1/sqrt(mean(x²) + eps) of one row, the mean in double. */
static double row_rrms(const float *x, int64_t C, float eps)
{
    return 1.0 / sqrt(kernel_sum_sq_dev_f64(x, C, 0.0) / (double)C + (double)eps);
}

// x, y are (N,C), w is (C): y[i][j] = x[i][j] · r_i · w[j], r_i = 1/sqrt(mean_j x² + eps)
// (Hugging Face's LlamaRMSNorm: the normalised x times the weight)
void rmsnorm_forward(float *y, const float *x, const float *w, int64_t N, int64_t C, float eps)
{
#pragma omp parallel for schedule(static) if (N * C >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        const float *xr = x + i * C;
        float *yr = y + i * C, r = (float)row_rrms(xr, C, eps);
#pragma omp simd
        for (int64_t j = 0; j < C; j++)
            yr[j] = xr[j] * r * w[j];
    }
}

// dy, x are (N,C), w is (C). With xhat = x·r and g = dy·w (per row):
//   dx = r · (g - xhat · mean_j(g·xhat))      dw = Σ_rows dy·xhat
void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N, int64_t C,
                      float eps)
{
    if (dw)
        memset(dw, 0, (size_t)C * sizeof *dw);
    for (int64_t i0 = 0; i0 < N; i0 += LN_CHUNK) {
        int64_t rows = N - i0 < LN_CHUNK ? N - i0 : LN_CHUNK;
        float rrms[LN_CHUNK];
#pragma omp parallel for schedule(static) if (rows * C >= KERNEL_PAR_MIN)
        for (int64_t k = 0; k < rows; k++) {
            const float *xr = x + (i0 + k) * C, *dyr = dy + (i0 + k) * C;
            float r = (float)row_rrms(xr, C, eps);
            rrms[k] = r;
            if (!dx)
                continue;
            double sgx = 0;
#pragma omp simd reduction(+ : sgx)
            for (int64_t j = 0; j < C; j++)
                sgx += dyr[j] * w[j] * (xr[j] * r);
            float mgx = (float)(sgx / (double)C);
            float *dxr = dx + (i0 + k) * C;
#pragma omp simd
            for (int64_t j = 0; j < C; j++)
                dxr[j] = r * (dyr[j] * w[j] - xr[j] * r * mgx);
        }
        if (!dw)
            continue;
        int64_t nblocks = (C + LN_COLS - 1) / LN_COLS;
#pragma omp parallel for schedule(static) if (rows * C >= KERNEL_PAR_MIN)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            int64_t j0 = blk * LN_COLS, nj = C - j0 < LN_COLS ? C - j0 : LN_COLS;
            double aw[LN_COLS] = { 0 };
            for (int64_t k = 0; k < rows; k++) {
                const float *xr = x + (i0 + k) * C + j0, *dyr = dy + (i0 + k) * C + j0;
                for (int64_t j = 0; j < nj; j++)
                    aw[j] += dyr[j] * (xr[j] * rrms[k]);
            }
            for (int64_t j = 0; j < nj; j++)
                dw[j0 + j] += (float)aw[j];
        }
    }
}
