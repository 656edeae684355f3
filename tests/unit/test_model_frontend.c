/* test_model_frontend: model XML -> OP-DAG (frontend/model.h) and the
 * shapes pass: repeat naming and carry, scoping, aliases, lets, if/else,
 * forward references, cycles, --set overrides, and error locations. */
#include <stdio.h>
#include <string.h>

#include "../../frontend/model.h"
#include "../../passes/passes.h"
#include "check.h"

#define HEAD "<?xml version=\"1.0\"?>\n<model name=\"t\">\n" /* lines 1-2 */

/* Load `xml` (then run the passes); returns 0 or -1 with err filled. */
static int load(const char *xml, const model_setting *sets, int n_sets, ir_graph *g, struct diag *err)
{
    memset(err, 0, sizeof *err);
    if (model_load_memory(xml, strlen(xml), "t.xml", sets, n_sets, g, err))
        return -1;
    if (pass_run_pipeline(g, NULL, err)) {
        ir_graph_free(g);
        ir_graph_init(g);
        return -1;
    }
    return 0;
}

/* Ops the model file made (the passes append backward ops after them). */
static int forward_ops(const ir_graph *g)
{
    int n = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].phase == PHASE_FORWARD;
    return n;
}

static const char *shape_of(const ir_graph *g, const char *name)
{
    static char buf[128];
    int32_t v = ir_find_value(g, name);
    if (v < 0)
        return "(no such value)";
    return ir_shape_str(&g->values[v].shape, buf, sizeof buf);
}

static void test_model_repeat_names_instances_and_chains_them(void)
{
    const char *xml =
        HEAD "<hyper name=\"n\" value=\"3\"/>\n"
             "<input name=\"x\" shape=\"2, 4\"/>\n"
             "<repeat name=\"blk\" count=\"n\" var=\"i\" input=\"x\" carry=\"h\" result=\"out\" output=\"y\">\n"
             "  <param name=\"w\" shape=\"4, 4\" init=\"normal(0.1 * (i + 1))\"/>\n"
             "  <op type=\"linear\" in=\"h, w\" out=\"out\"/>\n"
             "</repeat>\n"
             "<input name=\"labels\" dtype=\"i32\" shape=\"2\"/>\n"
             "<op type=\"cross_entropy\" in=\"y, labels\" out=\"loss\"/>\n"
             "<loss value=\"loss\"/>\n</model>\n";
    ir_graph g;
    struct diag err;
    CHECK(load(xml, NULL, 0, &g, &err) == 0);
    if (err.msg[0])
        fprintf(stderr, "  %s:%d: %s\n", err.file, err.line, err.msg);
    CHECK_INT(4, forward_ops(&g));
    CHECK(ir_find_value(&g, "blk.0.w") >= 0);
    CHECK(ir_find_value(&g, "blk.2.w") >= 0);
    CHECK(ir_find_value(&g, "blk.3.w") < 0);
    CHECK_NEAR(0.3, g.values[ir_find_value(&g, "blk.2.w")].init.a, 1e-12);
    /* instance 1 reads instance 0's result; instance 0 reads x */
    int32_t n1 = g.values[ir_find_value(&g, "blk.1.out")].producer;
    CHECK_STR("blk.0.out", ir_value_name(&g, g.nodes[n1].in[0]));
    int32_t n0 = g.values[ir_find_value(&g, "blk.0.out")].producer;
    CHECK_STR("x", ir_value_name(&g, g.nodes[n0].in[0]));
    CHECK_STR("[]", shape_of(&g, "loss"));
    CHECK_INT(7, g.nodes[n0].loc.line); /* the <op> line inside the repeat */
    ir_graph_free(&g);

    /* --set n=0: the repeat vanishes and y is x itself. */
    model_setting zero = { "n", "0", NULL };
    CHECK(load(xml, &zero, 1, &g, &err) == 0);
    CHECK_INT(1, forward_ops(&g));
    CHECK_STR("x", ir_value_name(&g, g.nodes[0].in[0]));
    ir_graph_free(&g);
}

