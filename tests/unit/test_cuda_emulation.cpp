/* test_cuda_emulation: every generated CUDA kernel, run on the CPU through
 * the emulation shim (cuda_emu.h), against the CPU kernel of the same op in
 * the same precision.
 *
 * For each case of cuda_cases.c (every op, in f32, bf16 and fp16): two
 * arenas get the same random inputs (stored in their tensors' dtypes) and
 * the same NaN-filled outputs; the CPU runs rt_op_run on one (its 16-bit
 * path: the f32 kernel on widened copies, results rounded), and the op's
 * CUDA steps run on the other (kernels compiled from the generated source
 * as C++, cuBLAS products by a column-major reference GEMM reached through
 * the backend's own row-major conversion, cuda_gemm.h, which also checks
 * the arguments cuBLAS would refuse).  Every output must agree: f32 ones
 * within 1e-5 x their largest magnitude, 16-bit ones within the case's
 * tol16 x the format's unit roundoff x their largest magnitude (cuda_cases.c
 * says why each bound), and where that is one step, on at most 1% of their
 * elements; a NaN left in an output (an element the kernel never wrote)
 * fails.  Then a bad token id and a bad target must reach the
 * status word at their position; fp16's loss scaling must hold (an injected
 * overflow seeds infinity, clip_scale answers NaN, adamw skips its step and
 * says so in the flags word); and the fused chains of elementwise kernels
 * must compute what their ops compute one by one.
 *
 * Prints a line a case, the largest error of each kernel family in each
 * precision, and 'N passed, N failed'; exits 1 on any failure.
 */
extern "C" {
#include "../../codegen/cuda_kernels.h"
#include "../../ir/ir.h"
#include "../../ir/op_kinds.h"
#include "../../runtime/cpu/half.h"
#include "../../runtime/cuda/cuda_gemm.h"
#include "../../runtime/exec.h"
#include "../../runtime/stats_mode.h"
#include "../../runtime/train_settings.h"
}
#include "cuda_cases.h"
#include "cuda_emu.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

extern const cuda_emu_kernel cuda_emu_kernels[];
extern const int cuda_emu_n_kernels;

