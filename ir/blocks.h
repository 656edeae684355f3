/* blocks.h: the repeated blocks of a graph, found from its names.
 *
 * A model's <repeat name="h"> makes h.0.attn, h.1.attn, ...; the passes keep
 * the prefix in what they derive (grad.h.3.attn.w, h.3.attn.backward,
 * h.3.mlp:send2), so a name's block is the part before its first segment
 * that is a number, a leading "grad." aside, and the number is the
 * instance:
 *
 *   h.3.attn.c_attn        block "h", instance 3
 *   grad.h.3.ln_1.w        block "h", instance 3
 *   model.layers.11.mlp    block "model.layers", instance 11
 *   wte, loss              no block
 *
 * Views that collapse repeats (the DOT and HTML dumps) group what shares a
 * block and draw it once, with its count.
 */
#ifndef FUSION_IR_BLOCKS_H
#define FUSION_IR_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

/* 1 and the block's prefix and instance when name is in one, else 0. */
int ir_block_of(const char *name, char *prefix, size_t size, int64_t *instance);

#endif
