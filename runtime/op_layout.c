/* op_layout.c: the layout of an rt_op's scratch (exec.h:
 * rt_op_workspace_floats), the same for the CPU executor (exec.c), the
 * CUDA back end and the memory pass, which sizes every op's scratch here
 * from the CPU back end's rows (cpu/op_table.h). */
#include "op_layout.h"

#include "cpu/half.h"
#include "cpu/op_table.h"

/* ---- 16-bit tensors and the scratch (exec.h: rt_op_workspace_floats) ------
 *
 * The CPU kernels compute in f32.  An op some of whose float tensors are
 * stored in bf16 or fp16 runs its f32 kernel on f32 copies in its scratch,
 * after the kernel's own scratch:
 *
 *   [kernel scratch][copy of 16-bit tensor 1][copy 2]...   each 64-byte aligned
 *
 * each 16-bit input widened (exact), each 16-bit output written there by the
 * kernel and rounded into its place (nearest even).  So products and
 * reductions accumulate in f32 (in double, where the kernels do) and only
 * what is stored is rounded, as with tensor cores.  f32 inputs, the
 * parameters among them, are read as they are: a CPU multiplies in f32
 * anyway, and rounding a weight first would cost a copy of it per product.
 * The CUDA path rounds them (cuBLAS wants both operands in one type) into
 * the same place, after the same kernel scratch:
 *
 *   [kernel scratch][16-bit copy of f32 product input 1][copy 2]...
 *
 * The two differ by less than the 16-bit format's own rounding of the
 * result (the emulation harness measures it: tests/unit/cuda_cases.c).
 * bench/bench_bf16_gemm.c and bench_precision.sh measure what the CPU's copies cost. */
int64_t rt_tensor_copy_floats(const rt_tensor *t) { return (rt_tensor_numel(t) + 15) / 16 * 16; }
/* A 16-bit copy of t in floats, 64-byte aligned (32 elements a line). */
static int64_t half_copy_floats(const rt_tensor *t) { return (rt_tensor_numel(t) + 31) / 32 * 16; }

static int64_t half_copies_floats(const rt_op *op)
{
    int64_t floats = 0;
    uint32_t native = rt_cpu_native_half_inputs(op); /* read as they are: no copy */
    for (int i = 0; i < op->n_in; i++)
        floats += rt_tensor_is_half(&op->in[i]) && !(native >> i & 1) ? rt_tensor_copy_floats(&op->in[i]) : 0;
    for (int i = 0; i < op->n_out; i++)
        floats += rt_tensor_is_half(&op->out[i]) ? rt_tensor_copy_floats(&op->out[i]) : 0;
    return floats;
}

int32_t rt_op_product_dtype(const rt_op *op)
{
    if (!op_is_product(op->op))
        return HALF_DT_F32;
    for (int i = 0; i < op->n_in; i++)
        if (rt_tensor_is_half(&op->in[i]))
            return op->in[i].dtype;
    for (int i = 0; i < op->n_out; i++)
        if (rt_tensor_is_half(&op->out[i]))
            return op->out[i].dtype;
    return HALF_DT_F32;
}

uint32_t rt_op_product_inputs(const rt_op *op)
{
    const rt_cpu_kernel *k = rt_cpu_kernel_of(op->op);
    return k && k->product_inputs ? k->product_inputs(op) : 0;
}

static int64_t kernel_workspace_floats(const rt_op *op)
{
    const rt_cpu_kernel *k = rt_cpu_kernel_of(op->op);
    return k && k->workspace_floats ? k->workspace_floats(op) : 0;
}

/* The kernel's part, rounded up so that the copies start 64-byte aligned. */
int64_t rt_op_copies_at_floats(const rt_op *op) { return (kernel_workspace_floats(op) + 15) / 16 * 16; }

int64_t rt_op_rounded_input_at(const rt_op *op, int i)
{
    if (rt_op_product_dtype(op) == HALF_DT_F32)
        return -1;
    uint32_t inputs = rt_op_product_inputs(op);
    int64_t at = rt_op_copies_at_floats(op);
    for (int k = 0; k < op->n_in; k++) {
        if (!((inputs >> k) & 1) || op->in[k].dtype != HALF_DT_F32)
            continue;
        if (k == i)
            return at * (int64_t)sizeof(float);
        at += half_copy_floats(&op->in[k]);
    }
    return -1;
}

/* The CUDA layout's copies, in floats. */
static int64_t rounded_inputs_floats(const rt_op *op)
{
    int64_t floats = 0;
    for (int k = 0; k < op->n_in; k++)
        if (rt_op_rounded_input_at(op, k) >= 0)
            floats += half_copy_floats(&op->in[k]);
    return floats;
}

int64_t rt_op_workspace_floats(const rt_op *op)
{
    int64_t cpu = half_copies_floats(op), cuda = rounded_inputs_floats(op);
    int64_t copies = cpu > cuda ? cpu : cuda;
    return copies ? rt_op_copies_at_floats(op) + copies : kernel_workspace_floats(op);
}
