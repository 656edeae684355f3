/* bundle.c: the linker driver and bundle writer (see bundle.h).
 *
 * Per device: the host program's object (llvm_host.c) is linked by the C
 * compiler with libfusion_rt_main (main, the training loop),
 * libfusion_rt_cuda (the CUDA backend, dlopen'd driver: every bundle has
 * it, only a CUDA device's uses it) and libfusion_rt_cpu (kernels) into a
 * temporary file in the device's folder, then renamed to fusion-<device>: a
 * failed compile never leaves an executable that looks whole.  A CUDA
 * device's folder also gets kernels.cu and kernels.ptx, the generated
 * source and its PTX, for people and for ptxas.
 */
#include "bundle.h"

#include "comm/seal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/atomic_file.h"
#include "../ir/folders.h"
#include "../ir/ops.h"
#include "../passes/allreduce_plan.h"
#include "../passes/passes.h"
#include "bundle_libs.h"
#include "llvm_host.h"
#include "nvrtc.h"
#include "process.h"

#include <xxhash.h>

#ifndef FUSION_CC
#define FUSION_CC "cc"
#endif
#ifndef FUSION_RT_MAIN_LIB
#define FUSION_RT_MAIN_LIB "libfusion_rt_main.a"
#endif
#ifndef FUSION_RT_CUDA_LIB
#define FUSION_RT_CUDA_LIB "libfusion_rt_cuda.a"
#endif
#ifndef FUSION_RT_CPU_LIB
#define FUSION_RT_CPU_LIB "libfusion_rt_cpu.a"
#endif
#ifndef FUSION_CUDA_HOME
#define FUSION_CUDA_HOME "/usr/local/cuda"
#endif
#ifndef FUSION_LINK_FLAGS
#define FUSION_LINK_FLAGS "-lopenblas -fopenmp -lm"
#endif

const bundle_toolchain *bundle_default_toolchain(void)
{
    static const bundle_toolchain tc = {
        FUSION_CC, { FUSION_RT_MAIN_LIB, FUSION_RT_CUDA_LIB, FUSION_RT_CPU_LIB, NULL }, FUSION_LINK_FLAGS, 0, NULL
    };
    return &tc;
}

static int link_executable(const bundle_toolchain *tc, const char *object, const char *output, struct diag *err)
{
    char flags[1024];
    snprintf(flags, sizeof flags, "%s", tc->link_flags);
    char *argv[72];
    int n = 0;
    argv[n++] = (char *)tc->cc;
    argv[n++] = (char *)object;
    for (int i = 0; i < 4 && tc->runtime_libs[i]; i++)
        argv[n++] = (char *)tc->runtime_libs[i];
    for (char *tok = strtok(flags, " "); tok && n < 60; tok = strtok(NULL, " "))
        argv[n++] = tok;
    /* The bundled libraries (bundle_libs.h): DT_RPATH, which the loader
     * also searches for the libraries' own dependencies. */
    argv[n++] = "-Wl,-rpath,$ORIGIN/lib";
    argv[n++] = "-Wl,--disable-new-dtags";
    argv[n++] = "-o";
    argv[n++] = (char *)output;
    argv[n] = NULL;
    return run_command(argv, err, output);
}

/* The stage of each value without a producer (an input, a parameter): its
 * first reader's, in node order; -1 when nothing reads it.  One pass over
 * the nodes (a scan per value made a 400-layer compile spend a third of
 * its time here).  NULL when out of memory. */
static int32_t *unproduced_value_stages(const ir_graph *g)
{
    int32_t *stage = malloc((size_t)(g->n_values > 0 ? g->n_values : 1) * sizeof *stage);
    if (!stage)
        return NULL;
    for (int32_t v = 0; v < g->n_values; v++)
        stage[v] = -1;
    for (int32_t i = g->n_nodes - 1; i >= 0; i--) /* backwards: the first reader writes last */
        for (int k = 0; k < g->nodes[i].n_in; k++)
            stage[g->nodes[i].in[k]] = g->nodes[i].stage;
    return stage;
}

