/* test_ir_text.c: the text form of the IR (print.c, parse.c) and the DOT
 * form (dot.c).
 *
 * The central property: for a valid graph g, print(g) -> parse -> print is
 * byte-identical.  Checked on graphs built by hand that use every feature of
 * the grammar, on the exact text of a small graph, on parse errors (line and
 * message), on the placement line (its errors, its limits, deep copies), on
 * every prefix of a valid text and on random corruptions of it
 * (no crash, no read past the end: each text is parsed from a heap buffer of
 * exactly its length, so ASan sees any overrun), and on `dot -Tsvg`.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "ir.h"
#include "ops.h"

#define SHAPE(...) \
    ir_shape_make((int)(sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t)), (int64_t[]){ __VA_ARGS__ })
#define SCALAR ir_shape_make(0, NULL)

static ir_loc at(ir_graph *g, const char *file, int line) { return (ir_loc){ ir_intern(g, file), line }; }
static const ir_loc nowhere = { 0, 0 };

static int32_t source(ir_graph *g, const char *name, ir_dtype dt, ir_role role, ir_shape s, ir_loc loc)
{
    return ir_add_value(g, name, dt, role, &s, loc);
}

static int32_t param(ir_graph *g, const char *name, ir_shape s, ir_init_kind k, double a, ir_loc loc)
{
    int32_t v = ir_add_value(g, name, DT_F32, ROLE_PARAM, &s, loc);
    g->values[v].init = (ir_init){ k, a };
    return v;
}

/* Append an output value of node n. */
static int32_t out(ir_graph *g, int32_t n, const char *name, ir_dtype dt, ir_shape s)
{
    int32_t v = ir_add_value(g, name, dt, ROLE_ACTIVATION, &s, g->nodes[n].loc);
    ir_node_add_output(g, n, v);
    return v;
}

/* A node with up to three inputs (-1: none). */
static int32_t node(ir_graph *g, ir_op op, const char *name, int32_t a, int32_t b, int32_t c, ir_loc loc)
{
    int32_t n = ir_add_node(g, op, name, loc);
    if (a >= 0)
        ir_node_add_input(g, n, a);
    if (b >= 0)
        ir_node_add_input(g, n, b);
    if (c >= 0)
        ir_node_add_input(g, n, c);
    return n;
}

/* A small transformer: every source role, a multi-output node, int and float
 * attributes, all annotations, an unknown shape, a scalar, a gradient. */
static void build_gpt_like(ir_graph *g)
{
    ir_graph_init(g);
    g->name = ir_intern(g, "gpt2-tiny");
    ir_add_hyper_int(g, "n_layer", 2);
    ir_add_hyper_int(g, "neg", -3);
    ir_add_hyper_float(g, "lr", 0.0006);
    ir_add_hyper_float(g, "ratio", 2.0);
    ir_add_hyper_float(g, "big", 1e30);
    ir_add_hyper_float(g, "tiny", 5e-324);
    int32_t idx = source(g, "idx", DT_I32, ROLE_INPUT, SHAPE(4, 64), at(g, "models/gpt2.xml", 10));
    int32_t tgt = source(g, "targets", DT_I32, ROLE_INPUT, SHAPE(4, 64), nowhere);
    int32_t wte = param(g, "wte", SHAPE(50257, 768), INIT_NORMAL, 0.02, at(g, "models/gpt2.xml", 12));
    int32_t wpe = param(g, "wpe", SHAPE(1024, 768), INIT_NORMAL, 0.01, nowhere);
    int32_t lnw = param(g, "h.0.ln1.w", SHAPE(768), INIT_ONES, 0, nowhere);
    int32_t lnb = param(g, "h.0.ln1.b", SHAPE(768), INIT_ZEROS, 0, nowhere);
    int32_t wqkv = param(g, "h.0.attn.w", SHAPE(2304, 768), INIT_UNIFORM, 0.05, nowhere);
    int32_t m = source(g, "adam.m:wte", DT_F32, ROLE_STATE, SHAPE(50257, 768), nowhere);
    g->values[m].init.kind = INIT_ZEROS;

    int32_t n = node(g, OP_EMBEDDING, "tok", idx, wte, -1, at(g, "models/gpt2.xml", 20));
    int32_t tok = out(g, n, "tok.out", DT_F32, SHAPE(4, 64, 768));
    g->nodes[n].device = 0, g->nodes[n].stage = 0, g->nodes[n].phase = PHASE_FORWARD;
    n = node(g, OP_POSITIONS, "pos", idx, -1, -1, nowhere);
    int32_t pos = out(g, n, "pos.out", DT_I32, SHAPE(4, 64));
    n = node(g, OP_EMBEDDING, "pemb", pos, wpe, -1, nowhere);
    int32_t pemb = out(g, n, "pemb.out", DT_F32, SHAPE(4, 64, 768));
    n = node(g, OP_ADD, "h.0.x", tok, pemb, -1, nowhere);
    int32_t x = out(g, n, "h.0.x", DT_F32, SHAPE(4, 64, 768)); /* a node and a value share a name */
    n = node(g, OP_LAYERNORM, "h.0.ln1", x, lnw, lnb, at(g, "models/gpt2.xml", 40));
    ir_node_set_float(g, n, ATTR_EPS, 1e-5);
    int32_t ln = out(g, n, "h.0.ln1.out", DT_F32, SHAPE(4, 64, 768));
    g->nodes[n].phase = PHASE_FORWARD, g->nodes[n].est_time = 0.00125;
    n = node(g, OP_LINEAR, "h.0.qkv", ln, wqkv, -1, nowhere);
    int32_t qkv = out(g, n, "h.0.qkv.out", DT_F32, SHAPE(4, 64, 2304));
    g->nodes[n].device = 1, g->nodes[n].stage = 1;
    n = node(g, OP_QKV_SPLIT, "h.0.split", qkv, -1, -1, nowhere);
    ir_node_set_int(g, n, ATTR_HEADS, 12);
    int32_t q = out(g, n, "h.0.q", DT_F32, SHAPE(4, 12, 64, 64));
    int32_t k = out(g, n, "h.0.k", DT_F32, SHAPE(4, 12, 64, 64));
    int32_t v = out(g, n, "h.0.v", DT_F32, SHAPE(4, 12, 64, 64));
    n = node(g, OP_MATMUL, "h.0.att", q, k, -1, nowhere);
    ir_node_set_int(g, n, ATTR_TRANSPOSE_B, 1);
    ir_node_set_float(g, n, ATTR_SCALE, 0.125);
    int32_t att = out(g, n, "h.0.att.out", DT_F32, SHAPE(4, 12, 64, 64));
    n = node(g, OP_SOFTMAX, "h.0.sm", att, -1, -1, nowhere);
    ir_node_set_int(g, n, ATTR_CAUSAL, 1);
    int32_t sm = out(g, n, "h.0.sm.out", DT_F32, ir_shape_unknown());
    n = node(g, OP_MATMUL, "h.0.y", sm, v, -1, nowhere);
    ir_node_set_float(g, n, ATTR_SCALE, 1.0);
    int32_t y = out(g, n, "h.0.y.out", DT_F32, SHAPE(4, 12, 64, 64));
    n = node(g, OP_MERGE_HEADS, "h.0.merge", y, -1, -1, nowhere);
    int32_t merged = out(g, n, "h.0.merged", DT_F16, SHAPE(4, 64, 768));
    n = node(g, OP_LINEAR, "lm_head", merged, wte, -1, nowhere);
    int32_t logits = out(g, n, "logits", DT_BF16, SHAPE(4, 64, 50257));
    n = node(g, OP_CROSS_ENTROPY, "ce", logits, tgt, -1, at(g, "models/gpt2.xml", 99));
    g->loss = out(g, n, "loss", DT_F32, SCALAR);
    n = node(g, OP_GELU, "bwd.gelu", logits, -1, -1, nowhere);
    out(g, n, "d.logits", DT_F32, SHAPE(4, 64, 50257));
    g->values[g->nodes[n].out[0]].role = ROLE_GRADIENT;
    g->nodes[n].phase = PHASE_BACKWARD, g->nodes[n].device = 13, g->nodes[n].est_time = 0;
    /* Two stages (the nodes above use 0 and 1), two replicas each. */
    CHECK_INT(0, ir_graph_set_placement(g, 2, 2, 4, (int32_t[]){ 0, 1, 13, 2 }));
}

