/* kernels.h: the fp32 CPU kernels of libfusionrt, forward and backward of
 * every operator, side by side.
 *
 * What this is. Plain functions over contiguous row-major float arrays that a
 * generated per-device program calls in schedule order, with sizes known at
 * compile time and pointers into one arena. Nothing here knows about the IR,
 * allocates, or keeps state between calls: a kernel reads its inputs, writes
 * its outputs and returns.
 *
 * What it deliberately is not: a tensor library. There are no strides, no
 * broadcasting, no dtypes other than float (data) and int32_t (indices and
 * targets). Sizes are int64_t everywhere.
 *
 * Numbers. Results match PyTorch's fp32 CPU kernels to ~1e-6 relative, not
 * bitwise: sums are in double, exponentials are a vectorised polynomial
 * within 2 ulp of expf, and BLAS picks its own summation order.
 *
 * Conventions, PyTorch's, so that results match torch:
 *
 *   - Shapes are in the comment above each kernel, outermost first:
 *     `x (M,K)` is M rows of K contiguous floats.
 *   - Outputs come first in the argument list, then inputs, then sizes and
 *     attributes. Outputs never alias inputs unless a comment says so.
 *   - A backward kernel takes the gradient of the forward's output(s) (`dy`,
 *     `dout`, ...) and the forward's inputs, and WRITES (overwrites, never
 *     accumulates into) the gradient of each input. A NULL gradient pointer
 *     means "not needed": that gradient is skipped, not computed. Summing
 *     the gradients of a value used twice is the caller's business (an add).
 *   - Backward kernels recompute the cheap forward statistics (layernorm and
 *     batchnorm mean/rstd, attention probabilities, cross-entropy softmax,
 *     maxpool argmax) rather than saving them. The one exception is softmax,
 *     whose backward takes the forward output y.
 *   - Reductions (norm statistics, softmax sums, losses, sums of squares)
 *     accumulate in double; softmaxes subtract the row max.
 *
 * Errors. Kernels whose input can be out of range (indices into a table,
 * class targets) return int: 0 when all is well, -1 when some index is out
 * of range, with the position of the first bad one in *bad_pos (bad_pos may
 * be NULL; the bad value is idx[*bad_pos]). They check before writing
 * anything, so on -1 the outputs are untouched. All other kernels trust
 * their sizes, which the compiler has checked, and return void.
 *
 * Scratch memory. The kernels that need scratch (conv2d: the im2col matrix
 * of one image; attention: the causal scores of one head, about T² floats
 * with the backward's gradient) take a `float *ws` of the size that
 * <op>_workspace_floats() returns, so that the memory pass can place it in
 * the arena like any other buffer. Nothing else needs scratch.
 *
 * Threads. kernel_threads_set(n) sets both the OpenMP team size and the
 * OpenBLAS thread count. Kernels use OpenMP over rows where the work pays for
 * it and never call BLAS from inside an OpenMP region, so the two pools take
 * turns on the cores rather than fighting over them. Call it once at start,
 * from the thread that runs the kernels, before any kernel runs. Under gcc
 * (libgomp), start the process with OMP_WAIT_POLICY=passive: otherwise idle
 * OpenMP threads spin for milliseconds after each parallel loop and slow the
 * BLAS call that follows (threads.c has the measurements).
 *
 * Kernels keep no state and touch only their arguments, so calls on
 * disjoint buffers may come from different threads (they then share the
 * cores, and the thread counts are per process).
 */
#ifndef FUSION_CPU_KERNELS_H
#define FUSION_CPU_KERNELS_H

#include <stdint.h>

#include "../../ir/op_kinds.h" /* OP_IGNORE_TARGET; the pointwise rows */

/* ---- threads (threads.c) --------------------------------------------- */

/* Use n threads (n >= 1) for both OpenMP loops and OpenBLAS products. */
void kernel_threads_set(int n);
/* The count set last (or the OpenMP default when never set). */
int kernel_threads_get(void);

/* ---- embedding (embedding.c) ----------------------------------------- */

/* out (N,C) = table[idx] ; idx (N) ; table (V,C).
 * Returns -1 (out untouched) when some idx is outside [0,V). */
/* The same from a 16-bit table (dtype: HALF_DT_BF16 or HALF_DT_F16), its rows widened as read. */
int embedding_forward_half(float *out, const int32_t *idx, const uint16_t *table, int64_t N, int64_t V, int64_t C,
                           int dtype, int64_t *bad_pos);
