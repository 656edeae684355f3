/* op_table.h: the CPU back end, one row an op (op_table.c).
 *
 * A row says how the op runs on a CPU: the call of its kernel (kernels.h)
 * with the dims read from its tensors, the scratch that kernel needs, and
 * which inputs are matrix-product operands (what a 16-bit product reads
 * rounded: exec.h).  The memory pass sizes each op's scratch from the rows
 * (exec.h: rt_op_workspace_floats), and exec.c runs them.  Messages (send,
 * recv, allreduce) are the step loop's: their rows say so and have no run.
 * tests/unit/test_op_tables.c checks that no op lacks a row. */
#ifndef FUSION_RT_CPU_OP_TABLE_H
#define FUSION_RT_CPU_OP_TABLE_H

#include "exec.h"

typedef struct {
    /* Runs the op on the arena: 0, or -1 with ctx->msg (bad data: a token
     * id or target out of range). */
    int (*run)(const rt_op *op, char *arena, rt_context *ctx);
    int64_t (*workspace_floats)(const rt_op *op); /* the kernel's scratch; NULL: none    */
    uint32_t (*product_inputs)(const rt_op *op);  /* bit i: input i a product operand;
                                                        NULL: no products                 */
    int step_loop;                                /* 1: a message, run by the step loop */
    uint32_t (*native_half)(const rt_op *op);     /* bit i: 16-bit input i read as it is, no f32
                                                        copy (an inference step's weights); NULL: none */
} rt_cpu_kernel;

extern const rt_cpu_kernel rt_cpu_kernels[];

/* op's row, or NULL when it has none (an op kind out of range, or a row
 * left empty: the completeness test's business). */
const rt_cpu_kernel *rt_cpu_kernel_of(int32_t op);
/* The inputs of op its kernel reads in 16 bits as they are (bits); the
 * others of 16 bits it gets as f32 copies (exec.c). */
uint32_t rt_cpu_native_half_inputs(const rt_op *op);

#endif
