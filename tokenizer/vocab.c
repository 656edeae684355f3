/* vocab.c: the tokenizer's two hash tables: byte strings to ids (the
 * vocabulary) and id pairs to merges.  Open addressing, linear probing,
 * at most half full; built once when loading, then only read (shared by
 * every thread).  Written here rather than with uthash: the merge lookup
 * is the inner loop of BPE, and a flat table of 16-byte slots keyed by
 * one integer is several times faster than uthash's chained buckets. */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "tokenizer_internal.h"

static uint32_t table_size(int64_t count)
{
    uint32_t size = 16;
    while (size < 2 * count)
        size *= 2;
    return size;
}

int tk_strmap_init(tk_strmap *m, int64_t count, const char *const *key, const int32_t *key_len)
{
    uint32_t size = table_size(count);
    m->slot = calloc(size, sizeof *m->slot);
    m->mask = size - 1;
    m->key = key;
    m->key_len = key_len;
    return m->slot ? 0 : -1;
}

static uint32_t string_hash(const char *s, int64_t len) { return (uint32_t)XXH3_64bits(s, (size_t)len); }

void tk_strmap_add(tk_strmap *m, int32_t id)
{
    uint32_t i = string_hash(m->key[id], m->key_len[id]) & m->mask;
    while (m->slot[i])
        i = (i + 1) & m->mask;
    m->slot[i] = (uint32_t)id + 1;
}

int32_t tk_strmap_get(const tk_strmap *m, const char *s, int64_t len)
{
    if (!m->slot)
        return -1;
    for (uint32_t i = string_hash(s, len) & m->mask; m->slot[i]; i = (i + 1) & m->mask) {
        int32_t id = (int32_t)m->slot[i] - 1;
        if (m->key_len[id] == len && memcmp(m->key[id], s, (size_t)len) == 0)
            return id;
    }
    return -1;
}

void tk_strmap_free(tk_strmap *m)
{
    free(m->slot);
    m->slot = NULL;
}

static uint64_t pair_key(int32_t left, int32_t right)
{
    return (uint64_t)(uint32_t)(left + 1) << 32 | (uint32_t)(right + 1);
}

/* Fibonacci hashing: the high bits of key * 2^64/φ. */
static uint64_t pair_slot(const tk_pairmap *m, uint64_t key) { return (key * 0x9E3779B97F4A7C15ull >> 32) & m->mask; }

int tk_pairmap_init(tk_pairmap *m, int64_t count)
{
    uint32_t size = table_size(count);
    m->slot = calloc(size, sizeof *m->slot);
    m->mask = size - 1;
    return m->slot ? 0 : -1;
}

void tk_pairmap_add(tk_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t merged)
{
    uint64_t key = pair_key(left, right), i = pair_slot(m, key);
    while (m->slot[i].key && m->slot[i].key != key)
        i = (i + 1) & m->mask;
    if (m->slot[i].key == key)
        return; /* a pair listed twice: its first (lowest) rank holds, as in Hugging Face's */
    m->slot[i] = (tk_merge){ .key = key, .rank = rank, .merged = merged };
}

const tk_merge *tk_pairmap_get(const tk_pairmap *m, int32_t left, int32_t right)
{
    uint64_t key = pair_key(left, right);
    for (uint64_t i = pair_slot(m, key); m->slot[i].key; i = (i + 1) & m->mask)
        if (m->slot[i].key == key)
            return &m->slot[i];
    return NULL;
}

void tk_pairmap_free(tk_pairmap *m)
{
    free(m->slot);
    m->slot = NULL;
}
