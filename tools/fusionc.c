/* fusionc: the fusion compiler's command line.
 *
 * One table of commands at the end of this file (its name, the line
 * `fusionc --help` shows for it, its usage and what runs it): the compiler's
 * own commands (check, dump, stats, compile, plan, simulate, passes) are
 * here, the others in their files (profile.c, deploy.c, launch.c,
 * report.c, broker.c).  Each command's usage is its options' table
 * (runtime/cli_option.h; the compiler commands share options.h's), so its
 * --help and what it accepts come from one place.
 *
 * MODEL is a model XML or a text IR file (as written by `dump`).  Errors
 * print one line, `file:line: error: ...`, and exit 1; bad usage exits 2.
 * Output files are written under a temporary name and renamed, so a failed
 * run never leaves half a file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/atomic_file.h"
#include "../codegen/bundle.h"
#include "../frontend/cluster.h"
#include "../frontend/model.h"
#include "../frontend/xml_util.h"
#include "../ir/folders.h"
#include "../ir/view.h"
#include "../passes/passes.h"
#include "deploy.h"
#include "generate.h"
#include "serve.h"
#include "launch.h"
#include "baseline.h"
#include "broker.h"
#include "provide.h"
#include "diloco.h"
#include "chat_cmd.h"
#include "model_input.h"
#include "options.h"
#include "placed.h"
#include "plan_idle.h"
#include "plan_memory.h"
#include "plan_report.h"
#include "probe.h"
#include "profile.h"
#include "report.h"
#include "tokenize.h"
#include "version.h"
#include "export.h"
#include "../tokenizer/tokenizer.h"
#include "simulate.h"

#ifndef FUSION_VERSION
#define FUSION_VERSION "0.0.0"
#endif

/* clang-format off */
/* ---- each command's usage: its text and the options it takes ------------ */

/* fusionc_options (options.h) as each command lists them, in the order its
 * --help shows them; a command takes exactly those. */
#define BUILD_USES CLI_USE(OPT_PRECISION), CLI_USE(OPT_TF32), CLI_USE(OPT_FREEZE), CLI_USE(OPT_LORA), CLI_USE(OPT_FROZEN_DTYPE), CLI_USE(OPT_INFERENCE), CLI_USE(OPT_PREFILL)
#define SYNC_USES                                                                                     \
    CLI_USE(OPT_SYNC), CLI_USE(OPT_LOCAL_STEPS), CLI_USE(OPT_SITE_BATCH), CLI_USE(OPT_OUTER_LR),       \
    CLI_USE(OPT_OUTER_MOMENTUM), CLI_USE(OPT_OUTER_CODEC), CLI_USE(OPT_OUTER_DELAY)
#define PLACEMENT_USES                                                                                \
    BUILD_USES, CLI_USE(OPT_SCHEDULER), CLI_USE(OPT_SEED), CLI_USE(OPT_MICRO_BATCHES),             \
    CLI_USE(OPT_STAGES), CLI_USE(OPT_REPLICAS), CLI_USE(OPT_WITHOUT), CLI_USE(OPT_WITH),               \
    CLI_USE(OPT_COMPRESS), CLI_USE(OPT_RECOMPUTE), CLI_USE(OPT_SHARD_OPTIMIZER),  \
    CLI_USE(OPT_NO_SHARD_OPTIMIZER)
#define USAGE(head, uses) { head, fusionc_options, uses, (int)(sizeof uses / sizeof uses[0]), 18, NULL }

static const cli_use check_uses[] = {
    { OPT_SET, NULL, "override a model hyper-parameter (repeatable)" },
    CLI_USE(OPT_HF_CONFIG), BUILD_USES,
    { OPT_DUMP_IR, NULL, "print a model's IR after PASS to standard error" },
    { OPT_VERBOSE, NULL, "also print a cluster's devices and links" },
};
static const cli_usage check_usage = USAGE(
    "usage: fusionc check FILE... [--set name=value]... [-v]\n"
    "\n"
    "Validates each file: a model (<model>) is read, checked against its schema,\n"
    "expanded and run through every pass; a cluster (<cluster>) is read and its\n"
    "links resolved.  Prints one line per file; errors as file:line: error: ...\n",
    check_uses);

static const cli_use dump_uses[] = {
    CLI_USE(OPT_AFTER), CLI_USE(OPT_FORMAT), CLI_USE(OPT_EXPAND), CLI_USE(OPT_STAGE), CLI_USE(OPT_DEVICE),
    CLI_USE(OPT_OUTPUT), CLI_USE(OPT_SET), CLI_USE(OPT_HF_CONFIG), PLACEMENT_USES,
};
static const cli_usage dump_usage = USAGE(
    "usage: fusionc dump MODEL [CLUSTER] [--set name=value]... [--after PASS] [--format text|dot|html] [-o FILE]\n"
    "\n"
    "Prints the OP-DAG of MODEL (a model XML or a text IR file) after PASS\n"
    "(default: the last pass), or placed on CLUSTER after every pass (devices,\n"
    "stages, sends and receives; the placement options below shape it).  The text\n"
    "form reads back: `fusionc dump out.fir`.\n",
    dump_uses);

