/* checkpoint.c: a device program's tensors to and from safetensors files:
 * checkpoints (--save, --resume), weights (--init), inputs (--inputs) and
 * gradients (--dump-grads) (checkpoint.h). */
#define _GNU_SOURCE
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "../ir/ir.h"
#include "safetensors.h"

#define CHECKPOINT_FILE "checkpoint.safetensors"

/* One device: DIR/checkpoint.safetensors; several: one file each. */
void checkpoint_path(const program *p, const char *dir, char *path, size_t size)
{
    if (p->manifest.n_stages * p->manifest.n_replicas > 1)
        snprintf(path, size, "%s/checkpoint-%s.safetensors", dir, p->manifest.device);
    else
        snprintf(path, size, "%s/" CHECKPOINT_FILE, dir);
}

static int is_loss(const program *p, const rt_tensor_info *ti)
{
    return p->manifest.loss >= 0 && ti == &p->tensors[p->manifest.loss];
}

static st_tensor as_st(const program *p, const rt_tensor_info *ti)
{
    st_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", ti->name);
    t.dtype = ti->dtype == DT_I32 ? ST_I32 : ST_F32;
    t.rank = ti->t.rank;
    for (int i = 0; i < ti->t.rank; i++)
        t.dim[i] = ti->t.dim[i];
    t.data = p->arena + ti->t.offset;
    return t;
}

/* Every tensor of the given roles (bits of 1 << ir_role; the loss with
 * LOSS_ROLE) to path;
 * the parameters in param_dtype (ST_F32: as they are; ST_BF16, ST_F16:
 * rounded, for a file half the size), everything else as it is. */
static int write_tensors_and(const program *p, const char *path, unsigned roles, const char *const *metadata,
                             st_dtype param_dtype, const rt_feedback_arrays *feedback)
{
    int n_extra = feedback ? feedback->n : 0;
    st_tensor *list = calloc((size_t)p->manifest.n_tensors + n_extra + 1, sizeof *list);
    st_dtype  *as = calloc((size_t)p->manifest.n_tensors + n_extra + 1, sizeof *as);
    int n = 0;
    if (!list || !as) {
        free(list);
        free(as);
        return fail("out of memory writing %s", path);
    }
    for (int32_t i = 0; i < p->manifest.n_tensors; i++)
        if (((roles >> p->tensors[i].role) & 1) || ((roles & LOSS_ROLE) && is_loss(p, &p->tensors[i]))) {
            list[n] = as_st(p, &p->tensors[i]);
            as[n] = p->tensors[i].role == ROLE_PARAM ? param_dtype : list[n].dtype;
            n++;
        }
    for (int i = 0; i < n_extra; i++, n++) {   /* the feedback as it is, f32 */
        snprintf(list[n].name, sizeof list[n].name, "%s", feedback->a[i].name);
        list[n].dtype = as[n] = ST_F32;
        list[n].rank = 1;
        list[n].dim[0] = feedback->a[i].n;
        list[n].data = feedback->a[i].data;
    }
    char why[512];
    int rc = st_write_as(path, list, n, as, metadata, why, sizeof why);
    free(list);
    free(as);
    return rc ? fail("%s", why) : 0;
}

int write_tensors(const program *p, const char *path, unsigned roles, const char *const *metadata,
                  st_dtype param_dtype)
{
    return write_tensors_and(p, path, roles, metadata, param_dtype, NULL);
}

/* Read every tensor of the given roles from f by name into the arena; the
 * shapes must be the model's, the file's dtype one that converts to the
 * tensor's (a BF16 or F16 file loads into fp32 parameters).  Nothing is
 * written unless every tensor is there and fits. */
static int read_tensors(program *p, const st_file *f, const char *path, unsigned roles)
{
    st_target *list = calloc((size_t)p->manifest.n_tensors + 1, sizeof *list);
    int n = 0;
    if (!list)
        return fail("out of memory reading %s", path);
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (!((roles >> ti->role) & 1))
            continue;
        st_tensor want = as_st(p, ti);
        st_target *t = &list[n++];
        t->name = ti->name;
        t->dtype = want.dtype;
        t->rank = want.rank;
        memcpy(t->dim, want.dim, sizeof t->dim);
        t->dst = p->arena + ti->t.offset;
    }
    char why[512];
    int rc = st_load(f, list, n, why, sizeof why);
    free(list);
    return rc ? fail("%s", why) : 0;
}


/* read_tensors from the safetensors file at path (--init, --inputs). */
int read_file_tensors(program *p, const char *path, unsigned roles)
{
    char why[512];
    st_file *f = st_open(path, why, sizeof why);
    if (!f)
        return fail("%s", why);
    int rc = read_tensors(p, f, path, roles);
    st_close(f);
    return rc;
}

/* An fp16 run's loss scaler travels in the checkpoint's metadata, so a
 * resumed run goes on with the scale (and the count of skipped steps that
 * AdamW's bias correction uses) it stopped with. */
