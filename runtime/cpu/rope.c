/* rope.c: the rotary position embedding (Su et al. 2021) as Hugging Face's
 * Llama applies it, and split/concat along an axis.
 *
 * Rope works on x (R,T,H,D) in place of (R,T,H·D): every row r (a batch
 * entry) and head h of position t has the pairs (i, i + D/2), i < D/2, each
 * turned by the angle t·θ_i, θ_i = base^(-2i/D): Llama's rotate_half, the
 * two halves of a head paired, not neighbouring elements.  The angle and
 * its cosine and sine are computed in double, once per (t, i), and applied
 * to every row and head; the backward turns by -t·θ_i.  Llama 3.1's
 * long-context frequencies (rope_scaling, rope_type "llama3") rescale θ_i
 * (rope_inv_freq).
 */
#include <math.h>
#include <string.h>

#include "cpu/kernels_internal.h"

// θ_i = base^(-2i/D), scaled as Hugging Face's _compute_llama3_parameters
// (modeling_rope_utils.py) when s is not NULL and s->factor > 0: with the
// wavelength λ = 2π/θ_i, λ > old_ctx/low_freq (a low frequency): θ_i/factor;
// λ < old_ctx/high_freq (a high one): θ_i; between, with
// smooth = (old_ctx/λ - low_freq)/(high_freq - low_freq):
// (1 - smooth)·θ_i/factor + smooth·θ_i.  In double; the CUDA kernel's text
// (codegen/cuda_kernels.c: lower_rope) is these lines.
double rope_inv_freq(double base, int64_t i, int64_t D, const rope_scaling *s)
{
    double f = pow(base, -2.0 * (double)i / (double)D);
    if (!s || !(s->factor > 0.0))
        return f;
    double wavelen = 2.0 * M_PI / f;
    if (wavelen > s->old_ctx / s->low_freq)
        return f / s->factor;
    if (wavelen < s->old_ctx / s->high_freq)
        return f;
    double smooth = (s->old_ctx / wavelen - s->low_freq) / (s->high_freq - s->low_freq);
    return (1.0 - smooth) * f / s->factor + smooth * f;
}

/* Pair i of every head of one token, (x_i, x_{i+D/2}), turned by the
 * angle whose cosine and sine are c and s. */
static inline void rotate_pairs(float *yr, const float *xr, int64_t H, int64_t D, float c, float s)
{
    int64_t half = D / 2;
    for (int64_t h = 0; h < H; h++) {
        float a = xr[h * D], b = xr[h * D + half];
        yr[h * D] = a * c - b * s;
        yr[h * D + half] = b * c + a * s;
    }
}

// x, y are (R,T,H,D), D even; sign +1 (forward) or -1 (backward: the
// transpose of a rotation is the rotation back, by the same frequencies).
// With c, s = cos, sin(sign·t·θ_i):
//   y[.., i] = x[.., i]·c - x[.., i + D/2]·s
//   y[.., i + D/2] = x[.., i + D/2]·c + x[.., i]·s        (y may be x)
void rope_rotate(float *y, const float *x, int64_t R, int64_t T, int64_t H, int64_t D, double base,
                 const rope_scaling *scaling, int sign)
{
    int64_t half = D / 2, C = H * D;
#pragma omp parallel for schedule(static) if (R * T * C >= KERNEL_PAR_MIN)
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < half; i++) {
            double angle = (double)sign * (double)t * rope_inv_freq(base, i, D, scaling);
            float c = (float)cos(angle), s = (float)sin(angle);
            for (int64_t r = 0; r < R; r++) {
                const float *xr = x + (r * T + t) * C + i;
                float *yr = y + (r * T + t) * C + i;
                rotate_pairs(yr, xr, H, D, c, s);
            }
        }
    }
}

// The same forward turn with each token at its own position: token t of
// row r by pos[r·T + t]·θ_i (the decode pass's rope, each sequence of a
// step at its own place in its cache).
void rope_rotate_at(float *y, const float *x, const int32_t *pos, int64_t R, int64_t T, int64_t H, int64_t D,
                    double base, const rope_scaling *scaling)
{
    int64_t half = D / 2, C = H * D;
#pragma omp parallel for collapse(2) schedule(static) if (R * T * C >= KERNEL_PAR_MIN)
    for (int64_t r = 0; r < R; r++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < half; i++) {
                double angle = (double)pos[r * T + t] * rope_inv_freq(base, i, D, scaling);
                float c = (float)cos(angle), s = (float)sin(angle);
                const float *xr = x + (r * T + t) * C + i;
                float *yr = y + (r * T + t) * C + i;
                rotate_pairs(yr, xr, H, D, c, s);
            }
}

/* ---- split and concat along an axis --------------------------------- */

// y is (outer, Σ sizes, inner), part k is (outer, sizes[k], inner):
// y[o][off_k + j][:] = part_k[o][j][:], off_k = Σ_{m<k} sizes[m]
void concat_forward(float *y, const float *const *parts, const int64_t *sizes, int n, int64_t outer, int64_t inner)
{
    int64_t total = 0;
    for (int k = 0; k < n; k++)
        total += sizes[k];
#pragma omp parallel for schedule(static) if (outer * total * inner >= KERNEL_PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = 0;
        for (int k = 0; k < n; k++) {
            memcpy(y + (o * total + off) * inner, parts[k] + o * sizes[k] * inner,
                   (size_t)(sizes[k] * inner) * sizeof *y);
            off += sizes[k];
        }
    }
}

// The reverse: part k = its slice of x; a NULL part is skipped
void split_forward(float *const *parts, const float *x, const int64_t *sizes, int n, int64_t outer, int64_t inner)
{
    int64_t total = 0;
    for (int k = 0; k < n; k++)
        total += sizes[k];
#pragma omp parallel for schedule(static) if (outer * total * inner >= KERNEL_PAR_MIN)
    for (int64_t o = 0; o < outer; o++) {
        int64_t off = 0;
        for (int k = 0; k < n; k++) {
            if (parts[k])
                memcpy(parts[k] + o * sizes[k] * inner, x + (o * total + off) * inner,
                       (size_t)(sizes[k] * inner) * sizeof *x);
            off += sizes[k];
        }
    }
}
