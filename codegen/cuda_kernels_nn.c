/* cuda_kernels_nn.c: CUDA C for the ops with reductions or windows:
 * layernorm, rmsnorm, batchnorm, softmax, cross-entropy, convolution,
 * pooling, and the optimizer's ops (see cuda_kernels.h; attention is in
 * cuda_kernels_attention.c).
 *
 * Each kernel follows its CPU kernel in runtime/cpu/ step for step (the
 * same float expressions, sums in double), so the emulation harness can
 * hold them to 1e-5 of the output's largest magnitude (a 16-bit output: to
 * one step of its format, where the two f32 results straddle a rounding
 * boundary; tests/unit/cuda_cases.c).  Reductions are one
 * block (NT threads) per row, channel or query; a kernel that needs another
 * launch's row statistics (layernorm and rmsnorm backward, cross-entropy)
 * passes them through the backend's scratch area.
 */
#include "cuda_kernels_internal.h"

#include <math.h>
#include <stdio.h>

#include "../ir/ops.h"
#include "../runtime/stats_mode.h"

#define LL(x) ((long long)(x))

/* ---- layernorm ---------------------------------------------------------------- */

/* Statistics of row xr (C) into mean (double) and rstd; two passes, in double. */
static void kb_row_stats(kbuf *kb, const char *xr, int64_t C, const char *eps)
{
    kb_printf(kb,
              "    double s = 0, ss = 0;\n"
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) s += LD(%s[j]);\n"
              "    double mean = fusion_block_sum(s, red) / %lld.0;\n"
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) { double d = LD(%s[j]) - mean; ss += d "
              "* d; }\n"
              "    double var = fusion_block_sum(ss, red) / %lld.0;\n"
              "    float m = (float)mean, rs = (float)(1.0 / sqrt(var + (double)%s));\n",
              LL(C), xr, LL(C), LL(C), xr, LL(C), eps);
}

/* " + (long long)blockIdx.x * 300LL": a row-per-block kernel's offset, in elements. */
static const char *row_offset(char buf[64], const char *row, int64_t len)
{
    snprintf(buf, 64, " + %s * %lldLL", row, LL(len));
    return buf;
}

/* x (N,C), w (C), b (C) -> y (N,C), one block per row. */
int lower_layernorm(cuda_plan *p, const rt_op *op)
{
    int64_t C = op->in[0].rank > 0 ? op->in[0].dim[op->in[0].rank - 1] : 1, N = rt_tensor_numel(&op->in[0]) / C;
    rt_cuda_arg w = op->n_in > 1 ? in_arg(op, 1) : arg_none(), b = op->n_in > 2 ? in_arg(op, 2) : arg_none();
    char eps[32], row[64];
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_ptr(&kb, "y", 0, out_arg(op, 0), 1, row_offset(row, "(long long)blockIdx.x", C));
    kb_ptr(&kb, "xr", 1, in_arg(op, 0), 0, row);
    kb_ptr(&kb, "w", 2, w, 0, NULL);
    kb_ptr(&kb, "b", 3, b, 0, NULL);
    kb_row_stats(&kb, "xr", C, flit(eps, op->floats[ATTR_EPS]));
    kb_printf(&kb,
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x)\n"
              "        ST(y[j], (LD(xr[j]) - m) * rs * (w ? LD(w[j]) : 1.0f) + (b ? LD(b[j]) : 0.0f));\n",
              LL(C));
    return step_kernel(p, kb_finish(p, &kb, "layernorm_fwd"), N, 0, 0, out_arg(op, 0), in_arg(op, 0), w, b, ARG_END);
}

/* x, w, dy -> dx, dw, db.  Launch 1, a block per row: the row's mean and
 * rstd (kept in scratch as floats, as the CPU kernel keeps them) and dx.
 * Launch 2, a thread per column: dw, db summed over the rows in double. */
int lower_layernorm_backward(cuda_plan *p, const rt_op *op)
{
    int64_t C = op->in[0].rank > 0 ? op->in[0].dim[op->in[0].rank - 1] : 1, N = rt_tensor_numel(&op->in[0]) / C;
    rt_cuda_arg dx = grad_arg(op, 0), dw = grad_arg(op, 1), db = grad_arg(op, 2);
    rt_cuda_arg w = op->n_in > 2 ? in_arg(op, 1) : arg_none(), dy = in_arg(op, op->n_in - 1);
    char eps[32], row[64];
    plan_need_scratch(p, 2 * N * 4);
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_printf(&kb, "    long long r = blockIdx.x;\n");
    kb_ptr(&kb, "xr", 1, in_arg(op, 0), 0, row_offset(row, "r", C));
    kb_ptr(&kb, "dyr", 3, dy, 0, row);
    kb_ptr(&kb, "w", 2, w, 0, NULL);
    kb_printf(&kb, "    float *stats = (float *)a.p[4];\n");
    kb_row_stats(&kb, "xr", C, flit(eps, op->floats[ATTR_EPS]));
    kb_printf(&kb,
              "    if (threadIdx.x == 0) { stats[r] = m; stats[%lldLL + r] = rs; }\n"
              "    if (!a.p[0]) return;\n"
              "    double sg = 0, sgx = 0;\n"
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) {\n"
              "        float xhat = (LD(xr[j]) - m) * rs, g = LD(dyr[j]) * (w ? LD(w[j]) : 1.0f);\n"
              "        sg += g;\n"
              "        sgx += g * xhat;\n"
              "    }\n"
              "    float mg = (float)(fusion_block_sum(sg, red) / %lld.0), mgx = (float)(fusion_block_sum(sgx, red) / "
              "%lld.0);\n",
              LL(N), LL(C), LL(C), LL(C));
    kb_ptr(&kb, "dxr", 0, dx, 1, row);
    kb_printf(&kb,
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) {\n"
              "        float xhat = (LD(xr[j]) - m) * rs, g = LD(dyr[j]) * (w ? LD(w[j]) : 1.0f);\n"
              "        ST(dxr[j], rs * (g - mg - xhat * mgx));\n"
              "    }\n",
              LL(C));
    if (step_kernel(p, kb_finish(p, &kb, "layernorm_bwd_rows"), N, 0, 0, dx, in_arg(op, 0), w, dy, arg_scratch(0),
                    ARG_END))
        return -1;
    if (!dw.kind && !db.kind)
        return 0;
    kb_ptr(&kb, "dw", 0, dw, 1, NULL);
    kb_ptr(&kb, "db", 1, db, 1, NULL);
    kb_ptr(&kb, "x", 2, in_arg(op, 0), 0, NULL);
    kb_ptr(&kb, "dy", 3, dy, 0, NULL);
    kb_printf(&kb,
              "    const float *stats = (const float *)a.p[4];\n"
              "    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    if (j >= %lldLL) return;\n"
              "    double aw = 0, ab = 0;\n"
              "    for (long long r = 0; r < %lldLL; r++) {\n"
              "        float m = stats[r], rs = stats[%lldLL + r], g = LD(dy[r * %lldLL + j]);\n"
              "        aw += g * ((LD(x[r * %lldLL + j]) - m) * rs);\n"
              "        ab += g;\n"
              "    }\n"
              "    if (dw) ST(dw[j], (float)aw);\n"
              "    if (db) ST(db[j], (float)ab);\n",
              LL(C), LL(N), LL(N), LL(C), LL(C));
    return step_kernel(p, kb_finish(p, &kb, "layernorm_bwd_cols"), (C + NT - 1) / NT, 0, 0, dw, db, in_arg(op, 0), dy,
                       arg_scratch(0), ARG_END);
}

