/* generate.c: an inference program's main loop (generate.h). */
#include "generate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ir/ir.h"
#include "checkpoint.h"
#include "comm/comm.h"
#include "comm/hub.h"
#include "cli_option.h"
#include "cpu/half.h"
#include "program.h"
#include "rt_error.h"

/* ---- the command line --------------------------------------------------------- */

static int parse_init(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    rt_generate_options *o = field;
    if (o->n_init == RT_GENERATE_MAX_INIT)
        return rt_error(why, n, "too many %s options (the limit is %d)", opt->name, RT_GENERATE_MAX_INIT);
    o->init[o->n_init++] = value;
    return 0;
}

/* clang-format off */
static const cli_option generate_options[] = {
    { .name = "--init", .metavar = "PATH", CLI_WHOLE(parse_init),
      .help = "the weights: a safetensors file, a Hugging Face folder or a fusion checkpoint\n"
              "(repeatable: a later source's tensors over an earlier one's); every parameter\n"
              "must be found" },
    { .name = "--prompt-ids", .metavar = "IDS", CLI_NONEMPTY(rt_generate_options, prompt_ids),
      .help = "the prompt's token ids, comma-separated (required)" },
    { .name = "--max-tokens", .metavar = "N", CLI_INT64(rt_generate_options, max_tokens), .lo = 0, .hi = 1e9,
      .expects = "a count in [0, 1e9]", .help = "tokens to generate at most (default 64)" },
    { .name = "--temperature", .metavar = "T", CLI_DOUBLE(rt_generate_options, temperature), .lo = 0, .hi = 100,
      .expects = "a number in [0, 100]", .help = "softmax temperature (default 1; 0: greedy, the largest logit)" },
    { .name = "--top-k", .metavar = "K", CLI_INT(rt_generate_options, top_k), .lo = 0, .hi = 1e9,
      .expects = "a count in [0, 1e9]", .help = "draw among the K likeliest tokens only (default 0: all)" },
    { .name = "--top-p", .metavar = "P", CLI_DOUBLE(rt_generate_options, top_p), .lo = 0, .hi = 1,
      .open = CLI_OPEN_LO, .expects = "a number in (0, 1]",
      .help = "draw among the likeliest tokens whose probabilities sum to P (default 1)" },
    { .name = "--seed", .metavar = "S", CLI_INT64(rt_generate_options, seed), .lo = 0, .hi = 9.2e18,
      .expects = "a non-negative integer", .help = "the draws' seed (default 1)" },
    { .name = "--stop-ids", .metavar = "IDS", CLI_NONEMPTY(rt_generate_options, stop_ids),
      .help = "end when one of these ids (comma-separated) is generated (it is printed)" },
    { .name = "--threads", .metavar = "N", CLI_INT(rt_generate_options, threads), .lo = 1, .hi = 1024,
      .expects = "a count in [1, 1024]", .help = "CPU threads (default: the cluster file's)" },
    { .name = "--serve", CLI_FLAG(rt_generate_options, serve),
      .help = "a server's worker: JSON requests a line on standard input, tokens a line out,\n"
              "the program's rows shared by the requests (runtime/serve_worker.c; fusionc serve)" },
};
/* clang-format on */

static const cli_usage usage = { NULL, generate_options, NULL, sizeof generate_options / sizeof generate_options[0], 20,
                                 NULL };

static void print_usage(FILE *f, const char *program)
{
    fprintf(f,
            "usage: %s --init PATH --prompt-ids IDS [--max-tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
            "       [--seed S] [--stop-ids IDS] [--threads N]\n\n"
            "An inference program (fusionc compile --inference): prints each generated token id on a line\n"
            "of its own as it comes, then the speed on standard error.\n",
            program);
    cli_usage_print(f, &usage);
}

int rt_generate_options_parse(int argc, char **argv, rt_generate_options *o)
{
    int rc = cli_parse_program(&usage, argc, argv, o, print_usage);
    if (rc)
        return rc;
    const char *missing = o->n_init == 0                ? "--init PATH (the weights)"
                          : !o->prompt_ids && !o->serve ? "--prompt-ids IDS (or --serve)"
                                                        : NULL;
    if (missing) {
        fprintf(stderr, "%s: %s is required\n\n", argv[0], missing);
        print_usage(stderr, argv[0]);
        return 2;
    }
    return 0;
}

