/* main.c: the training loop of a device program (libfusion_rt_main).
 *
 * Linked with one device's generated host program (runtime/program.h), it:
 * reads the embedded manifest, allocates the arena, initialises the
 * parameters from a seed, and runs steps, each: the data loader writes the
 * inputs, fusion_step runs the schedule (forward, backward, AdamW), one
 * line of progress goes to stdout and one JSON object to the log.
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
#include <time.h>
#include <unistd.h>

#include "../ir/ir.h"
#include "cpu/kernels.h"
#include "data.h"
#include "program.h"

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

static const char usage[] =
    "usage: %s --data FILE [--data FILE]... [--steps N] [--seed S] [--log FILE] [--threads N]\n"
    "  --data FILE    training data: text (bytes) or llm.c token shards; repeat to concatenate\n"
    "  --steps N      training steps (default 100)\n"
    "  --seed S       seeds the parameters and the batches (default 1)\n"
    "  --log FILE     also write one JSON object per step to FILE\n"
    "  --threads N    CPU threads (default: the device's, from the cluster file)\n";

typedef struct {
    const char *data[64];
    int         n_data;
    const char *log;
    int64_t     steps;
    uint64_t    seed;
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
        else if (strcmp(a, "--steps") == 0 && (o->steps = strtoll(v, &end, 10)) >= 0 && *end == '\0')
            ;
        else if (strcmp(a, "--seed") == 0 && (o->seed = strtoull(v, &end, 10), *end == '\0' && v[0] != '-'))
            ;
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
    if (o->n_data == 0) {
        fprintf(stderr, "%s: --data FILE is required\n\n", argv[0]);
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

    int32_t tokens_at, targets_at;
    if (find_token_inputs(&p, &tokens_at, &targets_at))
        return 1;
    const rt_tensor *tokens = &p.tensors[tokens_at].t, *targets = &p.tensors[targets_at].t;
    int64_t B = tokens->dim[0], T = tokens->dim[1];
    rt_data data = { 0 };
    char why[512];
    for (int i = 0; i < o.n_data; i++)
        if (rt_data_load(&data, o.data[i], why, sizeof why))
            return fail("%s", why);
    if (data.n < T + 2)
        return fail("%s: %lld tokens is too few for sequences of %lld", o.data[0], (long long)data.n, (long long)T);
    FILE *log = NULL;
    if (o.log && !(log = fopen(o.log, "w")))
        return fail("%s: cannot write the log: %s", o.log, strerror(errno));
    init_params(&p, o.seed);
    printf("fusion: model %s on device %s: %lld-byte arena, %d threads, %lld steps of %lld tokens\n",
           p.manifest.model, p.manifest.device, (long long)p.manifest.arena_bytes, o.threads, (long long)o.steps,
           (long long)(B * T));
    fflush(stdout);
    for (int64_t step = 1; step <= o.steps; step++) {
        rt_data_batch(&data, o.seed, step, (int32_t *)(p.arena + tokens->offset),
                      (int32_t *)(p.arena + targets->offset), B, T);
        rt_context ctx = { step, "" };
        double t0 = now();
        if (fusion_step(p.arena, &ctx) != 0)
            return fail("step %lld: %s", (long long)step, ctx.msg);
        double dt = now() - t0;
        float loss = p.manifest.loss >= 0 ? *(float *)(p.arena + p.tensors[p.manifest.loss].t.offset) : NAN;
        if (!isfinite(loss))
            return fail("step %lld: the loss is %f: training diverged", (long long)step, (double)loss);
        printf("step %5lld/%lld  loss %.4f  %8.0f tok/s  %7.1f ms/step\n", (long long)step, (long long)o.steps,
               (double)loss, (double)(B * T) / dt, dt * 1e3);
        fflush(stdout);
        if (log)
            fprintf(log, "{\"step\": %lld, \"loss\": %.6f, \"tokens_per_s\": %.1f, \"ms\": %.3f}\n",
                    (long long)step, (double)loss, (double)(B * T) / dt, dt * 1e3);
    }
    if (log && fclose(log) != 0)
        return fail("%s: cannot finish the log", o.log);
    rt_data_free(&data);
    free(p.tensors);
    free(p.arena);
    return 0;
}
