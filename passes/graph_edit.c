/* graph_edit.c: moving a pass's new nodes beside their anchors (graph_edit.h). */
#include "graph_edit.h"

#include <stdlib.h>
#include <string.h>

int graph_place_new_nodes(ir_graph *g, int32_t first, const int32_t *anchor, int after)
{
    int32_t n = g->n_nodes, k = 0;
    ir_node *sorted = malloc(((size_t)n + 1) * sizeof *sorted);
    if (!sorted)
        return -1;
    for (int32_t i = 0; i < first; i++) {
        if (after)
            sorted[k++] = g->nodes[i];
        for (int32_t j = first; j < n; j++)
            if (anchor[j - first] == i)
                sorted[k++] = g->nodes[j];
        if (!after)
            sorted[k++] = g->nodes[i];
    }
    memcpy(g->nodes, sorted, (size_t)n * sizeof *sorted);
    free(sorted);
    for (int32_t i = 0; i < n; i++)
        for (int o = 0; o < g->nodes[i].n_out; o++)
            g->values[g->nodes[i].out[o]].producer = i;
    return 0;
}
