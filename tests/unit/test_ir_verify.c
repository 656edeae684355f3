/* test_ir_verify.c: ir_graph_verify, one test per rule, and the builder
 * helpers it relies on (interning, lookups, shapes, names).
 *
 * Each rule test starts from a small valid graph, breaks exactly one
 * invariant, and checks that verify fails with the expected words in the
 * message and the offender's source location in file:line.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ir.h"
#include "ops.h"

#define SHAPE(...) \
    ir_shape_make((int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), (int64_t[]){ __VA_ARGS__ })

/* The valid graph every rule test breaks:
 *   input x f32[2,3] (m.xml:1), param w f32[4,3] (m.xml:2), param b f32[4],
 *   input t i32[2]
 *   node fc = linear(x, w, b) -> y f32[2,4]        (m.xml:10)
 *   node ce = cross_entropy(y, t) -> loss f32[]    (m.xml:11)
 *   loss loss                                                           */
typedef struct {
    int32_t x, w, b, t, y, loss, fc, ce;
} small;

static int32_t add(ir_graph *g, const char *name, ir_dtype dt, ir_role role, ir_shape s, ir_loc loc)
{
    return ir_add_value(g, name, dt, role, &s, loc);
}

static small build_small(ir_graph *g)
{
    small s;
    ir_graph_init(g);
    g->name = ir_intern(g, "small");
    uint32_t file = ir_intern(g, "m.xml");
    s.x = add(g, "x", DT_F32, ROLE_INPUT, SHAPE(2, 3), (ir_loc){ file, 1 });
    s.w = add(g, "w", DT_F32, ROLE_PARAM, SHAPE(4, 3), (ir_loc){ file, 2 });
    s.b = add(g, "b", DT_F32, ROLE_PARAM, SHAPE(4), (ir_loc){ file, 3 });
    s.t = add(g, "t", DT_I32, ROLE_INPUT, SHAPE(2), (ir_loc){ file, 4 });
    s.fc = ir_add_node(g, OP_LINEAR, "fc", (ir_loc){ file, 10 });
    ir_node_add_input(g, s.fc, s.x);
    ir_node_add_input(g, s.fc, s.w);
    ir_node_add_input(g, s.fc, s.b);
    s.y = add(g, "y", DT_F32, ROLE_ACTIVATION, SHAPE(2, 4), (ir_loc){ file, 10 });
    ir_node_add_output(g, s.fc, s.y);
    s.ce = ir_add_node(g, OP_CROSS_ENTROPY, "ce", (ir_loc){ file, 11 });
    ir_node_add_input(g, s.ce, s.y);
    ir_node_add_input(g, s.ce, s.t);
    s.loss = add(g, "loss", DT_F32, ROLE_ACTIVATION, ir_shape_make(0, NULL), (ir_loc){ file, 11 });
    ir_node_add_output(g, s.ce, s.loss);
    g->loss = s.loss;
    return s;
}

/* verify must fail with `needle` in the message, at file:line. */
static void expect_rejected(ir_graph *g, const char *needle, const char *file, int line, const char *test)
{
    int before = check_failures;
    struct diag err = { 0 };
    CHECK_INT(-1, ir_graph_verify(g, &err));
    CHECK_CONTAINS(err.msg, needle);
    CHECK_STR(file, err.file);
    CHECK_INT(line, err.line);
    if (check_failures > before)
        fprintf(stderr, "  in %s\n", test);
    ir_graph_free(g);
}
#define REJECTED(g, needle, file, line) expect_rejected(g, needle, file, line, __func__)

static void test_verify_accepts_valid_graph(void)
{
    ir_graph g;
    build_small(&g);
    struct diag err = { 0 };
    CHECK_INT(0, ir_graph_verify(&g, &err));
    if (err.msg[0])
        fprintf(stderr, "  unexpected: %s:%d: %s\n", err.file, err.line, err.msg);
    ir_graph_free(&g);
    ir_graph_init(&g); /* the empty graph is valid too */
    CHECK_INT(0, ir_graph_verify(&g, &err));
}