/* ---- rmsnorm (Llama's) ------------------------------------------------------------- */

/* r = 1/sqrt(mean(xr²) + eps) of row xr (C), the mean in double, as
 * runtime/cpu/norm.c's row_rrms. */
static void kb_row_rrms(kbuf *kb, const char *xr, int64_t C, const char *eps)
{
    kb_printf(
        kb,
        "    double ss = 0;\n"
        "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) { double d = LD(%s[j]); ss += d * d; }\n"
        "    float r = (float)(1.0 / sqrt(fusion_block_sum(ss, red) / %lld.0 + (double)%s));\n",
        LL(C), xr, LL(C), eps);
}

/* x (N,C), w (C) -> y (N,C) = x·r·w, one block per row. */
int lower_rmsnorm(cuda_plan *p, const rt_op *op)
{
    int64_t C = op->in[0].dim[op->in[0].rank - 1], N = rt_tensor_numel(&op->in[0]) / C;
    char eps[32], row[64];
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_ptr(&kb, "y", 0, out_arg(op, 0), 1, row_offset(row, "(long long)blockIdx.x", C));
    kb_ptr(&kb, "xr", 1, in_arg(op, 0), 0, row);
    kb_ptr(&kb, "w", 2, in_arg(op, 1), 0, NULL);
    kb_row_rrms(&kb, "xr", C, flit(eps, op->floats[ATTR_EPS]));
    kb_printf(&kb,
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) ST(y[j], LD(xr[j]) * r * LD(w[j]));\n",
              LL(C));
    return step_kernel(p, kb_finish(p, &kb, "rmsnorm_fwd"), N, 0, 0, out_arg(op, 0), in_arg(op, 0), in_arg(op, 1),
                       ARG_END);
}

/* x, w, dy -> dx, dw.  With xhat = x·r and g = dy·w:
 *   dx = r·(g - xhat·mean_j(g·xhat))      dw = Σ_rows dy·xhat
 * Launch 1, a block per row: r (kept in scratch, N floats, as the CPU
 * keeps it) and dx.  Launch 2, a thread per column: dw summed over the
 * rows in double. */
int lower_rmsnorm_backward(cuda_plan *p, const rt_op *op)
{
    int64_t C = op->in[0].dim[op->in[0].rank - 1], N = rt_tensor_numel(&op->in[0]) / C;
    rt_cuda_arg dx = grad_arg(op, 0), dw = grad_arg(op, 1), dy = in_arg(op, 2);
    char eps[32], row[64];
    plan_need_scratch(p, N * 4);
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_printf(&kb, "    long long row = blockIdx.x;\n");
    kb_ptr(&kb, "xr", 1, in_arg(op, 0), 0, row_offset(row, "row", C));
    kb_ptr(&kb, "dyr", 3, dy, 0, row);
    kb_ptr(&kb, "w", 2, in_arg(op, 1), 0, NULL);
    kb_printf(&kb, "    float *rrms = (float *)a.p[4];\n");
    kb_row_rrms(&kb, "xr", C, flit(eps, op->floats[ATTR_EPS]));
    kb_printf(&kb,
              "    if (threadIdx.x == 0) rrms[row] = r;\n"
              "    if (!a.p[0]) return;\n"
              "    double sgx = 0;\n"
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) sgx += LD(dyr[j]) * LD(w[j]) * "
              "(LD(xr[j]) * r);\n"
              "    float mgx = (float)(fusion_block_sum(sgx, red) / %lld.0);\n",
              LL(C), LL(C));
    kb_ptr(&kb, "dxr", 0, dx, 1, row);
    kb_printf(&kb,
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x)\n"
              "        ST(dxr[j], r * (LD(dyr[j]) * LD(w[j]) - LD(xr[j]) * r * mgx));\n",
              LL(C));
    if (step_kernel(p, kb_finish(p, &kb, "rmsnorm_bwd_rows"), N, 0, 0, dx, in_arg(op, 0), in_arg(op, 1), dy,
                    arg_scratch(0), ARG_END))
        return -1;
    if (!dw.kind)
        return 0;
    kb_ptr(&kb, "dw", 0, dw, 1, NULL);
    kb_ptr(&kb, "x", 1, in_arg(op, 0), 0, NULL);
    kb_ptr(&kb, "dy", 2, dy, 0, NULL);
    kb_printf(
        &kb,
        "    const float *rrms = (const float *)a.p[3];\n"
        "    long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
        "    if (j >= %lldLL) return;\n"
        "    double aw = 0;\n"
        "    for (long long r = 0; r < %lldLL; r++) aw += LD(dy[r * %lldLL + j]) * (LD(x[r * %lldLL + j]) * rrms[r]);\n"
        "    ST(dw[j], (float)aw);\n",
        LL(C), LL(N), LL(C), LL(C));
    return step_kernel(p, kb_finish(p, &kb, "rmsnorm_bwd_cols"), (C + NT - 1) / NT, 0, 0, dw, in_arg(op, 0), dy,
                       arg_scratch(0), ARG_END);
}

/* ---- batchnorm (training mode) ------------------------------------------------------ */

