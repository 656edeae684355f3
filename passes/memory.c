/* memory.c: the `memory` pass.  Places every value and every op's scratch
 * in its device's arena, reusing memory whose contents are dead:
 *
 *   - a value lives from the op that writes it to the last op that reads
 *     it, in schedule (node) order; params, optimizer state and inputs live
 *     the whole step (they persist, or the loader writes them first), and
 *     so does the loss (the runtime reads it after the step), and so does
 *     what a recomputing stage's forward receives (it is put back before
 *     the forward runs again);
 *   - an op's scratch (attention, convolution) lives only while it runs;
 *   - an op that may write its output over an input (op_def.in_place:
 *     cross_entropy_backward's logits gradient over the logits) gets one
 *     buffer for both when it is that input's last reader: the logits'
 *     place, living until the gradient's last reader;
 *   - buffers are placed largest first, each at the lowest 64-byte-aligned
 *     offset that overlaps no buffer whose lifetime overlaps its own (the
 *     greedy-by-size plan of TensorFlow Lite and llm.c's arenas), in
 *     O(n log n)-ish time by memory_place.c's interval sets.
 *
 * The result is in each value's `offset` and each node's `ws_offset`
 * (printed as at=... and ws=...); memory_arena_bytes gives the peak.  Nodes
 * without a device are placed on device 0.
 */
#include <stdlib.h>
#include <string.h>

/* An op's scratch size is the runtime's (rt_op_workspace_floats: the CPU
 * back end's table, runtime/cpu/op_table.h): this pass lowers each node
 * (lower.c, every offset 0) to ask it, in pass_memory and
 * memory_arena_bytes.  The runtime is below passes/: no reach into codegen. */
#include "lower.h"
#include "../ir/ops.h"
#include "memory_place.h"
#include "passes.h"

#define ARENA_ALIGN 64

static int64_t align_up(int64_t n) { return (n + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

static int by_size_then_start(const void *a, const void *b)
{
    const mem_buffer *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->start > y->start) - (x->start < y->start);
}

static int32_t device_of(const ir_node *n) { return n->device >= 0 ? n->device : 0; }

/* The device a value lives on: its producer's, or its first reader's. */
static int32_t value_device(const ir_graph *g, int32_t v, const int32_t *first_reader)
{
    if (g->values[v].producer >= 0)
        return device_of(&g->nodes[g->values[v].producer]);
    return first_reader[v] >= 0 ? device_of(&g->nodes[first_reader[v]]) : 0;
}

int pass_memory(ir_graph *g, struct diag *err)
{
    int32_t n_nodes = g->n_nodes, n_values = g->n_values, last = n_nodes > 0 ? n_nodes - 1 : 0;
    int32_t *first_reader = malloc(((size_t)n_values + 1) * sizeof *first_reader);
    int32_t *last_reader = malloc(((size_t)n_values + 1) * sizeof *last_reader);
    mem_buffer *buffers = malloc(((size_t)n_values + (size_t)n_nodes + 1) * sizeof *buffers);
    int64_t *no_offsets = calloc((size_t)n_values + 1, sizeof *no_offsets);
    int32_t *over = malloc(((size_t)n_values + 1) * sizeof *over),
            *under = malloc(((size_t)n_values + 1) * sizeof *under);
    int rc = 0;
    if (!first_reader || !last_reader || !buffers || !no_offsets || !over || !under) {
        rc = diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "out of memory planning the arena");
        goto done;
    }
    for (int32_t v = 0; v < n_values; v++)
        first_reader[v] = last_reader[v] = -1;
    for (int32_t i = 0; i < n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++) {
            int32_t v = g->nodes[i].in[k];
            if (first_reader[v] < 0)
                first_reader[v] = i;
            if (op_reads_input(&g->nodes[i], k)) /* a frozen linear's x: its backward never reads it */
                last_reader[v] = i;
        }
    /* over[out] = in when out is written over in (op_def.in_place), and under[in] = out. */
    for (int32_t v = 0; v < n_values; v++)
        over[v] = under[v] = -1;
    for (int32_t i = 0; i < n_nodes; i++) {
        const ir_node *node = &g->nodes[i];
        int k = op_table[node->op].in_place - 1;
        if (k < 0 || k >= node->n_in || node->n_out < 1)
            continue;
        int32_t in = node->in[k], out = node->out[0];
        const ir_value *x = &g->values[in];
        if (last_reader[in] == i && x->producer >= 0 && in != g->loss && under[in] < 0 &&
            ir_value_bytes(g, in) == ir_value_bytes(g, out) && value_device(g, in, first_reader) == device_of(node) &&
            !(g->nodes[x->producer].op == OP_RECV)) {
            over[out] = in;
            under[in] = out;
        }
    }
    int32_t n_devices = 1;
    for (int32_t i = 0; i < n_nodes; i++)
        if (device_of(&g->nodes[i]) + 1 > n_devices)
            n_devices = device_of(&g->nodes[i]) + 1;

    for (int32_t d = 0; d < n_devices && rc == 0; d++) {
        int32_t n = 0;
        for (int32_t v = 0; v < n_values; v++) {
            const ir_value *val = &g->values[v];
            if (value_device(g, v, first_reader) != d)
                continue;
            /* A copy received once a step (a parameter) serves every micro-batch. */
            int once = val->producer >= 0 && g->nodes[val->producer].op == OP_RECV &&
                       ir_node_int(&g->nodes[val->producer], ATTR_ONCE, 0);
            /* A stage that recomputes puts back what its forward received
             * before running the forward again (runtime/main.c): no op
             * before the recv, in node order, may have its place. */
            const ir_node *producer = val->producer >= 0 ? &g->nodes[val->producer] : NULL;
            int replayed = producer && producer->op == OP_RECV && producer->phase != PHASE_BACKWARD &&
                           producer->phase != PHASE_UPDATE && ir_placement_recompute(&g->placement, producer->stage);
            int whole_step = val->producer < 0 || v == g->loss || once || replayed;
            if (over[v] >= 0)
                continue; /* placed with the input it is written over */
            mem_buffer *b = &buffers[n++];
            b->bytes = align_up(ir_value_bytes(g, v) > 0 ? ir_value_bytes(g, v) : 1);
            b->start = whole_step ? 0 : val->producer;
            b->end = whole_step ? last : (last_reader[v] > val->producer ? last_reader[v] : val->producer);
            b->owner = v;
            for (int32_t w = under[v]; w >= 0 && !whole_step; w = -1) /* w written over v: v's place lives on */
                b->end = last_reader[w] > b->end ? last_reader[w] : b->end;
        }
        for (int32_t i = 0; i < n_nodes; i++) {
            if (device_of(&g->nodes[i]) != d)
                continue;
            rt_op op;
            if (lower_node(g, i, no_offsets, -1, &op, err)) {
                rc = -1;
                break;
            }
            int64_t floats = rt_op_workspace_floats(&op);
            if (floats <= 0)
                continue;
            mem_buffer *b = &buffers[n++];
            b->bytes = align_up(floats * (int64_t)sizeof(float));
            b->start = b->end = i;
            b->owner = -(i + 1);
        }
        qsort(buffers, (size_t)n, sizeof *buffers, by_size_then_start);
        if (memory_place(buffers, n, ARENA_ALIGN) < 0) {
            if (rc == 0)
                rc = diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0, "out of memory planning the arena");
            break;
        }
        for (int32_t j = 0; j < n; j++) {
            if (buffers[j].owner >= 0)
                g->values[buffers[j].owner].offset = buffers[j].offset;
            else
                g->nodes[-buffers[j].owner - 1].ws_offset = buffers[j].offset;
        }
        for (int32_t v = 0; v < n_values; v++)
            if (over[v] >= 0 && value_device(g, v, first_reader) == d)
                g->values[v].offset = g->values[over[v]].offset;
    }
