/* cuda_kernels.c: the kernel plan (see cuda_kernels.h), and the kernels of
 * the elementwise, layout and embedding ops and the dense products.
 *
 * A kernel is written as text with its sizes in it, then named by a hash of
 * that text: lowering GPT-2's twelve equal layers adds each kernel once.
 * Elementwise kernels are one thread per element with a grid-stride loop
 * (so the grid is capped); every other kernel is in cuda_kernels_nn.c.
 */
#include "cuda_kernels_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "../ir/ops.h"

/* ---- the prelude --------------------------------------------------------- */

/* Block reductions go through shared memory with a barrier per halving:
 * no warp shuffles, so the CPU emulation harness runs the same text. */
static const char prelude[] =
    "/* fusion: generated CUDA C (codegen/cuda_kernels.c). */\n"
    "typedef struct { char *p[8]; long long step; } fusion_args;\n"
    "#ifndef FUSION_EMULATION\n"
    "#define FUSION_SHARED(type, name, count) __shared__ type name[count]\n"
    "#define FUSION_DYN_SHARED(type, name) extern __shared__ float fusion_dyn_shared_[]; "
    "type *name = (type *)fusion_dyn_shared_\n"
    "#define FUSION_INF __int_as_float(0x7f800000)\n"
    "#endif\n"
    "/* Sum over the block's 256 threads; every thread gets the total, in a\n"
    " * fixed order: 32 partial sums of 8, then one of 32.  Three barriers, not\n"
    " * the nine of a halving tree: the emulation harness pays per barrier,\n"
    " * and on a GPU the two short serial sums cost about the same. */\n"
    "__device__ double fusion_block_sum(double v, double *buf)\n"
    "{\n"
    "    buf[threadIdx.x] = v;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x < 32) {\n"
    "        double s = 0;\n"
    "        for (unsigned k = threadIdx.x; k < blockDim.x; k += 32) s += buf[k];\n"
    "        buf[threadIdx.x] = s;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    double r = 0;\n"
    "    for (unsigned k = 0; k < 32; k++) r += buf[k];\n"
    "    __syncthreads();\n"
    "    return r;\n"
    "}\n"
    "__device__ float fusion_block_max(float v, float *buf)\n"
    "{\n"
    "    buf[threadIdx.x] = v;\n"
    "    __syncthreads();\n"
    "    if (threadIdx.x < 32) {\n"
    "        float m = buf[threadIdx.x];\n"
    "        for (unsigned k = threadIdx.x + 32; k < blockDim.x; k += 32) m = buf[k] > m ? buf[k] : m;\n"
    "        buf[threadIdx.x] = m;\n"
    "    }\n"
    "    __syncthreads();\n"
    "    float r = buf[0];\n"
    "    for (unsigned k = 1; k < 32; k++) r = buf[k] > r ? buf[k] : r;\n"
    "    __syncthreads();\n"
    "    return r;\n"
    "}\n"
    "/* A bad index at pos: the status word keeps the smallest. */\n"
    "__device__ void fusion_report_bad(char *status, long long pos)\n"
    "{\n"
    "    atomicMin((unsigned long long *)status, (unsigned long long)pos);\n"
    "}\n"
    "/* Index in the (H,W) plane of the max of the k x k window at (oh, ow),\n"
    " * padding -inf, the first max in scan order, a NaN wins; -1: all padding\n"
    " * (runtime/cpu/conv.c's window_argmax). */\n"
    "__device__ long long fusion_window_argmax(const float *plane, long long H, long long W, long long k,\n"
    "                                          long long s, long long pad, long long oh, long long ow)\n"
    "{\n"
    "    long long h0 = oh * s - pad, w0 = ow * s - pad;\n"
    "    long long h1 = h0 + k < H ? h0 + k : H, w1 = w0 + k < W ? w0 + k : W;\n"
    "    if (h0 < 0) h0 = 0;\n"
    "    if (w0 < 0) w0 = 0;\n"
    "    if (h0 >= h1 || w0 >= w1) return -1;\n"
    "    long long best = h0 * W + w0;\n"
    "    float m = -FUSION_INF;\n"
    "    for (long long ih = h0; ih < h1; ih++)\n"
    "        for (long long iw = w0; iw < w1; iw++) {\n"
    "            float v = plane[ih * W + iw];\n"
    "            if (v > m || v != v) { m = v; best = ih * W + iw; }\n"
    "        }\n"
    "    return best;\n"
    "}\n";

