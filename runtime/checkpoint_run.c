/* checkpoint_run.c: a run's checkpoints, made and chosen by its devices
 * together (checkpoint_run.h). */
#define _GNU_SOURCE
#include "checkpoint_run.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint_store.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */
#include "rt_error.h"

enum { TAG_START = -100, TAG_SAVE = -101 }; /* rt_comm_allgather's tags: no op's tensor id is negative */

/* A device's report of its part of a step. */
typedef struct {
    int64_t step;
    int64_t size;
    uint64_t xxh3;
} part_report;

/* Every device's record (rec_bytes each) into all[n_peers], present[d]
 * where device d took part; without links, this device's alone. */
static int exchange(const program *p, rt_comm *comm, int64_t step, int32_t tag, const void *mine, size_t rec_bytes,
                    void *all, uint8_t *present, char *err, size_t n)
{
    if (comm)
        return rt_comm_allgather(comm, step, tag, mine, rec_bytes, all, present, err, n);
    int32_t self = p->manifest.device_index;
    memset(present, 0, (size_t)p->manifest.n_peers);
    present[self] = 1;
    memcpy((char *)all + (size_t)self * rec_bytes, mine, rec_bytes);
    return 0;
}

/* dir and the folders above it that are missing, as mkdir -p (fusionc
 * launch names a folder under its host's PATH/checkpoints/). */
static int make_dir(const char *dir, char *err, size_t n)
{
    char path[FU_PATH_BYTES];
    snprintf(path, sizeof path, "%s", dir);
    for (char *slash = strchr(path + 1, '/');; slash = strchr(slash + 1, '/')) {
        if (slash)
            *slash = '\0';
        if (path[0] && mkdir(path, 0755) != 0 && errno != EEXIST)
            return rt_error(err, n, "%s: cannot create the checkpoint folder: %s", path, strerror(errno));
        if (!slash)
            return 0;
        *slash = '/';
    }
}

static int same_folder(const char *a, const char *b)
{
    struct stat x, y;
    return a && b && stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* Why dir holds no complete checkpoint, into err. */
static void why_none(const char *dir, char *err, size_t n)
{
    int64_t *all;
    char e2[600];
    int count = ckpt_list_steps(dir, 0, &all, e2, sizeof e2);
    if (count < 0) {
        snprintf(err, n, "%s", e2);
        return;
    }
    if (count > 0) {
        snprintf(err, n, "%s: no complete checkpoint: step-%lld%s has no " CKPT_MANIFEST " (its save did not finish)",
                 dir, (long long)all[0], count > 1 ? " and the other step folders" : "");
        free(all);
        return;
    }
    free(all);
    DIR *d = opendir(dir);
    int loose = 0;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;)
        loose += strncmp(e->d_name, "checkpoint", 10) == 0 && strstr(e->d_name, ".safetensors") != NULL;
    if (d)
        closedir(d);
    if (loose)
        snprintf(err, n,
                 "%s: no complete checkpoint: %d checkpoint file%s but no step-N/" CKPT_MANIFEST " (an older "
                 "fusion's layout, or files copied by hand): nothing to verify them against",
                 dir, loose, loose == 1 ? "" : "s");
    else
        snprintf(err, n, "%s: no complete checkpoint (no step-N folder with a " CKPT_MANIFEST ")", dir);
}

/* The steps to try, newest first: dir's complete ones, or dir itself when
 * it is a step folder (*single := 1).  The count (0: none, err says why),
 * or -1. */
static int candidates(const char *dir, int64_t **steps, int *single, char *err, size_t n)
{
    char manifest[FU_PATH_BYTES + 304];
    snprintf(manifest, sizeof manifest, "%s/" CKPT_MANIFEST, dir);
    *single = access(manifest, F_OK) == 0;
    if (*single) {
        ckpt_manifest m;
        if (ckpt_manifest_read(dir, &m, err, n) != 0)
            return -1;
        *steps = malloc(sizeof **steps);
        if (!*steps) {
            ckpt_manifest_free(&m);
            snprintf(err, n, "out of memory");
            return -1;
        }
        (*steps)[0] = m.step;
        ckpt_manifest_free(&m);
        return 1;
    }
    int count = ckpt_list_steps(dir, 1, steps, err, n);
    if (count == 0)
        why_none(dir, err, n);
    return count;
}

static void step_folder(const char *dir, int single, int64_t step, char *out, size_t n)
{
    if (single)
        snprintf(out, n, "%s", dir);
    else
        ckpt_step_dir(dir, step, out, n);
}

/* The newest of steps[0..count) that loads on this device; 0 when none
 * does (each refusal said). */
