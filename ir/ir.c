/* ir.c: the IR core (see ir.h): graph lifetime, string interning, the
 * builder, and the small helpers on shapes, dtypes, roles and names.
 *
 * Not here: the invariants (verify.c), the text form (print.c, parse.c),
 * the Graphviz form (dot.c), and anything an op means (ops.c).
 *
 * Every array grows by doubling and every size is checked for overflow; a
 * builder call that cannot get memory returns -1 and leaves the graph as it
 * was.
 */
#include "ir.h"
#include "name_map.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

/* ---- growable arrays ---------------------------------------------------- */

/* Room for one more element after `n`, in an array of capacity *cap: returns
 * the (possibly moved) array, or NULL when the size overflows or memory runs
 * out (the old array is then untouched). */
static void *grow_for_one_more(void *arr, int32_t n, int32_t *cap, size_t elem)
{
    if (n < *cap)
        return arr;
    if (n == INT32_MAX)
        return NULL;
    int64_t new_cap = *cap > 0 ? (int64_t)*cap * 2 : 16;
    if (new_cap > INT32_MAX)
        new_cap = INT32_MAX;
    size_t bytes;
    if (__builtin_mul_overflow((size_t)new_cap, elem, &bytes))
        return NULL;
    void *p = realloc(arr, bytes);
    if (!p)
        return NULL;
    *cap = (int32_t)new_cap;
    return p;
}

/* ---- lifetime ------------------------------------------------------------ */

void ir_graph_init(ir_graph *g)
{
    memset(g, 0, sizeof *g);
    g->loss = -1;
    g->output = -1;
    g->prefill_output = -1;
}

void ir_graph_free(ir_graph *g)
{
    free(g->values);
    free(g->nodes);
    free(g->hypers);
    free(g->placement.device);
    free(g->placement.warmup);
    free(g->placement.recompute);
    free(g->placement.keep);
    free(g->strings);
    name_map_free(g->string_index);
    ir_graph_init(g);
}

/* ---- strings ------------------------------------------------------------- */

/* The index maps a string to its offset. */
static int index_add(ir_graph *g, uint32_t off)
{
    if (!g->string_index) {
        g->string_index = name_map_new();
        if (!g->string_index)
            return -1;
    }
    /* Already there (a copied table holding the same text twice) is fine. */
    return name_map_add(g->string_index, g->strings + off, off) < 0 ? -1 : 0;
}

static uint32_t index_find(const ir_graph *g, const char *s)
{
    int64_t off;
    if (!g->string_index || !name_map_get(g->string_index, s, &off))
        return IR_STR_NONE;
    return (uint32_t)off;
}

uint32_t ir_intern(ir_graph *g, const char *s)
{
    if (!s || !*s)
        return 0;
    uint32_t found = index_find(g, s);
    if (found != IR_STR_NONE)
        return found;

    size_t len = strlen(s);
    size_t start = g->n_strings ? g->n_strings : 1; /* offset 0 holds "" */
    size_t need;
    if (len > INT_MAX / 2 || __builtin_add_overflow(start, len + 1, &need) || need >= IR_STR_NONE)
        return IR_STR_NONE;
    if (need > g->cap_strings) {
        /* s may point into our own buffer (a suffix of an interned string). */
        int inside = g->strings && s >= g->strings && s < g->strings + g->n_strings;
        size_t s_off = inside ? (size_t)(s - g->strings) : 0;
        size_t cap = g->cap_strings ? g->cap_strings : 1024;
        while (cap < need) {
            if (cap > SIZE_MAX / 2)
                return IR_STR_NONE;
            cap *= 2;
        }
        char *p = realloc(g->strings, cap);
        if (!p)
            return IR_STR_NONE;
        g->strings = p;
        g->cap_strings = cap;
        if (inside)
            s = g->strings + s_off;
    }
    if (g->n_strings == 0)
        g->strings[0] = '\0';
    memmove(g->strings + start, s, len + 1);
    if (index_add(g, (uint32_t)start) != 0)
        return IR_STR_NONE; /* n_strings unchanged: nothing committed */
    g->n_strings = need;
    return (uint32_t)start;
}

