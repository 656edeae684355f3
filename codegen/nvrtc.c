/* nvrtc.c: NVRTC through dlopen, and the kernel cache (see nvrtc.h).
 *
 * The compiles of a module (a CUBIN an arch, the newest's PTX) run on a
 * thread each: NVRTC allows concurrent calls on distinct programs, and a
 * cold GPT-2 compile is mostly this.  The kernels include
 * the toolkit's cuda_bf16.h and cuda_fp16.h (find_include).
 */
#define _GNU_SOURCE
#include "nvrtc.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "../runtime/atomic_file.h"

#ifndef FUSION_CUDA_HOME
#define FUSION_CUDA_HOME "/usr/local/cuda"
#endif

/* The few NVRTC entry points used, declared here so that building fusion
 * needs no CUDA header (nvrtcResult is an int enum, 0 = success). */
typedef struct nvrtc_program_s *nvrtc_program;
typedef struct {
    int (*version)(int *major, int *minor);
    int (*create)(nvrtc_program *prog, const char *src, const char *name, int n_headers, const char *const *headers,
                  const char *const *include_names);
    int (*destroy)(nvrtc_program *prog);
    int (*compile)(nvrtc_program prog, int n_options, const char *const *options);
    int (*log_size)(nvrtc_program prog, size_t *size);
    int (*log)(nvrtc_program prog, char *log);
    int (*cubin_size)(nvrtc_program prog, size_t *size);
    int (*cubin)(nvrtc_program prog, char *cubin);
    int (*ptx_size)(nvrtc_program prog, size_t *size);
    int (*ptx)(nvrtc_program prog, char *ptx);
    const char *(*error_string)(int result);
    int (*n_archs)(int *n);   /* nvrtcGetNumSupportedArchs (NVRTC 11.2+; NULL before) */
    int (*archs)(int *archs); /* nvrtcGetSupportedArchs                                   */
    int major, minor;
    char version_text[32];
    char where[FU_PATH_BYTES];
    char include_opt[FU_PATH_BYTES + 104]; /* "-I<dir>": the toolkit's cuda_bf16.h, cuda_fp16.h */
} nvrtc_api;

static nvrtc_api api;
static int api_state; /* 0 not tried, 1 loaded, -1 failed */
static char api_error[FU_PATH_BYTES + 304];
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void *open_first(char *where, size_t where_len)
{
    char paths[6][FU_PATH_BYTES];
    int n = 0;
    const char *env = getenv("FUSION_NVRTC"), *home = getenv("CUDA_HOME");
    if (env && *env)
        snprintf(paths[n++], sizeof paths[0], "%s", env);
    if (home && *home)
        snprintf(paths[n++], sizeof paths[0], "%s/lib64/libnvrtc.so", home);
    snprintf(paths[n++], sizeof paths[0], "%s/lib64/libnvrtc.so", FUSION_CUDA_HOME);
    snprintf(paths[n++], sizeof paths[0], "/usr/local/cuda/lib64/libnvrtc.so");
    snprintf(paths[n++], sizeof paths[0], "libnvrtc.so");
    for (int i = 0; i < n; i++) {
        void *h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(where, where_len, "%.4000s", paths[i]);
            return h;
        }
    }
    return NULL;
}

/* The kernels include cuda_bf16.h and cuda_fp16.h (cuda_kernels.c's
 * prelude), which NVRTC does not carry: the toolkit's include folder, found
 * beside the library NVRTC was loaded from (DIR/lib64/libnvrtc.so ->
 * DIR/include), else under $CUDA_HOME, FUSION_CUDA_HOME, /usr/local/cuda. */
static int find_include(char *opt, size_t len, const char *where)
{
    char dirs[4][FU_PATH_BYTES];
    int n = 0;
    const char *home = getenv("CUDA_HOME");
    char real[FU_PATH_BYTES];
    if (realpath(where, real)) {
        char *slash = strrchr(real, '/');
        if (slash) {
            *slash = '\0';
            slash = strrchr(real, '/');
            if (slash) {
                *slash = '\0';
                snprintf(dirs[n++], sizeof dirs[0], "%.4000s/include", real);
            }
        }
    }
    if (home && *home)
        snprintf(dirs[n++], sizeof dirs[0], "%.4000s/include", home);
    snprintf(dirs[n++], sizeof dirs[0], "%s/include", FUSION_CUDA_HOME);
    snprintf(dirs[n++], sizeof dirs[0], "/usr/local/cuda/include");
    for (int i = 0; i < n; i++) {
        char probe[FU_PATH_BYTES + 104];
        snprintf(probe, sizeof probe, "%.4096s/cuda_bf16.h", dirs[i]);
        if (access(probe, R_OK) == 0) {
            snprintf(opt, len, "-I%.4096s", dirs[i]);
            return 0;
        }
    }
    return -1;
}

