/* test_cpu_kernels_conv.c: conv2d against a direct 7-loop convolution in
 * double, max pooling (padding as -inf, first max on ties) and global average
 * pooling, forward and backward (finite differences; see
 * test_cpu_kernels.h). */
#include "test_cpu_kernels.h"

/* ---- conv2d --------------------------------------------------------------- */

// x (N,C,H,W), w (OC,C,KH,KW), b (OC) or NULL -> y (N,OC,OH,OW)
static void ref_conv2d(double *y, const double *x, const double *w, const double *b, int64_t N, int64_t C, int64_t H,
                       int64_t W, int64_t OC, int64_t KH, int64_t KW, int64_t s, int64_t p)
{
    int64_t OH = (H + 2 * p - KH) / s + 1, OW = (W + 2 * p - KW) / s + 1;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oc = 0; oc < OC; oc++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow++) {
                    double acc = b ? b[oc] : 0;
                    for (int64_t c = 0; c < C; c++)
                        for (int64_t kh = 0; kh < KH; kh++)
                            for (int64_t kw = 0; kw < KW; kw++) {
                                int64_t ih = oh * s - p + kh, iw = ow * s - p + kw;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                acc += x[((n * C + c) * H + ih) * W + iw] * w[((oc * C + c) * KH + kh) * KW + kw];
                            }
                    y[((n * OC + oc) * OH + oh) * OW + ow] = acc;
                }
}

typedef struct {
    int64_t N, C, H, W, OC, KH, KW, s, p;
    int bias;
    tensor x, w, b, r;
    double *y;
} conv_case;

static int64_t conv_case_out(const conv_case *c)
{
    return c->N * c->OC * conv_out_size(c->H, c->KH, c->s, c->p) * conv_out_size(c->W, c->KW, c->s, c->p);
}

static double conv_objective(void *p)
{
    conv_case *c = p;
    ref_conv2d(c->y, c->x.d, c->w.d, c->bias ? c->b.d : NULL, c->N, c->C, c->H, c->W, c->OC, c->KH, c->KW, c->s, c->p);
    return dot_f64(c->y, c->r.d, conv_case_out(c));
}

static conv_case conv_case_new(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW,
                               int64_t s, int64_t p, int bias)
{
    conv_case c = { N,
                    C,
                    H,
                    W,
                    OC,
                    KH,
                    KW,
                    s,
                    p,
                    bias,
                    tensor_random(N * C * H * W, -1, 1),
                    tensor_random(OC * C * KH * KW, -1, 1),
                    tensor_random(OC, -1, 1),
                    { 0 },
                    NULL };
    c.r = tensor_random(conv_case_out(&c), -1, 1);
    c.y = doubles_new(conv_case_out(&c));
    return c;
}

static void conv_case_free(conv_case *c)
{
    tensor_free(&c->x);
    tensor_free(&c->w);
    tensor_free(&c->b);
    tensor_free(&c->r);
    free(c->y);
}

static void check_conv2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW, int64_t s,
                         int64_t p, int bias)
{
    conv_case c = conv_case_new(N, C, H, W, OC, KH, KW, s, p, bias);
    char what[96];
    snprintf(what, sizeof what, "conv2d %lldx%lld k%lldx%lld stride %lld pad %lld", (long long)H, (long long)W,
             (long long)KH, (long long)KW, (long long)s, (long long)p);
    int64_t ny = conv_case_out(&c), nx = N * C * H * W, nw = OC * C * KH * KW;
    int64_t nws = conv2d_workspace_floats(N, C, H, W, OC, KH, KW, s, p);
    float *ws = nws ? floats_new(nws) : NULL;
    float *y = grad_buffer(ny);
    conv2d_forward(y, c.x.f, c.w.f, bias ? c.b.f : NULL, ws, N, C, H, W, OC, KH, KW, s, p);
    conv_objective(&c);
    CHECK_FORWARD(what, y, c.y, ny);

    float *dx = grad_buffer(nx), *dw = grad_buffer(nw), *db = grad_buffer(OC);
    conv2d_backward(dx, dw, db, c.r.f, c.x.f, c.w.f, ws, N, C, H, W, OC, KH, KW, s, p);
    check_grad(what, dx, c.x.d, nx, conv_objective, &c);
    check_grad(what, dw, c.w.d, nw, conv_objective, &c);
    if (bias)
        check_grad(what, db, c.b.d, OC, conv_objective, &c);
    float *dw2 = grad_buffer(nw);
    conv2d_backward(NULL, dw2, NULL, c.r.f, c.x.f, c.w.f, ws, N, C, H, W, OC, KH, KW, s, p);
    CHECK(memcmp(dw, dw2, (size_t)nw * sizeof *dw) == 0);
    free(ws);
    free(y);
    free(dx);
    free(dw);
    free(db);
    free(dw2);
    conv_case_free(&c);
}

