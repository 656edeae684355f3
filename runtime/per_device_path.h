/* per_device_path.h: the name of a file one device of several writes when
 * they share their arguments (launch-local.sh, fusionc launch give every
 * device the same --log, --trace, --dump-grads): the device's name before
 * the extension, so the file keeps its kind (train.jsonl ->
 * train.cpu-a0.jsonl; a name without one: log -> log.cpu-a0).  Header-only:
 * the device programs (runtime/main.c) and fusionc launch (which fetches
 * them) name them alike. */
#ifndef FUSION_RT_PER_DEVICE_PATH_H
#define FUSION_RT_PER_DEVICE_PATH_H

#include <stdio.h>
#include <string.h>

static inline void per_device_path_of(const char *file, const char *device, char *out, size_t n)
{
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file, *dot = strrchr(base, '.');
    if (dot && dot > base)
        snprintf(out, n, "%.*s.%s%s", (int)(dot - file), file, device, dot);
    else
        snprintf(out, n, "%s.%s", file, device);
}

#endif
