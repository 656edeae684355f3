/* data.h: training data for the device programs.
 *
 * Two formats:
 *   - llm.c token shards: a 256-int32 little-endian header ([0] the magic
 *     20240520, [1] the version, [2] the token count, [3] fusion's flags,
 *     the rest 0), then the tokens: version 1 as uint16 (vocabularies up to
 *     65,536), version 2 as uint32 (larger ones), little-endian; with flag
 *     RT_SHARD_FLAG_MASK (fusionc tokenize --jsonl), one byte a token
 *     after them: 1 the token is trained on as a target, 0 not (a prompt).
 *     llm.c's readers leave [3] at 0 and read `count` ids: a masked
 *     shard's ids read the same there, its mask ignored;
 *   - text, read as bytes (tokens 0..255).
 * Several files may be given; their tokens are concatenated in order.
 *
 * Which format a file is (--data-format): `shard` requires the magic;
 * `text` reads any file as bytes; `auto` (the default) reads a file that
 * starts with the magic as a shard, and any other as text only if its
 * first 1,024 bytes hold no NUL byte.  Text has none, and a shard's header
 * is mostly zeros (253 zero int32s), so a shard whose magic is damaged is
 * refused ("not a token shard ... and not text"), never trained on as
 * bytes.  (A UTF-16 text file has NULs too: --data-format text reads it.)
 *
 * A file is checked whole when it is opened, each fault one line naming
 * it: a shard's version (1 or 2), its count (above 0), and its size, which
 * must be exactly 1024 + count * (2 or 4) bytes (shorter: the shard is cut
 * short; longer: trailing bytes); and, given the model's vocabulary V, the
 * first id >= V, with its position in the file.
 *
 * Batches depend only on (seed, step): row b of step s starts at a
 * position drawn from (seed, s, b), so a rerun or a resumed run sees the
 * same data, and no position has to be saved.
 */
#ifndef FUSION_RT_DATA_H
#define FUSION_RT_DATA_H

#include <stddef.h>
#include <stdint.h>

#define RT_SHARD_MAGIC        20240520
#define RT_SHARD_HEADER_BYTES 1024
#define RT_SHARD_VERSION_U16  1 /* uint16 ids */
#define RT_SHARD_VERSION_U32  2 /* uint32 ids */
#define RT_SHARD_FLAG_MASK    1 /* header[3]: a loss mask, a byte a token, after the ids */
/* A masked token's target is OP_IGNORE_TARGET (ir/op_kinds.h):
 * cross_entropy counts it neither in its sum nor, by the step's loss
 * weight (rt_data_loss_weight), in its mean. */

/* --data-format: how a file is read (above). */
typedef enum { RT_DATA_AUTO = 0, RT_DATA_SHARD = 1, RT_DATA_TEXT = 2 } rt_data_format;

typedef struct {
    uint32_t *tokens;
    int64_t n, cap;
    int from_shards; /* 1: token shards, 0: bytes of text */
    uint8_t *mask;   /* [cap] 1: trained on as a target; NULL: every token is (no file had a mask) */
} rt_data;

/* Append the tokens of `path`, read as `format`, to d (d zeroed before the
 * first call).  vocab > 0: every id must be below it (the model's
 * vocabulary); 0: no bound but int32's (the model's inputs are i32).
 * Returns 0, or -1 with a one-line reason naming the file in err (d as it
 * was). */
int rt_data_load(rt_data *d, const char *path, rt_data_format format, int64_t vocab, char *err, size_t err_size);
/* tokens[b*T + t] and targets (the next token) for `step`: rows row0 ..
 * row0+B-1 of the step's batch, T tokens each.  A micro-batch or a replica
 * asks for its slice of rows and sees exactly the rows a one-device run of
 * the whole batch sees.  tokens or targets may be NULL (a pipeline stage
 * that holds only one of them). */
void rt_data_batch(const rt_data *d, uint64_t seed, int64_t step, int64_t row0, int32_t *tokens, int32_t *targets,
                   int64_t B, int64_t T);
/* With a mask, a target whose token it marks 0 is OP_IGNORE_TARGET. */
/* The factor that makes cross_entropy's mean over all of a step's targets
 * (the ignored ones counting 0) the mean over the ones it trains on: the
 * rows row0 .. row0+rows-1 of (seed, step)'s batch, T targets each, over how
 * many of them are not ignored (1 without a mask; 0 when every one is). */
double rt_data_loss_weight(const rt_data *d, uint64_t seed, int64_t step, int64_t row0, int64_t rows, int64_t T);
/* A dropout mask (an input of init dropout(p): LoRA's, passes/adapters.c)
 * for rows row0 .. row0+B-1 of (seed, step)'s batch, n values a row: each
 * 0 with probability p, else 1/(1-p), drawn from a stream of its own for
 * (seed, step, row, tag) (tag: a hash of the mask's name), so that a row's
 * mask is the same whichever replica or micro-batch holds it. */
void rt_dropout_mask(float *mask, double p, uint64_t seed, int64_t step, uint64_t tag, int64_t row0, int64_t B,
                     int64_t n);
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
