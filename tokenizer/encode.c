/* encode.c: text to ids, in three steps that a caller may spread over
 * threads (tokenizer.h):
 *   tk_prepare       added tokens split out of the raw text (longest match
 *                    first), each stretch between them normalized;
 *   tk_next_pieces   each stretch cut into pieces by the pre-tokenizer's
 *                    splits, in order (the first split runs incrementally,
 *                    so a caller takes the pieces of a large text in
 *                    batches);
 *   tk_merge_pieces  each piece merged by BPE (bpe.c), through a cache of
 *                    the pieces this encoder has merged before: text
 *                    repeats its words, and a hit costs one hash.
 * Added tokens marked "normalized" are matched on the raw text too (the
 * supported families have none). */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "tokenizer_internal.h"

/* A stretch of the prepared text or an added token. */
typedef struct {
    int64_t off, len;
    int32_t added; /* -1: a stretch */
} segment;

/* The cache: pieces of up to CACHE_PIECE_BYTES merged before.  Cleared
 * whole when half full (simple, and text's common words come back at once). */
#define CACHE_SLOTS       (1 << 16)
#define CACHE_PIECE_BYTES 48
typedef struct {
    uint64_t hash; /* 0: empty */
    int32_t bytes_at, len, ids_at, n_ids;
} cache_slot;

struct tk_encoder {
    const tk_tokenizer *tk;
    tk_bytes prep, scratch;
    segment *seg;
    int64_t n_seg, cap_seg;
    /* tk_next_pieces's place: segment, offset in it, and the first split's
     * pending start (MergedWithNext) */
    int64_t at_seg, at_off, carry;
    pcre2_match_data *match;
    tk_bpe_scratch *bpe;
    tk_ids merged; /* one piece's ids */
    cache_slot *cache;
    int64_t cache_used;
    tk_bytes cache_bytes;
    tk_ids cache_ids;
};

tk_encoder *tk_encoder_new(const tk_tokenizer *tk)
{
    tk_encoder *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->tk = tk;
    e->match = pcre2_match_data_create(1, NULL);
    e->bpe = tk_bpe_scratch_new();
    e->cache = calloc(CACHE_SLOTS, sizeof *e->cache);
    if (!e->match || !e->bpe || !e->cache) {
        tk_encoder_free(e);
        return NULL;
    }
    return e;
}

void tk_encoder_free(tk_encoder *e)
{
    if (!e)
        return;
    free(e->prep.v), free(e->scratch.v), free(e->seg), free(e->merged.v);
    free(e->cache), free(e->cache_bytes.v), free(e->cache_ids.v);
    pcre2_match_data_free(e->match);
    tk_bpe_scratch_free(e->bpe);
    free(e);
}

/* ---- tk_prepare: added tokens, normalization ------------------------------ */

static int push_segment(tk_encoder *e, int64_t off, int64_t len, int32_t added)
{
    if (e->n_seg == e->cap_seg) {
        int64_t cap = e->cap_seg ? 2 * e->cap_seg : 64;
        segment *s = realloc(e->seg, (size_t)cap * sizeof *s);
        if (!s)
            return -1;
        e->seg = s;
        e->cap_seg = cap;
    }
    e->seg[e->n_seg++] = (segment){ off, len, added };
    return 0;
}

static int is_word_byte(unsigned char c)
{
    return c >= 0x80 || c == '_' || (unsigned)((c | 32) - 'a') < 26u || (unsigned)(c - '0') < 10u;
}
static int is_space_byte(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13); }

/* The added token matching at text[i] (the longest), or NULL; *from and
 * *to: the span it takes (with the spaces lstrip and rstrip take). */
static const tk_added *added_at(const tk_tokenizer *tk, const char *text, int64_t n, int64_t i, int64_t done,
                                int64_t *from, int64_t *to)
{
    for (int a = 0; a < tk->n_added; a++) {
        const tk_added *t = &tk->added[a];
        if (t->len > n - i || memcmp(text + i, t->content, (size_t)t->len) != 0)
            continue;
        if (t->single_word && ((i > 0 && is_word_byte((unsigned char)text[i - 1])) ||
                               (i + t->len < n && is_word_byte((unsigned char)text[i + t->len]))))
            continue;
        *from = i, *to = i + t->len;
        while (t->lstrip && *from > done && is_space_byte((unsigned char)text[*from - 1]))
            --*from;
        while (t->rstrip && *to < n && is_space_byte((unsigned char)text[*to]))
            ++*to;
        return t;
    }
    return NULL;
}

