/* plan_report.c: the placement report (see plan_report.h).
 *
 *   scheduler opfence: 2 fences, 2 stages x 1 replica, 4 micro-batches
 *   fence 0: cpu-a0 cpu-a1            fence 1: cpu-b0 cpu-b1
 *   stage  devices  ops (fwd)  compute/mb  send/mb  link/mb  update  allreduce  memory
 *   ...
 *   bottleneck: stage 1's compute, 12.3 ms per micro-batch
 *   estimated step: 71.2 ms (4 micro-batches)
 *   precision: bf16 (activations and their gradients; ...)
 *   link stage 1 <-> 2 (cpu-a1 <-> cpu-b0): 1.50 MiB a step forward, 1.50 MiB back (a replica lane)
 */
#include "plan_report.h"
#include "plan_memory.h"
#include "baseline.h"

#include "../runtime/atomic_file.h"
#include "../ir/folders.h"
#include "../ir/ops.h"
#include "../runtime/comm/allreduce_wire.h" /* ALLREDUCE_DIRECT_BITS */

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int32_t forward_ops_on(const ir_graph *g, int32_t stage)
{
    int32_t n = 0;
    for (int32_t i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].stage == stage && (g->nodes[i].phase == PHASE_FORWARD || g->nodes[i].phase == PHASE_NONE);
    return n;
}

/* Bytes a step between stages a < b on one replica lane, as the sends
 * put them on the wire (after compression): [0] a -> b, [1] b -> a.  A
 * send runs every micro-batch, or once a step (a parameter, a summed
 * parameter gradient, the update's scalars). */
static void link_bytes(const ir_graph *g, int32_t a, int32_t b, double bytes[2])
{
    bytes[0] = bytes[1] = 0.0;
    int32_t M = g->placement.micro_batches > 0 ? g->placement.micro_batches : 1;
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const ir_node *n = &g->nodes[i];
        int32_t peer = (int32_t)ir_node_int(n, ATTR_PEER, -1);
        if (n->op != OP_SEND || !((n->stage == a && peer == b) || (n->stage == b && peer == a)))
            continue;
        int once = ir_node_int(n, ATTR_ONCE, 0) || ir_node_int(n, ATTR_ACCUMULATE, 0) || n->phase == PHASE_UPDATE;
        bytes[n->stage == b] += compress_wire_bytes(g, n) * (once ? 1 : M);
    }
}

/* "1.50 MiB", "12.0 KiB", "8 B" */
static const char *size_text(double bytes, char *buf, size_t size)
{
    if (bytes >= 1024.0 * 1024.0)
        snprintf(buf, size, "%.2f MiB", bytes / (1024.0 * 1024.0));
    else if (bytes >= 1024.0)
        snprintf(buf, size, "%.1f KiB", bytes / 1024.0);
    else
        snprintf(buf, size, "%.0f B", bytes);
    return buf;
}

static void print_links(FILE *out, const ir_graph *g, const cluster *c, const fence_plan *p)
{
    ir_dtype frozen = ir_frozen_dtype(g);
    fprintf(out, "precision: %s (%s)%s%s\n", ir_dtype_name(g->precision),
            g->precision == DT_F32 && frozen == DT_F32 ? "everything f32"
            : g->precision == DT_F32                   ? "all but the frozen parameters"
                                                       : "activations and their gradients, on the wire too; "
                                                         "parameters, their gradients and AdamW's state f32",
            frozen != DT_F32 ? "; frozen parameters " : "", frozen != DT_F32 ? ir_dtype_name(frozen) : "");
    if (g->placement.n_stages != p->n_stages)
        return;
    for (int32_t a = 0; a < p->n_stages; a++)
        for (int32_t b = a + 1; b < p->n_stages; b++) {
            double bytes[2];
            link_bytes(g, a, b, bytes);
            if (bytes[0] + bytes[1] <= 0)
                continue;
            char f[32], back[32];
            fprintf(out, "link stage %d <-> %d (%s <-> %s): %s a step forward, %s back%s\n", a, b,
                    c->devices[p->devices[a * p->n_replicas]].name, c->devices[p->devices[b * p->n_replicas]].name,
                    size_text(bytes[0], f, sizeof f), size_text(bytes[1], back, sizeof back),
                    p->n_replicas > 1 ? " (each replica lane)" : "");
        }
    for (int32_t i = 0; i < g->n_nodes; i++) /* parameters the comm pass sends in 16 bits (passes.h) */
        if (g->nodes[i].op == OP_SEND && ir_node_int(&g->nodes[i], ATTR_BITS, 0) == ATTR_BITS_HALF)
            fprintf(out, "parameter %s crosses from stage %d to %d in %s (every reader there rounds it so)\n",
                    ir_value_name(g, g->nodes[i].in[0]), g->nodes[i].stage,
                    (int)ir_node_int(&g->nodes[i], ATTR_PEER, 0), ir_dtype_name(g->precision));
}

