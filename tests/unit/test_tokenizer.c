/* test_tokenizer.c: the tokenizer (tokenizer/) on small tokenizer.json
 * files written here, each checking one rule against ids worked out by
 * hand: merges in rank order, byte fallback, unknown tokens, added tokens
 * (longest match, lstrip, rstrip), byte-level, ignore_merges, the
 * normalizers, the split behaviours, decoding, and the refusals.  The
 * real tokenizers (GPT-2, Llama 2 and 3, Qwen 3) are checked id for id
 * against an independent implementation in tests/test_tokenizer_matches_reference.sh. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tokenizer.h"

static char dir[] = "/tmp/test_tokenizer_XXXXXX";

static tk_tokenizer *load_json(const char *json, char *err, size_t n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fputs(json, f);
    fclose(f);
    return tk_load(path, err, n);
}

/* The ids of text, as "1 2 3" (or "error: ..."). */
static const char *encode(tk_tokenizer *tk, const char *text, size_t len)
{
    static char out[4096];
    char err[256];
    tk_encoder *e = tk_encoder_new(tk);
    tk_ids ids = { 0 };
    if (tk_encode(e, text, len, &ids, err, sizeof err)) {
        snprintf(out, sizeof out, "error: %s", err);
    } else {
        out[0] = 0;
        for (int64_t i = 0; i < ids.n; i++)
            snprintf(out + strlen(out), sizeof out - strlen(out), "%s%d", i ? " " : "", ids.v[i]);
    }
    free(ids.v);
    tk_encoder_free(e);
    return out;
}

static const char *decode(tk_tokenizer *tk, const char *ids_text)
{
    static char out[4096];
    int32_t ids[256];
    int n = 0;
    for (char *p = (char *)ids_text, *end; *p && n < 256; p = end) {
        ids[n++] = (int32_t)strtol(p, &end, 10);
        if (end == p)
            break;
    }
    tk_bytes b = { 0 };
    char err[256];
    if (tk_decode(tk, ids, n, &b, err, sizeof err))
        snprintf(out, sizeof out, "error: %s", err);
    else
        snprintf(out, sizeof out, "%s", b.v ? b.v : "");
    free(b.v);
    return out;
}

/* A Llama-2-like tokenizer: ▁ for spaces, byte fallback. */
static const char *llama_like(const char *merges)
{
    static char json[4096];
    snprintf(json, sizeof json,
             "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true},"
             "                    {\"id\": 11, \"content\": \"<|end|>\", \"special\": true},"
             "                    {\"id\": 12, \"content\": \"<|e\", \"special\": false, \"rstrip\": true}],"
             " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"▁\"},"
             "                  {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"▁\"}]},"
             " \"pre_tokenizer\": null,"
             " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
             "\"▁\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", "
             "\"content\": \" \", \"start\": 1, \"stop\": 0}]},"
             " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, \"fuse_unk\": true,"
             "   \"vocab\": {\"<unk>\": 0, \"▁\": 1, \"a\": 2, \"b\": 3, \"▁a\": 4, \"ab\": 5, \"▁ab\": 6,"
             "             \"<0xE2>\": 7, \"<0x98>\": 8, \"<0x83>\": 9, \"c\": 10},"
             "   \"merges\": [%s]}}",
             merges);
    return json;
}

static void test_merges_in_rank_order(void)
{
    char err[512];
    tk_tokenizer *tk = load_json(llama_like("\"▁ a\", \"a b\", \"▁a b\""), err, sizeof err);
    CHECK(tk != NULL);
    if (!tk) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK_STR("6", encode(tk, "ab", 2));      /* ▁a first (rank 0), then ▁a+b */
    CHECK_STR("6 10", encode(tk, "abc", 3));  /* c has no merge */
    CHECK_STR("6 6", encode(tk, "ab ab", 5)); /* ▁ab▁ab: one piece (no pre-tokenizer), two tokens */
    tk_free(tk);
    tk = load_json(llama_like("\"a b\", \"▁ a\", \"▁a b\""), err, sizeof err);
    CHECK_STR("1 5", encode(tk, "ab", 2)); /* a+b first (rank 0): ▁ and ab have no merge */
    tk_free(tk);
}

