/* broker_checkpoint.c: checkpoints the broker makes whole
 * (broker_checkpoint.h). */
#define _GNU_SOURCE
#include "broker_checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../runtime/atomic_file.h"
#include "../runtime/checkpoint_store.h"
#include "../runtime/safetensors.h"

/* A step folder's MANIFEST (checkpoint_store.h) from the parts' report
 * lines ("part <file> <xxh3>", broker_db_parts_text), each part's size
 * read from the file here (parts on hosts were fetched and checked first).
 * 0, or -1 with err set. */
int broker_write_manifest(const char *dir, int64_t step, const char *lines, char *err, size_t n)
{
    ckpt_manifest m = { .step = step };
    int cap = 0, rc = 0;
    for (const char *at = lines; rc == 0 && at && *at; at = strchr(at, '\n') ? strchr(at, '\n') + 1 : NULL) {
        char name[CKPT_PART_MAX], hash[32], path[FU_PATH_BYTES + 504];
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
void broker_check_complete(broker *b, int64_t step)
{
    char dir[FU_PATH_BYTES + 204], done[FU_PATH_BYTES + 304], text[65536];
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
    if (broker_write_manifest(dir, step, text, why, sizeof why)) {
        broker_say(b, "checkpoint", NULL, "cannot complete %s: %s", done, why);
        return;
    }
    broker_db_complete(b->db, step, b->epoch, dir);
    broker_say(b, "checkpoint", NULL, "checkpoint of step %lld complete (%d parts): %s", (long long)step, n, dir);
    if (step < b->last_complete)
        return; /* a later one is whole already: the joiners were weighed at it */
    b->last_complete = step;
    char folder[FU_PATH_BYTES + 204];
    snprintf(folder, sizeof folder, "%s/checkpoints", b->out);
    if (ckpt_prune(folder, b->keep, why, sizeof why) < 0) /* the newest complete always stays */
        broker_say(b, "checkpoint", NULL, "cannot remove the checkpoints beyond the %d newest: %s", b->keep, why);
    b->weigh_step = step; /* a standby that joined is weighed at it (broker.c's run loop) */
}

/* A survivor's live part (broker_state.h: live[]). */
void broker_add_live(broker *b, int64_t step, int stage, int n_stages, const char *file, const char *xxh3)
{
    if (b->n_live == MAX_MEMBERS)
        return;
    b->live[b->n_live].step = step, b->live[b->n_live].stage = stage;
    b->live[b->n_live].n_stages = n_stages;
    snprintf(b->live[b->n_live].file, sizeof b->live[0].file, "%s", file);
    snprintf(b->live[b->n_live++].xxh3, sizeof b->live[0].xxh3, "%s", xxh3);
}

/* The survivors' live parts: the latest step past the last complete
 * checkpoint whose parts cover every stage becomes a checkpoint (a MANIFEST
 * beside them): no finished step is lost. */
void broker_use_live_state(broker *b)
{
    int64_t best = 0;
    for (int i = 0; i < b->n_live; i++) {
        int64_t step = b->live[i].step;
        if (step <= b->last_complete || step <= best)
            continue;
        uint64_t covered = 0;
        int n_stages = b->live[i].n_stages;
        for (int j = 0; j < b->n_live; j++)
            if (b->live[j].step == step && b->live[j].stage >= 0 && b->live[j].stage < 64)
                covered |= 1ull << b->live[j].stage;
        if (n_stages > 0 && n_stages <= 64 && covered == (n_stages == 64 ? ~0ull : (1ull << n_stages) - 1))
            best = step;
    }
    if (best == 0)
        return;
    char dir[FU_PATH_BYTES] = "", lines[65536] = "", why[1200] = "too many parts to list";
    size_t at = 0;
    for (int i = 0; i < b->n_live; i++) {
        if (b->live[i].step != best)
            continue;
        if (!dir[0]) {
            snprintf(dir, sizeof dir, "%s", b->live[i].file);
            if (strrchr(dir, '/'))
                *strrchr(dir, '/') = '\0';
        }
        const char *base = strrchr(b->live[i].file, '/') ? strrchr(b->live[i].file, '/') + 1 : b->live[i].file;
        if (at < sizeof lines)
            at += (size_t)snprintf(lines + at, sizeof lines - at, "part %s %s\n", base, b->live[i].xxh3);
    }
    if (at >= sizeof lines || broker_write_manifest(dir, best, lines, why, sizeof why)) {
        broker_say(b, "checkpoint", NULL, "cannot complete the survivors' state of step %lld: %s", (long long)best,
                   why);
        return;
    }
    broker_db_complete(b->db, best, b->epoch, dir);
    b->last_complete = best;
    broker_say(b, "checkpoint", NULL,
               "the survivors' state of step %lld covers every stage: a checkpoint with no finished "
               "step lost (%s)",
               (long long)best, dir);
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

int broker_wrote_last_part(broker *b, const member *m)
{
    char name[CKPT_PART_MAX], path[FU_PATH_BYTES + 504];
    part_name(b, m->m.bundle_device, name, sizeof name);
    snprintf(path, sizeof path, "%s/checkpoints/step-%lld/%s", b->out, (long long)b->steps, name);
    return access(path, F_OK) == 0;
}

/* Steps whose parts were all written while no broker heard of them: each
 * part's final name means it is whole (written aside and renamed), so the
 * step is made complete from the files (measured here).  Local runs only:
 * over ssh, a part is on its host until its report fetches it. */
void broker_adopt_parts(broker *b)
{
    char dir[FU_PATH_BYTES + 104], err[600];
    snprintf(dir, sizeof dir, "%s/checkpoints", b->out);
    int64_t *steps = NULL;
    int count = ckpt_list_steps(dir, 0, &steps, err, sizeof err);
    for (int k = count - 1; k >= 0; k--) { /* oldest first: the newest complete ends last */
        char step_dir[FU_PATH_BYTES + 304], manifest[FU_PATH_BYTES + 404], lines[65536] = "";
        ckpt_step_dir(dir, steps[k], step_dir, sizeof step_dir);
        snprintf(manifest, sizeof manifest, "%s/" CKPT_MANIFEST, step_dir);
        if (steps[k] <= b->last_complete || access(manifest, F_OK) == 0)
            continue;
        size_t at = 0;
        int whole = 1, parts = 0;
        for (int i = 0; i < b->n && whole; i++) {
            if (strcmp(b->mem[i].m.role, "device") != 0)
                continue;
            char name[CKPT_PART_MAX], path[FU_PATH_BYTES + 604];
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
        if (!whole || parts == 0 || broker_write_manifest(step_dir, steps[k], lines, err, sizeof err) != 0)
            continue;
        broker_db_complete(b->db, steps[k], b->epoch, step_dir);
        b->last_complete = steps[k];
        broker_say(b, "checkpoint", NULL, "checkpoint of step %lld complete (%d parts written while no broker ran): %s",
                   (long long)steps[k], parts, step_dir);
    }
    free(steps);
}

/* The survivors' live state (broker_use_live_state), when the
 * broker that heard their reports is gone: the newest OUT/checkpoints/live-N
 * past the last complete checkpoint whose parts (their fusion.plan says
 * which stage each holds) cover every stage is made a checkpoint. */
void broker_adopt_live(broker *b)
{
    char dir[4000], err[600];
    snprintf(dir, sizeof dir, "%s/checkpoints", b->out);
    DIR *d = opendir(dir);
    int64_t best = 0;
    char best_dir[FU_PATH_BYTES + 304] = "", best_lines[65536] = "";
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        uint64_t step;
        if (strncmp(e->d_name, "live-", 5) != 0 || ckpt_parse_count(e->d_name + 5, CKPT_MAX_STEP, &step) != 0 ||
            (int64_t)step <= b->last_complete || (int64_t)step <= best)
            continue;
        char live[FU_PATH_BYTES + 204], lines[65536] = ""; /* dir (4200) and a name (256) */
        snprintf(live, sizeof live, "%s/%s", dir, e->d_name);
        DIR *p = opendir(live);
        uint64_t covered = 0;
        int stages = 0;
        size_t at = 0;
        for (struct dirent *f; p && (f = readdir(p)) != NULL;) {
            char path[FU_PATH_BYTES + 604];
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
    if (best == 0 || broker_write_manifest(best_dir, best, best_lines, err, sizeof err) != 0)
        return;
    broker_db_complete(b->db, best, b->epoch, best_dir);
    b->last_complete = best;
    broker_say(b, "checkpoint", NULL,
               "the survivors' state of step %lld, saved while no broker ran, covers every stage: a "
               "checkpoint with no finished step lost (%s)",
               (long long)best, best_dir);
}

int broker_part_here(broker *b, const member *m, const char *file, char *here, size_t n)
{
    /* OUT/checkpoints/<its folder>/<its name>: step-N/checkpoint-D.safetensors */
    char folder[FU_PATH_BYTES], dir[FU_PATH_BYTES + 304];
    snprintf(folder, sizeof folder, "%s", file);
    char *name = strrchr(folder, '/');
    if (!name || name == folder || !name[1]) {
        broker_say(b, "checkpoint", m->m.device, "%s reported a part with no folder: %s", m->m.device, file);
        return -1;
    }
    *name++ = '\0';
    const char *parent = strrchr(folder, '/') ? strrchr(folder, '/') + 1 : folder;
    if (strcmp(parent, "..") == 0 || strcmp(parent, ".") == 0) {
        broker_say(b, "checkpoint", m->m.device, "%s reported a part outside a checkpoint folder: %s", m->m.device,
                   file);
        return -1;
    }
    snprintf(dir, sizeof dir, "%s/checkpoints", b->out);
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/checkpoints/%s", b->out, parent);
    mkdir(dir, 0755);
    snprintf(here, n, "%s/%.190s", dir, name);
    return 0;
}

int broker_take_part(broker *b, const char *tmp, const char *file, const char *device, int64_t step, const char *xxh3,
                     int live, int stage, int n_stages)
{
    uint64_t have = 0;
    int64_t size = 0;
    char hex[32] = "", why[600];
    if (ckpt_measure(tmp, &size, &have, why, sizeof why) != 0 || (snprintf(hex, sizeof hex, "%016" PRIx64, have), 0) ||
        strcmp(hex, xxh3) != 0) {
        broker_say(b, "checkpoint", device,
                   "%s's part of step %lld arrived with XXH3 %s, not the %s its device reported: refused", device,
                   (long long)step, hex[0] ? hex : "(unreadable)", xxh3);
    } else if (rename(tmp, file) != 0) {
        broker_say(b, "checkpoint", device, "%s: %s", file, strerror(errno));
    } else if (live) {
        broker_add_live(b, step, stage, n_stages, file, xxh3);
        return 0;
    } else {
        broker_db_part(b->db, step, device, b->epoch, file, xxh3);
        broker_check_complete(b, step);
        return 0;
    }
    unlink(tmp);
    return -1;
}
