/* tokenize.c: `fusionc tokenize`: text files to one llm.c token shard with
 * a Hugging Face tokenizer (tokenizer/), and a shard back to text.
 *
 * The shard (runtime/data.h reads it): 256 little-endian int32, [0] =
 * 20240520, [1] = 1 for uint16 ids or 2 for uint32 ids (a vocabulary over
 * 65,536), [2] = the id count, the rest 0; the ids from byte 1024.  It is
 * written whole or not at all (runtime/atomic_file.h).
 *
 * Threads: with at least two files a thread, a file a thread (below:
 * encode_files_apart).  Otherwise each file's text is prepared and cut into
 * pieces by the main thread (the added tokens, the normalizer and the
 * pre-tokenizer's regexes, in order); the pieces, a batch at a time, are
 * merged by every thread, each a contiguous share with an encoder of its
 * own, and their ids written in order. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/atomic_file.h"
#include "../tokenizer/tokenizer.h"
#include "tokenize.h"

#define SHARD_MAGIC        20240520
#define SHARD_HEADER_BYTES 1024
#define PIECES_A_THREAD    32768 /* a batch: this many pieces for each thread */

typedef struct {
    const char *output;
    int eos, decode, threads, jsonl;
} tokenize_options;

/* clang-format off */
static const cli_option tokenize_options_table[] = {
    { .name = "-o", .metavar = "FILE", CLI_NONEMPTY(tokenize_options, output), .expects = "a file name",
      .help = "the shard to write (with --decode: the text); written whole or not at all" },
    { .name = "--eos", CLI_FLAG(tokenize_options, eos),
      .help = "the tokenizer's end of text after each file's ids (<|endoftext|>,\n"
              "<|end_of_text|> or </s>, the first it has)" },
    { .name = "--decode", CLI_FLAG(tokenize_options, decode), .help = "a shard back to text: TOKENIZER.json SHARD -o OUT.txt" },
    { .name = "--jsonl", CLI_FLAG(tokenize_options, jsonl),
      .help = "each FILE a JSON line an example, {\"prompt\": ..., \"completion\": ...}:\n"
              "the shard gets a loss mask, the loss trains on the completions alone" },
    { .name = "--threads", .metavar = "N", CLI_INT(tokenize_options, threads), .lo = 1, .hi = 1024,
      .expects = "a thread count in [1, 1024]", .help = "threads that merge (default: every core)" },
};

const cli_usage tokenize_usage = {
    "usage: fusionc tokenize TOKENIZER.json FILE... -o OUT.bin [--eos] [--threads N]\n"
    "       fusionc tokenize --jsonl TOKENIZER.json FILE.jsonl... -o OUT.bin [--eos]\n"
    "       fusionc tokenize --decode TOKENIZER.json SHARD -o OUT.txt\n"
    "\n"
    "Encodes each FILE (UTF-8 text) with a Hugging Face tokenizer.json (BPE: byte-level\n"
    "as GPT-2, Llama 3 and Qwen; byte fallback as Llama 2 and Mistral) and writes the\n"
    "ids of all of them, in order, into one llm.c token shard for --data: 256 int32\n"
    "(20240520; 1 for uint16 ids, 2 for uint32 when the vocabulary is over 65,536; the\n"
    "count), the ids from byte 1024.  Each file is encoded on its own and no special\n"
    "token is added (--eos: the end of text after each).  Text that holds an added\n"
    "token (\"<|endoftext|>\") encodes to it, as Hugging Face's tokenizers do.  A\n"
    "progress line on standard error.  --jsonl: supervised examples, the prompt's\n"
    "tokens masked out of the loss (header[3] = 1, a mask byte an id after the ids).\n",
    tokenize_options_table, NULL, sizeof tokenize_options_table / sizeof tokenize_options_table[0], 12, NULL
};
/* clang-format on */

static int usage_fail(const char *fmt, const char *arg)
{
    return cli_usage_fail(&tokenize_usage, "fusionc tokenize", fmt, arg);
}

