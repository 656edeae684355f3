/* test_checkpoint_store.c: checkpoints never load silently when damaged
 * (runtime/checkpoint_store.h, checkpoint.h, checkpoint_run.h).
 *
 * A toy run of two devices (cpu-a: stage 0 with w1 (4,3) and its moment;
 * cpu-b: stage 1 with w2 (5,) and its moment) saves steps 1 and 2 as the
 * runtime does: each part written, measured, and the step's MANIFEST.  Then
 * 500 mutations, each on a fresh copy, drawn from a fixed seed: byte flips
 * and truncations of parts and manifests, parts swapped between devices or
 * steps, a manifest of another step, a stray part, a folder renamed, and
 * metadata edits made consistent (the part rewritten and the MANIFEST
 * fixed to match it): step "abc", "2e", 10^20, seed "x", another model or
 * model id, a bad build id, another device's name, bytes after the last
 * tensor.  Two programs load each copy: a one-device program of another
 * compile (it reads every part by name) and cpu-a itself (its own part).
 * Each must either refuse (naming a file of the folder) or fall back to
 * step 1 with step 1's exact values (one copy in five has no step 1: there
 * the load must be refused); loading step 2 is a failure.  Also the
 * layout's own rules: strict numbers, --keep, litter.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../ir/ir.h"
#include "../../runtime/checkpoint.h"
#include "../../runtime/checkpoint_run.h"
#include "../../runtime/checkpoint_store.h"
#include "check.h"

int fail(const char *fmt, ...) /* the runtime's (main.c's): quiet here, the test reads err */
{
    (void)fmt;
    return 1;
}

/* A device program's CUDA tables (runtime/program.h), which the runtime's
 * CUDA backend names; a CPU program never reads them. */
const unsigned char fusion_cuda_info_blob[1], fusion_cuda_steps_blob[1], fusion_cuda_names_blob[1],
    fusion_cuda_fatbin_blob[1];

#define MUTATIONS 500
#define MODEL_ID  0x5eed5eed12345678ull

static char root[256];

/* ---- a toy program -------------------------------------------------------- */

typedef struct {
    const char *name;
    int role, n;
    int64_t dim[2];
    int rank;
} toy_tensor;

static const toy_tensor all_tensors[] = {
    { "w1", ROLE_PARAM, 12, { 4, 3 }, 2 },
    { "m.w1", ROLE_STATE, 12, { 4, 3 }, 2 },
    { "w2", ROLE_PARAM, 5, { 5 }, 1 },
    { "m.w2", ROLE_STATE, 5, { 5 }, 1 },
};

/* device: "cpu-a" (w1, m.w1; stage 0 of 2), "cpu-b" (w2, m.w2; stage 1 of 2)
 * or "cpu0" (all four, alone, another compile). */
static program make_program(const char *device)
{
    program p;
    memset(&p, 0, sizeof p);
    int first = 0, count = 4, alone = strcmp(device, "cpu0") == 0;
    if (strcmp(device, "cpu-a") == 0)
        first = 0, count = 2;
    else if (strcmp(device, "cpu-b") == 0)
        first = 2, count = 2;
    snprintf(p.manifest.model, sizeof p.manifest.model, "toy");
    snprintf(p.manifest.device, sizeof p.manifest.device, "%s", device);
    p.manifest.build_id = alone ? 0x1111 : 0x2222;
    p.manifest.model_id = MODEL_ID;
    p.manifest.n_tensors = count;
    p.manifest.loss = -1;
    p.manifest.stage = alone ? 0 : first / 2;
    p.manifest.n_stages = alone ? 1 : 2;
    p.manifest.n_replicas = 1;
    p.manifest.n_links = alone ? 0 : 1;
    p.tensors = calloc((size_t)count, sizeof *p.tensors);
    p.arena = calloc(1, 4096);
    int64_t at = 0;
    for (int i = 0; i < count; i++) {
        const toy_tensor *t = &all_tensors[first + i];
        snprintf(p.tensors[i].name, sizeof p.tensors[i].name, "%s", t->name);
        p.tensors[i].role = t->role;
        p.tensors[i].t.rank = t->rank;
        for (int k = 0; k < t->rank; k++)
            p.tensors[i].t.dim[k] = t->dim[k];
        p.tensors[i].t.offset = at;
        at += t->n * 4;
    }
    return p;
}

