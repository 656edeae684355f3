/* broker.c: the run of `fusionc broker` (broker.h): the loop that serves
 * the devices' requests, finds who is lost, and calls on the files below
 * it for what follows (broker_state.h lists them).  The top of the broker:
 * nothing of it calls back here. */
#define _GNU_SOURCE
#include "broker.h"

#include <limits.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../frontend/cluster.h"
#include "../ir/diag.h"
#include "../runtime/comm/seal.h"
#include "broker_again.h"
#include "broker_checkpoint.h"
#include "broker_plan.h"
#include "broker_provider.h"
#include "broker_links.h"
#include "broker_speed.h"
#include "broker_remote.h"
#include "broker_start.h"
#include "broker_state.h"
#include "invite.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

/* ---- what the devices say ------------------------------------------------------ */

/* One request: "<verb> <device> <epoch> <rest>"; the answer into reply. */
static void answer(broker *b, const char *req, char *reply, size_t n)
{
    char verb[32], device[128], rest[FU_PATH_BYTES + 104] = "";
    long long epoch = -1;
    if (sscanf(req, "%31s %127s %lld %4199[^\n]", verb, device, &epoch, rest) < 3) {
        snprintf(reply, n, "refused a request the broker does not understand");
        return;
    }
    member *m = broker_find_member(b, device);
    if (strcmp(verb, "standby") == 0) {
        int spare = -1; /* the cluster file's standby of that name */
        for (int s = 0; s < b->c.n_standbys; s++)
            if (strcmp(b->c.standbys[s].name, device) == 0)
                spare = s;
        if (!m && spare >= 0 && b->n < MAX_MEMBERS) { /* it registered itself, mid-run */
            m = &b->mem[b->n++];
            memset(m, 0, sizeof *m);
            snprintf(m->m.device, sizeof m->m.device, "%s", device);
            snprintf(m->m.role, sizeof m->m.role, "standby");
            snprintf(m->m.status, sizeof m->m.status, "standby");
            snprintf(m->m.address, sizeof m->m.address, "%s", b->c.hosts[b->c.standbys[spare].host].address);
            snprintf(m->m.host, sizeof m->m.host, "%s", b->c.hosts[b->c.standbys[spare].host].name);
            m->joining = 1;
            broker_save_member(b, m);
            broker_say(b, "joined", device,
                       "%s registered mid-run: a plan with it is weighed at the next complete checkpoint", device);
        }
        if (m && strcmp(m->m.role, "standby") == 0)
            m->heard = broker_now();
        snprintf(reply, n, m && strcmp(m->m.status, "standby") == 0 ? "ok" : "stop");
        return;
    }
    if (epoch != b->epoch || !m || strcmp(m->m.role, "device") != 0 || m->lost) {
        snprintf(reply, n,
                 "refused: %s is of epoch %lld and the run is at epoch %lld: it was declared lost (or its "
                 "run started again without it); nothing it sends counts",
                 device, epoch, (long long)b->epoch);
        return;
    }
    m->heard = broker_now();
    snprintf(reply, n, "ok");
    long long step;
    double loss, compute = 0, planned = 0;
    char file[FU_PATH_BYTES], hash[32];
    int line_at = 0; /* "STEP LOSS COMPUTE PLANNED LINE": the device's own step line follows its numbers */
    if (strcmp(verb, "step") == 0 &&
        sscanf(rest, "%lld %lf %lf %lf %n", &step, &loss, &compute, &planned, &line_at) >= 1) {
        /* A report sent again (the broker was busy past the client's wait:
         * a compile) is the one taken already: once. */
        int again = m->ratio_step == step && m->step_epoch == b->epoch;
        m->step_epoch = b->epoch;
        if (!again)
            broker_speed_step(b, m, step, compute, planned);
        if (strcmp(device, b->reporter) == 0 && !again) {
            if (line_at > 0 && rest[line_at])
                broker_speed_line(b, rest + line_at);
            if (line_at > 0 && rest[line_at])
                printf("step %5lld/%lld  %s\n", step, (long long)b->steps, rest + line_at);
            else
                printf("step %5lld/%lld  loss %.6f\n", step, (long long)b->steps, loss);
            if (b->recovering) {
                b->recovering = 0;
                broker_say(b, "resumed", device,
                           "first step after the recovery: step %lld, %.1f s after the lost device "
                           "was last heard from",
                           step, broker_now() - b->lost_heard);
            }
            fflush(stdout);
        }
    } else if (strcmp(verb, "links") == 0) {
        broker_links_report(b, m, rest);
    } else if (strcmp(verb, "part") == 0 && sscanf(rest, "%lld %4095s %31s", &step, file, hash) == 3) {
        int stage = 0, n_stages = 0, live = sscanf(rest, "%*s %*s %*s live %d %d", &stage, &n_stages) == 2;
        if (m->agent[0]) {
            broker_provider_part(b, m, step, file, hash, live, stage, n_stages);
        } else if (b->remote) {
            broker_remote_fetch(b, m, step, file, hash, live, stage, n_stages);
        } else if (live) {
            broker_add_live(b, step, stage, n_stages, file, hash);
        } else {
            broker_db_part(b->db, step, m->m.bundle_device, b->epoch, file, hash);
            broker_check_complete(b, step);
        }
    } else if (strcmp(verb, "bye") == 0) {
        int status = atoi(rest);
        snprintf(m->m.status, sizeof m->m.status, status == 0 ? "done" : "failed");
        broker_save_member(b, m);
    } else if (strcmp(verb, "hello") == 0 && !b->remote && !m->agent[0]) { /* (on a host: its ssh's pid, here) */
        m->m.pid = atoll(rest);
        broker_save_member(b, m);
    }
}

