/* broker.c: the run of `fusionc broker` (broker.h). */
#define _GNU_SOURCE
#include "broker.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <ftw.h>
#include <unistd.h>

#include "../frontend/cluster.h"
#include "../ir/diag.h"
#include "../runtime/comm/seal.h"
#include "broker_db.h"

#include "broker_internal.h"

double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Prints "broker: [epoch E] TEXT" and logs it as an event of `kind`. */
void say(broker *b, const char *kind, const char *device, const char *fmt, ...)
{
    char text[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    printf("broker: [epoch %lld] %s\n", (long long)b->epoch, text);
    fflush(stdout);
    if (b->db)
        broker_db_event(b->db, b->epoch, kind, device, text);
}

member *find_member(broker *b, const char *device)
{
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->mem[i].m.device, device) == 0)
            return &b->mem[i];
    return NULL;
}

void save_member(broker *b, member *m) { broker_db_member(b->db, b->epoch, &m->m); }

/* ---- starting processes ------------------------------------------------------ */

pid_t spawn(const char *log, char *const *argv)
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
    setpgid(0, 0);   /* a Ctrl-C on the broker is the broker's to pass on */
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
    m->heard = now_s();
    m->ended = m->lost = 0;
    snprintf(m->m.status, sizeof m->m.status, "%s", status);
    save_member(b, m);
    return 0;
}

/* Starts member m (the program of m->bundle_device) in this epoch, resuming
 * from `resume` when not empty; every member's address goes to it as --peer. */
int start_device(broker *b, member *m, const char *resume)
{
    char prog[4800], log[4400], epoch[32], save[4200], every[32], timeout[32], ports[32];
    char peers[MAX_MEMBERS][400];
    char *argv[MAX_ARGS + 2 * MAX_MEMBERS + 32];
    int n = 0;
    snprintf(prog, sizeof prog, "%s/%s/fusion-%s", b->bundles, m->m.bundle_device, m->m.bundle_device);
    snprintf(log, sizeof log, "%s/logs/%s.log", b->out, m->m.bundle_device);
    snprintf(epoch, sizeof epoch, "%lld", (long long)b->epoch);
    snprintf(save, sizeof save, "%s/checkpoints", b->out);
    snprintf(every, sizeof every, "%d", b->save_every);
    snprintf(timeout, sizeof timeout, "%g", b->peer_timeout);
    snprintf(ports, sizeof ports, "%lld", (long long)(b->port_base + (b->epoch - 1) * PORT_STRIDE));
    argv[n++] = prog;   /* argv + 1: the arguments (--over-ssh: --save and --resume are the host's) */
    for (int i = 0; i < b->n_args; i++)
        argv[n++] = b->args[i];
    const char *fixed[] = { "--broker", b->url, "--epoch", epoch, "--save-every", every,
                            "--peer-timeout", timeout, "--port-base", ports };
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        argv[n++] = (char *)fixed[i];
    if (!b->remote) {
        argv[n++] = "--save";
        argv[n++] = save;
    }
    if (resume && resume[0] && !b->remote) {
        argv[n++] = "--resume";
        argv[n++] = (char *)resume;
    }
    for (int i = 0; i < b->n; i++) {
        if (strcmp(b->mem[i].m.role, "device") != 0)
            continue;
        snprintf(peers[i], sizeof peers[i], "%s=%s", b->mem[i].m.bundle_device, b->mem[i].m.address);
        argv[n++] = "--peer";
        argv[n++] = peers[i];
    }
    argv[n] = NULL;
    FILE *f = fopen(log, "a");
    if (f) {
        fprintf(f, "== broker: epoch %lld, %s%s%s ==\n", (long long)b->epoch, m->m.device,
                resume && resume[0] ? ", resuming from " : "", resume && resume[0] ? resume : "");
        fclose(f);
    }
    pid_t pid = b->remote ? broker_remote_start(b, m, argv + 1, n - 1, resume, log) : spawn(log, argv);
    if (started(b, m, pid, "running"))
        return -1;
    say(b, "joined", m->m.device, "started %s (pid %lld) at %s", m->m.device, (long long)m->m.pid, m->m.address);
    return 0;
}

