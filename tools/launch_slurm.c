/* launch_slurm.c: `fusionc launch OUT --slurm [--sbatch OPTION]... -- ARGS`
 * and `fusionc stop OUT` of such a run (launch_slurm.h).
 *
 * The run is one Slurm job on a folder the nodes share (OUT, and the data
 * and checkpoint paths in ARGS, as launch-local.sh takes them): nothing is
 * copied, the bundles run where they were compiled to.  fusionc writes
 * OUT/slurm/job.sh and submits it; the script asks for one node a host of
 * the compile's cluster file and one task a device (#SBATCH lines an
 * --sbatch option overrides), and as the batch step
 *
 *   1. lists the job's nodes (scontrol show hostnames) and puts the
 *      compile's host i on node i mod (the nodes it got): the devices of
 *      one host stay together, and a smaller allocation (--sbatch
 *      --nodes=1) holds several hosts, their links' ports all distinct;
 *   2. writes OUT/slurm/<job>/hosts (a node a device, for srun's
 *      --distribution=arbitrary) and OUT/slurm/<job>/peers (each device's
 *      node address, scontrol's NodeAddr);
 *   3. starts every device with srun, one task each: task k becomes
 *      (exec) device k's program with ARGS and --peer NAME=ADDR for the
 *      others, its output in OUT/logs/<device>.log (launch's logs).
 *
 * fusionc then follows the job (scontrol show job) and the reporter's log,
 * as launch follows its ssh sessions, and names each device that failed
 * with srun's word on how its task ended (the job's output file).
 * Ctrl-C, or `fusionc stop OUT` from anywhere, cancels the job (scancel):
 * every task gets SIGTERM and the devices finish their step, saved with
 * --save, as under launch-local.sh.  OUT/slurm/job-id names the job. */
#define _GNU_SOURCE
#include "launch_slurm.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../broker/remote.h"
#include "../ir/folders.h"
#include "../runtime/per_device_path.h"
#include "../runtime/trace.h"
#include "launch_logs.h"

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

/* s single-quoted for bash, appended to f. */
static int put_quoted(FILE *f, const char *s)
{
    char buf[FU_PATH_BYTES * 2];
    size_t at = 0;
    if (remote_quote(buf, sizeof buf, &at, s))
        return -1;
    return fputs(buf, f) == EOF ? -1 : 0;
}

/* How many of the compile's hosts the devices use; host_of[k]: device k's
 * (0, 1, ... in the order they first appear), cuda_of[k]: its CUDA ordinal
 * on that host (-1: a CPU device); *threads: the most CPU threads a device
 * asks for. */
static int number_hosts(const remote_plan *plan, const cluster *c, int *host_of, int *cuda_of, int *threads, int *gpus)
{
    int n_hosts = 0;
    int *count = calloc((size_t)plan->n_devices + 1, sizeof *count);
    *threads = 1, *gpus = 0;
    for (int k = 0; count && k < plan->n_devices; k++) {
        int j = 0;
        while (j < k && strcmp(plan->devices[j].host, plan->devices[k].host) != 0)
            j++;
        host_of[k] = j < k ? host_of[j] : n_hosts++;
        cuda_of[k] = plan->devices[k].kind == DEVICE_CUDA ? count[host_of[k]]++ : -1;
        if (count[host_of[k]] > *gpus)
            *gpus = count[host_of[k]];
        int d = cluster_find_device(c, plan->devices[k].device);
        if (d >= 0 && c->devices[d].kind == DEVICE_CPU && c->devices[d].threads > *threads)
            *threads = c->devices[d].threads;
    }
    free(count);
    return n_hosts;
}

/* OUT/slurm/job.sh (see the file's comment), written whole or not at all;
 * *hosts: the nodes it asks for. */
