/* checkpoint.c: a device program's tensors to and from safetensors files:
 * checkpoint parts (--save, --resume; the folders are checkpoint_store.h's),
 * weights (--init), inputs (--inputs) and gradients (--dump-grads)
 * (checkpoint.h). */
#define _GNU_SOURCE
#include "checkpoint.h"
#include "checkpoint_pieces.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "../ir/ir.h"
#include "checkpoint_store.h"
#include "cpu/half.h"
#include "safetensors.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */
#include "rt_error.h"

/* A device alone: checkpoint.safetensors; one of several (a DiLoCo site of
 * one device too): one name each. */
int checkpoint_several(const program *p)
{
    return p->manifest.n_stages * p->manifest.n_replicas > 1 || p->manifest.n_links > 0;
}

void checkpoint_part_name(const program *p, char *name, size_t size)
{
    ckpt_part_name(p->manifest.device, checkpoint_several(p), name, size);
}

static int is_loss(const program *p, const rt_tensor_info *ti)
{
    return p->manifest.loss >= 0 && ti == &p->tensors[p->manifest.loss];
}

static int is_frozen(const rt_tensor_info *ti) { return ti->role == ROLE_PARAM && ti->frozen; }

/* "HASH NAME\n" for each frozen parameter of p (XXH3-64 of its values as
 * stored, f32 or --frozen-dtype's 16 bits; 16 hex digits); "" when none.
 * Malloc'd, or NULL. */
static char *frozen_record(const program *p)
{
    size_t size = 1, at = 0;
    for (int32_t i = 0; i < p->manifest.n_tensors; i++)
        size += is_frozen(&p->tensors[i]) ? strlen(p->tensors[i].name) + 18 : 0;
    char *out = malloc(size);
    for (int32_t i = 0; out && i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (!is_frozen(ti))
            continue;
        uint64_t h =
            XXH3_64bits(p->arena + ti->t.offset, (size_t)rt_tensor_numel(&ti->t) * (size_t)half_dtype_bytes(ti->dtype));
        at += (size_t)snprintf(out + at, size - at, "%016llx %s\n", (unsigned long long)h, ti->name);
    }
    if (out)
        out[at] = '\0';
    return out;
}

int checkpoint_check_frozen(const program *p, const char *recorded, char *err, size_t n)
{
    char *mine = frozen_record(p);
    if (!mine)
        return rt_error(err, n, "out of memory hashing the frozen parameters");
    int rc = 0;
    for (const char *line = mine; *line && rc == 0; line = strchr(line, '\n') + 1) {
        const char *name = line + 17, *end = strchr(line, '\n');
        int len = (int)(end - name);
        /* The record's line "HASH NAME" for this name (a malformed line matches nothing). */
        const char *at = recorded, *found = NULL;
        while (at && *at && !found) {
            const char *eol = strchr(at, '\n');
            size_t line_len = eol ? (size_t)(eol - at) : strlen(at);
            if (line_len == (size_t)len + 17 && at[16] == ' ' && strncmp(at + 17, name, (size_t)len) == 0)
                found = at;
            at = eol ? eol + 1 : NULL;
        }
        at = found;
        if (!at)
            rc = rt_error(err, n,
                          "the checkpoint does not record frozen parameter '%.*s': it was not a fine-tune with it "
                          "frozen (start one from it with --init instead)",
                          len, name);
        else if (strncmp(at, line, 16) != 0)
            rc = rt_error(err, n,
                          "frozen parameter '%.*s' is not the one the checkpoint was trained on (its values hash to "
                          "%.16s, the checkpoint's to %.16s): give --init the base the run started from",
                          len, name, line, at);
    }
    free(mine);
    return rc;
}

/* Append f's fusion.frozen to out->frozen. */
static int keep_frozen_record(const st_file *f, checkpoint_state *out, char *err, size_t n)
{
    const char *rec = st_metadata(f, "fusion.frozen");
    if (!rec || !*rec)
        return 0;
    size_t had = out->frozen ? strlen(out->frozen) : 0;
    char *grown = realloc(out->frozen, had + strlen(rec) + 1);
    if (!grown)
        return rt_error(err, n, "out of memory");
    memcpy(grown + had, rec, strlen(rec) + 1);
    out->frozen = grown;
    return 0;
}