const char *cuda_kernels_prelude(void) { return prelude; }

/* ---- the plan ------------------------------------------------------------ */

static int grow(void **ptr, int32_t *cap, int32_t need, size_t size)
{
    if (need <= *cap)
        return 0;
    int32_t n = *cap ? *cap * 2 : 64;
    while (n < need)
        n *= 2;
    void *q = realloc(*ptr, (size_t)n * size);
    if (!q)
        return -1;
    *ptr = q;
    *cap = n;
    return 0;
}

static int append_source(cuda_plan *p, const char *s, size_t len)
{
    if (p->source_len + len + 1 > p->source_cap) {
        size_t cap = p->source_cap ? p->source_cap : 1 << 16;
        while (cap < p->source_len + len + 1)
            cap *= 2;
        char *q = realloc(p->source, cap);
        if (!q)
            return p->oom = 1, -1;
        p->source = q;
        p->source_cap = cap;
    }
    memcpy(p->source + p->source_len, s, len);
    p->source_len += len;
    p->source[p->source_len] = '\0';
    return 0;
}

void cuda_plan_init(cuda_plan *p)
{
    memset(p, 0, sizeof *p);
    append_source(p, prelude, sizeof prelude - 1);
}

void cuda_plan_free(cuda_plan *p)
{
    for (int32_t i = 0; i < p->n_kernels; i++)
        free(p->names[i]);
    free(p->names);
    free(p->hashes);
    free(p->steps);
    free(p->ops);
    free(p->source);
    cuda_fusable_free(p);
    memset(p, 0, sizeof *p);
}

void kb_printf(kbuf *kb, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        size_t room = kb->cap - kb->len;
        va_start(ap, fmt);
        int n = kb->text ? vsnprintf(kb->text + kb->len, room, fmt, ap) : -2;
        va_end(ap);
        if (n >= 0 && (size_t)n < room) {
            kb->len += (size_t)n;
            return;
        }
        size_t cap = kb->cap ? kb->cap * 2 : 4096;
        while (n >= 0 && cap < kb->len + (size_t)n + 1)
            cap *= 2;
        char *q = realloc(kb->text, cap);
        if (!q) {
            kb->oom = 1;
            return;
        }
        kb->text = q;
        kb->cap = cap;
    }
}

int32_t kb_finish(cuda_plan *p, kbuf *kb, const char *tag)
{
    int32_t index = -1;
    if (kb->oom || !kb->text)
        goto done;
    uint64_t h = XXH3_64bits_withSeed(kb->text, kb->len, XXH3_64bits(tag, strlen(tag)));
    for (int32_t i = 0; i < p->n_kernels; i++)
        if (p->hashes[i] == h) {
            index = i;
            goto done;
        }
    char name[96], head[256];
    snprintf(name, sizeof name, "f_%s_%016llx", tag, (unsigned long long)h);
    int hn = snprintf(head, sizeof head, "\nextern \"C\" __global__ void __launch_bounds__(%d) %s(const fusion_args a)\n{\n",
                      NT, name);
    if (grow((void **)&p->names, &p->cap_kernels, p->n_kernels + 1, sizeof *p->names) ||
        !(p->hashes = realloc(p->hashes, (size_t)p->cap_kernels * sizeof *p->hashes)) ||
        append_source(p, head, (size_t)hn) || append_source(p, kb->text, kb->len) || append_source(p, "}\n", 2) ||
        !(p->names[p->n_kernels] = strdup(name))) {
        p->oom = 1;
        goto done;
    }
    p->hashes[p->n_kernels] = h;
    index = p->n_kernels++;
done:
    free(kb->text);
    memset(kb, 0, sizeof *kb);
    return index;
}