int start_standby(broker *b, member *m)
{
    char log[4400];
    snprintf(log, sizeof log, "%s/logs/standby-%s.log", b->out, m->m.device);
    char key[4300];
    snprintf(key, sizeof key, "%s/run.key", b->out);
    char *argv[] = { b->exe, "standby", "--broker", b->url, "--device", m->m.device, "--key", key, NULL };
    return started(b, m, b->remote ? broker_remote_standby(b, m, log) : spawn(log, argv), "standby");
}

/* The members of a bundle folder's plan (its deploy.txt), at their cluster addresses. */
int read_plan(broker *b, const char *bundles)
{
    char path[4600], line[512], name[128];
    snprintf(path, sizeof path, "%s/deploy.txt", bundles);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "fusionc broker: %s: %s (is %s a compile's output?)\n", path, strerror(errno), bundles);
        return -1;
    }
    int kept = 0;
    for (int i = 0; i < b->n; i++)   /* the standbys not taken in stay */
        if (strcmp(b->mem[i].m.role, "standby") == 0 && strcmp(b->mem[i].m.status, "used") != 0)
            b->mem[kept++] = b->mem[i];
    b->n = kept;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "reporter %127s", name) == 1)
            snprintf(b->reporter, sizeof b->reporter, "%s", name);
        if (sscanf(line, "device %127s", name) != 1 || b->n == MAX_MEMBERS)
            continue;
        member *m = &b->mem[b->n++];
        memset(m, 0, sizeof *m);
        snprintf(m->m.device, sizeof m->m.device, "%s", name);
        snprintf(m->m.bundle_device, sizeof m->m.bundle_device, "%s", name);
        snprintf(m->m.role, sizeof m->m.role, "device");
        int d = cluster_find_device(&b->c, name);
        snprintf(m->m.address, sizeof m->m.address, "%s", d >= 0 ? b->c.hosts[b->c.devices[d].host].address : "127.0.0.1");
        snprintf(m->m.host, sizeof m->m.host, "%s", d >= 0 ? b->c.hosts[b->c.devices[d].host].name : "");
    }
    fclose(f);
    return 0;
}

void add_standbys(broker *b)
{
    for (int s = 0; s < b->c.n_standbys && b->n < MAX_MEMBERS; s++) {
        member *m = &b->mem[b->n++];
        memset(m, 0, sizeof *m);
        snprintf(m->m.device, sizeof m->m.device, "%s", b->c.standbys[s].name);
        snprintf(m->m.role, sizeof m->m.role, "standby");
        snprintf(m->m.address, sizeof m->m.address, "%s", b->c.hosts[b->c.standbys[s].host].address);
        snprintf(m->m.host, sizeof m->m.host, "%s", b->c.hosts[b->c.standbys[s].host].name);
    }
}

/* ---- what the devices say ------------------------------------------------------ */

/* A step folder's MANIFEST (checkpoint_store.h) from the parts' report
 * lines ("part <file> <xxh3>", broker_db_parts_text), each part's size
 * read from the file here (parts on hosts were fetched and checked first).
 * 0, or -1 with err set. */
int write_manifest(const char *dir, int64_t step, const char *lines, char *err, size_t n)
{
    ckpt_manifest m = { .step = step };
    int cap = 0, rc = 0;
    for (const char *at = lines; rc == 0 && at && *at; at = strchr(at, '\n') ? strchr(at, '\n') + 1 : NULL) {
        char name[CKPT_PART_MAX], hash[32], path[4600];
        if (sscanf(at, "part %255s %31s", name, hash) != 2)
            continue;
        if (m.n_parts == cap) {
            cap = cap ? 2 * cap : 8;
            ckpt_part *grown = realloc(m.parts, (size_t)cap * sizeof *grown);
            if (!grown) {
                snprintf(err, n, "out of memory");
                rc = -1;
                break;
            }
            m.parts = grown;
        }
        ckpt_part *part = &m.parts[m.n_parts++];
        snprintf(part->name, sizeof part->name, "%s", name);
        part->xxh3 = strtoull(hash, NULL, 16);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        struct stat st;
        if (stat(path, &st) != 0) {
            snprintf(err, n, "%s: %s", path, strerror(errno));
            rc = -1;
        }
        part->size = (int64_t)st.st_size;
    }
    if (rc == 0 && m.n_parts == 0) {
        snprintf(err, n, "%s: no parts", dir);
        rc = -1;
    }
    if (rc == 0)
        rc = ckpt_manifest_write(dir, &m, err, n);
    ckpt_manifest_free(&m);
    return rc;
}

