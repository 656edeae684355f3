/* bundle_libs.c: see bundle_libs.h. */
#define _GNU_SOURCE
#include "bundle_libs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "process.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

int bundle_lib_is_libc(const char *name)
{
    static const char *const own[] = { "libc.so",    "libm.so",   "libpthread.so", "libdl.so",
                                       "librt.so",   "libanl.so", "libresolv.so",  "libutil.so",
                                       "libmvec.so", "ld-linux",  "linux-vdso",    "linux-gate" };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (strncmp(name, own[i], strlen(own[i])) == 0)
            return 1;
    return 0;
}

int bundle_copy_file(const char *src, const char *dst, struct diag *err)
{
    char tmp[FU_PATH_BYTES + 604];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dst, (long)getpid());
    int in = open(src, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (in < 0 || fstat(in, &st) != 0) {
        if (in >= 0)
            close(in);
        return diag_set(err, src, 0, "cannot read it to copy it into the bundle: %s", strerror(errno));
    }
    int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, st.st_mode & 0777);
    if (out < 0) {
        close(in);
        return diag_set(err, tmp, 0, "cannot write: %s", strerror(errno));
    }
    char buf[1 << 16];
    ssize_t got;
    int ok = 1;
    while (ok && (got = read(in, buf, sizeof buf)) != 0) {
        if (got < 0) {
            ok = errno == EINTR;
            continue;
        }
        for (ssize_t at = 0; ok && at < got;) {
            ssize_t put = write(out, buf + at, (size_t)(got - at));
            ok = put > 0 || (put < 0 && errno == EINTR);
            at += put > 0 ? put : 0;
        }
    }
    int saved = errno;
    close(in);
    ok &= close(out) == 0;
    if (!ok || rename(tmp, dst) != 0) {
        unlink(tmp);
        return diag_set(err, dst, 0, "cannot copy %s here: %s", src, strerror(ok ? errno : saved));
    }
    return 0;
}

/* dst as a hard link to first (temporary name, then rename), else a copy. */
static int link_or_copy(const char *first, const char *dst, struct diag *err)
{
    char tmp[FU_PATH_BYTES + 604];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dst, (long)getpid());
    unlink(tmp);
    if (link(first, tmp) == 0) {
        int renamed = rename(tmp, dst) == 0;
        unlink(tmp); /* left in place when dst already was that file (rename(2) then does nothing) */
        if (renamed)
            return 0;
    }
    return bundle_copy_file(first, dst, err);
}

static int remember(bundle_libs *seen, const char *name, const char *path)
{
    if (seen->n == seen->cap) {
        int cap = seen->cap ? seen->cap * 2 : 16;
        char(*names)[256] = realloc(seen->name, (size_t)cap * sizeof *names);
        if (names)
            seen->name = names;
        char(*paths)[FU_PATH_BYTES + 504] = names ? realloc(seen->path, (size_t)cap * sizeof *paths) : NULL;
        if (!paths)
            return -1;
        seen->path = paths;
        seen->cap = cap;
    }
    snprintf(seen->name[seen->n], sizeof seen->name[0], "%s", name);
    snprintf(seen->path[seen->n], sizeof seen->path[0], "%s", path);
    seen->n++;
    return 0;
}

/* name (found at path) into lib_dir: a link to (or copy of) this compile's
 * first one, else a copy of path, or with link_first a hard link to path
 * itself where the file system allows (a copy where it does not). */
static int bundle_one(bundle_libs *seen, const char *name, const char *path, const char *lib_dir, int link_first,
                      struct diag *err)
{
    char dst[FU_PATH_BYTES + 404];
    snprintf(dst, sizeof dst, "%s/%s", lib_dir, name);
    int known = -1;
    for (int i = 0; i < seen->n && known < 0; i++)
        if (strcmp(seen->name[i], name) == 0)
            known = i;
    if (known >= 0)
        return strcmp(seen->path[known], dst) != 0 ? link_or_copy(seen->path[known], dst, err) : 0;
    char real[FU_PATH_BYTES];
    if (link_first && !realpath(path, real)) /* link(2) would link a symbolic link itself */
        return diag_set(err, path, 0, "cannot read the library to bundle: %s", strerror(errno));
    int rc = link_first ? link_or_copy(real, dst, err) : bundle_copy_file(path, dst, err);
    if (rc == 0 && remember(seen, name, dst))
        rc = diag_set(err, dst, 0, "out of memory");
    return rc;
}

