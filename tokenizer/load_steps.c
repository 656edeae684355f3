/* load_steps.c: a tokenizer.json's normalizer, pre-tokenizer and decoder,
 * each a list of steps (a "Sequence" flattened).  What this tokenizer does
 * not do is refused here, naming the type, so that no text is ever
 * encoded differently from Hugging Face's without a word. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* GPT-2's pre-tokenizer regex (ByteLevel with use_regex). */
static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char *type_of(const cJSON *j) { return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "type")); }
static const char *string_at(const cJSON *j, const char *key)
{
    return cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, key));
}

/* A "pattern": {"String": s} or {"Regex": r}. */
static const char *pattern_of(const cJSON *j, int *is_regex)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    const char *s = string_at(p, "String");
    *is_regex = !s;
    return s ? s : string_at(p, "Regex");
}

/* The first element of the array j[key], or NULL. */
static const cJSON *first_child(const cJSON *j, const char *key)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    return cJSON_IsArray(a) ? a->child : NULL;
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

/* ---- normalizer ---------------------------------------------------------- */

static int add_normalizer(tk_tokenizer *tk, const cJSON *j, const char *where, char *err, size_t n)
{
    const char *type = type_of(j);
    if (!type)
        return tk_error(err, n, "%s: %s has no type", tk->path, where);
    if (strcmp(type, "Sequence") == 0) {
        int i = 0;
        for (const cJSON *c = first_child(j, "normalizers"); c; c = c->next, i++) {
            char at[128];
            snprintf(at, sizeof at, "%s.normalizers[%d]", where, i);
            if (add_normalizer(tk, c, at, err, n))
                return -1;
        }
        return 0;
    }
    if (tk->n_norm == TK_MAX_STEPS)
        return tk_error(err, n, "%s: %s: more than %d normalizers", tk->path, where, TK_MAX_STEPS);
    tk_norm *s = &tk->norm[tk->n_norm];
    static const struct {
        const char *name;
        tk_norm_kind kind;
    } kinds[] = { { "NFC", TK_NORM_NFC },
                  { "NFD", TK_NORM_NFD },
                  { "NFKC", TK_NORM_NFKC },
                  { "NFKD", TK_NORM_NFKD },
                  { "Lowercase", TK_NORM_LOWERCASE },
                  { "Prepend", TK_NORM_PREPEND },
                  { "Replace", TK_NORM_REPLACE },
                  { "Strip", TK_NORM_STRIP } };
    size_t k = 0;
    while (k < sizeof kinds / sizeof kinds[0] && strcmp(kinds[k].name, type) != 0)
        k++;
    if (k == sizeof kinds / sizeof kinds[0])
        return tk_error(err, n, "%s: %s: normalizer '%s' is not supported", tk->path, where, type);
    s->kind = kinds[k].kind;
    if (s->kind == TK_NORM_PREPEND) {
        s->a = dup_or_empty(string_at(j, "prepend"));
    } else if (s->kind == TK_NORM_REPLACE) {
        int is_regex;
        const char *pattern = pattern_of(j, &is_regex);
        if (!pattern || is_regex)
            return tk_error(err, n, "%s: %s: a Replace by regex is not supported (by string only)", tk->path, where);
        s->a = strdup(pattern);
        s->b = dup_or_empty(string_at(j, "content"));
    } else if (s->kind == TK_NORM_STRIP) {
        s->left = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "strip_left"));
        s->right = !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "strip_right"));
    }
    tk->n_norm++;
    return 0;
}

int tk_load_normalizer(tk_tokenizer *tk, const cJSON *j, char *err, size_t n)
{
    return j && !cJSON_IsNull(j) ? add_normalizer(tk, j, "normalizer", err, n) : 0;
}

/* ---- pre-tokenizer ------------------------------------------------------- */

static int add_split(tk_tokenizer *tk, const char *pattern, int is_regex, tk_split_behavior behavior, const char *where,
                     char *err, size_t n)
{
    if (tk->n_split == TK_MAX_STEPS)
        return tk_error(err, n, "%s: %s: more than %d pre-tokenizers", tk->path, where, TK_MAX_STEPS);
    int code;
    PCRE2_SIZE at;
    uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (is_regex ? PCRE2_UCP : PCRE2_LITERAL);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, options, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR why[256];
        pcre2_get_error_message(code, why, sizeof why);
        return tk_error(err, n, "%s: %s: the regex does not compile at offset %zu: %s", tk->path, where, (size_t)at,
                        (char *)why);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without a JIT (rare) the interpreter runs: slower, the same */
    tk->split[tk->n_split++] = (tk_split){ .re = re, .behavior = behavior };
    return 0;
}

