/* attention_cached.c: the attention of an inference step against a
 * key/value cache (the decode pass's attention_cached op).
 *
 * A step brings T new tokens of each of B sequences, token t of sequence b
 * at position pos[b][t].  Their keys and values go into the caches' rows at
 * those positions first; then each query attends, causally, to the cache's
 * rows 0..pos[b][t]: with T = 1 (decoding) the one new token sees every
 * earlier one; with T > 1 (a prompt's chunk) each token also sees the chunk
 * before it.  Query head h reads key/value head h/(H/KV), as
 * attention_forward_heads does, and a row's scores are summed in the same
 * order (a dot product over d, the softmax's maximum, then the weighted sum
 * in key order), so the results are training's attention to rounding.
 *
 * What it deliberately is not: a fused online-softmax (flash) kernel; a
 * step reads each cached row once a head, which for decoding is what the
 * memory traffic is anyway.
 */
#include <math.h>
#include <string.h>

#include "cpu/kernels_internal.h"

int64_t attention_cached_workspace_floats(int64_t B, int64_t H, int64_t CTX) { return B * H * CTX; }

int attention_cached_forward(float *y, const float *q, const float *k, const float *v, float *k_cache, float *v_cache,
                             const int32_t *pos, float *ws, int64_t B, int64_t T, int64_t CTX, int64_t H, int64_t KV,
                             int64_t D, int64_t *bad)
{
    int64_t C = H * D, KC = KV * D, group = H / KV;
    for (int64_t i = 0; i < B * T; i++)
        if (pos[i] < 0 || pos[i] >= CTX) {
            *bad = i;
            return -1;
        }
    // The new keys and values into their rows: (B,T,KV*D) -> (B,CTX,KV*D).
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t p = pos[b * T + t];
            memcpy(k_cache + (b * CTX + p) * KC, k + (b * T + t) * KC, (size_t)KC * sizeof *k);
            memcpy(v_cache + (b * CTX + p) * KC, v + (b * T + t) * KC, (size_t)KC * sizeof *v);
        }
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(static) if (B * H * T * CTX * D >= KERNEL_PAR_MIN)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            float *s = ws + (b * H + h) * CTX;
            int64_t g = h / group;
            for (int64_t t = 0; t < T; t++) {
                int64_t n = (int64_t)pos[b * T + t] + 1;
                const float *qr = q + (b * T + t) * C + h * D;
                float m = -INFINITY, sum = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    const float *kr = k_cache + (b * CTX + j) * KC + g * D;
                    float dot = 0.0f;
                    for (int64_t d = 0; d < D; d++)
                        dot += qr[d] * kr[d];
                    s[j] = dot * scale;
                    m = s[j] > m ? s[j] : m;
                }
                for (int64_t j = 0; j < n; j++) {
                    s[j] = kernel_expf(s[j] - m);
                    sum += s[j];
                }
                float *yr = y + (b * T + t) * C + h * D, inv = 1.0f / sum;
                for (int64_t d = 0; d < D; d++)
                    yr[d] = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    const float *vr = v_cache + (b * CTX + j) * KC + g * D;
                    float p = s[j] * inv;
                    for (int64_t d = 0; d < D; d++)
                        yr[d] += p * vr[d];
                }
            }
        }
    return 0;
}
