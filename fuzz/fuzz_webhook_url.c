/* fuzz_webhook_url: a webhook URL from a policy (http:// or https://), as
 * the sink parses it (util/weburl.c through parse_url) and as standard
 * error and metrics show it (weburl_label).
 * Invariants: a parsed URL has no '@' in its authority, a host of 1..253
 * bytes, a port in 1..65535 (443 or 80 when none is written), a path that
 * starts with '/' and holds no '#', a Host header that is the URL's
 * authority; https is the scheme written; a host that ip_literal_parse()
 * takes for an IP literal is one inet_pton() reads (a plain dotted quad,
 * or IPv6), so the sink's resolver reads it as the same address. Its label is either the URL
 * itself (no '@' in the authority, no path but "/", no query or fragment)
 * or the URL's scheme and authority without any USER:PASSWORD@ (no part of
 * its path), followed by "/...#" and 8 hex digits, either written as
 * text_shown() writes text (no control character, C1's included, gets
 * through); the label's authority holds no '@'; the same URL always gets
 * the same label.
 * Includes the .c to reach parse_url(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../src/watch/sink_webhook.c"
#include "util/ipaddr.h"
#include "util/text_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_parsed(const char *url, const struct webhook *w, bool https)
{
    size_t hl = strlen(w->host);
    const char *auth = url + (https ? 8 : 7);
    size_t al = strcspn(auth, "/?#");
    if (hl == 0 || hl > 253 || memchr(auth, '@', al) != NULL)
        abort();
    if (w->port == 0 || (https != (strncmp(url, "https://", 8) == 0)))
        abort();
    if (w->path[0] != '/' || strchr(w->path, '#') != NULL)
        abort();
    if (strlen(w->hosthdr) != al || memcmp(w->hosthdr, auth, al) != 0)
        abort();
    if (memchr(auth, ':', al) == NULL && auth[0] != '[' && w->port != (https ? 443 : 80))
        abort();
    struct ipaddr a;
    unsigned char ip[16];
    if (ip_literal_parse(w->host, hl, &a) != IP_LITERAL_NONE &&
        inet_pton(AF_INET, w->host, ip) != 1 && inet_pton(AF_INET6, w->host, ip) != 1)
        abort();
}

/* Where the authority of <s> starts: after "SCHEME://" (a letter, then
 * letters, digits, '+', '-', '.'), else at <s>. */
static const char *authority_of(const char *s)
{
    size_t i = strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.");
    bool letter = (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z');
    return letter && strncmp(s + i, "://", 3) == 0 ? s + i + 3 : s;
}

/* Whether <a> (<al> bytes) is the <n> bytes at <s> as text_shown() writes them. */
static bool shown_as(const char *a, size_t al, const char *s, size_t n)
{
    char *raw = strndup(s, n);
    if (raw == NULL)
        abort();
    char *shown = text_shown(raw);
    bool same = strlen(shown) == al && memcmp(a, shown, al) == 0;
    free(shown);
    free(raw);
    return same;
}

static void check_label(const char *url)
{
    char *a = weburl_label(url), *b = weburl_label(url);
    if (a == NULL || b == NULL || strcmp(a, b) != 0)
        abort();
    size_t al = strlen(a);
    const char *p = authority_of(url);
    size_t auth = strcspn(p, "/?#");
    const char *at = memrchr(p, '@', auth);
    const char *hp = at != NULL ? at + 1 : p;
    const char *rest = p + auth;
    if (at == NULL && (rest[0] == '\0' || strcmp(rest, "/") == 0)) {
        if (!shown_as(a, al, url, strlen(url)))
            abort();
    } else {
        static const char tail[] = "/...#";
        if (al < 13 || memcmp(a + al - 13, tail, 5) != 0)
            abort();
        for (size_t i = al - 8; i < al; i++)
            if (strchr("0123456789abcdef", a[i]) == NULL || a[i] == '\0')
                abort();
        /* the scheme and the authority without USER:PASSWORD@: nothing else
         * of the URL */
        size_t scheme = (size_t)(p - url), shown = (size_t)(rest - hp);
        char *kept = malloc(scheme + shown + 1);
        if (kept == NULL)
            abort();
        memcpy(kept, url, scheme);
        memcpy(kept + scheme, hp, shown);
        bool same = shown_as(a, al - 13, kept, scheme + shown);
        free(kept);
        if (!same)
            abort();
    }
    /* no control character, C1's included, gets through */
    for (size_t i = 0; i < al; i++)
        if ((unsigned char)a[i] < 0x20 || a[i] == 0x7f ||
            ((unsigned char)a[i] == 0xc2 && (unsigned char)a[i + 1] >= 0x80 &&
             (unsigned char)a[i + 1] <= 0x9f))
            abort();
    /* the label's own authority holds no user name or password */
    const char *lp = authority_of(a);
    if (memchr(lp, '@', strcspn(lp, "/?#")) != NULL)
        abort();
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *url = malloc(size + 1);
    if (url == NULL)
        return 0;
    memcpy(url, data, size);
    url[size] = '\0';
    struct webhook w;
    memset(&w, 0, sizeof(w));
    bool https = false;
    const char *why = NULL;
    if (parse_url(&w, url, &https, &why) == 0)
        check_parsed(url, &w, https);
    else if (why == NULL || why[0] == '\0')
        abort();
    free(w.host);
    free(w.path);
    free(w.hosthdr);
    check_label(url);
    free(url);
    return 0;
}
