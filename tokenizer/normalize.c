/* normalize.c: a stretch of text through the tokenizer's normalizers, in
 * order.  Unicode forms by utf8proc; ASCII is left as it is without a call
 * (it is in every normal form, and a boundary between two ASCII characters
 * is one no normalization moves), so English text costs a copy. */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer_internal.h"

static utf8proc_option_t form_options(tk_norm_kind kind)
{
    return kind == TK_NORM_NFC    ? UTF8PROC_STABLE | UTF8PROC_COMPOSE
           : kind == TK_NORM_NFD  ? UTF8PROC_STABLE | UTF8PROC_DECOMPOSE
           : kind == TK_NORM_NFKC ? UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT
                                  : UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
}

/* s[0 .. n) in a normal form, appended to out: through a buffer on the
 * stack when it is short (the common case: a word between two pairs of
 * ASCII characters), else utf8proc_map's. */
static int normalize_span(const char *s, int64_t n, utf8proc_option_t options, tk_bytes *out)
{
    utf8proc_int32_t buf[512];
    utf8proc_ssize_t len = utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, buf, 512, options);
    if (len >= 0 && len <= 512) {
        len = utf8proc_reencode(buf, len, options); /* composes, and writes UTF-8 over buf */
        return len < 0 ? -1 : tk_bytes_append(out, (const char *)buf, len);
    }
    utf8proc_uint8_t *norm = NULL;
    len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &norm, options);
    int rc = len < 0 ? -1 : tk_bytes_append(out, (const char *)norm, len);
    free(norm);
    return rc;
}

static int normal_form(tk_norm_kind kind, const char *s, int64_t n, tk_bytes *out)
{
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && (unsigned char)s[j] < 0x80)
            j++;
        if (j == n)
            return tk_bytes_append(out, s + i, n - i);
        /* s[j] is not ASCII: normalize from the character before it (a base
         * it may combine with) to the next pair of ASCII characters. */
        int64_t start = j > i ? j - 1 : j, end = j + 1;
        while (end < n && !((unsigned char)s[end - 1] < 0x80 && (unsigned char)s[end] < 0x80))
            end++;
        if (tk_bytes_append(out, s + i, start - i))
            return -1;
        if (normalize_span(s + start, end - start, form_options(kind), out))
            return -1;
        i = end;
    }
    return 0;
}

static int lowercase(const char *s, int64_t n, tk_bytes *out)
{
    for (int64_t i = 0; i < n;) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t len = utf8proc_iterate((const utf8proc_uint8_t *)s + i, n - i, &cp);
        if (len <= 0)
            return -1;
        char buf[4];
        if (tk_bytes_append(out, buf, tk_utf8_encode((uint32_t)utf8proc_tolower(cp), buf)))
            return -1;
        i += len;
    }
    return 0;
}

/* Unicode's White_Space property (what Rust's char::is_whitespace says). */
static int is_white_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static int strip(const tk_norm *norm, const char *s, int64_t n, tk_bytes *out)
{
    int64_t from = 0, to = n;
    uint32_t cp;
    int len;
    while (norm->left && from < to && (len = tk_utf8_decode((const unsigned char *)s + from, to - from, &cp)) &&
           is_white_space(cp))
        from += len;
    while (norm->right && to > from) {
        int64_t k = to - 1;
        while (k > from && ((unsigned char)s[k] & 0xC0) == 0x80)
            k--;
        if (!tk_utf8_decode((const unsigned char *)s + k, to - k, &cp) || !is_white_space(cp))
            break;
        to = k;
    }
    return tk_bytes_append(out, s + from, to - from);
}

static int replace(const tk_norm *norm, const char *s, int64_t n, tk_bytes *out)
{
    int64_t la = (int64_t)strlen(norm->a), lb = (int64_t)strlen(norm->b), i = 0;
    for (const char *hit; la > 0 && (hit = memmem(s + i, (size_t)(n - i), norm->a, (size_t)la)); i = hit - s + la)
        if (tk_bytes_append(out, s + i, hit - s - i) || tk_bytes_append(out, norm->b, lb))
            return -1;
    return tk_bytes_append(out, s + i, n - i);
}

static int apply(const tk_norm *norm, const char *s, int64_t n, tk_bytes *out)
{
    switch (norm->kind) {
    case TK_NORM_LOWERCASE:
        return lowercase(s, n, out);
    case TK_NORM_PREPEND:
        /* as Hugging Face's: nothing before an empty text */
        return (n > 0 ? tk_bytes_append(out, norm->a, (int64_t)strlen(norm->a)) : 0) || tk_bytes_append(out, s, n);
    case TK_NORM_REPLACE:
        return replace(norm, s, n, out);
    case TK_NORM_STRIP:
        return strip(norm, s, n, out);
    default:
        return normal_form(norm->kind, s, n, out);
    }
}

int tk_normalize(const tk_tokenizer *tk, const char *s, int64_t n, tk_bytes *out, char *err, size_t err_size)
{
    out->n = 0;
    if (tk->n_norm == 0)
        return tk_bytes_append(out, s, n) ? tk_error(err, err_size, "out of memory") : 0;
    tk_bytes tmp = { 0 };
    const char *in = s;
    int64_t in_n = n;
    int rc = 0;
    for (int i = 0; i < tk->n_norm && rc == 0; i++) {
        /* ping-pong: step i reads the previous step's output */
        tk_bytes *dst = (tk->n_norm - i) % 2 ? out : &tmp;
        dst->n = 0;
        rc = apply(&tk->norm[i], in, in_n, dst) ? tk_error(err, err_size, "normalizing: out of memory") : 0;
        in = dst->v ? dst->v : "";
        in_n = dst->n;
    }
    free(tmp.v);
    return rc;
}
