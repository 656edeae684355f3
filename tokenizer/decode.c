/* decode.c: ids back to text.  Each token's decoded text was made when
 * loading (load.c: the per-token decoders, ByteLevel, Replace and
 * ByteFallback, applied in order); here they are joined, the Strip
 * decoder takes its leading characters off, and what is not UTF-8 (a
 * window cut inside a character, a stray byte token) becomes U+FFFD, as
 * Hugging Face's from_utf8_lossy does.  With no decoder at all, Hugging
 * Face joins the tokens with spaces; so does this. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

static int append_lossy(tk_bytes *out, const char *s, int64_t n)
{
    static const char replacement[] = "\xEF\xBF\xBD";
    for (int64_t i = 0; i < n;) {
        int64_t bad = tk_utf8_invalid_at(s + i, n - i);
        if (bad < 0)
            return tk_bytes_append(out, s + i, n - i);
        if (tk_bytes_append(out, s + i, bad) || tk_bytes_append(out, replacement, 3))
            return -1;
        i += bad + 1;
    }
    return 0;
}

int tk_decode(const tk_tokenizer *tk, const int32_t *ids, int64_t n, tk_bytes *out, char *err, size_t err_size)
{
    tk_bytes raw = { 0 };
    int rc = tk_bytes_append(&raw, "", 0);
    for (int64_t i = 0; i < n && rc == 0; i++) {
        if (ids[i] < 0 || ids[i] >= tk->n_ids || !tk->out[ids[i]]) {
            rc = tk_error(err, err_size, "id %d at position %lld is not in the vocabulary (%d ids)", ids[i],
                          (long long)i, tk->n_ids);
            break;
        }
        if (tk->n_dec == 0 && i > 0)
            rc = tk_bytes_append(&raw, " ", 1);
        if (rc == 0)
            rc = tk_bytes_append(&raw, tk->out[ids[i]], tk->out_len[ids[i]]);
    }
    int64_t from = 0, content = (int64_t)strlen(tk->strip_content);
    for (int k = 0; k < tk->strip_start && content > 0 && from + content <= raw.n &&
                    memcmp(raw.v + from, tk->strip_content, (size_t)content) == 0;
         k++)
        from += content;
    if (rc == 0 && append_lossy(out, raw.v + from, raw.n - from))
        rc = tk_error(err, err_size, "out of memory");
    free(raw.v);
    return rc ? -1 : 0;
}
