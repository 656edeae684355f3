/* placed.c: a model built and placed on a cluster (placed.h). */
#include "placed.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model_input.h"
#include "plan_memory.h"

/* What is trained and in which precision: --precision, --tf32, --freeze,
 * --lora, --frozen-dtype, into the pipeline's options. */
void set_training_options(pass_options *p, const options *o)
{
    p->precision = o->precision;
    p->tf32 = o->tf32;
    p->freeze = o->freeze.name;
    p->n_freeze = o->freeze.n;
    p->lora = &o->lora.spec;
    p->frozen_dtype = o->frozen_dtype;
    p->inference = o->inference;
    p->prefill = o->prefill;
}

/* The model's global batch: its `batch` hyper-parameter, 0 if it has none. */
int64_t global_batch(const ir_graph *g)
{
    for (int32_t i = 0; i < g->n_hypers; i++)
        if (!g->hypers[i].is_float && strcmp(ir_str(g, g->hypers[i].name), "batch") == 0)
            return g->hypers[i].i;
    return 0;
}

/* Load the model with `batch` set to `rows` (after the user's --set). */
static int load_with_batch(const char *path, const options *o, int64_t rows, ir_graph *g, struct diag *err)
{
    options with = *o;
    char batch[64];
    snprintf(batch, sizeof batch, "batch=%lld", (long long)rows);
    if (rows > 0 && settings_add(&with.sets, batch))
        return diag_set(err, path, 0, "too many --set options to add the micro-batch size");
    return model_input_load(path, &with, g, err);
}

/* Build, place and compile-ready (every pass) the model for cluster c.
 *
 * The model's `batch` is the global batch B of a step.  It is split into
 * M micro-batches (--micro-batches; by default the largest divisor of B up
 * to 4 on a cluster of several devices, else 1), and by the plan into R
 * replicas: each device's program works on B / (M R) rows at a time.  The
 * fence pass plans on the graph built at B / M; when its plan replicates,
 * the graph is built again at B / (M R) and the same plan applied to it
 * (same ops, smaller shapes). */
int placed_build(const options *o, const char *model_path, const cluster *c, ir_graph *g, fence_plan *plan,
                 struct diag *err)
{
    pass_options popt = { 0 };
    if (o->dump_ir) {
        popt.dump_after = o->dump_ir;
        popt.dump_out = stderr;
    }
    popt.cluster = c;
    popt.scheduler = o->scheduler;
    popt.stages = o->stages;
    popt.compress = o->compress;
    popt.recompute = o->recompute;
    popt.shard_optimizer = o->shard_optimizer;
    popt.replicas = o->replicas;
    popt.memory_reserve = o->memory_reserve;
    popt.seed = (uint64_t)o->seed;
    set_training_options(&popt, o);
    if ((o->stages > 0 || o->replicas > 0) && o->scheduler && strcmp(o->scheduler, "uniform") == 0)
        return diag_set(err, model_path, 0,
                        "--stages and --replicas choose among opfence's plans; uniform always "
                        "uses every device as one stage");
    ir_graph_init(g);
    if (o->shard_optimizer && o->no_shard_optimizer)
        return diag_set(err, model_path, 0, "--shard-optimizer and --no-shard-optimizer: give one of them");
    if (model_input_load(model_path, o, g, err))
        return -1;
    int64_t B = global_batch(g);
    int M = o->micro_batches;
    /* An inference step is all its rows at once, on one pipeline (the
     * runtime draws from each row's logits after every step). */
    if (o->inference && (M > 1 || o->replicas > 1))
        return diag_set(err, model_path, 0,
                        "an inference program runs its rows as one micro-batch on one replica a stage "
                        "(leave out --micro-batches and --replicas, or give 1)");
    if (M == 0) {
        M = 1;
        for (int k = 4; B > 0 && k > 1 && c->n_devices > 1 && M == 1 && !o->inference; k--)
            if (B % k == 0)
                M = k;
    }
    if (B == 0 && M > 1)
        return diag_set(err, model_path, 0, "--micro-batches %d needs a model with a `batch` hyper-parameter", M);
    if (B > 0 && B % M != 0)
        return diag_set(err, model_path, 0, "the batch (%lld) does not split into %d micro-batches", (long long)B, M);
    popt.micro_batches = M;
    popt.max_replicas = B > 0 && !o->inference ? 0 : 1;
    popt.plan_out = plan;
    popt.last_pass = "fence";
    ir_graph_free(g);
    if (load_with_batch(model_path, o, B > 0 ? B / M : 0, g, err) || pass_run_pipeline(g, &popt, err))
        return -1;
    popt.last_pass = NULL;
    popt.plan_out = NULL;
    if (plan->n_replicas > 1) {
        ir_graph_free(g);
        popt.plan = plan;
        if (load_with_batch(model_path, o, B / M / plan->n_replicas, g, err))
            return -1;
    }
    return pass_run_pipeline(g, &popt, err);
}

