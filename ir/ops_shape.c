/* ops_shape.c: the shape rule of every op (see ops.h for the table).
 *
 * Each rule reads its inputs' shapes and dtypes, checks that they fit
 * together, and writes the outputs'.  A mismatch fills err->msg with the
 * input names from the op's table entry and both shapes; the caller (the
 * shapes pass) adds the op's name and its XML file:line.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ops_rules.h"

static const ir_shape *in_shape(const ir_graph *g, const ir_node *n, int i) { return &g->values[n->in[i]].shape; }

static ir_dtype in_dtype(const ir_graph *g, const ir_node *n, int i) { return g->values[n->in[i]].dtype; }

/* The dtype of a float output made from input i: a model's op stores its
 * result in the graph's precision (the precision pass sets it; f32 until
 * then), whatever its parameters are; ops the passes add keep their
 * input's. */
static ir_dtype float_out(const ir_graph *g, const ir_node *n, int i)
{
    return op_table[n->op].internal ? in_dtype(g, n, i) : g->precision;
}

/* "input 'w' (h.0.attn.w, f32[768,2304])" for messages. */
static const char *describe_input(const ir_graph *g, const ir_node *n, int i, char *buf, size_t size)
{
    char s[128];
    const ir_value *v = &g->values[n->in[i]];
    /* attention's first input is qkv, or q when k and v come apart */
    const char *role = n->op == OP_ATTENTION && n->n_in == 3 && i == 0 ? "q" : op_table[n->op].in_names[i];
    snprintf(buf, size, "%s '%s' %s%s", role, ir_str(g, v->name), ir_dtype_name(v->dtype),
             ir_shape_str(&v->shape, s, sizeof s));
    return buf;
}

static int fail(struct diag *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct diag *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    diag_vset(err, NULL, 0, fmt, ap);
    va_end(ap);
    return -1;
}

static int need_rank(const ir_graph *g, const ir_node *n, int i, int min_rank, int max_rank, struct diag *err)
{
    int r = in_shape(g, n, i)->rank;
    if (r >= min_rank && r <= max_rank)
        return 0;
    char d[256];
    if (min_rank == max_rank)
        return fail(err, "%s: expected rank %d, found rank %d", describe_input(g, n, i, d, sizeof d), min_rank, r);
    return fail(err, "%s: expected rank %d to %d, found rank %d", describe_input(g, n, i, d, sizeof d), min_rank,
                max_rank, r);
}

static int need_dtype(const ir_graph *g, const ir_node *n, int i, int want_float, struct diag *err)
{
    ir_dtype dt = in_dtype(g, n, i);
    int is_float = dt == DT_F32 || dt == DT_F16 || dt == DT_BF16;
    if (is_float == want_float)
        return 0;
    char d[256];
    return fail(err, "%s: expected a %s tensor", describe_input(g, n, i, d, sizeof d),
                want_float ? "floating-point (f32, f16, bf16)" : "integer (i32)");
}

/* Input i must be exactly [dim]: a per-channel vector (bias, norm weight). */
static int need_vector(const ir_graph *g, const ir_node *n, int i, int64_t dim, struct diag *err)
{
    const ir_shape *s = in_shape(g, n, i);
    if (s->rank == 1 && s->dim[0] == dim)
        return need_dtype(g, n, i, 1, err);
    char d[256];
    return fail(err, "%s: expected [%lld]", describe_input(g, n, i, d, sizeof d), (long long)dim);
}

static int64_t last_dim(const ir_shape *s) { return s->dim[s->rank - 1]; }

int shape_same_as_first(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err))
        return -1;
    out[0] = *in_shape(g, n, 0);
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* (idx i32[..], table[V,C]) -> [..,C] */
int shape_embedding(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 0, err) || need_dtype(g, n, 1, 1, err) || need_rank(g, n, 0, 1, IR_MAX_RANK - 1, err) ||
        need_rank(g, n, 1, 2, 2, err))
        return -1;
    const ir_shape *idx = in_shape(g, n, 0), *table = in_shape(g, n, 1);
    out[0] = *idx;
    out[0].dim[out[0].rank++] = table->dim[1];
    dt[0] = float_out(g, n, 1);
    return 0;
}