static const cli_use compile_uses[] = {
    { OPT_OUTPUT, "OUT", "the output folder (created if needed)" },
    { OPT_SET, NULL, "override a hyper-parameter (repeatable); `batch` is the global batch" },
    CLI_USE(OPT_HF_CONFIG), PLACEMENT_USES, SYNC_USES,
    CLI_USE(OPT_FORCE), CLI_USE(OPT_PORT_BASE), CLI_USE(OPT_RUN_KEY), CLI_USE(OPT_CUBLAS), CLI_USE(OPT_TOKENIZER),
    CLI_USE(OPT_DUMP_IR),
};
static const cli_usage compile_usage = USAGE(
    "usage: fusionc compile MODEL CLUSTER -o OUT [--set name=value]... [--hf-config FILE] [--scheduler S]\n"
    "                       [--micro-batches M]\n"
    "\n"
    "Compiles MODEL for the devices of CLUSTER: runs every pass (placing the\n"
    "model on the devices: stages, replicas, send/recv), emits each device's host\n"
    "program with LLVM and links it with the runtime into OUT/<device>/fusion-<device>\n"
    "(and OUT/<device>/manifest.txt), with OUT/plan.txt, OUT/plan.svg and\n"
    "OUT/launch-local.sh, which starts every device on this machine:\n"
    "`OUT/launch-local.sh --data FILE --steps N [--emulate-links]`.\n",
    compile_uses);

static const cli_use plan_uses[] = {
    CLI_USE(OPT_SET), CLI_USE(OPT_HF_CONFIG), PLACEMENT_USES, SYNC_USES,
    { OPT_OUTPUT, "DIR", "also write plan.txt and plan.svg to DIR (made if missing; without -o, nothing is written)" },
    CLI_USE(OPT_DUMP_IR),
};
static const cli_usage plan_usage = USAGE(
    "usage: fusionc plan MODEL CLUSTER [--set name=value]... [--scheduler S] [--micro-batches M] [-o DIR]\n"
    "\n"
    "Prints how MODEL would be placed on CLUSTER: the fences, each stage's devices,\n"
    "ops, estimated compute and transfer, the bottleneck, the estimated step time\n"
    "and each device's memory; writes DIR/plan.txt and DIR/plan.svg (the graph\n"
    "coloured by stage) with -o DIR; without it, nothing is written.\n",
    plan_uses);

static const cli_use simulate_uses[] = {
    CLI_USE(OPT_SET), CLI_USE(OPT_HF_CONFIG), CLI_USE(OPT_STEPS),
    { OPT_VERBOSE, NULL, "also print every link's bytes a step (forward, backward, update)" },
    CLI_USE(OPT_TRACE), CLI_USE(OPT_NO_OVERLAP), PLACEMENT_USES, SYNC_USES,
    { OPT_OUTPUT, "DIR", "also write gantt.svg to DIR (made if missing; without -o, nothing is written)" },
    CLI_USE(OPT_DUMP_IR),
};
static const cli_usage simulate_usage = USAGE(
    "usage: fusionc simulate MODEL CLUSTER [--set name=value]... [--scheduler S] [--micro-batches M] [--steps N] [-o DIR]\n"
    "\n"
    "Simulates training steps of MODEL placed on CLUSTER, event by event: each\n"
    "device's ops in the runtime's 1F1B order at the estimated times, each send/recv\n"
    "on its link (one message at a time, in order), the update and the\n"
    "replicas' all-reduce.  Prints each step's time and the last one's (the steady\n"
    "state: stages start the next step as soon as their update is done, so step 1\n"
    "also holds the pipeline's start), the bubble fraction, each stage's busy time\n"
    "and the links' bytes a step, with the plan's estimate; writes DIR/gantt.svg,\n"
    "the timeline, with -o DIR (made if missing); without it, nothing is written.\n",
    simulate_uses);

static const cli_use stats_uses[] = { CLI_USE(OPT_SET), CLI_USE(OPT_HF_CONFIG), BUILD_USES, CLI_USE(OPT_DUMP_IR) };
static const cli_usage stats_usage = USAGE(
    "usage: fusionc stats MODEL [--set name=value]...\n"
    "\n"
    "Prints the number of parameters, FLOPs per sample for the forward and the\n"
    "backward pass, and the bytes of activations one step produces.\n",
    stats_uses);

static const cli_usage passes_usage = {
    "usage: fusionc passes\n"
    "\n"
    "Lists the compiler's passes, in the order they run, each with what it does.\n",
    fusionc_options, NULL, 0, 18, NULL
};
/* clang-format on */

/* ---- output -------------------------------------------------------------- */

/* `path` (whole or not at all: atomic_file.h), or stdout when path is NULL. */
static FILE *open_output(const char *path, atomic_file *af, char *why, size_t n)
{
    return path ? atomic_open(af, path, why, n) : stdout;
}

static int commit_output(FILE *f, const char *path, atomic_file *af, int ok, char *why, size_t n)
{
    if (!path)
        return fflush(f) == 0 && ok ? 0 : -1;
    if (!ok) {
        atomic_abort(af);
        return -1;
    }
    return atomic_commit(af, 0, why, n);
}

/* ---- commands ------------------------------------------------------------ */

