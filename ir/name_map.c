/* name_map.c: names -> integers on uthash (see name_map.h). */
#include "name_map.h"

#include <stdlib.h>
#include <string.h>

/* uthash must not exit the process when memory runs out: report instead. */
#define HASH_NONFATAL_OOM        1
#define uthash_nonfatal_oom(elt) (out_of_memory = 1)
static _Thread_local int out_of_memory;
#include <uthash.h>

typedef struct entry {
    UT_hash_handle hh;
    int64_t value;
    char name[]; /* the key, NUL-terminated */
} entry;

struct name_map {
    entry *head;
};

name_map *name_map_new(void) { return calloc(1, sizeof(name_map)); }

void name_map_free(name_map *m)
{
    if (!m)
        return;
    entry *e, *tmp;
    HASH_ITER(hh, m->head, e, tmp)
    {
        HASH_DEL(m->head, e);
        free(e);
    }
    free(m);
}

int name_map_get(const name_map *m, const char *name, int64_t *value)
{
    entry *e = NULL;
    size_t len = strlen(name);
    HASH_FIND(hh, m->head, name, len, e);
    if (!e)
        return 0;
    *value = e->value;
    return 1;
}

int name_map_add(name_map *m, const char *name, int64_t value)
{
    int64_t old;
    if (name_map_get(m, name, &old))
        return 1;
    size_t len = strlen(name);
    entry *e = malloc(sizeof *e + len + 1);
    if (!e)
        return -1;
    memcpy(e->name, name, len + 1);
    e->value = value;
    out_of_memory = 0;
    HASH_ADD_KEYPTR(hh, m->head, e->name, len, e);
    if (out_of_memory) {
        free(e);
        return -1;
    }
    return 0;
}

int64_t name_map_count(const name_map *m) { return (int64_t)HASH_COUNT(m->head); }