static int write_job_script(const char *path, const char *out_abs, const char *cwd, const remote_plan *plan,
                            const cluster *c, char *const *args, int n_args, int *hosts)
{
    int n = plan->n_devices;
    int *host_of = calloc((size_t)n + 1, sizeof *host_of), *cuda_of = calloc((size_t)n + 1, sizeof *cuda_of);
    int threads, gpus, n_hosts = host_of && cuda_of ? number_hosts(plan, c, host_of, cuda_of, &threads, &gpus) : 0;
    char tmp[PATH_MAX + 80];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = n_hosts > 0 ? fopen(tmp, "w") : NULL;
    int bad = !f;
    if (f) {
        fprintf(f,
                "#!/usr/bin/env bash\n"
                "# job.sh: written by `fusionc launch OUT --slurm` (tools/launch_slurm.c) for the %d device%s of\n"
                "# this compile.  As the batch script it puts the compile's host i on the job's node\n"
                "# i mod (its nodes) and starts one task a device with srun; as `job.sh task`, each\n"
                "# task runs device $SLURM_PROCID's program, its peers at their nodes' addresses.\n",
                n, n == 1 ? "" : "s");
        fprintf(f, "#SBATCH --job-name=fusion\n#SBATCH --nodes=%d\n#SBATCH --ntasks=%d\n#SBATCH --cpus-per-task=%d\n",
                n_hosts, n, threads);
        if (gpus > 0)
            fprintf(f, "#SBATCH --gres=gpu:%d\n", gpus);
        fprintf(f, "#SBATCH --output=%s/logs/slurm-%%j.out\n#SBATCH --chdir=%s\n", out_abs, cwd);
        fputs("set -u\nout=", f);
        bad |= put_quoted(f, out_abs);
        fputs("\ndevices=(", f);
        for (int k = 0; k < n; k++)
            fprintf(f, "%s%s", k ? " " : "", plan->devices[k].device);
        fputs(")\nhost_of=(", f);
        for (int k = 0; k < n; k++)
            fprintf(f, "%s%d", k ? " " : "", host_of[k]);
        fputs(")   # each device's host in the compile's cluster file\ncuda_of=(", f);
        for (int k = 0; k < n; k++)
            fprintf(f, "%s%d", k ? " " : "", cuda_of[k]);
        fputs(")   # its CUDA ordinal among the GPUs Slurm gives the task's node (-1: a CPU device)\nargs=(", f);
        for (int i = 0; i < n_args; i++) {
            fputs(i ? " " : "", f);
            bad |= put_quoted(f, args[i]);
        }
        fputs(")\n"
              "job=$out/slurm/$SLURM_JOB_ID\n"
              "if [ \"${1:-}\" = task ]; then\n"
              "  k=$SLURM_PROCID d=${devices[$SLURM_PROCID]} peers=()\n"
              "  while read -r name addr; do [ \"$name\" = \"$d\" ] || peers+=(--peer \"$name=$addr\"); done "
              "<\"$job/peers\"\n"
              "  if [ \"${cuda_of[$k]}\" -ge 0 ]; then export FUSION_CUDA_DEVICE=${cuda_of[$k]}; fi\n"
              "  echo \"job.sh: device $d is task $k of job $SLURM_JOB_ID on node $SLURMD_NODENAME\" "
              ">\"$out/logs/$d.log\"\n"
              "  # exec: the device is the task, so Slurm's signals (scancel: SIGTERM) reach it once\n"
              "  exec \"$out/$d/fusion-$d\" \"${args[@]}\" \"${peers[@]}\" >>\"$out/logs/$d.log\" 2>&1\n"
              "fi\n"
              "mkdir -p \"$job\" || exit 1\n"
              "mapfile -t nodes < <(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\n"
              "[ \"${#nodes[@]}\" -gt 0 ] || { echo \"job.sh: no nodes in '$SLURM_JOB_NODELIST'\" >&2; exit 1; }\n"
              ": >\"$job/hosts\" && : >\"$job/peers\" || exit 1\n"
              "for k in \"${!devices[@]}\"; do\n"
              "  node=${nodes[$((host_of[k] % ${#nodes[@]}))]}\n"
              "  addr=$(scontrol show node \"$node\" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')\n"
              "  echo \"$node\" >>\"$job/hosts\"\n"
              "  echo \"${devices[$k]} ${addr:-$node}\" >>\"$job/peers\"\n"
              "  : >\"$out/logs/${devices[$k]}.log\"\n"
              "  echo \"job.sh: ${devices[$k]} on $node (${addr:-$node})\"\n"
              "done\n"
              "export SLURM_HOSTFILE=$job/hosts\n"
              "exec srun --distribution=arbitrary --ntasks=\"${#devices[@]}\" "
              "--cpus-per-task=\"${SLURM_CPUS_PER_TASK:-1}\" bash \"$out/slurm/job.sh\" task\n",
              f);
        bad |= ferror(f);
        bad |= fclose(f) != 0;
        bad = bad || chmod(tmp, 0755) != 0 || rename(tmp, path) != 0;
        if (bad)
            unlink(tmp);
    }
    free(host_of);
    free(cuda_of);
    *hosts = n_hosts;
    return bad ? -1 : 0;
}

