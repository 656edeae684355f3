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

/* data[0..bytes) to path, atomically (above).  0, or -1 with err set. */
int atomic_write_file(const char *path, const void *data, size_t bytes, char *err, size_t n);

/* fsync the folder itself (its entries: a rename or an unlink in it made
 * durable).  0, or -1 with err set. */
int fsync_dir(const char *dir, char *err, size_t n);

/* Whether name is one of atomic_write_file's (or st_write's) temporary
 * files: "<anything>.tmp.<digits>" (litter when its writer was killed). */
int is_temporary_name(const char *name);

#endif