/* Channel c's statistics over x (N,C,HW): mean, var (double), m, rs (float). */
static void kb_channel_stats(kbuf *kb, int64_t N, int64_t C, int64_t HW, const char *eps)
{
    kb_printf(kb,
              "    const long long c = blockIdx.x, count = %lldLL;\n"
              "#define AT(i) ((((i) / %lldLL) * %lldLL + c) * %lldLL + (i) %% %lldLL)\n"
              "    double s = 0, ss = 0;\n"
              "    for (long long i = threadIdx.x; i < count; i += blockDim.x) s += LD(x[AT(i)]);\n"
              "    double mean = fusion_block_sum(s, red) / (double)count;\n"
              "    for (long long i = threadIdx.x; i < count; i += blockDim.x) { double d = LD(x[AT(i)]) - mean; ss += "
              "d * d; }\n"
              "    double var = fusion_block_sum(ss, red) / (double)count;\n"
              "    float m = (float)mean, rs = (float)(1.0 / sqrt(var + (double)%s));\n",
              LL(N * HW), LL(HW), LL(C), LL(HW), LL(HW), eps);
}

static void channel_sizes(const rt_op *op, int64_t *N, int64_t *C, int64_t *HW)
{
    const rt_tensor *x = &op->in[0];
    *N = x->dim[0];
    *C = x->dim[1];
    *HW = rt_tensor_numel(x) / (*N * *C);
}

/* x (N,C,HW), w, b (C)[, running mean, var (C)] -> y, one block per
 * channel.  With running statistics, the launch's stats_mode (stats_mode.h's
 * rt_stats_mode) says what to do with them: fold the batch's in (with the
 * unbiased variance, as the CPU's batchnorm_forward), leave them, or
 * normalise by them (batchnorm_inference). */
int lower_batchnorm(cuda_plan *p, const rt_op *op)
{
    int64_t N, C, HW;
    channel_sizes(op, &N, &C, &HW);
    int running = op->n_in == 5;
    rt_cuda_arg w = op->n_in > 1 ? in_arg(op, 1) : arg_none(), b = op->n_in > 2 ? in_arg(op, 2) : arg_none();
    rt_cuda_arg rm = running ? in_arg(op, 3) : arg_none(), rv = running ? in_arg(op, 4) : arg_none();
    const rt_cuda_arg args[] = { out_arg(op, 0), in_arg(op, 0), w, b, rm, rv };
    char eps[32], momentum[32];
    flit(eps, op->floats[ATTR_EPS]);
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_ptrs(&kb, "y! x w b rm! rv!", args, 6);
    if (running)
        kb_printf(&kb,
                  "    if (a.stats_mode == %d) {\n"
                  "        const long long c = blockIdx.x, count = %lldLL;\n"
                  "#define AT(i) ((((i) / %lldLL) * %lldLL + c) * %lldLL + (i) %% %lldLL)\n"
                  "        float m = LD(rm[c]), rs = (float)(1.0 / sqrt((double)LD(rv[c]) + (double)%s));\n"
                  "        float wc = w ? LD(w[c]) : 1.0f, bc = b ? LD(b[c]) : 0.0f;\n"
                  "        for (long long i = threadIdx.x; i < count; i += blockDim.x) ST(y[AT(i)], (LD(x[AT(i)]) - m) "
                  "* rs * wc + bc);\n"
                  "        return;\n"
                  "#undef AT\n"
                  "    }\n",
                  RT_STATS_USE, LL(N * HW), LL(HW), LL(C), LL(HW), LL(HW), eps);
    kb_channel_stats(&kb, N, C, HW, eps);
    kb_printf(&kb, "    float wc = w ? LD(w[c]) : 1.0f, bc = b ? LD(b[c]) : 0.0f;\n"
                   "    for (long long i = threadIdx.x; i < count; i += blockDim.x) ST(y[AT(i)], (LD(x[AT(i)]) - m) * "
                   "rs * wc + bc);\n"
                   "#undef AT\n");
    if (running)
        kb_printf(&kb,
                  "    if (a.stats_mode == %d && threadIdx.x == 0) {\n"
                  "        double mo = %s, unbiased = count > 1 ? var * (double)count / (double)(count - 1) : var;\n"
                  "        ST(rm[c], (float)((1.0 - mo) * LD(rm[c]) + mo * mean));\n"
                  "        ST(rv[c], (float)((1.0 - mo) * LD(rv[c]) + mo * unbiased));\n"
                  "    }\n",
                  RT_STATS_UPDATE, flit(momentum, op->floats[ATTR_MOMENTUM]));
    return step_kernel(p, kb_finish(p, &kb, running ? "batchnorm_fwd_running" : "batchnorm_fwd"), C, 0, 0, args[0],
                       args[1], args[2], args[3], args[4], args[5], ARG_END);
}

/* x, w, dy -> dx, dw, db, one block per channel. */
int lower_batchnorm_backward(cuda_plan *p, const rt_op *op)
{
    int64_t N, C, HW;
    channel_sizes(op, &N, &C, &HW);
    const rt_cuda_arg args[] = { grad_arg(op, 0),
                                 grad_arg(op, 1),
                                 grad_arg(op, 2),
                                 in_arg(op, 0),
                                 op->n_in > 2 ? in_arg(op, 1) : arg_none(),
                                 in_arg(op, op->n_in - 1) };
    char eps[32];
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_ptrs(&kb, "dx! dw! db! x w dy", args, 6);
    kb_channel_stats(&kb, N, C, HW, flit(eps, op->floats[ATTR_EPS]));
    kb_printf(&kb, "    double sdy = 0, sdyx = 0;\n"
                   "    for (long long i = threadIdx.x; i < count; i += blockDim.x) {\n"
                   "        float g = LD(dy[AT(i)]);\n"
                   "        sdy += g;\n"
                   "        sdyx += g * ((LD(x[AT(i)]) - m) * rs);\n"
                   "    }\n"
                   "    sdy = fusion_block_sum(sdy, red);\n"
                   "    sdyx = fusion_block_sum(sdyx, red);\n"
                   "    if (threadIdx.x == 0 && dw) ST(dw[c], (float)sdyx);\n"
                   "    if (threadIdx.x == 0 && db) ST(db[c], (float)sdy);\n"
                   "    if (!dx) return;\n"
                   "    float k = (w ? LD(w[c]) : 1.0f) * rs, mdy = (float)(sdy / (double)count), mdyx = (float)(sdyx "
                   "/ (double)count);\n"
                   "    for (long long i = threadIdx.x; i < count; i += blockDim.x)\n"
                   "        ST(dx[AT(i)], k * (LD(dy[AT(i)]) - mdy - (LD(x[AT(i)]) - m) * rs * mdyx));\n"
                   "#undef AT\n");
    return step_kernel(p, kb_finish(p, &kb, "batchnorm_bwd"), C, 0, 0, args[0], args[1], args[2], args[3], args[4],
                       args[5], ARG_END);
}

