/* tensor.c: an rt_tensor's size (exec.h), for everything in the runtime
 * that moves or computes one. */
#include "exec.h"

#include <string.h>

#include "cpu/half.h"

int64_t rt_tensor_numel(const rt_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++)
        n *= t->dim[i];
    return n;
}

int64_t rt_tensor_bytes(const rt_tensor *t) { return rt_tensor_numel(t) * half_dtype_bytes(t->dtype); }

int rt_tensor_is_half(const rt_tensor *t) { return t->dtype == HALF_DT_BF16 || t->dtype == HALF_DT_F16; }

void rt_tensor_row_f32(const rt_tensor *t, const char *arena, int64_t row, float *x)
{
    int64_t n = t->dim[t->rank - 1];
    int bytes = half_dtype_bytes(t->dtype);
    const char *at = arena + t->offset + (size_t)(row * n) * (size_t)bytes;
    if (bytes == 2)
        half_to_f32(x, at, n, t->dtype);
    else
        memcpy(x, at, (size_t)n * sizeof *x);
}