/* The checkpoint of `step` is whole when every device of the epoch has its
 * part in: its MANIFEST lists them (checkpoint_store.h).
 * Parts fetched from hosts arrive in any order (one ssh each), so a step
 * may become whole after a later one did: what is skipped is a step whole
 * already (a report sent again: the device's client retries). */
void check_complete(broker *b, int64_t step)
{
    char dir[4300], done[4400], text[65536];
    snprintf(dir, sizeof dir, "%s/checkpoints/step-%lld", b->out, (long long)step);
    snprintf(done, sizeof done, "%s/" CKPT_MANIFEST, dir);
    if (step == b->last_complete || access(done, F_OK) == 0)
        return;
    const char *names[MAX_MEMBERS];
    int n = 0;
    for (int i = 0; i < b->n; i++)
        if (strcmp(b->mem[i].m.role, "device") == 0)
            names[n++] = b->mem[i].m.bundle_device;
    if (broker_db_parts_in(b->db, step, names, n) != n)
        return;
    if (broker_db_parts_text(b->db, step, names, n, text, sizeof text))
        return;
    char why[1200];
    if (write_manifest(dir, step, text, why, sizeof why)) {
        say(b, "checkpoint", NULL, "cannot complete %s: %s", done, why);
        return;
    }
    broker_db_complete(b->db, step, b->epoch, dir);
    say(b, "checkpoint", NULL, "checkpoint of step %lld complete (%d parts): %s", (long long)step, n, dir);
    if (step < b->last_complete)
        return;   /* a later one is whole already: the joiners were weighed at it */
    b->last_complete = step;
    char folder[4300];
    snprintf(folder, sizeof folder, "%s/checkpoints", b->out);
    if (ckpt_prune(folder, b->keep, why, sizeof why) < 0)   /* the newest complete always stays */
        say(b, "checkpoint", NULL, "cannot remove the checkpoints beyond the %d newest: %s", b->keep, why);
    for (int i = 0; i < b->n && !b->switching; i++)
        if (b->mem[i].joining)
            weigh_joiner(b, &b->mem[i], step);
}

/* A survivor's live part (see broker_internal.h). */
void add_live(broker *b, int64_t step, int stage, int n_stages, const char *file, const char *xxh3)
{
    if (b->n_live == MAX_MEMBERS)
        return;
    b->live[b->n_live].step = step, b->live[b->n_live].stage = stage;
    b->live[b->n_live].n_stages = n_stages;
    snprintf(b->live[b->n_live].file, sizeof b->live[0].file, "%s", file);
    snprintf(b->live[b->n_live++].xxh3, sizeof b->live[0].xxh3, "%s", xxh3);
}

