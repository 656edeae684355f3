/* loss.c: cross-entropy of logits against integer class targets, mean over
 * the rows (torch.nn.functional.cross_entropy with reduction='mean').
 *
 * The backward recomputes each row's softmax from the logits rather than
 * keeping the (N,V) probabilities: for a GPT-2 vocabulary that is the
 * largest activation of the model. Targets out of range return -1, as in
 * embedding.c. A target of OP_IGNORE_TARGET (-100) is PyTorch's
 * ignore_index: the row adds nothing; no label smoothing.
 */
#include <math.h>
#include <string.h>

#include "cpu/kernels_internal.h"

static int check_targets(const int32_t *targets, int64_t N, int64_t V, int64_t *bad_pos)
{
    for (int64_t i = 0; i < N; i++) {
        if ((targets[i] < 0 || targets[i] >= V) && targets[i] != OP_IGNORE_TARGET) {
            if (bad_pos)
                *bad_pos = i;
            return -1;
        }
    }
    return 0;
}

/* max_j x[j] and Σ_j exp(x[j] - max), the sum in double. */
static void row_max_sumexp(const float *x, int64_t V, float *max, double *sum)
{
    float m = kernel_max_f32(x, V);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < V; j++)
        s += kernel_expf(x[j] - m);
    *max = m;
    *sum = s;
}

// logits is (N,V), targets is (N), loss is one float:
// loss = (1/N) Σ_i (log Σ_j exp(logits[i][j]) - logits[i][targets[i]])
int cross_entropy_forward(float *loss, const float *logits, const int32_t *targets, int64_t N, int64_t V,
                          int64_t *bad_pos)
{
    if (check_targets(targets, N, V, bad_pos))
        return -1;
    double total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (N * V >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        if (targets[i] == OP_IGNORE_TARGET)
            continue;
        const float *x = logits + i * V;
        float m;
        double s;
        row_max_sumexp(x, V, &m, &s);
        total += (double)m + log(s) - (double)x[targets[i]];
    }
    *loss = N > 0 ? (float)(total / (double)N) : 0.0f;
    return 0;
}

// dloss points at one float, logits and dlogits are (N,V), targets is (N):
// dlogits[i][j] = dloss/N · (softmax(logits[i])[j] - (j == targets[i]))
int cross_entropy_backward(float *dlogits, const float *dloss, const float *logits, const int32_t *targets, int64_t N,
                           int64_t V, int64_t *bad_pos)
{
    if (check_targets(targets, N, V, bad_pos))
        return -1;
    float g = N > 0 ? (float)((double)*dloss / (double)N) : 0.0f;
#pragma omp parallel for schedule(static) if (N * V >= KERNEL_PAR_MIN)
    for (int64_t i = 0; i < N; i++) {
        float *dx = dlogits + i * V;
        if (targets[i] == OP_IGNORE_TARGET) { /* no gradient (written over the logits: every element) */
            memset(dx, 0, (size_t)V * sizeof *dx);
            continue;
        }
        kernel_softmax_row(dx, logits + i * V, V);
#pragma omp simd
        for (int64_t j = 0; j < V; j++)
            dx[j] *= g;
        dx[targets[i]] -= g;
    }
    return 0;
}