rt_cuda_arg arg_arena(int64_t offset) { return (rt_cuda_arg){ RT_CUDA_ARG_ARENA, 0, offset }; }
rt_cuda_arg arg_scratch(int64_t offset) { return (rt_cuda_arg){ RT_CUDA_ARG_SCRATCH, 0, offset }; }
rt_cuda_arg arg_none(void) { return (rt_cuda_arg){ RT_CUDA_ARG_NONE, 0, 0 }; }
rt_cuda_arg arg_status(void) { return (rt_cuda_arg){ RT_CUDA_ARG_STATUS, 0, 0 }; }
rt_cuda_arg arg_plus(rt_cuda_arg a, int64_t bytes)
{
    if (a.kind == RT_CUDA_ARG_ARENA || a.kind == RT_CUDA_ARG_SCRATCH)
        a.value += bytes;
    return a;
}

static rt_cuda_step *new_step(cuda_plan *p)
{
    if (grow((void **)&p->steps, &p->cap_steps, p->n_steps + 1, sizeof *p->steps))
        return p->oom = 1, NULL;
    rt_cuda_step *s = &p->steps[p->n_steps++];
    memset(s, 0, sizeof *s);
    return s;
}

int step_kernel(cuda_plan *p, int32_t k, int64_t grid, uint32_t shared_bytes, int check_status, ...)
{
    if (k < 0)
        return -1;
    rt_cuda_step *s = new_step(p);
    if (!s)
        return -1;
    s->kind = RT_CUDA_STEP_KERNEL;
    s->kernel = k;
    s->grid[0] = (uint32_t)grid;
    s->grid[1] = s->grid[2] = 1;
    s->block[0] = NT;
    s->block[1] = s->block[2] = 1;
    s->shared_bytes = shared_bytes;
    s->check_status = check_status;
    va_list ap;
    va_start(ap, check_status);
    for (int i = 0; i < RT_CUDA_MAX_ARGS; i++) {
        rt_cuda_arg a = va_arg(ap, rt_cuda_arg);
        if (a.kind < 0)
            break;
        s->arg[i] = a;
    }
    va_end(ap);
    return 0;
}

int step_gemm(cuda_plan *p, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              rt_cuda_arg A, int64_t lda, int64_t stride_a, rt_cuda_arg B, int64_t ldb, int64_t stride_b,
              float beta, rt_cuda_arg C, int64_t ldc, int64_t stride_c, int64_t batch)
{
    rt_cuda_step *s = new_step(p);
    if (!s)
        return -1;
    s->kind = RT_CUDA_STEP_GEMM;
    s->kernel = -1;
    s->trans_a = trans_a;
    s->trans_b = trans_b;
    s->m = m;
    s->n = n;
    s->k = k;
    s->alpha = alpha;
    s->beta = beta;
    s->arg[0] = A;
    s->arg[1] = B;
    s->arg[2] = C;
    s->lda = lda;
    s->ldb = ldb;
    s->ldc = ldc;
    s->stride_a = stride_a;
    s->stride_b = stride_b;
    s->stride_c = stride_c;
    s->batch = batch;
    return 0;
}

void plan_need_scratch(cuda_plan *p, int64_t bytes)
{
    bytes = (bytes + 255) / 256 * 256;
    if (bytes > p->scratch_bytes)
        p->scratch_bytes = bytes;
}

int64_t grid_for(int64_t n)
{
    int64_t g = (n + NT - 1) / NT;
    return g < 1 ? 1 : g > 65536 ? 65536 : g;
}

rt_cuda_arg in_arg(const rt_op *op, int i) { return arg_arena(op->in[i].offset); }
rt_cuda_arg out_arg(const rt_op *op, int i) { return arg_arena(op->out[i].offset); }

rt_cuda_arg grad_arg(const rt_op *op, int bit)
{
    int64_t mask = op->ints[ATTR_GRADS];
    if (!((mask >> bit) & 1))
        return arg_none();
    int index = 0;
    for (int b = 0; b < bit; b++)
        index += (int)((mask >> b) & 1);
    return index < op->n_out ? out_arg(op, index) : arg_none();
}

const char *flit(char buf[32], double v)
{
    snprintf(buf, 32, "%.9ef", (float)v);
    return buf;
}

/* ---- elementwise kernels ---------------------------------------------------- */

/* gelu, tanh form, through 1 + tanh(u) = 2/(1 + e^-2u) as the CPU kernel
 * (runtime/cpu/elementwise.c) computes it. */
