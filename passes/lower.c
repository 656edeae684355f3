/* lower.c: IR node -> rt_op (see lower.h). */
#include "lower.h"

#include <string.h>

#include "../ir/ops.h"
#include "../runtime/shard.h"

static void lower_tensor(const ir_graph *g, int32_t v, const int64_t *value_offset, rt_tensor *t)
{
    const ir_value *val = &g->values[v];
    memset(t, 0, sizeof *t);
    t->rank = val->shape.rank;
    t->dtype = (int32_t)val->dtype;
    for (int i = 0; i < val->shape.rank; i++)
        t->dim[i] = val->shape.dim[i];
    t->offset = value_offset[v];
}

int lower_node(const ir_graph *g, int32_t n, const int64_t *value_offset, int64_t ws_offset, rt_op *op,
               struct diag *err)
{
    const ir_node *node = &g->nodes[n];
    const op_def *def = &op_table[node->op];
    memset(op, 0, sizeof *op);
    op->op = node->op;
    op->n_in = node->n_in;
    op->n_out = node->n_out;
    op->ws_offset = ws_offset;
    snprintf(op->name, sizeof op->name, "%s", ir_node_name(g, n));
    op->line = node->loc.line;
    for (int i = 0; i < node->n_in; i++) {
        lower_tensor(g, node->in[i], value_offset, &op->in[i]);
        if (op->in[i].rank < 0)
            return diag_set(err, ir_loc_file(g, node->loc), node->loc.line, "op '%s' (%s): input %d has no shape",
                            op->name, def->name, i);
    }
    for (int i = 0; i < node->n_out; i++)
        lower_tensor(g, node->out[i], value_offset, &op->out[i]);
    for (int k = 0; k < def->n_attr_specs; k++) {
        const attr_spec *s = &def->attr_specs[k];
        op->ints[s->key] = s->default_int;
        op->floats[s->key] = s->default_float;
    }
    for (int k = 0; k < node->n_attr; k++) {
        const ir_attr *a = &node->attr[k];
        if (attr_key_type(a->key) == ATTR_INT)
            op->ints[a->key] = a->i[0];
        else
            op->floats[a->key] = a->f;
    }
    return 0;
}

/* t (f32, numel n) narrowed to elements [lo, lo + k). */
static void narrow(rt_tensor *t, int64_t lo, int64_t k)
{
    int keep_matrix = t->rank >= 2;
    t->offset += lo * (int64_t)sizeof(float);
    memset(t->dim, 0, sizeof t->dim);
    t->rank = keep_matrix ? 2 : 1;
    t->dim[0] = keep_matrix ? 1 : k;
    t->dim[keep_matrix] = k;
}

void lower_for_replica(rt_op *op, int32_t replica, int32_t R)
{
    if (op->op == OP_ALLGATHER && op->n_in == 1) {
        op->n_out = 1;
        op->out[0] = op->in[0];
        return;
    }
    if (!op->ints[ATTR_SHARD] || R < 2 || (op->op != OP_SUM_SQUARES && op->op != OP_ADAMW))
        return;
    int64_t n = rt_tensor_numel(&op->in[0]);
    int32_t q = shard_piece_of(replica, R);
    int64_t lo = shard_piece_lo(n, q, R), k = shard_piece_size(n, q, R);
    narrow(&op->in[0], lo, k);
    if (op->op == OP_ADAMW) {
        narrow(&op->in[1], lo, k);
        narrow(&op->in[2], 0, k); /* the moments hold the piece alone */
        narrow(&op->in[3], 0, k);
    }
}