static char *read_whole(const char *path, size_t *size, char *err, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, n, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1)) &&
        fread(buf, 1, (size_t)len, f) == (size_t)len) {
        *size = (size_t)len;
    } else {
        snprintf(err, n, "%s: cannot read: %s", path, len < 0 ? strerror(errno) : "short read");
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the merging threads ------------------------------------------------- */

typedef struct {
    tk_encoder *enc;
    const char *text;
    const tk_piece *pieces;
    int64_t n;
    tk_ids ids;
    char err[256];
    int rc;
} merge_share;

static void *merge_share_run(void *arg)
{
    merge_share *s = arg;
    s->ids.n = 0;
    s->rc = tk_merge_pieces(s->enc, s->text, s->pieces, s->n, &s->ids, s->err, sizeof s->err);
    return NULL;
}

typedef struct {
    const tk_tokenizer *tk;
    int threads, wide; /* wide: uint32 ids */
    merge_share *share;
    FILE *out;
    int64_t count;
    /* progress */
    int tty;
    double start, last_print;
    int64_t bytes_done, bytes_total;
    int files_done, files_total;
} encoder_run;

static int write_ids(encoder_run *r, const int32_t *ids, int64_t n)
{
    unsigned char le[4 * 4096];
    int width = r->wide ? 4 : 2;
    for (int64_t i = 0; i < n;) {
        int64_t k = 0;
        for (; k < 4096 && i < n; k++, i++) {
            uint32_t v = (uint32_t)ids[i];
            for (int b = 0; b < width; b++)
                le[width * k + b] = (unsigned char)(v >> (8 * b));
        }
        if (fwrite(le, (size_t)width, (size_t)k, r->out) != (size_t)k)
            return -1;
    }
    r->count += n;
    return 0;
}

static void progress(encoder_run *r, int final)
{
    double t = now_s();
    if (!final && (!r->tty || t - r->last_print < 0.5))
        return;
    r->last_print = t;
    double mb = (double)r->bytes_done / 1e6, rate = mb / (t - r->start > 1e-9 ? t - r->start : 1e-9);
    fprintf(stderr, "%stokenize: %d/%d files, %.1f of %.1f MB, %lld ids, %.1f MB/s on %d thread%s%s",
            r->tty ? "\r" : "", r->files_done, r->files_total, mb, (double)r->bytes_total / 1e6, (long long)r->count,
            rate, r->threads, r->threads == 1 ? "" : "s", final ? "\n" : "");
    fflush(stderr);
}

/* Merges pieces[0 .. n) over the threads and writes the ids in order. */
static int merge_batch(encoder_run *r, const char *text, const tk_piece *pieces, int64_t n, const char *path, char *err,
                       size_t err_size)
{
    int used = 0;
    pthread_t tid[1024];
    for (int t = 0; t < r->threads; t++) {
        merge_share *s = &r->share[t];
        int64_t from = n * t / r->threads, to = n * (t + 1) / r->threads;
        s->text = text, s->pieces = pieces ? pieces + from : NULL, s->n = to - from, s->rc = 0;
        if (t > 0 && s->n > 0 && pthread_create(&tid[t], NULL, merge_share_run, s) == 0)
            used = t + 1;
        else if (t > 0 && s->n > 0)
            merge_share_run(s); /* no thread to be had: this one does it */
    }
    merge_share_run(&r->share[0]);
    for (int t = 1; t < used; t++)
        if (r->share[t].n > 0)
            pthread_join(tid[t], NULL);
    for (int t = 0; t < r->threads; t++) {
        merge_share *s = &r->share[t];
        if (s->n > 0 && s->rc) {
            snprintf(err, err_size, "%s: %s", path, s->err);
            return -1;
        }
        if (s->n > 0 && write_ids(r, s->ids.v, s->ids.n)) {
            snprintf(err, err_size, "writing the shard: %s", strerror(errno));
            return -1;
        }
    }
    return 0;
}

static int encode_file(encoder_run *r, const char *path, int32_t eos, tk_piece **pieces, int64_t *cap, char *err,
                       size_t err_size)
{
    size_t size = 0;
    char *text = read_whole(path, &size, err, err_size);
    if (!text)
        return -1;
    tk_encoder *main_enc = r->share[0].enc;
    tk_prepared prep;
    char why[256];
    int rc = 0, done = 0;
    if (tk_prepare(main_enc, text, size, &prep, why, sizeof why)) {
        snprintf(err, err_size, "%s: %s", path, why);
        rc = -1;
    }
    while (rc == 0 && !done) {
        int64_t n = 0;
        rc = tk_next_pieces(main_enc, pieces, &n, cap, (int64_t)PIECES_A_THREAD * r->threads, &done, why, sizeof why);
        if (rc)
            snprintf(err, err_size, "%s: %s", path, why);
        else
            rc = merge_batch(r, prep.text, *pieces, n, path, err, err_size);
        progress(r, 0);
    }
    if (rc == 0 && eos >= 0 && write_ids(r, &eos, 1)) {
        snprintf(err, err_size, "writing the shard: %s", strerror(errno));
        rc = -1;
    }
    r->bytes_done += (int64_t)size;
    r->files_done++;
    free(text);
    return rc;
}

/* ---- many files: a file a thread --------------------------------------------
 *
 * With at least two files a thread, each thread takes the next file and
 * encodes it whole with its own encoder; the main thread writes the files'
 * ids in argument order as they are done.  A thread runs at most
 * FILES_AHEAD files ahead of the writer, so memory stays bounded. */

#define FILES_AHEAD 4

typedef struct {
    encoder_run *r;
    char **files;
    int n_files, next, written, failed;
    tk_ids *ids;  /* [n_files] */
    int8_t *done; /* [n_files] 1 encoded, -1 failed */
    int64_t *bytes;
    char err[1024];
    pthread_mutex_t mu;
    pthread_cond_t cv;
} file_pool;

typedef struct {
    file_pool *pool;
    tk_encoder *enc;
} file_worker;

static void *file_worker_run(void *arg)
{
    file_worker *w = arg;
    file_pool *p = w->pool;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->failed && p->next < p->n_files && p->next - p->written >= FILES_AHEAD * p->r->threads)
            pthread_cond_wait(&p->cv, &p->mu);
        int i = p->failed ? p->n_files : p->next++;
        pthread_mutex_unlock(&p->mu);
        if (i >= p->n_files)
            return NULL;
        char why[512] = "", err[1024] = "";
        size_t size = 0;
        char *text = read_whole(p->files[i], &size, err, sizeof err);
        int rc = text ? tk_encode(w->enc, text, size, &p->ids[i], why, sizeof why) : -1;
        if (text && rc)
            snprintf(err, sizeof err, "%s: %s", p->files[i], why);
        free(text);
        pthread_mutex_lock(&p->mu);
        p->done[i] = rc ? -1 : 1;
        p->bytes[i] = (int64_t)size;
        if (rc && !p->failed) {
            p->failed = 1;
            snprintf(p->err, sizeof p->err, "%s", err);
        }
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

static int encode_files_apart(encoder_run *r, char **files, int n_files, int32_t eos, char *err, size_t err_size)
{
    file_pool p = { .r = r, .files = files, .n_files = n_files };
    p.ids = calloc((size_t)n_files, sizeof *p.ids);
    p.done = calloc((size_t)n_files, 1);
    p.bytes = calloc((size_t)n_files, sizeof *p.bytes);
    file_worker *w = calloc((size_t)r->threads, sizeof *w);
    pthread_t *tid = calloc((size_t)r->threads, sizeof *tid);
    if (!p.ids || !p.done || !p.bytes || !w || !tid) {
        free(p.ids), free(p.done), free(p.bytes), free(w), free(tid);
        return snprintf(err, err_size, "out of memory"), -1;
    }
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    int started = 0, rc = 0;
    for (int t = 0; t < r->threads; t++) {
        w[t] = (file_worker){ &p, r->share[t].enc };
        if (pthread_create(&tid[t], NULL, file_worker_run, &w[t]) == 0)
            started++;
        else
            break;
    }
    if (started == 0) /* no thread to be had: this one does it */
        file_worker_run(&w[0]);
    for (int i = 0; i < n_files && rc == 0; i++) {
        pthread_mutex_lock(&p.mu);
        while (p.done[i] == 0 && !p.failed)
            pthread_cond_wait(&p.cv, &p.mu);
        int ok = p.done[i] == 1;
        pthread_mutex_unlock(&p.mu);
        if (!ok) {
            snprintf(err, err_size, "%s", p.err);
            rc = -1;
            break;
        }
        if (write_ids(r, p.ids[i].v, p.ids[i].n) || (eos >= 0 && write_ids(r, &eos, 1))) {
            snprintf(err, err_size, "writing the shard: %s", strerror(errno));
            rc = -1;
        }
        free(p.ids[i].v);
        p.ids[i].v = NULL;
        r->bytes_done += p.bytes[i];
        r->files_done++;
        progress(r, 0);
        pthread_mutex_lock(&p.mu);
        p.written = i + 1;
        if (rc)
            p.failed = 1;
        pthread_cond_broadcast(&p.cv);
        pthread_mutex_unlock(&p.mu);
    }
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    for (int i = 0; i < n_files; i++)
        free(p.ids[i].v);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    free(p.ids), free(p.done), free(p.bytes), free(w), free(tid);
    return rc;
}

static int shard_header(FILE *f, int wide, int64_t count)
{
    int32_t header[256] = { SHARD_MAGIC, wide ? 2 : 1, (int32_t)count };
    unsigned char le[SHARD_HEADER_BYTES];
    for (int i = 0; i < 256; i++)
        for (int b = 0; b < 4; b++)
            le[4 * i + b] = (unsigned char)((uint32_t)header[i] >> (8 * b));
    return fseek(f, 0, SEEK_SET) || fwrite(le, sizeof le, 1, f) != 1 ? -1 : 0;
}

static int cmd_encode(const tokenize_options *o, const char *tokenizer, char **files, int n_files)
{
    char err[1024];
    tk_tokenizer *tk = tk_load(tokenizer, err, sizeof err);
    if (!tk) {
        fprintf(stderr, "fusionc tokenize: %s\n", err);
        return 1;
    }
    int32_t eos = o->eos ? tk_end_of_text(tk) : -1;
    if (o->eos && eos < 0) {
        fprintf(stderr,
                "fusionc tokenize: %s: --eos, but the tokenizer has none of <|endoftext|>, <|end_of_text|>, "
                "</s>, <eos>, <|im_end|> as a special token\n",
                tokenizer);
        tk_free(tk);
        return 1;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    encoder_run r = { .tk = tk,
                      .threads = o->threads > 0 ? o->threads
                                 : cores > 0    ? (int)(cores < 1024 ? cores : 1024)
                                                : 1,
                      .wide = tk_vocab_size(tk) > 65536,
                      .tty = isatty(2),
                      .start = now_s(),
                      .files_total = n_files };
    r.share = calloc((size_t)r.threads, sizeof *r.share);
    int rc = r.share ? 0 : -1;
    for (int t = 0; t < r.threads && rc == 0; t++)
        rc = (r.share[t].enc = tk_encoder_new(tk)) ? 0 : -1;
    for (int i = 0; i < n_files; i++) {
        FILE *f = fopen(files[i], "rb"); /* sizes, for the progress line */
        if (f && fseek(f, 0, SEEK_END) == 0)
            r.bytes_total += ftell(f);
        if (f)
            fclose(f);
    }
    atomic_file af;
    r.out = rc == 0 ? atomic_open(&af, o->output, err, sizeof err) : NULL;
    if (rc)
        snprintf(err, sizeof err, "out of memory");
    rc = r.out && shard_header(r.out, r.wide, 0) == 0 ? 0 : -1;
    tk_piece *pieces = NULL;
    int64_t cap = 0;
    if (rc == 0 && r.threads > 1 && n_files >= 2 * r.threads)
        rc = encode_files_apart(&r, files, n_files, eos, err, sizeof err);
    else
        for (int i = 0; i < n_files && rc == 0; i++)
            rc = encode_file(&r, files[i], eos, &pieces, &cap, err, sizeof err);
    if (rc == 0 && r.count > INT32_MAX) {
        snprintf(err, sizeof err, "%lld ids: more than a shard's header counts (2^31 - 1); split the files over shards",
                 (long long)r.count);
        rc = -1;
    }
    if (rc == 0 && shard_header(r.out, r.wide, r.count))
        rc = -1, snprintf(err, sizeof err, "%s: writing the header: %s", o->output, strerror(errno));
    if (rc == 0)
        rc = atomic_commit(&af, 0, err, sizeof err);
    else if (r.out)
        atomic_abort(&af);
    if (rc == 0)
        progress(&r, 1);
    else
        fprintf(stderr, "%sfusionc tokenize: %s\n", r.tty ? "\n" : "", err);
    for (int t = 0; r.share && t < r.threads; t++)
        tk_encoder_free(r.share[t].enc), free(r.share[t].ids.v);
    free(r.share);
    free(pieces);
    tk_free(tk);
    return rc ? 1 : 0;
}

/* ---- --decode ------------------------------------------------------------- */

static int read_shard(const char *path, int32_t **ids, int64_t *count, char *err, size_t n)
{
    size_t size = 0;
    unsigned char *buf = (unsigned char *)read_whole(path, &size, err, n);
    if (!buf)
        return -1;
    int32_t h[3] = { 0 };
    for (int i = 0; i < 3 && size >= SHARD_HEADER_BYTES; i++)
        h[i] = (int32_t)((uint32_t)buf[4 * i] | (uint32_t)buf[4 * i + 1] << 8 | (uint32_t)buf[4 * i + 2] << 16 |
                         (uint32_t)buf[4 * i + 3] << 24);
    int width = h[1] == 1 ? 2 : 4;
    int rc = -1;
    if (size < SHARD_HEADER_BYTES || h[0] != SHARD_MAGIC)
        snprintf(err, n, "%s: not a token shard (its first int32 is %d, a shard's is %d)", path, h[0], SHARD_MAGIC);
    else if (h[1] != 1 && h[1] != 2)
        snprintf(err, n, "%s: token shard version %d (1: uint16 ids, 2: uint32)", path, h[1]);
    else if (h[2] < 0 || (uint64_t)SHARD_HEADER_BYTES + (uint64_t)h[2] * (uint64_t)width != size)
        snprintf(err, n, "%s: the header counts %d ids (%llu bytes with the header) but the file has %zu bytes", path,
                 h[2], (unsigned long long)SHARD_HEADER_BYTES + (unsigned long long)h[2] * (unsigned)width, size);
    else if (!(*ids = malloc((size_t)(h[2] > 0 ? h[2] : 1) * sizeof **ids)))
        snprintf(err, n, "%s: out of memory", path);
    else {
        const unsigned char *p = buf + SHARD_HEADER_BYTES;
        for (int64_t i = 0; i < h[2]; i++, p += width)
            (*ids)[i] =
                width == 2
                    ? (int32_t)(p[0] | p[1] << 8)
                    : (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        *count = h[2];
        rc = 0;
    }
    free(buf);
    return rc;
}

static int cmd_decode(const tokenize_options *o, const char *tokenizer, const char *shard)
{
    char err[1024];
    int32_t *ids = NULL;
    int64_t count = 0;
    tk_bytes text = { 0 };
    tk_tokenizer *tk = tk_load(tokenizer, err, sizeof err);
    int rc = tk && read_shard(shard, &ids, &count, err, sizeof err) == 0 ? 0 : -1;
    char why[900];
    if (rc == 0 && tk_decode(tk, ids, count, &text, why, sizeof why)) {
        snprintf(err, sizeof err, "%s: %s", shard, why);
        rc = -1;
    }
    if (rc == 0)
        rc = atomic_write_file(o->output, text.v ? text.v : "", (size_t)text.n, err, sizeof err);
    if (rc)
        fprintf(stderr, "fusionc tokenize: %s\n", err);
    else
        fprintf(stderr, "tokenize: %lld ids, %lld bytes of text to %s\n", (long long)count, (long long)text.n,
                o->output);
    free(ids);
    free(text.v);
    tk_free(tk);
    return rc ? 1 : 0;
}

int tokenize_main(int argc, char **argv)
{
    tokenize_options o = { 0 };
    char **args = malloc((size_t)(argc > 0 ? argc : 1) * sizeof *args);
    int n = 0, rc;
    if (!args)
        return 1;
    char why[512];
    for (int i = 0; i < argc; i++) {
        int took = cli_is_help(argv[i]) ? 0 : cli_take(&tokenize_usage, argc, argv, &i, &o, why, sizeof why);
        if (cli_is_help(argv[i])) {
            cli_usage_print(stdout, &tokenize_usage);
            rc = 0;
            goto done;
        }
        if (took < 0 || (took == 0 && argv[i][0] == '-' && argv[i][1])) {
            rc = took < 0 ? usage_fail("%s", why) : usage_fail("unknown option '%s'", argv[i]);
            goto done;
        }
        if (took == 0)
            args[n++] = argv[i];
    }
    if (!o.output)
        rc = usage_fail("-o %s is required", o.decode ? "OUT.txt" : "OUT.bin");
    else if (o.decode)
        rc =
            n == 2 ? cmd_decode(&o, args[0], args[1]) : usage_fail("--decode takes TOKENIZER.json and one SHARD%s", "");
    else if (n < 2)
        rc = usage_fail("a TOKENIZER.json and at least one FILE are required%s", "");
    else
        rc = o.jsonl ? tokenize_jsonl(args[0], args + 1, n - 1, o.output, o.eos)
                     : cmd_encode(&o, args[0], args + 1, n - 1);
done:
    free(args);
    return rc;
}