/* A small CNN: int-list attributes, quoted model, file and hyper names, a
 * dropout mask (an input with an init). */
static void build_cnn(ir_graph *g)
{
    ir_graph_init(g);
    g->name = ir_intern(g, "my \"tiny\" resnet");
    ir_add_hyper_int(g, "batch size", 8);
    ir_loc file = at(g, "models/my resnet.xml", 3);
    int32_t img = source(g, "image", DT_F32, ROLE_INPUT, SHAPE(8, 3, 32, 32), file);
    int32_t lbl = source(g, "label", DT_I32, ROLE_INPUT, SHAPE(8), file);
    int32_t cw = param(g, "conv1/w", SHAPE(16, 3, 3, 3), INIT_NORMAL, 0.1, file);
    int32_t bw = param(g, "bn1/w", SHAPE(16), INIT_ONES, 0, file);
    int32_t bb = param(g, "bn1/b", SHAPE(16), INIT_ZEROS, 0, file);
    int32_t fw = param(g, "fc/w", SHAPE(10, 16), INIT_UNIFORM, 0.25, file);
    int32_t fb = param(g, "fc/b", SHAPE(10), INIT_NONE, 0, file);
    int32_t n = node(g, OP_CONV2D, "conv1", img, cw, -1, at(g, "models/my resnet.xml", 7));
    ir_node_set_ints(g, n, ATTR_STRIDE, (int64_t[]){ 2, 2 }, 2);
    ir_node_set_ints(g, n, ATTR_PAD, (int64_t[]){ 1, 1 }, 2);
    int32_t c = out(g, n, "conv1.out", DT_F32, SHAPE(8, 16, 16, 16));
    n = node(g, OP_BATCHNORM, "bn1", c, bw, bb, nowhere);
    ir_node_set_float(g, n, ATTR_EPS, 1e-3);
    int32_t b = out(g, n, "bn1.out", DT_F32, SHAPE(8, 16, 16, 16));
    n = node(g, OP_RELU, "relu1", b, -1, -1, nowhere);
    int32_t r = out(g, n, "relu1.out", DT_F32, SHAPE(8, 16, 16, 16));
    n = node(g, OP_MAXPOOL, "pool1", r, -1, -1, nowhere);
    ir_node_set_int(g, n, ATTR_KERNEL, 3);
    ir_node_set_int(g, n, ATTR_STRIDE, 2);
    ir_node_set_int(g, n, ATTR_PAD, -1); /* nonsense, but the grammar must carry negatives */
    int32_t p = out(g, n, "pool1.out", DT_F32, SHAPE(8, 16, 8, 8));
    n = node(g, OP_AVGPOOL_GLOBAL, "gap", p, -1, -1, nowhere);
    int32_t gap = out(g, n, "gap.out", DT_F32, SHAPE(8, 16));
    n = node(g, OP_FLATTEN, "flat", gap, -1, -1, nowhere);
    int32_t f = out(g, n, "flat.out", DT_F32, SHAPE(8, 16));
    int32_t dm = source(g, "drop/mask", DT_F32, ROLE_INPUT, SHAPE(8, 16), nowhere); /* LoRA's dropout's kind */
    g->values[dm].init = (ir_init){ INIT_DROPOUT, 0.25 };
    n = node(g, OP_MUL, "drop", f, dm, -1, nowhere);
    int32_t fd = out(g, n, "drop.out", DT_F32, SHAPE(8, 16));
    n = node(g, OP_LINEAR, "fc", fd, fw, fb, nowhere);
    int32_t lg = out(g, n, "logits", DT_F32, SHAPE(8, 10));
    n = node(g, OP_CROSS_ENTROPY, "ce", lg, lbl, -1, nowhere);
    g->loss = out(g, n, "loss", DT_F32, ir_shape_unknown());
}

