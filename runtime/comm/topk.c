/* topk.c: the AdaTopK codec (topk.h says what and the format).
 *
 * Everything works on keys: key(x) = bits of x with the sign cleared, a
 * uint32 whose unsigned order is the order of |x| (NaN above Inf).  Integer
 * keys make the comparisons exact and the result independent of the
 * compiler's float flags.  The selection finds the exact k-th largest key T
 * and the number of ties at T to keep; one ordered pass over the candidates
 * (or over x) then emits the kept elements straight into the output, in
 * index order, so no k-sized list is built and sorted.
 */
#include "comm/topk.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "topk.c writes its format in host byte order, which must be little-endian"
#endif

#define HIST_BINS 65536

static inline uint32_t key_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return u & 0x7fffffffu;
}

static inline void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put_i64(unsigned char *p, int64_t v) { memcpy(p, &v, 8); }
static inline uint32_t get_u32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline uint64_t get_u64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline int64_t get_i64(const unsigned char *p)
{
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* ---- sizes --------------------------------------------------------------- */

static int encodable(int64_t n, int64_t k) { return n >= 0 && n <= TOPK_MAX_N && k >= 0 && k <= n; }

static size_t index_bytes(int64_t k) { return (size_t)TOPK_HEADER_BYTES + 8 * (size_t)k; }
static size_t bitmap_bytes(int64_t n, int64_t k)
{
    return (size_t)TOPK_HEADER_BYTES + ((size_t)n + 7) / 8 + 4 * (size_t)k;
}

size_t topk_encoded_bytes(int64_t n, int64_t k)
{
    if (!encodable(n, k))
        return 0;
    size_t a = index_bytes(k), b = bitmap_bytes(n, k);
    return a <= b ? a : b;
}

int64_t topk_count(int64_t n, double density)
{
    if (n <= 0 || !(density > 0))
        return 0;
    if (density >= 1)
        return n;
    double k = floor(density * (double)n + 0.5);
    if (k < 1)
        return 1;
    if (k > (double)n)
        return n;
    return (int64_t)k;
}

/* ---- scratch ------------------------------------------------------------- */

void topk_scratch_init(topk_scratch *s) { memset(s, 0, sizeof *s); }

void topk_scratch_free(topk_scratch *s)
{
    free(s->cand_idx);
    free(s->cand_val);
    free(s->hist);
    memset(s, 0, sizeof *s);
}

/* The sample's plan for (n, k): rank q (0-based, descending) of the sample
 * key used as the lower threshold, and the candidate capacity to allow.
 * q sits 4 standard deviations (binomial, S draws at p = k/n) above the
 * expected rank of the true threshold, so on unstructured data the guess
 * rarely falls short of k candidates (a normal tail beyond 4 sd is about
 * 3e-5; a shortfall costs the radix path, never a wrong answer); the capacity
 * allows 1.5x the expected candidate count.  use_sample = 0: the candidates
 * would be more than a quarter of x, and the radix selection is cheaper. */
typedef struct {
    int use_sample;
    int64_t S, stride, q, cap;
} sample_plan;

static sample_plan plan_for(int64_t n, int64_t k)
{
    sample_plan p = { 0 };
    p.S = n < TOPK_SAMPLE ? n : TOPK_SAMPLE;
    p.stride = p.S ? n / p.S : 1;
    double prob = (double)k / (double)n;
    double mean = (double)p.S * prob, sd = sqrt((double)p.S * prob * (1 - prob));
    double q = ceil(mean + 4 * sd + 4);
    if (q >= (double)p.S || (q + 1) / (double)p.S > 0.25)
        return p;
    p.use_sample = 1;
    p.q = (int64_t)q;
    double expect = (double)n * (double)(p.q + 1) / (double)p.S;
    double cap = expect * 1.5 + 4096;
    p.cap = cap > (double)n ? n : (int64_t)cap;
    return p;
}

static int grow_candidates(topk_scratch *s, int64_t cap)
{
    if (s->cand_cap >= cap)
        return 0;
    uint32_t *a = realloc(s->cand_idx, (size_t)(cap + 16) * sizeof *a);
    if (!a)
        return -1;
    s->cand_idx = a;
    uint32_t *b = realloc(s->cand_val, (size_t)(cap + 16) * sizeof *b);
    if (!b)
        return -1;
    s->cand_val = b;
    s->cand_cap = cap;
    return 0;
}

static int grow_hist(topk_scratch *s)
{
    if (!s->hist)
        s->hist = malloc(HIST_BINS * sizeof *s->hist);
    return s->hist ? 0 : -1;
}

int topk_scratch_reserve(topk_scratch *s, int64_t n, int64_t k)
{
    if (!encodable(n, k) || k == 0 || k == n)
        return 0;
    sample_plan p = plan_for(n, k);
    if (p.use_sample && grow_candidates(s, p.cap) != 0)
        return -1;
    return grow_hist(s); /* the fallback's, so even a fallback allocates nothing */
}

/* ---- selection ----------------------------------------------------------- */

/* The key of rank r (0-based, descending) in a[0, m), m > r; a is permuted.
 * Quickselect, median-of-three pivot, three-way partition (so runs of equal
 * keys cost one round).  -1 when it takes more rounds than a sane input
 * needs (an adversarial order): the caller falls back to the radix path. */
static int select_desc(uint32_t *a, int64_t m, int64_t r, uint32_t *out)
{
    int64_t lo = 0, hi = m;
    int rounds = 0, limit = 16;
    for (int64_t t = m; t > 1; t >>= 1)
        limit += 4;
    for (;;) {
        if (hi - lo <= 16) { /* insertion sort, descending */
            for (int64_t i = lo + 1; i < hi; i++) {
                uint32_t v = a[i];
                int64_t j = i;
                while (j > lo && a[j - 1] < v) {
                    a[j] = a[j - 1];
                    j--;
                }
                a[j] = v;
            }
            *out = a[r];
            return 0;
        }
        if (++rounds > limit)
            return -1;
        uint32_t x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi - 1];
        uint32_t piv = x < y ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
        int64_t lt = lo, i = lo, gt = hi; /* [lo,lt) > piv, [lt,i) == piv, [gt,hi) < piv */
        while (i < gt) {
            uint32_t v = a[i];
            if (v > piv) {
                a[i] = a[lt];
                a[lt] = v;
                lt++;
                i++;
            } else if (v < piv) {
                gt--;
                a[i] = a[gt];
                a[gt] = v;
            } else
                i++;
        }
        if (r < lt)
            hi = lt;
        else if (r >= gt)
            lo = gt;
        else {
            *out = piv;
            return 0;
        }
    }
}