static int add_stretch(tk_encoder *e, const char *s, int64_t n, char *err, size_t err_size)
{
    if (n == 0)
        return 0;
    if (tk_normalize(e->tk, s, n, &e->scratch, err, err_size))
        return -1;
    if (e->scratch.n == 0)
        return 0;
    int64_t off = e->prep.n;
    int space = e->tk->prefix_space && e->scratch.v[0] != ' ';
    if ((space && tk_bytes_append(&e->prep, " ", 1)) || tk_bytes_append(&e->prep, e->scratch.v, e->scratch.n) ||
        push_segment(e, off, e->prep.n - off, -1))
        return tk_error(err, err_size, "out of memory");
    return 0;
}

int tk_prepare(tk_encoder *e, const char *text, size_t len, tk_prepared *out, char *err, size_t err_size)
{
    const tk_tokenizer *tk = e->tk;
    int64_t n = (int64_t)len, bad = tk_utf8_invalid_at(text, n);
    if (bad >= 0)
        return tk_error(err, err_size, "not UTF-8 at byte %lld", (long long)bad);
    e->prep.n = 0;
    e->n_seg = e->at_seg = e->at_off = 0;
    e->carry = -1;
    if (tk_bytes_append(&e->prep, "", 0))
        return tk_error(err, err_size, "out of memory");
    int64_t done = 0; /* text[0 .. done) is in segments */
    for (int64_t i = 0; i < n; i++) {
        if (!tk->added_first[(unsigned char)text[i]])
            continue;
        int64_t from, to;
        const tk_added *t = added_at(tk, text, n, i, done, &from, &to);
        if (!t)
            continue;
        if (add_stretch(e, text + done, from - done, err, err_size) || push_segment(e, 0, 0, t->id))
            return -1;
        done = to;
        i = to - 1;
    }
    if (add_stretch(e, text + done, n - done, err, err_size))
        return -1;
    out->text = e->prep.v;
    out->len = e->prep.n;
    return 0;
}

/* ---- tk_next_pieces: the pre-tokenizer's splits --------------------------- */

typedef struct {
    tk_piece **v;
    int64_t *n, *cap;
} piece_list;