int save_checkpoint(const program *p, const char *dir, int64_t step, uint64_t seed, const rt_loss_scaler *ls,
                    st_dtype save_dtype, const rt_feedback_arrays *feedback)
{
    char path[4096], step_text[32], seed_text[32], build[32], why[512], scale[96];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fail("%s: cannot create the checkpoint folder: %s", dir, strerror(errno));
    if (p->cuda && rt_cuda_pull_state(p->cuda, p->arena, why, sizeof why))   /* they live on the device */
        return fail("%s: %s", p->manifest.device, why);
    checkpoint_path(p, dir, path, sizeof path);
    snprintf(step_text, sizeof step_text, "%lld", (long long)step);
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)seed);
    snprintf(build, sizeof build, "%016llx", (unsigned long long)p->manifest.build_id);
    snprintf(scale, sizeof scale, "%.9g %lld %lld", (double)ls->scale, (long long)ls->good, (long long)ls->skipped);
    const char *metadata[] = { "fusion.model", p->manifest.model, "fusion.build_id", build,
                               "fusion.step", step_text, "fusion.seed", seed_text,
                               p->manifest.loss_scaling ? "fusion.loss_scaler" : NULL, scale, NULL };
    return write_tensors_and(p, path, role_bit(ROLE_PARAM) | role_bit(ROLE_STATE), metadata, save_dtype, feedback);
}

static int is_feedback(const char *name) { return strncmp(name, RT_FEEDBACK_PREFIX, strlen(RT_FEEDBACK_PREFIX)) == 0; }

/* Copies of f's feedback arrays (comm/feedback.h) into *out. */
static int read_feedback(const st_file *f, const char *path, rt_feedback_arrays *out)
{
    out->owns = 1;
    for (int i = 0; i < st_count(f); i++) {
        st_tensor t;
        if (st_get(f, i, &t) != 0 || !is_feedback(t.name))
            continue;
        if (t.dtype != ST_F32 || t.rank != 1)
            return fail("%s: '%s' is %s of rank %d, not the F32 vector the error feedback is", path, t.name,
                        st_dtype_name(t.dtype), t.rank);
        float *copy = malloc((size_t)t.dim[0] * sizeof *copy + 1);
        if (!copy || rt_feedback_add(out, t.name, copy, t.dim[0])) {
            free(copy);
            return fail("%s: out of memory for '%s'", path, t.name);
        }
        memcpy(copy, t.data, (size_t)t.dim[0] * sizeof *copy);
    }
    return 0;
}

/* Whether any of parts[0, n) holds error feedback. */
static int any_feedback(st_file *const *parts, int n)
{
    for (int k = 0; k < n; k++)
        for (int i = 0; i < st_count(parts[k]); i++) {
            st_tensor t;
            if (st_get(parts[k], i, &t) == 0 && is_feedback(t.name))
                return 1;
        }
    return 0;
}

/* A part of a coordinated checkpoint: DIR/COMPLETE (written by the broker
 * once every part is in) lists each part's file and XXH3; a part missing
 * from it, or whose bytes hash otherwise, is refused.  No COMPLETE: a
 * plain --save folder, nothing to check. */
static int verify_part(const char *dir, const char *path)
{
    char complete[4200], want_name[512], name[4096];
    snprintf(complete, sizeof complete, "%s/COMPLETE", dir);
    FILE *f = fopen(complete, "r");
    if (!f)
        return 0;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    unsigned long long want = 0, have = 0;
    int listed = 0;
    char text[4700];
    while (!listed && fgets(text, sizeof text, f))
        if (sscanf(text, "part %511s %llx", want_name, &want) == 2 && strcmp(want_name, base) == 0)
            listed = 1;
    fclose(f);
    snprintf(name, sizeof name, "%s", path);
    if (!listed)
        return fail("%s: not a part of this checkpoint (%s does not list it): from another run?", name, complete);
    uint64_t h;
    if (file_xxh3(path, &h) != 0)
        return fail("%s: cannot read it to check it: %s", name, strerror(errno));
    have = h;
    if (have != want)
        return fail("%s: its XXH3 is %016llx, %s says %016llx: the file is damaged (truncated or changed) or "
                    "from another run or step", name, have, complete, want);
    return 0;
}

/* The metadata every part carries: step, seed, and an fp16 run's scaler. */
static int read_progress(const program *p, const st_file *f, const char *path, int64_t *step, uint64_t *seed,
                         rt_loss_scaler *ls)
{
    const char *s = st_metadata(f, "fusion.step"), *sd = st_metadata(f, "fusion.seed");
    if (!s || !sd || !st_metadata(f, "fusion.build_id"))
        return fail("%s: not a fusion checkpoint (no fusion.build_id, fusion.step, fusion.seed)", path);
    *step = strtoll(s, NULL, 10);
    *seed = strtoull(sd, NULL, 10);
    const char *sc = st_metadata(f, "fusion.loss_scaler");
    double scale;
    long long good, skipped;
    if (p->manifest.loss_scaling && sc && sscanf(sc, "%lf %lld %lld", &scale, &good, &skipped) == 3 && scale > 0 &&
        good >= 0 && skipped >= 0) {
        ls->scale = (float)scale;
        ls->good = good;
        ls->skipped = skipped;
    } else if (p->manifest.loss_scaling) {
        return fail("%s: no valid fusion.loss_scaler (an fp16 checkpoint has one)", path);
    }
    return 0;
}