static void load_api(void)
{
    void *h = open_first(api.where, sizeof api.where);
    if (!h) {
        snprintf(api_error, sizeof api_error,
                 "NVRTC (libnvrtc.so) not found: a CUDA device needs the CUDA toolkit on the machine that compiles "
                 "(looked in $FUSION_NVRTC, $CUDA_HOME/lib64, %s/lib64, /usr/local/cuda/lib64 and the loader's path)",
                 FUSION_CUDA_HOME);
        api_state = -1;
        return;
    }
    struct {
        void **slot;
        const char *name;
    } syms[] = {
        { (void **)&api.version, "nvrtcVersion" },
        { (void **)&api.create, "nvrtcCreateProgram" },
        { (void **)&api.destroy, "nvrtcDestroyProgram" },
        { (void **)&api.compile, "nvrtcCompileProgram" },
        { (void **)&api.log_size, "nvrtcGetProgramLogSize" },
        { (void **)&api.log, "nvrtcGetProgramLog" },
        { (void **)&api.cubin_size, "nvrtcGetCUBINSize" },
        { (void **)&api.cubin, "nvrtcGetCUBIN" },
        { (void **)&api.ptx_size, "nvrtcGetPTXSize" },
        { (void **)&api.ptx, "nvrtcGetPTX" },
        { (void **)&api.error_string, "nvrtcGetErrorString" },
    };
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(api_error, sizeof api_error, "%s: no %s (NVRTC 11.1 or later is needed for CUBIN output)",
                     api.where, syms[i].name);
            api_state = -1;
            return;
        }
    }
    api.n_archs = (int (*)(int *))dlsym(h, "nvrtcGetNumSupportedArchs");
    api.archs = (int (*)(int *))dlsym(h, "nvrtcGetSupportedArchs");
    if (api.version(&api.major, &api.minor) != 0) {
        snprintf(api_error, sizeof api_error, "%s: nvrtcVersion failed", api.where);
        api_state = -1;
        return;
    }
    snprintf(api.version_text, sizeof api.version_text, "%d.%d", api.major, api.minor);
    if (find_include(api.include_opt, sizeof api.include_opt, api.where)) {
        snprintf(api_error, sizeof api_error,
                 "%s: found NVRTC but not the CUDA headers beside it (cuda_bf16.h, cuda_fp16.h: looked in its "
                 "toolkit's include/, $CUDA_HOME/include, %s/include and /usr/local/cuda/include)",
                 api.where, FUSION_CUDA_HOME);
        api_state = -1;
        return;
    }
    api_state = 1;
}

static int api_ready(struct diag *err)
{
    pthread_once(&api_once, load_api);
    if (api_state != 1)
        return diag_set(err, "nvrtc", 0, "%s", api_error);
    return 0;
}

const char *nvrtc_version_string(struct diag *err) { return api_ready(err) ? NULL : api.version_text; }

int nvrtc_supported_sms(int *sms, int max, struct diag *err)
{
    if (api_ready(err))
        return -1;
    int n = 0, all[128];
    if (!api.n_archs || !api.archs || api.n_archs(&n) != 0 || n <= 0 || n > 128 || api.archs(all) != 0)
        return diag_set(err, api.where, 0, "NVRTC %s does not say which GPUs it compiles for (11.2 or later does)",
                        api.version_text);
    int k = 0;
    for (int i = 0; i < n && k < max; i++)
        sms[k++] = all[i];
    return k;
}

/* ---- one compile ---------------------------------------------------------- */

typedef struct {
    const char *source, *name;
    char arch[16]; /* "sm_80" (CUBIN) or "compute_80" (PTX) */
    int want_ptx;
    char *image;
    size_t bytes;
    char error[FU_PATH_BYTES];
} compile_job;

