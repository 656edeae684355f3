/* test_cpu_kernels_embedding.c: embedding lookup and its scatter-add
 * backward (repeated indices add up), the refusal of out-of-range indices,
 * and positions. */
#include "test_cpu_kernels.h"

typedef struct {
    int64_t N, V, C;
    int32_t *idx;
    tensor table, r;
    double *out;
} embedding_case;

static double embedding_objective(void *p)
{
    embedding_case *c = p;
    for (int64_t i = 0; i < c->N; i++)
        for (int64_t j = 0; j < c->C; j++)
            c->out[i * c->C + j] = c->table.d[c->idx[i] * c->C + j];
    return dot_f64(c->out, c->r.d, c->N * c->C);
}

static embedding_case embedding_case_new(int64_t N, int64_t V, int64_t C)
{
    embedding_case c = { N,
                         V,
                         C,
                         calloc((size_t)N, sizeof(int32_t)),
                         tensor_random(V * C, -1, 1),
                         tensor_random(N * C, -1, 1),
                         doubles_new(N * C) };
    for (int64_t i = 0; i < N; i++)
        c.idx[i] = (int32_t)rng_below(V);
    c.idx[N - 1] = c.idx[0];         /* a repeat, at least */
    c.idx[N / 2] = (int32_t)(V - 1); /* the last row */
    return c;
}

static void embedding_case_free(embedding_case *c)
{
    free(c->idx);
    tensor_free(&c->table);
    tensor_free(&c->r);
    free(c->out);
}

static void test_embedding_forward_gathers_rows(void)
{
    rng_seed(51);
    embedding_case c = embedding_case_new(7, 257, 12);
    float *out = grad_buffer(7 * 12);
    int64_t bad = -7;
    CHECK_INT(0, embedding_forward(out, c.idx, c.table.f, 7, 257, 12, &bad));
    CHECK_INT(-7, bad);
    embedding_objective(&c);
    CHECK_FORWARD("embedding", out, c.out, 7 * 12);
    free(out);
    embedding_case_free(&c);
}

static void test_embedding_backward_scatter_adds_and_matches_finite_differences(void)
{
    rng_seed(52);
    embedding_case c = embedding_case_new(20, 13, 5); /* 20 tokens, 13 rows: repeats */
    float *dtable = grad_buffer(13 * 5);
    CHECK_INT(0, embedding_backward(dtable, c.r.f, c.idx, 20, 13, 5, NULL));
    check_grad("embedding dtable", dtable, c.table.d, 13 * 5, embedding_objective, &c);
    check_perturbed_grad_is_detected(dtable, c.table.d, 13 * 5, embedding_objective, &c);
    free(dtable);
    embedding_case_free(&c);
}

static void test_embedding_refuses_out_of_range_indices_without_writing(void)
{
    rng_seed(53);
    embedding_case c = embedding_case_new(6, 257, 4);
    float out[24], dtable[257 * 4];
    for (int i = 0; i < 24; i++)
        out[i] = 42.0f;
    for (int i = 0; i < 257 * 4; i++)
        dtable[i] = 42.0f;
    int32_t bad_values[] = { 257, -1, INT32_MAX, INT32_MIN };
    for (int k = 0; k < 4; k++) {
        int32_t keep = c.idx[3];
        c.idx[3] = bad_values[k];
        c.idx[5] = 1000; /* a later bad one */
        int64_t pos = -1;
        CHECK_INT(-1, embedding_forward(out, c.idx, c.table.f, 6, 257, 4, &pos));
        CHECK_INT(3, pos);
        pos = -1;
        CHECK_INT(-1, embedding_backward(dtable, c.r.f, c.idx, 6, 257, 4, &pos));
        CHECK_INT(3, pos);
        CHECK_INT(-1, embedding_forward(out, c.idx, c.table.f, 6, 257, 4, NULL));
        c.idx[3] = keep;
        c.idx[5] = 0;
    }
    int touched = 0;
    for (int i = 0; i < 24; i++)
        touched += out[i] != 42.0f;
    for (int i = 0; i < 257 * 4; i++)
        touched += dtable[i] != 42.0f;
    CHECK_INT(0, touched);
    embedding_case_free(&c);
}

static void test_positions_are_zero_to_t_minus_one_per_row(void)
{
    int32_t pos[3 * 7];
    positions_forward(pos, 3, 7);
    int bad = 0;
    for (int b = 0; b < 3; b++)
        for (int t = 0; t < 7; t++)
            bad += pos[b * 7 + t] != t;
    CHECK_INT(0, bad);
}

int main(void)
{
    test_embedding_forward_gathers_rows();
    test_embedding_backward_scatter_adds_and_matches_finite_differences();
    test_embedding_refuses_out_of_range_indices_without_writing();
    test_positions_are_zero_to_t_minus_one_per_row();
    CHECK_DONE();
}
