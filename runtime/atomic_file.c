/* atomic_file.c: see atomic_file.h. */
#define _GNU_SOURCE
#include "atomic_file.h"
#include "rt_error.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fsync_dir(const char *dir, char *err, size_t n)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        snprintf(err, n, "%s: cannot make the folder's entries durable: %s", dir, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static int fsync_parent(const char *path, char *err, size_t n)
{
    char dir[FU_PATH_BYTES];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    return fsync_dir(slash ? (slash == dir ? "/" : dir) : ".", err, n);
}

int atomic_write_file(const char *path, const void *data, size_t bytes, char *err, size_t n)
{
    char tmp[FU_PATH_BYTES + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return rt_error(err, n, "%s: cannot create it: %s", tmp, strerror(errno));
    }
    const char *p = data;
    size_t left = bytes;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            snprintf(err, n, "%s: cannot write it: %s", path, w < 0 ? strerror(errno) : "nothing written");
            close(fd);
            unlink(tmp);
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        snprintf(err, n, "%s: cannot make it durable: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        snprintf(err, n, "%s: cannot rename it into place: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return fsync_parent(path, err, n);
}

FILE *atomic_open(atomic_file *a, const char *path, char *err, size_t n)
{
    snprintf(a->path, sizeof a->path, "%s", path);
    snprintf(a->tmp, sizeof a->tmp, "%s.tmp.%ld", path, (long)getpid());
    a->f = fopen(a->tmp, "w");
    if (!a->f)
        snprintf(err, n, "%s: cannot create it: %s", a->tmp, strerror(errno));
    return a->f;
}

void atomic_abort(atomic_file *a)
{
    if (a->f)
        fclose(a->f);
    a->f = NULL;
    unlink(a->tmp);
}

int atomic_commit(atomic_file *a, unsigned mode, char *err, size_t n)
{
    FILE *f = a->f;
    a->f = NULL;
    int bad = ferror(f) || fflush(f) != 0, saved = errno;
    if (!bad && fsync(fileno(f)) != 0)
        bad = 1, saved = errno;
    if (fclose(f) != 0 && !bad)
        bad = 1, saved = errno;
    if (!bad && mode && chmod(a->tmp, mode) != 0)
        bad = 1, saved = errno;
    if (bad) {
        snprintf(err, n, "%s: cannot write it: %s", a->path, strerror(saved ? saved : EIO));
        unlink(a->tmp);
        return -1;
    }
    if (rename(a->tmp, a->path) != 0) {
        snprintf(err, n, "%s: cannot rename it into place: %s", a->path, strerror(errno));
        unlink(a->tmp);
        return -1;
    }
    return fsync_parent(a->path, err, n);
}

int is_temporary_name(const char *name)
{
    const char *t = strstr(name, ".tmp.");
    if (!t)
        return 0;
    for (t += 5; *t; t++)
        if (*t < '0' || *t > '9')
            return 0;
    return 1;
}