const char *ir_str(const ir_graph *g, uint32_t off) { return g->strings && off < g->n_strings ? g->strings + off : ""; }

/* ---- copy ---------------------------------------------------------------- */

static void *dup_array(const void *src, size_t n, size_t elem, int *failed)
{
    if (n == 0 || !src)
        return NULL;
    void *p = malloc(n * elem); /* n * elem already fits: src holds it */
    if (!p) {
        *failed = 1;
        return NULL;
    }
    return memcpy(p, src, n * elem);
}

int ir_graph_copy(ir_graph *dst, const ir_graph *src)
{
    ir_graph_init(dst);
    int failed = 0;
    dst->name = src->name;
    dst->source = src->source;
    dst->after_pass = src->after_pass;
    dst->precision = src->precision;
    dst->tf32 = src->tf32;
    dst->loss = src->loss;
    dst->values = dup_array(src->values, (size_t)src->n_values, sizeof *src->values, &failed);
    dst->nodes = dup_array(src->nodes, (size_t)src->n_nodes, sizeof *src->nodes, &failed);
    dst->hypers = dup_array(src->hypers, (size_t)src->n_hypers, sizeof *src->hypers, &failed);
    dst->strings = dup_array(src->strings, src->n_strings, 1, &failed);
    /* The placement as it is, valid or not (the verifier judges the copy as
     * it would the original); its array only when its size is one a valid
     * placement can have. */
    int64_t n_placed = (int64_t)src->placement.n_stages * src->placement.n_replicas;
    dst->placement = src->placement;
    dst->placement.device =
        src->placement.n_stages > 0 && src->placement.n_replicas > 0 && n_placed <= IR_MAX_STAGE_DEVICES
            ? dup_array(src->placement.device, (size_t)n_placed, sizeof *src->placement.device, &failed)
            : NULL;
    dst->placement.warmup =
        src->placement.warmup && src->placement.n_stages > 0 && src->placement.n_stages <= IR_MAX_STAGE_DEVICES
            ? dup_array(src->placement.warmup, (size_t)src->placement.n_stages, sizeof *src->placement.warmup, &failed)
            : NULL;
    dst->placement.recompute =
        src->placement.recompute && src->placement.n_stages > 0 && src->placement.n_stages <= IR_MAX_STAGE_DEVICES
            ? dup_array(src->placement.recompute, (size_t)src->placement.n_stages, sizeof *src->placement.recompute,
                        &failed)
            : NULL;
    dst->placement.keep =
        src->placement.keep && src->placement.n_stages > 0 && src->placement.n_stages <= IR_MAX_STAGE_DEVICES
            ? dup_array(src->placement.keep, (size_t)src->placement.n_stages, sizeof *src->placement.keep, &failed)
            : NULL;
    if (!failed) {
        dst->n_values = dst->cap_values = dst->values ? src->n_values : 0;
        dst->n_nodes = dst->cap_nodes = dst->nodes ? src->n_nodes : 0;
        dst->n_hypers = dst->cap_hypers = dst->hypers ? src->n_hypers : 0;
        dst->n_strings = dst->cap_strings = dst->strings ? src->n_strings : 0;
        /* Rebuild the index: the buffer is "" then one string after another. */
        for (size_t off = 1; off < dst->n_strings && !failed; off += strlen(dst->strings + off) + 1)
            if (index_add(dst, (uint32_t)off) != 0)
                failed = 1;
    }
    if (failed) {
        ir_graph_free(dst);
        return -1;
    }
    return 0;
}

/* ---- builder ------------------------------------------------------------- */

