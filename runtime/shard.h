/* shard.h: --shard-optimizer's pieces (ZeRO stage 1: Rajbhandari et al.,
 * SC 2020), one rule for the compiler, the comm layer and checkpoints.
 *
 * A stage's R replicas split every parameter's optimizer state: a tensor
 * of n elements falls into R pieces, piece q being elements
 *   [n q / R, n (q + 1) / R)             (integer division; some empty when n < R)
 * and replica r owns piece shard_piece_of(r, R) = (r + 1) mod R.  That
 * rotation is the ring's (comm.c): after the ring's reduce-scatter, member
 * r holds chunk (r + 1) mod R summed, and a bucket is laid out piece by
 * piece (chunk q = piece q of each tensor, in bucket order), so the
 * reduce-scatter leaves each replica exactly the pieces it updates.  A
 * replica's AdamW moments are its pieces alone (at most ceil(n / R)
 * elements a tensor); its parameters and gradients stay whole (the
 * forward and backward need them); after the update the all-gather
 * sends every replica the pieces the others updated.
 */
#ifndef FUSION_RT_SHARD_H
#define FUSION_RT_SHARD_H

#include <stdint.h>

static inline int32_t shard_piece_of(int32_t replica, int32_t R) { return R > 0 ? (replica + 1) % R : 0; }

/* The first element of piece q of a tensor of n elements (q = R: n). */
static inline int64_t shard_piece_lo(int64_t n, int32_t q, int32_t R) { return R > 0 ? n * q / R : 0; }

static inline int64_t shard_piece_size(int64_t n, int32_t q, int32_t R)
{
    return shard_piece_lo(n, q + 1, R) - shard_piece_lo(n, q, R);
}

/* The largest piece, what a replica's moments are allocated at. */
static inline int64_t shard_piece_max(int64_t n, int32_t R) { return R > 0 ? (n + R - 1) / R : n; }

#endif
