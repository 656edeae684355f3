/* half.h: bf16 and fp16 storage, converted to and from fp32.
 *
 * What this is.  The one place in fusion that knows the bit layouts of the
 * two 16-bit float formats it stores tensors in:
 *
 *   bf16  1 sign, 8 exponent, 7 mantissa bits: fp32's top half.  Same range
 *         as fp32, 8 bits of precision (relative step 2^-8).
 *   fp16  IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits.  Largest
 *         finite 65504, smallest normal 2^-14, subnormals down to 2^-24.
 *
 * Both directions round to nearest, ties to even (what torch's .to(dtype)
 * does); fp32 -> fp16 overflows to +-inf past 65504 (+ half an ulp), keeps
 * NaN a NaN, and makes subnormals.  Conversions to fp32 are exact.
 *
 * What it deliberately is not: arithmetic.  Kernels compute in fp32; tensors
 * are only stored in 16 bits (kernels.h, exec.c).
 *
 * The array forms run over n contiguous elements, with OpenMP above
 * KERNEL_PAR_MIN elements; `to` and `from` must not overlap, except that
 * half_round_f32 works in place.
 */
#ifndef FUSION_CPU_HALF_H
#define FUSION_CPU_HALF_H

#include <stdint.h>
#include <string.h>

typedef uint16_t bf16_t;
typedef uint16_t fp16_t;

static inline uint32_t half_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float half_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float bf16_to_f32(bf16_t h) { return half_bits_f32((uint32_t)h << 16); }

static inline bf16_t f32_to_bf16(float f)
{
    uint32_t u = half_f32_bits(f);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;        /* to nearest, ties to even */
    uint32_t nan = (u >> 16) | 0x0040u;                               /* NaN stays a (quiet) NaN  */
    return (bf16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded); /* a select: vectorises */
}

static inline float fp16_to_f32(fp16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) /* inf, NaN */
        return half_bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) { /* zero, subnormal: man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return half_bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline fp16_t f32_to_fp16(float f)
{
    uint32_t u = half_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (fp16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520: rounds past 65504 to inf */
        return (fp16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: subnormal or zero */
        /* a as a float times 2^24 is the subnormal's integer mantissa;
         * adding 0.5 and the float's own rounding would double-round, so
         * round by hand from the exact bits. */
        if (a < 0x33000000u) /* < 2^-25: rounds to zero */
            return (fp16_t)sign;
        uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24: m >> shift is the result */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
        if (rem > halfway || (rem == halfway && (r & 1u)))
            r++;
        return (fp16_t)(sign | r);
    }
    uint32_t r = a - 0x38000000u;   /* rebias exponent 127 -> 15 */
    r += 0xfffu + ((r >> 13) & 1u); /* round to nearest, ties to even */
    return (fp16_t)(sign | (r >> 13));
}

/* Largest finite fp16 (the loss scaler's overflow is past it). */
#define FP16_MAX 65504.0f

/* ir_dtype values (ir/ir.h) as the runtime sees them, without the IR. */
enum { HALF_DT_F32 = 0, HALF_DT_I32 = 1, HALF_DT_F16 = 2, HALF_DT_BF16 = 3 };

/* to (n) fp32 = from (n) of dtype (HALF_DT_BF16 or HALF_DT_F16). */
void half_to_f32(float *to, const void *from, int64_t n, int dtype);
/* to (n) of dtype = from (n) fp32, rounded. */
void half_from_f32(void *to, const float *from, int64_t n, int dtype);
/* x (n) fp32, in place: each rounded to the nearest value of dtype (what
 * storing and loading again would give). */
void half_round_f32(float *x, int64_t n, int dtype);
/* Bytes of one element of an ir_dtype (4, 4, 2, 2). */
static inline int half_dtype_bytes(int dtype) { return dtype == HALF_DT_F16 || dtype == HALF_DT_BF16 ? 2 : 4; }

#endif