static int is_part_name(const char *name)
{
    size_t n = strlen(name), ext = strlen(".safetensors");
    return strncmp(name, "checkpoint", 10) == 0 && n > ext && strcmp(name + n - ext, ".safetensors") == 0;
}

/* A checkpoint of another plan: every part in dir (of this model, at one
 * step and seed), and each of this device's parameters and states from
 * the part that holds it. */
static int resume_by_name(program *p, const char *dir, int64_t *step, uint64_t *seed, rt_loss_scaler *ls)
{
    DIR *d = opendir(dir);
    if (!d)
        return fail("%s: cannot open the checkpoint folder: %s", dir, strerror(errno));
    enum { MAX_PARTS = 4096 };
    st_file **parts = calloc(MAX_PARTS, sizeof *parts);
    char (*paths)[4096] = malloc(MAX_PARTS * sizeof *paths);
    int n = 0, rc = parts && paths ? 0 : fail("out of memory reading %s", dir);
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (!is_part_name(e->d_name))
            continue;
        if (n == MAX_PARTS) {
            rc = fail("%s: more than %d checkpoint parts", dir, MAX_PARTS);
            break;
        }
        char why[512];
        snprintf(paths[n], sizeof paths[n], "%s/%s", dir, e->d_name);
        if (verify_part(dir, paths[n])) {
            rc = 1;
            break;
        }
        if (!(parts[n] = st_open(paths[n], why, sizeof why))) {
            rc = fail("%s", why);
            break;
        }
        int64_t s;
        uint64_t sd;
        const char *model = st_metadata(parts[n], "fusion.model");
        if (read_progress(p, parts[n], paths[n], &s, &sd, ls)) {
            rc = 1;
        } else if (!model || strcmp(model, p->manifest.model) != 0) {
            rc = fail("%s: a checkpoint of model '%s', this program trains '%s'", paths[n], model ? model : "?",
                      p->manifest.model);
        } else if (n > 0 && (s != *step || sd != *seed)) {
            rc = fail("%s: step %lld, seed %llu; %s has step %lld, seed %llu: parts of different checkpoints",
                      paths[n], (long long)s, (unsigned long long)sd, paths[0], (long long)*step,
                      (unsigned long long)*seed);
        }
        *step = s, *seed = sd;
        n++;
    }
    closedir(d);
    if (rc == 0 && n == 0)
        rc = fail("%s: no checkpoint (no checkpoint*.safetensors in it)", dir);
    for (int32_t i = 0; i < p->manifest.n_tensors && rc == 0; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->role != ROLE_PARAM && ti->role != ROLE_STATE)
            continue;
        int k = 0;
        st_tensor found;
        while (k < n && st_find(parts[k], ti->name, &found) == 0)   /* 1 found; -1 found, a dtype st_load names */
            k++;
        if (k == n) {
            rc = fail("%s: no part holds '%s' (%d parts): a checkpoint of another model?", dir, ti->name, n);
            break;
        }
        st_tensor want = as_st(p, ti);
        st_target t = { .name = ti->name, .dtype = want.dtype, .rank = want.rank, .dst = p->arena + ti->t.offset };
        memcpy(t.dim, want.dim, sizeof t.dim);
        char why[512];
        if (st_load(parts[k], &t, 1, why, sizeof why))
            rc = fail("%s", why);
    }
    if (rc == 0)
        printf("fusion: resumed from %s: a checkpoint of another compile (%d part%s), read by tensor name%s\n", dir,
               n, n == 1 ? "" : "s",
               any_feedback(parts, n) ? "; its error feedback is another plan's: this one's starts at zero" : "");
    for (int k = 0; k < n; k++)
        st_close(parts[k]);
    free(parts);
    free(paths);
    return rc;
}

int resume_checkpoint(program *p, const char *dir, int64_t *step, uint64_t *seed, rt_loss_scaler *ls,
                      rt_feedback_arrays *feedback)
{
    char path[4096], why[512], build[32];
    checkpoint_path(p, dir, path, sizeof path);
    struct stat st;
    if (stat(path, &st) != 0)   /* no part of this device's: another plan's checkpoint, or none */
        return resume_by_name(p, dir, step, seed, ls);
    if (verify_part(dir, path))
        return 1;
    st_file *f = st_open(path, why, sizeof why);
    if (!f)
        return fail("%s", why);
    const char *b = st_metadata(f, "fusion.build_id");
    snprintf(build, sizeof build, "%016llx", (unsigned long long)p->manifest.build_id);
    if (b && strcmp(b, build) != 0) {   /* this device's name, another compile */
        st_close(f);
        return resume_by_name(p, dir, step, seed, ls);
    }
    int rc = read_progress(p, f, path, step, seed, ls) ||
             read_tensors(p, f, path, role_bit(ROLE_PARAM) | role_bit(ROLE_STATE)) ||
             read_feedback(f, path, feedback);
    st_close(f);
    return rc;
}