/* ---- softmax ---------------------------------------------------------------------- */

/* x (R,L) -> y, one block per row; causal: row r keeps j <= r % L. */
int lower_softmax(cuda_plan *p, const rt_op *op)
{
    int64_t L = op->in[0].rank > 0 ? op->in[0].dim[op->in[0].rank - 1] : 1, R = rt_tensor_numel(&op->in[0]) / L;
    int causal = op->ints[ATTR_CAUSAL] != 0;
    char valid[64], row[64];
    if (causal)
        snprintf(valid, sizeof valid, "r %% %lldLL + 1", LL(L));
    else
        snprintf(valid, sizeof valid, "%lldLL", LL(L));
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_printf(&kb, "    long long r = blockIdx.x, valid = %s;\n", valid);
    kb_ptr(&kb, "x", 1, in_arg(op, 0), 0, row_offset(row, "r", L));
    kb_ptr(&kb, "y", 0, out_arg(op, 0), 1, row);
    kb_printf(&kb,
              "    float mx = -FUSION_INF;\n"
              "    for (long long j = threadIdx.x; j < valid; j += blockDim.x) { float xj = LD(x[j]); mx = xj > mx ? "
              "xj : mx; }\n"
              "    mx = fusion_block_max(mx, redf);\n"
              "    double s = 0;\n"
              "    for (long long j = threadIdx.x; j < valid; j += blockDim.x) s += expf(LD(x[j]) - mx);\n"
              "    float inv = (float)(1.0 / fusion_block_sum(s, red));\n"
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) ST(y[j], j < valid ? expf(LD(x[j]) - "
              "mx) * inv : 0.0f);\n",
              LL(L));
    return step_kernel(p, kb_finish(p, &kb, causal ? "softmax_causal_fwd" : "softmax_fwd"), R, 0, 0, out_arg(op, 0),
                       in_arg(op, 0), ARG_END);
}

/* y, dy -> dx = y·(dy - Σ dy·y), one block per row. */
int lower_softmax_backward(cuda_plan *p, const rt_op *op)
{
    int64_t L = op->in[0].rank > 0 ? op->in[0].dim[op->in[0].rank - 1] : 1, R = rt_tensor_numel(&op->in[0]) / L;
    char row[64];
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_printf(&kb, "    long long r = blockIdx.x;\n");
    kb_ptr(&kb, "y", 1, in_arg(op, 0), 0, row_offset(row, "r", L));
    kb_ptr(&kb, "dy", 2, in_arg(op, 1), 0, row);
    kb_ptr(&kb, "dx", 0, out_arg(op, 0), 1, row);
    kb_printf(
        &kb,
        "    double dot = 0;\n"
        "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) dot += LD(dy[j]) * LD(y[j]);\n"
        "    float d = (float)fusion_block_sum(dot, red);\n"
        "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) ST(dx[j], LD(y[j]) * (LD(dy[j]) - d));\n",
        LL(L), LL(L));
    return step_kernel(p, kb_finish(p, &kb, "softmax_bwd"), R, 0, 0, out_arg(op, 0), in_arg(op, 0), in_arg(op, 1),
                       ARG_END);
}

/* ---- cross-entropy ---------------------------------------------------------------- */

/* Row max and Σ exp(x - max) of row x (V) into mx, s (every thread). */
static void kb_row_logsumexp(kbuf *kb, int64_t V)
{
    kb_printf(kb,
              "    float mx = -FUSION_INF;\n"
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) { float xj = LD(x[j]); mx = xj > mx ? "
              "xj : mx; }\n"
              "    mx = fusion_block_max(mx, redf);\n"
              "    double s = 0;\n"
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) s += expf(LD(x[j]) - mx);\n"
              "    s = fusion_block_sum(s, red);\n",
              LL(V), LL(V));
}

/* logits (N,V), targets (N) -> loss: a block per row writes its loss (double)
 * to scratch (0 for an ignored target), one block sums them, times the
 * step's loss weight (fusion_args).  A bad target is reported. */
int lower_cross_entropy(cuda_plan *p, const rt_op *op)
{
    int64_t V = op->in[0].dim[op->in[0].rank - 1], N = rt_tensor_numel(&op->in[0]) / V;
    char row[64];
    plan_need_scratch(p, N * 8);
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_printf(&kb, "    long long r = blockIdx.x;\n");
    kb_ptr(&kb, "x", 1, in_arg(op, 0), 0, row_offset(row, "r", V));
    kb_printf(&kb,
              "    int t = ((const int *)a.p[2])[r];\n"
              "    double *rows = (double *)a.p[3];\n"
              "    if (t == %d) { if (threadIdx.x == 0) rows[r] = 0; return; }\n"
              "    if (t < 0 || t >= %lld) { if (threadIdx.x == 0) { fusion_report_bad(a.p[4], r); rows[r] = 0; } "
              "return; }\n",
              OP_IGNORE_TARGET, LL(V));
    kb_row_logsumexp(&kb, V);
    kb_printf(&kb, "    if (threadIdx.x == 0) rows[r] = (double)mx + log(s) - (double)LD(x[t]);\n");
    if (step_kernel(p, kb_finish(p, &kb, "cross_entropy_rows"), N, 0, 1, out_arg(op, 0), in_arg(op, 0), in_arg(op, 1),
                    arg_scratch(0), arg_status(), ARG_END))
        return -1;
    kb_printf(&kb, "%s", RED_DECLS);
    kb_ptr(&kb, "loss", 0, out_arg(op, 0), 1, NULL);
    kb_printf(
        &kb,
        "    const double *rows = (const double *)a.p[1];\n"
        "    double s = 0;\n"
        "    for (long long r = threadIdx.x; r < %lldLL; r += blockDim.x) s += rows[r];\n"
        "    s = fusion_block_sum(s, red);\n"
        "    if (threadIdx.x == 0) ST(*loss, (float)(s / %lld.0) * (a.loss_weight > 0 ? a.loss_weight : 1.0f));\n",
        LL(N), LL(N));
    return step_kernel(p, kb_finish(p, &kb, "mean_rows"), 1, 0, 0, out_arg(op, 0), arg_scratch(0), ARG_END);
}

/* logits, targets, dloss -> dlogits = dloss/N · (softmax - onehot), a block
 * per row; the target's element takes its - dloss/N before it is stored
 * (one rounding, as the CPU's). */