/* (idx i32[..,T]) -> i32[..,T] */
int shape_positions(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 0, err) || need_rank(g, n, 0, 1, IR_MAX_RANK, err))
        return -1;
    out[0] = *in_shape(g, n, 0);
    dt[0] = DT_I32;
    return 0;
}

/* (x[..,K], w[N,K], b[N]?) -> [..,N]; transpose_w: w is [K,N] */
int shape_linear(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_dtype(g, n, 1, 1, err) || need_rank(g, n, 0, 1, IR_MAX_RANK, err) ||
        need_rank(g, n, 1, 2, 2, err))
        return -1;
    const ir_shape *x = in_shape(g, n, 0), *w = in_shape(g, n, 1);
    int tw = ir_node_int(n, ATTR_TRANSPOSE_W, 0) != 0;
    int64_t k = w->dim[tw ? 0 : 1], nout = w->dim[tw ? 1 : 0];
    if (last_dim(x) != k) {
        char a[256], b[256];
        return fail(err, "%s has %lld input features but %s expects %lld (w is %s)",
                    describe_input(g, n, 0, a, sizeof a), (long long)last_dim(x), describe_input(g, n, 1, b, sizeof b),
                    (long long)k, tw ? "[in,out]: transpose_w" : "[out,in]");
    }
    if (n->n_in == 3 && need_vector(g, n, 2, nout, err))
        return -1;
    out[0] = *x;
    out[0].dim[x->rank - 1] = nout;
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* (a[..,M,K], b[..,K,N]) -> [..,M,N]; transpose_b: b is [..,N,K].  The
 * leading (batch) dims of a and b must be equal, or b has none. */
int shape_matmul(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_dtype(g, n, 1, 1, err) || need_rank(g, n, 0, 2, IR_MAX_RANK, err) ||
        need_rank(g, n, 1, 2, IR_MAX_RANK, err))
        return -1;
    const ir_shape *a = in_shape(g, n, 0), *b = in_shape(g, n, 1);
    int tb = ir_node_int(n, ATTR_TRANSPOSE_B, 0) != 0;
    int64_t m = a->dim[a->rank - 2], k = a->dim[a->rank - 1];
    int64_t bk = b->dim[b->rank - (tb ? 1 : 2)], bn = b->dim[b->rank - (tb ? 2 : 1)];
    char da[256], db[256];
    if (k != bk)
        return fail(err, "%s and %s: inner dimensions differ (%lld vs %lld%s)", describe_input(g, n, 0, da, sizeof da),
                    describe_input(g, n, 1, db, sizeof db), (long long)k, (long long)bk, tb ? ", b transposed" : "");
    if (b->rank > 2) {
        int same = b->rank == a->rank;
        for (int i = 0; same && i < a->rank - 2; i++)
            same = a->dim[i] == b->dim[i];
        if (!same)
            return fail(err, "%s and %s: batch dimensions differ", describe_input(g, n, 0, da, sizeof da),
                        describe_input(g, n, 1, db, sizeof db));
    }
    out[0] = *a;
    out[0].dim[a->rank - 2] = m;
    out[0].dim[a->rank - 1] = bn;
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* (x[..,C], w[C], b[C]) -> [..,C] */
int shape_layernorm(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 1, IR_MAX_RANK, err))
        return -1;
    int64_t c = last_dim(in_shape(g, n, 0));
    if (need_vector(g, n, 1, c, err) || need_vector(g, n, 2, c, err))
        return -1;
    return shape_same_as_first(g, n, out, dt, err);
}