int32_t ir_add_value(ir_graph *g, const char *name, ir_dtype dt, ir_role role, const ir_shape *shape, ir_loc loc)
{
    uint32_t nm = ir_intern(g, name);
    if (nm == IR_STR_NONE)
        return -1;
    ir_value *arr = grow_for_one_more(g->values, g->n_values, &g->cap_values, sizeof *arr);
    if (!arr)
        return -1;
    g->values = arr;
    ir_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = nm;
    v->dtype = dt;
    v->role = role;
    v->shape = shape ? *shape : ir_shape_unknown();
    v->producer = -1;
    v->offset = -1;
    v->init.kind = INIT_NONE;
    v->loc = loc;
    return g->n_values++;
}

int32_t ir_add_node(ir_graph *g, ir_op op, const char *name, ir_loc loc)
{
    uint32_t nm = ir_intern(g, name);
    if (nm == IR_STR_NONE)
        return -1;
    ir_node *arr = grow_for_one_more(g->nodes, g->n_nodes, &g->cap_nodes, sizeof *arr);
    if (!arr)
        return -1;
    g->nodes = arr;
    ir_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->name = nm;
    n->loc = loc;
    n->device = -1;
    n->stage = -1;
    n->phase = PHASE_NONE;
    n->est_time = -1;
    n->ws_offset = -1;
    return g->n_nodes++;
}

static int node_ok(const ir_graph *g, int32_t n) { return n >= 0 && n < g->n_nodes; }
static int value_ok(const ir_graph *g, int32_t v) { return v >= 0 && v < g->n_values; }

int ir_node_add_input(ir_graph *g, int32_t n, int32_t value)
{
    if (!node_ok(g, n) || !value_ok(g, value) || g->nodes[n].n_in >= IR_MAX_IN)
        return -1;
    ir_node *node = &g->nodes[n];
    node->in[node->n_in++] = value;
    return 0;
}

int ir_node_add_output(ir_graph *g, int32_t n, int32_t value)
{
    if (!node_ok(g, n) || !value_ok(g, value) || g->nodes[n].n_out >= IR_MAX_OUT)
        return -1;
    ir_node *node = &g->nodes[n];
    node->out[node->n_out++] = value;
    g->values[value].producer = n;
    return 0;
}

/* The slot for `key` in node n: the existing one, or a new one at the end. */
static ir_attr *attr_slot(ir_graph *g, int32_t n, attr_key key)
{
    if (!node_ok(g, n))
        return NULL;
    ir_node *node = &g->nodes[n];
    for (int i = 0; i < node->n_attr && i < IR_MAX_ATTR; i++)
        if (node->attr[i].key == key)
            return &node->attr[i];
    if (node->n_attr < 0 || node->n_attr >= IR_MAX_ATTR)
        return NULL;
    ir_attr *a = &node->attr[node->n_attr++];
    memset(a, 0, sizeof *a);
    a->key = key;
    return a;
}

int ir_node_set_ints(ir_graph *g, int32_t n, attr_key key, const int64_t *v, int count)
{
    if (count < 1 || count > IR_MAX_RANK)
        return -1;
    ir_attr *a = attr_slot(g, n, key);
    if (!a)
        return -1;
    memset(a->i, 0, sizeof a->i);
    memcpy(a->i, v, (size_t)count * sizeof *v);
    a->n = count;
    a->f = 0;
    return 0;
}

int ir_node_set_int(ir_graph *g, int32_t n, attr_key key, int64_t v) { return ir_node_set_ints(g, n, key, &v, 1); }

int ir_node_set_float(ir_graph *g, int32_t n, attr_key key, double v)
{
    ir_attr *a = attr_slot(g, n, key);
    if (!a)
        return -1;
    memset(a->i, 0, sizeof a->i);
    a->n = 0;
    a->f = v;
    return 0;
}

static int add_hyper(ir_graph *g, const char *name, int is_float, int64_t i, double f)
{
    uint32_t nm = ir_intern(g, name);
    if (nm == IR_STR_NONE)
        return -1;
    ir_hyper *arr = grow_for_one_more(g->hypers, g->n_hypers, &g->cap_hypers, sizeof *arr);
    if (!arr)
        return -1;
    g->hypers = arr;
    g->hypers[g->n_hypers] = (ir_hyper){ .name = nm, .is_float = is_float, .i = i, .f = f };
    return g->n_hypers++;
}