static int push_piece(piece_list *l, int64_t off, int64_t len, int32_t added)
{
    if (*l->n == *l->cap) {
        int64_t cap = *l->cap ? 2 * *l->cap : 4096;
        tk_piece *v = realloc(*l->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        *l->v = v;
        *l->cap = cap;
    }
    (*l->v)[(*l->n)++] = (tk_piece){ off, len, added };
    return 0;
}

/* A character no merge can touch: its symbols are in no merge. */
static int unmergeable_char(const tk_tokenizer *tk, const char *s, int len)
{
    int32_t id = tk->byte_level ? tk->byte_id[(unsigned char)s[0]] : tk_strmap_get(&tk->vocab, s, len);
    if (id >= 0)
        return !tk->mergeable[id];
    if (!tk->byte_fallback)
        return 0; /* unknown: fused with its neighbours, maybe */
    for (int b = 0; b < len; b++)
        if (tk->byte_id[(unsigned char)s[b]] < 0 || tk->mergeable[tk->byte_id[(unsigned char)s[b]]])
            return 0;
    return 1;
}

/* A whole stretch as one piece (no pre-tokenizer), cut at the characters
 * no merge can touch: the merges on either side never meet, so the
 * pieces merge to the same tokens as the whole, and in parallel.  Not
 * with ignore_merges (the whole might be a token). */
static int push_cut(const tk_tokenizer *tk, piece_list *l, const char *text, int64_t off, int64_t len)
{
    if (tk->ignore_merges || len < 256)
        return push_piece(l, off, len, -1);
    int64_t start = off, end = off + len;
    for (int64_t i = off; i < end;) {
        uint32_t cp;
        int n = tk->byte_level ? 1 : tk_utf8_decode((const unsigned char *)text + i, end - i, &cp);
        if (n <= 0)
            n = 1;
        if (unmergeable_char(tk, text + i, n)) {
            if ((i > start && push_piece(l, start, i - start, -1)) || push_piece(l, i, n, -1))
                return -1;
            start = i + n;
        }
        i += n;
    }
    return start < end ? push_piece(l, start, end - start, -1) : 0;
}

static int split_region(tk_encoder *e, int step, int64_t a, int64_t b, piece_list *l);

/* [a, b) through the splits from `step` on. */
static int emit(tk_encoder *e, int step, int64_t a, int64_t b, piece_list *l)
{
    if (b <= a)
        return 0;
    if (step == e->tk->n_split)
        return step == 0 ? push_cut(e->tk, l, e->prep.v, a, b - a) : push_piece(l, a, b - a, -1);
    return split_region(e, step, a, b, l);
}

/* The next match of split `step` in [*at, b): 1 and [*ms, *me), or 0. */
static int next_match(tk_encoder *e, int step, int64_t a, int64_t b, int64_t at, int64_t *ms, int64_t *me)
{
    for (;;) {
        int rc = pcre2_match(e->tk->split[step].re, (PCRE2_SPTR)e->prep.v + a, (PCRE2_SIZE)(b - a),
                             (PCRE2_SIZE)(at - a), PCRE2_NO_UTF_CHECK, e->match, NULL);
        if (rc < 0)
            return 0;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->match);
        *ms = a + (int64_t)ov[0], *me = a + (int64_t)ov[1];
        if (*me > *ms)
            return 1;
        /* an empty match: Hugging Face's split skips it; look on from the next character */
        at = *ms + 1;
        while (at < b && ((unsigned char)e->prep.v[at] & 0xC0) == 0x80)
            at++;
        if (at >= b)
            return 0;
    }
}

/* One match of split `step` and what precedes it, as its behaviour says;
 * *carry: MergedWithNext's start of the piece still open. */
static int split_once(tk_encoder *e, int step, int64_t at, int64_t ms, int64_t me, int64_t *carry, piece_list *l)
{
    switch (e->tk->split[step].behavior) {
    case TK_SPLIT_ISOLATED:
        return emit(e, step + 1, at, ms, l) || emit(e, step + 1, ms, me, l);
    case TK_SPLIT_REMOVED:
        return emit(e, step + 1, at, ms, l);
    case TK_SPLIT_MERGED_WITH_PREVIOUS:
        return emit(e, step + 1, at, me, l);
    case TK_SPLIT_MERGED_WITH_NEXT: {
        int64_t from = *carry >= 0 ? *carry : at;
        *carry = ms;
        return emit(e, step + 1, from, ms, l);
    }
    }
    return 0;
}

static int split_region(tk_encoder *e, int step, int64_t a, int64_t b, piece_list *l)
{
    int64_t at = a, ms, me, carry = -1;
    while (at < b && next_match(e, step, a, b, at, &ms, &me)) {
        if (split_once(e, step, at, ms, me, &carry, l))
            return -1;
        at = me;
    }
    return emit(e, step + 1, carry >= 0 ? carry : at, b, l);
}

int tk_next_pieces(tk_encoder *e, tk_piece **pieces, int64_t *n, int64_t *cap, int64_t want, int *done, char *err,
                   size_t err_size)
{
    piece_list l = { pieces, n, cap };
    int64_t goal = *n + want;
    while (e->at_seg < e->n_seg && *n < goal) {
        const segment *s = &e->seg[e->at_seg];
        int64_t end = s->off + s->len, ms, me;
        int rc = 0;
        if (s->added >= 0) {
            rc = push_piece(&l, 0, 0, s->added);
            e->at_seg++;
        } else if (e->tk->n_split == 0) {
            rc = emit(e, 0, s->off, end, &l);
            e->at_seg++;
        } else {
            int64_t at = s->off + e->at_off;
            while (*n < goal && rc == 0 && at < end && next_match(e, 0, s->off, end, at, &ms, &me)) {
                rc = split_once(e, 0, at, ms, me, &e->carry, &l);
                at = me;
            }
            e->at_off = at - s->off;
            if (rc == 0 && *n < goal) { /* the stretch's last matches done: its tail */
                rc = emit(e, 1, e->carry >= 0 ? e->carry : at, end, &l);
                e->at_seg++, e->at_off = 0, e->carry = -1;
            }
        }
        if (rc)
            return tk_error(err, err_size, "out of memory cutting the text into pieces");
    }
    *done = e->at_seg == e->n_seg;
    return 0;
}