int lower_cross_entropy_backward(cuda_plan *p, const rt_op *op)
{
    int64_t V = op->in[0].dim[op->in[0].rank - 1], N = rt_tensor_numel(&op->in[0]) / V;
    char row[64];
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_printf(&kb, "    long long r = blockIdx.x;\n");
    kb_ptr(&kb, "x", 1, in_arg(op, 0), 0, row_offset(row, "r", V));
    kb_ptr(&kb, "dx", 0, out_arg(op, 0), 1, row);
    kb_ptr(&kb, "dloss", 3, in_arg(op, 2), 0, NULL);
    kb_printf(
        &kb,
        "    int t = ((const int *)a.p[2])[r];\n"
        "    if (t == %d) { for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) ST(dx[j], 0.0f); return; }\n"
        "    if (t < 0 || t >= %lld) { if (threadIdx.x == 0) fusion_report_bad(a.p[4], r); return; }\n"
        "    float g = (float)((double)LD(*dloss) * (a.loss_weight > 0 ? a.loss_weight : 1.0f) / %lld.0);\n",
        OP_IGNORE_TARGET, LL(V), LL(V), LL(N));
    kb_row_logsumexp(&kb, V);
    kb_printf(&kb,
              "    float inv = (float)(1.0 / s);\n"
              "    for (long long j = threadIdx.x; j < %lldLL; j += blockDim.x) {\n"
              "        float d = (expf(LD(x[j]) - mx) * inv) * g;\n"
              "        ST(dx[j], j == t ? d - g : d);\n"
              "    }\n",
              LL(V));
    return step_kernel(p, kb_finish(p, &kb, "cross_entropy_bwd"), N, 0, 1, out_arg(op, 0), in_arg(op, 0), in_arg(op, 1),
                       in_arg(op, 2), arg_status(), ARG_END);
}

/* ---- convolution ------------------------------------------------------------------ */

typedef struct {
    int64_t N, C, H, W, OC, KH, KW, s, pad, OH, OW, P, CKK;
    int pointwise;
} conv_dims;

static conv_dims conv_dims_of(const rt_op *op)
{
    const rt_tensor *x = &op->in[0], *w = &op->in[1];
    conv_dims d = {
        x->dim[0],          x->dim[1], x->dim[2], x->dim[3], w->dim[0], w->dim[2], w->dim[3], op->ints[ATTR_STRIDE],
        op->ints[ATTR_PAD], 0,         0,         0,         0,         0
    };
    d.OH = (d.H + 2 * d.pad - d.KH) / d.s + 1;
    d.OW = (d.W + 2 * d.pad - d.KW) / d.s + 1;
    d.P = d.OH * d.OW;
    d.CKK = d.C * d.KH * d.KW;
    d.pointwise = d.KH == 1 && d.KW == 1 && d.s == 1 && d.pad == 0;
    return d;
}

/* col (C·KH·KW, OH·OW) = the unrolled image x (C,H,W), zeros outside. */
static int step_im2col(cuda_plan *p, const conv_dims *d, rt_cuda_arg col, rt_cuda_arg x)
{
    char body[1024];
    snprintf(
        body, sizeof body,
        "        long long row = i / %lldLL, pix = i %% %lldLL;\n"
        "        long long kw = row %% %lldLL, kh = (row / %lldLL) %% %lldLL, c = row / %lldLL;\n"
        "        long long ih = (pix / %lldLL) * %lldLL - %lldLL + kh, iw = (pix %% %lldLL) * %lldLL - %lldLL + kw;\n"
        "        ST(col[i], ih >= 0 && ih < %lldLL && iw >= 0 && iw < %lldLL ? LD(x[(c * %lldLL + ih) * %lldLL + iw]) "
        ": 0.0f);\n",
        LL(d->P), LL(d->P), LL(d->KW), LL(d->KW), LL(d->KH), LL(d->KW * d->KH), LL(d->OW), LL(d->s), LL(d->pad),
        LL(d->OW), LL(d->s), LL(d->pad), LL(d->H), LL(d->W), LL(d->H), LL(d->W));
    return elementwise(p, "im2col", d->CKK * d->P, "col! x", body, col, x, ARG_END);
}

/* x (C,H,W) = the adjoint of im2col applied to col: each pixel gathers its
 * (kh, kw) entries in the CPU's order. */
static int step_col2im(cuda_plan *p, const conv_dims *d, rt_cuda_arg x, rt_cuda_arg col)
{
    char body[1536];
    snprintf(body, sizeof body,
             "        long long c = i / %lldLL, ih = (i / %lldLL) %% %lldLL, iw = i %% %lldLL;\n"
             "        float acc = 0.0f;\n"
             "        for (long long kh = 0; kh < %lldLL; kh++)\n"
             "            for (long long kw = 0; kw < %lldLL; kw++) {\n"
             "                long long th = ih + %lldLL - kh, tw = iw + %lldLL - kw;\n"
             "                if (th < 0 || tw < 0 || th %% %lldLL || tw %% %lldLL) continue;\n"
             "                long long oh = th / %lldLL, ow = tw / %lldLL;\n"
             "                if (oh >= %lldLL || ow >= %lldLL) continue;\n"
             "                acc += LD(col[((c * %lldLL + kh) * %lldLL + kw) * %lldLL + oh * %lldLL + ow]);\n"
             "            }\n"
             "        ST(x[i], acc);\n",
             LL(d->H * d->W), LL(d->W), LL(d->H), LL(d->W), LL(d->KH), LL(d->KW), LL(d->pad), LL(d->pad), LL(d->s),
             LL(d->s), LL(d->s), LL(d->s), LL(d->OH), LL(d->OW), LL(d->KH), LL(d->KW), LL(d->P), LL(d->OW));
    return elementwise(p, "col2im", d->C * d->H * d->W, "x! col", body, x, col, ARG_END);
}

/* x (N,C,H,W), w (OC,C,KH,KW), b? -> y (N,OC,OH,OW): per image, im2col into
 * the op's workspace and one product (w·col) onto the broadcast bias; a
 * pointwise convolution is one batched product on x itself.  In 16 bits
 * the columns are in the product's type and w is read rounded (exec.h's
 * scratch layout: the columns first, then the copy of w). */
