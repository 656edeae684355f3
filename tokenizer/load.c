/* load.c: a tokenizer.json read into a tk_tokenizer: the BPE model (its
 * vocabulary, merges and unknown-token rules) and the added tokens here;
 * the normalizer, pre-tokenizer and decoder in load_steps.c.  JSON by
 * cJSON.  Every refusal names the file and the JSON path of what it
 * refuses ("model.type: 'Unigram' is not supported (BPE only)"). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

static char *read_file(const char *path, size_t *size, char *err, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        tk_error(err, n, "%s: cannot open the tokenizer: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    long len = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)len + 1)) &&
        fread(buf, 1, (size_t)len, f) == (size_t)len) {
        buf[len] = 0;
        *size = (size_t)len;
    } else {
        tk_error(err, n, "%s: cannot read the tokenizer", path);
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

/* A byte-level token's bytes: each char of GPT-2's alphabet back to its
 * byte; a token with a char outside the alphabet is its own UTF-8, as
 * Hugging Face's ByteLevel decoder does. */
static char *byte_level_bytes(const char *s, int32_t n, int32_t *out_len)
{
    char *out = malloc((size_t)n + 1);
    if (!out)
        return NULL;
    int32_t k = 0;
    for (int32_t i = 0; i < n;) {
        uint32_t cp;
        int len = tk_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        int b = len ? tk_char_to_byte(cp) : -1;
        if (b < 0) {
            memcpy(out, s, (size_t)n);
            *out_len = n;
            return out;
        }
        out[k++] = (char)b;
        i += len;
    }
    *out_len = k;
    return out;
}

/* Room for ids below n_ids: the arrays grow to twice their size at least
 * (ids come in rising order: one realloc a token would copy them n times). */
static int grow_ids(tk_tokenizer *tk, int32_t n_ids)
{
    if (n_ids <= tk->n_ids)
        return 0;
    if (n_ids > tk->cap_ids) {
        int64_t cap = tk->cap_ids ? 2 * (int64_t)tk->cap_ids : 1024;
        cap = cap < n_ids ? n_ids : cap > INT32_MAX ? INT32_MAX : cap;
        char ***arrays[] = { &tk->text, &tk->out, &tk->name };
        for (int a = 0; a < 3; a++) {
            char **p = realloc(*arrays[a], (size_t)cap * sizeof *p);
            if (!p)
                return -1;
            *arrays[a] = p;
        }
        int32_t **lens[] = { &tk->text_len, &tk->out_len, &tk->name_len };
        for (int a = 0; a < 3; a++) {
            int32_t *p = realloc(*lens[a], (size_t)cap * sizeof *p);
            if (!p)
                return -1;
            *lens[a] = p;
        }
        uint8_t **flags[] = { &tk->is_added, &tk->mergeable, &tk->in_model };
        for (int a = 0; a < 3; a++) {
            uint8_t *p = realloc(*flags[a], (size_t)cap);
            if (!p)
                return -1;
            *flags[a] = p;
        }
        tk->cap_ids = (int32_t)cap;
    }
    size_t more = (size_t)(n_ids - tk->n_ids);
    memset(tk->text + tk->n_ids, 0, more * sizeof *tk->text);
    memset(tk->out + tk->n_ids, 0, more * sizeof *tk->out);
    memset(tk->name + tk->n_ids, 0, more * sizeof *tk->name);
    memset(tk->text_len + tk->n_ids, 0, more * sizeof *tk->text_len);
    memset(tk->out_len + tk->n_ids, 0, more * sizeof *tk->out_len);
    memset(tk->name_len + tk->n_ids, 0, more * sizeof *tk->name_len);
    memset(tk->is_added + tk->n_ids, 0, more);
    memset(tk->mergeable + tk->n_ids, 0, more);
    memset(tk->in_model + tk->n_ids, 0, more);
    tk->n_ids = n_ids;
    return 0;
}

/* Token `id` named `name` (as tokenizer.json writes it); `text` is how the
 * model matches it (byte-level: its bytes). */
static int set_token(tk_tokenizer *tk, int32_t id, const char *name, int is_model_token)
{
    if (grow_ids(tk, id + 1))
        return -1;
    tk->in_model[id] |= (uint8_t)is_model_token;
    if (tk->name[id])
        return 0; /* an added token that the vocabulary has too: one token */
    int32_t len = (int32_t)strlen(name);
    tk->name[id] = strdup(name);
    tk->name_len[id] = len;
    if (is_model_token && tk->byte_level)
        tk->text[id] = byte_level_bytes(name, len, &tk->text_len[id]);
    else
        tk->text[id] = strdup(name), tk->text_len[id] = len;
    return tk->name[id] && tk->text[id] ? 0 : -1;
}