void plan_report_print(FILE *out, const ir_graph *g, const cluster *c, const fence_plan *p)
{
    const double ms = 1e3, mib = 1024.0 * 1024.0;
    fprintf(out, "plan: %s on %s, scheduler %s: %d fence%s, %d stage%s x %d replica%s, %d micro-batch%s\n",
            ir_str(g, g->name), c->name, p->scheduler ? p->scheduler : "opfence", p->n_fences,
            p->n_fences == 1 ? "" : "s", p->n_stages, p->n_stages == 1 ? "" : "s", p->n_replicas,
            p->n_replicas == 1 ? "" : "s", p->micro_batches, p->micro_batches == 1 ? "" : "es");
    /* the words, once: the plan is read by people who do not know OP-Fence's */
    fputs("  (a fence: devices with like links, grouped; a stage: a slice of the layers, the stages a pipeline;\n"
          "   a replica: a copy of a stage that takes part of its batch; a micro-batch (mb): a piece of the step's\n"
          "   batch, so that the stages work at once)\n",
          out);
    for (int32_t f = 0; f < p->n_fences && p->fence_of_device; f++) {
        fprintf(out, "fence %d:", f);
        for (int32_t d = 0; d < c->n_devices; d++)
            if (p->fence_of_device[d] == f)
                fprintf(out, " %s", c->devices[d].name);
        fputc('\n', out);
    }
    fprintf(out, "%-5s %-24s %5s %12s %12s %12s %10s %10s %10s\n", "stage", "devices", "ops", "compute/mb", "sent/mb",
            "link/mb", "update", "allreduce", "memory");
    for (int32_t s = 0; s < p->n_stages; s++) {
        char devices[256] = "";
        for (int32_t r = 0; r < p->n_replicas; r++) {
            size_t used = strlen(devices);
            snprintf(devices + used, sizeof devices - used, "%s%s", r ? "," : "",
                     c->devices[p->devices[s * p->n_replicas + r]].name);
        }
        char sent[32] = "-", link[32] = "-";
        if (s + 1 < p->n_stages) {
            snprintf(sent, sizeof sent, "%.1f KiB", p->cut_bytes[s] / 1024.0);
            snprintf(link, sizeof link, "%.2f ms", p->cut_transfer[s] * ms);
        }
        fprintf(out, "%-5d %-24s %5d %9.2f ms %12s %12s %7.2f ms %7.2f ms %6.1f MiB\n", s, devices,
                forward_ops_on(g, s), p->stage_compute[s] * ms, sent, link, p->stage_update[s] * ms,
                p->allreduce[s] * ms, plan_stage_memory(g, p, s) / mib);
    }
    int32_t placed = g->placement.n_stages == p->n_stages, any = 0, count = 0;
    for (int32_t s = 0; placed && s < p->n_stages; s++)
        count += ir_placement_recompute(&g->placement, s) != 0 && ir_placement_keep(&g->placement, s) == 0;
    for (int32_t s = 0; placed && s < p->n_stages; s++) { /* partial replay: a line a stage */
        int32_t keep = ir_placement_keep(&g->placement, s), n = ir_placement_in_flight(&g->placement, s);
        if (keep > 0)
            fprintf(out,
                    "recompute: stage %d keeps %d of its %d micro-batches in flight whole; the other %d keep only "
                    "what its forward receives and run it again before their backward\n",
                    s, keep, n, n - keep);
    }
    for (int32_t s = 0; placed && s < p->n_stages; s++)
        if (ir_placement_recompute(&g->placement, s) && ir_placement_keep(&g->placement, s) == 0)
            fprintf(out, "%s%d", any++ ? ", " : count == 1 ? "recompute: stage " : "recompute: stages ", s);
    if (any)
        fprintf(out, " %s only what %s forward receives a micro-batch and run%s it again before %s backward\n",
                count == 1 ? "keeps" : "keep", count == 1 ? "its" : "their", count == 1 ? "s" : "",
                count == 1 ? "its" : "their");
    /* The comm pass's choice of how each stage averages its gradients
     * (passes/allreduce_plan.h): said only where it is the hierarchy, the
     * quantised exchange or sharded. */
    for (int32_t i = 0, said = -1; i < g->n_nodes; i++) {
        int is_ar = g->nodes[i].op == OP_ALLREDUCE;
        int64_t groups = is_ar ? ir_node_int(&g->nodes[i], ATTR_GROUPS, 0) : 0;
        int64_t bits = is_ar ? ir_node_int(&g->nodes[i], ATTR_BITS, 0) : 0;
        int shard = is_ar && ir_node_int(&g->nodes[i], ATTR_SHARD, 0);
        if ((!groups && !bits && !shard) || g->nodes[i].stage == said)
            continue;
        said = g->nodes[i].stage;
        if (shard) {
            fprintf(out,
                    "sharded optimizer: stage %d's %d replicas each keep 1/%d of AdamW's moments (ZeRO-1: the "
                    "ring's reduce-scatter while the backward runs, each replica's update of its piece, an "
                    "all-gather of the parameters after it; runtime/shard.h)\n",
                    said, p->n_replicas, p->n_replicas);
            continue;
        }
        if (bits == ALLREDUCE_DIRECT_BITS) {
            fprintf(out,
                    "all-reduce: stage %d by the direct exchange, f32 (each replica a chunk's owner: every chunk "
                    "sent to its owner, the mean sent back: two rounds, a latency each, where a ring pays %d; "
                    "passes/allreduce_plan.h)\n",
                    said, 2 * (p->n_replicas - 1));
            continue;
        }
        if (bits) {
            fprintf(out,
                    "all-reduce: stage %d quantised to %d bits with error feedback (each replica a chunk's "
                    "owner: every chunk sent to its owner, the mean sent back; passes/allreduce_plan.h)\n",
                    said, (int)bits);
            continue;
        }
        fprintf(out, "all-reduce: stage %d hierarchical, groups", said);
        for (int32_t r = 0; r < p->n_replicas; r++)
            fprintf(out, "%s%s",
                    r == 0              ? " "
                    : (groups >> r & 1) ? " | "
                                        : ",",
                    c->devices[p->devices[said * p->n_replicas + r]].name);
        fputs(" (a ring inside each, one among their leaders, the result sent back)\n", out);
    }
    int32_t b = p->bottleneck_stage;
    if (p->bottleneck_is_link)
        fprintf(out, "bottleneck: the link from stage %d to %d, %.2f ms per micro-batch\n", b, b + 1,
                p->bottleneck * ms);
    else
        fprintf(out, "bottleneck: stage %d's compute, %.2f ms per micro-batch\n", b, p->bottleneck * ms);
    fprintf(out, "estimated step: %.2f ms (%d micro-batch%s)\n", p->step_seconds * ms, p->micro_batches,
            p->micro_batches == 1 ? "" : "es");
    print_links(out, g, c, p);
}

