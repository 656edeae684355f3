/* conv.c: 2-d convolution (im2col + sgemm), max pooling and global average
 * pooling, forward and backward, on NCHW tensors.
 *
 * Convolution unrolls G images at a time (conv_group) into the workspace
 * as a (C·KH·KW, G·OH·OW) matrix, image i in columns [i·P, (i+1)·P) with P
 * = OH·OW, and one sgemm with the (OC, C·KH·KW) weight gives their (OC,
 * G·P) outputs, which go to their images' planes.  G is enough images for
 * G·P to reach CONV_COLUMNS: a ResNet's late layers have small images of
 * many channels (at 28x28 with the small-image stem, layer 4 is 4x4 with
 * 512 channels), and a product 16 columns wide runs far below OpenBLAS's
 * speed.  A layer whose one image is wide enough (G = 1) takes the image
 * alone, unrolled in place of the group, and a 1x1, stride 1, unpadded
 * convolution is then the product on the image itself with no unrolling.
 * No dilation, no groups; stride and padding are the same on both axes.
 */
#include <math.h>
#include <string.h>

#include "cpu/kernels_internal.h"

/* The columns a convolution's product should reach.  ResNet-18 at 28x28,
 * batch 32, 2 threads, this project's AMD EPYC (bench_resnet_fashion.sh
 * speed): 1,024 and 2,048 alike within the machine's noise (650-750 ms a
 * step, against 970 an image at a time), 512 slower (1,020), 4,096 no
 * better (790-820). */
#define CONV_COLUMNS 2048

int64_t conv_out_size(int64_t n, int64_t k, int64_t stride, int64_t pad) { return (n + 2 * pad - k) / stride + 1; }

static int is_pointwise(int64_t KH, int64_t KW, int64_t stride, int64_t pad)
{
    return KH == 1 && KW == 1 && stride == 1 && pad == 0;
}

/* Images a product takes: G·P >= CONV_COLUMNS, at most N, at least 1. */
static int64_t conv_group(int64_t N, int64_t P)
{
    int64_t g = P > 0 ? (CONV_COLUMNS + P - 1) / P : 1;
    return g > N ? (N > 1 ? N : 1) : g;
}

int64_t conv2d_workspace_floats(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW,
                                int64_t stride, int64_t pad)
{
    int64_t P = conv_out_size(H, KH, stride, pad) * conv_out_size(W, KW, stride, pad), G = conv_group(N, P);
    if (G == 1)
        return is_pointwise(KH, KW, stride, pad) ? 0 : C * KH * KW * P;
    return (C * KH * KW + OC) * G * P; /* the unrolled group, and its outputs (or their gradients) */
}

/* A convolution's sizes: input (C,H,W), kernel KH x KW, output OH x OW,
 * stride s and padding p on both axes. */
typedef struct {
    int64_t C, H, W, KH, KW, OH, OW, s, p;
} conv_geom;

/* The outputs [*lo, *hi) of `out` along an axis of n inputs whose kernel
 * offset k reads inside the input: 0 <= o·s - p + k < n. */
static void inside(int64_t k, int64_t s, int64_t p, int64_t n, int64_t out, int64_t *lo, int64_t *hi)
{
    int64_t first = p - k, last = n - 1 + p - k;
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    *hi = last < 0 ? 0 : last / s + 1;
    if (*hi > out)
        *hi = out;
    if (*lo > *hi)
        *lo = *hi;
}

/* g images x (g,C,H,W) unrolled side by side, col (C·KH·KW, g·P):
 * col[((c·KH + kh)·KW + kw)·g·P + i·P + oh·OW + ow] = x[i][c][oh·s - p + kh][ow·s - p + kw], 0 outside.
 * One parallel loop for the group (each switch between OpenMP's threads
 * and OpenBLAS's costs their idle-wait: threads.c), and a row's padding
 * apart from its inside, which stride 1 copies whole. */
