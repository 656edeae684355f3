/* graph_runner.h: execute a compiled graph on the CPU kernels, for tests.
 *
 * Every value gets its own slot in one arena (no reuse: tests want every
 * intermediate readable), every node is lowered with codegen's lower_node
 * and run with the runtime's rt_op_run, in graph order: the same two steps
 * a generated program takes, without the memory plan.
 */
#ifndef FUSION_GRAPH_RUNNER_H
#define FUSION_GRAPH_RUNNER_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../passes/lower.h"

typedef struct {
    ir_graph *g;
    char *arena;
    int64_t *offset; /* per value: bytes into the arena */
    rt_op *ops;      /* per node */
} graph_runner;

static inline int64_t runner_align(int64_t n) { return (n + 63) & ~(int64_t)63; }

static inline int runner_init(graph_runner *r, ir_graph *g)
{
    struct diag err = { 0 };
    memset(r, 0, sizeof *r);
    r->g = g;
    r->offset = calloc((size_t)g->n_values + 1, sizeof *r->offset);
    r->ops = calloc((size_t)g->n_nodes + 1, sizeof *r->ops);
    if (!r->offset || !r->ops)
        return -1;
    int64_t size = 0;
    for (int32_t v = 0; v < g->n_values; v++) {
        r->offset[v] = size;
        size += runner_align(ir_value_bytes(g, v) > 0 ? ir_value_bytes(g, v) : 4);
    }
    for (int32_t n = 0; n < g->n_nodes; n++) {
        if (lower_node(g, n, r->offset, -1, &r->ops[n], &err)) {
            fprintf(stderr, "lower: %s:%d: %s\n", err.file, err.line, err.msg);
            return -1;
        }
        int64_t ws = rt_op_workspace_floats(&r->ops[n]);
        if (ws > 0) {
            r->ops[n].ws_offset = size;
            size += runner_align(ws * 4);
        }
    }
    r->arena = calloc(1, (size_t)size + 64);
    return r->arena ? 0 : -1;
}

/* As runner_init, but with the memory pass's plan: one arena of
 * memory_arena_bytes(g, 0), values and scratch at the offsets it chose. */
static inline int runner_init_planned(graph_runner *r, ir_graph *g, int64_t arena_bytes)
{
    struct diag err = { 0 };
    memset(r, 0, sizeof *r);
    r->g = g;
    r->offset = calloc((size_t)g->n_values + 1, sizeof *r->offset);
    r->ops = calloc((size_t)g->n_nodes + 1, sizeof *r->ops);
    r->arena = calloc(1, (size_t)arena_bytes + 64);
    if (!r->offset || !r->ops || !r->arena)
        return -1;
    for (int32_t v = 0; v < g->n_values; v++) {
        if (g->values[v].offset < 0)
            return -1;
        r->offset[v] = g->values[v].offset;
    }
    for (int32_t n = 0; n < g->n_nodes; n++)
        if (lower_node(g, n, r->offset, g->nodes[n].ws_offset, &r->ops[n], &err)) {
            fprintf(stderr, "lower: %s:%d: %s\n", err.file, err.line, err.msg);
            return -1;
        }
    return 0;
}

static inline void runner_free(graph_runner *r)
{
    free(r->arena);
    free(r->offset);
    free(r->ops);
}

static float *runner_value(graph_runner *r, const char *name)
{
    int32_t v = ir_find_value(r->g, name);
    return v < 0 ? NULL : (float *)(r->arena + r->offset[v]);
}

static inline int64_t runner_numel(graph_runner *r, const char *name)
{
    int32_t v = ir_find_value(r->g, name);
    return v < 0 ? 0 : ir_shape_numel(&r->g->values[v].shape);
}

/* A small deterministic generator (xorshift64*) and its normal deviates. */
static uint64_t runner_rng = 0x9E3779B97F4A7C15ull;
static inline double runner_uniform(void)
{
    runner_rng ^= runner_rng >> 12, runner_rng ^= runner_rng << 25, runner_rng ^= runner_rng >> 27;
    return (double)((runner_rng * 2685821657736338717ull) >> 11) / 9007199254740992.0;
}
static inline double runner_normal(void)
{
    double u = runner_uniform() + 1e-12, w = runner_uniform();
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}

/* Params and state from their init specs; float inputs N(0,1); integer
 * inputs uniform in [0, int_limit). */
static inline void runner_fill(graph_runner *r, uint64_t seed, int32_t int_limit)
{
    runner_rng = seed * 2 + 1;
    for (int32_t v = 0; v < r->g->n_values; v++) {
        const ir_value *val = &r->g->values[v];
        if (val->producer >= 0)
            continue;
        int64_t n = ir_shape_numel(&val->shape);
        if (val->dtype == DT_I32) {
            int32_t *x = (int32_t *)(r->arena + r->offset[v]);
            for (int64_t i = 0; i < n; i++)
                x[i] = (int32_t)(runner_uniform() * int_limit) % int_limit;
            continue;
        }
        float *x = (float *)(r->arena + r->offset[v]);
        for (int64_t i = 0; i < n; i++) {
            switch (val->role == ROLE_INPUT ? INIT_NORMAL : val->init.kind) {
            case INIT_ONES:
                x[i] = 1.0f;
                break;
            case INIT_NORMAL:
                x[i] = (float)((val->role == ROLE_INPUT ? 1.0 : val->init.a) * runner_normal());
                break;
            case INIT_UNIFORM:
                x[i] = (float)(val->init.a * (2.0 * runner_uniform() - 1.0));
                break;
            default:
                x[i] = 0.0f;
                break;
            }
        }
    }
}

/* Run the nodes whose phase is in `phases` (bits of 1 << ir_phase), in order. */
static inline int runner_run(graph_runner *r, unsigned phases, int64_t step)
{
    rt_context ctx = { .step = step };
    for (int32_t n = 0; n < r->g->n_nodes; n++) {
        if (!((phases >> r->g->nodes[n].phase) & 1))
            continue;
        if (rt_op_run(&r->ops[n], r->arena, &ctx)) {
            fprintf(stderr, "run: %s\n", ctx.msg);
            return -1;
        }
    }
    return 0;
}

#define RUN_FORWARD  (1u << PHASE_FORWARD)
#define RUN_BACKWARD ((1u << PHASE_FORWARD) | (1u << PHASE_BACKWARD))
#define RUN_STEP     ((1u << PHASE_FORWARD) | (1u << PHASE_BACKWARD) | (1u << PHASE_UPDATE))

#endif
