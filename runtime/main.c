/* main.c: the training loop of a device program (libfusion_rt_main).
 *
 * Linked with one device's generated host program (runtime/program.h), it:
 * reads the embedded manifest, allocates the arena, initialises the
 * parameters from a seed, and runs steps, each: the data loader writes the
 * inputs, fusion_forward_backward and fusion_update run the schedule
 * (forward, backward, AdamW), one line of progress goes to stdout and one
 * JSON object to the log.  Checkpoints (--save, --resume) hold the params,
 * the optimizer state, the step and the seed, as safetensors: batches
 * depend only on (seed, step), so a resumed run continues bit for bit.
 *
 *   fusion-<device> --data FILE [--data FILE]... [--steps N] [--seed S] [--log FILE] [--threads N]
 *
 * Data (data.h): text read as bytes, or llm.c token shards; the model's
 * first two i32 inputs of shape (B,T) get, per row, T tokens from a
 * position drawn from (seed, step, row) and the same tokens shifted by one
 * (the next-token targets).  Batches depend only on (seed, step): a rerun,
 * or a resumed run, sees the same data.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../ir/ir.h"
#include "cpu/kernels.h"
#include "data.h"
#include "program.h"
#include "safetensors.h"

/* ---- the program ------------------------------------------------------------- */

typedef struct {
    rt_manifest     manifest;
    rt_tensor_info *tensors;
    char           *arena;
} program;

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fusion: error: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static int64_t numel(const rt_tensor *t) { return rt_tensor_numel(t); }

/* Params and state from their init specs, each from its own stream of
 * (seed, tensor index), so one tensor's values do not depend on another's. */
static void init_params(program *p, uint64_t seed)
{
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->role != ROLE_PARAM && ti->role != ROLE_STATE)
            continue;
        float *x = (float *)(p->arena + ti->t.offset);
        rt_rng r = rt_rng_seeded(seed, (uint64_t)i, 0x1417);
        for (int64_t k = 0, n = numel(&ti->t); k < n; k++) {
            switch (ti->init_kind) {
            case INIT_ONES:    x[k] = 1.0f; break;
            case INIT_NORMAL:  x[k] = (float)(ti->init_a * rt_rng_normal(&r)); break;
            case INIT_UNIFORM: x[k] = (float)(ti->init_a * (2.0 * rt_rng_uniform(&r) - 1.0)); break;
            default:           x[k] = 0.0f; break;
            }
        }
    }
}

/* The model's token inputs: its first two i32 inputs of shape (B,T). */
static int find_token_inputs(const program *p, int32_t *tokens, int32_t *targets)
{
    *tokens = *targets = -1;
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->role != ROLE_INPUT || ti->dtype != DT_I32 || ti->t.rank != 2)
            continue;
        if (*tokens < 0)
            *tokens = i;
        else if (*targets < 0)
            *targets = i;
    }
    if (*tokens < 0 || *targets < 0)
        return fail("the data loader needs a model with two i32 inputs of shape (B,T): tokens and targets");
    return 0;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- checkpoints, weights, gradients (safetensors) ---------------------------- */

#define CHECKPOINT_FILE "checkpoint.safetensors"

/* Role bits (1 << ir_role) select tensors; LOSS_ROLE selects the loss. */
#define LOSS_ROLE (1u << 31)
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

/* Write the tensors of the given roles (bits of 1 << ir_role) to path. */
static int write_tensors(const program *p, const char *path, unsigned roles, const char *const *metadata)
{
    st_tensor *list = calloc((size_t)p->manifest.n_tensors + 1, sizeof *list);
    int n = 0;
    if (!list)
        return fail("out of memory writing %s", path);
    for (int32_t i = 0; i < p->manifest.n_tensors; i++)
        if (((roles >> p->tensors[i].role) & 1) || ((roles & LOSS_ROLE) && is_loss(p, &p->tensors[i])))
            list[n++] = as_st(p, &p->tensors[i]);
    char why[512];
    int rc = st_write(path, list, n, metadata, why, sizeof why);
    free(list);
    return rc ? fail("%s", why) : 0;
}