static int add_pre_tokenizer(tk_tokenizer *tk, const cJSON *j, const char *where, char *err, size_t n)
{
    const char *type = type_of(j);
    if (!type)
        return tk_error(err, n, "%s: %s has no type", tk->path, where);
    if (strcmp(type, "Sequence") == 0) {
        int i = 0;
        for (const cJSON *c = first_child(j, "pretokenizers"); c; c = c->next, i++) {
            char at[128];
            snprintf(at, sizeof at, "%s.pretokenizers[%d]", where, i);
            if (add_pre_tokenizer(tk, c, at, err, n))
                return -1;
        }
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        tk->byte_level = 1;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space"))) {
            if (tk->n_split > 0)
                return tk_error(err, n, "%s: %s: add_prefix_space after a Split is not supported", tk->path, where);
            tk->prefix_space = 1;
        }
        const cJSON *use_regex = cJSON_GetObjectItemCaseSensitive(j, "use_regex");
        return cJSON_IsFalse(use_regex) ? 0 : add_split(tk, gpt2_pattern, 1, TK_SPLIT_ISOLATED, where, err, n);
    }
    if (strcmp(type, "Digits") == 0) {
        int each = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "individual_digits"));
        return add_split(tk, each ? "\\p{N}" : "\\p{N}+", 1, TK_SPLIT_ISOLATED, where, err, n);
    }
    if (strcmp(type, "Split") != 0)
        return tk_error(err, n, "%s: %s: pre-tokenizer '%s' is not supported (Split, ByteLevel, Digits, Sequence)",
                        tk->path, where, type);
    int is_regex;
    const char *pattern = pattern_of(j, &is_regex);
    const char *behavior = string_at(j, "behavior");
    static const char *const behaviors[] = { "Isolated", "Removed", "MergedWithPrevious", "MergedWithNext" };
    int b = 0;
    while (b < 4 && behavior && strcmp(behaviors[b], behavior) != 0)
        b++;
    if (!pattern)
        return tk_error(err, n, "%s: %s: a Split needs a pattern (String or Regex)", tk->path, where);
    if (b == 4 || !behavior)
        return tk_error(err, n, "%s: %s: Split behavior '%s' is not supported", tk->path, where,
                        behavior ? behavior : "(none)");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "invert")))
        return tk_error(err, n, "%s: %s: a Split with invert is not supported", tk->path, where);
    return add_split(tk, pattern, is_regex, (tk_split_behavior)b, where, err, n);
}

int tk_load_pre_tokenizer(tk_tokenizer *tk, const cJSON *j, char *err, size_t n)
{
    return j && !cJSON_IsNull(j) ? add_pre_tokenizer(tk, j, "pre_tokenizer", err, n) : 0;
}

/* ---- decoder ------------------------------------------------------------- */

static int add_decoder(tk_tokenizer *tk, const cJSON *j, const char *where, char *err, size_t n)
{
    const char *type = type_of(j);
    if (!type)
        return tk_error(err, n, "%s: %s has no type", tk->path, where);
    if (strcmp(type, "Sequence") == 0) {
        int i = 0;
        for (const cJSON *c = first_child(j, "decoders"); c; c = c->next, i++) {
            char at[128];
            snprintf(at, sizeof at, "%s.decoders[%d]", where, i);
            if (add_decoder(tk, c, at, err, n))
                return -1;
        }
        return 0;
    }
    if (tk->n_dec == TK_MAX_STEPS)
        return tk_error(err, n, "%s: %s: more than %d decoders", tk->path, where, TK_MAX_STEPS);
    tk_dec *d = &tk->dec[tk->n_dec];
    if (strcmp(type, "ByteLevel") == 0) {
        d->kind = TK_DEC_BYTE_LEVEL;
    } else if (strcmp(type, "ByteFallback") == 0) {
        d->kind = TK_DEC_BYTE_FALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        d->kind = TK_DEC_FUSE;
    } else if (strcmp(type, "Replace") == 0) {
        int is_regex;
        const char *pattern = pattern_of(j, &is_regex);
        if (!pattern || is_regex)
            return tk_error(err, n, "%s: %s: a Replace by regex is not supported (by string only)", tk->path, where);
        d->kind = TK_DEC_REPLACE;
        d->a = strdup(pattern);
        d->b = dup_or_empty(string_at(j, "content"));
    } else if (strcmp(type, "Strip") == 0) {
        const char *content = string_at(j, "content");
        const cJSON *start = cJSON_GetObjectItemCaseSensitive(j, "start"),
                    *stop = cJSON_GetObjectItemCaseSensitive(j, "stop");
        if (!content || strlen(content) >= sizeof tk->strip_content || (cJSON_IsNumber(stop) && stop->valueint != 0))
            return tk_error(err, n, "%s: %s: a Strip decoder other than of a leading character is not supported",
                            tk->path, where);
        d->kind = TK_DEC_STRIP;
        tk->strip_start = cJSON_IsNumber(start) ? start->valueint : 0;
        snprintf(tk->strip_content, sizeof tk->strip_content, "%s", content);
    } else {
        return tk_error(
            err, n, "%s: %s: decoder '%s' is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Sequence)",
            tk->path, where, type);
    }
    tk->n_dec++;
    return 0;
}

int tk_load_decoder(tk_tokenizer *tk, const cJSON *j, char *err, size_t n)
{
    return j && !cJSON_IsNull(j) ? add_decoder(tk, j, "decoder", err, n) : 0;
}

void tk_steps_free(tk_tokenizer *tk)
{
    for (int i = 0; i < tk->n_norm; i++)
        free(tk->norm[i].a), free(tk->norm[i].b);
    for (int i = 0; i < tk->n_split; i++)
        pcre2_code_free(tk->split[i].re);
    for (int i = 0; i < tk->n_dec; i++)
        free(tk->dec[i].a), free(tk->dec[i].b);
}
