/* topk.h: the AdaTopK codec (docs/papers.md): top-k sparsification of one
 * fp32 tensor before it crosses a slow link, and the exact inverse on the
 * other side.  Only the k elements of largest magnitude travel; the receiver
 * gets x masked to its top k (zeros elsewhere).  Error feedback keeps what
 * was not sent in a residual that the next step adds back (for parameter
 * gradients).
 *
 * This file is the codec only: choosing the density (the link's measured
 * throughput against the stage time T*) and putting the bytes on the wire
 * (transport.h, with .codec = FU_CODEC_TOPK) are its callers' business.  It
 * is deliberately not a general sparse format: one fp32 tensor, flat, at most
 * TOPK_MAX_N elements (indices travel as uint32).
 *
 * Use:
 *
 *     topk_scratch s;
 *     topk_scratch_init(&s);
 *     int64_t k   = topk_count(n, 0.01);                  // 1% density
 *     size_t  cap = topk_encoded_bytes(n, k);
 *     int64_t len = topk_encode(x, n, k, buf, cap, &s);   // bytes written, or -1
 *     ...                                                 // send buf[0, len) with codec FU_CODEC_TOPK
 *     char err[256];
 *     if (topk_decode(buf, (size_t)len, y, n, err, sizeof err) != 0) ...   // y: x masked to its top k
 *     topk_scratch_free(&s);
 *
 * Selection.  "Largest magnitude" orders elements by the bits of |x| read
 * as an unsigned integer (the float with its sign bit cleared).  For numbers
 * that is the order of |x| (+0 and -0 tie); it puts +-Inf above every finite
 * value and NaN above Inf (NaNs among themselves by payload bits).  A NaN or
 * Inf is therefore always sent while k allows: a broken gradient reaches the
 * receiver instead of hiding in a residual.  Ties at the threshold keep the
 * lowest indices first, so the kept set is a function of (x, k) alone: sort
 * the indices by key descending, then index ascending, and take the first k.
 *
 * Cost: O(n) time; in the common case one read of x and a write of the
 * output.  A fixed sample of min(n, 4096) elements (every (n / 4096)-th,
 * from index 0) guesses a threshold 4 standard deviations (binomial) below
 * the k-th largest key; one pass collects the candidates at or above it, in
 * index order, with their values; a quickselect on their keys (a radix
 * selection when there are more than 65536) finds the exact k-th largest key
 * T; the candidates with key > T and the first (k - #{key > T}) with key == T
 * are kept.  When the guess keeps fewer than k candidates, or too many to be
 * worth it (density above about 22%, or a sample that misleads, e.g. x
 * periodic with the sample's stride), an exact radix selection on all keys
 * (two histogram passes over x, 65536 bins) finds T instead, and a third
 * pass collects.  Either way the result is exactly the same set.
 *
 * Encoded bytes (little-endian), a 24-byte header then one of two bodies,
 * whichever is smaller for (n, k); index+value on a tie:
 *
 *     offset size  field
 *      0      4    magic   "FUTK" (TOPK_MAGIC)
 *      4      4    format  uint32, TOPK_FORMAT_INDEX (1) or TOPK_FORMAT_BITMAP (2)
 *      8      8    n       int64, elements of the dense tensor
 *     16      8    k       int64, elements kept, 0 <= k <= n
 *
 *     TOPK_FORMAT_INDEX:  k uint32 indices, strictly ascending, each < n;
 *                         then k fp32 values, x[index] in the same order.
 *                         24 + 8k bytes.
 *     TOPK_FORMAT_BITMAP: ceil(n / 8) bytes, bit (i % 8) of byte i / 8 set
 *                         = element i kept, bits past n zero, k bits set;
 *                         then k fp32 values in index order.
 *                         24 + ceil(n / 8) + 4k bytes.
 *
 * So index+value wins while 4k <= ceil(n / 8), i.e. up to a density of
 * about 1/32; above that the bitmap does.  (The raw tensor, FU_CODEC_RAW_F32,
 * is 4n bytes: the codec pays from a density below about 0.8 - its caller
 * decides.)  Values are copied bit for bit, NaN payloads included.
 *
 * Errors are values: encode returns -1 (bad arguments, capacity too small,
 * out of memory) and changes nothing the caller can see except out; decode
 * returns -1 with a one-line reason in err and leaves out unchanged.  Decode
 * checks every field against n and len before it writes, so no input,
 * however malformed, makes it read or write out of bounds.
 *
 * Memory: a topk_scratch holds the candidate arrays and the histogram; it
 * grows to what a call needs and keeps it, so calls with the same (n, k)
 * after the first allocate nothing (topk_scratch_reserve does the first
 * growth ahead of time).  One scratch per thread; the functions are
 * otherwise pure.
 */