namespace
{

const long long kStep = 3;        /* the optimizer's step number in both runs      */
const float kLossScale = 1024.0f; /* fp16's loss scale, for the cases that use one */

struct rng {
    uint64_t s;
    double uniform() /* [0, 1) */
    {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        return (double)(s >> 11) / 9007199254740992.0;
    }
};

struct device { /* the emulated device's memory */
    char *arena;
    std::vector<unsigned char> scratch;
    unsigned long long status;
    int32_t flags;
    float grad_norm; /* the word after the flags word: clip_scale's norm */
};

char *place(device &d, const rt_cuda_arg &a)
{
    switch (a.kind) {
    case RT_CUDA_ARG_ARENA:
        return d.arena + a.value;
    case RT_CUDA_ARG_SCRATCH:
        return (char *)d.scratch.data() + a.value;
    case RT_CUDA_ARG_STATUS:
        return (char *)&d.status;
    case RT_CUDA_ARG_FLAGS:
        return (char *)&d.flags;
    default:
        return nullptr;
    }
}

/* Element k of a float tensor of dtype at p, as f32 (16-bit ones widened). */
float load(const char *p, int32_t dtype, int64_t k)
{
    if (dtype == DT_BF16 || dtype == DT_F16) {
        uint16_t h;
        memcpy(&h, p + k * 2, 2);
        return dtype == DT_BF16 ? bf16_to_f32(h) : fp16_to_f32(h);
    }
    float f;
    memcpy(&f, p + k * 4, 4);
    return f;
}

void store(char *p, int32_t dtype, int64_t k, float v)
{
    if (dtype == DT_BF16 || dtype == DT_F16) {
        uint16_t h = dtype == DT_BF16 ? f32_to_bf16(v) : f32_to_fp16(v);
        memcpy(p + k * 2, &h, 2);
        return;
    }
    memcpy(p + k * 4, &v, 4);
}

/* The unit roundoff of a 16-bit format (half its relative step). */
double unit_roundoff(int32_t dtype) { return dtype == DT_BF16 ? 1.0 / 256 : dtype == DT_F16 ? 1.0 / 2048 : 0; }
bool is_half(int32_t dtype) { return dtype == DT_BF16 || dtype == DT_F16; }

/* cuBLAS, column-major, as the reference: the call the backend makes for a
 * row-major step.  f32 operands: cublasSgemmStridedBatched (summed in
 * double, more exactly than any GPU); 16-bit ones: cublasGemmStridedBatchedEx
 * with CUBLAS_COMPUTE_32F, the operands as they are stored, products
 * summed in f32 (a tensor core's accumulator), C read and written in its
 * own type.  Returns a message for an argument cuBLAS would refuse. */
const char *reference_gemm(device &d, const rt_cuda_step &s)
{
    rt_cuda_colmajor_gemm g = rt_cuda_gemm_colmajor(&s);
    if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 1)
        return "negative size or empty batch";
    if (g.lda < (g.trans_a ? g.k : g.m) || g.lda < 1 || g.ldb < (g.trans_b ? g.n : g.k) || g.ldb < 1 || g.ldc < g.m ||
        g.ldc < 1)
        return "a leading dimension cuBLAS refuses";
    const rt_cuda_arg &ta = s.arg[g.a_arg], &tb = s.arg[g.b_arg], &tc = s.arg[2];
    if (ta.dtype != tb.dtype || (tc.dtype != DT_F32 && tc.dtype != ta.dtype) ||
        (ta.dtype != DT_F32 && !is_half(ta.dtype)) || (ta.dtype == DT_F32 && tc.dtype != DT_F32))
        return "operand types cuBLAS does not multiply together";
    const char *A = place(d, ta), *B = place(d, tb);
    char *C = place(d, tc);
    if (!A || !B || !C)
        return "a NULL operand";
    bool f32 = ta.dtype == DT_F32;
    for (int64_t b = 0; b < g.batch; b++)
        for (int64_t j = 0; j < g.n; j++)
            for (int64_t i = 0; i < g.m; i++) {
                double acc = 0;
                float acc32 = 0;
                for (int64_t l = 0; l < g.k; l++) {
                    float a = load(A, ta.dtype, b * g.stride_a + (g.trans_a ? l + i * g.lda : i + l * g.lda));
                    float x = load(B, tb.dtype, b * g.stride_b + (g.trans_b ? j + l * g.ldb : l + j * g.ldb));
                    if (f32)
                        acc += (double)a * x;
                    else
                        acc32 += a * x;
                }
                if (!f32)
                    acc = acc32;
                int64_t at = b * g.stride_c + i + j * g.ldc;
                double v = g.beta == 0.0f ? g.alpha * acc : g.alpha * acc + (double)g.beta * load(C, tc.dtype, at);
                store(C, tc.dtype, at, f32 ? (float)v : (float)(float)v);
            }
    return nullptr;
}

/* Run steps [first, end) on d, with the loss scale a launch carries and
 * the training settings compiled into op (the rate, bound and decay the
 * runtime hands its launches; none when op is null).  Returns a message,
 * or nullptr. */