static char *print_to_string(const ir_graph *g, int dot)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rc = dot ? ir_graph_print_dot(g, f) : ir_graph_print(g, f);
    fclose(f);
    CHECK_INT(0, rc);
    return buf;
}

/* Parse from a heap copy of exactly len bytes (no NUL after it). */
static int parse_exact(const char *text, size_t len, ir_graph *g, struct diag *err)
{
    char *copy = malloc(len ? len : 1);
    memcpy(copy, text, len);
    int rc = ir_graph_parse(copy, len, "test.fir", g, err);
    free(copy);
    return rc;
}

static void check_round_trip(const ir_graph *g, const char *what)
{
    int before = check_failures;
    struct diag err = { 0 };
    CHECK_INT(0, ir_graph_verify(g, &err));
    char *text = print_to_string(g, 0);
    ir_graph back;
    int rc = parse_exact(text, strlen(text), &back, &err);
    CHECK_INT(0, rc);
    if (rc != 0)
        fprintf(stderr, "  parse error: %s:%d: %s\n", err.file, err.line, err.msg);
    char *again = print_to_string(&back, 0);
    CHECK_STR(text, again);
    ir_graph copy;
    CHECK_INT(0, ir_graph_copy(&copy, g));
    char *copied = print_to_string(&copy, 0);
    CHECK_STR(text, copied);
    if (check_failures > before)
        fprintf(stderr, "  in round trip of %s; text was:\n%s", what, text);
    free(text), free(again), free(copied);
    ir_graph_free(&back), ir_graph_free(&copy);
}

static void test_text_round_trips_gpt_like_graph(void)
{
    ir_graph g;
    build_gpt_like(&g);
    check_round_trip(&g, "gpt-like graph");
    ir_graph_free(&g);
}

static void test_text_round_trips_cnn_with_quoted_names(void)
{
    ir_graph g;
    build_cnn(&g);
    check_round_trip(&g, "cnn");
    char *text = print_to_string(&g, 0);
    CHECK_CONTAINS(text, "model \"my \\\"tiny\\\" resnet\"\n");
    CHECK_CONTAINS(text, "hyper \"batch size\" = 8\n");
    CHECK_CONTAINS(text, "@\"models/my resnet.xml\":7\n");
    CHECK_CONTAINS(text, " stride=[2,2] pad=[1,1] -> ");
    CHECK_CONTAINS(text, "param fc/b : f32[10] init=none @");
    CHECK_CONTAINS(text, "loss : f32[?]\n");
    CHECK(strstr(text, "placement") == NULL); /* not placed: no line */
    free(text);
    ir_graph_free(&g);
}

static void test_text_prints_the_documented_form(void)
{
    ir_graph g;
    build_gpt_like(&g);
    char *text = print_to_string(&g, 0);
    const char *head = "fusion-ir 1\n"
                       "model gpt2-tiny\n"
                       "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,13,2]\n"
                       "hyper n_layer = 2\n"
                       "hyper neg = -3\n"
                       "hyper lr = 0.0006\n"
                       "hyper ratio = 2.0\n"
                       "hyper big = 1e+30\n"
                       "hyper tiny = 4.94065646e-324\n"
                       "input idx : i32[4,64] @models/gpt2.xml:10\n"
                       "input targets : i32[4,64]\n"
                       "param wte : f32[50257,768] init=normal(0.02) @models/gpt2.xml:12\n"
                       "param wpe : f32[1024,768] init=normal(0.01)\n"
                       "param h.0.ln1.w : f32[768] init=ones\n"
                       "param h.0.ln1.b : f32[768] init=zeros\n"
                       "param h.0.attn.w : f32[2304,768] init=uniform(0.05)\n"
                       "state adam.m:wte : f32[50257,768] init=zeros\n"
                       "node tok = embedding(idx, wte) -> tok.out : f32[4,64,768] device=0 stage=0 phase=forward"
                       " @models/gpt2.xml:20\n";
    CHECK(strncmp(text, head, strlen(head)) == 0);
    CHECK_CONTAINS(text, "\nnode h.0.ln1 = layernorm(h.0.x, h.0.ln1.w, h.0.ln1.b) eps=1e-05 -> h.0.ln1.out"
                         " : f32[4,64,768] phase=forward time=0.00125 @models/gpt2.xml:40\n");
    CHECK_CONTAINS(text, "\nnode h.0.split = qkv_split(h.0.qkv.out) heads=12 -> h.0.q : f32[4,12,64,64],"
                         " h.0.k : f32[4,12,64,64], h.0.v : f32[4,12,64,64]\n");
    CHECK_CONTAINS(text, "transpose_b=1 scale=0.125 -> ");
    CHECK_CONTAINS(text, "= matmul(h.0.sm.out, h.0.v) scale=1.0 -> ");
    CHECK_CONTAINS(text, "-> h.0.sm.out : f32[?]\n");
    CHECK_CONTAINS(text, "-> loss : f32[] @models/gpt2.xml:99\n");
    CHECK_CONTAINS(text, "-> d.logits : f32[4,64,50257] gradient device=13 phase=backward time=0\n");
    size_t len = strlen(text);
    CHECK(len > 10 && strcmp(text + len - 10, "loss loss\n") == 0);
    CHECK(strstr(text, " \n") == NULL); /* no trailing spaces */
    if (check_failures)
        fprintf(stderr, "  printed:\n%s", text);
    free(text);
    ir_graph_free(&g);
}