/* Where the kept elements go: the index list or the bitmap, and the values. */
typedef struct {
    unsigned char *idx;  /* index format: k uint32; NULL for the bitmap */
    unsigned char *bits; /* bitmap format: ceil(n/8) bytes, zeroed; NULL for index */
    unsigned char *val;  /* k fp32 */
    int64_t j;           /* elements emitted so far */
} emitter;

static inline void emit(emitter *e, uint32_t i, float v)
{
    if (e->bits)
        e->bits[i >> 3] |= (unsigned char)(1u << (i & 7));
    else
        put_u32(e->idx + 4 * e->j, i);
    memcpy(e->val + 4 * e->j, &v, 4);
    e->j++;
}

/* One pass over x: emit the elements with key > T and the first `ties` with
 * key == T.  zero != NULL (error feedback; zero == x): zero what was sent. */
static void emit_pass(const float *x, float *zero, int64_t n, uint32_t T, int64_t ties, emitter *e)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t kk = key_of(x[i]);
        if (kk > T || (kk == T && ties > 0)) {
            if (kk == T)
                ties--;
            emit(e, (uint32_t)i, x[i]);
            if (zero)
                zero[i] = 0;
        }
    }
}

/* The exact k-th largest key by radix, of x (bits == NULL) or of the
 * value bits bits[0, n) (x == NULL): a histogram of the top 16 bits picks
 * the bin holding it, a histogram of the low 16 bits within that bin picks
 * the key.  The passes over the data have no data-dependent branch, so it
 * costs the same on any input.  *greater: how many keys exceed it.
 * 0 < k <= n. */
