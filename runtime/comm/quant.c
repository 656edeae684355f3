/* quant.c: the row-quantisation codec (quant.h says what and the format). */
#include "comm/quant.h"
#include "../rt_error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "quant.c writes its format in host byte order, which must be little-endian"
#endif

static int valid(int64_t rows, int64_t cols, int bits)
{
    return rows >= 0 && cols >= 0 && (bits == 4 || bits == 8) && (cols == 0 || rows <= INT64_MAX / 8 / cols);
}

static size_t value_bytes(int64_t n, int bits) { return bits == 8 ? (size_t)n : ((size_t)n + 1) / 2; }

size_t quant_encoded_bytes(int64_t rows, int64_t cols, int bits)
{
    if (!valid(rows, cols, bits))
        return 0;
    return QUANT_HEADER_BYTES + 4 * (size_t)rows + value_bytes(rows * cols, bits);
}

/* splitmix64's finaliser: a counter-based generator, so element i's uniform
 * depends on (seed, i) only. */
static inline uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A row's scale max|x| / L, its inverse in *inv; NaN when the row holds an
 * Inf or NaN (it then decodes as NaN: q = 0 times a NaN scale). */
static float row_scale(const float *x, int64_t cols, float L, float *inv)
{
    float m = 0.0f, nan_if_broken = 0.0f; /* x - x is NaN for an Inf or NaN, else 0 */
    for (int64_t j = 0; j < cols; j++) {
        nan_if_broken += x[j] - x[j];
        float a = fabsf(x[j]);
        m = a > m ? a : m;
    }
    int broken = nan_if_broken != 0.0f;
    *inv = broken || m == 0.0f ? 0.0f : L / m;
    return broken ? NAN : m > 0.0f ? m / L : 1.0f;
}

/* floor(x * inv + u) in [-L, L], u in (0, 1).  The floor is a truncation
 * of a positive number (the value is above -L - 1 >= -128), which the
 * compiler vectorises where floorf is a library call. */
static inline int8_t stochastic_level(float x, float inv, float u, float L)
{
    float v = (float)((int)(x * inv + u + 128.0f) - 128);
    return (int8_t)(int)(v > L ? L : v < -L ? -L : v);
}

/* Element i's uniform: bits 16 (i % 4) .. 16 (i % 4) + 15 of a hash of
 * (seed, i / 4), the middle of its 1/65536 bin (the rounding's bias is
 * below 2^-16 of a scale). */
static inline float uniform_of(uint64_t h, int64_t i)
{
    return ((float)((h >> (16 * (i & 3))) & 0xffff) + 0.5f) * 0x1p-16f;
}
static inline uint64_t hash_of(uint64_t seed, int64_t i)
{
    return mix64(seed + 0x9e3779b97f4a7c15ull * (uint64_t)((i >> 2) + 1));
}

/* q[len] in [-L, L] for x[len], element index0 onward (the stochastic
 * rounding's counter).  Written so the compiler vectorises the nearest
 * case; the stochastic one draws one 64-bit hash per four elements. */
static void quantize(const float *x, int64_t len, float inv, float L, quant_rounding rounding, uint64_t seed,
                     int64_t index0, int8_t *q)
{
    if (rounding == QUANT_NEAREST) {
        for (int64_t j = 0; j < len; j++) {
            float v = x[j] * inv;
            v = v > L ? L : v < -L ? -L : v;
            q[j] = (int8_t)(int)(v + (v >= 0.0f ? 0.5f : -0.5f));
        }
        return;
    }
    int64_t j = 0;
    for (; j < len && ((index0 + j) & 3); j++) /* up to a multiple of 4 */
        q[j] = stochastic_level(x[j], inv, uniform_of(hash_of(seed, index0 + j), index0 + j), L);
    for (; j + 4 <= len; j += 4) { /* whole groups: one hash each */
        uint64_t h = hash_of(seed, index0 + j);
        for (int t = 0; t < 4; t++)
            q[j + t] = stochastic_level(x[j + t], inv, uniform_of(h, t), L);
    }
    for (; j < len; j++)
        q[j] = stochastic_level(x[j], inv, uniform_of(hash_of(seed, index0 + j), index0 + j), L);
}

