/* embedding.c: table lookup (token embedding) and position indices.
 *
 * An index outside the table is an input error (a bad token file), not a
 * bug: both directions check every index before writing, return -1 with the
 * position of the first bad one, and leave their output untouched. Clamping
 * would train silently on the wrong rows.
 */
#include <string.h>

#include "cpu/half.h"
#include "cpu/kernels_internal.h"

/* 0 when every idx[i] is in [0,V); else -1 and *bad_pos = first bad i. */
static int check_indices(const int32_t *idx, int64_t N, int64_t V, int64_t *bad_pos)
{
    for (int64_t i = 0; i < N; i++) {
        if (idx[i] < 0 || idx[i] >= V) {
            if (bad_pos)
                *bad_pos = i;
            return -1;
        }
    }
    return 0;
}

// The same from a 16-bit table: only the N rows read are widened
int embedding_forward_half(float *out, const int32_t *idx, const uint16_t *table, int64_t N, int64_t V, int64_t C,
                           int dtype, int64_t *bad_pos)
{
    if (check_indices(idx, N, V, bad_pos))
        return -1;
    for (int64_t i = 0; i < N; i++)
        half_to_f32(out + i * C, table + (int64_t)idx[i] * C, C, dtype);
    return 0;
}

// idx is (N) in [0,V), table is (V,C), out is (N,C): out[i] = table[idx[i]]
int embedding_forward(float *out, const int32_t *idx, const float *table, int64_t N, int64_t V, int64_t C,
                      int64_t *bad_pos)
{
    if (check_indices(idx, N, V, bad_pos))
        return -1;
#pragma omp parallel for schedule(static) if (N * C >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < N; i++)
        memcpy(out + i * C, table + (int64_t)idx[i] * C, (size_t)C * sizeof *table);
    return 0;
}

// dout is (N,C), idx is (N), dtable is (V,C):
// dtable = 0, then dtable[idx[i]] += dout[i] for each i (repeats add up).
// The scatter is serial over i (two rows may hit one table row) and
// vectorised over C; the zeroing of the (large) table is what dominates.
int embedding_backward(float *dtable, const float *dout, const int32_t *idx, int64_t N, int64_t V, int64_t C,
                       int64_t *bad_pos)
{
    if (check_indices(idx, N, V, bad_pos))
        return -1;
#pragma omp parallel for schedule(static) if (V * C >= KERNEL_PAR_MIN)
    for (int64_t v = 0; v < V; v++)
        memset(dtable + v * C, 0, (size_t)C * sizeof *dtable);
    for (int64_t i = 0; i < N; i++) {
        float *row = dtable + (int64_t)idx[i] * C;
        const float *g = dout + i * C;
        for (int64_t j = 0; j < C; j++)
            row[j] += g[j];
    }
    return 0;
}

// out is (B,T) int32: out[b][t] = t
void positions_forward(int32_t *out, int64_t B, int64_t T)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            out[b * T + t] = (int32_t)t;
}