/* One request: "<verb> <device> <epoch> <rest>"; the answer into reply. */
static void answer(broker *b, const char *req, char *reply, size_t n)
{
    char verb[32], device[128], rest[4200] = "";
    long long epoch = -1;
    if (sscanf(req, "%31s %127s %lld %4199[^\n]", verb, device, &epoch, rest) < 3) {
        snprintf(reply, n, "refused a request the broker does not understand");
        return;
    }
    member *m = find_member(b, device);
    if (strcmp(verb, "standby") == 0) {
        int spare = -1;   /* the cluster file's standby of that name */
        for (int s = 0; s < b->c.n_standbys; s++)
            if (strcmp(b->c.standbys[s].name, device) == 0)
                spare = s;
        if (!m && spare >= 0 && b->n < MAX_MEMBERS) {   /* it registered itself, mid-run */
            m = &b->mem[b->n++];
            memset(m, 0, sizeof *m);
            snprintf(m->m.device, sizeof m->m.device, "%s", device);
            snprintf(m->m.role, sizeof m->m.role, "standby");
            snprintf(m->m.status, sizeof m->m.status, "standby");
            snprintf(m->m.address, sizeof m->m.address, "%s", b->c.hosts[b->c.standbys[spare].host].address);
            snprintf(m->m.host, sizeof m->m.host, "%s", b->c.hosts[b->c.standbys[spare].host].name);
            m->joining = 1;
            save_member(b, m);
            say(b, "joined", device, "%s registered mid-run: a plan with it is weighed at the next complete checkpoint",
                device);
        }
        if (m && strcmp(m->m.role, "standby") == 0)
            m->heard = now_s();
        snprintf(reply, n, m && strcmp(m->m.status, "standby") == 0 ? "ok" : "stop");
        return;
    }
    if (epoch != b->epoch || !m || strcmp(m->m.role, "device") != 0 || m->lost) {
        snprintf(reply, n, "refused: %s is of epoch %lld and the run is at epoch %lld: it was declared lost (or its "
                 "run started again without it); nothing it sends counts", device, epoch, (long long)b->epoch);
        return;
    }
    m->heard = now_s();
    snprintf(reply, n, "ok");
    long long step;
    double loss;
    char file[4096], hash[32];
    if (strcmp(verb, "step") == 0 && sscanf(rest, "%lld %lf", &step, &loss) >= 1) {
        if (strcmp(device, b->reporter) == 0) {
            printf("step %5lld/%lld  loss %.6f\n", step, (long long)b->steps, loss);
            if (b->recovering) {
                b->recovering = 0;
                say(b, "resumed", device, "first step after the recovery: step %lld, %.1f s after the lost device "
                    "was last heard from", step, now_s() - b->lost_heard);
            }
            fflush(stdout);
        }
    } else if (strcmp(verb, "part") == 0 && sscanf(rest, "%lld %4095s %31s", &step, file, hash) == 3) {
        int stage = 0, n_stages = 0, live = sscanf(rest, "%*s %*s %*s live %d %d", &stage, &n_stages) == 2;
        if (b->remote) {
            broker_remote_fetch(b, m, step, file, hash, live, stage, n_stages);
        } else if (live) {
            add_live(b, step, stage, n_stages, file, hash);
        } else {
            broker_db_part(b->db, step, m->m.bundle_device, b->epoch, file, hash);
            check_complete(b, step);
        }
    } else if (strcmp(verb, "bye") == 0) {
        int status = atoi(rest);
        snprintf(m->m.status, sizeof m->m.status, status == 0 ? "done" : "failed");
        save_member(b, m);
    } else if (strcmp(verb, "hello") == 0 && !b->remote) {   /* (on a host: the pid is its ssh's, here) */
        m->m.pid = atoll(rest);
        save_member(b, m);
    }
}

/* A request's stamp (broker_client.h): above the last taken from its
 * sender, and within a minute of this clock; else a replay: 0. */
static int fresh(broker *b, const char *text, uint64_t stamp)
{
    char who[128];
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    double off = (double)stamp / 1e6 - ((double)t.tv_sec + 1e-9 * (double)t.tv_nsec);
    if (sscanf(text, "%*s %127s", who) != 1 || off > 60 || off < -60)
        return 0;
    int k = 0;
    while (k < b->n_stamps && strcmp(b->stamps[k].device, who) != 0)
        k++;
    if (k == b->n_stamps) {
        if (k == (int)(sizeof b->stamps / sizeof b->stamps[0]))
            k = 0;   /* full: the oldest entry's place (the freshness window still holds) */
        else
            b->n_stamps++;
        snprintf(b->stamps[k].device, sizeof b->stamps[k].device, "%s", who);
        b->stamps[k].last = 0;
    }
    if (stamp <= b->stamps[k].last)
        return 0;
    b->stamps[k].last = stamp;
    return 1;
}

static void serve(broker *b, int wait_ms)
{
    struct nn_pollfd p = { b->sock, NN_POLLIN, 0 };
    while (nn_poll(&p, 1, wait_ms) > 0 && (p.revents & NN_POLLIN)) {
        char *req = NULL, reply[600], text[4600];
        uint8_t nonce[24];
        int got = nn_recv(b->sock, &req, NN_MSG, NN_DONTWAIT);
        if (got < 0)
            break;
        wait_ms = 0;
        /* Sealed under the run secret (broker_client.h); anything else is dropped, unanswered. */
        unsigned long long stamp = 0;
        int at = 0, opens = got >= FU_BOX_OVERHEAD && got - FU_BOX_OVERHEAD < (int)sizeof text &&
                            fu_box_open(b->secret, "broker request", NULL, 0, (const uint8_t *)req, (size_t)got, text,
                                        nonce) == 0;
        nn_freemsg(req);
        if (opens)
            text[got - FU_BOX_OVERHEAD] = '\0';
        if (!opens || sscanf(text, "%llu %n", &stamp, &at) != 1 || !fresh(b, text + at, stamp)) {
            /* Said for the first ten, then every hundredth: a stranger's
             * flood must not fill the log. */
            if (++b->dropped <= 10 || b->dropped % 100 == 0)
                say(b, "dropped", NULL, "dropped a request that %s (%lld so far): not of this run, altered or "
                    "replayed", opens ? "is stale or replayed" : "does not open", (long long)b->dropped);
            continue;
        }
        answer(b, text + at, reply, sizeof reply);
        uint8_t box[sizeof reply + FU_BOX_OVERHEAD];
        size_t len = strlen(reply);
        fu_box_seal(b->secret, "broker reply", nonce, sizeof nonce, reply, len, box, NULL);
        nn_send(b->sock, box, len + FU_BOX_OVERHEAD, 0);
    }
}