static int check_heads(const ir_graph *g, const ir_node *n, int64_t c, struct diag *err)
{
    int64_t heads = ir_node_int(n, ATTR_HEADS, 0);
    if (heads < 1 || c % heads != 0) {
        char d[256];
        return fail(err, "%s: width %lld is not divisible by heads=%lld", describe_input(g, n, 0, d, sizeof d),
                    (long long)c, (long long)heads);
    }
    return 0;
}

/* (qkv[B,T,3C]) -> [B,T,C], causal, heads | C; or (q[B,T,H*D], k[B,T,KV*D],
 * v[B,T,KV*D]) heads kv_heads -> [B,T,H*D], KV | H (grouped-query). */
int shape_attention(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 3, 3, err))
        return -1;
    const ir_shape *x = in_shape(g, n, 0);
    char d[256];
    if (n->n_in == 2)
        return fail(err, "attention takes qkv, or q, k and v: found 2 inputs");
    if (n->n_in == 1) {
        if (x->dim[2] % 3 != 0)
            return fail(err, "%s: last dimension %lld is not 3*C (q, k and v side by side)",
                        describe_input(g, n, 0, d, sizeof d), (long long)x->dim[2]);
        int64_t c = x->dim[2] / 3;
        if (ir_node_int(n, ATTR_KV_HEADS, 0) != 0 && ir_node_int(n, ATTR_KV_HEADS, 0) != ir_node_int(n, ATTR_HEADS, 0))
            return fail(err,
                        "kv_heads=%lld needs q, k and v as three inputs (a packed qkv has as many key/value "
                        "heads as query heads)",
                        (long long)ir_node_int(n, ATTR_KV_HEADS, 0));
        if (check_heads(g, n, c, err))
            return -1;
        out[0] = *x;
        out[0].dim[2] = c;
        dt[0] = float_out(g, n, 0);
        return 0;
    }
    int64_t heads = ir_node_int(n, ATTR_HEADS, 0), kv = ir_node_int(n, ATTR_KV_HEADS, 0);
    if (kv == 0)
        kv = heads;
    if (check_heads(g, n, x->dim[2], err))
        return -1;
    if (kv < 1 || heads % kv != 0)
        return fail(err,
                    "kv_heads=%lld does not divide heads=%lld (each key/value head serves heads/kv_heads "
                    "query heads)",
                    (long long)kv, (long long)heads);
    int64_t D = x->dim[2] / heads;
    for (int i = 1; i < 3; i++) {
        if (need_dtype(g, n, i, 1, err) || need_rank(g, n, i, 3, 3, err))
            return -1;
        const ir_shape *s = in_shape(g, n, i);
        if (s->dim[0] != x->dim[0] || s->dim[1] != x->dim[1] || s->dim[2] != kv * D) {
            char a[256];
            return fail(err, "%s: expected [%lld,%lld,%lld] (kv_heads=%lld times the head dimension %lld of %s)",
                        describe_input(g, n, i, d, sizeof d), (long long)x->dim[0], (long long)x->dim[1],
                        (long long)(kv * D), (long long)kv, (long long)D, describe_input(g, n, 0, a, sizeof a));
        }
    }
    out[0] = *x;
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* (x[..,C], w[C]) -> [..,C] */
int shape_rmsnorm(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 1, IR_MAX_RANK, err))
        return -1;
    if (need_vector(g, n, 1, last_dim(in_shape(g, n, 0)), err))
        return -1;
    return shape_same_as_first(g, n, out, dt, err);
}

/* Input i: the positions of x's tokens, i32 of x's shape less its last dim. */
static int need_positions(const ir_graph *g, const ir_node *n, int i, const ir_shape *x, struct diag *err)
{
    const ir_shape *p = in_shape(g, n, i);
    int same = p->rank == x->rank - 1;
    for (int k = 0; same && k < p->rank; k++)
        same = p->dim[k] == x->dim[k];
    char d[256], want[128];
    ir_shape w = *x;
    w.rank--;
    if (need_dtype(g, n, i, 0, err))
        return -1;
    if (!same)
        return fail(err, "%s: expected i32%s, a position for each token", describe_input(g, n, i, d, sizeof d),
                    ir_shape_str(&w, want, sizeof want));
    return 0;
}

