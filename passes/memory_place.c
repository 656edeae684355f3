/* memory_place.c: memory_place (memory_place.h) in near-linear time.
 *
 * The plain rule gathers, for each buffer, every buffer placed before it
 * whose lifetime meets its own and scans them by offset: O(n^2 log n), a
 * minute for a 400-layer GPT.  Here two structures answer "which bytes are
 * taken at some step of [start, end]?" without visiting those buffers one
 * by one:
 *
 *   - a segment tree over the steps [0, T): node x covers steps [l, r],
 *     its children [l, m] and [m + 1, r].  A placed buffer is filed at the
 *     O(log T) nodes whose ranges tile its lifetime (its canonical nodes),
 *     and each node keeps two sets of bytes:
 *       whole[x]: the bytes of the buffers filed at x: taken at every step
 *                 of x's range;
 *       some[x]:  the bytes of the buffers filed at x or below it: taken at
 *                 some step of x's range.
 *     A buffer alive at some step of [s, e] has a canonical node at or
 *     below one of [s, e]'s canonical nodes q, or above one; so the bytes
 *     taken in [s, e] are the union of some[q] over the q and whole[a] over
 *     their strict ancestors a: at most about 4 log2 T sets.
 *   - each set is a union of byte ranges [lo, hi), kept merged (ranges that
 *     touch or overlap become one), in a treap ordered by lo (a binary
 *     search tree balanced by random priorities): add a range and find
 *     "the first range ending after p" in O(log n) expected.  Sets only
 *     grow: placed buffers stay.
 *
 * The lowest fit for `bytes` is found by jumping: p = 0; while a set has a
 * range that meets [p, p + bytes), p = that range's end rounded up to
 * align.  A jump passes only offsets whose bytes would meet taken bytes,
 * so the first p that no set objects to is the lowest free multiple of
 * align, which is the plain rule's answer (its scan by offset stops at
 * the first gap that holds the buffer: the same offset, since every buffer
 * has bytes > 0).  The jumps number the merged ranges stepped over: a few
 * where first fit packs tightly, as it does a network's activations below
 * its weights and their state.
 */
#include <stdlib.h>

#include "memory_place.h"

typedef struct {
    int64_t lo, hi;      /* bytes [lo, hi) taken                            */
    int32_t left, right; /* children, -1: none; a free span chains in .left */
    uint32_t prio;       /* heap order: a parent's prio >= its children's   */
} span;

/* Every set's spans, in one array (indices, never pointers: it grows). */
typedef struct {
    span *s;
    int32_t n, cap;
    int32_t free_list; /* spans merged away, for reuse                    */
    uint32_t seed;     /* xorshift32 for the priorities                   */
} span_pool;

typedef struct {
    span_pool pool;
    int32_t steps;         /* T                                               */
    int32_t *whole, *some; /* per tree node (1-based heap order, 4 T): a set's
                               root span, -1: empty                            */
    int32_t *sets;         /* the roots one query reads                       */
} placer;

static int64_t align_up(int64_t n, int64_t align) { return (n + align - 1) / align * align; }

static int32_t span_new(span_pool *p, int64_t lo, int64_t hi)
{
    int32_t t = p->free_list;
    if (t >= 0) {
        p->free_list = p->s[t].left;
    } else {
        if (p->n == p->cap) {
            int32_t cap = p->cap ? p->cap * 2 : 1024;
            span *s = cap > p->cap ? realloc(p->s, (size_t)cap * sizeof *s) : NULL;
            if (!s)
                return -1;
            p->s = s;
            p->cap = cap;
        }
        t = p->n++;
    }
    p->seed ^= p->seed << 13;
    p->seed ^= p->seed >> 17;
    p->seed ^= p->seed << 5;
    p->s[t] = (span){ lo, hi, -1, -1, p->seed };
    return t;
}

/* Every span of tree t back to the free list. */
static void span_free_tree(span_pool *p, int32_t t)
{
    while (t >= 0) {
        span_free_tree(p, p->s[t].right);
        int32_t left = p->s[t].left;
        p->s[t].left = p->free_list;
        p->free_list = t;
        t = left;
    }
}

/* Tree t into *l (spans with lo < key) and *r (the rest). */
static void split(span *s, int32_t t, int64_t key, int32_t *l, int32_t *r)
{
    if (t < 0) {
        *l = *r = -1;
    } else if (s[t].lo < key) {
        split(s, s[t].right, key, &s[t].right, r);
        *l = t;
    } else {
        split(s, s[t].left, key, l, &s[t].left);
        *r = t;
    }
}

/* Trees a and b, every span of a before every span of b, as one. */
static int32_t merge(span *s, int32_t a, int32_t b)
{
    if (a < 0)
        return b;
    if (b < 0)
        return a;
    if (s[a].prio >= s[b].prio) {
        s[a].right = merge(s, s[a].right, b);
        return a;
    }
    s[b].left = merge(s, a, s[b].left);
    return b;
}

static int32_t last_span(const span *s, int32_t t)
{
    while (t >= 0 && s[t].right >= 0)
        t = s[t].right;
    return t;
}

