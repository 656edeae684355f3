/* blocks.c: see blocks.h. */
#include "blocks.h"

#include <ctype.h>
#include <string.h>

int ir_block_of(const char *name, char *prefix, size_t size, int64_t *instance)
{
    const char *start = strncmp(name, "grad.", 5) == 0 ? name + 5 : name;
    /* each '.' that begins a segment of digits followed by '.', ':' or the end */
    for (const char *dot = strchr(start, '.'); dot; dot = strchr(dot + 1, '.')) {
        const char *p = dot + 1;
        if (!isdigit((unsigned char)*p))
            continue;
        int64_t k = 0;
        while (isdigit((unsigned char)*p) && k < INT64_MAX / 10)
            k = k * 10 + (*p++ - '0');
        if (*p != '.' && *p != ':' && *p != '\0')
            continue;
        size_t n = (size_t)(dot - start);
        if (n == 0 || n >= size)
            return 0;
        memcpy(prefix, start, n);
        prefix[n] = '\0';
        *instance = k;
        return 1;
    }
    return 0;
}