static void free_program(program *p)
{
    free(p->tensors);
    free(p->arena);
}

/* The value of element k of tensor `name` at `step`. */
static float value_at(int step, const char *name, int k)
{
    return (float)step * 100.0f + (float)(name[1] + name[0]) + 0.25f * (float)k;
}

static void set_step_values(program *p, int step)
{
    for (int i = 0; i < p->manifest.n_tensors; i++)
        for (int k = 0; k < (int)(p->tensors[i].t.dim[0] * (p->tensors[i].t.rank > 1 ? p->tensors[i].t.dim[1] : 1));
             k++)
            ((float *)(p->arena + p->tensors[i].t.offset))[k] = value_at(step, p->tensors[i].name, k);
}

/* Whether p's arena holds step's values exactly. */
static int holds_step(const program *p, int step)
{
    for (int i = 0; i < p->manifest.n_tensors; i++)
        for (int k = 0; k < (int)(p->tensors[i].t.dim[0] * (p->tensors[i].t.rank > 1 ? p->tensors[i].t.dim[1] : 1));
             k++)
            if (((float *)(p->arena + p->tensors[i].t.offset))[k] != value_at(step, p->tensors[i].name, k))
                return 0;
    return 1;
}

/* ---- files ------------------------------------------------------------------ */

static void run(const char *fmt, ...)
{
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0) {
        fprintf(stderr, "FAIL: command failed: %s\n", cmd);
        exit(1);
    }
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

/* The MANIFEST of dir/step-N from the parts in it. */
static void write_manifest(const char *step_dir, int64_t step)
{
    ckpt_manifest m = { .step = step, .n_parts = 0, .parts = calloc(2, sizeof(ckpt_part)) };
    const char *names[2] = { "checkpoint-cpu-a.safetensors", "checkpoint-cpu-b.safetensors" };
    char path[600], err[600];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", step_dir, names[i]);
        snprintf(m.parts[i].name, sizeof m.parts[i].name, "%s", names[i]);
        if (ckpt_measure(path, &m.parts[i].size, &m.parts[i].xxh3, err, sizeof err) != 0) {
            fprintf(stderr, "FAIL: %s\n", err);
            exit(1);
        }
        m.n_parts++;
    }
    if (ckpt_manifest_write(step_dir, &m, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL: %s\n", err);
        exit(1);
    }
    ckpt_manifest_free(&m);
}

static const char *default_metadata[] = { "fusion.model",
                                          "toy",
                                          "fusion.model_id",
                                          "5eed5eed12345678",
                                          "fusion.build_id",
                                          "0000000000002222",
                                          "fusion.device",
                                          NULL,
                                          "fusion.plan",
                                          NULL,
                                          "fusion.step",
                                          NULL,
                                          "fusion.seed",
                                          "5",
                                          NULL };

/* device's part of `step` into step_dir with its metadata, key `edit_key`
 * (if any) given the value edit_value. */
