/* bpe.c: one piece of text to its tokens by byte-pair merges, as Hugging
 * Face's BPE model does (tokenizers/src/models/bpe/word.rs):
 *   - the piece starts as one symbol a character (byte-level: a byte); a
 *     character outside the vocabulary becomes its <0xXX> byte tokens
 *     (byte fallback) or the unknown token (consecutive ones fused when
 *     fuse_unk);
 *   - then, repeatedly, the adjacent pair whose merge has the lowest rank
 *     is merged (ties: the leftmost), until no adjacent pair has a merge.
 * A heap of candidate merges keyed (rank, position) makes a piece of n
 * symbols O(n log n): a text with no pre-tokenizer (Llama 2) is one piece
 * of up to its whole length.  With ignore_merges (Llama 3), a piece that
 * is itself a token is that token. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

typedef struct {
    int32_t id;
    int32_t prev, next; /* neighbours in the piece, -1 at the ends */
    int32_t alive;      /* 0: merged into its left neighbour */
} symbol;

typedef struct {
    int32_t rank, pos, merged;
} candidate;

struct tk_bpe_scratch {
    symbol *sym;
    candidate *heap;
    int64_t cap_sym, cap_heap;
};

tk_bpe_scratch *tk_bpe_scratch_new(void) { return calloc(1, sizeof(tk_bpe_scratch)); }

void tk_bpe_scratch_free(tk_bpe_scratch *s)
{
    if (s)
        free(s->sym), free(s->heap);
    free(s);
}

static int before(const candidate *a, const candidate *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(tk_bpe_scratch *s, int64_t *n, candidate c)
{
    int64_t i = (*n)++;
    while (i > 0 && before(&c, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = c;
}

static candidate heap_pop(tk_bpe_scratch *s, int64_t *n)
{
    candidate top = s->heap[0], last = s->heap[--*n];
    int64_t i = 0;
    for (;;) {
        int64_t k = 2 * i + 1;
        if (k >= *n)
            break;
        if (k + 1 < *n && before(&s->heap[k + 1], &s->heap[k]))
            k++;
        if (!before(&s->heap[k], &last))
            break;
        s->heap[i] = s->heap[k];
        i = k;
    }
    if (*n > 0)
        s->heap[i] = last;
    return top;
}

static int reserve(tk_bpe_scratch *s, int64_t n)
{
    if (n > s->cap_sym) {
        symbol *sym = realloc(s->sym, (size_t)n * sizeof *sym);
        if (!sym)
            return -1;
        s->sym = sym;
        s->cap_sym = n;
    }
    if (n > s->cap_heap) { /* n - 1 candidates at the start, and at most two more a merge */
        candidate *heap = realloc(s->heap, (size_t)(3 * n) * sizeof *heap);
        if (!heap)
            return -1;
        s->heap = heap;
        s->cap_heap = n;
    }
    return 0;
}

/* The piece's first symbols; returns their count, or -1 (err filled). */
static int64_t initial_symbols(const tk_tokenizer *tk, tk_bpe_scratch *s, const char *p, int64_t n, char *err,
                               size_t err_size)
{
    int64_t k = 0;
    int last_was_unk = 0;
    for (int64_t i = 0; i < n;) {
        if (tk->byte_level) {
            s->sym[k++].id = tk->byte_id[(unsigned char)p[i++]];
            continue;
        }
        uint32_t cp;
        int len = tk_utf8_decode((const unsigned char *)p + i, n - i, &cp);
        if (!len)
            return tk_error(err, err_size, "invalid UTF-8 inside a piece");
        int32_t id = tk_strmap_get(&tk->vocab, p + i, len);
        int fallback = id < 0 && tk->byte_fallback;
        for (int b = 0; fallback && b < len; b++)
            fallback = tk->byte_id[(unsigned char)p[i + b]] >= 0;
        if (id >= 0) {
            s->sym[k++].id = id;
            last_was_unk = 0;
        } else if (fallback) {
            for (int b = 0; b < len; b++)
                s->sym[k++].id = tk->byte_id[(unsigned char)p[i + b]];
            last_was_unk = 0;
        } else if (tk->unk >= 0) {
            if (!(tk->fuse_unk && last_was_unk))
                s->sym[k++].id = tk->unk;
            last_was_unk = 1;
        } else {
            return tk_error(err, err_size,
                            "the character U+%04X is not in the vocabulary, and the tokenizer has no "
                            "byte fallback and no unknown token",
                            cp);
        }
        i += len;
    }
    return k;
}

static void push_candidate(const tk_tokenizer *tk, tk_bpe_scratch *s, int64_t *n_heap, int32_t pos)
{
    int32_t next = s->sym[pos].next;
    if (next < 0)
        return;
    const tk_merge *m = tk_pairmap_get(&tk->merges, s->sym[pos].id, s->sym[next].id);
    if (m)
        heap_push(s, n_heap, (candidate){ m->rank, pos, m->merged });
}

int tk_bpe(const tk_tokenizer *tk, tk_bpe_scratch *s, const char *piece, int64_t n, tk_ids *out, char *err,
           size_t err_size)
{
    if (n == 0)
        return 0;
    if (tk->ignore_merges) {
        int32_t whole = tk_strmap_get(&tk->vocab, piece, n);
        if (whole >= 0)
            return tk_ids_push(out, whole);
    }
    if (reserve(s, 4 * n)) /* byte fallback: up to 4 symbols a character */
        return tk_error(err, err_size, "out of memory merging a piece of %lld bytes", (long long)n);
    int64_t count = initial_symbols(tk, s, piece, n, err, err_size);
    if (count < 0)
        return -1;
    for (int64_t i = 0; i < count; i++)
        s->sym[i].prev = (int32_t)i - 1, s->sym[i].next = i + 1 < count ? (int32_t)i + 1 : -1, s->sym[i].alive = 1;
    int64_t n_heap = 0;
    for (int64_t i = 0; i + 1 < count; i++)
        push_candidate(tk, s, &n_heap, (int32_t)i);
    while (n_heap > 0) {
        candidate c = heap_pop(s, &n_heap);
        symbol *left = &s->sym[c.pos];
        if (!left->alive || left->next < 0)
            continue;
        symbol *right = &s->sym[left->next];
        const tk_merge *m = tk_pairmap_get(&tk->merges, left->id, right->id);
        if (!m || m->merged != c.merged)
            continue; /* stale: one of the two merged since */
        left->id = c.merged;
        right->alive = 0;
        left->next = right->next;
        if (right->next >= 0)
            s->sym[right->next].prev = c.pos;
        if (left->prev >= 0)
            push_candidate(tk, s, &n_heap, left->prev);
        push_candidate(tk, s, &n_heap, c.pos);
    }
    for (int64_t i = 0; i >= 0 && i < count; i = s->sym[i].next)
        if (tk_ids_push(out, s->sym[i].id))
            return tk_error(err, err_size, "out of memory");
    return 0;
}