/* `scontrol show job -o ID`: its JobState, Reason and NodeList.  1 while
 * the job is waiting or running, 0 once it has ended, -1 when Slurm no
 * longer knows it (or cannot be asked): *state says which. */
static int job_state(const char *id, char *state, size_t state_n, char *reason, size_t reason_n, char *nodes,
                     size_t nodes_n)
{
    char *argv[] = { "scontrol", "show", "job", "-o", (char *)id, NULL }, *out = NULL;
    int rc = remote_capture(argv, &out);
    snprintf(state, state_n, "UNKNOWN");
    reason[0] = nodes[0] = '\0';
    const char *keys[] = { " JobState=", " Reason=", " NodeList=" };
    char *fields[] = { state, reason, nodes };
    size_t sizes[] = { state_n, reason_n, nodes_n };
    for (int i = 0; rc == 0 && out && i < 3; i++) {
        const char *at = strstr(out, keys[i]);
        if (at) {
            at += strlen(keys[i]);
            snprintf(fields[i], sizes[i], "%.*s", (int)strcspn(at, " \n"), at);
        }
    }
    free(out);
    if (rc != 0 || strcmp(state, "UNKNOWN") == 0)
        return -1;
    static const char *const active[] = { "PENDING",   "RUNNING",      "CONFIGURING", "COMPLETING",
                                          "SUSPENDED", "REQUEUED",     "RESIZING",    "SIGNALING",
                                          "STAGE_OUT", "REQUEUE_HOLD", "REQUEUE_FED" };
    for (size_t i = 0; i < sizeof active / sizeof active[0]; i++)
        if (strcmp(state, active[i]) == 0)
            return 1;
    return 0;
}

