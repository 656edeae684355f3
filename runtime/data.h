/* data.h: training data for the device programs.
 *
 * Two formats, told apart by their first bytes:
 *   - llm.c token shards: a 256-int32 header (magic 20240520, version 1,
 *     token count), then the tokens as little-endian uint16;
 *   - anything else: text, read as bytes (tokens 0..255).
 * Several files may be given; their tokens are concatenated in order.
 *
 * Batches depend only on (seed, step): row b of step s starts at a
 * position drawn from (seed, s, b), so a rerun or a resumed run sees the
 * same data, and no position has to be saved.
 */
#ifndef FUSION_RT_DATA_H
#define FUSION_RT_DATA_H

#include <stddef.h>
#include <stdint.h>

#define RT_SHARD_MAGIC   20240520
#define RT_SHARD_VERSION 1

typedef struct {
    uint16_t *tokens;
    int64_t n;
    int from_shards; /* 1: token shards, 0: bytes of text */
} rt_data;

/* Append the tokens of `path` to d (d zeroed before the first call).
 * Returns 0, or -1 with a one-line reason naming the file in err. */
int rt_data_load(rt_data *d, const char *path, char *err, size_t err_size);
/* tokens[b*T + t] and targets (the next token) for `step`: rows row0 ..
 * row0+B-1 of the step's batch, T tokens each.  A micro-batch or a replica
 * asks for its slice of rows and sees exactly the rows a one-device run of
 * the whole batch sees.  tokens or targets may be NULL (a pipeline stage
 * that holds only one of them). */
void rt_data_batch(const rt_data *d, uint64_t seed, int64_t step, int64_t row0, int32_t *tokens, int32_t *targets,
                   int64_t B, int64_t T);
void rt_data_free(rt_data *d);

/* Deterministic random numbers: xoshiro256** seeded through splitmix64
 * (both public domain, S. Vigna), from up to three integers. */
typedef struct {
    uint64_t s[4];
} rt_rng;
rt_rng rt_rng_seeded(uint64_t a, uint64_t b, uint64_t c);
uint64_t rt_rng_next(rt_rng *r);
double rt_rng_uniform(rt_rng *r); /* [0, 1) */
double rt_rng_normal(rt_rng *r);  /* N(0, 1) */

#endif
