/* fuzz_text: util/utf8.c and util/text_json.c on any bytes, as the names of
 * files and mounts, hosts and log values reach them.
 * Invariants: utf8_valid() agrees with a decoder written from RFC 3629's
 * table (code points, not byte ranges: no overlong form, no surrogate,
 * nothing above U+10FFFF, nothing cut short); utf8_lossy() gives valid
 * UTF-8, the text itself when it was valid; text_json() gives a string
 * (the text, or its lossy copy); text_shown() holds no control character
 * (below 0x20, 0x7f, a C1 control U+0080 to U+009F) and turns back into
 * the text when each \ooo is read as its byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/text_json.h"
#include "util/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* RFC 3629 by code point: the length a leading byte announces, then the
 * code point its continuation bytes make, refused when a shorter form would
 * hold it, when it is a surrogate or above U+10FFFF. */
static bool ref_valid(const uint8_t *s, size_t n)
{
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t len = c < 0x80             ? 1
                     : (c & 0xe0) == 0xc0 ? 2
                     : (c & 0xf0) == 0xe0 ? 3
                     : (c & 0xf8) == 0xf0 ? 4
                                          : 0;
        if (len == 0 || i + len > n)
            return false;
        uint32_t cp = len == 1 ? c : c & (0x7fu >> len);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + k] & 0x3fu);
        }
        if (cp < min_cp[len] || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
            return false;
        i += len;
    }
    return true;
}

static void check_shown(const char *s)
{
    char *shown = text_shown(s);
    size_t n = strlen(shown), o = 0;
    char *back = malloc(n + 1);
    if (back == NULL)
        abort();
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)shown[i];
        if (c < 0x20 || c == 0x7f)
            abort();
        if (c == 0xc2 && (unsigned char)shown[i + 1] >= 0x80 && (unsigned char)shown[i + 1] <= 0x9f)
            abort();
        if (c != '\\') {
            back[o++] = (char)c;
            continue;
        }
        int v = 0;
        for (int k = 1; k <= 3; k++) {
            char d = shown[i + (size_t)k];
            if (d < '0' || d > '7')
                abort();
            v = v * 8 + (d - '0');
        }
        back[o++] = (char)v;
        i += 3;
    }
    back[o] = '\0';
    if (strcmp(back, s) != 0)
        abort();
    free(back);
    free(shown);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (utf8_valid(data, size) != ref_valid(data, size))
        abort();

    /* The C-string functions: the text up to its first NUL. */
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    size_t n = strlen(s);
    bool valid = ref_valid((const uint8_t *)s, n);

    char *lossy = utf8_lossy(s);
    if (!ref_valid((const uint8_t *)lossy, strlen(lossy)) || (valid && strcmp(lossy, s) != 0))
        abort();

    json_t *j = text_json(s);
    if (j == NULL || !json_is_string(j) || strcmp(json_string_value(j), valid ? s : lossy) != 0)
        abort();
    json_decref(j);

    check_shown(s);
    free(lossy);
    free(s);
    return 0;
}
