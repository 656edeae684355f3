/* broker_plan.c: what the broker does after a loss or a join (broker_plan.h):
 * a standby in the lost device's place or a new plan (fusionc compile
 * again), the checkpoint to resume from (the survivors' live state when it
 * covers every stage), and the next epoch's start. */
#define _GNU_SOURCE
#include "broker_plan.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker_checkpoint.h"
#include "broker_speed.h"
#include "cluster_edit.h"
#include "../frontend/units.h"
#include "broker_remote.h"
#include "broker_start.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

static int compile_plan(broker *b, const char *dir, int devices, const char *also_with);
static double plan_estimate(const char *dir);

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* The devices stop (SIGTERM), and once they have the next epoch starts on
 * dir's plan (broker_switch_plan), whose estimated step is `estimate` s. */
static void switch_to(broker *b, const char *dir, double estimate)
{
    snprintf(b->next_bundles, sizeof b->next_bundles, "%s", dir);
    b->next_estimate_ms = estimate * 1e3;
    b->switching = 1;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->mem[i].m.role, "device") == 0 && !b->mem[i].ended && (b->mem[i].m.pid > 0 || b->mem[i].agent[0]))
            broker_signal_member(b, &b->mem[i], SIGTERM);
}

/* A device that joined (j): a plan with it, taken when the planner's step
 * is at least JOIN_GAIN shorter than this epoch's; then the devices stop
 * and the next epoch starts from the checkpoint of `step`.  Logged either way. */
void broker_weigh_joiner(broker *b, member *j, int64_t step)
{
    j->joining = 0;
    if (b->n_joined == (int)(sizeof b->joined / sizeof b->joined[0])) {
        broker_say(b, "join", j->m.device, "%s is not weighed: %d devices joined already", j->m.device, b->n_joined);
        return;
    }
    int devices = 1;
    for (int i = 0; i < b->n; i++)
        devices += strcmp(b->mem[i].m.role, "device") == 0;
    char dir[FU_PATH_BYTES + 304];
    snprintf(dir, sizeof dir, "%s/epoch-%lld", b->out, (long long)b->epoch + 1);
    if (compile_plan(b, dir, devices, j->m.device))
        return;
    double now = plan_estimate(b->bundles), with = plan_estimate(dir), gain = now > 0 ? 1.0 - with / now : 0.0;
    if (!(with > 0 && gain >= JOIN_GAIN)) {
        broker_say(b, "join", j->m.device,
                   "%s is not taken in: the plan with it estimates %.2f ms a step against %.2f ms "
                   "now (%.1f%% faster; taken in from %.0f%%); it stays a standby",
                   j->m.device, with * 1e3, now * 1e3, 100 * gain, 100 * JOIN_GAIN);
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        return;
    }
    broker_say(b, "join", j->m.device,
               "%s is taken in: the plan with it estimates %.2f ms a step against %.2f ms now "
               "(%.1f%% faster); the devices stop and go on from the checkpoint of step %lld",
               j->m.device, with * 1e3, now * 1e3, 100 * gain, (long long)step);
    snprintf(b->joined[b->n_joined++], sizeof b->joined[0], "%s", j->m.device);
    snprintf(j->m.status, sizeof j->m.status, "used");
    if (j->m.pid > 0)
        kill((pid_t)j->m.pid, SIGTERM);
    broker_save_member(b, j);
    switch_to(b, dir, with);
}

/* The run's cluster is now c, read from `to` (a figure measured: what);
 * a plan with it is taken when it is JOIN_GAIN faster than the steps
 * measured now.  kind and subject: the event's.  Said either way. */
static void replan_measured(broker *b, int64_t step, const char *kind, const char *subject, const char *what,
                            cluster *c, const char *to)
{
    broker_use_cluster(b, c, to);
    int devices = 0;
    for (int i = 0; i < b->n; i++)
        devices += strcmp(b->mem[i].m.role, "device") == 0;
    char dir[FU_PATH_BYTES + 304];
    snprintf(dir, sizeof dir, "%s/epoch-%lld", b->out, (long long)b->epoch + 1);
    if (compile_plan(b, dir, devices, NULL))
        return;
    double now = broker_speed_step_ms(b) / 1e3, with = plan_estimate(dir), gain = now > 0 ? 1.0 - with / now : 0.0;
    if (!(with > 0 && gain >= JOIN_GAIN)) {
        broker_say(b, kind, subject,
                   "the plan for %s (%s) estimates %.2f ms a step against %.2f ms measured now (%.1f%% faster; "
                   "taken from %.0f%%): the run goes on as it is",
                   what, to, with * 1e3, now * 1e3, 100 * gain, 100 * JOIN_GAIN);
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
        return;
    }
    broker_say(b, kind, subject,
               "re-planned for %s (%s): the plan estimates %.2f ms a step against %.2f ms measured now (%.1f%% "
               "faster); the devices stop and go on from the checkpoint of step %lld",
               what, to, with * 1e3, now * 1e3, 100 * gain, (long long)step);
    switch_to(b, dir, with);
}