static int64_t newest_loading(program *p, const char *dir, int single, const int64_t *steps, int count,
                              checkpoint_state *state, char *err, size_t n)
{
    for (int i = 0; i < count; i++) {
        char folder[FU_PATH_BYTES + 304], why[1200];
        step_folder(dir, single, steps[i], folder, sizeof folder);
        checkpoint_state s = *state;
        memset(&s.feedback, 0, sizeof s.feedback);
        s.frozen = NULL;
        if (load_checkpoint_step(p, folder, &s, why, sizeof why) == 0) {
            rt_feedback_arrays_free(&state->feedback);
            free(state->frozen);
            *state = s;
            return steps[i];
        }
        rt_feedback_arrays_free(&s.feedback);
        free(s.frozen);
        if (i + 1 < count)
            printf("fusion: %s does not verify: %s; trying step-%lld\n", folder, why, (long long)steps[i + 1]);
        else
            snprintf(err, n, "%s does not verify: %s%s", folder, why,
                     count > 1 ? " (and no older complete step did)" : "");
        fflush(stdout);
    }
    return 0;
}

/* --resume: see checkpoint_run.h. */
static int resume(program *p, rt_comm *comm, const char *dir, checkpoint_state *state, char *err, size_t n)
{
    int64_t *steps = NULL;
    int single = 0, count = candidates(dir, &steps, &single, err, n);
    if (count <= 0) {
        free(steps);
        return -1;
    }
    int64_t mine = newest_loading(p, dir, single, steps, count, state, err, n);
    if (mine == 0) {
        free(steps);
        return -1;
    }
    int32_t N = p->manifest.n_peers;
    int64_t *all = calloc((size_t)N + 1, sizeof *all);
    uint8_t *present = calloc((size_t)N + 1, 1);
    int rc = all && present ? 0 : (snprintf(err, n, "out of memory"), -1);
    if (rc == 0)
        rc = exchange(p, comm, 0, TAG_START, &mine, sizeof mine, all, present, err, n);
    int64_t agreed = mine;
    int32_t by = p->manifest.device_index;
    for (int32_t d = 0; d < N && rc == 0; d++)
        if (present[d] && all[d] < agreed)
            agreed = all[d], by = d;
    char folder[FU_PATH_BYTES + 304];
    step_folder(dir, single, agreed, folder, sizeof folder);
    if (rc == 0 && agreed != mine) {
        int held = 0;
        for (int i = 0; i < count; i++)
            held |= steps[i] == agreed;
        char why[1200];
        checkpoint_state s = *state;
        memset(&s.feedback, 0, sizeof s.feedback);
        s.frozen = NULL;
        if (!held) {
            snprintf(err, n, "%s's newest checkpoint that verifies is step %lld, which %s does not hold complete",
                     p->peers[by].name, (long long)agreed, dir);
            rc = -1;
        } else if (load_checkpoint_step(p, folder, &s, why, sizeof why) != 0) {
            snprintf(err, n, "%s's newest checkpoint that verifies is step %lld, and here %s does not verify: %s",
                     p->peers[by].name, (long long)agreed, folder, why);
            rt_feedback_arrays_free(&s.feedback);
            free(s.frozen);
            rc = -1;
        } else {
            rt_feedback_arrays_free(&state->feedback);
            free(state->frozen);
            *state = s;
            printf("fusion: step %lld verifies here, but %s's newest that verifies is step %lld: the run resumes "
                   "from that\n",
                   (long long)mine, p->peers[by].name, (long long)agreed);
        }
    }
    if (rc == 0)
        printf("fusion: resumed from %s (step %lld)\n", folder, (long long)agreed);
    fflush(stdout);
    free(all);
    free(present);
    free(steps);
    return rc;
}

int checkpoint_start(program *p, rt_comm *comm, const checkpoint_options *o, checkpoint_state *state, int *resumed,
                     char *err, size_t n)
{
    *resumed = 0;
    if (o->save_dir && !o->brokered) {
        int64_t *steps = NULL;
        int removed, count;
        if (make_dir(o->save_dir, err, n) != 0 || (removed = ckpt_remove_litter(o->save_dir, err, n)) < 0)
            return -1;
        if (removed > 0)
            printf("fusion: %s: removed %d unfinished save%s' files (no " CKPT_MANIFEST ")\n", o->save_dir, removed,
                   removed == 1 ? "" : "s");
        if ((count = ckpt_list_steps(o->save_dir, 1, &steps, err, n)) < 0)
            return -1;
        int64_t newest = count > 0 ? steps[0] : 0;
        free(steps);
        char parent[FU_PATH_BYTES + 104] = ""; /* --resume DIR/step-N --save DIR goes on with DIR's run too */
        if (o->resume_dir) {
            snprintf(parent, sizeof parent, "%s/..", o->resume_dir);
        }
        if (count > 0 && !same_folder(o->save_dir, o->resume_dir) && !same_folder(o->save_dir, parent)) {
            snprintf(err, n,
                     "%s holds the checkpoints of a run (newest: step-%lld): give --resume %s to go on with "
                     "it, or save elsewhere (nothing of it is overwritten)",
                     o->save_dir, (long long)newest, o->save_dir);
            return -1;
        }
    }
    if (o->resume_dir) {
        if (resume(p, comm, o->resume_dir, state, err, n) != 0)
            return -1;
        *resumed = 1;
        return 0;
    }
    if (o->save_dir && comm) { /* no device saves before every device has cleaned */
        int64_t none = 0, *all = calloc((size_t)p->manifest.n_peers + 1, sizeof *all);
        uint8_t *present = calloc((size_t)p->manifest.n_peers + 1, 1);
        int rc = all && present ? exchange(p, comm, 0, TAG_START, &none, sizeof none, all, present, err, n)
                                : (snprintf(err, n, "out of memory"), -1);
        free(all);
        free(present);
        return rc;
    }
    return 0;
}

