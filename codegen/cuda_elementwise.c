/* cuda_elementwise.c: elementwise kernels, and the fusion of a chain of
 * them into one launch (cuda_kernels_internal.h: elementwise).
 *
 * An elementwise kernel is a grid-stride loop over n elements whose body
 * computes element i.  Each op's body sits in its own block, its pointers
 * declared inside it:
 *
 *     for (i = ...; i < n; i += ...) {
 *         { __nv_bfloat16 *y = (__nv_bfloat16 *)a.p[0]; const float *x = (const float *)a.p[1];
 *           ST(y[i], ...LD(x[i])...); }
 *     }
 *
 * so two of them fuse by putting the second's block after the first's in
 * one loop, its a.p[] indices shifted past the first's arguments.  That is
 * done when the plan allows it (cuda_plan.fuse: the code generator's
 * plans; the emulation harness checks ops one by one) and:
 *
 *   - the kernel before is the plan's last step, an elementwise kernel of
 *     the same group (the caller's label: the phase, so a forward's kernel
 *     never takes a backward's work) over the same n;
 *   - both are fusable: kernels of the pointwise ops (ir/pointwise.h),
 *     which touch element i only, or bias_rows_add, which reads a
 *     broadcast parameter besides (b[i % N]);
 *   - together they take at most RT_CUDA_MAX_ARGS pointers;
 *   - each pointer of one either is a pointer of the other (same place and
 *     dtype: a thread reads element i before it writes it, in op order) or
 *     names memory n elements away from it; a broadcast pointer must be
 *     apart.
 *     Then no thread reads what another writes, and the fused loop computes
 *     what the two launches did.
 *
 * It pays: one launch and one pass over memory instead of two.  In GPT-2
 * every linear's bias joins the activation or the residual add after it
 * (lower_linear: the product first, then y[i] += b[i % N]): three launches
 * a layer fewer in the forward.
 */
#include "cuda_kernels_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "        {\n" decls body "        }\n", with every a.p[K] of decls as a.p[K + shift]. */
static char *block_text(const char *decls, const char *body, int32_t shift)
{
    size_t cap = strlen(decls) + strlen(body) + 64 + 8 * RT_CUDA_MAX_ARGS;
    char *out = malloc(cap), *w = out;
    if (!out)
        return NULL;
    w += sprintf(w, "        {\n");
    for (const char *r = decls; *r;) {
        if (strncmp(r, "a.p[", 4) == 0) {
            char *end;
            long k = strtol(r + 4, &end, 10);
            w += sprintf(w, "a.p[%ld", k + shift);
            r = end;
        } else {
            *w++ = *r++;
        }
    }
    w += sprintf(w, "%s        }\n", body);
    return out;
}

static int32_t finish_loop(cuda_plan *p, int64_t n, const char *parts, const char *tag)
{
    kbuf kb = { 0 };
    kb_printf(&kb,
              "    const long long n = %lldLL;\n"
              "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;\n"
              "         i += (long long)gridDim.x * blockDim.x) {\n"
              "%s"
              "    }\n",
              (long long)n, parts);
    return kb_finish(p, &kb, tag);
}

/* May the last step take this kernel (the rules at the top)? */
static int can_join(const cuda_plan *p, const struct cuda_fusable *f, int64_t n, const rt_cuda_arg *args,
                    const int64_t *bytes, int32_t n_args, uint32_t broadcast)
{
    if (!p->fuse || !f || !f->valid || f->step != p->n_steps - 1 || f->group != p->group || f->n != n ||
        f->n_args + n_args > RT_CUDA_MAX_ARGS)
        return 0;
    const rt_cuda_step *s = &p->steps[f->step];
    for (int32_t a = 0; a < f->n_args; a++)
        for (int32_t b = 0; b < n_args; b++) {
            const rt_cuda_arg *x = &s->arg[a], *y = &args[b];
            if (x->kind != RT_CUDA_ARG_ARENA || y->kind != RT_CUDA_ARG_ARENA)
                return 0;
            int either_broadcast = ((f->broadcast >> a) & 1) || ((broadcast >> b) & 1);
            if (x->value == y->value ? either_broadcast || x->dtype != y->dtype
                                     : x->value < y->value + bytes[b] && y->value < x->value + f->bytes[a])
                return 0;
        }
    return 1;
}