/* Where a re-plan's measured cluster goes: OUT/measured/cluster-epoch-N.xml. */
static void measured_path(broker *b, char *to, size_t n)
{
    snprintf(to, n, "%s/measured", b->out);
    mkdir(to, 0755);
    snprintf(to, n, "%s/measured/cluster-epoch-%lld.xml", b->out, (long long)b->epoch + 1);
}

void broker_replan_straggler(broker *b, int64_t step)
{
    char name[128], to[FU_PATH_BYTES + 304], err[FU_PATH_BYTES + 504], what[300];
    snprintf(name, sizeof name, "%s", b->straggler);
    b->straggler[0] = '\0';
    measured_path(b, to, sizeof to);
    cluster c;
    if (cluster_set_slowdown(b->cluster_path, to, name, b->straggler_slowdown, &c, err, sizeof err)) {
        broker_say(b, "straggler", name, "cannot write %s's measured speed into the cluster: %s", name, err);
        return;
    }
    snprintf(what, sizeof what, "%s's measured speed (slowdown %.2f)", name, b->straggler_slowdown);
    replan_measured(b, step, "straggler", name, what, &c, to);
}

void broker_replan_link(broker *b, int64_t step)
{
    char from[128], host_to[128], to[FU_PATH_BYTES + 304], err[FU_PATH_BYTES + 504], what[400], bw[32];
    snprintf(from, sizeof from, "%s", b->drift_from);
    snprintf(host_to, sizeof host_to, "%s", b->drift_to);
    b->drift_from[0] = '\0';
    measured_path(b, to, sizeof to);
    cluster c;
    if (cluster_set_link(b->cluster_path, to, from, host_to, b->drift_bandwidth, b->drift_latency, &c, err,
                         sizeof err)) {
        broker_say(b, "link", from, "cannot write the measured link %s <-> %s into the cluster: %s", from, host_to,
                   err);
        return;
    }
    units_format(b->drift_bandwidth, UNIT_BANDWIDTH, bw, sizeof bw);
    snprintf(what, sizeof what, "the measured link %s <-> %s (%s)", from, host_to, bw);
    replan_measured(b, step, "link", from, what, &c, to);
}

/* fusionc compile again into dir: compile.args (how the run was compiled)
 * on the cluster without the devices left out so far and with the
 * standbys taken in (and also_with, when not NULL).  When the user fixed
 * the stages and replicas they asked for every device: S x R = `devices`,
 * the most replicas the batch and the model take first; else the planner
 * chooses.  0, or -1 (the compiler's output in OUT/logs/compile-*.log). */
static int compile_plan(broker *b, const char *dir, int devices, const char *also_with)
{
    char path[FU_PATH_BYTES + 204], line[FU_PATH_BYTES], log[FU_PATH_BYTES + 304], cluster_file[sizeof b->cluster_path],
        stages[16], replicas[16];
    static char words[MAX_ARGS][FU_PATH_BYTES];
    char *argv[MAX_ARGS + 4 * 64 + 16];
    int n = 0, w = 0, skip = 0, shaped = 0;
    snprintf(path, sizeof path, "%s/compile.args", b->out);
    FILE *f = fopen(path, "r");
    if (!f) {
        broker_say(b, "failed", NULL, "cannot plan again: %s: %s", path, strerror(errno));
        return -1;
    }
    argv[n++] = b->exe;
    argv[n++] = "compile";
    while (w < MAX_ARGS - 1 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        if (skip-- > 0)
            continue;
        if (strcmp(line, "--stages") == 0 || strcmp(line, "--replicas") == 0) {
            skip = 1;
            shaped = 1;
            continue;
        }
        snprintf(words[w], sizeof words[w], "%s", line);
        argv[n++] = words[w++];
        if (n == 3) { /* after the model: the cluster file the compile kept */
            snprintf(cluster_file, sizeof cluster_file, "%s", b->cluster_path);
            argv[n++] = cluster_file;
        }
    }
    fclose(f);
    for (int k = 0; k < b->n_left_out; k++)
        argv[n++] = "--without", argv[n++] = b->left_out[k];
    for (int k = 0; k < b->n_joined; k++)
        argv[n++] = "--with", argv[n++] = b->joined[k];
    if (also_with)
        argv[n++] = "--with", argv[n++] = (char *)also_with;
    char key[FU_PATH_BYTES + 204]; /* the run's secret: the broker and every epoch's devices share it */
    snprintf(key, sizeof key, "%s/run.key", b->out);
    argv[n++] = "--run-key";
    argv[n++] = key;
    argv[n++] = "--force"; /* a shape tried before in this folder (the loop below) is replaced */
    argv[n++] = "-o";
    argv[n++] = (char *)dir;
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    snprintf(log, sizeof log, "%s/logs/compile-%s.log", b->out, base);
    int ok = 0, tried = 0;
    for (int r = shaped ? devices : 0; !ok && r >= 0; r--) {
        if (shaped && (r == 0 || devices % r != 0))
            continue;
        tried++;
        int k = n;
        if (shaped) {
            snprintf(stages, sizeof stages, "%d", devices / r);
            snprintf(replicas, sizeof replicas, "%d", r);
            argv[k++] = "--stages", argv[k++] = stages, argv[k++] = "--replicas", argv[k++] = replicas;
        }
        argv[k] = NULL;
        pid_t pid = broker_spawn(log, argv);
        int status = 0;
        ok = pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    }
    if (!ok && !tried) /* no compile ran: no log to point to */
        broker_say(b, "failed", NULL, "planning again failed: %d device%s left, no plan to compile", devices,
                   devices == 1 ? "" : "s");
    else if (!ok)
        broker_say(b, "failed", NULL, "planning again failed: see %s", log);
    return ok ? 0 : -1;
}

