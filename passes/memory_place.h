/* memory_place.h: first-fit placement of buffers that live for a span of
 * steps, the core of the memory pass (passes/memory.c), on its own so that
 * a test can hold it against the plain quadratic rule
 * (tests/unit/test_memory_place.c).
 *
 *   mem_buffer b[n];        // bytes, start, end filled in, in placing order
 *   if (memory_place(b, n, 64) < 0) ... out of memory;
 *   // b[i].offset: where b[i] lives; the return value: the arena's peak
 *
 * The rule (greedy first fit, as TensorFlow Lite's and llm.c's arenas): in
 * the given order, each buffer goes to the lowest multiple of `align` at
 * which its bytes overlap those of no buffer placed before it whose
 * lifetime overlaps its own.  The caller chooses the order (the pass:
 * largest first).  The answer depends only on the order and the buffers,
 * never on how it is found.
 */
#ifndef FUSION_MEMORY_PLACE_H
#define FUSION_MEMORY_PLACE_H

#include <stdint.h>

typedef struct {
    int64_t bytes;      /* > 0                                                   */
    int32_t start, end; /* lifetime: first and last step, 0 <= start <= end          */
    int32_t owner;      /* the caller's tag (memory.c: a value, or -(node + 1) for a
                             node's scratch); not read                             */
    int64_t offset;     /* out: a multiple of align                              */
} mem_buffer;

/* Places b[0..n) in that order (the rule above).  Returns the peak, the
 * highest offset + bytes (0 for n = 0), or -1 when out of memory (offsets
 * then unset).  Time O(n log T log n) where first fit leaves few holes
 * (T: the last step + 1; see memory_place.c), memory O(n log T). */
int64_t memory_place(mem_buffer *b, int32_t n, int64_t align);

#endif