static void test_text_parse_accepts_comments_blank_lines_crlf_and_quotes(void)
{
    const char *text = "# a comment\r\n"
                       "\r\n"
                       "fusion-ir 1\r\n"
                       "model   \"m\"\r\n"
                       "  input \"x\" :  f32[ 2 , 3 ]   @\"a b.xml\":4\r\n"
                       "\tparam w : f32[3,3] init=normal(2e-2)\n"
                       "node n = linear( x , w ) -> \"y\" : f32[2,3] activation device=1\n";
    ir_graph g;
    struct diag err = { 0 };
    int rc = parse_exact(text, strlen(text), &g, &err);
    CHECK_INT(0, rc);
    if (rc)
        fprintf(stderr, "  %s:%d: %s\n", err.file, err.line, err.msg);
    char *printed = print_to_string(&g, 0);
    CHECK_STR("fusion-ir 1\nmodel m\ninput x : f32[2,3] @\"a b.xml\":4\nparam w : f32[3,3] init=normal(0.02)\n"
              "node n = linear(x, w) -> y : f32[2,3] device=1\n",
              printed);
    CHECK_INT(1, ir_find_value(&g, "w"));
    free(printed);
    ir_graph_free(&g);
}

/* The placement line: after "after PASS", before the hypers; the largest
 * plan round-trips; a copy owns its own device list; no line once cleared. */
static void test_text_placement_line_round_trips(void)
{
    ir_graph g;
    build_gpt_like(&g);
    g.after_pass = ir_intern(&g, "fence");
    char *text = print_to_string(&g, 0);
    CHECK_CONTAINS(text, "model gpt2-tiny\nafter fence\n"
                         "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,13,2]\nhyper n_layer = 2\n");
    check_round_trip(&g, "gpt-like graph after fence");
    free(text);

    /* The schedule pass's warm-up: printed after the devices, round-trips,
     * copied; a stage may not warm up less than the next one + 1. */
    CHECK_INT(1, ir_placement_warmup(&g.placement, 0)); /* unset: 1F1B's min(M, S - s - 1) */
    CHECK_INT(0, ir_placement_warmup(&g.placement, 1));
    CHECK_INT(-1, ir_graph_set_warmup(&g, (int32_t[]){ 1, 1 }));
    CHECK_INT(-1, ir_graph_set_warmup(&g, (int32_t[]){ 5, 0 })); /* over M = 4 */
    CHECK_INT(0, ir_graph_set_warmup(&g, (int32_t[]){ 4, 3 }));
    CHECK_INT(3, ir_placement_warmup(&g.placement, 1));
    text = print_to_string(&g, 0);
    CHECK_CONTAINS(text, "devices=[0,1,13,2] warmup=[4,3]\nhyper n_layer = 2\n");
    check_round_trip(&g, "gpt-like graph with warm-up counts");
    free(text);
    /* Recompute flags: after the warm-up, only when a stage recomputes. */
    CHECK_INT(0, ir_placement_recompute(&g.placement, 0));
    CHECK_INT(-1, ir_graph_set_recompute(&g, (uint8_t[]){ 2, 0 }));
    CHECK_INT(0, ir_graph_set_recompute(&g, (uint8_t[]){ 1, 0 }));
    CHECK_INT(1, ir_placement_recompute(&g.placement, 0));
    CHECK_INT(0, ir_placement_recompute(&g.placement, 1));
    CHECK_INT(0, ir_placement_recompute(&g.placement, 2)); /* out of range */
    text = print_to_string(&g, 0);
    CHECK_CONTAINS(text, "devices=[0,1,13,2] warmup=[4,3] recompute=[1,0]\nhyper n_layer = 2\n");
    check_round_trip(&g, "gpt-like graph with recompute flags");
    free(text);
    /* Partial replay: a recomputing stage's whole-kept count, after the flags. */
    CHECK_INT(-1, ir_graph_set_keep(&g, (int32_t[]){ 0, 1 })); /* stage 1 does not recompute */
    CHECK_INT(-1, ir_graph_set_keep(&g, (int32_t[]){ 5, 0 })); /* over M = 4 */
    CHECK_INT(0, ir_graph_set_keep(&g, (int32_t[]){ 2, 0 }));
    CHECK_INT(2, ir_placement_keep(&g.placement, 0));
    text = print_to_string(&g, 0);
    CHECK_CONTAINS(text, "devices=[0,1,13,2] warmup=[4,3] recompute=[1,0] keep=[2,0]\nhyper n_layer = 2\n");
    check_round_trip(&g, "gpt-like graph with whole-kept counts");
    free(text);
    CHECK_INT(0, ir_graph_set_recompute(&g, (uint8_t[]){ 0, 0 })); /* none: no list, and none kept */
    CHECK(g.placement.recompute == NULL);
    CHECK_INT(0, ir_placement_keep(&g.placement, 0));
    CHECK_INT(0, ir_graph_set_warmup(&g, NULL));

    /* The copy is deep: the original's list freed, the copy still prints it. */
    ir_graph copy;
    CHECK_INT(0, ir_graph_copy(&copy, &g));
    CHECK(copy.placement.device != g.placement.device);
    char *before = print_to_string(&g, 0);
    ir_graph_free(&g);
    char *after = print_to_string(&copy, 0);
    CHECK_STR(before, after);
    free(before), free(after);

    /* 1024 devices (the limit), one stage of 1024 replicas, reversed. */
    int32_t devices[IR_MAX_STAGE_DEVICES];
    for (int i = 0; i < IR_MAX_STAGE_DEVICES; i++)
        devices[i] = IR_MAX_STAGE_DEVICES - 1 - i;
    CHECK_INT(0, ir_graph_set_placement(&copy, 1, IR_MAX_STAGE_DEVICES, INT32_MAX, devices));
    for (int32_t n = 0; n < copy.n_nodes; n++)
        copy.nodes[n].stage = -1;
    text = print_to_string(&copy, 0);
    CHECK_CONTAINS(text, "\nplacement stages=1 replicas=1024 micro_batches=2147483647 devices=[1023,1022,");
    CHECK_CONTAINS(text, ",2,1,0]\nhyper ");
    check_round_trip(&copy, "1024 replicas");
    free(text);

    /* Cleared: no line, and the text reads back unplaced. */
    CHECK_INT(0, ir_graph_set_placement(&copy, 0, 0, 0, NULL));
    text = print_to_string(&copy, 0);
    CHECK(strstr(text, "placement") == NULL);
    ir_graph back;
    struct diag err = { 0 };
    CHECK_INT(0, parse_exact(text, strlen(text), &back, &err));
    CHECK_INT(0, back.placement.n_stages);
    CHECK(back.placement.device == NULL);
    free(text);
    ir_graph_free(&back);
    ir_graph_free(&copy);
}

