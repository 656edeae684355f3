/* broker_again.c: `fusionc broker` started on an OUT that already holds a
 * run (broker_again.h).  One still running is taken over: its members as
 * the database has them, the devices the old broker had not started
 * started now.  One that is not running finished, failed or was stopped.
 *
 * Such a run is never wiped.  Without --fresh it is resumed: a new epoch of
 * the last epoch's devices, every one from the newest complete checkpoint,
 * up to the --steps given (which must be above that checkpoint's step).
 * With --fresh the old run is first archived: OUT/broker.db and
 * OUT/checkpoints move to OUT/archive/run-<N>/, so that a new run starts
 * clean and nothing of the old one is overwritten.
 */
#define _GNU_SOURCE
#include "broker_again.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/checkpoint_store.h"
#include "broker_checkpoint.h"
#include "broker_remote.h"
#include "broker_start.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

int broker_archive_run(const char *out, char *archived, size_t size, char *err, size_t n)
{
    char dir[FU_PATH_BYTES + 104], from[FU_PATH_BYTES + 104], to[FU_PATH_BYTES + 304];
    snprintf(dir, sizeof dir, "%s/archive", out);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, n, "%s: cannot create it: %s", dir, strerror(errno));
        return -1;
    }
    int k = 1;
    for (; k < 100000; k++) { /* the first free run-<k> */
        snprintf(archived, size, "%s/archive/run-%d", out, k);
        if (mkdir(archived, 0755) == 0)
            break;
        if (errno != EEXIST) {
            snprintf(err, n, "%s: cannot create it: %s", archived, strerror(errno));
            return -1;
        }
    }
    const char *what[] = { "broker.db", "checkpoints" };
    for (int i = 0; i < 2; i++) {
        snprintf(from, sizeof from, "%s/%s", out, what[i]);
        snprintf(to, sizeof to, "%s/%s", archived, what[i]);
        if (rename(from, to) != 0 && errno != ENOENT) {
            snprintf(err, n, "cannot move %s to %s: %s", from, to, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int broker_resume_run(broker *b, const char *state)
{
    char text[FU_PATH_BYTES + 104], dir[FU_PATH_BYTES];
    if (broker_db_get(b->db, "epoch", text, sizeof text))
        return -1;
    b->epoch = atoll(text);
    if (broker_db_get(b->db, "bundles", b->bundles, sizeof b->bundles))
        snprintf(b->bundles, sizeof b->bundles, "%s", b->out);
    b->n = 0; /* the last epoch's plan, every device of it started again */
    if (broker_read_plan(b, b->bundles))
        return -1;
    b->last_complete = broker_db_last_complete(b->db, dir, sizeof dir);
    if (!b->remote) /* no device runs: steps whose parts are all there are completed, the rest is litter */
        broker_adopt_parts(b);
    char folder[FU_PATH_BYTES + 104], why[600];
    snprintf(folder, sizeof folder, "%s/checkpoints", b->out);
    int removed = b->remote ? 0 : ckpt_remove_litter(folder, why, sizeof why);
    if (removed > 0)
        broker_say(b, "checkpoint", NULL, "removed %d unfinished save%s' files from %s (no MANIFEST)", removed,
                   removed == 1 ? "" : "s", folder);
    int64_t step = broker_db_last_complete(b->db, dir, sizeof dir);
    if (step <= 0) {
        broker_say(b, "failed", NULL,
                   "%s holds a run (%s) with no complete checkpoint to resume from: give --fresh to start "
                   "another (the old one is archived in %s/archive)",
                   b->out, state, b->out);
        return -1;
    }
    if (step >= b->steps) {
        broker_say(b, "failed", NULL,
                   "%s holds a run (%s) whose newest complete checkpoint is step %lld: --steps %lld would "
                   "train nothing (give more steps, or --fresh to start another)",
                   b->out, state, (long long)step, (long long)b->steps);
        return -1;
    }
    b->epoch++;
    snprintf(text, sizeof text, "%lld", (long long)b->epoch);
    broker_db_set(b->db, "epoch", text);
    broker_db_set(b->db, "state", "running");
    if (b->standby_agents)
        broker_add_standbys(b);
    if (b->remote && broker_remote_prepare(b, dir))
        return -1;
    int devices = 0;
    for (int i = 0; i < b->n; i++) {
        member *m = &b->mem[i];
        int rc = strcmp(m->m.role, "standby") == 0 ? broker_start_standby(b, m)
                                                   : (devices++, broker_start_device(b, m, dir));
        if (rc)
            return -1;
    }
    b->last_complete = step;
    broker_say(b, "resumed", NULL,
               "the run in %s (%s) goes on: %d devices from its newest complete checkpoint, step %lld "
               "(%s), up to step %lld",
               b->out, state, devices, (long long)step, dir, (long long)b->steps);
    return 0;
}

/* Waits (at most twice the peer timeout, and 5 s) until the devices of the
 * epoch before are gone: the survivors of a loss save their live state as
 * they stop, and that is what the next epoch should resume from. */
static void wait_for_last_epoch(broker *b)
{
    broker_member prev[MAX_MEMBERS];
    int n = b->epoch > 1 ? broker_db_members(b->db, b->epoch - 1, prev, MAX_MEMBERS) : 0;
    for (double until = broker_now() + 2 * b->peer_timeout + 5; n > 0 && broker_now() < until; usleep(100 * 1000)) {
        int alive = 0;
        for (int i = 0; i < n; i++)
            alive += strcmp(prev[i].role, "device") == 0 && prev[i].pid > 0 && kill((pid_t)prev[i].pid, 0) == 0;
        if (!alive)
            break;
    }
}

/* A broker started again on a run in progress: its members, as the
 * database has them; the devices of the epoch's plan that the old broker
 * had not started (killed while it started them, in a recovery) are
 * started now, from the newest complete checkpoint (after the epoch
 * before has stopped: its survivors' live state, saved as they stop, may
 * be that checkpoint); steps whose parts all came in while no broker ran
 * are made complete. */
int broker_take_over(broker *b)
{
    char text[FU_PATH_BYTES + 104];
    if (broker_db_get(b->db, "epoch", text, sizeof text))
        return -1;
    b->epoch = atoll(text);
    char dir[FU_PATH_BYTES];
    b->last_complete = broker_db_last_complete(b->db, dir, sizeof dir);
    if (broker_db_get(b->db, "bundles", b->bundles, sizeof b->bundles))
        snprintf(b->bundles, sizeof b->bundles, "%s", b->out);
    broker_member rows[MAX_MEMBERS];
    int n = broker_db_members(b->db, b->epoch, rows, MAX_MEMBERS);
    b->n = 0;
    for (int i = 0; i < n; i++) {
        member *m = &b->mem[b->n++];
        memset(m, 0, sizeof *m);
        m->m = rows[i];
        m->heard = broker_now();
        m->ended = strcmp(m->m.status, "done") == 0 || strcmp(m->m.status, "used") == 0;
    }
    int taken = b->n;
    char line[512], name[128], path[FU_PATH_BYTES + 504];
    member *start[MAX_MEMBERS];
    int n_start = 0;
    snprintf(path, sizeof path, "%s/deploy.txt", b->bundles);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        if (sscanf(line, "reporter %127s", name) == 1)
            snprintf(b->reporter, sizeof b->reporter, "%s", name);
        if (sscanf(line, "device %127s", name) != 1)
            continue;
        member *m = NULL;
        for (int i = 0; i < b->n && !m; i++)
            if (strcmp(b->mem[i].m.role, "device") == 0 && strcmp(b->mem[i].m.bundle_device, name) == 0)
                m = &b->mem[i];
        if (!m && b->n < MAX_MEMBERS) { /* no row: the old broker never got to it */
            m = &b->mem[b->n++];
            memset(m, 0, sizeof *m);
            snprintf(m->m.device, sizeof m->m.device, "%s", name);
            snprintf(m->m.bundle_device, sizeof m->m.bundle_device, "%s", name);
            snprintf(m->m.role, sizeof m->m.role, "device");
            int d = cluster_find_device(&b->c, name);
            snprintf(m->m.address, sizeof m->m.address, "%s",
                     d >= 0 ? b->c.hosts[b->c.devices[d].host].address : "127.0.0.1");
            snprintf(m->m.host, sizeof m->m.host, "%s", d >= 0 ? b->c.hosts[b->c.devices[d].host].name : "");
        }
        if (m && m->m.pid <= 0 && !m->ended && n_start < MAX_MEMBERS)
            start[n_start++] = m;
    }
    if (f)
        fclose(f);
    broker_say(b, "restarted", NULL, "the broker started again: epoch %lld, %d members, taken over as they run",
               (long long)b->epoch, taken);
    if (n_start > 0)
        wait_for_last_epoch(b);
    if (!b->remote) {
        broker_adopt_parts(b);
        if (n_start > 0)
            broker_adopt_live(b);
    }
    int64_t step = broker_db_last_complete(b->db, dir, sizeof dir);
    for (int i = 0; i < n_start; i++)
        if (broker_start_device(b, start[i], step > 0 ? dir : ""))
            return -1;
    if (n_start > 0)
        broker_say(b, "resumed", NULL, "%d device%s of epoch %lld the old broker had not started: started now%s%s",
                   n_start, n_start == 1 ? "" : "s", (long long)b->epoch, step > 0 ? ", from " : "",
                   step > 0 ? dir : "");
    return 0;
}