/* "1,2,3" into ids[] (each in [0, vocab)); the count, or -1 with why. */
static int64_t parse_ids(const char *text, const char *what, int64_t vocab, int32_t *ids, int64_t cap, char *why,
                         size_t n)
{
    int64_t k = 0;
    for (const char *p = text; *p;) {
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || v >= vocab || (*end && *end != ','))
            return rt_error(why, n, "%s '%s': item %lld is not a token id in [0, %lld)", what, text, (long long)k + 1,
                            (long long)vocab);
        if (k == cap)
            return rt_error(why, n, "%s: more than %lld ids", what, (long long)cap);
        ids[k++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    return k;
}

/* ---- drawing the next token --------------------------------------------------- */

static const float *sort_by;
static int by_logit_desc(const void *a, const void *b)
{
    float x = sort_by[*(const int32_t *)a], y = sort_by[*(const int32_t *)b];
    if (x != y)
        return x < y ? 1 : -1;
    return (*(const int32_t *)a > *(const int32_t *)b) - (*(const int32_t *)a < *(const int32_t *)b);
}

int32_t rt_generate_pick(const float *logits, int64_t V, const rt_generate_options *o, rt_rng *r, float *probs,
                         int32_t *order)
{
    int32_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = (int32_t)i;
    if (!(o->temperature > 0))
        return best;
    /* The candidates, likeliest first: all, or the top k. */
    for (int64_t i = 0; i < V; i++)
        order[i] = (int32_t)i;
    sort_by = logits;
    qsort(order, (size_t)V, sizeof *order, by_logit_desc);
    int64_t n = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    double sum = 0.0, mx = logits[order[0]];
    for (int64_t i = 0; i < n; i++) {
        probs[i] = (float)exp(((double)logits[order[i]] - mx) / o->temperature);
        sum += probs[i];
    }
    /* The nucleus: the fewest likeliest whose probabilities reach top_p. */
    if (o->top_p < 1.0) {
        double kept = 0.0;
        int64_t m = 0;
        while (m < n && (m == 0 || kept < o->top_p * sum))
            kept += probs[m++];
        n = m, sum = kept;
    }
    double u = rt_rng_uniform(r) * sum, acc = 0.0;
    for (int64_t i = 0; i < n; i++) {
        acc += probs[i];
        if (u < acc)
            return order[i];
    }
    return order[n - 1];
}

/* ---- the loop ------------------------------------------------------------------ */

rt_inference_feeds rt_inference_feeds_find(const program *p)
{
    rt_inference_feeds f = { -1, -1, -1, -1 };
    for (int32_t i = 0; i < p->manifest.n_tensors; i++) {
        if (p->tensors[i].role != ROLE_INPUT)
            continue;
        int32_t feed = p->tensors[i].feed;
        if (feed == RT_FEED_TOKENS)
            f.tokens = i;
        else if (feed == RT_FEED_POSITIONS)
            f.positions = i;
        else if (feed == RT_FEED_PREFILL_TOKENS)
            f.prefill_tokens = i;
        else if (feed == RT_FEED_PREFILL_POSITIONS)
            f.prefill_positions = i;
    }
    return f;
}

/* One step: token `id` at position `at` of row 0 (a first stage feeds
 * them; a later one receives what it needs); on the stage with the
 * logits, those of row 0's token into out (f32).  0, or 1 said. */
static int step(program *p, struct rt_comm *comm, const rt_inference_feeds *f, int32_t id, int64_t at, float *out)
{
    const rt_manifest *m = &p->manifest;
    if (f->tokens >= 0) {
        int32_t *tok = (int32_t *)(p->arena + p->tensors[f->tokens].t.offset);
        int32_t *pos = (int32_t *)(p->arena + p->tensors[f->positions].t.offset);
        int64_t rows = rt_tensor_numel(&p->tensors[f->tokens].t);
        for (int64_t i = 0; i < rows; i++) /* every row the same token: row 0 is read */
            tok[i] = id, pos[i] = (int32_t)at;
    }
    rt_context ctx = {
        .step = at + 1, .micro_batch = 0, .phase = PHASE_FORWARD, .comm = comm, .cuda = p->cuda, .loss_weight = 1.0f
    };
    if (fusion_forward(p->arena, &ctx) != 0)
        return fail("%s: step at position %lld: %s", m->device, (long long)at, ctx.msg);
    if (m->output >= 0)
        rt_tensor_row_f32(&p->tensors[m->output].t, p->arena, 0, out);
    return 0;
}

/* The prompt step (passes/prefill.c): its n <= P tokens ids[] at
 * positions at.., every row the same; a short chunk repeats its last
 * token at its position (the same key and value written again).  The
 * logits of the last into out, on the stage with them.  0, or 1 said. */
static int prefill(program *p, struct rt_comm *comm, const rt_inference_feeds *f, const int32_t *ids, int64_t n,
                   int64_t at, float *out)
{
    const rt_manifest *m = &p->manifest;
    int64_t P = m->prefill;
    if (f->prefill_tokens >= 0) {
        int32_t *tok = (int32_t *)(p->arena + p->tensors[f->prefill_tokens].t.offset);
        int32_t *pos = (int32_t *)(p->arena + p->tensors[f->prefill_positions].t.offset);
        int64_t rows = rt_tensor_numel(&p->tensors[f->prefill_tokens].t) / P;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < P; j++) {
                int64_t k = j < n ? j : n - 1;
                tok[r * P + j] = ids[k], pos[r * P + j] = (int32_t)(at + k);
            }
    }
    rt_context ctx = {
        .step = at + 1, .micro_batch = 0, .phase = PHASE_PREFILL, .comm = comm, .cuda = p->cuda, .loss_weight = 1.0f
    };
    if (fusion_prefill(p->arena, &ctx) != 0)
        return fail("%s: the prompt's step at position %lld: %s", m->device, (long long)at, ctx.msg);
    if (m->prefill_output >= 0)
        rt_tensor_row_f32(&p->tensors[m->prefill_output].t, p->arena, n - 1, out); /* row 0's token n - 1 */
    return 0;
}

