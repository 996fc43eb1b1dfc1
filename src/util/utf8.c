/* utf8: strict UTF-8 (see utf8.h). */
#include "util/utf8.h"

#include <string.h>

#include "util/xalloc.h"

size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else
        return 0;
    if (n < len)
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xbf)
            return 0;
    return len;
}

bool utf8_valid(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        size_t k = utf8_seq(s + i, len - i);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

char *utf8_lossy(const char *s)
{
    size_t n = strlen(s);
    char *out = xmalloc(n * 3 + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq((const unsigned char *)s + i, n - i);
        if (k == 0) {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3;
            i++;
            continue;
        }
        memcpy(out + o, s + i, k);
        o += k;
        i += k;
    }
    out[o] = '\0';
    return out;
}

bool utf8_between(const char *s, size_t i)
{
    return ((unsigned char)s[i] & 0xc0) != 0x80;
}

size_t utf8_cut_middle(char *out, const char *s, size_t n, size_t head, size_t tail,
                       bool (*between)(const char *s, size_t i))
{
    if (between == NULL)
        between = utf8_between;
    size_t from = n - tail;
    while (head > 0 && !between(s, head))
        head--; /* s[head], the first byte dropped, is no character's middle */
    while (from < n && !between(s, from))
        from++;
    /* memmove(): <out> may be <s>, the tail then moving toward the start,
     * past the "..." already written (head + 3 <= from) */
    memmove(out, s, head);
    memcpy(out + head, "...", 3);
    memmove(out + head + 3, s + from, n - from);
    out[head + 3 + (n - from)] = '\0';
    return head + 3 + (n - from);
}