static void test_conv2d_matches_direct_convolution_and_finite_differences(void)
{
    rng_seed(31);
    check_conv2d(2, 3, 7, 5, 4, 3, 3, 1, 1, 1);   /* same padding, odd sizes */
    check_conv2d(2, 3, 7, 7, 5, 3, 3, 2, 1, 1);   /* stride 2 with padding */
    check_conv2d(1, 2, 9, 8, 3, 2, 3, 2, 0, 0);   /* rectangular kernel, no bias */
    check_conv2d(3, 4, 5, 3, 6, 1, 1, 1, 0, 1);   /* 1x1: no im2col */
    check_conv2d(2, 4, 7, 7, 3, 1, 1, 2, 0, 0);   /* 1x1 stride 2 (a downsample) */
    check_conv2d(1, 3, 11, 11, 2, 7, 7, 2, 3, 1); /* a ResNet stem, small */
    /* conv.c's CONV_COLUMNS 2048: images of 33x33 (1,089 columns) go two
     * to a product, the third alone; one of 46x46 (2,116) is a product of
     * its own, unrolled, or for a 1x1 on the image itself; small images
     * (above) all in one product. */
    check_conv2d(3, 1, 33, 33, 2, 3, 3, 1, 1, 1);
    check_conv2d(3, 2, 33, 33, 3, 1, 1, 1, 0, 0);
    check_conv2d(2, 1, 46, 46, 2, 3, 3, 1, 1, 0);
    check_conv2d(2, 1, 46, 46, 2, 1, 1, 1, 0, 1);
}

static void test_perturbed_conv2d_gradient_is_detected(void)
{
    rng_seed(32);
    conv_case c = conv_case_new(1, 2, 5, 5, 3, 3, 3, 2, 1, 1);
    float *ws = floats_new(conv2d_workspace_floats(1, 2, 5, 5, 3, 3, 3, 2, 1));
    float *dw = floats_new(3 * 2 * 9);
    conv2d_backward(NULL, dw, NULL, c.r.f, c.x.f, c.w.f, ws, 1, 2, 5, 5, 3, 3, 3, 2, 1);
    check_perturbed_grad_is_detected(dw, c.w.d, 3 * 2 * 9, conv_objective, &c);
    free(ws);
    free(dw);
    conv_case_free(&c);
}

/* ---- maxpool ------------------------------------------------------------ */

// x (N,C,H,W) -> y (N,C,OH,OW); argmax[i] = plane index of the first max
static void ref_maxpool(double *y, int64_t *argmax, const double *x, int64_t NC, int64_t H, int64_t W, int64_t k,
                        int64_t s, int64_t p)
{
    int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
    for (int64_t nc = 0; nc < NC; nc++)
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                double m = -INFINITY;
                int64_t at = -1;
                for (int64_t kh = 0; kh < k; kh++)
                    for (int64_t kw = 0; kw < k; kw++) {
                        int64_t ih = oh * s - p + kh, iw = ow * s - p + kw;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                            continue;
                        if (x[(nc * H + ih) * W + iw] > m) {
                            m = x[(nc * H + ih) * W + iw];
                            at = ih * W + iw;
                        }
                    }
                y[(nc * OH + oh) * OW + ow] = m;
                if (argmax)
                    argmax[(nc * OH + oh) * OW + ow] = at;
            }
}

typedef struct {
    int64_t N, C, H, W, k, s, p;
    tensor x, r;
    double *y;
} pool_case;

static int64_t pool_case_out(const pool_case *c)
{
    return c->N * c->C * conv_out_size(c->H, c->k, c->s, c->p) * conv_out_size(c->W, c->k, c->s, c->p);
}

static double maxpool_objective(void *p)
{
    pool_case *c = p;
    ref_maxpool(c->y, NULL, c->x.d, c->N * c->C, c->H, c->W, c->k, c->s, c->p);
    return dot_f64(c->y, c->r.d, pool_case_out(c));
}

static pool_case pool_case_new(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p)
{
    pool_case c = { N, C, H, W, k, s, p, tensor_random(N * C * H * W, -1, 1), { 0 }, NULL };
    c.r = tensor_random(pool_case_out(&c), -1, 1);
    c.y = doubles_new(pool_case_out(&c));
    return c;
}

static void pool_case_free(pool_case *c)
{
    tensor_free(&c->x);
    tensor_free(&c->r);
    free(c->y);
}