/* ---- who is lost --------------------------------------------------------------- */

/* A device that stopped because another vanished names it in its log
 * (this epoch's part of it: the log goes on across epochs). */
static int blame_from_log(broker *b, member *m)
{
    int named = 0;
    char path[4400], line[1024], who[128], header[64];
    snprintf(path, sizeof path, "%s/logs/%s.log", b->out, m->m.bundle_device);
    snprintf(header, sizeof header, "== broker: epoch %lld,", (long long)b->epoch);
    FILE *f = fopen(path, "r");
    int in_epoch = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "== broker: epoch ", 17) == 0)
            in_epoch = strncmp(line, header, strlen(header)) == 0;
        if (!in_epoch)
            continue;
        const char *at = strstr(line, "lost peer ");
        const char *stopped = strstr(line, "peer ");
        if (at && sscanf(at, "lost peer %127[^: ]", who) == 1) {
        } else if (stopped && strstr(stopped, " stopped") && sscanf(stopped, "peer %127s stopped", who) == 1) {
        } else {
            continue;
        }
        member *x = find_member(b, who);
        named += x && x != m;
        if (x && !x->lost && !x->ended && x != m) {
            x->lost = 1;
            snprintf(x->why, sizeof x->why, "%s reported it lost", m->m.device);
        }
    }
    if (f)
        fclose(f);
    return named;
}

/* Reaps ended children and finds the silent: marks them ended or lost. */
static void watch(broker *b)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (int i = 0; !broker_remote_reaped(b, pid, status) && i < b->n; i++) {
            member *m = &b->mem[i];
            if (m->m.pid != pid || m->ended)
                continue;
            m->ended = 1;
            if (b->switching && strcmp(m->m.role, "device") == 0) {   /* stopped for the new plan */
                snprintf(m->m.status, sizeof m->m.status, "stopped");
            } else if (strcmp(m->m.role, "standby") == 0) {
                if (strcmp(m->m.status, "standby") == 0)
                    snprintf(m->m.status, sizeof m->m.status, "gone");
            } else if (WIFSIGNALED(status)) {
                m->lost = 1;
                snprintf(m->why, sizeof m->why, "its process was killed (signal %d)", WTERMSIG(status));
            } else if (WEXITSTATUS(status) == 0) {
                snprintf(m->m.status, sizeof m->m.status, "done");
            } else if (b->remote && WEXITSTATUS(status) == 255) {
                m->lost = 1;
                snprintf(m->why, sizeof m->why, "its ssh connection ended (255): the program was killed, or its host "
                         "or the link to it is gone");
            } else {
                snprintf(m->m.status, sizeof m->m.status, "failed");
                snprintf(m->why, sizeof m->why, "it exited with status %d", WEXITSTATUS(status));
                blame_from_log(b, m);
            }
            save_member(b, m);
        }
    /* Reaping can take long (a fetched part completes a checkpoint: its
     * MANIFEST and the database fsynced): read the requests that came in
     * meanwhile before calling anyone silent. */
    serve(b, 0);
    double t = now_s();
    for (int i = 0; i < b->n; i++) {
        member *m = &b->mem[i];
        if (strcmp(m->m.role, "device") != 0 || m->ended || m->lost || b->switching)
            continue;
        if (!m->child && m->m.pid > 0 && kill((pid_t)m->m.pid, 0) != 0) {   /* taken over: gone */
            m->ended = 1;
            if (strcmp(m->m.status, "done") != 0 && wrote_last_part(b, m)) {   /* finished while no broker heard */
                snprintf(m->m.status, sizeof m->m.status, "done");
                save_member(b, m);
            } else if (strcmp(m->m.status, "done") != 0 && blame_from_log(b, m) > 0) {   /* a peer's loss stopped it */
                snprintf(m->m.status, sizeof m->m.status, "failed");
                snprintf(m->why, sizeof m->why, "it stopped: a peer was lost (its log says which)");
                save_member(b, m);
            } else if (strcmp(m->m.status, "done") != 0) {
                m->lost = 1;
                snprintf(m->why, sizeof m->why, "its process is gone");
            }
        } else if (t - m->heard > b->peer_timeout + 3.0 && strcmp(m->m.status, "done") != 0) {
            m->lost = 1;
            snprintf(m->why, sizeof m->why, "silent for %.0f s (stopped, hung or cut off)", t - m->heard);
        }
    }
}