static void radix_threshold(const float *x, const uint32_t *bits, int64_t n, int64_t k, uint32_t *hist, uint32_t *T,
                            int64_t *greater)
{
    memset(hist, 0, HIST_BINS * sizeof *hist);
    if (bits)
        for (int64_t i = 0; i < n; i++)
            hist[(bits[i] & 0x7fffffffu) >> 16]++;
    else
        for (int64_t i = 0; i < n; i++)
            hist[key_of(x[i]) >> 16]++;
    int64_t above = 0;
    uint32_t b = HIST_BINS - 1;
    for (;; b--) {
        if (above + hist[b] >= k)
            break;
        above += hist[b];
    }
    memset(hist, 0, HIST_BINS * sizeof *hist);
    for (int64_t i = 0; i < n; i++) {
        uint32_t kk = bits ? bits[i] & 0x7fffffffu : key_of(x[i]);
        hist[kk & 0xffffu] += (kk >> 16) == b;
    }
    uint32_t l = HIST_BINS - 1;
    for (;; l--) {
        if (above + hist[l] >= k)
            break;
        above += hist[l];
    }
    *T = b << 16 | l;
    *greater = above;
}

/* The sample path: 0 when it emitted the k elements, 1 when the caller must
 * take the radix path over x instead (nothing emitted yet), -1 out of
 * memory. */
static int select_by_sample(const float *x, float *zero, int64_t n, int64_t k, const sample_plan *p, topk_scratch *s,
                            emitter *e)
{
    for (int64_t i = 0; i < p->S; i++)
        s->sample[i] = key_of(x[i * p->stride]);
    uint32_t t_lo;
    if (select_desc(s->sample, p->S, p->q, &t_lo) != 0)
        return 1;
    if (grow_candidates(s, p->cap) != 0)
        return -1;

    /* Collect the elements with key >= t_lo, in index order: ci their
     * indices, cv their value bits (key = bits without the sign; reading x
     * again later would be a cache miss per candidate).  16 at a time: at
     * low density most blocks hold none, and the test for "any" is integer
     * arithmetic that vectorises with plain SSE2 (keys < 2^31, so
     * (t_lo - 1) - key is negative exactly when key >= t_lo).  Inside a
     * block every element is written and only the candidates advance c, no
     * branch to mispredict; the arrays hold cap + 16, so a block that starts
     * at c <= cap fits. */
    uint32_t *ci = s->cand_idx, *cv = s->cand_val;
    int64_t c = 0, cap = p->cap, i = 0;
    const int32_t below = (int32_t)t_lo - 1;
    for (; i + 16 <= n; i += 16) {
        uint32_t hit = 0;
        for (int j = 0; j < 16; j++)
            hit |= (uint32_t)(below - (int32_t)key_of(x[i + j]));
        if (!(hit >> 31))
            continue;
        for (int j = 0; j < 16; j++) {
            uint32_t bits;
            memcpy(&bits, &x[i + j], 4);
            ci[c] = (uint32_t)(i + j);
            cv[c] = bits;
            c += (bits & 0x7fffffffu) >= t_lo;
        }
        if (c > cap)
            return 1; /* too many: the guess was far too low */
    }
    for (; i < n; i++) { /* the last n % 16; c <= cap + 15 here */
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        ci[c] = (uint32_t)i;
        cv[c] = bits;
        c += (bits & 0x7fffffffu) >= t_lo;
    }
    if (c < k)
        return 1; /* too few: the guess was too high */

    /* The exact threshold among the candidates (which hold every key >= the
     * k-th largest): quickselect while they are few, else radix. */
    uint32_t T;
    int64_t greater = 0;
    if (grow_hist(s) != 0)
        return -1;
    int quick = c <= HIST_BINS;
    if (quick) { /* the histogram's memory holds the keys the quickselect permutes */
        for (int64_t j = 0; j < c; j++)
            s->hist[j] = cv[j] & 0x7fffffffu;
        quick = select_desc(s->hist, c, k - 1, &T) == 0;
        for (int64_t j = 0; quick && j < c; j++)
            greater += (cv[j] & 0x7fffffffu) > T;
    }
    if (!quick)
        radix_threshold(NULL, cv, c, k, s->hist, &T, &greater);

    /* Keep key > T and the first (k - greater) keys == T: compact the kept
     * candidates in place (j <= m). */
    int64_t ties = k - greater, j = 0;
    for (int64_t m = 0; m < c; m++) {
        uint32_t idx = ci[m], bits = cv[m], kk = bits & 0x7fffffffu;
        int eq = kk == T, keep = kk > T || (eq && ties > 0);
        ties -= eq & keep;
        ci[j] = idx;
        cv[j] = bits;
        j += keep;
    }
    if (e->bits)
        for (int64_t m = 0; m < k; m++)
            e->bits[ci[m] >> 3] |= (unsigned char)(1u << (ci[m] & 7));
    else
        memcpy(e->idx, ci, 4 * (size_t)k); /* uint32 little-endian: the wire's layout */
    memcpy(e->val, cv, 4 * (size_t)k);
    e->j = k;
    if (zero)
        for (int64_t m = 0; m < k; m++)
            zero[ci[m]] = 0;
    return 0;
}