const char *run_step_range(const cuda_plan &plan, int32_t first, int32_t end, device &d,
                           const std::vector<int> &kernel_of, float loss_scale, int inject_overflow, int *launches,
                           const rt_op *op, int stats_mode = RT_STATS_UPDATE)
{
    rt_train_settings train;
    memset(&train, 0, sizeof train);
    if (op)
        rt_train_settings_from_ops(op, 1, &train);
    for (int32_t i = first; i < end; i++) {
        const rt_cuda_step &s = plan.steps[i];
        if (s.kind == RT_CUDA_STEP_GEMM) {
            if (const char *why = reference_gemm(d, s))
                return why;
        } else if (s.kind == RT_CUDA_STEP_KERNEL) {
            if (s.shared_bytes > 48 * 1024 || s.block[0] * s.block[1] * s.block[2] > 1024 || s.grid[0] < 1)
                return "a launch no GPU takes (shared memory, block or grid size)";
            rt_cuda_args a;
            memset(&a, 0, sizeof a);
            for (int k = 0; k < RT_CUDA_MAX_ARGS; k++)
                a.p[k] = (uint64_t)(uintptr_t)place(d, s.arg[k]);
            a.step = kStep;
            a.adam_step = kStep;
            a.loss_scale = loss_scale;
            a.inject_overflow = inject_overflow;
            a.lr = op ? (float)rt_train_lr(&train, kStep) : 0.0f;
            a.max_norm = train.grad_clip;
            a.weight_decay = train.weight_decay;
            a.stats_mode = stats_mode;
            cuda_emu_launch(&cuda_emu_kernels[kernel_of[s.kernel]], dim3{ s.grid[0], s.grid[1], s.grid[2] },
                            dim3{ s.block[0], s.block[1], s.block[2] }, s.shared_bytes, &a);
        } else {
            return "a host step (communication) in a kernel case";
        }
        ++*launches;
    }
    return nullptr;
}

/* Run op `index`'s steps on d. */
const char *run_steps(const cuda_plan &plan, int index, device &d, const std::vector<int> &kernel_of, float loss_scale,
                      int inject_overflow, int *launches, const rt_op &op, int stats_mode = RT_STATS_UPDATE)
{
    const rt_cuda_op &cop = plan.ops[index];
    return run_step_range(plan, cop.first, cop.first + cop.count, d, kernel_of, loss_scale, inject_overflow, launches,
                          &op, stats_mode);
}

/* A NaN in every float format: f32 0x7fff7fff, and each half 0x7fff. */
void fill_nan(char *arena, int64_t bytes)
{
    uint32_t nan_bits = 0x7fff7fffu;
    for (int64_t i = 0; i < bytes / 4; i++)
        memcpy(arena + i * 4, &nan_bits, 4);
}

/* Inputs: ids in range (every fifth target of cross_entropy -100, masked), or uniform in [-1, 1) stored in their dtype; a
 * few ops want positive or fixed scalars.  Outputs and the workspace: NaN. */
void fill_case(const cuda_case &c, char *arena, rng &r)
{
    const rt_op &op = c.op;
    fill_nan(arena, c.arena_bytes);
    for (int i = 0; i < op.n_in; i++) {
        int64_t n = rt_tensor_numel(&op.in[i]);
        char *at = arena + op.in[i].offset;
        for (int64_t k = 0; k < n; k++) {
            if (c.int_range[i] > 0) {
                int32_t v = (int32_t)(r.uniform() * c.int_range[i]);
                if ((op.op == OP_CROSS_ENTROPY || op.op == OP_CROSS_ENTROPY_BACKWARD) && i == 1 && k % 5 == 3)
                    v = -100; /* a masked target (runtime/cpu/kernels.h's KERNEL_IGNORE_TARGET): skipped */
                memcpy(at + k * 4, &v, 4);
                continue;
            }
            float v = (float)(2.0 * r.uniform() - 1.0);
            if (op.op == OP_ADAMW && i == 3)
                v = std::fabs(v) * 0.01f; /* v: second moments >= 0 */
            if (op.op == OP_ADAMW && i == 4)
                v = 1e-3f; /* lr */
            if (op.op == OP_ADAMW && i == 5)
                v = 0.7f; /* clip scale */
            if ((op.op == OP_CLIP_SCALE || op.op == OP_SUM_SQUARES) && op.in[i].rank == 0)
                v = 3.7f; /* a sum of squares */
            if (op.op == OP_CLIP_SCALE && op.ints[ATTR_LOSS_SCALE])
                v = 3.7f * kLossScale * kLossScale; /* ... of gradients kLossScale times larger */
            if (op.op == OP_CROSS_ENTROPY_BACKWARD && i == 2)
                v = 1.7f; /* dloss */
            if (op.op == OP_BATCHNORM && i == 4)
                v = 0.5f + std::fabs(v); /* a running variance > 0 */
            store(at, op.in[i].dtype, k, v);
        }
    }
}

