/* cuda_kernels.c: the kernel plan (see cuda_kernels.h), and the kernels of
 * the elementwise, layout and embedding ops and the dense products.
 *
 * A kernel is written as text with its sizes in it, then named by a hash of
 * that text: lowering GPT-2's twelve equal layers adds each kernel once.
 * Elementwise kernels are one thread per element with a grid-stride loop
 * (so the grid is capped), rope one per pair it rotates, split and concat
 * one per element of the whole tensor; the kernels with reductions are in
 * cuda_kernels_nn.c and cuda_kernels_attention.c.
 */
#include "cuda_kernels_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "../ir/ops.h"

/* ---- the prelude --------------------------------------------------------- */

/* Block reductions go through shared memory with a barrier per halving:
 * no warp shuffles, so the CPU emulation harness runs the same text.
 *
 * Storage and arithmetic: a tensor is stored as float, __nv_bfloat16
 * (cuda_bf16.h) or __half (cuda_fp16.h), its dtype (ctype() below), and a
 * kernel reads it with LD(), to float, computes in float (sums in double)
 * and writes with ST(), rounding to nearest even.  The headers' operators
 * and implicit conversions are off: a read or write that does not say LD
 * or ST does not compile.  Under FUSION_EMULATION the harness supplies the
 * two types and their four conversions (tests/unit/cuda_emu.h). */
static const char prelude[] =   /* fusion_args: runtime/cuda/cuda_program.h's rt_cuda_args */
    "/* fusion: generated CUDA C (codegen/cuda_kernels.c). */\n"
    "typedef struct { char *p[8]; long long step, adam_step; float loss_scale; int inject_overflow; } fusion_args;\n"
    "#ifndef FUSION_EMULATION\n"
    "#define FUSION_SHARED(type, name, count) __shared__ type name[count]\n"
    "#define FUSION_DYN_SHARED(type, name) extern __shared__ float fusion_dyn_shared_[]; "
    "type *name = (type *)fusion_dyn_shared_\n"
    "#define FUSION_INF __int_as_float(0x7f800000)\n"
    "#define FUSION_NAN __int_as_float(0x7fffffff)\n"
    "#define __CUDA_NO_HALF_OPERATORS__\n"
    "#define __CUDA_NO_HALF_CONVERSIONS__\n"
    "#define __CUDA_NO_BFLOAT16_OPERATORS__\n"
    "#define __CUDA_NO_BFLOAT16_CONVERSIONS__\n"
    "#include <cuda_bf16.h>\n"
    "#include <cuda_fp16.h>\n"
    "#endif\n"
    "__device__ float fusion_ld(float v) { return v; }\n"
    "__device__ float fusion_ld(__nv_bfloat16 v) { return __bfloat162float(v); }\n"
    "__device__ float fusion_ld(__half v) { return __half2float(v); }\n"
    "__device__ void fusion_st(float *p, float v) { *p = v; }\n"
    "__device__ void fusion_st(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }\n"
    "__device__ void fusion_st(__half *p, float v) { *p = __float2half_rn(v); }\n"
    "#define LD(v) fusion_ld(v)\n"
    "#define ST(ref, v) fusion_st(&(ref), (v))\n"
    "/* Not inf, not NaN. */\n"
    "__device__ bool fusion_finite(double v) { return v - v == 0.0; }\n"
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
    "template <typename T>\n"
    "__device__ long long fusion_window_argmax(const T *plane, long long H, long long W, long long k,\n"
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
    "            float v = LD(plane[ih * W + iw]);\n"
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

rt_cuda_arg arg_arena(int64_t offset, int32_t dtype) { return (rt_cuda_arg){ RT_CUDA_ARG_ARENA, dtype, offset }; }
rt_cuda_arg arg_scratch(int64_t offset) { return (rt_cuda_arg){ RT_CUDA_ARG_SCRATCH, DT_F32, offset }; }
rt_cuda_arg arg_none(void) { return (rt_cuda_arg){ RT_CUDA_ARG_NONE, DT_F32, 0 }; }
rt_cuda_arg arg_status(void) { return (rt_cuda_arg){ RT_CUDA_ARG_STATUS, DT_I32, 0 }; }
rt_cuda_arg arg_flags(void) { return (rt_cuda_arg){ RT_CUDA_ARG_FLAGS, DT_I32, 0 }; }
rt_cuda_arg arg_elems(rt_cuda_arg a, int64_t elements)
{
    if (a.kind == RT_CUDA_ARG_ARENA || a.kind == RT_CUDA_ARG_SCRATCH)
        a.value += elements * dtype_bytes(a.dtype);
    return a;
}

