/* test_cpu_kernels_dense.c: linear and batched matmul against naive double
 * loops (forward) and finite differences of them (backward); see
 * test_cpu_kernels.h for how gradients are compared. */
#include "test_cpu_kernels.h"

/* ---- linear ------------------------------------------------------------ */

// x (M,K), w (N,K), b (N) or NULL -> y (M,N)
static void ref_linear(double *y, const double *x, const double *w, const double *b, int64_t M, int64_t K, int64_t N)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = b ? b[j] : 0;
            for (int64_t k = 0; k < K; k++)
                s += x[i * K + k] * w[j * K + k];
            y[i * N + j] = s;
        }
}

typedef struct {
    int64_t M, K, N;
    int bias;
    tensor x, w, b, r;
    double *y;
} linear_case;

static double linear_objective(void *p)
{
    linear_case *c = p;
    ref_linear(c->y, c->x.d, c->w.d, c->bias ? c->b.d : NULL, c->M, c->K, c->N);
    return dot_f64(c->y, c->r.d, c->M * c->N);
}

static linear_case linear_case_new(int64_t M, int64_t K, int64_t N, int bias)
{
    linear_case c = { M,
                      K,
                      N,
                      bias,
                      tensor_random(M * K, -1, 1),
                      tensor_random(N * K, -1, 1),
                      tensor_random(N, -1, 1),
                      tensor_random(M * N, -1, 1),
                      doubles_new(M * N) };
    return c;
}

static void linear_case_free(linear_case *c)
{
    tensor_free(&c->x);
    tensor_free(&c->w);
    tensor_free(&c->b);
    tensor_free(&c->r);
    free(c->y);
}

static void check_linear(int64_t M, int64_t K, int64_t N, int bias)
{
    linear_case c = linear_case_new(M, K, N, bias);
    float *y = grad_buffer(M * N);
    linear_forward(y, c.x.f, c.w.f, bias ? c.b.f : NULL, M, K, N, 0);
    linear_objective(&c);
    CHECK_FORWARD("linear", y, c.y, M * N);

    float *dx = grad_buffer(M * K), *dw = grad_buffer(N * K), *db = grad_buffer(N);
    linear_backward(dx, dw, db, c.r.f, c.x.f, c.w.f, M, K, N, 0);
    check_grad("linear dx", dx, c.x.d, M * K, linear_objective, &c);
    check_grad("linear dw", dw, c.w.d, N * K, linear_objective, &c);
    if (bias)
        check_grad("linear db", db, c.b.d, N, linear_objective, &c);

    /* NULL gradients are skipped; the others come out the same alone. */
    float *db2 = grad_buffer(N);
    linear_backward(NULL, NULL, db2, c.r.f, c.x.f, c.w.f, M, K, N, 0);
    CHECK(memcmp(db, db2, (size_t)N * sizeof *db) == 0);
    free(y);
    free(dx);
    free(dw);
    free(db);
    free(db2);
    linear_case_free(&c);
}

static void test_linear_forward_matches_naive_loops(void)
{
    rng_seed(1);
    int64_t M = 7, K = 12, N = 36;
    linear_case c = linear_case_new(M, K, N, 1);
    float *y = floats_new(M * N), *y0 = floats_new(M * N);
    linear_forward(y, c.x.f, c.w.f, c.b.f, M, K, N, 0);
    linear_objective(&c);
    CHECK_FORWARD("linear with bias", y, c.y, M * N);
    /* Without bias: y - b. */
    linear_forward(y0, c.x.f, c.w.f, NULL, M, K, N, 0);
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            c.y[i * N + j] -= c.b.d[j];
    CHECK_FORWARD("linear without bias", y0, c.y, M * N);
    free(y);
    free(y0);
    linear_case_free(&c);
}

static void test_linear_backward_matches_finite_differences(void)
{
    rng_seed(2);
    check_linear(7, 12, 36, 1);
    check_linear(1, 1, 1, 1);
    check_linear(5, 36, 257, 0);
    check_linear(13, 65, 3, 1);
    check_linear(1, 300, 70, 1); /* a single row: the few-row kernel (decoding's), K not a multiple of its 16 lanes */
    check_linear(1, 16, 5, 0);
}

/* transpose_w (GPT-2's Conv1D layout): w stored (K,N) gives the product,
 * and the gradients, of the same w stored (N,K), transposed. */
static void check_linear_transpose_w(int64_t M, int64_t K, int64_t N)
{
    linear_case c = linear_case_new(M, K, N, 1);
    float *wt = floats_new(K * N), *y = floats_new(M * N), *yt = floats_new(M * N);
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            wt[k * N + n] = c.w.f[n * K + k];
    linear_forward(y, c.x.f, c.w.f, c.b.f, M, K, N, 0);
    linear_forward(yt, c.x.f, wt, c.b.f, M, K, N, 1);
    float *dx = floats_new(M * K), *dw = floats_new(N * K), *db = floats_new(N);
    float *dxt = floats_new(M * K), *dwt = floats_new(K * N), *dbt = floats_new(N);
    linear_backward(dx, dw, db, c.r.f, c.x.f, c.w.f, M, K, N, 0);
    linear_backward(dxt, dwt, dbt, c.r.f, c.x.f, wt, M, K, N, 1);
    double worst = 0;
    for (int64_t i = 0; i < M * N; i++)
        worst = fmax(worst, fabs((double)y[i] - yt[i]));
    for (int64_t i = 0; i < M * K; i++)
        worst = fmax(worst, fabs((double)dx[i] - dxt[i]));
    for (int64_t n = 0; n < N; n++)
        for (int64_t k = 0; k < K; k++)
            worst = fmax(worst, fabs((double)dw[n * K + k] - dwt[k * N + n]));
    CHECK(memcmp(db, dbt, (size_t)N * sizeof *db) == 0);
    if (worst > 1e-5)
        fprintf(stderr, "linear transpose_w %lldx%lldx%lld: differs from the (N,K) layout by %g (bound 1e-5)\n",
                (long long)M, (long long)K, (long long)N, worst);
    CHECK(worst <= 1e-5);
    free(wt), free(y), free(yt), free(dx), free(dw), free(db), free(dxt), free(dwt), free(dbt);
    linear_case_free(&c);
}

