/* main.c: the training loop of a device program (libfusion_rt_main).
 *
 * Linked with one device's generated host program (runtime/program.h), it:
 * reads the embedded manifest, allocates the arena, initialises the
 * parameters from a seed, and runs steps, each: the data loader writes the
 * inputs, fusion_step runs the schedule (forward, backward, AdamW), one
 * line of progress goes to stdout and one JSON object to the log.
 *
 *   fusion-<device> --data FILE [--steps N] [--seed S] [--log FILE] [--threads N]
 *
 * Data: a text file read as bytes (tokens 0..255); the model's first two
 * i32 inputs of shape (B,T) get, per sequence, T bytes from a position
 * drawn from (seed, step, row) and the same T bytes shifted by one (the
 * next-token targets).  Batches depend only on (seed, step): a rerun, or a
 * resumed run, sees the same data.
 *
 * What it is not yet: checkpoints, token shards, safetensors weights and
 * peers arrive with later issues.
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
#include "program.h"

/* ---- random numbers: splitmix64 seeding xoshiro256** (public domain, Vigna) ---- */

typedef struct { uint64_t s[4]; } rng;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static rng rng_seeded(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = a * 0x100000001B3ull ^ b * 0x9E3779B97F4A7C15ull ^ c * 0xC2B2AE3D27D4EB4Full;
    rng r;
    for (int i = 0; i < 4; i++)
        r.s[i] = splitmix64(&x);
    return r;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r)
{
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return result;
}

static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

static double rng_normal(rng *r)
{
    double u = rng_uniform(r), v = rng_uniform(r);
    return sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(6.283185307179586 * v);
}

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
        rng r = rng_seeded(seed, (uint64_t)i, 0x1417);
        for (int64_t k = 0, n = numel(&ti->t); k < n; k++) {
            switch (ti->init_kind) {
            case INIT_ONES:    x[k] = 1.0f; break;
            case INIT_NORMAL:  x[k] = (float)(ti->init_a * rng_normal(&r)); break;
            case INIT_UNIFORM: x[k] = (float)(ti->init_a * (2.0 * rng_uniform(&r) - 1.0)); break;
            default:           x[k] = 0.0f; break;
            }
        }
    }
}

typedef struct {
    unsigned char *bytes;
    int64_t        len;
    int32_t        tokens, targets;   /* tensor indices of the two i32 (B,T) inputs */
} text_data;

static int load_text(program *p, const char *path, text_data *d)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fail("%s: cannot open the data: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    d->bytes = malloc(len > 0 ? (size_t)len : 1);
    d->len = len > 0 && d->bytes ? (int64_t)fread(d->bytes, 1, (size_t)len, f) : 0;
    fclose(f);
    d->tokens = d->targets = -1;
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->role != ROLE_INPUT || ti->dtype != DT_I32 || ti->t.rank != 2)
            continue;
        if (d->tokens < 0)
            d->tokens = i;
        else if (d->targets < 0)
            d->targets = i;
    }
    if (d->tokens < 0 || d->targets < 0)
        return fail("the text loader needs a model with two i32 inputs of shape (B,T): tokens and targets");
    int64_t T = p->tensors[d->tokens].t.dim[1];
    if (d->len < T + 2)
        return fail("%s: %lld bytes is too short for sequences of %lld tokens", path, (long long)d->len,
                    (long long)T);
    return 0;
}

/* Fill tokens and targets for `step`: row b starts at a position drawn
 * from (seed, step, b). */