#define GELU_E                                                                                                 \
    "        float xi = x[i], u2 = -2.0f * 0.7978845608028654f * (xi + 0.044715f * xi * xi * xi);\n"              \
    "        float e = expf(u2 > 88.0f ? 88.0f : u2);\n"

static int lower_elementwise(cuda_plan *p, const rt_op *op)
{
    int64_t n = rt_tensor_numel(&op->in[0]);
    switch (op->op) {
    case OP_GELU:       /* y (n) = gelu(x) */
        return elementwise(p, "gelu_fwd", n, "    float *y = (float *)a.p[0];\n    const float *x = (const float *)a.p[1];\n",
                           GELU_E "        y[i] = xi / (1.0f + e);\n", out_arg(op, 0), in_arg(op, 0), ARG_END);
    case OP_GELU_BACKWARD:   /* x, dy -> dx */
        return elementwise(p, "gelu_bwd", n,
                           "    float *dx = (float *)a.p[0];\n    const float *dy = (const float *)a.p[1];\n"
                           "    const float *x = (const float *)a.p[2];\n",
                           GELU_E "        float s = 1.0f / (1.0f + e), oms = e * s;\n"
                                  "        float dinner = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * xi * xi);\n"
                                  "        dx[i] = dy[i] * (s + 2.0f * xi * s * oms * dinner);\n",
                           out_arg(op, 0), in_arg(op, 1), in_arg(op, 0), ARG_END);
    case OP_RELU:
        return elementwise(p, "relu_fwd", n, "    float *y = (float *)a.p[0];\n    const float *x = (const float *)a.p[1];\n",
                           "        y[i] = x[i] > 0.0f ? x[i] : 0.0f;\n", out_arg(op, 0), in_arg(op, 0), ARG_END);
    case OP_RELU_BACKWARD:   /* x, dy -> dx */
        return elementwise(p, "relu_bwd", n,
                           "    float *dx = (float *)a.p[0];\n    const float *dy = (const float *)a.p[1];\n"
                           "    const float *x = (const float *)a.p[2];\n",
                           "        dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;\n", out_arg(op, 0), in_arg(op, 1), in_arg(op, 0),
                           ARG_END);
    case OP_ADD:        /* c may be a or b: element i reads before it writes */
        return elementwise(p, "add", rt_tensor_numel(&op->out[0]),
                           "    float *c = (float *)a.p[0];\n    const float *x = (const float *)a.p[1];\n"
                           "    const float *z = (const float *)a.p[2];\n",
                           "        c[i] = x[i] + z[i];\n", out_arg(op, 0), in_arg(op, 0), in_arg(op, 1), ARG_END);
    default:            /* flatten, its backward, copy: y = x */
        n = rt_tensor_numel(&op->out[0]);
        if (op->out[0].offset == op->in[0].offset)
            return 0;
        return elementwise(p, "copy", n, "    float *y = (float *)a.p[0];\n    const float *x = (const float *)a.p[1];\n",
                           "        y[i] = x[i];\n", out_arg(op, 0), in_arg(op, 0), ARG_END);
    }
}

static int lower_fill(cuda_plan *p, const rt_op *op)
{
    char v[32], body[96];
    snprintf(body, sizeof body, "        y[i] = %s;\n", flit(v, op->floats[ATTR_VALUE]));
    return elementwise(p, "fill", rt_tensor_numel(&op->out[0]), "    float *y = (float *)a.p[0];\n", body, out_arg(op, 0),
                       ARG_END);
}

/* ---- embedding and positions ---------------------------------------------------- */

static int lower_positions(cuda_plan *p, const rt_op *op)
{
    const rt_tensor *o = &op->out[0];
    int64_t T = o->rank > 0 ? o->dim[o->rank - 1] : 1;
    char body[96];
    snprintf(body, sizeof body, "        y[i] = (int)(i %% %lldLL);\n", (long long)T);
    return elementwise(p, "positions", rt_tensor_numel(o), "    int *y = (int *)a.p[0];\n", body, out_arg(op, 0), ARG_END);
}

/* idx (N), table (V,C) -> out (N,C). An id outside [0,V) is reported
 * (its row's first thread) and its row left alone. */
