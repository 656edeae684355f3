/* data.c: token data and the deterministic random numbers (see data.h). */
#include "data.h"
#include "rt_error.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int grow(rt_data *d, int64_t more)
{
    uint16_t *p = realloc(d->tokens, (size_t)(d->n + more) * sizeof *p);
    if (!p)
        return -1;
    d->tokens = p;
    return 0;
}

int rt_data_load(rt_data *d, const char *path, char *err, size_t err_size)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        return rt_error(err, err_size, "%s: cannot open the data: %s", path, strerror(errno));
    }
    int rc = -1;
    int32_t header[256];
    size_t got = fread(header, 1, sizeof header, f);
    if (got == sizeof header && header[0] == RT_SHARD_MAGIC) {
        int64_t count = header[2];
        if (header[1] != RT_SHARD_VERSION) {
            snprintf(err, err_size, "%s: token shard version %d, expected %d", path, header[1], RT_SHARD_VERSION);
        } else if (count <= 0 || grow(d, count)) {
            snprintf(err, err_size, "%s: token shard claims %lld tokens", path, (long long)count);
        } else if (fread(d->tokens + d->n, sizeof(uint16_t), (size_t)count, f) != (size_t)count) {
            snprintf(err, err_size, "%s: token shard ends before its %lld tokens", path, (long long)count);
        } else {
            d->n += count;
            d->from_shards = 1;
            rc = 0;
        }
    } else {
        /* Text: the bytes read so far, then the rest. */
        unsigned char buf[1 << 16];
        memcpy(buf, header, got);
        size_t n = got;
        do {
            if (grow(d, (int64_t)n)) {
                snprintf(err, err_size, "%s: out of memory reading the data", path);
                fclose(f);
                return -1;
            }
            for (size_t i = 0; i < n; i++)
                d->tokens[d->n + (int64_t)i] = buf[i];
            d->n += (int64_t)n;
        } while ((n = fread(buf, 1, sizeof buf, f)) > 0);
        rc = ferror(f) ? -1 : 0;
        if (rc)
            snprintf(err, err_size, "%s: read error", path);
    }
    fclose(f);
    return rc;
}

void rt_data_batch(const rt_data *d, uint64_t seed, int64_t step, int64_t row0, int32_t *tokens, int32_t *targets,
                   int64_t B, int64_t T)
{
    for (int64_t b = 0; b < B; b++) {
        rt_rng r = rt_rng_seeded(seed, (uint64_t)step, (uint64_t)(row0 + b) + 0x5EED);
        int64_t start = (int64_t)(rt_rng_next(&r) % (uint64_t)(d->n - T - 1));
        for (int64_t t = 0; t < T; t++) {
            if (tokens)
                tokens[b * T + t] = d->tokens[start + t];
            if (targets)
                targets[b * T + t] = d->tokens[start + t + 1];
        }
    }
}

void rt_data_free(rt_data *d)
{
    free(d->tokens);
    memset(d, 0, sizeof *d);
}
