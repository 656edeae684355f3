/* tokenize_jsonl.c: `fusionc tokenize --jsonl`: supervised examples to a
 * token shard with a loss mask.
 *
 * Each FILE holds one example a line (JSON Lines; blank lines skipped):
 *
 *     {"prompt": "Translate to French: cheese", "completion": " fromage"}
 *
 * "completion" (a string) is required, "prompt" (a string) may be absent
 * or empty; other keys are ignored.  Each is encoded on its own, prompt
 * then completion (then, with --eos, the end of text), and the examples
 * follow each other in the shard, packed: the training windows run across
 * them as across any text.  The mask marks what the loss trains on: the
 * completion's tokens and the end of text, 1; the prompt's, 0.  A window's
 * target whose token is masked 0 is skipped by the loss (runtime/data.h:
 * OP_IGNORE_TARGET), so a prompt adds no gradient.
 *
 * The shard (runtime/data.h): llm.c's header with [3] = 1 (the mask
 * flag), the ids (uint16, or uint32 over 65,536), then one mask byte an
 * id.  Written whole or not at all.  A line that is not JSON, not an
 * object, or without a string "completion" is an error naming the file
 * and the line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/atomic_file.h"
#include "../runtime/rt_error.h"
#include "../tokenizer/tokenizer.h"
#include "tokenize.h"

#define SHARD_MAGIC        20240520
#define SHARD_HEADER_BYTES 1024
#define SHARD_FLAG_MASK    1 /* runtime/data.h's RT_SHARD_FLAG_MASK */

typedef struct {
    tk_ids ids;
    unsigned char *mask;
    int64_t mask_cap;
} masked_ids;

/* Room in out->mask for every id out holds. */
static int grow_mask(masked_ids *out)
{
    if (out->ids.n <= out->mask_cap)
        return 0;
    int64_t cap = out->mask_cap ? out->mask_cap : 4096;
    while (cap < out->ids.n)
        cap *= 2;
    unsigned char *m = realloc(out->mask, (size_t)cap);
    if (!m)
        return -1;
    out->mask = m;
    out->mask_cap = cap;
    return 0;
}

/* Encode text and append its ids to out, each with mask byte `trained`. */
static int append(tk_encoder *e, masked_ids *out, const char *text, int trained, char *err, size_t n)
{
    int64_t before = out->ids.n;
    if (tk_encode(e, text, strlen(text), &out->ids, err, n))
        return -1;
    if (grow_mask(out))
        return rt_error(err, n, "out of memory");
    memset(out->mask + before, trained, (size_t)(out->ids.n - before));
    return 0;
}

/* One file's examples, appended to out. */
static int encode_lines(tk_encoder *e, const char *path, int32_t eos, masked_ids *out, int64_t *examples, char *err,
                        size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return rt_error(err, n, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    for (long number = 1; rc == 0 && (len = getline(&line, &cap, f)) >= 0; number++) {
        if (strspn(line, " \t\r\n") == (size_t)len)
            continue;
        cJSON *j = cJSON_ParseWithLength(line, (size_t)len);
        const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        const cJSON *completion = cJSON_GetObjectItemCaseSensitive(j, "completion");
        char why[512];
        if (!cJSON_IsObject(j))
            rc = rt_error(err, n, "%s:%ld: not a JSON object (a line is {\"prompt\": ..., \"completion\": ...})", path,
                          number);
        else if (!cJSON_IsString(completion))
            rc = rt_error(err, n, "%s:%ld: no \"completion\" string", path, number);
        else if (prompt && !cJSON_IsString(prompt))
            rc = rt_error(err, n, "%s:%ld: \"prompt\" is not a string", path, number);
        else if ((prompt && append(e, out, prompt->valuestring, 0, why, sizeof why)) ||
                 append(e, out, completion->valuestring, 1, why, sizeof why))
            rc = rt_error(err, n, "%s:%ld: %s", path, number, why);
        else if (eos >= 0 && (tk_ids_push(&out->ids, eos) || grow_mask(out)))
            rc = rt_error(err, n, "out of memory");
        else if (eos >= 0)
            out->mask[out->ids.n - 1] = 1; /* the end of text is trained on: the model learns to stop */
        (*examples)++;
        cJSON_Delete(j);
    }
    if (rc == 0 && ferror(f))
        rc = rt_error(err, n, "%s: read error", path);
    free(line);
    fclose(f);
    return rc;
}

int tokenize_jsonl(const char *tokenizer, char **files, int n_files, const char *output, int with_eos)
{
    char err[1024];
    tk_tokenizer *tk = tk_load(tokenizer, err, sizeof err);
    if (!tk) {
        fprintf(stderr, "fusionc tokenize: %s\n", err);
        return 1;
    }
    int32_t eos = with_eos ? tk_end_of_text(tk) : -1;
    tk_encoder *e = tk_encoder_new(tk);
    masked_ids out = { 0 };
    int64_t examples = 0;
    int rc = e ? 0 : (snprintf(err, sizeof err, "out of memory"), -1);
    if (rc == 0 && with_eos && eos < 0)
        rc = rt_error(err, sizeof err, "%s: --eos, but the tokenizer has no end of text", tokenizer);
    for (int i = 0; i < n_files && rc == 0; i++)
        rc = encode_lines(e, files[i], eos, &out, &examples, err, sizeof err);
    if (rc == 0 && (out.ids.n == 0 || out.ids.n > INT32_MAX))
        rc = rt_error(err, sizeof err, "%lld ids: a shard holds 1 to 2^31 - 1", (long long)out.ids.n);
    atomic_file af;
    FILE *f = rc == 0 ? atomic_open(&af, output, err, sizeof err) : NULL;
    if (rc == 0 && !f)
        rc = -1;
    int wide = tk_vocab_size(tk) > 65536;
    if (rc == 0) {
        int32_t header[256] = { SHARD_MAGIC, wide ? 2 : 1, (int32_t)out.ids.n, SHARD_FLAG_MASK };
        unsigned char le[SHARD_HEADER_BYTES];
        for (int i = 0; i < 256; i++)
            for (int b = 0; b < 4; b++)
                le[4 * i + b] = (unsigned char)((uint32_t)header[i] >> (8 * b));
        int ok = fwrite(le, sizeof le, 1, f) == 1;
        for (int64_t i = 0; ok && i < out.ids.n; i++) {
            unsigned char id[4];
            for (int b = 0; b < 4; b++)
                id[b] = (unsigned char)((uint32_t)out.ids.v[i] >> (8 * b));
            ok = fwrite(id, wide ? 4 : 2, 1, f) == 1;
        }
        ok = ok && fwrite(out.mask, 1, (size_t)out.ids.n, f) == (size_t)out.ids.n;
        if (!ok) {
            snprintf(err, sizeof err, "%s: writing: %s", output, strerror(errno));
            atomic_abort(&af);
            rc = -1;
        } else {
            rc = atomic_commit(&af, 0, err, sizeof err);
        }
    }
    int64_t trained = 0;
    for (int64_t i = 0; rc == 0 && i < out.ids.n; i++)
        trained += out.mask[i];
    if (rc == 0)
        fprintf(stderr, "tokenize: %lld examples, %lld ids, %lld of them trained on (completions%s)\n",
                (long long)examples, (long long)out.ids.n, (long long)trained, with_eos ? " and ends of text" : "");
    else
        fprintf(stderr, "fusionc tokenize: %s\n", err);
    free(out.ids.v);
    free(out.mask);
    tk_encoder_free(e);
    tk_free(tk);
    return rc ? 1 : 0;
}
