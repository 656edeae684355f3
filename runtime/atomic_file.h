/* atomic_file.h: a file that appears whole or not at all.
 *
 * atomic_write_file writes path.tmp.<pid>, fsyncs it, renames it over path
 * and fsyncs the folder, so a crash (a kill, a power cut) leaves either the
 * old file or the new one, never half of one; on failure (no space, an I/O
 * error) the temporary file is removed and path is as it was.  Every
 * message names the path and the cause.
 */
#ifndef FUSION_RT_ATOMIC_FILE_H
#define FUSION_RT_ATOMIC_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "../ir/folders.h" /* FU_PATH_BYTES */

/* data[0..bytes) to path, atomically (above).  0, or -1 with err set. */
int atomic_write_file(const char *path, const void *data, size_t bytes, char *err, size_t n);

/* The same for a file written as a stream: atomic_open gives the FILE of
 * path's temporary (path.tmp.<pid>), atomic_commit flushes, fsyncs and
 * closes it, gives it `mode` (0: the default 0644 less the umask), renames
 * it over path and fsyncs the folder; atomic_abort (or a failed commit)
 * closes and removes the temporary.  A write error anywhere in between
 * (a full disk) fails the commit: path is then as it was. */
typedef struct {
    FILE *f;
    char path[FU_PATH_BYTES], tmp[FU_PATH_BYTES + 32];
} atomic_file;

FILE *atomic_open(atomic_file *a, const char *path, char *err, size_t n); /* NULL with err */
int atomic_commit(atomic_file *a, unsigned mode, char *err, size_t n);    /* 0, or -1 with err */
void atomic_abort(atomic_file *a);

/* fsync the folder itself (its entries: a rename or an unlink in it made
 * durable).  0, or -1 with err set. */
int fsync_dir(const char *dir, char *err, size_t n);

/* Whether name is one of atomic_write_file's (or st_write's) temporary
 * files: "<anything>.tmp.<digits>" (litter when its writer was killed). */
int is_temporary_name(const char *name);

#endif