static int load_vocab(tk_tokenizer *tk, const cJSON *model, char *err, size_t n)
{
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab))
        return tk_error(err, n, "%s: model.vocab is not an object of token: id", tk->path);
    int64_t count = 0;
    for (const cJSON *v = vocab->child; v; v = v->next, count++) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= INT32_MAX - 1 ||
            v->valuedouble != (double)(int32_t)v->valuedouble)
            return tk_error(err, n, "%s: model.vocab[\"%s\"]: the id is not an integer in [0, 2^31 - 1)", tk->path,
                            v->string);
        if (set_token(tk, (int32_t)v->valuedouble, v->string, 1))
            return tk_error(err, n, "%s: out of memory reading the vocabulary", tk->path);
    }
    if (count == 0)
        return tk_error(err, n, "%s: model.vocab is empty", tk->path);
    return 0;
}

static int load_added(tk_tokenizer *tk, const cJSON *root, char *err, size_t n)
{
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (added && !cJSON_IsArray(added))
        return tk_error(err, n, "%s: added_tokens is not an array", tk->path);
    tk->added = calloc((size_t)cJSON_GetArraySize(added) + 1, sizeof *tk->added);
    if (!tk->added)
        return tk_error(err, n, "%s: out of memory", tk->path);
    int i = 0;
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(a, "content"));
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= INT32_MAX - 1 || !content || !*content)
            return tk_error(err, n, "%s: added_tokens[%d]: needs an integer id and a non-empty content", tk->path, i);
        tk_added *t = &tk->added[tk->n_added++];
        t->id = (int32_t)id->valuedouble;
        t->content = strdup(content);
        t->len = (int64_t)strlen(content);
        t->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
        t->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "lstrip"));
        t->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "rstrip"));
        t->single_word = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "single_word"));
        t->normalized = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "normalized"));
        if (!t->content || set_token(tk, t->id, content, 0))
            return tk_error(err, n, "%s: out of memory", tk->path);
        tk->is_added[t->id] = 1;
        tk->added_first[(unsigned char)content[0]] = 1;
    }
    return 0;
}

/* Longest first: at a position where two added tokens match, the longer
 * one wins (Hugging Face's leftmost-longest match). */
static int longer_first(const void *a, const void *b)
{
    const tk_added *x = a, *y = b;
    return x->len != y->len ? (x->len < y->len ? 1 : -1) : (x->id > y->id) - (x->id < y->id);
}

static int merge_halves(const cJSON *m, const char **left, const char **right, char *buf, size_t size)
{
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2) {
        *left = cJSON_GetStringValue(cJSON_GetArrayItem(m, 0));
        *right = cJSON_GetStringValue(cJSON_GetArrayItem(m, 1));
        return *left && *right ? 0 : -1;
    }
    const char *s = cJSON_GetStringValue(m), *space = s ? strchr(s, ' ') : NULL;
    if (!space || strchr(space + 1, ' ') || strlen(s) >= size)
        return -1;
    memcpy(buf, s, (size_t)(space - s));
    buf[space - s] = 0;
    *left = buf;
    *right = space + 1;
    return 0;
}

static int load_merges(tk_tokenizer *tk, const cJSON *model, char *err, size_t n)
{
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges))
        return tk_error(err, n, "%s: model.merges is not an array", tk->path);
    if (tk_pairmap_init(&tk->merges, cJSON_GetArraySize(merges)))
        return tk_error(err, n, "%s: out of memory", tk->path);
    char left_buf[1024], joined[2048];
    int32_t rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        const char *left, *right;
        if (merge_halves(m, &left, &right, left_buf, sizeof left_buf))
            return tk_error(err, n, "%s: model.merges[%d]: neither \"left right\" nor [left, right]", tk->path, rank);
        int32_t a = tk_strmap_get(&tk->by_name, left, (int64_t)strlen(left));
        int32_t b = tk_strmap_get(&tk->by_name, right, (int64_t)strlen(right));
        snprintf(joined, sizeof joined, "%s%s", left, right);
        int32_t ab = tk_strmap_get(&tk->by_name, joined, (int64_t)strlen(joined));
        if (a < 0 || b < 0 || ab < 0)
            return tk_error(err, n, "%s: model.merges[%d]: '%s' is not in the vocabulary", tk->path, rank,
                            a < 0   ? left
                            : b < 0 ? right
                                    : joined);
        tk_pairmap_add(&tk->merges, a, b, rank, ab);
        tk->mergeable[a] = tk->mergeable[b] = 1;
    }
    return 0;
}