static void test_model_nested_repeat_if_else_alias_and_let(void)
{
    const char *xml = HEAD "<input name=\"x\" shape=\"2, 8\"/>\n"
                           "<repeat name=\"stage\" count=\"2\" var=\"s\" start=\"1\" input=\"x\" carry=\"x\" "
                           "result=\"out\" output=\"f\">\n"
                           "  <let name=\"width\" value=\"s * 8\"/>\n"
                           "  <repeat count=\"2\" var=\"b\" input=\"x\" carry=\"x\" result=\"out\" output=\"out\">\n"
                           "    <let name=\"fan_in\" value=\"b == 0 &amp;&amp; s == 2 ? 8 : width\"/>\n"
                           "    <param name=\"w\" shape=\"width, fan_in\" init=\"zeros\"/>\n"
                           "    <op type=\"linear\" in=\"x, w\" out=\"main\"/>\n"
                           "    <if test=\"fan_in != width\">\n"
                           "      <param name=\"proj\" shape=\"width, fan_in\" init=\"ones\"/>\n"
                           "      <op type=\"linear\" in=\"x, proj\" out=\"short\"/>\n"
                           "    </if>\n"
                           "    <else><alias name=\"short\" to=\"x\"/></else>\n"
                           "    <op type=\"add\" in=\"main, short\" out=\"out\"/>\n"
                           "  </repeat>\n"
                           "</repeat>\n"
                           "<input name=\"labels\" dtype=\"i32\" shape=\"2\"/>\n"
                           "<op type=\"cross_entropy\" in=\"f, labels\" out=\"loss\"/>\n"
                           "<loss value=\"loss\"/>\n</model>\n";
    ir_graph g;
    struct diag err;
    CHECK(load(xml, NULL, 0, &g, &err) == 0);
    if (err.msg[0])
        fprintf(stderr, "  %s:%d: %s\n", err.file, err.line, err.msg);
    CHECK_STR("[16,8]", shape_of(&g, "stage.2.0.w"));
    CHECK_STR("[16,8]", shape_of(&g, "stage.2.0.proj"));
    CHECK_STR("[16,16]", shape_of(&g, "stage.2.1.w"));
    CHECK(ir_find_value(&g, "stage.1.0.proj") < 0); /* else branch: alias only */
    CHECK(ir_find_value(&g, "stage.2.1.proj") < 0);
    CHECK_STR("[2,16]", shape_of(&g, "stage.2.1.out"));
    int32_t add = g.values[ir_find_value(&g, "stage.1.0.out")].producer;
    CHECK_STR("x", ir_value_name(&g, g.nodes[add].in[1])); /* the alias resolved to x */
    ir_graph_free(&g);
}

static void test_model_forward_references_are_sorted(void)
{
    const char *xml = HEAD "<input name=\"x\" shape=\"2, 3\"/>\n"
                           "<input name=\"labels\" dtype=\"i32\" shape=\"2\"/>\n"
                           "<op type=\"cross_entropy\" in=\"b, labels\" out=\"loss\"/>\n"
                           "<op type=\"relu\" in=\"a\" out=\"b\"/>\n"
                           "<op type=\"relu\" in=\"x\" out=\"a\"/>\n"
                           "<loss value=\"loss\"/>\n</model>\n";
    ir_graph g;
    struct diag err;
    CHECK(load(xml, NULL, 0, &g, &err) == 0);
    CHECK_STR("a", ir_node_name(&g, 0));
    CHECK_STR("b", ir_node_name(&g, 1));
    CHECK_STR("loss", ir_node_name(&g, 2));
    ir_graph_free(&g);
}

/* Load must fail at `line` with `needle` in the message. */
static void expect_error(const char *xml, const model_setting *sets, int n_sets, int line, const char *needle)
{
    ir_graph g;
    struct diag err;
    CHECK(load(xml, sets, n_sets, &g, &err) == -1);
    CHECK_STR("t.xml", err.file);
    CHECK_INT(line, err.line);
    CHECK_CONTAINS(err.msg, needle);
    CHECK(strchr(err.msg, '\n') == NULL);
    CHECK_INT(0, g.n_nodes); /* nothing half-built is handed back */
    ir_graph_free(&g);
}