done:
    free(first_reader);
    free(last_reader);
    free(buffers);
    free(no_offsets);
    free(over);
    free(under);
    return rc;
}

int64_t memory_arena_bytes(const ir_graph *g, int32_t device)
{
    int32_t *first_reader = malloc(((size_t)g->n_values + 1) * sizeof *first_reader);
    int64_t *no_offsets = calloc((size_t)g->n_values + 1, sizeof *no_offsets);
    int64_t peak = -1;
    if (!first_reader || !no_offsets)
        goto done;
    for (int32_t v = 0; v < g->n_values; v++)
        first_reader[v] = -1;
    for (int32_t i = g->n_nodes - 1; i >= 0; i--)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            first_reader[g->nodes[i].in[k]] = i;
    peak = 0;
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        if (value_device(g, v, first_reader) == device && val->offset >= 0 && val->offset + ir_value_bytes(g, v) > peak)
            peak = val->offset + ir_value_bytes(g, v);
    }
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        struct diag err;
        rt_op op;
        if (device_of(n) != device || n->ws_offset < 0 || lower_node(g, i, no_offsets, -1, &op, &err))
            continue;
        int64_t end = n->ws_offset + rt_op_workspace_floats(&op) * (int64_t)sizeof(float);
        if (end > peak)
            peak = end;
    }
done:
    free(first_reader);
    free(no_offsets);
    return peak;
}

int32_t memory_stash_values(const ir_graph *g, int32_t stage, int32_t *out)
{
    return memory_stash_values_as(g, stage, ir_placement_recompute(&g->placement, stage), out);
}

int32_t memory_stash_values_as(const ir_graph *g, int32_t stage, int recompute, int32_t *out)
{
    int32_t n = 0;
    char *seen = calloc((size_t)g->n_values + 1, 1);
    if (!seen)
        return -1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *node = &g->nodes[i];
        if ((node->stage >= 0 ? node->stage : 0) != stage || node->phase == PHASE_UPDATE ||
            (!recompute && node->phase != PHASE_BACKWARD))
            continue;
        for (int k = 0; k < node->n_in; k++) {
            int32_t v = node->in[k];
            const ir_value *val = &g->values[v];
            const ir_node *producer = val->producer >= 0 ? &g->nodes[val->producer] : NULL;
            if (!op_reads_input(node, k))
                continue;
            int from_forward = producer && producer->phase != PHASE_BACKWARD && producer->phase != PHASE_UPDATE;
            /* A parameter received once a step lives all step: nothing to keep. */
            int once = producer && producer->op == OP_RECV && ir_node_int(producer, ATTR_ONCE, 0);
            /* Recomputing, the forward makes again all but what it receives. */
            int kept = recompute ? (from_forward && producer->op == OP_RECV) : from_forward;
            if (seen[v] || once || !(kept || val->role == ROLE_INPUT))
                continue;
            seen[v] = 1;
            out[n++] = v;
        }
    }
    free(seen);
    return n;
}
