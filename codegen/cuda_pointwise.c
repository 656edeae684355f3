/* cuda_pointwise.c: the CUDA kernels of the pointwise ops, written from
 * their rows (ir/pointwise.h): the row's formula, which is CUDA C as it
 * is C, becomes the body of an elementwise loop over i,
 *
 *     float x = LD(px[i]), z = LD(pz[i]);   ST(y[i], <the forward>);
 *     float x = ..., dy = LD(pdy[i]);       ST(g0[i], <gradient of x>); ST(g1[i], ...);
 *
 * and the helpers the formulas call are in the module's prelude
 * (cuda_plan.c).  Their rows of the lowering table say they are fusable:
 * they touch element i only. */
#include "cuda_kernels_internal.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"

/* Does the formula read the variable `name` (an identifier, not a part of one)? */
static int reads(const char *formula, const char *name)
{
    size_t len = strlen(name);
    for (const char *at = strstr(formula, name); at; at = strstr(at + 1, name)) {
        int before = at > formula && (isalnum((unsigned char)at[-1]) || at[-1] == '_');
        int after = isalnum((unsigned char)at[len]) || at[len] == '_';
        if (!before && !after)
            return 1;
    }
    return 0;
}

/* The loads of the inputs the formulas read: x, z (a two-input op) and dy (a backward). */
static void load_inputs(kbuf *body, const char *const *formulas, int n_formulas, int two, int backward)
{
    static const char *const vars[3] = { "x", "z", "dy" }, *const from[3] = { "px", "pz", "pdy" };
    for (int v = 0; v < 3; v++) {
        if ((v == 1 && !two) || (v == 2 && !backward))
            continue;
        int read = 0;
        for (int f = 0; f < n_formulas; f++)
            read |= reads(formulas[f], vars[v]);
        if (read)
            kb_printf(body, "        float %s = LD(%s[i]);\n", vars[v], from[v]);
    }
}

int lower_pointwise(cuda_plan *p, const rt_op *op) /* (x[, z]) -> y, all (n) */
{
    const op_def *d = &op_table[op->op];
    int two = d->pointwise.inputs == 2;
    kbuf body = { 0 };
    load_inputs(&body, &d->pointwise.forward, 1, two, 0);
    kb_printf(&body, "        ST(y[i], %s);\n", d->pointwise.forward);
    if (body.oom)
        return free(body.text), -1;
    const rt_cuda_arg args[3] = { out_arg(op, 0), in_arg(op, 0), two ? in_arg(op, 1) : arg_none() };
    int rc = elementwise_of(p, d->name, cuda_op_fusable(op->op), rt_tensor_numel(&op->out[0]),
                            two ? "y! px pz" : "y! px", body.text, args, two ? 3 : 2);
    free(body.text);
    return rc;
}

int lower_pointwise_backward(cuda_plan *p, const rt_op *op) /* (x[, z], dy) -> the gradients asked for */
{
    const op_def *d = &op_table[op->op];
    int two = d->pointwise.inputs == 2, n_args = 0;
    const char *wanted[2];
    int n_wanted = 0;
    rt_cuda_arg args[5];
    char names[64] = "";
    kbuf stores = { 0 };
    for (int k = 0; k < d->pointwise.inputs; k++) {
        rt_cuda_arg g = grad_arg(op, k);
        if (!g.kind)
            continue;
        args[n_args++] = g;
        snprintf(names + strlen(names), sizeof names - strlen(names), "g%d! ", k);
        kb_printf(&stores, "        ST(g%d[i], %s);\n", k, d->pointwise.gradient[k]);
        wanted[n_wanted++] = d->pointwise.gradient[k];
    }
    if (n_wanted == 0)
        return free(stores.text), 0;
    args[n_args++] = in_arg(op, 0);
    if (two)
        args[n_args++] = in_arg(op, 1);
    args[n_args++] = in_arg(op, two ? 2 : 1);
    snprintf(names + strlen(names), sizeof names - strlen(names), two ? "px pz pdy" : "px pdy");
    kbuf body = { 0 };
    load_inputs(&body, wanted, n_wanted, two, 1);
    kb_printf(&body, "%s", stores.text ? stores.text : "");
    int rc = body.oom || stores.oom ? -1
                                    : elementwise_of(p, d->name, cuda_op_fusable(op->op), rt_tensor_numel(&op->in[0]),
                                                     names, body.text, args, n_args);
    free(stores.text);
    free(body.text);
    return rc;
}
