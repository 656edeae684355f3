/* launch.c: `fusionc launch OUT ARGS...` and `fusionc stop OUT`: start
 * every deployed device on its host over ssh, gather its output, stop them.
 *
 * launch: one ssh per device, in the deploy list's order (stage by stage;
 * the runtime's connections wait for late peers, so the order only makes
 * the logs read in order).  Each runs, on its host,
 *
 *     cd P/<device> && echo $$ > fusion.pid && exec ./fusion-<device> ARGS [--peer NAME=ADDR]...
 *
 * (ARGS as given, each quoted for the remote shell; --peer for the devices
 * whose address in --cluster differs from the compile's, so a device that
 * moved is found).  Its standard output and error come back over the ssh
 * connection into OUT/logs/<device>.log; the progress of the device that
 * reports the loss is printed as it comes.  When a device fails, the others
 * get --grace seconds (default 30: more than the runtime's 10 s peer
 * timeout) to stop by themselves, as they do when a peer is lost; then they
 * are stopped.  Ctrl-C stops every device.  The exit status is 0 when every
 * device finished its steps, 1 otherwise, each failure named with its host.
 *
 * stop: kills, on each host, the process in P/<device>/fusion.pid if it is
 * that bundle's program (its /proc exe is the bundle's), first politely
 * (SIGTERM), then after 5 s for good.
 */
#define _GNU_SOURCE
#include "launch.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/per_device_path.h"
#include "../runtime/trace.h"
#include "broker.h"
#include "launch_logs.h"
#include "launch_slurm.h"
#include "../broker/remote.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* launch's and stop's options: OUT, --cluster, --ssh-config, and for
 * launch --grace and --elastic; the rest (launch only) is for the devices. */
typedef struct {
    const char *out_dir, *cluster_file, *ssh_config;
    double grace;
    int elastic;       /* --elastic: the broker runs the devices (fusionc broker --over-ssh) */
    int slurm, detach; /* --slurm: one Slurm job (launch_slurm.c); --detach: submit it and return */
    sbatch_options sbatch;
    char **device_args;
    int n_device_args;
} launch_options;

enum { LAUNCH_CLUSTER, LAUNCH_SSH_CONFIG, LAUNCH_GRACE, LAUNCH_ELASTIC, LAUNCH_SLURM, LAUNCH_SBATCH, LAUNCH_DETACH };

/* --sbatch OPTION: one more for sbatch's command line. */
static int take_sbatch(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    sbatch_options *s = field;
    if (s->n >= SLURM_MAX_SBATCH)
        return snprintf(why, n, "%s: at most %d of them", opt->name, SLURM_MAX_SBATCH), -1;
    if (value[0] != '-')
        return cli_bad_value(opt, value, why, n);
    s->items[s->n++] = value;
    return 0;
}

static const cli_option launch_options_table[] = {
    [LAUNCH_CLUSTER] = { .name = "--cluster",
                         .metavar = "FILE",
                         CLI_STRING(launch_options, cluster_file),
                         .help = "the hosts from this cluster file (default OUT/cluster.xml); a\n"
                                 "device whose address changed is told to its peers (--peer)" },
    [LAUNCH_SSH_CONFIG] = { .name = "--ssh-config",
                            .metavar = "FILE",
                            CLI_STRING(launch_options, ssh_config),
                            .help = "passed to ssh as -F FILE" },
    [LAUNCH_GRACE] = { .name = "--grace",
                       .metavar = "S",
                       CLI_DOUBLE(launch_options, grace),
                       .lo = 0,
                       .hi = 1e9,
                       .expects = "a number of seconds, 0 or more",
                       .help = "after a device fails, the others have S seconds to stop by\n"
                               "themselves before they are stopped (default 30)" },
    [LAUNCH_ELASTIC] = { .name = "--elastic",
                         CLI_FLAG(launch_options, elastic),
                         .help = "run under a broker on this machine (fusionc broker OUT --over-ssh):\n"
                                 "checkpoints every --save-every K steps collected here, a lost device\n"
                                 "replaced by a standby or planned away; the broker's options may be\n"
                                 "among ARGS (see fusionc broker --help)" },
    [LAUNCH_SLURM] = { .name = "--slurm",
                       CLI_FLAG(launch_options, slurm),
                       .help = "run as one Slurm job (sbatch, then srun: a task a device) on a folder\n"
                               "the nodes share: the compile's host i on the job's node i mod N,\n"
                               "ARGS' paths as seen from here; logs in OUT/logs; fusionc stop\n"
                               "OUT cancels it" },
    [LAUNCH_SBATCH] = { .name = "--sbatch",
                        .metavar = "OPTION",
                        CLI_CUSTOM(take_sbatch, sbatch_options, launch_options, sbatch),
                        .expects = "an sbatch option, e.g. --sbatch=--partition=gpu",
                        .help = "with --slurm: passed to sbatch (repeatable), over the job's own\n"
                                "--nodes (a host each), --ntasks (a device each), --cpus-per-task" },
    [LAUNCH_DETACH] = { .name = "--detach",
                        CLI_FLAG(launch_options, detach),
                        .help = "with --slurm: submit the job and return (its id printed)" },
};