/* Read every tensor of the given roles from f by name into the arena; the
 * shapes must be the model's. */
static int read_tensors(program *p, const st_file *f, const char *path, unsigned roles)
{
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (!((roles >> ti->role) & 1))
            continue;
        st_tensor t;
        int found = st_find(f, ti->name, &t);
        if (found <= 0)
            return fail("%s: %s tensor '%s'", path, found == 0 ? "has no" : "has an unsupported dtype for",
                        ti->name);
        st_tensor want = as_st(p, ti);
        int same = t.dtype == want.dtype && t.rank == want.rank;
        for (int k = 0; same && k < t.rank; k++)
            same = t.dim[k] == want.dim[k];
        if (!same)
            return fail("%s: tensor '%s' has another shape or dtype than the model's", path, ti->name);
        memcpy(p->arena + ti->t.offset, t.data, (size_t)numel(&ti->t) * 4);
    }
    return 0;
}

static unsigned role_bit(ir_role r) { return 1u << r; }

/* read_tensors from the safetensors file at path (--init, --inputs). */
static int read_file_tensors(program *p, const char *path, unsigned roles)
{
    char why[512];
    st_file *f = st_open(path, why, sizeof why);
    if (!f)
        return fail("%s", why);
    int rc = read_tensors(p, f, path, roles);
    st_close(f);
    return rc;
}

static int save_checkpoint(const program *p, const char *dir, int64_t step, uint64_t seed)
{
    char path[4096], step_text[32], seed_text[32], build[32];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fail("%s: cannot create the checkpoint folder: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/" CHECKPOINT_FILE, dir);
    snprintf(step_text, sizeof step_text, "%lld", (long long)step);
    snprintf(seed_text, sizeof seed_text, "%llu", (unsigned long long)seed);
    snprintf(build, sizeof build, "%016llx", (unsigned long long)p->manifest.build_id);
    const char *metadata[] = { "fusion.model", p->manifest.model, "fusion.build_id", build,
                               "fusion.step", step_text, "fusion.seed", seed_text, NULL };
    return write_tensors(p, path, role_bit(ROLE_PARAM) | role_bit(ROLE_STATE), metadata);
}

/* Params and state from DIR's checkpoint; *step and *seed from it. */
static int resume_checkpoint(program *p, const char *dir, int64_t *step, uint64_t *seed)
{
    char path[4096], why[512], build[32];
    snprintf(path, sizeof path, "%s/" CHECKPOINT_FILE, dir);
    st_file *f = st_open(path, why, sizeof why);
    if (!f)
        return fail("%s", why);
    const char *b = st_metadata(f, "fusion.build_id"), *s = st_metadata(f, "fusion.step");
    const char *sd = st_metadata(f, "fusion.seed");
    snprintf(build, sizeof build, "%016llx", (unsigned long long)p->manifest.build_id);
    int rc = 0;
    if (!b || !s || !sd)
        rc = fail("%s: not a fusion checkpoint (no fusion.build_id, fusion.step, fusion.seed)", path);
    else if (strcmp(b, build) != 0)
        rc = fail("%s: written by another compile (build %s, this program is build %s)", path, b, build);
    else {
        *step = strtoll(s, NULL, 10);
        *seed = strtoull(sd, NULL, 10);
        rc = read_tensors(p, f, path, role_bit(ROLE_PARAM) | role_bit(ROLE_STATE));
    }
    st_close(f);
    return rc;
}

static const char usage[] =
    "usage: %s --data FILE [--data FILE]... [--steps N] [--seed S] [--log FILE] [--threads N]\n"
    "  --data FILE    training data: text (bytes) or llm.c token shards; repeat to concatenate\n"
    "  --steps N      training steps (default 100)\n"
    "  --seed S       seeds the parameters and the batches (default 1)\n"
    "  --log FILE     also write one JSON object per step to FILE\n"
    "  --threads N    CPU threads (default: the device's, from the cluster file)\n"
    "  --save DIR     write a checkpoint to DIR at the end (and every --save-every K steps)\n"
    "  --resume DIR   continue from DIR's checkpoint (its step and seed) up to --steps\n"
    "  --init FILE    initial parameters from a safetensors file, by name\n"
    "  --inputs FILE  the model's inputs, by name, from a safetensors file (the same every step)\n"
    "  --dump-grads FILE  write the first step's inputs, loss and every parameter's gradient\n";