/* Parse text, expect failure at `line` with `needle` in the message. */
static void expect_parse_error(const char *text, size_t len, int line, const char *needle)
{
    int before = check_failures;
    ir_graph g;
    struct diag err = { 0 };
    CHECK_INT(-1, parse_exact(text, len, &g, &err));
    CHECK_INT(line, err.line);
    CHECK_CONTAINS(err.msg, needle);
    CHECK_INT(0, g.n_values); /* left empty */
    CHECK_INT(0, g.n_nodes);
    CHECK(g.strings == NULL && g.string_index == NULL);
    if (check_failures > before)
        fprintf(stderr, "  for text \"%.*s\"\n", (int)(len < 300 ? len : 300), text);
}
#define PARSE_ERROR(text, line, needle) expect_parse_error(text, sizeof(text) - 1, line, needle)
#define HEAD                            "fusion-ir 1\nmodel m\ninput x : f32[2]\n"

static void test_text_parse_errors_name_line_expected_and_found(void)
{
    PARSE_ERROR("", 0, "expected 'fusion-ir 1' (the first line of a fusion IR file), found end of file");
    PARSE_ERROR("hello world\n", 1, "expected 'fusion-ir 1' (the first line of a fusion IR file), found 'hello'");
    PARSE_ERROR("fusion-ir 2\n", 1, "expected version 1, found version 2");
    PARSE_ERROR("fusion-ir 1\n", 1, "expected 'model' and the model name, found end of file");
    PARSE_ERROR("fusion-ir 1\ninput x : f32[2]\n", 2, "expected 'model' and the model name, found 'input'");
    PARSE_ERROR(HEAD "node a = frobnicate(x) -> y : f32[2]\n", 4,
                "expected an op (embedding, positions, linear, matmul, layernorm, attention");
    PARSE_ERROR(HEAD "node a = frobnicate(x) -> y : f32[2]\n", 4, "found 'frobnicate'");
    PARSE_ERROR(HEAD "node a = gelu(nope) -> y : f32[2]\n", 4, "unknown value 'nope'");
    PARSE_ERROR(HEAD "input z : f64[2]\n", 4, "expected a dtype (f32, i32, f16, bf16), found 'f64'");
    PARSE_ERROR(HEAD "node a = gelu(x -> y : f32[2]\n", 4, "expected ',' or ')' after an input, found '->'");
    PARSE_ERROR(HEAD "input z : f32[2,0]\n", 4, "expected a dimension from 1 to 2147483648, found '0'");
    PARSE_ERROR(HEAD "input z : f32[99999999999999999999]\n", 4,
                "expected a dimension from 1 to 2147483648, found '99999999999999999999'");
    PARSE_ERROR(HEAD "input z : f32[2147483649]\n", 4, "found '2147483649'");
    PARSE_ERROR(HEAD "input z : f32[2147483648,2147483648]\n", 4,
                "expected a shape of at most 2^40 elements, found '[2147483648,2147483648]'");
    PARSE_ERROR(HEAD "input z : f32[1,1,1,1,1,1,1,1,1]\n", 4, "expected ']' (at most 8 dimensions), found ','");
    PARSE_ERROR(HEAD "node a = gelu(", 4, "expected an input value name, found end of line");
    PARSE_ERROR(HEAD "node a = gelu(x) -> y : f32[2", 4,
                "expected ',' or ']' in a list of dimensions, found end of line");
    PARSE_ERROR(HEAD "node a = gelu(x) -> y :", 4, "expected a dtype (f32, i32, f16, bf16), found end of line");
    PARSE_ERROR(HEAD "input x : f32[3]\n", 4, "value 'x' is already defined, as an input");
    PARSE_ERROR(HEAD "node a = gelu(x) -> x : f32[2]\n", 4, "value 'x' is already defined, as an input");
    PARSE_ERROR(HEAD "node a = gelu(x) -> y : f32[2]\nnode a = gelu(y) -> z : f32[2]\n", 5,
                "node 'a' is already defined on line 4");
    PARSE_ERROR(HEAD "node a = gelu(x) eps=1e-5 -> y : f32[2]\n", 4,
                "expected an attribute of gelu (it takes none), found 'eps'");
    PARSE_ERROR(HEAD "node a = layernorm(x, x, x) eps=1e-5 eps=2 -> y : f32[2]\n", 4,
                "expected each attribute once, found 'eps'");
    PARSE_ERROR(HEAD "node a = attention(x) heads=1.5 -> y : f32[2]\n", 4,
                "expected an integer or '[' and a list, found '1.5'");
    PARSE_ERROR(HEAD "node a = gelu(x) -> y : f32[2] stage=1 device=0\n", 4,
                "expected the annotations in the order device, stage, phase, time, ws, each once, found 'device'");
    PARSE_ERROR(HEAD "node a = gelu(x) -> y : f32[2] phase=sideways\n", 4, "found 'sideways'");
    PARSE_ERROR(HEAD "node a = gelu(x) -> y : f32[2] device=-1\n", 4, "expected a device number >= 0");
    PARSE_ERROR(HEAD "node a = gelu(x) -> y : f32[2] whatever\n", 4,
                "expected a role (activation, gradient), an annotation, '@' or ',', found 'whatever'");
    PARSE_ERROR(HEAD "node a = gelu(x) -> y : f32[2] @m.xml\n", 4, "expected FILE:LINE after '@', found 'm.xml'");
    PARSE_ERROR(HEAD "param w : f32[2]\n", 4, "expected 'init=', found end of line");
    PARSE_ERROR(HEAD "param w : f32[2] init=gaussian\n", 4,
                "expected an init (none, zeros, ones, normal, uniform), found 'gaussian'");
    PARSE_ERROR(HEAD "param w : f32[2] init=normal(0.02\n", 4, "expected ')', found end of line");
    PARSE_ERROR(HEAD "input \"z\\q\" : f32[2]\n", 4, "expected an escape");
    PARSE_ERROR(HEAD "input \"z : f32[2]\n", 4, "expected '\"' to close a value name, found end of line");
    PARSE_ERROR(HEAD "hyper h = 1e999\n", 4, "expected a number, found '1e999'");
    PARSE_ERROR(HEAD "hyper h = 9223372036854775808\n", 4, "found '9223372036854775808'");
    PARSE_ERROR(HEAD "loss nope\n", 4, "unknown value 'nope'");
    PARSE_ERROR(
        HEAD "model again\n", 4,
        "expected 'hyper', 'input', 'param', 'state', 'node', 'loss', 'output' or 'prefill_output', found 'model'");
    PARSE_ERROR(HEAD "input z : f32[2] extra\n", 4, "expected 'at=OFFSET', '@FILE:LINE' or end of line, found 'extra'");
    /* Garbage bytes, NULs included, and no terminating NUL. */
    PARSE_ERROR("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 1,
                "expected 'fusion-ir 1' (the first line of a fusion IR file), found '\\x89PNG'");
    PARSE_ERROR(HEAD "input z\0 : f32[2]\n", 4, "expected ':' and a type, found '\\x00'");
}

