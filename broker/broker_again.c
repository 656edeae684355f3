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
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/atomic_file.h"
#include "../runtime/safetensors.h"
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

static void adopt_parts(broker *b);

int resume_run(broker *b, const char *state)
{
    char text[4200], dir[4096];
    if (broker_db_get(b->db, "epoch", text, sizeof text))
        return -1;
    b->epoch = atoll(text);
    if (broker_db_get(b->db, "bundles", b->bundles, sizeof b->bundles))
        snprintf(b->bundles, sizeof b->bundles, "%s", b->out);
    b->n = 0;   /* the last epoch's plan, every device of it started again */
    if (read_plan(b, b->bundles))
        return -1;
    b->last_complete = broker_db_last_complete(b->db, dir, sizeof dir);
    if (!b->remote)   /* no device runs: steps whose parts are all there are completed, the rest is litter */
        adopt_parts(b);
    char folder[4200], why[600];
    snprintf(folder, sizeof folder, "%s/checkpoints", b->out);
    int removed = b->remote ? 0 : ckpt_remove_litter(folder, why, sizeof why);
    if (removed > 0)
        say(b, "checkpoint", NULL, "removed %d unfinished save%s' files from %s (no MANIFEST)", removed,
            removed == 1 ? "" : "s", folder);
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

/* The part file name device's program writes (checkpoint.h's rule, as the
 * broker sees a plan: one device alone writes checkpoint.safetensors). */
static void part_name(const broker *b, const char *device, char *name, size_t n)
{
    int devices = 0;
    for (int i = 0; i < b->n; i++)
        devices += strcmp(b->mem[i].m.role, "device") == 0;
    ckpt_part_name(device, devices > 1, name, n);
}

int wrote_last_part(broker *b, const member *m)
{
    char name[CKPT_PART_MAX], path[4600];
    part_name(b, m->m.bundle_device, name, sizeof name);
    snprintf(path, sizeof path, "%s/checkpoints/step-%lld/%s", b->out, (long long)b->steps, name);
    return access(path, F_OK) == 0;
}

/* Steps whose parts were all written while no broker heard of them: each
 * part's final name means it is whole (written aside and renamed), so the
 * step is made complete from the files (measured here).  Local runs only:
 * over ssh, a part is on its host until its report fetches it. */
static void adopt_parts(broker *b)
{
    char dir[4200], err[600];
    snprintf(dir, sizeof dir, "%s/checkpoints", b->out);
    int64_t *steps = NULL;
    int count = ckpt_list_steps(dir, 0, &steps, err, sizeof err);
    for (int k = count - 1; k >= 0; k--) {   /* oldest first: the newest complete ends last */
        char step_dir[4400], manifest[4500], lines[65536] = "";
        ckpt_step_dir(dir, steps[k], step_dir, sizeof step_dir);
        snprintf(manifest, sizeof manifest, "%s/" CKPT_MANIFEST, step_dir);
        if (steps[k] <= b->last_complete || access(manifest, F_OK) == 0)
            continue;
        size_t at = 0;
        int whole = 1, parts = 0;
        for (int i = 0; i < b->n && whole; i++) {
            if (strcmp(b->mem[i].m.role, "device") != 0)
                continue;
            char name[CKPT_PART_MAX], path[4700];
            int64_t size;
            uint64_t hash;
            part_name(b, b->mem[i].m.bundle_device, name, sizeof name);
            snprintf(path, sizeof path, "%s/%s", step_dir, name);
            whole = ckpt_measure(path, &size, &hash, err, sizeof err) == 0 && at < sizeof lines;
            if (whole) {
                char hex[17];
                snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash);
                at += (size_t)snprintf(lines + at, sizeof lines - at, "part %s %s\n", name, hex);
                broker_db_part(b->db, steps[k], b->mem[i].m.bundle_device, b->epoch, path, hex);
                parts++;
            }
        }
        if (!whole || parts == 0 || write_manifest(step_dir, steps[k], lines, err, sizeof err) != 0)
            continue;
        broker_db_complete(b->db, steps[k], b->epoch, step_dir);
        b->last_complete = steps[k];
        say(b, "checkpoint", NULL, "checkpoint of step %lld complete (%d parts written while no broker ran): %s",
            (long long)steps[k], parts, step_dir);
    }
    free(steps);
}

/* The survivors' live state (broker_plan.c's use_live_state), when the
 * broker that heard their reports is gone: the newest OUT/checkpoints/live-N
 * past the last complete checkpoint whose parts (their fusion.plan says
 * which stage each holds) cover every stage is made a checkpoint. */
