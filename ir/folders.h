/* folders.h: making the folders an output goes in (`-o a/b/c`), as
 * `mkdir -p` does, with a message naming the one that could not be made. */
#ifndef FUSION_FOLDERS_H
#define FUSION_FOLDERS_H

struct diag;

/* The one path-length constant: a path fusion keeps fits in FU_PATH_BYTES
 * (Linux's PATH_MAX); a buffer that appends to one (a file in a folder, a
 * temporary name) is FU_PATH_BYTES plus room for what it appends. */
#define FU_PATH_BYTES 4096

/* Make `path` and every missing folder above it (0755); 0 when it is
 * there (made now or before), else -1 with err naming the folder. */
int folders_make(const char *path, struct diag *err);
/* The same for the folder a file goes in ("out/plan.txt" -> "out"). */
int folders_make_for_file(const char *file, struct diag *err);

/* Remove everything in the folder (it stays, empty); 0, or -1 with err
 * naming the entry that would not go.  Not thread-safe (nftw). */
int folders_empty(const char *path, struct diag *err);

#endif
