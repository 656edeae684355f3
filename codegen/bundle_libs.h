/* bundle_libs.h: the shared libraries a device program needs travel with it.
 *
 * A bundle must start on a host that has only the C library: the program
 * is linked with the run path $ORIGIN/lib (as DT_RPATH, which the loader
 * also searches for the libraries' own dependencies: OpenBLAS's gfortran),
 * and every library ldd resolves for it, but the C library's own files
 * (libc, libm, libpthread, libdl, librt, libanl, libresolv, libutil,
 * libmvec, the loader), is copied into OUT/<device>/lib/.  The first device
 * of a compile copies a library (temporary name, then rename); the others
 * hard-link that copy (no disk space), or copy it where links fail.
 * libcuda.so.1 and cuBLAS are opened at run time (runtime/cuda/cuda.h), not
 * linked: ldd does not list them.  A CUDA device's bundle carries cuBLAS
 * all the same (bundle_libs_add_cublas): libcublas.so.N and libcublasLt.so.N
 * (570 MB for CUDA 13), hard links to the toolkit's files where the file
 * system allows (else copies), so that the host needs only the driver. */
#ifndef FUSION_BUNDLE_LIBS_H
#define FUSION_BUNDLE_LIBS_H

#include "../ir/diag.h"
#include "../ir/folders.h" /* FU_PATH_BYTES */

typedef struct {
    char (*name)[256];                 /* the libraries copied so far in this compile */
    char (*path)[FU_PATH_BYTES + 504]; /* ... and where their first copy is          */
    int n, cap;
} bundle_libs;

/* Copy src to dst whole, through dst.tmp.PID, keeping the mode.  0, or -1
 * with err naming the file that could not be read or written. */
int bundle_copy_file(const char *src, const char *dst, struct diag *err);

/* Is `name` (a file name: "libc.so.6") one of the C library's own? */
int bundle_lib_is_libc(const char *name);

/* Copy what `exe` needs into dir/lib/.  0, or -1 with err naming the
 * library or the step (ldd) that failed. */
int bundle_libs_copy(bundle_libs *seen, const char *exe, const char *dir, struct diag *err);
/* Put cuBLAS into dir/lib/: libcublas.so.N from cuda_home/lib64 (N = 13,
 * 12 or 11, the newest there), and what it needs (libcublasLt.so.N,
 * libgcc_s), hard-linked from the toolkit where possible.  0, or -1 with
 * err naming what is missing. */
int bundle_libs_add_cublas(bundle_libs *seen, const char *dir, const char *cuda_home, struct diag *err);
void bundle_libs_free(bundle_libs *seen);

#endif