static int write_manifest_text(const ir_graph *g, const cluster_device *dev, int32_t stage, int64_t arena,
                               const char *path, struct diag *err)
{
    atomic_file af;
    char why[FU_PATH_BYTES + 200];
    FILE *f = atomic_open(&af, path, why, sizeof why);
    if (!f)
        return diag_set(err, path, 0, "%s", why);
    fprintf(f,
            "model      %s\ndevice     %s (%s, %d threads)\nstage      %d of %d (%d replicas, %d micro-batches)\n"
            "arena      %lld bytes\n",
            ir_str(g, g->name), dev->name, dev->kind == DEVICE_CPU ? "cpu" : "cuda", dev->threads, stage,
            g->placement.n_stages, g->placement.n_replicas, g->placement.micro_batches, (long long)arena);
    ir_dtype frozen = ir_frozen_dtype(g);
    fprintf(f, "precision  %s%s%s%s\n", ir_dtype_name(g->precision),
            g->tf32                  ? " (f32 products may use TF32 tensor cores)"
            : g->precision != DT_F32 ? " activations (parameters, their gradients, AdamW's state: f32)"
                                     : "",
            frozen != DT_F32 ? "; frozen parameters " : "", frozen != DT_F32 ? ir_dtype_name(frozen) : "");
    if (g->placement.n_stages > 0) {
        int32_t keep = ir_placement_keep(&g->placement, stage);
        fprintf(f, "schedule   %d warm-up forwards%s", (int)ir_placement_warmup(&g->placement, stage),
                ir_placement_recompute(&g->placement, stage)
                    ? ", recomputes: keeps a waiting micro-batch's inputs, runs its forward again"
                    : "");
        if (keep > 0)
            fprintf(f, " (but up to %d kept whole at once, which replay nothing)", (int)keep);
        fputc('\n', f);
    }
    int32_t *stage_of = unproduced_value_stages(g);
    if (!stage_of) {
        atomic_abort(&af);
        return diag_set(err, path, 0, "out of memory writing the manifest");
    }
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        if (val->producer >= 0 || stage_of[v] != stage)
            continue;
        char shape[256];
        fprintf(f, "%-6s %s %s%s at %lld\n", ir_role_name(val->role), ir_value_name(g, v), ir_dtype_name(val->dtype),
                ir_shape_str(&val->shape, shape, sizeof shape), (long long)val->offset);
    }
    free(stage_of);
    if (atomic_commit(&af, 0, why, sizeof why))
        return diag_set(err, path, 0, "the manifest: %s", why);
    return 0;
}

/* The graphs of one compile: one (exact), or one a site (--sync diloco),
 * each placed with the whole cluster's device indices. */
typedef struct {
    int32_t n;
    const ir_graph *g[RT_MAX_SITES];
    const rt_diloco_param *params; /* [n * n_params]: site k's table at k * n_params; NULL: exact */
    int32_t n_params;
} graph_set;

static void mark_pair(char *used, int32_t N, int32_t a, int32_t b)
{
    if (a != b && a >= 0 && b >= 0)
        used[(size_t)(a < b ? a : b) * N + (a < b ? b : a)] = 1;
}

/* Every link the program uses, the same list for every device: the
 * send/recv pairs between stages (per replica lane), each stage's ring of
 * replicas, and under diloco each parameter's holders in every two sites,
 * as (a < b) device pairs, sorted. */