/* Write `path` via a temporary name; `fill` writes the contents. */
static int write_atomically(const char *path, int (*fill)(FILE *, const void *), const void *arg, struct diag *err)
{
    atomic_file af;
    char why[FU_PATH_BYTES + 200];
    FILE *f = atomic_open(&af, path, why, sizeof why);
    if (!f)
        return diag_set(err, path, 0, "%s", why);
    if (fill(f, arg) != 0) {
        atomic_abort(&af);
        return diag_set(err, path, 0, "cannot write");
    }
    if (atomic_commit(&af, 0, why, sizeof why))
        return diag_set(err, path, 0, "%s", why);
    return 0;
}

typedef struct {
    const ir_graph *g;
    const cluster *c;
    const fence_plan *p;
} report_args;

static int fill_text(FILE *f, const void *arg)
{
    const report_args *a = arg;
    plan_report_print(f, a->g, a->c, a->p);
    return ferror(f) ? -1 : 0;
}

/* plan.svg: one column per stage (its devices on top), the stage's forward
 * ops down it in schedule order, each box in its device's colour; below
 * them what the stage sends and to which stage.  Drawn here rather than by
 * Graphviz: dot takes minutes to lay out a training graph of a few hundred
 * ops, and a pipeline reads best as columns anyway. */
