/* rt_error.h: how the runtime reports an error.  Errors are values: a
 * function that can fail takes (char *err, size_t n), fills it with one
 * line naming where and what (the file, the peer, the op, and the cause)
 * and returns -1; it never prints and never exits.  Only a program's main
 * (runtime/main.c: fail) prints "fusion: error: <device>: <err>" and
 * decides the exit status.  (The one exception is the broker client's
 * thread, which ends a device the broker refused at once: a stale process
 * must not go on writing.)
 *
 *     if (bad) return rt_error(err, n, "%s: %s", path, strerror(errno));
 */
#ifndef FUSION_RT_ERROR_H
#define FUSION_RT_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int rt_error(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int rt_error(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && n > 0)
        vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

#endif
