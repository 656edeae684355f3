/* test_optimizer_pass: the AdamW update ops the optimizer pass appends:
 * one per param reading its gradient and zero-initialised moments, the
 * schedule and clipping from the model's hyper-parameters, weight decay on
 * matrices only, and a clear error for out-of-range settings. */
#include <string.h>

#include "../../frontend/model.h"
#include "../../passes/passes.h"
#include "check.h"

static const char *model_with(const char *hypers, char *buf, size_t size)
{
    snprintf(buf, size,
             "<?xml version=\"1.0\"?>\n<model name=\"t\">\n%s"
             "<input name=\"x\" shape=\"4, 3\"/>\n<input name=\"labels\" dtype=\"i32\" shape=\"4\"/>\n"
             "<param name=\"w\" shape=\"5, 3\" init=\"normal(0.1)\"/>\n<param name=\"b\" shape=\"5\" init=\"zeros\"/>\n"
             "<op type=\"linear\" in=\"x, w, b\" out=\"logits\"/>\n"
             "<op type=\"cross_entropy\" in=\"logits, labels\" out=\"loss\"/>\n<loss value=\"loss\"/>\n</model>\n",
             hypers);
    return buf;
}

static const ir_node *node_named(const ir_graph *g, const char *name)
{
    for (int32_t i = 0; i < g->n_nodes; i++)
        if (strcmp(ir_node_name(g, i), name) == 0)
            return &g->nodes[i];
    return NULL;
}

static void test_optimizer_defaults_one_adamw_per_param(void)
{
    char xml[4096];
    model_with("", xml, sizeof xml);
    ir_graph g;
    struct diag err = { 0 };
    CHECK(model_load_memory(xml, strlen(xml), "t.xml", NULL, 0, &g, &err) == 0);
    CHECK(pass_run_pipeline(&g, NULL, &err) == 0);
    const ir_node *w = node_named(&g, "adamw.w"), *b = node_named(&g, "adamw.b");
    CHECK(w && b);
    if (w && b) {
        CHECK_INT(6, w->n_in); /* the scale input: clip_scale is always there (max_norm 0: 1) */
        CHECK_STR("grad.w", ir_value_name(&g, w->in[1]));
        CHECK_STR("adamw.m.w", ir_value_name(&g, w->in[2]));
        CHECK_INT(ROLE_STATE, g.values[w->in[3]].role);
        CHECK_INT(INIT_ZEROS, g.values[w->in[3]].init.kind);
        CHECK_NEAR(0.999, ir_node_float(w, ATTR_BETA2, 0), 0);
        CHECK_INT(PHASE_UPDATE, w->phase);
    }
    const ir_node *lr = node_named(&g, "optimizer.lr");
    CHECK(lr && ir_node_float(lr, ATTR_LR, 0) == 6e-4 && ir_node_int(lr, ATTR_STEPS, -1) == 0);
    /* no clipping by default, but the norm is summed (the step's line, --grad-clip at run time) */
    const ir_node *clip = node_named(&g, "clip_scale");
    CHECK(clip && ir_node_float(clip, ATTR_MAX_NORM, -1) == 0);
    ir_graph_free(&g);
}

static void test_optimizer_reads_hypers_clips_and_decays_matrices_only(void)
{
    char xml[4096];
    model_with("<hyper name=\"lr\" value=\"1e-3\"/>\n<hyper name=\"weight_decay\" value=\"0.1\"/>\n"
               "<hyper name=\"grad_clip\" value=\"1.0\"/>\n<hyper name=\"warmup\" value=\"10\"/>\n"
               "<hyper name=\"steps\" value=\"100\"/>\n<hyper name=\"beta2\" value=\"0.95\"/>\n",
               xml, sizeof xml);
    ir_graph g;
    struct diag err = { 0 };
    CHECK(model_load_memory(xml, strlen(xml), "t.xml", NULL, 0, &g, &err) == 0);
    CHECK(pass_run_pipeline(&g, NULL, &err) == 0);
    const ir_node *w = node_named(&g, "adamw.w"), *b = node_named(&g, "adamw.b");
    const ir_node *clip = node_named(&g, "clip_scale"), *lr = node_named(&g, "optimizer.lr");
    CHECK(w && b && clip && lr);
    if (w && b && clip && lr) {
        CHECK_NEAR(0.1, ir_node_float(w, ATTR_WEIGHT_DECAY, -1), 0);
        CHECK_NEAR(0.0, ir_node_float(b, ATTR_WEIGHT_DECAY, -1), 0);
        CHECK_NEAR(0.95, ir_node_float(w, ATTR_BETA2, 0), 0);
        CHECK_INT(6, w->n_in);
        CHECK_STR("clip_scale", ir_value_name(&g, w->in[5]));
        CHECK_NEAR(1.0, ir_node_float(clip, ATTR_MAX_NORM, 0), 0);
        CHECK_STR("sumsq.b", ir_value_name(&g, clip->in[0])); /* the chain ends with the last param */
        CHECK_INT(10, ir_node_int(lr, ATTR_WARMUP, 0));
        CHECK_INT(100, ir_node_int(lr, ATTR_STEPS, 0));
    }
    const ir_node *sb = node_named(&g, "sumsq.b");
    CHECK(sb && sb->n_in == 2 && strcmp(ir_value_name(&g, sb->in[1]), "sumsq.w") == 0);
    ir_graph_free(&g);
}

static void test_optimizer_rejects_out_of_range_settings(void)
{
    char xml[4096];
    model_with("<hyper name=\"beta1\" value=\"1.5\"/>\n", xml, sizeof xml);
    ir_graph g;
    struct diag err = { 0 };
    CHECK(model_load_memory(xml, strlen(xml), "t.xml", NULL, 0, &g, &err) == 0);
    CHECK(pass_run_pipeline(&g, NULL, &err) == -1);
    CHECK_CONTAINS(err.msg, "optimizer: optimizer hyper-parameters out of range");
    CHECK_STR("t.xml", err.file);
    ir_graph_free(&g);
    model_with("<hyper name=\"warmup\" value=\"10\"/>\n<hyper name=\"steps\" value=\"5\"/>\n", xml, sizeof xml);
    CHECK(model_load_memory(xml, strlen(xml), "t.xml", NULL, 0, &g, &err) == 0);
    CHECK(pass_run_pipeline(&g, NULL, &err) == -1);
    CHECK_CONTAINS(err.msg, "warmup (10) must be shorter than steps (5)");
    ir_graph_free(&g);
}

int main(void)
{
    test_optimizer_defaults_one_adamw_per_param();
    test_optimizer_reads_hypers_clips_and_decays_matrices_only();
    test_optimizer_rejects_out_of_range_settings();
    CHECK_DONE();
}