static void test_byte_fallback_unknown_and_added(void)
{
    char err[512];
    tk_tokenizer *tk = load_json(llama_like("\"▁ a\", \"a b\", \"▁a b\""), err, sizeof err);
    if (!tk)
        return;
    CHECK_STR("1 7 8 9", encode(tk, "\xE2\x98\x83", 3)); /* ☃ is not in the vocabulary: its bytes */
    CHECK_STR("1 0", encode(tk, "zz", 2));               /* no byte tokens for z: unknown, fused */
    CHECK_STR("4 11 4", encode(tk, "a<|end|>a", 9)); /* the longest added token, not <|e; each stretch ▁-prefixed */
    CHECK_STR("4 12 4", encode(tk, "a<|e   a", 8));  /* <|e takes the spaces after it (rstrip) */
    CHECK_STR("a<|end|> ab\xE2\x98\x83", decode(tk, "4 11 6 7 8 9"));
    CHECK_STR("ab", decode(tk, "6")); /* the leading space that Prepend made is stripped */
    CHECK(strncmp(decode(tk, "99"), "error: id 99", 12) == 0);
    CHECK_INT(13, tk_vocab_size(tk));
    CHECK_INT(11, tk_token_id(tk, "<|end|>"));
    CHECK_INT(-1, tk_end_of_text(tk));
    CHECK_STR("error: not UTF-8 at byte 1", encode(tk, "a\xFF", 2));
    tk_free(tk);
}

/* GPT-2's byte alphabet, written out here independently of chars.c. */
static void byte_alphabet(char names[256][8])
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)n++;
        if (cp < 0x80)
            snprintf(names[b], 8, "%c", (char)cp);
        else
            snprintf(names[b], 8, "%c%c", (char)(0xC0 | cp >> 6), (char)(0x80 | (cp & 0x3F)));
    }
}

static char *byte_level_json(int ignore_merges)
{
    char names[256][8];
    byte_alphabet(names);
    char *json = malloc(65536);
    int k = snprintf(json, 65536,
                     "{\"added_tokens\": [{\"id\": 260, \"content\": \"<|endoftext|>\", \"special\": true}],"
                     " \"normalizer\": {\"type\": \"NFC\"},"
                     " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
                     " \"decoder\": {\"type\": \"ByteLevel\"},"
                     " \"model\": {\"type\": \"BPE\", \"ignore_merges\": %s, \"vocab\": {",
                     ignore_merges ? "true" : "false");
    for (int b = 0; b < 256; b++)
        k += snprintf(json + k, 65536 - k, "\"%s%s\": %d, ", names[b][0] == '"' || names[b][0] == '\\' ? "\\" : "",
                      names[b], b);
    /* Ġt (256), he (257), Ġthe (258), Ġther (259): no merge makes Ġther */
    k += snprintf(
        json + k, 65536 - k,
        "\"Ġt\": 256, \"he\": 257, \"Ġthe\": 258, \"Ġther\": 259}, \"merges\": [\"Ġ t\", \"h e\", \"Ġt he\"]}}");
    return json;
}