int lower_conv2d(cuda_plan *p, const rt_op *op)
{
    conv_dims d = conv_dims_of(op);
    int bias = op->n_in == 3;
    if (!d.pointwise && op->ws_offset < 0)
        return -2;
    rt_cuda_arg x, w;
    int rc = product_operand(p, op, 0, &x);
    if (rc || (rc = product_operand(p, op, 1, &w)))
        return rc;
    if (bias) {
        char body[128];
        snprintf(body, sizeof body, "        ST(y[i], LD(b[(i / %lldLL) %% %lldLL]));\n", LL(d.P), LL(d.OC));
        if (elementwise(p, "bias_planes", d.N * d.OC * d.P, "y! b", body, out_arg(op, 0), in_arg(op, 2), ARG_END))
            return -1;
    }
    float beta = bias ? 1.0f : 0.0f;
    if (d.pointwise)
        return step_gemm(p, 0, 0, d.OC, d.P, d.CKK, 1.0f, w, d.CKK, 0, x, d.P, d.C * d.H * d.W, beta, out_arg(op, 0),
                         d.P, d.OC * d.P, d.N);
    rt_cuda_arg col = arg_arena(op->ws_offset, w.dtype);
    for (int64_t n = 0; n < d.N; n++) {
        if (step_im2col(p, &d, col, arg_elems(x, n * d.C * d.H * d.W)) ||
            step_gemm(p, 0, 0, d.OC, d.P, d.CKK, 1.0f, w, d.CKK, 0, col, d.P, 0, beta,
                      arg_elems(out_arg(op, 0), n * d.OC * d.P), d.P, 0, 1))
            return -1;
    }
    return 0;
}

/* x, w, dy -> dx, dw, db, in the CPU kernel's order (the workspace holds one
 * image's columns, in the product's type, then wᵀ·dy[n] in f32, then in 16
 * bits the rounded w):
 *   db[oc] = Σ dy over images and pixels     a block per channel
 *   dw += dy[n]·im2col(x[n])ᵀ                 (the first image overwrites)
 *   dx[n] = col2im(wᵀ·dy[n]) */
int lower_conv2d_backward(cuda_plan *p, const rt_op *op)
{
    conv_dims d = conv_dims_of(op);
    rt_cuda_arg dx = grad_arg(op, 0), dw = grad_arg(op, 1), db = grad_arg(op, 2), x, w, dy;
    if (!d.pointwise && op->ws_offset < 0)
        return -2;
    int rc = product_operand(p, op, 0, &x);
    if (rc || (rc = product_operand(p, op, 1, &w)) || (rc = product_operand(p, op, 2, &dy)))
        return rc;
    if (db.kind) {
        kbuf kb = { 0 };
        kb_printf(&kb, "%s", RED_DECLS);
        kb_ptr(&kb, "db", 0, db, 1, NULL);
        kb_ptr(&kb, "dy", 1, in_arg(op, 2), 0, NULL);
        kb_printf(&kb,
                  "    long long oc = blockIdx.x;\n"
                  "    double s = 0;\n"
                  "    for (long long i = threadIdx.x; i < %lldLL; i += blockDim.x)\n"
                  "        s += LD(dy[((i / %lldLL) * %lldLL + oc) * %lldLL + i %% %lldLL]);\n"
                  "    s = fusion_block_sum(s, red);\n"
                  "    if (threadIdx.x == 0) ST(db[oc], (float)s);\n",
                  LL(d.N * d.P), LL(d.P), LL(d.OC), LL(d.P), LL(d.P));
        if (step_kernel(p, kb_finish(p, &kb, "conv_bias_grad"), d.OC, 0, 0, db, in_arg(op, 2), ARG_END))
            return -1;
    }
    rt_cuda_arg col = d.pointwise ? arg_none() : arg_arena(op->ws_offset, dy.dtype);
    rt_cuda_arg wt_dy = d.pointwise ? arg_none() : arg_arena(op->ws_offset, DT_F32);
    if (dx.kind && d.pointwise &&
        step_gemm(p, 1, 0, d.C, d.P, d.OC, 1.0f, w, d.CKK, 0, dy, d.P, d.OC * d.P, 0.0f, dx, d.P, d.C * d.H * d.W, d.N))
        return -1;
    for (int64_t n = 0; n < d.N; n++) {
        rt_cuda_arg xn = arg_elems(x, n * d.C * d.H * d.W), dyn = arg_elems(dy, n * d.OC * d.P);
        if (dw.kind) {
            rt_cuda_arg cols = xn;
            if (!d.pointwise) {
                if (step_im2col(p, &d, col, xn))
                    return -1;
                cols = col;
            }
            if (step_gemm(p, 0, 1, d.OC, d.CKK, d.P, 1.0f, dyn, d.P, 0, cols, d.P, 0, n ? 1.0f : 0.0f, dw, d.CKK, 0, 1))
                return -1;
        }
        if (dx.kind && !d.pointwise &&
            (step_gemm(p, 1, 0, d.CKK, d.P, d.OC, 1.0f, w, d.CKK, 0, dyn, d.P, 0, 0.0f, wt_dy, d.P, 0, 1) ||
             step_col2im(p, &d, arg_elems(dx, n * d.C * d.H * d.W), wt_dy)))
            return -1;
    }
    return 0;
}

/* ---- pooling ----------------------------------------------------------------------- */

/* maxpool: x (N,C,H,W) -> y (N,C,OH,OW), a thread per output; backward, a
 * thread per input pixel gathering the dy of the windows whose max it is,
 * in the CPU's (oh, ow) order. */
