/* decode.c: the `decode` pass (pass_options.inference): a model's training
 * graph as one inference step of B sequences, T new tokens each, against
 * a key/value cache.
 *
 *   the result   the loss's cross_entropy goes, and its logits become the
 *                graph's output (ir_graph.output); the targets input, the
 *                loss and whatever only they read go with it;
 *   positions    an input `decode.pos` (B,T) i32: each new token's place in
 *                its sequence, which the runtime feeds beside the tokens;
 *                GPT-2's positions op gives way to it, and every rope
 *                rotates by it (rope's second input);
 *   the cache    every attention becomes attention_cached(q, k, v,
 *                <node>.k_cache, <node>.v_cache, decode.pos): two state
 *                tensors (B, CTX, KV·D), f32, zeros, CTX the model's `ctx`
 *                hyper-parameter; the op writes the new keys and values at
 *                their positions and attends to the rows up to each
 *                token's own.  A packed attention(qkv) (GPT-2's) gets a
 *                split into q, k, v first.
 *
 * After it nothing trains: autodiff and the optimizer leave an inference
 * graph as it is, and the later passes place and price the forward alone.
 * With T = 1 the step decodes one token a sequence; with T > 1 it takes a
 * prompt's chunk.  The graph prints `output NAME` where a training graph
 * prints `loss NAME`.
 *
 * What it deliberately is not: a place for sampling (the runtime draws
 * the next token from the output's last row) or for batching requests of
 * different lengths (each sequence's positions say where it is).
 */
#include <stdlib.h>
#include <string.h>

#include "graph_edit.h"
#include "passes.h"

#define DECODE_NAME_MAX 320

static int64_t hyper_int(const ir_graph *g, const char *name, int64_t fallback)
{
    for (int32_t i = 0; i < g->n_hypers; i++)
        if (strcmp(ir_str(g, g->hypers[i].name), name) == 0)
            return g->hypers[i].is_float ? (int64_t)g->hypers[i].f : g->hypers[i].i;
    return fallback;
}

/* Every reader of value `from` reads `to` instead. */
static void redirect_readers(ir_graph *g, int32_t from, int32_t to)
{
    for (int32_t j = 0; j < g->n_nodes; j++)
        for (int k = 0; k < g->nodes[j].n_in; k++)
            if (g->nodes[j].in[k] == from)
                g->nodes[j].in[k] = to;
}

/* Drop every node none of whose outputs is read or the output, until
 * none is left, then every value nothing makes or reads (the targets, the
 * loss, the positions op's), renumbering what stays.  0, or -1 out of memory. */
static int drop_dead(ir_graph *g)
{
    int32_t N = g->n_nodes, V = g->n_values;
    int32_t *readers = calloc((size_t)V + 1, sizeof *readers), *map = malloc(((size_t)V + 1) * sizeof *map);
    char *keep = malloc((size_t)N + 1);
    if (!readers || !map || !keep) {
        free(readers), free(map), free(keep);
        return -1;
    }
    memset(keep, 1, (size_t)N);
    for (int32_t j = 0; j < N; j++)
        for (int k = 0; k < g->nodes[j].n_in; k++)
            readers[g->nodes[j].in[k]]++;
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t j = N - 1; j >= 0; j--) {
            const ir_node *n = &g->nodes[j];
            int live = 0;
            for (int o = 0; keep[j] && o < n->n_out; o++)
                live |= readers[n->out[o]] > 0 || n->out[o] == g->output;
            if (!keep[j] || live)
                continue;
            keep[j] = 0, changed = 1;
            for (int k = 0; k < n->n_in; k++)
                readers[n->in[k]]--;
        }
    }
    /* The values that stay: read, the output, or made by a node that stays. */
    int32_t nv = 0;
    for (int32_t v = 0; v < V; v++) {
        int32_t p = g->values[v].producer;
        int stays = readers[v] > 0 || v == g->output || (p >= 0 && keep[p]);
        map[v] = stays ? nv : -1;
        if (stays)
            g->values[nv++] = g->values[v];
    }
    int32_t nn = 0;
    for (int32_t j = 0; j < N; j++) {
        if (!keep[j])
            continue;
        ir_node *n = &g->nodes[nn];
        *n = g->nodes[j];
        for (int k = 0; k < n->n_in; k++)
            n->in[k] = map[n->in[k]];
        for (int o = 0; o < n->n_out; o++) {
            n->out[o] = map[n->out[o]];
            g->values[n->out[o]].producer = nn;
        }
        nn++;
    }
    g->n_values = nv, g->n_nodes = nn;
    g->output = g->output >= 0 ? map[g->output] : -1;
    g->loss = g->loss >= 0 ? map[g->loss] : -1;
    free(readers), free(map), free(keep);
    return 0;
}

/* A new state tensor (B, CTX, width), f32 zeros: a cache. */
static int32_t new_cache(ir_graph *g, const char *node, const char *what, int64_t B, int64_t ctx, int64_t width,
                         ir_loc loc)
{
    char name[DECODE_NAME_MAX];
    snprintf(name, sizeof name, "%s.%s", node, what);
    ir_shape s = ir_shape_make(3, (int64_t[]){ B, ctx, width });
    int32_t v = ir_add_value(g, name, DT_F32, ROLE_STATE, &s, loc);
    if (v >= 0)
        g->values[v].init = (ir_init){ INIT_ZEROS, 0.0 };
    return v;
}