int ir_add_hyper_int(ir_graph *g, const char *name, int64_t v) { return add_hyper(g, name, 0, v, 0); }
int ir_add_hyper_float(ir_graph *g, const char *name, double v) { return add_hyper(g, name, 1, 0, v); }

int ir_graph_set_placement(ir_graph *g, int32_t n_stages, int32_t n_replicas, int32_t micro_batches,
                           const int32_t *devices)
{
    if (n_stages == 0 && n_replicas == 0 && micro_batches == 0 && !devices) {
        free(g->placement.device);
        free(g->placement.warmup);
        free(g->placement.recompute);
        free(g->placement.keep);
        memset(&g->placement, 0, sizeof g->placement);
        return 0;
    }
    if (n_stages < 1 || n_replicas < 1 || micro_batches < 1 || !devices ||
        (int64_t)n_stages * n_replicas > IR_MAX_STAGE_DEVICES)
        return -1;
    int32_t n = n_stages * n_replicas; /* <= IR_MAX_STAGE_DEVICES: no overflow */
    for (int32_t i = 0; i < n; i++) {
        if (devices[i] < 0)
            return -1;
        for (int32_t j = 0; j < i; j++) /* at most 1024 devices: the square is cheap */
            if (devices[j] == devices[i])
                return -1;
    }
    int32_t *copy = malloc((size_t)n * sizeof *copy);
    if (!copy)
        return -1;
    memcpy(copy, devices, (size_t)n * sizeof *copy);
    free(g->placement.device);
    free(g->placement.warmup);
    free(g->placement.recompute);
    free(g->placement.keep);
    g->placement = (ir_placement){
        .n_stages = n_stages, .n_replicas = n_replicas, .micro_batches = micro_batches, .device = copy
    };
    return 0;
}

int32_t ir_placement_warmup(const ir_placement *p, int32_t s)
{
    if (p->warmup && s >= 0 && s < p->n_stages)
        return p->warmup[s];
    int32_t w = p->n_stages - s - 1;
    return w < 0 ? 0 : w < p->micro_batches ? w : p->micro_batches;
}

int ir_graph_set_warmup(ir_graph *g, const int32_t *warmup)
{
    ir_placement *p = &g->placement;
    if (p->n_stages <= 0)
        return -1;
    if (!warmup) {
        free(p->warmup);
        p->warmup = NULL;
        return 0;
    }
    for (int32_t s = 0; s < p->n_stages; s++) {
        int32_t next = s + 1 < p->n_stages ? warmup[s + 1] + 1 : 0;
        if (warmup[s] < 0 || warmup[s] > p->micro_batches ||
            warmup[s] < (next < p->micro_batches ? next : p->micro_batches))
            return -1;
    }
    int failed = 0;
    int32_t *copy = dup_array(warmup, (size_t)p->n_stages, sizeof *copy, &failed);
    if (failed)
        return -1;
    free(p->warmup);
    p->warmup = copy;
    return 0;
}

int32_t ir_placement_in_flight(const ir_placement *p, int32_t s)
{
    int32_t w = ir_placement_warmup(p, s);
    return w + 1 < p->micro_batches ? w + 1 : p->micro_batches;
}

int ir_placement_recompute(const ir_placement *p, int32_t s)
{
    return p->recompute && s >= 0 && s < p->n_stages ? p->recompute[s] : 0;
}

int ir_graph_set_recompute(ir_graph *g, const uint8_t *recompute)
{
    ir_placement *p = &g->placement;
    if (p->n_stages <= 0)
        return -1;
    int any = 0;
    for (int32_t s = 0; recompute && s < p->n_stages; s++) {
        if (recompute[s] > 1)
            return -1;
        any |= recompute[s];
    }
    int failed = 0;
    uint8_t *copy = any ? dup_array(recompute, (size_t)p->n_stages, 1, &failed) : NULL;
    if (failed)
        return -1;
    free(p->recompute);
    p->recompute = copy;
    for (int32_t s = 0; p->keep && s < p->n_stages; s++)
        if (!ir_placement_recompute(p, s)) /* a stage keeps whole only among what it replays */
            p->keep[s] = 0;
    return 0;
}

