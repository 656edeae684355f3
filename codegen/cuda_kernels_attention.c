/* cuda_kernels_attention.c: CUDA C for causal self-attention, forward and
 * backward (see cuda_kernels.h), in both of its forms:
 *
 *   packed (GPT-2):  qkv (B,T,3C) -> out (B,T,C), H heads of D = C/H;
 *   apart (Llama):   q (B,T,H·D), k, v (B,T,KV·D) -> out (B,T,H·D), query
 *                    head h reading kv head h/(H/KV) (grouped-query).
 *
 * One set of kernels serves both: they read q, k, v through strides, rows
 * q_ld and kv_ld elements apart, so the packed form is q = qkv,
 * k = qkv + C, v = qkv + 2C, q_ld = kv_ld = 3C, KV = H (att_geom_of).
 *
 * Each kernel follows runtime/cpu/attention.c (attention_forward_heads,
 * attention_backward_heads) in its float expressions, the softmax's sum in
 * double; what differs is the order of the products' sums (theirs are
 * sgemm's), which the emulation harness bounds (tests/unit/cuda_cases.c).
 * A block per query row, its causal scores in dynamic shared memory: two
 * rows of T floats at most, hence ATTENTION_MAX_T; its sums over rows, for
 * a head of D <= 256 columns, cut among the whole block
 * (kb_split_column_sums).  On an H200 these kernels were two thirds of
 * GPT-2 small's step (docs/results.md): tiling keys and values through
 * shared memory, as FlashAttention does, is what they lack.
 */
#include "cuda_kernels_internal.h"

#include <math.h>
#include <stdio.h>

#include "../ir/ops.h"

#define LL(x) ((long long)(x))

/* The largest sequence the attention kernels take: two rows of T floats in
 * shared memory, within the 48 KiB every architecture gives without opt-in. */
#define ATTENTION_MAX_T 6144

/* An attention op's sizes and where q, k, v are: query head h at columns
 * h·D.. of rows q_ld elements apart, kv head g at g·D.. of rows kv_ld apart;
 * dq, dk, dv (the backward's, arg_none when not wanted) in the same layout. */
typedef struct {
    int64_t B, T, H, KV, D, q_ld, kv_ld;
    rt_cuda_arg q, k, v, dq, dk, dv;
} att_geom;

static att_geom att_geom_of(const rt_op *op)
{
    const rt_tensor *x = &op->in[0];
    int backward = op->op == OP_ATTENTION_BACKWARD;
    att_geom g = { .B = x->dim[0], .T = x->dim[1], .H = op->ints[ATTR_HEADS] };
    g.q = in_arg(op, 0);
    if (op->n_in - backward == 1) { /* qkv (B,T,3C) and dqkv */
        int64_t C = x->dim[2] / 3;
        g.KV = g.H, g.D = C / g.H, g.q_ld = g.kv_ld = 3 * C;
        g.k = arg_elems(g.q, C), g.v = arg_elems(g.q, 2 * C);
        if (backward)
            g.dq = out_arg(op, 0), g.dk = arg_elems(g.dq, C), g.dv = arg_elems(g.dq, 2 * C);
    } else { /* q, k, v; dq, dk, dv per the grads bits */
        g.KV = op->ints[ATTR_KV_HEADS] ? op->ints[ATTR_KV_HEADS] : g.H;
        g.D = x->dim[2] / g.H, g.q_ld = g.H * g.D, g.kv_ld = g.KV * g.D;
        g.k = in_arg(op, 1), g.v = in_arg(op, 2);
        if (backward)
            g.dq = grad_arg(op, 0), g.dk = grad_arg(op, 1), g.dv = grad_arg(op, 2);
    }
    return g;
}

/* The sizes as constants, the block's (b, head, row), and Q(t), K(t), V(t):
 * row t of the head's q, k, v.  By query: a block per (b, h, i), g its kv
 * head.  By key: a block per (b, g, j); the kernel loops over the group's
 * query heads h itself.  q, k, v are arguments qi, qi + 1, qi + 2. */