static void serve(broker *b, int wait_ms)
{
    struct nn_pollfd p = { b->sock, NN_POLLIN, 0 };
    while (nn_poll(&p, 1, wait_ms) > 0 && (p.revents & NN_POLLIN)) {
        char *req = NULL, reply[600], text[FU_PATH_BYTES + 504];
        uint8_t nonce[24];
        int got = nn_recv(b->sock, &req, NN_MSG, NN_DONTWAIT);
        if (got < 0)
            break;
        wait_ms = 0;
        uint32_t invite_id;
        if (invite_frame_id((const uint8_t *)req, (size_t)got, &invite_id)) { /* a provider's (invite.h) */
            uint8_t *out = NULL;
            size_t out_len = 0;
            broker_provider_request(b, (const uint8_t *)req, (size_t)got, &out, &out_len);
            nn_freemsg(req);
            nn_send(b->sock, out ? (const void *)out : "", out_len, 0);
            free(out);
            continue;
        }
        /* Sealed under the run secret (broker_client.h); anything else is dropped, unanswered. */
        unsigned long long stamp = 0;
        int at = 0, opens = got >= FU_BOX_OVERHEAD && got - FU_BOX_OVERHEAD < (int)sizeof text &&
                            fu_box_open(b->secret, "broker request", NULL, 0, (const uint8_t *)req, (size_t)got, text,
                                        nonce) == 0;
        nn_freemsg(req);
        if (opens)
            text[got - FU_BOX_OVERHEAD] = '\0';
        if (!opens || sscanf(text, "%llu %n", &stamp, &at) != 1 || !broker_fresh(b, text + at, stamp)) {
            if (broker_count_dropped(b))
                broker_say(b, "dropped", NULL,
                           "dropped a request that %s (%lld so far): not of this run, altered or "
                           "replayed",
                           opens ? "is stale or replayed" : "does not open", (long long)b->dropped);
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
    char path[FU_PATH_BYTES + 304], line[1024], who[128], header[64];
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
        member *x = broker_find_member(b, who);
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

/* Member m's program ended with wait status `status` (reaped here, or
 * said by its provider's agent): done, failed, or lost. */
static void ended(broker *b, member *m, int status)
{
    m->ended = 1;
    if (b->switching && strcmp(m->m.role, "device") == 0) { /* stopped for the new plan */
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
        snprintf(m->why, sizeof m->why,
                 "its ssh connection ended (255): the program was killed, or its host "
                 "or the link to it is gone");
    } else {
        snprintf(m->m.status, sizeof m->m.status, "failed");
        snprintf(m->why, sizeof m->why, "it exited with status %d", WEXITSTATUS(status));
        blame_from_log(b, m);
    }
    broker_save_member(b, m);
}

/* Reaps ended children and finds the silent: marks them ended or lost. */
static void watch(broker *b)
{
    int status;
    pid_t pid;
    for (int i = 0; i < b->n; i++) /* a provider's program: its agent said how it ended */
        if (b->mem[i].agent_ended && !b->mem[i].ended) {
            b->mem[i].agent_ended = 0;
            ended(b, &b->mem[i], b->mem[i].agent_status);
        }
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
        for (int i = 0; !broker_remote_reaped(b, pid, status) && i < b->n; i++) {
            member *m = &b->mem[i];
            if (m->m.pid != pid || m->ended)
                continue;
            ended(b, m, status);
        }
    /* Reaping can take long (a fetched part completes a checkpoint: its
     * MANIFEST and the database fsynced): read the requests that came in
     * meanwhile before calling anyone silent. */
    serve(b, 0);
    double t = broker_now();
    for (int i = 0; i < b->n; i++) {
        member *m = &b->mem[i];
        if (strcmp(m->m.role, "device") != 0 || m->ended || m->lost || b->switching)
            continue;
        if (!m->child && m->m.pid > 0 && kill((pid_t)m->m.pid, 0) != 0) { /* taken over: gone */
            m->ended = 1;
            if (strcmp(m->m.status, "done") != 0 && broker_wrote_last_part(b, m)) { /* finished while no broker heard */
                snprintf(m->m.status, sizeof m->m.status, "done");
                broker_save_member(b, m);
            } else if (strcmp(m->m.status, "done") != 0 && blame_from_log(b, m) > 0) { /* a peer's loss stopped it */
                snprintf(m->m.status, sizeof m->m.status, "failed");
                snprintf(m->why, sizeof m->why, "it stopped: a peer was lost (its log says which)");
                broker_save_member(b, m);
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

/* A new run: every device of OUT's plan, and the standbys' agents. */
static int start_run(broker *b)
{
    b->epoch = 1;
    snprintf(b->bundles, sizeof b->bundles, "%s", b->out);
    broker_db_reset(b->db);
    if (broker_read_plan(b, b->out))
        return -1;
    if (b->standby_agents)
        broker_add_standbys(b);
    broker_db_set(b->db, "epoch", "1");
    broker_db_set(b->db, "bundles", b->bundles);
    broker_db_set(b->db, "state", "running");
    int devices = 0, standbys = 0;
    for (int i = 0; i < b->n; i++) {
        int rc = strcmp(b->mem[i].m.role, "standby") == 0 ? (standbys++, broker_start_standby(b, &b->mem[i]))
                                                          : (devices++, broker_start_device(b, &b->mem[i], ""));
        if (rc)
            return -1;
    }
    broker_say(b, "joined", NULL, "started %d device%s and %d standb%s (%s); broker at %s", devices,
               devices == 1 ? "" : "s", standbys, standbys == 1 ? "y" : "ies", b->bundles, b->url);
    return 0;
}

/* A checkpoint came whole since the last look (broker_check_complete
 * notes its step): a standby that registered mid-run, and a plan for a
 * straggler's measured speed or a drifted link's, are weighed at it. */
static void weigh_joiners(broker *b)
{
    int64_t step = b->weigh_step;
    b->weigh_step = 0;
    for (int i = 0; step > 0 && i < b->n && !b->switching; i++)
        if (b->mem[i].joining)
            broker_weigh_joiner(b, &b->mem[i], step);
    if (step > 0 && b->straggler[0] && !b->switching)
        broker_replan_straggler(b, step);
    if (step > 0 && b->drift_from[0] && !b->switching)
        broker_replan_link(b, step);
}

/* The run is over: the providers' agents are told so when they next ask
 * (every half second), for a few seconds. */
static void farewell(broker *b)
{
    b->finished = 1;
    double t0 = broker_now();
    while (broker_provider_untold(b) > 0 && broker_now() - t0 < 3.0)
        serve(b, 100);
}

static int run(broker *b)
{
    double since_loss = 0, since_switch = 0, since_done = 0;
    if (broker_provider_invite(b))
        return 1;
    while (!interrupted) {
        serve(b, 100);
        watch(b);
        weigh_joiners(b);
        if (b->switching) { /* a new plan (a joiner, a straggler): wait for the devices to stop */
            int going = 0, devices = 0, finished = 0; /* (finished: said bye 0, the run's end) */
            for (int i = 0; i < b->n; i++) {
                member *m = &b->mem[i];
                if (strcmp(m->m.role, "device") != 0)
                    continue;
                devices++;
                if (!m->ended && m->agent[0] &&
                    broker_now() - m->heard > b->peer_timeout + 3) { /* its agent gone too */
                    m->ended = 1;
                    snprintf(m->m.status, sizeof m->m.status, "stopped");
                }
                going += !m->ended;
                finished += strcmp(m->m.status, "done") == 0;
            }
            if (since_switch == 0)
                since_switch = broker_now();
            if (going > 0 && broker_now() - since_switch > 2 * b->peer_timeout + 10)
                broker_stop_all(b, SIGKILL);
            /* The run's last step came before the devices stopped (they
             * finished it, or stopped after it): the run is over, and a
             * new epoch would have nothing to do. */
            if (going == 0 && devices > 0 && (finished == devices || b->last_complete >= b->steps)) {
                broker_say(b, "finished", NULL,
                           "the run finished: %d device%s, %d recover%s (it reached its last step before the new "
                           "plan, %s, could take over: that plan is not used)",
                           devices, devices == 1 ? "" : "s", b->recoveries, b->recoveries == 1 ? "y" : "ies",
                           b->next_bundles);
                broker_db_set(b->db, "state", "finished");
                farewell(b);
                return 0;
            }
            if (going == 0) {
                since_switch = 0;
                if (broker_switch_plan(b))
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
            else if (strcmp(m->m.status, "done") == 0) /* said bye 0 (a taken-over device may not be reaped) */
                done++;
            else if (m->ended)
                failed++, why = m;
            else
                running++;
        }
        if (devices > 0 && done == devices) {
            if (b->n_up + b->n_fetch > 0) { /* the last parts still coming from hosts or providers */
                if (since_done == 0)
                    since_done = broker_now();
                if (broker_now() - since_done < 2 * b->peer_timeout + 10)
                    continue;
                broker_say(b, "checkpoint", NULL, "%d part%s never came from %s: the last checkpoint is not whole",
                           b->n_up + b->n_fetch, b->n_up + b->n_fetch == 1 ? "" : "s", b->n_up ? "providers" : "hosts");
            }
            broker_say(b, "finished", NULL, "the run finished: %d device%s, %d recover%s", devices,
                       devices == 1 ? "" : "s", b->recoveries, b->recoveries == 1 ? "y" : "ies");
            broker_db_set(b->db, "state", "finished");
            farewell(b);
            return 0;
        }
        if (lost > 0) {
            if (since_loss == 0)
                since_loss = broker_now();
            /* (their live parts fetched first, when on hosts) */
            if ((running == 0 && b->n_fetch == 0 && b->n_up == 0) ||
                broker_now() - since_loss > 2 * b->peer_timeout + 10) {
                for (int i = 0; i < b->n; i++) /* survivors still going: stop them */
                    if (strcmp(b->mem[i].m.role, "device") == 0 && !b->mem[i].lost && !b->mem[i].ended &&
                        (b->mem[i].m.pid > 0 || b->mem[i].agent[0]))
                        broker_signal_member(b, &b->mem[i], SIGKILL);
                if (broker_recover(b))
                    return 1;
                since_loss = 0;
            }
        } else if (failed > 0 && running == 0) {
            broker_say(b, "failed", why->m.device,
                       "%s failed (%s; see %s/logs/%s.log) and no device was lost: nothing to "
                       "recover",
                       why->m.device, why->why, b->out, why->m.bundle_device);
            broker_db_set(b->db, "state", "failed");
            return 1;
        }
    }
    broker_say(b, "stopped", NULL, "interrupted: stopping every device");
    broker_stop_all(b, SIGTERM);
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
    char path[FU_PATH_BYTES + 104], err[600];
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
    char why[FU_PATH_BYTES + 504];
    if (fu_secret_load(path, b->secret, why, sizeof why)) {
        fprintf(stderr, "fusionc broker: %s (the compile writes it: every request is sealed with it)\n", why);
        cluster_free(&b->c);
        free(b);
        return 1;
    }
    snprintf(path, sizeof path, "%s/broker.db", b->out);
    char archived[FU_PATH_BYTES + 304];
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
    int rc = 1, max_request = 2 * PROVIDER_CHUNK; /* a provider's upload */
    if (b->remote && broker_remote_setup(b, port)) {
        ;
    } else if (broker_db_open(&b->db, path, err, sizeof err)) {
        fprintf(stderr, "fusionc broker: %s\n", err);
    } else if ((b->sock = nn_socket(AF_SP, NN_REP)) < 0 ||
               nn_setsockopt(b->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max_request, sizeof max_request) < 0 ||
               nn_bind(b->sock, bind_url) < 0) {
        fprintf(stderr, "fusionc broker: cannot listen on %s: %s\n", bind_url, nn_strerror(nn_errno()));
    } else {
        broker_load_run_cluster(b);
        signal(SIGINT, on_signal);
        signal(SIGTERM, on_signal);
        char state[64] = "";
        broker_db_get(b->db, "state", state, sizeof state);
        if (strcmp(state, "running") == 0)
            rc = broker_take_over(b) ? 1 : run(b);
        else if (state[0]) /* an earlier run, not running: resumed (--fresh: archived first, above) */
            rc = broker_resume_run(b, state) ? 1 : run(b);
        else
            rc = start_run(b) ? 1 : run(b);
        for (int i = 0; i < b->n; i++) /* the standbys' agents end with the run */
            if (strcmp(b->mem[i].m.role, "standby") == 0 && b->mem[i].m.pid > 0 && !b->mem[i].ended)
                broker_signal_member(b, &b->mem[i], SIGTERM);
    }
    if (b->sock >= 0)
        nn_close(b->sock);
    broker_db_close(b->db);
    cluster_free(&b->c);
    free(b);
    return rc;
}

/* (broker_plan.c's compile_plan reads it, to compile again without the lost devices.) */
int broker_write_compile_args(const char *out, int argc, char **argv, const char *model, const char *cluster)
{
    char path[FU_PATH_BYTES + 104], abs_model[PATH_MAX];
    snprintf(path, sizeof path, "%s/compile.args", out);
    if (!realpath(model, abs_model))
        return -1;
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "%s\n", abs_model);
    for (int i = 0; i < argc; i++) {
        if (argv[i] == model || argv[i] == cluster)
            continue;
        if (strcmp(argv[i], "-o") == 0) {
            i++;
            continue;
        }
        /* --x=v as two lines, the way compile_plan reads them (it drops
         * --stages and --replicas by name to choose them itself). */
        const char *eq = strncmp(argv[i], "--", 2) == 0 ? strchr(argv[i], '=') : NULL;
        if (eq)
            fprintf(f, "%.*s\n%s\n", (int)(eq - argv[i]), argv[i], eq + 1);
        else
            fprintf(f, "%s\n", argv[i]);
    }
    return fclose(f) == 0 ? 0 : -1;
}