static void test_verify_accepts_node_and_value_sharing_a_name(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.nodes[s.fc].name = ir_intern(&g, "y");
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    ir_graph_free(&g);
}

static void test_verify_rejects_invalid_value_name(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.values[s.w].name = ir_intern(&g, "w 1");
    REJECTED(&g, "value #1: name 'w 1' is not valid", "m.xml", 2);
    s = build_small(&g);
    g.values[s.w].name = 0;
    REJECTED(&g, "name '' is not valid", "m.xml", 2);
}

static void test_verify_rejects_invalid_node_name(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.nodes[s.ce].name = ir_intern(&g, "-ce");
    REJECTED(&g, "node #1: name '-ce' is not valid", "m.xml", 11);
}

static void test_verify_rejects_duplicate_value_name(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.values[s.t].name = g.values[s.x].name;
    REJECTED(&g, "value 'x' is defined twice (values #0 and #3)", "m.xml", 4);
}

static void test_verify_rejects_duplicate_node_name(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.nodes[s.ce].name = g.nodes[s.fc].name;
    REJECTED(&g, "node 'fc' is defined twice (nodes #0 and #1)", "m.xml", 11);
}

static void test_verify_rejects_op_out_of_range(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.nodes[s.ce].op = OP_COUNT;
    char expected[64];
    snprintf(expected, sizeof expected, "node 'ce': op %d is out of range", (int)OP_COUNT);
    REJECTED(&g, expected, "m.xml", 11);
}

static void test_verify_rejects_wrong_input_count(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.nodes[s.fc].n_in = 1;
    REJECTED(&g, "node 'fc' (linear): 1 inputs, expected 2 to 3", "m.xml", 10);
    s = build_small(&g);
    ir_node_add_input(&g, s.ce, s.x);
    REJECTED(&g, "node 'ce' (cross_entropy): 3 inputs, expected 2", "m.xml", 11);
}

static void test_verify_rejects_wrong_output_count(void)
{
    ir_graph g;
    small s = build_small(&g);
    ir_node_add_output(&g, s.ce, add(&g, "extra", DT_F32, ROLE_ACTIVATION, SHAPE(1), (ir_loc){ 0, 0 }));
    REJECTED(&g, "node 'ce' (cross_entropy): 2 outputs, expected 1", "m.xml", 11);
}

static void test_verify_rejects_value_index_out_of_range(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.nodes[s.fc].in[1] = 99;
    REJECTED(&g, "node 'fc' (linear): input 1 is value #99, out of range", "m.xml", 10);
    s = build_small(&g);
    g.nodes[s.ce].out[0] = -5;
    REJECTED(&g, "node 'ce' (cross_entropy): output 0 is value #-5, out of range", "m.xml", 11);
}

static void test_verify_rejects_attribute_the_op_does_not_take(void)
{
    ir_graph g;
    small s = build_small(&g);
    ir_node_set_float(&g, s.fc, ATTR_EPS, 1e-5);
    REJECTED(&g, "node 'fc' (linear): attribute 'eps' is not one linear takes", "m.xml", 10);
    s = build_small(&g);
    g.nodes[s.fc].n_attr = 1;
    g.nodes[s.fc].attr[0].key = ATTR_KEY_COUNT;
    char expected[64];
    snprintf(expected, sizeof expected, "attribute 0 has key %d, out of range", (int)ATTR_KEY_COUNT);
    REJECTED(&g, expected, "m.xml", 10);
}