static void im2col(float *col, const float *x, int64_t g, const conv_geom *d)
{
    int64_t rows = d->C * d->KH * d->KW, P = d->OH * d->OW, OW = d->OW;
#pragma omp parallel for collapse(2) schedule(static) if (g * rows * P >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < g; i++)
        for (int64_t row = 0; row < rows; row++) {
            int64_t kw = row % d->KW, kh = (row / d->KW) % d->KH, c = row / (d->KW * d->KH), lo, hi;
            const float *xc = x + (i * d->C + c) * d->H * d->W;
            float *out = col + row * g * P + i * P;
            inside(kw, d->s, d->p, d->W, OW, &lo, &hi);
            for (int64_t oh = 0; oh < d->OH; oh++) {
                int64_t ih = oh * d->s - d->p + kh;
                float *o = out + oh * OW;
                /* Loops, not memset and memcpy: a row is 4 to 28 floats
                 * here, shorter than those calls' set-up (perf, a ResNet-18
                 * step at 28x28: 11% in those calls, 6% in these loops). */
                if (ih < 0 || ih >= d->H) {
                    for (int64_t ow = 0; ow < OW; ow++)
                        o[ow] = 0.0f;
                    continue;
                }
                const float *xr = xc + ih * d->W;
                for (int64_t ow = 0; ow < lo; ow++)
                    o[ow] = 0.0f;
                if (d->s == 1 && hi > lo) { /* (with no inside, lo - p + kw may be negative) */
                    const float *from = xr + lo - d->p + kw;
                    for (int64_t k = 0; k < hi - lo; k++)
                        o[lo + k] = from[k];
                } else {
                    for (int64_t ow = lo; ow < hi; ow++)
                        o[ow] = xr[ow * d->s - d->p + kw];
                }
                for (int64_t ow = hi; ow < OW; ow++)
                    o[ow] = 0.0f;
            }
        }
}

/* The adjoint of im2col (the same col layout): x (g,C,H,W) = 0, then every
 * col entry added back to the pixel it was read from. Parallel over
 * images and channels, which own disjoint planes of x. */
static void col2im(float *x, const float *col, int64_t g, const conv_geom *d)
{
    int64_t P = d->OH * d->OW, OW = d->OW;
#pragma omp parallel for collapse(2) schedule(static) if (g * d->C * d->KH * d->KW * P >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < g; i++)
        for (int64_t c = 0; c < d->C; c++) {
            float *xc = x + (i * d->C + c) * d->H * d->W;
            memset(xc, 0, (size_t)(d->H * d->W) * sizeof *xc);
            for (int64_t kh = 0; kh < d->KH; kh++) {
                for (int64_t kw = 0; kw < d->KW; kw++) {
                    const float *in = col + ((c * d->KH + kh) * d->KW + kw) * g * P + i * P;
                    int64_t lo, hi;
                    inside(kw, d->s, d->p, d->W, OW, &lo, &hi);
                    for (int64_t oh = 0; oh < d->OH; oh++) {
                        int64_t ih = oh * d->s - d->p + kh;
                        if (ih < 0 || ih >= d->H)
                            continue;
                        float *xr = xc + ih * d->W;
                        const float *v = in + oh * OW;
                        if (d->s == 1 && hi > lo) { /* contiguous both sides: vectorised */
                            float *to = xr + lo - d->p + kw;
                            for (int64_t k = 0; k < hi - lo; k++)
                                to[k] += v[lo + k];
                        } else {
                            for (int64_t ow = lo; ow < hi; ow++)
                                xr[ow * d->s - d->p + kw] += v[ow];
                        }
                    }
                }
            }
        }
}

/* A group's matrix (R, g·P), image i in columns [i·P, (i+1)·P), from or to
 * the images' planes t (N,R,P), image n0 on. */
static void gather_planes(float *group, const float *t, int64_t n0, int64_t g, int64_t R, int64_t P)
{
#pragma omp parallel for schedule(static) if (g * R * P >= KERNEL_PAR_MIN)
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < g; i++)
            memcpy(group + (r * g + i) * P, t + ((n0 + i) * R + r) * P, (size_t)P * sizeof *t);
}

static void scatter_planes(float *t, const float *group, int64_t n0, int64_t g, int64_t R, int64_t P)
{
#pragma omp parallel for schedule(static) if (g * R * P >= KERNEL_PAR_MIN)
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < g; i++)
            memcpy(t + ((n0 + i) * R + r) * P, group + (r * g + i) * P, (size_t)P * sizeof *t);
}

