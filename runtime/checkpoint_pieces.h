/* checkpoint_pieces.h: --shard-optimizer's moments in checkpoints.
 *
 * A sharded replica holds only its piece of each AdamW moment
 * (runtime/shard.h) and writes only that: its part records the pieces in
 * its metadata, fusion.pieces, a line "LO WHOLE NAME" each (elements
 * [LO, LO + the tensor's size) of a tensor of WHOLE elements).  A resume
 * of another compile (another sharding, none, another replica count)
 * takes whatever range it needs from the parts: from a part that holds
 * the tensor whole, or from the pieces of its stage's replicas, which
 * between them cover it.  So checkpoints resume across shardings both
 * ways, and a sharded save is no larger than its pieces.
 */
#ifndef FUSION_RT_CHECKPOINT_PIECES_H
#define FUSION_RT_CHECKPOINT_PIECES_H

#include <stddef.h>
#include <stdint.h>

#include "device_program.h"
#include "safetensors.h"

/* This program's fusion.pieces record (malloc'd; "" when it holds none;
 * NULL out of memory). */
char *pieces_record(const program *p);

/* Whether part f holds `name` as a piece: 1 with *lo and *whole set, else 0. */
int pieces_find(const st_file *f, const char *name, int64_t *lo, int64_t *whole);

/* Elements [lo, lo + n) of the f32 tensor `name` of `whole` elements into
 * dst, from parts[0, n_parts) holding it whole or in pieces.  0, or -1
 * with err naming what is missing or does not fit (where: the step folder). */
int pieces_load(st_file *const *parts, int n_parts, const char *name, int64_t whole, int64_t lo, int64_t n, float *dst,
                const char *where, char *err, size_t err_size);

#endif
