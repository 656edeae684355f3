/* tokenizer.h: Hugging Face tokenizer.json files, BPE models, in C.
 *
 * What it reads: a tokenizer.json whose model is BPE, either byte-level
 * (GPT-2, Llama 3, Qwen: a ByteLevel pre-tokenizer, often after a Split
 * by regex) or byte-fallback (Llama 2, Mistral: a Prepend/Replace
 * normalizer and <0xXX> tokens for characters outside the vocabulary);
 * its added and special tokens; the normalizers NFC, NFD, NFKC, NFKD,
 * Lowercase, Prepend, Replace, Strip and Sequence; the decoders ByteLevel,
 * Replace, ByteFallback, Fuse, Strip and Sequence.  Anything else (a
 * WordPiece or Unigram model, a Metaspace pre-tokenizer, ...) is refused
 * when the file is loaded, naming the type.
 *
 * What it is not: a trainer of tokenizers, nor a post-processor (no
 * special token is added unless the caller adds it: tk_end_of_text,
 * tk_token_id).
 *
 * It encodes as Hugging Face's tokenizers does: added tokens split out of
 * the raw text first (longest match first), then each stretch between them
 * normalized, pre-tokenized into pieces, and each piece merged by BPE in
 * the order of the merges.  Regular expressions run on PCRE2 with Unicode
 * properties (\p{L}, \s as White_Space), normalization on utf8proc.
 *
 * Threads: a tk_tokenizer is read-only once loaded and shared; each thread
 * encodes through a tk_encoder of its own (its regex scratch and its cache
 * of pieces already merged).
 *
 *     tk_tokenizer *tk = tk_load("tokenizer.json", err, sizeof err);
 *     tk_encoder *e = tk_encoder_new(tk);
 *     tk_ids ids = { 0 };
 *     tk_encode(e, text, len, &ids, err, sizeof err);   // ids.v[0 .. ids.n)
 *     tk_bytes out = { 0 };
 *     tk_decode(tk, ids.v, ids.n, &out);                 // out.v, out.n bytes
 */
#ifndef FUSION_TOKENIZER_H
#define FUSION_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct tk_tokenizer tk_tokenizer;
typedef struct tk_encoder tk_encoder;

/* Growable arrays the calls append to; the caller frees .v. */
typedef struct {
    int32_t *v;
    int64_t n, cap;
} tk_ids;
typedef struct {
    char *v;
    int64_t n, cap;
} tk_bytes;

/* Reads and checks a tokenizer.json.  NULL with a one-line reason naming
 * the file (and the JSON path of what is wrong) in err. */
tk_tokenizer *tk_load(const char *path, char *err, size_t err_size);
void tk_free(tk_tokenizer *tk);

/* One more than the largest id, added tokens included. */
int32_t tk_vocab_size(const tk_tokenizer *tk);
/* The id of a token written as in tokenizer.json ("<|endoftext|>",
 * "Ġthe"), or -1. */
int32_t tk_token_id(const tk_tokenizer *tk, const char *token);
/* The tokenizer's end of text: the first special token it has of
 * <|endoftext|>, <|end_of_text|>, </s>, <eos>, <|im_end|>; or -1. */
int32_t tk_end_of_text(const tk_tokenizer *tk);
/* "BPE, byte-level" or "BPE, byte fallback": for messages. */
const char *tk_kind(const tk_tokenizer *tk);

tk_encoder *tk_encoder_new(const tk_tokenizer *tk);
void tk_encoder_free(tk_encoder *e);

/* Appends the ids of text[0 .. len) (UTF-8) to out.  Returns 0, or -1
 * with a reason in err (text that is not UTF-8: the byte offset). */
int tk_encode(tk_encoder *e, const char *text, size_t len, tk_ids *out, char *err, size_t err_size);

/* Appends the text of ids[0 .. n) to out, as Hugging Face's decode with
 * special tokens kept and no clean-up of spaces: decode(encode(text)) is
 * text for every UTF-8 text.  Returns 0, or -1 for an id outside the
 * vocabulary (err names it). */
int tk_decode(const tk_tokenizer *tk, const int32_t *ids, int64_t n, tk_bytes *out, char *err, size_t err_size);

/* ---- encoding in parts, for a caller that spreads the merging over
 * threads (tools/tokenize.c).  tk_encode is these three in a row. */

/* A stretch of the prepared text, or an added token (added >= 0). */
typedef struct {
    int64_t off, len;
    int32_t added;
} tk_piece;

/* The text with added tokens split out and each stretch normalized:
 * what the pre-tokenizer reads.  Owned by the encoder that prepared it,
 * valid until its next tk_prepare. */
typedef struct {
    const char *text;
    int64_t len;
} tk_prepared;

/* Checks text is UTF-8, splits out the added tokens and normalizes. */
int tk_prepare(tk_encoder *e, const char *text, size_t len, tk_prepared *out, char *err, size_t err_size);
/* The next pieces of the prepared text, at least `want` of them unless the
 * text ends first (then *done is set); appended to *pieces (count *n,
 * capacity *cap, grown with realloc).  Pieces are in text order. */
int tk_next_pieces(tk_encoder *e, tk_piece **pieces, int64_t *n, int64_t *cap, int64_t want, int *done, char *err,
                   size_t err_size);
/* Merges pieces[0 .. n) of text (as tk_next_pieces gave them: any encoder
 * of the same tokenizer may merge them) and appends their ids to out. */
int tk_merge_pieces(tk_encoder *e, const char *text, const tk_piece *pieces, int64_t n, tk_ids *out, char *err,
                    size_t err_size);

/* Append helpers (return -1 when out of memory). */
int tk_ids_push(tk_ids *a, int32_t id);
int tk_bytes_append(tk_bytes *b, const char *s, int64_t n);

#endif