static void kb_attention_head(kbuf *kb, const att_geom *g, int by_key, int qi)
{
    char scale[32];
    kb_printf(kb,
              "    const long long T = %lldLL, D = %lldLL, H = %lldLL, HD = %lldLL, QLD = %lldLL, KVLD = %lldLL;\n"
              "    const long long G = %lldLL;   /* query heads a kv head serves */\n"
              "    const float scale = %s;\n",
              LL(g->T), LL(g->D), LL(g->H), LL(g->H * g->D), LL(g->q_ld), LL(g->kv_ld), LL(g->H / g->KV),
              flit(scale, 1.0 / sqrt((double)g->D)));
    if (by_key)
        kb_printf(kb,
                  "    const long long j = blockIdx.x %% T, bg = blockIdx.x / T, g = bg %% %lldLL, b = bg / %lldLL;\n",
                  LL(g->KV), LL(g->KV));
    else
        kb_printf(
            kb, "    const long long i = blockIdx.x %% T, bh = blockIdx.x / T, h = bh %% H, b = bh / H, g = h / G;\n");
    kb_ptr(kb, "q", qi, g->q, 0, NULL);
    kb_ptr(kb, "k", qi + 1, g->k, 0, NULL);
    kb_ptr(kb, "v", qi + 2, g->v, 0, NULL);
    kb_printf(kb, "#define Q(t) (q + (b * T + (t)) * QLD + h * D)\n"
                  "#define K(t) (k + (b * T + (t)) * KVLD + g * D)\n"
                  "#define V(t) (v + (b * T + (t)) * KVLD + g * D)\n");
}

/* The scaled score of query i against key j, as the CPU's sgemm forms it;
 * the key launch's copy sits a loop deeper. */
#define ATT_SCORE(indent)                                                                                            \
    indent "float sc = 0.0f;\n" indent "for (long long d = 0; d < D; d++) sc += LD(Q(i)[d]) * LD(K(j)[d]);\n" indent \
           "sc = scale * sc;\n"
static const char att_score[] = ATT_SCORE("        "), att_score_deeper[] = ATT_SCORE("            ");

/* The causal softmax of query row i into P[0..i] (shared): its max mx and
 * 1 / Σ exp in inv, P[j] = exp(score - mx); the forward and the backward's
 * first launch form it alike. */
static void kb_attention_softmax_row(kbuf *kb)
{
    kb_printf(kb,
              "    float mx = -FUSION_INF;\n"
              "    for (long long j = threadIdx.x; j <= i; j += blockDim.x) {\n"
              "%s"
              "        P[j] = sc;\n"
              "        mx = sc > mx ? sc : mx;\n"
              "    }\n"
              "    mx = fusion_block_max(mx, redf);\n"
              "    double s = 0;\n"
              "    for (long long j = threadIdx.x; j <= i; j += blockDim.x) { float e = expf(P[j] - mx); P[j] = e; s "
              "+= e; }\n"
              "    float inv = (float)(1.0 / fusion_block_sum(s, red));\n",
              att_score);
}

/* The sums over a range of rows of D columns, as out[d] = Σ_j term(j, d):
 * a thread a column leaves most of a block idle when D is small (GPT-2's
 * 64 of 256), so when D <= NT the range [lo, hi) is cut in NT / D parts, a
 * group of D threads a part (thread t: column t % D, part t / D), and the
 * parts' f32 sums are added in order through redf (its 256 floats are free
 * after the block reductions, which end synchronised).  `store` runs for
 * each column d with its sum in `sum`; `loop` is the row variable's name.
 * Returns 0, or -1 when D > NT (the caller keeps a thread a column). */
static int kb_split_column_sums(kbuf *kb, int64_t D, const char *loop, const char *lo, const char *hi, const char *term,
                                const char *store)
{
    if (D > NT)
        return -1;
    kb_printf(
        kb,
        "    {   /* %lld parts of the rows, D threads a part */\n"
        "        const long long d = threadIdx.x %% D, part = threadIdx.x / D, parts = %lldLL;\n"
        "        const long long first = %s, rows = (%s) - first;\n"
        "        float acc = 0.0f;\n"
        "        if (part < parts)\n"
        "            for (long long %s = first + part * rows / parts; %s < first + (part + 1) * rows / parts; %s++)\n"
        "                acc += %s;\n"
        "        redf[threadIdx.x] = acc;\n"
        "        __syncthreads();\n"
        "        if (threadIdx.x < D) {\n"
        "            float sum = 0.0f;\n"
        "            for (long long k = 0; k < parts; k++) sum += redf[k * D + d];\n"
        "            %s\n"
        "        }\n"
        "        __syncthreads();\n"
        "    }\n",
        LL(NT / D), LL(NT / D), lo, hi, loop, loop, loop, term, store);
    return 0;
}