#define TOP    "fusion-ir 1\nmodel m\n"
#define PLACED "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3]\n"

static void test_text_parse_errors_in_the_placement_line(void)
{
    PARSE_ERROR(TOP "placement\n", 3, "expected 'stages=', found end of line");
    PARSE_ERROR(TOP "placement replicas=2\n", 3, "expected 'stages=', found 'replicas'");
    PARSE_ERROR(TOP "placement stages 2\n", 3, "expected 'stages=', found 'stages'");
    PARSE_ERROR(TOP "placement stages=0 replicas=1 micro_batches=1 devices=[0]\n", 3,
                "expected a stage count from 1 to 1024, found '0'");
    PARSE_ERROR(TOP "placement stages=two\n", 3, "expected a stage count from 1 to 1024, found 'two'");
    PARSE_ERROR(TOP "placement stages=2 micro_batches=4 devices=[0,1]\n", 3,
                "expected 'replicas=', found 'micro_batches'");
    PARSE_ERROR(TOP "placement stages=1 replicas=1025 micro_batches=1 devices=[0]\n", 3,
                "expected a replica count from 1 to 1024, found '1025'");
    PARSE_ERROR(TOP "placement stages=64 replicas=32 micro_batches=1 devices=[0]\n", 3,
                "expected at most 1024 devices in a placement (stages x replicas), found 64 x 32 = 2048");
    PARSE_ERROR(TOP "placement stages=1 replicas=1 micro_batches=0 devices=[0]\n", 3,
                "expected a micro-batch count >= 1, found '0'");
    PARSE_ERROR(TOP "placement stages=1 replicas=1 micro_batches=2147483648 devices=[0]\n", 3,
                "expected a micro-batch count >= 1, found '2147483648'");
    PARSE_ERROR(TOP "placement stages=1 replicas=1 micro_batches=1\n", 3, "expected 'devices=', found end of line");
    PARSE_ERROR(TOP "placement stages=1 replicas=1 micro_batches=1 devices=0\n", 3,
                "expected '[' and the device list, found '0'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2]\n", 3,
                "expected ',' and 1 more device (stages x replicas = 2 x 2 = 4), found ']'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[]\n", 3,
                "expected a device index >= 0, found ']'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3,4]\n", 3,
                "expected ']' after 4 devices (stages x replicas = 2 x 2), found ','");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3\n", 3,
                "expected ']' after 4 devices (stages x replicas = 2 x 2), found end of line");
    PARSE_ERROR(TOP "placement stages=2 replicas=1 micro_batches=4 devices=[0,-1]\n", 3,
                "expected a device index >= 0, found '-1'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,1]\n", 3,
                "device 1 is in the placement twice: stage 0 replica 1, and stage 1 replica 1");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] extra\n", 3,
                "expected end of line after the device list, found 'extra'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] warmup=[1,1]\n", 3,
                "a stage warms up less than the next stage's + 1");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] warmup=[5,0]\n", 3,
                "a warm-up count from 0 to the micro-batches");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] warmup=[1]\n", 3,
                "',' and 1 more warm-up count");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] warmup=[1,0] x\n", 3,
                "expected end of line after the warm-up list, found 'x'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] warmup=[1,0] recompute=[1,2]\n", 3,
                "expected a recompute flag, 0 or 1, found '2'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] recompute=[1]\n", 3,
                "',' and 1 more recompute flag");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] recompute=[1,0] x\n", 3,
                "expected end of line after the recompute list, found 'x'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] recompute=[1,0] keep=[1,1]\n", 3,
                "expected keep 0 (the stage does not recompute), found '1'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] recompute=[1,0] keep=[9,0]\n", 3,
                "expected a keep count from 0 to the micro-batches, found '9'");
    PARSE_ERROR(TOP "placement stages=2 replicas=2 micro_batches=4 devices=[0,1,2,3] recompute=[1,0] keep=[1,0] x\n", 3,
                "expected end of line after the keep list, found 'x'");
    PARSE_ERROR(TOP PLACED PLACED, 4,
                "'placement' must come once, after 'model' (and 'after'), before any "
                "hyper, source or node");
    PARSE_ERROR(TOP "input x : f32[2]\n" PLACED, 4, "'placement' must come once");
    PARSE_ERROR(TOP "hyper h = 1\n" PLACED, 4, "'placement' must come once");
    PARSE_ERROR(TOP PLACED "after shapes\n", 4, "'after PASS' must come once, right after 'model'");
    PARSE_ERROR("fusion-ir 1\n" PLACED, 2, "expected 'model' and the model name, found 'placement'");
    /* Well-formed, but a node's stage is not in the plan: the verifier says
     * so at the node's line. */
    PARSE_ERROR(TOP PLACED "input x : f32[2]\nnode a = gelu(x) : f32[2] stage=1\nnode b = gelu(a) : f32[2] "
                           "device=7 stage=2\n",
                6, "node 'b' (gelu): stage 2, but the placement has 2 stages (0 to 1)");
    /* And the good forms: spaces are free; 'after' first; a node in the last stage. */
    const char *ok[] = {
        TOP "after shapes\n" PLACED "input x : f32[2]\nnode a = gelu(x) : f32[2] stage=1\n",
        TOP "placement   stages=1  replicas=1 micro_batches=1 devices=[ 7 ]  \n",
        TOP "placement stages=3 replicas=1 micro_batches=1 devices=[2 , 0, 1]\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        ir_graph g;
        struct diag err = { 0 };
        int rc = parse_exact(ok[i], strlen(ok[i]), &g, &err);
        CHECK_INT(0, rc);
        if (rc)
            fprintf(stderr, "  %s:%d: %s\n  in \"%s\"\n", err.file, err.line, err.msg, ok[i]);
        ir_graph_free(&g);
    }
    ir_graph g;
    struct diag err = { 0 };
    const char *text = TOP "placement stages=3 replicas=1 micro_batches=5 devices=[2 , 0, 1]\n";
    CHECK_INT(0, parse_exact(text, strlen(text), &g, &err));
    CHECK_INT(3, g.placement.n_stages);
    CHECK_INT(1, g.placement.n_replicas);
    CHECK_INT(5, g.placement.micro_batches);
    CHECK(g.placement.device && g.placement.device[0] == 2 && g.placement.device[2] == 1);
    char *printed = print_to_string(&g, 0);
    CHECK_STR(TOP "placement stages=3 replicas=1 micro_batches=5 devices=[2,0,1]\n", printed);
    free(printed);
    ir_graph_free(&g);
}