static void test_linear_transpose_w_is_the_transposed_weight(void)
{
    rng_seed(4);
    check_linear_transpose_w(7, 12, 36);
    check_linear_transpose_w(33, 65, 3);
    check_linear_transpose_w(1, 1, 1);
    check_linear_transpose_w(1, 40, 300); /* a single row over more than one block of 256 columns */
}

static void test_perturbed_linear_gradient_is_detected(void)
{
    rng_seed(3);
    int64_t M = 7, K = 12, N = 9;
    linear_case c = linear_case_new(M, K, N, 1);
    float *dw = floats_new(N * K);
    linear_backward(NULL, dw, NULL, c.r.f, c.x.f, c.w.f, M, K, N, 0);
    check_perturbed_grad_is_detected(dw, c.w.d, N * K, linear_objective, &c);
    free(dw);
    linear_case_free(&c);
}

/* ---- batched matmul ----------------------------------------------------- */

// a (Bt,M,K); b (Bt|1, K,N) or (Bt|1, N,K) when tb -> c (Bt,M,N) = scale·a·op(b)
static void ref_matmul(double *c, const double *a, const double *b, int64_t Bt, int64_t M, int64_t K, int64_t N, int tb,
                       int batched, double scale)
{
    for (int64_t i = 0; i < Bt; i++) {
        const double *bi = b + (batched ? i * K * N : 0);
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++)
                    s += a[(i * M + m) * K + k] * (tb ? bi[n * K + k] : bi[k * N + n]);
                c[(i * M + m) * N + n] = scale * s;
            }
    }
}

typedef struct {
    int64_t Bt, M, K, N;
    int tb, batched;
    float scale;
    tensor a, b, r;
    double *c;
} matmul_case;

static double matmul_objective(void *p)
{
    matmul_case *c = p;
    ref_matmul(c->c, c->a.d, c->b.d, c->Bt, c->M, c->K, c->N, c->tb, c->batched, c->scale);
    return dot_f64(c->c, c->r.d, c->Bt * c->M * c->N);
}

static void check_matmul(int64_t Bt, int64_t M, int64_t K, int64_t N, int tb, int batched, float scale)
{
    int64_t nb = (batched ? Bt : 1) * K * N;
    matmul_case c = { Bt,
                      M,
                      K,
                      N,
                      tb,
                      batched,
                      scale,
                      tensor_random(Bt * M * K, -1, 1),
                      tensor_random(nb, -1, 1),
                      tensor_random(Bt * M * N, -1, 1),
                      doubles_new(Bt * M * N) };
    char what[96];
    snprintf(what, sizeof what, "matmul Bt=%lld transpose_b=%d b_batched=%d", (long long)Bt, tb, batched);
    float *out = grad_buffer(Bt * M * N);
    matmul_forward(out, c.a.f, c.b.f, Bt, M, K, N, tb, batched, scale);
    matmul_objective(&c);
    CHECK_FORWARD(what, out, c.c, Bt * M * N);

    float *da = grad_buffer(Bt * M * K), *db = grad_buffer(nb);
    matmul_backward(da, db, c.r.f, c.a.f, c.b.f, Bt, M, K, N, tb, batched, scale);
    check_grad(what, da, c.a.d, Bt * M * K, matmul_objective, &c);
    check_grad(what, db, c.b.d, nb, matmul_objective, &c);
    float *db2 = grad_buffer(nb);
    matmul_backward(NULL, db2, c.r.f, c.a.f, c.b.f, Bt, M, K, N, tb, batched, scale);
    CHECK(memcmp(db, db2, (size_t)nb * sizeof *db) == 0);
    free(out);
    free(da);
    free(db);
    free(db2);
    free(c.c);
    tensor_free(&c.a);
    tensor_free(&c.b);
    tensor_free(&c.r);
}

static void test_matmul_forward_and_backward_match_finite_differences(void)
{
    rng_seed(4);
    for (int tb = 0; tb <= 1; tb++)
        for (int batched = 0; batched <= 1; batched++) {
            check_matmul(3, 5, 7, 4, tb, batched, 0.5f);
            check_matmul(1, 7, 12, 36, tb, batched, 1.0f);
            check_matmul(4, 1, 3, 1, tb, batched, -2.0f);
        }
}

int main(void)
{
    test_linear_forward_matches_naive_loops();
    test_linear_backward_matches_finite_differences();
    test_linear_transpose_w_is_the_transposed_weight();
    test_perturbed_linear_gradient_is_detected();
    test_matmul_forward_and_backward_match_finite_differences();
    CHECK_DONE();
}