static void write_part(const char *step_dir, const char *device, int step, const char *edit_key, const char *edit_value)
{
    program p = make_program(device);
    set_step_values(&p, step);
    char path[600], step_text[32], plan[64];
    snprintf(path, sizeof path, "%s/checkpoint-%s.safetensors", step_dir, device);
    snprintf(step_text, sizeof step_text, "%d", step);
    snprintf(plan, sizeof plan, "stage %d of 2, replica 0 of 1", p.manifest.stage);
    const char *meta[sizeof default_metadata / sizeof *default_metadata];
    memcpy(meta, default_metadata, sizeof meta);
    meta[7] = device;
    meta[9] = plan;
    meta[11] = step_text;
    for (int i = 0; edit_key && meta[i]; i += 2)
        if (strcmp(meta[i], edit_key) == 0)
            meta[i + 1] = edit_value;
    mkdir(step_dir, 0755);
    if (write_tensors(&p, path, role_bit(ROLE_PARAM) | role_bit(ROLE_STATE), meta, ST_F32) != 0) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
    free_program(&p);
}

/* ---- loading ------------------------------------------------------------------ */

/* Loads dir as `device`, stdout (the fallback's lines) out of the way.
 * Returns the step loaded, or -1 refused (err set). */
static int64_t load_as(const char *device, const char *dir, char *err, size_t n, int *held_step1)
{
    program p = make_program(device);
    checkpoint_options o = { .resume_dir = dir, .keep = 3 };
    checkpoint_state s;
    memset(&s, 0, sizeof s);
    int resumed = 0;
    fflush(stdout);
    int saved = dup(1), null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    int rc = checkpoint_start(&p, NULL, &o, &s, &resumed, err, n);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(null);
    *held_step1 = rc == 0 && holds_step(&p, (int)s.step);
    rt_feedback_arrays_free(&s.feedback);
    free_program(&p);
    return rc == 0 ? s.step : -1;
}

/* ---- the mutations -------------------------------------------------------------- */

static unsigned rng = 20261126u;
static unsigned next_random(void)
{
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

static void flip_byte(const char *path)
{
    long size = file_size(path);
    FILE *f = fopen(path, "r+b");
    if (!f || size <= 0)
        return;
    long at = (long)(next_random() % (unsigned)size);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ (int)(1u << (next_random() % 8)), f);
    fclose(f);
}

static void cut(const char *path)
{
    long size = file_size(path);
    if (size > 0 && truncate(path, (off_t)(next_random() % (unsigned)size)) != 0)
        perror("truncate");
}

/* One mutation of copy (a copy of the good folder) in step 2; *what says
 * which; *own: it touches cpu-a's part, the MANIFEST or the folder (what
 * cpu-a reads). */
