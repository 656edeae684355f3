/* test_memory_pass: the arena plan.  Every value and scratch is placed,
 * aligned, and never shares bytes with a buffer alive at the same time;
 * memory is reused (the plan is well below the sum of all buffers); and a
 * step run on the planned arena gives bitwise the same loss and gradients
 * as one where every value has memory of its own. */
#include <stdlib.h>
#include <string.h>

#include "../../frontend/model.h"
#include "../../ir/ops.h"
#include "../../passes/passes.h"
#include "check.h"
#include "graph_runner.h"

static int load_with(const char *file, const model_setting *sets, int n_sets, const pass_options *opt, ir_graph *g)
{
    char path[1024];
    struct diag err = { 0 };
    snprintf(path, sizeof path, "%s/%s", getenv("FUSION_SOURCE_DIR") ? getenv("FUSION_SOURCE_DIR") : ".", file);
    if (model_load(path, sets, n_sets, g, &err) || pass_run_pipeline(g, opt, &err)) {
        fprintf(stderr, "  %s:%d: %s\n", err.file, err.line, err.msg);
        return -1;
    }
    return 0;
}

static int load(const char *file, const model_setting *sets, int n_sets, ir_graph *g)
{
    return load_with(file, sets, n_sets, NULL, g);
}

/* Lifetimes as the pass defines them, recomputed independently. */
static void lifetimes(const ir_graph *g, int32_t *start, int32_t *end)
{
    int32_t last = g->n_nodes - 1;
    for (int32_t v = 0; v < g->n_values; v++) {
        int whole = g->values[v].producer < 0 || v == g->loss;
        start[v] = whole ? 0 : g->values[v].producer;
        end[v] = whole ? last : start[v];
    }
    for (int32_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i].n_in; k++)
            if (end[g->nodes[i].in[k]] < i && op_reads_input(&g->nodes[i], k))
                end[g->nodes[i].in[k]] = i;
}

/* Is b written over a (op_def.in_place) by the op that reads a last and makes b? */
static int written_over(const ir_graph *g, int32_t a, int32_t b, const int32_t *start, const int32_t *end)
{
    if (g->values[b].producer < 0 || start[b] != end[a])
        return 0;
    const ir_node *n = &g->nodes[g->values[b].producer];
    int k = op_table[n->op].in_place - 1;
    return k >= 0 && k < n->n_in && n->in[k] == a && n->out[0] == b;
}

/* g's plan: every value placed and aligned, none sharing bytes with one
 * alive at the same time, and memory reused; file names it. */
static void check_placed(const char *file, ir_graph *g_)
{
    ir_graph g = *g_;
    int32_t *start = malloc((size_t)g.n_values * sizeof *start), *end = malloc((size_t)g.n_values * sizeof *end);
    lifetimes(&g, start, end);
    int64_t arena = memory_arena_bytes(&g, 0), total = 0;
    int overlaps = 0, unplaced = 0, misaligned = 0, over = 0;
    for (int32_t a = 0; a < g.n_values; a++) {
        int64_t sa = g.values[a].offset, ea = sa + ir_value_bytes(&g, a);
        unplaced += sa < 0;
        misaligned += sa % 64 != 0;
        total += ir_value_bytes(&g, a);
        CHECK(ea <= arena);
        for (int32_t b = a + 1; b < g.n_values; b++) {
            int64_t sb = g.values[b].offset, eb = sb + ir_value_bytes(&g, b);
            int live_together = start[a] <= end[b] && start[b] <= end[a];
            if (live_together && sa < eb && sb < ea &&
                (written_over(&g, a, b, start, end) || written_over(&g, b, a, start, end))) {
                over += sa == sb; /* one place, the output written over its input */
            } else if (live_together && sa < eb && sb < ea) {
                if (overlaps++ < 3)
                    fprintf(stderr, "  %s: '%s' and '%s' share bytes while both alive\n", file, ir_value_name(&g, a),
                            ir_value_name(&g, b));
            }
        }
    }
    CHECK_INT(0, unplaced);
    CHECK_INT(0, misaligned);
    CHECK_INT(0, overlaps);
    /* A model with a loss: its logits gradient is written over the logits. */
    CHECK_INT(ir_find_value(&g, "grad.logits") >= 0 ? 1 : 0, over);
    CHECK(arena < total); /* memory is reused */
    fprintf(stderr, "  %s: arena %.2f MiB for %.2f MiB of values\n", file, arena / 1048576.0, total / 1048576.0);
    free(start);
    free(end);
}

static void check_plan(const char *file, const model_setting *sets, int n_sets)
{
    ir_graph g;
    CHECK(load(file, sets, n_sets, &g) == 0);
    check_placed(file, &g);
    ir_graph_free(&g);
}

static void test_memory_plan_has_no_live_overlaps_and_reuses(void)
{
    model_setting gpt[] = {
        { "layers", "2", NULL }, { "seq", "16", NULL }, { "batch", "2", NULL }, { "vocab", "101", NULL }
    };
    check_plan("models/gpt2.xml", gpt, 4);
    model_setting parts[] = { { "layers", "2", NULL },
                              { "seq", "16", NULL },
                              { "batch", "2", NULL },
                              { "vocab", "101", NULL },
                              { "attn_parts", "1", NULL } };
    check_plan("models/gpt2.xml", parts, 5);
    check_plan("tests/models/small_resnet.xml", NULL, 0);
    check_plan("models/mlp.xml", NULL, 0);
}

