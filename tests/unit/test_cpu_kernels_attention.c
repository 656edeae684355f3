/* test_cpu_kernels_attention.c: causal attention against an explicit
 * q·kᵀ / softmax / ·v in double, the head split/merge permutations, and the
 * row softmax, forward and backward (finite differences; see
 * test_cpu_kernels.h). */
#include "test_cpu_kernels.h"

/* ---- attention ----------------------------------------------------------- */

// qkv (B,T,3C) -> out (B,T,C), H heads of D = C/H, causal, scale 1/sqrt(D)
static void ref_attention(double *out, const double *qkv, int64_t B, int64_t T, int64_t C, int64_t H)
{
    int64_t D = C / H;
    double *p = doubles_new(T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                const double *q = qkv + (b * T + t) * 3 * C + h * D;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= t; j++) {
                    const double *k = qkv + (b * T + j) * 3 * C + C + h * D;
                    double s = 0;
                    for (int64_t d = 0; d < D; d++)
                        s += q[d] * k[d];
                    p[j] = s / sqrt((double)D);
                    if (p[j] > m)
                        m = p[j];
                }
                for (int64_t j = 0; j <= t; j++) {
                    p[j] = exp(p[j] - m);
                    sum += p[j];
                }
                for (int64_t d = 0; d < D; d++) {
                    double o = 0;
                    for (int64_t j = 0; j <= t; j++)
                        o += p[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * D + d];
                    out[(b * T + t) * C + h * D + d] = o;
                }
            }
    free(p);
}

typedef struct {
    int64_t B, T, C, H;
    tensor qkv, r;
    double *out;
} attention_case;

static double attention_objective(void *p)
{
    attention_case *c = p;
    ref_attention(c->out, c->qkv.d, c->B, c->T, c->C, c->H);
    return dot_f64(c->out, c->r.d, c->B * c->T * c->C);
}

static attention_case attention_case_new(int64_t B, int64_t T, int64_t C, int64_t H)
{
    attention_case c = {
        B, T, C, H, tensor_random(B * T * 3 * C, -1.5f, 1.5f), tensor_random(B * T * C, -1, 1), doubles_new(B * T * C)
    };
    return c;
}

static void attention_case_free(attention_case *c)
{
    tensor_free(&c->qkv);
    tensor_free(&c->r);
    free(c->out);
}

static void check_attention(int64_t B, int64_t T, int64_t C, int64_t H)
{
    attention_case c = attention_case_new(B, T, C, H);
    char what[80];
    snprintf(what, sizeof what, "attention B=%lld T=%lld C=%lld H=%lld", (long long)B, (long long)T, (long long)C,
             (long long)H);
    float *ws = floats_new(attention_workspace_floats(T));
    float *out = grad_buffer(B * T * C), *dqkv = grad_buffer(B * T * 3 * C);
    attention_forward(out, c.qkv.f, ws, B, T, C, H);
    attention_objective(&c);
    CHECK_FORWARD(what, out, c.out, B * T * C);
    attention_backward(dqkv, c.r.f, c.qkv.f, ws, B, T, C, H);
    check_grad(what, dqkv, c.qkv.d, B * T * 3 * C, attention_objective, &c);
    free(ws);
    free(out);
    free(dqkv);
    attention_case_free(&c);
}

static void test_attention_matches_explicit_softmax_and_finite_differences(void)
{
    rng_seed(21);
    check_attention(2, 7, 12, 1); /* one head */
    check_attention(2, 7, 12, 4);
    check_attention(1, 7, 36, 12); /* many heads, D = 3 */
    check_attention(1, 1, 4, 2);   /* one position: out = v */
    check_attention(1, 130, 8, 2); /* more queries than one block */
}

static void test_perturbed_attention_gradient_is_detected(void)
{
    rng_seed(22);
    attention_case c = attention_case_new(1, 7, 12, 3);
    float *ws = floats_new(attention_workspace_floats(7)), *dqkv = floats_new(7 * 36);
    attention_backward(dqkv, c.r.f, c.qkv.f, ws, 1, 7, 12, 3);
    check_perturbed_grad_is_detected(dqkv, c.qkv.d, 7 * 36, attention_objective, &c);
    free(ws);
    free(dqkv);
    attention_case_free(&c);
}

/* ---- qkv_split and merge_heads ----------------------------------------- */

