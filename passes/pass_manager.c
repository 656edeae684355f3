/* pass_manager.c: runs pass_pipeline[] in order, verifying after each pass
 * and dumping the IR after the one the user asked for. */
#include <string.h>

#include "passes.h"

#include "../ir/view.h"

/* The passes that need no options. */
static int run_shapes(ir_graph *g, const pass_options *o, struct diag *e) { return pass_shapes(g, e); }
/* An inference graph (the decode pass's: an output, no loss) trains nothing. */
static int run_autodiff(ir_graph *g, const pass_options *o, struct diag *e)
{
    return g->output >= 0 ? 0 : pass_autodiff(g, e);
}
static int run_optimizer(ir_graph *g, const pass_options *o, struct diag *e)
{
    return g->output >= 0 ? 0 : pass_optimizer(g, e);
}
static int run_memory(ir_graph *g, const pass_options *o, struct diag *e) { return pass_memory(g, e); }

const pass pass_pipeline[] = {
    { "shapes", "infer and check the shape and dtype of every value", run_shapes },
    { "running_stats", "batch norm's running mean and variance: state training keeps, validation normalises by",
      pass_running_stats },
    { "adapters", "--freeze: mark the parameters that do not train (no gradient, no optimizer state)", pass_adapters },
    { "precision", "store activations and their gradients in --precision (f32, bf16, f16)", pass_precision },
    { "decode", "inference: the logits as the result, token positions, attention against a key/value cache",
      pass_decode },
    { "autodiff", "append the backward ops: the gradient of the loss for every param", run_autodiff },
    { "optimizer", "append the AdamW update of every param (schedule, clipping, moments)", run_optimizer },
    { "estimate", "workload estimator: each op's time on the cluster's devices", pass_estimate },
    { "fence", "OP-Fence: fences of similar bandwidth, stages, replicas, micro-batches", pass_fence },
    { "prefill", "inference: the step again for a prompt's chunk of --prefill tokens, on the same devices",
      pass_prefill },
    { "comm", "cut edges become send/recv pairs (remote autodiff); replicas all-reduce", pass_comm },
    { "compress", "AdaTopK: top-k or row quantisation for the send/recv pairs on links the pipeline waits for",
      pass_compress },
    { "schedule", "1F1B warm-up per stage: enough forwards in flight to cover slow links' round trips", pass_schedule },
    { "memory", "place every value and scratch in its device's arena, reusing dead memory", run_memory },
};
const int pass_count = (int)(sizeof pass_pipeline / sizeof pass_pipeline[0]);

int pass_name_known(const char *name)
{
    if (strcmp(name, "frontend") == 0)
        return 1;
    for (int i = 0; i < pass_count; i++)
        if (strcmp(name, pass_pipeline[i].name) == 0)
            return 1;
    return 0;
}

const char *pass_names(void)
{
    static char names[512];
    snprintf(names, sizeof names, "frontend");
    for (int i = 0; i < pass_count; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), ", %s", pass_pipeline[i].name);
    return names;
}

/* Print the IR if `stage` is the one asked for; tell the caller to stop. */
static int maybe_dump(const ir_graph *g, const char *stage, const pass_options *opt, int *stop)
{
    if (!opt || !opt->dump_after || strcmp(opt->dump_after, stage) != 0)
        return 0;
    if (opt->stop_after)
        *stop = 1;
    FILE *out = opt->dump_out ? opt->dump_out : stdout;
    if (!opt->dump_view)
        return ir_graph_print(g, out);
    return opt->dump_html ? ir_graph_print_html(g, opt->dump_view, out)
                          : ir_graph_print_dot_view(g, opt->dump_view, out);
}

/* Index of the first pass still to run on g (0 for a graph as built). */
static int first_pass_to_run(const ir_graph *g, struct diag *err)
{
    const char *done = ir_str(g, g->after_pass);
    if (!done[0])
        return 0;
    for (int i = 0; i < pass_count; i++)
        if (strcmp(done, pass_pipeline[i].name) == 0)
            return i + 1;
    return diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0,
                    "the graph is 'after %s', which is not a pass (the passes: %s)", done, pass_names());
}

int pass_run_pipeline(ir_graph *g, const pass_options *opt, struct diag *err)
{
    static const pass_options no_options;
    int stop = 0, first = first_pass_to_run(g, err);
    if (first < 0)
        return -1;
    const char *stage = first == 0 ? "frontend" : pass_pipeline[first - 1].name;
    if (ir_graph_verify(g, err)) {
        diag_prefix(err, "%s: ", stage);
        return -1;
    }
    /* Asking for a stage the graph is already past is an error, not silence. */
    if (opt && opt->dump_after && strcmp(opt->dump_after, stage) != 0) {
        int known_ahead = 0;
        for (int i = first; i < pass_count; i++)
            known_ahead |= strcmp(opt->dump_after, pass_pipeline[i].name) == 0;
        if (!known_ahead)
            return diag_set(err, ir_loc_file(g, (ir_loc){ 0, 0 }), 0,
                            "the graph is already past '%s' (it is after '%s')", opt->dump_after, stage);
    }
    if (maybe_dump(g, stage, opt, &stop))
        return diag_set(err, "<output>", 0, "cannot write the IR dump");
    for (int i = first; i < pass_count && !stop; i++) {
        const pass *p = &pass_pipeline[i];
        if (p->run(g, opt ? opt : &no_options, err) || ir_graph_verify(g, err)) {
            diag_prefix(err, "%s: ", p->name);
            return -1;
        }
        g->after_pass = ir_intern(g, p->name);
        if (g->after_pass == IR_STR_NONE)
            return diag_set(err, "<memory>", 0, "out of memory");
        if (maybe_dump(g, p->name, opt, &stop))
            return diag_set(err, "<output>", 0, "cannot write the IR dump");
        if (opt && opt->last_pass && strcmp(opt->last_pass, p->name) == 0)
            stop = 1;
    }
    return 0;
}