int lower_maxpool(cuda_plan *p, const rt_op *op)
{
    int backward = op->op == OP_MAXPOOL_BACKWARD;
    const rt_tensor *x = &op->in[0];
    int64_t N = x->dim[0], C = x->dim[1], H = x->dim[2], W = x->dim[3];
    int64_t k = op->ints[ATTR_KERNEL], s = op->ints[ATTR_STRIDE] ? op->ints[ATTR_STRIDE] : k, pad = op->ints[ATTR_PAD];
    int64_t OH = (H + 2 * pad - k) / s + 1, OW = (W + 2 * pad - k) / s + 1;
    char body[1536];
    if (!backward) {
        snprintf(body, sizeof body,
                 "        long long nc = i / %lldLL, pix = i %% %lldLL;\n"
                 "        const auto *plane = x + nc * %lldLL;\n"
                 "        long long at = fusion_window_argmax(plane, %lldLL, %lldLL, %lldLL, %lldLL, %lldLL, pix / "
                 "%lldLL, pix %% %lldLL);\n"
                 "        ST(y[i], at >= 0 ? LD(plane[at]) : -FUSION_INF);\n",
                 LL(OH * OW), LL(OH * OW), LL(H * W), LL(H), LL(W), LL(k), LL(s), LL(pad), LL(OW), LL(OW));
        return elementwise(p, "maxpool_fwd", N * C * OH * OW, "y! x", body, out_arg(op, 0), in_arg(op, 0), ARG_END);
    }
    snprintf(
        body, sizeof body,
        "        long long nc = i / %lldLL, ih = (i / %lldLL) %% %lldLL, iw = i %% %lldLL, pos = ih * %lldLL + iw;\n"
        "        const auto *plane = x + nc * %lldLL;\n"
        "        const auto *g = dy + nc * %lldLL;\n"
        "        long long lh = ih + %lldLL - %lldLL + 1, lw = iw + %lldLL - %lldLL + 1;\n"
        "        long long oh0 = lh <= 0 ? 0 : (lh + %lldLL - 1) / %lldLL, ow0 = lw <= 0 ? 0 : (lw + %lldLL - 1) / "
        "%lldLL;\n"
        "        long long oh1 = (ih + %lldLL) / %lldLL, ow1 = (iw + %lldLL) / %lldLL;\n"
        "        if (oh1 > %lldLL) oh1 = %lldLL;\n"
        "        if (ow1 > %lldLL) ow1 = %lldLL;\n"
        "        float acc = 0.0f;\n"
        "        for (long long oh = oh0; oh <= oh1; oh++)\n"
        "            for (long long ow = ow0; ow <= ow1; ow++)\n"
        "                if (fusion_window_argmax(plane, %lldLL, %lldLL, %lldLL, %lldLL, %lldLL, oh, ow) == pos)\n"
        "                    acc += LD(g[oh * %lldLL + ow]);\n"
        "        ST(dx[i], acc);\n",
        LL(H * W), LL(W), LL(H), LL(W), LL(W), LL(H * W), LL(OH * OW), LL(pad), LL(k), LL(pad), LL(k), LL(s), LL(s),
        LL(s), LL(s), LL(pad), LL(s), LL(pad), LL(s), LL(OH - 1), LL(OH - 1), LL(OW - 1), LL(OW - 1), LL(H), LL(W),
        LL(k), LL(s), LL(pad), LL(OW));
    return elementwise(p, "maxpool_bwd", N * C * H * W, "dx! dy x", body, out_arg(op, 0), in_arg(op, 1), in_arg(op, 0),
                       ARG_END);
}

/* global average pooling: x (N,C,HW) -> y (N,C), a thread per plane; the
 * backward spreads dy / HW over the plane. */
int lower_avgpool(cuda_plan *p, const rt_op *op)
{
    int backward = op->op == OP_AVGPOOL_GLOBAL_BACKWARD;
    const rt_tensor *x = backward ? &op->out[0] : &op->in[0];
    int64_t NC = x->dim[0] * x->dim[1], HW = x->dim[2] * x->dim[3];
    char body[256];
    if (!backward) {
        snprintf(body, sizeof body,
                 "        double s = 0;\n"
                 "        for (long long j = 0; j < %lldLL; j++) s += LD(x[i * %lldLL + j]);\n"
                 "        ST(y[i], (float)(s / %lld.0));\n",
                 LL(HW), LL(HW), LL(HW));
        return elementwise(p, "avgpool_fwd", NC, "y! x", body, out_arg(op, 0), in_arg(op, 0), ARG_END);
    }
    snprintf(body, sizeof body, "        ST(dx[i], LD(dy[i / %lldLL]) / (float)%lldLL);\n", LL(HW), LL(HW));
    return elementwise(p, "avgpool_bwd", NC * HW, "dx! dy", body, out_arg(op, 0), in_arg(op, 0), ARG_END);
}

/* ---- optimizer ---------------------------------------------------------------------- */

/* Parameters, their gradients, AdamW's moments and the optimizer's scalars
 * are f32 in every precision (passes/optimizer.c): these kernels take f32
 * only (-4 otherwise). */
static int all_f32(const rt_op *op)
{
    for (int i = 0; i < op->n_in; i++)
        if (op->in[i].dtype != DT_F32)
            return 0;
    for (int i = 0; i < op->n_out; i++)
        if (op->out[i].dtype != DT_F32)
            return 0;
    return 1;
}

/* g (n), acc? -> acc + Σ g²: blocks write partial sums (double) to scratch,
 * one block adds them up. */
int lower_sum_squares(cuda_plan *p, const rt_op *op)
{
    int64_t n = rt_tensor_numel(&op->in[0]);
    int64_t blocks = (n + NT - 1) / NT;
    blocks = blocks > 1024 ? 1024 : blocks;
    if (!all_f32(op))
        return -4;
    plan_need_scratch(p, blocks * 8);
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_printf(&kb,
              "    const float *g = (const float *)a.p[1];\n"
              "    double s = 0;\n"
              "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < %lldLL; i += (long "
              "long)gridDim.x * blockDim.x)\n"
              "        s += (double)g[i] * g[i];\n"
              "    s = fusion_block_sum(s, red);\n"
              "    if (threadIdx.x == 0) ((double *)a.p[0])[blockIdx.x] = s;\n",
              LL(n));
    if (step_kernel(p, kb_finish(p, &kb, "sum_squares_part"), blocks, 0, 0, arg_scratch(0), in_arg(op, 0), ARG_END))
        return -1;
    kb_printf(&kb, "%s", RED_DECLS);
    kb_printf(
        &kb,
        "    const double *part = (const double *)a.p[1];\n"
        "    double s = 0;\n"
        "    for (long long i = threadIdx.x; i < %lldLL; i += blockDim.x) s += part[i];\n"
        "    s = fusion_block_sum(s, red);\n"
        "    if (threadIdx.x == 0) *(float *)a.p[0] = (float)((a.p[2] ? (double)*(const float *)a.p[2] : 0.0) + s);\n",
        LL(blocks));
    return step_kernel(p, kb_finish(p, &kb, "sum_squares_total"), 1, 0, 0, out_arg(op, 0), arg_scratch(0),
                       op->n_in == 2 ? in_arg(op, 1) : arg_none(), ARG_END);
}

/* sumsq -> min(1, max_norm / (sqrt(sumsq) + 1e-6)), as clip_grad_norm_,
 * max_norm the run's (a.max_norm; 0: no clipping).  loss_scale=1 (fp16):
 * the gradients are the loss scale times the true ones, so the norm is
 * divided by it and so is the result; a norm that is not finite (they
 * overflowed) gives NaN, and every adamw skips the step (runtime/exec.h).
 * The norm goes to the word after the flags word, for the step's line. */