static const cli_use launch_uses[] = {
    CLI_USE(LAUNCH_CLUSTER), CLI_USE(LAUNCH_SSH_CONFIG), CLI_USE(LAUNCH_GRACE),  CLI_USE(LAUNCH_ELASTIC),
    CLI_USE(LAUNCH_SLURM),   CLI_USE(LAUNCH_SBATCH),     CLI_USE(LAUNCH_DETACH),
};
const cli_usage launch_usage = {
    "usage: fusionc launch OUT [--cluster FILE] [--ssh-config FILE] [--grace S] [--elastic] [--] ARGS...\n"
    "       fusionc launch OUT --slurm [--sbatch OPTION]... [--detach] [--] ARGS...\n"
    "\n"
    "Start every device of OUT (deployed with `fusionc deploy`) on its host over ssh, each\n"
    "with ARGS (the device program's options, e.g. --data FILE --steps N: paths are on\n"
    "the hosts).  Logs come back to OUT/logs/<device>.log; the progress of the device\n"
    "that reports the loss is printed.  Exits 0 when every device completed, else 1,\n"
    "naming each device that failed and its host.  With --trace FILE among ARGS, FILE is\n"
    "here: each device writes its timeline on its host and they come back merged into FILE.\n"
    "\n",
    launch_options_table,
    launch_uses,
    7,
    19,
    NULL
};

static const cli_use stop_uses[] = {
    { LAUNCH_CLUSTER, NULL, "the hosts from this cluster file (default OUT/cluster.xml)" },
    CLI_USE(LAUNCH_SSH_CONFIG),
};
const cli_usage stop_usage = { "usage: fusionc stop OUT [--cluster FILE] [--ssh-config FILE]\n"
                               "\n"
                               "Stop every device of OUT that runs on its host (started by `fusionc launch`); a run\n"
                               "launched with --slurm: its job cancelled (scancel), every device saving one step.\n"
                               "\n",
                               launch_options_table,
                               stop_uses,
                               2,
                               19,
                               NULL };

/* "fusionc CMD: <fmt with arg>" and where its usage is, on standard error; 2. */
static int usage_fail(const cli_usage *u, const char *cmd, const char *fmt, const char *arg)
{
    char who[64];
    snprintf(who, sizeof who, "fusionc %s", cmd);
    return cli_usage_fail(u, who, fmt, arg);
}

/* 0, 1 after --help (printed), 2 on a usage error (printed).  launch's
 * arguments after OUT that are none of its options, and all after `--`,
 * go to the devices as they are. */
static int parse(int argc, char **argv, launch_options *o, int for_launch, const cli_usage *u, const char *cmd)
{
    o->grace = 30;
    o->device_args = calloc((size_t)argc + 1, sizeof *o->device_args);
    if (!o->device_args)
        return 2;
    int verbatim = 0;
    char why[512];
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!verbatim && cli_is_help(a) && !o->out_dir) {
            cli_usage_print(stdout, u);
            return 1;
        }
        int took = verbatim ? 0 : cli_take(u, argc, argv, &i, o, why, sizeof why);
        if (took < 0) {
            return usage_fail(u, cmd, "%s", why);
        } else if (took > 0) {
            continue;
        } else if (!verbatim && strcmp(a, "--") == 0 && for_launch) {
            verbatim = 1;
        } else if (!o->out_dir && a[0] != '-') {
            o->out_dir = a;
        } else if (for_launch && o->out_dir) {
            o->device_args[o->n_device_args++] = argv[i];
        } else {
            return usage_fail(u, cmd, "unexpected argument '%s'", a);
        }
    }
    if (!o->out_dir)
        return usage_fail(u, cmd, "%s", "expected the compile's output folder");
    return 0;
}