/* Whether fusion may shard on its own: the user chose neither way, and it trains. */
static int may_shard(const options *o) { return !o->shard_optimizer && !o->no_shard_optimizer && !o->inference; }

/* Plans made again, each with more memory held back (build_if_fits_held). */
#define PLACED_RESERVE_TRIES 3

/* placed_build with fix into *g and *plan when that plan also fits its
 * devices: 1; else 0, with nothing kept. */
static int build_if_fits(const options *fix, const cluster *c, ir_graph *g, fence_plan *plan)
{
    struct diag why = { 0 };
    memset(plan, 0, sizeof *plan);
    if (placed_build(fix, fix->files[0], c, g, plan, &why) == 0 &&
        plan_memory_check(g, c, plan, fix->files[0], &why) == 0)
        return 1;
    ir_graph_free(g);
    fence_plan_free(plan);
    return 0;
}

/* build_if_fits, and when the plan does not fit, the same planned again
 * with memory held back on every device (up to PLACED_RESERVE_TRIES
 * times, each adding what the last plan lacked, and at least what the
 * cost model did not see of it: plan_memory_working_extra).  The fence
 * pass's cost model counts a stage's working micro-batch as one stash,
 * where the arena also holds its gradients, scratch and, on the last
 * stage, the loss's logits (0.6-3.2 GB more a stage of an 8B Llama), so a
 * plan it thinks fits may not.  first: bytes held back from the start
 * (what a plan of the same options already lacked); *held gets what was
 * held back in all. */
static int build_if_fits_held(const options *fix, double first, const cluster *c, ir_graph *g, fence_plan *plan,
                              double *held)
{
    options o = *fix;
    o.memory_reserve += first; /* first: what an earlier plan of these options lacked */
    *held = 0.0;
    for (int tries = 0; tries <= PLACED_RESERVE_TRIES; tries++) {
        struct diag why = { 0 };
        memset(plan, 0, sizeof *plan);
        if (placed_build(&o, o.files[0], c, g, plan, &why) != 0)
            return 0;
        double lacks = plan_memory_shortfall(g, c, plan);
        if (lacks > 0) /* at least what the cost model does not see */
            lacks = fmax(lacks, plan_memory_working_extra(g, plan, 0));
        if (!(lacks > 0)) {
            *held = o.memory_reserve - fix->memory_reserve;
            return 1;
        }
        ir_graph_free(g);
        fence_plan_free(plan);
        o.memory_reserve += lacks;
    }
    return 0;
}

/* g and plan give way to g2 and plan2. */
static void take_plan(ir_graph *g, fence_plan *plan, ir_graph *g2, fence_plan *plan2)
{
    ir_graph_free(g);
    fence_plan_free(plan);
    *g = *g2;
    *plan = *plan2;
}

/* A plan that fits, with replicas, and the user left --shard-optimizer
 * to fusion: the sharded plan (the same mathematics) instead when the
 * cost model finds its step at least SHARD_GAIN times shorter and it fits
 * too (said in note). */
#define SHARD_GAIN 0.98
/* Micro-batch counts tried past the fewest that fit (placed_build_fitting). */
#define PLACED_MORE_COUNTS 4
static void try_sharded(const options *o, const cluster *c, ir_graph *g, fence_plan *plan, char *note, size_t note_n)
{
    if (!may_shard(o) || plan->n_replicas < 2)
        return;
    options fix = *o;
    fix.shard_optimizer = 1;
    fix.dump_ir = NULL;
    ir_graph g2;
    fence_plan plan2;
    if (!build_if_fits(&fix, c, &g2, &plan2))
        return;
    if (!(plan2.step_seconds < SHARD_GAIN * plan->step_seconds)) {
        ir_graph_free(&g2);
        fence_plan_free(&plan2);
        return;
    }
    snprintf(note, note_n,
             "note: --shard-optimizer taken: the replicas' update on 1/%d of the parameters each makes the "
             "estimated step %.2f ms, against %.2f ms unsharded",
             plan2.n_replicas, plan2.step_seconds * 1e3, plan->step_seconds * 1e3);
    take_plan(g, plan, &g2, &plan2);
}

