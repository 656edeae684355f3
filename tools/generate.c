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

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "../ir/folders.h" /* FU_PATH_BYTES */
#include "../tokenizer/tokenizer.h"

#define GEN_MAX_INIT    8
#define GEN_MAX_STOP    8
#define GEN_MAX_FORWARD 256

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

/* ---- the cache ------------------------------------------------------------------ */

/* The cache's root folder into buf. */
static void cache_root(char *buf, size_t n)
{
    const char *dir = getenv("FUSION_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    if (dir && *dir)
        snprintf(buf, n, "%s", dir);
    else if (xdg && *xdg)
        snprintf(buf, n, "%s/fusion", xdg);
    else
        snprintf(buf, n, "%s/.cache/fusion", home && *home ? home : "/tmp");
}

static int make_dirs(const char *path)
{
    char tmp[FU_PATH_BYTES];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void hash_file(XXH3_state_t *s, const char *path)
{
    FILE *f = fopen(path, "rb");
    char buf[65536];
    size_t got;
    while (f && (got = fread(buf, 1, sizeof buf, f)) > 0)
        XXH3_64bits_update(s, buf, got);
    if (f)
        fclose(f);
}

/* The compile's key: its arguments, the files they name, this fusionc. */
static uint64_t compile_key(const gen_options *o)
{
    XXH3_state_t *s = XXH3_createState();
    if (!s || XXH3_64bits_reset(s) != XXH_OK) {
        XXH3_freeState(s);
        return 0;
    }
    struct stat st;
    for (int i = 0; i < o->n_forward; i++) {
        XXH3_64bits_update(s, o->forward[i], strlen(o->forward[i]) + 1);
        if (stat(o->forward[i], &st) == 0 && S_ISREG(st.st_mode))
            hash_file(s, o->forward[i]);
    }
    if (stat("/proc/self/exe", &st) == 0) {
        int64_t id[2] = { (int64_t)st.st_size, (int64_t)st.st_mtime };
        XXH3_64bits_update(s, id, sizeof id);
    }
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}

/* Run argv[0] with argv, its output into log; its exit status (-1: not run). */
static int run_logged(char *const *argv, const char *log)
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void print_file(FILE *to, const char *path)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    while (f && fgets(line, sizeof line, f))
        fputs(line, to);
    if (f)
        fclose(f);
}

/* The compiled inference program for o into dir (made, or found made). 0, or 1 said. */
static int compile_cached(const gen_options *o, char *dir, size_t n)
{
    char root[FU_PATH_BYTES - 64], tmp[FU_PATH_BYTES + 32], log[FU_PATH_BYTES + 48];
    cache_root(root, sizeof root);
    snprintf(dir, n, "%s/generate/%016llx", root, (unsigned long long)compile_key(o));
    struct stat st;
    if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    snprintf(tmp, sizeof tmp, "%s.%d", dir, (int)getpid());
    snprintf(log, sizeof log, "%s.log", tmp);
    char parent[FU_PATH_BYTES];
    snprintf(parent, sizeof parent, "%s/generate", root);
    if (make_dirs(parent) != 0) {
        fprintf(stderr, "fusionc generate: cannot make the cache folder %s: %s\n", parent, strerror(errno));
        return 1;
    }
    char *argv[GEN_MAX_FORWARD + 16];
    int k = 0;
    argv[k++] = "/proc/self/exe";
    argv[k++] = "compile";
    for (int i = 0; i < o->n_forward; i++)
        argv[k++] = (char *)o->forward[i];
    const char *extra[] = { "--inference", "--set", "batch=1", "--set", "seq=1", "-o", tmp };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        argv[k++] = (char *)extra[i];
    argv[k] = NULL;
    int rc = run_logged(argv, log);
    if (rc != 0) {
        fprintf(stderr, "fusionc generate: compiling the inference program failed:\n");
        print_file(stderr, log);
        unlink(log);
        return rc == 2 ? 2 : 1;
    }
    unlink(log);
    if (rename(tmp, dir) != 0 && !(errno == ENOTEMPTY || errno == EEXIST)) { /* another run's may be there first */
        fprintf(stderr, "fusionc generate: cannot move %s to %s: %s\n", tmp, dir, strerror(errno));
        return 1;
    }
    return 0;
}

/* The one device program in dir into prog; 0, or 1 said. */
static int find_program(const char *dir, char *prog, size_t n)
{
    DIR *d = opendir(dir);
    int found = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char path[FU_PATH_BYTES + 600];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/fusion-%s", dir, e->d_name, e->d_name);
        if (e->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (found++ == 0)
                snprintf(prog, n, "%s", path);
        }
    }
    if (d)
        closedir(d);
    if (found == 1)
        return 0;
    fprintf(stderr,
            "fusionc generate: %s: %d device programs; generating over several devices is not built yet "
            "(give a cluster of one device, or --stages 1 --replicas 1)\n",
            dir, found);
    return 1;
}