/* The remote command that starts device k (see the file's comment). */
static int start_command(const remote_plan *plan, const remote_plan *compiled, int k, const launch_options *o,
                         const char *save_tail, char *cmd, size_t len)
{
    const remote_device *d = &plan->devices[k];
    char tail[2 * FU_PATH_BYTES] = "";
    size_t at = (size_t)snprintf(tail, sizeof tail, "%s", save_tail);
    for (int j = 0; j < plan->n_devices; j++) {
        const remote_device *p = &plan->devices[j];
        if (j == k || strcmp(p->address, compiled->devices[j].address) == 0)
            continue;
        char peer[400];
        snprintf(peer, sizeof peer, "%s=%s", p->device, p->address);
        if (at + 10 >= sizeof tail)
            return -1;
        at += (size_t)snprintf(tail + at, sizeof tail - at, "%s--peer ", at ? " " : "");
        if (remote_quote(tail, sizeof tail, &at, peer))
            return -1;
    }
    return remote_start_command(d, d->device, o->device_args, o->n_device_args, tail, cmd, len);
}

/* Start ssh for device k, its output into OUT/logs/<device>.log. */
static pid_t spawn_device(const remote_plan *plan, const remote_device *d, const char *command, const char *log)
{
    /* Emptied here, before the fork: the parent follows this log at once
     * and must not print a previous run's lines. */
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    pid_t pid = remote_spawn(plan, d, command, fd, fd, 0);
    close(fd);
    return pid;
}

static int stop_devices(const remote_plan *plan, const int *which, int quiet)
{
    int failed = 0;
    for (int k = 0; k < plan->n_devices; k++) {
        if (which && !which[k])
            continue;
        const remote_device *d = &plan->devices[k];
        char said[700], host[500];
        int status = remote_stop_device(plan, d, d->device, said, sizeof said);
        remote_describe(d, host, sizeof host);
        if (status != 0) {
            fprintf(stderr, "fusionc stop: device %s on %s: ssh failed: %s\n", d->device, host, said);
            failed++;
        } else if (!quiet) {
            printf("stop: device %s on %s: %s\n", d->device, host, said);
        }
    }
    return failed;
}

/* --trace FILE: each device wrote trace.<device>.json in its bundle folder
 * (its own path there, not FILE, which names this machine's file); fetch
 * them beside FILE and merge.  0, or the number of devices whose part could
 * not be had (said on stderr). */
static int gather_traces(const remote_plan *plan, const char *trace)
{
    int n = plan->n_devices, missing = 0, got = 0;
    char(*local)[FU_PATH_BYTES + 204] = calloc((size_t)n, sizeof *local);
    const char **parts = calloc((size_t)n, sizeof *parts);
    for (int k = 0; local && parts && k < n; k++) {
        const remote_device *d = &plan->devices[k];
        char command[FU_PATH_BYTES + 904], there[FU_PATH_BYTES + 304];
        size_t at = (size_t)snprintf(command, sizeof command, "cat ");
        snprintf(there, sizeof there, "%s/%s/trace%s%s.json", d->path, d->device, n > 1 ? "." : "",
                 n > 1 ? d->device : "");
        char *out = NULL;
        FILE *f = NULL;
        snprintf(local[k], sizeof local[k], "%s.%s", trace, d->device);
        if (remote_quote(command, sizeof command, &at, there) || remote_run(plan, d, command, &out) != 0 || !out ||
            !(f = fopen(local[k], "w")) || fputs(out, f) == EOF) {
            char host[500];
            remote_describe(d, host, sizeof host);
            fprintf(stderr, "fusionc launch: device %s on %s: cannot fetch its trace %s\n", d->device, host, there);
            missing++;
        } else {
            parts[got++] = local[k];
        }
        if (f)
            fclose(f);
        free(out);
    }
    char why[FU_PATH_BYTES + 504];
    if (got > 0 && rt_trace_merge(trace, parts, got, why, sizeof why) != 0) {
        fprintf(stderr, "fusionc launch: %s\n", why);
        missing = n;
    } else if (got > 0) {
        printf("launch: the timeline of %d device%s is in %s (ui.perfetto.dev opens it)\n", got, got == 1 ? "" : "s",
               trace);
    }
    free(local);
    free(parts);
    return missing;
}