static void load_batch(program *p, const text_data *d, uint64_t seed, int64_t step)
{
    const rt_tensor *x = &p->tensors[d->tokens].t, *y = &p->tensors[d->targets].t;
    int64_t B = x->dim[0], T = x->dim[1];
    int32_t *tok = (int32_t *)(p->arena + x->offset), *tgt = (int32_t *)(p->arena + y->offset);
    for (int64_t b = 0; b < B; b++) {
        rng r = rng_seeded(seed, (uint64_t)step, (uint64_t)b + 0x5EED);
        int64_t start = (int64_t)(rng_next(&r) % (uint64_t)(d->len - T - 1));
        for (int64_t t = 0; t < T; t++) {
            tok[b * T + t] = d->bytes[start + t];
            tgt[b * T + t] = d->bytes[start + t + 1];
        }
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char usage[] =
    "usage: %s --data FILE [--steps N] [--seed S] [--log FILE] [--threads N]\n"
    "  --data FILE    training text, read as bytes\n"
    "  --steps N      training steps (default 100)\n"
    "  --seed S       seeds the parameters and the batches (default 1)\n"
    "  --log FILE     also write one JSON object per step to FILE\n"
    "  --threads N    CPU threads (default: the device's, from the cluster file)\n";

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
    const char *data_path = NULL, *log_path = NULL;
    int64_t steps = 100;
    uint64_t seed = 1;
    int threads = p.manifest.threads > 0 ? p.manifest.threads : 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0) {
            printf(usage, argv[0]);
            return 0;
        }
        if (!v) {
            fprintf(stderr, usage, argv[0]);
            return 2;
        }
        char *end = NULL;
        if (strcmp(a, "--data") == 0)
            data_path = v;
        else if (strcmp(a, "--log") == 0)
            log_path = v;
        else if (strcmp(a, "--steps") == 0 && (steps = strtoll(v, &end, 10)) >= 0 && *end == '\0')
            ;
        else if (strcmp(a, "--seed") == 0 && (seed = strtoull(v, &end, 10), *end == '\0'))
            ;
        else if (strcmp(a, "--threads") == 0 && (threads = (int)strtol(v, &end, 10)) > 0 && *end == '\0')
            ;
        else {
            fprintf(stderr, "%s: bad option or value: %s %s\n\n", argv[0], a, v);
            fprintf(stderr, usage, argv[0]);
            return 2;
        }
        i++;
    }
    if (!data_path) {
        fprintf(stderr, "%s: --data FILE is required\n\n", argv[0]);
        fprintf(stderr, usage, argv[0]);
        return 2;
    }
    p.tensors = malloc((size_t)p.manifest.n_tensors * sizeof *p.tensors + 1);
    p.arena = aligned_alloc(64, ((size_t)p.manifest.arena_bytes + 63) / 64 * 64 + 64);
    if (!p.tensors || !p.arena)
        return fail("cannot allocate the %lld-byte arena", (long long)p.manifest.arena_bytes);
    memcpy(p.tensors, fusion_tensors_blob, (size_t)p.manifest.n_tensors * sizeof *p.tensors);
    memset(p.arena, 0, (size_t)p.manifest.arena_bytes);
    kernel_threads_set(threads);

    text_data data = { 0 };
    if (load_text(&p, data_path, &data))
        return 1;
    FILE *log = NULL;
    if (log_path && !(log = fopen(log_path, "w")))
        return fail("%s: cannot write the log: %s", log_path, strerror(errno));
    init_params(&p, seed);
    const rt_tensor *tokens = &p.tensors[data.tokens].t;
    int64_t tokens_per_step = tokens->dim[0] * tokens->dim[1];
    printf("fusion: model %s on device %s: %lld-byte arena, %d threads, %lld steps of %lld tokens\n",
           p.manifest.model, p.manifest.device, (long long)p.manifest.arena_bytes, threads, (long long)steps,
           (long long)tokens_per_step);
    fflush(stdout);
    for (int64_t step = 1; step <= steps; step++) {
        load_batch(&p, &data, seed, step);
        rt_context ctx = { step, "" };
        double t0 = now();
        if (fusion_step(p.arena, &ctx) != 0)
            return fail("step %lld: %s", (long long)step, ctx.msg);
        double dt = now() - t0;
        float loss = p.manifest.loss >= 0 ? *(float *)(p.arena + p.tensors[p.manifest.loss].t.offset) : NAN;
        if (!isfinite(loss))
            return fail("step %lld: the loss is %f: training diverged", (long long)step, (double)loss);
        printf("step %5lld/%lld  loss %.4f  %8.0f tok/s  %7.1f ms/step\n", (long long)step, (long long)steps,
               (double)loss, (double)tokens_per_step / dt, dt * 1e3);
        fflush(stdout);
        if (log)
            fprintf(log, "{\"step\": %lld, \"loss\": %.6f, \"tokens_per_s\": %.1f, \"ms\": %.3f}\n",
                    (long long)step, (double)loss, (double)tokens_per_step / dt, dt * 1e3);
    }
    if (log && fclose(log) != 0)
        return fail("%s: cannot finish the log", log_path);
    free(data.bytes);
    free(p.tensors);
    free(p.arena);
    return 0;
}
