/* bundle.c: the linker driver and bundle writer (see bundle.h).
 *
 * Per device: the host program's object (llvm_host.c) is linked by the C
 * compiler with libfusion_rt_main (main, the training loop) and
 * libfusion_rt_cpu (kernels) into a temporary file in the device's folder,
 * then renamed to fusion-<device>: a failed compile never leaves an
 * executable that looks whole.
 */
#include "bundle.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../passes/passes.h"
#include "llvm_host.h"

#ifndef FUSION_CC
#define FUSION_CC "cc"
#endif
#ifndef FUSION_RT_MAIN_LIB
#define FUSION_RT_MAIN_LIB "libfusion_rt_main.a"
#endif
#ifndef FUSION_RT_CPU_LIB
#define FUSION_RT_CPU_LIB "libfusion_rt_cpu.a"
#endif
#ifndef FUSION_LINK_FLAGS
#define FUSION_LINK_FLAGS "-lopenblas -fopenmp -lm"
#endif

const bundle_toolchain *bundle_default_toolchain(void)
{
    static const bundle_toolchain tc = { FUSION_CC, { FUSION_RT_MAIN_LIB, FUSION_RT_CPU_LIB, NULL }, FUSION_LINK_FLAGS };
    return &tc;
}

static int make_dir(const char *path, struct diag *err)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    return diag_set(err, path, 0, "cannot create the folder: %s", strerror(errno));
}

/* Run argv (no shell); 0 when it exits 0. */
static int run_command(char *const argv[], struct diag *err, const char *what)
{
    pid_t pid = fork();
    if (pid < 0)
        return diag_set(err, what, 0, "cannot start %s: %s", argv[0], strerror(errno));
    if (pid == 0) {
        execvp(argv[0], argv);
        fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return diag_set(err, what, 0, "%s failed (exit status %d)", argv[0],
                        WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}

static int link_executable(const bundle_toolchain *tc, const char *object, const char *output, struct diag *err)
{
    char flags[1024];
    snprintf(flags, sizeof flags, "%s", tc->link_flags);
    char *argv[64];
    int n = 0;
    argv[n++] = (char *)tc->cc;
    argv[n++] = (char *)object;
    for (int i = 0; i < 4 && tc->runtime_libs[i]; i++)
        argv[n++] = (char *)tc->runtime_libs[i];
    for (char *tok = strtok(flags, " "); tok && n < 60; tok = strtok(NULL, " "))
        argv[n++] = tok;
    argv[n++] = "-o";
    argv[n++] = (char *)output;
    argv[n] = NULL;
    return run_command(argv, err, output);
}

static int write_manifest_text(const ir_graph *g, const cluster_device *dev, int64_t arena, const char *path,
                               struct diag *err)
{
    char tmp[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return diag_set(err, path, 0, "path too long");
    FILE *f = fopen(tmp, "w");
    if (!f)
        return diag_set(err, path, 0, "cannot write: %s", strerror(errno));
    fprintf(f, "model      %s\ndevice     %s (%s, %d threads)\narena      %lld bytes\n", ir_str(g, g->name),
            dev->name, dev->kind == DEVICE_CPU ? "cpu" : "cuda", dev->threads, (long long)arena);
    for (int32_t v = 0; v < g->n_values; v++) {
        const ir_value *val = &g->values[v];
        if (val->producer >= 0)
            continue;
        char shape[256];
        fprintf(f, "%-6s %s %s%s at %lld\n", ir_role_name(val->role), ir_value_name(g, v), ir_dtype_name(val->dtype),
                ir_shape_str(&val->shape, shape, sizeof shape), (long long)val->offset);
    }
    int ok = fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return diag_set(err, path, 0, "cannot write the manifest");
    }
    return 0;
}

int bundle_write(const ir_graph *g, const cluster *c, const char *out_dir, const bundle_toolchain *tc,
                 struct diag *err)
{
    if (c->n_devices != 1)
        return diag_set(err, c->file, 0,
                        "this cluster has %d devices; compiling for more than one device needs the fence and comm "
                        "passes, which are not written yet: use a one-device cluster (clusters/local-1.xml)",
                        c->n_devices);
    const cluster_device *dev = &c->devices[0];
    if (dev->kind != DEVICE_CPU)
        return diag_set(err, c->file, dev->line, "device '%s' is a CUDA device: only CPU devices compile so far",
                        dev->name);
    char dir[4096], object[4096], tmp[4096], exe[4096], manifest[4096];
    long pid = (long)getpid();
    if (snprintf(dir, sizeof dir, "%s/%s", out_dir, dev->name) >= (int)sizeof dir ||
        snprintf(object, sizeof object, "%s/.fusion-%s.%ld.o", dir, dev->name, pid) >= (int)sizeof object ||
        snprintf(tmp, sizeof tmp, "%s/.fusion-%s.%ld.tmp", dir, dev->name, pid) >= (int)sizeof tmp ||
        snprintf(exe, sizeof exe, "%s/fusion-%s", dir, dev->name) >= (int)sizeof exe ||
        snprintf(manifest, sizeof manifest, "%s/manifest.txt", dir) >= (int)sizeof manifest)
        return diag_set(err, out_dir, 0, "the output folder's path is too long");
    if (make_dir(out_dir, err) || make_dir(dir, err))
        return -1;
    int64_t arena = memory_arena_bytes(g, 0);
    llvm_device_info info = { 0, dev->name, arena, dev->threads, dev->slowdown };
    int rc = llvm_emit_device(g, &info, object, err);
    if (rc == 0)
        rc = link_executable(tc, object, tmp, err);
    unlink(object);
    if (rc == 0 && rename(tmp, exe) != 0)
        rc = diag_set(err, exe, 0, "cannot rename the linked program into place: %s", strerror(errno));
    if (rc != 0)
        unlink(tmp);
    if (rc == 0)
        rc = write_manifest_text(g, dev, arena, manifest, err);
    return rc;
}
