/* conv.c: 2-d convolution (im2col + sgemm), max pooling and global average
 * pooling, forward and backward, on NCHW tensors.
 *
 * Convolution works one image at a time: im2col unrolls the image into the
 * workspace as a (C·KH·KW, OH·OW) matrix, and one sgemm with the (OC, C·KH·KW)
 * weight gives the (OC, OH·OW) output. A 1x1, stride 1, unpadded convolution
 * is already that product on the image itself and skips the unrolling. No
 * dilation, no groups; stride and padding are the same on both axes.
 */
#include <math.h>
#include <string.h>

#include "cpu/kernels_internal.h"

int64_t conv_out_size(int64_t n, int64_t k, int64_t stride, int64_t pad) { return (n + 2 * pad - k) / stride + 1; }

static int is_pointwise(int64_t KH, int64_t KW, int64_t stride, int64_t pad)
{
    return KH == 1 && KW == 1 && stride == 1 && pad == 0;
}

int64_t conv2d_workspace_floats(int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t stride, int64_t pad)
{
    if (is_pointwise(KH, KW, stride, pad))
        return 0;
    return C * KH * KW * conv_out_size(H, KH, stride, pad) * conv_out_size(W, KW, stride, pad);
}

/* x is one image (C,H,W), col is (C·KH·KW, OH·OW):
 * col[(c·KH + kh)·KW + kw][oh·OW + ow] = x[c][oh·s - p + kh][ow·s - p + kw], 0 outside. */
static void im2col(float *col, const float *x, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
                   int64_t OW, int64_t s, int64_t p)
{
    int64_t rows = C * KH * KW;
#pragma omp parallel for schedule(static) if (rows * OH * OW >= KERNEL_PAR_MIN)
    for (int64_t row = 0; row < rows; row++) {
        int64_t kw = row % KW, kh = (row / KW) % KH, c = row / (KW * KH);
        const float *xc = x + c * H * W;
        float *out = col + row * OH * OW;
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t ih = oh * s - p + kh;
            float *o = out + oh * OW;
            if (ih < 0 || ih >= H) {
                memset(o, 0, (size_t)OW * sizeof *o);
                continue;
            }
            const float *xr = xc + ih * W;
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t iw = ow * s - p + kw;
                o[ow] = iw >= 0 && iw < W ? xr[iw] : 0.0f;
            }
        }
    }
}

/* The adjoint of im2col: x (C,H,W) = 0, then every col entry added back to
 * the pixel it was read from. Parallel over channels, which own disjoint
 * planes of x. */
static void col2im(float *x, const float *col, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW, int64_t OH,
                   int64_t OW, int64_t s, int64_t p)
{
#pragma omp parallel for schedule(static) if (C * KH * KW * OH * OW >= KERNEL_PAR_MIN)
    for (int64_t c = 0; c < C; c++) {
        float *xc = x + c * H * W;
        memset(xc, 0, (size_t)(H * W) * sizeof *xc);
        for (int64_t kh = 0; kh < KH; kh++) {
            for (int64_t kw = 0; kw < KW; kw++) {
                const float *in = col + ((c * KH + kh) * KW + kw) * OH * OW;
                for (int64_t oh = 0; oh < OH; oh++) {
                    int64_t ih = oh * s - p + kh;
                    if (ih < 0 || ih >= H)
                        continue;
                    float *xr = xc + ih * W;
                    const float *i = in + oh * OW;
                    for (int64_t ow = 0; ow < OW; ow++) {
                        int64_t iw = ow * s - p + kw;
                        if (iw >= 0 && iw < W)
                            xr[iw] += i[ow];
                    }
                }
            }
        }
    }
}

// x is (N,C,H,W), w is (OC,C,KH,KW), b is (OC) or NULL, y is (N,OC,OH,OW).
// Per image n: y[n] (OC, OH·OW) = w (OC, C·KH·KW) · im2col(x[n]) + b
void conv2d_forward(float *y, const float *x, const float *w, const float *b, float *ws, int64_t N, int64_t C,
                    int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW, int64_t stride, int64_t pad)
{
    int64_t OH = conv_out_size(H, KH, stride, pad), OW = conv_out_size(W, KW, stride, pad);
    int64_t P = OH * OW, CKK = C * KH * KW;
    int pointwise = is_pointwise(KH, KW, stride, pad);
    for (int64_t n = 0; n < N; n++) {
        const float *xn = x + n * C * H * W;
        float *yn = y + n * OC * P;
        const float *col = xn;
        if (!pointwise) {
            im2col(ws, xn, C, H, W, KH, KW, OH, OW, stride, pad);
            col = ws;
        }
        if (b) {
#pragma omp parallel for schedule(static) if (OC * P >= KERNEL_PAR_MIN)
            for (int64_t oc = 0; oc < OC; oc++)
                for (int64_t i = 0; i < P; i++)
                    yn[oc * P + i] = b[oc];
        }
        kernel_sgemm(0, 0, OC, P, CKK, 1.0f, w, CKK, col, P, b ? 1.0f : 0.0f, yn, P);
    }
}

// dy is (N,OC,OH,OW). Per image n, with col = im2col(x[n]):
//   dw (OC, C·KH·KW) += dy[n]·colᵀ       (first image overwrites)
//   dx[n] = col2im(wᵀ·dy[n])             (the workspace reused for wᵀ·dy)
//   db[oc] = Σ over n and pixels of dy[n][oc]
void conv2d_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, float *ws,
                     int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW, int64_t stride,
                     int64_t pad)
{
    int64_t OH = conv_out_size(H, KH, stride, pad), OW = conv_out_size(W, KW, stride, pad);
    int64_t P = OH * OW, CKK = C * KH * KW;
    int pointwise = is_pointwise(KH, KW, stride, pad);
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
    for (int64_t n = 0; n < N; n++) {
        const float *xn = x + n * C * H * W, *dyn = dy + n * OC * P;
        float *dxn = dx ? dx + n * C * H * W : NULL;
        if (dw) {
            const float *col = xn;
            if (!pointwise) {
                im2col(ws, xn, C, H, W, KH, KW, OH, OW, stride, pad);
                col = ws;
            }
            kernel_sgemm(0, 1, OC, CKK, P, 1.0f, dyn, P, col, P, n ? 1.0f : 0.0f, dw, CKK);
        }
        if (dx) {
            if (pointwise) {
                kernel_sgemm(1, 0, C, P, OC, 1.0f, w, CKK, dyn, P, 0.0f, dxn, P);
            } else {
                kernel_sgemm(1, 0, CKK, P, OC, 1.0f, w, CKK, dyn, P, 0.0f, ws, P);
                col2im(dxn, ws, C, H, W, KH, KW, OH, OW, stride, pad);
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