/* ---- storage types ------------------------------------------------------------ */

const char *ctype(int32_t dtype)
{
    switch (dtype) {
    case DT_BF16: return "__nv_bfloat16";
    case DT_F16:  return "__half";
    case DT_I32:  return "int";
    default:      return "float";
    }
}

int64_t dtype_bytes(int32_t dtype) { return dtype == DT_BF16 || dtype == DT_F16 ? 2 : 4; }

void kb_ptr(kbuf *kb, const char *name, int index, rt_cuda_arg arg, int writable, const char *offset)
{
    const char *c = writable ? "" : "const ", *t = ctype(arg.dtype);
    kb_printf(kb, "    %s%s *%s = (%s%s *)a.p[%d]%s;\n", c, t, name, c, t, index, offset ? offset : "");
}

void kb_ptrs(kbuf *kb, const char *names, const rt_cuda_arg *args, int n_args)
{
    const char *at = names;
    for (int i = 0; i < n_args && *at; i++) {
        while (*at == ' ')
            at++;
        size_t len = strcspn(at, " ");
        if (len > 0 && !(len == 1 && at[0] == '-')) {
            char name[32];
            int writable = at[len - 1] == '!';
            snprintf(name, sizeof name, "%.*s", (int)(len - (size_t)writable), at);
            kb_ptr(kb, name, i, args[i], writable, "");
        }
        at += len;
    }
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
    int half_c = C.dtype == DT_BF16 || C.dtype == DT_F16;
    if (A.dtype != B.dtype || (A.dtype != DT_F32 && A.dtype != DT_BF16 && A.dtype != DT_F16) ||
        (C.dtype != DT_F32 && C.dtype != A.dtype) || (half_c && A.dtype == DT_F32))
        return -3;   /* cuBLAS has no such product: the lowering should have rounded an operand */
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

rt_cuda_arg in_arg(const rt_op *op, int i) { return arg_arena(op->in[i].offset, op->in[i].dtype); }
rt_cuda_arg out_arg(const rt_op *op, int i) { return arg_arena(op->out[i].offset, op->out[i].dtype); }

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
    "        float xi = LD(x[i]), u2 = -2.0f * 0.7978845608028654f * (xi + 0.044715f * xi * xi * xi);\n"          \
    "        float e = expf(u2 > 88.0f ? 88.0f : u2);\n"

/* silu's e = e^-x, -x capped at 88 as runtime/cpu/elementwise.c caps it. */
#define SILU_E "        float xi = LD(x[i]), na = -xi, e = expf(na > 88.0f ? 88.0f : na);\n"
#define MUL_BODY "        ST(c[i], LD(x[i]) * LD(z[i]));\n"

static int lower_elementwise(cuda_plan *p, const rt_op *op)
{
    int64_t n = rt_tensor_numel(&op->in[0]);
    switch (op->op) {
    case OP_GELU:       /* y (n) = gelu(x) */
        return elementwise(p, "gelu_fwd", n, "y! x", GELU_E "        ST(y[i], xi / (1.0f + e));\n", out_arg(op, 0),
                           in_arg(op, 0), ARG_END);
    case OP_GELU_BACKWARD:   /* x, dy -> dx */
        return elementwise(p, "gelu_bwd", n, "dx! dy x",
                           GELU_E "        float s = 1.0f / (1.0f + e), oms = e * s;\n"
                                  "        float dinner = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * xi * xi);\n"
                                  "        ST(dx[i], LD(dy[i]) * (s + 2.0f * xi * s * oms * dinner));\n",
                           out_arg(op, 0), in_arg(op, 1), in_arg(op, 0), ARG_END);
    case OP_RELU:
        return elementwise(p, "relu_fwd", n, "y! x", "        float xi = LD(x[i]);\n        ST(y[i], xi > 0.0f ? xi : 0.0f);\n",
                           out_arg(op, 0), in_arg(op, 0), ARG_END);
    case OP_RELU_BACKWARD:   /* x, dy -> dx */
        return elementwise(p, "relu_bwd", n, "dx! dy x", "        ST(dx[i], LD(x[i]) > 0.0f ? LD(dy[i]) : 0.0f);\n",
                           out_arg(op, 0), in_arg(op, 1), in_arg(op, 0), ARG_END);
    case OP_SILU:       /* y (n) = x / (1 + e^-x), the exponent capped as the CPU's */
        return elementwise(p, "silu_fwd", n, "y! x", SILU_E "        ST(y[i], xi / (1.0f + e));\n", out_arg(op, 0),
                           in_arg(op, 0), ARG_END);
    case OP_SILU_BACKWARD:   /* x, dy -> dx = dy·s·(1 + x·(1 - s)), s = sigmoid(x) */
        return elementwise(p, "silu_bwd", n, "dx! dy x",
                           SILU_E "        float s = 1.0f / (1.0f + e);\n"
                                  "        ST(dx[i], LD(dy[i]) * s * (1.0f + xi * (1.0f - s)));\n",
                           out_arg(op, 0), in_arg(op, 1), in_arg(op, 0), ARG_END);
    case OP_MUL:        /* c = a·b; c may be a or b */
        return elementwise(p, "mul", rt_tensor_numel(&op->out[0]), "c! x z", MUL_BODY, out_arg(op, 0), in_arg(op, 0),
                           in_arg(op, 1), ARG_END);
    case OP_MUL_BACKWARD: {  /* a, b, dy -> da = dy·b, db = dy·a (either not wanted) */
        rt_cuda_arg da = grad_arg(op, 0), db = grad_arg(op, 1);
        n = rt_tensor_numel(&op->in[2]);
        if (da.kind && elementwise(p, "mul", n, "c! x z", MUL_BODY, da, in_arg(op, 2), in_arg(op, 1), ARG_END))
            return -1;
        if (db.kind && elementwise(p, "mul", n, "c! x z", MUL_BODY, db, in_arg(op, 2), in_arg(op, 0), ARG_END))
            return -1;
        return 0;
    }
    case OP_ADD:        /* c may be a or b: element i reads before it writes */
        return elementwise(p, "add", rt_tensor_numel(&op->out[0]), "c! x z", "        ST(c[i], LD(x[i]) + LD(z[i]));\n",
                           out_arg(op, 0), in_arg(op, 0), in_arg(op, 1), ARG_END);
    default:            /* flatten, its backward, copy: y = x (bits as they are when the types agree) */
        n = rt_tensor_numel(&op->out[0]);
        if (op->out[0].offset == op->in[0].offset && op->out[0].dtype == op->in[0].dtype)
            return 0;
        return elementwise(p, "copy", n, "y! x",
                           op->out[0].dtype == op->in[0].dtype ? "        y[i] = x[i];\n" : "        ST(y[i], LD(x[i]));\n",
                           out_arg(op, 0), in_arg(op, 0), ARG_END);
    }
}

/* The seed of a backward, or a constant; loss_scale=1 (fp16): the value
 * times this step's loss scale, infinite when an overflow is injected
 * (runtime/exec.h), as the launch's fusion_args carry them. */
static int lower_fill(cuda_plan *p, const rt_op *op)
{
    char v[32], body[160];
    if (op->ints[ATTR_LOSS_SCALE])
        snprintf(body, sizeof body, "        ST(y[i], a.inject_overflow ? FUSION_INF : %s * a.loss_scale);\n",
                 flit(v, op->floats[ATTR_VALUE]));
    else
        snprintf(body, sizeof body, "        ST(y[i], %s);\n", flit(v, op->floats[ATTR_VALUE]));
    return elementwise(p, "fill", rt_tensor_numel(&op->out[0]), "y!", body, out_arg(op, 0), ARG_END);
}

/* ---- embedding and positions ---------------------------------------------------- */

static int lower_positions(cuda_plan *p, const rt_op *op)
{
    const rt_tensor *o = &op->out[0];
    int64_t T = o->rank > 0 ? o->dim[o->rank - 1] : 1;
    char body[96];
    snprintf(body, sizeof body, "        y[i] = (int)(i %% %lldLL);\n", (long long)T);
    return elementwise(p, "positions", rt_tensor_numel(o), "y!", body, out_arg(op, 0), ARG_END);
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
             "        else ST(out[i], LD(table[(long long)v * %lldLL + col]));\n",
             (long long)C, (long long)C, (long long)V, (long long)C);
    if (elementwise(p, "embedding_fwd", N * C, "out! idx table -", body, out_arg(op, 0), in_arg(op, 0), in_arg(op, 1),
                    arg_status(), ARG_END))
        return -1;
    p->steps[p->n_steps - 1].check_status = 1;
    return 0;
}

