/* elementwise.c: copy over n contiguous floats (flatten, its backward,
 * and the graph's copies).  The pointwise ops (gelu, relu, silu, add, mul)
 * are pointwise.c's, made from ir/pointwise.h's rows. */
#include <string.h>

#include "cpu/kernels_internal.h"

// x, y are (n), not overlapping: y = x
void copy_forward(float *y, const float *x, int64_t n)
{
    if (y != x)
        memcpy(y, x, (size_t)n * sizeof *x);
}
