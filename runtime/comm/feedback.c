/* feedback.c: named feedback arrays (feedback.h). */
#include "feedback.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rt_feedback_add(rt_feedback_arrays *l, const char *name, float *data, int64_t n)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        rt_feedback_array *a = realloc(l->a, (size_t)cap * sizeof *a);
        if (!a)
            return -1;
        l->a = a;
        l->cap = cap;
    }
    rt_feedback_array *e = &l->a[l->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->data = data;
    e->n = n;
    return 0;
}

int rt_feedback_restore(const rt_feedback_arrays *l, const char *name, float *dst, int64_t n)
{
    if (!l)
        return 0;
    for (int i = 0; i < l->n; i++) {
        if (strcmp(l->a[i].name, name) != 0)
            continue;
        if (l->a[i].n != n) {
            fprintf(stderr,
                    "fusion: the checkpoint's %s holds %" PRId64 " floats, this program's %" PRId64
                    ": it starts at zero\n",
                    name, l->a[i].n, n);
            return 0;
        }
        memcpy(dst, l->a[i].data, (size_t)n * sizeof *dst);
        return 1;
    }
    return 0;
}

void rt_feedback_arrays_free(rt_feedback_arrays *l)
{
    if (l->owns)
        for (int i = 0; i < l->n; i++)
            free(l->a[i].data);
    free(l->a);
    memset(l, 0, sizeof *l);
}