struct compared {
    double max_diff = 0, max_ref = 0;
    bool nan = false;
    int64_t worst = -1;
    int64_t differ = 0, n = 0; /* elements not equal to the CPU's, of n */
};

compared compare(const rt_tensor &t, const char *cpu, const char *gpu)
{
    compared out;
    int64_t n = rt_tensor_numel(&t);
    out.n = n;
    for (int64_t k = 0; k < n; k++) {
        double a, b;
        if (t.dtype == DT_I32) {
            int32_t x, y;
            memcpy(&x, cpu + t.offset + k * 4, 4);
            memcpy(&y, gpu + t.offset + k * 4, 4);
            a = x, b = y;
        } else {
            a = load(cpu + t.offset, t.dtype, k);
            b = load(gpu + t.offset, t.dtype, k);
        }
        if (std::isnan(a) || std::isnan(b)) {
            out.nan = true;
            out.worst = k;
            continue;
        }
        out.max_ref = std::fmax(out.max_ref, std::fabs(a));
        out.differ += a != b;
        if (std::fabs(a - b) > out.max_diff) {
            out.max_diff = std::fabs(a - b);
            out.worst = k;
        }
    }
    return out;
}

/* A 16-bit output held to one step (tol16 2) is mostly equal to the CPU's:
 * the two f32 results round to different neighbours only where they
 * straddle a rounding boundary, a chance of about their difference over
 * the step (1e-7 / 4e-3 in bf16).  So at most 1% of its elements (and one)
 * may differ: a kernel that rounds another way (truncates, say) differs in
 * half of them while staying within one step. */
bool too_many_differ(const rt_tensor &t, double tol16, const compared &m)
{
    return is_half(t.dtype) && tol16 <= 2 && m.differ > 1 + m.n / 100;
}

/* The bound on |gpu - cpu| of result t (the top of the file). */
double bound(const rt_tensor &t, double tol16, double max_ref)
{
    return is_half(t.dtype) ? (tol16 * unit_roundoff(t.dtype) + 1e-5) * max_ref : 1e-5 * max_ref;
}

/* The error in the unit it is held to: 16-bit outputs in unit roundoffs
 * of max|cpu|, f32 ones relative to max|cpu|. */
double scaled_error(const rt_tensor &t, const compared &m)
{
    double rel = m.max_ref > 0 ? m.max_diff / m.max_ref : m.max_diff > 0 ? INFINITY : 0;
    return is_half(t.dtype) ? rel / unit_roundoff(t.dtype) : rel;
}

const char *family(int op)
{
    switch (op) {
    case OP_LINEAR:
    case OP_LINEAR_BACKWARD:
    case OP_MATMUL:
    case OP_MATMUL_BACKWARD:
        return "dense products";
    case OP_CONV2D:
    case OP_CONV2D_BACKWARD:
        return "convolution";
    case OP_LAYERNORM:
    case OP_LAYERNORM_BACKWARD:
    case OP_BATCHNORM:
    case OP_BATCHNORM_BACKWARD:
    case OP_RMSNORM:
    case OP_RMSNORM_BACKWARD:
        return "normalisation";
    case OP_ROPE:
    case OP_ROPE_BACKWARD:
        return "rope";
    case OP_SOFTMAX:
    case OP_SOFTMAX_BACKWARD:
    case OP_ATTENTION:
    case OP_ATTENTION_BACKWARD:
        return "softmax, attention";
    case OP_CROSS_ENTROPY:
    case OP_CROSS_ENTROPY_BACKWARD:
        return "cross-entropy";
    case OP_MAXPOOL:
    case OP_MAXPOOL_BACKWARD:
    case OP_AVGPOOL_GLOBAL:
    case OP_AVGPOOL_GLOBAL_BACKWARD:
        return "pooling";
    case OP_EMBEDDING:
    case OP_EMBEDDING_BACKWARD:
    case OP_POSITIONS:
        return "embedding";
    case OP_SUM_SQUARES:
    case OP_CLIP_SCALE:
    case OP_LR_SCHEDULE:
    case OP_ADAMW:
        return "optimizer";
    default:
        return "elementwise, layout";
    }
}