/* One step of g on a private-memory arena and on the planned arena: the
 * same loss and the same gradient of every trained parameter, bit for bit. */
static void check_planned_step_is_private_step(ir_graph *g)
{
    graph_runner plain, planned;
    CHECK(runner_init(&plain, g) == 0);
    CHECK(runner_init_planned(&planned, g, memory_arena_bytes(g, 0)) == 0);
    runner_fill(&plain, 11, 5);
    runner_fill(&planned, 11, 5);
    CHECK(runner_run(&plain, RUN_BACKWARD, 1) == 0);
    CHECK(runner_run(&planned, RUN_BACKWARD, 1) == 0);
    const char *loss = ir_value_name(g, g->loss);
    CHECK(memcmp(runner_value(&plain, loss), runner_value(&planned, loss), sizeof(float)) == 0);
    int differing = 0, compared = 0;
    for (int32_t p = 0; p < g->n_values; p++) {
        char name[300];
        snprintf(name, sizeof name, "grad.%s", ir_value_name(g, p));
        if (!ir_value_trained(&g->values[p]) || ir_find_value(g, name) < 0)
            continue;
        compared++;
        differing += memcmp(runner_value(&plain, name), runner_value(&planned, name),
                            (size_t)runner_numel(&plain, name) * sizeof(float)) != 0;
    }
    CHECK(compared > 0);
    CHECK_INT(0, differing);
    runner_free(&plain);
    runner_free(&planned);
}

/* The same step on a private-memory arena and on the planned arena. */
static void test_memory_plan_gives_identical_results(void)
{
    model_setting gpt[] = { { "vocab", "17", NULL }, { "ctx", "8", NULL },   { "layers", "2", NULL },
                            { "dim", "12", NULL },   { "heads", "3", NULL }, { "batch", "2", NULL },
                            { "seq", "5", NULL } };
    const char *files[] = { "models/gpt2.xml", "tests/models/small_resnet.xml", NULL };
    for (int f = 0; f < 2; f++) {
        ir_graph g;
        CHECK(load(files[f], f == 0 ? gpt : NULL, f == 0 ? 7 : 0, &g) == 0);
        check_planned_step_is_private_step(&g);
        ir_graph_free(&g);
    }
}

/* A frozen linear's backward reads w (for x's gradient) but not x (only
 * w's gradient needs it): GPT-2's mlp.c_proj frozen, its input (the GELU's
 * output, which GELU's backward does not read either) lives only through
 * the forward, the stash leaves it out, and the arena is smaller; the step
 * on the planned arena, where x's bytes are reused before the backward,
 * still gives the private arena's loss and gradients bit for bit. */
static void test_frozen_linear_input_is_not_kept(void)
{
    model_setting gpt[] = { { "vocab", "17", NULL }, { "ctx", "8", NULL },   { "layers", "2", NULL },
                            { "dim", "12", NULL },   { "heads", "3", NULL }, { "batch", "2", NULL },
                            { "seq", "5", NULL } };
    const char *const frozen[] = { "*mlp.c_proj.weight" };
    pass_options opt = { .freeze = frozen, .n_freeze = 1 };
    ir_graph g, trained;
    CHECK(load_with("models/gpt2.xml", gpt, 7, &opt, &g) == 0);
    CHECK(load("models/gpt2.xml", gpt, 7, &trained) == 0);
    int unread = 0, stashed = 0, ended = 0;
    for (int32_t i = 0; i < g.n_nodes; i++) {
        const ir_node *n = &g.nodes[i];
        if (n->op != OP_LINEAR_BACKWARD || op_reads_input(n, 0))
            continue;
        unread++;
        int32_t x = n->in[0];
        int32_t *stash = malloc(((size_t)g.n_values + 1) * sizeof *stash), k = memory_stash_values(&g, 0, stash);
        for (int32_t j = 0; j < k; j++)
            stashed += stash[j] == x;
        free(stash);
        /* no reader of x that reads it comes after its forward's phase */
        int last = -1;
        for (int32_t r = 0; r < g.n_nodes; r++)
            for (int q = 0; q < g.nodes[r].n_in; q++)
                if (g.nodes[r].in[q] == x && op_reads_input(&g.nodes[r], q))
                    last = r;
        ended += last >= 0 && g.nodes[last].phase == PHASE_FORWARD;
    }
    CHECK_INT(2, unread); /* one c_proj a layer */
    CHECK_INT(0, stashed);
    CHECK_INT(2, ended);
    CHECK(memory_arena_bytes(&g, 0) < memory_arena_bytes(&trained, 0));
    check_placed("models/gpt2.xml, mlp.c_proj frozen", &g);
    check_planned_step_is_private_step(&g);
    ir_graph_free(&g);
    ir_graph_free(&trained);
}

int main(void)
{
    test_memory_plan_has_no_live_overlaps_and_reuses();
    test_memory_plan_gives_identical_results();
    test_frozen_linear_input_is_not_kept();
    CHECK_DONE();
}