static void *compile_one(void *arg)
{
    compile_job *j = arg;
    nvrtc_program prog = NULL;
    char arch_opt[64];
    snprintf(arch_opt, sizeof arch_opt, "--gpu-architecture=%s", j->arch);
    const char *options[] = { arch_opt, "--std=c++17", "-default-device", api.include_opt };
    int rc = api.create(&prog, j->source, j->name, 0, NULL, NULL);
    if (rc != 0) {
        snprintf(j->error, sizeof j->error, "nvrtcCreateProgram: %s", api.error_string(rc));
        return NULL;
    }
    rc = api.compile(prog, 4, options);
    if (rc != 0) {
        size_t n = 0;
        api.log_size(prog, &n);
        char *log = malloc(n + 1);
        if (log && api.log(prog, log) == 0) {
            log[n] = '\0';
            for (char *c = log; *c; c++) /* one line for the message */
                if (*c == '\n')
                    *c = ' ';
        }
        snprintf(j->error, sizeof j->error, "NVRTC (%s) could not compile the kernels: %.3900s", j->arch,
                 log ? log : api.error_string(rc));
        free(log);
        api.destroy(&prog);
        return NULL;
    }
    size_t n = 0;
    rc = j->want_ptx ? api.ptx_size(prog, &n) : api.cubin_size(prog, &n);
    if (rc == 0 && (j->image = malloc(n + 1)) != NULL)
        rc = j->want_ptx ? api.ptx(prog, j->image) : api.cubin(prog, j->image);
    if (rc != 0 || !j->image)
        snprintf(j->error, sizeof j->error, "NVRTC (%s): cannot read the %s back", j->arch,
                 j->want_ptx ? "PTX" : "CUBIN");
    else
        j->bytes = n;
    api.destroy(&prog);
    return NULL;
}

/* ---- the cache -------------------------------------------------------------- */

#define CACHE_MAGIC "fusion-kernels-2" /* 2: any archs (1: sm_80, sm_90, compute_80) */

static int cache_dir(char *dir, size_t len)
{
    const char *env = getenv("FUSION_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (env && strcmp(env, "off") == 0)
        return -1;
    if (env && *env)
        snprintf(dir, len, "%s", env);
    else if (xdg && *xdg)
        snprintf(dir, len, "%s/fusion", xdg);
    else if (home && *home)
        snprintf(dir, len, "%s/.cache/fusion", home);
    else
        return -1;
    /* mkdir -p, quietly: a cache that cannot be made is just not used */
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0755);
            *p = '/';
        }
    return mkdir(dir, 0755) == 0 || errno == EEXIST ? 0 : -1;
}

/* A cache file: the magic, n (the CUBINs), then n pairs (sm, bytes), the
 * PTX's (sm, bytes), all u64, then the images in that order. */
static int cache_read(const char *path, nvrtc_images *im)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char magic[16];
    uint64_t n = 0, head[2 * (NVRTC_MAX_ARCHS + 1)];
    int ok = fread(magic, 1, 16, f) == 16 && memcmp(magic, CACHE_MAGIC, 16) == 0 && fread(&n, 8, 1, f) == 1 &&
             n <= NVRTC_MAX_ARCHS && fread(head, 8, 2 * (n + 1), f) == 2 * (n + 1);
    for (uint64_t k = 0; ok && k <= n; k++)
        ok = head[2 * k] < 1000 && head[2 * k + 1] < (1u << 30) && head[2 * k + 1] > 0;
    if (ok) {
        im->n_cubins = (int)n;
        for (uint64_t k = 0; ok && k < n; k++) {
            im->sm[k] = (int)head[2 * k];
            im->cubin_bytes[k] = head[2 * k + 1];
            ok = (im->cubin[k] = malloc(head[2 * k + 1] + 1)) != NULL &&
                 fread(im->cubin[k], 1, head[2 * k + 1], f) == head[2 * k + 1];
        }
        im->ptx_sm = (int)head[2 * n];
        im->ptx_bytes = head[2 * n + 1];
        ok = ok && (im->ptx = malloc(im->ptx_bytes + 1)) != NULL &&
             fread(im->ptx, 1, im->ptx_bytes, f) == im->ptx_bytes && fgetc(f) == EOF &&
             im->ptx[im->ptx_bytes - 1] == '\0';
    }
    fclose(f);
    if (!ok)
        nvrtc_images_free(im);
    return ok ? 0 : -1;
}

static void cache_write(const char *path, const nvrtc_images *im)
{
    atomic_file af;
    char why[FU_PATH_BYTES + 200];
    FILE *f = atomic_open(&af, path, why, sizeof why);
    if (!f)
        return; /* a cache: the next compile makes it again */
    uint64_t n = (uint64_t)im->n_cubins, head[2 * (NVRTC_MAX_ARCHS + 1)];
    for (int k = 0; k < im->n_cubins; k++)
        head[2 * k] = (uint64_t)im->sm[k], head[2 * k + 1] = im->cubin_bytes[k];
    head[2 * n] = (uint64_t)im->ptx_sm, head[2 * n + 1] = im->ptx_bytes;
    int ok = fwrite(CACHE_MAGIC, 1, 16, f) == 16 && fwrite(&n, 8, 1, f) == 1 &&
             fwrite(head, 8, 2 * (n + 1), f) == 2 * (n + 1);
    for (int k = 0; ok && k < im->n_cubins; k++)
        ok = fwrite(im->cubin[k], 1, im->cubin_bytes[k], f) == im->cubin_bytes[k];
    ok = ok && fwrite(im->ptx, 1, im->ptx_bytes, f) == im->ptx_bytes;
    if (!ok)
        atomic_abort(&af);
    else
        atomic_commit(&af, 0, why, sizeof why);
}

