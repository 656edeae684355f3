/* arrays.c: the growable arrays the tokenizer appends to (tokenizer.h:
 * tk_ids, tk_bytes), doubling their capacity as they fill. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

int tk_ids_push(tk_ids *a, int32_t id)
{
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 1024;
        int32_t *v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

int tk_bytes_append(tk_bytes *b, const char *s, int64_t n)
{
    if (b->n + n + 1 > b->cap) {
        int64_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *v = realloc(b->v, (size_t)cap);
        if (!v)
            return -1;
        b->v = v;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->v + b->n, s, (size_t)n);
    b->n += n;
    b->v[b->n] = 0;
    return 0;
}
