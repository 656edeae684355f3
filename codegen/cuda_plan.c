/* cuda_plan.c: the kernel plan (see cuda_kernels.h) and what every
 * kernel-source file writes kernels with: the prelude of the module, the
 * kernel text buffer named by its hash, arguments and storage types, and
 * the plan's steps (kernel launches, cuBLAS products, the host's).
 *
 * A kernel is written as text with its sizes in it, then named by a hash
 * of that text: lowering GPT-2's twelve equal layers adds each kernel once. */
#include "cuda_kernels_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

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
static const char prelude[] = /* fusion_args: runtime/cuda/cuda_program.h's rt_cuda_args */
    "/* fusion: generated CUDA C (codegen/cuda_kernels.c). */\n"
    "typedef struct { char *p[8]; long long step, adam_step; float loss_scale; int inject_overflow; float loss_weight, "
    "lr; double max_norm, weight_decay; int stats_mode, unused; } fusion_args;\n"
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
    "}\n"
    "/* The pointwise ops' helpers (ir/pointwise.h). */\n" FU_XTEXT(FU_POINTWISE_FUNCTIONS(__device__, expf)) "\n";

const char *cuda_kernels_prelude(void) { return prelude; }

/* ---- the plan ------------------------------------------------------------ */

int plan_grow(void **ptr, int32_t *cap, int32_t need, size_t size)
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
    if (p->fusable)
        free(p->fusable->parts);
    free(p->fusable);
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
    int hn = snprintf(head, sizeof head,
                      "\nextern \"C\" __global__ void __launch_bounds__(%d) %s(const fusion_args a)\n{\n", NT, name);
    if (plan_grow((void **)&p->names, &p->cap_kernels, p->n_kernels + 1, sizeof *p->names) ||
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
    case DT_BF16:
        return "__nv_bfloat16";
    case DT_F16:
        return "__half";
    case DT_I32:
        return "int";
    default:
        return "float";
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
    if (plan_grow((void **)&p->steps, &p->cap_steps, p->n_steps + 1, sizeof *p->steps))
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

int step_gemm(cuda_plan *p, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, rt_cuda_arg A,
              int64_t lda, int64_t stride_a, rt_cuda_arg B, int64_t ldb, int64_t stride_b, float beta, rt_cuda_arg C,
              int64_t ldc, int64_t stride_c, int64_t batch)
{
    int half_c = C.dtype == DT_BF16 || C.dtype == DT_F16;
    if (A.dtype != B.dtype || (A.dtype != DT_F32 && A.dtype != DT_BF16 && A.dtype != DT_F16) ||
        (C.dtype != DT_F32 && C.dtype != A.dtype) || (half_c && A.dtype == DT_F32))
        return -3; /* cuBLAS has no such product: the lowering should have rounded an operand */
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

int step_host(cuda_plan *p)
{
    rt_cuda_step *s = new_step(p);
    if (!s)
        return -1;
    s->kind = RT_CUDA_STEP_HOST;
    s->kernel = -1;
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
