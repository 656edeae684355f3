/* attention.c: causal multi-head and grouped-query self-attention (on a
 * packed qkv, or q, k, v apart), the head split/merge reshapes, and the row
 * softmax.
 *
 * attention_forward/backward work one (batch, head) at a time. The T query
 * rows are cut into blocks of ATT_QBLOCK; block i, queries [t0, t0+nq), only
 * ever sees keys [0, t0+nq), so its scores are an (nq, t0+nq) matrix and the
 * masked upper triangle is mostly never computed. The blocks' score
 * matrices lie one after another in the workspace, so that a head is three
 * phases: the products of every block (cblas_sgemm, reading q, k, v in place
 * inside qkv with leading dimension 3C, or in q, k, v), one OpenMP loop over all T rows
 * (softmax), the products again. Few phases matter: each switch between
 * OpenBLAS's threads and OpenMP's costs their idle-wait (see threads.c).
 * The probabilities are recomputed in the backward, never stored. This is
 * the plain algorithm, not a fused online-softmax one.
 */
#include <math.h>
#include <string.h>

#include "cpu/kernels_internal.h"

#define ATT_QBLOCK 128

/* Query block i of a head: queries [t0, t0+nq) against keys [0, nk), its
 * (nq, nk) scores at offset off in the workspace. Every block before the
 * last is full, so off is a closed form. */
typedef struct {
    int64_t t0, nq, nk, off;
} att_block;

static att_block att_block_at(int64_t i, int64_t T)
{
    att_block b;
    b.t0 = i * ATT_QBLOCK;
    b.nq = T - b.t0 < ATT_QBLOCK ? T - b.t0 : ATT_QBLOCK;
    b.nk = b.t0 + b.nq;
    b.off = ATT_QBLOCK * ATT_QBLOCK * (i * (i + 1) / 2);
    return b;
}

static int64_t att_nblocks(int64_t T) { return (T + ATT_QBLOCK - 1) / ATT_QBLOCK; }

/* Floats of one head's packed score blocks. */
static int64_t att_scores_floats(int64_t T)
{
    if (T <= 0)
        return 0;
    att_block last = att_block_at(att_nblocks(T) - 1, T);
    return last.off + last.nq * last.nk;
}

int64_t attention_workspace_floats(int64_t T)
{
    return 2 * att_scores_floats(T); /* the backward's P and dP; the forward uses P */
}

/* Row t of a head's packed scores (its first t+1 entries are keys 0..t). */
static float *att_row(float *S, int64_t t, int64_t T)
{
    att_block b = att_block_at(t / ATT_QBLOCK, T);
    return S + b.off + (t - b.t0) * b.nk;
}

/* S holds scale·q·kᵀ for every block of a head: make each row t a causal
 * softmax over its keys 0..t and 0 beyond (up to the block's nk). */
static void att_softmax_rows(float *S, int64_t T)
{
#pragma omp parallel for schedule(static) if (T * T >= 2 * KERNEL_PAR_MIN)
    for (int64_t t = 0; t < T; t++) {
        float *row = att_row(S, t, T);
        int64_t nk = att_block_at(t / ATT_QBLOCK, T).nk;
        kernel_softmax_row(row, row, t + 1);
        for (int64_t j = t + 1; j < nk; j++)
            row[j] = 0.0f;
    }
}

/* P (packed) = causal softmax(scale · q·kᵀ) for one head, q's rows q_ld
 * floats apart and k's k_ld. */
static void att_probabilities(float *P, const float *q, const float *k, int64_t T, int64_t q_ld, int64_t k_ld,
                              int64_t D, float scale)
{
    for (int64_t i = 0; i < att_nblocks(T); i++) {
        att_block b = att_block_at(i, T);
        kernel_sgemm(0, 1, b.nq, b.nk, D, scale, q + b.t0 * q_ld, q_ld, k, k_ld, 0.0f, P + b.off, b.nk);
    }
    att_softmax_rows(P, T);
}

// The general form. q is (B,T,·) with row stride q_ld, head h in columns
// h·D..; k and v are (B,T,·) with row stride kv_ld, kv head g in columns
// g·D..; out is (B,T,H·D). Query head h reads kv head h / (H/KV)
// (grouped-query attention; KV = H is multi-head):
//   out[b][:, h·D..] = softmax(q_h·k_gᵀ/sqrt(D), causal) · v_g
void attention_forward_heads(float *out, const float *q, const float *k, const float *v, float *ws, int64_t B,
                             int64_t T, int64_t H, int64_t KV, int64_t D, int64_t q_ld, int64_t kv_ld)
{
    int64_t C = H * D, group = H / KV;
    float scale = (float)(1.0 / sqrt((double)D));
    float *P = ws;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            const float *qh = q + b * T * q_ld + h * D;
            const float *kh = k + b * T * kv_ld + (h / group) * D, *vh = v + b * T * kv_ld + (h / group) * D;
            float *o = out + b * T * C + h * D;
            att_probabilities(P, qh, kh, T, q_ld, kv_ld, D, scale);
            for (int64_t i = 0; i < att_nblocks(T); i++) {
                att_block blk = att_block_at(i, T);
                kernel_sgemm(0, 0, blk.nq, D, blk.nk, 1.0f, P + blk.off, blk.nk, vh, kv_ld, 0.0f, o + blk.t0 * C, C);
            }
        }
    }
}