static const char *const stage_colours[] = { "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3",
                                             "#fdb462", "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd" };

static void svg_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

static int fill_svg(FILE *f, const void *arg)
{
    const report_args *a = arg;
    const ir_graph *g = a->g;
    const fence_plan *p = a->p;
    const int col = 300, row = 20, top = 60;
    int32_t tallest = 0;
    for (int32_t s = 0; s < p->n_stages; s++) {
        int32_t n = forward_ops_on(g, s);
        for (int32_t i = 0; i < g->n_nodes; i++)
            n += g->nodes[i].stage == s && g->nodes[i].op == OP_SEND;
        tallest = n > tallest ? n : tallest;
    }
    int width = col * p->n_stages + 20, height = top + row * (tallest + 2) + 20;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"Helvetica\" "
            "font-size=\"11\">\n<text x=\"10\" y=\"18\" font-size=\"14\">",
            width, height);
    svg_text(f, ir_str(g, g->name));
    fprintf(f, " on %s: %d stages x %d replicas, %d micro-batches, estimated step %.2f ms</text>\n", a->c->name,
            p->n_stages, p->n_replicas, p->micro_batches, p->step_seconds * 1e3);
    for (int32_t s = 0; s < p->n_stages; s++) {
        int x = 10 + s * col, y = top;
        const char *colour = stage_colours[s % (int)(sizeof stage_colours / sizeof *stage_colours)];
        fprintf(f, "<text x=\"%d\" y=\"%d\" font-weight=\"bold\">stage %d:", x, top - 14, s);
        for (int32_t r = 0; r < p->n_replicas; r++) {
            fputc(' ', f);
            svg_text(f, a->c->devices[p->devices[s * p->n_replicas + r]].name);
        }
        fputs("</text>\n", f);
        for (int32_t i = 0; i < g->n_nodes; i++) {
            const ir_node *n = &g->nodes[i];
            int forward = n->phase == PHASE_FORWARD || n->phase == PHASE_NONE;
            if (n->stage != s || !(forward || n->op == OP_SEND))
                continue;
            if (n->op == OP_SEND && n->phase != PHASE_FORWARD)
                continue; /* gradients go back the way activations came */
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\" stroke=\"#555\"/>", x, y,
                    col - 20, row - 3, n->op == OP_SEND ? "white" : colour);
            fprintf(f, "<text x=\"%d\" y=\"%d\">", x + 4, y + row - 7);
            svg_text(f, ir_node_name(g, i));
            if (n->op == OP_SEND)
                fprintf(f, " &#8594; stage %lld", (long long)ir_node_int(n, ATTR_PEER, -1));
            fputs("</text>\n", f);
            y += row;
        }
    }
    fputs("</svg>\n", f);
    return ferror(f) ? -1 : 0;
}

int plan_report_write(const ir_graph *g, const cluster *c, const fence_plan *p, const char *dir, struct diag *err)
{
    report_args a = { g, c, p };
    char path[FU_PATH_BYTES], svg[FU_PATH_BYTES];
    if (folders_make(dir, err))
        return -1;
    snprintf(path, sizeof path, "%s/plan.txt", dir);
    snprintf(svg, sizeof svg, "%s/plan.svg", dir);
    return write_atomically(path, fill_text, &a, err) || write_atomically(svg, fill_svg, &a, err) ? -1 : 0;
}

/* The simulated steps, the bubble, each stage's busy time, the links'
 * bytes (each link's with verbose). */