// x is (N,C,H,W), w is (OC,C,KH,KW), b is (OC) or NULL, y is (N,OC,OH,OW).
// Per group of g images from n0: Y (OC, g·P) = w (OC, C·KH·KW) · col + b,
// col the g images unrolled side by side; Y goes to y[n0..n0+g).
void conv2d_forward(float *y, const float *x, const float *w, const float *b, float *ws, int64_t N, int64_t C,
                    int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW, int64_t stride, int64_t pad)
{
    int64_t OH = conv_out_size(H, KH, stride, pad), OW = conv_out_size(W, KW, stride, pad);
    int64_t P = OH * OW, CKK = C * KH * KW, G = conv_group(N, P);
    int pointwise = is_pointwise(KH, KW, stride, pad);
    conv_geom d = { C, H, W, KH, KW, OH, OW, stride, pad };
    for (int64_t n0 = 0; n0 < N; n0 += G) {
        int64_t g = N - n0 < G ? N - n0 : G, gP = g * P;
        const float *xn = x + n0 * C * H * W, *col = xn; /* one pointwise image is its own col */
        float *out = G == 1 ? y + n0 * OC * P : ws + CKK * G * P;
        if (!(G == 1 && pointwise)) {
            im2col(ws, xn, g, &d);
            col = ws;
        }
        if (b) {
#pragma omp parallel for schedule(static) if (OC * gP >= KERNEL_PAR_MIN)
            for (int64_t oc = 0; oc < OC; oc++)
                for (int64_t i = 0; i < gP; i++)
                    out[oc * gP + i] = b[oc];
        }
        kernel_sgemm(0, 0, OC, gP, CKK, 1.0f, w, CKK, col, gP, b ? 1.0f : 0.0f, out, gP);
        if (G > 1)
            scatter_planes(y, out, n0, g, OC, P);
    }
}

// dy is (N,OC,OH,OW). Per group of g images from n0, with col the g images
// unrolled side by side (C·KH·KW, g·P) and D their dy (OC, g·P):
//   dw (OC, C·KH·KW) += D·colᵀ           (the first group overwrites)
//   dx[n0..n0+g) = col2im(wᵀ·D)          (the workspace reused for wᵀ·D)
//   db[oc] = Σ over n and pixels of dy[n][oc]
void conv2d_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, float *ws,
                     int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW, int64_t stride,
                     int64_t pad)
{
    int64_t OH = conv_out_size(H, KH, stride, pad), OW = conv_out_size(W, KW, stride, pad);
    int64_t P = OH * OW, CKK = C * KH * KW, G = conv_group(N, P);
    int pointwise = is_pointwise(KH, KW, stride, pad);
    conv_geom d = { C, H, W, KH, KW, OH, OW, stride, pad };
    if (db) {
#pragma omp parallel for schedule(static) if (N * OC * P >= KERNEL_PAR_MIN)
        for (int64_t oc = 0; oc < OC; oc++) {
            double s = 0;
            for (int64_t n = 0; n < N; n++)
                s += kernel_sum_f64(dy + (n * OC + oc) * P, P);
            db[oc] = (float)s;
        }
    }
    if (dw && N == 0)
        memset(dw, 0, (size_t)(OC * CKK) * sizeof *dw);
    for (int64_t n0 = 0; n0 < N; n0 += G) {
        int64_t g = N - n0 < G ? N - n0 : G, gP = g * P;
        const float *xn = x + n0 * C * H * W, *D = dy + n0 * OC * P;
        float *dxn = dx ? dx + n0 * C * H * W : NULL;
        if (G > 1) {
            gather_planes(ws + CKK * G * P, dy, n0, g, OC, P);
            D = ws + CKK * G * P;
        }
        if (dw) {
            const float *col = xn;
            if (!(G == 1 && pointwise)) {
                im2col(ws, xn, g, &d);
                col = ws;
            }
            kernel_sgemm(0, 1, OC, CKK, gP, 1.0f, D, gP, col, gP, n0 ? 1.0f : 0.0f, dw, CKK);
        }
        if (dx) {
            if (G == 1 && pointwise) {
                kernel_sgemm(1, 0, C, P, OC, 1.0f, w, CKK, D, P, 0.0f, dxn, P);
            } else {
                kernel_sgemm(1, 0, CKK, gP, OC, 1.0f, w, CKK, D, gP, 0.0f, ws, gP);
                if (pointwise)
                    scatter_planes(dx, ws, n0, g, C, P);
                else
                    col2im(dxn, ws, g, &d);
            }
        }
    }
}