/* (x[..,T,C][, pos i32[..,T]]) heads -> [..,T,C]: C = heads*D with D even (pairs i, i+D/2). */
int shape_rope(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 2, IR_MAX_RANK, err))
        return -1;
    int64_t c = last_dim(in_shape(g, n, 0));
    if (check_heads(g, n, c, err))
        return -1;
    int64_t D = c / ir_node_int(n, ATTR_HEADS, 1);
    char d[256];
    if (D % 2 != 0)
        return fail(err,
                    "%s: head dimension %lld (width %lld / heads=%lld) is odd; rotary embedding rotates "
                    "its two halves as pairs",
                    describe_input(g, n, 0, d, sizeof d), (long long)D, (long long)c,
                    (long long)ir_node_int(n, ATTR_HEADS, 1));
    if (!(ir_node_float(n, ATTR_BASE, 10000.0) > 1.0))
        return fail(err, "base=%g: the rotary base must be greater than 1", ir_node_float(n, ATTR_BASE, 10000.0));
    double factor = ir_node_float(n, ATTR_SCALE_FACTOR, 0.0), low = ir_node_float(n, ATTR_LOW_FREQ, 1.0),
           high = ir_node_float(n, ATTR_HIGH_FREQ, 4.0), old_ctx = ir_node_float(n, ATTR_OLD_CTX, 8192.0);
    if (!(factor >= 0.0))
        return fail(err, "scale_factor=%g: Llama 3's rope scaling factor must be positive (0: no scaling)", factor);
    if (factor > 0.0 && !(low > 0.0 && high > low && old_ctx > 0.0))
        return fail(err,
                    "low_freq=%g high_freq=%g old_ctx=%g: Llama 3's rope scaling needs 0 < low_freq < high_freq "
                    "and old_ctx > 0",
                    low, high, old_ctx);
    if (n->n_in == 2 && need_positions(g, n, 1, in_shape(g, n, 0), err))
        return -1;
    out[0] = *in_shape(g, n, 0);
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* (q[B,T,H*D], k[B,T,KV*D], v[B,T,KV*D], k_cache[B,CTX,KV*D],
 * v_cache[B,CTX,KV*D], pos i32[B,T]) heads kv_heads -> [B,T,H*D]; the
 * caches f32 (the kernel writes them as it reads them). */
