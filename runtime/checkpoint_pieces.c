/* checkpoint_pieces.c: sharded moments in checkpoints (see checkpoint_pieces.h). */
#include "checkpoint_pieces.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_error.h"

char *pieces_record(const program *p)
{
    size_t size = 1, at = 0;
    for (int32_t i = 0; i < p->manifest.n_tensors; i++)
        size += p->tensors[i].whole ? strlen(p->tensors[i].name) + 44 : 0;
    char *out = malloc(size);
    for (int32_t i = 0; out && i < p->manifest.n_tensors; i++) {
        const rt_tensor_info *ti = &p->tensors[i];
        if (ti->whole)
            at += (size_t)snprintf(out + at, size - at, "%" PRId64 " %" PRId64 " %s\n", ti->whole_lo, ti->whole,
                                   ti->name);
    }
    if (out)
        out[at] = '\0';
    return out;
}

int pieces_find(const st_file *f, const char *name, int64_t *lo, int64_t *whole)
{
    const char *rec = st_metadata(f, "fusion.pieces");
    size_t len = strlen(name);
    for (const char *line = rec; line && *line;) {
        const char *end = strchr(line, '\n'), *space = NULL;
        long long a, b;
        int used = 0;
        if (sscanf(line, "%lld %lld %n", &a, &b, &used) == 2 && used > 0)
            space = line + used;
        if (space && (end ? (size_t)(end - space) : strlen(space)) == len && strncmp(space, name, len) == 0 && a >= 0 &&
            b > 0) {
            *lo = a;
            *whole = b;
            return 1;
        }
        line = end ? end + 1 : NULL;
    }
    return 0;
}

int pieces_load(st_file *const *parts, int n_parts, const char *name, int64_t whole, int64_t lo, int64_t n, float *dst,
                const char *where, char *err, size_t err_size)
{
    int64_t covered = 0;
    for (int k = 0; k < n_parts; k++) {
        st_tensor t;
        if (st_find(parts[k], name, &t) == 0) /* 1: found; -1: found, of a dtype the check below names */
            continue;
        int64_t size = 1, at = 0, of = 0;
        for (int d = 0; d < t.rank; d++)
            size *= t.dim[d];
        if (!pieces_find(parts[k], name, &at, &of))
            at = 0, of = size; /* the whole tensor */
        if (t.dtype != ST_F32 || of != whole || at + size > of) {
            return rt_error(err, err_size, "%s: '%s' is %s, %lld of %lld elements; this program's is F32 of %lld",
                            where, name, st_dtype_name(t.dtype), (long long)size, (long long)of, (long long)whole);
        }
        int64_t from = at > lo ? at : lo, to = at + size < lo + n ? at + size : lo + n;
        if (from >= to)
            continue;
        memcpy(dst + (from - lo), (const float *)t.data + (from - at), (size_t)(to - from) * sizeof *dst);
        if (size == whole)
            return 0;         /* a whole copy: all of it */
        covered += to - from; /* the pieces of one stage's replicas are disjoint */
    }
    if (covered == n)
        return 0;
    return rt_error(err, err_size,
                    "%s: the parts here hold %lld of elements [%lld, %lld) of '%s': a sharded checkpoint needs "
                    "every replica's part of its stage",
                    where, (long long)covered, (long long)lo, (long long)(lo + n), name);
}