static int collect_links(const graph_set *set, const cluster *c, rt_link **out, int32_t *count)
{
    int32_t N = c->n_devices;
    char *used = calloc((size_t)N * (size_t)N + 1, 1);
    if (!used)
        return -1;
    for (int32_t k = 0; k < set->n; k++) {
        const ir_graph *g = set->g[k];
        const ir_placement *p = &g->placement;
        int32_t S = p->n_stages, R = p->n_replicas;
        for (int32_t i = 0; i < g->n_nodes; i++) {
            const ir_node *node = &g->nodes[i];
            if (node->op != OP_SEND)
                continue;
            int32_t t = (int32_t)ir_node_int(node, ATTR_PEER, 0);
            for (int32_t r = 0; r < R && t >= 0 && t < S; r++)
                mark_pair(used, N, p->device[node->stage * R + r], p->device[t * R + r]);
        }
        for (int32_t s = 0; s < S && R > 1; s++)
            for (int32_t r = 0; r < R; r++)
                mark_pair(used, N, p->device[s * R + r], p->device[s * R + (r + 1) % R]);
        for (int32_t s = 0; g->output >= 0 && s + 1 < S; s++) /* inference: the drawn token, last stage to each */
            for (int32_t r = 0; r < R; r++)
                mark_pair(used, N, p->device[(S - 1) * R + r], p->device[s * R + r]);
        for (int32_t i = 0; i < g->n_nodes; i++) /* a hierarchical all-reduce's rings and leaders */
            if (g->nodes[i].op == OP_ALLREDUCE && ir_node_int(&g->nodes[i], ATTR_GROUPS, 0))
                allreduce_mark_links(ir_node_int(&g->nodes[i], ATTR_GROUPS, 0),
                                     p->device + (size_t)g->nodes[i].stage * R, R, used, N);
            else if (g->nodes[i].op == OP_ALLREDUCE && ir_node_int(&g->nodes[i], ATTR_BITS, 0))
                for (int32_t a = 0; a < R; a++) /* the quantised exchange: every pair of replicas */
                    for (int32_t b = a + 1; b < R; b++)
                        mark_pair(used, N, p->device[g->nodes[i].stage * R + a], p->device[g->nodes[i].stage * R + b]);
    }
    for (int32_t i = 0; set->params && i < set->n_params; i++)
        for (int32_t a = 0; a < set->n; a++)
            for (int32_t b = a + 1; b < set->n; b++)
                mark_pair(used, N, set->params[i].owner[a], set->params[i].owner[b]);
    int32_t n = 0;
    for (size_t k = 0; k < (size_t)N * (size_t)N; k++)
        n += used[k];
    rt_link *links = calloc((size_t)n + 1, sizeof *links);
    if (!links) {
        free(used);
        return -1;
    }
    n = 0;
    for (int32_t a = 0; a < N; a++)
        for (int32_t b = a + 1; b < N; b++)
            if (used[(size_t)a * N + b]) {
                links[n].a = a;
                links[n].b = b;
                /* the listener: a, unless a's host takes no connection (cluster.h: inbound) */
                links[n].b_listens = !c->hosts[c->devices[a].host].inbound;
                cluster_link_between(c, a, b, &links[n].bandwidth, &links[n].latency);
                n++;
            }
    free(used);
    *out = links;
    *count = n;
    return 0;
}

/* The device that reports the step's loss: replica 0 of the stage that computes it. */
static int32_t reporter_device(const ir_graph *g)
{
    const ir_placement *p = &g->placement;
    int32_t loss_stage = p->n_stages - 1;
    if (g->loss >= 0 && g->values[g->loss].producer >= 0)
        loss_stage = g->nodes[g->values[g->loss].producer].stage;
    return p->device[loss_stage * p->n_replicas];
}

/* OUT/launch-local.sh: every device on this machine, logs gathered, the
 * progress of the device that reports the loss printed as it comes. */