const char *precision_name(int32_t p) { return p == DT_BF16 ? "bf16" : p == DT_F16 ? "fp16" : "f32"; }

/* Largest errors by (family, precision): of 16-bit outputs in u, of f32 ones relative. */
struct worst_t {
    double half_u = 0, f32_rel = 0;
    bool any_half = false;
};
std::map<std::string, worst_t> worst_by_family;

void note_worst(const char *fam, int32_t precision, const rt_tensor &t, double err)
{
    worst_t &w = worst_by_family[std::string(fam) + "|" + precision_name(precision)];
    if (is_half(t.dtype)) {
        w.any_half = true;
        w.half_u = std::fmax(w.half_u, err);
    } else {
        w.f32_rel = std::fmax(w.f32_rel, err);
    }
}

int passed = 0, failed = 0;

void verdict(const char *label, const char *why)
{
    if (why) {
        printf("FAIL %-52s %s\n", label, why);
        failed++;
    } else {
        printf("ok   %-52s\n", label);
        passed++;
    }
}

/* fp16's loss scaling where it goes wrong on purpose: an injected overflow
 * seeds infinity, clip_scale of an infinite sum of squares is NaN, and an
 * adamw given that NaN changes nothing and sets the flags word (the CPU's
 * sets ctx.overflowed). */
void loss_scaling_checks(const cuda_case *cases, int n_cases, const cuda_plan &plan, const std::vector<int> &kernel_of,
                         rng &r)
{
    for (int i = 0; i < n_cases; i++) {
        const cuda_case &c = cases[i];
        bool seed = c.op.op == OP_FILL && c.op.ints[ATTR_LOSS_SCALE];
        bool clip = c.op.op == OP_CLIP_SCALE && c.op.ints[ATTR_LOSS_SCALE];
        bool adamw = c.op.op == OP_ADAMW && c.op.n_in == 6;
        if (!seed && !clip && !adamw)
            continue;
        size_t bytes = (size_t)(c.arena_bytes + 63) / 64 * 64;
        char *cpu = (char *)aligned_alloc(64, bytes), *gpu = (char *)aligned_alloc(64, bytes);
        fill_case(c, cpu, r);
        if (clip)
            store(cpu + c.op.in[0].offset, DT_F32, 0, INFINITY); /* the gradients overflowed */
        if (adamw)
            store(cpu + c.op.in[5].offset, DT_F32, 0, NAN); /* clip_scale's answer to that */
        memcpy(gpu, cpu, bytes);
        rt_context ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.step = kStep;
        ctx.micro_batch = -1;
        ctx.loss_scale = kLossScale;
        ctx.inject_overflow = seed;
        char label[128], msg[256];
        const char *why = rt_op_run(&c.op, cpu, &ctx) != 0 ? "the CPU kernel failed" : nullptr;
        device d{ gpu, std::vector<unsigned char>((size_t)plan.scratch_bytes + 64, 0xA5), RT_CUDA_STATUS_OK, 0, 0.0f };
        int launches = 0;
        if (!why)
            why = run_steps(plan, i, d, kernel_of, kLossScale, seed, &launches, c.op);
        if (!why && seed) {
            snprintf(label, sizeof label, "%s: an injected overflow", c.label);
            float a = load(cpu + c.op.out[0].offset, DT_F32, 0), b = load(gpu + c.op.out[0].offset, DT_F32, 0);
            if (!(std::isinf(a) && a > 0 && std::isinf(b) && b > 0)) {
                snprintf(msg, sizeof msg, "seed %g (CPU %g), expected +inf", (double)b, (double)a);
                why = msg;
            }
        } else if (!why && clip) {
            snprintf(label, sizeof label, "%s: gradients overflowed", c.label);
            float a = load(cpu + c.op.out[0].offset, DT_F32, 0), b = load(gpu + c.op.out[0].offset, DT_F32, 0);
            if (!(std::isnan(a) && std::isnan(b))) {
                snprintf(msg, sizeof msg, "scale %g (CPU %g), expected NaN", (double)b, (double)a);
                why = msg;
            }
        } else if (!why && adamw) {
            snprintf(label, sizeof label, "%s: a NaN scale skips the step", c.label);
            for (int k = 0; k < 4 && !why; k++)
                if (memcmp(cpu + c.op.in[k].offset, gpu + c.op.in[k].offset, (size_t)rt_tensor_bytes(&c.op.in[k])) ||
                    memcmp(gpu + c.op.in[k].offset, cpu + c.op.in[k].offset, 4)) {
                    snprintf(msg, sizeof msg, "input %d changed", k);
                    why = msg;
                }
            if (!why && !ctx.overflowed)
                why = "the CPU kernel did not set ctx.overflowed";
            if (!why && d.flags != RT_CUDA_FLAG_SKIPPED) {
                snprintf(msg, sizeof msg, "flags word %d, expected %d (skipped)", (int)d.flags, RT_CUDA_FLAG_SKIPPED);
                why = msg;
            }
        } else {
            snprintf(label, sizeof label, "%s: loss scaling", c.label);
        }
        verdict(label, why);
        free(cpu);
        free(gpu);
    }
}

} // namespace