static void test_verify_rejects_attribute_of_wrong_type(void)
{
    ir_graph g;
    build_small(&g);
    int32_t n = ir_add_node(&g, OP_ATTENTION, "att", (ir_loc){ 0, 0 });
    ir_node_add_input(&g, n, 4);
    ir_node_add_output(&g, n, add(&g, "att.out", DT_F32, ROLE_ACTIVATION, SHAPE(2, 4), (ir_loc){ 0, 0 }));
    ir_node_set_float(&g, n, ATTR_HEADS, 2.0);
    REJECTED(&g, "node 'att' (attention): attribute 'heads' is an integer attribute but holds 0 integers", "small",
             0); /* no location: the model name */
    build_small(&g);
    n = ir_add_node(&g, OP_LAYERNORM, "ln", (ir_loc){ 0, 0 });
    for (int i = 0; i < 3; i++)
        ir_node_add_input(&g, n, 4);
    ir_node_add_output(&g, n, add(&g, "ln.out", DT_F32, ROLE_ACTIVATION, SHAPE(2, 4), (ir_loc){ 0, 0 }));
    ir_node_set_int(&g, n, ATTR_EPS, 1);
    REJECTED(&g, "node 'ln' (layernorm): attribute 'eps' is a float attribute but holds 1 integers", "small", 0);
}

static void test_verify_rejects_missing_required_attribute(void)
{
    ir_graph g;
    build_small(&g);
    int32_t n = ir_add_node(&g, OP_QKV_SPLIT, "split", (ir_loc){ ir_intern(&g, "m.xml"), 20 });
    ir_node_add_input(&g, n, 4);
    for (int i = 0; i < 3; i++) {
        const char *name[] = { "q", "k", "v" };
        ir_node_add_output(&g, n, add(&g, name[i], DT_F32, ROLE_ACTIVATION, SHAPE(1), (ir_loc){ 0, 0 }));
    }
    REJECTED(&g, "node 'split' (qkv_split): required attribute 'heads' is missing", "m.xml", 20);
}

static void test_verify_rejects_duplicate_attribute(void)
{
    ir_graph g;
    small s = build_small(&g);
    int32_t n = ir_add_node(&g, OP_MATMUL, "mm", (ir_loc){ 0, 0 });
    ir_node_add_input(&g, n, s.y);
    ir_node_add_input(&g, n, s.y);
    ir_node_add_output(&g, n, add(&g, "mm.out", DT_F32, ROLE_ACTIVATION, SHAPE(2, 2), (ir_loc){ 0, 0 }));
    ir_node_set_float(&g, n, ATTR_SCALE, 0.5);
    g.nodes[n].attr[1] = g.nodes[n].attr[0];
    g.nodes[n].n_attr = 2;
    REJECTED(&g, "node 'mm' (matmul): attribute 'scale' is given twice", "small", 0);
}

static void test_verify_rejects_output_of_two_nodes(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.nodes[s.ce].out[0] = s.y;
    REJECTED(&g, "node 'ce' (cross_entropy): output 0 'y' is also an output of node 'fc'", "m.xml", 11);
}

static void test_verify_rejects_producer_not_matching_outputs(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.values[s.loss].producer = s.fc; /* ce lists it, the value names fc */
    REJECTED(&g, "node 'ce' (cross_entropy): output 0 'loss' records producer 0, expected 1", "m.xml", 11);
    s = build_small(&g);
    int32_t orphan = add(&g, "orphan", DT_F32, ROLE_ACTIVATION, SHAPE(1), (ir_loc){ 0, 7 });
    g.values[orphan].producer = s.fc; /* claims fc, which does not list it */
    REJECTED(&g, "activation 'orphan' records producer 'fc', but that node does not list it", "small", 7);
    s = build_small(&g);
    g.values[s.y].producer = 42;
    REJECTED(&g, "value 'y': producer 42 is not a node (the graph has 2)", "m.xml", 10);
}

static void test_verify_rejects_activation_without_producer(void)
{
    ir_graph g;
    build_small(&g);
    add(&g, "dangling", DT_F32, ROLE_GRADIENT, SHAPE(1), (ir_loc){ ir_intern(&g, "m.xml"), 30 });
    REJECTED(&g, "gradient 'dangling' has no producer; only input, param and state values are sources", "m.xml", 30);
}

