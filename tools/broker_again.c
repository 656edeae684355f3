/* broker_again.c: `fusionc broker` started on an OUT that already holds a
 * run which is not running (broker.h): it finished, failed or was stopped.
 *
 * Such a run is never wiped.  Without --fresh it is resumed: a new epoch of
 * the last epoch's devices, every one from the newest complete checkpoint,
 * up to the --steps given (which must be above that checkpoint's step).
 * With --fresh the old run is first archived: OUT/broker.db and
 * OUT/checkpoints move to OUT/archive/run-<N>/, so that a new run starts
 * clean and nothing of the old one is overwritten.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "broker_internal.h"

int broker_archive_run(const char *out, char *archived, size_t size, char *err, size_t n)
{
    char dir[4200], from[4200], to[4400];
    snprintf(dir, sizeof dir, "%s/archive", out);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, n, "%s: cannot create it: %s", dir, strerror(errno));
        return -1;
    }
    int k = 1;
    for (; k < 100000; k++) {   /* the first free run-<k> */
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

int resume_run(broker *b, const char *state)
{
    char text[4200], dir[4096];
    if (broker_db_get(b->db, "epoch", text, sizeof text))
        return -1;
    b->epoch = atoll(text);
    if (broker_db_get(b->db, "bundles", b->bundles, sizeof b->bundles))
        snprintf(b->bundles, sizeof b->bundles, "%s", b->out);
    b->n = 0;   /* the last epoch's plan, every device of it started again */
    int64_t step = broker_db_last_complete(b->db, dir, sizeof dir);
    if (step <= 0) {
        say(b, "failed", NULL, "%s holds a run (%s) with no complete checkpoint to resume from: give --fresh to start "
            "another (the old one is archived in %s/archive)", b->out, state, b->out);
        return -1;
    }
    if (step >= b->steps) {
        say(b, "failed", NULL, "%s holds a run (%s) whose newest complete checkpoint is step %lld: --steps %lld would "
            "train nothing (give more steps, or --fresh to start another)", b->out, state, (long long)step,
            (long long)b->steps);
        return -1;
    }
    b->epoch++;
    snprintf(text, sizeof text, "%lld", (long long)b->epoch);
    broker_db_set(b->db, "epoch", text);
    broker_db_set(b->db, "state", "running");
    if (read_plan(b, b->bundles))
        return -1;
    if (b->standby_agents)
        add_standbys(b);
    if (b->remote && broker_remote_prepare(b, dir))
        return -1;
    int devices = 0;
    for (int i = 0; i < b->n; i++) {
        member *m = &b->mem[i];
        int rc = strcmp(m->m.role, "standby") == 0 ? start_standby(b, m) : (devices++, start_device(b, m, dir));
        if (rc)
            return -1;
    }
    b->last_complete = step;
    say(b, "resumed", NULL, "the run in %s (%s) goes on: %d devices from its newest complete checkpoint, step %lld "
        "(%s), up to step %lld", b->out, state, devices, (long long)step, dir, (long long)b->steps);
    return 0;
}