static void test_text_parse_runs_the_verifier_with_source_locations(void)
{
    /* Syntactically fine, but the param is never used: the verifier's error,
     * at the param's own location. */
    ir_graph g;
    struct diag err = { 0 };
    const char *text = HEAD "param w : f32[2] init=zeros @models/m.xml:7\n";
    CHECK_INT(-1, parse_exact(text, strlen(text), &g, &err));
    CHECK_STR("models/m.xml", err.file);
    CHECK_INT(7, err.line);
    CHECK_CONTAINS(err.msg, "param 'w' is never used");
    CHECK_INT(0, g.n_values);
    /* A quoted name parses, but the verifier does not accept a space in it. */
    text = HEAD "node n = gelu(x) -> \"a b\" : f32[2]\n";
    CHECK_INT(-1, parse_exact(text, strlen(text), &g, &err));
    CHECK_CONTAINS(err.msg, "name 'a b' is not valid");
}

static void test_text_prints_invalid_names_quoted(void)
{
    ir_graph g;
    ir_graph_init(&g);
    ir_shape s = SHAPE(2);
    ir_add_value(&g, "a b\"c\\d\ne\x01", DT_F32, ROLE_INPUT, &s, nowhere);
    char *text = print_to_string(&g, 0);
    CHECK_STR("fusion-ir 1\nmodel \"\"\ninput \"a b\\\"c\\\\d\\ne\\x01\" : f32[2]\n", text);
    /* Parsed back, the name is the same bytes (the verifier then rejects it). */
    struct diag err = { 0 };
    ir_graph back;
    CHECK_INT(-1, parse_exact(text, strlen(text), &back, &err));
    CHECK_CONTAINS(err.msg, "is not valid");
    free(text);
    ir_graph_free(&g);
}

/* Every prefix of a valid text, then random corruptions: never a crash; when
 * a corrupted text parses, it round-trips too. */
static void test_text_parse_survives_truncation_and_corruption(void)
{
    ir_graph g;
    build_gpt_like(&g);
    char *text = print_to_string(&g, 0);
    size_t len = strlen(text);
    ir_graph_free(&g);
    struct diag err;
    int parsed = 0;
    for (size_t cut = 0; cut < len; cut++) {
        if (parse_exact(text, cut, &g, &err) == 0)
            parsed++;
        ir_graph_free(&g);
    }
    CHECK(parsed > 0); /* cutting after the last line still parses */
    uint64_t seed = 0x9e3779b97f4a7c15u;
    char *buf = malloc(len + 64);
    int round_trips_ok = 1;
    for (int iter = 0; iter < 4000; iter++) {
        memcpy(buf, text, len);
        size_t n = len;
        for (int k = 0; k < 1 + iter % 4; k++) {
            seed = seed * 6364136223846793005u + 1442695040888963407u;
            size_t pos = (size_t)(seed >> 33) % n;
            unsigned char byte = (unsigned char)(seed >> 20);
            static const char interesting[] = "\0\n\"\\[]()=,:@-> 9e.";
            if (seed & 1)
                byte = (unsigned char)interesting[(seed >> 8) % (sizeof interesting - 1)];
            buf[pos] = (char)byte;
        }
        if (parse_exact(buf, n, &g, &err) == 0) {
            char *a = print_to_string(&g, 0);
            ir_graph h;
            if (parse_exact(a, strlen(a), &h, &err) != 0) {
                round_trips_ok = 0;
            } else {
                char *b = print_to_string(&h, 0);
                if (strcmp(a, b) != 0)
                    round_trips_ok = 0;
                free(b);
                ir_graph_free(&h);
            }
            free(a);
        }
        ir_graph_free(&g);
    }
    CHECK(round_trips_ok);
    free(buf);
    free(text);
}

