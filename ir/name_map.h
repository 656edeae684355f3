/* name_map.h: a map from names (strings) to integers.
 *
 * Used wherever the compiler looks names up: string interning, the
 * verifier's duplicate checks, the text IR parser, the model frontend's
 * scopes.  Backed by uthash (Debian's uthash-dev, header-only) with its
 * Jenkins hash: lookups stay O(1) for the similar, digit-heavy names that
 * repeat blocks make ("h.11.attn.w"), where libxml2 2.9's hash table
 * degraded to quadratic time.
 */
#ifndef FUSION_NAME_MAP_H
#define FUSION_NAME_MAP_H

#include <stdint.h>

typedef struct name_map name_map;

name_map *name_map_new(void);    /* NULL when out of memory     */
void name_map_free(name_map *m); /* NULL is fine                */
/* 0: added; 1: the name was already there (its value unchanged); -1: out of memory. */
int name_map_add(name_map *m, const char *name, int64_t value);
/* 1 and *value filled when found, else 0. */
int name_map_get(const name_map *m, const char *name, int64_t *value);
int64_t name_map_count(const name_map *m);

#endif