static void test_verify_rejects_produced_param(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.values[s.y].role = ROLE_PARAM;
    REJECTED(&g, "param 'y' is produced by node 'fc'; input, param and state values must not be produced", "m.xml", 10);
}

static void test_verify_rejects_use_before_definition(void)
{
    ir_graph g;
    small s = build_small(&g);
    ir_node tmp = g.nodes[s.fc]; /* swap the two nodes: ce now reads y before fc makes it */
    g.nodes[s.fc] = g.nodes[s.ce];
    g.nodes[s.ce] = tmp;
    g.values[s.y].producer = 1;
    g.values[s.loss].producer = 0;
    REJECTED(&g, "node 'ce' (cross_entropy): input 0 'y' is not defined before use (cycle or use before definition)",
             "m.xml", 11);
}

static void test_verify_rejects_node_reading_its_own_output(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.nodes[s.ce].in[1] = s.loss;
    REJECTED(&g, "input 1 'loss' is not defined before use (cycle or use before definition)", "m.xml", 11);
}

static void test_verify_rejects_unused_param(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.nodes[s.fc].n_in = 2; /* drop the bias */
    REJECTED(&g, "param 'b' is never used", "m.xml", 3);
    build_small(&g); /* unused inputs and state are fine */
    add(&g, "extra", DT_F32, ROLE_INPUT, SHAPE(1), (ir_loc){ 0, 0 });
    add(&g, "m", DT_F32, ROLE_STATE, SHAPE(1), (ir_loc){ 0, 0 });
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    ir_graph_free(&g);
}

static void test_verify_rejects_bad_shapes(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.values[s.y].shape.rank = IR_MAX_RANK + 1;
    REJECTED(&g, "value 'y': rank 9 is out of range (-1 for unknown, 0 to 8)", "m.xml", 10);
    s = build_small(&g);
    g.values[s.w].shape.dim[1] = 0;
    REJECTED(&g, "value 'w': dimension 2 is 0, expected 1 to 2147483648", "m.xml", 2);
    s = build_small(&g);
    g.values[s.w].shape.dim[0] = IR_DIM_MAX + 1;
    REJECTED(&g, "value 'w': dimension 1 is 2147483649, expected 1 to 2147483648", "m.xml", 2);
    s = build_small(&g);
    g.values[s.w].shape = SHAPE(IR_DIM_MAX, IR_DIM_MAX, 2);
    REJECTED(&g, "value 'w': shape [2147483648,2147483648,2] has an absurd size", "m.xml", 2);
    s = build_small(&g);
    g.values[s.y].shape = ir_shape_unknown(); /* unknown is fine for an activation */
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    g.values[s.x].shape = ir_shape_unknown(); /* but not for a source */
    REJECTED(&g, "input 'x' has an unknown shape; sources must have a known shape", "m.xml", 1);
}

static void test_verify_rejects_bad_dtypes(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.values[s.y].dtype = DT_COUNT;
    REJECTED(&g, "value 'y': dtype 4 is out of range", "m.xml", 10);
    s = build_small(&g);
    g.values[s.w].dtype = DT_I32;
    REJECTED(&g, "param 'w' has dtype i32, expected a floating type (f32, f16, bf16)", "m.xml", 2);
    s = build_small(&g);
    g.values[s.w].dtype = DT_BF16;
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    ir_graph_free(&g);
}

static void test_verify_rejects_bad_loss(void)
{
    ir_graph g;
    small s = build_small(&g);
    g.loss = 17;
    REJECTED(&g, "loss is value #17, out of range (the graph has 6 values)", "small", 0);
    s = build_small(&g);
    g.loss = s.y;
    REJECTED(&g, "loss 'y' has shape [2,4], expected a scalar []", "m.xml", 10);
    s = build_small(&g);
    g.values[s.loss].shape = ir_shape_unknown(); /* not inferred yet: fine */
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    g.loss = -1;
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    ir_graph_free(&g);
}