/* ---- tk_merge_pieces: BPE through the cache -------------------------------- */

static int merge_cached(tk_encoder *e, const char *p, int64_t len, tk_ids *out, char *err, size_t err_size)
{
    uint64_t hash = XXH3_64bits(p, (size_t)len) | 1;
    uint32_t i = (uint32_t)hash & (CACHE_SLOTS - 1);
    for (; e->cache[i].hash; i = (i + 1) & (CACHE_SLOTS - 1)) {
        const cache_slot *c = &e->cache[i];
        if (c->hash == hash && c->len == len && memcmp(e->cache_bytes.v + c->bytes_at, p, (size_t)len) == 0) {
            for (int32_t k = 0; k < c->n_ids; k++)
                if (tk_ids_push(out, e->cache_ids.v[c->ids_at + k]))
                    return tk_error(err, err_size, "out of memory");
            return 0;
        }
    }
    e->merged.n = 0;
    if (tk_bpe(e->tk, e->bpe, p, len, &e->merged, err, err_size))
        return -1;
    if (e->cache_used >= CACHE_SLOTS / 2) { /* full: start again */
        memset(e->cache, 0, CACHE_SLOTS * sizeof *e->cache);
        e->cache_used = e->cache_bytes.n = e->cache_ids.n = 0;
        for (i = (uint32_t)hash & (CACHE_SLOTS - 1); e->cache[i].hash;)
            i = (i + 1) & (CACHE_SLOTS - 1);
    }
    cache_slot c = { hash, (int32_t)e->cache_bytes.n, (int32_t)len, (int32_t)e->cache_ids.n, (int32_t)e->merged.n };
    if (tk_bytes_append(&e->cache_bytes, p, len))
        return tk_error(err, err_size, "out of memory");
    for (int64_t k = 0; k < e->merged.n; k++)
        if (tk_ids_push(&e->cache_ids, e->merged.v[k]) || tk_ids_push(out, e->merged.v[k]))
            return tk_error(err, err_size, "out of memory");
    e->cache[i] = c;
    e->cache_used++;
    return 0;
}

int tk_merge_pieces(tk_encoder *e, const char *text, const tk_piece *pieces, int64_t n, tk_ids *out, char *err,
                    size_t err_size)
{
    for (int64_t i = 0; i < n; i++) {
        const tk_piece *p = &pieces[i];
        int rc = p->added >= 0 ? (tk_ids_push(out, p->added) ? tk_error(err, err_size, "out of memory") : 0)
                 : p->len <= CACHE_PIECE_BYTES ? merge_cached(e, text + p->off, p->len, out, err, err_size)
                                               : tk_bpe(e->tk, e->bpe, text + p->off, p->len, out, err, err_size);
        if (rc)
            return -1;
    }
    return 0;
}

int tk_encode(tk_encoder *e, const char *text, size_t len, tk_ids *out, char *err, size_t err_size)
{
    tk_prepared prep;
    if (tk_prepare(e, text, len, &prep, err, err_size))
        return -1;
    tk_piece *pieces = NULL;
    int64_t n = 0, cap = 0;
    int done = 0, rc = 0;
    while (!done && rc == 0) {
        n = 0;
        rc = tk_next_pieces(e, &pieces, &n, &cap, 4096, &done, err, err_size) ||
             tk_merge_pieces(e, prep.text, pieces, n, out, err, err_size);
    }
    free(pieces);
    return rc ? -1 : 0;
}