static void test_qkv_split_and_merge_heads_are_the_right_permutations(void)
{
    rng_seed(23);
    int64_t B = 2, T = 5, H = 3, D = 4, C = H * D, n = B * T * C;
    float *qkv = floats_new(3 * n), *q = floats_new(n), *k = floats_new(n), *v = floats_new(n);
    for (int64_t i = 0; i < 3 * n; i++)
        qkv[i] = rng_uniform(-1, 1);
    qkv_split_forward(q, k, v, qkv, B, T, C, H);
    int bad = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t d = 0; d < D; d++) {
                    int64_t o = ((b * H + h) * T + t) * D + d, in = (b * T + t) * 3 * C + h * D + d;
                    bad += q[o] != qkv[in] || k[o] != qkv[in + C] || v[o] != qkv[in + 2 * C];
                }
    CHECK_INT(0, bad);

    /* The backward is the inverse permutation: it rebuilds qkv exactly. */
    float *back = grad_buffer(3 * n);
    qkv_split_backward(back, q, k, v, B, T, C, H);
    CHECK(memcmp(back, qkv, (size_t)(3 * n) * sizeof *qkv) == 0);

    /* merge_heads(q) is the q third of qkv; its backward undoes it. */
    float *y = grad_buffer(n), *dx = grad_buffer(n);
    merge_heads_forward(y, q, B, T, H, D);
    bad = 0;
    for (int64_t bt = 0; bt < B * T; bt++)
        for (int64_t j = 0; j < C; j++)
            bad += y[bt * C + j] != qkv[bt * 3 * C + j];
    CHECK_INT(0, bad);
    merge_heads_backward(dx, y, B, T, H, D);
    CHECK(memcmp(dx, q, (size_t)n * sizeof *q) == 0);
    free(qkv);
    free(q);
    free(k);
    free(v);
    free(back);
    free(y);
    free(dx);
}

/* ---- softmax ---------------------------------------------------------- */

// x (R,L) -> y (R,L), causal masks j > r % L
static void ref_softmax(double *y, const double *x, int64_t R, int64_t L, int causal)
{
    for (int64_t r = 0; r < R; r++) {
        int64_t valid = causal ? r % L + 1 : L;
        double m = -INFINITY, s = 0;
        for (int64_t j = 0; j < valid; j++)
            if (x[r * L + j] > m)
                m = x[r * L + j];
        for (int64_t j = 0; j < valid; j++)
            s += exp(x[r * L + j] - m);
        for (int64_t j = 0; j < L; j++)
            y[r * L + j] = j < valid ? exp(x[r * L + j] - m) / s : 0;
    }
}

typedef struct {
    int64_t R, L;
    int causal;
    tensor x, r;
    double *y;
} softmax_case;

static double softmax_objective(void *p)
{
    softmax_case *c = p;
    ref_softmax(c->y, c->x.d, c->R, c->L, c->causal);
    return dot_f64(c->y, c->r.d, c->R * c->L);
}

static void check_softmax(int64_t R, int64_t L, int causal, float spread)
{
    softmax_case c = {
        R, L, causal, tensor_random(R * L, -spread, spread), tensor_random(R * L, -1, 1), doubles_new(R * L)
    };
    float *y = grad_buffer(R * L), *dx = grad_buffer(R * L);
    softmax_forward(y, c.x.f, R, L, causal);
    softmax_objective(&c);
    CHECK_FORWARD(causal ? "causal softmax" : "softmax", y, c.y, R * L);
    softmax_backward(dx, c.r.f, y, R, L);
    check_grad(causal ? "causal softmax dx" : "softmax dx", dx, c.x.d, R * L, softmax_objective, &c);
    free(y);
    free(dx);
    tensor_free(&c.x);
    tensor_free(&c.r);
    free(c.y);
}

static void test_softmax_matches_reference_and_finite_differences(void)
{
    rng_seed(24);
    check_softmax(14, 7, 1, 3); /* two 7x7 causal blocks */
    check_softmax(5, 257, 0, 3);
    check_softmax(3, 12, 0, 80); /* large logits: the max is subtracted */
}

int main(void)
{
    test_attention_matches_explicit_softmax_and_finite_differences();
    test_perturbed_attention_gradient_is_detected();
    test_qkv_split_and_merge_heads_are_the_right_permutations();
    test_softmax_matches_reference_and_finite_differences();
    CHECK_DONE();
}
