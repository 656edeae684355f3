/* op_layout.h: the pieces of an op's scratch layout (exec.h) that the
 * executors share beyond exec.h's: where the 16-bit copies start and how
 * large each is.  Internal to the runtime. */
#ifndef FUSION_RT_OP_LAYOUT_H
#define FUSION_RT_OP_LAYOUT_H

#include "exec.h"

/* Floats from ws_offset to the first copy: the kernel's scratch, rounded up
 * so that the copies start 64-byte aligned. */
int64_t rt_op_copies_at_floats(const rt_op *op);
/* An f32 copy of t in floats, 64-byte aligned. */
int64_t rt_tensor_copy_floats(const rt_tensor *t);

#endif
