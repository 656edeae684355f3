/* test_autodiff: the structure the autodiff pass appends: a gradient
 * grad.<p> with p's shape for every param, contributions summed where a
 * value fans out, nothing for integer inputs, the forward op's location on
 * its backward op, copies and zeros for the corner cases.  (That the
 * gradients are numerically right is checked by executing the graph, in
 * the runtime's tests.) */
#include <stdlib.h>
#include <string.h>

#include "../../frontend/model.h"
#include "../../passes/passes.h"
#include "check.h"

static int load(const char *xml, ir_graph *g)
{
    struct diag err = { 0 };
    if (model_load_memory(xml, strlen(xml), "t.xml", NULL, 0, g, &err) || pass_run_pipeline(g, NULL, &err)) {
        fprintf(stderr, "  %s:%d: %s\n", err.file, err.line, err.msg);
        return -1;
    }
    return 0;
}

static const ir_node *producer_of(const ir_graph *g, const char *value)
{
    int32_t v = ir_find_value(g, value);
    return v >= 0 && g->values[v].producer >= 0 ? &g->nodes[g->values[v].producer] : NULL;
}

static void test_autodiff_every_param_gets_grad_of_its_shape(void)
{
    const char *models[] = { "models/mlp.xml", "models/gpt2.xml", "models/resnet.xml" };
    for (int m = 0; m < 3; m++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", getenv("FUSION_SOURCE_DIR") ? getenv("FUSION_SOURCE_DIR") : ".",
                 models[m]);
        model_setting small[] = { { "layers", "2", NULL }, { "seq", "16", NULL } };
        ir_graph g;
        struct diag err = { 0 };
        int n_sets = m == 1 ? 2 : 0;
        CHECK(model_load(path, small, n_sets, &g, &err) == 0 && pass_run_pipeline(&g, NULL, &err) == 0);
        int params = 0, with_grad = 0;
        for (int32_t v = 0; v < g.n_values; v++) {
            if (g.values[v].role != ROLE_PARAM)
                continue;
            params++;
            char name[300];
            snprintf(name, sizeof name, "grad.%s", ir_value_name(&g, v));
            int32_t gv = ir_find_value(&g, name);
            if (gv >= 0 && ir_shape_equal(&g.values[gv].shape, &g.values[v].shape) &&
                g.values[gv].role == ROLE_GRADIENT && g.nodes[g.values[gv].producer].phase == PHASE_BACKWARD)
                with_grad++;
            else
                fprintf(stderr, "  %s: no proper %s\n", models[m], name);
        }
        CHECK(params > 0);
        CHECK_INT(params, with_grad);
        /* No integer value has a gradient. */
        for (int32_t v = 0; v < g.n_values; v++)
            if (g.values[v].dtype == DT_I32) {
                char name[300];
                snprintf(name, sizeof name, "grad.%s", ir_value_name(&g, v));
                CHECK(ir_find_value(&g, name) < 0);
            }
        ir_graph_free(&g);
    }
}

static void test_autodiff_sums_fan_out_and_tied_weights(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/models/gpt2.xml", getenv("FUSION_SOURCE_DIR") ? getenv("FUSION_SOURCE_DIR") : ".");
    model_setting small[] = { { "layers", "1", NULL }, { "seq", "8", NULL }, { "batch", "2", NULL } };
    ir_graph g;
    struct diag err = { 0 };
    CHECK(model_load(path, small, 3, &g, &err) == 0 && pass_run_pipeline(&g, NULL, &err) == 0);
    /* wte.weight is the token table and the output projection: two contributions. */
    const ir_node *sum = producer_of(&g, "grad.wte.weight");
    CHECK(sum && sum->op == OP_ADD);
    if (sum) {
        CHECK_STR("grad.wte.weight.1", ir_value_name(&g, sum->in[0]));
        CHECK_STR("grad.wte.weight.2", ir_value_name(&g, sum->in[1]));
    }
    const ir_node *lin = producer_of(&g, "grad.wte.weight.1");
    CHECK(lin && lin->op == OP_LINEAR_BACKWARD && lin->loc.line > 0);
    /* The backward op carries its forward op's location and attributes. */
    const ir_node *att = producer_of(&g, "grad.h.0.qkv");
    CHECK(att && att->op == OP_ATTENTION_BACKWARD);
    if (att) {
        CHECK_INT(12, ir_node_int(att, ATTR_HEADS, 0));
        const ir_node *fwd = producer_of(&g, "h.0.attn");
        CHECK(fwd && fwd->loc.line == att->loc.line);
    }
    /* The seed. */
    const ir_node *seed = producer_of(&g, "grad.loss");
    CHECK(seed && seed->op == OP_FILL && ir_node_float(seed, ATTR_VALUE, 0) == 1.0);
    ir_graph_free(&g);
}

static void test_autodiff_param_added_directly_and_param_off_the_loss_path(void)
{
    const char *xml = "<?xml version=\"1.0\"?>\n<model name=\"t\">\n"
                      "<input name=\"x\" shape=\"2, 3\"/>\n"
                      "<input name=\"labels\" dtype=\"i32\" shape=\"2\"/>\n"
                      "<param name=\"shift\" shape=\"2, 3\" init=\"zeros\"/>\n"
                      "<param name=\"unused_by_loss\" shape=\"2, 3\" init=\"zeros\"/>\n"
                      "<op type=\"add\" in=\"x, shift\" out=\"y\"/>\n"
                      "<op type=\"relu\" in=\"unused_by_loss\" out=\"side\"/>\n"
                      "<op type=\"cross_entropy\" in=\"y, labels\" out=\"loss\"/>\n"
                      "<loss value=\"loss\"/>\n</model>\n";
    ir_graph g;
    CHECK(load(xml, &g) == 0);
    const ir_node *copy = producer_of(&g, "grad.shift");
    CHECK(copy && copy->op == OP_COPY);
    if (copy)
        CHECK_STR("grad.y", ir_value_name(&g, copy->in[0]));
    const ir_node *zero = producer_of(&g, "grad.unused_by_loss");
    CHECK(zero && zero->op == OP_FILL && ir_node_float(zero, ATTR_VALUE, 1) == 0.0);
    CHECK(ir_find_value(&g, "grad.side") < 0); /* off the loss path: not differentiated */
    ir_graph_free(&g);
}

int main(void)
{
    test_autodiff_every_param_gets_grad_of_its_shape();
    test_autodiff_sums_fan_out_and_tied_weights();
    test_autodiff_param_added_directly_and_param_off_the_loss_path();
    CHECK_DONE();
}