/* ---- the run ------------------------------------------------------------------- */

static volatile sig_atomic_t interrupted;
static void on_signal(int sig) { interrupted = sig; }

void signal_member(broker *b, member *m, int sig)
{
    if (m->m.pid > 0)
        kill((pid_t)m->m.pid, sig);
    if (b->remote)   /* its ssh, killed, does not stop the program on the host */
        broker_remote_stop(b, m);
}

void stop_all(broker *b, int sig)
{
    for (int i = 0; i < b->n; i++)
        if (!b->mem[i].ended && b->mem[i].m.pid > 0)
            signal_member(b, &b->mem[i], sig);
}

/* A new run: every device of OUT's plan, and the standbys' agents. */
static int start_run(broker *b)
{
    b->epoch = 1;
    snprintf(b->bundles, sizeof b->bundles, "%s", b->out);
    broker_db_reset(b->db);
    if (read_plan(b, b->out))
        return -1;
    if (b->standby_agents)
        add_standbys(b);
    broker_db_set(b->db, "epoch", "1");
    broker_db_set(b->db, "bundles", b->bundles);
    broker_db_set(b->db, "state", "running");
    int devices = 0, standbys = 0;
    for (int i = 0; i < b->n; i++) {
        int rc = strcmp(b->mem[i].m.role, "standby") == 0 ? (standbys++, start_standby(b, &b->mem[i]))
                                                           : (devices++, start_device(b, &b->mem[i], ""));
        if (rc)
            return -1;
    }
    say(b, "joined", NULL, "started %d device%s and %d standb%s (%s); broker at %s", devices, devices == 1 ? "" : "s",
        standbys, standbys == 1 ? "y" : "ies", b->bundles, b->url);
    return 0;
}

static int run(broker *b)
{
    double since_loss = 0, since_switch = 0;
    while (!interrupted) {
        serve(b, 100);
        watch(b);
        if (b->switching) {   /* a device joined: wait for the devices to stop */
            int going = 0;
            for (int i = 0; i < b->n; i++)
                going += strcmp(b->mem[i].m.role, "device") == 0 && !b->mem[i].ended;
            if (since_switch == 0)
                since_switch = now_s();
            if (going > 0 && now_s() - since_switch > 2 * b->peer_timeout + 10)
                stop_all(b, SIGKILL);
            if (going == 0) {
                since_switch = 0;
                if (switch_plan(b))
                    return 1;
            }
            continue;
        }
        int devices = 0, done = 0, lost = 0, failed = 0, running = 0;
        const member *why = NULL;
        for (int i = 0; i < b->n; i++) {
            const member *m = &b->mem[i];
            if (strcmp(m->m.role, "device") != 0)
                continue;
            devices++;
            if (m->lost)
                lost++;
            else if (strcmp(m->m.status, "done") == 0)   /* said bye 0 (a taken-over device may not be reaped) */
                done++;
            else if (m->ended)
                failed++, why = m;
            else
                running++;
        }
        if (devices > 0 && done == devices) {
            say(b, "finished", NULL, "the run finished: %d device%s, %d recover%s", devices, devices == 1 ? "" : "s",
                b->recoveries, b->recoveries == 1 ? "y" : "ies");
            broker_db_set(b->db, "state", "finished");
            return 0;
        }
        if (lost > 0) {
            if (since_loss == 0)
                since_loss = now_s();
            /* (their live parts fetched first, when on hosts) */
            if ((running == 0 && b->n_fetch == 0) || now_s() - since_loss > 2 * b->peer_timeout + 10) {
                for (int i = 0; i < b->n; i++)   /* survivors still going: stop them */
                    if (strcmp(b->mem[i].m.role, "device") == 0 && !b->mem[i].lost && !b->mem[i].ended &&
                        b->mem[i].m.pid > 0)
                        signal_member(b, &b->mem[i], SIGKILL);
                if (recover(b))
                    return 1;
                since_loss = 0;
            }
        } else if (failed > 0 && running == 0) {
            say(b, "failed", why->m.device, "%s failed (%s; see %s/logs/%s.log) and no device was lost: nothing to "
                "recover", why->m.device, why->why, b->out, why->m.bundle_device);
            broker_db_set(b->db, "state", "failed");
            return 1;
        }
    }
    say(b, "stopped", NULL, "interrupted: stopping every device");
    stop_all(b, SIGTERM);
    broker_db_set(b->db, "state", "stopped");
    return 130;
}

