/* test_cpu_kernels_half_weights: the products and lookups that read a
 * 16-bit weight as it is (an inference step's: runtime/cpu/dense.c,
 * embedding.c), against the f32 kernels on the widened weights:
 *   - linear_forward_half_w, bf16 and fp16, w (N,K) and transposed (K,N),
 *     with and without a bias, M 1 and 3, K 37 and N 300 (neither a
 *     multiple of the 16 lanes or the 256 columns): within 2e-6 of the
 *     largest output (the sums' order differs from sgemm's);
 *   - embedding_forward_half: the rows widened, bit for bit; a bad id refused;
 *   - which inputs the CPU back end reads in 16 bits (op_table.c): a
 *     linear's 16-bit weight up to 16 rows, not 17; an embedding's table
 *     always; and then no f32 copy of them in the op's scratch. */
#include <stdlib.h>

#include "../../runtime/cpu/half.h"
#include "../../runtime/cpu/kernels.h"
#include "../../runtime/cpu/op_table.h"
#include "../../runtime/op_layout.h"
#include "check.h"

static uint64_t state = 88172645463325252ull;
static float next_uniform(void)
{
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    return (float)((double)(state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void check_linear(int dtype, int transpose_w, int bias, int64_t M, int64_t K, int64_t N)
{
    float *x = malloc((size_t)(M * K) * sizeof *x), *wf = malloc((size_t)(N * K) * sizeof *wf);
    float *b = malloc((size_t)N * sizeof *b), *want = malloc((size_t)(M * N) * sizeof *want);
    float *got = malloc((size_t)(M * N) * sizeof *got);
    uint16_t *wh = malloc((size_t)(N * K) * sizeof *wh);
    for (int64_t i = 0; i < M * K; i++)
        x[i] = next_uniform();
    for (int64_t i = 0; i < N * K; i++)
        wf[i] = next_uniform();
    for (int64_t i = 0; i < N; i++)
        b[i] = next_uniform();
    half_from_f32(wh, wf, N * K, dtype);
    half_to_f32(wf, wh, N * K, dtype); /* the weights the f32 kernel reads: the 16-bit ones widened */
    linear_forward(want, x, wf, bias ? b : NULL, M, K, N, transpose_w);
    linear_forward_half_w(got, x, wh, bias ? b : NULL, M, K, N, transpose_w, dtype);
    double worst = 0.0, largest = 0.0;
    for (int64_t i = 0; i < M * N; i++) {
        worst = fmax(worst, fabs((double)got[i] - want[i]));
        largest = fmax(largest, fabs((double)want[i]));
    }
    if (!(worst <= 2e-6 * largest))
        fprintf(stderr, "linear_forward_half_w dtype %d tw %d bias %d M %lld: worst %.3g of %.3g\n", dtype, transpose_w,
                bias, (long long)M, worst, largest);
    CHECK(worst <= 2e-6 * largest);
    free(x), free(wf), free(b), free(want), free(got), free(wh);
}

static rt_op linear_op(int64_t M, int64_t K, int64_t N, int dtype)
{
    rt_op op = { .op = OP_LINEAR, .n_in = 2, .n_out = 1, .ws_offset = 0 };
    op.in[0] = (rt_tensor){ .rank = 2, .dtype = HALF_DT_F32, .dim = { M, K } };
    op.in[1] = (rt_tensor){ .rank = 2, .dtype = dtype, .dim = { N, K } };
    op.out[0] = (rt_tensor){ .rank = 2, .dtype = HALF_DT_F32, .dim = { M, N } };
    return op;
}

int main(void)
{
    for (int dtype = HALF_DT_F16; dtype <= HALF_DT_BF16; dtype++)
        for (int tw = 0; tw < 2; tw++)
            for (int bias = 0; bias < 2; bias++) {
                check_linear(dtype, tw, bias, 1, 37, 300);
                check_linear(dtype, tw, bias, 3, 37, 300);
            }

    /* The embedding: rows 2, 0, 5 of a (6, 10) table. */
    float table[60], want[30], got[30];
    uint16_t th[60];
    for (int i = 0; i < 60; i++)
        table[i] = next_uniform();
    half_from_f32(th, table, 60, HALF_DT_BF16);
    half_to_f32(table, th, 60, HALF_DT_BF16);
    int32_t idx[3] = { 2, 0, 5 }, bad_idx[2] = { 1, 6 };
    int64_t bad = -1;
    CHECK_INT(0, embedding_forward(want, idx, table, 3, 6, 10, &bad));
    CHECK_INT(0, embedding_forward_half(got, idx, th, 3, 6, 10, HALF_DT_BF16, &bad));
    CHECK(memcmp(want, got, sizeof want) == 0);
    CHECK_INT(-1, embedding_forward_half(got, bad_idx, th, 2, 6, 10, HALF_DT_BF16, &bad));
    CHECK_INT(1, bad);

    /* Which inputs are read in 16 bits, and what the scratch holds then. */
    rt_op few = linear_op(16, 64, 32, HALF_DT_BF16), many = linear_op(17, 64, 32, HALF_DT_BF16);
    rt_op f32 = linear_op(1, 64, 32, HALF_DT_F32);
    CHECK_INT(2, rt_cpu_native_half_inputs(&few));
    CHECK_INT(0, rt_cpu_native_half_inputs(&many));
    CHECK_INT(0, rt_cpu_native_half_inputs(&f32));
    CHECK(rt_op_workspace_floats(&few) < 64 * 32); /* no f32 copy of the 64 x 32 weight */
    CHECK(rt_op_workspace_floats(&many) >= 64 * 32);
    rt_op emb = { .op = OP_EMBEDDING, .n_in = 2, .n_out = 1, .ws_offset = 0 };
    emb.in[0] = (rt_tensor){ .rank = 1, .dtype = HALF_DT_I32, .dim = { 3 } };
    emb.in[1] = (rt_tensor){ .rank = 2, .dtype = HALF_DT_BF16, .dim = { 6, 10 } };
    emb.out[0] = (rt_tensor){ .rank = 2, .dtype = HALF_DT_F32, .dim = { 3, 10 } };
    CHECK_INT(2, rt_cpu_native_half_inputs(&emb));
    CHECK_INT(0, rt_op_workspace_floats(&emb));
    CHECK_DONE();
}