/* OUT/slurm/job-id's job, in id; 0, or -1 when there is none. */
static int recorded_job(const char *out_dir, char *id, size_t n)
{
    char path[FU_PATH_BYTES + 32];
    snprintf(path, sizeof path, "%s/slurm/job-id", out_dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int ok = fgets(id, (int)n, f) != NULL;
    fclose(f);
    id[strcspn(id, "\n")] = '\0';
    return ok && id[0] ? 0 : -1;
}

/* scancel ID; 0, or -1 (said). */
static int cancel(const char *id, const char *who)
{
    char *argv[] = { "scancel", (char *)id, NULL }, *out = NULL;
    int rc = remote_capture(argv, &out);
    if (rc != 0) {
        char last[400];
        remote_last_line(out ? out : "", last, sizeof last);
        fprintf(stderr, "%s: scancel %s failed (exit %d): %s\n", who, id, rc, last[0] ? last : "no output");
    }
    free(out);
    return rc == 0 ? 0 : -1;
}

/* --trace FILE: each device wrote FILE's per-device name (as under
 * launch-local.sh); FILE gets them all, one time axis.  0, or 1 (said). */
static int merge_traces(const remote_plan *plan, const char *trace)
{
    int n = plan->n_devices, got = 0;
    char(*paths)[FU_PATH_BYTES + 304] = calloc((size_t)n, sizeof *paths);
    const char **parts = calloc((size_t)n, sizeof *parts);
    for (int k = 0; paths && parts && k < n; k++) {
        if (n > 1)
            per_device_path_of(trace, plan->devices[k].device, paths[k], sizeof paths[k]);
        else
            snprintf(paths[k], sizeof paths[k], "%s", trace);
        if (access(paths[k], R_OK) == 0)
            parts[got++] = paths[k];
    }
    char why[FU_PATH_BYTES + 504];
    int rc = 0;
    if (got < n || !paths || !parts) {
        fprintf(stderr, "fusionc launch: %d of %d devices wrote no timeline for %s\n", n - got, n, trace);
        rc = 1;
    }
    if (n > 1 && got > 0 && rt_trace_merge(trace, parts, got, why, sizeof why) != 0) {
        fprintf(stderr, "fusionc launch: %s\n", why);
        rc = 1;
    } else if (got > 0) {
        printf("launch: the timeline of %d device%s is in %s (ui.perfetto.dev opens it)\n", got, got == 1 ? "" : "s",
               trace);
    }
    free(paths);
    free(parts);
    return rc;
}

/* srun's word on the tasks that did not exit 0, in the job's output file
 * (OUT/logs/slurm-ID.out, from job.sh's #SBATCH --output):
 *     srun: error: NODE: task 2: Exited with exit code 1
 *     srun: error: NODE: tasks 0-1,3: Killed
 * how[k] gets the text after the task list, for each task named. */
static void srun_task_ends(const char *out_dir, const char *id, int n, char (*how)[96])
{
    char path[FU_PATH_BYTES + 100], line[1024];
    snprintf(path, sizeof path, "%s/logs/slurm-%s.out", out_dir, id);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        char *at = strstr(line, ": task");
        if (strncmp(line, "srun: ", 6) != 0 || !at)
            continue;
        at += 6 + (at[6] == 's');
        char *end = strstr(at, ": ");
        if (!end)
            continue;
        *end = '\0';
        const char *what = end + 2;
        for (char *part = strtok(at, ","); part; part = strtok(NULL, ",")) {
            int lo, hi;
            int got = sscanf(part, " %d-%d", &lo, &hi);
            if (got < 1)
                continue;
            if (got == 1)
                hi = lo;
            for (int k = lo; k >= 0 && k <= hi && k < n; k++)
                snprintf(how[k], sizeof how[k], "%.*s", (int)strcspn(what, "\n"), what);
        }
    }
    if (f)
        fclose(f);
}

/* After the job: each device that did not complete named with how it ended
 * and its log's reason.  The number of them. */
static int report_devices(const char *out_dir, const char *id, const remote_plan *plan, const char *state)
{
    int n = plan->n_devices, failed = 0;
    char(*how)[96] = calloc((size_t)n + 1, sizeof *how);
    if (!how)
        return n;
    srun_task_ends(out_dir, id, n, how);
    int completed = strcmp(state, "COMPLETED") == 0;
    for (int k = 0; k < n; k++) {
        const char *d = plan->devices[k].device;
        if (completed && !how[k][0])
            continue;
        char log[FU_PATH_BYTES + 300], reason[1100];
        snprintf(log, sizeof log, "%s/logs/%s.log", out_dir, d);
        struct stat st;
        if (stat(log, &st) != 0 || st.st_size == 0)
            snprintf(reason, sizeof reason, "it never started");
        else
            launch_log_reason(log, reason, sizeof reason);
        fprintf(stderr, "fusionc launch: device %s %s (job %s %s): %s\n", d, how[k][0] ? how[k] : "did not finish", id,
                state, reason);
        failed++;
    }
    free(how);
    return failed;
}

/* Whether a pending job's Reason says it will never start as asked (the
 * partition's limits or configuration refuse it, squeue(1)'s reason codes). */
static int never_runs(const char *reason)
{
    static const char *const never[] = { "PartitionNodeLimit", "PartitionConfig", "PartitionTimeLimit",
                                         "BadConstraints",     "InvalidAccount",  "InvalidQOS" };
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++)
        if (strcmp(reason, never[i]) == 0)
            return 1;
    return 0;
}