/* x: the tensor to encode; zero: NULL, or x itself to zero what was sent. */
static int64_t encode(const float *x, float *zero, int64_t n, int64_t k, void *out, topk_scratch *s)
{
    unsigned char *o = out;
    size_t need = topk_encoded_bytes(n, k);
    int bitmap = need != index_bytes(k);
    size_t nbits = ((size_t)n + 7) / 8;
    put_u32(o, TOPK_MAGIC);
    put_u32(o + 4, bitmap ? TOPK_FORMAT_BITMAP : TOPK_FORMAT_INDEX);
    put_i64(o + 8, n);
    put_i64(o + 16, k);
    emitter e = { 0 };
    if (bitmap) {
        e.bits = o + TOPK_HEADER_BYTES;
        e.val = e.bits + nbits;
        memset(e.bits, 0, nbits);
    } else {
        e.idx = o + TOPK_HEADER_BYTES;
        e.val = e.idx + 4 * (size_t)k;
    }
    if (k == 0)
        return (int64_t)need;
    if (k == n) {
        emit_pass(x, zero, n, 0, n, &e);
        return (int64_t)need;
    }

    sample_plan p = plan_for(n, k);
    if (p.use_sample) {
        int r = select_by_sample(x, zero, n, k, &p, s, &e);
        if (r < 0)
            return -1;
        if (r == 0)
            return (int64_t)need;
    }
    if (grow_hist(s) != 0)
        return -1;
    uint32_t T;
    int64_t greater;
    radix_threshold(x, NULL, n, k, s->hist, &T, &greater);
    emit_pass(x, zero, n, T, k - greater, &e);
    return (int64_t)need;
}

int64_t topk_encode(const float *x, int64_t n, int64_t k, void *out, size_t capacity, topk_scratch *s)
{
    if (!encodable(n, k) || !out || (n > 0 && !x) || capacity < topk_encoded_bytes(n, k))
        return -1;
    return encode(x, NULL, n, k, out, s);
}

int64_t topk_encode_with_residual(const float *x, float *residual, int64_t n, int64_t k, void *out, size_t capacity,
                                  topk_scratch *s)
{
    if (!encodable(n, k) || !out || (n > 0 && (!x || !residual)) || capacity < topk_encoded_bytes(n, k))
        return -1;
    /* Out of memory is the one failure after this point: grow first, so
     * that residual is never left half updated. */
    if (topk_scratch_reserve(s, n, k) != 0)
        return -1;
    for (int64_t i = 0; i < n; i++)
        residual[i] += x[i];
    return encode(residual, residual, n, k, out, s);
}

/* ---- decode -------------------------------------------------------------- */

#define FAIL(...)                             \
    do {                                      \
        if (err && errn)                      \
            snprintf(err, errn, __VA_ARGS__); \
        return -1;                            \
    } while (0)

