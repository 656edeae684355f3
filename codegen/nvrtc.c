/* nvrtc.c: NVRTC through dlopen, and the kernel cache (see nvrtc.h).
 *
 * The three compiles of a module (sm_80 CUBIN, sm_90 CUBIN, compute_80
 * PTX) run on three threads: NVRTC allows concurrent calls on distinct
 * programs, and a cold GPT-2 compile is mostly this.  The kernels include
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

/* ---- one compile ---------------------------------------------------------- */

typedef struct {
    const char *source, *name, *arch; /* "sm_80" (CUBIN) or "compute_80" (PTX) */
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

#define CACHE_MAGIC "fusion-kernels-1"

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

static int cache_read(const char *path, nvrtc_images *im)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char magic[16];
    uint64_t len[3];
    int ok = fread(magic, 1, 16, f) == 16 && memcmp(magic, CACHE_MAGIC, 16) == 0 && fread(len, 8, 3, f) == 3 &&
             len[0] < (1u << 30) && len[1] < (1u << 30) && len[2] < (1u << 30) && len[2] > 0;
    if (ok) {
        im->cubin_sm80 = malloc(len[0] + 1);
        im->cubin_sm90 = malloc(len[1] + 1);
        im->ptx = malloc(len[2] + 1);
        ok = im->cubin_sm80 && im->cubin_sm90 && im->ptx && fread(im->cubin_sm80, 1, len[0], f) == len[0] &&
             fread(im->cubin_sm90, 1, len[1], f) == len[1] && fread(im->ptx, 1, len[2], f) == len[2] &&
             fgetc(f) == EOF && im->ptx[len[2] - 1] == '\0';
        im->cubin_sm80_bytes = len[0];
        im->cubin_sm90_bytes = len[1];
        im->ptx_bytes = len[2];
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
    uint64_t len[3] = { im->cubin_sm80_bytes, im->cubin_sm90_bytes, im->ptx_bytes };
    int ok = fwrite(CACHE_MAGIC, 1, 16, f) == 16 && fwrite(len, 8, 3, f) == 3 &&
             fwrite(im->cubin_sm80, 1, len[0], f) == len[0] && fwrite(im->cubin_sm90, 1, len[1], f) == len[1] &&
             fwrite(im->ptx, 1, len[2], f) == len[2];
    if (!ok)
        atomic_abort(&af);
    else
        atomic_commit(&af, 0, why, sizeof why);
}

/* ---- the entry point ----------------------------------------------------------- */

void nvrtc_images_free(nvrtc_images *im)
{
    free(im->cubin_sm80);
    free(im->cubin_sm90);
    free(im->ptx);
    memset(im, 0, sizeof *im);
}

int nvrtc_compile(const char *source, const char *module_name, nvrtc_images *out, struct diag *err)
{
    memset(out, 0, sizeof *out);
    if (api_ready(err))
        return -1;
    /* The key: the source, what it is compiled for, and by which NVRTC. */
    char salt[128], dir[FU_PATH_BYTES], path[FU_PATH_BYTES + 204];
    snprintf(salt, sizeof salt, "%s|nvrtc %s|sm_80 sm_90 compute_80|c++17", CACHE_MAGIC, api.version_text);
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
    compile_job jobs[3] = {
        { source, module_name, "sm_80", 0, NULL, 0, "" },
        { source, module_name, "sm_90", 0, NULL, 0, "" },
        { source, module_name, "compute_80", 1, NULL, 0, "" },
    };
    pthread_t threads[3];
    int started[3] = { 0 };
    for (int i = 0; i < 3; i++)
        started[i] = pthread_create(&threads[i], NULL, compile_one, &jobs[i]) == 0;
    for (int i = 0; i < 3; i++) {
        if (started[i])
            pthread_join(threads[i], NULL);
        else
            compile_one(&jobs[i]);
    }
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        if (jobs[i].error[0])
            rc = diag_set(err, module_name, 0, "%s", jobs[i].error);
    if (rc) {
        for (int i = 0; i < 3; i++)
            free(jobs[i].image);
        return -1;
    }
    out->cubin_sm80 = (unsigned char *)jobs[0].image;
    out->cubin_sm80_bytes = jobs[0].bytes;
    out->cubin_sm90 = (unsigned char *)jobs[1].image;
    out->cubin_sm90_bytes = jobs[1].bytes;
    out->ptx = jobs[2].image;
    out->ptx_bytes = jobs[2].bytes; /* nvrtcGetPTXSize counts the NUL */
    if (out->ptx_bytes == 0 || out->ptx[out->ptx_bytes - 1] != '\0') {
        out->ptx[out->ptx_bytes] = '\0';
        out->ptx_bytes++;
    }
    if (cached)
        cache_write(path, out);
    return 0;
}