int embedding_forward(float *out, const int32_t *idx, const float *table, int64_t N, int64_t V, int64_t C,
                      int64_t *bad_pos);
/* dtable (V,C): zeroed, then dout (N,C) rows scatter-added at idx (N).
 * Same range check and return as the forward (dtable untouched on -1). */
int embedding_backward(float *dtable, const float *dout, const int32_t *idx, int64_t N, int64_t V, int64_t C,
                       int64_t *bad_pos);

/* out (B,T) int32: out[b][t] = t. No inputs, so no backward. */
void positions_forward(int32_t *out, int64_t B, int64_t T);

/* ---- dense: linear and batched matmul (dense.c) ----------------------- */

/* y (M,N) = x (M,K) · w (N,K)ᵀ + b (N) ; b may be NULL (no bias).
 * w is stored (out_features, in_features) like torch.nn.Linear; with
 * transpose_w, (in_features, out_features) like GPT-2's Conv1D: y = x·w + b. */
/* The same with w of 16 bits (dtype HALF_DT_BF16 or HALF_DT_F16) read as
 * it is, for few rows M (an inference step's): each weight widened as it
 * is read, 16 partial sums a row and column, summed at the end. */
void linear_forward_half_w(float *y, const float *x, const uint16_t *w, const float *b, int64_t M, int64_t K, int64_t N,
                           int transpose_w, int dtype);
void linear_forward(float *y, const float *x, const float *w, const float *b, int64_t M, int64_t K, int64_t N,
                    int transpose_w);
/* dx (M,K) = dy·w ; dw (N,K) = dyᵀ·x ; db (N) = Σ_rows dy. Any may be NULL.
 * transpose_w: w and dw are (K,N), dx = dy·wᵀ, dw = xᵀ·dy. */
void linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t M,
                     int64_t K, int64_t N, int transpose_w);

/* c (Bt,M,N) = scale · a (Bt,M,K) · b, for each of the Bt batch entries,
 * where b is (Bt,K,N), or (Bt,N,K) used transposed when transpose_b != 0
 * (a·bᵀ, as in q·kᵀ). When b_batched == 0, b is one matrix, (K,N) or (N,K),
 * shared by the whole batch (as in x·W for 3-d x). */
void matmul_forward(float *c, const float *a, const float *b, int64_t Bt, int64_t M, int64_t K, int64_t N,
                    int transpose_b, int b_batched, float scale);
/* da (Bt,M,K) = scale · dc·bᵀ (dc·b when transposed) ;
 * db shaped like b = scale · aᵀ·dc (dcᵀ·a when transposed), summed over the
 * batch when b is shared. Either may be NULL. */
void matmul_backward(float *da, float *db, const float *dc, const float *a, const float *b, int64_t Bt, int64_t M,
                     int64_t K, int64_t N, int transpose_b, int b_batched, float scale);

/* ---- normalisation (norm.c) ------------------------------------------- */

/* y (N,C) = (x - mean) / sqrt(var + eps) · w + b over each row of x (N,C);
 * biased variance; w (C), b (C), either may be NULL (1 and 0). */
void layernorm_forward(float *y, const float *x, const float *w, const float *b, int64_t N, int64_t C, float eps);
/* dx (N,C) ; dw (C), db (C) summed over the N rows. Any may be NULL. */
void layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t N,
                        int64_t C, float eps);

/* Training-mode batch norm. x and y are (N,C,HW): (N,C,H,W) with HW = H·W,
 * or (N,C) with HW = 1. Each channel c is normalised with the mean and biased
 * variance of its N·HW values, then y = xhat·w[c] + b[c]; w, b (C) may be
 * NULL. When running_mean/running_var (C) are given they are updated as torch
 * does: r = (1-momentum)·r + momentum·stat, with the unbiased variance
 * (N·HW/(N·HW-1)) for running_var. Pass NULL to leave them out. */
void batchnorm_forward(float *y, const float *x, const float *w, const float *b, float *running_mean,
                       float *running_var, int64_t N, int64_t C, int64_t HW, float eps, float momentum);
/* Inference: y = (x - running_mean[c]) / sqrt(running_var[c] + eps) · w[c] + b[c],
 * the same shapes; w, b may be NULL. */
