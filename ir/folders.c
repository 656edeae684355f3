/* folders.c: see folders.h. */
#include "folders.h"

#define _XOPEN_SOURCE 700 /* nftw */
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "diag.h"

static int make_one(const char *path, struct diag *err)
{
    struct stat st;
    if (mkdir(path, 0755) == 0)
        return 0;
    if (errno == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    if (errno == EEXIST)
        return diag_set(err, path, 0, "cannot create the folder: a file of that name is in the way");
    return diag_set(err, path, 0, "cannot create the folder: %s", strerror(errno));
}

int folders_make(const char *path, struct diag *err)
{
    char buf[FU_PATH_BYTES];
    size_t n = strlen(path);
    if (n == 0)
        return 0;
    if (n >= sizeof buf)
        return diag_set(err, path, 0, "cannot create the folder: the path is longer than %zu bytes", sizeof buf - 1);
    memcpy(buf, path, n + 1);
    /* each parent in turn ("a", "a/b"), then the whole path */
    for (size_t i = 1; i < n; i++) {
        if (buf[i] != '/' || buf[i - 1] == '/')
            continue;
        buf[i] = '\0';
        int rc = make_one(buf, err);
        buf[i] = '/';
        if (rc)
            return -1;
    }
    return make_one(buf, err);
}

int folders_make_for_file(const char *file, struct diag *err)
{
    const char *slash = strrchr(file, '/');
    if (!slash || slash == file)
        return 0;
    char dir[FU_PATH_BYTES];
    size_t n = (size_t)(slash - file);
    if (n >= sizeof dir)
        return diag_set(err, file, 0, "cannot create its folder: the path is longer than %zu bytes", sizeof dir - 1);
    memcpy(dir, file, n);
    dir[n] = '\0';
    return folders_make(dir, err);
}

/* nftw's visit: every entry below the root, children first (FTW_DEPTH),
 * links as links (FTW_PHYS: a link to a folder elsewhere is unlinked, not
 * followed). */
static const char *stuck_entry;
static int remove_below_root(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (ftw->level == 0)
        return 0;
    if (remove(path) != 0) {
        stuck_entry = path; /* the entry that would not go */
        return -1;
    }
    return 0;
}

int folders_empty(const char *path, struct diag *err)
{
    stuck_entry = NULL;
    if (nftw(path, remove_below_root, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return diag_set(err, stuck_entry ? stuck_entry : path, 0, "cannot remove it to empty %s: %s", path,
                        strerror(errno));
    return 0;
}
