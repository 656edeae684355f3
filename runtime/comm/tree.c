/* tree.c: rt_comm_allgather (comm.h), a small record from every device of
 * the program to every device, over the program's own links.
 *
 * What it is for: the exchanges a run makes a few times, not every step: a
 * checkpoint's parts (each device's size and XXH3, so that every device can
 * write the step's manifest once every part is durable) and the step a
 * resume starts from.  Not for tensors: the all-reduces are comm.c's.
 *
 * The tree: breadth first from the smallest device index over the links
 * every device knows (program.h's fusion_links_blob, the same list on every
 * device), neighbours in index order, so every device builds the same tree
 * without a word.  A device waits for its children's tables (each with its
 * subtree's records filled), sends the merged table to its parent, waits
 * for the whole table back, and passes it down.  The table is fixed size
 * (n_peers records and a presence byte each), so every message's length is
 * known to both ends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "hub.h"
#include "../rt_error.h"

#define TREE_UP   (-1000000) /* micro_batch of the messages to the root */
#define TREE_DOWN (-1000001) /* ... and of the whole table back down */

/* parent[d] for every device of the links (-1: the root, or not linked);
 * returns the root (-1 when there are no links). */
static int32_t build_tree(const rt_comm *c, int32_t *parent)
{
    int32_t N = c->manifest->n_peers, L = c->manifest->n_links, root = -1;
    for (int32_t d = 0; d < N; d++)
        parent[d] = -2; /* -2: not reached */
    for (int32_t i = 0; i < L; i++) {
        int32_t a = c->links[i].a < c->links[i].b ? c->links[i].a : c->links[i].b;
        if (a >= 0 && a < N && (root < 0 || a < root))
            root = a;
    }
    if (root < 0)
        return -1;
    int32_t *queue = malloc((size_t)N * sizeof *queue);
    if (!queue)
        return -1;
    int32_t head = 0, tail = 0;
    queue[tail++] = root;
    parent[root] = -1;
    while (head < tail) {
        int32_t u = queue[head++];
        for (int32_t v = 0; v < N; v++) { /* index order: the same tree everywhere */
            if (parent[v] != -2)
                continue;
            for (int32_t i = 0; i < L; i++)
                if ((c->links[i].a == u && c->links[i].b == v) || (c->links[i].b == u && c->links[i].a == v)) {
                    parent[v] = u;
                    queue[tail++] = v;
                    break;
                }
        }
    }
    free(queue);
    return root;
}

int rt_comm_tree_root(const rt_comm *c)
{
    if (!c->hub || c->manifest->n_links == 0)
        return 1;
    int32_t *parent = malloc((size_t)c->manifest->n_peers * sizeof *parent);
    if (!parent)
        return 0;
    int32_t root = build_tree(c, parent);
    free(parent);
    return root < 0 || root == c->manifest->device_index;
}

/* Merge a child's table into mine: its subtree's records. */
static void merge(uint8_t *table, const uint8_t *in, int32_t N, size_t rec_bytes)
{
    for (int32_t d = 0; d < N; d++)
        if (in[d]) {
            table[d] = 1;
            memcpy(table + N + (size_t)d * rec_bytes, in + N + (size_t)d * rec_bytes, rec_bytes);
        }
}

int rt_comm_allgather(rt_comm *c, int64_t step, int32_t tag, const void *mine, size_t rec_bytes, void *all,
                      uint8_t *present, char *err, size_t n)
{
    int32_t self = c->manifest->device_index, N = c->manifest->n_peers;
    if (self < 0 || self >= N) {
        return rt_error(err, n, "device index %d outside the program's %d devices", self, N);
    }
    size_t table_bytes = (size_t)N + (size_t)N * rec_bytes;
    uint8_t *table = calloc(1, table_bytes), *in = malloc(table_bytes);
    int32_t *parent = malloc((size_t)N * sizeof *parent);
    int rc = 0;
    if (!table || !in || !parent) {
        snprintf(err, n, "out of memory for a %zu-byte exchange table", table_bytes);
        rc = -1;
        goto done;
    }
    table[self] = 1;
    memcpy(table + N + (size_t)self * rec_bytes, mine, rec_bytes);
    int32_t root = c->hub ? build_tree(c, parent) : -1;
    if (root >= 0 && parent[self] != -2) {
        fu_msg_info up = { .kind = MSG_GRADIENT,
                           .step = step,
                           .micro_batch = TREE_UP,
                           .tensor = tag,
                           .codec = FU_CODEC_RAW_F32,
                           .length = table_bytes };
        fu_msg_info down = up;
        down.micro_batch = TREE_DOWN;
        char why[400];
        for (int32_t v = 0; v < N && rc == 0; v++)
            if (parent[v] == self) {
                if (fu_hub_recv(c->hub, v, &up, in, table_bytes, why, sizeof why) != 0) {
                    snprintf(err, n, "waiting for %s's checkpoint report: %s", c->peers[v].name, why);
                    rc = -1;
                } else {
                    merge(table, in, N, rec_bytes);
                }
            }
        if (rc == 0 && parent[self] >= 0) {
            int32_t p = parent[self];
            if (fu_hub_send(c->hub, p, &up, table, why, sizeof why) != 0 ||
                fu_hub_recv(c->hub, p, &down, table, table_bytes, why, sizeof why) != 0) {
                snprintf(err, n, "exchanging checkpoint reports with %s: %s", c->peers[p].name, why);
                rc = -1;
            }
        }
        for (int32_t v = 0; v < N && rc == 0; v++)
            if (parent[v] == self && fu_hub_send(c->hub, v, &down, table, why, sizeof why) != 0) {
                snprintf(err, n, "passing checkpoint reports to %s: %s", c->peers[v].name, why);
                rc = -1;
            }
    }
    if (rc == 0) {
        memcpy(present, table, (size_t)N);
        memcpy(all, table + N, (size_t)N * rec_bytes);
    }
done:
    free(table);
    free(in);
    free(parent);
    return rc;
}