/* The drawn token (or GENERATE_END), from the last stage to every other
 * after each step that draws one: tensor GENERATE_TOKEN_TAG, the step's
 * number.  0, or 1 said. */
#define GENERATE_TOKEN_TAG (-2001)
#define GENERATE_END       (-1)
static int pass_token(program *p, struct rt_comm *comm, int64_t at, int32_t *token)
{
    const rt_manifest *m = &p->manifest;
    int32_t S = m->n_stages, R = m->n_replicas, last = S - 1;
    fu_msg_info info = { .kind = MSG_ACTIVATION,
                         .step = at + 1,
                         .micro_batch = 0,
                         .tensor = GENERATE_TOKEN_TAG,
                         .codec = FU_CODEC_RAW_F32,
                         .length = sizeof *token };
    char why[400];
    if (m->stage == last) {
        for (int32_t s = 0; s < last; s++)
            if (fu_hub_send(comm->hub, p->placement[s * R + m->replica], &info, token, why, sizeof why) != 0)
                return fail("%s: sending the drawn token: %s", m->device, why);
        return 0;
    }
    if (fu_hub_recv(comm->hub, p->placement[last * R + m->replica], &info, token, sizeof *token, why, sizeof why) != 0)
        return fail("%s: receiving the drawn token: %s", m->device, why);
    return 0;
}