/* What the devices write that launch brings back: --trace FILE, --log
 * FILE and --save DIR name this machine's files; on the hosts they become
 * trace.json and train.jsonl in each bundle folder and PATH/checkpoints/
 * <DIR's name> (save_tail, the start command's `--save "$s/NAME"`; a
 * --resume of the same DIR resumes from there). */
typedef struct {
    const char *trace, *log, *save;
    char save_tail[FU_PATH_BYTES]; /* raw, for the remote shell */
    char save_name[256];
} launch_outputs;

/* Whether args[*i] is `name VALUE` or `name=VALUE`: *value set, *i past it. */
static int option_value(char **args, int n, int *i, const char *name, const char **value)
{
    size_t len = strlen(name);
    if (strcmp(args[*i], name) == 0 && *i + 1 < n) {
        *value = args[++*i];
        return 1;
    }
    if (strncmp(args[*i], name, len) == 0 && args[*i][len] == '=') {
        *value = args[*i] + len + 1;
        return 1;
    }
    return 0;
}

/* Takes --trace, --log, --save and --resume out of o's device arguments
 * (kept: the host's names in their place).  0, or 2 (said). */
static int take_outputs(launch_options *o, launch_outputs *out)
{
    memset(out, 0, sizeof *out);
    const char *resume = NULL;
    int kept = 0;
    char **args = o->device_args;
    for (int i = 0; i < o->n_device_args; i++) {
        const char *v;
        if (option_value(args, o->n_device_args, &i, "--trace", &v))
            out->trace = v, args[kept++] = "--trace=trace.json";
        else if (option_value(args, o->n_device_args, &i, "--log", &v))
            out->log = v, args[kept++] = "--log=train.jsonl";
        else if (option_value(args, o->n_device_args, &i, "--save", &v))
            out->save = v;
        else if (option_value(args, o->n_device_args, &i, "--resume", &v))
            resume = v;
        else
            args[kept++] = args[i];
    }
    o->n_device_args = kept;
    if (out->save) {
        char bare[FU_PATH_BYTES];
        snprintf(bare, sizeof bare, "%s", out->save);
        for (size_t n = strlen(bare); n > 1 && bare[n - 1] == '/'; n--)
            bare[n - 1] = '\0';
        const char *base = strrchr(bare, '/') ? strrchr(bare, '/') + 1 : bare;
        snprintf(out->save_name, sizeof out->save_name, "%s", base);
        for (char *c = out->save_name; *c; c++) /* a name the remote shell takes in double quotes */
            if (!(isalnum((unsigned char)*c) || *c == '-' || *c == '_' || *c == '.'))
                *c = '_';
        if (!out->save_name[0] || strcmp(out->save_name, ".") == 0 || strcmp(out->save_name, "..") == 0)
            snprintf(out->save_name, sizeof out->save_name, "run");
        snprintf(out->save_tail, sizeof out->save_tail, "--save \"$s/%s\"%s%s%s", out->save_name,
                 resume ? " --resume \"$s/" : "", resume ? out->save_name : "", resume ? "\"" : "");
    }
    if (resume && (!out->save || strcmp(resume, out->save) != 0)) {
        fprintf(stderr,
                "fusionc launch: --resume %s: launch resumes the run's own --save folder (give --save %s "
                "too); the hosts keep their parts of it\n",
                resume, resume);
        return 2;
    }
    return 0;
}

/* After the run: each device's --log and its part of --save, fetched from
 * its host into the files named here (a log a device: FILE as the device
 * programs name theirs, train.cpu-a0.jsonl).  The number that could not be
 * had (said). */
