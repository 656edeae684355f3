/* stop_table.c: see stop_table.h. */
#include "comm/stop_table.h"
#include "le_bytes.h"

#include <stdlib.h>
#include <string.h>

int stop_table_init(stop_table *t, int32_t n, const uint8_t *members)
{
    memset(t, 0, sizeof *t);
    t->n = n > 0 ? n : 0;
    t->member = calloc((size_t)t->n + 1, 1);
    t->known = calloc((size_t)t->n + 1, 1);
    t->step = calloc((size_t)t->n + 1, sizeof *t->step);
    t->entry_code = calloc((size_t)t->n + 1, sizeof *t->entry_code);
    if (!t->member || !t->known || !t->step || !t->entry_code) {
        stop_table_free(t);
        return -1;
    }
    for (int32_t d = 0; d < t->n; d++)
        t->missing += t->member[d] = members && members[d] ? 1 : 0;
    return 0;
}

void stop_table_free(stop_table *t)
{
    free(t->member);
    free(t->known);
    free(t->step);
    free(t->entry_code);
    memset(t, 0, sizeof *t);
}

void stop_table_enter(stop_table *t, int32_t d, int64_t step, int32_t code)
{
    if (code > 0 && (t->code == 0 || code < t->code)) {
        t->code = code;
        t->version++;
    }
    if (d < 0 || d >= t->n || t->known[d])
        return;
    t->known[d] = 1;
    t->step[d] = step;
    t->entry_code[d] = t->code;
    t->missing -= t->member[d];
    t->version++;
}

#define ENTRY_BYTES 13 /* known, step, code */

size_t stop_table_bytes(const stop_table *t) { return 8 + (size_t)t->n * ENTRY_BYTES; }

void stop_table_encode(const stop_table *t, uint8_t *out)
{
    put32(out, (uint32_t)t->code);
    put32(out + 4, (uint32_t)t->n);
    for (int32_t d = 0; d < t->n; d++) {
        uint8_t *e = out + 8 + ENTRY_BYTES * (size_t)d;
        e[0] = t->known[d];
        put64(e + 1, (uint64_t)t->step[d]);
        put32(e + 9, (uint32_t)t->entry_code[d]);
    }
}

int stop_table_merge(stop_table *t, const uint8_t *in, size_t bytes)
{
    if (bytes != stop_table_bytes(t) || (int32_t)get32(in + 4) != t->n)
        return -1;
    uint64_t before = t->version;
    stop_table_enter(t, -1, 0, (int32_t)get32(in));
    for (int32_t d = 0; d < t->n; d++) {
        const uint8_t *e = in + 8 + ENTRY_BYTES * (size_t)d;
        if (!e[0] || t->known[d])
            continue;
        stop_table_enter(t, d, (int64_t)get64(e + 1), 0);
        t->entry_code[d] = (int32_t)get32(e + 9); /* its own, not this table's */
    }
    return t->version != before;
}

int32_t stop_table_code(const stop_table *t)
{
    int32_t code = 0;
    for (int32_t d = 0; d < t->n; d++)
        if (t->known[d] && t->member[d] && t->entry_code[d] > 0 && (code == 0 || t->entry_code[d] < code))
            code = t->entry_code[d];
    return code ? code : t->code;
}

int64_t stop_table_last(const stop_table *t)
{
    int64_t last = 0;
    for (int32_t d = 0; d < t->n; d++)
        if (t->known[d] && t->member[d] && t->step[d] > last)
            last = t->step[d];
    return last;
}
