/* text_json: see text_json.h. */
#include "util/text_json.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/utf8.h"
#include "util/xalloc.h"

json_t *text_json(const char *s)
{
    json_t *j = json_string(s);
    if (j != NULL)
        return j;
    char *out = utf8_lossy(s);
    j = out != NULL ? json_string(out) : NULL;
    free(out);
    return j != NULL ? j : json_string("?");
}

size_t text_shown_into(char *out, size_t outlen, const char *s)
{
    size_t o = 0, n = strlen(s);
    if (outlen == 0)
        return 0;
    for (size_t i = 0; i < n;) {
        const unsigned char *u = (const unsigned char *)s + i;
        /* a valid UTF-8 sequence goes whole (or not at all), but for a C1
         * control, U+0080 to U+009F (c2 80 to c2 9f); a byte that starts
         * none goes alone, escaped when it is 0x80 to 0x9f, which a
         * terminal reading 8-bit controls takes for one (0x85 a line end,
         * 0x9b an escape) */
        size_t len = u[0] < 0x80 ? 1 : utf8_seq(u, n - i);
        bool c1 = len == 2 && u[0] == 0xc2 && u[1] <= 0x9f;
        bool esc = c1 || u[0] < 0x20 || u[0] == 0x7f || u[0] == '\\' || (len == 0 && u[0] <= 0x9f);
        if (len == 0)
            len = 1;
        size_t need = esc ? 4 * len : len;
        if (o + need >= outlen)
            break; /* never within an escape or a sequence */
        for (size_t k = 0; k < len; k++) {
            if (esc)
                o += (size_t)snprintf(out + o, 5, "\\%03o", u[k]);
            else
                out[o++] = (char)u[k];
        }
        i += len;
    }
    out[o] = '\0';
    return o;
}

char *text_shown(const char *s)
{
    size_t n = strlen(s) * 4 + 1;
    char *out = xmalloc(n);
    text_shown_into(out, n, s);
    return out;
}

/* Whether a cut of text_shown()'s <s> before s[i] falls between two of
 * its characters: not within a UTF-8 sequence, nor within an escape
 * ("\ooo": a backslash starts one and nothing else, itself written
 * \134). */
static bool shown_boundary(const char *s, size_t i)
{
    if (((unsigned char)s[i] & 0xc0) == 0x80)
        return false;
    for (size_t k = 1; k <= 3 && k <= i; k++)
        if (s[i - k] == '\\')
            return false;
    return true;
}

size_t text_shown_fit(char *out, size_t outlen, const char *s)
{
    char *all = text_shown(s);
    size_t n = strlen(all);
    if (n < outlen || outlen < 8) { /* whole, or no room for "..." and both ends */
        size_t len = text_shown_into(out, outlen, s);
        free(all);
        return len;
    }
    size_t keep = outlen - 1 - 3; /* the bytes of <all> that stay */
    size_t len = utf8_cut_middle(out, all, n, keep / 2, keep - keep / 2, shown_boundary);
    free(all);
    return len;
}
