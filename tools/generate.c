/* generate.c: `fusionc generate MODEL CLUSTER --init WEIGHTS (--prompt TEXT
 * | --prompt-ids IDS) [options]`.
 *
 *   1. compile: everything on the command line that is not one of
 *      generate's own options goes to `fusionc compile` as it is (MODEL,
 *      CLUSTER, --set, --hf-config, --precision, --stages, ...), with
 *      --inference --set batch=1 --set seq=1, into a cache folder named by
 *      a hash of those arguments, of the files they name, and of this
 *      fusionc (size and time of its executable): the second run with the
 *      same model and cluster starts at once.  The folder appears whole
 *      (compiled beside it, renamed into place).
 *   2. run: the device program (one device today: a plan of several is
 *      refused, saying so) with the weights, the prompt's ids and the
 *      drawing options; it prints an id a line as each comes.
 *   3. stream: the ids decoded (--tokenizer: a Hugging Face tokenizer.json;
 *      without one, an id is a byte) and printed as they come, holding back
 *      an unfinished UTF-8 character and what may yet become a --stop
 *      text; at a stop text the program is stopped and the text ends
 *      before it.  --print-ids: the last line of standard output is the
 *      generated ids, comma-separated.  On standard error at the end:
 *      `prompt P tokens in S s (X tok/s)`, then
 *      `generated N tokens in S s (X tok/s)`.
 *
 * The cache: $FUSION_CACHE_DIR, else $XDG_CACHE_HOME/fusion, else
 * ~/.cache/fusion; under it generate/<16 hex digits>/.
 */
#define _GNU_SOURCE
#include "generate.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../ir/folders.h" /* FU_PATH_BYTES */
#include "../tokenizer/tokenizer.h"
#include "inference_bundle.h"

#define GEN_MAX_INIT    8
#define GEN_MAX_STOP    8
#define GEN_MAX_FORWARD INFERENCE_MAX_FORWARD
#define GEN_MAX_DEVICES 64

typedef struct {
    const char *init[GEN_MAX_INIT];
    int n_init;
    const char *prompt, *prompt_ids, *tokenizer;
    const char *stop[GEN_MAX_STOP];
    int n_stop;
    int64_t max_tokens, seed;
    double temperature, top_p;
    int top_k, threads, print_ids;
    const char *forward[GEN_MAX_FORWARD]; /* for `fusionc compile` */
    int n_forward;
} gen_options;

static int parse_repeat(const cli_option *opt, const char *value, const char **list, int *n, int cap, char *why,
                        size_t size)
{
    if (*n == cap) {
        snprintf(why, size, "too many %s options (the limit is %d)", opt->name, cap);
        return -1;
    }
    list[(*n)++] = value;
    return 0;
}
static int parse_init(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    gen_options *o = field;
    return parse_repeat(opt, value, o->init, &o->n_init, GEN_MAX_INIT, why, n);
}
static int parse_stop(const cli_option *opt, const char *value, void *field, char *why, size_t n)
{
    gen_options *o = field;
    return value[0] ? parse_repeat(opt, value, o->stop, &o->n_stop, GEN_MAX_STOP, why, n)
                    : cli_bad_value(opt, value, why, n);
}