static int gather_outputs(const remote_plan *plan, const launch_outputs *out, const char *logs)
{
    int missing = 0, n = plan->n_devices;
    struct diag err = { 0 };
    if (out->save && folders_make(out->save, &err)) {
        diag_print(&err);
        return 1;
    }
    for (int k = 0; k < n && (out->log || out->save); k++) {
        const remote_device *d = &plan->devices[k];
        char host[500];
        remote_describe(d, host, sizeof host);
        if (out->log) {
            char there[FU_PATH_BYTES + 304], here[FU_PATH_BYTES + 304], command[FU_PATH_BYTES + 904];
            snprintf(there, sizeof there, "%s/%s/train%s%s.jsonl", d->path, d->device, n > 1 ? "." : "",
                     n > 1 ? d->device : "");
            if (n <= 1)
                snprintf(here, sizeof here, "%s", out->log);
            else
                per_device_path_of(out->log, d->device, here, sizeof here);
            size_t at = (size_t)snprintf(command, sizeof command, "cat ");
            char *text = NULL;
            FILE *f = NULL;
            if (remote_quote(command, sizeof command, &at, there) || remote_run(plan, d, command, &text) != 0 ||
                !text || folders_make_for_file(here, &err) || !(f = fopen(here, "w")) || fputs(text, f) == EOF) {
                fprintf(stderr, "fusionc launch: device %s on %s: cannot bring its log %s back to %s\n", d->device,
                        host, there, here);
                missing++;
            } else {
                printf("launch: %s's log is in %s\n", d->device, here);
            }
            if (f && fclose(f) != 0)
                missing++;
            free(text);
        }
        if (out->save) {
            char there[600], log_path[FU_PATH_BYTES + 304];
            snprintf(there, sizeof there, "checkpoints/%s", out->save_name);
            snprintf(log_path, sizeof log_path, "%s/%s.fetch.log", logs, d->device);
            int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
            if (fd < 0 || remote_pull_dir(plan, d, there, out->save, fd) != 0) {
                fprintf(stderr,
                        "fusionc launch: device %s on %s: cannot bring its checkpoints %s/%s back to %s (see %s)\n",
                        d->device, host, d->path, there, out->save, log_path);
                missing++;
            }
            if (fd >= 0)
                close(fd);
        }
    }
    if (out->save && missing == 0)
        printf(
            "launch: the checkpoints of %d device%s are in %s (each host keeps its own too, in PATH/checkpoints/%s)\n",
            n, n == 1 ? "" : "s", out->save, out->save_name);
    return missing;
}