/* ---- the entry point ----------------------------------------------------------- */

void nvrtc_images_free(nvrtc_images *im)
{
    for (int k = 0; k < NVRTC_MAX_ARCHS; k++)
        free(im->cubin[k]);
    free(im->ptx);
    memset(im, 0, sizeof *im);
}

static int ascending(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int nvrtc_compile(const char *source, const char *module_name, const int *sms_in, int n_sms, nvrtc_images *out,
                  struct diag *err)
{
    memset(out, 0, sizeof *out);
    if (n_sms < 1 || n_sms > NVRTC_MAX_ARCHS)
        return diag_set(err, module_name, 0, "%d GPU architectures asked for: 1 to %d can be", n_sms, NVRTC_MAX_ARCHS);
    if (api_ready(err))
        return -1;
    int sms[NVRTC_MAX_ARCHS];
    memcpy(sms, sms_in, (size_t)n_sms * sizeof *sms);
    qsort(sms, (size_t)n_sms, sizeof *sms, ascending);
    int distinct = 0;
    for (int k = 0; k < n_sms; k++)
        if (distinct == 0 || sms[k] != sms[distinct - 1])
            sms[distinct++] = sms[k];
    n_sms = distinct;
    /* The key: the source, what it is compiled for, and by which NVRTC. */
    char salt[256], dir[FU_PATH_BYTES], path[FU_PATH_BYTES + 204];
    int at = snprintf(salt, sizeof salt, "%s|nvrtc %s|c++17|", CACHE_MAGIC, api.version_text);
    for (int k = 0; k < n_sms && at > 0 && (size_t)at < sizeof salt; k++)
        at += snprintf(salt + at, sizeof salt - (size_t)at, "sm_%d ", sms[k]);
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return diag_set(err, module_name, 0, "out of memory");
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, salt, strlen(salt));
    XXH3_128bits_update(st, api.include_opt, strlen(api.include_opt)); /* whose headers */
    XXH3_128bits_update(st, source, strlen(source));
    XXH128_hash_t key = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    int cached = cache_dir(dir, sizeof dir) == 0;
    if (cached) {
        snprintf(path, sizeof path, "%s/%016llx%016llx.fkm", dir, (unsigned long long)key.high64,
                 (unsigned long long)key.low64);
        if (cache_read(path, out) == 0) {
            out->from_cache = 1;
            return 0;
        }
    }
    /* a CUBIN an arch, then the newest arch's PTX: a thread each */
    compile_job jobs[NVRTC_MAX_ARCHS + 1];
    pthread_t threads[NVRTC_MAX_ARCHS + 1];
    int started[NVRTC_MAX_ARCHS + 1] = { 0 }, n_jobs = n_sms + 1;
    memset(jobs, 0, sizeof jobs);
    for (int k = 0; k < n_jobs; k++) {
        jobs[k].source = source, jobs[k].name = module_name, jobs[k].want_ptx = k == n_sms;
        snprintf(jobs[k].arch, sizeof jobs[k].arch, "%s_%d", k == n_sms ? "compute" : "sm",
                 k == n_sms ? sms[n_sms - 1] : sms[k]);
    }
    for (int i = 0; i < n_jobs; i++)
        started[i] = pthread_create(&threads[i], NULL, compile_one, &jobs[i]) == 0;
    for (int i = 0; i < n_jobs; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            compile_one(&jobs[i]);
    }
    int rc = 0;
    for (int i = 0; i < n_jobs && rc == 0; i++)
        if (jobs[i].error[0])
            rc = diag_set(err, module_name, 0, "%s", jobs[i].error);
    if (rc) {
        for (int i = 0; i < n_jobs; i++)
            free(jobs[i].image);
        return -1;
    }
    out->n_cubins = n_sms;
    for (int k = 0; k < n_sms; k++) {
        out->sm[k] = sms[k];
        out->cubin[k] = (unsigned char *)jobs[k].image;
        out->cubin_bytes[k] = jobs[k].bytes;
    }
    out->ptx_sm = sms[n_sms - 1];
    out->ptx = jobs[n_sms].image;
    out->ptx_bytes = jobs[n_sms].bytes; /* nvrtcGetPTXSize counts the NUL */
    if (out->ptx_bytes == 0 || out->ptx[out->ptx_bytes - 1] != '\0') {
        out->ptx[out->ptx_bytes] = '\0';
        out->ptx_bytes++;
    }
    if (cached)
        cache_write(path, out);
    return 0;
}
