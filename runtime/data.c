/* data.c: token data and the deterministic random numbers (see data.h). */
#include "data.h"
#include "rt_error.h"
#include "../ir/op_kinds.h" /* OP_IGNORE_TARGET */

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- random numbers -------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

rt_rng rt_rng_seeded(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t x = a * 0x100000001B3ull ^ b * 0x9E3779B97F4A7C15ull ^ c * 0xC2B2AE3D27D4EB4Full;
    rt_rng r;
    for (int i = 0; i < 4; i++)
        r.s[i] = splitmix64(&x);
    return r;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rt_rng_next(rt_rng *r)
{
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return result;
}

double rt_rng_uniform(rt_rng *r) { return (double)(rt_rng_next(r) >> 11) * 0x1.0p-53; }

double rt_rng_normal(rt_rng *r)
{
    double u = rt_rng_uniform(r), v = rt_rng_uniform(r);
    return sqrt(-2.0 * log(u > 0 ? u : 1e-300)) * cos(6.283185307179586 * v);
}

/* ---- data -------------------------------------------------------------------- */

/* Room for `more` tokens after d->n (the capacity doubles: text arrives in chunks). */
static int grow(rt_data *d, int64_t more)
{
    if (d->n + more <= d->cap)
        return 0;
    int64_t cap = d->cap > 0 ? d->cap : 1 << 16;
    while (cap < d->n + more)
        cap *= 2;
    uint32_t *p = realloc(d->tokens, (size_t)cap * sizeof *p);
    if (!p)
        return -1;
    d->tokens = p;
    if (d->mask) {
        uint8_t *m = realloc(d->mask, (size_t)cap);
        if (!m)
            return -1;
        d->mask = m;
    }
    d->cap = cap;
    return 0;
}

static int32_t le32(const unsigned char *b)
{
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}

/* Text: the `got` bytes read already (head), then the rest of f. */
static int load_text(rt_data *d, FILE *f, const unsigned char *head, size_t got, const char *path, char *err, size_t n)
{
    static unsigned char buf[1 << 16];
    const unsigned char *bytes = head;
    size_t len = got;
    do {
        if (grow(d, (int64_t)len))
            return rt_error(err, n, "%s: out of memory reading the data", path);
        for (size_t i = 0; i < len; i++)
            d->tokens[d->n + (int64_t)i] = bytes[i];
        if (d->mask)
            memset(d->mask + d->n, 1, len);
        d->n += (int64_t)len;
        bytes = buf;
    } while ((len = fread(buf, 1, sizeof buf, f)) > 0);
    if (ferror(f))
        return rt_error(err, n, "%s: read error", path);
    return 0;
}

/* A token shard whose header (head, whole) has the magic: its version,
 * count and size checked, then its ids. */
static int load_shard(rt_data *d, FILE *f, const unsigned char *head, const char *path, char *err, size_t n)
{
    int32_t version = le32(head + 4), count = le32(head + 8), flags = le32(head + 12);
    if (version != RT_SHARD_VERSION_U16 && version != RT_SHARD_VERSION_U32)
        return rt_error(err, n, "%s: token shard version %d, expected %d (uint16 ids) or %d (uint32 ids)", path,
                        (int)version, RT_SHARD_VERSION_U16, RT_SHARD_VERSION_U32);
    if (count <= 0)
        return rt_error(err, n, "%s: token shard claims %d tokens (the count must be above 0)", path, (int)count);
    if (flags & ~RT_SHARD_FLAG_MASK)
        return rt_error(err, n, "%s: token shard flags %d (header[3]): only %d (a loss mask) is known", path,
                        (int)flags, RT_SHARD_FLAG_MASK);
    int width = version == RT_SHARD_VERSION_U16 ? 2 : 4, masked = (flags & RT_SHARD_FLAG_MASK) != 0;
    int64_t want = RT_SHARD_HEADER_BYTES + (int64_t)count * (width + masked);
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISREG(sb.st_mode) && (int64_t)sb.st_size != want) {
        int64_t size = (int64_t)sb.st_size;
        char what[64];
        if (size < want)
            snprintf(what, sizeof what, "is too short");
        else
            snprintf(what, sizeof what, "has %lld trailing bytes", (long long)(size - want));
        return rt_error(err, n,
                        "%s: token shard %s: its header counts %d tokens of %d bytes%s (%lld bytes with the "
                        "header), the file has %lld",
                        path, what, (int)count, width, masked ? " and a mask byte each" : "", (long long)want,
                        (long long)size);
    }
    if (masked && !d->mask) { /* the tokens before this file are all trained on */
        d->mask = malloc((size_t)(d->cap > 0 ? d->cap : 1));
        if (!d->mask)
            return rt_error(err, n, "%s: out of memory for the mask", path);
        memset(d->mask, 1, (size_t)d->n);
    }
    if (grow(d, count))
        return rt_error(err, n, "%s: out of memory for the shard's %d tokens", path, (int)count);
    static unsigned char buf[1 << 16];
    int64_t done = 0;
    while (done < count) {
        size_t want_ids = (size_t)(count - done) < sizeof buf / 4 ? (size_t)(count - done) : sizeof buf / 4;
        size_t got = fread(buf, (size_t)width, want_ids, f);
        uint32_t *out = d->tokens + d->n + done;
        for (size_t i = 0; i < got; i++)
            out[i] = width == 2 ? (uint32_t)buf[2 * i] | (uint32_t)buf[2 * i + 1] << 8 : (uint32_t)le32(buf + 4 * i);
        done += (int64_t)got;
        if (got < want_ids)
            return rt_error(err, n,
                            "%s: token shard is too short: it ends after %lld of the %d tokens its header counts", path,
                            (long long)done, (int)count);
    }
    if (masked && fread(d->mask + d->n, 1, (size_t)count, f) != (size_t)count)
        return rt_error(err, n, "%s: token shard is too short: its mask ends before its %d tokens' bytes", path,
                        (int)count);
    for (int64_t i = 0; masked && i < count; i++)
        if (d->mask[d->n + i] > 1)
            return rt_error(err, n, "%s: mask byte %d at token %lld: 0 (not a target) or 1 only", path,
                            (int)d->mask[d->n + i], (long long)i);
    if (!masked && d->mask)
        memset(d->mask + d->n, 1, (size_t)count);
    if (fgetc(f) != EOF) /* a pipe: its size was not known before */
        return rt_error(err, n, "%s: token shard has trailing bytes after the %d tokens its header counts", path,
                        (int)count);
    d->n += count;
    d->from_shards = 1;
    return 0;
}