static int write_launch_local(const graph_set *set, const cluster *c, const char *out_dir, struct diag *err)
{
    const ir_graph *g = set->g[0];
    char path[FU_PATH_BYTES], why[FU_PATH_BYTES + 200];
    snprintf(path, sizeof path, "%s/launch-local.sh", out_dir);
    atomic_file af;
    FILE *f = atomic_open(&af, path, why, sizeof why);
    if (!f)
        return diag_set(err, path, 0, "%s", why);
    const ir_placement *p = &g->placement;
    int32_t S = p->n_stages, R = p->n_replicas;
    const char *reporter = c->devices[reporter_device(g)].name;
    fprintf(f,
            "#!/usr/bin/env bash\n"
            "# launch-local.sh: start every device of this compile on this machine\n"
            "# (model %s, %d stage%s x %d replica%s%s), each with the arguments given here\n"
            "# (e.g. --data FILE --steps N --emulate-links); logs go to logs/<device>.log\n"
            "# beside this script.  Prints the progress of %s, which reports the loss;\n"
            "# exits non-zero, naming it, if any device fails; on SIGINT or SIGTERM every\n"
            "# device finishes the same step (and saves it with --save): exit 130 or 143.\n"
            "set -u\n"
            "here=\"$(cd \"$(dirname \"$0\")\" && pwd)\"\n"
            "mkdir -p \"$here/logs\"\n"
            "devices=(",
            ir_str(g, g->name), S, S == 1 ? "" : "s", R, R == 1 ? "" : "s",
            set->n > 1 ? " in site 0; every site's reporter logs its own site's loss" : "", reporter);
    for (int32_t k = 0, first = 1; k < set->n; k++) {
        const ir_placement *q = &set->g[k]->placement;
        for (int32_t i = 0; i < q->n_stages * q->n_replicas; i++, first = 0)
            fprintf(f, "%s%s", first ? "" : " ", c->devices[q->device[i]].name);
    }
    fprintf(f, ")\nreporter=%s\n", reporter);
    /* --elastic: through the broker (broker/broker.h), this fusionc's by default. */
    char self[FU_PATH_BYTES] = "fusionc";
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[len > 0 ? len : (ssize_t)strlen(self)] = '\0';
    fprintf(f,
            "# --elastic first: the run goes through the broker (fusionc broker): checkpoints\n"
            "# every --save-every steps, a lost device replaced by a standby or re-planned away.\n"
            "if [ \"${1:-}\" = --elastic ]; then shift; exec \"${FUSIONC:-%s}\" broker \"$here\" \"$@\"; fi\n",
            self);
    fputs(
        "pids=()\n"
        "# Empty the logs first: the tail below must not print a previous run's.\n"
        "for d in \"${devices[@]}\"; do : >\"$here/logs/$d.log\"; done\n"
        "# Each device in a session of its own, so that a Ctrl-C reaches it once, from\n"
        "# the trap below (not twice: a second signal stops a device at once).\n"
        "for d in \"${devices[@]}\"; do\n"
        "  setsid \"$here/$d/fusion-$d\" \"$@\" >\"$here/logs/$d.log\" 2>&1 &\n"
        "  pids+=($!)\n"
        "done\n"
        "trap 'kill -INT \"${pids[@]}\" 2>/dev/null' INT\n"
        "trap 'kill -TERM \"${pids[@]}\" 2>/dev/null' TERM\n"
        "setsid tail -n +1 -F --pid=$$ \"$here/logs/$reporter.log\" 2>/dev/null | setsid sed -u \"s/^/[$reporter] /\" "
        "&\n"
        "tailer=$!\n"
        "status=0 stopped=0 failed=() codes=()\n"
        "for i in \"${!pids[@]}\"; do\n"
        "  while :; do   # a trapped signal interrupts wait: wait again until the device is gone\n"
        "    wait \"${pids[$i]}\"; rc=$?\n"
        "    kill -0 \"${pids[$i]}\" 2>/dev/null || break\n"
        "  done\n"
        "  if [ \"$rc\" -eq 130 ] || [ \"$rc\" -eq 143 ]; then\n"
        "    stopped=$rc\n"
        "  elif [ \"$rc\" -ne 0 ]; then\n"
        "    status=1\n"
        "    failed+=(\"${devices[$i]}\") codes+=(\"$rc\")\n"
        "  fi\n"
        "done\n"
        "sleep 0.2\n"
        "kill \"$tailer\" 2>/dev/null; wait \"$tailer\" 2>/dev/null\n"
        "# --trace FILE (or --trace=FILE): each device wrote its own (trace.json: trace.<device>.json,\n"
        "# runtime/main.c's per_device_path); FILE gets them all, one time axis\n"
        "per_device() { local base=${1##*/}; case $base in ?*.*) echo \"${1%.*}.$2.${1##*.}\" ;; *) echo \"$1.$2\" ;; "
        "esac; }\n"
        "trace=\"\" prev=\"\"\n"
        "for a in \"$@\"; do\n"
        "  [ \"$prev\" = --trace ] && trace=$a\n"
        "  case $a in --trace=*) trace=${a#--trace=} ;; esac\n"
        "  prev=$a\n"
        "done\n"
        "if [ -n \"$trace\" ]; then\n"
        "  parts=()\n"
        "  for d in \"${devices[@]}\"; do part=$(per_device \"$trace\" \"$d\"); [ -f \"$part\" ] && "
        "parts+=(\"$part\"); done\n"
        "  if [ \"${#parts[@]}\" -gt 0 ] && awk 'BEGIN { print \"[\" } /^[][]$/ { next }\n"
        "      { sub(/^,/, \"\"); print (n++ ? \",\" : \"\") $0 } END { print \"]\" }' \"${parts[@]}\" "
        ">\"$trace.tmp.$$\" &&\n"
        "     mv \"$trace.tmp.$$\" \"$trace\"; then\n"
        "    echo \"launch-local: the timeline of ${#parts[@]} devices is in $trace (ui.perfetto.dev opens it)\" >&2\n"
        "  fi\n"
        "fi\n"
        "if [ \"$status\" -ne 0 ]; then\n"
        "  # the reason: its error line, else its first line (a usage error); a signal named, with its last line\n"
        "  for k in \"${!failed[@]}\"; do\n"
        "    d=${failed[$k]} rc=${codes[$k]} log=\"$here/logs/${failed[$k]}.log\"\n"
        "    if [ \"$rc\" -gt 128 ]; then\n"
        "      why=$(grep -v '^[[:space:]]*$' \"$log\" | tail -n 1)\n"
        "      sig=$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128)))\n"
        "      why=\"killed by SIG$sig${why:+ (its last line: $why)}\"\n"
        "    else\n"
        "      why=$(grep -m1 'error' \"$log\"); [ -n \"$why\" ] || why=$(grep -m1 -v '^[[:space:]]*$' \"$log\")\n"
        "      why=\"exit $rc: ${why:-nothing in $log}\"\n"
        "    fi\n"
        "    echo \"launch-local: $d failed: $why\" >&2\n"
        "  done\n"
        "fi\n"
        "if [ \"$status\" -eq 0 ] && [ \"$stopped\" -ne 0 ]; then\n"
        "  echo \"launch-local: stopped by a signal: every device finished the same step (saved with --save)\" >&2\n"
        "  status=$stopped\n"
        "fi\n"
        "exit \"$status\"\n",
        f);
    if (atomic_commit(&af, 0755, why, sizeof why))
        return diag_set(err, path, 0, "the launch script: %s", why);
    return 0;
}

