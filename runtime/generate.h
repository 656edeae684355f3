/* generate.h: an inference program's main loop (a device program built
 * with --inference: passes/decode.c): the weights from --init, the prompt
 * fed one token a step through the key/value cache, then each next token
 * drawn from the last step's logits and fed back, until --max-tokens, a
 * stop id or the cache's last row.
 *
 * Standard output, one line a generated token as it comes ("ID\n",
 * flushed): fusionc generate reads it and decodes the text.  Standard
 * error, at the end: the prompt's and the generation's tokens, seconds and
 * tokens a second.
 *
 * Drawing: temperature 0 is greedy (the first largest logit); otherwise
 * softmax(logits / T) restricted to the top-k (k > 0) largest, then to the
 * smallest set of those whose probabilities sum to at least top-p
 * (p < 1), renormalised, and drawn from the seed's stream (data.h's rt_rng).
 *
 * What it deliberately is not: a batcher of requests (one sequence, row 0
 * of the program's batch) or a tokenizer (ids in, ids out). */
#ifndef FUSION_RT_GENERATE_H
#define FUSION_RT_GENERATE_H

#include <stdint.h>

#include "data.h"
#include "device_program.h"

#define RT_GENERATE_MAX_INIT 8
#define RT_GENERATE_MAX_STOP 16

typedef struct {
    const char *init[RT_GENERATE_MAX_INIT]; /* --init PATH: the weights (repeatable) */
    int n_init;
    const char *prompt_ids; /* --prompt-ids 1,2,3                     */
    int64_t max_tokens;     /* --max-tokens N (default 64)            */
    double temperature;     /* --temperature T (default 1; 0 greedy)  */
    int top_k;              /* --top-k K (0: all)                     */
    double top_p;           /* --top-p P (default 1: all)             */
    int64_t seed;           /* --seed S (default 1)                   */
    const char *stop_ids;   /* --stop-ids 2,7: end at any of them     */
    int threads;            /* --threads N                            */
    int serve;              /* --serve: requests on standard input (serve_worker.c) */
} rt_generate_options;

/* Parse an inference program's command line into o (defaults first).  0,
 * 1 after --help (printed), 2 on a bad command line (said on stderr). */
int rt_generate_options_parse(int argc, char **argv, rt_generate_options *o);

/* Generate with p (loaded, its weights not yet read).  0, or 1 with the
 * reason on stderr. */
struct rt_comm;
/* comm: the links of a program of several stages (NULL on one device). */
int rt_generate(program *p, const rt_generate_options *o, struct rt_comm *comm);
/* --serve: requests in, tokens out, every row a request (serve_worker.c);
 * comm as rt_generate's. */
int rt_serve_worker(program *p, const rt_generate_options *o, struct rt_comm *comm);

/* Where an inference program's steps are fed (tensor indices, -1 where
 * this stage has none: only the first feeds): the one-token step's tokens
 * and positions, and the prompt step's (passes/prefill.c). */
typedef struct {
    int32_t tokens, positions, prefill_tokens, prefill_positions;
} rt_inference_feeds;
rt_inference_feeds rt_inference_feeds_find(const program *p);

/* The next token from logits[V] (f32) by o's rule, drawing from r when
 * sampling; probs: V floats and order: V ints of scratch. */
int32_t rt_generate_pick(const float *logits, int64_t V, const rt_generate_options *o, rt_rng *r, float *probs,
                         int32_t *order);

#endif