/* q, k, v -> out (B,T,H·D): a block per query row i of head h of batch b;
 * its causal scores in shared memory, softmax, then P·v. */
int lower_attention(cuda_plan *p, const rt_op *op)
{
    att_geom g = att_geom_of(op);
    if (g.T > ATTENTION_MAX_T)
        return -2;
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_attention_head(&kb, &g, 0, 1);
    kb_printf(&kb, "    FUSION_DYN_SHARED(float, P);\n");
    kb_attention_softmax_row(&kb);
    kb_ptr(&kb, "out", 0, out_arg(op, 0), 1, " + (b * T + i) * HD + h * D");
    if (kb_split_column_sums(&kb, g.D, "j", "0", "i + 1", "(P[j] * inv) * LD(V(j)[d])", "ST(out[d], sum);"))
        kb_printf(&kb, "    for (long long d = threadIdx.x; d < D; d += blockDim.x) {\n"
                       "        float acc = 0.0f;\n"
                       "        for (long long j = 0; j <= i; j++) acc += (P[j] * inv) * LD(V(j)[d]);\n"
                       "        ST(out[d], acc);\n"
                       "    }\n");
    kb_printf(&kb, "#undef Q\n#undef K\n#undef V\n");
    return step_kernel(p, kb_finish(p, &kb, "attention_fwd"), g.B * g.H * g.T, (uint32_t)(g.T * 4), 0, out_arg(op, 0),
                       g.q, g.k, g.v, ARG_END);
}

/* The backward's launch 2 for D <= NT: as below, but each sum over the
 * query rows i >= j is cut in NT / D parts, a group of D threads a part
 * (thread t: column t % D, part t / D), summed over the group's query
 * heads in registers, and the parts added in order through redf at the
 * end (kb_split_column_sums' scheme; a thread a column would leave most of
 * the block idle). */
static int attention_backward_kv_split(cuda_plan *p, const rt_op *op, const att_geom *g, rt_cuda_arg dout)
{
    kbuf kb = { 0 };
    kb_printf(&kb, "    FUSION_SHARED(float, redf, 256);\n");
    kb_attention_head(&kb, g, 1, 2);
    kb_ptr(&kb, "dk", 0, g->dk, 1, NULL);
    kb_ptr(&kb, "dv", 1, g->dv, 1, NULL);
    kb_ptr(&kb, "dout", 5, dout, 0, NULL);
    kb_printf(
        &kb,
        "    const float *stats = (const float *)a.p[6];\n"
        "#define DO(t) (dout + (b * T + (t)) * HD + h * D)\n"
        "    FUSION_DYN_SHARED(float, P);\n"
        "    float *dS = P + T;\n"
        "    const long long d = threadIdx.x %% D, part = threadIdx.x / D, parts = %lldLL, rows = T - j;\n"
        "    const long long lo = j + part * rows / parts, hi = j + (part + 1) * rows / parts;\n"
        "    float ak = 0.0f, av = 0.0f;\n"
        "    for (long long h = g * G; h < (g + 1) * G; h++) {\n"
        "        const float *st = stats + (b * H + h) * T * 3;\n"
        "        for (long long i = j + threadIdx.x; i < T; i += blockDim.x) {\n"
        "%s"
        "            float pij = expf(sc - st[i * 3]) * st[i * 3 + 1], dp = 0.0f;\n"
        "            for (long long e = 0; e < D; e++) dp += LD(DO(i)[e]) * LD(V(j)[e]);\n"
        "            P[i] = pij;\n"
        "            dS[i] = pij * (dp - st[i * 3 + 2]);\n"
        "        }\n"
        "        __syncthreads();\n"
        "        if (part < parts)\n"
        "            for (long long i = lo; i < hi; i++) { ak += dS[i] * LD(Q(i)[d]); av += P[i] * LD(DO(i)[d]); }\n"
        "        __syncthreads();   /* P and dS are the next head's */\n"
        "    }\n"
        "    const long long o = (b * T + j) * KVLD + g * D;\n"
        "    float sum = 0.0f;\n"
        "    redf[threadIdx.x] = ak;\n"
        "    __syncthreads();\n"
        "    for (long long k = 0; k < parts && threadIdx.x < D; k++) sum += redf[k * D + d];\n"
        "    if (dk && threadIdx.x < D) ST(dk[o + d], scale * sum);\n"
        "    __syncthreads();\n"
        "    redf[threadIdx.x] = av;\n"
        "    __syncthreads();\n"
        "    sum = 0.0f;\n"
        "    for (long long k = 0; k < parts && threadIdx.x < D; k++) sum += redf[k * D + d];\n"
        "    if (dv && threadIdx.x < D) ST(dv[o + d], sum);\n"
        "#undef Q\n#undef K\n#undef V\n#undef DO\n",
        LL(NT / g->D), att_score_deeper);
    return step_kernel(p, kb_finish(p, &kb, "attention_bwd_kv"), g->B * g->KV * g->T, (uint32_t)(2 * g->T * 4), 0,
                       g->dk, g->dv, g->q, g->k, g->v, dout, arg_scratch(0), ARG_END);
}