/* Pipeline options: the training options, and --dump-ir when asked for. */
static const pass_options *dump_ir_options(const options *o, pass_options *buf)
{
    *buf = (pass_options){ .dump_after = o->dump_ir, .dump_out = stderr };
    set_training_options(buf, o);
    return buf;
}

static int cmd_check(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &check_usage, &o);
    if (rc)
        return options_exit(rc);
    if (o.n_files == 0)
        return usage_error(&check_usage, "%s", "no files to check");
    int failures = 0;
    pass_options dump;
    for (int i = 0; i < o.n_files; i++) {
        const char *path = o.files[i];
        struct diag err = { 0 };
        char *buf = NULL;
        size_t len = 0;
        input_kind kind;
        int ok = xml_read_file(path, &buf, &len, &err) == 0 && model_input_classify(path, buf, len, &kind, &err) == 0;
        if (ok && kind == INPUT_CLUSTER) {
            cluster c;
            ok = cluster_load_memory(buf, (int)len, path, &c, &err) == 0;
            if (ok) {
                printf("%s: ok: cluster '%s': %d regions, %d hosts, %d devices", path, c.name, c.n_regions, c.n_hosts,
                       c.n_devices);
                if (c.n_standbys > 0) /* spares: in no plan (fusionc broker's) */
                    printf(", %d standby%s", c.n_standbys, c.n_standbys == 1 ? "" : "s");
                printf("\n");
                if (o.verbose)
                    cluster_print_summary(&c, stdout);
            }
            cluster_free(&c);
        } else if (ok) {
            ir_graph g;
            ir_graph_init(&g);
            ok = (kind == INPUT_IR ? ir_graph_parse(buf, len, path, &g, &err)
                                   : model_load_memory(buf, len, path, o.sets.v, o.sets.n, &g, &err)) == 0 &&
                 pass_run_pipeline(&g, dump_ir_options(&o, &dump), &err) == 0;
            if (ok)
                printf("%s: ok: model '%s': %d ops, %d values\n", path, ir_str(&g, g.name), g.n_nodes, g.n_values);
            ir_graph_free(&g);
        }
        free(buf);
        if (!ok) {
            diag_print(&err);
            failures++;
        }
    }
    return failures ? 1 : 0;
}

/* 124439808 -> "124,439,808" */
static const char *with_commas(int64_t v, char *buf, size_t size)
{
    char digits[32];
    snprintf(digits, sizeof digits, "%lld", (long long)v);
    size_t n = strlen(digits), j = 0;
    for (size_t i = 0; i < n && j + 2 < size; i++) {
        if (i > 0 && (n - i) % 3 == 0 && digits[0] != '-')
            buf[j++] = ',';
        buf[j++] = digits[i];
    }
    buf[j] = '\0';
    return buf;
}

static int cmd_stats(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &stats_usage, &o);
    if (rc)
        return options_exit(rc);
    if (o.n_files != 1)
        return usage_error(&stats_usage, "%s", "expected exactly one MODEL");
    struct diag err = { 0 };
    ir_graph g;
    model_stats s;
    pass_options dump;
    if (model_input_load(o.files[0], &o, &g, &err) || pass_run_pipeline(&g, dump_ir_options(&o, &dump), &err) ||
        model_stats_compute(&g, &s, &err)) {
        diag_print(&err);
        ir_graph_free(&g);
        return 1;
    }
    char a[64];
    const double mib = 1024.0 * 1024.0, per = (double)s.batch;
    printf("model             %s\n", ir_str(&g, g.name));
    for (int i = 0; i < g.n_hypers; i++) {
        const ir_hyper *h = &g.hypers[i];
        if (h->is_float)
            printf("  %-15s %g\n", ir_str(&g, h->name), h->f);
        else
            printf("  %-15s %lld\n", ir_str(&g, h->name), (long long)h->i);
    }
    printf("ops               %lld\n", (long long)s.n_ops);
    printf("parameters        %s (%.1f MiB)\n", with_commas(s.params, a, sizeof a), (double)s.param_bytes / mib);
    if (s.trained < s.params)
        printf("trained           %s (%.2f%%; the rest frozen)\n", with_commas(s.trained, a, sizeof a),
               100.0 * (double)s.trained / (double)s.params);
    printf("batch             %lld samples per step\n", (long long)s.batch);
    printf("forward           %.4g GFLOP per sample (%.4g per step)\n", s.flops_forward / per / 1e9,
           s.flops_forward / 1e9);
    printf("backward          %.4g GFLOP per sample (%.4g per step)\n", s.flops_backward / per / 1e9,
           s.flops_backward / 1e9);
    printf("activations       %.2f MiB per sample (%.2f MiB per step)\n", (double)s.activation_bytes / per / mib,
           (double)s.activation_bytes / mib);
    printf("inputs            %.3f MiB per step\n", (double)s.input_bytes / mib);
    printf("optimizer state   %.1f MiB\n", (double)s.state_bytes / mib);
    printf("arena             %.1f MiB peak for one training step (params, state, activations, gradients)\n",
           (double)s.arena_bytes / mib);
    ir_graph_free(&g);
    return 0;
}

