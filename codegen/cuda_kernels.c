/* cuda_kernels.c: the kernels of the layout and embedding ops, the fill,
 * copy and host steps, and the dense products.
 *
 * Rope is one thread per pair it rotates, split and concat one per element
 * of the whole tensor; the pointwise ops are cuda_pointwise.c's, the
 * kernels with reductions cuda_kernels_nn.c's and
 * cuda_kernels_attention.c's; cuda_lowering.c picks each op's. */
#include "cuda_kernels_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"

/* flatten, its backward, copy: y = x (bits as they are when the types agree). */
int lower_copy(cuda_plan *p, const rt_op *op)
{
    int64_t n = rt_tensor_numel(&op->out[0]);
    if (op->out[0].offset == op->in[0].offset && op->out[0].dtype == op->in[0].dtype)
        return 0;
    return elementwise(p, "copy", n, "y! x",
                       op->out[0].dtype == op->in[0].dtype ? "        y[i] = x[i];\n" : "        ST(y[i], LD(x[i]));\n",
                       out_arg(op, 0), in_arg(op, 0), ARG_END);
}

/* The seed of a backward, or a constant; loss_scale=1 (fp16): the value
 * times this step's loss scale, infinite when an overflow is injected
 * (runtime/exec.h), as the launch's fusion_args carry them. */
int lower_fill(cuda_plan *p, const rt_op *op)
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

int lower_positions(cuda_plan *p, const rt_op *op)
{
    const rt_tensor *o = &op->out[0];
    int64_t T = o->rank > 0 ? o->dim[o->rank - 1] : 1;
    char body[96];
    snprintf(body, sizeof body, "        y[i] = (int)(i %% %lldLL);\n", (long long)T);
    return elementwise(p, "positions", rt_tensor_numel(o), "y!", body, out_arg(op, 0), ARG_END);
}

/* idx (N), table (V,C) -> out (N,C). An id outside [0,V) is reported
 * (its row's first thread) and its row left alone. */
int lower_embedding(cuda_plan *p, const rt_op *op)
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
int lower_embedding_backward(cuda_plan *p, const rt_op *op)
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
int lower_qkv_split(cuda_plan *p, const rt_op *op)
{
    int backward = op->op == OP_QKV_SPLIT_BACKWARD;
    int64_t B, T, C, H;
    if (!backward) {
        B = op->in[0].dim[0], T = op->in[0].dim[1], C = op->in[0].dim[2] / 3, H = op->ints[ATTR_HEADS];
    } else {
        const rt_tensor *dq = &op->in[0];
        B = dq->dim[0], T = dq->dim[2], H = dq->dim[1], C = dq->dim[1] * dq->dim[3];
    }
    int64_t D = C / H;
    char body[900];
    snprintf(
        body, sizeof body,
        "        const long long C = %lldLL;\n"
        "        long long d = i %% %lldLL, t = (i / %lldLL) %% %lldLL, h = (i / %lldLL) %% %lldLL, b = i / %lldLL;\n"
        "        long long r = (b * %lldLL + t) * %lldLL + h * %lldLL + d;\n"
        "%s",
        (long long)C, (long long)D, (long long)D, (long long)T, (long long)(D * T), (long long)H,
        (long long)(D * T * H), (long long)T, (long long)(3 * C), (long long)D,
        backward ? "        ST(qkv[r], LD(q[i]));\n        ST(qkv[r + C], LD(k[i]));\n        ST(qkv[r + 2 * C], "
                   "LD(v[i]));\n"
                 : "        ST(q[i], LD(qkv[r]));\n        ST(k[i], LD(qkv[r + C]));\n        ST(v[i], LD(qkv[r + 2 * "
                   "C]));\n");
    if (!backward)
        return elementwise(p, "qkv_split_fwd", B * T * C, "q! k! v! qkv", body, out_arg(op, 0), out_arg(op, 1),
                           out_arg(op, 2), in_arg(op, 0), ARG_END);
    return elementwise(p, "qkv_split_bwd", B * T * C, "q k v qkv!", body, in_arg(op, 0), in_arg(op, 1), in_arg(op, 2),
                       out_arg(op, 0), ARG_END);
}