/* idx (N), dout (N,C) -> dtable (V,C): zeroed, then one thread per column
 * adds the rows in token order, as the CPU kernel does (no atomics: equal
 * ids add up in a fixed order).  dtable is a parameter's gradient, f32:
 * each add is stored as it is made. */
static int lower_embedding_backward(cuda_plan *p, const rt_op *op)
{
    int64_t V = op->out[0].dim[0], C = op->out[0].dim[1], N = rt_tensor_numel(&op->in[0]);
    if (elementwise(p, "zero", V * C, "y!", "        ST(y[i], 0.0f);\n", out_arg(op, 0), ARG_END))
        return -1;
    kbuf kb = { 0 };
    kb_ptr(&kb, "dtable", 0, out_arg(op, 0), 1, NULL);
    kb_ptr(&kb, "dout", 1, in_arg(op, 1), 0, NULL);
    kb_ptr(&kb, "idx", 2, in_arg(op, 0), 0, NULL);
    kb_printf(&kb,
              "    long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    if (c >= %lldLL) return;\n"
              "    for (long long i = 0; i < %lldLL; i++) {\n"
              "        int v = idx[i];\n"
              "        if (v < 0 || v >= %lld) { if (c == 0) fusion_report_bad(a.p[3], i); continue; }\n"
              "        long long at = (long long)v * %lldLL + c;\n"
              "        ST(dtable[at], LD(dtable[at]) + LD(dout[i * %lldLL + c]));\n"
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
    char body[900];
    snprintf(body, sizeof body,
             "        const long long C = %lldLL;\n"
             "        long long d = i %% %lldLL, t = (i / %lldLL) %% %lldLL, h = (i / %lldLL) %% %lldLL, b = i / %lldLL;\n"
             "        long long r = (b * %lldLL + t) * %lldLL + h * %lldLL + d;\n"
             "%s",
             (long long)C, (long long)D, (long long)D, (long long)T, (long long)(D * T), (long long)H,
             (long long)(D * T * H), (long long)T, (long long)(3 * C), (long long)D,
             backward ? "        ST(qkv[r], LD(q[i]));\n        ST(qkv[r + C], LD(k[i]));\n        ST(qkv[r + 2 * C], LD(v[i]));\n"
                      : "        ST(q[i], LD(qkv[r]));\n        ST(k[i], LD(qkv[r + C]));\n        ST(v[i], LD(qkv[r + 2 * C]));\n");
    if (!backward)
        return elementwise(p, "qkv_split_fwd", B * T * C, "q! k! v! qkv", body, out_arg(op, 0), out_arg(op, 1),
                           out_arg(op, 2), in_arg(op, 0), ARG_END);
    return elementwise(p, "qkv_split_bwd", B * T * C, "q k v qkv!", body, in_arg(op, 0), in_arg(op, 1), in_arg(op, 2),
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
             (long long)T, (long long)(H * D), (long long)D,
             backward ? "        ST(x[i], LD(y[r]));\n" : "        ST(y[r], LD(x[i]));\n");
    if (!backward)
        return elementwise(p, "merge_heads_fwd", B * H * T * D, "y! x", body, out_arg(op, 0), in_arg(op, 0), ARG_END);
    return elementwise(p, "merge_heads_bwd", B * H * T * D, "x! y", body, out_arg(op, 0), in_arg(op, 0), ARG_END);
}

/* ---- rope, split and concat ------------------------------------------------------ */

/* x (R,T,H·D) -> y, each head's pairs (c, c + D/2) turned by the angle
 * sign·t·base^(-2c/D) (sign -1: the backward), as runtime/cpu/rope.c's
 * rope_rotate: the angle, its cosine and sine in double, rounded to float.
 * A thread per pair, reading both before it writes (y may be x). */
static int lower_rope(cuda_plan *p, const rt_op *op, int sign)
{
    const rt_tensor *x = &op->in[0];
    int64_t C = x->dim[x->rank - 1], T = x->dim[x->rank - 2], H = op->ints[ATTR_HEADS], D = C / H, half = D / 2;
    char body[1024];
    snprintf(body, sizeof body,
             "        long long c = i %% %lldLL, rest = i / %lldLL, t = (rest / %lldLL) %% %lldLL, at = rest * %lldLL + c;\n"
             "        double angle = %d.0 * (double)t * pow((double)%.17g, -2.0 * (double)c / %lld.0);\n"
             "        float co = (float)cos(angle), si = (float)sin(angle);\n"
             "        float lo = LD(x[at]), hi = LD(x[at + %lldLL]);\n"
             "        ST(y[at], lo * co - hi * si);\n"
             "        ST(y[at + %lldLL], hi * co + lo * si);\n",
             (long long)half, (long long)half, (long long)H, (long long)T, (long long)D, sign,
             op->floats[ATTR_BASE], (long long)D, (long long)half, (long long)half);
    return elementwise(p, sign > 0 ? "rope_fwd" : "rope_bwd", rt_tensor_numel(x) / 2, "y! x", body, out_arg(op, 0),
                       in_arg(op, 0), ARG_END);
}

/* split, concat and their backwards, as runtime/exec.c's run_split_concat:
 * the whole tensor (outer, Σ sizes, inner) and its n <= 4 parts
 * (outer, sizes[k], inner) along the axis attribute (negative: from the
 * end).  A thread per element of the whole copies it from or to its part;
 * part k starts at off_k = Σ_{m<k} sizes[m] along the axis. */
static int lower_split_concat(cuda_plan *p, const rt_op *op)
{
    int whole_is_input = op->op == OP_SPLIT || op->op == OP_CONCAT_BACKWARD;
    const rt_tensor *whole = whole_is_input ? &op->in[0] : &op->out[0];
    int n = whole_is_input ? op->n_out : op->n_in;
    int64_t axis = op->ints[ATTR_AXIS] < 0 ? op->ints[ATTR_AXIS] + whole->rank : op->ints[ATTR_AXIS];
    int64_t inner = 1, total = whole->dim[axis];
    for (int i = (int)axis + 1; i < whole->rank; i++)
        inner *= whole->dim[i];
    if (n < 1 || n > 4)
        return -1;
    rt_cuda_arg args[5];
    args[0] = whole_is_input ? in_arg(op, 0) : out_arg(op, 0);
    char names[32], body[2048];
    int len = snprintf(names, sizeof names, whole_is_input ? "x" : "x!");
    int at = snprintf(body, sizeof body, "        long long o = i / %lldLL, ax = (i / %lldLL) %% %lldLL, e = i %% %lldLL;\n",
                      (long long)(total * inner), (long long)inner, (long long)total, (long long)inner);
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        const rt_tensor *part = whole_is_input ? &op->out[k] : &op->in[k];
        int64_t size = part->dim[axis];
        args[k + 1] = whole_is_input ? out_arg(op, k) : in_arg(op, k);
        len += snprintf(names + len, sizeof names - (size_t)len, whole_is_input ? " p%d!" : " p%d", k);
        char copy[64];
        snprintf(copy, sizeof copy, whole_is_input ? "ST(p%d[j], LD(x[i]))" : "ST(x[i], LD(p%d[j]))", k);
        at += snprintf(body + at, sizeof body - (size_t)at,
                       "        %sif (ax < %lldLL) { long long j = (o * %lldLL + ax - %lldLL) * %lldLL + e; %s; }\n",
                       k ? "else " : "", (long long)(off + size), (long long)size, (long long)off, (long long)inner,
                       copy);
        if (at >= (int)sizeof body || len >= (int)sizeof names)
            return -1;   /* cannot be: four parts take a few hundred bytes */
        off += size;
    }
    rt_cuda_arg end = ARG_END;
    return elementwise(p, whole_is_input ? "split" : "concat", rt_tensor_numel(whole), names, body, args[0], args[1],
                       n > 1 ? args[2] : end, n > 2 ? args[3] : end, n > 3 ? args[4] : end, ARG_END);
}

