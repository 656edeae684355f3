/* atomic_file.c: see atomic_file.h. */
#define _GNU_SOURCE
#include "atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
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

int atomic_write_file(const char *path, const void *data, size_t bytes, char *err, size_t n)
{
    char tmp[4200], dir[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, n, "%s: cannot create it: %s", tmp, strerror(errno));
        return -1;
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
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    return fsync_dir(slash ? dir : ".", err, n);
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
