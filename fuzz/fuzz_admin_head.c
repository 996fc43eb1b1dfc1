/* fuzz_admin_head: a request head as the --admin server receives it, in
 * pieces. Invariants: the verdict does not depend on how the bytes are
 * split (whole, one byte at a time, or cut at a point the input chooses);
 * a head that parses ends with CRLF CRLF at h.pos, within the input, its
 * first line is "TOKEN SP /TARGET SP HTTP/1.d" and the method and page
 * read back from it are those reported; a head that needs more input has
 * no LF that a complete head would have ended at. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "watch/admin.h"
#include "watch/admin_head.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static enum admin_parse feed(const char *s, size_t len, size_t step, struct admin_head *h)
{
    memset(h, 0, sizeof(*h));
    enum admin_parse r = ADMIN_PARSE_MORE;
    for (size_t i = step < len ? step : len; r == ADMIN_PARSE_MORE; i += step) {
        if (i > len)
            i = len;
        r = admin_head_parse(h, s, i);
        if (i == len)
            break;
    }
    return r;
}

static void check_done(const char *s, size_t len, const struct admin_head *h)
{
    if (h->pos < 4 || h->pos > len || memcmp(s + h->pos - 4, "\r\n\r\n", 4) != 0)
        abort();
    const char *sp1 = memchr(s, ' ', h->pos);
    if (sp1 == NULL || sp1 == s || sp1[1] != '/')
        abort();
    size_t mlen = (size_t)(sp1 - s);
    enum admin_method m = mlen == 3 && memcmp(s, "GET", 3) == 0    ? ADMIN_GET
                          : mlen == 4 && memcmp(s, "HEAD", 4) == 0 ? ADMIN_HEAD
                                                                   : ADMIN_OTHER_METHOD;
    if (m != h->method)
        abort();
    const char *eol = memchr(s, '\r', h->pos);
    if (eol == NULL || eol - s < 9 || memcmp(eol - 9, " HTTP/1.", 8) != 0)
        abort();
    const char *target = sp1 + 1;
    size_t tlen = (size_t)(eol - 9 - target);
    size_t plen = 0;
    while (plen < tlen && target[plen] != '?' && target[plen] != '#')
        plen++;
    for (size_t i = 0; i < tlen; i++)
        if ((unsigned char)target[i] <= ' ' || (unsigned char)target[i] >= 0x7f)
            abort();
    enum admin_page p = plen == 8 && memcmp(target, "/metrics", 8) == 0   ? ADMIN_METRICS
                        : plen == 8 && memcmp(target, "/healthz", 8) == 0 ? ADMIN_HEALTHZ
                                                                          : ADMIN_OTHER_PAGE;
    if (p != h->page)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > ADMIN_HEAD_MAX + 1)
        return 0;
    size_t cut = data[0] % 64 + 1;
    const char *s = (const char *)data + 1;
    size_t len = size - 1;
    struct admin_head whole, bytes, cuts;
    enum admin_parse r = feed(s, len, len > 0 ? len : 1, &whole);
    if (feed(s, len, 1, &bytes) != r || feed(s, len, cut, &cuts) != r)
        abort();
    if (r == ADMIN_PARSE_DONE) {
        if (bytes.pos != whole.pos || cuts.pos != whole.pos || bytes.method != whole.method ||
            bytes.page != whole.page || cuts.method != whole.method || cuts.page != whole.page)
            abort();
        check_done(s, len, &whole);
    } else if (r == ADMIN_PARSE_MORE) {
        /* every line so far was good, so neither an empty line after the
         * first nor a bare LF can be there */
        if (memmem(s, len, "\r\n\r\n", 4) != NULL)
            abort();
        for (const char *lf = memchr(s, '\n', len); lf != NULL;
             lf = memchr(lf + 1, '\n', len - (size_t)(lf + 1 - s)))
            if (lf == s || lf[-1] != '\r')
                abort();
    }
    return 0;
}