#ifndef FUSION_TOPK_H
#define FUSION_TOPK_H

#include <stddef.h>
#include <stdint.h>

#define FU_CODEC_TOPK 1 /* transport.h's codec field: a topk_encode payload */

#define TOPK_MAGIC         0x4B545546u /* "FUTK" read as little-endian bytes */
#define TOPK_FORMAT_INDEX  1u
#define TOPK_FORMAT_BITMAP 2u
#define TOPK_HEADER_BYTES  24
#define TOPK_MAX_N         ((int64_t)UINT32_MAX)
#define TOPK_SAMPLE        4096 /* elements in the threshold's sample */

typedef struct {
    uint32_t *cand_idx; /* (cand_cap + 16) candidate indices, ascending */
    uint32_t *cand_val; /* (cand_cap + 16) their values' bits */
    int64_t cand_cap;
    uint32_t *hist; /* 65536 counts for the exact radix selection, or the keys the
                             quickselect permutes; NULL until needed */
    uint32_t sample[TOPK_SAMPLE];
} topk_scratch;

void topk_scratch_init(topk_scratch *s);
void topk_scratch_free(topk_scratch *s);
/* Grow s now for calls with this (n, k), so the first encode allocates
 * nothing either.  0, or -1 when out of memory. */
int topk_scratch_reserve(topk_scratch *s, int64_t n, int64_t k);

/* k for a density: round half up of density * n, clamped to [0, n]; at
 * least 1 when n >= 1 and density > 0.  0 for n <= 0, density <= 0 or NaN. */
int64_t topk_count(int64_t n, double density);

/* Bytes topk_encode writes for (n, k): 24 + min(8k, ceil(n / 8) + 4k).
 * 0 when (n, k) is not encodable (n < 0, n > TOPK_MAX_N, k < 0, k > n). */
size_t topk_encoded_bytes(int64_t n, int64_t k);

/* x is (n,) fp32.  Writes topk_encoded_bytes(n, k) bytes into out
 * (capacity bytes) and returns that count; -1 when (n, k) is not encodable,
 * capacity is too small or s cannot grow. */
int64_t topk_encode(const float *x, int64_t n, int64_t k, void *out, size_t capacity, topk_scratch *s);

/* Error feedback.  x and residual are (n,) fp32.  Encodes r = x + residual
 * (elementwise, fp32) like topk_encode(r, ...), and leaves in residual what
 * was not sent: r minus the decoded tensor, i.e. r with its kept elements
 * zeroed.  The first call of a run passes a zeroed residual.  Over steps,
 * sum of decoded tensors + final residual = sum of the x's (up to fp32
 * rounding of the additions).  On -1, residual is unchanged. */
int64_t topk_encode_with_residual(const float *x, float *residual, int64_t n, int64_t k, void *out, size_t capacity,
                                  topk_scratch *s);

/* in is len bytes from topk_encode; out is (n,) fp32.  Writes the dense
 * tensor (kept values at their indices, +0 elsewhere) and returns 0; -1 with
 * a one-line reason in err (errn bytes) when in is not a valid encoding of
 * an n-element tensor: too short or long, bad magic or format, header n != n,
 * k outside [0, n], indices not ascending or out of range, bitmap popcount
 * != k or bits set past n. */
int topk_decode(const void *in, size_t len, float *out, int64_t n, char *err, size_t errn);

#endif
