/* ir.h: the OP-DAG, fusion's one intermediate representation.
 *
 * A graph is two arrays, values (tensors) and nodes (ops), that refer to each
 * other by index only: no pointers between nodes, so a graph can be copied
 * with memcpy, serialised, and embedded in a bundle.  Names live in one
 * interned string table and are referred to by offset.
 *
 * Invariants the verifier (ir_graph_verify) checks after every pass:
 *   - nodes are stored in a topological order: every input of node n is a
 *     source value or an output of a node before n (so the graph is acyclic);
 *   - every value has exactly one producer: a node, or none for a source
 *     (role input, param or state);
 *   - value names and node names are unique, non-empty and printable;
 *   - known shapes have dims in [1, IR_DIM_MAX] and a product <= IR_NUMEL_MAX;
 *   - a placement, when there is one, is consistent (see ir_placement) and
 *     covers every node's stage annotation.
 *
 * What it deliberately is not: an execution engine.  The compiler never runs
 * a model; the runtime never sees the whole graph.
 *
 * Lifetime: ir_graph_init / ir_graph_free; ir_graph_copy makes a deep copy.
 */
#ifndef FUSION_IR_H
#define FUSION_IR_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "diag.h"
#include "op_kinds.h"

#define IR_MAX_RANK  8
#define IR_MAX_IN    8
#define IR_MAX_OUT   4
#define IR_MAX_ATTR  8                  /* rope_backward: grads, heads, base and Llama 3's four */
#define IR_DIM_MAX   ((int64_t)1 << 31) /* one dimension */
#define IR_NUMEL_MAX ((int64_t)1 << 40) /* one tensor: 4 TiB of fp32 is absurd */

typedef enum { DT_F32, DT_I32, DT_F16, DT_BF16, DT_COUNT } ir_dtype;

/* Sources (no producer): input, param, state.  Produced: activation, gradient. */
typedef enum {
    ROLE_INPUT,      /* fed by the data loader each step            */
    ROLE_PARAM,      /* trained weight, initialised from `init`      */
    ROLE_STATE,      /* persistent non-trained state (optimizer m,v) */
    ROLE_ACTIVATION, /* forward result                               */
    ROLE_GRADIENT,   /* backward result                              */
    ROLE_COUNT
} ir_role;

/* PHASE_PREFILL: an inference program's prompt chunk (the prefill pass's
 * copy of the forward), run apart from the one-token forward. */
typedef enum { PHASE_NONE, PHASE_FORWARD, PHASE_BACKWARD, PHASE_UPDATE, PHASE_PREFILL, PHASE_COUNT } ir_phase;

/* rank -1: not yet inferred (before the shapes pass).  rank 0: a scalar. */
typedef struct {
    int rank;
    int64_t dim[IR_MAX_RANK];
} ir_shape;

/* Where a value or node came from: an interned file name and a line. */
typedef struct {
    uint32_t file;
    int32_t line;
} ir_loc;

typedef enum { INIT_NONE, INIT_ZEROS, INIT_ONES, INIT_NORMAL, INIT_UNIFORM, INIT_DROPOUT, INIT_COUNT } ir_init_kind;

/* normal(std): N(0, a^2).  uniform(bound): U(-a, a).  zeros, ones: no args.
 * dropout(p): an input only (LoRA's dropout, passes/adapters.c), that the
 * runtime fills each micro-batch with 0 (probability p) or 1/(1-p) while
 * training, 1 while validating (runtime/data.h: rt_dropout_mask). */
typedef struct {
    ir_init_kind kind;
    double a;
} ir_init;

typedef struct {
    uint32_t name; /* offset into strings                       */
    ir_dtype dtype;
    ir_role role;
    ir_shape shape;
    int32_t producer; /* node index, -1 for sources                */
    int64_t offset;   /* bytes into its device's arena (memory pass); -1: not placed */
    ir_init init;     /* params and state                          */
    int frozen;       /* a param that is never trained (--freeze, LoRA's base weights):
                         no gradient, no optimizer state, no all-reduce; loaded or
                         initialised like any other                                */
    ir_loc loc;
} ir_value;

