/* readers.h: who reads each value, for passes that would otherwise scan
 * every node for every value (quadratic: the comm and fence passes spent
 * most of a 400-layer GPT's compile doing it).
 *
 *   ir_readers rd;
 *   if (ir_readers_build(g, g->n_nodes, g->n_values, &rd)) ... out of memory;
 *   for (int32_t r = rd.start[v]; r < rd.start[v + 1]; r++)
 *       ... node rd.at[r] reads value v ...
 *   ir_readers_free(&rd);
 *
 * For each value v < n_values, the nodes j < n_nodes that have v among
 * their inputs, ascending, each once.  A snapshot of the inputs when built:
 * a pass that rewires inputs keeps it true by its own rule (the comm pass
 * swaps a value for a fresh copy, so every node still reads every other
 * value it read).
 */
#ifndef FUSION_IR_READERS_H
#define FUSION_IR_READERS_H

#include "ir.h"

typedef struct {
    int32_t n_values;
    int32_t *start; /* [n_values + 2]: v's readers are at[start[v] .. start[v + 1]) */
    int32_t *at;    /* node indices */
} ir_readers;

/* 0, or -1 when out of memory (r can be freed either way). */
int ir_readers_build(const ir_graph *g, int32_t n_nodes, int32_t n_values, ir_readers *r);
void ir_readers_free(ir_readers *r);

#endif
