/* admin_head: the admin server's request-head parser (see admin_head.h). */
#include "watch/admin_head.h"

#include <string.h>

#define ADMIN_METHOD_MAX 32 /* a longer method is a 400 */

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* "METHOD SP /target SP HTTP/1.x", without its CRLF, <n> bytes: exactly
 * one space between the parts, an origin-form target of visible ASCII. */
static bool parse_request_line(struct admin_head *h, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && i <= ADMIN_METHOD_MAX && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i > ADMIN_METHOD_MAX || i >= n || s[i] != ' ')
        return false;
    if (i == 3 && memcmp(s, "GET", 3) == 0)
        h->method = ADMIN_GET;
    else if (i == 4 && memcmp(s, "HEAD", 4) == 0)
        h->method = ADMIN_HEAD;
    else
        h->method = ADMIN_OTHER_METHOD;
    size_t t = ++i;
    while (i < n && (unsigned char)s[i] > ' ' && (unsigned char)s[i] < 0x7f)
        i++;
    if (i == t || s[t] != '/' || i >= n || s[i] != ' ')
        return false;
    size_t tlen = i - t;
    i++;
    if (n - i != 8 || memcmp(s + i, "HTTP/1.", 7) != 0 || s[i + 7] < '0' || s[i + 7] > '9')
        return false;
    /* the query string is ignored (and a '#', never sent by a client) */
    size_t plen = 0;
    while (plen < tlen && s[t + plen] != '?' && s[t + plen] != '#')
        plen++;
    if (plen == 8 && memcmp(s + t, "/metrics", 8) == 0)
        h->page = ADMIN_METRICS;
    else if (plen == 8 && memcmp(s + t, "/healthz", 8) == 0)
        h->page = ADMIN_HEALTHZ;
    else
        h->page = ADMIN_OTHER_PAGE;
    return true;
}

/* "Name: value" without its CRLF: a token, a colon right after it (no
 * space before it, no obs-fold), a value without control characters. Its
 * content is otherwise ignored: nothing here depends on a header. */
static bool header_line_ok(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    if (i == 0 || i >= n || s[i] != ':')
        return false;
    for (i++; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c < ' ' && c != '\t') || c == 0x7f)
            return false;
    }
    return true;
}

static bool lower_eq(const char *s, size_t n, const char *lit)
{
    if (strlen(lit) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]) != lit[i])
            return false;
    return true;
}

/* True when the Host value <v> (<n> bytes, blanks around it included)
 * names a host by a DNS name other than localhost: "[::1]:9128",
 * "127.0.0.1:9128", "localhost:9128" and "" do not. A browser that a web
 * page's DNS answer (rebind.attacker.test -> 127.0.0.1) pointed at the
 * admin port sends the page's name: no scraper asks a loopback server by
 * another name than these. */
static bool host_is_name(const char *v, size_t n)
{
    while (n > 0 && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (n == 0 || v[0] == '[')
        return false;
    const char *colon = memchr(v, ':', n);
    size_t h = colon != NULL ? (size_t)(colon - v) : n;
    if (lower_eq(v, h, "localhost") || lower_eq(v, h, "localhost."))
        return false;
    for (size_t i = 0; i < h; i++)
        if (!(v[i] == '.' || (v[i] >= '0' && v[i] <= '9')))
            return true;
    return h == 0; /* ":9128": no host at all */
}

enum admin_parse admin_head_parse(struct admin_head *h, const char *buf, size_t len)
{
    for (;;) {
        const char *line = buf + h->pos;
        const char *lf = memchr(line + h->scanned, '\n', len - h->pos - h->scanned);
        if (lf == NULL) {
            h->scanned = len - h->pos;
            return ADMIN_PARSE_MORE;
        }
        size_t n = (size_t)(lf - line);
        if (n == 0 || line[n - 1] != '\r')
            return ADMIN_PARSE_BAD; /* a bare LF */
        n--;
        h->pos += n + 2;
        h->scanned = 0;
        if (!h->have_line) {
            if (!parse_request_line(h, line, n))
                return ADMIN_PARSE_BAD;
            h->have_line = true;
        } else if (n == 0) {
            return ADMIN_PARSE_DONE;
        } else if (!header_line_ok(line, n)) {
            return ADMIN_PARSE_BAD;
        } else if (n >= 5 && lower_eq(line, 5, "host:") && host_is_name(line + 5, n - 5)) {
            h->host_is_name = true;
        }
    }
}