static void test_model_errors_name_file_line_and_what(void)
{
    const char *cycle = HEAD "<input name=\"x\" shape=\"2, 3\"/>\n"
                             "<op type=\"add\" in=\"x, b\" out=\"a\"/>\n"
                             "<op type=\"relu\" in=\"a\" out=\"b\"/>\n"
                             "<loss value=\"b\"/>\n</model>\n";
    expect_error(cycle, NULL, 0, 4, "cycle");

    const char *mismatch = HEAD "<input name=\"x\" shape=\"2, 3\"/>\n"
                                "<param name=\"w\" shape=\"5, 4\" init=\"zeros\"/>\n"
                                "<op type=\"linear\" name=\"fc\" in=\"x, w\" out=\"y\"/>\n"
                                "<loss value=\"y\"/>\n</model>\n";
    expect_error(mismatch, NULL, 0, 5, "op 'fc' (linear)");
    expect_error(mismatch, NULL, 0, 5, "[2,3]");
    expect_error(mismatch, NULL, 0, 5, "[5,4]");

    const char *undefined = HEAD "<input name=\"x\" shape=\"2, 3\"/>\n"
                                 "<op type=\"relu\" in=\"xx\" out=\"y\"/>\n"
                                 "<loss value=\"y\"/>\n</model>\n";
    expect_error(undefined, NULL, 0, 4, "input 'xx' is not defined");

    const char *twice = HEAD "<input name=\"x\" shape=\"2, 3\"/>\n"
                             "<input name=\"x\" shape=\"2, 3\"/>\n"
                             "<loss value=\"x\"/>\n</model>\n";
    expect_error(twice, NULL, 0, 4, "first at line 3");

    const char *overflow = HEAD "<hyper name=\"big\" value=\"4294967296\"/>\n"
                                "<input name=\"x\" shape=\"big * big * big\"/>\n"
                                "<loss value=\"x\"/>\n</model>\n";
    expect_error(overflow, NULL, 0, 4, "integer overflow");

    const char *absurd = HEAD "<input name=\"x\" shape=\"1048576, 1048576, 4\"/>\n"
                              "<loss value=\"x\"/>\n</model>\n";
    expect_error(absurd, NULL, 0, 3, "absurd");

    const char *bad_set = HEAD "<hyper name=\"n\" value=\"3\"/>\n"
                               "<input name=\"x\" shape=\"n\"/>\n"
                               "<loss value=\"x\"/>\n</model>\n";
    model_setting s = { "n", "3 +", NULL };
    expect_error(bad_set, &s, 1, 3, "--set n=3 +");
    model_setting neg = { "n", "-2", NULL };
    expect_error(bad_set, &neg, 1, 4, "dimension 1 is -2");

    const char *no_heads = HEAD "<input name=\"x\" shape=\"2, 3, 12\"/>\n"
                                "<op type=\"attention\" in=\"x\" out=\"y\"/>\n"
                                "<loss value=\"y\"/>\n</model>\n";
    expect_error(no_heads, NULL, 0, 4, "needs the attribute 'heads'");

    const char *wrong_attr = HEAD "<input name=\"x\" shape=\"2, 3\"/>\n"
                                  "<op type=\"relu\" in=\"x\" out=\"y\" heads=\"2\"/>\n"
                                  "<loss value=\"y\"/>\n</model>\n";
    expect_error(wrong_attr, NULL, 0, 4, "takes no attribute 'heads'");

    const char *runaway =
        HEAD "<input name=\"x\" shape=\"2\"/>\n"
             "<repeat name=\"r\" count=\"1000000000\" input=\"x\" carry=\"h\" result=\"o\" output=\"y\">\n"
             "  <op type=\"relu\" in=\"h\" out=\"o\"/>\n"
             "</repeat>\n"
             "<loss value=\"y\"/>\n</model>\n";
    expect_error(runaway, NULL, 0, 4, "repeat count 1000000000");

    const char *schema = HEAD "<input name=\"x\" shape=\"2\" colour=\"red\"/>\n"
                              "<loss value=\"x\"/>\n</model>\n";
    expect_error(schema, NULL, 0, 3, "colour");
}

int main(void)
{
    test_model_repeat_names_instances_and_chains_them();
    test_model_nested_repeat_if_else_alias_and_let();
    test_model_forward_references_are_sorted();
    test_model_errors_name_file_line_and_what();
    CHECK_DONE();
}