static int lower_embedding(cuda_plan *p, const rt_op *op)
{
    int64_t V = op->in[1].dim[0], C = op->in[1].dim[1], N = rt_tensor_numel(&op->in[0]);
    char body[512];
    snprintf(body, sizeof body,
             "        long long row = i / %lldLL, col = i %% %lldLL;\n"
             "        int v = idx[row];\n"
             "        if (v < 0 || v >= %lld) { if (col == 0) fusion_report_bad(a.p[3], row); }\n"
             "        else out[i] = table[(long long)v * %lldLL + col];\n",
             (long long)C, (long long)C, (long long)V, (long long)C);
    if (elementwise(p, "embedding_fwd", N * C,
                    "    float *out = (float *)a.p[0];\n    const int *idx = (const int *)a.p[1];\n"
                    "    const float *table = (const float *)a.p[2];\n",
                    body, out_arg(op, 0), in_arg(op, 0), in_arg(op, 1), arg_status(), ARG_END))
        return -1;
    p->steps[p->n_steps - 1].check_status = 1;
    return 0;
}

/* idx (N), dout (N,C) -> dtable (V,C): zeroed, then one thread per column
 * adds the rows in token order, as the CPU kernel does (no atomics: equal
 * ids add up in a fixed order). */
static int lower_embedding_backward(cuda_plan *p, const rt_op *op)
{
    int64_t V = op->out[0].dim[0], C = op->out[0].dim[1], N = rt_tensor_numel(&op->in[0]);
    if (elementwise(p, "zero", V * C, "    float *y = (float *)a.p[0];\n", "        y[i] = 0.0f;\n", out_arg(op, 0),
                    ARG_END))
        return -1;
    kbuf kb = { 0 };
    kb_printf(&kb,
              "    float *dtable = (float *)a.p[0];\n"
              "    const float *dout = (const float *)a.p[1];\n"
              "    const int *idx = (const int *)a.p[2];\n"
              "    long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    if (c >= %lldLL) return;\n"
              "    for (long long i = 0; i < %lldLL; i++) {\n"
              "        int v = idx[i];\n"
              "        if (v < 0 || v >= %lld) { if (c == 0) fusion_report_bad(a.p[3], i); continue; }\n"
              "        dtable[(long long)v * %lldLL + c] += dout[i * %lldLL + c];\n"
              "    }\n",
              (long long)C, (long long)N, (long long)V, (long long)C, (long long)C);
    return step_kernel(p, kb_finish(p, &kb, "embedding_bwd"), (C + NT - 1) / NT, 0, 1, out_arg(op, 0), in_arg(op, 1),
                       in_arg(op, 0), arg_status(), ARG_END);
}

/* ---- head split and merge ------------------------------------------------------ */

/* qkv (B,T,3C) <-> q, k, v (B,H,T,D): one thread per element of q. */
static int lower_qkv_split(cuda_plan *p, const rt_op *op, int backward)
{
    int64_t B, T, C, H;
    if (!backward) {
        B = op->in[0].dim[0], T = op->in[0].dim[1], C = op->in[0].dim[2] / 3, H = op->ints[ATTR_HEADS];
    } else {
        const rt_tensor *dq = &op->in[0];
        B = dq->dim[0], T = dq->dim[2], H = dq->dim[1], C = dq->dim[1] * dq->dim[3];
    }
    int64_t D = C / H;
    char body[768];
    snprintf(body, sizeof body,
             "        long long d = i %% %lldLL, t = (i / %lldLL) %% %lldLL, h = (i / %lldLL) %% %lldLL, b = i / %lldLL;\n"
             "        long long r = (b * %lldLL + t) * %lldLL + h * %lldLL + d;\n"
             "%s",
             (long long)D, (long long)D, (long long)T, (long long)(D * T), (long long)H, (long long)(D * T * H),
             (long long)T, (long long)(3 * C), (long long)D,
             backward ? "        qkv[r] = q[i];\n        qkv[r + C] = k[i];\n        qkv[r + 2 * C] = v[i];\n"
                      : "        q[i] = qkv[r];\n        k[i] = qkv[r + C];\n        v[i] = qkv[r + 2 * C];\n");
    char decls[512];
    snprintf(decls, sizeof decls,
             "    %sfloat *q = (%sfloat *)a.p[0], *k = (%sfloat *)a.p[1], *v = (%sfloat *)a.p[2];\n"
             "    %sfloat *qkv = (%sfloat *)a.p[3];\n    const long long C = %lldLL;\n",
             backward ? "const " : "", backward ? "const " : "", backward ? "const " : "", backward ? "const " : "",
             backward ? "" : "const ", backward ? "" : "const ", (long long)C);
    if (!backward)
        return elementwise(p, "qkv_split_fwd", B * T * C, decls, body, out_arg(op, 0), out_arg(op, 1), out_arg(op, 2),
                           in_arg(op, 0), ARG_END);
    return elementwise(p, "qkv_split_bwd", B * T * C, decls, body, in_arg(op, 0), in_arg(op, 1), in_arg(op, 2),
                       out_arg(op, 0), ARG_END);
}