static void mutate(const char *copy, char *what, size_t n, int *own)
{
    char s2[440], a[500], b[500], man[500];
    snprintf(s2, sizeof s2, "%s/step-2", copy);
    snprintf(a, sizeof a, "%s/checkpoint-cpu-a.safetensors", s2);
    snprintf(b, sizeof b, "%s/checkpoint-cpu-b.safetensors", s2);
    snprintf(man, sizeof man, "%s/MANIFEST", s2);
    static const char *edits[][2] = {
        { "fusion.step", "abc" },
        { "fusion.step", "2e" },
        { "fusion.step", "100000000000000000000" },
        { "fusion.step", "-2" },
        { "fusion.step", " 2" },
        { "fusion.step", "3" },
        { "fusion.seed", "x" },
        { "fusion.seed", "-5" },
        { "fusion.seed", "99999999999999999999999" },
        { "fusion.model", "other" },
        { "fusion.model_id", "0000000000000001" },
        { "fusion.build_id", "zz" },
        { "fusion.device", "cpu-b" },
        { "fusion.plan", "stage 1 of 2, replica 0 of 1" },
    };
    int kind = (int)(next_random() % 11);
    *own = 1;
    switch (kind) {
    case 0:
    case 1: { /* a byte of a part */
        int which = (int)(next_random() % 2);
        flip_byte(which ? b : a);
        *own = !which;
        snprintf(what, n, "a flipped byte in %s's part", which ? "cpu-b" : "cpu-a");
        break;
    }
    case 2: {
        int which = (int)(next_random() % 2);
        cut(which ? b : a);
        *own = !which;
        snprintf(what, n, "%s's part truncated", which ? "cpu-b" : "cpu-a");
        break;
    }
    case 3:
        flip_byte(man);
        snprintf(what, n, "a flipped byte in the MANIFEST");
        break;
    case 4:
        cut(man);
        snprintf(what, n, "the MANIFEST truncated");
        break;
    case 5:
        run("mv '%s' '%s.x' && mv '%s' '%s' && mv '%s.x' '%s'", a, a, b, a, a, b);
        snprintf(what, n, "the two devices' parts swapped");
        break;
    case 6: {
        int which = (int)(next_random() % 2);
        run("cp '%s/step-1/checkpoint-cpu-%c.safetensors' '%s'", copy, which ? 'b' : 'a', s2);
        *own = !which;
        snprintf(what, n, "step 1's part of cpu-%c in step 2", which ? 'b' : 'a');
        break;
    }
    case 7:
        run("cp '%s/step-1/MANIFEST' '%s'", copy, s2);
        snprintf(what, n, "step 1's MANIFEST in step 2");
        break;
    case 8:
        run("cp '%s' '%s/checkpoint-cpu-zz.safetensors'", a, s2);
        snprintf(what, n, "a stray part");
        break;
    case 9:
        run("mv '%s' '%s/step-3'", s2, copy);
        snprintf(what, n, "step 2's folder renamed step-3");
        break;
    default: { /* metadata edited, the MANIFEST made to match */
        int e = (int)(next_random() % (sizeof edits / sizeof *edits));
        int which = e == 12 || e == 13 ? 0 : (int)(next_random() % 2);
        if (e == 13 && next_random() % 2) { /* bytes after the last tensor instead */
            run("printf 'extra' >>'%s'", which ? b : a);
            snprintf(what, n, "bytes after %s's last tensor, the MANIFEST matching", which ? "cpu-b" : "cpu-a");
        } else {
            write_part(s2, which ? "cpu-b" : "cpu-a", 2, edits[e][0], edits[e][1]);
            snprintf(what, n, "%s's %s = '%s', the MANIFEST matching", which ? "cpu-b" : "cpu-a", edits[e][0],
                     edits[e][1]);
        }
        *own = !which;
        write_manifest(s2, 2);
    }
    }
}

static void test_checkpoint_mutations_never_load_silently(void)
{
    char good[400];
    snprintf(good, sizeof good, "%s/good", root);
    mkdir(good, 0755);
    for (int step = 1; step <= 2; step++) {
        char s[500];
        ckpt_step_dir(good, step, s, sizeof s);
        write_part(s, "cpu-a", step, NULL, NULL);
        write_part(s, "cpu-b", step, NULL, NULL);
        write_manifest(s, step);
    }
    char err[1200];
    int held = 0;
    CHECK_INT(2, load_as("cpu0", good, err, sizeof err, &held)); /* the intact folder: step 2, both ways */
    CHECK_INT(1, held);
    CHECK_INT(2, load_as("cpu-a", good, err, sizeof err, &held));
    CHECK_INT(1, held);
    int refused = 0, fell_back = 0, silent = 0;
    for (int i = 0; i < MUTATIONS; i++) {
        char copy[400], what[300];
        snprintf(copy, sizeof copy, "%s/m%d", root, i);
        run("cp -r '%s' '%s'", good, copy);
        int own = 0;
        mutate(copy, what, sizeof what, &own);
        int alone = i % 5 == 0; /* no step 1 to fall back to: the load must be refused */
        if (alone)
            run("rm -rf '%s/step-1'", copy);
        for (int who = 0; who < 2; who++) {
            if (who == 1 && !own)
                continue; /* cpu-a reads only its own part: cpu-b's own load would see this */
            int64_t step = load_as(who ? "cpu-a" : "cpu0", copy, err, sizeof err, &held);
            if (step < 0 && strstr(err, copy)) {
                refused++;
            } else if (step == 1 && held && !alone) {
                fell_back++;
            } else {
                silent++;
                fprintf(stderr, "FAIL: mutation %d (%s), loaded by %s: step %lld%s, err '%s'\n", i, what,
                        who ? "cpu-a" : "cpu0", (long long)step, held ? "" : " (other values)", step < 0 ? err : "");
            }
        }
        run("rm -rf '%s'", copy);
    }
    CHECK_INT(0, silent);
    CHECK(refused + fell_back >= MUTATIONS);
    fprintf(stderr, "mutations: %d loads refused naming a file, %d fell back to step 1, %d loaded silently\n", refused,
            fell_back, silent);
}

