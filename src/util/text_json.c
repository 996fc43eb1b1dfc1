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
    size_t o = 0;
    if (outlen == 0)
        return 0;
    for (size_t i = 0; s[i] != '\0'; i++) {
        unsigned char c = (unsigned char)s[i], next = (unsigned char)s[i + 1];
        bool c1 = c == 0xc2 && next >= 0x80 && next <= 0x9f; /* s[n] is the NUL */
        size_t need = c >= 0x20 && c != 0x7f && c != '\\' && !c1 ? 1 : c1 ? 8 : 4;
        if (o + need >= outlen)
            break; /* never within an escape */
        if (need == 1) {
            out[o++] = (char)c;
            continue;
        }
        o += (size_t)snprintf(out + o, 5, "\\%03o", c);
        if (c1)
            o += (size_t)snprintf(out + o, 5, "\\%03o", (unsigned char)s[++i]);
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