/* Bundle what ldd resolves for `object` (an executable or a library) into
 * lib_dir, but the C library's own files; link_first: for names starting
 * so (bundle_one). */
static int bundle_needed(bundle_libs *seen, const char *object, const char *lib_dir, const char *link_first,
                         struct diag *err)
{
    char *listing = NULL;
    char *argv[] = { "ldd", (char *)object, NULL };
    if (run_capture(argv, &listing, err, object))
        return -1;
    int rc = 0;
    /* Lines: "\tNAME => PATH (0x...)", "\tNAME (0x...)" (the vdso), "\tPATH (0x...)" (the loader). */
    for (char *line = strtok(listing, "\n"); line && rc == 0; line = strtok(NULL, "\n")) {
        char name[256], path[FU_PATH_BYTES];
        if (sscanf(line, " %255s => %4095s", name, path) != 2 || bundle_lib_is_libc(name))
            continue;
        if (path[0] != '/') { /* "=> not found" */
            rc = diag_set(err, object, 0, "ldd cannot find %s, a library it needs", name);
            break;
        }
        rc = bundle_one(seen, name, path, lib_dir, link_first && strncmp(name, link_first, strlen(link_first)) == 0,
                        err);
    }
    if (!listing && rc == 0)
        rc = diag_set(err, object, 0, "ldd printed nothing");
    free(listing);
    return rc;
}

int bundle_libs_copy(bundle_libs *seen, const char *exe, const char *dir, struct diag *err)
{
    char lib_dir[FU_PATH_BYTES + 104];
    snprintf(lib_dir, sizeof lib_dir, "%s/lib", dir);
    if (mkdir(lib_dir, 0755) != 0 && errno != EEXIST)
        return diag_set(err, lib_dir, 0, "cannot create the folder: %s", strerror(errno));
    return bundle_needed(seen, exe, lib_dir, NULL, err);
}

int bundle_libs_add_cublas(bundle_libs *seen, const char *dir, const char *cuda_home, struct diag *err)
{
    char lib_dir[FU_PATH_BYTES + 104], path[FU_PATH_BYTES + 304];
    snprintf(lib_dir, sizeof lib_dir, "%s/lib", dir);
    /* The newest first, as runtime/cuda/cuda.c looks for them. */
    static const char *const names[] = { "libcublas.so.13", "libcublas.so.12", "libcublas.so.11" };
    const char *name = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !name; i++) {
        snprintf(path, sizeof path, "%s/lib64/%s", cuda_home, names[i]);
        if (access(path, R_OK) == 0)
            name = names[i];
    }
    if (!name)
        return diag_set(err, cuda_home, 0,
                        "the CUDA toolkit here has no cuBLAS (libcublas.so.13, .12 or .11 in %s/lib64), which a CUDA "
                        "device's bundle carries: install cuBLAS (and its libcublasLt), set CUDA_HOME, or compile "
                        "with --cublas system to leave it to the hosts that run the bundle",
                        cuda_home);
    if (bundle_one(seen, name, path, lib_dir, 1, err))
        return -1;
    /* Its dependencies: libcublasLt (found by its run path, $ORIGIN), and
     * what else it needs beyond the C library (libgcc_s). */
    struct diag why = { 0 };
    if (bundle_needed(seen, path, lib_dir, "libcublasLt", &why) != 0)
        return diag_set(err, path, 0, "cannot bundle cuBLAS's own libraries (libcublasLt): %s", why.msg);
    return 0;
}

void bundle_libs_free(bundle_libs *seen)
{
    free(seen->name);
    free(seen->path);
    seen->name = NULL;
    seen->path = NULL;
    seen->n = seen->cap = 0;
}
