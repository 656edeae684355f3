/* wire_util.h: the two small helpers transport.c and hub.c share (internal
 * to runtime/comm): a one-line error into a caller's buffer, and a
 * monotonic clock in milliseconds for their deadlines. */
#ifndef FUSION_WIRE_UTIL_H
#define FUSION_WIRE_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static inline void fail(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void fail(char *err, size_t n, const char *fmt, ...)
{
    if (!err || n == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static inline int64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

#endif