void simulate_print(FILE *out, const ir_graph *g, const cluster *c, const fence_plan *plan, const sim_result *r,
                    int verbose)
{
    const double ms = 1e3;
    fprintf(out,
            "simulate: %s on %s, scheduler %s, %d stage%s x %d replica%s, %d micro-batch%s, %d step%s, "
            "precision %s%s\n",
            ir_str(g, g->name), c->name, plan->scheduler ? plan->scheduler : "opfence", plan->n_stages,
            plan->n_stages == 1 ? "" : "s", plan->n_replicas, plan->n_replicas == 1 ? "" : "s", plan->micro_batches,
            plan->micro_batches == 1 ? "" : "es", r->n_steps, r->n_steps == 1 ? "" : "s", ir_dtype_name(g->precision),
            g->tf32 ? " (tf32 products)" : "");
    for (int32_t k = 0; k < r->n_steps; k++)
        fprintf(out, "step %d: %.3f ms\n", k + 1, (r->step_end[k] - (k ? r->step_end[k - 1] : 0.0)) * ms);
    double step = sim_steady_step(r);
    const char *unit;
    double items = baseline_step_items(g, &unit);
    fprintf(out, "simulated step: %.3f ms\n", step * ms);
    fprintf(out, "throughput: %.0f %s/s (%.0f %s a step, every device's)\n", step > 0 ? items / step : 0.0, unit, items,
            unit);
    fprintf(out, "plan estimate: %.3f ms\n", plan->step_seconds * ms);
    /* The estimate pass's time of every op (est_time, on its stage's first
     * device): what one device alone would be busy for, a step's worth. */
    double ops = 0.0;
    for (int32_t i = 0; i < g->n_nodes; i++) /* (nodes the comm pass added have none: -1) */
        if (g->nodes[i].est_time > 0)
            ops += g->nodes[i].est_time * (g->nodes[i].phase == PHASE_UPDATE ? 1 : plan->micro_batches);
    fprintf(out, "op estimates: %.3f ms\n", ops * ms);
    fprintf(out, "bubble: %.4f\n", r->bubble);
    fprintf(out, "%-5s %-24s %12s\n", "stage", "devices", "busy");
    for (int32_t s = 0; s < plan->n_stages; s++) {
        double busy = 0.0;
        char devices[256] = "";
        for (int32_t i = 0; i < r->n_workers; i++)
            if (r->stage[i] == s) {
                size_t used = strlen(devices);
                snprintf(devices + used, sizeof devices - used, "%s%s", used ? "," : "", c->devices[r->device[i]].name);
                busy = busy > r->busy[i] / r->n_steps ? busy : r->busy[i] / r->n_steps; /* a step's */
            }
        fprintf(out, "%-5d %-24s %9.3f ms\n", s, devices, busy * ms);
    }
    /* A summary; every link's row with -v (48 devices make hundreds). */
    double total = 0.0, busiest = -1.0;
    int32_t used = 0, top = -1;
    for (int32_t l = 0; l < r->n_links; l++) {
        const sim_link *k = &r->links[l];
        double bytes = k->bytes[PHASE_FORWARD] + k->bytes[PHASE_BACKWARD] + k->bytes[PHASE_UPDATE];
        total += bytes;
        used += bytes > 0;
        if (bytes > busiest)
            busiest = bytes, top = l;
    }
    fprintf(out, "links: %d carry traffic, %.2f MiB a step in all", used, total / (1024.0 * 1024.0));
    if (top >= 0)
        fprintf(out, "; the most: %s->%s, %.2f MiB", c->devices[r->links[top].from].name,
                c->devices[r->links[top].to].name, busiest / (1024.0 * 1024.0));
    fprintf(out, "%s\n", verbose ? "" : " (-v: every link)");
    if (!verbose)
        return;
    fprintf(out, "%-30s %12s %12s %12s %12s\n", "link (bytes per step)", "forward", "backward", "update", "total");
    for (int32_t l = 0; l < r->n_links; l++) {
        const sim_link *k = &r->links[l];
        char name[300];
        snprintf(name, sizeof name, "%s->%s", c->devices[k->from].name, c->devices[k->to].name);
        fprintf(out, "%-30s %12.0f %12.0f %12.0f %12.0f\n", name, k->bytes[PHASE_FORWARD], k->bytes[PHASE_BACKWARD],
                k->bytes[PHASE_UPDATE], k->bytes[PHASE_FORWARD] + k->bytes[PHASE_BACKWARD] + k->bytes[PHASE_UPDATE]);
    }
}