int shape_attention_cached(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    const ir_shape *q = in_shape(g, n, 0);
    char d[256], a[256];
    for (int i = 0; i < 5; i++)
        if (need_dtype(g, n, i, 1, err) || need_rank(g, n, i, 3, 3, err))
            return -1;
    int64_t heads = ir_node_int(n, ATTR_HEADS, 0), kv = ir_node_int(n, ATTR_KV_HEADS, 0);
    kv = kv ? kv : heads;
    if (check_heads(g, n, q->dim[2], err))
        return -1;
    if (kv < 1 || heads % kv != 0)
        return fail(err, "kv_heads=%lld does not divide heads=%lld", (long long)kv, (long long)heads);
    int64_t D = q->dim[2] / heads, ctx = in_shape(g, n, 3)->dim[1];
    for (int i = 1; i < 5; i++) {
        const ir_shape *s = in_shape(g, n, i);
        int64_t rows = i < 3 ? q->dim[1] : ctx;
        if (s->dim[0] != q->dim[0] || s->dim[1] != rows || s->dim[2] != kv * D)
            return fail(err, "%s: expected [%lld,%lld,%lld] (kv_heads=%lld times the head dimension %lld of %s)",
                        describe_input(g, n, i, d, sizeof d), (long long)q->dim[0], (long long)rows,
                        (long long)(kv * D), (long long)kv, (long long)D, describe_input(g, n, 0, a, sizeof a));
        if (i >= 3 && g->values[n->in[i]].dtype != DT_F32)
            return fail(err, "%s: a cache is f32", describe_input(g, n, i, d, sizeof d));
    }
    if (need_positions(g, n, 5, q, err))
        return -1;
    out[0] = *q;
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* The axis attribute of split or concat for rank r, from the end when
 * negative; -1 (and a message) when it is not an axis of x. */
static int resolve_axis(const ir_graph *g, const ir_node *n, int rank, struct diag *err)
{
    int64_t axis = ir_node_int(n, ATTR_AXIS, -1), at = axis < 0 ? axis + rank : axis;
    if (at < 0 || at >= rank) {
        char d[256];
        fail(err, "axis=%lld is not an axis of %s (rank %d)", (long long)axis, describe_input(g, n, 0, d, sizeof d),
             rank);
        return -1;
    }
    return (int)at;
}

/* (x) axis -> n equal parts along axis, n the outputs named (torch.chunk). */
int shape_split(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 1, IR_MAX_RANK, err))
        return -1;
    const ir_shape *x = in_shape(g, n, 0);
    int axis = resolve_axis(g, n, x->rank, err);
    if (axis < 0)
        return -1;
    if (x->dim[axis] % n->n_out != 0) {
        char d[256];
        return fail(err, "%s: axis %d's size %lld does not split into %d equal parts",
                    describe_input(g, n, 0, d, sizeof d), axis, (long long)x->dim[axis], n->n_out);
    }
    for (int i = 0; i < n->n_out; i++) {
        out[i] = *x;
        out[i].dim[axis] = x->dim[axis] / n->n_out;
        dt[i] = float_out(g, n, 0);
    }
    return 0;
}

/* (a, b, ...) axis -> one tensor: equal shapes but along axis, equal dtypes. */
int shape_concat(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 1, IR_MAX_RANK, err))
        return -1;
    const ir_shape *a = in_shape(g, n, 0);
    int axis = resolve_axis(g, n, a->rank, err);
    if (axis < 0)
        return -1;
    out[0] = *a;
    for (int i = 1; i < n->n_in; i++) {
        const ir_shape *b = in_shape(g, n, i);
        int same = b->rank == a->rank && in_dtype(g, n, i) == in_dtype(g, n, 0);
        for (int k = 0; same && k < a->rank; k++)
            same = k == axis || a->dim[k] == b->dim[k];
        if (!same) {
            char da[256], db[256];
            return fail(err, "%s and %s: expected equal shapes but along axis %d, and equal dtypes",
                        describe_input(g, n, 0, da, sizeof da), describe_input(g, n, i, db, sizeof db), axis);
        }
        out[0].dim[axis] += b->dim[axis];
    }
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* (qkv[B,T,3C]) -> q, k, v each [B,H,T,C/H] */
int shape_qkv_split(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    ir_shape merged;
    ir_dtype mdt;
    if (shape_attention(g, n, &merged, &mdt, err))
        return -1;
    int64_t heads = ir_node_int(n, ATTR_HEADS, 1);
    int64_t dims[4] = { merged.dim[0], heads, merged.dim[1], merged.dim[2] / heads };
    for (int i = 0; i < 3; i++) {
        out[i] = ir_shape_make(4, dims);
        dt[i] = mdt;
    }
    return 0;
}

/* (y[B,H,T,D]) -> [B,T,H*D] */
int shape_merge_heads(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 4, 4, err))
        return -1;
    const ir_shape *y = in_shape(g, n, 0);
    int64_t dims[3] = { y->dim[0], y->dim[2], y->dim[1] * y->dim[3] };
    out[0] = ir_shape_make(3, dims);
    dt[0] = float_out(g, n, 0);
    return 0;
}