/* ", its search holding 2.3 GiB back on every device" into text (or nothing). */
static const char *held_note(double held, char *text, size_t n)
{
    text[0] = '\0';
    if (held > 0)
        snprintf(text, n, ", its search holding %.1f GiB back on every device", held / (1024.0 * 1024.0 * 1024.0));
    return text;
}

/* What the step loses to replays the plan's estimate did not count:
 * the schedule pass decides recomputation by the arena (passes/schedule.c),
 * which holds more than the fence cost model counts (a micro-batch's
 * activation gradients, scratch, the loss's logits), so a stage the model
 * expected to keep its stashes may recompute.  Each replay adds the
 * stage's forward, at least a third of its forward and backward, for the
 * share of its micro-batches it does not keep whole (ir_placement.keep); when that
 * makes it the slowest stage, every micro-batch waits for it.  Seconds a
 * step, 0 when nothing unforeseen recomputes or it stays off the
 * bottleneck. */
static double unforeseen_replays(const ir_graph *g, const fence_plan *plan)
{
    double slowest = plan->bottleneck;
    const ir_placement *p = &g->placement;
    for (int32_t s = 0; s < plan->n_stages && s < p->n_stages; s++)
        if (ir_placement_recompute(p, s) && plan->recompute && !plan->recompute[s]) {
            /* the share of its micro-batches that replay: those it does not keep whole */
            int32_t n = ir_placement_in_flight(p, s);
            double replayed = n > 0 ? (double)(n - ir_placement_keep(p, s)) / n : 1.0;
            slowest = fmax(slowest, plan->stage_compute[s] * (1.0 + replayed / 3.0));
        }
    return (slowest - plan->bottleneck) * plan->micro_batches;
}

/* A plan that fits but recomputes where its estimate did not expect it
 * (unforeseen_replays): planned again holding back the memory the cost
 * model does not see on the stages that stash (plan_memory_working_extra), the faster of the two kept, each by its estimate plus what its
 * unforeseen replays add (said in note).  An 8B LoRA on one city's 8
 * V100s: stage 1 recomputed, 12.40 s estimated, 16.31 s simulated. */
static void try_foreseen(const options *o, const cluster *c, ir_graph *g, fence_plan *plan, char *note, size_t note_n)
{
    double lost = unforeseen_replays(g, plan);
    if (!(lost > 0) || (o->recompute && strcmp(o->recompute, "auto") != 0))
        return;
    options fix = *o;
    fix.dump_ir = NULL;
    ir_graph g2;
    fence_plan plan2;
    double held;
    if (!build_if_fits_held(&fix, plan_memory_working_extra(g, plan, 1), c, &g2, &plan2, &held))
        return;
    double lost2 = unforeseen_replays(&g2, &plan2);
    if (!(plan2.step_seconds + lost2 < plan->step_seconds + lost)) {
        ir_graph_free(&g2);
        fence_plan_free(&plan2);
        return;
    }
    char held_text[96];
    snprintf(note, note_n,
             "note: the first plan recomputed where its estimate did not count it (%.2f ms a step more than its "
             "%.2f ms); planned again%s: %.2f ms",
             lost * 1e3, plan->step_seconds * 1e3, held_note(held, held_text, sizeof held_text),
             (plan2.step_seconds + lost2) * 1e3);
    take_plan(g, plan, &g2, &plan2);
}