/* build_small with fc in stage 0 and ce in stage 1, on devices 4,5 | 6,7. */
static small build_placed(ir_graph *g)
{
    small s = build_small(g);
    g->nodes[s.fc].stage = 0;
    g->nodes[s.ce].stage = 1;
    CHECK_INT(0, ir_graph_set_placement(g, 2, 2, 8, (int32_t[]){ 4, 5, 6, 7 }));
    return s;
}

static void test_verify_accepts_placements(void)
{
    ir_graph g;
    small s = build_placed(&g);
    struct diag err = { 0 };
    CHECK_INT(0, ir_graph_verify(&g, &err));
    if (err.msg[0])
        fprintf(stderr, "  unexpected: %s:%d: %s\n", err.file, err.line, err.msg);
    g.nodes[s.fc].stage = -1; /* a node without a stage annotation is fine */
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    ir_graph_free(&g);
    s = build_small(&g); /* unplaced: stages are not bounded */
    g.nodes[s.ce].stage = 99;
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    ir_graph_free(&g);
}

static void test_verify_rejects_bad_placement(void)
{
    ir_graph g;
    build_placed(&g);
    g.placement.n_replicas = 0;
    REJECTED(&g, "placement: 2 stages, 0 replicas, 8 micro-batches; expected each >= 1", "small", 0);
    build_placed(&g);
    g.placement.micro_batches = 0;
    REJECTED(&g, "placement: 2 stages, 2 replicas, 0 micro-batches; expected each >= 1", "small", 0);
    build_placed(&g);
    g.placement.n_stages = -1;
    REJECTED(&g, "placement: -1 stages, 2 replicas, 8 micro-batches", "small", 0);
    build_placed(&g);
    g.placement.n_stages = 0; /* "not placed", but the rest is still there */
    REJECTED(&g, "placement: 0 stages (not placed) but 2 replicas, 8 micro-batches and a device list", "small", 0);
    build_placed(&g);
    g.placement.n_replicas = 1024; /* 2 x 1024: over the limit (the array is short, but never read) */
    REJECTED(&g, "placement: 2 stages x 1024 replicas = 2048 devices, expected at most 1024", "small", 0);
    build_placed(&g);
    free(g.placement.device);
    g.placement.device = NULL;
    REJECTED(&g, "placement: 2 stages x 2 replicas but no device list", "small", 0);
    build_placed(&g);
    g.placement.device[3] = -2;
    REJECTED(&g, "placement: stage 1 replica 1 is device -2, expected a device index >= 0", "small", 0);
    build_placed(&g);
    g.placement.device[2] = 5;
    REJECTED(&g, "placement: device 5 runs both stage 0 replica 1 and stage 1 replica 0", "small", 0);
}

static void test_verify_rejects_node_stage_outside_placement(void)
{
    ir_graph g;
    small s = build_placed(&g);
    g.nodes[s.ce].stage = 2;
    REJECTED(&g, "node 'ce' (cross_entropy): stage 2, but the placement has 2 stages (0 to 1)", "m.xml", 11);
    s = build_placed(&g);
    CHECK_INT(0, ir_graph_set_placement(&g, 1, 4, 1, (int32_t[]){ 0, 1, 2, 3 }));
    REJECTED(&g, "node 'ce' (cross_entropy): stage 1, but the placement has 1 stage (0 to 0)", "m.xml", 11);
}

/* The setter copies, replaces, clears, and refuses what the verifier would
 * (leaving the graph as it was). */
