/* broker_remote.c: the broker's members on their cluster hosts, over ssh
 * (`fusionc broker --over-ssh`, which `fusionc launch --elastic` runs).
 *
 * The bundles are on the hosts already (`fusionc deploy`, which also gives
 * each standby host the bundles of its kind); the broker runs here, on the
 * machine that deployed them, and keeps OUT/ (logs, broker.db, checkpoints)
 * here:
 *   - a member's program runs through ssh, as `fusionc launch` starts it
 *     (remote_start_command), its output coming back into OUT/logs; its
 *     checkpoint parts go to PATH/checkpoints on its host (--save "$s");
 *   - every part a device reports is fetched here at once, in the
 *     background (ssh cat), and counted only when its bytes hash to the
 *     XXH3 the device reported: a checkpoint is complete when every part
 *     is whole here, so it outlives the host that wrote it;
 *   - before an epoch starts, each device's bundle (a new plan's, or the
 *     lost device's on a standby's host) is deployed where it runs (only
 *     what changed is copied), and the checkpoint to resume from is copied
 *     to each host that runs a device (tar over ssh);
 *   - a standby host's agent is any bundle of its kind run with --standby;
 *   - a device lost: its ssh ends with 255 (the program killed, or its
 *     host or link gone), or it falls silent; a member is stopped on its
 *     host by its fusion.pid (remote_stop_device), not by its ssh alone.
 */
#define _GNU_SOURCE
#include "broker_remote.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../runtime/checkpoint_store.h"
#include "broker_checkpoint.h"
#include "remote_deploy.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

/* The cluster host member m runs on, as ssh needs it, for program `device`. */
static int host_of(broker *b, const member *m, const char *device, remote_device *rd)
{
    for (int h = 0; h < b->c.n_hosts; h++)
        if (strcmp(b->c.hosts[h].name, m->m.host) == 0) {
            remote_device_at(&b->c, h, device, rd);
            return 0;
        }
    broker_say(b, "failed", m->m.device, "%s: no host '%s' in %s/cluster.xml", m->m.device, m->m.host, b->out);
    return -1;
}

int broker_remote_setup(broker *b, int port)
{
    char address[INET6_ADDRSTRLEN] = "";
    if (b->address) {
        snprintf(address, sizeof address, "%s", b->address);
    } else if (b->c.n_devices > 0) {
        /* The address this machine sends from towards the first host (a UDP
         * socket's connect sends nothing: it only picks the route). */
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM }, *ai = NULL;
        const char *host = b->c.hosts[b->c.devices[0].host].address;
        if (getaddrinfo(host, "22", &hints, &ai) == 0) {
            int s = socket(ai->ai_family, SOCK_DGRAM, 0);
            struct sockaddr_storage me;
            socklen_t len = sizeof me;
            if (s >= 0 && connect(s, ai->ai_addr, ai->ai_addrlen) == 0 &&
                getsockname(s, (struct sockaddr *)&me, &len) == 0)
                getnameinfo((struct sockaddr *)&me, len, address, sizeof address, NULL, 0, NI_NUMERICHOST);
            if (s >= 0)
                close(s);
            freeaddrinfo(ai);
        }
    }
    if (!address[0]) {
        fprintf(stderr, "fusionc broker: cannot tell which address the hosts reach this machine at: give --address\n");
        return -1;
    }
    snprintf(b->url, sizeof b->url, strchr(address, ':') ? "tcp://[%s]:%d" : "tcp://%s:%d", address, port);
    return 0;
}

static int open_log(const char *log) { return open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644); }

/* bundle's program on rd's host with args and raw_tail (remote_start_command),
 * its output appended to log; the ssh's pid, or -1. */