static st_tensor as_st(const program *p, const rt_tensor_info *ti)
{
    st_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "%s", ti->name);
    t.dtype = (st_dtype)ti->dtype; /* ST_* == DT_* (hf_weights.c) */
    t.rank = ti->t.rank;
    for (int i = 0; i < ti->t.rank; i++)
        t.dim[i] = ti->t.dim[i];
    t.data = p->arena + ti->t.offset;
    return t;
}

/* Every tensor of the given roles (bits of 1 << ir_role; the loss with
 * LOSS_ROLE, the running statistics with RUNNING_ROLE) to path;
 * the parameters in param_dtype (ST_F32: as they are; ST_BF16, ST_F16:
 * rounded, for a file half the size), everything else as it is. */
static int write_tensors_and(const program *p, const char *path, unsigned roles, const char *const *metadata,
                             st_dtype param_dtype, const rt_feedback_arrays *feedback, int skip_frozen)
{
    int n_extra = feedback ? feedback->n : 0;
    st_tensor *list = calloc((size_t)p->manifest.n_tensors + n_extra + 1, sizeof *list);
    st_dtype *as = calloc((size_t)p->manifest.n_tensors + n_extra + 1, sizeof *as);
    int n = 0;
    if (!list || !as) {
        free(list);
        free(as);
        return fail("out of memory writing %s", path);
    }
    for (int32_t i = 0; i < p->manifest.n_tensors; i++)
        if (skip_frozen && is_frozen(&p->tensors[i]))
            continue;
        else if (((roles >> p->tensors[i].role) & 1) || ((roles & LOSS_ROLE) && is_loss(p, &p->tensors[i])) ||
                 ((roles & RUNNING_ROLE) && p->tensors[i].running)) {
            list[n] = as_st(p, &p->tensors[i]);
            as[n] = p->tensors[i].role == ROLE_PARAM ? param_dtype : list[n].dtype;
            n++;
        }
    for (int i = 0; i < n_extra; i++, n++) { /* the feedback as it is, f32 */
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

int write_tensors(const program *p, const char *path, unsigned roles, const char *const *metadata, st_dtype param_dtype)
{
    return write_tensors_and(p, path, roles, metadata, param_dtype, NULL, 0);
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

/* ---- parts of a checkpoint ------------------------------------------------------ */

/* The metadata a part carries: who wrote it (model, its parameters' hash,
 * the compile, the device and its place in the plan) and where the run
 * stood (step, seed, an fp16 run's loss scaler). */
int save_checkpoint(const program *p, const char *step_dir, int64_t step, uint64_t seed, const rt_loss_scaler *ls,
                    st_dtype save_dtype, const rt_feedback_arrays *feedback)
{
    const rt_manifest *mf = &p->manifest;
    char name[CKPT_PART_MAX], path[FU_PATH_BYTES + 304], step_text[32], seed_text[32], build[32], model_id[32],
        plan[96], why[512], scale[96];
    if (mkdir(step_dir, 0755) != 0 && errno != EEXIST)
        return fail("%s: cannot create the checkpoint folder: %s", step_dir, strerror(errno));
    if (p->cuda && rt_cuda_pull_state(p->cuda, p->arena, why, sizeof why)) /* they live on the device */
        return fail("%s: %s", mf->device, why);
    checkpoint_part_name(p, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", step_dir, name);
    snprintf(step_text, sizeof step_text, "%lld", (long long)step);
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)seed);
    snprintf(build, sizeof build, "%016llx", (unsigned long long)mf->build_id);
    snprintf(model_id, sizeof model_id, "%016llx", (unsigned long long)mf->model_id);
    snprintf(plan, sizeof plan, "stage %d of %d, replica %d of %d", mf->stage, mf->n_stages, mf->replica,
             mf->n_replicas);
    snprintf(scale, sizeof scale, "%.9g %lld %lld", (double)ls->scale, (long long)ls->good, (long long)ls->skipped);
    char *frozen = frozen_record(p);
    if (!frozen)
        return fail("%s: out of memory", mf->device);
    /* clang-format off */
    const char *metadata[] = { "fusion.model",    mf->model,
                               "fusion.model_id", model_id,
                               "fusion.build_id", build,
                               "fusion.device",   mf->device,
                               "fusion.plan",     plan,
                               "fusion.step",     step_text,
                               "fusion.seed",     seed_text,
                               "fusion.hypers",   mf->hypers,
                               "fusion.frozen",   frozen,
                               NULL, NULL, NULL, NULL, /* [18, 22): the optional ones below, when there */
                               NULL };
    /* clang-format on */
    char *pieces = pieces_record(p);
    if (!pieces) {
        free(frozen);
        return fail("%s: out of memory", mf->device);
    }
    int at = 18;
    if (*pieces)
        metadata[at++] = "fusion.pieces", metadata[at++] = pieces;
    if (mf->loss_scaling)
        metadata[at++] = "fusion.loss_scaler", metadata[at++] = scale;
    int rc = write_tensors_and(p, path, role_bit(ROLE_PARAM) | role_bit(ROLE_STATE), metadata, save_dtype, feedback, 1);
    free(frozen);
    free(pieces);
    return rc;
}

static int is_feedback(const char *name) { return strncmp(name, RT_FEEDBACK_PREFIX, strlen(RT_FEEDBACK_PREFIX)) == 0; }

/* Copies of f's feedback arrays (comm/feedback.h) into *out. */
static int read_feedback(const st_file *f, const char *path, rt_feedback_arrays *out, char *err, size_t n)
{
    out->owns = 1;
    for (int i = 0; i < st_count(f); i++) {
        st_tensor t;
        if (st_get(f, i, &t) != 0 || !is_feedback(t.name))
            continue;
        if (t.dtype != ST_F32 || t.rank != 1) {
            return rt_error(err, n, "%s: '%s' is %s of rank %d, not the F32 vector the error feedback is", path, t.name,
                            st_dtype_name(t.dtype), t.rank);
        }
        float *copy = malloc((size_t)t.dim[0] * sizeof *copy + 1);
        if (!copy || rt_feedback_add(out, t.name, copy, t.dim[0])) {
            free(copy);
            return rt_error(err, n, "%s: out of memory for '%s'", path, t.name);
        }
        memcpy(copy, t.data, (size_t)t.dim[0] * sizeof *copy);
    }
    return 0;
}

/* The program's parameter or optimizer state called name, or -1. */
static int32_t state_tensor(const program *p, const char *name)
{
    for (int32_t i = 0; i < p->manifest.n_tensors; i++)
        if ((p->tensors[i].role == ROLE_PARAM || p->tensors[i].role == ROLE_STATE) &&
            strcmp(p->tensors[i].name, name) == 0)
            return i;
    return -1;
}

/* The names f holds that the program has no parameter or state of
 * (feedback aside), "'a', 'b' and 3 more" into list; their count. */
static int foreign_tensors(const program *p, const st_file *f, char *list, size_t n)
{
    int count = 0;
    size_t at = 0;
    list[0] = '\0';
    for (int i = 0; i < st_count(f); i++) {
        st_tensor t;
        st_get(f, i, &t);
        if (is_feedback(t.name) || state_tensor(p, t.name) >= 0)
            continue;
        if (++count <= 4 && at < n)
            at += (size_t)snprintf(list + at, n - at, "%s'%s'", count > 1 ? ", " : "", t.name);
    }
    if (count > 4 && at < n)
        snprintf(list + at, n - at, " and %d more", count - 4);
    return count;
}

/* The identity and progress in a part's metadata, strictly: digits only,
 * in range; of this model (its name and its parameters' hash); of the
 * manifest's step.  A part with bytes after its last tensor is refused. */
static int check_identity(const program *p, const st_file *f, const char *path, int64_t manifest_step,
                          checkpoint_state *out, char *err, size_t n)
{
    const char *model = st_metadata(f, "fusion.model"), *model_id = st_metadata(f, "fusion.model_id"),
               *build = st_metadata(f, "fusion.build_id"), *step = st_metadata(f, "fusion.step"),
               *seed = st_metadata(f, "fusion.seed");
    uint64_t step_value, seed_value;
    char mine[32];
    snprintf(mine, sizeof mine, "%016llx", (unsigned long long)p->manifest.model_id);
    if (!model || !model_id || !build || !step || !seed) {
        return rt_error(err, n,
                        "%s: not a fusion checkpoint part (it lacks fusion.model, fusion.model_id, fusion.build_id, "
                        "fusion.step or fusion.seed)",
                        path);
    }
    if (strlen(build) != 16 || strspn(build, "0123456789abcdef") != 16) {
        return rt_error(err, n, "%s: fusion.build_id '%.40s' is not 16 hex digits", path, build);
    }
    if (ckpt_parse_count(step, CKPT_MAX_STEP, &step_value) != 0 || step_value == 0) {
        return rt_error(err, n, "%s: fusion.step '%.40s' is not a step number (digits only, 1 to %lld)", path, step,
                        (long long)CKPT_MAX_STEP);
    }
    if (ckpt_parse_count(seed, UINT64_MAX, &seed_value) != 0) {
        return rt_error(err, n, "%s: fusion.seed '%.40s' is not a seed (digits only, below 2^64)", path, seed);
    }
    if ((int64_t)step_value != manifest_step) {
        return rt_error(err, n, "%s: a part of step %llu in the checkpoint of step %lld: moved from another step?",
                        path, (unsigned long long)step_value, (long long)manifest_step);
    }
    if (strcmp(model, p->manifest.model) != 0) {
        return rt_error(err, n, "%s: a checkpoint of model '%.64s', this program trains '%s'", path, model,
                        p->manifest.model);
    }
    if (strcmp(model_id, mine) != 0) {
        char list[600];
        int extra = foreign_tensors(p, f, list, sizeof list);
        if (extra > 0 && p->manifest.n_stages * p->manifest.n_replicas == 1)
            snprintf(err, n,
                     "%s: a checkpoint of another '%s' (its parameters differ from this program's): it holds "
                     "%d this program has not: %s",
                     path, model, extra, list);
        else
            snprintf(err, n,
                     "%s: a checkpoint of another '%s': its parameters (names and shapes) hash to %s, this "
                     "program's to %s",
                     path, model, model_id, mine);
        return -1;
    }
    if (st_trailing_bytes(f) != 0) {
        snprintf(err, n, "%s: %lld bytes after its last tensor: not a file fusion wrote", path,
                 (long long)st_trailing_bytes(f));
        return -1;
    }
    const char *sc = st_metadata(f, "fusion.loss_scaler");
    double scale;
    long long good, skipped;
    char tail;
    if (p->manifest.loss_scaling) {
        if (!sc || sscanf(sc, "%lf %lld %lld %c", &scale, &good, &skipped, &tail) != 3 || !(scale > 0) ||
            !(scale < 1e38) || good < 0 || skipped < 0 || skipped > (long long)step_value) {
            snprintf(err, n, "%s: no valid fusion.loss_scaler (an fp16 checkpoint has one)", path);
            return -1;
        }
        out->scaler.scale = (float)scale;
        out->scaler.good = good;
        out->scaler.skipped = skipped;
    }
    out->step = (int64_t)step_value;
    out->seed = seed_value;
    return 0;
}

/* Loads one tensor (program tensor i) from f. */
static int load_one(program *p, const st_file *f, int32_t i, char *err, size_t n)
{
    const rt_tensor_info *ti = &p->tensors[i];
    st_tensor want = as_st(p, ti);
    st_target t = { .name = ti->name, .dtype = want.dtype, .rank = want.rank, .dst = p->arena + ti->t.offset };
    memcpy(t.dim, want.dim, sizeof t.dim);
    return st_load(f, &t, 1, err, n);
}

/* A part of this very compile, this device's own: all of it is this
 * device's, nothing else may be in it. */
static int load_own(program *p, const st_file *f, const char *path, checkpoint_state *out, char *err, size_t n)
{
    const rt_manifest *mf = &p->manifest;
    const char *device = st_metadata(f, "fusion.device"), *plan = st_metadata(f, "fusion.plan");
    char want_plan[96], list[600];
    snprintf(want_plan, sizeof want_plan, "stage %d of %d, replica %d of %d", mf->stage, mf->n_stages, mf->replica,
             mf->n_replicas);
    if (!device || strcmp(device, mf->device) != 0 || !plan || strcmp(plan, want_plan) != 0) {
        return rt_error(err, n, "%s: the part of device '%.64s' (%.90s), not of %s (%s): parts swapped?", path,
                        device ? device : "?", plan ? plan : "?", mf->device, want_plan);
    }
    int extra = foreign_tensors(p, f, list, sizeof list);
    if (extra > 0) {
        return rt_error(err, n, "%s: holds %d tensor%s this program has not: %s", path, extra, extra == 1 ? "" : "s",
                        list);
    }
    for (int32_t i = 0; i < mf->n_tensors; i++)
        if ((p->tensors[i].role == ROLE_PARAM || p->tensors[i].role == ROLE_STATE) && !is_frozen(&p->tensors[i]) &&
            load_one(p, f, i, err, n))
            return -1;
    if (keep_frozen_record(f, out, err, n))
        return -1;
    return read_feedback(f, path, &out->feedback, err, n);
}

/* parts[k]'s fusion.device must be the one its file is named for, and its
 * fusion.plan ("stage s of S, replica r of R") agree with the parts before
 * it: the same S and R, another (s, r).  So a part renamed, or its place
 * edited, is refused even where the reader has no plan of its own to hold
 * it against. */
static int check_place(st_file *const *parts, int k, const char *path, const char *file, char *err, size_t n)
{
    const char *device = st_metadata(parts[k], "fusion.device"), *plan = st_metadata(parts[k], "fusion.plan");
    char want[CKPT_PART_MAX];
    int s, S, r, R;
    char tail;
    ckpt_part_name(device ? device : "", 1, want, sizeof want);
    if (!device || (strcmp(file, want) != 0 && strcmp(file, "checkpoint.safetensors") != 0)) {
        return rt_error(err, n, "%s: the part of device '%.64s', in the file of another: parts swapped or renamed?",
                        path, device ? device : "?");
    }
    if (!plan || sscanf(plan, "stage %d of %d, replica %d of %d%c", &s, &S, &r, &R, &tail) != 4 || s < 0 || s >= S ||
        r < 0 || r >= R) {
        return rt_error(err, n, "%s: fusion.plan '%.60s' is not \"stage s of S, replica r of R\"", path,
                        plan ? plan : "?");
    }
    for (int j = 0; j < k; j++) {
        int s2, S2, r2, R2;
        const char *other = st_metadata(parts[j], "fusion.plan");
        if (other && sscanf(other, "stage %d of %d, replica %d of %d", &s2, &S2, &r2, &R2) == 4 &&
            (S2 != S || R2 != R || (s2 == s && r2 == r))) {
            return rt_error(err, n, "%s: '%s' beside a part of '%s' (%s): parts of different plans, or a place edited",
                            path, plan, st_metadata(parts[j], "fusion.device"), other);
        }
    }
    return 0;
}

/* A checkpoint of another compile (other devices, stages or replicas):
 * each of this device's parameters and states from whichever present part
 * holds it, every part verified and of the same model, step and seed. */
static int load_by_name(program *p, const char *step_dir, const ckpt_manifest *m, checkpoint_state *out, char *err,
                        size_t n)
{
    st_file **parts = calloc((size_t)m->n_parts + 1, sizeof *parts);
    int n_open = 0, rc = parts ? 0 : -1, feedback = 0, no_running = 0;
    if (!parts)
        snprintf(err, n, "%s: out of memory", step_dir);
    for (int32_t k = 0; k < m->n_parts && rc == 0; k++) {
        char path[FU_PATH_BYTES + 304];
        snprintf(path, sizeof path, "%s/%s", step_dir, m->parts[k].name);
        if (access(path, F_OK) != 0)
            continue; /* on another host */
        checkpoint_state seen = *out;
        st_file *f = NULL;
        if (ckpt_verify_part(step_dir, m, m->parts[k].name, err, n) != 0 || !(f = st_open(path, err, n))) {
            rc = -1;
            break;
        }
        parts[n_open++] = f; /* closed at the end, whatever happens now */
        if (check_identity(p, f, path, m->step, &seen, err, n) != 0 ||
            check_place(parts, n_open - 1, path, m->parts[k].name, err, n) != 0) {
            rc = -1;
            break;
        }
        if (n_open > 1 && seen.seed != out->seed) {
            snprintf(err, n, "%s: seed %llu; the checkpoint's other parts have seed %llu: parts of different runs",
                     path, (unsigned long long)seen.seed, (unsigned long long)out->seed);
            rc = -1;
            break;
        }
        *out = seen;
        if (keep_frozen_record(f, out, err, n)) {
            rc = -1;
            break;
        }
        for (int i = 0; i < st_count(f) && !feedback; i++) {
            st_tensor t;
            feedback = st_get(f, i, &t) == 0 && is_feedback(t.name);
        }
    }
    if (rc == 0 && n_open == 0) {
        snprintf(err, n, "%s: none of its %d parts is in the folder", step_dir, m->n_parts);
        rc = -1;
    }
    for (int32_t i = 0; i < p->manifest.n_tensors && rc == 0; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if ((ti->role != ROLE_PARAM && ti->role != ROLE_STATE) || is_frozen(ti))
            continue; /* a frozen one: recorded, checked after its --init (checkpoint_check_frozen) */
        int k = 0;
        st_tensor found;
        while (k < n_open && st_find(parts[k], ti->name, &found) == 0) /* 1 found; -1 found, a dtype st_load names */
            k++;
        if (k == n_open && ti->running) {
            no_running++; /* saved before fusion kept them: they start as a new run's */
        } else if (k == n_open) {
            snprintf(err, n,
                     "%s: no part holds '%s' (%d parts here): a checkpoint of another model, or parts on "
                     "another host?",
                     step_dir, ti->name, n_open);
            rc = -1;
        } else if (ti->whole || pieces_find(parts[k], ti->name, &(int64_t){ 0 }, &(int64_t){ 0 })) {
            /* sharded moments, here or there (checkpoint_pieces.h) */
            int64_t size = rt_tensor_numel(&ti->t);
            rc = pieces_load(parts, n_open, ti->name, ti->whole ? ti->whole : size, ti->whole_lo, size,
                             (float *)(p->arena + ti->t.offset), step_dir, err, n);
        } else {
            rc = load_one(p, parts[k], i, err, n);
        }
    }
    if (rc == 0)
        printf("fusion: %s: a checkpoint of another compile (%d part%s), read by tensor name%s\n", step_dir, n_open,
               n_open == 1 ? "" : "s",
               feedback ? "; its error feedback is another plan's: this one's starts at zero" : "");
    if (rc == 0 && no_running > 0)
        printf("fusion: %s holds no batch-norm running statistics (saved before fusion kept them): %d tensor%s "
               "start at mean 0, variance 1\n",
               step_dir, no_running, no_running == 1 ? "" : "s");
    for (int k = 0; k < n_open; k++)
        st_close(parts[k]);
    free(parts);
    return rc;
}

/* A part file in step_dir that m does not list: a stray from another run
 * or step, which nothing could check.  0, or -1 naming it. */
static int no_stray_parts(const char *step_dir, const ckpt_manifest *m, char *err, size_t n)
{
    DIR *d = opendir(step_dir);
    if (!d) {
        snprintf(err, n, "%s: %s", step_dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name), ext = strlen(".safetensors");
        if (len > ext && strcmp(e->d_name + len - ext, ".safetensors") == 0 && !ckpt_manifest_find(m, e->d_name)) {
            snprintf(err, n,
                     "%s/%s: not a part of this checkpoint (its " CKPT_MANIFEST " does not list it): from "
                     "another run or step?",
                     step_dir, e->d_name);
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

int load_checkpoint_step(program *p, const char *step_dir, checkpoint_state *out, char *err, size_t n)
{
    ckpt_manifest m;
    int rc = ckpt_manifest_read(step_dir, &m, err, n);
    if (rc != 0)
        return -1;
    if (no_stray_parts(step_dir, &m, err, n) != 0) {
        ckpt_manifest_free(&m);
        return -1;
    }
    char name[CKPT_PART_MAX], path[FU_PATH_BYTES + 304], build[32];
    checkpoint_part_name(p, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", step_dir, name);
    snprintf(build, sizeof build, "%016llx", (unsigned long long)p->manifest.build_id);
    st_file *f = NULL;
    if (!ckpt_manifest_find(&m, name) || access(path, F_OK) != 0) { /* another plan's checkpoint */
        rc = load_by_name(p, step_dir, &m, out, err, n);
    } else if (ckpt_verify_part(step_dir, &m, name, err, n) != 0 || !(f = st_open(path, err, n)) ||
               check_identity(p, f, path, m.step, out, err, n) != 0) {
        rc = -1;
    } else if (strcmp(st_metadata(f, "fusion.build_id"), build) != 0) { /* this device's name, another compile */
        st_close(f);
        f = NULL;
        rc = load_by_name(p, step_dir, &m, out, err, n);
    } else {
        rc = load_own(p, f, path, out, err, n);
    }
    st_close(f);
    ckpt_manifest_free(&m);
    return rc;
}