/* x (B,H,T,D) <-> y (B,T,H·D): one thread per element of x. */
static int lower_merge_heads(cuda_plan *p, const rt_op *op, int backward)
{
    const rt_tensor *x = backward ? &op->out[0] : &op->in[0];
    int64_t B = x->dim[0], H = x->dim[1], T = x->dim[2], D = x->dim[3];
    char body[512];
    snprintf(body, sizeof body,
             "        long long d = i %% %lldLL, t = (i / %lldLL) %% %lldLL, h = (i / %lldLL) %% %lldLL, b = i / %lldLL;\n"
             "        long long r = (b * %lldLL + t) * %lldLL + h * %lldLL + d;\n"
             "%s",
             (long long)D, (long long)D, (long long)T, (long long)(D * T), (long long)H, (long long)(D * T * H),
             (long long)T, (long long)(H * D), (long long)D, backward ? "        x[i] = y[r];\n" : "        y[r] = x[i];\n");
    if (!backward)
        return elementwise(p, "merge_heads_fwd", B * H * T * D,
                           "    float *y = (float *)a.p[0];\n    const float *x = (const float *)a.p[1];\n", body,
                           out_arg(op, 0), in_arg(op, 0), ARG_END);
    return elementwise(p, "merge_heads_bwd", B * H * T * D,
                       "    float *x = (float *)a.p[0];\n    const float *y = (const float *)a.p[1];\n", body,
                       out_arg(op, 0), in_arg(op, 0), ARG_END);
}

/* ---- dense: linear and matmul ------------------------------------------------------ */

/* out[j] = Σ_rows a[row][j] in double: one thread per column. */
int lower_column_sums(cuda_plan *p, rt_cuda_arg out, rt_cuda_arg in, int64_t rows, int64_t cols)
{
    kbuf kb = { 0 };
    kb_printf(&kb,
              "    float *out = (float *)a.p[0];\n"
              "    const float *x = (const float *)a.p[1];\n"
              "    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    if (j >= %lldLL) return;\n"
              "    double s = 0;\n"
              "    for (long long r = 0; r < %lldLL; r++) s += x[r * %lldLL + j];\n"
              "    out[j] = (float)s;\n",
              (long long)cols, (long long)rows, (long long)cols);
    return step_kernel(p, kb_finish(p, &kb, "column_sums"), (cols + NT - 1) / NT, 0, 0, out, in, ARG_END);
}

/* x (M,K), w (N,K), b (N)? -> y (M,N) = x·wᵀ + b: the bias broadcast, then
 * one product accumulating onto it. */
static int lower_linear(cuda_plan *p, const rt_op *op)
{
    int64_t K = op->in[1].dim[1], N = op->in[1].dim[0], M = rt_tensor_numel(&op->in[0]) / K;
    if (step_gemm(p, 0, 1, M, N, K, 1.0f, in_arg(op, 0), K, 0, in_arg(op, 1), K, 0, 0.0f, out_arg(op, 0), N, 0, 1))
        return -1;
    if (op->n_in < 3)
        return 0;
    /* The bias after the product, so that the activation or residual add
     * that follows fuses with it (cuda_elementwise.c). */
    return elementwise_bias_rows_add(p, M, N, out_arg(op, 0), in_arg(op, 2));
}