static void check_maxpool(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t s, int64_t p)
{
    pool_case c = pool_case_new(N, C, H, W, k, s, p);
    int64_t ny = pool_case_out(&c), nx = N * C * H * W;
    float *y = grad_buffer(ny), *dx = grad_buffer(nx);
    maxpool2d_forward(y, c.x.f, N, C, H, W, k, s, p);
    maxpool_objective(&c);
    CHECK_FORWARD("maxpool", y, c.y, ny);
    maxpool2d_backward(dx, c.r.f, c.x.f, N, C, H, W, k, s, p);
    check_grad("maxpool dx", dx, c.x.d, nx, maxpool_objective, &c);
    free(y);
    free(dx);
    pool_case_free(&c);
}

static void test_maxpool_matches_reference_and_finite_differences(void)
{
    rng_seed(33);
    check_maxpool(2, 3, 7, 6, 3, 2, 1); /* ResNet's 3/2/1, odd sizes, overlapping */
    check_maxpool(1, 2, 5, 5, 2, 2, 0); /* odd size, last row/column dropped */
    check_maxpool(1, 1, 4, 4, 3, 1, 1);
}

/* Negative inputs next to the padding: padding is -inf, not 0. Ties: the
 * gradient goes to the first maximum in scan order. */
static void test_maxpool_padding_is_minus_infinity_and_ties_go_to_the_first(void)
{
    int64_t H = 4, W = 4, k = 3, s = 2, p = 1, OH = 2, OW = 2;
    float x[16], y[4], dy[4] = { 1, 2, 3, 4 }, dx[16];
    for (int i = 0; i < 16; i++)
        x[i] = -5.0f; /* all tied, all negative */
    maxpool2d_forward(y, x, 1, 1, H, W, k, s, p);
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(-5.0, y[i], 0);
    maxpool2d_backward(dx, dy, x, 1, 1, H, W, k, s, p);
    double xd[16], yd[4];
    int64_t at[4];
    for (int i = 0; i < 16; i++)
        xd[i] = x[i];
    ref_maxpool(yd, at, xd, 1, H, W, k, s, p);
    float expect[16] = { 0 };
    for (int i = 0; i < OH * OW; i++)
        expect[at[i]] += dy[i];
    /* windows start at (-1,-1), (-1,1), (1,-1), (1,1): first in-range pixels */
    CHECK_INT(0, at[0]);
    CHECK_INT(1, at[1]);
    CHECK_INT(4, at[2]);
    CHECK_INT(5, at[3]);
    for (int i = 0; i < 16; i++)
        CHECK_NEAR(expect[i], dx[i], 0);
}

static void test_perturbed_maxpool_gradient_is_detected(void)
{
    rng_seed(34);
    pool_case c = pool_case_new(1, 2, 5, 5, 3, 2, 1);
    float *dx = floats_new(50);
    maxpool2d_backward(dx, c.r.f, c.x.f, 1, 2, 5, 5, 3, 2, 1);
    check_perturbed_grad_is_detected(dx, c.x.d, 50, maxpool_objective, &c);
    free(dx);
    pool_case_free(&c);
}

/* ---- global average pooling ---------------------------------------------- */

typedef struct {
    int64_t NC, HW;
    tensor x, r;
    double *y;
} avg_case;

static double avgpool_objective(void *p)
{
    avg_case *c = p;
    for (int64_t i = 0; i < c->NC; i++) {
        double s = 0;
        for (int64_t j = 0; j < c->HW; j++)
            s += c->x.d[i * c->HW + j];
        c->y[i] = s / (double)c->HW;
    }
    return dot_f64(c->y, c->r.d, c->NC);
}

static void test_avgpool_global_matches_reference_and_finite_differences(void)
{
    rng_seed(35);
    int64_t N = 2, C = 3, HW = 7 * 5;
    avg_case c = { N * C, HW, tensor_random(N * C * HW, -1, 1), tensor_random(N * C, -1, 1), doubles_new(N * C) };
    float *y = grad_buffer(N * C), *dx = grad_buffer(N * C * HW);
    avgpool_global_forward(y, c.x.f, N, C, HW);
    avgpool_objective(&c);
    CHECK_FORWARD("avgpool_global", y, c.y, N * C);
    avgpool_global_backward(dx, c.r.f, N, C, HW);
    check_grad("avgpool_global dx", dx, c.x.d, N * C * HW, avgpool_objective, &c);
    free(y);
    free(dx);
    tensor_free(&c.x);
    tensor_free(&c.r);
    free(c.y);
}

int main(void)
{
    test_conv2d_matches_direct_convolution_and_finite_differences();
    test_perturbed_conv2d_gradient_is_detected();
    test_maxpool_matches_reference_and_finite_differences();
    test_maxpool_padding_is_minus_infinity_and_ties_go_to_the_first();
    test_perturbed_maxpool_gradient_is_detected();
    test_avgpool_global_matches_reference_and_finite_differences();
    CHECK_DONE();
}