/* ---- dense: linear and matmul ------------------------------------------------------ */

/* out[j] = Σ_rows a[row][j] in double: one thread per column. */
int lower_column_sums(cuda_plan *p, rt_cuda_arg out, rt_cuda_arg in, int64_t rows, int64_t cols)
{
    kbuf kb = { 0 };
    kb_ptr(&kb, "out", 0, out, 1, NULL);
    kb_ptr(&kb, "x", 1, in, 0, NULL);
    kb_printf(&kb,
              "    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    if (j >= %lldLL) return;\n"
              "    double s = 0;\n"
              "    for (long long r = 0; r < %lldLL; r++) s += LD(x[r * %lldLL + j]);\n"
              "    ST(out[j], (float)s);\n",
              (long long)cols, (long long)rows, (long long)cols);
    return step_kernel(p, kb_finish(p, &kb, "column_sums"), (cols + NT - 1) / NT, 0, 0, out, in, ARG_END);
}

int product_operand(cuda_plan *p, const rt_op *op, int i, rt_cuda_arg *operand)
{
    *operand = in_arg(op, i);
    int64_t at = rt_op_rounded_input_at(op, i);
    if (at < 0)
        return 0;
    if (op->ws_offset < 0)
        return -2;
    rt_cuda_arg copy = arg_arena(op->ws_offset + at, rt_op_product_dtype(op));
    if (elementwise(p, "round", rt_tensor_numel(&op->in[i]), "y! x", "        ST(y[i], LD(x[i]));\n", copy, *operand,
                    ARG_END))
        return -1;
    *operand = copy;
    return 0;
}