/* x, w, dy -> dx (M,K) = dy·w ; dw (N,K) = dyᵀ·x ; db (N) = Σ_rows dy. */
static int lower_linear_backward(cuda_plan *p, const rt_op *op)
{
    int64_t K = op->in[1].dim[1], N = op->in[1].dim[0], M = rt_tensor_numel(&op->in[0]) / K;
    rt_cuda_arg dx = grad_arg(op, 0), dw = grad_arg(op, 1), db = grad_arg(op, 2);
    if (dx.kind && step_gemm(p, 0, 0, M, K, N, 1.0f, in_arg(op, 2), N, 0, in_arg(op, 1), K, 0, 0.0f, dx, K, 0, 1))
        return -1;
    if (dw.kind && step_gemm(p, 1, 0, N, K, M, 1.0f, in_arg(op, 2), N, 0, in_arg(op, 0), K, 0, 0.0f, dw, K, 0, 1))
        return -1;
    if (db.kind && lower_column_sums(p, db, in_arg(op, 2), M, N))
        return -1;
    return 0;
}

/* a (Bt,M,K), b (Bt,K,N) or (Bt,N,K) or one shared matrix -> c = scale·a·op(b):
 * one strided-batched product (a shared b: one tall product). */
static int lower_matmul(cuda_plan *p, const rt_op *op, int backward)
{
    const rt_tensor *a = &op->in[0], *b = &op->in[1];
    int tb = op->ints[ATTR_TRANSPOSE_B] != 0, b_batched = b->rank > 2;
    int64_t M = a->dim[a->rank - 2], K = a->dim[a->rank - 1];
    int64_t N = b->dim[b->rank - (tb ? 2 : 1)], Bt = rt_tensor_numel(a) / (M * K);
    int64_t ldb = tb ? K : N;
    float scale = (float)op->floats[ATTR_SCALE];
    if (!backward) {
        if (!b_batched)
            return step_gemm(p, 0, tb, Bt * M, N, K, scale, in_arg(op, 0), K, 0, in_arg(op, 1), ldb, 0, 0.0f,
                             out_arg(op, 0), N, 0, 1);
        return step_gemm(p, 0, tb, M, N, K, scale, in_arg(op, 0), K, M * K, in_arg(op, 1), ldb, K * N, 0.0f,
                         out_arg(op, 0), N, M * N, Bt);
    }
    /* a, b, dc -> da = scale·dc·op(b)ᵀ ; db = scale·aᵀ·dc or dcᵀ·a */
    int64_t rows = b_batched ? M : Bt * M, count = b_batched ? Bt : 1;
    rt_cuda_arg da = grad_arg(op, 0), db = grad_arg(op, 1), dc = in_arg(op, 2);
    if (da.kind && step_gemm(p, 0, !tb, rows, K, N, scale, dc, N, rows * N, in_arg(op, 1), ldb, b_batched ? K * N : 0,
                             0.0f, da, K, rows * K, count))
        return -1;
    if (db.kind && !tb &&
        step_gemm(p, 1, 0, K, N, rows, scale, in_arg(op, 0), K, rows * K, dc, N, rows * N, 0.0f, db, N, K * N, count))
        return -1;
    if (db.kind && tb &&
        step_gemm(p, 1, 0, N, K, rows, scale, dc, N, rows * N, in_arg(op, 0), K, rows * K, 0.0f, db, K, K * N, count))
        return -1;
    return 0;
}

/* ---- communication: on the host ------------------------------------------------------ */

static int lower_host(cuda_plan *p)
{
    rt_cuda_step *s = new_step(p);
    if (!s)
        return -1;
    s->kind = RT_CUDA_STEP_HOST;
    s->kernel = -1;
    return 0;
}

/* ---- the dispatch --------------------------------------------------------------------- */

