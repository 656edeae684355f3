/* exec.c: the CPU executor: an op run on its CPU kernel (the rows of
 * cpu/op_table.h), its 16-bit tensors widened to f32 around the kernel and
 * the results rounded back (the layout: op_layout.c).  Messages are not
 * its business: the step loop's (step.c). */
#include "exec.h"

#include <stdio.h>

#include "cpu/half.h"
#include "cpu/op_table.h"
#include "op_layout.h"

/* The op's kernel (cpu/op_table.h), on tensors in f32. */
static int run_kernel(const rt_op *op, char *arena, rt_context *ctx)
{
    const rt_cpu_kernel *k = rt_cpu_kernel_of(op->op);
    if (!k || !k->run) {
        snprintf(ctx->msg, sizeof ctx->msg, "op '%s': op kind %d has no CPU kernel", op->name, (int)op->op);
        return -1;
    }
    return k->run(op, arena, ctx);
}

/* run_kernel on f32 copies of op's 16-bit tensors, in its scratch (the layout: op_layout.c). */
static int run_kernel_widened(const rt_op *op, char *arena, rt_context *ctx)
{
    rt_op wide = *op;
    int64_t at = op->ws_offset + rt_op_copies_at_floats(op) * (int64_t)sizeof(float);
    uint32_t native = rt_cpu_native_half_inputs(op);
    for (int i = 0; i < op->n_in; i++) {
        if (!rt_tensor_is_half(&op->in[i]) || (native >> i & 1))
            continue;
        half_to_f32((float *)(arena + at), arena + op->in[i].offset, rt_tensor_numel(&op->in[i]), op->in[i].dtype);
        wide.in[i].offset = at;
        wide.in[i].dtype = HALF_DT_F32;
        at += rt_tensor_copy_floats(&op->in[i]) * (int64_t)sizeof(float);
    }
    for (int i = 0; i < op->n_out; i++) {
        if (!rt_tensor_is_half(&op->out[i]))
            continue;
        wide.out[i].offset = at;
        wide.out[i].dtype = HALF_DT_F32;
        at += rt_tensor_copy_floats(&op->out[i]) * (int64_t)sizeof(float);
    }
    if (run_kernel(&wide, arena, ctx))
        return -1; /* the kernel wrote nothing (kernels.h): neither do we */
    for (int i = 0; i < op->n_out; i++)
        if (rt_tensor_is_half(&op->out[i]))
            half_from_f32(arena + op->out[i].offset, (const float *)(arena + wide.out[i].offset),
                          rt_tensor_numel(&op->out[i]), op->out[i].dtype);
    return 0;
}

int rt_cpu_run(const rt_op *op, char *arena, rt_context *ctx)
{
    uint32_t native = rt_cpu_native_half_inputs(op);
    for (int i = 0; i < op->n_in + op->n_out; i++)
        if (rt_tensor_is_half(i < op->n_in ? &op->in[i] : &op->out[i - op->n_in]) &&
            !(i < op->n_in && (native >> i & 1))) {
            if (op->ws_offset < 0) {
                snprintf(ctx->msg, sizeof ctx->msg, "op '%s' (line %d): 16-bit tensors but no scratch to widen them in",
                         op->name, (int)op->line);
                return -1;
            }
            return run_kernel_widened(op, arena, ctx);
        }
    return run_kernel(op, arena, ctx);
}