int shape_add(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_dtype(g, n, 1, 1, err))
        return -1;
    if (!ir_shape_equal(in_shape(g, n, 0), in_shape(g, n, 1)) || in_dtype(g, n, 0) != in_dtype(g, n, 1)) {
        char a[256], b[256];
        return fail(err, "%s and %s: expected equal shapes and dtypes", describe_input(g, n, 0, a, sizeof a),
                    describe_input(g, n, 1, b, sizeof b));
    }
    return shape_same_as_first(g, n, out, dt, err);
}

/* (logits[..,V], targets i32[..]) -> f32[] (mean over all positions) */
int shape_cross_entropy(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_dtype(g, n, 1, 0, err) || need_rank(g, n, 0, 2, IR_MAX_RANK, err))
        return -1;
    const ir_shape *logits = in_shape(g, n, 0), *targets = in_shape(g, n, 1);
    int same = targets->rank == logits->rank - 1;
    for (int i = 0; same && i < targets->rank; i++)
        same = targets->dim[i] == logits->dim[i];
    if (!same) {
        char a[256], b[256];
        return fail(err, "%s must have the shape of %s without its last (class) dimension",
                    describe_input(g, n, 1, b, sizeof b), describe_input(g, n, 0, a, sizeof a));
    }
    out[0] = ir_shape_make(0, NULL);
    dt[0] = DT_F32;
    return 0;
}

/* Output size of a sliding window; fills err when the window does not fit. */
static int window_out(const ir_graph *g, const ir_node *n, int64_t in, int64_t k, int64_t stride, int64_t pad,
                      int64_t *out, struct diag *err)
{
    char d[256];
    if (k < 1 || stride < 1 || pad < 0 || pad > k || k > IR_DIM_MAX || stride > IR_DIM_MAX)
        return fail(err, "%s: bad window (kernel %lld, stride %lld, pad %lld)", describe_input(g, n, 0, d, sizeof d),
                    (long long)k, (long long)stride, (long long)pad);
    int64_t span = in + 2 * pad - k;
    if (span < 0)
        return fail(err, "%s: a %lld-wide window does not fit in %lld (pad %lld)", describe_input(g, n, 0, d, sizeof d),
                    (long long)k, (long long)in, (long long)pad);
    *out = span / stride + 1;
    return 0;
}

/* (x[N,C,H,W], w[OC,C,KH,KW], b[OC]?) -> [N,OC,OH,OW] */
int shape_conv2d(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_dtype(g, n, 1, 1, err) || need_rank(g, n, 0, 4, 4, err) ||
        need_rank(g, n, 1, 4, 4, err))
        return -1;
    const ir_shape *x = in_shape(g, n, 0), *w = in_shape(g, n, 1);
    if (x->dim[1] != w->dim[1]) {
        char a[256], b[256];
        return fail(err, "%s has %lld channels but %s expects %lld (w is [out,in,kh,kw])",
                    describe_input(g, n, 0, a, sizeof a), (long long)x->dim[1], describe_input(g, n, 1, b, sizeof b),
                    (long long)w->dim[1]);
    }
    if (n->n_in == 3 && need_vector(g, n, 2, w->dim[0], err))
        return -1;
    int64_t stride = ir_node_int(n, ATTR_STRIDE, 1), pad = ir_node_int(n, ATTR_PAD, 0), oh, ow;
    if (window_out(g, n, x->dim[2], w->dim[2], stride, pad, &oh, err) ||
        window_out(g, n, x->dim[3], w->dim[3], stride, pad, &ow, err))
        return -1;
    int64_t dims[4] = { x->dim[0], w->dim[0], oh, ow };
    out[0] = ir_shape_make(4, dims);
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* (x[N,C,H,W], w[C], b[C]) -> [N,C,H,W] */
int shape_batchnorm(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 2, 4, err))
        return -1;
    int64_t c = in_shape(g, n, 0)->dim[1];
    if (need_vector(g, n, 1, c, err) || need_vector(g, n, 2, c, err))
        return -1;
    if (n->n_in == 4)
        return fail(err, "batchnorm: a running mean without a running variance (give both, or neither)");
    for (int i = 3; i < n->n_in; i++) { /* updated in place by f32 kernels */
        char d[256];
        if (need_vector(g, n, i, c, err))
            return -1;
        if (in_dtype(g, n, i) != DT_F32)
            return fail(err, "%s: expected f32 (a running statistic)", describe_input(g, n, i, d, sizeof d));
        if (g->values[n->in[i]].role != ROLE_STATE)
            return fail(err, "%s: expected state (a running statistic the forward updates), not %s",
                        describe_input(g, n, i, d, sizeof d), ir_role_name(g->values[n->in[i]].role));
    }
    return shape_same_as_first(g, n, out, dt, err);
}