void batchnorm_inference(float *y, const float *x, const float *w, const float *b, const float *running_mean,
                         const float *running_var, int64_t N, int64_t C, int64_t HW, float eps);
/* dx (N,C,HW) ; dw (C), db (C). Any may be NULL. */
void batchnorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int64_t N,
                        int64_t C, int64_t HW, float eps);
/* RMS norm over the last axis (Llama's): x, y (N,C), w (C), the mean of x²
 * in double; the backward writes dx and dw (either may be NULL). */
void rmsnorm_forward(float *y, const float *x, const float *w, int64_t N, int64_t C, float eps);
void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N, int64_t C,
                      float eps);

/* ---- pointwise (pointwise.c, from ir/pointwise.h's rows) --------------- */

/* Over n contiguous floats; y may alias an input (element i is read before
 * it is written).  A one-input op X of pointwise.h has
 *     void X_forward(float *y, const float *x, int64_t n);
 *     void X_backward(float *dx, const float *dy, const float *x, int64_t n);
 * a two-input one
 *     void X_forward(float *c, const float *a, const float *b, int64_t n);
 *     void X_backward(float *da, float *db, const float *dy, const float *a, const float *b, int64_t n);
 * (either gradient NULL: not wanted).  add's backward is the identity, da =
 * db = dc: no kernel, the caller reuses dc.  gelu is
 * torch.nn.functional.gelu(x, approximate='tanh'); relu's gradient is 0 at
 * x == 0, like torch's. */
#define FU_CPU_POINTWISE_FORWARD_1(nm)  void nm##_forward(float *y, const float *x, int64_t n);
#define FU_CPU_POINTWISE_BACKWARD_1(nm) void nm##_backward(float *dx, const float *dy, const float *x, int64_t n);
#define FU_CPU_POINTWISE_FORWARD_2(nm)  void nm##_forward(float *c, const float *a, const float *b, int64_t n);
#define FU_CPU_POINTWISE_BACKWARD_2(nm) \
    void nm##_backward(float *da, float *db, const float *dy, const float *a, const float *b, int64_t n);
#define FU_CPU_POINTWISE_DECLS(ENUM, nm, arity, f0, f1, has, ...) \
    FU_CPU_POINTWISE_FORWARD_##arity(nm) FU_IF_BACKWARD_##has(FU_CPU_POINTWISE_BACKWARD_##arity(nm))
FU_POINTWISE_OPS(FU_CPU_POINTWISE_DECLS)
#undef FU_CPU_POINTWISE_DECLS

/* The kernel of `op`, a pointwise op of pointwise.h or its backward, over
 * n floats: forward, out[0] from in[0] (and in[1]); backward, out[k] (NULL:
 * not wanted) the gradient of input k from in[0] (and in[1]) and dy, the
 * last input.  -1 for any other op. */
int pointwise_run(int op, float *const out[2], const float *const in[3], int64_t n);

/* y = x. Also flatten/reshape, which on contiguous data is a copy; the
 * backward is the same copy, dx = dy (elementwise.c). */
void copy_forward(float *y, const float *x, int64_t n);

/* ---- rotary embedding, split and concat (rope.c) ----------------------- */

/* Llama 3's frequency scaling (ir/op_kinds.h: ATTR_SCALE_FACTOR); factor 0: none. */
typedef struct {
    double factor, low_freq, high_freq, old_ctx;
} rope_scaling;
/* θ_i = base^(-2i/D), scaled by s (NULL: not). */
double rope_inv_freq(double base, int64_t i, int64_t D, const rope_scaling *s);
/* x, y (R,T,H,D): each head's halves (i, i + D/2) turned by sign·t·θ_i,
 * θ_i = rope_inv_freq(base, i, D, scaling). */
/* rope_rotate's forward with token t of row r at position pos[r·T + t]. */
void rope_rotate_at(float *y, const float *x, const int32_t *pos, int64_t R, int64_t T, int64_t H, int64_t D,
                    double base, const rope_scaling *scaling);
void rope_rotate(float *y, const float *x, int64_t R, int64_t T, int64_t H, int64_t D, double base,
                 const rope_scaling *scaling, int sign);
/* y (outer, Σ sizes, inner) from n parts (outer, sizes[k], inner), and back
 * (a NULL part skipped). */
void concat_forward(float *y, const float *const *parts, const int64_t *sizes, int n, int64_t outer, int64_t inner);
void split_forward(float *const *parts, const float *x, const int64_t *sizes, int n, int64_t outer, int64_t inner);