/* OUT/deploy.txt and OUT/cluster.xml: what `fusionc deploy`, `launch` and
 * `stop` (tools/deploy.c, tools/launch.c) and the broker read.  deploy.txt names the
 * devices in the order they start (stage by stage) and the one that reports
 * the loss; cluster.xml is the compile's cluster file as it was, where the
 * hosts' addresses, ssh users, ports and paths are (--cluster replaces it
 * when the machines moved). */
static int write_deploy_list(const graph_set *set, const cluster *c, const char *out_dir, struct diag *err)
{
    const ir_graph *g = set->g[0];
    char path[FU_PATH_BYTES], xml[FU_PATH_BYTES], why[FU_PATH_BYTES + 200];
    snprintf(path, sizeof path, "%s/deploy.txt", out_dir);
    snprintf(xml, sizeof xml, "%s/cluster.xml", out_dir);
    if (bundle_copy_file(c->file, xml, err))
        return -1;
    atomic_file af;
    FILE *f = atomic_open(&af, path, why, sizeof why);
    if (!f)
        return diag_set(err, path, 0, "%s", why);
    fprintf(f,
            "# fusion deploy list (written by fusionc compile; read by fusionc deploy, launch, stop)\n"
            "reporter %s\n",
            c->devices[reporter_device(g)].name);
    for (int32_t k = 0; k < set->n; k++) {
        const ir_placement *p = &set->g[k]->placement;
        for (int32_t i = 0; i < p->n_stages * p->n_replicas; i++)
            fprintf(f, "device %s\n", c->devices[p->device[i]].name);
    }
    if (atomic_commit(&af, 0, why, sizeof why))
        return diag_set(err, path, 0, "the deploy list: %s", why);
    return 0;
}

/* Compile and link one device's program into OUT/<device>/. */
typedef struct {
    const rt_peer *peers;
    const rt_link *links;
    int32_t n_links, port_base;
    const char *out_dir;
    const bundle_toolchain *tc;
    bundle_libs *libs;
    const rt_diloco_info *diloco;  /* NULL: exact */
    const rt_diloco_param *params; /* the device's site's table */
    uint64_t build_id;             /* 0: the graph's own */
    const int *cuda_sms;           /* bundle_cuda_sms: what CUDA bundles are compiled for */
    int n_cuda_sms;
} device_job;

/* This compile's run secret (write_set makes it; write_device copies it). */
static uint8_t secret_of_run[FU_SECRET_BYTES];