/* clang-format off */
static const cli_option gen_table[] = {
    { .name = "--init", .metavar = "WEIGHTS", CLI_WHOLE(parse_init),
      .help = "the weights: a safetensors file, a Hugging Face folder or a fusion checkpoint\n"
              "(repeatable; every parameter must be found)" },
    { .name = "--prompt", .metavar = "TEXT", CLI_STRING(gen_options, prompt),
      .help = "the prompt, encoded with --tokenizer (without one: its bytes are the ids)" },
    { .name = "--prompt-ids", .metavar = "IDS", CLI_NONEMPTY(gen_options, prompt_ids),
      .help = "the prompt as token ids, comma-separated" },
    { .name = "--tokenizer", .metavar = "PATH", CLI_NONEMPTY(gen_options, tokenizer),
      .help = "a Hugging Face tokenizer.json (or its folder) to encode and decode with" },
    { .name = "--max-tokens", .metavar = "N", CLI_INT64(gen_options, max_tokens), .lo = 0, .hi = 1e9,
      .expects = "a count in [0, 1e9]", .help = "tokens to generate at most (default 64)" },
    { .name = "--temperature", .metavar = "T", CLI_DOUBLE(gen_options, temperature), .lo = 0, .hi = 100,
      .expects = "a number in [0, 100]", .help = "softmax temperature (default 1; 0: greedy)" },
    { .name = "--top-k", .metavar = "K", CLI_INT(gen_options, top_k), .lo = 0, .hi = 1e9,
      .expects = "a count in [0, 1e9]", .help = "draw among the K likeliest tokens (default 0: all)" },
    { .name = "--top-p", .metavar = "P", CLI_DOUBLE(gen_options, top_p), .lo = 0, .hi = 1, .open = CLI_OPEN_LO,
      .expects = "a number in (0, 1]", .help = "draw among the likeliest tokens whose probabilities sum to P\n"
                                               "(default 1)" },
    { .name = "--seed", .metavar = "S", CLI_INT64(gen_options, seed), .lo = 0, .hi = 9.2e18,
      .expects = "a non-negative integer", .help = "the draws' seed (default 1)" },
    { .name = "--stop", .metavar = "TEXT", CLI_WHOLE(parse_stop),
      .help = "end before the first place the text holds TEXT (repeatable)" },
    { .name = "--print-ids", CLI_FLAG(gen_options, print_ids),
      .help = "end standard output with a line of the generated ids, comma-separated" },
    { .name = "--threads", .metavar = "N", CLI_INT(gen_options, threads), .lo = 1, .hi = 1024,
      .expects = "a count in [1, 1024]", .help = "CPU threads (default: the cluster file's)" },
};
/* clang-format on */

const cli_usage generate_usage = {
    "usage: fusionc generate MODEL CLUSTER --init WEIGHTS (--prompt TEXT | --prompt-ids IDS) [--max-tokens N]\n"
    "       [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop TEXT]... [--tokenizer PATH]\n"
    "       [--print-ids] [--threads N] [compile's options: --set, --hf-config, --precision, ...]\n"
    "\n"
    "Compiles MODEL for CLUSTER as an inference program (cached: the same arguments compile\n"
    "once), runs it with WEIGHTS and streams the text it generates; ends with\n"
    "`generated N tokens in S s (X tok/s)` on standard error.\n",
    gen_table,
    NULL,
    sizeof gen_table / sizeof gen_table[0],
    20,
    "Every other option goes to `fusionc compile` as it is (see `fusionc compile --help`).\n",
};