/* A param the optimizer updates: role param and not frozen. */
static inline int ir_value_trained(const ir_value *v) { return v->role == ROLE_PARAM && !v->frozen; }

typedef struct {
    attr_key key;
    int n; /* number of ints in i[] (1 for a scalar int)  */
    int64_t i[IR_MAX_RANK];
    double f; /* for float attributes                        */
} ir_attr;

typedef struct ir_node {
    ir_op op;
    uint32_t name;
    int32_t n_in, n_out, n_attr;
    int32_t in[IR_MAX_IN]; /* value indices                               */
    int32_t out[IR_MAX_OUT];
    ir_attr attr[IR_MAX_ATTR];
    ir_loc loc;
    /* annotations, filled by passes; -1 / PHASE_NONE / < 0 mean "not yet" */
    int32_t device;
    int32_t stage;
    ir_phase phase;
    double est_time;   /* seconds                                     */
    int64_t ws_offset; /* its scratch in the arena (memory pass)      */
} ir_node;

/* A hyper-parameter as resolved when the model was built (for the record). */
typedef struct {
    uint32_t name;
    int is_float;
    int64_t i;
    double f;
} ir_hyper;

/* The plan the placement passes write: the OP-DAG cut into n_stages
 * pipeline stages, each stage run by n_replicas cluster devices (data
 * parallel), over micro_batches micro-batches per step.  Nodes say which
 * stage they belong to (ir_node.stage); this says which devices run it.
 *
 *   device[s * n_replicas + r] = cluster device index of replica r of stage s
 *
 * n_stages == 0: not placed yet (the other fields are then 0 and NULL).
 * Placed: every count >= 1, n_stages * n_replicas <= IR_MAX_STAGE_DEVICES,
 * every device >= 0 and none twice, and every node's stage annotation
 * (when set) < n_stages; ir_graph_verify checks all of it.  The IR does not
 * know the cluster: that a device index names a device of it is the
 * business of whoever reads both. */
#define IR_MAX_STAGE_DEVICES 1024
typedef struct {
    int32_t n_stages;      /* 0: not placed yet                              */
    int32_t n_replicas;    /* devices per stage (the same for every stage)   */
    int32_t micro_batches; /* M                                              */
    int32_t *device;       /* [n_stages * n_replicas], owned by the graph    */
    int32_t *warmup;       /* [n_stages]: forwards a stage runs before its first
                                  backward (the schedule pass), owned by the graph;
                                  NULL: 1F1B's min(M, S - s - 1)                  */
    uint8_t *recompute;    /* [n_stages]: 1 where a stage keeps only its forward's
                                  inputs for a waiting backward and runs the forward
                                  again before it (the schedule pass), owned by the
                                  graph; NULL: no stage does                      */
    int32_t *keep;         /* [n_stages]: of its waiting micro-batches, how many a
                                  stage that recomputes keeps whole at once (their
                                  backward needs no replay; the rest keep their
                                  inputs and replay), owned by the graph; NULL: 0,
                                  every waiting micro-batch replays              */
} ir_placement;

typedef struct ir_graph {
    uint32_t name;       /* model name                                  */
    uint32_t after_pass; /* the last pass run on it ("" = none: as the frontend
                                      built it); the pass manager resumes after it   */
    uint32_t source;     /* the file it was read from (XML or text IR), for
                                      messages about nodes that have no location; not printed */
    ir_dtype precision;  /* what forward and backward tensors are stored in:
                                      DT_F32 (the default), DT_BF16 or DT_F16; set by the
                                      precision pass.  Parameters, their gradients and the
                                      optimizer state stay f32 whatever it is.          */
    int tf32;            /* 1: f32 matrix products may use TF32 tensor cores    */
    ir_value *values;
    int32_t n_values, cap_values;
    ir_node *nodes;
    int32_t n_nodes, cap_nodes;
    ir_hyper *hypers;
    int32_t n_hypers, cap_hypers;
    int32_t loss;           /* value index of the scalar loss, or -1       */
    int32_t output;         /* an inference graph's result (the decode pass: the
                               logits), or -1; a graph has a loss or an output  */
    int32_t prefill_output; /* its copy for a prompt chunk (the prefill pass), or -1 */
    ir_placement placement; /* stages -> devices (fence pass); n_stages 0: none */
    char *strings;
    size_t n_strings, cap_strings; /* NUL-separated; 0 = "" */
    void *string_index;            /* interning hash (rebuilt on copy)            */
} ir_graph;