/* Is --format this picture (dot or html)? */
static int picture_format(const options *o, const char *format) { return o->format && strcmp(o->format, format) == 0; }

/* dump MODEL CLUSTER: the placed graph after every pass, printed here (the
 * pipeline's own dump point knows no cluster); --device NAME becomes its
 * stage. */
static int dump_placed(const options *o, ir_view_options *view, FILE *out, struct diag *err)
{
    placed_model m;
    if (placed_load(&m, o, 0, err))
        return -1;
    const char *names[IR_MAX_STAGE_DEVICES];
    view->device_names = names;
    view->n_device_names = m.c.n_devices < IR_MAX_STAGE_DEVICES ? m.c.n_devices : IR_MAX_STAGE_DEVICES;
    for (int32_t d = 0; d < view->n_device_names; d++)
        names[d] = m.c.devices[d].name;
    int rc = 0;
    const ir_placement *p = &m.g.placement;
    if (o->view_device) {
        int32_t d = 0, stage = -1;
        while (d < m.c.n_devices && strcmp(m.c.devices[d].name, o->view_device) != 0)
            d++;
        for (int32_t k = 0; d < m.c.n_devices && k < p->n_stages * p->n_replicas; k++)
            if (p->device[k] == d)
                stage = k / p->n_replicas;
        if (d == m.c.n_devices)
            rc = diag_set(err, o->files[1], 0, "--device %s: the cluster has no device of that name", o->view_device);
        else if (stage < 0)
            rc = diag_set(err, o->files[1], 0, "--device %s: the plan does not use it (%d stage%s x %d replica%s)",
                          o->view_device, p->n_stages, p->n_stages == 1 ? "" : "s", p->n_replicas,
                          p->n_replicas == 1 ? "" : "s");
        view->stage = stage;
    }
    if (rc == 0 && view->stage >= p->n_stages)
        rc = diag_set(err, o->files[0], 0, "--stage %d: the plan has stages 0 to %d", view->stage, p->n_stages - 1);
    if (rc == 0)
        rc = picture_format(o, "dot")    ? ir_graph_print_dot_view(&m.g, view, out)
             : picture_format(o, "html") ? ir_graph_print_html(&m.g, view, out)
                                         : ir_graph_print(&m.g, out);
    placed_free(&m);
    return rc;
}

static int cmd_dump(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &dump_usage, &o);
    if (rc)
        return options_exit(rc);
    if (o.n_files != 1 && o.n_files != 2)
        return usage_error(&dump_usage, "%s", "expected a MODEL, and a CLUSTER to place it on if you like");
    if (o.n_files == 1 && (o.view_stage >= 0 || o.view_device))
        return usage_error(&dump_usage, "%s", "--stage and --device need a CLUSTER: stages are the placement's");
    if (o.n_files == 2 && o.after)
        return usage_error(&dump_usage, "%s",
                           "--after is for a MODEL alone: placed on a CLUSTER, it is after every pass");
    if (o.view_stage >= 0 && o.view_device)
        return usage_error(&dump_usage, "%s", "--stage or --device, not both");
    if ((o.view_stage >= 0 || o.view_device || o.expand) && !picture_format(&o, "dot") && !picture_format(&o, "html"))
        return usage_error(&dump_usage, "%s", "--expand, --stage and --device shape the picture: --format dot or html");
    ir_view_options view = ir_view_defaults();
    view.expand = o.expand;
    view.stage = o.view_stage;
    struct diag err = { 0 };
    ir_graph g;
    ir_graph_init(&g);
    if (o.n_files == 1 && model_input_load(o.files[0], &o, &g, &err)) {
        diag_print(&err);
        return 1;
    }
    atomic_file af;
    char why[FU_PATH_BYTES + 200] = "";
    if (o.output && folders_make_for_file(o.output, &err)) { /* -o a/b/g.dot: a and a/b too */
        diag_print(&err);
        ir_graph_free(&g);
        return 1;
    }
    FILE *out = open_output(o.output, &af, why, sizeof why);
    if (!out) {
        fprintf(stderr, "%s:0: error: %s\n", o.output, why);
        ir_graph_free(&g);
        return 1;
    }
    if (o.n_files == 2) {
        rc = dump_placed(&o, &view, out, &err);
    } else {
        pass_options popt = { .dump_after = o.after ? o.after : pass_pipeline[pass_count - 1].name,
                              .dump_out = out,
                              .dump_view = o.format && strcmp(o.format, "text") ? &view : NULL,
                              .dump_html = picture_format(&o, "html"),
                              .stop_after = 1 };
        set_training_options(&popt, &o);
        rc = pass_run_pipeline(&g, &popt, &err);
    }
    if (commit_output(out, o.output, &af, rc == 0, why, sizeof why) && rc == 0) {
        rc = -1;
        diag_set(&err, o.output ? o.output : "<stdout>", 0, "cannot write the output%s%s", why[0] ? ": " : "", why);
    }
    if (rc)
        diag_print(&err);
    ir_graph_free(&g);
    return rc ? 1 : 0;
}

/* baseline.h's place callback: the model of the user's options on one
 * site, by the same scheduler, without --stages / --replicas (which were
 * asked of the whole cluster), quietly, in a plan the site's devices hold
 * (the remedies as for the whole cluster's). */