int lower_clip_scale(cuda_plan *p, const rt_op *op)
{
    if (!all_f32(op))
        return -4;
    kbuf kb = { 0 };
    kb_printf(&kb, "    if (blockIdx.x != 0 || threadIdx.x != 0) return;\n"
                   "    double norm = sqrt((double)*(const float *)a.p[1]), unscale = 1.0, max_norm = a.max_norm;\n");
    if (op->ints[ATTR_LOSS_SCALE])
        kb_printf(&kb,
                  "    if (!fusion_finite(norm)) { ((float *)a.p[2])[1] = (float)norm; *(float *)a.p[0] = FUSION_NAN; "
                  "return; }\n"
                  "    unscale = a.loss_scale > 0 ? 1.0 / a.loss_scale : 1.0;\n"
                  "    norm *= unscale;\n");
    kb_printf(&kb, "    ((float *)a.p[2])[1] = (float)norm;\n"
                   "    double coef = max_norm > 0 ? max_norm / (norm + 1e-6) : 1.0;\n"
                   "    *(float *)a.p[0] = (float)((coef < 1.0 ? coef : 1.0) * unscale);\n");
    return step_kernel(p, kb_finish(p, &kb, "clip_scale"), 1, 0, 0, out_arg(op, 0), in_arg(op, 0), arg_flags(),
                       ARG_END);
}

/* -> this step's learning rate: the run's schedule, which the host works
 * out once a step (train_settings.h) and hands over as a.lr. */
int lower_lr_schedule(cuda_plan *p, const rt_op *op)
{
    if (!all_f32(op))
        return -4;
    kbuf kb = { 0 };
    kb_printf(&kb, "    if (blockIdx.x == 0 && threadIdx.x == 0) *(float *)a.p[0] = a.lr;\n");
    return step_kernel(p, kb_finish(p, &kb, "lr_schedule"), 1, 0, 0, out_arg(op, 0), ARG_END);
}

/* The weight decay an update kernel reads: the run's (a.weight_decay) on a
 * matrix or kernel, none on a bias or norm scale (the optimizer pass's rule). */
static const char *decay(const rt_op *op) { return op->in[0].rank >= 2 ? "a.weight_decay" : "0.0"; }

/* p, g, lr, scale? -> p updated in place, torch.optim.SGD without momentum
 * as runtime/cpu/optim.c spells it; a scale that is not finite skips the
 * step as adamw does. */
int lower_sgd(cuda_plan *p, const rt_op *op)
{
    int64_t n = rt_tensor_numel(&op->in[0]);
    if (!all_f32(op))
        return -4;
    char body[1024];
    snprintf(body, sizeof body,
             "        float sc = a.p[3] ? *(const float *)a.p[3] : 1.0f;\n"
             "        if (!fusion_finite(sc)) { if (i == 0) *(int *)a.p[4] |= %d; return; }\n"
             "        float step = (float)-(double)*(const float *)a.p[2], wd = (float)%s;\n"
             "        float gi = grad[i];\n"
             "        if (sc != 1.0f) { gi = gi * sc; grad[i] = gi; }\n"
             "        float d = wd != 0.0f ? gi + wd * param[i] : gi;\n"
             "        param[i] = param[i] + step * d;\n",
             RT_CUDA_FLAG_SKIPPED, decay(op));
    return elementwise(p, "sgd", n, "param! grad! - - -", body, in_arg(op, 0), in_arg(op, 1), in_arg(op, 2),
                       op->n_in == 4 ? in_arg(op, 3) : arg_none(), arg_flags(), ARG_END);
}

/* p, g, m, v, lr, scale? -> p, m, v updated in place (and g scaled first
 * when the clip scale is not 1), torch.optim.AdamW's arithmetic as
 * runtime/cpu/optim.c spells it.  A scale that is not finite (fp16's
 * overflow, clip_scale) leaves everything as it was and sets the flags
 * word's RT_CUDA_FLAG_SKIPPED.  The bias correction counts the steps taken,
 * a.adam_step (step - skipped), as the CPU's does. */
int lower_adamw(cuda_plan *p, const rt_op *op)
{
    int64_t n = rt_tensor_numel(&op->in[0]);
    if (!all_f32(op))
        return -4;
    char body[2560];
    snprintf(
        body, sizeof body,
        "        float sc = a.p[5] ? *(const float *)a.p[5] : 1.0f;\n"
        "        if (!fusion_finite(sc)) { if (i == 0) *(int *)a.p[6] |= %d; return; }\n"
        "        const double beta1 = %.17g, beta2 = %.17g, eps = %.17g, wd = %s;\n"
        "        double lr = (double)*(const float *)a.p[4];\n"
        "        double bc1 = 1.0 - pow(beta1, (double)a.adam_step), bc2 = 1.0 - pow(beta2, (double)a.adam_step);\n"
        "        float decay = (float)(1.0 - lr * wd), w1 = (float)(1.0 - beta1);\n"
        "        float b2 = (float)beta2, w2 = (float)(1.0 - beta2);\n"
        "        float step = (float)(-(lr / bc1)), bc2_sqrt = (float)sqrt(bc2), epsf = (float)eps;\n"
        "        float gi = grad[i];\n"
        "        if (sc != 1.0f) { gi = gi * sc; grad[i] = gi; }\n"
        "        float pi = param[i] * decay;\n"
        "        float mi = w1 < 0.5f ? m[i] + w1 * (gi - m[i]) : gi - (gi - m[i]) * (1.0f - w1);\n"
        "        float vi = v[i] * b2 + w2 * gi * gi;\n"
        "        float denom = sqrtf(vi) / bc2_sqrt + epsf;\n"
        "        param[i] = pi + step * mi / denom;\n"
        "        m[i] = mi;\n"
        "        v[i] = vi;\n",
        RT_CUDA_FLAG_SKIPPED, op->floats[ATTR_BETA1], op->floats[ATTR_BETA2], op->floats[ATTR_EPS], decay(op));
    return elementwise(p, "adamw", n, "param! grad! m! v! - - -", body, in_arg(op, 0), in_arg(op, 1), in_arg(op, 2),
                       in_arg(op, 3), in_arg(op, 4), op->n_in == 6 ? in_arg(op, 5) : arg_none(), arg_flags(), ARG_END);
}