/* ---- lifetime ---------------------------------------------------------- */
void ir_graph_init(ir_graph *g);
void ir_graph_free(ir_graph *g);
int ir_graph_copy(ir_graph *dst, const ir_graph *src); /* dst uninitialised */

/* ---- strings ------------------------------------------------------------ */
/* Same s, same offset; "" (or NULL) is always offset 0.  IR_STR_NONE when
 * memory runs out.  ir_str of an offset out of range gives "". */
#define IR_STR_NONE UINT32_MAX
uint32_t ir_intern(ir_graph *g, const char *s);
const char *ir_str(const ir_graph *g, uint32_t off);

/* ---- builder ------------------------------------------------------------ */
/* Each returns the new index, or -1 when memory runs out. */
int32_t ir_add_value(ir_graph *g, const char *name, ir_dtype dt, ir_role role, const ir_shape *shape, ir_loc loc);
int32_t ir_add_node(ir_graph *g, ir_op op, const char *name, ir_loc loc);
/* Append an input / output to node n (output also sets the value's producer). */
int ir_node_add_input(ir_graph *g, int32_t n, int32_t value);
int ir_node_add_output(ir_graph *g, int32_t n, int32_t value);
int ir_node_set_int(ir_graph *g, int32_t n, attr_key key, int64_t v);
int ir_node_set_ints(ir_graph *g, int32_t n, attr_key key, const int64_t *v, int count);
int ir_node_set_float(ir_graph *g, int32_t n, attr_key key, double v);
int ir_add_hyper_int(ir_graph *g, const char *name, int64_t v);
int ir_add_hyper_float(ir_graph *g, const char *name, double v);
/* Replace g's placement with a copy of devices[n_stages * n_replicas]
 * (see ir_placement).  Returns -1, g unchanged, when memory runs out or the
 * plan is invalid: a count < 1, more than IR_MAX_STAGE_DEVICES devices,
 * devices NULL, a device < 0 or one listed twice.  (0, 0, 0, NULL) clears
 * the placement.  Node stage annotations are not checked here (they may be
 * set after); ir_graph_verify checks them. */
/* Stage s's warm-up forwards: the placement's, or 1F1B's min(M, S - s - 1). */
int32_t ir_placement_warmup(const ir_placement *p, int32_t s);
/* Set every stage's warm-up (NULL: back to 1F1B's).  -1 (nothing changed)
 * when not placed, or a value is outside [0, M], or a stage warms up less
 * than min(M, the next stage's + 1) (it would wait for a backward that
 * waits for one of its own forwards). */
int ir_graph_set_warmup(ir_graph *g, const int32_t *warmup);
/* The micro-batches stage s has in flight at most: its warm-up + 1, at most M. */
int32_t ir_placement_in_flight(const ir_placement *p, int32_t s);
/* Does stage s recompute its forward before a waiting backward?  (0 when
 * not placed or out of range.) */
int ir_placement_recompute(const ir_placement *p, int32_t s);
/* Set every stage's flag from recompute[n_stages] (each 0 or 1; NULL, or
 * all 0: none).  -1 (nothing changed) when not placed, a flag is not 0 or
 * 1, or memory runs out. */