static int place_on_site(void *arg, const cluster *c, ir_graph *g, fence_plan *plan, struct diag *err)
{
    options site = *(const options *)arg;
    site.stages = site.replicas = 0;
    site.dump_ir = NULL;
    char note[400];
    int rc = placed_build_fitting(&site, c, g, plan, note, sizeof note, err);
    return rc == 0 || (rc == -2 && site.study) ? 0 : -1; /* simulate studies a site that does not fit */
}

/* diloco.h's place callback: the same on a site, with `batch` rows. */
static int place_rows_on_site(void *arg, const cluster *c, int64_t batch, ir_graph *g, fence_plan *plan,
                              struct diag *err)
{
    options site = *(const options *)arg;
    char rows[64];
    snprintf(rows, sizeof rows, "batch=%lld", (long long)batch);
    if (settings_add(&site.sets, rows))
        return diag_set(err, site.files[0], 0, "too many --set options to add the site's batch");
    return place_on_site(&site, c, g, plan, err);
}

/* diloco.h's timers: the plan's estimate, or 3 simulated steps' steady one. */
static double estimated_step(const cluster *c, const ir_graph *g, const fence_plan *plan)
{
    (void)c, (void)g;
    return plan->step_seconds;
}

static double simulated_step(const cluster *c, const ir_graph *g, const fence_plan *plan)
{
    (void)plan;
    return baseline_simulated_step(g, c, 3, NULL);
}

/* --sync diloco on o's model and cluster: 1 when it applies (dp made, or
 * err set: *rc), 0 when the cluster is one region (a note says it changes
 * nothing; the caller goes on in exact mode). */
static int diloco_applies(const options *o, int simulated, cluster *c, diloco_plan *dp, int *rc, struct diag *err)
{
    memset(dp, 0, sizeof *dp);
    memset(c, 0, sizeof *c);
    *rc = 0;
    if (o->sync != RT_SYNC_DILOCO)
        return 0;
    if (cluster_load(o->files[1], c, err)) {
        *rc = -1;
        return 1;
    }
    if (c->n_regions < 2) {
        printf("note: --sync diloco changes nothing on %s: it is one region (one site), trained exactly\n", c->name);
        cluster_free(c);
        return 0;
    }
    ir_graph g;
    ir_graph_init(&g);
    peak_kind kind = estimate_peak_kind(o->precision, o->tf32);
    *rc = cluster_require_peak(c, kind, err) || cluster_require_peak(c, PEAK_FP32, err) ||
                  model_input_load(o->files[0], o, &g, err) ||
                  diloco_plan_make(c, o, global_batch(&g), place_rows_on_site, (void *)o,
                                   simulated ? simulated_step : estimated_step, simulated ? "simulated" : "estimated",
                                   dp, err)
              ? -1
              : 0;
    ir_graph_free(&g);
    return 1;
}

/* The global step's lines (plan, simulate) and the best single site's. */
static int diloco_report(const options *o, const diloco_plan *dp, const cluster *c, int sim_steps, struct diag *err)
{
    diloco_print(stdout, dp, c);
    double step = diloco_global_step(dp);
    const char *unit;
    double items = diloco_step_items(dp, &unit);
    printf("%s step: %.3f ms (one global batch of %lld rows, all sites' work, the outer step amortised over a round)\n",
           dp->timed_by, step * 1e3, (long long)dp->global_batch);
    printf("throughput: %.0f %s/s (%.0f %s a global batch)\n", step > 0 ? items / step : 0.0, unit, items, unit);
    site_baseline b;
    if (baseline_best_site(c, place_on_site, (void *)o, sim_steps, &b, err))
        return -1;
    baseline_print(stdout, &b, step);
    return 0;
}

/* The best single site's line, for a plan that takes this_step seconds. */
static int print_best_site(const options *o, const cluster *c, int sim_steps, double this_step, struct diag *err)
{
    site_baseline b;
    if (baseline_best_site(c, place_on_site, (void *)o, sim_steps, &b, err))
        return -1;
    baseline_print(stdout, &b, this_step);
    return 0;
}

/* --tokenizer: its ids must fit the model's vocab (the hyper-parameter, when
 * the model has one); its files go to OUT/tokenizer/ (fusionc export). */