static int usage_fail(const char *fmt, const char *arg)
{
    return cli_usage_fail(&generate_usage, "fusionc generate", fmt, arg);
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- streaming ------------------------------------------------------------------- */

typedef struct {
    const gen_options *o;
    tk_tokenizer *tk;
    tk_ids ids;     /* the generated ids          */
    tk_bytes text;  /* their text                  */
    size_t printed; /* bytes of text printed       */
    int stopped;    /* a --stop text was met       */
} stream;

/* The text of the ids so far; print what can no longer change. */
static int stream_advance(stream *s, int final, char *why, size_t n)
{
    s->text.n = 0;
    if (s->tk) {
        if (tk_decode(s->tk, s->ids.v, s->ids.n, &s->text, why, n) != 0)
            return -1;
    } else {
        for (int64_t i = 0; i < s->ids.n; i++) {
            char b = (char)s->ids.v[i];
            if (s->ids.v[i] > 255)
                return snprintf(why, n, "token id %d without a tokenizer (ids are bytes: give --tokenizer)",
                                (int)s->ids.v[i]),
                       -1;
            if (tk_bytes_append(&s->text, &b, 1) != 0)
                return snprintf(why, n, "out of memory"), -1;
        }
    }
    size_t end = inference_text_end(s->text.v, (size_t)s->text.n, s->o->stop, s->o->n_stop, final, &s->stopped);
    if (end > s->printed) {
        fwrite(s->text.v + s->printed, 1, end - s->printed, stdout);
        fflush(stdout);
        s->printed = end;
    }
    return 0;
}

/* ---- the command ---------------------------------------------------------------- */

int generate_main(int argc, char **argv)
{
    gen_options o = { .max_tokens = 64, .temperature = 1.0, .top_p = 1.0, .seed = 1 };
    char why[1024];
    for (int i = 0; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &generate_usage);
            return 0;
        }
        int took = cli_take(&generate_usage, argc, argv, &i, &o, why, sizeof why);
        if (took < 0)
            return usage_fail("%s", why);
        if (took == 0 && inference_forward_arg(argc, argv, &i, o.forward, &o.n_forward, why, sizeof why) != 0)
            return usage_fail("%s", why);
    }
    if (o.n_init == 0)
        return usage_fail("%s", "expected --init WEIGHTS");
    if (!o.prompt == !o.prompt_ids)
        return usage_fail("%s", "expected one of --prompt TEXT and --prompt-ids IDS");
    stream s = { .o = &o };
    if (o.tokenizer && !(s.tk = tk_load(o.tokenizer, why, sizeof why))) {
        fprintf(stderr, "fusionc generate: %s\n", why);
        return 1;
    }
    /* The prompt's ids, as text for the device program. */
    tk_ids prompt = { 0 };
    int rc = 0;
    if (o.prompt && s.tk) {
        tk_encoder *e = tk_encoder_new(s.tk);
        rc = !e || tk_encode(e, o.prompt, strlen(o.prompt), &prompt, why, sizeof why) != 0;
        tk_encoder_free(e);
    } else if (o.prompt) {
        for (const char *p = o.prompt; *p && rc == 0; p++)
            rc = tk_ids_push(&prompt, (unsigned char)*p) != 0;
    }
    if (rc == 0 && o.prompt && prompt.n == 0)
        rc = 1, snprintf(why, sizeof why, "--prompt: the prompt has no tokens");
    size_t ids_cap = (size_t)prompt.n * 12 + 1;
    char *ids_text = o.prompt ? malloc(ids_cap) : NULL;
    for (int64_t i = 0, at = 0; ids_text && i < prompt.n; i++)
        at += snprintf(ids_text + at, ids_cap - (size_t)at, "%s%d", i ? "," : "", (int)prompt.v[i]);
    if (rc) {
        fprintf(stderr, "fusionc generate: %s\n", why);
        goto done;
    }
    char dir[FU_PATH_BYTES];
    inference_program progs[GEN_MAX_DEVICES];
    int n_progs = 0, last = 0;
    if ((rc = inference_compile_cached(o.forward, o.n_forward, 1, "fusionc generate", dir, sizeof dir)) != 0 ||
        (rc = inference_find_programs(dir, "fusionc generate", progs, GEN_MAX_DEVICES, &n_progs)) != 0)
        goto done;
    for (int d = 0; d < n_progs; d++) /* the stage that draws, and says the ids */
        if (progs[d].stage == progs[d].stages - 1)
            last = d;
    /* Every device program (the stages of a pipeline talk over their
     * links, sealed with the compile's key): the last stage's ids on a
     * pipe, every one's errors in a file of its own. */
    char num[6][32], errlog[GEN_MAX_DEVICES][FU_PATH_BYTES + 48];
    snprintf(num[0], sizeof num[0], "%lld", (long long)o.max_tokens);
    snprintf(num[1], sizeof num[1], "%.17g", o.temperature);
    snprintf(num[2], sizeof num[2], "%d", o.top_k);
    snprintf(num[3], sizeof num[3], "%.17g", o.top_p);
    snprintf(num[4], sizeof num[4], "%lld", (long long)o.seed);
    snprintf(num[5], sizeof num[5], "%d", o.threads);
    char *args[2 * GEN_MAX_INIT + 20];
    int k = 1;
    for (int i = 0; i < o.n_init; i++)
        args[k++] = "--init", args[k++] = (char *)o.init[i];
    args[k++] = "--prompt-ids", args[k++] = o.prompt ? ids_text : (char *)o.prompt_ids;
    args[k++] = "--max-tokens", args[k++] = num[0];
    args[k++] = "--temperature", args[k++] = num[1];
    args[k++] = "--top-k", args[k++] = num[2];
    args[k++] = "--top-p", args[k++] = num[3];
    args[k++] = "--seed", args[k++] = num[4];
    if (o.threads > 0)
        args[k++] = "--threads", args[k++] = num[5];
    args[k] = NULL;
    int out[2];
    if (pipe(out) != 0) {
        rc = 1;
        fprintf(stderr, "fusionc generate: pipe: %s\n", strerror(errno));
        goto done;
    }
    pid_t pids[GEN_MAX_DEVICES];
    for (int d = 0; d < n_progs; d++) {
        snprintf(errlog[d], sizeof errlog[d], "%s.err.%d.%d", dir, (int)getpid(), d);
        args[0] = progs[d].path;
        pids[d] = fork();
        if (pids[d] == 0) {
            int fd = open(errlog[d], O_WRONLY | O_CREAT | O_TRUNC, 0644), null = open("/dev/null", O_WRONLY);
            dup2(d == last ? out[1] : null, 1);
            if (fd >= 0)
                dup2(fd, 2);
            close(out[0]);
            execv(progs[d].path, args);
            _exit(127);
        }
    }
    close(out[1]);
    FILE *from = pids[last] > 0 ? fdopen(out[0], "r") : NULL;
    char line[64];
    double t_first = 0.0, t_last = 0.0; /* our own clock, for a run stopped before it reports */
    while (from && !s.stopped && fgets(line, sizeof line, from)) {
        t_last = seconds_now();
        if (s.ids.n == 0)
            t_first = t_last;
        if (tk_ids_push(&s.ids, atoi(line)) != 0 || stream_advance(&s, 0, why, sizeof why) != 0) {
            fprintf(stderr, "\nfusionc generate: %s\n", why);
            rc = 1;
            break;
        }
    }
    for (int d = 0; d < n_progs && (s.stopped || rc); d++)
        if (pids[d] > 0)
            kill(pids[d], SIGTERM);
    if (rc == 0 && stream_advance(&s, 1, why, sizeof why) != 0)
        rc = 1, fprintf(stderr, "fusionc generate: %s\n", why);
    if (from)
        fclose(from);
    int ok = 1;
    for (int d = 0; d < n_progs; d++) {
        int status = 0;
        while (pids[d] > 0 && waitpid(pids[d], &status, 0) < 0 && errno == EINTR)
            ;
        ok &= pids[d] > 0 && ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || s.stopped);
    }
    putchar('\n');
    if (ok && rc == 0 && o.print_ids) {
        for (int64_t i = 0; i < s.ids.n; i++)
            printf("%s%d", i ? "," : "", (int)s.ids.v[i]);
        putchar('\n');
    }
    fflush(stdout);
    /* The device programs' word: the last stage's speed, or their errors. */
    char msg[1024];
    double took = 0.0, prompt_took = 0.0;
    long long n_tok = 0, n_prompt = 0;
    for (int d = 0; d < n_progs; d++) {
        FILE *err = fopen(errlog[d], "r");
        while (err && fgets(msg, sizeof msg, err)) {
            const char *g = strstr(msg, "generated "), *pr = strstr(msg, "prompt ");
            if (ok && g && pr && sscanf(g, "generated %lld tokens in %lf s", &n_tok, &took) == 2 &&
                sscanf(pr, "prompt %lld tokens in %lf s", &n_prompt, &prompt_took) == 2)
                continue;
            if (!ok)
                fputs(msg, stderr);
        }
        if (err)
            fclose(err);
        unlink(errlog[d]);
    }
    if (!ok && rc == 0)
        rc = 1;
    if (n_tok == 0 && s.ids.n > 1) /* stopped early: the steps after the first token, as we saw them */
        n_tok = s.ids.n - 1, took = t_last - t_first;
    if (rc == 0 && n_prompt > 0)
        fprintf(stderr, "prompt %lld tokens in %.3f s (%.1f tok/s)\n", n_prompt, prompt_took,
                prompt_took > 0 ? (double)n_prompt / prompt_took : 0.0);
    if (rc == 0)
        fprintf(stderr, "generated %lld tokens in %.3f s (%.1f tok/s)\n", (long long)s.ids.n, took,
                took > 0 ? (double)n_tok / took : 0.0);
done:
    free(ids_text);
    free(prompt.v);
    free(s.ids.v);
    free(s.text.v);
    tk_free(s.tk);
    return rc;
}