/* ---- attention (attention.c) ------------------------------------------ */

/* Causal multi-head self-attention, GPT-2 layout.
 * qkv (B,T,3C) holds q, k, v in columns [0,C), [C,2C), [2C,3C); head h uses
 * columns h·D..(h+1)·D of each, D = C/H. out (B,T,C), head h in the same
 * columns: out = softmax(q·kᵀ/sqrt(D) masked to j <= i) · v.
 * ws: attention_workspace_floats(T) floats. */
int64_t attention_workspace_floats(int64_t T);
void attention_forward(float *out, const float *qkv, float *ws, int64_t B, int64_t T, int64_t C, int64_t H);
/* dqkv (B,T,3C) from dout (B,T,C) and qkv; the probabilities are recomputed.
 * ws as for the forward. */
void attention_backward(float *dqkv, const float *dout, const float *qkv, float *ws, int64_t B, int64_t T, int64_t C,
                        int64_t H);

/* The general form: q (B,T,·) rows q_ld apart, head h in columns h·D..;
 * k, v (B,T,·) rows kv_ld apart, KV heads; out (B,T,H·D).  Query head h
 * reads kv head h/(H/KV) (grouped-query attention; KV = H: multi-head).
 * The backward writes dq, dk, dv in the layout of q, k, v (any NULL: not
 * wanted); dk, dv sum over the query heads of their group. */
void attention_forward_heads(float *out, const float *q, const float *k, const float *v, float *ws, int64_t B,
                             int64_t T, int64_t H, int64_t KV, int64_t D, int64_t q_ld, int64_t kv_ld);
void attention_backward_heads(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                              const float *v, float *ws, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t D,
                              int64_t q_ld, int64_t kv_ld);

/* An inference step's attention (attention_cached.c): q (B,T,H·D), k, v
 * (B,T,KV·D) of T new tokens at positions pos (B,T); their k, v rows go
 * into k_cache, v_cache (B,CTX,KV·D) at those positions, then y (B,T,H·D)
 * = softmax(q·kᵀ/sqrt(D)) · v over the cache's rows 0..pos.  ws:
 * attention_cached_workspace_floats.  -1 with *bad the first position
 * outside [0, CTX) (nothing written). */
int64_t attention_cached_workspace_floats(int64_t B, int64_t H, int64_t CTX);
int attention_cached_forward(float *y, const float *q, const float *k, const float *v, float *k_cache, float *v_cache,
                             const int32_t *pos, float *ws, int64_t B, int64_t T, int64_t CTX, int64_t H, int64_t KV,
                             int64_t D, int64_t *bad);

/* q, k, v (B,H,T,D) from qkv (B,T,3C), C = H·D, same column layout as above. */
void qkv_split_forward(float *q, float *k, float *v, const float *qkv, int64_t B, int64_t T, int64_t C, int64_t H);
/* dqkv (B,T,3C) from dq, dk, dv (B,H,T,D) (all three required). */
void qkv_split_backward(float *dqkv, const float *dq, const float *dk, const float *dv, int64_t B, int64_t T, int64_t C,
                        int64_t H);

/* y (B,T,H·D) from x (B,H,T,D): heads side by side again. */
void merge_heads_forward(float *y, const float *x, int64_t B, int64_t T, int64_t H, int64_t D);
/* dx (B,H,T,D) from dy (B,T,H·D). */
void merge_heads_backward(float *dx, const float *dy, int64_t B, int64_t T, int64_t H, int64_t D);

/* y (R,L) = softmax of each row of x (R,L). With causal != 0 the rows are
 * the query rows of square LxL score blocks (R a multiple of L): row r is
 * query position i = r % L and entries j > i are masked (-inf, so y = 0). */
void softmax_forward(float *y, const float *x, int64_t R, int64_t L, int causal);
/* dx (R,L) = y·(dy - Σ_j dy·y) from dy and the forward's output y (R,L);
 * masked entries have y = 0 and so get dx = 0: no causal flag needed. */
void softmax_backward(float *dx, const float *dy, const float *y, int64_t R, int64_t L);

/* ---- loss (loss.c) ---------------------------------------------------- */