int launch_main(int argc, char **argv)
{
    launch_options o = { 0 };
    int rc = parse(argc, argv, &o, 1, &launch_usage, "launch");
    if (rc) {
        free(o.device_args);
        return rc == 1 ? 0 : 2;
    }
    if ((o.sbatch.n || o.detach) && !o.slurm) {
        free(o.device_args);
        return usage_fail(&launch_usage, "launch", "%s", "--sbatch and --detach go with --slurm");
    }
    if (o.slurm) {
        if (o.elastic || o.cluster_file || o.ssh_config) {
            free(o.device_args);
            return usage_fail(
                &launch_usage, "launch", "%s",
                "--slurm runs on the job's nodes: --elastic, --cluster and --ssh-config do not go with it");
        }
        rc = slurm_launch(o.out_dir, &o.sbatch, o.detach, o.device_args, o.n_device_args);
        free(o.device_args);
        return rc;
    }
    if (o.elastic) {
        if (o.cluster_file) {
            fprintf(stderr, "fusionc launch: --elastic runs the hosts of OUT/cluster.xml (the compile's); "
                            "--cluster is not taken with it\n");
            free(o.device_args);
            return 2;
        }
        /* OUT --over-ssh [--ssh-config F] then the rest: the broker's options and the devices' */
        char **args = calloc((size_t)o.n_device_args + 5, sizeof *args);
        int n = 0;
        if (!args) {
            free(o.device_args);
            return 1;
        }
        args[n++] = (char *)o.out_dir;
        args[n++] = "--over-ssh";
        if (o.ssh_config)
            args[n++] = "--ssh-config", args[n++] = (char *)o.ssh_config;
        for (int i = 0; i < o.n_device_args; i++)
            args[n++] = o.device_args[i];
        rc = cmd_broker(n, args);
        free(args);
        free(o.device_args);
        return rc;
    }
    remote_plan plan = { 0 }, compiled = { 0 };
    plan.ssh_config = compiled.ssh_config = o.ssh_config;
    struct diag err = { 0 };
    if (remote_plan_load(&compiled, o.out_dir, NULL, &err) ||
        remote_plan_load(&plan, o.out_dir, o.cluster_file, &err)) {
        diag_print(&err);
        remote_plan_free(&compiled);
        free(o.device_args);
        return 1;
    }
    /* --trace, --log, --save (and --resume of the same folder): written on
     * each host, brought back here after the run (gather_outputs) */
    launch_outputs outputs;
    if (take_outputs(&o, &outputs)) {
        remote_plan_free(&plan);
        remote_plan_free(&compiled);
        free(o.device_args);
        return 2;
    }
    const char *trace = outputs.trace;
    char logs[FU_PATH_BYTES + 104];
    snprintf(logs, sizeof logs, "%s/logs", o.out_dir);
    mkdir(logs, 0755);
    int n = plan.n_devices, reporter = 0, running = 0, failures = 0;
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    int *status = calloc((size_t)n, sizeof *status), *alive = calloc((size_t)n, sizeof *alive);
    char(*log)[FU_PATH_BYTES + 304] = calloc((size_t)n, sizeof *log);
    struct sigaction sa = { 0 };
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    for (int k = 0; pids && status && alive && log && k < n; k++) {
        char command[16384];
        const remote_device *d = &plan.devices[k];
        snprintf(log[k], sizeof log[k], "%s/%s.log", logs, d->device);
        if (strcmp(d->device, plan.reporter) == 0)
            reporter = k;
        if (start_command(&plan, &compiled, k, &o, outputs.save_tail, command, sizeof command) ||
            (pids[k] = spawn_device(&plan, d, command, log[k])) < 0) {
            fprintf(stderr, "fusionc launch: cannot start device %s (arguments too long, or no ssh)\n", d->device);
            status[k] = 127;
            failures++;
            continue;
        }
        alive[k] = 1;
        running++;
    }
    long offset = 0;
    double first_failure = failures ? now_seconds() : 0;
    int stopped = 0;
    while (running > 0) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        for (int k = 0; pid > 0 && k < n; k++)
            if (pids[k] == pid && alive[k]) {
                alive[k] = 0;
                running--;
                status[k] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                if (status[k] != 0 && failures++ == 0)
                    first_failure = now_seconds();
            }
        launch_follow(log[reporter], plan.reporter, &offset);
        if (pid > 0)
            continue;
        if (!stopped && (interrupted || (failures && now_seconds() - first_failure > o.grace))) {
            fprintf(stderr, "fusionc launch: %s; stopping the devices still running\n",
                    interrupted ? "interrupted" : "a device failed and the others did not stop by themselves");
            stop_devices(&plan, alive, 1);
            for (int k = 0; k < n; k++)
                if (alive[k])
                    kill(pids[k], SIGTERM);
            stopped = 1;
        }
        usleep(100 * 1000);
    }
    launch_follow(log[reporter], plan.reporter, &offset);
    /* the traces of the devices that ran; one that is missing fails the launch (it was asked for) */
    int trace_missing = trace && !interrupted ? gather_traces(&plan, trace) : 0;
    trace_missing += gather_outputs(&plan, &outputs, logs);
    int failed = 0;
    for (int k = 0; status && k < n; k++) {
        if (status[k] == 0)
            continue;
        char host[500], reason[1100];
        remote_describe(&plan.devices[k], host, sizeof host);
        launch_log_reason(log[k], reason, sizeof reason);
        fprintf(stderr, "fusionc launch: device %s on %s %s (exit %d): %s\n", plan.devices[k].device, host,
                status[k] == 255 ? "lost its ssh connection or was killed" : "failed", status[k], reason);
        failed++;
    }
    if (failed || interrupted)
        fprintf(stderr, "fusionc launch: training did not complete (%d of %d devices failed; logs in %s)\n", failed, n,
                logs);
    else
        printf("launch: training completed on %d device%s (logs in %s)\n", n, n == 1 ? "" : "s", logs);
    rc = failed || interrupted || trace_missing || !pids ? 1 : 0;
    free(pids), free(status), free(alive), free(log);
    remote_plan_free(&plan);
    remote_plan_free(&compiled);
    free(o.device_args);
    return rc;
}

int stop_main(int argc, char **argv)
{
    launch_options o = { 0 };
    int rc = parse(argc, argv, &o, 0, &stop_usage, "stop");
    free(o.device_args);
    if (rc)
        return rc == 1 ? 0 : 2;
    int slurm = slurm_stop(o.out_dir); /* a run launched with --slurm: its job cancelled */
    if (slurm >= 0)
        return slurm;
    remote_plan plan = { 0 };
    plan.ssh_config = o.ssh_config;
    struct diag err = { 0 };
    if (remote_plan_load(&plan, o.out_dir, o.cluster_file, &err)) {
        diag_print(&err);
        return 1;
    }
    int failed = stop_devices(&plan, NULL, 0);
    remote_plan_free(&plan);
    return failed ? 1 : 0;
}