/* The MANIFEST of `step` from every device's report, then latest and the
 * pruning. */
static int complete_step(const program *p, const checkpoint_options *o, const char *step_dir, int64_t step,
                         const part_report *all, const uint8_t *present, int several, int64_t *total, char *err,
                         size_t n)
{
    int32_t N = p->manifest.n_peers;
    ckpt_manifest m = { .step = step, .n_parts = 0, .parts = calloc((size_t)N + 1, sizeof(ckpt_part)) };
    if (!m.parts) {
        return rt_error(err, n, "out of memory");
    }
    *total = 0;
    for (int32_t d = 0; d < N; d++) {
        if (!present[d])
            continue;
        if (all[d].step != step) {
            snprintf(err, n,
                     "%s saved step %lld while this device saved step %lld: the devices disagree on the "
                     "steps",
                     p->peers[d].name, (long long)all[d].step, (long long)step);
            ckpt_manifest_free(&m);
            return -1;
        }
        ckpt_part *part = &m.parts[m.n_parts++];
        ckpt_part_name(p->peers[d].name, several, part->name, sizeof part->name);
        part->size = all[d].size;
        part->xxh3 = all[d].xxh3;
        *total += all[d].size;
    }
    int rc = ckpt_manifest_write(step_dir, &m, err, n) != 0 || ckpt_set_latest(o->save_dir, step, err, n) != 0 ||
                     ckpt_prune(o->save_dir, o->keep, err, n) < 0
                 ? -1
                 : 0;
    ckpt_manifest_free(&m);
    return rc;
}

int checkpoint_save(program *p, rt_comm *comm, const checkpoint_options *o, int64_t step, uint64_t seed,
                    const rt_loss_scaler *ls, const rt_feedback_arrays *feedback, char *part_path, size_t path_size,
                    int64_t *size, uint64_t *xxh3, char *err, size_t n)
{
    double t0 = rt_seconds_now();
    char step_dir[FU_PATH_BYTES + 304], name[CKPT_PART_MAX];
    ckpt_step_dir(o->save_dir, step, step_dir, sizeof step_dir);
    checkpoint_part_name(p, name, sizeof name);
    snprintf(part_path, path_size, "%s/%s", step_dir, name);
    if (make_dir(o->save_dir, err, n) != 0)
        return -1;
    if (save_checkpoint(p, step_dir, step, seed, ls, o->save_dtype, feedback) != 0) {
        return rt_error(err, n, "cannot write its part of step %lld (%s: above)", (long long)step, part_path);
    }
    if (ckpt_measure(part_path, size, xxh3, err, n) != 0)
        return -1;
    if (o->brokered)
        return 0;
    int32_t N = p->manifest.n_peers;
    part_report mine = { step, *size, *xxh3 }, *all = calloc((size_t)N + 1, sizeof *all);
    uint8_t *present = calloc((size_t)N + 1, 1);
    int64_t total = 0;
    int rc = all && present ? 0 : (snprintf(err, n, "out of memory"), -1);
    if (rc == 0)
        rc = exchange(p, comm, step, TAG_SAVE, &mine, sizeof mine, all, present, err, n);
    int parts = 0;
    for (int32_t d = 0; d < N && rc == 0; d++)
        parts += present[d];
    if (rc == 0)
        rc = complete_step(p, o, step_dir, step, all, present, checkpoint_several(p), &total, err, n);
    /* The line goes where the run's progress is read: the loss's device (replica 0). */
    int reporter = p->manifest.loss >= 0 ? p->manifest.replica == 0 : (!comm || rt_comm_tree_root(comm));
    if (rc == 0 && reporter) {
        printf("fusion: checkpoint of step %lld: %s, %d part%s, %.1f MB, %.2f s\n", (long long)step, step_dir, parts,
               parts == 1 ? "" : "s", (double)total / 1e6, rt_seconds_now() - t0);
        fflush(stdout);
    }
    free(all);
    free(present);
    return rc;
}