/* ---- max pooling ------------------------------------------------------- */

/* Index in the (H,W) plane of the max of the window at (oh, ow): padding
 * counts as -inf, the first max in scan order wins ties, a NaN wins (torch's
 * rule), and an all -inf window answers its first in-range pixel. A window
 * wholly in the padding (only possible with pad > k/2, which torch refuses)
 * answers -1. */
static int64_t window_argmax(const float *plane, int64_t H, int64_t W, int64_t k, int64_t stride, int64_t pad,
                             int64_t oh, int64_t ow)
{
    int64_t h0 = oh * stride - pad, w0 = ow * stride - pad;
    int64_t h1 = h0 + k < H ? h0 + k : H, w1 = w0 + k < W ? w0 + k : W;
    if (h0 < 0)
        h0 = 0;
    if (w0 < 0)
        w0 = 0;
    if (h0 >= h1 || w0 >= w1)
        return -1;
    int64_t best = h0 * W + w0;
    float m = -INFINITY;
    for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) {
            float v = plane[ih * W + iw];
            if (v > m || isnan(v)) {
                m = v;
                best = ih * W + iw;
            }
        }
    return best;
}

// x is (N,C,H,W), y is (N,C,OH,OW): y = max over each k x k window
void maxpool2d_forward(float *y, const float *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride,
                       int64_t pad)
{
    int64_t OH = conv_out_size(H, k, stride, pad), OW = conv_out_size(W, k, stride, pad);
#pragma omp parallel for schedule(static) if (N * C * OH * OW * k * k >= KERNEL_PAR_MIN)
    for (int64_t nc = 0; nc < N * C; nc++) {
        const float *plane = x + nc * H * W;
        float *out = y + nc * OH * OW;
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t at = window_argmax(plane, H, W, k, stride, pad, oh, ow);
                out[oh * OW + ow] = at >= 0 ? plane[at] : -INFINITY;
            }
    }
}

// dy is (N,C,OH,OW), x and dx are (N,C,H,W): dx = 0, then each dy is added
// at its window's argmax (recomputed from x). Planes are independent.
void maxpool2d_backward(float *dx, const float *dy, const float *x, int64_t N, int64_t C, int64_t H, int64_t W,
                        int64_t k, int64_t stride, int64_t pad)
{
    int64_t OH = conv_out_size(H, k, stride, pad), OW = conv_out_size(W, k, stride, pad);
#pragma omp parallel for schedule(static) if (N * C * OH * OW * k * k >= KERNEL_PAR_MIN)
    for (int64_t nc = 0; nc < N * C; nc++) {
        const float *plane = x + nc * H * W, *g = dy + nc * OH * OW;
        float *d = dx + nc * H * W;
        memset(d, 0, (size_t)(H * W) * sizeof *d);
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t at = window_argmax(plane, H, W, k, stride, pad, oh, ow);
                if (at >= 0)
                    d[at] += g[oh * OW + ow];
            }
    }
}

/* ---- global average pooling ------------------------------------------- */

// x is (N,C,HW), y is (N,C): y = mean over each plane, summed in double
void avgpool_global_forward(float *y, const float *x, int64_t N, int64_t C, int64_t HW)
{
#pragma omp parallel for schedule(static) if (N * C * HW >= KERNEL_PAR_MIN)
    for (int64_t nc = 0; nc < N * C; nc++)
        y[nc] = (float)(kernel_sum_f64(x + nc * HW, HW) / (double)HW);
}

// dy is (N,C), dx is (N,C,HW): dx = dy / HW over each plane
void avgpool_global_backward(float *dx, const float *dy, int64_t N, int64_t C, int64_t HW)
{
#pragma omp parallel for schedule(static) if (N * C * HW >= KERNEL_PAR_MIN)
    for (int64_t nc = 0; nc < N * C; nc++) {
        float g = dy[nc] / (float)HW;
        for (int64_t i = 0; i < HW; i++)
            dx[nc * HW + i] = g;
    }
}