int placed_build_fitting(const options *o, const cluster *c, ir_graph *g, fence_plan *plan, char *note, size_t note_n,
                         struct diag *err)
{
    if (note_n > 0)
        note[0] = '\0';
    if (placed_build(o, o->files[0], c, g, plan, err))
        return -1;
    if (plan_memory_check(g, c, plan, o->files[0], err) == 0) {
        try_foreseen(o, c, g, plan, note, note_n);
        try_sharded(o, c, g, plan, note, note_n);
        return 0;
    }
    int M0 = plan->micro_batches;
    int64_t B = global_batch(g) * (plan->n_replicas > 0 ? plan->n_replicas : 1) * M0;
    int can_recompute = !o->recompute || strcmp(o->recompute, "auto") == 0, can_split = o->micro_batches == 0 && B > 0;
    /* At the fewest micro-batches that fit: as it is (with more
     * micro-batches), sharded moments, recomputation, both, the fastest by
     * the cost model's step; then each larger count as it is, up to
     * PLACED_MORE_COUNTS of them, in case one is faster still (an 8B Llama
     * world-wide: 35.0 s at 4 micro-batches sharded and recomputing, 16.9
     * s at 32 as it is, 38.6 s at 8: not monotone, so each is tried). */
    ir_graph best_g;
    fence_plan best_plan;
    double first_lacks = fmax(plan_memory_shortfall(g, c, plan), plan_memory_working_extra(g, plan, 0)),
           best_held = 0.0;
    int best = -1, more = 0;
    int64_t best_M = 0, first_M = 0; /* the best plan's count, the fewest that fit */
    for (int64_t M = M0; M <= (B > 0 ? B : M0) && more <= PLACED_MORE_COUNTS; M++) {
        if (M != M0 && (!can_split || B % M != 0))
            continue; /* the next divisor of the batch's rows */
        more += best >= 0;
        for (int tried = 0; tried < 4; tried++) {
            int shard = tried & 1, on = tried >> 1;
            if ((on && !can_recompute) || (shard && !may_shard(o)) || (first_M && first_M != M && tried != 0))
                continue; /* what the user chose against or has already */
            options fix = *o;
            fix.recompute = on ? "on" : o->recompute;
            fix.shard_optimizer = o->shard_optimizer || shard;
            fix.micro_batches = (int)M;
            fix.dump_ir = NULL;
            ir_graph g2;
            fence_plan plan2;
            double held;
            /* the first plan as it is did not fit: it starts holding back what it lacked */
            if (!build_if_fits_held(&fix, M == M0 && tried == 0 ? first_lacks : 0.0, c, &g2, &plan2, &held))
                continue;
            if (best >= 0 && !(plan2.step_seconds < best_plan.step_seconds)) {
                ir_graph_free(&g2);
                fence_plan_free(&plan2);
                continue;
            }
            if (best >= 0)
                take_plan(&best_g, &best_plan, &g2, &plan2);
            else
                best_g = g2, best_plan = plan2;
            best = tried, best_M = M, best_held = held;
            if (!first_M)
                first_M = M;
        }
    }
    if (best >= 0) {
        char held_text[96];
        snprintf(note, note_n,
                 "note: the first plan (%d stage%s x %d replica%s, %d micro-batch%s) did not fit its devices' "
                 "memory; planned with %s%s%lld micro-batches instead%s",
                 plan->n_stages, plan->n_stages == 1 ? "" : "s", plan->n_replicas, plan->n_replicas == 1 ? "" : "s", M0,
                 M0 == 1 ? "" : "es", best & 1 ? "--shard-optimizer, " : "", best & 2 ? "--recompute on and " : "",
                 (long long)best_M, held_note(best_held, held_text, sizeof held_text));
        take_plan(g, plan, &best_g, &best_plan);
        return 0;
    }
    return -2; /* the first plan, kept in g and plan, does not fit */
}

int placed_load(placed_model *p, const options *o, int must_fit, struct diag *err)
{
    memset(p, 0, sizeof *p);
    ir_graph_init(&p->g);
    /* Every device must state the peak of the arithmetic it will run (and
     * fp32's, for the optimizer): a plan made on another one's is a lie. */
    peak_kind kind = estimate_peak_kind(o->precision, o->tf32);
    if (cluster_load(o->files[1], &p->c, err))
        return -1;
    if (o->with.n > 0) { /* --with: standbys taken in */
        cluster joined;
        if (cluster_with(&p->c, o->with.name, o->with.n, &joined, err))
            return -1;
        cluster_free(&p->c);
        p->c = joined;
    }
    if (o->without.n > 0) { /* --without: the survivors of a lost device */
        cluster survivors;
        if (cluster_without(&p->c, o->without.name, o->without.n, &survivors, err))
            return -1;
        cluster_free(&p->c);
        p->c = survivors;
    }
    if (cluster_require_peak(&p->c, kind, err) || cluster_require_peak(&p->c, PEAK_FP32, err))
        return -1;
    int rc = placed_build_fitting(o, &p->c, &p->g, &p->plan, p->note, sizeof p->note, err);
    if (rc == 0)
        return 0;
    if (must_fit || rc != -2)
        return -1;
    /* simulate and dump study a plan that does not fit: kept, and said */
    snprintf(p->note, sizeof p->note, "warning: %.380s", err->msg);
    return 0;
}

void placed_free(placed_model *p)
{
    ir_graph_free(&p->g);
    cluster_free(&p->c);
    fence_plan_free(&p->plan);
}