static int compile_tokenizer(const options *o, const ir_graph *g, struct diag *err)
{
    if (!o->tokenizer)
        return 0;
    char why[2 * FU_PATH_BYTES], json[FU_PATH_BYTES + 32], dir[FU_PATH_BYTES + 32];
    struct stat st;
    if (stat(o->tokenizer, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(json, sizeof json, "%s/tokenizer.json", o->tokenizer);
    else
        snprintf(json, sizeof json, "%s", o->tokenizer);
    tk_tokenizer *tk = tk_load(json, why, sizeof why);
    if (!tk)
        return diag_set(err, o->tokenizer, 0, "%s", why);
    int32_t ids = tk_vocab_size(tk);
    tk_free(tk);
    for (int32_t i = 0; i < g->n_hypers; i++)
        if (strcmp(ir_str(g, g->hypers[i].name), "vocab") == 0 && !g->hypers[i].is_float && g->hypers[i].i < ids)
            return diag_set(err, o->tokenizer, 0,
                            "the tokenizer's %d ids do not fit the model's vocab of %lld (--set vocab=%d)", ids,
                            (long long)g->hypers[i].i, ids);
    snprintf(dir, sizeof dir, "%s/tokenizer", o->output);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return diag_set(err, dir, 0, "cannot make the folder: %s", strerror(errno));
    return export_copy_tokenizer(o->tokenizer, dir, why, sizeof why) ? diag_set(err, dir, 0, "%s", why) : 0;
}

int compile_option_take(int argc, char **argv, int *i, char *why, size_t n)
{
    static options scratch;
    memset(&scratch, 0, sizeof scratch);
    return cli_take(&compile_usage, argc, argv, i, &scratch, why, n);
}

/* compile -o OUT over an earlier compile (its compile.args, plan.txt or
 * launch-local.sh there: what a compile writes once its programs are;
 * a failed one's leftovers do not count): refused without --force, which
 * empties the folder first, since the old programs (an old run key, an
 * old plan) would stay beside the new ones.  A folder without one is
 * written into as it is, and never emptied. */
static int output_folder_ready(const char *out, int force, struct diag *err)
{
    static const char *const marks[] = { "compile.args", "plan.txt", "launch-local.sh" };
    int earlier = 0;
    char path[FU_PATH_BYTES + 32];
    for (size_t k = 0; k < sizeof marks / sizeof marks[0] && !earlier; k++) {
        snprintf(path, sizeof path, "%s/%s", out, marks[k]);
        earlier = access(path, F_OK) == 0;
    }
    if (!earlier)
        return 0;
    if (!force)
        return diag_set(err, out, 0,
                        "the output folder holds an earlier compile: give --force to empty it first (everything "
                        "in it goes), or choose another -o");
    return folders_empty(out, err);
}

static int cmd_compile(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &compile_usage, &o);
    if (rc)
        return options_exit(rc);
    if (o.n_files != 2)
        return usage_error(&compile_usage, "%s", "expected a MODEL and a CLUSTER");
    if (!o.output)
        return usage_error(&compile_usage, "%s", "expected -o OUT, the output folder");
    struct diag err = { 0 };
    if (output_folder_ready(o.output, o.force, &err)) {
        diag_print(&err);
        return 1;
    }
    placed_model m;
    bundle_toolchain tc = *bundle_default_toolchain();
    tc.cublas_system = o.cublas && strcmp(o.cublas, "system") == 0;
    tc.run_key = o.run_key;
    cluster whole;
    diloco_plan dp;
    if (diloco_applies(&o, 0, &whole, &dp, &rc, &err)) {
        if (rc == 0)
            rc = diloco_write(&dp, &whole, o.output, &tc, o.port_base, &err) || compile_tokenizer(&o, &dp.g[0], &err);
        if (rc)
            diag_print(&err);
        else
            printf("compiled %s for %s with --sync diloco: %d sites, H = %d, in %s/ (plan.txt says how)\n",
                   ir_str(&dp.g[0], dp.g[0].name), whole.name, dp.n_sites, dp.outer.local_steps, o.output);
        diloco_plan_free(&dp);
        cluster_free(&whole);
        return rc ? 1 : 0;
    }
    rc = placed_load(&m, &o, 1, &err) || bundle_write(&m.g, &m.c, o.output, &tc, o.port_base, &err) ||
         plan_report_write(&m.g, &m.c, &m.plan, o.output, &err) || compile_tokenizer(&o, &m.g, &err);
    if (rc == 0 && broker_write_compile_args(o.output, argc, argv, o.files[0], o.files[1]))
        rc = diag_set(&err, o.output, 0, "cannot write %s/compile.args", o.output);
    const fence_plan *plan = &m.plan;
    if (rc)
        diag_print(&err);
    else
        printf("compiled %s for %s: %d device program%s (%d stage%s x %d replica%s, %d micro-batch%s) in %s/\n",
               ir_str(&m.g, m.g.name), m.c.name, plan->n_stages * plan->n_replicas,
               plan->n_stages * plan->n_replicas == 1 ? "" : "s", plan->n_stages, plan->n_stages == 1 ? "" : "s",
               plan->n_replicas, plan->n_replicas == 1 ? "" : "s", plan->micro_batches,
               plan->micro_batches == 1 ? "" : "es", o.output);
    if (rc == 0 && m.note[0])
        printf("%s\n", m.note);
    if (rc == 0)
        plan_explain_idle(stdout, &o, &m);
    placed_free(&m);
    return rc ? 1 : 0;
}

static int cmd_plan(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &plan_usage, &o);
    if (rc)
        return options_exit(rc);
    if (o.n_files != 2)
        return usage_error(&plan_usage, "%s", "expected a MODEL and a CLUSTER");
    struct diag err = { 0 };
    cluster whole;
    diloco_plan dp;
    if (diloco_applies(&o, 0, &whole, &dp, &rc, &err)) {
        for (int32_t k = 0; k < dp.n_sites && rc == 0; k++) {
            printf("== site %d: region %s ==\n", k, dp.site[k].name);
            plan_report_print(stdout, &dp.g[k], &dp.site[k], &dp.plan[k]);
        }
        if (rc == 0)
            rc = diloco_report(&o, &dp, &whole, 0, &err);
        if (rc)
            diag_print(&err);
        diloco_plan_free(&dp);
        cluster_free(&whole);
        return rc ? 1 : 0;
    }
    placed_model m;
    rc = placed_load(&m, &o, 1, &err);
    if (rc == 0) {
        if (m.note[0])
            printf("%s\n", m.note);
        plan_report_print(stdout, &m.g, &m.c, &m.plan);
        plan_explain_idle(stdout, &o, &m);
        rc = print_best_site(&o, &m.c, 0, m.plan.step_seconds, &err) ||
             (o.output && plan_report_write(&m.g, &m.c, &m.plan, o.output, &err));
    }
    if (rc)
        diag_print(&err);
    placed_free(&m);
    return rc ? 1 : 0;
}

