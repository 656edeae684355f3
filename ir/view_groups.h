/* view_groups.h: which ops and sources a picture of the graph draws as one
 * box, shared by the Graphviz (dot.c) and HTML (html.c) views.
 *
 * A group is the ops of one repeated block (blocks.h) that share a phase
 * and a device, or the sources of one block that share a role:
 *
 *   (prefix "h", op,     phase forward, device 0)  "h.0-11 forward, 12 blocks, 120 ops"
 *   (prefix "h", source, role param)                "h.0-11 params, 144 tensors"
 *
 * A prefix counts as repeated only with two distinct instances or more
 * among names that do not start with "grad." (grad.wte.1, grad.wte.2 are a
 * value's gradient contributions, not blocks).  With a stage, ops of other
 * stages are in no group (they are not drawn).
 *
 * Not a public API: the views' own helper, beside them in ir/.
 */
#ifndef FUSION_IR_VIEW_GROUPS_H
#define FUSION_IR_VIEW_GROUPS_H

#include <stdint.h>

#include "view.h"

typedef struct {
    char prefix[128];
    int is_source;
    int32_t phase_or_role; /* ir_phase for ops, ir_role for sources */
    int32_t device;        /* ops: their device (-1: not placed); sources: -1 */
    int64_t lo, hi;        /* the instances it holds */
    int32_t members;
} ir_view_group;

typedef struct {
    const ir_graph *g;
    const ir_view_options *o;
    int32_t *node_group;  /* [n_nodes]: its group, -1: drawn alone */
    int32_t *value_group; /* [n_values]: a source's group, -1: alone (produced values: -1) */
    ir_view_group *groups;
    int32_t n_groups, cap_groups;
} ir_view_groups;

/* Group g's ops and sources as o asks (none when o->expand).  0, or -1 when
 * memory ran out (w is then still safe to free). */
int ir_view_groups_init(ir_view_groups *w, const ir_graph *g, const ir_view_options *o);
void ir_view_groups_free(ir_view_groups *w);

/* Is node n drawn (in o's stage, or every stage)? */
int ir_view_visible(const ir_view_groups *w, int32_t n);

/* The fill of device d's boxes, from a cycle of twelve pastel colours
 * ("white" for d < 0: not placed). */
const char *ir_view_device_colour(int32_t d);

/* "forward", "backward", "update" or "ops" (no phase). */
const char *ir_view_phase_name(ir_phase p);

#endif