/* x (M,K), w (N,K), b (N)? -> y (M,N) = x·wᵀ + b: the bias broadcast, then
 * one product accumulating onto it. */
static int lower_linear(cuda_plan *p, const rt_op *op)
{
    int64_t K = op->in[1].dim[1], N = op->in[1].dim[0], M = rt_tensor_numel(&op->in[0]) / K;
    rt_cuda_arg x, w;
    int rc = product_operand(p, op, 0, &x);
    if (rc || (rc = product_operand(p, op, 1, &w)))
        return rc;
    if (step_gemm(p, 0, 1, M, N, K, 1.0f, x, K, 0, w, K, 0, 0.0f, out_arg(op, 0), N, 0, 1))
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
    rt_cuda_arg dx = grad_arg(op, 0), dw = grad_arg(op, 1), db = grad_arg(op, 2), x, w, dy;
    int rc = product_operand(p, op, 0, &x);
    if (rc || (rc = product_operand(p, op, 1, &w)) || (rc = product_operand(p, op, 2, &dy)))
        return rc;
    if (dx.kind && step_gemm(p, 0, 0, M, K, N, 1.0f, dy, N, 0, w, K, 0, 0.0f, dx, K, 0, 1))
        return -1;
    if (dw.kind && step_gemm(p, 1, 0, N, K, M, 1.0f, dy, N, 0, x, K, 0, 0.0f, dw, K, 0, 1))
        return -1;
    if (db.kind && lower_column_sums(p, db, in_arg(op, 2), M, N))
        return -1;
    return 0;
}

