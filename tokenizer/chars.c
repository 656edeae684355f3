/* chars.c: UTF-8, and GPT-2's byte alphabet (bytes_to_unicode): each
 * byte stands for one printable code point, so that a byte-level
 * vocabulary is text.  The printable bytes ! .. ~, ¡ .. ¬ and ® .. ÿ stand
 * for themselves; the other 68 for U+0100, U+0101, ... in byte order. */
#include "tokenizer_internal.h"

static int stands_for_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); }

uint32_t tk_byte_to_char(uint8_t b)
{
    if (stands_for_itself(b))
        return b;
    int k = 0; /* the bytes before b that do not stand for themselves */
    for (int i = 0; i < b; i++)
        k += !stands_for_itself(i);
    return 256 + (uint32_t)k;
}

int tk_char_to_byte(uint32_t c)
{
    /* U+0100 + k stands for the k-th byte that does not stand for itself */
    static const uint8_t others[68] = { 0,   1,   2,   3,   4,   5,   6,   7,   8,   9,   10,  11,  12,  13,
                                        14,  15,  16,  17,  18,  19,  20,  21,  22,  23,  24,  25,  26,  27,
                                        28,  29,  30,  31,  32,  127, 128, 129, 130, 131, 132, 133, 134, 135,
                                        136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149,
                                        150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 173 };
    if (c < 256)
        return stands_for_itself((int)c) ? (int)c : -1;
    return c < 256 + 68 ? others[c - 256] : -1;
}

int tk_utf8_decode(const unsigned char *s, int64_t n, uint32_t *cp)
{
    if (n <= 0)
        return 0;
    unsigned c = s[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || len > n)
        return 0;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    /* overlong forms, surrogates, beyond U+10FFFF */
    if ((len == 2 && v < 0x80) || (len == 3 && v < 0x800) || (len == 4 && v < 0x10000) || v > 0x10FFFF ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

int tk_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | (cp >> 6 & 0x3F)), out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F)), out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int64_t tk_utf8_invalid_at(const char *s, int64_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (int64_t i = 0; i < n;) {
        if (u[i] < 0x80) { /* ASCII runs: the common case */
            i++;
            continue;
        }
        uint32_t cp;
        int len = tk_utf8_decode(u + i, n - i, &cp);
        if (!len)
            return i;
        i += len;
    }
    return -1;
}