int64_t quant_encode(const float *x, int64_t rows, int64_t cols, int bits, quant_rounding rounding, uint64_t seed,
                     void *out, size_t cap)
{
    size_t need = quant_encoded_bytes(rows, cols, bits);
    if (!need || need > cap || !out || (rows * cols > 0 && !x))
        return -1;
    unsigned char *o = out;
    uint32_t magic = QUANT_MAGIC, b = (uint32_t)bits;
    memset(o, 0, QUANT_HEADER_BYTES);
    memcpy(o, &magic, 4);
    memcpy(o + 4, &b, 4);
    memcpy(o + 8, &rows, 8);
    memcpy(o + 16, &cols, 8);
    unsigned char *scales = o + QUANT_HEADER_BYTES, *values = scales + 4 * (size_t)rows;
    if (bits == 4)
        memset(values, 0, value_bytes(rows * cols, 4));
    float L = bits == 8 ? 127.0f : 7.0f;
    enum { CHUNK = 4096 };
    int8_t q[CHUNK];
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * cols;
        float inv, scale = row_scale(xr, cols, L, &inv);
        memcpy(scales + 4 * r, &scale, 4);
        for (int64_t c0 = 0; c0 < cols; c0 += CHUNK) {
            int64_t len = cols - c0 < CHUNK ? cols - c0 : CHUNK, at = r * cols + c0;
            if (isnan(scale)) /* a broken row: zeros, which decode as NaN (0 times the NaN scale) */
                memset(q, 0, (size_t)len);
            else
                quantize(xr + c0, len, inv, L, rounding, seed, at, q);
            if (bits == 8) {
                memcpy(values + at, q, (size_t)len);
                continue;
            }
            int64_t j = 0; /* element i's nibble: the low one of byte i / 2 when i is even */
            if ((at & 1) && len > 0)
                values[at / 2] |= (unsigned char)((q[j++] + 8) << 4);
            for (; j + 1 < len; j += 2)
                values[(at + j) / 2] = (unsigned char)((q[j] + 8) | ((q[j + 1] + 8) << 4));
            if (j < len)
                values[(at + j) / 2] |= (unsigned char)(q[j] + 8);
        }
    }
    return (int64_t)need;
}

int quant_decode(const void *buf, size_t len, float *y, int64_t n, char *err, size_t err_size)
{
    const unsigned char *p = buf;
    uint32_t magic, bits;
    int64_t rows, cols;
    if (len < QUANT_HEADER_BYTES) {
        return rt_error(err, err_size, "quant: %zu bytes, shorter than the %d-byte header", len, QUANT_HEADER_BYTES);
    }
    memcpy(&magic, p, 4);
    memcpy(&bits, p + 4, 4);
    memcpy(&rows, p + 8, 8);
    memcpy(&cols, p + 16, 8);
    if (magic != QUANT_MAGIC) {
        return rt_error(err, err_size, "quant: bad magic 0x%08x (expected \"FUQZ\")", magic);
    }
    if (!valid(rows, cols, (int)bits) || rows * cols != n) {
        return rt_error(err, err_size, "quant: %lld x %lld at %u bits does not describe the %lld elements expected",
                        (long long)rows, (long long)cols, bits, (long long)n);
    }
    if (len != quant_encoded_bytes(rows, cols, (int)bits)) {
        return rt_error(err, err_size, "quant: %zu bytes, expected %zu for %lld x %lld at %u bits", len,
                        quant_encoded_bytes(rows, cols, (int)bits), (long long)rows, (long long)cols, bits);
    }
    const unsigned char *scales = p + QUANT_HEADER_BYTES, *values = scales + 4 * (size_t)rows;
    for (int64_t r = 0; r < rows; r++) {
        float scale;
        memcpy(&scale, scales + 4 * r, 4);
        float *yr = y + r * cols;
        if (bits == 8) {
            const int8_t *q = (const int8_t *)values + r * cols;
            for (int64_t j = 0; j < cols; j++)
                yr[j] = (float)q[j] * scale;
            continue;
        }
        int unused = 0;
        for (int64_t j = 0, i = r * cols; j < cols; j++, i++) {
            int nibble = (values[i / 2] >> (4 * (i & 1))) & 15;
            unused |= nibble == 0;
            yr[j] = (float)(nibble - 8) * scale;
        }
        if (unused) {
            for (int64_t i = r * cols; i < (r + 1) * cols; i++)
                if (((values[i / 2] >> (4 * (i & 1))) & 15) == 0) {
                    return rt_error(err, err_size, "quant: element %lld holds the unused 4-bit code 0", (long long)i);
                }
        }
    }
    return 0;
}
