/* stop_table.h: what the devices of a run know of a stop request (SIGINT,
 * SIGTERM), as the hub (hub.h) floods it: for each device, the last step
 * it must finish.  Internal to hub.c.
 *
 * The rule it serves: every device finishes the same step L and stops.  A
 * device that learns of the request (its own signal, or the table from a
 * peer) enters the step it is in, or has committed to start, as its own
 * entry: it cannot stop before finishing that one.  L is the largest entry
 * of every device of the run, so no device is asked to undo a step it has
 * begun, however far ahead of the others it ran (a stage that only sends
 * can run many steps ahead).  A device that has finished its own entry
 * waits, before it starts another step, until every entry is in; entries
 * travel with the hubs' I/O threads, never waiting on a main thread, so
 * the wait ends within the links' latency.
 *
 * The exit code (130 SIGINT, 143 SIGTERM) travels the same way: each entry
 * keeps the code its device knew when it entered it, and the run's code is
 * the lowest of the entries', so every device, holding the same entries,
 * exits with the same code even when two devices asked with different
 * signals at once.
 *
 * Wire form (MSG_STOP's payload, little-endian):
 *     int32 code, int32 n, then n times: uint8 known, int64 step, int32 code
 * (the first code: the lowest asked so far, what a device entering now
 * enters).
 */
#ifndef FUSION_STOP_TABLE_H
#define FUSION_STOP_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t n;           /* device indices 0..n                              */
    uint8_t *member;     /* [n] 1: a device of this run, whose entry counts  */
    uint8_t *known;      /* [n] its entry is in                               */
    int64_t *step;       /* [n] the last step it must finish                  */
    int32_t *entry_code; /* [n] the code it knew when it entered              */
    int32_t code;        /* 0: no stop asked for; else the lowest code asked  */
    int32_t missing;     /* members whose entry is not in                     */
    uint64_t version;    /* grows with every change (what a peer was told)    */
} stop_table;

/* members[n] (NULL: none yet).  0, or -1 out of memory. */
int stop_table_init(stop_table *t, int32_t n, const uint8_t *members);
void stop_table_free(stop_table *t);
/* Device d's entry (if not in yet), entered with the table's code after
 * `code` (the lower wins) is taken in. */
void stop_table_enter(stop_table *t, int32_t d, int64_t step, int32_t code);
size_t stop_table_bytes(const stop_table *t);
void stop_table_encode(const stop_table *t, uint8_t *out);
/* A peer's table into t.  1 when t changed, 0 when not, -1 when the bytes
 * are not a table of t's size (the programs disagree). */
int stop_table_merge(stop_table *t, const uint8_t *in, size_t bytes);
/* The largest entry, and the lowest entry code (every member's in: check
 * missing first). */
int64_t stop_table_last(const stop_table *t);
int32_t stop_table_code(const stop_table *t);

#endif