static int write_device(const ir_graph *g, const cluster *c, int32_t d, int32_t stage, int32_t replica,
                        const device_job *job, struct diag *err)
{
    const char *out_dir = job->out_dir;
    const bundle_toolchain *tc = job->tc;
    bundle_libs *libs = job->libs;
    const cluster_device *dev = &c->devices[d];
    char dir[FU_PATH_BYTES], object[FU_PATH_BYTES], tmp[FU_PATH_BYTES], exe[FU_PATH_BYTES], manifest[FU_PATH_BYTES];
    long pid = (long)getpid();
    if (snprintf(dir, sizeof dir, "%s/%s", out_dir, dev->name) >= (int)sizeof dir ||
        snprintf(object, sizeof object, "%s/.fusion-%s.%ld.o", dir, dev->name, pid) >= (int)sizeof object ||
        snprintf(tmp, sizeof tmp, "%s/.fusion-%s.%ld.tmp", dir, dev->name, pid) >= (int)sizeof tmp ||
        snprintf(exe, sizeof exe, "%s/fusion-%s", dir, dev->name) >= (int)sizeof exe ||
        snprintf(manifest, sizeof manifest, "%s/manifest.txt", dir) >= (int)sizeof manifest)
        return diag_set(err, out_dir, 0, "the output folder's path is too long");
    if (folders_make(dir, err))
        return -1;
    /* Replicas share their stage's arena plan, made for its first device. */
    int64_t arena = memory_arena_bytes(g, g->placement.device[stage * g->placement.n_replicas]);
    llvm_device_info info = { .index = d,
                              .name = dev->name,
                              .stage = stage,
                              .replica = replica,
                              .arena_bytes = arena,
                              .threads = dev->threads,
                              .slowdown = dev->slowdown,
                              .peers = job->peers,
                              .n_peers = c->n_devices,
                              .links = job->links,
                              .n_links = job->n_links,
                              .port_base = job->port_base,
                              .cuda_dump_dir = dev->kind == DEVICE_CUDA ? dir : NULL,
                              .arch = dev->arch,
                              .cuda_sms = job->cuda_sms,
                              .n_cuda_sms = job->n_cuda_sms,
                              .diloco = job->diloco,
                              .diloco_params = job->params,
                              .build_id = job->build_id,
                              .spec = dev };
    int rc = llvm_emit_device(g, &info, object, err);
    if (rc == 0)
        rc = link_executable(tc, object, tmp, err);
    unlink(object);
    if (rc == 0) /* before the rename: a program without its libraries is not whole */
        rc = bundle_libs_copy(libs, tmp, dir, err);
    if (rc == 0 && dev->kind == DEVICE_CUDA && !tc->cublas_system) { /* cuBLAS, from the toolkit ($CUDA_HOME) */
        const char *home = getenv("CUDA_HOME");
        rc = bundle_libs_add_cublas(libs, dir, home && *home ? home : FUSION_CUDA_HOME, err);
    }
    if (rc == 0 && rename(tmp, exe) != 0)
        rc = diag_set(err, exe, 0, "cannot rename the linked program into place: %s", strerror(errno));
    if (rc != 0)
        unlink(tmp);
    if (rc == 0)
        rc = write_manifest_text(g, dev, stage, arena, manifest, err);
    char key_path[FU_PATH_BYTES + 104], why[FU_PATH_BYTES + 504]; /* the run secret beside the program, mode 0600 */
    snprintf(key_path, sizeof key_path, "%s/run.key", dir);
    if (rc == 0 && fu_secret_write(key_path, secret_of_run, why, sizeof why))
        rc = diag_set(err, key_path, 0, "%s", why);
    return rc;
}

static int check_placed(const ir_graph *g, const cluster *c, struct diag *err)
{
    const ir_placement *p = &g->placement;
    if (p->n_stages <= 0)
        return diag_set(err, c->file, 0, "internal error: the graph has no placement (run the fence pass)");
    for (int32_t k = 0; k < p->n_stages * p->n_replicas; k++)
        if (p->device[k] < 0 || p->device[k] >= c->n_devices)
            return diag_set(err, c->file, 0, "internal error: the placement names device %d of %d", p->device[k],
                            c->n_devices);
    return 0;
}

/* "sm_86" -> 86; 0 when the arch names no SM. */
static int sm_of(const char *arch)
{
    int sm = 0, used = 0;
    return sscanf(arch, "sm_%d%n", &sm, &used) == 1 && arch[used] == '\0' && sm > 0 ? sm : 0;
}

/* What the CUDA bundles are compiled for: every distinct arch of c's CUDA
 * devices, standbys too (one may take any device's place), a CUBIN each
 * and PTX for the newest (codegen/nvrtc.h).  An arch this toolkit's NVRTC
 * cannot target, or bf16 on a GPU older than sm_80, is refused here,
 * before anything is written, naming the device.  How many SMs (0: no CUDA
 * device), or -1 with err. */