// qkv is (B,T,3C), out is (B,T,C), D = C/H: q, k, v are the three thirds
void attention_forward(float *out, const float *qkv, float *ws, int64_t B, int64_t T, int64_t C, int64_t H)
{
    attention_forward_heads(out, qkv, qkv + C, qkv + 2 * C, ws, B, T, H, H, C / H, 3 * C, 3 * C);
}

// dout is (B,T,H·D); q, k, v and dq, dk, dv as in the forward (the same
// strides; any of dq, dk, dv NULL: not wanted). Per (b, h) and query block,
// with P the recomputed probabilities (nq, nk) and dO the block of dout:
//   dP  = dO·vᵀ            dv += Pᵀ·dO
//   dS  = P ⊙ (dP - Σ_j P⊙dP)  (row-wise)
//   dq  = scale·dS·k       dk += scale·dSᵀ·q_block
// dk and dv collect from every block, and from every query head of their
// group, so they start at 0.
void attention_backward_heads(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                              const float *v, float *ws, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                              int64_t q_ld, int64_t kv_ld)
{
    int64_t C = H * D, group = H / KV, nblocks = att_nblocks(T);
    float scale = (float)(1.0 / sqrt((double)D));
    float *P = ws, *dP = ws + att_scores_floats(T);
#pragma omp parallel for schedule(static) if (B * T * KV * D >= KERNEL_PAR_MIN)
    for (int64_t bt = 0; bt < B * T; bt++) {
        if (dk)
            memset(dk + bt * kv_ld, 0, (size_t)(KV * D) * sizeof *dk);
        if (dv)
            memset(dv + bt * kv_ld, 0, (size_t)(KV * D) * sizeof *dv);
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t h = 0; h < H; h++) {
            int64_t qo = b * T * q_ld + h * D, kvo = b * T * kv_ld + (h / group) * D;
            const float *qh = q + qo, *kh = k + kvo, *vh = v + kvo;
            const float *dO = dout + b * T * C + h * D;
            att_probabilities(P, qh, kh, T, q_ld, kv_ld, D, scale);
            for (int64_t i = 0; i < nblocks; i++) {
                att_block blk = att_block_at(i, T);
                kernel_sgemm(0, 1, blk.nq, blk.nk, D, 1.0f, dO + blk.t0 * C, C, vh, kv_ld, 0.0f, dP + blk.off, blk.nk);
                if (dv)
                    kernel_sgemm(1, 0, blk.nk, D, blk.nq, 1.0f, P + blk.off, blk.nk, dO + blk.t0 * C, C, 1.0f, dv + kvo,
                                 kv_ld);
            }
#pragma omp parallel for schedule(static) if (T * T >= 2 * KERNEL_PAR_MIN)
            for (int64_t t = 0; t < T; t++) {
                const float *pr = att_row(P, t, T);
                float *dr = att_row(dP, t, T);
                int64_t nk = t + 1; /* beyond it P is 0, and so is dS */
                double dot = 0;
#pragma omp simd reduction(+ : dot)
                for (int64_t j = 0; j < nk; j++)
                    dot += pr[j] * dr[j];
                float d = (float)dot;
#pragma omp simd
                for (int64_t j = 0; j < nk; j++)
                    dr[j] = pr[j] * (dr[j] - d);
                int64_t row_end = att_block_at(t / ATT_QBLOCK, T).nk;
                for (int64_t j = nk; j < row_end; j++)
                    dr[j] = 0.0f;
            }
            for (int64_t i = 0; i < nblocks; i++) {
                att_block blk = att_block_at(i, T);
                if (dq)
                    kernel_sgemm(0, 0, blk.nq, D, blk.nk, scale, dP + blk.off, blk.nk, kh, kv_ld, 0.0f,
                                 dq + qo + blk.t0 * q_ld, q_ld);
                if (dk)
                    kernel_sgemm(1, 0, blk.nk, D, blk.nq, scale, dP + blk.off, blk.nk, qh + blk.t0 * q_ld, q_ld, 1.0f,
                                 dk + kvo, kv_ld);
            }
        }
    }
}