/* ---- the layout's rules ------------------------------------------------------------ */

static void test_checkpoint_numbers_are_digits_in_range(void)
{
    uint64_t v = 0;
    CHECK_INT(0, ckpt_parse_count("20", CKPT_MAX_STEP, &v));
    CHECK_INT(20, (long long)v);
    CHECK_INT(0, ckpt_parse_count("18446744073709551615", UINT64_MAX, &v));
    const char *bad[] = {
        "", "abc", "2e", "-1", " 3", "3 ", "+3", "0x10", "18446744073709551616", "99999999999999999999999"
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_INT(-1, ckpt_parse_count(bad[i], UINT64_MAX, &v));
    CHECK_INT(-1, ckpt_parse_count("1000000000000001", CKPT_MAX_STEP, &v));
}

static void test_checkpoint_keep_prunes_and_litter_goes(void)
{
    char dir[400], s[500], err[600];
    snprintf(dir, sizeof dir, "%s/keep", root);
    mkdir(dir, 0755);
    for (int step = 1; step <= 5; step++) {
        ckpt_step_dir(dir, step, s, sizeof s);
        write_part(s, "cpu-a", step, NULL, NULL);
        write_part(s, "cpu-b", step, NULL, NULL);
        write_manifest(s, step);
    }
    ckpt_step_dir(dir, 6, s, sizeof s); /* a save killed half-way: a part, no MANIFEST, a temporary */
    write_part(s, "cpu-a", 6, NULL, NULL);
    run("touch '%s/checkpoint-cpu-b.safetensors.tmp.4242' '%s/latest.tmp.77'", s, dir);
    CHECK_INT(3, ckpt_prune(dir, 2, err, sizeof err)); /* 1, 2, 3 go; 4, 5 stay */
    int64_t *steps = NULL;
    CHECK_INT(3, ckpt_list_steps(dir, 0, &steps, err, sizeof err));
    CHECK_INT(6, steps ? (long long)steps[0] : -1);
    free(steps);
    CHECK_INT(2, ckpt_remove_litter(dir, err, sizeof err)); /* step-6 and latest.tmp.77 */
    CHECK_INT(2, ckpt_list_steps(dir, 1, &steps, err, sizeof err));
    CHECK_INT(5, steps ? (long long)steps[0] : -1);
    CHECK_INT(4, steps ? (long long)steps[1] : -1);
    free(steps);
    CHECK_INT(0, ckpt_prune(dir, 0, err, sizeof err) > 1); /* keep 0 still keeps the newest */
    CHECK_INT(1, ckpt_list_steps(dir, 1, &steps, err, sizeof err));
    free(steps);
    CHECK_INT(0, ckpt_set_latest(dir, 5, err, sizeof err));
    char target[64] = "";
    snprintf(s, sizeof s, "%s/latest", dir);
    ssize_t len = readlink(s, target, sizeof target - 1);
    target[len > 0 ? len : 0] = '\0';
    CHECK_STR("step-5", target);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/test_checkpoint_store.XXXXXX");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_checkpoint_numbers_are_digits_in_range();
    test_checkpoint_keep_prunes_and_litter_goes();
    test_checkpoint_mutations_never_load_silently();
    run("rm -rf '%s'", root);
    CHECK_DONE();
}