typedef struct {
    const char *data[64];
    int         n_data;
    const char *log, *save, *resume, *init, *dump_grads, *inputs;
    int64_t     steps, save_every;
    uint64_t    seed;
    int         seed_given;
    int         threads;
} run_options;

/* 0, 1 after --help, 2 on a usage error (printed). */
static int parse_args(int argc, char **argv, run_options *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--help") == 0) {
            printf(usage, argv[0]);
            return 1;
        }
        if (!v)
            goto bad;
        if (strcmp(a, "--data") == 0 && o->n_data < 64)
            o->data[o->n_data++] = v;
        else if (strcmp(a, "--log") == 0)
            o->log = v;
        else if (strcmp(a, "--save") == 0)
            o->save = v;
        else if (strcmp(a, "--resume") == 0)
            o->resume = v;
        else if (strcmp(a, "--init") == 0)
            o->init = v;
        else if (strcmp(a, "--dump-grads") == 0)
            o->dump_grads = v;
        else if (strcmp(a, "--inputs") == 0)
            o->inputs = v;
        else if (strcmp(a, "--save-every") == 0 && (o->save_every = strtoll(v, &end, 10)) > 0 && *end == '\0')
            ;
        else if (strcmp(a, "--steps") == 0 && (o->steps = strtoll(v, &end, 10)) >= 0 && *end == '\0')
            ;
        else if (strcmp(a, "--seed") == 0 && (o->seed = strtoull(v, &end, 10), *end == '\0' && v[0] != '-'))
            o->seed_given = 1;
        else if (strcmp(a, "--threads") == 0 && (o->threads = (int)strtol(v, &end, 10)) > 0 && *end == '\0')
            ;
        else
            goto bad;
        i++;
        continue;
    bad:
        fprintf(stderr, "%s: bad option or value: %s %s\n\n", argv[0], a, v ? v : "(missing)");
        fprintf(stderr, usage, argv[0]);
        return 2;
    }
    if (o->n_data == 0 && !o->inputs) {
        fprintf(stderr, "%s: --data FILE (or --inputs FILE) is required\n\n", argv[0]);
        fprintf(stderr, usage, argv[0]);
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* libgomp reads its wait policy only at start: idle OpenMP threads must
     * sleep, not spin against OpenBLAS (runtime/cpu/threads.c). */
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
    }
    program p;
    memcpy(&p.manifest, fusion_manifest_blob, sizeof p.manifest);
    run_options o = { .steps = 100, .seed = 1, .threads = p.manifest.threads > 0 ? p.manifest.threads : 1 };
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    p.tensors = malloc((size_t)p.manifest.n_tensors * sizeof *p.tensors + 1);
    p.arena = aligned_alloc(64, ((size_t)p.manifest.arena_bytes + 63) / 64 * 64 + 64);
    if (!p.tensors || !p.arena)
        return fail("cannot allocate the %lld-byte arena", (long long)p.manifest.arena_bytes);
    memcpy(p.tensors, fusion_tensors_blob, (size_t)p.manifest.n_tensors * sizeof *p.tensors);
    memset(p.arena, 0, (size_t)p.manifest.arena_bytes);
    kernel_threads_set(o.threads);

    /* Inputs: token batches from --data, or fixed tensors from --inputs. */
    int32_t tokens_at = -1, targets_at = -1;
    int64_t B = 0, T = 0, samples = 1;
    rt_data data = { 0 };
    char why[512];
    if (o.inputs) {
        if (read_file_tensors(&p, o.inputs, role_bit(ROLE_INPUT)))
            return 1;
        for (int32_t i = 0; i < p.manifest.n_tensors; i++)
            if (p.tensors[i].role == ROLE_INPUT && p.tensors[i].t.rank > 0) {
                samples = numel(&p.tensors[i].t);
                break;
            }
    } else {
        if (find_token_inputs(&p, &tokens_at, &targets_at))
            return 1;
        B = p.tensors[tokens_at].t.dim[0];
        T = p.tensors[tokens_at].t.dim[1];
        samples = B * T;
        for (int i = 0; i < o.n_data; i++)
            if (rt_data_load(&data, o.data[i], why, sizeof why))
                return fail("%s", why);
        if (data.n < T + 2)
            return fail("%s: %lld tokens is too few for sequences of %lld", o.data[0], (long long)data.n,
                        (long long)T);
    }
    FILE *log = NULL;
    if (o.log && !(log = fopen(o.log, "w")))
        return fail("%s: cannot write the log: %s", o.log, strerror(errno));
    int64_t done = 0;
    if (o.resume) {
        uint64_t seed = o.seed;
        if (resume_checkpoint(&p, o.resume, &done, &seed))
            return 1;
        if (o.seed_given && seed != o.seed)
            return fail("%s: the checkpoint was trained with --seed %llu, not %llu", o.resume,
                        (unsigned long long)seed, (unsigned long long)o.seed);
        o.seed = seed;
    } else {
        init_params(&p, o.seed);
    }
    if (o.init && read_file_tensors(&p, o.init, role_bit(ROLE_PARAM)))
        return 1;
    printf("fusion: model %s on device %s: %lld-byte arena, %d threads, %lld steps of %lld %s\n",
           p.manifest.model, p.manifest.device, (long long)p.manifest.arena_bytes, o.threads, (long long)o.steps,
           (long long)samples, o.inputs ? "input values" : "tokens");
    fflush(stdout);
    for (int64_t step = done + 1; step <= o.steps; step++) {
        if (!o.inputs)
            rt_data_batch(&data, o.seed, step, (int32_t *)(p.arena + p.tensors[tokens_at].t.offset),
                          (int32_t *)(p.arena + p.tensors[targets_at].t.offset), B, T);
        rt_context ctx = { step, "" };
        double t0 = now();
        if (fusion_forward_backward(p.arena, &ctx) != 0)
            return fail("step %lld: %s", (long long)step, ctx.msg);
        if (o.dump_grads && step == done + 1 &&
            write_tensors(&p, o.dump_grads, role_bit(ROLE_GRADIENT) | role_bit(ROLE_INPUT) | LOSS_ROLE, NULL))
            return 1;
        if (fusion_update(p.arena, &ctx) != 0)
            return fail("step %lld: %s", (long long)step, ctx.msg);
        double dt = now() - t0;
        float loss = p.manifest.loss >= 0 ? *(float *)(p.arena + p.tensors[p.manifest.loss].t.offset) : NAN;
        if (!isfinite(loss))
            return fail("step %lld: the loss is %f: training diverged", (long long)step, (double)loss);
        printf("step %5lld/%lld  loss %.4f  %8.0f tok/s  %7.1f ms/step\n", (long long)step, (long long)o.steps,
               (double)loss, (double)samples / dt, dt * 1e3);
        fflush(stdout);
        if (log) {   /* flushed each step: the log is read while training runs */
            fprintf(log, "{\"step\": %lld, \"loss\": %.6f, \"tokens_per_s\": %.1f, \"ms\": %.3f}\n",
                    (long long)step, (double)loss, (double)samples / dt, dt * 1e3);
            fflush(log);
        }
        if (o.save && ((o.save_every > 0 && step % o.save_every == 0) || step == o.steps) &&
            save_checkpoint(&p, o.save, step, o.seed))
            return 1;
    }
    if (log && fclose(log) != 0)
        return fail("%s: cannot finish the log", o.log);
    rt_data_free(&data);
    free(p.tensors);
    free(p.arena);
    return 0;
}
