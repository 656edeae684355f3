/* test_op_tables: no op lacks a row anywhere.  Every op of the enum has
 * its row in the op table (ir/ops.c: name, shape rule, costs), in the CPU
 * back end (runtime/cpu/op_table.c: a kernel, or the step loop's mark) and
 * in the CUDA back end (codegen/cuda_lowering.c: a lowering); a forward
 * op's backward names it back; a pointwise op's rows (ir/pointwise.h) carry
 * their formulas.  A row forgotten when an op is added fails here, naming
 * the op and the table, instead of at run time on some model. */
#include "check.h"

#include "../../codegen/cuda_kernels.h"
#include "../../ir/ops.h"
#include "../../runtime/cpu/op_table.h"

static const char *name_of(int k) { return op_table[k].name ? op_table[k].name : "(no name)"; }

int main(void)
{
    for (int k = 0; k < OP_COUNT; k++) {
        const op_def *d = &op_table[k];
        const char *name = name_of(k);
        if (!d->name || !d->shape || !d->flops_forward || !d->flops_backward || !d->bytes_forward)
            fprintf(stderr, "op %d (%s): its row of ir/ops.c lacks a name, shape rule or cost\n", k, name);
        CHECK(d->name && d->shape && d->flops_forward && d->flops_backward && d->bytes_forward);
        const rt_cpu_kernel *cpu = rt_cpu_kernel_of(k);
        if (!cpu)
            fprintf(stderr, "op %d (%s): no row in runtime/cpu/op_table.c\n", k, name);
        CHECK(cpu != NULL);
        if (!cuda_op_has_lowering(k))
            fprintf(stderr, "op %d (%s): no row in codegen/cuda_lowering.c\n", k, name);
        CHECK(cuda_op_has_lowering(k));
        if (d->backward != OP_COUNT) { /* forward and backward name each other */
            CHECK_INT(k, op_table[d->backward].forward_of);
            CHECK_INT(d->pointwise.inputs, op_table[d->backward].pointwise.inputs);
        }
        if (d->forward_of != OP_COUNT)
            CHECK_INT(k, op_table[d->forward_of].backward);
        if (d->pointwise.inputs) {
            CHECK(d->pointwise.inputs == 1 || d->pointwise.inputs == 2);
            CHECK(d->pointwise.forward && d->pointwise.gradient[0] && d->pointwise.gradient[1]);
            CHECK_INT(d->pointwise.inputs, d->max_in - (d->forward_of != OP_COUNT));
            CHECK(cuda_op_fusable(k)); /* element i only: the CUDA table lets it fuse */
        }
    }
    /* The rows are the ones pointwise.h made: gelu's formula is its tanh form. */
    CHECK_INT(1, op_table[OP_GELU].pointwise.inputs);
    CHECK(strstr(op_table[OP_GELU].pointwise.forward, "fu_gelu_e(x)") != NULL);
    CHECK_INT(OP_GELU_BACKWARD, op_table[OP_GELU].backward);
    CHECK_INT(OP_COUNT, op_table[OP_ADD].backward); /* its gradient passes through */
    CHECK_STR("mul_backward", op_table[OP_MUL_BACKWARD].name);
    CHECK(!cuda_op_fusable(OP_SOFTMAX)); /* a row that reads a whole row of x */
    printf("%d ops, each with its rows in ir/ops.c, runtime/cpu/op_table.c and codegen/cuda_lowering.c\n", OP_COUNT);
    CHECK_DONE();
}