/* q, k, v, dout -> dq, dk, dv.
 * Launch 1, a block per query row i of head h: P and
 * dS = P ⊙ (dP - Σ P⊙dP) with dP = dO·vᵀ, then dq = scale·dS·k; the row's
 * max, 1/sum and Σ P⊙dP go to scratch (B·H·T rows of 3 floats), whether
 * dq is wanted or not.
 * Launch 2, a block per key row j of kv head g: for each query head h of
 * g's group in turn, P and dS of the queries i >= j recomputed from those
 * statistics, then dk += scale·dSᵀ·q_h and dv += Pᵀ·dO_h, summed in f32
 * registers over the group and stored once.  Every element of dq, dk, dv
 * is written once, in a fixed order: no atomics. */
int lower_attention_backward(cuda_plan *p, const rt_op *op)
{
    att_geom g = att_geom_of(op);
    if (g.T > ATTENTION_MAX_T)
        return -2;
    if (!g.dq.kind && !g.dk.kind && !g.dv.kind)
        return 0;
    rt_cuda_arg dout = in_arg(op, op->n_in - 1);
    plan_need_scratch(p, 3 * g.B * g.H * g.T * 4);
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_attention_head(&kb, &g, 0, 1);
    kb_ptr(&kb, "dO", 4, dout, 0, " + (b * T + i) * HD + h * D");
    kb_printf(&kb, "    float *stats = (float *)a.p[5] + blockIdx.x * 3;\n"
                   "    FUSION_DYN_SHARED(float, P);\n"
                   "    float *dP = P + T;\n");
    kb_attention_softmax_row(&kb);
    kb_printf(&kb, "    double dot = 0;\n"
                   "    for (long long j = threadIdx.x; j <= i; j += blockDim.x) {\n"
                   "        float pj = P[j] * inv, dp = 0.0f;\n"
                   "        for (long long d = 0; d < D; d++) dp += LD(dO[d]) * LD(V(j)[d]);\n"
                   "        P[j] = pj;\n"
                   "        dP[j] = dp;\n"
                   "        dot += pj * dp;\n"
                   "    }\n"
                   "    float dd = (float)fusion_block_sum(dot, red);\n"
                   "    for (long long j = threadIdx.x; j <= i; j += blockDim.x) dP[j] = P[j] * (dP[j] - dd);\n"
                   "    if (threadIdx.x == 0) { stats[0] = mx; stats[1] = inv; stats[2] = dd; }\n"
                   "    __syncthreads();\n"
                   "    if (!a.p[0]) return;\n");
    kb_ptr(&kb, "dq", 0, g.dq, 1, " + (b * T + i) * QLD + h * D");
    if (kb_split_column_sums(&kb, g.D, "j", "0", "i + 1", "dP[j] * LD(K(j)[d])", "ST(dq[d], scale * sum);"))
        kb_printf(&kb, "    for (long long d = threadIdx.x; d < D; d += blockDim.x) {\n"
                       "        float acc = 0.0f;\n"
                       "        for (long long j = 0; j <= i; j++) acc += dP[j] * LD(K(j)[d]);\n"
                       "        ST(dq[d], scale * acc);\n"
                       "    }\n");
    kb_printf(&kb, "#undef Q\n#undef K\n#undef V\n");
    if (step_kernel(p, kb_finish(p, &kb, "attention_bwd_q"), g.B * g.H * g.T, (uint32_t)(2 * g.T * 4), 0, g.dq, g.q,
                    g.k, g.v, dout, arg_scratch(0), ARG_END))
        return -1;
    if (!g.dk.kind && !g.dv.kind)
        return 0;
    if (g.D <= NT)
        return attention_backward_kv_split(p, op, &g, dout);
    /* A thread's share of a row of D: columns threadIdx.x + n·NT, n < ND. */
    int64_t nd = (g.D + NT - 1) / NT;
    kb_attention_head(&kb, &g, 1, 2);
    kb_ptr(&kb, "dk", 0, g.dk, 1, NULL);
    kb_ptr(&kb, "dv", 1, g.dv, 1, NULL);
    kb_ptr(&kb, "dout", 5, dout, 0, NULL);
    kb_printf(&kb,
              "    const float *stats = (const float *)a.p[6];\n"
              "#define DO(t) (dout + (b * T + (t)) * HD + h * D)\n"
              "    FUSION_DYN_SHARED(float, P);\n"
              "    float *dS = P + T;\n"
              "    float ak[%lld], av[%lld];\n"
              "    for (int n = 0; n < %lld; n++) ak[n] = av[n] = 0.0f;\n"
              "    for (long long h = g * G; h < (g + 1) * G; h++) {\n"
              "        const float *st = stats + (b * H + h) * T * 3;\n"
              "        for (long long i = j + threadIdx.x; i < T; i += blockDim.x) {\n"
              "%s"
              "            float pij = expf(sc - st[i * 3]) * st[i * 3 + 1], dp = 0.0f;\n"
              "            for (long long d = 0; d < D; d++) dp += LD(DO(i)[d]) * LD(V(j)[d]);\n"
              "            P[i] = pij;\n"
              "            dS[i] = pij * (dp - st[i * 3 + 2]);\n"
              "        }\n"
              "        __syncthreads();\n"
              "        for (int n = 0; n < %lld; n++) {\n"
              "            long long d = threadIdx.x + (long long)n * %d;\n"
              "            if (d >= D) break;\n"
              "            for (long long i = j; i < T; i++) { ak[n] += dS[i] * LD(Q(i)[d]); av[n] += P[i] * "
              "LD(DO(i)[d]); }\n"
              "        }\n"
              "        __syncthreads();   /* P and dS are the next head's */\n"
              "    }\n"
              "    const long long o = (b * T + j) * KVLD + g * D;\n"
              "    for (int n = 0; n < %lld; n++) {\n"
              "        long long d = threadIdx.x + (long long)n * %d;\n"
              "        if (d >= D) break;\n"
              "        if (dk) ST(dk[o + d], scale * ak[n]);\n"
              "        if (dv) ST(dv[o + d], av[n]);\n"
              "    }\n"
              "#undef Q\n#undef K\n#undef V\n#undef DO\n",
              LL(nd), LL(nd), LL(nd), att_score_deeper, LL(nd), NT, LL(nd), NT);
    return step_kernel(p, kb_finish(p, &kb, "attention_bwd_kv"), g.B * g.KV * g.T, (uint32_t)(2 * g.T * 4), 0, g.dk,
                       g.dv, g.q, g.k, g.v, dout, arg_scratch(0), ARG_END);
}