/* a (Bt,M,K), b (Bt,K,N) or (Bt,N,K) or one shared matrix -> c = scale·a·op(b):
 * one strided-batched product (a shared b: one tall product). */
static int lower_matmul(cuda_plan *p, const rt_op *op, int backward)
{
    const rt_tensor *at = &op->in[0], *bt = &op->in[1];
    int tb = op->ints[ATTR_TRANSPOSE_B] != 0, b_batched = bt->rank > 2;
    int64_t M = at->dim[at->rank - 2], K = at->dim[at->rank - 1];
    int64_t N = bt->dim[bt->rank - (tb ? 2 : 1)], Bt = rt_tensor_numel(at) / (M * K);
    int64_t ldb = tb ? K : N;
    float scale = (float)op->floats[ATTR_SCALE];
    rt_cuda_arg a, b, dc;
    int rc = product_operand(p, op, 0, &a);
    if (rc || (rc = product_operand(p, op, 1, &b)) || (backward && (rc = product_operand(p, op, 2, &dc))))
        return rc;
    if (!backward) {
        if (!b_batched)
            return step_gemm(p, 0, tb, Bt * M, N, K, scale, a, K, 0, b, ldb, 0, 0.0f, out_arg(op, 0), N, 0, 1);
        return step_gemm(p, 0, tb, M, N, K, scale, a, K, M * K, b, ldb, K * N, 0.0f, out_arg(op, 0), N, M * N, Bt);
    }
    /* a, b, dc -> da = scale·dc·op(b)ᵀ ; db = scale·aᵀ·dc or dcᵀ·a */
    int64_t rows = b_batched ? M : Bt * M, count = b_batched ? Bt : 1;
    rt_cuda_arg da = grad_arg(op, 0), db = grad_arg(op, 1);
    if (da.kind && step_gemm(p, 0, !tb, rows, K, N, scale, dc, N, rows * N, b, ldb, b_batched ? K * N : 0, 0.0f, da, K,
                             rows * K, count))
        return -1;
    if (db.kind && !tb && step_gemm(p, 1, 0, K, N, rows, scale, a, K, rows * K, dc, N, rows * N, 0.0f, db, N, K * N, count))
        return -1;
    if (db.kind && tb && step_gemm(p, 1, 0, N, K, rows, scale, dc, N, rows * N, a, K, rows * K, 0.0f, db, K, K * N, count))
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
    case OP_FLATTEN: case OP_FLATTEN_BACKWARD: case OP_COPY: case OP_SILU: case OP_SILU_BACKWARD: case OP_MUL:
    case OP_MUL_BACKWARD:
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
    case OP_RMSNORM:                  rc = lower_rmsnorm(p, op); break;
    case OP_RMSNORM_BACKWARD:         rc = lower_rmsnorm_backward(p, op); break;
    case OP_ROPE:                     rc = lower_rope(p, op, 1); break;
    case OP_ROPE_BACKWARD:            rc = lower_rope(p, op, -1); break;
    case OP_SPLIT: case OP_SPLIT_BACKWARD: case OP_CONCAT: case OP_CONCAT_BACKWARD:
        rc = lower_split_concat(p, op);
        break;
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
    case OP_SGD:                      rc = lower_sgd(p, op); break;
    case OP_SEND: case OP_RECV: case OP_ALLREDUCE:
        rc = lower_host(p);
        break;
    default:
        return diag_set(err, op->name, op->line, "op '%s': %s has no CUDA kernel", op->name,
                        op->op >= 0 && op->op < OP_COUNT ? op_table[op->op].name : "this op kind");
    }
    if (rc == -2)
        return diag_set(err, op->name, op->line,
                        "op '%s' (%s): sizes the CUDA kernels do not take yet (attention: T <= 6144; convolution, "
                        "and products of 16-bit tensors with f32 ones: a workspace from the memory pass)", op->name,
                        op_table[op->op].name);
    if (rc == -3)
        return diag_set(err, op->name, op->line,
                        "internal error: op '%s' (%s): a matrix product of operands cuBLAS does not multiply together "
                        "(%s by %s)", op->name, op_table[op->op].name, ctype(op->in[0].dtype), ctype(op->in[1].dtype));
    if (rc == -4)
        return diag_set(err, op->name, op->line, "op '%s' (%s): its CUDA kernel takes f32 tensors only, and this one "
                        "has a 16-bit one", op->name, op_table[op->op].name);
    if (rc || p->oom)
        return diag_set(err, op->name, op->line, "out of memory generating CUDA kernels for op '%s'", op->name);
    p->ops[p->n_ops].first = first;
    p->ops[p->n_ops].count = p->n_steps - first;
    p->n_ops++;
    return 0;
}