/* (x[N,C,H,W]) kernel, stride (default kernel), pad -> [N,C,OH,OW] */
int shape_maxpool(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 4, 4, err))
        return -1;
    const ir_shape *x = in_shape(g, n, 0);
    int64_t k = ir_node_int(n, ATTR_KERNEL, 0), stride = ir_node_int(n, ATTR_STRIDE, 0);
    int64_t pad = ir_node_int(n, ATTR_PAD, 0), oh, ow;
    if (stride == 0)
        stride = k;
    if (pad > k / 2) {
        char d[256];
        return fail(err, "%s: pad %lld is more than half the kernel %lld (padding counts as -inf)",
                    describe_input(g, n, 0, d, sizeof d), (long long)pad, (long long)k);
    }
    if (window_out(g, n, x->dim[2], k, stride, pad, &oh, err) || window_out(g, n, x->dim[3], k, stride, pad, &ow, err))
        return -1;
    int64_t dims[4] = { x->dim[0], x->dim[1], oh, ow };
    out[0] = ir_shape_make(4, dims);
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* [N,C,H,W] -> [N,C] */
int shape_avgpool_global(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_dtype(g, n, 0, 1, err) || need_rank(g, n, 0, 4, 4, err))
        return -1;
    const ir_shape *x = in_shape(g, n, 0);
    int64_t dims[2] = { x->dim[0], x->dim[1] };
    out[0] = ir_shape_make(2, dims);
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* [N,...] -> [N,prod(...)] */
int shape_flatten(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    if (need_rank(g, n, 0, 1, IR_MAX_RANK, err))
        return -1;
    const ir_shape *x = in_shape(g, n, 0);
    int64_t rest = 1;
    for (int i = 1; i < x->rank; i++)
        rest *= x->dim[i]; /* bounded: the input's own product passed the verifier */
    int64_t dims[2] = { x->dim[0], rest };
    out[0] = ir_shape_make(2, dims);
    dt[0] = float_out(g, n, 0);
    return 0;
}

/* Backward ops and fill: the autodiff pass gives every output its shape
 * (a gradient has the shape of what it is the gradient of); the rule only
 * checks that it did. */
int shape_given(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    for (int i = 0; i < n->n_out; i++) {
        const ir_value *v = &g->values[n->out[i]];
        if (v->shape.rank < 0)
            return fail(err, "output '%s' has no shape: the pass that made this op must give it one",
                        ir_str(g, v->name));
        out[i] = v->shape;
        dt[i] = v->dtype;
    }
    return 0;
}

/* Optimizer ops: every output is an f32 scalar (a rate, a sum, a scale). */
int shape_scalar(const ir_graph *g, const ir_node *n, ir_shape out[], ir_dtype dt[], struct diag *err)
{
    for (int i = 0; i < n->n_out; i++) {
        out[i] = ir_shape_make(0, NULL);
        dt[i] = DT_F32;
    }
    return 0;
}
