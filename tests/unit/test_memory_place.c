/* test_memory_place: the memory pass's placement (passes/memory_place.h)
 * gives the same offsets and peak as the plain first-fit rule the pass used
 * before it, kept here as the reference: for each buffer, gather every
 * earlier buffer whose lifetime meets its own, sort them by offset, and
 * take the first gap that holds it (O(n^2 log n)).
 *
 * Cases: 6,000 random ones (0 to 400 buffers over 1 to 64 steps; lifetimes
 * of the whole step, of one step, short and long; sizes aligned as the pass
 * makes them, or any, or drawn from a few repeated sizes; alignments 1, 8,
 * 64, 100 and 4,096; the pass's order, largest first, or any order), and
 * GPT-shaped ones (weights and their state alive all step, activations
 * made in the forward and read back in the backward, each op's scratch).
 * A mismatch names the case, the buffer, the offset expected and found.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../../passes/memory_place.h"
#include "check.h"

/* ---- the reference: the pass's placement before issue 29 ------------------ */

static int64_t ref_align_up(int64_t n, int64_t align) { return (n + align - 1) / align * align; }

static int by_offset(const void *a, const void *b)
{
    const mem_buffer *x = *(mem_buffer *const *)a, *y = *(mem_buffer *const *)b;
    return (x->offset > y->offset) - (x->offset < y->offset);
}

/* Place buffers[0..n) in order by first fit; returns the peak. */
static int64_t reference_place(mem_buffer *buffers, int32_t n, int64_t align)
{
    mem_buffer **scratch = malloc(((size_t)n + 1) * sizeof *scratch);
    int64_t peak = 0;
    for (int32_t i = 0; i < n; i++) {
        mem_buffer *b = &buffers[i];
        int32_t k = 0;
        for (int32_t j = 0; j < i; j++)
            if (buffers[j].start <= b->end && b->start <= buffers[j].end)
                scratch[k++] = &buffers[j];
        qsort(scratch, (size_t)k, sizeof *scratch, by_offset);
        int64_t offset = 0;
        for (int32_t j = 0; j < k; j++) {
            if (scratch[j]->offset - offset >= b->bytes)
                break; /* the gap before this one fits */
            int64_t end = ref_align_up(scratch[j]->offset + scratch[j]->bytes, align);
            if (end > offset)
                offset = end;
        }
        b->offset = offset;
        if (offset + b->bytes > peak)
            peak = offset + b->bytes;
    }
    free(scratch);
    return peak;
}

/* The pass's order (passes/memory.c): largest first, then earliest start. */
static int by_size_then_start(const void *a, const void *b)
{
    const mem_buffer *x = a, *y = b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return (x->start > y->start) - (x->start < y->start);
}

/* ---- data ---------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) /* xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}
static int64_t rng_below(int64_t n) { return n > 0 ? (int64_t)(rng_next() % (uint64_t)n) : 0; }

/* Both placements of b[0..n) (copied: each places its own); 1 when equal. */
static int same_placement(const mem_buffer *b, int32_t n, int64_t align, const char *what, int32_t which)
{
    mem_buffer *want = malloc(((size_t)n + 1) * sizeof *want), *got = malloc(((size_t)n + 1) * sizeof *got);
    for (int32_t i = 0; i < n; i++)
        want[i] = got[i] = b[i];
    int64_t want_peak = reference_place(want, n, align), got_peak = memory_place(got, n, align);
    int same = want_peak == got_peak;
    for (int32_t i = 0; i < n && same; i++)
        if (want[i].offset != got[i].offset) {
            fprintf(stderr,
                    "  %s %d (%d buffers, align %lld): buffer %d (%lld bytes, steps %d..%d): "
                    "expected offset %lld, found %lld\n",
                    what, which, n, (long long)align, i, (long long)b[i].bytes, b[i].start, b[i].end,
                    (long long)want[i].offset, (long long)got[i].offset);
            same = 0;
        }
    if (want_peak != got_peak)
        fprintf(stderr, "  %s %d (%d buffers, align %lld): expected peak %lld, found %lld\n", what, which, n,
                (long long)align, (long long)want_peak, (long long)got_peak);
    free(want);
    free(got);
    return same;
}