static void test_dot_renders_with_graphviz(void)
{
    CHECK_INT(0, system("command -v dot >/dev/null 2>&1")); /* graphviz is part of the toolchain */
    ir_graph graphs[2];
    build_gpt_like(&graphs[0]);
    build_cnn(&graphs[1]);
    for (int i = 0; i < 2; i++) {
        char path[] = "/tmp/test_ir_dot_XXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        FILE *f = fdopen(fd, "w");
        CHECK_INT(0, ir_graph_print_dot(&graphs[i], f));
        fclose(f);
        char cmd[256];
        snprintf(cmd, sizeof cmd, "dot -Tsvg -o /dev/null %s", path);
        CHECK_INT(0, system(cmd));
        unlink(path);
    }
    char *dot = print_to_string(&graphs[0], 1);
    CHECK_CONTAINS(dot, "rankdir=TB;");
    CHECK_CONTAINS(dot, "label=\"h.0.ln1\\nlayernorm\"");
    CHECK_CONTAINS(dot, "fillcolor=\"lightgray\", label=\"wte\"");
    CHECK_CONTAINS(dot, "fillcolor=\"lightblue\", label=\"idx\"");
    CHECK_CONTAINS(dot, "fillcolor=\"lightyellow\", label=\"adam.m:wte\"");
    CHECK_CONTAINS(dot, "n4 -> n5 [label=\"[4,64,768]\"];"); /* ln1 -> qkv */
    free(dot);
    dot = print_to_string(&graphs[1], 1);
    CHECK_CONTAINS(dot, "digraph \"my \\\"tiny\\\" resnet\"");
    free(dot);
    ir_graph_free(&graphs[0]);
    ir_graph_free(&graphs[1]);
}

/* One output named like its node prints without "-> NAME" and reads back;
 * a gradient keeps its role word. */
static void test_text_short_form_for_an_output_named_like_its_node(void)
{
    ir_graph g;
    ir_graph_init(&g);
    g.name = ir_intern(&g, "short");
    int64_t d2[] = { 2, 3 };
    int32_t x = source(&g, "x", DT_F32, ROLE_INPUT, ir_shape_make(2, d2), nowhere);
    int32_t n = node(&g, OP_RELU, "y", x, -1, -1, at(&g, "m.xml", 4));
    out(&g, n, "y", DT_F32, ir_shape_make(2, d2));
    int32_t n2 = node(&g, OP_RELU, "dy", x, -1, -1, nowhere);
    int32_t dy = out(&g, n2, "dy", DT_F32, ir_shape_make(2, d2));
    g.values[dy].role = ROLE_GRADIENT;
    int32_t n3 = node(&g, OP_RELU, "z.node", x, -1, -1, nowhere);
    out(&g, n3, "z", DT_F32, ir_shape_make(2, d2));
    g.values[x].offset = 128; /* placed by a memory pass */
    g.nodes[n].ws_offset = 4096;
    g.after_pass = ir_intern(&g, "shapes");
    char *text = print_to_string(&g, 0);
    CHECK_CONTAINS(text, "model short\nafter shapes\ninput x");
    CHECK_CONTAINS(text, "\ninput x : f32[2,3] at=128\n");
    CHECK_CONTAINS(text, "\nnode y = relu(x) : f32[2,3] ws=4096 @m.xml:4\n");
    CHECK_CONTAINS(text, "\nnode dy = relu(x) : f32[2,3] gradient\n");
    CHECK_CONTAINS(text, "\nnode z.node = relu(x) -> z : f32[2,3]\n");
    check_round_trip(&g, "short forms");
    free(text);
    ir_graph_free(&g);
}

/* "precision bf16" / "precision f32 tf32" after the model line round-trip;
 * f32 without tf32 (the default) prints no line; bad ones are refused. */
static void test_text_precision_line_round_trips(void)
{
    ir_graph g;
    ir_graph_init(&g);
    build_gpt_like(&g);
    char *text = print_to_string(&g, 0);
    CHECK(text && !strstr(text, "\nprecision "));
    free(text);
    g.precision = DT_BF16;
    text = print_to_string(&g, 0);
    CHECK_CONTAINS(text, "\nprecision bf16\n");
    free(text);
    check_round_trip(&g, "bf16 graph");
    g.precision = DT_F32;
    g.tf32 = 1;
    text = print_to_string(&g, 0);
    CHECK_CONTAINS(text, "\nprecision f32 tf32\n");
    free(text);
    check_round_trip(&g, "tf32 graph");
    ir_graph_free(&g);
    PARSE_ERROR("fusion-ir 1\nmodel m\nprecision i32\n", 3, "expected a precision (f32, bf16 or f16), found 'i32'");
    PARSE_ERROR("fusion-ir 1\nmodel m\nprecision bf16 tf32\n", 3,
                "expected the end of the line (tf32 is for f32), found 'tf32'");
    PARSE_ERROR("fusion-ir 1\nmodel m\nprecision f16\nprecision f16\n", 4, "'precision' must come once");
}

int main(void)
{
    test_text_prints_the_documented_form();
    test_text_short_form_for_an_output_named_like_its_node();
    test_text_round_trips_gpt_like_graph();
    test_text_round_trips_cnn_with_quoted_names();
    test_text_parse_accepts_comments_blank_lines_crlf_and_quotes();
    test_text_placement_line_round_trips();
    test_text_precision_line_round_trips();
    test_text_parse_errors_name_line_expected_and_found();
    test_text_parse_errors_in_the_placement_line();
    test_text_parse_runs_the_verifier_with_source_locations();
    test_text_prints_invalid_names_quoted();
    test_text_parse_survives_truncation_and_corruption();
    test_dot_renders_with_graphviz();
    CHECK_DONE();
}
