/* file_hash.c: see file_hash.h. */
#include "file_hash.h"

#include <stdio.h>
#include <xxhash.h>

int file_xxh3(const char *path, uint64_t *hash)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    XXH3_state_t *s = XXH3_createState();
    char buf[1 << 16];
    size_t got;
    int rc = s && XXH3_64bits_reset(s) == XXH_OK ? 0 : -1;
    while (rc == 0 && (got = fread(buf, 1, sizeof buf, f)) > 0)
        rc = XXH3_64bits_update(s, buf, got) == XXH_OK ? 0 : -1;
    if (rc == 0 && ferror(f))
        rc = -1;
    if (rc == 0)
        *hash = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    fclose(f);
    return rc;
}