/* The ids from `from` on: each below vocab (> 0), and within int32. */
static int check_ids(const rt_data *d, int64_t from, int64_t vocab, const char *path, char *err, size_t n)
{
    int64_t limit = vocab > 0 ? vocab : (int64_t)INT32_MAX + 1;
    for (int64_t i = from; i < d->n; i++) {
        if ((int64_t)d->tokens[i] < limit)
            continue;
        if (vocab > 0)
            return rt_error(err, n, "%s: token id %lld at position %lld is outside the model's vocabulary of %lld",
                            path, (long long)d->tokens[i], (long long)(i - from), (long long)vocab);
        return rt_error(err, n, "%s: token id %lld at position %lld does not fit the model's int32 token inputs", path,
                        (long long)d->tokens[i], (long long)(i - from));
    }
    return 0;
}

int rt_data_load(rt_data *d, const char *path, rt_data_format format, int64_t vocab, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_error(err, err_size, "%s: cannot open the data: %s", path, strerror(errno));
    unsigned char head[RT_SHARD_HEADER_BYTES] = { 0 };
    size_t got = fread(head, 1, sizeof head, f);
    int32_t magic = le32(head); /* the bytes a short file lacks read as 0 */
    int64_t before = d->n;
    int from_shards = d->from_shards;
    int rc;
    const unsigned char *nul = memchr(head, 0, got);
    if (ferror(f))
        rc = rt_error(err, err_size, "%s: read error", path);
    else if (format == RT_DATA_TEXT)
        rc = load_text(d, f, head, got, path, err, err_size);
    else if (got >= 4 && magic == RT_SHARD_MAGIC && got < sizeof head)
        rc = rt_error(err, err_size, "%s: token shard is too short: it ends inside its %d-byte header (%zu bytes)",
                      path, RT_SHARD_HEADER_BYTES, got);
    else if (got >= 4 && magic == RT_SHARD_MAGIC)
        rc = load_shard(d, f, head, path, err, err_size);
    else if (format == RT_DATA_SHARD)
        rc = rt_error(err, err_size, "%s: not a token shard (magic %d, expected %d; --data-format shard)", path,
                      (int)magic, RT_SHARD_MAGIC);
    else if (nul)
        rc = rt_error(err, err_size,
                      "%s: not a token shard (magic %d, expected %d) and not text (NUL byte at offset %lld); "
                      "--data-format text reads it as bytes",
                      path, (int)magic, RT_SHARD_MAGIC, (long long)(nul - head));
    else
        rc = load_text(d, f, head, got, path, err, err_size);
    fclose(f);
    if (rc == 0)
        rc = check_ids(d, before, vocab, path, err, err_size);
    if (rc) { /* d as it was */
        d->n = before;
        d->from_shards = from_shards;
    }
    return rc;
}