int32_t ir_placement_keep(const ir_placement *p, int32_t s)
{
    return p->keep && s >= 0 && s < p->n_stages ? p->keep[s] : 0;
}

int ir_graph_set_keep(ir_graph *g, const int32_t *keep)
{
    ir_placement *p = &g->placement;
    if (p->n_stages <= 0)
        return -1;
    int any = 0;
    for (int32_t s = 0; keep && s < p->n_stages; s++) {
        if (keep[s] < 0 || keep[s] > p->micro_batches || (keep[s] > 0 && !ir_placement_recompute(p, s)))
            return -1;
        any |= keep[s] > 0;
    }
    int failed = 0;
    int32_t *copy = any ? dup_array(keep, (size_t)p->n_stages, sizeof *copy, &failed) : NULL;
    if (failed)
        return -1;
    free(p->keep);
    p->keep = copy;
    return 0;
}

/* ---- lookups ------------------------------------------------------------- */

const ir_attr *ir_node_attr(const ir_node *n, attr_key key)
{
    for (int i = 0; i < n->n_attr && i < IR_MAX_ATTR; i++)
        if (n->attr[i].key == key)
            return &n->attr[i];
    return NULL;
}

int64_t ir_node_int(const ir_node *n, attr_key key, int64_t fallback)
{
    const ir_attr *a = ir_node_attr(n, key);
    return a && a->n >= 1 ? a->i[0] : fallback;
}

double ir_node_float(const ir_node *n, attr_key key, double fallback)
{
    const ir_attr *a = ir_node_attr(n, key);
    return a && a->n == 0 ? a->f : fallback;
}

ir_dtype ir_frozen_dtype(const ir_graph *g)
{
    for (int32_t v = 0; v < g->n_values; v++)
        if (g->values[v].role == ROLE_PARAM && g->values[v].frozen && g->values[v].dtype != DT_F32)
            return g->values[v].dtype;
    return DT_F32;
}

int32_t ir_find_value(const ir_graph *g, const char *name)
{
    if (!name)
        return -1;
    /* Names are interned: a name that is not in the table names no value. */
    uint32_t off = *name ? index_find(g, name) : 0;
    if (off == IR_STR_NONE)
        return -1;
    for (int32_t v = 0; v < g->n_values; v++)
        if (g->values[v].name == off)
            return v;
    return -1;
}

/* ---- shapes -------------------------------------------------------------- */

ir_shape ir_shape_make(int rank, const int64_t *dims)
{
    ir_shape s;
    memset(&s, 0, sizeof s);
    s.rank = rank; /* an out-of-range rank is kept, for the verifier to name */
    for (int i = 0; i < rank && i < IR_MAX_RANK; i++)
        s.dim[i] = dims[i];
    return s;
}

ir_shape ir_shape_unknown(void)
{
    ir_shape s;
    memset(&s, 0, sizeof s);
    s.rank = -1;
    return s;
}

int ir_shape_equal(const ir_shape *a, const ir_shape *b)
{
    if (a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank && i < IR_MAX_RANK; i++)
        if (a->dim[i] != b->dim[i])
            return 0;
    return 1;
}

int64_t ir_shape_numel(const ir_shape *s)
{
    if (s->rank < 0 || s->rank > IR_MAX_RANK)
        return -1;
    int64_t n = 1;
    for (int i = 0; i < s->rank; i++) {
        if (s->dim[i] < 0 || __builtin_mul_overflow(n, s->dim[i], &n))
            return -1;
    }
    return n <= IR_NUMEL_MAX ? n : -1;
}

