/* lower.h: IR node -> rt_op, the runtime's form of one scheduled op.
 *
 * The memory pass lowers each node to size its scratch from the runtime's
 * kernel table (runtime/exec.h: rt_op_workspace_floats); the code generator
 * lowers each node placed on a device with the arena offsets the memory
 * pass chose, and embeds the results; tests lower whole graphs the same way
 * to execute them.  Here, below codegen, because the memory pass needs it.
 */
#ifndef FUSION_LOWER_H
#define FUSION_LOWER_H

#include "../ir/ir.h"
#include "../runtime/exec.h"

/* Fill op from node n: dims from the values' shapes, offsets from
 * value_offset[value] (bytes into the arena), attributes with the op
 * table's defaults for those not set.  ws_offset: -1 or the scratch's
 * offset. */
int lower_node(const ir_graph *g, int32_t n, const int64_t *value_offset, int64_t ws_offset, rt_op *op,
               struct diag *err);

/* A device program's op for replica `replica` of its stage's R
 * (--shard-optimizer, runtime/shard.h): a sum_squares or adamw marked
 * `shard` narrowed to the replica's piece of its parameter and gradient
 * (their offsets moved to the piece, a matrix's rank kept as [1, piece]:
 * the decay's rule reads it), its moments the piece's size; an allgather
 * given its parameter as its output too (a CUDA device uploads what a host
 * step writes).  Other ops as they are. */
void lower_for_replica(rt_op *op, int32_t replica, int32_t R);

#endif
