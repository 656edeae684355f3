/* test_cuda_emulation: every generated CUDA kernel, run on the CPU through
 * the emulation shim (cuda_emu.h), against the CPU kernel of the same op.
 *
 * For each case of cuda_cases.c: two arenas get the same random inputs and
 * the same NaN-filled outputs; the CPU runs rt_op_run on one, and the op's
 * CUDA steps run on the other (kernels compiled from the generated source
 * as C++, cuBLAS products by a column-major reference sgemm reached through
 * the backend's own row-major conversion, cuda_gemm.h, which also checks
 * the arguments cuBLAS would refuse).  Every output must agree within
 * 1e-5 x its largest magnitude; a NaN left in an output (an element the
 * kernel never wrote) fails.  Then a bad token id and a bad target must
 * reach the status word at their position.
 *
 * Prints a line a case and 'N passed, N failed'; exits 1 on any failure.
 */
extern "C" {
#include "../../codegen/cuda_kernels.h"
#include "../../ir/op_kinds.h"
#include "../../runtime/cuda/cuda_gemm.h"
#include "../../runtime/exec.h"
}
#include "cuda_cases.h"
#include "cuda_emu.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern const cuda_emu_kernel cuda_emu_kernels[];
extern const int cuda_emu_n_kernels;

namespace {

struct emu_args {            /* the generated prelude's fusion_args */
    char     *p[RT_CUDA_MAX_ARGS];
    long long step;
};

const long long kStep = 3;   /* the optimizer's step number in both runs */

struct rng {
    uint64_t s;
    double uniform()   /* [0, 1) */
    {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        return (double)(s >> 11) / 9007199254740992.0;
    }
};

struct device {              /* the emulated device's memory */
    char                      *arena;
    std::vector<unsigned char> scratch;
    unsigned long long         status;
};

char *place(device &d, const rt_cuda_arg &a)
{
    switch (a.kind) {
    case RT_CUDA_ARG_ARENA:   return d.arena + a.value;
    case RT_CUDA_ARG_SCRATCH: return (char *)d.scratch.data() + a.value;
    case RT_CUDA_ARG_STATUS:  return (char *)&d.status;
    default:                  return nullptr;
    }
}

/* cublasSgemmStridedBatched, column-major, as the reference: the call the
 * backend makes for a row-major step.  Returns a message for an argument
 * cuBLAS would refuse. */
const char *reference_sgemm(device &d, const rt_cuda_step &s)
{
    rt_cuda_colmajor_gemm g = rt_cuda_gemm_colmajor(&s);
    if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 1)
        return "negative size or empty batch";
    if (g.lda < (g.trans_a ? g.k : g.m) || g.lda < 1 || g.ldb < (g.trans_b ? g.n : g.k) || g.ldb < 1 ||
        g.ldc < g.m || g.ldc < 1)
        return "a leading dimension cuBLAS refuses";
    const float *A = (const float *)place(d, s.arg[g.a_arg]), *B = (const float *)place(d, s.arg[g.b_arg]);
    float *C = (float *)place(d, s.arg[2]);
    if (!A || !B || !C)
        return "a NULL operand";
    for (int64_t b = 0; b < g.batch; b++) {
        const float *Ab = A + b * g.stride_a, *Bb = B + b * g.stride_b;
        float *Cb = C + b * g.stride_c;
        for (int64_t j = 0; j < g.n; j++)
            for (int64_t i = 0; i < g.m; i++) {
                double acc = 0;
                for (int64_t l = 0; l < g.k; l++) {
                    float a = g.trans_a ? Ab[l + i * g.lda] : Ab[i + l * g.lda];
                    float x = g.trans_b ? Bb[j + l * g.ldb] : Bb[l + j * g.ldb];
                    acc += (double)a * x;
                }
                float *c = &Cb[i + j * g.ldc];
                *c = g.beta == 0.0f ? (float)(g.alpha * acc) : (float)(g.alpha * acc + (double)g.beta * *c);
            }
    }
    return nullptr;
}

