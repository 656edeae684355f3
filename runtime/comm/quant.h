/* quant.h: the row-quantisation codec for activations and activation
 * gradients that cross a slow link (the compress pass's `bits` attribute).
 *
 * Why not top-k for them: measured on a 4-layer GPT cut across a 20 Mbps
 * link (bench/bench_adatopk.sh), top-k of the activation or of its gradient
 * stalls training even at 49% density (loss 3.25-3.42 at step 60 against
 * 2.70 dense): what top-k drops is small but consistent, and unlike a
 * parameter gradient an activation has no next step to carry a residual
 * to.  8-bit rows matched the dense run (2.699 against 2.704); 4-bit rows
 * lost 2.7%.
 *
 * A tensor is read as `rows` rows of `cols` fp32 values (cols: its last
 * dimension).  Each row travels as one fp32 scale, max|x| / L with
 * L = 2^(bits-1) - 1, and one signed integer q in [-L, L] per element; the
 * receiver gets q * scale.  Rounding is to nearest (activations: the error
 * is at most scale / 2) or stochastic (gradients: floor(x / scale + u), u
 * uniform in [0, 1), so the decoded value is x in expectation and the
 * parameter gradients computed from it are unbiased; the error is below one
 * scale).  The uniforms come from a counter-based hash of (seed, index),
 * so a message is a function of (x, seed) alone.  A row holding an Inf or
 * NaN decodes as NaN in every element: a broken tensor arrives broken.
 *
 * Encoded bytes (little-endian), a 32-byte header then the body:
 *
 *     offset size  field
 *      0      4    magic     "FUQZ" (QUANT_MAGIC)
 *      4      4    bits      uint32, 4 or 8
 *      8      8    rows      int64
 *     16      8    cols      int64
 *     24      8    reserved  zero
 *     32   4*rows  scales    fp32, one a row
 *     ...          values    bits = 8: one int8 per element, row-major;
 *                            bits = 4: two per byte, the even index in the
 *                            low nibble, each stored as q + 8 (1..15)
 *
 * Use:
 *
 *     size_t  cap = quant_encoded_bytes(rows, cols, 8);
 *     int64_t len = quant_encode(x, rows, cols, 8, QUANT_STOCHASTIC, seed, buf, cap);  // -1: bad arguments
 *     ...                                        // send buf[0, len) with codec FU_CODEC_QUANT
 *     if (quant_decode(buf, (size_t)len, y, rows * cols, err, sizeof err) != 0) ...
 */
#ifndef FUSION_QUANT_H
#define FUSION_QUANT_H

#include <stddef.h>
#include <stdint.h>

#define FU_CODEC_QUANT     2           /* transport.h's codec field: a quant_encode payload */
#define QUANT_MAGIC        0x5A515546u /* "FUQZ" read as a little-endian uint32 */
#define QUANT_HEADER_BYTES 32

typedef enum { QUANT_NEAREST = 0, QUANT_STOCHASTIC = 1 } quant_rounding;

/* Bytes of the encoding of rows x cols at bits (4 or 8); 0 when invalid. */
size_t quant_encoded_bytes(int64_t rows, int64_t cols, int bits);
/* Encode x[rows * cols] into out[cap]: the bytes written, or -1 (bits not
 * 4 or 8, negative sizes, or cap too small). */
int64_t quant_encode(const float *x, int64_t rows, int64_t cols, int bits, quant_rounding rounding, uint64_t seed,
                     void *out, size_t cap);
/* Decode buf[len] into y[n]; 0, or -1 with err saying what is wrong (bad
 * magic, bits, sizes that are not n, a length that is not the encoding's). */
int quant_decode(const void *buf, size_t len, float *y, int64_t n, char *err, size_t err_size);

#endif