static int cmd_simulate(int argc, char **argv)
{
    options o;
    int rc = parse_options(argc, argv, &simulate_usage, &o);
    if (rc)
        return options_exit(rc);
    if (o.n_files != 2)
        return usage_error(&simulate_usage, "%s", "expected a MODEL and a CLUSTER");
    o.study = 1;
    struct diag err = { 0 };
    cluster whole;
    diloco_plan dp;
    if (diloco_applies(&o, 1, &whole, &dp, &rc, &err)) {
        if (rc == 0)
            printf("simulate: %s on %s, --sync diloco, precision %s\n", ir_str(&dp.g[0], dp.g[0].name), whole.name,
                   ir_dtype_name(dp.g[0].precision));
        for (int32_t k = 0; rc == 0 && k < dp.n_sites; k++) { /* studied, but said */
            struct diag unfit = { 0 };
            if (plan_memory_check(&dp.g[k], &dp.site[k], &dp.plan[k], o.files[0], &unfit))
                printf("warning: site %d (region %s): %s\n", k, dp.site[k].name, unfit.msg);
        }
        if (rc == 0)
            rc = diloco_report(&o, &dp, &whole, 3, &err);
        if (rc)
            diag_print(&err);
        diloco_plan_free(&dp);
        cluster_free(&whole);
        return rc ? 1 : 0;
    }
    placed_model m;
    sim_result r;
    memset(&r, 0, sizeof r);
    rc = placed_load(&m, &o, 0, &err) || simulate_steps(&m.g, &m.c, o.steps > 0 ? o.steps : 3, !o.no_overlap, &r, &err);
    if (rc == 0) {
        if (m.note[0])
            printf("%s\n", m.note);
        simulate_print(stdout, &m.g, &m.c, &m.plan, &r, o.verbose);
        rc = print_best_site(&o, &m.c, r.n_steps, sim_steady_step(&r), &err) ||
             (o.output && simulate_write_gantt(&r, &m.c, o.output, &err)) ||
             (o.trace && simulate_write_trace(&r, &m.c, o.trace, &err));
        if (rc == 0 && o.trace)
            printf("trace: %s (the device programs' --trace format; ui.perfetto.dev opens it)\n", o.trace);
    }
    if (rc)
        diag_print(&err);
    sim_result_free(&r);
    placed_free(&m);
    return rc ? 1 : 0;
}

static int cmd_passes(int argc, char **argv)
{
    (void)argc, (void)argv;
    printf("%-10s %s\n", "frontend", "(not a pass) the graph as the frontend built it");
    for (int i = 0; i < pass_count; i++)
        printf("%-10s %s\n", pass_pipeline[i].name, pass_pipeline[i].doc);
    return 0;
}

static int cmd_profile(int argc, char **argv)
{
    /* Measure as the devices' programs run (runtime/main.c): libgomp reads
     * its wait policy only at start, and OpenMP threads left spinning after
     * bf16's conversions slow the sgemm that follows (runtime/cpu/threads.c). */
    char **again = getenv("OMP_WAIT_POLICY") ? NULL : calloc((size_t)argc + 3, sizeof *again);
    if (again) {
        again[0] = "fusionc", again[1] = "profile";
        memcpy(again + 2, argv, (size_t)argc * sizeof *argv);
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", again); /* on failure, measure anyway */
        free(again);
    }
    return profile_main(argc, argv);
}

/* ---- the commands ---------------------------------------------------------- */

typedef struct {
    const char *name;
    const char *args;                  /* what follows the name in `fusionc --help`                 */
    const char *summary;               /* its line there (lines joined by '\n'); NULL: not listed   */
    const cli_usage *usage;            /* `fusionc NAME --help`; its run parses with the same one  */
    int (*run)(int argc, char **argv); /* argv: what follows the name           */
} command;