int64_t ir_value_bytes(const ir_graph *g, int32_t v)
{
    if (!value_ok(g, v))
        return -1;
    int64_t n = ir_shape_numel(&g->values[v].shape), bytes;
    size_t size = ir_dtype_size(g->values[v].dtype);
    if (n < 0 || size == 0 || __builtin_mul_overflow(n, (int64_t)size, &bytes))
        return -1;
    return bytes;
}

const char *ir_shape_str(const ir_shape *s, char *buf, size_t size)
{
    if (size == 0)
        return buf;
    if (s->rank == -1) {
        snprintf(buf, size, "[?]");
        return buf;
    }
    if (s->rank < 0 || s->rank > IR_MAX_RANK) {
        snprintf(buf, size, "[rank %d?]", s->rank);
        return buf;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i <= s->rank; i++) {
        int k = i == s->rank ? snprintf(buf + used, size - used, "%s]", i ? "" : "[")
                             : snprintf(buf + used, size - used, "%s%lld", i ? "," : "[", (long long)s->dim[i]);
        if (k < 0 || (size_t)k >= size - used)
            break; /* truncated: buf holds what fitted */
        used += (size_t)k;
    }
    return buf;
}

/* ---- dtypes, roles, phases, inits: one name table each ------------------ */

static const char *const dtype_names[DT_COUNT] = { "f32", "i32", "f16", "bf16" };
static const size_t dtype_sizes[DT_COUNT] = { 4, 4, 2, 2 };
static const char *const role_names[ROLE_COUNT] = { "input", "param", "state", "activation", "gradient" };
static const char *const phase_names[PHASE_COUNT] = { "none", "forward", "backward", "update", "prefill" };
static const char *const init_names[INIT_COUNT] = { "none", "zeros", "ones", "normal", "uniform", "dropout" };

static int name_lookup(const char *const *names, int count, const char *s)
{
    for (int i = 0; s && i < count; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

size_t ir_dtype_size(ir_dtype dt) { return (unsigned)dt < DT_COUNT ? dtype_sizes[dt] : 0; }
const char *ir_dtype_name(ir_dtype dt) { return (unsigned)dt < DT_COUNT ? dtype_names[dt] : "?"; }
const char *ir_role_name(ir_role r) { return (unsigned)r < ROLE_COUNT ? role_names[r] : "?"; }
const char *ir_phase_name(ir_phase p) { return (unsigned)p < PHASE_COUNT ? phase_names[p] : "?"; }
const char *ir_init_name(ir_init_kind k) { return (unsigned)k < INIT_COUNT ? init_names[k] : "?"; }

int ir_dtype_parse(const char *s, ir_dtype *out)
{
    int i = name_lookup(dtype_names, DT_COUNT, s);
    if (i < 0)
        return -1;
    *out = (ir_dtype)i;
    return 0;
}

int ir_role_parse(const char *s, ir_role *out)
{
    int i = name_lookup(role_names, ROLE_COUNT, s);
    if (i < 0)
        return -1;
    *out = (ir_role)i;
    return 0;
}

int ir_phase_parse(const char *s, ir_phase *out)
{
    int i = name_lookup(phase_names, PHASE_COUNT, s);
    if (i < 0)
        return -1;
    *out = (ir_phase)i;
    return 0;
}

int ir_init_parse(const char *s, ir_init_kind *out)
{
    int i = name_lookup(init_names, INIT_COUNT, s);
    if (i < 0)
        return -1;
    *out = (ir_init_kind)i;
    return 0;
}

/* ---- names --------------------------------------------------------------- */

int ir_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == ':' || c == '/' || c == '-';
}

int ir_name_valid(const char *s)
{
    if (!s || !*s || *s == '-')
        return 0;
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= 255 || !ir_name_char((unsigned char)s[n]))
            return 0;
    return 1;
}

const char *ir_loc_file(const ir_graph *g, ir_loc loc)
{
    if (loc.file)
        return ir_str(g, loc.file);
    if (g->source)
        return ir_str(g, g->source);
    if (g->name)
        return ir_str(g, g->name);
    return "<ir>";
}