static void adopt_live(broker *b)
{
    char dir[4000], err[600];
    snprintf(dir, sizeof dir, "%s/checkpoints", b->out);
    DIR *d = opendir(dir);
    int64_t best = 0;
    char best_dir[4400] = "", best_lines[65536] = "";
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        uint64_t step;
        if (strncmp(e->d_name, "live-", 5) != 0 || ckpt_parse_count(e->d_name + 5, CKPT_MAX_STEP, &step) != 0 ||
            (int64_t)step <= b->last_complete || (int64_t)step <= best)
            continue;
        char live[4300], lines[65536] = "";   /* dir (4200) and a name (256) */
        snprintf(live, sizeof live, "%s/%s", dir, e->d_name);
        DIR *p = opendir(live);
        uint64_t covered = 0;
        int stages = 0;
        size_t at = 0;
        for (struct dirent *f; p && (f = readdir(p)) != NULL;) {
            char path[4700];
            int s = 0, S = 0, r, R;
            int64_t size;
            uint64_t hash;
            snprintf(path, sizeof path, "%s/%s", live, f->d_name);
            if (strncmp(f->d_name, "checkpoint", 10) != 0 || is_temporary_name(f->d_name))
                continue;
            st_file *part = st_open(path, err, sizeof err);
            const char *plan = part ? st_metadata(part, "fusion.plan") : NULL;
            if (plan && sscanf(plan, "stage %d of %d, replica %d of %d", &s, &S, &r, &R) == 4 && s >= 0 && s < S &&
                S <= 64 && ckpt_measure(path, &size, &hash, err, sizeof err) == 0 && at < sizeof lines) {
                covered |= 1ull << s;
                stages = S;
                at += (size_t)snprintf(lines + at, sizeof lines - at, "part %s %016llx\n", f->d_name,
                                       (unsigned long long)hash);
            }
            st_close(part);
        }
        if (p)
            closedir(p);
        if (stages > 0 && at < sizeof lines && covered == (stages == 64 ? ~0ull : (1ull << stages) - 1)) {
            best = (int64_t)step;
            snprintf(best_dir, sizeof best_dir, "%s", live);
            memcpy(best_lines, lines, sizeof lines);
        }
    }
    if (d)
        closedir(d);
    if (best == 0 || write_manifest(best_dir, best, best_lines, err, sizeof err) != 0)
        return;
    broker_db_complete(b->db, best, b->epoch, best_dir);
    b->last_complete = best;
    say(b, "checkpoint", NULL, "the survivors' state of step %lld, saved while no broker ran, covers every stage: a "
        "checkpoint with no finished step lost (%s)", (long long)best, best_dir);
}

/* Waits (at most twice the peer timeout, and 5 s) until the devices of the
 * epoch before are gone: the survivors of a loss save their live state as
 * they stop, and that is what the next epoch should resume from. */
static void wait_for_last_epoch(broker *b)
{
    broker_member prev[MAX_MEMBERS];
    int n = b->epoch > 1 ? broker_db_members(b->db, b->epoch - 1, prev, MAX_MEMBERS) : 0;
    for (double until = now_s() + 2 * b->peer_timeout + 5; n > 0 && now_s() < until; usleep(100 * 1000)) {
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
int take_over(broker *b)
{
    char text[4200];
    if (broker_db_get(b->db, "epoch", text, sizeof text))
        return -1;
    b->epoch = atoll(text);
    char dir[4096];
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
        m->heard = now_s();
        m->ended = strcmp(m->m.status, "done") == 0 || strcmp(m->m.status, "used") == 0;
    }
    int taken = b->n;
    char line[512], name[128], path[4600];
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
        if (!m && b->n < MAX_MEMBERS) {   /* no row: the old broker never got to it */
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
    say(b, "restarted", NULL, "the broker started again: epoch %lld, %d members, taken over as they run", (long long)b->epoch,
        taken);
    if (n_start > 0)
        wait_for_last_epoch(b);
    if (!b->remote) {
        adopt_parts(b);
        if (n_start > 0)
            adopt_live(b);
    }
    int64_t step = broker_db_last_complete(b->db, dir, sizeof dir);
    for (int i = 0; i < n_start; i++)
        if (start_device(b, start[i], step > 0 ? dir : ""))
            return -1;
    if (n_start > 0)
        say(b, "resumed", NULL, "%d device%s of epoch %lld the old broker had not started: started now%s%s", n_start,
            n_start == 1 ? "" : "s", (long long)b->epoch, step > 0 ? ", from " : "", step > 0 ? dir : "");
    return 0;
}