int topk_decode(const void *in, size_t len, float *out, int64_t n, char *err, size_t errn)
{
    const unsigned char *b = in;
    if (n < 0 || n > TOPK_MAX_N)
        FAIL("topk: n = %lld is outside [0, %lld]", (long long)n, (long long)TOPK_MAX_N);
    if (!b || len < TOPK_HEADER_BYTES)
        FAIL("topk: %zu bytes is shorter than the %d-byte header", len, TOPK_HEADER_BYTES);
    if (get_u32(b) != TOPK_MAGIC)
        FAIL("topk: bad magic 0x%08x (expected \"FUTK\")", get_u32(b));
    uint32_t format = get_u32(b + 4);
    int64_t hn = get_i64(b + 8), k = get_i64(b + 16);
    if (format != TOPK_FORMAT_INDEX && format != TOPK_FORMAT_BITMAP)
        FAIL("topk: unknown format %u", format);
    if (hn != n)
        FAIL("topk: header says n = %lld, the tensor has %lld elements", (long long)hn, (long long)n);
    if (k < 0 || k > n)
        FAIL("topk: k = %lld is outside [0, n = %lld]", (long long)k, (long long)n);
    size_t want = format == TOPK_FORMAT_INDEX ? index_bytes(k) : bitmap_bytes(n, k);
    if (len != want)
        FAIL("topk: %zu bytes, expected %zu for %s format with n = %lld, k = %lld", len, want,
             format == TOPK_FORMAT_INDEX ? "index" : "bitmap", (long long)n, (long long)k);
    if (n > 0 && !out)
        FAIL("topk: no output tensor");

    const unsigned char *body = b + TOPK_HEADER_BYTES;
    if (format == TOPK_FORMAT_INDEX) {
        const unsigned char *val = body + 4 * (size_t)k;
        int64_t prev = -1;
        for (int64_t j = 0; j < k; j++) { /* check everything before writing anything */
            int64_t i = get_u32(body + 4 * j);
            if (i >= n)
                FAIL("topk: index %lld at position %lld is out of range (n = %lld)", (long long)i, (long long)j,
                     (long long)n);
            if (i <= prev)
                FAIL("topk: index %lld at position %lld does not ascend (previous %lld)", (long long)i, (long long)j,
                     (long long)prev);
            prev = i;
        }
        if (n > 0)
            memset(out, 0, (size_t)n * sizeof *out);
        for (int64_t j = 0; j < k; j++)
            memcpy(&out[get_u32(body + 4 * j)], val + 4 * j, 4);
        return 0;
    }

    size_t nbits = ((size_t)n + 7) / 8;
    const unsigned char *val = body + nbits;
    if (n % 8 && (body[nbits - 1] >> (n % 8)))
        FAIL("topk: bitmap has bits set past n = %lld", (long long)n);
    /* 8 bitmap bytes at a time: one popcount and one ctz a kept element */
    size_t nw = nbits / 8;
    int64_t pop = 0;
    for (size_t w = 0; w < nw; w++)
        pop += __builtin_popcountll(get_u64(body + 8 * w));
    for (size_t i = 8 * nw; i < nbits; i++)
        pop += __builtin_popcount(body[i]);
    if (pop != k)
        FAIL("topk: bitmap has %lld bits set, header says k = %lld", (long long)pop, (long long)k);
    if (n > 0)
        memset(out, 0, (size_t)n * sizeof *out);
    int64_t j = 0;
    for (size_t w = 0; w < nw; w++)
        for (uint64_t m = get_u64(body + 8 * w); m; m &= m - 1) {
            memcpy(&out[64 * w + (size_t)__builtin_ctzll(m)], val + 4 * j, 4);
            j++;
        }
    for (size_t w = 8 * nw; w < nbits; w++) /* bits past n are zero (checked above) */
        for (unsigned m = body[w]; m; m &= m - 1) {
            memcpy(&out[8 * w + (size_t)__builtin_ctz(m)], val + 4 * j, 4);
            j++;
        }
    return 0;
}