static void test_ir_set_placement_copies_and_refuses_invalid_plans(void)
{
    ir_graph g;
    build_small(&g);
    CHECK_INT(0, g.placement.n_stages); /* unplaced after init */
    CHECK(g.placement.device == NULL);
    int32_t devices[] = { 3, 1, 2, 0 };
    CHECK_INT(0, ir_graph_set_placement(&g, 2, 2, 4, devices));
    devices[0] = 9; /* a copy: the caller's array is its own */
    CHECK_INT(3, g.placement.device[0]);
    CHECK_INT(2, g.placement.n_stages);
    CHECK_INT(2, g.placement.n_replicas);
    CHECK_INT(4, g.placement.micro_batches);
    const int32_t *kept = g.placement.device;
    CHECK_INT(-1, ir_graph_set_placement(&g, 0, 2, 4, devices)); /* 0 stages, not clearing */
    CHECK_INT(-1, ir_graph_set_placement(&g, 2, 0, 4, devices));
    CHECK_INT(-1, ir_graph_set_placement(&g, 2, 2, 0, devices));
    CHECK_INT(-1, ir_graph_set_placement(&g, -1, -4, 1, devices)); /* product positive */
    CHECK_INT(-1, ir_graph_set_placement(&g, 2, 2, 4, NULL));
    CHECK_INT(-1, ir_graph_set_placement(&g, 2, 2, 4, (int32_t[]){ 0, 1, 2, -1 })); /* negative */
    CHECK_INT(-1, ir_graph_set_placement(&g, 2, 2, 4, (int32_t[]){ 0, 1, 2, 1 }));  /* twice */
    CHECK_INT(-1, ir_graph_set_placement(&g, 1025, 1, 4, devices));                 /* over the limit */
    CHECK_INT(-1, ir_graph_set_placement(&g, 65536, 65536, 4, devices));            /* 2^32: no overflow */
    CHECK(g.placement.device == kept);                                              /* unchanged by every refusal */
    CHECK_INT(2, g.placement.n_stages);
    CHECK_INT(3, g.placement.device[0]);
    CHECK_INT(0, ir_graph_set_placement(&g, 1, 1, 1, (int32_t[]){ 42 })); /* replaced */
    CHECK_INT(42, g.placement.device[0]);
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    ir_graph copy;
    CHECK_INT(0, ir_graph_copy(&copy, &g));
    CHECK(copy.placement.device != g.placement.device);
    CHECK_INT(42, copy.placement.device[0]);
    CHECK_INT(1, copy.placement.micro_batches);
    CHECK_INT(0, ir_graph_set_placement(&g, 0, 0, 0, NULL)); /* cleared */
    CHECK_INT(0, g.placement.n_stages);
    CHECK(g.placement.device == NULL);
    CHECK_INT(0, ir_graph_verify(&g, NULL));
    ir_graph_free(&copy);
    ir_graph_free(&g);
    CHECK(g.placement.device == NULL); /* free leaves it initialised */
}

static void test_ir_interning_and_lookups(void)
{
    ir_graph g;
    small s = build_small(&g);
    CHECK_INT(0, ir_intern(&g, ""));
    CHECK_INT(0, ir_intern(&g, NULL));
    CHECK_STR("", ir_str(&g, 0));
    CHECK_STR("", ir_str(&g, IR_STR_NONE));
    CHECK_INT(ir_intern(&g, "w"), g.values[s.w].name);
    CHECK_INT(s.b, ir_find_value(&g, "b"));
    CHECK_INT(-1, ir_find_value(&g, "fc"));      /* interned, but a node name */
    CHECK_INT(-1, ir_find_value(&g, "nothing")); /* never interned */
    /* Many strings: the buffer moves, offsets and the index stay right;
     * interning a string from inside the buffer is safe. */
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "value.%d", i);
        ir_intern(&g, name);
    }
    uint32_t off = ir_intern(&g, "value.4321");
    CHECK_STR("value.4321", ir_str(&g, off));
    uint32_t suffix = ir_intern(&g, ir_str(&g, off) + 6);
    CHECK_STR("4321", ir_str(&g, suffix));
    CHECK_INT(suffix, ir_intern(&g, "4321"));
    ir_graph copy;
    CHECK_INT(0, ir_graph_copy(&copy, &g));
    CHECK_INT(off, ir_intern(&copy, "value.4321")); /* the index was rebuilt */
    CHECK_INT(s.loss, ir_find_value(&copy, "loss"));
    CHECK_INT(0, ir_graph_verify(&copy, NULL));
    ir_graph_free(&copy);
    ir_graph_free(&g);
}