int cuda_plan_add_op(cuda_plan *p, const rt_op *op, struct diag *err)
{
    if (grow((void **)&p->ops, &p->cap_ops, p->n_ops + 1, sizeof *p->ops))
        return diag_set(err, op->name, op->line, "out of memory generating CUDA kernels");
    int32_t first = p->n_steps;
    int rc;
    switch (op->op) {
    case OP_GELU: case OP_GELU_BACKWARD: case OP_RELU: case OP_RELU_BACKWARD: case OP_ADD:
    case OP_FLATTEN: case OP_FLATTEN_BACKWARD: case OP_COPY:
        rc = lower_elementwise(p, op);
        break;
    case OP_FILL:                     rc = lower_fill(p, op); break;
    case OP_POSITIONS:                rc = lower_positions(p, op); break;
    case OP_EMBEDDING:                rc = lower_embedding(p, op); break;
    case OP_EMBEDDING_BACKWARD:       rc = lower_embedding_backward(p, op); break;
    case OP_QKV_SPLIT:                rc = lower_qkv_split(p, op, 0); break;
    case OP_QKV_SPLIT_BACKWARD:       rc = lower_qkv_split(p, op, 1); break;
    case OP_MERGE_HEADS:              rc = lower_merge_heads(p, op, 0); break;
    case OP_MERGE_HEADS_BACKWARD:     rc = lower_merge_heads(p, op, 1); break;
    case OP_LINEAR:                   rc = lower_linear(p, op); break;
    case OP_LINEAR_BACKWARD:          rc = lower_linear_backward(p, op); break;
    case OP_MATMUL:                   rc = lower_matmul(p, op, 0); break;
    case OP_MATMUL_BACKWARD:          rc = lower_matmul(p, op, 1); break;
    case OP_LAYERNORM:                rc = lower_layernorm(p, op); break;
    case OP_LAYERNORM_BACKWARD:       rc = lower_layernorm_backward(p, op); break;
    case OP_BATCHNORM:                rc = lower_batchnorm(p, op); break;
    case OP_BATCHNORM_BACKWARD:       rc = lower_batchnorm_backward(p, op); break;
    case OP_SOFTMAX:                  rc = lower_softmax(p, op); break;
    case OP_SOFTMAX_BACKWARD:         rc = lower_softmax_backward(p, op); break;
    case OP_ATTENTION:                rc = lower_attention(p, op); break;
    case OP_ATTENTION_BACKWARD:       rc = lower_attention_backward(p, op); break;
    case OP_CROSS_ENTROPY:            rc = lower_cross_entropy(p, op); break;
    case OP_CROSS_ENTROPY_BACKWARD:   rc = lower_cross_entropy_backward(p, op); break;
    case OP_CONV2D:                   rc = lower_conv2d(p, op); break;
    case OP_CONV2D_BACKWARD:          rc = lower_conv2d_backward(p, op); break;
    case OP_MAXPOOL:                  rc = lower_maxpool(p, op, 0); break;
    case OP_MAXPOOL_BACKWARD:         rc = lower_maxpool(p, op, 1); break;
    case OP_AVGPOOL_GLOBAL:           rc = lower_avgpool(p, op, 0); break;
    case OP_AVGPOOL_GLOBAL_BACKWARD:  rc = lower_avgpool(p, op, 1); break;
    case OP_SUM_SQUARES:              rc = lower_sum_squares(p, op); break;
    case OP_CLIP_SCALE:               rc = lower_clip_scale(p, op); break;
    case OP_LR_SCHEDULE:              rc = lower_lr_schedule(p, op); break;
    case OP_ADAMW:                    rc = lower_adamw(p, op); break;
    case OP_SEND: case OP_RECV: case OP_ALLREDUCE:
        rc = lower_host(p);
        break;
    default:
        return diag_set(err, op->name, op->line, "op '%s': %s has no CUDA kernel", op->name,
                        op->op >= 0 && op->op < OP_COUNT ? op_table[op->op].name : "this op kind");
    }
    if (rc == -2)
        return diag_set(err, op->name, op->line,
                        "op '%s' (%s): sizes the CUDA kernels do not take yet (attention: T <= 6144; convolution: "
                        "a workspace from the memory pass)", op->name, op_table[op->op].name);
    if (rc || p->oom)
        return diag_set(err, op->name, op->line, "out of memory generating CUDA kernels for op '%s'", op->name);
    p->ops[p->n_ops].first = first;
    p->ops[p->n_ops].count = p->n_steps - first;
    p->n_ops++;
    return 0;
}