static pid_t run_on_host(broker *b, const remote_device *rd, const char *bundle, char *const *args, int n_args,
                         const char *raw_tail, const char *log)
{
    static char command[32768]; /* the broker is one thread */
    int fd = open_log(log);
    if (fd < 0 || remote_start_command(rd, bundle, args, n_args, raw_tail, command, sizeof command)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    pid_t pid = remote_spawn(&b->hosts, rd, command, fd, fd, 1);
    close(fd);
    return pid;
}

pid_t broker_remote_start(broker *b, member *m, char *const *args, int n_args, const char *resume, const char *log)
{
    remote_device rd;
    if (host_of(b, m, m->m.bundle_device, &rd))
        return -1;
    /* The folder names are the broker's own (step-N, live-N): no quoting needed beyond "$s". */
    char tail[600];
    const char *base = resume && resume[0] ? (strrchr(resume, '/') ? strrchr(resume, '/') + 1 : resume) : NULL;
    snprintf(tail, sizeof tail, "--save \"$s\"%s%s%s", base ? " --resume \"$s/" : "", base ? base : "",
             base ? "\"" : "");
    return run_on_host(b, &rd, m->m.bundle_device, args, n_args, tail, log);
}

pid_t broker_remote_standby(broker *b, member *m, const char *log)
{
    int s = -1;
    for (int k = 0; k < b->c.n_standbys; k++)
        if (strcmp(b->c.standbys[k].name, m->m.device) == 0)
            s = k;
    const char *bundle = NULL; /* a device of its kind: deploy gave the standby its bundle */
    for (int i = 0; s >= 0 && !bundle && i < b->n; i++) {
        int d = cluster_find_device(&b->c, b->mem[i].m.bundle_device);
        if (strcmp(b->mem[i].m.role, "device") == 0 && d >= 0 && b->c.devices[d].kind == b->c.standbys[s].kind &&
            strcmp(b->c.devices[d].arch, b->c.standbys[s].arch) == 0)
            bundle = b->mem[i].m.bundle_device;
    }
    remote_device rd;
    if (!bundle) {
        broker_say(b, "standby", m->m.device,
                   "standby %s: no device of its kind in the plan, so no bundle to wait with", m->m.device);
        return -1;
    }
    if (host_of(b, m, bundle, &rd))
        return -1;
    snprintf(m->m.bundle_device, sizeof m->m.bundle_device, "%s", bundle); /* to stop it at the end */
    char *args[] = { "--standby", m->m.device, "--broker", b->url };
    return run_on_host(b, &rd, bundle, args, 4, NULL, log);
}

void broker_remote_fetch(broker *b, member *m, int64_t step, const char *file, const char *xxh3, int live, int stage,
                         int n_stages)
{
    if (b->n_fetch == MAX_MEMBERS) {
        broker_say(b, "checkpoint", m->m.device, "too many parts in flight: %s's part of step %lld is not fetched",
                   m->m.device, (long long)step);
        return;
    }
    char file_here[FU_PATH_BYTES + 504];
    if (broker_part_here(b, m, file, file_here, sizeof file_here))
        return;
    __typeof__(b->fetch[0]) *f = &b->fetch[b->n_fetch];
    memset(f, 0, sizeof *f);
    snprintf(f->file, sizeof f->file, "%s", file_here);
    snprintf(f->tmp, sizeof f->tmp, "%s.fetch", file_here);
    snprintf(f->device, sizeof f->device, "%s", m->m.bundle_device);
    snprintf(f->xxh3, sizeof f->xxh3, "%s", xxh3);
    f->step = step, f->live = live, f->stage = stage, f->n_stages = n_stages;
    remote_device rd;
    char command[FU_PATH_BYTES + 304], log[FU_PATH_BYTES + 304];
    size_t at = (size_t)snprintf(command, sizeof command, "cat -- ");
    snprintf(log, sizeof log, "%s/logs/%s.log", b->out, m->m.bundle_device);
    if (host_of(b, m, m->m.bundle_device, &rd) || remote_quote(command, sizeof command, &at, file))
        return;
    int out = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), err = open_log(log);
    if (out >= 0 && err >= 0 && (f->pid = remote_spawn(&b->hosts, &rd, command, out, err, 1)) > 0)
        b->n_fetch++;
    else
        broker_say(b, "checkpoint", m->m.device, "cannot fetch %s: %s", file, strerror(errno));
    if (out >= 0)
        close(out);
    if (err >= 0)
        close(err);
}

int broker_remote_reaped(broker *b, pid_t pid, int status)
{
    int k = 0;
    while (k < b->n_fetch && b->fetch[k].pid != pid)
        k++;
    if (k == b->n_fetch)
        return 0;
    __typeof__(b->fetch[0]) f = b->fetch[k];
    b->fetch[k] = b->fetch[--b->n_fetch];
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        broker_say(b, "checkpoint", f.device,
                   "%s's part of step %lld could not be fetched from its host (ssh status %d): "
                   "that checkpoint will not be complete",
                   f.device, (long long)f.step, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        unlink(f.tmp);
        return 1;
    }
    broker_take_part(b, f.tmp, f.file, f.device, f.step, f.xxh3, f.live, f.stage, f.n_stages);
    return 1;
}

int broker_remote_prepare(broker *b, const char *resume)
{
    b->hosts.out_dir = b->bundles;
    char log[FU_PATH_BYTES + 304];
    snprintf(log, sizeof log, "%s/logs/broker-hosts.log", b->out);
    int fd = open_log(log), rc = 0;
    char pushed[MAX_MEMBERS][128];
    int n_pushed = 0;
    for (int i = 0; i < b->n && rc == 0; i++) {
        member *m = &b->mem[i];
        remote_device rd;
        if (strcmp(m->m.role, "device") != 0 || m->agent[0]) /* (a provider fetches its own) */
            continue;
        if (host_of(b, m, m->m.bundle_device, &rd))
            return -1;
        struct diag err = { 0 };
        int copied = 0;
        if (deploy_device(&b->hosts, &rd, NULL, &copied, &err)) {
            broker_say(b, "failed", m->m.device, "cannot deploy %s's bundle to host %s: %s", m->m.bundle_device,
                       rd.host, err.msg);
            rc = -1;
        }
        int seen = 0;
        for (int k = 0; k < n_pushed; k++)
            seen |= strcmp(pushed[k], rd.host) == 0;
        if (rc || seen || !resume || !resume[0])
            continue;
        snprintf(pushed[n_pushed++], sizeof pushed[0], "%s", rd.host);
        double t0 = broker_now();
        if (remote_push_dir(&b->hosts, &rd, resume, fd >= 0 ? fd : 2)) {
            broker_say(b, "failed", m->m.device, "cannot copy the checkpoint %s to host %s (see %s)", resume, rd.host,
                       log);
            rc = -1;
        } else {
            broker_say(b, "resumed", NULL, "checkpoint %s copied to host %s in %.2f s", resume, rd.host,
                       broker_now() - t0);
        }
    }
    if (fd >= 0)
        close(fd);
    return rc;
}

void broker_remote_stop(broker *b, member *m)
{
    remote_device rd;
    char said[700];
    if (!m->m.bundle_device[0] || host_of(b, m, m->m.bundle_device, &rd))
        return;
    int status = remote_stop_device(&b->hosts, &rd, m->m.bundle_device, said, sizeof said);
    broker_say(b, "stopped", m->m.device, "%s on host %s: %s", m->m.device, rd.host, status == 0 ? said : "ssh failed");
}