// dout is (B,T,C), qkv and dqkv are (B,T,3C): the three thirds
void attention_backward(float *dqkv, const float *dout, const float *qkv, float *ws, int64_t B, int64_t T, int64_t C,
                        int64_t H)
{
    attention_backward_heads(dqkv, dqkv + C, dqkv + 2 * C, dout, qkv, qkv + C, qkv + 2 * C, ws, B, T, H, H, C / H,
                             3 * C, 3 * C);
}

/* ---- head split and merge --------------------------------------------- */

// qkv is (B,T,3C), q, k, v are (B,H,T,D), C = H·D:
// q[b][h][t][:] = qkv[b][t][h·D..], k from column C + h·D, v from 2C + h·D
void qkv_split_forward(float *q, float *k, float *v, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t H)
{
    int64_t D = C / H;
    size_t bytes = (size_t)D * sizeof *qkv;
#pragma omp parallel for schedule(static) if (B * T * C >= KERNEL_PAR_MIN)
    for (int64_t bt = 0; bt < B * T; bt++) {
        int64_t b = bt / T, t = bt % T;
        const float *row = qkv + bt * 3 * C;
        for (int64_t h = 0; h < H; h++) {
            int64_t o = ((b * H + h) * T + t) * D;
            memcpy(q + o, row + h * D, bytes);
            memcpy(k + o, row + C + h * D, bytes);
            memcpy(v + o, row + 2 * C + h * D, bytes);
        }
    }
}

// dq, dk, dv are (B,H,T,D), dqkv is (B,T,3C): the same copy, reversed
void qkv_split_backward(float *dqkv, const float *dq, const float *dk, const float *dv, int64_t B, int64_t T, int64_t C,
                        int64_t H)
{
    int64_t D = C / H;
    size_t bytes = (size_t)D * sizeof *dqkv;
#pragma omp parallel for schedule(static) if (B * T * C >= KERNEL_PAR_MIN)
    for (int64_t bt = 0; bt < B * T; bt++) {
        int64_t b = bt / T, t = bt % T;
        float *row = dqkv + bt * 3 * C;
        for (int64_t h = 0; h < H; h++) {
            int64_t o = ((b * H + h) * T + t) * D;
            memcpy(row + h * D, dq + o, bytes);
            memcpy(row + C + h * D, dk + o, bytes);
            memcpy(row + 2 * C + h * D, dv + o, bytes);
        }
    }
}

// x is (B,H,T,D), y is (B,T,H·D): y[b][t][h·D..] = x[b][h][t][:]
void merge_heads_forward(float *y, const float *x, int64_t B, int64_t T, int64_t H, int64_t D)
{
    size_t bytes = (size_t)D * sizeof *x;
#pragma omp parallel for schedule(static) if (B * T * H * D >= KERNEL_PAR_MIN)
    for (int64_t bt = 0; bt < B * T; bt++) {
        int64_t b = bt / T, t = bt % T;
        for (int64_t h = 0; h < H; h++)
            memcpy(y + bt * H * D + h * D, x + ((b * H + h) * T + t) * D, bytes);
    }
}

// dy is (B,T,H·D), dx is (B,H,T,D): the same copy, reversed
void merge_heads_backward(float *dx, const float *dy, int64_t B, int64_t T, int64_t H, int64_t D)
{
    size_t bytes = (size_t)D * sizeof *dy;
#pragma omp parallel for schedule(static) if (B * T * H * D >= KERNEL_PAR_MIN)
    for (int64_t bt = 0; bt < B * T; bt++) {
        int64_t b = bt / T, t = bt % T;
        for (int64_t h = 0; h < H; h++)
            memcpy(dx + ((b * H + h) * T + t) * D, dy + bt * H * D + h * D, bytes);
    }
}

/* ---- softmax ------------------------------------------------------------ */

// x, y are (R,L). Row r: y = exp(x - max) / Σ exp(x - max) over the row, or
// with causal over j <= r % L only (the rest 0).
void softmax_forward(float *y, const float *x, int64_t R, int64_t L, int causal)
{
#pragma omp parallel for schedule(static) if (R * L >= KERNEL_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        int64_t valid = causal ? r % L + 1 : L;
        kernel_softmax_row(y + r * L, x + r * L, valid);
        for (int64_t j = valid; j < L; j++)
            y[r * L + j] = 0.0f;
    }
}

// dy, y, dx are (R,L): dx = y · (dy - Σ_j dy·y), row by row
void softmax_backward(float *dx, const float *dy, const float *y, int64_t R, int64_t L)
{
#pragma omp parallel for schedule(static) if (R * L >= KERNEL_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *dyr = dy + r * L, *yr = y + r * L;
        float *dxr = dx + r * L;
        double dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < L; j++)
            dot += dyr[j] * yr[j];
        float d = (float)dot;
#pragma omp simd
        for (int64_t j = 0; j < L; j++)
            dxr[j] = yr[j] * (dyr[j] - d);
    }
}
