/* broker_start.c: the members' programs started and stopped
 * (broker_start.h). */
#define _GNU_SOURCE
#include "broker_start.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "broker_remote.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

pid_t broker_spawn(const char *log, char *const *argv)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    setpgid(0, 0); /* a Ctrl-C on the broker is the broker's to pass on */
    execv(argv[0], argv);
    fprintf(stderr, "broker: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Member m's process is pid (a child of this broker), with this status. */
static int started(broker *b, member *m, pid_t pid, const char *status)
{
    if (pid < 0)
        return -1;
    m->m.pid = pid;
    m->child = 1;
    m->heard = broker_now();
    m->ended = m->lost = 0;
    snprintf(m->m.status, sizeof m->m.status, "%s", status);
    broker_save_member(b, m);
    return 0;
}

void broker_device_args(broker *b, device_args *a)
{
    a->n = 0;
    snprintf(a->epoch, sizeof a->epoch, "%lld", (long long)b->epoch);
    snprintf(a->every, sizeof a->every, "%d", b->save_every);
    snprintf(a->timeout, sizeof a->timeout, "%g", b->peer_timeout);
    snprintf(a->ports, sizeof a->ports, "%lld", (long long)(b->port_base + (b->epoch - 1) * PORT_STRIDE));
    for (int i = 0; i < b->n_args; i++)
        a->argv[a->n++] = b->args[i];
    const char *fixed[] = { "--broker", b->url,           "--epoch",  a->epoch,      "--save-every",
                            a->every,   "--peer-timeout", a->timeout, "--port-base", a->ports };
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        a->argv[a->n++] = (char *)fixed[i];
    for (int i = 0; i < b->n; i++) {
        if (strcmp(b->mem[i].m.role, "device") != 0)
            continue;
        snprintf(a->peers[i], sizeof a->peers[i], "%s=%s", b->mem[i].m.bundle_device, b->mem[i].m.address);
        a->argv[a->n++] = "--peer";
        a->argv[a->n++] = a->peers[i];
    }
    a->argv[a->n] = NULL;
}

/* Starts member m (the program of m->bundle_device) in this epoch, resuming
 * from `resume` when not empty; every member's address goes to it as --peer.
 * A provider's program is not started here: its agent is told to. */
int broker_start_device(broker *b, member *m, const char *resume)
{
    static device_args a; /* (large: every member's --peer) */
    char prog[FU_PATH_BYTES + 704], log[FU_PATH_BYTES + 304], save[FU_PATH_BYTES + 104];
    char *argv[MAX_ARGS + 2 * MAX_MEMBERS + 32];
    int n = 0;
    snprintf(prog, sizeof prog, "%s/%s/fusion-%s", b->bundles, m->m.bundle_device, m->m.bundle_device);
    snprintf(log, sizeof log, "%s/logs/%s.log", b->out, m->m.bundle_device);
    snprintf(save, sizeof save, "%s/checkpoints", b->out);
    if (m->agent[0]) {
        snprintf(m->resume, sizeof m->resume, "%s", resume ? resume : "");
        m->run_epoch = b->epoch, m->fetched = 0, m->kill_sig = 0;
        if (started(b, m, 0, "running"))
            return -1;
        m->child = 0;
        broker_say(b, "joined", m->m.device, "%s is to start on provider %s, at %s (its agent is told)", m->m.device,
                   m->agent, m->m.address);
        return 0;
    }
    broker_device_args(b, &a);
    argv[n++] = prog; /* argv + 1: the arguments (--over-ssh: --save and --resume are the host's) */
    for (int i = 0; i < a.n; i++)
        argv[n++] = a.argv[i];
    if (!b->remote) {
        argv[n++] = "--save";
        argv[n++] = save;
    }
    if (resume && resume[0] && !b->remote) {
        argv[n++] = "--resume";
        argv[n++] = (char *)resume;
    }
    argv[n] = NULL;
    FILE *f = fopen(log, "a");
    if (f) {
        fprintf(f, "== broker: epoch %lld, %s%s%s ==\n", (long long)b->epoch, m->m.device,
                resume && resume[0] ? ", resuming from " : "", resume && resume[0] ? resume : "");
        fclose(f);
    }
    pid_t pid = b->remote ? broker_remote_start(b, m, argv + 1, n - 1, resume, log) : broker_spawn(log, argv);
    if (started(b, m, pid, "running"))
        return -1;
    broker_say(b, "joined", m->m.device, "started %s (pid %lld) at %s", m->m.device, (long long)m->m.pid, m->m.address);
    return 0;
}

int broker_start_standby(broker *b, member *m)
{
    char log[FU_PATH_BYTES + 304];
    snprintf(log, sizeof log, "%s/logs/standby-%s.log", b->out, m->m.device);
    char key[FU_PATH_BYTES + 204];
    snprintf(key, sizeof key, "%s/run.key", b->out);
    char *argv[] = { b->exe, "standby", "--broker", b->url, "--device", m->m.device, "--key", key, NULL };
    return started(b, m, b->remote ? broker_remote_standby(b, m, log) : broker_spawn(log, argv), "standby");
}

void broker_signal_member(broker *b, member *m, int sig)
{
    if (m->agent[0]) { /* its agent sends it, when it next asks */
        m->kill_sig = sig;
        return;
    }
    if (m->m.pid > 0)
        kill((pid_t)m->m.pid, sig);
    if (b->remote) /* its ssh, killed, does not stop the program on the host */
        broker_remote_stop(b, m);
}

void broker_stop_all(broker *b, int sig)
{
    for (int i = 0; i < b->n; i++)
        if (!b->mem[i].ended && (b->mem[i].m.pid > 0 || b->mem[i].agent[0]))
            broker_signal_member(b, &b->mem[i], sig);
}