/* The value of --trace FILE (or --trace=FILE) among args, or NULL. */
static const char *trace_arg(char *const *args, int n)
{
    const char *v = NULL;
    for (int i = 0; i < n; i++) {
        if (strcmp(args[i], "--trace") == 0 && i + 1 < n)
            v = args[++i];
        else if (strncmp(args[i], "--trace=", 8) == 0)
            v = args[i] + 8;
    }
    return v;
}

int slurm_launch(const char *out_dir, const sbatch_options *sbatch, int detach, char *const *args, int n_args)
{
    const char *who = "fusionc launch --slurm";
    remote_plan plan = { 0 };
    cluster c = { 0 };
    struct diag err = { 0 };
    char out_abs[PATH_MAX], cwd[PATH_MAX], path[PATH_MAX + 64];
    if (remote_plan_load(&plan, out_dir, NULL, &err)) {
        diag_print(&err);
        return 1;
    }
    snprintf(path, sizeof path, "%s/cluster.xml", out_dir);
    int rc = 1;
    if (cluster_load(path, &c, &err)) {
        diag_print(&err);
        goto done;
    }
    if (!realpath(out_dir, out_abs) || !getcwd(cwd, sizeof cwd)) {
        fprintf(stderr, "%s: %s: %s\n", who, out_dir, strerror(errno));
        goto done;
    }
    snprintf(path, sizeof path, "%s/slurm", out_abs);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/logs", out_abs);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/slurm/job.sh", out_abs);
    int hosts;
    if (write_job_script(path, out_abs, cwd, &plan, &c, args, n_args, &hosts)) {
        fprintf(stderr, "%s: cannot write %s (or an argument is too long)\n", who, path);
        goto done;
    }
    /* A previous run's logs are not this one's (job.sh empties them too, once it runs). */
    for (int k = 0; k < plan.n_devices; k++) {
        char log[PATH_MAX + 300];
        snprintf(log, sizeof log, "%s/logs/%s.log", out_abs, plan.devices[k].device);
        FILE *empty = fopen(log, "w");
        if (empty)
            fclose(empty);
    }
    /* sbatch --parsable [--sbatch options] OUT/slurm/job.sh: the job's id */
    char *argv[SLURM_MAX_SBATCH + 4], *said = NULL;
    int a = 0;
    argv[a++] = "sbatch", argv[a++] = "--parsable";
    for (int i = 0; i < sbatch->n; i++)
        argv[a++] = (char *)sbatch->items[i];
    argv[a++] = path, argv[a] = NULL;
    int status = remote_capture(argv, &said);
    char id[64] = "", last[600];
    remote_last_line(said ? said : "", last, sizeof last);
    if (status == 0)
        snprintf(id, sizeof id, "%.*s", (int)strcspn(last, ";\n "), last); /* "ID" or "ID;CLUSTER" */
    free(said);
    if (status != 0 || !id[0] || strspn(id, "0123456789_") != strlen(id)) {
        fprintf(stderr, "%s: sbatch refused the job%s: %s\n", who,
                status == 127 || status < 0 ? " (is sbatch installed? this must run where Slurm's commands do)" : "",
                last[0] ? last : "no output");
        goto done;
    }
    snprintf(path, sizeof path, "%s/slurm/job-id", out_abs);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%s\n", id) < 0 || fclose(f) != 0) {
        fprintf(stderr, "%s: cannot record the job in %s; cancelling job %s\n", who, path, id);
        cancel(id, who);
        goto done;
    }
    printf("launch: submitted %d device%s as Slurm job %s (%s/slurm/job.sh; logs in %s/logs)\n", plan.n_devices,
           plan.n_devices == 1 ? "" : "s", id, out_dir, out_dir);
    fflush(stdout);
    if (detach) {
        printf("launch: detached; `fusionc stop %s` cancels it\n", out_dir);
        rc = 0;
        goto done;
    }
    struct sigaction sa = { 0 }, old_int, old_term;
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    char state[64], reason[256], nodes[1024], shown[64] = "", log[FU_PATH_BYTES + 304];
    snprintf(log, sizeof log, "%s/logs/%s.log", out_abs, plan.reporter);
    long offset = 0;
    int cancelled = 0, known, unknown = 0;
    /* (a job Slurm cannot be asked about for 5 s in a row has ended, or slurmctld is gone) */
    while ((known = job_state(id, state, sizeof state, reason, sizeof reason, nodes, sizeof nodes)) == 1 ||
           (known < 0 && ++unknown < 25)) {
        if (known == 1)
            unknown = 0;
        if (strcmp(state, shown) != 0) {
            if (strcmp(state, "PENDING") == 0)
                printf("launch: job %s is waiting for its nodes%s%s%s\n", id, strcmp(reason, "None") ? " (" : "",
                       strcmp(reason, "None") ? reason : "", strcmp(reason, "None") ? ")" : "");
            else if (strcmp(state, "RUNNING") == 0)
                printf("launch: job %s runs on %s\n", id, nodes);
            fflush(stdout);
            snprintf(shown, sizeof shown, "%s", state);
        }
        if (!cancelled && strcmp(state, "PENDING") == 0 && never_runs(reason)) {
            fprintf(stderr,
                    "%s: job %s cannot run: Slurm says %s (it asks for a node for each of the compile's %d "
                    "host%s and a task for each device: --sbatch=--nodes=K puts several hosts on a node, "
                    "--sbatch=--partition=P picks another partition); cancelling it\n",
                    who, id, reason, hosts, hosts == 1 ? "" : "s");
            cancel(id, who);
            cancelled = 1;
        }
        if (strcmp(state, "PENDING") != 0)
            launch_follow(log, plan.reporter, &offset);
        if (interrupted && !cancelled) {
            fprintf(stderr, "%s: interrupted; cancelling job %s (the devices finish their step)\n", who, id);
            cancel(id, who);
            cancelled = 1;
        }
        usleep(200 * 1000);
    }
    launch_follow(log, plan.reporter, &offset);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    int failed = report_devices(out_abs, id, &plan, state);
    const char *trace = trace_arg(args, n_args);
    int trace_missing = trace && !failed ? merge_traces(&plan, trace) : 0;
    if (failed || cancelled || strcmp(state, "COMPLETED") != 0)
        fprintf(stderr, "%s: training did not complete: job %s %s, %d of %d devices failed (logs in %s/logs)\n", who,
                id, known < 0 ? "no longer known to Slurm" : state, failed, plan.n_devices, out_dir);
    else
        printf("launch: training completed on %d device%s (Slurm job %s; logs in %s/logs)\n", plan.n_devices,
               plan.n_devices == 1 ? "" : "s", id, out_dir);
    rc = failed || cancelled || trace_missing || strcmp(state, "COMPLETED") != 0 ? 1 : 0;
done:
    cluster_free(&c);
    remote_plan_free(&plan);
    return rc;
}

int slurm_stop(const char *out_dir)
{
    char id[64], state[64], reason[256], nodes[1024];
    if (recorded_job(out_dir, id, sizeof id))
        return -1;
    int known = job_state(id, state, sizeof state, reason, sizeof reason, nodes, sizeof nodes);
    if (known != 1) {
        printf("stop: Slurm job %s of %s has already ended (%s)\n", id, out_dir,
               known < 0 ? "no longer known to Slurm" : state);
        return 0;
    }
    if (cancel(id, "fusionc stop"))
        return 1;
    /* scancel signals the tasks; SIGKILL follows after Slurm's KillWait */
    for (int i = 0;
         i < 600 && (known = job_state(id, state, sizeof state, reason, sizeof reason, nodes, sizeof nodes)) == 1; i++)
        usleep(200 * 1000);
    if (known == 1) {
        fprintf(stderr, "fusionc stop: Slurm job %s is still %s two minutes after scancel\n", id, state);
        return 1;
    }
    printf("stop: Slurm job %s of %s cancelled (%s)\n", id, out_dir, known < 0 ? "ended" : state);
    return 0;
}