/* Where row `row` of (seed, step)'s batch starts: drawn from its own stream. */
static int64_t window_start(const rt_data *d, uint64_t seed, int64_t step, int64_t row, int64_t T)
{
    rt_rng r = rt_rng_seeded(seed, (uint64_t)step, (uint64_t)row + 0x5EED);
    return (int64_t)(rt_rng_next(&r) % (uint64_t)(d->n - T - 1));
}

void rt_dropout_mask(float *mask, double p, uint64_t seed, int64_t step, uint64_t tag, int64_t row0, int64_t B,
                     int64_t n)
{
    float keep = (float)(1.0 / (1.0 - p));
    for (int64_t b = 0; b < B; b++) {
        rt_rng r = rt_rng_seeded(seed ^ tag, (uint64_t)step, (uint64_t)(row0 + b) + 0xD809);
        for (int64_t i = 0; i < n; i++)
            mask[b * n + i] = rt_rng_uniform(&r) < p ? 0.0f : keep;
    }
}

void rt_data_batch(const rt_data *d, uint64_t seed, int64_t step, int64_t row0, int32_t *tokens, int32_t *targets,
                   int64_t B, int64_t T)
{
    for (int64_t b = 0; b < B; b++) {
        int64_t start = window_start(d, seed, step, row0 + b, T);
        for (int64_t t = 0; t < T; t++) {
            if (tokens)
                tokens[b * T + t] = (int32_t)d->tokens[start + t];
            if (targets)
                targets[b * T + t] =
                    d->mask && !d->mask[start + t + 1] ? OP_IGNORE_TARGET : (int32_t)d->tokens[start + t + 1];
        }
    }
}

double rt_data_loss_weight(const rt_data *d, uint64_t seed, int64_t step, int64_t row0, int64_t rows, int64_t T)
{
    if (!d || !d->mask || rows < 1 || T < 1)
        return 1.0;
    int64_t trained = 0;
    for (int64_t b = 0; b < rows; b++) { /* the windows rt_data_batch draws */
        int64_t start = window_start(d, seed, step, row0 + b, T);
        for (int64_t t = 0; t < T; t++)
            trained += d->mask[start + t + 1];
    }
    return trained > 0 ? (double)(rows * T) / (double)trained : 0.0;
}

void rt_data_free(rt_data *d)
{
    free(d->tokens);
    free(d->mask);
    memset(d, 0, sizeof *d);
}