static void test_ir_builder_defaults_and_attributes(void)
{
    ir_graph g;
    small s = build_small(&g);
    const ir_node *fc = &g.nodes[s.fc];
    CHECK_INT(-1, fc->device);
    CHECK_INT(-1, fc->stage);
    CHECK_INT(PHASE_NONE, fc->phase);
    CHECK(fc->est_time < 0);
    CHECK_INT(-1, g.values[s.x].producer);
    CHECK_INT(s.fc, g.values[s.y].producer);
    int32_t n = ir_add_node(&g, OP_MAXPOOL, "pool", (ir_loc){ 0, 0 });
    CHECK_INT(0, ir_node_set_int(&g, n, ATTR_KERNEL, 3));
    CHECK_INT(0, ir_node_set_ints(&g, n, ATTR_STRIDE, (int64_t[]){ 2, 2 }, 2));
    CHECK_INT(0, ir_node_set_int(&g, n, ATTR_KERNEL, 5)); /* replaces */
    CHECK_INT(2, g.nodes[n].n_attr);
    CHECK_INT(5, ir_node_int(&g.nodes[n], ATTR_KERNEL, 0));
    CHECK_INT(7, ir_node_int(&g.nodes[n], ATTR_PAD, 7));
    CHECK_INT(2, ir_node_attr(&g.nodes[n], ATTR_STRIDE)->n);
    CHECK_INT(-1, ir_node_set_ints(&g, n, ATTR_PAD, (int64_t[]){ 1 }, 0));
    CHECK_INT(-1, ir_node_set_ints(&g, n, ATTR_PAD, (int64_t[IR_MAX_RANK + 1]){ 0 }, IR_MAX_RANK + 1));
    for (int k = 0; k < ATTR_KEY_COUNT; k++) /* IR_MAX_ATTR is the limit */
        ir_node_set_float(&g, n, (attr_key)k, 1.0);
    CHECK_INT(IR_MAX_ATTR, g.nodes[n].n_attr);
    CHECK_INT(-1, ir_node_set_float(&g, n, (attr_key)(ATTR_KEY_COUNT - 1), 1.0));
    CHECK(ir_node_float(&g.nodes[n], ATTR_EPS, 0) == 1.0);
    CHECK_INT(-1, ir_node_add_input(&g, n, 999));
    CHECK_INT(-1, ir_node_add_output(&g, 999, 0));
    ir_graph_free(&g);
}

