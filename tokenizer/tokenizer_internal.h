/* tokenizer_internal.h: the loaded tokenizer, shared by the files of
 * tokenizer/ (load.c fills it; normalize.c, pretokenize.c, bpe.c,
 * encode.c and decode.c read it). */
#ifndef FUSION_TOKENIZER_INTERNAL_H
#define FUSION_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>

#include "tokenizer.h"

static inline int tk_error(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline int tk_error(char *err, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && n > 0)
        vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- hash tables (vocab.c) ---------------------------------------------- */

/* Byte strings to ids: open addressing; the keys are the tokenizer's own
 * byte strings (key_of(id)), not copied. */
typedef struct {
    uint32_t *slot; /* id + 1, 0 = empty */
    uint32_t mask;
    const char *const *key; /* key[id], key_len[id] */
    const int32_t *key_len;
} tk_strmap;
int tk_strmap_init(tk_strmap *m, int64_t count, const char *const *key, const int32_t *key_len);
void tk_strmap_add(tk_strmap *m, int32_t id);
int32_t tk_strmap_get(const tk_strmap *m, const char *s, int64_t len); /* -1: absent */
void tk_strmap_free(tk_strmap *m);

/* A merge: the pair (left, right) of ids becomes `merged`, at `rank`
 * (its line in the merges list: lower merges first). */
typedef struct {
    uint64_t key; /* (left + 1) << 32 | (right + 1); 0 = empty */
    int32_t rank, merged;
} tk_merge;
typedef struct {
    tk_merge *slot;
    uint64_t mask;
} tk_pairmap;
int tk_pairmap_init(tk_pairmap *m, int64_t count);
void tk_pairmap_add(tk_pairmap *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
const tk_merge *tk_pairmap_get(const tk_pairmap *m, int32_t left, int32_t right);
void tk_pairmap_free(tk_pairmap *m);

/* ---- the loaded tokenizer ------------------------------------------------ */

typedef enum {
    TK_NORM_NFC,
    TK_NORM_NFD,
    TK_NORM_NFKC,
    TK_NORM_NFKD,
    TK_NORM_LOWERCASE,
    TK_NORM_PREPEND,
    TK_NORM_REPLACE,
    TK_NORM_STRIP
} tk_norm_kind;
typedef struct {
    tk_norm_kind kind;
    char *a, *b;     /* prepend: a; replace: a -> b */
    int left, right; /* strip */
} tk_norm;

/* A pre-tokenizer step: split each piece by a regex (ByteLevel with
 * use_regex is GPT-2's regex, isolated). */
typedef enum {
    TK_SPLIT_ISOLATED,
    TK_SPLIT_REMOVED,
    TK_SPLIT_MERGED_WITH_PREVIOUS,
    TK_SPLIT_MERGED_WITH_NEXT
} tk_split_behavior;
typedef struct {
    pcre2_code *re;
    tk_split_behavior behavior;
} tk_split;

/* A decoder step, applied to each token's text when loading (decode.c)
 * or to the whole output at the end (strip). */
typedef enum { TK_DEC_BYTE_LEVEL, TK_DEC_REPLACE, TK_DEC_BYTE_FALLBACK, TK_DEC_FUSE, TK_DEC_STRIP } tk_dec_kind;
typedef struct {
    tk_dec_kind kind;
    char *a, *b; /* replace a -> b; strip: a is the content */
    int start, stop;
} tk_dec;

typedef struct {
    char *content;
    int64_t len;
    int32_t id;
    int special, lstrip, rstrip, single_word, normalized;
} tk_added;

#define TK_MAX_STEPS 8

struct tk_tokenizer {
    char path[512];
    int byte_level;    /* vocab strings are GPT-2's byte alphabet: held here as raw bytes */
    int byte_fallback; /* unknown characters as <0xXX> tokens */
    int ignore_merges; /* a piece that is a token is that token, merges or not */
    int fuse_unk;
    int32_t unk;     /* -1: none */
    int32_t n_ids;   /* one more than the largest id */
    int32_t cap_ids; /* the arrays' room */
    char **text;     /* [n_ids] the token as the model matches it (raw bytes when byte_level), or NULL */
    int32_t *text_len;
    char **out; /* [n_ids] what decoding writes for it */
    int32_t *out_len;
    uint8_t *is_added; /* [n_ids] */
    uint8_t *in_model; /* [n_ids] 1: in model.vocab (the BPE may produce it) */
    tk_strmap vocab;   /* model tokens: text -> id */
    tk_strmap by_name; /* every token as tokenizer.json writes it -> id (tk_token_id) */
    char **name;       /* [n_ids] as tokenizer.json writes it */
    int32_t *name_len;
    tk_pairmap merges;
    int32_t byte_id[256]; /* byte_level: the token of each byte; byte_fallback: <0xXX>; -1 */
    uint8_t *mergeable;   /* [n_ids] 1: in some merge, as left or right */
    tk_added *added;      /* longest first */
    int n_added;
    uint8_t added_first[256]; /* 1: some added token starts with this byte */
    tk_norm norm[TK_MAX_STEPS];
    int n_norm;
    int prefix_space; /* ByteLevel add_prefix_space: a space before each stretch not starting with one */
    tk_split split[TK_MAX_STEPS];
    int n_split;
    tk_dec dec[TK_MAX_STEPS];
    int n_dec;
    int strip_start; /* decoders' Strip: chars of strip_content removed from the output's start */
    char strip_content[8];
};

/* ---- the parts (each file's header says what it holds) -------------------- */

/* normalize.c: out = the normalized text of s[0 .. n). */
int tk_normalize(const tk_tokenizer *tk, const char *s, int64_t n, tk_bytes *out, char *err, size_t err_size);
/* load_steps.c: the normalizer, pre-tokenizer and decoder of a tokenizer.json. */
struct cJSON;
int tk_load_normalizer(tk_tokenizer *tk, const struct cJSON *j, char *err, size_t n);
int tk_load_pre_tokenizer(tk_tokenizer *tk, const struct cJSON *j, char *err, size_t n);
int tk_load_decoder(tk_tokenizer *tk, const struct cJSON *j, char *err, size_t n);
void tk_steps_free(tk_tokenizer *tk);
/* chars.c: GPT-2's byte alphabet: the code point standing for byte b,
 * and back (-1: not in the alphabet). */
uint32_t tk_byte_to_char(uint8_t b);
int tk_char_to_byte(uint32_t c);
/* bpe.c: the ids of one piece, merged. */
typedef struct tk_bpe_scratch tk_bpe_scratch;
tk_bpe_scratch *tk_bpe_scratch_new(void);
void tk_bpe_scratch_free(tk_bpe_scratch *s);
int tk_bpe(const tk_tokenizer *tk, tk_bpe_scratch *s, const char *piece, int64_t n, tk_ids *out, char *err,
           size_t err_size);
/* chars.c: UTF-8 */
int tk_utf8_decode(const unsigned char *s, int64_t n, uint32_t *cp); /* bytes of the char at s, 0: invalid */
int tk_utf8_encode(uint32_t cp, char out[4]);
int64_t tk_utf8_invalid_at(const char *s, int64_t n); /* -1: valid */

#endif