/* The planner's estimated step of a compile (its plan.txt), seconds; 0 unknown. */
static double plan_estimate(const char *dir)
{
    char path[FU_PATH_BYTES + 304], line[512];
    double ms = 0;
    snprintf(path, sizeof path, "%s/plan.txt", dir);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "estimated step: %lf ms", &ms) == 1)
            break;
    if (f)
        fclose(f);
    return ms / 1e3;
}

/* This epoch's plan, made again without the lost devices, into OUT/epoch-N. */
static int replan(broker *b)
{
    char dir[FU_PATH_BYTES + 204];
    snprintf(dir, sizeof dir, "%s/epoch-%lld", b->out, (long long)b->epoch);
    int survivors = 0;
    for (int i = 0; i < b->n; i++)
        survivors += strcmp(b->mem[i].m.role, "device") == 0 && !b->mem[i].lost;
    double t0 = broker_now();
    if (compile_plan(b, dir, survivors, NULL))
        return -1;
    snprintf(b->bundles, sizeof b->bundles, "%s", dir);
    broker_db_set(b->db, "bundles", b->bundles);
    if (broker_read_plan(b, dir))
        return -1;
    int devices = 0;
    for (int i = 0; i < b->n; i++)
        devices += strcmp(b->mem[i].m.role, "device") == 0;
    broker_say(b, "re-planned", NULL, "re-planned on %d device%s in %.2f s: %s (its plan.txt says how)", devices,
               devices == 1 ? "" : "s", broker_now() - t0, dir);
    return 0;
}

/* A standby for lost device L: one waiting, of L's kind and arch. */
static member *standby_for(broker *b, const member *lost)
{
    int d = cluster_find_device(&b->c, lost->m.bundle_device);
    for (int i = 0; i < b->n && d >= 0; i++) {
        member *s = &b->mem[i];
        int k = -1;
        for (int j = 0; j < b->c.n_standbys; j++)
            if (strcmp(b->c.standbys[j].name, s->m.device) == 0)
                k = j;
        if (k < 0 || strcmp(s->m.status, "standby") != 0 || s->ended || broker_now() - s->heard > b->peer_timeout)
            continue;
        if (b->c.standbys[k].kind == b->c.devices[d].kind && strcmp(b->c.standbys[k].arch, b->c.devices[d].arch) == 0)
            return s;
    }
    return NULL;
}

/* A joined device (a standby of the cluster file, or a provider's) lost:
 * no longer taken in.  1 when it was one. */
static int forget_joined(broker *b, const char *device)
{
    int kept = 0;
    for (int k = 0; k < b->n_joined; k++)
        if (strcmp(b->joined[k], device) != 0)
            memmove(b->joined[kept++], b->joined[k], sizeof b->joined[0]);
    int was = kept < b->n_joined;
    b->n_joined = kept;
    return was;
}