int rt_generate(program *p, const rt_generate_options *o, struct rt_comm *comm)
{
    const rt_manifest *m = &p->manifest;
    int first = m->stage == 0, last = m->stage == m->n_stages - 1;
    rt_inference_feeds in = rt_inference_feeds_find(p);
    if ((first && (in.tokens < 0 || in.positions < 0 || (m->prefill > 0 && in.prefill_tokens < 0))) ||
        (last && (m->output < 0 || (m->prefill > 0 && m->prefill_output < 0))) || (m->n_stages > 1 && !comm))
        return fail("%s: not an inference program this loop runs (its first stage feeds the tokens, its last has "
                    "the logits)",
                    m->device);
    /* The vocabulary: the logits' on the last stage; the others leave the ids to it and to the embedding. */
    const rt_tensor_info *out = last ? &p->tensors[m->output] : NULL;
    int64_t V = out ? out->t.dim[out->t.rank - 1] : INT32_MAX, ctx_rows = 0;
    for (int32_t i = 0; i < m->n_tensors; i++) /* the caches' rows: the longest sequence */
        if (p->tensors[i].role == ROLE_STATE && p->tensors[i].t.rank == 3)
            ctx_rows = p->tensors[i].t.dim[1];
    for (int32_t i = 0; i < m->n_tensors; i++) /* the caches start empty */
        if (p->tensors[i].role == ROLE_STATE)
            memset(p->arena + p->tensors[i].t.offset, 0,
                   (size_t)rt_tensor_numel(&p->tensors[i].t) * (size_t)half_dtype_bytes(p->tensors[i].dtype));
    if (read_init_weights(p, o->init, o->n_init, 0))
        return 1;
    char why[512];
    int32_t *prompt = malloc(((size_t)ctx_rows + 1) * sizeof *prompt), stop[RT_GENERATE_MAX_STOP];
    float *logits = last ? malloc((size_t)V * 2 * sizeof *logits) : NULL;
    int32_t *order = last ? malloc((size_t)V * sizeof *order) : NULL;
    int64_t n_prompt = prompt ? parse_ids(o->prompt_ids, "--prompt-ids", V, prompt, ctx_rows, why, sizeof why) : -1;
    int64_t n_stop =
        o->stop_ids ? parse_ids(o->stop_ids, "--stop-ids", V, stop, RT_GENERATE_MAX_STOP, why, sizeof why) : 0;
    int rc = 0;
    if (!prompt || (last && (!logits || !order)))
        rc = fail("out of memory for the generation's %lld logits", (long long)V);
    else if (n_prompt < 0 || n_stop < 0)
        rc = fail("%s", why);
    else if (n_prompt == 0)
        rc = fail("--prompt-ids: the prompt needs at least one token");
    rt_rng r = rt_rng_seeded((uint64_t)o->seed, 0x6E17, 0);
    double t0 = rt_seconds_now();
    int64_t made = 0, at = 0;
    int32_t next = GENERATE_END;
    const char *ended = "--max-tokens";
    /* The prompt: chunks of P in the prompt step where the program has
     * one (a lone token in the one-token step), else a token a step. */
    while (rc == 0 && o->max_tokens > 0 && at < n_prompt) {
        int64_t n = m->prefill < n_prompt - at ? m->prefill : n_prompt - at;
        rc = n > 1 ? prefill(p, comm, &in, prompt + at, n, at, logits) : step(p, comm, &in, prompt[at], at, logits);
        at += n > 1 ? n : 1;
    }
    double t_prompt = rt_seconds_now();
    /* Then a step a drawn token.  The last stage draws from the logits of
     * the token before `at` and decides the end; the other stages learn
     * both from its message. */
    for (; rc == 0 && o->max_tokens > 0; at++) {
        if (last) {
            next = rt_generate_pick(logits, V, o, &r, logits + V, order);
            printf("%d\n", (int)next);
            fflush(stdout);
            made++;
            int stopped = 0;
            for (int64_t k = 0; k < n_stop; k++)
                stopped |= stop[k] == next;
            ended = stopped ? "a stop id" : made == o->max_tokens ? "--max-tokens" : "the context's end";
            int32_t say = stopped || made == o->max_tokens || at >= ctx_rows ? GENERATE_END : next;
            if (m->n_stages > 1)
                rc = pass_token(p, comm, at - 1, &say);
            if (rc || say == GENERATE_END)
                break;
        } else {
            rc = pass_token(p, comm, at - 1, &next);
            if (rc || next == GENERATE_END)
                break;
            made++;
        }
        rc = step(p, comm, &in, next, at, logits);
    }
    double t1 = rt_seconds_now();
    if (rc == 0 && last)
        fprintf(stderr,
                "fusion: prompt %lld tokens in %.3f s (%.1f tok/s); generated %lld tokens in %.3f s (%.1f tok/s); "
                "ended by %s\n",
                (long long)n_prompt, t_prompt - t0, (double)n_prompt / fmax(t_prompt - t0, 1e-9), (long long)made,
                t1 - t_prompt, (double)made / fmax(t1 - t_prompt, 1e-9), ended);
    if (rc == 0 && comm && fu_hub_flush(comm->hub, why, sizeof why) != 0)
        rc = fail("%s: %s", m->device, why);
    free(prompt);
    free(logits);
    free(order);
    return rc;
}