/* Adds [lo, hi) to the set rooted at *root, merging what it touches. */
static int set_add(span_pool *p, int32_t *root, int64_t lo, int64_t hi)
{
    int32_t t = span_new(p, lo, hi);
    if (t < 0)
        return -1;
    span *s = p->s;
    int32_t before, touched, after;
    split(s, *root, lo, &before, &after);
    int32_t last = last_span(s, before);
    if (last >= 0 && s[last].hi >= lo) { /* the range before reaches lo: one with it */
        int32_t it;
        split(s, before, s[last].lo, &before, &it);
        lo = s[last].lo;
        hi = s[last].hi > hi ? s[last].hi : hi;
        span_free_tree(p, it);
    }
    split(s, after, hi + 1, &touched, &after); /* ranges starting in [lo, hi] */
    last = last_span(s, touched);
    if (last >= 0 && s[last].hi > hi)
        hi = s[last].hi;
    span_free_tree(p, touched);
    s[t].lo = lo;
    s[t].hi = hi;
    *root = merge(s, merge(s, before, t), after);
    return 0;
}

/* The first span of tree t (by lo, so also by hi: the spans are disjoint)
 * that ends after p; -1 when none does. */
static int32_t first_ending_after(const span *s, int32_t t, int64_t p)
{
    int32_t found = -1;
    while (t >= 0) {
        if (s[t].hi > p) {
            found = t;
            t = s[t].left;
        } else {
            t = s[t].right;
        }
    }
    return found;
}

/* Files [lo, hi), taken over steps [s, e], at node x (steps [l, r]) and below. */
static int tree_add(placer *pl, int32_t x, int32_t l, int32_t r, int32_t s, int32_t e, int64_t lo, int64_t hi)
{
    if (set_add(&pl->pool, &pl->some[x], lo, hi))
        return -1;
    if (s <= l && r <= e) /* canonical; a leaf's whole[] is never read (a query takes its some[]) */
        return l < r ? set_add(&pl->pool, &pl->whole[x], lo, hi) : 0;
    int32_t m = l + (r - l) / 2;
    if (s <= m && tree_add(pl, 2 * x, l, m, s, e, lo, hi))
        return -1;
    if (e > m && tree_add(pl, 2 * x + 1, m + 1, r, s, e, lo, hi))
        return -1;
    return 0;
}

/* The sets that together hold every byte taken at some step of [s, e]. */
static void tree_sets(const placer *pl, int32_t x, int32_t l, int32_t r, int32_t s, int32_t e, int32_t *k)
{
    if (s <= l && r <= e) {
        if (pl->some[x] >= 0)
            pl->sets[(*k)++] = pl->some[x];
        return;
    }
    if (pl->whole[x] >= 0)
        pl->sets[(*k)++] = pl->whole[x];
    int32_t m = l + (r - l) / 2;
    if (s <= m)
        tree_sets(pl, 2 * x, l, m, s, e, k);
    if (e > m)
        tree_sets(pl, 2 * x + 1, m + 1, r, s, e, k);
}

/* The lowest multiple of align where `bytes` meet no span of the k sets. */
static int64_t lowest_fit(const placer *pl, int32_t k, int64_t bytes, int64_t align)
{
    int64_t p = 0;
    /* Round robin until k sets in a row let p stand; a set that moves p is
     * asked again at once (its next range may also be in the way). */
    for (int32_t i = 0, quiet = 0; quiet < k;) {
        int32_t t = first_ending_after(pl->pool.s, pl->sets[i], p);
        if (t >= 0 && pl->pool.s[t].lo < p + bytes) {
            p = align_up(pl->pool.s[t].hi, align);
            quiet = 0;
        } else {
            quiet++;
            i = i + 1 < k ? i + 1 : 0;
        }
    }
    return p;
}

int64_t memory_place(mem_buffer *b, int32_t n, int64_t align)
{
    int32_t steps = 1;
    for (int32_t i = 0; i < n; i++)
        if (b[i].end + 1 > steps)
            steps = b[i].end + 1;
    placer pl = { { NULL, 0, 0, -1, 0x9E3779B9u }, steps, NULL, NULL, NULL };
    pl.whole = malloc(4 * (size_t)steps * sizeof *pl.whole);
    pl.some = malloc(4 * (size_t)steps * sizeof *pl.some);
    pl.sets = malloc(256 * sizeof *pl.sets); /* 4 a level of a tree at most 64 deep */
    int64_t peak = pl.whole && pl.some && pl.sets ? 0 : -1;
    for (size_t x = 0; x < 4 * (size_t)steps && peak == 0; x++)
        pl.whole[x] = pl.some[x] = -1;
    for (int32_t i = 0; i < n && peak >= 0; i++) {
        int32_t k = 0;
        tree_sets(&pl, 1, 0, steps - 1, b[i].start, b[i].end, &k);
        b[i].offset = lowest_fit(&pl, k, b[i].bytes, align);
        if (b[i].offset + b[i].bytes > peak)
            peak = b[i].offset + b[i].bytes;
        if (tree_add(&pl, 1, 0, steps - 1, b[i].start, b[i].end, b[i].offset, b[i].offset + b[i].bytes))
            peak = -1;
    }
    free(pl.pool.s);
    free(pl.whole);
    free(pl.some);
    free(pl.sets);
    return peak;
}