/* The kernel of elementwise(): args[k] spans bytes[k]; broadcast as in cuda_fusable. */
static int add_elementwise(cuda_plan *p, const char *tag, int fusable, int64_t n, const char *decls, const char *body,
                           const rt_cuda_arg *args, const int64_t *bytes, int32_t n_args, uint32_t broadcast)
{
    if (!p->fusable && !(p->fusable = calloc(1, sizeof *p->fusable)))
        return p->oom = 1, -1;
    struct cuda_fusable *f = p->fusable;
    if (fusable && can_join(p, f, n, args, bytes, n_args, broadcast)) {
        char *block = block_text(decls, body, f->n_args);
        char *parts = block ? malloc(strlen(f->parts) + strlen(block) + 1) : NULL;
        if (!parts) {
            free(block);
            return p->oom = 1, -1;
        }
        strcpy(parts, f->parts);
        strcat(parts, block);
        free(block);
        if (f->kernel_new) { /* only the last step launched it: take it out of the module */
            p->n_kernels--;
            free(p->names[p->n_kernels]);
            p->source_len = f->source_len_before;
            p->source[p->source_len] = '\0';
        }
        char joined[64];
        snprintf(joined, sizeof joined, "%.31s_%.31s", f->tag, tag); /* the name says what it runs */
        size_t before = p->source_len;
        int32_t kernels = p->n_kernels, k = finish_loop(p, n, parts, joined);
        if (k < 0) {
            free(parts);
            return -1;
        }
        rt_cuda_step *s = &p->steps[f->step];
        s->kernel = k;
        memcpy(&s->arg[f->n_args], args, (size_t)n_args * sizeof *args);
        memcpy(&f->bytes[f->n_args], bytes, (size_t)n_args * sizeof *bytes);
        free(f->parts);
        f->parts = parts;
        snprintf(f->tag, sizeof f->tag, "%s", joined);
        f->broadcast |= broadcast << f->n_args;
        f->n_args += n_args;
        f->kernel_new = p->n_kernels > kernels;
        f->source_len_before = before;
        return 0;
    }
    char *block = block_text(decls, body, 0);
    if (!block)
        return p->oom = 1, -1;
    size_t before = p->source_len;
    int32_t kernels = p->n_kernels, k = finish_loop(p, n, block, tag);
    if (k < 0 || step_kernel(p, k, grid_for(n), 0, 0, ARG_END)) {
        free(block);
        return -1;
    }
    memcpy(p->steps[p->n_steps - 1].arg, args, (size_t)n_args * sizeof *args);
    free(f->parts);
    *f = (struct cuda_fusable){ .valid = fusable,
                                .step = p->n_steps - 1,
                                .group = p->group,
                                .n = n,
                                .parts = block,
                                .n_args = n_args,
                                .broadcast = broadcast,
                                .kernel_new = p->n_kernels > kernels,
                                .source_len_before = before };
    memcpy(f->bytes, bytes, (size_t)n_args * sizeof *bytes);
    snprintf(f->tag, sizeof f->tag, "%s", tag);
    return 0;
}

/* The pointer declarations of names (kb_ptrs) for args, then the kernel. */
static int add_declared(cuda_plan *p, const char *tag, int fusable, int64_t n, const char *names, const char *body,
                        const rt_cuda_arg *args, const int64_t *bytes, int32_t n_args, uint32_t broadcast)
{
    kbuf decls = { 0 };
    kb_printf(&decls, "%s", "");
    kb_ptrs(&decls, names, args, n_args);
    int rc = decls.oom ? (p->oom = 1, -1)
                       : add_elementwise(p, tag, fusable, n, decls.text, body, args, bytes, n_args, broadcast);
    free(decls.text);
    return rc;
}

int elementwise_of(cuda_plan *p, const char *tag, int fusable, int64_t n, const char *names, const char *body,
                   const rt_cuda_arg *args, int32_t n_args)
{
    int64_t bytes[RT_CUDA_MAX_ARGS];
    for (int32_t k = 0; k < n_args && k < RT_CUDA_MAX_ARGS; k++)
        bytes[k] = dtype_bytes(args[k].dtype) * n;
    return add_declared(p, tag, fusable, n, names, body, args, bytes, n_args, 0);
}

int elementwise(cuda_plan *p, const char *tag, int64_t n, const char *names, const char *body, ...)
{
    rt_cuda_arg args[RT_CUDA_MAX_ARGS];
    int32_t n_args = 0;
    va_list ap;
    va_start(ap, body);
    for (; n_args < RT_CUDA_MAX_ARGS; n_args++) {
        rt_cuda_arg a = va_arg(ap, rt_cuda_arg);
        if (a.kind < 0)
            break;
        args[n_args] = a;
    }
    va_end(ap);
    return elementwise_of(p, tag, 0, n, names, body, args, n_args);
}

int elementwise_bias_rows_add(cuda_plan *p, int64_t rows, int64_t cols, rt_cuda_arg y, rt_cuda_arg b)
{
    char body[96];
    snprintf(body, sizeof body, "        ST(y[i], LD(y[i]) + LD(b[i %% %lldLL]));\n", (long long)cols);
    const rt_cuda_arg args[2] = { y, b };
    const int64_t bytes[2] = { dtype_bytes(y.dtype) * rows * cols, dtype_bytes(b.dtype) * cols };
    return add_declared(p, "bias_rows_add", 1, rows * cols, "y! b", body, args, bytes, 2, 1u << 1);
}