static int bundle_cuda_sms(const graph_set *set, const cluster *c, int *sms, struct diag *err)
{
    int n = 0, supported[128], n_supported = -1;
    for (int32_t i = 0; i < c->n_devices + c->n_standbys; i++) {
        const cluster_device *d = i < c->n_devices ? &c->devices[i] : &c->standbys[i - c->n_devices];
        if (d->kind != DEVICE_CUDA)
            continue;
        int sm = d->arch[0] ? sm_of(d->arch) : NVRTC_DEFAULT_SM;
        if (sm == 0)
            return diag_set(err, c->file, d->line, "device %s: arch '%s' names no GPU architecture (sm_75, sm_86, ...)",
                            d->name, d->arch);
        if (n_supported < 0 && (n_supported = nvrtc_supported_sms(supported, 128, err)) < 0)
            return -1;
        int known = 0;
        for (int k = 0; k < n_supported && !known; k++)
            known = supported[k] == sm;
        if (!known) {
            struct diag ignored;
            const char *version = nvrtc_version_string(&ignored);
            return diag_set(err, c->file, d->line,
                            "device %s: arch sm_%d cannot be compiled for by this toolkit's NVRTC %s, which targets "
                            "sm_%d to sm_%d%s: build with a toolkit that has it (CUDA_HOME), or leave the device out",
                            d->name, sm, version ? version : "?", supported[0], supported[n_supported - 1],
                            sm < supported[0] ? " (newer toolkits drop old GPUs: CUDA 13 dropped Volta's sm_70)" : "");
        }
        for (int32_t k = 0; k < set->n; k++)
            if (set->g[k]->precision == DT_BF16 && sm < 80)
                return diag_set(err, c->file, d->line,
                                "device %s is sm_%d: bf16 needs sm_80 (Ampere) or newer (cuBLAS has no bf16 products "
                                "before it); --precision fp16 runs on it",
                                d->name, sm);
        int seen = 0;
        for (int k = 0; k < n && !seen; k++)
            seen = sms[k] == sm;
        if (!seen && n == NVRTC_MAX_ARCHS)
            return diag_set(err, c->file, d->line, "the cluster names more than %d GPU architectures", NVRTC_MAX_ARCHS);
        if (!seen)
            sms[n++] = sm;
    }
    return n;
}

/* Every device of every graph of the set, then the scripts. */
static int write_set(const graph_set *set, const rt_diloco_info *outer, const int64_t *site_rows, const cluster *c,
                     const char *out_dir, const bundle_toolchain *tc, int32_t port_base, struct diag *err)
{
    for (int32_t k = 0; k < set->n; k++)
        if (check_placed(set->g[k], c, err))
            return -1;
    int cuda_sms[NVRTC_MAX_ARCHS], n_cuda_sms = bundle_cuda_sms(set, c, cuda_sms, err);
    if (n_cuda_sms < 0)
        return -1;
    if (folders_make(out_dir, err)) /* -o a/b: every folder it needs */
        return -1;
    /* The run secret: new, or the running run's (a re-plan); never printed. */
    char why[FU_PATH_BYTES + 504], key_path[FU_PATH_BYTES + 104];
    snprintf(key_path, sizeof key_path, "%s/run.key", out_dir);
    if (tc->run_key ? fu_secret_load(tc->run_key, secret_of_run, why, sizeof why) : (fu_secret_new(secret_of_run), 0))
        return diag_set(err, tc->run_key, 0, "%s", why);
    if (fu_secret_write(key_path, secret_of_run, why, sizeof why))
        return diag_set(err, key_path, 0, "%s", why);
    rt_peer *peers = calloc((size_t)c->n_devices + 1, sizeof *peers);
    rt_link *links = NULL;
    int32_t n_links = 0;
    if (!peers || collect_links(set, c, &links, &n_links)) {
        free(peers);
        return diag_set(err, out_dir, 0, "out of memory");
    }
    for (int32_t i = 0; i < n_links; i++)
        if (!cluster_has_path(c, links[i].a, links[i].b)) {
            const cluster_device *da = &c->devices[links[i].a], *db = &c->devices[links[i].b];
            diag_set(err, c->file, 0,
                     "devices %s and %s exchange messages in this plan, but neither host accepts a connection "
                     "(%s and %s are inbound=\"false\"): no path joins them; leave one out, or plan so that "
                     "each links only with a host that accepts connections",
                     da->name, db->name, c->hosts[da->host].name, c->hosts[db->host].name);
            free(peers);
            free(links);
            return -1;
        }
    for (int32_t d = 0; d < c->n_devices; d++) {
        snprintf(peers[d].name, sizeof peers[d].name, "%.63s", c->devices[d].name);
        snprintf(peers[d].address, sizeof peers[d].address, "%s", c->hosts[c->devices[d].host].address);
    }
    /* The sites' graphs differ; one id for the whole compile lets their
     * devices recognise each other (and refuse another compile's). */
    uint64_t ids[RT_MAX_SITES], build_id = 0;
    for (int32_t k = 0; k < set->n && set->n > 1; k++)
        ids[k] = llvm_graph_build_id(set->g[k]);
    if (set->n > 1)
        build_id = XXH3_64bits(ids, (size_t)set->n * sizeof *ids);
    int rc = 0;
    bundle_libs libs = { 0 };
    int64_t row = 0, global_rows = 0;
    for (int32_t k = 0; outer && k < set->n; k++)
        global_rows += site_rows[k];
    for (int32_t k = 0; k < set->n && rc == 0; k++) {
        rt_diloco_info site;
        if (outer) {
            site = *outer;
            site.site = k;
            site.n_sites = set->n;
            site.row_offset = row;
            site.global_rows = global_rows;
            for (int32_t j = 0; j < set->n && j < RT_MAX_SITES; j++)
                site.site_rows[j] = site_rows[j];
            site.local_steps = outer->site_steps[k];
            site.n_params = set->n_params;
            row += site_rows[k];
        }
        device_job job = { peers,
                           links,
                           n_links,
                           port_base > 0 ? port_base : 29500,
                           out_dir,
                           tc,
                           &libs,
                           outer ? &site : NULL,
                           set->params ? set->params + (size_t)k * set->n_params : NULL,
                           build_id,
                           cuda_sms,
                           n_cuda_sms };
        const ir_placement *p = &set->g[k]->placement;
        for (int32_t s = 0; s < p->n_stages && rc == 0; s++)
            for (int32_t r = 0; r < p->n_replicas && rc == 0; r++)
                rc = write_device(set->g[k], c, p->device[s * p->n_replicas + r], s, r, &job, err);
    }
    bundle_libs_free(&libs);
    if (rc == 0)
        rc = write_launch_local(set, c, out_dir, err);
    if (rc == 0)
        rc = write_deploy_list(set, c, out_dir, err);
    free(peers);
    free(links);
    return rc;
}