int broker_run(const broker_options *o)
{
    broker *b = calloc(1, sizeof *b);
    if (!b)
        return 1;
    b->out = o->out;
    b->sock = -1;
    b->port_base = o->port_base, b->save_every = o->save_every, b->keep = o->keep;
    b->peer_timeout = o->peer_timeout, b->max_recoveries = o->max_recoveries;
    b->standby_agents = o->standby_agents, b->remote = o->over_ssh;
    b->hosts.ssh_config = o->ssh_config, b->hosts.connect_timeout = o->ssh_timeout, b->address = o->address;
    b->steps = o->steps;
    for (int i = 0; i < o->n_args && i < MAX_ARGS; i++)
        b->args[b->n_args++] = o->args[i];
    int port = o->port;
    char path[4200], err[600];
    struct diag derr = { 0 };
    snprintf(path, sizeof path, "%s/cluster.xml", b->out);
    if (cluster_load(path, &b->c, &derr)) {
        diag_print(&derr);
        free(b);
        return 1;
    }
    ssize_t len = readlink("/proc/self/exe", b->exe, sizeof b->exe - 1);
    b->exe[len > 0 ? len : 0] = '\0';
    snprintf(path, sizeof path, "%s/logs", b->out);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/run.key", b->out);
    char why[4600];
    if (fu_secret_load(path, b->secret, why, sizeof why)) {
        fprintf(stderr, "fusionc broker: %s (the compile writes it: every request is sealed with it)\n", why);
        cluster_free(&b->c);
        free(b);
        return 1;
    }
    snprintf(path, sizeof path, "%s/broker.db", b->out);
    char archived[4400];
    if (o->fresh && access(path, F_OK) == 0) {
        if (broker_archive_run(b->out, archived, sizeof archived, err, sizeof err)) {
            fprintf(stderr, "fusionc broker: --fresh: %s\n", err);
            cluster_free(&b->c);
            free(b);
            return 1;
        }
        printf("broker: --fresh: the earlier run (its broker.db and checkpoints) is archived in %s\n", archived);
    }
    snprintf(b->url, sizeof b->url, "tcp://127.0.0.1:%d", port);
    char bind_url[64];
    snprintf(bind_url, sizeof bind_url, "tcp://*:%d", port);
    int rc = 1;
    if (b->remote && broker_remote_setup(b, port)) {
        ;
    } else if (broker_db_open(&b->db, path, err, sizeof err)) {
        fprintf(stderr, "fusionc broker: %s\n", err);
    } else if ((b->sock = nn_socket(AF_SP, NN_REP)) < 0 || nn_bind(b->sock, bind_url) < 0) {
        fprintf(stderr, "fusionc broker: cannot listen on %s: %s\n", bind_url, nn_strerror(nn_errno()));
    } else {
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        char state[64] = "";
        broker_db_get(b->db, "state", state, sizeof state);
        if (strcmp(state, "running") == 0)
            rc = take_over(b) ? 1 : run(b);
        else if (state[0])   /* an earlier run, not running: resumed (--fresh: archived first, above) */
            rc = resume_run(b, state) ? 1 : run(b);
        else
            rc = start_run(b) ? 1 : run(b);
        for (int i = 0; i < b->n; i++)   /* the standbys' agents end with the run */
            if (strcmp(b->mem[i].m.role, "standby") == 0 && b->mem[i].m.pid > 0 && !b->mem[i].ended)
                signal_member(b, &b->mem[i], SIGTERM);
    }
    if (b->sock >= 0)
        nn_close(b->sock);
    broker_db_close(b->db);
    cluster_free(&b->c);
    free(b);
    return rc;
}