int main()
{
    cuda_case *cases = nullptr;
    cuda_chain *chains = nullptr;
    int n_cases = 0, n_chains = 0, *first_op = nullptr;
    cuda_plan plan;
    cuda_plan_init(&plan);
    char why[600];
    if (cuda_cases_plan(&plan, &cases, &n_cases, &chains, &n_chains, &first_op, why, sizeof why)) {
        fprintf(stderr, "FAIL plan: %s\n", why);
        return 1;
    }
    std::vector<int> chain_first_op(first_op, first_op + n_chains);
    free(first_op);
    std::vector<int> kernel_of((size_t)plan.n_kernels, -1);
    for (int32_t k = 0; k < plan.n_kernels; k++) {
        for (int e = 0; e < cuda_emu_n_kernels; e++)
            if (strcmp(cuda_emu_kernels[e].name, plan.names[k]) == 0)
                kernel_of[(size_t)k] = e;
        if (kernel_of[(size_t)k] < 0) {
            fprintf(stderr, "FAIL: kernel %s is not in the emulated build (rebuild: cuda_emu_gen is stale)\n",
                    plan.names[k]);
            return 1;
        }
    }
    printf("%d cases, %d distinct kernels, %d steps\n", n_cases, plan.n_kernels, plan.n_steps);

    rng r{ 0x5eed1234abcdULL };
    for (int i = 0; i < n_cases; i++) {
        const cuda_case &c = cases[i];
        size_t bytes = (size_t)(c.arena_bytes + 63) / 64 * 64;
        char *cpu = (char *)aligned_alloc(64, bytes), *gpu = (char *)aligned_alloc(64, bytes);
        fill_case(c, cpu, r);
        memcpy(gpu, cpu, bytes);
        float loss_scale = c.loss_scaled ? kLossScale : 1.0f;
        rt_context ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.step = c.stats_mode == RT_STATS_USE ? -kStep : kStep; /* a validation's forward runs at -step */
        ctx.replay = c.stats_mode == RT_STATS_KEEP;
        ctx.micro_batch = -1;
        ctx.loss_scale = loss_scale;
        if (rt_op_run(&c.op, cpu, &ctx) != 0) {
            printf("FAIL %s: the CPU kernel failed: %s\n", c.label, ctx.msg);
            failed++;
            free(cpu);
            free(gpu);
            continue;
        }
        device d{ gpu, std::vector<unsigned char>((size_t)plan.scratch_bytes + 64, 0xA5), RT_CUDA_STATUS_OK, 0, 0.0f };
        int launches = 0;
        const char *why = run_steps(plan, i, d, kernel_of, loss_scale, 0, &launches, c.op, c.stats_mode);
        if (!why && d.status != (unsigned long long)RT_CUDA_STATUS_OK)
            why = "the status word reports a bad index on good input";
        if (!why && d.flags != 0)
            why = "the flags word says a step was skipped";
        /* What to compare: the outputs, and the inputs updated in place. */
        std::vector<rt_tensor> results;
        for (int k = 0; k < c.op.n_out; k++)
            results.push_back(c.op.out[k]);
        for (int k = 0; k < c.op.n_in; k++)
            if ((c.updated_in >> k) & 1)
                results.push_back(c.op.in[k]);
        double case_err = 0, case_ref = 0;
        bool case_half = false;
        static char msg[320];
        for (size_t k = 0; k < results.size() && !why; k++) {
            compared m = compare(results[k], cpu, gpu);
            double e = scaled_error(results[k], m);
            if (m.nan) {
                snprintf(msg, sizeof msg, "result %zu element %lld is NaN (never written, or wrong)", k,
                         (long long)m.worst);
                why = msg;
            } else if (m.max_diff > bound(results[k], c.tol16, m.max_ref)) {
                snprintf(msg, sizeof msg,
                         "result %zu (%s): |gpu - cpu| = %.3g at element %lld, above the bound %.3g "
                         "(max|cpu| = %.3g)",
                         k, precision_name(results[k].dtype), m.max_diff, (long long)m.worst,
                         bound(results[k], c.tol16, m.max_ref), m.max_ref);
                why = msg;
            } else if (too_many_differ(results[k], c.tol16, m)) {
                snprintf(msg, sizeof msg,
                         "result %zu (%s): %lld of %lld elements differ from the CPU's (at most 1%% "
                         "may: a rounding other than to nearest even?)",
                         k, precision_name(results[k].dtype), (long long)m.differ, (long long)m.n);
                why = msg;
            }
            note_worst(family(c.op.op), c.precision, results[k], e);
            case_ref = std::fmax(case_ref, m.max_ref);
            if (is_half(results[k].dtype) && (!case_half || e > case_err)) {
                case_half = true;
                case_err = e;
            } else if (!case_half && e > case_err) {
                case_err = e;
            }
        }
        if (why) {
            printf("FAIL %-52s %s\n", c.label, why);
            failed++;
        } else {
            if (case_half)
                printf("ok   %-52s max|gpu-cpu| = %.2f u x max|cpu| (%.3g), bound %g u, %d step%s\n", c.label, case_err,
                       case_ref, c.tol16, launches, launches == 1 ? "" : "s");
            else
                printf("ok   %-52s max|gpu-cpu| = %.2e x max|cpu| (%.3g), %d step%s\n", c.label, case_err, case_ref,
                       launches, launches == 1 ? "" : "s");
            passed++;
        }
        free(cpu);
        free(gpu);
    }

    /* Bad ids reach the status word at the first bad position. */
    for (int i = 0; i < n_cases; i++) {
        const cuda_case &c = cases[i];
        int bad_in = c.op.op == OP_EMBEDDING ? 0 : c.op.op == OP_CROSS_ENTROPY ? 1 : -1;
        if (bad_in < 0)
            continue;
        size_t bytes = (size_t)(c.arena_bytes + 63) / 64 * 64;
        char *gpu = (char *)aligned_alloc(64, bytes);
        fill_case(c, gpu, r);
        int32_t bad = c.int_range[bad_in] + 5;
        memcpy(gpu + c.op.in[bad_in].offset + 5 * 4, &bad, 4);
        memcpy(gpu + c.op.in[bad_in].offset + 9 * 4, &bad, 4);
        device d{ gpu, std::vector<unsigned char>((size_t)plan.scratch_bytes + 64, 0), RT_CUDA_STATUS_OK, 0, 0.0f };
        int launches = 0;
        const char *why = run_steps(plan, i, d, kernel_of, 1.0f, 0, &launches, c.op);
        char label[128], msg[128];
        snprintf(label, sizeof label, "%s: a bad id at position 5", c.label);
        if (!why && d.status != 5) {
            snprintf(msg, sizeof msg, "status word %lld, expected 5", (long long)d.status);
            why = msg;
        }
        verdict(label, why);
        free(gpu);
    }
    loss_scaling_checks(cases, n_cases, plan, kernel_of, r);

    /* The chains: the fused steps against the CPU kernels run one op after
     * the other on the same arena; every op's outputs compared. */
    for (int j = 0; j < n_chains; j++) {
        const cuda_chain &ch = chains[j];
        const rt_cuda_op &first = plan.ops[chain_first_op[(size_t)j]];
        const rt_cuda_op &last = plan.ops[chain_first_op[(size_t)j] + ch.n_ops - 1];
        int32_t steps = last.first + last.count - first.first;
        size_t bytes = (size_t)(ch.arena_bytes + 63) / 64 * 64;
        char *cpu = (char *)aligned_alloc(64, bytes), *gpu = (char *)aligned_alloc(64, bytes);
        fill_nan(cpu, (int64_t)bytes);
        for (int i = 0; i < ch.n_ops; i++) { /* every tensor random: inputs, and what outputs overwrite */
            const rt_op &op = ch.ops[i];
            for (int k = 0; k < op.n_in + op.n_out; k++) {
                const rt_tensor &t = k < op.n_in ? op.in[k] : op.out[k - op.n_in];
                for (int64_t e = 0, n = rt_tensor_numel(&t); e < n; e++)
                    store(cpu + t.offset, t.dtype, e, (float)(2.0 * r.uniform() - 1.0));
            }
        }
        memcpy(gpu, cpu, bytes);
        const char *why = nullptr;
        rt_context ctx;
        memset(&ctx, 0, sizeof ctx);
        for (int i = 0; i < ch.n_ops && !why; i++)
            if (rt_op_run(&ch.ops[i], cpu, &ctx) != 0)
                why = "a CPU kernel failed";
        device d{ gpu, std::vector<unsigned char>((size_t)plan.scratch_bytes + 64, 0xA5), RT_CUDA_STATUS_OK, 0, 0.0f };
        int launches = 0;
        if (!why)
            why = run_step_range(plan, first.first, first.first + steps, d, kernel_of, 1.0f, 0, &launches, nullptr);
        static char msg[256];
        if (!why && steps != ch.steps) {
            snprintf(msg, sizeof msg, "%d steps, expected %d", (int)steps, ch.steps);
            why = msg;
        }
        double chain_err = 0;
        for (int i = 0; i < ch.n_ops && !why; i++) {
            const rt_tensor &t = ch.ops[i].out[0];
            compared m = compare(t, cpu, gpu);
            if (m.nan || m.max_diff > bound(t, 8, m.max_ref)) {
                snprintf(msg, sizeof msg, "op %d (%s): |gpu - cpu| = %.3g at element %lld, max|cpu| = %.3g", i,
                         ch.ops[i].name, m.max_diff, (long long)m.worst, m.max_ref);
                why = msg;
            }
            chain_err = std::fmax(chain_err, scaled_error(t, m));
        }
        if (why) {
            printf("FAIL chain %-47s %s\n", ch.label, why);
            failed++;
        } else {
            printf("ok   chain %-47s %d ops in %d step%s, max|gpu-cpu| = %.2e %sx max|cpu|\n", ch.label, ch.n_ops,
                   steps, steps == 1 ? "" : "s", chain_err, ch.precision == DT_F32 ? "" : "u ");
            passed++;
        }
        free(cpu);
        free(gpu);
    }
    free(chains);
    printf("largest errors of each kernel family (16-bit outputs: in u, the unit roundoff, x max|cpu|; f32 outputs: "
           "x max|cpu|):\n");
    for (const auto &kv : worst_by_family) {
        size_t bar = kv.first.find('|');
        if (kv.second.any_half)
            printf("  %-22s %-5s 16-bit outputs %5.2f u   f32 outputs %.2e\n", kv.first.substr(0, bar).c_str(),
                   kv.first.substr(bar + 1).c_str(), kv.second.half_u, kv.second.f32_rel);
        else
            printf("  %-22s %-5s f32 outputs %.2e\n", kv.first.substr(0, bar).c_str(), kv.first.substr(bar + 1).c_str(),
                   kv.second.f32_rel);
    }
    printf("%d passed, %d failed\n", passed, failed);
    cuda_plan_free(&plan);
    free(cases);
    return failed ? 1 : 0;
}