int ir_graph_set_recompute(ir_graph *g, const uint8_t *recompute);
/* How many waiting micro-batches stage s keeps whole while it recomputes
 * the rest (0 when it does not recompute, or replays them all). */
int32_t ir_placement_keep(const ir_placement *p, int32_t s);
/* Set every stage's count from keep[n_stages] (NULL, or all 0: none).  -1
 * (nothing changed) when not placed, a count is negative or above M, a
 * stage keeps some without recomputing, or memory runs out. */
int ir_graph_set_keep(ir_graph *g, const int32_t *keep);
int ir_graph_set_placement(ir_graph *g, int32_t n_stages, int32_t n_replicas, int32_t micro_batches,
                           const int32_t *devices);

/* ---- lookups ------------------------------------------------------------ */
const ir_attr *ir_node_attr(const ir_node *n, attr_key key); /* NULL if absent */
int64_t ir_node_int(const ir_node *n, attr_key key, int64_t fallback);
double ir_node_float(const ir_node *n, attr_key key, double fallback);
int32_t ir_find_value(const ir_graph *g, const char *name); /* -1 if absent */
/* What the frozen parameters are stored in (--frozen-dtype): f32 when
 * there are none, or none stored otherwise. */
ir_dtype ir_frozen_dtype(const ir_graph *g);
/* The file to name in a message about something at `loc`: its own file, else
 * the graph's source file, else the model name, else "<ir>". */
const char *ir_loc_file(const ir_graph *g, ir_loc loc);
static inline const char *ir_value_name(const ir_graph *g, int32_t v) { return ir_str(g, g->values[v].name); }
static inline const char *ir_node_name(const ir_graph *g, int32_t n) { return ir_str(g, g->nodes[n].name); }

/* ---- shapes, dtypes, names --------------------------------------------- */
ir_shape ir_shape_make(int rank, const int64_t *dims);
ir_shape ir_shape_unknown(void);
int ir_shape_equal(const ir_shape *a, const ir_shape *b);
/* Number of elements, or -1 if unknown or above IR_NUMEL_MAX (checked product). */
int64_t ir_shape_numel(const ir_shape *s);
int64_t ir_value_bytes(const ir_graph *g, int32_t v);
/* "[4,64,768]", "[]" or "[?]" into buf (returns buf). */
const char *ir_shape_str(const ir_shape *s, char *buf, size_t size);
size_t ir_dtype_size(ir_dtype dt);
const char *ir_dtype_name(ir_dtype dt);
int ir_dtype_parse(const char *s, ir_dtype *out); /* 0 or -1 */
const char *ir_role_name(ir_role r);
int ir_role_parse(const char *s, ir_role *out);
const char *ir_phase_name(ir_phase p);
int ir_phase_parse(const char *s, ir_phase *out);
const char *ir_init_name(ir_init_kind k);
int ir_init_parse(const char *s, ir_init_kind *out);
/* A valid value or node name: 1 to 255 bytes of [A-Za-z0-9_.:/-], not
 * starting with '-' (so it never reads as the "->" of the text form).
 * ir_name_char says whether one byte is in that class. */
int ir_name_valid(const char *s);
int ir_name_char(int c);

/* ---- verifier, printers, parser --------------------------------------- */
/* Check the invariants at the top of this file; the first violation names
 * the node or value and its source location. */
int ir_graph_verify(const ir_graph *g, struct diag *err);

/* Text form (see ir/print.c for the grammar): one source or op a line.
 * ir_graph_parse(ir_graph_print(g)) prints byte-identical.
 * ir_graph_parse initialises g itself (like ir_graph_copy's dst); text need
 * not be NUL-terminated.  It ends with ir_graph_verify; on any error g is
 * left empty (initialised, nothing to free) and err says file:line what. */
int ir_graph_print(const ir_graph *g, FILE *out);
int ir_graph_parse(const char *text, size_t len, const char *filename, ir_graph *g, struct diag *err);
int ir_graph_print_dot(const ir_graph *g, FILE *out);

#endif