/* A random case: n buffers over `steps` steps. */
static int32_t random_case(mem_buffer *b, int64_t *align)
{
    static const int64_t aligns[] = { 1, 8, 64, 100, 4096 };
    *align = aligns[rng_below(5)];
    int32_t n = (int32_t)rng_below(401), steps = 1 + (int32_t)rng_below(64);
    int sizes = (int)rng_below(3); /* 0: aligned as the pass makes them, 1: any, 2: a few repeated */
    int64_t few[4];
    for (int k = 0; k < 4; k++)
        few[k] = 1 + rng_below(1 << (4 + 4 * k));
    for (int32_t i = 0; i < n; i++) {
        int64_t bytes = sizes == 2 ? few[rng_below(4)] : 1 + rng_below(1 << (1 + rng_below(20)));
        b[i].bytes = sizes == 0 ? ref_align_up(bytes, *align) : bytes;
        int life = (int)rng_below(10);
        if (life < 2) { /* all step: a weight, its gradient, AdamW's moments */
            b[i].start = 0, b[i].end = steps - 1;
        } else if (life < 4) { /* one step: an op's scratch */
            b[i].start = b[i].end = (int32_t)rng_below(steps);
        } else if (life < 8) { /* short */
            b[i].start = (int32_t)rng_below(steps);
            b[i].end = b[i].start + (int32_t)rng_below(4);
            if (b[i].end >= steps)
                b[i].end = steps - 1;
        } else { /* anything */
            int32_t x = (int32_t)rng_below(steps), y = (int32_t)rng_below(steps);
            b[i].start = x < y ? x : y, b[i].end = x < y ? y : x;
        }
        b[i].owner = i;
        b[i].offset = -1;
    }
    if (rng_below(4) != 0)
        qsort(b, (size_t)n, sizeof *b, by_size_then_start);
    return n;
}

/* A GPT's step on one device, in the pass's terms: L layers of `per`
 * activations each, made in the forward (step f) and last read by the
 * backward (step 2 F - f), weights and their state all step, one scratch
 * in some ops, the loss's ops between; aligned to 64 and sorted largest
 * first, as the pass places them. */
static void add(mem_buffer *b, int32_t *n, int64_t bytes, int32_t start, int32_t end)
{
    b[*n] = (mem_buffer){ ref_align_up(bytes, 64), start, end, *n, -1 };
    (*n)++;
}

static int32_t gpt_case(mem_buffer *b, int32_t L, int32_t per, int64_t width)
{
    int32_t n = 0, F = L * per + 2, last = 2 * F;
    for (int32_t l = 0; l < L; l++)
        for (int32_t k = 0; k < per; k++) {
            int32_t f = 1 + l * per + k;
            int64_t elems = (k % 4 == 1 ? 4 : k % 4 == 2 ? 3 : 1) * width;
            add(b, &n, elems * 4, f, last - f);            /* an activation */
            add(b, &n, elems * 4, last - f, last - f + 1); /* its gradient */
            if (k % 3 == 0) {
                add(b, &n, width * width / 16, 0, last); /* a weight */
                add(b, &n, width * width / 16, 0, last); /* its gradient */
                add(b, &n, width * width / 8, 0, last);  /* AdamW's m and v */
            }
            if (k % 5 == 0)
                add(b, &n, width * 12, f, f); /* an op's scratch */
        }
    qsort(b, (size_t)n, sizeof *b, by_size_then_start);
    return n;
}

/* ---- checks -------------------------------------------------------------- */

static void test_memory_place_edges(void)
{
    mem_buffer b[3] = { { 100, 0, 0, 0, -1 }, { 64, 0, 0, 1, -1 }, { 10, 1, 1, 2, -1 } };
    CHECK_INT(0, memory_place(b, 0, 64));
    CHECK_INT(64 + 128, memory_place(b, 2, 64)); /* the second goes above the first, rounded up */
    CHECK_INT(0, b[0].offset);
    CHECK_INT(128, b[1].offset);
    CHECK_INT(64 + 128, memory_place(b, 3, 64)); /* the third lives later: reuses offset 0 */
    CHECK_INT(0, b[2].offset);
}

static void test_memory_place_matches_first_fit_on_random_lifetimes(void)
{
    mem_buffer *b = malloc(401 * sizeof *b);
    int bad = 0;
    for (int32_t c = 0; c < 6000 && bad < 5; c++) {
        int64_t align;
        int32_t n = random_case(b, &align);
        bad += !same_placement(b, n, align, "random case", c);
    }
    CHECK_INT(0, bad);
    free(b);
}

static void test_memory_place_matches_first_fit_on_gpt_steps(void)
{
    mem_buffer *b = malloc(40 * 24 * 6 * sizeof *b); /* at most 6 buffers an op */
    int bad = 0, which = 0;
    for (int32_t L = 1; L <= 40; L = L * 2 + 1)
        for (int32_t per = 4; per <= 24; per += 10, which++)
            bad += !same_placement(b, gpt_case(b, L, per, 768), 64, "gpt case", which);
    CHECK_INT(0, bad);
    free(b);
}

int main(void)
{
    test_memory_place_edges();
    test_memory_place_matches_first_fit_on_random_lifetimes();
    test_memory_place_matches_first_fit_on_gpt_steps();
    CHECK_DONE();
}