static void test_byte_level(void)
{
    char err[512], *json = byte_level_json(0);
    tk_tokenizer *tk = load_json(json, err, sizeof err);
    free(json);
    CHECK(tk != NULL);
    if (!tk) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK_STR("116 257 258", encode(tk, "the the", 7)); /* GPT-2's regex: "the" (t he), " the" (Ġthe) */
    CHECK_STR("258 114", encode(tk, " ther", 5));       /* merges only: Ġther is not made */
    CHECK_STR("101 115 116 260", encode(tk, "est<|endoftext|>", 16));
    CHECK_STR("195 169", encode(tk, "e\xCC\x81", 3)); /* NFC: e + U+0301 is é, bytes C3 A9 */
    CHECK_STR(" the\xC3\xA9<|endoftext|>", decode(tk, "258 195 169 260"));
    CHECK_STR("\xEF\xBF\xBD", decode(tk, "195")); /* half a character: U+FFFD */
    CHECK_INT(260, tk_end_of_text(tk));
    tk_free(tk);
    json = byte_level_json(1);
    tk = load_json(json, err, sizeof err);
    free(json);
    CHECK_STR("259", encode(tk, " ther", 5)); /* ignore_merges: the piece is a token */
    tk_free(tk);
}

/* The pieces of text through one Split of pattern "-" and behaviour b. */
static const char *pieces(const char *behavior, const char *text)
{
    static char out[512], err[512];
    char json[2048];
    snprintf(json, sizeof json,
             "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"%s\"},"
             " \"model\": {\"type\": \"BPE\", \"unk_token\": \"?\", \"vocab\": {\"?\": 0}, \"merges\": []}}",
             behavior);
    tk_tokenizer *tk = load_json(json, err, sizeof err);
    if (!tk)
        return err;
    tk_encoder *e = tk_encoder_new(tk);
    tk_prepared prep;
    tk_piece *p = NULL;
    int64_t n = 0, cap = 0;
    int done = 0;
    out[0] = 0;
    if (tk_prepare(e, text, strlen(text), &prep, err, sizeof err) == 0 &&
        tk_next_pieces(e, &p, &n, &cap, 1000, &done, err, sizeof err) == 0)
        for (int64_t i = 0; i < n; i++)
            snprintf(out + strlen(out), sizeof out - strlen(out), "[%.*s]", (int)p[i].len, prep.text + p[i].off);
    free(p);
    tk_encoder_free(e);
    tk_free(tk);
    return out;
}

static void test_split_behaviours(void)
{
    CHECK_STR("[a][-][b][-][-][c]", pieces("Isolated", "a-b--c"));
    CHECK_STR("[a][b][c]", pieces("Removed", "a-b--c"));
    CHECK_STR("[a-][b-][-][c]", pieces("MergedWithPrevious", "a-b--c"));
    CHECK_STR("[a][-b][-][-c]", pieces("MergedWithNext", "a-b--c"));
}

static void test_refusals(void)
{
    static const struct {
        const char *json, *needle;
    } cases[] = {
        { "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model.type 'WordPiece' is not supported" },
        { "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "model.type 'Unigram' is not supported" },
        { "{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": \"BPE\"}}",
          "pre_tokenizer: pre-tokenizer 'Metaspace' is not supported" },
        { "{\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": "
          "\"BertNormalizer\"}]}, \"model\": {\"type\": \"BPE\"}}",
          "normalizer.normalizers[1]: normalizer 'BertNormalizer' is not supported" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a b\"]}}",
          "model.merges[0]: 'ab' is not in the vocabulary" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"unk_token\": \"<unk>\"}}",
          "model.unk_token '<unk>' is not in the vocabulary" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}}", "model.vocab[\"a\"]" },
        { "{\"model\": ", "not JSON" },
        { "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"},"
          " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
          "pre_tokenizer: the regex does not compile" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char err[512] = "";
        tk_tokenizer *tk = load_json(cases[i].json, err, sizeof err);
        CHECK(tk == NULL);
        CHECK_CONTAINS(err, cases[i].needle);
        CHECK_CONTAINS(err, "tokenizer.json");
        tk_free(tk);
    }
    char err[512] = "";
    CHECK(tk_load("/nonexistent/tokenizer.json", err, sizeof err) == NULL);
    CHECK_CONTAINS(err, "/nonexistent/tokenizer.json: cannot open the tokenizer");
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_merges_in_rank_order();
    test_byte_fallback_unknown_and_added();
    test_byte_level();
    test_split_behaviours();
    test_refusals();
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
    CHECK_DONE();
}