/* Node n, a packed attention(qkv): a split of qkv into q, k, v made now,
 * placed before it later (*split); their ids in qkv_out. */
static int split_qkv(ir_graph *g, int32_t n, int32_t *split, int32_t qkv_out[3])
{
    ir_node att = g->nodes[n];
    const ir_value *qkv = &g->values[att.in[0]];
    ir_shape part = qkv->shape;
    part.dim[2] /= 3;
    char name[DECODE_NAME_MAX];
    snprintf(name, sizeof name, "%s.qkv", ir_node_name(g, n));
    int32_t s = ir_add_node(g, OP_SPLIT, name, att.loc);
    if (s < 0 || ir_node_add_input(g, s, att.in[0]) || ir_node_set_int(g, s, ATTR_AXIS, -1))
        return -1;
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "%s.%c", ir_node_name(g, n), "qkv"[i]);
        int32_t v = ir_add_value(g, name, g->values[att.in[0]].dtype, ROLE_ACTIVATION, &part, att.loc);
        if (v < 0 || ir_node_add_output(g, s, v))
            return -1;
        qkv_out[i] = v;
    }
    g->nodes[s].phase = PHASE_FORWARD;
    *split = s;
    return 0;
}

int pass_decode(ir_graph *g, const pass_options *opt, struct diag *err)
{
    if (!opt || !opt->inference)
        return 0;
    const char *file = ir_loc_file(g, (ir_loc){ 0, 0 });
    int32_t ce = g->loss >= 0 ? g->values[g->loss].producer : -1;
    if (ce < 0 || g->nodes[ce].op != OP_CROSS_ENTROPY)
        return diag_set(err, file, 0,
                        "an inference program needs the model's cross_entropy: its logits are the result");
    int32_t logits = g->nodes[ce].in[0], idx = -1;
    for (int32_t v = 0; v < g->n_values && idx < 0; v++) /* the tokens: the first i32 (B,T) input */
        if (g->values[v].role == ROLE_INPUT && g->values[v].dtype == DT_I32 && g->values[v].shape.rank == 2)
            idx = v;
    int64_t ctx = hyper_int(g, "ctx", 0);
    if (idx < 0)
        return diag_set(err, file, 0, "an inference program needs the token ids: an i32 input of shape (batch, seq)");
    if (ctx < 1)
        return diag_set(err, file, 0,
                        "an inference program needs the model's `ctx` hyper-parameter (the cache's rows)");
    int64_t B = g->values[idx].shape.dim[0], T = g->values[idx].shape.dim[1];
    if (T > ctx)
        return diag_set(err, file, 0, "seq=%lld tokens a step, more than the cache's ctx=%lld", (long long)T,
                        (long long)ctx);
    ir_shape ps = ir_shape_make(2, (int64_t[]){ B, T });
    int32_t pos = ir_add_value(g, "decode.pos", DT_I32, ROLE_INPUT, &ps, g->values[idx].loc);
    int32_t n_old = g->n_nodes, *before = malloc(((size_t)n_old + 1) * sizeof *before), n_split = 0;
    if (pos < 0 || !before) {
        free(before);
        return diag_set(err, file, 0, "out of memory");
    }
    int rc = 0;
    for (int32_t i = 0; i < n_old && rc == 0; i++) {
        ir_node *n = &g->nodes[i];
        if (n->op == OP_POSITIONS) {
            redirect_readers(g, n->out[0], pos);
        } else if (n->op == OP_ROPE && n->n_in == 1) {
            rc = ir_node_add_input(g, i, pos);
        } else if (n->op == OP_ATTENTION) {
            int32_t qkv[3] = { n->in[0], n->n_in == 3 ? n->in[1] : -1, n->n_in == 3 ? n->in[2] : -1 }, split = -1;
            if (n->n_in == 1 && (split_qkv(g, i, &split, qkv) || (before[n_split++] = i, 0)))
                rc = -1;
            n = &g->nodes[i]; /* adding nodes may have moved the array */
            const ir_shape *k = rc == 0 ? &g->values[qkv[1]].shape : NULL;
            int32_t kc = rc == 0 ? new_cache(g, ir_node_name(g, i), "k_cache", B, ctx, k->dim[2], n->loc) : -1;
            int32_t vc = kc >= 0 ? new_cache(g, ir_node_name(g, i), "v_cache", B, ctx, k->dim[2], n->loc) : -1;
            n = &g->nodes[i];
            if (vc < 0) {
                rc = -1;
                break;
            }
            int32_t in[6] = { qkv[0], qkv[1], qkv[2], kc, vc, pos };
            n->op = OP_ATTENTION_CACHED;
            n->n_in = 0;
            for (int k2 = 0; k2 < 6 && rc == 0; k2++)
                rc = ir_node_add_input(g, i, in[k2]);
        }
    }
    if (rc == 0 && n_split > 0)
        rc = graph_place_new_nodes(g, n_old, before, 0);
    free(before);
    if (rc != 0)
        return diag_set(err, file, 0, "out of memory");
    g->output = logits;
    g->loss = -1;
    if (drop_dead(g))
        return diag_set(err, file, 0, "out of memory");
    return 0;
}