int bundle_write(const ir_graph *g, const cluster *c, const char *out_dir, const bundle_toolchain *tc,
                 int32_t port_base, struct diag *err)
{
    graph_set set = { .n = 1, .g = { g } };
    return write_set(&set, NULL, NULL, c, out_dir, tc, port_base, err);
}

int bundle_write_sites(const bundle_sites *s, const cluster *c, const char *out_dir, const bundle_toolchain *tc,
                       int32_t port_base, struct diag *err)
{
    if (s->n_sites < 2 || s->n_sites > RT_MAX_SITES)
        return diag_set(err, c->file, 0, "internal error: %d sites", s->n_sites);
    graph_set set = { .n = s->n_sites };
    for (int32_t k = 0; k < s->n_sites; k++)
        set.g[k] = s->graphs[k];
    /* The parameters in the first site's order, each site's holder of each. */
    const ir_graph *g0 = s->graphs[0];
    for (int32_t v = 0; v < g0->n_values; v++)
        set.n_params += ir_value_trained(&g0->values[v]); /* a frozen one never changes */
    rt_diloco_param *params = calloc((size_t)s->n_sites * (size_t)set.n_params + 1, sizeof *params);
    if (!params)
        return diag_set(err, out_dir, 0, "out of memory");
    int32_t i = 0;
    int rc = 0;
    for (int32_t v = 0; v < g0->n_values && rc == 0; v++) {
        if (!ir_value_trained(&g0->values[v]))
            continue;
        const char *name = ir_value_name(g0, v);
        int32_t owner[RT_MAX_SITES], stage[RT_MAX_SITES];
        for (int32_t k = 0; k < s->n_sites && rc == 0; k++) {
            const ir_placement *p = &s->graphs[k]->placement;
            stage[k] = optimizer_update_stage(s->graphs[k], name);
            if (stage[k] < 0 || strlen(name) >= RT_TENSOR_NAME_MAX)
                rc = diag_set(err, c->file, 0, "internal error: site %d does not update parameter '%s'", k, name);
            else
                owner[k] = p->device[stage[k] * p->n_replicas];
        }
        for (int32_t k = 0; k < s->n_sites && rc == 0; k++) {
            rt_diloco_param *e = &params[(size_t)k * set.n_params + i];
            snprintf(e->name, sizeof e->name, "%s", name);
            e->stage = stage[k];
            memcpy(e->owner, owner, sizeof owner);
        }
        i++;
    }
    set.params = params;
    if (rc == 0)
        rc = write_set(&set, &s->outer, s->site_rows, c, out_dir, tc, port_base, err);
    free(params);
    return rc;
}