/* x (B,H,T,D) <-> y (B,T,H·D): one thread per element of x. */
int lower_merge_heads(cuda_plan *p, const rt_op *op)
{
    int backward = op->op == OP_MERGE_HEADS_BACKWARD;
    const rt_tensor *x = backward ? &op->out[0] : &op->in[0];
    int64_t B = x->dim[0], H = x->dim[1], T = x->dim[2], D = x->dim[3];
    char body[512];
    snprintf(
        body, sizeof body,
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
 * sign·t·θ_c (sign -1: the backward), θ_c = base^(-2c/D) scaled as Llama 3
 * does when scale_factor > 0, as runtime/cpu/rope.c's rope_inv_freq and
 * rope_rotate: the same double operations in the same order, then cosine
 * and sine in double, rounded to float.  A thread per pair, reading both
 * before it writes (y may be x). */
int lower_rope(cuda_plan *p, const rt_op *op)
{
    int sign = op->op == OP_ROPE ? 1 : -1, at_pos = op->op == OP_ROPE && op->n_in == 2;
    const rt_tensor *x = &op->in[0];
    int64_t C = x->dim[x->rank - 1], T = x->dim[x->rank - 2], H = op->ints[ATTR_HEADS], D = C / H, half = D / 2;
    double factor = op->floats[ATTR_SCALE_FACTOR], low = op->floats[ATTR_LOW_FREQ], high = op->floats[ATTR_HIGH_FREQ],
           old_ctx = op->floats[ATTR_OLD_CTX];
    char scaling[640] = "";
    if (factor > 0.0)
        snprintf(scaling, sizeof scaling,
                 "        double wavelen = %.17g / f;\n"
                 "        if (wavelen > %.17g / %.17g) f = f / %.17g;\n"
                 "        else if (!(wavelen < %.17g / %.17g)) {\n"
                 "            double smooth = (%.17g / wavelen - %.17g) / (%.17g - %.17g);\n"
                 "            f = (1.0 - smooth) * f / %.17g + smooth * f;\n"
                 "        }\n",
                 2.0 * M_PI, old_ctx, low, factor, old_ctx, high, old_ctx, low, high, low, factor);
    char body[1536];
    snprintf(
        body, sizeof body,
        "        long long c = i %% %lldLL, rest = i / %lldLL, t = (rest / %lldLL) %% %lldLL, at = rest * %lldLL + c;\n"
        "        double f = pow((double)%.17g, -2.0 * (double)c / %lld.0);\n"
        "%s"
        "        double angle = %d.0 * (double)%s * f;\n"
        "        float co = (float)cos(angle), si = (float)sin(angle);\n"
        "        float lo = LD(x[at]), hi = LD(x[at + %lldLL]);\n"
        "        ST(y[at], lo * co - hi * si);\n"
        "        ST(y[at + %lldLL], hi * co + lo * si);\n",
        (long long)half, (long long)half, (long long)H, (long long)T, (long long)D, op->floats[ATTR_BASE], (long long)D,
        scaling, sign, at_pos ? "pos[rest / H_]" : "t", (long long)half, (long long)half);
    if (at_pos) { /* each token at its own position (the decode pass's rope: x, pos (R,T)) */
        char with_h[1600];
        snprintf(with_h, sizeof with_h, "        const long long H_ = %lldLL;\n%s", (long long)H, body);
        return elementwise(p, "rope_at", rt_tensor_numel(x) / 2, "y! x pos", with_h, out_arg(op, 0), in_arg(op, 0),
                           in_arg(op, 1), ARG_END);
    }
    return elementwise(p, sign > 0 ? "rope_fwd" : "rope_bwd", rt_tensor_numel(x) / 2, "y! x", body, out_arg(op, 0),
                       in_arg(op, 0), ARG_END);
}

/* split, concat and their backwards, as runtime/exec.c's run_split_concat:
 * the whole tensor (outer, Σ sizes, inner) and its n <= 4 parts
 * (outer, sizes[k], inner) along the axis attribute (negative: from the
 * end).  A thread per element of the whole copies it from or to its part;
 * part k starts at off_k = Σ_{m<k} sizes[m] along the axis. */
int lower_split_concat(cuda_plan *p, const rt_op *op)
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
    int at =
        snprintf(body, sizeof body, "        long long o = i / %lldLL, ax = (i / %lldLL) %% %lldLL, e = i %% %lldLL;\n",
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
            return -1; /* cannot be: four parts take a few hundred bytes */
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

/* x (M,K), w (N,K), b (N)? -> y (M,N) = x·wᵀ + b (transpose_w: w (K,N),
 * y = x·w + b): the bias broadcast, then one product accumulating onto it. */
int lower_linear(cuda_plan *p, const rt_op *op)
{
    int tw = op->ints[ATTR_TRANSPOSE_W] != 0;
    int64_t K = op->in[1].dim[tw ? 0 : 1], N = op->in[1].dim[tw ? 1 : 0], M = rt_tensor_numel(&op->in[0]) / K;
    rt_cuda_arg x, w;
    int rc = product_operand(p, op, 0, &x);
    if (rc || (rc = product_operand(p, op, 1, &w)))
        return rc;
    if (step_gemm(p, 0, !tw, M, N, K, 1.0f, x, K, 0, w, tw ? N : K, 0, 0.0f, out_arg(op, 0), N, 0, 1))
        return -1;
    if (op->n_in < 3)
        return 0;
    /* The bias after the product, so that the activation or residual add
     * that follows fuses with it (cuda_elementwise.c). */
    return elementwise_bias_rows_add(p, M, N, out_arg(op, 0), in_arg(op, 2));
}

/* x, w, dy -> dx (M,K) = dy·w ; dw (N,K) = dyᵀ·x ; db (N) = Σ_rows dy.
 * transpose_w: dx = dy·wᵀ ; dw (K,N) = xᵀ·dy. */
int lower_linear_backward(cuda_plan *p, const rt_op *op)
{
    int tw = op->ints[ATTR_TRANSPOSE_W] != 0;
    int64_t K = op->in[1].dim[tw ? 0 : 1], N = op->in[1].dim[tw ? 1 : 0], M = rt_tensor_numel(&op->in[0]) / K;
    rt_cuda_arg dx = grad_arg(op, 0), dw = grad_arg(op, 1), db = grad_arg(op, 2), x, w, dy;
    int rc = product_operand(p, op, 0, &x);
    if (rc || (rc = product_operand(p, op, 1, &w)) || (rc = product_operand(p, op, 2, &dy)))
        return rc;
    if (dx.kind && step_gemm(p, 0, tw, M, K, N, 1.0f, dy, N, 0, w, tw ? N : K, 0, 0.0f, dx, K, 0, 1))
        return -1;
    if (dw.kind && !tw && step_gemm(p, 1, 0, N, K, M, 1.0f, dy, N, 0, x, K, 0, 0.0f, dw, K, 0, 1))
        return -1;
    if (dw.kind && tw && step_gemm(p, 1, 0, K, N, M, 1.0f, x, K, 0, dy, N, 0, 0.0f, dw, N, 0, 1))
        return -1;
    if (db.kind && lower_column_sums(p, db, in_arg(op, 2), M, N))
        return -1;
    return 0;
}

/* a (Bt,M,K), b (Bt,K,N) or (Bt,N,K) or one shared matrix -> c = scale·a·op(b):
 * one strided-batched product (a shared b: one tall product). */
int lower_matmul(cuda_plan *p, const rt_op *op)
{
    int backward = op->op == OP_MATMUL_BACKWARD;
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
    if (db.kind && !tb &&
        step_gemm(p, 1, 0, K, N, rows, scale, a, K, rows * K, dc, N, rows * N, 0.0f, db, N, K * N, count))
        return -1;
    if (db.kind && tb &&
        step_gemm(p, 1, 0, N, K, rows, scale, dc, N, rows * N, a, K, rows * K, 0.0f, db, K, K * N, count))
        return -1;
    return 0;
}

/* ---- communication: on the host ------------------------------------------------------ */

/* send, recv, allreduce: the host's step (the step loop runs them). */
int lower_host(cuda_plan *p, const rt_op *op) { return step_host(p); }
