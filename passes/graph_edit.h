/* graph_edit.h: an edit the passes that add nodes share (graph_edit.c).
 * Internal to passes/. */
#ifndef FUSION_GRAPH_EDIT_H
#define FUSION_GRAPH_EDIT_H

#include "../ir/ir.h"

/* The nodes from `first` on (a pass's new ones, in the order it made
 * them) each moved next to node anchor[k - first] of the old ones: right
 * after it (after != 0: the adapters pass's LoRA ops follow their linear)
 * or right before it (the decode pass's split precedes its attention);
 * every value's producer fixed.  0, or -1 out of memory. */
int graph_place_new_nodes(ir_graph *g, int32_t first, const int32_t *anchor, int after);

#endif