static void test_ir_shapes_dtypes_and_names(void)
{
    ir_shape s = SHAPE(4, 64, 768);
    char buf[64];
    CHECK_STR("[4,64,768]", ir_shape_str(&s, buf, sizeof buf));
    CHECK_INT(4 * 64 * 768, ir_shape_numel(&s));
    ir_shape scalar = ir_shape_make(0, NULL), unknown = ir_shape_unknown();
    CHECK_STR("[]", ir_shape_str(&scalar, buf, sizeof buf));
    CHECK_STR("[?]", ir_shape_str(&unknown, buf, sizeof buf));
    CHECK_INT(1, ir_shape_numel(&scalar));
    CHECK_INT(-1, ir_shape_numel(&unknown));
    ir_shape huge = SHAPE(IR_DIM_MAX, IR_DIM_MAX, IR_DIM_MAX, IR_DIM_MAX); /* overflows int64 */
    CHECK_INT(-1, ir_shape_numel(&huge));
    ir_shape limit = SHAPE(1 << 20, 1 << 20);
    CHECK_INT(IR_NUMEL_MAX, ir_shape_numel(&limit));
    limit.dim[1]++;
    CHECK_INT(-1, ir_shape_numel(&limit));
    CHECK(ir_shape_equal(&s, &s) && !ir_shape_equal(&s, &scalar) && ir_shape_equal(&unknown, &unknown));
    CHECK_STR("[4,6", ir_shape_str(&s, buf, 5)); /* truncated, still terminated */

    const char *dtypes[] = { "f32", "i32", "f16", "bf16" };
    const size_t sizes[] = { 4, 4, 2, 2 };
    for (int i = 0; i < DT_COUNT; i++) {
        ir_dtype dt;
        CHECK_INT(0, ir_dtype_parse(dtypes[i], &dt));
        CHECK_INT(i, dt);
        CHECK_STR(dtypes[i], ir_dtype_name(dt));
        CHECK_INT(sizes[i], ir_dtype_size(dt));
    }
    ir_dtype dt;
    ir_role role;
    ir_phase phase;
    ir_init_kind init;
    CHECK_INT(-1, ir_dtype_parse("f64", &dt));
    CHECK_INT(0, ir_role_parse("gradient", &role));
    CHECK_INT(ROLE_GRADIENT, role);
    CHECK_INT(0, ir_phase_parse("update", &phase));
    CHECK_INT(PHASE_UPDATE, phase);
    CHECK_INT(0, ir_init_parse("uniform", &init));
    CHECK_INT(INIT_UNIFORM, init);
    CHECK_STR("state", ir_role_name(ROLE_STATE));
    CHECK_STR("none", ir_phase_name(PHASE_NONE));
    CHECK_STR("?", ir_dtype_name(DT_COUNT));

    CHECK(ir_name_valid("h.0.attn/qkv:0-b_1"));
    CHECK(ir_name_valid("a-"));
    CHECK(!ir_name_valid(""));
    CHECK(!ir_name_valid("-a"));
    CHECK(!ir_name_valid("a b"));
    CHECK(!ir_name_valid("a=b"));
    char long_name[300];
    memset(long_name, 'a', sizeof long_name);
    long_name[255] = '\0';
    CHECK(ir_name_valid(long_name));
    long_name[255] = 'a', long_name[256] = '\0';
    CHECK(!ir_name_valid(long_name));
}

int main(void)
{
    test_verify_accepts_valid_graph();
    test_verify_accepts_node_and_value_sharing_a_name();
    test_verify_rejects_invalid_value_name();
    test_verify_rejects_invalid_node_name();
    test_verify_rejects_duplicate_value_name();
    test_verify_rejects_duplicate_node_name();
    test_verify_rejects_op_out_of_range();
    test_verify_rejects_wrong_input_count();
    test_verify_rejects_wrong_output_count();
    test_verify_rejects_value_index_out_of_range();
    test_verify_rejects_attribute_the_op_does_not_take();
    test_verify_rejects_attribute_of_wrong_type();
    test_verify_rejects_missing_required_attribute();
    test_verify_rejects_duplicate_attribute();
    test_verify_rejects_output_of_two_nodes();
    test_verify_rejects_producer_not_matching_outputs();
    test_verify_rejects_activation_without_producer();
    test_verify_rejects_produced_param();
    test_verify_rejects_use_before_definition();
    test_verify_rejects_node_reading_its_own_output();
    test_verify_rejects_unused_param();
    test_verify_rejects_bad_shapes();
    test_verify_rejects_bad_dtypes();
    test_verify_rejects_bad_loss();
    test_verify_accepts_placements();
    test_verify_rejects_bad_placement();
    test_verify_rejects_node_stage_outside_placement();
    test_ir_set_placement_copies_and_refuses_invalid_plans();
    test_ir_interning_and_lookups();
    test_ir_builder_defaults_and_attributes();
    test_ir_shapes_dtypes_and_names();
    CHECK_DONE();
}