/* Run steps [first, end) on d.  Returns a message, or nullptr. */
const char *run_step_range(const cuda_plan &plan, int32_t first, int32_t end, device &d,
                           const std::vector<int> &kernel_of, int *launches)
{
    for (int32_t i = first; i < end; i++) {
        const rt_cuda_step &s = plan.steps[i];
        if (s.kind == RT_CUDA_STEP_GEMM) {
            if (const char *why = reference_sgemm(d, s))
                return why;
        } else if (s.kind == RT_CUDA_STEP_KERNEL) {
            if (s.shared_bytes > 48 * 1024 || s.block[0] * s.block[1] * s.block[2] > 1024 || s.grid[0] < 1)
                return "a launch no GPU takes (shared memory, block or grid size)";
            emu_args a;
            memset(&a, 0, sizeof a);
            for (int k = 0; k < RT_CUDA_MAX_ARGS; k++)
                a.p[k] = place(d, s.arg[k]);
            a.step = kStep;
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
const char *run_steps(const cuda_plan &plan, int index, device &d, const std::vector<int> &kernel_of, int *launches)
{
    const rt_cuda_op &cop = plan.ops[index];
    return run_step_range(plan, cop.first, cop.first + cop.count, d, kernel_of, launches);
}

/* Inputs: ids in range, or uniform in [-1, 1); a few ops want positive or
 * fixed scalars. Outputs and the workspace: NaN. */
void fill_case(const cuda_case &c, char *arena, rng &r)
{
    const rt_op &op = c.op;
    uint32_t nan_bits = 0x7fc0dead;
    for (int64_t i = 0; i < c.arena_bytes / 4; i++)
        memcpy(arena + i * 4, &nan_bits, 4);
    for (int i = 0; i < op.n_in; i++) {
        int64_t n = rt_tensor_numel(&op.in[i]);
        char *at = arena + op.in[i].offset;
        for (int64_t k = 0; k < n; k++) {
            if (c.int_range[i] > 0) {
                int32_t v = (int32_t)(r.uniform() * c.int_range[i]);
                memcpy(at + k * 4, &v, 4);
                continue;
            }
            float v = (float)(2.0 * r.uniform() - 1.0);
            if (op.op == OP_ADAMW && i == 3)
                v = std::fabs(v) * 0.01f;                       /* v: second moments >= 0 */
            if (op.op == OP_ADAMW && i == 4)
                v = 1e-3f;                                      /* lr */
            if (op.op == OP_ADAMW && i == 5)
                v = 0.7f;                                       /* clip scale */
            if ((op.op == OP_CLIP_SCALE || op.op == OP_SUM_SQUARES) && op.in[i].rank == 0)
                v = 3.7f;                                       /* a sum of squares */
            if (op.op == OP_CROSS_ENTROPY_BACKWARD && i == 2)
                v = 1.7f;                                       /* dloss */
            memcpy(at + k * 4, &v, 4);
        }
    }
}

struct compared {
    double max_diff = 0, max_ref = 0;
    bool   nan = false;
    int64_t worst = -1;
};

compared compare(const rt_tensor &t, const char *cpu, const char *gpu, bool ints)
{
    compared out;
    int64_t n = rt_tensor_numel(&t);
    for (int64_t k = 0; k < n; k++) {
        double a, b;
        if (ints) {
            int32_t x, y;
            memcpy(&x, cpu + t.offset + k * 4, 4);
            memcpy(&y, gpu + t.offset + k * 4, 4);
            a = x, b = y;
        } else {
            float x, y;
            memcpy(&x, cpu + t.offset + k * 4, 4);
            memcpy(&y, gpu + t.offset + k * 4, 4);
            a = x, b = y;
        }
        if (std::isnan(a) || std::isnan(b)) {
            out.nan = true;
            out.worst = k;
            continue;
        }
        out.max_ref = std::fmax(out.max_ref, std::fabs(a));
        if (std::fabs(a - b) > out.max_diff) {
            out.max_diff = std::fabs(a - b);
            out.worst = k;
        }
    }
    return out;
}

}   // namespace

int main()
{
    cuda_case *cases = nullptr;
    int n_cases = cuda_cases_build(&cases);
    cuda_plan plan;
    cuda_plan_init(&plan);
    struct diag err;
    memset(&err, 0, sizeof err);
    for (int i = 0; i < n_cases; i++)
        if (cuda_plan_add_op(&plan, &cases[i].op, &err)) {
            fprintf(stderr, "FAIL plan: case '%s': %s\n", cases[i].label, err.msg);
            return 1;
        }
    /* The chains, fused, each its own group (as cuda_emu_gen adds them). */
    cuda_chain *chains = nullptr;
    int n_chains = cuda_chains_build(&chains);
    std::vector<int> chain_first_op;
    plan.fuse = 1;
    for (int j = 0; j < n_chains; j++) {
        chain_first_op.push_back(plan.n_ops);
        plan.group = 1000 + j;
        for (int i = 0; i < chains[j].n_ops; i++)
            if (cuda_plan_add_op(&plan, &chains[j].ops[i], &err)) {
                fprintf(stderr, "FAIL plan: chain '%s': %s\n", chains[j].label, err.msg);
                return 1;
            }
    }
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
    int passed = 0, failed = 0;
    double worst_rel = 0;
    for (int i = 0; i < n_cases; i++) {
        const cuda_case &c = cases[i];
        size_t bytes = (size_t)(c.arena_bytes + 63) / 64 * 64;
        char *cpu = (char *)aligned_alloc(64, bytes), *gpu = (char *)aligned_alloc(64, bytes);
        fill_case(c, cpu, r);
        memcpy(gpu, cpu, bytes);
        rt_context ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.step = kStep;
        ctx.micro_batch = -1;
        if (rt_op_run(&c.op, cpu, &ctx) != 0) {
            printf("FAIL %s: the CPU kernel failed: %s\n", c.label, ctx.msg);
            failed++;
            continue;
        }
        device d{ gpu, std::vector<unsigned char>((size_t)plan.scratch_bytes + 64, 0xA5), RT_CUDA_STATUS_OK };
        int launches = 0;
        const char *why = run_steps(plan, i, d, kernel_of, &launches);
        if (!why && d.status != (unsigned long long)RT_CUDA_STATUS_OK)
            why = "the status word reports a bad index on good input";
        /* What to compare: the outputs; adamw's results are its inputs 0..3. */
        std::vector<rt_tensor> results;
        for (int k = 0; k < c.op.n_out; k++)
            results.push_back(c.op.out[k]);
        for (int k = 0; c.in_place && k < 4; k++)
            results.push_back(c.op.in[k]);
        double case_rel = 0, case_diff = 0, case_ref = 0;
        for (size_t k = 0; k < results.size() && !why; k++) {
            compared m = compare(results[k], cpu, gpu, c.op.op == OP_POSITIONS);
            double rel = m.max_ref > 0 ? m.max_diff / m.max_ref : m.max_diff > 0 ? INFINITY : 0;
            if (m.nan) {
                static char msg[256];
                snprintf(msg, sizeof msg, "result %zu element %lld is NaN (never written, or wrong)", k,
                         (long long)m.worst);
                why = msg;
            } else if (m.max_diff > 1e-5 * m.max_ref) {
                static char msg[256];
                snprintf(msg, sizeof msg,
                         "result %zu: |gpu - cpu| = %.3g at element %lld, above 1e-5 x max|cpu| = %.3g", k, m.max_diff,
                         (long long)m.worst, 1e-5 * m.max_ref);
                why = msg;
            }
            case_ref = std::fmax(case_ref, m.max_ref);
            if (rel > case_rel) {
                case_rel = rel;
                case_diff = m.max_diff;
            }
        }
        if (why) {
            printf("FAIL %-42s %s\n", c.label, why);
            failed++;
        } else {
            printf("ok   %-42s max|gpu-cpu| %.2e = %.2e x max|cpu| (%.3g), %d step%s\n", c.label, case_diff, case_rel,
                   case_ref, launches, launches == 1 ? "" : "s");
            passed++;
            worst_rel = std::fmax(worst_rel, case_rel);
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
        device d{ gpu, std::vector<unsigned char>((size_t)plan.scratch_bytes + 64, 0), RT_CUDA_STATUS_OK };
        int launches = 0;
        const char *why = run_steps(plan, i, d, kernel_of, &launches);
        if (!why && d.status != 5) {
            printf("FAIL %-42s bad id at position 5: status word %lld, expected 5\n", c.label, (long long)d.status);
            failed++;
        } else if (why) {
            printf("FAIL %-42s bad id: %s\n", c.label, why);
            failed++;
        } else {
            printf("ok   %-42s a bad id at position 5 is reported as 5\n", c.label);
            passed++;
        }
        free(gpu);
    }
    /* The chains: the fused steps against the CPU kernels run one op after
     * the other on the same arena; every op's outputs compared. */
    for (int j = 0; j < n_chains; j++) {
        const cuda_chain &ch = chains[j];
        const rt_cuda_op &first = plan.ops[chain_first_op[(size_t)j]];
        const rt_cuda_op &last = plan.ops[chain_first_op[(size_t)j] + ch.n_ops - 1];
        int32_t steps = last.first + last.count - first.first;
        size_t bytes = (size_t)(ch.arena_bytes + 63) / 64 * 64;
        char *cpu = (char *)aligned_alloc(64, bytes), *gpu = (char *)aligned_alloc(64, bytes);
        for (size_t k = 0; k < bytes / 4; k++) {   /* every float random: inputs, and what outputs overwrite */
            float v = (float)(2.0 * r.uniform() - 1.0);
            memcpy(cpu + k * 4, &v, 4);
        }
        memcpy(gpu, cpu, bytes);
        const char *why = nullptr;
        rt_context ctx;
        memset(&ctx, 0, sizeof ctx);
        for (int i = 0; i < ch.n_ops && !why; i++)
            if (rt_op_run(&ch.ops[i], cpu, &ctx) != 0)
                why = "a CPU kernel failed";
        device d{ gpu, std::vector<unsigned char>((size_t)plan.scratch_bytes + 64, 0xA5), RT_CUDA_STATUS_OK };
        int launches = 0;
        if (!why)
            why = run_step_range(plan, first.first, first.first + steps, d, kernel_of, &launches);
        static char msg[256];
        if (!why && steps != ch.steps) {
            snprintf(msg, sizeof msg, "%d steps, expected %d", (int)steps, ch.steps);
            why = msg;
        }
        double chain_rel = 0;
        for (int i = 0; i < ch.n_ops && !why; i++) {
            compared m = compare(ch.ops[i].out[0], cpu, gpu, false);
            if (m.nan || m.max_diff > 1e-5 * m.max_ref) {
                snprintf(msg, sizeof msg, "op %d (%s): |gpu - cpu| = %.3g at element %lld, max|cpu| = %.3g", i,
                         ch.ops[i].name, m.max_diff, (long long)m.worst, m.max_ref);
                why = msg;
            }
            chain_rel = std::fmax(chain_rel, m.max_ref > 0 ? m.max_diff / m.max_ref : 0);
        }
        if (why) {
            printf("FAIL chain %-36s %s\n", ch.label, why);
            failed++;
        } else {
            printf("ok   chain %-36s %d ops in %d step%s, max|gpu-cpu| = %.2e x max|cpu|\n", ch.label, ch.n_ops, steps,
                   steps == 1 ? "" : "s", chain_rel);
            passed++;
            worst_rel = std::fmax(worst_rel, chain_rel);
        }
        free(cpu);
        free(gpu);
    }
    free(chains);
    printf("largest error of a passing case: %.2e x max|cpu|\n", worst_rel);
    printf("%d passed, %d failed\n", passed, failed);
    cuda_plan_free(&plan);
    free(cases);
    return failed ? 1 : 0;
}