static int build_maps(tk_tokenizer *tk, char *err, size_t n)
{
    if (tk_strmap_init(&tk->by_name, tk->n_ids, (const char *const *)tk->name, tk->name_len) ||
        tk_strmap_init(&tk->vocab, tk->n_ids, (const char *const *)tk->text, tk->text_len))
        return tk_error(err, n, "%s: out of memory", tk->path);
    for (int32_t id = 0; id < tk->n_ids; id++)
        if (tk->name[id]) {
            tk_strmap_add(&tk->by_name, id);
            if (tk->in_model[id])
                tk_strmap_add(&tk->vocab, id);
        }
    return 0;
}

/* The single tokens every piece starts from: byte-level, one a byte;
 * byte fallback, <0xXX>. */
static int find_byte_tokens(tk_tokenizer *tk, char *err, size_t n)
{
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        tk->byte_id[b] = tk->byte_level      ? tk_strmap_get(&tk->vocab, (const char *)&(char){ (char)b }, 1)
                         : tk->byte_fallback ? tk_strmap_get(&tk->by_name, name, (int64_t)strlen(name))
                                             : -1;
        if (tk->byte_level && tk->byte_id[b] < 0)
            return tk_error(err, n, "%s: byte-level, but byte 0x%02X ('%s' in GPT-2's alphabet) has no token", tk->path,
                            b, name);
    }
    return 0;
}

static int load_model(tk_tokenizer *tk, const cJSON *root, char *err, size_t n)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(model, "type"));
    if (!model)
        return tk_error(err, n, "%s: no model: not a Hugging Face tokenizer.json", tk->path);
    if (!type && cJSON_GetObjectItemCaseSensitive(model, "merges"))
        type = "BPE"; /* older files name no type */
    if (!type || strcmp(type, "BPE") != 0)
        return tk_error(err, n, "%s: model.type '%s' is not supported (BPE only: GPT-2, Llama, Qwen, Mistral)",
                        tk->path, type ? type : "(none)");
    const char *fields[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (int i = 0; i < 2; i++) {
        const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(model, fields[i]));
        if (v && *v)
            return tk_error(err, n, "%s: model.%s '%s' is not supported", tk->path, fields[i], v);
    }
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return tk_error(err, n, "%s: model.dropout %g is not supported (it makes encoding random)", tk->path,
                        dropout->valuedouble);
    tk->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    tk->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    tk->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "fuse_unk"));
    if (load_vocab(tk, model, err, n) || load_added(tk, root, err, n) || build_maps(tk, err, n) ||
        load_merges(tk, model, err, n) || find_byte_tokens(tk, err, n))
        return -1;
    qsort(tk->added, (size_t)tk->n_added, sizeof *tk->added, longer_first);
    const char *unk = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(model, "unk_token"));
    tk->unk = unk ? tk_strmap_get(&tk->by_name, unk, (int64_t)strlen(unk)) : -1;
    if (unk && tk->unk < 0)
        return tk_error(err, n, "%s: model.unk_token '%s' is not in the vocabulary", tk->path, unk);
    return 0;
}

/* Each token's text as decoding writes it (the decoders, load_steps.c). */
static int decoded_texts(tk_tokenizer *tk, char *err, size_t n);

