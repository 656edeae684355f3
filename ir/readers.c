/* readers.c: ir_readers (readers.h), a compressed table of each value's
 * readers: counted, summed, filled; O(nodes x inputs). */
#include <stdlib.h>

#include "readers.h"

/* Does node read in[k] at an earlier input too (counted there)? */
static int read_before(const ir_node *node, int k)
{
    for (int q = 0; q < k; q++)
        if (node->in[q] == node->in[k])
            return 1;
    return 0;
}

int ir_readers_build(const ir_graph *g, int32_t n_nodes, int32_t n_values, ir_readers *r)
{
    r->n_values = n_values;
    r->at = NULL;
    r->start = calloc((size_t)n_values + 2, sizeof *r->start);
    if (!r->start)
        return -1;
    for (int32_t j = 0; j < n_nodes; j++) /* v's count at start[v + 2] */
        for (int k = 0; k < g->nodes[j].n_in; k++)
            if (g->nodes[j].in[k] < n_values && !read_before(&g->nodes[j], k))
                r->start[g->nodes[j].in[k] + 2]++;
    for (int32_t v = 0; v < n_values; v++) /* start[v + 1]: where v's readers begin */
        r->start[v + 2] += r->start[v + 1];
    r->at = malloc(((size_t)r->start[n_values + 1] + 1) * sizeof *r->at);
    if (!r->at)
        return -1;
    for (int32_t j = 0; j < n_nodes; j++) /* start[v + 1] walks to where v's end, = v + 1's begin */
        for (int k = 0; k < g->nodes[j].n_in; k++)
            if (g->nodes[j].in[k] < n_values && !read_before(&g->nodes[j], k))
                r->at[r->start[g->nodes[j].in[k] + 1]++] = j;
    return 0;
}

void ir_readers_free(ir_readers *r)
{
    free(r->start);
    free(r->at);
    r->start = r->at = NULL;
}