/* loss (one float) = mean over the N rows of -log softmax(logits (N,V))[target],
 * targets (N) in [0,V) or OP_IGNORE_TARGET (the row counts 0; the
 * caller's loss weight makes the mean one over the others).  Returns -1
 * (loss untouched) on a target out of range. */
int cross_entropy_forward(float *loss, const float *logits, const int32_t *targets, int64_t N, int64_t V,
                          int64_t *bad_pos);
/* dlogits (N,V) = dloss/N · (softmax(logits) - onehot(target)), where dloss
 * points at the one float gradient of the loss (1.0 at the start of
 * backprop). Same range check and return as the forward. */
int cross_entropy_backward(float *dlogits, const float *dloss, const float *logits, const int32_t *targets, int64_t N,
                           int64_t V, int64_t *bad_pos);

/* ---- convolution and pooling (conv.c) --------------------------------- */

/* Output size of a window of k, stride s, padding p over n:
 * (n + 2p - k)/s + 1, rounded down (torch's default, ceil_mode=False). */
int64_t conv_out_size(int64_t n, int64_t k, int64_t stride, int64_t pad);

/* y (N,OC,OH,OW) = x (N,C,H,W) ⋆ w (OC,C,KH,KW) + b (OC) (b may be NULL),
 * stride and zero padding on both spatial axes; OH, OW from conv_out_size.
 * ws: conv2d_workspace_floats(...) floats, for the forward and the
 * backward alike (0 for a 1x1, stride 1, pad 0 convolution whose images
 * are large enough to go one at a time; ws may then be NULL). */
int64_t conv2d_workspace_floats(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW,
                                int64_t stride, int64_t pad);
void conv2d_forward(float *y, const float *x, const float *w, const float *b, float *ws, int64_t N, int64_t C,
                    int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW, int64_t stride, int64_t pad);
/* dx (N,C,H,W), dw (OC,C,KH,KW), db (OC) from dy (N,OC,OH,OW). Any may be NULL. */
void conv2d_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, float *ws,
                     int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW, int64_t stride,
                     int64_t pad);

/* y (N,C,OH,OW) = max over each k x k window of x (N,C,H,W), stride, padding
 * that counts as -inf (torch's max_pool2d; needs pad <= k/2). */
void maxpool2d_forward(float *y, const float *x, int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, int64_t stride,
                       int64_t pad);
/* dx (N,C,H,W): each dy goes to its window's max, the first one in scan
 * order on ties (like torch); overlapping windows add up. */
void maxpool2d_backward(float *dx, const float *dy, const float *x, int64_t N, int64_t C, int64_t H, int64_t W,
                        int64_t k, int64_t stride, int64_t pad);

/* y (N,C) = mean of each x (N,C,HW) plane (adaptive_avg_pool2d to 1x1). */
void avgpool_global_forward(float *y, const float *x, int64_t N, int64_t C, int64_t HW);
/* dx (N,C,HW) = dy (N,C) / HW, broadcast over the plane. */
void avgpool_global_backward(float *dx, const float *dy, int64_t N, int64_t C, int64_t HW);

/* ---- optimizer (optim.c) ---------------------------------------------- */

/* One torch.optim.AdamW step (amsgrad off) over n parameters, in place:
 *   p -= lr·wd·p                        decoupled weight decay, first
 *   m  = β1·m + (1-β1)·g ; v = β2·v + (1-β2)·g²
 *   p -= lr/(1-β1^t) · m / (sqrt(v)/sqrt(1-β2^t) + eps)
 * t >= 1 is the step number (1 on the first call). The hyper-parameters are
 * double, like torch's Python floats, and enter the float arithmetic the
 * way torch's do. */
/* torch.optim.SGD without momentum: p = p - lr (g + wd p), in float as
 * torch orders it (d = g + wd p; p += -lr d).  param, grad (n). */
void sgd_update(float *param, const float *grad, int64_t n, double lr, double weight_decay);
void adamw_update(float *param, const float *grad, float *m, float *v, int64_t n, double lr, double beta1, double beta2,
                  double eps, double weight_decay, int64_t t);

/* Σ g², accumulated in double. Global gradient-norm clipping, as
 * torch.nn.utils.clip_grad_norm_: norm = sqrt(Σ over every gradient of
 * grad_sum_squares), then grad_scale each by min(1, max_norm/(norm + 1e-6)). */
double grad_sum_squares(const float *g, int64_t n);
/* g *= s. */
void grad_scale(float *g, int64_t n, float s);

#endif