tk_tokenizer *tk_load(const char *path, char *err, size_t n)
{
    size_t size = 0;
    char *json = read_file(path, &size, err, n);
    if (!json)
        return NULL;
    cJSON *root = cJSON_ParseWithLength(json, size);
    char near[24] = ""; /* where the parse stopped: a pointer into json, copied before json goes */
    const char *at = root ? NULL : cJSON_GetErrorPtr();
    if (at && at >= json && at < json + size)
        snprintf(near, sizeof near, "%.20s", at);
    free(json);
    tk_tokenizer *tk = calloc(1, sizeof *tk);
    if (!root || !tk) {
        tk_error(err, n, "%s: not JSON%s%s", path, near[0] ? " near: " : "", near);
        cJSON_Delete(root);
        free(tk);
        return NULL;
    }
    snprintf(tk->path, sizeof tk->path, "%s", path);
    tk->unk = -1;
    int rc = tk_load_pre_tokenizer(tk, cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), err, n);
    if (rc == 0)
        rc = tk_load_normalizer(tk, cJSON_GetObjectItemCaseSensitive(root, "normalizer"), err, n);
    if (rc == 0)
        rc = load_model(tk, root, err, n);
    if (rc == 0)
        rc = tk_load_decoder(tk, cJSON_GetObjectItemCaseSensitive(root, "decoder"), err, n);
    if (rc == 0)
        rc = decoded_texts(tk, err, n);
    cJSON_Delete(root);
    if (rc) {
        tk_free(tk);
        return NULL;
    }
    return tk;
}

/* ---- decoding's text of each token ---------------------------------------- */

static char *replace_all(const char *s, int32_t n, const char *a, const char *b, int32_t *out_len)
{
    size_t la = strlen(a), lb = strlen(b), k = 0;
    char *out = malloc((size_t)n * (lb > la ? lb : 1) + 1);
    if (!out)
        return NULL;
    for (int32_t i = 0; i < n;)
        if (la && i + (int32_t)la <= n && memcmp(s + i, a, la) == 0)
            memcpy(out + k, b, lb), k += lb, i += (int32_t)la;
        else
            out[k++] = s[i++];
    *out_len = (int32_t)k;
    return out;
}

static int hex_digit(char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1; }

static int decoded_texts(tk_tokenizer *tk, char *err, size_t n)
{
    for (int32_t id = 0; id < tk->n_ids; id++) {
        if (!tk->name[id])
            continue;
        int32_t len = tk->name_len[id];
        char *s = malloc((size_t)len + 1);
        if (!s)
            return tk_error(err, n, "%s: out of memory", tk->path);
        memcpy(s, tk->name[id], (size_t)len);
        for (int d = 0; d < tk->n_dec && s; d++) {
            const tk_dec *dec = &tk->dec[d];
            char *next = NULL;
            if (dec->kind == TK_DEC_BYTE_LEVEL)
                next = byte_level_bytes(s, len, &len);
            else if (dec->kind == TK_DEC_REPLACE)
                next = replace_all(s, len, dec->a, dec->b, &len);
            else if (dec->kind == TK_DEC_BYTE_FALLBACK && len == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' &&
                     hex_digit(s[3]) >= 0 && hex_digit(s[4]) >= 0) {
                s[0] = (char)(hex_digit(s[3]) * 16 + hex_digit(s[4]));
                len = 1;
            }
            if (next)
                free(s), s = next;
        }
        if (!s)
            return tk_error(err, n, "%s: out of memory", tk->path);
        tk->out[id] = s;
        tk->out_len[id] = len;
    }
    return 0;
}

void tk_free(tk_tokenizer *tk)
{
    if (!tk)
        return;
    for (int32_t id = 0; id < tk->n_ids; id++)
        free(tk->text[id]), free(tk->out[id]), free(tk->name[id]);
    free(tk->text), free(tk->text_len), free(tk->out), free(tk->out_len), free(tk->name), free(tk->name_len);
    free(tk->is_added), free(tk->mergeable), free(tk->in_model);
    for (int i = 0; i < tk->n_added; i++)
        free(tk->added[i].content);
    free(tk->added);
    tk_strmap_free(&tk->vocab);
    tk_strmap_free(&tk->by_name);
    tk_pairmap_free(&tk->merges);
    tk_steps_free(tk);
    free(tk);
}

int32_t tk_vocab_size(const tk_tokenizer *tk) { return tk->n_ids; }

int32_t tk_token_id(const tk_tokenizer *tk, const char *token)
{
    return tk_strmap_get(&tk->by_name, token, (int64_t)strlen(token));
}

int32_t tk_end_of_text(const tk_tokenizer *tk)
{
    static const char *const names[] = { "<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|im_end|>" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = tk_token_id(tk, names[i]);
        if (id >= 0 && tk->is_added[id])
            return id;
    }
    return -1;
}

const char *tk_kind(const tk_tokenizer *tk)
{
    return tk->byte_level ? "BPE, byte-level" : tk->byte_fallback ? "BPE, byte fallback" : "BPE";
}