/* ---- attention against a key/value cache (inference) ---------------------------- */

/* q (B,T,H·D), k, v (B,T,KV·D), k_cache, v_cache (B,CTX,KV·D) f32, pos
 * (B,T) -> out (B,T,H·D), as runtime/cpu/attention_cached.c.  Launch 1,
 * a thread per element of the new k and v: into the caches' rows at their
 * positions (a position outside [0, CTX) writes nothing: the runtime gave
 * it, and the CPU kernel would have refused it).  Launch 2, a block per
 * query row t of head h of sequence b: its scores against the cache's rows
 * 0..pos in shared memory, the softmax, then P·v; the CPU kernel's float
 * expressions, the sum of the exponentials in double. */
int lower_attention_cached(cuda_plan *p, const rt_op *op)
{
    const rt_tensor *q = &op->in[0];
    int64_t B = q->dim[0], T = q->dim[1], H = op->ints[ATTR_HEADS], CTX = op->in[3].dim[1];
    int64_t KV = op->ints[ATTR_KV_HEADS] ? op->ints[ATTR_KV_HEADS] : H, D = q->dim[2] / H, KC = KV * D;
    if (CTX > ATTENTION_MAX_T)
        return -2;
    char body[768], scale[32];
    snprintf(body, sizeof body,
             "        long long c = i %% %lldLL, bt = i / %lldLL, b = bt / %lldLL, at = pos[bt];\n"
             "        if (at >= 0 && at < %lldLL) {\n"
             "            kc[(b * %lldLL + at) * %lldLL + c] = LD(k[i]);\n"
             "            vc[(b * %lldLL + at) * %lldLL + c] = LD(v[i]);\n"
             "        }\n",
             LL(KC), LL(KC), LL(T), LL(CTX), LL(CTX), LL(KC), LL(CTX), LL(KC));
    if (elementwise(p, "cache_write", B * T * KC, "kc! vc! k v pos", body, in_arg(op, 3), in_arg(op, 4), in_arg(op, 1),
                    in_arg(op, 2), in_arg(op, 5), ARG_END))
        return -1;
    kbuf kb = { 0 };
    kb_printf(&kb, "%s", RED_DECLS);
    kb_printf(&kb,
              "    const long long T = %lldLL, D = %lldLL, H = %lldLL, HD = %lldLL, KC = %lldLL, CTX = %lldLL;\n"
              "    const long long G = %lldLL;   /* query heads a kv head serves */\n"
              "    const float scale = %s;\n"
              "    const long long i = blockIdx.x %% T, bh = blockIdx.x / T, h = bh %% H, b = bh / H, g = h / G;\n",
              LL(T), LL(D), LL(H), LL(H * D), LL(KC), LL(CTX), LL(H / KV), flit(scale, 1.0 / sqrt((double)D)));
    kb_ptr(&kb, "q", 1, in_arg(op, 0), 0, " + (b * T + i) * HD + h * D");
    kb_ptr(&kb, "kc", 2, in_arg(op, 3), 0, " + b * CTX * KC + g * D");
    kb_ptr(&kb, "vc", 3, in_arg(op, 4), 0, " + b * CTX * KC + g * D");
    kb_ptr(&kb, "pos", 4, in_arg(op, 5), 0, NULL);
    kb_ptr(&kb, "out", 0, out_arg(op, 0), 1, " + (b * T + i) * HD + h * D");
    kb_printf(
        &kb,
        "    long long n = (long long)pos[b * T + i] + 1;\n"
        "    n = n < 1 ? 1 : n > CTX ? CTX : n;\n"
        "    FUSION_DYN_SHARED(float, P);\n"
        "    float mx = -FUSION_INF;\n"
        "    for (long long j = threadIdx.x; j < n; j += blockDim.x) {\n"
        "        float sc = 0.0f;\n"
        "        for (long long d = 0; d < D; d++) sc += LD(q[d]) * kc[j * KC + d];\n"
        "        sc = sc * scale;\n"
        "        P[j] = sc;\n"
        "        mx = sc > mx ? sc : mx;\n"
        "    }\n"
        "    mx = fusion_block_max(mx, redf);\n"
        "    double s = 0;\n"
        "    for (long long j = threadIdx.x; j < n; j += blockDim.x) { float e = expf(P[j] - mx); P[j] = e; s += e; "
        "}\n"
        "    float inv = (float)(1.0 / fusion_block_sum(s, red));\n");
    if (kb_split_column_sums(&kb, D, "j", "0", "n", "(P[j] * inv) * vc[j * KC + d]", "ST(out[d], sum);"))
        kb_printf(&kb, "    for (long long d = threadIdx.x; d < D; d += blockDim.x) {\n"
                       "        float acc = 0.0f;\n"
                       "        for (long long j = 0; j < n; j++) acc += (P[j] * inv) * vc[j * KC + d];\n"
                       "        ST(out[d], acc);\n"
                       "    }\n");
    return step_kernel(p, kb_finish(p, &kb, "attention_cached"), B * H * T, (uint32_t)(CTX * 4), 0, out_arg(op, 0),
                       in_arg(op, 0), in_arg(op, 3), in_arg(op, 4), in_arg(op, 5), ARG_END);
}