int broker_recover(broker *b)
{
    if (++b->recoveries > b->max_recoveries) {
        broker_say(b, "failed", NULL, "%d recoveries: giving up (--max-recoveries)", b->max_recoveries);
        return -1;
    }
    b->lost_heard = 0;
    for (int i = 0; i < b->n; i++)
        if (b->mem[i].lost && (b->lost_heard == 0 || b->mem[i].heard < b->lost_heard))
            b->lost_heard = b->mem[i].heard;
    b->epoch++;
    char text[32];
    snprintf(text, sizeof text, "%lld", (long long)b->epoch);
    broker_db_set(b->db, "epoch", text);
    /* A standby for each lost device, each standby taken once: else a new plan. */
    int replace = 1;
    member *pick[MAX_MEMBERS] = { 0 };
    for (int i = 0; i < b->n; i++)
        if (b->mem[i].lost) {
            broker_say(b, "lost", b->mem[i].m.device, "lost %s: %s", b->mem[i].m.device, b->mem[i].why);
            for (int k = 0; k < b->n_prov; k++) /* a provider's device lost: the provider is out */
                if (strcmp(b->prov[k].name, b->mem[i].agent) == 0)
                    b->prov[k].gone = 1;
            if ((pick[i] = standby_for(b, &b->mem[i])) != NULL)
                snprintf(pick[i]->m.status, sizeof pick[i]->m.status, "picked");
            else
                replace = 0;
        }
    for (int i = 0; i < b->n; i++)
        if (pick[i])
            snprintf(pick[i]->m.status, sizeof pick[i]->m.status, "standby");
    if (replace) {
        for (int i = 0; i < b->n; i++) {
            member *l = &b->mem[i];
            if (!l->lost)
                continue;
            member *s = pick[i];
            broker_say(b, "replaced", s->m.device, "standby %s takes %s's place (%s's program, at %s)", s->m.device,
                       l->m.device, l->m.bundle_device, s->m.address);
            snprintf(s->m.status, sizeof s->m.status, "used");
            if (s->m.pid > 0)
                kill((pid_t)s->m.pid, SIGTERM);
            broker_save_member(b, s);
            snprintf(l->m.address, sizeof l->m.address, "%s", s->m.address);
            snprintf(l->m.host, sizeof l->m.host, "%s", s->m.host);
            snprintf(l->agent, sizeof l->agent, "%s", s->agent); /* a provider's: its agent runs it */
        }
    } else {
        for (int i = 0; i < b->n && b->n_left_out < 64; i++)
            if (b->mem[i].lost && !forget_joined(b, b->mem[i].m.bundle_device)) /* (a joiner: a standby again) */
                snprintf(b->left_out[b->n_left_out++], sizeof b->left_out[0], "%s", b->mem[i].m.bundle_device);
        if (replan(b))
            return -1;
    }
    broker_use_live_state(b);
    b->n_live = 0;
    char dir[FU_PATH_BYTES];
    int64_t step = broker_db_last_complete(b->db, dir, sizeof dir);
    if (b->remote && broker_remote_prepare(b, step > 0 ? dir : ""))
        return -1;
    int started = 0;
    for (int i = 0; i < b->n; i++) {
        member *m = &b->mem[i];
        if (strcmp(m->m.role, "device") != 0)
            continue;
        m->lost = 0;
        m->why[0] = '\0';
        if (broker_start_device(b, m, step > 0 ? dir : ""))
            return -1;
        started++;
    }
    broker_say(b, "resumed", NULL, "%d device%s start%s again %s", started, started == 1 ? "" : "s",
               started == 1 ? "s" : "",
               step > 0 ? "from the last complete checkpoint" : "from the start (no checkpoint was complete)");
    if (step > 0)
        broker_say(b, "resumed", NULL, "the last complete checkpoint: step %lld, %s", (long long)step, dir);
    b->recovering = 1;
    return 0;
}

/* The plan with a joined device: once the devices have stopped, the next
 * epoch on its bundles, from the last complete checkpoint. */
int broker_switch_plan(broker *b)
{
    b->switching = 0;
    b->n_step_ms = 0; /* the new plan's steps, measured afresh */
    b->check_estimate_ms = b->next_estimate_ms;
    b->epoch++;
    char text[32], dir[FU_PATH_BYTES];
    snprintf(text, sizeof text, "%lld", (long long)b->epoch);
    broker_db_set(b->db, "epoch", text);
    snprintf(b->bundles, sizeof b->bundles, "%s", b->next_bundles);
    broker_db_set(b->db, "bundles", b->bundles);
    if (broker_read_plan(b, b->bundles))
        return -1;
    int64_t step = broker_db_last_complete(b->db, dir, sizeof dir);
    if (b->remote && broker_remote_prepare(b, step > 0 ? dir : ""))
        return -1;
    int started = 0;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->mem[i].m.role, "device") == 0) {
            if (broker_start_device(b, &b->mem[i], step > 0 ? dir : ""))
                return -1;
            started++;
        }
    broker_say(b, "resumed", NULL, "%d device%s go%s on under the new plan (%s) from the checkpoint of step %lld",
               started, started == 1 ? "" : "s", started == 1 ? "es" : "", b->bundles, (long long)step);
    return 0;
}