/* ---- streaming ------------------------------------------------------------------- */

/* How many bytes at the end of s[0, n) begin a UTF-8 character not yet whole. */
static size_t utf8_unfinished(const char *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? back : 0;
    }
    return 0;
}

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
    size_t end = (size_t)s->text.n, hold = 0;
    for (int k = 0; k < s->o->n_stop; k++) {
        const char *at = memmem(s->text.v, end, s->o->stop[k], strlen(s->o->stop[k]));
        if (at && (size_t)(at - s->text.v) < end) {
            end = (size_t)(at - s->text.v);
            s->stopped = 1;
        }
    }
    if (!s->stopped && !final) {
        hold = utf8_unfinished(s->text.v, end);
        for (int k = 0; k < s->o->n_stop; k++) /* a stop text's beginning at the end: wait */
            for (size_t m = strlen(s->o->stop[k]) - 1; m > hold && m > 0; m--)
                if (m <= end && memcmp(s->text.v + end - m, s->o->stop[k], m) == 0) {
                    hold = m;
                    break;
                }
    }
    if (end - hold > s->printed) {
        fwrite(s->text.v + s->printed, 1, end - hold - s->printed, stdout);
        fflush(stdout);
        s->printed = end - hold;
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
        if (took == 0) {
            if (o.n_forward == GEN_MAX_FORWARD)
                return usage_fail("%s", "too many arguments");
            o.forward[o.n_forward++] = argv[i];
        }
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
    char dir[FU_PATH_BYTES], prog[FU_PATH_BYTES + 700];
    if ((rc = compile_cached(&o, dir, sizeof dir)) != 0 || (rc = find_program(dir, prog, sizeof prog)) != 0)
        goto done;
    /* The device program, its ids on a pipe, its errors in a file. */
    char num[6][32], errlog[FU_PATH_BYTES + 32];
    snprintf(errlog, sizeof errlog, "%s.err.%d", dir, (int)getpid());
    snprintf(num[0], sizeof num[0], "%lld", (long long)o.max_tokens);
    snprintf(num[1], sizeof num[1], "%.17g", o.temperature);
    snprintf(num[2], sizeof num[2], "%d", o.top_k);
    snprintf(num[3], sizeof num[3], "%.17g", o.top_p);
    snprintf(num[4], sizeof num[4], "%lld", (long long)o.seed);
    snprintf(num[5], sizeof num[5], "%d", o.threads);
    char *args[2 * GEN_MAX_INIT + 20];
    int k = 0;
    args[k++] = prog;
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
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(errlog, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(out[1], 1);
        if (fd >= 0)
            dup2(fd, 2);
        close(out[0]);
        execv(prog, args);
        _exit(127);
    }
    close(out[1]);
    FILE *from = pid > 0 ? fdopen(out[0], "r") : NULL;
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
    if (pid > 0 && (s.stopped || rc))
        kill(pid, SIGTERM);
    if (rc == 0 && stream_advance(&s, 1, why, sizeof why) != 0)
        rc = 1, fprintf(stderr, "fusionc generate: %s\n", why);
    if (from)
        fclose(from);
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    int ok = pid > 0 && ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || s.stopped);
    putchar('\n');
    if (ok && rc == 0 && o.print_ids) {
        for (int64_t i = 0; i < s.ids.n; i++)
            printf("%s%d", i ? "," : "", (int)s.ids.v[i]);
        putchar('\n');
    }
    fflush(stdout);
    /* The device program's word: its speed, or its error. */
    FILE *err = fopen(errlog, "r");
    char msg[1024];
    double took = 0.0, prompt_took = 0.0;
    long long n_tok = 0, n_prompt = 0;
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
    unlink(errlog);
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