/* clang-format off */
static const command commands[] = {
    { "check", "FILE...", "validate model and cluster files (schema, names, shapes, links)", &check_usage, cmd_check },
    { "dump", "MODEL", "print the operator graph (OP-DAG) after a pass, as text, Graphviz or HTML", &dump_usage,
      cmd_dump },
    { "stats", "MODEL", "parameters, FLOPs per sample (forward, backward), activation bytes", &stats_usage, cmd_stats },
    { "compile", "MODEL CLUSTER -o OUT", "one training program per device: OUT/<device>/fusion-<device>",
      &compile_usage, cmd_compile },
    { "plan", "MODEL CLUSTER", "how the model is placed on the cluster, with estimated times", &plan_usage, cmd_plan },
    { "simulate", "MODEL CLUSTER", "simulate training steps of the placed model, event by event", &simulate_usage,
      cmd_simulate },
    { "passes", NULL, "list the compiler's passes, in the order they run", &passes_usage, cmd_passes },
    { "profile", NULL, "measure this host's CPU and print its <device> line for a cluster file", &profile_usage,
      cmd_profile },
    { "probe", "CLUSTER -o FILE", "measure the hosts over ssh (peaks, each region's and link's bandwidth and\n"
                                   "latency) and write the cluster file with what they measured",
      &probe_usage, probe_main },
    { "deploy", "OUT", "copy each device's bundle to its host over ssh (checked, only what changed)", &deploy_usage,
      deploy_main },
    { "launch", "OUT ARGS", "start every device on its host over ssh, gather the logs, wait for the end",
      &launch_usage, launch_main },
    { "stop", "OUT", "stop the devices of OUT on their hosts", &stop_usage, stop_main },
    { "export", "CHECKPOINT -o DIR", "a checkpoint as a Hugging Face model folder (config.json, safetensors)",
      &export_usage, export_main },
    { "generate", "MODEL CLUSTER --init W", "compile an inference program (cached), run it on a prompt and\n"
                                            "stream the text it generates",
      &generate_usage, generate_main },
    { "serve", "MODEL CLUSTER --init W", "an OpenAI-compatible HTTP server in front of the model's inference\n"
                                         "program (/v1/completions, /v1/chat/completions, streaming)",
      &serve_usage, serve_main },
    { "chat-template", "TOKENIZER --messages F", "a conversation as the text a chat model is given (the tokenizer's\n"
                                                 "Jinja chat template, as fusionc serve renders it)",
      &chat_usage, chat_template_main },
    { "tokenize", "TOKENIZER FILE... -o OUT", "text files to one token shard with a Hugging Face tokenizer.json\n"
                                              "(and back: --decode)",
      &tokenize_usage, tokenize_main },
    { "report", "LOG...", "plot the step logs (--log): loss, tokens/s, each link's bytes and busy time",
      &report_usage, report_main },
    { "broker", "OUT ARGS", "run OUT's devices on this machine and keep the run going when devices are\n"
                            "lost (standbys, re-plans, coordinated checkpoints; state in SQLite)",
      &broker_usage, cmd_broker },
    { "provide", "--invite FILE", "offer this machine's device to a run (outbound only): measured, joined\n"
                                  "when the plan with it is faster, its program fetched through the broker",
      &provide_usage, cmd_provide },
    { "invite", "OUT", "another invite for providers to join the run in OUT, or one revoked",
      &invite_usage, cmd_invite },
    /* started by the broker on a standby's host (or by hand there): not listed */
    { "standby", NULL, NULL, &standby_usage, cmd_standby },
};
/* clang-format on */

/* `fusionc --help`: the commands, from the table. */
static void print_usage(FILE *f)
{
    fputs("usage: fusionc COMMAND [options]\n"
          "\n"
          "Compiles a model (XML) for a cluster (XML) into per-device training programs.\n"
          "\n"
          "commands:\n",
          f);
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) {
        const command *c = &commands[k];
        if (!c->summary)
            continue;
        char label[128];
        snprintf(label, sizeof label, "%s%s%s", c->name, c->args ? " " : "", c->args ? c->args : "");
        int len = (int)strlen(label);
        fprintf(f, "  %s%*s", label, len <= 15 ? 16 - len : 2, "");
        for (const char *line = c->summary; line;) { /* more lines under the first */
            const char *next = strchr(line, '\n');
            fprintf(f, "%.*s\n", next ? (int)(next - line) : (int)strlen(line), line);
            if ((line = next ? next + 1 : NULL) != NULL)
                fprintf(f, "%18s", "");
        }
    }
    fputs("\n"
          "options:\n"
          "  --help          this text; `fusionc COMMAND --help` for a command's\n"
          "  --version       the version, the commit and the libraries' versions\n",
          f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (cli_is_help(name) || strcmp(name, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "version") == 0) {
        version_print(stdout);
        return 0;
    }
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++) {
        const command *c = &commands[k];
        if (strcmp(name, c->name) != 0)
            continue;
        if (argc > 2 && cli_is_help(argv[2])) { /* (later ones: the command's own loop, same usage) */
            cli_usage_print(stdout, c->usage);
            return 0;
        }
        return c->run(argc - 2, argv + 2);
    }
    const char *names[sizeof commands / sizeof commands[0]];
    for (size_t k = 0; k < sizeof commands / sizeof commands[0]; k++)
        names[k] = commands[k].summary ? commands[k].name : NULL; /* the listed ones */
    char suggestion[128];
    cli_suggest(name, names, (int)(sizeof names / sizeof names[0]), suggestion, sizeof suggestion);
    fprintf(stderr, "fusionc: unknown command '%s'%s\nsee 'fusionc --help'\n", name, suggestion);
    return 2;
}
